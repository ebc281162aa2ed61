/*
 * Unit tests for src/http1/writer.c: the exact bytes of heads and chunks,
 * refusal of anything that could inject a header or a message, and the
 * all-or-nothing behaviour at the buffer's cap.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "http1/writer.h"

#define LIT(s) (s), (sizeof(s) - 1)

static struct slice sl(const char *s)
{
    struct slice v = {s, strlen(s)};
    return v;
}

static struct http_field hdr(const char *name, const char *value)
{
    struct http_field h = {sl(name), sl(value)};
    return h;
}

static void assert_buf(const struct buf *b, const char *want, size_t n)
{
    assert_int_equal(buf_len(b), n);
    if (n > 0)
        assert_memory_equal(buf_ptr(b), want, n);
}

static void test_request_head_bytes(void **state)
{
    static const char want[] = "POST /a?b=c HTTP/1.1\r\n"
                               "Host: example.com\r\n"
                               "X-Empty: \r\n"
                               "Content-Length: 3\r\n"
                               "\r\n";
    struct http_field h[3];
    struct buf b;

    (void)state;
    h[0] = hdr("Host", "example.com");
    h[1] = hdr("X-Empty", "");
    h[2] = hdr("Content-Length", "3");
    buf_init(&b, 4096);
    assert_int_equal(h1_write_request_head(&b, sl("POST"), sl("/a?b=c"), h, 3),
                     0);
    assert_buf(&b, LIT(want));
    buf_dispose(&b);
}

static void test_request_head_no_headers(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 4096);
    assert_int_equal(h1_write_request_head(&b, sl("GET"), sl("*"), NULL, 0), 0);
    assert_buf(&b, LIT("GET * HTTP/1.1\r\n\r\n"));
    buf_dispose(&b);
}

static void test_response_head_bytes(void **state)
{
    struct http_field h[2];
    struct buf b;

    (void)state;
    h[0] = hdr("Content-Length", "0");
    h[1] = hdr("Set-Cookie", "a=b; Path=/\twith tab");
    buf_init(&b, 4096);
    assert_int_equal(h1_write_response_head(&b, 404, NULL, h, 2), 0);
    assert_buf(&b, LIT("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                       "Set-Cookie: a=b; Path=/\twith tab\r\n\r\n"));
    buf_consume(&b, buf_len(&b));
    assert_int_equal(h1_write_response_head(&b, 200, "Fine", NULL, 0), 0);
    assert_buf(&b, LIT("HTTP/1.1 200 Fine\r\n\r\n"));
    buf_consume(&b, buf_len(&b));
    /* No standard phrase: an empty reason, which the grammar allows. */
    assert_int_equal(h1_write_response_head(&b, 599, NULL, NULL, 0), 0);
    assert_buf(&b, LIT("HTTP/1.1 599 \r\n\r\n"));
    buf_consume(&b, buf_len(&b));
    assert_int_equal(h1_write_response_head(&b, 101, "", NULL, 0), 0);
    assert_buf(&b, LIT("HTTP/1.1 101 \r\n\r\n"));
    buf_dispose(&b);
}

static void test_response_status_range(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 4096);
    assert_int_equal(h1_write_response_head(&b, 99, NULL, NULL, 0), -1);
    assert_int_equal(h1_write_response_head(&b, 600, NULL, NULL, 0), -1);
    assert_int_equal(h1_write_response_head(&b, -200, NULL, NULL, 0), -1);
    assert_int_equal(buf_len(&b), 0);
    assert_int_equal(h1_write_response_head(&b, 100, NULL, NULL, 0), 0);
    assert_buf(&b, LIT("HTTP/1.1 100 Continue\r\n\r\n"));
    buf_dispose(&b);
}

