/*
 * The Gateway API lowered into Istio Gateways and VirtualServices (see
 * gwapi.h). The lowered objects are written as JSON documents (YAML's
 * flow form) and decoded by the shared loader, so they meet the same
 * schema and analysis as written ones and own their memory the usual way.
 *
 * Statuses are computed here as the API defines them: GatewayClass
 * Accepted; Gateway Accepted and Programmed, each listener's conditions,
 * attachedRoutes and supportedKinds; each HTTPRoute parent's Accepted and
 * ResolvedRefs with the reasons of the specification.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/gwapi.h"
#include "config/resource.h"
#include "core/buf.h"
#include "core/json.h"

#define GROUP "gateway.networking.k8s.io"
#define CODE "STR0013"

static const char *const controllers[] = {"istio.io/gateway-controller",
                                          "strait.io/gateway-controller", NULL};

/* ---- hostnames and precedence ---------------------------------------- */

/* within() is true when x (a host or "*.suffix") is inside wildcard w. */
static int within(const char *x, const char *w)
{
    size_t n = strlen(x), m = strlen(w + 1); /* ".suffix" */

    return n > m && strcasecmp(x + n - m, w + 1) == 0;
}

const char *gwapi_host_intersect(const char *l, const char *h)
{
    if (l == NULL && h == NULL)
        return "*";
    if (l == NULL)
        return h;
    if (h == NULL)
        return l;
    if (strcasecmp(l, h) == 0)
        return l;
    if (l[0] == '*' && within(h, l))
        return h;
    if (h[0] == '*' && within(l, h))
        return l;
    return NULL;
}

static int cmp_size_desc(size_t a, size_t b)
{
    return a > b ? -1 : a < b;
}

int gwapi_order_cmp(const struct gwapi_order *a, const struct gwapi_order *b)
{
    int c;

    if (a->path_rank != b->path_rank)
        return a->path_rank > b->path_rank ? -1 : 1;
    if ((c = cmp_size_desc(a->path_len, b->path_len)) != 0)
        return c;
    if (a->method != b->method)
        return a->method ? -1 : 1;
    if ((c = cmp_size_desc(a->nheaders, b->nheaders)) != 0)
        return c;
    if ((c = cmp_size_desc(a->nquery, b->nquery)) != 0)
        return c;
    /* An object without a creationTimestamp (a file) ties on age. */
    if (a->created != NULL && b->created != NULL &&
        (c = strcmp(a->created, b->created)) != 0)
        return c;
    if ((c = strcmp(a->ns, b->ns)) != 0)
        return c;
    if ((c = strcmp(a->name, b->name)) != 0)
        return c;
    if (a->rule != b->rule)
        return a->rule < b->rule ? -1 : 1;
    if (a->match != b->match)
        return a->match < b->match ? -1 : 1;
    return 0;
}

/* ---- the objects ------------------------------------------------------- */

static int str_is(const char *s, const char *v)
{
    return s != NULL && strcmp(s, v) == 0;
}

/* One match of one rule of a route, on one (listener, hostname). */
struct entry {
    const struct resource *route;
    const struct res_gwapi_rule *rule;
    const struct res_gwapi_match *match; /* NULL: the default match */
    struct gwapi_order order;
};

struct bucket {
    size_t gw;       /* index in set->v */
    size_t listener; /* index in the Gateway's listeners */
    char *host;
    struct entry *v;
    size_t n;
};

struct lower {
    struct resource_set *set;
    struct buf *out;
    struct bucket *b;
    size_t nb;
    size_t *attached; /* per set->v index * MAX_LISTENERS + listener */
    int oom;
};

static const struct res_gwapi_listener *listener_of(const struct resource *g,
                                                    size_t i)
{
    return (const struct res_gwapi_listener *)res_k8s_gateway(g)->listeners.v +
           i;
}

/* class_controller() is the controllerName of class name when strait
 * implements it, else NULL. A class named istio or strait need not be
 * written: istiod makes the first, and Istio users' manifests name it. */
static const char *class_controller(const struct resource_set *set,
                                    const char *name)
{
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_gateway_class *c;
        if (r->kind != RES_GATEWAY_CLASS || strcmp(r->meta.name, name) != 0)
            continue;
        c = res_gateway_class(r);
        for (int k = 0; controllers[k] != NULL; k++)
            if (str_is(c->controller_name, controllers[k]))
                return controllers[k];
        return NULL;
    }
    if (strcmp(name, "istio") == 0)
        return controllers[0];
    if (strcmp(name, "strait") == 0)
        return controllers[1];
    return NULL;
}

