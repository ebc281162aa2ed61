#ifndef STRAIT_CONFIG_GWAPI_H
#define STRAIT_CONFIG_GWAPI_H

#include <stddef.h>
#include <stdint.h>

#include "config/resource-t.h"

struct buf;

/*
 * The Kubernetes Gateway API (gateway.networking.k8s.io) lowered into the
 * Istio model strait compiles, as istiod lowers it: each listener of a
 * Gateway of a class strait implements becomes an Istio Gateway, and the
 * HTTPRoutes attached to it become one VirtualService per (listener,
 * hostname), whose http rules are sorted by the API's precedence. The
 * data path therefore has no Gateway API code and no extra cost.
 * docs/gateway-api.md is the user's account of it.
 */

/* The API's own limits (its CRD validation). */
#define RES_GWAPI_MAX_LISTENERS 64
#define RES_GWAPI_MAX_RULES 16
#define RES_GWAPI_MAX_MATCHES 64
#define RES_GWAPI_MAX_ROUTE_MATCHES 128

/* The name lowered resources' messages point at. */
#define GWAPI_FILE "(gateway-api)"
/* The annotation of a lowered Istio Gateway naming its Gateway API
 * Gateway; the node's gateway-name label is compared with it. */
#define GWAPI_ANNOTATION "strait.io/gateway-api-gateway"
#define GWAPI_NAME_LABEL "gateway.networking.k8s.io/gateway-name"

/*
 * gwapi_host_intersect() is the hostname a route hostname h serves on a
 * listener of hostname l (either NULL: any): the more specific of the
 * two when one contains the other ("*.example.com" and "a.example.com"
 * give "a.example.com"), "*" when both are NULL, NULL when they are
 * disjoint. The result points into l or h or is a static "*".
 */
const char *gwapi_host_intersect(const char *l, const char *h);

/* What orders one match among those of every route on a hostname. */
struct gwapi_order {
    int path_rank;   /* 3 Exact, 2 PathPrefix, 1 RegularExpression */
    size_t path_len; /* its value's length */
    int method;      /* a method is matched */
    size_t nheaders;
    size_t nquery;
    const char *created; /* creationTimestamp; NULL: not known */
    const char *ns;
    const char *name;
    size_t rule; /* index of the rule in the route */
    size_t match;
};

/*
 * gwapi_order_cmp() orders two matches by the API's precedence: an Exact
 * path first, then the longest prefix, a method match, the most header
 * matches, the most query matches, then the oldest route, then
 * namespace/name alphabetically, then rule and match order. Negative
 * when a goes first.
 */
int gwapi_order_cmp(const struct gwapi_order *a, const struct gwapi_order *b);

/*
 * gwapi_node_serves() says whether a node of namespace node_ns (NULL: not
 * known) and labels serves the Istio Gateway r: always, unless r was
 * lowered from a Gateway API Gateway and the node has the label
 * gateway.networking.k8s.io/gateway-name, when only that Gateway of the
 * node's namespace is served (as on the pods Istio deploys for one).
 */
int gwapi_node_serves(const struct resource *r, const char *node_ns,
                      const struct conf_strmap *labels);

/*
 * gwapi_lower() writes, as YAML documents into out, the Istio Gateways
 * and VirtualServices that set's Gateway API objects mean, sets each
 * Gateway API object's status (resource.status) and adds a warning to
 * set->msgs for each unhappy condition. Returns 0, or -1 when memory ran
 * out.
 */
int gwapi_lower(struct resource_set *set, struct buf *out);

#endif
