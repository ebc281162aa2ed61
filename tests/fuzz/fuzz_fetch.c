/*
 * libFuzzer target for fetch_parse() (src/control/fetch.c): the framing the
 * control thread's HTTP/1.1 client puts around the HTTP/1 parser (interim
 * answers, Content-Length, chunked and close-delimited bodies, the size
 * cap). The first byte picks the cap and seeds the sizes of the pieces;
 * the rest is the answer, given as the fetch gives it: every longer prefix
 * in turn, then the whole with the peer closed.
 *
 * Beyond "no crash, no leak, no read out of bounds" (every buffer is
 * exactly as long as its length), it traps when:
 *  - a complete answer's body is over the cap or outside the buffers;
 *  - an answer complete at a prefix differs (status, body) from the same
 *    answer read to the end, or an error at a prefix is not one then;
 *  - "closed" errors come while the peer is still open.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control/fetch.h"
#include "core/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            __builtin_trap();                                                  \
    } while (0)

struct result {
    int rc;
    int status;
    char *body; /* a copy */
    size_t n;
};

static void parse(const uint8_t *data, size_t len, int eof, size_t max_body,
                  struct result *r)
{
    char *p = malloc(len ? len : 1);
    struct h1_header hdrs[FETCH_MAX_HEADERS];
    struct fetch_answer a;
    struct buf body;
    const char *why = NULL;

    CHECK(p != NULL);
    if (len > 0)
        memcpy(p, data, len);
    buf_init(&body, max_body);
    memset(r, 0, sizeof(*r));
    r->rc = fetch_parse(p, len, eof, max_body, hdrs, &body, &a, &why);
    if (r->rc == FETCH_DONE) {
        CHECK(a.n <= max_body);
        CHECK(a.nheaders <= FETCH_MAX_HEADERS);
        CHECK(a.n == 0 || (a.body >= p && a.body + a.n <= p + len) ||
              (a.body >= buf_ptr(&body) &&
               a.body + a.n <= buf_ptr(&body) + buf_len(&body)));
        r->status = a.status;
        r->n = a.n;
        r->body = malloc(a.n ? a.n : 1);
        CHECK(r->body != NULL);
        if (a.n > 0)
            memcpy(r->body, a.body, a.n);
    }
    if (r->rc == FETCH_BAD_HTTP || r->rc == FETCH_BAD_CHUNKED)
        CHECK(why != NULL);
    if (!eof)
        CHECK(r->rc != FETCH_NO_ANSWER && r->rc != FETCH_CUT_SHORT);
    buf_dispose(&body);
    free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct result whole, part;
    uint32_t seed;
    size_t max_body, k = 0;

    if (size < 1)
        return 0;
    seed = data[0] * 2654435761u + 1;
    max_body = (size_t)(data[0] & 0x0f) * 16 + 16;
    data++;
    size--;
    parse(data, size, 1, max_body, &whole);
    while (k < size) {
        seed = seed * 1103515245u + 12345u;
        k += 1 + (seed >> 16) % 64;
        if (k > size)
            k = size;
        parse(data, k, 0, max_body, &part);
        if (part.rc == FETCH_DONE) {
            CHECK(whole.rc == FETCH_DONE);
            CHECK(whole.status == part.status && whole.n == part.n);
            CHECK(part.n == 0 || memcmp(whole.body, part.body, part.n) == 0);
        } else if (part.rc < 0) {
            CHECK(whole.rc < 0);
        }
        free(part.body);
        if (part.rc != FETCH_MORE)
            break;
    }
    free(whole.body);
    return 0;
}
