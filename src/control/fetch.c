/*
 * One HTTP/1.1 exchange over the conn transport (see fetch.h): the request
 * is written whole, the answer collected in one capped buffer and parsed
 * again from its start each time bytes arrive, which is simple and cheap
 * for the few small answers the control thread asks for.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <openssl/mem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "control/dns.h"
#include "control/fetch.h"
#include "core/addr.h"
#include "core/buf.h"
#include "core/err.h"
#include "event/timer.h"
#include "http1/parser.h"
#include "net/conn.h"
#include "net/sock.h"
#include "tls/tls.h"

#define MAX_HEAD (16 * 1024)

struct fetch {
    fetch_cb cb;
    void *arg;
    char *host, *name;
    int port, tls, connecting, verify_name;
    struct ssl_ctx_st *ctx;
    struct event_base *base;
    struct dns_query *q; /* resolving host, or NULL */
    size_t max_body;
    struct conn conn;
    struct timer deadline;
    struct buf out, in, body;
    struct h1_header hdrs[FETCH_MAX_HEADERS];
};

/* finish() closes the connection and calls back; nothing touches f after
 * the call, which may free it. */
static void finish(struct fetch *f, const struct fetch_answer *a,
                   const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void finish(struct fetch *f, const struct fetch_answer *a,
                   const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    if (f->conn.fd >= 0)
        conn_close(&f->conn);
    f->conn.fd = -1;
    dns_query_cancel(f->q);
    f->q = NULL;
    timer_cancel(&f->deadline);
    if (fmt != NULL) {
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
    }
    f->cb(f->arg, a, fmt ? msg : NULL);
}

/* The chunked body in p: FETCH_DONE, FETCH_MORE or an error. Decoded from
 * the start each time more arrives; the body is bounded by the input
 * buffer and by max_body. */
static int parse_chunked(const char *p, size_t left, int eof, struct buf *body,
                         struct fetch_answer *a, const char **why)
{
    struct h1_chunked ch;
    int done;

    *why = NULL;
    h1_chunked_init(&ch);
    buf_dispose(body);
    while (!h1_chunked_done(&ch)) {
        struct h1_slice d = {NULL, 0};
        ssize_t used = h1_chunked_decode(&ch, p, left, &d, why);
        if (used < 0)
            break;
        if (d.n > 0 && buf_append(body, d.p, d.n) < 0) {
            *why = "too large";
            break;
        }
        if (used == 0)
            break; /* needs more */
        p += used;
        left -= (size_t)used;
    }
    done = h1_chunked_done(&ch);
    h1_chunked_dispose(&ch);
    if (done) {
        /* buf_ptr() of a buffer never filled is NULL plus an offset. */
        a->n = buf_len(body);
        a->body = a->n > 0 ? buf_ptr(body) : "";
        return FETCH_DONE;
    }
    if (*why != NULL)
        return FETCH_BAD_CHUNKED;
    return eof ? FETCH_CUT_SHORT : FETCH_MORE;
}

int fetch_parse(const char *p, size_t len, int eof, size_t max_body,
                struct h1_header *hdrs, struct buf *body,
                struct fetch_answer *a, const char **why)
{
    struct http_limits lim = http_limits_default();
    struct h1_response resp;
    size_t have;
    int status, head;

    lim.max_headers = FETCH_MAX_HEADERS;
    lim.underscores = HTTP_US_ALLOW;
    resp.headers = hdrs;
    for (;;) {
        head = h1_parse_response(p, len, &lim, NULL, &resp, why, &status);
        if (head <= 0 || resp.status >= 200 || resp.status == 101)
            break;
        /* An interim answer (100 Continue): the real one follows. */
        p += head;
        len -= (size_t)head;
    }
    if (head < 0)
        return FETCH_BAD_HTTP;
    if (head == 0)
        return eof ? FETCH_NO_ANSWER : FETCH_MORE;
    p += head;
    have = len - (size_t)head;
    a->status = resp.status;
    a->headers = hdrs;
    a->nheaders = resp.nheaders;
    a->body = p;
    switch (resp.body) {
    case H1_BODY_LENGTH:
        if (resp.content_length > max_body)
            return FETCH_TOO_LARGE;
        if (have < resp.content_length)
            return eof ? FETCH_CUT_SHORT : FETCH_MORE;
        a->n = (size_t)resp.content_length;
        return FETCH_DONE;
    case H1_BODY_EOF:
        if (have > max_body)
            return FETCH_TOO_LARGE;
        a->n = have;
        return eof ? FETCH_DONE : FETCH_MORE;
    case H1_BODY_CHUNKED:
        return parse_chunked(p, have, eof, body, a, why);
    default:
        a->body = "";
        a->n = 0;
        return FETCH_DONE;
    }
}

/* 1 when the answer is complete (and handled), 0 for more bytes. */
static int try_answer(struct fetch *f, int eof)
{
    struct fetch_answer a;
    const char *why = NULL;

    switch (fetch_parse(buf_ptr(&f->in), buf_len(&f->in), eof, f->max_body,
                        f->hdrs, &f->body, &a, &why)) {
    case FETCH_MORE:
        return 0;
    case FETCH_DONE:
        finish(f, &a, NULL);
        break;
    case FETCH_BAD_HTTP:
        finish(f, NULL, "%s answered with bad HTTP (%s)", f->name, why);
        break;
    case FETCH_NO_ANSWER:
        finish(f, NULL, "%s closed the connection without an answer", f->name);
        break;
    case FETCH_TOO_LARGE:
        finish(f, NULL, "the answer from %s is larger than %zu bytes", f->name,
               f->max_body);
        break;
    case FETCH_CUT_SHORT:
        finish(f, NULL, "the answer from %s was cut short", f->name);
        break;
    default:
        finish(f, NULL, "%s sent a bad chunked body (%s)", f->name, why);
        break;
    }
    return 1;
}

static void on_io(struct conn *cn, void *arg)
{
    struct fetch *f = arg;

    if (f->connecting) {
        int err = sock_error(cn->fd);
        if (err != 0) {
            finish(f, NULL, "cannot connect to %s: %s", f->name, strerror(err));
            return;
        }
        f->connecting = 0;
        cn->handshaking = f->tls;
    }
    if (cn->handshaking) {
        int rc = cn->ops->handshake(cn);
        if (rc < 0) {
            const char *v = tls_conn_verify_error(cn);
            finish(f, NULL, "TLS handshake with %s failed (%s)", f->name,
                   v ? v : tls_conn_failure(cn));
            return;
        }
        if (rc == 0) {
            conn_want(cn, 1, 0);
            return;
        }
        cn->handshaking = 0;
    }
    while (buf_len(&f->out) > 0) {
        ssize_t w = conn_write(cn, buf_ptr(&f->out), buf_len(&f->out));
        if (w == CONN_AGAIN) {
            conn_want(cn, 0, 1);
            return;
        }
        if (w <= 0) {
            finish(f, NULL, "lost the connection to %s while sending (%s)",
                   f->name, cn->why ? cn->why : "closed");
            return;
        }
        buf_consume(&f->out, (size_t)w);
    }
    for (;;) {
        size_t room;
        char *p = buf_reserve_any(&f->in, &room);
        ssize_t n;

        if (p == NULL) {
            finish(f, NULL, "the answer from %s is larger than %zu bytes",
                   f->name, f->max_body);
            return;
        }
        n = conn_read(cn, p, room);
        if (n == CONN_AGAIN) {
            conn_want(cn, 1, 0);
            return;
        }
        if (n == CONN_ERROR) {
            finish(f, NULL, "lost the connection to %s (%s)", f->name,
                   cn->why ? cn->why : "error");
            return;
        }
        if (n > 0)
            buf_commit(&f->in, (size_t)n);
        if (try_answer(f, n == 0))
            return;
    }
}

static void on_deadline(void *arg)
{
    struct fetch *f = arg;

    if (f->q != NULL)
        finish(f, NULL, "cannot resolve %s in time", f->host);
    else
        finish(f, NULL, "no answer in time from %s", f->name);
}

/* A name is sent as SNI and checked against the certificate's DNS names;
 * an address literal is checked against its IP names. */
static int tls_setup(struct fetch *f, struct ssl_ctx_st *ctx, int verify_name)
{
    struct in6_addr ip;
    int literal = inet_pton(AF_INET, f->host, &ip) == 1 ||
                  inet_pton(AF_INET6, f->host, &ip) == 1;

    if (!verify_name)
        return tls_conn_connect(&f->conn, ctx, NULL);
    if (tls_conn_connect(&f->conn, ctx, literal ? NULL : f->host) < 0)
        return -1;
    if (literal &&
        !X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(f->conn.tls), f->host))
        return -1;
    return 0;
}

