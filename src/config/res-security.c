/*
 * security.istio.io: AuthorizationPolicy and PeerAuthentication, with
 * Istio's defaults and the checks its validation makes: CIDRs and ports
 * that parse, path templates ({*} and {**}) where Istio allows them,
 * condition keys strait can evaluate, and providers for CUSTOM.
 */
#include "config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/res-kinds.h"
#include "config/resource.h"
#include "policy/authz.h"

static const char *const authz_actions[] = {"ALLOW", "DENY", "AUDIT", "CUSTOM",
                                            NULL};
static const char *const mtls_modes[] = {"UNSET", "DISABLE", "PERMISSIVE",
                                         "STRICT", NULL};

#define STRS(key, field, T, h)                                                 \
    {                                                                          \
        .name = key, .type = CONF_STR_LIST, .off = RES_OFF(T, field),          \
        .max = 10000, .help = h                                                \
    }

#define SRC(k, f, h) STRS(k, f, struct res_authz_source, h)
static const struct conf_key source_keys[] = {
    SRC("principals", principals, "peer identities (trust-domain/ns/NS/sa/SA)"),
    SRC("notPrincipals", not_principals, "peer identities that must not match"),
    SRC("requestPrincipals", request_principals, "JWT issuer/subject"),
    SRC("notRequestPrincipals", not_request_principals, "JWT issuer/subject"),
    SRC("namespaces", namespaces, "peer namespaces (from the peer identity)"),
    SRC("notNamespaces", not_namespaces, "peer namespaces that must not match"),
    SRC("ipBlocks", ip_blocks, "peer addresses or CIDRs"),
    SRC("notIpBlocks", not_ip_blocks, "peer addresses that must not match"),
    SRC("remoteIpBlocks", remote_ip_blocks,
        "client addresses (X-Forwarded-For after trusted hops)"),
    SRC("notRemoteIpBlocks", not_remote_ip_blocks,
        "client addresses that must not match"),
    {.name = NULL},
};
#undef SRC
static const struct conf_section source_section = {
    source_keys, 0, RES_OFF(struct res_authz_source, mark)};

static const struct conf_key from_keys[] = {
    {.name = "source",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_authz_from, source),
     .help = "who sends the request",
     .sub = &source_section},
    {.name = NULL},
};
static const struct conf_section from_section = {
    from_keys, sizeof(struct res_authz_from),
    RES_OFF(struct res_authz_from, mark)};

#define OP(k, f, h) STRS(k, f, struct res_authz_operation, h)
static const struct conf_key operation_keys[] = {
    OP("hosts", hosts, "Host/:authority: exact, *suffix or prefix*"),
    OP("notHosts", not_hosts, "hosts that must not match"),
    OP("ports", ports, "destination ports"),
    OP("notPorts", not_ports, "ports that must not match"),
    OP("methods", methods, "HTTP methods"),
    OP("notMethods", not_methods, "methods that must not match"),
    OP("paths", paths,
       "paths: exact, prefix*, *suffix, * or {*}/{**} "
       "templates"),
    OP("notPaths", not_paths, "paths that must not match"),
    {.name = NULL},
};
#undef OP
static const struct conf_section operation_section = {
    operation_keys, 0, RES_OFF(struct res_authz_operation, mark)};

static const struct conf_key to_keys[] = {
    {.name = "operation",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_authz_to, operation),
     .help = "what the request does",
     .sub = &operation_section},
    {.name = NULL},
};
static const struct conf_section to_section = {
    to_keys, sizeof(struct res_authz_to), RES_OFF(struct res_authz_to, mark)};

#define CO(f) RES_OFF(struct res_authz_condition, f)
static const struct conf_key condition_keys[] = {
    {.name = "key",
     .type = CONF_STR,
     .off = CO(key),
     .help = "request.headers[NAME], source.ip, remote.ip, source.namespace, "
             "source.principal, destination.port, connection.sni, "
             "request.auth.principal, request.auth.audiences, "
             "request.auth.presenter, request.auth.claims[NAME]..., and "
             "strait's source.geo.country|city|region|asn|asnOrg|isp|anon|"
             "anonVpn|anonHosting|anonTor|anonProxy (required)"},
    STRS("values", values, struct res_authz_condition, "values that match"),
    STRS("notValues", not_values, struct res_authz_condition,
         "values that must not match"),
    {.name = NULL},
};
#undef CO
static const struct conf_section condition_section = {
    condition_keys, sizeof(struct res_authz_condition),
    RES_OFF(struct res_authz_condition, mark)};

