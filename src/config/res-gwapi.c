/*
 * gateway.networking.k8s.io GatewayClass, Gateway and HTTPRoute (v1, and
 * v1beta1 where the release still serves it): the schema of the standard
 * channel of Gateway API v1.6 and the checks its CEL rules make. Every
 * field of that channel is in a table: the ones strait implements are
 * decoded, the others are decoded as a mark and refused with an error that
 * names them, so none is accepted and then ignored. The objects are
 * lowered into Istio Gateways and VirtualServices by gwapi.c.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/gwapi.h"
#include "config/res-kinds.h"
#include "config/resource.h"

#define STR(n, T, f, h)                                                        \
    {                                                                          \
        .name = n, .type = CONF_STR, .off = RES_OFF(T, f), .help = h           \
    }
#define STRD(n, T, f, d, h)                                                    \
    {                                                                          \
        .name = n, .type = CONF_STR, .off = RES_OFF(T, f), .def = d, .help = h \
    }
#define INT(n, T, f, lo, hi, d, h)                                             \
    {                                                                          \
        .name = n, .type = CONF_INT, .off = RES_OFF(T, f), .min = lo,          \
        .max = hi, .def = d, .help = h                                         \
    }
#define SEC(n, T, f, s, h)                                                     \
    {                                                                          \
        .name = n, .type = CONF_SECTION, .off = RES_OFF(T, f), .sub = s,       \
        .help = h                                                              \
    }
#define LIST(n, T, f, hi, s, h)                                                \
    {                                                                          \
        .name = n, .type = CONF_LIST, .off = RES_OFF(T, f), .max = hi,         \
        .sub = s, .help = h                                                    \
    }
/* A field of the standard channel strait refuses (see refuse()). */
#define NO(n, T, i)                                                            \
    {                                                                          \
        .name = n, .type = CONF_IGNORE,                                        \
        .off = RES_OFF(T, refused) + (i) * sizeof(struct conf_mark),           \
        .help = "not supported by strait yet: refused"                         \
    }
#define END                                                                    \
    {                                                                          \
        .name = NULL                                                           \
    }

/* refuse() reports each refused field of sec that obj has. */
static void refuse(struct res_check *ck, const struct conf_section *sec,
                   const void *obj, const char *path)
{
    char p[300];

    for (const struct conf_key *k = sec->keys; k->name != NULL; k++) {
        const struct conf_mark *m;
        if (k->type != CONF_IGNORE)
            continue;
        m = (const struct conf_mark *)((const char *)obj + k->off);
        if (m->line == 0)
            continue;
        res_path(p, sizeof(p), "%s%s%s", path, path[0] ? "." : "", k->name);
        res_err(ck, m, p,
                "field '%s' is not supported by strait yet (see "
                "docs/gateway-api.md); remove it",
                k->name);
    }
}

static int str_is(const char *s, const char *v)
{
    return s != NULL && strcmp(s, v) == 0;
}

static int str_empty(const char *s)
{
    return s == NULL || s[0] == '\0';
}

/* ---- references ---------------------------------------------------------- */

#define R struct res_gwapi_ref
static const struct conf_key parent_ref_keys[] = {
    STRD("group", R, group, "gateway.networking.k8s.io", "parent's group"),
    STRD("kind", R, kind, "Gateway", "parent's kind (Gateway)"),
    STR("namespace", R, ns, "parent's namespace; default: the route's"),
    STR("name", R, name, "parent's name (required)"),
    STR("sectionName", R, section_name, "a listener's name"),
    INT("port", R, port, 1, 65535, NULL, "a listener's port"),
    END,
};
static const struct conf_section parent_ref_section = {
    parent_ref_keys, sizeof(R), RES_OFF(R, mark)};

static const struct conf_key backend_ref_keys[] = {
    STRD("group", R, group, "", "backend's group (\"\": core)"),
    STRD("kind", R, kind, "Service", "backend's kind (Service)"),
    STR("namespace", R, ns,
        "backend's namespace; default: the route's; another one needs a "
        "ReferenceGrant there"),
    STR("name", R, name, "backend's name (required)"),
    INT("port", R, port, 1, 65535, NULL, "the Service port (required)"),
    INT("weight", R, weight, 0, 1000000, "1", "share of the requests"),
    NO("filters", R, 0),
    END,
};
static const struct conf_section backend_ref_section = {
    backend_ref_keys, sizeof(R), RES_OFF(R, mark)};

/* A mirror's backendRef: no weight. */
static const struct conf_key mirror_ref_keys[] = {
    STRD("group", R, group, "", "backend's group"),
    STRD("kind", R, kind, "Service", "backend's kind (Service)"),
    STR("namespace", R, ns, "backend's namespace"),
    STR("name", R, name, "backend's name (required)"),
    INT("port", R, port, 1, 65535, NULL, "the Service port (required)"),
    END,
};
static const struct conf_section mirror_ref_section = {
    mirror_ref_keys, sizeof(R), RES_OFF(R, mark)};

