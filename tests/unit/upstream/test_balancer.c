#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <math.h>

#include "core/addr.h"
#include "core/clock.h"
#include "upstream/balancer.h"
#include "upstream/cluster.h"
#include "upstream/hash.h"
#include "upstream/outlier.h"

#define NEP 4
#define PICKS 40000

struct fx {
    struct cluster *cl;
    struct balancer lb;
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
    f.cl = cluster_new("c", eps, NEP, 1);
    assert_non_null(f.cl);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    balancer_dispose(&f->lb);
    cluster_unref(f->cl);
    return 0;
}

static void count(struct fx *f, unsigned *hits)
{
    memset(hits, 0, NEP * sizeof(*hits));
    for (int i = 0; i < PICKS; i++)
        hits[balancer_pick(&f->lb)]++;
}

static void test_round_robin_is_exact(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];

    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    count(f, hits);
    for (int i = 0; i < NEP; i++)
        assert_int_equal(hits[i], PICKS / NEP);
}

static void test_random_is_spread(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];

    f->cl->lb = CLUSTER_LB_RANDOM;
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
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
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    for (int i = 0; i < 100; i++)
        balancer_busy(&f->lb, 0);
    count(f, hits);
    /* Endpoint 0 wins only when both choices fall on it: 1/16. */
    assert_true(hits[0] < PICKS / 16 * 13 / 10);
    assert_true(hits[0] > PICKS / 16 * 7 / 10);
    for (int i = 0; i < 100; i++)
        balancer_done(&f->lb, 0);
    count(f, hits);
    assert_true(hits[0] > PICKS / NEP * 9 / 10);
    /* done() never goes below zero. */
    balancer_done(&f->lb, 1);
    assert_int_equal(f->lb.active[1], 0);
}

/* Outlier detection on the cluster: consecutive 5xx 3, 1 h ejections, up
 * to 75% ejected, panic when none is left. */
static void add_detector(struct cluster *cl, uint32_t min_health)
{
    struct outlier_conf c;

    memset(&c, 0, sizeof(c));
    c.consecutive_5xx = 3;
    c.interval_ms = 10000;
    c.base_ejection_ms = 3600 * 1000;
    c.max_ejection_ms = c.base_ejection_ms;
    c.max_ejection_pct = 75;
    c.min_health_pct = min_health;
    cl->od = outlier_new(&c, cl->nendpoints);
    assert_non_null(cl->od);
}

static void eject(struct cluster *cl, size_t ep)
{
    for (int i = 0; i < 3; i++)
        cluster_report(cl, ep, 503);
    assert_true(outlier_ejected(cl->od, ep, clock_ms()));
}

/* Every balancer skips an ejected endpoint; round robin shares evenly
 * among the others. */
static void test_balancers_skip_ejected_endpoints(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];
    const enum cluster_lb lbs[] = {CLUSTER_LB_ROUND_ROBIN, CLUSTER_LB_RANDOM,
                                   CLUSTER_LB_LEAST_REQUEST};

    add_detector(f->cl, 0);
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    eject(f->cl, 2);
    for (size_t k = 0; k < sizeof(lbs) / sizeof(lbs[0]); k++) {
        f->cl->lb = lbs[k];
        count(f, hits);
        assert_int_equal(hits[2], 0);
        for (int i = 0; i < NEP; i++)
            if (i != 2)
                /* A third each, within 10% (over 15 standard deviations). */
                assert_true(hits[i] > PICKS / 3 * 9 / 10 &&
                            hits[i] < PICKS / 3 * 11 / 10);
        if (lbs[k] == CLUSTER_LB_ROUND_ROBIN)
            for (int i = 0; i < NEP; i++)
                assert_true(i == 2 || hits[i] == PICKS / 3 ||
                            hits[i] == PICKS / 3 + 1);
    }
    /* The next endpoint for another try skips it too. */
    assert_int_equal(balancer_next(&f->lb, 1), 3);
    assert_int_equal(balancer_next(&f->lb, 3), 0);
}

/* Two workers' balancers share the cluster's detector: failures seen by each
 * add up to one run, as Envoy's detector is per cluster. */
