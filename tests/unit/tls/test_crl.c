/*
 * CRL files: parsing, the checks before use, and the rule that only
 * issuers with a CRL are checked. Fixtures: tests/data/crl (make.py).
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "tls/crl.h"

#define DATA SRCDIR "/tests/data/crl/"

/* 2030-01-01: inside root.crl's validity, past root-old.crl's. */
static const time_t T2030 = 1893456000;

static char *slurp(const char *name, size_t *len)
{
    FILE *f = fopen(name, "rb");
    char *buf = calloc(1, 1 << 20);

    assert_non_null(f);
    assert_non_null(buf);
    *len = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    return buf;
}

static STACK_OF(X509_CRL) * parse_text(const char *text, char **err)
{
    return crl_parse((const uint8_t *)text, strlen(text), err);
}

static STACK_OF(X509_CRL) * parse_file(const char *name)
{
    size_t len;
    char *buf = slurp(name, &len), *err = NULL;
    STACK_OF(X509_CRL) *s = crl_parse((uint8_t *)buf, len, &err);

    free(buf);
    assert_null(err);
    assert_non_null(s);
    return s;
}

static void assert_parse_error(const char *text, const char *want)
{
    char *err = NULL;
    STACK_OF(X509_CRL) *s = parse_text(text, &err);

    assert_null(s);
    assert_non_null(err);
    if (strstr(err, want) == NULL)
        fail_msg("error '%s' does not say '%s'", err, want);
    free(err);
}

static void free_crls(STACK_OF(X509_CRL) * s)
{
    sk_X509_CRL_pop_free(s, X509_CRL_free);
}

static void parse_refuses_what_is_not_a_crl(void **state)
{
    size_t len;
    char *cert = slurp(DATA "root.crt", &len);
    char *crl = slurp(DATA "root.crl", &len);
    char *mixed;

    (void)state;
    assert_parse_error("", "no CRL in the file");
    assert_parse_error("just some text\n", "no CRL in the file");
    assert_parse_error(cert, "PEM block 1 is a CERTIFICATE, not an X509 CRL");
    assert_parse_error(
        "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n",
        "CRL 1 cannot be parsed");
    assert_parse_error(
        "-----BEGIN X509 CRL-----\n!!!!\n-----END X509 CRL-----\n",
        "PEM block 1 is malformed");
    assert_parse_error("-----BEGIN X509 CRL-----\nMIIB\n", "PEM block 1 is "
                                                           "malformed");
    /* A good CRL, then a certificate: the whole file is refused. */
    assert_true(asprintf(&mixed, "%s%s", crl, cert) > 0);
    assert_parse_error(mixed, "PEM block 2 is a CERTIFICATE");
    free(mixed);
    free(cert);
    free(crl);
}

static void parse_reads_concatenated_crls(void **state)
{
    STACK_OF(X509_CRL) *s = parse_file(DATA "two.crl");

    (void)state;
    assert_int_equal(sk_X509_CRL_num(s), 2);
    free_crls(s);
    s = parse_file(DATA "root.crl");
    assert_int_equal(sk_X509_CRL_num(s), 1);
    free_crls(s);
}

static X509_STORE *store_of(const char *const *certs)
{
    X509_STORE *st = X509_STORE_new();

    assert_non_null(st);
    for (; *certs != NULL; certs++)
        assert_int_equal(X509_STORE_load_locations(st, *certs, NULL), 1);
    return st;
}

static void check_expect(const char *crl_file, X509_STORE *st, time_t now,
                         const char *want)
{
    STACK_OF(X509_CRL) *s = parse_file(crl_file);
    char *err = NULL;
    int rc = crl_check(s, st, now, &err);

    if (want == NULL) {
        if (rc != 0)
            fail_msg("%s: unexpected error: %s", crl_file, err);
    } else {
        assert_int_equal(rc, -1);
        assert_non_null(err);
        if (strstr(err, want) == NULL)
            fail_msg("%s: error '%s' does not say '%s'", crl_file, err, want);
    }
    free(err);
    free_crls(s);
}

static void check_times(void **state)
{
    (void)state;
    /* Current in 2030; the old one alone is past its nextUpdate then. */
    check_expect(DATA "root.crl", NULL, T2030, NULL);
    check_expect(DATA "root-old.crl", NULL, T2030,
                 "the CRL of /CN=root expired at Jan  1 00:00:00 2021 GMT");
    /* Beside a current CRL of the same issuer, an old one is harmless. */
    check_expect(DATA "two.crl", NULL, T2030, NULL);
    /* In 2020-06 the old one was current. */
    check_expect(DATA "root-old.crl", NULL, 1590969600, NULL);
}

