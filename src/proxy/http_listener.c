/*
 * The HTTP listener of one worker: accepts connections, runs the TLS
 * handshake, picks HTTP/1.1 or HTTP/2 (ALPN, or the h2c preface in
 * plaintext) and hands the connection to that codec. Requests then go to
 * pipeline.c.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/series.h"
#include "core/clock.h"
#include "core/log.h"
#include "event/logsink.h"
#include "event/reap.h"
#include "event/timer.h"
#include "http/access_format.h"
#include "http2/h2_server.h"
#include "net/overload.h"
#include "net/proxy_proto.h"
#include "proxy/hbone_client.h"
#include "proxy/http_listener-t.h"
#include "policy/authz.h"
#include "policy/lua_vm.h"
#include "policy/jwt.h"
#include "proxy/router.h"
#include "tls/tls.h"
#include "upstream/pool.h"

#define HANDSHAKE_TIMEOUT_MS 10000
#define BODY_POOL_KEEP 64
/* Read buffers are taken and given back within a turn on the request
 * path: a few free ones serve a busy worker. */
#define IO_POOL_KEEP 16

static const char h2_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

struct http_listener_conf *http_listener_conf_new(const char *name,
                                                  struct stats_block *stats)
{
    struct http_listener_conf *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->refs = 1;
    c->name = strdup(name);
    c->cur = http_routes_new();
    if (c->name == NULL || c->cur == NULL) {
        http_routes_unref(c->cur);
        free(c->name);
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->gen = 1;
    c->stats = stats_block_ref(stats);
    c->downstream.lim = http_limits_default();
    c->h1c.lim = http_limits_default();
    c->hbone_window = 256 * 1024;
    c->hbone_idle_ms = 3600 * 1000;
    return c;
}

struct http_listener_conf *http_listener_conf_ref(struct http_listener_conf *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

void http_listener_conf_unref(struct http_listener_conf *c)
{
    if (c == NULL || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    http_routes_unref(c->cur);
    pthread_mutex_destroy(&c->lock);
    tls_holder_unref(c->tls);
    stats_block_unref(c->stats);
    afmt_free(c->alog_fmt);
    series_labels_unref(c->metrics_src);
    series_labels_unref(c->metrics_nodst);
    cx_limit_unref(c->cx);
    for (int i = 0; i < GEOIP_NFIELDS; i++)
        free(c->geo_headers[i]);
    free(c->hbone_baggage);
    free(c->name);
    free(c);
}

struct http_routes *http_routes_new(void)
{
    struct http_routes *r = calloc(1, sizeof(*r));

    if (r != NULL)
        r->refs = 1;
    return r;
}

struct http_routes *http_routes_ref(struct http_routes *r)
{
    __atomic_add_fetch(&r->refs, 1, __ATOMIC_RELAXED);
    return r;
}

void http_routes_unref(struct http_routes *r)
{
    if (r == NULL || __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (size_t i = 0; i < r->nclusters; i++)
        cluster_unref(r->clusters[i]);
    free(r->clusters);
    router_unref(r->router);
    authz_unref(r->authz);
    jwt_authn_unref(r->jwt);
    luaprogs_unref(r->lua);
    for (size_t i = 0; i < r->nlua_targets; i++)
        free(r->lua_targets[i].host);
    free(r->lua_targets);
    free(r);
}

void http_listener_conf_set_routes(struct http_listener_conf *c,
                                   struct http_routes *r)
{
    struct http_routes *old;

    pthread_mutex_lock(&c->lock);
    old = c->cur;
    c->cur = r;
    __atomic_store_n(&c->gen, c->gen + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->lock);
    http_routes_unref(old);
}

struct http_routes *http_listener_conf_routes(struct http_listener_conf *c)
{
    struct http_routes *r;

    pthread_mutex_lock(&c->lock);
    r = http_routes_ref(c->cur);
    pthread_mutex_unlock(&c->lock);
    return r;
}

/* ---- route views ---------------------------------------------------- */

static struct http_routes *conf_current(struct http_listener_conf *c,
                                        unsigned *gen)
{
    struct http_routes *r;

    pthread_mutex_lock(&c->lock);
    r = http_routes_ref(c->cur);
    *gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    return r;
}

static void lpool_unref(struct lpool *lp)
{
    if (lp == NULL || --lp->refs > 0)
        return;
    upool_dispose(&lp->p);
    free(lp);
}

static void wroutes_free(struct wroutes *w)
{
    if (w == NULL)
        return;
    for (size_t i = 0; w->pools != NULL && i < w->r->nclusters; i++)
        lpool_unref(w->pools[i]);
    free(w->pools);
    /* Only now, with the view's last stream gone: no hook runs in it. */
    luavm_free(w->lua);
    http_routes_unref(w->r);
    free(w);
}

/* An index of the pools of a view by cluster, so a new view finds the
 * pools it can share in one pass (10,000 clusters are routine). */
struct pool_index {
    const struct cluster **keys;
    struct lpool **pools;
    size_t mask;
};

static size_t ptr_slot(const void *p, size_t mask)
{
    uint64_t x = (uint64_t)(uintptr_t)p;

    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & mask;
}

static int pool_index_build(struct pool_index *ix, const struct wroutes *w)
{
    size_t n = w != NULL ? w->r->nclusters : 0, cap = 16;

    while (cap < 2 * n)
        cap *= 2;
    ix->mask = cap - 1;
    ix->keys = calloc(cap, sizeof(*ix->keys));
    ix->pools = calloc(cap, sizeof(*ix->pools));
    if (ix->keys == NULL || ix->pools == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        size_t k = ptr_slot(w->r->clusters[i], ix->mask);
        while (ix->keys[k] != NULL && ix->keys[k] != w->r->clusters[i])
            k = (k + 1) & ix->mask;
        ix->keys[k] = w->r->clusters[i];
        ix->pools[k] = w->pools[i];
    }
    return 0;
}

static struct lpool *pool_index_get(const struct pool_index *ix,
                                    const struct cluster *c)
{
    for (size_t k = ptr_slot(c, ix->mask); ix->keys[k] != NULL;
         k = (k + 1) & ix->mask)
        if (ix->keys[k] == c)
            return ix->pools[k];
    return NULL;
}

/*
 * The pools' tunnel hook (pool-t.h): a connection to an HBONE endpoint
 * of cl is a CONNECT tunnel through this worker's HBONE pool, as the TCP
 * relay's (l4_relay.c), without Forwarded (a pooled upstream connection
 * carries many clients' requests). -1: no tunnel (the endpoint's
 * connection fails; never made in the clear).
 */
static int hbone_open(void *arg, const struct cluster *cl, size_t ep,
                      struct conn *c, void (*on_io)(struct conn *, void *),
                      void *io_arg)
{
    struct http_listener *l = arg;
    struct hbone_target tg;
    char host[256] = "";
    size_t n;

    if (cl->hbone_error || cl->hbone_tls == NULL) {
        log_debug("listener %s: cluster %s: no HBONE tunnel (no mesh "
                  "certificate)",
                  l->conf->name, cl->name);
        return -1;
    }
    if (l->hbone == NULL && (l->hbone = hbone_pool_new(
                                 l->base, l->conf->name, l->conf->hbone_window,
                                 l->conf->hbone_idle_ms)) == NULL)
        return -1;
    /* The service's host (the cluster's name is host|subset|port). */
    n = strcspn(cl->name, "|");
    if (n < sizeof(host)) {
        memcpy(host, cl->name, n);
        host[n] = '\0';
    }
    memset(&tg, 0, sizeof(tg));
    tg.ctx = cl->hbone_tls;
    tg.dst = &cl->endpoints[ep];
    tg.id = cl->hbone_ids[ep];
    tg.host = host[0] ? host : NULL;
    tg.baggage = l->conf->hbone_baggage;
    if (cl->hbone[ep] == CLUSTER_HBONE_DOUBLE) {
        /* Through another network's ambient east-west gateway. */
        if (cl->hbone_inner_tls == NULL)
            return -1;
        tg.authority = cl->hbone_authority;
        tg.inner_ctx = cl->hbone_inner_tls;
        tg.network = cl->hbone_network;
    }
    return hbone_conn_open(c, l->hbone, &tg, on_io, io_arg);
}

/* wroutes_new() makes a view of r (its reference moves to the view) with
 * the pools of prev for the clusters both hold; NULL when memory runs out
 * (r is released). */
static struct wroutes *wroutes_new(struct http_listener *l,
                                   struct http_routes *r, unsigned gen,
                                   const struct wroutes *prev)
{
    struct wroutes *w = calloc(1, sizeof(*w));
    struct pool_index ix = {NULL, NULL, 0};

    if (w == NULL) {
        http_routes_unref(r);
        return NULL;
    }
    w->r = r;
    w->gen = gen;
    LIST_INIT(&w->link);
    w->pools = calloc(r->nclusters ? r->nclusters : 1, sizeof(*w->pools));
    if (w->pools == NULL || pool_index_build(&ix, prev) < 0)
        goto fail;
    for (size_t i = 0; i < r->nclusters; i++) {
        struct lpool *lp = pool_index_get(&ix, r->clusters[i]);

        if (lp == NULL) {
            lp = calloc(1, sizeof(*lp));
            if (lp == NULL)
                goto fail;
            if (upool_init(&lp->p, r->clusters[i], l->base, l->reaper,
                           l->worker, &l->scratch) < 0) {
                free(lp);
                goto fail;
            }
            if (r->clusters[i]->hbone != NULL) {
                lp->p.tunnel = hbone_open;
                lp->p.tunnel_arg = l;
            }
        }
        lp->refs++;
        w->pools[i] = lp;
    }
    free(ix.keys);
    free(ix.pools);
    return w;
fail:
    free(ix.keys);
    free(ix.pools);
    wroutes_free(w);
    return NULL;
}

/* A view nobody pins any more goes on the next loop turn: the stream that
 * dropped the last pin may be inside a callback of one of its pools'
 * connections. */
static void wroutes_retire(struct http_listener *l, struct wroutes *w)
{
    list_del(&w->link);
    list_append(&l->dead_routes, &w->link);
    http_listener_reap_later(l);
}

static void reap_routes(struct http_listener *l)
{
    while (!LIST_EMPTY(&l->dead_routes)) {
        struct wroutes *w =
            LIST_ELEM(l->dead_routes.next, struct wroutes, link);
        list_del(&w->link);
        wroutes_free(w);
    }
}

struct wroutes *http_listener_pin(struct http_listener *l)
{
    struct wroutes *w = l->routes;

    if (__atomic_load_n(&l->conf->gen, __ATOMIC_ACQUIRE) != w->gen) {
        unsigned gen;
        struct http_routes *r = conf_current(l->conf, &gen);
        struct wroutes *nw = wroutes_new(l, r, gen, w);

        /* Out of memory: keep serving the routes we have. */
        if (nw != NULL) {
            l->routes = nw;
            if (w->pins > 0)
                list_append(&l->old, &w->link);
            else
                wroutes_retire(l, w);
            w = nw;
        }
    }
    w->pins++;
    return w;
}

void http_listener_unpin(struct http_listener *l, struct wroutes *w)
{
    if (--w->pins == 0 && w != l->routes)
        wroutes_retire(l, w);
}

static void conn_free_now(struct http_conn *hc)
{
    list_del(&hc->link);
    timer_dispose(&hc->timer);
    h1_server_free(hc->h1);
    h2_server_free(hc->h2);
    conn_close(&hc->conn);
    free(hc->geo);
    free(hc->pp);
    free(hc->direct);
    free(hc);
}

static void reap(struct reap_node *n)
{
    struct http_listener *l = LIST_ELEM(n, struct http_listener, reap);

    while (!LIST_EMPTY(&l->dead))
        conn_free_now(LIST_ELEM(l->dead.next, struct http_conn, link));
    /* Under the memory actions the free lists give their buffers back
     * as connections end: what a flood held must be able to leave the
     * process (the control thread trims the heap meanwhile), or the
     * actions would never end. */
    if (l->conf->cx != NULL && cx_overload(l->conf->cx) != 0) {
        bufpool_trim(&l->io);
        bufpool_trim(&l->pool);
    }
    http_mirrors_reap(l);
    reap_routes(l);
    if (!acceptor_running(&l->acc) && l->active == 0 && l->on_idle != NULL)
        l->on_idle(&l->pl, l->arg);
}

void http_listener_reap_later(struct http_listener *l)
{
    reaper_defer(l->reaper, &l->reap, reap);
}

/* Ends a connection now; its memory goes on the next loop turn. */
static void hc_close(struct http_conn *hc)
{
    struct http_listener *l = hc->l;

    if (hc->stage == HC_CLOSED)
        return;
    hc->stage = HC_CLOSED;
    conn_want(&hc->conn, 0, 0);
    timer_cancel(&hc->timer);
    STAT_ADD(&http_shard(l)->listener, closed, 1);
    l->active--;
    list_del(&hc->link);
    list_append(&l->dead, &hc->link);
    http_listener_reap_later(l);
}

static void codec_closed(void *owner)
{
    hc_close(owner);
}

/* A request the codec refused before it became a stream: counted and
 * logged like any other answer, with Envoy's DPE flag and the reason. */
static void protocol_error(void *ctx, int status, const char *why)
{
    struct http_conn *hc = ctx;
    struct proxy_counters *sh = http_shard(hc->l);
    char st[8];
    /* The request head timeout (408) is no malformed request: Envoy
     * logs it without a flag, details request_header_timeout. */
    int timeout = status == 408;
    struct log_field f[] = {
        {"listener", hc->l->conf->name, 0},
        {"downstream", hc->peer_ip, 0},
        {"method", "-", 0},
        {"protocol", "HTTP/1.1", 0},
        {"status", st, 1},
        {"flags", timeout ? "-" : "DPE", 0},
        {"reason", why, 0},
        {"details", timeout ? "request_header_timeout" : "-", 0},
    };

    if (!timeout)
        STAT_ADD(&sh->http, rq_protocol_errors, 1);
    else
        STAT_ADD(&sh->http, rq_header_timeout, 1);
    STAT_ADD(&sh->http, rq_total, 1);
    if (http_status_class(status) > 0)
        STAT_ADD(&sh->http, rq_class[http_status_class(status)], 1);
    if (hc->l->conf->access_log) {
        snprintf(st, sizeof(st), "%d", status);
        log_event(LOG_INFO, "http_request", f, (int)(sizeof(f) / sizeof(f[0])));
    }
}

static void start_h1(struct http_conn *hc)
{
    struct http_listener *l = hc->l;
    struct h1_server_hooks hooks = {&pipeline_handler, hc, protocol_error,
                                    codec_closed, hc};

    hc->stage = HC_H1;
    timer_cancel(&hc->timer); /* the codec's from now on */
    hc->h1 = h1_server_new(l->base, &hc->conn, &l->conf->downstream, &hooks,
                           &l->pool, &l->scratch, &hc->timer);
    if (hc->h1 == NULL)
        hc_close(hc);
    else if (hc->drain)
        h1_server_drain(hc->h1);
}

static void start_h2(struct http_conn *hc)
{
    struct http_listener *l = hc->l;
    struct h2_server_hooks hooks = {&pipeline_handler, hc, codec_closed, hc};

    hc->stage = HC_H2;
    hc->h2 = h2_server_new(l->base, &hc->conn, &l->conf->downstream,
                           &l->conf->h2, &hooks, &l->pool, &http_shard(l)->http,
                           &http_shard(l)->h2);
    if (hc->h2 == NULL)
        hc_close(hc);
    else if (hc->drain)
        h2_server_drain(hc->h2);
}

static void tls_failed(struct http_conn *hc)
{
    const char *why = tls_conn_failure(&hc->conn);

    if (hc->hello_rejected) {
        /* Logged by the policy's c:reject(). */
        STAT_ADD(&http_shard(hc->l)->tls, fail_rejected, 1);
        hc_close(hc);
        return;
    }
    tls_count_failure(&http_shard(hc->l)->tls, &hc->conn);
    {
        /* A refused client certificate is worth saying at info: it is
         * a misconfiguration (wrong root, expired, wrong SAN) more often
         * than an attack; other failures are routine noise. */
        const char *verr = tls_conn_verify_error(&hc->conn);
        if (verr != NULL)
            log_info("listener %s: %s: client certificate refused: %s",
                     hc->l->conf->name, hc->peer_ip, verr);
        else
            log_debug("listener %s: %s: TLS handshake failed: %s",
                      hc->l->conf->name, hc->peer_ip, why);
    }
    hc_close(hc);
}

/* Handshake and protocol detection, before a codec owns the connection. */
static int tls_start(struct http_conn *hc);
static void conn_begin(struct http_conn *hc);
static void pp_step(struct http_conn *hc);

static void hc_io(struct conn *c, void *arg)
{
    struct http_conn *hc = arg;

    (void)c;
    if (hc->stage == HC_PROXY) {
        pp_step(hc);
        return;
    }
    if (hc->stage == HC_PEEK) {
        /* PeerAuthentication PERMISSIVE: a TLS record starts with 0x16
         * (handshake); anything else is plaintext HTTP. */
        unsigned char b;
        ssize_t n = recv(hc->conn.fd, &b, 1, MSG_PEEK);

        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            conn_want(&hc->conn, 1, 0);
            return;
        }
        if (n <= 0) {
            hc_close(hc);
            return;
        }
        if (b == 0x16) {
            if (tls_start(hc) < 0)
                return;
        } else if (hc->l->conf->h2c) {
            hc->stage = HC_DETECT;
        } else {
            timer_cancel(&hc->timer);
            start_h1(hc);
            return;
        }
    }
    if (hc->stage == HC_HANDSHAKE) {
        int r = hc->conn.ops->handshake(&hc->conn);
        size_t alen;
        const char *alpn;

        if (r < 0) {
            tls_failed(hc);
            return;
        }
        if (r == 0) {
            conn_want(&hc->conn, 1, 0);
            return;
        }
        STAT_ADD(&http_shard(hc->l)->tls, handshakes, 1);
        timer_cancel(&hc->timer);
        /* BoringSSL sends its session tickets with the server's first
         * flight, so nothing of ours answers the client's Finished: the
         * kernel would delay its ACK, and a client with Nagle on holds its
         * first request for that ACK (~40 ms). Acknowledge at once. */
        if (hc->peer.sa.sa_family != AF_UNIX) {
            int one = 1;
            setsockopt(hc->conn.fd, IPPROTO_TCP, TCP_QUICKACK, &one,
                       sizeof(one));
        }
        alpn = tls_conn_alpn(&hc->conn, &alen);
        if (alen == 2 && memcmp(alpn, "h2", 2) == 0)
            start_h2(hc);
        else
            start_h1(hc);
        return;
    }
    if (hc->stage == HC_DETECT) {
        /* Plaintext: the h2c preface (prior knowledge) or HTTP/1. Peeking
         * leaves the bytes for the codec. */
        char buf[sizeof(h2_preface) - 1];
        size_t got = hc->preface_got;
        ssize_t n = recv(hc->conn.fd, buf, sizeof(buf) - got, MSG_PEEK);

        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            conn_want(&hc->conn, 1, 0);
            return;
        }
        if (n <= 0) {
            hc_close(hc);
            return;
        }
        if (memcmp(buf, h2_preface + got, (size_t)n) != 0) {
            size_t same = 0;
            while (same < (size_t)n && buf[same] == h2_preface[got + same])
                same++;
            /* "PRI * HTTP/2.0..." gone astray, in its first piece or
             * after it (whose bytes we took): neither HTTP/2 nor an
             * HTTP/1 request (RFC 9113 3.4 reserves the PRI method;
             * h2spec http2/3.5/2). Close. */
            if (got > 0 || same >= sizeof("PRI ") - 1) {
                STAT_ADD(&http_shard(hc->l)->http, rq_protocol_errors, 1);
                hc_close(hc);
                return;
            }
            timer_cancel(&hc->timer);
            start_h1(hc);
            return;
        }
        if (got + (size_t)n < sizeof(buf)) {
            /* A preface in pieces: take this one off the socket, which
             * would otherwise stay readable and wake the loop on every
             * turn (level-triggered) until the rest came. What was taken
             * is known: the preface's first bytes. */
            if (recv(hc->conn.fd, buf, (size_t)n, 0) != n) {
                hc_close(hc);
                return;
            }
            hc->preface_got += (unsigned)n;
            conn_want(&hc->conn, 1, 0);
            return;
        }
        timer_cancel(&hc->timer);
        start_h2(hc);
        if (got > 0 && hc->h2 != NULL &&
            h2_server_received(hc->h2, (const uint8_t *)h2_preface, got) < 0)
            hc_close(hc);
    }
}

static void hc_timeout(void *arg)
{
    struct http_conn *hc = arg;

    if (hc->stage == HC_HANDSHAKE) {
        /* The client went quiet: a timeout, not an "eof". */
        STAT_ADD(&http_shard(hc->l)->tls, fail_timeout, 1);
        hc_close(hc);
    } else if (hc->stage == HC_DETECT || hc->stage == HC_PEEK) {
        hc_close(hc);
    } else if (hc->stage == HC_PROXY) {
        STAT_ADD(&http_shard(hc->l)->listener, proxy_proto_error, 1);
        log_debug("listener %s: %s: no PROXY header in time", hc->l->conf->name,
                  hc->peer_ip);
        hc_close(hc);
    }
}

static void peer_ip(struct http_conn *hc)
{
    const struct sockaddr *sa = (const struct sockaddr *)&hc->peer;

    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr,
                  hc->peer_ip, sizeof(hc->peer_ip));
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr,
                  hc->peer_ip, sizeof(hc->peer_ip));
    else
        snprintf(hc->peer_ip, sizeof(hc->peer_ip), "unix");
}

