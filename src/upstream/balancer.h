#ifndef STRAIT_UPSTREAM_BALANCER_H
#define STRAIT_UPSTREAM_BALANCER_H

/*
 * The load balancers (DestinationRule loadBalancer): round robin, random
 * and least request, plain or weighted (Envoy's EDF scheduler, Walker's
 * alias table), and the consistent-hash pick over hash.h's ring or table.
 * Every pick skips endpoints outlier detection ejected (outlier.h).
 * Types in balancer-t.h.
 */

#include <stddef.h>
#include <stdint.h>

#include "upstream/balancer-t.h"

/*
 * balancer_init() sets up worker's balancing state for cl, which must
 * outlive it (the owner holds a reference; cl's weights are set already).
 * Returns 0, or -1 with nothing left to dispose (memory).
 */
int balancer_init(struct balancer *b, const struct cluster *cl, int worker);

/* balancer_dispose() frees what balancer_init() made; safe on a zeroed or
 * disposed balancer. */
void balancer_dispose(struct balancer *b);

/* balancer_pick() returns the endpoint for the next request, by the
 * cluster's balancer, skipping endpoints outlier detection ejected (unless
 * too few are left: then every endpoint is used, as in Envoy's panic
 * mode). A consistent-hash cluster picks at random for a request without
 * a key. With weights, each endpoint's share of the picks is its weight
 * over the total of those in service (LEAST_REQUEST: weight over requests
 * in flight plus one, as Envoy's). The cluster has at least one endpoint.
 * balancer_busy()/balancer_done() count requests in flight per endpoint
 * (for LEAST_REQUEST). */
size_t balancer_pick(struct balancer *b);
void balancer_busy(struct balancer *b, size_t ep);
void balancer_done(struct balancer *b, size_t ep);

/* balancer_pick_hash() is balancer_pick() for a request whose consistent
 * hash is h (a CLUSTER_LB_HASH cluster): the endpoint at h in the ring or
 * table, or the next one there that is not ejected. */
size_t balancer_pick_hash(struct balancer *b, uint64_t h);

/* balancer_next() is the endpoint after ep for another try (connect
 * failures, retries): the next one in order that is not ejected. */
size_t balancer_next(struct balancer *b, size_t ep);

/* balancer_build_alias() fills alias[0..n) for weights w[0..n) (each >= 1,
 * n >= 1): the table weighted RANDOM draws from. Returns 0, or -1 when
 * memory is short. */
int balancer_build_alias(struct balancer_alias *alias, const uint32_t *w,
                         size_t n);

#endif
