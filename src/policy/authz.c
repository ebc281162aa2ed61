/*
 * AuthorizationPolicy, compiled once per snapshot and checked per request
 * (see authz.h). Everything a compiled policy holds lives in one arena, so
 * it goes with one free.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/resource.h"
#include "core/arena.h"
#include "core/json.h"
#include "http/http.h"
#include "policy/authz.h"
#include "policy/jwt.h"

enum mkind { M_EXACT, M_PREFIX, M_SUFFIX, M_ANY, M_TEMPLATE };

struct matcher {
    enum mkind kind;
    const char *s; /* NUL-terminated; the pattern without its '*' */
    size_t n;
};

struct mset {
    const struct matcher *v;
    size_t n;
};

struct cidr {
    int family;
    uint8_t addr[16];
    int bits;
};

struct cidrs {
    const struct cidr *v;
    size_t n;
};

struct ports {
    const uint32_t *v;
    size_t n;
};

struct src {
    struct mset principals, not_principals, namespaces, not_namespaces;
    struct mset req_principals, not_req_principals; /* JWT "iss/sub" */
    struct cidrs ip, not_ip, remote, not_remote;
};

struct op {
    struct mset hosts, not_hosts, methods, not_methods, paths, not_paths;
    struct ports ports, not_ports;
};

enum ckey {
    K_HEADER,
    K_SOURCE_IP,
    K_REMOTE_IP,
    K_SOURCE_NS,
    K_SOURCE_PRINCIPAL,
    K_DEST_PORT,
    K_SNI,
    K_AUTH_PRINCIPAL, /* request.auth.principal: "iss/sub" */
    K_AUTH_AUDIENCES, /* request.auth.audiences: aud */
    K_AUTH_PRESENTER, /* request.auth.presenter: azp */
    K_AUTH_CLAIM,     /* request.auth.claims[a][b]... */
    K_NEVER,          /* what strait cannot evaluate */
};

/* Claim paths are at most this deep (Istio has no limit; ten levels of
 * nested claims is more than tokens carry). */
#define CLAIM_DEPTH 10

struct cond {
    enum ckey key;
    char header[128];                /* K_HEADER, lowercase */
    struct slice claim[CLAIM_DEPTH]; /* K_AUTH_CLAIM, in the arena */
    size_t nclaim;
    struct mset values, not_values;
    struct cidrs ips, not_ips;
    struct ports ports, not_ports;
};

struct rule {
    const struct src *from;
    size_t nfrom;
    const struct op *to;
    size_t nto;
    const struct cond *when;
    size_t nwhen;
};

struct policy {
    const char *name; /* "ns/name" */
    int action;       /* enum res_authz_action */
    const struct rule *rules;
    size_t nrules;
};

struct authz {
    int refs;
    struct arena mem;
    struct policy *v;
    size_t n;
    int has_allow;
};

/* ---- compiling ---------------------------------------------------------- */

static int compile_mset(struct arena *a, const struct conf_strs *in, int paths,
                        struct mset *out)
{
    struct matcher *v;

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
        struct matcher *m = &v[i];

        if (strcmp(s, "*") == 0) {
            m->kind = M_ANY;
            m->s = "";
            m->n = 0;
            continue;
        }
        if (paths && (strstr(s, "{*}") || strstr(s, "{**}"))) {
            m->kind = M_TEMPLATE;
            m->s = arena_dup(a, s, n);
            m->n = n;
        } else if (n > 0 && s[n - 1] == '*') {
            m->kind = M_PREFIX;
            m->s = arena_dup(a, s, n - 1);
            m->n = n - 1;
        } else if (n > 0 && s[0] == '*') {
            m->kind = M_SUFFIX;
            m->s = arena_dup(a, s + 1, n - 1);
            m->n = n - 1;
        } else {
            m->kind = M_EXACT;
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

static int parse_cidr(const char *s, struct cidr *c)
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
                         struct cidrs *out)
{
    struct cidr *v;
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
                         struct ports *out)
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
                       struct src *out)
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
                      struct op *out)
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
                        struct cond *out)
{
    const char *k = c->key ? c->key : "";
    size_t n = strlen(k);

