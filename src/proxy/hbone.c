/*
 * The HBONE server: HTTP/2 CONNECT tunnels over the mesh's mTLS, as
 * ztunnel's inbound serves them (src/proxy/inbound.rs).
 *
 * A connection is one nghttp2 server session over the TLS connection the
 * L4 listener handshook. Each CONNECT stream is a tunnel:
 *
 *   request   :method CONNECT and :authority host:port only (no :scheme
 *             or :path: RFC 9113 8.5), else 400; Forwarded, baggage and
 *             traceparent read as ztunnel reads them, for the log only
 *             (Forwarded is never trusted for the source: strait takes
 *             no waypoint's word);
 *   route     the authority names a registry service's host and port
 *             exposed by the server's hosts (its cluster's balancer
 *             picks the endpoint, skipping ejected ones) or one of those
 *             services' endpoints (address and port), else 400; an
 *             ambient endpoint of a service is reached on its port 15008
 *             (double HBONE's outer tunnel) unless that is this very
 *             server (the inner tunnel, which ends here);
 *   authorize AuthorizationPolicy with the peer's SPIFFE ID, its
 *             address and the destination port, else 401 (ztunnel's);
 *   connect   TCP to the endpoint within connect_timeout; only then 200,
 *             else 503 (ztunnel's), reported to outlier detection;
 *   relay     DATA both ways. Each direction holds at most tunnel_buffer
 *             bytes: the stream window the client may fill is that size
 *             and is given back only as bytes reach the upstream, and
 *             the upstream is read only while the buffer toward the
 *             client has room. END_STREAM becomes a FIN (after the
 *             buffered bytes) and a FIN becomes END_STREAM; an upstream
 *             reset becomes RST_STREAM CONNECT_ERROR, a client's
 *             RST_STREAM closes the upstream.
 *
 * Tunnels and connections are freed on the loop turn after they close,
 * never inside the nghttp2 or I/O callback that closed them.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/addr.h"
#include "core/ascii.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "event/logsink.h"
#include "event/reap.h"
#include "event/timer.h"
#include "http/hbone_hdr.h"
#include "http/trace_context.h"
#include "net/conn.h"
#include "net/overload.h"
#include "net/sock.h"
#include "policy/authz.h"
#include "proxy/hbone.h"
#include "proxy/hbone_io.h"
#include "proxy/l4_listener.h"
#include "proxy/stats.h"
#include "tls/istio_sni.h"
#include "upstream/balancer.h"
#include "upstream/cluster.h"
#include "upstream/outlier.h"

#define READ_CHUNK (64 * 1024)
#define HBONE_PORT 15008
#define READS_PER_TURN 8
#define OUT_MAX (64 * 1024)
/* Request fields kept for routing and the log; longer ones are a 400. */
#define AUTH_MAX 300
#define FIELD_MAX 1024

enum tstate { T_HEAD, T_CONNECTING, T_OPEN, T_DONE };

struct hbone_conn;

struct hbone_tunnel {
    struct list link; /* hc->tunnels, then the worker's dead_tunnels */
    struct hbone_conn *hc;
    int32_t id;
    int state;
    struct conn up;
    int up_open;
    struct timer timer; /* connect, then idle */
    struct buf to_up;   /* from the client, not yet written upstream */
    struct buf to_down; /* from the upstream, not yet sent as DATA */
    uint64_t bytes_in, bytes_out;
    uint64_t start_ms;
    /* Buffer bytes reserved against hbone.tunnelMemory (two
     * tunnelBuffers), given back when the tunnel is freed. */
    struct cx_limit *mem_root;
    int64_t reserved;
    unsigned down_eof : 1; /* END_STREAM from the client */
    unsigned up_shut : 1;  /* FIN sent upstream */
    unsigned up_eof : 1;   /* FIN from the upstream */
    unsigned bad : 1;      /* a malformed request: 400 */
    unsigned too_long : 1;
    unsigned deferred : 1; /* the data provider said DEFERRED */
    unsigned logged : 1;
    unsigned rst_after_answer : 1;
    int status; /* the answer sent, 0 before */
    const char *end;
    char endbuf[160];
    /* Routing */
    struct cluster *cl; /* borrowed from the listener's conf */
    size_t ep;
    struct addr dst;
    uint32_t authz_port; /* the workload's port (dst may be its 15008) */
    /* Request fields, copied (NUL-terminated) */
    char method[16];
    char authority[AUTH_MAX];
    char forwarded[FIELD_MAX];
    char baggage[FIELD_MAX];
    char traceparent[64];
    char xfn[64]; /* x-forwarded-network */
    unsigned has_scheme_or_path : 1, has_protocol : 1;
};

struct hbone_conn {
    struct list link; /* w->conns, then w->dead */
    struct hbone_worker *w;
    struct conn c;
    nghttp2_session *ng;
    struct timer idle;
    struct list tunnels;
    size_t ntunnels;
    struct hbone_out out; /* what the socket did not take */
    struct sockaddr_storage peer;
    socklen_t peerlen;
    char peer_uri[512];
    uint64_t start_ms;
    unsigned closed : 1;
    unsigned eof : 1;
    unsigned goaway : 1;
};

static struct proxy_counters *shard_of(const struct hbone_worker *w)
{
    return proxy_counters(w->p->conf->stats, w->p->worker);
}

