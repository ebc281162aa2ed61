#ifndef STRAIT_HTTP_PIPE_H
#define STRAIT_HTTP_PIPE_H

#include <stddef.h>

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
    struct http_fields trailers;
    void (*wake_reader)(void *arg);
    void *reader;
    void (*wake_writer)(void *arg);
    void *writer;
};

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

/* hpipe_drained() is true when the producer finished and nothing is left. */
static inline int hpipe_drained(const struct hpipe *p)
{
    return p->eof && buf_len(&p->buf) == 0;
}

#endif
