/*
 * RequestAuthentication on the request path (see jwt.h): JWS compact
 * tokens found where a jwtRule says, checked as Envoy's jwt_authn does
 * (header, exp and nbf with skew, audiences, then the signature with
 * jwt-keys.c), and the headers a verified token writes.
 */
#include "config.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/arena.h"
#include "core/json.h"
#include "http/http.h"
#include "policy/jwt-int.h"

const char *jwt_status_text(enum jwt_status st)
{
    switch (st) {
    case JWT_OK:
        return "Jwt verified";
    case JWT_MISSING:
        return "Jwt is missing";
    case JWT_BAD_FORMAT:
        return "Jwt is not in the form of Header.Payload.Signature with two "
               "dots and 3 sections";
    case JWT_BAD_HEADER:
        return "Jwt header is an invalid JSON";
    case JWT_BAD_PAYLOAD:
        return "Jwt payload is an invalid JSON";
    case JWT_ALG_UNSUPPORTED:
        return "Jwt header [alg] is not supported";
    case JWT_UNKNOWN_ISSUER:
        return "Jwt issuer is not configured";
    case JWT_EXPIRED:
        return "Jwt is expired";
    case JWT_NOT_YET_VALID:
        return "Jwt not yet valid";
    case JWT_AUDIENCE:
        return "Audiences in Jwt are not allowed";
    case JWT_NO_KEY:
        return "Jwks doesn't have key to match kid or alg from Jwt";
    case JWT_NO_JWKS:
        return "Jwks remote fetch is failed";
    case JWT_BAD_SIGNATURE:
        return "Jwt verification fails";
    case JWT_OOM:
        return "out of memory";
    }
    return "?";
}

/* ---- verification -------------------------------------------------------- */

/* A time claim (exp, nbf) as Envoy reads it: a whole non-negative
 * number, here no more than 2^53 (exact in a double); anything else makes
 * the payload bad. */
static int numeric(const struct json *claims, const char *name, double *v,
                   int *has)
{
    const struct json *j = json_get(claims, name);

    *has = j != NULL;
    if (j == NULL)
        return 0;
    if (j->type != JSON_NUMBER || !isfinite(j->num) || j->num < 0 ||
        j->num > 9007199254740992.0 ||
        (double)(uint64_t)j->num != j->num /* not whole */)
        return -1;
    *v = j->num;
    return 0;
}

/* An audience as Envoy compares it: without an http:// or https://
 * scheme and without a trailing slash, since configurations and tokens
 * differ in exactly those often. */
static struct slice aud_norm(struct slice a)
{
    if (slice_has_prefix(a, SLICE_LIT("http://"))) {
        a.p += 7;
        a.n -= 7;
    } else if (slice_has_prefix(a, SLICE_LIT("https://"))) {
        a.p += 8;
        a.n -= 8;
    }
    if (a.n > 0 && a.p[a.n - 1] == '/')
        a.n--;
    return a;
}

static int aud_one(const struct jwt_provider *pv, const struct json *j)
{
    struct slice v;

    if (j->type != JSON_STRING)
        return 0;
    v = aud_norm(j->str);
    for (size_t i = 0; i < pv->naud; i++)
        if (slice_eq(v, aud_norm(slice_of(pv->aud[i]))))
            return 1;
    return 0;
}

static int aud_allowed(const struct jwt_provider *pv, const struct json *aud)
{
    if (pv->naud == 0)
        return 1;
    if (aud == NULL)
        return 0;
    if (aud->type == JSON_ARRAY) {
        for (const struct json *e = aud->child; e != NULL; e = e->next)
            if (aud_one(pv, e))
                return 1;
        return 0;
    }
    return aud_one(pv, aud);
}

/* The parts of a compact token, decoded. */
struct parsed {
    struct slice signed_part; /* header.payload, as sent */
    struct slice payload_b64;
    struct slice sig;
    const struct json *header, *claims;
};

static enum jwt_status parse_token(struct slice t, struct arena *a,
                                   struct parsed *out)
{
    const char *d1 = memchr(t.p, '.', t.n), *d2;
    struct slice h, p;
    const char *why;

