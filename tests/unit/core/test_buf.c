/*
 * Unit tests for src/core/buf.c: the cap is a hard limit for every way of
 * adding bytes, space is reused before the buffer grows, and the fd helpers
 * report what read(2)/write(2) did.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"

/* check_invariant() asserts head <= tail <= alloc <= max. */
static void check_invariant(const struct buf *b)
{
    assert_true(b->head <= b->tail);
    assert_true(b->tail <= b->alloc);
    assert_true(b->alloc <= b->max);
}

static void make_pipe(int fds[2])
{
    assert_int_equal(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
}

static void test_init_allocates_nothing(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 100);
    assert_null(b.data);
    assert_int_equal(buf_len(&b), 0);
    assert_int_equal(buf_room(&b), 100);
    assert_int_equal(b.alloc, 0);
    buf_dispose(&b);
    assert_int_equal(b.max, 100);
}

static void test_append_refuses_past_cap(void **state)
{
    struct buf b;
    char big[1000];

    (void)state;
    memset(big, 'a', sizeof(big));
    buf_init(&b, 1000);
    assert_int_equal(buf_append(&b, big, 600), 0);
    check_invariant(&b);
    /* One byte too many: refused whole, nothing appended. */
    assert_int_equal(buf_append(&b, big, 401), -1);
    assert_int_equal(buf_len(&b), 600);
    check_invariant(&b);
    assert_int_equal(buf_append(&b, big, 400), 0);
    assert_int_equal(buf_len(&b), 1000);
    assert_int_equal(buf_room(&b), 0);
    /* Growth stops at the cap, never beyond. */
    assert_int_equal(b.alloc, 1000);
    assert_int_equal(buf_append(&b, "x", 1), -1);
    assert_int_equal(buf_puts(&b, "x"), -1);
    assert_int_equal(buf_len(&b), 1000);
    /* Empty appends always succeed, even when full. */
    assert_int_equal(buf_append(&b, "", 0), 0);
    check_invariant(&b);
    buf_dispose(&b);
}

static void test_small_cap(void **state)
{
    struct buf b;

    (void)state;
    /* The first allocation (256 by default) is clamped to a smaller cap. */
    buf_init(&b, 10);
    assert_int_equal(buf_puts(&b, "0123456789"), 0);
    assert_int_equal(b.alloc, 10);
    assert_int_equal(buf_puts(&b, "a"), -1);
    assert_memory_equal(buf_ptr(&b), "0123456789", 10);
    buf_dispose(&b);

    buf_init(&b, 0);
    assert_int_equal(buf_puts(&b, "a"), -1);
    assert_null(buf_reserve(&b, 1));
    assert_null(b.data);
    buf_dispose(&b);
}

static void test_growth_never_exceeds_cap(void **state)
{
    struct buf b;
    char chunk[37];

    (void)state;
    memset(chunk, 'z', sizeof(chunk));
    buf_init(&b, 3001);
    for (;;) {
        int rc = buf_append(&b, chunk, sizeof(chunk));
        check_invariant(&b);
        if (rc < 0)
            break;
    }
    assert_int_equal(buf_len(&b), (3001 / sizeof(chunk)) * sizeof(chunk));
    assert_true(buf_room(&b) < sizeof(chunk));
    buf_dispose(&b);
}

static void test_printf(void **state)
{
    struct buf b;
    char long_arg[600];

    (void)state;
    buf_init(&b, 1000);
    assert_int_equal(buf_printf(&b, "%s=%d", "port", 80), 0);
    assert_int_equal(buf_len(&b), 7);
    assert_memory_equal(buf_ptr(&b), "port=80", 7);

    /* Output longer than the internal 256-byte scratch goes straight into
     * the buffer; its NUL is not counted. */
    memset(long_arg, 'L', sizeof(long_arg) - 1);
    long_arg[sizeof(long_arg) - 1] = '\0';
    assert_int_equal(buf_printf(&b, "[%s]", long_arg), 0);
    assert_int_equal(buf_len(&b), 7 + 601);
    assert_int_equal(buf_ptr(&b)[7], '[');
    assert_int_equal(buf_ptr(&b)[7 + 600], ']');
    check_invariant(&b);

    /* Past the cap: refused, nothing appended (short and long paths). */
    assert_int_equal(buf_printf(&b, "%s", long_arg), -1);
    assert_int_equal(buf_len(&b), 608);
    buf_consume(&b, 608);
    assert_int_equal(buf_printf(&b, "%s%s", long_arg, long_arg), -1);
    assert_int_equal(buf_len(&b), 0);
    check_invariant(&b);
    buf_dispose(&b);

    /* A short printf that does not fit is refused too. */
    buf_init(&b, 5);
    assert_int_equal(buf_printf(&b, "%d", 123456), -1);
    assert_int_equal(buf_len(&b), 0);
    assert_int_equal(buf_printf(&b, "%d", 12345), 0);
    assert_int_equal(buf_len(&b), 5);
    buf_dispose(&b);
}

