/*
 * meshNetworks in the bootstrap file: Istio's MeshNetworks (the mesh
 * config's meshNetworks, istio.io/latest/docs/reference/config/istio.mesh
 * .v1alpha1/#MeshNetworks), the networks endpoints are on and the
 * gateways that reach each one. Kept apart from bootstrap.c, as the HTTP
 * parts are.
 */
#include "config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "config/bootstrap.h"
#include "core/addr.h"
#include "core/buf.h"

#define OFF(type, field) offsetof(type, field)
#define END                                                                    \
    {                                                                          \
        NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL                   \
    }

static const char *const ep_choices[] = {"fromCidr", "fromRegistry", NULL};
static const char *const gw_choices[] = {"address", "registryServiceName",
                                         NULL};

static const struct conf_key net_ep_keys[] = {
    {"fromCidr", CONF_STR, OFF(struct bootstrap_net_endpoint, from_cidr), 0, 0,
     "", "endpoints whose IP is in this CIDR are on the network", NULL, NULL,
     NULL, NULL},
    {"fromRegistry", CONF_STR,
     OFF(struct bootstrap_net_endpoint, from_registry), 0, 0, "",
     "endpoints of this registry (their topology.istio.io/cluster label) are "
     "on the network",
     NULL, NULL, NULL, NULL},
    {"NetworkEndpoints", CONF_ONEOF, 0, 1, 0, NULL, NULL, ep_choices, NULL,
     NULL, NULL},
    END,
};
static const struct conf_section net_ep_section = {
    net_ep_keys, sizeof(struct bootstrap_net_endpoint),
    OFF(struct bootstrap_net_endpoint, mark)};

/* The port of Istio ambient's east-west (HBONE) gateways. */
#define HBONE_GATEWAY_PORT 15008

static const struct conf_key net_gw_keys[] = {
    {"address", CONF_STR, OFF(struct bootstrap_net_gateway, address), 0, 0, "",
     "the gateway's IP address or DNS name (resolved, 30 s minimum TTL)", NULL,
     NULL, NULL, NULL},
    {"registryServiceName", CONF_STR,
     OFF(struct bootstrap_net_gateway, registry_service_name), 0, 0, "",
     "a registry service whose addresses are the gateways (a Service's "
     "externalIPs, else its endpoints)",
     NULL, NULL, NULL, NULL},
    {"port", CONF_INT, OFF(struct bootstrap_net_gateway, port), 1, 65535,
     "15443",
     "the gateway's port: its mTLS (AUTO_PASSTHROUGH) port, or 15008 for "
     "an ambient (HBONE) east-west gateway, reached by double HBONE",
     NULL, NULL, NULL, NULL},
    {"identity", CONF_STR, OFF(struct bootstrap_net_gateway, identity), 0, 0,
     "",
     "an HBONE gateway's (port 15008) SPIFFE ID, which the outer tunnel "
     "verifies (strait's own key; required on port 15008, refused on "
     "others)",
     NULL, NULL, NULL, NULL},
    {"NetworkGateway", CONF_ONEOF, 0, 1, 0, NULL, NULL, gw_choices, NULL, NULL,
     NULL},
    END,
};
static const struct conf_section net_gw_section = {
    net_gw_keys, sizeof(struct bootstrap_net_gateway),
    OFF(struct bootstrap_net_gateway, mark)};

static const struct conf_key network_keys[] = {
    {"endpoints", CONF_LIST, OFF(struct bootstrap_network, endpoints), 0,
     BOOTSTRAP_MAX_NET_ENTRIES, NULL,
     "which endpoints are on the network (fromCidr or fromRegistry)", NULL,
     &net_ep_section, NULL, NULL},
    {"gateways", CONF_LIST, OFF(struct bootstrap_network, gateways), 0,
     BOOTSTRAP_MAX_NET_ENTRIES, NULL,
     "the gateways that reach the network's endpoints from other networks",
     NULL, &net_gw_section, NULL, NULL},
    END,
};
static const struct conf_section network_section = {
    network_keys, sizeof(struct bootstrap_network),
    OFF(struct bootstrap_network, mark)};

static const struct conf_key mesh_networks_keys[] = {
    {"networks", CONF_MAP, OFF(struct bootstrap_mesh_networks, networks), 0,
     BOOTSTRAP_MAX_NETWORKS, NULL,
     "network name -> its endpoints and gateways (Istio's MeshNetworks)", NULL,
     &network_section, NULL, NULL},
    END,
};
const struct conf_section bootstrap_mesh_networks_section = {
    mesh_networks_keys, 0, OFF(struct bootstrap_mesh_networks, mark)};

