/*
 * Compiling a Gateway listener of TCP and TLS servers into an L4 proxy
 * conf: the SNI table, the tcp rules, the terminating servers' TLS and the
 * clusters the rules send to. See compile-l4.h for the binding rules.
 */
#include "config.h"

#include <inttypes.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/resource.h"
#include "core/ascii.h"
#include "core/err.h"
#include "core/host.h"
#include "core/log.h"
#include "proxy/l4_listener.h"
#include "compile/l4.h"
#include "compile/authz.h"
#include "policy/authz.h"
#include "compile/istio.h"
#include "tls/tls.h"
#include "upstream/cluster.h"

#define HOST_MAX 512

struct l4_build {
    const struct bootstrap *bs;
    const struct resource_set *set;
    const struct gw_listener *g;
    struct l4_listener_conf *c;
    struct istio_clusters table;
    char **err;
};

void gw_tls_to_cert(const struct gw_tls *t, struct tls_server_cert *c)
{
    if (t != NULL) {
        /* ISTIO_MUTUAL: the mesh certificate from memory, not files. */
        c->cred = t->cred;
        c->cred_arg = t->cred_arg;
        c->min_version = t->min_version;
        c->max_version = t->max_version;
        c->ciphers = (const char *const *)t->ciphers;
        c->nciphers = t->nciphers;
    }
    if (t == NULL || (t->mode != RES_GW_TLS_MUTUAL &&
                      t->mode != RES_GW_TLS_OPTIONAL_MUTUAL &&
                      t->mode != RES_GW_TLS_ISTIO_MUTUAL)) {
        c->verify = TLS_VERIFY_NONE;
        return;
    }
    c->verify = t->mode == RES_GW_TLS_OPTIONAL_MUTUAL ? TLS_VERIFY_OPTIONAL
                                                      : TLS_VERIFY_REQUIRED;
    c->ca_path = t->ca;
    c->ca_cert = t->root;
    c->ca_extra = t->extra;
    c->crl_path = t->crl;
    c->crl_optional = t->crl_optional;
    c->sans = (const char *const *)t->sans;
    c->nsans = t->nsans;
    c->spki = (const char *const *)t->spki;
    c->nspki = t->nspki;
    c->hashes = (const char *const *)t->hashes;
    c->nhashes = t->nhashes;
}

/* A VirtualService's gateway reference ("name" in its own namespace, or
 * "ns/name") names gw ("ns/name"); the router reads them the same way. */
static int gateway_ref_eq(const char *ref, const char *vs_ns, const char *gw)
{
    size_t nl;

    if (strchr(ref, '/') != NULL)
        return strcmp(ref, gw) == 0;
    nl = strlen(vs_ns);
    return strncmp(gw, vs_ns, nl) == 0 && gw[nl] == '/' &&
           strcmp(gw + nl + 1, ref) == 0;
}

/* vs_bound() is true when the VirtualService is bound through srv. */
static int vs_bound(const struct l4_build *b, const struct resource *r,
                    const struct gw_server *srv)
{
    const struct res_virtual_service *vs = res_virtual_service(r);
    int listed = 0;

    /* exportTo: the gateway sees what is exported to its namespace. */
    if (b->bs->node.ns != NULL &&
        !res_visible(r, &vs->export_to, b->bs->node.ns))
        return 0;
    for (size_t i = 0; i < vs->gateways.n && !listed; i++)
        listed = gateway_ref_eq(vs->gateways.v[i], r->meta.ns, srv->gateway);
    if (!listed)
        return 0;
    for (size_t h = 0; h < vs->hosts.n; h++) {
        char fq[HOST_MAX];
        if (res_host_fqdn(vs->hosts.v[h], r->meta.ns, b->set->domain, fq,
                          sizeof(fq)) < 0)
            continue;
        for (size_t k = 0; k < srv->nhosts; k++) {
            const char *sh;
            if (res_gw_host_admits(srv->hosts[k], srv->gateway,
                                   res_ref_ns_len(srv->gateway), r->meta.ns,
                                   &sh) &&
                host_intersect(sh, fq))
                return 1;
        }
    }
    return 0;
}

/* block_applies() is Istio's l4SingleMatch on a gateway, with the
 * source checks the router makes too. */
