/*
 * TLS as a conn transport: BoringSSL over the raw non-blocking socket, on
 * the worker's own loop. Want-read and want-write results become socket
 * interest through the conn's read_needs_write/write_needs_read flags.
 */
#include "config.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/stats.h"
#include "net/conn.h"
#include "tls/crl.h"
#include "tls/tls.h"

static const char *failure_reason(void)
{
    uint32_t e = ERR_peek_last_error();
    int lib = ERR_GET_LIB(e), reason = ERR_GET_REASON(e);

    ERR_clear_error();
    if (e == 0)
        return "eof";
    if (lib != ERR_LIB_SSL)
        return "other";
    switch (reason) {
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_NO_SUPPORTED_VERSIONS_ENABLED:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_HTTP_REQUEST:
        return "version";
    case SSL_R_NO_SHARED_CIPHER:
    case SSL_R_NO_SHARED_GROUP:
        return "cipher";
    case SSL_R_CERTIFICATE_VERIFY_FAILED:
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
        return "certificate";
    default:
        return "other";
    }
}

/* Maps an SSL result to the conn contract. */
static ssize_t result(struct conn *c, int rc, int is_read)
{
    int e = SSL_get_error(c->tls, rc);

    switch (e) {
    case SSL_ERROR_WANT_READ:
        if (is_read)
            c->read_needs_write = 0;
        else
            c->write_needs_read = 1;
        return CONN_AGAIN;
    case SSL_ERROR_WANT_WRITE:
        if (is_read)
            c->read_needs_write = 1;
        else
            c->write_needs_read = 0;
        return CONN_AGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0) {
            /* A FIN without close_notify: treat as the end of the stream,
             * as browsers and curl do. */
            ERR_clear_error();
            return is_read ? 0 : CONN_ERROR;
        }
        /* fall through */
    default:
        c->why = failure_reason();
        return CONN_ERROR;
    }
}

static ssize_t tls_read(struct conn *c, void *p, size_t n)
{
    int rc;

    if (n > INT32_MAX)
        n = INT32_MAX;
    rc = SSL_read(c->tls, p, (int)n);
    if (rc > 0) {
        c->read_needs_write = 0;
        return rc;
    }
    return result(c, rc, 1);
}

static ssize_t tls_write(struct conn *c, const void *p, size_t n)
{
    int rc;

    if (n == 0)
        return 0;
    /* Records of up to 16 KiB; partial writes are allowed (the mode is set
     * at setup), so a large n never stalls on one huge record. */
    if (n > INT32_MAX)
        n = INT32_MAX;
    rc = SSL_write(c->tls, p, (int)n);
    if (rc > 0) {
        c->write_needs_read = 0;
        return rc;
    }
    return result(c, rc, 0);
}

static int tls_handshake(struct conn *c)
{
    int rc = SSL_do_handshake(c->tls);
    ssize_t r;

    if (rc == 1) {
        c->read_needs_write = c->write_needs_read = 0;
        return 1;
    }
    r = result(c, rc, 1);
    if (r == CONN_AGAIN)
        return 0;
    if (r == 0)
        c->why = "eof";
    if (c->why == NULL)
        c->why = "other";
    return -1;
}

static void tls_shutdown(struct conn *c)
{
    /* One close_notify, without waiting for the peer's. */
    SSL_shutdown(c->tls);
    shutdown(c->fd, SHUT_WR);
}

static void tls_dispose(struct conn *c)
{
    SSL_free(c->tls);
    c->tls = NULL;
}

static const struct conn_ops tls_ops = {tls_read, tls_write, tls_handshake,
                                        tls_shutdown, tls_dispose};

/* ---- TLS over another connection ----------------------------------------
 *
 * The SSL's BIO reads and writes a lower conn (an HBONE tunnel) instead of
 * a socket. c's fd is an eventfd that only carries wakes: the lower conn
 * wakes c whenever it can do more (over_lower_io), so waiting for it is
 * waiting for a wake, never for the eventfd to be readable or writable
 * (write_needs_read and read_needs_write are set to make conn_want() ask
 * for the eventfd's read event, which never fires). */

