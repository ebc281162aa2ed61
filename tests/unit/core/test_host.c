/*
 * Unit tests for src/core/host.c: host names and patterns by the Istio /
 * Envoy rules (exact, "*.suffix" over one or more labels, "*") and by
 * RFC 6125 for certificate names (a wildcard is one label).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/host.h"

static int match(const char *pattern, const char *host)
{
    return host_match(pattern, host, strlen(host));
}

static int cert(const char *pattern, const char *host)
{
    return host_cert_match(pattern, host, strlen(host));
}

static size_t rank(const char *pattern, const char *host)
{
    return host_match_rank(pattern, host, strlen(host));
}

static void test_kind(void **state)
{
    (void)state;
    assert_int_equal(host_pattern_kind("*"), HOST_ANY);
    assert_int_equal(host_pattern_kind("*.example.com"), HOST_SUFFIX);
    assert_int_equal(host_pattern_kind("example.com"), HOST_EXACT);
    /* Only a left-most "*." makes a wildcard. */
    assert_int_equal(host_pattern_kind("*example.com"), HOST_EXACT);
    assert_int_equal(host_pattern_kind("a.*.com"), HOST_EXACT);
    assert_int_equal(host_pattern_kind("**"), HOST_EXACT);
    assert_int_equal(host_pattern_kind(""), HOST_EXACT);
}

static void test_eq(void **state)
{
    (void)state;
    assert_true(host_eq("Example.COM", 11, "example.com", 11));
    assert_false(host_eq("example.com", 11, "example.co", 10));
    assert_true(host_eq("", 0, "", 0));
    /* Slices: only n bytes count. */
    assert_true(host_eq("a.example.com:443", 13, "A.EXAMPLE.COM", 13));
}

static void test_match_exact(void **state)
{
    (void)state;
    assert_true(match("example.com", "example.com"));
    assert_true(match("example.com", "EXAMPLE.com"));
    assert_true(match("Example.Com", "example.com"));
    assert_false(match("example.com", "a.example.com"));
    assert_false(match("example.com", "example.co"));
    assert_false(match("example.com", ""));
    assert_true(match("10.0.0.1", "10.0.0.1"));
    /* A trailing dot is the caller's to strip. */
    assert_false(match("example.com", "example.com."));
    /* The name is a slice: a port after it is not read. */
    assert_true(host_match("example.com", "example.com:8080", 11));
}

static void test_match_suffix_multi_label(void **state)
{
    (void)state;
    assert_true(match("*.example.com", "a.example.com"));
    assert_true(match("*.example.com", "a.b.example.com"));
    assert_true(match("*.example.com", "A.Example.COM"));
    assert_false(match("*.example.com", "example.com"));
    assert_false(match("*.example.com", ".example.com"));
    assert_false(match("*.example.com", "aexample.com"));
    assert_false(match("*.example.com", ""));
}

static void test_match_any(void **state)
{
    (void)state;
    assert_true(match("*", "example.com"));
    assert_true(match("*", "a.b.c"));
    assert_true(match("*", ""));
}

static void test_rank(void **state)
{
    (void)state;
    assert_int_equal(rank("*", "a.example.com"), 1);
    assert_int_equal(rank("*.example.com", "a.example.com"),
                     2 + strlen("*.example.com"));
    assert_int_equal(rank("a.example.com", "a.example.com"), SIZE_MAX);
    assert_int_equal(rank("b.example.com", "a.example.com"), 0);
    assert_int_equal(rank("*.example.com", "example.com"), 0);
    /* The longer suffix ranks higher; exact above any wildcard. */
    assert_true(rank("*.b.example.com", "a.b.example.com") >
                rank("*.example.com", "a.b.example.com"));
    assert_true(rank("*.example.com", "a.example.com") > rank("*", "x"));
    /* No name (no SNI): only "*". */
    assert_int_equal(rank("*", ""), 1);
    assert_int_equal(rank("*.example.com", ""), 0);
}

/* RFC 6125: the wildcard is exactly one label; the multi-label rule of
 * host_match() does not apply to certificate names. */
static void test_cert_one_label(void **state)
{
    (void)state;
    assert_true(cert("*.example.com", "a.example.com"));
    assert_true(cert("*.example.com", "A.EXAMPLE.com"));
    assert_false(cert("*.example.com", "a.b.example.com"));
    assert_false(cert("*.example.com", "example.com"));
    assert_false(cert("*.example.com", ".example.com"));
    assert_false(cert("*.example.com", ""));
    assert_true(cert("example.com", "Example.com"));
    assert_false(cert("example.com", "a.example.com"));
    /* "*" is not a wildcard for a certificate. */
    assert_false(cert("*", "example.com"));
    assert_true(cert("*", "*"));

    /* The same pattern and name under the two rules. */
    assert_true(match("*.example.com", "a.b.example.com"));
    assert_false(cert("*.example.com", "a.b.example.com"));
}

