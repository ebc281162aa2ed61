#include "config.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/stats.h"

/* Two layers' counter structs, as layers declare them. */
struct low_counters {
    uint64_t opened;
    uint64_t closed;
};

struct high_counters {
    uint64_t requests;
    uint64_t errors;
    uint64_t by_class[3];
};

static const struct stats_field low_fields[] = {
    {"opened", offsetof(struct low_counters, opened), STATS_NONE},
    {"open", offsetof(struct low_counters, opened),
     offsetof(struct low_counters, closed)},
    {"closed", offsetof(struct low_counters, closed), STATS_NONE},
};
static const struct stats_desc low_desc = {"", low_fields, 3};

static const struct stats_field high_fields[] = {
    {"requests", offsetof(struct high_counters, requests), STATS_NONE},
    {"class_2", offsetof(struct high_counters, by_class[2]), STATS_NONE},
    {"errors", offsetof(struct high_counters, errors), STATS_NONE},
};
static const struct stats_desc high_desc = {"high.", high_fields, 3};

/* The owner's shard: both layers' structs. */
struct shard {
    struct low_counters low;
    struct high_counters high;
};

static const struct stats_part parts[] = {
    {&low_desc, offsetof(struct shard, low)},
    {&high_desc, offsetof(struct shard, high)},
};
static const struct stats_layout layout = {sizeof(struct shard), parts, 2};

static void test_new_is_zeroed_named_and_padded(void **state)
{
    struct stats_block *b = stats_block_new(&layout, "web", 5);
    char big[100];

    (void)state;
    assert_non_null(b);
    assert_string_equal(b->name, "web");
    assert_int_equal(b->nshards, 5);
    assert_ptr_equal(b->layout, &layout);
    /* Each shard starts on its own cache line: workers never share one. */
    assert_int_equal(b->stride % STATS_LINE, 0);
    assert_true(b->stride >= sizeof(struct shard));
    for (int i = 0; i < 5; i++) {
        struct shard *s = stats_shard(b, i);
        assert_int_equal((uintptr_t)s % STATS_LINE, 0);
        assert_int_equal(s->low.opened, 0);
        assert_int_equal(s->high.by_class[2], 0);
    }
    /* The header never shares a line with shard 0 either. */
    assert_true((uintptr_t)stats_shard(b, 0) >=
                (uintptr_t)b->name + sizeof(b->name));
    stats_block_unref(b);

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    b = stats_block_new(&layout, big, 1);
    assert_int_equal(strlen(b->name), sizeof(b->name) - 1);
    stats_block_unref(b);
}

static void test_shards_sum(void **state)
{
    struct stats_block *b = stats_block_new(&layout, "sum", 4);
    struct shard sum;

    (void)state;
    for (int i = 0; i < 4; i++) {
        struct shard *s = stats_shard(b, i);
        STAT_ADD(&s->low, opened, (uint64_t)(i + 1));
        STAT_ADD(&s->low, closed, (uint64_t)i);
        STAT_ADD(&s->high, by_class[2], 10u);
    }
    stats_sum(b, &sum);
    assert_int_equal(sum.low.opened, 1 + 2 + 3 + 4);
    assert_int_equal(sum.low.closed, 0 + 1 + 2 + 3);
    assert_int_equal(sum.high.by_class[2], 40);
    assert_int_equal(sum.high.requests, 0);
    /* One worker's own value, and a gauge kept as two counters. */
    assert_int_equal(stats_shard_value(b, 2, offsetof(struct shard, low)), 3);
    assert_int_equal(stats_field_value(&sum, 0, &low_fields[1]), 4);
    assert_int_equal(
        STAT_GET(&((struct shard *)stats_shard(b, 3))->low, opened), 4);
    stats_block_unref(b);
}

/* Shards outside a block (a cluster keeps its own array). */
static void test_sum_shards_of_an_array(void **state)
{
    struct low_counters arr[3] = {{1, 2}, {10, 20}, {100, 200}};
    struct low_counters out = {99, 99};

    (void)state;
    stats_sum_shards(arr, sizeof(arr[0]), 3, sizeof(out), &out);
    assert_int_equal(out.opened, 111);
    assert_int_equal(out.closed, 222);
    stats_sum_shards(arr, sizeof(arr[0]), 0, sizeof(out), &out);
    assert_int_equal(out.opened, 0);
}