static struct conn *over_lower(const struct conn *c)
{
    return BIO_get_data(SSL_get_rbio(c->tls));
}

static int over_bio_write(BIO *b, const char *p, int n)
{
    struct conn *lower = BIO_get_data(b);
    ssize_t r;

    BIO_clear_retry_flags(b);
    r = conn_write(lower, p, (size_t)n);
    if (r == CONN_AGAIN) {
        BIO_set_retry_write(b);
        return -1;
    }
    return r < 0 ? -1 : (int)r;
}

static int over_bio_read(BIO *b, char *p, int n)
{
    struct conn *lower = BIO_get_data(b);
    ssize_t r;

    BIO_clear_retry_flags(b);
    r = conn_read(lower, p, (size_t)n);
    if (r == CONN_AGAIN) {
        BIO_set_retry_read(b);
        return -1;
    }
    return r < 0 ? -1 : (int)r;
}

static long over_bio_ctrl(BIO *b, int cmd, long larg, void *parg)
{
    (void)b;
    (void)larg;
    (void)parg;
    /* The lower conn writes what it takes at once: nothing to flush. */
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static pthread_once_t over_once = PTHREAD_ONCE_INIT;
static BIO_METHOD *over_method;

static void over_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index(), "strait conn");

    if (m == NULL)
        return;
    if (!BIO_meth_set_write(m, over_bio_write) ||
        !BIO_meth_set_read(m, over_bio_read) ||
        !BIO_meth_set_ctrl(m, over_bio_ctrl)) {
        BIO_meth_free(m);
        return;
    }
    over_method = m;
}

/* Progress only comes with the lower conn's wakes: a read never waits
 * for writability, and a write (or handshake) that could not go on waits
 * for the eventfd's read event, that is for a wake. */
static ssize_t over_read(struct conn *c, void *p, size_t n)
{
    ssize_t r = tls_read(c, p, n);

    c->read_needs_write = 0;
    return r;
}

static ssize_t over_write(struct conn *c, const void *p, size_t n)
{
    ssize_t r = tls_write(c, p, n);

    c->write_needs_read = r == CONN_AGAIN;
    return r;
}

static int over_handshake(struct conn *c)
{
    struct conn *lower = over_lower(c);
    int rc = lower->ops->handshake(lower);

    if (rc < 0) {
        c->why = lower->why != NULL ? lower->why : "other";
        return -1;
    }
    if (rc == 1)
        rc = tls_handshake(c);
    c->read_needs_write = 0;
    c->write_needs_read = rc == 0;
    return rc;
}

static void over_shutdown(struct conn *c)
{
    struct conn *lower = over_lower(c);

    SSL_shutdown(c->tls);
    lower->ops->shutdown(lower);
}

static void over_dispose(struct conn *c)
{
    struct conn *lower = over_lower(c);

    SSL_free(c->tls);
    c->tls = NULL;
    conn_close(lower);
    free(lower);
}

static const struct conn_ops over_ops = {over_read, over_write, over_handshake,
                                         over_shutdown, over_dispose};

static void over_lower_io(struct conn *lower, void *arg)
{
    (void)lower;
    conn_wake(arg);
}

int tls_conn_connect_over(struct conn *c, struct conn *lower, SSL_CTX *ctx)
{
    SSL *ssl;
    BIO *bio;

    pthread_once(&over_once, over_init);
    if (over_method == NULL || (ssl = SSL_new(ctx)) == NULL)
        return -1;
    bio = BIO_new(over_method);
    if (bio == NULL) {
        SSL_free(ssl);
        return -1;
    }
    BIO_set_data(bio, lower);
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl, bio, bio);
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE |
                          SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_set_connect_state(ssl);
    lower->on_io = over_lower_io;
    lower->arg = c;
    c->tls = ssl;
    c->ops = &over_ops;
    c->why = NULL;
    return 0;
}

/* c's SSL, or NULL when c is not a TLS connection (plain, or a transport
 * of its own keeping its state in c->tls, as an HBONE tunnel). */
