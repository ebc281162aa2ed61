#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/series.h"

#define LABELS(s) series_labels_new((s), strlen(s), 0)

static void test_same_labels_same_series(void **state)
{
    struct series_table *t = series_table_new(2, 10);
    struct series_labels *a = LABELS("reporter=\"source\"");
    struct series_labels *b = LABELS("destination_app=\"x\"");
    /* The same bytes compiled again (a later snapshot): another object. */
    struct series_labels *b2 = LABELS("destination_app=\"x\"");
    struct series *s1, *s2, *s3, *other;

    (void)state;
    assert_non_null(t);
    s1 = series_get(&t->shards[0], a, b, "code=\"200\"", 10);
    assert_non_null(s1);
    assert_string_equal(
        s1->text, "reporter=\"source\",destination_app=\"x\",code=\"200\"");
    s2 = series_get(&t->shards[0], a, b, "code=\"200\"", 10);
    s3 = series_get(&t->shards[0], a, b2, "code=\"200\"", 10);
    assert_ptr_equal(s1, s2);
    assert_ptr_equal(s1, s3);
    other = series_get(&t->shards[0], a, b, "code=\"503\"", 10);
    assert_ptr_not_equal(s1, other);
    /* Runs do not run into each other: "ab"+"c" is not "a"+"bc". */
    assert_ptr_not_equal(series_get(&t->shards[0], a, NULL, "x", 1),
                         series_get(&t->shards[0], NULL, a, "x", 1));
    assert_int_equal(series_count(&t->shards[0]), 4);
    /* Each worker has its own table. */
    assert_int_equal(series_count(&t->shards[1]), 0);
    /* The table holds its references: the runs outlive their builders. */
    series_labels_unref(a);
    series_labels_unref(b);
    series_labels_unref(b2);
    assert_string_equal(series_at(&t->shards[0], 0)->text, s1->text);
    series_table_free(t);
}

static void test_bound_counts_overflow(void **state)
{
    struct series_table *t = series_table_new(1, 3);
    char c[16];

    (void)state;
    for (int i = 0; i < 3; i++) {
        snprintf(c, sizeof(c), "v=\"%d\"", i);
        assert_non_null(series_get(&t->shards[0], NULL, NULL, c, strlen(c)));
    }
    /* One over the bound: refused and counted... */
    assert_null(series_get(&t->shards[0], NULL, NULL, "v=\"3\"", 5));
    assert_int_equal(t->shards[0].overflow, 1);
    /* ...while a label set it holds is still found. */
    assert_non_null(series_get(&t->shards[0], NULL, NULL, "v=\"0\"", 5));
    assert_int_equal(series_count(&t->shards[0]), 3);
    series_table_free(t);
    assert_null(series_table_new(1, 0));
}

static void test_more_series_than_a_chunk(void **state)
{
    struct series_table *t = series_table_new(1, 500);
    char c[16];

    (void)state;
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 500; i++) {
            struct series *s;
            snprintf(c, sizeof(c), "v=\"%d\"", i);
            s = series_get(&t->shards[0], NULL, NULL, c, strlen(c));
            assert_non_null(s);
            series_add(s, SERIES_REQUESTS, 1);
        }
    assert_int_equal(series_count(&t->shards[0]), 500);
    for (size_t i = 0; i < 500; i++)
        assert_int_equal(series_at(&t->shards[0], i)->c[SERIES_REQUESTS], 2);
    series_table_free(t);
}

static void test_envoy_buckets(void **state)
{
    struct series_table *t = series_table_new(1, 1);
    struct series *s = series_get(&t->shards[0], NULL, NULL, "", 0);
    const struct series_hist *h = &s->h[SERIES_DURATION];

    (void)state;
    series_observe(s, SERIES_DURATION, 0);       /* le 0.5 */
    series_observe(s, SERIES_DURATION, 1);       /* le 1 */
    series_observe(s, SERIES_DURATION, 2);       /* le 5 */
    series_observe(s, SERIES_DURATION, 3600000); /* le 3600000 */
    series_observe(s, SERIES_DURATION, 3600001); /* +Inf */
    assert_int_equal(h->bucket[0], 1);
    assert_int_equal(h->bucket[1], 1);
    assert_int_equal(h->bucket[2], 1);
    assert_int_equal(h->bucket[SERIES_NBOUNDS - 1], 1);
    assert_int_equal(h->bucket[SERIES_NBOUNDS], 1);
    assert_int_equal(h->sum, 7200004);
    assert_int_equal(series_bounds_x10[0], 5);
    assert_int_equal(series_bounds_x10[SERIES_NBOUNDS - 1], 36000000);
    series_table_free(t);
}

static void test_escape(void **state)
{
    char out[16];

    (void)state;
    assert_int_equal(series_escape(out, sizeof(out), "a\"b\\c\nd\te", 9), 12);
    assert_string_equal(out, "a\\\"b\\\\c\\nd_e");
    /* Truncated, never a dangling backslash. */
    assert_int_equal(series_escape(out, 4, "ab\"", 3), 2);
    assert_string_equal(out, "ab");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_labels_same_series),
        cmocka_unit_test(test_bound_counts_overflow),
        cmocka_unit_test(test_more_series_than_a_chunk),
        cmocka_unit_test(test_envoy_buckets),
        cmocka_unit_test(test_escape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
