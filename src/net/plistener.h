#ifndef STRAIT_NET_PLISTENER_H
#define STRAIT_NET_PLISTENER_H

#include "core/list.h"

struct event_base;
struct reaper;

/*
 * What a worker runs on one listening socket: the TCP relay or the HTTP
 * proxy. Workers manage them through this table, so adding a kind of
 * listener never touches the worker.
 */
struct plistener;

typedef void (*plistener_idle_fn)(struct plistener *l, void *arg);

/* What a listener does: each ops table names one, so code that must know
 * (the admin's route dump, certificate checks) asks the table and never
 * compares table pointers. */
enum plistener_kind {
    PLISTENER_HTTP, /* HTTP proxy */
    PLISTENER_L4,   /* Gateway TCP/TLS servers, maybe with HTTPS ones */
};

struct plistener_ops {
    enum plistener_kind kind;
    const char *name; /* the kind for logs: "tcp", "http", "l4" */
    /* A reference to a conf of this kind is taken and dropped through
     * these, so holders of a conf need not know its type. */
    void *(*conf_ref)(void *conf);
    void (*conf_unref)(void *conf);
    /* Start accepting on fd (not owned) for conf (a reference is taken);
     * on_idle runs once stopped and empty. reaper: the worker's deferred
     * free list, which outlives the listener. NULL on failure. */
    struct plistener *(*start)(struct event_base *base, struct reaper *reaper,
                               int worker, int fd, void *conf,
                               plistener_idle_fn on_idle, void *arg);
    /* Stop accepting; finish what is in flight, close idle keep-alives. */
    void (*stop_accepting)(struct plistener *l);
    /* Optional (NULL: nothing to tell): the process drains but l keeps
     * accepting for a while (drainWindow); every connection, open or new,
     * is told to go after its current request (HTTP/1 Connection: close,
     * HTTP/2 GOAWAY). stop_accepting() follows later. */
    void (*drain_connections)(struct plistener *l);
    /* Close everything now and free. */
    void (*free)(struct plistener *l);
    /* Optional (NULL: nothing to take): l was just started on the socket
     * of prev, of the same kind, which it replaces; it takes over what
     * of prev does not depend on what changed, before prev stops
     * accepting. */
    void (*inherit)(struct plistener *l, struct plistener *prev);
};

struct plistener {
    const struct plistener_ops *ops;
    void *conf; /* identity: the compiled configuration served */
    int fd;
    struct list link; /* the worker's lists */
    /* The worker's: set (atomically, by another thread) once the process
     * is past its drain deadline, so work that could run long (a Lua
     * hook) gives up. Set by the worker after start. */
    const int *stop;
};

#endif
