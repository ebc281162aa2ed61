#include "config.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"
#include "config/bootstrap.h"
#include "config/resource-t.h"
#include "control/ca/identity.h"
#include "control/dns.h"
#include "control/jwks.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/json.h"
#include "core/log.h"
#include "event/mq.h"
#include "event/timer.h"
#include "net/listener.h"
#include "proxy/http_listener.h"
#include "proxy/l4_listener.h"
#include "proxy/router.h"
#include "proxy/stats.h"
#include "compile/compile.h"
#include "control/source_dir.h"
#include "compile/istio.h"
#include <inttypes.h>
#include "upstream/cluster.h"
#include "control/loop.h"
#include "net/worker.h"

/* A listener as the main thread sees it: what it does (conf), where it
 * listens (socks) and its counters. Each field holds one reference. */
struct srv_listener {
    struct compiled_listener cl;
    struct listener_socks *socks;
    struct stats_block *stats;
    const char *name;       /* in the lset's bootstrap or Gateway set */
    char *fingerprint;      /* what it does; equal means keep it running */
    uint64_t tls_reload_ms; /* 0 without TLS */
};

struct lset {
    struct srv_listener *v;
    size_t n;
    struct cluster **clusters; /* one reference each, for reuse and stats */
    size_t nclusters;
    struct bootstrap *bs;     /* the bootstrap the names point into */
    struct gw_set gws;        /* the Gateway listeners the names point into */
    struct strmap gwclusters; /* the Gateway listeners' clusters by
                               * fingerprint, one reference each */
};

/* What a listener is before it runs: a bootstrap listener or the servers
 * of Gateways on one port. */
struct lspec {
    const char *name;
    struct addr address;
    int backlog;
    char *fingerprint;
    uint64_t tls_reload_ms;
    const struct bootstrap_listener *bl;
    const struct gw_listener *gw;
};

struct server {
    struct event_base *base;
    struct mq *inbox;
    char *config_path;
    int nworkers;
    struct worker *workers;
    struct lset cur;
    struct lset old; /* retired set, released once workers ack */
    int acks_pending;
    int reload_queued;
    struct admin *admin;
    struct stats_block **stats_view; /* for the admin, rebuilt on change */
    struct cluster **cluster_view;   /* bootstrap and Gateway clusters */
    size_t ncluster_view;
    uint64_t start_ms;
    uint64_t reloads_ok;
    uint64_t reloads_failed;
    char *last_reload_error;
    int draining;
    int stopping; /* server_free: acknowledgements are only freed */
    int stopped_accepting;
    int idle_workers;
    struct timer drain_timer;
    struct timer cert_timer;
    struct source *source;        /* Istio resources; NULL without config.dir */
    struct dns_cache *dns;        /* ServiceEntry names; with source only */
    struct jwks_cache *jwks;      /* jwksUri key sets; with source only */
    struct ca_identity *identity; /* the mesh certificate; NULL: no CA */
    int rebuild_only;             /* reloading for new resources only */
    uint64_t cert_reloads;
    uint64_t cert_reload_failures;
    /* The caches above as compile/ reads them. */
    struct compile_dns dns_fn;
    struct compile_identity identity_fn;
    struct compile_jwks jwks_fn;
};

static size_t dns_lookup(void *arg, const char *name,
                         void (*each)(void *ctx, const char *ip), void *ctx)
{
    return dns_cache_lookup(arg, name, each, ctx);
}

static int identity_current(void *arg, X509 **root)
{
    struct ca_cred *cred = ca_identity_current(arg);

    *root = NULL;
    if (cred == NULL)
        return 0;
    *root = ca_cred_root(cred);
    if (*root != NULL)
        X509_up_ref(*root);
    ca_cred_unref(cred);
    return 1;
}

static const char *jwks_get(void *arg, const char *uri, int64_t timeout_ms,
                            size_t *n)
{
    return jwks_cache_get(arg, uri, timeout_ms, n);
}

static void arm_cert_timer(struct server *s);

static void lset_release(struct lset *ls)
{
    for (size_t i = 0; i < ls->n; i++) {
        if (ls->v[i].cl.conf != NULL)
            ls->v[i].cl.unref(ls->v[i].cl.conf);
        listener_socks_unref(ls->v[i].socks);
        stats_block_unref(ls->v[i].stats);
        free(ls->v[i].fingerprint);
    }
    free(ls->v);
    compile_clusters_free(ls->clusters, ls->nclusters);
    istio_cluster_map_dispose(&ls->gwclusters);
    gw_set_dispose(&ls->gws);
    bootstrap_free(ls->bs);
    memset(ls, 0, sizeof(*ls));
}

static struct srv_listener *lset_find_name(const struct lset *ls,
                                           const char *name)
{
    for (size_t i = 0; i < ls->n; i++)
        if (strcmp(ls->v[i].name, name) == 0)
            return &ls->v[i];
    return NULL;
}

static struct srv_listener *lset_find_addr(const struct lset *ls,
                                           const struct addr *a)
{
    for (size_t i = 0; i < ls->n; i++)
        if (addr_equal(&ls->v[i].socks->addr, a))
            return &ls->v[i];
    return NULL;
}

