/*
 * The etcd source (see source_etcd.h): one state machine on the control
 * loop. At most one request is in flight (authenticate, range or the
 * watch), so "one watch per prefix" holds by construction: a new watch is
 * only ever started after the previous one's connection is gone.
 */
#include "config.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <openssl/mem.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/bootstrap.h"
#include "config/resource-t.h"
#include "config/resource.h"
#include "control/dns.h"
#include "control/etcd_http.h"
#include "control/etcd_proto.h"
#include "control/source_etcd.h"
#include "core/addr.h"
#include "core/arena.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/json.h"
#include "core/log.h"
#include "core/rng.h"
#include "event/timer.h"
#include "tls/tls.h"

struct endpoint {
    char *url;
    int tls;
    char host[256];
    int port;
};

/* One key held, with the resource its name says it holds. */
struct entry {
    char *key; /* NUL-terminated; keys with a NUL byte are not ours */
    char *value;
    size_t vlen;
    int64_t mod_revision;
    char *kind, *ns, *name; /* into one allocation; kind "" if bad shape */
    int seen;               /* in the range being applied */
};

enum what { IDLE, AUTH, RANGE, WATCH };

struct source_etcd {
    struct event_base *base;
    struct endpoint *eps;
    size_t neps, cur;
    char *prefix; /* with the trailing '/' */
    size_t prefix_n;
    char *username, *password;
    int64_t dial_ms, request_ms, backoff_ms, backoff_max_ms;
    size_t max_bytes;
    struct ssl_ctx_st *ctx;
    struct dns_cache *dns; /* the loop's; NULL: literals only */
    struct dns_query *query;
    char *token;

    enum what what;
    struct etcd_http *req;
    struct timer retry;
    struct timer notify;
    int fails; /* consecutive failures */
    int need_range;
    /* The prefix read by pages (a resync): every page at range_rev (0
     * before the first answer: the newest), from range_key (NULL: the
     * prefix), page keys at a time; halved when a page is too large, and
     * at one key a keys-only read names the key to leave out. */
    int64_t page_size, page;
    int64_t range_rev;
    char *range_key;
    size_t range_key_n;
    int keys_only;
    int range_diff;       /* changes the pages so far made */
    size_t left_out;      /* keys too large in the resync under way */
    size_t left_out_last; /* ... in the last whole one */
    char *last_skip;      /* what the last skip was, for readiness */
    int synced, watching;
    int64_t rev;
    uint64_t down_since; /* clock_ms(); 0 while up */
    uint64_t rng;

    struct entry *v;
    size_t n, cap;
    struct res_input *inputs;

    void (*on_change)(void *);
    void *arg;
    char *last_error;
    struct source_etcd_status st;
};

/* --- keys held ------------------------------------------------------- */

static void entry_dispose(struct entry *en)
{
    free(en->key);
    free(en->value);
    free(en->kind);
}

/* Splits key (after the prefix) into KIND/NS/NAME. */
static int entry_names(struct source_etcd *e, struct entry *en)
{
    const char *rest = en->key + e->prefix_n;
    char *s = strdup(rest), *a, *b;
    int k;

    if (s == NULL)
        return -1;
    en->kind = s;
    a = strchr(s, '/');
    b = a ? strchr(a + 1, '/') : NULL;
    if (a == NULL || b == NULL || strchr(b + 1, '/') != NULL || a == s ||
        b == a + 1 || b[1] == '\0')
        goto bad;
    *a = '\0';
    *b = '\0';
    for (k = 0; k < RES_KIND_COUNT; k++)
        if (strcmp(s, res_kind_name((enum res_kind)k)) == 0)
            break;
    if (k == RES_KIND_COUNT)
        goto bad;
    en->ns = a + 1;
    en->name = b + 1;
    return 0;
bad:
    s[0] = '\0';
    en->ns = s;
    en->name = s;
    return 0;
}