static struct relay_counters *rc_of(const struct hbone_conn *hc)
{
    return &shard_of(hc->w)->relay;
}

static const struct l4_listener_conf *conf_of(const struct hbone_conn *hc)
{
    return hc->w->p->conf;
}

static void hc_process(struct hbone_conn *hc);
static void worker_reap(struct reap_node *n);

static void defer_reap(struct hbone_worker *w)
{
    reaper_defer(w->p->reaper, &w->reap, worker_reap);
}

/* ---- the access log ----------------------------------------------------- */

static void slice_copy(char *out, size_t n, struct slice s)
{
    size_t k = s.n < n - 1 ? s.n : n - 1;

    if (k > 0)
        memcpy(out, s.p, k);
    out[k] = '\0';
}

static void tunnel_log(struct hbone_tunnel *t)
{
    struct hbone_conn *hc = t->hc;
    char down[ADDR_STRLEN] = "-", up[ADDR_STRLEN] = "-", status[8], bin[24],
         bout[24], dur[24], trace[33] = "", ffor[64] = "", fhost[256] = "",
         bns[64] = "", bwl[128] = "", bcl[64] = "", bsvc[128] = "";
    struct hbone_forwarded fw;
    struct hbone_baggage bg;
    struct tctx tc;
    const char *why;

    if (t->logged || !conf_of(hc)->relay.access_log)
        return;
    t->logged = 1;
    if (hc->peerlen > 0)
        addr_format_sa((const struct sockaddr *)&hc->peer, hc->peerlen, down,
                       sizeof(down));
    if (t->dst.len > 0)
        addr_format(&t->dst, up, sizeof(up));
    snprintf(status, sizeof(status), "%d", t->status);
    snprintf(bin, sizeof(bin), "%" PRIu64, t->bytes_in);
    snprintf(bout, sizeof(bout), "%" PRIu64, t->bytes_out);
    snprintf(dur, sizeof(dur), "%" PRIu64, clock_ms() - t->start_ms);
    if (t->traceparent[0] &&
        tctx_parse_traceparent(t->traceparent, strlen(t->traceparent), &tc) ==
            0)
        tctx_hex(tc.trace_id, sizeof(tc.trace_id), trace);
    if (t->forwarded[0] &&
        hbone_forwarded_parse(t->forwarded, strlen(t->forwarded), &fw, &why) ==
            0) {
        slice_copy(ffor, sizeof(ffor), fw.for_);
        slice_copy(fhost, sizeof(fhost), fw.host);
    }
    if (t->baggage[0] &&
        hbone_baggage_parse(t->baggage, strlen(t->baggage), &bg, &why) == 0) {
        slice_copy(bcl, sizeof(bcl), bg.cluster);
        slice_copy(bns, sizeof(bns), bg.ns);
        slice_copy(bwl, sizeof(bwl), bg.workload);
        slice_copy(bsvc, sizeof(bsvc), bg.service);
    }
    {
        struct log_field f[] = {
            {"listener", conf_of(hc)->name, 0},
            {"downstream", down, 0},
            {"peer_uri_san", hc->peer_uri[0] ? hc->peer_uri : NULL, 0},
            {"authority", t->authority[0] ? t->authority : NULL, 0},
            {"upstream", up, 0},
            {"cluster", t->cl != NULL ? t->cl->name : NULL, 0},
            {"status", status, 1},
            {"forwarded_for", ffor[0] ? ffor : NULL, 0},
            {"forwarded_host", fhost[0] ? fhost : NULL, 0},
            {"source_cluster", bcl[0] ? bcl : NULL, 0},
            {"source_namespace", bns[0] ? bns : NULL, 0},
            {"source_workload", bwl[0] ? bwl : NULL, 0},
            {"source_service", bsvc[0] ? bsvc : NULL, 0},
            {"forwarded_network", t->xfn[0] ? t->xfn : NULL, 0},
            {"trace_id", trace[0] ? trace : NULL, 0},
            {"bytes_in", bin, 1},
            {"bytes_out", bout, 1},
            {"duration_ms", dur, 1},
            {"end", t->end != NULL ? t->end : "-", 0},
        };
        struct l4_listener *p = hc->w->p;
        int nf = (int)(sizeof(f) / sizeof(f[0]));

        /* Where the listener's TCP sessions are logged: log.accessLogFile
         * through the writer thread, else the log. */
        if (p->conf->relay.alog_sink == NULL) {
            log_event(LOG_INFO, "hbone_tunnel", f, nf);
        } else if (log_get_level() <= LOG_INFO) {
            char line[LSINK_CHUNK];
            struct buf b = {line, 0, 0, sizeof(line), sizeof(line), 0};

            log_event_render(&b, LOG_INFO, "hbone_tunnel", f, nf);
            lsink_buf_line(&p->relay.alog, buf_ptr(&b), buf_len(&b));
        }
    }
}

/* ---- tunnels --------------------------------------------------------------
 */

static void tunnel_up_close(struct hbone_tunnel *t)
{
    if (t->up_open) {
        conn_close(&t->up);
        t->up_open = 0;
        if (t->cl != NULL && t->cl->max_connections > 0)
            __atomic_sub_fetch(&t->cl->cx_active, 1, __ATOMIC_RELAXED);
    }
}

/* tunnel_end() is called once nghttp2 closed the stream: the upstream
 * goes, the memory on the next turn. */
