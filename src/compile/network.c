/*
 * Networks and the split horizon (see network.h): which network an
 * endpoint is on, which gateways reach each network, and the endpoints a
 * cluster gets when some of its endpoints are on other networks, as
 * istiod's EndpointsByNetworkFilter builds them for a sidecar.
 */
#include "config.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"
#include "compile/network.h"
#include "config/bootstrap.h"
#include "config/resource.h"
#include "core/log.h"

struct net_cidr {
    char *network;
    int family;
    uint8_t bytes[16];
    unsigned prefix;
};

static const char *label_of(const struct conf_strmap *m, const char *key)
{
    for (size_t i = 0; m != NULL && i < m->n; i++)
        if (strcmp(m->v[i].key, key) == 0 && m->v[i].val[0] != '\0')
            return m->v[i].val;
    return NULL;
}

void net_table_dispose(struct net_table *t)
{
    free(t->node_network);
    for (size_t i = 0; i < t->ncidrs; i++)
        free(t->cidrs[i].network);
    free(t->cidrs);
    for (size_t i = 0; i < t->nregs; i++) {
        free(t->reg_net[i]);
        free(t->reg_name[i]);
    }
    free(t->reg_net);
    free(t->reg_name);
    for (size_t i = 0; i < t->ngw; i++) {
        free(t->gw[i].network);
        free(t->gw[i].source);
        free(t->gw[i].identity);
    }
    free(t->gw);
    memset(t, 0, sizeof(*t));
}

unsigned net_families(void)
{
    struct ifaddrs *ifa = NULL;
    unsigned f = 0;

    if (getifaddrs(&ifa) != 0)
        return NET_V4 | NET_V6;
    for (struct ifaddrs *i = ifa; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr == NULL)
            continue;
        if (i->ifa_addr->sa_family == AF_INET)
            f |= NET_V4;
        else if (i->ifa_addr->sa_family == AF_INET6)
            f |= NET_V6;
    }
    freeifaddrs(ifa);
    return f != 0 ? f : NET_V4 | NET_V6;
}

/* Adds one gateway address; a duplicate (same network and address) is
 * kept once, with its first source. -1 when memory is short. */
static int gw_add(struct net_table *t, const char *network,
                  const struct addr *a, const char *source,
                  const char *identity)
{
    struct net_gw *nv;

    for (size_t i = 0; i < t->ngw; i++)
        if (strcmp(t->gw[i].network, network) == 0 &&
            addr_equal(&t->gw[i].addr, a))
            return 0;
    nv = realloc(t->gw, (t->ngw + 1) * sizeof(*nv));
    if (nv == NULL)
        return -1;
    t->gw = nv;
    nv[t->ngw].addr = *a;
    nv[t->ngw].network = strdup(network);
    nv[t->ngw].source = strdup(source);
    nv[t->ngw].identity =
        identity != NULL && identity[0] != '\0' ? strdup(identity) : NULL;
    if (nv[t->ngw].network == NULL || nv[t->ngw].source == NULL ||
        (identity != NULL && identity[0] != '\0' &&
         nv[t->ngw].identity == NULL)) {
        free(nv[t->ngw].network);
        free(nv[t->ngw].source);
        free(nv[t->ngw].identity);
        return -1;
    }
    t->ngw++;
    return 0;
}

/* What a gateway name resolved to, added as gateways. */
struct gw_resolve {
    struct net_table *t;
    const char *network, *source, *identity;
    uint32_t port;
    int oom;
};

static void gw_each(void *arg, const char *ip)
{
    struct gw_resolve *r = arg;
    struct addr a;

    if (addr_literal(&a, ip, (int)r->port) == 0 &&
        gw_add(r->t, r->network, &a, r->source, r->identity) < 0)
        r->oom = 1;
}

/* A gateway at address (an IP, or a name looked up with the gateways'
 * minimum TTL) and port. */