/* TLS over hc with the listener's newest context; -1 when hc is gone. */
static int tls_start(struct http_conn *hc)
{
    struct http_listener *l = hc->l;
    /* A certificate reload shows as a new generation. */
    SSL_CTX *fresh = tls_holder_get(l->conf->tls, &l->tls_gen);

    if (fresh != NULL) {
        SSL_CTX_free(l->ssl_ctx);
        l->ssl_ctx = fresh;
    }
    if (tls_conn_accept(&hc->conn, l->ssl_ctx) < 0) {
        hc_close(hc);
        return -1;
    }
    http_lua_tls_start(hc);
    hc->stage = HC_HANDSHAKE;
    return 0;
}

/*
 * pp_done() makes the source a PROXY header named the connection's peer
 * (the client address everything after sees), keeping the socket's own
 * peer as the direct one. A LOCAL header (a balancer's health check)
 * changes nothing.
 */
static int pp_done(struct http_conn *hc, const struct pp_result *r)
{
    if (r->local)
        return 0;
    hc->direct = malloc(sizeof(*hc->direct));
    if (hc->direct == NULL)
        return -1;
    memcpy(hc->direct, &hc->peer, sizeof(*hc->direct));
    memset(&hc->peer, 0, sizeof(hc->peer));
    hc->peerlen = r->addrlen <= sizeof(hc->peer) ? r->addrlen
                                                 : (socklen_t)sizeof(hc->peer);
    memcpy(&hc->peer, &r->src, hc->peerlen);
    peer_ip(hc);
    return 0;
}

