#ifndef STRAIT_NET_WORKER_H
#define STRAIT_NET_WORKER_H

#include <pthread.h>
#include <stddef.h>

#include "core/list.h"
#include "event/reap-t.h"

struct event_base;
struct event;
struct mq;
struct plistener_ops;

/*
 * A worker thread: its own event loop, its own listening sockets, its own
 * sessions. Everything here is touched only by the worker's thread, except
 * the fields set before the thread starts. The main thread talks to it
 * through inbox; it answers through the hooks, which post to the main
 * thread's queue.
 */
struct worker_slot {
    const struct plistener_ops *ops;
    void *conf;
    const char *name;
    int fd;
    /* A listener of another conf this one replaces (same name, changed):
     * a new proxy of the same kind on the same socket inherits what it
     * can of the running one. NULL: added or kept. */
    const void *replaces;
};

/* The listeners a worker should serve; allocated by the main thread, freed
 * by the worker once applied. The main thread keeps every conf alive until
 * the worker acknowledges. */
struct worker_set {
    size_t n;
    struct worker_slot v[];
};

enum worker_event {
    WORKER_APPLIED,        /* a worker_set is in effect */
    WORKER_STOPPED_ACCEPT, /* drain: the worker accepts nothing more */
    WORKER_IDLE,           /* drain: the worker's last session ended */
    WORKER_ALIVE,          /* answer to worker_ping(): the loop turns */
};

struct worker_hooks {
    struct mq *main;
    /* Runs on the main thread. */
    void (*event)(void *arg, int worker, enum worker_event ev);
    void *arg;
};

struct worker {
    int id;
    pthread_t thread;
    int running;
    struct event_base *base;
    struct mq *inbox;
    struct worker_hooks hooks;
    struct list proxies; /* accepting */
    struct list retired; /* no longer accepting, sessions still open */
    struct list dead;    /* idle retired proxies, freed on the next turn */
    /* The worker's one deferred-free list: the listeners it starts, and
     * what they own, free through it. */
    struct reaper reaper;
    struct reap_node reap; /* frees dead */
    int draining;
    int idle_sent;
    int stop; /* worker_abort(): atomic; what listeners' stop points at */
};

/* worker_init() prepares worker id; 0 or -1. The thread is not started. */
int worker_init(struct worker *w, int id, const struct worker_hooks *hooks);

/* worker_start() starts the thread; 0 or -1 with errno. */
int worker_start(struct worker *w);

/* worker_apply() hands the worker a new set of listeners (ownership of set
 * passes to the worker). Any thread. */
int worker_apply(struct worker *w, struct worker_set *set);

/* worker_drain() tells the worker to stop accepting and report when its
 * sessions are gone. Any thread. */
int worker_drain(struct worker *w);

/* worker_ping() asks the worker to answer WORKER_ALIVE from its own loop,
 * which proves the loop still turns (the service manager's watchdog).
 * Any thread; 0, or -1 when memory is short. */
int worker_ping(struct worker *w);

/* worker_drain_connections() tells the worker's listeners that the
 * process drains while they keep accepting (drainWindow): connections are
 * told to go after their current request. Any thread. */
int worker_drain_connections(struct worker *w);

/* worker_stop() ends the worker's loop, closing whatever is still open, and
 * joins the thread. Main thread. */
void worker_stop(struct worker *w);

/* worker_abort() tells the worker, from any thread, that the process is
 * past its drain deadline: long work on it (a Lua hook, a timer
 * callback) gives up at its next check, so worker_stop() is not held up
 * by a policy. */
void worker_abort(struct worker *w);

/* worker_dispose() frees what worker_init() allocated; the thread must have
 * been stopped (or never started). */
void worker_dispose(struct worker *w);

#endif
