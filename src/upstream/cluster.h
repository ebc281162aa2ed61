#ifndef STRAIT_UPSTREAM_CLUSTER_H
#define STRAIT_UPSTREAM_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"
#include "core/list.h"
#include "core/stats.h"
#include "http1/h1_client.h"
#include "http2/h2_client.h"
#include "upstream/hash.h"
#include "upstream/outlier.h"

struct event;
struct ssl_ctx_st;
struct event_base;

/* Per-worker counters of a cluster; see core/stats.h for the rules. */
struct cluster_counters {
    uint64_t rq_total;
    uint64_t cx_total;
    uint64_t cx_connect_fail;
    uint64_t cx_connect_timeout;
    uint64_t cx_reused;
    uint64_t rq_error;           /* reset or protocol error mid-exchange */
    uint64_t rq_timeout;         /* route timeout */
    uint64_t rq_overflow;        /* refused by the circuit breaker (503 UO) */
    uint64_t rq_retry_overflow;  /* retries the circuit breaker refused */
    uint64_t rq_retry;           /* retries sent (VirtualService retries) */
    uint64_t rq_per_try_timeout; /* attempts past retries.perTryTimeout */
    uint64_t rq_retry_body_overflow; /* bodies past the retry buffer: the
                                        request could not be retried */
    uint64_t cx_overflow;            /* connections max_connections held back */
    uint64_t rq_pending;             /* requests that waited for a connection */
} __attribute__((aligned(64)));

enum cluster_protocol { CLUSTER_HTTP1, CLUSTER_HTTP2 };

/* Where a cluster's destination comes from (outboundTrafficPolicy). */
enum cluster_origin {
    CLUSTER_REGISTRY,    /* a declared service, or a bootstrap cluster */
    CLUSTER_PASSTHROUGH, /* ALLOW_ANY: an undeclared host, by its DNS name */
    CLUSTER_BLACKHOLE,   /* REGISTRY_ONLY: Istio's BlackHoleCluster, where
                          * routes to undeclared hosts go: HTTP is answered
                          * 502, TCP closed; no endpoints */
};

/* How an endpoint is picked for a request (DestinationRule loadBalancer). */
enum cluster_lb {
    CLUSTER_LB_ROUND_ROBIN,
    CLUSTER_LB_RANDOM,
    CLUSTER_LB_LEAST_REQUEST, /* the less busy of two random endpoints;
                                 weighted: EDF on weight / (active + 1) */
    CLUSTER_LB_HASH,          /* consistent hash: see cluster.hash */
};

/* One slot of Walker's alias table: a draw landing on slot i takes
 * endpoint i when its low 32 random bits are under `below` (2^32: always),
 * else endpoint `other`. */
struct cluster_alias {
    uint64_t below;
    uint32_t other;
};

/*
 * An upstream cluster: its endpoints and how to talk to them. Immutable
 * and shared by all workers; reference-counted with atomics (taken when
 * listeners are built, never per request). The one thing workers change
 * are the circuit breakers' counts (rq_active, retries_active) across all
 * of them, as Envoy's limits are per cluster and not per thread.
 */
struct cluster {
    int refs;
    char *name;
    struct addr *endpoints;
    size_t nendpoints;
    enum cluster_protocol protocol;
    enum cluster_origin origin;
    enum cluster_lb lb;
    /* Endpoint weights (WorkloadEntry weight): NULL when all are equal,
     * which keeps the plain balancers; else nendpoints weights >= 1, their
     * inverses (a turn's length in the EDF schedule) and an alias table
     * (weighted RANDOM). Set by cluster_set_weights() before the cluster
     * is shared. */
    uint32_t *weights;
    double *inv_weights;
    struct cluster_alias *alias;
    struct h1_client_conf h1;
    struct h2_client_conf h2;
    uint64_t max_requests_per_conn; /* 0: no limit */
    uint64_t max_requests;          /* in flight at once; 0: no limit */
    uint64_t rq_active;   /* atomics only; the proxy counts only when limited */
    uint64_t max_retries; /* retries at once; 0: no limit */
    uint64_t retries_active; /* atomics only */
    /* tcp.maxConnections: connections to all endpoints at once, counted
     * only when limited; http1MaxPendingRequests: requests waiting for one
     * at once (0: no limit). */
    uint64_t max_connections;
    uint64_t cx_active; /* atomics only */
    uint64_t max_pending;
    uint64_t rq_waiting;    /* atomics only */
    struct ssl_ctx_st *tls; /* NULL: plaintext; one reference */
    int tls_error; /* TLS was asked for and could not be set up: requests
                    * are refused rather than sent in the clear */
    char *sni;
    int tls_mesh; /* ISTIO_MUTUAL: TCP streams offer Istio's ALPN "istio" */
    /* Lowered from a bootstrap tcp listener's upstreams: it has no name of
     * its own, so access logs and the admin API leave it out. */
    int implicit;
    struct lb_hash *hash; /* CLUSTER_LB_HASH: ring or table; owned */
    struct outlier *od;   /* outlierDetection; NULL: none; owned */
    int nworkers;
    struct cluster_counters *w; /* nworkers shards */
};

