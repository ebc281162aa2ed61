/*
 * Unit tests for src/policy/jwt.c: keys made here with BoringSSL, tokens
 * signed here with each algorithm, and Envoy's checks (exp and nbf with
 * the 60 s skew, issuer, audiences, kid, signature, malformed tokens);
 * JWKS documents that are refused; token locations, the token header
 * removed unless forwardOriginalToken, claims copied to headers; and
 * which RequestAuthentications apply to the node.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/bn.h>
#include <openssl/digest.h>
#include <openssl/ec.h>
#include <openssl/ec_key.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/nid.h>
#include <openssl/rsa.h>

#include "config/conf.h"
#include "config/resource.h"
#include "core/arena.h"
#include "core/buf.h"
#include "core/json.h"
#include "http/http.h"
#include "policy/jwt-int.h" /* jwt_b64url */
#include "compile/jwt.h"
#include "policy/jwt.h"

#define NOW INT64_C(1700000000)

/* Keys are made once: RSA generation is slow. */
static EVP_PKEY *rsa1, *rsa2, *ec256, *ec384;

static void b64u(const uint8_t *p, size_t n, char *out)
{
    static const char al[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;

    for (size_t i = 0; i < n; i++) {
        acc = (acc << 8) | p[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out[o++] = al[(acc >> bits) & 63];
        }
    }
    if (bits > 0)
        out[o++] = al[(acc << (6 - bits)) & 63];
    out[o] = '\0';
}

static void b64u_bn(const BIGNUM *bn, size_t len, char *out)
{
    uint8_t raw[1024];

    if (len == 0)
        len = BN_num_bytes(bn);
    assert_true(BN_bn2bin_padded(raw, len, bn));
    b64u(raw, len, out);
}

static EVP_PKEY *make_rsa(void)
{
    RSA *r = RSA_new();
    BIGNUM *e = BN_new();
    EVP_PKEY *k = EVP_PKEY_new();

    assert_true(BN_set_word(e, 65537));
    assert_true(RSA_generate_key_ex(r, 2048, e, NULL));
    assert_true(EVP_PKEY_assign_RSA(k, r));
    BN_free(e);
    return k;
}

static EVP_PKEY *make_ec(int nid)
{
    EC_KEY *ec = EC_KEY_new_by_curve_name(nid);
    EVP_PKEY *k = EVP_PKEY_new();

    assert_true(EC_KEY_generate_key(ec));
    assert_true(EVP_PKEY_assign_EC_KEY(k, ec));
    return k;
}

/* snprintf that fails the test on truncation. */
static void fmt(char *out, size_t n, const char *f, ...)
    __attribute__((format(printf, 3, 4)));
static void fmt(char *out, size_t n, const char *f, ...)
{
    va_list ap;
    int w;

    va_start(ap, f);
    w = vsnprintf(out, n, f, ap);
    va_end(ap);
    assert_true(w > 0 && (size_t)w < n);
}

/* One JWK for k (with kid, and alg when given). */
static void jwk(EVP_PKEY *k, const char *kid, const char *alg, char *out,
                size_t n)
{
    char a[1200], b[1200], algf[64] = "";

    if (alg != NULL)
        snprintf(algf, sizeof(algf), ",\"alg\":\"%s\"", alg);
    if (EVP_PKEY_id(k) == EVP_PKEY_RSA) {
        const RSA *r = EVP_PKEY_get0_RSA(k);
        b64u_bn(RSA_get0_n(r), 0, a);
        b64u_bn(RSA_get0_e(r), 0, b);
        fmt(out, n,
            "{\"kty\":\"RSA\",\"kid\":\"%s\",\"use\":\"sig\"%s,"
            "\"n\":\"%s\",\"e\":\"%s\"}",
            kid, algf, a, b);
    } else {
        const EC_KEY *ec = EVP_PKEY_get0_EC_KEY(k);
        const EC_GROUP *g = EC_KEY_get0_group(ec);
        int p384 = EC_GROUP_get_curve_name(g) == NID_secp384r1;
        size_t c = p384 ? 48 : 32;
        BIGNUM *x = BN_new(), *y = BN_new();
        assert_true(EC_POINT_get_affine_coordinates_GFp(
            g, EC_KEY_get0_public_key(ec), x, y, NULL));
        b64u_bn(x, c, a);
        b64u_bn(y, c, b);
        fmt(out, n,
            "{\"kty\":\"EC\",\"kid\":\"%s\",\"crv\":\"%s\"%s,"
            "\"x\":\"%s\",\"y\":\"%s\"}",
            kid, p384 ? "P-384" : "P-256", algf, a, b);
        BN_free(x);
        BN_free(y);
    }
}

/* The JWKS of the test: rsa1 "r1", rsa2 "r2", ec256 "e1", ec384 "e2". */
static char *jwks_doc(void)
{
    char *out = malloc(8192);
    char k1[1500], k2[1500], k3[600], k4[600];

    jwk(rsa1, "r1", NULL, k1, sizeof(k1));
    jwk(rsa2, "r2", NULL, k2, sizeof(k2));
    jwk(ec256, "e1", NULL, k3, sizeof(k3));
    jwk(ec384, "e2", NULL, k4, sizeof(k4));
    snprintf(out, 8192, "{\"keys\":[%s,%s,%s,%s]}", k1, k2, k3, k4);
    return out;
}

static const EVP_MD *md_of(const char *alg)
{
    if (strcmp(alg + 2, "384") == 0)
        return EVP_sha384();
    if (strcmp(alg + 2, "512") == 0)
        return EVP_sha512();
    return EVP_sha256();
}

/* mint() signs header.payload with k as alg; kid NULL: none. Returns a
 * static buffer. */
static const char *mint(EVP_PKEY *k, const char *alg, const char *kid,
                        const char *payload)
{
    static char tok[48 * 1024];
    static char p64[44 * 1024];
    char head[200], h64[400], s64[1024];
    uint8_t sig[512];
    size_t sn = sizeof(sig);
    const EVP_MD *md = md_of(alg);

    if (kid != NULL)
        snprintf(head, sizeof(head),
                 "{\"alg\":\"%s\",\"typ\":\"JWT\",\"kid\":\"%s\"}", alg, kid);
    else
        snprintf(head, sizeof(head), "{\"alg\":\"%s\",\"typ\":\"JWT\"}", alg);
    b64u((const uint8_t *)head, strlen(head), h64);
    b64u((const uint8_t *)payload, strlen(payload), p64);
    snprintf(tok, sizeof(tok), "%s.%s", h64, p64);
    if (alg[0] == 'E') {
        uint8_t dg[64];
        unsigned dn;
        size_t c = strcmp(alg, "ES384") == 0 ? 48 : 32;
        ECDSA_SIG *es;
        assert_true(EVP_Digest(tok, strlen(tok), dg, &dn, md, NULL));
        es = ECDSA_do_sign(dg, dn, EVP_PKEY_get0_EC_KEY(k));
        assert_non_null(es);
        assert_true(BN_bn2bin_padded(sig, c, ECDSA_SIG_get0_r(es)));
        assert_true(BN_bn2bin_padded(sig + c, c, ECDSA_SIG_get0_s(es)));
        sn = 2 * c;
        ECDSA_SIG_free(es);
    } else {
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        EVP_PKEY_CTX *pctx;
        assert_true(EVP_DigestSignInit(ctx, &pctx, md, NULL, k));
        if (alg[0] == 'P') {
            assert_true(
                EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING));
            assert_true(EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, -1));
        }
        assert_true(
            EVP_DigestSign(ctx, sig, &sn, (const uint8_t *)tok, strlen(tok)));
        EVP_MD_CTX_free(ctx);
    }
    b64u(sig, sn, s64);
    strcat(tok, ".");
    strcat(tok, s64);
    return tok;
}