static const struct resource_set *source_current_or_null(const struct server *s)
{
    return s->source != NULL ? source_current(s->source) : NULL;
}

static void lspecs_free(struct lspec *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].fingerprint);
    free(v);
}

/* The fingerprint of a bootstrap listener: its own keys, the logging it
 * compiles in, and for HTTP the clusters it may route to. */
static char *bootstrap_fingerprint(const struct bootstrap *bs,
                                   const struct bootstrap_listener *bl)
{
    struct buf b;
    char *out;

    buf_init(&b, 64 * 1024 * 1024);
    bootstrap_listener_to_json(bl, &b);
    buf_printf(&b, "|log=%d|", bs->log.access_log);
    if (bl->protocol == BOOTSTRAP_HTTP)
        bootstrap_clusters_to_json(bs, &b);
    out = strndup(buf_ptr(&b), buf_len(&b));
    buf_dispose(&b);
    return out;
}

/*
 * lset_specs() lists what the listener set should hold: the bootstrap's
 * listeners, then the Gateways' (kept in out->gws, which the specs point
 * into). A Gateway listener's fingerprint holds the resource snapshot's
 * number, so a new snapshot rebuilds its routes.
 */
static int lset_specs(struct server *s, const struct bootstrap *bs,
                      struct lset *out, struct lspec **specs, size_t *nspecs,
                      char **err)
{
    const struct resource_set *set = source_current_or_null(s);
    size_t n;
    struct lspec *v;

    *specs = NULL;
    *nspecs = 0;
    if (set != NULL && istio_gateways(bs, set, &out->gws, err) < 0)
        return -1;
    n = bs->listeners.n + out->gws.n;
    v = calloc(n ? n : 1, sizeof(*v));
    if (v == NULL)
        goto oom;
    for (size_t i = 0; i < bs->listeners.n; i++) {
        const struct bootstrap_listener *bl = bootstrap_listener_at(bs, i);
        struct lspec *sp = &v[i];

        sp->name = bl->name;
        sp->address = bl->address;
        sp->backlog = (int)bl->backlog;
        sp->bl = bl;
        if (bl->protocol == BOOTSTRAP_HTTP && bl->tls.certificates.n > 0)
            sp->tls_reload_ms = (uint64_t)bl->tls.reload_interval_ms;
        sp->fingerprint = bootstrap_fingerprint(bs, bl);
        if (sp->fingerprint == NULL)
            goto oom;
    }
    for (size_t i = 0; i < out->gws.n; i++) {
        const struct gw_listener *g = &out->gws.v[i];
        struct lspec *sp = &v[bs->listeners.n + i];

        for (size_t k = 0; k < bs->listeners.n; k++)
            if (strcmp(v[k].name, g->name) == 0 ||
                addr_equal(&v[k].address, &g->address)) {
                err_set(err,
                        "Gateway listener %s clashes with bootstrap "
                        "listener %s (name or address)",
                        g->name, v[k].name);
                lspecs_free(v, n);
                gw_set_dispose(&out->gws);
                return -1;
            }
        sp->name = g->name;
        sp->address = g->address;
        sp->backlog = 1024;
        sp->gw = g;
        /* The mesh certificate rotates at half its life (24 h by default,
         * far less in tests): check its files often; a stat is cheap. */
        sp->tls_reload_ms = g->tls ? (g->mesh ? 500 : 5000) : 0;
        /* Routes are not part of it: a kept Gateway listener gets new
         * routes published into its running conf. An L4 listener's rules
         * are compiled into its conf: new resources or DNS answers build
         * a new one, which takes the sockets over while sessions finish on
         * the old one. */
        if (g->l4) {
            struct source_status st;
            struct dns_stats ds;
            memset(&ds, 0, sizeof(ds));
            source_status(s->source, &st);
            if (s->dns != NULL)
                dns_cache_stats(s->dns, &ds);
            if (asprintf(&sp->fingerprint,
                         "%s|log=%d|resources=%" PRIu64 "|dns=%" PRIu64
                         "|outbound=%d",
                         g->json, bs->log.access_log, st.reloads_ok,
                         (uint64_t)ds.changes, bs->outbound.mode) < 0) {
                sp->fingerprint = NULL;
                goto oom;
            }
        } else if (asprintf(&sp->fingerprint, "%s|log=%d", g->json,
                            bs->log.access_log) < 0) {
            sp->fingerprint = NULL;
            goto oom;
        }
    }
    *specs = v;
    *nspecs = n;
    return 0;
oom:
    lspecs_free(v, n);
    gw_set_dispose(&out->gws);
    *err = strdup("out of memory");
    return -1;
}

/* What an L4 listener's fingerprint says before its resource and DNS
 * generations: the Gateway servers and logging, all its HTTP part (of a
 * port shared by HTTPS and TLS servers) is compiled from besides routes. */
