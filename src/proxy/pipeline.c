/*
 * One request through the proxy: route it, send it to an endpoint of the
 * route's cluster over a pooled connection (retrying the connection on
 * the next endpoint), relay the response, and log the exchange. What a
 * request meets before it goes upstream is in http_filters.c, retries in
 * http_retry.c, mirrored copies in http_mirror.c.
 */
#include "config.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/rng.h"
#include "event/logsink.h"
#include "event/timer.h"
#include "http/access_format.h"
#include "proxy/hbone_client.h"
#include "proxy/istio_metrics.h"
#include "net/overload.h"
#include "proxy/pipeline-int.h"
#include "tls/tls.h"
#include "upstream/hash.h"
#include "upstream/outlier.h"

#define CONNECT_ATTEMPTS 3

static const struct h1_client_hooks up_hooks;

uint64_t pstream_rng(struct http_listener *l)
{
    /* Request ids need uniqueness, not secrecy. */
    return rng_next(&l->rng);
}

static void count_status(struct pstream *ps, int status)
{
    struct proxy_counters *sh = http_shard(ps->l);
    int cls = http_status_class(status);

    if (ps->counted)
        return;
    ps->counted = 1;
    STAT_ADD(&sh->http, rq_total, 1);
    if (cls > 0)
        STAT_ADD(&sh->http, rq_class[cls], 1);
}

static const char *proto_name(enum http_version v)
{
    return v == HTTP_2 ? "HTTP/2" : v == HTTP_10 ? "HTTP/1.0" : "HTTP/1.1";
}

static void strait_log(struct pstream *ps)
{
    struct hstream *s = ps->s;
    char status[8], in[24], out[24], dur[24], flags[64], retries[12];
    char method[16], authority[256], path[1024];
    const struct http_field *rid =
        http_fields_get(&s->req.fields, "x-request-id");
    char id[64] = "-";
    char peer_uri[512] = "";
    char upstream[ADDR_STRLEN] = "-";
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
        {"upstream", upstream, 0},
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

    if (ps->upstream != NULL)
        addr_format(ps->upstream, upstream, sizeof(upstream));
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
    if (ps->l->conf->alog_sink == NULL) {
        log_event(LOG_INFO, "http_request", f, (int)(sizeof(f) / sizeof(f[0])));
        return;
    }
    if (log_get_level() > LOG_INFO)
        return;
    {
        char line[LSINK_CHUNK];
        struct buf b = {line, 0, 0, sizeof(line), sizeof(line), 0};

        /* A record cut at the cap still ends its line. */
        log_event_render(&b, LOG_INFO, "http_request", f,
                         (int)(sizeof(f) / sizeof(f[0])));
        lsink_buf_line(&ps->l->alog, buf_ptr(&b), buf_len(&b));
    }
}

/* IP:PORT of a socket address ([IP6]:PORT); "" when not IP. */
static void sa_format(const struct sockaddr *sa, char *out, size_t n)
{
    char ip[INET6_ADDRSTRLEN];

    out[0] = '\0';
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)sa;
        if (inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip)) != NULL)
            snprintf(out, n, "%s:%u", ip, (unsigned)ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)sa;
        if (inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip)) != NULL)
            snprintf(out, n, "[%s]:%u", ip, (unsigned)ntohs(in6->sin6_port));
    }
}