#define RU(f) RES_OFF(struct res_authz_rule, f)
static const struct conf_key rule_keys[] = {
    {.name = "from",
     .type = CONF_LIST,
     .off = RU(from),
     .max = 10000,
     .help = "sources; any may match",
     .sub = &from_section},
    {.name = "to",
     .type = CONF_LIST,
     .off = RU(to),
     .max = 10000,
     .help = "operations; any may match",
     .sub = &to_section},
    {.name = "when",
     .type = CONF_LIST,
     .off = RU(when),
     .max = 10000,
     .help = "conditions; all must match",
     .sub = &condition_section},
    {.name = NULL},
};
#undef RU
static const struct conf_section rule_section = {
    rule_keys, sizeof(struct res_authz_rule),
    RES_OFF(struct res_authz_rule, mark)};

#define AP(f) RES_OFF(struct res_authorization_policy, f)
static const struct conf_key selector_keys[] = {
    {.name = "matchLabels",
     .type = CONF_STR_MAP,
     .off = RES_OFF(struct res_authorization_policy, selector.match_labels) -
            RES_OFF(struct res_authorization_policy, selector),
     .help = "labels of the workloads (here: node.labels)"},
    {.name = NULL},
};
static const struct conf_section ap_selector_section = {selector_keys, 0, 0};

static const struct conf_key provider_keys[] = {
    {.name = "name",
     .type = CONF_STR,
     .off = RES_OFF(struct res_authorization_policy, provider.name) -
            RES_OFF(struct res_authorization_policy, provider),
     .help = "extension provider of a CUSTOM policy"},
    {.name = NULL},
};
static const struct conf_section provider_section = {provider_keys, 0, 0};

static const struct conf_key ap_keys[] = {
    {.name = "selector",
     .type = CONF_SECTION,
     .off = AP(selector),
     .help = "the workloads it applies to; none: the namespace's (the root "
             "namespace's: the mesh's)",
     .sub = &ap_selector_section},
    {.name = "targetRef",
     .type = CONF_IGNORE,
     .off = AP(target_ref),
     .help = "Kubernetes Gateway API targets: not used by strait"},
    {.name = "targetRefs",
     .type = CONF_IGNORE,
     .off = AP(target_refs),
     .help = "Kubernetes Gateway API targets: not used by strait"},
    {.name = "action",
     .type = CONF_ENUM,
     .off = AP(action),
     .def = "ALLOW",
     .help = "ALLOW, DENY, AUDIT or CUSTOM",
     .enums = authz_actions},
    {.name = "provider",
     .type = CONF_SECTION,
     .off = AP(provider),
     .help = "CUSTOM: the extension provider",
     .sub = &provider_section},
    {.name = "rules",
     .type = CONF_LIST,
     .off = AP(rules),
     .max = 10000,
     .help = "rules; any may match (none: matches nothing)",
     .sub = &rule_section},
    {.name = NULL},
};
#undef AP
static const struct conf_section ap_section = {ap_keys, 0, SIZE_MAX};

/* ---- checks ------------------------------------------------------------- */

static int cidr_ok(const char *s)
{
    char ip[64];
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    unsigned char buf[16];
    int v6, max;
    char *end;
    long bits;

    if (n == 0 || n >= sizeof(ip))
        return 0;
    memcpy(ip, s, n);
    ip[n] = '\0';
    v6 = strchr(ip, ':') != NULL;
    if (inet_pton(v6 ? AF_INET6 : AF_INET, ip, buf) != 1)
        return 0;
    if (slash == NULL)
        return 1;
    max = v6 ? 128 : 32;
    bits = strtol(slash + 1, &end, 10);
    return slash[1] != '\0' && *end == '\0' && bits >= 0 && bits <= max;
}

/* Istio's path templates: {*} is one whole segment, {**} the rest of the
 * path and only last; a template has no other '*' and no '{' or '}' but
 * in those operators. Plain paths are exact, "prefix*", "*suffix" or "*". */
static const char *path_error(const char *p)
{
    size_t n = strlen(p);

    if (strstr(p, "{*}") == NULL && strstr(p, "{**}") == NULL) {
        const char *star = strchr(p, '*');
        if (strchr(p, '{') || strchr(p, '}'))
            return "'{' and '}' only in the operators {*} and {**}";
        if (star != NULL && star != p && star != p + n - 1)
            return "'*' only at the start or the end (or use {*} and {**})";
        if (star != NULL && strchr(star + 1, '*') != NULL && n > 1)
            return "one '*' at most";
        return NULL;
    }
    for (const char *seg = p; *seg != '\0';) {
        const char *end = strchr(seg + 1, '/');
        size_t len = end ? (size_t)(end - seg) : strlen(seg);
        if (seg[0] != '/')
            return "a path template starts with '/'";
        if ((len == 4 && strncmp(seg, "/{*}", 4) == 0)) {
            /* one segment */
        } else if (len == 5 && strncmp(seg, "/{**}", 5) == 0) {
            if (end != NULL)
                return "{**} must be the last segment";
        } else if (memchr(seg, '{', len) || memchr(seg, '}', len) ||
                   memchr(seg, '*', len)) {
            return "{*} and {**} must each be a whole segment, and no other "
                   "'*' may be in a template";
        }
        if (end == NULL)
            break;
        seg = end;
    }
    return NULL;
}

