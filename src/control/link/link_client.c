/*
 * A MeshLink's catalog stream (see link_client.h): connect, TLS verified
 * by the link's own trust bundle, GET /v1/catalog, then chunks of NDJSON
 * lines for as long as the link lives.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/resource.h"
#include "control/ca/identity.h"
#include "control/ca/pki.h"
#include "control/dns.h"
#include "control/link/catalog.h"
#include "control/link/link_client.h"
#include "core/arena.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/json.h"
#include "core/log.h"
#include "core/rng.h"
#include "event/timer.h"
#include "http1/parser.h"
#include "net/conn.h"
#include "net/sock.h"
#include "tls/bundle.h"
#include "tls/tls.h"

enum lc_phase {
    LC_IDLE,       /* waiting for the next attempt */
    LC_RESOLVING,  /* the catalog host name */
    LC_CONNECTING, /* TCP */
    LC_HANDSHAKE,  /* TLS */
    LC_HEAD,       /* request sent, reading the answer's head */
    LC_STREAM,     /* reading catalog lines */
};

/* One registry entry made of the catalog. */
struct lc_doc {
    char *name; /* "MeshLink ns/name: host" */
    char *host;
    uint64_t since; /* when this link first announced host (conf.seq) */
    char *rname;
    char *data;
    size_t len;
};

struct link_client {
    struct event_base *base;
    struct link_client_conf conf; /* strings owned */
    struct addr addr; /* the catalog API's (resolved before each attempt) */
    char *host;       /* its host name; NULL: an IP literal */
    int port;
    struct dns_query *q;
    struct ca_identity *id;
    SSL_CTX *ctx;
    void (*on_change)(void *);
    void *arg;
    enum lc_phase phase;
    int conn_open;
    struct conn conn;
    struct buf in, out, lines;
    struct h1_chunked ch;
    struct timer retry, idle, retain, notify;
    uint64_t rng;
    unsigned attempt; /* since the last catalog */
    struct lc_doc *docs;
    size_t ndocs;
    int have_catalog; /* docs hold a catalog (maybe retained) */
    struct link_client_state st;
    char *last_error;
};

/* --- entries ----------------------------------------------------------- */

static void docs_free(struct lc_doc *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(d[i].name);
        free(d[i].host);
        free(d[i].rname);
        free(d[i].data);
    }
    free(d);
}

static void changed(struct link_client *c)
{
    timer_arm(&c->notify, 0);
}

static void on_notify(void *arg)
{
    struct link_client *c = arg;

    c->on_change(c->arg);
}

static void drop_catalog(struct link_client *c)
{
    if (!c->have_catalog)
        return;
    docs_free(c->docs, c->ndocs);
    c->docs = NULL;
    c->ndocs = 0;
    c->have_catalog = 0;
    c->st.services = 0;
    c->st.version = -1;
    c->st.retained = 0;
    changed(c);
}

