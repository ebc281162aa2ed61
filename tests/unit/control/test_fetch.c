/*
 * Unit tests for src/control/fetch.c against a one-connection HTTP server
 * on a thread of the test (blocking sockets on loopback; TLS with a
 * certificate made here). The fetch runs on the test's event loop until
 * it calls back. Covered: Content-Length, chunked and close-delimited
 * bodies, the request as written (headers, body), the size cap, the
 * deadline, a malformed status line, a refused connection, an unknown
 * host, and TLS with the right root and with a wrong one.
 */
#include "config.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <openssl/bn.h>
#include <openssl/ec_key.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "control/fetch.h"
#include "http1/parser.h"
#include "tls/tls.h"

struct srv {
    int lfd, port;
    const char *answer; /* sent whole, in two writes, then closed */
    int hang;           /* answer nothing; wait for the client to leave */
    SSL_CTX *tls;       /* NULL: plain TCP */
    char req[8192];     /* the request as received */
    size_t reqn;
    pthread_t th;
};

struct res {
    int done;
    int status;
    char *body;
    size_t n;
    char *err;
    char *ctype; /* the content-type header of the answer, or NULL */
    struct fetch *f;
};

/* Reads the request: the head and as many body bytes as Content-Length
 * says. */
static void read_request(struct srv *s, int fd, SSL *ssl)
{
    for (;;) {
        char *end;
        const char *cl;
        ssize_t n =
            ssl ? SSL_read(ssl, s->req + s->reqn,
                           (int)(sizeof(s->req) - 1 - s->reqn))
                : recv(fd, s->req + s->reqn, sizeof(s->req) - 1 - s->reqn, 0);
        if (n <= 0)
            return;
        s->reqn += (size_t)n;
        s->req[s->reqn] = '\0';
        end = strstr(s->req, "\r\n\r\n");
        if (end == NULL)
            continue;
        cl = strstr(s->req, "Content-Length: ");
        if (cl == NULL || cl > end ||
            s->reqn >= (size_t)(end + 4 - s->req) + strtoul(cl + 16, NULL, 10))
            return;
    }
}

static void *serve(void *arg)
{
    struct srv *s = arg;
    int fd = accept(s->lfd, NULL, NULL);
    SSL *ssl = NULL;
    char sink[256];

    if (fd < 0)
        return NULL;
    if (s->tls != NULL) {
        ssl = SSL_new(s->tls);
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) != 1)
            goto out;
    }
    read_request(s, fd, ssl);
    if (s->hang) {
        /* Until the client gives up. */
        while ((ssl ? SSL_read(ssl, sink, sizeof(sink))
                    : recv(fd, sink, sizeof(sink), 0)) > 0)
            ;
        goto out;
    }
    {
        size_t n = strlen(s->answer), half = n / 2;
        if (ssl) {
            SSL_write(ssl, s->answer, (int)half);
            SSL_write(ssl, s->answer + half, (int)(n - half));
        } else {
            (void)!send(fd, s->answer, half, MSG_NOSIGNAL);
            (void)!send(fd, s->answer + half, n - half, MSG_NOSIGNAL);
        }
    }
out:
    if (ssl != NULL) {
        SSL_shutdown(ssl);
        SSL_free(ssl);
    }
    close(fd);
    return NULL;
}

static void srv_start(struct srv *s, const char *answer, SSL_CTX *tls, int hang)
{
    struct sockaddr_in a = {0};
    socklen_t al = sizeof(a);

    memset(s, 0, sizeof(*s));
    s->answer = answer;
    s->tls = tls;
    s->hang = hang;
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(s->lfd, 4), 0);
    assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&a, &al), 0);
    s->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&s->th, NULL, serve, s), 0);
}

static void srv_stop(struct srv *s)
{
    pthread_join(s->th, NULL);
    close(s->lfd);
}

static void on_done(void *arg, const struct fetch_answer *a, const char *err)
{
    struct res *r = arg;

    r->done++;
    if (err != NULL) {
        r->err = strdup(err);
    } else {
        const struct h1_header *h =
            h1_header_find(a->headers, a->nheaders, "content-type");
        r->status = a->status;
        r->body = strndup(a->body, a->n);
        r->n = a->n;
        if (h != NULL)
            r->ctype = strndup(h->value.p, h->value.n);
    }
    /* Freed inside its own callback, as the callers do. */
    fetch_free(r->f);
    r->f = NULL;
}

/* Runs one fetch to its callback: the deadline bounds the loop. */
static void run(struct res *r, const struct fetch_conf *conf)
{
    struct event_base *base = event_base_new();
    char *err = NULL;

    memset(r, 0, sizeof(*r));
    r->f = fetch_new(base, conf, on_done, r, &err);
    assert_null(err);
    assert_non_null(r->f);
    while (!r->done)
        assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
    assert_int_equal(r->done, 1);
    event_base_free(base);
}

