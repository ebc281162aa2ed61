#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/bufpool.h"
#include "core/memacct.h"

static int checks;

static void count_check(void *arg)
{
    (void)arg;
    checks++;
}

/* A check runs each time the total grows by a step, not on every take,
 * and after a fall the next one is a step above where the total is. */
static void test_check_every_step_of_growth(void **state)
{
    struct memacct a = {0};

    (void)state;
    checks = 0;
    a.check = count_check;
    memacct_set_step(&a, 1000);
    for (int i = 0; i < 9; i++)
        assert_int_equal(memacct_take(&a, 100, 0), 0);
    assert_int_equal(checks, 0);
    assert_int_equal(memacct_take(&a, 100, 0), 0); /* 1000: the mark */
    assert_int_equal(checks, 1);
    assert_int_equal(memacct_take(&a, 999, 0), 0);
    assert_int_equal(checks, 1);
    assert_int_equal(memacct_take(&a, 1, 0), 0); /* 2000 */
    assert_int_equal(checks, 2);
    memacct_give(&a, 2000);
    assert_int_equal(memacct_used(&a), 0);
    assert_int_equal(memacct_take(&a, 1000, 0), 0);
    assert_int_equal(checks, 3);
}

static void start_refusing(void *arg)
{
    memacct_set_refuse(arg, 1);
}

/* While refusing, a refusable take fails and leaves nothing counted; the
 * take whose check turned refusal on is refused too; others go on. */
static void test_refusal(void **state)
{
    struct memacct a = {0};

    (void)state;
    a.check = start_refusing;
    a.arg = &a;
    memacct_set_step(&a, 1000);
    assert_int_equal(memacct_take(&a, 999, 1), 0);
    assert_int_equal(memacct_take(&a, 1, 1), -1);
    assert_int_equal(memacct_used(&a), 999);
    assert_true(memacct_refusing(&a));
    assert_int_equal(memacct_take(&a, 10, 1), -1);
    assert_int_equal(memacct_take(&a, 10, 0), 0);
    memacct_set_refuse(&a, 0);
    assert_int_equal(memacct_take(&a, 10, 1), 0);
    assert_int_equal(memacct_used(&a), 1019);
    assert_int_equal(memacct_take(NULL, 10, 1), 0);
}

/* A pool counts the buffers it hands out, not its free list, and a
 * refusable pool hands none out while refusing. */
static void test_pool_accounting(void **state)
{
    struct memacct a = {0};
    struct bufpool p;
    struct buf b, c;

    (void)state;
    bufpool_init(&p, 4096, 4);
    p.acct = &a;
    p.refusable = 1;
    buf_init(&b, 4096);
    buf_init(&c, 4096);
    assert_int_equal(bufpool_fill(&p, &b), 0);
    assert_int_equal(memacct_used(&a), 4096);
    bufpool_drain(&p, &b);
    assert_int_equal(memacct_used(&a), 0);
    memacct_set_refuse(&a, 1);
    assert_int_equal(bufpool_fill(&p, &c), -1);
    assert_null(c.data);
    assert_int_equal(memacct_used(&a), 0);
    memacct_set_refuse(&a, 0);
    assert_int_equal(bufpool_fill(&p, &c), 0);
    bufpool_put(&p, &c);
    assert_int_equal(memacct_used(&a), 0);
    bufpool_dispose(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_every_step_of_growth),
        cmocka_unit_test(test_refusal),
        cmocka_unit_test(test_pool_accounting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