static void test_reserve_refuses_past_cap(void **state)
{
    struct buf b;
    char *p;

    (void)state;
    buf_init(&b, 64);
    assert_null(buf_reserve(&b, 65));
    assert_null(b.data);
    p = buf_reserve(&b, 64);
    assert_non_null(p);
    memcpy(p, "abcd", 4);
    buf_commit(&b, 4);
    assert_null(buf_reserve(&b, 61));
    assert_non_null(buf_reserve(&b, 60));
    assert_int_equal(buf_len(&b), 4);
    check_invariant(&b);
    buf_dispose(&b);
}

static void test_reserve_compacts_before_growing(void **state)
{
    struct buf b;
    char data[256];
    char *before, *p;

    (void)state;
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)i;
    buf_init(&b, 4096);
    assert_int_equal(buf_append(&b, data, sizeof(data)), 0);
    assert_int_equal(b.alloc, 256);
    before = b.data;
    buf_consume(&b, 200);
    assert_int_equal(b.head, 200);

    /* 56 live bytes + 150 fit in the 256 allocated once moved forward. */
    p = buf_reserve(&b, 150);
    assert_non_null(p);
    assert_int_equal(b.alloc, 256);
    assert_ptr_equal(b.data, before);
    assert_int_equal(b.head, 0);
    assert_int_equal(b.tail, 56);
    assert_ptr_equal(p, b.data + 56);
    assert_memory_equal(buf_ptr(&b), data + 200, 56);

    /* When compaction is not enough, the buffer grows. */
    p = buf_reserve(&b, 250);
    assert_non_null(p);
    assert_true(b.alloc >= 306);
    assert_memory_equal(buf_ptr(&b), data + 200, 56);
    check_invariant(&b);
    buf_dispose(&b);
}

/* A full allocation whose head was consumed is reused up to the cap, with
 * no growth (the allocation already equals the cap). */
static void test_reserve_reuses_consumed_room_at_cap(void **state)
{
    struct buf b;
    char data[100];

    (void)state;
    memset(data, 'r', sizeof(data));
    buf_init(&b, 100);
    assert_int_equal(buf_append(&b, data, 100), 0);
    assert_null(buf_reserve(&b, 1));
    buf_consume(&b, 30);
    assert_int_equal(buf_room(&b), 30);
    assert_int_equal(buf_append(&b, "0123456789012345678901234567890", 30), 0);
    assert_int_equal(b.alloc, 100);
    assert_int_equal(buf_len(&b), 100);
    assert_memory_equal(buf_ptr(&b) + 70, "012345678901234567890123456789", 30);
    buf_dispose(&b);
}

static void test_reserve_any(void **state)
{
    struct buf b;
    size_t room = 99;
    char *p;

    (void)state;
    buf_init(&b, 50);
    p = buf_reserve_any(&b, &room);
    assert_non_null(p);
    assert_int_equal(room, 50);
    buf_commit(&b, 50);
    p = buf_reserve_any(&b, &room);
    assert_null(p);
    assert_int_equal(room, 0);
    buf_consume(&b, 20);
    p = buf_reserve_any(&b, &room);
    assert_non_null(p);
    assert_int_equal(room, 20);
    check_invariant(&b);
    buf_dispose(&b);
}

static void test_consume_resets(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 100);
    assert_int_equal(buf_puts(&b, "hello world"), 0);
    buf_consume(&b, 6);
    assert_int_equal(b.head, 6);
    assert_int_equal(buf_len(&b), 5);
    assert_memory_equal(buf_ptr(&b), "world", 5);
    buf_consume(&b, 5);
    assert_int_equal(b.head, 0);
    assert_int_equal(b.tail, 0);
    assert_int_equal(buf_len(&b), 0);

    /* Consuming more than is there empties the buffer too. */
    assert_int_equal(buf_puts(&b, "abc"), 0);
    buf_consume(&b, 1000);
    assert_int_equal(b.head, 0);
    assert_int_equal(b.tail, 0);
    assert_int_equal(buf_room(&b), 100);
    buf_dispose(&b);
}