/* HC_PROXY: the header, in as many pieces as it comes. */
static void pp_step(struct http_conn *hc)
{
    struct pp_result r;
    const char *why = NULL;
    int v = pp_read(hc->pp, hc->conn.fd, &r, &why);

    if (v == 0) {
        conn_want(&hc->conn, 1, 0);
        return;
    }
    free(hc->pp);
    hc->pp = NULL;
    if (v < 0 || pp_done(hc, &r) < 0) {
        STAT_ADD(&http_shard(hc->l)->listener, proxy_proto_error, 1);
        log_debug("listener %s: %s: %s", hc->l->conf->name, hc->peer_ip,
                  v < 0 ? why : "out of memory");
        hc_close(hc);
        return;
    }
    timer_cancel(&hc->timer);
    conn_begin(hc);
}

static void conn_start(struct http_listener *l, int fd,
                       const struct sockaddr_storage *peer, socklen_t plen,
                       const struct sockaddr_storage *direct, int adopted,
                       struct cx_limit *cx)
{

    struct http_conn *hc = calloc(1, sizeof(*hc));
    int one = 1;

    if (hc == NULL) {
        close(fd);
        if (cx != NULL)
            cx_release(cx);
        return;
    }
    hc->l = l;
    hc->peerlen = plen <= sizeof(hc->peer) ? plen : sizeof(hc->peer);
    memcpy(&hc->peer, peer, hc->peerlen);
    peer_ip(hc);
    /* Adopted from a TCP/TLS listener that read the PROXY header: the
     * client is known, and so is the socket's own peer. */
    if (direct != NULL) {
        hc->direct = malloc(sizeof(*hc->direct));
        if (hc->direct == NULL) {
            close(fd);
            if (cx != NULL)
                cx_release(cx);
            free(hc);
            return;
        }
        memset(hc->direct, 0, sizeof(*hc->direct));
        memcpy(hc->direct, direct,
               direct->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                             : sizeof(struct sockaddr_in));
    }
    if (peer->ss_family != AF_UNIX)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    conn_init(&hc->conn, l->base, fd, hc_io, hc);
    hc->conn.cx = cx;
    timer_init(&hc->timer, l->base, hc_timeout, hc);
    list_append(&l->conns, &hc->link);
    l->active++;
    /* An adopted connection was counted by the listener that took it. */
    if (!adopted)
        STAT_ADD(&http_shard(l)->listener, accepted, 1);
    /* Handed over after the listener stopped, or accepted in the drain
     * window: served once, then closed. */
    hc->drain = l->stopped || l->draining;
    /* An adopted connection's header was the TCP/TLS listener's to read. */
    if (l->conf->proxy_protocol > 0 && !adopted) {
        /* The balancer's PROXY header comes before anything else: read it
         * (never a byte past it) before TLS or HTTP sees the socket. */
        hc->pp = malloc(sizeof(*hc->pp) + l->conf->proxy_protocol);
        if (hc->pp == NULL) {
            hc_close(hc);
            return;
        }
        hc->pp->buf = (uint8_t *)(hc->pp + 1);
        hc->pp->got = 0;
        hc->pp->cap = l->conf->proxy_protocol;
        hc->stage = HC_PROXY;
        timer_arm(&hc->timer, HANDSHAKE_TIMEOUT_MS);
        conn_want(&hc->conn, 1, 0);
        return;
    }
    conn_begin(hc);
}

