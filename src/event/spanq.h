#ifndef STRAIT_EVENT_SPANQ_H
#define STRAIT_EVENT_SPANQ_H

#include <stddef.h>
#include <stdint.h>

#include "event/timer-t.h"

struct buf;
struct event_base;

/*
 * Finished trace spans on their way from workers to the exporter on the
 * control thread, as encoded JSON objects. Like the access log's sink
 * (logsink.h), each worker gathers the spans of one loop turn in a buffer
 * of its own and hands the whole buffer over under the queue's lock (once
 * per turn, not per span); the exporter takes batches off the queue.
 *
 * The queue holds at most max_spans spans: a hand-over that would go past
 * it is dropped and its spans counted, so a slow or absent collector
 * costs spans, never a worker's time.
 */
struct spanq;

struct spanq_stats {
    uint64_t queued;  /* spans handed over */
    uint64_t dropped; /* spans dropped: the queue was full */
    uint64_t pending; /* spans waiting now */
};

struct spanq *spanq_new(size_t max_spans);
/* Every spanq_buf must have been disposed. NULL: no-op. */
void spanq_free(struct spanq *q);

/* spanq_take() moves whole hand-overs off the queue into out, as JSON
 * array elements separated by ',', while they keep the count at most
 * max_spans (the first is taken whatever its size). Returns the number
 * of spans taken; 0 when the queue is empty. Any thread. */
size_t spanq_take(struct spanq *q, size_t max_spans, struct buf *out);

/* spanq_drop() counts n spans dropped after they were taken (a batch the
 * exporter gave up on). */
void spanq_drop(struct spanq *q, uint64_t n);

void spanq_stats(struct spanq *q, struct spanq_stats *out);

/* A worker's buffer, touched only from its loop's thread. */
struct spanq_chunk;

struct spanq_buf {
    struct spanq *q;
    struct spanq_chunk *cur;
    struct timer flush;
};

void spanq_buf_init(struct spanq_buf *b, struct spanq *q,
                    struct event_base *base);
/* Hands over what is buffered and frees the buffer. */
void spanq_buf_dispose(struct spanq_buf *b);

/* spanq_buf_span() queues one span, n bytes of a JSON object (at most
 * SPANQ_CHUNK); longer ones are dropped and counted. */
void spanq_buf_span(struct spanq_buf *b, const char *json, size_t n);

#define SPANQ_CHUNK 32768

#endif
