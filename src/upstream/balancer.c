#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/rng.h"
#include "upstream/balancer.h"
#include "upstream/cluster.h"
#include "upstream/hash.h"
#include "upstream/outlier.h"
#include "upstream/priority.h"

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

static void edf_down(struct balancer_sched *s, size_t i)
{
    struct balancer_edf *h = s->edf;
    size_t n = s->nedf;

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

static void edf_push(struct balancer_sched *s, uint32_t ep, double deadline)
{
    struct balancer_edf *h = s->edf;
    size_t i = s->nedf++;

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
static size_t edf_take(struct balancer *b, struct balancer_sched *s)
{
    size_t ep = s->edf[0].ep;

    s->vtime = s->edf[0].deadline;
    s->edf[0].deadline = s->vtime + edf_step(b, ep);
    edf_down(s, 0);
    return ep;
}

/* A schedule over the n endpoints eps[0..n) (NULL: 0..n). */
static int edf_init(struct balancer *b, struct balancer_sched *s,
                    const uint32_t *eps, size_t n, int worker)
{
    s->edf = malloc(n * sizeof(*s->edf));
    s->parked = malloc(n * sizeof(*s->parked));
    if (s->edf == NULL || s->parked == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t ep = eps != NULL ? eps[i] : (uint32_t)i;
        edf_push(s, ep, b->cl->inv_weights[ep]);
    }
    /* Workers start at different points of the schedule, as round robin
     * starts them at different endpoints. */
    for (int i = 0; i < worker % (int)n; i++)
        edf_take(b, s);
    return 0;
}

static void sched_dispose(struct balancer_sched *s)
{
    free(s->edf);
    free(s->parked);
    memset(s, 0, sizeof(*s));
}

/* Per level state for a cluster with priority levels. */
static int levels_init(struct balancer *b, int worker)
{
    const struct cluster_prio *p = b->cl->prio;

    b->lrr = calloc(p->nlevels, sizeof(*b->lrr));
    b->lload = calloc(p->nlevels, sizeof(*b->lload));
    b->lpanic = calloc(p->nlevels, sizeof(*b->lpanic));
    b->ldl = calloc(p->nlevels, sizeof(*b->ldl));
    b->lsched = UINT64_MAX; /* no schedule yet */
    if (b->lrr == NULL || b->lload == NULL || b->lpanic == NULL ||
        b->ldl == NULL)
        return -1;
    for (size_t l = 0; l < p->nlevels; l++)
        b->lrr[l] = (size_t)worker;
    if (b->cl->weights == NULL)
        return 0;
    b->ls = calloc(p->nlevels, sizeof(*b->ls));
    if (b->ls == NULL)
        return -1;
    for (size_t l = 0; l < p->nlevels; l++)
        if (edf_init(b, &b->ls[l], p->order + p->off[l],
                     p->off[l + 1] - p->off[l], worker) < 0)
            return -1;
    return 0;
}

int balancer_init(struct balancer *b, const struct cluster *cl, int worker)
{
    memset(b, 0, sizeof(*b));
    b->cl = cl;
    b->worker = worker;
    b->rr = (size_t)worker; /* workers start at different endpoints */
    b->rng = UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(worker + 1) |
             (uint64_t)(uintptr_t)b;
    b->active = calloc(cl->nendpoints ? cl->nendpoints : 1, sizeof(*b->active));
    if (b->active == NULL ||
        (cl->weights != NULL &&
         edf_init(b, &b->s, NULL, cl->nendpoints, worker) < 0) ||
        (cl->prio != NULL && levels_init(b, worker) < 0))
        goto fail;
    return 0;
fail:
    balancer_dispose(b);
    return -1;
}

void balancer_dispose(struct balancer *b)
{
    free(b->active);
    sched_dispose(&b->s);
    if (b->ls != NULL && b->cl != NULL && b->cl->prio != NULL)
        for (size_t l = 0; l < b->cl->prio->nlevels; l++)
            sched_dispose(&b->ls[l]);
    free(b->ls);
    free(b->lrr);
    free(b->lload);
    free(b->lpanic);
    free(b->ldl);
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
static void edf_unpark(struct balancer *b, struct balancer_sched *s, int honour,
                       struct lazy_now *t)
{
    size_t k = 0;

    for (size_t i = 0; i < s->nparked; i++) {
        uint32_t ep = s->parked[i];
        if (honour && is_out(b->cl->od, ep, t))
            s->parked[k++] = ep;
        else
            edf_push(s, ep, s->vtime + edf_step(b, ep));
    }
    s->nparked = k;
}

/* The next turn of schedule s: an ejected endpoint on top leaves the heap
 * until it returns (when honour), so a heavy one that is out costs one
 * look, not a turn per weight. Returns SIZE_MAX when none is in service. */
static size_t edf_next(struct balancer *b, struct balancer_sched *s, int honour,
                       struct lazy_now *t)
{
    struct outlier *od = b->cl->od;

    if (s->nparked > 0)
        edf_unpark(b, s, honour, t);
    if (!honour)
        return edf_take(b, s);
    while (s->nedf > 0) {
        uint32_t ep = s->edf[0].ep;
        if (!is_out(od, ep, t))
            return edf_take(b, s);
        s->parked[s->nparked++] = ep;
        s->edf[0] = s->edf[--s->nedf];
        edf_down(s, 0);
    }
    return SIZE_MAX;
}

/* Weighted balancing (a cluster with weights, never a hash one). */
static size_t pick_weighted(struct balancer *b)
{
    struct outlier *od = b->cl->od;
    struct lazy_now t = {0, 0};
    int honour = od != NULL && outlier_any(od) && !in_panic(od, &t);
    size_t ep;

    if (b->cl->lb == CLUSTER_LB_RANDOM)
        return honour ? draw_weighted_healthy(b, &t) : draw_weighted(b);
    ep = edf_next(b, &b->s, honour, &t);
    return ep != SIZE_MAX ? ep : scan_healthy(od, 0, b->cl->nendpoints, &t);
}

/* ---- locality priority levels ---------------------------------------------
 */

/*
 * The next locality (a level of a distribute cluster) by Envoy's EDF
 * schedule over weights w[0..n) (a weight of 0 is never picked), built
 * anew, from the schedule's present time, when the weights are another
 * set (gen) than it ran on.
 */
static size_t locality_next(struct balancer *b, const uint32_t *w, size_t n,
                            uint64_t gen)
{
    size_t best = SIZE_MAX;

    if (b->lsched != gen) {
        for (size_t l = 0; l < n; l++)
            b->ldl[l] = w[l] > 0 ? b->lvt + 1.0 / w[l] : 0;
        b->lsched = gen;
    }
    for (size_t l = 0; l < n; l++)
        if (w[l] > 0 && (best == SIZE_MAX || b->ldl[l] < b->ldl[best]))
            best = l;
    if (best == SIZE_MAX)
        return 0;
    b->lvt = b->ldl[best];
    b->ldl[best] += 1.0 / w[best];
    return best;
}

/*
 * The level for the next request: the first while no endpoint of the
 * cluster is ejected (its load is 100%, and nothing is computed), else a
 * draw against Envoy's priority load (priority.h). *panic: the level is
 * balanced over all its endpoints, ejected or not.
 */
static size_t choose_level(struct balancer *b, struct lazy_now *t, int *panic)
{
    const struct cluster *cl = b->cl;
    struct outlier *od = cl->od;
    uint64_t r;
    size_t l;

    *panic = 0;
    if (od == NULL || !outlier_any(od)) {
        const struct cluster_prio *p = cl->prio;
        /* Priorities: all to the first. Localities: by their weights. */
        if (p->weight == NULL)
            return 0;
        return locality_next(b, p->weight, p->nlevels, 0);
    }
    /* The loads change only when an endpoint is ejected or returns: kept
     * until the detector's counts or next expiry move, or that expiry
     * comes. */
    if (!b->lvalid ||
        __atomic_load_n(&od->total, __ATOMIC_ACQUIRE) != b->lseen_total ||
        __atomic_load_n(&od->active, __ATOMIC_ACQUIRE) != b->lseen_active ||
        __atomic_load_n(&od->next_expiry, __ATOMIC_ACQUIRE) !=
            b->lvalid_until ||
        now_ms(t) >= b->lvalid_until) {
        /* Those due back are returned first (and the next expiry found). */
        outlier_active(od, now_ms(t));
        cluster_prio_loads(cl, now_ms(t), b->lload, b->lpanic);
        b->lseen_total = __atomic_load_n(&od->total, __ATOMIC_ACQUIRE);
        b->lseen_active = __atomic_load_n(&od->active, __ATOMIC_ACQUIRE);
        b->lvalid_until = __atomic_load_n(&od->next_expiry, __ATOMIC_ACQUIRE);
        b->lvalid = 1;
        b->lgen++;
        b->lsum = 0;
        for (l = 0; l < cl->prio->nlevels; l++)
            b->lsum += b->lload[l];
        if (b->lsum == 0) { /* cannot be: a panic spreads 100 */
            b->lload[0] = 100;
            b->lsum = 100;
        }
    }
    if (cl->prio->weight != NULL && !b->lpanic[0]) {
        l = locality_next(b, b->lload, cl->prio->nlevels, b->lgen);
        return l;
    }
    r = lb_rand(b) % b->lsum;
    for (l = 0; l + 1 < cl->prio->nlevels; l++) {
        if (r < b->lload[l])
            break;
        r -= b->lload[l];
    }
    *panic = b->lpanic[l];
    return l;
}

/* One draw in level l by the plain balancers, ejections aside. */
static size_t level_draw(struct balancer *b, size_t l)
{
    const struct cluster_prio *p = b->cl->prio;
    size_t lo = p->off[l], n = p->off[l + 1] - lo;

    switch (b->cl->lb) {
    case CLUSTER_LB_RANDOM:
        return p->order[lo + lb_rand(b) % n];
    case CLUSTER_LB_LEAST_REQUEST: {
        size_t one = p->order[lo + lb_rand(b) % n];
        size_t two = p->order[lo + lb_rand(b) % n];
        return b->active[two] < b->active[one] ? two : one;
    }
    default:
        return p->order[lo + b->lrr[l]++ % n];
    }
}

/* The first endpoint of level l in service, from ep's place in it on;
 * SIZE_MAX when none is. */
static size_t level_scan(struct balancer *b, size_t l, size_t ep,
                         struct lazy_now *t)
{
    const struct cluster_prio *p = b->cl->prio;
    size_t lo = p->off[l], n = p->off[l + 1] - lo, at = 0;

    for (size_t i = 0; i < n; i++)
        if (p->order[lo + i] == ep)
            at = i;
    for (size_t i = 0; i < n; i++) {
        size_t e = p->order[lo + (at + i) % n];
        if (!is_out(b->cl->od, e, t))
            return e;
    }
    return SIZE_MAX;
}

/* Weighted RANDOM in level l: its alias table, or among those in service
 * only (as draw_weighted_healthy()). */
static size_t level_draw_weighted(struct balancer *b, size_t l, int honour,
                                  struct lazy_now *t)
{
    const struct cluster *cl = b->cl;
    const struct cluster_prio *p = cl->prio;
    size_t lo = p->off[l], n = p->off[l + 1] - lo;
    uint64_t total = 0, r = lb_rand(b);

    if (!honour) {
        size_t slot = (size_t)(((r >> 32) * n) >> 32);
        const struct balancer_alias *a = &p->alias[lo + slot];
        return p->order[lo + ((r & UINT32_MAX) < a->below ? slot : a->other)];
    }
    for (size_t i = lo; i < lo + n; i++)
        if (!is_out(cl->od, p->order[i], t))
            total += cl->weights[p->order[i]];
    if (total == 0)
        return SIZE_MAX;
    r %= total;
    for (size_t i = lo; i < lo + n; i++) {
        uint32_t e = p->order[i];
        if (is_out(cl->od, e, t))
            continue;
        if (r < cl->weights[e])
            return e;
        r -= cl->weights[e];
    }
    return SIZE_MAX;
}

/* Consistent hash in level l: the level's ring or table at h, walking on
 * past ejected endpoints when honour. */
static size_t level_hash(struct balancer *b, size_t l, uint64_t h, int honour,
                         struct lazy_now *t)
{
    const struct cluster_prio *p = b->cl->prio;
    const struct lb_hash *lh = p->hash[l];
    size_t lo = p->off[l], pos;

    if (lh->size == 0)
        return p->order[lo];
    pos = lb_hash_find(lh, h);
    for (size_t i = 0; i < lh->size; i++) {
        size_t ep = p->order[lo + lb_hash_ep(lh, pos)];
        if (!honour || !is_out(b->cl->od, ep, t))
            return ep;
        pos = lb_hash_next(lh, pos);
    }
    return SIZE_MAX;
}

/* One pick in level l by the cluster's balancer, skipping ejected
 * endpoints when honour; SIZE_MAX when none of the level is in service. */
static size_t level_pick(struct balancer *b, size_t l, int honour,
                         struct lazy_now *t, const uint64_t *key)
{
    const struct cluster *cl = b->cl;
    const struct cluster_prio *p = cl->prio;
    size_t n = p->off[l + 1] - p->off[l], ep;

    if (cl->lb == CLUSTER_LB_HASH && p->hash != NULL)
        return level_hash(b, l, key != NULL ? *key : lb_rand(b), honour, t);
    if (cl->weights != NULL) {
        if (cl->lb == CLUSTER_LB_RANDOM)
            return level_draw_weighted(b, l, honour, t);
        return edf_next(b, &b->ls[l], honour, t);
    }
    ep = level_draw(b, l);
    if (!honour)
        return ep;
    for (size_t i = 0; i < n && i < 8; i++) {
        if (!is_out(cl->od, ep, t))
            return ep;
        ep = level_draw(b, l);
    }
    return level_scan(b, l, ep, t);
}

/* A pick in a cluster with levels: the level by the priority load, then
 * the endpoint in it; key: the request's consistent hash, if any. */
static size_t pick_levels(struct balancer *b, const uint64_t *key)
{
    const struct cluster *cl = b->cl;
    const struct cluster_prio *p = cl->prio;
    struct lazy_now t = {0, 0};
    int panic;
    size_t l = choose_level(b, &t, &panic), ep;
    int honour = cl->od != NULL && outlier_any(cl->od) && !panic;

    ep = level_pick(b, l, honour, &t, key);
    /* Ejected since the loads were counted: the first in service, in
     * level order, else the level as it is. */
    for (size_t k = 0; ep == SIZE_MAX && k < p->nlevels; k++)
        ep = level_scan(b, k, p->order[p->off[k]], &t);
    if (ep == SIZE_MAX)
        ep = level_pick(b, l, 0, &t, key);
    if (p->weight == NULL && p->level[ep] > 0 && b->worker >= 0 &&
        b->worker < cl->nworkers)
        cl->w[b->worker].rq_failover++;
    return ep;
}

size_t balancer_pick(struct balancer *b)
{
    struct outlier *od = b->cl->od;
    size_t n = b->cl->nendpoints;
    struct lazy_now t = {0, 0};
    size_t ep;

    if (b->cl->prio != NULL)
        return pick_levels(b, NULL);
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

    if (b->cl->prio != NULL)
        return pick_levels(b, &h);
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

    if (b->cl->prio != NULL) {
        /* The next one in service in ep's level, else a new pick. */
        const struct cluster_prio *p = b->cl->prio;
        size_t l = p->level[ep % n];
        size_t lo = p->off[l], cnt = p->off[l + 1] - lo, at = 0;
        int honour = od != NULL && outlier_any(od);
        for (size_t i = 0; i < cnt; i++)
            if (p->order[lo + i] == ep)
                at = i;
        for (size_t i = 1; i < cnt; i++) {
            size_t e = p->order[lo + (at + i) % cnt];
            if (!honour || !is_out(od, e, &t))
                return e;
        }
        return cnt > 1 || honour ? pick_levels(b, NULL) : ep;
    }
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