static void sock_local(int fd, char *out, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    out[0] = '\0';
    if (fd >= 0 && getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        sa_format((struct sockaddr *)&ss, out, n);
}

void pstream_attempt_started(struct pstream *ps, int fd)
{
    const struct afmt *f = ps->l->conf->alog_fmt;
    char local[ADDR_STRLEN + 8];

    pstream_trace_attempt(ps);
    if (f == NULL || !(afmt_needs(f) & AFMT_NEED_UPSTREAM_LOCAL))
        return;
    sock_local(fd, local, sizeof(local));
    ps->up_local = arena_dup(&ps->s->arena, local, strlen(local) + 1);
}

/* Envoy's %RESPONSE_CODE_DETAILS%: strait's reason for a local answer,
 * via_upstream for an answer passed on, else what ended it. */
static const char *code_details(const struct pstream *ps)
{
    const struct hstream *s = ps->s;

    if (ps->details != NULL)
        return ps->details;
    if (s->flags & HFLAG_DC)
        return "downstream_remote_disconnect";
    if (s->resp.status > 0 && ps->upstream != NULL && !(s->flags & ~HFLAG_URX))
        return "via_upstream";
    return NULL;
}

/* The upstream's failure, Envoy's %UPSTREAM_TRANSPORT_FAILURE_REASON%. */
static const char *transport_failure(const struct pstream *ps)
{
    if (ps->details != NULL &&
        strncmp(ps->details, "upstream_tls_refused:", 21) == 0)
        return ps->details + 21;
    if (ps->s->flags & HFLAG_UF)
        return "connection_failure";
    return NULL;
}

/* An Envoy-format line (log.accessLogEncoding TEXT or JSON). */
static void envoy_log(struct pstream *ps, const struct afmt *fmt)
{
    struct hstream *s = ps->s;
    struct http_conn *hc = ps->hc;
    unsigned needs = afmt_needs(fmt);
    char flags[64], upstream[ADDR_STRLEN] = "", remote[64] = "";
    char direct[64] = "", local[64] = "", peer_uri[512] = "";
    char line[LSINK_CHUNK];
    struct buf b = {line, 0, 0, sizeof(line), sizeof(line), 0};
    struct timespec now;
    uint64_t dur = clock_ms() - s->start_ms;
    struct afmt_ctx c;

    clock_gettime(CLOCK_REALTIME, &now);
    memset(&c, 0, sizeof(c));
    c.req = &s->req;
    c.resp = s->resp.status > 0 ? &s->resp.fields : NULL;
    c.start_us = (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000 -
                 (int64_t)dur * 1000;
    c.duration_ms = dur;
    c.status = s->resp.status;
    c.flags = hstream_flags_str(s->flags, flags, sizeof(flags));
    c.details = code_details(ps);
    c.upstream_failure = transport_failure(ps);
    c.bytes_received = s->bytes_in;
    c.bytes_sent = s->bytes_out;
    if (ps->upstream != NULL)
        c.upstream_host = addr_format(ps->upstream, upstream, sizeof(upstream));
    c.upstream_cluster =
        ps->cluster >= 0 ? http_cluster(ps->wr, ps->cluster)->name : NULL;
    c.upstream_local = ps->up_local;
    /* Envoy's DIRECT address is the socket's peer, whatever a PROXY
     * header or X-Forwarded-For say. */
    sa_format(hc->direct != NULL ? &hc->direct->sa : &hc->peer.sa, direct,
              sizeof(direct));
    c.downstream_direct_remote = direct[0] ? direct : hc->peer_ip;
    /* Behind trusted proxies, the client they name (no port known). */
    if (ps->client != NULL && strcmp(ps->client, hc->peer_ip) != 0) {
        snprintf(remote, sizeof(remote),
                 strchr(ps->client, ':') ? "[%s]:0" : "%s:0", ps->client);
        c.downstream_remote = remote;
    } else if (hc->direct != NULL) {
        /* The client a PROXY header named, with its port. */
        sa_format(&hc->peer.sa, remote, sizeof(remote));
        c.downstream_remote = remote[0] ? remote : hc->peer_ip;
    } else {
        c.downstream_remote = c.downstream_direct_remote;
    }
    if (needs & AFMT_NEED_DOWNSTREAM_LOCAL) {
        sock_local(hc->conn.fd, local, sizeof(local));
        c.downstream_local = local;
    }
    if (hc->conn.tls != NULL) {
        c.sni = tls_conn_sni(&hc->conn);
        if ((needs & AFMT_NEED_PEER_URI_SAN) &&
            tls_conn_peer_uri_san(&hc->conn, peer_uri, sizeof(peer_uri)) > 0)
            c.peer_uri_san = peer_uri;
    }
    c.route = ps->action ? ps->action->vs : NULL;
    c.protocol = proto_name(s->req.version);
    c.attempts = ps->upstream != NULL ? ps->retries + 1 : 0;
    afmt_write(fmt, &c, &b);
    if (buf_len(&b) > 0)
        lsink_buf_line(&ps->l->alog, buf_ptr(&b), buf_len(&b));
}

static void access_log(struct pstream *ps)
{
    const struct afmt *fmt = ps->l->conf->alog_fmt;

    if (fmt != NULL && ps->l->conf->alog_sink != NULL)
        envoy_log(ps, fmt);
    else
        strait_log(ps);
}

static int is_grpc(const struct hstream *s);

/* The bytes of a head as Envoy's HeaderMap::byteSize() counts them:
 * names and values, pseudo-headers included. */
static uint64_t fields_bytes(const struct http_fields *f)
{
    uint64_t n = 0;

    for (size_t i = 0; i < f->n; i++)
        n += f->v[i].name.n + f->v[i].value.n;
    return n;
}

static int grpc_status_of(const struct hstream *s)
{
    const struct http_field *g =
        http_fields_get(&s->resp_body.trailers, "grpc-status");
    int v = 0;

    if (g == NULL) /* a trailers-only answer has it in the head */
        g = http_fields_get(&s->resp.fields, "grpc-status");
    if (g == NULL || g->value.n == 0 || g->value.n > 3)
        return -1;
    for (size_t i = 0; i < g->value.n; i++) {
        if (g->value.p[i] < '0' || g->value.p[i] > '9')
            return -1;
        v = v * 10 + (g->value.p[i] - '0');
    }
    return v;
}

/* Istio's standard metrics of the request (reporter source). */
static void record_metrics(struct pstream *ps)
{
    const struct http_listener_conf *conf = ps->l->conf;
    struct hstream *s = ps->s;
    struct series_labels *dst = NULL;
    const struct http_request *rq = &s->req;
    struct istio_http_sample x;

    if (ps->cluster >= 0)
        dst = http_cluster(ps->wr, ps->cluster)->metrics;
    if (dst == NULL)
        dst = conf->metrics_nodst;
    x.authority = rq->authority;
    x.grpc = is_grpc(s);
    x.code = s->resp.status;
    x.grpc_status = x.grpc ? grpc_status_of(s) : -1;
    x.flags = s->flags;
    x.duration_ms = clock_ms() - s->start_ms;
    x.req_bytes = fields_bytes(&rq->fields) + s->bytes_in + rq->method.n +
                  rq->path.n + rq->authority.n + rq->scheme.n +
                  sizeof(":method:path:authority:scheme") - 1;
    x.resp_bytes = fields_bytes(&s->resp.fields) +
                   fields_bytes(&s->resp_body.trailers) + s->bytes_out +
                   sizeof(":status") - 1 + 3;
    x.req_msgs = s->req_body.grpc_msgs;
    x.resp_msgs = s->resp_body.grpc_msgs;
    istio_http_record(&conf->metrics->shards[ps->l->worker], conf->metrics_src,
                      dst, &x);
}

/* Both sides are finished with the stream: log it and let it go. */
void pstream_maybe_end(struct pstream *ps)
{
    struct hstream *s = ps->s;

    if (!ps->up_done || !ps->down_done)
        return;
    timer_cancel(&ps->timer);
    timer_cancel(&ps->try_timer);
    timer_cancel(&ps->aux);
    timer_cancel(&ps->idle);
    timer_cancel(&ps->lua_timer);
    if (s->req_body.end_arg == ps) {
        s->req_body.on_end = NULL;
        s->req_body.end_arg = NULL;
    }
    ps->try_wait = 0;
    if (ps->mirror_wait) {
        /* The request ended before its body was whole: no copy. */
        ps->mirror_wait = 0;
        STAT_ADD(&http_shard(ps->l)->http, rq_mirror_skipped, 1);
    }
    timer_cancel(&ps->delay);
    if (ps->admitted) {
        cluster_release(ps->pool->cl);
        ps->admitted = 0;
    }
    if (ps->retry_slot) {
        cluster_release_retry(ps->pool->cl);
        ps->retry_slot = 0;
    }
    pstream_trace_end(ps);
    if (ps->shadow) {
        /* A copy is not a request of the listener: it is neither counted
         * nor logged there. Its memory goes on the reaper's turn. */
        if (ps->lcall != NULL)
            pstream_lua_call_end(ps);
        else if (ps->shadow_failed)
            STAT_ADD(&http_shard(ps->l)->http, rq_mirror_failed, 1);
        s->resp_body.wake_reader = NULL;
        http_listener_unpin(ps->l, ps->wr);
        s->proxy = NULL;
        list_del(&ps->link);
        list_append(&ps->l->mirrors_dead, &ps->link);
        http_listener_reap_later(ps->l);
        hstream_unref(s); /* the proxy's; the reaper drops the copy's own */
        return;
    }
    count_status(ps, s->resp.status);
    if (ps->l->conf->metrics != NULL)
        record_metrics(ps);
    if (ps->l->conf->access_log)
        access_log(ps);
    if (ps->lua != NULL)
        pstream_lua_end(ps);
    http_listener_unpin(ps->l, ps->wr);
    s->proxy = NULL;
    hstream_unref(s);
}

void pstream_up_finished(struct pstream *ps)
{
    if (ps->waiting) {
        upool_unwait(ps->pool, &ps->waiter);
        ps->waiting = 0;
    }
    if (ps->busy) {
        balancer_done(&ps->pool->lb, ps->busy_ep);
        ps->busy = 0;
    }
    /* The upstream side is over: its deadline no longer applies (a slow
     * client still reading the last bytes is not a timeout). */
    timer_cancel(&ps->timer);
    timer_cancel(&ps->try_timer);
    ps->try_wait = 0;
    timer_cancel(&ps->delay); /* a retry's backoff, cut short */
    ps->up_done = 1;
    pstream_maybe_end(ps);
}

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
    case 401:
        return 16; /* UNAUTHENTICATED: a JWT that does not verify */
    case 403:
        return 7; /* PERMISSION_DENIED: an AuthorizationPolicy denied it */
    default:
        return 14; /* UNAVAILABLE */
    }
}

