/*
 * Outlier detection shared by all workers: consecutive-failure counters
 * per endpoint, ejection with a cap on the share ejected, return after
 * the ejection time, and panic when too few endpoints are left.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "upstream/outlier.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_ACQ_REL)
#define SUB(p, v) __atomic_sub_fetch((p), (v), __ATOMIC_ACQ_REL)

static int cas64(uint64_t *p, uint64_t expect, uint64_t want)
{
    return __atomic_compare_exchange_n(p, &expect, want, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}

struct outlier *outlier_new(const struct outlier_conf *conf, size_t n)
{
    struct outlier *od = calloc(1, sizeof(*od));

    if (od == NULL)
        return NULL;
    od->conf = *conf;
    if (od->conf.base_ejection_ms == 0)
        od->conf.base_ejection_ms = 1;
    if (od->conf.max_ejection_ms < od->conf.base_ejection_ms)
        od->conf.max_ejection_ms = od->conf.base_ejection_ms;
    od->n = n;
    od->next_expiry = UINT64_MAX;
    if (posix_memalign((void **)&od->h, 64, (n ? n : 1) * sizeof(*od->h)) !=
        0) {
        free(od);
        return NULL;
    }
    memset(od->h, 0, (n ? n : 1) * sizeof(*od->h));
    return od;
}

void outlier_free(struct outlier *od)
{
    if (od == NULL)
        return;
    free(od->h);
    free(od);
}

static void reset_counts(struct outlier_host *h)
{
    STORE(&h->c5xx, 0);
    STORE(&h->cgw, 0);
    STORE(&h->clocal, 0);
}

/* Returns h to service if it is ejected and its time is up; exactly one
 * caller wins the return. */
static void try_return(struct outlier *od, struct outlier_host *h,
                       uint64_t until, uint64_t now)
{
    if (until == 0 || now < until || !cas64(&h->until, until, 0))
        return;
    /* In service since its time was up, whenever someone noticed. */
    STORE(&h->returned, until);
    reset_counts(h);
    SUB(&od->active, 1);
}

/* Returns every endpoint whose time is up, at most once per expiry. */
static void sweep(struct outlier *od, uint64_t now)
{
    uint64_t seen = LOAD(&od->next_expiry);
    uint64_t next = UINT64_MAX;

    if (now < seen)
        return;
    for (size_t i = 0; i < od->n; i++) {
        uint64_t until = LOAD(&od->h[i].until);
        try_return(od, &od->h[i], until, now);
        until = LOAD(&od->h[i].until);
        if (until != 0 && until < next)
            next = until;
    }
    /* An ejection since we read `seen` lowered it: keep theirs. */
    cas64(&od->next_expiry, seen, next);
}

int outlier_ejected(struct outlier *od, size_t ep, uint64_t now)
{
    struct outlier_host *h = &od->h[ep];
    uint64_t until = LOAD(&h->until);

    if (until == 0)
        return 0;
    if (now < until)
        return 1;
    try_return(od, h, until, now);
    return 0;
}

static int too_few(const struct outlier *od, uint64_t active)
{
    uint64_t healthy = active < od->n ? od->n - active : 0;

    return healthy == 0 ||
           healthy * 100 < (uint64_t)od->conf.min_health_pct * od->n;
}

int outlier_maybe_panic(const struct outlier *od)
{
    return too_few(od, __atomic_load_n(&od->active, __ATOMIC_RELAXED));
}

int outlier_panic(struct outlier *od, uint64_t now)
{
    if (!too_few(od, LOAD(&od->active)))
        return 0;
    /* Some of those counted may be due back already. */
    sweep(od, now);
    return too_few(od, LOAD(&od->active));
}

/* The ejection time for h's next ejection: its multiplier less one per
 * interval spent in service since it last returned, plus one, times the
 * base, capped (Envoy's backoff and its decay at each interval). */
static uint32_t next_backoff(const struct outlier *od, struct outlier_host *h,
                             uint64_t now)
{
    uint32_t b = LOAD(&h->backoff);
    uint64_t back = LOAD(&h->returned);
    const struct outlier_conf *c = &od->conf;

    if (b > 0 && c->interval_ms > 0 && now > back) {
        uint64_t decay = (now - back) / c->interval_ms;
        b = decay >= b ? 0 : b - (uint32_t)decay;
    }
    if ((uint64_t)b * c->base_ejection_ms < c->max_ejection_ms)
        b++;
    return b;
}