    if (t.n == 0 || t.n > JWT_MAX_TOKEN || d1 == NULL)
        return JWT_BAD_FORMAT;
    d2 = memchr(d1 + 1, '.', (size_t)(t.p + t.n - d1 - 1));
    if (d2 == NULL || memchr(d2 + 1, '.', (size_t)(t.p + t.n - d2 - 1)))
        return JWT_BAD_FORMAT;
    out->signed_part = (struct slice){t.p, (size_t)(d2 - t.p)};
    out->payload_b64 = (struct slice){d1 + 1, (size_t)(d2 - d1 - 1)};
    h = jwt_b64url(a, (struct slice){t.p, (size_t)(d1 - t.p)});
    p = jwt_b64url(a, out->payload_b64);
    out->sig =
        jwt_b64url(a, (struct slice){d2 + 1, (size_t)(t.p + t.n - d2 - 1)});
    if (h.p == NULL || p.p == NULL || out->sig.p == NULL || out->sig.n == 0)
        return JWT_BAD_FORMAT;
    out->header = json_parse_max(a, h.p, h.n, JWT_MAX_DEPTH, JWT_MAX_NODES,
                                 JSON_NO_DUPLICATES, &why);
    if (out->header == NULL || out->header->type != JSON_OBJECT)
        return JWT_BAD_HEADER;
    out->claims = json_parse_max(a, p.p, p.n, JWT_MAX_DEPTH, JWT_MAX_NODES,
                                 JSON_NO_DUPLICATES, &why);
    if (out->claims == NULL || out->claims->type != JSON_OBJECT)
        return JWT_BAD_PAYLOAD;
    return JWT_OK;
}

/* verify() checks a parsed token against pv, in Envoy's order: the
 * header, the times, the audiences, then the signature. */
static enum jwt_status verify(const struct jwt_provider *pv,
                              const struct parsed *t, int64_t now,
                              struct arena *a, struct jwt_result *res)
{
    struct slice alg = json_string(json_get(t->header, "alg"));
    const struct json *kid = json_get(t->header, "kid");
    const struct jwt_alg *al = alg.p != NULL ? jwt_alg_find(alg) : NULL;
    double exp = 0, nbf = 0;
    int has_exp, has_nbf;
    enum jwt_status st;
    char *pr;

    if (alg.p == NULL || (kid != NULL && kid->type != JSON_STRING))
        return JWT_BAD_HEADER;
    if (al == NULL)
        return JWT_ALG_UNSUPPORTED;
    if (numeric(t->claims, "exp", &exp, &has_exp) < 0 ||
        numeric(t->claims, "nbf", &nbf, &has_nbf) < 0)
        return JWT_BAD_PAYLOAD;
    if (has_exp && (double)now > exp + JWT_CLOCK_SKEW_S)
        return JWT_EXPIRED;
    if (has_nbf && (double)now + JWT_CLOCK_SKEW_S < nbf)
        return JWT_NOT_YET_VALID;
    res->aud = json_get(t->claims, "aud");
    if (!aud_allowed(pv, res->aud))
        return JWT_AUDIENCE;
    st =
        jwt_keys_verify(pv->keys, al, json_string(kid), t->signed_part, t->sig);
    if (st != JWT_OK)
        return st;
    res->claims = t->claims;
    res->issuer = json_string(json_get(t->claims, "iss"));
    res->subject = json_string(json_get(t->claims, "sub"));
    res->presenter = json_string(json_get(t->claims, "azp"));
    if (res->presenter.p == NULL)
        res->presenter = (struct slice){"", 0};
    if (res->subject.p == NULL)
        res->subject = (struct slice){"", 0};
    /* Istio's request principal: "<iss>/<sub>". */
    pr = arena_alloc(a, res->issuer.n + 1 + res->subject.n + 1);
    if (pr == NULL)
        return JWT_OOM;
    memcpy(pr, res->issuer.p, res->issuer.n);
    pr[res->issuer.n] = '/';
    memcpy(pr + res->issuer.n + 1, res->subject.p, res->subject.n);
    res->principal = (struct slice){pr, res->issuer.n + 1 + res->subject.n};
    return JWT_OK;
}

