/* The protocol-neutral settings of a downstream HTTP connection: the
 * default limits both codecs and the HTTP/1 parser start from. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_sizes),
        cmocka_unit_test(test_default_rejects_underscores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