static void test_reason_phrases(void **state)
{
    (void)state;
    assert_string_equal(h1_reason(200), "OK");
    assert_string_equal(h1_reason(101), "Switching Protocols");
    assert_string_equal(h1_reason(400), "Bad Request");
    assert_string_equal(h1_reason(413), "Content Too Large");
    assert_string_equal(h1_reason(414), "URI Too Long");
    assert_string_equal(h1_reason(431), "Request Header Fields Too Large");
    assert_string_equal(h1_reason(501), "Not Implemented");
    assert_string_equal(h1_reason(502), "Bad Gateway");
    assert_string_equal(h1_reason(504), "Gateway Timeout");
    assert_string_equal(h1_reason(505), "HTTP Version Not Supported");
    assert_string_equal(h1_reason(299), "");
    assert_string_equal(h1_reason(-1), "");
}

static void test_chunk_bytes(void **state)
{
    char big[300];
    struct buf b;

    (void)state;
    memset(big, 'x', sizeof(big));
    buf_init(&b, 4096);
    assert_int_equal(h1_write_chunk(&b, "hello", 5), 0);
    assert_buf(&b, LIT("5\r\nhello\r\n"));
    buf_consume(&b, buf_len(&b));
    assert_int_equal(h1_write_chunk(&b, big, sizeof(big)), 0);
    assert_int_equal(buf_len(&b), 5 + sizeof(big) + 2);
    assert_memory_equal(buf_ptr(&b), "12c\r\n", 5);
    assert_memory_equal(buf_ptr(&b) + 5 + sizeof(big), "\r\n", 2);
    buf_consume(&b, buf_len(&b));
    /* An empty chunk would end the body: nothing is written. */
    assert_int_equal(h1_write_chunk(&b, "", 0), 0);
    assert_int_equal(buf_len(&b), 0);
    buf_dispose(&b);
}

static void test_last_chunk_bytes(void **state)
{
    struct http_field t[2];
    struct buf b;

    (void)state;
    t[0] = hdr("grpc-status", "0");
    t[1] = hdr("grpc-message", "ok");
    buf_init(&b, 4096);
    assert_int_equal(h1_write_last_chunk(&b, NULL, 0), 0);
    assert_buf(&b, LIT("0\r\n\r\n"));
    buf_consume(&b, buf_len(&b));
    assert_int_equal(h1_write_last_chunk(&b, t, 2), 0);
    assert_buf(&b, LIT("0\r\ngrpc-status: 0\r\ngrpc-message: ok\r\n\r\n"));
    buf_dispose(&b);
}

/* Nothing that could end a line or a field gets through, and a refused
 * write leaves the buffer as it was. */
static void test_injection_refused(void **state)
{
    static const char *const bad_names[] = {
        "X\r\nEvil", "X\nEvil", "X\rEvil", "X:Y", "X Y", "", "X\tY", "X\"Y",
    };
    static const char *const bad_values[] = {
        "a\r\nEvil: 1", "a\nb", "a\rb", "a\x01", "a\x7f", "\r\n\r\nGET / x",
    };
    struct http_field h[2];
    struct buf b;
    size_t i;

    (void)state;
    buf_init(&b, 4096);
    assert_int_equal(buf_append(&b, "keep", 4), 0);
    h[0] = hdr("Host", "h");
    for (i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
        h[1] = hdr(bad_names[i], "v");
        assert_int_equal(h1_write_request_head(&b, sl("GET"), sl("/"), h, 2),
                         -1);
        assert_int_equal(h1_write_response_head(&b, 200, NULL, h, 2), -1);
        assert_int_equal(h1_write_last_chunk(&b, h, 2), -1);
    }
    for (i = 0; i < sizeof(bad_values) / sizeof(bad_values[0]); i++) {
        h[1] = hdr("X", bad_values[i]);
        assert_int_equal(h1_write_request_head(&b, sl("GET"), sl("/"), h, 2),
                         -1);
        assert_int_equal(h1_write_response_head(&b, 200, NULL, h, 2), -1);
        assert_int_equal(h1_write_last_chunk(&b, h, 2), -1);
    }
    /* NUL inside a name or value (slices may hold one). */
    h[1].name.p = "X\0Y";
    h[1].name.n = 3;
    h[1].value = sl("v");
    assert_int_equal(h1_write_response_head(&b, 200, NULL, h, 2), -1);
    h[1].name = sl("X");
    h[1].value.p = "a\0b";
    h[1].value.n = 3;
    assert_int_equal(h1_write_response_head(&b, 200, NULL, h, 2), -1);
    /* Method, target and reason. */
    assert_int_equal(
        h1_write_request_head(&b, sl("GET / HTTP/1.1\r\nX:"), sl("/"), NULL, 0),
        -1);
    assert_int_equal(h1_write_request_head(&b, sl(""), sl("/"), NULL, 0), -1);
    assert_int_equal(h1_write_request_head(&b, sl("GET"), sl(""), NULL, 0), -1);
    assert_int_equal(
        h1_write_request_head(&b, sl("GET"), sl("/ HTTP/1.1\r\nX: y"), NULL, 0),
        -1);
    assert_int_equal(h1_write_request_head(&b, sl("GET"), sl("/a\rb"), NULL, 0),
                     -1);
    assert_int_equal(
        h1_write_request_head(&b, sl("GET"), sl("/a\x80"), NULL, 0), -1);
    assert_int_equal(h1_write_response_head(&b, 200, "OK\r\nX: y", NULL, 0),
                     -1);
    assert_int_equal(h1_write_response_head(&b, 200, "OK\n", NULL, 0), -1);
    assert_buf(&b, LIT("keep"));
    buf_dispose(&b);
}