static size_t find(const struct source_etcd *e, const char *key, int *found)
{
    size_t lo = 0, hi = e->n;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(e->v[mid].key, key);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

/* A key of ours: under the prefix, no NUL byte in it. */
static int ours(const struct source_etcd *e, struct slice key)
{
    return key.n > e->prefix_n && memcmp(key.p, e->prefix, e->prefix_n) == 0 &&
           memchr(key.p, '\0', key.n) == NULL;
}

/* put() sets key to value; 1 when that changed something, -1 on OOM. */
static int put(struct source_etcd *e, const struct etcd_kv *kv)
{
    int found;
    size_t i;
    struct entry en;

    if (!ours(e, kv->key))
        return 0;
    i = find(e, kv->key.p, &found);
    if (found) {
        struct entry *o = &e->v[i];
        char *val;
        if (o->vlen == kv->value.n &&
            (o->vlen == 0 || memcmp(o->value, kv->value.p, o->vlen) == 0)) {
            o->mod_revision = kv->mod_revision;
            return 0;
        }
        val = malloc(kv->value.n + 1);
        if (val == NULL)
            return -1;
        if (kv->value.n > 0)
            memcpy(val, kv->value.p, kv->value.n);
        val[kv->value.n] = '\0';
        free(o->value);
        o->value = val;
        o->vlen = kv->value.n;
        o->mod_revision = kv->mod_revision;
        return 1;
    }
    memset(&en, 0, sizeof(en));
    en.key = strndup(kv->key.p, kv->key.n);
    en.value = malloc(kv->value.n + 1);
    if (en.key == NULL || en.value == NULL || entry_names(e, &en) < 0)
        goto oom;
    if (kv->value.n > 0)
        memcpy(en.value, kv->value.p, kv->value.n);
    en.value[kv->value.n] = '\0';
    en.vlen = kv->value.n;
    en.mod_revision = kv->mod_revision;
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 16;
        struct entry *v = realloc(e->v, cap * sizeof(*v));
        if (v == NULL)
            goto oom;
        e->v = v;
        e->cap = cap;
    }
    memmove(&e->v[i + 1], &e->v[i], (e->n - i) * sizeof(*e->v));
    e->v[i] = en;
    e->n++;
    return 1;
oom:
    entry_dispose(&en);
    return -1;
}

static int del(struct source_etcd *e, struct slice key)
{
    int found;
    size_t i;

    if (!ours(e, key))
        return 0;
    i = find(e, key.p, &found);
    if (!found)
        return 0;
    entry_dispose(&e->v[i]);
    memmove(&e->v[i], &e->v[i + 1], (e->n - i - 1) * sizeof(*e->v));
    e->n--;
    return 1;
}

size_t source_etcd_inputs(struct source_etcd *e, const struct res_input **v)
{
    struct res_input *in = realloc(e->inputs, (e->n + 1) * sizeof(*in));

    *v = NULL;
    if (in == NULL)
        return 0;
    e->inputs = in;
    for (size_t i = 0; i < e->n; i++) {
        in[i].name = e->v[i].key;
        in[i].data = e->v[i].value;
        in[i].len = e->v[i].vlen;
        in[i].kind = e->v[i].kind;
        in[i].ns = e->v[i].ns;
        in[i].rname = e->v[i].name;
    }
    *v = in;
    return e->n;
}

/* --- the state machine ------------------------------------------------ */

static void step(struct source_etcd *e);

static void set_error(struct source_etcd *e, const char *msg)
{
    char *m = msg ? strdup(msg) : NULL;

    free(e->last_error);
    e->last_error = m;
}

static void changed(struct source_etcd *e)
{
    timer_defer(&e->notify);
}

static void on_notify(void *arg)
{
    struct source_etcd *e = arg;

    /* Half a read by pages is no revision at all: its end notifies. */
    if (e->range_rev != 0)
        return;
    e->on_change(e->arg);
}

/* The span of the delay after fails consecutive failures: backoff,
 * doubled per failure after the first, capped at backoffMax. */
static uint64_t backoff_span(const struct source_etcd *e)
{
    uint64_t d = (uint64_t)e->backoff_ms;
    int k = e->fails - 1;

    while (k-- > 0 && d < (uint64_t)e->backoff_max_ms)
        d *= 2;
    if (d > (uint64_t)e->backoff_max_ms)
        d = (uint64_t)e->backoff_max_ms;
    return d;
}

