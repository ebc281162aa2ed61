/*
 * RequestAuthentication (see jwt.h): JWKS parsing into BoringSSL keys,
 * JWS compact token verification (RS256/384/512, PS256/384/512,
 * ES256/384), Envoy's time, issuer and audience checks, and the token
 * locations of a jwtRule. A compiled jwt_authn keeps its strings in one
 * arena and its keys in jwt_keys objects it owns.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/bn.h>
#include <openssl/digest.h>
#include <openssl/ec.h>
#include <openssl/ec_key.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/nid.h>
#include <openssl/rsa.h>

#include "config/resource.h"
#include "core/arena.h"
#include "core/json.h"
#include "http/http.h"
#include "policy/jwt.h"

/* Nesting allowed in JWT headers, claims and JWKS documents. */
#define JWT_MAX_DEPTH 32

struct jwt_key {
    char *kid; /* NULL: none */
    char *alg; /* NULL: any of its type */
    int type;  /* EVP_PKEY_RSA or EVP_PKEY_EC */
    EVP_PKEY *pkey;
};

struct jwt_keys {
    struct jwt_key *v;
    size_t n;
};

enum loc_kind { LOC_HEADER, LOC_PARAM, LOC_COOKIE };

struct loc {
    enum loc_kind kind;
    const char *name;   /* headers: lowercase */
    const char *prefix; /* headers: "" for none */
};

struct claim_header {
    const char *header; /* lowercase */
    const char *claim;
};

struct provider {
    const char *name; /* "ns/name" */
    const char *issuer;
    const char *const *aud;
    size_t naud;
    struct jwt_keys *keys; /* NULL: none (an http(s) jwksUri) */
    const struct loc *locs;
    size_t nlocs;
    int forward;
    const char *payload_header; /* NULL: none */
    const struct claim_header *claim_headers;
    size_t nclaim_headers;
};

struct jwt_authn {
    int refs;
    struct arena mem;
    struct provider *v;
    size_t n;
};

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

/* ---- base64url ---------------------------------------------------------- */

static int b64url_val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

/* b64url() decodes base64url (padding optional) into the arena; the
 * output has a NUL after it. {NULL,0} when malformed or out of memory. */
static struct slice b64url(struct arena *a, struct slice in)
{
    uint8_t *out;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;

