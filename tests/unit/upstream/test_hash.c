#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/addr.h"
#include "core/arena.h"
#include "http/http.h"
#include "upstream/hash.h"

#define KEYS 100000
#define MAXEP 16

static void make_eps(struct addr *eps, size_t n, int base_port)
{
    const char *why;

    for (size_t i = 0; i < n; i++) {
        char s[32];
        snprintf(s, sizeof(s), "10.0.%zu.%zu:%d", i / 200, i % 200 + 1,
                 base_port + (int)i);
        assert_int_equal(addr_parse(&eps[i], s, strlen(s), 0, &why), 0);
    }
}

static struct lb_hash *build_weighted(enum lb_hash_algo algo, uint64_t size,
                                      const struct addr *eps, const uint32_t *w,
                                      size_t n)
{
    struct lb_hash_conf c;
    char *err = NULL;
    struct lb_hash *h;

    memset(&c, 0, sizeof(c));
    c.key = LB_KEY_HEADER;
    c.name = "X-User";
    c.cookie_ttl_ms = -1;
    c.algo = algo;
    c.size = size;
    h = lb_hash_new(&c, eps, w, n, &err);
    assert_null(err);
    assert_non_null(h);
    return h;
}

static struct lb_hash *build(enum lb_hash_algo algo, uint64_t size,
                             const struct addr *eps, size_t n)
{
    struct lb_hash_conf c;
    char *err = NULL;
    struct lb_hash *h;

    memset(&c, 0, sizeof(c));
    c.key = LB_KEY_HEADER;
    c.name = "X-User";
    c.cookie_ttl_ms = -1;
    c.algo = algo;
    c.size = size;
    h = lb_hash_new(&c, eps, NULL, n, &err);
    assert_null(err);
    assert_non_null(h);
    return h;
}

static uint64_t key_hash(unsigned i)
{
    char k[32];
    int n = snprintf(k, sizeof(k), "user-%u", i);
    return lb_hash_bytes(k, (size_t)n, 0);
}

static uint32_t lookup(const struct lb_hash *h, uint64_t k)
{
    return lb_hash_ep(h, lb_hash_find(h, k));
}

/* The same key maps to the same endpoint, in one table and in another one
 * built from the same endpoints (another worker, another reload). */
static void same_key_same_endpoint(enum lb_hash_algo algo)
{
    struct addr eps[5];
    struct lb_hash *a, *b;

    make_eps(eps, 5, 8000);
    a = build(algo, 0, eps, 5);
    b = build(algo, 0, eps, 5);
    for (unsigned i = 0; i < 10000; i++) {
        uint32_t e = lookup(a, key_hash(i));
        assert_true(e < 5);
        assert_int_equal(e, lookup(a, key_hash(i)));
        assert_int_equal(e, lookup(b, key_hash(i)));
    }
    lb_hash_free(a);
    lb_hash_free(b);
}

static void test_ring_same_key_same_endpoint(void **state)
{
    (void)state;
    same_key_same_endpoint(LB_RING_HASH);
}

static void test_maglev_same_key_same_endpoint(void **state)
{
    (void)state;
    same_key_same_endpoint(LB_MAGLEV);
}

/*
 * Keys spread evenly over equal endpoints. Two sources of spread: the
 * table's own (a ring gives each endpoint k random arcs, whose total has
 * a standard deviation of 1/(N sqrt k) of the ring; Maglev gives each
 * endpoint M/N slots give or take one) and sampling KEYS keys (binomial).
 * Every count must be within 6 standard deviations of KEYS/N.
 */
static void check_spread(const struct lb_hash *h, size_t n, double table_sd)
{
    unsigned hits[MAXEP] = {0};
    double p = 1.0 / (double)n;
    double sd =
        sqrt((double)KEYS * p * (1 - p) + pow((double)KEYS * table_sd, 2));

    for (unsigned i = 0; i < KEYS; i++)
        hits[lookup(h, key_hash(i))]++;
    for (size_t e = 0; e < n; e++)
        assert_true(fabs((double)hits[e] - (double)KEYS * p) <= 6 * sd);
}