static SSL *ssl_of(const struct conn *c)
{
    return c->ops == &tls_ops || c->ops == &over_ops ? c->tls : NULL;
}

static SSL *new_ssl(struct conn *c, SSL_CTX *ctx)
{
    SSL *ssl = SSL_new(ctx);

    if (ssl == NULL)
        return NULL;
    if (!SSL_set_fd(ssl, c->fd)) {
        SSL_free(ssl);
        return NULL;
    }
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE |
                          SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    c->tls = ssl;
    c->ops = &tls_ops;
    c->why = NULL;
    return ssl;
}

/* What a client context checks beyond the chain; its ex_data, freed
 * with the context. The index is registered once per process. */
struct client_check {
    char **sans;
    size_t nsans;
    int no_host_check;
};

static pthread_once_t client_once = PTHREAD_ONCE_INIT;
static int client_index = -1;

static void client_check_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad,
                              int index, long argl, void *argp)
{
    struct client_check *cc = ptr;

    (void)parent;
    (void)ad;
    (void)index;
    (void)argl;
    (void)argp;
    if (cc == NULL)
        return;
    for (size_t i = 0; i < cc->nsans; i++)
        free(cc->sans[i]);
    free(cc->sans);
    free(cc);
}

static void client_init(void)
{
    client_index =
        SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, client_check_free);
}

static const struct client_check *client_check_of(const SSL *ssl)
{
    if (client_index < 0)
        return NULL;
    return SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), client_index);
}

/* The leaf must carry one of the subjectAltNames, as a URI (SPIFFE) or a
 * DNS name, compared exactly. */
static int leaf_has_san(X509 *leaf, const struct client_check *cc)
{
    GENERAL_NAMES *gens =
        X509_get_ext_d2i(leaf, NID_subject_alt_name, NULL, NULL);
    int found = 0;

    for (size_t i = 0; gens != NULL && !found && i < sk_GENERAL_NAME_num(gens);
         i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
        const ASN1_STRING *v = NULL;
        if (g->type == GEN_URI)
            v = g->d.uniformResourceIdentifier;
        else if (g->type == GEN_DNS)
            v = g->d.dNSName;
        if (v == NULL)
            continue;
        for (size_t k = 0; k < cc->nsans; k++)
            if ((size_t)ASN1_STRING_length(v) == strlen(cc->sans[k]) &&
                memcmp(ASN1_STRING_get0_data(v), cc->sans[k],
                       strlen(cc->sans[k])) == 0)
                found = 1;
    }
    GENERAL_NAMES_free(gens);
    return found;
}

static int verify_sans(int ok, X509_STORE_CTX *xs)
{
    SSL *ssl;
    const struct client_check *cc;

    ok = crl_verify_cb(ok, xs);
    if (!ok || X509_STORE_CTX_get_error_depth(xs) != 0)
        return ok;
    ssl = X509_STORE_CTX_get_ex_data(xs, SSL_get_ex_data_X509_STORE_CTX_idx());
    cc = ssl != NULL ? client_check_of(ssl) : NULL;
    if (cc == NULL || cc->nsans == 0)
        return 1;
    if (leaf_has_san(X509_STORE_CTX_get_current_cert(xs), cc))
        return 1;
    X509_STORE_CTX_set_error(xs, X509_V_ERR_HOSTNAME_MISMATCH);
    return 0;
}

int tls_conn_accept(struct conn *c, SSL_CTX *ctx)
{
    SSL *ssl = new_ssl(c, ctx);

    if (ssl == NULL)
        return -1;
    SSL_set_accept_state(ssl);
    return 0;
}

int tls_conn_connect(struct conn *c, SSL_CTX *ctx, const char *sni)
{
    SSL *ssl = new_ssl(c, ctx);

    if (ssl == NULL)
        return -1;
    if (sni != NULL && sni[0] != '\0') {
        const struct client_check *cc = client_check_of(ssl);
        SSL_set_tlsext_host_name(ssl, sni);
        /* Verify the name too, not only the chain, unless the context
         * checks subjectAltNames instead (or the SNI is a mesh routing
         * key such as outbound_.PORT_._.HOST). */
        if (cc == NULL || !cc->no_host_check)
            X509_VERIFY_PARAM_set1_host(SSL_get0_param(ssl), sni, strlen(sni));
    }
    SSL_set_connect_state(ssl);
    return 0;
}

