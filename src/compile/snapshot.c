/*
 * Snapshots: the inputs in effect compiled into what workers run, each
 * part kept across snapshots by structural identity, and the difference
 * between two snapshots for publishing.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/router-int.h"
#include "compile/snapshot.h"
#include "compile/lua.h"
#include "config/bootstrap.h"
#include "config/resource.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/series.h"
#include "core/stats.h"
#include "net/listener.h"
#include "net/overload.h"
#include "proxy/stats.h"
#include "compile/metrics.h"
#include "proxy/http_listener.h"
#include "proxy/l4_listener.h"
#include "upstream/cluster.h"

/* ---- identities --------------------------------------------------------- */

int snapshot_id_equal(const struct ident_id *a, const struct ident_id *b)
{
    return ident_equal(a, b);
}

/* A bootstrap listener's keys, as conf_identity() bytes. */
static void ident_listener(struct ident *d, const struct bootstrap_listener *bl)
{
    struct conf_sink sink = {ident_sink_write, d};

    ident_u64(d, 'L', 0);
    bootstrap_listener_identity(bl, &sink);
}

static int cluster_identity(const struct bootstrap *bs, size_t i, int nworkers,
                            struct ident_id *out)
{
    struct ident d;

    ident_init(&d);
    ident_str(&d, 'k', "bootstrap-cluster");
    ident_conf(&d, 'c', &bootstrap_cluster_section,
               bootstrap_cluster_at(bs, i));
    ident_u64(&d, 'w', (uint64_t)nworkers);
    return ident_finish(&d, out);
}

/* The access logging a listener compiles in. */
static void ident_alog(struct ident *d, const struct bootstrap_log *lg)
{
    ident_u64(d, 'l', (uint64_t)lg->access_log);
    ident_u64(d, 'e', (uint64_t)lg->access_log_encoding);
    ident_str(d, 'f', lg->access_log_format);
}

/* The metric labels a listener records with: a relabelled node makes
 * new listeners. */
static void ident_metrics(struct ident *d, const struct compile_inputs *in)
{
    struct series_labels *l =
        in->metrics != NULL ? metrics_source_labels(in->bs) : NULL;

    ident_str(d, 'M', l != NULL ? l->text : "");
    series_labels_unref(l);
}

/* The tracing a listener compiles in (the exporter is the process's). */
static void ident_tracing(struct ident *d, const struct bootstrap *bs)
{
    ident_u64(d, 't', (uint64_t)(bs->tracing.sampling * 10000.0 + 0.5));
}

/* A bootstrap listener: its own keys, the logging it compiles in, and
 * for HTTP the clusters its routes index (by identity, in order). */
static int listener_identity(const struct compile_inputs *in,
                             const struct bootstrap_listener *bl,
                             const struct ident_id *cluster_ids,
                             size_t nclusters, struct ident_id *out)
{
    struct ident d;

    ident_init(&d);
    ident_str(&d, 'k', "bootstrap-listener");
    ident_listener(&d, bl);
    ident_alog(&d, &in->bs->log);
    ident_tracing(&d, in->bs);
    ident_u64(&d, 'w', (uint64_t)in->nworkers);
    ident_metrics(&d, in);
    if (bl->protocol == BOOTSTRAP_HTTP) {
        ident_u64(&d, 'n', nclusters);
        for (size_t i = 0; i < nclusters; i++)
            ident_sub(&d, &cluster_ids[i]);
    }
    return ident_finish(&d, out);
}

static void id_strmap(struct ident *d, const struct conf_strmap *m)
{
    ident_u64(d, 'm', m->n);
    for (size_t i = 0; i < m->n; i++) {
        ident_str(d, 'K', m->v[i].key);
        ident_str(d, 'V', m->v[i].val);
    }
}

/* A Gateway listener without its routes (rebuilt on every snapshot and
 * published into the running conf) and, for L4, without its rules: the
 * servers on the port and what of the bootstrap the conf is built from. */
static void gateway_base(struct ident *d, const struct compile_inputs *in,
                         const struct gw_listener *g)
{
    const struct bootstrap *bs = in->bs;

    ident_str(d, 'k', g->l4 ? "gateway-l4" : "gateway-http");
    ident_sub(d, &g->id);
    ident_alog(d, &bs->log);
    ident_tracing(d, bs);
    ident_u64(d, 'w', (uint64_t)in->nworkers);
    /* An L4 listener's HTTP part (a port shared with HTTPS servers) takes
     * them too. */
    ident_conf(d, 'h', &bootstrap_gateway_http_section, &bs->http);
    ident_metrics(d, in);
    if (!g->l4)
        return;
    ident_u64(d, 'o', (uint64_t)bs->outbound.mode);
    ident_str(d, 's', bs->node.ns);
    id_strmap(d, &bs->node.labels);
    /* Locality load balancing ranks endpoints against these. */
    ident_str(d, 'L', bs->node.locality);
    ident_str(d, 'N', bs->node.network);
    ident_str(d, 't', bs->trust_domain);
    ident_str(d, 'c', bs->credentials.dir);
}

/* Is r read when an L4 listener's rules are compiled? VirtualServices
 * with tls or tcp rules (all of them on a port shared with HTTPS
 * servers, whose HTTP part is compiled with the rules), what clusters
 * are built from, and the policies checked per connection. */
