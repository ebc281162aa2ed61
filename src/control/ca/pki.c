/*
 * X.509 helpers on BoringSSL for the CA. Everything here works on memory
 * or on one file at a time; the CA, the CSR parser and the join client
 * build on it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <openssl/mem.h>
#include <openssl/bn.h>
#include <openssl/bytestring.h>
#include <openssl/ec_key.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/nid.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control/ca/pki.h"
#include "core/buf.h"
#include "core/err.h"

EVP_PKEY *pki_key_new(enum pki_key_type type)
{
    EVP_PKEY *pk = EVP_PKEY_new();

    if (pk == NULL)
        return NULL;
    if (type == PKI_KEY_RSA) {
        RSA *rsa = RSA_new();
        BIGNUM *e = BN_new();
        if (rsa == NULL || e == NULL || !BN_set_word(e, RSA_F4) ||
            !RSA_generate_key_ex(rsa, 2048, e, NULL) ||
            !EVP_PKEY_assign_RSA(pk, rsa)) {
            RSA_free(rsa);
            BN_free(e);
            goto fail;
        }
        BN_free(e);
        return pk;
    }
    EC_KEY *ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
    if (ec == NULL || !EC_KEY_generate_key(ec) ||
        !EVP_PKEY_assign_EC_KEY(pk, ec)) {
        EC_KEY_free(ec);
        goto fail;
    }
    return pk;
fail:
    EVP_PKEY_free(pk);
    return NULL;
}

int pki_write_private(const char *path, const void *data, size_t n, char **err)
{
    char *tmp = NULL;
    uint8_t rnd[8];
    char hex[17];
    const char *p = data;
    int fd = -1;

    RAND_bytes(rnd, sizeof(rnd));
    pki_hex(rnd, sizeof(rnd), hex);
    if (asprintf(&tmp, "%s.%s.tmp", path, hex) < 0) {
        tmp = NULL;
        err_set(err, "%s: %s", path, "out of memory");
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        err_set(err, "%s: cannot create: %s", tmp, strerror(errno));
        goto fail;
    }
    /* open() applies the umask, which can only narrow 0600; fchmod makes
     * the mode exact whatever the umask. */
    if (fchmod(fd, 0600) < 0) {
        err_set(err, "%s: chmod: %s", tmp, strerror(errno));
        goto fail;
    }
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            err_set(err, "%s: write: %s", tmp, strerror(errno));
            goto fail;
        }
        p += w;
        n -= (size_t)w;
    }
    if (fsync(fd) < 0 || close(fd) < 0) {
        fd = -1;
        err_set(err, "%s: sync: %s", tmp, strerror(errno));
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) < 0) {
        err_set(err, "%s: rename: %s", path, strerror(errno));
        goto fail;
    }
    free(tmp);
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    free(tmp);
    return -1;
}

int pki_mkdirs(const char *dir, char **err)
{
    char *p = strdup(dir);

    if (p == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q != '\0')
            continue;
        char c = *q;
        *q = '\0';
        if (mkdir(p, 0700) < 0 && errno != EEXIST) {
            err_set(err, "%s: cannot create: %s", p, strerror(errno));
            free(p);
            return -1;
        }
        *q = c;
        if (c == '\0')
            break;
    }
    free(p);
    return 0;
}