static int same_http_part(const char *a, const char *b)
{
    const char *ea = strstr(a, "|resources="), *eb = strstr(b, "|resources=");

    return ea != NULL && eb != NULL && ea - a == eb - b &&
           memcmp(a, b, (size_t)(ea - a)) == 0;
}

/*
 * keep_http_part() lets a rebuilt L4 listener l of a shared port keep
 * prev's HTTP part when only what it routes by changed: l's conf takes
 * prev's HTTP conf, and l's new routes go to *staged, published into it
 * once the whole set is built. Workers then hand the running HTTP
 * listener to the new L4 one (l4_listener inherit), so HTTPS connections
 * outlive resource changes as on a port of HTTP servers only.
 */
static void keep_http_part(const struct srv_listener *prev,
                           struct srv_listener *l, struct http_routes **staged)
{
    struct l4_listener_conf *nc, *pc;

    if (prev == NULL || prev->cl.ops != &l4_listener_ops ||
        l->cl.ops != &l4_listener_ops)
        return;
    nc = l->cl.conf;
    pc = prev->cl.conf;
    if (nc->http == NULL || pc->http == NULL ||
        !same_http_part(prev->fingerprint, l->fingerprint))
        return;
    *staged = http_listener_conf_routes(nc->http);
    http_listener_conf_unref(nc->http);
    nc->http = http_listener_conf_ref(pc->http);
}

/*
 * lset_build() turns a bootstrap's listeners into a listener set, reusing
 * what old already runs: an unchanged listener is kept as is (its workers'
 * proxies keep their sessions), a listener on an address old already binds
 * takes over those sockets, and stats follow the listener's name. Only new
 * addresses are bound. On failure nothing of old is changed.
 */
static int lset_build(struct server *s, struct bootstrap *bs,
                      const struct lset *old, struct lset *out, char **err)
{
    char as[ADDR_STRLEN];
    struct cluster **clusters;
    int clusters_same =
        old->bs != NULL && bootstrap_clusters_equal(old->bs, bs);
    struct lspec *specs = NULL;
    size_t nspecs = 0;
    /* New routes for kept Gateway listeners, published only once the
     * whole set is built. */
    struct http_routes **staged = NULL;
    const struct compile_env env = {
        s->nworkers, s->dns != NULL ? &s->dns_fn : NULL,
        s->identity != NULL ? &s->identity_fn : NULL,
        s->jwks != NULL ? &s->jwks_fn : NULL};
    const struct jwks_conf jc = {bs->jwt.jwks_refresh_ms, bs->jwt.jwks_ca_file};

    memset(out, 0, sizeof(*out));
    if (s->dns != NULL)
        dns_cache_mark(s->dns);
    if (s->jwks != NULL) {
        if (jwks_cache_configure(s->jwks, &jc) < 0) {
            *err = strdup("out of memory");
            return -1;
        }
        jwks_cache_mark(s->jwks);
    }
    if (lset_specs(s, bs, out, &specs, &nspecs, err) < 0)
        return -1;
    staged = calloc(nspecs ? nspecs : 1, sizeof(*staged));
    if (staged == NULL) {
        lspecs_free(specs, nspecs);
        gw_set_dispose(&out->gws);
        *err = strdup("out of memory");
        return -1;
    }
    out->v = calloc(nspecs ? nspecs : 1, sizeof(*out->v));
    if (out->v == NULL) {
        lspecs_free(specs, nspecs);
        gw_set_dispose(&out->gws);
        *err = strdup("out of memory");
        return -1;
    }
    if (clusters_same) {
        /* Unchanged clusters keep their objects: listeners that stay share
         * them with listeners that change, and counters go on. */
        clusters =
            calloc(old->nclusters ? old->nclusters : 1, sizeof(*clusters));
        if (clusters != NULL)
            for (size_t i = 0; i < old->nclusters; i++)
                clusters[i] = cluster_ref(old->clusters[i]);
        else
            *err = strdup("out of memory");
    } else {
        clusters = compile_clusters(bs, s->nworkers, err);
    }
    if (clusters == NULL) {
        free(out->v);
        out->v = NULL;
        lspecs_free(specs, nspecs);
        gw_set_dispose(&out->gws);
        return -1;
    }
    out->clusters = clusters;
    out->nclusters = bs->clusters.n;
    for (size_t i = 0; i < nspecs; i++) {
        struct lspec *sp = &specs[i];
        struct srv_listener *prev = lset_find_name(old, sp->name);
        struct srv_listener *same_addr = lset_find_addr(old, &sp->address);
        struct srv_listener *l = &out->v[out->n];

        l->name = sp->name;
        l->tls_reload_ms = sp->tls_reload_ms;
        l->fingerprint = sp->fingerprint;
        sp->fingerprint = NULL;
        /* Everything the compiled conf depends on is in the fingerprint:
         * equal means the running listener stays, with its connections. */
        if (prev != NULL && strcmp(prev->fingerprint, l->fingerprint) == 0) {
            l->cl = prev->cl;
            if (prev->cl.ops == &l4_listener_ops)
                l4_listener_conf_ref(prev->cl.conf);
            else
                http_listener_conf_ref(prev->cl.conf);
            l->socks = prev->socks;
            l->socks->refs++;
            l->stats = stats_block_ref(prev->stats);
            out->n++;
            if (sp->gw != NULL && !sp->gw->l4 &&
                compile_gateway_routes(bs, source_current_or_null(s), sp->gw,
                                       &env, &old->gwclusters, &out->gwclusters,
                                       &staged[out->n - 1], err) < 0) {
                err_set(err, "cannot compile");
                err_prefix(err, "listener %s: ", sp->name);
                goto fail;
            }
            continue;
        }
        if (same_addr != NULL) {
            l->socks = same_addr->socks;
            l->socks->refs++;
        } else {
            l->socks = listener_socks_open(&sp->address, s->nworkers,
                                           sp->backlog, err);
            if (l->socks == NULL) {
                err_set(err, "cannot listen");
                err_prefix(err, "listener %s: ", sp->name);
                out->n++;
                goto fail;
            }
        }
        l->stats = prev != NULL ? stats_block_ref(prev->stats)
                                : proxy_stats_new(sp->name, s->nworkers);
        if (l->stats == NULL) {
            if (*err == NULL)
                *err = strdup("out of memory");
            out->n++;
            goto fail;
        }
        if ((sp->bl != NULL
                 ? compile_listener(bs, sp->bl, clusters, l->stats, &l->cl, err)
                 : compile_gateway(bs, source_current_or_null(s), sp->gw,
                                   l->stats, &env, &old->gwclusters,
                                   &out->gwclusters, &l->cl, err)) < 0) {
            err_set(err, "cannot compile");
            err_prefix(err, "listener %s: ", sp->name);
            out->n++;
            goto fail;
        }
        keep_http_part(prev, l, &staged[out->n]);
        out->n++;
        log_info("listener %s: %s, %s on %s", sp->name,
                 prev ? "changed" : "added", l->cl.ops->kind,
                 addr_format(&sp->address, as, sizeof(as)));
    }
    for (size_t i = 0; i < old->n; i++)
        if (lset_find_name(out, old->v[i].name) == NULL)
            log_info("listener %s: removed", old->v[i].name);
    out->bs = bs;
    lspecs_free(specs, nspecs);
    /* Everything is built: kept Gateway listeners route new requests by
     * their new routes from now on (requests in flight keep theirs). */
    for (size_t i = 0; i < out->n; i++)
        if (staged[i] != NULL)
            http_listener_conf_set_routes(
                out->v[i].cl.ops == &l4_listener_ops
                    ? ((struct l4_listener_conf *)out->v[i].cl.conf)->http
                    : out->v[i].cl.conf,
                staged[i]);
    free(staged);
    /* Names this snapshot no longer uses are dropped. */
    if (s->dns != NULL)
        dns_cache_sweep(s->dns);
    if (s->jwks != NULL)
        jwks_cache_sweep(s->jwks);
    return 0;
fail:
    /* Partially built entries hold references like complete ones; the
     * bootstrap stays the caller's. */
    for (size_t i = 0; i < nspecs; i++)
        http_routes_unref(staged[i]);
    free(staged);
    lspecs_free(specs, nspecs);
    out->bs = NULL;
    lset_release(out);
    return -1;
}

