#ifndef STRAIT_EVENT_TIMER_T_H
#define STRAIT_EVENT_TIMER_T_H

#include <event2/event_struct.h>

/* The timer type, for structs that embed one; the API is event/timer.h. */
typedef void (*timer_fn)(void *arg);

struct timer {
    struct event ev;
    timer_fn cb;
    void *arg;
};

#endif
