/*
 * One request through the proxy: route it, send it to an endpoint of the
 * route's cluster over a pooled connection (retrying the connection on
 * the next endpoint), relay the response, and log the exchange.
 */
#include "config.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "net/listener.h"
#include "proxy/http_proxy-t.h"
#include "policy/authz.h"
#include "proxy/router.h"
#include "tls/tls.h"

#define CONNECT_ATTEMPTS 3

/*
 * A request body is kept for a retry or a mirror up to this many bytes:
 * Envoy's default per_request_buffer_limit (its connection buffer limit,
 * 1 MiB). A longer body is passed on as usual, but the request is no
 * longer retried and is not mirrored (Envoy's retry_or_shadow_abandoned).
 */
#define BODY_KEEP_LIMIT ((size_t)1 << 20)

/* A mirrored copy on a route without a timeout still ends: it gets Envoy's
 * default route timeout, so a stalled mirror never holds memory for long. */
#define MIRROR_TIMEOUT_MS 15000

struct pstream {
    struct hstream *s;
    struct http_conn *hc;
    struct http_listener *l;
    struct wroutes *wr;           /* pinned: the routes this stream runs on */
    int cluster;                  /* index in wr's clusters; -1: none */
    uint64_t timeout_ms;          /* the route's; 0: none */
    struct route_result rr;       /* Gateway listeners: the router's pick */
    const struct route_action *action;
    struct slice cors_origin;     /* an allowed CORS Origin; empty: none */
    struct event delay;           /* fault injection delay */
    unsigned delay_on : 1;
    struct upool *pool;
    struct h1_client *uc;
    struct h2c_stream *h2s;
    size_t ep;
    int attempts;
    struct event timer;
    unsigned timer_on : 1;
    unsigned up_done : 1;
    unsigned down_done : 1;
    unsigned counted : 1;
    unsigned replayed : 1;      /* sent again after a keep-alive race */
    unsigned retries;           /* retries done (VirtualService retries) */
    unsigned busy : 1;          /* counted in flight on busy_ep */
    unsigned admitted : 1;      /* holds a circuit breaker slot */
    unsigned retry_slot : 1;    /* holds a retry circuit breaker slot */
    size_t busy_ep;
    unsigned reuse_blocked : 1; /* take no pooled connection any more */
    struct upool_waiter waiter; /* waiting for a connection (maxConnections) */
    unsigned waiting : 1;
    const char *details;  /* why a local answer was given, for the log */
    struct slice set_cookie; /* consistent hash: a generated cookie */
    const char *upstream; /* endpoint address, for the log */
    const char *client;   /* originating client, after trusted hops */
    struct event try_timer; /* retries.perTryTimeout of this attempt */
    unsigned try_on : 1;
    unsigned body_overflow : 1; /* counted as not retriable for its body */
    /* The primary: launches the mirror once the whole body is here. A
     * mirrored copy: drains the copy's response. */
    struct event aux;
    unsigned mirror_wait : 1;   /* a mirror waits for the request body */
    unsigned try_wait : 1;      /* the per-try deadline waits for it too */
    unsigned shadow : 1;        /* this is a mirrored copy (fire and forget) */
    unsigned mirrored : 1;      /* the mirror was dealt with */
    unsigned shadow_failed : 1; /* the copy ended with a local error */
    struct list link;           /* a copy: in l->mirrors or l->mirrors_dead */
};

static const struct h1_client_hooks up_hooks;

static uint64_t rng_next(struct http_listener *l)
{
    /* xorshift64: request ids need uniqueness, not secrecy. */
    uint64_t x = l->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    l->rng = x;
    return x;
}

static void count_status(struct pstream *ps, int status)
{
    struct listener_counters *sh = http_shard(ps->l);
    int cls = http_status_class(status);

    if (ps->counted)
        return;
    ps->counted = 1;
    STAT_ADD(sh, rq_total, 1);
    if (cls > 0)
        STAT_ADD(sh, rq_class[cls], 1);
}

static const char *proto_name(enum http_version v)
{
    return v == HTTP_2 ? "HTTP/2" : v == HTTP_10 ? "HTTP/1.0" : "HTTP/1.1";
}

static void access_log(struct pstream *ps)
{
    struct hstream *s = ps->s;
    char status[8], in[24], out[24], dur[24], flags[64], retries[12];
    char method[16], authority[256], path[1024];
    const struct http_field *rid = http_fields_get(&s->req.fields,
                                                   "x-request-id");
    char id[64] = "-";
    char peer_uri[512] = "";
    struct log_field f[] = {
        {"listener", ps->l->conf->name, 0},
        {"downstream", ps->hc->peer_ip, 0},
        {"client", ps->client ? ps->client : ps->hc->peer_ip, 0},
        {"method", method, 0},
        {"authority", authority, 0},
        {"path", path, 0},
        {"protocol", proto_name(s->req.version), 0},
        {"status", status, 1},
        {"bytes_in", in, 1},
        {"bytes_out", out, 1},
        {"duration_ms", dur, 1},
        {"upstream", ps->upstream ? ps->upstream : "-", 0},
        {"cluster",
         ps->cluster >= 0 ? http_cluster(ps->wr, ps->cluster)->name : "-", 0},
        {"route", ps->action ? ps->action->vs : NULL, 0},
        {"flags", hstream_flags_str(s->flags, flags, sizeof(flags)), 0},
        {"retries", retries, 1},
        {"request_id", id, 0},
        {"details", ps->details ? ps->details : "-", 0},
        /* Envoy's %DOWNSTREAM_PEER_URI_SAN%: a verified client's SPIFFE
         * ID (Gateway MUTUAL or OPTIONAL_MUTUAL). */
        {"peer_uri_san", NULL, 0}, /* last: set below */
    };

    snprintf(method, sizeof(method), "%.*s", (int)s->req.method.n,
             s->req.method.p);
    snprintf(authority, sizeof(authority), "%.*s", (int)s->req.authority.n,
             s->req.authority.p);
    snprintf(path, sizeof(path), "%.*s", (int)s->req.path.n, s->req.path.p);
    snprintf(status, sizeof(status), "%d", s->resp.status);
    snprintf(retries, sizeof(retries), "%u", ps->retries);
    snprintf(in, sizeof(in), "%" PRIu64, s->bytes_in);
    snprintf(out, sizeof(out), "%" PRIu64, s->bytes_out);
    snprintf(dur, sizeof(dur), "%" PRIu64, clock_ms() - s->start_ms);
    if (rid != NULL)
        snprintf(id, sizeof(id), "%.*s", (int)rid->value.n, rid->value.p);
    if (ps->hc->conn.tls != NULL &&
        tls_conn_peer_uri_san(&ps->hc->conn, peer_uri, sizeof(peer_uri)) > 0)
        f[sizeof(f) / sizeof(f[0]) - 1].val = peer_uri;
    log_event(LOG_INFO, "http_request", f, (int)(sizeof(f) / sizeof(f[0])));
}