static int cluster_by_name(const void *a, const void *b)
{
    const struct cluster *const *x = a, *const *y = b;

    return strcmp((*x)->name, (*y)->name);
}

static void stats_view_update(struct server *s)
{
    size_t n = s->cur.nclusters + s->cur.gwclusters.n, pos = 0;
    const char *k;
    void *v;

    free(s->stats_view);
    s->stats_view = calloc(s->cur.n ? s->cur.n : 1, sizeof(*s->stats_view));
    if (s->stats_view == NULL)
        return;
    for (size_t i = 0; i < s->cur.n; i++)
        s->stats_view[i] = s->cur.v[i].stats;
    /* The admin sees the bootstrap's clusters and the Gateway listeners'
     * (the cur set holds references to all of them), sorted by name within
     * each, so /clusters reads the same after every reload. */
    free(s->cluster_view);
    s->ncluster_view = 0;
    s->cluster_view = calloc(n ? n : 1, sizeof(*s->cluster_view));
    if (s->cluster_view == NULL)
        return;
    for (size_t i = 0; i < s->cur.nclusters; i++)
        s->cluster_view[s->ncluster_view++] = s->cur.clusters[i];
    while (strmap_next(&s->cur.gwclusters, &pos, &k, &v))
        s->cluster_view[s->ncluster_view++] = v;
    qsort(s->cluster_view + s->cur.nclusters,
          s->ncluster_view - s->cur.nclusters, sizeof(*s->cluster_view),
          cluster_by_name);
}

