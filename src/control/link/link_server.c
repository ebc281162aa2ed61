/*
 * The catalog API: accept, TLS, one request, then a chunked stream of
 * catalog lines for the life of the link (see link_server.h). It follows
 * ca_server.c's shape: connections in a list, closed ones freed through
 * the reaper, never inside their own callback.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/ca/identity.h"
#include "control/link/link_server.h"
#include "control/link/store.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/json.h"
#include "core/log.h"
#include "event/reap.h"
#include "event/timer.h"
#include "http1/parser.h"
#include "net/acceptor.h"
#include "net/conn.h"
#include "net/sock.h"
#include "net/sock_pool.h"
#include "tls/tls.h"

#define LINK_PATH "/v1/catalog"

struct lconn;

struct link_server {
    struct event_base *base;
    struct reaper *reaper;
    char *dir;
    struct ca_identity *id;
    char *site, *network, *trust_domain;
    SSL_CTX *ctx;
    int fd;
    struct addr addr;
    struct event *accept_ev;
    struct timer accept_resume;
    struct timer tick; /* pings and record checks, once a second */
    struct log_limit accept_log;
    struct lconn *conns;
    size_t nconns;
    struct buf line; /* the current catalog line */
    int64_t version;
    uint64_t services;
    uint64_t last_ping_ms;
    struct link_server_stats stats;
};

struct lconn {
    struct link_server *s;
    struct lconn *prev, *next;
    struct conn c;
    struct timer timer; /* the handshake and request deadline */
    struct reap_node reap;
    struct buf in, out;
    int streaming; /* the 200 head went out: catalog lines follow */
    int closing;   /* close once out is sent */
    char site[64];
    char hash[65];
    char peer[ADDR_STRLEN];
    int64_t since_ms; /* wall clock the stream started */
};

static void lconn_reap(struct reap_node *n)
{
    struct lconn *lc = LIST_ELEM(n, struct lconn, reap);

    buf_dispose(&lc->in);
    buf_dispose(&lc->out);
    free(lc);
}

static void lconn_close(struct lconn *lc)
{
    struct link_server *s = lc->s;

    if (lc->prev)
        lc->prev->next = lc->next;
    else
        s->conns = lc->next;
    if (lc->next)
        lc->next->prev = lc->prev;
    s->nconns--;
    if (lc->streaming) {
        s->stats.active--;
        log_info("links: catalog stream to site %s (%s) closed", lc->site,
                 lc->peer);
    }
    conn_close(&lc->c);
    timer_dispose(&lc->timer);
    reaper_defer(s->reaper, &lc->reap, lconn_reap);
}

/* Appends one chunk holding p (n bytes). */
static void put_chunk(struct lconn *lc, const char *p, size_t n)
{
    if (buf_len(&lc->out) > LINK_SERVER_MAX_BACKLOG) {
        lc->closing = 2; /* stalled: drop it */
        return;
    }
    buf_printf(&lc->out, "%zx\r\n", n);
    buf_append(&lc->out, p, n);
    buf_puts(&lc->out, "\r\n");
}

static void flush(struct lconn *lc);

static void refuse(struct lconn *lc, int status, const char *msg)
{
    struct buf b;

    buf_init(&b, 4096);
    buf_puts(&b, "{\"error\":");
    json_str(&b, msg);
    buf_puts(&b, "}\n");
    buf_printf(&lc->out,
               "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
               "Content-Length: %zu\r\nConnection: close\r\n\r\n",
               status,
               status == 401   ? "Unauthorized"
               : status == 404 ? "Not Found"
               : status == 405 ? "Method Not Allowed"
                               : "Bad Request",
               buf_len(&b));
    buf_append(&lc->out, buf_ptr(&b), buf_len(&b));
    buf_dispose(&b);
    lc->closing = 1;
    lc->s->stats.refused++;
    log_warn("links: refused a catalog request from %s: %s", lc->peer, msg);
}

static void start_stream(struct lconn *lc)
{
    struct link_server *s = lc->s;

    /* One stream per site: a reconnect after a network cut replaces the
     * one the server has not noticed is dead yet. */
    for (struct lconn *o = s->conns; o != NULL; o = o->next)
        if (o != lc && o->streaming && strcmp(o->site, lc->site) == 0 &&
            !o->closing) {
            log_info("links: site %s reconnected from %s; closing its old "
                     "stream from %s",
                     lc->site, lc->peer, o->peer);
            o->closing = 2;
            conn_wake(&o->c);
        }
    buf_puts(&lc->out, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson"
                       "\r\nTransfer-Encoding: chunked\r\nCache-Control: "
                       "no-store\r\n\r\n");
    lc->streaming = 1;
    lc->since_ms = clock_real_ms();
    timer_cancel(&lc->timer);
    s->stats.accepted++;
    s->stats.active++;
    put_chunk(lc, buf_ptr(&s->line), buf_len(&s->line));
    log_info("links: catalog stream to site %s (%s) opened, version %" PRId64
             ", %" PRIu64 " service(s)",
             lc->site, lc->peer, s->version, s->services);
}

