/*
 * Unit tests for src/core/json_parse.c: every value type, escapes and
 * surrogate pairs, what RFC 8259 refuses, the depth and size bounds, and
 * member lookup.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/arena.h"
#include "core/json.h"

static const struct json *parse(struct arena *a, const char *s,
                                const char **why)
{
    *why = NULL;
    return json_parse(a, s, strlen(s), 8, why);
}

static void test_values(void **state)
{
    struct arena a;
    const char *why;
    const struct json *j, *e;
    (void)state;

    arena_init(&a, 1024);
    j = parse(&a,
              " {\"s\": \"x\", \"n\": -12.5e1, \"t\": true, \"f\": false, "
              "\"z\": null, \"a\": [1, [], {}], \"o\": {\"k\": \"v\"}} ",
              &why);
    assert_non_null(j);
    assert_int_equal(j->type, JSON_OBJECT);
    assert_int_equal(j->n, 7);
    assert_true(slice_eq_str(json_string(json_get(j, "s")), "x"));
    assert_int_equal(json_get(j, "n")->type, JSON_NUMBER);
    assert_true(json_get(j, "n")->num == -125.0);
    assert_true(slice_eq_str(json_get(j, "n")->str, "-12.5e1"));
    assert_int_equal(json_get(j, "t")->type, JSON_TRUE);
    assert_int_equal(json_get(j, "f")->type, JSON_FALSE);
    assert_int_equal(json_get(j, "z")->type, JSON_NULL);
    e = json_get(j, "a");
    assert_int_equal(e->type, JSON_ARRAY);
    assert_int_equal(e->n, 3);
    assert_int_equal(e->child->next->type, JSON_ARRAY);
    assert_int_equal(e->child->next->n, 0);
    assert_int_equal(e->child->next->next->type, JSON_OBJECT);
    assert_true(
        slice_eq_str(json_string(json_get(json_get(j, "o"), "k")), "v"));
    assert_null(json_get(j, "missing"));
    assert_null(json_get(e, "s")); /* not an object */
    assert_null(json_string(json_get(j, "t")).p);
    arena_dispose(&a);
}

static void test_escapes(void **state)
{
    struct arena a;
    const char *why;
    const struct json *j;
    (void)state;

    arena_init(&a, 1024);
    j = parse(&a, "\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u20ac\\ud83d\\ude00\"",
              &why);
    assert_non_null(j);
    assert_int_equal(j->str.n, 9 + 2 + 3 + 4);
    assert_memory_equal(j->str.p,
                        "a\"\\/\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
                        j->str.n);
    /* A key with an escape is found by its decoded name. */
    j = parse(&a, "{\"a\\u0062\": 1}", &why);
    assert_non_null(json_get(j, "ab"));
    arena_dispose(&a);
}

static void test_refused(void **state)
{
    static const char *const bad[] = {
        "",
        "{",
        "[1,]",
        "{\"a\":1,}",
        "{a:1}",
        "01",
        "1.",
        "-",
        "1e",
        ".5",
        "tru",
        "nul",
        "\"abc",
        "\"\\x\"",
        "\"\\u12\"",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"a\x01\"",
        "[1 2]",
        "1 2",
        "{\"a\" 1}",
        "[\"a\":1]",
        "+1",
        "NaN",
    };
    struct arena a;
    const char *why;
    (void)state;

    arena_init(&a, 1024);
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        if (parse(&a, bad[i], &why) != NULL)
            fail_msg("accepted: %s", bad[i]);
        assert_non_null(why);
    }
    arena_dispose(&a);
}

static void test_bounds(void **state)
{
    struct arena a;
    const char *why;
    char deep[64];
    char *big;
    (void)state;

    arena_init(&a, 1024);
    /* Depth 8 is allowed, 9 is not. */
    memset(deep, '[', 8);
    memset(deep + 8, ']', 8);
    deep[16] = '\0';
    assert_non_null(parse(&a, deep, &why));
    memset(deep, '[', 9);
    memset(deep + 9, ']', 9);
    deep[18] = '\0';
    assert_null(parse(&a, deep, &why));
    assert_string_equal(why, "nested too deep");
    /* Past JSON_MAX_BYTES nothing is read. */
    big = malloc(JSON_MAX_BYTES + 1);
    assert_non_null(big);
    memset(big, ' ', JSON_MAX_BYTES + 1);
    big[0] = '1';
    assert_null(json_parse(&a, big, JSON_MAX_BYTES + 1, 8, &why));
    assert_string_equal(why, "JSON document too large");
    assert_non_null(json_parse(&a, big, JSON_MAX_BYTES, 8, &why));
    free(big);
    /* Input need not be NUL-terminated: only n bytes are read. */
    assert_non_null(json_parse(&a, "[1]xyz", 3, 8, &why));
    arena_dispose(&a);
}