static void check_signers(void **state)
{
    static const char *const roots[] = {DATA "root.crt", DATA "other.crt",
                                        DATA "nosign.crt", NULL};
    static const char *const others[] = {DATA "other.crt", NULL};
    X509_STORE *st = store_of(roots), *ost = store_of(others);

    (void)state;
    check_expect(DATA "root.crl", st, T2030, NULL);
    check_expect(DATA "root-forged.crl", st, T2030,
                 "CRL 1 of /CN=root is not signed by the CA certificate");
    check_expect(DATA "nosign.crl", st, T2030, "lacks cRLSign");
    /* The issuer is not among the CAs: checked at the handshake. */
    check_expect(DATA "root-forged.crl", ost, T2030, NULL);
    X509_STORE_free(st);
    X509_STORE_free(ost);
}

static X509 *cert(const char *name)
{
    FILE *f = fopen(name, "r");
    X509 *x;

    assert_non_null(f);
    x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(x);
    return x;
}

/* Verifies leaf against st; returns the verify error (X509_V_OK when it
 * passed). */
static int verify(X509_STORE *st, const char *leaf, int with_cb)
{
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    X509 *x = cert(leaf);
    int ok, e;

    assert_int_equal(X509_STORE_CTX_init(ctx, st, x, NULL), 1);
    if (with_cb)
        X509_STORE_CTX_set_verify_cb(ctx, crl_verify_cb);
    ok = X509_verify_cert(ctx);
    e = X509_STORE_CTX_get_error(ctx);
    assert_int_equal(ok == 1, e == X509_V_OK);
    X509_STORE_CTX_free(ctx);
    X509_free(x);
    ERR_clear_error();
    return e;
}

static void only_issuers_with_a_crl_are_checked(void **state)
{
    static const char *const roots[] = {DATA "root.crt", DATA "other.crt",
                                        NULL};
    X509_STORE *st = store_of(roots);
    char *err = NULL;

    (void)state;
    assert_int_equal(crl_load(st, DATA "root.crl", &err), 0);
    assert_null(err);
    assert_int_equal(verify(st, DATA "good.crt", 1), X509_V_OK);
    assert_int_equal(verify(st, DATA "bad.crt", 1), X509_V_ERR_CERT_REVOKED);
    /* other has no CRL: BoringSSL alone refuses its leaf, the callback
     * lets it through with a clean result. */
    assert_int_equal(verify(st, DATA "other-leaf.crt", 0),
                     X509_V_ERR_UNABLE_TO_GET_CRL);
    assert_int_equal(verify(st, DATA "other-leaf.crt", 1), X509_V_OK);
    X509_STORE_free(st);
}

static void load_names_the_file(void **state)
{
    static const char *const roots[] = {DATA "root.crt", NULL};
    X509_STORE *st = store_of(roots);
    char *err = NULL;

    (void)state;
    assert_int_equal(crl_load(st, DATA "missing.crl", &err), -1);
    assert_string_equal(err, DATA "missing.crl: cannot read the CRL file: "
                                  "No such file or directory");
    free(err);
    assert_int_equal(crl_load(st, DATA "root.crt", &err), -1);
    assert_non_null(strstr(err, DATA "root.crt: PEM block 1 is a CERTIFICATE"));
    free(err);
    assert_int_equal(crl_load(st, DATA "root-old.crl", &err), -1);
    assert_non_null(strstr(err, DATA "root-old.crl: the CRL of /CN=root "
                                     "expired"));
    free(err);
    /* The same CRL twice is not an error. */
    assert_int_equal(crl_load(st, DATA "root.crl", &err), 0);
    assert_int_equal(crl_load(st, DATA "root.crl", &err), 0);
    assert_null(err);
    X509_STORE_free(st);
}

/* A FIFO named as a CRL is refused at once: opening it for reading
 * would block the control thread until a writer came. */
static void load_refuses_a_fifo(void **state)
{
    char dir[] = "/tmp/strait-crl-XXXXXX";
    char path[64];
    char *err = NULL;
    X509_STORE *st = X509_STORE_new();

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/ca.crl", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(crl_load(st, path, &err), -1);
    assert_non_null(strstr(err, "the CRL file is not a regular file"));
    free(err);
    unlink(path);
    rmdir(dir);
    X509_STORE_free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_refuses_what_is_not_a_crl),
        cmocka_unit_test(parse_reads_concatenated_crls),
        cmocka_unit_test(check_times),
        cmocka_unit_test(check_signers),
        cmocka_unit_test(only_issuers_with_a_crl_are_checked),
        cmocka_unit_test(load_names_the_file),
        cmocka_unit_test(load_refuses_a_fifo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
