/*
 * The Kubernetes source (see source_kube.h): one watcher per (kind,
 * namespace, selector), each a small state machine on the control loop
 * with at most one request in flight (its list page or its watch), so
 * "one watch per (kind, selector)" holds by construction: a watch is only
 * ever made after the previous one's connection is gone, and watchers are
 * made once, in source_kube_new().
 */
#include "config.h"

#include <inttypes.h>
#include <openssl/mem.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/bootstrap.h"
#include "config/resource.h"
#include "control/dns.h"
#include "control/etcd_http.h"
#include "control/kube_cache.h"
#include "control/kube_proto.h"
#include "control/source_kube.h"
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

/* Where each kind lives in the API. */
struct kind_info {
    /* The name config.kubernetes (kinds, selectors) and the stats use:
     * the kind, qualified by its group where two groups share the kind
     * (Gateway.gateway.networking.k8s.io). */
    const char *name;
    const char *kind;
    const char *group; /* "/api/v1" or "/apis/GROUP/VERSION" */
    const char *api_version;
    const char *plural;
    int namespaced;
    int crd; /* 404 means not installed, not an outage */
};

static const struct kind_info kinds[] = {
    {"Gateway", "Gateway", "/apis/networking.istio.io/v1",
     "networking.istio.io/v1", "gateways", 1, 1},
    {"VirtualService", "VirtualService", "/apis/networking.istio.io/v1",
     "networking.istio.io/v1", "virtualservices", 1, 1},
    {"DestinationRule", "DestinationRule", "/apis/networking.istio.io/v1",
     "networking.istio.io/v1", "destinationrules", 1, 1},
    {"ServiceEntry", "ServiceEntry", "/apis/networking.istio.io/v1",
     "networking.istio.io/v1", "serviceentries", 1, 1},
    {"WorkloadEntry", "WorkloadEntry", "/apis/networking.istio.io/v1",
     "networking.istio.io/v1", "workloadentries", 1, 1},
    {"AuthorizationPolicy", "AuthorizationPolicy", "/apis/security.istio.io/v1",
     "security.istio.io/v1", "authorizationpolicies", 1, 1},
    {"PeerAuthentication", "PeerAuthentication", "/apis/security.istio.io/v1",
     "security.istio.io/v1", "peerauthentications", 1, 1},
    {"RequestAuthentication", "RequestAuthentication",
     "/apis/security.istio.io/v1", "security.istio.io/v1",
     "requestauthentications", 1, 1},
    {"LuaPolicy", "LuaPolicy", "/apis/strait.io/v1alpha1", "strait.io/v1alpha1",
     "luapolicies", 1, 1},
    {"MeshLink", "MeshLink", "/apis/strait.io/v1alpha1", "strait.io/v1alpha1",
     "meshlinks", 1, 1},
    {"Service", "Service", "/api/v1", "v1", "services", 1, 0},
    {"EndpointSlice", "EndpointSlice", "/apis/discovery.k8s.io/v1",
     "discovery.k8s.io/v1", "endpointslices", 1, 0},
    {"Secret", "Secret", "/api/v1", "v1", "secrets", 1, 0},
    {"Namespace", "Namespace", "/api/v1", "v1", "namespaces", 0, 0},
    {"Node", "Node", "/api/v1", "v1", "nodes", 0, 0},
    /* For LuaPolicy targetRefs and HTTPRoute backendRefs across
     * namespaces; v1beta1 is served by every release that has it. */
    {"ReferenceGrant", "ReferenceGrant",
     "/apis/gateway.networking.k8s.io/v1beta1",
     "gateway.networking.k8s.io/v1beta1", "referencegrants", 1, 1},
    {"GatewayClass", "GatewayClass", "/apis/gateway.networking.k8s.io/v1",
     "gateway.networking.k8s.io/v1", "gatewayclasses", 0, 1},
    {"Gateway.gateway.networking.k8s.io", "Gateway",
     "/apis/gateway.networking.k8s.io/v1", "gateway.networking.k8s.io/v1",
     "gateways", 1, 1},
    {"HTTPRoute", "HTTPRoute", "/apis/gateway.networking.k8s.io/v1",
     "gateway.networking.k8s.io/v1", "httproutes", 1, 1},
    /* The labels of EndpointSlice endpoints (docs/pods.md). */
    {"Pod", "Pod", "/api/v1", "v1", "pods", 1, 0},
};
#define NKINDS (sizeof(kinds) / sizeof(*kinds))
_Static_assert(NKINDS <= SOURCE_KUBE_MAX_KINDS,
               "SOURCE_KUBE_MAX_KINDS holds every kind");

enum what { IDLE, LIST, WATCH };

