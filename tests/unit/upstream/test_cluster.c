#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/addr.h"
#include "core/clock.h"
#include "upstream/cluster.h"
#include "upstream/outlier.h"

#define NEP 4

struct fx {
    struct addr eps[NEP];
    struct cluster *cl;
};

static int setup(void **state)
{
    static struct fx f;
    const char *why;

    memset(&f, 0, sizeof(f));
    for (int i = 0; i < NEP; i++) {
        char s[32];
        snprintf(s, sizeof(s), "127.0.0.1:%d", 9000 + i);
        assert_int_equal(addr_parse(&f.eps[i], s, strlen(s), 0, &why), 0);
    }
    f.cl = cluster_new("c", f.eps, NEP, 1);
    assert_non_null(f.cl);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    cluster_unref(f->cl);
    return 0;
}

/* A new cluster holds its own copy of the endpoints, one reference, and
 * zeroed counters; one without endpoints needs no array. */
static void test_new_copies_endpoints(void **state)
{
    struct fx *f = *state;
    struct cluster *empty = cluster_new("e", NULL, 0, 2);
    struct cluster_counters sum;

    assert_string_equal(f->cl->name, "c");
    assert_int_equal(f->cl->nendpoints, NEP);
    assert_ptr_not_equal(f->cl->endpoints, f->eps);
    assert_memory_equal(f->cl->endpoints, f->eps, sizeof(f->eps));
    assert_int_equal(f->cl->refs, 1);
    cluster_sum(f->cl, &sum);
    assert_int_equal(sum.rq_total, 0);
    assert_non_null(empty);
    assert_int_equal(empty->nendpoints, 0);
    assert_int_equal(empty->nworkers, 2);
    cluster_unref(empty);
    cluster_unref(NULL);
}

/* Each reference is dropped once; the cluster lives until the last. */
static void test_ref_counts(void **state)
{
    struct fx *f = *state;

    assert_ptr_equal(cluster_ref(f->cl), f->cl);
    assert_int_equal(f->cl->refs, 2);
    cluster_unref(f->cl);
    assert_int_equal(f->cl->refs, 1);
}

/* cluster_sum() adds every worker's shard, counter by counter. */
static void test_sum_adds_every_worker(void **state)
{
    struct cluster *c = cluster_new("w", NULL, 0, 3);
    struct cluster_counters sum;

    (void)state;
    assert_non_null(c);
    for (int i = 0; i < 3; i++) {
        c->w[i].rq_total = (uint64_t)i + 1;
        c->w[i].cx_overflow = 10;
        c->w[i].rq_pending = (uint64_t)i;
    }
    cluster_sum(c, &sum);
    assert_int_equal(sum.rq_total, 6);
    assert_int_equal(sum.cx_overflow, 30);
    assert_int_equal(sum.rq_pending, 3);
    assert_int_equal(sum.cx_total, 0);
    cluster_unref(c);
}

/* The /stats names of a cluster's counters, in order: the admin API prints
 * them and users read them. */
static void test_stats_names(void **state)
{
    static const char *const names[] = {
        "upstream_rq_total",           "upstream_cx_total",
        "upstream_cx_reused",          "upstream_cx_connect_fail",
        "upstream_cx_connect_timeout", "upstream_rq_error",
        "upstream_rq_timeout",         "upstream_rq_pending_overflow",
        "upstream_rq_retry_overflow",  "upstream_rq_retry",
        "upstream_rq_per_try_timeout", "retry_or_shadow_abandoned",
        "upstream_cx_overflow",        "upstream_rq_pending_total",
        "lb_priority_failover",
    };
    struct cluster_counters c = {0};

    (void)state;
    c.rq_overflow = 5;
    c.rq_retry_body_overflow = 9;
    assert_int_equal(cluster_counters_desc.nfields,
                     sizeof(names) / sizeof(names[0]));
    for (size_t i = 0; i < cluster_counters_desc.nfields; i++)
        assert_string_equal(cluster_counters_desc.fields[i].name, names[i]);
    assert_int_equal(stats_field_value(&c, 0, &cluster_counters_desc.fields[7]),
                     5);
    assert_int_equal(
        stats_field_value(&c, 0, &cluster_counters_desc.fields[11]), 9);
    assert_string_equal(cluster_counters_desc.prefix, "");
}

static void test_circuit_breaker_admits_up_to_the_limit(void **state)
{
    struct fx *f = *state;

    /* No limit: everything is admitted, and counted. */
    for (int i = 0; i < 1000; i++)
        assert_true(cluster_admit(f->cl));
    assert_int_equal(f->cl->rq_active, 1000);
    for (int i = 0; i < 1000; i++)
        cluster_release(f->cl);
    assert_int_equal(f->cl->rq_active, 0);

    f->cl->max_requests = 2;
    assert_true(cluster_admit(f->cl));
    assert_true(cluster_admit(f->cl));
    assert_false(cluster_admit(f->cl));
    assert_false(cluster_admit(f->cl));
    /* A refusal takes no slot; a release frees one. */
    assert_int_equal(f->cl->rq_active, 2);
    cluster_release(f->cl);
    assert_true(cluster_admit(f->cl));
    assert_false(cluster_admit(f->cl));
    cluster_release(f->cl);
    cluster_release(f->cl);
    assert_int_equal(f->cl->rq_active, 0);

    /* Retries have their own count and limit. */
    f->cl->max_retries = 1;
    assert_true(cluster_admit_retry(f->cl));
    assert_false(cluster_admit_retry(f->cl));
    assert_true(cluster_admit(f->cl));
    cluster_release_retry(f->cl);
    assert_true(cluster_admit_retry(f->cl));
    cluster_release_retry(f->cl);
    cluster_release(f->cl);
    assert_int_equal(f->cl->retries_active, 0);
}

