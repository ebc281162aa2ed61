/*
 * SPIFFE trust bundles: a JWK Set of X.509 authorities (see bundle.h).
 * The JSON reader is core/json's, bounded in bytes, depth and nodes; the
 * certificates are parsed by BoringSSL from the x5c DER.
 */
#include "config.h"

#include <openssl/base64.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/mem.h>
#include <openssl/rsa.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/buf.h"
#include "core/json.h"
#include "tls/bundle.h"

/* A certificate's DER is at most this long (x5c entries past it are
 * refused before they are decoded). */
#define BUNDLE_MAX_CERT (64 * 1024)

/* Base64url without padding of n bytes into out (cap bytes, NUL
 * included); the length written, or 0 when it does not fit. */
static size_t b64url(const uint8_t *p, size_t n, char *out, size_t cap)
{
    size_t m;

    if (!EVP_EncodedLength(&m, n) || m > cap)
        return 0;
    m = EVP_EncodeBlock((uint8_t *)out, p, n);
    while (m > 0 && out[m - 1] == '=')
        m--;
    out[m] = '\0';
    for (size_t i = 0; i < m; i++)
        out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    return m;
}

/* Big-endian bytes of bn, left-padded to len (0: its own length), as
 * base64url into out. 0 or -1. */
static int bn_b64url(const BIGNUM *bn, size_t len, char *out, size_t cap)
{
    uint8_t tmp[1024];

    if (len == 0)
        len = BN_num_bytes(bn);
    if (len == 0 || len > sizeof(tmp) || !BN_bn2bin_padded(tmp, len, bn))
        return -1;
    return b64url(tmp, len, out, cap) > 0 ? 0 : -1;
}

/* The JWK parameters of a certificate's public key. */
struct jwk_params {
    const char *kty; /* "EC", "RSA" */
    const char *crv; /* EC: "P-256", "P-384", "P-521" */
    char a[1400];    /* EC: x; RSA: n */
    char b[1400];    /* EC: y; RSA: e */
};

static int jwk_params(X509 *x, struct jwk_params *jp)
{
    EVP_PKEY *k = X509_get_pubkey(x); /* a reference */
    int rc = -1;

    memset(jp, 0, sizeof(*jp));
    if (k == NULL)
        return -1;
    if (EVP_PKEY_id(k) == EVP_PKEY_EC) {
        const EC_KEY *ec = EVP_PKEY_get0_EC_KEY(k);
        const EC_GROUP *g = EC_KEY_get0_group(ec);
        BIGNUM *bx = BN_new(), *by = BN_new();
        size_t flen = (EC_GROUP_get_degree(g) + 7) / 8;

        switch (EC_GROUP_get_curve_name(g)) {
        case NID_X9_62_prime256v1:
            jp->crv = "P-256";
            break;
        case NID_secp384r1:
            jp->crv = "P-384";
            break;
        case NID_secp521r1:
            jp->crv = "P-521";
            break;
        default:
            break;
        }
        jp->kty = "EC";
        if (jp->crv != NULL && bx != NULL && by != NULL &&
            EC_POINT_get_affine_coordinates_GFp(g, EC_KEY_get0_public_key(ec),
                                                bx, by, NULL) &&
            bn_b64url(bx, flen, jp->a, sizeof(jp->a)) == 0 &&
            bn_b64url(by, flen, jp->b, sizeof(jp->b)) == 0)
            rc = 0;
        BN_free(bx);
        BN_free(by);
    } else if (EVP_PKEY_id(k) == EVP_PKEY_RSA) {
        const RSA *r = EVP_PKEY_get0_RSA(k);
        jp->kty = "RSA";
        if (bn_b64url(RSA_get0_n(r), 0, jp->a, sizeof(jp->a)) == 0 &&
            bn_b64url(RSA_get0_e(r), 0, jp->b, sizeof(jp->b)) == 0)
            rc = 0;
    }
    EVP_PKEY_free(k);
    ERR_clear_error();
    return rc;
}

