/*
 * The istiod CA client: resolve, connect, TLS (ALPN h2) verified against
 * the mesh root file, one gRPC CreateCertificate call on an nghttp2
 * session, check the chain, hand back a credential.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/mem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/ca/ca_client.h"
#include "control/ca/ca_grpc.h"
#include "control/ca/ca_h2.h"
#include "control/ca/csr.h"
#include "control/ca/identity.h"
#include "control/ca/istiod_client.h"
#include "control/ca/pki.h"
#include "control/dns.h"
#include "core/addr.h"
#include "core/buf.h"
#include "core/err.h"
#include "event/timer.h"
#include "net/conn.h"
#include "net/sock.h"
#include "tls/tls.h"

/* A token file is a JWT of a few KiB; more is not a token. */
#define MAX_TOKEN (64 * 1024)
/* Response header and trailer values kept (grpc-message, content-type). */
#define MAX_VALUE 1024

struct istiod_req {
    istiod_cb cb;
    void *arg;
    struct event_base *base;
    EVP_PKEY *key;
    SSL_CTX *ctx;
    STACK_OF(X509) * roots;
    char *host, *server_name, *root_file, *spiffe_id, *token_file;
    char *cluster_id; /* NULL: no ClusterID header */
    int port;
    char *token;
    int aud_ok; /* the token's aud names istio-ca: 1, other: 0, none: -1 */
    struct dns_query *q;
    struct conn conn;
    int connecting, handshaking;
    struct timer deadline;
    nghttp2_session *ng;
    struct buf req, out, in; /* the framed request, pending output, data */
    size_t req_off;
    int http_status;
    int grpc_status; /* -1 until a grpc-status header came */
    char grpc_message[MAX_VALUE];
    char content_type[64];
    int done;
    int unavailable; /* the failure is istiod not answering: retry */
};

static void finish(struct istiod_req *r, struct ca_cred *cred, const char *fmt,
                   ...) __attribute__((format(printf, 3, 4)));

static void finish(struct istiod_req *r, struct ca_cred *cred, const char *fmt,
                   ...)
{
    istiod_cb cb = r->cb;
    void *arg = r->arg;
    int unavailable = r->unavailable;
    char msg[1024];
    va_list ap;

    if (fmt != NULL) {
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
    }
    istiod_cancel(r);
    cb(arg, cred, fmt ? msg : NULL, unavailable);
}

static ssize_t read_body(nghttp2_session *ng, int32_t id, uint8_t *buf,
                         size_t len, uint32_t *flags, nghttp2_data_source *src,
                         void *arg)
{
    struct istiod_req *r = arg;
    size_t left = buf_len(&r->req) - r->req_off;

    (void)ng;
    (void)id;
    (void)src;
    if (len > left)
        len = left;
    memcpy(buf, buf_ptr(&r->req) + r->req_off, len);
    r->req_off += len;
    if (r->req_off == buf_len(&r->req))
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)len;
}

