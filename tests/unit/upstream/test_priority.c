#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/addr.h"
#include "core/clock.h"
#include "upstream/balancer.h"
#include "upstream/cluster.h"
#include "upstream/hash.h"
#include "upstream/outlier.h"
#include "upstream/priority.h"

/* ---- priority load: Envoy's table -------------------------------------- */

static void loads2(uint32_t h0, uint32_t h1, uint32_t want0, uint32_t want1)
{
    const uint32_t healthy[2] = {h0, h1}, total[2] = {100, 100};
    uint32_t load[2];
    unsigned char panic[2];

    assert_int_equal(prio_loads(healthy, total, 2, 0, load, panic), 0);
    if (load[0] != want0 || load[1] != want1)
        fail_msg("P0 %u%% P1 %u%% healthy: load %u/%u, want %u/%u", h0, h1,
                 load[0], load[1], want0, want1);
}

/* The table of Envoy's "priority levels" documentation: a level H%
 * healthy keeps min(100, 1.4 x H)% of the traffic. */
static void test_priority_load_follows_envoy(void **state)
{
    (void)state;
    loads2(100, 100, 100, 0);
    loads2(72, 100, 100, 0);
    loads2(71, 100, 99, 1);
    loads2(50, 100, 70, 30);
    loads2(25, 100, 35, 65);
    loads2(0, 100, 0, 100);
    /* Both short: the load is normalised by what is available (20% each
     * is 28 + 28 of 56: half each). */
    loads2(20, 20, 50, 50);
}

/* Three levels: what the first two cannot take goes on down. */
static void test_priority_load_three_levels(void **state)
{
    const uint32_t healthy[3] = {1, 1, 4}, total[3] = {5, 5, 4};
    uint32_t load[3];
    unsigned char panic[3];

    (void)state;
    /* 1/5 healthy: 1.4 x 20 = 28% each; the rest, 44%, to P2. */
    assert_int_equal(prio_loads(healthy, total, 3, 0, load, panic), 0);
    assert_int_equal(load[0], 28);
    assert_int_equal(load[1], 28);
    assert_int_equal(load[2], 44);
    assert_false(panic[0] || panic[1] || panic[2]);
}

/* No level in service: every level in panic, the load by endpoint count;
 * a level under minHealthPercent while the whole is short is in panic. */
static void test_priority_load_panic(void **state)
{
    const uint32_t none[2] = {0, 0}, total[2] = {1, 3};
    const uint32_t some[2] = {1, 1}, total4[2] = {4, 4};
    uint32_t load[2];
    unsigned char panic[2];

    (void)state;
    assert_int_equal(prio_loads(none, total, 2, 0, load, panic), 1);
    assert_int_equal(load[0], 25);
    assert_int_equal(load[1], 75);
    assert_true(panic[0] && panic[1]);
    /* 1 of 4 each: 35% + 35%, short of 100: with minHealthPercent 30 a
     * level 25% healthy is in panic; all are, so the load is by count. */
    assert_int_equal(prio_loads(some, total4, 2, 30, load, panic), 1);
    assert_int_equal(load[0], 50);
    /* With 20 neither is. */
    assert_int_equal(prio_loads(some, total4, 2, 20, load, panic), 0);
    assert_false(panic[0] || panic[1]);
    assert_int_equal(load[0], 50);
}

/* Envoy's "locality weighted load balancing" table: X weighs 1, Y 2 and
 * is whole; X's share holds while 1.4 x its healthy share is 100% or
 * more, then shrinks. */
