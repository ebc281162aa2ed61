/* The outlier detector on its own, with the clock in the test's hands:
 * time is a number passed in, nothing sleeps. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "upstream/outlier.h"

#define BASE 30000
#define INTERVAL 10000

static struct outlier *detector(size_t n, uint32_t c5xx, uint32_t cgw,
                                uint32_t max_pct, uint32_t min_health)
{
    struct outlier_conf c;
    struct outlier *od;

    memset(&c, 0, sizeof(c));
    c.consecutive_5xx = c5xx;
    c.consecutive_gateway = cgw;
    c.consecutive_local = 5;
    c.interval_ms = INTERVAL;
    c.base_ejection_ms = BASE;
    c.max_ejection_ms = OUTLIER_MAX_EJECTION_MS;
    c.max_ejection_pct = max_pct;
    c.min_health_pct = min_health;
    od = outlier_new(&c, n);
    assert_non_null(od);
    return od;
}

static void report_n(struct outlier *od, size_t ep, int result, int n,
                     uint64_t now)
{
    for (int i = 0; i < n; i++)
        outlier_report(od, ep, result, now);
}

static void test_consecutive_5xx_ejects_at_the_threshold(void **state)
{
    struct outlier *od = detector(4, 5, 0, 100, 0);
    struct outlier_host_state st;

    (void)state;
    report_n(od, 1, 500, 4, 1000);
    assert_false(outlier_ejected(od, 1, 1000));
    assert_false(outlier_any(od));
    outlier_report(od, 1, 503, 1000);
    assert_true(outlier_ejected(od, 1, 1000));
    assert_true(outlier_any(od));
    outlier_state(od, 1, 1000, &st);
    assert_true(st.ejected);
    assert_int_equal(st.until, 1000 + BASE);
    assert_int_equal(st.ejections, 1);
    assert_int_equal(od->total, 1);
    assert_int_equal(od->by_reason[OUTLIER_5XX], 1);
    /* The others are untouched. */
    for (size_t e = 0; e < 4; e++)
        if (e != 1)
            assert_false(outlier_ejected(od, e, 1000));
    outlier_free(od);
}

static void test_success_resets_the_count(void **state)
{
    struct outlier *od = detector(4, 5, 0, 100, 0);

    (void)state;
    report_n(od, 0, 500, 4, 0);
    outlier_report(od, 0, 200, 0);
    report_n(od, 0, 500, 4, 0);
    outlier_report(od, 0, 404, 0); /* a 4xx is the upstream answering */
    report_n(od, 0, 502, 4, 0);
    assert_false(outlier_ejected(od, 0, 0));
    outlier_report(od, 0, 500, 0);
    assert_true(outlier_ejected(od, 0, 0));
    outlier_free(od);
}

/* consecutiveGatewayErrors counts 502, 503, 504 and local failures
 * (connect failures and resets as 503, timeouts as 504); another 5xx
 * breaks the run. */
static void test_gateway_errors(void **state)
{
    struct outlier *od = detector(4, 0, 3, 100, 0);

    (void)state;
    outlier_report(od, 2, 502, 0);
    outlier_report(od, 2, 500, 0); /* not a gateway error: starts over */
    outlier_report(od, 2, 504, 0);
    outlier_report(od, 2, OUTLIER_CONNECT_FAILED, 0);
    assert_false(outlier_ejected(od, 2, 0));
    outlier_report(od, 2, OUTLIER_TIMEOUT, 0);
    assert_true(outlier_ejected(od, 2, 0));
    assert_int_equal(od->by_reason[OUTLIER_GATEWAY], 1);
    /* consecutive5xxErrors 0 is off: 500s never eject. */
    report_n(od, 3, 500, 100, 0);
    assert_false(outlier_ejected(od, 3, 0));
    /* Resets count too. */
    report_n(od, 0, OUTLIER_RESET, 3, 0);
    assert_true(outlier_ejected(od, 0, 0));
    outlier_free(od);
}

/* splitExternalLocalOriginErrors: local failures have their own count
 * (consecutiveLocalOriginFailures) and do not add to the 5xx ones. */
static void test_split_local_origin(void **state)
{
    struct outlier_conf c;
    struct outlier *od;

    (void)state;
    memset(&c, 0, sizeof(c));
    c.consecutive_5xx = 2;
    c.consecutive_local = 3;
    c.split_local = 1;
    c.interval_ms = INTERVAL;
    c.base_ejection_ms = BASE;
    c.max_ejection_ms = OUTLIER_MAX_EJECTION_MS;
    c.max_ejection_pct = 100;
    od = outlier_new(&c, 2);
    assert_non_null(od);
    report_n(od, 0, OUTLIER_CONNECT_FAILED, 2, 0);
    outlier_report(od, 0, 200, 0); /* an answer: the connection works */
    report_n(od, 0, OUTLIER_CONNECT_FAILED, 2, 0);
    assert_false(outlier_ejected(od, 0, 0));
    outlier_report(od, 0, OUTLIER_CONNECT_FAILED, 0);
    assert_true(outlier_ejected(od, 0, 0));
    assert_int_equal(od->by_reason[OUTLIER_LOCAL], 1);
    /* Local failures do not add to a run of 5xx answers. */
    outlier_report(od, 1, 500, 0);
    report_n(od, 1, OUTLIER_CONNECT_FAILED, 2, 0);
    assert_false(outlier_ejected(od, 1, 0));
    outlier_report(od, 1, 500, 0);
    assert_true(outlier_ejected(od, 1, 0));
    assert_int_equal(od->by_reason[OUTLIER_5XX], 1);
    outlier_free(od);
}

