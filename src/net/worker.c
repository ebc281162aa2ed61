#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "event/mq.h"
#include "event/reap.h"
#include "net/plistener.h"
#include "net/worker.h"

struct worker_msg {
    struct worker *w;
    enum worker_event ev;
    struct worker_hooks hooks;
};

static void deliver(void *arg)
{
    struct worker_msg *m = arg;

    m->hooks.event(m->hooks.arg, m->w->id, m->ev);
    free(m);
}

static void notify(struct worker *w, enum worker_event ev)
{
    struct worker_msg *m = malloc(sizeof(*m));

    if (m == NULL) {
        log_error("worker %d: out of memory notifying the main thread", w->id);
        return;
    }
    m->w = w;
    m->ev = ev;
    m->hooks = w->hooks;
    if (mq_post(w->hooks.main, deliver, m) < 0) {
        free(m);
        log_error("worker %d: cannot post to the main thread", w->id);
    }
}

static void check_idle(struct worker *w)
{
    if (w->draining && !w->idle_sent && LIST_EMPTY(&w->proxies) &&
        LIST_EMPTY(&w->retired)) {
        w->idle_sent = 1;
        notify(w, WORKER_IDLE);
    }
}

static void reap(struct reap_node *n)
{
    struct worker *w = LIST_ELEM(n, struct worker, reap);

    while (!LIST_EMPTY(&w->dead)) {
        struct plistener *l = LIST_ELEM(w->dead.next, struct plistener, link);
        l->ops->free(l);
    }
    check_idle(w);
}

/* A retired proxy's last session ended: free it on the next turn, not
 * inside the proxy's own callback. */
static void proxy_idle(struct plistener *p, void *arg)
{
    struct worker *w = arg;

    list_del(&p->link);
    list_append(&w->dead, &p->link);
    reaper_defer(&w->reaper, &w->reap, reap);
}

static void retire(struct worker *w, struct plistener *p)
{
    list_del(&p->link);
    list_append(&w->retired, &p->link);
    /* The proxy reports idleness through proxy_idle once empty. */
    p->ops->stop_accepting(p);
}

/* A new proxy on the socket of the one it replaces (same kind, running,
 * about to be retired) takes over what it can of it. */
static void inherit(struct worker *w, struct plistener *l, const void *replaces)
{
    for (struct list *it = w->proxies.next; it != &w->proxies; it = it->next) {
        struct plistener *p = LIST_ELEM(it, struct plistener, link);
        if (p->conf == replaces && p->fd == l->fd &&
            p->ops->kind == l->ops->kind) {
            l->ops->inherit(l, p);
            return;
        }
    }
}

struct apply_msg {
    struct worker *w;
    struct worker_set *set;
};

static void do_apply(void *arg)
{
    struct apply_msg *m = arg;
    struct worker *w = m->w;
    struct worker_set *set = m->set;
    struct list keep;

    LIST_INIT(&keep);
    free(m);
    if (w->draining) {
        /* A reload that raced with a drain changes nothing. */
        free(set);
        notify(w, WORKER_APPLIED);
        return;
    }
    /* A listener whose compiled configuration and socket are unchanged
     * keeps running with its sessions; everything else is retired and a
     * new proxy takes its place. */
    for (size_t i = 0; i < set->n; i++) {
        struct plistener *found = NULL;

        for (struct list *it = w->proxies.next; it != &w->proxies;
             it = it->next) {
            struct plistener *p = LIST_ELEM(it, struct plistener, link);
            if (p->conf == set->v[i].conf && p->fd == set->v[i].fd) {
                found = p;
                break;
            }
        }
        if (found == NULL) {
            found =
                set->v[i].ops->start(w->base, &w->reaper, w->id, set->v[i].fd,
                                     set->v[i].conf, proxy_idle, w);
            if (found == NULL) {
                log_error("worker %d: cannot start listener %s", w->id,
                          set->v[i].name);
                continue;
            }
            found->stop = &w->stop;
            if (found->ops->inherit != NULL && set->v[i].replaces != NULL)
                inherit(w, found, set->v[i].replaces);
        } else {
            list_del(&found->link);
        }
        list_append(&keep, &found->link);
    }
    while (!LIST_EMPTY(&w->proxies))
        retire(w, LIST_ELEM(w->proxies.next, struct plistener, link));
    /* Move the kept list into place. */
    if (!LIST_EMPTY(&keep)) {
        w->proxies.next = keep.next;
        w->proxies.prev = keep.prev;
        keep.next->prev = &w->proxies;
        keep.prev->next = &w->proxies;
    }
    free(set);
    notify(w, WORKER_APPLIED);
}

