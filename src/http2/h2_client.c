/*
 * HTTP/2 client on nghttp2. Request bodies are pulled from the request
 * pipe by nghttp2's data provider; response DATA goes into the response
 * pipe and is acknowledged to the upstream only as the downstream side
 * consumes it, the same flow-control contract as the server side.
 */
#include "config.h"

#include <event2/event.h>
#include <inttypes.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"
#include "event/timer.h"
#include "http2/h2_client.h"
#include "net/sock.h"
#include "tls/tls.h"

#define OUT_MAX (64 * 1024)
#define READ_CHUNK (16 * 1024)

enum { H2C_CONNECTING, H2C_HANDSHAKE, H2C_READY };

struct h2c_stream {
    struct list link;
    struct h2_client *c;
    struct hstream *s;
    int32_t id; /* 0 until submitted */
    const struct h2c_stream_hooks *hooks;
    void *ctx;
    uint64_t written;
    uint64_t reported;
    size_t field_bytes; /* of the head or trailer block being decoded */
    size_t nfields;
    unsigned head_seen : 1;
    unsigned resp_ended : 1;
    unsigned finished : 1;
    unsigned over_limit : 1; /* a header block past the limits: UPE */
};

static void process(struct h2_client *c);

static void schedule(void *arg)
{
    struct h2_client *c = arg;

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

/* Ends an exchange once: the hooks hear of it and the stream goes.
 * abort_resp: fail the response pipe if unfinished (not when the proxy
 * cancelled, since it answers the client itself). */
static void stream_end(struct h2c_stream *st, int ok, unsigned flags,
                       int abort_resp)
{
    struct hstream *s = st->s;
    struct h2_client *c = st->c;

    if (st->finished)
        return;
    st->finished = 1;
    /* Response bytes still in the pipe would return their connection
     * credit only as they are consumed, and nobody will consume them for
     * us any more: return it now, or the connection window shrinks for
     * good with every response. */
    if (st->id != 0 && c->ng != NULL && !c->closed &&
        st->written > st->reported) {
        nghttp2_session_consume_connection(
            c->ng, (size_t)(st->written - st->reported));
        st->reported = st->written;
        schedule(c);
    }
    if (!ok && abort_resp && !hpipe_drained(&s->resp_body))
        hpipe_abort(&s->resp_body);
    s->req_body.wake_reader = NULL;
    s->resp_body.wake_writer = NULL;
    list_del(&st->link);
    c->nstreams--;
    if (st->id != 0 && c->ng != NULL)
        nghttp2_session_set_stream_user_data(c->ng, st->id, NULL);
    if (st->hooks != NULL)
        st->hooks->done(st->ctx, ok, flags);
    hstream_unref(s);
    free(st);
    /* The last stream gone: idle timer, or close once the connection may
     * carry no more requests. */
    if (c->nstreams == 0 && !c->closed && c->state == H2C_READY) {
        if (c->max_requests > 0 && c->requests >= c->max_requests) {
            nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
            schedule(c);
        } else {
            timer_arm(&c->timer, c->conf->idle_timeout_ms);
        }
    }
}

static void client_close(struct h2_client *c)
{
    if (c->closed)
        return;
    c->closed = 1;
    timer_cancel(&c->timer);
    conn_want(&c->conn, 0, 0);
    /* A connection that never became ready failed to connect: exchanges
     * may try another endpoint, or the proxy answers itself, so their
     * response pipes (still untouched) are not failed. */
    while (!LIST_EMPTY(&c->streams)) {
        struct h2c_stream *st =
            LIST_ELEM(c->streams.next, struct h2c_stream, link);
        unsigned flags = c->state == H2C_READY ? HFLAG_UC : HFLAG_UF;
        /* A head past the limits was never handed on: the pipe stays
         * untouched, so the proxy can still answer 502 itself. */
        stream_end(st, 0, st->over_limit ? HFLAG_UPE : flags,
                   c->state == H2C_READY && (!st->over_limit || st->head_seen));
    }
    c->hooks->closed(c->owner, c);
}

static void resp_consumed(void *arg)
{
    struct h2c_stream *st = arg;
    uint64_t done = st->written - buf_len(&st->s->resp_body.buf);

    if (done > st->reported && !st->c->closed) {
        nghttp2_session_consume(st->c->ng, st->id,
                                (size_t)(done - st->reported));
        st->reported = done;
        schedule(st->c);
    }
}

static void req_ready(void *arg)
{
    struct h2c_stream *st = arg;

    if (st->c->closed || st->id == 0)
        return;
    nghttp2_session_resume_data(st->c->ng, st->id);
    schedule(st->c);
}

static ssize_t read_req(nghttp2_session *ng, int32_t id, uint8_t *buf,
                        size_t length, uint32_t *flags,
                        nghttp2_data_source *source, void *arg)
{
    /* Looked up by id, not source->ptr: a cancelled exchange is gone while
     * its RST_STREAM may still be queued. */
    struct h2c_stream *st = nghttp2_session_get_stream_user_data(ng, id);
    struct hpipe *p;
    size_t avail;
    const char *data;

    (void)arg;
    (void)source;
    if (st == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    p = &st->s->req_body;
    if (p->aborted)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    data = hpipe_peek(p, &avail);
    if (avail > length)
        avail = length;
    if (avail > 0) {
        memcpy(buf, data, avail);
        hpipe_consume(p, avail);
    }
    if (hpipe_drained(p)) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (p->trailers.n > 0) {
            nghttp2_nv *nva =
                arena_alloc(&st->s->arena, p->trailers.n * sizeof(*nva));
            if (nva != NULL) {
                for (size_t i = 0; i < p->trailers.n; i++)
                    nva[i] = (nghttp2_nv){(uint8_t *)p->trailers.v[i].name.p,
                                          (uint8_t *)p->trailers.v[i].value.p,
                                          p->trailers.v[i].name.n,
                                          p->trailers.v[i].value.n,
                                          NGHTTP2_NV_FLAG_NONE};
                *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
                nghttp2_submit_trailer(ng, id, nva, p->trailers.n);
            }
        }
        return (ssize_t)avail;
    }
    return avail == 0 ? NGHTTP2_ERR_DEFERRED : (ssize_t)avail;
}

static int submit(struct h2_client *c, struct h2c_stream *st)
{
    struct hstream *s = st->s;
    const struct http_request *q = &s->req;
    size_t n = q->fields.n + 6;
    nghttp2_nv *nva = arena_alloc(&s->arena, n * sizeof(*nva));
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = read_req};
    char cl[24];
    size_t k = 0;
    int32_t id;

#define NV(n, nl, v, vl)                                                       \
    nva[k++] = (nghttp2_nv)                                                    \
    {                                                                          \
        (uint8_t *)(n), (uint8_t *)(v), (nl), (vl), NGHTTP2_NV_FLAG_NONE       \
    }
    if (nva == NULL)
        return -1;
    NV(":method", 7, q->method.p, q->method.n);
    NV(":scheme", 7, q->scheme.p, q->scheme.n);
    NV(":authority", 10, q->authority.p, q->authority.n);
    NV(":path", 5, q->path.p, q->path.n);
    for (size_t i = 0; i < q->fields.n; i++)
        NV(q->fields.v[i].name.p, q->fields.v[i].name.n, q->fields.v[i].value.p,
           q->fields.v[i].value.n);
    if (q->te_trailers)
        NV("te", 2, "trailers", 8);
    if (q->content_length >= 0 && q->has_body) {
        snprintf(cl, sizeof(cl), "%" PRId64, q->content_length);
        NV("content-length", 14, cl, strlen(cl));
    }
#undef NV
    id = nghttp2_submit_request(c->ng, NULL, nva, k, q->has_body ? &prd : NULL,
                                st);
    if (id < 0)
        return -1;
    st->id = id;
    c->requests++;
    s->req_body.wake_reader = req_ready;
    s->req_body.reader = st;
    s->resp_body.wake_writer = resp_consumed;
    s->resp_body.writer = st;
    s->resp_body.wake_on_consume = 1;
    return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *arg)
{
    struct h2c_stream *st =
        nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    struct h2_client *c = arg;
    struct hstream *s;
    struct slice n = {(const char *)name, namelen};
    struct slice v = {(const char *)value, valuelen};

    (void)flags;
    if (st == NULL)
        return 0;
    s = st->s;
    /* The head and the trailers are each a header list under the limits
     * a listener applies to requests, counted as decoded (a 1-byte HPACK
     * index can stand for a 4 KiB field). An upstream past them is broken
     * or hostile: the exchange fails with UPE (502 when nothing went
     * downstream yet) and the connection closes, for nghttp2 stops
     * decoding at a callback failure and its HPACK state is then lost. */
    st->field_bytes += namelen + valuelen + 32;
    if (st->field_bytes > c->conf->max_head ||
        ++st->nfields > c->conf->max_headers) {
        st->over_limit = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (st->head_seen) {
        if (http_fields_add(&s->resp_body.trailers, &s->arena, n, v, SIZE_MAX) <
            0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        return 0;
    }
    /* nghttp2 checked both are digits; lengths bound the arithmetic. */
    if (slice_eq_str(n, ":status")) {
        int code = 0;
        for (size_t i = 0; i < valuelen && i < 3; i++)
            code = code * 10 + (value[i] - '0');
        s->resp.status = code;
        return 0;
    }
    if (slice_eq_str(n, "content-length")) {
        int64_t cl = 0;
        if (valuelen > 18)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        for (size_t i = 0; i < valuelen; i++)
            cl = cl * 10 + (value[i] - '0');
        s->resp.content_length = cl;
        return 0;
    }
    if (http_fields_add(&s->resp.fields, &s->arena, n, v, SIZE_MAX) < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *arg)
{
    struct h2c_stream *st =
        nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    int end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;

    (void)arg;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        struct h2_client *c = arg;
        c->goaway = 1;
        return 0;
    }
    if (st == NULL)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS) {
        struct hstream *s = st->s;
        /* The next block (final head after an interim one, trailers)
         * gets a budget of its own. */
        st->field_bytes = 0;
        st->nfields = 0;
        if (!st->head_seen) {
            if (s->resp.status >= 100 && s->resp.status < 200) {
                /* Interim: forget it, wait for the final head. */
                s->resp.fields.n = 0;
                return 0;
            }
            st->head_seen = 1;
            s->resp.has_body = !end;
            st->hooks->head(st->ctx);
            /* The hook may have cancelled (and freed) st: look it up. */
            if (nghttp2_session_get_stream_user_data(ng, f->hd.stream_id) != st)
                return 0;
        }
        if (end && !st->resp_ended) {
            st->resp_ended = 1;
            hpipe_finish(&s->resp_body);
        }
    } else if (f->hd.type == NGHTTP2_DATA && end && !st->resp_ended) {
        st->resp_ended = 1;
        hpipe_finish(&st->s->resp_body);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *arg)
{
    struct h2c_stream *st = nghttp2_session_get_stream_user_data(ng, id);
    size_t took;

    (void)flags;
    (void)arg;
    if (st == NULL) {
        nghttp2_session_consume(ng, id, len);
        return 0;
    }
    took = hpipe_write(&st->s->resp_body, data, len);
    st->written += took;
    if (took < len) {
        nghttp2_session_consume(ng, id, len - took);
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id,
                                  NGHTTP2_FLOW_CONTROL_ERROR);
    }
    return 0;
}

/*
 * A stream the upstream ended with an error is its protocol error (UPE,
 * answered 502 when nothing was passed on yet) when it broke a response
 * it had started (any error code after the head: the client would get a
 * truncated message), or when its frames broke the protocol (nghttp2
 * resets the stream with PROTOCOL_ERROR for a malformed head). Other
 * resets before any answer (REFUSED_STREAM, CANCEL, ...) stay connection
 * failures (UC).
 */
static int upstream_broke(const struct h2c_stream *st, uint32_t code)
{
    if (code == NGHTTP2_NO_ERROR)
        return st->head_seen && !st->resp_ended;
    return st->head_seen || code == NGHTTP2_PROTOCOL_ERROR ||
           code == NGHTTP2_FRAME_SIZE_ERROR ||
           code == NGHTTP2_COMPRESSION_ERROR ||
           code == NGHTTP2_FLOW_CONTROL_ERROR;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code,
                           void *arg)
{
    struct h2c_stream *st = nghttp2_session_get_stream_user_data(ng, id);
    struct h2_client *c = arg;

    if (st == NULL)
        return 0;
    (void)c;
    if (code == NGHTTP2_NO_ERROR && st->resp_ended)
        stream_end(st, 1, 0, 1);
    else if (upstream_broke(st, code))
        stream_end(st, 0, HFLAG_UPE, 1);
    else
        stream_end(st, 0, HFLAG_UC, 1);
    return 0;
}

static int start_session(struct h2_client *c)
{
    nghttp2_session_callbacks *cb;
    nghttp2_option *opt;
    nghttp2_session *ng = NULL;
    nghttp2_settings_entry iv[2];
    int rc;

    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -1;
    if (nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cb);
        return -1;
    }
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb,
                                                              on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    rc = nghttp2_session_client_new2(&ng, cb, c, opt);
    nghttp2_session_callbacks_del(cb);
    nghttp2_option_del(opt);
    if (rc != 0)
        return -1;
    c->ng = ng;
    iv[0] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_ENABLE_PUSH, 0};
    iv[1] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE,
                                     c->conf->stream_window};
    nghttp2_submit_settings(ng, NGHTTP2_FLAG_NONE, iv, 2);
    nghttp2_session_set_local_window_size(ng, NGHTTP2_FLAG_NONE, 0,
                                          (int32_t)c->conf->connection_window);
    return 0;
}

