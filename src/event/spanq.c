/*
 * Trace spans from workers to the exporter. See spanq.h.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "event/spanq.h"
#include "event/timer.h"

struct spanq_chunk {
    struct spanq_chunk *next;
    size_t n;     /* bytes */
    size_t spans; /* spans, separated by ',' */
    char data[SPANQ_CHUNK];
};

struct spanq {
    size_t max_spans;
    pthread_mutex_t lock;
    /* Under lock. */
    struct spanq_chunk *head, *tail;
    size_t pending;
    uint64_t queued, dropped;
};

struct spanq *spanq_new(size_t max_spans)
{
    struct spanq *q = calloc(1, sizeof(*q));

    if (q == NULL)
        return NULL;
    q->max_spans = max_spans;
    pthread_mutex_init(&q->lock, NULL);
    return q;
}

void spanq_free(struct spanq *q)
{
    if (q == NULL)
        return;
    while (q->head != NULL) {
        struct spanq_chunk *c = q->head;
        q->head = c->next;
        free(c);
    }
    pthread_mutex_destroy(&q->lock);
    free(q);
}

size_t spanq_take(struct spanq *q, size_t max_spans, struct buf *out)
{
    size_t taken = 0;

    pthread_mutex_lock(&q->lock);
    while (q->head != NULL &&
           (taken == 0 || taken + q->head->spans <= max_spans)) {
        struct spanq_chunk *c = q->head;

        if ((taken > 0 && buf_append(out, ",", 1) < 0) ||
            buf_append(out, c->data, c->n) < 0)
            break; /* out is full: the rest waits */
        q->head = c->next;
        if (q->head == NULL)
            q->tail = NULL;
        taken += c->spans;
        q->pending -= c->spans;
        free(c);
    }
    pthread_mutex_unlock(&q->lock);
    return taken;
}

void spanq_drop(struct spanq *q, uint64_t n)
{
    pthread_mutex_lock(&q->lock);
    q->dropped += n;
    pthread_mutex_unlock(&q->lock);
}

void spanq_stats(struct spanq *q, struct spanq_stats *out)
{
    pthread_mutex_lock(&q->lock);
    out->queued = q->queued;
    out->dropped = q->dropped;
    out->pending = q->pending;
    pthread_mutex_unlock(&q->lock);
}

static void hand_over(struct spanq_buf *b)
{
    struct spanq_chunk *c = b->cur;
    struct spanq *q = b->q;

    b->cur = NULL;
    if (c == NULL)
        return;
    c->next = NULL;
    pthread_mutex_lock(&q->lock);
    if (c->spans > 0 && q->pending + c->spans <= q->max_spans) {
        if (q->tail != NULL)
            q->tail->next = c;
        else
            q->head = c;
        q->tail = c;
        q->pending += c->spans;
        q->queued += c->spans;
        c = NULL;
    } else if (c->spans > 0) {
        q->dropped += c->spans;
    }
    pthread_mutex_unlock(&q->lock);
    free(c);
}

static void on_flush(void *arg)
{
    hand_over(arg);
}

void spanq_buf_init(struct spanq_buf *b, struct spanq *q,
                    struct event_base *base)
{
    b->q = q;
    b->cur = NULL;
    timer_init(&b->flush, base, on_flush, b);
}

void spanq_buf_dispose(struct spanq_buf *b)
{
    timer_dispose(&b->flush);
    if (b->q != NULL)
        hand_over(b);
    b->q = NULL;
}

void spanq_buf_span(struct spanq_buf *b, const char *json, size_t n)
{
    size_t need = n + 1; /* the ',' before it */

    if (n == 0 || need > SPANQ_CHUNK) {
        spanq_drop(b->q, 1);
        return;
    }
    if (b->cur != NULL && b->cur->n + need > SPANQ_CHUNK)
        hand_over(b);
    if (b->cur == NULL) {
        b->cur = malloc(sizeof(*b->cur));
        if (b->cur == NULL) {
            spanq_drop(b->q, 1);
            return;
        }
        b->cur->n = 0;
        b->cur->spans = 0;
    }
    if (b->cur->spans > 0)
        b->cur->data[b->cur->n++] = ',';
    memcpy(b->cur->data + b->cur->n, json, n);
    b->cur->n += n;
    b->cur->spans++;
    if (!timer_armed(&b->flush))
        timer_defer(&b->flush);
}
