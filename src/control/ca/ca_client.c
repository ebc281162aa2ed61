/*
 * CA API client: connect, TLS with a pinned root, POST a CSR, read the
 * chain, check it, hand back a credential.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/mem.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/ca/ca_api.h"
#include "control/ca/ca_client.h"
#include "control/ca/ca_server.h"
#include "control/ca/csr.h"
#include "control/ca/identity.h"
#include "control/ca/pki.h"
#include "core/addr.h"
#include "core/buf.h"
#include "http1/parser.h"
#include "net/conn.h"
#include "net/sock.h"
#include "tls/tls.h"

#define MAX_HEADERS 32

struct ca_client_req {
    struct event_base *base;
    ca_client_cb cb;
    void *arg;
    uint8_t pin[32];
    EVP_PKEY *key;
    SSL_CTX *ctx;
    struct conn c;
    int connecting;
    struct event *timer;
    struct buf out, in;
    char *host;
    char verify_err[256];
};

int ca_client_parse_url(const char *url, char **host, int *port,
                        const char **why)
{
    const char *h = url, *colon, *end;
    char *e;
    long p;

    *why = "the CA address must look like https://HOST:PORT";
    if (strncmp(h, "https://", 8) == 0)
        h += 8;
    else if (strstr(h, "://") != NULL)
        return -1;
    end = h + strlen(h);
    if (end > h && end[-1] == '/')
        end--;
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(end - h));
        if (rb == NULL || rb + 1 >= end || rb[1] != ':')
            return -1;
        *host = strndup(h + 1, (size_t)(rb - h - 1));
        colon = rb + 1;
    } else {
        colon = NULL;
        for (const char *q = h; q < end; q++)
            if (*q == ':')
                colon = q;
        if (colon == NULL || colon == h)
            return -1;
        *host = strndup(h, (size_t)(colon - h));
    }
    if (*host == NULL)
        return -1;
    errno = 0;
    p = strtol(colon + 1, &e, 10);
    if (errno != 0 || e != end || p < 1 || p > 65535 || colon[1] < '0' ||
        colon[1] > '9') {
        free(*host);
        *host = NULL;
        return -1;
    }
    *port = (int)p;
    return 0;
}

static void finish(struct ca_client_req *r, struct ca_cred *cred,
                   const char *err)
{
    ca_client_cb cb = r->cb;
    void *arg = r->arg;

    ca_client_cancel(r);
    cb(arg, cred, err);
}

static void fail(struct ca_client_req *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void fail(struct ca_client_req *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    finish(r, NULL, msg);
}

/* Finds a certificate of chain whose key matches the pin. */
static X509 *pinned_root(STACK_OF(X509) * chain, const uint8_t pin[32])
{
    for (size_t i = 0; i < sk_X509_num(chain); i++) {
        X509 *x = sk_X509_value(chain, i);
        uint8_t h[32];
        pki_spki_sha256(x, h);
        if (memcmp(h, pin, 32) == 0 && X509_check_issued(x, x) == X509_V_OK)
            return x;
    }
    return NULL;
}

/* Verifies leaf up to root through chain; NULL or a static reason. */
static const char *verify_to(X509 *root, X509 *leaf, STACK_OF(X509) * chain)
{
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    const char *why = "out of memory";

    if (store && ctx && X509_STORE_add_cert(store, root) &&
        X509_STORE_CTX_init(ctx, store, leaf, chain)) {
        why =
            X509_verify_cert(ctx) == 1
                ? NULL
                : X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx));
    }
    ERR_clear_error();
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    return why;
}

static enum ssl_verify_result_t verify_server(SSL *ssl, uint8_t *alert)
{
    struct ca_client_req *r = SSL_get_app_data(ssl);
    STACK_OF(X509) *chain = SSL_get_peer_full_cert_chain(ssl);
    X509 *leaf = chain && sk_X509_num(chain) ? sk_X509_value(chain, 0) : NULL;
    X509 *root = chain ? pinned_root(chain, r->pin) : NULL;
    const char *why;
    char *id;

