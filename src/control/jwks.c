/*
 * The remote JWKS cache (see jwks.h): one entry per jwksUri, each with at
 * most one fetch in flight and one timer for the next. A fetch is one
 * HTTP/1.1 GET with "Connection: close" over the conn transport (TLS from
 * src/tls), its answer parsed with the HTTP/1 parser and checked with
 * jwt_keys_parse() before it replaces the last good document.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "control/jwks.h"
#include "core/addr.h"
#include "core/buf.h"
#include "core/json.h"
#include "core/list.h"
#include "core/log.h"
#include "http1/parser.h"
#include "net/conn.h"
#include "net/sock.h"
#include "policy/jwt.h"
#include "tls/tls.h"

#define MAX_HEADERS 64
#define MAX_HEAD (16 * 1024)
#define FIRST_RETRY_MS 1000

struct jwks_cache;

struct entry {
    struct jwks_cache *c;
    char *uri;
    char *doc; /* last good document; NULL: none yet */
    size_t n;
    int used;
    int64_t timeout_ms;
    uint64_t failures_in_a_row;
    struct event *timer; /* next fetch */
    /* The fetch in flight. */
    int busy;
    int tls, port, connecting;
    char *host, *path;
    struct conn conn;
    struct buf out, in;
    struct event *deadline;
    struct entry *next;
};

struct jwks_cache {
    struct event_base *base;
    jwks_change_fn on_change;
    void *arg;
    struct event *change_ev;
    struct jwks_conf conf;
    char *ca_file;
    struct ssl_ctx_st *ctx; /* https; made on first use */
    struct entry *list;
    struct jwks_stats st;
};

static void changed(struct jwks_cache *c)
{
    c->st.changes++;
    event_active(c->change_ev, EV_TIMEOUT, 0);
}

static void on_change_ev(evutil_socket_t fd, short what, void *arg)
{
    struct jwks_cache *c = arg;

    (void)fd;
    (void)what;
    c->on_change(c->arg);
}

static void arm(struct entry *e, int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};

    evtimer_add(e->timer, &tv);
}

/* end_fetch() closes the fetch in flight and schedules the next one. */
static void end_fetch(struct entry *e, const char *failure)
{
    struct jwks_cache *c = e->c;
    int64_t next = c->conf.refresh_ms;

    if (e->conn.fd >= 0)
        conn_close(&e->conn);
    e->conn.fd = -1;
    if (e->deadline != NULL)
        evtimer_del(e->deadline);
    buf_dispose(&e->out);
    buf_dispose(&e->in);
    free(e->host);
    free(e->path);
    e->host = e->path = NULL;
    e->busy = 0;
    if (failure != NULL) {
        c->st.failures++;
        log_warn("jwksUri %s: %s; %s", e->uri, failure,
                 e->doc ? "keeping the last good keys" : "no keys yet");
        /* Sooner than the refresh: 1 s, 2 s, 4 s ... */
        next = FIRST_RETRY_MS;
        for (uint64_t i = 0;
             i < e->failures_in_a_row && next < c->conf.refresh_ms; i++)
            next *= 2;
        if (next > c->conf.refresh_ms)
            next = c->conf.refresh_ms;
        e->failures_in_a_row++;
    } else {
        e->failures_in_a_row = 0;
    }
    arm(e, next);
}

static void take_document(struct entry *e, const char *body, size_t n)
{
    const char *why = NULL;
    struct jwt_keys *k = jwt_keys_parse(body, n, &why);
    char *doc;

    if (k == NULL) {
        char msg[256];
        snprintf(msg, sizeof(msg), "unusable JWKS (%s)", why);
        end_fetch(e, msg);
        return;
    }
    jwt_keys_free(k);
    if (e->doc != NULL && e->n == n && memcmp(e->doc, body, n) == 0) {
        end_fetch(e, NULL);
        return;
    }
    doc = malloc(n + 1);
    if (doc == NULL) {
        end_fetch(e, "out of memory");
        return;
    }
    memcpy(doc, body, n);
    doc[n] = '\0';
    free(e->doc);
    e->doc = doc;
    e->n = n;
    log_info("jwksUri %s: new keys", e->uri);
    end_fetch(e, NULL);
    changed(e->c);
}