    memset(out, 0, sizeof(*out));
    if (strncmp(k, "request.headers[", 16) == 0 && n > 17 && k[n - 1] == ']' &&
        n - 17 < sizeof(out->header)) {
        out->key = K_HEADER;
        for (size_t i = 0; i < n - 17; i++) {
            char ch = k[16 + i];
            out->header[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
        }
    } else if (strcmp(k, "source.ip") == 0) {
        out->key = K_SOURCE_IP;
    } else if (strcmp(k, "remote.ip") == 0) {
        out->key = K_REMOTE_IP;
    } else if (strcmp(k, "source.namespace") == 0) {
        out->key = K_SOURCE_NS;
    } else if (strcmp(k, "source.principal") == 0) {
        out->key = K_SOURCE_PRINCIPAL;
    } else if (strcmp(k, "destination.port") == 0) {
        out->key = K_DEST_PORT;
    } else if (strcmp(k, "connection.sni") == 0) {
        out->key = K_SNI;
    } else if (strcmp(k, "request.auth.principal") == 0) {
        out->key = K_AUTH_PRINCIPAL;
    } else if (strcmp(k, "request.auth.audiences") == 0) {
        out->key = K_AUTH_AUDIENCES;
    } else if (strcmp(k, "request.auth.presenter") == 0) {
        out->key = K_AUTH_PRESENTER;
    } else if (authz_claim_path(k, NULL, 0) > 0) {
        const char *names[CLAIM_DEPTH];
        size_t lens[CLAIM_DEPTH];
        int d = authz_claim_path(k, names, lens);
        out->key = d > 0 && d <= CLAIM_DEPTH ? K_AUTH_CLAIM : K_NEVER;
        for (int i = 0; out->key == K_AUTH_CLAIM && i < d; i++) {
            out->claim[i].p = arena_dup(a, names[i], lens[i]);
            out->claim[i].n = lens[i];
            if (out->claim[i].p == NULL)
                return -1;
        }
        out->nclaim = out->key == K_AUTH_CLAIM ? (size_t)d : 0;
    } else {
        out->key = K_NEVER;
    }
    if (out->key == K_SOURCE_IP || out->key == K_REMOTE_IP)
        return compile_cidrs(a, &c->values, &out->ips) |
               compile_cidrs(a, &c->not_values, &out->not_ips);
    if (out->key == K_DEST_PORT)
        return compile_ports(a, &c->values, &out->ports) |
               compile_ports(a, &c->not_values, &out->not_ports);
    return compile_mset(a, &c->values, 0, &out->values) |
           compile_mset(a, &c->not_values, 0, &out->not_values);
}

static int compile_rule(struct arena *a, const struct res_authz_rule *in,
                        struct rule *out)
{
    struct src *from = NULL;
    struct op *to = NULL;
    struct cond *when = NULL;

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
    int in_ns = strcmp(r->meta.ns, node_ns) == 0;
    int in_root = strcmp(r->meta.ns, root_ns) == 0;

    if (!in_ns && !in_root)
        return 0;
    if (ap->selector.match_labels.n == 0)
        return 1;
    return labels != NULL &&
           res_labels_match(&ap->selector.match_labels, labels);
}

struct authz *authz_build(const struct resource_set *set, const char *node_ns,
                          const struct conf_strmap *node_labels,
                          const char *root_ns, char **err)
{
    struct authz *a;
    size_t n = 0;

    *err = NULL;
    for (size_t i = 0; set != NULL && i < set->n; i++)
        if (set->v[i]->kind == RES_AUTHORIZATION_POLICY &&
            applies(set->v[i], res_authorization_policy(set->v[i]), node_ns,
                    node_labels, root_ns))
            n++;
    if (n == 0)
        return NULL;
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        goto oom;
    a->refs = 1;
    arena_init(&a->mem, 16 * 1024);
    a->v = arena_alloc(&a->mem, n * sizeof(*a->v));
    if (a->v == NULL)
        goto oom;
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_authorization_policy *ap;
        struct policy *p;
        struct rule *rules = NULL;
        char name[520];

        if (r->kind != RES_AUTHORIZATION_POLICY)
            continue;
        ap = res_authorization_policy(r);
        if (!applies(r, ap, node_ns, node_labels, root_ns))
            continue;
        p = &a->v[a->n++];
        snprintf(name, sizeof(name), "%s/%s", r->meta.ns, r->meta.name);
        p->name = arena_dup(&a->mem, name, strlen(name));
        p->action = ap->action;
        if (ap->rules.n > 0 &&
            (rules = arena_alloc(&a->mem, ap->rules.n * sizeof(*rules))) ==
                NULL)
            goto oom;
        for (size_t k = 0; k < ap->rules.n; k++)
            if (compile_rule(&a->mem,
                             (const struct res_authz_rule *)ap->rules.v + k,
                             &rules[k]) < 0)
                goto oom;
        p->rules = rules;
        p->nrules = ap->rules.n;
        if (p->name == NULL)
            goto oom;
        if (p->action == RES_AUTHZ_ALLOW)
            a->has_allow = 1;
    }
    return a;
oom:
    *err = strdup("authorization policies: out of memory");
    authz_unref(a);
    return NULL;
}