static int port_ok(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);

    return s[0] != '\0' && *end == '\0' && v >= 0 && v <= 65535;
}

/* The condition keys strait evaluates, and those it knows but cannot
 * (request.regex.headers, experimental.*). */
static int when_key_ok(const char *k, int *unsupported)
{
    static const char *const keys[] = {
        "source.ip",
        "remote.ip",
        "source.namespace",
        "source.principal",
        "destination.port",
        "connection.sni",
        "destination.ip",
        "request.auth.principal",
        "request.auth.audiences",
        "request.auth.presenter",
        NULL,
    };
    int depth;
    size_t n = strlen(k);

    *unsupported = 0;
    for (int i = 0; keys[i] != NULL; i++)
        if (strcmp(k, keys[i]) == 0)
            return 1;
    if (n > strlen("request.headers[]") &&
        strncmp(k, "request.headers[", 16) == 0 && k[n - 1] == ']')
        return 1;
    /* strait's extension: the client's GeoIP result (bootstrap geoip). */
    if (strncmp(k, "source.geo.", 11) == 0 &&
        geoip_field_by_name(k + 11, n - 11) >= 0)
        return 1;
    depth = authz_claim_path(k, NULL, NULL);
    if (depth > 0)
        return depth <= 10; /* authz.c follows ten levels of nesting */
    if (strcmp(k, "request.regex.headers") == 0 ||
        strncmp(k, "experimental.", 13) == 0) {
        *unsupported = 1;
        return 1;
    }
    return 0;
}

static void check_strs(struct res_check *ck, const struct conf_mark *m,
                       const char *path, const char *field,
                       const struct conf_strs *v, int kind)
{
    char p[256];

    for (size_t i = 0; i < v->n; i++) {
        const char *why = NULL;
        res_path(p, sizeof(p), "%s.%s[%zu]", path, field, i);
        if (kind == 'c' && !cidr_ok(v->v[i]))
            why = "not an IP address or CIDR";
        else if (kind == 'p' && !port_ok(v->v[i]))
            why = "not a port (0-65535)";
        else if (kind == 'P')
            why = path_error(v->v[i]);
        if (why != NULL)
            res_err(ck, m, p, "'%s': %s", v->v[i], why);
    }
}

