/* The body pipe's replay buffer (hpipe_keep, hpipe_rewind): what retries
 * and mirroring rely on to send a request body again. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/bufpool.h"
#include "http/pipe.h"

/* Reads everything readable now into out (at most cap bytes), in steps of
 * at most step bytes, as a consumer does. */
static size_t drain(struct hpipe *p, char *out, size_t cap, size_t step)
{
    size_t got = 0, n;
    const char *d;

    while ((d = hpipe_peek(p, &n)), n > 0 && got < cap) {
        if (n > step)
            n = step;
        if (n > cap - got)
            n = cap - got;
        memcpy(out + got, d, n);
        hpipe_consume(p, n);
        got += n;
    }
    return got;
}

static void fill(char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (char)((i * 31 + seed) & 0xff);
}

static int wakes;
static void count_wake(void *arg)
{
    (void)arg;
    wakes++;
}

/* Bytes going in or out stamp the pipe (the stream idle timeout reads
 * it); a write that takes nothing does not. */
static void test_write_and_consume_stamp_activity(void **state)
{
    struct hpipe p;
    const char *d;
    size_t n;

    (void)state;
    hpipe_init(&p, NULL, 8);
    assert_int_equal(p.active_ms, 0);
    assert_int_equal(hpipe_write(&p, "12345678", 8), 8);
    assert_true(p.active_ms > 0);
    p.active_ms = 1;
    assert_int_equal(hpipe_write(&p, "9", 1), 0); /* full */
    assert_int_equal(p.active_ms, 1);
    d = hpipe_peek(&p, &n);
    assert_non_null(d);
    hpipe_consume(&p, 4);
    assert_true(p.active_ms > 1);
    hpipe_dispose(&p);
}

static void test_rewind_replays_whole_body(void **state)
{
    struct bufpool pool;
    struct hpipe p;
    char body[10000], out[10000];
    size_t sent = 0, got = 0;

    (void)state;
    fill(body, sizeof(body), 1);
    bufpool_init(&pool, 1024, 4);
    hpipe_init(&p, &pool, 1024);
    hpipe_keep(&p, 1 << 20);
    /* The body streams through a pipe smaller than itself; the first
     * reader stops at 6000 bytes (its attempt failed). */
    while (got < 6000) {
        sent += hpipe_write(&p, body + sent, sizeof(body) - sent);
        got += drain(&p, out + got, 6000 - got, 333);
    }
    assert_true(hpipe_replayable(&p));
    assert_int_equal(hpipe_rewind(&p), 0);
    /* The next reader gets everything from byte 0, then the rest live. */
    got = 0;
    while (got < sizeof(body)) {
        if (sent < sizeof(body))
            sent += hpipe_write(&p, body + sent, sizeof(body) - sent);
        else
            hpipe_finish(&p);
        got += drain(&p, out + got, sizeof(body) - got, 700);
    }
    hpipe_finish(&p);
    assert_memory_equal(out, body, sizeof(body));
    assert_true(hpipe_drained(&p));
    /* And again, a third attempt, all from the kept bytes. */
    assert_int_equal(hpipe_rewind(&p), 0);
    assert_false(hpipe_drained(&p));
    memset(out, 0, sizeof(out));
    assert_int_equal(drain(&p, out, sizeof(out), 4096), sizeof(body));
    assert_memory_equal(out, body, sizeof(body));
    assert_true(hpipe_drained(&p));
    hpipe_dispose(&p);
    bufpool_dispose(&pool);
}

static void test_body_past_limit_is_passed_on_but_not_kept(void **state)
{
    struct hpipe p;
    char body[5000], out[5000];
    size_t sent = 0, got = 0, n;

    (void)state;
    fill(body, sizeof(body), 2);
    hpipe_init(&p, NULL, 1000);
    hpipe_keep(&p, 4096);
    while (got < sizeof(body)) {
        sent += hpipe_write(&p, body + sent, sizeof(body) - sent);
        got += drain(&p, out + got, sizeof(body) - got, 512);
        if (got < 4096)
            assert_true(hpipe_replayable(&p));
    }
    hpipe_finish(&p);
    /* Every byte went through, in order... */
    assert_memory_equal(out, body, sizeof(body));
    assert_true(hpipe_drained(&p));
    /* ...but the pipe can no longer replay, and holds no kept memory. */
    assert_false(hpipe_replayable(&p));
    assert_int_equal(hpipe_rewind(&p), -1);
    hpipe_kept(&p, &n);
    assert_int_equal(n, 0);
    assert_null(p.kept.data);
    hpipe_dispose(&p);
}

static void test_no_keep_no_rewind(void **state)
{
    struct hpipe p;
    char out[8];

    (void)state;
    hpipe_init(&p, NULL, 64);
    assert_int_equal(hpipe_write(&p, "abcdef", 6), 6);
    assert_int_equal(drain(&p, out, sizeof(out), 8), 6);
    assert_false(hpipe_replayable(&p));
    assert_int_equal(hpipe_rewind(&p), -1);
    assert_null(p.kept.data);
    hpipe_dispose(&p);
}

