#ifndef STRAIT_COMPILE_LOCALITY_H
#define STRAIT_COMPILE_LOCALITY_H

/*
 * Locality load balancing as istiod computes it for a proxy (Istio's
 * pilot/pkg/networking/core/loadbalancer): a DestinationRule's
 * localityLbSetting, the node's locality, network and labels, and the
 * endpoints' turned into a priority level per endpoint (failover,
 * failoverPriority) or into weights per locality (distribute). The
 * balancer (upstream/priority.h) then spreads the load over the levels as
 * Envoy does.
 */

#include <stddef.h>
#include <stdint.h>

struct conf_strmap;
struct res_locality_lb;

/* The topology labels Istio adds to a proxy's and an endpoint's labels
 * from their locality and network (labelutil.AugmentLabels). */
#define LOCALITY_LABEL_REGION "topology.kubernetes.io/region"
#define LOCALITY_LABEL_ZONE "topology.kubernetes.io/zone"
#define LOCALITY_LABEL_SUBZONE "topology.istio.io/subzone"
#define LOCALITY_LABEL_NETWORK "topology.istio.io/network"

/* A workload, the node or an endpoint: what locality balancing reads of
 * it. Every pointer is borrowed and may be NULL. */
struct locality_who {
    const char *locality; /* "region/zone/subzone" */
    const char *network;
    const struct conf_strmap *labels;
};

/* A locality split as Istio's SplitLocalityLabel(): region, zone and the
 * rest as the subzone (each "" when absent). */
struct locality_parts {
    char region[128];
    char zone[128];
    char subzone[256];
};

void locality_split(const char *s, struct locality_parts *out);

/* locality_match() is Istio's LocalityMatch(): does locality l fall under
 * rule ("region", "region/zone", "region/zone/subzone", with '*' for any
 * part; a zone or subzone left out matches any)? */
int locality_match(const struct locality_parts *l, const char *rule);

/* locality_rank() is Istio's LbPriority(): 0 when region, zone and
 * subzone equal the node's, 1 region and zone, 2 region, else 3. */
int locality_rank(const struct locality_parts *node,
                  const struct locality_parts *ep);

/* locality_label() is the value of label key for w (NULL: none): its
 * network for topology.istio.io/network when it has one, as Istio's
 * AugmentLabels() adds it, else its own label. (The region, zone and
 * subzone labels come from its locality: see locality_apply().) */
const char *locality_label(const struct locality_who *w, const char *key);

/* locality_of() is the locality an endpoint has: its own (WorkloadEntry
 * or ServiceEntry endpoint `locality`), else from its labels
 * topology.kubernetes.io/region, topology.kubernetes.io/zone and
 * topology.istio.io/subzone, as Istio reads a pod's; written into buf
 * (NULL when it has none). */
const char *locality_of(const char *own, const struct conf_strmap *labels,
                        char *buf, size_t n);

/*
 * locality_apply() is istiod's ApplyLocalityLoadBalancer() for one
 * cluster of n endpoints eps[0..n), for node.
 *
 * lb:       the effective localityLbSetting; NULL or without a mark: the
 *           mesh default, enabled with no rules (Istio's MeshConfig).
 * failover: the cluster has outlierDetection; without it there is no
 *           failover (Envoy would never move off a level), only
 *           distribute.
 * level:    out, n priority levels, 0 the highest, without gaps.
 * w:        in and out, n endpoint weights (>= 1): distribute may
 *           rewrite them (see lweight).
 * keep:     out, n flags: 0 for an endpoint distribute leaves out (its
 *           locality matches no `to`).
 * lweight:  room for n locality weights, or NULL. With it, distribute
 *           makes each locality it gives a share a level of that weight
 *           (*weighted set: the levels are localities of one priority, for
 *           Envoy's locality weighted balancing) and leaves w alone;
 *           without it (a consistent hash, whose ring has no localities)
 *           it folds the shares into the endpoint weights.
 * Returns the number of levels (1 when nothing applies), or -1 when
 * memory is short (nothing is changed).
 */
int locality_apply(const struct res_locality_lb *lb, int failover,
                   const struct locality_who *node,
                   const struct locality_who *eps, size_t n, uint32_t *level,
                   uint32_t *w, unsigned char *keep, uint32_t *lweight,
                   int *weighted);

#endif