static void copy_value(char *dst, size_t cap, const uint8_t *v, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* A status of at most 3 decimal digits, or -1: ":status" and
 * "grpc-status" values are never longer. */
static int small_status(const uint8_t *v, size_t n)
{
    int x = 0;

    if (n == 0 || n > 3)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    return x;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f,
                     const uint8_t *name, size_t nlen, const uint8_t *value,
                     size_t vlen, uint8_t flags, void *arg)
{
    struct istiod_req *r = arg;

    (void)ng;
    (void)f;
    (void)flags;
    if (nlen == 7 && memcmp(name, ":status", 7) == 0) {
        int v = small_status(value, vlen);
        r->http_status = v < 0 ? 0 : v;
    } else if (nlen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        int v = small_status(value, vlen);
        r->grpc_status = v < 0 ? 2 : v; /* unparsable: UNKNOWN */
    } else if (nlen == 12 && memcmp(name, "grpc-message", 12) == 0) {
        ca_grpc_message_decode((const char *)value, vlen, r->grpc_message,
                               sizeof(r->grpc_message));
    } else if (nlen == 12 && memcmp(name, "content-type", 12) == 0) {
        copy_value(r->content_type, sizeof(r->content_type), value, vlen);
    }
    return 0;
}

static int on_data(nghttp2_session *ng, uint8_t flags, int32_t id,
                   const uint8_t *data, size_t len, void *arg)
{
    struct istiod_req *r = arg;

    (void)ng;
    (void)flags;
    (void)id;
    if (buf_append(&r->in, data, len) < 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int on_close(nghttp2_session *ng, int32_t id, uint32_t code, void *arg)
{
    struct istiod_req *r = arg;

    (void)id;
    (void)code;
    r->done = 1;
    nghttp2_session_terminate_session(ng, NGHTTP2_NO_ERROR);
    return 0;
}

/* Verifies leaf through chain to one of r->roots; NULL or a reason. */
static const char *verify_chain(struct istiod_req *r, X509 *leaf,
                                STACK_OF(X509) * chain)
{
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    const char *why = "out of memory";

    for (size_t i = 0; store && i < sk_X509_num(r->roots); i++)
        X509_STORE_add_cert(store, sk_X509_value(r->roots, i));
    if (store && ctx && X509_STORE_CTX_init(ctx, store, leaf, chain))
        why =
            X509_verify_cert(ctx) == 1
                ? NULL
                : X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx));
    ERR_clear_error();
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    return why;
}

/* The root of r->roots that issued x, or NULL. */
static X509 *root_of(struct istiod_req *r, X509 *x)
{
    for (size_t i = 0; i < sk_X509_num(r->roots); i++)
        if (X509_check_issued(sk_X509_value(r->roots, i), x) == X509_V_OK)
            return sk_X509_value(r->roots, i);
    return NULL;
}

/* The answer is whole: check it and finish. */
static void answer(struct istiod_req *r)
{
    struct ca_grpc_response resp;
    const uint8_t *msg;
    size_t mlen;
    ssize_t used;
    const char *why = NULL, *vwhy;
    STACK_OF(X509) *chain = NULL;
    struct ca_cred *cred = NULL;
    X509 *leaf = NULL, *top;
    char *err = NULL, *id = NULL, nb[16];

    memset(&resp, 0, sizeof(resp));
    if (r->http_status == 0) {
        finish(r, NULL, "istiod at %s:%d reset the request without an answer",
               r->host, r->port);
        return;
    }
    if (r->http_status == 200 &&
        strncmp(r->content_type, "application/grpc", 16) != 0) {
        finish(r, NULL,
               "istiod at %s:%d answered with content-type '%s', "
               "not gRPC",
               r->host, r->port, r->content_type);
        return;
    }
    if (r->http_status != 200) {
        finish(r, NULL, "istiod at %s:%d answered HTTP %d, not gRPC", r->host,
               r->port, r->http_status);
        return;
    }
    if (r->grpc_status < 0) {
        finish(r, NULL, "istiod at %s:%d sent no grpc-status", r->host,
               r->port);
        return;
    }
    if (r->grpc_status != CA_GRPC_OK) {
        const char *hint = "";
        r->unavailable = r->grpc_status == CA_GRPC_UNAVAILABLE;
        if (r->grpc_status == CA_GRPC_UNAUTHENTICATED && r->aud_ok == 0)
            hint = " (the token's audience does not include istio-ca: mount "
                   "a projected token with audience istio-ca)";
        else if (r->grpc_status == CA_GRPC_UNAUTHENTICATED)
            hint = " (istiod did not accept the token in the token file)";
        finish(r, NULL, "istiod refused the certificate request: %s: %s%s",
               ca_grpc_status_name(r->grpc_status, nb),
               r->grpc_message[0] ? r->grpc_message : "no message", hint);
        return;
    }
    used =
        ca_grpc_frame_parse((const uint8_t *)buf_ptr(&r->in), buf_len(&r->in),
                            CA_GRPC_MAX_MESSAGE, &msg, &mlen, &why);
    if (used <= 0 || (size_t)used != buf_len(&r->in)) {
        finish(r, NULL, "istiod sent a bad gRPC message: %s",
               used < 0 ? why : "not one whole message");
        return;
    }
    if (ca_grpc_response_decode(msg, mlen, &resp, &why) < 0) {
        ca_grpc_response_dispose(&resp);
        finish(r, NULL, "istiod sent a bad IstioCertificateResponse: %s", why);
        return;
    }
    chain = sk_X509_new_null();
    for (size_t i = 0; chain && i < resp.n; i++) {
        STACK_OF(X509) *one = pki_certs_parse(
            resp.certs[i], strlen(resp.certs[i]), "cert_chain", &err);
        if (one == NULL)
            goto bad;
        while (sk_X509_num(one) > 0)
            sk_X509_push(chain, sk_X509_shift(one));
        sk_X509_free(one);
    }
    leaf = chain ? sk_X509_shift(chain) : NULL;
    if (leaf == NULL) {
        err_set(&err, "no certificate in cert_chain");
        goto bad;
    }
    vwhy = verify_chain(r, leaf, chain);
    if (vwhy != NULL) {
        err_set(&err,
                "the certificate does not verify against the roots in "
                "%s: %s",
                r->root_file, vwhy);
        goto bad;
    }
    id = pki_spiffe_id(leaf);
    if (id == NULL || strcmp(id, r->spiffe_id) != 0) {
        err_set(&err, "the certificate is for %s, not %s",
                id ? id : "no SPIFFE ID", r->spiffe_id);
        goto bad;
    }
    /* The chain ends in the mesh root, which is what ISTIO_MUTUAL
     * trusts: istiod may leave it out (root_cert), or send it. */
    top = sk_X509_num(chain) > 0 ? sk_X509_value(chain, sk_X509_num(chain) - 1)
                                 : leaf;
    if (X509_check_issued(top, top) != X509_V_OK) {
        X509 *root = root_of(r, top);
        if (root == NULL || !X509_up_ref(root) || !sk_X509_push(chain, root)) {
            err_set(&err, "cannot complete the chain to its root");
            goto bad;
        }
    }
    EVP_PKEY_up_ref(r->key);
    cred = ca_cred_new(leaf, chain, r->key, &err);
    leaf = NULL;
    chain = NULL;
    if (cred == NULL)
        goto bad;
    ca_grpc_response_dispose(&resp);
    free(id);
    finish(r, cred, NULL);
    return;
bad:
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    ca_grpc_response_dispose(&resp);
    free(id);
    {
        char m[768];
        snprintf(m, sizeof(m), "%s", err ? err : "?");
        free(err);
        finish(r, NULL, "istiod sent an unusable certificate: %s", m);
    }
}

static int start_session(struct istiod_req *r)
{
    nghttp2_session_callbacks *cb;
    nghttp2_data_provider prd = {.source.ptr = r, .read_callback = read_body};
    char auth[MAX_TOKEN + 16], authority[320];
    nghttp2_nv nv[10];
    size_t k = 0;
    int rc;

    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -1;
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    rc = nghttp2_session_client_new(&r->ng, cb, r);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0)
        return -1;
    nghttp2_submit_settings(r->ng, NGHTTP2_FLAG_NONE, NULL, 0);
    snprintf(authority, sizeof(authority), "%s:%d", r->server_name, r->port);
    snprintf(auth, sizeof(auth), "Bearer %s", r->token);
    nv[k++] = ca_h2_nv(":method", "POST");
    nv[k++] = ca_h2_nv(":scheme", "https");
    nv[k++] = ca_h2_nv(":path", CA_GRPC_PATH);
    nv[k++] = ca_h2_nv(":authority", authority);
    nv[k++] = ca_h2_nv("content-type", "application/grpc");
    nv[k++] = ca_h2_nv("te", "trailers");
    nv[k++] = ca_h2_nv("user-agent", "strait/" PACKAGE_VERSION);
    nv[k++] = ca_h2_nv("authorization", auth);
    /* gRPC metadata keys travel lowercased: istiod reads ClusterID. */
    if (r->cluster_id != NULL)
        nv[k++] = ca_h2_nv("clusterid", r->cluster_id);
    rc = nghttp2_submit_request(r->ng, NULL, nv, k, &prd, r) < 0 ? -1 : 0;
    OPENSSL_cleanse(auth, sizeof(auth));
    return rc;
}

