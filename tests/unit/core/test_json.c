/*
 * Unit tests for src/core/json.c: json_escape() output for every class of
 * byte, and its behaviour at the buffer's cap.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/json.h"

/* escaped() checks that the n bytes of in escape to exactly want. */
static void escaped(const char *in, size_t n, const char *want)
{
    struct buf b;

    buf_init(&b, 4096);
    assert_int_equal(json_escape(&b, in, n), 0);
    assert_string_equal(buf_cstr(&b), want);
    buf_dispose(&b);
}

static void test_plain(void **state)
{
    (void)state;
    escaped("", 0, "\"\"");
    escaped("hello", 5, "\"hello\"");
    escaped("a b/c", 5, "\"a b/c\"");
    /* Only n bytes are read. */
    escaped("abcdef", 3, "\"abc\"");
}

static void test_quote_and_backslash(void **state)
{
    (void)state;
    escaped("\"", 1, "\"\\\"\"");
    escaped("\\", 1, "\"\\\\\"");
    escaped("say \"hi\"", 8, "\"say \\\"hi\\\"\"");
    escaped("C:\\dir\\", 7, "\"C:\\\\dir\\\\\"");
    escaped("\"\\\"", 3, "\"\\\"\\\\\\\"\"");
}

static void test_named_controls(void **state)
{
    (void)state;
    escaped("\n", 1, "\"\\n\"");
    escaped("\r", 1, "\"\\r\"");
    escaped("\t", 1, "\"\\t\"");
    escaped("a\r\nb", 4, "\"a\\r\\nb\"");
}

static void test_other_controls(void **state)
{
    char want[16];

    (void)state;
    escaped("\0", 1, "\"\\u0000\"");
    escaped("\x01", 1, "\"\\u0001\"");
    escaped("\b", 1, "\"\\u0008\"");
    escaped("\f", 1, "\"\\u000c\"");
    escaped("\x1b[0m", 4, "\"\\u001b[0m\"");
    escaped("\x1f", 1, "\"\\u001f\"");
    escaped("a\0b", 3, "\"a\\u0000b\"");
    /* Every control byte except \t \n \r uses the \u00XX form. */
    for (int c = 0; c < 0x20; c++) {
        char in = (char)c;
        if (c == '\t' || c == '\n' || c == '\r')
            continue;
        snprintf(want, sizeof(want), "\"\\u%04x\"", c);
        escaped(&in, 1, want);
    }
    /* Space is the first byte that passes through. */
    escaped(" ", 1, "\" \"");
}

static void test_del(void **state)
{
    (void)state;
    escaped("\x7f", 1, "\"\\u007f\"");
    escaped("a\x7f"
            "b",
            3, "\"a\\u007fb\"");
    escaped("~", 1, "\"~\"");
}

static void test_utf8_passthrough(void **state)
{
    const char *s = "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80";

    (void)state;
    escaped(s, strlen(s), "\"h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80\"");
    /* Invalid UTF-8 is carried through as documented. */
    escaped("\xff\x80", 2, "\"\xff\x80\"");
}

static void test_appends_after_existing(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 128);
    assert_int_equal(buf_puts(&b, "{\"k\":"), 0);
    assert_int_equal(json_escape(&b, "v\n", 2), 0);
    assert_int_equal(buf_puts(&b, "}"), 0);
    assert_string_equal(buf_cstr(&b), "{\"k\":\"v\\n\"}");
    buf_dispose(&b);
}

static void test_json_str(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 128);
    assert_int_equal(json_str(&b, "x\"y"), 0);
    assert_int_equal(json_str(&b, NULL), 0);
    assert_int_equal(json_str(&b, ""), 0);
    assert_string_equal(buf_cstr(&b), "\"x\\\"y\"\"\"\"\"");
    buf_dispose(&b);
}

static void test_cap(void **state)
{
    struct buf b;

    (void)state;
    /* "abc" quoted is 5 bytes: fits a cap of 5, not of 4. */
    buf_init(&b, 5);
    assert_int_equal(json_escape(&b, "abc", 3), 0);
    assert_int_equal(buf_len(&b), 5);
    buf_dispose(&b);

    buf_init(&b, 4);
    assert_int_equal(json_escape(&b, "abc", 3), -1);
    assert_true(buf_len(&b) <= 4);
    buf_dispose(&b);

    /* The closing quote alone does not fit. */
    buf_init(&b, 5);
    assert_int_equal(json_escape(&b, "abcd", 4), -1);
    buf_dispose(&b);

    /* An escape sequence that does not fit. */
    buf_init(&b, 7);
    assert_int_equal(json_escape(&b, "ab\x01", 3), -1);
    assert_true(buf_len(&b) <= 7);
    buf_dispose(&b);

    buf_init(&b, 10);
    assert_int_equal(json_escape(&b, "ab\x01", 3), 0);
    assert_int_equal(buf_len(&b), 10);
    assert_memory_equal(buf_ptr(&b), "\"ab\\u0001\"", 10);
    buf_dispose(&b);

    /* Even the opening quote needs room. */
    buf_init(&b, 0);
    assert_int_equal(json_escape(&b, "", 0), -1);
    buf_dispose(&b);

    buf_init(&b, 1);
    assert_int_equal(json_str(&b, ""), -1);
    buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_quote_and_backslash),
        cmocka_unit_test(test_named_controls),
        cmocka_unit_test(test_other_controls),
        cmocka_unit_test(test_del),
        cmocka_unit_test(test_utf8_passthrough),
        cmocka_unit_test(test_appends_after_existing),
        cmocka_unit_test(test_json_str),
        cmocka_unit_test(test_cap),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
