/*
 * The server side of HTTP/2 on nghttp2. Flow control is tied to the
 * pipes: DATA is acknowledged (WINDOW_UPDATE) only as the proxy consumes
 * it, so a client can never make us hold more than its stream window per
 * stream. Floods that nghttp2 detects (SETTINGS, PING, CONTINUATION) and
 * the ones we count ourselves (rapid reset, empty frames) end the
 * connection with a counter in /stats.
 */
#include "config.h"

#include <event2/event.h>
#include <inttypes.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/list.h"
#include "core/stats.h"
#include "event/timer.h"
#include "http/conn_conf.h"
#include "http/http.h"
#include "http2/h2_server.h"
#include "net/conn.h"

#define OUT_MAX (64 * 1024)
#define READ_CHUNK (16 * 1024)
#define READS_PER_TURN 8
/* Client resets of streams per second before we call it an attack
 * (CVE-2023-44487); legitimate clients cancel far fewer. */
#define RST_PER_SECOND 200
#define EMPTY_FRAMES_MAX 64
/* Time between the shutdown notice and the final GOAWAY: a round trip on
 * any network we serve. */
#define DRAIN_NOTICE_MS 1000
/* Streams we reset whose in-flight frames are still ignored: far more than
 * a client has in flight in one round trip (its concurrent streams). */
#define RESET_RING 256

struct h2_stream {
    struct list link; /* the server's streams */
    struct h2_server *hs;
    struct hstream *s;
    int32_t id;
    size_t head_bytes;
    size_t nfields;
    size_t trailer_bytes; /* the trailer section, counted like the head */
    size_t ntrailers;
    uint64_t written;  /* request body bytes put in the pipe */
    uint64_t reported; /* of those, returned to the window */
    int bad_status;    /* answer locally instead of dispatching */
    unsigned dispatched : 1;
    unsigned req_ended : 1;
    unsigned has_authority : 1;
    unsigned head_pending : 1; /* in hs->heads: the response head waits */
    unsigned reset : 1;        /* the proxy reset it (not the client) */
    struct list head_link;
    struct slice cookie;
};

struct h2_server {
    struct conn *c;
    struct event_base *base;
    struct timer timer;
    struct timer drain_ev; /* from the shutdown notice to the last GOAWAY */
    nghttp2_session *ng;
    const struct http_conn_conf *conf;
    struct h2_settings h2;
    struct h2_server_hooks hooks;
    struct bufpool *pool;
    struct http_counters *http; /* the worker's shards */
    struct h2_counters *sh;
    struct buf out;
    struct list streams;
    /* Streams whose response head is submitted at the next flush, not
     * at once: until then the proxy may take it back (retract). */
    struct list heads;
    size_t nstreams;
    uint64_t rst_start;
    unsigned rst_count;
    /* RFC 9113 5.1.1: a new stream's identifier is greater than every
     * one opened before, so a HEADERS frame below the highest the client
     * used, on a stream that is not open, is a connection error; nghttp2
     * 1.52 drops it without a word. The one exception is a stream we
     * reset: the client may have sent its trailers before our RST_STREAM
     * reached it (RFC 9113 5.1), so the last RESET_RING streams we reset
     * are remembered and their frames ignored, as nghttp2 does. */
    int32_t max_id; /* the highest stream the client opened */
    int32_t reset_ids[RESET_RING];
    unsigned nreset; /* resets recorded so far; the ring holds the last */
    unsigned empty_frames;
    unsigned closed : 1;
    unsigned draining : 1;
    unsigned goaway_final : 1; /* the GOAWAY naming the last stream is out */
    unsigned eof : 1;
    unsigned write_blocked : 1;
    /* A request's header block is arriving (HEADERS without END_HEADERS
     * so far): the timer runs requestHeadersTimeout. nghttp2 takes one
     * header block at a time, so one timer serves the connection. */
    unsigned head_wait : 1;
};

static void process(struct h2_server *hs);
static void on_drain_notice(void *arg);
static void reset(struct hstream *s);
static const struct hstream_down_ops down_ops;

