/*
 * Unit tests for src/policy/lua_dict.c: OpenResty's ngx.shared.DICT
 * conventions (add on an existing key, replace on a missing one, incr
 * with and without init, init_ttl only on creation, not a number),
 * expiry and ttl, CLOCK eviction that spares recently read entries,
 * safe_set refusing to evict, get_keys with max, flush_all and
 * flush_expired, two threads incrementing one key without losing an
 * update, and the token bucket's rate and burst.
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

#include <cmocka.h>

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

    (void)state;
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
    assert_true(luadict_free_space(d) == luadict_capacity(d));
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(conventions),
        cmocka_unit_test(clock_eviction),
        cmocka_unit_test(flush_all),
        cmocka_unit_test(two_threads_lose_nothing),
        cmocka_unit_test(token_bucket),
        cmocka_unit_test(set_keeps_dicts_by_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