    *alert = SSL_AD_BAD_CERTIFICATE;
    if (leaf == NULL) {
        snprintf(r->verify_err, sizeof(r->verify_err),
                 "the CA server sent no certificate");
        return ssl_verify_invalid;
    }
    if (root == NULL) {
        snprintf(r->verify_err, sizeof(r->verify_err),
                 "the CA server's chain does not end in the pinned root "
                 "(is this the CA the token was made for?)");
        *alert = SSL_AD_UNKNOWN_CA;
        return ssl_verify_invalid;
    }
    why = verify_to(root, leaf, chain);
    if (why != NULL) {
        snprintf(r->verify_err, sizeof(r->verify_err),
                 "the CA server's certificate does not verify: %s", why);
        return ssl_verify_invalid;
    }
    id = pki_spiffe_id(leaf);
    if (id == NULL || strlen(id) < 9 ||
        strcmp(strchr(id + 9, '/') ? strchr(id + 9, '/') : "",
               CA_SERVER_ID_PATH) != 0) {
        snprintf(r->verify_err, sizeof(r->verify_err),
                 "the server is not a strait CA (its certificate is for "
                 "%s, not spiffe://TD" CA_SERVER_ID_PATH ")",
                 id ? id : "no SPIFFE ID");
        free(id);
        return ssl_verify_invalid;
    }
    free(id);
    return ssl_verify_ok;
}

static void handle_response(struct ca_client_req *r, int status,
                            const char *body, size_t n)
{
    struct ca_api_response resp;
    STACK_OF(X509) *chain = NULL;
    struct ca_cred *cred = NULL;
    X509 *leaf = NULL, *root;
    const char *why;
    char *err = NULL;
    char msg[512];

    if (ca_api_response_parse(body, n, &resp, &why) < 0) {
        snprintf(msg, sizeof(msg), "CA answered HTTP %d with a bad body: %s",
                 status, why);
        goto out;
    }
    if (status != 200 || resp.error != NULL) {
        snprintf(msg, sizeof(msg), "CA refused the request (HTTP %d): %s",
                 status, resp.error ? resp.error : "no reason given");
        goto out;
    }
    chain = sk_X509_new_null();
    for (size_t i = 0; chain && i < resp.n; i++) {
        STACK_OF(X509) *one = pki_certs_parse(
            resp.chain[i], strlen(resp.chain[i]), "cert_chain", &err);
        if (one == NULL) {
            snprintf(msg, sizeof(msg), "CA sent a bad chain: %s",
                     err ? err : "?");
            goto out;
        }
        while (sk_X509_num(one) > 0)
            sk_X509_push(chain, sk_X509_shift(one));
        sk_X509_free(one);
    }
    leaf = chain ? sk_X509_shift(chain) : NULL;
    root = chain ? pinned_root(chain, r->pin) : NULL;
    if (leaf == NULL || root == NULL) {
        snprintf(msg, sizeof(msg),
                 "CA sent a chain that does not end in the pinned root");
        goto out;
    }
    why = verify_to(root, leaf, chain);
    if (why != NULL) {
        snprintf(msg, sizeof(msg), "CA sent a chain that does not verify: %s",
                 why);
        goto out;
    }
    EVP_PKEY_up_ref(r->key);
    cred = ca_cred_new(leaf, chain, r->key, &err);
    leaf = NULL;
    chain = NULL;
    if (cred == NULL)
        snprintf(msg, sizeof(msg), "CA sent an unusable certificate: %s",
                 err ? err : "?");
out:
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    ca_api_response_dispose(&resp);
    free(err);
    finish(r, cred, cred ? NULL : msg);
}