char *pki_read_file(const char *path, size_t *n, char **err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    char *data = NULL;
    size_t got = 0;

    if (fd < 0) {
        err_set(err, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
        st.st_size > PKI_MAX_FILE) {
        err_set(err, "%s: %s", path, "not a regular file of at most 256 KiB");
        close(fd);
        return NULL;
    }
    data = malloc((size_t)st.st_size + 1);
    if (data == NULL) {
        close(fd);
        err_set(err, "%s: %s", path, "out of memory");
        return NULL;
    }
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, data + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            err_set(err, "%s: cannot read: %s", path, strerror(errno));
            free(data);
            close(fd);
            return NULL;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    data[got] = '\0';
    *n = got;
    return data;
}

const char *pki_ssl_error(char *out, size_t n)
{
    uint32_t e = ERR_peek_last_error();

    if (e == 0)
        snprintf(out, n, "unknown error");
    else
        ERR_error_string_n(e, out, n);
    ERR_clear_error();
    return out;
}

STACK_OF(X509) *
    pki_certs_parse(const char *pem, size_t n, const char *what, char **err)
{
    BIO *bio;
    STACK_OF(X509) *sk = sk_X509_new_null();
    X509 *x;
    uint32_t e;

    if (n > INT32_MAX || sk == NULL) {
        sk_X509_free(sk);
        err_set(err, "%s: %s", what, "too large");
        return NULL;
    }
    bio = BIO_new_mem_buf(pem, (int)n);
    if (bio == NULL) {
        sk_X509_free(sk);
        return NULL;
    }
    ERR_clear_error();
    while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
        if (!sk_X509_push(sk, x)) {
            X509_free(x);
            break;
        }
    }
    BIO_free(bio);
    /* The loop ends at the first block it cannot read: only "no more
     * PEM blocks" is a clean end. */
    e = ERR_peek_last_error();
    if (sk_X509_num(sk) == 0 || !(ERR_GET_LIB(e) == ERR_LIB_PEM &&
                                  ERR_GET_REASON(e) == PEM_R_NO_START_LINE)) {
        char detail[160];
        if (sk_X509_num(sk) == 0 && ERR_GET_LIB(e) == ERR_LIB_PEM &&
            ERR_GET_REASON(e) == PEM_R_NO_START_LINE)
            snprintf(detail, sizeof(detail), "no PEM certificate found");
        else
            pki_ssl_error(detail, sizeof(detail));
        err_set(err, "%s: not a valid PEM certificate list: %s", what, detail);
        sk_X509_pop_free(sk, X509_free);
        ERR_clear_error();
        return NULL;
    }
    ERR_clear_error();
    return sk;
}

/* Encrypted keys are refused: a daemon has nobody to ask for a password. */
static int no_password(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return -1;
}

EVP_PKEY *pki_key_parse(const char *pem, size_t n, const char *what, char **err)
{
    BIO *bio;
    EVP_PKEY *k;
    char detail[160];

    if (n > INT32_MAX)
        return NULL;
    bio = BIO_new_mem_buf(pem, (int)n);
    if (bio == NULL)
        return NULL;
    ERR_clear_error();
    k = PEM_read_bio_PrivateKey(bio, NULL, no_password, NULL);
    BIO_free(bio);
    if (k == NULL) {
        /* The detail names the failing step, never the key's bytes. */
        err_set(err, "%s: not a readable PEM private key (%s)", what,
                pki_ssl_error(detail, sizeof(detail)));
        return NULL;
    }
    if (EVP_PKEY_id(k) != EVP_PKEY_EC && EVP_PKEY_id(k) != EVP_PKEY_RSA) {
        err_set(err, "%s: %s", what, "only ECDSA and RSA keys are supported");
        EVP_PKEY_free(k);
        return NULL;
    }
    return k;
}

static int bio_to_buf(BIO *bio, struct buf *b)
{
    const uint8_t *p;
    size_t n;
    int rc;

    if (!BIO_mem_contents(bio, &p, &n))
        return -1;
    rc = buf_append(b, p, n);
    return rc;
}

int pki_cert_pem(X509 *x, struct buf *b)
{
    BIO *bio = BIO_new(BIO_s_mem());
    int rc = -1;

    if (bio != NULL && PEM_write_bio_X509(bio, x))
        rc = bio_to_buf(bio, b);
    BIO_free(bio);
    return rc;
}

int pki_key_pem(EVP_PKEY *k, struct buf *b)
{
    BIO *bio = BIO_new(BIO_s_mem());
    int rc = -1;

    if (bio != NULL &&
        PEM_write_bio_PrivateKey(bio, k, NULL, NULL, 0, NULL, NULL))
        rc = bio_to_buf(bio, b);
    /* The memory BIO held the key: wipe it before it is freed. */
    if (bio != NULL) {
        const uint8_t *p;
        size_t n;
        if (BIO_mem_contents(bio, &p, &n))
            OPENSSL_cleanse((void *)p, n);
    }
    BIO_free(bio);
    return rc;
}

void pki_spki_sha256(const X509 *x, uint8_t out[32])
{
    X509_PUBKEY *pk = X509_get_X509_PUBKEY(x);
    uint8_t *der = NULL;
    int n = pk ? i2d_X509_PUBKEY(pk, &der) : -1;

    if (n <= 0) {
        memset(out, 0, 32);
        return;
    }
    SHA256(der, (size_t)n, out);
    OPENSSL_free(der);
}

void pki_key_spki_sha256(const EVP_PKEY *k, uint8_t out[32])
{
    uint8_t *der = NULL;
    int n = k ? i2d_PUBKEY((EVP_PKEY *)k, &der) : -1;

    if (n <= 0) {
        memset(out, 0, 32);
        return;
    }
    SHA256(der, (size_t)n, out);
    OPENSSL_free(der);
}

