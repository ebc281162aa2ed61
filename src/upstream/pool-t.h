#ifndef STRAIT_UPSTREAM_POOL_T_H
#define STRAIT_UPSTREAM_POOL_T_H

/*
 * The types of a worker's upstream connection pool for one cluster (idle
 * HTTP/1 connections, HTTP/2 connections, requests waiting for a
 * connection). The API is in pool.h.
 */

#include <stddef.h>

#include "core/list.h"
#include "event/reap-t.h"
#include "event/timer-t.h"
#include "upstream/balancer-t.h"

struct cluster;
struct conn;
struct event;
struct event_base;
struct h1_scratch;

/*
 * One worker's pool of idle upstream connections for a cluster, and its
 * balancer. Lives on the worker's thread only.
 */
struct upool {
    struct cluster *cl; /* one reference */
    struct event_base *base;
    int worker;
    struct balancer lb; /* picks endpoints of cl for this worker */
    struct list idle;   /* struct h1_client, most recently used last */
    size_t nidle;
    struct list dead;
    struct list h2conns; /* struct h2_client, busy or not */
    struct list h2dead;
    struct reaper *reaper; /* the worker's */
    struct reap_node reap; /* frees dead and h2dead */
    struct h1_scratch *scratch;
    size_t nconns;       /* this worker's connections, open or opening */
    struct list waiters; /* struct upool_waiter, first come first served */
    struct timer wake;   /* deferred: wakes the waiters */
    /* Endpoints of cl marked cl->hbone[ep]: their connections are made
     * by tunnel(tunnel_arg, cl, ep, c, on_io, io_arg) (a conn_opener's
     * open for that endpoint), set by the listener that owns the pool;
     * NULL: none can be made, and connections to them fail (never sent
     * in the clear). Other endpoints never look at it. */
    int (*tunnel)(void *arg, const struct cluster *cl, size_t ep,
                  struct conn *c, void (*on_io)(struct conn *, void *),
                  void *io_arg);
    void *tunnel_arg;
};

/*
 * A request waiting for a connection while its cluster is at
 * max_connections: woken (wake runs on a later loop turn, never inside
 * another request's callback) when one of this worker's connections goes
 * idle or closes, to try again.
 */
struct upool_waiter {
    struct list link;
    void (*wake)(struct upool_waiter *w);
};

#endif