struct fx {
    struct resource_set *set;
    struct jwt_authn *ja;
    struct arena arena;
    struct http_fields fields;
    struct jwt_result res;
    char *jwks;
};

static int group_setup(void **state)
{
    (void)state;
    rsa1 = make_rsa();
    rsa2 = make_rsa();
    ec256 = make_ec(NID_X9_62_prime256v1);
    ec384 = make_ec(NID_secp384r1);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    EVP_PKEY_free(rsa1);
    EVP_PKEY_free(rsa2);
    EVP_PKEY_free(ec256);
    EVP_PKEY_free(ec384);
    return 0;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    arena_init(&f->arena, 4096);
    f->jwks = jwks_doc();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    jwt_authn_unref(f->ja);
    resource_set_free(f->set);
    arena_dispose(&f->arena);
    free(f->jwks);
    free(f);
    return 0;
}

/* build() loads yaml (with JWKS replaced by the test's key set) and
 * compiles it for a node in istio-system labelled istio=ingressgateway. */
static void build(struct fx *f, const char *yaml)
{
    struct buf errs;
    char *err = NULL, *text, *o;
    const char *at, *from = yaml;
    size_t n = strlen(yaml) + 1;
    int nerr = 0;
    struct conf_strpair pair = {"istio", "ingressgateway"};
    struct conf_strmap labels = {&pair, 1};

    jwt_authn_unref(f->ja);
    resource_set_free(f->set);
    for (at = yaml; (at = strstr(at, "JWKS")) != NULL; at += 4)
        n += strlen(f->jwks);
    text = o = malloc(n);
    assert_non_null(text);
    /* Every JWKS placeholder becomes the test's key set. */
    while ((at = strstr(from, "JWKS")) != NULL) {
        memcpy(o, from, (size_t)(at - from));
        o += at - from;
        memcpy(o, f->jwks, strlen(f->jwks));
        o += strlen(f->jwks);
        from = at + 4;
    }
    strcpy(o, from);
    buf_init(&errs, 1 << 16);
    f->set = resource_load_mem(text, strlen(text), "ra.yaml", &errs, &nerr);
    if (nerr)
        fprintf(stderr, "%s", buf_cstr(&errs));
    buf_dispose(&errs);
    free(text);
    assert_int_equal(nerr, 0);
    f->ja =
        jwt_authn_build(f->set, "istio-system", &labels, "istio-system", &err);
    if (err)
        fprintf(stderr, "%s\n", err);
    assert_null(err);
}

#define RA(name, ns, body)                                                     \
    "apiVersion: security.istio.io/v1\n"                                       \
    "kind: RequestAuthentication\n"                                            \
    "metadata: {name: " name ", namespace: " ns "}\n"                          \
    "spec:\n" body "---\n"

#define BASIC                                                                  \
    RA("jwt", "istio-system",                                                  \
       "  jwtRules:\n"                                                         \
       "  - issuer: https://issuer.example\n"                                  \
       "    audiences: [api, web]\n"                                           \
       "    jwks: 'JWKS'\n")

static enum jwt_status verify(struct fx *f, const char *tok)
{
    return jwt_authn_verify(f->ja, slice_of(tok), &f->arena, NOW, &f->res);
}

static char payload[1024];

static const char *claims(const char *iss, const char *aud, int64_t exp,
                          const char *extra)
{
    snprintf(payload, sizeof(payload),
             "{\"iss\":\"%s\",\"sub\":\"alice\",\"aud\":%s,\"exp\":%lld%s}",
             iss, aud, (long long)exp, extra ? extra : "");
    return payload;
}

static void test_each_alg_verifies(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *alg, *kid;
        EVP_PKEY **k;
    } cases[] = {
        {"RS256", "r1", &rsa1},  {"RS384", "r1", &rsa1},
        {"RS512", "r2", &rsa2},  {"PS256", "r1", &rsa1},
        {"PS384", "r2", &rsa2},  {"PS512", "r1", &rsa1},
        {"ES256", "e1", &ec256}, {"ES384", "e2", &ec384},
    };

    build(f, BASIC);
    assert_int_equal(jwt_authn_count(f->ja), 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        const char *t = mint(*cases[i].k, cases[i].alg, cases[i].kid,
                             claims("https://issuer.example", "\"api\"",
                                    NOW + 600, ",\"azp\":\"cli\""));
        assert_int_equal(verify(f, t), JWT_OK);
        assert_true(
            slice_eq_str(f->res.principal, "https://issuer.example/alice"));
        assert_true(slice_eq_str(f->res.presenter, "cli"));
    }
}

static void test_wrong_key_or_curve_fails(void **state)
{
    struct fx *f = *state;
    const char *c =
        claims("https://issuer.example", "\"api\"", NOW + 600, NULL);

    build(f, BASIC);
    /* Signed by rsa2 but naming r1: the signature does not verify. */
    assert_int_equal(verify(f, mint(rsa2, "RS256", "r1", c)),
                     JWT_BAD_SIGNATURE);
    /* ES384 named with the P-256 key. */
    assert_int_equal(verify(f, mint(ec384, "ES384", "e1", c)),
                     JWT_BAD_SIGNATURE);
    /* An RSA alg with an EC kid: no key of that type. */
    assert_int_equal(verify(f, mint(rsa1, "RS256", "e1", c)), JWT_NO_KEY);
}

