/*
 * Unit tests for src/http/access_format.c: Envoy access-log format
 * strings, compiled and run against a request.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "http/access_format.h"

static struct http_field req_fields[] = {
    {{"user-agent", 10}, {"curl/8", 6}},
    {{"x-request-id", 12}, {"abc", 3}},
    {{"x-evil", 6}, {"a\nb\\c", 5}},
};
static struct http_field resp_fields[] = {
    {{"content-type", 12}, {"text/plain", 10}},
};

static struct http_request req;
static struct http_fields resp;

static struct afmt_ctx ctx_default(void)
{
    struct afmt_ctx c;

    memset(&req, 0, sizeof(req));
    req.method = (struct slice){"GET", 3};
    req.path = (struct slice){"/a/b?x=1", 8};
    req.authority = (struct slice){"example.com", 11};
    req.scheme = (struct slice){"http", 4};
    req.fields.v = req_fields;
    req.fields.n = 3;
    resp.v = resp_fields;
    resp.n = 1;
    memset(&c, 0, sizeof(c));
    c.req = &req;
    c.resp = &resp;
    c.start_us = INT64_C(1700000000123456); /* 2023-11-14T22:13:20.123456Z */
    c.duration_ms = 12;
    c.status = 200;
    c.flags = "-";
    c.details = "via_upstream";
    c.bytes_received = 5;
    c.bytes_sent = 1234;
    c.upstream_host = "127.0.0.1:8080";
    c.upstream_cluster = "backend";
    c.downstream_remote = "10.0.0.1:5555";
    c.downstream_direct_remote = "10.0.0.1:5555";
    c.downstream_local = "[::1]:80";
    c.protocol = "HTTP/1.1";
    c.attempts = 2;
    return c;
}

/* The record of format s (text) for the default request, without its
 * newline. */
static void expect(const char *s, const char *want)
{
    char *err = NULL;
    struct afmt *f = afmt_compile(s, strlen(s), 0, &err);
    struct afmt_ctx c = ctx_default();
    struct buf b;

    if (f == NULL)
        fail_msg("afmt_compile(\"%s\"): %s", s, err);
    buf_init(&b, 65536);
    assert_int_equal(afmt_write(f, &c, &b), 0);
    assert_true(buf_len(&b) > 0);
    assert_int_equal(buf_ptr(&b)[buf_len(&b) - 1], '\n');
    assert_int_equal(buf_len(&b) - 1, strlen(want));
    assert_memory_equal(buf_ptr(&b), want, strlen(want));
    buf_dispose(&b);
    afmt_free(f);
}

static void refuse(const char *s, int json, const char *why)
{
    char *err = NULL;
    struct afmt *f = afmt_compile(s, strlen(s), json, &err);

    assert_null(f);
    assert_non_null(err);
    if (strstr(err, why) == NULL)
        fail_msg("afmt_compile(\"%s\"): \"%s\" lacks \"%s\"", s, err, why);
    free(err);
}