static int gw_address(struct net_table *t, const char *network,
                      const char *address, uint32_t port, const char *source,
                      const char *identity, const struct compile_dns *dns)
{
    struct gw_resolve r = {t, network, source, identity, port, 0};
    struct addr a;

    if (address == NULL || address[0] == '\0' || port == 0 || port > 65535)
        return 0;
    if (addr_literal(&a, address, (int)port) == 0)
        return gw_add(t, network, &a, source, identity);
    if (dns == NULL)
        return 0;
    if (dns->lookup_min != NULL)
        dns->lookup_min(dns->arg, address, NET_GATEWAY_MIN_TTL_MS, gw_each, &r);
    else
        dns->lookup(dns->arg, address, gw_each, &r);
    return r.oom ? -1 : 0;
}

/* meshNetworks registryServiceName: the service of that host the node
 * sees; its externalIPs (a Kubernetes Service), else its endpoints'
 * addresses, each on port. */
static int gw_registry(struct net_table *t, const char *network,
                       const char *host, uint32_t port, const char *identity,
                       const struct resource_set *set, const char *node_ns,
                       const struct compile_dns *dns)
{
    char fq[512], src[600];

    snprintf(src, sizeof(src), "meshNetworks registryServiceName %s", host);
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_service_entry *se;
        int match = 0;

        if (!res_is_service(r))
            continue;
        se = res_service_entry(r);
        if (se == NULL ||
            (node_ns != NULL && !res_visible(r, &se->export_to, node_ns)))
            continue;
        for (size_t k = 0; k < se->hosts.n && !match; k++)
            match = res_host_fqdn(se->hosts.v[k], r->meta.ns, set->domain, fq,
                                  sizeof(fq)) >= 0 &&
                    strcmp(fq, host) == 0;
        if (!match)
            continue;
        if (r->kind == RES_SERVICE) {
            const struct res_k8s_service *svc = r->spec;
            if (svc->external_ips.n > 0) {
                for (size_t k = 0; k < svc->external_ips.n; k++)
                    if (gw_address(t, network, svc->external_ips.v[k], port,
                                   src, identity, dns) < 0)
                        return -1;
                continue;
            }
        }
        for (size_t k = 0; k < se->endpoints.n; k++) {
            const struct res_workload_entry *we =
                (const struct res_workload_entry *)se->endpoints.v + k;
            if (gw_address(t, network, we->address, port, src, identity, dns) <
                0)
                return -1;
        }
    }
    return 0;
}

/* istiod's gateway discovery: a Service labelled
 * topology.istio.io/network with the gateway port (the label
 * networking.istio.io/gatewayPort, 15443 by default) is that network's
 * gateway at its external addresses. */
static int gw_services(struct net_table *t, const struct resource_set *set,
                       const struct compile_dns *dns)
{
    char src[600];

    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_k8s_service *svc;
        const char *network, *ps;
        uint32_t port = RES_GATEWAY_PORT_DEFAULT;
        int has_port = 0;

        if (r->kind != RES_SERVICE ||
            (network = label_of(&r->meta.labels, RES_NETWORK_LABEL)) == NULL)
            continue;
        svc = r->spec;
        if ((ps = label_of(&r->meta.labels, RES_GATEWAY_PORT_LABEL)) != NULL) {
            char *end;
            unsigned long v = strtoul(ps, &end, 10);
            if (*end != '\0' || v < 1 || v > 65535) {
                log_warn("Service %s/%s: label %s: '%s' is not a port; "
                         "not a gateway",
                         r->meta.ns, r->meta.name, RES_GATEWAY_PORT_LABEL, ps);
                continue;
            }
            port = (uint32_t)v;
        }
        for (size_t k = 0; k < svc->ports.n; k++)
            has_port |= ((const struct res_k8s_port *)svc->ports.v)[k].port ==
                        (int64_t)port;
        if (!has_port || svc->external_ips.n == 0)
            continue;
        if (port == NET_HBONE_PORT) {
            /* An ambient east-west gateway: double HBONE verifies the
             * gateway's identity, which only meshNetworks gives. */
            log_warn("Service %s/%s: gateway port %u is HBONE (ambient "
                     "east-west); strait reaches such a gateway only as a "
                     "meshNetworks gateway with its identity; not a gateway",
                     r->meta.ns, r->meta.name, port);
            continue;
        }
        snprintf(src, sizeof(src), "Service %s/%s", r->meta.ns, r->meta.name);
        for (size_t k = 0; k < svc->external_ips.n; k++)
            if (gw_address(t, network, svc->external_ips.v[k], port, src, NULL,
                           dns) < 0)
                return -1;
    }
    return 0;
}