static void on_io(struct conn *cn, void *arg)
{
    struct istiod_req *r = arg;
    const char *why = NULL;
    int rc;

    if (r->connecting) {
        int e = sock_error(cn->fd);
        if (e != 0) {
            r->unavailable = 1;
            finish(r, NULL, "istiod at %s:%d is unavailable: connect: %s",
                   r->host, r->port, strerror(e));
            return;
        }
        r->connecting = 0;
        r->handshaking = 1;
    }
    if (r->handshaking) {
        size_t alen;
        const char *alpn;
        rc = cn->ops->handshake(cn);
        if (rc < 0) {
            const char *v = tls_conn_verify_error(cn);
            if (v != NULL)
                finish(r, NULL,
                       "istiod at %s:%d is not trusted: its certificate does "
                       "not verify against the roots in %s for %s (%s)",
                       r->host, r->port, r->root_file, r->server_name, v);
            else {
                r->unavailable = 1;
                finish(r, NULL,
                       "istiod at %s:%d is unavailable: TLS handshake "
                       "failed (%s)",
                       r->host, r->port, tls_conn_failure(cn));
            }
            return;
        }
        if (rc == 0) {
            conn_want(cn, !cn->read_needs_write, cn->read_needs_write);
            return;
        }
        r->handshaking = 0;
        alpn = tls_conn_alpn(cn, &alen);
        if (alen != 2 || memcmp(alpn, "h2", 2) != 0) {
            finish(r, NULL,
                   "istiod at %s:%d does not speak HTTP/2 (no ALPN h2): not "
                   "a gRPC server",
                   r->host, r->port);
            return;
        }
        if (start_session(r) < 0) {
            finish(r, NULL, "cannot start HTTP/2: out of memory");
            return;
        }
    }
    rc = ca_h2_pump(cn, r->ng, &r->out, &why);
    if (r->done) {
        answer(r);
        return;
    }
    if (rc < 0) {
        r->unavailable = 1;
        finish(r, NULL,
               "istiod at %s:%d is unavailable: the connection "
               "ended before an answer (%s)",
               r->host, r->port, why);
    } else if (rc == 0)
        finish(r, NULL,
               "istiod at %s:%d ended the HTTP/2 session without "
               "an answer",
               r->host, r->port);
}

