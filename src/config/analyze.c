#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/analyze.h"
#include "config/link-merge.h"
#include "config/res-k8s.h"
#include "config/res-kinds.h"
#include "config/resource.h"
#include "core/ascii.h"
#include "core/buf.h"
#include "core/host.h"
#include "core/json.h"
#include "core/strmap.h"
#include "tls/crl.h"

#define HOST_MAX 600

/* One service the set knows: its full host name (maybe a wildcard) and
 * where it came from. */
struct svc {
    char host[HOST_MAX];
    const struct resource *se; /* the ServiceEntry, or NULL */
    const struct resource *we; /* a WorkloadEntry backing it, or NULL */
};

/* Ascending indexes (into actx.svcs or the set) kept under one key. */
struct ivec {
    size_t *v;
    size_t n;
    size_t cap;
};

/*
 * The analysis asks "which services, DestinationRules, VirtualServices
 * name this host" once per destination and per resource. Asked by a scan
 * of the set, a set of N tenants cost N^2 (8.9 s of `strait check` at
 * 5,000 tenants); these indexes, built once per analysis, answer by hash.
 * A host that is a wildcard pattern is kept apart (svc_wild, dr_wild):
 * there are few, and they are scanned, as the rules need a suffix match.
 */
struct actx {
    const struct resource_set *set;
    int outbound_mode;                /* enum res_outbound_mode */
    const struct analysis_node *node; /* NULL: not known */
    struct res_msgs *msgs;
    struct svc *svcs;
    size_t nsvc;
    size_t asvc;
    struct strmap svc_exact; /* lowercase full host -> ivec of svcs */
    struct ivec svc_wild;    /* svcs whose host is a wildcard */
    struct strmap dr_exact;  /* lowercase full host -> ivec of set indexes */
    struct ivec dr_wild;     /* set indexes of wildcard DestinationRules */
    struct strmap se_host;   /* ServiceEntry host as written -> set indexes */
    struct strmap mesh_vs;   /* lowercase full host -> mesh VirtualServices */
    struct strmap subset_vs; /* host as written -> VirtualServices of that
                              * host routing to it by subset (IST0140) */
    int oom;                 /* an index is incomplete: the load fails */
};

static int ivec_push(struct ivec *v, size_t i)
{
    if (v->n > 0 && v->v[v->n - 1] == i)
        return 0; /* one resource naming a host twice is listed once */
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 2;
        size_t *nv = realloc(v->v, cap * sizeof(*nv));
        if (nv == NULL)
            return -1;
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = i;
    return 0;
}

/* index_add() appends i to key's list in m (lowercased first when
 * lower); a failure marks the analysis as without indexes. */
static void index_add(struct actx *a, struct strmap *m, const char *key,
                      int lower, size_t i)
{
    char k[HOST_MAX];
    struct ivec *v;

    snprintf(k, sizeof(k), "%s", key);
    if (lower)
        ascii_lower_str(k);
    v = strmap_get(m, k);
    if (v == NULL) {
        v = calloc(1, sizeof(*v));
        if (v == NULL || strmap_put(m, k, v) < 0) {
            free(v);
            a->oom = 1;
            return;
        }
    }
    if (ivec_push(v, i) < 0)
        a->oom = 1;
}

static const struct ivec *index_get(const struct strmap *m, const char *key,
                                    int lower)
{
    char k[HOST_MAX];

    snprintf(k, sizeof(k), "%s", key);
    if (lower)
        ascii_lower_str(k);
    return strmap_get(m, k);
}

static void index_dispose(struct strmap *m)
{
    size_t pos = 0;
    const char *k;
    void *v;

    while (strmap_next(m, &pos, &k, &v)) {
        free(((struct ivec *)v)->v);
        free(v);
    }
    strmap_dispose(m);
}

static const struct {
    const char *code;
    const char *name;
} code_names[] = {
    {"IST0002", "Deprecated"},
    {"IST0101", "ReferencedResourceNotFound"},
    {"IST0106", "SchemaValidationError"},
    {"IST0109", "ConflictingMeshGatewayVirtualServiceHosts"},
    {"IST0112", "VirtualServiceDestinationPortSelectorRequired"},
    {"IST0127", "NoMatchingWorkloadsFound"},
    {"IST0128", "NoServerCertificateVerificationDestinationLevel"},
    {"IST0129", "NoServerCertificateVerificationPortLevel"},
    {"IST0130", "VirtualServiceUnreachableRule"},
    {"IST0131", "VirtualServiceIneffectiveMatch"},
    {"IST0132", "VirtualServiceHostNotFoundInGateway"},
    {"IST0133", "SchemaWarning"},
    {"IST0134", "ServiceEntryAddressesRequired"},
    {"IST0138", "GatewayDuplicateCertificate"},
    {"IST0140", "IngressRouteRulesNotAffected"},
    {"IST0145", "ConflictingGateways"},
    {"IST0149", "JwtClaimBasedRoutingWithoutRequestAuthN"},
    {"IST0161", "InvalidGatewayCredential"},
    {"IST0162", "GatewayPortNotDefinedOnService"},
    {"IST0165", "ReferencedInternalGateway"},
    {"IST0171", "NegativeConditionStatus"},
    {"IST0173", "DestinationRuleSubsetNotSelectPods"},
    {"IST0174", "UnknownDestinationRuleHost"},
    {"IST0177", "ConflictingServiceEntryProtocol"},
    /* strait's own, for what istioctl has no code for */
    {"STR0001", "NotUsedByGateway"},
    {"STR0002", "GatewayConfigWarning"},
    {"STR0003", "DestinationPortUnknown"},
    {"STR0004", "DuplicateResource"},
    {"STR0005", "UndeclaredHostPassthrough"},
    {"STR0006", "GatewayPortNotShared"},
    {"STR0007", "GatewayPortConflict"},
    {"STR0008", "UnknownKind"},
    {"STR0009", "NetworkWithoutGateway"},
    {"STR0010", "LuaPolicyTargetNotGranted"},
    {"STR0011", "MeshLinkHostConflict"},
    {"STR0012", "GatewayPortTranslated"},
    {"STR0013", "GatewayAPICondition"},
    {"STR0014", "GatewayAPIStatus"},
};

const char *res_code_name(const char *code)
{
    for (size_t i = 0; i < sizeof(code_names) / sizeof(*code_names); i++)
        if (strcmp(code, code_names[i].code) == 0)
            return code_names[i].name;
    return "";
}

void res_codes_reference(struct buf *b)
{
    for (size_t i = 0; i < sizeof(code_names) / sizeof(*code_names); i++)
        buf_printf(b, "%s\t%s\n", code_names[i].code, code_names[i].name);
}

static void ident(char *out, size_t n, const struct resource *r)
{
    snprintf(out, n, "%s %s/%s", res_kind_name(r->kind), r->meta.ns,
             r->meta.name);
}

static int finding(struct actx *a, const char *code, enum res_level level,
                   const struct resource *r, const struct conf_mark *mark,
                   const char *path, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* The message finding() just added (it returns 1 when it did): marked
 * inert, it is reported but never refuses a load. */
static void last_inert(struct actx *a, int added)
{
    if (added)
        a->msgs->v[a->msgs->n - 1].inert = 1;
}

static int finding(struct actx *a, const char *code, enum res_level level,
                   const struct resource *r, const struct conf_mark *mark,
                   const char *path, const char *fmt, ...)
{
    char text[1024], who[600];
    va_list ap;
    int line = r->line, col = r->col;
    size_t before = a->msgs->n;

    if (mark != NULL && mark->line > 0) {
        line = mark->line;
        col = mark->col;
    }
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    ident(who, sizeof(who), r);
    res_msgs_add(a->msgs, code, level, r->file, line, col, who, path, "%s",
                 text);
    return a->msgs->n > before;
}

static void fqdn(const struct actx *a, const struct resource *r,
                 const char *host, char *out)
{
    if (res_host_fqdn(host, r->meta.ns, a->set->domain, out, HOST_MAX) < 0)
        snprintf(out, HOST_MAX, "%s", host);
}

static void add_svc(struct actx *a, const char *host, const struct resource *se,
                    const struct resource *we)
{
    if (a->nsvc == a->asvc) {
        size_t n = a->asvc ? a->asvc * 2 : 16;
        struct svc *v = realloc(a->svcs, n * sizeof(*v));
        if (v == NULL) {
            a->oom = 1;
            return;
        }
        a->svcs = v;
        a->asvc = n;
    }
    snprintf(a->svcs[a->nsvc].host, HOST_MAX, "%s", host);
    a->svcs[a->nsvc].se = se;
    a->svcs[a->nsvc].we = we;
    if (host_pattern_kind(host) == HOST_EXACT)
        index_add(a, &a->svc_exact, host, 1, a->nsvc);
    else if (ivec_push(&a->svc_wild, a->nsvc) < 0)
        a->oom = 1;
    a->nsvc++;
}

static const char *label_of(const struct conf_strmap *m, const char *key)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->v[i].key, key) == 0)
            return m->v[i].val;
    return NULL;
}

static void collect_services(struct actx *a)
{
    char h[HOST_MAX];

    for (size_t i = 0; i < a->set->n; i++) {
        const struct resource *r = a->set->v[i];
        if (res_is_service(r)) {
            const struct res_service_entry *se = res_service_entry(r);
            for (size_t j = 0; j < se->hosts.n; j++) {
                fqdn(a, r, se->hosts.v[j], h);
                add_svc(a, h, r, NULL);
            }
        } else if (r->kind == RES_WORKLOAD_ENTRY) {
            const char *app = label_of(&res_workload_entry(r)->labels, "app");
            if (app != NULL) {
                fqdn(a, r, app, h);
                add_svc(a, h, NULL, r);
            }
        }
    }
}

/* build_indexes() fills the host indexes of a (struct actx) from the
 * set, in set order, so a lookup lists what a scan would have found in
 * the order it would have found it. */
static void build_indexes(struct actx *a)
{
    char h[HOST_MAX];

    for (size_t i = 0; i < a->set->n; i++) {
        const struct resource *r = a->set->v[i];
        if (r->kind == RES_DESTINATION_RULE) {
            fqdn(a, r, res_destination_rule(r)->host, h);
            if (host_pattern_kind(h) == HOST_EXACT)
                index_add(a, &a->dr_exact, h, 1, i);
            else if (ivec_push(&a->dr_wild, i) < 0)
                a->oom = 1;
        } else if (r->kind == RES_SERVICE_ENTRY) {
            const struct res_service_entry *se = res_service_entry(r);
            for (size_t j = 0; j < se->hosts.n; j++)
                index_add(a, &a->se_host, se->hosts.v[j], 0, i);
        } else if (r->kind == RES_VIRTUAL_SERVICE) {
            const struct res_virtual_service *vs = res_virtual_service(r);
            int mesh = vs->gateways.n == 0;
            for (size_t g = 0; g < vs->gateways.n; g++)
                mesh |= strcmp(vs->gateways.v[g], "mesh") == 0;
            for (size_t k = 0; mesh && k < vs->hosts.n; k++) {
                fqdn(a, r, vs->hosts.v[k], h);
                index_add(a, &a->mesh_vs, h, 1, i);
            }
            /* IST0140's other side: a route by subset to a host the
             * VirtualService itself names. */
            for (size_t j = 0; j < vs->http.n; j++) {
                const struct res_http_route *hr =
                    (const struct res_http_route *)vs->http.v + j;
                for (size_t d = 0; d < hr->route.n; d++) {
                    const struct res_destination *dst =
                        &((const struct res_route_dest *)hr->route.v + d)
                             ->destination;
                    if (dst->host == NULL || dst->subset == NULL ||
                        dst->subset[0] == '\0')
                        continue;
                    for (size_t k = 0; k < vs->hosts.n; k++)
                        if (strcmp(vs->hosts.v[k], dst->host) == 0) {
                            index_add(a, &a->subset_vs, dst->host, 0, i);
                            break;
                        }
                }
            }
        }
    }
}

static void indexes_dispose(struct actx *a)
{
    index_dispose(&a->svc_exact);
    index_dispose(&a->dr_exact);
    index_dispose(&a->se_host);
    index_dispose(&a->mesh_vs);
    index_dispose(&a->subset_vs);
    free(a->svc_wild.v);
    free(a->dr_wild.v);
}

/* service_known() is true when host (full) names a service of the set:
 * some service's host covers it. An exact name covers only itself, so
 * only the wildcard services are tried one by one. */
