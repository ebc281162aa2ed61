/*
 * HTTP/1.1 towards an upstream: request out, response in, one exchange at
 * a time. Both bodies stream through the hstream's pipes with the same
 * bounded buffers as the server side.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/base64.h>
#include <openssl/sha.h>

#include "core/buf.h"
#include "event/timer.h"
#include "http1/h1_client.h"
#include "http1/writer.h"
#include "net/sock.h"
#include "tls/tls.h"

#define OUT_MAX (128 * 1024)
#define OUT_LOW (16 * 1024)

enum { UC_CONNECTING, UC_HANDSHAKE, UC_READY, UC_ACTIVE, UC_IDLE };
enum { WQ_NONE, WQ_LENGTH, WQ_CHUNKED, WQ_TUNNEL, WQ_DONE };
enum { RP_HEAD, RP_BODY, RP_TUNNEL, RP_DONE };

static void process(struct h1_client *c);

static void schedule(void *arg)
{
    struct h1_client *c = arg;

    /* The connection's own event runs process() on the next turn: no
     * event of ours to keep per connection. */
    if (!c->closed)
        conn_wake(&c->conn);
}

static void on_io(struct conn *conn, void *arg)
{
    (void)conn;
    process(arg);
}

static void detach_stream(struct h1_client *c)
{
    struct hstream *s = c->s;

    if (s == NULL)
        return;
    c->s = NULL;
    s->req_body.wake_reader = NULL;
    s->resp_body.wake_writer = NULL;
    hstream_unref(s);
}

/* The exchange is over; the owner decides what happens to c next (it may
 * free it inside the hook, so nothing touches c afterwards). */
static void finish(struct h1_client *c, int ok, unsigned flags)
{
    int reusable = ok && c->keep_alive && !c->eof && buf_len(&c->in) == 0 &&
                   c->wq == WQ_DONE;

    if (!ok && c->s != NULL) {
        if (c->rp != RP_HEAD)
            hpipe_abort(&c->s->resp_body);
    }
    c->state = UC_READY;
    detach_stream(c);
    /* A parked connection holds no I/O buffer: the next exchange takes
     * one again when its bytes come. */
    h1_in_release(c->scratch, &c->in, 0);
    buf_release_if_empty(&c->out);
    /* Socket interest is left as it is: the owner parks the connection
     * (read interest on, as it is now) or abandons it (all off), and
     * either way two epoll_ctl calls per request are saved. */
    c->hooks->done(c->ctx, c, ok, reusable, flags);
}

static int write_head(struct h1_client *c)
{
    struct hstream *s = c->s;
    const struct http_request *q = &s->req;
    int with_cl =
        q->content_length >= 0 &&
        (q->has_body || slice_eq_str(q->method, "POST") ||
         slice_eq_str(q->method, "PUT") || slice_eq_str(q->method, "PATCH"));
    /* Host and our framing join the request's own fields in a copy: the
     * request itself stays as the client sent it. */
    size_t n = q->fields.n + 4;
    struct http_field *f = arena_alloc(&s->arena, n * sizeof(*f));
    size_t k = 0;
    char cl[24];

    if (f == NULL)
        return -1;
    f[k++] = (struct http_field){SLICE_LIT("host"), q->authority};
    /* A request without fields has no array (memcpy wants one). */
    if (q->fields.n > 0)
        memcpy(f + k, q->fields.v, q->fields.n * sizeof(*f));
    k += q->fields.n;
    /* Only a request without a body becomes a tunnel: one with a body
     * keeps its framing, so its bytes can never be read upstream as a
     * request of their own. */
    if (q->upgrade && !q->has_body && q->content_length <= 0) {
        f[k++] =
            (struct http_field){SLICE_LIT("connection"), SLICE_LIT("upgrade")};
        f[k++] = (struct http_field){SLICE_LIT("upgrade"), q->upgrade_proto};
        c->wq = WQ_TUNNEL;
    } else if (with_cl) {
        snprintf(cl, sizeof(cl), "%" PRId64, q->content_length);
        f[k++] = (struct http_field){SLICE_LIT("content-length"),
                                     arena_slice(&s->arena, slice_of(cl))};
        c->wq = q->content_length > 0 ? WQ_LENGTH : WQ_NONE;
        c->left = (uint64_t)q->content_length;
    } else if (q->has_body) {
        f[k++] = (struct http_field){SLICE_LIT("transfer-encoding"),
                                     SLICE_LIT("chunked")};
        c->wq = WQ_CHUNKED;
    } else {
        c->wq = WQ_NONE;
    }
    if (q->te_trailers)
        f[k++] = (struct http_field){SLICE_LIT("te"), SLICE_LIT("trailers")};
    if (h1_write_request_head(&c->out, q->method, q->path, f, k) < 0)
        return -1;
    if (c->wq == WQ_NONE)
        c->wq = WQ_DONE;
    c->requests++;
    return 0;
}