/* Opens the connection to a (the host's address) and starts the
 * exchange; 0, or -1 with an allocated message in *err. */
static int start_connect(struct fetch *f, const struct addr *a, char **err)
{
    int fd, in_progress = 0;

    fd = sock_connect(a, &in_progress);
    if (fd < 0) {
        err_set(err, "cannot connect to %s: %s", f->name, strerror(errno));
        return -1;
    }
    conn_init(&f->conn, f->base, fd, on_io, f);
    if (f->tls && tls_setup(f, f->ctx, f->verify_name) < 0) {
        err_set(err, "cannot set up TLS");
        return -1;
    }
    f->connecting = in_progress;
    if (in_progress) {
        conn_want(&f->conn, 0, 1);
    } else {
        f->conn.handshaking = f->tls;
        conn_want(&f->conn, 1, 1);
    }
    return 0;
}

static void on_resolved(void *arg, const struct addr *a, const char *why)
{
    struct fetch *f = arg;
    char *err = NULL;

    f->q = NULL;
    if (a == NULL) {
        finish(f, NULL, "cannot resolve %s (%s)", f->host, why);
        return;
    }
    if (start_connect(f, a, &err) < 0) {
        finish(f, NULL, "%s", err ? err : "out of memory");
        free(err);
    }
}

