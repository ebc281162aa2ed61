/*
 * Unit tests for src/event/logsink.c: lines handed from a loop's buffer to
 * the writer thread, a reopen after a rename, and lines dropped and
 * counted when the writer cannot keep up.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "event/logsink.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/strait-lsink.XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static char *slurp(const char *path)
{
    static char text[65536];
    int fd = open(path, O_RDONLY);
    ssize_t n;

    assert_true(fd >= 0);
    n = read(fd, text, sizeof(text) - 1);
    assert_true(n >= 0);
    text[n] = '\0';
    close(fd);
    return text;
}

/* Lines of one loop turn go out together, once the turn ends. */
static void test_lines_and_reopen(void **state)
{
    char path[128], moved[128];
    char *err = NULL;
    struct event_base *base = event_base_new();
    struct lsink *s;
    struct lsink_buf b;
    struct lsink_stats st;

    (void)state;
    snprintf(path, sizeof(path), "%s/access.log", dir);
    snprintf(moved, sizeof(moved), "%s/access.log.1", dir);
    s = lsink_new(path, 1 << 20, &err);
    assert_non_null(s);
    lsink_buf_init(&b, s, base);
    lsink_buf_line(&b, "one\n", 4);
    lsink_buf_line(&b, "two", 3); /* a newline is added */
    lsink_flush_wait(s);
    assert_string_equal(slurp(path), ""); /* still in the worker's turn */
    event_base_loop(base, EVLOOP_NONBLOCK);
    lsink_flush_wait(s);
    assert_string_equal(slurp(path), "one\ntwo\n");

    assert_int_equal(rename(path, moved), 0);
    lsink_reopen(s);
    lsink_buf_line(&b, "three\n", 6);
    event_base_loop(base, EVLOOP_NONBLOCK);
    lsink_flush_wait(s);
    assert_string_equal(slurp(path), "three\n");
    assert_string_equal(slurp(moved), "one\ntwo\n");
    lsink_stats(s, &st);
    assert_int_equal(st.written, 3);
    assert_int_equal(st.reopens, 1);
    assert_int_equal(st.dropped, 0);
    lsink_buf_dispose(&b);
    lsink_free(s);
    event_base_free(base);
}

/* A line longer than a chunk is cut and keeps its newline. */
static void test_long_line(void **state)
{
    char path[128];
    char *err = NULL;
    char *line = malloc(LSINK_CHUNK * 2);
    struct event_base *base = event_base_new();
    struct lsink *s;
    struct lsink_buf b;
    struct stat stt;

    (void)state;
    snprintf(path, sizeof(path), "%s/long.log", dir);
    memset(line, 'x', LSINK_CHUNK * 2);
    s = lsink_new(path, 1 << 20, &err);
    assert_non_null(s);
    lsink_buf_init(&b, s, base);
    lsink_buf_line(&b, line, LSINK_CHUNK * 2);
    lsink_buf_line(&b, "y\n", 2); /* the next chunk */
    lsink_buf_dispose(&b);        /* hands over what is left */
    lsink_flush_wait(s);
    assert_int_equal(stat(path, &stt), 0);
    assert_int_equal(stt.st_size, LSINK_CHUNK + 2);
    lsink_free(s);
    event_base_free(base);
    free(line);
}

/* The writer is stuck on a full pipe: what passes max_pending is dropped
 * and counted, and lsink_buf_line() never waits. */
static void test_drops_when_stuck(void **state)
{
    char path[128], line[1000];
    char *err = NULL;
    struct event_base *base = event_base_new();
    struct lsink *s;
    struct lsink_buf b;
    struct lsink_stats st;
    int rfd, lines = 0;

    (void)state;
    snprintf(path, sizeof(path), "%s/fifo", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    rfd = open(path, O_RDWR | O_NONBLOCK); /* a reader that never reads */
    assert_true(rfd >= 0);
    s = lsink_new(path, 2 * LSINK_CHUNK, &err);
    assert_non_null(s);
    lsink_buf_init(&b, s, base);
    memset(line, 'z', sizeof(line));
    line[sizeof(line) - 1] = '\n';
    do {
        for (int i = 0; i < 20; i++, lines++)
            lsink_buf_line(&b, line, sizeof(line));
        event_base_loop(base, EVLOOP_NONBLOCK);
        lsink_stats(s, &st);
    } while (st.dropped == 0 && lines < 100000);
    assert_true(st.dropped > 0);
    assert_true(st.pending <= 2 * LSINK_CHUNK);
    /* Unblock the writer: read until everything queued was written. */
    for (;;) {
        char sink[65536];
        ssize_t n = read(rfd, sink, sizeof(sink));
        lsink_stats(s, &st);
        if (n < 0 && errno == EAGAIN && st.pending == 0 &&
            st.written + st.dropped == (uint64_t)lines)
            break;
    }
    lsink_buf_dispose(&b);
    lsink_free(s);
    close(rfd);
    event_base_free(base);
}

/* A writer stuck on a pipe nobody reads does not keep lsink_free() (and
 * so the process's exit) waiting for ever. */
static void test_free_stuck_writer(void **state)
{
    char path[128], line[1000];
    char *err = NULL;
    struct event_base *base = event_base_new();
    struct lsink *s;
    struct lsink_buf b;
    struct lsink_stats st;
    int rfd;

    (void)state;
    snprintf(path, sizeof(path), "%s/fifo2", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    rfd = open(path, O_RDWR | O_NONBLOCK);
    assert_true(rfd >= 0);
    s = lsink_new(path, 1 << 20, &err);
    assert_non_null(s);
    lsink_buf_init(&b, s, base);
    memset(line, 'w', sizeof(line));
    line[sizeof(line) - 1] = '\n';
    /* More than the pipe holds: the writer blocks in write(2). */
    for (int i = 0; i < 200; i++)
        lsink_buf_line(&b, line, sizeof(line));
    lsink_buf_dispose(&b);
    do {
        lsink_stats(s, &st);
    } while (st.pending == 0);
    lsink_free(s); /* returns after its wait, the writer cancelled */
    close(rfd);
    event_base_free(base);
}

static void test_open_fails(void **state)
{
    char *err = NULL;

    (void)state;
    assert_null(lsink_new("/nonexistent-dir/x.log", 1 << 20, &err));
    assert_non_null(strstr(err, "access log /nonexistent-dir/x.log: "));
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_and_reopen),
        cmocka_unit_test(test_long_line),
        cmocka_unit_test(test_drops_when_stuck),
        cmocka_unit_test(test_free_stuck_writer),
        cmocka_unit_test(test_open_fails),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