static int l4_reads(const struct resource *r, int shared)
{
    const struct res_virtual_service *vs;

    switch (r->kind) {
    case RES_VIRTUAL_SERVICE:
        vs = res_virtual_service(r);
        return shared || vs->tls.n > 0 || vs->tcp.n > 0;
    case RES_DESTINATION_RULE:
    case RES_SERVICE_ENTRY:
    case RES_WORKLOAD_ENTRY:
    case RES_SERVICE:
    case RES_ENDPOINT_SLICE:
    case RES_NODE:   /* the locality of slice endpoints */
    case RES_POD:    /* labels, locality, network of slice endpoints */
    case RES_SECRET: /* a DestinationRule's credentialName */
    case RES_AUTHORIZATION_POLICY:
    case RES_PEER_AUTHENTICATION:
        return 1;
    case RES_REQUEST_AUTHENTICATION:
    case RES_LUA_POLICY:
    case RES_REFERENCE_GRANT: /* which LuaPolicy targets are granted */
        return shared;
    default:
        return 0;
    }
}

/* The content of the resources an L4 listener's rules are compiled from:
 * each one's kind, name and spec as strait runs it. */
static void l4_resources(struct ident *d, const struct resource_set *set,
                         int shared)
{
    if (set == NULL)
        return;
    ident_str(d, 'D', set->domain);
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        if (!l4_reads(r, shared))
            continue;
        ident_u64(d, 'R', (uint64_t)r->kind);
        ident_str(d, 'N', r->meta.ns);
        ident_str(d, 'n', r->meta.name);
        id_strmap(d, &r->meta.labels);
        ident_res_spec(d, 'S', r);
    }
}

/*
 * The DNS answers a build used: a lookup table in front of the inputs'
 * that writes every name looked up and the addresses it gave into an
 * identity, and keeps the names so the next build can ask for them again
 * before deciding to compile.
 */
struct dns_rec {
    const struct compile_dns *real;
    struct compile_dns fn; /* what compile calls */
    struct ident *id;
    char **names;
    size_t nnames;
    int oom;
};

struct rec_each {
    struct dns_rec *r;
    void (*each)(void *ctx, const char *ip);
    void *ctx;
};

static void rec_each_fn(void *arg, const char *ip)
{
    struct rec_each *e = arg;

    ident_str(e->r->id, 'A', ip);
    if (e->each != NULL)
        e->each(e->ctx, ip);
}

static size_t rec_lookup_min(void *arg, const char *name, uint64_t min_ttl_ms,
                             void (*each)(void *ctx, const char *ip), void *ctx)
{
    struct dns_rec *r = arg;
    struct rec_each e = {r, each, ctx};
    char **nv;
    size_t n;

    ident_str(r->id, 'Q', name);
    if (min_ttl_ms > 0 && r->real->lookup_min != NULL)
        n = r->real->lookup_min(r->real->arg, name, min_ttl_ms, rec_each_fn,
                                &e);
    else
        n = r->real->lookup(r->real->arg, name, rec_each_fn, &e);
    ident_u64(r->id, 'E', n);
    nv = realloc(r->names, (r->nnames + 1) * sizeof(*nv));
    if (nv == NULL || (nv[r->nnames] = strdup(name)) == NULL) {
        r->oom = 1;
        if (nv != NULL)
            r->names = nv;
        return n;
    }
    r->names = nv;
    r->nnames++;
    return n;
}

static size_t rec_lookup(void *arg, const char *name,
                         void (*each)(void *ctx, const char *ip), void *ctx)
{
    return rec_lookup_min(arg, name, 0, each, ctx);
}

static void rec_init(struct dns_rec *r, const struct compile_dns *real,
                     struct ident *id)
{
    memset(r, 0, sizeof(*r));
    r->real = real;
    r->fn.lookup = rec_lookup;
    r->fn.lookup_min = rec_lookup_min;
    r->fn.arg = r;
    r->id = id;
}

static void names_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/*
 * The JWKS key sets a build used, recorded like the DNS answers: every
 * jwksUri asked for and the document it gave go into an identity, and
 * the uris are kept so the next build can ask for them again.
 */
struct jwks_rec {
    const struct compile_jwks *real;
    struct compile_jwks fn; /* what compile calls */
    struct ident *id;
    char **uris;
    int64_t *timeouts;
    size_t n;
    int oom;
};

static const char *jrec_get(void *arg, const char *uri, int64_t timeout_ms,
                            size_t *n)
{
    struct jwks_rec *r = arg;
    const char *doc = r->real->get(r->real->arg, uri, timeout_ms, n);
    char **nu;
    int64_t *nt;

    ident_str(r->id, 'U', uri);
    ident_u64(r->id, 'T', (uint64_t)timeout_ms);
    if (doc != NULL)
        ident_bytes(r->id, 'J', doc, *n);
    else
        ident_u64(r->id, '-', 0);
    nu = realloc(r->uris, (r->n + 1) * sizeof(*nu));
    if (nu != NULL)
        r->uris = nu;
    nt = realloc(r->timeouts, (r->n + 1) * sizeof(*nt));
    if (nt != NULL)
        r->timeouts = nt;
    if (nu == NULL || nt == NULL || (nu[r->n] = strdup(uri)) == NULL) {
        r->oom = 1;
        return doc;
    }
    nt[r->n++] = timeout_ms;
    return doc;
}

static void jrec_init(struct jwks_rec *r, const struct compile_jwks *real,
                      struct ident *id)
{
    memset(r, 0, sizeof(*r));
    r->real = real;
    r->fn.get = jrec_get;
    r->fn.arg = r;
    r->id = id;
}

static void jrec_dispose(struct jwks_rec *r)
{
    names_free(r->uris, r->n);
    free(r->timeouts);
    r->uris = NULL;
    r->timeouts = NULL;
    r->n = 0;
}

/* Is vs left out of g's routes? Only when it names gateways and none of
 * them is one of g's servers' (an empty list binds to mesh, but it may be
 * a delegate: counted). */
static int vs_elsewhere(const struct resource *r, const struct gw_listener *g)
{
    const struct res_virtual_service *vs = res_virtual_service(r);

    if (vs->gateways.n == 0)
        return 0;
    for (size_t i = 0; i < vs->gateways.n; i++)
        for (size_t k = 0; k < g->nservers; k++)
            if (rt_gateway_ref_eq(vs->gateways.v[i], r->meta.ns,
                                  g->servers[k].gateway))
                return 0;
    return 1;
}

