/*
 * Unit tests for src/net/overload.c: connection slots under a listener's
 * and the process's limits, the memory actions' thresholds in order,
 * their hysteresis, and a slot given back by conn_close().
 */
#include "config.h"

#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "net/conn.h"
#include "net/overload.h"

#define MIB (UINT64_C(1) << 20)

static void listener_limit(void **state)
{
    struct cx_limit *root = cx_limit_new(NULL);
    struct cx_limit *l = cx_limit_new(root);

    (void)state;
    assert_non_null(root);
    assert_non_null(l);
    cx_limit_set(l, 2, CX_CLOSE);
    assert_int_equal(cx_take(l), CX_OK);
    assert_int_equal(cx_take(l), CX_OK);
    assert_int_equal(cx_full(l), CX_OVER_LISTENER);
    /* One over: refused, and nothing is taken. */
    assert_int_equal(cx_take(l), CX_OVER_LISTENER);
    assert_int_equal(cx_active(l), 2);
    assert_int_equal(cx_active(root), 2);
    cx_release(l);
    assert_int_equal(cx_full(l), CX_OK);
    assert_int_equal(cx_take(l), CX_OK);
    assert_int_equal(cx_active(root), 2);
    cx_release(l);
    cx_release(l);
    assert_int_equal(cx_active(l), 0);
    assert_int_equal(cx_active(root), 0);
    cx_limit_unref(l);
    cx_limit_unref(root);
}

static void global_limit_spans_listeners(void **state)
{
    struct cx_limit *root = cx_limit_new(NULL);
    struct cx_limit *a = cx_limit_new(root);
    struct cx_limit *b = cx_limit_new(root);

    (void)state;
    cx_limit_set(root, 2, CX_PAUSE);
    assert_int_equal(cx_take(a), CX_OK);
    assert_int_equal(cx_take(b), CX_OK);
    assert_int_equal(cx_take(b), CX_OVER_GLOBAL);
    /* The listener's slot taken before the global check went back. */
    assert_int_equal(cx_active(b), 1);
    assert_int_equal(cx_full(a), CX_OVER_GLOBAL);
    cx_release(a);
    assert_int_equal(cx_take(b), CX_OK);
    assert_int_equal(cx_active(b), 2);
    /* 0: no limit. */
    cx_limit_set(root, 0, CX_PAUSE);
    assert_int_equal(cx_take(a), CX_OK);
    cx_release(a);
    cx_release(b);
    cx_release(b);
    assert_int_equal(cx_active(root), 0);
    /* The root lives while a listener's counter does. */
    cx_limit_unref(root);
    cx_limit_unref(a);
    cx_limit_unref(b);
}

static void memory_refuses_connections(void **state)
{
    struct cx_limit *root = cx_limit_new(NULL);
    struct cx_limit *l = cx_limit_new(root);

    (void)state;
    cx_set_overload(root, OVERLOAD_BIT(OVERLOAD_DISABLE_KEEPALIVE));
    assert_int_equal(cx_take(l), CX_OK);
    cx_set_overload(root, OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_CONNECTIONS) |
                              OVERLOAD_BIT(OVERLOAD_DISABLE_KEEPALIVE));
    assert_int_equal(cx_overload(l) &
                         OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_CONNECTIONS),
                     OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_CONNECTIONS));
    assert_int_equal(cx_take(l), CX_OVER_MEMORY);
    assert_int_equal(cx_full(l), CX_OVER_MEMORY);
    assert_int_equal(cx_active(root), 1);
    cx_set_overload(root, 0);
    assert_int_equal(cx_full(l), CX_OK);
    cx_release(l);
    cx_limit_unref(l);
    cx_limit_unref(root);
}

static const struct overload_conf conf = {100 * MIB, {90, 95, 98}, 5};

#define ACC OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_CONNECTIONS)
#define KA OVERLOAD_BIT(OVERLOAD_DISABLE_KEEPALIVE)
#define RQ OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_REQUESTS)