static int service_known(const struct actx *a, const char *host)
{
    if (host_pattern_kind(host) == HOST_EXACT &&
        index_get(&a->svc_exact, host, 1) != NULL)
        return 1;
    for (size_t i = 0; i < a->svc_wild.n; i++)
        if (host_covers(a->svcs[a->svc_wild.v[i]].host, host))
            return 1;
    return 0;
}

/* dr_for() returns the DestinationRule for a full host: an exact host
 * first, then the most specific wildcard, as Istio picks. */
static const struct resource *dr_for(const struct actx *a, const char *host)
{
    const struct resource *best = NULL;
    size_t best_len = 0;
    char h[HOST_MAX];
    const struct ivec *exact = index_get(&a->dr_exact, host, 1);

    /* The first DestinationRule of the host as written, in set order
     * (dr_exact holds the exact ones, a wildcard host matches no exact
     * one), else the longest wildcard that covers it, the first of
     * equals. */
    if (exact != NULL)
        return a->set->v[exact->v[0]];
    for (size_t i = 0; i < a->dr_wild.n; i++) {
        const struct resource *r = a->set->v[a->dr_wild.v[i]];
        fqdn(a, r, res_destination_rule(r)->host, h);
        if (host_covers(h, host) && strlen(h) > best_len) {
            best = r;
            best_len = strlen(h);
        }
    }
    return best;
}

/* ---- VirtualService ---------------------------------------------------- */

/* only_mesh() is true when a non-empty gateways list names only mesh. */
static int only_mesh(const struct conf_strs *gws)
{
    for (size_t i = 0; i < gws->n; i++)
        if (strcmp(gws->v[i], "mesh") != 0)
            return 0;
    return gws->n > 0;
}

/* vs_mesh_only() is true for a VirtualService bound to the sidecars
 * alone: no gateways (Istio's default, mesh) or only mesh. A gateway
 * never uses it. */
static int vs_mesh_only(const struct res_virtual_service *vs)
{
    return vs->gateways.n == 0 || only_mesh(&vs->gateways);
}

/* A rule whose every match names only mesh is used by sidecars alone
 * (a match without gateways takes the VirtualService's). */
static int http_rule_mesh_only(const struct res_virtual_service *vs,
                               const struct res_http_route *h)
{
    if (vs_mesh_only(vs))
        return 1;
    for (size_t i = 0; i < h->match.n; i++)
        if (!only_mesh(
                &((const struct res_http_match *)h->match.v)[i].gateways))
            return 0;
    return h->match.n > 0;
}

static int l4_rule_mesh_only(const struct res_virtual_service *vs,
                             const struct res_l4_route *l)
{
    if (vs_mesh_only(vs))
        return 1;
    for (size_t i = 0; i < l->match.n; i++)
        if (!only_mesh(&((const struct res_l4_match *)l->match.v)[i].gateways))
            return 0;
    return l->match.n > 0;
}

static void rule_ignored(struct actx *a, const struct resource *r,
                         const struct conf_mark *mark, const char *path)
{
    finding(a, "STR0001", RES_INFO, r, mark, path,
            "rule bound only to mesh: sidecars use it, a gateway ignores it "
            "(its destinations are not checked)");
}

static const struct resource *
find_gateway(const struct actx *a, const struct resource *vs, const char *ref)
{
    const char *slash = strchr(ref, '/');
    char ns[256];

    if (slash == NULL)
        return resource_find(a->set, RES_GATEWAY, vs->meta.ns, ref);
    snprintf(ns, sizeof(ns), "%.*s", (int)(slash - ref), ref);
    return resource_find(a->set, RES_GATEWAY, ns, slash + 1);
}

static void check_gateway_refs(struct actx *a, const struct resource *r,
                               const struct conf_strs *gws,
                               const struct conf_mark *mark, const char *path)
{
    char p[300];

    for (size_t i = 0; i < gws->n; i++) {
        if (strcmp(gws->v[i], "mesh") == 0 ||
            find_gateway(a, r, gws->v[i]) != NULL)
            continue;
        res_path(p, sizeof(p), "%s[%zu]", path, i);
        if (strstr(gws->v[i], "~istio-autogenerated-k8s-gateway~") != NULL) {
            finding(a, "IST0165", RES_WARNING, r, mark, p,
                    "Gateway reference in VirtualService %s/%s is to an "
                    "implementation-generated internal Gateway: %s.",
                    r->meta.ns, r->meta.name, gws->v[i]);
            continue;
        }
        finding(a, "IST0101", RES_ERROR, r, mark, p,
                "Referenced gateway not found: \"%s\"", gws->v[i]);
    }
}

/* The port a passthrough destination is sent to, for messages. */
static void dest_port_text(const struct res_destination *d, char *out, size_t n)
{
    if (d->port.number > 0)
        snprintf(out, n, "port %lld", (long long)d->port.number);
    else
        snprintf(out, n, "the port of the Gateway server it comes through");
}

/* The ServiceEntry that declares host (full), or NULL. */
static const struct resource *se_for(const struct actx *a, const char *host)
{
    const struct ivec *exact = NULL;
    size_t first = SIZE_MAX;

    if (host_pattern_kind(host) == HOST_EXACT)
        exact = index_get(&a->svc_exact, host, 1);
    /* A Kubernetes Service of the host comes first, as in istiod. */
    for (size_t i = 0; exact != NULL && i < exact->n; i++) {
        const struct svc *s = &a->svcs[exact->v[i]];
        if (s->se != NULL && s->se->kind == RES_SERVICE &&
            strcmp(s->host, host) == 0)
            return s->se;
    }
    /* Then the first service, in set order, whose host covers it. */
    for (size_t i = 0; exact != NULL && i < exact->n; i++)
        if (a->svcs[exact->v[i]].se != NULL) {
            first = exact->v[i];
            break;
        }
    for (size_t i = 0; i < a->svc_wild.n && a->svc_wild.v[i] < first; i++) {
        const struct svc *s = &a->svcs[a->svc_wild.v[i]];
        if (s->se != NULL && host_covers(s->host, host)) {
            first = a->svc_wild.v[i];
            break;
        }
    }
    return first != SIZE_MAX ? a->svcs[first].se : NULL;
}

/* A service WorkloadEntries stand for has the port names they list
 * (res_we_service_ports()): without a destination port, several are as
 * ambiguous as a ServiceEntry's (IST0112), and none leaves no port to
 * send to. */
static void check_we_dest_port(struct actx *a, const struct resource *r,
                               const struct res_destination *d,
                               const char *host, const char *path)
{
    const char *only;
    struct buf names;
    int n;

    if (d->port.number != 0)
        return;
    buf_init(&names, 4096);
    n = res_we_service_ports(a->set, host, &only, &names);
    if (n > 1)
        finding(a, "IST0112", RES_ERROR, r, &d->mark, path,
                "This VirtualService routes to a service \"%s\" that exposes "
                "multiple ports %s. Specifying a port in the destination is "
                "required to disambiguate.",
                d->host, buf_cstr(&names));
    else if (n == 0)
        finding(a, "STR0003", RES_ERROR, r, &d->mark, path,
                "The service \"%s\" has no port: none of its "
                "WorkloadEntries lists one in ports. Give the destination a "
                "port, or the WorkloadEntries ports.",
                d->host);
    buf_dispose(&names);
}

/* Istio's checkServiceEntryPorts: without a port, a ServiceEntry of
 * several ports is ambiguous (IST0112); a port it does not list is not
 * found (IST0101). */
static void check_dest_port(struct actx *a, const struct resource *r,
                            const struct res_destination *d, const char *host,
                            const char *path)
{
    const struct resource *ser = se_for(a, host);
    const struct res_service_entry *se;
    char ports[512];
    size_t off = 0;

    if (ser == NULL) {
        check_we_dest_port(a, r, d, host, path);
        return;
    }
    se = res_service_entry(ser);
    if (d->port.number == 0) {
        if (se->ports.n < 2)
            return;
        off += (size_t)snprintf(ports, sizeof(ports), "[");
        for (size_t i = 0; i < se->ports.n && off < sizeof(ports); i++)
            off += (size_t)snprintf(
                ports + off, sizeof(ports) - off, "%s%lld", i ? " " : "",
                (long long)((const struct res_se_port *)se->ports.v)[i].number);
        if (off < sizeof(ports))
            snprintf(ports + off, sizeof(ports) - off, "]");
        finding(a, "IST0112", RES_ERROR, r, &d->mark, path,
                "This VirtualService routes to a service \"%s\" that exposes "
                "multiple ports %s. Specifying a port in the destination is "
                "required to disambiguate.",
                d->host, ports);
        return;
    }
    for (size_t i = 0; i < se->ports.n; i++)
        if (((const struct res_se_port *)se->ports.v)[i].number ==
            d->port.number)
            return;
    if (se->ports.n == 0)
        return;
    finding(a, "IST0101", RES_ERROR, r, &d->mark, path,
            "Referenced host:port not found: \"%s:%lld\"", d->host,
            (long long)d->port.number);
}

/*
 * A destination host must be in the registry: a ServiceEntry host or a
 * service a WorkloadEntry stands for (a DestinationRule alone does not
 * declare a host). What an undeclared one is depends on the mesh's
 * outboundTrafficPolicy: under REGISTRY_ONLY an error (IST0101: it would
 * go to BlackHoleCluster), under ALLOW_ANY strait's own warning STR0005
 * (it is passed through to the host name, resolved by DNS), unless it is
 * a wildcard, which names no host to resolve (IST0101). Istio's IST0101
 * is always an Error, so a host that is not an error is not said with it.
 */
static void check_destination(struct actx *a, const struct resource *r,
                              const struct res_destination *d, const char *path)
{
    char h[HOST_MAX], p[300], port[64];
    const struct resource *dr;

    if (d->host == NULL)
        return;
    fqdn(a, r, d->host, h);
    dr = dr_for(a, h);
    res_path(p, sizeof(p), "%s.host", path);
    if (!service_known(a, h)) {
        if (a->outbound_mode != RES_ALLOW_ANY) {
            finding(a, "IST0101", RES_ERROR, r, &d->mark, p,
                    "Referenced host not found: \"%s\" (outboundTrafficPolicy "
                    "is REGISTRY_ONLY: declare the host in a ServiceEntry, or "
                    "set outboundTrafficPolicy.mode ALLOW_ANY in the "
                    "bootstrap to pass it through)",
                    d->host);
            return;
        }
        if (strchr(h, '*') != NULL) {
            finding(a, "IST0101", RES_ERROR, r, &d->mark, p,
                    "Referenced host not found: \"%s\" (outboundTrafficPolicy "
                    "ALLOW_ANY passes a host through by its DNS name, and a "
                    "wildcard names none: declare it in a ServiceEntry)",
                    d->host);
            return;
        }
        dest_port_text(d, port, sizeof(port));
        finding(a, "STR0005", RES_WARNING, r, &d->mark, p,
                "Host \"%s\" is in no ServiceEntry, Service or "
                "WorkloadEntry: passed through to %s, resolved by DNS, on %s "
                "(outboundTrafficPolicy ALLOW_ANY)",
                d->host, h, port);
    }
    check_dest_port(a, r, d, h, p);
    if (d->subset == NULL)
        return;
    if (dr != NULL) {
        const struct res_destination_rule *spec = res_destination_rule(dr);
        for (size_t i = 0; i < spec->subsets.n; i++)
            if (strcmp(((const struct res_subset *)spec->subsets.v)[i].name,
                       d->subset) == 0)
                return;
    }
    res_path(p, sizeof(p), "%s.subset", path);
    finding(a, "IST0101", RES_ERROR, r, &d->mark, p,
            "Referenced host+subset in destinationrule not found: \"%s+%s\"",
            d->host, d->subset);
}

/* Destination weights that sum to zero route nothing: a schema error in
 * any rule, the mesh's included. */
static void check_weights(struct actx *a, const struct resource *r,
                          const struct conf_list *route,
                          const struct conf_mark *rule_mark, const char *path)
{
    char p[300];
    int64_t sum = 0;

    for (size_t i = 0; i < route->n; i++)
        sum += ((const struct res_route_dest *)route->v + i)->weight;
    if (route->n > 1 && sum == 0) {
        res_path(p, sizeof(p), "%s.route", path);
        finding(a, "IST0106", RES_ERROR, r, rule_mark, p,
                "the weights of the %zu destinations sum to zero: no "
                "request could be routed",
                route->n);
    }
}

static void check_dests(struct actx *a, const struct resource *r,
                        const struct conf_list *route,
                        const struct conf_mark *rule_mark, const char *path)
{
    char p[300];

    for (size_t i = 0; i < route->n; i++) {
        const struct res_route_dest *rd =
            (const struct res_route_dest *)route->v + i;
        res_path(p, sizeof(p), "%s.route[%zu].destination", path, i);
        check_destination(a, r, &rd->destination, p);
    }
    check_weights(a, r, route, rule_mark, path);
}

