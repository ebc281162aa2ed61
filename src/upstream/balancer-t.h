#ifndef STRAIT_UPSTREAM_BALANCER_T_H
#define STRAIT_UPSTREAM_BALANCER_T_H

/*
 * The types of the load balancers: a worker's balancing state for one
 * cluster, and the alias table a weighted cluster keeps. The API is in
 * balancer.h.
 */

#include <stddef.h>
#include <stdint.h>

struct cluster;

/* One slot of Walker's alias table: a draw landing on slot i takes
 * endpoint i when its low 32 random bits are under `below` (2^32: always),
 * else endpoint `other`. */
struct balancer_alias {
    uint64_t below;
    uint32_t other;
};

/* One endpoint's turn in a worker's earliest-deadline-first schedule. */
struct balancer_edf {
    double deadline;
    uint32_t ep;
};

/*
 * One worker's balancing state for a cluster: where round robin is, the
 * random generator, requests in flight per endpoint. Lives on the
 * worker's thread only (embedded in its struct upool).
 */
struct balancer {
    const struct cluster *cl; /* not a reference: the owner holds one */
    size_t rr;
    uint64_t rng;
    uint32_t *active; /* requests in flight per endpoint, this worker */
    /* Weighted ROUND_ROBIN and LEAST_REQUEST (a cluster with weights
     * only): Envoy's EDF scheduler, a min-heap of the endpoints in
     * service by next deadline; endpoints found ejected are parked off the
     * heap until they return. */
    struct balancer_edf *edf;
    size_t nedf;
    double vtime; /* the deadline of the last pick */
    uint32_t *parked;
    size_t nparked;
};

#endif