static void test_workers_share_the_detector(void **state)
{
    struct fx *f = *state;
    struct balancer other;

    add_detector(f->cl, 0);
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    assert_int_equal(balancer_init(&other, f->cl, 1), 0);
    cluster_report(f->cl, 1, 500);
    cluster_report(f->cl, 1, 502);
    assert_false(outlier_ejected(f->cl->od, 1, clock_ms()));
    cluster_report(f->cl, 1, 503);
    for (int i = 0; i < 1000; i++) {
        assert_int_not_equal(balancer_pick(&f->lb), 1);
        assert_int_not_equal(balancer_pick(&other), 1);
    }
    balancer_dispose(&other);
}

/* With every endpoint ejected (or fewer healthy than minHealthPercent),
 * balancing ignores ejections instead of failing every request. */
static void test_panic_uses_every_endpoint(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];

    add_detector(f->cl, 50);
    f->cl->od->conf.max_ejection_pct = 100;
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    eject(f->cl, 0);
    eject(f->cl, 1);
    count(f, hits); /* 50% healthy: not below 50%, still honoured */
    assert_int_equal(hits[0] + hits[1], 0);
    eject(f->cl, 2);
    count(f, hits);
    for (int i = 0; i < NEP; i++)
        assert_int_equal(hits[i], PICKS / NEP);
}

/* A consistent-hash cluster: a key keeps its endpoint; when that one is
 * ejected the key moves to the next point's endpoint and only those keys
 * move; when its time is up (a clock set back an hour stands in for the
 * wait) the keys come home. Requests without a key spread. */
static void test_hash_walks_past_ejected_endpoints(void **state)
{
    struct fx *f = *state;
    struct lb_hash_conf hc;
    char *err = NULL;
    size_t home[2000];
    unsigned hits[NEP];
    size_t victim;
    unsigned moved = 0;

    memset(&hc, 0, sizeof(hc));
    hc.key = LB_KEY_SOURCE_IP;
    hc.algo = LB_RING_HASH;
    f->cl->hash = lb_hash_new(&hc, f->cl->endpoints, NULL, NEP, &err);
    assert_non_null(f->cl->hash);
    f->cl->lb = CLUSTER_LB_HASH;
    add_detector(f->cl, 0);
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    for (uint64_t k = 0; k < 2000; k++) {
        home[k] = balancer_pick_hash(&f->lb, lb_hash_bytes(&k, sizeof(k), 7));
        assert_int_equal(home[k], balancer_pick_hash(
                                      &f->lb, lb_hash_bytes(&k, sizeof(k), 7)));
    }
    victim = home[0];
    eject(f->cl, victim);
    for (uint64_t k = 0; k < 2000; k++) {
        size_t e = balancer_pick_hash(&f->lb, lb_hash_bytes(&k, sizeof(k), 7));
        assert_int_not_equal(e, victim);
        if (home[k] != victim)
            assert_int_equal(e, home[k]);
        else
            moved++;
    }
    assert_true(moved > 0);
    /* Its ejection, seen from an hour later, is over. */
    outlier_free(f->cl->od);
    add_detector(f->cl, 0);
    for (int i = 0; i < 3; i++)
        outlier_report(f->cl->od, victim, 503,
                       clock_ms() - f->cl->od->conf.base_ejection_ms - 1);
    for (uint64_t k = 0; k < 2000; k++)
        assert_int_equal(home[k], balancer_pick_hash(
                                      &f->lb, lb_hash_bytes(&k, sizeof(k), 7)));
    /* No key: random points, every endpoint gets some. */
    count(f, hits);
    for (int i = 0; i < NEP; i++)
        assert_true(hits[i] > 0);
}

/* Weights of the weighted tests: unequal, and the heaviest (2) is the
 * one they eject. */
static const uint32_t weights[NEP] = {1, 2, 7, 3};

/*
 * Each endpoint's share of PICKS is its weight over the total of the
 * endpoints in service (skip: one that is out, or -1), within 6 standard
 * deviations of a binomial count; the one out gets nothing.
 */
static void check_shares(const unsigned *hits, const uint32_t *w, int skip)
{
    double total = 0;

    for (int i = 0; i < NEP; i++)
        if (i != skip)
            total += w[i];
    for (int i = 0; i < NEP; i++) {
        double p = i == skip ? 0 : w[i] / total;
        double sd = sqrt(PICKS * p * (1 - p));
        if (i == skip)
            assert_int_equal(hits[i], 0);
        else
            assert_true(fabs(hits[i] - PICKS * p) <= 6 * sd);
    }
}