    while (in.n > 0 && in.p[in.n - 1] == '=')
        in.n--;
    if (in.n % 4 == 1)
        return SLICE_NULL;
    out = arena_alloc(a, in.n * 3 / 4 + 1);
    if (out == NULL)
        return SLICE_NULL;
    for (size_t i = 0; i < in.n; i++) {
        int v = b64url_val(in.p[i]);
        if (v < 0)
            return SLICE_NULL;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    out[o] = 0;
    return (struct slice){(const char *)out, o};
}

/* ---- keys --------------------------------------------------------------- */

void jwt_keys_free(struct jwt_keys *k)
{
    if (k == NULL)
        return;
    for (size_t i = 0; i < k->n; i++) {
        EVP_PKEY_free(k->v[i].pkey);
        free(k->v[i].kid);
        free(k->v[i].alg);
    }
    free(k->v);
    free(k);
}

size_t jwt_keys_count(const struct jwt_keys *k)
{
    return k != NULL ? k->n : 0;
}

static BIGNUM *bn_member(struct arena *a, const struct json *jwk,
                         const char *name)
{
    struct slice b = b64url(a, json_string(json_get(jwk, name)));

    if (b.p == NULL || b.n == 0)
        return NULL;
    return BN_bin2bn((const uint8_t *)b.p, b.n, NULL);
}

static EVP_PKEY *rsa_key(struct arena *a, const struct json *jwk,
                         const char **why)
{
    BIGNUM *n = bn_member(a, jwk, "n"), *e = bn_member(a, jwk, "e");
    RSA *rsa = NULL;
    EVP_PKEY *pk = NULL;

    *why = "RSA key: bad or missing n or e";
    if (n == NULL || e == NULL)
        goto fail;
    rsa = RSA_new();
    if (rsa == NULL || !RSA_set0_key(rsa, n, e, NULL))
        goto fail;
    n = e = NULL; /* owned by rsa now */
    if (RSA_bits(rsa) < 1024) {
        *why = "RSA key: shorter than 1024 bits";
        goto fail;
    }
    pk = EVP_PKEY_new();
    if (pk == NULL || !EVP_PKEY_assign_RSA(pk, rsa))
        goto fail;
    return pk;
fail:
    EVP_PKEY_free(pk);
    RSA_free(rsa);
    BN_free(n);
    BN_free(e);
    return NULL;
}

static EVP_PKEY *ec_key(struct arena *a, const struct json *jwk,
                        const char **why)
{
    struct slice crv = json_string(json_get(jwk, "crv"));
    int nid;
    BIGNUM *x = NULL, *y = NULL;
    EC_KEY *ec = NULL;
    EVP_PKEY *pk = NULL;

    if (slice_eq_str(crv, "P-256")) {
        nid = NID_X9_62_prime256v1;
    } else if (slice_eq_str(crv, "P-384")) {
        nid = NID_secp384r1;
    } else {
        *why = "EC key: crv is not P-256 or P-384";
        return NULL;
    }
    *why = "EC key: bad or missing x or y, or not a point of the curve";
    x = bn_member(a, jwk, "x");
    y = bn_member(a, jwk, "y");
    ec = EC_KEY_new_by_curve_name(nid);
    if (x == NULL || y == NULL || ec == NULL ||
        !EC_KEY_set_public_key_affine_coordinates(ec, x, y))
        goto fail;
    pk = EVP_PKEY_new();
    if (pk == NULL || !EVP_PKEY_assign_EC_KEY(pk, ec))
        goto fail;
    BN_free(x);
    BN_free(y);
    return pk;
fail:
    EVP_PKEY_free(pk);
    EC_KEY_free(ec);
    BN_free(x);
    BN_free(y);
    return NULL;
}

static char *dup_str(struct slice s)
{
    return s.p != NULL ? strndup(s.p, s.n) : NULL;
}

struct jwt_keys *jwt_keys_parse(const char *p, size_t n, const char **why)
{
    struct arena a;
    const struct json *doc, *list, *jwk;
    struct jwt_keys *k = NULL;
    size_t cap;

