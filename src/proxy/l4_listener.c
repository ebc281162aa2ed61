/*
 * The TCP/TLS Gateway listener of one worker. A connection goes through
 * up to three stages before it becomes a relayed session:
 *
 *   inspect    peek (MSG_PEEK) at the first bytes until a whole ClientHello
 *              is there, as Envoy's tls_inspector does, so the bytes stay
 *              in the socket for the upstream (passthrough) or for our own
 *              TLS server (termination); bounded in size and time;
 *   handshake  TLS terminated here, with the chosen server's certificate
 *              and client-certificate checks;
 *   route      a tls rule by SNI, or the first tcp rule whose subnets
 *              admit the connection; a weighted destination; the relay.
 *
 * AUTO_PASSTHROUGH (Istio's east-west gateway) needs no rule: the SNI
 * outbound_.<port>_.<subset>_.<host> names a service's cluster, the ALPN
 * must be one of Istio's, and the stream is relayed untouched to an
 * endpoint the cluster's balancer picks.
 *
 * On a port shared with HTTPS servers, an SNI of theirs hands the
 * connection, still untouched, to the worker's HTTP proxy of those servers
 * (http_listener_adopt), which runs its handshake and serves it.
 *
 * A connection no rule takes is closed and counted (Envoy's NR flag).
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/series.h"
#include "core/ascii.h"
#include "core/clock.h"
#include "core/host.h"
#include "core/log.h"
#include "core/rng.h"
#include "event/reap.h"
#include "http/access_format.h"
#include "event/timer.h"
#include "net/conn.h"
#include "net/overload.h"
#include "net/proxy_proto.h"
#include "policy/authz.h"
#include "proxy/http_listener.h"
#include "proxy/l4_listener.h"
#include "proxy/stats.h"
#include "tls/clienthello.h"
#include "tls/istio_sni.h"
#include "tls/tls.h"
#include "upstream/balancer.h"
#include "upstream/cluster.h"

#define REC_OVERHEAD 5 /* a record header per 16 KiB fragment */

/* ---- configuration ------------------------------------------------------ */

struct l4_listener_conf *l4_listener_conf_new(const char *name,
                                              struct stats_block *stats)
{
    struct l4_listener_conf *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->refs = 1;
    host_index_init(&c->sni_index);
    c->name = strdup(name);
    if (c->name == NULL) {
        free(c);
        return NULL;
    }
    c->stats = stats_block_ref(stats);
    /* Envoy's listener filter timeout and Istio's handshake timeout. */
    c->inspect_timeout_ms = 15000;
    c->handshake_timeout_ms = 10000;
    c->max_client_hello = 64 * 1024;
    c->relay.name = c->name;
    c->relay.stats = c->stats;
    c->relay.connect_timeout_ms = 10000;
    c->relay.connect_attempts = 1;
    c->relay.idle_timeout_ms = 3600 * 1000;
    c->relay.buffer_size = 64 * 1024;
    c->relay.access_log = 1;
    c->hbone.max_tunnels = 100;
    c->hbone.tunnel_buffer = 256 * 1024;
    c->hbone.connect_timeout_ms = 10000;
    c->hbone.idle_timeout_ms = 3600 * 1000;
    c->relay.hbone_window = c->hbone.tunnel_buffer;
    c->relay.hbone_idle_ms = c->hbone.idle_timeout_ms;
    return c;
}

