/* The protocol-neutral settings of a downstream HTTP connection: the
 * default limits both codecs and the HTTP/1 parser start from. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "http/conn_conf.h"

/* The documented defaults: 8 KiB request line, 60 KiB head, 100 headers. */
static void test_default_sizes(void **state)
{
    (void)state;
    struct http_limits lim = http_limits_default();

    assert_int_equal(lim.max_request_line, 8 * 1024);
    assert_int_equal(lim.max_head, 60 * 1024);
    assert_int_equal(lim.max_headers, 100);
}

/* A header name with '_' is refused unless a listener says otherwise. */
static void test_default_rejects_underscores(void **state)
{
    (void)state;
    struct http_limits lim = http_limits_default();

    assert_int_equal(lim.underscores, HTTP_US_REJECT);
}

#define ALIAS(s) http_name_framing_alias((s), strlen(s))

/* Names that become framing or connection fields with '_' read as '-'
 * are aliases; other underscored names, and the real fields, are not. */
static void test_framing_alias(void **state)
{
    (void)state;
    assert_true(ALIAS("Transfer_Encoding"));
    assert_true(ALIAS("content_length"));
    assert_true(ALIAS("KEEP_ALIVE"));
    assert_false(ALIAS("Transfer-Encoding"));
    assert_false(ALIAS("X_User"));
    assert_false(ALIAS("content_lengths"));
    assert_false(ALIAS("te"));
    assert_false(ALIAS(""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_sizes),
        cmocka_unit_test(test_default_rejects_underscores),
        cmocka_unit_test(test_framing_alias),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