/* Is r read when g's routes are compiled? The VirtualServices bound to
 * it (or that may be delegates), what clusters are built from, and the
 * policies checked per request. */
static int routes_read(const struct resource *r, const struct gw_listener *g)
{
    switch (r->kind) {
    case RES_VIRTUAL_SERVICE:
        return !vs_elsewhere(r, g);
    case RES_DESTINATION_RULE:
    case RES_SERVICE_ENTRY:
    case RES_WORKLOAD_ENTRY:
    case RES_SERVICE:
    case RES_ENDPOINT_SLICE:
    case RES_NODE:   /* the locality of slice endpoints */
    case RES_POD:    /* labels, locality, network of slice endpoints */
    case RES_SECRET: /* a DestinationRule's credentialName */
    case RES_AUTHORIZATION_POLICY:
    case RES_REQUEST_AUTHENTICATION:
    case RES_PEER_AUTHENTICATION:
    case RES_LUA_POLICY:
    case RES_REFERENCE_GRANT: /* which LuaPolicy targets are granted */
        return 1;
    default:
        return 0;
    }
}

/* The networks clusters are split by (compile/network.h): the node's,
 * meshNetworks and the gateways added at run time. */
static void ident_nets(struct ident *d, const struct compile_inputs *in)
{
    ident_str(d, 'K', in->bs->node.network);
    ident_conf(d, 'X', &bootstrap_mesh_networks_section,
               &in->bs->mesh_networks);
    ident_u64(d, 'G', in->ngateways);
    for (size_t i = 0; i < in->ngateways; i++) {
        const struct net_gateway *g = &in->gateways[i];
        ident_str(d, 'g', g->network ? g->network : "");
        ident_str(d, 'a', g->address ? g->address : "");
        ident_u64(d, 'p', g->port);
        ident_str(d, 'z', g->source ? g->source : "");
        ident_str(d, 'y', g->identity ? g->identity : "");
    }
}

/* The roots ISTIO_MUTUAL clusters trust besides the node certificate's
 * own (linked sites', the mesh's bundle), by digest: a change rebuilds
 * the listeners whose clusters verify with them. */
static void ident_roots(struct ident *d, const struct compile_inputs *in)
{
    const struct compile_identity *id = in->identity;

    ident_str(d, 'Y',
              id != NULL && id->link_roots_pin ? id->link_roots_pin : "");
    ident_str(d, 'Z',
              id != NULL && id->mesh_roots_pin ? id->mesh_roots_pin : "");
}

/* What a Gateway HTTP listener's routes are compiled from besides DNS,
 * JWKS, files and clusters: the bootstrap bits they read and the
 * resources, each with its content. */
static void route_inputs(struct ident *d, const struct compile_inputs *in,
                         const struct gw_listener *g)
{
    const struct bootstrap *bs = in->bs;
    const struct resource_set *set = in->set;

    ident_str(d, 'k', "gateway-routes");
    ident_str(d, 's', bs->node.ns);
    id_strmap(d, &bs->node.labels);
    /* Locality load balancing ranks endpoints against these. */
    ident_str(d, 'L', bs->node.locality);
    ident_str(d, 'N', bs->node.network);
    ident_str(d, 't', bs->trust_domain);
    ident_str(d, 'c', bs->credentials.dir);
    ident_u64(d, 'o', (uint64_t)bs->outbound.mode);
    ident_u64(d, 'd', in->dns != NULL);
    ident_u64(d, 'j', in->jwks != NULL);
    ident_u64(d, 'y', in->identity != NULL);
    ident_roots(d, in);
    ident_nets(d, in);
    if (set == NULL)
        return;
    ident_str(d, 'D', set->domain);
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        if (!routes_read(r, g))
            continue;
        ident_u64(d, 'R', (uint64_t)r->kind);
        ident_str(d, 'N', r->meta.ns);
        ident_str(d, 'n', r->meta.name);
        id_strmap(d, &r->meta.labels);
        ident_res_spec(d, 'S', r);
    }
    /* LuaPolicy files are inputs too: an edited script is a change. */
    for (size_t i = 0; i < bs->lua.path.n; i++)
        ident_str(d, 'P', bs->lua.path.v[i]);
    compile_lua_files(d, bs, set);
}

/* What a routes build recorded, while it compiles. */
struct routes_rec {
    struct ident dns, jwks;
    struct dns_rec drec;
    struct jwks_rec jrec;
    struct istio_used used;
};

static void routes_rec_init(struct routes_rec *rr,
                            const struct compile_inputs *in)
{
    ident_init(&rr->dns);
    ident_init(&rr->jwks);
    rec_init(&rr->drec, in->dns, &rr->dns);
    jrec_init(&rr->jrec, in->jwks, &rr->jwks);
    istio_used_init(&rr->used);
}

static void routes_rec_dispose(struct routes_rec *rr)
{
    ident_abandon(&rr->dns);
    ident_abandon(&rr->jwks);
    names_free(rr->drec.names, rr->drec.nnames);
    jrec_dispose(&rr->jrec);
    istio_used_dispose(&rr->used);
}

/* routes_id() is pre and what rr recorded, clusters' identities as the
 * bytes of clusters; -1 when memory ran out. */
static int routes_id(const struct ident *pre, struct routes_rec *rr,
                     const struct ident_id *clusters, struct ident_id *out)
{
    struct ident t;

    ident_init(&t);
    ident_copy(&t, pre);
    ident_nest(&t, 'Q', &rr->dns);
    ident_nest(&t, 'W', &rr->jwks);
    ident_nest(&t, 'F', &rr->used.files);
    if (clusters->bytes == NULL)
        t.oom = 1;
    else
        ident_bytes(&t, 'C', clusters->bytes, clusters->len);
    if (rr->drec.oom || rr->jrec.oom || rr->used.oom)
        t.oom = 1;
    return ident_finish(&t, out);
}