/* A member that, when present, must equal want. */
static int member_matches(const struct json *key, const char *name,
                          const char *want)
{
    const struct json *m = json_get(key, name);
    struct slice s;

    if (m == NULL)
        return 1;
    s = json_string(m);
    return s.p != NULL && want != NULL && s.n == strlen(want) &&
           memcmp(s.p, want, s.n) == 0;
}

static int str_is(const struct json *j, const char *want)
{
    struct slice s = json_string(j);

    return s.p != NULL && s.n == strlen(want) && memcmp(s.p, want, s.n) == 0;
}

/* An integer member >= 0: its value, -1 when absent, -2 when not one. */
static int64_t int_member(const struct json *o, const char *name)
{
    const struct json *m = json_get(o, name);

    if (m == NULL)
        return -1;
    if (m->type != JSON_NUMBER || m->num < 0 || m->num > 9.0e15 ||
        m->num != (double)(int64_t)m->num)
        return -2;
    return (int64_t)m->num;
}

/* One x509-svid key: its single certificate, checked. */
static X509 *x509_key(const struct json *key, const char **why)
{
    const struct json *x5c = json_get(key, "x5c"), *kty = json_get(key, "kty");
    struct jwk_params jp;
    struct slice s;
    uint8_t *der = NULL;
    const uint8_t *q;
    size_t len;
    X509 *x = NULL;

    if (x5c == NULL || x5c->type != JSON_ARRAY || x5c->n != 1) {
        *why = "an x509-svid key must have x5c with exactly one certificate";
        return NULL;
    }
    s = json_string(x5c->child);
    if (s.p == NULL || s.n == 0 || s.n > BUNDLE_MAX_CERT * 4 / 3 + 4) {
        *why = "x5c[0] must be a base64 DER certificate";
        return NULL;
    }
    if (!EVP_DecodedLength(&len, s.n) || (der = malloc(len)) == NULL ||
        !EVP_DecodeBase64(der, &len, len, (const uint8_t *)s.p, s.n)) {
        *why = "x5c[0] is not valid base64 (standard alphabet, padded)";
        goto fail;
    }
    q = der;
    x = d2i_X509(NULL, &q, (long)len);
    if (x == NULL || q != der + len) {
        *why = "x5c[0] is not a DER X.509 certificate";
        goto fail;
    }
    if (X509_check_ca(x) <= 0) {
        *why = "an x509-svid authority must be a CA certificate";
        goto fail;
    }
    if (jwk_params(x, &jp) < 0) {
        *why = "the certificate's key is neither EC (P-256/384/521) nor RSA";
        goto fail;
    }
    if (kty == NULL || !str_is(kty, jp.kty)) {
        *why = "kty must name the certificate's key type (EC or RSA)";
        goto fail;
    }
    if (!member_matches(key, "crv", jp.crv) ||
        !member_matches(key, strcmp(jp.kty, "EC") == 0 ? "x" : "n", jp.a) ||
        !member_matches(key, strcmp(jp.kty, "EC") == 0 ? "y" : "e", jp.b)) {
        *why = "the key's parameters (crv, x, y or n, e) do not match the "
               "certificate's public key";
        goto fail;
    }
    free(der);
    return x;
fail:
    ERR_clear_error();
    X509_free(x);
    free(der);
    return NULL;
}