struct watcher {
    struct source_kube *k;
    const struct kind_info *ki;
    size_t kidx; /* into k->stats */
    char *ns;    /* "": cluster-wide */
    char *label_sel, *field_sel;
    char *path; /* the collection's path */
    enum what what;
    struct etcd_http *req;
    struct dns_query *query;
    struct timer retry;
    struct timer guard;  /* a watch the server does not end by its timeout */
    uint64_t watch_t_ms; /* the timeoutSeconds asked, in ms */
    char *rv;            /* the last resourceVersion seen; opaque */
    char *cont;          /* the continue token of a list in progress */
    int quorum;          /* the next list asks resourceVersion="" */
    int listed;          /* the list in progress has had a page */
    int synced;
    int missing;
    int fails;
    int expiries;        /* 410s in a row with no event between them */
    uint64_t healthy_ms; /* since a good list or the watch after a
                          * failure; 0: just failed */
    uint64_t watch_ms;   /* when the watch was asked for */
    struct kube_cache cache;
    uint64_t watches, relists, expired, errors, events;
    char *last_error;
    /* The last RETRY_KEPT delays drawn after failures, and how many were
     * drawn in all: /config_dump shows them, so the backoff can be read
     * as chosen, not guessed from when the retries arrived. */
#define RETRY_KEPT 16
    uint32_t retry_ms[RETRY_KEPT];
    uint64_t retries;
};

struct source_kube {
    struct event_base *base;
    struct kube_target t;
    struct ssl_ctx_st *ctx;
    struct dns_cache *dns;
    struct watcher *w;
    size_t nw;
    int64_t min_watch_ms, request_ms, backoff_ms, backoff_max_ms, reset_ms;
    int64_t page_size;
    size_t max_bytes, max_objects, objects;
    uint64_t debounce_ms;
    struct timer notify;
    uint64_t rng;
    int synced;
    struct res_input *inputs;
    struct source_kube_kind stats[NKINDS];
    size_t nstats;
    void (*on_change)(void *);
    void *arg;
};

/* --- objects held ------------------------------------------------------ */

/* check() loads o alone, as the snapshot will: a schema error leaves it
 * out (o->error) instead of keeping every other object from applying. */
static void check(struct watcher *w, struct kube_cache_obj *o)
{
    struct res_input in = {o->input,    o->json, o->json_n,
                           w->ki->kind, o->ns,   o->name};
    struct resource_set *set;
    struct buf errs;
    int nerr = 0;

    free(o->error);
    o->error = NULL;
    buf_init(&errs, 64 * 1024);
    set = resource_load_inputs(NULL, "default", &in, 1, &errs, &nerr);
    if (set == NULL || nerr > 0) {
        const char *m = buf_len(&errs) ? buf_cstr(&errs) : "does not load";
        size_t mn = strlen(m);
        while (mn > 0 && m[mn - 1] == '\n')
            mn--;
        o->error = strndup(m, mn);
        m = o->error != NULL ? o->error : "does not load";
        w->errors++;
        LOG_LIMITED(200, LOG_WARN,
                    "kubernetes: %s %s/%s is left out (the rest applies): %s",
                    w->ki->kind, o->ns[0] ? o->ns : "-", o->name, m);
    }
    resource_set_free(set);
    buf_dispose(&errs);
}

/* put() holds obj; 1 when that changed something, 0 when not (or when
 * it is one past maxObjects: left out and logged), -1 when out of
 * memory. */
static int put(struct watcher *w, const struct kube_object *obj)
{
    struct source_kube *k = w->k;
    struct kube_cache_obj *o;
    int rc;

    if (k->objects >= k->max_objects &&
        kube_cache_find(&w->cache, obj->ns, obj->name) == NULL) {
        w->errors++;
        LOG_LIMITED(1000, LOG_ERROR,
                    "kubernetes: %s %s/%s left out: config.kubernetes."
                    "maxObjects (%zu) objects are held",
                    w->ki->kind, obj->ns, obj->name, k->max_objects);
        return 0;
    }
    rc = kube_cache_put(&w->cache, w->ki->kind, obj, &o);
    if (rc < 0)
        return -1;
    if (rc == KUBE_CACHE_SAME)
        return 0;
    if (rc == KUBE_CACHE_ADDED)
        k->objects++;
    if (obj->bad != NULL) {
        /* Held by name (a later good version replaces it, a DELETE or a
         * relist without it drops it) but never loaded. */
        free(o->error);
        o->error = strdup(obj->bad);
        if (o->error == NULL)
            return -1;
        w->errors++;
        LOG_LIMITED(200, LOG_WARN,
                    "kubernetes: %s %s/%s is left out (the rest applies): %s",
                    w->ki->kind, obj->ns[0] ? obj->ns : "-", obj->name,
                    obj->bad);
        return 1;
    }
    check(w, o);
    return 1;
}

static int del(struct watcher *w, const struct kube_object *obj)
{
    if (!kube_cache_del(&w->cache, obj->ns, obj->name))
        return 0;
    w->k->objects--;
    return 1;
}

/* A whole list was applied: what it did not hold is gone (deleted while
 * no watch ran, the events expired). */
static int sweep(struct watcher *w)
{
    size_t gone = kube_cache_sweep(&w->cache);

    w->k->objects -= gone;
    return (int)gone;
}

size_t source_kube_inputs(struct source_kube *k, const struct res_input **v)
{
    struct res_input *in = realloc(k->inputs, (k->objects + 1) * sizeof(*in));
    size_t n = 0;

    *v = NULL;
    if (in == NULL)
        return 0;
    k->inputs = in;
    for (size_t j = 0; j < k->nw; j++) {
        const struct watcher *w = &k->w[j];
        for (size_t i = 0; i < w->cache.n; i++) {
            const struct kube_cache_obj *o = &w->cache.v[i];
            if (o->error != NULL)
                continue;
            in[n].name = o->input;
            in[n].data = o->json;
            in[n].len = o->json_n;
            in[n].kind = w->ki->kind;
            in[n].ns = o->ns;
            in[n].rname = o->name;
            n++;
        }
    }
    *v = in;
    return n;
}