static void ap_check(struct res_check *ck, struct resource *r)
{
    const struct res_authorization_policy *ap = r->spec;
    char p[200];

    if (ap->target_ref.line > 0 || ap->target_refs.line > 0)
        res_warn(ck,
                 ap->target_ref.line > 0 ? &ap->target_ref : &ap->target_refs,
                 "spec.targetRef",
                 "targetRef is for Kubernetes Gateway API resources and is "
                 "ignored: the policy applies by its selector");
    if (ap->action == RES_AUTHZ_CUSTOM &&
        (ap->provider.name == NULL || ap->provider.name[0] == '\0'))
        res_err(ck, NULL, "spec.provider",
                "action CUSTOM needs an extension provider");
    else if (ap->action == RES_AUTHZ_CUSTOM)
        res_warn(ck, &ap->provider.mark, "spec.provider",
                 "strait has no extension provider '%s': requests this "
                 "policy's rules match are denied",
                 ap->provider.name);
    if (ap->action != RES_AUTHZ_CUSTOM && ap->provider.mark.line > 0)
        res_err(ck, &ap->provider.mark, "spec.provider",
                "provider is only for action CUSTOM");
    for (size_t i = 0; i < ap->rules.n; i++) {
        const struct res_authz_rule *ru =
            (const struct res_authz_rule *)ap->rules.v + i;
        for (size_t k = 0; k < ru->from.n; k++) {
            const struct res_authz_source *s =
                &((const struct res_authz_from *)ru->from.v)[k].source;
            res_path(p, sizeof(p), "spec.rules[%zu].from[%zu].source", i, k);
            check_strs(ck, &s->mark, p, "ipBlocks", &s->ip_blocks, 'c');
            check_strs(ck, &s->mark, p, "notIpBlocks", &s->not_ip_blocks, 'c');
            check_strs(ck, &s->mark, p, "remoteIpBlocks", &s->remote_ip_blocks,
                       'c');
            check_strs(ck, &s->mark, p, "notRemoteIpBlocks",
                       &s->not_remote_ip_blocks, 'c');
        }
        for (size_t k = 0; k < ru->to.n; k++) {
            const struct res_authz_operation *o =
                &((const struct res_authz_to *)ru->to.v)[k].operation;
            res_path(p, sizeof(p), "spec.rules[%zu].to[%zu].operation", i, k);
            check_strs(ck, &o->mark, p, "ports", &o->ports, 'p');
            check_strs(ck, &o->mark, p, "notPorts", &o->not_ports, 'p');
            check_strs(ck, &o->mark, p, "paths", &o->paths, 'P');
            check_strs(ck, &o->mark, p, "notPaths", &o->not_paths, 'P');
        }
        for (size_t k = 0; k < ru->when.n; k++) {
            const struct res_authz_condition *c =
                (const struct res_authz_condition *)ru->when.v + k;
            int unsupported;
            res_path(p, sizeof(p), "spec.rules[%zu].when[%zu]", i, k);
            if (c->key == NULL) {
                res_err(ck, &c->mark, p, "missing key 'key'");
                continue;
            }
            if (!when_key_ok(c->key, &unsupported))
                res_err(ck, &c->mark, p, "unknown condition key '%s'", c->key);
            else if (unsupported)
                res_warn(ck, &c->mark, p,
                         "'%s' is not evaluated by strait: this condition "
                         "never matches",
                         c->key);
            if (c->values.n == 0 && c->not_values.n == 0)
                res_err(ck, &c->mark, p, "values or notValues is required");
            if (strcmp(c->key, "source.ip") == 0 ||
                strcmp(c->key, "remote.ip") == 0 ||
                strcmp(c->key, "destination.ip") == 0) {
                check_strs(ck, &c->mark, p, "values", &c->values, 'c');
                check_strs(ck, &c->mark, p, "notValues", &c->not_values, 'c');
            } else if (strcmp(c->key, "destination.port") == 0) {
                check_strs(ck, &c->mark, p, "values", &c->values, 'p');
                check_strs(ck, &c->mark, p, "notValues", &c->not_values, 'p');
            }
        }
    }
}

const struct res_kind_ops res_authorization_policy_ops = {
    "AuthorizationPolicy", &ap_section, sizeof(struct res_authorization_policy),
    ap_check};

/* ---- PeerAuthentication ------------------------------------------------- */

static const struct conf_key mtls_keys[] = {
    {.name = "mode",
     .type = CONF_ENUM,
     .off = RES_OFF(struct res_mtls, mode),
     .def = "UNSET",
     .help = "UNSET (inherit), DISABLE, PERMISSIVE or STRICT",
     .enums = mtls_modes},
    {.name = NULL},
};
static const struct conf_section mtls_section = {
    mtls_keys, sizeof(struct res_mtls), RES_OFF(struct res_mtls, mark)};

#define PA(f) RES_OFF(struct res_peer_authentication, f)
static const struct conf_key pa_keys[] = {
    {.name = "selector",
     .type = CONF_SECTION,
     .off = PA(selector),
     .help = "the workloads it applies to; none: the namespace's (the root "
             "namespace's: the mesh's)",
     .sub = &ap_selector_section},
    {.name = "mtls",
     .type = CONF_SECTION,
     .off = PA(mtls),
     .help = "mutual TLS mode",
     .sub = &mtls_section},
    {.name = "portLevelMtls",
     .type = CONF_MAP,
     .off = PA(port_level_mtls),
     .help = "port number to its mutual TLS mode (needs a selector)",
     .sub = &mtls_section},
    {.name = NULL},
};
#undef PA
static const struct conf_section pa_section = {pa_keys, 0, SIZE_MAX};

static void pa_check(struct res_check *ck, struct resource *r)
{
    const struct res_peer_authentication *pa = r->spec;
    char p[128];

    for (size_t i = 0; i < pa->port_level_mtls.n; i++) {
        res_path(p, sizeof(p), "spec.portLevelMtls.%s",
                 pa->port_level_mtls.keys[i]);
        if (!port_ok(pa->port_level_mtls.keys[i]) ||
            strcmp(pa->port_level_mtls.keys[i], "0") == 0)
            res_err(ck, NULL, p, "'%s' is not a port (1-65535)",
                    pa->port_level_mtls.keys[i]);
    }
    if (pa->port_level_mtls.n > 0 && pa->selector.match_labels.n == 0)
        res_err(ck, NULL, "spec.portLevelMtls",
                "portLevelMtls needs a selector (Istio's rule)");
}

const struct res_kind_ops res_peer_authentication_ops = {
    "PeerAuthentication", &pa_section, sizeof(struct res_peer_authentication),
    pa_check};
