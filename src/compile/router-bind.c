/*
 * The router, building side: binds VirtualServices to the gateway servers
 * the router serves, merges those sharing a host, and hands each rule to
 * compile/router.c; or makes a router of rules lowered from outside
 * VirtualServices (router_build_rules). The result is the immutable table
 * proxy/router-match.c reads.
 *
 * All the router's memory but the hash tables, the per-vhost rule arrays
 * and the PCRE2 codes comes from one arena, freed at once with the router
 * (proxy/router.c); the build allocates freely and the request path never
 * does.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/resource.h"
#include "core/ascii.h"
#include "core/err.h"
#include "core/host.h"
#include "compile/router-int.h"

#define HOST_MAX 512

/* A growable list of malloc'd strings, for the domains of one
 * VirtualService. */
struct strvec {
    char **v;
    size_t n;
    size_t cap;
};

static void strvec_dispose(struct strvec *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof(*s));
}

static int strvec_has(const struct strvec *s, const char *x)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], x) == 0)
            return 1;
    return 0;
}

/* strvec_add_lower() adds a lowercase copy of x unless already there. */
static int strvec_add_lower(struct strvec *s, const char *x)
{
    char *c;

    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        char **v = realloc(s->v, cap * sizeof(*v));
        if (v == NULL)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    c = strdup(x);
    if (c == NULL)
        return -1;
    ascii_lower_str(c);
    if (strvec_has(s, c)) {
        free(c);
        return 0;
    }
    s->v[s->n++] = c;
    return 0;
}

/* ---- errors and memory ------------------------------------------------ */

void *rt_alloc(struct rt_build *b, size_t n)
{
    void *p;

    if (n == 0)
        n = 1;
    p = arena_alloc(&b->r->mem, n);
    if (p == NULL)
        err_set(b->err, "router: out of memory");
    else
        memset(p, 0, n);
    return p;
}

/* rt_str() copies s (NULL: "") into the router as a NUL-terminated slice,
 * lowercased when lower is set. Returns -1 when memory is short. */
int rt_str(struct rt_build *b, const char *s, int lower, struct slice *out)
{
    size_t n = s != NULL ? strlen(s) : 0;
    char *c = arena_dup(&b->r->mem, s != NULL ? s : "", n);

    if (c == NULL) {
        err_set(b->err, "router: out of memory");
        return -1;
    }
    if (lower)
        ascii_lower_n(c, n);
    out->p = c;
    out->n = n;
    return 0;
}

const char *rt_cstr(struct rt_build *b, const char *s)
{
    struct slice sl;

    if (s == NULL)
        return NULL;
    return rt_str(b, s, 0, &sl) < 0 ? NULL : sl.p;
}

/* gateway_ref_eq() is true when a VirtualService's gateway reference
 * ("name", "ns/name" or "mesh") names gw ("ns/name" or "mesh"). */
int rt_gateway_ref_eq(const char *ref, const char *vs_ns, const char *gw)
{
    size_t nl;

    if (strcmp(ref, "mesh") == 0 || strcmp(gw, "mesh") == 0)
        return strcmp(ref, gw) == 0;
    if (strchr(ref, '/') != NULL)
        return strcmp(ref, gw) == 0;
    nl = strlen(vs_ns);
    return strncmp(gw, vs_ns, nl) == 0 && gw[nl] == '/' &&
           strcmp(gw + nl + 1, ref) == 0;
}

/* ---- virtual hosts ------------------------------------------------------ */

static void table_insert(struct rt_table *t, const struct rt_slot *s)
{
    size_t i;

    for (i = s->hash & t->mask; t->slots[i].key != NULL; i = (i + 1) & t->mask)
        ;
    t->slots[i] = *s;
    t->n++;
}

static struct rt_slot *table_slot(struct rt_table *t, const char *key,
                                  size_t len)
{
    uint64_t h = rt_hash(key, len);

    for (size_t i = h & t->mask; t->slots[i].key != NULL; i = (i + 1) & t->mask)
        if (t->slots[i].hash == h && t->slots[i].len == len &&
            memcmp(t->slots[i].key, key, len) == 0)
            return &t->slots[i];
    return NULL;
}

/* table_put() maps key (lowercase, owned by the router) to vhost; the
 * table stays at most half full. */
static int table_put(struct rt_table *t, const char *key, size_t len,
                     uint32_t vhost)
{
    struct rt_slot s = {key, len, rt_hash(key, len), vhost};

    if ((t->n + 1) * 2 > (t->slots ? t->mask + 1 : 0)) {
        size_t size = t->slots ? (t->mask + 1) * 2 : 64;
        struct rt_table nt = {calloc(size, sizeof(struct rt_slot)), size - 1,
                              0};
        if (nt.slots == NULL)
            return -1;
        for (size_t i = 0; t->slots != NULL && i <= t->mask; i++)
            if (t->slots[i].key != NULL)
                table_insert(&nt, &t->slots[i]);
        free(t->slots);
        *t = nt;
    }
    table_insert(t, &s);
    return 0;
}