/* Istio's names for rules and matches in IST0130/IST0131: the quoted
 * name of an http rule or match, else "#index". */
static void rule_label(char *out, size_t n, const char *name, size_t i)
{
    if (name != NULL && name[0] != '\0')
        snprintf(out, n, "\"%s\"", name);
    else
        snprintf(out, n, "#%zu", i);
}

/* "exact:v" or "prefix:v" of a StringMatch, "" for neither (Istio's
 * assignExactOrPrefix). */
static void exact_or_prefix(char *out, size_t n, const struct res_strmatch *m)
{
    if (m->exact != NULL && m->exact[0] != '\0')
        snprintf(out, n, "exact:%s", m->exact);
    else if (m->prefix != NULL && m->prefix[0] != '\0')
        snprintf(out, n, "prefix:%s", m->prefix);
    else
        out[0] = '\0';
}

static int has_prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* Istio's rule for map conditions: same keys, and each value of x equal
 * to or starting with y's. */
static int maps_cover(const struct conf_map *x, const struct conf_map *y)
{
    if (x->n != y->n)
        return 0;
    for (size_t i = 0; i < x->n; i++) {
        char vx[512], vy[512];
        size_t j;
        for (j = 0; j < y->n; j++)
            if (strcmp(x->keys[i], y->keys[j]) == 0)
                break;
        if (j == y->n)
            return 0;
        exact_or_prefix(vx, sizeof(vx), (const struct res_strmatch *)x->v + i);
        exact_or_prefix(vy, sizeof(vy), (const struct res_strmatch *)y->v + j);
        if (strcmp(vx, vy) != 0 && !has_prefix(vx, vy))
            return 0;
    }
    return 1;
}

/* covered() is Istio's coveredValidation: an earlier uri prefix match a
 * covers a later one b (b's prefix starts with a's, on the same port,
 * method, authority and conditions). */
static int covered(const struct res_http_match *a,
                   const struct res_http_match *b)
{
    char ma[512], mb[512];

    if (!has_prefix(b->uri.prefix, a->uri.prefix) || a->port != b->port)
        return 0;
    exact_or_prefix(ma, sizeof(ma), &a->method);
    exact_or_prefix(mb, sizeof(mb), &b->method);
    if (ma[0] == '\0')
        snprintf(ma, sizeof(ma), "exact:GET");
    if (mb[0] == '\0')
        snprintf(mb, sizeof(mb), "exact:GET");
    if (strcmp(ma, mb) != 0 && !has_prefix(ma, mb))
        return 0;
    exact_or_prefix(ma, sizeof(ma), &a->authority);
    exact_or_prefix(mb, sizeof(mb), &b->authority);
    if (strcmp(ma, mb) != 0 && !has_prefix(ma, mb))
        return 0;
    return maps_cover(&a->headers, &b->headers) &&
           maps_cover(&a->query_params, &b->query_params) &&
           maps_cover(&a->without_headers, &b->without_headers);
}

/*
 * check_rules() is Istio's analyzeUnreachable{HTTP,TCP,TLS}Rules for one
 * list of rules (kind 0 http, 1 tls, 2 tcp): a rule after one without
 * matches, a match that repeats an earlier one (same conditions, names
 * aside), a rule all of whose matches do, and, for http, a uri prefix
 * match an earlier prefix match covers. Rules bound only to mesh are
 * left out: a gateway never sees them.
 */
static void check_rules(struct actx *a, const struct resource *r,
                        const struct res_virtual_service *vs, int kind)
{
    const struct conf_list *rules = kind == 0   ? &vs->http
                                    : kind == 1 ? &vs->tls
                                                : &vs->tcp;
    const char *sect = kind == 0 ? "http" : kind == 1 ? "tls" : "tcp";
    struct buf *seen = NULL;
    size_t nseen = 0, *seen_rule = NULL, total = 0, empty = SIZE_MAX;
    struct {
        const struct res_http_match *m;
        size_t rule, match;
    } *pfx = NULL;
    size_t npfx = 0;
    char p[300], rl[300], ml[300], dl[300];

    for (size_t i = 0; i < rules->n; i++)
        total += kind == 0
                     ? ((const struct res_http_route *)rules->v)[i].match.n
                     : ((const struct res_l4_route *)rules->v)[i].match.n;
    seen = calloc(total ? total : 1, sizeof(*seen));
    seen_rule = calloc(total ? total : 1, sizeof(*seen_rule));
    pfx = calloc(total ? total : 1, sizeof(*pfx));
    if (seen == NULL || seen_rule == NULL || pfx == NULL)
        goto out;
    for (size_t i = 0; i < rules->n; i++) {
        const struct res_http_route *h =
            kind == 0 ? (const struct res_http_route *)rules->v + i : NULL;
        const struct res_l4_route *l =
            kind != 0 ? (const struct res_l4_route *)rules->v + i : NULL;
        const struct conf_mark *mark = h ? &h->mark : &l->mark;
        size_t nmatch = h ? h->match.n : l->match.n, dup = 0;

        if (h ? http_rule_mesh_only(vs, h) : l4_rule_mesh_only(vs, l))
            continue;
        res_path(p, sizeof(p), "spec.%s[%zu]", sect, i);
        rule_label(rl, sizeof(rl), h ? h->name : NULL, i);
        if (nmatch == 0) {
            if (empty != SIZE_MAX)
                finding(a, "IST0130", RES_WARNING, r, mark, p,
                        "VirtualService rule %s not used (only the last rule "
                        "can have no matches).",
                        rl);
            empty = i;
            continue;
        }
        for (size_t j = 0; j < nmatch; j++) {
            const struct res_http_match *hm =
                h ? (const struct res_http_match *)h->match.v + j : NULL;
            const struct res_l4_match *lm =
                l ? (const struct res_l4_match *)l->match.v + j : NULL;
            const struct conf_mark *mm = hm ? &hm->mark : &lm->mark;
            struct buf *js = &seen[nseen];
            size_t k;

            if (empty != SIZE_MAX) {
                finding(a, "IST0130", RES_WARNING, r, mark, p,
                        "VirtualService rule %s not used (route without "
                        "matches defined before).",
                        rl);
                continue;
            }
            buf_init(js, 1 << 20);
            if (hm != NULL)
                res_http_match_json(js, hm);
            else
                res_l4_match_json(js, lm, kind == 1);
            for (k = 0; k < nseen; k++)
                if (buf_len(&seen[k]) == buf_len(js) &&
                    memcmp(buf_ptr(&seen[k]), buf_ptr(js), buf_len(js)) == 0)
                    break;
            rule_label(ml, sizeof(ml), hm ? hm->name : NULL, j);
            if (k < nseen) {
                char mp[360];
                const struct res_http_route *dh =
                    kind == 0
                        ? (const struct res_http_route *)rules->v + seen_rule[k]
                        : NULL;
                rule_label(dl, sizeof(dl), dh ? dh->name : NULL, seen_rule[k]);
                res_path(mp, sizeof(mp), "%s.match[%zu]", p, j);
                finding(a, "IST0131", RES_INFO, r, mm, mp,
                        "VirtualService rule %s match %s is not used "
                        "(duplicate/overlapping match in rule %s).",
                        rl, ml, dl);
                dup++;
                buf_dispose(js);
                continue;
            }
            seen_rule[nseen++] = i;
            if (hm != NULL && hm->uri.prefix != NULL &&
                hm->uri.prefix[0] != '\0') {
                pfx[npfx].m = hm;
                pfx[npfx].rule = i;
                pfx[npfx].match = j;
                npfx++;
            }
        }
        if (dup == nmatch)
            finding(a, "IST0130", RES_WARNING, r, mark, p,
                    "VirtualService rule %s not used (all matches used by "
                    "prior rules).",
                    rl);
    }
    /* Prefix overlaps, as Istio checks them after the duplicates. */
    for (size_t x = 0; x < npfx; x++) {
        for (size_t y = x + 1; y < npfx; y++) {
            const struct res_http_route *hx =
                (const struct res_http_route *)rules->v + pfx[x].rule;
            const struct res_http_route *hy =
                (const struct res_http_route *)rules->v + pfx[y].rule;
            char mp[360];
            if (strcmp(pfx[y].m->uri.prefix, pfx[x].m->uri.prefix) == 0 ||
                !covered(pfx[x].m, pfx[y].m))
                continue;
            rule_label(rl, sizeof(rl), hy->name, pfx[y].rule);
            rule_label(ml, sizeof(ml), pfx[y].m->name, pfx[y].match);
            rule_label(dl, sizeof(dl), hx->name, pfx[x].rule);
            {
                char mx[300];
                rule_label(mx, sizeof(mx), pfx[x].m->name, pfx[x].match);
                res_path(mp, sizeof(mp), "spec.http[%zu].match[%zu]",
                         pfx[y].rule, pfx[y].match);
                finding(a, "IST0131", RES_INFO, r, &pfx[y].m->mark, mp,
                        "VirtualService rule %s match %s of prefix %s is not "
                        "used (duplicate/overlapping match in rule %s of "
                        "prefix %s on %s).",
                        rl, ml, pfx[y].m->uri.prefix, mx, pfx[x].m->uri.prefix,
                        dl);
            }
        }
    }
out:
    for (size_t k = 0; k < nseen; k++)
        buf_dispose(&seen[k]);
    free(seen);
    free(seen_rule);
    free(pfx);
}

/* gw_host_ok() is true when a Gateway server host ("[ns/]host") admits
 * VirtualService host h from namespace ns. */
static int gw_host_ok(const char *gw_host, const char *gw_ns, const char *ns,
                      const char *h)
{
    const char *host;

    return res_gw_host_admits(gw_host, gw_ns, strlen(gw_ns), ns, &host) &&
           host_intersect(host, h);
}

/* "[a b c]": a list as Go's %v prints it. */
static void strs_text(char *out, size_t n, const struct conf_strs *v)
{
    size_t off = 0;

    off += (size_t)snprintf(out, n, "[");
    for (size_t i = 0; i < v->n && off < n; i++)
        off +=
            (size_t)snprintf(out + off, n - off, "%s%s", i ? " " : "", v->v[i]);
    if (off < n)
        snprintf(out + off, n - off, "]");
}

/* IST0132, as Istio's gateway analyzer: once per Gateway reference when
 * none of the VirtualService's hosts is among that Gateway's hosts. */
static void check_vs_hosts_in_gateways(struct actx *a, const struct resource *r,
                                       const struct res_virtual_service *vs)
{
    char p[64], hosts[1024];

    strs_text(hosts, sizeof(hosts), &vs->hosts);
    for (size_t i = 0; i < vs->gateways.n; i++) {
        const struct resource *g;
        const struct res_gateway *gw;
        int found = 0;
        char gname[600];
        const char *ref = vs->gateways.v[i];

        if (strcmp(ref, "mesh") == 0 ||
            strstr(ref, "~istio-autogenerated-k8s-gateway~") != NULL)
            continue;
        if (strchr(ref, '/') != NULL)
            snprintf(gname, sizeof(gname), "%s", ref);
        else
            snprintf(gname, sizeof(gname), "%s/%s", r->meta.ns, ref);
        g = find_gateway(a, r, ref);
        if (g == NULL)
            continue; /* IST0101 says it */
        gw = res_gateway(g);
        for (size_t j = 0; j < vs->hosts.n && !found; j++)
            for (size_t s = 0; s < gw->servers.n && !found; s++) {
                const struct res_gw_server *srv =
                    (const struct res_gw_server *)gw->servers.v + s;
                for (size_t k = 0; k < srv->hosts.n && !found; k++)
                    found = gw_host_ok(srv->hosts.v[k], g->meta.ns, r->meta.ns,
                                       vs->hosts.v[j]);
            }
        if (found)
            continue;
        res_path(p, sizeof(p), "spec.gateways[%zu]", i);
        finding(a, "IST0132", RES_WARNING, r, NULL, p,
                "one or more host %s defined in VirtualService %s/%s not "
                "found in Gateway %s.",
                hosts, r->meta.ns, r->meta.name, gname);
    }
}

/* ---- VirtualService analyzers over the whole set ---------------------- */

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* IST0109: VirtualServices of the mesh (no gateways, or mesh among them)
 * that define the same host. About the sidecars' configuration: inert. */
