/*
 * The server side of HTTP/1.x: reads requests from a client connection,
 * hands each to the proxy as an hstream, and writes the responses back in
 * order. One request is in flight at a time; pipelined requests wait in
 * the input buffer (bounded by the head limit) until the response before
 * them is complete, so responses can never be reordered.
 */
#include "config.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/units.h"
#include "event/timer.h"
#include "http1/h1_server.h"
#include "http1/writer.h"
#include "net/conn.h"

#define OUT_MAX (128 * 1024)
#define OUT_LOW (16 * 1024) /* frame more body only below this */
#define LINGER_MS 2000
#define DRAIN_IDLE_GRACE_MS 1000
#define LINGER_BYTES (1024 * 1024)

enum rq_state { RQ_HEAD, RQ_BODY, RQ_DONE, RQ_TUNNEL };
enum rs_state { RS_WAIT, RS_BODY, RS_DONE };
enum rb_mode { RB_NONE, RB_LENGTH, RB_CHUNKED, RB_EOF, RB_TUNNEL };

struct h1_server {
    struct conn *c;
    struct event_base *base;
    struct timer *timer; /* the owner's storage (h1_server_new) */
    const struct http_conn_conf *conf;
    struct h1_server_hooks hooks;
    struct bufpool *pool;
    struct h1_scratch *scratch;
    struct buf in;
    struct buf out;
    struct hstream *s;
    enum rq_state rq;
    enum rs_state rs;
    enum rb_mode rb;
    uint64_t rq_left;
    /* The decoder of a chunked request body, from the stream's arena:
     * only while such a body is read, never on an idle connection. */
    struct h1_chunked *chunked;
    unsigned keep_alive : 1;
    unsigned closing : 1; /* close once out is flushed */
    unsigned closed : 1;
    unsigned eof : 1; /* the client sent FIN */
    unsigned draining : 1;
    unsigned write_blocked : 1;
    unsigned timer_head : 1; /* the timer runs the headers timeout */
    unsigned lingering : 1;  /* closing: dropping the client's last bytes */
    unsigned head_sent : 1;  /* a byte of the response head left */
    unsigned reset : 1;      /* the proxy gave up on the response: close */
    /* Bytes of out ahead of the response head (a 100 Continue not yet
     * written): the head is what follows them. */
    size_t head_at;
    unsigned bufs : 2; /* I/O buffers with storage, as last counted */
    size_t linger_left;
    int minor;
};

static void process(struct h1_server *hs);
static void linger(struct h1_server *hs);

static void stat_add(uint64_t *c, uint64_t n)
{
    __atomic_store_n(c, *c + n, __ATOMIC_RELAXED);
}

/* Brings the worker's buffer counters up to date with what hs holds now.
 * Called where the server goes back to the loop, so a buffer taken and
 * released within one turn is not counted. */
static void count_bufs(struct h1_server *hs)
{
    unsigned n = (hs->in.data != NULL) + (hs->out.data != NULL);

    if (n == hs->bufs)
        return;
    if (hs->scratch->bufs_taken != NULL) {
        if (n > hs->bufs)
            stat_add(hs->scratch->bufs_taken, n - hs->bufs);
        else
            stat_add(hs->scratch->bufs_released, hs->bufs - n);
    }
    hs->bufs = n & 3u;
}

static void schedule(void *arg)
{
    struct h1_server *hs = arg;

    /* The connection's own event runs process() on the next turn: no
     * event of ours to keep per connection. */
    if (!hs->closed)
        conn_wake(hs->c);
}

static void on_io(struct conn *c, void *arg)
{
    (void)c;
    process(arg);
}

/* The stream is over for this side: the proxy hears of it once. */
static void stream_release(struct h1_server *hs)
{
    struct hstream *s = hs->s;

    if (s == NULL)
        return;
    hs->s = NULL;
    s->down_done = 1;
    s->req_body.wake_writer = NULL;
    s->resp_body.wake_reader = NULL;
    if (hs->chunked != NULL) {
        h1_chunked_dispose(hs->chunked); /* before its arena goes */
        hs->chunked = NULL;
    }
    hs->hooks.handler->on_down_done(hs->hooks.ctx, s);
    hstream_unref(s);
}