/* The next delay: the first failure in [0, backoff], then drawn in the
 * upper half of its span: enough spread that a fleet cut off together
 * does not come back together. */
static uint64_t backoff(struct source_etcd *e)
{
    uint64_t d = backoff_span(e), lo;

    if (e->fails <= 1)
        return rng_next(&e->rng) % (d + 1);
    lo = d / 2;
    return lo + rng_next(&e->rng) % (d - lo + 1);
}

/*
 * How long an attempt after a failure waits for the answer's head. A
 * member that restarts accepts connections before it serves: what it
 * holds then is answered all at once when it is ready, whatever the
 * jitter spread. Attempts that give up after a quarter of the backoff
 * span (at least 200 ms, at most the normal timeout, which the span
 * reaches as failures go on) leave only about a quarter of a fleet
 * waiting at that moment; the rest come at their own jittered times.
 */
static int64_t attempt_timeout(const struct source_etcd *e, int64_t normal)
{
    int64_t t;

    if (e->fails == 0)
        return normal;
    t = (int64_t)(backoff_span(e) / 4);
    if (t < 200)
        t = 200;
    return t < normal ? t : normal;
}

/* A request failed: the next member, after a delay. */
static void failed(struct source_etcd *e, const char *what, const char *why)
{
    char msg[768];
    const struct endpoint *ep = &e->eps[e->cur];
    uint64_t ms;

    snprintf(msg, sizeof(msg), "%s on %s: %s", what, ep->url, why);
    set_error(e, msg);
    e->st.failures++;
    e->what = IDLE;
    if (e->watching || e->down_since == 0)
        e->down_since = clock_ms();
    e->watching = 0;
    e->fails++;
    e->cur = (e->cur + 1) % e->neps;
    ms = backoff(e);
    e->st.last_backoff_ms = ms;
    LOG_LIMITED(1000, LOG_WARN,
                "etcd: %s; %s%s, next try on %s in %" PRIu64 " ms", msg,
                e->synced ? "keeping the resources of revision " : "",
                e->synced ? "" : "not synced yet", e->eps[e->cur].url, ms);
    if (e->synced)
        log_debug("etcd: holding revision %" PRId64, e->rev);
    timer_arm(&e->retry, ms);
}

static void on_retry(void *arg)
{
    step(arg);
}

/* Errors that say the token is no longer good: authenticate again. */
static void check_auth(struct source_etcd *e, int status, int64_t code,
                       struct slice msg)
{
    if (status == 401 || code == 16 ||
        (msg.n > 0 && memmem(msg.p, msg.n, "auth", 4) != NULL)) {
        free(e->token);
        e->token = NULL;
    }
}

/* What an answer other than 200 says, for messages. */
static void error_text(int status, const char *body, size_t n, char *out,
                       size_t on, struct source_etcd *e)
{
    struct arena a;
    struct etcd_error er;
    const char *why = NULL;

    arena_init(&a, 4096);
    if (etcd_parse_error(&a, body, n, &er, &why) == 0 && er.message.n > 0) {
        snprintf(out, on, "HTTP %d: %.*s", status, (int)er.message.n,
                 er.message.p);
        check_auth(e, status, er.code, er.message);
    } else {
        snprintf(out, on, "HTTP %d", status);
        check_auth(e, status, 0, SLICE_NULL);
    }
    arena_dispose(&a);
}

/* The request is over: e->req is cleared at once (so step() may start
 * the next one) and freed when its callback returns, since the answer's
 * bytes are its own until then. */
static void req_done_common(struct source_etcd *e)
{
    e->req = NULL;
}

