#ifndef STRAIT_EVENT_REAP_H
#define STRAIT_EVENT_REAP_H

#include "event/reap-t.h"

/*
 * Deferred free, one list per thread (Redis's "free at a safe time"):
 * never free an object inside its own callback; drop the last reference,
 * queue the object here, and the loop frees it on a later turn, once no
 * callback of it is on the stack.
 *
 * What is queued is a reap_node embedded in its owner: an object freed on
 * its own (reap_node in the object), or an owner that sweeps its own list
 * of dead objects (reap_node in the owner; its objects reuse the links
 * they had while alive, so an idle object pays nothing for this). fn gets
 * the node back and finds its owner with LIST_ELEM().
 *
 * A reaper and its nodes are touched only by the thread that runs the
 * loop.
 */

/* reaper_init() prepares r on base's loop; it cannot fail. */
void reaper_init(struct reaper *r, struct event_base *base);

/* reaper_defer() queues n to have fn(n) run on a later turn of the loop,
 * never inside this call. A node already queued stays queued once, in
 * its place, with the fn it was queued with. n stays the caller's memory
 * and must live until fn runs or reaper_cancel(). A zeroed node needs no
 * initialisation. */
void reaper_defer(struct reaper *r, struct reap_node *n, reap_fn fn);

/* reap_node_queued() is 1 while n waits for its turn. */
int reap_node_queued(const struct reap_node *n);

/* reaper_cancel() takes n out of its queue (fn will not run); no-op when
 * n is not queued. For an owner about to free n itself. */
void reaper_cancel(struct reap_node *n);

/* reaper_dispose() runs what is still queued, including what those runs
 * queue, then stops r. Call it before the event_base is freed. A zeroed
 * or disposed reaper is a no-op. */
void reaper_dispose(struct reaper *r);

#endif
