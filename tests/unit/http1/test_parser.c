/*
 * Unit tests for src/http1/parser.c: every strictness rule has a case that
 * passes and one that fails; every head is also fed as each of its prefixes
 * (copied into a buffer of exactly that size, so ASan catches a read past
 * the end) to show that incremental feeding agrees with parsing at once;
 * chunked bodies are decoded split at every byte boundary.
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

#include "http1/parser.h"

#define HDRS_CAP 128
/* Heads up to this size are also checked prefix by prefix. */
#define PREFIX_CHECK_MAX 2048

/* A string literal as (pointer, length), so literals may hold NUL. */
#define LIT(s) (s), (sizeof(s) - 1)

struct parsed {
    int resp;
    struct h1_request req;
    struct h1_response res;
    struct h1_header hdrs[HDRS_CAP];
    char *copy; /* the parsed bytes; slices point here */
    int rc;
    int status;
    const char *why;
};

static void parsed_free(struct parsed *p)
{
    free(p->copy);
    p->copy = NULL;
}

/* parse_n() parses a copy of s[0..n) of exactly n bytes. */
static int parse_n(struct parsed *p, const struct http_limits *lim, int resp,
                   const char *method, const char *s, size_t n)
{
    struct h1_slice m = {method, method ? strlen(method) : 0};

    free(p->copy);
    p->copy = malloc(n ? n : 1);
    assert_non_null(p->copy);
    memcpy(p->copy, s, n);
    p->resp = resp;
    p->why = NULL;
    p->status = 0;
    if (resp) {
        p->res.headers = p->hdrs;
        p->rc = h1_parse_response(p->copy, n, lim, method ? &m : NULL, &p->res,
                                  &p->why, &p->status);
    } else {
        p->req.headers = p->hdrs;
        p->rc = h1_parse_request(p->copy, n, lim, &p->req, &p->why, &p->status);
    }
    if (p->rc < 0)
        assert_non_null(p->why);
    return p->rc;
}

/*
 * check_prefixes() parses every proper prefix of s. Before the head is
 * complete a prefix must give 0 (or, for a failing head, the same error,
 * and once it fails every longer prefix fails); from the head's end on it
 * must give the same length.
 */
static void check_prefixes(const struct http_limits *lim, int resp,
                           const char *method, const char *s, size_t n,
                           int final_rc, int final_status)
{
    struct parsed p = {0};
    int failed = 0;
    size_t k;

    if (n > PREFIX_CHECK_MAX)
        return;
    for (k = 0; k < n; k++) {
        int rc = parse_n(&p, lim, resp, method, s, k);

        if (final_rc > 0) {
            assert_int_equal(rc, (int)k < final_rc ? 0 : final_rc);
        } else if (rc < 0) {
            assert_int_equal(p.status, final_status);
            failed = 1;
        } else {
            assert_int_equal(rc, 0);
            assert_false(failed);
        }
    }
    parsed_free(&p);
}

/* req_ok() parses s as a request that must be complete and valid. */
static int req_ok_lim(struct parsed *p, const struct http_limits *lim,
                      const char *s, size_t n)
{
    int rc = parse_n(p, lim, 0, NULL, s, n);

    if (rc <= 0)
        fail_msg("refused (%d, %d, %s): %.*s", rc, p->status,
                 p->why ? p->why : "-", (int)n, s);
    check_prefixes(lim, 0, NULL, s, n, rc, 0);
    /* Parse again: check_prefixes() used its own buffer. */
    return parse_n(p, lim, 0, NULL, s, n);
}

static int req_ok(struct parsed *p, const char *s)
{
    return req_ok_lim(p, NULL, s, strlen(s));
}

static void req_fail_lim(const struct http_limits *lim, const char *s, size_t n,
                         int status)
{
    struct parsed p = {0};
    int rc = parse_n(&p, lim, 0, NULL, s, n);

    if (rc != -1 || p.status != status)
        fail_msg("expected %d, got rc %d status %d: %.*s", status, rc, p.status,
                 (int)n, s);
    parsed_free(&p);
    check_prefixes(lim, 0, NULL, s, n, -1, status);
}

static void req_fail(const char *s, int status)
{
    req_fail_lim(NULL, s, strlen(s), status);
}

/* req_fail_why() also checks the reason, for rules whose input another
 * rule would refuse too: the reason shows which rule fired. */
static void req_fail_why(const char *s, size_t n, int status, const char *why)
{
    struct parsed p = {0};

    req_fail_lim(NULL, s, n, status);
    parse_n(&p, NULL, 0, NULL, s, n);
    if (strstr(p.why, why) == NULL)
        fail_msg("reason \"%s\" lacks \"%s\"", p.why, why);
    parsed_free(&p);
}

static int resp_ok(struct parsed *p, const char *method, const char *s)
{
    size_t n = strlen(s);
    int rc = parse_n(p, NULL, 1, method, s, n);

    if (rc <= 0)
        fail_msg("refused (%d, %s): %s", rc, p->why ? p->why : "-", s);
    check_prefixes(NULL, 1, method, s, n, rc, 0);
    return parse_n(p, NULL, 1, method, s, n);
}

static void resp_fail(const char *method, const char *s)
{
    struct parsed p = {0};
    size_t n = strlen(s);
    int rc = parse_n(&p, NULL, 1, method, s, n);

    if (rc != -1 || p.status != 502)
        fail_msg("expected 502, got rc %d status %d: %s", rc, p.status, s);
    parsed_free(&p);
    check_prefixes(NULL, 1, method, s, n, -1, 502);
}

static void assert_slice(struct h1_slice s, const char *want)
{
    if (s.n != strlen(want) || (s.n > 0 && memcmp(s.p, want, s.n) != 0))
        fail_msg("slice \"%.*s\" != \"%s\"", (int)s.n, s.p ? s.p : "", want);
}

/* ---- request basics ------------------------------------------------- */

static void test_simple_get(void **state)
{
    struct parsed p = {0};
    static const char s[] = "GET /index.html?q=1 HTTP/1.1\r\n"
                            "Host: example.com\r\n"
                            "User-Agent: t\r\n"
                            "\r\n";

    (void)state;
    assert_int_equal(req_ok(&p, s), strlen(s));
    assert_slice(p.req.method, "GET");
    assert_slice(p.req.target, "/index.html?q=1");
    assert_int_equal(p.req.minor, 1);
    assert_int_equal(p.req.nheaders, 2);
    assert_slice(p.req.headers[0].name, "Host");
    assert_slice(p.req.headers[0].value, "example.com");
    assert_slice(p.req.headers[1].name, "User-Agent");
    assert_slice(p.req.headers[1].value, "t");
    assert_slice(p.req.host, "example.com");
    assert_int_equal(p.req.body, H1_BODY_NONE);
    assert_true(p.req.keep_alive);
    assert_false(p.req.expect_continue);
    assert_false(p.req.upgrade);
    assert_false(p.req.te_trailers);
    /* Zero-copy: slices point into the parsed bytes. */
    assert_ptr_equal(p.req.method.p, p.copy);
    parsed_free(&p);
}

static void test_head_length_excludes_body(void **state)
{
    struct parsed p = {0};
    static const char head[] = "POST /u HTTP/1.1\r\nHost: a\r\n"
                               "Content-Length: 5\r\n\r\n";
    static const char s[] = "POST /u HTTP/1.1\r\nHost: a\r\n"
                            "Content-Length: 5\r\n\r\nhello";

    (void)state;
    assert_int_equal(req_ok(&p, s), strlen(head));
    assert_int_equal(p.req.body, H1_BODY_LENGTH);
    assert_int_equal(p.req.content_length, 5);
    parsed_free(&p);
}

static void test_pipelined(void **state)
{
    struct parsed p = {0};
    static const char s[] = "POST /a HTTP/1.1\r\nHost: h\r\n"
                            "Content-Length: 3\r\n\r\nabc"
                            "GET /b HTTP/1.1\r\nHost: h2\r\n\r\n";
    int n1, n2;

    (void)state;
    n1 = req_ok(&p, s);
    assert_slice(p.req.target, "/a");
    assert_int_equal(p.req.content_length, 3);
    /* The body follows the head; the next request follows the body. */
    n2 = req_ok_lim(&p, NULL, s + n1 + 3, strlen(s) - (size_t)n1 - 3);
    assert_int_equal((size_t)n1 + 3 + (size_t)n2, strlen(s));
    assert_slice(p.req.target, "/b");
    assert_slice(p.req.host, "h2");
    parsed_free(&p);
}