/* check_parsed() verifies a parsed token with each provider of its
 * issuer allowed for where it was found (seen[i]; NULL: any); the first
 * to accept it wins (*by), else the first one's failure. */
static enum jwt_status check_parsed(const struct jwt_authn *ja,
                                    const struct parsed *t,
                                    const unsigned char *seen, struct arena *a,
                                    int64_t now, struct jwt_result *res,
                                    const struct jwt_provider **by)
{
    struct slice iss = json_string(json_get(t->claims, "iss"));
    enum jwt_status st, first = JWT_UNKNOWN_ISSUER;

    for (size_t i = 0; ja != NULL && i < ja->n; i++) {
        const struct jwt_provider *pv = &ja->v[i];
        if ((seen != NULL && !seen[i]) || !slice_eq_str(iss, pv->issuer))
            continue;
        memset(res, 0, sizeof(*res));
        st = verify(pv, t, now, a, res);
        if (st == JWT_OK || first == JWT_UNKNOWN_ISSUER)
            *by = pv;
        if (st == JWT_OK)
            return JWT_OK;
        if (first == JWT_UNKNOWN_ISSUER)
            first = st;
    }
    memset(res, 0, sizeof(*res));
    return first;
}

enum jwt_status jwt_authn_verify(const struct jwt_authn *ja, struct slice token,
                                 struct arena *a, int64_t now,
                                 struct jwt_result *res)
{
    const struct jwt_provider *pv = NULL;
    struct parsed t;
    enum jwt_status st;

    memset(res, 0, sizeof(*res));
    st = parse_token(token, a, &t);
    if (st != JWT_OK)
        return st;
    return check_parsed(ja, &t, NULL, a, now, res, &pv);
}

const struct json *jwt_claim(const struct jwt_result *res,
                             const struct slice *path, size_t depth)
{
    const struct json *j = res != NULL ? res->claims : NULL;

    for (size_t i = 0; j != NULL && i < depth; i++)
        j = json_get_slice(j, path[i]);
    return j;
}

/* ---- token locations ---------------------------------------------------- */

static struct slice trim(struct slice s)
{
    while (s.n > 0 && (s.p[0] == ' ' || s.p[0] == '\t')) {
        s.p++;
        s.n--;
    }
    while (s.n > 0 && (s.p[s.n - 1] == ' ' || s.p[s.n - 1] == '\t'))
        s.n--;
    return s;
}

/* Every token at a location is handed to fn, which returns < 0 to stop. */
typedef int (*tok_fn)(void *arg, struct slice tok);

static int from_header(const struct http_fields *f, const struct jwt_loc *l,
                       tok_fn fn, void *arg)
{
    size_t np = strlen(l->prefix);

    for (size_t i = 0; i < f->n; i++) {
        struct slice v = f->v[i].value;
        if (!slice_eq_str(f->v[i].name, l->name))
            continue;
        if (np > 0) {
            if (v.n < np || strncasecmp(v.p, l->prefix, np) != 0)
                continue;
            v.p += np;
            v.n -= np;
        }
        v = trim(v);
        if (v.n > 0 && fn(arg, v) < 0)
            return -1;
    }
    return 0;
}

/* The query of path, without a fragment; {NULL,0} when none. */
static struct slice query_of(struct slice path)
{
    const char *q = memchr(path.p, '?', path.n), *hash;

    if (q == NULL)
        return SLICE_NULL;
    q++;
    hash = memchr(q, '#', (size_t)(path.p + path.n - q));
    return (struct slice){q, (size_t)((hash ? hash : path.p + path.n) - q)};
}

