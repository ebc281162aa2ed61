#include "config.h"

#include <event2/event.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "upstream/cluster.h"

/* Idle connections a worker keeps per cluster beyond which the oldest
 * close. */
#define UPOOL_MAX_IDLE 512

struct cluster *cluster_new(const char *name, const struct addr *eps, size_t n,
                            int nworkers)
{
    struct cluster *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->refs = 1;
    c->name = strdup(name);
    c->endpoints = calloc(n ? n : 1, sizeof(*eps));
    c->nworkers = nworkers;
    if (posix_memalign((void **)&c->w, 64, (size_t)nworkers * sizeof(*c->w)) !=
        0)
        c->w = NULL;
    if (c->name == NULL || c->endpoints == NULL || c->w == NULL) {
        cluster_unref(c);
        return NULL;
    }
    memset(c->w, 0, (size_t)nworkers * sizeof(*c->w));
    if (n > 0) /* eps may be NULL for a cluster without endpoints */
        memcpy(c->endpoints, eps, n * sizeof(*eps));
    c->nendpoints = n;
    return c;
}

static void drop_weights(struct cluster *c)
{
    free(c->weights);
    free(c->inv_weights);
    free(c->alias);
    c->weights = NULL;
    c->inv_weights = NULL;
    c->alias = NULL;
}

/*
 * Vose's construction of Walker's alias table: each of the n slots holds
 * 1/n of the total weight, made of its own endpoint's weight (as much as
 * fits) and the rest of one heavier endpoint's. Sizes are scaled by n so
 * they stay integers: a slot holds `total`, endpoint i brings w[i] x n.
 */
static int build_alias(struct cluster *c)
{
    size_t n = c->nendpoints, nsmall = 0, nlarge = 0;
    uint64_t total = 0, *left = malloc(n * sizeof(*left));
    uint32_t *small = malloc(n * sizeof(*small));
    uint32_t *large = malloc(n * sizeof(*large));
    int rc = -1;

    if (left == NULL || small == NULL || large == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++)
        total += c->weights[i];
    for (size_t i = 0; i < n; i++) {
        left[i] = (uint64_t)c->weights[i] * n;
        if (left[i] < total)
            small[nsmall++] = (uint32_t)i;
        else
            large[nlarge++] = (uint32_t)i;
    }
    while (nsmall > 0 && nlarge > 0) {
        uint32_t s = small[--nsmall], l = large[nlarge - 1];
        c->alias[s].below =
            (uint64_t)((double)left[s] / (double)total * 4294967296.0);
        c->alias[s].other = l;
        left[l] -= total - left[s];
        if (left[l] < total) {
            nlarge--;
            small[nsmall++] = l;
        }
    }
    /* What is left holds a whole slot (up to rounding). */
    while (nlarge > 0) {
        uint32_t l = large[--nlarge];
        c->alias[l].below = UINT64_C(1) << 32;
        c->alias[l].other = l;
    }
    while (nsmall > 0) {
        uint32_t s = small[--nsmall];
        c->alias[s].below = UINT64_C(1) << 32;
        c->alias[s].other = s;
    }
    rc = 0;
fail:
    free(left);
    free(small);
    free(large);
    return rc;
}

int cluster_set_weights(struct cluster *c, const uint32_t *w)
{
    size_t n = c->nendpoints;
    size_t i;

    drop_weights(c);
    for (i = 1; i < n; i++)
        if ((w[i] ? w[i] : 1) != (w[0] ? w[0] : 1))
            break;
    if (i >= n) /* all equal (or fewer than two): the plain balancers */
        return 0;
    c->weights = malloc(n * sizeof(*c->weights));
    c->inv_weights = malloc(n * sizeof(*c->inv_weights));
    c->alias = malloc(n * sizeof(*c->alias));
    if (c->weights == NULL || c->inv_weights == NULL || c->alias == NULL)
        goto fail;
    for (i = 0; i < n; i++) {
        c->weights[i] = w[i] ? w[i] : 1;
        c->inv_weights[i] = 1.0 / (double)c->weights[i];
    }
    if (build_alias(c) < 0)
        goto fail;
    return 0;
fail:
    drop_weights(c);
    return -1;
}

