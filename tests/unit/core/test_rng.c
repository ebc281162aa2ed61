/*
 * Unit tests for src/core/rng.h: the one fast generator is xorshift64*
 * (against the algorithm written out from the paper), its state stays out
 * of the fixed point 0, and its values spread over small ranges.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/rng.h"

/* The reference algorithm, written out from Vigna's paper. */
static uint64_t reference(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * UINT64_C(0x2545F4914F6CDD1D);
}

static void test_is_xorshift64star(void **state)
{
    uint64_t s = 1, r = 1;

    (void)state;
    for (int i = 0; i < 1000; i++)
        assert_true(rng_next(&s) == reference(&r));
    assert_true(s == r);
}

static void test_state_never_zero(void **state)
{
    uint64_t s = UINT64_C(0x9e3779b97f4a7c15);

    (void)state;
    for (int i = 0; i < 100000; i++) {
        rng_next(&s);
        assert_true(s != 0);
    }
}

/* Every residue of a small modulus comes up, and none far more often
 * than the others: the low bits are usable for `% n`. */
static void test_low_bits_spread(void **state)
{
    uint64_t s = 12345;
    unsigned count[8] = {0};

    (void)state;
    for (int i = 0; i < 80000; i++)
        count[rng_next(&s) % 8]++;
    for (int i = 0; i < 8; i++) {
        assert_true(count[i] > 9000);
        assert_true(count[i] < 11000);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_is_xorshift64star),
        cmocka_unit_test(test_state_never_zero),
        cmocka_unit_test(test_low_bits_spread),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