/* Feed one byte at a time into a growing buffer, as a connection would,
 * and compare with parsing everything at once. */
static void test_bytewise_equals_whole(void **state)
{
    static const char s[] = "PUT /x HTTP/1.1\r\nHost: h\r\nA: 1\r\n"
                            "Transfer-Encoding: chunked\r\n"
                            "Connection: close\r\n\r\n";
    size_t n = strlen(s), k;
    struct h1_header h1[8], h2[8];
    struct h1_request whole = {.headers = h1}, inc = {.headers = h2};
    const char *why;
    int status, rc = 0, rc_whole;
    char *buf = NULL;

    (void)state;
    rc_whole = h1_parse_request(s, n, NULL, &whole, &why, &status);
    assert_int_equal(rc_whole, n);
    for (k = 1; k <= n; k++) {
        buf = realloc(buf, k);
        assert_non_null(buf);
        buf[k - 1] = s[k - 1];
        rc = h1_parse_request(buf, k, NULL, &inc, &why, &status);
        if (k < n)
            assert_int_equal(rc, 0);
    }
    assert_int_equal(rc, rc_whole);
    assert_int_equal(inc.nheaders, whole.nheaders);
    for (k = 0; k < inc.nheaders; k++) {
        assert_int_equal(inc.headers[k].name.p - buf,
                         whole.headers[k].name.p - s);
        assert_int_equal(inc.headers[k].value.n, whole.headers[k].value.n);
    }
    assert_int_equal(inc.body, whole.body);
    assert_int_equal(inc.keep_alive, whole.keep_alive);
    assert_int_equal(inc.target.p - buf, whole.target.p - s);
    free(buf);
}

static void test_leading_empty_lines_skipped(void **state)
{
    struct parsed p = {0};
    static const char s[] = "\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n";

    (void)state;
    assert_int_equal(req_ok(&p, s), strlen(s));
    assert_slice(p.req.method, "GET");
    parsed_free(&p);
    /* But a bare LF before the request line is still a bare LF. */
    req_fail("\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", 400);
}

/* ---- request line ----------------------------------------------------- */