/* Both sides are finished with the stream: log it and let it go. */
static void maybe_end(struct pstream *ps)
{
    struct hstream *s = ps->s;

    if (!ps->up_done || !ps->down_done)
        return;
    if (ps->timer_on) {
        event_del(&ps->timer);
        ps->timer_on = 0;
    }
    if (ps->try_on) {
        event_del(&ps->try_timer);
        ps->try_on = 0;
    }
    event_del(&ps->aux);
    if (s->req_body.end_arg == ps) {
        s->req_body.on_end = NULL;
        s->req_body.end_arg = NULL;
    }
    ps->try_wait = 0;
    if (ps->mirror_wait) {
        /* The request ended before its body was whole: no copy. */
        ps->mirror_wait = 0;
        STAT_ADD(http_shard(ps->l), rq_mirror_skipped, 1);
    }
    if (ps->delay_on) {
        event_del(&ps->delay);
        ps->delay_on = 0;
    }
    if (ps->admitted) {
        cluster_release(ps->pool->cl);
        ps->admitted = 0;
    }
    if (ps->retry_slot) {
        cluster_release_retry(ps->pool->cl);
        ps->retry_slot = 0;
    }
    if (ps->shadow) {
        /* A copy is not a request of the listener: it is neither counted
         * nor logged there. Its memory goes on the reaper's turn. */
        if (ps->shadow_failed)
            STAT_ADD(http_shard(ps->l), rq_mirror_failed, 1);
        s->resp_body.wake_reader = NULL;
        http_listener_unpin(ps->l, ps->wr);
        s->proxy = NULL;
        list_del(&ps->link);
        list_append(&ps->l->mirrors_dead, &ps->link);
        event_active(ps->l->reap_ev, EV_TIMEOUT, 0);
        hstream_unref(s); /* the proxy's; the reaper drops the copy's own */
        return;
    }
    count_status(ps, s->resp.status);
    if (ps->l->conf->access_log)
        access_log(ps);
    http_listener_unpin(ps->l, ps->wr);
    s->proxy = NULL;
    hstream_unref(s);
}

static void up_finished(struct pstream *ps)
{
    if (ps->waiting) {
        upool_unwait(ps->pool, &ps->waiter);
        ps->waiting = 0;
    }
    if (ps->busy) {
        upool_done(ps->pool, ps->busy_ep);
        ps->busy = 0;
    }
    /* The upstream side is over: its deadline no longer applies (a slow
     * client still reading the last bytes is not a timeout). */
    if (ps->timer_on) {
        event_del(&ps->timer);
        ps->timer_on = 0;
    }
    if (ps->try_on) {
        event_del(&ps->try_timer);
        ps->try_on = 0;
    }
    ps->try_wait = 0;
    if (ps->delay_on) {
        event_del(&ps->delay); /* a retry's backoff, cut short */
        ps->delay_on = 0;
    }
    ps->up_done = 1;
    maybe_end(ps);
}

/* Answers locally (no route, upstream failures, timeouts) if nothing was
 * sent yet; otherwise the downstream codec resets the stream. */
/* gRPC clients read errors from grpc-status, not the HTTP status: local
 * answers to gRPC requests are trailers-only responses (HTTP 200, no body)
 * with the code that matches what happened. */
static int grpc_code(int status)
{
    switch (status) {
    case 404:
        return 12; /* UNIMPLEMENTED */
    case 504:
        return 4; /* DEADLINE_EXCEEDED */
    case 429:
        return 8; /* RESOURCE_EXHAUSTED */
    default:
        return 14; /* UNAVAILABLE */
    }
}

static int is_grpc(const struct hstream *s)
{
    const struct http_field *ct = http_fields_get(&s->req.fields,
                                                  "content-type");

    return ct != NULL && slice_has_prefix(ct->value,
                                          SLICE_LIT("application/grpc"));
}

static void local_reply(struct pstream *ps, int status, unsigned flags,
                        const char *body)
{
    struct hstream *s = ps->s;

    s->flags |= flags;
    if (ps->shadow)
        ps->shadow_failed = 1;
    if (!s->resp_started && !s->down_done && is_grpc(s)) {
        char code[8];
        snprintf(code, sizeof(code), "%d", grpc_code(status));
        hstream_respond_grpc(s, code, body);
    } else if (!s->resp_started && !s->down_done) {
        hstream_respond(s, status, body, NULL, NULL);
    } else if (!hpipe_drained(&s->resp_body)) {
        hpipe_abort(&s->resp_body);
    }
    if (!s->resp_started)
        s->resp.status = status;
    /* The request body will not be read: let the codec know. */
    if (!s->req_body.eof)
        hpipe_abort(&s->req_body);
}

static void release_upstream(struct pstream *ps, int reuse)
{
    struct h1_client *uc = ps->uc;

    if (ps->h2s != NULL) {
        struct h2c_stream *st = ps->h2s;
        ps->h2s = NULL;
        h2_client_cancel(st);
    }
    if (uc == NULL)
        return;
    ps->uc = NULL;
    if (reuse)
        upool_put(ps->pool, uc);
    else
        upool_discard(ps->pool, uc);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct pstream *ps = arg;

    (void)fd;
    (void)what;
    ps->timer_on = 0;
    STAT_ADD(upool_stats(ps->pool), rq_timeout, 1);
    if ((ps->uc != NULL || ps->h2s != NULL) && ps->s->resp.status == 0)
        upool_report(ps->pool, ps->ep, OUTLIER_TIMEOUT);
    release_upstream(ps, 0);
    local_reply(ps, 504, HFLAG_UT, "upstream request timeout\n");
    up_finished(ps);
}

static void connect_next(struct pstream *ps);
static void mirror_begin(struct pstream *ps);

/*
 * The request can be sent again from its start: it has no body, or all of
 * its body that was passed on is still kept (BODY_KEEP_LIMIT). An upgrade
 * carries a tunnel, never replayed.
 */
static int replayable(const struct pstream *ps)
{
    const struct hstream *s = ps->s;

    if (!s->req.has_body)
        return 1;
    return !s->req.upgrade && hpipe_replayable(&s->req_body);
}

/* The cluster's retry circuit breaker lets this request retry: its slot,
 * taken at the first retry, is held until the request ends. */
static int retry_admitted(struct pstream *ps)
{
    if (ps->retry_slot)
        return 1;
    if (!cluster_admit_retry(ps->pool->cl)) {
        STAT_ADD(upool_stats(ps->pool), rq_retry_overflow, 1);
        return 0;
    }
    ps->retry_slot = 1;
    return 1;
}

/*
 * gRPC retry conditions (Envoy's retry_grpc_on, which Istio's retryOn
 * names share): a trailers-only answer whose grpc-status is one the policy
 * lists. A status in real trailers comes after the response has started
 * and is never retried.
 */
static int retriable_grpc(const struct pstream *ps, const struct route_retry *r)
{
    static const struct {
        int code;
        uint32_t bit;
    } codes[] = {
        {1, ROUTE_RETRY_CANCELLED},
        {4, ROUTE_RETRY_DEADLINE_EXCEEDED},
        {8, ROUTE_RETRY_RESOURCE_EXHAUSTED},
        {13, ROUTE_RETRY_INTERNAL},
        {14, ROUTE_RETRY_UNAVAILABLE},
    };
    const struct http_field *g;
    int code = 0;

    if (!(r->on & (ROUTE_RETRY_CANCELLED | ROUTE_RETRY_DEADLINE_EXCEEDED |
                   ROUTE_RETRY_RESOURCE_EXHAUSTED | ROUTE_RETRY_INTERNAL |
                   ROUTE_RETRY_UNAVAILABLE)))
        return 0;
    g = http_fields_get(&ps->s->resp.fields, "grpc-status");
    if (g == NULL || g->value.n == 0 || g->value.n > 2)
        return 0;
    for (size_t i = 0; i < g->value.n; i++) {
        if (g->value.p[i] < '0' || g->value.p[i] > '9')
            return 0;
        code = code * 10 + (g->value.p[i] - '0');
    }
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (codes[i].code == code)
            return (r->on & codes[i].bit) != 0;
    return 0;
}

