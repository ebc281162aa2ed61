/*
 * What `strait check -c` says of networks (east-west, issue 15): an
 * endpoint whose network is neither this node's nor one with a gateway
 * (meshNetworks, or a Service labelled topology.istio.io/network) is used
 * directly, by Istio's rule, which is rarely what was meant; and one with
 * no address of its own on such a network is left out. STR0009, a
 * Warning: the gateway may come at run time (a linked site).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "config/analyze.h"
#include "config/bootstrap.h"
#include "config/resource.h"

static const char *label_of(const struct conf_strmap *m, const char *key)
{
    for (size_t i = 0; m != NULL && i < m->n; i++)
        if (strcmp(m->v[i].key, key) == 0 && m->v[i].val[0] != '\0')
            return m->v[i].val;
    return NULL;
}

/* Does network have a gateway the node knows of before run time? */
static int has_gateway(const struct resource_set *set,
                       const struct analysis_node *node, const char *network)
{
    const struct bootstrap_mesh_networks *m = node->mesh;

    for (size_t i = 0; m != NULL && i < m->networks.n; i++)
        if (strcmp(m->networks.keys[i], network) == 0 &&
            ((const struct bootstrap_network *)m->networks.v)[i].gateways.n > 0)
            return 1;
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const char *l;
        if (r->kind == RES_SERVICE &&
            (l = label_of(&r->meta.labels, RES_NETWORK_LABEL)) != NULL &&
            strcmp(l, network) == 0 &&
            ((const struct res_k8s_service *)r->spec)->external_ips.n > 0)
            return 1;
    }
    return 0;
}

static void check_endpoint(const struct resource_set *set,
                           const struct analysis_node *node,
                           const struct resource *r,
                           const struct res_workload_entry *we,
                           const char *path, struct res_msgs *msgs)
{
    const char *net = we->network;
    const char *here = node->network ? node->network : "";
    char who[600];

    if (net == NULL || net[0] == '\0')
        net = label_of(&we->labels, RES_NETWORK_LABEL);
    if (net == NULL || strcmp(net, here) == 0 || has_gateway(set, node, net))
        return;
    snprintf(who, sizeof(who), "%s %s/%s", res_kind_name(r->kind), r->meta.ns,
             r->meta.name);
    if (we->address == NULL || we->address[0] == '\0')
        res_msgs_add(msgs, "STR0009", RES_WARNING, r->file, we->mark.line,
                     we->mark.col, who, path,
                     "endpoint on network %s, which has no gateway "
                     "(meshNetworks, or a Service labelled %s): it has no "
                     "address of its own and is left out",
                     net, RES_NETWORK_LABEL);
    else
        res_msgs_add(msgs, "STR0009", RES_WARNING, r->file, we->mark.line,
                     we->mark.col, who, path,
                     "endpoint on network %s, which has no gateway "
                     "(meshNetworks, or a Service labelled %s): it is "
                     "reached directly at %s, as if on this node's network "
                     "%s (Istio's rule)",
                     net, RES_NETWORK_LABEL, we->address,
                     here[0] ? here : "(none)");
}

/* Is host (a full name) a service of the set? */
static int registry_has(const struct resource_set *set, const char *host)
{
    char fq[512];

    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_service_entry *se;
        if (!res_is_service(r) || (se = res_service_entry(r)) == NULL)
            continue;
        for (size_t k = 0; k < se->hosts.n; k++)
            if (res_host_fqdn(se->hosts.v[k], r->meta.ns, set->domain, fq,
                              sizeof(fq)) >= 0 &&
                strcmp(fq, host) == 0)
                return 1;
    }
    return 0;
}

static void check_registry_gateways(const struct resource_set *set,
                                    const struct analysis_node *node,
                                    struct res_msgs *msgs)
{
    const struct bootstrap_mesh_networks *m = node->mesh;
    char path[300];

    for (size_t i = 0; m != NULL && i < m->networks.n; i++) {
        const struct bootstrap_network *nw =
            (const struct bootstrap_network *)m->networks.v + i;
        for (size_t k = 0; k < nw->gateways.n; k++) {
            const struct bootstrap_net_gateway *g =
                (const struct bootstrap_net_gateway *)nw->gateways.v + k;
            const char *h = g->registry_service_name;
            if (h == NULL || h[0] == '\0' || registry_has(set, h))
                continue;
            snprintf(path, sizeof(path),
                     "meshNetworks.networks.%s.gateways[%zu]",
                     m->networks.keys[i], k);
            res_msgs_add(msgs, "STR0009", RES_WARNING,
                         node->bootstrap_file ? node->bootstrap_file : "",
                         g->mark.line, g->mark.col, "bootstrap", path,
                         "registryServiceName %s is no service of the "
                         "registry: network %s gets no gateway from it",
                         h, m->networks.keys[i]);
        }
    }
}

void analyze_networks(const struct resource_set *set,
                      const struct analysis_node *node, struct res_msgs *msgs)
{
    char path[64];

    check_registry_gateways(set, node, msgs);
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];

        if (r->kind == RES_WORKLOAD_ENTRY) {
            check_endpoint(set, node, r, res_workload_entry(r), "spec", msgs);
        } else if (r->kind == RES_SERVICE_ENTRY) {
            const struct res_service_entry *se = res_service_entry(r);
            for (size_t k = 0; k < se->endpoints.n; k++) {
                snprintf(path, sizeof(path), "spec.endpoints[%zu]", k);
                check_endpoint(
                    set, node, r,
                    (const struct res_workload_entry *)se->endpoints.v + k,
                    path, msgs);
            }
        }
    }
}