static void test_unknown_kid_and_no_kid(void **state)
{
    struct fx *f = *state;
    const char *c =
        claims("https://issuer.example", "\"api\"", NOW + 600, NULL);

    build(f, BASIC);
    assert_int_equal(verify(f, mint(rsa1, "RS256", "nope", c)), JWT_NO_KEY);
    /* Without a kid every RSA key is tried: rsa2 is the second. */
    assert_int_equal(verify(f, mint(rsa2, "RS256", NULL, c)), JWT_OK);
    assert_int_equal(verify(f, mint(ec384, "ES384", NULL, c)), JWT_OK);
}

static void test_bad_signature(void **state)
{
    struct fx *f = *state;
    char t[4096];
    size_t n;

    build(f, BASIC);
    strcpy(t,
           mint(rsa1, "RS256", "r1",
                claims("https://issuer.example", "\"api\"", NOW + 600, NULL)));
    n = strlen(t);
    /* A changed signature byte (the last char keeps full bits). */
    t[n - 2] = t[n - 2] == 'A' ? 'B' : 'A';
    assert_int_equal(verify(f, t), JWT_BAD_SIGNATURE);
    /* A changed payload under the old signature. */
    strcpy(t,
           mint(rsa1, "RS256", "r1",
                claims("https://issuer.example", "\"api\"", NOW + 600, NULL)));
    {
        char *dot = strchr(t, '.');
        dot[1] = dot[1] == 'e' ? 'f' : 'e';
    }
    assert_int_not_equal(verify(f, t), JWT_OK);
}

static void test_expiry_and_not_before_with_skew(void **state)
{
    struct fx *f = *state;
    char extra[64];

    build(f, BASIC);
    /* 60 s of skew: 30 s past exp still passes, 61 s does not. */
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1",
                                    claims("https://issuer.example", "\"api\"",
                                           NOW - 30, NULL))),
                     JWT_OK);
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1",
                                    claims("https://issuer.example", "\"api\"",
                                           NOW - 61, NULL))),
                     JWT_EXPIRED);
    snprintf(extra, sizeof(extra), ",\"nbf\":%lld", (long long)(NOW + 30));
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1",
                                    claims("https://issuer.example", "\"api\"",
                                           NOW + 600, extra))),
                     JWT_OK);
    snprintf(extra, sizeof(extra), ",\"nbf\":%lld", (long long)(NOW + 61));
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1",
                                    claims("https://issuer.example", "\"api\"",
                                           NOW + 600, extra))),
                     JWT_NOT_YET_VALID);
    /* exp that is not a number is a bad payload. */
    assert_int_equal(
        verify(f, mint(rsa1, "RS256", "r1",
                       "{\"iss\":\"https://issuer.example\",\"aud\":\"api\","
                       "\"exp\":\"soon\"}")),
        JWT_BAD_PAYLOAD);
}

/* A JOSE header or claims set with a name twice is refused (RFC 7515
 * section 4): "iss" twice could name one issuer to one reader and
 * another to the next. */
static void test_duplicate_names(void **state)
{
    struct fx *f = *state;

    build(f, BASIC);
    assert_int_equal(
        verify(f, mint(rsa1, "RS256", "r1",
                       "{\"iss\":\"https://issuer.example\",\"aud\":\"api\","
                       "\"iss\":\"https://evil\"}")),
        JWT_BAD_PAYLOAD);
    assert_int_equal(
        verify(f, mint(rsa1, "RS256", "r1",
                       "{\"iss\":\"https://issuer.example\",\"aud\":\"api\","
                       "\"sub\":\"a\",\"sub\":\"b\"}")),
        JWT_BAD_PAYLOAD);
    /* The header: refused before any signature is looked at. */
    {
        const char *h = "{\"alg\":\"RS256\",\"kid\":\"r1\",\"kid\":\"r2\"}";
        const char *p = "{\"iss\":\"https://issuer.example\"}";
        char h64[200], p64[200], tok[500];
        b64u((const uint8_t *)h, strlen(h), h64);
        b64u((const uint8_t *)p, strlen(p), p64);
        snprintf(tok, sizeof(tok), "%s.%s.AAAA", h64, p64);
        assert_int_equal(verify(f, tok), JWT_BAD_HEADER);
    }
}

/* exp and nbf are whole non-negative numbers up to 2^53; a long number
 * is read as what it is (it once became 0: never expired). */
static void test_time_claims_strict(void **state)
{
    struct fx *f = *state;
    static const char *bad[] = {
        "\"exp\":1.5e-3",       "\"exp\":-1",
        "\"exp\":1700000000.5", "\"exp\":9007199254740994",
        "\"exp\":1e999",        "\"nbf\":-0.5",
        "\"exp\":true",
    };
    char p[512];

    build(f, BASIC);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(p, sizeof(p),
                 "{\"iss\":\"https://issuer.example\",\"aud\":\"api\",%s}",
                 bad[i]);
        assert_int_equal(verify(f, mint(rsa1, "RS256", "r1", p)),
                         JWT_BAD_PAYLOAD);
    }
    /* 64 digits and more: a time long past, not 0. */
    snprintf(p, sizeof(p),
             "{\"iss\":\"https://issuer.example\",\"aud\":\"api\","
             "\"exp\":"
             "1000000000000000000000000000000000000000000000000000000000000000"
             "e-63}");
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1", p)), JWT_EXPIRED);
    snprintf(p, sizeof(p),
             "{\"iss\":\"https://issuer.example\",\"aud\":\"api\","
             "\"exp\":%lld.0000000000000000000000000000000000000000000000000000"
             "0000000000}",
             (long long)NOW + 600);
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1", p)), JWT_OK);
    /* A whole number written 1.7e9 is whole. */
    snprintf(p, sizeof(p),
             "{\"iss\":\"https://issuer.example\",\"aud\":\"api\","
             "\"nbf\":1.7e9}");
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1", p)), JWT_OK);
}