struct authz *authz_ref(struct authz *a)
{
    if (a != NULL)
        __atomic_add_fetch(&a->refs, 1, __ATOMIC_RELAXED);
    return a;
}

void authz_unref(struct authz *a)
{
    if (a == NULL || __atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    arena_dispose(&a->mem);
    free(a);
}

size_t authz_count(const struct authz *a)
{
    return a != NULL ? a->n : 0;
}

/* ---- matching ----------------------------------------------------------- */

static int bytes_eq(const char *a, const char *b, size_t n, int nocase)
{
    return nocase ? strncasecmp(a, b, n) == 0 : memcmp(a, b, n) == 0;
}

int authz_claim_path(const char *key, const char **names, size_t *lens)
{
    static const char pre[] = "request.auth.claims";
    const char *p;
    int d = 0;

    if (strncmp(key, pre, sizeof(pre) - 1) != 0)
        return -1;
    p = key + sizeof(pre) - 1;
    if (*p != '[')
        return -1;
    while (*p == '[') {
        const char *end = strchr(p + 1, ']');
        if (end == NULL || end == p + 1 ||
            memchr(p + 1, '[', (size_t)(end - p - 1)))
            return -1;
        if (names != NULL && d < CLAIM_DEPTH) {
            names[d] = p + 1;
            lens[d] = (size_t)(end - p - 1);
        }
        d++;
        p = end + 1;
    }
    return *p == '\0' ? d : -1;
}

int authz_path_match(const char *pattern, struct slice path)
{
    const char *p = pattern;
    size_t i = 0;

    while (*p != '\0') {
        if (strncmp(p, "{**}", 4) == 0)
            return 1; /* the rest, whatever it is */
        if (strncmp(p, "{*}", 3) == 0) {
            size_t start = i;
            while (i < path.n && path.p[i] != '/')
                i++;
            if (i == start)
                return 0; /* one whole, non-empty segment */
            p += 3;
            continue;
        }
        if (i >= path.n || path.p[i] != *p)
            return 0;
        i++;
        p++;
    }
    return i == path.n;
}

static int match_one(const struct matcher *m, struct slice v, int nocase)
{
    switch (m->kind) {
    case M_ANY:
        return v.n > 0;
    case M_EXACT:
        return v.n == m->n && bytes_eq(v.p, m->s, m->n, nocase);
    case M_PREFIX:
        return v.n >= m->n && bytes_eq(v.p, m->s, m->n, nocase);
    case M_SUFFIX:
        return v.n >= m->n && bytes_eq(v.p + v.n - m->n, m->s, m->n, nocase);
    case M_TEMPLATE:
        return authz_path_match(m->s, v);
    }
    return 0;
}

static int mset_any(const struct mset *s, struct slice v, int nocase)
{
    for (size_t i = 0; i < s->n; i++)
        if (match_one(&s->v[i], v, nocase))
            return 1;
    return 0;
}

/* A field with values must match one; a not- field must match none. */
static int field_ok(const struct mset *in, const struct mset * not,
                    struct slice v, int nocase)
{
    if (in->n > 0 && !mset_any(in, v, nocase))
        return 0;
    return not ->n == 0 || !mset_any(not, v, nocase);
}

/* The address of sa as family and bytes; IPv4-mapped IPv6 as IPv4. */
static int sa_bytes(const struct sockaddr *sa, uint8_t out[16])
{
    if (sa == NULL)
        return 0;
    if (sa->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)(const void *)sa)->sin_addr,
               4);
        return AF_INET;
    }
    if (sa->sa_family == AF_INET6) {
        const uint8_t *b =
            ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0,    0,
                                           0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(b, mapped, 12) == 0) {
            memcpy(out, b + 12, 4);
            return AF_INET;
        }
        memcpy(out, b, 16);
        return AF_INET6;
    }
    return 0;
}