struct fetch *fetch_new(struct event_base *base, const struct fetch_conf *conf,
                        fetch_cb cb, void *arg, char **err)
{
    struct fetch *f = calloc(1, sizeof(*f));
    int64_t to = conf->timeout_ms > 0 ? conf->timeout_ms : 15000;
    struct addr a;

    *err = NULL;
    if (f == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    f->cb = cb;
    f->arg = arg;
    f->base = base;
    f->conn.fd = -1;
    f->port = conf->port;
    f->tls = conf->ctx != NULL;
    f->ctx = conf->ctx;
    f->verify_name = conf->verify_name;
    f->max_body = conf->max_body;
    buf_init(&f->out, strlen(conf->path) + conf->body_n + 8192 +
                          (conf->headers ? strlen(conf->headers) : 0));
    buf_init(&f->in, conf->max_body + MAX_HEAD);
    buf_init(&f->body, conf->max_body);
    f->host = strdup(conf->host);
    f->name = strdup(conf->name ? conf->name : conf->host);
    timer_init(&f->deadline, base, on_deadline, f);
    if (f->host == NULL || f->name == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    buf_printf(&f->out, "%s %s HTTP/1.1\r\nHost: %s\r\n%s", conf->method,
               conf->path, f->host, conf->headers ? conf->headers : "");
    if (conf->body != NULL)
        buf_printf(&f->out, "Content-Length: %zu\r\n", conf->body_n);
    buf_printf(&f->out, "Connection: close\r\n\r\n");
    if (conf->body != NULL &&
        buf_append(&f->out, conf->body, conf->body_n) < 0) {
        err_set(err, "out of memory");
        goto fail;
    }
    /* The deadline covers resolving the name too. */
    if (addr_literal(&a, f->host, f->port) == 0) {
        if (start_connect(f, &a, err) < 0)
            goto fail;
    } else if (conf->dns == NULL) {
        err_set(err, "cannot resolve %s: no resolver here (use an address)",
                f->host);
        goto fail;
    } else {
        f->q = dns_resolve(conf->dns, f->host, f->port, on_resolved, f);
        if (f->q == NULL) {
            err_set(err, "out of memory");
            goto fail;
        }
    }
    timer_arm(&f->deadline, (uint64_t)to);
    return f;
fail:
    fetch_free(f);
    return NULL;
}

void fetch_free(struct fetch *f)
{
    if (f == NULL)
        return;
    if (f->conn.fd >= 0)
        conn_close(&f->conn);
    dns_query_cancel(f->q);
    timer_dispose(&f->deadline);
    if (buf_len(&f->out) > 0)
        OPENSSL_cleanse((void *)buf_ptr(&f->out), buf_len(&f->out));
    buf_dispose(&f->out);
    buf_dispose(&f->in);
    buf_dispose(&f->body);
    free(f->host);
    free(f->name);
    free(f);
}