/* routes_keep_lists() moves what rr recorded (names, uris, paths) to l. */
static void routes_keep_lists(struct snapshot_listener *l,
                              struct routes_rec *rr)
{
    l->dns_names = rr->drec.names;
    l->ndns_names = rr->drec.nnames;
    rr->drec.names = NULL;
    rr->drec.nnames = 0;
    l->jwks_uris = rr->jrec.uris;
    l->jwks_timeouts = rr->jrec.timeouts;
    l->njwks = rr->jrec.n;
    rr->jrec.uris = NULL;
    rr->jrec.timeouts = NULL;
    rr->jrec.n = 0;
    l->paths = rr->used.paths;
    l->npaths = rr->used.npaths;
    rr->used.paths = NULL;
    rr->used.npaths = 0;
}

/* routes_finish() gives l the identity of the routes just compiled with
 * rr recording; -1 when memory ran out. */
static int routes_finish(struct snapshot_listener *l, const struct ident *pre,
                         struct routes_rec *rr)
{
    if (ident_finish(&rr->used.clusters, &l->routes_clusters) < 0 ||
        routes_id(pre, rr, &l->routes_clusters, &l->routes_id) < 0)
        return -1;
    ident_init(&rr->used.clusters); /* finished: disposable again */
    routes_keep_lists(l, rr);
    return 0;
}

/* routes_try_keep() is 1 when old's routes were compiled from what they
 * would be now: pre (the listener, the bootstrap bits, the resources),
 * and the same answers, key sets and files for what old's routes asked
 * for, asked again (only when pre is equal: asking keeps a name in the
 * DNS cache); the clusters are then those old's routes point to.
 * Then l gets the identity and the lists. -1 when memory runs out. */
static int routes_try_keep(const struct compile_inputs *in,
                           const struct snapshot_listener *old,
                           struct snapshot_listener *l, const struct ident *pre)
{
    struct routes_rec rr;
    struct ident_id cand;
    size_t n;
    int same;

    /* Asking again marks names and uris as in use (the caches drop the
     * rest): only when everything else is equal. */
    if (old == NULL || !ident_has_prefix(&old->routes_id, pre))
        return 0;
    routes_rec_init(&rr, in);
    for (size_t i = 0; in->dns != NULL && i < old->ndns_names; i++)
        rec_lookup(&rr.drec, old->dns_names[i], NULL, NULL);
    for (size_t i = 0; in->jwks != NULL && i < old->njwks; i++)
        jrec_get(&rr.jrec, old->jwks_uris[i], old->jwks_timeouts[i], &n);
    for (size_t i = 0; i < old->npaths; i++)
        istio_file_ident(&rr.used.files, old->paths[i]);
    if (routes_id(pre, &rr, &old->routes_clusters, &cand) < 0) {
        routes_rec_dispose(&rr);
        return -1;
    }
    same = ident_equal(&old->routes_id, &cand);
    if (!same) {
        ident_id_dispose(&cand);
        routes_rec_dispose(&rr);
        return 0;
    }
    if (ident_id_copy(&l->routes_clusters, &old->routes_clusters) < 0) {
        ident_id_dispose(&cand);
        routes_rec_dispose(&rr);
        return -1;
    }
    l->routes_id = cand;
    /* The files were not read by a cluster this time: old's paths. */
    for (size_t i = 0; i < old->npaths; i++) {
        char **nv = realloc(rr.used.paths, (i + 1) * sizeof(*nv));
        if (nv == NULL || (nv[i] = strdup(old->paths[i])) == NULL) {
            if (nv != NULL)
                rr.used.paths = nv;
            routes_rec_dispose(&rr);
            return -1;
        }
        rr.used.paths = nv;
        rr.used.npaths = i + 1;
    }
    routes_keep_lists(l, &rr);
    routes_rec_dispose(&rr);
    return 1;
}

/* ---- the snapshot ------------------------------------------------------- */

struct snapshot *snapshot_ref(struct snapshot *s)
{
    s->refs++;
    return s;
}

static void listener_dispose(struct snapshot_listener *l)
{
    http_routes_unref(l->staged);
    if (l->cl.conf != NULL)
        l->cl.ops->conf_unref(l->cl.conf);
    listener_socks_unref(l->socks);
    stats_block_unref(l->stats);
    cx_limit_unref(l->cx);
    ident_id_dispose(&l->id);
    ident_id_dispose(&l->base);
    names_free(l->dns_names, l->ndns_names);
    ident_id_dispose(&l->routes_id);
    ident_id_dispose(&l->routes_clusters);
    names_free(l->jwks_uris, l->njwks);
    free(l->jwks_timeouts);
    names_free(l->paths, l->npaths);
    free(l->name);
}

void snapshot_unref(struct snapshot *s)
{
    if (s == NULL || --s->refs > 0)
        return;
    for (size_t i = 0; i < s->n; i++)
        listener_dispose(&s->v[i]);
    free(s->v);
    compile_clusters_free(s->clusters, s->nclusters);
    for (size_t i = 0; s->cluster_ids != NULL && i < s->nclusters; i++)
        ident_id_dispose(&s->cluster_ids[i]);
    free(s->cluster_ids);
    istio_cluster_map_dispose(&s->gwclusters);
    gw_set_dispose(&s->gws);
    free(s->stats_view);
    series_labels_unref(s->metrics_src);
    free(s->cluster_view);
    free(s);
}

void snapshot_commit(struct snapshot *s)
{
    for (size_t i = 0; i < s->n; i++) {
        struct snapshot_listener *l = &s->v[i];

        if (l->staged == NULL)
            continue;
        http_listener_conf_set_routes(snapshot_listener_http(l), l->staged);
        l->staged = NULL;
    }
}