/* The connection's protocol, once its client is known: TLS, a peek to
 * tell TLS from plaintext (PERMISSIVE), the h2c preface, or HTTP/1. */
static void conn_begin(struct http_conn *hc)
{
    struct http_listener *l = hc->l;

    if (l->conf->tls != NULL && l->conf->tls_permissive) {
        hc->stage = HC_PEEK;
    } else if (l->conf->tls != NULL) {
        if (tls_start(hc) < 0)
            return;
    } else if (l->conf->h2c) {
        hc->stage = HC_DETECT;
    } else {
        start_h1(hc);
        return;
    }
    timer_arm(&hc->timer, HANDSHAKE_TIMEOUT_MS);
    conn_want(&hc->conn, 1, 0);
}

static void on_conn(void *arg, int fd, const struct sockaddr_storage *peer,
                    socklen_t len)
{
    struct http_listener *l = arg;

    conn_start(l, fd, peer, len, NULL, 0, l->conf->cx);
}

void http_listener_adopt(struct plistener *pl, int fd,
                         const struct sockaddr_storage *peer, socklen_t len,
                         const struct sockaddr_storage *direct,
                         struct cx_limit *cx)
{
    conn_start((struct http_listener *)(void *)pl, fd, peer, len, direct, 1,
               cx);
}

