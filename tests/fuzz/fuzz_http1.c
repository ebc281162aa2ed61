/*
 * libFuzzer target for src/http1: the input is parsed as a request head, as
 * a response head, and fed to the chunked decoder in random-sized pieces
 * (the sizes come from a generator seeded by the first byte).
 *
 * Beyond "no crash, no leak, no read out of bounds", it checks properties
 * that tie the pieces together, and traps when one fails:
 *  - a complete head parses to the same length when cut at that length, and
 *    every shorter prefix asks for more bytes;
 *  - a parsed HTTP/1.1 request written back by the writer parses to the same
 *    request (so nothing the parser accepts can smuggle through the writer);
 *  - decoding in pieces gives the same payload, end and error as decoding at
 *    once, and re-encoding a decoded body decodes to the same bytes.
 * Every buffer handed to the parser is exactly as long as its length, so
 * ASan sees any read past the end.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "http1/parser.h"
#include "http1/writer.h"

#define MAX_HDRS 100
#define PREFIX_MAX 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            __builtin_trap();                                                  \
    } while (0)

static char *dup_bytes(const void *p, size_t n)
{
    char *d = malloc(n ? n : 1);

    CHECK(d != NULL);
    if (n > 0)
        memcpy(d, p, n);
    return d;
}

static int slice_same(struct h1_slice a, struct h1_slice b)
{
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

/* Parse one head; resp selects response, method (may be NULL) applies to
 * responses. The bytes are copied so the buffer ends exactly at n. */
static int parse_copy(int resp, const struct http_limits *lim,
                      const struct h1_slice *method, const char *p, size_t n)
{
    struct h1_header hdrs[MAX_HDRS];
    struct h1_request req = {.headers = hdrs};
    struct h1_response res = {.headers = hdrs};
    char *copy = dup_bytes(p, n);
    const char *why;
    int status, rc;

    if (resp)
        rc = h1_parse_response(copy, n, lim, method, &res, &why, &status);
    else
        rc = h1_parse_request(copy, n, lim, &req, &why, &status);
    free(copy);
    return rc;
}

static void check_prefixes(int resp, const struct http_limits *lim,
                           const struct h1_slice *method, const char *p,
                           int head)
{
    size_t k;

    CHECK(parse_copy(resp, lim, method, p, (size_t)head) == head);
    if (head > PREFIX_MAX) {
        CHECK(parse_copy(resp, lim, method, p, (size_t)head - 1) == 0);
        return;
    }
    for (k = 0; k < (size_t)head; k++)
        CHECK(parse_copy(resp, lim, method, p, k) == 0);
}

/* Write req back with the writer and parse it again: same request. */
/* The parser's slices and fields have the writer's shape under other
 * names (the writer serves protocol-neutral fields). */
static struct slice to_slice(struct h1_slice s)
{
    struct slice out = {s.p, s.n};
    return out;
}

static void to_fields(const struct h1_header *in, size_t n,
                      struct http_field *out)
{
    for (size_t i = 0; i < n; i++) {
        out[i].name = to_slice(in[i].name);
        out[i].value = to_slice(in[i].value);
    }
}

static void check_roundtrip(const struct h1_request *req)
{
    struct h1_header hdrs[MAX_HDRS];
    struct http_field fields[MAX_HDRS];
    struct h1_request again = {.headers = hdrs};
    struct buf b;
    const char *why;
    int status, rc;
    size_t i;

    buf_init(&b, 1 << 20);
    to_fields(req->headers, req->nheaders, fields);
    CHECK(h1_write_request_head(&b, to_slice(req->method),
                                to_slice(req->target), fields,
                                req->nheaders) == 0);
    rc =
        h1_parse_request(buf_ptr(&b), buf_len(&b), NULL, &again, &why, &status);
    CHECK(rc > 0 && (size_t)rc == buf_len(&b));
    CHECK(slice_same(again.method, req->method));
    CHECK(slice_same(again.target, req->target));
    CHECK(again.nheaders == req->nheaders);
    for (i = 0; i < req->nheaders; i++) {
        CHECK(slice_same(again.headers[i].name, req->headers[i].name));
        CHECK(slice_same(again.headers[i].value, req->headers[i].value));
    }
    CHECK(again.body == req->body);
    CHECK(again.content_length == req->content_length);
    CHECK(again.keep_alive == req->keep_alive);
    CHECK(again.expect_continue == req->expect_continue);
    CHECK(again.upgrade == req->upgrade);
    CHECK(again.te_trailers == req->te_trailers);
    CHECK(slice_same(again.host, req->host));
    buf_dispose(&b);
}

static void fuzz_request(const char *p, size_t n)
{
    struct h1_header hdrs[MAX_HDRS];
    struct h1_request req = {.headers = hdrs};
    struct http_limits small = http_limits_default();
    const char *why = NULL;
    int status = 0, rc;

    rc = h1_parse_request(p, n, NULL, &req, &why, &status);
    CHECK(rc >= -1 && (size_t)(rc > 0 ? rc : 0) <= n);
    if (rc < 0)
        CHECK(why != NULL && (status == 400 || status == 414 || status == 431 ||
                              status == 501 || status == 505));
    if (rc > 0) {
        CHECK(req.minor == 0 || req.minor == 1);
        CHECK(req.nheaders <= MAX_HDRS);
        check_prefixes(0, NULL, NULL, p, rc);
        if (req.minor == 1)
            check_roundtrip(&req);
    }
    /* Tight limits and the other underscore policies reach other paths. */
    small.max_request_line = 32;
    small.max_head = 128;
    small.max_headers = 4;
    small.underscores = n > 0 && (p[n - 1] & 1) ? HTTP_US_DROP : HTTP_US_ALLOW;
    rc = h1_parse_request(p, n, &small, &req, &why, &status);
    CHECK(rc <= 128);
    if (rc > 0)
        CHECK(req.nheaders <= 4);
}

