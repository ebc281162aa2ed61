/*
 * SPIFFE trust bundles: what bundle_write() writes bundle_parse() reads
 * back (EC and RSA authorities, the sequence), jwt-svid keys are counted
 * and left out, and every malformed or mismatched key is refused with a
 * reason.
 */
#include "config.h"

#include <openssl/bn.h>
#include <openssl/ec_key.h>
#include <openssl/evp.h>
#include <openssl/nid.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "tls/bundle.h"

static EVP_PKEY *ec_key(void)
{
    EC_KEY *ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
    EVP_PKEY *k = EVP_PKEY_new();

    assert_true(EC_KEY_generate_key(ec));
    assert_true(EVP_PKEY_assign_EC_KEY(k, ec));
    return k;
}

static EVP_PKEY *rsa_key(void)
{
    RSA *r = RSA_new();
    BIGNUM *e = BN_new();
    EVP_PKEY *k = EVP_PKEY_new();

    BN_set_word(e, RSA_F4);
    assert_true(RSA_generate_key_ex(r, 2048, e, NULL));
    BN_free(e);
    assert_true(EVP_PKEY_assign_RSA(k, r));
    return k;
}

/* A self-signed certificate, a CA one when ca is set. */
static X509 *cert(EVP_PKEY *k, const char *cn, int ca)
{
    X509 *x = X509_new();
    X509_NAME *n = X509_NAME_new();
    X509_EXTENSION *ext;

    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 7);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const uint8_t *)cn, -1,
                               -1, 0);
    X509_set_subject_name(x, n);
    X509_set_issuer_name(x, n);
    X509_NAME_free(n);
    X509_set_pubkey(x, k);
    ext = X509V3_EXT_nconf_nid(NULL, NULL, NID_basic_constraints,
                               ca ? "critical,CA:TRUE" : "CA:FALSE");
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    assert_true(X509_sign(x, k, EVP_sha256()) > 0);
    return x;
}

struct fixture {
    EVP_PKEY *ec, *rsa;
    X509 *ec_ca, *rsa_ca, *leaf;
};

static struct fixture fx;