static void test_ring_spread(void **state)
{
    struct addr eps[5];
    struct lb_hash *h;

    (void)state;
    make_eps(eps, 5, 8000);
    /* The default ring: 1024 points, 205 per endpoint. */
    h = build(LB_RING_HASH, 0, eps, 5);
    assert_int_equal(h->size, 5 * 205);
    check_spread(h, 5, 1.0 / (5 * sqrt(205.0)));
    lb_hash_free(h);
    /* A bigger ring spreads more evenly, as its points promise. */
    h = build(LB_RING_HASH, 65536, eps, 5);
    check_spread(h, 5, 1.0 / (5 * sqrt(65536.0 / 5)));
    lb_hash_free(h);
}

static void test_maglev_spread(void **state)
{
    struct addr eps[7];
    struct lb_hash *h;
    size_t slots[7] = {0};

    (void)state;
    make_eps(eps, 7, 8000);
    h = build(LB_MAGLEV, 65537, eps, 7);
    assert_int_equal(h->size, 65537);
    /* Every slot is taken, and shares differ by one slot at most. */
    for (size_t i = 0; i < h->size; i++) {
        assert_true(h->table[i] < 7);
        slots[h->table[i]]++;
    }
    for (size_t e = 0; e < 7; e++)
        assert_true(slots[e] == 65537 / 7 || slots[e] == 65537 / 7 + 1);
    check_spread(h, 7, 1.0 / 65537);
    lb_hash_free(h);
}

/* Ring points or table slots per endpoint. */
static void count_points(const struct lb_hash *h, size_t *pts, size_t n)
{
    memset(pts, 0, n * sizeof(*pts));
    for (size_t i = 0; i < h->size; i++) {
        uint32_t e = lb_hash_ep(h, i);
        assert_true(e < n);
        pts[e]++;
    }
}

/*
 * Keys spread by weight: endpoint e gets w[e] / total of them, within 6
 * standard deviations of sampling (binomial over KEYS keys) and of the
 * table's own spread: a ring endpoint with k of K points owns k random
 * arcs whose total has a standard deviation of sqrt(k) / K of the ring;
 * Maglev slots are counted, not random (ring 0 here).
 */
static void check_weighted_spread(const struct lb_hash *h, const uint32_t *w,
                                  size_t n, int ring)
{
    unsigned hits[MAXEP] = {0};
    size_t pts[MAXEP];
    double total = 0;

    count_points(h, pts, n);
    for (size_t e = 0; e < n; e++)
        total += w[e];
    for (unsigned i = 0; i < KEYS; i++)
        hits[lookup(h, key_hash(i))]++;
    for (size_t e = 0; e < n; e++) {
        double p = w[e] / total;
        double table_sd = ring ? sqrt((double)pts[e]) / (double)h->size : 0;
        double sd =
            sqrt((double)KEYS * p * (1 - p) + pow((double)KEYS * table_sd, 2));
        assert_true(fabs((double)hits[e] - (double)KEYS * p) <= 6 * sd);
    }
}

/*
 * Envoy's weighted ring: the lightest endpoint gets its share of the
 * minimum ring size rounded up (1024 x 1/10 -> 103 points), and the ring
 * is scaled so every endpoint gets points in proportion to its weight
 * (103 : 206 : 721). Keys follow.
 */
