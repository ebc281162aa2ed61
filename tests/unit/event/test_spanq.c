/*
 * Unit tests for src/event/spanq.c: spans handed over per loop turn,
 * taken in batches, dropped and counted past the queue's bound.
 */
#include "config.h"

#include <event2/event.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "event/spanq.h"

static void test_batches(void **state)
{
    struct event_base *base = event_base_new();
    struct spanq *q = spanq_new(100);
    struct spanq_buf b;
    struct spanq_stats st;
    struct buf out;

    (void)state;
    buf_init(&out, 1 << 20);
    spanq_buf_init(&b, q, base);
    spanq_buf_span(&b, "{\"a\":1}", 7);
    spanq_buf_span(&b, "{\"b\":2}", 7);
    /* Still the worker's until its turn ends. */
    assert_int_equal(spanq_take(q, 10, &out), 0);
    event_base_loop(base, EVLOOP_NONBLOCK);
    spanq_buf_span(&b, "{\"c\":3}", 7);
    event_base_loop(base, EVLOOP_NONBLOCK);
    spanq_stats(q, &st);
    assert_int_equal(st.pending, 3);
    assert_int_equal(st.queued, 3);
    /* A batch of 2 takes the first hand-over (2 spans) only. */
    assert_int_equal(spanq_take(q, 2, &out), 2);
    assert_string_equal(buf_cstr(&out), "{\"a\":1},{\"b\":2}");
    buf_truncate(&out, 0);
    assert_int_equal(spanq_take(q, 2, &out), 1);
    assert_string_equal(buf_cstr(&out), "{\"c\":3}");
    /* A first hand-over bigger than the batch is taken whole. */
    buf_truncate(&out, 0);
    for (int i = 0; i < 5; i++)
        spanq_buf_span(&b, "{}", 2);
    event_base_loop(base, EVLOOP_NONBLOCK);
    assert_int_equal(spanq_take(q, 2, &out), 5);
    spanq_buf_dispose(&b);
    buf_dispose(&out);
    spanq_free(q);
    event_base_free(base);
}

static void test_bound(void **state)
{
    struct event_base *base = event_base_new();
    struct spanq *q = spanq_new(4);
    struct spanq_buf b;
    struct spanq_stats st;

    (void)state;
    spanq_buf_init(&b, q, base);
    for (int turn = 0; turn < 3; turn++) {
        spanq_buf_span(&b, "{}", 2);
        spanq_buf_span(&b, "{}", 2);
        event_base_loop(base, EVLOOP_NONBLOCK);
    }
    spanq_stats(q, &st);
    /* Two turns fit (4 spans); the third goes one over: dropped. */
    assert_int_equal(st.pending, 4);
    assert_int_equal(st.dropped, 2);
    spanq_drop(q, 3);
    spanq_stats(q, &st);
    assert_int_equal(st.dropped, 5);
    /* A span larger than a chunk is dropped, counted. */
    {
        static char big[SPANQ_CHUNK + 1];
        memset(big, ' ', sizeof(big));
        spanq_buf_span(&b, big, sizeof(big));
        spanq_stats(q, &st);
        assert_int_equal(st.dropped, 6);
    }
    spanq_buf_dispose(&b);
    spanq_free(q);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