/* What was appended last goes; what was consumed stays consumed. */
static void test_truncate_drops_the_tail(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 100);
    assert_int_equal(buf_puts(&b, "100 xx|HEAD"), 0);
    buf_consume(&b, 4);
    buf_truncate(&b, 2);
    assert_int_equal(buf_len(&b), 2);
    assert_memory_equal(buf_ptr(&b), "xx", 2);
    /* Longer than what is there: nothing changes. */
    buf_truncate(&b, 50);
    assert_int_equal(buf_len(&b), 2);
    assert_int_equal(buf_puts(&b, "NEW"), 0);
    assert_memory_equal(buf_ptr(&b), "xxNEW", 5);
    /* To nothing: the offsets reset as after a full consume. */
    buf_truncate(&b, 0);
    assert_int_equal(buf_len(&b), 0);
    assert_int_equal(b.head, 0);
    assert_int_equal(b.tail, 0);
    buf_dispose(&b);
}

static void test_release_if_empty(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 100);
    buf_release_if_empty(&b); /* nothing allocated: a no-op */
    assert_null(b.data);
    assert_int_equal(buf_puts(&b, "abc"), 0);
    buf_release_if_empty(&b);
    assert_non_null(b.data);
    assert_int_equal(buf_len(&b), 3);
    buf_consume(&b, 3);
    buf_release_if_empty(&b);
    assert_null(b.data);
    assert_int_equal(b.alloc, 0);
    assert_int_equal(b.max, 100);
    /* Still usable, with the same cap. */
    assert_int_equal(buf_puts(&b, "xyz"), 0);
    assert_memory_equal(buf_ptr(&b), "xyz", 3);
    buf_dispose(&b);
    assert_null(b.data);
}

static void test_cstr(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 8);
    assert_string_equal(buf_cstr(&b), "");
    assert_int_equal(buf_puts(&b, "abc"), 0);
    assert_string_equal(buf_cstr(&b), "abc");
    assert_int_equal(buf_len(&b), 3);
    /* The NUL is not committed: appending continues after "abc". */
    assert_int_equal(buf_puts(&b, "de"), 0);
    assert_string_equal(buf_cstr(&b), "abcde");
    buf_consume(&b, 2);
    assert_string_equal(buf_cstr(&b), "cde");
    buf_consume(&b, 3);
    assert_int_equal(buf_puts(&b, "12345678"), 0);
    /* Full: no room for the NUL, "" rather than an unterminated string. */
    assert_string_equal(buf_cstr(&b), "");
    assert_int_equal(buf_len(&b), 8);
    buf_dispose(&b);
}

static void test_read_fd(void **state)
{
    struct buf b;
    int fds[2];

    (void)state;
    make_pipe(fds);
    buf_init(&b, 8);

    /* Nothing to read on a non-blocking pipe: -1 with EAGAIN. */
    errno = 0;
    assert_int_equal(buf_read_fd(&b, fds[0]), -1);
    assert_true(errno == EAGAIN || errno == EWOULDBLOCK);

    assert_int_equal(write(fds[1], "hello", 5), 5);
    assert_int_equal(buf_read_fd(&b, fds[0]), 5);
    assert_int_equal(buf_len(&b), 5);
    assert_memory_equal(buf_ptr(&b), "hello", 5);

    /* Only the room left (3 bytes) is read. */
    assert_int_equal(write(fds[1], "0123456789", 10), 10);
    assert_int_equal(buf_read_fd(&b, fds[0]), 3);
    assert_memory_equal(buf_ptr(&b), "hello012", 8);
    /* Full: -2, and the pipe keeps its bytes. */
    assert_int_equal(buf_read_fd(&b, fds[0]), -2);
    assert_int_equal(buf_len(&b), 8);

    /* After consuming, reading resumes where the pipe left off. */
    buf_consume(&b, 8);
    assert_int_equal(buf_read_fd(&b, fds[0]), 7);
    assert_memory_equal(buf_ptr(&b), "3456789", 7);

    /* End of file: 0. */
    close(fds[1]);
    buf_consume(&b, 7);
    assert_int_equal(buf_read_fd(&b, fds[0]), 0);
    assert_int_equal(buf_len(&b), 0);
    close(fds[0]);
    buf_dispose(&b);
}