static int publish(struct server *s)
{
    for (int w = 0; w < s->nworkers; w++) {
        struct worker_set *set =
            malloc(sizeof(*set) + s->cur.n * sizeof(set->v[0]));
        if (set == NULL)
            return -1;
        set->n = s->cur.n;
        for (size_t i = 0; i < s->cur.n; i++) {
            set->v[i].ops = s->cur.v[i].cl.ops;
            set->v[i].conf = s->cur.v[i].cl.conf;
            set->v[i].name = s->cur.v[i].name;
            set->v[i].fd = listener_socks_fd(s->cur.v[i].socks, w);
        }
        if (worker_apply(&s->workers[w], set) < 0) {
            free(set);
            return -1;
        }
        s->acks_pending++;
    }
    return 0;
}

static void drain_done(struct server *s)
{
    log_info("drained; exiting");
    event_base_loopbreak(s->base);
}

static void on_worker_event(void *arg, int worker, enum worker_event ev)
{
    struct server *s = arg;

    (void)worker;
    if (s->stopping)
        return;
    switch (ev) {
    case WORKER_APPLIED:
        if (--s->acks_pending > 0)
            return;
        /* Every worker now serves cur: what only old held can go. */
        lset_release(&s->old);
        if (s->reload_queued && !s->draining) {
            s->reload_queued = 0;
            server_reload(s);
        }
        return;
    case WORKER_STOPPED_ACCEPT:
        if (++s->stopped_accepting < s->nworkers)
            return;
        /* No worker accepts any more: close the sockets so new connections
         * are refused by the kernel instead of waiting in a backlog. */
        log_info("drain: listeners closed");
        if (s->acks_pending == 0)
            lset_release(&s->old);
        for (size_t i = 0; i < s->cur.n; i++) {
            listener_socks_unref(s->cur.v[i].socks);
            s->cur.v[i].socks = NULL;
        }
        return;
    case WORKER_IDLE:
        if (++s->idle_workers == s->nworkers)
            drain_done(s);
        return;
    }
}

static void on_drain_deadline(void *arg)
{
    struct server *s = arg;

    log_warn("drain deadline reached; closing the connections still open");
    event_base_loopbreak(s->base);
}

void server_drain(struct server *s, const char *why)
{
    int64_t ms = s->cur.bs->drain_timeout_ms;

    if (s->draining)
        return;
    s->draining = 1;
    log_info("%s: draining (deadline %lld ms)", why, (long long)ms);
    timer_arm(&s->drain_timer, (uint64_t)ms);
    for (int w = 0; w < s->nworkers; w++)
        worker_drain(&s->workers[w]);
}

static void set_reload_error(struct server *s, const char *msg)
{
    free(s->last_reload_error);
    s->last_reload_error = msg ? strdup(msg) : NULL;
}

/* admin.allowedHosts and admin.allowedOrigins take effect at start and
 * on every bootstrap reload. */
static void set_admin_policy(struct admin *a, const struct bootstrap *bs)
{
    const struct admin_policy p = {
        (const char *const *)bs->admin.allowed_hosts.v,
        bs->admin.allowed_hosts.n,
        (const char *const *)bs->admin.allowed_origins.v,
        bs->admin.allowed_origins.n};

    if (admin_set_policy(a, &p) < 0)
        log_error("admin: cannot apply admin.allowedHosts/allowedOrigins "
                  "(out of memory); the previous ones stay");
}

void server_reload(struct server *s)
{
    struct bootstrap *bs;
    struct lset next;
    char *err = NULL;
    char as1[ADDR_STRLEN];

    if (s->draining) {
        log_warn("reload ignored while draining");
        return;
    }
    if (s->acks_pending > 0) {
        /* Workers are still switching to the last set; go once they are. */
        s->reload_queued = 1;
        return;
    }
    bs = bootstrap_load(s->config_path, &err);
    /* The resources are analysed under the new bootstrap's
     * outboundTrafficPolicy (the running one when the file is bad). */
    if (s->source != NULL && !s->rebuild_only)
        source_reload(s->source, bs != NULL ? bs->outbound.mode : -1, 0);
    if (bs == NULL) {
        log_error("reload failed, keeping the running configuration:\n%s",
                  err ? err : "unknown error");
        s->reloads_failed++;
        set_reload_error(s, err);
        free(err);
        return;
    }
    if (s->source != NULL && source_mode(s->source) != bs->outbound.mode) {
        /* The files were not read again (a rebuild for new resources or
         * DNS answers), or what they hold now was refused: the snapshot in
         * effect must be valid under the new mode, or a restart with this
         * bootstrap would refuse it. */
        if (source_check_mode(s->source, bs->outbound.mode, &err) < 0) {
            err_prefix(&err,
                       "outboundTrafficPolicy %s: the resources in effect "
                       "have errors under it:\n",
                       bs->outbound.mode == RES_ALLOW_ANY ? "ALLOW_ANY"
                                                          : "REGISTRY_ONLY");
            log_error("reload failed, keeping the running configuration: %s",
                      err ? err : "out of memory");
            s->reloads_failed++;
            set_reload_error(s, err);
            free(err);
            bootstrap_free(bs);
            return;
        }
        source_set_mode(s->source, bs->outbound.mode);
    }
    if (bootstrap_workers(bs) != s->nworkers)
        log_warn("reload: workers stays %d until restart", s->nworkers);
    if (!bootstrap_dns_equal(bs, s->cur.bs))
        log_warn("reload: dns settings stay as they are until restart");
    if (strcmp(bs->config.dir, s->cur.bs->config.dir) != 0)
        log_warn("reload: config.dir stays %s until restart",
                 s->cur.bs->config.dir[0] ? s->cur.bs->config.dir : "(none)");
    if (!addr_equal(&bs->admin.address, &s->cur.bs->admin.address))
        log_warn("reload: admin.address stays %s until restart",
                 addr_format(&s->cur.bs->admin.address, as1, sizeof(as1)));
    if (lset_build(s, bs, &s->cur, &next, &err) < 0) {
        log_error("reload failed, keeping the running configuration: %s",
                  err ? err : "unknown error");
        s->reloads_failed++;
        set_reload_error(s, err);
        free(err);
        bootstrap_free(bs);
        return;
    }
    log_configure((enum log_level)bs->log.level,
                  (enum log_format)bs->log.format, 2);
    set_admin_policy(s->admin, bs);
    s->old = s->cur;
    s->cur = next;
    stats_view_update(s);
    if (publish(s) < 0)
        log_error("reload: cannot reach every worker (out of memory)");
    if (s->acks_pending == 0)
        lset_release(&s->old);
    s->reloads_ok++;
    set_reload_error(s, NULL);
    arm_cert_timer(s);
    log_info("reload: %zu listener(s) in effect", s->cur.n);
}

