/*
 * Unit tests for src/event/timer.c: millisecond timers on a real
 * event_base, driven with EVLOOP_ONCE. Only ordering is asserted (which
 * timer fired, in what order, how often), never how long anything took.
 */
#include "config.h"

#include <event2/event.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "event/timer.h"

struct rec {
    int order[16];
    int n;
};

struct tt {
    struct timer t;
    struct rec *rec;
    int id;
    int fired;
    int armed_in_cb; /* timer_armed() as seen inside the callback */
    int rearm_left;  /* re-arm itself this many more times */
};

static void on_fire(void *arg)
{
    struct tt *x = arg;

    x->fired++;
    x->armed_in_cb = timer_armed(&x->t);
    if (x->rec->n < 16)
        x->rec->order[x->rec->n++] = x->id;
    if (x->rearm_left > 0) {
        x->rearm_left--;
        timer_arm(&x->t, 1);
    }
}

static void tt_init(struct tt *x, struct event_base *base, struct rec *r,
                    int id)
{
    memset(x, 0, sizeof(*x));
    x->rec = r;
    x->id = id;
    timer_init(&x->t, base, on_fire, x);
}

/* Runs the loop one turn at a time until n callbacks were recorded. A loop
 * with nothing left to wait for fails the test instead of hanging. */
static void run_until(struct event_base *base, struct rec *r, int n)
{
    while (r->n < n)
        assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
}

static int setup(void **state)
{
    struct event_base *base = event_base_new();

    if (base == NULL)
        return -1;
    *state = base;
    return 0;
}

static int teardown(void **state)
{
    event_base_free(*state);
    return 0;
}

static void test_ms_to_timeval(void **state)
{
    struct timeval tv;

    (void)state;
    tv = ms_to_timeval(0);
    assert_int_equal(tv.tv_sec, 0);
    assert_int_equal(tv.tv_usec, 0);
    tv = ms_to_timeval(999);
    assert_int_equal(tv.tv_sec, 0);
    assert_int_equal(tv.tv_usec, 999000);
    tv = ms_to_timeval(1500);
    assert_int_equal(tv.tv_sec, 1);
    assert_int_equal(tv.tv_usec, 500000);
    tv = ms_to_timeval(UINT64_C(86400000) + 7);
    assert_int_equal(tv.tv_sec, 86400);
    assert_int_equal(tv.tv_usec, 7000);
}

/* Timers armed in one order fire in the order of their delays. Were the
 * milliseconds lost (rounded to whole seconds), all three would be due at
 * once and fire in the order they were armed. */
static void test_fires_in_ms_order(void **state)
{
    struct event_base *base = *state;
    struct rec r = {{0}, 0};
    struct tt a, b, c;

    tt_init(&a, base, &r, 'a');
    tt_init(&b, base, &r, 'b');
    tt_init(&c, base, &r, 'c');
    timer_arm(&a.t, 30);
    timer_arm(&b.t, 10);
    timer_arm(&c.t, 20);
    run_until(base, &r, 3);
    assert_int_equal(r.order[0], 'b');
    assert_int_equal(r.order[1], 'c');
    assert_int_equal(r.order[2], 'a');
    assert_int_equal(a.fired + b.fired + c.fired, 3);
}

/* A callback never runs inside timer_arm(), even with no delay. */
static void test_arm_zero_runs_later(void **state)
{
    struct event_base *base = *state;
    struct rec r = {{0}, 0};
    struct tt a;

    tt_init(&a, base, &r, 'a');
    timer_arm(&a.t, 0);
    assert_int_equal(a.fired, 0);
    assert_int_equal(timer_armed(&a.t), 1);
    run_until(base, &r, 1);
    assert_int_equal(a.fired, 1);
}

/* Re-arming moves the timer rather than adding a second firing. */
static void test_rearm_moves(void **state)
{
    struct event_base *base = *state;
    struct rec r = {{0}, 0};
    struct tt a, b, c;

    tt_init(&a, base, &r, 'a');
    tt_init(&b, base, &r, 'b');
    tt_init(&c, base, &r, 'c');
    timer_arm(&a.t, 5);
    timer_arm(&b.t, 15);
    timer_arm(&a.t, 25); /* later than b now */
    timer_arm(&c.t, 40); /* a marker after both */
    run_until(base, &r, 3);
    assert_int_equal(r.order[0], 'b');
    assert_int_equal(r.order[1], 'a');
    assert_int_equal(r.order[2], 'c');
    assert_int_equal(a.fired, 1);
}

/* A cancelled timer never fires, even after later timers have. */
static void test_cancel(void **state)
{
    struct event_base *base = *state;
    struct rec r = {{0}, 0};
    struct tt a, b, c;

    tt_init(&a, base, &r, 'a');
    tt_init(&b, base, &r, 'b');
    tt_init(&c, base, &r, 'c');
    timer_arm(&a.t, 5);
    timer_arm(&b.t, 15);
    timer_arm(&c.t, 30);
    timer_cancel(&a.t);
    assert_int_equal(timer_armed(&a.t), 0);
    timer_cancel(&a.t); /* twice is harmless */
    run_until(base, &r, 2);
    assert_int_equal(r.order[0], 'b');
    assert_int_equal(r.order[1], 'c');
    assert_int_equal(a.fired, 0);
    /* Nothing is left on the loop: a's event is really gone. */
    assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 1);
    assert_int_equal(a.fired, 0);
}

/* A paused timer does not fire, though its event may still be in the
 * loop; armed again later, it fires once, at the new time. */
