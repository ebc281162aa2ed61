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
#include <openssl/err.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/ca/identity.h"
#include "control/ca/pki.h"
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
#include "net/source_limit.h"
#include "tls/bundle.h"
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
    size_t npending; /* connections before their request was handled */
    uint64_t handshake_ms;
    /* Connections by source address (the CA API's accounting). */
    struct source_limit srcs;
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
    int streaming;   /* the 200 head went out: catalog lines follow */
    int closing;     /* close once out is sent */
    int pending;     /* counted in npending: no request handled yet */
    struct addr src; /* the client's address, for its source's limit */
    char site[64];
    char hash[65];
    char peer_id[300]; /* the linking site's SPIFFE ID, verified */
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
    if (lc->pending)
        s->npending--;
    source_limit_give(&s->srcs, &lc->src);
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
               : status == 403 ? "Forbidden"
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

static enum ssl_verify_result_t accept_any(SSL *ssl, uint8_t *alert)
{
    /* handle() verifies the client certificate, with the bundle the
     * request carries, so that a refusal is a JSON answer that says what
     * to fix rather than a TLS alert. */
    (void)ssl;
    (void)alert;
    return ssl_verify_ok;
}

static int cmp_hex(const void *a, const void *b)
{
    return memcmp(a, b, 64);
}

/* The pin of a set of roots: SHA-256 over their sorted SHA-256s. */
static void roots_pin(const STACK_OF(X509) * roots, char out[65])
{
    size_t n = sk_X509_num(roots);
    char(*hx)[64] = calloc(n + 1, 64);
    uint8_t h[32];
    SHA256_CTX sc;

    SHA256_Init(&sc);
    for (size_t i = 0; hx != NULL && i < n; i++) {
        uint8_t *der = NULL;
        int len = i2d_X509(sk_X509_value(roots, i), &der);
        char tmp[65];
        SHA256(der, len > 0 ? (size_t)len : 0, h);
        OPENSSL_free(der);
        pki_hex(h, 32, tmp);
        memcpy(hx[i], tmp, 64);
    }
    if (hx != NULL) {
        qsort(hx, n, 64, cmp_hex);
        SHA256_Update(&sc, hx, n * 64);
    }
    free(hx);
    SHA256_Final(h, &sc);
    pki_hex(h, 32, out);
}

/*
 * The linking site's identity: its client certificate must chain to the
 * SPIFFE bundle the request carries and hold a SPIFFE ID of that site's
 * trust domain; the first time, that trust domain and the bundle's roots
 * are pinned in the link's record, and later requests must match them.
 * 0 with lc->peer_id set, or -1 with why (cap bytes) for the client.
 */