static void server_close(struct h1_server *hs)
{
    if (hs->closed)
        return;
    hs->closed = 1;
    if (hs->s != NULL) {
        if (hs->rq == RQ_BODY || hs->rq == RQ_TUNNEL)
            hpipe_abort(&hs->s->req_body);
        /* Not the client's doing when the proxy reset the stream. */
        hs->s->flags |= hs->rs == RS_DONE || hs->reset ? 0 : HFLAG_DC;
        stream_release(hs);
    }
    timer_cancel(hs->timer);
    conn_want(hs->c, 0, 0);
    hs->hooks.closed(hs->hooks.owner);
}

/* A local error answer for a request we could not parse; the connection
 * closes after it. */
static void fail_request(struct h1_server *hs, int status, const char *why)
{
    char body[128];
    int n = snprintf(body, sizeof(body), "%s\n", why);

    hs->hooks.protocol_error(hs->hooks.ctx, status, why);
    buf_printf(&hs->out,
               "HTTP/1.1 %d %s\r\ncontent-type: text/plain\r\n"
               "content-length: %d\r\nconnection: close\r\n\r\n%s",
               status, h1_reason(status), n, body);
    hs->closing = 1;
    hs->keep_alive = 0;
}

static void start_head_wait(struct h1_server *hs)
{
    hs->rq = RQ_HEAD;
    hs->rs = RS_WAIT;
    hs->rb = RB_NONE;
    hs->timer_head = buf_len(&hs->in) > 0;
    timer_arm(hs->timer, hs->timer_head ? hs->conf->headers_timeout_ms
                                        : hs->conf->idle_timeout_ms);
}

/* Splits an absolute-form target (http://host/path) into authority and
 * path, as a proxy must accept it (RFC 9112 3.2.2). */
static int split_absolute(struct slice target, struct slice *authority,
                          struct slice *path)
{
    const char *p = target.p, *end = target.p + target.n, *slash;
    size_t skip;

    if (target.n >= 7 && strncasecmp(p, "http://", 7) == 0)
        skip = 7;
    else if (target.n >= 8 && strncasecmp(p, "https://", 8) == 0)
        skip = 8;
    else
        return -1;
    p += skip;
    slash = memchr(p, '/', (size_t)(end - p));
    authority->p = p;
    authority->n = slash ? (size_t)(slash - p) : (size_t)(end - p);
    if (slash != NULL) {
        path->p = slash;
        path->n = (size_t)(end - slash);
    } else {
        *path = SLICE_LIT("/");
    }
    return authority->n > 0 ? 0 : -1;
}

/*
 * upgrade_tunnelled() decides whether an Upgrade request may become a
 * tunnel after the upstream's 101. Only the protocols strait relays are
 * (the listener's upgradeTypes, Envoy's upgrade_configs: websocket by
 * default), and only a request without a body:
 * the bytes after the head of a request that has one are its body, framed
 * by Content-Length or chunked, and relaying them raw to an upstream that
 * does not switch protocols would run them there as a second request
 * (request smuggling). Any other Upgrade (h2c included) is forwarded as a
 * plain request without its Upgrade header, which strip_hop removes.
 */
static int upgrade_tunnelled(const struct h1_server *hs,
                             const struct h1_request *r, struct slice proto)
{
    const char *list = hs->conf->upgrade_types;

    if (r->body == H1_BODY_CHUNKED ||
        (r->body == H1_BODY_LENGTH && r->content_length > 0) || proto.n == 0)
        return 0;
    /* The listener's list is tokens joined by commas, checked at load. */
    while (*list != '\0') {
        size_t n = strcspn(list, ",");

        if (n == proto.n && strncasecmp(list, proto.p, n) == 0)
            return 1;
        list += n + (list[n] == ',');
    }
    return 0;
}