static int retriable_status(const struct pstream *ps, int status)
{
    const struct route_retry *r;

    if (ps->action == NULL)
        return 0;
    r = &ps->action->retry;
    if (retriable_grpc(ps, r))
        return 1;
    if ((r->on & ROUTE_RETRY_5XX) && status >= 500 && status <= 599)
        return 1;
    if ((r->on & ROUTE_RETRY_GATEWAY_ERROR) &&
        (status == 502 || status == 503 || status == 504))
        return 1;
    if (r->on & ROUTE_RETRY_RETRIABLE_STATUS_CODES)
        for (size_t i = 0; i < r->nstatuses; i++)
            if (r->statuses[i] == status)
                return 1;
    return 0;
}

static int retriable_failure(const struct pstream *ps, unsigned flags)
{
    const struct route_retry *r;

    if (ps->action == NULL)
        return 0;
    r = &ps->action->retry;
    if (r->on & ROUTE_RETRY_5XX)
        return 1; /* Envoy's 5xx covers connect failures and resets */
    if ((flags & HFLAG_UF) && (r->on & (ROUTE_RETRY_CONNECT_FAILURE |
                                        ROUTE_RETRY_GATEWAY_ERROR)))
        return 1;
    return (r->on & (ROUTE_RETRY_RESET | ROUTE_RETRY_GATEWAY_ERROR)) != 0;
}

/* An attempt past retries.perTryTimeout: Envoy retries it under the
 * conditions that cover an upstream that does not answer (5xx,
 * gateway-error, reset). */
static int retriable_timeout(const struct pstream *ps)
{
    return ps->action != NULL &&
           (ps->action->retry.on & (ROUTE_RETRY_5XX |
                                    ROUTE_RETRY_GATEWAY_ERROR |
                                    ROUTE_RETRY_RESET)) != 0;
}

/*
 * should_retry() decides whether a failed attempt is tried again, as a
 * VirtualService's retries ask. retriable: the policy covers what
 * happened. Only while attempts remain, nothing was passed on, the
 * request can be replayed and the cluster's retry breaker admits it.
 */
static int should_retry(struct pstream *ps, int retriable)
{
    const struct hstream *s = ps->s;

    if (!retriable || ps->retries >= ps->action->retry.attempts ||
        s->resp_started || s->down_done)
        return 0;
    if (!replayable(ps)) {
        /* Envoy's retry_or_shadow_abandoned, once per request. */
        if (!ps->body_overflow) {
            ps->body_overflow = 1;
            STAT_ADD(upool_stats(ps->pool), rq_retry_body_overflow, 1);
        }
        return 0;
    }
    return retry_admitted(ps);
}

/* Starts the next try after the backoff; the previous exchange is gone.
 * The body, if any, is read again from its first byte. */
static void retry_later(struct pstream *ps)
{
    struct hstream *s = ps->s;
    uint64_t base = UINT64_C(25) << (ps->retries < 6 ? ps->retries : 6);
    uint64_t ms = base / 2 + rng_next(ps->l) % (base / 2 + 1);
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};

    if (ps->try_on) {
        event_del(&ps->try_timer);
        ps->try_on = 0;
    }
    if (s->req.has_body)
        hpipe_rewind(&s->req_body); /* replayable() held */
    STAT_ADD(upool_stats(ps->pool), rq_retry, 1);
    ps->retries++;
    memset(&s->resp, 0, sizeof(s->resp));
    s->resp.content_length = -1;
    hpipe_reset(&s->resp_body);
    ps->attempts = 0;
    ps->ep = upool_next(ps->pool, ps->ep);
    event_add(&ps->delay, &tv);
    ps->delay_on = 1;
}

/*
 * cors_headers() adds the corsPolicy's answer to an allowed cross-origin
 * request, as Envoy's CORS filter does: the origin echoed back, the
 * credentials flag, and either the exposed headers (actual requests) or
 * the allowed methods, headers and max age (preflights).
 */
static int cors_headers(struct pstream *ps, int preflight)
{
    const struct route_cors *c = ps->action ? ps->action->cors : NULL;
    struct http_fields *f = &ps->s->resp.fields;
    struct arena *a = &ps->s->arena;
    char age[24];

    if (c == NULL || ps->cors_origin.n == 0)
        return 0;
    if (http_fields_set(f, a, "access-control-allow-origin",
                        ps->cors_origin) < 0)
        return -1;
    if (c->allow_credentials &&
        http_fields_set(f, a, "access-control-allow-credentials",
                        SLICE_LIT("true")) < 0)
        return -1;
    if (!preflight)
        return c->expose_headers.n == 0
                   ? 0
                   : http_fields_set(f, a, "access-control-expose-headers",
                                     c->expose_headers);
    if (c->allow_methods.n > 0 &&
        http_fields_set(f, a, "access-control-allow-methods",
                        c->allow_methods) < 0)
        return -1;
    if (c->allow_headers.n > 0 &&
        http_fields_set(f, a, "access-control-allow-headers",
                        c->allow_headers) < 0)
        return -1;
    if (c->max_age_ms >= 0) {
        snprintf(age, sizeof(age), "%" PRId64, c->max_age_ms / 1000);
        if (http_fields_set(f, a, "access-control-max-age", slice_of(age)) < 0)
            return -1;
    }
    return 0;
}

/*
 * cors_request() looks at the Origin of a request on a route with a
 * corsPolicy. An allowed origin is remembered for the response headers;
 * an allowed preflight (OPTIONS with Access-Control-Request-Method) is
 * answered here with 200 and returns 1. A disallowed origin gets no CORS
 * headers and the request goes on, as with Envoy: the browser enforces.
 */
static int cors_request(struct pstream *ps)
{
    struct hstream *s = ps->s;
    const struct http_field *o = http_fields_get(&s->req.fields, "origin");

    if (ps->action->cors == NULL || o == NULL || o->value.n == 0 ||
        !router_cors_origin_allowed(ps->action->cors, o->value, &s->arena))
        return 0;
    ps->cors_origin = o->value;
    if (!slice_eq(s->req.method, SLICE_LIT("OPTIONS")) ||
        http_fields_get(&s->req.fields, "access-control-request-method") ==
            NULL)
        return 0;
    if (hstream_reply_begin(s, 200, NULL) < 0)
        return 1;
    if (cors_headers(ps, 1) < 0)
        return hstream_respond(s, 503, "out of memory\n", NULL, NULL), 1;
    hstream_reply_end(s, NULL);
    return 1;
}

/*
 * retries.perTryTimeout: the attempt ran past its own deadline. Its
 * exchange is abandoned (an HTTP/1 connection is closed, not pooled; an
 * HTTP/2 stream is reset) and, when the policy covers it and attempts
 * remain, the request is tried again; otherwise it is answered 504 with
 * Envoy's UT flag (and URX once retries were spent). The route's timeout
 * keeps running across attempts and still bounds them all. Once the
 * answer has started the deadline is ignored, as Envoy does: the
 * response goes on up to the route's timeout.
 */
