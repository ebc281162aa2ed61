#include "config.h"

#include <stddef.h>

#include "proxy/stats.h"

#define RELAY_FIELD(name, member)                                              \
    {                                                                          \
        name, offsetof(struct relay_counters, member), STATS_NONE              \
    }

static const struct stats_field relay_fields[] = {
    RELAY_FIELD("downstream_cx_rx_bytes_total", bytes_in),
    RELAY_FIELD("downstream_cx_tx_bytes_total", bytes_out),
    RELAY_FIELD("upstream_cx_rx_bytes_total", upstream_bytes_in),
    RELAY_FIELD("upstream_cx_tx_bytes_total", upstream_bytes_out),
    RELAY_FIELD("upstream_cx_connect_fail", connect_failures),
    RELAY_FIELD("upstream_cx_connect_timeout", connect_timeouts),
    RELAY_FIELD("idle_timeout", idle_timeouts),
    RELAY_FIELD("no_filter_chain_match", no_route),
    RELAY_FIELD("tls_inspector.client_hello_errors", client_hello_errors),
    RELAY_FIELD("registry_only_refused", registry_only),
    RELAY_FIELD("auto_passthrough.relayed", ap_relayed),
    RELAY_FIELD("auto_passthrough.refused_bad_sni", ap_bad_sni),
    RELAY_FIELD("auto_passthrough.refused_alpn", ap_alpn),
    RELAY_FIELD("auto_passthrough.refused_unknown_host", ap_unknown_host),
    RELAY_FIELD("auto_passthrough.refused_unknown_port", ap_unknown_port),
    RELAY_FIELD("auto_passthrough.refused_unknown_subset", ap_unknown_subset),
    RELAY_FIELD("auto_passthrough.refused_no_endpoint", ap_no_endpoint),
    RELAY_FIELD("hbone.tunnels_opened", hbone_opened),
    {"hbone.tunnels_active", offsetof(struct relay_counters, hbone_opened),
     offsetof(struct relay_counters, hbone_closed)},
    RELAY_FIELD("hbone.refused_bad_request", hbone_bad_request),
    RELAY_FIELD("hbone.refused_unknown_destination", hbone_unknown_destination),
    RELAY_FIELD("hbone.refused_denied", hbone_denied),
    RELAY_FIELD("hbone.refused_no_endpoint", hbone_no_endpoint),
    RELAY_FIELD("hbone.refused_connect_failed", hbone_connect_failed),
    RELAY_FIELD("hbone.refused_too_many_tunnels", hbone_too_many),
    RELAY_FIELD("hbone.refused_overload", hbone_overload),
    RELAY_FIELD("lua.states_created", lua_states),
};

const struct stats_desc relay_counters_desc = {
    "", relay_fields, sizeof(relay_fields) / sizeof(relay_fields[0])};

static const struct stats_part proxy_parts[] = {
    {&listener_counters_desc, offsetof(struct proxy_counters, listener)},
    {&relay_counters_desc, offsetof(struct proxy_counters, relay)},
    {&http_counters_desc, offsetof(struct proxy_counters, http)},
    {&tls_counters_desc, offsetof(struct proxy_counters, tls)},
    {&h2_counters_desc, offsetof(struct proxy_counters, h2)},
};

const struct stats_layout proxy_stats_layout = {
    sizeof(struct proxy_counters), proxy_parts,
    sizeof(proxy_parts) / sizeof(proxy_parts[0])};

struct stats_block *proxy_stats_new(const char *name, int nworkers)
{
    return stats_block_new(&proxy_stats_layout, name, nworkers);
}
