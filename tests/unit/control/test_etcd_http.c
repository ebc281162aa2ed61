/*
 * Unit tests for src/control/etcd_http.c's answer decoding: a watch
 * stream's chunked messages split at every byte, a whole answer by
 * Content-Length and by chunks, a non-200 body, the per-message limit
 * (an error, or a message skipped with a skipped() callback), and a
 * stream cut short.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "control/etcd_http.h"

struct got {
    int lines;
    char last[256];
    int done;
    int status;
    char body[256];
    char err[128];
    int stop_after; /* line() returns 1 at this line (0: never) */
};

static int on_line(void *arg, const char *p, size_t n)
{
    struct got *g = arg;

    g->lines++;
    snprintf(g->last, sizeof(g->last), "%.*s", (int)n, p);
    return g->stop_after != 0 && g->lines == g->stop_after;
}

static void on_done(void *arg, int status, const char *body, size_t n,
                    const char *err)
{
    struct got *g = arg;

    g->done++;
    g->status = status;
    snprintf(g->body, sizeof(g->body), "%.*s", (int)n, body);
    snprintf(g->err, sizeof(g->err), "%s", err ? err : "");
}

static const char stream[] =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    "Transfer-Encoding: chunked\r\n\r\n"
    "28\r\n{\"result\":{\"header\":{},\"created\":true}}\n\r\n"
    "f\r\n{\"result\":{\"hea\r\n"
    "f\r\nder\":{}}}\n{\"a\":\r\n"
    "3\r\n1}\n\r\n";

static void test_stream_any_split(void **state)
{
    (void)state;
    for (size_t cut = 1; cut < sizeof(stream) - 1; cut++) {
        struct got g;
        struct etcd_http_cb cb = {on_line, on_done, &g, NULL};
        struct etcd_http *h;

        memset(&g, 0, sizeof(g));
        h = etcd_http_new_parser(1024, 1, &cb);
        assert_non_null(h);
        assert_int_equal(etcd_http_feed(h, stream, cut, 0), 0);
        assert_int_equal(
            etcd_http_feed(h, stream + cut, sizeof(stream) - 1 - cut, 0), 0);
        assert_int_equal(g.lines, 3);
        assert_string_equal(g.last, "{\"a\":1}");
        assert_int_equal(g.done, 0);
        /* The member goes away: done() says so. */
        assert_int_equal(etcd_http_feed(h, "", 0, 1), 1);
        assert_int_equal(g.done, 1);
        assert_string_equal(g.err, "the stream ended");
        etcd_http_free(h);
    }
}

static void test_stream_stop(void **state)
{
    struct got g;
    struct etcd_http_cb cb = {on_line, on_done, &g, NULL};
    struct etcd_http *h;

    (void)state;
    memset(&g, 0, sizeof(g));
    g.stop_after = 1;
    h = etcd_http_new_parser(1024, 1, &cb);
    assert_int_equal(etcd_http_feed(h, stream, sizeof(stream) - 1, 0), 1);
    assert_int_equal(g.lines, 1);
    assert_int_equal(g.done, 0);
    etcd_http_free(h);
}

static void test_message_limit(void **state)
{
    struct got g;
    struct etcd_http_cb cb = {on_line, on_done, &g, NULL};
    struct etcd_http *h;

    (void)state;
    /* A 39-byte message (and its newline) with a cap of 39: one over. */
    memset(&g, 0, sizeof(g));
    h = etcd_http_new_parser(39, 1, &cb);
    assert_int_equal(etcd_http_feed(h, stream, sizeof(stream) - 1, 0), 1);
    assert_int_equal(g.lines, 0);
    assert_string_equal(g.err, "a watch message is larger than the limit");
    etcd_http_free(h);
    /* At the cap it passes. */
    memset(&g, 0, sizeof(g));
    h = etcd_http_new_parser(40, 1, &cb);
    assert_int_equal(etcd_http_feed(h, stream, sizeof(stream) - 1, 0), 0);
    assert_int_equal(g.lines, 3);
    etcd_http_free(h);
}