static int is_grpc(const struct hstream *s)
{
    const struct http_field *ct =
        http_fields_get(&s->req.fields, "content-type");

    return ct != NULL &&
           slice_has_prefix(ct->value, SLICE_LIT("application/grpc"));
}

void pstream_local_reply(struct pstream *ps, int status, unsigned flags,
                         const char *body)
{
    pstream_local_reply_with(ps, status, flags, body, NULL, NULL);
}

void pstream_local_reply_with(struct pstream *ps, int status, unsigned flags,
                              const char *body, const char *extra_name,
                              const char *extra_value)
{
    struct hstream *s = ps->s;

    s->flags |= flags;
    if (ps->shadow)
        ps->shadow_failed = 1;
    /* The upstream's answer failed after its head (a malformed chunk, a
     * reset stream), but no byte of it has left for the client yet: it
     * is taken back, and the client gets this answer instead of an empty
     * reply. A complete answer stays as it is. */
    if (s->resp_started && !s->down_done && !s->resp_body.eof &&
        s->down->retract != NULL && s->down->retract(s) == 0) {
        s->resp_started = 0;
        s->bytes_out = 0;
        hpipe_reset(&s->resp_body);
    }
    if (!s->resp_started && !s->down_done && is_grpc(s)) {
        char code[8];
        snprintf(code, sizeof(code), "%d", grpc_code(status));
        hstream_respond_grpc(s, code, body);
    } else if (!s->resp_started && !s->down_done) {
        hstream_respond(s, status, body, extra_name, extra_value);
    } else if (!hpipe_drained(&s->resp_body)) {
        hpipe_abort(&s->resp_body);
    }
    if (!s->resp_started)
        s->resp.status = status;
    /* The request body will not be read: let the codec know. */
    if (!s->req_body.eof)
        hpipe_abort(&s->req_body);
}

