/*
 * Unit tests for src/core/ascii.h: ASCII lowercase only, whatever the
 * locale, bytes past 0x7f untouched.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/ascii.h"

static void test_lower_char(void **state)
{
    (void)state;
    assert_int_equal(ascii_lower('A'), 'a');
    assert_int_equal(ascii_lower('Z'), 'z');
    assert_int_equal(ascii_lower('a'), 'a');
    assert_int_equal(ascii_lower('0'), '0');
    assert_int_equal(ascii_lower('@'), '@'); /* 'A' - 1 */
    assert_int_equal(ascii_lower('['), '['); /* 'Z' + 1 */
    assert_int_equal(ascii_lower('-'), '-');
    /* UTF-8 bytes ("É" is C3 89) are never touched. */
    assert_int_equal((unsigned char)ascii_lower((char)0xC3), 0xC3);
    assert_int_equal((unsigned char)ascii_lower((char)0x89), 0x89);
}

static void test_lower_n(void **state)
{
    char s[] = "Content-TYPE: X";

    (void)state;
    ascii_lower_n(s, 12);
    /* Only n bytes change. */
    assert_string_equal(s, "content-type: X");
}

static void test_lower_str(void **state)
{
    char s[] = "WWW.Example.COM";
    char utf8[] = "\xC3\x89T\xC3\xA9";

    (void)state;
    ascii_lower_str(s);
    assert_string_equal(s, "www.example.com");
    ascii_lower_str(utf8);
    assert_string_equal(utf8, "\xC3\x89t\xC3\xA9");
    ascii_lower_str(NULL);
}

static void test_lower_copy(void **state)
{
    char out[8];
    char same[] = "AbC";

    (void)state;
    memset(out, '#', sizeof(out));
    ascii_lower_copy(out, "SNI.ORG", 7);
    assert_memory_equal(out, "sni.org#", 8);
    ascii_lower_copy(same, same, 3);
    assert_string_equal(same, "abc");
}

/* ascii_text_ok() takes 8 bytes a step: every byte value, at every
 * position of a word and of the tail, and lengths around the word size,
 * must give what the byte-by-byte rule gives. */
static void test_text_ok_every_byte_everywhere(void **state)
{
    char buf[24];

    (void)state;
    for (int c = 0; c < 256; c++) {
        int ok = c == '\t' || (c >= 0x20 && c != 0x7f);

        for (size_t len = 1; len <= sizeof(buf); len++) {
            for (size_t at = 0; at < len; at++) {
                memset(buf, 'a', sizeof(buf));
                buf[at] = (char)c;
                assert_int_equal(ascii_text_ok(buf, len), ok);
            }
        }
    }
    assert_int_equal(ascii_text_ok("", 0), 1);
    /* Bytes that borrow in the subtraction: 0x80-0xff next to a 0x20. */
    assert_int_equal(ascii_text_ok("\xff \x80 \xa0\x9f\x7e!", 8), 1);
}

/* ascii_lower_copy() takes 8 bytes a step: every byte value at every
 * position, lengths around the word size, against ascii_lower(). */
static void test_lower_copy_every_byte_everywhere(void **state)
{
    char in[24], out[24];

    (void)state;
    for (int c = 0; c < 256; c++) {
        for (size_t len = 1; len <= sizeof(in); len++) {
            for (size_t at = 0; at < len; at++) {
                memset(in, 'Q', sizeof(in));
                in[at] = (char)c;
                ascii_lower_copy(out, in, len);
                for (size_t i = 0; i < len; i++)
                    assert_int_equal((unsigned char)out[i],
                                     (unsigned char)ascii_lower(in[i]));
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lower_char),
        cmocka_unit_test(test_lower_n),
        cmocka_unit_test(test_lower_str),
        cmocka_unit_test(test_lower_copy),
        cmocka_unit_test(test_text_ok_every_byte_everywhere),
        cmocka_unit_test(test_lower_copy_every_byte_everywhere),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