    arena_init(&a, 4096);
    doc = json_parse(&a, p, n, JWT_MAX_DEPTH, why);
    if (doc == NULL)
        goto fail;
    if (doc->type != JSON_OBJECT) {
        *why = "a JWKS is a JSON object";
        goto fail;
    }
    list = json_get(doc, "keys");
    if (list != NULL && list->type != JSON_ARRAY) {
        *why = "\"keys\" is not an array";
        goto fail;
    }
    cap = list != NULL ? list->n : 1;
    k = calloc(1, sizeof(*k));
    if (k == NULL || (k->v = calloc(cap ? cap : 1, sizeof(*k->v))) == NULL) {
        *why = "out of memory";
        goto fail;
    }
    jwk = list != NULL ? list->child : doc;
    for (; jwk != NULL; jwk = list != NULL ? jwk->next : NULL) {
        struct slice kty = json_string(json_get(jwk, "kty"));
        struct slice use = json_string(json_get(jwk, "use"));
        struct jwt_key *key = &k->v[k->n];

        if (jwk->type != JSON_OBJECT) {
            *why = "a key is not a JSON object";
            goto fail;
        }
        if (kty.p == NULL) {
            *why = "a key has no \"kty\"";
            goto fail;
        }
        if (use.p != NULL && !slice_eq_str(use, "sig"))
            continue; /* an encryption key */
        if (slice_eq_str(kty, "RSA")) {
            key->type = EVP_PKEY_RSA;
            key->pkey = rsa_key(&a, jwk, why);
        } else if (slice_eq_str(kty, "EC")) {
            key->type = EVP_PKEY_EC;
            key->pkey = ec_key(&a, jwk, why);
        } else {
            continue; /* oct, OKP: not verified here, as Envoy skips
                       * what it cannot use */
        }
        if (key->pkey == NULL)
            goto fail;
        k->n++;
        key->kid = dup_str(json_string(json_get(jwk, "kid")));
        key->alg = dup_str(json_string(json_get(jwk, "alg")));
    }
    if (k->n == 0) {
        *why = "no RSA or EC signing key in the JWKS";
        goto fail;
    }
    arena_dispose(&a);
    return k;
fail:
    jwt_keys_free(k);
    arena_dispose(&a);
    return NULL;
}

/* ---- verification -------------------------------------------------------- */

struct alg {
    const char *name;
    int type; /* EVP_PKEY_RSA or EVP_PKEY_EC */
    int pss;
    int curve;      /* EC: the curve's NID */
    size_t coord;   /* EC: bytes of r and of s */
    const EVP_MD *(*md)(void);
};

static const struct alg algs[] = {
    {"RS256", EVP_PKEY_RSA, 0, 0, 0, EVP_sha256},
    {"RS384", EVP_PKEY_RSA, 0, 0, 0, EVP_sha384},
    {"RS512", EVP_PKEY_RSA, 0, 0, 0, EVP_sha512},
    {"PS256", EVP_PKEY_RSA, 1, 0, 0, EVP_sha256},
    {"PS384", EVP_PKEY_RSA, 1, 0, 0, EVP_sha384},
    {"PS512", EVP_PKEY_RSA, 1, 0, 0, EVP_sha512},
    {"ES256", EVP_PKEY_EC, 0, NID_X9_62_prime256v1, 32, EVP_sha256},
    {"ES384", EVP_PKEY_EC, 0, NID_secp384r1, 48, EVP_sha384},
};

static int rsa_verify(const struct alg *al, EVP_PKEY *pk, struct slice data,
                      struct slice sig)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pctx = NULL;
    int ok = 0;

    if (ctx == NULL)
        return 0;
    if (EVP_DigestVerifyInit(ctx, &pctx, al->md(), NULL, pk) == 1 &&
        (!al->pss ||
         (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
          EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, -1) == 1)))
        ok = EVP_DigestVerify(ctx, (const uint8_t *)sig.p, sig.n,
                              (const uint8_t *)data.p, data.n) == 1;
    EVP_MD_CTX_free(ctx);
    return ok;
}

/* JWS ECDSA signatures are r and s side by side, each the curve's size. */
static int ec_verify(const struct alg *al, EVP_PKEY *pk, struct slice data,
                     struct slice sig)
{
    const EC_KEY *ec = EVP_PKEY_get0_EC_KEY(pk);
    uint8_t dg[EVP_MAX_MD_SIZE];
    unsigned dn = 0;
    ECDSA_SIG *es;
    BIGNUM *r, *s;
    int ok;

    if (ec == NULL ||
        EC_GROUP_get_curve_name(EC_KEY_get0_group(ec)) != al->curve ||
        sig.n != 2 * al->coord)
        return 0;
    if (!EVP_Digest(data.p, data.n, dg, &dn, al->md(), NULL))
        return 0;
    es = ECDSA_SIG_new();
    r = BN_bin2bn((const uint8_t *)sig.p, al->coord, NULL);
    s = BN_bin2bn((const uint8_t *)sig.p + al->coord, al->coord, NULL);
    if (es == NULL || r == NULL || s == NULL || !ECDSA_SIG_set0(es, r, s)) {
        BN_free(r);
        BN_free(s);
        ECDSA_SIG_free(es);
        return 0;
    }
    ok = ECDSA_do_verify(dg, dn, es, ec) == 1;
    ECDSA_SIG_free(es);
    return ok;
}

/* Envoy's key choice: a key whose kid differs from the token's (when both
 * have one), whose alg differs, or whose type is not the alg's is
 * skipped; the others are tried in order. */
