#ifndef STRAIT_EVENT_MQ_H
#define STRAIT_EVENT_MQ_H

struct event_base;

/*
 * A message queue into one thread's event loop: any thread posts a
 * function and its argument, the owning thread runs them in order on its
 * loop. An eventfd wakes the loop. This is the only way threads talk
 * (DESIGN.md): the lock is taken per message, never on the request path.
 */
typedef void (*mq_fn)(void *arg);

struct mq;

/* mq_new() creates a queue served by base's thread; NULL on failure. */
struct mq *mq_new(struct event_base *base);

/* mq_post() queues fn(arg) from any thread. Returns 0, or -1 when memory
 * is short (nothing is queued then). */
int mq_post(struct mq *q, mq_fn fn, void *arg);

/* mq_drain() runs every queued message now, on the owner's thread. */
void mq_drain(struct mq *q);

/* mq_free() frees the queue; messages still queued are dropped without
 * running. Call it on the owner's thread once no thread can post. */
void mq_free(struct mq *q);

#endif