static void schedule(void *arg)
{
    struct h2_server *hs = arg;

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

static void arm_idle(struct h2_server *hs)
{
    if (hs->nstreams == 0)
        timer_arm(&hs->timer, hs->conf->idle_timeout_ms);
}

static void server_close(struct h2_server *hs)
{
    if (hs->closed)
        return;
    hs->closed = 1;
    timer_cancel(&hs->timer);
    timer_cancel(&hs->drain_ev);
    conn_want(hs->c, 0, 0);
    hs->hooks.closed(hs->hooks.owner);
}

/* The request pipe's consumer took bytes: give the client that credit. */
static void req_consumed(void *arg)
{
    struct h2_stream *st = arg;
    struct h2_server *hs = st->hs;
    uint64_t held = buf_len(&st->s->req_body.buf);
    uint64_t done = st->written - held;

    if (done > st->reported && !hs->closed) {
        nghttp2_session_consume(hs->ng, st->id, (size_t)(done - st->reported));
        st->reported = done;
        schedule(hs);
    }
}

static void resp_ready(void *arg)
{
    struct h2_stream *st = arg;

    if (st->hs->closed)
        return;
    /* A response that failed after its head (say a buffer refused under
     * memory pressure) is reset now: nghttp2 would only ask read_body,
     * and so find out, once the client's window opens, and a client
     * that keeps it shut would hold the stream until it times out. A
     * head not submitted yet is left to the proxy, which may still take
     * it back and answer instead (retract). */
    if (st->s->resp_body.aborted && !st->reset && !st->head_pending &&
        !hpipe_drained(&st->s->resp_body)) {
        reset(st->s);
        return;
    }
    nghttp2_session_resume_data(st->hs->ng, st->id);
    schedule(st->hs);
}

/* reset_by_us() is true when we sent RST_STREAM on stream id recently. */
static int reset_by_us(const struct h2_server *hs, int32_t id)
{
    unsigned n = hs->nreset < RESET_RING ? hs->nreset : RESET_RING;

    for (unsigned i = 0; i < n; i++)
        if (hs->reset_ids[i] == id)
            return 1;
    return 0;
}

/* A HEADERS frame on a stream identifier below the highest the client
 * used, on a stream that is neither open nor one we reset, is a connection
 * error PROTOCOL_ERROR (RFC 9113 5.1.1; h2spec http2/5.1.1/2), whether the
 * client skipped that identifier or closed its stream: nghttp2 1.52 drops
 * such a frame without a word, before any other callback sees it, so it
 * is caught at the frame header. A stream nghttp2 still knows (say
 * half-closed) is left to nghttp2, which answers STREAM_CLOSED. */
static int on_begin_frame(nghttp2_session *ng, const nghttp2_frame_hd *hd,
                          void *arg)
{
    struct h2_server *hs = arg;
    nghttp2_stream *known;

    if (hd->type != NGHTTP2_HEADERS || (hd->stream_id & 1) == 0)
        return 0;
    /* Noted here, not when the stream opens: a stream nghttp2 refuses
     * (too many open) is still one the client opened. */
    if (hd->stream_id > hs->max_id) {
        hs->max_id = hd->stream_id;
        return 0;
    }
    /* An idle stream a PRIORITY frame made up is not open. */
    known = nghttp2_session_find_stream(ng, hd->stream_id);
    if ((known != NULL &&
         nghttp2_stream_get_state(known) != NGHTTP2_STREAM_STATE_IDLE) ||
        reset_by_us(hs, hd->stream_id))
        return 0;
    STAT_ADD(hs->http, rq_protocol_errors, 1);
    nghttp2_session_terminate_session(ng, NGHTTP2_PROTOCOL_ERROR);
    return 0;
}

/* Every RST_STREAM we send is noted, whoever decided it (the proxy, a
 * limit, nghttp2 refusing a stream over the concurrency limit). */
static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *f, void *arg)
{
    struct h2_server *hs = arg;

    (void)ng;
    if (f->hd.type == NGHTTP2_RST_STREAM)
        hs->reset_ids[hs->nreset++ % RESET_RING] = f->hd.stream_id;
    return 0;
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f,
                            void *arg)
{
    struct h2_server *hs = arg;
    struct h2_stream *st;
    size_t cap = hs->conf->body_cap > hs->h2.stream_window
                     ? hs->conf->body_cap
                     : hs->h2.stream_window;

    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    st->s = hstream_new(hs->pool, cap);
    if (st->s == NULL) {
        free(st);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    st->hs = hs;
    st->id = f->hd.stream_id;
    st->s->h2_stream_id = st->id;
    st->s->req.version = HTTP_2;
    st->s->req.content_length = -1;
    st->s->down = &down_ops;
    st->s->down_ctx = st;
    nghttp2_session_set_stream_user_data(ng, st->id, st);
    list_append(&hs->streams, &st->link);
    hs->nstreams++;
    hs->head_wait = 1;
    timer_arm(&hs->timer, hs->conf->headers_timeout_ms);
    return 0;
}

/* The header block that began (on_begin_headers) is over: complete, or
 * its stream gone. */
static void head_done(struct h2_server *hs)
{
    if (!hs->head_wait)
        return;
    hs->head_wait = 0;
    timer_cancel(&hs->timer);
}

static int has_underscore(const uint8_t *p, size_t n)
{
    return memchr(p, '_', n) != NULL;
}

/* Content-Length as nghttp2 validated it (digits only); values past 18
 * digits are refused rather than overflowed. */
static int64_t parse_length(const uint8_t *v, size_t n)
{
    int64_t cl = 0;

    if (n == 0 || n > 18)
        return -1;
    for (size_t i = 0; i < n; i++)
        cl = cl * 10 + (v[i] - '0');
    return cl;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *arg)
{
    struct h2_server *hs = arg;
    struct h2_stream *st =
        nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    struct hstream *s;
    struct slice n = {(const char *)name, namelen};
    struct slice v = {(const char *)value, valuelen};
    int underscore;

    (void)flags;
    if (st == NULL)
        return 0;
    s = st->s;
    if (st->dispatched) {
        /* Trailers: a header list of their own under the head's limits,
         * as Envoy and nginx apply them. A 1-byte HPACK index can stand
         * for a 4 KiB field, so the decoded size is what counts. Over the
         * limit nghttp2 resets the stream (INTERNAL_ERROR, as Envoy's
         * codec does) and skips the rest of the block; the stream's
         * memory goes when the proxy lets go of it. */
        st->trailer_bytes += namelen + valuelen + 32;
        if (st->trailer_bytes > hs->conf->lim.max_head ||
            ++st->ntrailers > hs->conf->lim.max_headers) {
            STAT_ADD(hs->http, rq_protocol_errors, 1);
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
        if (http_fields_add(&s->req_body.trailers, &s->arena, n, v, SIZE_MAX) <
            0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        return 0;
    }
    if (st->bad_status)
        return 0;
    st->head_bytes += namelen + valuelen + 32;
    if (st->head_bytes > hs->conf->lim.max_head ||
        ++st->nfields > hs->conf->lim.max_headers) {
        st->bad_status = 431;
        return 0;
    }
    if (namelen > 0 && name[0] == ':') {
        struct slice copy = arena_slice(&s->arena, v);
        if (slice_eq_str(n, ":method"))
            s->req.method = copy;
        else if (slice_eq_str(n, ":scheme")) {
            /* A client's :scheme says nothing of how it reached us: an
             * h2c client claiming https would become x-forwarded-proto:
             * https upstream. The scheme is the connection's, as on
             * HTTP/1; a scheme this gateway cannot serve is a 400. */
            if (!slice_case_eq_str(v, "http") && !slice_case_eq_str(v, "https"))
                st->bad_status = 400;
            s->req.scheme =
                hs->conf->tls ? SLICE_LIT("https") : SLICE_LIT("http");
        } else if (slice_eq_str(n, ":authority")) {
            /* Userinfo makes the host ambiguous (RFC 9113 8.3.1 forbids
             * it here): a 400, as for an HTTP/1 target that carries it. */
            if (memchr(value, '@', valuelen) != NULL)
                st->bad_status = 400;
            s->req.authority = copy;
            st->has_authority = 1;
        } else if (slice_eq_str(n, ":path")) {
            /* A fragment is no part of a target (RFC 9112 3.2): passed on,
             * it would let a path slip past rules that match its end. A
             * 400, as on HTTP/1 and in Envoy. */
            if (memchr(value, '#', valuelen) != NULL)
                st->bad_status = 400;
            s->req.path = copy;
        }
        return 0;
    }
    underscore = has_underscore(name, namelen);
    if (underscore && hs->conf->lim.underscores == HTTP_US_REJECT) {
        st->bad_status = 400;
        return 0;
    }
    if (underscore && (hs->conf->lim.underscores == HTTP_US_DROP ||
                       http_name_underscore_twin(n.p, n.n)))
        return 0;
    if (slice_eq_str(n, "host")) {
        if (!st->has_authority)
            s->req.authority = arena_slice(&s->arena, v);
        return 0;
    }
    if (slice_eq_str(n, "content-length")) {
        s->req.content_length = parse_length(value, valuelen);
        if (s->req.content_length < 0)
            st->bad_status = 400;
        return 0;
    }
    if (slice_eq_str(n, "te")) {
        s->req.te_trailers = 1; /* nghttp2 allows only "trailers" */
        return 0;
    }
    if (slice_eq_str(n, "cookie")) {
        /* HTTP/2 splits cookies; an HTTP/1 upstream needs one line. */
        if (st->cookie.n == 0) {
            st->cookie = arena_slice(&s->arena, v);
        } else {
            size_t len = st->cookie.n + 2 + valuelen;
            char *p = arena_alloc(&s->arena, len + 1);
            if (p == NULL)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
            memcpy(p, st->cookie.p, st->cookie.n);
            memcpy(p + st->cookie.n, "; ", 2);
            memcpy(p + st->cookie.n + 2, value, valuelen);
            st->cookie = (struct slice){p, len};
        }
        return 0;
    }
    if (http_fields_add(&s->req.fields, &s->arena, n, v, SIZE_MAX) < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

static void dispatch(struct h2_server *hs, struct h2_stream *st, int end)
{
    struct hstream *s = st->s;

    head_done(hs);
    st->dispatched = 1;
    if (st->cookie.n > 0)
        http_fields_add_ref(&s->req.fields, &s->arena, SLICE_LIT("cookie"),
                            st->cookie);
    s->req.has_body = !end;
    s->req_body.wake_writer = req_consumed;
    s->req_body.writer = st;
    s->req_body.wake_on_consume = 1;
    s->resp_body.wake_reader = resp_ready;
    s->resp_body.reader = st;
    if (end) {
        st->req_ended = 1;
        if (s->req.content_length < 0)
            s->req.content_length = 0;
        hpipe_finish(&s->req_body);
    }
    if (st->bad_status) {
        hstream_ref(s);
        hstream_respond(s, st->bad_status,
                        st->bad_status == 431 ? "request headers too large\n"
                                              : "bad request\n",
                        NULL, NULL);
        STAT_ADD(hs->http, rq_protocol_errors, 1);
        /* No proxy took the stream: the local answer is all there is. */
        s->proxy = NULL;
        hstream_unref(s);
        return;
    }
    hs->hooks.handler->on_request(hs->hooks.ctx, s);
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *arg)
{
    struct h2_server *hs = arg;
    struct h2_stream *st =
        nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    int end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;

    switch (f->hd.type) {
    case NGHTTP2_HEADERS:
        if (st == NULL)
            return 0;
        hs->empty_frames = 0;
        if (!st->dispatched) {
            dispatch(hs, st, end);
        } else if (end && !st->req_ended) {
            st->req_ended = 1;
            hpipe_finish(&st->s->req_body);
        }
        return 0;
    case NGHTTP2_DATA:
        if (f->hd.length == 0 && !end) {
            /* Counted once: frames already in flight keep arriving after
             * our GOAWAY. */
            if (++hs->empty_frames == EMPTY_FRAMES_MAX + 1) {
                STAT_ADD(hs->sh, flood, 1);
                nghttp2_session_terminate_session(ng,
                                                  NGHTTP2_ENHANCE_YOUR_CALM);
            }
            return 0;
        }
        hs->empty_frames = 0;
        if (st != NULL && end && !st->req_ended) {
            st->req_ended = 1;
            hpipe_finish(&st->s->req_body);
        }
        return 0;
    case NGHTTP2_RST_STREAM: {
        uint64_t now = clock_ms();
        if (now - hs->rst_start >= 1000) {
            hs->rst_start = now;
            hs->rst_count = 0;
        }
        if (++hs->rst_count == RST_PER_SECOND + 1) {
            STAT_ADD(hs->sh, rapid_reset, 1);
            nghttp2_session_terminate_session(ng, NGHTTP2_ENHANCE_YOUR_CALM);
        }
        return 0;
    }
    default:
        return 0;
    }
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *arg)
{
    struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, id);
    size_t took;

    (void)flags;
    (void)arg;
    if (st == NULL || st->s->req_body.aborted || st->bad_status) {
        /* Nobody reads this body: return the credit at once. */
        nghttp2_session_consume(ng, id, len);
        return 0;
    }
    took = hpipe_write(&st->s->req_body, data, len);
    st->s->bytes_in += took;
    st->written += took;
    if (took < len) {
        /* Only a peer that ignores our window gets here. */
        nghttp2_session_consume(ng, id, len - took);
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id,
                                  NGHTTP2_FLOW_CONTROL_ERROR);
    }
    return 0;
}

/* The stream is over on our side: the proxy hears of it, memory goes. */
static void stream_release(struct h2_server *hs, struct h2_stream *st,
                           uint32_t code)
{
    struct hstream *s = st->s;

    if (!st->dispatched)
        head_done(hs); /* its header block ended with it */

    /* Request bytes left in the pipe will not be consumed through us any
     * more: return their connection credit now, or every reset or early
     * answer shrinks the connection window for good. */
    if (!hs->closed && st->written > st->reported) {
        nghttp2_session_consume_connection(
            hs->ng, (size_t)(st->written - st->reported));
        st->reported = st->written;
        schedule(hs);
    }

    if (st->head_pending) {
        list_del(&st->head_link);
        st->head_pending = 0;
    }
    if (code != NGHTTP2_NO_ERROR) {
        STAT_ADD(hs->sh, stream_errors, 1);
        /* A reset for a response the proxy failed is not the client's. */
        if (!hpipe_drained(&s->resp_body) && !s->resp_body.aborted &&
            !st->reset)
            s->flags |= HFLAG_DC;
    }
    if (!st->req_ended)
        hpipe_abort(&s->req_body);
    s->req_body.wake_writer = NULL;
    s->resp_body.wake_reader = NULL;
    s->down_done = 1;
    if (st->dispatched && !st->bad_status)
        hs->hooks.handler->on_down_done(hs->hooks.ctx, s);
    hstream_unref(s);
    list_del(&st->link);
    free(st);
    hs->nstreams--;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code,
                           void *arg)
{
    struct h2_server *hs = arg;
    struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, id);

    if (st == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(ng, id, NULL);
    stream_release(hs, st, code);
    arm_idle(hs);
    return 0;
}

static ssize_t read_body(nghttp2_session *ng, int32_t id, uint8_t *buf,
                         size_t length, uint32_t *data_flags,
                         nghttp2_data_source *source, void *arg)
{
    struct h2_stream *st = source->ptr;
    struct hpipe *p = &st->s->resp_body;
    size_t avail;
    const char *data;

    (void)arg;
    if (p->aborted)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    data = hpipe_peek(p, &avail);
    if (avail > length)
        avail = length;
    if (avail > 0) {
        memcpy(buf, data, avail);
        hpipe_consume(p, avail);
        st->s->bytes_out += avail;
    }
    if (hpipe_drained(p)) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
        if (p->trailers.n > 0) {
            nghttp2_nv *nva =
                arena_alloc(&st->s->arena, p->trailers.n * sizeof(*nva));
            if (nva != NULL) {
                for (size_t i = 0; i < p->trailers.n; i++) {
                    nva[i].name = (uint8_t *)p->trailers.v[i].name.p;
                    nva[i].namelen = p->trailers.v[i].name.n;
                    nva[i].value = (uint8_t *)p->trailers.v[i].value.p;
                    nva[i].valuelen = p->trailers.v[i].value.n;
                    nva[i].flags = NGHTTP2_NV_FLAG_NONE;
                }
                *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
                nghttp2_submit_trailer(ng, id, nva, p->trailers.n);
            }
        }
        return (ssize_t)avail;
    }
    if (avail == 0)
        return NGHTTP2_ERR_DEFERRED;
    return (ssize_t)avail;
}

/* The response head of st, submitted now (see heads). */
static void submit_head(struct h2_server *hs, struct h2_stream *st)
{
    struct hstream *s = st->s;
    const struct http_response *r = &s->resp;
    size_t n = r->fields.n + 2;
    nghttp2_nv *nva = arena_alloc(&s->arena, n * sizeof(*nva));
    char status[4], cl[24];
    size_t k = 0;
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = read_body};
    /* No body at all means a HEADERS frame with END_STREAM: what gRPC
     * calls a trailers-only response. */
    int no_body = slice_eq_str(s->req.method, "HEAD") || r->status == 204 ||
                  r->status == 304 || r->status < 200 ||
                  (!r->has_body && r->content_length <= 0);

    if (nva == NULL || hs->closed)
        return;
    snprintf(status, sizeof(status), "%d", r->status);
    nva[k++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)status, 7,
                            strlen(status), NGHTTP2_NV_FLAG_NONE};
    for (size_t i = 0; i < r->fields.n; i++)
        nva[k++] = (nghttp2_nv){(uint8_t *)r->fields.v[i].name.p,
                                (uint8_t *)r->fields.v[i].value.p,
                                r->fields.v[i].name.n, r->fields.v[i].value.n,
                                NGHTTP2_NV_FLAG_NONE};
    if (r->content_length >= 0 && r->status >= 200 && r->status != 204) {
        snprintf(cl, sizeof(cl), "%" PRId64, r->content_length);
        nva[k++] = (nghttp2_nv){(uint8_t *)"content-length", (uint8_t *)cl, 14,
                                strlen(cl), NGHTTP2_NV_FLAG_NONE};
    }
    if (no_body) {
        size_t left;
        hpipe_peek(&s->resp_body, &left);
        hpipe_consume(&s->resp_body, left);
    }
    if (nghttp2_submit_response(hs->ng, st->id, nva, k,
                                no_body ? NULL : &prd) != 0)
        nghttp2_submit_rst_stream(hs->ng, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_INTERNAL_ERROR);
}