/* warn() reports an unhappy condition as a warning at m (or r). */
static void warn(struct lower *lw, const struct resource *r,
                 const struct conf_mark *m, const char *path, const char *fmt,
                 ...) __attribute__((format(printf, 5, 6)));
static void warn(struct lower *lw, const struct resource *r,
                 const struct conf_mark *m, const char *path, const char *fmt,
                 ...)
{
    char res[600], text[1024];
    va_list ap;

    snprintf(res, sizeof(res), "%s %s/%s", res_kind_name(r->kind), r->meta.ns,
             r->meta.name);
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    res_msgs_add(&lw->set->msgs, CODE, RES_WARNING, r->file,
                 m != NULL && m->line > 0 ? m->line : r->line,
                 m != NULL && m->line > 0 ? m->col : r->col, res, path, "%s",
                 text);
}

static void cond(struct buf *b, int first, const char *type, int ok,
                 const char *reason, const char *msg, int64_t gen)
{
    buf_printf(b,
               "%s{\"type\":\"%s\",\"status\":\"%s\",\"reason\":\"%s\","
               "\"message\":",
               first ? "" : ",", type, ok ? "True" : "False", reason);
    json_str(b, msg);
    buf_printf(b, ",\"observedGeneration\":%lld}", (long long)gen);
}

static int ns_labels_match(const struct resource_set *set, const char *ns,
                           const struct conf_strmap *sel)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->v[i]->kind == RES_NAMESPACE &&
            strcmp(set->v[i]->meta.name, ns) == 0)
            return res_labels_match(sel, &set->v[i]->meta.labels);
    return sel->n == 0;
}

/* The Service a backendRef names: 0 resolved, or the reason it is not. */
static const char *backend_problem(const struct resource_set *set,
                                   const struct resource *route,
                                   const struct res_gwapi_ref *b, char *host,
                                   size_t n)
{
    const char *ns = b->ns != NULL ? b->ns : route->meta.ns;

    if (!str_is(b->kind, "Service") || (b->group != NULL && b->group[0]))
        return "InvalidKind";
    snprintf(host, n, "%s.%s.svc.%s", b->name, ns, set->domain);
    if (strcmp(ns, route->meta.ns) != 0) {
        int ok = 0;
        for (size_t i = 0; i < set->n && !ok; i++) {
            const struct resource *r = set->v[i];
            const struct res_reference_grant *g;
            int from = 0, to = 0;
            if (r->kind != RES_REFERENCE_GRANT || strcmp(r->meta.ns, ns) != 0)
                continue;
            g = res_reference_grant(r);
            for (size_t k = 0; k < g->from.n && !from; k++) {
                const struct res_grant_from *f =
                    (const struct res_grant_from *)g->from.v + k;
                from = str_is(f->group, GROUP) &&
                       str_is(f->kind, "HTTPRoute") &&
                       str_is(f->ns, route->meta.ns);
            }
            for (size_t k = 0; k < g->to.n && !to; k++) {
                const struct res_grant_to *t =
                    (const struct res_grant_to *)g->to.v + k;
                to = (t->group == NULL || t->group[0] == '\0') &&
                     str_is(t->kind, "Service") &&
                     (t->name == NULL || t->name[0] == '\0' ||
                      strcmp(t->name, b->name) == 0);
            }
            ok = from && to;
        }
        if (!ok)
            return "RefNotPermitted";
    }
    if (resource_find(set, RES_SERVICE, ns, b->name) != NULL)
        return NULL;
    /* On a VM a ServiceEntry of the Service's name stands for it. */
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_service_entry *se;
        if (r->kind != RES_SERVICE_ENTRY)
            continue;
        se = res_service_entry(r);
        for (size_t k = 0; k < se->hosts.n; k++)
            if (strcmp(se->hosts.v[k], host) == 0)
                return NULL;
    }
    return "BackendNotFound";
}

/* ---- attaching routes -------------------------------------------------- */

static struct bucket *bucket_of(struct lower *lw, size_t gw, size_t li,
                                const char *host)
{
    struct bucket *v;

    for (size_t i = 0; i < lw->nb; i++)
        if (lw->b[i].gw == gw && lw->b[i].listener == li &&
            strcasecmp(lw->b[i].host, host) == 0)
            return &lw->b[i];
    v = realloc(lw->b, (lw->nb + 1) * sizeof(*v));
    if (v == NULL)
        return NULL;
    lw->b = v;
    memset(&v[lw->nb], 0, sizeof(*v));
    v[lw->nb].gw = gw;
    v[lw->nb].listener = li;
    v[lw->nb].host = strdup(host);
    if (v[lw->nb].host == NULL)
        return NULL;
    return &v[lw->nb++];
}