static void test_ring_weighted_points_follow_weights(void **state)
{
    struct addr eps[3];
    const uint32_t w[3] = {1, 2, 7};
    struct lb_hash *h;
    size_t pts[3];

    (void)state;
    make_eps(eps, 3, 8000);
    h = build_weighted(LB_RING_HASH, 0, eps, w, 3);
    count_points(h, pts, 3);
    assert_int_equal(pts[0], 103);
    assert_int_equal(pts[1], 206);
    assert_int_equal(pts[2], 721);
    assert_int_equal(h->size, 1030);
    check_weighted_spread(h, w, 3, 1);
    lb_hash_free(h);
    /* A bigger minimum: more points, the same proportions. */
    h = build_weighted(LB_RING_HASH, 65536, eps, w, 3);
    count_points(h, pts, 3);
    assert_int_equal(pts[0], 6554);
    assert_int_equal(pts[1], 2 * 6554);
    assert_int_equal(pts[2], 7 * 6554);
    check_weighted_spread(h, w, 3, 1);
    lb_hash_free(h);
}

/* An endpoint keeps the points it had when its weight grows: the points
 * are "<address>_<i>" for i below its count, so it only adds some. */
static void test_ring_heavier_endpoint_keeps_its_keys(void **state)
{
    struct addr eps[3];
    const uint32_t before[3] = {2, 2, 4}, after[3] = {2, 2, 8};
    struct lb_hash *a, *b;

    (void)state;
    make_eps(eps, 3, 8000);
    a = build_weighted(LB_RING_HASH, 0, eps, before, 3);
    b = build_weighted(LB_RING_HASH, 0, eps, after, 3);
    for (unsigned i = 0; i < KEYS; i++)
        if (lookup(a, key_hash(i)) == 2)
            assert_int_equal(lookup(b, key_hash(i)), 2);
    lb_hash_free(a);
    lb_hash_free(b);
}

/*
 * Envoy's weighted Maglev fill: the heaviest endpoint takes a slot every
 * round, the others every max/weight rounds, so slots end up in
 * proportion to weight, within a round's rounding (a slot or two each);
 * every slot is taken.
 */
static void test_maglev_weighted_slots_follow_weights(void **state)
{
    struct addr eps[4];
    const uint32_t w[4] = {1, 2, 7, 3};
    struct lb_hash *h;
    size_t slots[4];

    (void)state;
    make_eps(eps, 4, 8000);
    h = build_weighted(LB_MAGLEV, 65537, eps, w, 4);
    assert_int_equal(h->size, 65537);
    count_points(h, slots, 4);
    assert_int_equal(slots[0] + slots[1] + slots[2] + slots[3], 65537);
    for (size_t e = 0; e < 4; e++)
        assert_true(fabs((double)slots[e] - 65537.0 * w[e] / 13) <= 2);
    check_weighted_spread(h, w, 4, 0);
    lb_hash_free(h);
}

/*
 * Removing one of N endpoints moves its own keys (1/N of them) and few
 * others. For a ring, the remaining endpoints gain points (ceil(min/N) to
 * ceil(min/(N-1)) each), and each new point takes the keys just before it
 * from whoever had them: at most (N-1)(k'-k)/(N k) of the ring, a little
 * over 1/N more. Maglev's paper bounds its extra moves similarly. So:
 * the removed endpoint's keys all move, and at most 2/N of all keys move,
 * with 6 standard deviations of sampling room.
 */
static void removal_moves_few(enum lb_hash_algo algo, uint64_t size)
{
    enum { N = 10 };
    struct addr eps[N], rest[N - 1];
    struct lb_hash *all, *less;
    const size_t gone = 3;
    unsigned moved = 0, own = 0;
    double bound;

    make_eps(eps, N, 8000);
    for (size_t i = 0, j = 0; i < N; i++)
        if (i != gone)
            rest[j++] = eps[i];
    all = build(algo, size, eps, N);
    less = build(algo, size, rest, N - 1);
    for (unsigned i = 0; i < KEYS; i++) {
        uint32_t before = lookup(all, key_hash(i));
        uint32_t after = lookup(less, key_hash(i));
        /* Endpoints are known by address: map back to the full list. */
        uint32_t after_full = after >= gone ? after + 1 : after;
        if (before == gone) {
            own++;
            assert_true(after_full != gone);
        }
        if (after_full != before)
            moved++;
    }
    bound = 2.0 * KEYS / N + 6 * sqrt(KEYS * (2.0 / N) * (1 - 2.0 / N));
    assert_true(moved >= own);
    assert_true((double)moved <= bound);
    /* And the removed endpoint had its fair share to move. */
    assert_true(own > 0);
    lb_hash_free(all);
    lb_hash_free(less);
}