int bundle_parse(const char *p, size_t n, struct spiffe_bundle *b,
                 const char **why)
{
    struct arena a;
    const struct json *root, *keys;

    memset(b, 0, sizeof(*b));
    b->sequence = b->refresh_hint = -1;
    if (n > BUNDLE_MAX_BYTES) {
        *why = "trust bundle larger than 256 KiB";
        return -1;
    }
    arena_init(&a, 4096);
    root = json_parse_max(&a, p, n, 8, 4096, JSON_NO_DUPLICATES, why);
    if (root == NULL)
        goto fail;
    if (root->type != JSON_OBJECT) {
        *why = "a trust bundle is a JSON object (a JWK Set)";
        goto fail;
    }
    b->sequence = int_member(root, "spiffe_sequence");
    b->refresh_hint = int_member(root, "spiffe_refresh_hint");
    if (b->sequence == -2 || b->refresh_hint == -2) {
        *why = "spiffe_sequence and spiffe_refresh_hint must be integers >= 0";
        goto fail;
    }
    keys = json_get(root, "keys");
    if (keys == NULL || keys->type != JSON_ARRAY) {
        *why = "a trust bundle needs a keys array";
        goto fail;
    }
    if (keys->n > BUNDLE_MAX_KEYS) {
        *why = "trust bundle has more than 32 keys";
        goto fail;
    }
    b->roots = sk_X509_new_null();
    if (b->roots == NULL) {
        *why = "out of memory";
        goto fail;
    }
    for (const struct json *k = keys->child; k != NULL; k = k->next) {
        const struct json *use = json_get(k, "use");
        X509 *x;

        if (k->type != JSON_OBJECT || use == NULL ||
            json_string(use).p == NULL) {
            *why = "every key needs a use (x509-svid or jwt-svid)";
            goto fail;
        }
        if (str_is(use, "jwt-svid")) {
            b->jwt_keys++;
            continue;
        }
        if (!str_is(use, "x509-svid")) {
            *why = "a key's use must be x509-svid or jwt-svid";
            goto fail;
        }
        x = x509_key(k, why);
        if (x == NULL)
            goto fail;
        if (!sk_X509_push(b->roots, x)) {
            X509_free(x);
            *why = "out of memory";
            goto fail;
        }
    }
    if (sk_X509_num(b->roots) == 0) {
        *why = "trust bundle holds no x509-svid authority";
        goto fail;
    }
    arena_dispose(&a);
    return 0;
fail:
    arena_dispose(&a);
    bundle_dispose(b);
    return -1;
}

void bundle_dispose(struct spiffe_bundle *b)
{
    sk_X509_pop_free(b->roots, X509_free);
    b->roots = NULL;
}

int bundle_write(struct buf *b, const STACK_OF(X509) * roots, int64_t seq)
{
    int rc = 0;

    rc |= buf_puts(b, "{");
    if (seq >= 0)
        rc |= buf_printf(b, "\"spiffe_sequence\":%lld,", (long long)seq);
    rc |= buf_puts(b, "\"keys\":[");
    for (size_t i = 0; i < sk_X509_num(roots); i++) {
        X509 *x = sk_X509_value(roots, i);
        struct jwk_params jp;
        uint8_t *der = NULL;
        int len = i2d_X509(x, &der);
        size_t m;
        char *b64;

        if (len <= 0 || jwk_params(x, &jp) < 0 ||
            !EVP_EncodedLength(&m, (size_t)len) || (b64 = malloc(m)) == NULL) {
            OPENSSL_free(der);
            return -1;
        }
        EVP_EncodeBlock((uint8_t *)b64, der, (size_t)len);
        OPENSSL_free(der);
        rc |= buf_printf(b, "%s{\"use\":\"x509-svid\",\"kty\":\"%s\",",
                         i ? "," : "", jp.kty);
        if (jp.crv != NULL)
            rc |= buf_printf(b, "\"crv\":\"%s\",\"x\":\"%s\",\"y\":\"%s\",",
                             jp.crv, jp.a, jp.b);
        else
            rc |= buf_printf(b, "\"n\":\"%s\",\"e\":\"%s\",", jp.a, jp.b);
        rc |= buf_printf(b, "\"x5c\":[\"%s\"]}", b64);
        free(b64);
    }
    rc |= buf_puts(b, "]}");
    return rc != 0 ? -1 : 0;
}

int bundle_same_roots(const STACK_OF(X509) * a, const STACK_OF(X509) * b)
{
    if (sk_X509_num(a) != sk_X509_num(b))
        return 0;
    for (size_t i = 0; i < sk_X509_num(a); i++) {
        int found = 0;
        for (size_t j = 0; j < sk_X509_num(b) && !found; j++)
            found = X509_cmp(sk_X509_value(a, i), sk_X509_value(b, j)) == 0;
        if (!found)
            return 0;
    }
    return 1;
}