static void check_mesh_hosts(struct actx *a)
{
    const struct resource_set *set = a->set;
    char *reported = calloc(set->n ? set->n : 1, 1);

    if (reported == NULL)
        return;
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_virtual_service *vs;
        if (r->kind != RES_VIRTUAL_SERVICE)
            continue;
        vs = res_virtual_service(r);
        {
            int mesh = vs->gateways.n == 0;
            for (size_t g = 0; g < vs->gateways.n; g++)
                mesh |= strcmp(vs->gateways.v[g], "mesh") == 0;
            if (!mesh)
                continue;
        }
        for (size_t h = 0; h < vs->hosts.n; h++) {
            char fq[HOST_MAX], names[2048];
            const char *list[64];
            const struct resource *who[64];
            size_t n = 0, off = 0;

            size_t widx[64];
            const struct ivec *same;

            fqdn(a, r, vs->hosts.v[h], fq);
            same = index_get(&a->mesh_vs, fq, 1);
            for (size_t j = 0; same != NULL && j < same->n && n < 64; j++) {
                widx[n] = same->v[j];
                who[n++] = set->v[same->v[j]];
            }
            if (n < 2 || who[0] != r)
                continue;
            {
                char buf[64][520];
                for (size_t k = 0; k < n; k++) {
                    snprintf(buf[k], sizeof(buf[k]), "%s/%s", who[k]->meta.ns,
                             who[k]->meta.name);
                    list[k] = buf[k];
                }
                qsort(list, n, sizeof(*list), cmp_str);
                names[0] = '\0';
                for (size_t k = 0; k < n && off < sizeof(names); k++)
                    off += (size_t)snprintf(names + off, sizeof(names) - off,
                                            "%s%s", k ? "," : "", list[k]);
            }
            for (size_t k = 0; k < n; k++) {
                if (reported[widx[k]])
                    continue;
                reported[widx[k]] = 1;
                last_inert(
                    a,
                    finding(
                        a, "IST0109", RES_ERROR, who[k], NULL, "metadata.name",
                        "The VirtualServices %s associated with mesh gateway "
                        "define the same host */%s which can lead to "
                        "undefined behavior. This can be fixed by merging "
                        "the conflicting VirtualServices into a single "
                        "resource.",
                        names, fq));
            }
        }
    }
    free(reported);
}

/* IST0140: a gateway's route to a host without a subset, where another
 * VirtualService of that host routes by subsets: the subsets have no
 * effect on the gateway's requests. */
static void check_ingress_subsets(struct actx *a, const struct resource *r,
                                  const struct res_virtual_service *vs)
{
    if (vs->gateways.n == 0)
        return;
    for (size_t i = 0; i < vs->http.n; i++) {
        const struct res_http_route *h =
            (const struct res_http_route *)vs->http.v + i;
        for (size_t d = 0; d < h->route.n; d++) {
            const struct res_destination *dst =
                &((const struct res_route_dest *)h->route.v + d)->destination;
            const struct ivec *same;
            char p[300];
            if (dst->host == NULL || (dst->subset && dst->subset[0]))
                continue;
            res_path(p, sizeof(p), "spec.http[%zu].route[%zu].destination.host",
                     i, d);
            same = index_get(&a->subset_vs, dst->host, 0);
            for (size_t o = 0; same != NULL && o < same->n; o++) {
                const struct resource * or = a->set->v[same->v[o]];
                finding(a, "IST0140", RES_WARNING, r, &dst->mark, p,
                        "Subset in virtual service %s/%s has no effect on "
                        "ingress gateway %s/%s requests",
                        or->meta.ns, or->meta.name, r->meta.ns, r->meta.name);
            }
        }
    }
}

/* A header name that routes on a JWT claim, as Istio reads it. */
static int jwt_claim_key(const char *k)
{
    return strncmp(k, "@request.auth.claims.", 21) == 0 ||
           strncmp(k, "@request.auth.claims[", 21) == 0;
}

/* IST0149: routing on a JWT claim at a Gateway this node is, without a
 * RequestAuthentication for the node to validate the token. */
static void check_jwt_claim_routes(struct actx *a, const struct resource *r,
                                   const struct res_virtual_service *vs)
{
    const char *key = NULL;
    const struct analysis_node *node = a->node;

    if (node == NULL || node->labels == NULL)
        return;
    for (size_t i = 0; i < vs->http.n && key == NULL; i++) {
        const struct res_http_route *h =
            (const struct res_http_route *)vs->http.v + i;
        for (size_t j = 0; j < h->match.n && key == NULL; j++) {
            const struct res_http_match *m =
                (const struct res_http_match *)h->match.v + j;
            for (size_t k = 0; k < m->headers.n && key == NULL; k++)
                if (jwt_claim_key(m->headers.keys[k]))
                    key = m->headers.keys[k];
            for (size_t k = 0; k < m->without_headers.n && key == NULL; k++)
                if (jwt_claim_key(m->without_headers.keys[k]))
                    key = m->without_headers.keys[k];
        }
    }
    if (key == NULL)
        return;
    for (size_t g = 0; g < vs->gateways.n; g++) {
        const struct resource *gr;
        int authn = 0;
        if (strcmp(vs->gateways.v[g], "mesh") == 0 ||
            (gr = find_gateway(a, r, vs->gateways.v[g])) == NULL ||
            !res_labels_match(&res_gateway(gr)->selector, node->labels))
            continue;
        for (size_t i = 0; i < a->set->n && !authn; i++) {
            const struct resource *ra = a->set->v[i];
            if (ra->kind != RES_REQUEST_AUTHENTICATION ||
                (strcmp(ra->meta.ns,
                        node->root_ns ? node->root_ns : "istio-system") != 0 &&
                 (node->ns == NULL || strcmp(ra->meta.ns, node->ns) != 0)))
                continue;
            authn = res_labels_match(
                &res_request_authentication(ra)->selector.match_labels,
                node->labels);
        }
        if (!authn)
            finding(a, "IST0149", RES_ERROR, r, NULL, "spec.gateways",
                    "The virtual service uses the JWT claim based routing "
                    "(key: %s) but found no request authentication for the "
                    "gateway (%s/%s) pod (%s). The request authentication "
                    "must first be applied for the gateway pods to validate "
                    "the JWT token and make the claims available for "
                    "routing.",
                    key, gr->meta.ns, gr->meta.name,
                    node->name ? node->name : "");
    }
}

/* The client TLS a traffic policy sets for port (0: any), its
 * portLevelSettings entry for the port winning; *t is left alone when
 * neither sets it. */
static void policy_tls(const struct res_traffic_policy *tp, int64_t port,
                       const struct res_client_tls **t)
{
    if (tp->tls.mark.line > 0)
        *t = &tp->tls;
    for (size_t i = 0; port > 0 && i < tp->port_level_settings.n; i++) {
        const struct res_port_policy *pp =
            (const struct res_port_policy *)tp->port_level_settings.v + i;
        if (pp->port.number == port && pp->tls.mark.line > 0)
            *t = &pp->tls;
    }
}

/*
 * A tls route sends the client's TLS stream untouched (PASSTHROUGH); when
 * its destination's DestinationRule asks for TLS, strait, as Istio does,
 * sends that stream inside the TLS it originates, which only a
 * destination that terminates the outer layer understands. Said, since it
 * is an easy way to break a passthrough route without noticing.
 */
static void check_passthrough_tls(struct actx *a, const struct resource *r,
                                  const struct res_destination *d,
                                  const char *path)
{
    static const char *const modes[] = {"DISABLE", "SIMPLE", "MUTUAL",
                                        "ISTIO_MUTUAL"};
    const struct res_client_tls *t = NULL;
    const struct res_destination_rule *spec;
    const struct resource *dr;
    char h[HOST_MAX];

    if (d->host == NULL)
        return;
    fqdn(a, r, d->host, h);
    if ((dr = dr_for(a, h)) == NULL)
        return;
    spec = res_destination_rule(dr);
    policy_tls(&spec->traffic_policy, d->port.number, &t);
    for (size_t i = 0; d->subset != NULL && i < spec->subsets.n; i++) {
        const struct res_subset *sub =
            (const struct res_subset *)spec->subsets.v + i;
        if (strcmp(sub->name, d->subset) == 0)
            policy_tls(&sub->traffic_policy, d->port.number, &t);
    }
    if (t == NULL || t->mode <= RES_TLS_DISABLE ||
        t->mode > RES_TLS_ISTIO_MUTUAL)
        return;
    finding(a, "STR0002", RES_WARNING, r, &d->mark, path,
            "DestinationRule %s/%s sets tls mode %s for \"%s\": the "
            "client's TLS stream of this tls route is sent inside TLS "
            "originated to the destination, which must terminate it (as in "
            "Istio); tls mode DISABLE relays the stream as it is",
            dr->meta.ns, dr->meta.name, modes[t->mode], d->host);
}

static void mesh_only_text(char *out, size_t n,
                           const struct res_virtual_service *vs)
{
    snprintf(out, n,
             "VirtualService bound only to mesh%s: sidecars use it, a "
             "gateway ignores it (bind it to a Gateway in spec.gateways "
             "for strait to serve it)",
             vs->gateways.n ? "" : " (no gateways)");
}

static void analyze_vs(struct actx *a, const struct resource *r)
{
    const struct res_virtual_service *vs = res_virtual_service(r);
    char p[300];

    if (vs_mesh_only(vs)) {
        char text[512];
        mesh_only_text(text, sizeof(text), vs);
        finding(a, "STR0001", RES_INFO, r, NULL,
                vs->gateways.n ? "spec.gateways" : "spec", "%s", text);
        for (size_t i = 0; i < vs->http.n; i++) {
            const struct res_http_route *h =
                (const struct res_http_route *)vs->http.v + i;
            res_path(p, sizeof(p), "spec.http[%zu]", i);
            check_weights(a, r, &h->route, &h->mark, p);
        }
        for (int t = 0; t < 2; t++) {
            const struct conf_list *rules = t == 0 ? &vs->tls : &vs->tcp;
            for (size_t i = 0; i < rules->n; i++) {
                const struct res_l4_route *l =
                    (const struct res_l4_route *)rules->v + i;
                res_path(p, sizeof(p), "spec.%s[%zu]", t == 0 ? "tls" : "tcp",
                         i);
                check_weights(a, r, &l->route, &l->mark, p);
            }
        }
        return;
    }
    check_gateway_refs(a, r, &vs->gateways, NULL, "spec.gateways");
    for (size_t i = 0; i < vs->http.n; i++) {
        const struct res_http_route *h =
            (const struct res_http_route *)vs->http.v + i;
        res_path(p, sizeof(p), "spec.http[%zu]", i);
        if (http_rule_mesh_only(vs, h)) {
            rule_ignored(a, r, &h->mark, p);
            check_weights(a, r, &h->route, &h->mark, p);
            continue;
        }
        check_dests(a, r, &h->route, &h->mark, p);
        for (size_t j = 0; j < h->match.n; j++) {
            const struct res_http_match *m =
                (const struct res_http_match *)h->match.v + j;
            char mp[360];
            res_path(mp, sizeof(mp), "%s.match[%zu].gateways", p, j);
            check_gateway_refs(a, r, &m->gateways, &m->mark, mp);
        }
        if (h->mirror.mark.line > 0) {
            res_path(p, sizeof(p), "spec.http[%zu].mirror", i);
            check_destination(a, r, &h->mirror, p);
        }
        if (h->delegate.mark.line > 0 && h->delegate.name != NULL &&
            resource_find(a->set, RES_VIRTUAL_SERVICE,
                          h->delegate.ns ? h->delegate.ns : r->meta.ns,
                          h->delegate.name) == NULL) {
            res_path(p, sizeof(p), "spec.http[%zu].delegate", i);
            finding(a, "IST0101", RES_ERROR, r, &h->delegate.mark, p,
                    "Referenced delegate VirtualService not found: \"%s\"",
                    h->delegate.name);
        }
    }
    for (int t = 0; t < 2; t++) {
        const struct conf_list *rules = t == 0 ? &vs->tls : &vs->tcp;
        for (size_t i = 0; i < rules->n; i++) {
            const struct res_l4_route *l =
                (const struct res_l4_route *)rules->v + i;
            res_path(p, sizeof(p), "spec.%s[%zu]", t == 0 ? "tls" : "tcp", i);
            if (l4_rule_mesh_only(vs, l)) {
                rule_ignored(a, r, &l->mark, p);
                check_weights(a, r, &l->route, &l->mark, p);
                continue;
            }
            check_dests(a, r, &l->route, &l->mark, p);
            for (size_t j = 0; t == 0 && j < l->route.n; j++) {
                char dp[360];
                res_path(dp, sizeof(dp), "%s.route[%zu].destination", p, j);
                check_passthrough_tls(
                    a, r,
                    &((const struct res_route_dest *)l->route.v + j)
                         ->destination,
                    dp);
            }
            for (size_t j = 0; j < l->match.n; j++) {
                const struct res_l4_match *m =
                    (const struct res_l4_match *)l->match.v + j;
                char mp[360];
                res_path(mp, sizeof(mp), "%s.match[%zu].gateways", p, j);
                check_gateway_refs(a, r, &m->gateways, &m->mark, mp);
            }
        }
    }
    for (int k = 0; k < 3; k++)
        check_rules(a, r, vs, k);
    check_vs_hosts_in_gateways(a, r, vs);
    check_ingress_subsets(a, r, vs);
    check_jwt_claim_routes(a, r, vs);
    for (size_t i = 0; i < vs->http.n; i++) {
        const struct res_http_route *h =
            (const struct res_http_route *)vs->http.v + i;
        if (h->fault.delay.percent > 0) {
            res_path(p, sizeof(p), "spec.http[%zu].fault.delay.percent", i);
            finding(a, "IST0002", RES_WARNING, r, &h->fault.delay.mark, p,
                    "Deprecated: HTTPRoute.fault.delay.percent is deprecated; "
                    "use HTTPRoute.fault.delay.percentage");
        }
    }
}