static void on_try_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct pstream *ps = arg;

    (void)fd;
    (void)what;
    ps->try_on = 0;
    if (ps->s->resp_started)
        return;
    STAT_ADD(upool_stats(ps->pool), rq_per_try_timeout, 1);
    if (ps->uc != NULL || ps->h2s != NULL)
        upool_report(ps->pool, ps->ep, OUTLIER_TIMEOUT);
    release_upstream(ps, 0);
    if (should_retry(ps, retriable_timeout(ps))) {
        retry_later(ps);
        return;
    }
    STAT_ADD(upool_stats(ps->pool), rq_timeout, 1);
    local_reply(ps, 504, HFLAG_UT | (ps->retries > 0 ? HFLAG_URX : 0),
                "upstream request timeout\n");
    up_finished(ps);
}

/* The request body ended (or failed): what waited for it (a mirror, the
 * per-try deadline) goes on. Called from inside hpipe_finish/hpipe_abort,
 * so it only arms an event (on_aux). */
static void body_end(void *arg)
{
    struct pstream *ps = arg;

    event_active(&ps->aux, EV_TIMEOUT, 0);
}

static int body_complete(const struct pstream *ps)
{
    const struct hpipe *b = &ps->s->req_body;

    return !ps->s->req.has_body || b->eof || b->aborted;
}

static void wait_body(struct pstream *ps)
{
    ps->s->req_body.on_end = body_end;
    ps->s->req_body.end_arg = ps;
}

/* Each attempt gets its own deadline when the route has perTryTimeout. As
 * Envoy's, it starts once the attempt is under way and the whole request
 * has arrived (a slow upload is not the upstream's fault), and runs until
 * the exchange ends. */
static void arm_try_timer(struct pstream *ps)
{
    uint64_t ms = ps->action != NULL ? ps->action->retry.per_try_timeout_ms : 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};

    if (ms == 0 || ps->try_on)
        return;
    if (!body_complete(ps)) {
        ps->try_wait = 1;
        wait_body(ps);
        return;
    }
    event_add(&ps->try_timer, &tv);
    ps->try_on = 1;
}

static void up_connect_failed(void *ctx, struct h1_client *c, int timeout)
{
    struct pstream *ps = ctx;
    const char *verr = tls_conn_verify_error(&c->conn);

    if (verr != NULL) {
        /* The upstream's certificate was refused: wrong root, expired,
         * or not the identity the DestinationRule expects. */
        char as[ADDR_STRLEN];
        size_t n = strlen("upstream_tls_refused:") + strlen(verr) + 1;
        char *d = arena_alloc(&ps->s->arena, n);
        if (d != NULL)
            snprintf(d, n, "upstream_tls_refused:%s", verr);
        ps->details = d;
        log_warn("cluster %s: upstream %s: certificate refused: %s",
                 ps->pool->cl->name,
                 addr_format(&ps->pool->cl->endpoints[c->endpoint], as,
                             sizeof(as)),
                 verr);
    }

    STAT_ADD(upool_stats(ps->pool),
             cx_connect_fail, 1);
    upool_report(ps->pool, c->endpoint, OUTLIER_CONNECT_FAILED);
    if (timeout)
        STAT_ADD(upool_stats(ps->pool), cx_connect_timeout, 1);
    ps->uc = NULL;
    upool_discard(ps->pool, c);
    ps->ep = upool_next(ps->pool, ps->ep);
    connect_next(ps);
}

static void up_head(void *ctx, struct h1_client *c)
{
    struct pstream *ps = ctx;
    struct hstream *s = ps->s;

    (void)c;
    upool_report(ps->pool, ps->ep, s->resp.status);
    /* The client side may have answered already (a bad request body). */
    if (s->down_done || s->resp_started)
        return;
    if (should_retry(ps, retriable_status(ps, s->resp.status))) {
        release_upstream(ps, 0);
        retry_later(ps);
        return;
    }
    /* A retriable answer passed on because the retries are spent: Envoy's
     * URX. */
    if (ps->retries > 0 && retriable_status(ps, s->resp.status))
        s->flags |= HFLAG_URX;
    if (ps->action != NULL &&
        (router_apply_headers(&ps->rr, 1, &s->resp.fields, &s->arena) < 0 ||
         cors_headers(ps, 0) < 0))
        s->flags |= HFLAG_UPE;
    if (ps->set_cookie.n > 0 &&
        http_fields_add_ref(&s->resp.fields, &s->arena,
                            SLICE_LIT("set-cookie"), ps->set_cookie) < 0)
        s->flags |= HFLAG_UPE;
    s->resp_started = 1;
    /* A per-try deadline no longer applies (Envoy ignores it from here). */
    if (ps->try_on) {
        event_del(&ps->try_timer);
        ps->try_on = 0;
    }
    ps->try_wait = 0;
    /* The answer is passed on: no retry can follow, so the kept body is
     * let go (a long gRPC stream would keep it for nothing) unless a
     * mirror still waits to copy it. */
    if (s->req_body.keeping && !ps->mirror_wait)
        hpipe_keep_stop(&s->req_body);
    s->down->response_head(s);
}

static void up_done(void *ctx, struct h1_client *c, int ok, int reusable,
                    unsigned flags)
{
    struct pstream *ps = ctx;
    struct hstream *s = ps->s;

    /* A pooled connection the upstream closed just as we reused it (the
     * keep-alive race) fails before any response byte: a request that can
     * be replayed (no body, or a kept one) is sent again on a new
     * connection, once. */
    if (!ok && c != NULL && c->requests > 1 && !s->resp_started &&
        !s->down_done && replayable(ps) && !ps->replayed &&
        (flags & HFLAG_UC)) {
        ps->replayed = 1;
        release_upstream(ps, 0);
        if (s->req.has_body)
            hpipe_rewind(&s->req_body);
        ps->reuse_blocked = 1;
        connect_next(ps);
        return;
    }
    /* Broken before any answer: the endpoint's failure, for outlier
     * detection (an answer was counted when its head came). */
    if (!ok && s->resp.status == 0 && !(flags & HFLAG_DC))
        upool_report(ps->pool, ps->ep, OUTLIER_RESET);
    if (!ok && should_retry(ps, retriable_failure(ps, flags))) {
        release_upstream(ps, 0);
        retry_later(ps);
        return;
    }
    if (!ok) {
        STAT_ADD(upool_stats(ps->pool), rq_error, 1);
        if (!ps->shadow)
            STAT_ADD(http_shard(ps->l), rq_upstream_errors, 1);
        if (ps->retries > 0)
            s->flags |= HFLAG_URX;
        release_upstream(ps, 0);
        local_reply(ps, flags & HFLAG_UPE ? 502 : 503, flags,
                    "upstream connect error or disconnect\n");
    } else {
        release_upstream(ps, reusable && !s->down_done);
    }
    up_finished(ps);
}

static void up_idle_closed(void *ctx, struct h1_client *c)
{
    (void)ctx;
    (void)c;
}

static const struct h1_client_hooks up_hooks = {up_connect_failed, up_head,
                                                up_done, up_idle_closed};

static void h2_head(void *ctx)
{
    struct pstream *ps = ctx;

    up_head(ps, NULL);
}

static void h2_done(void *ctx, int ok, unsigned flags)
{
    struct pstream *ps = ctx;

    ps->h2s = NULL; /* the exchange is gone */
    if (!ok && (flags & HFLAG_UF) && !ps->s->resp_started) {
        /* The connection never came up: try the next endpoint. */
        STAT_ADD(upool_stats(ps->pool), cx_connect_fail, 1);
        upool_report(ps->pool, ps->ep, OUTLIER_CONNECT_FAILED);
        ps->ep = upool_next(ps->pool, ps->ep);
        connect_next(ps);
        return;
    }
    up_done(ps, NULL, ok, 0, flags);
}

