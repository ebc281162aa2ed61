#ifndef STRAIT_COMPILE_LOWER_H
#define STRAIT_COMPILE_LOWER_H

#include "config/bootstrap.h"

struct cluster;
struct http_routes;
struct l4_listener_conf;
struct stats_block;

/*
 * Lowering the bootstrap's `listeners:`, `routes:` and `clusters:` into
 * the model Gateways, VirtualServices and DestinationRules compile into,
 * as nginx lowers an implicit proxy_pass upstream into the same upstream
 * object as an explicit one: an http listener's routes become router
 * rules (router_build_rules()), a cluster is built by compile_cluster(),
 * and a tcp listener becomes an L4 listener with one tcp route to the
 * cluster of its upstreams. What runs is then the same code whichever
 * world a listener comes from. Main thread only.
 */

/* lower_cluster() builds a bootstrap cluster: its endpoints with the
 * bootstrap's defaults (its protocol, connectTimeout, idleTimeout and
 * maxRequestsPerConnection; round robin; no retry budget, breaker or
 * outlier detection), its tls block as DestinationRule tls SIMPLE. NULL
 * with an allocated *err (a CA file that does not load). */
struct cluster *lower_cluster(const struct bootstrap_cluster *bc, int nworkers,
                              char **err);

/*
 * lower_http_routes() builds what an http listener routes by: every
 * bootstrap cluster (clusters, bs->clusters.n of them, one reference
 * taken each, in order, so a route's cluster is its index) and a router
 * of one rule per route (host, pathPrefix, cluster, timeout; first match
 * wins). Returns routes with one reference, or NULL with an allocated
 * *err.
 */
struct http_routes *lower_http_routes(const struct bootstrap *bs,
                                      const struct bootstrap_listener *bl,
                                      struct cluster *const *clusters,
                                      char **err);

/*
 * lower_tcp_listener() builds the L4 listener of a tcp listener: no
 * ClientHello inspection, one tcp route (no match blocks) to one cluster
 * of its upstreams (round robin per worker, as before), relayed with its
 * connectTimeout, connectAttempts, idleTimeout and bufferSize. The
 * cluster is implicit: named after the listener, left out of access logs
 * and the admin API as the listener's upstreams always were. stats gets
 * one reference. Returns the conf with one reference, or NULL with an
 * allocated *err.
 */
struct l4_listener_conf *lower_tcp_listener(const struct bootstrap *bs,
                                            const struct bootstrap_listener *bl,
                                            struct stats_block *stats,
                                            char **err);

#endif