/* base64url is strict: no padding, no stray bits after the last byte. */
static void test_b64url_strict(void **state)
{
    struct fx *f = *state;
    struct slice d;
    char tok[4200];
    const char *t;

    d = jwt_b64url(&f->arena, SLICE_LIT("YQ"));
    assert_true(slice_eq_str(d, "a"));
    assert_null(jwt_b64url(&f->arena, SLICE_LIT("YQ==")).p);
    assert_null(jwt_b64url(&f->arena, SLICE_LIT("YR")).p); /* bits left */
    assert_true(slice_eq_str(jwt_b64url(&f->arena, SLICE_LIT("YWI")), "ab"));
    assert_null(jwt_b64url(&f->arena, SLICE_LIT("YWJ")).p);
    assert_null(jwt_b64url(&f->arena, SLICE_LIT("Y")).p);
    assert_null(jwt_b64url(&f->arena, SLICE_LIT("Y+Q")).p);
    /* A token with padding on its signature is malformed. */
    build(f, BASIC);
    t = mint(rsa1, "RS256", "r1",
             claims("https://issuer.example", "\"api\"", NOW + 600, NULL));
    assert_int_equal(verify(f, t), JWT_OK);
    snprintf(tok, sizeof(tok), "%s=", t);
    assert_int_equal(verify(f, tok), JWT_BAD_FORMAT);
}

static void test_issuer_and_audiences(void **state)
{
    struct fx *f = *state;

    build(f, BASIC);
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1",
                                    claims("https://other.example", "\"api\"",
                                           NOW + 600, NULL))),
                     JWT_UNKNOWN_ISSUER);
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1",
                                    claims("https://issuer.example",
                                           "\"mobile\"", NOW + 600, NULL))),
                     JWT_AUDIENCE);
    assert_int_equal(
        verify(f, mint(rsa1, "RS256", "r1",
                       claims("https://issuer.example", "[\"mobile\",\"web\"]",
                              NOW + 600, NULL))),
        JWT_OK);
    assert_int_equal(
        verify(f, mint(rsa1, "RS256", "r1",
                       "{\"iss\":\"https://issuer.example\",\"sub\":\"a\"}")),
        JWT_AUDIENCE);
    /* Envoy's comparison: no http(s) scheme, no trailing slash, on
     * either side. */
    assert_int_equal(
        verify(f, mint(rsa1, "RS256", "r1",
                       claims("https://issuer.example", "\"https://api/\"",
                              NOW + 600, NULL))),
        JWT_OK);
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1",
                                    claims("https://issuer.example",
                                           "\"ftp://api\"", NOW + 600, NULL))),
                     JWT_AUDIENCE);
    /* Without audiences in the rule, aud is not checked. */
    build(f, RA("jwt", "istio-system",
                "  jwtRules:\n"
                "  - issuer: https://issuer.example\n"
                "    jwks: 'JWKS'\n"));
    assert_int_equal(
        verify(f, mint(rsa1, "RS256", "r1",
                       "{\"iss\":\"https://issuer.example\",\"sub\":\"a\"}")),
        JWT_OK);
}

static void test_malformed_tokens(void **state)
{
    struct fx *f = *state;
    char t[4096];
    char h64[200];
    const char *good =
        mint(rsa1, "RS256", "r1",
             claims("https://issuer.example", "\"api\"", NOW + 600, NULL));
    const char *dot = strchr(good, '.');

    build(f, BASIC);
    assert_int_equal(verify(f, ""), JWT_BAD_FORMAT);
    assert_int_equal(verify(f, "abc"), JWT_BAD_FORMAT);
    assert_int_equal(verify(f, "a.b"), JWT_BAD_FORMAT);
    assert_int_equal(verify(f, "a.b.c.d"), JWT_BAD_FORMAT);
    assert_int_equal(verify(f, "a+b.c.d"), JWT_BAD_FORMAT);
    /* A header that is not JSON. */
    b64u((const uint8_t *)"{alg:1}", 7, h64);
    snprintf(t, sizeof(t), "%s%s", h64, dot);
    assert_int_equal(verify(f, t), JWT_BAD_HEADER);
    /* alg none and HS256 are not accepted. */
    b64u((const uint8_t *)"{\"alg\":\"none\"}", 14, h64);
    snprintf(t, sizeof(t), "%s%s", h64, dot);
    assert_int_equal(verify(f, t), JWT_ALG_UNSUPPORTED);
    b64u((const uint8_t *)"{\"alg\":\"HS256\"}", 15, h64);
    snprintf(t, sizeof(t), "%s%s", h64, dot);
    assert_int_equal(verify(f, t), JWT_ALG_UNSUPPORTED);
    /* A payload that is an array, not an object. */
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1", "[1,2]")),
                     JWT_BAD_PAYLOAD);
    /* JWT_MAX_TOKEN: a good token just under it verifies, one just over
     * it is not read at all. */
    {
        static char pl[26 * 1024];
        const char *c = "{\"iss\":\"https://issuer.example\",\"aud\":\"api\"}";
        memset(pl, ' ', sizeof(pl));
        memcpy(pl, c, strlen(c));
        pl[20000] = '\0';
        assert_true(strlen(mint(rsa1, "RS256", "r1", pl)) < JWT_MAX_TOKEN);
        assert_int_equal(verify(f, mint(rsa1, "RS256", "r1", pl)), JWT_OK);
        pl[20000] = ' ';
        pl[24600] = '\0';
        assert_true(strlen(mint(rsa1, "RS256", "r1", pl)) > JWT_MAX_TOKEN);
        assert_int_equal(verify(f, mint(rsa1, "RS256", "r1", pl)),
                         JWT_BAD_FORMAT);
    }
}

static void test_jwks_refused(void **state)
{
    const char *why = NULL;
    char k[1500], doc[2000];
    (void)state;

    assert_null(jwt_keys_parse("not json", 8, &why));
    assert_non_null(why);
    assert_null(jwt_keys_parse("{\"keys\":[]}", 11, &why));
    assert_string_equal(why, "no RSA or EC signing key in the JWKS");
    assert_null(jwt_keys_parse("{\"keys\":{}}", 11, &why));
    /* Only symmetric keys: nothing usable. */
    {
        const char *oct = "{\"keys\":[{\"kty\":\"oct\",\"k\":\"AA\"}]}";
        assert_null(jwt_keys_parse(oct, strlen(oct), &why));
        assert_string_equal(why, "no RSA or EC signing key in the JWKS");
    }
    /* An EC point that is not on the curve. */
    {
        const char *bad_ec =
            "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"AQ\",\"y\":\"Ag\"}";
        assert_null(jwt_keys_parse(bad_ec, strlen(bad_ec), &why));
    }
    assert_string_equal(
        why, "EC key: bad or missing x or y, or not a point of the curve");
    /* A single JWK is read as a set of one; an encryption key beside a
     * signing key is skipped. */
    jwk(rsa1, "r1", "RS256", k, sizeof(k));
    {
        struct jwt_keys *ks = jwt_keys_parse(k, strlen(k), &why);
        assert_non_null(ks);
        assert_int_equal(jwt_keys_count(ks), 1);
        jwt_keys_free(ks);
    }
    snprintf(doc, sizeof(doc),
             "{\"keys\":[%s,{\"kty\":\"RSA\",\"use\":\"enc\",\"n\":\"AQ\","
             "\"e\":\"AQAB\"}]}",
             k);
    {
        struct jwt_keys *ks = jwt_keys_parse(doc, strlen(doc), &why);
        assert_non_null(ks);
        assert_int_equal(jwt_keys_count(ks), 1);
        jwt_keys_free(ks);
    }
}

