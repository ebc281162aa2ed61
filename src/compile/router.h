#ifndef STRAIT_COMPILE_ROUTER_H
#define STRAIT_COMPILE_ROUTER_H

#include <stddef.h>
#include <stdint.h>

struct conf_strmap;
struct resource_set;
struct router;

/*
 * The cluster key callback: the index of the cluster for a fully qualified
 * host, a subset (NULL: none) and a port (0: not given), or -1 when the
 * host is unknown. Called only from router_build(), on its thread.
 */
typedef int (*router_cluster_fn)(void *ctx, const char *fqdn_host,
                                 const char *subset, uint32_t port);

/*
 * One gateway server the router serves: the Gateway it belongs to as
 * "ns/name" ("mesh" binds the VirtualServices of the mesh), and its hosts
 * as written ("[ns/]host": ns "*" any namespace, "." the Gateway's own,
 * "~" none; host "*", "*.suffix" or a name).
 */
struct router_server {
    const char *gateway;
    const char *const *hosts;
    size_t nhosts;
};

struct router_params {
    const struct resource_set *set;
    const struct router_server *servers;
    size_t nservers;
    router_cluster_fn cluster_id;
    void *ctx;
    /* The node, for match blocks with sourceNamespace or sourceLabels
     * (on a gateway Istio compares them with the gateway's own). NULL: such
     * blocks never match. */
    const char *node_ns;
    const struct conf_strmap *node_labels;
};

/*
 * router_build() compiles the routes of the VirtualServices in p->set that
 * are bound to p->servers, with Istio's binding rules: a VirtualService
 * listing a server's gateway (a name without namespace is in the
 * VirtualService's namespace; no gateways means "mesh") is bound through
 * that server for each of its hosts that has a name in common with a
 * server host whose namespace part admits it; the virtual host's domain is
 * the narrower of the two. VirtualServices sharing a domain have their
 * rules merged in set order (first match wins). Match blocks that name
 * gateways the VirtualService is not bound through are dropped, and a rule
 * whose blocks are all dropped with them. Delegate rules are skipped.
 *
 * Returns a router with one reference, or NULL with an allocated message in
 * *err (the caller frees it).
 */
struct router *router_build(const struct router_params *p, char **err);

/*
 * A rule lowered into the router from outside VirtualServices (a
 * bootstrap listener's `routes:`): a host pattern (a name, "*.suffix" or
 * "*", without regard to case), a path prefix (the path without its
 * query must start with it; "" matches every path), one destination
 * cluster (an index the caller gives meaning to) and a timeout (0: none).
 * No retries, faults, mirror or header operations.
 */
struct router_rule {
    const char *host;
    const char *prefix;
    int cluster;
    uint64_t timeout_ms;
};

/*
 * router_build_rules() compiles n lowered rules into a router where a
 * request takes the first rule, in the order given, whose host and prefix
 * match it (the bootstrap's rule), whatever hosts the other rules name.
 * Nothing of v is kept. Returns a router with one reference, or NULL with
 * an allocated *err.
 */
struct router *router_build_rules(const struct router_rule *v, size_t n,
                                  char **err);

#endif