static const struct h2c_stream_hooks h2_hooks = {h2_head, h2_done};

/* A connection of the pool went idle or closed: try again. */
static void on_wake(struct upool_waiter *w)
{
    struct pstream *ps = (struct pstream *)(void *)((char *)w -
                                                    offsetof(struct pstream,
                                                             waiter));

    ps->waiting = 0;
    connect_next(ps);
}

static void connect_next(struct pstream *ps)
{
    struct upool *p = ps->pool;
    const struct cluster *cl = p->cl;
    char as[ADDR_STRLEN];

    while (ps->attempts < CONNECT_ATTEMPTS &&
           (size_t)ps->attempts < cl->nendpoints + 1) {
        struct h1_client *c;

        if (cl->protocol == CLUSTER_HTTP2) {
            struct h2_client *h2 = upool_h2_get(p, ps->ep);
            ps->attempts++;
            if (h2 == NULL) {
                STAT_ADD(upool_stats(p), cx_connect_fail, 1);
                ps->ep = upool_next(p, ps->ep);
                continue;
            }
            addr_format(&cl->endpoints[ps->ep], as, sizeof(as));
            ps->upstream = arena_dup(&ps->s->arena, as, strlen(as));
            ps->h2s = h2_client_submit(h2, ps->s, &h2_hooks, ps);
            if (ps->h2s == NULL)
                break;
            arm_try_timer(ps);
            return;
        }
        c = ps->reuse_blocked ? NULL : upool_take(p, ps->ep);

        if (c == NULL) {
            int wait;
            c = upool_h1_connect(p, ps->ep, &up_hooks, ps, &wait);
            if (c == NULL && wait) {
                /* tcp.maxConnections: wait for one of this worker's
                 * connections, up to http1MaxPendingRequests at once. */
                if (upool_wait(p, &ps->waiter) < 0) {
                    STAT_ADD(upool_stats(p), rq_overflow, 1);
                    local_reply(ps, 503, HFLAG_UO, "upstream overflow\n");
                    up_finished(ps);
                    return;
                }
                ps->waiting = 1;
                return;
            }
            ps->attempts++;
            if (c == NULL) {
                STAT_ADD(upool_stats(p), cx_connect_fail, 1);
                ps->ep = upool_next(p, ps->ep);
                continue;
            }
        } else {
            h1_client_set_owner(c, &up_hooks, ps);
        }
        addr_format(&cl->endpoints[ps->ep], as, sizeof(as));
        ps->upstream = arena_dup(&ps->s->arena, as, strlen(as));
        ps->uc = c;
        h1_client_start(c, ps->s);
        arm_try_timer(ps);
        return;
    }
    if (should_retry(ps, retriable_failure(ps, HFLAG_UF))) {
        retry_later(ps);
        return;
    }
    if (!ps->shadow)
        STAT_ADD(http_shard(ps->l), rq_upstream_errors, 1);
    local_reply(ps, 503, HFLAG_UF | (ps->retries ? HFLAG_URX : 0),
                "upstream connect error\n");
    up_finished(ps);
}

/*
 * The originating client behind xffNumTrustedHops proxies we trust: the
 * Nth address from the right of the X-Forwarded-For they built (Envoy's
 * rule). Without enough entries, the peer itself.
 */
static const char *trusted_client(struct pstream *ps, struct slice xff)
{
    uint32_t hops = ps->l->conf->xff_trusted_hops;
    size_t end = xff.n;

    if (hops == 0)
        return NULL;
    for (uint32_t k = 1; k <= hops; k++) {
        size_t start = end;
        while (start > 0 && xff.p[start - 1] != ',')
            start--;
        if (k == hops) {
            size_t a = start, b = end;
            while (a < b && (xff.p[a] == ' ' || xff.p[a] == '\t'))
                a++;
            while (b > a && (xff.p[b - 1] == ' ' || xff.p[b - 1] == '\t'))
                b--;
            return b > a ? arena_dup(&ps->s->arena, xff.p + a, b - a) : NULL;
        }
        if (start == 0)
            return NULL;
        end = start - 1;
    }
    return NULL;
}

/* Request headers a proxy adds (RFC 7239's de facto ancestors). */
static int add_forwarding(struct pstream *ps)
{
    struct hstream *s = ps->s;
    struct http_request *q = &s->req;
    const struct http_field *xff = http_fields_get(&q->fields,
                                                   "x-forwarded-for");
    char id[40];
    uint64_t a, b;

    if (xff != NULL) {
        ps->client = trusted_client(ps, xff->value);
        /* Append the peer to the chain the client's proxies built. */
        size_t n = xff->value.n + 2 + strlen(ps->hc->peer_ip);
        char *v = arena_alloc(&s->arena, n + 1);
        if (v == NULL)
            return -1;
        snprintf(v, n + 1, "%.*s, %s", (int)xff->value.n, xff->value.p,
                 ps->hc->peer_ip);
        if (http_fields_set(&q->fields, &s->arena, "x-forwarded-for",
                            (struct slice){v, n}) < 0)
            return -1;
    } else if (http_fields_add_ref(&q->fields, &s->arena,
                                   SLICE_LIT("x-forwarded-for"),
                                   arena_slice(&s->arena,
                                               slice_of(ps->hc->peer_ip))) <
               0) {
        return -1;
    }
    /* X-Forwarded-Proto from a client is kept only behind trusted proxies. */
    if (ps->l->conf->xff_trusted_hops == 0 ||
        http_fields_get(&q->fields, "x-forwarded-proto") == NULL)
        if (http_fields_set(&q->fields, &s->arena, "x-forwarded-proto",
                            q->scheme) < 0)
            return -1;
    if (http_fields_get(&q->fields, "x-request-id") == NULL) {
        a = rng_next(ps->l);
        b = rng_next(ps->l);
        /* A version 4 UUID from the worker's generator. */
        snprintf(id, sizeof(id), "%08x-%04x-4%03x-%04x-%012" PRIx64,
                 (unsigned)(a >> 32), (unsigned)(a >> 16) & 0xffff,
                 (unsigned)a & 0xfff, (unsigned)((b >> 48) & 0x3fff) | 0x8000,
                 (uint64_t)(b & UINT64_C(0xffffffffffff)));
        if (http_fields_add_ref(&q->fields, &s->arena,
                                SLICE_LIT("x-request-id"),
                                arena_slice(&s->arena, slice_of(id))) < 0)
            return -1;
    }
    return 0;
}

/* grpc-timeout: up to 8 digits and a unit (H, M, S, m, u, n). 0 when
 * absent or malformed; at least 1 ms. */
static uint64_t grpc_timeout_ms(const struct http_fields *f)
{
    const struct http_field *t = http_fields_get(f, "grpc-timeout");
    uint64_t v = 0;
    size_t i;

    if (t == NULL || t->value.n < 2 || t->value.n > 9)
        return 0;
    for (i = 0; i + 1 < t->value.n; i++) {
        char c = t->value.p[i];
        if (c < '0' || c > '9')
            return 0;
        v = v * 10 + (uint64_t)(c - '0');
    }
    switch (t->value.p[i]) {
    case 'H':
        v *= 3600000;
        break;
    case 'M':
        v *= 60000;
        break;
    case 'S':
        v *= 1000;
        break;
    case 'm':
        break;
    case 'u':
        v /= 1000;
        break;
    case 'n':
        v /= 1000000;
        break;
    default:
        return 0;
    }
    return v > 0 ? v : 1;
}