/* ---- Gateway ---------------------------------------------------------------
 */

static int same_labels(const struct conf_strmap *x, const struct conf_strmap *y)
{
    return x->n == y->n && res_labels_match(x, y);
}

/* How a server's connections are told apart on a port: 'H' plaintext
 * HTTP, 'T' plaintext TCP, 'S' TLS (HTTPS or TLS: by SNI), 0 neither. */
static int port_kind(const struct res_gw_server *s)
{
    switch (s->port.protocol) {
    case RES_PROTO_HTTP:
    case RES_PROTO_HTTP2:
    case RES_PROTO_GRPC:
        return 'H';
    case RES_PROTO_TCP:
    case RES_PROTO_MONGO:
    case RES_PROTO_MYSQL:
    case RES_PROTO_REDIS:
        return 'T';
    case RES_PROTO_HTTPS:
    case RES_PROTO_TLS:
        return 'S';
    default:
        return 0;
    }
}

/* Whether strait serves it with its TCP/TLS listener (tcp and tls
 * routes) rather than its HTTP one. */
static int served_l4(const struct res_gw_server *s)
{
    int k = port_kind(s);

    if (k == 'S')
        return s->port.protocol != RES_PROTO_HTTPS ||
               s->tls.mode == RES_GW_TLS_PASSTHROUGH ||
               s->tls.mode == RES_GW_TLS_AUTO_PASSTHROUGH;
    return k == 'T';
}

/* What one port holds so far, as istio_gateways() merges its servers. */
struct port_state {
    int n;
    int l4, secure, shared;
    const struct resource *first; /* the Gateway of its first server */
};

enum { PORT_OK, PORT_SKIPPED, PORT_REFUSED };

/* port_admit() adds s to the port as the running gateway does: HTTPS and
 * TLS servers share by SNI; a plaintext server of the other kind is
 * skipped (as Istio skips it); plaintext and TLS of one kind refuse the
 * Gateways. */
static int port_admit(struct port_state *ps, const struct resource *r,
                      const struct res_gw_server *s)
{
    int l4 = served_l4(s), secure = port_kind(s) == 'S';

    if (port_kind(s) == 0)
        return PORT_OK;
    if (ps->n++ == 0) {
        ps->l4 = l4;
        ps->secure = secure;
        ps->first = r;
        return PORT_OK;
    }
    if (ps->l4 != l4 && !(ps->secure && secure)) {
        ps->n--;
        return PORT_SKIPPED;
    }
    if (ps->l4 != l4) {
        ps->l4 = 1;
        ps->shared = 1;
        return PORT_OK;
    }
    return ps->secure != secure ? PORT_REFUSED : PORT_OK;
}

static const char *kind_name(int l4, int secure)
{
    if (l4)
        return secure ? "TLS" : "plaintext TCP";
    return secure ? "HTTPS" : "plaintext HTTP";
}

static int same_port(const struct res_gw_server *x,
                     const struct res_gw_server *y)
{
    return x->port.number == y->port.number &&
           strcmp(x->bind ? x->bind : "", y->bind ? y->bind : "") == 0;
}

/*
 * Servers on one port (and bind) share it when the gateway can tell their
 * connections apart: HTTP servers by Host, TLS servers (HTTPS and TLS,
 * passthrough or terminated) by SNI. A plaintext HTTP server and a TCP
 * server cannot be: as Istio does, the later one is not served (STR0006,
 * a Warning). Plaintext beside TLS servers served the same way (HTTP and
 * HTTPS, TCP and TLS) is refused at load (STR0007, an Error). These are
 * strait's own codes: Istio's IST0145 ConflictingGateways is another
 * condition (one host on one port and selector, check_conflicts()), and
 * istioctl has no message for these.
 */
static void check_port_sharing(struct actx *a, const struct resource *r,
                               const struct res_gw_server *srv, size_t s,
                               const char *path)
{
    const struct res_gateway *gw = res_gateway(r);
    struct port_state ps;
    int rc;

    if (port_kind(srv) == 0)
        return;
    memset(&ps, 0, sizeof(ps));
    /* The servers before it on the port: earlier Gateways of the same
     * selector, then its own Gateway's. */
    for (size_t o = 0; o < a->set->n; o++) {
        const struct resource * or = a->set->v[o];
        const struct res_gateway *ogw;
        if (or->kind != RES_GATEWAY)
            continue;
        ogw = res_gateway(or);
        if (or != r && !same_labels(&gw->selector, &ogw->selector))
            continue;
        for (size_t os = 0; os < ogw->servers.n; os++) {
            const struct res_gw_server *osrv =
                (const struct res_gw_server *)ogw->servers.v + os;
            if (or == r && os >= s)
                break;
            if (same_port(osrv, srv))
                port_admit(&ps, or, osrv);
        }
        if (or == r)
            break;
    }
    if (ps.n == 0)
        return;
    {
        struct port_state before = ps;
        int l4 = served_l4(srv), secure = port_kind(srv) == 'S';
        rc = port_admit(&ps, r, srv);
        if (rc == PORT_OK)
            return;
        finding(a, rc == PORT_REFUSED ? "STR0007" : "STR0006",
                rc == PORT_REFUSED ? RES_ERROR : RES_WARNING, r,
                &srv->port.mark, path,
                "port %lld: this %s server cannot share the port with the "
                "%s servers before it (Gateway %s/%s) (%s); %s",
                (long long)srv->port.number, kind_name(l4, secure),
                before.shared ? "HTTPS and TLS"
                              : kind_name(before.l4, before.secure),
                before.first->meta.ns, before.first->meta.name,
                !secure && !before.secure
                    ? "in plaintext no SNI tells their connections apart"
                    : "a port is either plaintext or TLS",
                rc == PORT_REFUSED ? "the Gateways are refused"
                                   : "it is not served, as Istio skips it");
    }
}

/* ---- CRL files
 * --------------------------------------------------------------- */

/*
 * A caCrl file is read and checked as strait will load it (tls/crl.h):
 * PEM CRLs only, none past its nextUpdate, each signed by the CA of its
 * issuer's name in caCertificates when that file is readable. An
 * unreadable file is only a warning here, since `strait check` may run
 * where the files are not; loading it is an error.
 */
static void check_crl_file(struct actx *a, const struct resource *r,
                           const struct conf_mark *mark, const char *path,
                           const char *crl, const char *ca)
{
    STACK_OF(X509_CRL) *crls = NULL;
    X509_STORE *store = NULL;
    uint8_t *data = NULL;
    char *why = NULL;
    size_t n;
    int rc;

    if (crl == NULL || crl[0] == '\0')
        return;
    rc = crl_read_file(crl, &data, &n, &why);
    if (rc == -1) {
        /* check may run on another machine than the gateway. */
        finding(a, "STR0002", RES_WARNING, r, mark, path,
                "caCrl %s; strait refuses to load the configuration "
                "without it",
                why);
        free(why);
        return;
    }
    if (rc < 0) {
        finding(a, "IST0106", RES_ERROR, r, mark, path, "caCrl %s", why);
        free(why);
        return;
    }
    crls = crl_parse(data, n, &why);
    free(data);
    if (crls != NULL && ca != NULL && ca[0] != '\0') {
        store = X509_STORE_new();
        /* Without the CA file here, the signatures wait for the load. */
        if (store != NULL && !X509_STORE_load_locations(store, ca, NULL)) {
            X509_STORE_free(store);
            store = NULL;
        }
        ERR_clear_error();
    }
    if (crls != NULL)
        crl_check(crls, store, time(NULL), &why);
    if (why != NULL)
        finding(a, "IST0106", RES_ERROR, r, mark, path, "caCrl %s: %s", crl,
                why);
    free(why);
    X509_STORE_free(store);
    sk_X509_CRL_pop_free(crls, X509_CRL_free);
}

static void check_client_tls_crl(struct actx *a, const struct resource *r,
                                 const struct res_client_tls *t,
                                 const char *path)
{
    char p[160];

    if (t->ca_crl == NULL ||
        (t->mode != RES_TLS_SIMPLE && t->mode != RES_TLS_MUTUAL) ||
        t->insecure_skip_verify)
        return;
    res_path(p, sizeof(p), "%s.tls.caCrl", path);
    check_crl_file(a, r, &t->mark, p, t->ca_crl, t->ca_certificates);
}

static void check_policy_crls(struct actx *a, const struct resource *r,
                              const struct res_traffic_policy *tp,
                              const char *path)
{
    char p[128];

    check_client_tls_crl(a, r, &tp->tls, path);
    for (size_t i = 0; i < tp->port_level_settings.n; i++) {
        const struct res_port_policy *pp =
            (const struct res_port_policy *)tp->port_level_settings.v + i;
        res_path(p, sizeof(p), "%s.portLevelSettings[%zu]", path, i);
        check_client_tls_crl(a, r, &pp->tls, p);
    }
}

/* "k=v,k2=v2", keys sorted: a selector as Kubernetes prints it. */
static void selector_text(char *out, size_t n, const struct conf_strmap *m)
{
    const char *keys[64];
    size_t nk = m->n < 64 ? m->n : 64, off = 0;

    out[0] = '\0';
    for (size_t i = 0; i < nk; i++)
        keys[i] = m->v[i].key;
    qsort(keys, nk, sizeof(*keys), cmp_str);
    for (size_t i = 0; i < nk && off < n; i++)
        off += (size_t)snprintf(out + off, n - off, "%s%s=%s", i ? "," : "",
                                keys[i], label_of(m, keys[i]));
}

/*
 * IST0145 as Istio's ConflictingGatewayAnalyzer: a server of this
 * Gateway and one of another Gateway with the same selector, on the same
 * port, share a host written the same way and the same bind. Reported on
 * every Gateway of the conflict.
 */
static void check_conflicts(struct actx *a, const struct resource *r,
                            const struct res_gw_server *srv, const char *path)
{
    const struct res_gateway *gw = res_gateway(r);
    const char *names[64];
    char bufs[64][520], sel[1024], hosts[1024], list[4096];
    size_t n = 0, off = 0;

    for (size_t o = 0; o < a->set->n && n < 64; o++) {
        const struct resource * or = a->set->v[o];
        const struct res_gateway *ogw;
        int hit = 0;
        if (or->kind != RES_GATEWAY || or == r)
            continue;
        ogw = res_gateway(or);
        if (!same_labels(&gw->selector, &ogw->selector))
            continue;
        for (size_t os = 0; os < ogw->servers.n && !hit; os++) {
            const struct res_gw_server *osrv =
                (const struct res_gw_server *)ogw->servers.v + os;
            if (osrv->port.number != srv->port.number ||
                strcmp(osrv->bind ? osrv->bind : "",
                       srv->bind ? srv->bind : "") != 0)
                continue;
            for (size_t i = 0; i < srv->hosts.n && !hit; i++)
                for (size_t j = 0; j < osrv->hosts.n && !hit; j++)
                    hit = strcmp(srv->hosts.v[i], osrv->hosts.v[j]) == 0;
        }
        if (!hit)
            continue;
        snprintf(bufs[n], sizeof(bufs[n]), "%s/%s", or->meta.ns, or->meta.name);
        names[n] = bufs[n];
        n++;
    }
    if (n == 0)
        return;
    qsort(names, n, sizeof(*names), cmp_str);
    list[0] = '\0';
    for (size_t i = 0; i < n && off < sizeof(list); i++)
        off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s",
                                i ? "," : "", names[i]);
    selector_text(sel, sizeof(sel), &gw->selector);
    off = 0;
    hosts[0] = '\0';
    for (size_t i = 0; i < srv->hosts.n && off < sizeof(hosts); i++)
        off += (size_t)snprintf(hosts + off, sizeof(hosts) - off, "%s%s",
                                i ? "," : "", srv->hosts.v[i]);
    finding(a, "IST0145", RES_ERROR, r, &srv->mark, path,
            "Conflict with gateways %s (workload selector %s, port %lld, "
            "hosts %s).",
            list, sel, (long long)srv->port.number, hosts);
}