/* The connections breaker counts only when limited; a forced slot goes
 * past the limit and is given back like any other. */
static void test_connection_breaker(void **state)
{
    struct fx *f = *state;

    for (int i = 0; i < 10; i++)
        assert_true(cluster_admit_conn(f->cl));
    assert_int_equal(f->cl->cx_active, 0);
    cluster_release_conn(f->cl);
    assert_int_equal(f->cl->cx_active, 0);

    f->cl->max_connections = 1;
    assert_true(cluster_admit_conn(f->cl));
    assert_false(cluster_admit_conn(f->cl));
    assert_int_equal(f->cl->cx_active, 1);
    cluster_force_conn(f->cl);
    assert_int_equal(f->cl->cx_active, 2);
    cluster_release_conn(f->cl);
    assert_false(cluster_admit_conn(f->cl));
    cluster_release_conn(f->cl);
    assert_true(cluster_admit_conn(f->cl));
    cluster_release_conn(f->cl);
    assert_int_equal(f->cl->cx_active, 0);
}

/* The pending-requests breaker counts every waiting request. */
static void test_pending_breaker(void **state)
{
    struct fx *f = *state;

    assert_true(cluster_admit_pending(f->cl));
    assert_true(cluster_admit_pending(f->cl));
    assert_int_equal(f->cl->rq_waiting, 2);
    cluster_release_pending(f->cl);
    f->cl->max_pending = 1;
    assert_false(cluster_admit_pending(f->cl));
    cluster_release_pending(f->cl);
    assert_true(cluster_admit_pending(f->cl));
    cluster_release_pending(f->cl);
    assert_int_equal(f->cl->rq_waiting, 0);
}

/* Weights are kept (0 as 1) with their inverses and an alias table only
 * when they differ. */
static void test_set_weights(void **state)
{
    struct fx *f = *state;
    const uint32_t w[NEP] = {0, 2, 4, 1}, same[NEP] = {3, 3, 3, 3};

    assert_int_equal(cluster_set_weights(f->cl, w), 0);
    assert_non_null(f->cl->weights);
    assert_non_null(f->cl->alias);
    assert_int_equal(cluster_weight(f->cl, 0), 1);
    assert_int_equal(cluster_weight(f->cl, 2), 4);
    assert_true(f->cl->inv_weights[2] == 0.25);
    assert_int_equal(cluster_set_weights(f->cl, same), 0);
    assert_null(f->cl->weights);
    assert_null(f->cl->inv_weights);
    assert_null(f->cl->alias);
    assert_int_equal(cluster_weight(f->cl, 2), 1);
}

/* Reports reach the cluster's detector: three 5xx in a row eject, a
 * success breaks the run, an endpoint the cluster does not have is
 * ignored; without a detector a report does nothing. */
static void test_report_reaches_the_detector(void **state)
{
    struct fx *f = *state;
    struct outlier_conf c;

    cluster_report(f->cl, 1, 503); /* no detector */
    memset(&c, 0, sizeof(c));
    c.consecutive_5xx = 3;
    c.interval_ms = 10000;
    c.base_ejection_ms = 3600 * 1000;
    c.max_ejection_ms = c.base_ejection_ms;
    c.max_ejection_pct = 75;
    f->cl->od = outlier_new(&c, f->cl->nendpoints);
    assert_non_null(f->cl->od);
    cluster_report(f->cl, 1, 503);
    cluster_report(f->cl, 1, 503);
    cluster_report(f->cl, 1, 200);
    cluster_report(f->cl, 1, 503);
    assert_false(outlier_ejected(f->cl->od, 1, clock_ms()));
    cluster_report(f->cl, 1, 503);
    cluster_report(f->cl, 1, OUTLIER_CONNECT_FAILED);
    assert_true(outlier_ejected(f->cl->od, 1, clock_ms()));
    cluster_report(f->cl, NEP, 503);
    cluster_report(f->cl, NEP, 503);
    cluster_report(f->cl, NEP, 503);
    for (int i = 0; i < NEP; i++)
        assert_true(i == 1 ||
                    !outlier_ejected(f->cl->od, (size_t)i, clock_ms()));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_new_copies_endpoints, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ref_counts, setup, teardown),
        cmocka_unit_test(test_sum_adds_every_worker),
        cmocka_unit_test(test_stats_names),
        cmocka_unit_test_setup_teardown(
            test_circuit_breaker_admits_up_to_the_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connection_breaker, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pending_breaker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_weights, setup, teardown),
        cmocka_unit_test_setup_teardown(test_report_reaches_the_detector, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
