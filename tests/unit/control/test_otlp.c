/*
 * Unit tests for src/control/otlp.c: Retry-After values.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "control/otlp.h"

static int64_t ra(const char *s)
{
    return otlp_retry_after_ms(s, strlen(s));
}

static void test_retry_after(void **state)
{
    (void)state;
    assert_int_equal(ra("0"), 0);
    assert_int_equal(ra("1"), 1000);
    assert_int_equal(ra(" 30 "), 30000);
    assert_int_equal(ra("3600"), 3600000);
    assert_int_equal(ra("999999999999999999999"), 3600000); /* capped */
    assert_int_equal(ra(""), -1);
    assert_int_equal(ra("-1"), -1);
    assert_int_equal(ra("1.5"), -1);
    assert_int_equal(ra("Wed, 21 Oct 2015 07:28:00 GMT"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retry_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