static void test_locality_load_follows_envoy(void **state)
{
    static const struct {
        uint32_t healthy; /* of 100 in X */
        uint32_t x_pct;
    } rows[] = {{100, 33}, {72, 33}, {70, 32}, {50, 25}, {25, 14}, {0, 0}};
    const uint32_t weight[2] = {1, 2}, total[2] = {100, 100};
    uint32_t load[2];
    unsigned char panic[2];

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const uint32_t healthy[2] = {rows[i].healthy, 100};
        uint32_t pct;
        assert_int_equal(locality_loads(weight, healthy, total, 2, load, panic),
                         0);
        pct = (uint32_t)((uint64_t)load[0] * 100 / (load[0] + load[1]));
        if (pct != rows[i].x_pct)
            fail_msg("X %u%% healthy: %u%% of the traffic, want %u%%",
                     rows[i].healthy, pct, rows[i].x_pct);
    }
}

/* ---- the balancer over levels ------------------------------------------ */

#define NEP 6
#define PICKS 20000

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

/* Levels: endpoints 1 and 4 in P0, 0 and 3 in P1, 2 and 5 in P2 (not in
 * endpoint order, so the level lists are tested too); outlier detection
 * (3 x 5xx ejects for an hour, all may be ejected). */
static const uint32_t levels[NEP] = {1, 0, 2, 1, 0, 2};

static void leveled(struct fx *f, enum cluster_lb lb, const uint32_t *w,
                    int hash)
{
    struct outlier_conf c;

    memset(&c, 0, sizeof(c));
    c.consecutive_5xx = 3;
    c.interval_ms = 10000;
    c.base_ejection_ms = 3600 * 1000;
    c.max_ejection_ms = c.base_ejection_ms;
    c.max_ejection_pct = 100;
    f->cl->lb = lb;
    if (w != NULL)
        assert_int_equal(cluster_set_weights(f->cl, w), 0);
    assert_int_equal(cluster_set_levels(f->cl, levels), 0);
    assert_non_null(f->cl->prio);
    assert_int_equal(f->cl->prio->nlevels, 3);
    if (hash) {
        struct lb_hash_conf hc;
        char *err = NULL;
        memset(&hc, 0, sizeof(hc));
        hc.key = LB_KEY_HEADER;
        hc.name = "x";
        hc.algo = LB_RING_HASH;
        hc.size = 1024;
        f->cl->hash =
            lb_hash_new(&hc, f->cl->endpoints, f->cl->weights, NEP, &err);
        assert_non_null(f->cl->hash);
        assert_int_equal(prio_build_hash(f->cl, &hc, &err), 0);
    }
    f->cl->od = outlier_new(&c, NEP);
    assert_non_null(f->cl->od);
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
}

static void eject(struct cluster *cl, size_t ep, uint64_t at)
{
    for (int i = 0; i < 3; i++)
        outlier_report(cl->od, ep, 503, at);
    assert_true(cl->od->h[ep].until != 0);
}

static void count(struct fx *f, unsigned *hits, int hash)
{
    memset(hits, 0, NEP * sizeof(*hits));
    for (int i = 0; i < PICKS; i++) {
        size_t ep =
            hash ? balancer_pick_hash(&f->lb, (uint64_t)i * 0x9e3779b97f4a7c15u)
                 : balancer_pick(&f->lb);
        assert_true(ep < NEP);
        hits[ep]++;
    }
}

static unsigned level_hits(const unsigned *hits, uint32_t l)
{
    unsigned n = 0;

    for (int i = 0; i < NEP; i++)
        if (levels[i] == l)
            n += hits[i];
    return n;
}

/*
 * Every balancer keeps to P0 while it is whole; with half of P0 ejected
 * (1.4 x 50 = 70%) 70% stays in P0 and 30% spills to P1; with P0 gone
 * all goes to P1, with P1 gone too to P2; an ejection that ends brings
 * the traffic back (failback). Requests off P0 are counted.
 */
