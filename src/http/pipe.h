#ifndef STRAIT_HTTP_PIPE_H
#define STRAIT_HTTP_PIPE_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "http/http.h"

struct bufpool;

/*
 * A body in flight between two codecs on one worker: a bounded buffer, an
 * end flag and trailers. The producer writes what fits and stops reading
 * its peer when the pipe is full; the consumer takes what it can send.
 * Neither side calls into the other directly: a write schedules the
 * reader's wake callback and a consume schedules the writer's, and the
 * callbacks only arm a deferred event, so no recursion builds up.
 *
 * The buffer comes from the worker's pool when bytes arrive and goes back
 * when it runs empty, so an idle stream holds no body memory.
 */
struct hpipe {
    struct buf buf;
    struct bufpool *pool;
    unsigned eof : 1;     /* the producer finished (trailers, if any, set) */
    unsigned aborted : 1; /* the producer failed; the consumer resets */
    unsigned was_full : 1;
    unsigned wake_on_consume : 1; /* wake the writer on every consume
                                    (HTTP/2 returns flow-control credit) */
    /* The pool refused a buffer (the memory actions' last stage) and a
     * short write got one of HPIPE_SMALL bytes at most instead: room is
     * bounded by it until the pipe runs empty. */
    unsigned small : 1;
    struct http_fields trailers;
    /* Replay (retries, mirroring): consumed bytes are also kept here, up
     * to kept.max, so a new reader can start again from the first byte.
     * replay is the offset of the next kept byte a rewound reader gets;
     * once it reaches the end, reads come from buf again. */
    struct buf kept;
    size_t replay;
    unsigned keeping : 1;   /* consumed bytes are kept */
    unsigned kept_over : 1; /* the body outgrew kept.max: no replay */
    /* Told (directly, from hpipe_finish or hpipe_abort) that the producer
     * is done; for a third party such as a mirror waiting for a whole
     * body. It must only arm a deferred event. */
    void (*on_end)(void *arg);
    void *end_arg;
    void (*wake_reader)(void *arg);
    void *reader;
    void (*wake_writer)(void *arg);
    void *writer;
    /* When bytes last went in or out (clock_ms): the stream idle timeout
     * reads it, so no timer is moved per byte. */
    uint64_t active_ms;
    /* gRPC messages written (hpipe_count_grpc): each is a 5-byte prefix
     * (flag, 32-bit big-endian length) and its bytes. */
    uint64_t grpc_msgs;
    uint64_t grpc_left;   /* bytes of the current message still to come */
    uint32_t grpc_len;    /* length prefix read so far */
    uint8_t grpc_hdr;     /* prefix bytes seen (0-4) */
    unsigned grpc_on : 1; /* counting */
};

/* hpipe_count_grpc() makes p count the gRPC messages written into it
 * (grpc_msgs), for Istio's message counters; costs nothing otherwise. */
static inline void hpipe_count_grpc(struct hpipe *p)
{
    p->grpc_on = 1;
}

void hpipe_init(struct hpipe *p, struct bufpool *pool, size_t cap);
void hpipe_dispose(struct hpipe *p);

/* hpipe_room() is how many bytes hpipe_write() would take now. */
size_t hpipe_room(const struct hpipe *p);

/* hpipe_write() takes up to n bytes; returns how many it took (fewer than n
 * when full: wait for wake_writer). */
size_t hpipe_write(struct hpipe *p, const void *data, size_t n);

/* hpipe_finish() marks the end of the body. */
void hpipe_finish(struct hpipe *p);

/* hpipe_abort() marks the body as failed; the consumer ends its stream
 * with an error. */
void hpipe_abort(struct hpipe *p);

/* hpipe_peek() returns the readable bytes and their count. */
const char *hpipe_peek(const struct hpipe *p, size_t *n);

/* hpipe_consume() drops n readable bytes. */
void hpipe_consume(struct hpipe *p, size_t n);

/* hpipe_reset() empties the pipe for a new attempt of its producer (a
 * retried upstream exchange whose answer was not passed on). */
void hpipe_reset(struct hpipe *p);

/*
 * hpipe_keep() makes the pipe keep every byte its consumer takes, up to
 * limit bytes in all, so that the body can be read again from its start
 * (hpipe_rewind). Call it before the first consume. A body that grows past
 * limit is still passed on as usual, but the kept bytes are freed and the
 * pipe can no longer rewind (hpipe_replayable() turns 0). The kept memory
 * is allocated as bytes are consumed, never more than limit. On a pipe
 * that keeps already (and can still replay), it keeps what it has and only
 * raises the limit to limit, if that is more.
 */
void hpipe_keep(struct hpipe *p, size_t limit);

/* hpipe_keep_stop() stops keeping and frees the kept bytes, unless a
 * rewound reader is still reading them (then nothing changes). */
void hpipe_keep_stop(struct hpipe *p);

/* hpipe_replayable() is true while everything consumed so far is kept. */
static inline int hpipe_replayable(const struct hpipe *p)
{
    return p->keeping && !p->kept_over;
}

/* hpipe_rewind() makes the next reader start at the body's first byte:
 * peek and consume serve the kept bytes, then the live ones. Returns 0, or
 * -1 when the pipe cannot replay (not keeping, or the body outgrew the
 * limit). The consumer's wake callbacks are not touched. */
int hpipe_rewind(struct hpipe *p);

/* hpipe_kept() returns the bytes consumed (and kept) so far, in *n; only
 * meaningful while hpipe_replayable(). */
const char *hpipe_kept(const struct hpipe *p, size_t *n);

/* hpipe_live() returns the bytes written and not consumed yet, in *n (a
 * whole body, when eof, is hpipe_kept() followed by these). */
const char *hpipe_live(const struct hpipe *p, size_t *n);

/* hpipe_would_refuse() is true when the pipe holds no buffer and its pool
 * refuses new ones now (the memory actions' last stage): a producer that
 * has not read anything for it yet should fail its stream before reading
 * (and allocating) more. */
int hpipe_would_refuse(const struct hpipe *p);

/* hpipe_drained() is true when the producer finished and nothing is left
 * (kept bytes a rewound reader has not read again included). */
static inline int hpipe_drained(const struct hpipe *p)
{
    return p->eof && buf_len(&p->buf) == 0 && p->replay >= buf_len(&p->kept);
}

#endif
