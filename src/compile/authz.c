/*
 * AuthorizationPolicy compiled for this node (see compile/authz.h): which
 * policies apply, and their rules turned into the matchers, IP blocks and
 * ports of policy/authz-t.h that authz_check() evaluates per request.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/authz.h"
#include "config/resource.h"
#include "core/arena.h"
#include "core/err.h"
#include "policy/authz.h"

static int compile_mset(struct arena *a, const struct conf_strs *in, int paths,
                        struct authz_mset *out)
{
    struct authz_matcher *v;

    out->v = NULL;
    out->n = 0;
    if (in->n == 0)
        return 0;
    v = arena_alloc(a, in->n * sizeof(*v));
    if (v == NULL)
        return -1;
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->v[i];
        size_t n = strlen(s);
        struct authz_matcher *m = &v[i];

        if (strcmp(s, "*") == 0) {
            m->kind = AUTHZ_M_ANY;
            m->s = "";
            m->n = 0;
            continue;
        }
        if (paths && (strstr(s, "{*}") || strstr(s, "{**}"))) {
            m->kind = AUTHZ_M_TEMPLATE;
            m->s = arena_dup(a, s, n);
            m->n = n;
        } else if (n > 0 && s[n - 1] == '*') {
            m->kind = AUTHZ_M_PREFIX;
            m->s = arena_dup(a, s, n - 1);
            m->n = n - 1;
        } else if (n > 0 && s[0] == '*') {
            m->kind = AUTHZ_M_SUFFIX;
            m->s = arena_dup(a, s + 1, n - 1);
            m->n = n - 1;
        } else {
            m->kind = AUTHZ_M_EXACT;
            m->s = arena_dup(a, s, n);
            m->n = n;
        }
        if (m->s == NULL)
            return -1;
    }
    out->v = v;
    out->n = in->n;
    return 0;
}

static int parse_cidr(const char *s, struct authz_cidr *c)
{
    char ip[64];
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);

    if (n == 0 || n >= sizeof(ip))
        return -1;
    memcpy(ip, s, n);
    ip[n] = '\0';
    memset(c, 0, sizeof(*c));
    c->family = strchr(ip, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(c->family, ip, c->addr) != 1)
        return -1;
    c->bits = slash ? (int)strtol(slash + 1, NULL, 10)
                    : (c->family == AF_INET ? 32 : 128);
    if (c->bits < 0 || c->bits > (c->family == AF_INET ? 32 : 128))
        return -1;
    return 0;
}

static int compile_cidrs(struct arena *a, const struct conf_strs *in,
                         struct authz_cidrs *out)
{
    struct authz_cidr *v;
    size_t n = 0;

    out->v = NULL;
    out->n = 0;
    if (in->n == 0)
        return 0;
    v = arena_alloc(a, in->n * sizeof(*v));
    if (v == NULL)
        return -1;
    /* Checked at load; anything unparsable is left out. */
    for (size_t i = 0; i < in->n; i++)
        if (parse_cidr(in->v[i], &v[n]) == 0)
            n++;
    out->v = v;
    out->n = n;
    return 0;
}

static int compile_ports(struct arena *a, const struct conf_strs *in,
                         struct authz_ports *out)
{
    uint32_t *v;

    out->v = NULL;
    out->n = 0;
    if (in->n == 0)
        return 0;
    v = arena_alloc(a, in->n * sizeof(*v));
    if (v == NULL)
        return -1;
    for (size_t i = 0; i < in->n; i++)
        v[i] = (uint32_t)strtoul(in->v[i], NULL, 10);
    out->v = v;
    out->n = in->n;
    return 0;
}

static int compile_src(struct arena *a, const struct res_authz_source *s,
                       struct authz_src *out)
{
    memset(out, 0, sizeof(*out));
    return compile_mset(a, &s->principals, 0, &out->principals) |
           compile_mset(a, &s->request_principals, 0, &out->req_principals) |
           compile_mset(a, &s->not_request_principals, 0,
                        &out->not_req_principals) |
           compile_mset(a, &s->not_principals, 0, &out->not_principals) |
           compile_mset(a, &s->namespaces, 0, &out->namespaces) |
           compile_mset(a, &s->not_namespaces, 0, &out->not_namespaces) |
           compile_cidrs(a, &s->ip_blocks, &out->ip) |
           compile_cidrs(a, &s->not_ip_blocks, &out->not_ip) |
           compile_cidrs(a, &s->remote_ip_blocks, &out->remote) |
           compile_cidrs(a, &s->not_remote_ip_blocks, &out->not_remote);
}

