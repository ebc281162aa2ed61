/*
 * The CA's signing material: create or load Istio's cacerts layout, and
 * issue SPIFFE workload certificates.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/mem.h>
#include <openssl/nid.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "control/ca/ca.h"
#include "control/ca/fileset.h"
#include "core/buf.h"
#include "core/err.h"

static const char *const layout_files[4] = {"ca-cert.pem", "ca-key.pem",
                                            "root-cert.pem", "cert-chain.pem"};

const char *ca_layout_dir(const struct ca_conf *conf)
{
    return conf->cacerts != NULL && conf->cacerts[0] != '\0' ? conf->cacerts
                                                             : conf->dir;
}

static char *path_join(const char *dir, const char *name)
{
    char *p = NULL;

    if (asprintf(&p, "%s/%s", dir, name) < 0)
        return NULL;
    return p;
}

void ca_free(struct ca *ca)
{
    if (ca == NULL)
        return;
    X509_free(ca->cert);
    EVP_PKEY_free(ca->key);
    sk_X509_pop_free(ca->chain, X509_free);
    sk_X509_pop_free(ca->roots, X509_free);
    free(ca->dir);
    free(ca->trust_domain);
    free(ca);
}

/* A positive random serial of 128 bits (RFC 5280 allows up to 20 bytes). */
static int set_serial(X509 *x)
{
    uint8_t r[16];
    BIGNUM *bn;
    int ok;

    RAND_bytes(r, sizeof(r));
    r[0] &= 0x7f;
    r[0] |= 0x40; /* a fixed length keeps the DER size predictable */
    bn = BN_bin2bn(r, sizeof(r), NULL);
    ok = bn != NULL && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
    BN_free(bn);
    return ok;
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509_EXTENSION *ext;
    int ok;

    X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
    ext = X509V3_EXT_nconf_nid(NULL, &ctx, nid, value);
    if (ext == NULL)
        return 0;
    ok = X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    return ok;
}

static int push_name(GENERAL_NAMES *names, int type, const char *v)
{
    GENERAL_NAME *g = GENERAL_NAME_new();
    ASN1_IA5STRING *s = ASN1_IA5STRING_new();

    if (g == NULL || s == NULL || !ASN1_STRING_set(s, v, (int)strlen(v))) {
        ASN1_IA5STRING_free(s);
        GENERAL_NAME_free(g);
        return 0;
    }
    GENERAL_NAME_set0_value(g, type, s);
    if (!sk_GENERAL_NAME_push(names, g)) {
        GENERAL_NAME_free(g);
        return 0;
    }
    return 1;
}

/* The SAN extension: the SPIFFE ID, then DNS names (the CA server's). */
static int add_sans(X509 *x, const char *uri, const char *const *dns,
                    size_t ndns)
{
    GENERAL_NAMES *names = GENERAL_NAMES_new();
    int ok = names != NULL && push_name(names, GEN_URI, uri);

    for (size_t i = 0; ok && i < ndns; i++)
        ok = push_name(names, GEN_DNS, dns[i]);
    if (ok)
        ok = X509_add1_ext_i2d(x, NID_subject_alt_name, names, 1,
                               X509V3_ADD_DEFAULT) == 1;
    GENERAL_NAMES_free(names);
    return ok;
}

static int sign(X509 *x, EVP_PKEY *key)
{
    return X509_sign(x, key, EVP_sha256()) > 0;
}

