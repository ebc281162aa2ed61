/*
 * One request to etcd's JSON gateway (see etcd_http.h). Unlike fetch.c,
 * which parses a small answer again from its start each time bytes
 * arrive, the answer is decoded incrementally: a watch stream lives for
 * hours and carries any number of messages, so only the bytes of the
 * message being received are held.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/mem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "control/etcd_http.h"
#include "core/buf.h"
#include "event/timer.h"
#include "http1/parser.h"
#include "net/conn.h"
#include "net/sock.h"
#include "tls/tls.h"

#define MAX_HEAD (16 * 1024)
#define MAX_HEADERS 64

struct etcd_http {
    struct etcd_http_cb cb;
    int stream;
    int tls, connecting;
    int has_conn;
    int has_timer;
    size_t max_body;
    struct conn conn;
    struct timer deadline;
    struct buf out, in, body;
    /* The answer, once its head is read. */
    int status;
    int framing;   /* enum h1_body; -1 before the head */
    uint64_t left; /* H1_BODY_LENGTH: bytes still to come */
    struct h1_chunked ch;
    char *host;
    /* A stream message past max_body being skipped (cb.skipped): its
     * first bytes and its length so far. */
    int skipping;
    size_t skip_total, skip_head_n;
    char skip_head[ETCD_HTTP_SKIP_HEAD];
};

/* buf_ptr() of a buffer never filled is NULL plus an offset. */
static const char *bytes(const struct buf *b)
{
    return buf_len(b) > 0 ? buf_ptr(b) : "";
}

static void close_conn(struct etcd_http *h)
{
    if (h->has_conn)
        conn_close(&h->conn);
    h->has_conn = 0;
    if (h->has_timer)
        timer_cancel(&h->deadline);
}

/* The end: nothing touches h after done(), which may free it. */
static void finish(struct etcd_http *h, const char *err)
{
    const char *p = bytes(&h->body);

    close_conn(h);
    h->cb.done(h->cb.arg, h->status, p, buf_len(&h->body), err);
}

/* Stream messages found in body so far; 1 when line() ended it. */
static int split_lines(struct etcd_http *h)
{
    for (;;) {
        const char *p = bytes(&h->body);
        size_t n = buf_len(&h->body);
        const char *nl = n > 0 ? memchr(p, '\n', n) : NULL;
        size_t len;

        if (nl == NULL)
            return 0;
        len = (size_t)(nl - p);
        if (len > 0 && p[len - 1] == '\r')
            len--;
        if (len > 0 && h->cb.line(h->cb.arg, p, len) != 0)
            return 1;
        buf_consume(&h->body, (size_t)(nl - p) + 1);
    }
}

static const char etcd_http_msg_too_large[] =
    "a watch message is larger than the limit";
static const char etcd_http_answer_too_large[] =
    "the answer is larger than the limit";

int etcd_http_too_large(const char *err)
{
    return err == etcd_http_msg_too_large || err == etcd_http_answer_too_large;
}

/*
 * take_stream() is take_body() for a 200 stream whose caller skips what
 * is too large: whole messages go to line() as the body fills; a message
 * that alone fills max_body is dropped up to its newline and named to
 * skipped(), and the stream goes on. -1 when a callback ended it.
 */
static int take_stream(struct etcd_http *h, const char *p, size_t n)
{
    while (n > 0) {
        size_t room;

        if (h->skipping) {
            const char *nl = memchr(p, '\n', n);
            size_t k = nl != NULL ? (size_t)(nl - p) + 1 : n;
            h->skip_total += nl != NULL ? k - 1 : k;
            p += k;
            n -= k;
            if (nl == NULL)
                continue;
            h->skipping = 0;
            if (h->cb.skipped(h->cb.arg, h->skip_head, h->skip_head_n,
                              h->skip_total) != 0)
                return -1;
            continue;
        }
        room = buf_room(&h->body);
        if (n <= room)
            return buf_append(&h->body, p, n) < 0 ? -1 : 0;
        if (room > 0 && buf_append(&h->body, p, room) < 0)
            return -1;
        p += room;
        n -= room;
        if (split_lines(h))
            return -1;
        if (buf_room(&h->body) > 0)
            continue;
        /* One message fills the whole limit: skipped to its newline. */
        h->skip_head_n = buf_len(&h->body) < sizeof(h->skip_head)
                             ? buf_len(&h->body)
                             : sizeof(h->skip_head);
        memcpy(h->skip_head, bytes(&h->body), h->skip_head_n);
        h->skip_total = buf_len(&h->body);
        buf_consume(&h->body, buf_len(&h->body));
        h->skipping = 1;
    }
    return 0;
}

