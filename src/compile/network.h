#ifndef STRAIT_COMPILE_NETWORK_H
#define STRAIT_COMPILE_NETWORK_H

/*
 * Networks (issue 15, Istio's multi-network): every endpoint is on a
 * network, a network may have gateways, and an endpoint on another
 * network than this node's is reached through its network's gateways
 * (the split horizon of istiod's EndpointsByNetworkFilter). Compiling
 * reads the network of each endpoint here, and replaces remote endpoints
 * by gateways with net_split().
 */

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"

struct bootstrap_mesh_networks;
struct compile_dns;
struct conf_strmap;
struct resource_set;

/*
 * A gateway of a network, as compile takes it. The bootstrap's
 * meshNetworks and Services labelled topology.istio.io/network give
 * gateways; the control loop adds more at run time (the gateways of
 * linked sites, MeshLink) through compile_inputs.gateways, a list of
 * these merged into each snapshot build. All strings are borrowed for the
 * build.
 *
 * network: the network it reaches (required).
 * address: an IP address, or a DNS name resolved by the control loop's
 *          resolver with a NET_GATEWAY_MIN_TTL_MS minimum TTL.
 * port:    its mTLS port (AUTO_PASSTHROUGH, 15443 by convention).
 * source:  where it was declared, shown in /clusters and logs
 *          ("meshNetworks", "Service ns/name", "MeshLink name").
 * identity: an HBONE gateway's SPIFFE ID (port 15008: double HBONE);
 *          NULL for an AUTO_PASSTHROUGH one.
 */
struct net_gateway {
    const char *network;
    const char *address;
    uint32_t port;
    const char *source;
    const char *identity;
};

/* The port of an ambient (HBONE) east-west gateway. */
#define NET_HBONE_PORT 15008u

/* istiod resolves hostname gateways with a 30 s minimum TTL. */
#define NET_GATEWAY_MIN_TTL_MS 30000u

/* What the networks of a build are made of: this node's network, the
 * bootstrap's meshNetworks (NULL: none) and the gateways added at run
 * time. */
struct net_inputs {
    const char *node_network; /* "" or NULL: none */
    const struct bootstrap_mesh_networks *mesh;
    const struct net_gateway *extra;
    size_t nextra;
};

/* One gateway address: a gateway with its name resolved. identity:
 * an HBONE gateway's (NULL: AUTO_PASSTHROUGH). */
struct net_gw {
    char *network;
    struct addr addr;
    char *source;
    char *identity;
};

#define NET_V4 1u
#define NET_V6 2u

/* The networks of a build: the rules that put an endpoint on a network,
 * and every gateway address, sorted by network, address. */
struct net_cidr;
struct net_table {
    char *node_network; /* "": none */
    struct net_cidr *cidrs;
    size_t ncidrs;
    char **reg_net, **reg_name; /* fromRegistry: network, registry */
    size_t nregs;
    struct net_gw *gw;
    size_t ngw;
    unsigned families; /* NET_V4 | NET_V6: what this node can reach */
};

/*
 * net_table_build() makes t from in: meshNetworks' rules and gateways
 * (registryServiceName read from set: a Service's externalIPs, else the
 * service's endpoint addresses), the gateways of Services labelled
 * topology.istio.io/network (their externalIPs on the port the label
 * networking.istio.io/gatewayPort names, 15443 by default, when the
 * Service has that port), then in->extra. Names are looked up in dns (a
 * name not known yet gives no gateway until it resolves; NULL: names
 * give none). node_ns: the node's namespace (exportTo), NULL: all.
 * families: the IP families this node has (NET_V4 | NET_V6). 0, or -1
 * when memory is short (t is then disposable).
 */
int net_table_build(struct net_table *t, const struct net_inputs *in,
                    const struct resource_set *set, const char *node_ns,
                    const struct compile_dns *dns, unsigned families);
void net_table_dispose(struct net_table *t);

/* net_families() is the IP families this host has an address of
 * (NET_V4 | NET_V6; both when it cannot tell). */
unsigned net_families(void);

/*
 * net_endpoint_network() is the network of an endpoint at a: explicit
 * (WorkloadEntry or ServiceEntry endpoint network, an EndpointSlice's or
 * Service's label) when set, else its label topology.istio.io/network,
 * else the first meshNetworks network whose fromCidr holds its IP, else
 * the first whose fromRegistry is its label topology.istio.io/cluster,
 * else the node's network. Owned by t or labels; never NULL.
 */