static void res_dispose(struct res *r)
{
    free(r->body);
    free(r->err);
    free(r->ctype);
}

static struct fetch_conf get_conf(int port)
{
    struct fetch_conf c = {0};

    c.host = "127.0.0.1";
    c.port = port;
    c.method = "GET";
    c.path = "/doc";
    c.timeout_ms = 10000;
    c.max_body = 1024;
    return c;
}

/* Fetches answer from a plain server with conf's defaults. */
static void fetch_plain(struct res *r, const char *answer, size_t max_body)
{
    struct srv s;
    struct fetch_conf c;

    srv_start(&s, answer, NULL, 0);
    c = get_conf(s.port);
    c.max_body = max_body;
    run(r, &c);
    srv_stop(&s);
}

static void test_content_length_and_request(void **state)
{
    struct srv s;
    struct fetch_conf c;
    struct res r;
    (void)state;

    srv_start(&s,
              "HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\n"
              "Content-Length: 5\r\n\r\nhello",
              NULL, 0);
    c = get_conf(s.port);
    c.method = "POST";
    c.headers = "X-Token: t1\r\n";
    c.body = "{\"a\":1}";
    c.body_n = 7;
    run(&r, &c);
    srv_stop(&s);
    assert_null(r.err);
    assert_int_equal(r.status, 201);
    assert_int_equal(r.n, 5);
    assert_string_equal(r.body, "hello");
    assert_string_equal(r.ctype, "text/plain");
    assert_string_equal(s.req, "POST /doc HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               "X-Token: t1\r\nContent-Length: 7\r\n"
                               "Connection: close\r\n\r\n{\"a\":1}");
    res_dispose(&r);
}

static void test_chunked(void **state)
{
    struct res r;
    (void)state;

    /* Complete at the last chunk; the server's close is not needed. */
    fetch_plain(&r,
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                "3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\n\r\n",
                1024);
    assert_null(r.err);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "abcdefg");
    res_dispose(&r);
}

static void test_close_delimited(void **state)
{
    struct res r;
    (void)state;

    fetch_plain(&r, "HTTP/1.0 200 OK\r\n\r\nuntil the end", 1024);
    assert_null(r.err);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "until the end");
    res_dispose(&r);
}

static void test_interim_and_no_body(void **state)
{
    struct res r;
    (void)state;

    fetch_plain(&r,
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
                1024);
    assert_null(r.err);
    assert_int_equal(r.status, 204);
    assert_int_equal(r.n, 0);
    res_dispose(&r);
}

static void test_too_large(void **state)
{
    struct res r;
    (void)state;

    fetch_plain(&r,
                "HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n"
                "0123456789abcdefg",
                16);
    assert_non_null(r.err);
    assert_string_equal(r.err,
                        "the answer from 127.0.0.1 is larger than 16 bytes");
    res_dispose(&r);
    fetch_plain(&r, "HTTP/1.0 200 OK\r\n\r\n0123456789abcdefg", 16);
    assert_string_equal(r.err,
                        "the answer from 127.0.0.1 is larger than 16 bytes");
    res_dispose(&r);
    fetch_plain(&r,
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                "9\r\n012345678\r\n9\r\n012345678\r\n0\r\n\r\n",
                16);
    assert_string_equal(r.err, "127.0.0.1 sent a bad chunked body (too large)");
    res_dispose(&r);
    /* Exactly the cap is fine. */
    fetch_plain(&r,
                "HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n"
                "0123456789abcdef",
                16);
    assert_null(r.err);
    assert_int_equal(r.n, 16);
    res_dispose(&r);
}

static void test_cut_short_and_bad(void **state)
{
    struct res r;
    (void)state;

    fetch_plain(&r, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 1024);
    assert_string_equal(r.err, "the answer from 127.0.0.1 was cut short");
    res_dispose(&r);
    fetch_plain(&r, "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", 1024);
    assert_non_null(r.err);
    assert_non_null(strstr(r.err, "127.0.0.1 answered with bad HTTP ("));
    res_dispose(&r);
    fetch_plain(&r,
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                "zz\r\nabc\r\n0\r\n\r\n",
                1024);
    assert_non_null(strstr(r.err, "127.0.0.1 sent a bad chunked body ("));
    res_dispose(&r);
    fetch_plain(&r, "", 1024);
    assert_string_equal(r.err,
                        "127.0.0.1 closed the connection without an answer");
    res_dispose(&r);
}

static void test_timeout(void **state)
{
    struct srv s;
    struct fetch_conf c;
    struct res r;
    (void)state;

    srv_start(&s, NULL, NULL, 1);
    c = get_conf(s.port);
    c.timeout_ms = 100;
    c.name = "the test server";
    run(&r, &c);
    srv_stop(&s);
    assert_string_equal(r.err, "no answer in time from the test server");
    res_dispose(&r);
}