/* Admin callbacks. */

static void admin_status(void *arg, struct admin_status *out)
{
    struct server *s = arg;

    memset(out, 0, sizeof(*out));
    out->draining = s->draining;
    out->workers = s->nworkers;
    out->reloads_ok = s->reloads_ok;
    out->reloads_failed = s->reloads_failed;
    out->last_reload_error = s->last_reload_error;
    out->uptime_ms = clock_ms() - s->start_ms;
    out->has_resources = s->source != NULL;
    if (s->source != NULL) {
        struct source_status ss;
        source_status(s->source, &ss);
        out->resources = ss.resources;
        out->resource_reloads_ok = ss.reloads_ok;
        out->resource_reloads_failed = ss.reloads_failed;
        out->resource_error = ss.last_error;
    }
    if (s->dns != NULL) {
        struct dns_stats ds;
        dns_cache_stats(s->dns, &ds);
        out->dns_queries = ds.queries;
        out->dns_failures = ds.failures;
        out->dns_changes = ds.changes;
        out->dns_names = ds.names;
    }
    if (s->jwks != NULL) {
        struct jwks_stats js;
        jwks_cache_stats(s->jwks, &js);
        out->jwks_fetches = js.fetches;
        out->jwks_failures = js.failures;
        out->jwks_changes = js.changes;
        out->jwks_uris = js.uris;
    }
}

static size_t admin_listeners(void *arg, struct stats_block *const **out)
{
    struct server *s = arg;

    *out = s->stats_view;
    return s->stats_view ? s->cur.n : 0;
}

static size_t admin_clusters(void *arg, struct cluster *const **out)
{
    struct server *s = arg;

    *out = s->cluster_view;
    return s->cluster_view ? s->ncluster_view : 0;
}

static const char *routes_cluster_name(void *ctx, int id)
{
    const struct http_routes *r = ctx;

    return id >= 0 && (size_t)id < r->nclusters ? r->clusters[id]->name : NULL;
}

/* A bootstrap listener's routes run on a router too, but what they are
 * is in "listeners" already: gatewayRoutes stays the Gateways'. */
static int is_bootstrap_listener(const struct bootstrap *bs, const char *name)
{
    for (size_t i = 0; bs != NULL && i < bs->listeners.n; i++)
        if (strcmp(bootstrap_listener_at(bs, i)->name, name) == 0)
            return 1;
    return 0;
}

/* The routes each Gateway listener runs now. */
static void gateway_routes_json(struct server *s, struct buf *b)
{
    int first = 1;

    buf_puts(b, "[");
    for (size_t i = 0; i < s->cur.n; i++) {
        struct http_listener_conf *hc = NULL;
        struct http_routes *r;
        if (is_bootstrap_listener(s->cur.bs, s->cur.v[i].name))
            continue;
        if (s->cur.v[i].cl.ops == &http_listener_ops)
            hc = s->cur.v[i].cl.conf;
        else if (s->cur.v[i].cl.ops == &l4_listener_ops)
            hc = ((struct l4_listener_conf *)s->cur.v[i].cl.conf)->http;
        if (hc == NULL)
            continue;
        r = http_listener_conf_routes(hc);
        if (r->router != NULL) {
            buf_puts(b, first ? "{\"listener\":" : ",{\"listener\":");
            json_str(b, s->cur.v[i].name);
            buf_puts(b, ",\"routes\":");
            router_to_json(r->router, b, routes_cluster_name, r);
            buf_puts(b, "}");
            first = 0;
        }
        http_routes_unref(r);
    }
    buf_puts(b, "]");
}