char *pki_spiffe_id(const X509 *x)
{
    GENERAL_NAMES *names =
        X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    char *out = NULL;

    if (names == NULL)
        return NULL;
    for (size_t i = 0; i < sk_GENERAL_NAME_num(names) && out == NULL; i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
        const unsigned char *p;
        int len;

        if (g->type != GEN_URI)
            continue;
        p = ASN1_STRING_get0_data(g->d.uniformResourceIdentifier);
        len = ASN1_STRING_length(g->d.uniformResourceIdentifier);
        if (len > 9 && len < 2048 && memcmp(p, "spiffe://", 9) == 0 &&
            memchr(p, '\0', (size_t)len) == NULL)
            out = strndup((const char *)p, (size_t)len);
    }
    GENERAL_NAMES_free(names);
    return out;
}

int pki_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;

    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && !((c == '-' || c == '.') && i > 0 && i + 1 < n))
            return 0;
    }
    return 1;
}

char *pki_spiffe_make(const char *td, const char *ns, const char *sa)
{
    char *s = NULL;

    if (asprintf(&s, "spiffe://%s/ns/%s/sa/%s", td, ns, sa) < 0)
        return NULL;
    return s;
}

int pki_spiffe_split(const char *id, char **td, char **ns, char **sa)
{
    const char *p, *t_end, *n_end;
    char *t = NULL, *n = NULL, *a = NULL;

    if (id == NULL || strncmp(id, "spiffe://", 9) != 0)
        return -1;
    p = id + 9;
    t_end = strchr(p, '/');
    if (t_end == NULL || strncmp(t_end, "/ns/", 4) != 0)
        return -1;
    n_end = strstr(t_end + 4, "/sa/");
    if (n_end == NULL)
        return -1;
    t = strndup(p, (size_t)(t_end - p));
    n = strndup(t_end + 4, (size_t)(n_end - (t_end + 4)));
    a = strdup(n_end + 4);
    if (t == NULL || n == NULL || a == NULL || !pki_name_ok(t) ||
        !pki_name_ok(n) || !pki_name_ok(a)) {
        free(t);
        free(n);
        free(a);
        return -1;
    }
    if (td)
        *td = t;
    else
        free(t);
    if (ns)
        *ns = n;
    else
        free(n);
    if (sa)
        *sa = a;
    else
        free(a);
    return 0;
}

int64_t pki_time(const ASN1_TIME *t)
{
    ASN1_TIME *epoch = ASN1_TIME_set(NULL, 0);
    int days = 0, secs = 0;
    int ok = epoch && ASN1_TIME_diff(&days, &secs, epoch, t);

    ASN1_TIME_free(epoch);
    if (!ok)
        return 0;
    return (int64_t)days * 86400 + secs;
}

int pki_is_ca(X509 *x)
{
    BASIC_CONSTRAINTS *bc =
        X509_get_ext_d2i(x, NID_basic_constraints, NULL, NULL);
    int ca = bc != NULL && bc->ca;

    BASIC_CONSTRAINTS_free(bc);
    return ca;
}

void pki_hex(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static const char b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t pki_b64url_encode(const uint8_t *p, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;

    for (size_t i = 0; i < n; i++) {
        acc = (acc << 8) | p[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            if (o + 1 < cap)
                out[o] = b64url[(acc >> bits) & 63];
            o++;
        }
    }
    if (bits > 0) {
        if (o + 1 < cap)
            out[o] = b64url[(acc << (6 - bits)) & 63];
        o++;
    }
    if (cap > 0)
        out[o < cap ? o : cap - 1] = '\0';
    return o;
}

ssize_t pki_b64url_decode(const char *s, size_t n, uint8_t *out, size_t cap)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;

    /* One leftover character carries fewer than 8 bits: not a length any
     * encoder produces. */
    if (n % 4 == 1)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const char *d = s[i] ? memchr(b64url, s[i], 64) : NULL;
        if (d == NULL)
            return -1;
        acc = (acc << 6) | (uint32_t)(d - b64url);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o >= cap)
                return -1;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    /* The unused low bits of the last character must be zero, so each
     * byte string has exactly one encoding. */
    if (bits > 0 && (acc & ((1u << bits) - 1)) != 0)
        return -1;
    return (ssize_t)o;
}