size_t http_listener_active(const struct plistener *pl)
{
    return ((const struct http_listener *)(const void *)pl)->active;
}

static void listener_free(struct http_listener *l)
{
    if (l == NULL)
        return;
    acceptor_stop(&l->acc);
    while (!LIST_EMPTY(&l->conns)) {
        struct http_conn *hc = LIST_ELEM(l->conns.next, struct http_conn, link);
        hc_close(hc);
    }
    while (!LIST_EMPTY(&l->dead))
        conn_free_now(LIST_ELEM(l->dead.next, struct http_conn, link));
    /* Mirrored copies pin views and use their pools: they go first. */
    http_mirrors_free(l);
    wroutes_free(l->routes);
    while (!LIST_EMPTY(&l->old)) {
        struct wroutes *w = LIST_ELEM(l->old.next, struct wroutes, link);
        list_del(&w->link);
        wroutes_free(w);
    }
    reap_routes(l);
    reaper_cancel(&l->reap);
    /* After every pool: their tunnels are closed. */
    hbone_pool_free(l->hbone);
    lsink_buf_dispose(&l->alog);
    spanq_buf_dispose(&l->spans);
    SSL_CTX_free(l->ssl_ctx);
    bufpool_dispose(&l->pool);
    bufpool_dispose(&l->io);
    free(l->scratch.hdrs);
    list_del(&l->pl.link);
    http_listener_conf_unref(l->conf);
    free(l);
}