/* The clusters outboundTrafficPolicy made: ALLOW_ANY's passthroughs and
 * REGISTRY_ONLY's BlackHoleCluster, with what they send to. */
static void outbound_clusters_json(struct server *s, struct buf *b)
{
    char as[ADDR_STRLEN];
    int first = 1;

    buf_puts(b, "[");
    for (size_t i = 0; s->cluster_view != NULL && i < s->ncluster_view; i++) {
        const struct cluster *c = s->cluster_view[i];
        if (c->origin == CLUSTER_REGISTRY)
            continue;
        buf_puts(b, first ? "{\"name\":" : ",{\"name\":");
        first = 0;
        json_str(b, c->name);
        buf_printf(b, ",\"outboundTrafficPolicy\":\"%s\",\"tls\":%s,\"sni\":",
                   c->origin == CLUSTER_PASSTHROUGH ? "ALLOW_ANY"
                                                    : "REGISTRY_ONLY",
                   c->tls != NULL ? "true" : "false");
        if (c->sni != NULL)
            json_str(b, c->sni);
        else
            buf_puts(b, "null");
        buf_puts(b, ",\"endpoints\":[");
        for (size_t k = 0; k < c->nendpoints; k++) {
            buf_puts(b, k ? "," : "");
            json_str(b, addr_format(&c->endpoints[k], as, sizeof(as)));
        }
        buf_puts(b, "]}");
    }
    buf_puts(b, "]");
}

static void admin_config(void *arg, struct buf *b)
{
    struct server *s = arg;

    /* The bootstrap's keys at the top, the resources and the routes
     * compiled from them beside them. */
    bootstrap_to_json(s->cur.bs, b);
    if (s->source != NULL && buf_len(b) > 0) {
        b->tail--; /* the bootstrap object's closing brace */
        buf_puts(b, ",\"resources\":");
        source_json(s->source, b);
        buf_puts(b, ",\"gatewayRoutes\":");
        gateway_routes_json(s, b);
        buf_puts(b, ",\"outboundClusters\":");
        outbound_clusters_json(s, b);
        buf_puts(b, "}");
    }
}

static void admin_reload(void *arg)
{
    server_reload(arg);
}

/* A new resource snapshot: rebuild the listeners it shapes (Gateways). */
static void on_resources(void *arg)
{
    struct server *s = arg;

    s->rebuild_only = 1;
    server_reload(s);
    s->rebuild_only = 0;
}

/* A jwksUri's keys arrived or changed: the routes that verify with them
 * change. */
static void on_jwks_change(void *arg)
{
    on_resources(arg);
}

/* A DNS name's addresses changed: the clusters built from it change. */
static void on_dns_change(void *arg)
{
    on_resources(arg);
}

static void admin_quit(void *arg)
{
    server_drain(arg, "admin /quitquitquit");
}

/* The shortest certificate check interval of the running listeners;
 * 0 when no listener terminates TLS. */
static uint64_t cert_interval(const struct server *s)
{
    uint64_t ms = 0;

    for (size_t i = 0; i < s->cur.n; i++) {
        uint64_t t = s->cur.v[i].tls_reload_ms;
        if (t > 0 && (ms == 0 || t < ms))
            ms = t;
    }
    return ms;
}

static void arm_cert_timer(struct server *s)
{
    uint64_t ms = cert_interval(s);

    timer_cancel(&s->cert_timer);
    if (ms > 0 && !s->draining)
        timer_arm(&s->cert_timer, ms);
}

/* Certificate files changed on disk are loaded without a restart; a bad
 * file is reported once and the running certificate stays. why ends the
 * log line of a reload ("" or " (reason)"). */
static void check_certs(struct server *s, const char *why)
{
    for (size_t i = 0; i < s->cur.n; i++) {
        char *err = NULL;
        int r = compile_tls_check(&s->cur.v[i].cl, &err);

        if (r > 0) {
            s->cert_reloads++;
            log_info("listener %s: certificates reloaded%s", s->cur.v[i].name,
                     why);
        } else if (r < 0) {
            s->cert_reload_failures++;
            log_error("listener %s: certificate reload failed, keeping the "
                      "running certificates: %s",
                      s->cur.v[i].name, err ? err : "unknown error");
        }
        free(err);
    }
}

static void on_cert_timer(void *arg)
{
    struct server *s = arg;

    check_certs(s, "");
    arm_cert_timer(s);
}

/*
 * The node's mesh certificate rotated. The CA node stores the new files
 * before it publishes, so mesh-facing (ISTIO_MUTUAL) listeners can take
 * them now instead of at the next periodic check: a rotation comes at
 * half the certificate's life, and with a short certTTL the old one
 * expires about a second later, sooner than a check period may end.
 * Main thread, called from ca_identity_publish().
 */
static void on_identity(void *arg, struct ca_cred *cred)
{
    struct server *s = arg;

    (void)cred;
    if (!s->draining)
        check_certs(s, " (mesh certificate rotated)");
}

