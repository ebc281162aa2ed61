#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/bufpool.h"

static void test_fill_gives_full_size_buffer(void **state)
{
    struct bufpool p;
    struct buf b;
    size_t room;

    (void)state;
    bufpool_init(&p, 4096, 4);
    buf_init(&b, 4096);
    assert_int_equal(bufpool_fill(&p, &b), 0);
    assert_non_null(b.data);
    assert_int_equal(b.alloc, 4096);
    assert_non_null(buf_reserve_any(&b, &room));
    assert_int_equal(room, 4096);
    bufpool_drain(&p, &b);
    buf_dispose(&b);
    bufpool_dispose(&p);
}

static void test_drain_returns_only_empty_buffers(void **state)
{
    struct bufpool p;
    struct buf b;

    (void)state;
    bufpool_init(&p, 1024, 4);
    buf_init(&b, 1024);
    assert_int_equal(bufpool_fill(&p, &b), 0);
    assert_int_equal(buf_append(&b, "abc", 3), 0);
    bufpool_drain(&p, &b);
    assert_non_null(b.data); /* still holds bytes: kept */
    assert_int_equal(p.n, 0);
    buf_consume(&b, 3);
    bufpool_drain(&p, &b);
    assert_null(b.data);
    assert_int_equal(p.n, 1);
    bufpool_dispose(&p);
}

static void test_buffers_are_reused_without_malloc(void **state)
{
    struct bufpool p;
    struct buf b;
    void *first;

    (void)state;
    bufpool_init(&p, 2048, 2);
    buf_init(&b, 2048);
    assert_int_equal(bufpool_fill(&p, &b), 0);
    first = b.data;
    bufpool_drain(&p, &b);
    assert_int_equal(bufpool_fill(&p, &b), 0);
    assert_ptr_equal(b.data, first);
    assert_int_equal(p.n, 0);
    bufpool_drain(&p, &b);
    bufpool_dispose(&p);
}

static void test_keep_bounds_retained_buffers(void **state)
{
    struct bufpool p;
    struct buf b[5];

    (void)state;
    bufpool_init(&p, 512, 2);
    for (int i = 0; i < 5; i++) {
        buf_init(&b[i], 512);
        assert_int_equal(bufpool_fill(&p, &b[i]), 0);
    }
    for (int i = 0; i < 5; i++) {
        bufpool_drain(&p, &b[i]);
        assert_null(b[i].data);
    }
    /* Two kept, three freed (ASan reports a leak if they were not). */
    assert_int_equal(p.n, 2);
    bufpool_dispose(&p);
    assert_int_equal(p.n, 0);
}

static void test_fill_is_noop_when_storage_present(void **state)
{
    struct bufpool p;
    struct buf b;
    void *mem;

    (void)state;
    bufpool_init(&p, 256, 1);
    buf_init(&b, 256);
    assert_int_equal(bufpool_fill(&p, &b), 0);
    mem = b.data;
    assert_int_equal(bufpool_fill(&p, &b), 0);
    assert_ptr_equal(b.data, mem);
    bufpool_drain(&p, &b);
    bufpool_dispose(&p);
}

/* A buffer capped below the pool's size (a 60 KiB read buffer from a
 * 64 KiB pool) comes back to the free list through bufpool_put, and the
 * next fill reuses the same storage. */
static void test_put_takes_back_smaller_capped_buffer(void **state)
{
    struct bufpool p;
    struct buf b;
    void *first;

    (void)state;
    bufpool_init(&p, 4096, 2);
    buf_init(&b, 3000);
    assert_true(bufpool_fits(&p, b.max));
    assert_int_equal(bufpool_fill(&p, &b), 0);
    assert_int_equal(b.alloc, 3000);
    first = b.data;
    assert_int_equal(buf_append(&b, "x", 1), 0);
    bufpool_put(&p, &b); /* not empty: kept */
    assert_ptr_equal(b.data, first);
    buf_consume(&b, 1);
    bufpool_put(&p, &b);
    assert_null(b.data);
    assert_int_equal(p.n, 1);
    assert_int_equal(bufpool_fill(&p, &b), 0);
    assert_ptr_equal(b.data, first);
    assert_int_equal(p.n, 0);
    bufpool_put(&p, &b);
    bufpool_dispose(&p);
    assert_false(bufpool_fits(&p, 5000));
}

/* Trimming frees what the free list kept and leaves the pool usable:
 * the next fill allocates again, and the pool keeps buffers again. */
static void test_trim_empties_the_free_list(void **state)
{
    struct bufpool p;
    struct buf b[3];

    (void)state;
    bufpool_init(&p, 2048, 4);
    for (int i = 0; i < 3; i++) {
        buf_init(&b[i], 2048);
        assert_int_equal(bufpool_fill(&p, &b[i]), 0);
    }
    for (int i = 0; i < 3; i++)
        bufpool_put(&p, &b[i]);
    assert_int_equal(p.n, 3);
    bufpool_trim(&p);
    assert_int_equal(p.n, 0);
    bufpool_trim(&p);
    assert_int_equal(bufpool_fill(&p, &b[0]), 0);
    assert_non_null(b[0].data);
    bufpool_put(&p, &b[0]);
    assert_int_equal(p.n, 1);
    bufpool_dispose(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_takes_back_smaller_capped_buffer),
        cmocka_unit_test(test_trim_empties_the_free_list),
        cmocka_unit_test(test_fill_gives_full_size_buffer),
        cmocka_unit_test(test_drain_returns_only_empty_buffers),
        cmocka_unit_test(test_buffers_are_reused_without_malloc),
        cmocka_unit_test(test_keep_bounds_retained_buffers),
        cmocka_unit_test(test_fill_is_noop_when_storage_present),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