void snapshot_close_sockets(struct snapshot *s)
{
    for (size_t i = 0; i < s->n; i++) {
        listener_socks_unref(s->v[i].socks);
        s->v[i].socks = NULL;
    }
}

void snapshot_keep_paths(struct snapshot *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].socks != NULL)
            s->v[i].socks->keep_path = 1;
}

const struct snapshot_listener *snapshot_listener_find(const struct snapshot *s,
                                                       const char *name)
{
    for (size_t i = 0; s != NULL && i < s->n; i++)
        if (strcmp(s->v[i].name, name) == 0)
            return &s->v[i];
    return NULL;
}

static const struct snapshot_listener *find_addr(const struct snapshot *s,
                                                 const struct addr *a)
{
    for (size_t i = 0; s != NULL && i < s->n; i++)
        if (s->v[i].socks != NULL && addr_equal(&s->v[i].address, a))
            return &s->v[i];
    return NULL;
}

struct http_listener_conf *
snapshot_listener_http(const struct snapshot_listener *l)
{
    if (l->cl.conf == NULL)
        return NULL;
    switch (l->cl.ops->kind) {
    case PLISTENER_HTTP:
        return l->cl.conf;
    case PLISTENER_L4:
        return ((struct l4_listener_conf *)l->cl.conf)->http;
    }
    return NULL;
}

/* The bootstrap clusters: each kept from prev when its identity is. */
static int build_clusters(struct snapshot *s, const struct compile_inputs *in,
                          const struct snapshot *prev, char **err)
{
    const struct bootstrap *bs = in->bs;
    size_t n = bs->clusters.n;
    int same = prev != NULL && prev->nclusters == n;

    s->cluster_ids = calloc(n ? n : 1, sizeof(*s->cluster_ids));
    if (s->cluster_ids == NULL)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        if (cluster_identity(bs, i, in->nworkers, &s->cluster_ids[i]) < 0)
            goto oom;
        if (same &&
            !snapshot_id_equal(&s->cluster_ids[i], &prev->cluster_ids[i]))
            same = 0;
    }
    if (same) {
        /* Nothing changed: no cluster is built again. */
        s->clusters = calloc(n ? n : 1, sizeof(*s->clusters));
        if (s->clusters == NULL)
            goto oom;
        for (size_t i = 0; i < n; i++)
            s->clusters[i] = cluster_ref(prev->clusters[i]);
        s->nclusters = n;
        return 0;
    }
    s->clusters = compile_clusters(bs, in->nworkers, err);
    if (s->clusters == NULL)
        return -1;
    s->nclusters = n;
    /* A cluster whose inputs did not change stays the object prev has,
     * with its pools and counters, even when others changed. */
    for (size_t i = 0; prev != NULL && i < n; i++)
        for (size_t k = 0; k < prev->nclusters; k++)
            if (snapshot_id_equal(&s->cluster_ids[i], &prev->cluster_ids[k])) {
                cluster_unref(s->clusters[i]);
                s->clusters[i] = cluster_ref(prev->clusters[k]);
                break;
            }
    return 0;
oom:
    err_set(err, "out of memory");
    return -1;
}

/* A kept L4 listener's clusters, or a Gateway HTTP listener's kept
 * routes' (cl, n), stay in the identity map, for the admin and for the
 * next snapshot to reuse. */
static int carry_clusters(struct snapshot *s, const struct snapshot *prev,
                          struct cluster *const *cl, size_t n)
{
    size_t pos = 0;
    const struct ident_id *k;
    void *v;

    while (ident_map_next(&prev->gwclusters, &pos, &k, &v)) {
        for (size_t i = 0; i < n; i++) {
            if (cl[i] != v || ident_map_get(&s->gwclusters, k) != NULL)
                continue;
            if (ident_map_put(&s->gwclusters, k, v) < 0)
                return -1;
            cluster_ref(v);
            break;
        }
    }
    return 0;
}

/* carry_routes() carries the clusters of l's routes (kept). */
static int carry_routes(struct snapshot *s, const struct snapshot *prev,
                        const struct snapshot_listener *l)
{
    struct http_routes *r =
        http_listener_conf_routes(snapshot_listener_http(l));
    int rc = r != NULL ? carry_clusters(s, prev, r->clusters, r->nclusters) : 0;

    http_routes_unref(r);
    return rc;
}

/*
 * keep_http_part() lets a rebuilt L4 listener l of a shared port keep
 * prev's HTTP part when only its rules' inputs changed: l's conf takes
 * prev's HTTP conf, and l's new routes go to *staged, published into it
 * once the whole snapshot is built. Workers then hand the running HTTP
 * listener to the new L4 one (l4_listener inherit), so HTTPS connections
 * outlive resource changes as on a port of HTTP servers only.
 */
static void keep_http_part(const struct snapshot_listener *prev,
                           struct snapshot_listener *l,
                           struct http_routes **staged)
{
    struct l4_listener_conf *nc, *pc;

    if (prev == NULL || prev->cl.ops->kind != PLISTENER_L4 ||
        l->cl.ops->kind != PLISTENER_L4 ||
        !snapshot_id_equal(&prev->base, &l->base))
        return;
    nc = l->cl.conf;
    pc = prev->cl.conf;
    if (nc->http == NULL || pc->http == NULL)
        return;
    *staged = http_listener_conf_routes(nc->http);
    http_listener_conf_unref(nc->http);
    nc->http = http_listener_conf_ref(pc->http);
}

/* What build_listener() works from: a bootstrap listener or a Gateway's. */
struct lspec {
    const char *name;
    struct addr address;
    int backlog;
    uint64_t tls_reload_ms;
    const struct bootstrap_listener *bl;
    const struct gw_listener *gw;
};

