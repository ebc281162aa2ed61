#ifndef STRAIT_CORE_RNG_H
#define STRAIT_CORE_RNG_H

#include <stdint.h>

/*
 * The one fast pseudo-random generator: xorshift64* (Vigna, "An
 * experimental exploration of Marsaglia's xorshift generators", 2016).
 * For spread and uniqueness only (load balancing, route weights, fault
 * and mirror draws, retry jitter, request ids), never for secrets: keys,
 * tokens and serials come from BoringSSL's RAND_bytes().
 *
 * The state is a plain uint64_t owned by one thread (a worker's listener
 * or balancer): no locking, no global. Its owner seeds it with a value
 * that is not 0 (0 is a fixed point); the multiply gives the low bits the
 * quality that a bare xorshift64 lacks, so `rng_next(&s) % n` is fair enough
 * for n far below 2^32.
 */

/* rng_next() advances *state and returns the next 64-bit value. */
static inline uint64_t rng_next(uint64_t *state)
{
    uint64_t x = *state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * UINT64_C(2685821657736338717);
}

#endif
