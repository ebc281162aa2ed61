/*
 * Unit tests for src/core/units.c: durations, byte sizes and integers as
 * written in configuration files.
 */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/units.h"

#define UNITS_LIMIT (INT64_C(1) << 53)

static void dur_ok(const char *s, int64_t want)
{
    int64_t ms = -12345;
    const char *why = NULL;

    if (units_duration_ms(s, strlen(s), &ms, &why) != 0)
        fail_msg("units_duration_ms(\"%s\") failed: %s", s, why);
    assert_int_equal(ms, want);
}

static void dur_err(const char *s, const char *reason)
{
    int64_t ms = -12345;
    const char *why = NULL;

    assert_int_equal(units_duration_ms(s, strlen(s), &ms, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
    /* Nothing is stored on failure. */
    assert_int_equal(ms, -12345);
}

static void size_ok(const char *s, int64_t want)
{
    int64_t v = -1;
    const char *why = NULL;

    if (units_size(s, strlen(s), &v, &why) != 0)
        fail_msg("units_size(\"%s\") failed: %s", s, why);
    assert_int_equal(v, want);
}

static void size_err(const char *s, const char *reason)
{
    int64_t v = -1;
    const char *why = NULL;

    assert_int_equal(units_size(s, strlen(s), &v, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
    assert_int_equal(v, -1);
}

static void int_ok(const char *s, int64_t want)
{
    int64_t v = -1;
    const char *why = NULL;

    if (units_int(s, strlen(s), &v, &why) != 0)
        fail_msg("units_int(\"%s\") failed: %s", s, why);
    assert_int_equal(v, want);
}

static void int_err(const char *s, const char *reason)
{
    int64_t v = 777;
    const char *why = NULL;

    assert_int_equal(units_int(s, strlen(s), &v, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
    assert_int_equal(v, 777);
}

static void test_duration_units(void **state)
{
    (void)state;
    dur_ok("250ms", 250);
    dur_ok("0ms", 0);
    dur_ok("0s", 0);
    dur_ok("5s", 5000);
    dur_ok("1m", 60000);
    dur_ok("10m", 600000);
    dur_ok("1h", 3600000);
    dur_ok("100us", 0);
    dur_ok("1500us", 1);
    dur_ok("2000000us", 2000);
}

static void test_duration_fractions(void **state)
{
    (void)state;
    dur_ok("1.5s", 1500);
    dur_ok("0.5s", 500);
    dur_ok("0.001s", 1);
    dur_ok("1.5m", 90000);
    dur_ok("0.25h", 900000);
    /* Sub-millisecond remainders are truncated. */
    dur_ok("1.5ms", 1);
    dur_ok("2.9999ms", 2);
    /* Fraction digits past nine are ignored, not overflowed. */
    dur_ok("1.123456789123456789s", 1123);
    dur_ok("1.s", 1000);
}

static void test_duration_compound(void **state)
{
    (void)state;
    dur_ok("2h30m", 9000000);
    dur_ok("1h1m1s1ms", 3661001);
    dur_ok("1m30s", 90000);
    dur_ok("1s500ms", 1500);
    dur_ok("1.5h30m", 7200000);
}

/* A number needs at least one digit: "." alone is not zero. ".5s" is
 * accepted, as Go's time.ParseDuration (Istio's reference) does. */
static void test_duration_needs_a_digit(void **state)
{
    (void)state;
    dur_ok(".5s", 500);
    dur_err(".s", "duration must look like 250ms, 5s, 1m or 1h");
    dur_err("1s.ms", "duration must look like 250ms, 5s, 1m or 1h");
}

static void test_duration_slice(void **state)
{
    int64_t ms = 0;
    const char *why = NULL;

    (void)state;
    assert_int_equal(units_duration_ms("250msXYZ", 5, &ms, &why), 0);
    assert_int_equal(ms, 250);
    assert_int_equal(units_duration_ms("2h30m", 2, &ms, &why), 0);
    assert_int_equal(ms, 7200000);
}

static void test_duration_errors(void **state)
{
    (void)state;
    dur_err("", "empty duration");
    /* A bare number is refused: "30" must never mean 30 ms. */
    dur_err("30", "duration needs a unit (ms, s, m or h)");
    dur_err("0", "duration needs a unit (ms, s, m or h)");
    dur_err("1.5", "duration needs a unit (ms, s, m or h)");
    dur_err("1s30", "duration needs a unit (ms, s, m or h)");
    dur_err("5d", "unknown duration unit (use ms, s, m or h)");
    dur_err("5sec", "unknown duration unit (use ms, s, m or h)");
    dur_err("5 s", "unknown duration unit (use ms, s, m or h)");
    dur_err("5S", "unknown duration unit (use ms, s, m or h)");
    dur_err("5ns", "unknown duration unit (use ms, s, m or h)");
    dur_err("1s ", "unknown duration unit (use ms, s, m or h)");
    dur_err("1sms", "unknown duration unit (use ms, s, m or h)");
    dur_err("s", "duration must look like 250ms, 5s, 1m or 1h");
    dur_err("-1s", "duration must look like 250ms, 5s, 1m or 1h");
    dur_err("+1s", "duration must look like 250ms, 5s, 1m or 1h");
    dur_err(" 1s", "duration must look like 250ms, 5s, 1m or 1h");
}

static void test_duration_overflow(void **state)
{
    (void)state;
    /* 2^53 microseconds is the limit: 2501999h fits, 2502000h does not. */
    dur_ok("2501999h", INT64_C(2501999) * 3600 * 1000);
    dur_err("2502000h", "duration too large");
    dur_err("9999999999999999h", "duration too large");
    dur_err("99999999999999999999999999s", "duration too large");
    dur_err("9007199254740993us", "duration too large");
    /* Each part fits but the sum does not. */
    dur_err("2501999h2501999h", "duration too large");
}

static void test_size(void **state)
{
    (void)state;
    size_ok("0", 0);
    size_ok("1024", 1024);
    size_ok("5B", 5);
    size_ok("1KiB", 1024);
    size_ok("64KiB", 65536);
    size_ok("1MiB", 1048576);
    size_ok("16MiB", 16 * 1048576);
    size_ok("2GiB", INT64_C(2147483648));
    size_ok("1Ki", 1024);
    size_ok("3Mi", 3 * 1048576);
    size_ok("1Gi", INT64_C(1) << 30);
    size_ok("1K", 1024);
    size_ok("1M", 1048576);
    size_ok("1G", INT64_C(1) << 30);
}

static void test_size_errors(void **state)
{
    (void)state;
    size_err("", "size must be a number of bytes, optionally with KiB/MiB/GiB");
    size_err("KiB",
             "size must be a number of bytes, optionally with KiB/MiB/GiB");
    size_err("-1",
             "size must be a number of bytes, optionally with KiB/MiB/GiB");
    size_err(" 1",
             "size must be a number of bytes, optionally with KiB/MiB/GiB");
    size_err("1kb", "unknown size suffix (use KiB, MiB or GiB)");
    size_err("1KB", "unknown size suffix (use KiB, MiB or GiB)");
    size_err("1k", "unknown size suffix (use KiB, MiB or GiB)");
    size_err("1TiB", "unknown size suffix (use KiB, MiB or GiB)");
    size_err("1 KiB", "unknown size suffix (use KiB, MiB or GiB)");
    size_err("1.5MiB", "unknown size suffix (use KiB, MiB or GiB)");
    size_err("1KiBx", "unknown size suffix (use KiB, MiB or GiB)");
    size_err("1Kib", "unknown size suffix (use KiB, MiB or GiB)");
}

static void test_size_overflow(void **state)
{
    (void)state;
    size_ok("9007199254740992", UNITS_LIMIT);
    size_err("9007199254740993", "integer too large");
    size_err("99999999999999999999999", "integer too large");
    size_ok("8388608GiB", UNITS_LIMIT);
    size_err("8388609GiB", "size too large");
    size_err("8796093022209KiB", "size too large");
    size_ok("8796093022208KiB", UNITS_LIMIT);
}

static void test_int(void **state)
{
    (void)state;
    int_ok("0", 0);
    int_ok("42", 42);
    int_ok("-42", -42);
    int_ok("+7", 7);
    int_ok("007", 7);
    int_ok("9007199254740992", UNITS_LIMIT);
    int_ok("-9007199254740992", -UNITS_LIMIT);
}

static void test_int_errors(void **state)
{
    int64_t v = 0;
    const char *why = NULL;

    (void)state;
    int_err("", "not an integer");
    int_err("-", "not an integer");
    int_err("+", "not an integer");
    int_err("12a", "not an integer");
    int_err(" 1", "not an integer");
    int_err("1 ", "not an integer");
    int_err("1.0", "not an integer");
    int_err("0x10", "not an integer");
    int_err("--1", "not an integer");
    int_err("9007199254740993", "integer too large");
    int_err("-9007199254740993", "integer too large");
    int_err("123456789012345678901234567890", "integer too large");
    /* Only n bytes are read. */
    assert_int_equal(units_int("12x", 2, &v, &why), 0);
    assert_int_equal(v, 12);
}

static void test_fmt_u64(void **state)
{
    char out[UNITS_U64_LEN];
    char want[32];
    const uint64_t vals[] = {
        0,         1,     9,           10,          99,
        100,       12345, 4294967295u, 4294967296u, UINT64_MAX / 10,
        UINT64_MAX};

    (void)state;
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        size_t n = units_fmt_u64(out, vals[i]);
        snprintf(want, sizeof(want), "%" PRIu64, vals[i]);
        assert_string_equal(out, want);
        assert_int_equal(n, strlen(want));
    }
}

static void test_fmt_hex(void **state)
{
    char out[17];
    char *end;

    (void)state;
    end = units_fmt_hex(out, 0xabc, 4);
    *end = '\0';
    assert_string_equal(out, "0abc");
    end = units_fmt_hex(out, UINT64_C(0x0123456789abcdef), 16);
    *end = '\0';
    assert_string_equal(out, "0123456789abcdef");
    /* Only the low digits*4 bits. */
    end = units_fmt_hex(out, UINT64_C(0xfff12), 3);
    *end = '\0';
    assert_string_equal(out, "f12");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration_units),
        cmocka_unit_test(test_duration_fractions),
        cmocka_unit_test(test_duration_compound),
        cmocka_unit_test(test_duration_needs_a_digit),
        cmocka_unit_test(test_duration_slice),
        cmocka_unit_test(test_duration_errors),
        cmocka_unit_test(test_duration_overflow),
        cmocka_unit_test(test_size),
        cmocka_unit_test(test_size_errors),
        cmocka_unit_test(test_size_overflow),
        cmocka_unit_test(test_int),
        cmocka_unit_test(test_int_errors),
        cmocka_unit_test(test_fmt_u64),
        cmocka_unit_test(test_fmt_hex),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