/* --- the state machine ------------------------------------------------- */

static void step(struct watcher *w);

static void set_str(char **dst, const char *s)
{
    char *c = s ? strdup(s) : NULL;

    free(*dst);
    *dst = c;
}

static void on_notify(void *arg)
{
    struct source_kube *k = arg;

    k->on_change(k->arg);
}

/* At most one rebuild per debounce while objects keep changing: a quiet
 * period would never come under churn. */
static void changed(struct source_kube *k)
{
    /* Before every kind is listed a snapshot would be partial (routes to
     * Services not listed yet): the first one goes out once all are. */
    if (k->synced && !timer_armed(&k->notify))
        timer_arm(&k->notify, k->debounce_ms);
}

static void update_synced(struct source_kube *k)
{
    if (k->synced)
        return;
    for (size_t j = 0; j < k->nw; j++)
        if (!k->w[j].synced)
            return;
    k->synced = 1;
    log_info("kubernetes: every kind listed (%zu watcher(s), %zu object(s))",
             k->nw, k->objects);
    /* The first full snapshot goes out now, not a debounce later. */
    timer_cancel(&k->notify);
    timer_defer(&k->notify);
}

/* The delay after w->fails consecutive failures: drawn in [d, 2d) with d
 * the backoff doubled per failure after the first, at most backoffMax/2,
 * so every delay is at most backoffMax and none is without jitter. */
static uint64_t backoff(struct watcher *w)
{
    struct source_kube *k = w->k;
    uint64_t d = (uint64_t)k->backoff_ms, cap = (uint64_t)k->backoff_max_ms / 2;
    int f = w->fails - 1;

    if (cap == 0)
        cap = 1;
    while (f-- > 0 && d < cap)
        d *= 2;
    if (d > cap)
        d = cap;
    return d + rng_next(&k->rng) % d;
}

static void failed(struct watcher *w, const char *what, const char *why)
{
    char msg[768];
    uint64_t now = clock_ms(), ms, since = w->healthy_ms;

    snprintf(msg, sizeof(msg), "%s %s%s%s: %s: %s", w->ki->kind,
             w->ns[0] ? "in " : "", w->ns, w->ns[0] ? "" : "cluster-wide", what,
             why);
    set_str(&w->last_error, msg);
    w->errors++;
    /* Healthy for backoffReset (since a good list, or a watch held that
     * long, and no failure): the delay starts from backoff again, as
     * client-go's. */
    if (since != 0 && now - since >= (uint64_t)w->k->reset_ms)
        w->fails = 0;
    w->healthy_ms = 0;
    /* A list that failed between pages starts again from its first page
     * (its continue token may be gone by the retry), marks and all. */
    if (w->what == LIST) {
        free(w->cont);
        w->cont = NULL;
        w->listed = 0;
    }
    w->what = IDLE;
    w->fails++;
    ms = backoff(w);
    w->retry_ms[w->retries++ % RETRY_KEPT] =
        ms < UINT32_MAX ? (uint32_t)ms : UINT32_MAX;
    LOG_LIMITED(1000, LOG_WARN,
                "kubernetes: %s; %s, next try in %" PRIu64 " ms", msg,
                w->synced ? "keeping the objects held" : "not synced yet", ms);
    timer_arm(&w->retry, ms);
}

static void on_retry(void *arg)
{
    step(arg);
}

static void status_text(int status, const char *body, size_t n, char *out,
                        size_t on, struct kube_status *st)
{
    struct arena a;
    const char *why = NULL;

    arena_init(&a, 4096);
    if (kube_parse_status(&a, body, n, st, &why) == 0 && st->message.n > 0)
        snprintf(out, on, "HTTP %d: %.*s", status, (int)st->message.n,
                 st->message.p);
    else
        snprintf(out, on, "HTTP %d", status);
    st->reason = SLICE_NULL;
    st->message = SLICE_NULL;
    arena_dispose(&a);
}

/* The answer was 410 Expired, or an ERROR event said so: list again with
 * resourceVersion="" and diff. */
static void expired(struct watcher *w)
{
    w->expired++;
    w->quorum = 1;
    free(w->cont);
    w->cont = NULL;
    w->listed = 0;
    w->what = IDLE;
    /* Expired again right after a relist: the server's history is shorter
     * than a list takes; list again, but after a delay, not in a loop. */
    if (++w->expiries > 1) {
        failed(w, "watch",
               "the resourceVersion of a fresh list expired at "
               "once");
        return;
    }
    LOG_LIMITED(1000, LOG_INFO,
                "kubernetes: %s%s%s: resourceVersion %s expired; listing "
                "again",
                w->ki->kind, w->ns[0] ? " in " : "", w->ns, w->rv ? w->rv : "");
    step(w);
}