static void set_error(struct link_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(struct link_client *c, const char *fmt, ...)
{
    va_list ap;
    char *msg = NULL;

    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    va_end(ap);
    c->st.errors++;
    if (msg != NULL &&
        (c->last_error == NULL || strcmp(msg, c->last_error) != 0))
        log_warn("MeshLink %s/%s: %s", c->conf.ns, c->conf.name, msg);
    free(c->last_error);
    c->last_error = msg;
}

/* Turns a catalog into entries; 0, or -1 (the old ones stay). */
static int take_catalog(struct link_client *c, const struct catalog *cat)
{
    const struct catalog_link link = {c->conf.name, c->conf.ns,
                                      c->conf.network};
    struct lc_doc *d = calloc(cat->nservices + 1, sizeof(*d));
    struct buf b;
    size_t i;

    if (d == NULL)
        return -1;
    for (i = 0; i < cat->nservices; i++) {
        char rname[64];
        const struct cat_service *svc = &cat->services[i];
        buf_init(&b, CATALOG_MAX_LINE);
        catalog_resource_name(c->conf.name, svc->hostname, rname);
        if (catalog_resource(&b, &link, svc) < 0 ||
            asprintf(&d[i].name, "MeshLink %s/%s: %s", c->conf.ns, c->conf.name,
                     svc->hostname) < 0) {
            buf_dispose(&b);
            docs_free(d, i + 1);
            return -1;
        }
        d[i].rname = strdup(rname);
        d[i].host = strdup(svc->hostname);
        d[i].len = buf_len(&b);
        d[i].data = malloc(d[i].len + 1);
        /* A host keeps the turn it first came with while the link keeps
         * announcing it: who owns a host never moves to a later link. */
        d[i].since = 0;
        for (size_t k = 0; k < c->ndocs && d[i].host != NULL; k++)
            if (strcmp(c->docs[k].host, d[i].host) == 0)
                d[i].since = c->docs[k].since;
        if (d[i].since == 0)
            d[i].since = c->conf.seq != NULL ? ++*c->conf.seq : 1;
        if (d[i].rname == NULL || d[i].host == NULL || d[i].data == NULL) {
            buf_dispose(&b);
            docs_free(d, i + 1);
            return -1;
        }
        memcpy(d[i].data, buf_ptr(&b), d[i].len);
        d[i].data[d[i].len] = '\0';
        buf_dispose(&b);
    }
    docs_free(c->docs, c->ndocs);
    c->docs = d;
    c->ndocs = cat->nservices;
    c->have_catalog = 1;
    c->st.services = cat->nservices;
    c->st.version = cat->version;
    c->st.retained = 0;
    c->st.last_sync_ms = clock_real_ms();
    changed(c);
    return 0;
}

size_t link_client_hosts(const struct link_client *c,
                         struct link_client_host *out, size_t cap)
{
    for (size_t i = 0; i < c->ndocs && i < cap; i++) {
        out[i].host = c->docs[i].host;
        out[i].rname = c->docs[i].rname;
        out[i].since = c->docs[i].since;
    }
    return c->ndocs;
}

size_t link_client_inputs(const struct link_client *c, struct res_input *in,
                          size_t cap)
{
    for (size_t i = 0; i < c->ndocs && i < cap; i++) {
        in[i].name = c->docs[i].name;
        in[i].data = c->docs[i].data;
        in[i].len = c->docs[i].len;
        in[i].kind = "ServiceEntry";
        in[i].ns = c->conf.ns;
        in[i].rname = c->docs[i].rname;
    }
    return c->ndocs;
}

/* --- the connection ---------------------------------------------------- */

static void start(struct link_client *c);

static void close_conn(struct link_client *c)
{
    dns_query_cancel(c->q);
    c->q = NULL;
    if (c->conn_open)
        conn_close(&c->conn);
    c->conn_open = 0;
    buf_truncate(&c->in, 0);
    buf_truncate(&c->out, 0);
    buf_truncate(&c->lines, 0);
    buf_release_if_empty(&c->in);
    buf_release_if_empty(&c->lines);
    h1_chunked_dispose(&c->ch);
    timer_cancel(&c->idle);
}

/* The stream is gone (or never came): keep the catalog for retainFor,
 * then try again after a jittered delay. */
static void lost(struct link_client *c)
{
    uint64_t cap, delay;

    close_conn(c);
    if (c->st.connected_ms != 0 && c->have_catalog && c->conf.retain_ms > 0 &&
        !timer_armed(&c->retain)) {
        c->st.retained = 1;
        timer_arm(&c->retain, (uint64_t)c->conf.retain_ms);
    } else if (c->have_catalog && c->conf.retain_ms == 0) {
        drop_catalog(c);
    }
    c->st.connected = 0;
    c->st.connected_ms = 0;
    c->phase = LC_IDLE;
    cap = (uint64_t)LINK_BACKOFF_BASE_MS << (c->attempt < 16 ? c->attempt : 16);
    if (cap > LINK_BACKOFF_MAX_MS)
        cap = LINK_BACKOFF_MAX_MS;
    delay = rng_next(&c->rng) % (cap + 1);
    c->attempt++;
    c->st.last_backoff_ms = delay;
    c->st.reconnects++;
    timer_arm(&c->retry, delay);
}

static void on_retain(void *arg)
{
    struct link_client *c = arg;

    log_warn("MeshLink %s/%s: down for retainFor (%" PRId64
             " ms); removing its %zu service(s)",
             c->conf.ns, c->conf.name, c->conf.retain_ms, c->ndocs);
    drop_catalog(c);
}

static void on_retry(void *arg)
{
    start(arg);
}

static void on_idle(void *arg)
{
    struct link_client *c = arg;

    if (c->phase == LC_STREAM)
        set_error(c, "the catalog stream from %s said nothing for %d s",
                  c->conf.catalog, LINK_IDLE_MS / 1000);
    else
        set_error(c, "no catalog stream from %s within %d s", c->conf.catalog,
                  LINK_CONNECT_TIMEOUT_MS / 1000);
    lost(c);
}

/* After the handshake: the server must be of the link's trust domain. */
static int check_peer(struct link_client *c)
{
    X509 *leaf = SSL_get_peer_certificate(c->conn.tls);
    char *id = leaf != NULL ? pki_spiffe_id(leaf) : NULL, *td = NULL;
    int ok = 0;

    if (id == NULL) {
        set_error(c, "the catalog server at %s presented no SPIFFE ID",
                  c->conf.catalog);
    } else if (pki_spiffe_split(id, &td, NULL, NULL) < 0 ||
               strcmp(td, c->conf.trust_domain) != 0) {
        set_error(c,
                  "trust domain mismatch: the catalog server at %s is %s, "
                  "but spec.trustDomain is '%s': set spec.trustDomain to the "
                  "remote site's trust domain (or apply the MeshLink `strait "
                  "link create` printed there)",
                  c->conf.catalog, id, c->conf.trust_domain);
    } else {
        ok = 1;
    }
    free(td);
    free(id);
    X509_free(leaf);
    return ok ? 0 : -1;
}

/* One catalog line. 0, or -1 (the stream is dropped). */
static int line(struct link_client *c, const char *p, size_t n)
{
    struct arena a;
    struct catalog cat;
    char why[512];
    int rc = 0;

    arena_init(&a, 64 * 1024);
    if (catalog_decode(p, n, c->conf.trust_domain, &a, &cat, why, sizeof(why)) <
        0) {
        set_error(c, "catalog from %s refused (the last one stays): %s",
                  c->conf.catalog, why);
        rc = -1;
    } else if (cat.type == CAT_CATALOG) {
        if (strcmp(cat.network, c->conf.network) != 0) {
            set_error(c,
                      "network mismatch: the remote site is on network '%s' "
                      "but spec.network is '%s': fix spec.network",
                      cat.network, c->conf.network);
            rc = -1;
        } else if (take_catalog(c, &cat) < 0) {
            set_error(c, "out of memory taking the catalog");
            rc = -1;
        } else {
            if (!c->st.connected)
                log_info("MeshLink %s/%s: connected to %s (site %s): "
                         "catalog version %" PRId64 ", %zu service(s)",
                         c->conf.ns, c->conf.name, c->conf.catalog, cat.site,
                         cat.version, cat.nservices);
            c->st.connected = 1;
            c->attempt = 0;
            free(c->last_error);
            c->last_error = NULL;
            timer_cancel(&c->retain);
        }
    }
    arena_dispose(&a);
    return rc;
}

/* Splits the decoded body into lines. 0 or -1. */
static int take_lines(struct link_client *c)
{
    for (;;) {
        const char *p = buf_ptr(&c->lines);
        const char *nl = memchr(p, '\n', buf_len(&c->lines));
        size_t n;
        if (nl == NULL) {
            if (buf_len(&c->lines) > CATALOG_MAX_LINE) {
                set_error(c, "a catalog line from %s is over %u bytes",
                          c->conf.catalog, CATALOG_MAX_LINE);
                return -1;
            }
            return 0;
        }
        n = (size_t)(nl - p);
        if (n > 0 && line(c, p, n) < 0)
            return -1;
        buf_consume(&c->lines, n + 1);
    }
}

/* The answer's head; 1 when the stream starts, 0 for more, -1 failed. */
static int read_head(struct link_client *c)
{
    struct h1_header hdrs[32];
    struct http_limits lim = http_limits_default();
    struct h1_response resp;
    const char *why;
    int status, head;

    lim.max_headers = 32;
    lim.underscores = HTTP_US_ALLOW;
    resp.headers = hdrs;
    head = h1_parse_response(buf_ptr(&c->in), buf_len(&c->in), &lim, NULL,
                             &resp, &why, &status);
    if (head == 0)
        return 0;
    if (head < 0) {
        set_error(c, "bad answer from the catalog API at %s: %s",
                  c->conf.catalog, why);
        return -1;
    }
    if (resp.status != 200) {
        /* The JSON error may follow; show it when it is all here. */
        const char *body = buf_ptr(&c->in) + head;
        size_t bn = buf_len(&c->in) - (size_t)head;
        struct arena a;
        const struct json *j;
        struct slice e = {NULL, 0};
        arena_init(&a, 4096);
        j = json_parse(&a, body, bn, 4, &why);
        if (j != NULL)
            e = json_string(json_get(j, "error"));
        set_error(c, "the catalog API at %s refused the link (%d): %.*s",
                  c->conf.catalog, resp.status, e.p ? (int)e.n : 0,
                  e.p ? e.p : "");
        arena_dispose(&a);
        return -1;
    }
    if (resp.body != H1_BODY_CHUNKED) {
        set_error(c,
                  "the catalog API at %s did not answer with a chunked "
                  "stream",
                  c->conf.catalog);
        return -1;
    }
    buf_consume(&c->in, (size_t)head);
    c->phase = LC_STREAM;
    c->st.connects++;
    c->st.connected_ms = clock_real_ms();
    return 1;
}

/* Decodes what is in c->in into lines. 0, or -1. */
static int read_stream(struct link_client *c)
{
    while (buf_len(&c->in) > 0) {
        struct h1_slice data;
        const char *why;
        ssize_t used = h1_chunked_decode(&c->ch, buf_ptr(&c->in),
                                         buf_len(&c->in), &data, &why);
        if (used < 0) {
            set_error(c, "bad chunked stream from %s: %s", c->conf.catalog,
                      why);
            return -1;
        }
        if (data.n > 0 && buf_append(&c->lines, data.p, data.n) < 0) {
            set_error(c, "a catalog line from %s is over %u bytes",
                      c->conf.catalog, CATALOG_MAX_LINE);
            return -1;
        }
        buf_consume(&c->in, (size_t)used);
        if (h1_chunked_done(&c->ch)) {
            set_error(c, "the catalog API at %s ended the stream",
                      c->conf.catalog);
            return -1;
        }
        if (used == 0)
            break;
    }
    return take_lines(c);
}

static void on_io(struct conn *cn, void *arg)
{
    struct link_client *c = arg;

    if (c->phase == LC_CONNECTING) {
        int err = sock_error(cn->fd);
        if (err != 0) {
            set_error(c, "cannot connect to the catalog API at %s: %s",
                      c->conf.catalog, strerror(err));
            lost(c);
            return;
        }
        c->phase = LC_HANDSHAKE;
        cn->handshaking = 1;
    }
    if (c->phase == LC_HANDSHAKE) {
        int rc = cn->ops->handshake(cn);
        if (rc < 0) {
            const char *v = tls_conn_verify_error(cn);
            if (v != NULL)
                set_error(c,
                          "the catalog server at %s is not trusted by "
                          "spec.trustBundle (%s): the remote site's root is "
                          "not in the bundle; apply a MeshLink made by "
                          "`strait link create` on that site now",
                          c->conf.catalog, v);
            else
                set_error(c, "TLS handshake with %s failed (%s)",
                          c->conf.catalog, tls_conn_failure(cn));
            lost(c);
            return;
        }
        if (rc == 0) {
            conn_want(cn, 1, 0);
            return;
        }
        cn->handshaking = 0;
        if (check_peer(c) < 0) {
            lost(c);
            return;
        }
        c->phase = LC_HEAD;
    }
    while (buf_len(&c->out) > 0) {
        ssize_t w = conn_write(cn, buf_ptr(&c->out), buf_len(&c->out));
        if (w == CONN_AGAIN) {
            conn_want(cn, 1, 1);
            return;
        }
        if (w <= 0) {
            set_error(c, "lost the connection to %s while sending",
                      c->conf.catalog);
            lost(c);
            return;
        }
        buf_consume(&c->out, (size_t)w);
    }
    for (;;) {
        size_t room;
        char *p = buf_reserve_any(&c->in, &room);
        ssize_t n;

        if (p == NULL) {
            set_error(c, "the catalog API at %s sent too much at once",
                      c->conf.catalog);
            lost(c);
            return;
        }
        n = conn_read(cn, p, room);
        if (n == CONN_AGAIN)
            break;
        if (n <= 0) {
            set_error(c, "the catalog stream from %s was closed (%s)",
                      c->conf.catalog,
                      n == 0 ? "by the remote site"
                             : (cn->why ? cn->why : "error"));
            lost(c);
            return;
        }
        buf_commit(&c->in, (size_t)n);
        timer_arm(&c->idle, LINK_IDLE_MS);
        if (c->phase == LC_HEAD) {
            int rc = read_head(c);
            if (rc < 0) {
                lost(c);
                return;
            }
            if (rc == 0)
                continue;
        }
        if (read_stream(c) < 0) {
            lost(c);
            return;
        }
    }
    conn_want(cn, 1, 0);
}

static void connect_to(struct link_client *c);

static void on_resolved(void *arg, const struct addr *a, const char *why)
{
    struct link_client *c = arg;

    c->q = NULL;
    if (a == NULL) {
        set_error(c, "cannot resolve the catalog API's host %s (%s)", c->host,
                  why);
        lost(c);
        return;
    }
    c->addr = *a;
    connect_to(c);
}

static void start(struct link_client *c)
{
    c->st.attempts++;
    if (c->host == NULL) {
        connect_to(c);
        return;
    }
    c->phase = LC_RESOLVING;
    /* The idle timer is the deadline of the whole attempt. */
    timer_arm(&c->idle, LINK_CONNECT_TIMEOUT_MS);
    c->q = dns_resolve(c->conf.dns, c->host, c->port, on_resolved, c);
    if (c->q == NULL) {
        set_error(c, "out of memory resolving %s", c->host);
        lost(c);
    }
}

static void connect_to(struct link_client *c)
{
    int fd, in_progress = 0;

    fd = sock_connect(&c->addr, &in_progress);
    if (fd < 0) {
        set_error(c, "cannot connect to the catalog API at %s: %s",
                  c->conf.catalog, strerror(errno));
        lost(c);
        return;
    }
    conn_init(&c->conn, c->base, fd, on_io, c);
    c->conn_open = 1;
    /* No SNI: the server is checked by its SPIFFE ID, not a name. */
    if (tls_conn_connect(&c->conn, c->ctx, NULL) < 0) {
        set_error(c, "cannot set up TLS");
        lost(c);
        return;
    }
    /* The body is this site's SPIFFE bundle: the remote site verifies
     * the client certificate with it (and pins it the first time). */
    {
        struct buf bundle;
        struct ca_cred *cred =
            c->id != NULL ? ca_identity_current(c->id) : NULL;
        STACK_OF(X509) *roots = sk_X509_new_null();
        buf_init(&bundle, BUNDLE_MAX_BYTES);
        if (cred != NULL && roots != NULL && ca_cred_root(cred) != NULL &&
            sk_X509_push(roots, ca_cred_root(cred)))
            bundle_write(&bundle, roots, -1);
        sk_X509_free(roots);
        ca_cred_unref(cred);
        buf_printf(&c->out,
                   "POST /v1/catalog HTTP/1.1\r\nHost: %s\r\nAuthorization: "
                   "Bearer %s\r\nAccept: application/x-ndjson\r\n"
                   "Content-Type: application/json\r\nContent-Length: %zu"
                   "\r\n\r\n",
                   c->conf.catalog, c->conf.token, buf_len(&bundle));
        buf_append(&c->out, buf_ptr(&bundle), buf_len(&bundle));
        buf_dispose(&bundle);
    }
    h1_chunked_init(&c->ch);
    c->phase = in_progress ? LC_CONNECTING : LC_HANDSHAKE;
    c->conn.handshaking = !in_progress;
    /* The idle timer doubles as the connect deadline until bytes come. */
    timer_arm(&c->idle, LINK_CONNECT_TIMEOUT_MS);
    conn_want(&c->conn, 1, 1);
}

/* --- life -------------------------------------------------------------- */

static SSL_CTX *client_ctx(const struct link_client_conf *conf,
                           struct ca_identity *id, char **err)
{
    struct spiffe_bundle b;
    const char *why;
    SSL_CTX *ctx;
    X509_STORE *store;

    if (bundle_parse(conf->trust_bundle, strlen(conf->trust_bundle), &b, &why) <
        0) {
        err_set(err, "spec.trustBundle: %s", why);
        return NULL;
    }
    ctx = SSL_CTX_new(TLS_method());
    if (ctx == NULL) {
        bundle_dispose(&b);
        err_set(err, "out of memory");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    store = SSL_CTX_get_cert_store(ctx);
    for (size_t i = 0; i < sk_X509_num(b.roots); i++)
        X509_STORE_add_cert(store, sk_X509_value(b.roots, i));
    bundle_dispose(&b);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    /* This node's certificate: the remote site verifies it with the
     * bundle the request carries. */
    if (id != NULL)
        SSL_CTX_set_cert_cb(ctx, ca_identity_ssl, id);
    ERR_clear_error();
    return ctx;
}

static char *dup_or_empty(const char *s)
{
    return strdup(s != NULL ? s : "");
}

struct link_client *link_client_new(struct event_base *base,
                                    const struct link_client_conf *conf,
                                    struct ca_identity *id,
                                    void (*on_change)(void *), void *arg,
                                    char **err)
{
    struct link_client *c = calloc(1, sizeof(*c));
    const char *why;

    if (c == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    c->base = base;
    c->id = id;
    c->on_change = on_change;
    c->arg = arg;
    c->conf = *conf;
    c->conf.name = dup_or_empty(conf->name);
    c->conf.ns = dup_or_empty(conf->ns);
    c->conf.catalog = dup_or_empty(conf->catalog);
    c->conf.token = dup_or_empty(conf->token);
    c->conf.trust_domain = dup_or_empty(conf->trust_domain);
    c->conf.trust_bundle = dup_or_empty(conf->trust_bundle);
    c->conf.network = dup_or_empty(conf->network);
    c->conf.gateway = dup_or_empty(conf->gateway);
    c->st.version = -1;
    buf_init(&c->in, 256 * 1024);
    buf_init(&c->out, BUNDLE_MAX_BYTES + 8192);
    buf_init(&c->lines, CATALOG_MAX_LINE + 1);
    timer_init(&c->retry, base, on_retry, c);
    timer_init(&c->idle, base, on_idle, c);
    timer_init(&c->retain, base, on_retain, c);
    timer_init(&c->notify, base, on_notify, c);
    RAND_bytes((uint8_t *)&c->rng, sizeof(c->rng));
    c->rng |= 1;
    if (c->conf.name == NULL || c->conf.ns == NULL || c->conf.catalog == NULL ||
        c->conf.token == NULL || c->conf.trust_domain == NULL ||
        c->conf.trust_bundle == NULL || c->conf.network == NULL ||
        c->conf.gateway == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    if (addr_parse(&c->addr, c->conf.catalog, strlen(c->conf.catalog), 0,
                   &why) < 0) {
        /* NAME:PORT, resolved before each attempt. */
        const char *colon = strrchr(c->conf.catalog, ':');
        char *end = NULL;
        long port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
        if (colon == NULL || colon == c->conf.catalog || end == NULL ||
            *end != '\0' || port < 1 || port > 65535) {
            err_set(err, "spec.catalog.address '%s': not HOST:PORT",
                    c->conf.catalog);
            goto fail;
        }
        if (c->conf.dns == NULL) {
            err_set(err,
                    "spec.catalog.address '%s': a host name needs the "
                    "resolver (config.dir or config.etcd)",
                    c->conf.catalog);
            goto fail;
        }
        c->host = strndup(c->conf.catalog, (size_t)(colon - c->conf.catalog));
        c->port = (int)port;
        if (c->host == NULL) {
            err_set(err, "out of memory");
            goto fail;
        }
    }
    c->ctx = client_ctx(&c->conf, id, err);
    if (c->ctx == NULL)
        goto fail;
    /* The first attempt on the next turn, so the caller is set up first;
     * its connect timer is the one on_idle handles. */
    c->phase = LC_IDLE;
    timer_arm(&c->retry, 0);
    return c;
fail:
    link_client_free(c);
    return NULL;
}

void link_client_free(struct link_client *c)
{
    if (c == NULL)
        return;
    close_conn(c);
    timer_dispose(&c->retry);
    timer_dispose(&c->idle);
    timer_dispose(&c->retain);
    timer_dispose(&c->notify);
    buf_dispose(&c->in);
    if (buf_len(&c->out) > 0)
        OPENSSL_cleanse((void *)buf_ptr(&c->out), buf_len(&c->out));
    buf_dispose(&c->out);
    buf_dispose(&c->lines);
    h1_chunked_dispose(&c->ch);
    docs_free(c->docs, c->ndocs);
    SSL_CTX_free(c->ctx);
    free((char *)c->conf.name);
    free((char *)c->conf.ns);
    free((char *)c->conf.catalog);
    if (c->conf.token != NULL)
        OPENSSL_cleanse((char *)c->conf.token, strlen(c->conf.token));
    free((char *)c->conf.token);
    free((char *)c->conf.trust_domain);
    free((char *)c->conf.trust_bundle);
    free((char *)c->conf.network);
    free((char *)c->conf.gateway);
    free(c->last_error);
    free(c->host);
    free(c);
}

void link_client_state(const struct link_client *c,
                       struct link_client_state *out)
{
    *out = c->st;
    out->last_error = c->last_error;
}

void link_client_json(const struct link_client *c, struct buf *b)
{
    const struct link_client_state *st = &c->st;

    buf_puts(b, "{\"name\":");
    json_str(b, c->conf.name);
    buf_puts(b, ",\"namespace\":");
    json_str(b, c->conf.ns);
    buf_puts(b, ",\"catalog\":");
    json_str(b, c->conf.catalog);
    buf_puts(b, ",\"network\":");
    json_str(b, c->conf.network);
    buf_puts(b, ",\"trustDomain\":");
    json_str(b, c->conf.trust_domain);
    buf_printf(b,
               ",\"state\":\"%s\",\"connected\":%s,\"retained\":%s,"
               "\"services\":%zu,\"catalogVersion\":%" PRId64
               ",\"lastSyncMs\":%" PRId64 ",\"connectedSinceMs\":%" PRId64
               ",\"streams\":%" PRIu64 ",\"attempts\":%" PRIu64
               ",\"reconnects\":%" PRIu64 ",\"errors\":%" PRIu64
               ",\"lastBackoffMs\":%" PRIu64 ",\"retainForMs\":%" PRId64
               ",\"lastError\":",
               st->connected         ? "connected"
               : c->phase != LC_IDLE ? "connecting"
                                     : "backoff",
               st->connected ? "true" : "false",
               st->retained ? "true" : "false", st->services, st->version,
               st->last_sync_ms, st->connected_ms, st->connects, st->attempts,
               st->reconnects, st->errors, st->last_backoff_ms,
               c->conf.retain_ms);
    if (c->last_error != NULL)
        json_str(b, c->last_error);
    else
        buf_puts(b, "null");
    buf_puts(b, ",\"entries\":[");
    /* Each registry entry as loaded: the ServiceEntry document. */
    for (size_t i = 0; i < c->ndocs; i++) {
        buf_puts(b, i ? "," : "");
        buf_append(b, c->docs[i].data, c->docs[i].len);
    }
    buf_puts(b, "]}");
}