static void run_failover(struct fx *f, enum cluster_lb lb, const uint32_t *w,
                         int hash)
{
    unsigned hits[NEP];
    uint64_t now = clock_ms();
    struct cluster_counters sum;

    leveled(f, lb, w, hash);
    count(f, hits, hash);
    assert_int_equal(level_hits(hits, 0), PICKS);
    if (!hash) /* a hash keys each request to one endpoint */
        assert_true(hits[1] > PICKS / 5 && hits[4] > PICKS / 5);
    cluster_sum(f->cl, &sum);
    assert_int_equal(sum.rq_failover, 0);

    eject(f->cl, 1, now);
    count(f, hits, hash);
    assert_int_equal(hits[1], 0);
    assert_in_range(level_hits(hits, 0), PICKS * 65 / 100, PICKS * 75 / 100);
    assert_in_range(level_hits(hits, 1), PICKS * 25 / 100, PICKS * 35 / 100);
    assert_int_equal(level_hits(hits, 2), 0);
    cluster_sum(f->cl, &sum);
    assert_int_equal(sum.rq_failover, level_hits(hits, 1));

    eject(f->cl, 4, now);
    count(f, hits, hash);
    assert_int_equal(level_hits(hits, 1), PICKS);

    eject(f->cl, 0, now);
    eject(f->cl, 3, now);
    count(f, hits, hash);
    assert_int_equal(level_hits(hits, 2), PICKS);

    /* Their time is up (as if an hour had passed: every ejection ends
     * now, the first of them too): P0 takes everything again. */
    for (int ep = 0; ep < NEP; ep++)
        if (f->cl->od->h[ep].until != 0)
            f->cl->od->h[ep].until = now - 1;
    f->cl->od->next_expiry = now - 1;
    count(f, hits, hash);
    assert_int_equal(level_hits(hits, 0), PICKS);
}

static void test_round_robin_fails_over(void **state)
{
    run_failover(*state, CLUSTER_LB_ROUND_ROBIN, NULL, 0);
}

static void test_random_fails_over(void **state)
{
    run_failover(*state, CLUSTER_LB_RANDOM, NULL, 0);
}

static void test_least_request_fails_over(void **state)
{
    run_failover(*state, CLUSTER_LB_LEAST_REQUEST, NULL, 0);
}

static const uint32_t weights[NEP] = {1, 3, 2, 1, 1, 5};

static void test_weighted_round_robin_fails_over(void **state)
{
    run_failover(*state, CLUSTER_LB_ROUND_ROBIN, weights, 0);
}

static void test_weighted_random_fails_over(void **state)
{
    run_failover(*state, CLUSTER_LB_RANDOM, weights, 0);
}

static void test_consistent_hash_fails_over(void **state)
{
    run_failover(*state, CLUSTER_LB_HASH, NULL, 1);
}

/* Within a level the weights hold: P0 is endpoints 1 (weight 3) and 4
 * (weight 1). */
static void test_weights_hold_within_level(void **state)
{
    struct fx *f = *state;
    unsigned hits[NEP];

    leveled(f, CLUSTER_LB_ROUND_ROBIN, weights, 0);
    count(f, hits, 0);
    assert_int_equal(hits[1], PICKS * 3 / 4);
    assert_int_equal(hits[4], PICKS / 4);
}

/* A consistent hash stays on one endpoint of the level for a key, and
 * moves within the level when that endpoint is ejected. */
