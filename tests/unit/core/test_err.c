/*
 * Unit tests for src/core/err.c: the one allocated-error-message helper.
 * The first message wins; err_prefix() adds context; nothing leaks or
 * dangles when an allocation fails (vasprintf is wrapped at link time,
 * -Wl,--wrap=vasprintf, so the test can make it fail).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/err.h"

/* Test-local switch for the wrapped vasprintf: the number of calls that
 * still succeed before the next ones fail (-1: never fail). */
static int vasprintf_ok = -1;

int __real_vasprintf(char **strp, const char *fmt, va_list ap);
int __wrap_vasprintf(char **strp, const char *fmt, va_list ap);

int __wrap_vasprintf(char **strp, const char *fmt, va_list ap)
{
    if (vasprintf_ok == 0) {
        *strp = NULL;
        return -1;
    }
    if (vasprintf_ok > 0)
        vasprintf_ok--;
    return __real_vasprintf(strp, fmt, ap);
}

static int teardown(void **state)
{
    (void)state;
    vasprintf_ok = -1;
    return 0;
}

static void test_set_formats(void **state)
{
    char *err = NULL;

    (void)state;
    assert_int_equal(err_set(&err, "%s:%d: %s", "a.yaml", 12, "bad key"), -1);
    assert_string_equal(err, "a.yaml:12: bad key");
    free(err);
}

static void test_set_twice_first_wins(void **state)
{
    char *err = NULL;

    (void)state;
    err_set(&err, "root cause %d", 1);
    err_set(&err, "later report %d", 2);
    assert_string_equal(err, "root cause 1");
    free(err);
}

/* A handed-over message is taken when none is set, freed (not leaked:
 * LeakSanitizer) when one is, and a NULL one is "out of memory". */
static void test_give(void **state)
{
    char *err = NULL;

    (void)state;
    assert_int_equal(err_give(&err, strdup("collected")), -1);
    assert_string_equal(err, "collected");
    err_give(&err, strdup("later"));
    assert_string_equal(err, "collected");
    free(err);
    err = NULL;
    err_give(&err, NULL);
    assert_string_equal(err, "out of memory");
    free(err);
    assert_int_equal(err_give(NULL, strdup("nobody asked")), -1);
}

static void test_null_err_is_a_noop(void **state)
{
    (void)state;
    assert_int_equal(err_set(NULL, "ignored %d", 1), -1);
    assert_int_equal(err_prefix(NULL, "ignored: "), -1);
}

static void test_prefix(void **state)
{
    char *err = NULL;

    (void)state;
    err_set(&err, "bind: %s", "address in use");
    assert_int_equal(err_prefix(&err, "listener %s: ", "web"), -1);
    assert_string_equal(err, "listener web: bind: address in use");
    err_prefix(&err, "reload: ");
    assert_string_equal(err, "reload: listener web: bind: address in use");
    free(err);
}

static void test_prefix_without_message(void **state)
{
    char *err = NULL;

    (void)state;
    err_prefix(&err, "listener %s: ", "web");
    assert_string_equal(err, "listener web: unknown error");
    free(err);
}

/* A caller's default reason, then its context: the set only speaks when
 * the callee did not. */
static void test_default_then_prefix(void **state)
{
    char *err = NULL;

    (void)state;
    err_set(&err, "cannot listen");
    err_prefix(&err, "listener %s: ", "a");
    assert_string_equal(err, "listener a: cannot listen");
    free(err);

    err = NULL;
    err_set(&err, "permission denied");
    err_set(&err, "cannot listen");
    err_prefix(&err, "listener %s: ", "a");
    assert_string_equal(err, "listener a: permission denied");
    free(err);
}

/* The prefix's arguments may come from the message being replaced. */
static void test_prefix_args_from_err(void **state)
{
    char *err = NULL;

    (void)state;
    err_set(&err, "x");
    err_prefix(&err, "%s%s: ", err, err);
    assert_string_equal(err, "xx: x");
    free(err);
}

static void vset_helper(char **err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void vset_helper(char **err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    err_vset(err, fmt, ap);
    va_end(ap);
}

static void test_vset(void **state)
{
    char *err = NULL;

    (void)state;
    vset_helper(&err, "%zu of %u", (size_t)3, 4u);
    assert_string_equal(err, "3 of 4");
    vset_helper(&err, "other");
    assert_string_equal(err, "3 of 4");
    free(err);
}

static void test_oom_set(void **state)
{
    char *err = NULL;

    (void)state;
    vasprintf_ok = 0;
    assert_int_equal(err_set(&err, "%s", "lost"), -1);
    assert_non_null(err);
    assert_string_equal(err, "out of memory");
    free(err);
}

static void test_oom_prefix_keeps_old(void **state)
{
    char *err = NULL;

    (void)state;
    err_set(&err, "the cause");
    vasprintf_ok = 0;
    assert_int_equal(err_prefix(&err, "listener %s: ", "a"), -1);
    /* Still the old, valid allocation: ASan reports a use after free or
     * a leak if the helper freed or dropped it. */
    assert_string_equal(err, "the cause");
    free(err);

    err = NULL;
    err_prefix(&err, "listener %s: ", "a");
    assert_string_equal(err, "out of memory");
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_set_formats, teardown),
        cmocka_unit_test_teardown(test_set_twice_first_wins, teardown),
        cmocka_unit_test_teardown(test_give, teardown),
        cmocka_unit_test_teardown(test_null_err_is_a_noop, teardown),
        cmocka_unit_test_teardown(test_prefix, teardown),
        cmocka_unit_test_teardown(test_prefix_without_message, teardown),
        cmocka_unit_test_teardown(test_default_then_prefix, teardown),
        cmocka_unit_test_teardown(test_prefix_args_from_err, teardown),
        cmocka_unit_test_teardown(test_vset, teardown),
        cmocka_unit_test_teardown(test_oom_set, teardown),
        cmocka_unit_test_teardown(test_oom_prefix_keeps_old, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