static void on_deadline(void *arg)
{
    struct istiod_req *r = arg;

    r->unavailable = 1;
    finish(r, NULL, "istiod at %s:%d is unavailable: no answer in time%s",
           r->host, r->port, r->q ? " (resolving its name)" : "");
}

static int start_connect(struct istiod_req *r, const struct addr *a, char **err)
{
    struct in6_addr ip;
    int fd, in_progress = 0;
    int literal = inet_pton(AF_INET, r->server_name, &ip) == 1 ||
                  inet_pton(AF_INET6, r->server_name, &ip) == 1;

    fd = sock_connect(a, &in_progress);
    if (fd < 0)
        return err_set(err, "istiod at %s:%d is unavailable: %s", r->host,
                       r->port, strerror(errno));
    conn_init(&r->conn, r->base, fd, on_io, r);
    if (tls_conn_connect(&r->conn, r->ctx, literal ? NULL : r->server_name) < 0)
        return err_set(err, "cannot set up TLS");
    if (literal ? !X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(r->conn.tls),
                                                 r->server_name)
                : !X509_VERIFY_PARAM_set1_host(SSL_get0_param(r->conn.tls),
                                               r->server_name,
                                               strlen(r->server_name)))
        return err_set(err, "cannot set up TLS");
    r->connecting = in_progress;
    r->handshaking = !in_progress;
    conn_want(&r->conn, !in_progress, 1);
    return 0;
}

static void on_resolved(void *arg, const struct addr *a, const char *why)
{
    struct istiod_req *r = arg;
    char *err = NULL;

    r->q = NULL;
    if (a == NULL) {
        r->unavailable = 1;
        finish(r, NULL,
               "istiod at %s:%d is unavailable: cannot resolve %s "
               "(%s)",
               r->host, r->port, r->host, why);
        return;
    }
    if (start_connect(r, a, &err) < 0) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", err ? err : "out of memory");
        free(err);
        finish(r, NULL, "%s", msg);
    }
}

