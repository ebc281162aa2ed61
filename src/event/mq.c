#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "event/mq.h"

struct mq_msg {
    struct mq_msg *next;
    mq_fn fn;
    void *arg;
};

struct mq {
    pthread_mutex_t lock;
    struct mq_msg *head;
    struct mq_msg **tail;
    int efd;
    struct event *ev;
};

static void mq_on_wake(evutil_socket_t fd, short what, void *arg)
{
    uint64_t n;

    (void)what;
    while (read(fd, &n, sizeof(n)) < 0 && errno == EINTR)
        ;
    mq_drain(arg);
}

struct mq *mq_new(struct event_base *base)
{
    struct mq *q = calloc(1, sizeof(*q));

    if (q == NULL)
        return NULL;
    q->efd = -1;
    pthread_mutex_init(&q->lock, NULL);
    q->tail = &q->head;
    q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->efd < 0)
        goto fail;
    q->ev = event_new(base, q->efd, EV_READ | EV_PERSIST, mq_on_wake, q);
    if (q->ev == NULL || event_add(q->ev, NULL) < 0)
        goto fail;
    return q;
fail:
    mq_free(q);
    return NULL;
}

int mq_post(struct mq *q, mq_fn fn, void *arg)
{
    struct mq_msg *m = malloc(sizeof(*m));
    uint64_t one = 1;

    if (m == NULL)
        return -1;
    m->next = NULL;
    m->fn = fn;
    m->arg = arg;
    pthread_mutex_lock(&q->lock);
    *q->tail = m;
    q->tail = &m->next;
    pthread_mutex_unlock(&q->lock);
    /* The counter only saturates after 2^64-2 unread posts. */
    while (write(q->efd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
    return 0;
}

void mq_drain(struct mq *q)
{
    struct mq_msg *m;

    /* Take the whole list under the lock and run it outside, so a message
     * may post to this same queue without deadlock. */
    pthread_mutex_lock(&q->lock);
    m = q->head;
    q->head = NULL;
    q->tail = &q->head;
    pthread_mutex_unlock(&q->lock);
    while (m != NULL) {
        struct mq_msg *next = m->next;
        m->fn(m->arg);
        free(m);
        m = next;
    }
}

void mq_free(struct mq *q)
{
    struct mq_msg *m;

    if (q == NULL)
        return;
    if (q->ev != NULL)
        event_free(q->ev);
    if (q->efd >= 0)
        close(q->efd);
    m = q->head;
    while (m != NULL) {
        struct mq_msg *next = m->next;
        free(m);
        m = next;
    }
    pthread_mutex_destroy(&q->lock);
    free(q);
}