void pstream_release_upstream(struct pstream *ps, int reuse)
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

void pstream_on_timeout(void *arg)
{
    struct pstream *ps = arg;

    STAT_ADD(upool_stats(ps->pool), rq_timeout, 1);
    if ((ps->uc != NULL || ps->h2s != NULL) && ps->s->resp.status == 0)
        cluster_report(ps->pool->cl, ps->ep, OUTLIER_TIMEOUT);
    pstream_release_upstream(ps, 0);
    pstream_local_reply(ps, 504, HFLAG_UT, "upstream request timeout\n");
    pstream_up_finished(ps);
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
        log_warn(
            "cluster %s: upstream %s: certificate refused: %s",
            ps->pool->cl->name,
            addr_format(&ps->pool->cl->endpoints[c->endpoint], as, sizeof(as)),
            verr);
    } else if (hbone_conn_is(&c->conn) && c->conn.why != NULL &&
               strncmp(c->conn.why, "hbone_", 6) == 0) {
        /* An HBONE tunnel refused (the TCP relay's end= reason). */
        size_t n = strlen("upstream_") + strlen(c->conn.why) + 1;
        char *d = arena_alloc(&ps->s->arena, n);
        if (d != NULL)
            snprintf(d, n, "upstream_%s", c->conn.why);
        ps->details = d;
    }

    STAT_ADD(upool_stats(ps->pool), cx_connect_fail, 1);
    cluster_report(ps->pool->cl, c->endpoint, OUTLIER_CONNECT_FAILED);
    if (timeout)
        STAT_ADD(upool_stats(ps->pool), cx_connect_timeout, 1);
    ps->uc = NULL;
    upool_discard(ps->pool, c);
    ps->ep = balancer_next(&ps->pool->lb, ps->ep);
    pstream_connect_next(ps);
}