static void handle_list(struct watcher *w, int status, const char *body,
                        size_t n, const char *err)
{
    struct source_kube *k = w->k;
    struct kube_list l;
    struct kube_status st;
    struct arena a;
    const char *why = NULL;
    char msg[512];
    int diff = 0;

    w->req = NULL;
    if (err != NULL) {
        failed(w, "list", err);
        return;
    }
    if (status == 410 && w->cont != NULL) {
        /* The continue token expired between pages. */
        expired(w);
        return;
    }
    if (status == 404 && w->ki->crd) {
        /* Not installed: held empty, synced, looked for again later. */
        kube_cache_unmark(&w->cache);
        diff = sweep(w);
        if (!w->missing)
            log_warn("kubernetes: %s (%s) is not served by the API server "
                     "(CRD not installed?): held empty, listed again every "
                     "%" PRId64 " ms",
                     w->ki->kind, w->ki->api_version, k->backoff_max_ms);
        w->missing = 1;
        w->what = IDLE;
        if (w->synced)
            w->relists++;
        w->synced = 1;
        if (diff > 0)
            changed(k);
        update_synced(k);
        timer_arm(&w->retry, (uint64_t)k->backoff_max_ms);
        return;
    }
    if (status != 200) {
        status_text(status, body, n, msg, sizeof(msg), &st);
        failed(w, "list", msg);
        return;
    }
    arena_init(&a, 64 * 1024);
    if (kube_parse_list(&a, body, n, w->ki->api_version, w->ki->kind, 0, &l,
                        &why) < 0) {
        arena_dispose(&a);
        failed(w, "list", why);
        return;
    }
    if (!w->listed) {
        kube_cache_unmark(&w->cache);
        w->listed = 1;
    }
    for (size_t i = 0; i < l.n; i++) {
        int c = put(w, &l.items[i]);
        if (c < 0) {
            arena_dispose(&a);
            failed(w, "list", "out of memory");
            return;
        }
        diff += c;
    }
    if (l.cont[0] != '\0') {
        set_str(&w->cont, l.cont);
        arena_dispose(&a);
        if (diff > 0)
            changed(k);
        w->what = IDLE;
        step(w);
        return;
    }
    free(w->cont);
    w->cont = NULL;
    w->listed = 0;
    if (w->healthy_ms == 0)
        w->healthy_ms = clock_ms();
    set_str(&w->last_error, NULL);
    diff += sweep(w);
    set_str(&w->rv, l.rv);
    arena_dispose(&a);
    if (w->missing)
        log_info("kubernetes: %s is served now", w->ki->kind);
    w->missing = 0;
    w->quorum = 0;
    if (w->synced)
        w->relists++;
    w->synced = 1;
    log_debug("kubernetes: listed %s%s%s: %zu object(s) at %s", w->ki->kind,
              w->ns[0] ? " in " : "", w->ns, w->cache.n, w->rv);
    if (diff > 0)
        changed(k);
    update_synced(k);
    w->what = IDLE;
    step(w);
}

/* One line of the watch; 1 when the stream must end. */
static int handle_line(struct watcher *w, const char *p, size_t n)
{
    struct source_kube *k = w->k;
    struct kube_event ev;
    struct arena a;
    const char *why = NULL;
    int c = 0;

    arena_init(&a, 16 * 1024);
    if (kube_parse_event(&a, p, n, w->ki->api_version, w->ki->kind, 0, &ev,
                         &why) < 0) {
        arena_dispose(&a);
        w->req = NULL;
        failed(w, "watch", why);
        return 1;
    }
    switch (ev.type) {
    case KUBE_ADDED:
    case KUBE_MODIFIED:
        c = put(w, &ev.obj);
        break;
    case KUBE_DELETED:
        c = del(w, &ev.obj);
        break;
    case KUBE_BOOKMARK:
        break;
    case KUBE_ERROR:
        w->req = NULL;
        if (ev.status.code == 410) {
            arena_dispose(&a);
            expired(w);
            return 1;
        } else {
            char msg[512];
            snprintf(msg, sizeof(msg), "ERROR event %" PRId64 " %.*s: %.*s",
                     ev.status.code, (int)ev.status.reason.n,
                     ev.status.reason.p, (int)ev.status.message.n,
                     ev.status.message.p);
            arena_dispose(&a);
            failed(w, "watch", msg);
            return 1;
        }
    }
    if (c < 0) {
        arena_dispose(&a);
        w->req = NULL;
        failed(w, "watch", "out of memory");
        return 1;
    }
    if (ev.obj.rv != NULL && ev.obj.rv[0] != '\0')
        set_str(&w->rv, ev.obj.rv);
    if (ev.type != KUBE_BOOKMARK)
        w->events++;
    w->expiries = 0;
    if (w->last_error != NULL)
        set_str(&w->last_error, NULL);
    arena_dispose(&a);
    if (c > 0)
        changed(k);
    return 0;
}

static void handle_watch_done(struct watcher *w, int status, const char *body,
                              size_t n, const char *err)
{
    struct kube_status st;
    char msg[512];

    w->req = NULL;
    if (err != NULL) {
        failed(w, "watch", err);
        return;
    }
    if (status == 410) {
        expired(w);
        return;
    }
    if (status != 200) {
        status_text(status, body, n, msg, sizeof(msg), &st);
        failed(w, "watch", msg);
        return;
    }
    /* The server's timeoutSeconds: watch again from where it ended. A
     * stream that ends at once, again and again, is a failure. */
    if (clock_ms() - w->watch_ms < 1000) {
        failed(w, "watch", "the stream ended at once");
        return;
    }
    w->what = IDLE;
    step(w);
}