static int gw_cmp(const void *a, const void *b)
{
    const struct net_gw *x = a, *y = b;
    char as[ADDR_STRLEN], bs[ADDR_STRLEN];
    int c = strcmp(x->network, y->network);

    if (c != 0)
        return c;
    if (addr_family(&x->addr) != addr_family(&y->addr))
        return addr_family(&x->addr) < addr_family(&y->addr) ? -1 : 1;
    return strcmp(addr_format(&x->addr, as, sizeof(as)),
                  addr_format(&y->addr, bs, sizeof(bs)));
}

static int rules_add(struct net_table *t, const char *network,
                     const struct bootstrap_network *nw)
{
    for (size_t k = 0; k < nw->endpoints.n; k++) {
        const struct bootstrap_net_endpoint *e =
            (const struct bootstrap_net_endpoint *)nw->endpoints.v + k;
        const char *why;

        if (e->from_cidr != NULL && e->from_cidr[0] != '\0') {
            struct net_cidr *nv =
                realloc(t->cidrs, (t->ncidrs + 1) * sizeof(*nv));
            if (nv == NULL)
                return -1;
            t->cidrs = nv;
            memset(&nv[t->ncidrs], 0, sizeof(nv[0]));
            /* Validated with the bootstrap: a bad one is not loaded. */
            if (addr_cidr_parse(e->from_cidr, &nv[t->ncidrs].family,
                                nv[t->ncidrs].bytes, &nv[t->ncidrs].prefix,
                                &why) < 0)
                continue;
            if ((nv[t->ncidrs].network = strdup(network)) == NULL)
                return -1;
            t->ncidrs++;
        } else if (e->from_registry != NULL && e->from_registry[0] != '\0') {
            char **a = realloc(t->reg_net, (t->nregs + 1) * sizeof(*a));
            char **b;
            if (a == NULL)
                return -1;
            t->reg_net = a;
            b = realloc(t->reg_name, (t->nregs + 1) * sizeof(*b));
            if (b == NULL)
                return -1;
            t->reg_name = b;
            a[t->nregs] = strdup(network);
            b[t->nregs] = strdup(e->from_registry);
            if (a[t->nregs] == NULL || b[t->nregs] == NULL) {
                free(a[t->nregs]);
                free(b[t->nregs]);
                return -1;
            }
            t->nregs++;
        }
    }
    return 0;
}