struct cluster *cluster_new(const char *name, const struct addr *eps, size_t n,
                            int nworkers);
struct cluster *cluster_ref(struct cluster *c);

/*
 * cluster_set_weights() gives the endpoints weights w[0..nendpoints) (0
 * counts as 1, as Envoy's absent load_balancing_weight). When all are
 * equal nothing is kept and balancing is as without weights. Call it
 * before the hash table is built and before any upool_init(). Returns 0,
 * or -1 when memory is short (the cluster then stays unweighted).
 */
int cluster_set_weights(struct cluster *c, const uint32_t *w);

/* cluster_weight() is endpoint ep's weight (1 without weights). */
static inline uint32_t cluster_weight(const struct cluster *c, size_t ep)
{
    return c->weights != NULL ? c->weights[ep] : 1;
}
void cluster_unref(struct cluster *c);
void cluster_sum(const struct cluster *c, struct cluster_counters *out);

/*
 * The requests circuit breaker (DestinationRule http2MaxRequests, Envoy's
 * max_requests): cluster_admit() takes a slot and returns 1, or returns 0
 * when max_requests are in flight already; cluster_release() gives back
 * an admitted request's slot.
 */
int cluster_admit(struct cluster *c);
void cluster_release(struct cluster *c);

/* The same for retries (DestinationRule maxRetries, Envoy's max_retries):
 * a request holds a slot from its first retry until it ends. */
int cluster_admit_retry(struct cluster *c);
void cluster_release_retry(struct cluster *c);

/* One endpoint's turn in a worker's earliest-deadline-first schedule. */
struct upool_edf {
    double deadline;
    uint32_t ep;
};

/*
 * One worker's pool of idle upstream connections for a cluster. Lives on
 * the worker's thread only.
 */
struct upool {
    struct cluster *cl; /* one reference */
    struct event_base *base;
    int worker;
    size_t rr;
    uint64_t rng;
    uint32_t *active; /* requests in flight per endpoint, this worker */
    /* Weighted ROUND_ROBIN and LEAST_REQUEST (a cluster with weights
     * only): Envoy's EDF scheduler, a min-heap of the endpoints in
     * service by next deadline; endpoints found ejected are parked off the
     * heap until they return. */
    struct upool_edf *edf;
    size_t nedf;
    double vtime; /* the deadline of the last pick */
    uint32_t *parked;
    size_t nparked;
    struct list idle; /* struct h1_client, most recently used last */
    size_t nidle;
    struct list dead;
    struct list h2conns; /* struct h2_client, busy or not */
    struct list h2dead;
    struct event *reap_ev;
    struct h1_scratch *scratch;
    size_t nconns;       /* this worker's connections, open or opening */
    struct list waiters; /* struct upool_waiter, first come first served */
    struct event *wake_ev;
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

/* upool_init() returns 0, or -1 with nothing left to dispose (memory). */
int upool_init(struct upool *p, struct cluster *cl, struct event_base *base,
               int worker, struct h1_scratch *scratch);
void upool_dispose(struct upool *p);

/* upool_pick() returns the endpoint for the next request, by the
 * cluster's balancer, skipping endpoints outlier detection ejected (unless
 * too few are left: then every endpoint is used, as in Envoy's panic
 * mode). A consistent-hash cluster picks at random for a request without
 * a key. With weights, each endpoint's share of the picks is its weight
 * over the total of those in service (LEAST_REQUEST: weight over requests
 * in flight plus one, as Envoy's). upool_busy()/upool_done() count requests in
 * flight per endpoint (for LEAST_REQUEST). */
size_t upool_pick(struct upool *p);
void upool_busy(struct upool *p, size_t ep);
void upool_done(struct upool *p, size_t ep);

/* upool_pick_hash() is upool_pick() for a request whose consistent hash
 * is h (a CLUSTER_LB_HASH cluster): the endpoint at h in the ring or
 * table, or the next one there that is not ejected. */
size_t upool_pick_hash(struct upool *p, uint64_t h);

/* upool_next() is the endpoint after ep for another try (connect
 * failures, retries): the next one in order that is not ejected. */
size_t upool_next(struct upool *p, size_t ep);

/* upool_report() tells outlier detection how endpoint ep answered: an
 * HTTP status or an enum outlier_result. Nothing happens, at the cost of
 * one test, for a cluster without outlierDetection. */
void upool_report_slow(struct upool *p, size_t ep, int result);

static inline void upool_report(struct upool *p, size_t ep, int result)
{
    if (p->cl->od != NULL)
        upool_report_slow(p, ep, result);
}

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

static inline struct cluster_counters *upool_stats(const struct upool *p)
{
    return &p->cl->w[p->worker];
}

#endif