static int block_applies(const struct l4_build *b, const struct resource *r,
                         const struct gw_server *srv,
                         const struct res_l4_match *m)
{
    if (m->port != 0 && m->port != (int64_t)b->g->port)
        return 0;
    if (m->gateways.n > 0) {
        size_t i;
        for (i = 0; i < m->gateways.n; i++)
            if (gateway_ref_eq(m->gateways.v[i], r->meta.ns, srv->gateway))
                break;
        if (i == m->gateways.n)
            return 0;
    }
    if (m->source_labels.n > 0 &&
        !res_labels_match(&m->source_labels, &b->bs->node.labels))
        return 0;
    if (m->source_namespace != NULL && m->source_namespace[0] != '\0' &&
        strcmp(m->source_namespace, b->bs->node.ns) != 0)
        return 0;
    return 1;
}

static int subnets(struct l4_build *b, const struct resource *r,
                   const char *const *v, size_t n, struct l4_subnet **out,
                   size_t *nout)
{
    *out = calloc(n + 1, sizeof(**out));
    *nout = 0;
    if (*out == NULL)
        return err_set(b->err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        struct l4_subnet *s = &(*out)[i];
        const char *why;
        if (addr_cidr_parse(v[i], &s->family, s->addr, &s->prefix, &why) < 0)
            return err_set(b->err, "VirtualService %s/%s: subnet '%s': %s",
                           r->meta.ns, r->meta.name, v[i], why);
        (*nout)++;
    }
    return 0;
}

static struct l4_rule *rules_push(struct l4_build *b, struct l4_rules *rs)
{
    struct l4_rule *nv = realloc(rs->v, (rs->n + 1) * sizeof(*nv));

    if (nv == NULL) {
        err_set(b->err, "out of memory");
        return NULL;
    }
    rs->v = nv;
    memset(&nv[rs->n], 0, sizeof(nv[0]));
    return &nv[rs->n++];
}

/* The route name and weighted destinations of a rule. */
static int rule_dests(struct l4_build *b, const struct resource *r,
                      const struct res_l4_route *l, struct l4_rule *out)
{
    if (asprintf(&out->route, "%s/%s", r->meta.ns, r->meta.name) < 0) {
        out->route = NULL;
        return err_set(b->err, "out of memory");
    }
    out->dests = calloc(l->route.n + 1, sizeof(*out->dests));
    if (out->dests == NULL)
        return err_set(b->err, "out of memory");
    for (size_t i = 0; i < l->route.n; i++) {
        const struct res_route_dest *d =
            (const struct res_route_dest *)l->route.v + i;
        char fq[HOST_MAX];
        int id;

        if (d->weight <= 0)
            continue;
        if (res_host_fqdn(d->destination.host, r->meta.ns, b->set->domain, fq,
                          sizeof(fq)) < 0)
            return err_set(b->err, "VirtualService %s/%s: host '%s' too long",
                           r->meta.ns, r->meta.name, d->destination.host);
        id = istio_cluster_id(&b->table, fq, d->destination.subset,
                              (uint32_t)d->destination.port.number);
        if (id < 0)
            return err_set(b->err, "out of memory");
        out->dests[out->ndests].cluster = (size_t)id;
        out->dests[out->ndests].weight = (uint32_t)d->weight;
        out->total += (uint64_t)d->weight;
        out->ndests++;
    }
    return 0;
}

/* The tcp rules bound through srv, appended to rs in set order. */
static int tcp_rules(struct l4_build *b, const struct gw_server *srv,
                     struct l4_rules *rs)
{
    for (size_t i = 0; i < b->set->n; i++) {
        const struct resource *r = b->set->v[i];
        const struct res_virtual_service *vs;

        if (r->kind != RES_VIRTUAL_SERVICE || !vs_bound(b, r, srv))
            continue;
        vs = res_virtual_service(r);
        for (size_t k = 0; k < vs->tcp.n; k++) {
            const struct res_l4_route *l =
                (const struct res_l4_route *)vs->tcp.v + k;
            struct l4_rule *rule;
            size_t applies = 0;

            for (size_t m = 0; m < l->match.n; m++)
                applies += block_applies(
                    b, r, srv, (const struct res_l4_match *)l->match.v + m);
            if (l->match.n > 0 && applies == 0)
                continue;
            rule = rules_push(b, rs);
            if (rule == NULL)
                return -1;
            rule->blocks = calloc(applies + 1, sizeof(*rule->blocks));
            if (rule->blocks == NULL)
                return err_set(b->err, "out of memory");
            for (size_t m = 0; m < l->match.n; m++) {
                const struct res_l4_match *mm =
                    (const struct res_l4_match *)l->match.v + m;
                struct l4_block *bl;
                const char *src[1];
                if (!block_applies(b, r, srv, mm))
                    continue;
                bl = &rule->blocks[rule->nblocks++];
                src[0] = mm->source_subnet;
                if (subnets(
                        b, r, (const char *const *)mm->destination_subnets.v,
                        mm->destination_subnets.n, &bl->dst, &bl->ndst) < 0 ||
                    subnets(b, r, src,
                            mm->source_subnet != NULL &&
                                    mm->source_subnet[0] != '\0'
                                ? 1
                                : 0,
                            &bl->src, &bl->nsrc) < 0)
                    return -1;
                if (bl->ndst > 0)
                    rs->by_local = 1;
            }
            if (rule_dests(b, r, l, rule) < 0)
                return -1;
        }
    }
    return 0;
}