static void weigh(struct fx *f, const uint32_t *w)
{
    assert_int_equal(cluster_set_weights(f->cl, w), 0);
    assert_non_null(f->cl->weights);
}

/* Equal weights (0 counts as 1) keep the cluster unweighted, so its
 * balancers are the plain ones, exactly as without weights. */
static void test_equal_weights_keep_plain_balancing(void **state)
{
    struct fx *f = *state;
    const uint32_t same[NEP] = {5, 5, 5, 5}, ones[NEP] = {0, 1, 1, 0};
    unsigned hits[NEP];

    assert_int_equal(cluster_set_weights(f->cl, same), 0);
    assert_null(f->cl->weights);
    assert_int_equal(cluster_set_weights(f->cl, ones), 0);
    assert_null(f->cl->weights);
    assert_int_equal(cluster_weight(f->cl, 1), 1);
    weigh(f, weights);
    assert_int_equal(cluster_weight(f->cl, 2), 7);
    /* Back to equal: the weights go. */
    assert_int_equal(cluster_set_weights(f->cl, same), 0);
    assert_null(f->cl->weights);
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    assert_null(f->lb.s.edf);
    count(f, hits);
    for (int i = 0; i < NEP; i++)
        assert_int_equal(hits[i], PICKS / NEP);
}

/*
 * Weighted round robin (Envoy's EDF scheduler): each endpoint's count is
 * its weight's share, to a pick, and the turns are spread: in every run
 * of 13 picks (the total weight) each endpoint has its weight's worth of
 * them, give or take one, rather than 7 in a row for the heaviest.
 */
static void test_weighted_round_robin_follows_weights(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];
    size_t seq[PICKS];

    weigh(f, weights);
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    memset(hits, 0, sizeof(hits));
    for (int i = 0; i < PICKS; i++) {
        seq[i] = balancer_pick(&f->lb);
        hits[seq[i]]++;
    }
    check_shares(hits, weights, -1);
    for (int i = 0; i < NEP; i++)
        assert_true(fabs(hits[i] - PICKS * weights[i] / 13.0) <= 1);
    for (int start = 0; start + 13 <= PICKS; start++) {
        unsigned win[NEP] = {0};
        for (int k = 0; k < 13; k++)
            win[seq[start + k]]++;
        for (int i = 0; i < NEP; i++)
            assert_true(win[i] + 1 >= weights[i] && win[i] <= weights[i] + 1);
    }
}

/* Slot i of the alias table gives below/2^32 of its 1/NEP to i and the
 * rest to its alias: the sums are the weights' shares. */
static void check_alias(const struct cluster *cl, const uint32_t *w)
{
    double got[NEP] = {0}, total = 0;

    for (int i = 0; i < NEP; i++) {
        double own = cl->alias[i].below / 4294967296.0;
        assert_true(own <= 1.0);
        got[i] += own / NEP;
        got[cl->alias[i].other] += (1 - own) / NEP;
        total += w[i];
    }
    for (int i = 0; i < NEP; i++)
        assert_true(fabs(got[i] - w[i] / total) < 1e-9);
}

/* Weighted random (Walker's alias table): each endpoint's share is its
 * weight's, in the table exactly and in draws within 6 sd. */
static void test_weighted_random_follows_weights(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];

    const uint32_t extreme[NEP] = {1, UINT32_MAX, 3, 1000000};

    f->cl->lb = CLUSTER_LB_RANDOM;
    /* The alias table holds each endpoint's exact share (to 2^-32), even
     * for weights far apart. */
    weigh(f, extreme);
    check_alias(f->cl, extreme);
    weigh(f, weights);
    check_alias(f->cl, weights);
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    count(f, hits);
    check_shares(hits, weights, -1);
}

/*
 * Weighted least request (Envoy's, active_request_bias 1.0): an endpoint
 * is scheduled by weight / (requests in flight + 1). Idle, the shares are
 * the weights; with 6 requests in flight on the weight-7 endpoint it
 * counts as weight 1.
 */