static void on_delay(evutil_socket_t fd, short what, void *arg)
{
    struct pstream *ps = arg;

    (void)fd;
    (void)what;
    ps->delay_on = 0;
    /* After a fault delay (not a retry's backoff), the mirror's turn: the
     * copy follows the delayed request, as Envoy's router runs after its
     * fault filter. */
    if (ps->rr.mirror && !ps->mirrored) {
        ps->mirrored = 1;
        mirror_begin(ps);
    }
    connect_next(ps);
}

/* A route's own answer (redirect, direct response): hstream_respond()
 * plus the CORS headers an allowed cross-origin request gets, as Envoy's
 * CORS filter adds them to local replies too. */
static void route_reply(struct pstream *ps, int status, const char *body,
                        const char *extra_name, const char *extra_value)
{
    struct hstream *s = ps->s;

    if (ps->cors_origin.n == 0) {
        hstream_respond(s, status, body, extra_name, extra_value);
        return;
    }
    if (hstream_reply_begin(s, status, body) < 0)
        return;
    if ((extra_name != NULL &&
         http_fields_add(&s->resp.fields, &s->arena, slice_of(extra_name),
                         slice_of(extra_value), 256) < 0) ||
        cors_headers(ps, 0) < 0) {
        hstream_respond(s, 503, "out of memory\n", NULL, NULL);
        return;
    }
    hstream_reply_end(s, body);
}

/*
 * route_by_router() decides a Gateway listener's request with its
 * VirtualService routes: answers it (no route, redirect, direct response,
 * fault abort) and returns -1, or picks the cluster, rewrites the request
 * and returns 0.
 */
static int route_by_router(struct pstream *ps)
{
    struct hstream *s = ps->s;
    const struct http_proxy_conf *c = ps->l->conf;
    const struct route_action *a;

    if (c->https_redirect) {
        /* An HTTP server with httpsRedirect answers everything with the
         * https address of the same resource. */
        size_t n = 8 + s->req.authority.n + s->req.path.n + 1;
        char *loc = arena_alloc(&s->arena, n);
        if (loc != NULL) {
            snprintf(loc, n, "https://%.*s%.*s", (int)s->req.authority.n,
                     s->req.authority.p, (int)s->req.path.n, s->req.path.p);
            hstream_respond(s, 301, NULL, "location", loc);
        }
        up_finished(ps);
        return -1;
    }
    a = router_match(ps->wr->r->router, &s->req, c->port, rng_next(ps->l), &s->arena,
                     &ps->rr);
    if (a == NULL) {
        local_reply(ps, 404, HFLAG_NR, "no route\n");
        up_finished(ps);
        return -1;
    }
    ps->action = a;
    if (cors_request(ps)) {
        up_finished(ps);
        return -1;
    }
    if (a->kind == ROUTE_REDIRECT) {
        const char *loc = router_redirect_location(&ps->rr, &s->req, &s->arena);
        route_reply(ps, a->redirect.code ? a->redirect.code : 301, NULL,
                    loc ? "location" : NULL, loc);
        up_finished(ps);
        return -1;
    }
    if (a->kind == ROUTE_DIRECT) {
        const char *body = a->direct.body.n > 0
                               ? arena_dup(&s->arena, a->direct.body.p,
                                           a->direct.body.n)
                               : NULL;
        route_reply(ps, a->direct.status, body, NULL, NULL);
        up_finished(ps);
        return -1;
    }
    if (ps->rr.abort_status > 0) {
        /* Envoy marks injected faults FI. */
        local_reply(ps, ps->rr.abort_status, HFLAG_FI, "fault filter abort\n");
        up_finished(ps);
        return -1;
    }
    if (ps->rr.dest < 0 || a->dests[ps->rr.dest].cluster < 0) {
        local_reply(ps, 503, HFLAG_UH, "no healthy upstream\n");
        up_finished(ps);
        return -1;
    }
    ps->cluster = a->dests[ps->rr.dest].cluster;
    ps->timeout_ms = a->timeout_ms;
    s->req.path = router_rewrite_path(&ps->rr, &s->req, &s->arena);
    if (a->rewrite.authority.n > 0)
        s->req.authority = a->rewrite.authority;
    if (s->req.path.p == NULL ||
        router_apply_headers(&ps->rr, 0, &s->req.fields, &s->arena) < 0) {
        local_reply(ps, 503, 0, "out of memory\n");
        up_finished(ps);
        return -1;
    }
    return 0;
}

/* The address of an X-Forwarded-For entry (a bare IPv4 or IPv6 address);
 * -1 for anything else. */
static int addr_from_ip(const char *ip, struct sockaddr_storage *ss)
{
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof(*ss));
    if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        return 0;
    }
    return -1;
}

/*
 * authorize() applies the AuthorizationPolicies of the stream's routes
 * before routing, as Envoy's RBAC filter runs before the router: a denied
 * request is answered 403 and logged RBAC_ACCESS_DENIED with the policy
 * that decided. Returns 0 when the request may go on.
 */
static int authorize(struct pstream *ps)
{
    struct hstream *s = ps->s;
    const struct http_field *xff = http_fields_get(&s->req.fields,
                                                   "x-forwarded-for");
    const char *client = xff != NULL ? trusted_client(ps, xff->value) : NULL;
    struct sockaddr_storage remote;
    struct authz_request r;
    struct authz_decision d;
    char principal[512];
    size_t n;
    char *why;

    memset(&r, 0, sizeof(r));
    /* source.principal: the verified client certificate's SPIFFE ID
     * without its scheme, as Istio writes principals. */
    if (tls_conn_peer_uri_san(&ps->hc->conn, principal, sizeof(principal)) >
            strlen("spiffe://") &&
        strncmp(principal, "spiffe://", 9) == 0)
        r.principal = slice_of(principal + 9);
    r.peer = (const struct sockaddr *)&ps->hc->peer;
    if (client != NULL && addr_from_ip(client, &remote) == 0)
        r.remote = (const struct sockaddr *)&remote;
    r.host = s->req.authority;
    r.method = s->req.method;
    r.path = s->req.path;
    r.port = ps->l->conf->port;
    r.sni = slice_of(tls_conn_sni(&ps->hc->conn));
    r.headers = &s->req.fields;
    authz_check(ps->wr->r->authz, &r, &d);
    if (d.allowed)
        return 0;
    n = strlen("RBAC_ACCESS_DENIED[]") + (d.policy ? strlen(d.policy) : 4) + 1;
    why = arena_alloc(&s->arena, n);
    if (why != NULL)
        snprintf(why, n, "RBAC_ACCESS_DENIED[%s]", d.policy ? d.policy : "none");
    ps->details = why;
    STAT_ADD(http_shard(ps->l), rq_rbac_denied, 1);
    local_reply(ps, 403, 0, "RBAC: access denied");
    up_finished(ps);
    return -1;
}