static void tunnel_end(struct hbone_tunnel *t)
{
    struct hbone_conn *hc = t->hc;

    if (t->state == T_DONE)
        return;
    if (t->state == T_OPEN)
        STAT_ADD(rc_of(hc), hbone_closed, 1);
    if (t->end == NULL)
        t->end = "closed";
    t->state = T_DONE;
    timer_cancel(&t->timer);
    tunnel_up_close(t);
    tunnel_log(t);
    list_del(&t->link);
    list_append(&hc->w->dead_tunnels, &t->link);
    hc->ntunnels--;
    if (hc->ntunnels == 0 && !hc->closed)
        timer_arm(&hc->idle, conf_of(hc)->hbone.idle_timeout_ms);
    defer_reap(hc->w);
}

static void tunnel_free(struct hbone_tunnel *t)
{
    if (t->reserved > 0)
        cx_tunnel_give(t->mem_root, t->reserved);
    timer_dispose(&t->timer);
    buf_dispose(&t->to_up);
    buf_dispose(&t->to_down);
    free(t);
}

/* tunnel_reset() ends the stream with RST_STREAM code. */
static void tunnel_reset(struct hbone_tunnel *t, uint32_t code, const char *end)
{
    if (t->end == NULL)
        t->end = end;
    tunnel_up_close(t);
    nghttp2_submit_rst_stream(t->hc->ng, NGHTTP2_FLAG_NONE, t->id, code);
    conn_wake(&t->hc->c);
}

/* An answer without a tunnel (4xx, 5xx): the stream ends with it. */
static void tunnel_refuse(struct hbone_tunnel *t, int status, uint64_t *counter,
                          const char *end)
{
    char st[4];
    nghttp2_nv nv[] = {
        {(uint8_t *)":status", (uint8_t *)st, 7, 3, NGHTTP2_NV_FLAG_NONE},
    };

    snprintf(st, sizeof(st), "%03d", status);
    /* STAT_ADD on a counter chosen by the caller. */
    __atomic_store_n(counter, *counter + 1, __ATOMIC_RELAXED);
    t->status = status;
    if (t->end == NULL)
        t->end = end;
    timer_cancel(&t->timer);
    tunnel_up_close(t);
    /* The answer ends our side; once it is out, RST_STREAM NO_ERROR
     * ends the client's (RFC 9113 8.1), so the stream holds no slot
     * (on_frame_send). */
    t->rst_after_answer = 1;
    if (nghttp2_submit_response(t->hc->ng, t->id, nv, 1, NULL) != 0)
        nghttp2_submit_rst_stream(t->hc->ng, NGHTTP2_FLAG_NONE, t->id,
                                  NGHTTP2_INTERNAL_ERROR);
    conn_wake(&t->hc->c);
}

static ssize_t read_down(nghttp2_session *ng, int32_t id, uint8_t *out,
                         size_t len, uint32_t *flags, nghttp2_data_source *src,
                         void *arg)
{
    struct hbone_tunnel *t = src->ptr;
    size_t n = buf_len(&t->to_down);

    (void)ng;
    (void)id;
    (void)arg;
    if (n == 0) {
        if (t->up_eof) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            return 0;
        }
        t->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n > len)
        n = len;
    memcpy(out, buf_ptr(&t->to_down), n);
    buf_consume(&t->to_down, n);
    t->bytes_out += n;
    STAT_ADD(rc_of(t->hc), bytes_out, n);
    if (buf_len(&t->to_down) == 0 && t->up_eof)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    /* Room again: the upstream may be read. */
    if (t->up_open && !t->up_eof)
        conn_wake(&t->up);
    return (ssize_t)n;
}

static void tunnel_want(struct hbone_tunnel *t)
{
    if (!t->up_open)
        return;
    conn_want(&t->up,
              t->state == T_OPEN && !t->up_eof && buf_room(&t->to_down) > 0,
              t->state == T_CONNECTING || buf_len(&t->to_up) > 0);
}

