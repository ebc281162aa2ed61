/*
 * Unit tests for src/net/source_limit.c: slots per source address (ports
 * do not matter), refusals counted, rows dropped with their last
 * connection.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/addr.h"
#include "net/source_limit.h"

static struct addr ip(const char *s)
{
    struct addr a;
    const char *why;

    assert_int_equal(addr_parse(&a, s, strlen(s), 1, &why), 0);
    return a;
}

static void test_one_more_than_the_limit_is_refused(void **state)
{
    struct source_limit l;
    struct addr a1 = ip("127.0.0.2:1000"), a2 = ip("127.0.0.2:1001");
    struct addr b = ip("127.0.0.3:1000");

    (void)state;
    source_limit_init(&l, "test", 3);
    /* Three from one address, whatever the port. */
    assert_int_equal(source_limit_take(&l, &a1, "a"), 0);
    assert_int_equal(source_limit_take(&l, &a2, "a"), 0);
    assert_int_equal(source_limit_take(&l, &a1, "a"), 0);
    assert_int_equal(source_limit_count(&l, &a2), 3);
    /* The fourth is refused and counted; another source still gets in. */
    assert_int_equal(source_limit_take(&l, &a2, "a"), -1);
    assert_int_equal(l.refused_per_source, 1);
    assert_int_equal(source_limit_take(&l, &b, "b"), 0);
    assert_int_equal(source_limit_count(&l, &b), 1);
    /* One given back: one more fits. */
    source_limit_give(&l, &a1);
    assert_int_equal(source_limit_take(&l, &a2, "a"), 0);
    assert_int_equal(l.refused_per_source, 1);
    source_limit_busy(&l, "b", "slots full");
    assert_int_equal(l.refused_busy, 1);
    source_limit_dispose(&l);
}

static void test_rows_go_with_their_last_connection(void **state)
{
    struct source_limit l;
    char s[64];

    (void)state;
    source_limit_init(&l, "test", 2);
    for (int i = 0; i < 200; i++) {
        struct addr a;
        snprintf(s, sizeof(s), "10.0.%d.%d:80", i / 250, i % 250 + 1);
        a = ip(s);
        assert_int_equal(source_limit_take(&l, &a, s), 0);
    }
    assert_int_equal(l.n, 200);
    for (int i = 0; i < 200; i++) {
        struct addr a;
        snprintf(s, sizeof(s), "10.0.%d.%d:81", i / 250, i % 250 + 1);
        a = ip(s);
        source_limit_give(&l, &a);
        assert_int_equal(source_limit_count(&l, &a), 0);
    }
    assert_int_equal(l.n, 0);
    /* Giving back what was never taken changes nothing. */
    {
        struct addr a = ip("10.9.9.9:1");
        source_limit_give(&l, &a);
        assert_int_equal(l.n, 0);
    }
    source_limit_dispose(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_more_than_the_limit_is_refused),
        cmocka_unit_test(test_rows_go_with_their_last_connection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
