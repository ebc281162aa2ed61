#include "config.h"

#include <event2/event.h>
#include <string.h>

#include "core/clock.h"
#include "event/timer.h"

/*
 * The data path arms, moves and cancels several timers per request (the
 * header and idle timeouts of both connections, a stream's timeouts) and
 * almost none of them fire. Each libevent call costs a lock and a heap
 * operation, so this module keeps what it needs to skip most of them:
 *
 * - an event is assigned on first use, not at timer_init();
 * - the timer knows whether it is armed, so cancelling an idle timer is
 *   a flag test (every transition goes through this file or on_timer);
 * - moving an armed timer later only records the new due time; when the
 *   loop wakes it at the old one, on_timer() asks the loop again for the
 *   rest (one wake-up per move, instead of a heap delete and insert on
 *   every request that keeps a connection busy);
 * - timer_pause() leaves the event in the loop and only clears the flag:
 *   a request pauses its connection's idle timeout and arms it again
 *   moments later, and that arm then costs nothing either. A paused
 *   timer the loop wakes does nothing. timer_cancel() and
 *   timer_dispose() always take the event out of the loop, so a
 *   cancelled timer may be initialised again and a disposed one freed.
 */

struct timeval ms_to_timeval(uint64_t ms)
{
    struct timeval tv;

    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    return tv;
}

static void loop_add(struct timer *t, uint64_t ms)
{
    struct timeval tv = ms_to_timeval(ms);

    /* event_add() on a pending timer reschedules it. */
    event_add(&t->ev, &tv);
    t->in_loop = 1;
    t->loop_due_ms = t->due_ms;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct timer *t = arg;

    (void)fd;
    (void)what;
    t->in_loop = 0;
    if (!t->armed)
        return;
    if (t->due_ms > t->loop_due_ms) {
        /* Moved later since the loop was asked: wait for the rest. */
        uint64_t now = clock_ms();

        if (t->due_ms > now) {
            loop_add(t, t->due_ms - now);
            return;
        }
    }
    t->armed = 0;
    t->cb(t->arg);
}

static void assign(struct timer *t)
{
    if (!t->assigned) {
        event_assign(&t->ev, t->base, -1, 0, on_timer, t);
        t->assigned = 1;
    }
}

void timer_init(struct timer *t, struct event_base *base, timer_fn cb,
                void *arg)
{
    t->cb = cb;
    t->arg = arg;
    t->base = base;
    t->assigned = 0;
    t->armed = 0;
    t->in_loop = 0;
    t->due_ms = t->loop_due_ms = 0;
}

void timer_arm(struct timer *t, uint64_t ms)
{
    uint64_t due = clock_ms() + ms;

    assign(t);
    if (t->in_loop && due >= t->loop_due_ms && t->loop_due_ms != 0) {
        t->armed = 1;
        t->due_ms = due;
        return;
    }
    t->armed = 1;
    t->due_ms = due;
    loop_add(t, ms);
}

void timer_defer(struct timer *t)
{
    assign(t);
    t->armed = 1;
    /* Runs now, whatever due time it had. */
    t->due_ms = t->loop_due_ms = 0;
    event_active(&t->ev, EV_TIMEOUT, 0);
    t->in_loop = 1;
}

static void cancel_now(struct timer *t)
{
    /* A timer never initialised or never used has nothing in a loop. */
    if (t->cb != NULL && t->in_loop)
        event_del(&t->ev);
    t->in_loop = 0;
    t->armed = 0;
}

void timer_cancel(struct timer *t)
{
    cancel_now(t);
}

void timer_pause(struct timer *t)
{
    /* A deferred run (due 0) is taken back at once: it is due now. */
    if (t->loop_due_ms == 0) {
        cancel_now(t);
        return;
    }
    t->armed = 0;
}

int timer_armed(const struct timer *t)
{
    return t->cb != NULL && t->armed;
}

void timer_dispose(struct timer *t)
{
    cancel_now(t);
    /* Disposed is as never initialised: a second dispose does nothing. */
    t->cb = NULL;
}