static const struct conf_key cert_ref_keys[] = {
    STRD("group", R, group, "", "\"\" (core)"),
    STRD("kind", R, kind, "Secret", "Secret"),
    STR("namespace", R, ns, "the Gateway's (only)"),
    STR("name", R, name, "the Secret's name (required)"),
    END,
};
static const struct conf_section cert_ref_section = {cert_ref_keys, sizeof(R),
                                                     RES_OFF(R, mark)};

static const struct conf_key route_kind_keys[] = {
    STRD("group", R, group, "gateway.networking.k8s.io", "route group"),
    STR("kind", R, kind, "route kind (HTTPRoute)"),
    END,
};
static const struct conf_section route_kind_section = {
    route_kind_keys, sizeof(R), RES_OFF(R, mark)};
#undef R

/* A Service backendRef's checks: kind, group, name and port. */
static void check_backend_ref(struct res_check *ck,
                              const struct res_gwapi_ref *b, const char *path)
{
    if (str_empty(b->name))
        res_err(ck, &b->mark, path, "name is required");
    if (!str_is(b->kind, "Service") || !str_empty(b->group))
        res_err(ck, &b->mark, path,
                "kind %s%s%s: strait routes to core Services only",
                str_empty(b->group) ? "" : b->group,
                str_empty(b->group) ? "" : "/", b->kind ? b->kind : "");
    else if (b->port == 0)
        res_err(ck, &b->mark, path, "port is required for a Service");
}

/* ---- GatewayClass ---------------------------------------------------------
 */

#define GC struct res_gateway_class
static const struct conf_key class_keys[] = {
    STR("controllerName", GC, controller_name,
        "istio.io/gateway-controller or strait.io/gateway-controller"),
    STR("description", GC, description, "free text"),
    NO("parametersRef", GC, 0),
    END,
};
#undef GC
static const struct conf_section class_section = {class_keys, 0, SIZE_MAX};

static void class_check(struct res_check *ck, struct resource *r)
{
    const struct res_gateway_class *c = r->spec;

    if (str_empty(c->controller_name))
        res_err(ck, NULL, "spec.controllerName", "controllerName is required");
    refuse(ck, &class_section, c, "spec");
}

const struct res_kind_ops res_gateway_class_ops = {
    "GatewayClass", &class_section, sizeof(struct res_gateway_class),
    class_check};

/* ---- Gateway ------------------------------------------------------------- */

#define L struct res_gwapi_listener
struct tls_part {
    struct conf_mark mark;
    char *mode;
    struct conf_list certificate_refs;
    struct conf_mark refused[RES_GWAPI_REFUSED];
};
static const struct conf_key tls_keys[] = {
    STRD("mode", struct tls_part, mode, "Terminate", "Terminate"),
    LIST("certificateRefs", struct tls_part, certificate_refs, 64,
         &cert_ref_section, "Secrets with tls.crt and tls.key"),
    NO("options", struct tls_part, 0),
    NO("frontendValidation", struct tls_part, 1),
    END,
};
static const struct conf_section tls_section = {tls_keys, 0,
                                                RES_OFF(struct tls_part, mark)};

struct sel_part {
    struct conf_mark mark;
    struct conf_strmap match_labels;
    struct conf_mark refused[RES_GWAPI_REFUSED];
};
static const struct conf_key sel_keys[] = {
    {.name = "matchLabels",
     .type = CONF_STR_MAP,
     .off = RES_OFF(struct sel_part, match_labels),
     .help = "labels every namespace must have"},
    NO("matchExpressions", struct sel_part, 0),
    END,
};
static const struct conf_section sel_section = {sel_keys, 0,
                                                RES_OFF(struct sel_part, mark)};

struct ns_part {
    struct conf_mark mark;
    char *from;
    struct sel_part selector;
};
static const struct conf_key ns_keys[] = {
    STRD("from", struct ns_part, from, "Same", "All, Same, Selector or None"),
    SEC("selector", struct ns_part, selector, &sel_section,
        "with from: Selector"),
    END,
};
static const struct conf_section ns_section = {ns_keys, 0,
                                               RES_OFF(struct ns_part, mark)};

struct allowed_part {
    struct conf_mark mark;
    struct ns_part namespaces;
    struct conf_list kinds;
};
static const struct conf_key allowed_keys[] = {
    SEC("namespaces", struct allowed_part, namespaces, &ns_section,
        "which namespaces' routes may attach"),
    LIST("kinds", struct allowed_part, kinds, 8, &route_kind_section,
         "route kinds (HTTPRoute)"),
    END,
};
static const struct conf_section allowed_section = {
    allowed_keys, 0, RES_OFF(struct allowed_part, mark)};

static const struct conf_key listener_keys[] = {
    STR("name", L, name, "listener name (required, unique)"),
    STR("hostname", L, hostname, "host or *.suffix; default: any"),
    INT("port", L, port, 1, 65535, NULL, "port (required)"),
    STR("protocol", L, protocol, "HTTP or HTTPS"),
    SEC("tls", L, tls, &tls_section, "HTTPS: certificates"),
    SEC("allowedRoutes", L, allowed_routes, &allowed_section,
        "routes that may attach"),
    END,
};
static const struct conf_section listener_section = {listener_keys, sizeof(L),
                                                     RES_OFF(L, mark)};
