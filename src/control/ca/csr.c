/*
 * Certificate signing requests: parsed strictly for the CA, made simply
 * for the join client.
 */
#include "config.h"

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/ec_key.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/nid.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>

#include "control/ca/csr.h"
#include "core/buf.h"

static int key_ok(EVP_PKEY *k, const char **why)
{
    if (EVP_PKEY_id(k) == EVP_PKEY_EC) {
        const EC_KEY *ec = EVP_PKEY_get0_EC_KEY(k);
        const EC_GROUP *g = ec ? EC_KEY_get0_group(ec) : NULL;
        int nid = g ? EC_GROUP_get_curve_name(g) : NID_undef;
        if (nid == NID_X9_62_prime256v1 || nid == NID_secp384r1)
            return 0;
        *why = "CSR key: only the P-256 and P-384 curves are accepted";
        return -1;
    }
    if (EVP_PKEY_id(k) == EVP_PKEY_RSA) {
        unsigned bits = EVP_PKEY_bits(k);
        if (bits >= 2048 && bits <= 4096)
            return 0;
        *why = "CSR key: RSA keys must have 2048 to 4096 bits";
        return -1;
    }
    *why = "CSR key: only ECDSA and RSA keys are accepted";
    return -1;
}

EVP_PKEY *csr_parse(const char *pem, size_t n, const char **why)
{
    BIO *bio = NULL;
    X509_REQ *req = NULL, *extra = NULL;
    EVP_PKEY *k = NULL;

    *why = "not a PEM certificate request";
    if (n == 0) {
        *why = "empty CSR";
        return NULL;
    }
    if (n > CSR_MAX_PEM) {
        *why = "CSR too large";
        return NULL;
    }
    bio = BIO_new_mem_buf(pem, (int)n);
    if (bio == NULL)
        goto fail;
    req = PEM_read_bio_X509_REQ(bio, NULL, NULL, NULL);
    if (req == NULL)
        goto fail;
    extra = PEM_read_bio_X509_REQ(bio, NULL, NULL, NULL);
    if (extra != NULL) {
        *why = "more than one certificate request";
        goto fail;
    }
    k = X509_REQ_get_pubkey(req);
    if (k == NULL) {
        *why = "CSR has no readable public key";
        goto fail;
    }
    if (key_ok(k, why) < 0)
        goto fail;
    if (X509_REQ_verify(req, k) != 1) {
        *why = "CSR signature does not verify";
        goto fail;
    }
    X509_REQ_free(req);
    BIO_free(bio);
    ERR_clear_error();
    return k;
fail:
    EVP_PKEY_free(k);
    X509_REQ_free(extra);
    X509_REQ_free(req);
    BIO_free(bio);
    ERR_clear_error();
    return NULL;
}

/* Adds a subjectAltName extension of one URI to req. */
static int add_uri_san(X509_REQ *req, const char *uri)
{
    STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
    GENERAL_NAMES *names = GENERAL_NAMES_new();
    GENERAL_NAME *gn = GENERAL_NAME_new();
    ASN1_IA5STRING *ia5 = ASN1_IA5STRING_new();
    X509_EXTENSION *ext = NULL;
    int ok = 0;

    if (exts == NULL || names == NULL || gn == NULL || ia5 == NULL ||
        !ASN1_STRING_set(ia5, uri, (int)strlen(uri)))
        goto done;
    GENERAL_NAME_set0_value(gn, GEN_URI, ia5);
    ia5 = NULL;
    if (!sk_GENERAL_NAME_push(names, gn))
        goto done;
    gn = NULL;
    ext = X509V3_EXT_i2d(NID_subject_alt_name, 1, names);
    ok = ext != NULL && sk_X509_EXTENSION_push(exts, ext) &&
         X509_REQ_add_extensions(req, exts);
    if (ok)
        ext = NULL; /* the stack owns it */
done:
    X509_EXTENSION_free(ext);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    GENERAL_NAME_free(gn);
    GENERAL_NAMES_free(names);
    ASN1_IA5STRING_free(ia5);
    return ok ? 0 : -1;
}

int csr_new(EVP_PKEY *key, const char *san_uri, struct buf *b)
{
    X509_REQ *req = X509_REQ_new();
    BIO *bio = BIO_new(BIO_s_mem());
    const uint8_t *p;
    size_t n;
    int rc = -1;

    if (req == NULL || bio == NULL || !X509_REQ_set_version(req, 0) ||
        !X509_REQ_set_pubkey(req, key) ||
        (san_uri != NULL && add_uri_san(req, san_uri) < 0) ||
        !X509_REQ_sign(req, key, EVP_sha256()) ||
        !PEM_write_bio_X509_REQ(bio, req) || !BIO_mem_contents(bio, &p, &n))
        goto done;
    rc = buf_append(b, p, n);
done:
    BIO_free(bio);
    X509_REQ_free(req);
    return rc;
}

char *csr_uri_sans(const char *pem, size_t n)
{
    BIO *bio = BIO_new_mem_buf(pem, n);
    X509_REQ *req = bio ? PEM_read_bio_X509_REQ(bio, NULL, NULL, NULL) : NULL;
    STACK_OF(X509_EXTENSION) *exts = req ? X509_REQ_get_extensions(req) : NULL;
    GENERAL_NAMES *names = NULL;
    struct buf b;
    char *out = NULL;

    buf_init(&b, CSR_MAX_PEM);
    for (size_t i = 0; exts != NULL && i < sk_X509_EXTENSION_num(exts); i++) {
        X509_EXTENSION *e = sk_X509_EXTENSION_value(exts, i);
        if (OBJ_obj2nid(X509_EXTENSION_get_object(e)) == NID_subject_alt_name)
            names = X509V3_EXT_d2i(e);
        if (names != NULL)
            break;
    }
    for (size_t i = 0; names != NULL && i < sk_GENERAL_NAME_num(names); i++) {
        const GENERAL_NAME *gn = sk_GENERAL_NAME_value(names, i);
        if (gn->type != GEN_URI)
            continue;
        if (buf_len(&b) > 0)
            buf_append(&b, ",", 1);
        buf_append(&b, ASN1_STRING_get0_data(gn->d.uniformResourceIdentifier),
                   (size_t)ASN1_STRING_length(gn->d.uniformResourceIdentifier));
    }
    if (buf_len(&b) > 0)
        out = strdup(buf_cstr(&b));
    buf_dispose(&b);
    GENERAL_NAMES_free(names);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    X509_REQ_free(req);
    BIO_free(bio);
    ERR_clear_error();
    return out;
}
