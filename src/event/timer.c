#include "config.h"

#include <event2/event.h>
#include <string.h>

#include "event/timer.h"

struct timeval ms_to_timeval(uint64_t ms)
{
    struct timeval tv;

    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    return tv;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct timer *t = arg;

    (void)fd;
    (void)what;
    t->cb(t->arg);
}

void timer_init(struct timer *t, struct event_base *base, timer_fn cb,
                void *arg)
{
    memset(t, 0, sizeof(*t));
    t->cb = cb;
    t->arg = arg;
    event_assign(&t->ev, base, -1, 0, on_timer, t);
}

void timer_arm(struct timer *t, uint64_t ms)
{
    struct timeval tv = ms_to_timeval(ms);

    /* event_add() on a pending timer reschedules it. */
    event_add(&t->ev, &tv);
}

void timer_defer(struct timer *t)
{
    event_active(&t->ev, EV_TIMEOUT, 0);
}

void timer_cancel(struct timer *t)
{
    /* A timer that was never initialised has no base to delete from. */
    if (t->cb == NULL)
        return;
    event_del(&t->ev);
}

int timer_armed(const struct timer *t)
{
    if (t->cb == NULL)
        return 0;
    return event_pending(&t->ev, EV_TIMEOUT, NULL) != 0;
}

void timer_dispose(struct timer *t)
{
    timer_cancel(t);
    /* Disposed is as never initialised: a second dispose does nothing. */
    t->cb = NULL;
}