static int add_entries(struct bucket *bk, const struct resource *route)
{
    const struct res_http_route_gw *h = res_http_route_gw(route);

    for (size_t i = 0; i < h->rules.n; i++) {
        const struct res_gwapi_rule *rule =
            (const struct res_gwapi_rule *)h->rules.v + i;
        size_t nm = rule->matches.n ? rule->matches.n : 1;
        for (size_t k = 0; k < nm; k++) {
            const struct res_gwapi_match *m =
                rule->matches.n
                    ? (const struct res_gwapi_match *)rule->matches.v + k
                    : NULL;
            struct entry *v = realloc(bk->v, (bk->n + 1) * sizeof(*v));
            struct entry *e;
            if (v == NULL)
                return -1;
            bk->v = v;
            e = &v[bk->n++];
            memset(e, 0, sizeof(*e));
            e->route = route;
            e->rule = rule;
            e->match = m;
            e->order.path_rank = 2;
            e->order.path_len = 1;
            if (m != NULL) {
                e->order.path_rank = str_is(m->path.type, "Exact")        ? 3
                                     : str_is(m->path.type, "PathPrefix") ? 2
                                                                          : 1;
                e->order.path_len = strlen(m->path.value);
                e->order.method = m->method != NULL;
                e->order.nheaders = m->headers.n;
                e->order.nquery = m->query_params.n;
            }
            e->order.created = route->meta.created;
            e->order.ns = route->meta.ns;
            e->order.name = route->meta.name;
            e->order.rule = i;
            e->order.match = k;
        }
    }
    return 0;
}

/* The reason a listener does not take route (NULL: it does). */
static const char *listener_refuses(const struct resource_set *set,
                                    const struct resource *g,
                                    const struct res_gwapi_listener *l,
                                    const struct resource *route)
{
    const char *from = l->allowed_routes.namespaces.from;

    if (str_is(from, "None") ||
        (str_is(from, "Same") && strcmp(g->meta.ns, route->meta.ns) != 0) ||
        (str_is(from, "Selector") &&
         !ns_labels_match(set, route->meta.ns,
                          &l->allowed_routes.namespaces.selector.match_labels)))
        return "NotAllowedByListeners";
    return NULL;
}