/* A number of 64 characters and more is converted, not left at 0. */
static void test_long_number(void **state)
{
    struct arena a;
    const char *why;
    const struct json *j;
    char big[200];
    (void)state;

    arena_init(&a, 1024);
    snprintf(big, sizeof(big), "17%s",
             "0000000000000000000000000000000000"
             "00000000000000000000000000000000e-66");
    j = parse(&a, big, &why);
    assert_non_null(j);
    assert_int_equal(j->type, JSON_NUMBER);
    assert_true(j->num > 16.9 && j->num < 17.1);
    assert_int_equal(j->str.n, strlen(big));
    arena_dispose(&a);
}

/* json_parse_max(): a document of more values than the budget is
 * refused; as many is read. */
static void test_node_budget(void **state)
{
    struct arena a;
    const char *why = NULL;
    (void)state;

    arena_init(&a, 1024);
    /* The root, the array and three elements: 5 values. */
    assert_non_null(json_parse_max(&a, "{\"a\":[1,2,3]}", 13, 8, 5, 0, &why));
    assert_null(json_parse_max(&a, "{\"a\":[1,2,3]}", 13, 8, 4, 0, &why));
    assert_string_equal(why, "too many values");
    assert_non_null(json_parse_max(&a, "[1,2,3]", 7, 8, 4, 0, &why));
    assert_null(json_parse_max(&a, "[1,2,3,4]", 9, 8, 4, 0, &why));
    /* 0: no budget. */
    assert_non_null(json_parse_max(&a, "[1,2,3,4]", 9, 8, 0, 0, &why));
    arena_dispose(&a);
}

/* JSON_NO_DUPLICATES refuses an object with a name twice, at any depth
 * and in small and large objects; without it the first is found. */
static void test_duplicates(void **state)
{
    struct arena a;
    const char *why = NULL;
    char big[4096];
    size_t o;
    (void)state;

    arena_init(&a, 1024);
    assert_non_null(json_parse_max(&a, "{\"a\":1,\"b\":2}", 13, 8, 0,
                                   JSON_NO_DUPLICATES, &why));
    assert_null(json_parse_max(&a, "{\"a\":1,\"a\":2}", 13, 8, 0,
                               JSON_NO_DUPLICATES, &why));
    assert_string_equal(why, "duplicate member name");
    why = NULL;
    assert_null(json_parse_max(&a, "[{\"x\":{\"k\":1,\"k\":1}}]", 21, 8, 0,
                               JSON_NO_DUPLICATES, &why));
    assert_string_equal(why, "duplicate member name");
    /* An escaped name equal to a plain one is the same name. */
    assert_null(json_parse_max(&a, "{\"a\":1,\"\\u0061\":2}", 18, 8, 0,
                               JSON_NO_DUPLICATES, &why));
    /* Without the flag: kept, the first found. */
    assert_int_equal(
        json_get(json_parse_max(&a, "{\"a\":1,\"a\":2}", 13, 8, 0, 0, &why),
                 "a")
            ->num,
        1);
    /* 300 members: distinct passes, one repeated at the end does not. */
    o = (size_t)snprintf(big, sizeof(big), "{\"k0\":0");
    for (int i = 1; i < 300; i++)
        o += (size_t)snprintf(big + o, sizeof(big) - o, ",\"k%d\":0", i);
    snprintf(big + o, sizeof(big) - o, "}");
    assert_non_null(
        json_parse_max(&a, big, strlen(big), 8, 0, JSON_NO_DUPLICATES, &why));
    snprintf(big + o, sizeof(big) - o, ",\"k150\":1}");
    assert_null(
        json_parse_max(&a, big, strlen(big), 8, 0, JSON_NO_DUPLICATES, &why));
    arena_dispose(&a);
}

/* JSON_CUT_DEEP: what is nested past max_depth stands as a cut null; the
 * rest of the document is read; brackets and strings still must match. */
static void test_cut_deep(void **state)
{
    struct arena a;
    const char *why = NULL;
    const struct json *r;
    static const char doc[] = "[{\"a\":[[\"]\"]]},{\"b\":1}]";

    (void)state;
    arena_init(&a, 4096);
    assert_null(json_parse_max(&a, doc, sizeof(doc) - 1, 3, 0, 0, &why));
    r = json_parse_max(&a, doc, sizeof(doc) - 1, 3, 0, JSON_CUT_DEEP, &why);
    assert_non_null(r);
    assert_int_equal(r->n, 2);
    assert_true(json_has_cut(r->child));
    assert_false(json_has_cut(r->child->next));
    assert_int_equal(json_get(r->child, "a")->child->type, JSON_NULL);
    assert_int_equal(json_get(r->child, "a")->child->cut, 1);
    assert_null(json_parse_max(&a, "[[[[]]", 6, 2, 0, JSON_CUT_DEEP, &why));
    assert_null(json_parse_max(&a, "[[[\"]]]", 7, 2, 0, JSON_CUT_DEEP, &why));
    arena_dispose(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),      cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_refused),     cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_long_number), cmocka_unit_test(test_node_budget),
        cmocka_unit_test(test_duplicates),  cmocka_unit_test(test_cut_deep),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