static void test_pause_then_arm_later(void **state)
{
    struct event_base *base = *state;
    struct rec r = {{0}, 0};
    struct tt a, b, c;

    tt_init(&a, base, &r, 'a');
    tt_init(&b, base, &r, 'b');
    tt_init(&c, base, &r, 'c');
    timer_arm(&a.t, 5);
    timer_pause(&a.t);
    assert_int_equal(timer_armed(&a.t), 0);
    timer_arm(&b.t, 15);
    run_until(base, &r, 1);
    assert_int_equal(r.order[0], 'b');
    assert_int_equal(a.fired, 0);
    timer_arm(&a.t, 5);
    timer_pause(&a.t);
    timer_arm(&a.t, 25); /* later than where the loop has it */
    assert_int_equal(timer_armed(&a.t), 1);
    timer_arm(&b.t, 10);
    timer_arm(&c.t, 45);
    run_until(base, &r, 4);
    assert_int_equal(r.order[1], 'b');
    assert_int_equal(r.order[2], 'a');
    assert_int_equal(r.order[3], 'c');
    assert_int_equal(a.fired, 1);
    assert_int_equal(a.armed_in_cb, 0);
}

/* Armed after a pause to fire earlier than the loop has it: the loop is
 * asked again, so it fires at the earlier time. */
static void test_pause_then_arm_earlier(void **state)
{
    struct event_base *base = *state;
    struct rec r = {{0}, 0};
    struct tt a, b;

    tt_init(&a, base, &r, 'a');
    tt_init(&b, base, &r, 'b');
    timer_arm(&a.t, 60000);
    timer_pause(&a.t);
    timer_arm(&a.t, 5);
    timer_arm(&b.t, 20);
    run_until(base, &r, 2);
    assert_int_equal(r.order[0], 'a');
    assert_int_equal(r.order[1], 'b');
    assert_int_equal(a.fired, 1);
}

/* timer_cancel() after a pause or a move takes the event out of the
 * loop, so the owner may free the timer: the loop is then empty. */
static void test_cancel_after_pause_or_move_empties_loop(void **state)
{
    struct event_base *base = *state;
    struct rec r = {{0}, 0};
    struct tt a, b;

    tt_init(&a, base, &r, 'a');
    tt_init(&b, base, &r, 'b');
    timer_arm(&a.t, 60000);
    timer_pause(&a.t);
    timer_cancel(&a.t);
    timer_arm(&b.t, 60000);
    timer_arm(&b.t, 120000); /* moved later: only recorded */
    timer_dispose(&b.t);
    assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 1);
    assert_int_equal(a.fired + b.fired, 0);
}

/* timer_armed() follows the loop: armed until it fires or is cancelled,
 * not armed inside its own callback. */
static void test_armed_state(void **state)
{
    struct event_base *base = *state;
    struct rec r = {{0}, 0};
    struct tt a;

    tt_init(&a, base, &r, 'a');
    assert_int_equal(timer_armed(&a.t), 0);
    timer_arm(&a.t, 1);
    assert_int_equal(timer_armed(&a.t), 1);
    timer_cancel(&a.t);
    assert_int_equal(timer_armed(&a.t), 0);
    timer_arm(&a.t, 1);
    run_until(base, &r, 1);
    assert_int_equal(a.armed_in_cb, 0);
    assert_int_equal(timer_armed(&a.t), 0);
    timer_arm(&a.t, 1);
    timer_dispose(&a.t);
    assert_int_equal(timer_armed(&a.t), 0);
    assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 1);
    assert_int_equal(a.fired, 1);
}

/* A callback may arm its own timer again. */
static void test_rearm_from_callback(void **state)
{
    struct event_base *base = *state;
    struct rec r = {{0}, 0};
    struct tt a;

    tt_init(&a, base, &r, 'a');
    a.rearm_left = 2;
    timer_arm(&a.t, 1);
    run_until(base, &r, 3);
    assert_int_equal(a.fired, 3);
    assert_int_equal(timer_armed(&a.t), 0);
}

/* timer_defer(): one call on the loop, after the call that deferred it,
 * however often it was deferred; cancel takes it back. */
static void test_defer(void **state)
{
    struct event_base *base = *state;
    struct rec r = {{0}, 0};
    struct tt a, b, c;

    tt_init(&a, base, &r, 'a');
    tt_init(&b, base, &r, 'b');
    tt_init(&c, base, &r, 'c');
    timer_arm(&c.t, 50); /* due long after the deferred ones */
    timer_defer(&a.t);
    timer_defer(&a.t);
    timer_defer(&b.t);
    assert_int_equal(a.fired, 0);
    assert_int_equal(timer_armed(&a.t), 1);
    timer_cancel(&b.t);
    assert_int_equal(timer_armed(&b.t), 0);
    run_until(base, &r, 1);
    assert_int_equal(r.order[0], 'a');
    assert_int_equal(timer_armed(&a.t), 0);
    /* An armed timer deferred runs now, once, not again at its delay. */
    timer_defer(&c.t);
    run_until(base, &r, 2);
    assert_int_equal(r.order[1], 'c');
    assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 1);
    assert_int_equal(a.fired, 1);
    assert_int_equal(b.fired, 0);
    assert_int_equal(c.fired, 1);
}

/* A zeroed timer that was never initialised can be asked, cancelled and
 * disposed: an owner's cleanup path needs no flag. */
static void test_zeroed_timer(void **state)
{
    struct timer t;

    (void)state;
    memset(&t, 0, sizeof(t));
    assert_int_equal(timer_armed(&t), 0);
    timer_cancel(&t);
    timer_dispose(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ms_to_timeval),
        cmocka_unit_test_setup_teardown(test_fires_in_ms_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_arm_zero_runs_later, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rearm_moves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_then_arm_later, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pause_then_arm_earlier, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_cancel_after_pause_or_move_empties_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_armed_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rearm_from_callback, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_defer, setup, teardown),
        cmocka_unit_test(test_zeroed_timer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
