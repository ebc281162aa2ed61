/*
 * JWKS documents into BoringSSL keys, and JWS signatures checked with
 * them (see jwt.h, jwt-int.h): RSA (PKCS #1 v1.5 and PSS) and ECDSA on
 * P-256 and P-384; the key set of a jwtRule's inline jwks or file://
 * jwksUri (jwt_jwks_load), for the compiler and `strait check`.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/digest.h>
#include <openssl/ec.h>
#include <openssl/ec_key.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/nid.h>
#include <openssl/rsa.h>

#include "core/arena.h"
#include "core/err.h"
#include "core/json.h"
#include "policy/jwt-int.h"

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

struct slice jwt_b64url(struct arena *a, struct slice in)
{
    uint8_t *out;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;

    /* Strict (RFC 7515 section 2): no padding, and the bits after the
     * last whole byte are zero, so each value has one encoding. */
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
    if ((acc & ((1u << bits) - 1)) != 0)
        return SLICE_NULL;
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

size_t jwt_keys_skipped(const struct jwt_keys *k, const char **why)
{
    *why = k != NULL ? k->skip_why : NULL;
    return k != NULL ? k->skipped : 0;
}

static BIGNUM *bn_member(struct arena *a, const struct json *jwk,
                         const char *name)
{
    struct slice b = jwt_b64url(a, json_string(json_get(jwk, name)));

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
    /* A key strait cannot use is skipped (and counted), as Envoy does;
     * the document fails only when no usable key remains. */
    for (; jwk != NULL; jwk = list != NULL ? jwk->next : NULL) {
        struct slice kty = json_string(json_get(jwk, "kty"));
        struct slice use = json_string(json_get(jwk, "use"));
        struct jwt_key *key = &k->v[k->n];
        const char *bad = NULL;

        if (jwk->type != JSON_OBJECT) {
            bad = "a key is not a JSON object";
        } else if (kty.p == NULL) {
            bad = "a key has no \"kty\"";
        } else if (use.p != NULL && !slice_eq_str(use, "sig")) {
            continue; /* an encryption key */
        } else if (slice_eq_str(kty, "RSA")) {
            key->type = EVP_PKEY_RSA;
            key->pkey = rsa_key(&a, jwk, &bad);
        } else if (slice_eq_str(kty, "EC")) {
            key->type = EVP_PKEY_EC;
            key->pkey = ec_key(&a, jwk, &bad);
        } else {
            continue; /* oct, OKP: not verified here, as Envoy skips
                       * what it cannot use */
        }
        if (key->pkey == NULL) {
            if (k->skipped++ == 0)
                k->skip_why = bad;
            continue;
        }
        k->n++;
        key->kid = dup_str(json_string(json_get(jwk, "kid")));
        key->alg = dup_str(json_string(json_get(jwk, "alg")));
    }
    if (k->n == 0) {
        *why = k->skip_why != NULL ? k->skip_why
                                   : "no RSA or EC signing key in the JWKS";
        goto fail;
    }
    arena_dispose(&a);
    return k;
fail:
    jwt_keys_free(k);
    arena_dispose(&a);
    return NULL;
}

/* ---- signatures ---------------------------------------------------------- */

static const struct jwt_alg algs[] = {
    {"RS256", EVP_PKEY_RSA, 0, 0, 0, EVP_sha256},
    {"RS384", EVP_PKEY_RSA, 0, 0, 0, EVP_sha384},
    {"RS512", EVP_PKEY_RSA, 0, 0, 0, EVP_sha512},
    {"PS256", EVP_PKEY_RSA, 1, 0, 0, EVP_sha256},
    {"PS384", EVP_PKEY_RSA, 1, 0, 0, EVP_sha384},
    {"PS512", EVP_PKEY_RSA, 1, 0, 0, EVP_sha512},
    {"ES256", EVP_PKEY_EC, 0, NID_X9_62_prime256v1, 32, EVP_sha256},
    {"ES384", EVP_PKEY_EC, 0, NID_secp384r1, 48, EVP_sha384},
};

static int rsa_verify(const struct jwt_alg *al, EVP_PKEY *pk, struct slice data,
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
static int ec_verify(const struct jwt_alg *al, EVP_PKEY *pk, struct slice data,
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
enum jwt_status jwt_keys_verify(const struct jwt_keys *k,
                                const struct jwt_alg *al, struct slice kid,
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

const struct jwt_alg *jwt_alg_find(struct slice name)
{
    for (size_t i = 0; i < sizeof(algs) / sizeof(*algs); i++)
        if (slice_eq_str(name, algs[i].name))
            return &algs[i];
    return NULL;
}

/* ---- key sets from a resource -------------------------------------------- */

/* read_file() reads a jwksUri file: a regular file of at most 1 MiB,
 * never a FIFO or device that could block the loader. */
static char *read_file(const char *path, size_t *n, char **err)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    const char *why = NULL;
    struct stat st;
    char *p = NULL;
    size_t len = 0;

    if (fd < 0) {
        why = strerror(errno);
        goto fail;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        why = "not a regular file";
        goto fail;
    }
    if (st.st_size > JSON_MAX_BYTES) {
        why = "larger than 1 MiB";
        goto fail;
    }
    p = malloc((size_t)st.st_size + 1);
    if (p == NULL) {
        why = "out of memory";
        goto fail;
    }
    while (len < (size_t)st.st_size) {
        ssize_t r = read(fd, p + len, (size_t)st.st_size - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* shrank while read: what is there */
        len += (size_t)r;
    }
    close(fd);
    *n = len;
    return p;
fail:
    if (fd >= 0)
        close(fd);
    free(p);
    err_set(err, "jwksUri %s: %s", path, why);
    return NULL;
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
        if (k == NULL)
            err_set(err, "jwks: %s", why);
        return k;
    }
    if (uri == NULL || strncmp(uri, "file://", 7) != 0) {
        err_set(err, "jwksUri %s: only file:// URIs are read",
                uri ? uri : "(none)");
        return NULL;
    }
    doc = read_file(uri + 7, &n, err);
    if (doc == NULL)
        return NULL;
    k = jwt_keys_parse(doc, n, &why);
    if (k == NULL)
        err_set(err, "jwksUri %s: %s", uri, why);
    free(doc);
    return k;
}