/* A network name: what a label value may be (Istio reads it from the
 * topology.istio.io/network label), 1-63 characters. */
static int net_name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

/* A gateway address: an IP, or a DNS name (letters, digits, '-', '.'). */
static int gw_address_ok(const char *s)
{
    struct in6_addr a6;
    size_t n = strlen(s);

    if (inet_pton(AF_INET6, s, &a6) == 1)
        return 1;
    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

int bootstrap_mesh_validate(const struct bootstrap *bs, const char *file,
                            struct buf *errs)
{
    const struct conf_map *m = &bs->mesh_networks.networks;
    char path[160];
    int nerr = 0;

    if (bs->node.network[0] != '\0' && !net_name_ok(bs->node.network)) {
        conf_error(errs, file, 0, 0, "node.network",
                   "'%s' is not a network name (1-63 characters of A-Z a-z "
                   "0-9 - _ .)",
                   bs->node.network);
        nerr++;
    }
    if (m->n > BOOTSTRAP_MAX_NETWORKS) {
        conf_error(errs, file, bs->mesh_networks.mark.line,
                   bs->mesh_networks.mark.col, "meshNetworks.networks",
                   "%zu networks, more than %d", m->n, BOOTSTRAP_MAX_NETWORKS);
        nerr++;
    }
    for (size_t i = 0; i < m->n; i++) {
        const struct bootstrap_network *nw = bootstrap_network_at(bs, i);

        snprintf(path, sizeof(path), "meshNetworks.networks.%s", m->keys[i]);
        if (!net_name_ok(m->keys[i])) {
            conf_error(errs, file, nw->mark.line, nw->mark.col, path,
                       "not a network name (1-63 characters of A-Z a-z 0-9 - "
                       "_ .)");
            nerr++;
        }
        for (size_t k = 0; k < nw->endpoints.n; k++) {
            const struct bootstrap_net_endpoint *e =
                (const struct bootstrap_net_endpoint *)nw->endpoints.v + k;
            int family;
            uint8_t bytes[16];
            unsigned prefix;
            const char *why = NULL;

            if (e->from_cidr[0] != '\0' &&
                addr_cidr_parse(e->from_cidr, &family, bytes, &prefix, &why) <
                    0) {
                conf_error(errs, file, e->mark.line, e->mark.col, path,
                           "endpoints[%zu].fromCidr: '%s': %s", k, e->from_cidr,
                           why);
                nerr++;
            }
        }
        for (size_t k = 0; k < nw->gateways.n; k++) {
            const struct bootstrap_net_gateway *g =
                (const struct bootstrap_net_gateway *)nw->gateways.v + k;

            if (g->address[0] != '\0' && !gw_address_ok(g->address)) {
                conf_error(errs, file, g->mark.line, g->mark.col, path,
                           "gateways[%zu].address: '%s' is neither an IP "
                           "address nor a DNS name",
                           k, g->address);
                nerr++;
            }
            if (g->port == HBONE_GATEWAY_PORT &&
                strncmp(g->identity, "spiffe://", 9) != 0) {
                /* Istio ambient's east-west gateway (double HBONE): the
                 * outer tunnel ends at the gateway, and is verified
                 * against its identity, which meshNetworks cannot say. */
                conf_error(errs, file, g->mark.line, g->mark.col, path,
                           "gateways[%zu]: port %d is an HBONE (ambient "
                           "east-west) gateway, reached by double HBONE: "
                           "give its SPIFFE ID as identity (for example "
                           "spiffe://cluster.local/ns/istio-system/sa/"
                           "istio-eastwestgateway)%s",
                           k, HBONE_GATEWAY_PORT,
                           g->identity[0] != '\0' ? "; it must start with "
                                                    "spiffe://"
                                                  : "");
                nerr++;
            } else if (g->port != HBONE_GATEWAY_PORT &&
                       g->identity[0] != '\0') {
                conf_error(errs, file, g->mark.line, g->mark.col, path,
                           "gateways[%zu].identity: only an HBONE gateway "
                           "(port %d) has one; through an AUTO_PASSTHROUGH "
                           "gateway TLS goes end to end to the workload, "
                           "whose identity the DestinationRule or service "
                           "gives",
                           k, HBONE_GATEWAY_PORT);
                nerr++;
            }
        }
    }
    return nerr;
}