/* Istio's haveSameCertificate. */
static int same_cert(const struct res_gw_tls *x, const struct res_gw_tls *y)
{
    const char *cx = x->credential_name ? x->credential_name : "";
    const char *cy = y->credential_name ? y->credential_name : "";

    if (cx[0] && cy[0])
        return strcmp(cx, cy) == 0;
    if (cx[0] || cy[0])
        return 0;
    return x->server_certificate && y->server_certificate &&
           x->server_certificate[0] &&
           strcmp(x->server_certificate, y->server_certificate) == 0 &&
           x->private_key && y->private_key && x->private_key[0] &&
           y->private_key[0] && strcmp(x->private_key, y->private_key) == 0;
}

/* Every selector label of x is in y with the same value (Istio's
 * selectorSubset; an empty x selects every Gateway). */
static int selector_subset(const struct conf_strmap *x,
                           const struct conf_strmap *y)
{
    return res_labels_match(x, y);
}

/* IST0138: the same certificate on servers of two Gateways. */
static void check_duplicate_certs(struct actx *a, const struct resource *r)
{
    const struct res_gateway *gw = res_gateway(r);

    for (size_t o = 0; o < a->set->n; o++) {
        const struct resource * or = a->set->v[o];
        const struct res_gateway *ogw;
        if (or->kind != RES_GATEWAY || or == r)
            continue;
        ogw = res_gateway(or);
        if (gw->selector.n > 0 &&
            !selector_subset(&gw->selector, &ogw->selector))
            continue;
        for (size_t s = 0; s < gw->servers.n; s++) {
            const struct res_gw_server *x =
                (const struct res_gw_server *)gw->servers.v + s;
            for (size_t t = 0; t < ogw->servers.n; t++) {
                const struct res_gw_server *y =
                    (const struct res_gw_server *)ogw->servers.v + t;
                if (x->tls.mark.line == 0 || y->tls.mark.line == 0 ||
                    !same_cert(&x->tls, &y->tls))
                    continue;
                finding(a, "IST0138", RES_WARNING, r, NULL, "metadata.name",
                        "Duplicate certificate in multiple gateways [%s/%s "
                        "%s/%s] may cause 404s if clients re-use HTTP2 "
                        "connections.",
                        r->meta.ns, r->meta.name, or->meta.ns, or->meta.name);
            }
        }
    }
}

/* credential_ok() is true when dir/name holds a tls.crt that parses and
 * is valid now and a tls.key that matches it, as strait loads them. */
static int credential_ok(const char *dir, const char *name)
{
    char path[1024];
    FILE *f;
    X509 *cert = NULL;
    EVP_PKEY *key = NULL;
    int ok = 0;

    snprintf(path, sizeof(path), "%s/%s/tls.crt", dir, name);
    if ((f = fopen(path, "r")) != NULL) {
        cert = PEM_read_X509(f, NULL, NULL, NULL);
        fclose(f);
    }
    snprintf(path, sizeof(path), "%s/%s/tls.key", dir, name);
    if ((f = fopen(path, "r")) != NULL) {
        key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
        fclose(f);
    }
    if (cert != NULL && key != NULL &&
        X509_cmp_current_time(X509_get0_notAfter(cert)) > 0 &&
        X509_cmp_current_time(X509_get0_notBefore(cert)) < 0 &&
        X509_check_private_key(cert, key) == 1)
        ok = 1;
    ERR_clear_error();
    X509_free(cert);
    EVP_PKEY_free(key);
    return ok;
}

/*
 * With the node's credentials directory known, as Istio's SecretAnalyzer
 * checks a credentialName's Secret: none there is IST0101; a cert or key
 * missing, unreadable, not valid now, or not a pair is IST0161.
 */
/* secret_ok() is credential_ok() for a Secret's tls.crt and tls.key. */
static int secret_ok(const struct res_k8s_secret *s)
{
    BIO *bc = NULL, *bk = NULL;
    X509 *cert = NULL;
    EVP_PKEY *key = NULL;
    int ok = 0;

    if (s->val[RES_SECRET_CERT] == NULL || s->val[RES_SECRET_KEY] == NULL)
        return 0;
    bc = BIO_new_mem_buf(s->val[RES_SECRET_CERT], (int)s->len[RES_SECRET_CERT]);
    bk = BIO_new_mem_buf(s->val[RES_SECRET_KEY], (int)s->len[RES_SECRET_KEY]);
    if (bc != NULL && bk != NULL) {
        cert = PEM_read_bio_X509(bc, NULL, NULL, NULL);
        key = PEM_read_bio_PrivateKey(bk, NULL, NULL, NULL);
    }
    if (cert != NULL && key != NULL &&
        X509_cmp_current_time(X509_get0_notAfter(cert)) > 0 &&
        X509_cmp_current_time(X509_get0_notBefore(cert)) < 0 &&
        X509_check_private_key(cert, key) == 1)
        ok = 1;
    ERR_clear_error();
    X509_free(cert);
    EVP_PKEY_free(key);
    BIO_free(bc);
    BIO_free(bk);
    return ok;
}

static void check_credentials(struct actx *a, const struct resource *r,
                              const struct res_gw_server *srv, const char *path)
{
    const char *dir = a->node ? a->node->credentials_dir : NULL;
    const char *name = srv->tls.credential_name;
    const struct resource *sec;
    char d[1024], p[128];
    FILE *f;

    if (a->node == NULL || name == NULL || name[0] == '\0')
        return;
    res_path(p, sizeof(p), "%s.tls.credentialName", path);
    /* A Secret of the gateway's namespace is the credential, before the
     * directory (the gateway reads it so). */
    sec = res_k8s_find_secret(a->set, a->node->ns ? a->node->ns : r->meta.ns,
                              name);
    if (sec != NULL) {
        if (!secret_ok(res_k8s_secret(sec)))
            finding(a, "IST0161", RES_ERROR, r, &srv->tls.mark, p,
                    "The credential referenced by the Gateway %s in "
                    "namespace %s is invalid, which can cause the traffic "
                    "not to work as expected.",
                    r->meta.name, a->node->ns ? a->node->ns : r->meta.ns);
        return;
    }
    /* Neither a Secret nor a credentials directory: the gateway has
     * nowhere to read it from. */
    if (dir == NULL || dir[0] == '\0') {
        finding(a, "IST0101", RES_ERROR, r, &srv->tls.mark, p,
                "Referenced credentialName not found: \"%s\"", name);
        return;
    }
    snprintf(d, sizeof(d), "%s/%s", dir, name);
    if ((f = fopen(d, "r")) == NULL) {
        finding(a, "IST0101", RES_ERROR, r, &srv->tls.mark, p,
                "Referenced credentialName not found: \"%s\"", name);
        return;
    }
    fclose(f);
    if (!credential_ok(dir, name))
        finding(a, "IST0161", RES_ERROR, r, &srv->tls.mark, p,
                "The credential referenced by the Gateway %s in namespace %s "
                "is invalid, which can cause the traffic not to work as "
                "expected.",
                r->meta.name, a->node->ns ? a->node->ns : r->meta.ns);
}

/*
 * IST0162 as Istio's IngressGatewayPortAnalyzer, with this node as the
 * gateway's workload: the TCP ports of the Kubernetes Services of the
 * node's namespace whose selector matches the node's labels, each by its
 * targetPort when that is a number, else its port, are what the gateway
 * is reached on; a server port outside them is reported. A server port
 * that is one of those Services' ports (80 of 80 -> 8080) is translated,
 * as istiod does: it listens on the targetPort, said as an Info
 * (STR0012). The node's Service is node.service when set. Without such a
 * Service (a VM with nothing in front of it) there is nothing to compare
 * with, and nothing is said, where Istio, which always has the Service,
 * would report every port.
 */
static void check_service_ports(struct actx *a, const struct resource *r)
{
    const struct res_gateway *gw = res_gateway(r);
    int64_t ports[1024];
    size_t np = 0, nsvc = 0;
    char sel[1024];

    if (a->node == NULL || a->node->labels == NULL ||
        !res_labels_match(&gw->selector, a->node->labels))
        return;
    for (size_t i = 0; i < a->set->n; i++) {
        const struct resource *o = a->set->v[i];
        const struct res_k8s_service *svc;
        if (o->kind != RES_SERVICE ||
            !res_k8s_own_service(o, a->node->ns ? a->node->ns : "",
                                 a->node->labels, a->node->service))
            continue;
        svc = o->spec;
        nsvc++;
        for (size_t k = 0; k < svc->ports.n && np < 1024; k++) {
            const struct res_k8s_port *sp =
                (const struct res_k8s_port *)svc->ports.v + k;
            if (sp->protocol != RES_K8S_TCP)
                continue;
            ports[np++] =
                sp->target_port.number > 0 ? sp->target_port.number : sp->port;
        }
    }
    if (nsvc == 0)
        return;
    selector_text(sel, sizeof(sel), &gw->selector);
    for (size_t s = 0; s < gw->servers.n; s++) {
        const struct res_gw_server *srv =
            (const struct res_gw_server *)gw->servers.v + s;
        char p[64];
        size_t k;
        const struct resource *by;
        int64_t lp = res_k8s_gateway_port(
            a->set, a->node->ns ? a->node->ns : "", a->node->labels,
            a->node->service, srv->port.number, &by);
        res_path(p, sizeof(p), "spec.servers[%zu].port", s);
        if (by != NULL) {
            /* istiod's port translation: the server is reached through
             * the Service's port, and listens on its targetPort. */
            finding(a, "STR0012", RES_INFO, r, &srv->port.mark, p,
                    "Gateway server port %lld listens on %lld: the "
                    "targetPort of port %lld of the gateway's Service %s/%s "
                    "(as istiod translates it).",
                    (long long)srv->port.number, (long long)lp,
                    (long long)srv->port.number, by->meta.ns, by->meta.name);
            continue;
        }
        for (k = 0; k < np; k++)
            if (ports[k] == srv->port.number)
                break;
        if (k < np)
            continue;
        finding(a, "IST0162", RES_WARNING, r, &srv->port.mark, p,
                "The gateway is listening on a target port (port %lld) that "
                "is not defined in the Service associated with its workload "
                "instances (Pod selector %s). If you need to access the "
                "gateway port through the gateway Service, it will not be "
                "available.",
                (long long)srv->port.number, sel);
    }
}

/* Whether a Gateway is served on node: every label of its selector is one
 * of the node's (an empty selector selects every node). */
static int gateway_selects_node(const struct res_gateway *gw,
                                const struct analysis_node *node)
{
    if (gw->selector.n == 0)
        return 1;
    return node->labels != NULL &&
           res_labels_match(&gw->selector, node->labels);
}

static void analyze_gateway(struct actx *a, size_t idx)
{
    const struct resource *r = a->set->v[idx];
    const struct res_gateway *gw = res_gateway(r);

    /* With the node known, a Gateway whose selector the node's labels do
     * not match is not served here: Istio's "selector" not found. */
    if (a->node != NULL && !gateway_selects_node(gw, a->node)) {
        char sel[1024];
        selector_text(sel, sizeof(sel), &gw->selector);
        finding(a, "IST0101", RES_ERROR, r, NULL, "spec.selector",
                "Referenced selector not found: \"%s\"", sel);
    }
    for (size_t s = 0; s < gw->servers.n; s++) {
        const struct res_gw_server *srv =
            (const struct res_gw_server *)gw->servers.v + s;
        char p[64];
        res_path(p, sizeof(p), "spec.servers[%zu]", s);
        check_port_sharing(a, r, srv, s, p);
        if (srv->tls.mode == RES_GW_TLS_MUTUAL ||
            srv->tls.mode == RES_GW_TLS_OPTIONAL_MUTUAL) {
            char cp[96];
            res_path(cp, sizeof(cp), "%s.tls.caCrl", p);
            check_crl_file(a, r, &srv->tls.mark, cp, srv->tls.ca_crl,
                           srv->tls.ca_certificates);
        }
        check_conflicts(a, r, srv, p);
        check_credentials(a, r, srv, p);
    }
    check_duplicate_certs(a, r);
    check_service_ports(a, r);
}

