/*
 * Unit tests for src/control/kube_cache.c: objects kept in namespace/name
 * order, a put that changes nothing, and a list applied as a diff (what a
 * relist after 410 Expired does): deletes included, nothing held twice.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "control/kube_cache.h"
#include "control/kube_proto.h"

static struct kube_object obj(const char *ns, const char *name, const char *rv,
                              const char *json)
{
    struct kube_object o = {ns, name, rv, json, strlen(json), NULL};
    return o;
}

static int put(struct kube_cache *c, const char *ns, const char *name,
               const char *rv, const char *json)
{
    struct kube_object o = obj(ns, name, rv, json);
    struct kube_cache_obj *held = NULL;
    int rc = kube_cache_put(c, "Service", &o, &held);

    assert_non_null(held);
    assert_string_equal(held->rv, rv);
    return rc;
}

static void test_order_and_put(void **state)
{
    struct kube_cache c;
    struct kube_cache_obj *o;

    (void)state;
    kube_cache_init(&c);
    assert_int_equal(put(&c, "b", "x", "1", "{}"), KUBE_CACHE_ADDED);
    assert_int_equal(put(&c, "a", "z", "2", "{}"), KUBE_CACHE_ADDED);
    /* "a-b" sorts before "a/": '-' is below '/'. */
    assert_int_equal(put(&c, "a-b", "y", "3", "{}"), KUBE_CACHE_ADDED);
    assert_int_equal(put(&c, "", "ns1", "4", "{}"), KUBE_CACHE_ADDED);
    assert_int_equal(c.n, 4);
    assert_string_equal(c.v[0].key, "/ns1");
    assert_string_equal(c.v[1].key, "a-b/y");
    assert_string_equal(c.v[2].key, "a/z");
    assert_string_equal(c.v[3].key, "b/x");
    assert_string_equal(c.v[0].input, "kubernetes:Service/-/ns1");
    assert_string_equal(c.v[2].input, "kubernetes:Service/a/z");
    o = kube_cache_find(&c, "a", "z");
    assert_non_null(o);
    assert_string_equal(o->ns, "a");
    assert_string_equal(o->name, "z");
    assert_null(kube_cache_find(&c, "a", "y"));
    assert_null(kube_cache_find(&c, "a-b", "z"));
    /* The same JSON at a new resourceVersion: nothing to rebuild. */
    assert_int_equal(put(&c, "a", "z", "9", "{}"), KUBE_CACHE_SAME);
    /* New JSON: changed, and an old error is dropped with it. */
    o = kube_cache_find(&c, "a", "z");
    o->error = strdup("bad");
    assert_int_equal(put(&c, "a", "z", "10", "{\"spec\":1}"),
                     KUBE_CACHE_CHANGED);
    o = kube_cache_find(&c, "a", "z");
    assert_null(o->error);
    assert_string_equal(o->json, "{\"spec\":1}");
    assert_int_equal(c.n, 4);
    assert_int_equal(kube_cache_del(&c, "a", "z"), 1);
    assert_int_equal(kube_cache_del(&c, "a", "z"), 0);
    assert_int_equal(c.n, 3);
    kube_cache_dispose(&c);
}

static void test_list_as_a_diff(void **state)
{
    struct kube_cache c;

    (void)state;
    kube_cache_init(&c);
    for (int i = 0; i < 100; i++) {
        char name[16];
        snprintf(name, sizeof(name), "o%03d", i);
        put(&c, "default", name, "1", "{}");
    }
    /* The relist holds the even ones and one new object: the odd ones
     * were deleted while the events were lost. */
    kube_cache_unmark(&c);
    for (int i = 0; i < 100; i += 2) {
        char name[16];
        snprintf(name, sizeof(name), "o%03d", i);
        assert_int_equal(put(&c, "default", name, "2", "{}"), KUBE_CACHE_SAME);
    }
    assert_int_equal(put(&c, "default", "new", "3", "{}"), KUBE_CACHE_ADDED);
    assert_int_equal(kube_cache_sweep(&c), 50);
    assert_int_equal(c.n, 51);
    for (size_t i = 1; i < c.n; i++)
        assert_true(strcmp(c.v[i - 1].key, c.v[i].key) < 0);
    assert_non_null(kube_cache_find(&c, "default", "o098"));
    assert_null(kube_cache_find(&c, "default", "o099"));
    assert_non_null(kube_cache_find(&c, "default", "new"));
    /* A list that holds everything drops nothing; an empty one drops all
     * (a CRD uninstalled). */
    kube_cache_unmark(&c);
    for (size_t i = 0; i < c.n; i++)
        c.v[i].seen = 1;
    assert_int_equal(kube_cache_sweep(&c), 0);
    kube_cache_unmark(&c);
    assert_int_equal(kube_cache_sweep(&c), 51);
    assert_int_equal(c.n, 0);
    kube_cache_dispose(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_put),
        cmocka_unit_test(test_list_as_a_diff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