static int from_param(struct slice path, const char *name, tok_fn fn, void *arg)
{
    struct slice q = query_of(path);
    size_t nn = strlen(name);
    const char *end, *s;

    if (q.p == NULL)
        return 0;
    end = q.p + q.n;
    for (s = q.p; s != NULL && s < end;) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        const char *e = amp ? amp : end;
        if ((size_t)(e - s) > nn && memcmp(s, name, nn) == 0 && s[nn] == '=' &&
            fn(arg, (struct slice){s + nn + 1, (size_t)(e - s - nn - 1)}) < 0)
            return -1;
        s = amp ? amp + 1 : NULL;
    }
    return 0;
}

static int from_cookie(const struct http_fields *f, const char *name, tok_fn fn,
                       void *arg)
{
    size_t nn = strlen(name);

    for (size_t i = 0; i < f->n; i++) {
        struct slice v = f->v[i].value;
        const char *s = v.p, *end = v.p + v.n;
        if (!slice_eq_str(f->v[i].name, "cookie"))
            continue;
        while (s < end) {
            const char *semi = memchr(s, ';', (size_t)(end - s));
            struct slice c =
                trim((struct slice){s, (size_t)((semi ? semi : end) - s)});
            if (c.n > nn && memcmp(c.p, name, nn) == 0 && c.p[nn] == '=' &&
                fn(arg, (struct slice){c.p + nn + 1, c.n - nn - 1}) < 0)
                return -1;
            if (semi == NULL)
                break;
            s = semi + 1;
        }
    }
    return 0;
}

static int each_at(const struct jwt_loc *l, const struct http_fields *f,
                   struct slice path, tok_fn fn, void *arg)
{
    switch (l->kind) {
    case JWT_LOC_HEADER:
        return from_header(f, l, fn, arg);
    case JWT_LOC_PARAM:
        return from_param(path, l->name, fn, arg);
    case JWT_LOC_COOKIE:
        return from_cookie(f, l->name, fn, arg);
    }
    return 0;
}

/* A claim as a header value: strings, numbers and booleans; nothing with
 * a control character, which could split the header. */
static struct slice claim_value(const struct json *j)
{
    struct slice v;

    if (j == NULL)
        return SLICE_NULL;
    switch (j->type) {
    case JSON_STRING:
    case JSON_NUMBER:
        v = j->str;
        break;
    case JSON_TRUE:
        return SLICE_LIT("true");
    case JSON_FALSE:
        return SLICE_LIT("false");
    default:
        return SLICE_NULL;
    }
    for (size_t i = 0; i < v.n; i++)
        if ((unsigned char)v.p[i] < 0x20 || v.p[i] == 0x7f)
            return SLICE_NULL;
    return v;
}

/* A claim by name; a name with dots that is not itself a claim is a path
 * into nested objects (Envoy's rule for claim_to_headers). */
static const struct json *claim_by_name(const struct json *claims,
                                        const char *name)
{
    const struct json *j = json_get(claims, name);
    const char *s = name;

    if (j != NULL || strchr(name, '.') == NULL)
        return j;
    j = claims;
    while (j != NULL) {
        const char *dot = strchr(s, '.');
        size_t n = dot ? (size_t)(dot - s) : strlen(s);
        j = json_get_slice(j, (struct slice){s, n});
        if (dot == NULL)
            break;
        s = dot + 1;
    }
    return j;
}

static int output_headers(const struct jwt_provider *pv,
                          const struct jwt_result *res, struct slice payload,
                          struct http_fields *fields, struct arena *a)
{
    if (pv->payload_header != NULL &&
        http_fields_set(fields, a, pv->payload_header, payload) < 0)
        return -1;
    for (size_t i = 0; i < pv->nclaim_headers; i++) {
        const struct jwt_claim_header *ch = &pv->claim_headers[i];
        struct slice v = claim_value(claim_by_name(res->claims, ch->claim));
        if (v.p == NULL)
            continue;
        if (http_fields_set(fields, a, ch->header, v) < 0)
            return -1;
    }
    return 0;
}

/* The distinct tokens of one request, and which providers saw each at
 * one of their locations. */
struct found {
    struct slice tok;
    unsigned char *seen;           /* [ja->n]: provider i looked there */
    const struct jwt_provider *by; /* the provider that accepted it */
};