static void on_list(void *arg, int status, const char *body, size_t n,
                    const char *err)
{
    struct watcher *w = arg;
    struct etcd_http *h = w->req;

    handle_list(w, status, body, n, err);
    etcd_http_free(h);
}

static int on_watch_line(void *arg, const char *p, size_t n)
{
    struct watcher *w = arg;
    struct etcd_http *h = w->req;

    if (handle_line(w, p, n) == 0)
        return 0;
    etcd_http_free(h);
    return 1;
}

/* head_key() is the offset just past "key" and its colon (JSON
 * whitespace allowed around it) at its first place in head, followed by
 * the character open; n when there is none. */
static size_t head_key(const char *head, size_t n, const char *key, char open)
{
    char pat[32];
    size_t pn = (size_t)snprintf(pat, sizeof(pat), "\"%s\"", key);

    for (size_t i = 0; i + pn <= n; i++) {
        size_t j = i + pn;
        if (memcmp(head + i, pat, pn) != 0)
            continue;
        while (j < n && (head[j] == ' ' || head[j] == '\t'))
            j++;
        if (j >= n || head[j] != ':')
            continue;
        j++;
        while (j < n && (head[j] == ' ' || head[j] == '\t'))
            j++;
        if (j < n && head[j] == open)
            return j + 1;
    }
    return n;
}

/* head_str() finds "key": "value" in the first bytes of a JSON event
 * (a plain string value, no escapes) and copies the value into out. The
 * event's type and metadata come first in what the API server writes. */
static int head_str(const char *head, size_t n, const char *key, char *out,
                    size_t on)
{
    size_t j = head_key(head, n, key, '"'), k = 0;

    while (j < n && head[j] != '"' && head[j] != '\\' && k + 1 < on)
        out[k++] = head[j++];
    if (j >= n || head[j] != '"')
        return -1;
    out[k] = '\0';
    return 0;
}

/*
 * on_watch_skipped(): one watch event larger than maxResponseBytes. The
 * object it names (metadata.namespace and name, read from its first
 * bytes) is held by name but left out, as an object too deep to read is:
 * reported in the log, /config_dump's leftOut and the errors counter. One
 * that cannot be named is logged and counted. The watch goes on.
 */
static int on_watch_skipped(void *arg, const char *head, size_t n, size_t total)
{
    struct watcher *w = arg;
    struct source_kube *k = w->k;
    char type[16], name[256], ns[256], rv[64], why[160];
    size_t off;
    int c;

    type[0] = name[0] = ns[0] = rv[0] = '\0';
    head_str(head, n, "type", type, sizeof(type));
    /* The object's own metadata, not an owner reference's. */
    off = head_key(head, n, "metadata", '{');
    if (off < n) {
        head_str(head + off, n - off, "name", name, sizeof(name));
        head_str(head + off, n - off, "namespace", ns, sizeof(ns));
        head_str(head + off, n - off, "resourceVersion", rv, sizeof(rv));
    }
    /* A later watch starts past it, not at it again. */
    if (rv[0] != '\0')
        set_str(&w->rv, rv);
    snprintf(why, sizeof(why),
             "its watch event (%zu bytes) is larger than "
             "config.kubernetes.maxResponseBytes (%zu)",
             total, k->max_bytes);
    w->events++;
    if (name[0] == '\0' || strchr(name, '/') != NULL ||
        strchr(ns, '/') != NULL) {
        w->errors++;
        LOG_LIMITED(200, LOG_WARN,
                    "kubernetes: a %s %s event is left out: %s; the watch "
                    "goes on",
                    w->ki->kind, type[0] ? type : "watch", why);
        return 0;
    }
    if (strcmp(type, "DELETED") == 0) {
        struct kube_object obj = {ns, name, rv, "", 0, NULL};
        c = del(w, &obj);
    } else {
        struct kube_object obj = {ns, name, rv, "", 0, why};
        c = put(w, &obj);
    }
    if (c < 0) {
        struct etcd_http *h = w->req;
        w->req = NULL;
        failed(w, "watch", "out of memory");
        etcd_http_free(h);
        return 1;
    }
    if (c > 0)
        changed(k);
    return 0;
}

static void on_watch_done(void *arg, int status, const char *body, size_t n,
                          const char *err)
{
    struct watcher *w = arg;
    struct etcd_http *h = w->req;

    handle_watch_done(w, status, body, n, err);
    etcd_http_free(h);
}

/* read_token() is the bearer token in effect: the file is read again
 * before every request (the kubelet rotates a projected token). */
static int read_token(struct source_kube *k, char *out, size_t on,
                      const char **why)
{
    FILE *f;
    size_t n;

    out[0] = '\0';
    if (k->t.token_file == NULL || k->t.token_file[0] == '\0') {
        if (k->t.token != NULL)
            snprintf(out, on, "Bearer %s", k->t.token);
        return 0;
    }
    f = fopen(k->t.token_file, "rb");
    if (f == NULL) {
        *why = "cannot read the token file";
        return -1;
    }
    memcpy(out, "Bearer ", 7);
    n = fread(out + 7, 1, on - 8, f);
    fclose(f);
    while (n > 0 && (out[7 + n - 1] == '\n' || out[7 + n - 1] == '\r' ||
                     out[7 + n - 1] == ' '))
        n--;
    out[7 + n] = '\0';
    if (n == 0) {
        *why = "the token file is empty";
        return -1;
    }
    return 0;
}

