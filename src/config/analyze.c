#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/analyze.h"
#include "config/res-kinds.h"
#include "config/resource.h"
#include "core/ascii.h"
#include "core/buf.h"
#include "core/host.h"
#include "core/json.h"
#include "tls/crl.h"

#define HOST_MAX 600

/* One service the set knows: its full host name (maybe a wildcard) and
 * where it came from. */
struct svc {
    char host[HOST_MAX];
    const struct resource *se; /* the ServiceEntry, or NULL */
    const struct resource *we; /* a WorkloadEntry backing it, or NULL */
};

struct actx {
    const struct resource_set *set;
    int outbound_mode; /* enum res_outbound_mode */
    struct res_msgs *msgs;
    struct svc *svcs;
    size_t nsvc;
    size_t asvc;
};

static const struct {
    const char *code;
    const char *name;
} code_names[] = {
    {"IST0101", "ReferencedResourceNotFound"},
    {"IST0106", "SchemaValidationError"},
    {"IST0130", "VirtualServiceUnreachableRule"},
    {"IST0131", "VirtualServiceIneffectiveMatch"},
    {"IST0132", "VirtualServiceHostNotFoundInGateway"},
    {"IST0145", "ConflictingGateways"},
    {"IST0173", "DestinationRuleSubsetNotSelectPods"},
    {"IST0174", "DestinationRuleHostNotFound"},
};

const char *res_code_name(const char *code)
{
    for (size_t i = 0; i < sizeof(code_names) / sizeof(*code_names); i++)
        if (strcmp(code, code_names[i].code) == 0)
            return code_names[i].name;
    return "";
}

static void ident(char *out, size_t n, const struct resource *r)
{
    snprintf(out, n, "%s %s/%s", res_kind_name(r->kind), r->meta.ns,
             r->meta.name);
}