static int verify_peer(struct lconn *lc, const char *body, size_t blen,
                       char *why, size_t cap)
{
    SSL *ssl = lc->c.tls;
    X509 *leaf = SSL_get_peer_certificate(ssl);
    STACK_OF(X509) *chain = SSL_get_peer_full_cert_chain(ssl);
    struct spiffe_bundle b = {0};
    X509_STORE *store = NULL;
    X509_STORE_CTX *vctx = NULL;
    struct link_pin pin, want;
    char *id = NULL, *td = NULL, *err = NULL;
    const char *bwhy;
    int rc = -1;

    if (leaf == NULL) {
        snprintf(why, cap,
                 "present this site's SPIFFE certificate (the "
                 "node's: ca.enabled or a join) with the link");
        goto done;
    }
    if (bundle_parse(body, blen, &b, &bwhy) < 0) {
        snprintf(why, cap,
                 "the request body must be this site's SPIFFE bundle: %s",
                 bwhy);
        goto done;
    }
    store = X509_STORE_new();
    vctx = X509_STORE_CTX_new();
    if (store == NULL || vctx == NULL) {
        snprintf(why, cap, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < sk_X509_num(b.roots); i++)
        X509_STORE_add_cert(store, sk_X509_value(b.roots, i));
    if (!X509_STORE_CTX_init(vctx, store, leaf, chain) ||
        X509_verify_cert(vctx) != 1) {
        snprintf(why, cap,
                 "the client certificate does not chain to the bundle sent "
                 "with it (%s)",
                 X509_verify_cert_error_string(X509_STORE_CTX_get_error(vctx)));
        goto done;
    }
    id = pki_spiffe_id(leaf);
    if (id == NULL || pki_spiffe_split(id, &td, NULL, NULL) < 0 ||
        strlen(td) >= sizeof(pin.trust_domain)) {
        snprintf(why, cap,
                 "the client certificate has no workload SPIFFE "
                 "ID");
        goto done;
    }
    memset(&want, 0, sizeof(want));
    snprintf(want.trust_domain, sizeof(want.trust_domain), "%s", td);
    roots_pin(b.roots, want.roots);
    if (link_store_pin_get(lc->s->dir, lc->site, lc->hash, &pin) < 0) {
        snprintf(why, cap, "the link was deleted or re-created meanwhile");
        goto done;
    }
    if (pin.trust_domain[0] == '\0') {
        if (link_store_pin_set(lc->s->dir, lc->site, lc->hash, &want, &err) <
            0) {
            snprintf(why, cap, "cannot pin the site's trust: %s",
                     err != NULL ? err : "?");
            goto done;
        }
        log_info("links: site %s is trust domain %s (roots %.12s...), pinned "
                 "on its first stream",
                 lc->site, want.trust_domain, want.roots);
    } else if (strcmp(pin.trust_domain, want.trust_domain) != 0 ||
               strcmp(pin.roots, want.roots) != 0) {
        snprintf(why, cap,
                 "site %s's trust changed since the link was first used "
                 "(pinned: trust domain %.200s, roots %.12s...; now: %.200s, "
                 "%.12s...): if that is expected, re-create the link on "
                 "this site (strait link create --name %s) and apply the "
                 "new MeshLink there",
                 lc->site, pin.trust_domain, pin.roots, want.trust_domain,
                 want.roots, lc->site);
        goto done;
    }
    snprintf(lc->peer_id, sizeof(lc->peer_id), "%s", id);
    rc = 0;
done:
    ERR_clear_error();
    free(err);
    free(id);
    free(td);
    X509_STORE_CTX_free(vctx);
    X509_STORE_free(store);
    bundle_dispose(&b);
    X509_free(leaf);
    return rc;
}

static void handle(struct lconn *lc, const struct h1_request *req,
                   const char *body, size_t blen)
{
    const struct h1_header *auth;
    const char *why;
    char vwhy[1024];

    /* A handled request gives its handshake slot back: a refusal closes,
     * a stream holds a stream's slot. */
    if (lc->pending) {
        lc->pending = 0;
        lc->s->npending--;
    }

    if (!(req->target.n == strlen(LINK_PATH) &&
          memcmp(req->target.p, LINK_PATH, req->target.n) == 0)) {
        refuse(lc, 404, "no such API (POST " LINK_PATH ")");
        return;
    }
    if (!h1_slice_eq_ci(req->method, "POST")) {
        refuse(lc, 405, "use POST");
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
    if (verify_peer(lc, body, blen, vwhy, sizeof(vwhy)) < 0) {
        refuse(lc, 403, vwhy);
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
    if (req.body != H1_BODY_LENGTH) {
        refuse(lc, 400,
               "send this site's SPIFFE bundle as the body, with "
               "Content-Length");
        return 1;
    }
    if (req.content_length > BUNDLE_MAX_BYTES) {
        refuse(lc, 400, "request body too large");
        return 1;
    }
    if (buf_len(&lc->in) - (size_t)head < req.content_length)
        return 0;
    handle(lc, &req, buf_ptr(&lc->in) + head, (size_t)req.content_length);
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

    lc->s->stats.timed_out++;
    log_debug("links: connection from %s timed out (handshake or request)",
              lc->peer);
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
    struct addr src;
    char peer[ADDR_STRLEN];
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
    memset(&src, 0, sizeof(src));
    memcpy(&src.ss, &ss, sl);
    src.len = sl;
    addr_format_sa((struct sockaddr *)&ss, sl, peer, sizeof(peer));
    if (s->ctx == NULL) {
        close(fd);
        s->stats.refused++;
        return;
    }
    if (s->nconns >= LINK_SERVER_MAX_CONNS ||
        s->npending >= LINK_SERVER_MAX_PENDING) {
        close(fd);
        source_limit_busy(&s->srcs, peer,
                          s->nconns >= LINK_SERVER_MAX_CONNS
                              ? "connection slots full"
                              : "handshake slots full");
        return;
    }
    if (source_limit_take(&s->srcs, &src, peer) < 0) {
        close(fd);
        return;
    }
    lc = calloc(1, sizeof(*lc));
    if (lc == NULL) {
        source_limit_give(&s->srcs, &src);
        close(fd);
        return;
    }
    lc->s = s;
    lc->src = src;
    memcpy(lc->peer, peer, sizeof(peer));
    buf_init(&lc->in, BUNDLE_MAX_BYTES + 16 * 1024);
    buf_init(&lc->out, LINK_SERVER_MAX_BACKLOG + CATALOG_MAX_LINE + 64);
    conn_init(&lc->c, s->base, fd, on_io, lc);
    timer_init(&lc->timer, s->base, on_deadline, lc);
    if (tls_conn_accept(&lc->c, s->ctx) < 0) {
        source_limit_give(&s->srcs, &src);
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
    lc->pending = 1;
    s->npending++;
    /* A client that connects and says nothing gives its slot back at the
     * deadline. */
    timer_arm(&lc->timer, s->handshake_ms);
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
                                    const struct link_server_limits *lim,
                                    struct sock_pool *pool, char **err)
{
    struct link_server *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    s->handshake_ms = lim != NULL && lim->handshake_ms > 0
                          ? lim->handshake_ms
                          : LINK_SERVER_HANDSHAKE_MS;
    source_limit_init(&s->srcs, "links",
                      lim != NULL && lim->per_source > 0
                          ? lim->per_source
                          : LINK_SERVER_MAX_PER_SOURCE);
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
    /* The client's certificate is asked for and checked by handle(). */
    SSL_CTX_set_custom_verify(s->ctx, SSL_VERIFY_PEER, accept_any);
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
    out->refused_per_source = s->srcs.refused_per_source;
    out->refused_busy = s->srcs.refused_busy;
    out->version = s->version;
    out->services = s->services;
}

void link_server_json(const struct link_server *s, struct buf *b)
{
    char as[ADDR_STRLEN];
    int first = 1;

    buf_puts(b, "{\"address\":");
    json_str(b, addr_format(&s->addr, as, sizeof(as)));
    buf_printf(
        b,
        ",\"catalogVersion\":%" PRId64 ",\"services\":%" PRIu64
        ",\"accepted\":%" PRIu64 ",\"refused\":%" PRIu64
        ",\"closedDeleted\":%" PRIu64 ",\"active\":%" PRIu64
        ",\"connections\":%zu,\"refusedPerSource\":%" PRIu64
        ",\"refusedBusy\":%" PRIu64 ",\"timedOut\":%" PRIu64 ",\"streams\":[",
        s->version, s->services, s->stats.accepted, s->stats.refused,
        s->stats.closed_deleted, s->stats.active, s->nconns,
        s->srcs.refused_per_source, s->srcs.refused_busy, s->stats.timed_out);
    for (const struct lconn *lc = s->conns; lc != NULL; lc = lc->next) {
        if (!lc->streaming)
            continue;
        buf_puts(b, first ? "{\"site\":" : ",{\"site\":");
        first = 0;
        json_str(b, lc->site);
        buf_puts(b, ",\"peer\":");
        json_str(b, lc->peer);
        buf_puts(b, ",\"peerId\":");
        json_str(b, lc->peer_id);
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
    source_limit_dispose(&s->srcs);
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