static void handle(struct lconn *lc, const struct h1_request *req)
{
    const struct h1_header *auth;
    const char *why;

    if (!(req->target.n == strlen(LINK_PATH) &&
          memcmp(req->target.p, LINK_PATH, req->target.n) == 0)) {
        refuse(lc, 404, "no such API (GET " LINK_PATH ")");
        return;
    }
    if (!h1_slice_eq_ci(req->method, "GET")) {
        refuse(lc, 405, "use GET");
        return;
    }
    auth = h1_header_find(req->headers, req->nheaders, "authorization");
    if (auth == NULL || auth->value.n < 7 ||
        strncasecmp(auth->value.p, "Bearer ", 7) != 0) {
        refuse(lc, 401, "send the link credential as Authorization: Bearer");
        return;
    }
    if (link_store_check(lc->s->dir, auth->value.p + 7, auth->value.n - 7,
                         lc->site, lc->hash, &why) < 0) {
        refuse(lc, 401, why);
        return;
    }
    start_stream(lc);
}

/* 1 when a request was handled, 0 for more bytes. */
static int try_request(struct lconn *lc)
{
    struct h1_header hdrs[32];
    struct http_limits lim = http_limits_default();
    struct h1_request req;
    const char *why;
    int status, head;

    lim.max_headers = 32;
    lim.underscores = HTTP_US_ALLOW;
    req.headers = hdrs;
    head = h1_parse_request(buf_ptr(&lc->in), buf_len(&lc->in), &lim, &req,
                            &why, &status);
    if (head < 0) {
        refuse(lc, 400, why);
        return 1;
    }
    if (head == 0)
        return 0;
    if (req.body != H1_BODY_NONE &&
        !(req.body == H1_BODY_LENGTH && req.content_length == 0)) {
        refuse(lc, 400, "a catalog request has no body");
        return 1;
    }
    handle(lc, &req);
    return 1;
}

static void flush(struct lconn *lc)
{
    while (buf_len(&lc->out) > 0) {
        ssize_t w = conn_write(&lc->c, buf_ptr(&lc->out), buf_len(&lc->out));
        if (w == CONN_AGAIN) {
            conn_want(&lc->c, 1, 1);
            return;
        }
        if (w <= 0) {
            lconn_close(lc);
            return;
        }
        buf_consume(&lc->out, (size_t)w);
    }
    buf_release_if_empty(&lc->out);
    if (lc->closing) {
        lc->c.ops->shutdown(&lc->c);
        lconn_close(lc);
        return;
    }
    conn_want(&lc->c, 1, 0);
}

static void on_io(struct conn *c, void *arg)
{
    struct lconn *lc = arg;

    if (lc->closing == 2) {
        lconn_close(lc);
        return;
    }
    if (c->handshaking) {
        int rc = c->ops->handshake(c);
        if (rc < 0) {
            log_debug("links: TLS handshake from %s failed: %s", lc->peer,
                      tls_conn_failure(c));
            lconn_close(lc);
            return;
        }
        if (rc == 0) {
            conn_want(c, 1, 0);
            return;
        }
        c->handshaking = 0;
    }
    for (;;) {
        char tmp[4096];
        ssize_t r;

        if (lc->streaming || lc->closing) {
            /* Nothing more is expected; read to notice the close. */
            r = conn_read(c, tmp, sizeof(tmp));
            if (r == 0 || r == CONN_ERROR) {
                lconn_close(lc);
                return;
            }
            if (r > 0)
                continue;
            break;
        }
        {
            size_t room;
            char *p = buf_reserve_any(&lc->in, &room);
            if (p == NULL) {
                refuse(lc, 400, "request too large");
                break;
            }
            r = conn_read(c, p, room);
            if (r == CONN_AGAIN)
                break;
            if (r <= 0) {
                lconn_close(lc);
                return;
            }
            buf_commit(&lc->in, (size_t)r);
            if (try_request(lc))
                continue;
        }
    }
    flush(lc);
}

