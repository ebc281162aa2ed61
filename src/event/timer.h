#ifndef STRAIT_EVENT_TIMER_H
#define STRAIT_EVENT_TIMER_H

#include <stdint.h>
#include <sys/time.h>

#include "event/timer-t.h"

/*
 * A one-shot timer on one thread's event loop, in milliseconds (nginx's
 * ngx_add_timer, H2O's h2o_timer_link). It is embedded in its owner, so
 * arming never allocates and cannot fail. Whether it is armed is asked of
 * the loop (timer_armed), never kept in a flag beside it.
 *
 * A timer is touched only by the thread that runs its loop.
 */

/* ms_to_timeval() converts a duration in milliseconds, for the few
 * libevent calls that still take a struct timeval. */
struct timeval ms_to_timeval(uint64_t ms);

/* timer_init() prepares t (not armed) to call cb(arg) on base's loop.
 * A zeroed timer that was never initialised may still be cancelled and
 * disposed (both do nothing), so an owner's cleanup needs no flag. */
void timer_init(struct timer *t, struct event_base *base, timer_fn cb,
                void *arg);

/* timer_arm() makes t fire once, ms milliseconds from the loop's current
 * time; arming an armed timer moves it. cb runs on a later turn of the
 * loop, never inside timer_arm(); t is disarmed when cb runs, so cb may
 * arm it again. */
void timer_arm(struct timer *t, uint64_t ms);

/* timer_defer() runs t's callback once on the loop's current pass, after
 * the callbacks already due and never inside this call (libevent's
 * event_active): how a module puts work off to the next turn without an
 * event of its own. Deferring again before it ran makes one call; an
 * armed timer runs now instead of at its delay. timer_armed() is 1 and
 * timer_cancel() takes it back until it runs. */
void timer_defer(struct timer *t);

/* timer_cancel() disarms t; its callback will not run. No-op when t is
 * not armed. */
void timer_cancel(struct timer *t);

/* timer_pause() disarms t as timer_cancel() does, but may leave its
 * event in the loop until it would have fired (then nothing runs), so
 * that arming it again later costs nothing (see timer.c). Only for a
 * timer that is armed again soon, on a loop that does not end when it
 * is empty, whose owner calls timer_cancel() or timer_dispose() before
 * it frees or initialises the timer again. */
void timer_pause(struct timer *t);

/* timer_armed() is 1 while t is armed and has not fired, else 0. */
int timer_armed(const struct timer *t);

/* timer_dispose() cancels t; the owner may then free its memory. A
 * disposed timer is as one never initialised (disposing again is a
 * no-op); timer_init() makes it usable again. */
void timer_dispose(struct timer *t);

#endif
