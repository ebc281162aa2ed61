/*
 * Certificate revocation lists: reading a CRL file, the checks it must
 * pass before it replaces anything, and the verify-callback rule that
 * limits revocation checking to the issuers the file covers.
 */
#include "config.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/mem.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/err.h"
#include "tls/crl.h"

/* BoringSSL's reason for the last failure, or "invalid". */
static const char *ssl_detail(char *buf, size_t n)
{
    uint32_t e = ERR_peek_last_error();

    if (e == 0)
        snprintf(buf, n, "invalid");
    else
        ERR_error_string_n(e, buf, n);
    ERR_clear_error();
    return buf;
}

STACK_OF(X509_CRL) * crl_parse(const uint8_t *data, size_t len, char **err)
{
    STACK_OF(X509_CRL) *out = NULL;
    BIO *bio = NULL;
    char detail[256];

    *err = NULL;
    if (len > CRL_MAX_FILE) {
        err_set(err, "larger than %u bytes", CRL_MAX_FILE);
        return NULL;
    }
    out = sk_X509_CRL_new_null();
    bio = BIO_new_mem_buf(data, (int)len);
    if (out == NULL || bio == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    for (size_t block = 1;; block++) {
        char *name = NULL, *header = NULL;
        uint8_t *der = NULL;
        long dlen = 0;
        const uint8_t *p;
        X509_CRL *crl;

        if (!PEM_read_bio(bio, &name, &header, &der, &dlen)) {
            uint32_t e = ERR_peek_last_error();
            /* No further BEGIN line: the end of the file. */
            if (ERR_GET_LIB(e) == ERR_LIB_PEM &&
                ERR_GET_REASON(e) == PEM_R_NO_START_LINE) {
                ERR_clear_error();
                break;
            }
            err_set(err, "PEM block %zu is malformed: %s", block,
                    ssl_detail(detail, sizeof(detail)));
            goto fail;
        }
        if (strcmp(name, "X509 CRL") != 0) {
            err_set(err,
                    "PEM block %zu is a %.64s, not an X509 CRL (a CRL file "
                    "holds only \"-----BEGIN X509 CRL-----\" blocks)",
                    block, name);
            OPENSSL_free(name);
            OPENSSL_free(header);
            OPENSSL_free(der);
            goto fail;
        }
        p = der;
        crl = dlen > 0 ? d2i_X509_CRL(NULL, &p, dlen) : NULL;
        /* Bytes after the CRL inside its block are not a CRL either. */
        if (crl != NULL && p != der + dlen) {
            X509_CRL_free(crl);
            crl = NULL;
        }
        OPENSSL_free(name);
        OPENSSL_free(header);
        OPENSSL_free(der);
        if (crl == NULL) {
            err_set(err, "CRL %zu cannot be parsed: %s", block,
                    ssl_detail(detail, sizeof(detail)));
            goto fail;
        }
        if (!sk_X509_CRL_push(out, crl)) {
            X509_CRL_free(crl);
            err_set(err, "out of memory");
            goto fail;
        }
    }
    if (sk_X509_CRL_num(out) == 0) {
        err_set(err, "no CRL in the file (PEM \"-----BEGIN X509 CRL-----\" "
                     "blocks expected)");
        goto fail;
    }
    BIO_free(bio);
    return out;
fail:
    BIO_free(bio);
    sk_X509_CRL_pop_free(out, X509_CRL_free);
    return NULL;
}

static const char *name_text(const X509_NAME *n, char *buf, size_t len)
{
    if (X509_NAME_oneline(n, buf, (int)len) == NULL)
        snprintf(buf, len, "(unprintable name)");
    return buf;
}

static const char *time_text(const ASN1_TIME *t, char *buf, size_t len)
{
    BIO *b = BIO_new(BIO_s_mem());
    const uint8_t *p;
    size_t n = 0;

    snprintf(buf, len, "(unprintable time)");
    if (b != NULL && ASN1_TIME_print(b, t) && BIO_mem_contents(b, &p, &n)) {
        if (n >= len)
            n = len - 1;
        memcpy(buf, p, n);
        buf[n] = '\0';
    }
    BIO_free(b);
    ERR_clear_error();
    return buf;
}

/* The CRL's issuer among the CA certificates of store: 0 when none has
 * its name (nothing to check here), 1 when one signed it and may sign
 * CRLs, -1 with *err otherwise. */
static int issuer_check(X509_CRL *crl, size_t index, X509_STORE *store,
                        char **err)
{
    STACK_OF(X509_OBJECT) *objs = X509_STORE_get0_objects(store);
    const X509_NAME *issuer = X509_CRL_get_issuer(crl);
    int named = 0, signed_by = 0, may_sign = 0;
    char nb[256];

    for (size_t i = 0; objs != NULL && i < sk_X509_OBJECT_num(objs); i++) {
        X509_OBJECT *o = sk_X509_OBJECT_value(objs, i);
        X509 *ca;
        EVP_PKEY *key;

        if (X509_OBJECT_get_type(o) != X509_LU_X509)
            continue;
        ca = X509_OBJECT_get0_X509(o);
        if (X509_NAME_cmp(X509_get_subject_name(ca), issuer) != 0)
            continue;
        named = 1;
        key = X509_get_pubkey(ca);
        if (key != NULL && X509_CRL_verify(crl, key) == 1) {
            signed_by = 1;
            /* UINT32_MAX when the CA has no keyUsage: any use. */
            if (X509_get_key_usage(ca) & KU_CRL_SIGN)
                may_sign = 1;
        }
        EVP_PKEY_free(key);
        ERR_clear_error();
    }
    if (!named)
        return 0;
    if (!signed_by)
        return err_set(err,
                       "CRL %zu of %s is not signed by the CA certificate of "
                       "that name (a CRL from another key, or altered)",
                       index, name_text(issuer, nb, sizeof(nb)));
    if (!may_sign)
        return err_set(err,
                       "CRL %zu: the CA %s may not sign CRLs (its keyUsage "
                       "lacks cRLSign), so its CRL would refuse every "
                       "certificate it issued",
                       index, name_text(issuer, nb, sizeof(nb)));
    return 1;
}

int crl_check(STACK_OF(X509_CRL) * crls, X509_STORE *store, time_t now,
              char **err)
{
    size_t n = sk_X509_CRL_num(crls);
    char nb[256], tb[64];

    *err = NULL;
    for (size_t i = 0; i < n; i++) {
        X509_CRL *crl = sk_X509_CRL_value(crls, i);
        const ASN1_TIME *last = X509_CRL_get0_lastUpdate(crl);
        const ASN1_TIME *next = X509_CRL_get0_nextUpdate(crl);
        int cmp;

        if (last == NULL || X509_cmp_time(last, &now) == 0)
            return err_set(err, "CRL %zu of %s has a malformed lastUpdate",
                           i + 1,
                           name_text(X509_CRL_get_issuer(crl), nb, sizeof(nb)));
        if (next == NULL)
            continue;
        cmp = X509_cmp_time(next, &now);
        if (cmp == 0)
            return err_set(err, "CRL %zu of %s has a malformed nextUpdate",
                           i + 1,
                           name_text(X509_CRL_get_issuer(crl), nb, sizeof(nb)));
        if (cmp > 0)
            continue;
        /* Past its nextUpdate: fine only if a current CRL of the same
         * issuer is in the file too (BoringSSL then uses that one). */
        int current = 0;
        for (size_t j = 0; j < n && !current; j++) {
            X509_CRL *o = sk_X509_CRL_value(crls, j);
            const ASN1_TIME *on = X509_CRL_get0_nextUpdate(o);
            if (j != i &&
                X509_NAME_cmp(X509_CRL_get_issuer(o),
                              X509_CRL_get_issuer(crl)) == 0 &&
                (on == NULL || X509_cmp_time(on, &now) > 0))
                current = 1;
        }
        if (!current)
            return err_set(err,
                           "the CRL of %s expired at %s (its nextUpdate): "
                           "certificates it covers would all be refused; "
                           "publish a current CRL",
                           name_text(X509_CRL_get_issuer(crl), nb, sizeof(nb)),
                           time_text(next, tb, sizeof(tb)));
    }
    for (size_t i = 0; store != NULL && i < n; i++)
        if (issuer_check(sk_X509_CRL_value(crls, i), i + 1, store, err) < 0)
            return -1;
    return 0;
}

int crl_read_file(const char *path, uint8_t **out, size_t *len, char **err)
{
    /* O_NONBLOCK: a FIFO or a device named as a CRL must not block the
     * control thread in open(); it is refused as not a regular file. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    uint8_t *buf = NULL;
    size_t got = 0;

    *out = NULL;
    *len = 0;
    if (fd < 0) {
        err_set(err, "%s: cannot read the CRL file: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        err_set(err, "%s: the CRL file is not a regular file", path);
        goto bad;
    }
    if ((uint64_t)st.st_size > CRL_MAX_FILE) {
        err_set(err, "%s: the CRL file is larger than %u bytes", path,
                CRL_MAX_FILE);
        goto bad;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        err_set(err, "%s: out of memory", path);
        goto bad;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            err_set(err, "%s: cannot read the CRL file: %s", path,
                    strerror(errno));
            goto bad;
        }
        if (n == 0)
            break; /* shrank while we read: what is there is the file */
        got += (size_t)n;
    }
    close(fd);
    *out = buf;
    *len = got;
    return 0;
bad:
    free(buf);
    close(fd);
    return -2;
}