#define NTHREADS 4
#define NADDS 200000

struct writer {
    struct stats_block *b;
    int shard;
};

static void *write_shard(void *arg)
{
    struct writer *w = arg;
    struct shard *s = stats_shard(w->b, w->shard);

    for (int i = 0; i < NADDS; i++) {
        STAT_ADD(&s->high, requests, 1);
        if (i % 2 == 0)
            STAT_ADD(&s->high, errors, 3);
    }
    return NULL;
}

static void test_concurrent_writers_exact_after_join(void **state)
{
    struct stats_block *b = stats_block_new(&layout, "threads", NTHREADS);
    pthread_t t[NTHREADS];
    struct writer w[NTHREADS];
    struct shard sum;

    (void)state;
    for (int i = 0; i < NTHREADS; i++) {
        w[i].b = b;
        w[i].shard = i;
        assert_int_equal(pthread_create(&t[i], NULL, write_shard, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    stats_sum(b, &sum);
    assert_int_equal(sum.high.requests, (uint64_t)NTHREADS * NADDS);
    assert_int_equal(sum.high.errors, (uint64_t)NTHREADS * NADDS / 2 * 3);
    assert_int_equal(sum.low.opened, 0);
    stats_block_unref(b);
}

struct seen {
    int n;
    char lines[8][64];
};

static void collect(void *arg, const char *prefix, const char *name,
                    uint64_t value)
{
    struct seen *s = arg;

    assert_true(s->n < 8);
    snprintf(s->lines[s->n++], sizeof(s->lines[0]), "%s%s=%llu", prefix, name,
             (unsigned long long)value);
}

static void test_names_table_iteration(void **state)
{
    struct stats_block *b = stats_block_new(&layout, "names", 2);
    struct shard *s0 = stats_shard(b, 0), *s1 = stats_shard(b, 1);
    struct seen seen = {0};

    (void)state;
    STAT_ADD(&s0->low, opened, 5);
    STAT_ADD(&s1->low, opened, 2);
    STAT_ADD(&s1->low, closed, 3);
    STAT_ADD(&s0->high, requests, 7);
    STAT_ADD(&s1->high, by_class[2], 6);
    STAT_ADD(&s1->high, errors, 1);
    assert_int_equal(stats_each(b, collect, &seen), 0);
    /* Every part in layout order, every field in table order, with the
     * part's prefix; "open" is the gauge opened - closed. */
    assert_int_equal(seen.n, 6);
    assert_string_equal(seen.lines[0], "opened=7");
    assert_string_equal(seen.lines[1], "open=4");
    assert_string_equal(seen.lines[2], "closed=3");
    assert_string_equal(seen.lines[3], "high.requests=7");
    assert_string_equal(seen.lines[4], "high.class_2=6");
    assert_string_equal(seen.lines[5], "high.errors=1");
    stats_block_unref(b);
}

static void test_ref_unref(void **state)
{
    struct stats_block *b = stats_block_new(&layout, "r", 2);

    (void)state;
    assert_int_equal(b->refs, 1);
    assert_ptr_equal(stats_block_ref(b), b);
    assert_int_equal(b->refs, 2);
    stats_block_unref(b);
    assert_int_equal(b->refs, 1);
    /* Still alive after the first unref: a successor keeps counting. */
    STAT_ADD(&((struct shard *)stats_shard(b, 1))->low, opened, 1);
    assert_int_equal(stats_shard_value(b, 1, offsetof(struct shard, low)), 1);
    stats_block_unref(b); /* freed: the ASan build checks */
    stats_block_unref(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_is_zeroed_named_and_padded),
        cmocka_unit_test(test_shards_sum),
        cmocka_unit_test(test_sum_shards_of_an_array),
        cmocka_unit_test(test_concurrent_writers_exact_after_join),
        cmocka_unit_test(test_names_table_iteration),
        cmocka_unit_test(test_ref_unref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
