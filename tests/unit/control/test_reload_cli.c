#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "control/reload_cli.h"

#define S(x) x, strlen(x)

static void test_outcome_is_the_first_line(void **state)
{
    (void)state;
    assert_int_equal(reload_outcome_of(S("reloaded\n")), RELOAD_DONE);
    assert_int_equal(
        reload_outcome_of(S("reload failed: strait.yaml:2:1: x: unknown\n")),
        RELOAD_REFUSED);
    assert_int_equal(reload_outcome_of(S("reload queued: it runs once\n")),
                     RELOAD_QUEUED);
    /* The old answer, and anything else, is not taken as success. */
    assert_int_equal(reload_outcome_of(S("OK\n")), RELOAD_UNKNOWN);
    assert_int_equal(reload_outcome_of(S("reloaded")), RELOAD_UNKNOWN);
    assert_int_equal(reload_outcome_of(S("")), RELOAD_UNKNOWN);
}

static void test_stat_reads_whole_lines(void **state)
{
    const char *st = "server.workers: 2\n"
                     "server.reloads_ok: 17\n"
                     "server.reloads_failed: 3\n"
                     "server.last_reload_error: \"bad\"\n"
                     "server.reloads_ok_extra: 99\n";
    uint64_t v = 0;

    (void)state;
    assert_int_equal(reload_stat(S(st), "server.reloads_ok", &v), 0);
    assert_int_equal(v, 17);
    assert_int_equal(reload_stat(S(st), "server.reloads_failed", &v), 0);
    assert_int_equal(v, 3);
    assert_int_equal(reload_stat(S(st), "server.reloads", &v), -1);
    assert_int_equal(reload_stat(S(st), "server.last_reload_error", &v), -1);
    assert_int_equal(reload_stat(S(st), "missing", &v), -1);
    /* The last line needs no newline. */
    assert_int_equal(reload_stat(S("a: 5"), "a", &v), 0);
    assert_int_equal(v, 5);
    assert_int_equal(reload_stat(S("a: 99999999999999999999999"), "a", &v), -1);
}

static void test_upgrade_started_pid(void **state)
{
    const char *ok = "upgrade started: pid 12345\n";
    const char *refused = "upgrade refused: strait is draining\n";

    (void)state;
    assert_int_equal(upgrade_started_pid(ok, strlen(ok)), 12345);
    assert_int_equal(upgrade_started_pid(refused, strlen(refused)), 0);
    assert_int_equal(upgrade_started_pid(ok, 10), 0);
    assert_int_equal(upgrade_started_pid("upgrade started: pid x", 22), 0);
    assert_int_equal(
        upgrade_started_pid("upgrade started: pid 99999999999", 32), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outcome_is_the_first_line),
        cmocka_unit_test(test_stat_reads_whole_lines),
        cmocka_unit_test(test_upgrade_started_pid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
