#ifndef STRAIT_UPSTREAM_CLUSTER_T_H
#define STRAIT_UPSTREAM_CLUSTER_T_H

/*
 * The types of an upstream cluster: the immutable object every worker
 * shares, its per-worker counters and the settings that pick a balancer.
 * The API is in cluster.h.
 */

#include <stddef.h>
#include <stdint.h>

/* The HTTP/1 and HTTP/2 client settings are embedded; those layers have
 * no type-only headers yet, so their API headers stand in. */
#include "http1/h1_client.h"
#include "http2/h2_client.h"

struct addr;
struct balancer_alias;
struct cluster_prio;
struct lb_hash;
struct outlier;
struct series_labels;
struct ssl_ctx_st;

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
    uint64_t rq_failover; /* requests balanced to a priority level below the
                             first (localityLbSetting) */
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

/* How an endpoint is picked for a request (DestinationRule loadBalancer);
 * the balancers are in balancer.c. */
enum cluster_lb {
    CLUSTER_LB_ROUND_ROBIN,
    CLUSTER_LB_RANDOM,
    CLUSTER_LB_LEAST_REQUEST, /* the less busy of two random endpoints;
                                 weighted: EDF on weight / (active + 1) */
    CLUSTER_LB_HASH,          /* consistent hash: see cluster.hash */
};

/* What the registry says of an endpoint (east-west, issue 15): the
 * network it is on and its locality (region/zone/subzone), and for an
 * endpoint that stands for a remote network's endpoints, the gateway it
 * is. Strings owned by the cluster; "" when unknown. */
struct cluster_endpoint_meta {
    char *network;
    char *locality;
    char *via; /* NULL: reached directly; else "ADDR:PORT (SOURCE)" */
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
    struct balancer_alias *alias;
    /* Per endpoint, parallel to endpoints: network, locality, gateway;
     * NULL when nothing is known (bootstrap clusters). Set by
     * cluster_set_meta() before the cluster is shared. */
    struct cluster_endpoint_meta *ep_meta;
    /* Remote endpoints left out by the split horizon: the cluster is not
     * ISTIO_MUTUAL (cross-network routing needs mTLS SNI), or no gateway
     * of their network has an IP family this node has. */
    uint32_t remote_skipped_mtls;
    uint32_t remote_skipped_family;
    uint32_t remote_skipped_no_gateway; /* no address, no gateway */
    uint32_t remote_skipped_view;       /* an east-west gateway's: not local */
    /* Locality priority levels (DestinationRule localityLbSetting,
     * priority.h); NULL: one level, balancing as without. Set by
     * cluster_set_levels() before the cluster is shared. */
    struct cluster_prio *prio;
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
    /* The destination_* labels of Istio's metrics for this cluster (its
     * registry entry), one reference; NULL: all unknown. */
    struct series_labels *metrics;
#define CLUSTER_HBONE_DOUBLE 2
    /* HBONE (Istio ambient): per endpoint, whether it is reached through
     * an HTTP/2 CONNECT tunnel to its address's port 15008, and the
     * SPIFFE ID it must present (NULL: any the mesh root signed); the
     * client context (the node's certificate, the mesh root, ALPN h2).
     * hbone NULL: no such endpoint. hbone_error: there are some and no
     * mesh certificate to reach them with (their sessions are refused). */
    uint8_t *hbone;
    char **hbone_ids;
    struct ssl_ctx_st *hbone_tls;
    int hbone_error;
    /* Double HBONE (hbone[ep] == CLUSTER_HBONE_DOUBLE: the endpoint is
     * another network's ambient east-west gateway, hbone_ids[ep] its
     * identity): the CONNECT authority ("host:port", both tunnels), the
     * inner TLS context (verifying the service's identities) and this
     * node's network (x-forwarded-network). NULL: no such endpoint. */
    char *hbone_authority;
    struct ssl_ctx_st *hbone_inner_tls;
    char *hbone_network;
    int nworkers;
    struct cluster_counters *w; /* nworkers shards */
};

#endif