/* 1 when the whole response is in; then it has been handled. */
static int try_response(struct ca_client_req *r, int eof)
{
    struct h1_header hdrs[MAX_HEADERS];
    struct h1_limits lim = h1_limits_default();
    struct h1_response resp;
    const char *why;
    int status, head;
    size_t have;

    lim.max_headers = MAX_HEADERS;
    lim.underscores = H1_US_ALLOW;
    resp.headers = hdrs;
    head = h1_parse_response(buf_ptr(&r->in), buf_len(&r->in), &lim, NULL,
                             &resp, &why, &status);
    if (head < 0) {
        fail(r, "CA answered with bad HTTP: %s", why);
        return 1;
    }
    if (head == 0) {
        if (eof)
            fail(r, "%s", "the CA closed the connection without an answer");
        return eof;
    }
    have = buf_len(&r->in) - (size_t)head;
    if (resp.body == H1_BODY_LENGTH && have >= resp.content_length) {
        handle_response(r, resp.status, buf_ptr(&r->in) + head,
                        (size_t)resp.content_length);
        return 1;
    }
    if (eof || resp.body == H1_BODY_CHUNKED) {
        fail(r, "%s", "the CA's answer was cut short");
        return 1;
    }
    return 0;
}

static void on_io(struct conn *c, void *arg)
{
    struct ca_client_req *r = arg;

    if (r->connecting) {
        int e = sock_error(c->fd);
        if (e != 0) {
            fail(r, "cannot connect to the CA: %s", strerror(e));
            return;
        }
        r->connecting = 0;
        c->handshaking = 1;
    }
    if (c->handshaking) {
        int rc = c->ops->handshake(c);
        if (rc < 0) {
            if (r->verify_err[0])
                fail(r, "%s", r->verify_err);
            else
                fail(r, "TLS handshake with the CA failed (%s)",
                     tls_conn_failure(c));
            return;
        }
        if (rc == 0) {
            conn_want(c, 1, 0);
            return;
        }
        c->handshaking = 0;
    }
    while (buf_len(&r->out) > 0) {
        ssize_t w = conn_write(c, buf_ptr(&r->out), buf_len(&r->out));
        if (w == CONN_AGAIN) {
            conn_want(c, 0, 1);
            return;
        }
        if (w <= 0) {
            fail(r, "lost the connection to the CA while sending (%s)",
                 c->why ? c->why : "closed");
            return;
        }
        buf_consume(&r->out, (size_t)w);
    }
    for (;;) {
        size_t room;
        char *p = buf_reserve_any(&r->in, &room);
        ssize_t n;

        if (p == NULL) {
            fail(r, "%s", "the CA's answer is too large");
            return;
        }
        n = conn_read(c, p, room);
        if (n == CONN_AGAIN) {
            conn_want(c, 1, 0);
            return;
        }
        if (n == CONN_ERROR) {
            fail(r, "lost the connection to the CA (%s)",
                 c->why ? c->why : "error");
            return;
        }
        if (n > 0)
            buf_commit(&r->in, (size_t)n);
        if (try_response(r, n == 0))
            return;
    }
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    fail(arg, "%s", "the CA did not answer in time");
}

static int resolve(const char *host, int port, struct addr *a)
{
    struct addrinfo hints, *res = NULL;
    char ps[8];

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof(ps), "%d", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0 || res == NULL)
        return -1;
    memset(a, 0, sizeof(*a));
    memcpy(&a->ss, res->ai_addr, res->ai_addrlen);
    a->len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

