/*
 * Unit tests for src/policy/lua_dict.c: OpenResty's ngx.shared.DICT
 * conventions (add on an existing key, replace on a missing one, incr
 * with and without init, init_ttl only on creation, not a number),
 * expiry and ttl, CLOCK eviction that spares recently read entries,
 * safe_set refusing to evict, get_keys with max, flush_all and
 * flush_expired, two threads incrementing one key without losing an
 * update, and the token bucket's rate and burst; the heap a full dict
 * really takes (measured with mallinfo2) never passes its capacity; the
 * set holds dicts weakly, so one no snapshot holds leaves it and is
 * freed.
 */
#include "config.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <malloc.h>

#include "policy/lua_dict.h"

static struct luadict_value num(double n)
{
    struct luadict_value v = {LUADICT_NUMBER, 0, n, NULL, 0, 0};
    return v;
}

static struct luadict_value str(const char *s)
{
    struct luadict_value v = {LUADICT_STRING, 0, 0, s, strlen(s), 7};
    return v;
}

static int get_num(struct luadict *d, const char *k, uint64_t now, double *n)
{
    struct luadict_value v;
    char *out;

    assert_int_equal(luadict_get(d, k, strlen(k), now, &v, &out), 0);
    free(out);
    *n = v.n;
    return v.type;
}

static void conventions(void **state)
{
    struct luadict *d = luadict_new("t", 1 << 20);
    struct luadict_value v = str("hello"), nil = {0};
    int forcible;
    double n;
    char *out;
    uint64_t ms;
    size_t empty = luadict_free_space(d);

    (void)state;
    /* The dict's own structures come off the capacity. */
    assert_true(empty < luadict_capacity(d));
    assert_true(empty > luadict_capacity(d) - 8192);
    assert_int_equal(
        luadict_store(d, LUADICT_SET, "a", 1, &v, 0, 1000, 1, &forcible), 0);
    assert_int_equal(forcible, 0);
    assert_int_equal(luadict_get(d, "a", 1, 1000, &v, &out), 0);
    assert_int_equal(v.type, LUADICT_STRING);
    assert_int_equal(v.flags, 7);
    assert_memory_equal(v.s, "hello", 5);
    free(out);
    v = num(1);
    assert_int_equal(
        luadict_store(d, LUADICT_ADD, "a", 1, &v, 0, 1000, 1, &forcible),
        LUADICT_EXISTS);
    assert_int_equal(
        luadict_store(d, LUADICT_REPLACE, "b", 1, &v, 0, 1000, 1, &forcible),
        LUADICT_NOT_FOUND);
    /* incr: not found without init, not a number on a string. */
    assert_int_equal(luadict_incr(d, "c", 1, 1, 0, 0, 0, 1000, &n, &forcible),
                     LUADICT_NOT_FOUND);
    assert_int_equal(luadict_incr(d, "a", 1, 1, 1, 0, 0, 1000, &n, &forcible),
                     LUADICT_NOT_NUMBER);
    /* init + delta, with init_ttl on creation only. */
    assert_int_equal(
        luadict_incr(d, "c", 1, 2, 1, 10, 500, 1000, &n, &forcible), 0);
    assert_true(n == 12);
    assert_int_equal(
        luadict_incr(d, "c", 1, 3, 1, 10, 99999, 1100, &n, &forcible), 0);
    assert_true(n == 15);
    assert_int_equal(luadict_ttl(d, "c", 1, 1100, &ms), 0);
    assert_int_equal(ms, 400);
    /* Expired: gone for get, ttl and incr without init. */
    assert_int_equal(get_num(d, "c", 1500, &n), LUADICT_NIL);
    assert_int_equal(luadict_ttl(d, "c", 1, 1500, &ms), LUADICT_NOT_FOUND);
    assert_int_equal(luadict_expire(d, "a", 1, 100, 2000), 0);
    assert_int_equal(luadict_flush_expired(d, 0, 3000), 2);
    /* Delete is a store of nil. */
    v = num(5);
    luadict_store(d, LUADICT_SET, "x", 1, &v, 0, 0, 1, &forcible);
    luadict_store(d, LUADICT_SET, "x", 1, &nil, 0, 0, 1, &forcible);
    assert_int_equal(get_num(d, "x", 0, &n), LUADICT_NIL);
    assert_true(luadict_free_space(d) == empty);
    luadict_unref(d);
}

static int count_key(void *arg, const char *k, size_t n)
{
    (void)k;
    (void)n;
    (*(int *)arg)++;
    return 0;
}