#undef L

#define A struct res_gwapi_address
static const struct conf_key address_keys[] = {
    STRD("type", A, type, "IPAddress", "IPAddress"),
    STR("value", A, value, "the IP address to listen on"),
    END,
};
static const struct conf_section address_section = {address_keys, sizeof(A),
                                                    RES_OFF(A, mark)};
#undef A

#define G struct res_k8s_gateway
static const struct conf_key gateway_keys[] = {
    STR("gatewayClassName", G, gateway_class_name, "class (required)"),
    LIST("listeners", G, listeners, RES_GWAPI_MAX_LISTENERS, &listener_section,
         "listeners (1-64)"),
    LIST("addresses", G, addresses, 16, &address_section,
         "IP addresses to listen on; default: all"),
    NO("infrastructure", G, 0),
    NO("tls", G, 1),
    NO("allowedListeners", G, 2),
    NO("backendTLS", G, 3),
    END,
};
#undef G
static const struct conf_section gateway_section = {gateway_keys, 0, SIZE_MAX};

static void check_listener(struct res_check *ck,
                           const struct res_gwapi_listener *l, const char *path)
{
    char p[300];
    const char *why;

    if (str_empty(l->name) ||
        res_valid_label(l->name, strlen(l->name), NULL, &why) < 0)
        res_err(ck, &l->mark, path, "name is required and is a DNS label");
    if (l->port == 0)
        res_err(ck, &l->mark, path, "port is required");
    if (!str_is(l->protocol, "HTTP") && !str_is(l->protocol, "HTTPS")) {
        res_path(p, sizeof(p), "%s.protocol", path);
        res_err(ck, &l->mark, p,
                "protocol '%s' is not supported by strait yet (HTTP or "
                "HTTPS)",
                l->protocol ? l->protocol : "");
    }
    if (l->hostname != NULL) {
        res_path(p, sizeof(p), "%s.hostname", path);
        res_check_host(ck, &l->mark, p, l->hostname, RES_HOST_WILDCARD);
        if (strcmp(l->hostname, "*") == 0)
            res_err(ck, &l->mark, p, "a hostname is not '*' (leave it out)");
    }
    res_path(p, sizeof(p), "%s.tls", path);
    if (str_is(l->protocol, "HTTPS")) {
        if (l->tls.mark.line == 0)
            res_err(ck, &l->mark, p, "an HTTPS listener needs tls");
        else if (!str_is(l->tls.mode, "Terminate"))
            res_err(ck, &l->tls.mark, p,
                    "mode '%s': an HTTPS listener terminates TLS "
                    "(Terminate)",
                    l->tls.mode ? l->tls.mode : "");
        else if (l->tls.certificate_refs.n == 0)
            res_err(ck, &l->tls.mark, p, "certificateRefs is required");
        else if (l->tls.certificate_refs.n > 1)
            res_err(ck, &l->tls.mark, p,
                    "more than one certificateRef is not supported by "
                    "strait yet");
    } else if (l->tls.mark.line > 0)
        res_err(ck, &l->tls.mark, p, "tls is only for an HTTPS listener");
    refuse(ck, &tls_section, &l->tls, p);
    for (size_t i = 0; i < l->tls.certificate_refs.n; i++) {
        const struct res_gwapi_ref *c =
            (const struct res_gwapi_ref *)l->tls.certificate_refs.v + i;
        res_path(p, sizeof(p), "%s.tls.certificateRefs[%zu]", path, i);
        if (str_empty(c->name))
            res_err(ck, &c->mark, p, "name is required");
        if (!str_is(c->kind, "Secret") || !str_empty(c->group))
            res_err(ck, &c->mark, p, "kind %s: only core Secrets",
                    c->kind ? c->kind : "");
        if (c->ns != NULL && strcmp(c->ns, ck->r->meta.ns) != 0)
            res_err(ck, &c->mark, p,
                    "a Secret of another namespace (%s) is not supported "
                    "by strait yet",
                    c->ns);
    }
    res_path(p, sizeof(p), "%s.allowedRoutes.namespaces", path);
    {
        const char *from = l->allowed_routes.namespaces.from;
        if (!str_is(from, "All") && !str_is(from, "Same") &&
            !str_is(from, "Selector") && !str_is(from, "None"))
            res_err(ck, &l->allowed_routes.namespaces.mark, p,
                    "from '%s': All, Same, Selector or None", from ? from : "");
        if (str_is(from, "Selector") &&
            l->allowed_routes.namespaces.selector.mark.line == 0)
            res_err(ck, &l->allowed_routes.namespaces.mark, p,
                    "from: Selector needs a selector");
        res_path(p, sizeof(p), "%s.allowedRoutes.namespaces.selector", path);
        refuse(ck, &sel_section, &l->allowed_routes.namespaces.selector, p);
    }
    for (size_t i = 0; i < l->allowed_routes.kinds.n; i++) {
        const struct res_gwapi_ref *k =
            (const struct res_gwapi_ref *)l->allowed_routes.kinds.v + i;
        res_path(p, sizeof(p), "%s.allowedRoutes.kinds[%zu]", path, i);
        if (!str_is(k->kind, "HTTPRoute") ||
            !str_is(k->group, "gateway.networking.k8s.io"))
            res_err(ck, &k->mark, p,
                    "kind '%s': strait routes HTTPRoute only so far",
                    k->kind ? k->kind : "");
    }
}