static void test_hash_keeps_keys_within_level(void **state)
{
    struct fx *f = *state;
    size_t first;

    leveled(f, CLUSTER_LB_HASH, NULL, 1);
    first = balancer_pick_hash(&f->lb, 12345);
    assert_int_equal(levels[first], 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(balancer_pick_hash(&f->lb, 12345), first);
    /* Ejecting the other P0 endpoint spills 30% of requests to P1, but
     * those that stay in P0 keep their endpoint. */
    eject(f->cl, first == 1 ? 4 : 1, clock_ms());
    for (int i = 0; i < 100; i++) {
        size_t ep = balancer_pick_hash(&f->lb, 12345);
        assert_true(ep == first || levels[ep] == 1);
    }
}

/* Another try (balancer_next) stays in the level while it has another
 * endpoint in service. */
static void test_next_stays_in_level(void **state)
{
    struct fx *f = *state;

    leveled(f, CLUSTER_LB_ROUND_ROBIN, NULL, 0);
    assert_int_equal(balancer_next(&f->lb, 1), 4);
    assert_int_equal(balancer_next(&f->lb, 4), 1);
    eject(f->cl, 4, clock_ms());
    /* 1 is P0's last: the next try goes by the priority load (P0 has 70%
     * of it, and 1 is there), never to the ejected one. */
    for (int i = 0; i < 50; i++)
        assert_int_not_equal(balancer_next(&f->lb, 1), 4);
}

/* One level (all endpoints equal) keeps no level state at all. */
static void test_one_level_keeps_nothing(void **state)
{
    struct fx *f = *state;
    const uint32_t zero[NEP] = {0};

    assert_int_equal(cluster_set_levels(f->cl, zero), 0);
    assert_null(f->cl->prio);
    assert_int_equal(balancer_init(&f->lb, f->cl, 0), 0);
    assert_null(f->lb.lrr);
}

/* Levels that are localities (distribute): picks follow their weights
 * (P0 2, P1 1, P2 1 here) and a locality 50% ejected keeps 70% of its
 * weight (Envoy's locality weighted balancing); nothing counts as a
 * failover. */
static void test_locality_levels_share_by_weight(void **state)
{
    struct fx *f = *state;
    const uint32_t lw[3] = {2, 1, 1};
    unsigned hits[NEP];
    struct cluster_counters sum;

    leveled(f, CLUSTER_LB_ROUND_ROBIN, NULL, 0);
    assert_int_equal(cluster_set_level_weights(f->cl, lw), 0);
    count(f, hits, 0);
    assert_in_range(level_hits(hits, 0), PICKS * 47 / 100, PICKS * 53 / 100);
    assert_in_range(level_hits(hits, 1), PICKS * 22 / 100, PICKS * 28 / 100);
    eject(f->cl, 1, clock_ms());
    count(f, hits, 0);
    /* 2 x 70 : 100 : 100 -> 140 / 340 = 41% */
    assert_int_equal(hits[1], 0);
    assert_in_range(level_hits(hits, 0), PICKS * 38 / 100, PICKS * 44 / 100);
    cluster_sum(f->cl, &sum);
    assert_int_equal(sum.rq_failover, 0);
}

/* cluster_prio_loads() reads the detector: what /clusters shows. */
static void test_cluster_loads_from_ejections(void **state)
{
    struct fx *f = *state;
    uint32_t load[3];
    unsigned char panic[3];
    uint64_t now = clock_ms();

    leveled(f, CLUSTER_LB_ROUND_ROBIN, NULL, 0);
    assert_int_equal(cluster_prio_loads(f->cl, now, load, panic), 0);
    assert_int_equal(load[0], 100);
    eject(f->cl, 4, now);
    assert_int_equal(cluster_prio_loads(f->cl, now, load, panic), 0);
    assert_int_equal(load[0], 70);
    assert_int_equal(load[1], 30);
    assert_int_equal(load[2], 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_priority_load_follows_envoy),
        cmocka_unit_test(test_priority_load_three_levels),
        cmocka_unit_test(test_priority_load_panic),
        cmocka_unit_test(test_locality_load_follows_envoy),
        T(test_round_robin_fails_over),
        T(test_random_fails_over),
        T(test_least_request_fails_over),
        T(test_weighted_round_robin_fails_over),
        T(test_weighted_random_fails_over),
        T(test_consistent_hash_fails_over),
        T(test_weights_hold_within_level),
        T(test_hash_keeps_keys_within_level),
        T(test_next_stays_in_level),
        T(test_one_level_keeps_nothing),
        T(test_locality_levels_share_by_weight),
        T(test_cluster_loads_from_ejections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