static void on_deadline(void *arg)
{
    struct lconn *lc = arg;

    log_debug("links: connection from %s sent no request in time", lc->peer);
    lconn_close(lc);
}

static void on_accept_resume(void *arg)
{
    struct link_server *s = arg;

    event_add(s->accept_ev, NULL);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct link_server *s = arg;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct lconn *lc;
    int fd;

    (void)what;
    fd =
        accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        if (accept_error_pauses(errno)) {
            log_limited(&s->accept_log, ACCEPT_LOG_MS, LOG_WARN,
                        "links: accept: %s; pausing %d ms", strerror(errno),
                        ACCEPT_PAUSE_MS);
            event_del(s->accept_ev);
            timer_arm(&s->accept_resume, ACCEPT_PAUSE_MS);
        }
        return;
    }
    if (s->nconns >= LINK_SERVER_MAX_CONNS || s->ctx == NULL) {
        close(fd);
        s->stats.refused++;
        return;
    }
    lc = calloc(1, sizeof(*lc));
    if (lc == NULL) {
        close(fd);
        return;
    }
    lc->s = s;
    addr_format_sa((struct sockaddr *)&ss, sl, lc->peer, sizeof(lc->peer));
    buf_init(&lc->in, 16 * 1024);
    buf_init(&lc->out, LINK_SERVER_MAX_BACKLOG + CATALOG_MAX_LINE + 64);
    conn_init(&lc->c, s->base, fd, on_io, lc);
    timer_init(&lc->timer, s->base, on_deadline, lc);
    if (tls_conn_accept(&lc->c, s->ctx) < 0) {
        timer_dispose(&lc->timer);
        conn_close(&lc->c);
        buf_dispose(&lc->in);
        buf_dispose(&lc->out);
        free(lc);
        return;
    }
    lc->c.handshaking = 1;
    lc->next = s->conns;
    if (s->conns)
        s->conns->prev = lc;
    s->conns = lc;
    s->nconns++;
    timer_arm(&lc->timer, LINK_SERVER_HANDSHAKE_MS);
    conn_want(&lc->c, 1, 0);
}

/* Once a second: close the streams of deleted links, ping the rest. */
static void on_tick(void *arg)
{
    struct link_server *s = arg;
    uint64_t now = clock_ms();
    int ping = now - s->last_ping_ms >= CATALOG_PING_MS;
    static const char pingline[] = "{\"type\":\"ping\"}\n";

    if (ping)
        s->last_ping_ms = now;
    for (struct lconn *lc = s->conns; lc != NULL; lc = lc->next) {
        if (!lc->streaming || lc->closing)
            continue;
        if (!link_store_current(s->dir, lc->site, lc->hash)) {
            log_info("links: the link of site %s was deleted or re-created; "
                     "closing its stream",
                     lc->site);
            s->stats.closed_deleted++;
            lc->closing = 2;
            conn_wake(&lc->c);
            continue;
        }
        if (ping) {
            put_chunk(lc, pingline, sizeof(pingline) - 1);
            conn_wake(&lc->c);
        }
    }
    timer_arm(&s->tick, 1000);
}

void link_server_publish(struct link_server *s, const struct resource_set *set)
{
    const struct catalog_self self = {s->site, s->network, s->trust_domain};
    struct buf nb, old;
    const char *p;

    /* The version is part of the line: compare what it says without it. */
    buf_init(&nb, CATALOG_MAX_LINE);
    if (catalog_encode(&nb, set, &self, s->version) < 0) {
        log_error("links: the exported catalog is larger than %u bytes; "
                  "the linked sites keep the last one",
                  CATALOG_MAX_LINE);
        buf_dispose(&nb);
        return;
    }
    if (buf_len(&nb) == buf_len(&s->line) &&
        memcmp(buf_ptr(&nb), buf_ptr(&s->line), buf_len(&nb)) == 0) {
        buf_dispose(&nb);
        return;
    }
    buf_dispose(&nb);
    s->version++;
    old = s->line;
    buf_init(&s->line, CATALOG_MAX_LINE);
    buf_dispose(&old);
    catalog_encode(&s->line, set, &self, s->version);
    /* Count the services the line holds (its hostnames). */
    s->services = 0;
    p = buf_cstr(&s->line);
    while ((p = strstr(p, "{\"hostname\":")) != NULL) {
        s->services++;
        p++;
    }
    log_info("links: catalog version %" PRId64 ": %" PRIu64
             " exported service(s)",
             s->version, s->services);
    for (struct lconn *lc = s->conns; lc != NULL; lc = lc->next)
        if (lc->streaming && !lc->closing) {
            put_chunk(lc, buf_ptr(&s->line), buf_len(&s->line));
            conn_wake(&lc->c);
        }
}