static int cidrs_any(const struct cidrs *c, const struct sockaddr *sa)
{
    uint8_t b[16];
    int fam = sa_bytes(sa, b);

    for (size_t i = 0; fam != 0 && i < c->n; i++) {
        const struct cidr *x = &c->v[i];
        int full = x->bits / 8, rest = x->bits % 8;
        if (x->family != fam || memcmp(b, x->addr, (size_t)full) != 0)
            continue;
        if (rest == 0 ||
            ((b[full] ^ x->addr[full]) & (uint8_t)(0xff << (8 - rest))) == 0)
            return 1;
    }
    return 0;
}

static int cidr_field_ok(const struct cidrs *in, const struct cidrs * not,
                         const struct sockaddr *sa)
{
    if (in->n > 0 && !cidrs_any(in, sa))
        return 0;
    return not ->n == 0 || !cidrs_any(not, sa);
}

static int ports_has(const struct ports *p, uint32_t port)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i] == port)
            return 1;
    return 0;
}

static int ports_ok(const struct ports *in, const struct ports * not,
                    uint32_t port)
{
    if (in->n > 0 && !ports_has(in, port))
        return 0;
    return not ->n == 0 || !ports_has(not, port);
}

/* The namespace of a principal "td/ns/NS/sa/SA"; empty when it has none. */
static struct slice principal_ns(struct slice p)
{
    for (size_t i = 0; i + 4 <= p.n; i++)
        if (memcmp(p.p + i, "/ns/", 4) == 0) {
            size_t s = i + 4, e = s;
            while (e < p.n && p.p[e] != '/')
                e++;
            return (struct slice){p.p + s, e - s};
        }
    return (struct slice){"", 0};
}

static struct slice strip_port(struct slice h)
{
    if (h.n > 0 && h.p[0] == '[') {
        const char *end = memchr(h.p, ']', h.n);
        if (end != NULL)
            h.n = (size_t)(end - h.p) + 1;
        return h;
    }
    for (size_t i = 0; i < h.n; i++)
        if (h.p[i] == ':') {
            h.n = i;
            break;
        }
    return h;
}

static struct slice strip_query(struct slice p)
{
    for (size_t i = 0; i < p.n; i++)
        if (p.p[i] == '?' || p.p[i] == '#') {
            p.n = i;
            break;
        }
    return p;
}

/* The request principal: "iss/sub" of a verified JWT; empty without one. */
static struct slice req_principal(const struct authz_request *r)
{
    return r->jwt != NULL ? r->jwt->principal : (struct slice){"", 0};
}

static int src_ok(const struct src *s, const struct authz_request *r,
                  int lenient)
{
    struct slice ns = principal_ns(r->principal);

    if (r->tcp && (s->req_principals.n || s->not_req_principals.n) && !lenient)
        return 0;
    if (!r->tcp && !field_ok(&s->req_principals, &s->not_req_principals,
                             req_principal(r), 0))
        return 0;
    return field_ok(&s->principals, &s->not_principals, r->principal, 0) &&
           field_ok(&s->namespaces, &s->not_namespaces, ns, 0) &&
           cidr_field_ok(&s->ip, &s->not_ip, r->peer) &&
           cidr_field_ok(&s->remote, &s->not_remote,
                         r->remote ? r->remote : r->peer);
}

static int op_ok(const struct op *o, const struct authz_request *r, int lenient)
{
    if (r->tcp) {
        int http = o->hosts.n || o->not_hosts.n || o->methods.n ||
                   o->not_methods.n || o->paths.n || o->not_paths.n;
        if (http && !lenient)
            return 0;
        return ports_ok(&o->ports, &o->not_ports, r->port);
    }
    return field_ok(&o->hosts, &o->not_hosts, strip_port(r->host), 1) &&
           field_ok(&o->methods, &o->not_methods, r->method, 0) &&
           field_ok(&o->paths, &o->not_paths, strip_query(r->path), 0) &&
           ports_ok(&o->ports, &o->not_ports, r->port);
}

/* A claim against values and notValues: a string claim, or any string
 * of a string-array claim, may match a value; none may match a notValue.
 * An absent claim (or one of another type) matches no value and every
 * notValue, as Istio's metadata matchers do. */
static int json_values_ok(const struct cond *c, const struct json *j)
{
    int in = c->values.n == 0, not = 0;

    if (j != NULL && j->type == JSON_STRING) {
        in = in || mset_any(&c->values, j->str, 0);
        not = mset_any(&c->not_values, j->str, 0);
    } else if (j != NULL && j->type == JSON_ARRAY) {
        for (const struct json *e = j->child; e != NULL; e = e->next) {
            if (e->type != JSON_STRING)
                continue;
            in = in || mset_any(&c->values, e->str, 0);
            not = not || mset_any(&c->not_values, e->str, 0);
        }
    }
    return in && !not ;
}