int crl_load(X509_STORE *store, const char *path, char **err)
{
    STACK_OF(X509_CRL) * crls;
    uint8_t *data;
    size_t len = 0;
    char *why = NULL;

    *err = NULL;
    if (crl_read_file(path, &data, &len, err) < 0)
        return -1;
    crls = crl_parse(data, len, &why);
    free(data);
    if (crls == NULL || crl_check(crls, store, time(NULL), &why) < 0) {
        err_set(err, "%s: %s", path, why ? why : "out of memory");
        free(why);
        sk_X509_CRL_pop_free(crls, X509_CRL_free);
        return -1;
    }
    for (size_t i = 0; i < sk_X509_CRL_num(crls); i++) {
        if (X509_STORE_add_crl(store, sk_X509_CRL_value(crls, i)))
            continue;
        /* The same CRL twice in the file is harmless. */
        uint32_t e = ERR_peek_last_error();
        ERR_clear_error();
        if (ERR_GET_LIB(e) == ERR_LIB_X509 &&
            ERR_GET_REASON(e) == X509_R_CERT_ALREADY_IN_HASH_TABLE)
            continue;
        err_set(err, "%s: cannot add CRL %zu to the trust store", path, i + 1);
        sk_X509_CRL_pop_free(crls, X509_CRL_free);
        return -1;
    }
    sk_X509_CRL_pop_free(crls, X509_CRL_free);
    /* The whole chain: a CRL that revokes an intermediate is honoured
     * too. Issuers without a CRL are let through by crl_verify_cb(). */
    X509_STORE_set_flags(store,
                         X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
    return 0;
}

int crl_verify_cb(int ok, X509_STORE_CTX *xs)
{
    STACK_OF(X509_CRL) * crls;
    X509 *x;
    int none;

    if (ok || X509_STORE_CTX_get_error(xs) != X509_V_ERR_UNABLE_TO_GET_CRL)
        return ok;
    x = X509_STORE_CTX_get_current_cert(xs);
    if (x == NULL)
        return ok;
    crls = X509_STORE_get1_crls(xs, X509_get_issuer_name(x));
    none = crls == NULL || sk_X509_CRL_num(crls) == 0;
    sk_X509_CRL_pop_free(crls, X509_CRL_free);
    if (!none)
        return 0;
    /* Cleared, so the verify result the connection reports stays OK. */
    X509_STORE_CTX_set_error(xs, X509_V_OK);
    return 1;
}