/* The self-signed root: O=<trust domain>, like istiod's. */
static X509 *make_root(EVP_PKEY *key, const char *td, int64_t ttl_s)
{
    X509 *x = X509_new();
    X509_NAME *name = X509_NAME_new();
    time_t now = time(NULL);

    if (x == NULL || name == NULL || !X509_set_version(x, X509_VERSION_3) ||
        !set_serial(x) ||
        !X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                    (const uint8_t *)td, -1, -1, 0) ||
        !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                    (const uint8_t *)"strait root CA", -1, -1,
                                    0) ||
        !X509_set_subject_name(x, name) || !X509_set_issuer_name(x, name) ||
        !X509_time_adj_ex(X509_getm_notBefore(x), 0, 0, &now) ||
        !X509_time_adj_ex(X509_getm_notAfter(x), (int)(ttl_s / 86400),
                          (long)(ttl_s % 86400), &now) ||
        !X509_set_pubkey(x, key) ||
        !add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE") ||
        !add_ext(x, x, NID_key_usage,
                 "critical,digitalSignature,keyCertSign,cRLSign") ||
        !add_ext(x, x, NID_subject_key_identifier, "hash") || !sign(x, key)) {
        X509_free(x);
        x = NULL;
    }
    X509_NAME_free(name);
    return x;
}

static int create_root(const struct ca_conf *conf, char **err)
{
    EVP_PKEY *key = pki_key_new(conf->key_type);
    X509 *root = NULL;
    struct buf kb, cb;
    int rc = -1;

    buf_init(&kb, PKI_MAX_FILE);
    buf_init(&cb, PKI_MAX_FILE);
    if (pki_mkdirs(conf->dir, err) < 0)
        goto done;
    root = key ? make_root(key, conf->trust_domain, conf->root_ttl_s) : NULL;
    if (root == NULL || pki_key_pem(key, &kb) < 0 ||
        pki_cert_pem(root, &cb) < 0) {
        err_set(err, "%s: cannot create a root certificate", conf->dir);
        goto done;
    }
    {
        /* The four files go in as one set (fileset.h): a crash at any
         * point leaves no layout or the whole new one, never a partial
         * one that would stop every later start. */
        const struct fileset_file files[4] = {
            {layout_files[0], buf_ptr(&cb), buf_len(&cb), 0644},
            {layout_files[1], buf_ptr(&kb), buf_len(&kb), 0600},
            {layout_files[2], buf_ptr(&cb), buf_len(&cb), 0644},
            {layout_files[3], buf_ptr(&cb), buf_len(&cb), 0644},
        };
        if (fileset_write(conf->dir, files, 4, err) < 0)
            goto done;
    }
    rc = 0;
done:
    /* kb held the private key in PEM. */
    if (buf_len(&kb) > 0)
        OPENSSL_cleanse((void *)buf_ptr(&kb), buf_len(&kb));
    buf_dispose(&kb);
    buf_dispose(&cb);
    X509_free(root);
    EVP_PKEY_free(key);
    return rc;
}

/* Which of the four files exist: a bit per file. */
static int present(const char *dir)
{
    int mask = 0;

    for (int i = 0; i < 4; i++) {
        char *p = path_join(dir, layout_files[i]);
        struct stat st;
        if (p != NULL && stat(p, &st) == 0)
            mask |= 1 << i;
        free(p);
    }
    return mask;
}

static char *read_in(const char *dir, const char *name, size_t *n, char **err)
{
    char *p = path_join(dir, name);
    char *data = p ? pki_read_file(p, n, err) : NULL;

    free(p);
    return data;
}

static STACK_OF(X509) * certs_in(const char *dir, const char *name, char **err)
{
    size_t n;
    char *what = path_join(dir, name);
    char *data = read_in(dir, name, &n, err);
    STACK_OF(X509) *sk = NULL;

    if (data != NULL && what != NULL)
        sk = pki_certs_parse(data, n, what, err);
    free(data);
    free(what);
    return sk;
}