static void do_drain(void *arg)
{
    struct worker *w = arg;

    if (w->draining)
        return;
    w->draining = 1;
    while (!LIST_EMPTY(&w->proxies))
        retire(w, LIST_ELEM(w->proxies.next, struct plistener, link));
    notify(w, WORKER_STOPPED_ACCEPT);
    check_idle(w);
}

static void do_ping(void *arg)
{
    notify(arg, WORKER_ALIVE);
}

static void do_drain_connections(void *arg)
{
    struct worker *w = arg;

    if (w->draining)
        return;
    for (struct list *it = w->proxies.next; it != &w->proxies; it = it->next) {
        struct plistener *p = LIST_ELEM(it, struct plistener, link);
        if (p->ops->drain_connections != NULL)
            p->ops->drain_connections(p);
    }
}

static void free_all(struct list *l)
{
    while (!LIST_EMPTY(l)) {
        struct plistener *p = LIST_ELEM(l->next, struct plistener, link);
        p->ops->free(p);
    }
}

static void do_stop(void *arg)
{
    struct worker *w = arg;

    free_all(&w->proxies);
    free_all(&w->retired);
    free_all(&w->dead);
    event_base_loopbreak(w->base);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;

    event_base_loop(w->base, EVLOOP_NO_EXIT_ON_EMPTY);
    /* Messages that raced with the stop (none are expected) run now so
     * nothing they own leaks. */
    mq_drain(w->inbox);
    return NULL;
}

int worker_init(struct worker *w, int id, const struct worker_hooks *hooks)
{
    memset(w, 0, sizeof(*w));
    w->id = id;
    w->hooks = *hooks;
    LIST_INIT(&w->proxies);
    LIST_INIT(&w->retired);
    LIST_INIT(&w->dead);
    w->base = event_base_new();
    if (w->base == NULL)
        return -1;
    reaper_init(&w->reaper, w->base);
    w->inbox = mq_new(w->base);
    if (w->inbox == NULL)
        return -1;
    return 0;
}

int worker_start(struct worker *w)
{
    int rc = pthread_create(&w->thread, NULL, worker_main, w);

    if (rc != 0) {
        errno = rc;
        return -1;
    }
    w->running = 1;
    return 0;
}

int worker_apply(struct worker *w, struct worker_set *set)
{
    struct apply_msg *m = malloc(sizeof(*m));

    if (m == NULL)
        return -1;
    m->w = w;
    m->set = set;
    if (mq_post(w->inbox, do_apply, m) < 0) {
        free(m);
        return -1;
    }
    return 0;
}

int worker_drain(struct worker *w)
{
    return mq_post(w->inbox, do_drain, w);
}

int worker_ping(struct worker *w)
{
    return mq_post(w->inbox, do_ping, w);
}

int worker_drain_connections(struct worker *w)
{
    return mq_post(w->inbox, do_drain_connections, w);
}

void worker_abort(struct worker *w)
{
    __atomic_store_n(&w->stop, 1, __ATOMIC_RELAXED);
}

void worker_stop(struct worker *w)
{
    if (!w->running)
        return;
    /* Retry on memory shortage: the loop is not thread-safe (libevent's
     * locking is off, no base is shared), so the queue is the only way. */
    while (mq_post(w->inbox, do_stop, w) < 0)
        sched_yield();
    pthread_join(w->thread, NULL);
    w->running = 0;
}

void worker_dispose(struct worker *w)
{
    if (w->base == NULL) /* never initialised */
        return;
    free_all(&w->proxies);
    free_all(&w->retired);
    free_all(&w->dead);
    /* What the listeners left queued (their own nodes are cancelled as
     * they are freed) goes before the loop does. */
    reaper_cancel(&w->reap);
    reaper_dispose(&w->reaper);
    mq_free(w->inbox);
    if (w->base != NULL)
        event_base_free(w->base);
    memset(w, 0, sizeof(*w));
}
