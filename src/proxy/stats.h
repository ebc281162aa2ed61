#ifndef STRAIT_PROXY_STATS_H
#define STRAIT_PROXY_STATS_H

#include <stdint.h>

#include "core/stats.h"
#include "http/http.h"
#include "http2/h2_server.h"
#include "net/listener.h"
#include "tls/tls.h"

/*
 * The counters of the L4 relay and of routing connections, one shard per
 * worker (core/stats.h): bytes relayed, upstream connects, idle
 * timeouts, and connections or requests refused before they reach a
 * cluster.
 */
struct relay_counters {
    uint64_t bytes_in;  /* from downstream */
    uint64_t bytes_out; /* to downstream */
    uint64_t upstream_bytes_in;
    uint64_t upstream_bytes_out;
    uint64_t connect_failures;
    uint64_t connect_timeouts;
    uint64_t idle_timeouts;
    /* TCP/TLS Gateway listeners */
    uint64_t no_route;            /* closed: no route matched (Envoy's NR) */
    uint64_t client_hello_errors; /* not TLS, malformed, too large, timeout */
    /* Gateway listeners: requests (HTTP, answered 502) and connections
     * (TCP/TLS, closed) routed to BlackHoleCluster, a destination host not
     * in the registry under outboundTrafficPolicy REGISTRY_ONLY */
    uint64_t registry_only;
    /* AUTO_PASSTHROUGH (east-west): sessions relayed by their Istio SNI,
     * and connections refused, by reason (each also counted in no_route,
     * but for ap_no_endpoint, flag UH) */
    uint64_t ap_relayed;
    uint64_t ap_bad_sni;        /* no SNI, or not outbound_.P_.S_.H */
    uint64_t ap_alpn;           /* no ALPN, or none of Istio's */
    uint64_t ap_unknown_host;   /* no service of that host exposed */
    uint64_t ap_unknown_port;   /* the service has no such port */
    uint64_t ap_unknown_subset; /* no such DestinationRule subset */
    uint64_t ap_no_endpoint;    /* the cluster has no endpoint */
    /* HBONE (HTTP/2 CONNECT tunnels): tunnels answered 200 and those of
     * them closed (active = opened - closed), and CONNECTs refused, by
     * reason */
    uint64_t hbone_opened;
    uint64_t hbone_closed;
    uint64_t hbone_bad_request;         /* 400: not CONNECT, bad authority */
    uint64_t hbone_unknown_destination; /* 400: no such service or endpoint */
    uint64_t hbone_denied;              /* 401: AuthorizationPolicy */
    uint64_t hbone_no_endpoint;         /* 503: no endpoint, circuit breaker */
    uint64_t hbone_connect_failed;      /* 503: upstream connect failed */
    uint64_t hbone_too_many;            /* RST_STREAM REFUSED_STREAM: past
                                         * MAX_CONCURRENT_STREAMS */
    uint64_t hbone_overload;            /* 503: hbone.tunnelMemory spent,
                                         * or a memory action on */
    /* Gateway listeners with LuaPolicies: Lua states made (one per
     * worker and routes generation, by the first request a policy
     * applies to) */
    uint64_t lua_states;
};

/* Their names in the admin API's /stats. */
extern const struct stats_desc relay_counters_desc;

/*
 * One worker's shard of a proxy listener's counters: each layer the
 * listener runs counts in its own struct. Every kind of listener (HTTP,
 * TCP, TLS) has all of them, so /stats names the same counters for each.
 */
struct proxy_counters {
    struct listener_counters listener;
    struct relay_counters relay;
    struct http_counters http;
    struct tls_counters tls;
    struct h2_counters h2;
};

/* The layout of struct proxy_counters, in /stats order. */
extern const struct stats_layout proxy_stats_layout;

/*
 * proxy_stats_new() allocates the zeroed counters of the listener `name`
 * for nworkers workers (a stats_block of proxy_stats_layout). A reload
 * that changes a listener hands the same block to its successor. Returns
 * the block with one reference held by the caller, or NULL.
 */
struct stats_block *proxy_stats_new(const char *name, int nworkers);

/* proxy_counters() is the shard of worker in b, a block from
 * proxy_stats_new(); valid while b is referenced. */
static inline struct proxy_counters *proxy_counters(const struct stats_block *b,
                                                    int worker)
{
    return (struct proxy_counters *)stats_shard(b, worker);
}

#endif