static void up_head(void *ctx, struct h1_client *c)
{
    struct pstream *ps = ctx;
    struct hstream *s = ps->s;

    (void)c;
    cluster_report(ps->pool->cl, ps->ep, s->resp.status);
    /* The client side may have answered already (a bad request body). */
    if (s->down_done || s->resp_started)
        return;
    if (pstream_should_retry(ps,
                             pstream_retriable_status(ps, s->resp.status))) {
        pstream_release_upstream(ps, 0);
        pstream_retry_later(ps);
        return;
    }
    /* A retriable answer passed on because the retries are spent: Envoy's
     * URX. */
    if (ps->retries > 0 && pstream_retriable_status(ps, s->resp.status))
        s->flags |= HFLAG_URX;
    if (ps->action != NULL &&
        (router_apply_headers(&ps->rr, 1, &s->resp.fields, &s->arena) < 0 ||
         pstream_cors_headers(ps, 0) < 0))
        s->flags |= HFLAG_UPE;
    if (ps->set_cookie.n > 0 &&
        http_fields_add_ref(&s->resp.fields, &s->arena, SLICE_LIT("set-cookie"),
                            ps->set_cookie) < 0)
        s->flags |= HFLAG_UPE;
    if (ps->lua != NULL && pstream_lua_response(ps))
        return;
    pstream_pass_head(ps);
}

void pstream_pass_head(struct pstream *ps)
{
    struct hstream *s = ps->s;

    s->resp_started = 1;
    ps->active_ms = clock_ms();
    /* A per-try deadline no longer applies (Envoy ignores it from here). */
    timer_cancel(&ps->try_timer);
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
        !s->down_done && pstream_replayable(ps) && !ps->replayed &&
        (flags & HFLAG_UC)) {
        ps->replayed = 1;
        pstream_release_upstream(ps, 0);
        if (s->req.has_body)
            hpipe_rewind(&s->req_body);
        ps->reuse_blocked = 1;
        pstream_connect_next(ps);
        return;
    }
    /* Broken before any answer: the endpoint's failure, for outlier
     * detection (an answer was counted when its head came). */
    /* Memory pressure (the exchange was failed for want of a buffer) is
     * neither the endpoint's fault nor worth a retry. */
    if (!ok && (flags & HFLAG_OM)) {
        ps->details = "overload";
        pstream_release_upstream(ps, 0);
        pstream_local_reply(ps, 503, HFLAG_OM, "overloaded\n");
        pstream_up_finished(ps);
        return;
    }
    if (!ok && s->resp.status == 0 && !(flags & HFLAG_DC))
        cluster_report(ps->pool->cl, ps->ep, OUTLIER_RESET);
    if (!ok && pstream_should_retry(ps, pstream_retriable_failure(ps, flags))) {
        pstream_release_upstream(ps, 0);
        pstream_retry_later(ps);
        return;
    }
    if (!ok) {
        STAT_ADD(upool_stats(ps->pool), rq_error, 1);
        if (!ps->shadow)
            STAT_ADD(&http_shard(ps->l)->http, rq_upstream_errors, 1);
        if (ps->retries > 0)
            s->flags |= HFLAG_URX;
        pstream_release_upstream(ps, 0);
        pstream_local_reply(ps, flags & HFLAG_UPE ? 502 : 503, flags,
                            "upstream connect error or disconnect\n");
    } else {
        pstream_release_upstream(ps, reusable && !s->down_done);
    }
    pstream_up_finished(ps);
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
        cluster_report(ps->pool->cl, ps->ep, OUTLIER_CONNECT_FAILED);
        ps->ep = balancer_next(&ps->pool->lb, ps->ep);
        pstream_connect_next(ps);
        return;
    }
    up_done(ps, NULL, ok, 0, flags);
}