struct server *server_new(struct event_base *base, struct bootstrap *bs,
                          const char *config_path, struct ca_identity *identity,
                          int *config_error, char **err)
{
    struct server *s = calloc(1, sizeof(*s));
    struct lset empty = {0};
    struct worker_hooks hooks;
    struct admin_ops ops = {NULL,           admin_status, admin_listeners,
                            admin_clusters, admin_config, admin_quit,
                            admin_reload};
    char as[ADDR_STRLEN];

    *err = NULL;
    *config_error = 0;
    if (s == NULL) {
        bootstrap_free(bs);
        return NULL;
    }
    s->base = base;
    timer_init(&s->drain_timer, base, on_drain_deadline, s);
    timer_init(&s->cert_timer, base, on_cert_timer, s);
    s->identity = identity;
    s->identity_fn.current = identity_current;
    s->identity_fn.ssl = ca_identity_ssl;
    s->identity_fn.arg = identity;
    s->start_ms = clock_ms();
    s->config_path = strdup(config_path);
    s->nworkers = bootstrap_workers(bs);
    s->inbox = mq_new(base);
    s->workers = calloc((size_t)s->nworkers, sizeof(*s->workers));
    if (s->config_path == NULL || s->inbox == NULL || s->workers == NULL) {
        bootstrap_free(bs);
        *err = strdup("out of memory");
        goto fail;
    }
    /* The admin address first: a second strait started by mistake with
     * the same file fails here, before SO_REUSEPORT lets it share (and
     * steal connections from) the running one's listeners. */
    ops.arg = s;
    s->admin = admin_new(base, &bs->admin.address, &ops, err);
    if (s->admin == NULL) {
        err_set(err, "cannot start");
        err_prefix(err, "admin API: ");
        bootstrap_free(bs);
        goto fail;
    }
    set_admin_policy(s->admin, bs);
    if (bs->config.dir[0] != '\0') {
        struct dns_conf dc = {bs->dns.nameservers.v, bs->dns.nameservers.n,
                              (uint64_t)bs->dns.min_refresh_ms,
                              (uint64_t)bs->dns.timeout_ms};
        s->dns = dns_cache_new(base, &dc, on_dns_change, s, err);
        s->dns_fn.lookup = dns_lookup;
        s->dns_fn.arg = s->dns;
        if (s->dns == NULL) {
            bootstrap_free(bs);
            goto fail;
        }
        s->jwks = jwks_cache_new(base, on_jwks_change, s);
        s->jwks_fn.get = jwks_get;
        s->jwks_fn.arg = s->jwks;
        if (s->jwks == NULL) {
            *err = strdup("out of memory");
            bootstrap_free(bs);
            goto fail;
        }
        s->source =
            source_new(base, bs->config.dir, (uint64_t)bs->config.debounce_ms,
                       bs->outbound.mode, on_resources, s, err);
        if (s->source == NULL) {
            *config_error = 1;
            bootstrap_free(bs);
            goto fail;
        }
    }
    if (lset_build(s, bs, &empty, &s->cur, err) < 0) {
        bootstrap_free(bs);
        goto fail;
    }
    stats_view_update(s);
    hooks.main = s->inbox;
    hooks.event = on_worker_event;
    hooks.arg = s;
    for (int w = 0; w < s->nworkers; w++) {
        if (worker_init(&s->workers[w], w, &hooks) < 0 ||
            worker_start(&s->workers[w]) < 0) {
            *err = strdup("cannot start worker threads");
            goto fail;
        }
    }
    if (publish(s) < 0) {
        *err = strdup("out of memory");
        goto fail;
    }
    arm_cert_timer(s);
    if (identity != NULL && ca_identity_watch(identity, on_identity, s) < 0) {
        *err = strdup("too many watchers of the mesh certificate");
        goto fail;
    }
    log_info("strait %s started: %d worker(s), %zu listener(s), admin on %s",
             PACKAGE_VERSION, s->nworkers, s->cur.n,
             addr_format(&bs->admin.address, as, sizeof(as)));
    return s;
fail:
    server_free(s);
    return NULL;
}

void server_free(struct server *s)
{
    if (s == NULL)
        return;
    if (s->workers != NULL) {
        for (int w = 0; w < s->nworkers; w++)
            worker_stop(&s->workers[w]);
        for (int w = 0; w < s->nworkers; w++)
            worker_dispose(&s->workers[w]);
    }
    /* Run what workers posted last so their messages are freed. */
    s->stopping = 1;
    if (s->inbox != NULL)
        mq_drain(s->inbox);
    mq_free(s->inbox);
    admin_free(s->admin);
    source_free(s->source);
    dns_cache_free(s->dns);
    jwks_cache_free(s->jwks);
    timer_dispose(&s->drain_timer);
    timer_dispose(&s->cert_timer);
    if (s->identity != NULL)
        ca_identity_unwatch(s->identity, on_identity, s);
    lset_release(&s->old);
    /* Drain may have closed cur's sockets already (NULL entries). */
    lset_release(&s->cur);
    free(s->stats_view);
    free(s->cluster_view);
    free(s->last_reload_error);
    free(s->workers);
    free(s->config_path);
    free(s);
}