static void test_write_fd(void **state)
{
    struct buf b;
    int fds[2];
    char in[16];

    (void)state;
    make_pipe(fds);
    buf_init(&b, 64);
    assert_int_equal(buf_write_fd(&b, fds[1]), 0);
    assert_int_equal(buf_puts(&b, "ping pong"), 0);
    assert_int_equal(buf_write_fd(&b, fds[1]), 9);
    assert_int_equal(buf_len(&b), 0);
    assert_int_equal(b.head, 0);
    assert_int_equal(read(fds[0], in, sizeof(in)), 9);
    assert_memory_equal(in, "ping pong", 9);

    /* A closed reader: -1 with EPIPE (SIGPIPE is ignored by the caller, as
     * strait does), and nothing is consumed. */
    close(fds[0]);
    assert_int_equal(buf_puts(&b, "lost"), 0);
    errno = 0;
    assert_int_equal(buf_write_fd(&b, fds[1]), -1);
    assert_int_equal(errno, EPIPE);
    assert_int_equal(buf_len(&b), 4);
    close(fds[1]);
    buf_dispose(&b);
}

/* With a full socket, write(2) takes part of the buffer or none of it:
 * what was written is consumed, the rest stays at the head. */
static void test_write_fd_partial(void **state)
{
    struct buf b;
    int sv[2];
    int sndbuf = 4096;
    size_t total = 0, drained = 0;
    ssize_t n;
    int err = 0;
    char sink[65536];

    (void)state;
    assert_int_equal(
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv),
        0);
    assert_int_equal(
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
    buf_init(&b, 1 << 20);
    {
        size_t room;
        char *p = buf_reserve_any(&b, &room);
        assert_non_null(p);
        for (size_t i = 0; i < room; i++)
            p[i] = (char)(i % 251);
        buf_commit(&b, room);
    }
    /* Write until the socket refuses more; bounded by the buffer size. */
    for (;;) {
        size_t before = buf_len(&b);
        n = buf_write_fd(&b, sv[0]);
        if (n < 0) {
            err = errno;
            break;
        }
        assert_true(n > 0);
        assert_int_equal(buf_len(&b), before - (size_t)n);
        total += (size_t)n;
        if (buf_len(&b) == 0)
            break;
    }
    assert_int_equal(n, -1);
    assert_true(err == EAGAIN || err == EWOULDBLOCK);
    assert_true(total > 0);
    assert_int_equal(buf_len(&b), (size_t)(1 << 20) - total);
    /* The head now points at the first unwritten byte. */
    assert_int_equal((unsigned char)buf_ptr(&b)[0], total % 251);

    /* The peer received exactly the bytes that were consumed, in order. */
    while (drained < total) {
        n = read(sv[1], sink, sizeof(sink));
        assert_true(n > 0);
        for (ssize_t i = 0; i < n; i++)
            assert_int_equal((unsigned char)sink[i],
                             (drained + (size_t)i) % 251);
        drained += (size_t)n;
    }
    assert_int_equal(drained, total);
    close(sv[0]);
    close(sv[1]);
    buf_dispose(&b);
}

static void test_read_fd_socketpair_full(void **state)
{
    struct buf b;
    int sv[2];
    char out[32];

    (void)state;
    assert_int_equal(
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv),
        0);
    memset(out, 'x', sizeof(out));
    assert_int_equal(write(sv[1], out, sizeof(out)), (ssize_t)sizeof(out));
    buf_init(&b, 16);
    assert_int_equal(buf_read_fd(&b, sv[0]), 16);
    assert_int_equal(buf_read_fd(&b, sv[0]), -2);
    buf_consume(&b, 4);
    assert_int_equal(buf_read_fd(&b, sv[0]), 4);
    assert_int_equal(buf_len(&b), 16);
    assert_int_equal(b.alloc, 16);
    check_invariant(&b);
    close(sv[0]);
    close(sv[1]);
    buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_allocates_nothing),
        cmocka_unit_test(test_append_refuses_past_cap),
        cmocka_unit_test(test_small_cap),
        cmocka_unit_test(test_growth_never_exceeds_cap),
        cmocka_unit_test(test_printf),
        cmocka_unit_test(test_reserve_refuses_past_cap),
        cmocka_unit_test(test_reserve_compacts_before_growing),
        cmocka_unit_test(test_reserve_reuses_consumed_room_at_cap),
        cmocka_unit_test(test_reserve_any),
        cmocka_unit_test(test_consume_resets),
        cmocka_unit_test(test_truncate_drops_the_tail),
        cmocka_unit_test(test_release_if_empty),
        cmocka_unit_test(test_cstr),
        cmocka_unit_test(test_read_fd),
        cmocka_unit_test(test_write_fd),
        cmocka_unit_test(test_write_fd_partial),
        cmocka_unit_test(test_read_fd_socketpair_full),
    };

    /* A write to a closed pipe must fail with EPIPE, not kill the test. */
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