const char *net_endpoint_network(const struct net_table *t,
                                 const char *explicit_net,
                                 const struct conf_strmap *labels,
                                 const struct addr *a);

/* net_has_gateway() is true when network has a gateway address in t. */
int net_has_gateway(const struct net_table *t, const char *network);

/* An endpoint before the split horizon: strings borrowed. An addr of
 * family AF_UNSPEC is a workload with no address of its own, reachable
 * only through its network's gateways. */
struct net_ep {
    struct addr addr;
    uint32_t weight; /* >= 1 */
    const char *network;
    const char *locality;
};

/* An endpoint after it: gw -1 when reached directly, else the index of
 * the gateway in the table it stands for (addr is the gateway's). */
struct net_out {
    struct addr addr;
    uint32_t weight;
    const char *network;
    const char *locality;
    int gw;
};

struct net_split_result {
    struct net_out *v;
    size_t n;
    uint32_t skipped_mtls;   /* remote endpoints of a cluster without mTLS */
    uint32_t skipped_family; /* no gateway of an IP family this node has */
    /* endpoints without an address (AF_UNSPEC: a WorkloadEntry with only
     * a network) whose network has no gateway */
    uint32_t skipped_no_gateway;
    uint32_t skipped_view; /* NET_SPLIT_LOCAL_VIEW: not on this network */
};

/* How net_split() treats a cluster. */
#define NET_SPLIT_MTLS 1u /* its traffic policy is ISTIO_MUTUAL */
/* An east-west gateway's cluster (AUTO_PASSTHROUGH): only endpoints on
 * the node's network (or with none), as Istio's east-west gateway runs
 * with ISTIO_META_REQUESTED_NETWORK_VIEW set to its own network; never
 * through another gateway, so two sites never relay to each other in a
 * loop. */
#define NET_SPLIT_LOCAL_VIEW 2u

/*
 * net_split() is Istio's split horizon over eps (n, in registry order)
 * for a cluster (flags: NET_SPLIT_*):
 *  - with NET_SPLIT_LOCAL_VIEW and a node network, the endpoints on it
 *    (or on none) unchanged, the others skipped;
 *  - without any gateway in t, eps unchanged;
 *  - an endpoint on the node's network (or with no network), or on a
 *    network without gateways, is used directly;
 *  - a remote endpoint of a cluster without mTLS is skipped (cross-network
 *    routing relies on the SNI of mTLS) unless its network has an HBONE
 *    gateway (double HBONE is mTLS of its own), and then goes through
 *    those only; one whose network has no gateway of a family in
 *    t->families is skipped;
 *  - each remote endpoint's weight times the scale factor (the least
 *    common multiple of the number of gateways of each network) is split
 *    evenly among its network's usable gateways, and each gateway becomes
 *    one endpoint with the summed weight (at least 1, at most UINT32_MAX).
 * Endpoints are grouped by locality (in the order each first appears),
 * each group's direct endpoints first in their order, then its gateways
 * in table order. out->v is allocated (free with net_split_dispose);
 * 0, or -1 when memory is short.
 */
int net_split(const struct net_table *t, const struct net_ep *eps, size_t n,
              unsigned flags, struct net_split_result *out);
void net_split_dispose(struct net_split_result *r);

/*
 * net_split_lists() is net_split() over parallel arrays (a compiler's
 * endpoint lists, each realloc'ed: addresses, weights, networks,
 * localities, *n of each), replaced by the result: the endpoints reached
 * directly and one per gateway standing for remote ones. *via gets each
 * one's gateway as "ADDR:PORT (SOURCE)", NULL when reached directly (the
 * array and strings allocated: net_via_free()); *sr the counts of what
 * was skipped (its v is freed). Network strings may point into t. -1
 * when memory is short (the lists unchanged).
 */
struct net_lists {
    struct addr **v;
    uint32_t **w;
    const char ***net, ***loc;
    size_t *n;
    /* NULL, or gets each endpoint's HBONE gateway identity (NULL: reached
     * directly or through an AUTO_PASSTHROUGH gateway; the array
     * allocated, the strings t's) */
    const char ***hbone_id;
};

int net_split_lists(const struct net_table *t, struct net_lists *l,
                    unsigned flags, char ***via, struct net_split_result *sr);
void net_via_free(char **via, size_t n);

/* net_scale_factor() is the least common multiple of the number of
 * gateway addresses of each network in t (1 without gateways). */
uint32_t net_scale_factor(const struct net_table *t);

#endif