static void submit_heads(struct h2_server *hs)
{
    while (!LIST_EMPTY(&hs->heads)) {
        struct h2_stream *st =
            LIST_ELEM(hs->heads.next, struct h2_stream, head_link);
        list_del(&st->head_link);
        st->head_pending = 0;
        submit_head(hs, st);
    }
}

/* The proxy's response head: submitted at the next flush (the same turn
 * of the loop), so that an upstream failing right behind its head can
 * still be answered with an error instead. */
static void response_head(struct hstream *s)
{
    struct h2_stream *st = s->down_ctx;
    struct h2_server *hs = st->hs;

    if (hs->closed)
        return;
    if (!st->head_pending) {
        st->head_pending = 1;
        list_append(&hs->heads, &st->head_link);
    }
    schedule(hs);
}

/* Takes back a head not yet submitted. */
static int retract(struct hstream *s)
{
    struct h2_stream *st = s->down_ctx;

    if (!st->head_pending)
        return -1;
    list_del(&st->head_link);
    st->head_pending = 0;
    return 0;
}

static void reset(struct hstream *s)
{
    struct h2_stream *st = s->down_ctx;
    struct h2_server *hs = st->hs;

    if (st->head_pending) {
        list_del(&st->head_link);
        st->head_pending = 0;
    }
    if (hs->closed)
        return;
    st->reset = 1;
    nghttp2_submit_rst_stream(hs->ng, NGHTTP2_FLAG_NONE, st->id,
                              NGHTTP2_INTERNAL_ERROR);
    schedule(hs);
}