static void gateway_check(struct res_check *ck, struct resource *r)
{
    const struct res_k8s_gateway *g = r->spec;
    char p[300];

    if (str_empty(g->gateway_class_name))
        res_err(ck, NULL, "spec.gatewayClassName",
                "gatewayClassName is required");
    if (g->listeners.n == 0)
        res_err(ck, NULL, "spec.listeners", "at least one listener");
    refuse(ck, &gateway_section, g, "spec");
    for (size_t i = 0; i < g->listeners.n; i++) {
        const struct res_gwapi_listener *l =
            (const struct res_gwapi_listener *)g->listeners.v + i;
        res_path(p, sizeof(p), "spec.listeners[%zu]", i);
        check_listener(ck, l, p);
        for (size_t j = 0; j < i; j++) {
            const struct res_gwapi_listener *o =
                (const struct res_gwapi_listener *)g->listeners.v + j;
            if (str_is(o->name, l->name ? l->name : ""))
                res_err(ck, &l->mark, p, "listener name '%s' is used twice",
                        l->name);
            else if (o->port == l->port &&
                     str_is(o->hostname ? o->hostname : "",
                            l->hostname ? l->hostname : ""))
                res_err(ck, &l->mark, p,
                        "listener '%s' has the port and hostname of "
                        "listener '%s' (a conflict)",
                        l->name ? l->name : "", o->name ? o->name : "");
            else if (o->port == l->port &&
                     !str_is(o->protocol ? o->protocol : "",
                             l->protocol ? l->protocol : ""))
                res_err(ck, &l->mark, p,
                        "listener '%s': port %lld is %s in listener '%s' "
                        "(a protocol conflict)",
                        l->name ? l->name : "", (long long)l->port,
                        o->protocol ? o->protocol : "", o->name);
        }
    }
    for (size_t i = 0; i < g->addresses.n; i++) {
        const struct res_gwapi_address *a =
            (const struct res_gwapi_address *)g->addresses.v + i;
        res_path(p, sizeof(p), "spec.addresses[%zu]", i);
        if (!str_is(a->type, "IPAddress"))
            res_err(ck, &a->mark, p,
                    "type '%s' is not supported by strait yet (IPAddress)",
                    a->type ? a->type : "");
        else if (str_empty(a->value))
            res_err(ck, &a->mark, p, "value is required");
        else
            res_check_host(ck, &a->mark, p, a->value, RES_HOST_IP);
    }
}

const struct res_kind_ops res_k8s_gateway_ops = {
    "Gateway", &gateway_section, sizeof(struct res_k8s_gateway), gateway_check};

/* ---- HTTPRoute ------------------------------------------------------------
 */

#define H struct res_gwapi_header
static const struct conf_key hmatch_keys[] = {
    STRD("type", H, type, "Exact", "Exact or RegularExpression"),
    STR("name", H, name, "name (required)"),
    STR("value", H, value, "value (required)"),
    END,
};
static const struct conf_section hmatch_section = {hmatch_keys, sizeof(H),
                                                   RES_OFF(H, mark)};
static const struct conf_key header_keys[] = {
    STR("name", H, name, "header name (required)"),
    STR("value", H, value, "header value"),
    END,
};
static const struct conf_section header_section = {header_keys, sizeof(H),
                                                   RES_OFF(H, mark)};
#undef H

struct path_part {
    struct conf_mark mark;
    char *type;
    char *value;
};
static const struct conf_key path_keys[] = {
    STRD("type", struct path_part, type, "PathPrefix",
         "Exact, PathPrefix or RegularExpression"),
    STRD("value", struct path_part, value, "/", "the path"),
    END,
};
static const struct conf_section path_section = {
    path_keys, 0, RES_OFF(struct path_part, mark)};

#define M struct res_gwapi_match
static const struct conf_key match_keys[] = {
    SEC("path", M, path, &path_section, "path match; default PathPrefix /"),
    LIST("headers", M, headers, 16, &hmatch_section, "header matches (AND)"),
    LIST("queryParams", M, query_params, 16, &hmatch_section,
         "query parameter matches (AND)"),
    STR("method", M, method, "method"),
    END,
};
static const struct conf_section match_section = {match_keys, sizeof(M),
                                                  RES_OFF(M, mark)};
#undef M