static enum jwt_status verify_sig(const struct jwt_keys *k,
                                  const struct alg *al, struct slice kid,
                                  struct slice data, struct slice sig)
{
    int tried = 0;

    if (k == NULL)
        return JWT_NO_JWKS;
    for (size_t i = 0; i < k->n; i++) {
        const struct jwt_key *key = &k->v[i];
        if (kid.p != NULL && key->kid != NULL && !slice_eq_str(kid, key->kid))
            continue;
        if (key->alg != NULL && strcmp(key->alg, al->name) != 0)
            continue;
        if (key->type != al->type)
            continue;
        tried = 1;
        if (al->type == EVP_PKEY_RSA ? rsa_verify(al, key->pkey, data, sig)
                                     : ec_verify(al, key->pkey, data, sig))
            return JWT_OK;
    }
    return tried ? JWT_BAD_SIGNATURE : JWT_NO_KEY;
}

/* A NumericDate claim: absent is fine (0 with *has 0), a non-number is
 * a bad payload. */
static int numeric(const struct json *claims, const char *name, double *v,
                   int *has)
{
    const struct json *j = json_get(claims, name);

    *has = j != NULL;
    if (j == NULL)
        return 0;
    if (j->type != JSON_NUMBER)
        return -1;
    *v = j->num;
    return 0;
}

static int aud_allowed(const struct provider *pv, const struct json *aud)
{
    if (pv->naud == 0)
        return 1;
    if (aud == NULL)
        return 0;
    for (size_t i = 0; i < pv->naud; i++) {
        if (aud->type == JSON_STRING && slice_eq_str(aud->str, pv->aud[i]))
            return 1;
        if (aud->type != JSON_ARRAY)
            continue;
        for (const struct json *e = aud->child; e != NULL; e = e->next)
            if (e->type == JSON_STRING && slice_eq_str(e->str, pv->aud[i]))
                return 1;
    }
    return 0;
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

    if (t.n == 0 || d1 == NULL)
        return JWT_BAD_FORMAT;
    d2 = memchr(d1 + 1, '.', (size_t)(t.p + t.n - d1 - 1));
    if (d2 == NULL || memchr(d2 + 1, '.', (size_t)(t.p + t.n - d2 - 1)))
        return JWT_BAD_FORMAT;
    out->signed_part = (struct slice){t.p, (size_t)(d2 - t.p)};
    out->payload_b64 = (struct slice){d1 + 1, (size_t)(d2 - d1 - 1)};
    h = b64url(a, (struct slice){t.p, (size_t)(d1 - t.p)});
    p = b64url(a, out->payload_b64);
    out->sig = b64url(a, (struct slice){d2 + 1, (size_t)(t.p + t.n - d2 - 1)});
    if (h.p == NULL || p.p == NULL || out->sig.p == NULL || out->sig.n == 0)
        return JWT_BAD_FORMAT;
    out->header = json_parse(a, h.p, h.n, JWT_MAX_DEPTH, &why);
    if (out->header == NULL || out->header->type != JSON_OBJECT)
        return JWT_BAD_HEADER;
    out->claims = json_parse(a, p.p, p.n, JWT_MAX_DEPTH, &why);
    if (out->claims == NULL || out->claims->type != JSON_OBJECT)
        return JWT_BAD_PAYLOAD;
    return JWT_OK;
}

static const struct provider *provider_of(const struct jwt_authn *ja,
                                          struct slice iss)
{
    for (size_t i = 0; ja != NULL && i < ja->n; i++)
        if (slice_eq_str(iss, ja->v[i].issuer))
            return &ja->v[i];
    return NULL;
}

/* verify() checks a parsed token against pv, in Envoy's order: the
 * header, the times, the audiences, then the signature. */