static int flush_out(struct h1_client *c)
{
    while (buf_len(&c->out) > 0) {
        ssize_t n = conn_write(&c->conn, buf_ptr(&c->out), buf_len(&c->out));
        if (n == CONN_AGAIN) {
            c->write_blocked = 1;
            return 0;
        }
        if (n < 0)
            return -1;
        buf_consume(&c->out, (size_t)n);
    }
    c->write_blocked = 0;
    buf_release_if_empty(&c->out);
    return 0;
}

/* Request body: from the pipe to the upstream. */
static int pump_request(struct h1_client *c)
{
    struct hpipe *p = &c->s->req_body;

    while (c->wq != WQ_DONE && !c->write_blocked) {
        size_t avail;
        const char *data = hpipe_peek(p, &avail);

        if (p->aborted)
            return -1;
        /* Nothing goes up a tunnel before the upstream's 101: until it
         * has switched protocols, what it reads is HTTP. */
        if (c->wq == WQ_TUNNEL && c->rp != RP_TUNNEL)
            return 0;
        if (avail == 0) {
            if (!p->eof)
                return 0;
            if (c->wq == WQ_CHUNKED &&
                h1_write_last_chunk(&c->out, p->trailers.v, p->trailers.n) < 0)
                return -1;
            if (c->wq == WQ_TUNNEL)
                c->conn.ops->shutdown(&c->conn);
            if (c->wq == WQ_LENGTH && c->left > 0)
                return -1; /* the client sent less than it announced */
            c->wq = WQ_DONE;
            return flush_out(c);
        }
        if (c->wq == WQ_CHUNKED) {
            size_t room = OUT_MAX - buf_len(&c->out);
            if (buf_len(&c->out) >= OUT_LOW || room < 64) {
                if (flush_out(c) < 0)
                    return -1;
                if (c->write_blocked)
                    return 0;
                continue;
            }
            if (avail > room - 32)
                avail = room - 32;
            if (h1_write_chunk(&c->out, data, avail) < 0)
                return -1;
            hpipe_consume(p, avail);
            if (flush_out(c) < 0)
                return -1;
            continue;
        }
        if (c->wq == WQ_LENGTH && avail > c->left)
            avail = (size_t)c->left;
        if (buf_len(&c->out) > 0) {
            /* A small body goes out with the head in one write. */
            if (c->wq == WQ_LENGTH && avail <= OUT_LOW &&
                buf_room(&c->out) >= avail &&
                buf_append(&c->out, data, avail) == 0) {
                hpipe_consume(p, avail);
                c->left -= avail;
                if (c->left == 0)
                    c->wq = WQ_DONE;
            }
            if (flush_out(c) < 0)
                return -1;
            continue;
        }
        {
            ssize_t n = conn_write(&c->conn, data, avail);
            if (n == CONN_AGAIN) {
                c->write_blocked = 1;
                return 0;
            }
            if (n < 0)
                return -1;
            hpipe_consume(p, (size_t)n);
            if (c->wq == WQ_LENGTH) {
                c->left -= (uint64_t)n;
                if (c->left == 0) {
                    c->wq = WQ_DONE;
                    return flush_out(c);
                }
            }
        }
    }
    return 0;
}