/* One unusable key does not make the whole set unusable: the good keys
 * stay and tokens signed with them verify. */
static void test_jwks_skips_unusable_keys(void **state)
{
    struct fx *f = *state;
    const char *why = NULL;
    char k[1500], doc[4000];
    struct jwt_keys *ks;

    jwk(rsa1, "r1", "RS256", k, sizeof(k));
    snprintf(doc, sizeof(doc),
             "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-521\",\"x\":\"AQ\","
             "\"y\":\"Ag\"},"
             "{\"kty\":\"RSA\",\"kid\":\"short\",\"n\":\"AQAB\","
             "\"e\":\"AQAB\"},"
             "{\"kty\":\"RSA\",\"kid\":\"broken\",\"n\":\"!!\"},"
             "{\"kid\":\"nokty\"}, 7, %s]}",
             k);
    ks = jwt_keys_parse(doc, strlen(doc), &why);
    assert_non_null(ks);
    assert_int_equal(jwt_keys_count(ks), 1);
    assert_int_equal(jwt_keys_skipped(ks, &why), 5);
    assert_string_equal(why, "EC key: crv is not P-256 or P-384");
    jwt_keys_free(ks);
    free(f->jwks);
    f->jwks = strdup(doc);
    build(f, BASIC);
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1",
                                    claims("https://issuer.example", "\"api\"",
                                           NOW + 600, NULL))),
                     JWT_OK);
    /* Nothing usable: refused, naming the first problem. */
    snprintf(doc, sizeof(doc),
             "{\"keys\":[{\"kty\":\"RSA\",\"n\":\"AQAB\",\"e\":\"AQAB\"}]}");
    assert_null(jwt_keys_parse(doc, strlen(doc), &why));
    assert_string_equal(why, "RSA key: shorter than 1024 bits");
}

/* A JWK with alg set only verifies tokens of that alg. */
static void test_key_alg_must_match(void **state)
{
    struct fx *f = *state;
    char k[1500];
    const char *c =
        claims("https://issuer.example", "\"api\"", NOW + 600, NULL);

    jwk(rsa1, "r1", "RS256", k, sizeof(k));
    free(f->jwks);
    f->jwks = malloc(strlen(k) + 16);
    sprintf(f->jwks, "{\"keys\":[%s]}", k);
    build(f, BASIC);
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1", c)), JWT_OK);
    assert_int_equal(verify(f, mint(rsa1, "RS512", "r1", c)), JWT_NO_KEY);
}

static void add(struct fx *f, const char *name, const char *value)
{
    assert_int_equal(http_fields_add(&f->fields, &f->arena, slice_of(name),
                                     slice_of(value), 100),
                     0);
}

/* The path after jwt_authn_request(). */
static struct slice req_path;

static enum jwt_status req(struct fx *f, const char *path)
{
    const char *provider;

    req_path = slice_of(path);
    return jwt_authn_request(f->ja, &f->fields, &req_path, &f->arena, NOW,
                             &f->res, &provider);
}

static void test_default_locations(void **state)
{
    struct fx *f = *state;
    char path[4200], bearer[4200];
    const char *t =
        mint(rsa1, "RS256", "r1",
             claims("https://issuer.example", "\"api\"", NOW + 600, NULL));

    build(f, BASIC);
    assert_int_equal(req(f, "/"), JWT_MISSING);
    snprintf(path, sizeof(path), "/x?a=1&access_token=%s&b=2", t);
    assert_int_equal(req(f, path), JWT_OK);
    snprintf(bearer, sizeof(bearer), "bearer %s", t);
    add(f, "Authorization", bearer);
    assert_int_equal(req(f, "/"), JWT_OK);
    /* Not forwarded by default: the header is gone. */
    assert_null(http_fields_get(&f->fields, "authorization"));
    /* Another scheme is no token; a broken bearer token is refused. */
    add(f, "authorization", "Basic YTpi");
    assert_int_equal(req(f, "/"), JWT_MISSING);
    f->fields.n = 0;
    add(f, "authorization", "Bearer abc");
    assert_int_equal(req(f, "/"), JWT_BAD_FORMAT);
}

static void test_custom_locations_and_outputs(void **state)
{
    struct fx *f = *state;
    char cookie[4200];
    const char *t;

    build(f, RA("jwt", "istio-system",
                "  jwtRules:\n"
                "  - issuer: https://issuer.example\n"
                "    jwks: 'JWKS'\n"
                "    fromHeaders: [{name: X-Jwt, prefix: 'Tok '}]\n"
                "    fromCookies: [session]\n"
                "    forwardOriginalToken: true\n"
                "    outputPayloadToHeader: x-jwt-payload\n"
                "    outputClaimToHeaders:\n"
                "    - {header: x-sub, claim: sub}\n"
                "    - {header: x-team, claim: org.team}\n"
                "    - {header: x-admin, claim: admin}\n"
                "    - {header: x-evil, claim: evil}\n"
                "    - {header: x-list, claim: groups}\n"));
    t = mint(ec256, "ES256", "e1",
             "{\"iss\":\"https://issuer.example\",\"sub\":\"bob\","
             "\"org\":{\"team\":\"core\"},\"admin\":true,"
             "\"evil\":\"a\\r\\nx-injected: 1\",\"groups\":[\"a\"]}");
    /* The default locations are not used once locations are given. */
    add(f, "authorization", "Bearer whatever");
    assert_int_equal(req(f, "/"), JWT_MISSING);
    snprintf(cookie, sizeof(cookie), "a=b; session=%s; c=d", t);
    add(f, "cookie", cookie);
    assert_int_equal(req(f, "/"), JWT_OK);
    assert_true(
        slice_eq_str(http_fields_get(&f->fields, "x-sub")->value, "bob"));
    assert_true(
        slice_eq_str(http_fields_get(&f->fields, "x-team")->value, "core"));
    assert_true(
        slice_eq_str(http_fields_get(&f->fields, "x-admin")->value, "true"));
    /* A value that would split the header, and an array, are left out. */
    assert_null(http_fields_get(&f->fields, "x-evil"));
    assert_null(http_fields_get(&f->fields, "x-list"));
    /* The payload header is the token's payload segment. */
    {
        const char *d1 = strchr(t, '.'), *d2 = strchr(d1 + 1, '.');
        struct slice v = http_fields_get(&f->fields, "x-jwt-payload")->value;
        assert_int_equal(v.n, (size_t)(d2 - d1 - 1));
        assert_memory_equal(v.p, d1 + 1, v.n);
    }
    /* The header location with its prefix; kept (forwardOriginalToken). */
    f->fields.n = 0;
    snprintf(cookie, sizeof(cookie), "Tok %s", t);
    add(f, "x-jwt", cookie);
    assert_int_equal(req(f, "/"), JWT_OK);
    assert_non_null(http_fields_get(&f->fields, "x-jwt"));
}