/* A slot under max (0: no limit), or 0 and nothing taken. A refused
 * increment is undone at once; a racing admit may see it and be refused
 * too, which errs on the side of the limit. */
static int take_slot(uint64_t *active, uint64_t max)
{
    uint64_t n = __atomic_add_fetch(active, 1, __ATOMIC_RELAXED);

    if (max == 0 || n <= max)
        return 1;
    __atomic_sub_fetch(active, 1, __ATOMIC_RELAXED);
    return 0;
}

int cluster_admit(struct cluster *c)
{
    return take_slot(&c->rq_active, c->max_requests);
}

void cluster_release(struct cluster *c)
{
    __atomic_sub_fetch(&c->rq_active, 1, __ATOMIC_RELAXED);
}

int cluster_admit_retry(struct cluster *c)
{
    return take_slot(&c->retries_active, c->max_retries);
}

void cluster_release_retry(struct cluster *c)
{
    __atomic_sub_fetch(&c->retries_active, 1, __ATOMIC_RELAXED);
}

struct cluster *cluster_ref(struct cluster *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

void cluster_unref(struct cluster *c)
{
    if (c == NULL || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    free(c->w);
    lb_hash_free(c->hash);
    outlier_free(c->od);
    SSL_CTX_free(c->tls);
    free(c->sni);
    drop_weights(c);
    free(c->endpoints);
    free(c->name);
    free(c);
}

void cluster_sum(const struct cluster *c, struct cluster_counters *out)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < c->nworkers; i++) {
        const struct cluster_counters *s = &c->w[i];
        out->rq_total += STAT_GET(s, rq_total);
        out->cx_total += STAT_GET(s, cx_total);
        out->cx_connect_fail += STAT_GET(s, cx_connect_fail);
        out->cx_connect_timeout += STAT_GET(s, cx_connect_timeout);
        out->cx_reused += STAT_GET(s, cx_reused);
        out->rq_error += STAT_GET(s, rq_error);
        out->rq_timeout += STAT_GET(s, rq_timeout);
        out->rq_overflow += STAT_GET(s, rq_overflow);
        out->rq_retry_overflow += STAT_GET(s, rq_retry_overflow);
        out->rq_retry += STAT_GET(s, rq_retry);
        out->rq_per_try_timeout += STAT_GET(s, rq_per_try_timeout);
        out->rq_retry_body_overflow += STAT_GET(s, rq_retry_body_overflow);
        out->cx_overflow += STAT_GET(s, cx_overflow);
        out->rq_pending += STAT_GET(s, rq_pending);
    }
}

/* A connection of this worker is gone: its max_connections slot is free,
 * and a waiting request may open one in its place. */
static void conn_gone(struct upool *p)
{
    p->nconns--;
    if (p->cl->max_connections > 0)
        __atomic_sub_fetch(&p->cl->cx_active, 1, __ATOMIC_RELAXED);
    if (!LIST_EMPTY(&p->waiters))
        event_active(p->wake_ev, EV_TIMEOUT, 0);
}

static void reap(evutil_socket_t fd, short what, void *arg)
{
    struct upool *p = arg;

    (void)fd;
    (void)what;
    while (!LIST_EMPTY(&p->dead)) {
        h1_client_free(LIST_ELEM(p->dead.next, struct h1_client, link));
        conn_gone(p);
    }
    while (!LIST_EMPTY(&p->h2dead)) {
        h2_client_free(LIST_ELEM(p->h2dead.next, struct h2_client, link));
        conn_gone(p);
    }
}

/* Wakes every waiting request; those that still find no connection queue
 * again behind the ones that did. */
static void wake(evutil_socket_t fd, short what, void *arg)
{
    struct upool *p = arg;
    struct list now;

    (void)fd;
    (void)what;
    LIST_INIT(&now);
    while (!LIST_EMPTY(&p->waiters)) {
        struct list *it = p->waiters.next;
        list_del(it);
        list_append(&now, it);
    }
    while (!LIST_EMPTY(&now)) {
        struct upool_waiter *w = LIST_ELEM(now.next, struct upool_waiter, link);
        list_del(&w->link);
        LIST_INIT(&w->link);
        __atomic_sub_fetch(&p->cl->rq_waiting, 1, __ATOMIC_RELAXED);
        w->wake(w);
    }
}