/* ---- DestinationRule
 * --------------------------------------------------------- */

/* endpoint_labels_match() is true when some endpoint of the services
 * named by host (full) carries every label of sel. */
static int svc_selected(const struct actx *a, const struct svc *s,
                        const struct conf_strmap *sel);

static int endpoint_selected(const struct actx *a, const char *host,
                             const struct conf_strmap *sel)
{
    const struct ivec *exact;

    /* An exact host intersects the services of that name and the
     * wildcards that cover it; a wildcard host may intersect any. */
    if (host_pattern_kind(host) != HOST_EXACT) {
        for (size_t i = 0; i < a->nsvc; i++)
            if (host_intersect(a->svcs[i].host, host) &&
                svc_selected(a, &a->svcs[i], sel))
                return 1;
        return 0;
    }
    exact = index_get(&a->svc_exact, host, 1);
    for (size_t i = 0; exact != NULL && i < exact->n; i++)
        if (svc_selected(a, &a->svcs[exact->v[i]], sel))
            return 1;
    for (size_t i = 0; i < a->svc_wild.n; i++) {
        const struct svc *s = &a->svcs[a->svc_wild.v[i]];
        if (host_covers(s->host, host) && svc_selected(a, s, sel))
            return 1;
    }
    return 0;
}

/* svc_selected() is true when an endpoint of the service s carries every
 * label of sel. */
static int svc_selected(const struct actx *a, const struct svc *s,
                        const struct conf_strmap *sel)
{
    if (s->we != NULL &&
        res_labels_match(sel, &res_workload_entry(s->we)->labels))
        return 1;
    if (s->se != NULL) {
        const struct res_service_entry *se = res_service_entry(s->se);
        for (size_t e = 0; e < se->endpoints.n; e++)
            if (res_labels_match(
                    sel,
                    &((const struct res_workload_entry *)se->endpoints.v)[e]
                         .labels))
                return 1;
        if (se->workload_selector.mark.line > 0) {
            for (size_t w = 0; w < a->set->n; w++) {
                const struct resource *wr = a->set->v[w];
                const struct res_workload_entry *we;
                if (wr->kind != RES_WORKLOAD_ENTRY ||
                    strcmp(wr->meta.ns, s->se->meta.ns) != 0)
                    continue;
                we = res_workload_entry(wr);
                if (res_labels_match(&se->workload_selector.labels,
                                     &we->labels) &&
                    res_labels_match(sel, &we->labels))
                    return 1;
            }
        }
        /* DNS-resolved entries without endpoints have no labels to
         * select by: only an empty selector selects them. */
        if (se->endpoints.n == 0 && se->workload_selector.mark.line == 0 &&
            sel->n == 0)
            return 1;
    }
    return 0;
}

static const char *client_tls_mode_name(int mode)
{
    static const char *const modes[] = {"DISABLE", "SIMPLE", "MUTUAL",
                                        "ISTIO_MUTUAL"};
    return mode >= 0 && mode < 4 ? modes[mode] : "";
}

/* IST0128/IST0129 as Istio's CaCertificateAnalyzer: TLS origination
 * (SIMPLE, MUTUAL) with no caCertificates to verify the server. */
static void check_ca_certificates(struct actx *a, const struct resource *r,
                                  const struct res_destination_rule *dr)
{
    const struct res_traffic_policy *tp = &dr->traffic_policy;
    int selected = dr->workload_selector.mark.line > 0;

    if ((tp->tls.mode == RES_TLS_SIMPLE || tp->tls.mode == RES_TLS_MUTUAL) &&
        (tp->tls.ca_certificates == NULL || tp->tls.ca_certificates[0] == 0) &&
        !(tp->tls.credential_name && tp->tls.credential_name[0] && selected))
        finding(a, "IST0128", RES_WARNING, r, &tp->tls.mark,
                "spec.trafficPolicy.tls",
                "DestinationRule %s/%s in namespace %s has TLS mode set to %s "
                "but no caCertificates are set to validate server identity "
                "for host: %s",
                r->meta.ns, r->meta.name, r->meta.ns,
                client_tls_mode_name(tp->tls.mode), dr->host);
    for (size_t i = 0; i < tp->port_level_settings.n; i++) {
        const struct res_port_policy *pp =
            (const struct res_port_policy *)tp->port_level_settings.v + i;
        char p[96];
        if ((pp->tls.mode != RES_TLS_SIMPLE &&
             pp->tls.mode != RES_TLS_MUTUAL) ||
            (pp->tls.ca_certificates && pp->tls.ca_certificates[0]) ||
            (pp->tls.credential_name && pp->tls.credential_name[0] && selected))
            continue;
        res_path(p, sizeof(p), "spec.trafficPolicy.portLevelSettings[%zu].tls",
                 i);
        finding(a, "IST0129", RES_WARNING, r, &pp->tls.mark, p,
                "DestinationRule %s/%s in namespace %s has TLS mode set to %s "
                "but no caCertificates are set to validate server identity "
                "for host: %s at port number:%lld",
                r->meta.ns, r->meta.name, r->meta.ns,
                client_tls_mode_name(pp->tls.mode), dr->host,
                (long long)pp->port.number);
    }
}

static void analyze_dr(struct actx *a, const struct resource *r)
{
    const struct res_destination_rule *dr = res_destination_rule(r);
    char h[HOST_MAX], p[64];

    check_ca_certificates(a, r, dr);
    check_policy_crls(a, r, &dr->traffic_policy, "spec.trafficPolicy");
    for (size_t i = 0; i < dr->subsets.n; i++) {
        const struct res_subset *s =
            (const struct res_subset *)dr->subsets.v + i;
        res_path(p, sizeof(p), "spec.subsets[%zu].trafficPolicy", i);
        check_policy_crls(a, r, &s->traffic_policy, p);
    }
    fqdn(a, r, dr->host, h);
    if (!service_known(a, h)) {
        int any = 0;
        for (size_t i = 0; i < a->nsvc && !any; i++)
            any = host_intersect(h, a->svcs[i].host);
        if (!any) {
            finding(a, "IST0174", RES_WARNING, r, NULL, "spec.host",
                    "The host %s defined in the DestinationRule does not "
                    "match any services in the mesh.%s",
                    dr->host,
                    a->outbound_mode == RES_ALLOW_ANY
                        ? " (under outboundTrafficPolicy ALLOW_ANY it "
                          "applies to routes passed through to that host)"
                        : "");
            return;
        }
    }
    for (size_t i = 0; i < dr->subsets.n; i++) {
        const struct res_subset *s =
            (const struct res_subset *)dr->subsets.v + i;
        if (endpoint_selected(a, h, &s->labels))
            continue;
        res_path(p, sizeof(p), "spec.subsets[%zu]", i);
        /* Istio's level is Error; a subset may get endpoints later, and
         * strait sends its requests nowhere meanwhile (503), so it does
         * not refuse a load for it: inert. */
        last_inert(
            a, finding(a, "IST0173", RES_ERROR, r, &s->mark, p,
                       "The Subset %s defined in the DestinationRule does not "
                       "select any pods. Which may lead to 503 UH "
                       "(NoHealthyUpstream).",
                       s->name));
    }
}

/* ---- ServiceEntry ------------------------------------------------------ */

/* IST0177: ServiceEntries that give one host and port different
 * protocols (Istio's ConflictingServiceEntryProtocolAnalyzer). */
/* IST0134, as istioctl: each port of a ServiceEntry without addresses
 * whose protocol is TCP, unset or "" (which strait reads as TCP). */
static void check_se_addresses(struct actx *a, const struct resource *r)
{
    const struct res_service_entry *se = res_service_entry(r);
    char p[64];

    if (se->addresses.n > 0)
        return;
    for (size_t i = 0; i < se->ports.n; i++) {
        const struct res_se_port *port =
            (const struct res_se_port *)se->ports.v + i;
        if (port->protocol != RES_PROTO_TCP)
            continue;
        res_path(p, sizeof(p), "spec.ports[%zu]", i);
        finding(a, "IST0134", RES_WARNING, r, &port->mark, p,
                "ServiceEntry addresses are required for this protocol.");
    }
}

static void check_se_protocols(struct actx *a)
{
    const struct resource_set *set = a->set;
    char *reported = calloc(set->n ? set->n : 1, 1);

    if (reported == NULL)
        return;
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_service_entry *se;
        if (r->kind != RES_SERVICE_ENTRY)
            continue;
        se = res_service_entry(r);
        for (size_t h = 0; h < se->hosts.n; h++) {
            for (size_t pi = 0; pi < se->ports.n; pi++) {
                const struct res_se_port *port =
                    (const struct res_se_port *)se->ports.v + pi;
                const struct resource *who[64];
                const char *names[64], *protos[64];
                char nbuf[64][520], nl[4096], pl[512];
                size_t n = 0, np = 0, off;

                const struct ivec *same =
                    index_get(&a->se_host, se->hosts.v[h], 0);
                size_t widx[64];

                /* same: the ServiceEntries with this host, in set order. */
                for (size_t j = 0; same != NULL && j < same->n && n < 64; j++) {
                    const struct resource *o = set->v[same->v[j]];
                    const struct res_service_entry *ose = res_service_entry(o);
                    for (size_t oh = 0; oh < ose->hosts.n; oh++) {
                        if (strcmp(ose->hosts.v[oh], se->hosts.v[h]) != 0)
                            continue;
                        for (size_t op = 0; op < ose->ports.n; op++) {
                            const struct res_se_port *opp =
                                (const struct res_se_port *)ose->ports.v + op;
                            const char *pn;
                            size_t k;
                            if (opp->number != port->number)
                                continue;
                            pn = res_protocol_name(opp->protocol);
                            for (k = 0; k < np && strcmp(protos[k], pn); k++)
                                ;
                            if (k == np && np < 64)
                                protos[np++] = pn;
                            for (k = 0; k < n && who[k] != o; k++)
                                ;
                            if (k == n) {
                                widx[n] = same->v[j];
                                who[n++] = o;
                            }
                        }
                    }
                }
                if (np < 2 || who[0] != r)
                    continue;
                for (size_t k = 0; k < n; k++) {
                    snprintf(nbuf[k], sizeof(nbuf[k]), "%s/%s", who[k]->meta.ns,
                             who[k]->meta.name);
                    names[k] = nbuf[k];
                }
                qsort(names, n, sizeof(*names), cmp_str);
                qsort(protos, np, sizeof(*protos), cmp_str);
                off = 0;
                nl[0] = '\0';
                for (size_t k = 0; k < n && off < sizeof(nl); k++)
                    off += (size_t)snprintf(nl + off, sizeof(nl) - off, "%s%s",
                                            k ? ", " : "", names[k]);
                off = 0;
                pl[0] = '\0';
                for (size_t k = 0; k < np && off < sizeof(pl); k++)
                    off += (size_t)snprintf(pl + off, sizeof(pl) - off, "%s%s",
                                            k ? ", " : "", protos[k]);
                for (size_t k = 0; k < n; k++) {
                    if (reported[widx[k]])
                        continue;
                    reported[widx[k]] = 1;
                    finding(a, "IST0177", RES_WARNING, who[k], NULL,
                            "metadata.name",
                            "Multiple ServiceEntries (%s) define the same "
                            "host \"%s\" and port %lld with conflicting "
                            "protocols (%s).",
                            nl, se->hosts.v[h], (long long)port->number, pl);
                }
            }
        }
    }
    free(reported);
}

/* ---- this node --------------------------------------------------------- */

/*
 * IST0127 with `strait check -c`: a policy (AuthorizationPolicy,
 * RequestAuthentication, PeerAuthentication) that does not apply to this
 * node, as the running gateway scopes them: one in a namespace that is
 * neither the node's nor the root namespace (path metadata.namespace),
 * or whose selector the node's labels do not match (path spec.selector).
 */
/* The selector of a policy kind the node scopes, or NULL. */
static const struct conf_strmap *policy_selector(const struct resource *r)
{
    if (r->kind == RES_AUTHORIZATION_POLICY)
        return &res_authorization_policy(r)->selector.match_labels;
    if (r->kind == RES_REQUEST_AUTHENTICATION)
        return &res_request_authentication(r)->selector.match_labels;
    if (r->kind == RES_PEER_AUTHENTICATION)
        return &res_peer_authentication(r)->selector.match_labels;
    return NULL;
}

/* IST0127's scope of r on node: RES_SCOPE_APPLIES for a kind it is not
 * about; *sel is the selector when r is a policy. */
