/*
 * What the HBONE server (hbone.c) and client (hbone_client.c) share on
 * the wire: writing an nghttp2 session's output to a connection that may
 * take only part of it, and ztunnel's DATA frame size.
 */
#ifndef STRAIT_PROXY_HBONE_IO_H
#define STRAIT_PROXY_HBONE_IO_H

#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct conn;

/* ztunnel's HTTP/2 frame size: fewer, larger DATA frames. */
#define HBONE_FRAME_MAX (1024 * 1024)

/* The bytes of a frame the socket did not take, written first next time;
 * zeroed to start, owned (hbone_out_dispose). */
struct hbone_out {
    uint8_t *buf;
    size_t len, off;
};

/* hbone_out_flush() writes o's bytes, then what ng has to send, to c until
 * c is full (the rest kept in o). 0, or -1 when the connection or the
 * session failed or memory ran out. */
int hbone_out_flush(struct hbone_out *o, nghttp2_session *ng, struct conn *c);
void hbone_out_dispose(struct hbone_out *o);

/* An nghttp2 data_source_read_length_callback: DATA frames as large as the
 * peer and the windows allow, up to HBONE_FRAME_MAX, rather than
 * nghttp2's 16 KiB. */
ssize_t hbone_data_len(nghttp2_session *ng, uint8_t type, int32_t id,
                       int32_t conn_window, int32_t stream_window,
                       uint32_t remote_max, void *arg);

#endif