static int build_request(struct h1_server *hs, struct hstream *s,
                         const struct h1_request *r)
{
    struct http_request *q = &s->req;
    struct slice target = {r->target.p, r->target.n};

    q->method =
        arena_slice(&s->arena, (struct slice){r->method.p, r->method.n});
    q->scheme = hs->conf->tls ? SLICE_LIT("https") : SLICE_LIT("http");
    q->version = r->minor ? HTTP_11 : HTTP_10;
    /* The asterisk form (OPTIONS *, RFC 9112 section 3.2.4) asks about the
     * server as a whole: it is forwarded as it is, to the Host's route. */
    if ((target.n > 0 && target.p[0] == '/') ||
        (target.n == 1 && target.p[0] == '*' &&
         slice_eq_str(q->method, "OPTIONS"))) {
        q->path = arena_slice(&s->arena, target);
        q->authority =
            arena_slice(&s->arena, (struct slice){r->host.p, r->host.n});
    } else {
        struct slice auth, path;
        if (split_absolute(target, &auth, &path) < 0)
            return -1;
        q->authority = arena_slice(&s->arena, auth);
        q->path = arena_slice(&s->arena, path);
    }
    for (size_t i = 0; i < r->nheaders; i++) {
        struct slice name = {r->headers[i].name.p, r->headers[i].name.n};
        struct slice value = {r->headers[i].value.p, r->headers[i].value.n};
        if (slice_case_eq_str(name, "host") ||
            slice_case_eq_str(name, "content-length") ||
            slice_case_eq_str(name, "expect"))
            continue;
        /* HTTP2-Settings belongs to an h2c upgrade, which is never
         * tunnelled (see upgrade_tunnelled()): it means nothing to the
         * upstream and is dropped with the Upgrade header. */
        if (slice_case_eq_str(name, "http2-settings"))
            continue;
        if (slice_case_eq_str(name, "upgrade"))
            q->upgrade_proto = arena_slice(&s->arena, value);
        if (http_fields_add(&q->fields, &s->arena, name, value, SIZE_MAX) < 0)
            return -1;
    }
    http_fields_strip_hop(&q->fields);
    q->expect_continue = r->expect_continue;
    q->upgrade = r->upgrade && upgrade_tunnelled(hs, r, q->upgrade_proto);
    q->te_trailers = r->te_trailers;
    if (r->body == H1_BODY_LENGTH) {
        q->content_length = (int64_t)r->content_length;
        q->has_body = r->content_length > 0;
    } else if (r->body == H1_BODY_CHUNKED) {
        q->content_length = -1;
        q->has_body = 1;
    } else {
        q->content_length = 0;
    }
    return 0;
}

/* Parses the next request head from in and hands it to the proxy. */
static void parse_head(struct h1_server *hs)
{
    struct h1_request r;
    const char *why = NULL;
    int status = 400;
    int n;
    struct hstream *s;

    memset(&r, 0, sizeof(r));
    r.headers = hs->scratch->hdrs;
    n = h1_parse_request(buf_ptr(&hs->in), buf_len(&hs->in), &hs->conf->lim, &r,
                         &why, &status);
    if (n == 0) {
        if (buf_len(&hs->in) > 0 && !hs->timer_head) {
            hs->timer_head = 1;
            timer_arm(hs->timer, hs->conf->headers_timeout_ms);
        }
        return;
    }
    if (n < 0) {
        fail_request(hs, status, why ? why : "bad request");
        return;
    }
    /* Armed again when the response is sent: paused, not cancelled. */
    timer_pause(hs->timer);
    s = hstream_new(hs->pool, hs->conf->body_cap);
    if (s == NULL || build_request(hs, s, &r) < 0) {
        hstream_unref(s);
        fail_request(hs, 400, "bad request target");
        return;
    }
    hs->minor = r.minor;
    hs->keep_alive = r.keep_alive && !hs->draining;
    buf_consume(&hs->in, (size_t)n);
    hs->s = s;
    hs->rs = RS_WAIT;
    if (r.body == H1_BODY_LENGTH && r.content_length > 0) {
        hs->rq = RQ_BODY;
        hs->rq_left = r.content_length;
    } else if (r.body == H1_BODY_CHUNKED) {
        hs->rq = RQ_BODY;
        hs->chunked = arena_alloc(&s->arena, sizeof(*hs->chunked));
        if (hs->chunked == NULL) {
            hs->s = NULL;
            hstream_unref(s);
            fail_request(hs, 500, "out of memory");
            return;
        }
        h1_chunked_init(hs->chunked);
        /* Trailers count against the head's size limit too. */
        hs->chunked->trailers_max = hs->conf->lim.max_head;
    } else {
        hs->rq = RQ_DONE;
    }
    return;
}

static const struct hstream_down_ops down_ops;