static void route_status(struct lower *lw, struct resource *route)
{
    const struct res_http_route_gw *h = res_http_route_gw(route);
    const char *refs_reason = NULL;
    struct buf st;
    char host[600], path[64];

    /* ResolvedRefs is one condition for the whole route. */
    for (size_t i = 0; i < h->rules.n && refs_reason == NULL; i++) {
        const struct res_gwapi_rule *rule =
            (const struct res_gwapi_rule *)h->rules.v + i;
        for (size_t k = 0; k < rule->backend_refs.n && refs_reason == NULL; k++)
            refs_reason = backend_problem(
                lw->set, route,
                (const struct res_gwapi_ref *)rule->backend_refs.v + k, host,
                sizeof(host));
    }
    buf_init(&st, 1024 * 1024);
    buf_puts(&st, "{\"parents\":[");
    for (size_t p = 0; p < h->parent_refs.n; p++) {
        const struct res_gwapi_ref *pr =
            (const struct res_gwapi_ref *)h->parent_refs.v + p;
        const char *ns = pr->ns != NULL ? pr->ns : route->meta.ns;
        const struct resource *g =
            resource_find(lw->set, RES_K8S_GATEWAY, ns, pr->name);
        const char *ctl = NULL, *reason = "NoMatchingParent";
        int accepted = 0, any_listener = 0;
        size_t gi = 0;

        if (g != NULL)
            ctl = class_controller(lw->set,
                                   res_k8s_gateway(g)->gateway_class_name);
        if (g != NULL && ctl == NULL)
            continue; /* another controller's parent: not ours to report */
        if (g != NULL) {
            const struct res_k8s_gateway *gw = res_k8s_gateway(g);
            for (gi = 0; lw->set->v[gi] != g; gi++)
                ;
            for (size_t li = 0; li < gw->listeners.n; li++) {
                const struct res_gwapi_listener *l = listener_of(g, li);
                const char *why;
                int hosts = 0;
                if ((pr->section_name != NULL &&
                     strcmp(pr->section_name, l->name) != 0) ||
                    (pr->port != 0 && pr->port != l->port))
                    continue;
                any_listener = 1;
                if ((why = listener_refuses(lw->set, g, l, route)) != NULL) {
                    if (!accepted)
                        reason = why;
                    continue;
                }
                for (size_t k = 0; k < (h->hostnames.n ? h->hostnames.n : 1);
                     k++) {
                    const char *x = gwapi_host_intersect(
                        l->hostname, h->hostnames.n ? h->hostnames.v[k] : NULL);
                    struct bucket *bk;
                    if (x == NULL)
                        continue;
                    hosts++;
                    bk = bucket_of(lw, gi, li, x);
                    if (bk == NULL || add_entries(bk, route) < 0)
                        lw->oom = 1;
                }
                if (hosts == 0) {
                    if (!accepted && strcmp(reason, "NotAllowedByListeners"))
                        reason = "NoMatchingListenerHostname";
                    continue;
                }
                accepted = 1;
                lw->attached[gi * RES_GWAPI_MAX_LISTENERS + li]++;
            }
            if (!any_listener)
                reason = "NoMatchingParent";
        }
        buf_printf(&st,
                   "%s{\"parentRef\":{\"group\":\"%s\",\"kind\":\"%s\","
                   "\"namespace\":",
                   p ? "," : "", GROUP, "Gateway");
        json_str(&st, ns);
        buf_puts(&st, ",\"name\":");
        json_str(&st, pr->name);
        if (pr->section_name != NULL) {
            buf_puts(&st, ",\"sectionName\":");
            json_str(&st, pr->section_name);
        }
        if (pr->port != 0)
            buf_printf(&st, ",\"port\":%lld", (long long)pr->port);
        buf_puts(&st, "},\"controllerName\":");
        json_str(&st, ctl != NULL ? ctl : controllers[1]);
        buf_puts(&st, ",\"conditions\":[");
        cond(&st, 1, "Accepted", accepted, accepted ? "Accepted" : reason,
             accepted    ? "attached"
             : g == NULL ? "no such Gateway"
                         : "no listener of the Gateway takes it",
             route->meta.generation);
        cond(&st, 0, "ResolvedRefs", refs_reason == NULL,
             refs_reason ? refs_reason : "ResolvedRefs",
             refs_reason ? "a backendRef does not resolve; its requests are "
                           "answered 500"
                         : "resolved",
             route->meta.generation);
        buf_puts(&st, "]}");
        snprintf(path, sizeof(path), "spec.parentRefs[%zu]", p);
        if (!accepted)
            warn(lw, route, &pr->mark, path,
                 "Accepted=False reason %s: the route is not attached to "
                 "Gateway %s/%s",
                 reason, ns, pr->name);
    }
    buf_puts(&st, "]}");
    if (refs_reason != NULL)
        warn(lw, route, NULL, "spec.rules",
             "ResolvedRefs=False reason %s: a backendRef does not resolve "
             "and its share of requests is answered 500",
             refs_reason);
    free(route->status);
    route->status = strdup(buf_cstr(&st));
    if (route->status == NULL)
        lw->oom = 1;
    buf_dispose(&st);
}

/* ---- writing the Istio objects ---------------------------------------- */

static void lower_name(struct buf *b, const struct resource *g,
                       const struct res_gwapi_listener *l)
{
    char name[600];

    snprintf(name, sizeof(name), "%s-gwapi-%s", g->meta.name, l->name);
    json_str(b, name);
}