/* l4_try_keep() is 1 when old's rules were compiled from what they would
 * be now: the same listener, resources (pre: base and resources, as
 * identity bytes) and the same answers for the DNS names old's clusters
 * looked up, asked again (which also keeps them in the DNS cache). Then
 * l gets the identity and the names. */
static int l4_try_keep(const struct compile_inputs *in,
                       const struct snapshot_listener *old,
                       struct snapshot_listener *l, const struct ident *pre)
{
    struct ident t;
    struct dns_rec rec;
    struct ident_id cand;
    int same;

    if (old == NULL || !snapshot_id_equal(&old->base, &l->base))
        return 0;
    ident_init(&t);
    ident_copy(&t, pre);
    rec_init(&rec, in->dns, &t);
    for (size_t i = 0; in->dns != NULL && i < old->ndns_names; i++)
        rec_lookup(&rec, old->dns_names[i], NULL, NULL);
    if (ident_finish(&t, &cand) < 0 || rec.oom) {
        ident_id_dispose(&cand);
        names_free(rec.names, rec.nnames);
        return -1;
    }
    same = snapshot_id_equal(&old->id, &cand);
    if (!same) {
        ident_id_dispose(&cand);
        names_free(rec.names, rec.nnames);
        return 0;
    }
    l->id = cand;
    l->dns_names = rec.names;
    l->ndns_names = rec.nnames;
    return 1;
}

/* build_listener() adds the listener sp to s: old's when its identity is
 * unchanged, else compiled. -1 with *err. */
static int build_listener(struct snapshot *s, const struct compile_inputs *in,
                          const struct snapshot *prev, const struct lspec *sp,
                          struct http_routes **staged, char **err)
{
    const struct snapshot_listener *old =
        snapshot_listener_find(prev, sp->name);
    const struct snapshot_listener *same_addr = find_addr(prev, &sp->address);
    struct snapshot_listener *l = &s->v[s->n];
    const struct ident_map *prev_map = prev != NULL ? &prev->gwclusters : NULL;
    const struct net_inputs nets = {in->bs->node.network,
                                    &in->bs->mesh_networks, in->gateways,
                                    in->ngateways};
    struct compile_env env = {
        in->nworkers, in->dns,   in->identity, in->jwks, NULL,    in->alog_sink,
        in->spans,    in->dicts, in->geoip,    &nets,    in->stop};
    struct ident d, pre;
    struct dns_rec rec;
    struct routes_rec rr;
    int l4 = sp->gw != NULL && sp->gw->l4, kept = 0, rc, live = 0;
    int http_gw = sp->gw != NULL && !l4, routes_kept = 0;

    /* Counted from here: a half-built entry is disposed of like a whole. */
    s->n++;
    rec_init(&rec, in->dns, &d);
    ident_init(&pre);
    routes_rec_init(&rr, in);
    l->name = strdup(sp->name);
    if (l->name == NULL)
        goto oom;
    l->address = sp->address;
    l->tls_reload_ms = sp->tls_reload_ms;
    l->gateway = sp->gw != NULL;
    if (sp->bl != NULL) {
        if (listener_identity(in, sp->bl, s->cluster_ids, s->nclusters,
                              &l->id) < 0)
            goto oom;
        kept = old != NULL && snapshot_id_equal(&old->id, &l->id);
    } else if (!l4) {
        ident_init(&d);
        gateway_base(&d, in, sp->gw);
        if (ident_finish(&d, &l->id) < 0)
            goto oom;
        kept = old != NULL && snapshot_id_equal(&old->id, &l->id);
        /* Its routes: kept too when what they are compiled from did not
         * change, else compiled with what they use recorded. */
        ident_sub(&pre, &l->id);
        route_inputs(&pre, in, sp->gw);
        if (kept) {
            routes_kept = routes_try_keep(in, old, l, &pre);
            if (routes_kept < 0)
                goto oom;
        }
        if (in->dns != NULL)
            env.dns = &rr.drec.fn;
        if (in->jwks != NULL)
            env.jwks = &rr.jrec.fn;
        env.used = &rr.used;
    } else {
        /* An L4 listener's rules are compiled into its conf: its identity
         * holds what they were compiled from, the resources they read and
         * the DNS answers its clusters used, so an unrelated change keeps
         * it running. */
        ident_init(&d);
        gateway_base(&d, in, sp->gw);
        if (ident_finish(&d, &l->base) < 0)
            goto oom;
        ident_init(&d);
        live = 1;
        ident_sub(&d, &l->base);
        l4_resources(&d, in->set, sp->gw->shared);
        ident_roots(&d, in);
        ident_nets(&d, in);
        kept = l4_try_keep(in, old, l, &d);
        if (kept < 0)
            goto oom;
        if (kept) {
            ident_abandon(&d);
            live = 0;
        } else if (in->dns != NULL) {
            env.dns = &rec.fn; /* records the answers compile uses */
        }
    }
    if (kept) {
        l->cl = old->cl;
        l->cl.ops->conf_ref(l->cl.conf);
        l->socks = old->socks;
        l->socks->refs++;
        l->stats = stats_block_ref(old->stats);
        if (l4) {
            const struct l4_listener_conf *c = l->cl.conf;
            if (carry_clusters(s, prev, c->clusters, c->nclusters) < 0)
                goto oom;
        }
        /* A kept Gateway listener keeps its routes when they would be
         * compiled from the same inputs, else routes by new routes (which
         * may send to new clusters, verify with new keys). */
        if (routes_kept) {
            if (carry_routes(s, prev, l) < 0)
                goto oom;
        } else if (sp->gw != NULL && snapshot_listener_http(l) != NULL) {
            if (compile_gateway_routes(in->bs, in->set, sp->gw, &env, prev_map,
                                       &s->gwclusters, staged, err) < 0) {
                err_set(err, "cannot compile");
                err_prefix(err, "listener %s: ", sp->name);
                goto fail;
            }
            if (http_gw && routes_finish(l, &pre, &rr) < 0)
                goto oom;
        }
        ident_abandon(&pre);
        routes_rec_dispose(&rr);
        return 0;
    }
    if (same_addr != NULL) {
        l->socks = same_addr->socks;
        l->socks->refs++;
    } else {
        l->socks = listener_socks_open(&sp->address, in->nworkers, sp->backlog,
                                       in->inherited, err);
        if (l->socks == NULL) {
            err_set(err, "cannot listen");
            err_prefix(err, "listener %s: ", sp->name);
            goto fail;
        }
    }
    l->stats = old != NULL ? stats_block_ref(old->stats)
                           : proxy_stats_new(sp->name, in->nworkers);
    if (l->stats == NULL)
        goto oom;
    if (sp->bl != NULL)
        rc = compile_listener(in->bs, sp->bl, s->clusters, l->stats, &env,
                              &l->cl, err);
    else
        rc = compile_gateway(in->bs, in->set, sp->gw, l->stats, &env, prev_map,
                             &s->gwclusters, &l->cl, err);
    if (rc < 0) {
        l->cl.conf = NULL;
        err_set(err, "cannot compile");
        err_prefix(err, "listener %s: ", sp->name);
        goto fail;
    }
    metrics_attach(&l->cl, s->metrics_src != NULL ? in->metrics : NULL,
                   s->metrics_src);
    if (l4) {
        live = 0;
        if (ident_finish(&d, &l->id) < 0 || rec.oom)
            goto oom;
        l->dns_names = rec.names;
        l->ndns_names = rec.nnames;
        rec.names = NULL;
        rec.nnames = 0;
        keep_http_part(old, l, staged);
    }
    if (http_gw && routes_finish(l, &pre, &rr) < 0)
        goto oom;
    ident_abandon(&pre);
    routes_rec_dispose(&rr);
    return 0;
oom:
    err_set(err, "out of memory");
fail:
    if (live)
        ident_abandon(&d);
    names_free(rec.names, rec.nnames);
    ident_abandon(&pre);
    routes_rec_dispose(&rr);
    return -1;
}