static void test_weighted_least_request(void **state)
{
    struct fx *f = *state;
    const uint32_t busy[NEP] = {1, 2, 1, 3};
    unsigned hits[NEP];

    f->cl->lb = CLUSTER_LB_LEAST_REQUEST;
    weigh(f, weights);
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    count(f, hits);
    check_shares(hits, weights, -1);
    for (int i = 0; i < 6; i++)
        balancer_busy(&f->lb, 2);
    count(f, hits);
    check_shares(hits, busy, -1);
    for (int i = 0; i < 6; i++)
        balancer_done(&f->lb, 2);
    count(f, hits);
    check_shares(hits, weights, -1);
}

/*
 * Every weighted balancer skips an ejected endpoint, here the heaviest
 * (7 of 13): the others share by weight among themselves. When it is back
 * (a new detector with nothing ejected stands in for the end of its
 * ejection) it gets its share again.
 */
static void test_weighted_balancers_skip_ejected_endpoints(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];
    const enum cluster_lb lbs[] = {CLUSTER_LB_ROUND_ROBIN, CLUSTER_LB_RANDOM,
                                   CLUSTER_LB_LEAST_REQUEST};

    weigh(f, weights);
    for (size_t k = 0; k < sizeof(lbs) / sizeof(lbs[0]); k++) {
        f->cl->lb = lbs[k];
        add_detector(f->cl, 0);
        assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
        count(f, hits);
        check_shares(hits, weights, -1);
        eject(f->cl, 2);
        count(f, hits);
        check_shares(hits, weights, 2);
        if (lbs[k] != CLUSTER_LB_RANDOM) /* parked, not drawn again */
            assert_int_equal(f->lb.s.nparked, 1);
        /* The next endpoint for another try skips it too. */
        assert_int_equal(balancer_next(&f->lb, 1), 3);
        outlier_free(f->cl->od);
        add_detector(f->cl, 0);
        count(f, hits);
        check_shares(hits, weights, -1);
        if (lbs[k] != CLUSTER_LB_RANDOM)
            assert_int_equal(f->lb.s.nparked, 0);
        balancer_dispose(&f->lb);
        outlier_free(f->cl->od);
        f->cl->od = NULL;
    }
}

/* With every endpoint ejected, weighted balancing uses them all, by
 * weight (panic mode). */
static void test_weighted_panic_uses_every_endpoint(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];

    weigh(f, weights);
    add_detector(f->cl, 0);
    f->cl->od->conf.max_ejection_pct = 100;
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    for (int i = 0; i < NEP; i++)
        eject(f->cl, (size_t)i);
    count(f, hits);
    check_shares(hits, weights, -1);
}

/* A weighted Maglev cluster: keys keep their endpoint, an ejected
 * endpoint's keys go elsewhere, keyless requests spread by weight. */
static void test_weighted_hash_cluster(void **state)
{
    struct fx *f = *state;
    struct lb_hash_conf hc;
    char *err = NULL;
    unsigned hits[NEP];

    weigh(f, weights);
    memset(&hc, 0, sizeof(hc));
    hc.key = LB_KEY_SOURCE_IP;
    hc.algo = LB_MAGLEV;
    hc.size = 65537;
    f->cl->hash = lb_hash_new(&hc, f->cl->endpoints, f->cl->weights, NEP, &err);
    assert_non_null(f->cl->hash);
    f->cl->lb = CLUSTER_LB_HASH;
    add_detector(f->cl, 0);
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    /* Slots are weights' shares within a slot or two (test_hash): the
     * table adds nothing to the sampling spread worth counting. */
    count(f, hits);
    check_shares(hits, weights, -1);
    eject(f->cl, 2);
    for (uint64_t k = 0; k < 2000; k++)
        assert_int_not_equal(
            balancer_pick_hash(&f->lb, lb_hash_bytes(&k, sizeof(k), 7)), 2);
    count(f, hits);
    assert_int_equal(hits[2], 0);
    for (int i = 0; i < NEP; i++)
        assert_true(i == 2 || hits[i] > 0);
}

/*
 * No endpoint in service at all (every one ejected, a detector allowed to
 * eject them all): every balancer, plain and consistent hash, falls back
 * to all of them rather than refuse, and another try moves on in order.
 */