static void dispatch(struct h1_server *hs)
{
    struct hstream *s = hs->s;

    s->down = &down_ops;
    s->down_ctx = hs;
    s->req_body.wake_writer = schedule;
    s->req_body.writer = hs;
    s->resp_body.wake_reader = schedule;
    s->resp_body.reader = hs;
    /* An Upgrade request's body is the tunnel that may follow the 101:
     * it ends only when the client stops sending. */
    if (hs->rq == RQ_DONE && !s->req.upgrade)
        hpipe_finish(&s->req_body);
    hs->hooks.handler->on_request(hs->hooks.ctx, s);
}

/* Moves request body bytes from in to the request pipe. */
/* body_error() ends a request whose body (or its trailers) is malformed
 * or over a limit: the proxy's side is aborted, the client gets status
 * unless a response has started, and the connection closes after it, as
 * the rest of its bytes can no longer be framed. */
static void body_error(struct h1_server *hs, int status, const char *why)
{
    struct hstream *s = hs->s;

    hpipe_abort(&s->req_body);
    hs->hooks.protocol_error(hs->hooks.ctx, status,
                             why ? why : "bad chunked body");
    s->flags |= HFLAG_DPE;
    /* Set before the answer's head is written, so it says
     * connection: close. */
    hs->keep_alive = 0;
    if (!s->resp_started)
        hstream_respond(s, status,
                        status == 431 ? "request trailers too large\n"
                                      : "bad chunked body\n",
                        NULL, NULL);
    hs->rq = RQ_DONE;
}

static void pump_request_body(struct h1_server *hs)
{
    struct hstream *s = hs->s;

    while (buf_len(&hs->in) > 0 && hs->rq == RQ_BODY) {
        size_t room = hpipe_room(&s->req_body);
        size_t avail = buf_len(&hs->in);

        if (s->req_body.aborted) {
            /* The proxy gave up on the body (e.g. answered early). */
            hs->keep_alive = 0;
            return;
        }
        if (room == 0) {
            s->req_body.was_full = 1;
            return;
        }
        if (s->req.content_length >= 0) {
            size_t take = avail < room ? avail : room;
            if (take > hs->rq_left)
                take = (size_t)hs->rq_left;
            hpipe_write(&s->req_body, buf_ptr(&hs->in), take);
            buf_consume(&hs->in, take);
            s->bytes_in += take;
            hs->rq_left -= take;
            if (hs->rq_left == 0) {
                hs->rq = RQ_DONE;
                hpipe_finish(&s->req_body);
            }
        } else {
            /* Give the decoder no more than fits, so any data it returns
             * fits the pipe. */
            struct h1_slice data = {NULL, 0};
            const char *why = NULL;
            ssize_t used =
                h1_chunked_decode(hs->chunked, buf_ptr(&hs->in),
                                  avail < room ? avail : room, &data, &why);
            if (used < 0) {
                body_error(hs, 400, why ? why : "bad chunked body");
                return;
            }
            if (data.n > 0) {
                hpipe_write(&s->req_body, data.p, data.n);
                s->bytes_in += data.n;
            }
            buf_consume(&hs->in, (size_t)used);
            if (h1_chunked_done(hs->chunked)) {
                struct h1_slice tr;
                if (h1_chunked_trailers(hs->chunked, &tr) == 0 && tr.n > 0) {
                    size_t nf = 0;
                    const char *why2 = NULL;
                    int st = 400;
                    /* More trailers than headers are allowed, or a bad
                     * one, end the request as a bad body would: dropping
                     * them quietly would hand on a different message. */
                    if (h1_parse_fields(tr.p, tr.n, &hs->conf->lim,
                                        hs->scratch->hdrs, hs->scratch->cap,
                                        &nf, &why2, &st) < 0) {
                        body_error(hs, st, why2);
                        return;
                    }
                    for (size_t i = 0; i < nf; i++) {
                        /* Framing and routing fields have no place in
                         * trailers: a next hop could act on them. */
                        if (!h1_trailer_allowed(hs->scratch->hdrs[i].name))
                            continue;
                        http_fields_add(
                            &s->req_body.trailers, &s->arena,
                            (struct slice){hs->scratch->hdrs[i].name.p,
                                           hs->scratch->hdrs[i].name.n},
                            (struct slice){hs->scratch->hdrs[i].value.p,
                                           hs->scratch->hdrs[i].value.n},
                            SIZE_MAX);
                    }
                }
                hs->rq = RQ_DONE;
                hpipe_finish(&s->req_body);
            } else if (used == 0) {
                return;
            }
        }
    }
}

