#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/rng.h"
#include "upstream/balancer.h"
#include "upstream/cluster.h"
#include "upstream/hash.h"
#include "upstream/outlier.h"

/*
 * Vose's construction of Walker's alias table: each of the n slots holds
 * 1/n of the total weight, made of its own endpoint's weight (as much as
 * fits) and the rest of one heavier endpoint's. Sizes are scaled by n so
 * they stay integers: a slot holds `total`, endpoint i brings w[i] x n.
 */
int balancer_build_alias(struct balancer_alias *alias, const uint32_t *w,
                         size_t n)
{
    size_t nsmall = 0, nlarge = 0;
    uint64_t total = 0, *left = malloc(n * sizeof(*left));
    uint32_t *small = malloc(n * sizeof(*small));
    uint32_t *large = malloc(n * sizeof(*large));
    int rc = -1;

    if (left == NULL || small == NULL || large == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++)
        total += w[i];
    for (size_t i = 0; i < n; i++) {
        left[i] = (uint64_t)w[i] * n;
        if (left[i] < total)
            small[nsmall++] = (uint32_t)i;
        else
            large[nlarge++] = (uint32_t)i;
    }
    while (nsmall > 0 && nlarge > 0) {
        uint32_t s = small[--nsmall], l = large[nlarge - 1];
        alias[s].below =
            (uint64_t)((double)left[s] / (double)total * 4294967296.0);
        alias[s].other = l;
        left[l] -= total - left[s];
        if (left[l] < total) {
            nlarge--;
            small[nsmall++] = l;
        }
    }
    /* What is left holds a whole slot (up to rounding). */
    while (nlarge > 0) {
        uint32_t l = large[--nlarge];
        alias[l].below = UINT64_C(1) << 32;
        alias[l].other = l;
    }
    while (nsmall > 0) {
        uint32_t s = small[--nsmall];
        alias[s].below = UINT64_C(1) << 32;
        alias[s].other = s;
    }
    rc = 0;
fail:
    free(left);
    free(small);
    free(large);
    return rc;
}

/* The EDF heap: the earliest deadline on top, ties to the lower index so
 * every worker's schedule is the same sequence. */
static int edf_before(const struct balancer_edf *a,
                      const struct balancer_edf *b)
{
    return a->deadline < b->deadline ||
           (a->deadline == b->deadline && a->ep < b->ep);
}

