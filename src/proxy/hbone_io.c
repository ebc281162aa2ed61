/*
 * HBONE's shared output path (see hbone_io.h).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "net/conn.h"
#include "proxy/hbone_io.h"

int hbone_out_flush(struct hbone_out *o, nghttp2_session *ng, struct conn *c)
{
    for (;;) {
        const uint8_t *data;
        ssize_t n, w;

        if (o->len > o->off) {
            w = conn_write(c, o->buf + o->off, o->len - o->off);
            if (w == CONN_AGAIN)
                return 0;
            if (w < 0)
                return -1;
            o->off += (size_t)w;
            if (o->off < o->len)
                continue;
            o->off = o->len = 0;
        }
        n = nghttp2_session_mem_send(ng, &data);
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        w = conn_write(c, data, (size_t)n);
        if (w == CONN_AGAIN)
            w = 0;
        if (w < 0)
            return -1;
        if (w < n) {
            uint8_t *np = realloc(o->buf, (size_t)(n - w));
            if (np == NULL)
                return -1;
            o->buf = np;
            memcpy(np, data + w, (size_t)(n - w));
            o->len = (size_t)(n - w);
            o->off = 0;
        }
    }
}

void hbone_out_dispose(struct hbone_out *o)
{
    free(o->buf);
    memset(o, 0, sizeof(*o));
}

ssize_t hbone_data_len(nghttp2_session *ng, uint8_t type, int32_t id,
                       int32_t conn_window, int32_t stream_window,
                       uint32_t remote_max, void *arg)
{
    ssize_t n = (ssize_t)remote_max;

    (void)ng;
    (void)type;
    (void)id;
    (void)arg;
    if (n > HBONE_FRAME_MAX)
        n = HBONE_FRAME_MAX;
    if (conn_window < n)
        n = conn_window;
    if (stream_window < n)
        n = stream_window;
    return n > 0 ? n : 1;
}