static void tunnel_connected(struct hbone_tunnel *t)
{
    struct hbone_conn *hc = t->hc;
    nghttp2_data_provider dp;
    nghttp2_nv nv[] = {
        {(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
    };

    t->state = T_OPEN;
    t->status = 200;
    timer_cancel(&t->timer);
    timer_arm(&t->timer, conf_of(hc)->hbone.idle_timeout_ms);
    if (t->cl != NULL && t->cl->od != NULL)
        outlier_success(t->cl->od, t->ep);
    STAT_ADD(rc_of(hc), hbone_opened, 1);
    dp.source.ptr = t;
    dp.read_callback = read_down;
    if (nghttp2_submit_response(hc->ng, t->id, nv, 1, &dp) != 0) {
        tunnel_reset(t, NGHTTP2_INTERNAL_ERROR, "out_of_memory");
        return;
    }
    conn_wake(&hc->c);
}

static void tunnel_connect_failed(struct hbone_tunnel *t, int timeout)
{
    struct relay_counters *rc = rc_of(t->hc);

    if (t->cl != NULL) {
        struct cluster_counters *cs = &t->cl->w[t->hc->w->p->worker];
        STAT_ADD(cs, cx_connect_fail, 1);
        if (timeout)
            STAT_ADD(cs, cx_connect_timeout, 1);
        cluster_report(t->cl, t->ep, OUTLIER_CONNECT_FAILED);
    }
    if (timeout) {
        STAT_ADD(rc, connect_timeouts, 1);
        tunnel_refuse(t, 503, &rc->hbone_connect_failed, "connect_timeout");
    } else {
        STAT_ADD(rc, connect_failures, 1);
        tunnel_refuse(t, 503, &rc->hbone_connect_failed, "connect_failed");
    }
}

/* Bytes toward the upstream, then a FIN once the client ended and all is
 * written; the window is given back for what was written. */
static int tunnel_write_up(struct hbone_tunnel *t)
{
    struct hbone_conn *hc = t->hc;

    while (buf_len(&t->to_up) > 0) {
        ssize_t n = conn_write(&t->up, buf_ptr(&t->to_up), buf_len(&t->to_up));
        if (n == CONN_AGAIN)
            break;
        if (n < 0) {
            tunnel_reset(t, NGHTTP2_CONNECT_ERROR, "upstream_reset");
            return -1;
        }
        buf_consume(&t->to_up, (size_t)n);
        STAT_ADD(rc_of(hc), upstream_bytes_out, (uint64_t)n);
        nghttp2_session_consume(hc->ng, t->id, (size_t)n);
        conn_wake(&hc->c);
    }
    if (buf_len(&t->to_up) == 0)
        buf_release_if_empty(&t->to_up);
    if (t->down_eof && buf_len(&t->to_up) == 0 && !t->up_shut) {
        t->up_shut = 1;
        shutdown(t->up.fd, SHUT_WR);
    }
    return 0;
}

static void tunnel_read_up(struct hbone_tunnel *t)
{
    struct hbone_conn *hc = t->hc;
    int got = 0;

    while (!t->up_eof && buf_room(&t->to_down) > 0) {
        size_t room;
        char *p = buf_reserve_any(&t->to_down, &room);
        ssize_t n;

        if (p == NULL)
            break;
        n = conn_read(&t->up, p, room);
        if (n == CONN_AGAIN)
            break;
        if (n < 0) {
            tunnel_reset(t, NGHTTP2_CONNECT_ERROR, "upstream_reset");
            return;
        }
        if (n == 0) {
            t->up_eof = 1;
            got = 1;
            break;
        }
        buf_commit(&t->to_down, (size_t)n);
        STAT_ADD(rc_of(hc), upstream_bytes_in, (uint64_t)n);
        got = 1;
    }
    if (got) {
        timer_arm(&t->timer, conf_of(hc)->hbone.idle_timeout_ms);
        if (t->deferred) {
            t->deferred = 0;
            nghttp2_session_resume_data(hc->ng, t->id);
        }
        conn_wake(&hc->c);
    }
}

static void on_up_io(struct conn *c, void *arg)
{
    struct hbone_tunnel *t = arg;

    (void)c;
    if (t->state == T_DONE || !t->up_open)
        return;
    if (t->state == T_CONNECTING) {
        int err = sock_error(t->up.fd);
        if (err != 0) {
            log_debug("listener %s: HBONE upstream: %s", conf_of(t->hc)->name,
                      strerror(err));
            tunnel_connect_failed(t, 0);
            return;
        }
        tunnel_connected(t);
    }
    if (t->state != T_OPEN)
        return;
    if (tunnel_write_up(t) < 0)
        return;
    tunnel_read_up(t);
    tunnel_want(t);
}

static void on_tunnel_timer(void *arg)
{
    struct hbone_tunnel *t = arg;

    if (t->state == T_CONNECTING) {
        tunnel_connect_failed(t, 1);
        return;
    }
    if (t->state == T_OPEN) {
        STAT_ADD(rc_of(t->hc), idle_timeouts, 1);
        tunnel_reset(t, NGHTTP2_CANCEL, "idle_timeout");
    }
}

static void addr_set_port(struct addr *a, uint16_t port)
{
    if (a->ss.ss_family == AF_INET)
        ((struct sockaddr_in *)(void *)&a->ss)->sin_port = htons(port);
    else if (a->ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)(void *)&a->ss)->sin6_port = htons(port);
}

static uint32_t addr_port(const struct addr *a)
{
    if (a->ss.ss_family == AF_INET)
        return ntohs(
            ((const struct sockaddr_in *)(const void *)&a->ss)->sin_port);
    if (a->ss.ss_family == AF_INET6)
        return ntohs(
            ((const struct sockaddr_in6 *)(const void *)&a->ss)->sin6_port);
    return 0;
}

/* Whether the endpoint at a (any port) is where this connection was
 * accepted: its HBONE port is this server's. */
static int is_local_end(const struct hbone_conn *hc, const struct addr *a)
{
    struct addr local;
    socklen_t len = sizeof(local.ss);

    memset(&local, 0, sizeof(local));
    if (getsockname(hc->c.fd, (struct sockaddr *)&local.ss, &len) != 0)
        return 0;
    local.len = len;
    return addr_same_host(&local, a) && addr_port(&local) == HBONE_PORT;
}

/* A service host:port authority: the service's cluster picks the
 * endpoint. 0, -1 when no exposed service has that host and port, 1 when
 * it has no endpoint to pick. */
static int route_name(struct hbone_tunnel *t, const struct hbone_authority *a)
{
    struct l4_listener *p = t->hc->w->p;
    const struct l4_listener_conf *c = p->conf;
    struct istio_sni key;
    const struct l4_auto *au;
    char host[256];
    struct cluster *cl;

    if (a->host.n >= sizeof(host))
        return -1;
    ascii_lower_copy(host, a->host.p, a->host.n);
    host[a->host.n] = '\0';
    memset(&key, 0, sizeof(key));
    key.host = slice_of(host);
    key.port = a->port;
    if (l4_auto_lookup(c, &key, &au) != L4_AUTO_FOUND)
        return -1;
    cl = c->clusters[au->cluster];
    t->cl = cl;
    if (cl->nendpoints == 0)
        return 1;
    if (!p->lb_ok[au->cluster]) {
        if (balancer_init(&p->lb[au->cluster], cl, p->worker) < 0)
            return 1;
        p->lb_ok[au->cluster] = 1;
    }
    t->ep = balancer_pick(&p->lb[au->cluster]);
    t->dst = cl->endpoints[t->ep];
    t->authz_port = addr_port(&t->dst);
    /* A service host names the destination only in double HBONE. On the
     * outer tunnel (through this east-west gateway) the bytes inside are
     * the client's own TLS and CONNECT to the workload's tunnel end, so
     * an endpoint in the ambient mesh is reached on its HBONE port, as
     * Istio's east-west gateway does; others on their own port. When
     * that HBONE port is this very connection's (the client connected to
     * the endpoint's own address), this server is the workload's tunnel
     * end: the inner CONNECT ends here, on the workload's port. Decided
     * by addresses, never by a header the client sends. */
    if (cl->hbone != NULL && cl->hbone[t->ep] && !is_local_end(t->hc, &t->dst))
        addr_set_port(&t->dst, HBONE_PORT);
    return 0;
}

/* An address authority: an endpoint of a service the server exposes. */
static int route_addr(struct hbone_tunnel *t, const struct hbone_authority *a)
{
    const struct l4_listener_conf *c = conf_of(t->hc);

    for (size_t i = 0; i < c->nautos; i++) {
        struct cluster *cl = c->clusters[c->autos[i].cluster];
        for (size_t e = 0; e < cl->nendpoints; e++)
            if (addr_equal(&cl->endpoints[e], &a->addr)) {
                t->cl = cl;
                t->ep = e;
                t->dst = a->addr;
                t->authz_port = a->port;
                return 0;
            }
    }
    return -1;
}

static void tunnel_start(struct hbone_tunnel *t)
{
    struct hbone_conn *hc = t->hc;
    struct relay_counters *rc = rc_of(hc);
    const struct l4_listener_conf *c = conf_of(hc);
    struct hbone_authority a;
    const char *why = NULL;
    int inprog, fd, r;

    if (t->bad || t->too_long || strcmp(t->method, "CONNECT") != 0 ||
        t->has_scheme_or_path || t->has_protocol || t->authority[0] == '\0') {
        tunnel_refuse(t, 400, &rc->hbone_bad_request,
                      strcmp(t->method, "CONNECT") != 0 ? "not_connect"
                                                        : "bad_request");
        return;
    }
    if (hbone_authority_parse(t->authority, strlen(t->authority), &a, &why) <
        0) {
        log_debug("listener %s: HBONE authority '%s': %s", c->name,
                  t->authority, why);
        tunnel_refuse(t, 400, &rc->hbone_bad_request, "bad_authority");
        return;
    }
    r = a.is_addr ? route_addr(t, &a) : route_name(t, &a);
    if (r < 0) {
        tunnel_refuse(t, 400, &rc->hbone_unknown_destination,
                      "unknown_destination");
        return;
    }
    if (r > 0) {
        tunnel_refuse(t, 503, &rc->hbone_no_endpoint, "no_healthy_upstream");
        return;
    }
    if (c->authz != NULL) {
        struct authz_request q;
        struct authz_decision d;
        memset(&q, 0, sizeof(q));
        q.tcp = 1;
        if (strncmp(hc->peer_uri, "spiffe://", 9) == 0)
            q.principal = slice_of(hc->peer_uri + 9);
        q.peer = hc->peerlen > 0 ? (const struct sockaddr *)&hc->peer : NULL;
        q.port = t->authz_port;
        authz_check(c->authz, &q, &d);
        if (!d.allowed) {
            STAT_ADD(&shard_of(hc->w)->http, rq_rbac_denied, 1);
            snprintf(t->endbuf, sizeof(t->endbuf), "RBAC_ACCESS_DENIED[%s]",
                     d.policy ? d.policy : "none");
            tunnel_refuse(t, 401, &rc->hbone_denied, t->endbuf);
            return;
        }
    }
    if (t->cl->max_connections > 0 &&
        __atomic_load_n(&t->cl->cx_active, __ATOMIC_RELAXED) >=
            t->cl->max_connections) {
        STAT_ADD(&t->cl->w[hc->w->p->worker], cx_overflow, 1);
        tunnel_refuse(t, 503, &rc->hbone_no_endpoint, "upstream_overflow");
        return;
    }
    /* Each tunnel may come to hold two tunnelBuffers: reserved now,
     * against the process's budget, and refused while memory actions
     * are on (a new tunnel is new load, like a new connection). */
    if (c->cx != NULL) {
        struct cx_limit *root = cx_root(c->cx);
        int64_t want = 2 * (int64_t)c->hbone.tunnel_buffer;
        if (cx_tunnel_take(root, want, (int64_t)c->hbone.tunnel_memory) < 0) {
            tunnel_refuse(t, 503, &rc->hbone_overload, "overload");
            return;
        }
        t->mem_root = root;
        t->reserved = want;
    }
    STAT_ADD(&t->cl->w[hc->w->p->worker], cx_total, 1);
    fd = sock_connect(&t->dst, &inprog);
    if (fd < 0) {
        tunnel_connect_failed(t, 0);
        return;
    }
    if (t->cl->max_connections > 0)
        __atomic_add_fetch(&t->cl->cx_active, 1, __ATOMIC_RELAXED);
    conn_init(&t->up, hc->w->p->base, fd, on_up_io, t);
    t->up_open = 1;
    t->state = T_CONNECTING;
    timer_arm(&t->timer, c->hbone.connect_timeout_ms);
    if (!inprog) {
        tunnel_connected(t);
        tunnel_want(t);
        return;
    }
    tunnel_want(t);
}

/* ---- the HTTP/2 session ----------------------------------------------------
 */

static struct hbone_tunnel *tunnel_of(struct hbone_conn *hc, int32_t id)
{
    return nghttp2_session_get_stream_user_data(hc->ng, id);
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f,
                            void *arg)
{
    struct hbone_conn *hc = arg;
    struct hbone_tunnel *t;

    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    t->hc = hc;
    t->id = f->hd.stream_id;
    t->start_ms = clock_ms();
    buf_init(&t->to_up, conf_of(hc)->hbone.tunnel_buffer);
    buf_init(&t->to_down, conf_of(hc)->hbone.tunnel_buffer);
    timer_init(&t->timer, hc->w->p->base, on_tunnel_timer, t);
    list_append(&hc->tunnels, &t->link);
    hc->ntunnels++;
    timer_cancel(&hc->idle);
    nghttp2_session_set_stream_user_data(ng, t->id, t);
    return 0;
}

static void field_copy(struct hbone_tunnel *t, char *out, size_t cap,
                       const uint8_t *v, size_t n)
{
    /* A repeated field: the first is kept (as ztunnel's get()). */
    if (out[0] != '\0')
        return;
    if (n >= cap) {
        t->too_long = 1;
        return;
    }
    memcpy(out, v, n);
    out[n] = '\0';
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f,
                     const uint8_t *name, size_t nl, const uint8_t *value,
                     size_t vl, uint8_t flags, void *arg)
{
    struct hbone_conn *hc = arg;
    struct hbone_tunnel *t = tunnel_of(hc, f->hd.stream_id);

    (void)ng;
    (void)flags;
    if (t == NULL || f->hd.type != NGHTTP2_HEADERS ||
        f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
#define IS(s) (nl == sizeof(s) - 1 && memcmp(name, s, nl) == 0)
    if (IS(":method"))
        field_copy(t, t->method, sizeof(t->method), value, vl);
    else if (IS(":authority"))
        field_copy(t, t->authority, sizeof(t->authority), value, vl);
    else if (IS(":scheme") || IS(":path"))
        t->has_scheme_or_path = 1;
    else if (IS(":protocol"))
        t->has_protocol = 1;
    else if (IS("forwarded"))
        field_copy(t, t->forwarded, sizeof(t->forwarded), value, vl);
    else if (IS("baggage"))
        field_copy(t, t->baggage, sizeof(t->baggage), value, vl);
    else if (IS("traceparent"))
        field_copy(t, t->traceparent, sizeof(t->traceparent), value, vl);
    else if (IS("x-forwarded-network"))
        field_copy(t, t->xfn, sizeof(t->xfn), value, vl);
#undef IS
    return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *arg)
{
    struct hbone_conn *hc = arg;
    struct hbone_tunnel *t;

    (void)ng;
    if (f->hd.stream_id == 0)
        return 0;
    t = tunnel_of(hc, f->hd.stream_id);
    if (t == NULL || t->state == T_DONE)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS &&
        f->headers.cat == NGHTTP2_HCAT_REQUEST && t->state == T_HEAD) {
        if (f->hd.flags & NGHTTP2_FLAG_END_STREAM)
            t->down_eof = 1;
        tunnel_start(t);
        return 0;
    }
    if ((f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        t->down_eof = 1;
        if (t->up_open)
            conn_wake(&t->up);
    }
    return 0;
}

static int on_data(nghttp2_session *ng, uint8_t flags, int32_t id,
                   const uint8_t *data, size_t len, void *arg)
{
    struct hbone_conn *hc = arg;
    struct hbone_tunnel *t = tunnel_of(hc, id);

    (void)flags;
    if (t == NULL || t->state == T_DONE || t->status >= 300) {
        /* Nobody to take it: give the window back. */
        nghttp2_session_consume(ng, id, len);
        return 0;
    }
    /* The stream window is the buffer's size and is given back only as
     * bytes leave it, so a client keeping to flow control always fits;
     * nghttp2 refuses one that does not (FLOW_CONTROL_ERROR). */
    if (buf_append(&t->to_up, data, len) < 0) {
        tunnel_reset(t, NGHTTP2_FLOW_CONTROL_ERROR, "tunnel_buffer_full");
        return 0;
    }
    t->bytes_in += len;
    STAT_ADD(rc_of(hc), bytes_in, len);
    if (t->state == T_OPEN)
        timer_arm(&t->timer, conf_of(hc)->hbone.idle_timeout_ms);
    /* Written on the upstream's turn, after this read: see the header. */
    if (t->up_open && t->state == T_OPEN)
        conn_wake(&t->up);
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code,
                           void *arg)
{
    struct hbone_conn *hc = arg;
    struct hbone_tunnel *t = tunnel_of(hc, id);

    (void)ng;
    if (t == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(hc->ng, id, NULL);
    if (t->end == NULL && code != NGHTTP2_NO_ERROR)
        t->end = "downstream_reset";
    tunnel_end(t);
    return 0;
}

/* Refused streams (over MAX_CONCURRENT_STREAMS) are nghttp2's own
 * answer: counted as they go out. */
static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *f, void *arg)
{
    struct hbone_conn *hc = arg;

    if (f->hd.type == NGHTTP2_RST_STREAM &&
        f->rst_stream.error_code == NGHTTP2_REFUSED_STREAM)
        STAT_ADD(rc_of(hc), hbone_too_many, 1);
    if (f->hd.type == NGHTTP2_HEADERS &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        struct hbone_tunnel *t = tunnel_of(hc, f->hd.stream_id);
        if (t != NULL && t->rst_after_answer &&
            nghttp2_session_get_stream_remote_close(ng, t->id) == 0)
            nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, t->id,
                                      NGHTTP2_NO_ERROR);
    }
    return 0;
}

/*
 * A client that opens a stream past MAX_CONCURRENT_STREAMS after it
 * acknowledged our SETTINGS is a connection error for nghttp2 (GOAWAY
 * PROTOCOL_ERROR); before the acknowledgement the stream alone is
 * refused (on_frame_send). Either way it counts as a refused tunnel.
 */
static int on_invalid_frame(nghttp2_session *ng, const nghttp2_frame *f,
                            int code, void *arg)
{
    struct hbone_conn *hc = arg;

    (void)ng;
    if (f->hd.type == NGHTTP2_HEADERS &&
        f->headers.cat == NGHTTP2_HCAT_REQUEST && code == NGHTTP2_ERR_PROTO &&
        hc->ntunnels >= conf_of(hc)->hbone.max_tunnels)
        STAT_ADD(rc_of(hc), hbone_too_many, 1);
    return 0;
}

/* ---- the connection ---------------------------------------------------------
 */

static void hc_close(struct hbone_conn *hc)
{
    struct hbone_worker *w = hc->w;

    if (hc->closed)
        return;
    hc->closed = 1;
    while (!LIST_EMPTY(&hc->tunnels)) {
        struct hbone_tunnel *t =
            LIST_ELEM(hc->tunnels.next, struct hbone_tunnel, link);
        if (t->end == NULL)
            t->end = "connection_closed";
        tunnel_end(t);
    }
    timer_cancel(&hc->idle);
    conn_close(&hc->c);
    STAT_ADD(&shard_of(w)->listener, closed, 1);
    list_del(&hc->link);
    list_append(&w->dead, &hc->link);
    w->active--;
    defer_reap(w);
}

static void hc_free(struct hbone_conn *hc)
{
    nghttp2_session_del(hc->ng);
    timer_dispose(&hc->idle);
    hbone_out_dispose(&hc->out);
    free(hc);
}

static int hc_read(struct hbone_conn *hc)
{
    uint8_t chunk[READ_CHUNK];

    for (int i = 0; i < READS_PER_TURN; i++) {
        ssize_t n = conn_read(&hc->c, chunk, sizeof(chunk));
        if (n == CONN_AGAIN)
            return 0;
        if (n <= 0) {
            hc->eof = 1;
            return n == 0 ? 0 : -1;
        }
        if (nghttp2_session_mem_recv(hc->ng, chunk, (size_t)n) != n)
            return -1;
    }
    /* More may wait: come back on the next turn, after other work. */
    conn_wake(&hc->c);
    return 0;
}

static void hc_process(struct hbone_conn *hc)
{
    if (hc->closed)
        return;
    if (!hc->eof && nghttp2_session_want_read(hc->ng) && hc_read(hc) < 0) {
        hc_close(hc);
        return;
    }
    if (hbone_out_flush(&hc->out, hc->ng, &hc->c) < 0) {
        hc_close(hc);
        return;
    }
    if (hc->out.len == 0 && ((hc->eof && !nghttp2_session_want_write(hc->ng)) ||
                             (!nghttp2_session_want_read(hc->ng) &&
                              !nghttp2_session_want_write(hc->ng)) ||
                             (hc->goaway && hc->ntunnels == 0))) {
        hc_close(hc);
        return;
    }
    conn_want(&hc->c, !hc->eof && nghttp2_session_want_read(hc->ng),
              hc->out.len > 0);
}

static void on_down_io(struct conn *c, void *arg)
{
    (void)c;
    hc_process(arg);
}

static void on_hc_idle(void *arg)
{
    struct hbone_conn *hc = arg;

    if (hc->ntunnels > 0)
        return;
    STAT_ADD(rc_of(hc), idle_timeouts, 1);
    nghttp2_submit_goaway(hc->ng, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(hc->ng),
                          NGHTTP2_NO_ERROR, NULL, 0);
    hc->goaway = 1;
    hc_process(hc);
}

void hbone_accept(struct hbone_worker *w, struct conn *down,
                  const struct sockaddr_storage *peer, socklen_t peerlen,
                  const char *peer_uri, uint64_t start_ms)
{
    const struct hbone_limits *lim = &w->p->conf->hbone;
    struct hbone_conn *hc = calloc(1, sizeof(*hc));
    nghttp2_session_callbacks *cb = NULL;
    nghttp2_option *opt = NULL;
    nghttp2_settings_entry iv[4];
    uint64_t conn_window;

    if (hc == NULL) {
        conn_close(down);
        STAT_ADD(&shard_of(w)->listener, closed, 1);
        return;
    }
    hc->w = w;
    LIST_INIT(&hc->tunnels);
    conn_move(&hc->c, down, w->p->base, on_down_io, hc);
    timer_init(&hc->idle, w->p->base, on_hc_idle, hc);
    if (peerlen <= sizeof(hc->peer)) {
        memcpy(&hc->peer, peer, peerlen);
        hc->peerlen = peerlen;
    }
    snprintf(hc->peer_uri, sizeof(hc->peer_uri), "%s", peer_uri);
    hc->start_ms = start_ms;
    list_append(&w->conns, &hc->link);
    w->active++;
    if (nghttp2_session_callbacks_new(&cb) != 0 ||
        nghttp2_option_new(&opt) != 0)
        goto fail;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb,
                                                            on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_data_source_read_length_callback(
        cb, hbone_data_len);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(
        cb, on_invalid_frame);
    /* The window is given back as bytes reach the upstream, not as they
     * arrive; and the floods nghttp2 knows are bounded as on h2_server. */
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_option_set_max_continuations(opt, 8);
    nghttp2_option_set_stream_reset_rate_limit(opt, 1000, 100);
    if (nghttp2_session_server_new2(&hc->ng, cb, hc, opt) != 0)
        goto fail;
    nghttp2_session_callbacks_del(cb);
    nghttp2_option_del(opt);
    cb = NULL;
    opt = NULL;
    iv[0].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS;
    iv[0].value = lim->max_tunnels;
    iv[1].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE;
    iv[1].value = lim->tunnel_buffer;
    iv[2].settings_id = NGHTTP2_SETTINGS_ENABLE_PUSH;
    iv[2].value = 0;
    iv[3].settings_id = NGHTTP2_SETTINGS_MAX_FRAME_SIZE;
    iv[3].value = HBONE_FRAME_MAX;
    if (nghttp2_submit_settings(hc->ng, NGHTTP2_FLAG_NONE, iv, 4) != 0)
        goto fail;
    /* The connection's window covers every tunnel's. */
    conn_window = (uint64_t)lim->max_tunnels * lim->tunnel_buffer;
    if (conn_window > NGHTTP2_MAX_WINDOW_SIZE)
        conn_window = NGHTTP2_MAX_WINDOW_SIZE;
    if (conn_window > NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE &&
        nghttp2_session_set_local_window_size(hc->ng, NGHTTP2_FLAG_NONE, 0,
                                              (int32_t)conn_window) != 0)
        goto fail;
    timer_arm(&hc->idle, lim->idle_timeout_ms);
    hc_process(hc);
    return;
fail:
    nghttp2_session_callbacks_del(cb);
    nghttp2_option_del(opt);
    log_error("listener %s: HBONE: out of memory", w->p->conf->name);
    hc_close(hc);
}

/* ---- the worker -----------------------------------------------------------
 */

static void worker_reap(struct reap_node *n)
{
    struct hbone_worker *w = LIST_ELEM(n, struct hbone_worker, reap);

    while (!LIST_EMPTY(&w->dead_tunnels)) {
        struct hbone_tunnel *t =
            LIST_ELEM(w->dead_tunnels.next, struct hbone_tunnel, link);
        list_del(&t->link);
        tunnel_free(t);
    }
    while (!LIST_EMPTY(&w->dead)) {
        struct hbone_conn *hc =
            LIST_ELEM(w->dead.next, struct hbone_conn, link);
        list_del(&hc->link);
        hc_free(hc);
    }
    l4_listener_check_idle(w->p);
}

void hbone_worker_init(struct hbone_worker *w, struct l4_listener *p)
{
    memset(w, 0, sizeof(*w));
    w->p = p;
    LIST_INIT(&w->conns);
    LIST_INIT(&w->dead);
    LIST_INIT(&w->dead_tunnels);
}

void hbone_worker_drain(struct hbone_worker *w)
{
    for (struct list *it = w->conns.next; it != &w->conns; it = it->next) {
        struct hbone_conn *hc = LIST_ELEM(it, struct hbone_conn, link);
        if (hc->goaway)
            continue;
        hc->goaway = 1;
        nghttp2_submit_goaway(hc->ng, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(hc->ng),
                              NGHTTP2_NO_ERROR, NULL, 0);
        conn_wake(&hc->c);
    }
}

void hbone_worker_dispose(struct hbone_worker *w)
{
    if (w->p == NULL)
        return;
    while (!LIST_EMPTY(&w->conns))
        hc_close(LIST_ELEM(w->conns.next, struct hbone_conn, link));
    reaper_cancel(&w->reap);
    while (!LIST_EMPTY(&w->dead_tunnels)) {
        struct hbone_tunnel *t =
            LIST_ELEM(w->dead_tunnels.next, struct hbone_tunnel, link);
        list_del(&t->link);
        tunnel_free(t);
    }
    while (!LIST_EMPTY(&w->dead)) {
        struct hbone_conn *hc =
            LIST_ELEM(w->dead.next, struct hbone_conn, link);
        list_del(&hc->link);
        hc_free(hc);
    }
    w->p = NULL;
}