struct collect {
    const struct jwt_authn *ja;
    struct arena *a;
    struct found v[JWT_MAX_TOKENS];
    size_t n;
    size_t pv; /* the provider whose locations are being read */
    int too_many, oom;
};

static struct found *found_of(struct found *v, size_t n, struct slice tok)
{
    for (size_t i = 0; i < n; i++)
        if (slice_eq(v[i].tok, tok))
            return &v[i];
    return NULL;
}

static int collect_one(void *arg, struct slice tok)
{
    struct collect *c = arg;
    struct found *fd = found_of(c->v, c->n, tok);

    if (fd == NULL) {
        if (c->n == JWT_MAX_TOKENS) {
            c->too_many = 1;
            return -1;
        }
        fd = &c->v[c->n];
        fd->tok = tok;
        fd->by = NULL;
        fd->seen = arena_alloc(c->a, c->ja->n);
        if (fd->seen == NULL) {
            c->oom = 1;
            return -1;
        }
        memset(fd->seen, 0, c->ja->n);
        c->n++;
    }
    fd->seen[c->pv] = 1;
    return 0;
}

/* A token found where it is not forwarded: the header goes; a query
 * parameter is cut out of the path. */
struct strip {
    struct collect *c;
    int hit;
};

static int strip_one(void *arg, struct slice tok)
{
    struct strip *st = arg;
    struct found *fd = found_of(st->c->v, st->c->n, tok);

    if (fd != NULL && fd->by != NULL && !fd->by->forward)
        st->hit = 1;
    return 0;
}

/* path without the parameters name=<a token not forwarded>; 0 or -1. */
static int strip_params(struct collect *c, const char *name, struct slice *path)
{
    struct slice q = query_of(*path);
    size_t nn = strlen(name), o;
    const char *end, *s;
    char *np;
    struct strip st = {c, 0};

    from_param(*path, name, strip_one, &st);
    if (q.p == NULL || !st.hit)
        return 0;
    end = q.p + q.n;
    np = arena_alloc(c->a, path->n + 1);
    if (np == NULL)
        return -1;
    o = (size_t)(q.p - path->p);
    memcpy(np, path->p, o);
    for (s = q.p; s != NULL && s < end;) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        const char *e = amp ? amp : end;
        struct found *fd = NULL;
        if ((size_t)(e - s) > nn && memcmp(s, name, nn) == 0 && s[nn] == '=')
            fd = found_of(c->v, c->n,
                          (struct slice){s + nn + 1, (size_t)(e - s - nn - 1)});
        if (fd == NULL || fd->by == NULL || fd->by->forward) {
            if (np[o - 1] != '?')
                np[o++] = '&';
            memcpy(np + o, s, (size_t)(e - s));
            o += (size_t)(e - s);
        }
        s = amp ? amp + 1 : NULL;
    }
    if (np[o - 1] == '?')
        o--; /* nothing is left of the query */
    memcpy(np + o, end, (size_t)(path->p + path->n - end)); /* fragment */
    o += (size_t)(path->p + path->n - end);
    np[o] = '\0';
    *path = (struct slice){np, o};
    return 0;
}

/* check_found() parses one distinct token and verifies it with each
 * provider of its issuer that looked where it was found. */
static enum jwt_status check_found(const struct jwt_authn *ja, struct found *fd,
                                   struct arena *a, int64_t now,
                                   struct jwt_result *res,
                                   struct slice *payload, const char **provider)
{
    struct parsed t;
    const struct jwt_provider *by = NULL;
    enum jwt_status st;

    for (size_t i = 0; i < ja->n && *provider == NULL; i++)
        if (fd->seen[i])
            *provider = ja->v[i].name;
    st = parse_token(fd->tok, a, &t);
    if (st != JWT_OK)
        return st;
    st = check_parsed(ja, &t, fd->seen, a, now, res, &by);
    if (by != NULL)
        *provider = by->name;
    if (st == JWT_OK) {
        fd->by = by;
        *payload = t.payload_b64;
    }
    return st;
}

