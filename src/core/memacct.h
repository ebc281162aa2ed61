#ifndef STRAIT_CORE_MEMACCT_H
#define STRAIT_CORE_MEMACCT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Accounting of the bytes strait buffers, shared by every thread (atomic
 * counters, no lock), so that memory is checked as it grows and not only
 * on a timer.
 *
 * Buffer pools report each buffer they hand out (memacct_take) and take
 * back (memacct_give). Each time the total grows past a mark, one step
 * above the total at the last check, the check callback runs on the
 * thread that grew it: a burst that fills buffers faster than a timer
 * ticks is measured every step of the way. While refuse is set (the
 * memory actions' last stage), a take that may be refused is: the caller
 * fails the work that wanted the buffer instead of growing.
 *
 * check and arg are set before the workers start and never change; step
 * and refuse are written by any thread (atomics).
 */
struct memacct {
    int64_t used; /* bytes held in accounted buffers now */
    int64_t step; /* growth between checks; 0: no checks */
    int64_t mark; /* used at which the next check runs */
    int refuse;   /* refusable takes fail */
    void (*check)(void *arg);
    void *arg;
};

/*
 * memacct_take() accounts n bytes about to be held. may_refuse: the caller
 * can do without them (and fails its work then). Returns 0, or -1 when
 * refused (nothing is accounted then). a NULL: 0.
 */
int memacct_take(struct memacct *a, size_t n, int may_refuse);

/* memacct_give() returns n bytes memacct_take() accounted; a NULL: no-op. */
void memacct_give(struct memacct *a, size_t n);

/* memacct_set_step() sets the growth between checks (0: none). */
void memacct_set_step(struct memacct *a, int64_t step);

/* memacct_set_refuse() turns refusal of refusable takes on or off. */
void memacct_set_refuse(struct memacct *a, int on);

/* memacct_refusing() is true while refusable takes fail; a NULL: false. */
static inline int memacct_refusing(const struct memacct *a)
{
    return a != NULL && __atomic_load_n(&a->refuse, __ATOMIC_RELAXED);
}

static inline int64_t memacct_used(const struct memacct *a)
{
    return __atomic_load_n(&a->used, __ATOMIC_RELAXED);
}

#endif