static void test_covers(void **state)
{
    (void)state;
    assert_true(host_covers("*", "*"));
    assert_true(host_covers("*", "*.example.com"));
    assert_true(host_covers("*", "a.example.com"));
    assert_true(host_covers("*.example.com", "a.example.com"));
    assert_true(host_covers("*.example.com", "a.b.example.com"));
    assert_true(host_covers("*.example.com", "*.b.example.com"));
    assert_true(host_covers("*.example.com", "*.example.com"));
    assert_true(host_covers("*.Example.com", "A.example.COM"));
    assert_false(host_covers("*.example.com", "*"));
    assert_false(host_covers("*.example.com", "example.com"));
    assert_false(host_covers("*.b.example.com", "*.example.com"));
    assert_true(host_covers("a.example.com", "A.Example.com"));
    assert_false(host_covers("a.example.com", "*.example.com"));
    assert_false(host_covers("a.example.com", "*"));
    assert_false(host_covers("a.example.com", "b.example.com"));
}

static void test_intersect(void **state)
{
    (void)state;
    assert_true(host_intersect("*.example.com", "a.example.com"));
    assert_true(host_intersect("a.example.com", "*.example.com"));
    assert_true(host_intersect("*.b.example.com", "*.example.com"));
    assert_true(host_intersect("*", "a.example.com"));
    assert_true(host_intersect("a.example.com", "*"));
    assert_true(host_intersect("*", "*"));
    assert_false(host_intersect("*.example.com", "*.example.org"));
    assert_false(host_intersect("*.example.com", "example.com"));
    assert_false(host_intersect("a.example.com", "b.example.com"));
}

/* Moved from tests/unit/config/test_resource.c with the code. */
static void test_host_matching(void **state)
{
    (void)state;
    assert_true(host_covers("*", "a.example.com"));
    assert_true(host_covers("*.example.com", "a.example.com"));
    assert_true(host_covers("*.example.com", "*.a.example.com"));
    assert_false(host_covers("*.example.com", "example.com"));
    assert_false(host_covers("*.example.com", "*"));
    assert_true(host_covers("A.example.com", "a.EXAMPLE.com"));
    assert_false(host_covers("a.example.com", "*.example.com"));
    assert_true(host_intersect("a.example.com", "*.example.com"));
    assert_false(host_intersect("a.example.org", "*.example.com"));
}

/* scan_best() is what a scan of patterns in order gives for (host, n):
 * the index of the best host_match_rank(), the first among equals, or
 * -1. host_index_find() must agree with it. */
static long scan_best(const char *const *pats, size_t np, const char *host,
                      size_t n)
{
    long best = -1;
    size_t best_rank = 0;

    for (size_t i = 0; i < np; i++) {
        size_t r = host_match_rank(pats[i], host, n);
        if (r > best_rank) {
            best = (long)i;
            best_rank = r;
        }
    }
    return best;
}

/* The host index answers what a scan answers: exact, then the longest
 * suffix, then "*", the first added among equal patterns, any case. */
static void test_index_agrees_with_scan(void **state)
{
    static const char *const pats[] = {"a.example.com",
                                       "*.example.com",
                                       "*.b.example.com",
                                       "*",
                                       "A.Example.com",
                                       "*.com",
                                       "b.example.com",
                                       "*.example.com",
                                       "x.y",
                                       "*"};
    static const char *const names[] = {"a.example.com",
                                        "A.EXAMPLE.COM",
                                        "b.example.com",
                                        "c.b.example.com",
                                        "z.example.com",
                                        "example.com",
                                        "com",
                                        "q.com",
                                        "x.y",
                                        "w.x.y",
                                        "",
                                        "a.b.c.d.example.com",
                                        ".example.com",
                                        "other.org"};
    size_t np = sizeof(pats) / sizeof(*pats);
    struct host_index x;

    (void)state;
    for (size_t k = 0; k <= np; k++) {
        /* Every prefix of the list, so "*" present or absent and
         * duplicates before and after. */
        host_index_init(&x);
        for (size_t i = 0; i < k; i++)
            assert_true(host_index_add(&x, pats[i], i) >= 0);
        for (size_t j = 0; j < sizeof(names) / sizeof(*names); j++) {
            size_t n = strlen(names[j]);
            long want = scan_best(pats, k, names[j], n);
            long got = host_index_find(&x, names[j], n);
            if (want != got)
                fail_msg("%zu patterns, name '%s': scan %ld, index %ld", k,
                         names[j], want, got);
        }
        host_index_dispose(&x);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kind),
        cmocka_unit_test(test_eq),
        cmocka_unit_test(test_match_exact),
        cmocka_unit_test(test_match_suffix_multi_label),
        cmocka_unit_test(test_match_any),
        cmocka_unit_test(test_rank),
        cmocka_unit_test(test_cert_one_label),
        cmocka_unit_test(test_covers),
        cmocka_unit_test(test_intersect),
        cmocka_unit_test(test_host_matching),
        cmocka_unit_test(test_index_agrees_with_scan),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
