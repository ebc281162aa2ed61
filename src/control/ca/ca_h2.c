/*
 * The byte pump between a connection and an nghttp2 session (ca_h2.h).
 */
#include "config.h"

#include <string.h>

#include "control/ca/ca_h2.h"
#include "core/buf.h"
#include "net/conn.h"

#define READ_CHUNK 16384
/* One frame nghttp2 serializes is at most a HEADERS block with its
 * CONTINUATIONs (a token of up to 64 KiB) or a 16 KiB DATA frame: with
 * this much room any one fits, so a frame is never cut. */
#define MIN_ROOM (128 * 1024)

/* Writes what ng has to send; 1 when the socket took it all, 0 when it
 * would block, -1 on an error. */
static int flush(struct conn *c, nghttp2_session *ng, struct buf *out,
                 const char **why)
{
    for (;;) {
        while (buf_room(out) >= MIN_ROOM) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(ng, &data);
            if (n < 0) {
                *why = nghttp2_strerror((int)n);
                return -1;
            }
            if (n == 0)
                break;
            if (buf_append(out, data, (size_t)n) < 0) {
                *why = "HTTP/2 output over its bound";
                return -1;
            }
        }
        if (buf_len(out) == 0)
            return 1;
        {
            ssize_t w = conn_write(c, buf_ptr(out), buf_len(out));
            if (w == CONN_AGAIN)
                return 0;
            if (w <= 0) {
                *why = c->why ? c->why : "closed";
                return -1;
            }
            buf_consume(out, (size_t)w);
        }
    }
}

int ca_h2_pump(struct conn *c, nghttp2_session *ng, struct buf *out,
               const char **why)
{
    uint8_t chunk[READ_CHUNK];
    int flushed;

    for (int i = 0; i < 8 && nghttp2_session_want_read(ng); i++) {
        ssize_t n = conn_read(c, chunk, sizeof(chunk));
        ssize_t used;
        if (n == CONN_AGAIN)
            break;
        if (n <= 0) {
            *why = n == 0 ? "closed by the peer" : (c->why ? c->why : "error");
            return -1;
        }
        used = nghttp2_session_mem_recv(ng, chunk, (size_t)n);
        if (used < 0) {
            *why = nghttp2_strerror((int)used);
            return -1;
        }
    }
    flushed = flush(c, ng, out, why);
    if (flushed < 0)
        return -1;
    if (!nghttp2_session_want_read(ng) && !nghttp2_session_want_write(ng) &&
        buf_len(out) == 0)
        return 0;
    conn_want(c, 1, flushed == 0);
    return 1;
}

nghttp2_nv ca_h2_nv(const char *name, const char *value)
{
    nghttp2_nv nv = {(uint8_t *)(uintptr_t)name, (uint8_t *)(uintptr_t)value,
                     strlen(name), strlen(value), NGHTTP2_NV_FLAG_NONE};
    return nv;
}