static void test_returns_after_its_ejection_time(void **state)
{
    struct outlier *od = detector(4, 1, 0, 100, 0);

    (void)state;
    outlier_report(od, 1, 500, 5000);
    assert_true(outlier_ejected(od, 1, 5000 + BASE - 1));
    assert_int_equal(outlier_active(od, 5000 + BASE - 1), 1);
    assert_false(outlier_ejected(od, 1, 5000 + BASE));
    assert_false(outlier_any(od));
    assert_int_equal(outlier_active(od, 5000 + BASE), 0);
    /* Answers while it was out did not count; it starts afresh. */
    outlier_free(od);
    od = detector(4, 2, 0, 100, 0);
    report_n(od, 1, 500, 2, 0);
    assert_true(outlier_ejected(od, 1, 0));
    outlier_report(od, 1, 500, 10); /* in flight when it was ejected */
    assert_false(outlier_ejected(od, 1, BASE));
    outlier_report(od, 1, 500, BASE);
    assert_false(outlier_ejected(od, 1, BASE));
    outlier_free(od);
}

/* The ejection time is the base times the times ejected in a row, capped
 * at max_ejection; every interval in service takes one off. */
static void test_ejection_time_grows_and_decays(void **state)
{
    struct outlier *od = detector(2, 1, 0, 100, 0);
    struct outlier_host_state st;
    uint64_t now = 0;

    (void)state;
    for (uint64_t k = 1; k <= 12; k++) {
        outlier_report(od, 0, 500, now);
        outlier_state(od, 0, now, &st);
        assert_true(st.ejected);
        uint64_t want = k * BASE < OUTLIER_MAX_EJECTION_MS
                            ? k * BASE
                            : OUTLIER_MAX_EJECTION_MS;
        assert_int_equal(st.until - now, want);
        assert_int_equal(st.ejections, k);
        now = st.until; /* back, and failing again at once */
        assert_false(outlier_ejected(od, 0, now));
    }
    /* Ten intervals at the cap (multiplier 10): after three healthy
     * intervals the next ejection is 8 x base (10 - 3 + 1). */
    now += 3 * INTERVAL;
    outlier_report(od, 0, 500, now);
    outlier_state(od, 0, now, &st);
    assert_int_equal(st.until - now, 8 * BASE);
    now = st.until + 100 * INTERVAL; /* long healthy: back to the base */
    assert_false(outlier_ejected(od, 0, now));
    outlier_report(od, 0, 500, now);
    outlier_state(od, 0, now, &st);
    assert_int_equal(st.until - now, BASE);
    outlier_free(od);
}

/* maxEjectionPercent caps the share ejected at once; refusals are
 * counted as overflow. As in Envoy, a cap below one endpoint's share
 * ejects nothing. */
static void test_max_ejection_percent(void **state)
{
    struct outlier *od = detector(4, 1, 0, 50, 0);

    (void)state;
    outlier_report(od, 0, 500, 0);
    outlier_report(od, 1, 500, 0);
    outlier_report(od, 2, 500, 0);
    assert_true(outlier_ejected(od, 0, 0));
    assert_true(outlier_ejected(od, 1, 0));
    assert_false(outlier_ejected(od, 2, 0));
    assert_int_equal(od->overflow, 1);
    assert_int_equal(od->total, 2);
    assert_int_equal(outlier_active(od, 0), 2);
    /* When one returns, there is room again. */
    assert_false(outlier_ejected(od, 0, BASE));
    outlier_report(od, 2, 500, BASE);
    assert_true(outlier_ejected(od, 2, BASE));
    outlier_free(od);

    od = detector(3, 1, 0, 10, 0); /* Istio's default 10% of 3 */
    report_n(od, 0, 500, 5, 0);
    assert_false(outlier_ejected(od, 0, 0));
    assert_int_equal(od->overflow, 5);
    assert_int_equal(od->total, 0);
    outlier_free(od);
}

/* Panic: when no endpoint is left, or fewer than minHealthPercent are,
 * ejections are not honoured (the balancer uses every endpoint). */
static void test_panic(void **state)
{
    struct outlier *od = detector(4, 1, 0, 100, 0);

    (void)state;
    for (size_t e = 0; e < 3; e++)
        outlier_report(od, e, 500, 0);
    assert_false(outlier_panic(od, 0)); /* one left: minHealthPercent 0 */
    outlier_report(od, 3, 500, 0);
    assert_true(outlier_panic(od, 0)); /* none left */
    /* Once they are due back, no panic (and they are back). */
    assert_false(outlier_panic(od, BASE));
    assert_int_equal(outlier_active(od, BASE), 0);
    outlier_free(od);

    od = detector(4, 1, 0, 100, 50);
    outlier_report(od, 0, 500, 0);
    outlier_report(od, 1, 500, 0);
    assert_false(outlier_panic(od, 0)); /* 50% healthy is not below 50% */
    outlier_report(od, 2, 500, 0);
    assert_true(outlier_panic(od, 0));
    outlier_free(od);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_consecutive_5xx_ejects_at_the_threshold),
        cmocka_unit_test(test_success_resets_the_count),
        cmocka_unit_test(test_gateway_errors),
        cmocka_unit_test(test_split_local_origin),
        cmocka_unit_test(test_returns_after_its_ejection_time),
        cmocka_unit_test(test_ejection_time_grows_and_decays),
        cmocka_unit_test(test_max_ejection_percent),
        cmocka_unit_test(test_panic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
