#include "config.h"

#include <openssl/bio.h>
#include <openssl/ec_key.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "control/ca/ca.h"
#include "control/ca/csr.h"
#include "control/ca/identity.h"
#include "control/ca/pki.h"
#include "core/buf.h"

#define SAMPLES SRCDIR "/tests/data/istio-samples/certs"

struct fx {
    char dir[64];
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_ca.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

static struct ca_conf conf_in(const char *dir)
{
    struct ca_conf c = {
        dir,   NULL,     "example.org", PKI_KEY_ECDSA, 10 * 365 * 86400,
        86400, 7 * 86400};
    return c;
}

static mode_t mode_of(const char *dir, const char *name)
{
    char p[256];
    struct stat st;

    snprintf(p, sizeof(p), "%s/%s", dir, name);
    assert_int_equal(stat(p, &st), 0);
    return st.st_mode & 07777;
}

static void copy(const char *from, const char *dir, const char *name)
{
    char cmd[512];

    snprintf(cmd, sizeof(cmd), "cp %s %s/%s", from, dir, name);
    assert_int_equal(system(cmd), 0);
}

/* Verifies leaf against root with the CA's chain as untrusted. */
static int verifies(X509 *leaf, X509 *root, STACK_OF(X509) * untrusted)
{
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    int ok;

    X509_STORE_add_cert(store, root);
    X509_STORE_CTX_init(ctx, store, leaf, untrusted);
    ok = X509_verify_cert(ctx) == 1;
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    return ok;
}

static int count_uri_sans(X509 *x)
{
    GENERAL_NAMES *names =
        X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    int n = 0;

    for (size_t i = 0; names && i < sk_GENERAL_NAME_num(names); i++)
        n++;
    GENERAL_NAMES_free(names);
    return n;
}

static void test_self_signed_root_created_0600_and_reloaded(void **state)
{
    struct fx *f = *state;
    struct ca_conf c = conf_in(f->dir);
    struct ca *a, *b;
    char *err = NULL;
    mode_t old = umask(0);

    /* Without create, an empty directory is an error that says what to
     * do. */
    assert_null(ca_open(&c, 0, &err));
    assert_non_null(strstr(err, "strait ca init"));
    free(err);
    a = ca_open(&c, 1, &err);
    umask(old);
    assert_non_null(a);
    assert_false(a->intermediate);
    /* umask 0 would have left a plain open() at its mode argument; the
     * key must still be 0600. */
    assert_int_equal(mode_of(f->dir, "ca-key.pem"), 0600);
    assert_int_equal(X509_check_issued(a->root, a->root), X509_V_OK);
    assert_true(pki_is_ca(a->cert));
    b = ca_open(&c, 1, &err);
    assert_non_null(b);
    assert_memory_equal(a->pin, b->pin, 32);
    ca_free(a);
    ca_free(b);
}

static void test_issue_sets_san_validity_usage_and_chain(void **state)
{
    struct fx *f = *state;
    struct ca_conf c = conf_in(f->dir);
    struct ca *ca;
    EVP_PKEY *k = pki_key_new(PKI_KEY_ECDSA);
    X509 *x;
    char *err = NULL, *id;
    int64_t nb, na;

    ca = ca_open(&c, 1, &err);
    assert_non_null(ca);
    x = ca_issue(ca, k, "spiffe://example.org/ns/foo/sa/bar", 3600, &err);
    assert_non_null(x);
    id = pki_spiffe_id(x);
    assert_string_equal(id, "spiffe://example.org/ns/foo/sa/bar");
    free(id);
    assert_int_equal(count_uri_sans(x), 1);
    assert_true(X509_get_extension_flags(x) & EXFLAG_SET);
    nb = pki_time(X509_get0_notBefore(x));
    na = pki_time(X509_get0_notAfter(x));
    assert_int_equal(na - nb, 3600);
    assert_true(llabs((long long)(nb - (int64_t)time(NULL))) <= 5);
    assert_int_equal(X509_get_key_usage(x),
                     KU_DIGITAL_SIGNATURE | KU_KEY_ENCIPHERMENT);
    assert_int_equal(X509_get_extended_key_usage(x) &
                         (XKU_SSL_SERVER | XKU_SSL_CLIENT),
                     XKU_SSL_SERVER | XKU_SSL_CLIENT);
    assert_false(pki_is_ca(x));
    assert_int_equal(X509_check_ca(x), 0);
    assert_true(verifies(x, ca->root, ca->chain));
    /* The serial is random: two issues differ. */
    {
        X509 *y =
            ca_issue(ca, k, "spiffe://example.org/ns/foo/sa/bar", 60, &err);
        assert_non_null(y);
        assert_int_not_equal(ASN1_INTEGER_cmp(X509_get0_serialNumber(x),
                                              X509_get0_serialNumber(y)),
                             0);
        X509_free(y);
    }
    X509_free(x);
    EVP_PKEY_free(k);
    ca_free(ca);
}

static void test_ttl_default_and_cap(void **state)
{
    struct fx *f = *state;
    struct ca_conf c = conf_in(f->dir);
    struct ca *ca = NULL;
    EVP_PKEY *k = pki_key_new(PKI_KEY_ECDSA);
    char *err = NULL;
    X509 *d, *m;

    ca = ca_open(&c, 1, &err);
    assert_non_null(ca);
    d = ca_issue(ca, k, "spiffe://example.org/ns/a/sa/b", 0, &err);
    m = ca_issue(ca, k, "spiffe://example.org/ns/a/sa/b", 365 * 86400, &err);
    assert_non_null(d);
    assert_non_null(m);
    assert_int_equal(pki_time(X509_get0_notAfter(d)) -
                         pki_time(X509_get0_notBefore(d)),
                     86400);
    assert_int_equal(pki_time(X509_get0_notAfter(m)) -
                         pki_time(X509_get0_notBefore(m)),
                     7 * 86400);
    X509_free(d);
    X509_free(m);
    EVP_PKEY_free(k);
    ca_free(ca);
}

static void test_rsa_root_option(void **state)
{
    struct fx *f = *state;
    struct ca_conf c = conf_in(f->dir);
    struct ca *ca;
    char *err = NULL;

    c.key_type = PKI_KEY_RSA;
    ca = ca_open(&c, 1, &err);
    assert_non_null(ca);
    assert_int_equal(EVP_PKEY_id(ca->key), EVP_PKEY_RSA);
    assert_int_equal(EVP_PKEY_bits(ca->key), 2048);
    ca_free(ca);
    /* The default is ECDSA P-256. */
    {
        EVP_PKEY *k = pki_key_new(PKI_KEY_ECDSA);
        assert_int_equal(EVP_PKEY_id(k), EVP_PKEY_EC);
        assert_int_equal(EVP_PKEY_bits(k), 256);
        EVP_PKEY_free(k);
    }
}

static X509 *read_cert(const char *path)
{
    size_t n;
    char *err = NULL;
    char *pem = pki_read_file(path, &n, &err);
    STACK_OF(X509) * sk;
    X509 *x;

    assert_non_null(pem);
    sk = pki_certs_parse(pem, n, path, &err);
    assert_non_null(sk);
    x = sk_X509_shift(sk);
    sk_X509_pop_free(sk, X509_free);
    free(pem);
    return x;
}

static void test_intermediate_with_istio_samples(void **state)
{
    struct fx *f = *state;
    struct ca_conf c = conf_in(f->dir);
    struct ca *ca;
    EVP_PKEY *k = pki_key_new(PKI_KEY_ECDSA);
    X509 *leaf, *root = read_cert(SAMPLES "/root-cert.pem");
    X509 *inter = read_cert(SAMPLES "/ca-cert.pem");
    STACK_OF(X509) *untrusted = sk_X509_new_null();
    uint8_t pin[32];
    char *err = NULL;
    struct buf b;
    STACK_OF(X509) * chain;

    c.cacerts = SAMPLES;
    ca = ca_open(&c, 1, &err);
    assert_non_null(ca);
    assert_true(ca->intermediate);
    pki_spki_sha256(root, pin);
    assert_memory_equal(ca->pin, pin, 32);
    /* No root is created in the state directory in this mode. */
    {
        char p[128];
        snprintf(p, sizeof(p), "%s/ca-key.pem", f->dir);
        assert_int_equal(access(p, F_OK), -1);
    }
    leaf = ca_issue(ca, k, "spiffe://example.org/ns/foo/sa/bar", 600, &err);
    assert_non_null(leaf);
    assert_int_equal(X509_check_issued(inter, leaf), X509_V_OK);
    sk_X509_push(untrusted, inter);
    assert_true(verifies(leaf, root, untrusted));
    /* The API's chain: leaf, the intermediate, the root. */
    buf_init(&b, 1 << 20);
    assert_int_equal(ca_chain_pem(ca, leaf, &b), 0);
    chain = pki_certs_parse(buf_ptr(&b), buf_len(&b), "chain", &err);
    assert_non_null(chain);
    assert_int_equal(sk_X509_num(chain), 3);
    assert_int_equal(X509_cmp(sk_X509_value(chain, 1), inter), 0);
    assert_int_equal(X509_cmp(sk_X509_value(chain, 2), root), 0);
    sk_X509_pop_free(chain, X509_free);
    buf_dispose(&b);
    sk_X509_pop_free(untrusted, X509_free);
    X509_free(root);
    X509_free(leaf);
    EVP_PKEY_free(k);
    ca_free(ca);
}

static char *open_fails(const char *dir)
{
    struct ca_conf c = conf_in("/tmp/unused-state");
    char *err = NULL;

    c.cacerts = dir;
    assert_null(ca_open(&c, 1, &err));
    assert_non_null(err);
    return err;
}

static void test_mismatched_key_refused(void **state)
{
    struct fx *f = *state;
    char *err;

    copy(SAMPLES "/ca-cert.pem", f->dir, "ca-cert.pem");
    copy(SAMPLES "/workload-foo-key.pem", f->dir, "ca-key.pem");
    copy(SAMPLES "/root-cert.pem", f->dir, "root-cert.pem");
    copy(SAMPLES "/cert-chain.pem", f->dir, "cert-chain.pem");
    err = open_fails(f->dir);
    assert_non_null(strstr(err, "ca-key.pem does not match"));
    free(err);
}

static void test_incomplete_layout_names_missing_files(void **state)
{
    struct fx *f = *state;
    char *err;

    copy(SAMPLES "/ca-cert.pem", f->dir, "ca-cert.pem");
    err = open_fails(f->dir);
    assert_non_null(strstr(err, "incomplete CA layout"));
    assert_non_null(strstr(err, "missing ca-key.pem, root-cert.pem, "
                                "cert-chain.pem"));
    free(err);
}

static void test_unreadable_key_refused_without_echoing_it(void **state)
{
    struct fx *f = *state;
    char p[128], *err;
    FILE *fp;

    copy(SAMPLES "/ca-cert.pem", f->dir, "ca-cert.pem");
    copy(SAMPLES "/root-cert.pem", f->dir, "root-cert.pem");
    copy(SAMPLES "/cert-chain.pem", f->dir, "cert-chain.pem");
    snprintf(p, sizeof(p), "%s/ca-key.pem", f->dir);
    fp = fopen(p, "w");
    assert_non_null(fp);
    fputs("-----BEGIN PRIVATE KEY-----\nU0VDUkVUU0VDUkVU\n"
          "-----END PRIVATE KEY-----\n",
          fp);
    fclose(fp);
    err = open_fails(f->dir);
    assert_non_null(strstr(err, "ca-key.pem: not a readable PEM private key"));
    assert_null(strstr(err, "U0VDUkVU"));
    free(err);
    /* Unreadable by permissions too (when not running as root, where
     * permissions do not apply). */
    if (geteuid() != 0) {
        copy(SAMPLES "/ca-key.pem", f->dir, "ca-key.pem");
        assert_int_equal(chmod(p, 0), 0);
        err = open_fails(f->dir);
        assert_non_null(strstr(err, "cannot read"));
        free(err);
    }
}

static void test_leaf_as_ca_cert_refused(void **state)
{
    struct fx *f = *state;
    char *err;

    copy(SAMPLES "/workload-foo-cert.pem", f->dir, "ca-cert.pem");
    copy(SAMPLES "/workload-foo-key.pem", f->dir, "ca-key.pem");
    copy(SAMPLES "/root-cert.pem", f->dir, "root-cert.pem");
    copy(SAMPLES "/cert-chain.pem", f->dir, "cert-chain.pem");
    err = open_fails(f->dir);
    assert_non_null(strstr(err, "is not a CA certificate"));
    free(err);
}

static void test_wrong_root_refused(void **state)
{
    struct fx *f = *state;
    struct ca_conf other = conf_in(f->dir);
    struct ca *ca;
    char *err = NULL, sub[128], p[160];

    /* A self-signed CA elsewhere provides an unrelated root. */
    ca = ca_open(&other, 1, &err);
    assert_non_null(ca);
    ca_free(ca);
    snprintf(sub, sizeof(sub), "%s/plug", f->dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    copy(SAMPLES "/ca-cert.pem", sub, "ca-cert.pem");
    copy(SAMPLES "/ca-key.pem", sub, "ca-key.pem");
    snprintf(p, sizeof(p), "%s/root-cert.pem", f->dir);
    copy(p, sub, "root-cert.pem");
    copy(SAMPLES "/cert-chain.pem", sub, "cert-chain.pem");
    err = open_fails(sub);
    assert_non_null(strstr(err, "does not chain to"));
    free(err);
}

/* A CSR for k that asks for a SAN of its own choosing. */
static char *csr_with_san(EVP_PKEY *k, const char *san)
{
    X509_REQ *req = X509_REQ_new();
    STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
    X509V3_CTX ctx;
    X509_EXTENSION *e;
    BIO *bio = BIO_new(BIO_s_mem());
    const uint8_t *p;
    size_t n;
    char *out;

    X509_REQ_set_pubkey(req, k);
    X509V3_set_ctx(&ctx, NULL, NULL, req, NULL, 0);
    e = X509V3_EXT_nconf_nid(NULL, &ctx, NID_subject_alt_name, san);
    assert_non_null(e);
    sk_X509_EXTENSION_push(exts, e);
    X509_REQ_add_extensions(req, exts);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    assert_true(X509_REQ_sign(req, k, EVP_sha256()) > 0);
    PEM_write_bio_X509_REQ(bio, req);
    BIO_mem_contents(bio, &p, &n);
    out = strndup((const char *)p, n);
    BIO_free(bio);
    X509_REQ_free(req);
    return out;
}

static void test_csr_san_is_ignored(void **state)
{
    struct fx *f = *state;
    struct ca_conf c = conf_in(f->dir);
    struct ca *ca;
    EVP_PKEY *k = pki_key_new(PKI_KEY_ECDSA), *pub;
    char *pem = csr_with_san(k, "URI:spiffe://example.org/ns/kube-system/"
                                "sa/admin,DNS:evil.example");
    const char *why = NULL;
    char *err = NULL, *id;
    X509 *x;

    ca = ca_open(&c, 1, &err);
    assert_non_null(ca);
    pub = csr_parse(pem, strlen(pem), &why);
    assert_non_null(pub);
    assert_int_equal(EVP_PKEY_cmp(pub, k), 1);
    x = ca_issue(ca, pub, "spiffe://example.org/ns/foo/sa/bar", 60, &err);
    assert_non_null(x);
    id = pki_spiffe_id(x);
    assert_string_equal(id, "spiffe://example.org/ns/foo/sa/bar");
    assert_int_equal(count_uri_sans(x), 1);
    free(id);
    X509_free(x);
    EVP_PKEY_free(pub);
    EVP_PKEY_free(k);
    free(pem);
    ca_free(ca);
}

static void expect_bad_csr(const char *pem, size_t n, const char *want)
{
    const char *why = NULL;
    EVP_PKEY *k = csr_parse(pem, n, &why);

    assert_null(k);
    assert_non_null(why);
    if (strstr(why, want) == NULL)
        fail_msg("CSR refused with '%s', expected '%s'", why, want);
}

static void test_csr_bad_input_refused(void **state)
{
    EVP_PKEY *k = pki_key_new(PKI_KEY_ECDSA);
    struct buf b;
    char *two, *big;
    size_t n;

    (void)state;
    buf_init(&b, 1 << 16);
    assert_int_equal(csr_new(k, NULL, &b), 0);
    n = buf_len(&b);
    expect_bad_csr("", 0, "empty CSR");
    expect_bad_csr("hello", 5, "not a PEM certificate request");
    expect_bad_csr(buf_ptr(&b), n / 2, "not a PEM certificate request");
    /* Two requests in one. */
    two = malloc(2 * n);
    memcpy(two, buf_ptr(&b), n);
    memcpy(two + n, buf_ptr(&b), n);
    expect_bad_csr(two, 2 * n, "more than one");
    free(two);
    big = calloc(1, CSR_MAX_PEM + 1);
    memset(big, 'A', CSR_MAX_PEM);
    expect_bad_csr(big, CSR_MAX_PEM + 1, "too large");
    free(big);
    /* A signature that does not match: swap in another key's request
     * body by re-signing with a different key after setting this key. */
    {
        EVP_PKEY *other = pki_key_new(PKI_KEY_ECDSA);
        X509_REQ *req = X509_REQ_new();
        BIO *bio = BIO_new(BIO_s_mem());
        const uint8_t *p;
        size_t pn;

        X509_REQ_set_pubkey(req, k);
        X509_REQ_sign(req, other, EVP_sha256());
        PEM_write_bio_X509_REQ(bio, req);
        BIO_mem_contents(bio, &p, &pn);
        expect_bad_csr((const char *)p, pn, "signature does not verify");
        BIO_free(bio);
        X509_REQ_free(req);
        EVP_PKEY_free(other);
    }
    /* Weak RSA is refused. */
    {
        EVP_PKEY *weak = EVP_PKEY_new();
        RSA *rsa = RSA_new();
        BIGNUM *e = BN_new();
        struct buf wb;

        BN_set_word(e, RSA_F4);
        assert_true(RSA_generate_key_ex(rsa, 1024, e, NULL));
        EVP_PKEY_assign_RSA(weak, rsa);
        buf_init(&wb, 1 << 16);
        assert_int_equal(csr_new(weak, NULL, &wb), 0);
        expect_bad_csr(buf_ptr(&wb), buf_len(&wb), "2048 to 4096");
        buf_dispose(&wb);
        BN_free(e);
        EVP_PKEY_free(weak);
    }
    buf_dispose(&b);
    EVP_PKEY_free(k);
}

static int watched;

static void on_publish(void *arg, struct ca_cred *cred)
{
    (void)arg;
    (void)cred;
    watched++;
}

static struct ca_cred *issue_cred(struct ca *ca, int64_t ttl)
{
    EVP_PKEY *k = pki_key_new(PKI_KEY_ECDSA);
    char *err = NULL;
    X509 *x = ca_issue(ca, k, "spiffe://example.org/ns/foo/sa/bar", ttl, &err);
    struct ca_cred *c;

    assert_non_null(x);
    c = ca_cred_new(x, X509_chain_up_ref(ca->chain), k, &err);
    assert_non_null(c);
    return c;
}

static void test_identity_holder_generations(void **state)
{
    struct fx *f = *state;
    struct ca_conf c = conf_in(f->dir);
    struct ca *ca;
    struct ca_identity h;
    struct ca_cred *a, *b, *got;
    unsigned gen = 0;
    char *err = NULL;
    SSL_CTX *ctx;

    ca = ca_open(&c, 1, &err);
    assert_non_null(ca);
    ca_identity_init(&h);
    assert_int_equal(ca_identity_watch(&h, on_publish, NULL), 0);
    assert_null(ca_identity_get(&h, &gen));
    a = issue_cred(ca, 600);
    b = issue_cred(ca, 600);
    ca_identity_publish(&h, a);
    got = ca_identity_get(&h, &gen);
    assert_ptr_equal(got, a);
    ca_cred_unref(got);
    /* Nothing new: no credential, no lock. */
    assert_null(ca_identity_get(&h, &gen));
    /* A TLS context built from the first credential stays usable after
     * the rotation (it holds its own references). */
    ctx = SSL_CTX_new(TLS_method());
    assert_int_equal(ca_cred_use(a, ctx), 0);
    assert_true(SSL_CTX_check_private_key(ctx));
    ca_identity_publish(&h, b);
    got = ca_identity_get(&h, &gen);
    assert_ptr_equal(got, b);
    ca_cred_unref(got);
    assert_int_equal(watched, 2);
    /* An unwatched callback is not called again; unwatching what is not
     * there changes nothing. */
    ca_identity_unwatch(&h, on_publish, NULL);
    ca_identity_unwatch(&h, on_publish, NULL);
    ca_identity_publish(&h, a);
    assert_int_equal(watched, 2);
    ca_cred_unref(a);
    ca_cred_unref(b);
    ca_identity_dispose(&h);
    assert_int_equal(
        X509_cmp(SSL_CTX_get0_certificate(ctx), SSL_CTX_get0_certificate(ctx)),
        0);
    SSL_CTX_free(ctx);
    ca_free(ca);
}

static void test_cred_store_load_and_renew_time(void **state)
{
    struct fx *f = *state;
    struct ca_conf c = conf_in(f->dir);
    struct ca *ca;
    struct ca_cred *a, *b;
    char *err = NULL, idir[128];
    mode_t old;

    ca = ca_open(&c, 1, &err);
    assert_non_null(ca);
    a = issue_cred(ca, 1000);
    snprintf(idir, sizeof(idir), "%s/id/nested", f->dir);
    old = umask(0);
    assert_int_equal(ca_cred_store(a, idir, &err), 0);
    umask(old);
    assert_int_equal(mode_of(idir, "key.pem"), 0600);
    assert_int_equal(mode_of(idir, "cert-chain.pem"), 0600);
    assert_int_equal(mode_of(idir, "root-cert.pem"), 0600);
    b = ca_cred_load(idir, &err);
    assert_non_null(b);
    assert_int_equal(X509_cmp(a->leaf, b->leaf), 0);
    assert_int_equal(X509_cmp(ca_cred_root(b), ca->root), 0);
    assert_string_equal(b->spiffe_id, "spiffe://example.org/ns/foo/sa/bar");
    /* Renewal at half life, less up to a tenth, over many draws. */
    for (int i = 0; i < 200; i++) {
        int64_t at = ca_cred_renew_at(b);
        assert_true(at <= b->not_before + 500);
        assert_true(at >= b->not_before + 400);
    }
    ca_cred_unref(b);
    /* A key that does not match the stored chain is refused. */
    {
        struct ca_cred *other = issue_cred(ca, 1000);
        char odir[160], cmd[400];
        snprintf(odir, sizeof(odir), "%s/other", f->dir);
        assert_int_equal(ca_cred_store(other, odir, &err), 0);
        snprintf(cmd, sizeof(cmd), "cp %s/key.pem %s/key.pem", odir, idir);
        assert_int_equal(system(cmd), 0);
        assert_null(ca_cred_load(idir, &err));
        assert_non_null(strstr(err, "does not match"));
        free(err);
        err = NULL;
        ca_cred_unref(other);
    }
    ca_cred_unref(a);
    ca_free(ca);
}

/* Regression: the renewal wait was counted in whole seconds from a
 * truncated now, so a certificate issued late in a second was renewed up
 * to a second late; with certTTL 2s that is at its expiry, and peers
 * refused the expired certificate during a rotation under load. */
static void test_renewal_wait_counts_milliseconds(void **state)
{
    struct fx *f = *state;
    struct ca_conf c = conf_in(f->dir);
    struct ca *ca;
    struct ca_cred *a;
    char *err = NULL;

    ca = ca_open(&c, 1, &err);
    assert_non_null(ca);
    a = issue_cred(ca, 2);
    /* A 2 s life has no jitter (a tenth of it is under a second): the
     * renewal is due at notBefore + 1 s exactly. */
    a->not_before = 1000;
    a->not_after = 1002;
    assert_int_equal(ca_cred_renew_at(a), 1001);
    assert_int_equal(ca_cred_renew_in_ms(a, 1000000), 1000);
    assert_int_equal(ca_cred_renew_in_ms(a, 1000900), 100);
    assert_int_equal(ca_cred_renew_in_ms(a, 1000999), 1);
    /* Due or past: now. */
    assert_int_equal(ca_cred_renew_in_ms(a, 1001000), 0);
    assert_int_equal(ca_cred_renew_in_ms(a, 1001700), 0);
    /* A day's certificate: between 0.4 and 0.5 of its life from
     * notBefore, whatever the jitter. */
    a->not_after = 1000 + 86400;
    for (int i = 0; i < 100; i++) {
        int64_t in = ca_cred_renew_in_ms(a, 1000250);
        assert_true(in >= 34560 * 1000 - 250);
        assert_true(in <= 43200 * 1000 - 250);
        assert_int_equal((in + 250) % 1000, 0);
    }
    ca_cred_unref(a);
    ca_free(ca);
}

static void test_spiffe_split(void **state)
{
    char *td, *ns, *sa;

    (void)state;
    assert_int_equal(pki_spiffe_split("spiffe://cluster.local/ns/default/sa/"
                                      "web",
                                      &td, &ns, &sa),
                     0);
    assert_string_equal(td, "cluster.local");
    assert_string_equal(ns, "default");
    assert_string_equal(sa, "web");
    free(td);
    free(ns);
    free(sa);
    assert_int_equal(
        pki_spiffe_split("spiffe://td/strait/ca", NULL, NULL, NULL), -1);
    assert_int_equal(
        pki_spiffe_split("spiffe://td/ns/a/sa/b/c", NULL, NULL, NULL), -1);
    assert_int_equal(
        pki_spiffe_split("spiffe://td/ns/A/sa/b", NULL, NULL, NULL), -1);
    assert_int_equal(pki_spiffe_split("https://td/ns/a/sa/b", NULL, NULL, NULL),
                     -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_self_signed_root_created_0600_and_reloaded, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_issue_sets_san_validity_usage_and_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttl_default_and_cap, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rsa_root_option, setup, teardown),
        cmocka_unit_test_setup_teardown(test_intermediate_with_istio_samples,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_mismatched_key_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_incomplete_layout_names_missing_files, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_unreadable_key_refused_without_echoing_it, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leaf_as_ca_cert_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_wrong_root_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_csr_san_is_ignored, setup,
                                        teardown),
        cmocka_unit_test(test_csr_bad_input_refused),
        cmocka_unit_test_setup_teardown(test_identity_holder_generations, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cred_store_load_and_renew_time,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_renewal_wait_counts_milliseconds,
                                        setup, teardown),
        cmocka_unit_test(test_spiffe_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