enum jwt_status jwt_authn_request(const struct jwt_authn *ja,
                                  struct http_fields *fields,
                                  struct slice *path, struct arena *a,
                                  int64_t now, struct jwt_result *res,
                                  const char **provider)
{
    struct collect *c;
    struct jwt_result one;
    struct slice payload;

    memset(res, 0, sizeof(*res));
    *provider = NULL;
    if (ja == NULL)
        return JWT_MISSING;
    c = arena_alloc(a, sizeof(*c));
    if (c == NULL)
        return JWT_OOM;
    memset(c, 0, sizeof(*c));
    c->ja = ja;
    c->a = a;
    /* Every token in every provider's locations, each once (Envoy: all
     * tokens of a request must be valid). */
    for (c->pv = 0; c->pv < ja->n; c->pv++) {
        const struct jwt_provider *pv = &ja->v[c->pv];
        for (size_t k = 0; k < pv->nlocs; k++)
            if (each_at(&pv->locs[k], fields, *path, collect_one, c) < 0)
                goto stop;
    }
stop:
    if (c->oom)
        return JWT_OOM;
    /* What the token would write is never taken from the client. The
     * token slices stay valid: removal only drops entries of fields. */
    for (size_t i = 0; i < ja->n; i++) {
        const struct jwt_provider *pv = &ja->v[i];
        if (pv->payload_header != NULL)
            http_fields_remove(fields, pv->payload_header);
        for (size_t k = 0; k < pv->nclaim_headers; k++)
            http_fields_remove(fields, pv->claim_headers[k].header);
    }
    if (c->too_many) {
        *provider = ja->v[c->pv].name;
        return JWT_BAD_FORMAT;
    }
    if (c->n == 0)
        return JWT_MISSING;
    for (size_t i = 0; i < c->n; i++) {
        const char *by = NULL;
        enum jwt_status st = check_found(ja, &c->v[i], a, now,
                                         i == 0 ? res : &one, &payload, &by);
        if (i == 0 || st != JWT_OK)
            *provider = by;
        if (st != JWT_OK) {
            memset(res, 0, sizeof(*res));
            return st;
        }
        if (output_headers(c->v[i].by, i == 0 ? res : &one, payload, fields,
                           a) < 0)
            return JWT_OOM;
    }
    /* Tokens not forwarded leave the request. */
    for (size_t i = 0; i < ja->n; i++) {
        const struct jwt_provider *pv = &ja->v[i];
        for (size_t k = 0; k < pv->nlocs; k++) {
            const struct jwt_loc *l = &pv->locs[k];
            struct strip st = {c, 0};
            if (l->kind == JWT_LOC_PARAM) {
                if (strip_params(c, l->name, path) < 0)
                    return JWT_OOM;
                continue;
            }
            if (l->kind != JWT_LOC_HEADER)
                continue;
            from_header(fields, l, strip_one, &st);
            if (st.hit)
                http_fields_remove(fields, l->name);
        }
    }
    return JWT_OK;
}

/* ---- the compiled set --------------------------------------------------- */

struct jwt_authn *jwt_authn_ref(struct jwt_authn *ja)
{
    if (ja != NULL)
        __atomic_add_fetch(&ja->refs, 1, __ATOMIC_RELAXED);
    return ja;
}