static struct plistener *
listener_start(struct event_base *base, struct reaper *reaper, int worker,
               int fd, void *arg, plistener_idle_fn on_idle, void *idle_arg)
{
    struct http_listener_conf *conf = arg;
    struct http_listener *l = calloc(1, sizeof(*l));
    size_t cap = conf->downstream.lim.max_headers;

    if (l == NULL)
        return NULL;
    l->pl.ops = &http_listener_ops;
    l->pl.conf = conf;
    l->pl.fd = fd;
    LIST_INIT(&l->pl.link);
    l->conf = http_listener_conf_ref(conf);
    l->base = base;
    l->reaper = reaper;
    l->worker = worker;
    l->fd = fd;
    l->on_idle = on_idle;
    l->arg = idle_arg;
    if (conf->alog_sink != NULL)
        lsink_buf_init(&l->alog, conf->alog_sink, base);
    if (conf->spans != NULL)
        spanq_buf_init(&l->spans, conf->spans, base);
    LIST_INIT(&l->conns);
    LIST_INIT(&l->dead);
    LIST_INIT(&l->old);
    LIST_INIT(&l->dead_routes);
    LIST_INIT(&l->mirrors);
    LIST_INIT(&l->mirrors_dead);
    bufpool_init(&l->pool, conf->downstream.body_cap, BODY_POOL_KEEP);
    if (conf->h1c.lim.max_headers > cap)
        cap = conf->h1c.lim.max_headers;
    bufpool_init(&l->io,
                 conf->downstream.lim.max_head > conf->h1c.lim.max_head
                     ? conf->downstream.lim.max_head
                     : conf->h1c.lim.max_head,
                 IO_POOL_KEEP);
    if (conf->cx != NULL) {
        /* Body buffers are refused under the last memory action (the
         * stream that wanted one fails); read buffers are only counted,
         * so that a connection can still be read and answered 503. */
        l->pool.acct = &cx_root(conf->cx)->mem;
        l->pool.refusable = 1;
        l->io.acct = &cx_root(conf->cx)->mem;
    }
    l->scratch.io = &l->io;
    l->scratch.cap = cap;
    l->scratch.bufs_taken = &http_shard(l)->http.bufs_taken;
    l->scratch.bufs_released = &http_shard(l)->http.bufs_released;
    l->scratch.hdrs = calloc(cap, sizeof(*l->scratch.hdrs));
    if (l->scratch.hdrs == NULL)
        goto fail;
    {
        unsigned gen;
        struct http_routes *r = conf_current(conf, &gen);
        l->routes = wroutes_new(l, r, gen, NULL);
        if (l->routes == NULL)
            goto fail;
    }
    RAND_bytes((uint8_t *)&l->rng, sizeof(l->rng));
    l->rng |= 1;
    if (conf->tls != NULL) {
        l->ssl_ctx = tls_holder_get(conf->tls, &l->tls_gen);
        if (l->ssl_ctx == NULL)
            goto fail;
    }
    l->adopting = fd < 0;
    if (!l->adopting &&
        acceptor_start(&l->acc, base, fd, conf->name, on_conn, l) < 0)
        goto fail;
    if (!l->adopting && conf->cx != NULL)
        acceptor_limit(&l->acc, conf->cx, &http_shard(l)->listener);
    return &l->pl;
fail:
    listener_free(l);
    return NULL;
}