/* sni_add() adds name (lowercased) for target unless the name is taken:
 * the first server or rule to claim a name keeps it. Returns 1 added, 0
 * taken, -1 out of memory. */
static int sni_add(struct l4_build *b, const char *name, int target,
                   size_t index)
{
    char *lc = strdup(name);
    int rc;

    if (lc == NULL)
        return err_set(b->err, "out of memory");
    ascii_lower_str(lc);
    rc = l4_sni_add(b->c, lc, target, index);
    return rc < 0 ? err_set(b->err, "out of memory") : rc;
}

/* The tls rules bound through a PASSTHROUGH server. */
static int tls_rules(struct l4_build *b, const struct gw_server *srv)
{
    for (size_t i = 0; i < b->set->n; i++) {
        const struct resource *r = b->set->v[i];
        const struct res_virtual_service *vs;

        if (r->kind != RES_VIRTUAL_SERVICE || !vs_bound(b, r, srv))
            continue;
        vs = res_virtual_service(r);
        for (size_t k = 0; k < vs->tls.n; k++) {
            const struct res_l4_route *l =
                (const struct res_l4_route *)vs->tls.v + k;
            size_t index = b->c->passthrough.n;
            int used = 0;
            struct l4_rule *rule;

            for (size_t m = 0; m < l->match.n; m++) {
                const struct res_l4_match *mm =
                    (const struct res_l4_match *)l->match.v + m;
                if (!block_applies(b, r, srv, mm))
                    continue;
                if (mm->destination_subnets.n > 0 ||
                    (mm->source_subnet != NULL && mm->source_subnet[0]))
                    log_warn("VirtualService %s/%s: tls[%zu].match[%zu]: "
                             "subnets are not used by TLS routes on a "
                             "Gateway; the SNI decides",
                             r->meta.ns, r->meta.name, k, m);
                for (size_t h = 0; h < mm->sni_hosts.n; h++) {
                    const char *sni = mm->sni_hosts.v[h];
                    for (size_t s = 0; s < srv->nhosts; s++) {
                        const char *sh;
                        int rc;
                        if (!res_gw_host_admits(srv->hosts[s], srv->gateway,
                                                res_ref_ns_len(srv->gateway),
                                                r->meta.ns, &sh) ||
                            !host_intersect(sh, sni))
                            continue;
                        /* The narrower of the two names. */
                        rc = sni_add(b, host_covers(sh, sni) ? sni : sh,
                                     L4_TO_PASSTHROUGH, index);
                        if (rc < 0)
                            return -1;
                        if (rc == 0)
                            log_warn("listener %s: SNI %s: VirtualService "
                                     "%s/%s tls[%zu] comes after another "
                                     "route for it; not used",
                                     b->g->name, sni, r->meta.ns, r->meta.name,
                                     k);
                        used |= rc;
                    }
                }
            }
            if (!used)
                continue;
            rule = rules_push(b, &b->c->passthrough);
            if (rule == NULL || rule_dests(b, r, l, rule) < 0)
                return -1;
        }
    }
    return 0;
}

/* auto_push() adds (host, port, subset) for cluster; repeats are
 * dropped when the table is sorted. */