static void write_gateway(struct lower *lw, size_t gi, const char *ctl)
{
    struct resource *g = lw->set->v[gi];
    const struct res_k8s_gateway *gw = res_k8s_gateway(g);
    struct buf *b = lw->out;
    struct buf st;

    buf_init(&st, 1024 * 1024);
    buf_puts(&st, "{\"addresses\":[");
    for (size_t a = 0; a < gw->addresses.n; a++) {
        buf_printf(&st, "%s{\"type\":\"IPAddress\",\"value\":", a ? "," : "");
        json_str(&st,
                 ((const struct res_gwapi_address *)gw->addresses.v)[a].value);
        buf_puts(&st, "}");
    }
    buf_puts(&st, "],\"conditions\":[");
    cond(&st, 1, "Accepted", 1, "Accepted", "handled by strait",
         g->meta.generation);
    cond(&st, 0, "Programmed", 1, "Programmed", "listeners compiled",
         g->meta.generation);
    buf_puts(&st, "],\"listeners\":[");
    for (size_t li = 0; li < gw->listeners.n; li++) {
        const struct res_gwapi_listener *l = listener_of(g, li);
        /* A certificateRef is a Secret of the Gateway's namespace or, on
         * a VM, credentials.dir/NAME: the compiler loads it and refuses
         * the snapshot (IST0161) when it is neither, so a Programmed
         * listener has its certificate. */
        buf_printf(&st, "%s{\"name\":", li ? "," : "");
        json_str(&st, l->name);
        buf_printf(&st,
                   ",\"attachedRoutes\":%zu,\"supportedKinds\":[{\"group\":"
                   "\"%s\",\"kind\":\"HTTPRoute\"}],\"conditions\":[",
                   lw->attached[gi * RES_GWAPI_MAX_LISTENERS + li], GROUP);
        cond(&st, 1, "Accepted", 1, "Accepted", "accepted", g->meta.generation);
        cond(&st, 0, "Programmed", 1, "Programmed", "programmed",
             g->meta.generation);
        cond(&st, 0, "ResolvedRefs", 1, "ResolvedRefs", "resolved",
             g->meta.generation);
        buf_puts(&st, "]}");

        /* The listener as an Istio Gateway of its own, so a route's
         * sectionName binds to exactly it. */
        buf_puts(b, "---\n{\"apiVersion\":\"networking.istio.io/v1\","
                    "\"kind\":\"Gateway\",\"metadata\":{\"name\":");
        lower_name(b, g, l);
        buf_puts(b, ",\"namespace\":");
        json_str(b, g->meta.ns);
        buf_puts(b, ",\"annotations\":{\"" GWAPI_ANNOTATION "\":");
        json_str(b, g->meta.name);
        buf_puts(b, "}},\"spec\":{\"selector\":{},\"servers\":[");
        for (size_t a = 0; a < (gw->addresses.n ? gw->addresses.n : 1); a++) {
            buf_printf(b,
                       "%s{\"port\":{\"number\":%lld,\"name\":", a ? "," : "",
                       (long long)l->port);
            json_str(b, l->name);
            buf_printf(b, ",\"protocol\":\"%s\"},\"hosts\":[",
                       str_is(l->protocol, "HTTPS") ? "HTTPS" : "HTTP");
            json_str(b, l->hostname != NULL ? l->hostname : "*");
            buf_puts(b, "]");
            if (gw->addresses.n) {
                buf_puts(b, ",\"bind\":");
                json_str(b,
                         ((const struct res_gwapi_address *)gw->addresses.v)[a]
                             .value);
            }
            if (str_is(l->protocol, "HTTPS")) {
                /* One certificateRef (res-gwapi.c refuses more). */
                buf_puts(b, ",\"tls\":{\"mode\":\"SIMPLE\","
                            "\"credentialName\":");
                json_str(
                    b,
                    ((const struct res_gwapi_ref *)l->tls.certificate_refs.v)[0]
                        .name);
                buf_puts(b, "}");
            }
            buf_puts(b, "}");
        }
        buf_puts(b, "]}}\n");
    }
    buf_puts(&st, "]}");
    (void)ctl;
    free(g->status);
    g->status = strdup(buf_cstr(&st));
    if (g->status == NULL)
        lw->oom = 1;
    buf_dispose(&st);
}

static void header_mod(struct buf *b, const struct res_gwapi_header_mod *m)
{
    const struct conf_list *ls[2] = {&m->set, &m->add};

    buf_puts(b, "{");
    for (int k = 0; k < 2; k++) {
        buf_printf(b, "%s\"%s\":{", k ? "," : "", k ? "add" : "set");
        for (size_t i = 0; i < ls[k]->n; i++) {
            const struct res_gwapi_header *h =
                (const struct res_gwapi_header *)ls[k]->v + i;
            if (i)
                buf_puts(b, ",");
            json_str(b, h->name);
            buf_puts(b, ":");
            json_str(b, h->value);
        }
        buf_puts(b, "}");
    }
    buf_puts(b, ",\"remove\":[");
    for (size_t i = 0; i < m->remove.n; i++) {
        if (i)
            buf_puts(b, ",");
        json_str(b, m->remove.v[i]);
    }
    buf_puts(b, "]}");
}

static void lower_case(char *s)
{
    for (; *s; s++)
        if (*s >= 'A' && *s <= 'Z')
            *s = (char)(*s - 'A' + 'a');
}

