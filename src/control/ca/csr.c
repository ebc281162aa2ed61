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

int csr_new(EVP_PKEY *key, struct buf *b)
{
    X509_REQ *req = X509_REQ_new();
    BIO *bio = BIO_new(BIO_s_mem());
    const uint8_t *p;
    size_t n;
    int rc = -1;

    if (req == NULL || bio == NULL || !X509_REQ_set_version(req, 0) ||
        !X509_REQ_set_pubkey(req, key) ||
        !X509_REQ_sign(req, key, EVP_sha256()) ||
        !PEM_write_bio_X509_REQ(bio, req) || !BIO_mem_contents(bio, &p, &n))
        goto done;
    rc = buf_append(b, p, n);
done:
    BIO_free(bio);
    X509_REQ_free(req);
    return rc;
}