const char *tls_conn_alpn(const struct conn *c, size_t *len)
{
    const uint8_t *p = NULL;
    unsigned n = 0;

    if (ssl_of(c) == NULL) {
        *len = 0;
        return "";
    }
    SSL_get0_alpn_selected(c->tls, &p, &n);
    *len = n;
    return p ? (const char *)p : "";
}

const char *tls_conn_sni(const struct conn *c)
{
    const char *n = ssl_of(c)
                        ? SSL_get_servername(c->tls, TLSEXT_NAMETYPE_host_name)
                        : NULL;

    return n != NULL ? n : "";
}

const char *tls_conn_verify_error(const struct conn *c)
{
    long r;

    if (ssl_of(c) == NULL)
        return NULL;
    r = SSL_get_verify_result(c->tls);
    if (r == X509_V_OK)
        return NULL;
    /* Nothing was verified. That is a refusal only when the handshake
     * failed over the certificate (the peer showed none where one was
     * required); a handshake the peer left, or that failed otherwise,
     * before its certificate came is not. */
    if (r == X509_V_ERR_INVALID_CALL)
        return c->why != NULL && strcmp(c->why, "certificate") == 0
                   ? "no certificate presented"
                   : NULL;
    if (r == X509_V_ERR_HOSTNAME_MISMATCH) {
        const struct client_check *cc = client_check_of(c->tls);
        if (cc != NULL && cc->nsans > 0)
            return "certificate identity not among the expected "
                   "subjectAltNames";
    }
    return X509_verify_cert_error_string(r);
}

const char *tls_conn_failure(const struct conn *c)
{
    return c->why ? c->why : "other";
}

static const struct stats_field tls_fields[] = {
    {"handshakes", offsetof(struct tls_counters, handshakes), STATS_NONE},
    {"fail_version", offsetof(struct tls_counters, fail_version), STATS_NONE},
    {"fail_cipher", offsetof(struct tls_counters, fail_cipher), STATS_NONE},
    {"fail_certificate", offsetof(struct tls_counters, fail_certificate),
     STATS_NONE},
    {"fail_eof", offsetof(struct tls_counters, fail_eof), STATS_NONE},
    {"fail_other", offsetof(struct tls_counters, fail_other), STATS_NONE},
    {"fail_timeout", offsetof(struct tls_counters, fail_timeout), STATS_NONE},
    {"fail_rejected", offsetof(struct tls_counters, fail_rejected), STATS_NONE},
};

const struct stats_desc tls_counters_desc = {
    "tls.", tls_fields, sizeof(tls_fields) / sizeof(tls_fields[0])};

void tls_count_failure(struct tls_counters *sh, const struct conn *c)
{
    const char *why = tls_conn_failure(c);

    if (strcmp(why, "version") == 0)
        STAT_ADD(sh, fail_version, 1);
    else if (strcmp(why, "cipher") == 0)
        STAT_ADD(sh, fail_cipher, 1);
    else if (strcmp(why, "certificate") == 0)
        STAT_ADD(sh, fail_certificate, 1);
    else if (strcmp(why, "eof") == 0)
        STAT_ADD(sh, fail_eof, 1);
    else
        STAT_ADD(sh, fail_other, 1);
}

static int client_err(char **err, const char *file, const char *what)
{
    char detail[256];

    ERR_error_string_n(ERR_peek_last_error(), detail, sizeof(detail));
    ERR_clear_error();
    err_set(err, "%s: %s: %s", file, what, detail);
    return -1;
}