/* Reads the token file and checks what can be checked locally. */
static int read_token(struct istiod_req *r, const struct istiod_conf *conf,
                      char **err)
{
    size_t n = 0, b = 0, e;
    char *rerr = NULL, *data = pki_read_file(conf->token_file, &n, &rerr);
    int64_t exp = 0, now = (int64_t)time(NULL);

    if (data == NULL) {
        err_set(err, "cannot read the token %s: %s", conf->token_file,
                rerr ? rerr : "?");
        free(rerr);
        return -1;
    }
    /* The file's text, without surrounding white space. */
    while (b < n && (data[b] == ' ' || data[b] == '\n' || data[b] == '\r' ||
                     data[b] == '\t'))
        b++;
    e = n;
    while (e > b && (data[e - 1] == ' ' || data[e - 1] == '\n' ||
                     data[e - 1] == '\r' || data[e - 1] == '\t'))
        e--;
    if (e - b > MAX_TOKEN) {
        OPENSSL_cleanse(data, n);
        free(data);
        return err_set(err, "the token in %s is larger than %d bytes",
                       conf->token_file, MAX_TOKEN);
    }
    if (e == b ||
        ca_grpc_token_claims(data + b, e - b,
                             conf->audience ? conf->audience : "istio-ca", &exp,
                             &r->aud_ok) < 0) {
        OPENSSL_cleanse(data, n);
        free(data);
        return err_set(err, "the token in %s is not a JWT", conf->token_file);
    }
    for (size_t i = b; i < e; i++)
        if ((unsigned char)data[i] <= 0x20 || (unsigned char)data[i] >= 0x7f) {
            OPENSSL_cleanse(data, n);
            free(data);
            return err_set(err, "the token in %s holds bytes a header cannot",
                           conf->token_file);
        }
    if (exp != 0 && exp <= now) {
        OPENSSL_cleanse(data, n);
        free(data);
        return err_set(err,
                       "the token in %s expired %lld s ago (exp %lld); not "
                       "sent to istiod: the kubelet rotates a projected "
                       "token, so check the volume's expirationSeconds and "
                       "that the file is the projected one",
                       conf->token_file, (long long)(now - exp),
                       (long long)exp);
    }
    r->token = strndup(data + b, e - b);
    OPENSSL_cleanse(data, n);
    free(data);
    if (r->token == NULL)
        return err_set(err, "out of memory");
    return 0;
}

static int load_roots(struct istiod_req *r, char **err)
{
    size_t n = 0;
    char *data = pki_read_file(r->root_file, &n, err);
    X509_STORE *store;

    if (data == NULL)
        return -1;
    r->roots = pki_certs_parse(data, n, r->root_file, err);
    free(data);
    if (r->roots == NULL)
        return -1;
    r->ctx = SSL_CTX_new(TLS_method());
    if (r->ctx == NULL)
        return err_set(err, "cannot set up TLS");
    SSL_CTX_set_min_proto_version(r->ctx, TLS1_2_VERSION);
    store = SSL_CTX_get_cert_store(r->ctx);
    for (size_t i = 0; i < sk_X509_num(r->roots); i++)
        X509_STORE_add_cert(store, sk_X509_value(r->roots, i));
    SSL_CTX_set_verify(r->ctx, SSL_VERIFY_PEER, NULL);
    if (SSL_CTX_set_alpn_protos(r->ctx, (const uint8_t *)"\x02h2", 3) != 0)
        return err_set(err, "cannot set up TLS");
    ERR_clear_error();
    return 0;
}

