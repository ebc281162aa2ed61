/*
 * AuthorizationPolicy checked per request (see authz.h), over the compiled
 * rules of authz-t.h that compile/authz.c builds once per snapshot.
 * Everything a compiled set holds lives in one arena, so it goes with one
 * free.
 */
#include "config.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/arena.h"
#include "core/json.h"
#include "http/http.h"
#include "policy/authz.h"
#include "policy/jwt.h"

/* One compiled AuthorizationPolicy. */
struct policy {
    const char *name; /* "ns/name" */
    enum authz_action action;
    const struct authz_rule *rules;
    size_t nrules;
};

struct authz {
    int refs;
    struct arena mem;
    struct policy *v;
    size_t n;
    size_t cap;
    int has_allow;
};

/* ---- building (for compile/authz.c) ------------------------------------- */

struct authz *authz_new(size_t n)
{
    struct authz *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    a->refs = 1;
    arena_init(&a->mem, 16 * 1024);
    a->v = arena_alloc(&a->mem, (n ? n : 1) * sizeof(*a->v));
    if (a->v == NULL) {
        authz_unref(a);
        return NULL;
    }
    a->cap = n;
    return a;
}

struct arena *authz_arena(struct authz *a)
{
    return &a->mem;
}

int authz_add(struct authz *a, const char *name, enum authz_action action,
              const struct authz_rule *rules, size_t nrules)
{
    struct policy *p;

    if (a->n == a->cap)
        return -1;
    p = &a->v[a->n];
    p->name = arena_dup(&a->mem, name, strlen(name));
    if (p->name == NULL)
        return -1;
    p->action = action;
    p->rules = rules;
    p->nrules = nrules;
    a->n++;
    if (action == AUTHZ_ALLOW)
        a->has_allow = 1;
    return 0;
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
        if (names != NULL && d < AUTHZ_CLAIM_DEPTH) {
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

static int match_one(const struct authz_matcher *m, struct slice v, int nocase)
{
    switch (m->kind) {
    case AUTHZ_M_ANY:
        return v.n > 0;
    case AUTHZ_M_EXACT:
        return v.n == m->n && bytes_eq(v.p, m->s, m->n, nocase);
    case AUTHZ_M_PREFIX:
        return v.n >= m->n && bytes_eq(v.p, m->s, m->n, nocase);
    case AUTHZ_M_SUFFIX:
        return v.n >= m->n && bytes_eq(v.p + v.n - m->n, m->s, m->n, nocase);
    case AUTHZ_M_TEMPLATE:
        return authz_path_match(m->s, v);
    }
    return 0;
}

static int mset_any(const struct authz_mset *s, struct slice v, int nocase)
{
    for (size_t i = 0; i < s->n; i++)
        if (match_one(&s->v[i], v, nocase))
            return 1;
    return 0;
}

/* A field with values must match one; a not- field must match none. */
static int field_ok(const struct authz_mset *in, const struct authz_mset * not,
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

static int cidrs_any(const struct authz_cidrs *c, const struct sockaddr *sa)
{
    uint8_t b[16];
    int fam = sa_bytes(sa, b);

    for (size_t i = 0; fam != 0 && i < c->n; i++) {
        const struct authz_cidr *x = &c->v[i];
        int full = x->bits / 8, rest = x->bits % 8;
        if (x->family != fam || memcmp(b, x->addr, (size_t)full) != 0)
            continue;
        if (rest == 0 ||
            ((b[full] ^ x->addr[full]) & (uint8_t)(0xff << (8 - rest))) == 0)
            return 1;
    }
    return 0;
}

static int cidr_field_ok(const struct authz_cidrs *in,
                         const struct authz_cidrs * not,
                         const struct sockaddr *sa)
{
    if (in->n > 0 && !cidrs_any(in, sa))
        return 0;
    return not ->n == 0 || !cidrs_any(not, sa);
}

static int ports_has(const struct authz_ports *p, uint32_t port)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i] == port)
            return 1;
    return 0;
}

static int ports_ok(const struct authz_ports *in,
                    const struct authz_ports * not, uint32_t port)
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

static int src_ok(const struct authz_src *s, const struct authz_request *r,
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

static int op_ok(const struct authz_op *o, const struct authz_request *r,
                 int lenient)
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
static int json_values_ok(const struct authz_cond *c, const struct json *j)
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

static int cond_ok(const struct authz_cond *c, const struct authz_request *r,
                   int lenient)
{
    switch (c->key) {
    case AUTHZ_K_HEADER: {
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
    case AUTHZ_K_SOURCE_IP:
        return cidr_field_ok(&c->ips, &c->not_ips, r->peer);
    case AUTHZ_K_REMOTE_IP:
        return cidr_field_ok(&c->ips, &c->not_ips,
                             r->remote ? r->remote : r->peer);
    case AUTHZ_K_SOURCE_NS:
        return field_ok(&c->values, &c->not_values, principal_ns(r->principal),
                        0);
    case AUTHZ_K_SOURCE_PRINCIPAL:
        return field_ok(&c->values, &c->not_values, r->principal, 0);
    case AUTHZ_K_DEST_PORT:
        return ports_ok(&c->ports, &c->not_ports, r->port);
    case AUTHZ_K_SNI:
        return field_ok(&c->values, &c->not_values, r->sni, 1);
    case AUTHZ_K_AUTH_PRINCIPAL:
        if (r->tcp)
            return lenient;
        return field_ok(&c->values, &c->not_values, req_principal(r), 0);
    case AUTHZ_K_AUTH_PRESENTER:
        if (r->tcp)
            return lenient;
        return field_ok(&c->values, &c->not_values,
                        r->jwt ? r->jwt->presenter : (struct slice){"", 0}, 0);
    case AUTHZ_K_AUTH_AUDIENCES:
        if (r->tcp)
            return lenient;
        return json_values_ok(c, r->jwt ? r->jwt->aud : NULL);
    case AUTHZ_K_AUTH_CLAIM:
        if (r->tcp)
            return lenient;
        return json_values_ok(c, jwt_claim(r->jwt, c->claim, c->nclaim));
    case AUTHZ_K_GEO:
        return field_ok(&c->values, &c->not_values,
                        slice_of(geo_result_get(r->geo, c->geo_field)), 0);
    case AUTHZ_K_NEVER:
        return 0;
    }
    return 0;
}

static int rule_ok(const struct authz_rule *ru, const struct authz_request *r,
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
    int lenient = p->action != AUTHZ_ALLOW;

    for (size_t i = 0; i < p->nrules; i++)
        if (rule_ok(&p->rules[i], r, lenient))
            return 1;
    return 0;
}

void authz_check(const struct authz *a, const struct authz_request *r,
                 struct authz_decision *d)
{
    static const enum authz_action order[] = {AUTHZ_CUSTOM, AUTHZ_DENY};

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
        if (a->v[i].action == AUTHZ_AUDIT && policy_ok(&a->v[i], r))
            d->audit = 1;
    if (!a->has_allow)
        return;
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].action == AUTHZ_ALLOW && policy_ok(&a->v[i], r)) {
            d->policy = a->v[i].name;
            return;
        }
    d->allowed = 0;
}