static int cluster_by_name(const void *a, const void *b)
{
    const struct cluster *const *x = a, *const *y = b;

    return strcmp((*x)->name, (*y)->name);
}

/* The admin's views: listener stats in order, the bootstrap's clusters
 * and the Gateway listeners' sorted by name, so /clusters reads the same
 * after every rebuild. */
static int build_views(struct snapshot *s)
{
    size_t n = s->nclusters + s->gwclusters.n, pos = 0;
    const struct ident_id *k;
    void *v;

    s->stats_view = calloc(s->n ? s->n : 1, sizeof(*s->stats_view));
    s->cluster_view = calloc(n ? n : 1, sizeof(*s->cluster_view));
    if (s->stats_view == NULL || s->cluster_view == NULL)
        return -1;
    for (size_t i = 0; i < s->n; i++)
        s->stats_view[i] = s->v[i].stats;
    for (size_t i = 0; i < s->nclusters; i++)
        s->cluster_view[s->ncluster_view++] = s->clusters[i];
    while (ident_map_next(&s->gwclusters, &pos, &k, &v))
        s->cluster_view[s->ncluster_view++] = v;
    qsort(s->cluster_view + s->nclusters, s->ncluster_view - s->nclusters,
          sizeof(*s->cluster_view), cluster_by_name);
    return 0;
}

/* The listeners the snapshot should hold: the bootstrap's, then the
 * Gateways' (s->gws, which the specs point into). */
static int build_specs(struct snapshot *s, const struct compile_inputs *in,
                       struct lspec **out, size_t *nout, char **err)
{
    const struct bootstrap *bs = in->bs;
    struct lspec *v;
    size_t n;

    *out = NULL;
    *nout = 0;
    if (in->set != NULL &&
        istio_gateways(bs, in->set, in->identity, &s->gws, err) < 0)
        return -1;
    n = bs->listeners.n + s->gws.n;
    v = calloc(n ? n : 1, sizeof(*v));
    if (v == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < bs->listeners.n; i++) {
        const struct bootstrap_listener *bl = bootstrap_listener_at(bs, i);
        v[i].name = bl->name;
        v[i].address = bl->address;
        v[i].backlog = (int)bl->backlog;
        v[i].bl = bl;
        if (bl->protocol == BOOTSTRAP_HTTP && bl->tls.certificates.n > 0)
            v[i].tls_reload_ms = (uint64_t)bl->tls.reload_interval_ms;
    }
    for (size_t i = 0; i < s->gws.n; i++) {
        const struct gw_listener *g = &s->gws.v[i];
        struct lspec *sp = &v[bs->listeners.n + i];

        for (size_t k = 0; k < bs->listeners.n; k++)
            if (strcmp(v[k].name, g->name) == 0 ||
                addr_equal(&v[k].address, &g->address)) {
                err_set(err,
                        "Gateway listener %s clashes with bootstrap "
                        "listener %s (name or address)",
                        g->name, v[k].name);
                free(v);
                return -1;
            }
        sp->name = g->name;
        sp->address = g->address;
        sp->backlog = 1024;
        sp->gw = g;
        /* The mesh certificate (ISTIO_MUTUAL) has no files to check: each
         * handshake takes the current one from memory. */
        sp->tls_reload_ms = g->tls ? 5000 : 0;
    }
    *out = v;
    *nout = n;
    return 0;
}

/*
 * Each listener's connection limit: the counter of its name in prev (so
 * connections of every generation count on one), else a new one under
 * the process's; its limit from the bootstrap now. A conf built by this
 * snapshot gets it before workers see it; a kept one has it already.
 */