/* vhost_get() returns the index of the virtual host for domain (lowercase),
 * creating it; -1 when memory is short. Exact names and "*.suffix"
 * patterns go into two tables that find_vhost() probes by host_match()'s
 * rule (core/host.h). */
static int vhost_get(struct rt_build *b, const char *domain)
{
    struct router *r = b->r;
    int is_wild = host_pattern_kind(domain) == HOST_SUFFIX;
    struct rt_table *t = is_wild ? &r->wild : &r->exact;
    const char *key = is_wild ? domain + 1 : domain;
    struct slice d;
    int idx;

    struct rt_slot *alias = NULL;

    if (strcmp(domain, "*") == 0) {
        if (r->catch_all >= 0)
            return r->catch_all;
    } else if ((idx = rt_table_get(t, key, strlen(key))) >= 0) {
        if (strcmp(r->vhosts[idx].domain, domain) == 0)
            return idx;
        /* A mesh alias took the name; a host written out wins it. */
        alias = table_slot(t, key, strlen(key));
    }
    if (r->nvhosts == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        struct rt_vhost *v = realloc(r->vhosts, cap * sizeof(*v));
        if (v == NULL)
            goto fail;
        r->vhosts = v;
        r->cap = cap;
    }
    if (rt_str(b, domain, 1, &d) < 0)
        return -1;
    idx = (int)r->nvhosts;
    memset(&r->vhosts[idx], 0, sizeof(r->vhosts[idx]));
    r->vhosts[idx].domain = d.p;
    if (strcmp(domain, "*") == 0)
        r->catch_all = idx;
    else if (alias != NULL)
        alias->vhost = (uint32_t)idx;
    else if (table_put(t, is_wild ? d.p + 1 : d.p, is_wild ? d.n - 1 : d.n,
                       (uint32_t)idx) < 0)
        goto fail;
    r->nvhosts++;
    return idx;
fail:
    err_set(b->err, "router: out of memory");
    return -1;
}

/* vhost_alias() makes key (a short name of the mesh) select vhost too,
 * unless something already answers to it. */
static int vhost_alias(struct rt_build *b, const char *key, size_t len,
                       int vhost)
{
    struct slice k;
    char tmp[HOST_MAX];

    if (len >= sizeof(tmp))
        return 0;
    memcpy(tmp, key, len);
    tmp[len] = '\0';
    if (rt_table_get(&b->r->exact, tmp, len) >= 0)
        return 0;
    if (rt_str(b, tmp, 1, &k) < 0)
        return -1;
    if (table_put(&b->r->exact, k.p, k.n, (uint32_t)vhost) < 0) {
        err_set(b->err, "router: out of memory");
        return -1;
    }
    return 0;
}

static int vhost_add_rules(struct rt_build *b, int idx,
                           const struct rt_rule *rules, size_t n)
{
    struct rt_vhost *vh = &b->r->vhosts[idx];

    if (vh->nrules + n > vh->cap) {
        size_t cap = vh->cap ? vh->cap : 4;
        struct rt_rule *v;
        while (cap < vh->nrules + n)
            cap *= 2;
        v = realloc(vh->rules, cap * sizeof(*v));
        if (v == NULL) {
            err_set(b->err, "router: out of memory");
            return -1;
        }
        vh->rules = v;
        vh->cap = cap;
    }
    memcpy(vh->rules + vh->nrules, rules, n * sizeof(*rules));
    vh->nrules += n;
    b->r->nrules += n;
    return 0;
}

/* ---- binding ------------------------------------------------------------ */

/*
 * vs_domains() collects the domains the VirtualService answers to through
 * the servers it is bound to: for each of its hosts (expanded in its
 * namespace) and each admitting server host with a name in common, the
 * narrower of the two. mesh gets the names Istio's sidecars also accept
 * for a service of the cluster (name, name.ns, name.ns.svc) via aliases.
 */