static void handle_auth(void *arg, int status, const char *body, size_t n,
                        const char *err)
{
    struct source_etcd *e = arg;
    struct arena a;
    struct slice tok;
    const char *why = NULL;
    char msg[512];

    req_done_common(e);
    if (err != NULL) {
        failed(e, "authenticate", err);
        return;
    }
    if (status != 200) {
        error_text(status, body, n, msg, sizeof(msg), e);
        failed(e, "authenticate", msg);
        return;
    }
    arena_init(&a, 4096);
    if (etcd_parse_auth(&a, body, n, &tok, &why) < 0) {
        arena_dispose(&a);
        failed(e, "authenticate", why);
        return;
    }
    free(e->token);
    e->token = strndup(tok.p, tok.n);
    arena_dispose(&a);
    step(e);
}

/* resync_reset() makes the next request the first page of a whole read
 * of the prefix at the newest revision. */
static void resync_reset(struct source_etcd *e)
{
    free(e->range_key);
    e->range_key = NULL;
    e->range_key_n = 0;
    e->range_rev = 0;
    e->page = e->page_size;
    e->keys_only = 0;
    e->range_diff = 0;
    e->left_out = 0;
}

/* The next page starts just after key (key + a NUL byte: etcd orders
 * keys as bytes). */
static int resync_after(struct source_etcd *e, struct slice key)
{
    char *k = malloc(key.n + 1);

    if (k == NULL)
        return -1;
    memcpy(k, key.p, key.n);
    k[key.n] = '\0';
    free(e->range_key);
    e->range_key = k;
    e->range_key_n = key.n + 1;
    return 0;
}

/*
 * skip() gives up a watch message strait cannot take (larger than
 * maxResponseBytes, or not etcd's JSON): re-watching from the same
 * revision would get the same message forever and no later change would
 * ever apply. The prefix is read again by pages at the newest revision
 * (which holds whatever the message carried, a value too large being left
 * out by name there) and the watch goes on after it.
 */
static void skip(struct source_etcd *e, const char *why)
{
    char msg[512];

    snprintf(msg, sizeof(msg),
             "a watch message after revision %" PRId64 " was skipped (%s); "
             "the prefix is read again at the newest revision",
             e->rev, why);
    free(e->last_skip);
    e->last_skip = strdup(msg);
    e->st.skipped++;
    log_warn("etcd: %s", msg);
    e->what = IDLE;
    e->watching = 0;
    e->need_range = 1;
    resync_reset(e);
    step(e);
}

/* A page too large for maxResponseBytes: half the keys; at one key, the
 * key's name alone (keys_only), to leave it out. */
static void page_too_large(struct source_etcd *e)
{
    e->what = IDLE;
    if (e->page > 1) {
        e->page /= 2;
        log_debug("etcd: a range page is larger than maxResponseBytes; "
                  "asking for %" PRId64 " key(s)",
                  e->page);
    } else {
        e->keys_only = 1;
    }
    step(e);
}

/* The keys-only page of one key: that key's value alone passes the
 * limit. It is left out (what was held for it stays) and named. */
static void leave_out(struct source_etcd *e, const struct etcd_range *r)
{
    int found = 0;
    size_t i;
    char msg[512];

    e->keys_only = 0;
    e->page = e->page_size;
    if (r->n == 0)
        return;
    if (ours(e, r->kvs[0].key)) {
        i = find(e, r->kvs[0].key.p, &found);
        if (found)
            e->v[i].seen = 1;
    }
    e->left_out++;
    e->st.keys_skipped++;
    snprintf(msg, sizeof(msg),
             "key %.*s at revision %" PRId64 " is larger than "
             "maxResponseBytes (%zu): left out%s",
             (int)r->kvs[0].key.n, r->kvs[0].key.p, r->header.revision,
             e->max_bytes, found ? ", its last value read stays" : "");
    free(e->last_skip);
    e->last_skip = strdup(msg);
    LOG_LIMITED(200, LOG_WARN, "etcd: %s", msg);
}