struct skip {
    struct got g;
    int skipped;
    size_t total;
    char head[64];
};

static int on_skipped(void *arg, const char *head, size_t n, size_t total)
{
    struct skip *s = arg;

    s->skipped++;
    s->total = total;
    snprintf(s->head, sizeof(s->head), "%.*s", (int)(n < 10 ? n : 10), head);
    return 0;
}

static int on_line_skip(void *arg, const char *p, size_t n)
{
    return on_line(&((struct skip *)arg)->g, p, n);
}

static void on_done_skip(void *arg, int status, const char *body, size_t n,
                         const char *err)
{
    on_done(&((struct skip *)arg)->g, status, body, n, err);
}

/* With skipped(), the message one over the cap is skipped whole, named
 * by its first bytes and length, and the stream goes on with the next
 * messages, however the bytes are split. */
static void test_message_skipped(void **state)
{
    (void)state;
    for (size_t cut = 1; cut < sizeof(stream) - 1; cut++) {
        struct skip s;
        struct etcd_http_cb cb = {on_line_skip, on_done_skip, &s, on_skipped};
        struct etcd_http *h;

        memset(&s, 0, sizeof(s));
        h = etcd_http_new_parser(39, 1, &cb);
        assert_non_null(h);
        assert_int_equal(etcd_http_feed(h, stream, cut, 0), 0);
        assert_int_equal(
            etcd_http_feed(h, stream + cut, sizeof(stream) - 1 - cut, 0), 0);
        assert_int_equal(s.skipped, 1);
        assert_int_equal(s.total, 39);
        assert_string_equal(s.head, "{\"result\":");
        assert_int_equal(s.g.lines, 2);
        assert_string_equal(s.g.last, "{\"a\":1}");
        assert_int_equal(s.g.done, 0);
        etcd_http_free(h);
    }
}

static void test_exchange(void **state)
{
    static const char ok[] =
        "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{\"a\":1}";
    static const char bad[] =
        "HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n"
        "b\r\n{\"code\":11}\r\n0\r\n\r\n";
    struct got g;
    struct etcd_http_cb cb = {on_line, on_done, &g, NULL};
    struct etcd_http *h;

    (void)state;
    memset(&g, 0, sizeof(g));
    h = etcd_http_new_parser(1024, 0, &cb);
    assert_int_equal(etcd_http_feed(h, ok, 10, 0), 0);
    assert_int_equal(etcd_http_feed(h, ok + 10, sizeof(ok) - 11, 0), 1);
    assert_int_equal(g.status, 200);
    assert_string_equal(g.body, "{\"a\":1}");
    assert_string_equal(g.err, "");
    etcd_http_free(h);

    memset(&g, 0, sizeof(g));
    h = etcd_http_new_parser(1024, 1, &cb);
    assert_int_equal(etcd_http_feed(h, bad, sizeof(bad) - 1, 0), 1);
    assert_int_equal(g.status, 400);
    assert_int_equal(g.lines, 0);
    assert_string_equal(g.body, "{\"code\":11}");
    etcd_http_free(h);

    /* Content-Length over the cap. */
    memset(&g, 0, sizeof(g));
    h = etcd_http_new_parser(6, 0, &cb);
    assert_int_equal(etcd_http_feed(h, ok, sizeof(ok) - 1, 0), 1);
    assert_string_equal(g.err, "the answer is larger than the limit");
    etcd_http_free(h);

    /* Cut short. */
    memset(&g, 0, sizeof(g));
    h = etcd_http_new_parser(1024, 0, &cb);
    assert_int_equal(etcd_http_feed(h, ok, sizeof(ok) - 3, 1), 1);
    assert_string_equal(g.err, "the answer was cut short");
    etcd_http_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_any_split),
        cmocka_unit_test(test_stream_stop),
        cmocka_unit_test(test_message_limit),
        cmocka_unit_test(test_message_skipped),
        cmocka_unit_test(test_exchange),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