static void clock_eviction(void **state)
{
    /* 64 shards of 1 KiB: about ten entries of 100 bytes each. */
    struct luadict *d = luadict_new("t", 64 * 1024);
    char k[32], big[40];
    struct luadict_value v;
    int forcible, evicted = 0, keys = 0;
    double n;

    (void)state;
    memset(big, 'v', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    v = str(big);
    luadict_store(d, LUADICT_SET, "hot", 3, &v, 0, 0, 1, &forcible);
    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        /* The hot key is read between writes: CLOCK keeps it. */
        assert_int_equal(get_num(d, "hot", 0, &n), LUADICT_STRING);
        assert_int_equal(
            luadict_store(d, LUADICT_SET, k, strlen(k), &v, 0, 0, 1, &forcible),
            0);
        evicted += forcible;
    }
    assert_true(evicted > 1000);
    assert_int_equal(get_num(d, "hot", 0, &n), LUADICT_STRING);
    /* safe_set never evicts. */
    assert_int_equal(
        luadict_store(d, LUADICT_SET, "new-one", 7, &v, 0, 0, 0, &forcible),
        LUADICT_NO_MEMORY);
    luadict_keys(d, 5, 0, count_key, &keys);
    assert_int_equal(keys, 5);
    keys = 0;
    luadict_keys(d, 0, 0, count_key, &keys);
    assert_true(keys > 100 && keys < 1000);
    assert_true(luadict_free_space(d) < 64 * 1024);
    luadict_unref(d);
}

struct hammer {
    struct luadict *d;
    int hot;
};

/* flush_all: every entry, with or without a ttl, is gone for get,
 * get_keys and add at once, but keeps its memory until flush_expired
 * frees it (OpenResty's flush_all marks, flush_expired frees). */
static void flush_all(void **state)
{
    struct luadict *d = luadict_new("f", 1 << 20);
    struct luadict_value v = num(1);
    int forcible, n = 0;
    double x;
    char key[8];

    (void)state;
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(luadict_store(d, LUADICT_SET, key, strlen(key), &v,
                                       i % 2 ? 60000 : 0, 1000, 1, &forcible),
                         0);
    }
    assert_true(luadict_free_space(d) < luadict_capacity(d));
    luadict_flush_all(d);
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(get_num(d, key, 1000, &x), LUADICT_NIL);
    }
    luadict_keys(d, 0, 1000, count_key, &n);
    assert_int_equal(n, 0);
    assert_int_equal(luadict_incr(d, "k0", 2, 1, 0, 0, 0, 1000, &x, &forcible),
                     LUADICT_NOT_FOUND);
    /* The memory is still held; flush_expired gives it back. */
    assert_true(luadict_free_space(d) < luadict_capacity(d));
    v = num(2);
    assert_int_equal(
        luadict_store(d, LUADICT_ADD, "k1", 2, &v, 0, 1000, 1, &forcible), 0);
    assert_int_equal(get_num(d, "k1", 1000, &x), LUADICT_NUMBER);
    assert_true(x == 2);
    /* The incr and the add dropped k0 and k1 when they found them
     * expired: eight expired entries remain. */
    assert_int_equal(luadict_flush_expired(d, 0, 1000), 8);
    n = 0;
    luadict_keys(d, 0, 1000, count_key, &n);
    assert_int_equal(n, 1);
    luadict_unref(d);
}

static void *hammer(void *arg)
{
    struct hammer *h = arg;
    double n;
    int forcible;
    char k[32];

    for (int i = 0; i < 100000; i++) {
        const char *key = "hot";
        if (!h->hot) {
            snprintf(k, sizeof(k), "c%d", i % 1000);
            key = k;
        }
        luadict_incr(h->d, key, strlen(key), 1, 1, 0, 0, 0, &n, &forcible);
    }
    return NULL;
}

static void two_threads_lose_nothing(void **state)
{
    struct luadict *d = luadict_new("t", 16 << 20);
    struct hammer h = {d, 1};
    pthread_t a, b;
    double n;

    (void)state;
    pthread_create(&a, NULL, hammer, &h);
    pthread_create(&b, NULL, hammer, &h);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    get_num(d, "hot", 0, &n);
    assert_true(n == 200000);
    luadict_unref(d);
}

static void token_bucket(void **state)
{
    struct luadict *d = luadict_new("t", 1 << 20);
    double left;
    uint64_t retry;
    int ok = 0;

    (void)state;
    /* Burst 5 at once, then 10/s. */
    for (int i = 0; i < 8; i++)
        ok += luadict_token_bucket(d, "c", 1, 10, 5, 1000, &left, &retry);
    assert_int_equal(ok, 5);
    assert_true(retry > 0 && retry <= 101);
    /* 300 ms later: 3 more. */
    ok = 0;
    for (int i = 0; i < 8; i++)
        ok += luadict_token_bucket(d, "c", 1, 10, 5, 1300, &left, &retry);
    assert_int_equal(ok, 3);
    /* Never more than burst after a long pause. */
    ok = 0;
    for (int i = 0; i < 20; i++)
        ok += luadict_token_bucket(d, "c", 1, 10, 5, 100000, &left, &retry);
    assert_int_equal(ok, 5);
    luadict_unref(d);
}

static void set_keeps_dicts_by_name(void **state)
{
    struct luadict_set *s = luadict_set_new();
    int resized;
    struct luadict *a = luadict_set_get(s, "rl", 1 << 20, &resized);
    struct luadict *b = luadict_set_get(s, "rl", 2 << 20, &resized);

    (void)state;
    assert_ptr_equal(a, b);
    assert_int_equal(resized, 1);
    luadict_unref(a);
    luadict_unref(b);
    luadict_set_free(s);
}