#define HM struct res_gwapi_header_mod
static const struct conf_key hmod_keys[] = {
    LIST("set", HM, set, 16, &header_section, "headers to set"),
    LIST("add", HM, add, 16, &header_section, "headers to append"),
    {.name = "remove",
     .type = CONF_STR_LIST,
     .off = RES_OFF(HM, remove),
     .max = 16,
     .help = "headers to remove"},
    END,
};
static const struct conf_section hmod_section = {hmod_keys, 0,
                                                 RES_OFF(HM, mark)};
#undef HM

#define PM struct res_gwapi_path_mod
static const struct conf_key pmod_keys[] = {
    STR("type", PM, type, "ReplaceFullPath or ReplacePrefixMatch"),
    STR("replaceFullPath", PM, replace_full_path, "the new path"),
    STR("replacePrefixMatch", PM, replace_prefix_match,
        "what replaces the matched prefix"),
    END,
};
static const struct conf_section pmod_section = {pmod_keys, 0,
                                                 RES_OFF(PM, mark)};
#undef PM

#define F struct res_gwapi_filter
struct mirror_part {
    struct conf_mark mark;
    struct res_gwapi_ref backend_ref;
    struct conf_mark refused[RES_GWAPI_REFUSED];
};
static const struct conf_key mirror_keys[] = {
    {.name = "backendRef",
     .type = CONF_SECTION,
     .off = RES_OFF(struct mirror_part, backend_ref),
     .sub = &mirror_ref_section,
     .help = "the Service that gets a copy"},
    NO("percent", struct mirror_part, 0),
    NO("fraction", struct mirror_part, 1),
    END,
};
static const struct conf_section mirror_section = {
    mirror_keys, 0, RES_OFF(struct mirror_part, mark)};

struct redirect_part {
    struct conf_mark mark;
    char *scheme;
    char *hostname;
    struct res_gwapi_path_mod path;
    int64_t port;
    int64_t status_code;
};
static const struct conf_key redirect_keys[] = {
    STR("scheme", struct redirect_part, scheme, "http or https"),
    STR("hostname", struct redirect_part, hostname, "the new host"),
    SEC("path", struct redirect_part, path, &pmod_section, "the new path"),
    INT("port", struct redirect_part, port, 1, 65535, NULL, "the new port"),
    INT("statusCode", struct redirect_part, status_code, 301, 308, "302",
        "301, 302, 303, 307 or 308"),
    END,
};
static const struct conf_section redirect_section = {
    redirect_keys, 0, RES_OFF(struct redirect_part, mark)};

struct rewrite_part {
    struct conf_mark mark;
    char *hostname;
    struct res_gwapi_path_mod path;
};
static const struct conf_key rewrite_keys[] = {
    STR("hostname", struct rewrite_part, hostname, "the new Host"),
    SEC("path", struct rewrite_part, path, &pmod_section, "the new path"),
    END,
};
static const struct conf_section rewrite_section = {
    rewrite_keys, 0, RES_OFF(struct rewrite_part, mark)};

static const struct conf_key filter_keys[] = {
    STR("type", F, type, "filter type (required)"),
    SEC("requestHeaderModifier", F, request_header_modifier, &hmod_section,
        "request header changes"),
    SEC("responseHeaderModifier", F, response_header_modifier, &hmod_section,
        "response header changes"),
    SEC("requestMirror", F, request_mirror, &mirror_section, "mirror"),
    SEC("requestRedirect", F, request_redirect, &redirect_section, "redirect"),
    SEC("urlRewrite", F, url_rewrite, &rewrite_section, "rewrite"),
    NO("cors", F, 0),
    NO("externalAuth", F, 1),
    NO("extensionRef", F, 2),
    END,
};
static const struct conf_section filter_section = {filter_keys, sizeof(F),
                                                   RES_OFF(F, mark)};
#undef F

#define RU struct res_gwapi_rule
struct timeouts_part {
    struct conf_mark mark;
    int64_t request_ms;
    int64_t backend_request_ms;
};
static const struct conf_key timeouts_keys[] = {
    {.name = "request",
     .type = CONF_DURATION,
     .off = RES_OFF(struct timeouts_part, request_ms),
     .max = INT64_C(365) * 24 * 3600 * 1000,
     .help = "the whole request; 0s: none"},
    {.name = "backendRequest",
     .type = CONF_DURATION,
     .off = RES_OFF(struct timeouts_part, backend_request_ms),
     .max = INT64_C(365) * 24 * 3600 * 1000,
     .help = "each request to a backend; 0s: none"},
    END,
};
static const struct conf_section timeouts_section = {
    timeouts_keys, 0, RES_OFF(struct timeouts_part, mark)};