static const struct h2c_stream_hooks h2_hooks = {h2_head, h2_done};

/* A connection of the pool went idle or closed: try again. */
static void on_wake(struct upool_waiter *w)
{
    struct pstream *ps =
        (struct pstream *)(void *)((char *)w -
                                   offsetof(struct pstream, waiter));

    ps->waiting = 0;
    pstream_connect_next(ps);
}

void pstream_connect_next(struct pstream *ps)
{
    struct upool *p = ps->pool;
    const struct cluster *cl = p->cl;

    while (ps->attempts < CONNECT_ATTEMPTS &&
           (size_t)ps->attempts < cl->nendpoints + 1) {
        struct h1_client *c;

        if (cl->protocol == CLUSTER_HTTP2) {
            struct h2_client *h2 = upool_h2_get(p, ps->ep);
            ps->attempts++;
            if (h2 == NULL) {
                STAT_ADD(upool_stats(p), cx_connect_fail, 1);
                ps->ep = balancer_next(&p->lb, ps->ep);
                continue;
            }
            ps->upstream = &cl->endpoints[ps->ep];
            pstream_attempt_started(ps, h2->conn.fd);
            ps->h2s = h2_client_submit(h2, ps->s, &h2_hooks, ps);
            if (ps->h2s == NULL)
                break;
            pstream_arm_try_timer(ps);
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
                    pstream_local_reply(ps, 503, HFLAG_UO,
                                        "upstream overflow\n");
                    pstream_up_finished(ps);
                    return;
                }
                ps->waiting = 1;
                return;
            }
            ps->attempts++;
            if (c == NULL) {
                STAT_ADD(upool_stats(p), cx_connect_fail, 1);
                ps->ep = balancer_next(&p->lb, ps->ep);
                continue;
            }
        } else {
            h1_client_set_owner(c, &up_hooks, ps);
        }
        ps->upstream = &cl->endpoints[ps->ep];
        pstream_attempt_started(ps, c->conn.fd);
        ps->uc = c;
        h1_client_start(c, ps->s);
        pstream_arm_try_timer(ps);
        return;
    }
    if (pstream_should_retry(ps, pstream_retriable_failure(ps, HFLAG_UF))) {
        pstream_retry_later(ps);
        return;
    }
    if (!ps->shadow)
        STAT_ADD(&http_shard(ps->l)->http, rq_upstream_errors, 1);
    pstream_local_reply(ps, 503, HFLAG_UF | (ps->retries ? HFLAG_URX : 0),
                        "upstream connect error\n");
    pstream_up_finished(ps);
}

/*
 * The stream idle timeout (Envoy's stream_idle_timeout): no byte moved
 * either way for the listener's interval. Before the answer has left,
 * the client gets 408 while its request is still arriving, else 504,
 * flag SI; an answer under way is cut short (HTTP/1 closes, HTTP/2
 * resets), and the log keeps the status that was sent.
 */
static void on_idle(void *arg)
{
    struct pstream *ps = arg;
    struct hstream *s = ps->s;
    uint64_t limit = ps->l->conf->stream_idle_timeout_ms;
    uint64_t last = ps->active_ms, now = clock_ms();

    if (s->req_body.active_ms > last)
        last = s->req_body.active_ms;
    if (s->resp_body.active_ms > last)
        last = s->resp_body.active_ms;
    if (now - last < limit) {
        timer_arm(&ps->idle, limit - (now - last));
        return;
    }
    ps->details = "stream_idle_timeout";
    if (!ps->shadow)
        STAT_ADD(&http_shard(ps->l)->http, rq_idle_timeout, 1);
    if (!ps->up_done) {
        pstream_release_upstream(ps, 0);
        pstream_local_reply(ps, pstream_body_complete(ps) ? 504 : 408, HFLAG_SI,
                            "stream timeout\n");
        pstream_up_finished(ps);
        return;
    }
    /* The upstream is done, the client has not taken the end of the
     * answer: nothing will move any more. */
    s->flags |= HFLAG_SI;
    if (!s->down_done && s->down->reset != NULL)
        s->down->reset(s);
}