/*
 * Mirroring (VirtualService mirror, Envoy's request_mirror_policies).
 *
 * A selected request is copied, head and body, into a stream of its own
 * (its Host gets the "-shadow" suffix) and sent to the mirror's cluster as
 * a pstream marked shadow. It is fire and forget: its answer is read and
 * thrown away, its failure or slowness never touches the original, and it
 * holds no reference to the client's connection or stream, so a client
 * that goes away leaves it to finish (or time out) on its own. Copies live
 * on the listener's list until they end; the reaper frees them.
 *
 * A body is copied whole once it has arrived, as Envoy's router buffers it
 * for shadowing: it is kept while it streams to the original's upstream
 * (hpipe_keep) and a body over BODY_KEEP_LIMIT is not mirrored (counted
 * skipped), without any effect on the original.
 */
static void shadow_drain(struct pstream *ps)
{
    struct hstream *m = ps->s;
    size_t n;

    for (;;) {
        hpipe_peek(&m->resp_body, &n);
        if (n == 0)
            break;
        hpipe_consume(&m->resp_body, n);
    }
    if (ps->down_done ||
        (!hpipe_drained(&m->resp_body) && !m->resp_body.aborted))
        return;
    /* The copy's answer is over: as on_down_done for a client. */
    ps->down_done = 1;
    m->down_done = 1;
    if ((ps->uc != NULL || ps->h2s != NULL) && !ps->up_done) {
        release_upstream(ps, 0);
        ps->up_done = 1;
    }
    maybe_end(ps);
}

static void shadow_wake(void *arg)
{
    struct pstream *ps = arg;

    event_active(&ps->aux, EV_TIMEOUT, 0);
}

static void shadow_head(struct hstream *m)
{
    shadow_wake(m->down_ctx);
}

static void shadow_continue(struct hstream *m)
{
    (void)m;
}

/* The "downstream" of a copy: a sink. */
static const struct hstream_down_ops shadow_down = {shadow_head,
                                                    shadow_continue};

static void mirror_launch(struct pstream *ps);

static void on_aux(evutil_socket_t fd, short what, void *arg)
{
    struct pstream *ps = arg;

    (void)fd;
    (void)what;
    if (ps->shadow) {
        shadow_drain(ps);
        return;
    }
    /* The request body is complete (body_end). */
    ps->s->req_body.on_end = NULL;
    if (ps->try_wait) {
        ps->try_wait = 0;
        if (ps->uc != NULL || ps->h2s != NULL)
            arm_try_timer(ps); /* else the next attempt arms it */
    }
    if (ps->mirror_wait) {
        ps->mirror_wait = 0;
        mirror_launch(ps);
    }
}

/* A copy of the request in a stream of its own: head (Host with the
 * "-shadow" suffix), body (body_len bytes: the kept ones, then the live
 * ones) and trailers. NULL when memory is short. */
static struct hstream *shadow_copy(struct pstream *ps, size_t body_len)
{
    const struct hstream *s = ps->s;
    struct http_listener *l = ps->l;
    struct hstream *m = hstream_new(&l->pool, l->conf->h1s.body_cap);
    struct http_request *q;
    const char *part;
    size_t n;

    if (m == NULL)
        return NULL;
    q = &m->req;
    *q = s->req;
    memset(&q->fields, 0, sizeof(q->fields));
    q->expect_continue = 0;
    q->method = arena_slice(&m->arena, s->req.method);
    q->scheme = arena_slice(&m->arena, s->req.scheme);
    q->path = arena_slice(&m->arena, s->req.path);
    q->authority = router_shadow_authority(s->req.authority, &m->arena);
    if (q->method.p == NULL || q->scheme.p == NULL || q->path.p == NULL ||
        q->authority.p == NULL)
        goto fail;
    for (size_t i = 0; i < s->req.fields.n; i++)
        if (http_fields_add(&q->fields, &m->arena, s->req.fields.v[i].name,
                            s->req.fields.v[i].value, SIZE_MAX) < 0)
            goto fail;
    /* The body pipe holds the whole copy, from no pool: it is written
     * once, here, and read by the copy's upstream. */
    hpipe_dispose(&m->req_body);
    hpipe_init(&m->req_body, NULL, body_len);
    if (s->req.has_body) {
        part = hpipe_kept(&s->req_body, &n);
        if (hpipe_write(&m->req_body, part, n) != n)
            goto fail;
        part = hpipe_live(&s->req_body, &n);
        if (hpipe_write(&m->req_body, part, n) != n)
            goto fail;
        for (size_t i = 0; i < s->req_body.trailers.n; i++)
            if (http_fields_add(&m->req_body.trailers, &m->arena,
                                s->req_body.trailers.v[i].name,
                                s->req_body.trailers.v[i].value,
                                SIZE_MAX) < 0)
                goto fail;
    }
    hpipe_finish(&m->req_body);
    return m;
fail:
    hstream_unref(m);
    return NULL;
}

/* Sends the copy of ps's request to the mirror's cluster, or counts it
 * skipped. */
static void mirror_launch(struct pstream *ps)
{
    const struct route_mirror *mr = &ps->action->mirror;
    struct http_listener *l = ps->l;
    struct listener_counters *sh = http_shard(l);
    const struct hpipe *b = &ps->s->req_body;
    struct upool *pool = http_pool(ps->wr, mr->cluster);
    size_t kept = 0, live = 0;
    int admitted = 0;
    struct hstream *m;
    struct pstream *sp;
    uint64_t ms;

    if (ps->s->req.upgrade || pool->cl->nendpoints == 0)
        goto skip;
    if (ps->s->req.has_body) {
        if (b->aborted || !b->eof || !hpipe_replayable(b))
            goto skip;
        hpipe_kept(b, &kept);
        hpipe_live(b, &live);
        if (kept + live > BODY_KEEP_LIMIT)
            goto skip;
    }
    if (pool->cl->max_requests > 0) {
        if (!cluster_admit(pool->cl)) {
            STAT_ADD(upool_stats(pool), rq_overflow, 1);
            goto skip;
        }
        admitted = 1;
    }
    m = shadow_copy(ps, kept + live);
    sp = m != NULL ? arena_alloc(&m->arena, sizeof(*sp)) : NULL;
    if (sp == NULL) {
        hstream_unref(m);
        if (admitted)
            cluster_release(pool->cl);
        goto skip;
    }
    memset(sp, 0, sizeof(*sp));
    sp->s = hstream_ref(m); /* the proxy's; m's own is the sink's */
    sp->l = l;
    sp->wr = http_listener_repin(ps->wr); /* the pool lives in the view */
    sp->shadow = 1;
    sp->cluster = mr->cluster;
    sp->pool = pool;
    sp->admitted = (unsigned)admitted;
    m->proxy = sp;
    m->down = &shadow_down;
    m->down_ctx = sp;
    m->resp_body.wake_reader = shadow_wake;
    m->resp_body.reader = sp;
    event_assign(&sp->timer, l->base, -1, 0, on_timeout, sp);
    event_assign(&sp->delay, l->base, -1, 0, on_delay, sp);
    event_assign(&sp->try_timer, l->base, -1, 0, on_try_timeout, sp);
    event_assign(&sp->aux, l->base, -1, 0, on_aux, sp);
    list_append(&l->mirrors, &sp->link);
    ms = ps->timeout_ms > 0 ? ps->timeout_ms : MIRROR_TIMEOUT_MS;
    {
        struct timeval tv = {(time_t)(ms / 1000),
                             (suseconds_t)(ms % 1000) * 1000};
        event_add(&sp->timer, &tv);
        sp->timer_on = 1;
    }
    sp->ep = upool_pick(pool);
    sp->busy = 1;
    sp->busy_ep = sp->ep;
    upool_busy(pool, sp->ep);
    STAT_ADD(upool_stats(pool), rq_total, 1);
    STAT_ADD(sh, rq_mirror_sent, 1);
    connect_next(sp);
    return;
skip:
    STAT_ADD(sh, rq_mirror_skipped, 1);
}