/* trim() drops the optional whitespace around a field value's token. */
static struct slice trim(struct slice v)
{
    while (v.n > 0 && (v.p[0] == ' ' || v.p[0] == '\t')) {
        v.p++;
        v.n--;
    }
    while (v.n > 0 && (v.p[v.n - 1] == ' ' || v.p[v.n - 1] == '\t'))
        v.n--;
    return v;
}

/* requested() is true when proto is one of the comma-separated protocols
 * of the request's Upgrade (ASCII case ignored). */
static int requested(struct slice list, struct slice proto)
{
    while (list.n > 0) {
        const char *comma = memchr(list.p, ',', list.n);
        size_t n = comma != NULL ? (size_t)(comma - list.p) : list.n;
        struct slice one = trim((struct slice){list.p, n});

        if (one.n > 0 && one.n == proto.n &&
            strncasecmp(one.p, proto.p, one.n) == 0)
            return 1;
        if (comma == NULL)
            break;
        list.p += n + 1;
        list.n -= n + 1;
    }
    return 0;
}

/*
 * switch_ok() checks an upstream's 101 against the request it answers:
 * its Upgrade names one protocol the client asked for (RFC 9110 7.8) and,
 * for WebSocket, its Sec-WebSocket-Accept is base64(SHA-1(key + GUID)) of
 * the client's Sec-WebSocket-Key (RFC 6455 4.2.2). Anything else would
 * leave the client speaking one protocol and the upstream another over
 * the tunnel; the caller answers 502. A WebSocket request without a key
 * (no real WebSocket client) is not held to the accept check.
 */
static int switch_ok(const struct hstream *s, const struct h1_response *r)
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    const struct http_field *key =
        http_fields_get(&s->req.fields, "sec-websocket-key");
    struct slice proto = {NULL, 0}, accept = {NULL, 0};
    int has_proto = 0, has_accept = 0;
    uint8_t md[SHA_DIGEST_LENGTH];
    uint8_t want[4 * ((SHA_DIGEST_LENGTH + 2) / 3) + 1];
    SHA_CTX sha;

    for (size_t i = 0; i < r->nheaders; i++) {
        struct slice name = {r->headers[i].name.p, r->headers[i].name.n};
        struct slice value = {r->headers[i].value.p, r->headers[i].value.n};
        if (slice_case_eq_str(name, "upgrade")) {
            if (has_proto++)
                return 0;
            proto = trim(value);
        } else if (slice_case_eq_str(name, "sec-websocket-accept")) {
            if (has_accept++)
                return 0;
            accept = trim(value);
        }
    }
    if (!has_proto || proto.n == 0 || !requested(s->req.upgrade_proto, proto))
        return 0;
    if (!slice_case_eq_str(proto, "websocket") || key == NULL)
        return 1;
    SHA1_Init(&sha);
    SHA1_Update(&sha, key->value.p, key->value.n);
    SHA1_Update(&sha, guid, sizeof(guid) - 1);
    SHA1_Final(md, &sha);
    EVP_EncodeBlock(want, md, sizeof(md));
    return has_accept && accept.n == strlen((const char *)want) &&
           memcmp(accept.p, want, accept.n) == 0;
}