static int compile_op(struct arena *a, const struct res_authz_operation *o,
                      struct authz_op *out)
{
    memset(out, 0, sizeof(*out));
    return compile_mset(a, &o->hosts, 0, &out->hosts) |
           compile_mset(a, &o->not_hosts, 0, &out->not_hosts) |
           compile_mset(a, &o->methods, 0, &out->methods) |
           compile_mset(a, &o->not_methods, 0, &out->not_methods) |
           compile_mset(a, &o->paths, 1, &out->paths) |
           compile_mset(a, &o->not_paths, 1, &out->not_paths) |
           compile_ports(a, &o->ports, &out->ports) |
           compile_ports(a, &o->not_ports, &out->not_ports);
}

static int compile_cond(struct arena *a, const struct res_authz_condition *c,
                        struct authz_cond *out)
{
    const char *k = c->key ? c->key : "";
    size_t n = strlen(k);

    memset(out, 0, sizeof(*out));
    if (strncmp(k, "request.headers[", 16) == 0 && n > 17 && k[n - 1] == ']' &&
        n - 17 < sizeof(out->header)) {
        out->key = AUTHZ_K_HEADER;
        for (size_t i = 0; i < n - 17; i++) {
            char ch = k[16 + i];
            out->header[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
        }
    } else if (strcmp(k, "source.ip") == 0) {
        out->key = AUTHZ_K_SOURCE_IP;
    } else if (strcmp(k, "remote.ip") == 0) {
        out->key = AUTHZ_K_REMOTE_IP;
    } else if (strcmp(k, "source.namespace") == 0) {
        out->key = AUTHZ_K_SOURCE_NS;
    } else if (strcmp(k, "source.principal") == 0) {
        out->key = AUTHZ_K_SOURCE_PRINCIPAL;
    } else if (strcmp(k, "destination.port") == 0) {
        out->key = AUTHZ_K_DEST_PORT;
    } else if (strcmp(k, "connection.sni") == 0) {
        out->key = AUTHZ_K_SNI;
    } else if (strcmp(k, "request.auth.principal") == 0) {
        out->key = AUTHZ_K_AUTH_PRINCIPAL;
    } else if (strcmp(k, "request.auth.audiences") == 0) {
        out->key = AUTHZ_K_AUTH_AUDIENCES;
    } else if (strcmp(k, "request.auth.presenter") == 0) {
        out->key = AUTHZ_K_AUTH_PRESENTER;
    } else if (strncmp(k, "source.geo.", 11) == 0 &&
               geoip_field_by_name(k + 11, n - 11) >= 0) {
        out->key = AUTHZ_K_GEO;
        out->geo_field = geoip_field_by_name(k + 11, n - 11);
    } else if (authz_claim_path(k, NULL, 0) > 0) {
        const char *names[AUTHZ_CLAIM_DEPTH];
        size_t lens[AUTHZ_CLAIM_DEPTH];
        int d = authz_claim_path(k, names, lens);
        out->key = d > 0 && d <= AUTHZ_CLAIM_DEPTH ? AUTHZ_K_AUTH_CLAIM
                                                   : AUTHZ_K_NEVER;
        for (int i = 0; out->key == AUTHZ_K_AUTH_CLAIM && i < d; i++) {
            out->claim[i].p = arena_dup(a, names[i], lens[i]);
            out->claim[i].n = lens[i];
            if (out->claim[i].p == NULL)
                return -1;
        }
        out->nclaim = out->key == AUTHZ_K_AUTH_CLAIM ? (size_t)d : 0;
    } else {
        out->key = AUTHZ_K_NEVER;
    }
    if (out->key == AUTHZ_K_SOURCE_IP || out->key == AUTHZ_K_REMOTE_IP)
        return compile_cidrs(a, &c->values, &out->ips) |
               compile_cidrs(a, &c->not_values, &out->not_ips);
    if (out->key == AUTHZ_K_DEST_PORT)
        return compile_ports(a, &c->values, &out->ports) |
               compile_ports(a, &c->not_values, &out->not_ports);
    return compile_mset(a, &c->values, 0, &out->values) |
           compile_mset(a, &c->not_values, 0, &out->not_values);
}

static int compile_rule(struct arena *a, const struct res_authz_rule *in,
                        struct authz_rule *out)
{
    struct authz_src *from = NULL;
    struct authz_op *to = NULL;
    struct authz_cond *when = NULL;