/* Verifies ca->cert up to one of ca->roots and keeps the verified chain. */
static int verify_chain(struct ca *ca, STACK_OF(X509) * untrusted,
                        const char *dir, char **err)
{
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    int rc = -1;

    if (store == NULL || ctx == NULL)
        goto done;
    for (size_t i = 0; i < sk_X509_num(ca->roots); i++)
        X509_STORE_add_cert(store, sk_X509_value(ca->roots, i));
    if (!X509_STORE_CTX_init(ctx, store, ca->cert, untrusted))
        goto done;
    if (X509_verify_cert(ctx) != 1) {
        int e = X509_STORE_CTX_get_error(ctx);
        err_set(err,
                "%s/ca-cert.pem does not chain to %s/root-cert.pem through "
                "cert-chain.pem: %s",
                dir, dir, X509_verify_cert_error_string(e));
        goto done;
    }
    ca->chain = X509_STORE_CTX_get1_chain(ctx);
    if (ca->chain == NULL || sk_X509_num(ca->chain) == 0)
        goto done;
    ca->root = sk_X509_value(ca->chain, sk_X509_num(ca->chain) - 1);
    pki_spki_sha256(ca->root, ca->pin);
    rc = 0;
done:
    ERR_clear_error();
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    return rc;
}

static int load(struct ca *ca, const char *dir, char **err)
{
    STACK_OF(X509) *certs = NULL, *chain = NULL;
    char *data = NULL, *what = NULL;
    size_t n;
    int rc = -1;
    int64_t now = (int64_t)time(NULL);

    certs = certs_in(dir, "ca-cert.pem", err);
    if (certs == NULL)
        goto done;
    ca->cert = sk_X509_shift(certs);
    data = read_in(dir, "ca-key.pem", &n, err);
    what = path_join(dir, "ca-key.pem");
    if (data == NULL || what == NULL)
        goto done;
    ca->key = pki_key_parse(data, n, what, err);
    OPENSSL_cleanse(data, n);
    if (ca->key == NULL)
        goto done;
    if (!X509_check_private_key(ca->cert, ca->key)) {
        ERR_clear_error();
        err_set(err, "%s/ca-key.pem does not match %s/ca-cert.pem", dir, dir);
        goto done;
    }
    if (!pki_is_ca(ca->cert)) {
        err_set(err,
                "%s/ca-cert.pem is not a CA certificate (basicConstraints "
                "CA:TRUE is missing)",
                dir);
        goto done;
    }
    if (pki_time(X509_get0_notAfter(ca->cert)) <= now ||
        pki_time(X509_get0_notBefore(ca->cert)) > now) {
        err_set(err, "%s/ca-cert.pem is outside its validity period", dir);
        goto done;
    }
    ca->roots = certs_in(dir, "root-cert.pem", err);
    if (ca->roots == NULL)
        goto done;
    chain = certs_in(dir, "cert-chain.pem", err);
    if (chain == NULL)
        goto done;
    rc = verify_chain(ca, chain, dir, err);
done:
    sk_X509_pop_free(certs, X509_free);
    sk_X509_pop_free(chain, X509_free);
    free(data);
    free(what);
    return rc;
}

struct ca *ca_open(const struct ca_conf *conf, int create, char **err)
{
    struct ca *ca = calloc(1, sizeof(*ca));
    const char *dir = ca_layout_dir(conf);
    int mask;