static int cond_ok(const struct cond *c, const struct authz_request *r,
                   int lenient)
{
    switch (c->key) {
    case K_HEADER: {
        if (r->tcp)
            return lenient;
        /* Any value of the header may match; an absent header matches
         * no value and every notValue. */
        int in = c->values.n == 0, not = 0;
        for (size_t i = 0; r->headers != NULL && i < r->headers->n; i++) {
            const struct http_field *f = &r->headers->v[i];
            if (f->name.n != strlen(c->header) ||
                memcmp(f->name.p, c->header, f->name.n) != 0)
                continue;
            if (c->values.n > 0 && mset_any(&c->values, f->value, 0))
                in = 1;
            if (c->not_values.n > 0 && mset_any(&c->not_values, f->value, 0))
                not = 1;
        }
        return in && !not ;
    }
    case K_SOURCE_IP:
        return cidr_field_ok(&c->ips, &c->not_ips, r->peer);
    case K_REMOTE_IP:
        return cidr_field_ok(&c->ips, &c->not_ips,
                             r->remote ? r->remote : r->peer);
    case K_SOURCE_NS:
        return field_ok(&c->values, &c->not_values, principal_ns(r->principal),
                        0);
    case K_SOURCE_PRINCIPAL:
        return field_ok(&c->values, &c->not_values, r->principal, 0);
    case K_DEST_PORT:
        return ports_ok(&c->ports, &c->not_ports, r->port);
    case K_SNI:
        return field_ok(&c->values, &c->not_values, r->sni, 1);
    case K_AUTH_PRINCIPAL:
        if (r->tcp)
            return lenient;
        return field_ok(&c->values, &c->not_values, req_principal(r), 0);
    case K_AUTH_PRESENTER:
        if (r->tcp)
            return lenient;
        return field_ok(&c->values, &c->not_values,
                        r->jwt ? r->jwt->presenter : (struct slice){"", 0}, 0);
    case K_AUTH_AUDIENCES:
        if (r->tcp)
            return lenient;
        return json_values_ok(c, r->jwt ? r->jwt->aud : NULL);
    case K_AUTH_CLAIM:
        if (r->tcp)
            return lenient;
        return json_values_ok(c, jwt_claim(r->jwt, c->claim, c->nclaim));
    case K_NEVER:
        return 0;
    }
    return 0;
}

static int rule_ok(const struct rule *ru, const struct authz_request *r,
                   int lenient)
{
    size_t i;

    if (ru->nfrom > 0) {
        for (i = 0; i < ru->nfrom && !src_ok(&ru->from[i], r, lenient); i++)
            ;
        if (i == ru->nfrom)
            return 0;
    }
    if (ru->nto > 0) {
        for (i = 0; i < ru->nto && !op_ok(&ru->to[i], r, lenient); i++)
            ;
        if (i == ru->nto)
            return 0;
    }
    for (i = 0; i < ru->nwhen; i++)
        if (!cond_ok(&ru->when[i], r, lenient))
            return 0;
    return 1;
}

/* A policy with no rules matches nothing (an ALLOW one allows nothing). */
static int policy_ok(const struct policy *p, const struct authz_request *r)
{
    int lenient = p->action != RES_AUTHZ_ALLOW;

    for (size_t i = 0; i < p->nrules; i++)
        if (rule_ok(&p->rules[i], r, lenient))
            return 1;
    return 0;
}

void authz_check(const struct authz *a, const struct authz_request *r,
                 struct authz_decision *d)
{
    static const int order[] = {RES_AUTHZ_CUSTOM, RES_AUTHZ_DENY};

    d->allowed = 1;
    d->audit = 0;
    d->policy = NULL;
    if (a == NULL)
        return;
    for (size_t k = 0; k < sizeof(order) / sizeof(*order); k++)
        for (size_t i = 0; i < a->n; i++)
            if (a->v[i].action == order[k] && policy_ok(&a->v[i], r)) {
                d->allowed = 0;
                d->policy = a->v[i].name;
                return;
            }
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].action == RES_AUTHZ_AUDIT && policy_ok(&a->v[i], r))
            d->audit = 1;
    if (!a->has_allow)
        return;
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].action == RES_AUTHZ_ALLOW && policy_ok(&a->v[i], r)) {
            d->policy = a->v[i].name;
            return;
        }
    d->allowed = 0;
}