/*
 * For every cap smaller than the message the write fails and leaves the
 * buffer untouched; at exactly the message's size it succeeds.
 */
static void test_cap_reached(void **state)
{
    static const char req[] = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
    static const char resp[] = "HTTP/1.1 200 OK\r\nHost: h\r\n\r\n";
    static const char chunk[] = "3\r\nabc\r\n";
    static const char last[] = "0\r\nHost: h\r\n\r\n";
    struct http_field h = hdr("Host", "h");
    size_t cap;
    int k;

    (void)state;
    for (k = 0; k < 4; k++) {
        const char *want = k == 0 ? req : k == 1 ? resp : k == 2 ? chunk : last;
        size_t n = strlen(want);

        for (cap = 2; cap <= n + 2; cap++) {
            struct buf b;
            int rc = 0;

            /* Two bytes already there, consumed, so the writer must also
             * cope with a buffer whose live bytes do not start at 0. */
            buf_init(&b, cap);
            assert_int_equal(buf_append(&b, "ab", 2), 0);
            buf_consume(&b, 1);
            switch (k) {
            case 0:
                rc = h1_write_request_head(&b, sl("GET"), sl("/"), &h, 1);
                break;
            case 1:
                rc = h1_write_response_head(&b, 200, NULL, &h, 1);
                break;
            case 2:
                rc = h1_write_chunk(&b, "abc", 3);
                break;
            case 3:
                rc = h1_write_last_chunk(&b, &h, 1);
                break;
            }
            if (cap < n + 1) {
                assert_int_equal(rc, -1);
                assert_buf(&b, LIT("b"));
            } else {
                assert_int_equal(rc, 0);
                assert_int_equal(buf_len(&b), n + 1);
                assert_memory_equal(buf_ptr(&b) + 1, want, n);
            }
            buf_dispose(&b);
        }
    }
}

/* Appending several messages keeps them in order. */
static void test_appends(void **state)
{
    struct http_field h = hdr("Transfer-Encoding", "chunked");
    struct buf b;

    (void)state;
    buf_init(&b, 4096);
    assert_int_equal(h1_write_response_head(&b, 200, NULL, &h, 1), 0);
    assert_int_equal(h1_write_chunk(&b, "ab", 2), 0);
    assert_int_equal(h1_write_last_chunk(&b, NULL, 0), 0);
    assert_buf(&b, LIT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "2\r\nab\r\n0\r\n\r\n"));
    buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_head_bytes),
        cmocka_unit_test(test_request_head_no_headers),
        cmocka_unit_test(test_response_head_bytes),
        cmocka_unit_test(test_response_status_range),
        cmocka_unit_test(test_reason_phrases),
        cmocka_unit_test(test_chunk_bytes),
        cmocka_unit_test(test_last_chunk_bytes),
        cmocka_unit_test(test_injection_refused),
        cmocka_unit_test(test_cap_reached),
        cmocka_unit_test(test_appends),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