static void ready(struct h2_client *c)
{
    timer_cancel(&c->timer);
    if (start_session(c) < 0) {
        client_close(c);
        return;
    }
    c->state = H2C_READY;
    for (struct list *it = c->streams.next; it != &c->streams;) {
        struct h2c_stream *st = LIST_ELEM(it, struct h2c_stream, link);
        it = it->next;
        if (st->id == 0 && submit(c, st) < 0)
            stream_end(st, 0, HFLAG_UPE, 1);
    }
    schedule(c);
}

static int flush_out(struct h2_client *c)
{
    for (;;) {
        while (buf_len(c->out) < OUT_MAX) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(c->ng, &data);
            if (n < 0)
                return -1;
            if (n == 0)
                break;
            if (buf_append(c->out, data, (size_t)n) < 0) {
                c->out->max += (size_t)n;
                if (buf_append(c->out, data, (size_t)n) < 0)
                    return -1;
            }
        }
        if (buf_len(c->out) == 0) {
            c->write_blocked = 0;
            c->out->max = OUT_MAX;
            buf_release_if_empty(c->out);
            return 0;
        }
        {
            ssize_t w = conn_write(&c->conn, buf_ptr(c->out), buf_len(c->out));
            if (w == CONN_AGAIN) {
                c->write_blocked = 1;
                return 0;
            }
            if (w < 0)
                return -1;
            buf_consume(c->out, (size_t)w);
        }
    }
}

