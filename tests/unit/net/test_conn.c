/*
 * Unit tests for src/net/conn.c over a socketpair: a short read marks the
 * socket empty until its read event fires (no recv() that could only say
 * EAGAIN), one event follows the codec's interest, and conn_wake() runs
 * the callback once on the next turn.
 */
#include "config.h"

#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "net/conn.h"

struct fx {
    struct event_base *base;
    struct conn c;
    int peer;
    int calls;
};

static void on_io(struct conn *c, void *arg)
{
    struct fx *f = arg;

    (void)c;
    f->calls++;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    int sv[2];

    assert_non_null(f);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv),
                     0);
    f->base = event_base_new();
    assert_non_null(f->base);
    conn_init(&f->c, f->base, sv[0], on_io, f);
    f->peer = sv[1];
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    conn_close(&f->c);
    close(f->peer);
    event_base_free(f->base);
    free(f);
    return 0;
}

/* One turn of the loop that does not wait: the callbacks of what is
 * ready now (NONBLOCK alone would spin on a level-triggered event that is
 * not drained). */
static void turn(struct fx *f)
{
    event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

static void test_short_read_waits_for_the_event(void **state)
{
    struct fx *f = *state;
    char b[64];

    assert_int_equal(write(f->peer, "hello", 5), 5);
    assert_int_equal(conn_read(&f->c, b, sizeof(b)), 5);
    assert_false(f->c.readable);
    /* Bytes that came after the short read are not read before the
     * event says so: the read answers at once, without the socket. */
    assert_int_equal(write(f->peer, "world", 5), 5);
    assert_int_equal(conn_read(&f->c, b, sizeof(b)), CONN_AGAIN);
    conn_want(&f->c, 1, 0);
    turn(f);
    assert_int_equal(f->calls, 1);
    assert_true(f->c.readable);
    assert_int_equal(conn_read(&f->c, b, sizeof(b)), 5);
    assert_memory_equal(b, "world", 5);
}

static void test_full_read_keeps_reading(void **state)
{
    struct fx *f = *state;
    char b[4];

    assert_int_equal(write(f->peer, "abcdefgh", 8), 8);
    /* A read that filled its buffer may have left bytes behind. */
    assert_int_equal(conn_read(&f->c, b, sizeof(b)), 4);
    assert_true(f->c.readable);
    assert_int_equal(conn_read(&f->c, b, sizeof(b)), 4);
    assert_memory_equal(b, "efgh", 4);
    /* Empty now: the next read finds out with one EAGAIN, then stops
     * asking the socket. */
    assert_int_equal(conn_read(&f->c, b, sizeof(b)), CONN_AGAIN);
    assert_false(f->c.readable);
}

static void test_end_of_stream_stays_readable(void **state)
{
    struct fx *f = *state;
    char b[8];

    shutdown(f->peer, SHUT_WR);
    assert_int_equal(conn_read(&f->c, b, sizeof(b)), 0);
    assert_int_equal(conn_read(&f->c, b, sizeof(b)), 0);
}

static void test_wake_calls_once_on_next_turn(void **state)
{
    struct fx *f = *state;

    conn_wake(&f->c);
    conn_wake(&f->c);
    assert_int_equal(f->calls, 0);
    turn(f);
    assert_int_equal(f->calls, 1);
    turn(f);
    assert_int_equal(f->calls, 1);
}

/* A change of interest re-registers the one event; a wake queued before
 * it must still arrive. */
static void test_wake_survives_interest_change(void **state)
{
    struct fx *f = *state;

    conn_wake(&f->c);
    conn_want(&f->c, 1, 1);
    conn_want(&f->c, 1, 0);
    turn(f);
    assert_int_equal(f->calls, 1);
}

static void test_write_interest_fires(void **state)
{
    struct fx *f = *state;

    conn_want(&f->c, 0, 1);
    turn(f);
    assert_int_equal(f->calls, 1);
    /* Interest off: nothing fires though the socket stays writable. */
    conn_want(&f->c, 0, 0);
    turn(f);
    assert_int_equal(f->calls, 1);
}

static void test_close_cancels_wake(void **state)
{
    struct fx *f = *state;

    conn_wake(&f->c);
    conn_close(&f->c);
    turn(f);
    assert_int_equal(f->calls, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_short_read_waits_for_the_event,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_read_keeps_reading, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_end_of_stream_stays_readable,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_wake_calls_once_on_next_turn,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_wake_survives_interest_change,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_interest_fires, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_close_cancels_wake, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