static void edf_down(struct balancer *b, size_t i)
{
    struct balancer_edf *h = b->edf;
    size_t n = b->nedf;

    for (;;) {
        size_t l = 2 * i + 1, m = i;
        struct balancer_edf t;
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

static void edf_push(struct balancer *b, uint32_t ep, double deadline)
{
    struct balancer_edf *h = b->edf;
    size_t i = b->nedf++;

    h[i].ep = ep;
    h[i].deadline = deadline;
    while (i > 0 && edf_before(&h[i], &h[(i - 1) / 2])) {
        struct balancer_edf t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

/* The time between an endpoint's turns: 1 / its weight, or for
 * LEAST_REQUEST 1 / (its weight over its requests in flight plus one),
 * Envoy's active_request_bias 1.0. Inverses are kept, so no division. */
static double edf_step(const struct balancer *b, size_t ep)
{
    double step = b->cl->inv_weights[ep];

    if (b->cl->lb == CLUSTER_LB_LEAST_REQUEST)
        step *= (double)b->active[ep] + 1;
    return step;
}

/* The endpoint on top of the EDF heap takes its turn: the schedule's time
 * moves to its deadline and its next turn is one step later. */
static size_t edf_take(struct balancer *b)
{
    size_t ep = b->edf[0].ep;

    b->vtime = b->edf[0].deadline;
    b->edf[0].deadline = b->vtime + edf_step(b, ep);
    edf_down(b, 0);
    return ep;
}

static int edf_init(struct balancer *b, int worker)
{
    const struct cluster *cl = b->cl;
    size_t n = cl->nendpoints;

    b->edf = malloc(n * sizeof(*b->edf));
    b->parked = malloc(n * sizeof(*b->parked));
    if (b->edf == NULL || b->parked == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        edf_push(b, (uint32_t)i, cl->inv_weights[i]);
    /* Workers start at different points of the schedule, as round robin
     * starts them at different endpoints. */
    for (int i = 0; i < worker % (int)n; i++)
        edf_take(b);
    return 0;
}

int balancer_init(struct balancer *b, const struct cluster *cl, int worker)
{
    memset(b, 0, sizeof(*b));
    b->cl = cl;
    b->rr = (size_t)worker; /* workers start at different endpoints */
    b->rng = UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(worker + 1) |
             (uint64_t)(uintptr_t)b;
    b->active = calloc(cl->nendpoints ? cl->nendpoints : 1, sizeof(*b->active));
    if (b->active == NULL || (cl->weights != NULL && edf_init(b, worker) < 0))
        goto fail;
    return 0;
fail:
    balancer_dispose(b);
    return -1;
}

void balancer_dispose(struct balancer *b)
{
    free(b->active);
    free(b->edf);
    free(b->parked);
    memset(b, 0, sizeof(*b));
}

static uint64_t lb_rand(struct balancer *b)
{
    /* Balancing needs spread, not secrecy. */
    return rng_next(&b->rng);
}

/* One pick by the balancer alone. */
static size_t pick_plain(struct balancer *b)
{
    size_t n = b->cl->nendpoints;

    switch (b->cl->lb) {
    case CLUSTER_LB_RANDOM:
        return (size_t)(lb_rand(b) % n);
    case CLUSTER_LB_LEAST_REQUEST: {
        /* Power of two choices: as good as a full scan in practice, and
         * it never herds every worker onto the same idle endpoint. */
        size_t one = (size_t)(lb_rand(b) % n);
        size_t two = (size_t)(lb_rand(b) % n);
        return b->active[two] < b->active[one] ? two : one;
    }
    case CLUSTER_LB_HASH:
        return lb_hash_ep(b->cl->hash, lb_hash_find(b->cl->hash, lb_rand(b)));
    default:
        return b->rr++ % n;
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
static size_t draw_weighted(struct balancer *b)
{
    uint64_t r = lb_rand(b);
    const struct balancer_alias *a =
        &b->cl->alias[((r >> 32) * b->cl->nendpoints) >> 32];

    return (r & UINT32_MAX) < a->below ? (size_t)(a - b->cl->alias) : a->other;
}

/* A weighted draw among the endpoints in service only: drawing again
 * until one is would take long when a heavy endpoint is ejected. */
static size_t draw_weighted_healthy(struct balancer *b, struct lazy_now *t)
{
    const struct cluster *cl = b->cl;
    size_t n = cl->nendpoints;
    uint64_t total = 0, r;

    for (size_t e = 0; e < n; e++)
        if (!is_out(cl->od, e, t))
            total += cl->weights[e];
    if (total == 0)
        return scan_healthy(cl->od, 0, n, t);
    r = lb_rand(b) % total;
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
static void edf_unpark(struct balancer *b, int honour, struct lazy_now *t)
{
    size_t k = 0;

    for (size_t i = 0; i < b->nparked; i++) {
        uint32_t ep = b->parked[i];
        if (honour && is_out(b->cl->od, ep, t))
            b->parked[k++] = ep;
        else
            edf_push(b, ep, b->vtime + edf_step(b, ep));
    }
    b->nparked = k;
}

/* Weighted balancing (a cluster with weights, never a hash one). */
static size_t pick_weighted(struct balancer *b)
{
    struct outlier *od = b->cl->od;
    struct lazy_now t = {0, 0};
    int honour = od != NULL && outlier_any(od) && !in_panic(od, &t);

    if (b->cl->lb == CLUSTER_LB_RANDOM)
        return honour ? draw_weighted_healthy(b, &t) : draw_weighted(b);
    if (b->nparked > 0)
        edf_unpark(b, honour, &t);
    if (!honour)
        return edf_take(b);
    /* An ejected endpoint on top leaves the heap until it returns, so a
     * heavy one that is out costs one look, not a turn per weight. */
    while (b->nedf > 0) {
        uint32_t ep = b->edf[0].ep;
        if (!is_out(od, ep, &t))
            return edf_take(b);
        b->parked[b->nparked++] = ep;
        b->edf[0] = b->edf[--b->nedf];
        edf_down(b, 0);
    }
    return scan_healthy(od, 0, b->cl->nendpoints, &t);
}

size_t balancer_pick(struct balancer *b)
{
    struct outlier *od = b->cl->od;
    size_t n = b->cl->nendpoints;
    struct lazy_now t = {0, 0};
    size_t ep;

    if (b->cl->lb == CLUSTER_LB_HASH)
        return balancer_pick_hash(b, lb_rand(b));
    if (b->cl->weights != NULL)
        return pick_weighted(b);
    ep = pick_plain(b);
    if (od == NULL || !outlier_any(od) || in_panic(od, &t))
        return ep;
    /* Ask the balancer again: round robin moves on to the next endpoint
     * (so the healthy ones share evenly), the random ones draw again. A
     * few draws find a healthy endpoint unless nearly all are ejected;
     * then a scan does. */
    for (size_t i = 0; i < n && i < 8; i++) {
        if (!is_out(od, ep, &t))
            return ep;
        ep = pick_plain(b);
    }
    return scan_healthy(od, ep, n, &t);
}

size_t balancer_pick_hash(struct balancer *b, uint64_t h)
{
    const struct lb_hash *lh = b->cl->hash;
    struct outlier *od = b->cl->od;
    struct lazy_now t = {0, 0};
    size_t pos, ep;

    /* Not a hash cluster: its own balancer (a hash cluster always has a
     * table, empty only without endpoints, which are never picked). */
    if (lh == NULL)
        return balancer_pick(b);
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
    return scan_healthy(od, ep, b->cl->nendpoints, &t);
}

size_t balancer_next(struct balancer *b, size_t ep)
{
    struct outlier *od = b->cl->od;
    size_t n = b->cl->nendpoints;
    size_t next = (ep + 1) % n;
    struct lazy_now t = {0, 0};

    if (od == NULL || !outlier_any(od) || in_panic(od, &t))
        return next;
    return scan_healthy(od, next, n, &t);
}

void balancer_busy(struct balancer *b, size_t ep)
{
    if (ep < b->cl->nendpoints)
        b->active[ep]++;
}

void balancer_done(struct balancer *b, size_t ep)
{
    if (ep < b->cl->nendpoints && b->active[ep] > 0)
        b->active[ep]--;
}