static void test_ring_removal_moves_few(void **state)
{
    (void)state;
    removal_moves_few(LB_RING_HASH, 0);
    removal_moves_few(LB_RING_HASH, 65536);
}

static void test_maglev_removal_moves_few(void **state)
{
    (void)state;
    removal_moves_few(LB_MAGLEV, 65537);
}

static void test_maglev_size_must_be_prime(void **state)
{
    struct addr eps[3];
    struct lb_hash_conf c;
    char *err = NULL;

    (void)state;
    make_eps(eps, 3, 8000);
    memset(&c, 0, sizeof(c));
    c.key = LB_KEY_SOURCE_IP;
    c.algo = LB_MAGLEV;
    c.size = 65536;
    assert_null(lb_hash_new(&c, eps, NULL, 3, &err));
    assert_non_null(err);
    assert_non_null(strstr(err, "65536 must be a prime"));
    free(err);
    c.size = LB_MAGLEV_MAX; /* 5000011 is prime, but Istio's limit */
    assert_true(lb_is_prime(LB_MAGLEV_MAX));
    assert_null(lb_hash_new(&c, eps, NULL, 3, &err));
    free(err);
    assert_true(lb_is_prime(2) && lb_is_prime(3) && lb_is_prime(65537) &&
                lb_is_prime(4999999));
    assert_false(lb_is_prime(0) || lb_is_prime(1) || lb_is_prime(4) ||
                 lb_is_prime(65535) || lb_is_prime(5000001));
    /* No endpoints: an empty table, never looked up. */
    c.size = 13;
    {
        struct lb_hash *h = lb_hash_new(&c, eps, NULL, 0, &err);
        assert_non_null(h);
        assert_int_equal(h->size, 0);
        lb_hash_free(h);
    }
}

/* A request with its fields, for the key tests. */
struct req {
    struct arena a;
    struct http_request r;
};

static void req_init(struct req *q, const char *path)
{
    memset(q, 0, sizeof(*q));
    arena_init(&q->a, 4096);
    q->r.path = slice_of(path);
}

static void req_add(struct req *q, const char *name, const char *value)
{
    assert_int_equal(http_fields_add(&q->r.fields, &q->a, slice_of(name),
                                     slice_of(value), 100),
                     0);
}

static struct lb_hash *policy(enum lb_key_kind key, const char *name,
                              const char *path, int64_t ttl)
{
    struct lb_hash_conf c;
    struct addr eps[2];
    char *err = NULL;
    struct lb_hash *h;

    make_eps(eps, 2, 8000);
    memset(&c, 0, sizeof(c));
    c.key = key;
    c.name = name;
    c.cookie_path = path;
    c.cookie_ttl_ms = ttl;
    h = lb_hash_new(&c, eps, NULL, 2, &err);
    assert_non_null(h);
    return h;
}

static const struct slice no_src = {"", 0};
static const struct slice conn = {"conn-1", 6};

static void test_header_key(void **state)
{
    struct lb_hash *h = policy(LB_KEY_HEADER, "X-User", NULL, -1);
    struct req a, b, c;
    uint64_t ha, hb, hc;
    struct slice sc;

    (void)state;
    req_init(&a, "/");
    req_add(&a, "x-user", "alice");
    req_init(&b, "/other?x=1");
    req_add(&b, "accept", "*/*");
    req_add(&b, "X-User", "alice");
    req_init(&c, "/");
    req_add(&c, "x-user", "bob");
    assert_int_equal(lb_hash_request(h, &a.r, no_src, conn, &a.a, &ha, &sc), 1);
    assert_null(sc.p);
    assert_int_equal(lb_hash_request(h, &b.r, no_src, conn, &b.a, &hb, &sc), 1);
    assert_int_equal(lb_hash_request(h, &c.r, no_src, conn, &c.a, &hc, &sc), 1);
    assert_true(ha == hb);
    assert_true(ha != hc);
    /* No such header: no key. */
    a.r.fields.n = 0;
    req_add(&a, "x-users", "alice");
    assert_int_equal(lb_hash_request(h, &a.r, no_src, conn, &a.a, &ha, &sc), 0);
    arena_dispose(&a.a);
    arena_dispose(&b.a);
    arena_dispose(&c.a);
    lb_hash_free(h);
}