void pstream_on_delay(void *arg)
{
    struct pstream *ps = arg;

    /* After a fault delay (not a retry's backoff), the mirror's turn: the
     * copy follows the delayed request, as Envoy's router runs after its
     * fault filter. */
    if (ps->rr.mirror && !ps->mirrored) {
        ps->mirrored = 1;
        pstream_mirror_begin(ps);
    }
    pstream_connect_next(ps);
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
        return balancer_pick_hash(&ps->pool->lb, key);
    return balancer_pick(&ps->pool->lb);
}

/*
 * The memory actions, per request (Envoy's overload manager): with
 * disable_http_keepalive the connection goes after this request (HTTP/1
 * Connection: close, HTTP/2 GOAWAY); with stop_accepting_requests the
 * request is answered 503 with response flag OM before it costs
 * anything more. 1 when it was answered.
 */
static int pstream_overloaded(struct pstream *ps, unsigned ov)
{
    struct http_conn *hc = ps->hc;
    struct proxy_counters *sh = http_shard(ps->l);

    if (ov == 0)
        return 0;
    if ((ov & OVERLOAD_BIT(OVERLOAD_DISABLE_KEEPALIVE)) &&
        !hc->overload_drained) {
        hc->overload_drained = 1;
        STAT_ADD(&sh->http, cx_overload_keepalive, 1);
        if (hc->h1 != NULL)
            h1_server_drain(hc->h1);
        else if (hc->h2 != NULL)
            h2_server_drain(hc->h2);
    }
    if (!(ov & OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_REQUESTS)))
        return 0;
    STAT_ADD(&sh->http, rq_overload, 1);
    ps->details = "overload";
    pstream_local_reply(ps, 503, HFLAG_OM, "overloaded\n");
    pstream_up_finished(ps);
    return 1;
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
    timer_init(&ps->timer, l->base, pstream_on_timeout, ps);
    ps->waiter.wake = on_wake;
    LIST_INIT(&ps->waiter.link);
    timer_init(&ps->delay, l->base, pstream_on_delay, ps);
    timer_init(&ps->try_timer, l->base, pstream_on_try_timeout, ps);
    timer_init(&ps->aux, l->base, pstream_on_aux, ps);
    timer_init(&ps->idle, l->base, on_idle, ps);
    timer_init(&ps->lua_timer, l->base, pstream_lua_on_timer, ps);
    ps->active_ms = clock_ms();
    /* Armed before anything can end the stream (pstream_maybe_end
     * cancels it). */
    if (l->conf->stream_idle_timeout_ms > 0)
        timer_arm(&ps->idle, l->conf->stream_idle_timeout_ms);
    ps->cluster = -1;
    if (l->conf->metrics != NULL && is_grpc(s)) {
        hpipe_count_grpc(&s->req_body);
        hpipe_count_grpc(&s->resp_body);
    }
    ps->wr = http_listener_pin(l);
    if (l->conf->cx != NULL && pstream_overloaded(ps, cx_overload(l->conf->cx)))
        return;
    pstream_trace_begin(ps);
    /* The client behind trusted proxies, found once: GeoIP, RBAC, Lua,
     * the access log and X-Forwarded-For all use it. */
    if (l->conf->xff_trusted_hops > 0)
        pstream_find_client(ps);
    if (hc->conn.tls != NULL && pstream_misdirected(ps))
        return;
    if (l->conf->geoip != NULL && pstream_geoip(ps) < 0) {
        pstream_local_reply(ps, 503, 0, "out of memory\n");
        pstream_up_finished(ps);
        return;
    }
    if (ps->wr->r->jwt != NULL && pstream_authenticate(ps) < 0)
        return;
    if (ps->wr->r->authz != NULL && pstream_authorize(ps) < 0)
        return;
    if (ps->wr->r->lua != NULL && pstream_lua_request(ps) != 0)
        return;
    pstream_forward(ps);
}