static enum res_policy_scope node_scope(const struct resource *r,
                                        const struct analysis_node *node,
                                        const struct conf_strmap **sel)
{
    const char *root = node->root_ns ? node->root_ns : "istio-system";

    if ((*sel = policy_selector(r)) == NULL)
        return RES_SCOPE_APPLIES;
    return res_policy_scope(r, *sel, node->ns, node->labels, root);
}

static void check_node_policies(struct actx *a)
{
    for (size_t i = 0; i < a->set->n; i++) {
        const struct resource *r = a->set->v[i];
        const struct conf_strmap *sel;
        char text[1024];
        enum res_policy_scope scope = node_scope(r, a->node, &sel);
        if (scope == RES_SCOPE_APPLIES)
            continue;
        selector_text(text, sizeof(text), sel);
        finding(a, "IST0127", RES_WARNING, r, NULL,
                scope == RES_SCOPE_OTHER_NAMESPACE ? "metadata.namespace"
                                                   : "spec.selector",
                "No matching workloads for this resource with the "
                "following labels: %s",
                text);
    }
}

/* A running gateway's view of the Gateways its node does not serve: the
 * IST0101 strait check -c reports, at Istio's level (Error) but inert: a
 * running gateway only logs it and never refuses a load for it. */
static void check_node_gateways(struct actx *a)
{
    for (size_t i = 0; i < a->set->n; i++) {
        const struct resource *r = a->set->v[i];
        char sel[1024];

        if (r->kind != RES_GATEWAY ||
            gateway_selects_node(res_gateway(r), a->node))
            continue;
        selector_text(sel, sizeof(sel), &res_gateway(r)->selector);
        last_inert(a, finding(a, "IST0101", RES_ERROR, r, NULL, "spec.selector",
                              "Referenced selector not found: \"%s\"", sel));
    }
}

int analysis_applies(const struct resource *r, const struct analysis_node *node,
                     char *reason, size_t n)
{
    const struct conf_strmap *sel;
    char text[1024];

    if (n > 0)
        reason[0] = '\0';
    if (r->kind == RES_VIRTUAL_SERVICE &&
        vs_mesh_only(res_virtual_service(r))) {
        mesh_only_text(text, sizeof(text), res_virtual_service(r));
        snprintf(reason, n, "STR0001 %s", text);
        return 0;
    }
    if (r->kind == RES_GATEWAY && node != NULL &&
        !gateway_selects_node(res_gateway(r), node)) {
        selector_text(text, sizeof(text), &res_gateway(r)->selector);
        snprintf(reason, n, "IST0101 Referenced selector not found: \"%s\"",
                 text);
        return 0;
    }
    if (node == NULL || node_scope(r, node, &sel) == RES_SCOPE_APPLIES)
        return 1;
    selector_text(text, sizeof(text), sel);
    snprintf(reason, n,
             "IST0127 No matching workloads for this resource with the "
             "following labels: %s",
             text);
    return 0;
}

/* STR0010: a LuaPolicy that targets a Gateway or VirtualService of
 * another namespace without a ReferenceGrant there. An inert Error: the
 * gateway leaves that policy out and loads the rest, so one namespace's
 * mistake never holds back the others' changes. */
static void check_lua_grants(struct actx *a, const struct resource *r)
{
    const struct res_lua_policy *lp = res_lua_policy(r);
    char p[64];

    for (size_t i = 0; i < lp->target_refs.n; i++) {
        const struct res_lua_target_ref *t =
            (const struct res_lua_target_ref *)lp->target_refs.v + i;
        const char *kind =
            t->kind == RES_LUA_REF_GATEWAY ? "Gateway" : "VirtualService";
        if (t->ns == NULL || t->name == NULL ||
            res_lua_target_granted(a->set, r->meta.ns, kind, t->ns, t->name))
            continue;
        snprintf(p, sizeof(p), "spec.targetRefs[%zu]", i);
        last_inert(a, finding(a, "STR0010", RES_ERROR, r, &t->mark, p,
                              "%s %s/%s is in namespace '%s', not the "
                              "policy's '%s', and no ReferenceGrant in '%s' "
                              "lets LuaPolicies of '%s' refer to it; the "
                              "policy is not loaded",
                              kind, t->ns, t->name, t->ns, r->meta.ns, t->ns,
                              r->meta.ns));
    }
}

int analyze_scope(const struct resource_set *set,
                  const struct analysis_node *node, struct analysis *out)
{
    struct actx a;

    memset(out, 0, sizeof(*out));
    memset(&a, 0, sizeof(a));
    a.set = set;
    a.node = node;
    a.msgs = &out->msgs;
    if (node != NULL) {
        check_node_policies(&a);
        check_node_gateways(&a);
    }
    return (int)out->msgs.n;
}

/* ---- entry points
 * -------------------------------------------------------------- */

int analyze(const struct resource_set *set, int outbound_mode,
            struct analysis *out)
{
    return analyze_node(set, outbound_mode, NULL, out);
}

int analyze_node(const struct resource_set *set, int outbound_mode,
                 const struct analysis_node *node, struct analysis *out)
{
    struct actx a;

    memset(out, 0, sizeof(*out));
    memset(&a, 0, sizeof(a));
    a.set = set;
    a.outbound_mode = outbound_mode;
    a.node = node;
    a.msgs = &out->msgs;
    for (size_t i = 0; i < set->msgs.n; i++) {
        const struct res_msg *m = &set->msgs.v[i];
        res_msgs_add(a.msgs, m->code, m->level, m->file, m->line, m->col,
                     m->resource, m->path, "%s", m->message);
        if (a.msgs->n > 0)
            a.msgs->v[a.msgs->n - 1].inert = m->inert;
    }
    strmap_init(&a.svc_exact);
    strmap_init(&a.dr_exact);
    strmap_init(&a.se_host);
    strmap_init(&a.mesh_vs);
    strmap_init(&a.subset_vs);
    collect_services(&a);
    build_indexes(&a);
    if (a.oom) {
        /* Without whole indexes the analysis would miss findings: the
         * set is refused rather than half checked. */
        res_msgs_add(a.msgs, "STR0002", RES_ERROR, "", 0, 0, "", "",
                     "out of memory analysing the configuration");
        indexes_dispose(&a);
        free(a.svcs);
        return (int)out->msgs.nerr;
    }
    check_mesh_hosts(&a);
    check_se_protocols(&a);
    if (node != NULL)
        check_node_policies(&a);
    if (node != NULL && (node->mesh != NULL || node->network != NULL))
        analyze_networks(set, node, a.msgs);
    link_merge_analyze(set, a.msgs);
    if (node != NULL && node->lua_path != NULL)
        res_lua_check_files(set, node->lua_path, node->nlua_path, a.msgs);
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        switch (r->kind) {
        case RES_VIRTUAL_SERVICE:
            analyze_vs(&a, r);
            break;
        case RES_GATEWAY:
            analyze_gateway(&a, i);
            break;
        case RES_DESTINATION_RULE:
            analyze_dr(&a, r);
            break;
        case RES_SERVICE_ENTRY:
            check_se_addresses(&a, r);
            break;
        case RES_LUA_POLICY:
            check_lua_grants(&a, r);
            break;
        default:
            break;
        }
    }
    indexes_dispose(&a);
    free(a.svcs);
    return (int)out->msgs.nerr;
}

void analysis_dispose(struct analysis *a)
{
    res_msgs_dispose(&a->msgs);
}

static const char *level_name(enum res_level l)
{
    return l == RES_ERROR ? "Error" : l == RES_WARNING ? "Warning" : "Info";
}

void analysis_msg_text(struct buf *b, const struct res_msg *m)
{
    buf_printf(b, "%s [%s] (", level_name(m->level), m->code);
    if (m->resource[0] != '\0')
        buf_printf(b, "%s ", m->resource);
    buf_printf(b, "%s:%d:%d) ", m->file, m->line, m->col);
    if (m->path[0] != '\0')
        buf_printf(b, "%s: ", m->path);
    buf_puts(b, m->message);
}

static void print_text(FILE *out, const struct res_msg *m)
{
    struct buf b;

    buf_init(&b, 64 * 1024);
    analysis_msg_text(&b, m);
    fprintf(out, "%s\n", buf_cstr(&b));
    buf_dispose(&b);
}

static void print_json(struct buf *b, const struct res_msg *m)
{
    char lower[16];
    size_t i;

    for (i = 0; m->code[i] != '\0' && i + 1 < sizeof(lower); i++)
        lower[i] = ascii_lower(m->code[i]);
    lower[i] = '\0';
    buf_puts(b, "{\"code\":");
    json_str(b, m->code);
    buf_puts(b, ",\"name\":");
    json_str(b, res_code_name(m->code));
    buf_printf(b, ",\"level\":\"%s\",\"message\":", level_name(m->level));
    json_str(b, m->message);
    buf_puts(b, ",\"origin\":");
    json_str(b, m->resource);
    buf_puts(b, ",\"file\":");
    json_str(b, m->file);
    buf_printf(b, ",\"line\":%d,\"column\":%d,\"path\":", m->line, m->col);
    json_str(b, m->path);
    if (strncmp(m->code, "IST", 3) == 0)
        buf_printf(b,
                   ",\"documentationUrl\":\"https://istio.io/latest/docs/"
                   "reference/config/analysis/%s/\"}",
                   lower);
    else
        buf_puts(b, ",\"documentationUrl\":\"\"}");
}

int resource_check(const char *path, int json, int outbound_mode, FILE *out)
{
    return resource_check_node(path, json, outbound_mode, NULL, out);
}

int resource_check_node(const char *path, int json, int outbound_mode,
                        const struct analysis_node *node, FILE *out)
{
    return resource_check_progress(path, json, outbound_mode, node, NULL, out);
}

int resource_check_progress(const char *path, int json, int outbound_mode,
                            const struct analysis_node *node,
                            const struct res_progress *progress, FILE *out)
{
    struct resource_set *set;
    struct analysis an;
    const struct res_msgs *msgs;
    int nerr = 0;

    memset(&an, 0, sizeof(an));
    set = resource_load_progress(path, node != NULL ? node->default_ns : NULL,
                                 progress, NULL, &nerr);
    if (progress != NULL)
        progress->fn(progress->arg, RES_PROGRESS_ANALYSE, path,
                     set != NULL ? set->nfiles : 0, set != NULL ? set->n : 0);
    if (set == NULL) {
        if (progress != NULL)
            progress->fn(progress->arg, RES_PROGRESS_DONE, path, 0, 0);
        fprintf(out, json ? "[]\n" : "Error: out of memory\n");
        return 1;
    }
    /* As istioctl does, a resource with schema errors is reported and
     * left out (the loader drops it), and the rest is analysed; the exit
     * status still says the set is invalid. */
    nerr = analyze_node(set, outbound_mode, node, &an);
    if (progress != NULL)
        progress->fn(progress->arg, RES_PROGRESS_DONE, path, set->nfiles,
                     set->n);
    msgs = &an.msgs;
    if (json) {
        struct buf b;
        buf_init(&b, SIZE_MAX / 2);
        buf_puts(&b, "[");
        size_t n = 0;
        for (size_t i = 0; i < msgs->n; i++) {
            buf_puts(&b, n++ ? ",\n" : "\n");
            print_json(&b, &msgs->v[i]);
        }
        /* Each Gateway API object's status, as Kubernetes would hold it,
         * as an Info entry of its own (STR0014) with a status member. */
        for (size_t i = 0; i < set->n; i++) {
            const struct resource *r = set->v[i];
            if (r->status == NULL)
                continue;
            buf_puts(&b, n++ ? ",\n" : "\n");
            buf_puts(&b, "{\"code\":\"STR0014\",\"name\":"
                         "\"GatewayAPIStatus\",\"level\":\"Info\","
                         "\"message\":\"status\",\"origin\":");
            buf_printf(&b, "\"%s %s/%s\",\"file\":", res_kind_name(r->kind),
                       r->meta.ns, r->meta.name);
            json_str(&b, r->file);
            buf_printf(&b,
                       ",\"line\":%d,\"column\":%d,\"path\":\"status\","
                       "\"documentationUrl\":\"\",\"status\":%s}",
                       r->line, r->col, r->status);
        }
        buf_puts(&b, n ? "\n]\n" : "]\n");
        fwrite(buf_ptr(&b), 1, buf_len(&b), out);
        buf_dispose(&b);
    } else {
        for (size_t i = 0; i < msgs->n; i++)
            print_text(out, &msgs->v[i]);
        if (msgs->n == 0)
            fprintf(out, "No validation issues found when analyzing %s.\n",
                    path);
    }
    analysis_dispose(&an);
    resource_set_free(set);
    return nerr > 0 ? 1 : 0;
}
