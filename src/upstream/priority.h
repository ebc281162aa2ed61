#ifndef STRAIT_UPSTREAM_PRIORITY_H
#define STRAIT_UPSTREAM_PRIORITY_H

/*
 * Priority levels of a cluster (DestinationRule localityLbSetting, as
 * compiled by compile/locality.c) and Envoy's priority load over them:
 * a level whose endpoints are H% in service gets min(100, 1.4 x H)% of
 * the traffic (the overprovisioning factor 1.4), the levels after it the
 * rest, in order. Outlier ejections are what take endpoints out of
 * service, so an ejection moves traffic to the next level and its end
 * moves it back. The balancer (balancer.h) picks a level by these loads,
 * then an endpoint within it by the cluster's policy.
 */

#include <stddef.h>
#include <stdint.h>

struct balancer_alias;
struct cluster;
struct lb_hash;
struct lb_hash_conf;

/* Envoy's default overprovisioning factor, 1.4, in percent. */
#define PRIO_OVERPROVISION 140

/* Levels a cluster may have: failoverPriority's 100 labels, each with
 * failover's five ranks, is the most compile/locality.c makes. */
#define PRIO_MAX_LEVELS 512

/*
 * A cluster's levels: immutable once the cluster is shared. Level l holds
 * the endpoints order[off[l] .. off[l+1]), in endpoint order.
 */
struct cluster_prio {
    size_t nlevels;
    uint32_t *level; /* per endpoint */
    uint32_t *order;
    size_t *off; /* nlevels + 1 */
    /* A cluster with weights: each level's alias table (weighted RANDOM),
     * the slots of level l at alias[off[l] ..], their `other` counted
     * from off[l]. NULL without weights. */
    struct balancer_alias *alias;
    /* A consistent-hash cluster: each level's ring or table, over the
     * level's endpoints (an entry's endpoint is counted from off[l]). */
    struct lb_hash **hash;
    /* NULL: the levels are priorities. Else (distribute) they are the
     * localities of one priority, each with this weight (Envoy's locality
     * weighted balancing), wsum their total. */
    uint32_t *weight;
    uint64_t wsum;
};

/*
 * cluster_set_levels() gives c's endpoints priority levels level[0..n)
 * (0 the highest, no gaps). With one level nothing is kept and balancing
 * is as without. Call it after cluster_set_weights() and before the hash
 * table is built or any upool_init(). Returns 0, or -1 when memory is
 * short (the cluster then keeps one level).
 */
int cluster_set_levels(struct cluster *c, const uint32_t *level);

/* cluster_set_level_weights() makes c's levels (cluster_set_levels())
 * localities weighing w[0..nlevels) (each >= 1) instead of priorities.
 * Returns 0, or -1 when memory is short (they stay priorities). */
int cluster_set_level_weights(struct cluster *c, const uint32_t *w);

/* cluster_level() is endpoint ep's level (0 without levels). */
static inline uint32_t cluster_level_of(const struct cluster_prio *p, size_t ep)
{
    return p != NULL ? p->level[ep] : 0;
}

/* prio_build_hash() builds a ring or table per level for a consistent-hash
 * cluster with levels. Returns 0, or -1 with *err (allocated). */
int prio_build_hash(struct cluster *c, const struct lb_hash_conf *conf,
                    char **err);

/* prio_free() frees p and what it holds; NULL is a no-op. */
void prio_free(struct cluster_prio *p);

/*
 * prio_loads() is Envoy's priority load for n levels, level l with
 * healthy[l] of total[l] endpoints in service: its health is
 * min(100, 140 x healthy / total); the health summed (at most 100) is the
 * normalised availability; each level in order takes
 * min(what is left, health x 100 / availability) percent, and rounding's
 * rest goes to the first level with load. A level is in panic (balanced
 * over all its endpoints, ejected or not) when the availability is under
 * 100 and its share in service is under panic_pct. With no availability
 * at all, or every level in panic, the load is by endpoint count and
 * every level is in panic (strait's rule for a cluster with none in
 * service). load[0..n) sums to 100. Returns 1 in that total panic, else 0.
 */
int prio_loads(const uint32_t *healthy, const uint32_t *total, size_t n,
               uint32_t panic_pct, uint32_t *load, unsigned char *panic);

/*
 * locality_loads() is Envoy's locality weighted balancing for n
 * localities of weight[l], healthy[l] of total[l] endpoints in service:
 * each gets weight x min(100, 140 x healthy / total), so a locality keeps
 * its whole share until fewer than 1/1.4 of its endpoints are in service.
 * load[0..n) are those effective weights (their sum is what a draw is
 * taken over); with none left, as prio_loads()'s total panic. Returns 1
 * in that panic, else 0.
 */
int locality_loads(const uint32_t *weight, const uint32_t *healthy,
                   const uint32_t *total, size_t n, uint32_t *load,
                   unsigned char *panic);

/*
 * cluster_prio_loads() is prio_loads() (or locality_loads() for
 * localities) for c's levels at now (ejections from its outlier detector;
 * all in service without one). load and panic have room for
 * c->prio->nlevels. Returns as prio_loads().
 */
int cluster_prio_loads(const struct cluster *c, uint64_t now, uint32_t *load,
                       unsigned char *panic);

#endif