static int auto_push(struct l4_build *b, const char *host, uint32_t port,
                     const char *subset)
{
    struct l4_listener_conf *c = b->c;
    struct l4_auto *nv = realloc(c->autos, (c->nautos + 1) * sizeof(*nv));
    struct l4_auto *a;
    int id;

    if (nv == NULL)
        return err_set(b->err, "out of memory");
    c->autos = nv;
    a = &nv[c->nautos];
    memset(a, 0, sizeof(*a));
    a->host = strdup(host);
    a->subset = strdup(subset != NULL ? subset : "");
    if (a->host == NULL || a->subset == NULL) {
        free(a->host);
        free(a->subset);
        return err_set(b->err, "out of memory");
    }
    ascii_lower_str(a->host);
    a->port = port;
    c->nautos++;
    /* The east-west gateway's own network view: never a remote
     * network's gateway (compile/network.h, NET_SPLIT_LOCAL_VIEW). */
    b->table.local_view = 1;
    id = istio_cluster_id(&b->table, host,
                          subset != NULL && subset[0] ? subset : NULL, port);
    b->table.local_view = 0;
    if (id < 0)
        return err_set(b->err, "out of memory");
    a->cluster = (size_t)id;
    return 0;
}

/* The DestinationRule of host the node sees (the first, as the clusters
 * take it), or NULL. */
static const struct res_destination_rule *auto_dr(const struct l4_build *b,
                                                  const char *host)
{
    char fq[HOST_MAX];

    for (size_t i = 0; i < b->set->n; i++) {
        const struct resource *r = b->set->v[i];
        const struct res_destination_rule *d;

        if (r->kind != RES_DESTINATION_RULE)
            continue;
        d = res_destination_rule(r);
        if (b->bs->node.ns != NULL &&
            !res_visible(r, &d->export_to, b->bs->node.ns))
            continue;
        if (res_host_fqdn(d->host, r->meta.ns, b->set->domain, fq,
                          sizeof(fq)) >= 0 &&
            strcmp(fq, host) == 0)
            return d;
    }
    return NULL;
}

/* Whether srv's hosts expose a service host of namespace ns. */
static int auto_admits(const struct gw_server *srv, const char *ns,
                       const char *host)
{
    for (size_t k = 0; k < srv->nhosts; k++) {
        const char *sh;
        if (res_gw_host_admits(srv->hosts[k], srv->gateway,
                               res_ref_ns_len(srv->gateway), ns, &sh) &&
            host_covers(sh, host))
            return 1;
    }
    return 0;
}

/*
 * An AUTO_PASSTHROUGH server: as istiod builds the east-west gateway's
 * filter chains, one entry per registry service its hosts admit (a
 * ServiceEntry or Kubernetes Service the node sees), per port of it, and
 * per subset of its DestinationRule besides none. Each gets the cluster
 * a route to it would get, so its endpoints, balancing and outlier
 * detection are the same objects. A wildcard host names no cluster.
 */
static int auto_rules(struct l4_build *b, const struct gw_server *srv,
                      int subsets)
{
    for (size_t i = 0; i < b->set->n; i++) {
        const struct resource *r = b->set->v[i];
        const struct res_service_entry *se;

        if (!res_is_service(r))
            continue;
        se = res_service_entry(r);
        if (b->bs->node.ns != NULL &&
            !res_visible(r, &se->export_to, b->bs->node.ns))
            continue;
        for (size_t h = 0; h < se->hosts.n; h++) {
            const struct res_destination_rule *dr;
            char fq[HOST_MAX];

            if (res_host_fqdn(se->hosts.v[h], r->meta.ns, b->set->domain, fq,
                              sizeof(fq)) < 0 ||
                strchr(fq, '*') != NULL || !auto_admits(srv, r->meta.ns, fq))
                continue;
            dr = auto_dr(b, fq);
            for (size_t k = 0; k < se->ports.n; k++) {
                const struct res_se_port *sp =
                    &((const struct res_se_port *)se->ports.v)[k];
                uint32_t port = (uint32_t)sp->number;

                if (sp->number <= 0 || sp->number > 65535)
                    continue;
                if (auto_push(b, fq, port, NULL) < 0)
                    return -1;
                for (size_t s = 0; subsets && dr != NULL && s < dr->subsets.n;
                     s++) {
                    const struct res_subset *sub =
                        &((const struct res_subset *)dr->subsets.v)[s];
                    if (sub->name != NULL && sub->name[0] != '\0' &&
                        auto_push(b, fq, port, sub->name) < 0)
                        return -1;
                }
            }
        }
    }
    return 0;
}

static int terminating(struct l4_build *b, const struct gw_server *srv);

/*
 * An HBONE server: the node's mesh certificate with ALPN h2 (one
 * terminating server, whichever HBONE server of the port comes first:
 * they all present the same identity), and the registry services its
 * hosts admit, per port, as for AUTO_PASSTHROUGH but without subsets (a
 * CONNECT authority names a host and port only).
 */
