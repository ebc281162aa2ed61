/*
 * CA API client: connect, TLS with a pinned root, POST a CSR, read the
 * chain, check it, hand back a credential.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/mem.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/ca/ca_api.h"
#include "control/ca/ca_client.h"
#include "control/ca/ca_server.h"
#include "control/ca/csr.h"
#include "control/ca/identity.h"
#include "control/ca/pki.h"
#include "control/dns.h"
#include "control/fetch.h"
#include "core/buf.h"
#include "core/err.h"

struct ca_client_req {
    ca_client_cb cb;
    void *arg;
    uint8_t pin[32];
    EVP_PKEY *key;
    SSL_CTX *ctx;
    struct fetch *f;
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
    struct ca_client_req *r = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
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

static void on_fetched(void *arg, const struct fetch_answer *a, const char *err)
{
    struct ca_client_req *r = arg;

    if (err != NULL)
        fail(r, "%s", r->verify_err[0] ? r->verify_err : err);
    else
        handle_response(r, a->status, a->body, a->n);
}

struct ca_client_req *ca_client_request(struct event_base *base,
                                        const struct ca_client_conf *conf,
                                        ca_client_cb cb, void *arg, char **err)
{
    struct ca_client_req *r = calloc(1, sizeof(*r));
    struct fetch_conf fc = {0};
    struct buf csr, body, hdrs;
    const char *why;
    char *host = NULL, *ferr = NULL;

    *err = NULL;
    if (r == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    r->cb = cb;
    r->arg = arg;
    memcpy(r->pin, conf->pin, 32);
    EVP_PKEY_up_ref(conf->key);
    r->key = conf->key;
    buf_init(&csr, CSR_MAX_PEM);
    buf_init(&body, CA_API_MAX_BODY);
    buf_init(&hdrs, 8192);
    if (ca_client_parse_url(conf->url, &host, &fc.port, &why) < 0) {
        err_set(err, "%s: %s", conf->url, why);
        goto fail;
    }
    if (csr_new(r->key, NULL, &csr) < 0 ||
        ca_api_request_write(&body, buf_cstr(&csr), conf->validity_s) < 0) {
        err_set(err, "cannot build the certificate request");
        goto fail;
    }
    if (conf->token != NULL && conf->token[0] != '\0')
        buf_printf(&hdrs, "Authorization: Bearer %s\r\n", conf->token);
    buf_printf(&hdrs, "Content-Type: application/json\r\n");
    r->ctx = SSL_CTX_new(TLS_method());
    if (r->ctx == NULL ||
        (conf->cred != NULL && ca_cred_use(conf->cred, r->ctx) < 0)) {
        err_set(err, "cannot set up TLS");
        goto fail;
    }
    SSL_CTX_set_min_proto_version(r->ctx, TLS1_2_VERSION);
    SSL_CTX_set_custom_verify(r->ctx, SSL_VERIFY_PEER, verify_server);
    SSL_CTX_set_app_data(r->ctx, r);
    fc.host = host;
    fc.method = "POST";
    fc.path = CA_API_PATH;
    fc.headers = buf_cstr(&hdrs);
    fc.body = buf_ptr(&body);
    fc.body_n = buf_len(&body);
    fc.ctx = r->ctx;
    fc.name = "the CA";
    fc.timeout_ms =
        (int64_t)(conf->timeout_s > 0 ? conf->timeout_s : 15) * 1000;
    fc.max_body = CA_API_MAX_BODY;
    fc.dns = conf->dns;
    r->f = fetch_new(base, &fc, on_fetched, r, &ferr);
    if (r->f == NULL) {
        err_set(err, "%s: %s", conf->url, ferr ? ferr : "?");
        goto fail;
    }
    OPENSSL_cleanse((void *)buf_ptr(&hdrs), buf_len(&hdrs));
    buf_dispose(&hdrs);
    buf_dispose(&body);
    buf_dispose(&csr);
    free(host);
    return r;
fail:
    /* The headers carried the token. */
    if (buf_len(&hdrs) > 0)
        OPENSSL_cleanse((void *)buf_ptr(&hdrs), buf_len(&hdrs));
    buf_dispose(&hdrs);
    buf_dispose(&body);
    buf_dispose(&csr);
    free(host);
    free(ferr);
    ca_client_cancel(r);
    return NULL;
}

void ca_client_cancel(struct ca_client_req *r)
{
    if (r == NULL)
        return;
    fetch_free(r->f);
    SSL_CTX_free(r->ctx);
    EVP_PKEY_free(r->key);
    free(r);
}

struct blocking {
    struct event_base *base;
    struct ca_cred *cred;
    char *err;
    int done;
};

static void blocking_done(void *arg, struct ca_cred *cred, const char *err)
{
    struct blocking *f = arg;

    f->cred = cred;
    f->err = err ? strdup(err) : NULL;
    f->done = 1;
    event_base_loopbreak(f->base);
}

static void no_change(void *arg)
{
    (void)arg;
}

struct ca_cred *ca_client_fetch(const struct ca_client_conf *conf, char **err)
{
    struct blocking f = {event_base_new(), NULL, NULL, 0};
    const struct dns_conf sys = {NULL, 0, 5000, 5000, NULL};
    struct ca_client_conf cc = *conf;
    struct ca_client_req *r;

    *err = NULL;
    if (f.base == NULL) {
        err_set(err, "cannot create an event loop");
        return NULL;
    }
    /* The private loop's own resolver, with the bootstrap's settings: a
     * join by name resolves as every other name does. */
    cc.dns = dns_cache_new(f.base, conf->dns_conf ? conf->dns_conf : &sys,
                           no_change, NULL, err);
    if (cc.dns == NULL) {
        event_base_free(f.base);
        return NULL;
    }
    r = ca_client_request(f.base, &cc, blocking_done, &f, err);
    if (r != NULL) {
        while (!f.done && event_base_dispatch(f.base) == 0)
            ;
        if (!f.done)
            ca_client_cancel(r);
    }
    dns_cache_free(cc.dns);
    event_base_free(f.base);
    if (f.err != NULL)
        err_give(err, f.err);
    return f.cred;
}