static int attach_limits(struct snapshot *s, const struct compile_inputs *in,
                         const struct snapshot *prev, const struct lspec *specs)
{
    enum cx_action act =
        in->bs->limits.action == BOOTSTRAP_LIMIT_CLOSE ? CX_CLOSE : CX_PAUSE;

    if (in->cx_root == NULL)
        return 0;
    cx_limit_set(in->cx_root, in->bs->limits.max_connections, act);
    for (size_t i = 0; i < s->n; i++) {
        struct snapshot_listener *l = &s->v[i];
        const struct snapshot_listener *old =
            snapshot_listener_find(prev, l->name);
        const struct lspec *sp = &specs[i];
        struct http_listener_conf *hc = snapshot_listener_http(l);
        struct cx_limit **slot = NULL;

        l->cx = old != NULL && old->cx != NULL ? cx_limit_ref(old->cx)
                                               : cx_limit_new(in->cx_root);
        if (l->cx == NULL)
            return -1;
        cx_limit_set(l->cx,
                     bootstrap_listener_limit(
                         in->bs, sp->bl, sp->gw != NULL ? sp->gw->port : 0),
                     act);
        if (l->cl.ops->kind == PLISTENER_L4)
            slot = &((struct l4_listener_conf *)l->cl.conf)->cx;
        else
            slot = &((struct http_listener_conf *)l->cl.conf)->cx;
        if (*slot == NULL)
            *slot = cx_limit_ref(l->cx);
        /* A shared port's HTTP part serves connections the L4 listener
         * took slots for: it holds the counter they give back to. */
        if (hc != NULL && hc->cx == NULL)
            hc->cx = cx_limit_ref(l->cx);
    }
    return 0;
}

int snapshot_build(const struct compile_inputs *in, const struct snapshot *prev,
                   struct snapshot **out, char **err)
{
    struct snapshot *s = calloc(1, sizeof(*s));
    struct http_routes **staged = NULL;
    struct lspec *specs = NULL;
    size_t nspecs = 0;

    *out = NULL;
    *err = NULL;
    if (s == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    s->refs = 1;
    s->bs = in->bs;
    ident_map_init(&s->gwclusters);
    if (in->metrics != NULL) {
        s->metrics_src = metrics_source_labels(in->bs);
        if (s->metrics_src != NULL && prev != NULL &&
            prev->metrics_src != NULL &&
            prev->metrics_src->len == s->metrics_src->len &&
            memcmp(prev->metrics_src->text, s->metrics_src->text,
                   s->metrics_src->len) == 0) {
            series_labels_unref(s->metrics_src);
            s->metrics_src = series_labels_ref(prev->metrics_src);
        }
    }
    if (build_specs(s, in, &specs, &nspecs, err) < 0)
        goto fail;
    /* New routes for kept Gateway listeners, published only once the
     * whole snapshot is built. */
    staged = calloc(nspecs ? nspecs : 1, sizeof(*staged));
    s->v = calloc(nspecs ? nspecs : 1, sizeof(*s->v));
    if (staged == NULL || s->v == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    if (build_clusters(s, in, prev, err) < 0)
        goto fail;
    for (size_t i = 0; i < nspecs; i++)
        if (build_listener(s, in, prev, &specs[i], &staged[i], err) < 0)
            goto fail;
    if (build_views(s) < 0 || attach_limits(s, in, prev, specs) < 0) {
        err_set(err, "out of memory");
        goto fail;
    }
    /* Everything is built: the new routes of kept Gateway listeners wait
     * in the snapshot for its publication (snapshot_commit()). */
    for (size_t i = 0; i < s->n; i++)
        s->v[i].staged = staged[i];
    free(staged);
    free(specs);
    *out = s;
    return 0;
fail:
    for (size_t i = 0; staged != NULL && i < nspecs; i++)
        http_routes_unref(staged[i]);
    free(staged);
    free(specs);
    snapshot_unref(s);
    return -1;
}

/* ---- the difference ----------------------------------------------------- */

int snapshot_diff(const struct snapshot *prev, const struct snapshot *next,
                  struct snapshot_diff *out)
{
    size_t cap = next->n + (prev != NULL ? prev->n : 0);

    out->n = 0;
    out->v = calloc(cap ? cap : 1, sizeof(*out->v));
    if (out->v == NULL)
        return -1;
    for (size_t i = 0; i < next->n; i++) {
        const struct snapshot_listener *l = &next->v[i];
        const struct snapshot_listener *p =
            snapshot_listener_find(prev, l->name);
        struct snapshot_change_entry *e = &out->v[out->n++];

        e->prev = p;
        e->next = l;
        if (p == NULL)
            e->change = SNAPSHOT_ADDED;
        else if (snapshot_id_equal(&p->id, &l->id))
            e->change = SNAPSHOT_KEPT;
        else
            e->change = SNAPSHOT_CHANGED;
    }
    for (size_t i = 0; prev != NULL && i < prev->n; i++) {
        if (snapshot_listener_find(next, prev->v[i].name) != NULL)
            continue;
        out->v[out->n].change = SNAPSHOT_REMOVED;
        out->v[out->n].prev = &prev->v[i];
        out->v[out->n].next = NULL;
        out->n++;
    }
    return 0;
}

void snapshot_diff_dispose(struct snapshot_diff *d)
{
    free(d->v);
    d->v = NULL;
    d->n = 0;
}

const char *snapshot_change_name(enum snapshot_change c)
{
    switch (c) {
    case SNAPSHOT_ADDED:
        return "added";
    case SNAPSHOT_CHANGED:
        return "changed";
    case SNAPSHOT_KEPT:
        return "kept";
    case SNAPSHOT_REMOVED:
        return "removed";
    }
    return "?";
}