static void continue_100(struct hstream *s)
{
    struct h2_stream *st = s->down_ctx;
    nghttp2_nv nv = {(uint8_t *)":status", (uint8_t *)"100", 7, 3,
                     NGHTTP2_NV_FLAG_NONE};

    if (!st->req_ended)
        nghttp2_submit_headers(st->hs->ng, NGHTTP2_FLAG_NONE, st->id, NULL, &nv,
                               1, NULL);
    schedule(st->hs);
}

static const struct hstream_down_ops down_ops = {response_head, continue_100,
                                                 retract, reset};

static int flush_out(struct h2_server *hs)
{
    submit_heads(hs);
    for (;;) {
        while (buf_len(&hs->out) < OUT_MAX) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(hs->ng, &data);
            if (n < 0)
                return -1;
            if (n == 0)
                break;
            if (buf_append(&hs->out, data, (size_t)n) < 0) {
                /* Larger than the room: grow past the soft cap once. */
                hs->out.max += (size_t)n;
                if (buf_append(&hs->out, data, (size_t)n) < 0)
                    return -1;
            }
        }
        if (buf_len(&hs->out) == 0) {
            hs->write_blocked = 0;
            buf_release_if_empty(&hs->out);
            hs->out.max = OUT_MAX;
            return 0;
        }
        {
            ssize_t w = conn_write(hs->c, buf_ptr(&hs->out), buf_len(&hs->out));
            if (w == CONN_AGAIN) {
                hs->write_blocked = 1;
                return 0;
            }
            if (w < 0)
                return -1;
            buf_consume(&hs->out, (size_t)w);
        }
    }
}