int net_table_build(struct net_table *t, const struct net_inputs *in,
                    const struct resource_set *set, const char *node_ns,
                    const struct compile_dns *dns, unsigned families)
{
    memset(t, 0, sizeof(*t));
    t->families = families;
    t->node_network = strdup(in->node_network ? in->node_network : "");
    if (t->node_network == NULL)
        return -1;
    for (size_t i = 0; in->mesh != NULL && i < in->mesh->networks.n; i++) {
        const struct bootstrap_network *nw =
            (const struct bootstrap_network *)in->mesh->networks.v + i;
        const char *name = in->mesh->networks.keys[i];

        if (rules_add(t, name, nw) < 0)
            return -1;
        for (size_t k = 0; k < nw->gateways.n; k++) {
            const struct bootstrap_net_gateway *g =
                (const struct bootstrap_net_gateway *)nw->gateways.v + k;
            int rc;
            if (g->registry_service_name != NULL &&
                g->registry_service_name[0] != '\0')
                rc = gw_registry(t, name, g->registry_service_name,
                                 (uint32_t)g->port, g->identity, set, node_ns,
                                 dns);
            else
                rc = gw_address(t, name, g->address, (uint32_t)g->port,
                                "meshNetworks", g->identity, dns);
            if (rc < 0)
                return -1;
        }
    }
    if (gw_services(t, set, dns) < 0)
        return -1;
    for (size_t i = 0; i < in->nextra; i++) {
        const struct net_gateway *g = &in->extra[i];
        if (g->network == NULL || g->network[0] == '\0')
            continue;
        if (gw_address(t, g->network, g->address, g->port,
                       g->source ? g->source : "runtime", g->identity, dns) < 0)
            return -1;
    }
    if (t->ngw > 1)
        qsort(t->gw, t->ngw, sizeof(*t->gw), gw_cmp);
    return 0;
}