static void eject(struct outlier *od, size_t ep, enum outlier_reason why,
                  uint64_t now)
{
    struct outlier_host *h = &od->h[ep];
    uint64_t active, dur, until, ne;
    uint32_t b;

    reset_counts(h);
    /* Envoy's cap: eject only while ejected/total stays within the
     * percentage (no host at all when one is already too many). */
    active = ADD(&od->active, 1);
    if (active * 100 > (uint64_t)od->conf.max_ejection_pct * od->n) {
        SUB(&od->active, 1);
        sweep(od, now); /* an expired one may free a place */
        active = ADD(&od->active, 1);
        if (active * 100 > (uint64_t)od->conf.max_ejection_pct * od->n) {
            SUB(&od->active, 1);
            ADD(&od->overflow, 1);
            return;
        }
    }
    b = next_backoff(od, h, now);
    dur = (uint64_t)b * od->conf.base_ejection_ms;
    if (dur > od->conf.max_ejection_ms)
        dur = od->conf.max_ejection_ms;
    until = now + (dur ? dur : 1);
    if (!cas64(&h->until, 0, until)) {
        SUB(&od->active, 1); /* someone else ejected it first */
        return;
    }
    STORE(&h->backoff, b);
    ADD(&h->ejections, 1);
    ADD(&od->total, 1);
    ADD(&od->by_reason[why], 1);
    ne = LOAD(&od->next_expiry);
    while (until < ne &&
           !__atomic_compare_exchange_n(&od->next_expiry, &ne, until, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
}

/* Adds one to *c and ejects when that reaches the threshold (exactly one
 * reporter sees the threshold, whatever the races). */
static void count(struct outlier *od, size_t ep, uint32_t *c, uint32_t thr,
                  enum outlier_reason why, uint64_t now)
{
    if (thr == 0)
        return;
    if (__atomic_add_fetch(c, 1, __ATOMIC_ACQ_REL) == thr)
        eject(od, ep, why, now);
}

/* Success clears a counter; one that is zero already is only read, so
 * healthy traffic does not bounce the line between workers. */
static void clear(uint32_t *c)
{
    if (__atomic_load_n(c, __ATOMIC_RELAXED) != 0)
        STORE(c, 0);
}

void outlier_success(struct outlier *od, size_t ep)
{
    struct outlier_host *h;

    if (od == NULL || ep >= od->n)
        return;
    /* Also for an endpoint ejected meanwhile: its counts were reset when
     * it was ejected, so clearing them again changes nothing. */
    h = &od->h[ep];
    if (od->conf.split_local)
        clear(&h->clocal); /* an answer means the connection worked */
    clear(&h->c5xx);
    clear(&h->cgw);
}

void outlier_report(struct outlier *od, size_t ep, int result, uint64_t now)
{
    struct outlier_host *h;
    int status = result;

    if (od == NULL || ep >= od->n)
        return;
    if (result >= 0 && result < 500) {
        outlier_success(od, ep);
        return;
    }
    h = &od->h[ep];
    /* Answers from an ejected endpoint (requests already under way) do
     * not count; it starts afresh when it returns. */
    if (LOAD(&h->until) != 0 && outlier_ejected(od, ep, now))
        return;
    if (result < 0) {
        if (od->conf.split_local) {
            count(od, ep, &h->clocal, od->conf.consecutive_local, OUTLIER_LOCAL,
                  now);
            return;
        }
        status = result == OUTLIER_TIMEOUT ? 504 : 503;
    } else if (od->conf.split_local) {
        /* An answer means the connection worked. */
        clear(&h->clocal);
    }
    if (status == 502 || status == 503 || status == 504)
        count(od, ep, &h->cgw, od->conf.consecutive_gateway, OUTLIER_GATEWAY,
              now);
    else
        clear(&h->cgw);
    /* A gateway error may have ejected it just now. */
    if (LOAD(&h->until) == 0)
        count(od, ep, &h->c5xx, od->conf.consecutive_5xx, OUTLIER_5XX, now);
}

uint64_t outlier_active(struct outlier *od, uint64_t now)
{
    sweep(od, now);
    return LOAD(&od->active);
}

void outlier_state(struct outlier *od, size_t ep, uint64_t now,
                   struct outlier_host_state *out)
{
    memset(out, 0, sizeof(*out));
    if (od == NULL || ep >= od->n)
        return;
    out->ejected = outlier_ejected(od, ep, now);
    out->until = out->ejected ? LOAD(&od->h[ep].until) : 0;
    out->ejections = LOAD(&od->h[ep].ejections);
    out->backoff = LOAD(&od->h[ep].backoff);
}