static int take_body(struct etcd_http *h, const char *p, size_t n)
{
    if (n == 0)
        return 0;
    if (h->stream && h->status == 200 && h->cb.skipped != NULL)
        return take_stream(h, p, n);
    if (buf_append(&h->body, p, n) < 0) {
        finish(h, h->stream && h->status == 200 ? etcd_http_msg_too_large
                                                : etcd_http_answer_too_large);
        return -1;
    }
    return 0;
}

/* Runs the parser over what is in h->in. 1 when the exchange ended. */
static int process(struct etcd_http *h, int eof)
{
    if (h->framing < 0) {
        struct http_limits lim = http_limits_default();
        struct h1_header hdrs[MAX_HEADERS];
        struct h1_response resp;
        const char *why = NULL;
        int st, head;

        lim.max_headers = MAX_HEADERS;
        lim.underscores = HTTP_US_ALLOW;
        resp.headers = hdrs;
        for (;;) {
            head = h1_parse_response(bytes(&h->in), buf_len(&h->in), &lim, NULL,
                                     &resp, &why, &st);
            if (head <= 0 || resp.status >= 200)
                break;
            buf_consume(&h->in, (size_t)head); /* 100 Continue */
        }
        if (head < 0) {
            finish(h, why ? why : "bad HTTP");
            return 1;
        }
        if (head == 0) {
            if (eof) {
                finish(h, "the connection closed before an answer");
                return 1;
            }
            if (buf_room(&h->in) == 0) {
                finish(h, "the answer's head is too large");
                return 1;
            }
            return 0;
        }
        buf_consume(&h->in, (size_t)head);
        h->status = resp.status;
        h->framing = (int)resp.body;
        h->left = resp.content_length;
        /* A stream has no deadline once it has begun. */
        if (h->stream && h->status == 200 && h->has_timer)
            timer_cancel(&h->deadline);
        if (h->framing == H1_BODY_LENGTH && h->left > h->max_body) {
            finish(h, etcd_http_answer_too_large);
            return 1;
        }
    }
    switch (h->framing) {
    case H1_BODY_LENGTH: {
        size_t n = buf_len(&h->in);
        if (n > h->left)
            n = (size_t)h->left;
        if (take_body(h, bytes(&h->in), n) < 0)
            return 1;
        buf_consume(&h->in, n);
        h->left -= n;
        if (h->stream && h->status == 200 && split_lines(h))
            return 1;
        if (h->left == 0) {
            finish(h, NULL);
            return 1;
        }
        break;
    }
    case H1_BODY_CHUNKED:
        while (buf_len(&h->in) > 0 && !h1_chunked_done(&h->ch)) {
            struct h1_slice d = {NULL, 0};
            const char *why = NULL;
            ssize_t used = h1_chunked_decode(&h->ch, bytes(&h->in),
                                             buf_len(&h->in), &d, &why);
            if (used < 0) {
                finish(h, why ? why : "bad chunked body");
                return 1;
            }
            if (take_body(h, d.p, d.n) < 0)
                return 1;
            if (used == 0)
                break;
            buf_consume(&h->in, (size_t)used);
            /* Messages go as soon as they are whole, so the limit is on
             * one message, not on what one read brought. */
            if (d.n > 0 && h->stream && h->status == 200 && split_lines(h))
                return 1;
        }
        if (h->stream && h->status == 200 && split_lines(h))
            return 1;
        if (h1_chunked_done(&h->ch)) {
            finish(h, NULL);
            return 1;
        }
        break;
    case H1_BODY_EOF:
        if (take_body(h, bytes(&h->in), buf_len(&h->in)) < 0)
            return 1;
        buf_consume(&h->in, buf_len(&h->in));
        if (h->stream && h->status == 200 && split_lines(h))
            return 1;
        if (eof) {
            finish(h, NULL);
            return 1;
        }
        break;
    default:
        finish(h, NULL);
        return 1;
    }
    if (eof) {
        finish(h, h->stream && h->status == 200 ? "the stream ended"
                                                : "the answer was cut short");
        return 1;
    }
    return 0;
}