static void selectors(struct watcher *w, struct buf *b)
{
    if (w->label_sel[0] != '\0') {
        buf_puts(b, "&labelSelector=");
        kube_url_escape(b, w->label_sel);
    }
    if (w->field_sel[0] != '\0') {
        buf_puts(b, "&fieldSelector=");
        kube_url_escape(b, w->field_sel);
    }
}

static void send_to(struct watcher *w, const struct addr *addr)
{
    struct source_kube *k = w->k;
    struct etcd_http_conf c;
    struct etcd_http_cb cb;
    struct buf path;
    char token[8192];
    const char *why = NULL;
    int watch = w->synced && !w->quorum && w->cont == NULL && !w->missing;

    if (read_token(k, token, sizeof(token), &why) < 0) {
        failed(w, watch ? "watch" : "list", why);
        return;
    }
    buf_init(&path, 64 * 1024);
    buf_puts(&path, w->path);
    if (watch) {
        uint64_t t = (uint64_t)k->min_watch_ms / 1000;
        t += rng_next(&k->rng) % (t > 0 ? t : 1);
        w->watch_t_ms = t * 1000;
        buf_puts(&path, "?watch=1&resourceVersion=");
        kube_url_escape(&path, w->rv ? w->rv : "");
        buf_printf(&path, "&allowWatchBookmarks=true&timeoutSeconds=%" PRIu64,
                   t);
    } else {
        buf_printf(&path, "?limit=%" PRId64, k->page_size);
        if (w->cont != NULL) {
            buf_puts(&path, "&continue=");
            kube_url_escape(&path, w->cont);
        } else if (!w->quorum) {
            buf_puts(&path, "&resourceVersion=0");
        }
    }
    selectors(w, &path);
    memset(&c, 0, sizeof(c));
    c.addr = *addr;
    c.host = k->t.host;
    c.ctx = k->t.tls ? k->ctx : NULL;
    c.method = "GET";
    c.path = buf_cstr(&path);
    c.token = token[0] ? token : NULL;
    c.body = "";
    c.timeout_ms = k->request_ms;
    c.max_body = k->max_bytes;
    c.stream = watch;
    cb.arg = w;
    cb.line = on_watch_line;
    /* A watch event past maxResponseBytes is named and left out; the
     * watch goes on (re-watching from the same resourceVersion would
     * get it again, for ever). A list is refused whole, as before. */
    cb.skipped = watch ? on_watch_skipped : NULL;
    cb.done = watch ? on_watch_done : on_list;
    w->what = watch ? WATCH : LIST;
    if (watch) {
        w->watches++;
        w->watch_ms = clock_ms();
        if (w->healthy_ms == 0)
            w->healthy_ms = w->watch_ms; /* good if it holds */
    }
    w->req = etcd_http_new(k->base, &c, &cb, &why);
    if (watch && w->req != NULL)
        timer_arm(&w->guard, w->watch_t_ms + (uint64_t)k->request_ms);
    OPENSSL_cleanse(token, sizeof(token));
    buf_dispose(&path);
    if (w->req == NULL)
        failed(w, "connect", why);
}

/* The watch outlived its timeoutSeconds by requestTimeout: the server
 * (or a proxy before it) holds it open without ending it, and a stream
 * that says nothing may say nothing for good. End it and watch again. */
static void on_guard(void *arg)
{
    struct watcher *w = arg;
    struct etcd_http *h = w->req;

    if (w->what != WATCH || h == NULL)
        return;
    w->req = NULL;
    etcd_http_free(h);
    failed(w, "watch", "not ended by the server at its timeoutSeconds");
}

static void on_resolved(void *arg, const struct addr *a, const char *why)
{
    struct watcher *w = arg;

    w->query = NULL;
    if (a == NULL) {
        failed(w, "resolve", why);
        return;
    }
    send_to(w, a);
}

static void step(struct watcher *w)
{
    struct source_kube *k = w->k;
    struct addr a;

    if (w->req != NULL || w->query != NULL)
        return; /* one request at a time, ever */
    timer_cancel(&w->retry);
    if (addr_literal(&a, k->t.host, k->t.port) == 0) {
        send_to(w, &a);
        return;
    }
    if (k->dns == NULL) {
        failed(w, "resolve", "no resolver");
        return;
    }
    w->query = dns_resolve(k->dns, k->t.host, k->t.port, on_resolved, w);
    if (w->query == NULL)
        failed(w, "resolve", "out of memory");
}

/* --- making and freeing ------------------------------------------------ */

static const char *selector_of(const struct conf_strmap *m, const char *kind)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->v[i].key, kind) == 0)
            return m->v[i].val;
    return "";
}

static int wanted(const struct bootstrap_kube *conf, const char *kind)
{
    if (conf->kinds.n == 0)
        return 1;
    for (size_t i = 0; i < conf->kinds.n; i++)
        if (strcmp(conf->kinds.v[i], kind) == 0)
            return 1;
    return 0;
}