/* 1 when the answer is complete (and handled), 0 for more bytes. */
static int try_answer(struct entry *e, int eof)
{
    struct h1_header hdrs[MAX_HEADERS];
    struct h1_limits lim = h1_limits_default();
    struct h1_response resp;
    const char *why;
    char msg[160];
    int status, head;
    size_t have;

    lim.max_headers = MAX_HEADERS;
    lim.underscores = H1_US_ALLOW;
    resp.headers = hdrs;
    head = h1_parse_response(buf_ptr(&e->in), buf_len(&e->in), &lim, NULL,
                             &resp, &why, &status);
    if (head < 0) {
        snprintf(msg, sizeof(msg), "bad HTTP answer (%s)", why);
        end_fetch(e, msg);
        return 1;
    }
    if (head == 0) {
        if (eof)
            end_fetch(e, "closed without an answer");
        return eof;
    }
    if (resp.status != 200) {
        snprintf(msg, sizeof(msg), "answered HTTP %d", resp.status);
        end_fetch(e, msg);
        return 1;
    }
    have = buf_len(&e->in) - (size_t)head;
    switch (resp.body) {
    case H1_BODY_LENGTH:
        if (resp.content_length > JSON_MAX_BYTES) {
            end_fetch(e, "document larger than 1 MiB");
            return 1;
        }
        if (have >= resp.content_length) {
            take_document(e, buf_ptr(&e->in) + head,
                          (size_t)resp.content_length);
            return 1;
        }
        break;
    case H1_BODY_EOF:
        if (eof) {
            take_document(e, buf_ptr(&e->in) + head, have);
            return 1;
        }
        break;
    case H1_BODY_CHUNKED: {
        /* Decoded from the start each time more arrives: simple, and the
         * body is bounded by the input buffer. Done once the last chunk
         * is in, whether or not the server closes. */
        struct h1_chunked ch;
        struct buf body;
        const char *p = buf_ptr(&e->in) + head;
        size_t left = have;
        int bad = 0;
        h1_chunked_init(&ch);
        buf_init(&body, JSON_MAX_BYTES);
        while (!h1_chunked_done(&ch)) {
            struct h1_slice d = {NULL, 0};
            ssize_t used = h1_chunked_decode(&ch, p, left, &d, &why);
            if (used < 0 || (d.n > 0 && buf_append(&body, d.p, d.n) < 0)) {
                bad = 1;
                break;
            }
            if (used == 0)
                break; /* needs more */
            p += used;
            left -= (size_t)used;
        }
        int done = h1_chunked_done(&ch);
        if (done)
            take_document(e, buf_ptr(&body), buf_len(&body));
        else if (bad || eof)
            end_fetch(e, bad ? "bad chunked body (or over 1 MiB)"
                             : "answer cut short");
        buf_dispose(&body);
        h1_chunked_dispose(&ch);
        return done || bad || eof;
    }
    default:
        end_fetch(e, "answer without a body");
        return 1;
    }
    if (eof) {
        end_fetch(e, "answer cut short");
        return 1;
    }
    return 0;
}