static void test_request_line_strict(void **state)
{
    static const char *const bad[] = {
        "GET  / HTTP/1.1\r\nHost: h\r\n\r\n",  /* two SP */
        "GET /  HTTP/1.1\r\nHost: h\r\n\r\n",  /* two SP */
        "GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n",  /* HTAB */
        " GET / HTTP/1.1\r\nHost: h\r\n\r\n",  /* leading SP */
        "GET / HTTP/1.1 \r\nHost: h\r\n\r\n",  /* trailing SP */
        "GET /\r\nHost: h\r\n\r\n",            /* no version */
        "GET / \r\nHost: h\r\n\r\n",           /* empty version */
        "GET\r\nHost: h\r\n\r\n",              /* method only */
        "GET / x HTTP/1.1\r\nHost: h\r\n\r\n", /* extra part */
        "GET / http/1.1\r\nHost: h\r\n\r\n",   /* case */
        "GET / HTTP/1.10\r\nHost: h\r\n\r\n",  /* two digits */
        "GET / HTTP/1\r\nHost: h\r\n\r\n",     /* no minor */
        "GET / HTTP/1.x\r\nHost: h\r\n\r\n",
        "GET / HTTPS/1.1\r\nHost: h\r\n\r\n",
        "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", /* method not a token */
        "GET /a\"b HTTP/1.1x\r\nHost: h\r\n\r\n",
        "GET /a\x7f HTTP/1.1\r\nHost: h\r\n\r\n",    /* DEL in target */
        "GET /a\x01 HTTP/1.1\r\nHost: h\r\n\r\n",    /* CTL in target */
        "GET /\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n", /* raw UTF-8 */
        "GET /a\tb HTTP/1.1\r\nHost: h\r\n\r\n",
    };
    struct parsed p = {0};
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        req_fail(bad[i], 400);
    /* Any token is a method; '*', absolute and authority forms pass. */
    req_ok(&p, "M-SEARCH * HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_slice(p.req.method, "M-SEARCH");
    assert_slice(p.req.target, "*");
    req_ok(&p, "GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert_slice(p.req.target, "http://a.example/x");
    req_ok(&p, "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n");
    assert_slice(p.req.target, "a.example:443");
    parsed_free(&p);
}

static void test_versions(void **state)
{
    struct parsed p = {0};

    (void)state;
    req_ok(&p, "GET / HTTP/1.0\r\n\r\n");
    assert_int_equal(p.req.minor, 0);
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_int_equal(p.req.minor, 1);
    parsed_free(&p);
    /* A higher HTTP/1 minor version is HTTP/1.1 (RFC 9112 2.3). */
    req_ok(&p, "GET / HTTP/1.2\r\nHost: h\r\n\r\n");
    assert_int_equal(p.req.minor, 1);
    assert_int_equal(p.req.keep_alive, 1);
    req_ok(&p, "GET / HTTP/1.9\r\nHost: h\r\n\r\n");
    assert_int_equal(p.req.minor, 1);
    resp_ok(&p, "GET", "HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(p.res.minor, 1);
    parsed_free(&p);
    req_fail("GET / HTTP/1.2\r\n\r\n", 400); /* HTTP/1.1 rules: Host */
    req_fail("GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505);
    req_fail("GET / HTTP/0.9\r\nHost: h\r\n\r\n", 505);
    req_fail("GET / HTTP/3.1\r\nHost: h\r\n\r\n", 505);
}

/* ---- Host ------------------------------------------------------------- */

static void test_host_rules(void **state)
{
    struct parsed p = {0};

    (void)state;
    req_fail("GET / HTTP/1.1\r\n\r\n", 400);
    req_fail("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400);
    req_fail("GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", 400);
    req_fail("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400);
    req_fail("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400);
    req_fail("GET / HTTP/1.1\r\nHost: a@b\r\n\r\n", 400);
    /* HTTP/1.0 needs no Host. */
    req_ok(&p, "GET / HTTP/1.0\r\n\r\n");
    assert_null(p.req.host.p);
    req_ok(&p, "GET / HTTP/1.1\r\nhOsT: [::1]:8080\r\n\r\n");
    assert_slice(p.req.host, "[::1]:8080");
    /* An empty Host is allowed (no authority in the target). */
    req_ok(&p, "GET / HTTP/1.1\r\nHost:\r\n\r\n");
    assert_non_null(p.req.host.p);
    assert_int_equal(p.req.host.n, 0);
    parsed_free(&p);
}

/* ---- Content-Length ---------------------------------------------------- */

static void test_content_length_valid(void **state)
{
    struct parsed p = {0};
    char s[128];

    (void)state;
    req_ok(&p, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(p.req.body, H1_BODY_LENGTH);
    assert_int_equal(p.req.content_length, 0);
    req_ok(&p, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n");
    assert_int_equal(p.req.content_length, 5);
    req_ok(&p, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
               "content-length:5\r\n\r\n");
    assert_int_equal(p.req.content_length, 5);
    req_ok(&p, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 007\r\n\r\n");
    assert_int_equal(p.req.content_length, 7);
    /* The largest length accepted is exactly 2^62. */
    snprintf(s, sizeof(s),
             "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: %llu\r\n\r\n",
             (unsigned long long)H1_MAX_LENGTH);
    req_ok(&p, s);
    assert_true(p.req.content_length == H1_MAX_LENGTH);
    parsed_free(&p);
}

static void test_content_length_invalid(void **state)
{
    static const char *const bad[] = {
        "5, 6",
        "5,6,5",
        "abc",
        "+5",
        "-1",
        "0x5",
        "5 5",
        "5.0",
        "",
        ",",
        "1e3",
        "99999999999999999999999",
        "4611686018427387905", /* 2^62 + 1 */
    };
    char s[256];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(s, sizeof(s),
                 "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: %s\r\n\r\n",
                 bad[i]);
        req_fail(s, 400);
    }
    req_fail("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
             "Content-Length: 6\r\n\r\n",
             400);
}

/* ---- Transfer-Encoding ------------------------------------------------- */

static void test_transfer_encoding_valid(void **state)
{
    static const char *const good[] = {
        "chunked",
        "CHUNKED",
        "chunked,",
        " chunked ",
    };
    struct parsed p = {0};
    char s[256];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        snprintf(s, sizeof(s),
                 "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: %s\r\n\r\n",
                 good[i]);
        req_ok(&p, s);
        assert_int_equal(p.req.body, H1_BODY_CHUNKED);
    }
    parsed_free(&p);
}

static void test_transfer_encoding_invalid(void **state)
{
    static const struct {
        const char *te;
        int status;
    } bad[] = {
        /* Only chunked is forwarded: other codings, known or not, are
         * refused rather than dropped on the way. */
        {"gzip", 501},
        {"chunked, gzip", 501},
        {"gzip, chunked", 501},
        {"x-gzip, deflate , chunked", 501},
        {"compress;level=1, chunked", 501},
        {"chunked, chunked", 400},
        {"chunked;x=1", 400},
        {"", 400},
        {",", 400},
        {"chu nked", 400},
        {"\"chunked\"", 400},
        {"foo", 501},
        {"foo, chunked", 501},
        {"identity, chunked", 501},
        {"chunked2", 501},
    };
    char s[256];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(s, sizeof(s),
                 "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: %s\r\n\r\n",
                 bad[i].te);
        req_fail(s, bad[i].status);
    }
    req_fail_why(LIT("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n"
                     "\r\n"),
                 400, "empty Transfer-Encoding");
    /* chunked twice, in separate headers. */
    req_fail("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
             "Transfer-Encoding: chunked\r\n\r\n",
             400);
    /* chunked first, then another coding in a second header. */
    req_fail("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
             "Transfer-Encoding: gzip\r\n\r\n",
             501);
}

static void test_content_length_with_transfer_encoding(void **state)
{
    (void)state;
    req_fail("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
             "Transfer-Encoding: chunked\r\n\r\n",
             400);
    req_fail("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
             "Content-Length: 5\r\n\r\n",
             400);
    /* Even with an unknown coding the conflict comes first. */
    req_fail("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: foo\r\n"
             "Content-Length: 5\r\n\r\n",
             400);
}

static void test_transfer_encoding_http10(void **state)
{
    (void)state;
    req_fail("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
}

/* ---- line syntax ------------------------------------------------------ */

static void test_obs_fold(void **state)
{
    struct parsed p = {0};

    (void)state;
    req_fail_why(LIT("GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n"), 400,
                 "obs-fold");
    req_fail_why(LIT("GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n\tb\r\n\r\n"), 400,
                 "obs-fold");
    /* Whitespace before the first header name is the same thing. */
    req_fail("GET / HTTP/1.1\r\n Host: h\r\n\r\n", 400);
    /* Whitespace inside a value is fine. */
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nX: a \t b\r\n\r\n");
    assert_slice(p.req.headers[1].value, "a \t b");
    parsed_free(&p);
}

static void test_bare_cr(void **state)
{
    (void)state;
    req_fail_why(LIT("GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n"), 400,
                 "bare CR");
    req_fail_why(LIT("GET / HTTP/1.1\r\nHost: h\r\nX: a\r\r\n\r\n"), 400,
                 "bare CR");
    req_fail_why(LIT("GET / HTTP/1.1\rX\r\nHost: h\r\n\r\n"), 400, "bare CR");
    req_fail_why(LIT("GET /\r HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "bare CR");
    req_fail_why(LIT("GET / HTTP/1.1\r\nHost: h\r\nX\r: a\r\n\r\n"), 400,
                 "bare CR");
}

static void test_bare_lf(void **state)
{
    struct parsed p = {0};

    (void)state;
    req_fail("GET / HTTP/1.1\nHost: h\r\n\r\n", 400);
    req_fail("GET / HTTP/1.1\r\nHost: h\n\r\n", 400);
    req_fail("GET / HTTP/1.1\r\nHost: h\r\n\n", 400);
    req_fail("GET / HTTP/1.1\r\nHost: h\r\nX: a\nb\r\n\r\n", 400);
    /* It is refused as soon as it arrives, not after a CRLFCRLF that a
     * client speaking bare LF would never send. */
    assert_int_equal(parse_n(&p, NULL, 0, NULL, LIT("GET / HTTP/1.1\n")), -1);
    assert_int_equal(p.status, 400);
    parsed_free(&p);
}

static void test_nul(void **state)
{
    (void)state;
    req_fail_why(LIT("GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n"), 400,
                 "NUL");
    req_fail_why(LIT("GET /\0 HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "NUL");
    req_fail_why(LIT("GET / HTTP/1.1\r\nHost: h\r\nX\0: a\r\n\r\n"), 400,
                 "NUL");
}

/* Every octet in a header name is accepted exactly when it is a tchar. */
static void test_header_name_octets(void **state)
{
    static const char tchars[] = "!#$%&'*+-.^_`|~0123456789"
                                 "abcdefghijklmnopqrstuvwxyz"
                                 "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    struct http_limits lim = http_limits_default();
    struct parsed p = {0};
    char s[64];
    int c;

    (void)state;
    lim.underscores = HTTP_US_ALLOW;
    for (c = 0; c < 256; c++) {
        int n = snprintf(s, sizeof(s),
                         "GET / HTTP/1.1\r\nHost: h\r\nX?Y: v"
                         "\r\n\r\n");
        int tchar = c != 0 && strchr(tchars, c) != NULL;

        s[26] = (char)c;
        if (c == ':')
            continue; /* "X:Y: v" is the header X with value "Y: v" */
        if (tchar) {
            req_ok_lim(&p, &lim, s, (size_t)n);
            assert_int_equal(p.req.headers[1].name.n, 3);
        } else {
            req_fail_lim(&lim, s, (size_t)n, 400);
        }
    }
    parsed_free(&p);
}

static void test_whitespace_before_colon(void **state)
{
    (void)state;
    req_fail("GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400);
    req_fail("GET / HTTP/1.1\r\nHost: h\r\nX\t: a\r\n\r\n", 400);
    req_fail("GET / HTTP/1.1\r\nHost: h\r\nContent-Length : 5\r\n\r\n", 400);
}

static void test_empty_name_and_missing_colon(void **state)
{
    (void)state;
    req_fail("GET / HTTP/1.1\r\nHost: h\r\n: a\r\n\r\n", 400);
    req_fail("GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", 400);
}

/* Every octet in a value is accepted exactly when it is HTAB, SP, VCHAR or
 * obs-text; CR, LF and NUL have their own tests. */
static void test_header_value_octets(void **state)
{
    struct parsed p = {0};
    char s[64];
    int c;

    (void)state;
    for (c = 0; c < 256; c++) {
        int n = snprintf(s, sizeof(s),
                         "GET / HTTP/1.1\r\nHost: h\r\n"
                         "X: a?b\r\n\r\n");
        int ok = c == '\t' || (c >= 0x20 && c != 0x7f);

        s[29] = (char)c;
        if (c == '\r' || c == '\n')
            continue;
        if (ok) {
            req_ok_lim(&p, NULL, s, (size_t)n);
            assert_int_equal(p.req.headers[1].value.n, 3);
        } else {
            req_fail_lim(NULL, s, (size_t)n, 400);
        }
    }
    parsed_free(&p);
}

static void test_value_ows_trimmed(void **state)
{
    struct parsed p = {0};

    (void)state;
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nA:  \t x y \t \r\nB:\r\n"
               "C: \t\r\nD:z\r\n\r\n");
    assert_slice(p.req.headers[1].value, "x y");
    assert_slice(p.req.headers[2].value, "");
    assert_slice(p.req.headers[3].value, "");
    assert_slice(p.req.headers[4].value, "z");
    parsed_free(&p);
}

/* ---- limits ------------------------------------------------------------ */

/* make_headers() builds a request with n headers "Hk: v". */
static char *make_headers(size_t n, size_t *len)
{
    size_t cap = 64 + n * 16, off = 0, i;
    char *s = malloc(cap);

    assert_non_null(s);
    off += (size_t)snprintf(s + off, cap - off, "GET / HTTP/1.1\r\n");
    off += (size_t)snprintf(s + off, cap - off, "Host: h\r\n");
    for (i = 1; i < n; i++)
        off += (size_t)snprintf(s + off, cap - off, "H%zu: v\r\n", i);
    off += (size_t)snprintf(s + off, cap - off, "\r\n");
    *len = off;
    return s;
}

static void test_max_headers(void **state)
{
    struct parsed p = {0};
    size_t len, cut;
    char *s;

    (void)state;
    s = make_headers(100, &len);
    assert_int_equal(req_ok_lim(&p, NULL, s, len), len);
    assert_int_equal(p.req.nheaders, 100);
    free(s);
    s = make_headers(101, &len);
    req_fail_lim(NULL, s, len, 431);
    /* Refused as soon as the 101st line ends, before the head does. */
    cut = (size_t)(strstr(s, "H100: v\r\n") - s) + 9;
    assert_int_equal(parse_n(&p, NULL, 0, NULL, s, cut), -1);
    assert_int_equal(p.status, 431);
    assert_int_equal(parse_n(&p, NULL, 0, NULL, s, cut - 1), 0);
    free(s);
    parsed_free(&p);
}

/* make_line() builds a request whose request line is n bytes long. */
static char *make_line(size_t n, size_t *len)
{
    static const char pre[] = "GET /", post[] = " HTTP/1.1";
    static const char rest[] = "\r\nHost: h\r\n\r\n";
    size_t t = n - (sizeof(pre) - 1) - (sizeof(post) - 1);
    char *s = malloc(n + sizeof(rest));

    assert_non_null(s);
    memcpy(s, pre, sizeof(pre) - 1);
    memset(s + sizeof(pre) - 1, 'a', t);
    memcpy(s + sizeof(pre) - 1 + t, post, sizeof(post) - 1);
    memcpy(s + n, rest, sizeof(rest));
    *len = n + sizeof(rest) - 1;
    return s;
}

static void test_max_request_line(void **state)
{
    struct http_limits lim = http_limits_default();
    struct parsed p = {0};
    size_t len;
    char *s;

    (void)state;
    lim.max_request_line = 100;
    s = make_line(100, &len);
    assert_int_equal(req_ok_lim(&p, &lim, s, len), len);
    /* A partial line at the limit, even with the CR, is still waited on. */
    assert_int_equal(parse_n(&p, &lim, 0, NULL, s, 100), 0);
    assert_int_equal(parse_n(&p, &lim, 0, NULL, s, 101), 0);
    free(s);
    s = make_line(101, &len);
    req_fail_lim(&lim, s, len, 414);
    /* Refused once the line is one byte over, before its CRLF. */
    assert_int_equal(parse_n(&p, &lim, 0, NULL, s, 101), -1);
    assert_int_equal(p.status, 414);
    assert_int_equal(parse_n(&p, &lim, 0, NULL, s, 100), 0);
    free(s);
    /* The default is 8 KiB. */
    s = make_line(8192, &len);
    req_ok_lim(&p, NULL, s, len);
    free(s);
    s = make_line(8193, &len);
    req_fail_lim(NULL, s, len, 414);
    free(s);
    parsed_free(&p);
}

/* make_head() builds a request head of exactly n bytes. */
static char *make_head(size_t n)
{
    static const char pre[] = "GET / HTTP/1.1\r\nHost: h\r\nX: ";
    char *s = malloc(n);
    size_t v = n - (sizeof(pre) - 1) - 4;

    assert_non_null(s);
    memcpy(s, pre, sizeof(pre) - 1);
    memset(s + sizeof(pre) - 1, 'v', v);
    memcpy(s + n - 4, "\r\n\r\n", 4);
    return s;
}

static void test_max_head(void **state)
{
    struct http_limits lim = http_limits_default();
    struct parsed p = {0};
    char *s;

    (void)state;
    lim.max_head = 200;
    s = make_head(200);
    assert_int_equal(req_ok_lim(&p, &lim, s, 200), 200);
    free(s);
    s = make_head(201);
    req_fail_lim(&lim, s, 201, 431);
    free(s);
    /* A partial head that fills the limit is refused at once (the
     * caller's buffer holds no more than max_head bytes, so it could never
     * complete)... */
    s = make_head(1000);
    assert_int_equal(parse_n(&p, &lim, 0, NULL, s, 200), -1);
    assert_int_equal(p.status, 431);
    /* ...and one byte short of it is still waited on. */
    assert_int_equal(parse_n(&p, &lim, 0, NULL, s, 199), 0);
    free(s);
    /* The default is 60 KiB. */
    s = make_head(60 * 1024);
    req_ok_lim(&p, NULL, s, 60 * 1024);
    free(s);
    s = make_head(60 * 1024 + 1);
    req_fail_lim(NULL, s, 60 * 1024 + 1, 431);
    free(s);
    parsed_free(&p);
}

/* ---- underscores --------------------------------------------------------- */

static void test_underscore_policies(void **state)
{
    static const char s[] = "GET / HTTP/1.1\r\nHost: h\r\nX_User: a\r\n"
                            "X-User: b\r\n\r\n";
    struct http_limits lim = http_limits_default();
    struct parsed p = {0};

    (void)state;
    assert_int_equal(lim.underscores, HTTP_US_REJECT);
    req_fail_lim(&lim, LIT(s), 400);
    lim.underscores = HTTP_US_DROP;
    req_ok_lim(&p, &lim, LIT(s));
    assert_int_equal(p.req.nheaders, 2);
    assert_slice(p.req.headers[1].name, "X-User");
    lim.underscores = HTTP_US_ALLOW;
    req_ok_lim(&p, &lim, LIT(s));
    assert_int_equal(p.req.nheaders, 3);
    assert_slice(p.req.headers[1].name, "X_User");
    parsed_free(&p);
}

/* A name that reads as a framing field with '_' for '-' is dropped even
 * when underscores are allowed: CGI-style back ends merge the two. */
static void test_underscore_framing_alias_dropped(void **state)
{
    static const char s[] = "POST / HTTP/1.1\r\nHost: h\r\n"
                            "Transfer_Encoding: chunked\r\n"
                            "CONTENT_LENGTH: 9\r\nX_User: a\r\n"
                            "Content-Length: 1\r\n\r\n";
    struct http_limits lim = http_limits_default();
    struct parsed p = {0};
    size_t i;

    (void)state;
    lim.underscores = HTTP_US_ALLOW;
    req_ok_lim(&p, &lim, LIT(s));
    assert_int_equal(p.req.nheaders, 3);
    for (i = 0; i < p.req.nheaders; i++) {
        assert_false(
            h1_slice_eq_ci(p.req.headers[i].name, "transfer_encoding"));
        assert_false(h1_slice_eq_ci(p.req.headers[i].name, "content_length"));
    }
    assert_slice(p.req.headers[1].name, "X_User");
    assert_int_equal(p.req.body, H1_BODY_LENGTH);
    assert_int_equal(p.req.content_length, 1);
    parsed_free(&p);
}

/* ---- request target --------------------------------------------------- */

static void test_target_fragment_refused(void **state)
{
    (void)state;
    req_fail_why(LIT("GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n"), 400, "fragment");
    req_fail_why(LIT("GET /a?x#/admin HTTP/1.1\r\nHost: h\r\n\r\n"), 400,
                 "fragment");
    req_fail_why(LIT("GET http://h/#x HTTP/1.1\r\nHost: h\r\n\r\n"), 400,
                 "fragment");
}

static void test_target_userinfo_refused(void **state)
{
    struct parsed p = {0};

    (void)state;
    req_fail_why(LIT("GET http://a@other.example/ HTTP/1.1\r\nHost: a\r\n\r\n"),
                 400, "userinfo");
    req_fail_why(LIT("GET https://u:p@h HTTP/1.1\r\nHost: h\r\n\r\n"), 400,
                 "userinfo");
    req_fail_why(LIT("CONNECT u@h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"), 400,
                 "userinfo");
    /* '@' after the authority is part of a path or query. */
    req_ok(&p, "GET http://h/a@b?c@d HTTP/1.1\r\nHost: h\r\n\r\n");
    req_ok(&p, "GET /a@b HTTP/1.1\r\nHost: h\r\n\r\n");
    req_ok(&p, "GET http://h?u@x HTTP/1.1\r\nHost: h\r\n\r\n");
    req_ok(&p, "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_slice(p.req.target, "*");
    parsed_free(&p);
}

static void test_trailer_allowed(void **state)
{
    static const char *const banned[] = {"Content-Length", "transfer-encoding",
                                         "HOST",           "Connection",
                                         "keep-alive",     "TE",
                                         "Trailer",        "Upgrade"};
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(banned) / sizeof(banned[0]); i++) {
        struct h1_slice n = {banned[i], strlen(banned[i])};
        assert_false(h1_trailer_allowed(n));
    }
    assert_true(h1_trailer_allowed((struct h1_slice){"X-Sum", 5}));
    assert_true(h1_trailer_allowed((struct h1_slice){"grpc-status", 11}));
    assert_true(h1_trailer_allowed((struct h1_slice){"Content-Lengths", 15}));
}

/* ---- connection semantics ----------------------------------------------- */

static void test_keep_alive(void **state)
{
    struct parsed p = {0};

    (void)state;
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_true(p.req.keep_alive);
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    assert_false(p.req.keep_alive);
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, CLOSE\r\n\r\n");
    assert_false(p.req.keep_alive);
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n"
               "Connection: close\r\n\r\n");
    assert_false(p.req.keep_alive);
    req_ok(&p, "GET / HTTP/1.0\r\n\r\n");
    assert_false(p.req.keep_alive);
    req_ok(&p, "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    assert_true(p.req.keep_alive);
    req_ok(&p, "GET / HTTP/1.0\r\nConnection: x,keep-alive , y\r\n\r\n");
    assert_true(p.req.keep_alive);
    req_ok(&p, "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n");
    assert_false(p.req.keep_alive);
    /* "closed" is another token, not "close". */
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n");
    assert_true(p.req.keep_alive);
    parsed_free(&p);
    /* The list holds tokens only. */
    req_fail("GET / HTTP/1.1\r\nHost: h\r\nConnection: cl ose\r\n\r\n", 400);
    req_fail("GET / HTTP/1.1\r\nHost: h\r\nConnection: \"close\"\r\n\r\n", 400);
}

static void test_expect_continue(void **state)
{
    struct parsed p = {0};

    (void)state;
    req_ok(&p, "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n"
               "Content-Length: 3\r\n\r\n");
    assert_true(p.req.expect_continue);
    req_ok(&p, "POST / HTTP/1.1\r\nHost: h\r\nexpect: 100-Continue\r\n\r\n");
    assert_true(p.req.expect_continue);
    req_ok(&p, "POST / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n");
    assert_false(p.req.expect_continue);
    /* HTTP/1.0 servers must ignore it. */
    req_ok(&p, "POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n");
    assert_false(p.req.expect_continue);
    parsed_free(&p);
}

static void test_upgrade(void **state)
{
    struct parsed p = {0};

    (void)state;
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
               "Upgrade: websocket\r\n\r\n");
    assert_true(p.req.upgrade);
    assert_true(p.req.keep_alive);
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n");
    assert_false(p.req.upgrade);
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\n\r\n");
    assert_false(p.req.upgrade);
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\n"
               "Upgrade:\r\n\r\n");
    assert_false(p.req.upgrade);
    req_ok(&p, "GET / HTTP/1.0\r\nConnection: upgrade\r\n"
               "Upgrade: websocket\r\n\r\n");
    assert_false(p.req.upgrade);
    parsed_free(&p);
}

static void test_te_trailers(void **state)
{
    struct parsed p = {0};

    (void)state;
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nTE: trailers\r\n\r\n");
    assert_true(p.req.te_trailers);
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nte: gzip;q=0.5, Trailers\r\n\r\n");
    assert_true(p.req.te_trailers);
    req_ok(&p, "GET / HTTP/1.1\r\nHost: h\r\nTE: gzip\r\n\r\n");
    assert_false(p.req.te_trailers);
    parsed_free(&p);
}

static void test_names_case_insensitive(void **state)
{
    struct parsed p = {0};
    const struct h1_header *h;
    struct h1_slice s = {"Content-LENGTH", 14};

    (void)state;
    req_ok(&p, "POST / HTTP/1.1\r\nHOST: h\r\nCONTENT-length: 2\r\n\r\n");
    assert_int_equal(p.req.body, H1_BODY_LENGTH);
    assert_slice(p.req.host, "h");
    req_ok(&p, "POST / HTTP/1.1\r\nhost: h\r\ntransfer-ENCODING: Chunked\r\n"
               "\r\n");
    assert_int_equal(p.req.body, H1_BODY_CHUNKED);
    h = h1_header_find(p.req.headers, p.req.nheaders, "Transfer-Encoding");
    assert_non_null(h);
    assert_slice(h->value, "Chunked");
    assert_null(h1_header_find(p.req.headers, p.req.nheaders, "Transfer"));
    assert_true(h1_slice_eq_ci(s, "content-length"));
    assert_false(h1_slice_eq_ci(s, "content-lengthx"));
    assert_false(h1_slice_eq_ci(s, "content-lengt"));
    parsed_free(&p);
}

/* ---- responses ----------------------------------------------------------- */

static void test_response_length(void **state)
{
    struct parsed p = {0};
    static const char s[] = "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n";

    (void)state;
    assert_int_equal(resp_ok(&p, "GET", s), strlen(s));
    assert_int_equal(p.res.status, 200);
    assert_slice(p.res.reason, "OK");
    assert_int_equal(p.res.minor, 1);
    assert_int_equal(p.res.body, H1_BODY_LENGTH);
    assert_int_equal(p.res.content_length, 12);
    assert_true(p.res.keep_alive);
    assert_false(p.res.upgrade);
    assert_int_equal(p.res.nheaders, 1);
    parsed_free(&p);
}

static void test_response_chunked(void **state)
{
    struct parsed p = {0};

    (void)state;
    resp_ok(&p, NULL, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_int_equal(p.res.body, H1_BODY_CHUNKED);
    assert_true(p.res.keep_alive);
    parsed_free(&p);
    /* Codings other than chunked cannot be forwarded as they are: the
     * response is refused (502) instead of re-framed without them. */
    resp_fail(NULL,
              "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
    resp_fail(NULL,
              "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
    resp_fail(NULL, "HTTP/1.1 200 OK\r\nTransfer-Encoding: br\r\n\r\n");
}

static void test_response_close_delimited(void **state)
{
    struct parsed p = {0};

    (void)state;
    resp_ok(&p, "GET", "HTTP/1.1 200 OK\r\nServer: x\r\n\r\n");
    assert_int_equal(p.res.body, H1_BODY_EOF);
    assert_false(p.res.keep_alive);
    resp_ok(&p, "GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n");
    assert_int_equal(p.res.body, H1_BODY_EOF);
    assert_false(p.res.keep_alive);
    parsed_free(&p);
}

static void test_response_no_body(void **state)
{
    static const int codes[] = {100, 102, 103, 199, 204, 304};
    struct parsed p = {0};
    char s[128];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        snprintf(s, sizeof(s), "HTTP/1.1 %d X\r\nContent-Length: 10\r\n\r\n",
                 codes[i]);
        resp_ok(&p, "GET", s);
        assert_int_equal(p.res.body, H1_BODY_NONE);
        assert_true(p.res.keep_alive);
        snprintf(s, sizeof(s),
                 "HTTP/1.1 %d X\r\nTransfer-Encoding: chunked\r\n\r\n",
                 codes[i]);
        resp_ok(&p, "GET", s);
        assert_int_equal(p.res.body, H1_BODY_NONE);
    }
    /* 304 keeps the length of what it stands for. */
    resp_ok(&p, "GET",
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n"
            "\r\n");
    assert_int_equal(p.res.content_length, 10);
    /* The same 200 is a body only when the request was not HEAD. */
    resp_ok(&p, "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n");
    assert_int_equal(p.res.body, H1_BODY_NONE);
    assert_true(p.res.keep_alive);
    resp_ok(&p, "HEAD", "HTTP/1.1 200 OK\r\n\r\n");
    assert_int_equal(p.res.body, H1_BODY_NONE);
    assert_true(p.res.keep_alive);
    resp_ok(&p, "GET", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n");
    assert_int_equal(p.res.body, H1_BODY_LENGTH);
    /* A 2xx to CONNECT is a tunnel; a 4xx to it has a body. */
    resp_ok(&p, "CONNECT", "HTTP/1.1 200 Connection established\r\n\r\n");
    assert_int_equal(p.res.body, H1_BODY_NONE);
    resp_ok(&p, "CONNECT",
            "HTTP/1.1 403 Forbidden\r\nContent-Length: 0"
            "\r\n\r\n");
    assert_int_equal(p.res.body, H1_BODY_LENGTH);
    parsed_free(&p);
}

static void test_response_101(void **state)
{
    struct parsed p = {0};

    (void)state;
    resp_ok(&p, "GET",
            "HTTP/1.1 101 Switching Protocols\r\n"
            "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    assert_int_equal(p.res.status, 101);
    assert_true(p.res.upgrade);
    assert_int_equal(p.res.body, H1_BODY_NONE);
    resp_ok(&p, "GET", "HTTP/1.1 100 Continue\r\n\r\n");
    assert_false(p.res.upgrade);
    parsed_free(&p);
}

static void test_response_keep_alive(void **state)
{
    struct parsed p = {0};

    (void)state;
    resp_ok(&p, "GET",
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
            "Connection: close\r\n\r\n");
    assert_false(p.res.keep_alive);
    resp_ok(&p, "GET", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert_false(p.res.keep_alive);
    resp_ok(&p, "GET",
            "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n"
            "Connection: keep-alive\r\n\r\n");
    assert_true(p.res.keep_alive);
    assert_int_equal(p.res.minor, 0);
    parsed_free(&p);
}

static void test_response_status_line(void **state)
{
    struct parsed p = {0};

    (void)state;
    resp_ok(&p, "GET", "HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(p.res.status, 404);
    assert_slice(p.res.reason, "");
    resp_ok(&p, "GET", "HTTP/1.1 503\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(p.res.status, 503);
    assert_slice(p.res.reason, "");
    resp_ok(&p, "GET",
            "HTTP/1.1 200 All \tfine \xe2\x9c\x93\r\n"
            "Content-Length: 0\r\n\r\n");
    assert_slice(p.res.reason, "All \tfine \xe2\x9c\x93");
    parsed_free(&p);
    resp_fail("GET", "HTTP/1.1 20 OK\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 2000 OK\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 099 OK\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 600 OK\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 2x0 OK\r\n\r\n");
    resp_fail("GET", "HTTP/1.1  200 OK\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 200 O\x01K\r\n\r\n");
    resp_fail("GET", "HTTP/1.1\r\n\r\n");
    resp_fail("GET", "HTTP/2.0 200 OK\r\n\r\n"); /* 1.2 is 1.1 */
    resp_fail("GET", "HTTP/2 200 OK\r\n\r\n");
    resp_fail("GET", "http/1.1 200 OK\r\n\r\n");
    resp_fail("GET", "ICY 200 OK\r\n\r\n");
}

static void test_response_errors(void **state)
{
    (void)state;
    resp_fail("GET", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n"
                     "Content-Length: 2\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, "
                     "chunked\r\n\r\n");
    resp_fail("GET", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n");
    resp_fail("GET", "HTTP/1.1 200 OK\r\nX : a\r\n\r\n");
    /* No empty lines before a status line. */
    resp_fail("GET", "\r\nHTTP/1.1 200 OK\r\n\r\n");
    /* Framing errors count even where the body is not read. */
    resp_fail("HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n");
}

static void test_response_pipelined(void **state)
{
    struct parsed p = {0};
    static const char s[] = "HTTP/1.1 100 Continue\r\n\r\n"
                            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    int n;

    (void)state;
    n = resp_ok(&p, "POST", s);
    assert_int_equal(p.res.status, 100);
    assert_int_equal(parse_n(&p, NULL, 1, "POST", s + n, strlen(s) - (size_t)n),
                     strlen(s) - (size_t)n - 2);
    assert_int_equal(p.res.status, 200);
    parsed_free(&p);
}

static void test_response_limits(void **state)
{
    struct http_limits lim = http_limits_default();
    struct parsed p = {0};

    (void)state;
    lim.max_request_line = 16; /* "HTTP/1.1 200 OK" is 15 */
    assert_int_equal(parse_n(&p, &lim, 1, NULL, LIT("HTTP/1.1 200 OK\r\n\r\n")),
                     19);
    assert_int_equal(
        parse_n(&p, &lim, 1, NULL, LIT("HTTP/1.1 200 OKAY\r\n\r\n")), -1);
    assert_int_equal(p.status, 502);
    parsed_free(&p);
}

/* ---- h1_parse_fields ------------------------------------------------------
 */

static void test_parse_fields(void **state)
{
    struct h1_header out[4];
    struct http_limits lim = http_limits_default();
    const char *why = NULL;
    size_t n = 99;
    int status = 0;

    (void)state;
    assert_int_equal(h1_parse_fields(LIT("A: 1\r\nB:2\r\n"), NULL, out, 4, &n,
                                     &why, &status),
                     0);
    assert_int_equal(n, 2);
    assert_slice(out[1].value, "2");
    assert_int_equal(
        h1_parse_fields(LIT("A: 1\r\n\r\n"), NULL, out, 4, &n, &why, &status),
        0);
    assert_int_equal(n, 1);
    assert_int_equal(h1_parse_fields("", 0, NULL, out, 4, &n, &why, &status),
                     0);
    assert_int_equal(n, 0);
    /* Errors: no CRLF at the end, data after the empty line, obs-fold,
     * NUL, bare CR. */
    assert_int_equal(
        h1_parse_fields(LIT("A: 1"), NULL, out, 4, &n, &why, &status), -1);
    assert_int_equal(status, 400);
    assert_int_equal(h1_parse_fields(LIT("A: 1\r\n\r\nB: 2\r\n"), NULL, out, 4,
                                     &n, &why, &status),
                     -1);
    assert_int_equal(
        h1_parse_fields(LIT("A: 1\r\n 2\r\n"), NULL, out, 4, &n, &why, &status),
        -1);
    assert_int_equal(
        h1_parse_fields(LIT("A: \0\r\n"), NULL, out, 4, &n, &why, &status), -1);
    assert_int_equal(
        h1_parse_fields(LIT("A: \r1\r\n"), NULL, out, 4, &n, &why, &status),
        -1);
    assert_int_equal(
        h1_parse_fields(LIT("A: 1\n"), NULL, out, 4, &n, &why, &status), -1);
    /* More than cap, or than max_headers: 431. */
    assert_int_equal(h1_parse_fields(LIT("A: 1\r\nB: 2\r\nC: 3\r\n"), NULL, out,
                                     2, &n, &why, &status),
                     -1);
    assert_int_equal(status, 431);
    lim.max_headers = 1;
    assert_int_equal(h1_parse_fields(LIT("A: 1\r\nB: 2\r\n"), &lim, out, 4, &n,
                                     &why, &status),
                     -1);
    assert_int_equal(status, 431);
}

/* Regression: an empty trailer section reached memchr() as (NULL, 0),
 * which is undefined behaviour (found by fuzz_http1). */
static void test_parse_fields_null_empty(void **state)
{
    struct h1_header out[1];
    struct h1_chunked c = {0};
    struct h1_slice d, t;
    const char *why;
    size_t n = 7;
    int status;

    (void)state;
    assert_int_equal(h1_parse_fields(NULL, 0, NULL, out, 1, &n, &why, &status),
                     0);
    assert_int_equal(n, 0);
    assert_int_equal(h1_chunked_decode(&c, LIT("0\r\n\r\n"), &d, &why), 5);
    assert_int_equal(h1_chunked_trailers(&c, &t), 0);
    assert_non_null(t.p);
    assert_int_equal(t.n, 0);
    assert_int_equal(h1_parse_fields(t.p, t.n, NULL, out, 1, &n, &why, &status),
                     0);
    h1_chunked_dispose(&c);
}

/* ---- chunked ------------------------------------------------------------ */

struct out {
    char data[4096];
    size_t n;
};

/*
 * feed() runs the decoder over one piece (copied to a buffer of exactly its
 * size) until the piece is used up or the body is done. Returns the bytes
 * consumed, or -1.
 */
static ssize_t feed(struct h1_chunked *c, const char *piece, size_t n,
                    struct out *o, const char **why)
{
    char *copy = malloc(n ? n : 1);
    size_t off = 0;

    assert_non_null(copy);
    memcpy(copy, piece, n);
    while (off < n && !h1_chunked_done(c)) {
        struct h1_slice d;
        ssize_t r = h1_chunked_decode(c, copy + off, n - off, &d, why);

        if (r < 0) {
            free(copy);
            return -1;
        }
        assert_true((size_t)r <= n - off);
        /* The data lies within the consumed region. */
        assert_true(d.n == 0 ||
                    (d.p >= copy + off && d.p + d.n <= copy + off + r));
        assert_true(o->n + d.n <= sizeof(o->data));
        if (d.n > 0)
            memcpy(o->data + o->n, d.p, d.n);
        o->n += d.n;
        off += (size_t)r;
        if (r == 0)
            break;
    }
    free(copy);
    return (ssize_t)off;
}

/* decode_split() decodes in two pieces cut at k. */
static ssize_t decode_split(struct h1_chunked *c, const char *in, size_t len,
                            size_t k, struct out *o, const char **why)
{
    ssize_t a, b = 0;

    o->n = 0;
    a = feed(c, in, k, o, why);
    if (a < 0)
        return -1;
    if ((size_t)a == k && !h1_chunked_done(c))
        b = feed(c, in + k, len - k, o, why);
    if (b < 0)
        return -1;
    return a + b;
}

static void test_chunked_simple(void **state)
{
    static const char s[] = "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";
    struct h1_chunked c;
    struct h1_slice t;
    struct out o;
    const char *why = NULL;

    (void)state;
    h1_chunked_init(&c);
    o.n = 0;
    assert_false(h1_chunked_done(&c));
    assert_int_equal(h1_chunked_trailers(&c, &t), -1);
    assert_int_equal(feed(&c, LIT(s), &o, &why), sizeof(s) - 1);
    assert_true(h1_chunked_done(&c));
    assert_int_equal(o.n, 12);
    assert_memory_equal(o.data, "hello, world", 12);
    assert_int_equal(h1_chunked_trailers(&c, &t), 0);
    assert_int_equal(t.n, 0);
    h1_chunked_dispose(&c);
}

/* Every cut point, and byte by byte, gives what one call gives. */
static void test_chunked_every_split(void **state)
{
    static const char s[] = "1a;name=\"v\"\r\nabcdefghijklmnopqrstuvwxyz\r\n"
                            "3 ; a ;b=c\r\nxyz\r\nA\r\n0123456789\r\n"
                            "000;last\r\nX-Sum: 1\r\nY: 2\r\n\r\n";
    static const char want[] = "abcdefghijklmnopqrstuvwxyzxyz0123456789";
    static const char trailers[] = "X-Sum: 1\r\nY: 2\r\n";
    size_t len = sizeof(s) - 1, k;
    struct h1_chunked c;
    struct h1_slice t;
    struct out o;
    const char *why;

    (void)state;
    for (k = 0; k <= len; k++) {
        memset(&c, 0, sizeof(c)); /* zeroing is enough to start */
        assert_int_equal(decode_split(&c, s, len, k, &o, &why), len);
        assert_true(h1_chunked_done(&c));
        assert_int_equal(o.n, sizeof(want) - 1);
        assert_memory_equal(o.data, want, o.n);
        assert_int_equal(h1_chunked_trailers(&c, &t), 0);
        assert_int_equal(t.n, sizeof(trailers) - 1);
        assert_memory_equal(t.p, trailers, t.n);
        h1_chunked_dispose(&c);
    }
    /* Byte by byte. */
    o.n = 0;
    h1_chunked_init(&c);
    for (k = 0; k < len; k++)
        assert_int_equal(feed(&c, s + k, 1, &o, &why), 1);
    assert_true(h1_chunked_done(&c));
    assert_memory_equal(o.data, want, sizeof(want) - 1);
    h1_chunked_dispose(&c);
}

static void test_chunked_trailers_parsed(void **state)
{
    static const char s[] = "2\r\nhi\r\n0\r\ngrpc-status: 0\r\n"
                            "grpc-message:  ok \r\n\r\n";
    struct h1_header h[4];
    struct h1_chunked c = {0};
    struct h1_slice t;
    struct out o = {.n = 0};
    const char *why;
    size_t n;
    int status;

    (void)state;
    assert_int_equal(feed(&c, LIT(s), &o, &why), sizeof(s) - 1);
    assert_int_equal(h1_chunked_trailers(&c, &t), 0);
    assert_int_equal(h1_parse_fields(t.p, t.n, NULL, h, 4, &n, &why, &status),
                     0);
    assert_int_equal(n, 2);
    assert_slice(h[0].name, "grpc-status");
    assert_slice(h[1].value, "ok");
    h1_chunked_dispose(&c);
    assert_null(c.trailers);
}

static void test_chunked_trailers_bounded(void **state)
{
    size_t len = 5 + H1_TRAILERS_MAX + 64, off = 0;
    char *s = malloc(len);
    struct h1_chunked c = {0};
    struct out o = {.n = 0};
    const char *why = NULL;

    (void)state;
    assert_non_null(s);
    memcpy(s, "0\r\n", 3);
    off = 3;
    /* Trailer lines of exactly H1_TRAILERS_MAX bytes are accepted. */
    while (off + 100 <= 3 + H1_TRAILERS_MAX) {
        memcpy(s + off, "X: ", 3);
        memset(s + off + 3, 'v', 95);
        memcpy(s + off + 98, "\r\n", 2);
        off += 100;
    }
    {
        size_t left = 3 + H1_TRAILERS_MAX - off;

        assert_true(left >= 5);
        memcpy(s + off, "Y: ", 3);
        memset(s + off + 3, 'w', left - 5);
        memcpy(s + off + left - 2, "\r\n", 2);
        off += left;
    }
    memcpy(s + off, "\r\n", 2);
    assert_int_equal(feed(&c, s, off + 2, &o, &why), off + 2);
    assert_true(h1_chunked_done(&c));
    h1_chunked_dispose(&c);
    /* One byte more is refused. */
    memmove(s + 4, s + 3, off + 2 - 3);
    s[3] = 'Z';
    assert_int_equal(feed(&c, s, off + 3, &o, &why), -1);
    assert_non_null(why);
    h1_chunked_dispose(&c);
    free(s);
}

/* Regression: trailers were bounded only by H1_TRAILERS_MAX, whatever the
 * head limit said; trailers_max (the listener's header-size limit) now
 * bounds them too: exactly that many bytes pass, one more fails. */
static void test_chunked_trailers_max_follows_head_limit(void **state)
{
    static const char ok[] = "0\r\nX-A: 1234\r\n\r\n"; /* 11 bytes */
    static const char over[] = "0\r\nX-A: 12345\r\n\r\n";
    struct h1_chunked c;
    struct out o = {.n = 0};
    const char *why = NULL;
    struct h1_slice t;

    (void)state;
    h1_chunked_init(&c);
    c.trailers_max = 11;
    assert_int_equal(feed(&c, ok, sizeof(ok) - 1, &o, &why), sizeof(ok) - 1);
    assert_true(h1_chunked_done(&c));
    assert_int_equal(h1_chunked_trailers(&c, &t), 0);
    assert_int_equal(t.n, 11);
    h1_chunked_dispose(&c);
    c.trailers_max = 11;
    assert_int_equal(feed(&c, over, sizeof(over) - 1, &o, &why), -1);
    assert_string_equal(why, "trailer section too large");
    h1_chunked_dispose(&c);
}

static void test_chunked_trailer_syntax(void **state)
{
    static const char *const bad[] = {
        "0\r\nX: 1\n\r\n",      /* bare LF ends a trailer */
        "0\r\nX: 1\r\n\n",      /* bare LF ends the section */
        "0\r\nX: 1\rY\r\n\r\n", /* bare CR in a trailer */
        "0\r\n\rX",             /* bare CR instead of the final CRLF */
        "0\r\n\n",
    };
    struct out o;
    const char *why;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct h1_chunked c = {0};

        o.n = 0;
        assert_int_equal(feed(&c, bad[i], strlen(bad[i]), &o, &why), -1);
        h1_chunked_dispose(&c);
    }
}

static void test_chunked_bad_size(void **state)
{
    static const char *const bad[] = {
        "\r\nabc\r\n0\r\n\r\n", /* empty size */
        "g\r\n",                /* not hex */
        "0x5\r\n",
        " 5\r\nhello\r\n", /* leading whitespace */
        "-5\r\n",
        "5 \r\nhello\r\n", /* whitespace must lead to ';' */
        "5 x\r\n",
        "5\rhello",                /* bare CR */
        "5\nhello\r\n",            /* bare LF */
        "4000000000000001\r\n",    /* above 2^62 */
        "ffffffffffffffffff\r\n",  /* overflow */
        "0004000000000000001\r\n", /* above 2^62 after zeros */
        ";a\r\n",                  /* extension without size */
        "5;a\x01\r\nhello\r\n",    /* control in extension */
        "5;a\nhello\r\n",
    };
    struct out o;
    const char *why;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct h1_chunked c = {0};

        o.n = 0;
        why = NULL;
        if (feed(&c, bad[i], strlen(bad[i]), &o, &why) != -1)
            fail_msg("accepted: %s", bad[i]);
        assert_non_null(why);
        h1_chunked_dispose(&c);
    }
}

static void test_chunked_size_bound(void **state)
{
    struct h1_chunked c = {0};
    struct out o = {.n = 0};
    const char *why;

    (void)state;
    /* Exactly 2^62 is accepted (the data would follow). */
    assert_int_equal(feed(&c, LIT("4000000000000000\r\nab"), &o, &why), 20);
    assert_int_equal(c.size, H1_MAX_LENGTH - 2);
    h1_chunked_dispose(&c);
    /* 16 digits with leading zeros are fine. */
    o.n = 0;
    assert_int_equal(
        feed(&c, LIT("0000000000000002\r\nab\r\n0\r\n\r\n"), &o, &why), 27);
    assert_true(h1_chunked_done(&c));
    h1_chunked_dispose(&c);
}

/* Leading zeros are valid in a chunk size, however many (RFC 9112 7.1):
 * only the size line's length is bounded. */
static void test_chunked_leading_zeros(void **state)
{
    size_t n = H1_CHUNK_EXT_MAX + 16;
    char *s = malloc(n);
    struct h1_chunked c = {0};
    struct out o = {.n = 0};
    const char *why;

    (void)state;
    assert_int_equal(feed(&c,
                          LIT("0000000000000000005\r\nhello\r\n"
                              "00000000000000000000000\r\n\r\n"),
                          &o, &why),
                     55);
    assert_true(h1_chunked_done(&c));
    assert_int_equal(o.n, 5);
    assert_memory_equal(o.data, "hello", 5);
    h1_chunked_dispose(&c);
    /* H1_CHUNK_EXT_MAX digits: accepted; one more: refused. */
    assert_non_null(s);
    memset(s, '0', H1_CHUNK_EXT_MAX - 1);
    memcpy(s + H1_CHUNK_EXT_MAX - 1, "1\r\nx\r\n0\r\n\r\n", 11);
    o.n = 0;
    assert_int_equal(feed(&c, s, H1_CHUNK_EXT_MAX + 10, &o, &why),
                     H1_CHUNK_EXT_MAX + 10);
    assert_true(h1_chunked_done(&c));
    h1_chunked_dispose(&c);
    memset(s, '0', H1_CHUNK_EXT_MAX);
    memcpy(s + H1_CHUNK_EXT_MAX, "1\r\nx\r\n0\r\n\r\n", 11);
    o.n = 0;
    assert_int_equal(feed(&c, s, H1_CHUNK_EXT_MAX + 11, &o, &why), -1);
    h1_chunked_dispose(&c);
    free(s);
}

static void test_chunked_extension_bound(void **state)
{
    size_t n = H1_CHUNK_EXT_MAX + 16;
    char *s = malloc(n);
    struct h1_chunked c = {0};
    struct out o = {.n = 0};
    const char *why;

    (void)state;
    assert_non_null(s);
    /* "1" + H1_CHUNK_EXT_MAX bytes of extension: accepted. */
    s[0] = '1';
    s[1] = ';';
    memset(s + 2, 'e', H1_CHUNK_EXT_MAX - 1);
    memcpy(s + 1 + H1_CHUNK_EXT_MAX, "\r\nx\r\n0\r\n\r\n", 10);
    assert_int_equal(feed(&c, s, 11 + H1_CHUNK_EXT_MAX, &o, &why),
                     11 + H1_CHUNK_EXT_MAX);
    assert_true(h1_chunked_done(&c));
    h1_chunked_dispose(&c);
    /* One more byte: refused. */
    memset(s + 2, 'e', H1_CHUNK_EXT_MAX);
    memcpy(s + 2 + H1_CHUNK_EXT_MAX, "\r\nx\r\n0\r\n\r\n", 10);
    assert_int_equal(feed(&c, s, 12 + H1_CHUNK_EXT_MAX, &o, &why), -1);
    h1_chunked_dispose(&c);
    /* Whitespace before ';' counts too. */
    memset(s + 1, ' ', H1_CHUNK_EXT_MAX + 1);
    assert_int_equal(feed(&c, s, 2 + H1_CHUNK_EXT_MAX, &o, &why), -1);
    h1_chunked_dispose(&c);
    free(s);
}

static void test_chunked_missing_crlf_after_data(void **state)
{
    static const char *const bad[] = {
        "3\r\nabcd\r\n0\r\n\r\n", /* data longer than its size */
        "3\r\nabc\n0\r\n\r\n",    "3\r\nabc\rx0\r\n\r\n",
        "3\r\nabc0\r\n\r\n",      "3\r\nabcx\n0\r\n\r\n",
    };
    struct out o;
    const char *why;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct h1_chunked c = {0};

        o.n = 0;
        assert_int_equal(feed(&c, bad[i], strlen(bad[i]), &o, &why), -1);
        h1_chunked_dispose(&c);
    }
}

/* Bytes after the body belong to the next message: not consumed. */
static void test_chunked_done_leaves_rest(void **state)
{
    static const char s[] = "1\r\na\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
    struct h1_chunked c = {0};
    struct h1_slice d;
    struct out o = {.n = 0};
    const char *why;

    (void)state;
    assert_int_equal(feed(&c, LIT(s), &o, &why), 11);
    assert_true(h1_chunked_done(&c));
    assert_int_equal(h1_chunked_decode(&c, s + 11, 5, &d, &why), 0);
    assert_int_equal(d.n, 0);
    h1_chunked_dispose(&c);
}

static void test_chunked_error_sticks(void **state)
{
    struct h1_chunked c = {0};
    struct h1_slice d;
    const char *why = NULL, *why2 = NULL;

    (void)state;
    assert_int_equal(h1_chunked_decode(&c, LIT("z"), &d, &why), -1);
    assert_int_equal(h1_chunked_decode(&c, LIT("5\r\nhello"), &d, &why2), -1);
    assert_string_equal(why, why2);
    h1_chunked_dispose(&c);
    /* After dispose the decoder starts afresh. */
    assert_int_equal(h1_chunked_decode(&c, LIT("0\r\n\r\n"), &d, &why), 5);
    assert_true(h1_chunked_done(&c));
    h1_chunked_dispose(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simple_get),
        cmocka_unit_test(test_head_length_excludes_body),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_bytewise_equals_whole),
        cmocka_unit_test(test_leading_empty_lines_skipped),
        cmocka_unit_test(test_request_line_strict),
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_host_rules),
        cmocka_unit_test(test_content_length_valid),
        cmocka_unit_test(test_content_length_invalid),
        cmocka_unit_test(test_transfer_encoding_valid),
        cmocka_unit_test(test_transfer_encoding_invalid),
        cmocka_unit_test(test_content_length_with_transfer_encoding),
        cmocka_unit_test(test_transfer_encoding_http10),
        cmocka_unit_test(test_obs_fold),
        cmocka_unit_test(test_bare_cr),
        cmocka_unit_test(test_bare_lf),
        cmocka_unit_test(test_nul),
        cmocka_unit_test(test_header_name_octets),
        cmocka_unit_test(test_whitespace_before_colon),
        cmocka_unit_test(test_empty_name_and_missing_colon),
        cmocka_unit_test(test_header_value_octets),
        cmocka_unit_test(test_value_ows_trimmed),
        cmocka_unit_test(test_max_headers),
        cmocka_unit_test(test_max_request_line),
        cmocka_unit_test(test_max_head),
        cmocka_unit_test(test_underscore_policies),
        cmocka_unit_test(test_underscore_framing_alias_dropped),
        cmocka_unit_test(test_target_fragment_refused),
        cmocka_unit_test(test_target_userinfo_refused),
        cmocka_unit_test(test_trailer_allowed),
        cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_expect_continue),
        cmocka_unit_test(test_upgrade),
        cmocka_unit_test(test_te_trailers),
        cmocka_unit_test(test_names_case_insensitive),
        cmocka_unit_test(test_response_length),
        cmocka_unit_test(test_response_chunked),
        cmocka_unit_test(test_response_close_delimited),
        cmocka_unit_test(test_response_no_body),
        cmocka_unit_test(test_response_101),
        cmocka_unit_test(test_response_keep_alive),
        cmocka_unit_test(test_response_status_line),
        cmocka_unit_test(test_response_errors),
        cmocka_unit_test(test_response_pipelined),
        cmocka_unit_test(test_response_limits),
        cmocka_unit_test(test_parse_fields),
        cmocka_unit_test(test_parse_fields_null_empty),
        cmocka_unit_test(test_chunked_simple),
        cmocka_unit_test(test_chunked_every_split),
        cmocka_unit_test(test_chunked_trailers_parsed),
        cmocka_unit_test(test_chunked_trailers_bounded),
        cmocka_unit_test(test_chunked_trailers_max_follows_head_limit),
        cmocka_unit_test(test_chunked_trailer_syntax),
        cmocka_unit_test(test_chunked_bad_size),
        cmocka_unit_test(test_chunked_size_bound),
        cmocka_unit_test(test_chunked_leading_zeros),
        cmocka_unit_test(test_chunked_extension_bound),
        cmocka_unit_test(test_chunked_missing_crlf_after_data),
        cmocka_unit_test(test_chunked_done_leaves_rest),
        cmocka_unit_test(test_chunked_error_sticks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