static void process(struct h2_client *c)
{
    uint8_t chunk[READ_CHUNK];

    if (c->closed)
        return;
    if (c->state == H2C_CONNECTING) {
        if (sock_error(c->conn.fd) != 0) {
            client_close(c);
            return;
        }
        if (c->conn.tls != NULL) {
            c->state = H2C_HANDSHAKE;
        } else {
            ready(c);
            return;
        }
    }
    if (c->state == H2C_HANDSHAKE) {
        int r = c->conn.ops->handshake(&c->conn);
        size_t alen;
        const char *alpn;
        if (r < 0) {
            client_close(c);
            return;
        }
        if (r == 0) {
            conn_want(&c->conn, !c->conn.read_needs_write,
                      c->conn.read_needs_write);
            return;
        }
        alpn = c->tunnel ? "h2" : tls_conn_alpn(&c->conn, &alen);
        if (c->tunnel)
            alen = 2; /* prior knowledge inside the tunnel */
        if (alen != 2 || memcmp(alpn, "h2", 2) != 0) {
            /* The upstream does not speak h2 over TLS. */
            client_close(c);
            return;
        }
        ready(c);
        return;
    }
    for (int i = 0; i < 8 && nghttp2_session_want_read(c->ng); i++) {
        ssize_t n = conn_read(&c->conn, chunk, sizeof(chunk));
        if (n == CONN_AGAIN)
            break;
        if (n <= 0 || nghttp2_session_mem_recv(c->ng, chunk, (size_t)n) < 0) {
            client_close(c);
            return;
        }
        if (c->closed)
            return;
    }
    if (flush_out(c) < 0) {
        client_close(c);
        return;
    }
    if (!nghttp2_session_want_read(c->ng) &&
        !nghttp2_session_want_write(c->ng)) {
        client_close(c);
        return;
    }
    conn_want(&c->conn, 1, c->write_blocked);
}