static int hbone_rules(struct l4_build *b, const struct gw_server *srv)
{
    /* The CONNECT authority routes; a VirtualService bound to the
     * server has nothing to say, and is told so rather than ignored. */
    for (size_t i = 0; i < b->set->n; i++) {
        const struct resource *r = b->set->v[i];
        if (r->kind == RES_VIRTUAL_SERVICE && vs_bound(b, r, srv))
            log_warn("VirtualService %s/%s: bound to the HBONE server of "
                     "Gateway %s, whose tunnels go where their CONNECT "
                     "authority says; its routes are not used there",
                     r->meta.ns, r->meta.name, srv->gateway);
    }
    if (!b->c->is_hbone) {
        b->c->is_hbone = 1;
        if (terminating(b, srv) < 0)
            return -1;
        /* The SNI table is not used: no SNI is sent. */
    }
    return auto_rules(b, srv, 0);
}

/* A TLS-terminating server: its certificate (no ALPN: what it carries is
 * not HTTP) and its client checks; SNI entries for its hosts. */
static int terminating(struct l4_build *b, const struct gw_server *srv)
{
    struct l4_listener_conf *c = b->c;
    static const char *const no_alpn[] = {""};
    static const char *const h2_alpn[] = {"h2"};
    struct tls_server_cert cert;
    struct tls_server_conf tc;
    struct l4_server *ns, *s;
    char desc[128];
    size_t index = c->nservers;

    ns = realloc(c->servers, (c->nservers + 1) * sizeof(*ns));
    if (ns == NULL)
        return err_set(b->err, "out of memory");
    c->servers = ns;
    s = &ns[c->nservers++];
    memset(s, 0, sizeof(*s));
    memset(&cert, 0, sizeof(cert));
    cert.cert_path = srv->tls.cert;
    cert.key_path = srv->tls.key;
    gw_tls_to_cert(&srv->tls, &cert);
    memset(&tc, 0, sizeof(tc));
    tc.certs = &cert;
    tc.ncerts = 1;
    tc.min_version = TLS1_2_VERSION;
    tc.max_version = TLS1_3_VERSION;
    /* An empty name is skipped when the list is built: no ALPN at all. */
    tc.alpn = c->is_hbone ? h2_alpn : no_alpn;
    tc.nalpn = 1;
    snprintf(desc, sizeof(desc), "listener %s", b->g->name);
    s->tls = tls_holder_new(&tc, desc, b->err);
    if (s->tls == NULL)
        return -1;
    /* HBONE routes by the CONNECT authority: no SNI, no tcp rules. */
    if (c->is_hbone)
        return 0;
    if (tcp_rules(b, srv, &s->rules) < 0)
        return -1;
    for (size_t h = 0; h < srv->nhosts; h++) {
        const char *slash = strchr(srv->hosts[h], '/');
        if (sni_add(b, slash ? slash + 1 : srv->hosts[h], L4_TO_TERMINATE,
                    index) < 0)
            return -1;
    }
    return 0;
}

/* An HTTPS server of a shared port: its hosts go to the HTTP proxy. */
static int https_names(struct l4_build *b, const struct gw_server *srv)
{
    for (size_t h = 0; h < srv->nhosts; h++) {
        const char *slash = strchr(srv->hosts[h], '/');
        const char *name = slash ? slash + 1 : srv->hosts[h];
        int rc = sni_add(b, name, L4_TO_HTTP, 0);
        if (rc < 0)
            return -1;
        if (rc == 0)
            log_warn("listener %s: SNI %s: the HTTPS server of Gateway %s "
                     "comes after another server or route for it; not used "
                     "for it",
                     b->g->name, name, srv->gateway);
    }
    return 0;
}