static void pump_tunnel_in(struct h1_server *hs)
{
    struct hstream *s = hs->s;
    size_t room = hpipe_room(&s->req_body);
    size_t take = buf_len(&hs->in) < room ? buf_len(&hs->in) : room;

    if (take > 0) {
        hpipe_write(&s->req_body, buf_ptr(&hs->in), take);
        buf_consume(&hs->in, take);
        s->bytes_in += take;
    } else if (buf_len(&hs->in) > 0) {
        s->req_body.was_full = 1;
    }
}

/* n bytes of out were written: once they reach past head_at, a part of
 * the response head is out and the response can no longer be taken
 * back (retract). */
static void note_sent(struct h1_server *hs, size_t n)
{
    if (hs->rs == RS_WAIT || hs->head_sent)
        return;
    if (n > hs->head_at)
        hs->head_sent = 1;
    else
        hs->head_at -= n;
}

/* Writes out; returns -1 when the connection failed. */
static int flush_out(struct h1_server *hs)
{
    while (buf_len(&hs->out) > 0) {
        ssize_t n = conn_write(hs->c, buf_ptr(&hs->out), buf_len(&hs->out));
        if (n == CONN_AGAIN) {
            hs->write_blocked = 1;
            return 0;
        }
        if (n < 0)
            return -1;
        buf_consume(&hs->out, (size_t)n);
        note_sent(hs, (size_t)n);
    }
    hs->write_blocked = 0;
    buf_release_if_empty(&hs->out);
    return 0;
}

/* Moves response body from the pipe to the client. */
static int pump_response_body(struct h1_server *hs)
{
    struct hstream *s = hs->s;
    struct hpipe *p = &s->resp_body;

    while (hs->rs == RS_BODY && !hs->write_blocked) {
        size_t avail;
        const char *data = hpipe_peek(p, &avail);

        if (p->aborted) {
            /* The upstream failed mid-response: HTTP/1 can only say so by
             * closing the connection, before the end of the message, so
             * the client sees it truncated. Not the client's fault (no
             * DC). */
            hs->keep_alive = 0;
            hs->reset = 1;
            return -1;
        }
        if (avail == 0) {
            if (!p->eof)
                return 0;
            if (hs->rb == RB_CHUNKED &&
                h1_write_last_chunk(&hs->out, p->trailers.v, p->trailers.n) < 0)
                return -1;
            hs->rs = RS_DONE;
            if (hs->rb == RB_EOF || hs->rb == RB_TUNNEL)
                hs->keep_alive = 0;
            return flush_out(hs);
        }
        if (hs->rb == RB_CHUNKED) {
            size_t room = OUT_MAX - buf_len(&hs->out);
            if (buf_len(&hs->out) >= OUT_LOW || room < 64) {
                if (flush_out(hs) < 0)
                    return -1;
                if (hs->write_blocked)
                    return 0;
                continue;
            }
            if (avail > room - 32)
                avail = room - 32;
            if (h1_write_chunk(&hs->out, data, avail) < 0)
                return -1;
            hpipe_consume(p, avail);
            s->bytes_out += avail;
            if (flush_out(hs) < 0)
                return -1;
            continue;
        }
        if (buf_len(&hs->out) > 0) {
            /* A small body joins the head in one write (one send, one TLS
             * record) instead of following it in a second. */
            if (avail <= OUT_LOW && buf_room(&hs->out) >= avail &&
                buf_append(&hs->out, data, avail) == 0) {
                hpipe_consume(p, avail);
                s->bytes_out += avail;
            }
            if (flush_out(hs) < 0)
                return -1;
            continue;
        }
        {
            ssize_t n = conn_write(hs->c, data, avail);
            if (n == CONN_AGAIN) {
                hs->write_blocked = 1;
                return 0;
            }
            if (n < 0)
                return -1;
            hpipe_consume(p, (size_t)n);
            s->bytes_out += (uint64_t)n;
        }
    }
    return 0;
}

static int read_in(struct h1_server *hs)
{
    size_t room;
    char *p = h1_in_reserve(hs->scratch, &hs->in, &room);
    ssize_t n;

    /* No memory for a read buffer ends the connection: waiting would
     * leave a readable socket waking the loop on every turn. */
    if (p == NULL)
        return buf_room(&hs->in) > 0 ? -1 : 0;
    n = conn_read(hs->c, p, room);
    if (n > 0) {
        buf_commit(&hs->in, (size_t)n);
        return 1;
    }
    h1_in_release(hs->scratch, &hs->in, 0);
    if (n == 0) {
        hs->eof = 1;
        return 0;
    }
    if (n == CONN_AGAIN)
        return 0;
    return -1;
}

