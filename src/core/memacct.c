#include "config.h"

#include "core/memacct.h"

int memacct_take(struct memacct *a, size_t n, int may_refuse)
{
    int64_t now, mark, step;

    if (a == NULL)
        return 0;
    if (may_refuse && __atomic_load_n(&a->refuse, __ATOMIC_RELAXED))
        return -1;
    now = __atomic_add_fetch(&a->used, (int64_t)n, __ATOMIC_RELAXED);
    step = __atomic_load_n(&a->step, __ATOMIC_RELAXED);
    mark = __atomic_load_n(&a->mark, __ATOMIC_RELAXED);
    if (step <= 0 || now < mark || a->check == NULL)
        return 0;
    /* One thread wins the mark and checks; the others go on. */
    if (!__atomic_compare_exchange_n(&a->mark, &mark, now + step, 0,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return 0;
    a->check(a->arg);
    /* The check may have started refusing: this take is refused too. */
    if (may_refuse && __atomic_load_n(&a->refuse, __ATOMIC_RELAXED)) {
        __atomic_sub_fetch(&a->used, (int64_t)n, __ATOMIC_RELAXED);
        return -1;
    }
    return 0;
}

void memacct_give(struct memacct *a, size_t n)
{
    int64_t now, mark, step;

    if (a == NULL)
        return;
    now = __atomic_sub_fetch(&a->used, (int64_t)n, __ATOMIC_RELAXED);
    step = __atomic_load_n(&a->step, __ATOMIC_RELAXED);
    mark = __atomic_load_n(&a->mark, __ATOMIC_RELAXED);
    /* The mark follows the total down, so that growing again is checked
     * one step above where it is, not above a high-water mark. */
    if (step > 0 && mark > now + 2 * step)
        __atomic_compare_exchange_n(&a->mark, &mark, now + step, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

void memacct_set_step(struct memacct *a, int64_t step)
{
    __atomic_store_n(&a->step, step, __ATOMIC_RELAXED);
    __atomic_store_n(&a->mark, memacct_used(a) + step, __ATOMIC_RELAXED);
}

void memacct_set_refuse(struct memacct *a, int on)
{
    __atomic_store_n(&a->refuse, on, __ATOMIC_RELAXED);
}