    *err = NULL;
    if (ca == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    ca->dir = strdup(conf->dir);
    ca->trust_domain = strdup(conf->trust_domain);
    ca->intermediate = dir != conf->dir;
    ca->default_ttl_s = conf->default_ttl_s;
    ca->max_ttl_s = conf->max_ttl_s;
    if (ca->dir == NULL || ca->trust_domain == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    /* A root creation interrupted by a crash is finished or undone. A
     * plugged-in directory is the operator's and is never written. */
    if (!ca->intermediate && fileset_recover(conf->dir, err) < 0)
        goto fail;
    mask = present(dir);
    if (mask == 0 && !ca->intermediate && create) {
        if (create_root(conf, err) < 0)
            goto fail;
        mask = present(dir);
    }
    if (mask != 15) {
        struct buf b;
        buf_init(&b, 4096);
        for (int i = 0; i < 4; i++)
            if (!(mask & (1 << i)))
                buf_printf(&b, "%s%s", buf_len(&b) ? ", " : "",
                           layout_files[i]);
        err_set(err,
                "%s: %s CA layout (ca-cert.pem, ca-key.pem, root-cert.pem, "
                "cert-chain.pem): missing %s%s",
                dir, mask ? "incomplete" : "no", buf_cstr(&b),
                mask == 0 && !ca->intermediate ? " (run 'strait ca init')"
                                               : "");
        buf_dispose(&b);
        goto fail;
    }
    if (load(ca, dir, err) < 0)
        goto fail;
    return ca;
fail:
    ca_free(ca);
    return NULL;
}

X509 *ca_issue(const struct ca *ca, EVP_PKEY *pub, const char *spiffe_id,
               int64_t ttl_s, char **err)
{
    return ca_issue_dns(ca, pub, spiffe_id, NULL, 0, ttl_s, err);
}

X509 *ca_issue_dns(const struct ca *ca, EVP_PKEY *pub, const char *spiffe_id,
                   const char *const *dns, size_t ndns, int64_t ttl_s,
                   char **err)
{
    X509 *x = X509_new();
    X509_NAME *empty = X509_NAME_new();
    time_t now = time(NULL);
    int64_t ca_end = pki_time(X509_get0_notAfter(ca->cert));

    *err = NULL;
    if (ttl_s <= 0)
        ttl_s = ca->default_ttl_s;
    if (ttl_s > ca->max_ttl_s)
        ttl_s = ca->max_ttl_s;
    if ((int64_t)now + ttl_s > ca_end)
        ttl_s = ca_end - (int64_t)now;
    if (ttl_s <= 0) {
        err_set(err, "the CA certificate has expired");
        goto fail;
    }
    /* No subject, like Istio's workload certificates: the identity is the
     * SAN, which is therefore critical (RFC 5280 section 4.2.1.6). */
    if (x == NULL || empty == NULL || !X509_set_version(x, X509_VERSION_3) ||
        !set_serial(x) ||
        !X509_set_issuer_name(x, X509_get_subject_name(ca->cert)) ||
        !X509_set_subject_name(x, empty) ||
        !X509_time_adj_ex(X509_getm_notBefore(x), 0, 0, &now) ||
        !X509_time_adj_ex(X509_getm_notAfter(x), (int)(ttl_s / 86400),
                          (long)(ttl_s % 86400), &now) ||
        !X509_set_pubkey(x, pub) ||
        !add_ext(x, ca->cert, NID_basic_constraints, "critical,CA:FALSE") ||
        !add_ext(x, ca->cert, NID_key_usage,
                 "critical,digitalSignature,keyEncipherment") ||
        !add_ext(x, ca->cert, NID_ext_key_usage, "serverAuth,clientAuth") ||
        (X509_get0_subject_key_id(ca->cert) != NULL &&
         !add_ext(x, ca->cert, NID_authority_key_identifier, "keyid")) ||
        !add_sans(x, spiffe_id, dns, ndns) || !sign(x, ca->key)) {
        char detail[160];
        err_set(err, "cannot issue a certificate: %s",
                pki_ssl_error(detail, sizeof(detail)));
        goto fail;
    }
    X509_NAME_free(empty);
    return x;
fail:
    X509_NAME_free(empty);
    X509_free(x);
    return NULL;
}

int ca_chain_pem(const struct ca *ca, X509 *leaf, struct buf *out)
{
    if (leaf != NULL && pki_cert_pem(leaf, out) < 0)
        return -1;
    for (size_t i = 0; i < sk_X509_num(ca->chain); i++)
        if (pki_cert_pem(sk_X509_value(ca->chain, i), out) < 0)
            return -1;
    return 0;
}

void ca_pin_hex(const struct ca *ca, char out[72])
{
    memcpy(out, "sha256:", 7);
    pki_hex(ca->pin, 32, out + 7);
}
