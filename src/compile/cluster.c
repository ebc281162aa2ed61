/*
 * Lowering route destinations into clusters: (host, subset, port)
 * resolved against ServiceEntries, WorkloadEntries and DNS, with the
 * DestinationRule's policy applied (balancing, hashing, outlier
 * detection, pools, TLS origination), kept by identity across
 * snapshots, and the outboundTrafficPolicy for undeclared hosts.
 */
#include "config.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/x509.h>

#include "config/res-k8s.h"
#include "config/resource.h"
#include "compile/compile.h"
#include "core/ascii.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/host.h"
#include "core/log.h"
#include "compile/identity.h"
#include "compile/istio.h"
#include "compile/locality.h"
#include "compile/metrics.h"
#include "compile/network.h"
#include "core/series.h"
#include "tls/tls.h"
#include "upstream/cluster.h"
#include "upstream/hash.h"
#include "upstream/outlier.h"
#include "upstream/priority.h"

/* The set indexes under one host of istio_clusters.hosts, ascending. */
struct istio_hostrefs {
    size_t *v;
    size_t n;
    size_t cap;
};

static int push_index(size_t **v, size_t *n, size_t *cap, size_t i)
{
    if (*n > 0 && (*v)[*n - 1] == i)
        return 0; /* a resource naming the host twice is listed once */
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 2;
        size_t *nv = realloc(*v, nc * sizeof(*nv));
        if (nv == NULL)
            return -1;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = i;
    return 0;
}

/* hosts_add() lists set index i under the full form of host as r's
 * namespace makes it. */
static int hosts_add(struct istio_clusters *t, const struct resource *r,
                     const char *host, size_t i)
{
    char fq[512];
    struct istio_hostrefs *h;

    if (res_host_fqdn(host, r->meta.ns, t->set->domain, fq, sizeof(fq)) < 0)
        return 0; /* no full name: no lookup by name finds it either */
    ascii_lower_str(fq);
    h = strmap_get(&t->hosts, fq);
    if (h == NULL) {
        h = calloc(1, sizeof(*h));
        if (h == NULL || strmap_put(&t->hosts, fq, h) < 0) {
            free(h);
            return -1;
        }
    }
    return push_index(&h->v, &h->n, &h->cap, i);
}

static void hosts_dispose(struct istio_clusters *t)
{
    size_t pos = 0;
    const char *k;
    void *v;

    while (strmap_next(&t->hosts, &pos, &k, &v)) {
        free(((struct istio_hostrefs *)v)->v);
        free(v);
    }
    strmap_dispose(&t->hosts);
    free(t->wild);
    t->wild = NULL;
    t->nwild = 0;
    t->hosts_ok = 0;
}

/* hosts_build() indexes the set by host: every host of a service, the
 * app label of a WorkloadEntry (the service it stands for), the host of
 * a DestinationRule. */
static void hosts_build(struct istio_clusters *t)
{
    const struct resource_set *set = t->set;
    size_t awild = 0;

    strmap_init(&t->hosts);
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        int rc = 0;
        if (res_is_service(r)) {
            const struct res_service_entry *se = res_service_entry(r);
            for (size_t k = 0; k < se->hosts.n && rc == 0; k++) {
                rc = hosts_add(t, r, se->hosts.v[k], i);
                if (rc == 0 && host_pattern_kind(se->hosts.v[k]) != HOST_EXACT)
                    rc = push_index(&t->wild, &t->nwild, &awild, i);
            }
        } else if (r->kind == RES_WORKLOAD_ENTRY) {
            const struct res_workload_entry *we = res_workload_entry(r);
            for (size_t k = 0; k < we->labels.n && rc == 0; k++)
                if (strcmp(we->labels.v[k].key, "app") == 0)
                    rc = hosts_add(t, r, we->labels.v[k].val, i);
        } else if (r->kind == RES_DESTINATION_RULE) {
            rc = hosts_add(t, r, res_destination_rule(r)->host, i);
        }
        if (rc < 0) {
            hosts_dispose(t);
            strmap_init(&t->hosts);
            log_warn("compile: out of memory indexing hosts; scanning");
            return;
        }
    }
    t->hosts_ok = 1;
}

/*
 * host_refs() gives the set indexes that may name host (full), ascending:
 * its entry in t->hosts (case folded, so each caller still compares as
 * its rule says). *all is set when there is no index and the caller is
 * to try every index of the set.
 */
static const struct istio_hostrefs *host_refs(const struct istio_clusters *t,
                                              const char *host, int *all)
{
    char key[512];
    size_t n = strlen(host);

    *all = !t->hosts_ok || n >= sizeof(key);
    if (*all)
        return NULL;
    ascii_lower_copy(key, host, n);
    key[n] = '\0';
    return strmap_get(&t->hosts, key);
}

/* The i-th index to try of a host_refs() answer. */
#define REFS_N(refs, all, set) ((all) ? (set)->n : (refs) ? (refs)->n : 0)
#define REFS_AT(refs, all, i) ((all) ? (i) : (refs)->v[i])

void istio_clusters_init(struct istio_clusters *t,
                         const struct resource_set *set, int nworkers,
                         const struct ident_map *prev, struct ident_map *next)
{
    memset(t, 0, sizeof(*t));
    t->set = set;
    t->nworkers = nworkers;
    strmap_init(&t->ids);
    t->prev = prev;
    t->next = next;
    hosts_build(t);
}

void istio_clusters_dispose(struct istio_clusters *t)
{
    for (size_t i = 0; i < t->n; i++)
        cluster_unref(t->v[i]);
    free(t->v);
    strmap_dispose(&t->ids);
    hosts_dispose(t);
    net_table_dispose(&t->nt);
    memset(t, 0, sizeof(*t));
}

void istio_used_init(struct istio_used *u)
{
    memset(u, 0, sizeof(*u));
    ident_init(&u->clusters);
    ident_init(&u->files);
}

void istio_used_dispose(struct istio_used *u)
{
    ident_abandon(&u->clusters);
    ident_abandon(&u->files);
    for (size_t i = 0; i < u->npaths; i++)
        free(u->paths[i]);
    free(u->paths);
    memset(u, 0, sizeof(*u));
}

void istio_file_ident(struct ident *d, const char *path)
{
    struct stat st;

    ident_str(d, 'f', path);
    if (stat(path, &st) != 0) {
        ident_u64(d, '-', 0);
        return;
    }
    ident_u64(d, 'I', (uint64_t)st.st_ino);
    ident_u64(d, 'T', (uint64_t)st.st_mtim.tv_sec);
    ident_u64(d, 't', (uint64_t)st.st_mtim.tv_nsec);
}

void istio_cluster_map_dispose(struct ident_map *m)
{
    size_t pos = 0;
    const struct ident_id *k;
    void *v;

    while (ident_map_next(m, &pos, &k, &v))
        cluster_unref(v);
    ident_map_dispose(m);
}

/* Endpoints being collected for one cluster, with their weights
 * (WorkloadEntry weight; 0 or absent counts as 1). */
/* What the workloads behind a cluster say of themselves, for Istio's
 * destination_* labels: a value all of them share, else unknown. */
struct eps_meta {
    size_t n; /* workloads seen */
    const char *ns, *name, *sa;
    const struct conf_strmap *labels;
    unsigned mixed; /* META_* */
};

#define META_NS 1u
#define META_NAME 2u
#define META_SA 4u
#define META_LABELS 8u

struct eps {
    struct addr *v;
    uint32_t *w;
    /* Each endpoint's network and locality (borrowed from the set or the
     * network table), parallel to v. */
    const char **net, **loc;
    /* Per endpoint: reached through HBONE (its workload is in Istio's
     * ambient mesh), and its SPIFFE ID (NULL: no service account). */
    uint8_t *hb;
    char **id;
    size_t nhb; /* endpoints marked for HBONE */
    /* Each endpoint's labels (borrowed; NULL: none), parallel to v until
     * the split horizon (eps_split()) reorders v, and the localities read
     * from topology labels (owned; loc points into them). */
    const struct conf_strmap **lab;
    char **own;
    size_t nown;
    size_t n;
    const struct net_table *nt; /* the networks endpoints are put on */
    struct conf_strs sans;      /* identities the endpoints may present */
    struct eps_meta meta;
    /* The registry entry: the ServiceEntry's namespace and the host, or
     * a WorkloadEntry's namespace and app (borrowed from the set). */
    const char *svc_ns, *svc_name;
};

/* What locality balancing made of a cluster's endpoints. */
struct eps_levels {
    uint32_t *level;  /* per endpoint; NULL: one level */
    uint32_t *weight; /* per level (distribute's localities); NULL: the
                         levels are priorities */
    size_t n;         /* levels */
};

static void eps_levels_dispose(struct eps_levels *l)
{
    free(l->level);
    free(l->weight);
    memset(l, 0, sizeof(*l));
}

static const char *meta_label(const struct conf_strmap *m, const char *key)
{
    for (size_t i = 0; m != NULL && i < m->n; i++)
        if (strcmp(m->v[i].key, key) == 0)
            return m->v[i].val;
    return NULL;
}