static int read_some(struct h2_server *hs)
{
    uint8_t chunk[READ_CHUNK];

    for (int i = 0; i < READS_PER_TURN && !hs->eof; i++) {
        ssize_t n = conn_read(hs->c, chunk, sizeof(chunk));
        ssize_t used;

        if (n == CONN_AGAIN)
            return 0;
        if (n < 0)
            return -1;
        if (n == 0) {
            hs->eof = 1;
            return 0;
        }
        used = nghttp2_session_mem_recv(hs->ng, chunk, (size_t)n);
        if (used < 0) {
            if (used == NGHTTP2_ERR_FLOODED)
                STAT_ADD(hs->sh, flood, 1);
            else if (used == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS)
                STAT_ADD(hs->sh, continuation, 1);
            else
                STAT_ADD(hs->http, rq_protocol_errors, 1);
            return -1;
        }
        if (hs->closed)
            return -1;
    }
    return 0;
}

static void process(struct h2_server *hs)
{
    if (hs->closed)
        return;
    if (nghttp2_session_want_read(hs->ng) && read_some(hs) < 0) {
        /* Tell the peer why if we still can, then close. */
        flush_out(hs);
        server_close(hs);
        return;
    }
    if (flush_out(hs) < 0) {
        server_close(hs);
        return;
    }
    /* HTTP/2 has no half-close at the TCP level: FIN means the client is
     * gone, and its streams with it. */
    if (hs->eof) {
        server_close(hs);
        return;
    }
    if (!nghttp2_session_want_read(hs->ng) &&
        !nghttp2_session_want_write(hs->ng) && buf_len(&hs->out) == 0) {
        server_close(hs);
        return;
    }
    if (hs->draining && hs->goaway_final && hs->nstreams == 0 &&
        buf_len(&hs->out) == 0) {
        server_close(hs);
        return;
    }
    conn_want(hs->c, !hs->eof && nghttp2_session_want_read(hs->ng),
              hs->write_blocked);
}