/* Two issuers reading the same header: each token goes to its own. */
static void test_two_providers(void **state)
{
    struct fx *f = *state;
    char bearer[4200];

    build(f, RA("a", "istio-system",
                "  jwtRules:\n"
                "  - issuer: one\n"
                "    jwks: 'JWKS'\n"
                "  - issuer: two\n"
                "    jwks: 'JWKS'\n"
                "    audiences: [x]\n"));
    assert_int_equal(jwt_authn_count(f->ja), 2);
    snprintf(bearer, sizeof(bearer), "Bearer %s",
             mint(rsa1, "RS256", "r1", "{\"iss\":\"two\",\"aud\":\"x\"}"));
    add(f, "authorization", bearer);
    assert_int_equal(req(f, "/"), JWT_OK);
    assert_true(slice_eq_str(f->res.principal, "two/"));
    f->fields.n = 0;
    snprintf(bearer, sizeof(bearer), "Bearer %s",
             mint(rsa1, "RS256", "r1", "{\"iss\":\"three\"}"));
    add(f, "authorization", bearer);
    assert_int_equal(req(f, "/"), JWT_UNKNOWN_ISSUER);
}

/* Every token of a request must verify, wherever it is and whatever
 * its issuer; tokens not forwarded leave the request. */
static void test_every_token_is_checked(void **state)
{
    struct fx *f = *state;
    char path[9000], bearer[4200], forged[4200], h64[64], p64[200];
    const char *fp = "{\"iss\":\"https://issuer.example\",\"sub\":\"root\"}";
    char *good = strdup(
        mint(rsa1, "RS256", "r1",
             claims("https://issuer.example", "\"api\"", NOW + 600, NULL)));

    assert_non_null(good);
    build(f, BASIC);
    /* A valid Bearer token and an unsigned one in the parameter. */
    b64u((const uint8_t *)"{\"alg\":\"none\"}", 14, h64);
    b64u((const uint8_t *)fp, strlen(fp), p64);
    snprintf(forged, sizeof(forged), "%s.%s.", h64, p64);
    snprintf(bearer, sizeof(bearer), "Bearer %s", good);
    add(f, "authorization", bearer);
    snprintf(path, sizeof(path), "/x?access_token=%s", forged);
    assert_int_not_equal(req(f, path), JWT_OK);
    /* A forged Bearer token of an unknown issuer and a valid parameter. */
    f->fields.n = 0;
    snprintf(bearer, sizeof(bearer), "Bearer %s",
             mint(rsa2, "RS256", NULL, "{\"iss\":\"https://evil\"}"));
    add(f, "authorization", bearer);
    snprintf(path, sizeof(path), "/x?access_token=%s", good);
    assert_int_equal(req(f, path), JWT_UNKNOWN_ISSUER);
    /* The same valid token twice is one token; both places are cleaned
     * (forwardOriginalToken is false), the other parameters stay. */
    f->fields.n = 0;
    snprintf(bearer, sizeof(bearer), "Bearer %s", good);
    add(f, "authorization", bearer);
    snprintf(path, sizeof(path), "/x?a=1&access_token=%s&b=2#f", good);
    assert_int_equal(req(f, path), JWT_OK);
    assert_null(http_fields_get(&f->fields, "authorization"));
    assert_true(slice_eq_str(req_path, "/x?a=1&b=2#f"));
    snprintf(path, sizeof(path), "/x?access_token=%s", good);
    assert_int_equal(req(f, path), JWT_OK);
    assert_true(slice_eq_str(req_path, "/x"));
    /* Two authorization headers: the second is checked too. */
    f->fields.n = 0;
    add(f, "authorization", bearer);
    snprintf(
        forged, sizeof(forged), "Bearer %s",
        mint(rsa2, "RS256", "r1",
             claims("https://issuer.example", "\"api\"", NOW + 600, NULL)));
    add(f, "authorization", forged);
    assert_int_equal(req(f, "/"), JWT_BAD_SIGNATURE);
    free(good);
}

/* A token is parsed once per request however many providers look at its
 * location, and its values are bounded: the arena grows by a small
 * multiple of the token's length. */
static void test_one_parse_per_token(void **state)
{
    struct fx *f = *state;
    static char yaml[64 * 1024], big[40 * 1024];
    char bearer[44 * 1024];
    const char *t;
    size_t o = 0, g1, g20, before;

    /* One issuer among twenty reads the token. */
    for (int i = 0; i < 20; i++)
        o += (size_t)snprintf(yaml + o, sizeof(yaml) - o,
                              RA("r%d", "istio-system",
                                 "  jwtRules: [{issuer: i%d, jwks: 'JWKS'}]\n"),
                              i, i);
    o = (size_t)snprintf(big, sizeof(big), "{\"iss\":\"i19\",\"x\":[0");
    for (int i = 0; i < 3000; i++)
        o += (size_t)snprintf(big + o, sizeof(big) - o, ",0");
    snprintf(big + o, sizeof(big) - o, "]}");
    t = mint(rsa1, "RS256", "r1", big);
    snprintf(bearer, sizeof(bearer), "Bearer %s", t);

    build(f, RA("r19", "istio-system",
                "  jwtRules: [{issuer: i19, jwks: 'JWKS'}]\n"));
    add(f, "authorization", bearer);
    before = f->arena.total;
    assert_int_equal(req(f, "/"), JWT_OK);
    g1 = f->arena.total - before;

    build(f, yaml);
    assert_int_equal(jwt_authn_count(f->ja), 20);
    f->fields.n = 0;
    add(f, "authorization", bearer);
    before = f->arena.total;
    assert_int_equal(req(f, "/"), JWT_OK);
    g20 = f->arena.total - before;
    assert_true(g20 <= g1 + 1024);
    assert_true(g20 <= 40 * strlen(t));

    /* More values than JWT_MAX_NODES: refused before the signature. */
    o = (size_t)snprintf(big, sizeof(big), "{\"iss\":\"i19\",\"x\":[0");
    for (int i = 0; i < JWT_MAX_NODES; i++)
        o += (size_t)snprintf(big + o, sizeof(big) - o, ",0");
    snprintf(big + o, sizeof(big) - o, "]}");
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1", big)),
                     JWT_BAD_PAYLOAD);
}

