#ifndef STRAIT_SERVER_ISTIO_H
#define STRAIT_SERVER_ISTIO_H

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"

struct bootstrap;
struct cluster;
struct resource_set;

/*
 * Gateways become listeners: the servers of every Gateway whose selector
 * matches this node's labels, grouped by bind address and port. One
 * listener serves all the servers on its port (Istio merges them the same
 * way); HTTPS servers give it their certificates.
 */
/* One Gateway server on the listener's port. */
struct gw_server {
    char *gateway; /* "ns/name" */
    char **hosts;  /* "[ns/]host" as written */
    size_t nhosts;
};

struct gw_listener {
    char name[64];
    struct addr address;
    uint32_t port;
    int tls;
    char **certs; /* cert, key pairs: 2 * ncerts paths */
    size_t ncerts;
    struct gw_server *servers;
    size_t nservers;
    int https_redirect;
    char *json; /* what the listener is, for change detection */
};

struct gw_set {
    struct gw_listener *v;
    size_t n;
};

/* istio_gateways() lowers the selected Gateways; -1 with *err when two
 * servers on one port cannot share it (plaintext and TLS). Servers of
 * protocols strait does not serve from Gateways yet (TCP, TLS
 * passthrough) are skipped with a warning. */
int istio_gateways(const struct bootstrap *bs, const struct resource_set *set,
                   struct gw_set *out, char **err);
void gw_set_dispose(struct gw_set *g);

/*
 * Destinations become clusters: (host, subset, port) resolved against
 * ServiceEntries, WorkloadEntries and DestinationRules. A table collects
 * them while routers are built and owns one reference to each.
 */
struct istio_clusters {
    const struct resource_set *set;
    int nworkers;
    struct cluster **v;
    char **keys; /* "host|subset|port" */
    size_t n;
};

void istio_clusters_init(struct istio_clusters *t,
                         const struct resource_set *set, int nworkers);
void istio_clusters_dispose(struct istio_clusters *t);

/* istio_cluster_id() finds or builds the cluster for a destination and
 * returns its index, or -1 when memory runs out. A destination with no
 * endpoint still gets a cluster (its requests are answered 503 UH). */
int istio_cluster_id(void *table, const char *host, const char *subset,
                     uint32_t port);

#endif