SSL_CTX *tls_client_ctx_build(const struct tls_client_conf *c, char **err)
{
    static const uint8_t alpn_h2[] = {2, 'h', '2'};
    static const uint8_t alpn_h1[] = {8,   'h', 't', 't', 'p',
                                      '/', '1', '.', '1'};
    /* Istio's sets (the istio.alpn filter), in wire format. */
    static const uint8_t alpn_istio_h2[] = {8,   'i', 's', 't', 'i', 'o',
                                            '-', 'h', '2', 5,   'i', 's',
                                            't', 'i', 'o', 2,   'h', '2'};
    static const uint8_t alpn_istio_h1[] = {
        14,  'i', 's', 't', 'i', 'o', '-', 'h', 't', 't',
        'p', '/', '1', '.', '1', 5,   'i', 's', 't', 'i',
        'o', 8,   'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX *ctx = SSL_CTX_new(TLS_method());
    const char *bundle = c->ca_file && c->ca_file[0]
                             ? c->ca_file
                             : "/etc/ssl/certs/ca-certificates.crt";
    struct client_check *cc = NULL;

    *err = NULL;
    if (ctx == NULL) {
        err_set(err, "cannot create a TLS client context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (c->mesh_alpn && c->h2)
        SSL_CTX_set_alpn_protos(ctx, alpn_istio_h2, sizeof(alpn_istio_h2));
    else if (c->mesh_alpn)
        SSL_CTX_set_alpn_protos(ctx, alpn_istio_h1, sizeof(alpn_istio_h1));
    else if (c->h2)
        SSL_CTX_set_alpn_protos(ctx, alpn_h2, sizeof(alpn_h2));
    else
        SSL_CTX_set_alpn_protos(ctx, alpn_h1, sizeof(alpn_h1));
    if (c->cert_file != NULL && c->cert_file[0] != '\0' &&
        (SSL_CTX_use_certificate_chain_file(ctx, c->cert_file) != 1
             ? client_err(err, c->cert_file,
                          "cannot load the client certificate")
         : SSL_CTX_use_PrivateKey_file(ctx, c->key_file ? c->key_file : "",
                                       SSL_FILETYPE_PEM) != 1
             ? client_err(err, c->key_file ? c->key_file : "(none)",
                          "cannot load the client key")
         : SSL_CTX_check_private_key(ctx) != 1
             ? client_err(err, c->key_file,
                          "does not match the client certificate")
             : 0) < 0)
        goto fail;
    if (c->cred != NULL) {
        /* The provider and its argument live as long as the context: the
         * pair is kept in the context's ex_data with the checks. */
        SSL_CTX_set_cert_cb(ctx, c->cred, c->cred_arg);
    }
    if (c->insecure) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        return ctx;
    }
    if (c->ca_cert != NULL) {
        if (!X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), c->ca_cert)) {
            client_err(err, "mesh root", "cannot trust it");
            goto fail;
        }
        for (size_t i = 0; c->ca_extra != NULL && i < sk_X509_num(c->ca_extra);
             i++) {
            X509 *x = sk_X509_value(c->ca_extra, i);
            /* The mesh's bundle holds the root above too. */
            if (X509_cmp(x, c->ca_cert) != 0 &&
                !X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), x)) {
                client_err(err, "a linked site's or the mesh's root",
                           "cannot trust it");
                goto fail;
            }
        }
    } else if (!SSL_CTX_load_verify_locations(ctx, bundle, NULL)) {
        client_err(err, bundle, "cannot load CA certificates");
        goto fail;
    }
    /* After the CAs: the CRLs are checked against them. */
    if (c->crl_file != NULL && c->crl_file[0] != '\0' &&
        crl_load(SSL_CTX_get_cert_store(ctx), c->crl_file, err) < 0)
        goto fail;
    pthread_once(&client_once, client_init);
    if (c->nsans > 0 || c->no_host_check) {
        cc = calloc(1, sizeof(*cc));
        if (cc == NULL || client_index < 0)
            goto oom;
        cc->no_host_check = c->no_host_check || c->nsans > 0;
        cc->sans = calloc(c->nsans ? c->nsans : 1, sizeof(*cc->sans));
        if (cc->sans == NULL)
            goto oom;
        for (size_t i = 0; i < c->nsans; i++) {
            cc->sans[i] = strdup(c->sans[i]);
            if (cc->sans[i] == NULL)
                goto oom;
            cc->nsans++;
        }
        if (!SSL_CTX_set_ex_data(ctx, client_index, cc))
            goto oom;
        cc = NULL;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_sans);
    return ctx;
