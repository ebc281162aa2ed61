/*
 * The remote JWKS cache (see jwks.h): one entry per jwksUri, each with at
 * most one fetch in flight and one timer for the next. A fetch is one
 * HTTP/1.1 GET (control/fetch.h), its answer checked with jwt_keys_parse()
 * before it replaces the last good document.
 */
#include "config.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ssl.h>

#include "control/fetch.h"
#include "control/jwks.h"
#include "core/json.h"
#include "core/log.h"
#include "event/timer.h"
#include "policy/jwt.h"
#include "tls/tls.h"

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
    struct timer timer; /* next fetch */
    struct fetch *f;    /* the fetch in flight, or NULL */
    struct entry *next;
};

struct jwks_cache {
    struct event_base *base;
    struct dns_cache *dns;
    jwks_change_fn on_change;
    void *arg;
    struct timer change_ev; /* deferred: on_change on the next turn */
    struct jwks_conf conf;
    char *ca_file;
    struct ssl_ctx_st *ctx; /* https; made on first use */
    struct entry *list;
    struct jwks_stats st;
};

static void changed(struct jwks_cache *c)
{
    c->st.changes++;
    timer_defer(&c->change_ev);
}

static void on_change_ev(void *arg)
{
    struct jwks_cache *c = arg;

    c->on_change(c->arg);
}

/* end_fetch() closes the fetch in flight and schedules the next one. */
static void end_fetch(struct entry *e, const char *failure)
{
    struct jwks_cache *c = e->c;
    int64_t next = c->conf.refresh_ms;

    fetch_free(e->f);
    e->f = NULL;
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
    timer_arm(&e->timer, (uint64_t)next);
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
    if (jwt_keys_skipped(k, &why) > 0)
        log_warn("jwksUri %s: %zu unusable key(s) skipped (%s)", e->uri,
                 jwt_keys_skipped(k, &why), why);
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

static void on_fetched(void *arg, const struct fetch_answer *a, const char *err)
{
    struct entry *e = arg;
    char msg[160];

    if (err != NULL) {
        end_fetch(e, err);
    } else if (a->status != 200) {
        snprintf(msg, sizeof(msg), "answered HTTP %d", a->status);
        end_fetch(e, msg);
    } else {
        take_document(e, a->body, a->n);
    }
}

static void start_fetch(struct entry *e)
{
    struct jwks_cache *c = e->c;
    struct fetch_conf fc = {0};
    const char *why;
    char *host = NULL, *path = NULL, *err = NULL;
    int tls, port;

    if (e->f != NULL)
        return;
    c->st.fetches++;
    if (jwt_parse_url(e->uri, &tls, &host, &port, &path, &why) < 0) {
        free(host);
        free(path);
        end_fetch(e, why);
        return;
    }
    if (tls && c->ctx == NULL) {
        c->ctx = tls_client_ctx_new(c->ca_file, 0, 0, &err);
        if (c->ctx == NULL)
            goto fail;
    }
    fc.host = host;
    fc.port = port;
    fc.method = "GET";
    fc.path = path;
    fc.headers = "Accept: application/json\r\nUser-Agent: strait\r\n";
    fc.ctx = tls ? c->ctx : NULL;
    fc.verify_name = 1;
    fc.timeout_ms = e->timeout_ms > 0 ? e->timeout_ms : 5000;
    fc.max_body = JSON_MAX_BYTES;
    fc.dns = c->dns;
    e->f = fetch_new(c->base, &fc, on_fetched, e, &err);
fail:
    free(host);
    free(path);
    if (e->f == NULL) {
        end_fetch(e, err ? err : "out of memory");
        free(err);
    }
}

static void on_timer(void *arg)
{
    start_fetch(arg);
}

static void entry_free(struct entry *e)
{
    if (e == NULL)
        return;
    fetch_free(e->f);
    timer_dispose(&e->timer);
    free(e->doc);
    free(e->uri);
    free(e);
}

struct jwks_cache *jwks_cache_new(struct event_base *base,
                                  struct dns_cache *dns,
                                  jwks_change_fn on_change, void *arg)
{
    struct jwks_cache *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->base = base;
    c->dns = dns;
    c->on_change = on_change;
    c->arg = arg;
    c->conf.refresh_ms = 5 * 60 * 1000;
    timer_init(&c->change_ev, base, on_change_ev, c);
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
    timer_dispose(&c->change_ev);
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
        e->uri = strdup(uri);
        timer_init(&e->timer, c->base, on_timer, e);
        if (e->uri == NULL) {
            entry_free(e);
            return NULL;
        }
        e->next = c->list;
        c->list = e;
        c->st.uris++;
        /* Fetched from the loop, not inside the build that asks. */
        timer_arm(&e->timer, 0);
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