static int parse_head(struct h1_client *c)
{
    struct hstream *s = c->s;
    struct h1_response r;
    struct h1_slice method = {s->req.method.p, s->req.method.n};
    const char *why = NULL;
    int status = 502, n;

    for (;;) {
        memset(&r, 0, sizeof(r));
        r.headers = c->scratch->hdrs;
        n = h1_parse_response(buf_ptr(&c->in), buf_len(&c->in), &c->conf->lim,
                              &method, &r, &why, &status);
        if (n <= 0)
            return n;
        /* Interim responses other than 101 are not passed on. */
        if (r.status >= 100 && r.status < 200 && r.status != 101) {
            buf_consume(&c->in, (size_t)n);
            continue;
        }
        break;
    }
    /* A 101 to a request that asked for no tunnel would leave the two
     * sides disagreeing on what the following bytes are. */
    if (r.status == 101 && (c->wq != WQ_TUNNEL || !switch_ok(s, &r)))
        return -1;
    s->resp.status = r.status;
    s->resp.content_length = -1;
    for (size_t i = 0; i < r.nheaders; i++) {
        struct slice name = {r.headers[i].name.p, r.headers[i].name.n};
        struct slice value = {r.headers[i].value.p, r.headers[i].value.n};
        if (slice_case_eq_str(name, "content-length")) {
            /* A response without a body (HEAD, 304) still tells the
             * length of the one a GET would get, 0 included (RFC 9110
             * sections 8.6 and 9.3.2): it is passed on, not dropped. */
            if (r.body == H1_BODY_NONE && r.status >= 200 && r.status != 204)
                s->resp.content_length = (int64_t)r.content_length;
            continue;
        }
        if (http_fields_add(&s->resp.fields, &s->arena, name, value, SIZE_MAX) <
            0)
            return -1;
    }
    http_fields_strip_hop(&s->resp.fields);
    c->keep_alive = r.keep_alive;
    switch (r.body) {
    case H1_BODY_LENGTH:
        s->resp.content_length = (int64_t)r.content_length;
        s->resp.has_body = r.content_length > 0;
        c->left = r.content_length;
        c->rp = r.content_length > 0 ? RP_BODY : RP_DONE;
        break;
    case H1_BODY_CHUNKED:
        s->resp.has_body = 1;
        h1_chunked_init(&c->chunked);
        /* Trailers count against the head's size limit too. */
        c->chunked.trailers_max = c->conf->lim.max_head;
        c->rp = RP_BODY;
        break;
    case H1_BODY_EOF:
        s->resp.has_body = 1;
        c->keep_alive = 0;
        c->rp = RP_BODY;
        break;
    default:
        c->rp = RP_DONE;
    }
    c->rb = (int)r.body;
    /* A declined upgrade: the request is complete, nothing is tunnelled. */
    if (s->req.upgrade && r.status != 101 && c->wq == WQ_TUNNEL)
        c->wq = WQ_DONE;
    if (r.status == 101) {
        c->rp = RP_TUNNEL;
        c->keep_alive = 0;
        s->resp.has_body = 1;
    }
    buf_consume(&c->in, (size_t)n);
    return 1;
}

/* Response body: from in to the pipe. Returns -1 on a framing error, -2
 * when the pipe failed (a body buffer refused under memory pressure). */
static int pump_response(struct h1_client *c)
{
    struct hstream *s = c->s;
    struct hpipe *p = &s->resp_body;

    while (buf_len(&c->in) > 0 && (c->rp == RP_BODY || c->rp == RP_TUNNEL)) {
        size_t room = hpipe_room(p), avail = buf_len(&c->in);

        /* Its reader is gone: the exchange ends now, and the read buffer
         * goes back with it, rather than waiting for the stream's end on
         * the client's side while thousands like it hold theirs. */
        if (p->aborted)
            return -2;

        if (room == 0) {
            p->was_full = 1;
            return 0;
        }
        if (c->rp == RP_TUNNEL || c->rb == H1_BODY_EOF) {
            size_t take = avail < room ? avail : room;
            hpipe_write(p, buf_ptr(&c->in), take);
            buf_consume(&c->in, take);
        } else if (c->rb == H1_BODY_LENGTH) {
            size_t take = avail < room ? avail : room;
            if (take > c->left)
                take = (size_t)c->left;
            hpipe_write(p, buf_ptr(&c->in), take);
            buf_consume(&c->in, take);
            c->left -= take;
            if (c->left == 0) {
                c->rp = RP_DONE;
                hpipe_finish(p);
            }
        } else {
            struct h1_slice data = {NULL, 0};
            const char *why = NULL;
            ssize_t used =
                h1_chunked_decode(&c->chunked, buf_ptr(&c->in),
                                  avail < room ? avail : room, &data, &why);
            if (used < 0)
                return -1;
            if (data.n > 0)
                hpipe_write(p, data.p, data.n);
            buf_consume(&c->in, (size_t)used);
            if (h1_chunked_done(&c->chunked)) {
                struct h1_slice tr;
                if (h1_chunked_trailers(&c->chunked, &tr) == 0 && tr.n > 0) {
                    size_t nf = 0;
                    int st = 502;
                    if (h1_parse_fields(tr.p, tr.n, &c->conf->lim,
                                        c->scratch->hdrs, c->scratch->cap, &nf,
                                        &why, &st) < 0)
                        return -1;
                    for (size_t i = 0; i < nf; i++) {
                        /* Framing and routing fields have no place in
                         * trailers: a next hop could act on them. */
                        if (!h1_trailer_allowed(c->scratch->hdrs[i].name))
                            continue;
                        http_fields_add(
                            &p->trailers, &s->arena,
                            (struct slice){c->scratch->hdrs[i].name.p,
                                           c->scratch->hdrs[i].name.n},
                            (struct slice){c->scratch->hdrs[i].value.p,
                                           c->scratch->hdrs[i].value.n},
                            SIZE_MAX);
                    }
                }
                c->rp = RP_DONE;
                hpipe_finish(p);
            } else if (used == 0) {
                return 0;
            }
        }
    }
    return 0;
}