static void hmatches(struct buf *b, const char *key, const struct conf_list *l,
                     int lower)
{
    char name[300];

    if (l->n == 0)
        return;
    buf_printf(b, ",\"%s\":{", key);
    for (size_t i = 0; i < l->n; i++) {
        const struct res_gwapi_header *h =
            (const struct res_gwapi_header *)l->v + i;
        snprintf(name, sizeof(name), "%s", h->name);
        if (lower)
            lower_case(name);
        buf_puts(b, i ? "," : "");
        json_str(b, name);
        buf_printf(b, ":{\"%s\":",
                   str_is(h->type, "RegularExpression") ? "regex" : "exact");
        json_str(b, h->value);
        buf_puts(b, "}");
    }
    buf_puts(b, "}");
}

/* One http rule of the VirtualService: uri is the uri match (NULL: none)
 * and prefix_rewrite the uri rewrite that stands for ReplacePrefixMatch
 * with it. */
static void http_rule(struct lower *lw, const struct entry *e,
                      const char *uri_kind, const char *uri,
                      const char *prefix_rewrite)
{
    struct buf *b = lw->out;
    const struct res_gwapi_rule *rule = e->rule;
    const struct res_gwapi_match *m = e->match;
    const struct res_gwapi_filter *redirect = NULL, *rewrite = NULL,
                                  *mirror = NULL, *reqh = NULL, *resph = NULL;
    char host[600], name[800];
    size_t valid = 0;
    int64_t timeout = 0;

    for (size_t i = 0; i < rule->filters.n; i++) {
        const struct res_gwapi_filter *f =
            (const struct res_gwapi_filter *)rule->filters.v + i;
        if (str_is(f->type, "RequestRedirect"))
            redirect = f;
        else if (str_is(f->type, "URLRewrite"))
            rewrite = f;
        else if (str_is(f->type, "RequestMirror"))
            mirror = f;
        else if (str_is(f->type, "RequestHeaderModifier"))
            reqh = f;
        else if (str_is(f->type, "ResponseHeaderModifier"))
            resph = f;
    }
    snprintf(name, sizeof(name), "httproute/%s/%s/%s", e->route->meta.ns,
             e->route->meta.name, rule->name ? rule->name : "");
    if (rule->name == NULL)
        snprintf(name + strlen(name), sizeof(name) - strlen(name), "rule-%zu",
                 e->order.rule);
    buf_puts(b, "{\"name\":");
    json_str(b, name);
    buf_puts(b, ",\"match\":[{");
    if (uri != NULL) {
        buf_printf(b, "\"uri\":{\"%s\":", uri_kind);
        json_str(b, uri);
        buf_puts(b, "}");
    } else
        buf_puts(b, "\"uri\":{\"prefix\":\"/\"}");
    if (m != NULL) {
        hmatches(b, "headers", &m->headers, 1);
        hmatches(b, "queryParams", &m->query_params, 0);
        if (m->method != NULL) {
            buf_puts(b, ",\"method\":{\"exact\":");
            json_str(b, m->method);
            buf_puts(b, "}");
        }
    }
    buf_puts(b, "}]");
    if (redirect != NULL) {
        const struct res_gwapi_filter *f = redirect;
        buf_printf(b, ",\"redirect\":{\"redirectCode\":%lld",
                   (long long)f->request_redirect.status_code);
        if (f->request_redirect.scheme != NULL) {
            buf_puts(b, ",\"scheme\":");
            json_str(b, f->request_redirect.scheme);
        }
        if (f->request_redirect.hostname != NULL) {
            buf_puts(b, ",\"authority\":");
            json_str(b, f->request_redirect.hostname);
        }
        if (f->request_redirect.path.replace_full_path != NULL) {
            buf_puts(b, ",\"uri\":");
            json_str(b, f->request_redirect.path.replace_full_path);
        }
        /* The API: no port given keeps the request's port unless the
         * scheme changes, when the scheme's own port is used. */
        if (f->request_redirect.port != 0)
            buf_printf(b, ",\"port\":%lld",
                       (long long)f->request_redirect.port);
        else if (f->request_redirect.scheme == NULL)
            buf_puts(b, ",\"derivePort\":\"FROM_REQUEST_PORT\"");
        buf_puts(b, "}");
    } else {
        for (size_t i = 0; i < rule->backend_refs.n; i++) {
            const struct res_gwapi_ref *r =
                (const struct res_gwapi_ref *)rule->backend_refs.v + i;
            if (r->weight == 0 ||
                backend_problem(lw->set, e->route, r, host, sizeof(host)))
                continue;
            buf_puts(b, valid++ ? "," : ",\"route\":[");
            buf_puts(b, "{\"destination\":{\"host\":");
            json_str(b, host);
            buf_printf(b, ",\"port\":{\"number\":%lld}},\"weight\":%lld}",
                       (long long)r->port, (long long)r->weight);
        }
        if (valid)
            buf_puts(b, "]");
        else /* The API: no backend that resolves answers 500. */
            buf_puts(b, ",\"directResponse\":{\"status\":500}");
    }
    if (rewrite != NULL && valid) {
        const struct res_gwapi_filter *f = rewrite;
        int any = 0;
        buf_puts(b, ",\"rewrite\":{");
        if (f->url_rewrite.hostname != NULL) {
            buf_puts(b, "\"authority\":");
            json_str(b, f->url_rewrite.hostname);
            any = 1;
        }
        if (f->url_rewrite.path.replace_full_path != NULL) {
            buf_puts(b, any ? "," : "");
            buf_puts(b, "\"uriRegexRewrite\":{\"match\":\"^/.*$\","
                        "\"rewrite\":");
            json_str(b, f->url_rewrite.path.replace_full_path);
            buf_puts(b, "}");
        } else if (prefix_rewrite != NULL) {
            buf_puts(b, any ? "," : "");
            buf_puts(b, "\"uri\":");
            json_str(b, prefix_rewrite);
        }
        buf_puts(b, "}");
    }
    if (mirror != NULL && valid) {
        const struct res_gwapi_ref *r = &mirror->request_mirror.backend_ref;
        if (backend_problem(lw->set, e->route, r, host, sizeof(host)) == NULL) {
            buf_puts(b, ",\"mirror\":{\"host\":");
            json_str(b, host);
            buf_printf(b, ",\"port\":{\"number\":%lld}}", (long long)r->port);
        }
    }
    if (reqh != NULL || resph != NULL) {
        buf_puts(b, ",\"headers\":{");
        if (reqh != NULL) {
            buf_puts(b, "\"request\":");
            header_mod(b, &reqh->request_header_modifier);
        }
        if (resph != NULL) {
            buf_puts(b, reqh != NULL ? ",\"response\":" : "\"response\":");
            header_mod(b, &resph->response_header_modifier);
        }
        buf_puts(b, "}");
    }
    /* No retries are configured through the API, so the one backend
     * request is the whole request: the shorter timeout bounds it. */
    timeout = rule->timeouts.request_ms;
    if (rule->timeouts.backend_request_ms > 0 &&
        (timeout == 0 || rule->timeouts.backend_request_ms < timeout))
        timeout = rule->timeouts.backend_request_ms;
    if (timeout > 0 && valid)
        buf_printf(b, ",\"timeout\":\"%lldms\"", (long long)timeout);
    buf_puts(b, "}");
}