int compile_l4(const struct bootstrap *bs, const struct resource_set *set,
               const struct gw_listener *g, struct stats_block *stats,
               const struct compile_env *env, const struct ident_map *prev,
               struct ident_map *next, struct compiled_listener *out,
               char **err)
{
    struct l4_build b;

    *err = NULL;
    memset(&b, 0, sizeof(b));
    b.bs = bs;
    b.set = set;
    b.g = g;
    b.err = err;
    b.c = l4_listener_conf_new(g->name, stats);
    if (b.c == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    b.c->port = g->port;
    b.c->inspect = g->secure && !g->hbone;
    /* Istio's gatewayTopology.proxyProtocol is every Gateway listener's:
     * TCP and TLS servers' too. */
    if (bs->topology.proxy_protocol.mark.line > 0)
        b.c->proxy_protocol =
            (uint32_t)bs->topology.proxy_protocol.max_header_bytes;
    b.c->hbone.max_tunnels = (uint32_t)bs->hbone.max_tunnels;
    b.c->hbone.tunnel_buffer = (uint32_t)bs->hbone.tunnel_buffer;
    b.c->hbone.tunnel_memory = (uint64_t)bs->hbone.tunnel_memory;
    b.c->hbone.connect_timeout_ms = (uint64_t)bs->hbone.connect_timeout_ms;
    b.c->hbone.idle_timeout_ms = (uint64_t)bs->hbone.idle_timeout_ms;
    b.c->relay.hbone_window = b.c->hbone.tunnel_buffer;
    b.c->relay.hbone_idle_ms = b.c->hbone.idle_timeout_ms;
    b.c->hbone_baggage = compile_hbone_baggage(bs);
    b.c->relay.hbone_baggage = b.c->hbone_baggage;
    if (b.c->hbone_baggage == NULL) {
        l4_listener_conf_unref(b.c);
        return err_set(err, "out of memory");
    }
    b.c->relay.access_log = bs->log.access_log;
    if (compile_l4_alog(b.c, bs, env, err) < 0) {
        l4_listener_conf_unref(b.c);
        return -1;
    }
    /* The same table settings as the HTTP routes', so clusters shared by
     * identity are the same either way. */
    istio_clusters_init(&b.table, set, env->nworkers, prev, next);
    b.table.node_ns = bs->node.ns;
    b.table.dns = env->dns;
    b.table.identity = env->identity;
    b.table.trust_domain = bs->trust_domain;
    b.table.node_locality = bs->node.locality;
    b.table.node_network = bs->node.network;
    b.table.node_labels = &bs->node.labels;
    b.table.credentials_dir = bs->credentials.dir;
    b.table.outbound_mode = bs->outbound.mode;
    b.table.listener_port = g->port;
    if (env->nets != NULL)
        b.table.nets = *env->nets;
    for (size_t i = 0; set != NULL && i < g->nservers; i++) {
        const struct gw_server *srv = &g->servers[i];
        int rc = 0;
        if (srv->mode == GW_MODE_TCP)
            rc = tcp_rules(&b, srv, &b.c->tcp);
        else if (srv->mode == GW_MODE_PASSTHROUGH)
            rc = tls_rules(&b, srv);
        else if (srv->mode == GW_MODE_TLS_TCP)
            rc = terminating(&b, srv);
        else if (srv->mode == GW_MODE_HTTPS)
            rc = https_names(&b, srv);
        else if (srv->mode == GW_MODE_AUTO_PASSTHROUGH) {
            b.c->auto_passthrough = 1;
            rc = auto_rules(&b, srv, 1);
        } else if (srv->mode == GW_MODE_HBONE)
            rc = hbone_rules(&b, srv);
        if (rc < 0)
            goto fail;
    }
    b.c->authz = compile_authz(set, bs->node.ns, &bs->node.labels,
                               ISTIO_ROOT_NAMESPACE, err);
    if (b.c->authz == NULL && *err != NULL)
        goto fail;
    /* The HTTPS servers' proxy, with its routes; it shares the listener's
     * name and counters, and clusters through prev and next. */
    if (g->shared && compile_gateway_http(bs, set, g, stats, env, prev, next,
                                          &b.c->http, err) < 0)
        goto fail;
    /* The table's clusters become the conf's (references move). */
    l4_auto_sort(b.c);
    b.c->clusters = b.table.v;
    b.c->nclusters = b.table.n;
    b.table.v = NULL;
    b.table.n = 0;
    istio_clusters_dispose(&b.table);
    log_info("listener %s: %zu SNI names, %zu tcp rules, %zu terminating "
             "servers%s",
             g->name, b.c->nsni, b.c->tcp.n, b.c->nservers,
             b.c->http != NULL ? ", HTTPS servers" : "");
    if (b.c->is_hbone)
        log_info("listener %s: HBONE to %zu service ports", g->name,
                 b.c->nautos);
    if (b.c->auto_passthrough)
        log_info("listener %s: AUTO_PASSTHROUGH to %zu service ports and "
                 "subsets",
                 g->name, b.c->nautos);
    out->ops = &l4_listener_ops;
    out->conf = b.c;
    return 0;
fail:
    if (*err == NULL)
        err_set(err, "out of memory");
    istio_clusters_dispose(&b.table);
    l4_listener_conf_unref(b.c);
    return -1;
}