static void on_io(struct conn *cn, void *arg)
{
    struct entry *e = arg;
    char msg[200];

    if (e->connecting) {
        int err = sock_error(cn->fd);
        if (err != 0) {
            snprintf(msg, sizeof(msg), "cannot connect to %s:%d: %s", e->host,
                     e->port, strerror(err));
            end_fetch(e, msg);
            return;
        }
        e->connecting = 0;
        cn->handshaking = e->tls;
    }
    if (cn->handshaking) {
        int rc = cn->ops->handshake(cn);
        if (rc < 0) {
            const char *v = tls_conn_verify_error(cn);
            snprintf(msg, sizeof(msg), "TLS handshake with %s failed (%s)",
                     e->host, v ? v : tls_conn_failure(cn));
            end_fetch(e, msg);
            return;
        }
        if (rc == 0) {
            conn_want(cn, 1, 0);
            return;
        }
        cn->handshaking = 0;
    }
    while (buf_len(&e->out) > 0) {
        ssize_t w = conn_write(cn, buf_ptr(&e->out), buf_len(&e->out));
        if (w == CONN_AGAIN) {
            conn_want(cn, 0, 1);
            return;
        }
        if (w <= 0) {
            end_fetch(e, "connection lost while sending");
            return;
        }
        buf_consume(&e->out, (size_t)w);
    }
    for (;;) {
        size_t room;
        char *p = buf_reserve_any(&e->in, &room);
        ssize_t n;

        if (p == NULL) {
            end_fetch(e, "document larger than 1 MiB");
            return;
        }
        n = conn_read(cn, p, room);
        if (n == CONN_AGAIN) {
            conn_want(cn, 1, 0);
            return;
        }
        if (n == CONN_ERROR) {
            snprintf(msg, sizeof(msg), "connection lost (%s)",
                     cn->why ? cn->why : "error");
            end_fetch(e, msg);
            return;
        }
        if (n > 0)
            buf_commit(&e->in, (size_t)n);
        if (try_answer(e, n == 0))
            return;
    }
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    end_fetch(arg, "no answer in time");
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

static void start_fetch(struct entry *e)
{
    struct jwks_cache *c = e->c;
    int64_t to = e->timeout_ms > 0 ? e->timeout_ms : 5000;
    struct timeval tv = {(time_t)(to / 1000), (suseconds_t)(to % 1000) * 1000};
    struct addr a;
    const char *why;
    char msg[300];
    int fd, in_progress = 0;

    if (e->busy)
        return;
    c->st.fetches++;
    e->busy = 1;
    e->conn.fd = -1;
    buf_init(&e->out, 4096);
    buf_init(&e->in, JSON_MAX_BYTES + MAX_HEAD);
    if (jwt_parse_url(e->uri, &e->tls, &e->host, &e->port, &e->path, &why) <
        0) {
        end_fetch(e, why);
        return;
    }
    if (resolve(e->host, e->port, &a) < 0) {
        snprintf(msg, sizeof(msg), "cannot resolve %s", e->host);
        end_fetch(e, msg);
        return;
    }
    if (e->tls && c->ctx == NULL) {
        char *err = NULL;
        c->ctx = tls_client_ctx_new(c->ca_file, 0, 0, &err);
        if (c->ctx == NULL) {
            snprintf(msg, sizeof(msg), "%s", err ? err : "no TLS context");
            free(err);
            end_fetch(e, msg);
            return;
        }
    }
    buf_printf(&e->out,
               "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: application/json\r\n"
               "User-Agent: strait\r\nConnection: close\r\n\r\n",
               e->path, e->host);
    fd = sock_connect(&a, &in_progress);
    if (fd < 0) {
        snprintf(msg, sizeof(msg), "cannot connect to %s:%d: %s", e->host,
                 e->port, strerror(errno));
        end_fetch(e, msg);
        return;
    }
    conn_init(&e->conn, c->base, fd, on_io, e);
    if (e->tls) {
        /* A name is sent as SNI and checked against the certificate's DNS
         * names; an address literal is checked against its IP names. */
        struct in6_addr ip;
        int literal = inet_pton(AF_INET, e->host, &ip) == 1 ||
                      inet_pton(AF_INET6, e->host, &ip) == 1;
        if (tls_conn_connect(&e->conn, c->ctx, literal ? NULL : e->host) < 0 ||
            (literal && !X509_VERIFY_PARAM_set1_ip_asc(
                            SSL_get0_param(e->conn.tls), e->host))) {
            end_fetch(e, "cannot set up TLS");
            return;
        }
    }
    evtimer_add(e->deadline, &tv);
    e->connecting = in_progress;
    if (in_progress) {
        conn_want(&e->conn, 0, 1);
    } else {
        e->conn.handshaking = e->tls;
        conn_want(&e->conn, 1, 1);
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    start_fetch(arg);
}

static void entry_free(struct entry *e)
{
    if (e == NULL)
        return;
    if (e->busy) {
        if (e->conn.fd >= 0)
            conn_close(&e->conn);
        buf_dispose(&e->out);
        buf_dispose(&e->in);
        free(e->host);
        free(e->path);
    }
    if (e->timer != NULL)
        event_free(e->timer);
    if (e->deadline != NULL)
        event_free(e->deadline);
    free(e->doc);
    free(e->uri);
    free(e);
}

struct jwks_cache *jwks_cache_new(struct event_base *base,
                                  jwks_change_fn on_change, void *arg)
{
    struct jwks_cache *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->base = base;
    c->on_change = on_change;
    c->arg = arg;
    c->conf.refresh_ms = 5 * 60 * 1000;
    c->change_ev = event_new(base, -1, 0, on_change_ev, c);
    if (c->change_ev == NULL) {
        free(c);
        return NULL;
    }
    return c;
}

void jwks_cache_free(struct jwks_cache *c)
{
    if (c == NULL)
        return;
    while (c->list != NULL) {
        struct entry *e = c->list;
        c->list = e->next;
        entry_free(e);
    }
    event_free(c->change_ev);
    SSL_CTX_free(c->ctx);
    free(c->ca_file);
    free(c);
}

int jwks_cache_configure(struct jwks_cache *c, const struct jwks_conf *conf)
{
    const char *ca = conf->ca_file && conf->ca_file[0] ? conf->ca_file : NULL;
    char *dup = ca ? strdup(ca) : NULL;

    if (ca != NULL && dup == NULL)
        return -1;
    if ((ca == NULL) != (c->ca_file == NULL) ||
        (ca != NULL && strcmp(ca, c->ca_file) != 0)) {
        /* Another trust: the next https fetch makes a new context. */
        SSL_CTX_free(c->ctx);
        c->ctx = NULL;
    }
    free(c->ca_file);
    c->ca_file = dup;
    if (conf->refresh_ms > 0)
        c->conf.refresh_ms = conf->refresh_ms;
    return 0;
}

void jwks_cache_mark(struct jwks_cache *c)
{
    for (struct entry *e = c->list; e != NULL; e = e->next)
        e->used = 0;
}

void jwks_cache_sweep(struct jwks_cache *c)
{
    struct entry **pp = &c->list;

    while (*pp != NULL) {
        struct entry *e = *pp;
        if (e->used) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        c->st.uris--;
        entry_free(e);
    }
}

const char *jwks_cache_get(struct jwks_cache *c, const char *uri,
                           int64_t timeout_ms, size_t *n)
{
    struct entry *e;

    for (e = c->list; e != NULL; e = e->next)
        if (strcmp(e->uri, uri) == 0)
            break;
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        if (e == NULL)
            return NULL;
        e->c = c;
        e->conn.fd = -1;
        e->uri = strdup(uri);
        e->timer = evtimer_new(c->base, on_timer, e);
        e->deadline = evtimer_new(c->base, on_deadline, e);
        if (e->uri == NULL || e->timer == NULL || e->deadline == NULL) {
            entry_free(e);
            return NULL;
        }
        e->next = c->list;
        c->list = e;
        c->st.uris++;
        /* Fetched from the loop, not inside the build that asks. */
        arm(e, 0);
    }
    e->used = 1;
    e->timeout_ms = timeout_ms;
    *n = e->n;
    return e->doc;
}

void jwks_cache_stats(const struct jwks_cache *c, struct jwks_stats *out)
{
    *out = c->st;
}