/* Is a's IP in c? */
static int cidr_holds(const struct net_cidr *c, const struct addr *a)
{
    const uint8_t *p;
    unsigned full, rest;

    if (addr_family(a) != c->family)
        return 0;
    if (c->family == AF_INET)
        p = (const uint8_t *)&((const struct sockaddr_in *)&a->ss)->sin_addr;
    else
        p = ((const struct sockaddr_in6 *)&a->ss)->sin6_addr.s6_addr;
    full = c->prefix / 8;
    rest = c->prefix % 8;
    if (memcmp(p, c->bytes, full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    return (p[full] & (uint8_t)(0xff << (8 - rest))) == c->bytes[full];
}

const char *net_endpoint_network(const struct net_table *t,
                                 const char *explicit_net,
                                 const struct conf_strmap *labels,
                                 const struct addr *a)
{
    const char *l, *reg;

    if (explicit_net != NULL && explicit_net[0] != '\0')
        return explicit_net;
    if ((l = label_of(labels, RES_NETWORK_LABEL)) != NULL)
        return l;
    for (size_t i = 0; a != NULL && i < t->ncidrs; i++)
        if (cidr_holds(&t->cidrs[i], a))
            return t->cidrs[i].network;
    if ((reg = label_of(labels, RES_CLUSTER_LABEL)) != NULL)
        for (size_t i = 0; i < t->nregs; i++)
            if (strcmp(t->reg_name[i], reg) == 0)
                return t->reg_net[i];
    return t->node_network != NULL ? t->node_network : "";
}

int net_has_gateway(const struct net_table *t, const char *network)
{
    for (size_t i = 0; i < t->ngw; i++)
        if (strcmp(t->gw[i].network, network) == 0)
            return 1;
    return 0;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

uint32_t net_scale_factor(const struct net_table *t)
{
    uint64_t lcm = 1;

    /* The table is sorted by network: count each run. */
    for (size_t i = 0; i < t->ngw;) {
        size_t k = i;
        while (k < t->ngw && strcmp(t->gw[k].network, t->gw[i].network) == 0)
            k++;
        lcm = lcm / gcd(lcm, k - i) * (k - i);
        if (lcm > UINT32_MAX)
            return UINT32_MAX;
        i = k;
    }
    return (uint32_t)lcm;
}

static int family_bit(const struct addr *a)
{
    return addr_family(a) == AF_INET6 ? NET_V6 : NET_V4;
}

/* The usable gateways of network: [*first, *first + *n) in t->gw, less
 * those of a family the node has not (counted in *usable). */
static void gw_range(const struct net_table *t, const char *network,
                     size_t *first, size_t *n, size_t *usable)
{
    *first = *n = *usable = 0;
    for (size_t i = 0; i < t->ngw; i++) {
        if (strcmp(t->gw[i].network, network) != 0)
            continue;
        if (*n == 0)
            *first = i;
        (*n)++;
        if (t->families & (unsigned)family_bit(&t->gw[i].addr))
            (*usable)++;
    }
}

static int out_push(struct net_split_result *r, const struct net_out *o)
{
    struct net_out *nv = realloc(r->v, (r->n + 1) * sizeof(*nv));

    if (nv == NULL)
        return -1;
    r->v = nv;
    r->v[r->n++] = *o;
    return 0;
}

static int same_str(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

int net_split(const struct net_table *t, const struct net_ep *eps, size_t n,
              unsigned flags, struct net_split_result *out)
{
    uint64_t *gw_weight = NULL;
    uint32_t scale;
    const char *node = t->node_network ? t->node_network : "";
    char *done = NULL;
    int mtls = (flags & NET_SPLIT_MTLS) != 0;
    int view = (flags & NET_SPLIT_LOCAL_VIEW) != 0 && node[0] != '\0';

    memset(out, 0, sizeof(*out));
    if (t->ngw == 0 || view) {
        /* Not multi-network, or an east-west gateway's own view: the
         * endpoints unchanged, less those it cannot see. */
        for (size_t i = 0; i < n; i++) {
            struct net_out o = {eps[i].addr, eps[i].weight, eps[i].network,
                                eps[i].locality, -1};
            const char *net = eps[i].network ? eps[i].network : "";
            if (view && net[0] != '\0' && strcmp(net, node) != 0) {
                out->skipped_view++;
                continue;
            }
            if (addr_family(&eps[i].addr) == AF_UNSPEC) {
                out->skipped_no_gateway++;
                continue;
            }
            if (out_push(out, &o) < 0)
                goto oom;
        }
        return 0;
    }
    scale = net_scale_factor(t);
    gw_weight = calloc(t->ngw, sizeof(*gw_weight));
    done = calloc(n ? n : 1, 1);
    if (gw_weight == NULL || done == NULL)
        goto oom;
    /* One locality group at a time, in the order each first appears. */
    for (size_t g = 0; g < n; g++) {
        const char *loc = eps[g].locality;

        if (done[g])
            continue;
        memset(gw_weight, 0, t->ngw * sizeof(*gw_weight));
        for (size_t i = g; i < n; i++) {
            const char *net = eps[i].network ? eps[i].network : "";
            size_t first, ngw, usable;
            uint64_t w;

            if (done[i] || !same_str(eps[i].locality, loc))
                continue;
            done[i] = 1;
            gw_range(t, net, &first, &ngw, &usable);
            if (net[0] == '\0' || strcmp(net, node) == 0 || ngw == 0) {
                struct net_out o = {eps[i].addr, eps[i].weight, eps[i].network,
                                    eps[i].locality, -1};
                if (addr_family(&eps[i].addr) == AF_UNSPEC) {
                    out->skipped_no_gateway++;
                    continue;
                }
                if (out_push(out, &o) < 0)
                    goto oom;
                continue;
            }
            if (!mtls) {
                /* Only an HBONE gateway carries it: double HBONE is mTLS
                 * whatever the cluster's own TLS. */
                size_t hb = 0;
                for (size_t k = first; k < t->ngw && k < first + ngw; k++)
                    hb += t->gw[k].identity != NULL &&
                          (t->families & (unsigned)family_bit(&t->gw[k].addr));
                if (hb == 0) {
                    out->skipped_mtls++;
                    continue;
                }
                usable = hb;
            }
            if (usable == 0) {
                out->skipped_family++;
                continue;
            }
            /* Istio's scaleEndpointLBWeight, then the even split. */
            w = (uint64_t)(eps[i].weight ? eps[i].weight : 1) * scale;
            if (w > UINT32_MAX)
                w = UINT32_MAX;
            w /= usable;
            for (size_t k = first; k < t->ngw && k < first + ngw; k++)
                if ((t->families & (unsigned)family_bit(&t->gw[k].addr)) &&
                    (mtls || t->gw[k].identity != NULL))
                    gw_weight[k] += w;
        }
        for (size_t k = 0; k < t->ngw; k++) {
            struct net_out o;
            if (gw_weight[k] == 0)
                continue;
            o.addr = t->gw[k].addr;
            o.weight =
                gw_weight[k] > UINT32_MAX ? UINT32_MAX : (uint32_t)gw_weight[k];
            o.network = t->gw[k].network;
            o.locality = loc;
            o.gw = (int)k;
            if (out_push(out, &o) < 0)
                goto oom;
        }
    }
    free(gw_weight);
    free(done);
    return 0;
oom:
    free(gw_weight);
    free(done);
    net_split_dispose(out);
    return -1;
}

void net_split_dispose(struct net_split_result *r)
{
    free(r->v);
    memset(r, 0, sizeof(*r));
}

void net_via_free(char **via, size_t n)
{
    for (size_t i = 0; via != NULL && i < n; i++)
        free(via[i]);
    free(via);
}

int net_split_lists(const struct net_table *t, struct net_lists *l,
                    unsigned flags, char ***via, struct net_split_result *sr)
{
    size_t n0 = *l->n, n;
    struct net_ep *in = calloc(n0 ? n0 : 1, sizeof(*in));
    struct addr *v = NULL;
    uint32_t *w = NULL;
    const char **net = NULL, **loc = NULL, **hid = NULL;
    char **vv = NULL;

    *via = NULL;
    if (in == NULL)
        return -1;
    for (size_t i = 0; i < n0; i++) {
        in[i].addr = (*l->v)[i];
        in[i].weight = (*l->w)[i];
        in[i].network = (*l->net)[i];
        in[i].locality = (*l->loc)[i];
    }
    if (net_split(t, in, n0, flags, sr) < 0) {
        free(in);
        return -1;
    }
    free(in);
    n = sr->n ? sr->n : 1;
    v = calloc(n, sizeof(*v));
    w = calloc(n, sizeof(*w));
    net = calloc(n, sizeof(*net));
    loc = calloc(n, sizeof(*loc));
    vv = calloc(n, sizeof(*vv));
    hid = calloc(n, sizeof(*hid));
    if (v == NULL || w == NULL || net == NULL || loc == NULL || vv == NULL ||
        hid == NULL)
        goto oom;
    for (size_t i = 0; i < sr->n; i++) {
        const struct net_out *o = &sr->v[i];
        v[i] = o->addr;
        w[i] = o->weight;
        net[i] = o->network;
        loc[i] = o->locality;
        if (o->gw >= 0) {
            char as[ADDR_STRLEN], text[ADDR_STRLEN + 700];
            hid[i] = t->gw[o->gw].identity;
            snprintf(text, sizeof(text), "%s (%s%s)",
                     addr_format(&t->gw[o->gw].addr, as, sizeof(as)),
                     t->gw[o->gw].source,
                     hid[i] != NULL ? ", double HBONE" : "");
            if ((vv[i] = strdup(text)) == NULL)
                goto oom;
        }
    }
    free(*l->v);
    free(*l->w);
    free(*l->net);
    free(*l->loc);
    *l->v = v;
    *l->w = w;
    *l->net = net;
    *l->loc = loc;
    *l->n = sr->n;
    *via = vv;
    if (l->hbone_id != NULL)
        *l->hbone_id = hid;
    else
        free(hid);
    /* Only the counts are read from here on. */
    free(sr->v);
    sr->v = NULL;
    return 0;
oom:
    free(v);
    free(w);
    free(net);
    free(loc);
    free(hid);
    net_via_free(vv, sr->n);
    net_split_dispose(sr);
    return -1;
}
