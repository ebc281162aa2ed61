#ifndef STRAIT_EVENT_TIMER_T_H
#define STRAIT_EVENT_TIMER_T_H

#include <event2/event_struct.h>
#include <stdint.h>

/* The timer type, for structs that embed one; the API is event/timer.h. */
typedef void (*timer_fn)(void *arg);

struct timer {
    struct event ev;
    timer_fn cb;
    void *arg;
    struct event_base *base;
    /* Kept by event/timer.c alone, beside what the loop knows (see
     * timer.c): whether ev is assigned, whether the timer is armed, and
     * when it is due against when the loop was asked to wake it. */
    unsigned assigned : 1;
    unsigned armed : 1;
    unsigned in_loop : 1;
    uint64_t due_ms, loop_due_ms;
};

#endif
