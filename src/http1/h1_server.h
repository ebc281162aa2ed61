#ifndef STRAIT_HTTP1_H1_SERVER_H
#define STRAIT_HTTP1_H1_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/bufpool.h"
#include "http/conn_conf-t.h"
#include "http/stream.h"
#include "http1/parser.h"

struct bufpool;
struct conn;
struct timer;
struct event_base;

/* Per-worker scratch the parser fills; one array serves every connection
 * of the worker because parsing never yields to the loop. */
struct h1_scratch {
    struct h1_header *hdrs;
    size_t cap;
    /* Optional (NULL: not counted): I/O buffers the worker's HTTP/1
     * servers took and gave back, counters in the owner's stats shard
     * (written with relaxed atomic stores, read by another thread).
     * taken - released is what they hold now: an idle connection holds
     * none. */
    uint64_t *bufs_taken;
    uint64_t *bufs_released;
    /* Optional: the worker's free list of read buffers. A connection
     * takes one when bytes arrive and gives it back when it runs empty,
     * so idle connections hold none and the request path does not go
     * through malloc for them. */
    struct bufpool *io;
};

/* h1_in_reserve() is buf_reserve_any() on a connection's read buffer,
 * taking storage from the scratch's pool when it has none. */
static inline char *h1_in_reserve(struct h1_scratch *sc, struct buf *in,
                                  size_t *room)
{
    if (in->data == NULL && sc != NULL && sc->io != NULL &&
        bufpool_fits(sc->io, in->max) && bufpool_fill(sc->io, in) < 0) {
        *room = 0;
        return NULL;
    }
    return buf_reserve_any(in, room);
}

/* h1_in_release() gives an empty read buffer's storage back (to the pool
 * when it came from there); bytes still in it are dropped when drop. */
static inline void h1_in_release(struct h1_scratch *sc, struct buf *in,
                                 int drop)
{
    if (drop)
        buf_consume(in, buf_len(in));
    if (sc != NULL && sc->io != NULL && bufpool_fits(sc->io, in->max))
        bufpool_put(sc->io, in);
    else
        buf_release_if_empty(in);
}

struct h1_server_hooks {
    const struct hstream_handler *handler;
    void *ctx;
    /* A malformed request, answered with status and closed. */
    void (*protocol_error)(void *ctx, int status, const char *why);
    /* The connection closed; the owner frees the server on a later turn. */
    void (*closed)(void *owner);
    void *owner;
};

struct h1_server;

/*
 * h1_server_new() serves HTTP/1.x on c, which must be connected (and past
 * any TLS handshake); the server takes over c's callbacks but not its
 * memory. pool supplies body buffers; scratch is the worker's.
 * timer: storage for the server's timer (not pending), owned by the
 * caller and kept until h1_server_free(); the server assigns it. An
 * owner that timed the connection's start (a handshake) lends the same
 * timer, so an idle connection holds one timer, not two.
 */
struct h1_server *h1_server_new(struct event_base *base, struct conn *c,
                                const struct http_conn_conf *conf,
                                const struct h1_server_hooks *hooks,
                                struct bufpool *pool,
                                struct h1_scratch *scratch,
                                struct timer *timer);

/* h1_server_drain() answers the request in flight with Connection: close
 * and closes an idle connection at once. */
void h1_server_drain(struct h1_server *hs);

/* h1_server_free() ends everything now (the stream in flight is reset) and
 * closes c. */
void h1_server_free(struct h1_server *hs);

#endif