static int want_read(const struct h1_server *hs)
{
    if (hs->eof || hs->closing || buf_room(&hs->in) == 0)
        return 0;
    if (hs->s == NULL || hs->rq == RQ_HEAD)
        return hs->s == NULL || hs->rs != RS_DONE;
    if (hs->rq == RQ_BODY || hs->rq == RQ_TUNNEL)
        return hpipe_room(&hs->s->req_body) > 0;
    /* RQ_DONE: read ahead a pipelined request, bounded by in. */
    return 1;
}

static void process_turn(struct h1_server *hs)
{
    int progress;

    if (hs->closed)
        return;
    if (hs->lingering) {
        linger(hs);
        return;
    }
    if (hs->reset)
        goto done;
    do {
        progress = 0;
        /* A blocked write is retried first; otherwise the body goes
         * before the flush, so a small one joins the head still waiting
         * in out and head and body leave in one send. */
        if (hs->write_blocked && flush_out(hs) < 0)
            goto fail;
        if (hs->s != NULL && hs->rs == RS_BODY && pump_response_body(hs) < 0)
            goto fail;
        /* Not after a blocked write: flushing an empty out would clear
         * write_blocked and leave the connection waiting for nothing. */
        if (!hs->write_blocked && flush_out(hs) < 0)
            goto fail;
        if (hs->s != NULL && hs->rs == RS_DONE && buf_len(&hs->out) == 0) {
            /* The response is complete. A request whose body we did not
             * read to the end leaves the connection unusable. */
            if (hs->rq == RQ_BODY)
                hs->keep_alive = 0;
            stream_release(hs);
            if (!hs->keep_alive)
                goto linger;
            start_head_wait(hs);
            /* Draining, but the client was not told to close (the head
             * went out before the drain): it may send its next request
             * right away. Keep the connection for a short grace: that
             * request gets Connection: close; silence ends it. */
            if (hs->draining && buf_len(&hs->in) == 0)
                timer_arm(hs->timer, DRAIN_IDLE_GRACE_MS);
            progress = 1;
        }
        if (hs->closing && buf_len(&hs->out) == 0)
            goto done;
        if (want_read(hs)) {
            int r = read_in(hs);
            if (r < 0)
                goto fail;
            progress |= r;
        }
        if (hs->s == NULL && hs->rq == RQ_HEAD && !hs->closing &&
            buf_len(&hs->in) > 0) {
            parse_head(hs);
            if (hs->s != NULL) {
                dispatch(hs);
                progress = 1;
                if (hs->closed)
                    return;
            }
        }
        if (hs->s != NULL && hs->rq == RQ_BODY)
            pump_request_body(hs);
        if (hs->s != NULL && hs->rq == RQ_TUNNEL)
            pump_tunnel_in(hs);
    } while (progress && !hs->closed);

    if (hs->eof) {
        if (hs->s == NULL && buf_len(&hs->out) == 0)
            goto done;
        /* The client left before its answer was complete: before any
         * answer (nginx's 499) or while one streams (an SSE or long-poll
         * response the upstream holds open). The exchange ends as a
         * downstream reset, as Envoy treats a FIN without half-close
         * support, instead of waiting on the upstream for good. Only a
         * tunnel (after a 101) passes the half-close on. */
        if (hs->s != NULL && hs->rs != RS_DONE && hs->rq != RQ_TUNNEL) {
            hs->s->flags |= HFLAG_DC;
            goto done;
        }
        if (hs->s != NULL && hs->rq == RQ_TUNNEL && buf_len(&hs->in) == 0)
            hpipe_finish(&hs->s->req_body);
        else if (hs->s != NULL && hs->rq == RQ_BODY) {
            hpipe_abort(&hs->s->req_body);
            hs->s->flags |= HFLAG_DC;
            goto done;
        } else if (hs->s == NULL && buf_len(&hs->in) > 0 &&
                   buf_len(&hs->out) == 0) {
            goto done; /* a partial head, then FIN */
        }
        hs->keep_alive = 0;
    }
    conn_want(hs->c, want_read(hs), hs->write_blocked);
    return;
linger:
    /* Closing with request bytes unread would make the kernel reset the
     * connection, and the reset can destroy the response before the
     * client reads it: send our FIN, keep reading (and dropping) what the
     * client still sends for a while, then close (nginx's lingering
     * close). */
    if (buf_len(&hs->in) > 0 || hs->rq == RQ_BODY) {
        hs->c->ops->shutdown(hs->c);
        hs->lingering = 1;
        hs->linger_left = LINGER_BYTES;
        timer_arm(hs->timer, LINGER_MS);
        buf_consume(&hs->in, buf_len(&hs->in));
        conn_want(hs->c, 1, 0);
        return;
    }
    goto done;
fail:
    if (hs->s != NULL && !hs->reset)
        hs->s->flags |= HFLAG_DC;
done:
    server_close(hs);
}