static void test_cookie_key(void **state)
{
    struct lb_hash *h = policy(LB_KEY_COOKIE, "sticky", NULL, -1);
    struct req a, b, c, d;
    uint64_t ha, hb, hc;
    struct slice sc;

    (void)state;
    req_init(&a, "/");
    req_add(&a, "cookie", "theme=dark; sticky=abc123; lang=en");
    req_init(&b, "/");
    /* HTTP/2 sends one field per cookie; a quoted value is the same. */
    req_add(&b, "cookie", "theme=light");
    req_add(&b, "cookie", "sticky=\"abc123\"");
    req_init(&c, "/");
    req_add(&c, "cookie", "nosticky=abc123;sticky2=abc123");
    req_init(&d, "/");
    req_add(&d, "cookie", "");
    assert_int_equal(lb_hash_request(h, &a.r, no_src, conn, &a.a, &ha, &sc), 1);
    assert_int_equal(lb_hash_request(h, &b.r, no_src, conn, &b.a, &hb, &sc), 1);
    assert_true(ha == hb);
    /* Without the cookie and without a ttl: no key, nothing generated. */
    assert_int_equal(lb_hash_request(h, &c.r, no_src, conn, &c.a, &hc, &sc), 0);
    assert_null(sc.p);
    assert_int_equal(lb_hash_request(h, &d.r, no_src, conn, &d.a, &hc, &sc), 0);
    arena_dispose(&a.a);
    arena_dispose(&b.a);
    arena_dispose(&c.a);
    arena_dispose(&d.a);
    lb_hash_free(h);
}

static void test_cookie_generated_with_ttl(void **state)
{
    struct lb_hash *h = policy(LB_KEY_COOKIE, "sticky", "/app", 3600 * 1000);
    struct lb_hash *session = policy(LB_KEY_COOKIE, "s", NULL, 0);
    struct req a, b, c;
    uint64_t ha, hb, hc;
    struct slice sc, sc2;
    char value[64], line[256];

    (void)state;
    req_init(&a, "/");
    assert_int_equal(lb_hash_request(h, &a.r, no_src, conn, &a.a, &ha, &sc), 1);
    assert_non_null(sc.p);
    snprintf(line, sizeof(line), "%.*s", (int)sc.n, sc.p);
    assert_int_equal(sscanf(line, "sticky=\"%16[0-9a-f]\"", value), 1);
    assert_int_equal(strlen(value), 16);
    assert_non_null(strstr(line, "; Max-Age=3600"));
    assert_non_null(strstr(line, "; Path=/app"));
    assert_non_null(strstr(line, "; HttpOnly"));
    /* The same connection gets the same cookie. */
    assert_int_equal(lb_hash_request(h, &a.r, no_src, conn, &a.a, &hb, &sc2),
                     1);
    assert_true(ha == hb && slice_eq(sc, sc2));
    /* The client sends it back: same hash, nothing generated. */
    req_init(&b, "/");
    {
        char ck[64];
        snprintf(ck, sizeof(ck), "sticky=%s", value);
        req_add(&b, "cookie", ck);
    }
    assert_int_equal(lb_hash_request(h, &b.r, no_src, conn, &b.a, &hb, &sc), 1);
    assert_null(sc.p);
    assert_true(ha == hb);
    /* ttl 0s: a session cookie, no Max-Age. */
    req_init(&c, "/");
    assert_int_equal(
        lb_hash_request(session, &c.r, no_src, conn, &c.a, &hc, &sc), 1);
    snprintf(line, sizeof(line), "%.*s", (int)sc.n, sc.p);
    assert_null(strstr(line, "Max-Age"));
    assert_null(strstr(line, "Path"));
    arena_dispose(&a.a);
    arena_dispose(&b.a);
    arena_dispose(&c.a);
    lb_hash_free(h);
    lb_hash_free(session);
}

