/*
 * libFuzzer target for etcd_http_feed() (src/control/etcd_http.c): the
 * incremental HTTP/1.1 reader of etcd's answers and of its watch stream
 * (head, Content-Length, chunked, close-delimited; newline-split stream
 * messages; the per-message cap). The first byte picks stream or
 * exchange and the cap, the second the size of the pieces the rest is
 * fed in.
 *
 * Beyond "no crash, no leak, no read out of bounds", it traps when:
 *  - a callback runs after the exchange ended, or done() twice;
 *  - a stream message is empty, holds a newline, or is over the cap;
 *  - an exchange's body is over the cap;
 *  - feeding everything with the peer closed ends without done().
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control/etcd_http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            __builtin_trap();                                                  \
    } while (0)

struct state {
    size_t cap;
    int ended;
    int done;
};

static int on_line(void *arg, const char *p, size_t n)
{
    struct state *s = arg;

    CHECK(!s->ended);
    CHECK(n > 0 && n <= s->cap);
    CHECK(memchr(p, '\n', n) == NULL);
    return 0;
}

/* A skipped message was at least the cap long and is named by at most
 * ETCD_HTTP_SKIP_HEAD of its first bytes, none a newline. */
static int on_skipped(void *arg, const char *head, size_t n, size_t total)
{
    struct state *s = arg;

    CHECK(!s->ended);
    CHECK(total >= s->cap);
    CHECK(n <= ETCD_HTTP_SKIP_HEAD && n <= total);
    CHECK(n == 0 || memchr(head, '\n', n) == NULL);
    return 0;
}

static void on_done(void *arg, int status, const char *body, size_t n,
                    const char *err)
{
    struct state *s = arg;

    (void)status;
    (void)err;
    CHECK(!s->ended);
    CHECK(n <= s->cap);
    CHECK(n == 0 || body != NULL);
    s->ended = 1;
    s->done++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct state s = {0, 0, 0};
    struct etcd_http_cb cb = {on_line, on_done, &s, NULL};
    struct etcd_http *h;
    size_t piece, off = 2;
    int stream;

    if (size < 2)
        return 0;
    stream = data[0] & 1;
    /* The second byte's top bit: skip what is too large (Kubernetes'
     * watches) instead of ending the stream (etcd's). */
    if (data[1] & 0x80)
        cb.skipped = on_skipped;
    s.cap = (size_t)(data[0] >> 1) * 8 + 1;
    piece = (size_t)data[1] % 32 + 1;
    h = etcd_http_new_parser(s.cap, stream, &cb);
    if (h == NULL)
        return 0;
    while (off < size && !s.ended) {
        size_t n = size - off < piece ? size - off : piece;
        etcd_http_feed(h, (const char *)data + off, n, 0);
        off += n;
    }
    if (!s.ended)
        CHECK(etcd_http_feed(h, "", 0, 1) == 1);
    CHECK(s.done == 1);
    etcd_http_free(h);
    return 0;
}