static void process(struct h1_server *hs)
{
    process_turn(hs);
    count_bufs(hs);
}

/* Lingering: read and drop until EOF, an error, the byte budget or the
 * timer, then close. */
static void linger(struct h1_server *hs)
{
    char sink[16384];

    for (;;) {
        ssize_t n = conn_read(hs->c, sink, sizeof(sink));
        if (n == CONN_AGAIN) {
            conn_want(hs->c, 1, 0);
            return;
        }
        if (n <= 0 || (size_t)n >= hs->linger_left)
            break;
        hs->linger_left -= (size_t)n;
    }
    server_close(hs);
}

/* The proxy's response head: status line, fields and our framing. */
static void response_head(struct hstream *s)
{
    struct h1_server *hs = s->down_ctx;
    const struct http_response *r = &s->resp;
    int no_body = slice_eq_str(s->req.method, "HEAD") || r->status < 200 ||
                  r->status == 204 || r->status == 304;

    if (hs->draining)
        hs->keep_alive = 0;
    hs->head_at = buf_len(&hs->out);
    hs->head_sent = 0;
    if (r->status == 101 && s->req.upgrade) {
        hs->rb = RB_TUNNEL;
    } else if (no_body) {
        hs->rb = RB_NONE;
    } else if (r->content_length >= 0) {
        hs->rb = RB_LENGTH;
    } else if (hs->minor == 1) {
        hs->rb = RB_CHUNKED;
    } else {
        hs->rb = RB_EOF;
        hs->keep_alive = 0;
    }
    /* Our framing fields go after the upstream's; the stream's fields are
     * ours to extend (nobody reads them after this). */
    {
        struct http_fields *f = &s->resp.fields;
        char cl[UNITS_U64_LEN];
        int rc = 0;

        if (hs->rb == RB_TUNNEL) {
            rc |= http_fields_add_ref(f, &s->arena, SLICE_LIT("connection"),
                                      SLICE_LIT("upgrade"));
            rc |= http_fields_add_ref(f, &s->arena, SLICE_LIT("upgrade"),
                                      s->req.upgrade_proto);
        } else if (hs->rb == RB_CHUNKED) {
            rc |= http_fields_add_ref(f, &s->arena,
                                      SLICE_LIT("transfer-encoding"),
                                      SLICE_LIT("chunked"));
        }
        if (r->content_length >= 0 && (hs->rb == RB_LENGTH || no_body) &&
            r->status >= 200 && r->status != 204) {
            size_t cn = units_fmt_u64(cl, (uint64_t)r->content_length);
            rc |= http_fields_add(f, &s->arena, SLICE_LIT("content-length"),
                                  (struct slice){cl, cn}, SIZE_MAX);
        }
        if (hs->rb != RB_TUNNEL) {
            if (!hs->keep_alive)
                rc |= http_fields_add_ref(f, &s->arena, SLICE_LIT("connection"),
                                          SLICE_LIT("close"));
            else if (hs->minor == 0)
                rc |= http_fields_add_ref(f, &s->arena, SLICE_LIT("connection"),
                                          SLICE_LIT("keep-alive"));
        }
        if (rc != 0 ||
            h1_write_response_head(&hs->out, r->status, NULL, f->v, f->n) < 0)
            goto fail;
    }
    hs->rs = hs->rb == RB_NONE ? RS_DONE : RS_BODY;
    if (hs->rb == RB_NONE) {
        /* Whatever the upstream sends as a body of HEAD or 304 is dropped. */
        size_t n;
        hpipe_peek(&s->resp_body, &n);
        hpipe_consume(&s->resp_body, n);
    }
    if (hs->rb == RB_TUNNEL) {
        hs->rq = RQ_TUNNEL;
        hs->keep_alive = 0;
    } else if (s->req.upgrade && hs->rq == RQ_DONE) {
        /* The upgrade was declined: the request had no body after all. */
        hpipe_finish(&s->req_body);
    }
    schedule(hs);
    return;
fail:
    /* A field that cannot be written (CR/LF in a value) ends the exchange:
     * never let one peer inject headers into another. */
    s->flags |= HFLAG_UPE;
    buf_consume(&hs->out, buf_len(&hs->out));
    hs->keep_alive = 0;
    hs->closing = 1;
    schedule(hs);
}