/* mallinfo2() sees glibc's heap only: under ASan the allocator is
 * another, and the measurement is skipped. */
#if defined(__SANITIZE_ADDRESS__)
#define HEAP_MEASURED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEAP_MEASURED 0
#endif
#endif
#ifndef HEAP_MEASURED
#define HEAP_MEASURED 1
#endif

/*
 * Fills a dict of capacity cap with writes (evicting) of keys of klen
 * bytes and values of vlen bytes (0: a number), more than it can hold,
 * then returns the heap it took, from glibc's count of bytes in use:
 * the dict, its shards and bucket arrays, entries, keys and values.
 */
static size_t fill_and_measure(size_t cap, size_t klen, size_t vlen,
                               size_t *entries)
{
    struct mallinfo2 before, after;
    struct luadict *d;
    char key[256], *val = malloc(vlen + 1);
    struct luadict_value v = num(1);
    int forcible, count = 0;
    size_t n = cap / 16 + 64;

    memset(val, 'v', vlen);
    val[vlen] = '\0';
    if (vlen > 0)
        v = str(val);
    before = mallinfo2();
    d = luadict_new("m", cap);
    for (size_t i = 0; i < n; i++) {
        /* i's bytes first, so even short keys are distinct. */
        memset(key, 'k', klen);
        for (size_t b = 0; b < klen && b < sizeof(i); b++)
            key[b] = (char)(i >> (8 * b));
        luadict_store(d, LUADICT_SET, key, klen, &v, 0, 0, 1, &forcible);
    }
    after = mallinfo2();
    luadict_keys(d, 0, 0, count_key, &count);
    *entries = (size_t)count;
    luadict_unref(d);
    free(val);
    return after.uordblks - before.uordblks;
}

/* A dict of declared size S never takes more than S bytes of heap,
 * whatever the shape of its entries (small ones cost most in overhead),
 * and is still used to a fair part. */
static void real_size_within_capacity(void **state)
{
    static const struct {
        size_t cap, klen, vlen;
    } cases[] = {
        {8192, 1, 0},        {8192, 8, 1},         {64 * 1024, 2, 1},
        {64 * 1024, 16, 16}, {1 << 20, 3, 0},      {1 << 20, 8, 1},
        {1 << 20, 32, 100},  {1 << 20, 64, 4000},  {4 << 20, 8, 8},
        {16 << 20, 16, 24},  {16 << 20, 200, 900},
    };

    (void)state;
    if (!HEAP_MEASURED)
        skip();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t entries, used = fill_and_measure(cases[i].cap, cases[i].klen,
                                                cases[i].vlen, &entries);
        print_message("dict %zu B, key %zu B, value %zu B: %zu entries, "
                      "%zu B of heap (%.2f of capacity)\n",
                      cases[i].cap, cases[i].klen, cases[i].vlen, entries, used,
                      (double)used / (double)cases[i].cap);
        if (used > cases[i].cap)
            fail_msg("dict of %zu bytes took %zu", cases[i].cap, used);
        assert_true(entries > 0);
        assert_true(used > cases[i].cap / 2);
    }
}

/* A dict the set made leaves it with its last reference, and a later
 * get of the name makes a new, empty one. */
static void set_forgets_dicts_no_one_holds(void **state)
{
    struct luadict_set *s = luadict_set_new();
    struct luadict_value v = num(3), got;
    int resized, forcible;
    struct luadict *a = luadict_set_get(s, "old", 1 << 20, &resized);
    struct luadict *b = luadict_set_get(s, "kept", 1 << 20, &resized);
    char *out;

    (void)state;
    assert_int_equal(luadict_set_count(s), 2);
    luadict_store(a, LUADICT_SET, "k", 1, &v, 0, 0, 1, &forcible);
    luadict_unref(a);
    assert_int_equal(luadict_set_count(s), 1);
    a = luadict_set_get(s, "old", 1 << 20, &resized);
    assert_int_equal(luadict_set_count(s), 2);
    assert_int_equal(luadict_get(a, "k", 1, 0, &got, &out), 0);
    assert_int_equal(got.type, LUADICT_NIL);
    /* The set may go first: dicts still held keep it until they go. */
    luadict_set_free(s);
    luadict_unref(a);
    luadict_unref(b);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(conventions),
        cmocka_unit_test(clock_eviction),
        cmocka_unit_test(flush_all),
        cmocka_unit_test(two_threads_lose_nothing),
        cmocka_unit_test(token_bucket),
        cmocka_unit_test(set_keeps_dicts_by_name),
        cmocka_unit_test(real_size_within_capacity),
        cmocka_unit_test(set_forgets_dicts_no_one_holds),
    };
    /* glibc keeps a few freed chunks per size in a per-thread cache that
     * mallinfo2() counts as in use: they are the allocator's, not the
     * dict's, and would blur the measurement. Without the cache the count
     * is exact; the variable is read at start, hence the exec. */
    (void)argc;
    if (HEAP_MEASURED && getenv("GLIBC_TUNABLES") == NULL) {
        setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
        execv("/proc/self/exe", argv);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
