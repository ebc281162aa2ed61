/*
 * Unit tests for the request-target checks of src/http/http.c
 * (http_path_check, http_query_check, http_target_check): what a Lua
 * script may make a request's path and query. Each rule is tried with a
 * target that passes and one that breaks only that rule, so a test names
 * the rule that refused it by its reason.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http/http.h"

static int path_ok(const char *p, const char **why)
{
    return http_path_check((struct slice){p, strlen(p)}, why);
}

static int query_ok(const char *q, const char **why)
{
    return http_query_check((struct slice){q, strlen(q)}, why);
}

static int target_ok(const char *t, const char **why)
{
    return http_target_check((struct slice){t, strlen(t)}, why);
}

static void good_paths_pass(void **state)
{
    const char *why = NULL;
    static const char *const good[] = {
        "/",        "/a/b",          "/a%20b", "/%2F%2f", "/~user/x.y-z_",
        "/a;b=c,d", "/!$&'()*+,;=:@"};

    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        if (path_ok(good[i], &why) != 0)
            fail_msg("'%s' refused: %s", good[i], why);
}

static void path_must_start_with_slash(void **state)
{
    const char *why = NULL;

    (void)state;
    assert_int_equal(path_ok("", &why), -1);
    assert_non_null(strstr(why, "start with '/'"));
    assert_int_equal(path_ok("a/b", &why), -1);
    assert_int_equal(path_ok("http://x/", &why), -1);
    assert_int_equal(path_ok("*", &why), -1);
}

/* CR, LF, NUL, space, DEL, TAB and 8-bit bytes: each alone is refused. */
static void path_control_and_space_refused(void **state)
{
    const char bad[] = {'\r', '\n', '\0',       ' ',
                        0x7f, '\t', (char)0x80, (char)0xff};
    const char *why = NULL;

    (void)state;
    for (size_t i = 0; i < sizeof(bad); i++) {
        char p[4] = {'/', 'a', bad[i], 'b'};
        assert_int_equal(http_path_check((struct slice){p, 4}, &why), -1);
        assert_non_null(strstr(why, "control character"));
        assert_int_equal(http_query_check((struct slice){p + 1, 3}, &why), -1);
    }
}

static void fragment_refused(void **state)
{
    const char *why = NULL;

    (void)state;
    assert_int_equal(path_ok("/a#b", &why), -1);
    assert_non_null(strstr(why, "fragment"));
    assert_int_equal(query_ok("a=1#x", &why), -1);
    assert_non_null(strstr(why, "fragment"));
    assert_int_equal(target_ok("/a?b#c", &why), -1);
}

static void query_mark_refused_in_path(void **state)
{
    const char *why = NULL;

    (void)state;
    assert_int_equal(path_ok("/a?b=1", &why), -1);
    assert_non_null(strstr(why, "set_query"));
    /* In a query, '?' is data (RFC 3986 3.4). */
    assert_int_equal(query_ok("a=?&b=/", &why), 0);
    assert_int_equal(target_ok("/a?b=1?c", &why), 0);
}

static void percent_must_be_followed_by_two_hex_digits(void **state)
{
    const char *why = NULL;

    (void)state;
    assert_int_equal(path_ok("/a%2", &why), -1);
    assert_non_null(strstr(why, "hex"));
    assert_int_equal(path_ok("/a%", &why), -1);
    assert_int_equal(path_ok("/a%zz", &why), -1);
    assert_int_equal(path_ok("/a%g0", &why), -1);
    assert_int_equal(query_ok("q=100%", &why), -1);
    assert_int_equal(path_ok("/a%41", &why), 0);
    assert_int_equal(query_ok("q=100%25", &why), 0);
}

static void empty_query_is_none(void **state)
{
    const char *why = NULL;

    (void)state;
    assert_int_equal(query_ok("", &why), 0);
    assert_int_equal(target_ok("/x?", &why), 0);
    assert_int_equal(target_ok("?x", &why), -1);
}

/* HTTP_TARGET_MAX bytes pass; one more is refused. */
static void length_limit_one_more_refused(void **state)
{
    char *p = malloc(HTTP_TARGET_MAX + 2);
    const char *why = NULL;

    (void)state;
    memset(p, 'a', HTTP_TARGET_MAX + 1);
    p[0] = '/';
    assert_int_equal(http_path_check((struct slice){p, HTTP_TARGET_MAX}, &why),
                     0);
    assert_int_equal(
        http_path_check((struct slice){p, HTTP_TARGET_MAX + 1}, &why), -1);
    assert_non_null(strstr(why, "longer than 8192"));
    assert_int_equal(
        http_query_check((struct slice){p + 1, HTTP_TARGET_MAX}, &why), 0);
    assert_int_equal(
        http_query_check((struct slice){p, HTTP_TARGET_MAX + 1}, &why), -1);
    p[10] = '?';
    assert_int_equal(
        http_target_check((struct slice){p, HTTP_TARGET_MAX}, &why), 0);
    assert_int_equal(
        http_target_check((struct slice){p, HTTP_TARGET_MAX + 1}, &why), -1);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_paths_pass),
        cmocka_unit_test(path_must_start_with_slash),
        cmocka_unit_test(path_control_and_space_refused),
        cmocka_unit_test(fragment_refused),
        cmocka_unit_test(query_mark_refused_in_path),
        cmocka_unit_test(percent_must_be_followed_by_two_hex_digits),
        cmocka_unit_test(empty_query_is_none),
        cmocka_unit_test(length_limit_one_more_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