static const struct conf_key rule_keys[] = {
    STR("name", RU, name, "rule name"),
    LIST("matches", RU, matches, RES_GWAPI_MAX_MATCHES, &match_section,
         "matches (any); default: PathPrefix /"),
    LIST("filters", RU, filters, 16, &filter_section, "filters"),
    LIST("backendRefs", RU, backend_refs, 16, &backend_ref_section,
         "weighted Services"),
    SEC("timeouts", RU, timeouts, &timeouts_section, "timeouts"),
    NO("retry", RU, 0),
    NO("sessionPersistence", RU, 1),
    END,
};
static const struct conf_section rule_section = {rule_keys, sizeof(RU),
                                                 RES_OFF(RU, mark)};
#undef RU

#define HR struct res_http_route_gw
static const struct conf_key route_keys[] = {
    LIST("parentRefs", HR, parent_refs, 32, &parent_ref_section,
         "Gateways (and listeners) to attach to"),
    {.name = "hostnames",
     .type = CONF_STR_LIST,
     .off = RES_OFF(HR, hostnames),
     .max = 16,
     .help = "hosts; default: the listener's"},
    LIST("rules", HR, rules, RES_GWAPI_MAX_RULES, &rule_section, "rules"),
    END,
};
#undef HR
static const struct conf_section route_section = {route_keys, 0, SIZE_MAX};

static const char *const methods[] = {"GET",    "HEAD",    "POST",    "PUT",
                                      "DELETE", "CONNECT", "OPTIONS", "TRACE",
                                      "PATCH",  NULL};

static void check_regex(struct res_check *ck, const struct conf_mark *m,
                        const char *path, const char *re)
{
    char why[300];

    if (res_regex_check(re, why, sizeof(why)) < 0)
        res_err(ck, m, path, "regex '%s': %s", re, why);
}

static void check_hmatches(struct res_check *ck, const struct conf_list *l,
                           const char *path)
{
    char p[300];

    for (size_t i = 0; i < l->n; i++) {
        const struct res_gwapi_header *h =
            (const struct res_gwapi_header *)l->v + i;
        res_path(p, sizeof(p), "%s[%zu]", path, i);
        if (str_empty(h->name) || h->value == NULL)
            res_err(ck, &h->mark, p, "name and value are required");
        else if (str_is(h->type, "RegularExpression"))
            check_regex(ck, &h->mark, p, h->value);
        else if (!str_is(h->type, "Exact"))
            res_err(ck, &h->mark, p, "type '%s': Exact or RegularExpression",
                    h->type ? h->type : "");
        for (size_t j = 0; j < i && !str_empty(h->name); j++)
            if (str_is(((const struct res_gwapi_header *)l->v)[j].name,
                       h->name))
                res_err(ck, &h->mark, p, "'%s' is matched twice", h->name);
    }
}

static void check_hmod(struct res_check *ck,
                       const struct res_gwapi_header_mod *m, const char *path)
{
    char p[300];
    const struct conf_list *ls[2] = {&m->set, &m->add};

    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < ls[k]->n; i++) {
            const struct res_gwapi_header *h =
                (const struct res_gwapi_header *)ls[k]->v + i;
            res_path(p, sizeof(p), "%s.%s[%zu]", path, k ? "add" : "set", i);
            if (str_empty(h->name) || h->value == NULL)
                res_err(ck, &h->mark, p, "name and value are required");
        }
}

static void check_pmod(struct res_check *ck, const struct res_gwapi_path_mod *m,
                       const struct res_gwapi_rule *rule, const char *path)
{
    if (m->mark.line == 0)
        return;
    if (str_is(m->type, "ReplaceFullPath")) {
        if (m->replace_full_path == NULL || m->replace_prefix_match != NULL)
            res_err(ck, &m->mark, path,
                    "ReplaceFullPath takes replaceFullPath only");
    } else if (str_is(m->type, "ReplacePrefixMatch")) {
        if (m->replace_prefix_match == NULL || m->replace_full_path != NULL)
            res_err(ck, &m->mark, path,
                    "ReplacePrefixMatch takes replacePrefixMatch only");
        for (size_t i = 0; i < rule->matches.n; i++) {
            const struct res_gwapi_match *mt =
                (const struct res_gwapi_match *)rule->matches.v + i;
            if (!str_is(mt->path.type, "PathPrefix")) {
                res_err(ck, &m->mark, path,
                        "ReplacePrefixMatch needs every match of the rule "
                        "to be a PathPrefix match (matches[%zu] is not)",
                        i);
                break;
            }
        }
    } else
        res_err(ck, &m->mark, path,
                "type '%s': ReplaceFullPath or ReplacePrefixMatch",
                m->type ? m->type : "");
}

