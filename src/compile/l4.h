#ifndef STRAIT_COMPILE_L4_H
#define STRAIT_COMPILE_L4_H

#include "config/bootstrap.h"
#include "compile/compile.h"

struct gw_listener;
struct ident_map;
struct gw_tls;
struct resource_set;
struct tls_server_cert;

/*
 * compile_l4() builds the L4 proxy (l4_listener.h) of a Gateway listener of
 * TCP and TLS servers, from the tls and tcp rules of the VirtualServices
 * bound to them, with Istio's rules (pilot's gateway network filters):
 *
 * - a VirtualService exported to the node's namespace is bound through a
 *   server when it lists the server's Gateway and one of its hosts has a
 *   name in common with a server host that admits its namespace;
 * - a match block applies when its port is 0 or the listener's, its
 *   gateways are empty or name the server's Gateway, and its sourceLabels
 *   and sourceNamespace (compared with the node's, as on a gateway) fit;
 *   a rule with match blocks none of which applies is left out;
 * - PASSTHROUGH servers: each tls rule's sniHosts (narrowed to the server
 *   hosts that admit them) go into the SNI table; a name already there
 *   keeps its first rule, as Istio drops duplicate SNI filter chains;
 * - TCP servers, and TLS servers terminated here: their tcp rules in
 *   VirtualService order; the first whose destinationSubnets and
 *   sourceSubnet admit a connection takes it.
 *
 * Clusters are shared through prev and next as compile_gateway_routes()
 * shares them (see istio_clusters). -1 with an allocated *err (certificate
 * files that do not load).
 */
int compile_l4(const struct bootstrap *bs, const struct resource_set *set,
               const struct gw_listener *g, struct stats_block *stats,
               const struct compile_env *env, const struct ident_map *prev,
               struct ident_map *next, struct compiled_listener *out,
               char **err);

/* gw_tls_to_cert() fills c's client-certificate settings from a Gateway
 * server's, and for ISTIO_MUTUAL its certificate provider and mesh root
 * (c keeps pointers into t). t NULL: none. */
void gw_tls_to_cert(const struct gw_tls *t, struct tls_server_cert *c);

#endif