static void thresholds_in_order(void **state)
{
    (void)state;
    assert_int_equal(overload_eval(&conf, 0, 0), 0);
    assert_int_equal(overload_eval(&conf, 90 * MIB - 1, 0), 0);
    assert_int_equal(overload_eval(&conf, 90 * MIB, 0), ACC);
    assert_int_equal(overload_eval(&conf, 95 * MIB, 0), ACC | KA);
    assert_int_equal(overload_eval(&conf, 98 * MIB, 0), ACC | KA | RQ);
    assert_int_equal(overload_eval(&conf, 400 * MIB, 0), ACC | KA | RQ);
    /* No limit: nothing, however much is used. */
    {
        struct overload_conf none = conf;
        none.limit = 0;
        assert_int_equal(overload_eval(&none, UINT64_MAX / 2, ACC), 0);
    }
}

static void hysteresis_holds_then_recovers(void **state)
{
    unsigned a = ACC | KA | RQ;

    (void)state;
    /* Falling below a threshold is not enough ... */
    a = overload_eval(&conf, 97 * MIB, a);
    assert_int_equal(a, ACC | KA | RQ);
    a = overload_eval(&conf, 93 * MIB, a);
    assert_int_equal(a, ACC | KA | RQ);
    /* ... the margin below it is: 98 - 5 = 93 %. */
    a = overload_eval(&conf, 93 * MIB - 1, a);
    assert_int_equal(a, ACC | KA);
    /* An action that ended does not come back below its threshold. */
    a = overload_eval(&conf, 97 * MIB, a);
    assert_int_equal(a, ACC | KA);
    a = overload_eval(&conf, 90 * MIB, a);
    assert_int_equal(a, ACC | KA);
    a = overload_eval(&conf, 90 * MIB - 1, a);
    assert_int_equal(a, ACC);
    a = overload_eval(&conf, 85 * MIB, a);
    assert_int_equal(a, ACC);
    a = overload_eval(&conf, 85 * MIB - 1, a);
    assert_int_equal(a, 0);
    /* Without hysteresis an action ends right below its threshold. */
    {
        struct overload_conf h0 = conf;
        h0.hysteresis = 0;
        assert_int_equal(overload_eval(&h0, 90 * MIB - 1, ACC), 0);
    }
}

static void large_limits_do_not_overflow(void **state)
{
    struct overload_conf big = {UINT64_C(1) << 50, {90, 95, 98}, 5};

    (void)state;
    assert_int_equal(overload_eval(&big, (UINT64_C(1) << 50) / 100 * 99, 0),
                     ACC | KA | RQ);
    assert_int_equal(overload_eval(&big, (UINT64_C(1) << 50) / 2, 0), 0);
}

static void names_and_rss(void **state)
{
    (void)state;
    assert_string_equal(overload_action_name(OVERLOAD_STOP_ACCEPTING_REQUESTS),
                        "stop_accepting_requests");
    assert_string_equal(overload_action_name(OVERLOAD_DISABLE_KEEPALIVE),
                        "disable_http_keepalive");
    /* A running process has some resident memory. */
    assert_true(overload_rss_bytes() > 0);
}

/* conn_close() gives the slot back; conn_move() carries it. */
static void conn_close_releases(void **state)
{
    struct event_base *base = event_base_new();
    struct cx_limit *root = cx_limit_new(NULL);
    struct cx_limit *l = cx_limit_new(root);
    struct conn a, b;
    int sv[2];

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(cx_take(l), CX_OK);
    conn_init(&a, base, sv[0], NULL, NULL);
    a.cx = l;
    conn_move(&b, &a, base, NULL, NULL);
    assert_null(a.cx);
    conn_close(&a); /* owns nothing now */
    assert_int_equal(cx_active(l), 1);
    conn_close(&b);
    assert_int_equal(cx_active(l), 0);
    assert_int_equal(cx_active(root), 0);
    conn_close(&b); /* idempotent */
    assert_int_equal(cx_active(root), 0);
    close(sv[1]);
    cx_limit_unref(l);
    cx_limit_unref(root);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(listener_limit),
        cmocka_unit_test(global_limit_spans_listeners),
        cmocka_unit_test(memory_refuses_connections),
        cmocka_unit_test(thresholds_in_order),
        cmocka_unit_test(hysteresis_holds_then_recovers),
        cmocka_unit_test(large_limits_do_not_overflow),
        cmocka_unit_test(names_and_rss),
        cmocka_unit_test(conn_close_releases),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