static void continue_100(struct hstream *s)
{
    struct h1_server *hs = s->down_ctx;

    if (hs->rs == RS_WAIT && hs->rq == RQ_BODY) {
        buf_puts(&hs->out, "HTTP/1.1 100 Continue\r\n\r\n");
        schedule(hs);
    }
}

/* Takes back a response head still waiting in out, so that the proxy
 * can answer in its place; not once a byte of it was written, nor after
 * a 101 (the connection is a tunnel now). */
static int retract(struct hstream *s)
{
    struct h1_server *hs = s->down_ctx;

    if (hs->head_sent || hs->closing || hs->closed || hs->rs == RS_WAIT ||
        hs->rb == RB_TUNNEL)
        return -1;
    buf_truncate(&hs->out, hs->head_at);
    hs->rs = RS_WAIT;
    hs->rb = RB_NONE;
    return 0;
}

/* The proxy gives up on the stream: the connection closes on the next
 * turn, the message unfinished. */
static void reset(struct hstream *s)
{
    struct h1_server *hs = s->down_ctx;

    hs->reset = 1;
    hs->keep_alive = 0;
    schedule(hs);
}

static const struct hstream_down_ops down_ops = {response_head, continue_100,
                                                 retract, reset};

static void on_timer(void *arg)
{
    struct h1_server *hs = arg;

    if (hs->lingering) {
        server_close(hs);
        return;
    }
    if (hs->s != NULL)
        return;
    if (hs->timer_head) {
        fail_request(hs, 408, "request head timeout");
        process(hs);
        return;
    }
    server_close(hs);
}

struct h1_server *h1_server_new(struct event_base *base, struct conn *c,
                                const struct http_conn_conf *conf,
                                const struct h1_server_hooks *hooks,
                                struct bufpool *pool,
                                struct h1_scratch *scratch, struct timer *timer)
{
    struct h1_server *hs = calloc(1, sizeof(*hs));

    if (hs == NULL)
        return NULL;
    hs->c = c;
    hs->base = base;
    hs->conf = conf;
    hs->hooks = *hooks;
    hs->pool = pool;
    hs->scratch = scratch;
    buf_init(&hs->in, conf->lim.max_head);
    buf_init(&hs->out, OUT_MAX);
    hs->timer = timer;
    timer_init(hs->timer, base, on_timer, hs);
    c->on_io = on_io;
    c->arg = hs;
    start_head_wait(hs);
    schedule(hs);
    return hs;
}

void h1_server_drain(struct h1_server *hs)
{
    if (hs->draining)
        return;
    hs->draining = 1;
    /* An idle keep-alive connection is not closed at once: a client may
     * be sending its next request right now, and would see its request
     * fail. It gets a short grace; a request arriving in it is answered
     * with Connection: close. */
    if (hs->s == NULL && buf_len(&hs->in) == 0) {
        hs->timer_head = 0;
        timer_arm(hs->timer, DRAIN_IDLE_GRACE_MS);
    }
}

void h1_server_free(struct h1_server *hs)
{
    if (hs == NULL)
        return;
    if (!hs->closed) {
        hs->hooks.closed = NULL;
        hs->closed = 1;
        if (hs->s != NULL) {
            hpipe_abort(&hs->s->req_body);
            hs->s->flags |= HFLAG_DC;
            stream_release(hs);
        }
    }
    timer_cancel(hs->timer);
    h1_in_release(hs->scratch, &hs->in, 1);
    buf_dispose(&hs->in);
    buf_dispose(&hs->out);
    count_bufs(hs);
    free(hs);
}