/* The headers a token would write are never the client's: gone without
 * a token, with a token lacking the claim, and with a failing token. */
static void test_client_output_headers_removed(void **state)
{
    struct fx *f = *state;
    char bearer[4200];

    build(f, RA("jwt", "istio-system",
                "  jwtRules:\n"
                "  - issuer: https://issuer.example\n"
                "    jwks: 'JWKS'\n"
                "    outputPayloadToHeader: x-jwt-payload\n"
                "    outputClaimToHeaders: [{header: x-team, claim: team}]\n"));
    add(f, "x-team", "admins");
    add(f, "X-Jwt-Payload", "eyJhZG1pbiI6dHJ1ZX0");
    assert_int_equal(req(f, "/"), JWT_MISSING);
    assert_null(http_fields_get(&f->fields, "x-team"));
    assert_null(http_fields_get(&f->fields, "x-jwt-payload"));
    add(f, "x-team", "admins");
    snprintf(bearer, sizeof(bearer), "Bearer %s",
             mint(rsa1, "RS256", "r1",
                  "{\"iss\":\"https://issuer.example\",\"sub\":\"a\"}"));
    add(f, "authorization", bearer);
    assert_int_equal(req(f, "/"), JWT_OK);
    assert_null(http_fields_get(&f->fields, "x-team"));
    assert_non_null(http_fields_get(&f->fields, "x-jwt-payload"));
    f->fields.n = 0;
    add(f, "x-team", "admins");
    add(f, "authorization", "Bearer a.b.c");
    assert_int_not_equal(req(f, "/"), JWT_OK);
    assert_null(http_fields_get(&f->fields, "x-team"));
}

/* One issuer in two RequestAuthentications: each one's locations, keys
 * and audiences count (Istio merges them); one accepting is enough. */
static void test_same_issuer_twice(void **state)
{
    struct fx *f = *state;
    char k1[1500], k2[1500], yaml[8192], bearer[4200];

    jwk(rsa1, "r1", "RS256", k1, sizeof(k1));
    jwk(rsa2, "r2", "RS256", k2, sizeof(k2));
    snprintf(yaml, sizeof(yaml),
             RA("a", "istio-system",
                "  jwtRules:\n"
                "  - issuer: same\n"
                "    audiences: [one]\n"
                "    jwks: '{\"keys\":[%s]}'\n")
                 RA("b", "istio-system",
                    "  jwtRules:\n"
                    "  - issuer: same\n"
                    "    audiences: [two]\n"
                    "    fromHeaders: [{name: x-tok}]\n"
                    "    jwks: '{\"keys\":[%s]}'\n"),
             k1, k2);
    build(f, yaml);
    assert_int_equal(jwt_authn_count(f->ja), 2);
    /* The second's key and audience. */
    assert_int_equal(
        verify(f, mint(rsa2, "RS256", "r2",
                       claims("same", "\"two\"", NOW + 600, NULL))),
        JWT_OK);
    assert_int_equal(
        verify(f, mint(rsa1, "RS256", "r1",
                       claims("same", "\"one\"", NOW + 600, NULL))),
        JWT_OK);
    assert_int_not_equal(
        verify(f, mint(rsa1, "RS256", "r1",
                       claims("same", "\"two\"", NOW + 600, NULL))),
        JWT_OK);
    /* The second's location. */
    add(f, "x-tok",
        mint(rsa2, "RS256", "r2", claims("same", "\"two\"", NOW + 600, NULL)));
    assert_int_equal(req(f, "/"), JWT_OK);
    /* A token where only the first looks is the first's to accept. */
    f->fields.n = 0;
    snprintf(
        bearer, sizeof(bearer), "Bearer %s",
        mint(rsa2, "RS256", "r2", claims("same", "\"two\"", NOW + 600, NULL)));
    add(f, "authorization", bearer);
    assert_int_not_equal(req(f, "/"), JWT_OK);
}

/* Scoping as AuthorizationPolicy: root namespace, node namespace, or a
 * selector that matches the node's labels. */
static void test_scoping(void **state)
{
    struct fx *f = *state;

    build(f, RA("other-ns", "shop", "  jwtRules: [{issuer: a, jwks: 'JWKS'}]\n")
                 RA("other-labels", "istio-system",
                    "  selector: {matchLabels: {app: web}}\n"
                    "  jwtRules: [{issuer: b, jwks: 'JWKS'}]\n")
                     RA("mine", "istio-system",
                        "  selector: {matchLabels: {istio: "
                        "ingressgateway}}\n"
                        "  jwtRules: [{issuer: c, jwks: 'JWKS'}]\n"));
    assert_int_equal(jwt_authn_count(f->ja), 1);
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1", "{\"iss\":\"a\"}")),
                     JWT_UNKNOWN_ISSUER);
    assert_int_equal(verify(f, mint(rsa1, "RS256", "r1", "{\"iss\":\"c\"}")),
                     JWT_OK);
    build(f,
          RA("other-ns", "shop", "  jwtRules: [{issuer: a, jwks: 'JWKS'}]\n"));
    assert_null(f->ja);
}

/* jwksUri file:// is read when the configuration is built; a missing
 * file is an error naming the resource. */