static void test_refused_and_unresolvable(void **state)
{
    struct fetch_conf c;
    struct res r;
    struct event_base *base = event_base_new();
    struct srv s;
    char *err = NULL;
    int port;
    (void)state;

    /* A port nobody listens on: bound, then closed. */
    srv_start(&s, "", NULL, 0);
    port = s.port;
    {
        /* Let the thread end: connect once and leave. */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        close(fd);
    }
    srv_stop(&s);
    c = get_conf(port);
    c.name = "the CA";
    memset(&r, 0, sizeof(r));
    r.f = fetch_new(base, &c, on_done, &r, &err);
    if (r.f != NULL) {
        while (!r.done)
            assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
    } else {
        r.err = err;
    }
    assert_non_null(r.err);
    assert_non_null(strstr(r.err, "cannot connect to the CA: "));
    res_dispose(&r);

    c = get_conf(port);
    c.host = "no-such-host.invalid";
    err = NULL;
    assert_null(fetch_new(base, &c, on_done, &r, &err));
    assert_string_equal(err, "cannot resolve no-such-host.invalid: no "
                             "resolver here (use an address)");
    free(err);
    event_base_free(base);
}

/* A self-signed certificate for IP 127.0.0.1 with key k. */
static X509 *self_signed(EVP_PKEY *k, const char *cn)
{
    X509 *x = X509_new();
    X509_NAME *nm = X509_NAME_new();
    static const uint8_t lo[4] = {127, 0, 0, 1};
    GENERAL_NAMES *names;
    GENERAL_NAME *g;
    ASN1_OCTET_STRING *ip;

    assert_non_null(x);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC,
                               (const unsigned char *)cn, -1, -1, 0);
    X509_set_subject_name(x, nm);
    X509_set_issuer_name(x, nm);
    X509_NAME_free(nm);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, k);
    names = GENERAL_NAMES_new();
    ip = ASN1_OCTET_STRING_new();
    g = GENERAL_NAME_new();
    assert_true(names && ip && g);
    assert_true(ASN1_OCTET_STRING_set(ip, lo, 4));
    GENERAL_NAME_set0_value(g, GEN_IPADD, ip);
    assert_true(sk_GENERAL_NAME_push(names, g));
    assert_true(X509_add1_ext_i2d(x, NID_subject_alt_name, names, 0, 0));
    GENERAL_NAMES_free(names);
    assert_true(X509_sign(x, k, EVP_sha256()) > 0);
    return x;
}

static EVP_PKEY *ec_key(void)
{
    EVP_PKEY *k = EVP_PKEY_new();
    EC_KEY *ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);

    assert_true(EC_KEY_generate_key(ec));
    EVP_PKEY_assign_EC_KEY(k, ec);
    return k;
}

/* Fetches over TLS from a server showing its own self-signed certificate,
 * the client trusting trusted (a PEM file written here). */
static void fetch_tls(struct res *r, X509 *server, EVP_PKEY *key, X509 *trusted)
{
    char path[] = "/tmp/test_fetch_ca_XXXXXX";
    int fd = mkstemp(path);
    FILE *fp = fdopen(fd, "w");
    SSL_CTX *sctx = SSL_CTX_new(TLS_method());
    SSL_CTX *cctx;
    char *err = NULL;
    struct fetch_conf c;
    struct srv s;

    assert_non_null(fp);
    assert_true(PEM_write_X509(fp, trusted));
    fclose(fp);
    cctx = tls_client_ctx_new(path, 0, 0, &err);
    assert_null(err);
    assert_non_null(cctx);
    unlink(path);
    assert_true(SSL_CTX_use_certificate(sctx, server));
    assert_true(SSL_CTX_use_PrivateKey(sctx, key));
    srv_start(&s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", sctx, 0);
    c = get_conf(s.port);
    c.ctx = cctx;
    c.verify_name = 1;
    run(r, &c);
    srv_stop(&s);
    SSL_CTX_free(cctx);
    SSL_CTX_free(sctx);
}

static void test_tls(void **state)
{
    EVP_PKEY *k1 = ec_key(), *k2 = ec_key();
    X509 *good = self_signed(k1, "server"), *other = self_signed(k2, "other");
    struct res r;
    (void)state;

    fetch_tls(&r, good, k1, good);
    assert_null(r.err);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ok");
    res_dispose(&r);

    /* A root that did not issue the server's certificate: refused, with
     * the verifier's reason. */
    fetch_tls(&r, good, k1, other);
    assert_non_null(r.err);
    assert_non_null(strstr(r.err, "TLS handshake with 127.0.0.1 failed ("));
    assert_non_null(strstr(r.err, X509_verify_cert_error_string(
                                      X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT)));
    res_dispose(&r);
    X509_free(good);
    X509_free(other);
    EVP_PKEY_free(k1);
    EVP_PKEY_free(k2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_content_length_and_request),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_close_delimited),
        cmocka_unit_test(test_interim_and_no_body),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_cut_short_and_bad),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_refused_and_unresolvable),
        cmocka_unit_test(test_tls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
