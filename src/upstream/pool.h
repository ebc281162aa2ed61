#ifndef STRAIT_UPSTREAM_POOL_H
#define STRAIT_UPSTREAM_POOL_H

/*
 * A worker's pool of upstream connections for one cluster (types in
 * pool-t.h): idle HTTP/1 connections kept for reuse, HTTP/2 connections
 * shared by streams, and requests waiting for a connection while the
 * cluster is at max_connections. The pool's balancer (p->lb, balancer.h)
 * picks the endpoint; the pool finds or opens a connection to it.
 */

#include <stddef.h>

#include "upstream/cluster-t.h"
#include "upstream/pool-t.h"

struct h1_client;
struct h1_client_hooks;
struct h2_client;

/* upool_init() takes a reference to cl and sets up worker's pool and
 * balancer on base; closed connections are freed through reaper (the
 * worker's, which outlives the pool); scratch is the worker's HTTP/1 parse
 * scratch (may be NULL when no HTTP/1 connection is made). Returns 0, or -1
 * with nothing left to dispose (memory). */
int upool_init(struct upool *p, struct cluster *cl, struct event_base *base,
               struct reaper *reaper, int worker, struct h1_scratch *scratch);

/* upool_dispose() closes every connection and drops the cluster
 * reference; safe on a zeroed or disposed pool. No request may wait. */
void upool_dispose(struct upool *p);

/* upool_take() returns an idle connection to endpoint ep, or NULL. The
 * caller becomes its owner (h1_client_set_owner). */
struct h1_client *upool_take(struct upool *p, size_t ep);

/*
 * upool_h1_connect() opens a new connection to ep owned by (hooks, ctx),
 * counted against the cluster's max_connections until it closes. At the
 * limit it returns NULL with *wait set when this worker has connections of
 * its own to wait for (the caller queues with upool_wait()); with none, it
 * opens one anyway, as Envoy does, so a worker is never left with pending
 * requests and nothing to serve them. NULL with *wait clear: no socket.
 */
struct h1_client *upool_h1_connect(struct upool *p, size_t ep,
                                   const struct h1_client_hooks *hooks,
                                   void *ctx, int *wait);

/* upool_wait() queues w: 0, or -1 when http1MaxPendingRequests requests
 * wait already (the caller answers 503 UO). upool_unwait() takes a waiting
 * request out (it ended). */
int upool_wait(struct upool *p, struct upool_waiter *w);
void upool_unwait(struct upool *p, struct upool_waiter *w);

/* upool_put() keeps a reusable connection for the next request. */
void upool_put(struct upool *p, struct h1_client *c);

/* upool_discard() closes c on the next loop turn (never inside c's own
 * callback). */
void upool_discard(struct upool *p, struct h1_client *c);

/* upool_h2_get() returns an HTTP/2 connection to endpoint ep with room for
 * one more stream, connecting a new one when none has; NULL when no socket
 * could be made. The pool keeps ownership. */
struct h2_client *upool_h2_get(struct upool *p, size_t ep);

/* upool_stats() is this worker's counter shard of the pool's cluster. */
static inline struct cluster_counters *upool_stats(const struct upool *p)
{
    return &p->cl->w[p->worker];
}

#endif