static void write_entry(struct lower *lw, const struct entry *e, int *first)
{
    const struct res_gwapi_match *m = e->match;
    const char *rp = NULL;
    char base[4200], pre[4200], rw_exact[4200], rw_pre[4200];
    size_t n;

    for (size_t i = 0; i < e->rule->filters.n; i++) {
        const struct res_gwapi_filter *f =
            (const struct res_gwapi_filter *)e->rule->filters.v + i;
        if (str_is(f->type, "URLRewrite"))
            rp = f->url_rewrite.path.replace_prefix_match;
    }
    if (m == NULL || str_is(m->path.type, "PathPrefix")) {
        /* A PathPrefix matches whole path elements: /foo is /foo and
         * /foo/..., never /foobar. Two Istio matches say that, each with
         * the rewrite that replaces its part. */
        snprintf(base, sizeof(base), "%s", m != NULL ? m->path.value : "/");
        n = strlen(base);
        while (n > 1 && base[n - 1] == '/')
            base[--n] = '\0';
        if (rp != NULL) {
            size_t rn;
            snprintf(rw_exact, sizeof(rw_exact), "%s", rp[0] ? rp : "/");
            rn = strlen(rp);
            snprintf(rw_pre, sizeof(rw_pre), "%s%s", rp,
                     rn > 0 && rp[rn - 1] == '/' ? "" : "/");
        }
        if (strcmp(base, "/") == 0) {
            buf_puts(lw->out, *first ? "" : ",");
            *first = 0;
            http_rule(lw, e, "prefix", "/", rp ? rw_pre : NULL);
            return;
        }
        buf_puts(lw->out, *first ? "" : ",");
        *first = 0;
        http_rule(lw, e, "exact", base, rp ? rw_exact : NULL);
        snprintf(pre, sizeof(pre), "%s/", base);
        buf_puts(lw->out, ",");
        http_rule(lw, e, "prefix", pre, rp ? rw_pre : NULL);
        return;
    }
    buf_puts(lw->out, *first ? "" : ",");
    *first = 0;
    http_rule(lw, e, str_is(m->path.type, "Exact") ? "exact" : "regex",
              m->path.value, NULL);
}