static void on_idle(void *arg)
{
    struct h2_server *hs = arg;

    if (hs->head_wait) {
        /* A request head that never ended (slowloris over HTTP/2): until
         * it does, the connection can carry nothing else. */
        hs->head_wait = 0;
        STAT_ADD(hs->http, rq_header_timeout, 1);
        nghttp2_session_terminate_session(hs->ng, NGHTTP2_NO_ERROR);
        hs->draining = 1;
        hs->goaway_final = 1;
        process(hs);
        return;
    }
    if (hs->nstreams > 0)
        return;
    nghttp2_session_terminate_session(hs->ng, NGHTTP2_NO_ERROR);
    hs->draining = 1;
    hs->goaway_final = 1;
    process(hs);
}

struct h2_server *
h2_server_new(struct event_base *base, struct conn *c,
              const struct http_conn_conf *conf, const struct h2_settings *h2,
              const struct h2_server_hooks *hooks, struct bufpool *pool,
              struct http_counters *http, struct h2_counters *counters)
{
    struct h2_server *hs = calloc(1, sizeof(*hs));
    nghttp2_session_callbacks *cb = NULL;
    nghttp2_option *opt = NULL;
    nghttp2_settings_entry iv[3];

    if (hs == NULL)
        return NULL;
    hs->c = c;
    hs->base = base;
    hs->conf = conf;
    hs->h2 = *h2;
    hs->hooks = *hooks;
    hs->pool = pool;
    hs->http = http;
    hs->sh = counters;
    LIST_INIT(&hs->streams);
    LIST_INIT(&hs->heads);
    buf_init(&hs->out, OUT_MAX);
    timer_init(&hs->timer, base, on_idle, hs);
    timer_init(&hs->drain_ev, base, on_drain_notice, hs);
    if (nghttp2_session_callbacks_new(&cb) != 0 ||
        nghttp2_option_new(&opt) != 0)
        goto fail;
    nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb,
                                                            on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb,
                                                              on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    /* Window updates follow what the proxy consumed, not what arrived. */
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_option_set_max_continuations(opt, 8);
    nghttp2_option_set_stream_reset_rate_limit(opt, 1000, 100);
    if (nghttp2_session_server_new2(&hs->ng, cb, hs, opt) != 0)
        goto fail;
    nghttp2_session_callbacks_del(cb);
    nghttp2_option_del(opt);
    cb = NULL;
    opt = NULL;
    iv[0] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS,
                                     h2->max_concurrent_streams};
    iv[1] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE,
                                     h2->stream_window};
    iv[2] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_ENABLE_PUSH, 0};
    if (nghttp2_submit_settings(hs->ng, NGHTTP2_FLAG_NONE, iv, 3) != 0)
        goto fail;
    nghttp2_session_set_local_window_size(hs->ng, NGHTTP2_FLAG_NONE, 0,
                                          (int32_t)h2->connection_window);
    c->on_io = on_io;
    c->arg = hs;
    arm_idle(hs);
    schedule(hs);
    return hs;