static void test_replay_does_not_wake_the_writer(void **state)
{
    struct hpipe p;
    char out[64];
    size_t k, l;
    const char *d;

    (void)state;
    hpipe_init(&p, NULL, 8);
    p.wake_writer = count_wake;
    p.wake_on_consume = 1; /* as the HTTP/2 server side sets it */
    hpipe_keep(&p, 64);
    assert_int_equal(hpipe_write(&p, "01234567", 8), 8);
    wakes = 0;
    assert_int_equal(drain(&p, out, 5, 5), 5);
    assert_int_equal(wakes, 1); /* live bytes: credit goes back */
    assert_int_equal(hpipe_rewind(&p), 0);
    wakes = 0;
    assert_int_equal(drain(&p, out, 5, 2), 5);
    assert_memory_equal(out, "01234", 5);
    assert_int_equal(wakes, 0); /* kept bytes were paid for already */
    /* kept + live is the whole body so far (what a mirror copies). */
    d = hpipe_kept(&p, &k);
    assert_int_equal(k, 5);
    assert_memory_equal(d, "01234", 5);
    d = hpipe_live(&p, &l);
    assert_int_equal(l, 3);
    assert_memory_equal(d, "567", 3);
    hpipe_dispose(&p);
}

static void test_keep_stop_frees_unless_replaying(void **state)
{
    struct hpipe p;
    char out[16];

    (void)state;
    hpipe_init(&p, NULL, 16);
    hpipe_keep(&p, 64);
    assert_int_equal(hpipe_write(&p, "abcdefgh", 8), 8);
    assert_int_equal(drain(&p, out, 8, 8), 8);
    assert_int_equal(hpipe_rewind(&p), 0);
    assert_int_equal(drain(&p, out, 3, 3), 3);
    /* A rewound reader is mid-way: the kept bytes stay. */
    hpipe_keep_stop(&p);
    assert_true(hpipe_replayable(&p));
    assert_int_equal(drain(&p, out + 3, 5, 5), 5);
    assert_memory_equal(out, "abcdefgh", 8);
    /* Read past them: now they go, and bytes are no longer kept. */
    hpipe_keep_stop(&p);
    assert_false(hpipe_replayable(&p));
    assert_null(p.kept.data);
    assert_int_equal(hpipe_write(&p, "ij", 2), 2);
    assert_int_equal(drain(&p, out, 2, 2), 2);
    assert_null(p.kept.data);
    assert_int_equal(hpipe_rewind(&p), -1);
    hpipe_dispose(&p);
}

/* A second hpipe_keep (a retry after a LuaPolicy read the body) keeps
 * what is kept, rewound, and only raises the limit. */
static void test_keep_again_keeps_and_raises_the_limit(void **state)
{
    struct hpipe p;
    char out[16];

    (void)state;
    hpipe_init(&p, NULL, 16);
    hpipe_keep(&p, 4);
    assert_int_equal(hpipe_write(&p, "abcd", 4), 4);
    assert_int_equal(drain(&p, out, 4, 4), 4);
    assert_int_equal(hpipe_rewind(&p), 0);
    hpipe_keep(&p, 64);
    assert_true(hpipe_replayable(&p));
    assert_int_equal(p.kept.max, 64);
    hpipe_keep(&p, 8); /* never lowered */
    assert_int_equal(p.kept.max, 64);
    assert_int_equal(hpipe_write(&p, "efgh", 4), 4);
    hpipe_finish(&p);
    assert_int_equal(drain(&p, out, 8, 8), 8);
    assert_memory_equal(out, "abcdefgh", 8);
    /* Still whole: a retry replays all of it. */
    assert_int_equal(hpipe_rewind(&p), 0);
    assert_int_equal(drain(&p, out, 8, 8), 8);
    assert_memory_equal(out, "abcdefgh", 8);
    hpipe_dispose(&p);
}

static int ended;
static void count_end(void *arg)
{
    (void)arg;
    ended++;
}

static void test_on_end_hears_finish_and_abort(void **state)
{
    struct hpipe p;

    (void)state;
    hpipe_init(&p, NULL, 8);
    p.on_end = count_end;
    ended = 0;
    hpipe_finish(&p);
    hpipe_finish(&p);
    assert_int_equal(ended, 1);
    hpipe_reset(&p);
    hpipe_abort(&p);
    assert_int_equal(ended, 2);
    hpipe_dispose(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_and_consume_stamp_activity),
        cmocka_unit_test(test_rewind_replays_whole_body),
        cmocka_unit_test(test_body_past_limit_is_passed_on_but_not_kept),
        cmocka_unit_test(test_no_keep_no_rewind),
        cmocka_unit_test(test_replay_does_not_wake_the_writer),
        cmocka_unit_test(test_keep_stop_frees_unless_replaying),
        cmocka_unit_test(test_keep_again_keeps_and_raises_the_limit),
        cmocka_unit_test(test_on_end_hears_finish_and_abort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