static int read_in(struct h1_client *c)
{
    size_t room;
    char *p = h1_in_reserve(c->scratch, &c->in, &room);
    ssize_t n;

    /* No memory for a read buffer ends the connection: waiting would
     * leave a readable socket waking the loop on every turn. */
    if (p == NULL)
        return buf_room(&c->in) > 0 ? -1 : 0;
    n = conn_read(&c->conn, p, room);
    if (n > 0) {
        buf_commit(&c->in, (size_t)n);
        return 1;
    }
    h1_in_release(c->scratch, &c->in, 0);
    if (n == 0) {
        c->eof = 1;
        return 0;
    }
    return n == CONN_AGAIN ? 0 : -1;
}

static int want_read(const struct h1_client *c)
{
    if (c->eof || buf_room(&c->in) == 0)
        return 0;
    if (c->state == UC_IDLE)
        return 1;
    if (c->state != UC_ACTIVE || c->s == NULL)
        return 0;
    if (c->rp == RP_HEAD)
        return 1;
    if (c->rp == RP_BODY || c->rp == RP_TUNNEL)
        return hpipe_room(&c->s->resp_body) > 0;
    return 0;
}

static void connected(struct h1_client *c)
{
    timer_cancel(&c->timer);
    c->state = c->s != NULL ? UC_ACTIVE : UC_READY;
    if (c->s != NULL && write_head(c) < 0) {
        finish(c, 0, HFLAG_UPE);
        return;
    }
    schedule(c);
}