/* A response is parsed as the answer to each kind of request, since the
 * method decides its framing. */
static void fuzz_response(const char *p, size_t n)
{
    static const char *const methods[] = {NULL, "GET", "HEAD", "CONNECT"};
    struct h1_header hdrs[MAX_HDRS];
    struct h1_response res = {.headers = hdrs};
    size_t i;

    for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        struct h1_slice m = {methods[i], methods[i] ? strlen(methods[i]) : 0};
        const struct h1_slice *mp = methods[i] ? &m : NULL;
        const char *why;
        int status = 0, rc;

        rc = h1_parse_response(p, n, NULL, mp, &res, &why, &status);
        if (rc < 0)
            CHECK(status == 502);
        if (rc > 0) {
            CHECK(res.status >= 100 && res.status <= 599);
            if (res.body == H1_BODY_EOF)
                CHECK(!res.keep_alive);
            if (i == 2 || res.status < 200)
                CHECK(res.body == H1_BODY_NONE);
            check_prefixes(1, NULL, mp, p, rc);
        }
    }
}

/* The result of decoding a body: payload, end, and trailers. */
struct decoded {
    char *out;
    size_t n;
    size_t consumed;
    int error;
    struct h1_chunked c;
};

static uint32_t xorshift(uint32_t *s)
{
    uint32_t x = *s;

    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

/* decode() feeds p in pieces of at most maxpiece bytes (0: all at once),
 * each copied to a buffer of exactly its size. */
static void decode(struct decoded *d, const char *p, size_t n, uint32_t seed,
                   size_t maxpiece)
{
    size_t off = 0;

    memset(d, 0, sizeof(*d));
    d->out = malloc(n ? n : 1);
    CHECK(d->out != NULL);
    while (off < n && !d->error && !h1_chunked_done(&d->c)) {
        size_t len = maxpiece ? 1 + xorshift(&seed) % maxpiece : n - off;
        size_t used = 0;
        char *piece;

        if (len > n - off)
            len = n - off;
        piece = dup_bytes(p + off, len);
        while (used < len && !h1_chunked_done(&d->c)) {
            struct h1_slice s;
            const char *why = NULL;
            ssize_t r =
                h1_chunked_decode(&d->c, piece + used, len - used, &s, &why);

            if (r < 0) {
                CHECK(why != NULL);
                d->error = 1;
                break;
            }
            CHECK((size_t)r <= len - used);
            CHECK(s.n == 0 || (s.p >= piece + used &&
                               s.p + s.n <= piece + used + (size_t)r));
            CHECK(d->n + s.n <= n);
            if (s.n > 0)
                memcpy(d->out + d->n, s.p, s.n);
            d->n += s.n;
            used += (size_t)r;
            if (r == 0)
                break;
        }
        free(piece);
        off += used;
    }
    d->consumed = off;
}

static void decoded_free(struct decoded *d)
{
    free(d->out);
    h1_chunked_dispose(&d->c);
}

/* Encode a decoded body again with the writer and decode that. */
static void check_reencode(const struct decoded *d)
{
    struct h1_header trailers[MAX_HDRS];
    struct http_field tfields[MAX_HDRS];
    struct h1_slice t;
    struct decoded again;
    struct buf b;
    const char *why;
    size_t nt;
    int status;

    CHECK(h1_chunked_trailers(&d->c, &t) == 0);
    if (h1_parse_fields(t.p, t.n, NULL, trailers, MAX_HDRS, &nt, &why,
                        &status) < 0)
        return;
    /* The writer puts exactly one SP after each colon, so a field may grow
     * by a byte; past the trailer bound the second decode would refuse
     * what the first accepted. */
    if (t.n + nt > H1_TRAILERS_MAX)
        return;
    buf_init(&b, d->n + t.n + 4096);
    CHECK(h1_write_chunk(&b, d->out, d->n) == 0);
    to_fields(trailers, nt, tfields);
    CHECK(h1_write_last_chunk(&b, tfields, nt) == 0);
    decode(&again, buf_ptr(&b), buf_len(&b), 1, 0);
    CHECK(!again.error && h1_chunked_done(&again.c));
    CHECK(again.consumed == buf_len(&b));
    CHECK(again.n == d->n && (d->n == 0 || !memcmp(again.out, d->out, d->n)));
    decoded_free(&again);
    buf_dispose(&b);
}

static void fuzz_chunked(const char *p, size_t n, uint8_t seed)
{
    struct decoded whole, pieces;
    size_t maxpiece = 1 + (seed & 0x3f);

    decode(&whole, p, n, 0, 0);
    decode(&pieces, p, n, 0x9e3779b9u ^ seed, maxpiece);
    CHECK(whole.error == pieces.error);
    CHECK(h1_chunked_done(&whole.c) == h1_chunked_done(&pieces.c));
    CHECK(whole.n == pieces.n &&
          (whole.n == 0 || memcmp(whole.out, pieces.out, whole.n) == 0));
    if (!whole.error)
        CHECK(whole.consumed == pieces.consumed);
    if (h1_chunked_done(&whole.c)) {
        struct h1_slice a, b;

        CHECK(h1_chunked_trailers(&whole.c, &a) == 0);
        CHECK(h1_chunked_trailers(&pieces.c, &b) == 0);
        CHECK(slice_same(a, b));
        CHECK(a.n <= H1_TRAILERS_MAX);
        check_reencode(&whole);
    }
    decoded_free(&whole);
    decoded_free(&pieces);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;

    fuzz_request(p, size);
    fuzz_response(p, size);
    if (size > 0)
        fuzz_chunked(p + 1, size - 1, data[0]);
    return 0;
}