oom:
    err_set(err, "TLS client context: out of memory");
fail:
    client_check_free(NULL, cc, NULL, 0, 0, NULL);
    SSL_CTX_free(ctx);
    return NULL;
}

SSL_CTX *tls_client_ctx_new(const char *ca_file, int insecure, int h2,
                            char **err)
{
    struct tls_client_conf c = {0};

    c.ca_file = ca_file;
    c.insecure = insecure;
    c.h2 = h2;
    return tls_client_ctx_build(&c, err);
}

/* The peer's certificate (a reference the caller frees) when it showed
 * one and it was verified; NULL otherwise. */
static X509 *verified_peer(const struct conn *c)
{
    if (c == NULL || ssl_of(c) == NULL ||
        SSL_get_verify_result(c->tls) != X509_V_OK)
        return NULL;
    return SSL_get_peer_certificate(c->tls);
}

int tls_conn_peer_verified(const struct conn *c)
{
    X509 *x = verified_peer(c);
    int ok = x != NULL;

    X509_free(x);
    return ok;
}

size_t tls_conn_peer_sans(const struct conn *c, tls_san_fn *fn, void *arg)
{
    X509 *x = verified_peer(c);
    GENERAL_NAMES *sans;
    size_t n = 0;

    if (x == NULL)
        return 0;
    sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    for (size_t i = 0; sans != NULL && i < sk_GENERAL_NAME_num(sans); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
        const ASN1_STRING *v;
        size_t len;

        if (g->type == GEN_URI)
            v = g->d.uniformResourceIdentifier;
        else if (g->type == GEN_DNS)
            v = g->d.dNSName;
        else
            continue;
        len = (size_t)ASN1_STRING_length(v);
        /* A name with a NUL in it is not a name to show or trust. */
        if (len == 0 || memchr(ASN1_STRING_get0_data(v), '\0', len) != NULL)
            continue;
        if (fn != NULL)
            fn(arg, g->type == GEN_URI ? TLS_SAN_URI : TLS_SAN_DNS,
               (const char *)ASN1_STRING_get0_data(v), len);
        n++;
    }
    GENERAL_NAMES_free(sans);
    X509_free(x);
    return n;
}

size_t tls_conn_peer_uri_san(const struct conn *c, char *out, size_t n)
{
    X509 *x;
    GENERAL_NAMES *sans;
    size_t len = 0;

    if (n > 0)
        out[0] = '\0';
    if (ssl_of(c) == NULL || n == 0 ||
        SSL_get_verify_result(c->tls) != X509_V_OK)
        return 0;
    x = SSL_get_peer_certificate(c->tls);
    if (x == NULL)
        return 0;
    sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    for (size_t i = 0; sans != NULL && i < sk_GENERAL_NAME_num(sans); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
        const ASN1_STRING *u;
        if (g->type != GEN_URI)
            continue;
        u = g->d.uniformResourceIdentifier;
        len = (size_t)ASN1_STRING_length(u);
        if (len >= n)
            len = n - 1;
        memcpy(out, ASN1_STRING_get0_data(u), len);
        out[len] = '\0';
        /* A name with a NUL in it is not a name to log or trust. */
        if (memchr(out, '\0', len) != NULL) {
            out[0] = '\0';
            len = 0;
        }
        break;
    }
    GENERAL_NAMES_free(sans);
    X509_free(x);
    return len;
}

/* Envoy's URL encoding of the PEM in Cert=: every byte but the unreserved
 * ones (RFC 3986) as %XX. */
static int url_encode(struct buf *b, const char *p, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";

    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        char e[3];
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
            (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' ||
            ch == '~') {
            if (buf_append(b, &p[i], 1) < 0)
                return -1;
            continue;
        }
        e[0] = '%';
        e[1] = hex[ch >> 4];
        e[2] = hex[ch & 15];
        if (buf_append(b, e, 3) < 0)
            return -1;
    }
    return 0;
}