static void finding(struct actx *a, const char *code, enum res_level level,
                    const struct resource *r, const struct conf_mark *mark,
                    const char *path, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

static void finding(struct actx *a, const char *code, enum res_level level,
                    const struct resource *r, const struct conf_mark *mark,
                    const char *path, const char *fmt, ...)
{
    char text[1024], who[600];
    va_list ap;
    int line = r->line, col = r->col;

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
        if (v == NULL)
            return;
        a->svcs = v;
        a->asvc = n;
    }
    snprintf(a->svcs[a->nsvc].host, HOST_MAX, "%s", host);
    a->svcs[a->nsvc].se = se;
    a->svcs[a->nsvc].we = we;
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
        if (r->kind == RES_SERVICE_ENTRY) {
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

/* service_known() is true when host (full) names a service of the set. */
static int service_known(const struct actx *a, const char *host)
{
    for (size_t i = 0; i < a->nsvc; i++)
        if (host_covers(a->svcs[i].host, host))
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

    for (size_t i = 0; i < a->set->n; i++) {
        const struct resource *r = a->set->v[i];
        const struct res_destination_rule *dr;
        if (r->kind != RES_DESTINATION_RULE)
            continue;
        dr = res_destination_rule(r);
        fqdn(a, r, dr->host, h);
        if (strcasecmp(h, host) == 0)
            return r;
        if (host_covers(h, host) && strlen(h) > best_len) {
            best = r;
            best_len = strlen(h);
        }
    }
    return best;
}

/* ---- VirtualService ---------------------------------------------------- */

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

/*
 * A destination host must be in the registry: a ServiceEntry host or a
 * service a WorkloadEntry stands for (a DestinationRule alone does not
 * declare a host). What an undeclared one is depends on the mesh's
 * outboundTrafficPolicy: under REGISTRY_ONLY an error (it would go to
 * BlackHoleCluster), under ALLOW_ANY a warning (it is passed through to
 * the host name, resolved by DNS), unless it is a wildcard, which names
 * no host to resolve.
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
        finding(a, "IST0101", RES_WARNING, r, &d->mark, p,
                "Referenced host not found: \"%s\" (outboundTrafficPolicy "
                "ALLOW_ANY: passed through to %s, resolved by DNS, on %s)",
                d->host, h, port);
    }
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

static void check_dests(struct actx *a, const struct resource *r,
                        const struct conf_list *route,
                        const struct conf_mark *rule_mark, const char *path)
{
    char p[300];
    int64_t sum = 0;

    for (size_t i = 0; i < route->n; i++) {
        const struct res_route_dest *rd =
            (const struct res_route_dest *)route->v + i;
        res_path(p, sizeof(p), "%s.route[%zu].destination", path, i);
        check_destination(a, r, &rd->destination, p);
        sum += rd->weight;
    }
    if (route->n > 1 && sum == 0) {
        res_path(p, sizeof(p), "%s.route", path);
        finding(a, "IST0106", RES_ERROR, r, rule_mark, p,
                "the weights of the %zu destinations sum to zero: no "
                "request could be routed",
                route->n);
    }
}

static void check_http_rules(struct actx *a, const struct resource *r,
                             const struct res_virtual_service *vs)
{
    size_t catch_all = SIZE_MAX;
    struct buf *seen;
    size_t nseen = 0, *seen_rule;
    struct buf empty;
    char p[300];

    /* What an empty match looks like once printed, so a match with no
     * conditions is found without knowing every field. */
    {
        struct res_http_match zero;
        memset(&zero, 0, sizeof(zero));
        buf_init(&empty, 1 << 20);
        res_http_match_json(&empty, &zero);
    }
    {
        size_t total = 0;
        for (size_t i = 0; i < vs->http.n; i++)
            total += ((const struct res_http_route *)vs->http.v)[i].match.n;
        seen = calloc(total ? total : 1, sizeof(*seen));
        seen_rule = calloc(total ? total : 1, sizeof(*seen_rule));
    }
    if (seen == NULL || seen_rule == NULL)
        goto out;
    for (size_t i = 0; i < vs->http.n; i++) {
        const struct res_http_route *h =
            (const struct res_http_route *)vs->http.v + i;
        size_t dup = 0;

        res_path(p, sizeof(p), "spec.http[%zu]", i);
        if (catch_all != SIZE_MAX) {
            finding(a, "IST0130", RES_ERROR, r, &h->mark, p,
                    "VirtualService rule #%zu not used (only the last rule "
                    "can have no matches; rule #%zu matches every request)",
                    i, catch_all);
            continue;
        }
        if (h->match.n == 0) {
            catch_all = i;
            continue;
        }
        for (size_t j = 0; j < h->match.n; j++) {
            const struct res_http_match *m =
                (const struct res_http_match *)h->match.v + j;
            struct buf *js = &seen[nseen];
            size_t k;

            buf_init(js, 1 << 20);
            res_http_match_json(js, m);
            if (buf_len(js) == buf_len(&empty) &&
                memcmp(buf_ptr(js), buf_ptr(&empty), buf_len(js)) == 0)
                catch_all = i;
            for (k = 0; k < nseen; k++)
                if (buf_len(&seen[k]) == buf_len(js) &&
                    memcmp(buf_ptr(&seen[k]), buf_ptr(js), buf_len(js)) == 0)
                    break;
            if (k < nseen) {
                char mp[360];
                res_path(mp, sizeof(mp), "%s.match[%zu]", p, j);
                finding(a, "IST0131", RES_WARNING, r, &m->mark, mp,
                        "VirtualService rule #%zu match #%zu is not used "
                        "(duplicate/overlapping match in rule #%zu)",
                        i, j, seen_rule[k]);
                dup++;
                buf_dispose(js);
                continue;
            }
            seen_rule[nseen++] = i;
        }
        if (dup == h->match.n)
            finding(a, "IST0130", RES_ERROR, r, &h->mark, p,
                    "VirtualService rule #%zu not used (all its matches are "
                    "used by earlier rules)",
                    i);
    }
out:
    for (size_t k = 0; k < nseen; k++)
        buf_dispose(&seen[k]);
    free(seen);
    free(seen_rule);
    buf_dispose(&empty);
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

static void check_vs_hosts_in_gateways(struct actx *a, const struct resource *r,
                                       const struct res_virtual_service *vs)
{
    char p[64];

    for (size_t i = 0; i < vs->gateways.n; i++) {
        const struct resource *g;
        const struct res_gateway *gw;
        if (strcmp(vs->gateways.v[i], "mesh") == 0)
            continue;
        g = find_gateway(a, r, vs->gateways.v[i]);
        if (g == NULL)
            continue;
        gw = res_gateway(g);
        for (size_t j = 0; j < vs->hosts.n; j++) {
            int found = 0;
            for (size_t s = 0; s < gw->servers.n && !found; s++) {
                const struct res_gw_server *srv =
                    (const struct res_gw_server *)gw->servers.v + s;
                for (size_t k = 0; k < srv->hosts.n && !found; k++)
                    found = gw_host_ok(srv->hosts.v[k], g->meta.ns, r->meta.ns,
                                       vs->hosts.v[j]);
            }
            if (found)
                continue;
            res_path(p, sizeof(p), "spec.hosts[%zu]", j);
            finding(a, "IST0132", RES_WARNING, r, NULL, p,
                    "one or more host [%s] defined in VirtualService %s/%s "
                    "not found in Gateway %s/%s.",
                    vs->hosts.v[j], r->meta.ns, r->meta.name, g->meta.ns,
                    g->meta.name);
        }
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
    finding(a, "IST0106", RES_WARNING, r, &d->mark, path,
            "DestinationRule %s/%s sets tls mode %s for \"%s\": the "
            "client's TLS stream of this tls route is sent inside TLS "
            "originated to the destination, which must terminate it (as in "
            "Istio); tls mode DISABLE relays the stream as it is",
            dr->meta.ns, dr->meta.name, modes[t->mode], d->host);
}

static void analyze_vs(struct actx *a, const struct resource *r)
{
    const struct res_virtual_service *vs = res_virtual_service(r);
    char p[300];

    check_gateway_refs(a, r, &vs->gateways, NULL, "spec.gateways");
    for (size_t i = 0; i < vs->http.n; i++) {
        const struct res_http_route *h =
            (const struct res_http_route *)vs->http.v + i;
        res_path(p, sizeof(p), "spec.http[%zu]", i);
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
    check_http_rules(a, r, vs);
    check_vs_hosts_in_gateways(a, r, vs);
}

/* ---- Gateway ---------------------------------------------------------------
 */

static int same_labels(const struct conf_strmap *x, const struct conf_strmap *y)
{
    return x->n == y->n && res_labels_match(x, y);
}

static const char *strip_ns(const char *h)
{
    const char *slash = strchr(h, '/');
    return slash ? slash + 1 : h;
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
               s->tls.mode == RES_GW_TLS_PASSTHROUGH;
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
 * server cannot be: as Istio does, the later one is not served (a
 * warning). Plaintext beside TLS servers served the same way (HTTP and
 * HTTPS, TCP and TLS) is refused at load (an error).
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
        finding(a, "IST0145", rc == PORT_REFUSED ? RES_ERROR : RES_WARNING, r,
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
        finding(a, "IST0106", RES_WARNING, r, mark, path,
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

static void analyze_gateway(struct actx *a, size_t idx)
{
    const struct resource *r = a->set->v[idx];
    const struct res_gateway *gw = res_gateway(r);

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
        for (size_t o = 0; o < idx; o++) {
            const struct resource * or = a->set->v[o];
            const struct res_gateway *ogw;
            if (or->kind != RES_GATEWAY)
                continue;
            ogw = res_gateway(or);
            if (!same_labels(&gw->selector, &ogw->selector))
                continue;
            for (size_t os = 0; os < ogw->servers.n; os++) {
                const struct res_gw_server *osrv =
                    (const struct res_gw_server *)ogw->servers.v + os;
                if (osrv->port.number != srv->port.number)
                    continue;
                for (size_t i = 0; i < srv->hosts.n; i++) {
                    size_t j;
                    for (j = 0; j < osrv->hosts.n; j++)
                        if (host_intersect(strip_ns(srv->hosts.v[i]),
                                           strip_ns(osrv->hosts.v[j])))
                            break;
                    if (j == osrv->hosts.n)
                        continue;
                    finding(a, "IST0145", RES_ERROR, r, &srv->mark, p,
                            "Conflict with gateways %s/%s (workload "
                            "selector %s, port %lld, hosts %s and %s)",
                            or->meta.ns, or->meta.name,
                            gw->selector.n ? "the same labels" : "none",
                            (long long)srv->port.number, srv->hosts.v[i],
                            osrv->hosts.v[j]);
                    goto next_server;
                }
            }
        }
    next_server:;
    }
}

/* ---- DestinationRule
 * --------------------------------------------------------- */

/* endpoint_labels_match() is true when some endpoint of the services
 * named by host (full) carries every label of sel. */
static int endpoint_selected(const struct actx *a, const char *host,
                             const struct conf_strmap *sel)
{
    for (size_t i = 0; i < a->nsvc; i++) {
        const struct svc *s = &a->svcs[i];
        if (!host_intersect(s->host, host))
            continue;
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
    }
    return 0;
}

static void analyze_dr(struct actx *a, const struct resource *r)
{
    const struct res_destination_rule *dr = res_destination_rule(r);
    char h[HOST_MAX], p[64];

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
                    "DestinationRule host \"%s\" matches no known service "
                    "(no ServiceEntry or WorkloadEntry provides %s)%s",
                    dr->host, h,
                    a->outbound_mode == RES_ALLOW_ANY
                        ? "; under outboundTrafficPolicy ALLOW_ANY it "
                          "applies to routes passed through to that host"
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
        finding(a, "IST0173", RES_WARNING, r, &s->mark, p,
                "The Subset %s defined in the DestinationRule does not "
                "select any pods.",
                s->name);
    }
}

/* ---- entry points
 * -------------------------------------------------------------- */

int analyze(const struct resource_set *set, int outbound_mode,
            struct analysis *out)
{
    struct actx a;

    memset(out, 0, sizeof(*out));
    memset(&a, 0, sizeof(a));
    a.set = set;
    a.outbound_mode = outbound_mode;
    a.msgs = &out->msgs;
    for (size_t i = 0; i < set->msgs.n; i++) {
        const struct res_msg *m = &set->msgs.v[i];
        res_msgs_add(a.msgs, m->code, m->level, m->file, m->line, m->col,
                     m->resource, m->path, "%s", m->message);
    }
    collect_services(&a);
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
        default:
            break;
        }
    }
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
    buf_printf(b,
               ",\"documentationUrl\":\"https://istio.io/latest/docs/"
               "reference/config/analysis/%s/\"}",
               lower);
}

int resource_check(const char *path, int json, int outbound_mode, FILE *out)
{
    struct resource_set *set;
    struct analysis an;
    const struct res_msgs *msgs;
    int nerr = 0;

    memset(&an, 0, sizeof(an));
    set = resource_load(path, NULL, &nerr);
    if (set == NULL) {
        fprintf(out, json ? "[]\n" : "Error: out of memory\n");
        return 1;
    }
    /* Cross-references in a set with schema errors would point at the
     * resources that failed to load; report the schema errors alone. */
    if (nerr == 0) {
        nerr = analyze(set, outbound_mode, &an);
        msgs = &an.msgs;
    } else {
        msgs = &set->msgs;
    }
    if (json) {
        struct buf b;
        buf_init(&b, SIZE_MAX / 2);
        buf_puts(&b, "[");
        for (size_t i = 0; i < msgs->n; i++) {
            buf_puts(&b, i ? ",\n" : "\n");
            print_json(&b, &msgs->v[i]);
        }
        buf_puts(&b, msgs->n ? "\n]\n" : "]\n");
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