int etcd_http_feed(struct etcd_http *h, const char *in, size_t n, int eof)
{
    while (n > 0) {
        size_t room;
        char *p = buf_reserve_any(&h->in, &room);
        if (p == NULL) {
            finish(h, etcd_http_answer_too_large);
            return 1;
        }
        if (room > n)
            room = n;
        memcpy(p, in, room);
        buf_commit(&h->in, room);
        in += room;
        n -= room;
        if (process(h, 0))
            return 1;
    }
    return eof ? process(h, 1) : 0;
}

static void on_io(struct conn *cn, void *arg)
{
    struct etcd_http *h = arg;

    if (h->connecting) {
        int err = sock_error(cn->fd);
        if (err != 0) {
            finish(h, strerror(err));
            return;
        }
        h->connecting = 0;
        cn->handshaking = h->tls;
    }
    if (cn->handshaking) {
        int rc = cn->ops->handshake(cn);
        if (rc < 0) {
            const char *v = tls_conn_verify_error(cn);
            char msg[256];
            snprintf(msg, sizeof(msg), "TLS handshake failed (%s)",
                     v ? v : tls_conn_failure(cn));
            finish(h, msg);
            return;
        }
        if (rc == 0) {
            conn_want(cn, 1, 0);
            return;
        }
        cn->handshaking = 0;
    }
    while (buf_len(&h->out) > 0) {
        ssize_t w = conn_write(cn, buf_ptr(&h->out), buf_len(&h->out));
        if (w == CONN_AGAIN) {
            conn_want(cn, 0, 1);
            return;
        }
        if (w <= 0) {
            finish(h, cn->why ? cn->why : "the connection closed");
            return;
        }
        buf_consume(&h->out, (size_t)w);
    }
    for (;;) {
        size_t room;
        char *p = buf_reserve_any(&h->in, &room);
        ssize_t n;

        if (p == NULL) {
            finish(h, etcd_http_answer_too_large);
            return;
        }
        n = conn_read(cn, p, room);
        if (n == CONN_AGAIN) {
            conn_want(cn, 1, 0);
            return;
        }
        if (n == CONN_ERROR) {
            char msg[256];
            /* Over TLS the member's alert (a client certificate it
             * refused) comes on the first read after the handshake. */
            snprintf(msg, sizeof(msg), "%s%s%s", h->tls ? "TLS error (" : "",
                     cn->why ? cn->why : "connection error", h->tls ? ")" : "");
            finish(h, msg);
            return;
        }
        if (n > 0)
            buf_commit(&h->in, (size_t)n);
        if (process(h, n == 0))
            return;
    }
}

static void on_deadline(void *arg)
{
    struct etcd_http *h = arg;

    finish(h, "no answer in time");
}

static struct etcd_http *alloc(size_t max_body, int stream,
                               const struct etcd_http_cb *cb)
{
    struct etcd_http *h = calloc(1, sizeof(*h));

    if (h == NULL)
        return NULL;
    h->cb = *cb;
    h->stream = stream;
    h->max_body = max_body;
    h->framing = -1;
    h->conn.fd = -1;
    buf_init(&h->in, max_body + MAX_HEAD);
    buf_init(&h->body, max_body);
    buf_init(&h->out, 0);
    h1_chunked_init(&h->ch);
    return h;
}