static void check_filter(struct res_check *ck, const struct res_gwapi_filter *f,
                         const struct res_gwapi_rule *rule, const char *path)
{
    char p[300];
    static const struct {
        const char *type;
        size_t off;
    } types[] = {
        {"RequestHeaderModifier",
         offsetof(struct res_gwapi_filter, request_header_modifier.mark)},
        {"ResponseHeaderModifier",
         offsetof(struct res_gwapi_filter, response_header_modifier.mark)},
        {"RequestMirror",
         offsetof(struct res_gwapi_filter, request_mirror.mark)},
        {"RequestRedirect",
         offsetof(struct res_gwapi_filter, request_redirect.mark)},
        {"URLRewrite", offsetof(struct res_gwapi_filter, url_rewrite.mark)},
    };
    size_t t, given = 0;

    refuse(ck, &filter_section, f, path);
    for (t = 0; t < sizeof(types) / sizeof(*types); t++)
        given +=
            ((const struct conf_mark *)((const char *)f + types[t].off))->line >
            0;
    for (t = 0; t < sizeof(types) / sizeof(*types); t++)
        if (str_is(f->type, types[t].type))
            break;
    if (t == sizeof(types) / sizeof(*types)) {
        if (str_is(f->type, "CORS") || str_is(f->type, "ExternalAuth") ||
            str_is(f->type, "ExtensionRef"))
            res_err(ck, &f->mark, path,
                    "filter type %s is not supported by strait yet", f->type);
        else
            res_err(ck, &f->mark, path, "type '%s' is not a filter type",
                    f->type ? f->type : "");
        return;
    }
    if (given != 1 ||
        ((const struct conf_mark *)((const char *)f + types[t].off))->line ==
            0) {
        res_err(ck, &f->mark, path,
                "a %s filter has its own field and no other", f->type);
        return;
    }
    if (str_is(f->type, "RequestHeaderModifier")) {
        res_path(p, sizeof(p), "%s.requestHeaderModifier", path);
        check_hmod(ck, &f->request_header_modifier, p);
    } else if (str_is(f->type, "ResponseHeaderModifier")) {
        res_path(p, sizeof(p), "%s.responseHeaderModifier", path);
        check_hmod(ck, &f->response_header_modifier, p);
    } else if (str_is(f->type, "RequestMirror")) {
        res_path(p, sizeof(p), "%s.requestMirror.backendRef", path);
        check_backend_ref(ck, &f->request_mirror.backend_ref, p);
        res_path(p, sizeof(p), "%s.requestMirror", path);
        refuse(ck, &mirror_section, &f->request_mirror, p);
    } else if (str_is(f->type, "RequestRedirect")) {
        int64_t c = f->request_redirect.status_code;
        res_path(p, sizeof(p), "%s.requestRedirect", path);
        if (c != 301 && c != 302 && c != 303 && c != 307 && c != 308)
            res_err(ck, &f->request_redirect.mark, p,
                    "statusCode %lld: 301, 302, 303, 307 or 308", (long long)c);
        if (f->request_redirect.scheme != NULL &&
            !str_is(f->request_redirect.scheme, "http") &&
            !str_is(f->request_redirect.scheme, "https"))
            res_err(ck, &f->request_redirect.mark, p,
                    "scheme '%s': http or https", f->request_redirect.scheme);
        if (f->request_redirect.hostname != NULL)
            res_check_host(ck, &f->request_redirect.mark, p,
                           f->request_redirect.hostname, 0);
        if (str_is(f->request_redirect.path.type, "ReplacePrefixMatch"))
            res_err(ck, &f->request_redirect.path.mark, p,
                    "path type ReplacePrefixMatch in a redirect is not "
                    "supported by strait yet (ReplaceFullPath is)");
        else
            check_pmod(ck, &f->request_redirect.path, rule, p);
    } else {
        res_path(p, sizeof(p), "%s.urlRewrite", path);
        if (f->url_rewrite.hostname != NULL)
            res_check_host(ck, &f->url_rewrite.mark, p, f->url_rewrite.hostname,
                           0);
        check_pmod(ck, &f->url_rewrite.path, rule, p);
    }
}