static void handle_range(void *arg, int status, const char *body, size_t n,
                         const char *err)
{
    struct source_etcd *e = arg;
    struct etcd_range r;
    struct arena a;
    const char *why = NULL;
    char msg[512];
    int diff = 0;

    req_done_common(e);
    if (err != NULL && etcd_http_too_large(err) && !e->keys_only) {
        page_too_large(e);
        return;
    }
    if (err != NULL) {
        failed(e, "range", err);
        return;
    }
    if (status != 200) {
        struct etcd_error er;
        /* The revision the pages read at was compacted meanwhile: start
         * again at the newest. */
        arena_init(&a, 4096);
        if (e->range_rev > 0 && etcd_parse_error(&a, body, n, &er, &why) == 0 &&
            er.code == 11) {
            arena_dispose(&a);
            e->st.compactions++;
            log_warn("etcd: revision %" PRId64 " was compacted while %s was "
                     "read by pages; reading it again",
                     e->range_rev, e->prefix);
            resync_reset(e);
            e->what = IDLE;
            step(e);
            return;
        }
        arena_dispose(&a);
        error_text(status, body, n, msg, sizeof(msg), e);
        failed(e, "range", msg);
        return;
    }
    arena_init(&a, 64 * 1024);
    if (etcd_parse_range(&a, body, n, &r, &why) < 0) {
        arena_dispose(&a);
        failed(e, "range", why);
        return;
    }
    e->st.range_pages++;
    /* The first page: every key held that the whole read lacks was
     * deleted meanwhile (a compaction hid the DELETE events). */
    if (e->range_rev == 0 && e->range_key == NULL) {
        for (size_t i = 0; i < e->n; i++)
            e->v[i].seen = 0;
        e->range_rev = r.header.revision;
    }
    if (e->keys_only) {
        leave_out(e, &r);
    } else {
        for (size_t k = 0; k < r.n; k++) {
            int c = put(e, &r.kvs[k]), found = 0;
            size_t i;
            if (c < 0) {
                arena_dispose(&a);
                failed(e, "range", "out of memory");
                return;
            }
            diff += c;
            if (ours(e, r.kvs[k].key)) {
                i = find(e, r.kvs[k].key.p, &found);
                if (found)
                    e->v[i].seen = 1;
            }
        }
        /* A page that fitted: the next may be as large as configured. */
        e->page = e->page_size;
    }
    e->range_diff += diff;
    /* A member answers: not down, even before the watch is made. */
    e->down_since = 0;
    if (r.more && r.n > 0) {
        if (resync_after(e, r.kvs[r.n - 1].key) < 0) {
            arena_dispose(&a);
            failed(e, "range", "out of memory");
            return;
        }
        arena_dispose(&a);
        e->what = IDLE;
        step(e);
        return;
    }
    arena_dispose(&a);
    for (size_t i = e->n; i-- > 0;) {
        if (e->v[i].seen)
            continue;
        entry_dispose(&e->v[i]);
        memmove(&e->v[i], &e->v[i + 1], (e->n - i - 1) * sizeof(*e->v));
        e->n--;
        e->range_diff++;
    }
    e->rev = e->range_rev;
    diff = e->range_diff;
    e->left_out_last = e->left_out;
    resync_reset(e);
    e->st.ranges++;
    e->need_range = 0;
    log_info("etcd: read %s on %s: %zu key(s) at revision %" PRId64
             ", %d changed, %zu left out",
             e->prefix, e->eps[e->cur].url, e->n, e->rev, diff,
             e->left_out_last);
    if (diff > 0 || !e->synced) {
        e->synced = 1;
        changed(e);
    }
    e->what = IDLE;
    step(e);
}