struct ca_client_req *ca_client_request(struct event_base *base,
                                        const struct ca_client_conf *conf,
                                        ca_client_cb cb, void *arg, char **err)
{
    struct ca_client_req *r = calloc(1, sizeof(*r));
    struct timeval tv = {conf->timeout_s > 0 ? conf->timeout_s : 15, 0};
    struct buf csr, body;
    struct addr a;
    const char *why;
    int port, fd, in_progress = 0;

    *err = NULL;
    if (r == NULL) {
        *err = strdup("out of memory");
        return NULL;
    }
    r->base = base;
    r->cb = cb;
    r->arg = arg;
    r->c.fd = -1;
    memcpy(r->pin, conf->pin, 32);
    EVP_PKEY_up_ref(conf->key);
    r->key = conf->key;
    buf_init(&r->out, CA_API_MAX_BODY + 8192);
    buf_init(&r->in, CA_API_MAX_BODY + 16 * 1024);
    if (ca_client_parse_url(conf->url, &r->host, &port, &why) < 0) {
        if (asprintf(err, "%s: %s", conf->url, why) < 0)
            *err = NULL;
        goto fail;
    }
    if (resolve(r->host, port, &a) < 0) {
        if (asprintf(err, "%s: cannot resolve %s", conf->url, r->host) < 0)
            *err = NULL;
        goto fail;
    }
    buf_init(&csr, CSR_MAX_PEM);
    buf_init(&body, CA_API_MAX_BODY);
    if (csr_new(r->key, &csr) < 0 ||
        ca_api_request_write(&body, buf_cstr(&csr), conf->validity_s) < 0) {
        buf_dispose(&csr);
        buf_dispose(&body);
        *err = strdup("cannot build the certificate request");
        goto fail;
    }
    buf_printf(&r->out, "POST %s HTTP/1.1\r\nHost: %s\r\n", CA_API_PATH,
               r->host);
    if (conf->token != NULL && conf->token[0] != '\0')
        buf_printf(&r->out, "Authorization: Bearer %s\r\n", conf->token);
    buf_printf(&r->out,
               "Content-Type: application/json\r\nContent-Length: %zu\r\n"
               "Connection: close\r\n\r\n",
               buf_len(&body));
    buf_append(&r->out, buf_ptr(&body), buf_len(&body));
    buf_dispose(&csr);
    buf_dispose(&body);
    r->ctx = SSL_CTX_new(TLS_method());
    if (r->ctx == NULL ||
        (conf->cred != NULL && ca_cred_use(conf->cred, r->ctx) < 0)) {
        *err = strdup("cannot set up TLS");
        goto fail;
    }
    SSL_CTX_set_min_proto_version(r->ctx, TLS1_2_VERSION);
    SSL_CTX_set_custom_verify(r->ctx, SSL_VERIFY_PEER, verify_server);
    fd = sock_connect(&a, &in_progress);
    if (fd < 0) {
        if (asprintf(err, "cannot connect to the CA at %s: %s", conf->url,
                     strerror(errno)) < 0)
            *err = NULL;
        goto fail;
    }
    conn_init(&r->c, base, fd, on_io, r);
    if (tls_conn_connect(&r->c, r->ctx, NULL) < 0) {
        *err = strdup("cannot set up TLS");
        goto fail;
    }
    SSL_set_app_data(r->c.tls, r);
    r->timer = evtimer_new(base, on_timeout, r);
    if (r->timer == NULL || evtimer_add(r->timer, &tv) < 0) {
        *err = strdup("cannot arm a timer");
        goto fail;
    }
    if (in_progress) {
        r->connecting = 1;
        conn_want(&r->c, 0, 1);
    } else {
        r->c.handshaking = 1;
        conn_want(&r->c, 1, 1);
    }
    return r;
fail:
    ca_client_cancel(r);
    return NULL;
}

void ca_client_cancel(struct ca_client_req *r)
{
    if (r == NULL)
        return;
    if (r->c.fd >= 0)
        conn_close(&r->c);
    if (r->timer)
        event_free(r->timer);
    SSL_CTX_free(r->ctx);
    EVP_PKEY_free(r->key);
    /* The request carried the token. */
    if (buf_len(&r->out) > 0)
        OPENSSL_cleanse((void *)buf_ptr(&r->out), buf_len(&r->out));
    buf_dispose(&r->out);
    buf_dispose(&r->in);
    free(r->host);
    free(r);
}

struct fetch {
    struct event_base *base;
    struct ca_cred *cred;
    char *err;
    int done;
};

static void fetch_done(void *arg, struct ca_cred *cred, const char *err)
{
    struct fetch *f = arg;

    f->cred = cred;
    f->err = err ? strdup(err) : NULL;
    f->done = 1;
    event_base_loopbreak(f->base);
}

struct ca_cred *ca_client_fetch(const struct ca_client_conf *conf, char **err)
{
    struct fetch f = {event_base_new(), NULL, NULL, 0};

    *err = NULL;
    if (f.base == NULL) {
        *err = strdup("cannot create an event loop");
        return NULL;
    }
    if (ca_client_request(f.base, conf, fetch_done, &f, err) != NULL)
        while (!f.done && event_base_dispatch(f.base) == 0)
            ;
    event_base_free(f.base);
    if (f.err != NULL)
        *err = f.err;
    return f.cred;
}