static int setup(void **state)
{
    (void)state;
    fx.ec = ec_key();
    fx.rsa = rsa_key();
    fx.ec_ca = cert(fx.ec, "ec root", 1);
    fx.rsa_ca = cert(fx.rsa, "rsa root", 1);
    fx.leaf = cert(fx.ec, "a leaf", 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    X509_free(fx.ec_ca);
    X509_free(fx.rsa_ca);
    X509_free(fx.leaf);
    EVP_PKEY_free(fx.ec);
    EVP_PKEY_free(fx.rsa);
    return 0;
}

static char *written(X509 *a, X509 *b, int64_t seq)
{
    STACK_OF(X509) *s = sk_X509_new_null();
    struct buf out;
    char *text;

    sk_X509_push(s, a);
    if (b != NULL)
        sk_X509_push(s, b);
    buf_init(&out, 1 << 20);
    assert_int_equal(bundle_write(&out, s, seq), 0);
    text = strdup(buf_cstr(&out));
    buf_dispose(&out);
    sk_X509_free(s);
    return text;
}

static void test_round_trip(void **state)
{
    char *text = written(fx.ec_ca, fx.rsa_ca, 42);
    struct spiffe_bundle b;
    const char *why = NULL;
    STACK_OF(X509) *want = sk_X509_new_null();

    (void)state;
    assert_non_null(strstr(text, "\"spiffe_sequence\":42"));
    assert_non_null(strstr(text, "\"use\":\"x509-svid\",\"kty\":\"EC\","
                                 "\"crv\":\"P-256\""));
    assert_non_null(strstr(text, "\"kty\":\"RSA\""));
    assert_int_equal(bundle_parse(text, strlen(text), &b, &why), 0);
    assert_int_equal(b.sequence, 42);
    assert_int_equal(b.refresh_hint, -1);
    assert_int_equal(sk_X509_num(b.roots), 2);
    sk_X509_push(want, fx.rsa_ca);
    sk_X509_push(want, fx.ec_ca);
    assert_true(bundle_same_roots(b.roots, want));
    sk_X509_pop(want);
    assert_false(bundle_same_roots(b.roots, want));
    sk_X509_free(want);
    bundle_dispose(&b);
    bundle_dispose(&b); /* twice is fine */
    free(text);
}

static void test_jwt_keys_are_counted_and_left_out(void **state)
{
    char *text = written(fx.ec_ca, NULL, -1);
    char doc[16384];
    struct spiffe_bundle b;
    const char *why;

    (void)state;
    assert_null(strstr(text, "spiffe_sequence"));
    /* {"keys":[X]} -> {"spiffe_refresh_hint":300,"keys":[JWT,X]} */
    snprintf(doc, sizeof(doc),
             "{\"spiffe_refresh_hint\":300,\"keys\":[{\"use\":\"jwt-svid\","
             "\"kty\":\"EC\",\"kid\":\"k1\",\"crv\":\"P-256\",\"x\":\"AA\","
             "\"y\":\"AA\"},%s",
             strstr(text, "\"keys\":[") + 8);
    assert_int_equal(bundle_parse(doc, strlen(doc), &b, &why), 0);
    assert_int_equal(b.jwt_keys, 1);
    assert_int_equal(b.refresh_hint, 300);
    assert_int_equal(sk_X509_num(b.roots), 1);
    bundle_dispose(&b);
    free(text);
}

static void refused(const char *doc, const char *want)
{
    struct spiffe_bundle b;
    const char *why = NULL;

    assert_int_equal(bundle_parse(doc, strlen(doc), &b, &why), -1);
    assert_non_null(why);
    if (strstr(why, want) == NULL)
        fail_msg("'%s': reason '%s' lacks '%s'", doc, why, want);
    assert_null(b.roots);
}

/* text with the first occurrence of from replaced by to. */
static char *edit(const char *text, const char *from, const char *to)
{
    const char *p = strstr(text, from);
    char *out = malloc(strlen(text) + strlen(to) + 1);

    assert_non_null(p);
    memcpy(out, text, (size_t)(p - text));
    strcpy(out + (p - text), to);
    strcat(out, p + strlen(from));
    return out;
}

static void test_refusals(void **state)
{
    char *ec = written(fx.ec_ca, NULL, 1);
    char *rsa = written(fx.rsa_ca, NULL, 1);
    char *leaf = written(fx.leaf, NULL, 1);
    char *t;

    (void)state;
    refused("[]", "JSON object");
    refused("{}", "keys array");
    refused("{\"keys\":[]}", "no x509-svid authority");
    refused("{\"keys\":[{\"kty\":\"EC\"}]}", "needs a use");
    refused("{\"keys\":[{\"use\":\"enc\"}]}", "x509-svid or jwt-svid");
    refused("{\"keys\":[{\"use\":\"x509-svid\",\"kty\":\"EC\"}]}",
            "exactly one certificate");
    refused("{\"keys\":[{\"use\":\"x509-svid\",\"kty\":\"EC\",\"x5c\":"
            "[\"!!\"]}]}",
            "not valid base64");
    refused("{\"keys\":[{\"use\":\"x509-svid\",\"kty\":\"EC\",\"x5c\":"
            "[\"AAAA\"]}]}",
            "not a DER X.509");
    refused("{\"spiffe_sequence\":-1,\"keys\":[]}", "integers >= 0");
    refused("{\"spiffe_sequence\":1.5,\"keys\":[]}", "integers >= 0");
    refused("{\"keys\":[],\"keys\":[]}", "duplicate");
    refused("{\"keys\":", "");
    refused(leaf, "must be a CA certificate");
    t = edit(ec, "\"kty\":\"EC\"", "\"kty\":\"RSA\"");
    refused(t, "kty must name");
    free(t);
    t = edit(ec, "\"crv\":\"P-256\"", "\"crv\":\"P-384\"");
    refused(t, "do not match");
    free(t);
    t = edit(rsa, "\"e\":\"AQAB\"", "\"e\":\"AQAC\"");
    refused(t, "do not match");
    free(t);
    /* Two certificates in one x5c. */
    {
        const char *p = strstr(ec, "\"x5c\":[\"") + 8;
        const char *q = strchr(p, '"');
        char two[16384];
        snprintf(two, sizeof(two), "%.*s\"%.*s\",\"%s", (int)(p - ec - 1), ec,
                 (int)(q - p), p, p);
        refused(two, "exactly one certificate");
    }
    /* More than BUNDLE_MAX_KEYS keys. */
    {
        struct buf b;
        buf_init(&b, 1 << 20);
        buf_puts(&b, "{\"keys\":[");
        for (int i = 0; i <= BUNDLE_MAX_KEYS; i++)
            buf_printf(&b, "%s{\"use\":\"jwt-svid\"}", i ? "," : "");
        buf_puts(&b, "]}");
        refused(buf_cstr(&b), "more than 32 keys");
        buf_dispose(&b);
    }
    free(ec);
    free(rsa);
    free(leaf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_jwt_keys_are_counted_and_left_out),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