static int handle_line(void *arg, const char *p, size_t n)
{
    struct source_etcd *e = arg;
    struct etcd_watch_msg m;
    struct arena a;
    const char *why = NULL;
    int diff = 0;
    int64_t top = 0;

    arena_init(&a, 16 * 1024);
    if (etcd_parse_watch(&a, p, n, &m, &why) < 0) {
        arena_dispose(&a);
        req_done_common(e);
        skip(e, why);
        return 1;
    }
    if (m.is_error) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%.*s", (int)m.error.n, m.error.p);
        check_auth(e, 0, m.error_code, m.error);
        arena_dispose(&a);
        req_done_common(e);
        failed(e, "watch", msg);
        return 1;
    }
    if (m.created) {
        if (e->st.watches_started > 1)
            log_info("etcd: watching %s on %s again from revision %" PRId64,
                     e->prefix, e->eps[e->cur].url, e->rev + 1);
        e->watching = 1;
        e->st.watch_created_ms = clock_real_ms();
        e->fails = 0;
        e->down_since = 0;
        set_error(e, NULL);
    }
    if (m.canceled) {
        char msg[512];
        req_done_common(e);
        if (m.compact_revision > 0) {
            e->st.compactions++;
            log_warn("etcd: revision %" PRId64 " was compacted (oldest kept: "
                     "%" PRId64 "); reading %s again",
                     e->rev + 1, m.compact_revision, e->prefix);
            arena_dispose(&a);
            e->need_range = 1;
            e->watching = 0;
            e->what = IDLE;
            step(e);
            return 1;
        }
        snprintf(msg, sizeof(msg), "canceled: %.*s", (int)m.cancel_reason.n,
                 m.cancel_reason.p);
        arena_dispose(&a);
        failed(e, "watch", msg);
        return 1;
    }
    for (size_t i = 0; i < m.n; i++) {
        const struct etcd_event *ev = &m.events[i];
        int c = ev->type == ETCD_DELETE ? del(e, ev->kv.key) : put(e, &ev->kv);
        if (c < 0) {
            arena_dispose(&a);
            req_done_common(e);
            failed(e, "watch", "out of memory");
            return 1;
        }
        diff += c;
        if (ev->kv.mod_revision > top)
            top = ev->kv.mod_revision;
    }
    e->st.events += m.n;
    if (m.n > 0) {
        if (top > e->rev)
            e->rev = top;
    } else if (!m.created && m.header.revision > 0) {
        /* A progress notification: every event up to it was delivered. */
        e->st.progress++;
        if (m.header.revision > e->rev)
            e->rev = m.header.revision;
    }
    arena_dispose(&a);
    if (diff > 0)
        changed(e);
    return 0;
}

static void handle_watch_done(void *arg, int status, const char *body, size_t n,
                              const char *err)
{
    struct source_etcd *e = arg;
    char msg[512];

    req_done_common(e);
    if (err != NULL && status == 200 && etcd_http_too_large(err)) {
        skip(e, "larger than maxResponseBytes");
        return;
    }
    if (err != NULL) {
        failed(e, "watch", err);
        return;
    }
    if (status != 200) {
        error_text(status, body, n, msg, sizeof(msg), e);
        failed(e, "watch", msg);
        return;
    }
    failed(e, "watch", "the stream ended");
}

static void on_auth(void *arg, int status, const char *body, size_t n,
                    const char *err)
{
    struct source_etcd *e = arg;
    struct etcd_http *h = e->req;

    handle_auth(arg, status, body, n, err);
    etcd_http_free(h);
}

static void on_range(void *arg, int status, const char *body, size_t n,
                     const char *err)
{
    struct source_etcd *e = arg;
    struct etcd_http *h = e->req;

    handle_range(arg, status, body, n, err);
    etcd_http_free(h);
}

static int on_watch_line(void *arg, const char *p, size_t n)
{
    struct source_etcd *e = arg;
    struct etcd_http *h = e->req;

    if (handle_line(arg, p, n) == 0)
        return 0;
    etcd_http_free(h);
    return 1;
}

static void on_watch_done(void *arg, int status, const char *body, size_t n,
                          const char *err)
{
    struct source_etcd *e = arg;
    struct etcd_http *h = e->req;

    handle_watch_done(arg, status, body, n, err);
    etcd_http_free(h);
}

static void start(struct source_etcd *e, enum what w, const char *path,
                  struct buf *body, int stream, int64_t timeout_ms,
                  const struct addr *addr)
{
    const struct endpoint *ep = &e->eps[e->cur];
    struct etcd_http_conf c;
    struct etcd_http_cb cb;
    const char *why = NULL;

    memset(&c, 0, sizeof(c));
    c.addr = *addr;
    c.host = ep->host;
    c.ctx = ep->tls ? e->ctx : NULL;
    c.path = path;
    c.token = w == AUTH ? NULL : e->token;
    c.body = buf_len(body) > 0 ? buf_ptr(body) : "";
    c.body_n = buf_len(body);
    c.timeout_ms = attempt_timeout(e, timeout_ms);
    c.max_body = e->max_bytes;
    c.stream = stream;
    cb.arg = e;
    cb.skipped = NULL; /* a resync by pages gets past it (step()) */
    cb.line = on_watch_line;
    cb.done = w == AUTH ? on_auth : w == RANGE ? on_range : on_watch_done;
    e->what = w;
    e->req = etcd_http_new(e->base, &c, &cb, &why);
    if (e->req == NULL)
        failed(e, "connect", why);
}