static enum jwt_status verify(const struct provider *pv,
                              const struct parsed *t, int64_t now,
                              struct arena *a, struct jwt_result *res)
{
    struct slice alg = json_string(json_get(t->header, "alg"));
    const struct json *kid = json_get(t->header, "kid");
    const struct alg *al = NULL;
    double exp = 0, nbf = 0;
    int has_exp, has_nbf;
    enum jwt_status st;
    char *pr;

    for (size_t i = 0; alg.p != NULL && i < sizeof(algs) / sizeof(*algs); i++)
        if (slice_eq_str(alg, algs[i].name))
            al = &algs[i];
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
    st = verify_sig(pv->keys, al, json_string(kid), t->signed_part, t->sig);
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

/* check_token() picks the provider by the token's issuer among those
 * allowed for its location (pv: only that one; NULL: any). */
static enum jwt_status check_token(const struct jwt_authn *ja,
                                   struct slice token, struct arena *a,
                                   int64_t now, struct jwt_result *res,
                                   const struct provider **out)
{
    struct parsed t;
    enum jwt_status st;
    const struct provider *pv;

    memset(res, 0, sizeof(*res));
    *out = NULL;
    st = parse_token(token, a, &t);
    if (st != JWT_OK)
        return st;
    pv = provider_of(ja, json_string(json_get(t.claims, "iss")));
    if (pv == NULL)
        return JWT_UNKNOWN_ISSUER;
    *out = pv;
    return verify(pv, &t, now, a, res);
}

enum jwt_status jwt_authn_verify(const struct jwt_authn *ja, struct slice token,
                                 struct arena *a, int64_t now,
                                 struct jwt_result *res)
{
    const struct provider *pv;

    return check_token(ja, token, a, now, res, &pv);
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

static struct slice from_header(const struct http_fields *f,
                                const struct loc *l)
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
        if (v.n > 0)
            return v;
    }
    return SLICE_NULL;
}

static struct slice from_param(struct slice path, const char *name)
{
    const char *q = memchr(path.p, '?', path.n);
    size_t nn = strlen(name);
    const char *end = path.p + path.n, *s;

    if (q == NULL)
        return SLICE_NULL;
    for (s = q + 1; s < end;) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        const char *e = amp ? amp : end;
        const char *hash = memchr(s, '#', (size_t)(e - s));
        if (hash != NULL)
            e = hash;
        if ((size_t)(e - s) > nn && memcmp(s, name, nn) == 0 && s[nn] == '=')
            return (struct slice){s + nn + 1, (size_t)(e - s - nn - 1)};
        if (amp == NULL || hash != NULL)
            break;
        s = amp + 1;
    }
    return SLICE_NULL;
}

static struct slice from_cookie(const struct http_fields *f, const char *name)
{
    size_t nn = strlen(name);

    for (size_t i = 0; i < f->n; i++) {
        struct slice v = f->v[i].value;
        const char *s = v.p, *end = v.p + v.n;
        if (!slice_eq_str(f->v[i].name, "cookie"))
            continue;
        while (s < end) {
            const char *semi = memchr(s, ';', (size_t)(end - s));
            struct slice c = trim((struct slice){
                s, (size_t)((semi ? semi : end) - s)});
            if (c.n > nn && memcmp(c.p, name, nn) == 0 && c.p[nn] == '=')
                return (struct slice){c.p + nn + 1, c.n - nn - 1};
            if (semi == NULL)
                break;
            s = semi + 1;
        }
    }
    return SLICE_NULL;
}