static int vs_domains(struct rt_build *b, struct strvec *out, int *mesh)
{
    const struct router_params *p = b->p;
    const char *vs_ns = b->res->meta.ns;

    *mesh = 0;
    for (size_t s = 0; s < p->nservers; s++) {
        const struct router_server *srv = &p->servers[s];
        int bound = 0;

        if (b->vs->gateways.n == 0)
            bound = strcmp(srv->gateway, "mesh") == 0;
        for (size_t g = 0; g < b->vs->gateways.n && !bound; g++)
            bound =
                rt_gateway_ref_eq(b->vs->gateways.v[g], vs_ns, srv->gateway);
        if (!bound)
            continue;
        if (strcmp(srv->gateway, "mesh") == 0)
            *mesh = 1;
        for (size_t h = 0; h < b->vs->hosts.n; h++) {
            char fqdn[HOST_MAX];
            if (res_host_fqdn(b->vs->hosts.v[h], vs_ns, p->set->domain, fqdn,
                              sizeof(fqdn)) < 0)
                continue;
            for (size_t k = 0; k < srv->nhosts; k++) {
                const char *sh;
                /* The Gateway's namespace, from its "ns/name" ("" for
                 * "mesh"). */
                if (!res_gw_host_admits(srv->hosts[k], srv->gateway,
                                        res_ref_ns_len(srv->gateway), vs_ns,
                                        &sh) ||
                    !host_intersect(sh, fqdn))
                    continue;
                if (strvec_add_lower(out, host_covers(sh, fqdn) ? fqdn : sh) <
                    0)
                    return -1;
            }
        }
    }
    return 0;
}

/* vs_gateways() lists the servers' gateways the VirtualService is bound
 * through (for match blocks that name gateways). */
static int vs_gateways(struct rt_build *b)
{
    const char *vs_ns = b->res->meta.ns;

    b->ngws = 0;
    for (size_t s = 0; s < b->p->nservers; s++) {
        const char *gw = b->p->servers[s].gateway;
        int bound = b->vs->gateways.n == 0 && strcmp(gw, "mesh") == 0;
        for (size_t g = 0; g < b->vs->gateways.n && !bound; g++)
            bound = rt_gateway_ref_eq(b->vs->gateways.v[g], vs_ns, gw);
        if (bound)
            b->gws[b->ngws++] = gw;
    }
    return 0;
}

/* mesh_aliases() adds "name", "name.ns" and "name.ns.svc" for a domain
 * "name.ns.svc.<cluster domain>". */
static int mesh_aliases(struct rt_build *b, const char *domain, int vhost)
{
    const char *cd = b->p->set->domain != NULL ? b->p->set->domain : "";
    size_t n = strlen(domain), cn = strlen(cd);
    const char *dot1, *dot2;

    if (cn == 0 || n < cn + 6 || domain[n - cn - 1] != '.' ||
        strcasecmp(domain + n - cn, cd) != 0 ||
        strncmp(domain + n - cn - 5, ".svc.", 5) != 0)
        return 0;
    dot1 = strchr(domain, '.');
    dot2 = dot1 != NULL ? strchr(dot1 + 1, '.') : NULL;
    if (dot1 == NULL || dot2 == NULL || dot2 != domain + n - cn - 5)
        return 0;
    if (vhost_alias(b, domain, (size_t)(dot1 - domain), vhost) < 0 ||
        vhost_alias(b, domain, (size_t)(dot2 - domain), vhost) < 0 ||
        vhost_alias(b, domain, (size_t)(dot2 - domain) + 4, vhost) < 0)
        return -1;
    return 0;
}

static int bind_vs(struct rt_build *b)
{
    struct strvec domains = {0};
    struct rt_rule *rules = NULL;
    size_t nrules = 0, cap = 0;
    int mesh = 0, rc = -1;

    snprintf(b->vs_id, sizeof(b->vs_id), "%s/%s", b->res->meta.ns,
             b->res->meta.name);
    if (vs_domains(b, &domains, &mesh) < 0) {
        err_set(b->err, "router: out of memory");
        goto fail;
    }
    if (domains.n == 0 || b->vs->http.n == 0) {
        rc = 0;
        goto fail;
    }
    b->vs_name = rt_cstr(b, b->vs_id);
    if (b->vs_name == NULL || vs_gateways(b) < 0)
        goto fail;
    for (size_t i = 0; i < b->vs->http.n; i++) {
        const struct res_http_route *h =
            (const struct res_http_route *)b->vs->http.v + i;
        int r;

        if (h->delegate.name != NULL) {
            /* The delegate's rules take this rule's place. */
            if (rt_compile_delegate(b, h, i, &rules, &nrules, &cap) < 0)
                goto fail;
            continue;
        }
        if (nrules == cap) {
            struct rt_rule *nv;
            cap = cap ? 2 * cap : 8;
            nv = realloc(rules, cap * sizeof(*rules));
            if (nv == NULL) {
                err_set(b->err, "router: out of memory");
                goto fail;
            }
            rules = nv;
        }
        r = rt_compile_rule(b, h, i, &rules[nrules]);
        if (r < 0)
            goto fail;
        if (r == 0)
            nrules++;
    }
    for (size_t d = 0; d < domains.n; d++) {
        int idx = vhost_get(b, domains.v[d]);
        if (idx < 0 || vhost_add_rules(b, idx, rules, nrules) < 0)
            goto fail;
        if (mesh && mesh_aliases(b, domains.v[d], idx) < 0)
            goto fail;
    }
    rc = 0;
fail:
    free(rules);
    strvec_dispose(&domains);
    return rc;
}