static int cmp_entry(const void *a, const void *b)
{
    return gwapi_order_cmp(&((const struct entry *)a)->order,
                           &((const struct entry *)b)->order);
}

static void write_bucket(struct lower *lw, struct bucket *bk, size_t idx)
{
    const struct resource *g = lw->set->v[bk->gw];
    const struct res_gwapi_listener *l = listener_of(g, bk->listener);
    struct buf *b = lw->out;
    char name[700];
    int first = 1;

    qsort(bk->v, bk->n, sizeof(*bk->v), cmp_entry);
    snprintf(name, sizeof(name), "%s-gwapi-%s-%zu", g->meta.name, l->name, idx);
    buf_puts(b, "---\n{\"apiVersion\":\"networking.istio.io/v1\","
                "\"kind\":\"VirtualService\",\"metadata\":{\"name\":");
    json_str(b, name);
    buf_puts(b, ",\"namespace\":");
    json_str(b, g->meta.ns);
    buf_puts(b, "},\"spec\":{\"hosts\":[");
    json_str(b, bk->host);
    buf_puts(b, "],\"gateways\":[");
    snprintf(name, sizeof(name), "%s/%s-gwapi-%s", g->meta.ns, g->meta.name,
             l->name);
    json_str(b, name);
    buf_puts(b, "],\"http\":[");
    for (size_t i = 0; i < bk->n; i++)
        write_entry(lw, &bk->v[i], &first);
    buf_puts(b, "]}}\n");
}

int gwapi_lower(struct resource_set *set, struct buf *out)
{
    struct lower lw = {set, out, NULL, 0, NULL, 0};

    lw.attached = calloc(set->n ? set->n * RES_GWAPI_MAX_LISTENERS : 1,
                         sizeof(*lw.attached));
    if (lw.attached == NULL)
        return -1;
    for (size_t i = 0; i < set->n; i++) {
        struct resource *r = set->v[i];
        const char *ctl;
        struct buf st;
        if (r->kind != RES_GATEWAY_CLASS)
            continue;
        ctl = class_controller(set, r->meta.name);
        if (ctl == NULL)
            continue; /* another controller's class */
        buf_init(&st, 4096);
        buf_puts(&st, "{\"conditions\":[");
        cond(&st, 1, "Accepted", 1, "Accepted", "handled by strait",
             r->meta.generation);
        buf_puts(&st, "]}");
        free(r->status);
        r->status = strdup(buf_cstr(&st));
        buf_dispose(&st);
    }
    for (size_t i = 0; i < set->n; i++)
        if (set->v[i]->kind == RES_HTTP_ROUTE)
            route_status(&lw, set->v[i]);
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const char *ctl;
        if (r->kind != RES_K8S_GATEWAY)
            continue;
        ctl = class_controller(set, res_k8s_gateway(r)->gateway_class_name);
        if (ctl == NULL) {
            warn(&lw, r, NULL, "spec.gatewayClassName",
                 "gatewayClassName %s is no class strait implements; the "
                 "Gateway is left to its controller",
                 res_k8s_gateway(r)->gateway_class_name);
            continue;
        }
        write_gateway(&lw, i, ctl);
    }
    for (size_t i = 0; i < lw.nb; i++)
        write_bucket(&lw, &lw.b[i], i);
    for (size_t i = 0; i < lw.nb; i++) {
        free(lw.b[i].host);
        free(lw.b[i].v);
    }
    free(lw.b);
    free(lw.attached);
    return lw.oom ? -1 : 0;
}

int gwapi_node_serves(const struct resource *r, const char *node_ns,
                      const struct conf_strmap *labels)
{
    const char *gw = NULL, *want = NULL;

    for (size_t i = 0; i < r->meta.annotations.n; i++)
        if (strcmp(r->meta.annotations.v[i].key, GWAPI_ANNOTATION) == 0)
            gw = r->meta.annotations.v[i].val;
    for (size_t i = 0; labels != NULL && i < labels->n; i++)
        if (strcmp(labels->v[i].key, GWAPI_NAME_LABEL) == 0)
            want = labels->v[i].val;
    if (gw == NULL || want == NULL)
        return 1;
    return strcmp(gw, want) == 0 &&
           (node_ns == NULL || strcmp(r->meta.ns, node_ns) == 0);
}