static void process(struct h1_client *c)
{
    int progress;

    if (c->closed)
        return;
    if (c->state == UC_CONNECTING) {
        if (sock_error(c->conn.fd) != 0) {
            c->closed = 1;
            conn_want(&c->conn, 0, 0);
            detach_stream(c); /* the next attempt takes the stream */
            c->hooks->connect_failed(c->ctx, c, 0);
            return;
        }
        if (c->conn.tls == NULL) {
            connected(c);
            return;
        }
        c->state = UC_HANDSHAKE;
    }
    if (c->state == UC_HANDSHAKE) {
        int r = c->conn.ops->handshake(&c->conn);
        if (r < 0) {
            /* A bad certificate or name counts as a failed connection:
             * the next endpoint may be fine. */
            c->closed = 1;
            conn_want(&c->conn, 0, 0);
            detach_stream(c);
            c->hooks->connect_failed(c->ctx, c, 0);
            return;
        }
        if (r == 0) {
            conn_want(&c->conn, !c->conn.read_needs_write,
                      c->conn.read_needs_write);
            return;
        }
        connected(c);
        return;
    }
    if (c->state == UC_IDLE) {
        /* Anything from an idle upstream (data or FIN) ends it. */
        char byte;
        ssize_t n = conn_read(&c->conn, &byte, 1);
        if (n == CONN_AGAIN) {
            conn_want(&c->conn, 1, 0);
            return;
        }
        c->closed = 1;
        conn_want(&c->conn, 0, 0);
        c->hooks->idle_closed(c->ctx, c);
        return;
    }
    if (c->state != UC_ACTIVE || c->s == NULL)
        return;
    do {
        progress = 0;
        /* A write error may mean the upstream answered early and closed
         * (413 to an upload): stop sending, but read on, since the answer
         * may be waiting in the socket. */
        if (!c->write_failed && (flush_out(c) < 0 || pump_request(c) < 0)) {
            c->write_failed = 1;
            c->keep_alive = 0;
            c->write_blocked = 0;
        }
        /* Under the last memory action no response body can be buffered:
         * an exchange still waiting for its head ends now, before its
         * bytes are read into a buffer they could never leave. */
        if (c->rp == RP_HEAD && buf_len(&c->in) == 0 &&
            hpipe_would_refuse(&c->s->resp_body)) {
            finish(c, 0, HFLAG_OM);
            return;
        }
        if (want_read(c)) {
            int r = read_in(c);
            if (r < 0)
                goto fail;
            progress |= r;
        }
        if (c->rp == RP_HEAD && buf_len(&c->in) > 0) {
            int r = parse_head(c);
            if (r < 0) {
                finish(c, 0, HFLAG_UPE);
                return;
            }
            if (r > 0) {
                /* The owner may drop the exchange on seeing the head (to
                 * retry it): the body's end is marked only after. */
                c->hooks->head(c->ctx, c);
                if (c->closed || c->s == NULL)
                    return;
                if (c->rp == RP_DONE)
                    hpipe_finish(&c->s->resp_body);
                progress = 1;
            }
        }
        int pumped = pump_response(c);
        if (pumped < 0) {
            finish(c, 0, pumped == -2 ? HFLAG_OM : HFLAG_UPE);
            return;
        }
        if (c->rp == RP_DONE &&
            (c->wq == WQ_DONE || c->wq == WQ_TUNNEL || c->write_failed)) {
            /* An upstream may answer before reading the whole request
             * body: the exchange is over, the connection is not reusable. */
            finish(c, 1, 0);
            return;
        }
    } while (progress);
    if (c->eof) {
        if (c->rp == RP_TUNNEL || (c->rp == RP_BODY && c->rb == H1_BODY_EOF)) {
            if (buf_len(&c->in) == 0) {
                hpipe_finish(&c->s->resp_body);
                c->rp = RP_DONE;
                c->keep_alive = 0;
                if (c->wq == WQ_DONE || c->wq == WQ_TUNNEL) {
                    finish(c, 1, 0);
                    return;
                }
            }
        } else if (c->rp != RP_DONE) {
            finish(c, 0, HFLAG_UC);
            return;
        }
    }
    conn_want(&c->conn, want_read(c), c->write_blocked);
    return;
fail:
    finish(c, 0, HFLAG_UC);
}

static void on_timer(void *arg)
{
    struct h1_client *c = arg;

    if (c->state == UC_CONNECTING || c->state == UC_HANDSHAKE) {
        c->closed = 1;
        conn_want(&c->conn, 0, 0);
        detach_stream(c);
        c->hooks->connect_failed(c->ctx, c, 1);
    } else if (c->state == UC_IDLE) {
        c->closed = 1;
        conn_want(&c->conn, 0, 0);
        c->hooks->idle_closed(c->ctx, c);
    }
}