static void test_jwks_file(void **state)
{
    struct fx *f = *state;
    char path[] = "/tmp/test_jwt_jwksXXXXXX";
    int fd = mkstemp(path);
    char yaml[512];
    struct buf errs;
    char *err = NULL;
    int nerr = 0;

    assert_true(fd >= 0);
    assert_int_equal(write(fd, f->jwks, strlen(f->jwks)),
                     (ssize_t)strlen(f->jwks));
    close(fd);
    snprintf(yaml, sizeof(yaml),
             RA("file", "istio-system",
                "  jwtRules: [{issuer: a, jwksUri: 'file://%s'}]\n"),
             path);
    build(f, yaml);
    assert_int_equal(verify(f, mint(ec256, "ES256", "e1", "{\"iss\":\"a\"}")),
                     JWT_OK);
    unlink(path);
    jwt_authn_unref(f->ja);
    f->ja = jwt_authn_build(f->set, "istio-system", NULL, "istio-system", &err);
    assert_null(f->ja);
    assert_non_null(err);
    assert_non_null(strstr(err, "RequestAuthentication istio-system/file"));
    assert_non_null(strstr(err, "No such file"));
    free(err);
    /* Only regular files: a FIFO or a device is refused, never read. */
    snprintf(yaml, sizeof(yaml),
             RA("dev", "istio-system",
                "  jwtRules: [{issuer: a, jwksUri: 'file:///dev/zero'}]\n"));
    resource_set_free(f->set);
    buf_init(&errs, 1 << 16);
    f->set = resource_load_mem(yaml, strlen(yaml), "ra.yaml", &errs, &nerr);
    assert_int_equal(nerr, 1);
    assert_non_null(strstr(buf_cstr(&errs), "not a regular file"));
    buf_dispose(&errs);
    nerr = 0;
    snprintf(yaml, sizeof(yaml),
             RA("file", "istio-system",
                "  jwtRules: [{issuer: a, jwksUri: 'file://%s'}]\n"),
             path);
    /* The same problem is a load error for `strait check`. */
    resource_set_free(f->set);
    buf_init(&errs, 1 << 16);
    f->set = resource_load_mem(yaml, strlen(yaml), "ra.yaml", &errs, &nerr);
    assert_int_equal(nerr, 1);
    assert_non_null(strstr(buf_cstr(&errs), "RequestAuthentication"));
    assert_non_null(strstr(buf_cstr(&errs), "No such file"));
    buf_dispose(&errs);
}

/* What the loader refuses or warns about in a RequestAuthentication. */
static void test_resource_checks(void **state)
{
    static const struct {
        const char *body, *msg;
    } bad[] = {
        {"  jwtRules: [{jwks: '{}'}]\n", "issuer is required"},
        {"  jwtRules: [{issuer: a}]\n", "jwks or jwksUri is required"},
        {"  jwtRules: [{issuer: a, jwks: '{\"keys\": [}'}]\n", "jwks:"},
        {"  jwtRules: [{issuer: a, jwks: '{\"keys\": []}'}]\n",
         "no RSA or EC signing key"},
        {"  jwtRules: [{issuer: a, jwksUri: 'ftp://x/'}]\n",
         "not an http, https or file URI"},
        {"  jwtRules: [{issuer: a, jwksUri: 'https://x/', fromHeaders: "
         "[{name: 'a b'}]}]\n",
         "name must be a header name"},
    };
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        char yaml[1024];
        struct buf errs;
        int nerr = 0;
        struct resource_set *set;

        snprintf(yaml, sizeof(yaml), RA("r", "istio-system", "%s"),
                 bad[i].body);
        buf_init(&errs, 1 << 16);
        set = resource_load_mem(yaml, strlen(yaml), "ra.yaml", &errs, &nerr);
        if (strstr(buf_cstr(&errs), bad[i].msg) == NULL)
            fprintf(stderr, "case %zu: %s\n", i, buf_cstr(&errs));
        assert_true(nerr >= 1);
        assert_non_null(strstr(buf_cstr(&errs), bad[i].msg));
        buf_dispose(&errs);
        resource_set_free(set);
    }
}

static void test_parse_url(void **state)
{
    static const char *const bad[] = {
        "ftp://h/x",
        "http://",
        "http:///x",
        "http://h:0/",
        "http://h:70000/",
        "http://h:x/",
        "http://u:p@h/",
        "http://[::1/",
        "http://h/a b",
        "http://h/a\r\n",
        /* Hosts: LDH labels and dots, or a bracketed IPv6 literal. */
        "http://h\r\nx: y/",
        "http://h\tx/",
        "http://a..b/",
        "http://a./",
        "http://-a/",
        "http://a-/",
        "http://a_b/",
        "http://h%00/",
        "http://[::1\n]/",
        "http://[v1.x]/",
        "http://[1.2.3.4]/",
        "http://h\x7f/",
    };
    char *host, *path;
    const char *why;
    int tls, port;
    (void)state;

    assert_int_equal(jwt_parse_url("https://idp.example/keys?v=1", &tls, &host,
                                   &port, &path, &why),
                     0);
    assert_int_equal(tls, 1);
    assert_int_equal(port, 443);
    assert_string_equal(host, "idp.example");
    assert_string_equal(path, "/keys?v=1");
    free(host);
    free(path);
    assert_int_equal(
        jwt_parse_url("http://[::1]:8080?x", &tls, &host, &port, &path, &why),
        0);
    assert_int_equal(tls, 0);
    assert_int_equal(port, 8080);
    assert_string_equal(host, "::1");
    assert_string_equal(path, "/?x");
    free(host);
    free(path);
    assert_int_equal(
        jwt_parse_url("http://10.0.0.1:81/k", &tls, &host, &port, &path, &why),
        0);
    assert_string_equal(host, "10.0.0.1");
    free(host);
    free(path);
    assert_int_equal(jwt_parse_url("https://Key-Server.idp-1.example/k", &tls,
                                   &host, &port, &path, &why),
                     0);
    free(host);
    free(path);
    assert_int_equal(jwt_parse_url("http://h", &tls, &host, &port, &path, &why),
                     0);
    assert_string_equal(path, "/");
    free(host);
    free(path);
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        if (jwt_parse_url(bad[i], &tls, &host, &port, &path, &why) == 0)
            fail_msg("accepted %s", bad[i]);
        assert_null(host);
        assert_null(path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_each_alg_verifies, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_wrong_key_or_curve_fails, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unknown_kid_and_no_kid, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_signature, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expiry_and_not_before_with_skew,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_time_claims_strict, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_b64url_strict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_issuer_and_audiences, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_malformed_tokens, setup, teardown),
        cmocka_unit_test(test_jwks_refused),
        cmocka_unit_test_setup_teardown(test_jwks_skips_unusable_keys, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_key_alg_must_match, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_default_locations, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_custom_locations_and_outputs,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_providers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_token_is_checked, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_one_parse_per_token, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_client_output_headers_removed,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_issuer_twice, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_scoping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jwks_file, setup, teardown),
        cmocka_unit_test(test_resource_checks),
        cmocka_unit_test(test_parse_url),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
