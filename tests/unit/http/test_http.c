/* The header-field list (http_fields_*): lookups, removal and the
 * hop-by-hop strip every proxied message goes through. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/arena.h"
#include "http/http.h"

static void add(struct http_fields *f, struct arena *a, const char *n,
                const char *v)
{
    assert_int_equal(http_fields_add(f, a, slice_of(n), slice_of(v), 100), 0);
}

/* names lists the fields left, in order, as "a,b,c". */
static void names(const struct http_fields *f, char *out, size_t cap)
{
    size_t o = 0;

    out[0] = '\0';
    for (size_t i = 0; i < f->n; i++) {
        int w = snprintf(out + o, cap - o, "%s%.*s", i ? "," : "",
                         (int)f->v[i].name.n, f->v[i].name.p);
        assert_true(w > 0 && (size_t)w < cap - o);
        o += (size_t)w;
    }
}

static void test_strip_hop_fixed_names(void **state)
{
    struct arena a;
    struct http_fields f = {0};
    char got[256];

    (void)state;
    arena_init(&a, 4096);
    add(&f, &a, "Host", "x");
    add(&f, &a, "TE", "trailers");
    add(&f, &a, "Upgrade", "h2c");
    add(&f, &a, "Keep-Alive", "timeout=5");
    add(&f, &a, "Proxy-Connection", "keep-alive");
    add(&f, &a, "Transfer-Encoding", "chunked");
    add(&f, &a, "tea", "green"); /* same first letters, other length */
    add(&f, &a, "upgradex", "1");
    add(&f, &a, "Accept", "*/*");
    assert_int_equal(http_fields_strip_hop(&f), 5);
    names(&f, got, sizeof(got));
    assert_string_equal(got, "host,tea,upgradex,accept");
    arena_dispose(&a);
}

static void test_strip_hop_connection_tokens(void **state)
{
    struct arena a;
    struct http_fields f = {0};
    char got[256];

    (void)state;
    arena_init(&a, 4096);
    add(&f, &a, "x-a", "1");
    add(&f, &a, "Connection", " X-B ,\tclose, x-c ");
    add(&f, &a, "x-b", "2");
    add(&f, &a, "x-bb", "3");
    add(&f, &a, "x-c", "4");
    add(&f, &a, "close", "5");
    add(&f, &a, "x-d", "6");
    assert_int_equal(http_fields_strip_hop(&f), 4);
    names(&f, got, sizeof(got));
    assert_string_equal(got, "x-a,x-bb,x-d");
    arena_dispose(&a);
}

/* More Connection tokens than are read up front: the list is scanned for
 * each field instead, with the same result. */
static void test_strip_hop_many_connection_tokens(void **state)
{
    struct arena a;
    struct http_fields f = {0};
    char got[256];

    (void)state;
    arena_init(&a, 4096);
    add(&f, &a, "Connection",
        "t1, t2, t3, t4, t5, t6, t7, t8, t9, keep-alive, x-last");
    add(&f, &a, "t1", "1");
    add(&f, &a, "x-keep", "2");
    add(&f, &a, "t9", "3");
    add(&f, &a, "x-last", "4");
    assert_int_equal(http_fields_strip_hop(&f), 4);
    names(&f, got, sizeof(got));
    assert_string_equal(got, "x-keep");
    arena_dispose(&a);
}

static void test_get_and_remove(void **state)
{
    struct arena a;
    struct http_fields f = {0};
    const struct http_field *h;

    (void)state;
    arena_init(&a, 4096);
    add(&f, &a, "Via", "1");
    add(&f, &a, "viaa", "2");
    add(&f, &a, "via", "3");
    h = http_fields_get(&f, "via");
    assert_non_null(h);
    assert_int_equal(h->value.n, 1);
    assert_memory_equal(h->value.p, "1", 1);
    assert_null(http_fields_get(&f, "vi"));
    assert_int_equal(http_fields_remove(&f, "via"), 2);
    assert_int_equal(f.n, 1);
    assert_memory_equal(f.v[0].name.p, "viaa", 4);
    arena_dispose(&a);
}

static void test_value_valid(void **state)
{
    (void)state;
    assert_true(http_field_value_valid(slice_of("a\tb \x80\xff long value")));
    assert_false(http_field_value_valid(slice_of("0123456789abcdef\x01")));
    assert_false(http_field_value_valid(slice_of("0123456789ab\x7f")));
    assert_false(http_field_value_valid(slice_of("a\r\nb")));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strip_hop_fixed_names),
        cmocka_unit_test(test_strip_hop_connection_tokens),
        cmocka_unit_test(test_strip_hop_many_connection_tokens),
        cmocka_unit_test(test_get_and_remove),
        cmocka_unit_test(test_value_valid),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
