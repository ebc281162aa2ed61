/*
 * Unit tests for src/core/strmap.c: put/get/replace, growth past many
 * resizes with every key still found, iteration visiting each key once,
 * and absent keys.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/strmap.h"

static void test_put_get_replace(void **state)
{
    struct strmap m;
    int a, b;

    (void)state;
    strmap_init(&m);
    assert_null(strmap_get(&m, "x"));
    assert_int_equal(strmap_put(&m, "x", &a), 0);
    assert_ptr_equal(strmap_get(&m, "x"), &a);
    assert_null(strmap_get(&m, "y"));
    assert_null(strmap_get(&m, ""));
    assert_int_equal(strmap_put(&m, "x", &b), 0);
    assert_ptr_equal(strmap_get(&m, "x"), &b);
    assert_int_equal(m.n, 1);
    assert_int_equal(strmap_put(&m, "", &a), 0);
    assert_ptr_equal(strmap_get(&m, ""), &a);
    strmap_dispose(&m);
    assert_int_equal(m.n, 0);
    assert_null(strmap_get(&m, "x"));
}

static void test_many_keys(void **state)
{
    enum { N = 20000 };
    static char vals[N];
    struct strmap m;
    char key[32];
    size_t pos = 0, seen = 0;
    const char *k;
    void *v;

    (void)state;
    strmap_init(&m);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "reviews.default.svc|v%d|9080", i);
        assert_int_equal(strmap_put(&m, key, &vals[i]), 0);
    }
    assert_int_equal(m.n, N);
    assert_true(m.cap >= 2 * (size_t)N);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "reviews.default.svc|v%d|9080", i);
        assert_ptr_equal(strmap_get(&m, key), &vals[i]);
    }
    snprintf(key, sizeof(key), "reviews.default.svc|v%d|9080", N);
    assert_null(strmap_get(&m, key));
    /* Every key once, with its own value. */
    while (strmap_next(&m, &pos, &k, &v)) {
        int i;
        assert_int_equal(sscanf(k, "reviews.default.svc|v%d|9080", &i), 1);
        assert_ptr_equal(v, &vals[i]);
        vals[i]++;
        seen++;
    }
    assert_int_equal(seen, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(vals[i], 1);
    strmap_dispose(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_replace),
        cmocka_unit_test(test_many_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