/* send() makes the next request to the member at addr. */
static void send_to(struct source_etcd *e, const struct addr *addr)
{
    struct buf body;
    struct slice key = {e->prefix, e->prefix_n};
    char end[512];
    struct slice se;

    buf_init(&body, 64 * 1024);
    se.p = end;
    se.n = etcd_prefix_end(e->prefix, e->prefix_n, end);
    if (e->username[0] != '\0' && e->token == NULL) {
        etcd_req_auth(&body, e->username, e->password);
        start(e, AUTH, "/v3/auth/authenticate", &body, 0, e->request_ms, addr);
    } else if (!e->synced || e->need_range) {
        struct slice from = key;
        if (e->range_key != NULL) {
            from.p = e->range_key;
            from.n = e->range_key_n;
        }
        etcd_req_range_page(&body, from, se, e->range_rev,
                            e->keys_only ? 1 : e->page, e->keys_only);
        start(e, RANGE, "/v3/kv/range", &body, 0, e->request_ms, addr);
    } else {
        etcd_req_watch(&body, key, se, e->rev + 1, 1);
        e->st.watches_started++;
        if (e->st.watches_started > 1)
            e->st.reconnects++;
        start(e, WATCH, "/v3/watch", &body, 1, e->dial_ms, addr);
    }
    if (buf_len(&body) > 0)
        OPENSSL_cleanse((void *)buf_ptr(&body), buf_len(&body));
    buf_dispose(&body);
}

/* A member's name resolved (through the control loop's evdns, with
 * dns.nameservers), for this attempt only. */
static void on_resolved(void *arg, const struct addr *a, const char *why)
{
    struct source_etcd *e = arg;

    e->query = NULL;
    if (a == NULL) {
        failed(e, "resolve", why);
        return;
    }
    send_to(e, a);
}

static void step(struct source_etcd *e)
{
    const struct endpoint *ep = &e->eps[e->cur];
    struct addr a;

    if (e->req != NULL || e->query != NULL)
        return; /* one request at a time, ever */
    timer_cancel(&e->retry);
    if (addr_literal(&a, ep->host, ep->port) == 0) {
        send_to(e, &a);
        return;
    }
    if (e->dns == NULL) {
        failed(e, "resolve", "no resolver");
        return;
    }
    e->query = dns_resolve(e->dns, ep->host, ep->port, on_resolved, e);
    if (e->query == NULL)
        failed(e, "resolve", "out of memory");
}

static void conf_free(struct source_etcd *e)
{
    for (size_t i = 0; i < e->neps; i++)
        free(e->eps[i].url);
    free(e->eps);
    free(e->prefix);
    free(e->username);
    if (e->password != NULL)
        OPENSSL_cleanse(e->password, strlen(e->password));
    free(e->password);
}

