#ifndef STRAIT_UPSTREAM_CLUSTER_H
#define STRAIT_UPSTREAM_CLUSTER_H

/*
 * An upstream cluster (types in cluster-t.h): its endpoints and weights,
 * reference counting, per-worker counters, the circuit breakers, and
 * outlier reports. A worker's connections to it are in pool.h, how an
 * endpoint is picked in balancer.h.
 */

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"
#include "core/stats.h"
#include "upstream/cluster-t.h"

/* cluster_new() copies n endpoints (eps may be NULL when n is 0) and
 * makes nworkers counter shards. Returns the cluster with one reference,
 * or NULL (memory). */
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

/* cluster_set_meta() copies each endpoint's network, locality and
 * gateway (net[i], loc[i], via[i] for i < nendpoints; NULL strings read
 * as "", a NULL via as reached directly) into the cluster. 0, or -1 when
 * memory is short (nothing kept). */
int cluster_set_meta(struct cluster *c, const char *const *net,
                     const char *const *loc, const char *const *via);

/* cluster_weight() is endpoint ep's weight (1 without weights). */
static inline uint32_t cluster_weight(const struct cluster *c, size_t ep)
{
    return c->weights != NULL ? c->weights[ep] : 1;
}

/* cluster_unref() drops a reference; the last frees the cluster and what
 * it owns (hash table, detector, TLS context). NULL is a no-op. */
void cluster_unref(struct cluster *c);

/* cluster_sum() adds up every worker's counters into out. */
void cluster_sum(const struct cluster *c, struct cluster_counters *out);

/* The names of cluster_counters in the admin API's /stats
 * (upstream_rq_total, ...). */
extern const struct stats_desc cluster_counters_desc;

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

/*
 * The connections circuit breaker (tcp.maxConnections), counted only when
 * limited: cluster_admit_conn() takes a slot and returns 1 (always, and
 * nothing counted, without a limit), or returns 0 at the limit;
 * cluster_force_conn() takes one past the limit (a worker with no
 * connection of its own opens one anyway, as Envoy); cluster_release_conn()
 * gives one back.
 */
int cluster_admit_conn(struct cluster *c);
void cluster_force_conn(struct cluster *c);
void cluster_release_conn(struct cluster *c);

/* The pending-requests breaker (http1MaxPendingRequests): a request
 * waiting for a connection holds a slot. cluster_admit_pending() returns 1
 * with a slot taken, or 0 when max_pending wait already. */
int cluster_admit_pending(struct cluster *c);
void cluster_release_pending(struct cluster *c);

/* cluster_report() tells outlier detection how endpoint ep answered: an
 * HTTP status or an enum outlier_result. Nothing happens, at the cost of
 * one test, for a cluster without outlierDetection. An ejection is
 * logged. */
void cluster_report_slow(struct cluster *c, size_t ep, int result);

static inline void cluster_report(struct cluster *c, size_t ep, int result)
{
    if (c->od != NULL)
        cluster_report_slow(c, ep, result);
}

#endif