static struct slice find_at(const struct loc *l, const struct http_fields *f,
                            struct slice path)
{
    switch (l->kind) {
    case LOC_HEADER:
        return from_header(f, l);
    case LOC_PARAM:
        return from_param(path, l->name);
    case LOC_COOKIE:
        return from_cookie(f, l->name);
    }
    return SLICE_NULL;
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

static int output_headers(const struct provider *pv,
                          const struct jwt_result *res, struct slice payload,
                          struct http_fields *fields, struct arena *a)
{
    if (pv->payload_header != NULL &&
        http_fields_set(fields, a, pv->payload_header, payload) < 0)
        return -1;
    for (size_t i = 0; i < pv->nclaim_headers; i++) {
        const struct claim_header *ch = &pv->claim_headers[i];
        struct slice v = claim_value(claim_by_name(res->claims, ch->claim));
        if (v.p == NULL)
            continue;
        if (http_fields_set(fields, a, ch->header, v) < 0)
            return -1;
    }
    return 0;
}

enum jwt_status jwt_authn_request(const struct jwt_authn *ja,
                                  struct http_fields *fields, struct slice path,
                                  struct arena *a, int64_t now,
                                  struct jwt_result *res,
                                  const char **provider)
{
    enum jwt_status first = JWT_MISSING;

    memset(res, 0, sizeof(*res));
    *provider = NULL;
    if (ja == NULL)
        return JWT_MISSING;
    /* Each provider looks in its own locations; a token found there is
     * checked by the provider of its issuer when that provider looks in
     * the same place, as Envoy's extractor pairs locations with issuers.
     * The first token found decides. */
    for (size_t i = 0; i < ja->n; i++) {
        const struct provider *pv = &ja->v[i];
        for (size_t k = 0; k < pv->nlocs; k++) {
            const struct loc *l = &pv->locs[k];
            struct slice tok = find_at(l, fields, path);
            const struct provider *by;
            struct parsed t;
            enum jwt_status st;

            if (tok.p == NULL)
                continue;
            st = parse_token(tok, a, &t);
            if (st != JWT_OK) {
                *provider = pv->name;
                return st;
            }
            by = provider_of(ja, json_string(json_get(t.claims, "iss")));
            if (by != pv) {
                /* Another provider's token, or an unknown issuer's:
                 * remembered in case no provider claims it. */
                if (first == JWT_MISSING)
                    first = JWT_UNKNOWN_ISSUER;
                continue;
            }
            *provider = pv->name;
            st = verify(pv, &t, now, a, res);
            if (st != JWT_OK)
                return st;
            if (!pv->forward && l->kind == LOC_HEADER)
                http_fields_remove(fields, l->name);
            if (output_headers(pv, res, t.payload_b64, fields, a) < 0)
                return JWT_OOM;
            return JWT_OK;
        }
    }
    return first;
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

/* ---- building ----------------------------------------------------------- */

static char *read_file(const char *path, size_t *n, char **err)
{
    FILE *f = fopen(path, "rb");
    char *p = NULL;
    size_t len = 0;

    if (f == NULL) {
        if (asprintf(err, "jwksUri %s: %s", path, strerror(errno)) < 0)
            *err = NULL;
        return NULL;
    }
    p = malloc(JSON_MAX_BYTES + 1);
    if (p != NULL)
        len = fread(p, 1, JSON_MAX_BYTES + 1, f);
    fclose(f);
    if (p == NULL || len > JSON_MAX_BYTES) {
        free(p);
        if (asprintf(err, "jwksUri %s: %s", path,
                     p == NULL ? "out of memory" : "larger than 1 MiB") < 0)
            *err = NULL;
        return NULL;
    }
    *n = len;
    return p;
}

struct jwt_keys *jwt_jwks_load(const char *jwks, const char *uri, char **err)
{
    struct jwt_keys *k;
    const char *why = NULL;
    char *doc = NULL;
    size_t n;

    *err = NULL;
    if (jwks != NULL) {
        k = jwt_keys_parse(jwks, strlen(jwks), &why);
        if (k == NULL && asprintf(err, "jwks: %s", why) < 0)
            *err = NULL;
        return k;
    }
    if (uri == NULL || strncmp(uri, "file://", 7) != 0) {
        if (asprintf(err, "jwksUri %s: only file:// URIs are read",
                     uri ? uri : "(none)") < 0)
            *err = NULL;
        return NULL;
    }
    doc = read_file(uri + 7, &n, err);
    if (doc == NULL)
        return NULL;
    k = jwt_keys_parse(doc, n, &why);
    if (k == NULL && asprintf(err, "jwksUri %s: %s", uri, why) < 0)
        *err = NULL;
    free(doc);
    return k;
}

static int applies(const struct resource *r,
                   const struct res_request_authentication *ra,
                   const char *node_ns, const struct conf_strmap *labels,
                   const char *root_ns)
{
    int in_ns = strcmp(r->meta.ns, node_ns) == 0;
    int in_root = strcmp(r->meta.ns, root_ns) == 0;

    if (!in_ns && !in_root)
        return 0;
    if (ra->selector.match_labels.n == 0)
        return 1;
    return labels != NULL && res_labels_match(&ra->selector.match_labels, labels);
}

static char *lower_dup(struct arena *a, const char *s)
{
    char *d = arena_dup(a, s, strlen(s));

    for (char *p = d; p != NULL && *p != '\0'; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p + 32);
    return d;
}

static int compile_rule(struct arena *a, const char *name,
                        const struct res_jwt_rule *in, struct provider *pv,
                        jwt_uri_fn uri_fn, void *uri_arg, char **err)
{
    size_t nl = in->from_headers.n + in->from_params.n + in->from_cookies.n;
    struct loc *locs;
    const char **aud = NULL;
    struct claim_header *ch = NULL;

    memset(pv, 0, sizeof(*pv));
    pv->name = name;
    pv->issuer = arena_dup(a, in->issuer ? in->issuer : "",
                           in->issuer ? strlen(in->issuer) : 0);
    pv->forward = in->forward_original_token;
    if (in->jwks != NULL || (in->jwks_uri != NULL &&
                             strncmp(in->jwks_uri, "file://", 7) == 0)) {
        pv->keys = jwt_jwks_load(in->jwks, in->jwks_uri, err);
        if (pv->keys == NULL)
            return -1; /* `strait check` reports it; a reload keeps the
                        * running snapshot */
    } else if (in->jwks_uri != NULL && uri_fn != NULL) {
        size_t n = 0;
        const char *doc = uri_fn(uri_arg, in->jwks_uri, in->timeout_ms, &n);
        const char *why;
        /* The cache only keeps documents that parse. */
        if (doc != NULL)
            pv->keys = jwt_keys_parse(doc, n, &why);
    }
    if (in->audiences.n > 0 &&
        (aud = arena_alloc(a, in->audiences.n * sizeof(*aud))) == NULL)
        return -1;
    for (size_t i = 0; i < in->audiences.n; i++)
        if ((aud[i] = arena_dup(a, in->audiences.v[i],
                                strlen(in->audiences.v[i]))) == NULL)
            return -1;
    pv->aud = aud;
    pv->naud = in->audiences.n;
    /* Istio's default locations: Authorization: Bearer, ?access_token. */
    locs = arena_alloc(a, (nl ? nl : 2) * sizeof(*locs));
    if (locs == NULL)
        return -1;
    if (nl == 0) {
        locs[0] = (struct loc){LOC_HEADER, "authorization", "Bearer "};
        locs[1] = (struct loc){LOC_PARAM, "access_token", ""};
        nl = 2;
    } else {
        size_t k = 0;
        for (size_t i = 0; i < in->from_headers.n; i++) {
            const struct res_jwt_header *h =
                (const struct res_jwt_header *)in->from_headers.v + i;
            locs[k].kind = LOC_HEADER;
            locs[k].name = lower_dup(a, h->name ? h->name : "");
            locs[k].prefix = arena_dup(a, h->prefix ? h->prefix : "",
                                       h->prefix ? strlen(h->prefix) : 0);
            if (locs[k].name == NULL || locs[k].prefix == NULL)
                return -1;
            k++;
        }
        for (size_t i = 0; i < in->from_params.n; i++, k++)
            locs[k] = (struct loc){LOC_PARAM,
                                   arena_dup(a, in->from_params.v[i],
                                             strlen(in->from_params.v[i])),
                                   ""};
        for (size_t i = 0; i < in->from_cookies.n; i++, k++)
            locs[k] = (struct loc){LOC_COOKIE,
                                   arena_dup(a, in->from_cookies.v[i],
                                             strlen(in->from_cookies.v[i])),
                                   ""};
    }
    pv->locs = locs;
    pv->nlocs = nl;
    if (in->output_payload_to_header != NULL &&
        (pv->payload_header = lower_dup(a, in->output_payload_to_header)) ==
            NULL)
        return -1;
    if (in->output_claim_to_headers.n > 0 &&
        (ch = arena_alloc(a, in->output_claim_to_headers.n * sizeof(*ch))) ==
            NULL)
        return -1;
    for (size_t i = 0; i < in->output_claim_to_headers.n; i++) {
        const struct res_jwt_claim_header *c =
            (const struct res_jwt_claim_header *)in->output_claim_to_headers.v +
            i;
        ch[i].header = lower_dup(a, c->header ? c->header : "");
        ch[i].claim = arena_dup(a, c->claim ? c->claim : "",
                                c->claim ? strlen(c->claim) : 0);
        if (ch[i].header == NULL || ch[i].claim == NULL)
            return -1;
    }
    pv->claim_headers = ch;
    pv->nclaim_headers = in->output_claim_to_headers.n;
    return 0;
}

struct jwt_authn *jwt_authn_build(const struct resource_set *set,
                                  const char *node_ns,
                                  const struct conf_strmap *node_labels,
                                  const char *root_ns, char **err)
{
    return jwt_authn_build_with(set, node_ns, node_labels, root_ns, NULL,
                                NULL, err);
}

struct jwt_authn *jwt_authn_build_with(const struct resource_set *set,
                                       const char *node_ns,
                                       const struct conf_strmap *node_labels,
                                       const char *root_ns, jwt_uri_fn uri_fn,
                                       void *uri_arg, char **err)
{
    struct jwt_authn *ja = NULL;
    size_t n = 0;

    *err = NULL;
    for (size_t i = 0; set != NULL && i < set->n; i++)
        if (set->v[i]->kind == RES_REQUEST_AUTHENTICATION &&
            applies(set->v[i], res_request_authentication(set->v[i]), node_ns,
                    node_labels, root_ns))
            n += res_request_authentication(set->v[i])->jwt_rules.n;
    if (n == 0)
        return NULL;
    ja = calloc(1, sizeof(*ja));
    if (ja == NULL)
        goto oom;
    ja->refs = 1;
    arena_init(&ja->mem, 8 * 1024);
    ja->v = arena_alloc(&ja->mem, n * sizeof(*ja->v));
    if (ja->v == NULL)
        goto oom;
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_request_authentication *ra;
        char name[520];
        const char *nm;

        if (r->kind != RES_REQUEST_AUTHENTICATION)
            continue;
        ra = res_request_authentication(r);
        if (!applies(r, ra, node_ns, node_labels, root_ns))
            continue;
        snprintf(name, sizeof(name), "%s/%s", r->meta.ns, r->meta.name);
        nm = arena_dup(&ja->mem, name, strlen(name));
        if (nm == NULL)
            goto oom;
        for (size_t k = 0; k < ra->jwt_rules.n; k++) {
            char *why = NULL;
            if (compile_rule(&ja->mem, nm,
                             (const struct res_jwt_rule *)ra->jwt_rules.v + k,
                             &ja->v[ja->n], uri_fn, uri_arg, &why) < 0) {
                jwt_keys_free(ja->v[ja->n].keys);
                if (why == NULL)
                    goto oom;
                if (asprintf(err, "RequestAuthentication %s: jwtRules[%zu]: %s",
                             name, k, why) < 0)
                    *err = NULL;
                free(why);
                goto fail;
            }
            ja->n++;
        }
    }
    return ja;
oom:
    *err = strdup("request authentication: out of memory");
fail:
    jwt_authn_unref(ja);
    return NULL;
}

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