struct istiod_req *istiod_request(struct event_base *base,
                                  const struct istiod_conf *conf, EVP_PKEY *key,
                                  istiod_cb cb, void *arg, char **err)
{
    struct istiod_req *r = calloc(1, sizeof(*r));
    struct buf csr;
    const char *why;
    struct addr a;

    *err = NULL;
    if (r == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    r->cb = cb;
    r->arg = arg;
    r->base = base;
    r->conn.fd = -1;
    r->grpc_status = -1;
    EVP_PKEY_up_ref(key);
    r->key = key;
    buf_init(&r->req, CA_GRPC_MAX_MESSAGE + 5);
    buf_init(&r->out, 256 * 1024);
    buf_init(&r->in, CA_GRPC_MAX_MESSAGE + 5);
    buf_init(&csr, CSR_MAX_PEM);
    timer_init(&r->deadline, base, on_deadline, r);
    if (ca_client_parse_url(conf->address, &r->host, &r->port, &why) < 0) {
        err_set(err, "ca.istiod.address %s: must be HOST:PORT", conf->address);
        goto fail;
    }
    r->server_name =
        strdup(conf->server_name && conf->server_name[0] ? conf->server_name
                                                         : r->host);
    r->root_file = strdup(conf->root_file);
    r->spiffe_id = strdup(conf->spiffe_id);
    r->token_file = strdup(conf->token_file);
    if (r->server_name == NULL || r->root_file == NULL ||
        r->spiffe_id == NULL || r->token_file == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    if (read_token(r, conf, err) < 0 || load_roots(r, err) < 0)
        goto fail;
    if (csr_new(key, r->spiffe_id, &csr) < 0 ||
        ca_grpc_request_encode(&r->req, buf_cstr(&csr), conf->validity_s) < 0) {
        err_set(err, "cannot build the certificate request");
        goto fail;
    }
    if (conf->cluster_id != NULL && conf->cluster_id[0] != '\0' &&
        (r->cluster_id = strdup(conf->cluster_id)) == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    if (addr_literal(&a, r->host, r->port) == 0) {
        if (start_connect(r, &a, err) < 0)
            goto fail;
    } else if (conf->dns == NULL) {
        err_set(err, "cannot resolve %s: no resolver here", r->host);
        goto fail;
    } else {
        r->q = dns_resolve(conf->dns, r->host, r->port, on_resolved, r);
        if (r->q == NULL) {
            err_set(err, "out of memory");
            goto fail;
        }
    }
    timer_arm(&r->deadline,
              (uint64_t)(conf->timeout_ms > 0 ? conf->timeout_ms : 15000));
    buf_dispose(&csr);
    return r;
fail:
    buf_dispose(&csr);
    istiod_cancel(r);
    return NULL;
}

void istiod_cancel(struct istiod_req *r)
{
    if (r == NULL)
        return;
    dns_query_cancel(r->q);
    if (r->conn.fd >= 0)
        conn_close(&r->conn);
    if (r->ng != NULL)
        nghttp2_session_del(r->ng);
    timer_dispose(&r->deadline);
    if (r->token != NULL) {
        OPENSSL_cleanse(r->token, strlen(r->token));
        free(r->token);
    }
    if (buf_len(&r->out) > 0)
        OPENSSL_cleanse((void *)buf_ptr(&r->out), buf_len(&r->out));
    buf_dispose(&r->req);
    buf_dispose(&r->out);
    buf_dispose(&r->in);
    sk_X509_pop_free(r->roots, X509_free);
    SSL_CTX_free(r->ctx);
    EVP_PKEY_free(r->key);
    free(r->host);
    free(r->server_name);
    free(r->root_file);
    free(r->spiffe_id);
    free(r->token_file);
    free(r->cluster_id);
    free(r);
}

struct blocking {
    struct event_base *base;
    struct ca_cred *cred;
    char *err;
    int done;
    int unavailable;
};

static void blocking_done(void *arg, struct ca_cred *cred, const char *err,
                          int unavailable)
{
    struct blocking *f = arg;

    f->unavailable = unavailable;
    f->cred = cred;
    f->err = err ? strdup(err) : NULL;
    f->done = 1;
    event_base_loopbreak(f->base);
}

static void no_change(void *arg)
{
    (void)arg;
}

struct ca_cred *istiod_fetch(const struct istiod_conf *conf, EVP_PKEY *key,
                             int *unavailable, char **err)
{
    struct blocking f = {event_base_new(), NULL, NULL, 0, 0};
    const struct dns_conf sys = {NULL, 0, 5000, 5000, NULL};
    struct istiod_conf cc = *conf;
    struct istiod_req *r;

    *err = NULL;
    if (f.base == NULL) {
        err_set(err, "cannot create an event loop");
        return NULL;
    }
    cc.dns = dns_cache_new(f.base, conf->dns_conf ? conf->dns_conf : &sys,
                           no_change, NULL, err);
    if (cc.dns == NULL) {
        event_base_free(f.base);
        return NULL;
    }
    r = istiod_request(f.base, &cc, key, blocking_done, &f, err);
    if (r != NULL) {
        while (!f.done && event_base_dispatch(f.base) == 0)
            ;
        if (!f.done)
            istiod_cancel(r);
    }
    dns_cache_free(cc.dns);
    event_base_free(f.base);
    *unavailable = f.unavailable;
    if (f.err != NULL)
        err_give(err, f.err);
    return f.cred;
}