/* A connection slot under max_connections: 1 and taken, or 0. */
static int cx_admit(struct upool *p)
{
    if (p->cl->max_connections == 0)
        return 1;
    return take_slot(&p->cl->cx_active, p->cl->max_connections);
}

struct h1_client *upool_h1_connect(struct upool *p, size_t ep,
                                   const struct h1_client_hooks *hooks,
                                   void *ctx, int *wait)
{
    struct h1_client *c;

    *wait = 0;
    if (!cx_admit(p)) {
        STAT_ADD(upool_stats(p), cx_overflow, 1);
        if (p->nconns > 0) {
            *wait = 1;
            return NULL;
        }
        /* Nothing of ours to wait for: one over the limit, as Envoy. */
        __atomic_add_fetch(&p->cl->cx_active, 1, __ATOMIC_RELAXED);
    }
    c = h1_client_connect(p->base, &p->cl->endpoints[ep], p->cl->tls,
                          p->cl->sni, &p->cl->h1, hooks, ctx, p->scratch);
    if (c == NULL) {
        if (p->cl->max_connections > 0)
            __atomic_sub_fetch(&p->cl->cx_active, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    c->endpoint = ep;
    p->nconns++;
    STAT_ADD(upool_stats(p), cx_total, 1);
    return c;
}

int upool_wait(struct upool *p, struct upool_waiter *w)
{
    if (!take_slot(&p->cl->rq_waiting, p->cl->max_pending))
        return -1;
    STAT_ADD(upool_stats(p), rq_pending, 1);
    list_append(&p->waiters, &w->link);
    return 0;
}

void upool_unwait(struct upool *p, struct upool_waiter *w)
{
    list_del(&w->link);
    LIST_INIT(&w->link);
    __atomic_sub_fetch(&p->cl->rq_waiting, 1, __ATOMIC_RELAXED);
}

static void h2_closed(void *owner, struct h2_client *c)
{
    struct upool *p = owner;

    list_del(&c->link);
    list_append(&p->h2dead, &c->link);
    event_active(p->reap_ev, EV_TIMEOUT, 0);
}

static const struct h2_client_hooks h2_pool_hooks = {h2_closed};

struct h2_client *upool_h2_get(struct upool *p, size_t ep)
{
    struct h2_client *c;

    for (struct list *it = p->h2conns.next; it != &p->h2conns; it = it->next) {
        c = LIST_ELEM(it, struct h2_client, link);
        if (c->endpoint == ep && h2_client_has_room(c)) {
            STAT_ADD(upool_stats(p), cx_reused, 1);
            return c;
        }
    }
    /* HTTP/2 multiplexes: at max_connections a request shares a busy
     * connection to ep of this worker (nghttp2 queues streams past the
     * peer's limit) rather than wait; with none it opens one, as Envoy. */
    if (!cx_admit(p)) {
        struct h2_client *any = NULL;
        STAT_ADD(upool_stats(p), cx_overflow, 1);
        for (struct list *it = p->h2conns.next; it != &p->h2conns;
             it = it->next) {
            c = LIST_ELEM(it, struct h2_client, link);
            if (c->endpoint == ep && !c->closed && !c->goaway)
                any = c;
        }
        if (any != NULL)
            return any;
        __atomic_add_fetch(&p->cl->cx_active, 1, __ATOMIC_RELAXED);
    }
    c = h2_client_connect(p->base, &p->cl->endpoints[ep], p->cl->tls,
                          p->cl->sni, &p->cl->h2, &h2_pool_hooks, p);
    if (c == NULL) {
        if (p->cl->max_connections > 0)
            __atomic_sub_fetch(&p->cl->cx_active, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    c->endpoint = ep;
    p->nconns++;
    c->max_requests = p->cl->max_requests_per_conn;
    STAT_ADD(upool_stats(p), cx_total, 1);
    list_append(&p->h2conns, &c->link);
    return c;
}

void upool_discard(struct upool *p, struct h1_client *c)
{
    /* Silence it now: a deferred event of its own must not call back
     * into an exchange that has moved on. */
    h1_client_abandon(c);
    list_del(&c->link);
    list_append(&p->dead, &c->link);
    event_active(p->reap_ev, EV_TIMEOUT, 0);
}

static void idle_closed(void *ctx, struct h1_client *c)
{
    struct upool *p = ctx;

    p->nidle--;
    upool_discard(p, c);
}

/* Idle connections run no exchange: only idle_closed can fire. */
static void no_connect(void *ctx, struct h1_client *c, int timeout)
{
    (void)timeout;
    idle_closed(ctx, c);
}

static void no_head(void *ctx, struct h1_client *c)
{
    (void)ctx;
    (void)c;
}

static void no_done(void *ctx, struct h1_client *c, int ok, int reusable,
                    unsigned flags)
{
    (void)ok;
    (void)reusable;
    (void)flags;
    idle_closed(ctx, c);
}

static const struct h1_client_hooks pool_hooks = {no_connect, no_head, no_done,
                                                  idle_closed};

/* The EDF heap: the earliest deadline on top, ties to the lower index so
 * every worker's schedule is the same sequence. */
static int edf_before(const struct upool_edf *a, const struct upool_edf *b)
{
    return a->deadline < b->deadline ||
           (a->deadline == b->deadline && a->ep < b->ep);
}

static void edf_down(struct upool *p, size_t i)
{
    struct upool_edf *h = p->edf;
    size_t n = p->nedf;

    for (;;) {
        size_t l = 2 * i + 1, m = i;
        struct upool_edf t;
        if (l < n && edf_before(&h[l], &h[m]))
            m = l;
        if (l + 1 < n && edf_before(&h[l + 1], &h[m]))
            m = l + 1;
        if (m == i)
            return;
        t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void edf_push(struct upool *p, uint32_t ep, double deadline)
{
    struct upool_edf *h = p->edf;
    size_t i = p->nedf++;

    h[i].ep = ep;
    h[i].deadline = deadline;
    while (i > 0 && edf_before(&h[i], &h[(i - 1) / 2])) {
        struct upool_edf t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

/* The time between an endpoint's turns: 1 / its weight, or for
 * LEAST_REQUEST 1 / (its weight over its requests in flight plus one),
 * Envoy's active_request_bias 1.0. Inverses are kept, so no division. */
static double edf_step(const struct upool *p, size_t ep)
{
    double step = p->cl->inv_weights[ep];

    if (p->cl->lb == CLUSTER_LB_LEAST_REQUEST)
        step *= (double)p->active[ep] + 1;
    return step;
}

/* The endpoint on top of the EDF heap takes its turn: the schedule's time
 * moves to its deadline and its next turn is one step later. */
static size_t edf_take(struct upool *p)
{
    size_t ep = p->edf[0].ep;

    p->vtime = p->edf[0].deadline;
    p->edf[0].deadline = p->vtime + edf_step(p, ep);
    edf_down(p, 0);
    return ep;
}

static int edf_init(struct upool *p)
{
    const struct cluster *cl = p->cl;
    size_t n = cl->nendpoints;

    p->edf = malloc(n * sizeof(*p->edf));
    p->parked = malloc(n * sizeof(*p->parked));
    if (p->edf == NULL || p->parked == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        edf_push(p, (uint32_t)i, cl->inv_weights[i]);
    /* Workers start at different points of the schedule, as round robin
     * starts them at different endpoints. */
    for (int i = 0; i < p->worker % (int)n; i++)
        edf_take(p);
    return 0;
}

int upool_init(struct upool *p, struct cluster *cl, struct event_base *base,
               int worker, struct h1_scratch *scratch)
{
    memset(p, 0, sizeof(*p));
    p->cl = cluster_ref(cl);
    p->base = base;
    p->worker = worker;
    p->scratch = scratch;
    p->rr = (size_t)worker; /* workers start at different endpoints */
    p->rng = UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(worker + 1) |
             (uint64_t)(uintptr_t)p;
    LIST_INIT(&p->idle);
    LIST_INIT(&p->dead);
    LIST_INIT(&p->h2conns);
    LIST_INIT(&p->h2dead);
    LIST_INIT(&p->waiters);
    p->active = calloc(cl->nendpoints ? cl->nendpoints : 1, sizeof(*p->active));
    p->reap_ev = event_new(base, -1, 0, reap, p);
    p->wake_ev = event_new(base, -1, 0, wake, p);
    if (p->active == NULL || p->reap_ev == NULL || p->wake_ev == NULL ||
        (cl->weights != NULL && edf_init(p) < 0))
        goto fail;
    return 0;
fail:
    upool_dispose(p); /* safe on a half-built pool: its lists are empty */
    return -1;
}

void upool_dispose(struct upool *p)
{
    if (p->cl == NULL)
        return;
    /* Waiters are requests, ended before their pool goes. */
    while (!LIST_EMPTY(&p->idle)) {
        h1_client_free(LIST_ELEM(p->idle.next, struct h1_client, link));
        conn_gone(p);
    }
    while (!LIST_EMPTY(&p->dead)) {
        h1_client_free(LIST_ELEM(p->dead.next, struct h1_client, link));
        conn_gone(p);
    }
    while (!LIST_EMPTY(&p->h2conns)) {
        h2_client_free(LIST_ELEM(p->h2conns.next, struct h2_client, link));
        conn_gone(p);
    }
    while (!LIST_EMPTY(&p->h2dead)) {
        h2_client_free(LIST_ELEM(p->h2dead.next, struct h2_client, link));
        conn_gone(p);
    }
    if (p->reap_ev != NULL)
        event_free(p->reap_ev);
    if (p->wake_ev != NULL)
        event_free(p->wake_ev);
    free(p->active);
    free(p->edf);
    free(p->parked);
    cluster_unref(p->cl);
    memset(p, 0, sizeof(*p));
}

static uint64_t upool_rand(struct upool *p)
{
    /* xorshift64: balancing needs spread, not secrecy. */
    uint64_t x = p->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p->rng = x;
    return x;
}

/* One pick by the balancer alone. */
static size_t pick_plain(struct upool *p)
{
    size_t n = p->cl->nendpoints;

    switch (p->cl->lb) {
    case CLUSTER_LB_RANDOM:
        return (size_t)(upool_rand(p) % n);
    case CLUSTER_LB_LEAST_REQUEST: {
        /* Power of two choices: as good as a full scan in practice, and
         * it never herds every worker onto the same idle endpoint. */
        size_t a = (size_t)(upool_rand(p) % n);
        size_t b = (size_t)(upool_rand(p) % n);
        return p->active[b] < p->active[a] ? b : a;
    }
    case CLUSTER_LB_HASH:
        return lb_hash_ep(p->cl->hash,
                          lb_hash_find(p->cl->hash, upool_rand(p)));
    default:
        return p->rr++ % n;
    }
}

/* The clock is read only when an ejection has to be looked at. */
struct lazy_now {
    uint64_t ms;
    int set;
};

static uint64_t now_ms(struct lazy_now *t)
{
    if (!t->set) {
        t->ms = clock_ms();
        t->set = 1;
    }
    return t->ms;
}

static int is_out(struct outlier *od, size_t ep, struct lazy_now *t)
{
    return outlier_maybe_out(od, ep) && outlier_ejected(od, ep, now_ms(t));
}

static int in_panic(struct outlier *od, struct lazy_now *t)
{
    return outlier_maybe_panic(od) && outlier_panic(od, now_ms(t));
}

/* The first endpoint from ep on (in order) that is in service; ep itself
 * when none is (outlier_panic() said there is one, but it may have been
 * ejected since). */
static size_t scan_healthy(struct outlier *od, size_t ep, size_t n,
                           struct lazy_now *t)
{
    for (size_t i = 0; i < n; i++) {
        size_t e = (ep + i) % n;
        if (!is_out(od, e, t))
            return e;
    }
    return ep;
}

/* A weighted draw, endpoint i with probability weights[i] / total, in
 * constant time: a slot of the alias table from the high 32 random bits
 * (multiplied down, not divided), then it or its alias by the low 32. */
static size_t draw_weighted(struct upool *p)
{
    uint64_t r = upool_rand(p);
    const struct cluster_alias *a =
        &p->cl->alias[((r >> 32) * p->cl->nendpoints) >> 32];

    return (r & UINT32_MAX) < a->below ? (size_t)(a - p->cl->alias) : a->other;
}

/* A weighted draw among the endpoints in service only: drawing again
 * until one is would take long when a heavy endpoint is ejected. */
static size_t draw_weighted_healthy(struct upool *p, struct lazy_now *t)
{
    struct cluster *cl = p->cl;
    size_t n = cl->nendpoints;
    uint64_t total = 0, r;

    for (size_t e = 0; e < n; e++)
        if (!is_out(cl->od, e, t))
            total += cl->weights[e];
    if (total == 0)
        return scan_healthy(cl->od, 0, n, t);
    r = upool_rand(p) % total;
    for (size_t e = 0; e < n; e++) {
        if (is_out(cl->od, e, t))
            continue;
        if (r < cl->weights[e])
            return e;
        r -= cl->weights[e];
    }
    /* Another worker ejected one meanwhile. */
    return scan_healthy(cl->od, 0, n, t);
}

/* Parked endpoints that are back in service (or all of them when
 * ejections are not honoured) rejoin the schedule one turn from now, as
 * Envoy's scheduler takes a host back in when it is rebuilt. */
static void edf_unpark(struct upool *p, int honour, struct lazy_now *t)
{
    size_t k = 0;

    for (size_t i = 0; i < p->nparked; i++) {
        uint32_t ep = p->parked[i];
        if (honour && is_out(p->cl->od, ep, t))
            p->parked[k++] = ep;
        else
            edf_push(p, ep, p->vtime + edf_step(p, ep));
    }
    p->nparked = k;
}

/* Weighted balancing (a cluster with weights, never a hash one). */
static size_t pick_weighted(struct upool *p)
{
    struct outlier *od = p->cl->od;
    struct lazy_now t = {0, 0};
    int honour = od != NULL && outlier_any(od) && !in_panic(od, &t);

    if (p->cl->lb == CLUSTER_LB_RANDOM)
        return honour ? draw_weighted_healthy(p, &t) : draw_weighted(p);
    if (p->nparked > 0)
        edf_unpark(p, honour, &t);
    if (!honour)
        return edf_take(p);
    /* An ejected endpoint on top leaves the heap until it returns, so a
     * heavy one that is out costs one look, not a turn per weight. */
    while (p->nedf > 0) {
        uint32_t ep = p->edf[0].ep;
        if (!is_out(od, ep, &t))
            return edf_take(p);
        p->parked[p->nparked++] = ep;
        p->edf[0] = p->edf[--p->nedf];
        edf_down(p, 0);
    }
    return scan_healthy(od, 0, p->cl->nendpoints, &t);
}

size_t upool_pick(struct upool *p)
{
    struct outlier *od = p->cl->od;
    size_t n = p->cl->nendpoints;
    struct lazy_now t = {0, 0};
    size_t ep;

    if (p->cl->lb == CLUSTER_LB_HASH)
        return upool_pick_hash(p, upool_rand(p));
    if (p->cl->weights != NULL)
        return pick_weighted(p);
    ep = pick_plain(p);
    if (od == NULL || !outlier_any(od) || in_panic(od, &t))
        return ep;
    /* Ask the balancer again: round robin moves on to the next endpoint
     * (so the healthy ones share evenly), the random ones draw again. A
     * few draws find a healthy endpoint unless nearly all are ejected;
     * then a scan does. */
    for (size_t i = 0; i < n && i < 8; i++) {
        if (!is_out(od, ep, &t))
            return ep;
        ep = pick_plain(p);
    }
    return scan_healthy(od, ep, n, &t);
}

size_t upool_pick_hash(struct upool *p, uint64_t h)
{
    const struct lb_hash *lh = p->cl->hash;
    struct outlier *od = p->cl->od;
    struct lazy_now t = {0, 0};
    size_t pos, ep;

    /* Not a hash cluster: its own balancer (a hash cluster always has a
     * table, empty only without endpoints, which are never picked). */
    if (lh == NULL)
        return upool_pick(p);
    if (lh->size == 0)
        return 0;
    pos = lb_hash_find(lh, h);
    ep = lb_hash_ep(lh, pos);
    if (od == NULL || !outlier_any(od) || in_panic(od, &t))
        return ep;
    /* Walk on to the next point of another endpoint that is in service:
     * the ejected endpoint's keys spread over the others, and come back
     * to it when it returns. */
    for (size_t i = 0; i < lh->size; i++) {
        ep = lb_hash_ep(lh, pos);
        if (!is_out(od, ep, &t))
            return ep;
        pos = lb_hash_next(lh, pos);
    }
    return scan_healthy(od, ep, p->cl->nendpoints, &t);
}

size_t upool_next(struct upool *p, size_t ep)
{
    struct outlier *od = p->cl->od;
    size_t n = p->cl->nendpoints;
    size_t next = (ep + 1) % n;
    struct lazy_now t = {0, 0};

    if (od == NULL || !outlier_any(od) || in_panic(od, &t))
        return next;
    return scan_healthy(od, next, n, &t);
}

void upool_report_slow(struct upool *p, size_t ep, int result)
{
    struct outlier *od = p->cl->od;
    uint64_t before, now;
    struct outlier_host_state st;
    char as[ADDR_STRLEN];

    if (result >= 0 && result < 500) {
        outlier_success(od, ep); /* the common case: no clock */
        return;
    }
    if (ep >= p->cl->nendpoints)
        return;
    now = clock_ms();
    before = __atomic_load_n(&od->h[ep].ejections, __ATOMIC_RELAXED);
    outlier_report(od, ep, result, now);
    /* An ejection is rare and worth a line: which endpoint, for how long
     * (Envoy's outlier event log, in short). */
    outlier_state(od, ep, now, &st);
    if (st.ejected && st.ejections > before)
        log_warn("cluster %s: endpoint %s ejected by outlier detection for "
                 "%llu ms (ejection %llu)",
                 p->cl->name,
                 addr_format(&p->cl->endpoints[ep], as, sizeof(as)),
                 (unsigned long long)(st.until - now),
                 (unsigned long long)st.ejections);
}

void upool_busy(struct upool *p, size_t ep)
{
    if (ep < p->cl->nendpoints)
        p->active[ep]++;
}

void upool_done(struct upool *p, size_t ep)
{
    if (ep < p->cl->nendpoints && p->active[ep] > 0)
        p->active[ep]--;
}

struct h1_client *upool_take(struct upool *p, size_t ep)
{
    /* Most recently used first: its TCP state is the warmest. */
    for (struct list *it = p->idle.prev; it != &p->idle; it = it->prev) {
        struct h1_client *c = LIST_ELEM(it, struct h1_client, link);
        if (c->endpoint == ep) {
            list_del(&c->link);
            p->nidle--;
            STAT_ADD(upool_stats(p), cx_reused, 1);
            return c;
        }
    }
    return NULL;
}

void upool_put(struct upool *p, struct h1_client *c)
{
    if (p->cl->max_requests_per_conn > 0 &&
        c->requests >= p->cl->max_requests_per_conn) {
        upool_discard(p, c);
        return;
    }
    if (p->nidle >= UPOOL_MAX_IDLE) {
        struct h1_client *old = LIST_ELEM(p->idle.next, struct h1_client, link);
        p->nidle--;
        upool_discard(p, old);
    }
    h1_client_set_owner(c, &pool_hooks, p);
    list_del(&c->link);
    list_append(&p->idle, &c->link);
    p->nidle++;
    h1_client_idle(c);
    /* A request waiting for a connection takes this one. */
    if (!LIST_EMPTY(&p->waiters))
        event_active(p->wake_ev, EV_TIMEOUT, 0);
}