/* ---- building ----------------------------------------------------------- */

struct router *router_build(const struct router_params *p, char **err)
{
    struct rt_build b = {0};
    struct router *r;

    if (err != NULL)
        *err = NULL;
    r = router_new();
    if (r == NULL)
        goto nomem;
    b.r = r;
    b.p = p;
    b.err = err;
    b.gws = calloc(p->nservers + 1, sizeof(*b.gws));
    if (b.gws == NULL)
        goto nomem;
    for (size_t i = 0; p->set != NULL && i < p->set->n; i++) {
        const struct resource *res = p->set->v[i];
        if (res->kind != RES_VIRTUAL_SERVICE)
            continue;
        /* exportTo: the gateway sees what is exported to its namespace. */
        if (p->node_ns != NULL &&
            !res_visible(res, &res_virtual_service(res)->export_to, p->node_ns))
            continue;
        b.res = res;
        b.vs = res_virtual_service(res);
        if (bind_vs(&b) < 0)
            goto fail;
    }
    free(b.gws);
    return r;
nomem:
    err_set(err, "router: out of memory");
fail:
    free(b.gws);
    router_unref(r);
    return NULL;
}

/* ---- rules lowered from outside VirtualServices ------------------------- */

/* lowered_rule() compiles one lowered rule into out: a uri prefix block
 * and a forward action to its one cluster, in the router's memory. */
static int lowered_rule(struct rt_build *b, const struct router_rule *lr,
                        size_t index, struct rt_rule *out)
{
    struct route_destination *d = rt_alloc(b, sizeof(*d));
    struct route_action *a = rt_alloc(b, sizeof(*a));
    struct rt_block *blk = rt_alloc(b, sizeof(*blk));
    struct rt_cond *c = rt_alloc(b, sizeof(*c));

    if (d == NULL || a == NULL || blk == NULL || c == NULL)
        return -1;
    c->what = RT_URI;
    c->cost = (int)RT_URI;
    c->m.kind = ROUTE_MATCH_PREFIX;
    if (rt_str(b, lr->prefix != NULL ? lr->prefix : "", 0, &c->m.text) < 0)
        return -1;
    blk->conds = c;
    blk->nconds = 1;
    blk->index = 0;
    blk->uri_kind = ROUTE_MATCH_PREFIX;
    blk->uri_prefix_len = c->m.text.n;
    d->cluster = lr->cluster;
    d->weight = 1;
    a->kind = ROUTE_FORWARD;
    a->rule = index;
    a->dests = d;
    a->ndests = 1;
    a->total_weight = 1;
    a->timeout_ms = lr->timeout_ms;
    b->r->nactions++;
    out->blocks = blk;
    out->nblocks = 1;
    out->action = a;
    return 0;
}

struct router *router_build_rules(const struct router_rule *v, size_t n,
                                  char **err)
{
    struct rt_build b = {0};
    struct rt_rule *rules = calloc(n ? n : 1, sizeof(*rules));
    struct slice *hosts = calloc(n ? n : 1, sizeof(*hosts));
    struct router *r = router_new();

    if (err != NULL)
        *err = NULL;
    b.r = r;
    b.err = err;
    if (r == NULL || rules == NULL || hosts == NULL)
        goto nomem;
    for (size_t i = 0; i < n; i++)
        if (rt_str(&b, v[i].host != NULL ? v[i].host : "*", 1, &hosts[i]) < 0 ||
            lowered_rule(&b, &v[i], i, &rules[i]) < 0)
            goto fail;
    /* First match wins across hosts: each host's virtual host holds, in
     * order, every rule whose host covers it (host_covers, core/host.h). The
     * virtual host a request selects (exact, else longest suffix, else "*") is
     * the narrowest pattern matching its host, and a rule's pattern matches the
     * host exactly when it covers that narrowest one. */
    for (size_t i = 0; i < n; i++) {
        int idx, seen = 0;

        for (size_t k = 0; k < i && !seen; k++)
            seen = strcmp(hosts[k].p, hosts[i].p) == 0;
        if (seen)
            continue;
        idx = vhost_get(&b, hosts[i].p);
        if (idx < 0)
            goto fail;
        for (size_t k = 0; k < n; k++)
            if (host_covers(hosts[k].p, hosts[i].p) &&
                vhost_add_rules(&b, idx, &rules[k], 1) < 0)
                goto fail;
    }
    free(hosts);
    free(rules);
    return r;
nomem:
    err_set(err, "router: out of memory");
fail:
    free(hosts);
    free(rules);
    router_unref(r);
    return NULL;
}