struct link_server *link_server_new(struct event_base *base,
                                    struct reaper *reaper, const struct addr *a,
                                    const char *dir, struct ca_identity *id,
                                    const struct catalog_self *self,
                                    struct sock_pool *pool, char **err)
{
    struct link_server *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    s->base = base;
    s->reaper = reaper;
    s->id = id;
    s->fd = -1;
    buf_init(&s->line, CATALOG_MAX_LINE);
    timer_init(&s->accept_resume, base, on_accept_resume, s);
    timer_init(&s->tick, base, on_tick, s);
    s->dir = strdup(dir);
    s->site = strdup(self->site);
    s->network = strdup(self->network);
    s->trust_domain = strdup(self->trust_domain);
    s->ctx = SSL_CTX_new(TLS_method());
    if (s->dir == NULL || s->site == NULL || s->network == NULL ||
        s->trust_domain == NULL || s->ctx == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    SSL_CTX_set_min_proto_version(s->ctx, TLS1_2_VERSION);
    /* Each handshake presents the node's current certificate. */
    SSL_CTX_set_cert_cb(s->ctx, ca_identity_ssl, id);
    s->fd = sock_pool_listen(pool, SOCK_POOL_CA, a, 1, 128, 0, err);
    if (s->fd < 0) {
        err_prefix(err, "links.address: ");
        goto fail;
    }
    if (sock_local_addr(s->fd, &s->addr) < 0)
        s->addr = *a;
    s->accept_ev = event_new(base, s->fd, EV_READ | EV_PERSIST, on_accept, s);
    if (s->accept_ev == NULL || event_add(s->accept_ev, NULL) < 0) {
        err_set(err, "links: cannot watch the listening socket");
        goto fail;
    }
    s->last_ping_ms = clock_ms();
    link_server_publish(s, NULL);
    timer_arm(&s->tick, 1000);
    return s;
fail:
    link_server_free(s);
    return NULL;
}

int link_server_listen_fd(const struct link_server *s)
{
    return s->fd;
}

const struct addr *link_server_addr(const struct link_server *s)
{
    return &s->addr;
}

void link_server_stats(const struct link_server *s,
                       struct link_server_stats *out)
{
    *out = s->stats;
    out->version = s->version;
    out->services = s->services;
}

void link_server_json(const struct link_server *s, struct buf *b)
{
    char as[ADDR_STRLEN];
    int first = 1;

    buf_puts(b, "{\"address\":");
    json_str(b, addr_format(&s->addr, as, sizeof(as)));
    buf_printf(b,
               ",\"catalogVersion\":%" PRId64 ",\"services\":%" PRIu64
               ",\"accepted\":%" PRIu64 ",\"refused\":%" PRIu64
               ",\"closedDeleted\":%" PRIu64 ",\"active\":%" PRIu64
               ",\"streams\":[",
               s->version, s->services, s->stats.accepted, s->stats.refused,
               s->stats.closed_deleted, s->stats.active);
    for (const struct lconn *lc = s->conns; lc != NULL; lc = lc->next) {
        if (!lc->streaming)
            continue;
        buf_puts(b, first ? "{\"site\":" : ",{\"site\":");
        first = 0;
        json_str(b, lc->site);
        buf_puts(b, ",\"peer\":");
        json_str(b, lc->peer);
        buf_printf(b, ",\"sinceMs\":%" PRId64 "}", lc->since_ms);
    }
    buf_puts(b, "]}");
}

void link_server_free(struct link_server *s)
{
    if (s == NULL)
        return;
    while (s->conns != NULL) {
        struct lconn *lc = s->conns;
        s->conns = lc->next;
        conn_close(&lc->c);
        timer_dispose(&lc->timer);
        buf_dispose(&lc->in);
        buf_dispose(&lc->out);
        free(lc);
    }
    timer_dispose(&s->accept_resume);
    timer_dispose(&s->tick);
    if (s->accept_ev)
        event_free(s->accept_ev);
    if (s->fd >= 0)
        close(s->fd);
    SSL_CTX_free(s->ctx);
    buf_dispose(&s->line);
    free(s->dir);
    free(s->site);
    free(s->network);
    free(s->trust_domain);
    free(s);
}
