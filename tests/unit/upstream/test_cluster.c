#include "config.h"

#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/addr.h"
#include "net/listener.h"
#include "upstream/cluster.h"

#define NEP 4
#define PICKS 40000

struct fx {
    struct event_base *base;
    struct cluster *cl;
    struct upool pool;
};

static int setup(void **state)
{
    static struct fx f;
    struct addr eps[NEP];
    const char *why;

    memset(&f, 0, sizeof(f));
    for (int i = 0; i < NEP; i++) {
        char s[32];
        snprintf(s, sizeof(s), "127.0.0.1:%d", 9000 + i);
        assert_int_equal(addr_parse(&eps[i], s, strlen(s), 0, &why), 0);
    }
    f.base = event_base_new();
    f.cl = cluster_new("c", eps, NEP, 1);
    assert_non_null(f.cl);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    upool_dispose(&f->pool);
    cluster_unref(f->cl);
    event_base_free(f->base);
    return 0;
}

static void count(struct fx *f, unsigned *hits)
{
    memset(hits, 0, NEP * sizeof(*hits));
    for (int i = 0; i < PICKS; i++)
        hits[upool_pick(&f->pool)]++;
}

static void test_round_robin_is_exact(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];

    assert_int_equal(upool_init(&f->pool, f->cl, f->base, 0, NULL), 0);
    count(f, hits);
    for (int i = 0; i < NEP; i++)
        assert_int_equal(hits[i], PICKS / NEP);
}

static void test_random_is_spread(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];

    f->cl->lb = CLUSTER_LB_RANDOM;
    assert_int_equal(upool_init(&f->pool, f->cl, f->base, 0, NULL), 0);
    count(f, hits);
    /* Each share within 10% of a quarter (over 20 standard deviations of
     * room: this never fails by chance). */
    for (int i = 0; i < NEP; i++)
        assert_true(hits[i] > PICKS / NEP * 9 / 10 &&
                    hits[i] < PICKS / NEP * 11 / 10);
}

static void test_least_request_avoids_the_busy_endpoint(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];

    f->cl->lb = CLUSTER_LB_LEAST_REQUEST;
    assert_int_equal(upool_init(&f->pool, f->cl, f->base, 0, NULL), 0);
    for (int i = 0; i < 100; i++)
        upool_busy(&f->pool, 0);
    count(f, hits);
    /* Endpoint 0 wins only when both choices fall on it: 1/16. */
    assert_true(hits[0] < PICKS / 16 * 13 / 10);
    assert_true(hits[0] > PICKS / 16 * 7 / 10);
    for (int i = 0; i < 100; i++)
        upool_done(&f->pool, 0);
    count(f, hits);
    assert_true(hits[0] > PICKS / NEP * 9 / 10);
    /* done() never goes below zero. */
    upool_done(&f->pool, 1);
    assert_int_equal(f->pool.active[1], 0);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_robin_is_exact, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_random_is_spread, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_least_request_avoids_the_busy_endpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_circuit_breaker_admits_up_to_the_limit, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