struct h1_client *h1_client_connect(struct event_base *base,
                                    const struct addr *a,
                                    struct ssl_ctx_st *tls, const char *sni,
                                    const struct h1_client_conf *conf,
                                    const struct h1_client_hooks *hooks,
                                    void *ctx, struct h1_scratch *scratch)
{
    struct h1_client *c;
    int inprog;
    int fd = sock_connect(a, &inprog);

    if (fd < 0)
        return NULL;
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        return NULL;
    }
    conn_init(&c->conn, base, fd, on_io, c);
    c->base = base;
    c->conf = conf;
    c->hooks = hooks;
    c->ctx = ctx;
    c->scratch = scratch;
    LIST_INIT(&c->link);
    buf_init(&c->in, conf->lim.max_head);
    buf_init(&c->out, OUT_MAX);
    timer_init(&c->timer, base, on_timer, c);
    if (tls != NULL && tls_conn_connect(&c->conn, tls, sni) < 0) {
        h1_client_free(c);
        return NULL;
    }
    c->state = UC_CONNECTING;
    if (inprog) {
        timer_arm(&c->timer, conf->connect_timeout_ms);
        conn_want(&c->conn, 0, 1);
    } else {
        schedule(c);
    }
    return c;
}

struct h1_client *h1_client_connect_via(struct event_base *base,
                                        const struct conn_opener *op,
                                        const struct h1_client_conf *conf,
                                        const struct h1_client_hooks *hooks,
                                        void *ctx, struct h1_scratch *scratch)
{
    struct h1_client *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    if (op->open(op->arg, &c->conn, on_io, c) < 0) {
        free(c);
        return NULL;
    }
    c->base = base;
    c->conf = conf;
    c->hooks = hooks;
    c->ctx = ctx;
    c->scratch = scratch;
    LIST_INIT(&c->link);
    buf_init(&c->in, conf->lim.max_head);
    buf_init(&c->out, OUT_MAX);
    timer_init(&c->timer, base, on_timer, c);
    /* No socket to connect: the transport's handshake is the connect. */
    c->state = UC_HANDSHAKE;
    timer_arm(&c->timer, conf->connect_timeout_ms);
    schedule(c);
    return c;
}

void h1_client_set_owner(struct h1_client *c,
                         const struct h1_client_hooks *hooks, void *ctx)
{
    c->hooks = hooks;
    c->ctx = ctx;
}

void h1_client_start(struct h1_client *c, struct hstream *s)
{
    c->s = hstream_ref(s);
    c->rp = RP_HEAD;
    c->wq = WQ_NONE;
    c->keep_alive = 0;
    c->write_blocked = 0;
    c->write_failed = 0;
    s->req_body.wake_reader = schedule;
    s->req_body.reader = c;
    s->resp_body.wake_writer = schedule;
    s->resp_body.writer = c;
    h1_chunked_dispose(&c->chunked);
    h1_chunked_init(&c->chunked);
    if (c->state == UC_CONNECTING || c->state == UC_HANDSHAKE)
        return; /* connected() sends it */
    /* The idle timeout, armed again when the connection is back in the
     * pool: paused, not cancelled (h1_client_free() disposes of it). */
    timer_pause(&c->timer);
    c->state = UC_ACTIVE;
    if (write_head(c) < 0) {
        finish(c, 0, HFLAG_UPE);
        return;
    }
    schedule(c);
}

void h1_client_idle(struct h1_client *c)
{
    c->state = UC_IDLE;
    timer_arm(&c->timer, c->conf->idle_timeout_ms);
    conn_want(&c->conn, 1, 0);
}

void h1_client_abandon(struct h1_client *c)
{
    if (c->closed)
        return;
    /* The proxy answers the client itself (timeout, client gone): the
     * response pipe is left alone for it. */
    c->closed = 1;
    detach_stream(c);
    timer_cancel(&c->timer);
    conn_want(&c->conn, 0, 0);
}

void h1_client_free(struct h1_client *c)
{
    if (c == NULL)
        return;
    c->closed = 1;
    if (c->s != NULL && c->rp != RP_DONE)
        hpipe_abort(&c->s->resp_body);
    detach_stream(c);
    timer_dispose(&c->timer);
    conn_close(&c->conn);
    h1_chunked_dispose(&c->chunked);
    h1_in_release(c->scratch, &c->in, 1);
    buf_dispose(&c->in);
    buf_dispose(&c->out);
    list_del(&c->link);
    free(c);
}
