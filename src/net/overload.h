#ifndef STRAIT_NET_OVERLOAD_H
#define STRAIT_NET_OVERLOAD_H

#include <stdint.h>

#include "core/memacct.h"

/*
 * Overload protection: connection limits and the memory actions.
 *
 * Connection limits (HAProxy's global and frontend maxconn, Envoy's
 * global and listener connection limits): a struct cx_limit counts the
 * downstream connections of one listener name, and each has the
 * process's limit as its parent. A connection takes a slot of both at
 * accept (cx_take) and gives them back when its socket is closed
 * (cx_release, from conn_close): two atomic adds on accept and two on
 * close, no lock. A listener's counter follows its name across reloads
 * like its stats do, and the connections of a retired generation keep
 * the counter they took, so they count until they close.
 *
 * Memory actions (Envoy's overload manager): the control loop measures
 * the process's resident memory, overload_eval() turns it into the set
 * of actions in effect, and the workers read that set (one relaxed load)
 * from the root limit: stop accepting connections, then disable
 * keep-alive, then refuse new requests with 503 (response flag OM), in
 * that order as memory rises. An action ends only once memory falls a
 * margin below its threshold (hysteresis), so it does not flap.
 */

/* What a listener does with a connection over a limit. */
enum cx_action {
    CX_PAUSE, /* stop accepting until below the limit; the backlog waits */
    CX_CLOSE, /* accept it and close it at once, counted */
};

/* What cx_take() found. */
enum cx_verdict {
    CX_OK = 0,          /* a slot is taken */
    CX_OVER_LISTENER,   /* the listener's limit is reached */
    CX_OVER_GLOBAL,     /* the process's limit is reached */
    CX_OVER_MEMORY = 3, /* stop_accepting_connections is in effect */
};

/* The memory actions, in the order they come into effect. */
enum overload_action {
    OVERLOAD_STOP_ACCEPTING_CONNECTIONS,
    OVERLOAD_DISABLE_KEEPALIVE,
    OVERLOAD_STOP_ACCEPTING_REQUESTS,
    OVERLOAD_NACTIONS
};

#define OVERLOAD_BIT(a) (1u << (a))

/*
 * The connections of one listener name, or of the process (parent NULL:
 * the root, which also carries the memory actions in effect).
 * Reference-counted with atomics; shared by every worker. max and action
 * are written by the main thread at each build, read at each accept.
 */
struct cx_limit {
    int refs;
    int64_t max;             /* 0: no limit */
    int64_t active;          /* connections holding a slot */
    int action;              /* enum cx_action */
    unsigned overload;       /* root: OVERLOAD_BIT()s in effect */
    struct cx_limit *parent; /* one reference; NULL for the root */
    /* Root only. The buffers the workers hold, checked as they grow
     * (cx_set_memory_conf()), with the thresholds a worker's check uses;
     * and the HBONE tunnels' reserved buffer bytes (cx_tunnel_take()). */
    struct memacct mem;
    uint64_t mem_limit;
    unsigned mem_pct[3]; /* OVERLOAD_NACTIONS */
    unsigned mem_hysteresis;
    int64_t tunnel_bytes;
};

/* cx_limit_new() returns a counter with no limit under parent (a
 * reference is taken; NULL makes a root), or NULL. */
struct cx_limit *cx_limit_new(struct cx_limit *parent);
struct cx_limit *cx_limit_ref(struct cx_limit *l);
void cx_limit_unref(struct cx_limit *l); /* NULL: no-op */

/* cx_limit_set() sets l's limit (0: none) and action; any thread. */
void cx_limit_set(struct cx_limit *l, int64_t max, enum cx_action action);

static inline struct cx_limit *cx_root(struct cx_limit *l)
{
    return l->parent != NULL ? l->parent : l;
}

/* cx_overload() is the set of memory actions in effect (OVERLOAD_BIT()s);
 * one relaxed load. */
static inline unsigned cx_overload(const struct cx_limit *l)
{
    const struct cx_limit *r = l->parent != NULL ? l->parent : l;

    return __atomic_load_n(&r->overload, __ATOMIC_RELAXED);
}

/* cx_set_overload() publishes the memory actions in effect (root). */
void cx_set_overload(struct cx_limit *root, unsigned actions);

/*
 * cx_take() takes a slot of l and of its parent for a new connection:
 * CX_OK, or why not (nothing is taken then). A memory overload refuses
 * too (CX_OVER_MEMORY). cx_release() gives back what cx_take() took.
 */
enum cx_verdict cx_take(struct cx_limit *l);
void cx_release(struct cx_limit *l);

/* cx_full() is cx_take()'s verdict without taking: whether a paused
 * listener may accept again. */
enum cx_verdict cx_full(const struct cx_limit *l);

static inline int64_t cx_active(const struct cx_limit *l)
{
    return __atomic_load_n(&l->active, __ATOMIC_RELAXED);
}

/* ---- memory thresholds ----------------------------------------------- */

/*
 * The memory actions' settings: limit bytes (0: none), each action's
 * threshold in percent of limit (non-decreasing in enum order), and the
 * margin in percent points below a threshold that memory must fall to
 * before that action ends.
 */
struct overload_conf {
    uint64_t limit;
    unsigned pct[OVERLOAD_NACTIONS];
    unsigned hysteresis;
};

/*
 * overload_eval() is the set of actions in effect at used bytes, given
 * those in effect before (active): an action starts at or above its
 * threshold, and one in effect stays so until used falls below its
 * threshold less the hysteresis. No limit: none.
 */
unsigned overload_eval(const struct overload_conf *c, uint64_t used,
                       unsigned active);

/*
 * cx_set_memory_conf() gives the root the memory thresholds (main thread,
 * at each build): from then on, each time the accounted buffers grow by a
 * step (a 64th of the limit, at least 64 KiB) the thread that grew them
 * measures resident memory and turns on the actions it calls for at once
 * (only on: the control loop's timer turns them off, with hysteresis),
 * instead of waiting for the next timer tick. No limit: no checks.
 */
void cx_set_memory_conf(struct cx_limit *root, const struct overload_conf *c);

/*
 * cx_tunnel_take() reserves bytes of buffer for a new HBONE tunnel against
 * the process's budget (max; 0: none): 0, or -1 when over the budget or
 * while any memory action is on (nothing is taken then). The bytes count
 * in the root's accounting too, so tunnels also trigger memory checks.
 * cx_tunnel_give() returns them.
 */
int cx_tunnel_take(struct cx_limit *root, int64_t bytes, int64_t max);
void cx_tunnel_give(struct cx_limit *root, int64_t bytes);

/* overload_action_name() is the action's Envoy-style name, e.g.
 * "stop_accepting_connections". */
const char *overload_action_name(enum overload_action a);

/* overload_rss_bytes() reads the process's resident set size from
 * /proc/self/statm (one small read); 0 when it cannot. */
uint64_t overload_rss_bytes(void);

#endif