static int watcher_init(struct source_kube *k, struct watcher *w,
                        const struct kind_info *ki, size_t kidx, const char *ns,
                        const struct bootstrap_kube *conf)
{
    const char *fs = selector_of(&conf->field_selectors, ki->name);

    w->k = k;
    w->ki = ki;
    w->kidx = kidx;
    kube_cache_init(&w->cache);
    timer_init(&w->retry, k->base, on_retry, w);
    timer_init(&w->guard, k->base, on_guard, w);
    w->ns = strdup(ns);
    w->label_sel = strdup(selector_of(&conf->label_selectors, ki->name));
    if (strcmp(ki->kind, "Secret") == 0) {
        /* Never every Secret: Istio's credential filter, always. */
        if (asprintf(&w->field_sel, "%s%s%s", KUBE_SECRET_FIELD_SELECTOR,
                     fs[0] ? "," : "", fs) < 0)
            w->field_sel = NULL;
    } else if (strcmp(ki->kind, "Pod") == 0) {
        /* Never every Pod of the cluster: only a Running Pod is behind a
         * ready endpoint, and the server ends a Pod's watch with a
         * DELETED event when it leaves Running. */
        if (asprintf(&w->field_sel, "%s%s%s", KUBE_POD_FIELD_SELECTOR,
                     fs[0] ? "," : "", fs) < 0)
            w->field_sel = NULL;
    } else {
        w->field_sel = strdup(fs);
    }
    if (ns[0] != '\0') {
        if (asprintf(&w->path, "%s/namespaces/%s/%s", ki->group, ns,
                     ki->plural) < 0)
            w->path = NULL;
    } else if (asprintf(&w->path, "%s/%s", ki->group, ki->plural) < 0) {
        w->path = NULL;
    }
    return w->ns && w->label_sel && w->field_sel && w->path ? 0 : -1;
}

static void watcher_dispose(struct watcher *w)
{
    etcd_http_free(w->req);
    dns_query_cancel(w->query);
    timer_dispose(&w->retry);
    timer_dispose(&w->guard);
    kube_cache_dispose(&w->cache);
    free(w->ns);
    free(w->label_sel);
    free(w->field_sel);
    free(w->path);
    free(w->rv);
    free(w->cont);
    free(w->last_error);
}

static struct ssl_ctx_st *build_ctx(const struct kube_target *t, char **err)
{
    struct tls_client_conf tc;
    struct ssl_ctx_st *ctx;
    X509 *ca = NULL;

    memset(&tc, 0, sizeof(tc));
    if (t->ca_pem != NULL) {
        BIO *bio = BIO_new_mem_buf(t->ca_pem, -1);
        ca = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
        BIO_free(bio);
        if (ca == NULL) {
            err_set(err, "config.kubernetes: the kubeconfig's "
                         "certificate-authority-data is not a PEM "
                         "certificate");
            return NULL;
        }
        tc.ca_cert = ca;
    } else {
        if (t->ca_file == NULL || access(t->ca_file, R_OK) != 0) {
            err_set(err, "config.kubernetes: CA file %s cannot be read",
                    t->ca_file ? t->ca_file : "(none)");
            return NULL;
        }
        tc.ca_file = t->ca_file;
    }
    tc.cert_file = t->cert_file;
    tc.key_file = t->key_file;
    ctx = tls_client_ctx_build(&tc, err);
    X509_free(ca);
    if (ctx == NULL)
        err_prefix(err, "config.kubernetes: ");
    return ctx;
}