void jwt_authn_unref(struct jwt_authn *ja)
{
    if (ja == NULL || __atomic_sub_fetch(&ja->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (size_t i = 0; i < ja->n; i++)
        jwt_keys_free(ja->v[i].keys);
    arena_dispose(&ja->mem);
    free(ja);
}

size_t jwt_authn_count(const struct jwt_authn *ja)
{
    return ja != NULL ? ja->n : 0;
}

struct jwt_authn *jwt_authn_one(const char *name, const char *issuer,
                                const char *audience, struct jwt_keys *keys)
{
    struct jwt_authn *ja = calloc(1, sizeof(*ja));
    struct jwt_provider *pv;
    const char **aud;

    if (ja == NULL) {
        jwt_keys_free(keys);
        return NULL;
    }
    ja->refs = 1;
    arena_init(&ja->mem, 1024);
    pv = arena_alloc(&ja->mem, sizeof(*pv));
    aud = arena_alloc(&ja->mem, sizeof(*aud));
    if (pv == NULL || aud == NULL) {
        jwt_keys_free(keys);
        jwt_authn_unref(ja);
        return NULL;
    }
    memset(pv, 0, sizeof(*pv));
    pv->keys = keys;
    ja->v = pv;
    ja->n = 1;
    pv->name = arena_dup(&ja->mem, name, strlen(name));
    pv->issuer = arena_dup(&ja->mem, issuer, strlen(issuer));
    aud[0] = arena_dup(&ja->mem, audience, strlen(audience));
    pv->aud = aud;
    pv->naud = 1;
    if (pv->name == NULL || pv->issuer == NULL || aud[0] == NULL) {
        jwt_authn_unref(ja);
        return NULL;
    }
    return ja;
}

/* ---- jwksUri ------------------------------------------------------------ */

/* A host as it may go into a Host header and a DNS query: LDH labels
 * separated by dots (an IPv4 address is one), or, bracketed in the URL,
 * an IPv6 literal of hex digits, colons and dots. */
static int host_ok(const char *h, size_t n, int v6)
{
    size_t label = 0;

    if (v6) {
        if (memchr(h, ':', n) == NULL)
            return 0;
        for (size_t i = 0; i < n; i++)
            if (!isxdigit((unsigned char)h[i]) && h[i] != ':' && h[i] != '.')
                return 0;
        return 1;
    }
    if (n > 253)
        return 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || h[i] == '.') {
            if (label == 0 || label > 63 || h[i - 1] == '-')
                return 0;
            label = 0;
            continue;
        }
        if (!isalnum((unsigned char)h[i]) && h[i] != '-')
            return 0;
        if (label++ == 0 && h[i] == '-')
            return 0;
    }
    return 1;
}

int jwt_parse_url(const char *url, int *tls, char **host, int *port,
                  char **path, const char **why)
{
    const char *h, *end, *colon, *slash;
    size_t hn;

    *host = *path = NULL;
    *why = "jwksUri must look like http(s)://HOST[:PORT]/PATH";
    if (strncmp(url, "https://", 8) == 0) {
        *tls = 1;
        *port = 443;
        h = url + 8;
    } else if (strncmp(url, "http://", 7) == 0) {
        *tls = 0;
        *port = 80;
        h = url + 7;
    } else {
        return -1;
    }
    slash = strpbrk(h, "/?");
    end = slash ? slash : h + strlen(h);
    if (memchr(h, '@', (size_t)(end - h)) != NULL)
        return -1; /* no credentials in the URL */
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(end - h));
        if (rb == NULL)
            return -1;
        colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
        if (colon == NULL && rb + 1 != end)
            return -1;
        hn = (size_t)(rb - h - 1);
        h++;
    } else {
        colon = memchr(h, ':', (size_t)(end - h));
        hn = (size_t)((colon ? colon : end) - h);
    }
    if (hn == 0)
        return -1;
    if (!host_ok(h, hn, h[-1] == '[')) {
        *why = "jwksUri host must be a DNS name, an IPv4 address or a "
               "bracketed IPv6 address";
        return -1;
    }
    if (colon != NULL) {
        char *e;
        long p = strtol(colon + 1, &e, 10);
        if (e != end || colon + 1 == end || p < 1 || p > 65535)
            return -1;
        *port = (int)p;
    }
    for (const char *p = end; *p != '\0'; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return -1; /* the path goes into a request line as it is */
    *host = strndup(h, hn);
    if (slash == NULL || *slash == '?') {
        if (asprintf(path, "/%s", slash ? slash : "") < 0)
            *path = NULL;
    } else {
        *path = strdup(slash);
    }
    if (*host == NULL || *path == NULL) {
        free(*host);
        free(*path);
        *host = *path = NULL;
        *why = "out of memory";
        return -1;
    }
    return 0;
}