/* A quoted XFCC value: '"' and '\' escaped, as Envoy escapes them. */
static int quoted(struct buf *b, const char *p, size_t n)
{
    if (buf_append(b, "\"", 1) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if ((p[i] == '"' || p[i] == '\\') && buf_append(b, "\\", 1) < 0)
            return -1;
        if (buf_append(b, &p[i], 1) < 0)
            return -1;
    }
    return buf_append(b, "\"", 1);
}

/* The names of kind (GEN_URI or GEN_DNS) among x's SANs, each as
 * ";KEY=value"; with first, only the first one, bare (for By=). */
static int xfcc_sans(struct buf *b, X509 *x, int kind, const char *key,
                     int first)
{
    GENERAL_NAMES *sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    int rc = 0;

    for (size_t i = 0; sans != NULL && i < sk_GENERAL_NAME_num(sans); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
        const ASN1_STRING *v;
        size_t len;

        if (g->type != kind)
            continue;
        v = kind == GEN_URI ? g->d.uniformResourceIdentifier : g->d.dNSName;
        len = (size_t)ASN1_STRING_length(v);
        /* A name with a NUL, or with the header's own separators, is not
         * one to pass on. */
        if (len == 0 || memchr(ASN1_STRING_get0_data(v), '\0', len) != NULL ||
            memchr(ASN1_STRING_get0_data(v), ';', len) != NULL ||
            memchr(ASN1_STRING_get0_data(v), ',', len) != NULL)
            continue;
        if (buf_printf(b, "%s%s=", first ? "" : ";", key) < 0 ||
            buf_append(b, ASN1_STRING_get0_data(v), len) < 0) {
            rc = -1;
            break;
        }
        if (first) {
            rc = 1;
            break;
        }
    }
    GENERAL_NAMES_free(sans);
    return rc;
}

int tls_conn_xfcc(const struct conn *c, struct buf *b)
{
    X509 *x = verified_peer(c);
    X509 *self;
    uint8_t *der = NULL, md[SHA256_DIGEST_LENGTH];
    BIO *mem = NULL;
    const char *p;
    size_t n;
    int len, rc = -1;

    if (x == NULL)
        return -1;
    /* By: this side's identity, when its certificate names one. */
    self = SSL_get_certificate(c->tls);
    if (self != NULL) {
        int r = xfcc_sans(b, self, GEN_URI, "By", 1);
        if (r < 0 || (r > 0 && buf_puts(b, ";") < 0))
            goto done;
    }
    len = i2d_X509(x, &der);
    if (len <= 0)
        goto done;
    SHA256(der, (size_t)len, md);
    if (buf_puts(b, "Hash=") < 0)
        goto done;
    for (size_t i = 0; i < sizeof(md); i++)
        if (buf_printf(b, "%02x", md[i]) < 0)
            goto done;
    mem = BIO_new(BIO_s_mem());
    if (mem == NULL || !PEM_write_bio_X509(mem, x) ||
        !BIO_mem_contents(mem, (const uint8_t **)&p, &n))
        goto done;
    if (buf_puts(b, ";Cert=\"") < 0 || url_encode(b, p, n) < 0 ||
        buf_puts(b, "\"") < 0)
        goto done;
    BIO_free(mem);
    mem = BIO_new(BIO_s_mem());
    if (mem == NULL ||
        X509_NAME_print_ex(mem, X509_get_subject_name(x), 0, XN_FLAG_RFC2253) <
            0 ||
        !BIO_mem_contents(mem, (const uint8_t **)&p, &n))
        goto done;
    if (buf_puts(b, ";Subject=") < 0 || quoted(b, p, n) < 0)
        goto done;
    if (xfcc_sans(b, x, GEN_URI, "URI", 0) < 0 ||
        xfcc_sans(b, x, GEN_DNS, "DNS", 0) < 0)
        goto done;
    rc = 0;
done:
    BIO_free(mem);
    OPENSSL_free(der);
    X509_free(x);
    return rc;
}