static int str_same(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

/* A workload behind the cluster: ns and name of its WorkloadEntry (name
 * NULL for a ServiceEntry's inline endpoint). */
static void eps_meta_add(struct eps *e, const char *ns, const char *name,
                         const struct res_workload_entry *we)
{
    static const char *const keys[] = {"app",
                                       "version",
                                       "service.istio.io/canonical-name",
                                       "service.istio.io/canonical-revision",
                                       "app.kubernetes.io/name",
                                       "app.kubernetes.io/version",
                                       "service.istio.io/workload-name",
                                       "topology.istio.io/cluster"};
    struct eps_meta *m = &e->meta;
    const char *sa = we->service_account && we->service_account[0]
                         ? we->service_account
                         : NULL;

    if (m->n++ == 0) {
        m->ns = ns;
        m->name = name;
        m->sa = sa;
        m->labels = &we->labels;
        return;
    }
    if (!str_same(m->ns, ns))
        m->mixed |= META_NS;
    if (!str_same(m->name, name))
        m->mixed |= META_NAME;
    if (!str_same(m->sa, sa))
        m->mixed |= META_SA;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (!str_same(meta_label(m->labels, keys[i]),
                      meta_label(&we->labels, keys[i])))
            m->mixed |= META_LABELS;
}

/* An identity an endpoint may present (its SPIFFE ID from its service
 * account, or a ServiceEntry's subjectAltNames), for ISTIO_MUTUAL. */
static void eps_san(struct eps *e, const char *san)
{
    char **nv;

    if (san == NULL || san[0] == '\0')
        return;
    for (size_t i = 0; i < e->sans.n; i++)
        if (strcmp(e->sans.v[i], san) == 0)
            return;
    nv = realloc(e->sans.v, (e->sans.n + 1) * sizeof(*nv));
    if (nv == NULL)
        return;
    e->sans.v = nv;
    if ((e->sans.v[e->sans.n] = strdup(san)) != NULL)
        e->sans.n++;
}

static void eps_sa(struct eps *e, const char *td, const char *ns,
                   const char *sa)
{
    char id[600];

    if (sa == NULL || sa[0] == '\0')
        return;
    snprintf(id, sizeof(id), "spiffe://%s/ns/%s/sa/%s",
             td ? td : "cluster.local", ns, sa);
    eps_san(e, id);
}

static void eps_dispose(struct eps *e)
{
    free(e->v);
    free(e->w);
    free(e->net);
    free(e->loc);
    free(e->hb);
    for (size_t i = 0; e->id != NULL && i < e->n; i++)
        free(e->id[i]);
    free(e->id);
    free(e->lab);
    for (size_t i = 0; i < e->nown; i++)
        free(e->own[i]);
    free(e->own);
    for (size_t i = 0; i < e->sans.n; i++)
        free(e->sans.v[i]);
    free(e->sans.v);
    memset(e, 0, sizeof(*e));
}

static uint32_t we_weight(const struct res_workload_entry *we)
{
    return we->weight > 0 ? (uint32_t)we->weight : 1;
}

/* The locality of workload we: its own, else from Kubernetes' topology
 * labels (kept in e->own), else "". */
static const char *eps_locality(struct eps *e,
                                const struct res_workload_entry *we)
{
    char buf[512];
    const char *l;
    char **no, *d;

    if (we == NULL)
        return "";
    l = locality_of(we->locality, &we->labels, buf, sizeof(buf));
    if (l == NULL)
        return "";
    if (l != buf)
        return l;
    no = realloc(e->own, (e->nown + 1) * sizeof(*no));
    if (no == NULL)
        return "";
    e->own = no;
    if ((d = strdup(buf)) == NULL)
        return "";
    e->own[e->nown++] = d;
    return d;
}

/* An endpoint at ip:port; we (NULL: none) says its network, labels and
 * locality. */
static void eps_add(struct eps *e, const char *ip, int64_t port,
                    uint32_t weight, const struct res_workload_entry *we)
{
    char s[128];
    struct addr a;
    const char *why;
    struct addr *nv;
    uint32_t *nw;
    const char **nn, **nl;
    const struct conf_strmap **nb;

    if ((ip == NULL || ip[0] == '\0') && we != NULL && we->network != NULL &&
        we->network[0] != '\0') {
        /* A workload without an address, on a network: Istio reaches it
         * only through that network's gateways (net_split()). */
        memset(&a, 0, sizeof(a));
        a.ss.ss_family = AF_UNSPEC;
        goto add;
    }
    if (ip == NULL || port <= 0 || port > 65535)
        return;
    /* IPv6 addresses get their brackets here. */
    snprintf(s, sizeof(s), strchr(ip, ':') ? "[%s]:%" PRId64 : "%s:%" PRId64,
             ip, port);
    if (addr_parse(&a, s, strlen(s), 0, &why) < 0) {
        log_warn("endpoint %s: %s (only IP addresses are used so far)", s, why);
        return;
    }
add:
    nv = realloc(e->v, (e->n + 1) * sizeof(*nv));
    if (nv == NULL)
        return;
    e->v = nv;
    nw = realloc(e->w, (e->n + 1) * sizeof(*nw));
    if (nw == NULL)
        return;
    e->w = nw;
    nn = realloc(e->net, (e->n + 1) * sizeof(*nn));
    if (nn == NULL)
        return;
    e->net = nn;
    nl = realloc(e->loc, (e->n + 1) * sizeof(*nl));
    if (nl == NULL)
        return;
    e->loc = nl;
    nb = realloc(e->lab, (e->n + 1) * sizeof(*nb));
    if (nb == NULL)
        return;
    e->lab = nb;
    e->net[e->n] = e->nt != NULL
                       ? net_endpoint_network(e->nt, we ? we->network : NULL,
                                              we ? &we->labels : NULL, &a)
                       : "";
    e->loc[e->n] = eps_locality(e, we);
    e->lab[e->n] = we != NULL ? &we->labels : NULL;
    {
        uint8_t *nh = realloc(e->hb, e->n + 1);
        char **ni;
        if (nh == NULL)
            return;
        e->hb = nh;
        ni = realloc(e->id, (e->n + 1) * sizeof(*ni));
        if (ni == NULL)
            return;
        e->id = ni;
    }
    e->v[e->n] = a;
    e->hb[e->n] = 0;
    e->id[e->n] = NULL;
    e->w[e->n++] = weight;
}

/* eps.hb: 1 reached through HBONE at its own address; double HBONE
 * through its network's HBONE gateway (the endpoint is the gateway). */
#define EPS_HBONE_DOUBLE 2

/* The label Istio puts on workloads of its ambient mesh (a namespace's or
 * pod's istio.io/dataplane-mode), read from the endpoint itself: such an
 * endpoint is reached through HBONE on its port 15008. */
#define AMBIENT_LABEL "istio.io/dataplane-mode"

/* eps_tag() marks the endpoints added since from (one workload's
 * addresses) with what the workload says: HBONE, and its SPIFFE ID. */
static void eps_tag(struct eps *e, size_t from, const char *td, const char *ns,
                    const struct res_workload_entry *we)
{
    const char *mode = meta_label(&we->labels, AMBIENT_LABEL);
    int hb = mode != NULL && strcmp(mode, "ambient") == 0;

    for (size_t i = from; i < e->n; i++) {
        if (hb && !e->hb[i]) {
            e->hb[i] = 1;
            e->nhb++;
        }
        if (we->service_account != NULL && we->service_account[0] != '\0' &&
            e->id[i] == NULL &&
            asprintf(&e->id[i], "spiffe://%s/ns/%s/sa/%s",
                     td ? td : "cluster.local", ns, we->service_account) < 0)
            e->id[i] = NULL;
    }
}

/* The port an endpoint listens on for service port sp: its own mapping
 * for the port's name, else the target port, else the service port. */
static int64_t endpoint_port(const struct res_workload_entry *we,
                             const struct res_se_port *sp, uint32_t fallback)
{
    if (sp == NULL)
        return fallback;
    for (size_t i = 0; sp->name != NULL && i < we->ports.n; i++)
        if (strcmp(we->ports.v[i].key, sp->name) == 0)
            return we->ports.v[i].val;
    return sp->target_port > 0 ? sp->target_port : sp->number;
}

static const struct res_subset *
find_subset(const struct istio_clusters *t, const char *host,
            const char *subset, const struct res_destination_rule **dr,
            const struct resource **drr)
{
    const struct resource_set *set = t->set;
    const char *node_ns = t->node_ns;
    char fq[512];
    int all;
    const struct istio_hostrefs *refs = host_refs(t, host, &all);

    *dr = NULL;
    *drr = NULL;
    for (size_t j = 0; j < REFS_N(refs, all, set); j++) {
        const struct resource *r = set->v[REFS_AT(refs, all, j)];
        const struct res_destination_rule *d;

        if (r->kind != RES_DESTINATION_RULE)
            continue;
        d = res_destination_rule(r);
        if (node_ns != NULL && !res_visible(r, &d->export_to, node_ns))
            continue;
        if (res_host_fqdn(d->host, r->meta.ns, set->domain, fq, sizeof(fq)) <
                0 ||
            strcmp(fq, host) != 0)
            continue;
        *dr = d;
        *drr = r;
        for (size_t k = 0; subset != NULL && k < d->subsets.n; k++) {
            const struct res_subset *s =
                &((const struct res_subset *)d->subsets.v)[k];
            if (strcmp(s->name, subset) == 0)
                return s;
        }
        return NULL;
    }
    return NULL;
}

static int se_has_host(const struct resource *r,
                       const struct res_service_entry *se, const char *host,
                       const char *domain)
{
    char fq[512];

    for (size_t i = 0; i < se->hosts.n; i++)
        if (res_host_fqdn(se->hosts.v[i], r->meta.ns, domain, fq, sizeof(fq)) >=
                0 &&
            strcmp(fq, host) == 0)
            return 1;
    return 0;
}

/* host_is_name() is true for a DNS name, as opposed to an IP address or a
 * wildcard. */
static int host_is_name(const char *host)
{
    struct in6_addr a6;
    struct in_addr a4;

    return host[0] != '\0' && strchr(host, '*') == NULL &&
           inet_pton(AF_INET, host, &a4) != 1 &&
           inet_pton(AF_INET6, host, &a6) != 1;
}

/* What a DNS name resolves to, as endpoints on one port, each address
 * with the weight of the endpoint that named it. */
struct dns_add {
    struct eps *e;
    int64_t port;
    uint32_t weight;
    const struct res_workload_entry *we;
};

static void dns_each(void *arg, const char *ip)
{
    struct dns_add *d = arg;

    eps_add(d->e, ip, d->port, d->weight, d->we);
}

/* An endpoint address of a ServiceEntry with resolution DNS: an IP is
 * used as is, a name through the DNS cache (nothing until it resolves). */
static void eps_add_dns(const struct istio_clusters *t, struct eps *e,
                        const char *name, int64_t port, uint32_t weight,
                        const struct res_workload_entry *we)
{
    struct in6_addr a6;
    struct in_addr a4;
    struct dns_add d = {e, port, weight, we};

    if (name == NULL || port <= 0 || port > 65535)
        return;
    if (inet_pton(AF_INET, name, &a4) == 1 ||
        inet_pton(AF_INET6, name, &a6) == 1 || t->dns == NULL ||
        t->dns->lookup == NULL) {
        eps_add(e, name, port, weight, we);
        return;
    }
    t->dns->lookup(t->dns->arg, name, dns_each, &d);
}

static void collect(const struct istio_clusters *t, const char *host,
                    uint32_t port, const struct conf_strmap *subset_labels,
                    struct eps *e, int *h2, uint32_t *svc_port, int *external)
{
    const struct resource_set *set = t->set;
    const char *node_ns = t->node_ns;
    int found = 0, k8s = 0, all;
    const struct istio_hostrefs *refs = host_refs(t, host, &all);

    /* A host a Kubernetes Service has is that Service's: istiod prefers
     * it to ServiceEntries of the same host, so that none can take the
     * name over. */
    for (size_t j = 0; j < REFS_N(refs, all, set) && !k8s; j++) {
        const struct resource *r = set->v[REFS_AT(refs, all, j)];
        const struct res_service_entry *se;
        if (r->kind != RES_SERVICE)
            continue;
        se = res_service_entry(r);
        k8s = (node_ns == NULL || res_visible(r, &se->export_to, node_ns)) &&
              se_has_host(r, se, host, set->domain);
    }
    for (size_t j = 0; j < REFS_N(refs, all, set); j++) {
        const struct resource *r = set->v[REFS_AT(refs, all, j)];
        const struct res_service_entry *se;
        const struct res_se_port *sp = NULL;
        int dns;

        if (!res_is_service(r) || (k8s && r->kind != RES_SERVICE))
            continue;
        se = res_service_entry(r);
        if ((node_ns != NULL && !res_visible(r, &se->export_to, node_ns)) ||
            !se_has_host(r, se, host, set->domain))
            continue;
        found = 1;
        if (e->svc_ns == NULL) {
            /* Istio's services[0]: a Kubernetes Service by its name, a
             * ServiceEntry by its host. */
            e->svc_ns = r->meta.ns;
            if (r->kind == RES_SERVICE)
                e->svc_name = r->meta.name;
        }
        if (se->location == RES_MESH_EXTERNAL)
            *external = 1;
        for (size_t k = 0; k < se->ports.n; k++) {
            const struct res_se_port *p =
                &((const struct res_se_port *)se->ports.v)[k];
            if ((port == 0 && se->ports.n == 1) || p->number == port)
                sp = p;
        }
        if (sp != NULL &&
            (sp->protocol == RES_PROTO_HTTP2 || sp->protocol == RES_PROTO_GRPC))
            *h2 = 1;
        if (port == 0 && sp != NULL)
            port = (uint32_t)sp->number;
        dns = se->resolution == RES_RESOLVE_DNS ||
              se->resolution == RES_RESOLVE_DNS_ROUND_ROBIN;
        for (size_t k = 0; k < se->endpoints.n; k++) {
            const struct res_workload_entry *we =
                &((const struct res_workload_entry *)se->endpoints.v)[k];
            if (subset_labels != NULL &&
                !res_labels_match(subset_labels, &we->labels))
                continue;
            size_t from = e->n;
            if (dns)
                eps_add_dns(t, e, we->address, endpoint_port(we, sp, port),
                            we_weight(we), we);
            else
                eps_add(e, we->address, endpoint_port(we, sp, port),
                        we_weight(we), we);
            eps_tag(e, from, t->trust_domain, r->meta.ns, we);
            eps_sa(e, t->trust_domain, r->meta.ns, we->service_account);
            eps_meta_add(e, r->meta.ns, NULL, we);
        }
        for (size_t k = 0; k < se->subject_alt_names.n; k++)
            eps_san(e, se->subject_alt_names.v[k]);
        /* DNS without endpoints: the host itself is the name to resolve
         * (Istio's rule), on the service port. */
        if (dns && se->endpoints.n == 0 &&
            se->workload_selector.labels.n == 0 &&
            (subset_labels == NULL || subset_labels->n == 0))
            eps_add_dns(t, e, host, sp != NULL ? sp->number : port, 1, NULL);
        if (se->workload_selector.labels.n > 0) {
            for (size_t k = 0; k < set->n; k++) {
                const struct resource *w = set->v[k];
                const struct res_workload_entry *we;
                size_t from;
                if (w->kind != RES_WORKLOAD_ENTRY ||
                    strcmp(w->meta.ns, r->meta.ns) != 0)
                    continue;
                we = res_workload_entry(w);
                if (!res_labels_match(&se->workload_selector.labels,
                                      &we->labels) ||
                    (subset_labels != NULL &&
                     !res_labels_match(subset_labels, &we->labels)))
                    continue;
                from = e->n;
                eps_add(e, we->address, endpoint_port(we, sp, port),
                        we_weight(we), we);
                eps_tag(e, from, t->trust_domain, w->meta.ns, we);
                eps_sa(e, t->trust_domain, w->meta.ns, we->service_account);
                eps_meta_add(e, w->meta.ns, w->meta.name, we);
            }
        }
    }
    *svc_port = port;
    if (found)
        return;
    /* No ServiceEntry: WorkloadEntries labelled app=<service> stand for
     * the service (the convention strait check uses too). Its ports are
     * the port names they list; without a destination port, the only
     * one, each endpoint on its own number for it. With several, or none,
     * there is no port to pick: strait check says so (IST0112) and the
     * cluster gets no endpoints rather than a guessed port. */
    {
        const char *only = NULL;
        int nports =
            port == 0 ? res_we_service_ports(set, host, &only, NULL) : 0;

        if (port == 0 && nports >= 0 && only == NULL)
            log_warn("destination %s: no port given and the service has %d; "
                     "no endpoints",
                     host, nports);
        for (size_t k = 0; k < set->n; k++) {
            const struct resource *w = set->v[k];
            const struct res_workload_entry *we;
            int64_t p = port;

            if (!res_we_backs(set, w, host))
                continue;
            we = res_workload_entry(w);
            if (subset_labels != NULL &&
                !res_labels_match(subset_labels, &we->labels))
                continue;
            for (size_t j = 0; p == 0 && only != NULL && j < we->ports.n; j++)
                if (strcmp(we->ports.v[j].key, only) == 0)
                    p = we->ports.v[j].val;
            if (p == 0)
                continue;
            {
                size_t from = e->n;
                eps_add(e, we->address, p, we_weight(we), we);
                eps_tag(e, from, t->trust_domain, w->meta.ns, we);
            }
            eps_sa(e, t->trust_domain, w->meta.ns, we->service_account);
            eps_meta_add(e, w->meta.ns, w->meta.name, we);
            if (e->svc_ns == NULL) {
                e->svc_ns = w->meta.ns;
                e->svc_name = meta_label(&we->labels, "app");
            }
        }
    }
}

/*
 * cred_secret() is the Secret a DestinationRule's credentialName names,
 * as istiod reads it for a gateway: of the gateway's namespace
 * (node.namespace), type kubernetes.io/tls or Opaque; NULL when there is
 * none (the credentials directory is used). A Secret comes first.
 */
static const struct res_k8s_secret *cred_secret(const struct istio_clusters *t,
                                                const char *cred)
{
    const struct resource *r;

    if (t == NULL || t->set == NULL || cred == NULL || cred[0] == '\0')
        return NULL;
    r = res_k8s_find_secret(t->set, t->node_ns ? t->node_ns : "istio-system",
                            cred);
    return r != NULL ? res_k8s_secret(r) : NULL;
}

/* Files a cluster's TLS settings read: those named, and a credential's
 * (cred holds their paths). */
struct res_eff_files {
    const char *v[8];
    size_t n;
    char cred[4][1024];
};

/* The policy sections that apply to one cluster, each taken whole from
 * the most specific place that sets it. */
struct eff_policy {
    const struct res_load_balancer *lb;
    const struct res_connection_pool *pool;
    const struct res_outlier *od;
    const struct res_client_tls *tls;
};

/* Overrides e's sections with those tp sets, then with those its
 * portLevelSettings entry for port sets (Istio's MergeTrafficPolicy). */
static void merge_policy(struct eff_policy *e,
                         const struct res_traffic_policy *tp, uint32_t port)
{
    const struct res_port_policy *pp = NULL;

    if (tp->load_balancer.mark.line > 0)
        e->lb = &tp->load_balancer;
    if (tp->connection_pool.mark.line > 0)
        e->pool = &tp->connection_pool;
    if (tp->outlier_detection.mark.line > 0)
        e->od = &tp->outlier_detection;
    if (tp->tls.mark.line > 0)
        e->tls = &tp->tls;
    for (size_t i = 0; port > 0 && i < tp->port_level_settings.n; i++) {
        const struct res_port_policy *q =
            (const struct res_port_policy *)tp->port_level_settings.v + i;
        if (q->port.number == (int64_t)port)
            pp = q;
    }
    if (pp == NULL)
        return;
    if (pp->load_balancer.mark.line > 0)
        e->lb = &pp->load_balancer;
    if (pp->connection_pool.mark.line > 0)
        e->pool = &pp->connection_pool;
    if (pp->outlier_detection.mark.line > 0)
        e->od = &pp->outlier_detection;
    if (pp->tls.mark.line > 0)
        e->tls = &pp->tls;
}

/*
 * consistentHash becomes the cluster's ring or Maglev table, built here
 * once (main thread) and shared read-only by the workers. Istio's choice
 * of algorithm: maglev when given, else a ring (ringHash, or the
 * deprecated minimumRingSize, or 1024 points).
 */
static void apply_hash(struct cluster *c, const struct res_consistent_hash *h)
{
    struct lb_hash_conf hc;
    char *err = NULL;

    memset(&hc, 0, sizeof(hc));
    if (h->http_header_name != NULL) {
        hc.key = LB_KEY_HEADER;
        hc.name = h->http_header_name;
    } else if (h->http_cookie.mark.line > 0) {
        hc.key = LB_KEY_COOKIE;
        hc.name = h->http_cookie.name;
        hc.cookie_path = h->http_cookie.path;
        hc.cookie_ttl_ms = h->http_cookie.ttl > 0 ? h->http_cookie.ttl - 1 : -1;
    } else if (h->use_source_ip) {
        hc.key = LB_KEY_SOURCE_IP;
    } else {
        hc.key = LB_KEY_QUERY;
        hc.name = h->http_query_parameter_name;
    }
    if (h->maglev.mark.line > 0) {
        hc.algo = LB_MAGLEV;
        hc.size = (uint64_t)h->maglev.table_size;
    } else {
        hc.algo = LB_RING_HASH;
        hc.size = h->ring_hash.mark.line > 0
                      ? (uint64_t)h->ring_hash.minimum_ring_size
                  : h->minimum_ring_size > 0 ? (uint64_t)h->minimum_ring_size
                                             : LB_RING_MIN_DEFAULT;
    }
    c->hash = lb_hash_new(&hc, c->endpoints, c->weights, c->nendpoints, &err);
    /* With priority levels, each level hashes over its own endpoints. */
    if (c->hash != NULL && c->prio != NULL &&
        prio_build_hash(c, &hc, &err) < 0) {
        lb_hash_free(c->hash);
        c->hash = NULL;
    }
    if (c->hash == NULL) {
        /* strait check refuses what cannot be built; only memory is left. */
        log_error("cluster %s: consistentHash: %s; balancing round robin",
                  c->name, err ? err : "out of memory");
        free(err);
        return;
    }
    c->lb = CLUSTER_LB_HASH;
}

/*
 * outlierDetection as Istio hands it to Envoy: consecutive5xxErrors
 * (default 5) and consecutiveGatewayErrors (default off), 0 turning one
 * off; maxEjectionPercent 0 means Envoy's 10; minHealthPercent becomes
 * the panic threshold (default 0: panic only when none is left).
 */
static void apply_outlier(struct cluster *c, const struct res_outlier *o)
{
    struct outlier_conf oc;

    memset(&oc, 0, sizeof(oc));
    oc.consecutive_5xx = (uint32_t)o->consecutive_5xx_errors;
    oc.consecutive_gateway = (uint32_t)o->consecutive_gateway_errors;
    oc.split_local = o->split_external_local_origin_errors;
    oc.consecutive_local = (uint32_t)o->consecutive_local_origin_failures;
    oc.interval_ms = (uint64_t)o->interval_ms;
    oc.base_ejection_ms = (uint64_t)o->base_ejection_time_ms;
    oc.max_ejection_ms = OUTLIER_MAX_EJECTION_MS;
    oc.max_ejection_pct =
        o->max_ejection_percent > 0 ? (uint32_t)o->max_ejection_percent : 10;
    oc.min_health_pct = (uint32_t)o->min_health_percent;
    c->od = outlier_new(&oc, c->nendpoints);
    if (c->od == NULL)
        log_error("cluster %s: outlierDetection: out of memory; off", c->name);
}

/* roots_join() is a new list of a's roots then b's (b may be NULL),
 * borrowed pointers (free the list with sk_X509_free()), or NULL when
 * memory ran out. */
static STACK_OF(X509) *
    roots_join(const STACK_OF(X509) * a, const STACK_OF(X509) * b)
{
    STACK_OF(X509) *v = sk_X509_new_null();

    for (int k = 0; k < 2 && v != NULL; k++) {
        const STACK_OF(X509) *s = k == 0 ? a : b;
        for (size_t i = 0; s != NULL && i < sk_X509_num(s); i++) {
            if (!sk_X509_push(v, sk_X509_value(s, i))) {
                sk_X509_free(v);
                return NULL;
            }
        }
    }
    return v;
}

int compile_mesh_trust(const struct compile_identity *identity,
                       struct tls_client_conf *tc, X509 **root,
                       STACK_OF(X509) * *extra)
{
    *extra = NULL;
    if (identity->mesh_roots != NULL && sk_X509_num(identity->mesh_roots) > 0) {
        /* The mesh's bundle, not the root the certificate was issued
         * under: a root dropped from it is trusted no more. */
        X509_free(*root);
        *root = sk_X509_value(identity->mesh_roots, 0);
        X509_up_ref(*root);
    }
    tc->ca_cert = *root;
    tc->ca_extra = identity->link_roots;
    if (identity->mesh_roots != NULL) {
        /* The mesh's other roots and the linked sites', one list of
         * borrowed pointers; the context takes its own references. */
        *extra = roots_join(identity->mesh_roots, identity->link_roots);
        if (*extra == NULL)
            return -1;
        tc->ca_extra = *extra;
    }
    return 0;
}

/*
 * The DestinationRule's traffic policy for a cluster of port: from least
 * to most specific, the rule's, its portLevelSettings for the port, the
 * subset's, the subset's portLevelSettings; each section (loadBalancer,
 * connectionPool, outlierDetection, tls) replaced whole where a more
 * specific one is set.
 */
/*
 * DestinationRule tls, as Istio's origination does: SIMPLE verifies the
 * server (the CA bundle, else the system one, and caCrl's revocations)
 * and its name (the SNI, or subjectAltNames when given); MUTUAL adds a
 * client certificate (files, or credentialName NAME/tls.crt, tls.key,
 * ca.crt, ca.crl); ISTIO_MUTUAL presents this node's mesh certificate
 * (the current one at each handshake, so rotation needs no rebuild),
 * trusts the mesh root (ca.istiod.rootCert's bundle when there is one)
 * and the linked sites' roots only, checks the server's SPIFFE identity
 * (subjectAltNames, else the service accounts of the endpoints) and sends
 * Istio's SNI outbound_.PORT_.SUBSET_.HOST. A cluster whose TLS cannot be
 * set up refuses requests rather than talk in the clear.
 */
static int apply_tls(const struct istio_clusters *t, struct cluster *c,
                     const struct res_client_tls *tls, const char *host,
                     const char *subset, uint32_t port,
                     const struct conf_strs *endpoint_sans, char **errp)
{
    struct tls_client_conf tc;
    char cert[1024], key[1024], ca[1024], crl[1024], sni[700];
    const char *cred = tls->credential_name;
    const struct compile_identity *identity = t != NULL ? t->identity : NULL;
    const char *cred_dir = t != NULL ? t->credentials_dir : NULL;
    X509 *root = NULL;
    STACK_OF(X509) *extra = NULL;
    char *err = NULL;

    memset(&tc, 0, sizeof(tc));
    tc.h2 = c->protocol == CLUSTER_HTTP2;
    tc.insecure = tls->insecure_skip_verify;
    tc.ca_file = tls->ca_certificates;
    tc.crl_file = tls->ca_crl;
    tc.sans = (const char *const *)tls->subject_alt_names.v;
    tc.nsans = tls->subject_alt_names.n;
    if (tls->mode == RES_TLS_MUTUAL) {
        const struct res_k8s_secret *sec = cred_secret(t, cred);
        tc.cert_file = tls->client_certificate;
        tc.key_file = tls->private_key;
        if (sec != NULL) {
            /* Paths the control loop made of the Secret's values; a
             * missing one fails the context below, which says so. */
            tc.cert_file = sec->path[RES_SECRET_CERT];
            tc.key_file = sec->path[RES_SECRET_KEY];
            if (tc.ca_file == NULL || tc.ca_file[0] == '\0') {
                tc.ca_file = sec->path[RES_SECRET_CA];
                if (tc.crl_file == NULL || tc.crl_file[0] == '\0')
                    tc.crl_file = sec->path[RES_SECRET_CRL];
            }
        } else if (cred != NULL && cred[0] != '\0' && cred_dir != NULL) {
            snprintf(cert, sizeof(cert), "%s/%s/tls.crt", cred_dir, cred);
            snprintf(key, sizeof(key), "%s/%s/tls.key", cred_dir, cred);
            snprintf(ca, sizeof(ca), "%s/%s/ca.crt", cred_dir, cred);
            tc.cert_file = cert;
            tc.key_file = key;
            if (tc.ca_file == NULL || tc.ca_file[0] == '\0') {
                tc.ca_file = access(ca, R_OK) == 0 ? ca : NULL;
                /* The credential's CRL goes with its CA bundle. */
                snprintf(crl, sizeof(crl), "%s/%s/ca.crl", cred_dir, cred);
                if (tc.ca_file != NULL &&
                    (tc.crl_file == NULL || tc.crl_file[0] == '\0') &&
                    access(crl, F_OK) == 0)
                    tc.crl_file = crl;
            }
        }
    } else if (tls->mode == RES_TLS_ISTIO_MUTUAL) {
        if (identity == NULL || !identity->current(identity->arg, &root)) {
            log_error("cluster %s: tls mode ISTIO_MUTUAL needs this node's "
                      "mesh certificate (ca.enabled or ca.join); requests "
                      "are refused",
                      c->name);
            c->tls_error = 1;
            return 0;
        }
        tc.cred = identity->ssl;
        tc.cred_arg = identity->arg;
        if (compile_mesh_trust(identity, &tc, &root, &extra) < 0) {
            log_error("cluster %s: out of memory; requests are refused",
                      c->name);
            X509_free(root);
            c->tls_error = 1;
            return 0;
        }
        tc.ca_file = NULL;
        tc.crl_file = NULL;
        tc.insecure = 0;
        tc.no_host_check = 1;
        tc.mesh_alpn = 1;
        if (tc.nsans == 0 && endpoint_sans != NULL) {
            tc.sans = (const char *const *)endpoint_sans->v;
            tc.nsans = endpoint_sans->n;
        }
        snprintf(sni, sizeof(sni), "outbound_.%" PRIu32 "_.%s_.%s", port,
                 subset ? subset : "", host);
    }
    c->tls = tls_client_ctx_build(&tc, &err);
    X509_free(root);
    sk_X509_free(extra);
    if (c->tls == NULL && errp != NULL) {
        /* The bootstrap's clusters: a context that does not load is a
         * config error, as it always was. */
        err_set(errp, "cluster %s: %s", c->name,
                err ? err : "TLS setup failed");
        free(err);
        return -1;
    }
    if (c->tls == NULL) {
        log_error("cluster %s: TLS origination cannot be set up, requests "
                  "are refused: %s",
                  c->name, err ? err : "unknown error");
        c->tls_error = 1;
        free(err);
        return 0;
    }
    free(c->sni);
    c->sni = NULL;
    if (tls->sni != NULL && tls->sni[0] != '\0')
        c->sni = strdup(tls->sni);
    else if (tls->mode == RES_TLS_ISTIO_MUTUAL)
        c->sni = strdup(sni);
    c->tls_mesh = tls->mode == RES_TLS_ISTIO_MUTUAL;
    return 0;
}

/* The traffic policy sections of a spec, over the defaults cluster_new()
 * and compile_cluster() set. */
static int apply_policy(const struct istio_clusters *t, struct cluster *c,
                        const struct cluster_spec *sp, char **err)
{
    if (sp->lb != NULL) {
        if (sp->lb->simple == RES_LB_RANDOM)
            c->lb = CLUSTER_LB_RANDOM;
        else if (sp->lb->simple == RES_LB_LEAST_REQUEST ||
                 sp->lb->simple == RES_LB_LEAST_CONN)
            c->lb = CLUSTER_LB_LEAST_REQUEST;
        else if (sp->lb->simple == RES_LB_ROUND_ROBIN)
            c->lb = CLUSTER_LB_ROUND_ROBIN;
        if (sp->lb->consistent_hash.mark.line > 0)
            apply_hash(c, &sp->lb->consistent_hash);
    }
    if (sp->od != NULL)
        apply_outlier(c, sp->od);
    if (sp->pool != NULL) {
        const struct res_connection_pool *cp = sp->pool;
        if (cp->http.max_requests_per_connection > 0)
            c->max_requests_per_conn =
                (uint64_t)cp->http.max_requests_per_connection;
        if (cp->http.max_retries > 0)
            c->max_retries = (uint64_t)cp->http.max_retries;
        if (cp->http.http2_max_requests > 0)
            c->max_requests = (uint64_t)cp->http.http2_max_requests;
        if (cp->tcp.max_connections > 0)
            c->max_connections = (uint64_t)cp->tcp.max_connections;
        if (cp->http.http1_max_pending_requests > 0)
            c->max_pending = (uint64_t)cp->http.http1_max_pending_requests;
        if (cp->tcp.connect_timeout_ms > 0)
            c->h1.connect_timeout_ms = c->h2.connect_timeout_ms =
                (uint64_t)cp->tcp.connect_timeout_ms;
        if (cp->http.idle_timeout_ms > 0)
            c->h1.idle_timeout_ms = c->h2.idle_timeout_ms =
                (uint64_t)cp->http.idle_timeout_ms;
    }
    if (sp->tls != NULL && sp->tls->mode != RES_TLS_DISABLE)
        return apply_tls(t, c, sp->tls, sp->host, sp->subset, sp->port,
                         sp->sans, err);
    return 0;
}

struct cluster *compile_cluster(const struct istio_clusters *t,
                                const struct cluster_spec *sp, int nworkers,
                                char **err)
{
    struct cluster *c =
        cluster_new(sp->name, sp->endpoints, sp->nendpoints, nworkers);

    if (c == NULL) {
        if (err != NULL)
            err_set(err, "out of memory");
        return NULL;
    }
    if (sp->weights != NULL && sp->nendpoints > 0 &&
        cluster_set_weights(c, sp->weights) < 0)
        log_error("cluster %s: endpoint weights: out of memory; "
                  "balancing as if equal",
                  sp->name);
    if (sp->levels != NULL && sp->nendpoints > 0 &&
        (cluster_set_levels(c, sp->levels) < 0 ||
         (sp->level_weights != NULL &&
          cluster_set_level_weights(c, sp->level_weights) < 0)))
        log_error("cluster %s: locality priorities: out of memory; "
                  "balancing over one level",
                  sp->name);
    c->protocol = sp->http2 ? CLUSTER_HTTP2 : CLUSTER_HTTP1;
    c->implicit = sp->implicit;
    c->h1.lim = http_limits_default();
    c->h1.lim.underscores = HTTP_US_ALLOW;
    c->h1.connect_timeout_ms = sp->connect_timeout_ms;
    c->h1.idle_timeout_ms = sp->idle_timeout_ms;
    c->max_requests_per_conn = sp->max_requests_per_conn;
    c->h2.connect_timeout_ms = c->h1.connect_timeout_ms;
    c->h2.idle_timeout_ms = c->h1.idle_timeout_ms;
    /* Response DATA in flight per stream never exceeds the pipe that
     * holds it (the downstream side's body buffer, 64 KiB at least). */
    c->h2.stream_window = 65535;
    c->h2.connection_window = 1024 * 1024;
    c->h2.max_head = c->h1.lim.max_head;
    c->h2.max_headers = c->h1.lim.max_headers;
    if (apply_policy(t, c, sp, err) < 0 ||
        (sp->hbone != NULL &&
         compile_cluster_hbone(t != NULL ? t->identity : NULL, c, sp) < 0)) {
        cluster_unref(c);
        return NULL;
    }
    /* Until the registry says more (istio_cluster_id): all unknown,
     * destination_service from the request's Host. */
    {
        const struct metrics_dest none = {0};
        c->metrics = metrics_dest_labels(&none);
    }
    return c;
}

/* The identity of a cluster: everything it is built from (endpoint
 * weights too, so a new weight makes a new cluster). Files the
 * DestinationRule names are identified by their inode and mtime, so a
 * replaced CA file makes a new cluster at the next snapshot. -1 when
 * memory runs out. */
static int cluster_identity(const char *key, int passthrough, int external,
                            const struct eps *e, char *const *via,
                            const struct net_split_result *sr,
                            const struct eps_levels *levels, int h2,
                            uint32_t svc_port, const struct resource *drr,
                            const struct res_eff_files *files,
                            const char *mtext, const char *roots_pin,
                            struct ident_id *out)
{
    char as[ADDR_STRLEN];
    struct ident d;

    ident_init(&d);
    ident_str(&d, 'k', key);
    /* Linked sites' roots, which ISTIO_MUTUAL trusts (MeshLink). */
    ident_str(&d, 'R', roots_pin);
    /* The metric labels, from the workloads' labels the rest ignores. */
    ident_str(&d, 'M', mtext);
    /* What makes it a passthrough or an external host is part of what it
     * is built from. */
    ident_u64(&d, 'p', (uint64_t)passthrough);
    ident_u64(&d, 'x', (uint64_t)external);
    ident_u64(&d, '2', (uint64_t)h2);
    ident_u64(&d, 'P', svc_port);
    ident_u64(&d, 'E', e->n);
    /* Double HBONE sends it (x-forwarded-network). */
    ident_str(&d, 'N',
              e->nt != NULL && e->nt->node_network ? e->nt->node_network : "");
    for (size_t i = 0; i < e->n; i++) {
        ident_str(&d, 'a', addr_format(&e->v[i], as, sizeof(as)));
        ident_u64(&d, 'w', e->w[i]);
        /* Where the endpoint is and how it is reached (/clusters). */
        ident_str(&d, 'n', e->net[i]);
        ident_str(&d, 'l', e->loc[i]);
        ident_str(&d, 'g', via[i] != NULL ? via[i] : "");
        ident_u64(&d, 'h', e->hb[i]);
        ident_str(&d, 'i', e->id[i] != NULL ? e->id[i] : "");
        /* Locality balancing's outcome: what it was computed from (the
         * node, the localities and labels, the rule) shows in it. */
        ident_u64(&d, 'L', levels->level != NULL ? levels->level[i] : 0);
    }
    for (size_t l = 0; levels->weight != NULL && l < levels->n; l++)
        ident_u64(&d, 'W', levels->weight[l]);
    ident_u64(&d, 'm', sr->skipped_mtls);
    ident_u64(&d, 'f', sr->skipped_family);
    ident_u64(&d, 'u', sr->skipped_no_gateway);
    ident_u64(&d, 'v', sr->skipped_view);
    ident_u64(&d, 'S', e->sans.n);
    for (size_t i = 0; i < e->sans.n; i++)
        ident_str(&d, 's', e->sans.v[i]);
    if (drr != NULL) {
        ident_str(&d, 'N', drr->meta.ns);
        ident_str(&d, 'n', drr->meta.name);
        ident_res_spec(&d, 'D', drr);
    }
    for (size_t i = 0; files != NULL && i < files->n; i++)
        istio_file_ident(&d, files->v[i]);
    return ident_finish(&d, out);
}

/* The files a policy's client TLS settings name. */
static void eff_files(const struct istio_clusters *t,
                      const struct res_destination_rule *dr,
                      const struct res_subset *sub, uint32_t port,
                      struct res_eff_files *f)
{
    static const char *const cred_files[4] = {"tls.crt", "tls.key", "ca.crt",
                                              "ca.crl"};
    struct eff_policy e = {NULL, NULL, NULL, NULL};

    f->n = 0;
    if (dr != NULL)
        merge_policy(&e, &dr->traffic_policy, port);
    if (sub != NULL)
        merge_policy(&e, &sub->traffic_policy, port);
    if (e.tls == NULL)
        return;
    if (e.tls->ca_certificates != NULL)
        f->v[f->n++] = e.tls->ca_certificates;
    if (e.tls->client_certificate != NULL)
        f->v[f->n++] = e.tls->client_certificate;
    if (e.tls->private_key != NULL)
        f->v[f->n++] = e.tls->private_key;
    if (e.tls->ca_crl != NULL)
        f->v[f->n++] = e.tls->ca_crl;
    if (e.tls->credential_name == NULL || e.tls->credential_name[0] == '\0')
        return;
    {
        const struct res_k8s_secret *sec =
            e.tls->mode == RES_TLS_MUTUAL
                ? cred_secret(t, e.tls->credential_name)
                : NULL;
        if (sec != NULL) {
            for (int k = 0; k < RES_SECRET_NKEYS && f->n < 8; k++)
                if (sec->path[k] != NULL)
                    f->v[f->n++] = sec->path[k];
            return;
        }
    }
    if (t->credentials_dir == NULL)
        return;
    for (size_t i = 0; i < 4; i++) {
        snprintf(f->cred[i], sizeof(f->cred[i]), "%s/%s/%s", t->credentials_dir,
                 e.tls->credential_name, cred_files[i]);
        f->v[f->n++] = f->cred[i];
    }
}

static int table_add(struct istio_clusters *t, const char *key,
                     struct cluster *c)
{
    struct cluster **nv = realloc(t->v, (t->n + 1) * sizeof(*nv));

    if (nv == NULL)
        return -1;
    t->v = nv;
    if (strmap_put(&t->ids, key, (void *)(uintptr_t)(t->n + 1)) < 0)
        return -1;
    t->v[t->n] = c;
    return (int)t->n++;
}

/*
 * host_registered() is true when host (full) is in the registry the node
 * sees: a host of a ServiceEntry exported to it (a wildcard host covers
 * its names), or a service a WorkloadEntry stands for (app=NAME). The
 * same registry `strait check` knows, less what is not exported here.
 */
static int host_registered_by(const struct istio_clusters *t,
                              const struct resource *r, const char *host);

/* host_registered() is true when a service (or WorkloadEntries by app)
 * visible to the node declares host (full): those of its name, and the
 * wildcard services, are tried. */
static int host_registered(const struct istio_clusters *t, const char *host)
{
    const struct resource_set *set = t->set;
    int all;
    const struct istio_hostrefs *refs = host_refs(t, host, &all);

    for (size_t j = 0; j < REFS_N(refs, all, set); j++)
        if (host_registered_by(t, set->v[REFS_AT(refs, all, j)], host))
            return 1;
    for (size_t j = 0; !all && j < t->nwild; j++)
        if (host_registered_by(t, set->v[t->wild[j]], host))
            return 1;
    return 0;
}

static int host_registered_by(const struct istio_clusters *t,
                              const struct resource *r, const char *host)
{
    const struct resource_set *set = t->set;
    char fq[512];

    if (res_is_service(r)) {
        const struct res_service_entry *se = res_service_entry(r);
        if (t->node_ns != NULL && !res_visible(r, &se->export_to, t->node_ns))
            return 0;
        for (size_t k = 0; k < se->hosts.n; k++)
            if (res_host_fqdn(se->hosts.v[k], r->meta.ns, set->domain, fq,
                              sizeof(fq)) >= 0 &&
                host_covers(fq, host))
                return 1;
    } else if (r->kind == RES_WORKLOAD_ENTRY) {
        const struct res_workload_entry *we = res_workload_entry(r);
        for (size_t k = 0; k < we->labels.n; k++)
            if (strcmp(we->labels.v[k].key, "app") == 0 &&
                res_host_fqdn(we->labels.v[k].val, r->meta.ns, set->domain, fq,
                              sizeof(fq)) >= 0 &&
                strcmp(fq, host) == 0)
                return 1;
    }
    return 0;
}

/* used_cluster() records that the table took the cluster of identity id,
 * built from files. */
static void used_cluster(struct istio_used *u, const struct ident_id *id,
                         const struct res_eff_files *files)
{
    if (u == NULL)
        return;
    ident_sub(&u->clusters, id);
    for (size_t i = 0; files != NULL && i < files->n; i++) {
        char **nv = realloc(u->paths, (u->npaths + 1) * sizeof(*nv));
        if (nv == NULL) {
            u->oom = 1;
            return;
        }
        u->paths = nv;
        if ((u->paths[u->npaths] = strdup(files->v[i])) == NULL) {
            u->oom = 1;
            return;
        }
        u->npaths++;
        istio_file_ident(&u->files, files->v[i]);
    }
}

#define BLACKHOLE_NAME "BlackHoleCluster"

/*
 * blackhole_id() is the index of the table's BlackHoleCluster, built on
 * first use. It is one cluster, as Istio's, shared by every listener and
 * kept across snapshots like any cluster whose identity holds.
 */
static int blackhole_id(struct istio_clusters *t)
{
    uintptr_t id = (uintptr_t)strmap_get(&t->ids, BLACKHOLE_NAME);
    struct ident_id key;
    struct ident d;
    struct cluster *c;
    int r;

    if (id > 0)
        return (int)(id - 1);
    ident_init(&d);
    ident_str(&d, 'B', BLACKHOLE_NAME);
    if (ident_finish(&d, &key) < 0)
        return -1;
    c = ident_map_get(t->next, &key);
    if (c == NULL)
        c = ident_map_get(t->prev, &key);
    if (c != NULL) {
        c = cluster_ref(c);
    } else {
        const struct metrics_dest bh = {.service = BLACKHOLE_NAME,
                                        .service_name = BLACKHOLE_NAME};
        c = cluster_new(BLACKHOLE_NAME, NULL, 0, t->nworkers);
        if (c == NULL)
            goto fail;
        c->origin = CLUSTER_BLACKHOLE;
        c->metrics = metrics_dest_labels(&bh);
    }
    if (t->next != NULL && ident_map_get(t->next, &key) == NULL) {
        if (ident_map_put(t->next, &key, c) < 0) {
            cluster_unref(c);
            goto fail;
        }
        cluster_ref(c);
    }
    used_cluster(t->used, &key, NULL);
    ident_id_dispose(&key);
    r = table_add(t, BLACKHOLE_NAME, c);
    if (r < 0)
        cluster_unref(c);
    return r;
fail:
    ident_id_dispose(&key);
    return -1;
}

/* The destination run of a cluster (compile/metrics.h): the service
 * from its registry entry, the workloads from what they all share. */
static void dest_text(const struct istio_clusters *t, const char *host,
                      int passthrough, const struct eps *e, struct buf *b)
{
    const struct eps_meta *m = &e->meta;
    char principal[600] = "";
    struct metrics_dest d;

    memset(&d, 0, sizeof(d));
    if (passthrough) {
        d.service = d.service_name = "PassthroughCluster";
    } else {
        d.service = host;
        d.service_name = e->svc_name != NULL ? e->svc_name : host;
        d.service_ns = e->svc_ns;
    }
    if (m->n > 0) {
        if (!(m->mixed & META_NS))
            d.workload_ns = m->ns;
        if (!(m->mixed & META_LABELS)) {
            d.labels = m->labels;
            d.workload =
                meta_label(m->labels, "service.istio.io/workload-name");
            d.cluster = meta_label(m->labels, "topology.istio.io/cluster");
        }
        if (d.workload == NULL && !(m->mixed & (META_NAME | META_LABELS)))
            d.workload = m->name;
        if (!(m->mixed & (META_SA | META_NS)) && m->sa != NULL) {
            snprintf(principal, sizeof(principal), "spiffe://%s/ns/%s/sa/%s",
                     t->trust_domain ? t->trust_domain : "cluster.local", m->ns,
                     m->sa);
            d.principal = principal;
        }
    }
    /* The one identity the endpoints may present (a ServiceEntry's
     * subjectAltNames, or their one service account). */
    if (d.principal == NULL && e->sans.n == 1)
        d.principal = e->sans.v[0];
    metrics_dest_text(b, &d);
}

/* The networks of t's build, made at its first cluster. */
static const struct net_table *clusters_nets(struct istio_clusters *t)
{
    if (!t->nt_built) {
        t->nt_built = 1;
        if (net_table_build(&t->nt, &t->nets, t->set, t->node_ns, t->dns,
                            net_families()) < 0)
            log_error("networks: out of memory; gateways left out");
    }
    return &t->nt;
}

/* eps_split() puts e through the split horizon (net_split_lists()).
 * An endpoint kept (reached directly) keeps its HBONE mark and identity,
 * found again by its address; one standing for a remote network's
 * AUTO_PASSTHROUGH gateway has neither, and one standing for an HBONE
 * gateway is marked for double HBONE (EPS_HBONE_DOUBLE) with the
 * gateway's identity. */
static int eps_split(const struct net_table *nt, struct eps *e, unsigned flags,
                     char ***via, struct net_split_result *sr)
{
    const char **gwid = NULL;
    struct net_lists l = {&e->v, &e->w, &e->net, &e->loc, &e->n, &gwid};
    size_t n0 = e->n;
    struct addr *v0 = n0 > 0 ? malloc(n0 * sizeof(*v0)) : NULL;
    const struct conf_strmap **lab0 = NULL;
    const struct conf_strmap **lab = NULL;
    uint8_t *hb = NULL;
    char **id = NULL;

    /* The split reorders the endpoints and puts gateways in for remote
     * ones: each endpoint reached directly keeps its labels (for
     * failoverPriority), HBONE mark and identity, found again by its
     * address; a gateway has none of its own. */
    if (n0 > 0 && v0 == NULL)
        return -1;
    if (n0 > 0) {
        memcpy(v0, e->v, n0 * sizeof(*v0));
        lab0 = malloc(n0 * sizeof(*lab0));
        if (lab0 == NULL) {
            free(v0);
            return -1;
        }
        memcpy(lab0, e->lab, n0 * sizeof(*lab0));
    }
    if (net_split_lists(nt, &l, flags, via, sr) < 0) {
        free(lab0);
        free(v0);
        return -1;
    }
    hb = calloc(e->n + 1, 1);
    id = calloc(e->n + 1, sizeof(*id));
    lab = calloc(e->n + 1, sizeof(*lab));
    if (hb == NULL || id == NULL || lab == NULL) {
        free(hb);
        free(id);
        free(lab);
        free(lab0);
        free(v0);
        free(gwid);
        net_via_free(*via, e->n);
        *via = NULL;
        net_split_dispose(sr);
        return -1;
    }
    e->nhb = 0;
    for (size_t i = 0; i < e->n; i++) {
        if ((*via)[i] != NULL) {
            if (gwid[i] != NULL) {
                hb[i] = EPS_HBONE_DOUBLE;
                e->nhb++;
                id[i] = strdup(gwid[i]);
            }
            continue;
        }
        /* The first endpoint of that address, as a map by address would
         * keep. */
        for (size_t j = 0; j < n0; j++)
            if (addr_equal(&v0[j], &e->v[i])) {
                lab[i] = lab0[j];
                if (e->id != NULL) {
                    hb[i] = e->hb[j];
                    e->nhb += hb[i];
                    if (e->id[j] != NULL)
                        id[i] = strdup(e->id[j]);
                }
                break;
            }
    }
    for (size_t j = 0; e->id != NULL && j < n0; j++)
        free(e->id[j]);
    free(e->id);
    free(e->hb);
    free(e->lab);
    e->hb = hb;
    e->id = id;
    e->lab = lab;
    free(lab0);
    free(v0);
    free(gwid);
    return 0;
}

/*
 * eps_localize() applies the effective localityLbSetting to e (after the
 * split horizon: gateways stand for remote endpoints with their network
 * and locality) for the node (compile/locality.h): out gets each
 * endpoint's level (nothing allocated with one level) and, for
 * distribute, each level's locality weight (a consistent hash gets the
 * shares in its endpoint weights instead); the endpoints of localities
 * distribute gives nothing leave, with their via entries.
 * Returns 0, or -1 when memory is short.
 */
static int eps_localize(const struct istio_clusters *t,
                        const struct eff_policy *pol, struct eps *e, char **via,
                        struct eps_levels *out)
{
    struct locality_who node = {t->node_locality, t->node_network,
                                t->node_labels};
    const struct res_load_balancer *lb = pol->lb;
    int hash = lb != NULL && lb->consistent_hash.mark.line > 0;
    struct locality_who *who;
    unsigned char *keep;
    uint32_t *lv, *lw;
    size_t k = 0;
    int n, weighted = 0;

    memset(out, 0, sizeof(*out));
    if (e->n == 0)
        return 0;
    who = calloc(e->n, sizeof(*who));
    keep = calloc(e->n, 1);
    lv = calloc(e->n, sizeof(*lv));
    lw = calloc(e->n, sizeof(*lw));
    if (who == NULL || keep == NULL || lv == NULL || lw == NULL)
        goto fail;
    for (size_t i = 0; i < e->n; i++) {
        who[i].locality = e->loc[i];
        who[i].network = e->net[i];
        who[i].labels = e->lab[i];
    }
    n = locality_apply(lb != NULL ? &lb->locality_lb_setting : NULL,
                       pol->od != NULL, &node, who, e->n, lv, e->w, keep,
                       hash ? NULL : lw, &weighted);
    if (n < 0)
        goto fail;
    /* Endpoints distribute gives no share leave the cluster. */
    e->nhb = 0;
    for (size_t i = 0; i < e->n; i++) {
        if (!keep[i]) {
            if (via != NULL)
                free(via[i]);
            if (e->id != NULL)
                free(e->id[i]);
            continue;
        }
        e->v[k] = e->v[i];
        e->w[k] = e->w[i];
        e->loc[k] = e->loc[i];
        e->net[k] = e->net[i];
        e->lab[k] = e->lab[i];
        if (e->id != NULL) {
            e->hb[k] = e->hb[i];
            e->id[k] = e->id[i];
            e->nhb += e->hb[k];
        }
        if (via != NULL)
            via[k] = via[i];
        lv[k++] = lv[i];
    }
    e->n = k;
    free(who);
    free(keep);
    if (n > 1 && k > 0) {
        out->level = lv;
        out->n = (size_t)n;
        if (weighted)
            out->weight = lw;
        else
            free(lw);
    } else {
        free(lv);
        free(lw);
    }
    return 0;
fail:
    free(who);
    free(keep);
    free(lv);
    free(lw);
    return -1;
}

int istio_cluster_id(void *table, const char *host, const char *subset,
                     uint32_t port)
{
    struct istio_clusters *t = table;
    char key[640];
    const struct res_destination_rule *dr = NULL;
    const struct resource *drr = NULL;
    const struct res_subset *sub;
    struct eps e;
    struct res_eff_files files;
    struct cluster *c;
    struct ident_id fp;
    struct buf mtext;
    char pins[2 * 72];
    uintptr_t id;
    int h2 = 0, r;
    uint32_t svc_port = port; /* port 0: the ServiceEntry's only port */
    int passthrough = 0, external = 0;
    struct eff_policy ep0 = {NULL, NULL, NULL, NULL};
    struct net_split_result sr;
    struct eps_levels levels = {NULL, NULL, 0};
    char **via = NULL;
    char lookup[660];

    if (!host_registered(t, host)) {
        /* A wildcard names no host to pass through to. */
        if (t->outbound_mode != RES_ALLOW_ANY || strchr(host, '*') != NULL)
            return blackhole_id(t);
        passthrough = external = 1;
        if (port == 0)
            svc_port = port = t->listener_port;
    }
    /* The cluster name is what /stats shows: host, subset and port. A
     * passthrough keeps the name a ServiceEntry for the host would give,
     * so its counters read the same once the host is declared. */
    snprintf(key, sizeof(key), "%s|%s|%" PRIu32, host, subset ? subset : "",
             port);
    memset(&e, 0, sizeof(e));
    /* An east-west gateway's view of a host is a cluster of its own
     * (same name), apart from what routes on the listener send to. */
    snprintf(lookup, sizeof(lookup), "%s%s", key,
             t->local_view ? "|local-view" : "");
    id = (uintptr_t)strmap_get(&t->ids, lookup);
    if (id > 0)
        return (int)(id - 1);
    e.nt = clusters_nets(t);
    sub = find_subset(t, host, subset, &dr, &drr);
    if (subset != NULL && subset[0] != '\0' && sub == NULL)
        log_warn("destination %s: subset %s not found; no endpoints", host,
                 subset);
    if (passthrough) {
        /* The host's own addresses, as for a DNS ServiceEntry without
         * endpoints: a subset's labels select none of them. */
        if ((subset == NULL || subset[0] == '\0' || sub != NULL) &&
            (sub == NULL || sub->labels.n == 0))
            eps_add_dns(t, &e, host, port, 1, NULL);
    } else if (subset == NULL || subset[0] == '\0' || sub != NULL) {
        collect(t, host, port, sub ? &sub->labels : NULL, &e, &h2, &svc_port,
                &external);
    }
    /* The split horizon: endpoints on other networks are reached
     * through their gateways, with mTLS only (ISTIO_MUTUAL). */
    if (dr != NULL)
        merge_policy(&ep0, &dr->traffic_policy, svc_port);
    if (sub != NULL)
        merge_policy(&ep0, &sub->traffic_policy, svc_port);
    if (eps_split(e.nt, &e,
                  (ep0.tls != NULL && ep0.tls->mode == RES_TLS_ISTIO_MUTUAL
                       ? NET_SPLIT_MTLS
                       : 0) |
                      (t->local_view ? NET_SPLIT_LOCAL_VIEW : 0),
                  &via, &sr) < 0) {
        eps_dispose(&e);
        return -1;
    }
    /* Locality load balancing: priority levels or locality weights. */
    if (eps_localize(t, &ep0, &e, via, &levels) < 0) {
        net_via_free(via, e.n);
        net_split_dispose(&sr);
        eps_dispose(&e);
        return -1;
    }
    eff_files(t, dr, sub, svc_port, &files);
    buf_init(&mtext, 64 * 1024);
    dest_text(t, host, passthrough, &e, &mtext);
    /* The roots ISTIO_MUTUAL trusts besides the certificate's own (the
     * linked sites'), or instead of it (the mesh's bundle). */
    snprintf(pins, sizeof(pins), "%s/%s",
             t->identity != NULL && t->identity->link_roots_pin != NULL
                 ? t->identity->link_roots_pin
                 : "",
             t->identity != NULL && t->identity->mesh_roots_pin != NULL
                 ? t->identity->mesh_roots_pin
                 : "");
    if (cluster_identity(key, passthrough, external, &e, via, &sr, &levels, h2,
                         svc_port, drr, &files, buf_cstr(&mtext), pins,
                         &fp) < 0) {
        buf_dispose(&mtext);
        net_via_free(via, e.n);
        net_split_dispose(&sr);
        eps_dispose(&e);
        eps_levels_dispose(&levels);
        return -1;
    }
    c = ident_map_get(t->next, &fp);
    if (c == NULL)
        c = ident_map_get(t->prev, &fp);
    if (c != NULL) {
        /* Built from the same things: the same cluster. */
        net_via_free(via, e.n);
        eps_dispose(&e);
        c = cluster_ref(c);
    } else {
        const struct eff_policy ep = ep0;
        struct cluster_spec sp;

        memset(&sp, 0, sizeof(sp));
        sp.name = key;
        sp.endpoints = e.v;
        sp.weights = e.n > 0 ? e.w : NULL;
        sp.nendpoints = e.n;
        sp.http2 = h2;
        sp.connect_timeout_ms = 10000; /* Istio's default connectTimeout */
        sp.idle_timeout_ms = 3600 * 1000;
        sp.lb = ep.lb;
        sp.pool = ep.pool;
        sp.od = ep.od;
        sp.tls = ep.tls;
        sp.host = host;
        sp.subset = subset;
        sp.port = svc_port;
        sp.sans = &e.sans;
        if (e.nhb > 0) {
            sp.hbone = e.hb;
            sp.hbone_ids = (const char *const *)e.id;
            sp.node_network = e.nt != NULL ? e.nt->node_network : NULL;
        }
        sp.levels = levels.level;
        sp.level_weights = levels.weight;
        c = compile_cluster(t, &sp, t->nworkers, NULL);
        if (c == NULL) {
            net_via_free(via, e.n);
            net_split_dispose(&sr);
            eps_dispose(&e);
            eps_levels_dispose(&levels);
            ident_id_dispose(&fp);
            return -1;
        }
        if (cluster_set_meta(c, e.net, e.loc, (const char *const *)via) < 0)
            log_error("cluster %s: endpoint networks: out of memory", key);
        c->remote_skipped_mtls = sr.skipped_mtls;
        c->remote_skipped_family = sr.skipped_family;
        c->remote_skipped_no_gateway = sr.skipped_no_gateway;
        c->remote_skipped_view = sr.skipped_view;
        if (sr.skipped_mtls > 0)
            log_warn("cluster %s: %" PRIu32 " endpoint%s on other networks "
                     "left out: cross-network traffic needs mTLS (a "
                     "DestinationRule with tls mode ISTIO_MUTUAL, or an "
                     "HBONE gateway of their network)",
                     key, sr.skipped_mtls, sr.skipped_mtls == 1 ? "" : "s");
        if (sr.skipped_family > 0)
            log_warn("cluster %s: %" PRIu32 " endpoint%s on other networks "
                     "left out: no gateway of an IP family this node has",
                     key, sr.skipped_family, sr.skipped_family == 1 ? "" : "s");
        if (sr.skipped_no_gateway > 0)
            log_warn("cluster %s: %" PRIu32 " endpoint%s without an address "
                     "left out: their network has no gateway",
                     key, sr.skipped_no_gateway,
                     sr.skipped_no_gateway == 1 ? "" : "s");
        net_via_free(via, e.n);
        eps_dispose(&e);
        series_labels_unref(c->metrics);
        c->metrics = series_labels_new(buf_ptr(&mtext), buf_len(&mtext), 0);
        if (passthrough)
            c->origin = CLUSTER_PASSTHROUGH;
        /* An external host is known by its name: send it as the SNI and
         * check the certificate against it (unless subjectAltNames say
         * otherwise), as Istio's auto SNI and SAN validation do for a
         * request to it. */
        if (external && c->tls != NULL && c->sni == NULL && host_is_name(host))
            c->sni = strdup(host);
    }
    if (t->next != NULL && ident_map_get(t->next, &fp) == NULL) {
        if (ident_map_put(t->next, &fp, c) < 0) {
            ident_id_dispose(&fp);
            cluster_unref(c);
            eps_levels_dispose(&levels);
            return -1;
        }
        cluster_ref(c);
    }
    buf_dispose(&mtext);
    net_split_dispose(&sr);
    eps_levels_dispose(&levels);
    used_cluster(t->used, &fp, &files);
    ident_id_dispose(&fp);
    r = table_add(t, lookup, c);
    if (r < 0)
        cluster_unref(c);
    return r;
}