/* The router picked this request for mirroring: copy it now, or once its
 * body has arrived. */
static void mirror_begin(struct pstream *ps)
{
    if (body_complete(ps)) {
        mirror_launch(ps);
        return;
    }
    ps->mirror_wait = 1;
    wait_body(ps);
}

void http_mirrors_reap(struct http_listener *l)
{
    while (!LIST_EMPTY(&l->mirrors_dead)) {
        struct pstream *ps = LIST_ELEM(l->mirrors_dead.next, struct pstream,
                                       link);
        struct hstream *m = ps->s;

        list_del(&ps->link);
        hstream_unref(m); /* frees ps too: it lives in m's arena */
    }
}

void http_mirrors_free(struct http_listener *l)
{
    while (!LIST_EMPTY(&l->mirrors)) {
        struct pstream *ps = LIST_ELEM(l->mirrors.next, struct pstream, link);

        ps->shadow_failed = 1;
        release_upstream(ps, 0);
        ps->down_done = 1;
        up_finished(ps); /* onto mirrors_dead */
    }
    http_mirrors_reap(l);
}

/* The endpoint for a new request: by its consistent hash when the
 * cluster has one and the request a key, else by the balancer. */
static size_t pick_endpoint(struct pstream *ps)
{
    const struct lb_hash *h = ps->pool->cl->hash;
    struct http_conn *hc = ps->hc;
    uint64_t key;

    if (h != NULL &&
        lb_hash_request(h, &ps->s->req,
                        slice_of(ps->client ? ps->client : hc->peer_ip),
                        (struct slice){(const char *)&hc->peer, hc->peerlen},
                        &ps->s->arena, &key, &ps->set_cookie))
        return upool_pick_hash(ps->pool, key);
    return upool_pick(ps->pool);
}

static void on_request(void *ctx, struct hstream *s)
{
    struct http_conn *hc = ctx;
    struct http_listener *l = hc->l;
    struct pstream *ps = arena_alloc(&s->arena, sizeof(*ps));

    if (ps == NULL) {
        hstream_respond(s, 503, "out of memory\n", NULL, NULL);
        return;
    }
    memset(ps, 0, sizeof(*ps));
    ps->s = hstream_ref(s);
    ps->hc = hc;
    ps->l = l;
    s->proxy = ps;
    event_assign(&ps->timer, l->base, -1, 0, on_timeout, ps);
    ps->waiter.wake = on_wake;
    LIST_INIT(&ps->waiter.link);
    event_assign(&ps->delay, l->base, -1, 0, on_delay, ps);
    event_assign(&ps->try_timer, l->base, -1, 0, on_try_timeout, ps);
    event_assign(&ps->aux, l->base, -1, 0, on_aux, ps);
    ps->cluster = -1;
    ps->wr = http_listener_pin(l);
    if (ps->wr->r->authz != NULL && authorize(ps) < 0)
        return;
    if (ps->wr->r->router != NULL) {
        if (route_by_router(ps) < 0)
            return;
    } else {
        const struct http_route *r =
            http_proxy_route(l->conf, s->req.authority, s->req.path);
        if (r == NULL) {
            local_reply(ps, 404, HFLAG_NR, "no route\n");
            up_finished(ps);
            return;
        }
        ps->cluster = (int)r->cluster;
        ps->timeout_ms = r->timeout_ms;
    }
    if (add_forwarding(ps) < 0) {
        local_reply(ps, 503, 0, "out of memory\n");
        up_finished(ps);
        return;
    }
    ps->pool = http_pool(ps->wr, ps->cluster);
    if (ps->pool->cl->tls_error) {
        /* The DestinationRule asks for TLS that could not be set up. */
        local_reply(ps, 503, HFLAG_UF, "upstream TLS is not available\n");
        up_finished(ps);
        return;
    }
    if (ps->pool->cl->nendpoints == 0) {
        local_reply(ps, 503, HFLAG_UH, "no healthy upstream\n");
        up_finished(ps);
        return;
    }
    /* Without a limit there is nothing to count: no shared cache line is
     * touched per request. */
    if (ps->pool->cl->max_requests > 0) {
        if (!cluster_admit(ps->pool->cl)) {
            /* Envoy's answer when max_requests are in flight already. */
            STAT_ADD(upool_stats(ps->pool), rq_overflow, 1);
            local_reply(ps, 503, HFLAG_UO, "upstream overflow\n");
            up_finished(ps);
            return;
        }
        ps->admitted = 1;
    }
    ps->ep = pick_endpoint(ps);
    /* In flight on the picked endpoint until the upstream side ends
     * (retries move on but count against the first pick). */
    ps->busy = 1;
    ps->busy_ep = ps->ep;
    upool_busy(ps->pool, ps->ep);
    STAT_ADD(upool_stats(ps->pool), rq_total, 1);
    {
        /* The deadline: the route's timeout, or the client's grpc-timeout
         * when that is sooner. */
        uint64_t ms = ps->timeout_ms;
        uint64_t g = grpc_timeout_ms(&s->req.fields);
        if (g > 0 && (ms == 0 || g < ms))
            ms = g;
        if (ms > 0) {
            struct timeval tv = {(time_t)(ms / 1000),
                                 (suseconds_t)(ms % 1000) * 1000};
            event_add(&ps->timer, &tv);
            ps->timer_on = 1;
        }
    }
    /* A body that may have to be sent again (retries) or copied (mirror)
     * is kept as it streams, up to the limit; one announced longer is not
     * kept at all. */
    if (s->req.has_body && !s->req.upgrade && ps->action != NULL &&
        (ps->action->retry.attempts > 0 || ps->rr.mirror) &&
        (s->req.content_length < 0 ||
         (uint64_t)s->req.content_length <= BODY_KEEP_LIMIT))
        hpipe_keep(&s->req_body, BODY_KEEP_LIMIT);
    if (s->req.expect_continue)
        s->down->continue_100(s);
    if (ps->rr.delay_ms > 0) {
        /* Fault injection: hold the request, then send it on. */
        struct timeval tv = {(time_t)(ps->rr.delay_ms / 1000),
                             (suseconds_t)(ps->rr.delay_ms % 1000) * 1000};
        event_add(&ps->delay, &tv);
        ps->delay_on = 1;
        return;
    }
    if (ps->rr.mirror) {
        ps->mirrored = 1;
        mirror_begin(ps);
    }
    connect_next(ps);
}

static void on_down_done(void *ctx, struct hstream *s)
{
    struct pstream *ps = s->proxy;

    (void)ctx;
    if (ps == NULL)
        return;
    ps->down_done = 1;
    if (ps->waiting) {
        /* Gone while waiting for a connection: nothing was sent. */
        s->flags |= HFLAG_DC;
        up_finished(ps);
        return;
    }
    if (ps->uc != NULL || ps->h2s != NULL) {
        /* The client went away (or the response is out) while the upstream
         * exchange still runs: that connection cannot be reused. */
        if (!ps->up_done)
            s->flags |= s->resp_started && hpipe_drained(&s->resp_body)
                            ? 0
                            : HFLAG_DC;
        release_upstream(ps, 0);
        ps->up_done = 1;
    }
    maybe_end(ps);
}

const struct hstream_handler http_stream_handler = {on_request, on_down_done};