struct etcd_http *etcd_http_new_parser(size_t max_body, int stream,
                                       const struct etcd_http_cb *cb)
{
    return alloc(max_body, stream, cb);
}

/* A name is sent as SNI and checked against the certificate's DNS names;
 * an address literal is checked against its IP names. */
static int tls_setup(struct etcd_http *h, struct ssl_ctx_st *ctx)
{
    struct in6_addr ip;
    int literal = inet_pton(AF_INET, h->host, &ip) == 1 ||
                  inet_pton(AF_INET6, h->host, &ip) == 1;

    if (tls_conn_connect(&h->conn, ctx, literal ? NULL : h->host) < 0)
        return -1;
    if (literal &&
        !X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(h->conn.tls), h->host))
        return -1;
    return 0;
}

struct etcd_http *etcd_http_new(struct event_base *base,
                                const struct etcd_http_conf *conf,
                                const struct etcd_http_cb *cb, const char **why)
{
    struct etcd_http *h = alloc(conf->max_body, conf->stream, cb);
    int fd, in_progress = 0, one = 1;

    if (h == NULL) {
        *why = "out of memory";
        return NULL;
    }
    h->tls = conf->ctx != NULL;
    timer_init(&h->deadline, base, on_deadline, h);
    h->has_timer = 1;
    buf_init(&h->out, conf->body_n + strlen(conf->path) + strlen(conf->host) +
                          (conf->token ? strlen(conf->token) : 0) + 512);
    h->host = strdup(conf->host);
    if (h->host == NULL ||
        (conf->method == NULL &&
         buf_printf(&h->out,
                    "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: "
                    "application/json\r\nContent-Length: %zu\r\n",
                    conf->path, conf->host, conf->body_n) < 0) ||
        (conf->method != NULL &&
         buf_printf(&h->out,
                    "%s %s HTTP/1.1\r\nHost: %s\r\nAccept: "
                    "application/json\r\n",
                    conf->method, conf->path, conf->host) < 0) ||
        (conf->token != NULL &&
         buf_printf(&h->out, "Authorization: %s\r\n", conf->token) < 0) ||
        buf_puts(&h->out, "Connection: close\r\n\r\n") < 0 ||
        buf_append(&h->out, conf->body, conf->body_n) < 0) {
        *why = "out of memory";
        goto fail;
    }
    fd = sock_connect(&conf->addr, &in_progress);
    if (fd < 0) {
        *why = strerror(errno);
        goto fail;
    }
    /* A member that vanishes without a FIN (power, partition) is noticed
     * by keep-alive probes instead of never. */
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
#ifdef TCP_KEEPIDLE
    {
        int idle = 30, intvl = 10, cnt = 3;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    }
#endif
    conn_init(&h->conn, base, fd, on_io, h);
    h->has_conn = 1;
    if (h->tls && tls_setup(h, conf->ctx) < 0) {
        *why = "cannot set up TLS";
        goto fail;
    }
    timer_arm(&h->deadline,
              (uint64_t)(conf->timeout_ms > 0 ? conf->timeout_ms : 10000));
    h->connecting = in_progress;
    if (in_progress) {
        conn_want(&h->conn, 0, 1);
    } else {
        h->conn.handshaking = h->tls;
        conn_want(&h->conn, 1, 1);
    }
    return h;
fail:
    etcd_http_free(h);
    return NULL;
}

void etcd_http_free(struct etcd_http *h)
{
    if (h == NULL)
        return;
    close_conn(h);
    if (h->has_timer)
        timer_dispose(&h->deadline);
    if (buf_len(&h->out) > 0)
        OPENSSL_cleanse((void *)buf_ptr(&h->out), buf_len(&h->out));
    buf_dispose(&h->out);
    buf_dispose(&h->in);
    buf_dispose(&h->body);
    h1_chunked_dispose(&h->ch);
    free(h->host);
    free(h);
}