void pstream_forward(struct pstream *ps)
{
    struct hstream *s = ps->s;

    if (pstream_route(ps) < 0)
        return;
    if (ps->lua != NULL)
        pstream_lua_retarget(ps);
    if (pstream_add_forwarding(ps) < 0) {
        pstream_local_reply(ps, 503, 0, "out of memory\n");
        pstream_up_finished(ps);
        return;
    }
    ps->pool = http_pool(ps->wr, ps->cluster);
    if (ps->pool->cl->origin == CLUSTER_BLACKHOLE) {
        /* outboundTrafficPolicy REGISTRY_ONLY and a host no ServiceEntry
         * declares: Istio's block_all answer. */
        STAT_ADD(&http_shard(ps->l)->relay, registry_only, 1);
        ps->details = "registry_only";
        pstream_local_reply(ps, 502, 0,
                            "destination host is not in the registry\n");
        pstream_up_finished(ps);
        return;
    }
    if (ps->pool->cl->tls_error) {
        /* The DestinationRule asks for TLS that could not be set up. */
        pstream_local_reply(ps, 503, HFLAG_UF,
                            "upstream TLS is not available\n");
        pstream_up_finished(ps);
        return;
    }
    if (ps->pool->cl->nendpoints == 0) {
        pstream_local_reply(ps, 503, HFLAG_UH, "no healthy upstream\n");
        pstream_up_finished(ps);
        return;
    }
    /* Without a limit there is nothing to count: no shared cache line is
     * touched per request. */
    if (ps->pool->cl->max_requests > 0) {
        if (!cluster_admit(ps->pool->cl)) {
            /* Envoy's answer when max_requests are in flight already. */
            STAT_ADD(upool_stats(ps->pool), rq_overflow, 1);
            pstream_local_reply(ps, 503, HFLAG_UO, "upstream overflow\n");
            pstream_up_finished(ps);
            return;
        }
        ps->admitted = 1;
    }
    ps->ep = pick_endpoint(ps);
    if (ps->lua != NULL && pstream_lua_select(ps) != 0)
        return;
    /* In flight on the picked endpoint until the upstream side ends
     * (retries move on but count against the first pick). */
    ps->busy = 1;
    ps->busy_ep = ps->ep;
    balancer_busy(&ps->pool->lb, ps->ep);
    STAT_ADD(upool_stats(ps->pool), rq_total, 1);
    {
        /* The deadline: the route's timeout, or the client's grpc-timeout
         * when that is sooner. */
        uint64_t ms = ps->timeout_ms;
        uint64_t g = pstream_grpc_timeout_ms(&s->req.fields);
        if (g > 0 && (ms == 0 || g < ms))
            ms = g;
        if (ms > 0)
            timer_arm(&ps->timer, ms);
    }
    /* A body that may have to be sent again (retries) or copied (mirror)
     * is kept as it streams, up to the limit; one announced longer is not
     * kept at all. */
    /* (A body a LuaPolicy read with h:body() is kept already: the pipe
     * keeps it and only raises its limit.) */
    if (s->req.has_body && !s->req.upgrade && ps->action != NULL &&
        (ps->action->retry.attempts > 0 || ps->rr.mirror) &&
        (s->req.content_length < 0 ||
         (uint64_t)s->req.content_length <= BODY_KEEP_LIMIT))
        hpipe_keep(&s->req_body, BODY_KEEP_LIMIT);
    if (s->req.expect_continue)
        s->down->continue_100(s);
    if (ps->rr.delay_ms > 0) {
        /* Fault injection: hold the request, then send it on. */
        timer_arm(&ps->delay, ps->rr.delay_ms);
        return;
    }
    if (ps->rr.mirror) {
        ps->mirrored = 1;
        pstream_mirror_begin(ps);
    }
    pstream_connect_next(ps);
}

static void on_down_done(void *ctx, struct hstream *s)
{
    struct pstream *ps = s->proxy;

    (void)ctx;
    if (ps == NULL)
        return;
    ps->down_done = 1;
    if (!ps->up_done) {
        /* The client went away (or the whole response is out) while the
         * upstream side still runs: an exchange in flight, a wait for a
         * connection, a retry's backoff or a fault delay. Its connection
         * cannot be reused, and the upstream side ends here, so that its
         * balancer slot and timers go with it and the request is logged
         * now, not when (or if) the upstream finishes. */
        if (!s->resp_started || !hpipe_drained(&s->resp_body))
            s->flags |= HFLAG_DC;
        pstream_release_upstream(ps, 0);
        pstream_up_finished(ps);
        return;
    }
    pstream_maybe_end(ps);
}

const struct hstream_handler pipeline_handler = {on_request, on_down_done};
