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

/* An earliest-deadline-first schedule (weighted ROUND_ROBIN and
 * LEAST_REQUEST, Envoy's scheduler): a min-heap of the endpoints in
 * service by next deadline; endpoints found ejected are parked off the
 * heap until they return. */
struct balancer_sched {
    struct balancer_edf *edf;
    size_t nedf;
    double vtime; /* the deadline of the last pick */
    uint32_t *parked;
    size_t nparked;
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
    /* A cluster with weights: the schedule over all its endpoints. */
    struct balancer_sched s;
    /* A cluster with locality priority levels (cl->prio): the round robin
     * position and the weighted schedule of each level. */
    size_t *lrr;
    struct balancer_sched *ls;
    /* The priority load last computed while ejections are active, per
     * level, with the detector's ejection and active counts and its next
     * expiry (the time the loads hold until) it was computed at:
     * recomputed only when one of them moves or that time comes. */
    uint32_t *lload;
    unsigned char *lpanic;
    int lvalid;
    uint64_t lsum; /* of lload: 100, or the localities' weights */
    uint64_t lgen; /* recomputations of lload */
    /* Levels that are localities (distribute): Envoy's EDF schedule over
     * their weights, each level's next deadline, the time of the last
     * pick, and which weights (lgen; 0: the static ones) it runs on. */
    double *ldl;
    double lvt;
    uint64_t lsched;
    uint64_t lseen_total, lseen_active, lvalid_until;
    int worker;
};

#endif