static void on_timer(void *arg)
{
    struct h2_client *c = arg;

    if (c->state != H2C_READY || c->nstreams == 0)
        client_close(c);
}

struct h2_client *h2_client_connect(struct event_base *base,
                                    const struct addr *a,
                                    struct ssl_ctx_st *tls, const char *sni,
                                    const struct h2_client_conf *conf,
                                    const struct h2_client_hooks *hooks,
                                    void *owner)
{
    struct h2_client *c;
    int inprog;
    int fd = sock_connect(a, &inprog);

    if (fd < 0)
        return NULL;
    c = calloc(1, sizeof(*c));
    if (c == NULL || (c->out = malloc(sizeof(*c->out))) == NULL) {
        free(c);
        close(fd);
        return NULL;
    }
    conn_init(&c->conn, base, fd, on_io, c);
    buf_init(c->out, OUT_MAX);
    c->base = base;
    c->conf = conf;
    c->hooks = hooks;
    c->owner = owner;
    LIST_INIT(&c->streams);
    LIST_INIT(&c->link);
    timer_init(&c->timer, base, on_timer, c);
    if (tls != NULL && tls_conn_connect(&c->conn, tls, sni) < 0) {
        conn_close(&c->conn);
        free(c->out);
        free(c);
        return NULL;
    }
    c->state = H2C_CONNECTING;
    timer_arm(&c->timer, conf->connect_timeout_ms);
    if (inprog)
        conn_want(&c->conn, 0, 1);
    else
        schedule(c);
    return c;
}

