#ifndef STRAIT_CORE_CLOCK_H
#define STRAIT_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* clock_ms() is a monotonic millisecond clock. The coarse clock is read
 * from the vDSO without a system call; its ~4 ms resolution is fine for
 * timeouts and durations in logs. */
static inline uint64_t clock_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* clock_us() is a monotonic microsecond clock (the precise one, a vDSO
 * read too): for measuring work much shorter than a millisecond. */
static inline uint64_t clock_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* clock_thread_cpu_us() is the CPU time the calling thread has used, in
 * microseconds (a system call, not a vDSO read): for budgets of work,
 * which must not charge code for the time it waited for a core on a busy
 * machine. */
static inline uint64_t clock_thread_cpu_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* clock_real_ms() is the real (wall) clock in milliseconds since the
 * epoch: for times that are compared with dates from outside the process,
 * such as a certificate's validity. */
static inline int64_t clock_real_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + (int64_t)ts.tv_nsec / 1000000;
}

#endif
