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

#define ALIAS(s) http_name_underscore_twin((s), strlen(s))

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

/* Twins of the fields strait sets or strips are dropped too, whole names
 * and the X-Forwarded-*, X-Envoy-* and X-B3-* families; a name that only
 * starts like one of the whole names is not. */
static void test_set_or_stripped_twins(void **state)
{
    (void)state;
    assert_true(ALIAS("X_Forwarded_For"));
    assert_true(ALIAS("x_forwarded_proto"));
    assert_true(ALIAS("x-forwarded_host"));
    assert_true(ALIAS("Proxy_Connection"));
    assert_true(ALIAS("x_request_id"));
    assert_true(ALIAS("X_Envoy_Original_Path"));
    assert_true(ALIAS("x_envoy_"));
    assert_true(ALIAS("x_b3_traceid"));
    assert_false(ALIAS("x_request_ids"));
    assert_false(ALIAS("x_forwarded"));
    assert_false(ALIAS("x_envoy"));
    assert_false(ALIAS("x-forwarded-for"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_sizes),
        cmocka_unit_test(test_default_rejects_underscores),
        cmocka_unit_test(test_framing_alias),
        cmocka_unit_test(test_set_or_stripped_twins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