fail:
    if (cb != NULL)
        nghttp2_session_callbacks_del(cb);
    if (opt != NULL)
        nghttp2_option_del(opt);
    if (hs->ng != NULL)
        nghttp2_session_del(hs->ng);
    free(hs);
    return NULL;
}

static void on_drain_notice(void *arg)
{
    struct h2_server *hs = arg;

    if (hs->closed || hs->goaway_final)
        return;
    /* Streams the client opened before it saw the notice have arrived by
     * now: name the last one we take, and finish those. */
    hs->goaway_final = 1;
    nghttp2_submit_goaway(hs->ng, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(hs->ng),
                          NGHTTP2_NO_ERROR, NULL, 0);
    schedule(hs);
}

int h2_server_received(struct h2_server *hs, const uint8_t *data, size_t n)
{
    return nghttp2_session_mem_recv(hs->ng, data, n) == (ssize_t)n ? 0 : -1;
}

void h2_server_drain(struct h2_server *hs)
{
    if (hs->draining || hs->closed)
        return;
    hs->draining = 1;
    /* A GOAWAY naming the last stream at once would refuse requests the
     * client already sent. First the notice (GOAWAY with the highest
     * stream id: open no more), a moment later the real one. */
    nghttp2_submit_shutdown_notice(hs->ng);
    timer_arm(&hs->drain_ev, DRAIN_NOTICE_MS);
    schedule(hs);
}

void h2_server_free(struct h2_server *hs)
{
    if (hs == NULL)
        return;
    hs->hooks.closed = NULL;
    hs->closed = 1;
    timer_dispose(&hs->timer);
    timer_dispose(&hs->drain_ev);
    /* nghttp2_session_del() does not report open streams: release them
     * here, as reset by us. */
    while (!LIST_EMPTY(&hs->streams))
        stream_release(hs, LIST_ELEM(hs->streams.next, struct h2_stream, link),
                       NGHTTP2_CANCEL);
    nghttp2_session_del(hs->ng);
    buf_dispose(&hs->out);
    free(hs);
}

static const struct stats_field h2_fields[] = {
    {"rapid_reset", offsetof(struct h2_counters, rapid_reset), STATS_NONE},
    {"flood", offsetof(struct h2_counters, flood), STATS_NONE},
    {"continuation_flood", offsetof(struct h2_counters, continuation),
     STATS_NONE},
    {"stream_errors", offsetof(struct h2_counters, stream_errors), STATS_NONE},
};

const struct stats_desc h2_counters_desc = {
    "http2.", h2_fields, sizeof(h2_fields) / sizeof(h2_fields[0])};