static void test_source_ip_key(void **state)
{
    struct lb_hash *h = policy(LB_KEY_SOURCE_IP, NULL, NULL, -1);
    struct req a;
    uint64_t h1, h2, h3;
    struct slice sc;

    (void)state;
    req_init(&a, "/");
    assert_int_equal(
        lb_hash_request(h, &a.r, slice_of("192.0.2.7"), conn, &a.a, &h1, &sc),
        1);
    assert_int_equal(lb_hash_request(h, &a.r, slice_of("192.0.2.7"),
                                     slice_of("other-conn"), &a.a, &h2, &sc),
                     1);
    assert_int_equal(
        lb_hash_request(h, &a.r, slice_of("192.0.2.8"), conn, &a.a, &h3, &sc),
        1);
    assert_true(h1 == h2 && h1 != h3);
    arena_dispose(&a.a);
    lb_hash_free(h);
}

static void test_query_key(void **state)
{
    struct lb_hash *h = policy(LB_KEY_QUERY, "user", NULL, -1);
    struct req a, b, c, d;
    uint64_t ha, hb, hc;
    struct slice sc, v;

    (void)state;
    req_init(&a, "/p?user=alice&x=1");
    req_init(&b, "/q?x=2&user=alice&user=bob");
    req_init(&c, "/p?users=alice&xuser=alice");
    req_init(&d, "/p");
    assert_int_equal(lb_hash_request(h, &a.r, no_src, conn, &a.a, &ha, &sc), 1);
    assert_int_equal(lb_hash_request(h, &b.r, no_src, conn, &b.a, &hb, &sc), 1);
    assert_true(ha == hb);
    assert_int_equal(lb_hash_request(h, &c.r, no_src, conn, &c.a, &hc, &sc), 0);
    assert_int_equal(lb_hash_request(h, &d.r, no_src, conn, &d.a, &hc, &sc), 0);
    /* A bare name has an empty value; so does "name=". */
    assert_int_equal(lb_query_value(slice_of("/?a&user"), slice_of("user"), &v),
                     1);
    assert_int_equal(v.n, 0);
    assert_int_equal(lb_query_value(slice_of("/?user="), slice_of("user"), &v),
                     1);
    assert_int_equal(v.n, 0);
    assert_int_equal(lb_query_value(slice_of("/?"), slice_of("user"), &v), 0);
    arena_dispose(&a.a);
    arena_dispose(&b.a);
    arena_dispose(&c.a);
    arena_dispose(&d.a);
    lb_hash_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_same_key_same_endpoint),
        cmocka_unit_test(test_maglev_same_key_same_endpoint),
        cmocka_unit_test(test_ring_spread),
        cmocka_unit_test(test_maglev_spread),
        cmocka_unit_test(test_ring_removal_moves_few),
        cmocka_unit_test(test_maglev_removal_moves_few),
        cmocka_unit_test(test_maglev_size_must_be_prime),
        cmocka_unit_test(test_ring_weighted_points_follow_weights),
        cmocka_unit_test(test_ring_heavier_endpoint_keeps_its_keys),
        cmocka_unit_test(test_maglev_weighted_slots_follow_weights),
        cmocka_unit_test(test_header_key),
        cmocka_unit_test(test_cookie_key),
        cmocka_unit_test(test_cookie_generated_with_ttl),
        cmocka_unit_test(test_source_ip_key),
        cmocka_unit_test(test_query_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