    memset(out, 0, sizeof(*out));
    if ((in->from.n && !(from = arena_alloc(a, in->from.n * sizeof(*from)))) ||
        (in->to.n && !(to = arena_alloc(a, in->to.n * sizeof(*to)))) ||
        (in->when.n && !(when = arena_alloc(a, in->when.n * sizeof(*when)))))
        return -1;
    for (size_t i = 0; i < in->from.n; i++)
        if (compile_src(a,
                        &((const struct res_authz_from *)in->from.v)[i].source,
                        &from[i]) < 0)
            return -1;
    for (size_t i = 0; i < in->to.n; i++)
        if (compile_op(a, &((const struct res_authz_to *)in->to.v)[i].operation,
                       &to[i]) < 0)
            return -1;
    for (size_t i = 0; i < in->when.n; i++)
        if (compile_cond(a, (const struct res_authz_condition *)in->when.v + i,
                         &when[i]) < 0)
            return -1;
    out->from = from;
    out->nfrom = in->from.n;
    out->to = to;
    out->nto = in->to.n;
    out->when = when;
    out->nwhen = in->when.n;
    return 0;
}

/* Istio's scoping: which policies a workload (the node) is under. */
static int applies(const struct resource *r,
                   const struct res_authorization_policy *ap,
                   const char *node_ns, const struct conf_strmap *labels,
                   const char *root_ns)
{
    return res_policy_scope(r, &ap->selector.match_labels, node_ns, labels,
                            root_ns) == RES_SCOPE_APPLIES;
}

/* The run-time action of a resource's (enum res_authz_action). */
static enum authz_action action_of(int res_action)
{
    switch (res_action) {
    case RES_AUTHZ_DENY:
        return AUTHZ_DENY;
    case RES_AUTHZ_AUDIT:
        return AUTHZ_AUDIT;
    case RES_AUTHZ_CUSTOM:
        return AUTHZ_CUSTOM;
    default:
        return AUTHZ_ALLOW;
    }
}

struct authz *compile_authz(const struct resource_set *set, const char *node_ns,
                            const struct conf_strmap *node_labels,
                            const char *root_ns, char **err)
{
    struct authz *a = NULL;
    struct arena *mem;
    size_t n = 0;

    *err = NULL;
    for (size_t i = 0; set != NULL && i < set->n; i++)
        if (set->v[i]->kind == RES_AUTHORIZATION_POLICY &&
            applies(set->v[i], res_authorization_policy(set->v[i]), node_ns,
                    node_labels, root_ns))
            n++;
    if (n == 0)
        return NULL;
    a = authz_new(n);
    if (a == NULL)
        goto fail;
    mem = authz_arena(a);
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_authorization_policy *ap;
        struct authz_rule *rules = NULL;
        char name[520];

        if (r->kind != RES_AUTHORIZATION_POLICY)
            continue;
        ap = res_authorization_policy(r);
        if (!applies(r, ap, node_ns, node_labels, root_ns))
            continue;
        snprintf(name, sizeof(name), "%s/%s", r->meta.ns, r->meta.name);
        if (ap->rules.n > 0 &&
            (rules = arena_alloc(mem, ap->rules.n * sizeof(*rules))) == NULL)
            goto fail;
        for (size_t k = 0; k < ap->rules.n; k++)
            if (compile_rule(mem,
                             (const struct res_authz_rule *)ap->rules.v + k,
                             &rules[k]) < 0)
                goto fail;
        if (authz_add(a, name, action_of(ap->action), rules, ap->rules.n) < 0)
            goto fail;
    }
    return a;
fail:
    err_set(err, "authorization policies: out of memory");
    authz_unref(a);
    return NULL;
}
