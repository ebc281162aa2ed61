#ifndef STRAIT_CONFIG_RES_K8S_H
#define STRAIT_CONFIG_RES_K8S_H

#include <stddef.h>
#include <stdint.h>

#include "config/resource-t.h"

/*
 * Kubernetes kinds in the configuration directory (res-k8s.c): v1
 * Service, Secret, Namespace and discovery.k8s.io/v1 EndpointSlice, read
 * as istiod reads them. Other Kubernetes kinds are ignored with an Info.
 */

/* res_k8s_kind() is RES_SERVICE, ... for a Kubernetes kind strait reads
 * (apiVersion api, kind), or -1. */
int res_k8s_kind(const char *api, const char *kind);

/*
 * res_k8s_link() builds each Service's registry entry (its spec's entry)
 * from the set's EndpointSlices and the Service itself; it runs once
 * every file is read. -1 when memory ran out (a Service is then left
 * without one; res_service_entry() gives an empty entry).
 */
int res_k8s_link(struct resource_set *set);

/* res_k8s_port_protocol() is the enum res_protocol Istio gives a Service
 * port: UDP, else by appProtocol or the name's prefix, else TCP (where
 * Istio sniffs). */
int res_k8s_port_protocol(const struct res_k8s_port *p);

/* res_k8s_slice_service() is the Service an EndpointSlice belongs to
 * (label kubernetes.io/service-name), or NULL. */
const char *res_k8s_slice_service(const struct resource *slice);

/* res_k8s_endpoint_used() is true when traffic goes to ep, an endpoint of
 * svc (NULL: no Service known): Istio's rule, ready nil or true, unless
 * the Service publishes not-ready addresses. */
int res_k8s_endpoint_used(const struct res_k8s_service *svc,
                          const struct res_k8s_endpoint *ep);

/*
 * res_k8s_gateway_port() is the port a Gateway server of port `port`
 * listens on, as istiod resolves it for a gateway selected by labels:
 * the targetPort of the TCP port numbered `port` of the gateway's own
 * Service, when that targetPort is a number; else `port` itself. The own
 * Service is the one `service` names ("NS/NAME", or "NAME" in ns), or,
 * with service NULL or "", each Service of namespace ns whose selector
 * the node's labels match. Several targetPorts: the lowest. *by (when
 * by is not NULL) is the Service that translated the port, or NULL.
 */
struct conf_strmap;
/* res_k8s_own_service() is true when r, a Service, is the gateway's own:
 * the one service names ("NS/NAME", or "NAME" in ns), else, with service
 * NULL or "", a Service of ns whose selector the node's labels match, as
 * istiod finds the Services of a proxy. */
int res_k8s_own_service(const struct resource *r, const char *ns,
                        const struct conf_strmap *labels, const char *service);
int64_t res_k8s_gateway_port(const struct resource_set *set, const char *ns,
                             const struct conf_strmap *labels,
                             const char *service, int64_t port,
                             const struct resource **by);

/* res_k8s_secret() is r's Secret spec, or NULL for another kind. The
 * decoded values (val, len) are owned by r; never log or show them. */
const struct res_k8s_secret *res_k8s_secret(const struct resource *r);

/* res_k8s_find_secret() is the Secret ns/name of the set that can be a
 * credential (type kubernetes.io/tls or Opaque), or NULL. */
const struct resource *res_k8s_find_secret(const struct resource_set *set,
                                           const char *ns, const char *name);

/* res_secret_key_name() is "tls.crt", "tls.key", "ca.crt" or "ca.crl" for
 * an enum res_secret_key. */
const char *res_secret_key_name(int key);

/* res_secret_set_path() records the file the running gateway reads key
 * (enum res_secret_key) of Secret r from (the control loop makes it);
 * the path is copied. 0, or -1 (not a Secret, bad key, out of memory). */
int res_secret_set_path(struct resource *r, int key, const char *path);

/* res_k8s_reference() writes one line per key of the Kubernetes kinds, as
 * conf_reference() does for the bootstrap (`strait reference kubernetes`). */
struct buf;
void res_k8s_reference(struct buf *b);

#endif