/* Every open connection goes after its current request: HTTP/1 answers
 * with Connection: close, HTTP/2 sends GOAWAY; one still in its handshake
 * is drained once served. */
static void drain_conns(struct http_listener *l)
{
    for (struct list *it = l->conns.next; it != &l->conns;) {
        struct http_conn *hc = LIST_ELEM(it, struct http_conn, link);
        it = it->next;
        if (hc->h1 != NULL)
            h1_server_drain(hc->h1);
        else if (hc->h2 != NULL)
            h2_server_drain(hc->h2);
        else
            hc->drain = 1;
    }
}

static void listener_drain_conns(struct plistener *pl)
{
    struct http_listener *l = (struct http_listener *)(void *)pl;

    l->draining = 1;
    drain_conns(l);
}

static void listener_stop(struct plistener *pl)
{
    struct http_listener *l = (struct http_listener *)(void *)pl;

    acceptor_stop(&l->acc);
    l->stopped = 1;
    /* Finish what is in flight; idle keep-alive connections close now. */
    drain_conns(l);
    http_listener_reap_later(l);
}

static void listener_free_pl(struct plistener *pl)
{
    listener_free((struct http_listener *)(void *)pl);
}

static void *conf_ref_pl(void *conf)
{
    return http_listener_conf_ref(conf);
}

static void conf_unref_pl(void *conf)
{
    http_listener_conf_unref(conf);
}

const struct plistener_ops http_listener_ops = {
    .kind = PLISTENER_HTTP,
    .name = "http",
    .conf_ref = conf_ref_pl,
    .conf_unref = conf_unref_pl,
    .start = listener_start,
    .stop_accepting = listener_stop,
    .drain_connections = listener_drain_conns,
    .free = listener_free_pl,
};