struct source_kube *source_kube_new(struct event_base *base,
                                    const struct bootstrap_kube *conf,
                                    struct dns_cache *dns, uint64_t debounce_ms,
                                    void (*on_change)(void *), void *arg,
                                    char **err)
{
    struct source_kube *k = calloc(1, sizeof(*k));
    size_t nns = conf->namespaces.n ? conf->namespaces.n : 1, cap = 0;

    *err = NULL;
    if (k == NULL)
        return NULL;
    k->base = base;
    k->dns = dns;
    k->on_change = on_change;
    k->arg = arg;
    k->debounce_ms = debounce_ms;
    timer_init(&k->notify, base, on_notify, k);
    k->rng = (uint64_t)clock_real_ms() * 2654435761u ^ (uint64_t)getpid() << 32;
    if (k->rng == 0)
        k->rng = 1;
    k->min_watch_ms = conf->min_watch_timeout_ms;
    k->request_ms = conf->request_timeout_ms;
    k->backoff_ms = conf->backoff_ms;
    k->backoff_max_ms = conf->backoff_max_ms;
    k->reset_ms = conf->backoff_reset_ms;
    k->page_size = conf->page_size;
    k->max_bytes = (size_t)conf->max_response_bytes;
    k->max_objects = (size_t)conf->max_objects;
    if (kube_target_resolve(conf, &k->t, err) < 0)
        goto fail;
    if (k->t.tls && (k->ctx = build_ctx(&k->t, err)) == NULL)
        goto fail;
    k->w = calloc(NKINDS * nns, sizeof(*k->w));
    if (k->w == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    cap = NKINDS * nns;
    for (size_t i = 0; i < NKINDS; i++) {
        const struct kind_info *ki = &kinds[i];
        size_t kidx = k->nstats;
        if (!wanted(conf, ki->name))
            continue;
        k->stats[k->nstats++].kind = ki->name;
        for (size_t j = 0; j < (ki->namespaced ? nns : 1); j++) {
            const char *ns = ki->namespaced && conf->namespaces.n
                                 ? conf->namespaces.v[j]
                                 : "";
            if (k->nw >= cap ||
                watcher_init(k, &k->w[k->nw], ki, kidx, ns, conf) < 0) {
                k->nw++;
                err_set(err, "out of memory");
                goto fail;
            }
            k->nw++;
        }
    }
    log_info("kubernetes: %s (%s), %zu watcher(s)", k->t.server, k->t.origin,
             k->nw);
    for (size_t j = 0; j < k->nw; j++)
        step(&k->w[j]);
    return k;
fail:
    source_kube_free(k);
    return NULL;
}

void source_kube_free(struct source_kube *k)
{
    if (k == NULL)
        return;
    for (size_t j = 0; j < k->nw; j++)
        watcher_dispose(&k->w[j]);
    free(k->w);
    timer_dispose(&k->notify);
    SSL_CTX_free(k->ctx);
    kube_target_dispose(&k->t);
    free(k->inputs);
    free(k);
}

/* --- status ------------------------------------------------------------ */

int source_kube_synced(const struct source_kube *k)
{
    return k->synced;
}

const char *source_kube_error(const struct source_kube *k)
{
    for (size_t j = 0; j < k->nw; j++)
        if (k->w[j].last_error != NULL)
            return k->w[j].last_error;
    return NULL;
}

size_t source_kube_kinds(struct source_kube *k,
                         const struct source_kube_kind **v)
{
    for (size_t i = 0; i < k->nstats; i++) {
        const char *name = k->stats[i].kind;
        memset(&k->stats[i], 0, sizeof(k->stats[i]));
        k->stats[i].kind = name;
        k->stats[i].synced = 1;
    }
    for (size_t j = 0; j < k->nw; j++) {
        const struct watcher *w = &k->w[j];
        struct source_kube_kind *s = &k->stats[w->kidx];
        s->synced &= w->synced;
        s->missing |= w->missing;
        s->objects += w->cache.n;
        for (size_t i = 0; i < w->cache.n; i++)
            s->bad += w->cache.v[i].error != NULL;
        s->watches_opened += w->watches;
        s->relists += w->relists;
        s->expired += w->expired;
        s->errors += w->errors;
        s->events += w->events;
    }
    *v = k->stats;
    return k->nstats;
}

void source_kube_json(struct source_kube *k, struct buf *b)
{
    int first = 1;

    buf_puts(b, "{\"server\":");
    json_str(b, k->t.server);
    buf_puts(b, ",\"origin\":");
    json_str(b, k->t.origin ? k->t.origin : "");
    buf_printf(b, ",\"synced\":%s,\"objects\":%zu,\"watchers\":[",
               k->synced ? "true" : "false", k->objects);
    for (size_t j = 0; j < k->nw; j++) {
        const struct watcher *w = &k->w[j];
        uint64_t from;

        buf_puts(b, j ? ",{\"kind\":" : "{\"kind\":");
        json_str(b, w->ki->name);
        buf_puts(b, ",\"namespace\":");
        json_str(b, w->ns);
        buf_puts(b, ",\"labelSelector\":");
        json_str(b, w->label_sel);
        buf_puts(b, ",\"fieldSelector\":");
        json_str(b, w->field_sel);
        buf_puts(b, ",\"resourceVersion\":");
        json_str(b, w->rv ? w->rv : "");
        buf_printf(b,
                   ",\"synced\":%s,\"missing\":%s,\"watching\":%s,"
                   "\"objects\":%zu,\"watchesOpened\":%" PRIu64
                   ",\"relists\":%" PRIu64 ",\"errors\":%" PRIu64
                   ",\"lastError\":",
                   w->synced ? "true" : "false", w->missing ? "true" : "false",
                   w->what == WATCH ? "true" : "false", w->cache.n, w->watches,
                   w->relists, w->errors);
        if (w->last_error)
            json_str(b, w->last_error);
        else
            buf_puts(b, "null");
        /* Oldest first; retriesDrawn counts those no longer kept too. */
        buf_printf(b, ",\"retriesDrawn\":%" PRIu64 ",\"retryDelaysMs\":[",
                   w->retries);
        from = w->retries > RETRY_KEPT ? w->retries - RETRY_KEPT : 0;
        for (uint64_t i = from; i < w->retries; i++)
            buf_printf(b, "%s%" PRIu32, i > from ? "," : "",
                       w->retry_ms[i % RETRY_KEPT]);
        buf_puts(b, "]}");
    }
    buf_puts(b, "],\"leftOut\":[");
    for (size_t j = 0; j < k->nw; j++) {
        const struct watcher *w = &k->w[j];
        for (size_t i = 0; i < w->cache.n; i++) {
            const struct kube_cache_obj *o = &w->cache.v[i];
            if (o->error == NULL)
                continue;
            buf_puts(b, first ? "{\"kind\":" : ",{\"kind\":");
            first = 0;
            json_str(b, w->ki->name);
            buf_puts(b, ",\"namespace\":");
            json_str(b, o->ns);
            buf_puts(b, ",\"name\":");
            json_str(b, o->name);
            buf_puts(b, ",\"error\":");
            json_str(b, o->error);
            buf_puts(b, "}");
        }
    }
    buf_puts(b, "]}");
}