static void test_operators(void **state)
{
    (void)state;
    expect("%REQ(:METHOD)% %REQ(:PATH)% %PROTOCOL%", "GET /a/b?x=1 HTTP/1.1");
    expect("%REQ(USER-AGENT)%|%REQ(x-missing)%", "curl/8|-");
    expect("%REQ(X-MISSING?USER-AGENT)%", "curl/8");
    expect("%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "/a/b?x=1");
    expect("%REQ(USER-AGENT):4%", "curl");
    expect("%REQ_WITHOUT_QUERY(:PATH)%", "/a/b");
    expect("%REQ(:AUTHORITY)% %REQ(HOST)%", "example.com example.com");
    expect("%RESP(CONTENT-TYPE)% %RESP(X-NONE)%", "text/plain -");
    expect("%TRAILER(GRPC-STATUS)%", "-");
    expect("%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS%",
           "200 - via_upstream");
    expect("%BYTES_RECEIVED% %BYTES_SENT% %DURATION%", "5 1234 12");
    expect("%UPSTREAM_HOST% %UPSTREAM_CLUSTER% %UPSTREAM_CLUSTER_RAW%",
           "127.0.0.1:8080 backend backend");
    expect("%DOWNSTREAM_REMOTE_ADDRESS% "
           "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%",
           "10.0.0.1:5555 10.0.0.1");
    expect("%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT%", "::1");
    expect("%UPSTREAM_LOCAL_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%",
           "- - -");
    expect("%UPSTREAM_TRANSPORT_FAILURE_REASON%", "-");
    expect("%CONNECTION_TERMINATION_DETAILS%", "-");
    expect("%UPSTREAM_REQUEST_ATTEMPT_COUNT%", "2");
    expect("100%% %DURATION%ms", "100% 12ms");
    {
        char host[256];
        assert_int_equal(gethostname(host, sizeof(host)), 0);
        host[sizeof(host) - 1] = '\0';
        expect("%HOSTNAME%", host); /* read when compiled */
    }
    expect("", "");
}

static void test_start_time(void **state)
{
    (void)state;
    expect("%START_TIME%", "2023-11-14T22:13:20.123Z");
    expect("%START_TIME(%Y/%m/%d %H:%M:%S.%3f)%", "2023/11/14 22:13:20.123");
    expect("%START_TIME(%s.%6f)%", "1700000000.123456");
    expect("%START_TIME(%f)%", "123456000");
}

static void test_escape(void **state)
{
    (void)state;
    /* A header can never break the line. */
    expect("%REQ(X-EVIL)%", "a\\x0ab\\\\c");
}

static void test_refused(void **state)
{
    (void)state;
    refuse("%FOO%", 0, "column 1: unknown operator %FOO%");
    refuse("ab %REQ(X)", 0, "column 4: %REQ: no closing '%'");
    refuse("%REQ%", 0, "needs a header name");
    refuse("%REQ()%", 0, "empty header name");
    refuse("%REQ(A?)%", 0, "empty header name");
    refuse("%DURATION(X)%", 0, "takes no argument");
}

static void test_refused_more(void **state)
{
    char *err = NULL;
    struct afmt *f = afmt_compile("%DURATION%:3", 12, 0, &err);

    (void)state;
    assert_non_null(f); /* ":3" after the closing '%' is literal text */
    afmt_free(f);
    refuse("%DURATION:3%", 0, "takes no length");
    refuse("%REQ(A):0%", 0, "length 1-1000000");
    refuse("%REQ(A B)%", 0, "bad character");
    refuse("50% off", 0, "'%' starts no operator");
    refuse("%START_TIME(%Y", 0, "no closing ')'");
    refuse("[1]", 1, "an object");
    refuse("{\"a\":1}", 1, "must be a string");
    refuse("{\"a\":\"%NOPE%\"}", 1, "member \"a\": column 1: unknown operator");
}

static void test_istio_text(void **state)
{
    char *err = NULL;
    struct afmt *f = afmt_istio_text(&err);
    struct afmt_ctx c = ctx_default();
    struct buf b;
    const char *want =
        "[2023-11-14T22:13:20.123Z] \"GET /a/b?x=1 HTTP/1.1\" 200 - "
        "via_upstream - \"-\" 5 1234 12 - \"-\" \"curl/8\" \"abc\" "
        "\"example.com\" \"127.0.0.1:8080\" backend - [::1]:80 "
        "10.0.0.1:5555 - -\n";

    (void)state;
    assert_non_null(f);
    assert_int_equal(afmt_needs(f),
                     AFMT_NEED_DOWNSTREAM_LOCAL | AFMT_NEED_UPSTREAM_LOCAL);
    buf_init(&b, 65536);
    assert_int_equal(afmt_write(f, &c, &b), 0);
    assert_int_equal(buf_len(&b), strlen(want));
    assert_memory_equal(buf_ptr(&b), want, strlen(want));
    buf_dispose(&b);
    afmt_free(f);
}

static void test_istio_json(void **state)
{
    char *err = NULL;
    struct afmt *f = afmt_istio_json(&err);
    struct afmt_ctx c = ctx_default();
    struct buf b;

    (void)state;
    assert_non_null(f);
    buf_init(&b, 65536);
    assert_int_equal(afmt_write(f, &c, &b), 0);
    assert_non_null(strstr(buf_cstr(&b),
                           "{\"start_time\":\"2023-11-14T22:13:20.123Z\","
                           "\"route_name\":null,\"method\":\"GET\""));
    assert_non_null(strstr(buf_cstr(&b), "\"response_code\":200,"));
    assert_non_null(strstr(buf_cstr(&b), "\"bytes_sent\":1234,"));
    assert_non_null(strstr(buf_cstr(&b), "\"user_agent\":\"curl/8\""));
    assert_non_null(
        strstr(buf_cstr(&b), "\"upstream_transport_failure_reason\":null}\n"));
    buf_dispose(&b);
    afmt_free(f);
}

static void test_json_mixed(void **state)
{
    const char *s = "{\"line\":\"%REQ(:METHOD)% %RESPONSE_CODE%\","
                    "\"evil\":\"%REQ(X-EVIL)%\"}";
    char *err = NULL;
    struct afmt *f = afmt_compile(s, strlen(s), 1, &err);
    struct afmt_ctx c = ctx_default();
    struct buf b;

    (void)state;
    assert_non_null(f);
    buf_init(&b, 65536);
    assert_int_equal(afmt_write(f, &c, &b), 0);
    assert_string_equal(buf_cstr(&b),
                        "{\"line\":\"GET 200\",\"evil\":\"a\\nb\\\\c\"}\n");
    buf_dispose(&b);
    afmt_free(f);
}

/* A record cut by the buffer's cap says so. */
static void test_full(void **state)
{
    char *err = NULL;
    struct afmt *f = afmt_istio_text(&err);
    struct afmt_ctx c = ctx_default();
    struct buf b;

    (void)state;
    buf_init(&b, 16);
    assert_int_equal(afmt_write(f, &c, &b), -1);
    buf_dispose(&b);
    afmt_free(f);
}

/* Every operator the reference lists (docs/reference/access-log.md) is
 * one the compiler takes, written in the form the reference gives, and
 * the list is the whole table: an unlisted name is refused. */
static void test_reference_lists_what_compiles(void **state)
{
    struct buf b;
    size_t n = 0;
    char *err = NULL;

    (void)state;
    buf_init(&b, 1 << 16);
    afmt_reference(&b);
    for (char *line = (char *)buf_cstr(&b), *next; *line; line = next) {
        char fmt[128];
        char *form = strchr(line, '\t');
        char *json = strchr(form + 1, '\t');
        struct afmt *f;

        next = strchr(line, '\n');
        *next++ = *form++ = *json++ = '\0';
        assert_true(strcmp(json, "string") == 0 || strcmp(json, "number") == 0);
        /* The form with its optional parts filled in. */
        if (strstr(form, "(HEADER") != NULL)
            snprintf(fmt, sizeof(fmt), "%%%s(x-a?x-b):8%%", line);
        else if (strstr(form, "(FORMAT)") != NULL)
            snprintf(fmt, sizeof(fmt), "%%%s(%%s)%%", line);
        else
            snprintf(fmt, sizeof(fmt), "%%%s%%", line);
        f = afmt_compile(fmt, strlen(fmt), 0, &err);
        if (f == NULL)
            fail_msg("%s: %s", fmt, err);
        afmt_free(f);
        n++;
    }
    assert_true(n >= 25);
    assert_null(afmt_compile("%NOT_AN_OPERATOR%", 17, 0, &err));
    free(err);
    buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_lists_what_compiles),
        cmocka_unit_test(test_operators),
        cmocka_unit_test(test_start_time),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_refused_more),
        cmocka_unit_test(test_istio_text),
        cmocka_unit_test(test_istio_json),
        cmocka_unit_test(test_json_mixed),
        cmocka_unit_test(test_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