struct h2_client *h2_client_connect_via(struct event_base *base,
                                        const struct conn_opener *op,
                                        const struct h2_client_conf *conf,
                                        const struct h2_client_hooks *hooks,
                                        void *owner)
{
    struct h2_client *c = calloc(1, sizeof(*c));

    if (c == NULL || (c->out = malloc(sizeof(*c->out))) == NULL) {
        free(c);
        return NULL;
    }
    if (op->open(op->arg, &c->conn, on_io, c) < 0) {
        free(c->out);
        free(c);
        return NULL;
    }
    buf_init(c->out, OUT_MAX);
    c->base = base;
    c->conf = conf;
    c->hooks = hooks;
    c->owner = owner;
    c->tunnel = 1;
    LIST_INIT(&c->streams);
    LIST_INIT(&c->link);
    timer_init(&c->timer, base, on_timer, c);
    /* No socket to connect: the transport's handshake is the connect. */
    c->state = H2C_HANDSHAKE;
    timer_arm(&c->timer, conf->connect_timeout_ms);
    schedule(c);
    return c;
}

int h2_client_has_room(const struct h2_client *c)
{
    uint32_t max = 100;

    if (c->closed || c->goaway)
        return 0;
    if (c->max_requests > 0 && c->requests >= c->max_requests)
        return 0;
    if (c->state == H2C_READY)
        max = nghttp2_session_get_remote_settings(
            c->ng, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
    return c->nstreams < max;
}

struct h2c_stream *h2_client_submit(struct h2_client *c, struct hstream *s,
                                    const struct h2c_stream_hooks *hooks,
                                    void *ctx)
{
    struct h2c_stream *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return NULL;
    st->c = c;
    st->s = hstream_ref(s);
    st->hooks = hooks;
    st->ctx = ctx;
    list_append(&c->streams, &st->link);
    c->nstreams++;
    /* Only the idle timer goes; a connect timeout still stands. */
    if (c->state == H2C_READY)
        timer_cancel(&c->timer);
    if (c->state == H2C_READY) {
        if (submit(c, st) < 0) {
            st->hooks = NULL;
            stream_end(st, 0, HFLAG_UPE, 1);
            return NULL;
        }
        schedule(c);
    }
    return st;
}

void h2_client_cancel(struct h2c_stream *st)
{
    struct h2_client *c = st->c;

    st->hooks = NULL;
    if (st->id != 0 && !c->closed) {
        nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_CANCEL);
        schedule(c);
    }
    stream_end(st, 0, 0, 0);
}

void h2_client_free(struct h2_client *c)
{
    if (c == NULL)
        return;
    if (!c->closed) {
        c->closed = 1;
        while (!LIST_EMPTY(&c->streams))
            stream_end(LIST_ELEM(c->streams.next, struct h2c_stream, link), 0,
                       HFLAG_UC, 1);
    }
    timer_dispose(&c->timer);
    if (c->ng != NULL)
        nghttp2_session_del(c->ng);
    conn_close(&c->conn);
    buf_dispose(c->out);
    free(c->out);
    list_del(&c->link);
    free(c);
}