struct l4_listener_conf *l4_listener_conf_ref(struct l4_listener_conf *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

static void rules_dispose(struct l4_rules *r)
{
    for (size_t i = 0; i < r->n; i++) {
        struct l4_rule *x = &r->v[i];
        for (size_t b = 0; b < x->nblocks; b++) {
            free(x->blocks[b].dst);
            free(x->blocks[b].src);
        }
        free(x->blocks);
        free(x->dests);
        free(x->route);
    }
    free(r->v);
    memset(r, 0, sizeof(*r));
}

void l4_listener_conf_unref(struct l4_listener_conf *c)
{
    if (c == NULL || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    rules_dispose(&c->tcp);
    rules_dispose(&c->passthrough);
    for (size_t i = 0; i < c->nsni; i++)
        free(c->sni[i].name);
    free(c->sni);
    host_index_dispose(&c->sni_index);
    for (size_t i = 0; i < c->nservers; i++) {
        tls_holder_unref(c->servers[i].tls);
        rules_dispose(&c->servers[i].rules);
    }
    free(c->servers);
    for (size_t i = 0; i < c->nautos; i++) {
        free(c->autos[i].host);
        free(c->autos[i].subset);
    }
    free(c->autos);
    for (size_t i = 0; i < c->nclusters; i++)
        cluster_unref(c->clusters[i]);
    free(c->clusters);
    stats_block_unref(c->stats);
    afmt_free(c->relay.alog_fmt);
    free(c->hbone_baggage);
    series_labels_unref(c->metrics_src);
    cx_limit_unref(c->cx);
    free(c->name);
    authz_unref(c->authz);
    http_listener_conf_unref(c->http);
    free(c);
}

int l4_listener_tls_check(struct l4_listener_conf *c, char **err)
{
    int changed = 0;

    *err = NULL;
    for (size_t i = 0; i < c->nservers; i++) {
        int rc = tls_holder_check(c->servers[i].tls, err);
        if (rc < 0)
            return -1;
        changed |= rc;
    }
    if (c->http != NULL && c->http->tls != NULL) {
        int rc = tls_holder_check(c->http->tls, err);
        if (rc < 0)
            return -1;
        changed |= rc;
    }
    return changed;
}

const struct l4_sni *l4_sni_lookup(const struct l4_listener_conf *c,
                                   const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;
    /* The exact name, then the longest "*.suffix" (a name with at least
     * one more label), then "*" (host_index_find's rule); names are
     * unique in sni. Without SNI only "*" applies. */
    long i = host_index_find(&c->sni_index, n ? name : "", n);

    return i >= 0 ? &c->sni[i] : NULL;
}

int l4_sni_add(struct l4_listener_conf *c, char *name, int target, size_t index)
{
    int rc;

    if (c->nsni == c->asni) {
        size_t a = c->asni ? c->asni * 2 : 8;
        struct l4_sni *nv = realloc(c->sni, a * sizeof(*nv));
        if (nv == NULL) {
            free(name);
            return -1;
        }
        c->sni = nv;
        c->asni = a;
    }
    rc = host_index_add(&c->sni_index, name, c->nsni);
    if (rc != 0) {
        free(name);
        return rc < 0 ? -1 : 0; /* 1: the name is taken */
    }
    c->sni[c->nsni].name = name;
    c->sni[c->nsni].target = target;
    c->sni[c->nsni].index = index;
    c->nsni++;
    return 1;
}

/* Orders autos by host, port, subset. */
static int auto_cmp(const void *x, const void *y)
{
    const struct l4_auto *a = x, *b = y;
    int d = strcmp(a->host, b->host);

    if (d != 0)
        return d;
    if (a->port != b->port)
        return a->port < b->port ? -1 : 1;
    return strcmp(a->subset, b->subset);
}

/* slice_cmp() orders a slice against a NUL-terminated string as strcmp()
 * orders two strings. */
static int slice_cmp(struct slice a, const char *s)
{
    size_t n = strlen(s);
    int d = memcmp(a.p != NULL ? a.p : "", s, a.n < n ? a.n : n);

    if (d != 0)
        return d;
    return a.n < n ? -1 : a.n > n ? 1 : 0;
}

void l4_auto_sort(struct l4_listener_conf *c)
{
    size_t w = 0;

    if (c->nautos == 0)
        return;
    /* Repeats (two servers exposing one service) name the same cluster,
     * the table builds one per triple, so which of them stays does not
     * matter. */
    qsort(c->autos, c->nautos, sizeof(*c->autos), auto_cmp);
    for (size_t i = 0; i < c->nautos; i++) {
        if (w > 0 && auto_cmp(&c->autos[w - 1], &c->autos[i]) == 0) {
            free(c->autos[i].host);
            free(c->autos[i].subset);
            continue;
        }
        c->autos[w++] = c->autos[i];
    }
    c->nautos = w;
}

int l4_auto_lookup(const struct l4_listener_conf *c,
                   const struct istio_sni *sni, const struct l4_auto **out)
{
    size_t lo = 0, hi = c->nautos;
    int best = L4_AUTO_NO_HOST;

    *out = NULL;
    /* The first entry of the host, then a walk over its ports and
     * subsets (a few per host) to say how near the SNI came. */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (slice_cmp(sni->host, c->autos[mid].host) > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo;
         i < c->nautos && slice_cmp(sni->host, c->autos[i].host) == 0; i++) {
        const struct l4_auto *a = &c->autos[i];
        if (a->port != sni->port)
            continue;
        best = L4_AUTO_NO_SUBSET;
        if (slice_cmp(sni->subset, a->subset) == 0) {
            *out = a;
            return L4_AUTO_FOUND;
        }
    }
    if (best == L4_AUTO_NO_HOST && lo < c->nautos &&
        slice_cmp(sni->host, c->autos[lo].host) == 0)
        best = L4_AUTO_NO_PORT;
    return best;
}

static int subnet_has(const struct l4_subnet *s, const struct sockaddr *sa)
{
    const uint8_t *a;
    unsigned full, rest;

    if (sa == NULL)
        return 0;
    if (sa->sa_family == AF_INET && s->family == AF_INET)
        a = (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)
                ->sin_addr;
    else if (sa->sa_family == AF_INET6 && s->family == AF_INET6)
        a = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
    else
        return 0;
    full = s->prefix / 8;
    rest = s->prefix % 8;
    if (memcmp(a, s->addr, full) != 0)
        return 0;
    return rest == 0 ||
           ((a[full] ^ s->addr[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

static int any_subnet(const struct l4_subnet *v, size_t n,
                      const struct sockaddr *sa)
{
    if (n == 0)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (subnet_has(&v[i], sa))
            return 1;
    return 0;
}

const struct l4_rule *l4_rule_match(const struct l4_rules *rules,
                                    const struct sockaddr *local,
                                    const struct sockaddr *peer)
{
    for (size_t i = 0; i < rules->n; i++) {
        const struct l4_rule *r = &rules->v[i];
        if (r->nblocks == 0)
            return r;
        for (size_t b = 0; b < r->nblocks; b++)
            if (any_subnet(r->blocks[b].dst, r->blocks[b].ndst, local) &&
                any_subnet(r->blocks[b].src, r->blocks[b].nsrc, peer))
                return r;
    }
    return NULL;
}

/* ---- connections before the relay ---------------------------------------- */

enum stage { ST_INSPECT, ST_HANDSHAKE, ST_DONE, ST_PROXY };

struct l4_conn {
    struct list link;
    struct l4_listener *p;
    struct conn c;
    struct event peek_ev; /* edge-triggered: fires on new bytes only */
    struct timer timer;
    int stage;
    int server; /* terminating: index into conf->servers */
    uint64_t start_ms;
    /* The client: the socket's peer, or the source of a PROXY header
     * (then direct is the socket's peer; directlen 0: the same). */
    struct sockaddr_storage peer;
    socklen_t peerlen;
    struct sockaddr_storage direct;
    socklen_t directlen;
    struct pp_reader *pp; /* ST_PROXY only (malloc'd with its buffer) */
    char sni[256];
};

static struct proxy_counters *shard(const struct l4_listener *p)
{
    return proxy_counters(p->conf->stats, p->worker);
}

static uint64_t next_random(struct l4_listener *p)
{
    /* Per worker, seeded from the system's generator. */
    return rng_next(&p->rng);
}

/* A connection that ends before it is relayed gets an access log line of
 * its own, in the relay's format. */
static void log_refused(const struct l4_conn *lc, const char *flags,
                        const char *end)
{
    char peer[ADDR_STRLEN] = "-", dur[24];
    struct log_field f[] = {
        {"listener", lc->p->conf->name, 0},
        {"downstream", peer, 0},
        {"upstream", "-", 0},
        {"sni", lc->sni[0] ? lc->sni : NULL, 0},
        {"bytes_in", "0", 1},
        {"bytes_out", "0", 1},
        {"duration_ms", dur, 1},
        {"end", end, 0},
        {"flags", flags, 0},
    };

    if (!lc->p->conf->relay.access_log)
        return;
    if (lc->peerlen > 0)
        addr_format_sa((const struct sockaddr *)&lc->peer, lc->peerlen, peer,
                       sizeof(peer));
    snprintf(dur, sizeof(dur), "%" PRIu64, clock_ms() - lc->start_ms);
    log_event(LOG_INFO, "tcp_session", f, (int)(sizeof(f) / sizeof(f[0])));
}

static void reap(struct reap_node *n);

/* lc_end() takes lc out of the pending list; its memory goes on the next
 * loop turn. closing: the connection is closed (else it moved on). */
static void lc_end(struct l4_conn *lc, int closing)
{
    struct l4_listener *p = lc->p;

    if (lc->stage == ST_DONE)
        return;
    lc->stage = ST_DONE;
    event_del(&lc->peek_ev);
    timer_cancel(&lc->timer);
    if (closing) {
        conn_close(&lc->c);
        STAT_ADD(&shard(p)->listener, closed, 1);
    }
    p->npending--;
    list_del(&lc->link);
    list_append(&p->dead, &lc->link);
    reaper_defer(p->reaper, &p->reap, reap);
}

/* Every connection closed with NR (no route: no rule, or no ClientHello
 * to route by) is counted as Envoy's no_filter_chain_match. */
static void lc_refuse(struct l4_conn *lc, const char *flags, const char *end)
{
    if (strcmp(flags, "NR") == 0)
        STAT_ADD(&shard(lc->p)->relay, no_route, 1);
    log_refused(lc, flags, end);
    lc_end(lc, 1);
}

/* Relays lc by rule: a weighted destination, then its cluster's next
 * endpoint (round robin per worker). */
/*
 * AuthorizationPolicy for a TCP or TLS connection, when it opens (Istio
 * authorises tcp and tls routes per connection): the peer, its verified
 * SPIFFE ID, the port and SNI; HTTP fields are treated as Istio treats
 * them for TCP. 0 when it may go on; else it is closed and logged.
 */
static int lc_authorize(struct l4_conn *lc, const char *peer_uri)
{
    const struct l4_listener_conf *c = lc->p->conf;
    struct authz_request r;
    struct authz_decision d;
    char end[600];

    if (c->authz == NULL)
        return 0;
    memset(&r, 0, sizeof(r));
    r.tcp = 1;
    if (peer_uri != NULL && strncmp(peer_uri, "spiffe://", 9) == 0)
        r.principal = slice_of(peer_uri + 9);
    /* ipBlocks: the socket's peer; remoteIpBlocks: the client a PROXY
     * header named (Envoy's direct_remote_ip and remote_ip). */
    if (lc->directlen > 0) {
        r.peer = (const struct sockaddr *)&lc->direct;
        r.remote = (const struct sockaddr *)&lc->peer;
    } else {
        r.peer = lc->peerlen > 0 ? (const struct sockaddr *)&lc->peer : NULL;
    }
    r.port = c->port;
    r.sni = slice_of(lc->sni);
    authz_check(c->authz, &r, &d);
    if (d.allowed)
        return 0;
    STAT_ADD(&shard(lc->p)->http, rq_rbac_denied, 1);
    snprintf(end, sizeof(end), "RBAC_ACCESS_DENIED[%s]",
             d.policy ? d.policy : "none");
    log_refused(lc, "-", end);
    lc_end(lc, 1);
    return -1;
}

static const uint8_t alpn_istio[] = {5, 'i', 's', 't', 'i', 'o'};

static void lc_relay(struct l4_conn *lc, const struct l4_rule *rule,
                     const char *peer_uri)
{
    struct l4_listener *p = lc->p;
    const struct l4_listener_conf *c = p->conf;
    struct l4_relay_meta meta;
    const struct cluster *cl = NULL;
    size_t first = 0;

    if (lc_authorize(lc, peer_uri) < 0)
        return;

    if (rule->total > 0) {
        uint64_t x = next_random(p) % rule->total;
        for (size_t i = 0; i < rule->ndests; i++) {
            if (x < rule->dests[i].weight) {
                cl = c->clusters[rule->dests[i].cluster];
                first = p->rr[rule->dests[i].cluster]++;
                break;
            }
            x -= rule->dests[i].weight;
        }
    }
    /* BlackHoleCluster (outboundTrafficPolicy REGISTRY_ONLY): the relay
     * closes it, as a cluster without endpoints (UH). */
    if (cl != NULL && cl->origin == CLUSTER_BLACKHOLE)
        STAT_ADD(&shard(p)->relay, registry_only, 1);
    memset(&meta, 0, sizeof(meta));
    meta.sni = lc->sni;
    meta.route = rule->route;
    /* A bootstrap tcp listener's upstreams have no name of their own. */
    meta.cluster = cl != NULL && !cl->implicit ? cl->name : NULL;
    meta.peer_uri_san = peer_uri;
    meta.tls_terminated = lc->c.tls != NULL;
    if (cl != NULL) {
        /* DestinationRule tls: the relay originates it with the cluster's
         * context, as the HTTP routes do, on every server mode. Over
         * PASSTHROUGH the client's TLS then travels inside it untouched,
         * as Istio's passthrough-and-encrypt does. A TCP stream offers no
         * HTTP ALPN; ISTIO_MUTUAL offers Istio's "istio". */
        meta.up_tls = cl->tls;
        meta.up_sni = cl->sni;
        meta.up_tls_error = cl->tls_error;
        if (cl->tls_mesh) {
            meta.up_alpn = alpn_istio;
            meta.up_alpn_len = sizeof(alpn_istio);
        }
        meta.cluster_stats = &cl->w[p->worker];
        meta.metrics_dst = cl->metrics;
        /* Endpoints in Istio's ambient mesh: HBONE tunnels. */
        meta.hbone = cl->hbone != NULL ? cl : NULL;
    }
    if (lc->directlen > 0) {
        meta.direct = &lc->direct;
        meta.directlen = lc->directlen;
    }
    lc_end(lc, 0);
    l4_relay_start(&p->relay, &lc->c, &lc->peer, lc->peerlen,
                   cl != NULL ? cl->endpoints : NULL,
                   cl != NULL ? cl->nendpoints : 0, first, &meta, lc->start_ms);
}

/* The tcp rules of rules for a connection, by its addresses. */
static void route_tcp(struct l4_conn *lc, const struct l4_rules *rules,
                      const char *peer_uri)
{
    struct sockaddr_storage local;
    socklen_t len = sizeof(local);
    const struct l4_rule *r;

    /* The address connected to only matters to destinationSubnets. */
    if (!rules->by_local ||
        getsockname(lc->c.fd, (struct sockaddr *)&local, &len) < 0)
        len = 0;
    r = l4_rule_match(rules, len > 0 ? (struct sockaddr *)&local : NULL,
                      lc->peerlen > 0 ? (struct sockaddr *)&lc->peer : NULL);
    if (r == NULL) {
        lc_refuse(lc, "NR", "no_route");
        return;
    }
    lc_relay(lc, r, peer_uri);
}

static void on_handshake_io(struct conn *c, void *arg)
{
    struct l4_conn *lc = arg;
    struct l4_listener *p = lc->p;
    int rc = c->ops->handshake(c);
    char uri[512];

    if (rc == 0) {
        conn_want(c, 1, 0);
        return;
    }
    if (rc < 0) {
        const char *why = tls_conn_failure(c);
        const char *verr = tls_conn_verify_error(c);
        char end[160];
        tls_count_failure(&shard(p)->tls, c);
        /* A refused client certificate says why: wrong root, expired,
         * not the identity asked for. */
        if (verr != NULL)
            snprintf(end, sizeof(end), "client_certificate_refused:%s", verr);
        else
            snprintf(end, sizeof(end), "tls_handshake_%s", why);
        lc_refuse(lc, "-", end);
        return;
    }
    STAT_ADD(&shard(p)->tls, handshakes, 1);
    tls_conn_peer_uri_san(c, uri, sizeof(uri));
    if (p->conf->is_hbone) {
        size_t alen = 0;
        const char *alpn = tls_conn_alpn(c, &alen);
        /* HBONE is HTTP/2: ALPN h2, or none (prior knowledge); a client
         * asking for anything else got no ALPN back and is refused. */
        if (alen != 0 && !(alen == 2 && memcmp(alpn, "h2", 2) == 0)) {
            lc_refuse(lc, "-", "hbone_alpn_not_h2");
            return;
        }
        lc_end(lc, 0);
        hbone_accept(&p->hb, &lc->c, &lc->peer, lc->peerlen, uri, lc->start_ms);
        return;
    }
    route_tcp(lc, &p->conf->servers[lc->server].rules, uri);
}

/* Terminates TLS with server's certificate (the SNI chose it). */
static void start_handshake(struct l4_conn *lc, size_t server)
{
    struct l4_listener *p = lc->p;
    struct ssl_ctx_st *fresh =
        tls_holder_get(p->conf->servers[server].tls, &p->gen[server]);

    /* A newer context (first use, or reloaded files) replaces ours. */
    if (fresh != NULL) {
        SSL_CTX_free(p->ctx[server]);
        p->ctx[server] = fresh;
    }
    lc->server = (int)server;
    if (tls_conn_accept(&lc->c, p->ctx[server]) < 0) {
        lc_refuse(lc, "-", "out_of_memory");
        return;
    }
    lc->stage = ST_HANDSHAKE;
    event_del(&lc->peek_ev);
    timer_cancel(&lc->timer);
    timer_arm(&lc->timer, p->conf->handshake_timeout_ms);
    lc->c.on_io = on_handshake_io;
    lc->c.arg = lc;
    on_handshake_io(&lc->c, lc);
}

/*
 * A worker's HTTP proxy of a shared port's HTTPS servers. It outlives the
 * L4 listener that started it when the listener is rebuilt (new tls or
 * tcp rules, new routes) with the same HTTP part: the new listener
 * inherits it, so HTTPS connections and their keep-alives go on and new
 * routes reach them by publication, as on an HTTP-only port. Every L4
 * listener holding it keeps a reference (an older one may still hand it a
 * connection it was inspecting); the newest, the owner, decides when it
 * stops and waits for it to be idle. Worker-local: plain counts.
 */
struct l4_http {
    struct plistener *pl;
    size_t refs;
    struct l4_listener *owner; /* NULL once the owner is gone */
    struct list holders;       /* every l4_listener holding a reference */
};

static void check_idle(struct l4_listener *p);

/* The HTTP part reports idleness on its reaper's turn: its holders may
 * be idle as a whole (the owner, or older listeners once the owner is
 * gone). check_idle() only reports to the worker, which frees on a later
 * turn, so the list stays as it is while we walk it. */
static void on_http_idle(struct plistener *l, void *arg)
{
    struct l4_http *h = arg;

    (void)l;
    for (struct list *it = h->holders.next; it != &h->holders; it = it->next)
        check_idle(LIST_ELEM(it, struct l4_listener, http_link));
}

static struct l4_http *l4_http_new(struct l4_listener *p)
{
    struct l4_http *h = calloc(1, sizeof(*h));

    if (h == NULL)
        return NULL;
    h->refs = 1;
    h->owner = p;
    LIST_INIT(&h->holders);
    h->pl = http_listener_ops.start(p->base, p->reaper, p->worker, -1,
                                    p->conf->http, on_http_idle, h);
    if (h->pl == NULL) {
        free(h);
        return NULL;
    }
    list_append(&h->holders, &p->http_link);
    return h;
}

/* p lets go of its HTTP part (closing its connections if p was the last
 * to hold it). */
static void l4_http_release(struct l4_listener *p)
{
    struct l4_http *h = p->http;

    if (h == NULL)
        return;
    p->http = NULL;
    list_del(&p->http_link);
    if (h->owner == p)
        h->owner = NULL;
    if (--h->refs == 0) {
        h->pl->ops->free(h->pl);
        free(h);
    }
}

/* The HTTPS servers' HTTP proxy serves lc from here on: nothing was read
 * from the socket, so it starts with the client's ClientHello. */
static void to_http(struct l4_conn *lc)
{
    struct l4_listener *p = lc->p;
    struct sockaddr_storage peer = lc->peer, direct = lc->direct;
    socklen_t len = lc->peerlen, lc_direct = lc->directlen;
    int fd = lc->c.fd;

    struct cx_limit *cx = lc->c.cx;

    /* lc's conn never had events added (the peek has its own), so the fd
     * changes owner as it is, with its connection-limit slot. */
    lc->c.fd = -1;
    lc->c.cx = NULL;
    lc_end(lc, 0);
    http_listener_adopt(p->http->pl, fd, &peer, len,
                        lc_direct > 0 ? &direct : NULL, cx);
}

/* An AUTO_PASSTHROUGH refusal: counted by reason, logged with it, and
 * closed as Envoy closes a connection no filter chain matches (NR), or
 * one whose cluster has no endpoint (UH). */
static void auto_refuse(struct l4_conn *lc, uint64_t *counter, const char *end)
{
    int uh = counter == &shard(lc->p)->relay.ap_no_endpoint;

    /* STAT_ADD on a counter chosen by the caller. */
    __atomic_store_n(counter, *counter + 1, __ATOMIC_RELAXED);
    lc_refuse(lc, uh ? "UH" : "NR", end);
}

/*
 * route_auto() relays lc by its Istio SNI (AUTO_PASSTHROUGH): the SNI
 * must parse, the ALPN must be one of Istio's (a gateway's filter chain
 * matches both), the service, port and subset must be exposed, and the
 * cluster must have an endpoint. As in Istio, no AuthorizationPolicy
 * applies: the TLS is end to end between the client and the workload.
 */
static void route_auto(struct l4_conn *lc, const struct clienthello *ch)
{
    struct l4_listener *p = lc->p;
    struct relay_counters *rc = &shard(p)->relay;
    const struct l4_listener_conf *c = p->conf;
    const struct l4_auto *a;
    struct l4_relay_meta meta;
    struct istio_sni sni;
    struct cluster *cl;
    const char *why;
    size_t ep;

    if (istio_sni_parse(lc->sni, strlen(lc->sni), &sni, &why) < 0) {
        log_debug("listener %s: SNI '%s': %s", c->name, lc->sni, why);
        auto_refuse(lc, &rc->ap_bad_sni,
                    lc->sni[0] ? "auto_passthrough_bad_sni"
                               : "auto_passthrough_no_sni");
        return;
    }
    if (!istio_alpn_offered(ch)) {
        auto_refuse(lc, &rc->ap_alpn,
                    ch->alpn_len == 0 ? "auto_passthrough_no_alpn"
                                      : "auto_passthrough_alpn_not_istio");
        return;
    }
    switch (l4_auto_lookup(c, &sni, &a)) {
    case L4_AUTO_NO_HOST:
        auto_refuse(lc, &rc->ap_unknown_host, "auto_passthrough_unknown_host");
        return;
    case L4_AUTO_NO_PORT:
        auto_refuse(lc, &rc->ap_unknown_port, "auto_passthrough_unknown_port");
        return;
    case L4_AUTO_NO_SUBSET:
        auto_refuse(lc, &rc->ap_unknown_subset,
                    "auto_passthrough_unknown_subset");
        return;
    default:
        break;
    }
    cl = c->clusters[a->cluster];
    if (cl->nendpoints == 0) {
        auto_refuse(lc, &rc->ap_no_endpoint, "no_healthy_upstream");
        return;
    }
    if (!p->lb_ok[a->cluster]) {
        if (balancer_init(&p->lb[a->cluster], cl, p->worker) < 0) {
            lc_refuse(lc, "-", "out_of_memory");
            return;
        }
        p->lb_ok[a->cluster] = 1;
    }
    ep = balancer_pick(&p->lb[a->cluster]);
    STAT_ADD(rc, ap_relayed, 1);
    /* The client's TLS goes through untouched: no origination, whatever
     * the DestinationRule says (Istio's SNI-DNAT clusters carry none). */
    memset(&meta, 0, sizeof(meta));
    meta.sni = lc->sni;
    meta.cluster = cl->name;
    meta.cluster_stats = &cl->w[p->worker];
    meta.metrics_dst = cl->metrics;
    meta.outlier = cl;
    if (lc->directlen > 0) {
        meta.direct = &lc->direct;
        meta.directlen = lc->directlen;
    }
    lc_end(lc, 0);
    l4_relay_start(&p->relay, &lc->c, &lc->peer, lc->peerlen, cl->endpoints,
                   cl->nendpoints, ep, &meta, lc->start_ms);
}

static void route_sni(struct l4_conn *lc, const struct clienthello *ch)
{
    const struct l4_listener_conf *c = lc->p->conf;
    const struct l4_sni *e = l4_sni_lookup(c, lc->sni);

    /* An Istio SNI is AUTO_PASSTHROUGH's unless another server claims the
     * exact name (Envoy prefers the exact server name); any other SNI
     * goes by the table, and what it does not take is refused with
     * AUTO_PASSTHROUGH's reason. */
    if (c->auto_passthrough &&
        ((strncmp(lc->sni, "outbound_.", 10) == 0 &&
          (e == NULL || strcmp(e->name, lc->sni) != 0)) ||
         e == NULL)) {
        route_auto(lc, ch);
        return;
    }
    if (e == NULL) {
        lc_refuse(lc, "NR", "no_route");
        return;
    }
    if (e->target == L4_TO_TERMINATE) {
        start_handshake(lc, e->index);
        return;
    }
    if (e->target == L4_TO_HTTP) {
        to_http(lc);
        return;
    }
    lc_relay(lc, &c->passthrough.v[e->index], NULL);
}

static void inspect(struct l4_conn *lc)
{
    struct l4_listener *p = lc->p;
    struct clienthello ch;
    const char *why;
    ssize_t n;
    int rc;

    do {
        n = recv(lc->c.fd, p->peek, p->peek_cap, MSG_PEEK);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        lc_refuse(lc, "-", n == 0 ? "downstream_closed" : "downstream_reset");
        return;
    }
    rc = clienthello_parse(p->peek, (size_t)n, p->scratch,
                           p->conf->max_client_hello, &ch, &why);
    if (rc == CH_NEED_MORE && (size_t)n < p->peek_cap)
        return; /* the edge-triggered event fires on the next bytes */
    if (rc == CH_NOT_TLS && p->http != NULL && p->conf->http->tls_permissive) {
        /* PeerAuthentication PERMISSIVE on the mesh's HTTPS server:
         * plaintext is HTTP for it (it peeks at the first byte again). */
        to_http(lc);
        return;
    }
    if (rc != CH_OK) {
        STAT_ADD(&shard(p)->relay, client_hello_errors, 1);
        log_debug("listener %s: %s", p->conf->name,
                  rc == CH_NEED_MORE ? "ClientHello too large" : why);
        /* No TLS, or none we can read: no filter chain takes it. */
        lc_refuse(lc, "NR",
                  rc == CH_NOT_TLS     ? "not_tls"
                  : rc == CH_MALFORMED ? "malformed_client_hello"
                                       : "client_hello_too_large");
        return;
    }
    ascii_lower_copy(lc->sni, (const char *)ch.sni, ch.sni_len);
    lc->sni[ch.sni_len] = '\0';
    route_sni(lc, &ch);
}

static void lc_begin(struct l4_conn *lc);

/* ST_PROXY: the PROXY header, taken off the socket in as many pieces as
 * it comes (the edge-triggered event fires on each); then the connection
 * goes on as if accepted from the client it names. */
static void pp_step(struct l4_conn *lc)
{
    struct pp_result r;
    const char *why = NULL;
    int v = pp_read(lc->pp, lc->c.fd, &r, &why);

    if (v == 0)
        return;
    free(lc->pp);
    lc->pp = NULL;
    if (v < 0) {
        STAT_ADD(&shard(lc->p)->listener, proxy_proto_error, 1);
        log_debug("listener %s: %s", lc->p->conf->name, why);
        lc_refuse(lc, "-", "proxy_protocol_error");
        return;
    }
    if (!r.local && r.addrlen <= sizeof(lc->peer)) {
        lc->direct = lc->peer;
        lc->directlen = lc->peerlen;
        memset(&lc->peer, 0, sizeof(lc->peer));
        memcpy(&lc->peer, &r.src, r.addrlen);
        lc->peerlen = r.addrlen;
    }
    event_del(&lc->peek_ev);
    timer_cancel(&lc->timer);
    lc_begin(lc);
}

static void on_peek(evutil_socket_t fd, short what, void *arg)
{
    struct l4_conn *lc = arg;

    (void)fd;
    (void)what;
    if (lc->stage == ST_PROXY)
        pp_step(lc);
    else
        inspect(lc);
}

static void on_lc_timer(void *arg)
{
    struct l4_conn *lc = arg;

    if (lc->stage == ST_PROXY) {
        STAT_ADD(&shard(lc->p)->listener, proxy_proto_error, 1);
        lc_refuse(lc, "-", "proxy_protocol_timeout");
    } else if (lc->stage == ST_INSPECT) {
        STAT_ADD(&shard(lc->p)->relay, client_hello_errors, 1);
        lc_refuse(lc, "NR", "client_hello_timeout");
    } else {
        STAT_ADD(&shard(lc->p)->tls, fail_timeout, 1);
        lc_refuse(lc, "-", "tls_handshake_timeout");
    }
}

static void on_conn(void *arg, int fd, const struct sockaddr_storage *peer,
                    socklen_t len)
{
    struct l4_listener *p = arg;
    struct l4_conn *lc = calloc(1, sizeof(*lc));

    STAT_ADD(&shard(p)->listener, accepted, 1);
    if (lc == NULL) {
        close(fd);
        if (p->conf->cx != NULL)
            cx_release(p->conf->cx);
        STAT_ADD(&shard(p)->listener, closed, 1);
        log_error("listener %s: out of memory", p->conf->name);
        return;
    }
    lc->p = p;
    lc->start_ms = clock_ms();
    if (len <= sizeof(lc->peer)) {
        memcpy(&lc->peer, peer, len);
        lc->peerlen = len;
    }
    conn_init(&lc->c, p->base, fd, NULL, NULL);
    lc->c.cx = p->conf->cx;
    event_assign(&lc->peek_ev, p->base, fd, EV_READ | EV_PERSIST | EV_ET,
                 on_peek, lc);
    timer_init(&lc->timer, p->base, on_lc_timer, lc);
    list_append(&p->pending, &lc->link);
    p->npending++;
    if (p->conf->proxy_protocol > 0) {
        /* The balancer's header comes first: nothing is routed, peeked
         * at or handshaken before it is read. */
        lc->pp = malloc(sizeof(*lc->pp) + p->conf->proxy_protocol);
        if (lc->pp == NULL) {
            lc_refuse(lc, "-", "out_of_memory");
            return;
        }
        lc->pp->buf = (uint8_t *)(lc->pp + 1);
        lc->pp->got = 0;
        lc->pp->cap = p->conf->proxy_protocol;
        lc->stage = ST_PROXY;
        event_add(&lc->peek_ev, NULL);
        timer_arm(&lc->timer, p->conf->inspect_timeout_ms);
        pp_step(lc);
        return;
    }
    lc_begin(lc);
}

/* The connection's route, once its client is known: an HBONE server's
 * handshake, a plain TCP route, or a peek at its ClientHello. */
static void lc_begin(struct l4_conn *lc)
{
    struct l4_listener *p = lc->p;

    if (p->conf->is_hbone) {
        /* No SNI to route by: one server, one certificate. */
        start_handshake(lc, 0);
        return;
    }
    if (!p->conf->inspect) {
        route_tcp(lc, &p->conf->tcp, NULL);
        return;
    }
    lc->stage = ST_INSPECT;
    event_add(&lc->peek_ev, NULL);
    timer_arm(&lc->timer, p->conf->inspect_timeout_ms);
    inspect(lc);
}

/* ---- the worker's listener ------------------------------------------------
 */

static void check_idle(struct l4_listener *p)
{
    l4_listener_check_idle(p);
}

void l4_listener_check_idle(struct l4_listener *p)
{
    /* The HTTP part's connections are waited for by its owner, or, once
     * the owner is gone, by every listener still holding it: an older
     * one may have handed it a connection after the owner left, and the
     * last to let go closes what it still serves. */
    if (!acceptor_running(&p->acc) && p->npending == 0 &&
        p->relay.active == 0 && p->hb.active == 0 &&
        (p->http == NULL || (p->http->owner != NULL && p->http->owner != p) ||
         http_listener_active(p->http->pl) == 0) &&
        p->on_idle != NULL)
        p->on_idle(&p->pl, p->arg);
}

static void free_dead(struct l4_listener *p)
{
    while (!LIST_EMPTY(&p->dead)) {
        struct l4_conn *lc = LIST_ELEM(p->dead.next, struct l4_conn, link);
        list_del(&lc->link);
        free(lc->pp);
        free(lc);
    }
}

static void reap(struct reap_node *n)
{
    struct l4_listener *p = LIST_ELEM(n, struct l4_listener, reap);

    free_dead(p);
    check_idle(p);
}

static void on_relay_reap(void *arg)
{
    check_idle(arg);
}

static void l4_listener_free(struct l4_listener *p);

static struct plistener *ops_start(struct event_base *base,
                                   struct reaper *reaper, int worker, int fd,
                                   void *conf, plistener_idle_fn on_idle,
                                   void *arg)
{
    struct l4_listener_conf *c = conf;
    struct l4_listener *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    p->pl.ops = &l4_listener_ops;
    p->pl.conf = conf;
    p->pl.fd = fd;
    LIST_INIT(&p->pl.link);
    LIST_INIT(&p->pending);
    LIST_INIT(&p->dead);
    p->base = base;
    p->reaper = reaper;
    p->worker = worker;
    p->conf = l4_listener_conf_ref(c);
    p->on_idle = on_idle;
    p->arg = arg;
    if (RAND_bytes((uint8_t *)&p->rng, sizeof(p->rng)) != 1 || p->rng == 0)
        p->rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)p;
    p->rr = calloc(c->nclusters + 1, sizeof(*p->rr));
    p->ctx = calloc(c->nservers + 1, sizeof(*p->ctx));
    p->gen = calloc(c->nservers + 1, sizeof(*p->gen));
    p->lb = calloc(c->nclusters + 1, sizeof(*p->lb));
    p->lb_ok = calloc(c->nclusters + 1, sizeof(*p->lb_ok));
    /* A ClientHello of max_client_hello bytes in 16 KiB records. */
    p->peek_cap =
        c->max_client_hello + REC_OVERHEAD * (c->max_client_hello / 16384 + 2);
    p->peek = c->inspect ? malloc(p->peek_cap) : NULL;
    p->scratch = c->inspect ? malloc(c->max_client_hello) : NULL;
    if (p->rr == NULL || p->ctx == NULL || p->gen == NULL || p->lb == NULL ||
        p->lb_ok == NULL ||
        (c->inspect && (p->peek == NULL || p->scratch == NULL)))
        goto fail;
    if (l4_relay_init(&p->relay, base, reaper, worker, &c->relay, on_relay_reap,
                      p) < 0)
        goto fail;
    p->relay_ok = 1;
    hbone_worker_init(&p->hb, p);
    if (c->http != NULL && (p->http = l4_http_new(p)) == NULL)
        goto fail;
    if (acceptor_start(&p->acc, base, fd, c->name, on_conn, p) < 0)
        goto fail;
    if (c->cx != NULL)
        acceptor_limit(&p->acc, c->cx, &shard(p)->listener);
    return &p->pl;
fail:
    l4_listener_free(p);
    return NULL;
}

static void l4_listener_free(struct l4_listener *p)
{
    if (p == NULL)
        return;
    acceptor_stop(&p->acc);
    while (!LIST_EMPTY(&p->pending))
        lc_end(LIST_ELEM(p->pending.next, struct l4_conn, link), 1);
    free_dead(p);
    l4_http_release(p);
    hbone_worker_dispose(&p->hb);
    if (p->relay_ok)
        l4_relay_dispose(&p->relay);
    reaper_cancel(&p->reap);
    for (size_t i = 0; p->ctx != NULL && i < p->conf->nservers; i++)
        SSL_CTX_free(p->ctx[i]);
    free(p->ctx);
    free(p->gen);
    for (size_t i = 0; p->lb_ok != NULL && i < p->conf->nclusters; i++)
        if (p->lb_ok[i])
            balancer_dispose(&p->lb[i]);
    free(p->lb);
    free(p->lb_ok);
    free(p->rr);
    free(p->peek);
    free(p->scratch);
    list_del(&p->pl.link);
    l4_listener_conf_unref(p->conf);
    free(p);
}

static void ops_stop(struct plistener *l)
{
    struct l4_listener *p = (struct l4_listener *)(void *)l;

    if (!acceptor_running(&p->acc))
        return;
    acceptor_stop(&p->acc);
    /* HBONE tunnels finish, their clients open new connections to the
     * listener that replaced this one. */
    hbone_worker_drain(&p->hb);
    /* HTTP requests in flight finish; idle keep-alives close. */
    if (p->http != NULL && p->http->owner == p)
        p->http->pl->ops->stop_accepting(p->http->pl);
    reaper_defer(p->reaper, &p->reap, reap);
}

/* TCP sessions have nothing to be told; the HTTP part of a shared port
 * drains its connections as an HTTP listener does. */
static void ops_drain_conns(struct plistener *l)
{
    struct l4_listener *p = (struct l4_listener *)(void *)l;

    hbone_worker_drain(&p->hb);
    if (p->http != NULL && p->http->owner == p &&
        p->http->pl->ops->drain_connections != NULL)
        p->http->pl->ops->drain_connections(p->http->pl);
}

static void ops_free(struct plistener *l)
{
    l4_listener_free((struct l4_listener *)(void *)l);
}

/* A rebuilt listener with the same HTTP part (the same conf: server.c
 * keeps it when only routes changed) takes the running one over. */
static void ops_inherit(struct plistener *l, struct plistener *prev)
{
    struct l4_listener *p = (struct l4_listener *)(void *)l;
    struct l4_listener *o = (struct l4_listener *)(void *)prev;

    if (p->http == NULL || o->http == NULL || o->http->owner != o ||
        p->conf->http != o->conf->http)
        return;
    /* p's own is new and empty. */
    l4_http_release(p);
    p->http = o->http;
    p->http->refs++;
    p->http->owner = p;
    list_append(&p->http->holders, &p->http_link);
}

static void *conf_ref_pl(void *conf)
{
    return l4_listener_conf_ref(conf);
}

static void conf_unref_pl(void *conf)
{
    l4_listener_conf_unref(conf);
}

const struct plistener_ops l4_listener_ops = {
    .kind = PLISTENER_L4,
    .name = "l4",
    .conf_ref = conf_ref_pl,
    .conf_unref = conf_unref_pl,
    .start = ops_start,
    .stop_accepting = ops_stop,
    .drain_connections = ops_drain_conns,
    .free = ops_free,
    .inherit = ops_inherit,
};