static void check_rule(struct res_check *ck, const struct res_gwapi_rule *rule,
                       const char *path)
{
    char p[300];
    int redirect = 0, rewrite = 0, mods[2] = {0, 0};

    refuse(ck, &rule_section, rule, path);
    for (size_t i = 0; i < rule->matches.n; i++) {
        const struct res_gwapi_match *m =
            (const struct res_gwapi_match *)rule->matches.v + i;
        res_path(p, sizeof(p), "%s.matches[%zu].path", path, i);
        if (str_is(m->path.type, "RegularExpression"))
            check_regex(ck, &m->path.mark, p, m->path.value);
        else if (!str_is(m->path.type, "Exact") &&
                 !str_is(m->path.type, "PathPrefix"))
            res_err(ck, &m->path.mark, p,
                    "type '%s': Exact, PathPrefix or RegularExpression",
                    m->path.type ? m->path.type : "");
        else if (m->path.value[0] != '/' || strstr(m->path.value, "//") ||
                 strchr(m->path.value, '?') || strchr(m->path.value, '#'))
            res_err(ck, &m->path.mark, p,
                    "value '%s' is an absolute path without '//', '?' or "
                    "'#'",
                    m->path.value);
        res_path(p, sizeof(p), "%s.matches[%zu].headers", path, i);
        check_hmatches(ck, &m->headers, p);
        res_path(p, sizeof(p), "%s.matches[%zu].queryParams", path, i);
        check_hmatches(ck, &m->query_params, p);
        if (m->method != NULL) {
            size_t k;
            for (k = 0; methods[k] != NULL; k++)
                if (strcmp(methods[k], m->method) == 0)
                    break;
            res_path(p, sizeof(p), "%s.matches[%zu].method", path, i);
            if (methods[k] == NULL)
                res_err(ck, &m->mark, p, "'%s' is not an HTTP method",
                        m->method);
        }
    }
    for (size_t i = 0; i < rule->filters.n; i++) {
        const struct res_gwapi_filter *f =
            (const struct res_gwapi_filter *)rule->filters.v + i;
        res_path(p, sizeof(p), "%s.filters[%zu]", path, i);
        check_filter(ck, f, rule, p);
        redirect += str_is(f->type, "RequestRedirect");
        rewrite += str_is(f->type, "URLRewrite");
        mods[0] += str_is(f->type, "RequestHeaderModifier");
        mods[1] += str_is(f->type, "ResponseHeaderModifier");
        if (str_is(f->type, "RequestMirror") && i > 0)
            for (size_t j = 0; j < i; j++)
                if (str_is(((const struct res_gwapi_filter *)rule->filters.v)[j]
                               .type,
                           "RequestMirror"))
                    res_err(ck, &f->mark, p,
                            "a second RequestMirror is not supported by "
                            "strait yet");
    }
    res_path(p, sizeof(p), "%s.filters", path);
    if (redirect > 1 || rewrite > 1 || mods[0] > 1 || mods[1] > 1)
        res_err(ck, &rule->mark, p,
                "each of RequestRedirect, URLRewrite, RequestHeaderModifier "
                "and ResponseHeaderModifier may be used once");
    if (redirect && rewrite)
        res_err(ck, &rule->mark, p,
                "RequestRedirect and URLRewrite cannot be used together");
    if (redirect && rule->backend_refs.n > 0)
        res_err(ck, &rule->mark, p,
                "RequestRedirect and backendRefs cannot be used together");
    for (size_t i = 0; i < rule->backend_refs.n; i++) {
        const struct res_gwapi_ref *b =
            (const struct res_gwapi_ref *)rule->backend_refs.v + i;
        res_path(p, sizeof(p), "%s.backendRefs[%zu]", path, i);
        /* An unknown backend kind is no schema error: the spec answers
         * its share of the requests 500 (ResolvedRefs InvalidKind). */
        if (str_empty(b->name))
            res_err(ck, &b->mark, p, "name is required");
        else if (str_is(b->kind, "Service") && str_empty(b->group) &&
                 b->port == 0)
            res_err(ck, &b->mark, p, "port is required for a Service");
        refuse(ck, &backend_ref_section, b, p);
    }
    if (rule->timeouts.request_ms > 0 &&
        rule->timeouts.backend_request_ms > rule->timeouts.request_ms) {
        res_path(p, sizeof(p), "%s.timeouts", path);
        res_err(ck, &rule->timeouts.mark, p,
                "backendRequest is longer than request");
    }
}

static void route_check(struct res_check *ck, struct resource *r)
{
    const struct res_http_route_gw *h = r->spec;
    char p[300];
    size_t nmatch = 0;

    for (size_t i = 0; i < h->parent_refs.n; i++) {
        const struct res_gwapi_ref *pr =
            (const struct res_gwapi_ref *)h->parent_refs.v + i;
        res_path(p, sizeof(p), "spec.parentRefs[%zu]", i);
        if (str_empty(pr->name))
            res_err(ck, &pr->mark, p, "name is required");
        if (!str_is(pr->kind, "Gateway") ||
            !str_is(pr->group, "gateway.networking.k8s.io"))
            res_err(ck, &pr->mark, p,
                    "parent kind '%s': strait attaches routes to Gateways "
                    "only so far",
                    pr->kind ? pr->kind : "");
    }
    for (size_t i = 0; i < h->hostnames.n; i++) {
        res_path(p, sizeof(p), "spec.hostnames[%zu]", i);
        res_check_host(ck, NULL, p, h->hostnames.v[i], RES_HOST_WILDCARD);
        if (strcmp(h->hostnames.v[i], "*") == 0)
            res_err(ck, NULL, p, "a hostname is not '*' (leave it out)");
    }
    for (size_t i = 0; i < h->rules.n; i++) {
        const struct res_gwapi_rule *rule =
            (const struct res_gwapi_rule *)h->rules.v + i;
        res_path(p, sizeof(p), "spec.rules[%zu]", i);
        check_rule(ck, rule, p);
        nmatch += rule->matches.n;
    }
    /* The API's own limit across the rules of one route. */
    if (nmatch > RES_GWAPI_MAX_ROUTE_MATCHES)
        res_err(ck, NULL, "spec.rules",
                "%zu matches in all; a route has at most %d", nmatch,
                RES_GWAPI_MAX_ROUTE_MATCHES);
}

const struct res_kind_ops res_http_route_ops = {
    "HTTPRoute", &route_section, sizeof(struct res_http_route_gw), route_check};