static void test_no_healthy_endpoint_uses_every_endpoint(void **state)
{
    struct fx *f = *state;
    struct lb_hash_conf hc;
    char *err = NULL;
    unsigned hits[NEP];
    const enum cluster_lb lbs[] = {CLUSTER_LB_ROUND_ROBIN, CLUSTER_LB_RANDOM,
                                   CLUSTER_LB_LEAST_REQUEST, CLUSTER_LB_HASH};

    memset(&hc, 0, sizeof(hc));
    hc.key = LB_KEY_SOURCE_IP;
    hc.algo = LB_RING_HASH;
    f->cl->hash = lb_hash_new(&hc, f->cl->endpoints, NULL, NEP, &err);
    assert_non_null(f->cl->hash);
    add_detector(f->cl, 0);
    f->cl->od->conf.max_ejection_pct = 100;
    for (int i = 0; i < NEP; i++)
        eject(f->cl, (size_t)i);
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    for (size_t k = 0; k < sizeof(lbs) / sizeof(lbs[0]); k++) {
        f->cl->lb = lbs[k];
        count(f, hits);
        for (int i = 0; i < NEP; i++)
            assert_true(hits[i] > 0);
        if (lbs[k] == CLUSTER_LB_ROUND_ROBIN)
            for (int i = 0; i < NEP; i++)
                assert_int_equal(hits[i], PICKS / NEP);
    }
    for (uint64_t k = 0; k < 100; k++)
        assert_true(
            balancer_pick_hash(&f->lb, lb_hash_bytes(&k, sizeof(k), 7)) < NEP);
    assert_int_equal(balancer_next(&f->lb, 1), 2);
    assert_int_equal(balancer_next(&f->lb, NEP - 1), 0);
}

/* A hash pick on a cluster that is not a hash one uses its own balancer
 * (round robin here: exact), whatever the key. */
static void test_hash_pick_without_a_table_balances(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP] = {0};

    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    for (uint64_t k = 0; k < PICKS; k++)
        hits[balancer_pick_hash(&f->lb, k)]++;
    for (int i = 0; i < NEP; i++)
        assert_int_equal(hits[i], PICKS / NEP);
}

/* Workers start at different points: round robin at their own index, a
 * weighted schedule that many turns in, so they do not all send their
 * first request to the same endpoint. */
static void test_workers_start_apart(void **state)
{
    struct fx *f = *state;
    struct balancer w1, w0;
    size_t second;

    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    assert_int_equal(balancer_init(&w1, f->cl, 1), 0);
    assert_int_equal(balancer_pick(&f->lb), 0);
    assert_int_equal(balancer_pick(&w1), 1);
    balancer_dispose(&w1);
    balancer_dispose(&f->lb);

    weigh(f, weights);
    assert_int_equal(balancer_init(&w0, f->cl, 0), 0);
    assert_int_equal(balancer_init(&w1, f->cl, 1), 0);
    (void)balancer_pick(&w0);
    second = balancer_pick(&w0);
    assert_int_equal(balancer_pick(&w1), second);
    balancer_dispose(&w0);
    balancer_dispose(&w1);
}

/* One endpoint's alias table sends every draw to it. */
static void test_alias_of_one_endpoint(void **state)
{
    struct balancer_alias a[1];
    const uint32_t w[1] = {9};

    (void)state;
    memset(a, 0, sizeof(a));
    assert_int_equal(balancer_build_alias(a, w, 1), 0);
    assert_true(a[0].below == UINT64_C(1) << 32);
    assert_int_equal(a[0].other, 0);
}

/* busy()/done() ignore an endpoint the cluster does not have. */
static void test_busy_ignores_unknown_endpoints(void **state)
{
    struct fx *f = *state;

    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    balancer_busy(&f->lb, NEP);
    balancer_done(&f->lb, NEP);
    for (int i = 0; i < NEP; i++)
        assert_int_equal(f->lb.active[i], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_robin_is_exact, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_random_is_spread, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_least_request_avoids_the_busy_endpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_balancers_skip_ejected_endpoints,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_workers_share_the_detector, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_panic_uses_every_endpoint, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hash_walks_past_ejected_endpoints,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_equal_weights_keep_plain_balancing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_weighted_round_robin_follows_weights, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weighted_random_follows_weights,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_weighted_least_request, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_weighted_balancers_skip_ejected_endpoints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weighted_panic_uses_every_endpoint,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_weighted_hash_cluster, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_no_healthy_endpoint_uses_every_endpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_pick_without_a_table_balances,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_workers_start_apart, setup,
                                        teardown),
        cmocka_unit_test(test_alias_of_one_endpoint),
        cmocka_unit_test_setup_teardown(test_busy_ignores_unknown_endpoints,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