struct source_etcd *source_etcd_new(struct event_base *base,
                                    const struct bootstrap_etcd *conf,
                                    struct dns_cache *dns,
                                    void (*on_change)(void *), void *arg,
                                    char **err)
{
    struct source_etcd *e = calloc(1, sizeof(*e));
    int need_tls = 0;

    *err = NULL;
    if (e == NULL)
        return NULL;
    e->base = base;
    e->on_change = on_change;
    e->arg = arg;
    timer_init(&e->retry, base, on_retry, e);
    timer_init(&e->notify, base, on_notify, e);
    e->rng = (uint64_t)clock_real_ms() * 2654435761u ^ (uint64_t)getpid() << 32;
    if (e->rng == 0)
        e->rng = 1;
    e->eps = calloc(conf->endpoints.n, sizeof(*e->eps));
    e->neps = conf->endpoints.n;
    if (e->eps == NULL || asprintf(&e->prefix, "%s/", conf->prefix) < 0 ||
        (e->username = strdup(conf->username)) == NULL ||
        (e->password = strdup(conf->password)) == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    e->prefix_n = strlen(e->prefix);
    for (size_t i = 0; i < e->neps; i++) {
        struct endpoint *ep = &e->eps[i];
        const char *why = NULL;
        ep->url = strdup(conf->endpoints.v[i]);
        if (ep->url == NULL ||
            bootstrap_etcd_endpoint(ep->url, &ep->tls, ep->host,
                                    sizeof(ep->host), &ep->port, &why) < 0) {
            err_set(err, "config.etcd.endpoints[%zu]: %s", i,
                    why ? why : "out of memory");
            goto fail;
        }
        need_tls |= ep->tls;
    }
    e->dial_ms = conf->dial_timeout_ms;
    e->request_ms = conf->request_timeout_ms;
    e->backoff_ms = conf->backoff_ms;
    e->backoff_max_ms = conf->backoff_max_ms;
    e->max_bytes = (size_t)conf->max_response_bytes;
    e->page_size = conf->page_size > 0 ? conf->page_size : 1000;
    resync_reset(e);
    if (need_tls) {
        struct tls_client_conf tc;
        memset(&tc, 0, sizeof(tc));
        tc.ca_file = conf->ca_file;
        tc.cert_file = conf->cert_file[0] ? conf->cert_file : NULL;
        tc.key_file = conf->key_file[0] ? conf->key_file : NULL;
        e->ctx = tls_client_ctx_build(&tc, err);
        if (e->ctx == NULL) {
            err_prefix(err, "config.etcd: ");
            goto fail;
        }
    }
    e->dns = dns;
    log_info("etcd: %zu endpoint(s), prefix %s", e->neps, e->prefix);
    e->down_since = clock_ms();
    step(e);
    return e;
fail:
    source_etcd_free(e);
    return NULL;
}

void source_etcd_free(struct source_etcd *e)
{
    if (e == NULL)
        return;
    etcd_http_free(e->req);
    dns_query_cancel(e->query);
    timer_dispose(&e->retry);
    timer_dispose(&e->notify);
    SSL_CTX_free(e->ctx);
    for (size_t i = 0; i < e->n; i++)
        entry_dispose(&e->v[i]);
    free(e->v);
    free(e->inputs);
    if (e->token != NULL)
        OPENSSL_cleanse(e->token, strlen(e->token));
    free(e->token);
    free(e->last_error);
    free(e->last_skip);
    free(e->range_key);
    conf_free(e);
    free(e);
}

void source_etcd_status(const struct source_etcd *e,
                        struct source_etcd_status *out)
{
    *out = e->st;
    out->synced = e->synced;
    out->watching = e->watching;
    out->revision = e->rev;
    out->keys = e->n;
    out->endpoint = e->eps[e->cur].url;
    out->last_error = e->last_error;
    out->last_skip = e->last_skip;
    out->keys_left_out = e->left_out_last;
    out->down_ms = e->down_since ? clock_ms() - e->down_since : 0;
}

void source_etcd_json(const struct source_etcd *e, struct buf *b)
{
    struct source_etcd_status st;

    source_etcd_status(e, &st);
    buf_puts(b, "{\"prefix\":");
    json_escape(b, e->prefix, e->prefix_n - 1);
    buf_puts(b, ",\"endpoint\":");
    json_str(b, st.endpoint);
    buf_printf(b,
               ",\"synced\":%s,\"watching\":%s,\"revision\":%" PRId64
               ",\"keys\":%zu,\"downMs\":%" PRIu64 ",\"lastError\":",
               st.synced ? "true" : "false", st.watching ? "true" : "false",
               st.revision, st.keys, st.down_ms);
    if (st.last_error != NULL)
        json_str(b, st.last_error);
    else
        buf_puts(b, "null");
    buf_puts(b, "}");
}
