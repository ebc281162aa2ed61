#include "config.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "admin/admin.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/json.h"
#include "core/log.h"
#include "event/timer.h"
#include "net/acceptor.h"
#include "net/sock.h"
#include "net/sock_pool.h"
#include "proxy/stats.h"
#include "core/geoip.h"
#include "upstream/cluster.h"
#include "upstream/hash.h"
#include "upstream/outlier.h"
#include "upstream/priority.h"

#define ADMIN_BODY_MAX (16 * 1024 * 1024)

struct admin {
    struct evhttp *http;
    enum admin_port kind;
    struct evhttp_bound_socket *bound_sock; /* NULL once stopped */
    struct admin_ops ops;
    int fd;
    struct addr bound; /* the admin's own address, allowed as Host */
    /* The policy in effect: owned copies. */
    char **hosts;
    size_t nhosts;
    char **origins;
    size_t norigins;
};

static void strs_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static char **strs_dup(const char *const *v, size_t n)
{
    char **out = calloc(n ? n : 1, sizeof(*out));

    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if ((out[i] = strdup(v[i])) == NULL) {
            strs_free(out, i);
            return NULL;
        }
    return out;
}

int admin_set_policy(struct admin *a, const struct admin_policy *p)
{
    char **h = strs_dup(p->hosts, p->nhosts);
    char **o = strs_dup(p->origins, p->norigins);

    if (h == NULL || o == NULL) {
        strs_free(h, h ? p->nhosts : 0);
        strs_free(o, o ? p->norigins : 0);
        return -1;
    }
    strs_free(a->hosts, a->nhosts);
    strs_free(a->origins, a->norigins);
    a->hosts = h;
    a->nhosts = p->nhosts;
    a->origins = o;
    a->norigins = p->norigins;
    return 0;
}

/* The host part of a Host value: "[::1]:80" -> "::1", "a:80" -> "a". */
static void host_part(const char *host, char *out, size_t n)
{
    const char *end;
    size_t len;

    if (host[0] == '[') {
        host++;
        end = strchr(host, ']');
    } else {
        end = strrchr(host, ':');
        /* More than one colon without brackets: not a host:port. */
        if (end != NULL && strchr(host, ':') != end)
            end = NULL;
    }
    len = end != NULL ? (size_t)(end - host) : strlen(host);
    if (len >= n)
        len = n - 1;
    memcpy(out, host, len);
    out[len] = '\0';
    /* A fully qualified name may end with a dot. */
    if (len > 0 && out[len - 1] == '.')
        out[len - 1] = '\0';
}

static int is_loopback_literal(const char *h)
{
    struct in_addr a4;
    struct in6_addr a6;

    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, h, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return strcasecmp(h, "localhost") == 0;
}

int admin_host_allowed(const struct admin_policy *p, const struct addr *bound,
                       const char *host)
{
    char h[256], b[ADDR_STRLEN], bh[256];

    /* No Host at all (HTTP/1.0, some probes) is never a browser's. */
    if (host == NULL || host[0] == '\0')
        return 1;
    host_part(host, h, sizeof(h));
    if (is_loopback_literal(h))
        return 1;
    if (bound != NULL) {
        host_part(addr_format(bound, b, sizeof(b)), bh, sizeof(bh));
        if (strcasecmp(h, bh) == 0 && strcmp(bh, "0.0.0.0") != 0 &&
            strcmp(bh, "::") != 0)
            return 1;
    }
    for (size_t i = 0; i < p->nhosts; i++) {
        char allowed[256];
        if (strcasecmp(host, p->hosts[i]) == 0)
            return 1;
        /* An entry without a port admits the name on any port. */
        host_part(p->hosts[i], allowed, sizeof(allowed));
        if (strcmp(allowed, p->hosts[i]) == 0 && strcasecmp(h, allowed) == 0)
            return 1;
    }
    return 0;
}

int admin_origin_allowed(const struct admin_policy *p, const char *origin)
{
    if (origin == NULL)
        return 1; /* not a browser's cross-site request */
    for (size_t i = 0; i < p->norigins; i++)
        if (strcasecmp(origin, p->origins[i]) == 0)
            return 1;
    return 0;
}

static void admin_policy_of(const struct admin *a, struct admin_policy *p)
{
    p->hosts = (const char *const *)a->hosts;
    p->nhosts = a->nhosts;
    p->origins = (const char *const *)a->origins;
    p->norigins = a->norigins;
}

/* The ejection reasons, as Envoy's statistics name them. */
static const char *const outlier_reason[OUTLIER_NREASONS] = {
    [OUTLIER_5XX] = "consecutive_5xx",
    [OUTLIER_GATEWAY] = "consecutive_gateway_failure",
    [OUTLIER_LOCAL] = "consecutive_local_origin_failure",
};

/* Envoy's outlier detection statistics of a cluster. */
static void outlier_stats(struct buf *b, const char *name, struct outlier *od)
{

    buf_printf(b,
               "cluster.%s.outlier_detection.ejections_enforced_total: %" PRIu64
               "\n",
               name, __atomic_load_n(&od->total, __ATOMIC_RELAXED));
    buf_printf(b,
               "cluster.%s.outlier_detection.ejections_active: %" PRIu64 "\n",
               name, outlier_active(od, clock_ms()));
    buf_printf(b,
               "cluster.%s.outlier_detection.ejections_overflow: %" PRIu64 "\n",
               name, __atomic_load_n(&od->overflow, __ATOMIC_RELAXED));
    for (int r = 0; r < OUTLIER_NREASONS; r++)
        buf_printf(
            b,
            "cluster.%s.outlier_detection.ejections_enforced_%s: %" PRIu64 "\n",
            name, outlier_reason[r],
            __atomic_load_n(&od->by_reason[r], __ATOMIC_RELAXED));
}

/* Where stats_each() prints a listener's counters. */
struct stat_line {
    struct buf *b;
    const char *name;
};

static void print_stat(void *arg, const char *prefix, const char *name,
                       uint64_t value)
{
    const struct stat_line *line = arg;

    buf_printf(line->b, "listener.%s.%s%s: %" PRIu64 "\n", line->name, prefix,
               name, value);
}

static void print_lua_error(void *ctx, const char *listener, const char *policy,
                            const char *phase, const char *reason, uint64_t n)
{
    buf_printf(ctx, "lua.%s.%s.%s.%s: %" PRIu64 "\n", listener, policy, phase,
               reason, n);
}

void admin_render_stats(const struct admin_ops *ops, struct buf *b)
{
    struct stats_block *const *ls;
    size_t n = ops->listeners(ops->arg, &ls);
    struct admin_status st;

    ops->status(ops->arg, &st);
    buf_printf(b, "server.workers: %d\n", st.workers);
    buf_printf(b, "server.restart_epoch: %d\n", st.restart_epoch);
    buf_printf(b, "server.draining: %d\n", st.draining);
    buf_printf(b, "server.uptime_ms: %" PRIu64 "\n", st.uptime_ms);
    buf_printf(b, "server.reloads_ok: %" PRIu64 "\n", st.reloads_ok);
    buf_printf(b, "server.reloads_failed: %" PRIu64 "\n", st.reloads_failed);
    if (st.last_reload_error != NULL) {
        buf_puts(b, "server.last_reload_error: ");
        json_str(b, st.last_reload_error);
        buf_puts(b, "\n");
    }
    buf_printf(b, "server.pid: %d\n", st.pid);
    buf_printf(b, "server.serving: %d\n", st.serving);
    buf_printf(b, "server.upgrades_ok: %" PRIu64 "\n", st.upgrades_ok);
    buf_printf(b, "server.upgrades_failed: %" PRIu64 "\n", st.upgrades_failed);
    buf_printf(b, "server.upgrade_running: %d\n", st.upgrade_running);
    buf_printf(b, "server.upgrade_pid: %d\n", st.upgrade_pid);
    if (st.last_upgrade_error != NULL) {
        buf_puts(b, "server.last_upgrade_error: ");
        json_str(b, st.last_upgrade_error);
        buf_puts(b, "\n");
    }
    buf_printf(b, "server.rebuilds_ok: %" PRIu64 "\n", st.rebuilds_ok);
    buf_printf(b, "server.rebuilds_failed: %" PRIu64 "\n", st.rebuilds_failed);
    if (st.last_rebuild_error != NULL) {
        buf_puts(b, "server.last_rebuild_error: ");
        json_str(b, st.last_rebuild_error);
        buf_puts(b, "\n");
    }
    buf_printf(b, "access_log.written: %" PRIu64 "\n", st.alog_written);
    buf_printf(b, "access_log.dropped: %" PRIu64 "\n", st.alog_dropped);
    buf_printf(b, "access_log.write_errors: %" PRIu64 "\n",
               st.alog_write_errors);
    buf_printf(b, "access_log.reopens: %" PRIu64 "\n", st.alog_reopens);
    buf_printf(b, "server.downstream_cx_active: %" PRId64 "\n", st.cx_active);
    buf_printf(b, "server.max_connections: %" PRId64 "\n", st.cx_max);
    buf_printf(b, "overload.memory_limit_bytes: %" PRIu64 "\n",
               st.memory_limit);
    buf_printf(b, "overload.memory_used_bytes: %" PRIu64 "\n", st.memory_used);
    buf_printf(b, "server.memory_allocated_bytes: %" PRIu64 "\n",
               st.heap_allocated);
    for (int a = 0; a < OVERLOAD_NACTIONS; a++) {
        buf_printf(b, "overload.%s.active: %d\n", overload_action_name(a),
                   (st.overload & OVERLOAD_BIT(a)) != 0);
        buf_printf(b, "overload.%s.activations: %" PRIu64 "\n",
                   overload_action_name(a), st.overload_activations[a]);
    }
    if (st.has_identity) {
        buf_printf(b, "ca.identity_unstored: %d\n", st.identity_unstored);
        buf_printf(b, "ca.identity_store_failures: %" PRIu64 "\n",
                   st.identity_store_failures);
        if (st.identity_store_error != NULL) {
            buf_puts(b, "ca.identity_store_error: ");
            json_str(b, st.identity_store_error);
            buf_puts(b, "\n");
        }
        buf_printf(b, "ca.identity_renew_failures: %" PRIu64 "\n",
                   st.identity_renew_failures);
        buf_printf(b, "ca.identity_expired: %d\n", st.identity_expired);
        if (st.identity_renew_error != NULL) {
            buf_puts(b, "ca.identity_renew_error: ");
            json_str(b, st.identity_renew_error);
            buf_puts(b, "\n");
        }
    }
    if (st.tracing) {
        buf_printf(b, "tracing.spans_queued: %" PRIu64 "\n", st.spans_queued);
        buf_printf(b, "tracing.spans_dropped: %" PRIu64 "\n", st.spans_dropped);
        buf_printf(b, "tracing.spans_pending: %" PRIu64 "\n", st.spans_pending);
        buf_printf(b, "tracing.spans_exported: %" PRIu64 "\n",
                   st.spans_exported);
        buf_printf(b, "tracing.export_requests: %" PRIu64 "\n",
                   st.export_requests);
        buf_printf(b, "tracing.export_failures: %" PRIu64 "\n",
                   st.export_failures);
        buf_printf(b, "tracing.export_retries: %" PRIu64 "\n",
                   st.export_retries);
    }
    if (st.has_resources) {
        buf_printf(b, "resources.count: %zu\n", st.resources);
        buf_printf(b, "resources.loading: %zu\n", st.resource_loading);
        buf_printf(b, "resources.reloads_ok: %" PRIu64 "\n",
                   st.resource_reloads_ok);
        buf_printf(b, "resources.reloads_failed: %" PRIu64 "\n",
                   st.resource_reloads_failed);
        if (st.resource_error != NULL) {
            buf_puts(b, "resources.last_error: ");
            json_str(b, st.resource_error);
            buf_puts(b, "\n");
        }
        buf_printf(b, "dns.names: %" PRIu64 "\n", st.dns_names);
        buf_printf(b, "dns.queries: %" PRIu64 "\n", st.dns_queries);
        buf_printf(b, "dns.failures: %" PRIu64 "\n", st.dns_failures);
        buf_printf(b, "dns.changes: %" PRIu64 "\n", st.dns_changes);
        buf_printf(b, "jwks.uris: %" PRIu64 "\n", st.jwks_uris);
        buf_printf(b, "jwks.fetches: %" PRIu64 "\n", st.jwks_fetches);
        buf_printf(b, "jwks.failures: %" PRIu64 "\n", st.jwks_failures);
        buf_printf(b, "jwks.changes: %" PRIu64 "\n", st.jwks_changes);
    }
    if (st.geoip != NULL)
        geoip_stats(st.geoip, b);
    admin_kube_stats(&st, b);
    if (st.has_etcd) {
        buf_printf(b, "etcd.synced: %d\n", st.etcd_synced);
        buf_printf(b, "etcd.watching: %d\n", st.etcd_watching);
        buf_printf(b, "etcd.revision: %" PRId64 "\n", st.etcd_revision);
        buf_printf(b, "etcd.keys: %zu\n", st.etcd_keys);
        buf_puts(b, "etcd.endpoint: ");
        json_str(b, st.etcd_endpoint ? st.etcd_endpoint : "");
        buf_puts(b, "\n");
        buf_printf(b, "etcd.down_ms: %" PRIu64 "\n", st.etcd_down_ms);
        buf_printf(b, "etcd.watches_started: %" PRIu64 "\n",
                   st.etcd_watches_started);
        buf_printf(b, "etcd.reconnects: %" PRIu64 "\n", st.etcd_reconnects);
        buf_printf(b, "etcd.ranges: %" PRIu64 "\n", st.etcd_ranges);
        buf_printf(b, "etcd.compactions: %" PRIu64 "\n", st.etcd_compactions);
        buf_printf(b, "etcd.events: %" PRIu64 "\n", st.etcd_events);
        buf_printf(b, "etcd.progress_notifications: %" PRIu64 "\n",
                   st.etcd_progress);
        buf_printf(b, "etcd.failures: %" PRIu64 "\n", st.etcd_failures);
        buf_printf(b, "etcd.last_backoff_ms: %" PRIu64 "\n",
                   st.etcd_last_backoff_ms);
        buf_printf(b, "etcd.watch_created_unix_ms: %" PRId64 "\n",
                   st.etcd_watch_created_ms);
        buf_printf(b, "etcd.range_pages: %" PRIu64 "\n", st.etcd_range_pages);
        buf_printf(b, "etcd.skipped: %" PRIu64 "\n", st.etcd_skipped);
        buf_printf(b, "etcd.keys_left_out: %zu\n", st.etcd_keys_left_out);
        if (st.etcd_last_skip != NULL) {
            buf_puts(b, "etcd.last_skip: ");
            json_str(b, st.etcd_last_skip);
            buf_puts(b, "\n");
        }
        if (st.etcd_error != NULL) {
            buf_puts(b, "etcd.last_error: ");
            json_str(b, st.etcd_error);
            buf_puts(b, "\n");
        }
    }
    if (ops->lua_errors != NULL)
        ops->lua_errors(ops->arg, print_lua_error, b);
    for (size_t i = 0; i < n; i++) {
        struct stat_line line = {b, ls[i]->name};

        stats_each(ls[i], print_stat, &line);
        for (int w = 0; w < ls[i]->nshards; w++)
            buf_printf(
                b, "listener.%s.worker_%d.downstream_cx_total: %" PRIu64 "\n",
                line.name, w,
                STAT_GET(&proxy_counters(ls[i], w)->listener, accepted));
    }
    if (ops->clusters != NULL) {
        struct cluster *const *cl;
        size_t nc = ops->clusters(ops->arg, &cl);

        for (size_t i = 0; i < nc; i++) {
            struct cluster_counters c;
            const char *name = cl[i]->name;

            cluster_sum(cl[i], &c);
            for (size_t f = 0; f < cluster_counters_desc.nfields; f++) {
                const struct stats_field *fd = &cluster_counters_desc.fields[f];
                buf_printf(b, "cluster.%s.%s: %" PRIu64 "\n", name, fd->name,
                           stats_field_value(&c, 0, fd));
            }
            if (cl[i]->od != NULL)
                outlier_stats(b, name, cl[i]->od);
        }
    }
}

/* One metric family: HELP and TYPE once, then a sample per listener. */
struct family {
    const char *name;
    const char *type;
    const char *help;
    size_t off; /* offset in proxy_counters, or SIZE_MAX for active, or
                 * HBONE_ACTIVE */
};

/* The HBONE tunnels open now: opened - closed. */
#define HBONE_ACTIVE (SIZE_MAX - 1)

static const struct family families[] = {
    {"strait_listener_connections_accepted_total", "counter",
     "Downstream connections accepted.",
     offsetof(struct proxy_counters, listener.accepted)},
    {"strait_listener_connections_active", "gauge",
     "Downstream connections open now.", SIZE_MAX},
    {"strait_listener_connections_closed_total", "counter",
     "Downstream connections closed.",
     offsetof(struct proxy_counters, listener.closed)},
    {"strait_listener_connections_overflow_total", "counter",
     "Connections accepted and closed at once: the listener's connection "
     "limit was reached (limits.action close).",
     offsetof(struct proxy_counters, listener.cx_overflow)},
    {"strait_listener_connections_global_overflow_total", "counter",
     "Connections accepted and closed at once: limits.maxConnections was "
     "reached (limits.action close).",
     offsetof(struct proxy_counters, listener.global_cx_overflow)},
    {"strait_listener_accept_limit_pauses_total", "counter",
     "Times accepting paused at a connection limit (limits.action pause).",
     offsetof(struct proxy_counters, listener.cx_limit_paused)},
    {"strait_listener_accept_overload_pauses_total", "counter",
     "Times accepting paused by the memory action "
     "stop_accepting_connections.",
     offsetof(struct proxy_counters, listener.cx_overload_paused)},
    {"strait_listener_proxy_protocol_errors_total", "counter",
     "Connections closed for a missing, malformed or too long PROXY "
     "protocol header (gatewayTopology.proxyProtocol).",
     offsetof(struct proxy_counters, listener.proxy_proto_error)},
    {"strait_listener_received_bytes_total", "counter",
     "Bytes received from downstream clients.",
     offsetof(struct proxy_counters, relay.bytes_in)},
    {"strait_listener_sent_bytes_total", "counter",
     "Bytes sent to downstream clients.",
     offsetof(struct proxy_counters, relay.bytes_out)},
    {"strait_upstream_received_bytes_total", "counter",
     "Bytes received from upstreams.",
     offsetof(struct proxy_counters, relay.upstream_bytes_in)},
    {"strait_upstream_sent_bytes_total", "counter", "Bytes sent to upstreams.",
     offsetof(struct proxy_counters, relay.upstream_bytes_out)},
    {"strait_upstream_connect_failures_total", "counter",
     "Upstream connection attempts that failed.",
     offsetof(struct proxy_counters, relay.connect_failures)},
    {"strait_upstream_connect_timeouts_total", "counter",
     "Upstream connection attempts that timed out.",
     offsetof(struct proxy_counters, relay.connect_timeouts)},
    {"strait_listener_idle_timeouts_total", "counter",
     "Sessions closed by the idle timeout.",
     offsetof(struct proxy_counters, relay.idle_timeouts)},
    {"strait_listener_no_route_total", "counter",
     "TCP and TLS connections closed because no route matched them.",
     offsetof(struct proxy_counters, relay.no_route)},
    {"strait_listener_client_hello_errors_total", "counter",
     "Connections closed before routing: no TLS, a malformed or too large "
     "ClientHello, or none in time (counted in no_route too).",
     offsetof(struct proxy_counters, relay.client_hello_errors)},
    {"strait_listener_registry_only_refused_total", "counter",
     "Requests (HTTP, answered 502) and connections (TCP/TLS, closed) sent "
     "to BlackHoleCluster: their destination host is in no ServiceEntry "
     "and outboundTrafficPolicy is REGISTRY_ONLY.",
     offsetof(struct proxy_counters, relay.registry_only)},
    {"strait_listener_auto_passthrough_relayed_total", "counter",
     "AUTO_PASSTHROUGH connections relayed to the service their Istio SNI "
     "names.",
     offsetof(struct proxy_counters, relay.ap_relayed)},
    {"strait_listener_hbone_tunnels_total", "counter",
     "HBONE CONNECT tunnels opened (answered 200 after the upstream "
     "connect).",
     offsetof(struct proxy_counters, relay.hbone_opened)},
    {"strait_listener_hbone_tunnels_active", "gauge",
     "HBONE CONNECT tunnels open now.", HBONE_ACTIVE},
    {"strait_listener_lua_states_created_total", "counter",
     "Lua states made for the listener's LuaPolicies (one per worker and "
     "routes generation, by the first request a policy applies to).",
     offsetof(struct proxy_counters, relay.lua_states)},
    {"strait_http_requests_total", "counter", "HTTP requests answered.",
     offsetof(struct proxy_counters, http.rq_total)},
    {"strait_http_protocol_errors_total", "counter",
     "Malformed requests from clients (answered 4xx and closed).",
     offsetof(struct proxy_counters, http.rq_protocol_errors)},
    {"strait_http_upstream_errors_total", "counter",
     "Requests whose upstream failed (connect, reset, protocol error).",
     offsetof(struct proxy_counters, http.rq_upstream_errors)},
    {"strait_http_rbac_denied_total", "counter",
     "Requests refused by an AuthorizationPolicy (403).",
     offsetof(struct proxy_counters, http.rq_rbac_denied)},
    {"strait_http_jwt_denied_total", "counter",
     "Requests refused by RequestAuthentication: a token that does not "
     "verify (401).",
     offsetof(struct proxy_counters, http.rq_jwt_denied)},
    {"strait_http_mirror_sent_total", "counter",
     "Mirrored copies of requests sent (VirtualService mirror).",
     offsetof(struct proxy_counters, http.rq_mirror_sent)},
    {"strait_http_mirror_failed_total", "counter",
     "Mirrored copies that failed (connect, reset, timeout, local error).",
     offsetof(struct proxy_counters, http.rq_mirror_failed)},
    {"strait_http_mirror_skipped_total", "counter",
     "Requests selected for mirroring whose copy was not sent (body over "
     "the buffer limit, no endpoint, circuit breaker).",
     offsetof(struct proxy_counters, http.rq_mirror_skipped)},
    {"strait_http_stream_idle_timeouts_total", "counter",
     "Requests ended by the stream idle timeout (flag SI).",
     offsetof(struct proxy_counters, http.rq_idle_timeout)},
    {"strait_http_request_header_timeouts_total", "counter",
     "Connections closed because a request head did not arrive whole "
     "within the request headers timeout.",
     offsetof(struct proxy_counters, http.rq_header_timeout)},
    {"strait_http_overload_rejected_total", "counter",
     "Requests answered 503 by the memory action stop_accepting_requests "
     "(flag OM).",
     offsetof(struct proxy_counters, http.rq_overload)},
    {"strait_http_overload_keepalive_disabled_total", "counter",
     "Connections told to close after their request by the memory action "
     "disable_http_keepalive.",
     offsetof(struct proxy_counters, http.cx_overload_keepalive)},
    {"strait_tls_handshakes_total", "counter", "Completed TLS handshakes.",
     offsetof(struct proxy_counters, tls.handshakes)},
    {"strait_http2_rapid_reset_total", "counter",
     "HTTP/2 connections closed for resetting streams too fast "
     "(CVE-2023-44487).",
     offsetof(struct proxy_counters, h2.rapid_reset)},
    {"strait_http2_flood_total", "counter",
     "HTTP/2 connections closed for SETTINGS, PING or empty-frame floods.",
     offsetof(struct proxy_counters, h2.flood)},
    {"strait_http2_continuation_flood_total", "counter",
     "HTTP/2 connections closed for CONTINUATION floods.",
     offsetof(struct proxy_counters, h2.continuation)},
    {"strait_http2_stream_errors_total", "counter",
     "HTTP/2 streams ended with an error code.",
     offsetof(struct proxy_counters, h2.stream_errors)},
};

/* Cluster families: one sample per cluster. */
static const struct family cluster_families[] = {
    {"strait_cluster_requests_total", "counter",
     "Requests sent to the cluster.",
     offsetof(struct cluster_counters, rq_total)},
    {"strait_cluster_connections_total", "counter",
     "Upstream connections opened.",
     offsetof(struct cluster_counters, cx_total)},
    {"strait_cluster_connections_reused_total", "counter",
     "Requests that reused a pooled connection.",
     offsetof(struct cluster_counters, cx_reused)},
    {"strait_cluster_connect_failures_total", "counter",
     "Upstream connection attempts that failed.",
     offsetof(struct cluster_counters, cx_connect_fail)},
    {"strait_cluster_connect_timeouts_total", "counter",
     "Upstream connection attempts that timed out.",
     offsetof(struct cluster_counters, cx_connect_timeout)},
    {"strait_cluster_request_errors_total", "counter",
     "Exchanges the upstream reset or broke.",
     offsetof(struct cluster_counters, rq_error)},
    {"strait_cluster_request_timeouts_total", "counter",
     "Requests that hit their deadline.",
     offsetof(struct cluster_counters, rq_timeout)},
    {"strait_cluster_request_overflows_total", "counter",
     "Requests the circuit breaker refused (503 UO).",
     offsetof(struct cluster_counters, rq_overflow)},
    {"strait_cluster_retry_overflows_total", "counter",
     "Retries the circuit breaker refused.",
     offsetof(struct cluster_counters, rq_retry_overflow)},
    {"strait_cluster_retries_total", "counter",
     "Retries sent to the cluster (VirtualService retries).",
     offsetof(struct cluster_counters, rq_retry)},
    {"strait_cluster_per_try_timeouts_total", "counter",
     "Attempts abandoned at retries.perTryTimeout.",
     offsetof(struct cluster_counters, rq_per_try_timeout)},
    {"strait_cluster_retry_body_overflows_total", "counter",
     "Requests not retriable because their body outgrew the retry buffer.",
     offsetof(struct cluster_counters, rq_retry_body_overflow)},
    {"strait_cluster_connection_overflows_total", "counter",
     "Connections held back by tcp.maxConnections.",
     offsetof(struct cluster_counters, cx_overflow)},
    {"strait_cluster_requests_pending_total", "counter",
     "Requests that waited for a connection (tcp.maxConnections).",
     offsetof(struct cluster_counters, rq_pending)},
    {"strait_cluster_priority_failovers_total", "counter",
     "Requests balanced to a locality priority level below the first.",
     offsetof(struct cluster_counters, rq_failover)},
};

/* Outlier detection families: one sample per cluster that has it. */
static void render_outliers(struct cluster *const *cl, size_t nc, struct buf *b)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"strait_cluster_outlier_ejections_total", "counter",
         "Endpoints ejected by outlier detection."},
        {"strait_cluster_outlier_ejections_active", "gauge",
         "Endpoints ejected now."},
        {"strait_cluster_outlier_ejections_overflow_total", "counter",
         "Ejections refused by maxEjectionPercent."},
    };
    uint64_t now = clock_ms();

    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help,
                   fam[f].name, fam[f].type);
        for (size_t i = 0; i < nc; i++) {
            struct outlier *od = cl[i]->od;
            uint64_t v;
            if (od == NULL)
                continue;
            v = f == 0   ? __atomic_load_n(&od->total, __ATOMIC_RELAXED)
                : f == 1 ? outlier_active(od, now)
                         : __atomic_load_n(&od->overflow, __ATOMIC_RELAXED);
            buf_printf(b, "%s{cluster=\"%s\"} %" PRIu64 "\n", fam[f].name,
                       cl[i]->name, v);
        }
    }
    buf_puts(b, "# HELP strait_cluster_outlier_ejections_by_reason_total "
                "Endpoints ejected by outlier detection, by reason.\n"
                "# TYPE strait_cluster_outlier_ejections_by_reason_total "
                "counter\n");
    for (size_t i = 0; i < nc; i++)
        for (int r = 0; cl[i]->od != NULL && r < OUTLIER_NREASONS; r++)
            buf_printf(
                b,
                "strait_cluster_outlier_ejections_by_reason_total{"
                "cluster=\"%s\",reason=\"%s\"} %" PRIu64 "\n",
                cl[i]->name, outlier_reason[r],
                __atomic_load_n(&cl[i]->od->by_reason[r], __ATOMIC_RELAXED));
}

static void render_clusters(const struct admin_ops *ops, struct buf *b)
{
    struct cluster *const *cl;
    size_t nc = ops->clusters != NULL ? ops->clusters(ops->arg, &cl) : 0;
    struct cluster_counters *sums;

    if (nc == 0)
        return;
    sums = aligned_alloc(64, nc * sizeof(*sums));
    if (sums == NULL)
        return;
    for (size_t i = 0; i < nc; i++)
        cluster_sum(cl[i], &sums[i]);
    for (size_t f = 0;
         f < sizeof(cluster_families) / sizeof(cluster_families[0]); f++) {
        const struct family *fam = &cluster_families[f];
        buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fam->name, fam->help,
                   fam->name, fam->type);
        for (size_t i = 0; i < nc; i++) {
            uint64_t v;
            memcpy(&v, (const char *)&sums[i] + fam->off, sizeof(v));
            buf_printf(b, "%s{cluster=\"%s\"} %" PRIu64 "\n", fam->name,
                       cl[i]->name, v);
        }
    }
    render_outliers(cl, nc, b);
    free(sums);
}

/* Families with a second label: one sample per listener and value. */
struct labelled {
    const char *name;
    const char *help;
    const char *label;
    const char *value;
    size_t off;
};

static const struct labelled labelled[] = {
    {"strait_http_responses_total", "HTTP responses by status class.", "class",
     "1xx", offsetof(struct proxy_counters, http.rq_class[1])},
    {NULL, NULL, "class", "2xx",
     offsetof(struct proxy_counters, http.rq_class[2])},
    {NULL, NULL, "class", "3xx",
     offsetof(struct proxy_counters, http.rq_class[3])},
    {NULL, NULL, "class", "4xx",
     offsetof(struct proxy_counters, http.rq_class[4])},
    {NULL, NULL, "class", "5xx",
     offsetof(struct proxy_counters, http.rq_class[5])},
    {"strait_tls_handshake_failures_total", "Failed TLS handshakes by reason.",
     "reason", "version", offsetof(struct proxy_counters, tls.fail_version)},
    {NULL, NULL, "reason", "cipher",
     offsetof(struct proxy_counters, tls.fail_cipher)},
    {NULL, NULL, "reason", "certificate",
     offsetof(struct proxy_counters, tls.fail_certificate)},
    {NULL, NULL, "reason", "eof",
     offsetof(struct proxy_counters, tls.fail_eof)},
    {NULL, NULL, "reason", "other",
     offsetof(struct proxy_counters, tls.fail_other)},
    {NULL, NULL, "reason", "timeout",
     offsetof(struct proxy_counters, tls.fail_timeout)},
    {NULL, NULL, "reason", "rejected",
     offsetof(struct proxy_counters, tls.fail_rejected)},
    {"strait_listener_auto_passthrough_refused_total",
     "AUTO_PASSTHROUGH connections closed before relaying, by reason.",
     "reason", "bad_sni", offsetof(struct proxy_counters, relay.ap_bad_sni)},
    {NULL, NULL, "reason", "alpn",
     offsetof(struct proxy_counters, relay.ap_alpn)},
    {NULL, NULL, "reason", "unknown_host",
     offsetof(struct proxy_counters, relay.ap_unknown_host)},
    {NULL, NULL, "reason", "unknown_port",
     offsetof(struct proxy_counters, relay.ap_unknown_port)},
    {NULL, NULL, "reason", "unknown_subset",
     offsetof(struct proxy_counters, relay.ap_unknown_subset)},
    {NULL, NULL, "reason", "no_endpoint",
     offsetof(struct proxy_counters, relay.ap_no_endpoint)},
    {"strait_listener_hbone_refused_total",
     "HBONE CONNECT streams refused, by reason.", "reason", "bad_request",
     offsetof(struct proxy_counters, relay.hbone_bad_request)},
    {NULL, NULL, "reason", "unknown_destination",
     offsetof(struct proxy_counters, relay.hbone_unknown_destination)},
    {NULL, NULL, "reason", "denied",
     offsetof(struct proxy_counters, relay.hbone_denied)},
    {NULL, NULL, "reason", "no_endpoint",
     offsetof(struct proxy_counters, relay.hbone_no_endpoint)},
    {NULL, NULL, "reason", "connect_failed",
     offsetof(struct proxy_counters, relay.hbone_connect_failed)},
    {NULL, NULL, "reason", "too_many_tunnels",
     offsetof(struct proxy_counters, relay.hbone_too_many)},
    {NULL, NULL, "reason", "overload",
     offsetof(struct proxy_counters, relay.hbone_overload)},
};

/*
 * The process's own values (struct admin_status), one sample each. A row
 * without help is one more sample of the family above it, told apart by
 * its label. Values shown in /stats only under a condition (tracing on,
 * a config.dir, config.etcd) have the same condition here, except the DNS
 * ones: /stats lists them with the resources, while their families have
 * always been exported (zero without a config.dir) and stay so.
 */
enum status_kind {
    STATUS_INT,
    STATUS_U64,
    STATUS_I64,
    STATUS_SIZE,
    STATUS_WHOLE_SECONDS, /* uint64_t ms, shown in whole seconds */
    STATUS_SECONDS,       /* uint64_t ms, shown in seconds */
    STATUS_UNIX_SECONDS,  /* int64_t Unix ms, shown in seconds */
};

enum status_when { WHEN_ALWAYS, WHEN_TRACING, WHEN_RESOURCES, WHEN_ETCD };

struct status_family {
    const char *name;
    const char *type;
    const char *help; /* NULL: another sample of the family above */
    const char *label;
    size_t off; /* in struct admin_status */
    enum status_kind kind;
    enum status_when when;
};

#define ST(m, k) offsetof(struct admin_status, m), STATUS_##k

static const struct status_family status_families[] = {
    {"strait_workers", "gauge", "Worker threads.", NULL, ST(workers, INT),
     WHEN_ALWAYS},
    {"strait_draining", "gauge", "1 while the server drains.", NULL,
     ST(draining, INT), WHEN_ALWAYS},
    {"strait_uptime_seconds", "gauge", "Seconds since start.", NULL,
     ST(uptime_ms, WHOLE_SECONDS), WHEN_ALWAYS},
    {"strait_config_reloads_total", "counter", "Bootstrap reloads.",
     "result=\"ok\"", ST(reloads_ok, U64), WHEN_ALWAYS},
    {"strait_config_reloads_total", NULL, NULL, "result=\"error\"",
     ST(reloads_failed, U64), WHEN_ALWAYS},
    {"strait_config_rebuilds_total", "counter",
     "Rebuilds from the inputs in effect (resources, DNS answers, key "
     "sets).",
     "result=\"ok\"", ST(rebuilds_ok, U64), WHEN_ALWAYS},
    {"strait_config_rebuilds_total", NULL, NULL, "result=\"error\"",
     ST(rebuilds_failed, U64), WHEN_ALWAYS},
    {"strait_pid", "gauge", "This process's ID (a binary upgrade changes it).",
     NULL, ST(pid, INT), WHEN_ALWAYS},
    {"strait_serving", "gauge",
     "1 once every worker has run the first configuration.", NULL,
     ST(serving, INT), WHEN_ALWAYS},
    {"strait_upgrades_total", "counter",
     "Binary upgrades, by result (ok: the new process took over).",
     "result=\"ok\"", ST(upgrades_ok, U64), WHEN_ALWAYS},
    {"strait_upgrades_total", NULL, NULL, "result=\"error\"",
     ST(upgrades_failed, U64), WHEN_ALWAYS},
    {"strait_upgrade_running", "gauge", "1 while a binary upgrade runs.", NULL,
     ST(upgrade_running, INT), WHEN_ALWAYS},
    {"strait_restart_epoch", "gauge",
     "Binary upgrades since the first process (Envoy's restart epoch).", NULL,
     ST(restart_epoch, INT), WHEN_ALWAYS},
    {"strait_upgrade_pid", "gauge",
     "The new process of the last binary upgrade (0: none).", NULL,
     ST(upgrade_pid, INT), WHEN_ALWAYS},
    {"strait_access_log_written_total", "counter", "Access-log lines written.",
     NULL, ST(alog_written, U64), WHEN_ALWAYS},
    {"strait_access_log_dropped_total", "counter",
     "Access-log lines dropped: log.accessLogBuffer was full.", NULL,
     ST(alog_dropped, U64), WHEN_ALWAYS},
    {"strait_access_log_write_errors_total", "counter",
     "Failed writes to the access log (their lines are lost).", NULL,
     ST(alog_write_errors, U64), WHEN_ALWAYS},
    {"strait_access_log_reopens_total", "counter",
     "Times the access log was reopened (SIGUSR1).", NULL,
     ST(alog_reopens, U64), WHEN_ALWAYS},
    {"strait_downstream_connections_active", "gauge",
     "Downstream connections open, every listener together.", NULL,
     ST(cx_active, I64), WHEN_ALWAYS},
    {"strait_downstream_connections_limit", "gauge",
     "limits.maxConnections (0: none).", NULL, ST(cx_max, I64), WHEN_ALWAYS},
    {"strait_overload_memory_limit_bytes", "gauge",
     "overload.memoryLimit (0: no memory actions).", NULL,
     ST(memory_limit, U64), WHEN_ALWAYS},
    {"strait_overload_memory_used_bytes", "gauge",
     "Resident memory at the last check.", NULL, ST(memory_used, U64),
     WHEN_ALWAYS},
    {"strait_memory_allocated_bytes", "gauge",
     "Bytes the allocator has handed out and not had back.", NULL,
     ST(heap_allocated, U64), WHEN_ALWAYS},
    {"strait_dns_names", "gauge", "ServiceEntry names resolved with DNS.", NULL,
     ST(dns_names, U64), WHEN_ALWAYS},
    {"strait_dns_queries_total", "counter",
     "DNS queries for ServiceEntry names, by result.", "result=\"sent\"",
     ST(dns_queries, U64), WHEN_ALWAYS},
    {"strait_dns_queries_total", NULL, NULL, "result=\"failed\"",
     ST(dns_failures, U64), WHEN_ALWAYS},
    {"strait_dns_changes_total", "counter", "Times a name's addresses changed.",
     NULL, ST(dns_changes, U64), WHEN_ALWAYS},
    {"strait_tracing_spans_queued_total", "counter", "Spans queued for export.",
     NULL, ST(spans_queued, U64), WHEN_TRACING},
    {"strait_tracing_spans_dropped_total", "counter",
     "Spans dropped: the queue was full or their batch was given up.", NULL,
     ST(spans_dropped, U64), WHEN_TRACING},
    {"strait_tracing_spans_pending", "gauge", "Spans waiting for export now.",
     NULL, ST(spans_pending, U64), WHEN_TRACING},
    {"strait_tracing_spans_exported_total", "counter",
     "Spans the collector accepted.", NULL, ST(spans_exported, U64),
     WHEN_TRACING},
    {"strait_tracing_export_requests_total", "counter",
     "OTLP export requests sent.", NULL, ST(export_requests, U64),
     WHEN_TRACING},
    {"strait_tracing_export_failures_total", "counter",
     "OTLP export requests that failed.", NULL, ST(export_failures, U64),
     WHEN_TRACING},
    {"strait_tracing_export_retries_total", "counter",
     "OTLP export requests retried.", NULL, ST(export_retries, U64),
     WHEN_TRACING},
    {"strait_resources", "gauge", "Istio resources in effect.", NULL,
     ST(resources, SIZE), WHEN_RESOURCES},
    {"strait_resources_loading", "gauge",
     "1 while a load of resources runs on the builder thread.", NULL,
     ST(resource_loading, SIZE), WHEN_RESOURCES},
    {"strait_resource_reloads_total", "counter", "Loads of config.dir.",
     "result=\"ok\"", ST(resource_reloads_ok, U64), WHEN_RESOURCES},
    {"strait_resource_reloads_total", NULL, NULL, "result=\"error\"",
     ST(resource_reloads_failed, U64), WHEN_RESOURCES},
    {"strait_jwks_uris", "gauge", "RequestAuthentication jwksUris fetched.",
     NULL, ST(jwks_uris, U64), WHEN_RESOURCES},
    {"strait_jwks_fetches_total", "counter", "jwksUri fetches, by result.",
     "result=\"sent\"", ST(jwks_fetches, U64), WHEN_RESOURCES},
    {"strait_jwks_fetches_total", NULL, NULL, "result=\"failed\"",
     ST(jwks_failures, U64), WHEN_RESOURCES},
    {"strait_jwks_changes_total", "counter", "Times a key set changed.", NULL,
     ST(jwks_changes, U64), WHEN_RESOURCES},
    {"strait_etcd_synced", "gauge",
     "1 once config.etcd's prefix has been read.", NULL, ST(etcd_synced, INT),
     WHEN_ETCD},
    {"strait_etcd_watching", "gauge", "1 while the watch runs.", NULL,
     ST(etcd_watching, INT), WHEN_ETCD},
    {"strait_etcd_revision", "gauge", "The etcd revision held.", NULL,
     ST(etcd_revision, I64), WHEN_ETCD},
    {"strait_etcd_keys", "gauge", "Keys held under the prefix.", NULL,
     ST(etcd_keys, SIZE), WHEN_ETCD},
    {"strait_etcd_down_seconds", "gauge",
     "How long no etcd member has answered (0 while one does).", NULL,
     ST(etcd_down_ms, SECONDS), WHEN_ETCD},
    {"strait_etcd_watches_started_total", "counter", "Watch requests made.",
     NULL, ST(etcd_watches_started, U64), WHEN_ETCD},
    {"strait_etcd_reconnects_total", "counter",
     "Watches resumed after a broken stream.", NULL, ST(etcd_reconnects, U64),
     WHEN_ETCD},
    {"strait_etcd_ranges_total", "counter", "Reads of the prefix.", NULL,
     ST(etcd_ranges, U64), WHEN_ETCD},
    {"strait_etcd_compactions_total", "counter",
     "Watches canceled by a compaction.", NULL, ST(etcd_compactions, U64),
     WHEN_ETCD},
    {"strait_etcd_events_total", "counter", "Watch events applied.", NULL,
     ST(etcd_events, U64), WHEN_ETCD},
    {"strait_etcd_progress_notifications_total", "counter",
     "Watch progress notifications.", NULL, ST(etcd_progress, U64), WHEN_ETCD},
    {"strait_etcd_failures_total", "counter", "Requests to etcd that failed.",
     NULL, ST(etcd_failures, U64), WHEN_ETCD},
    {"strait_etcd_range_pages_total", "counter",
     "Range pages read (prefix reads go by pages of pageSize keys).", NULL,
     ST(etcd_range_pages, U64), WHEN_ETCD},
    {"strait_etcd_skipped_total", "counter",
     "Watch messages skipped (larger than maxResponseBytes or unreadable); "
     "each one makes a read of the prefix.",
     NULL, ST(etcd_skipped, U64), WHEN_ETCD},
    {"strait_etcd_keys_left_out", "gauge",
     "Keys whose value alone is larger than maxResponseBytes, left out by "
     "the last read of the prefix.",
     NULL, ST(etcd_keys_left_out, SIZE), WHEN_ETCD},
    {"strait_etcd_last_backoff_seconds", "gauge",
     "The last reconnect delay drawn.", NULL, ST(etcd_last_backoff_ms, SECONDS),
     WHEN_ETCD},
    {"strait_etcd_watch_created_timestamp_seconds", "gauge",
     "When the last watch was made (Unix time; 0: none yet).", NULL,
     ST(etcd_watch_created_ms, UNIX_SECONDS), WHEN_ETCD},
};

#undef ST

static void status_sample(const struct admin_status *st,
                          const struct status_family *f, struct buf *b)
{
    const char *p = (const char *)st + f->off;
    int iv;
    uint64_t u;
    int64_t i;
    size_t z;

    buf_puts(b, f->name);
    if (f->label != NULL)
        buf_printf(b, "{%s}", f->label);
    switch (f->kind) {
    case STATUS_INT:
        memcpy(&iv, p, sizeof(iv));
        buf_printf(b, " %d\n", iv);
        break;
    case STATUS_U64:
        memcpy(&u, p, sizeof(u));
        buf_printf(b, " %" PRIu64 "\n", u);
        break;
    case STATUS_I64:
        memcpy(&i, p, sizeof(i));
        buf_printf(b, " %" PRId64 "\n", i);
        break;
    case STATUS_SIZE:
        memcpy(&z, p, sizeof(z));
        buf_printf(b, " %zu\n", z);
        break;
    case STATUS_WHOLE_SECONDS:
        memcpy(&u, p, sizeof(u));
        buf_printf(b, " %" PRIu64 "\n", u / 1000);
        break;
    case STATUS_SECONDS:
        memcpy(&u, p, sizeof(u));
        buf_printf(b, " %" PRIu64 ".%03u\n", u / 1000, (unsigned)(u % 1000));
        break;
    case STATUS_UNIX_SECONDS:
        memcpy(&i, p, sizeof(i));
        u = i > 0 ? (uint64_t)i : 0; /* before 1970: not a time we made */
        buf_printf(b, " %" PRIu64 ".%03u\n", u / 1000, (unsigned)(u % 1000));
        break;
    }
}

static void render_status(const struct admin_status *st, struct buf *b)
{
    for (size_t f = 0; f < sizeof(status_families) / sizeof(status_families[0]);
         f++) {
        const struct status_family *fam = &status_families[f];

        if ((fam->when == WHEN_TRACING && !st->tracing) ||
            (fam->when == WHEN_RESOURCES && !st->has_resources) ||
            (fam->when == WHEN_ETCD && !st->has_etcd))
            continue;
        if (fam->help != NULL)
            buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fam->name, fam->help,
                       fam->name, fam->type);
        status_sample(st, fam, b);
    }
}

static void prom_lua_error(void *ctx, const char *listener, const char *policy,
                           const char *phase, const char *reason, uint64_t n)
{
    buf_printf(ctx,
               "strait_lua_errors_total{listener=\"%s\",policy=\"%s\","
               "phase=\"%s\",reason=\"%s\"} %" PRIu64 "\n",
               listener, policy, phase, reason, n);
}

void admin_render_prometheus(const struct admin_ops *ops, struct buf *b)
{
    struct stats_block *const *ls;
    size_t n = ops->listeners(ops->arg, &ls);
    struct proxy_counters *sums = calloc(n ? n : 1, sizeof(*sums));
    struct admin_status st;

    ops->status(ops->arg, &st);
    if (sums == NULL)
        return;
    /* Istio's build gauge, which its dashboards count proxies by. */
    buf_puts(b, "# HELP istio_build Istio component build info\n"
                "# TYPE istio_build gauge\n"
                "istio_build{component=\"proxy\",tag=\"" PACKAGE_VERSION
                "\"} 1\n");
    for (size_t i = 0; i < n; i++)
        stats_sum(ls[i], &sums[i]);
    for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
        const struct family *fam = &families[f];

        buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fam->name, fam->help,
                   fam->name, fam->type);
        for (size_t i = 0; i < n; i++) {
            uint64_t v;
            if (fam->off == SIZE_MAX)
                v = sums[i].listener.accepted - sums[i].listener.closed;
            else if (fam->off == HBONE_ACTIVE)
                v = sums[i].relay.hbone_opened - sums[i].relay.hbone_closed;
            else
                memcpy(&v, (const char *)&sums[i] + fam->off, sizeof(v));
            buf_printf(b, "%s{listener=\"%s\"} %" PRIu64 "\n", fam->name,
                       ls[i]->name, v);
        }
    }
    for (size_t f = 0; f < sizeof(labelled) / sizeof(labelled[0]); f++) {
        const struct labelled *lf = &labelled[f];
        const char *name = lf->name;

        if (name != NULL)
            buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", name, lf->help,
                       name);
        /* Rows without a name continue the family above them. */
        for (size_t k = f; name == NULL && k > 0; k--)
            name = labelled[k - 1].name;
        for (size_t i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, (const char *)&sums[i] + lf->off, sizeof(v));
            buf_printf(b, "%s{listener=\"%s\",%s=\"%s\"} %" PRIu64 "\n", name,
                       ls[i]->name, lf->label, lf->value, v);
        }
    }
    buf_puts(b, "# HELP strait_worker_connections_accepted_total Downstream "
                "connections accepted, per worker thread.\n"
                "# TYPE strait_worker_connections_accepted_total counter\n");
    for (size_t i = 0; i < n; i++)
        for (int w = 0; w < ls[i]->nshards; w++)
            buf_printf(b,
                       "strait_worker_connections_accepted_total{listener=\"%s"
                       "\",worker=\"%d\"} %" PRIu64 "\n",
                       ls[i]->name, w,
                       STAT_GET(&proxy_counters(ls[i], w)->listener, accepted));
    /* The /stats counters without a family above, under strait_ too. */
    buf_puts(b, "# HELP strait_http_downstream_buffers_active I/O buffers "
                "HTTP/1 client connections hold now (none while idle).\n"
                "# TYPE strait_http_downstream_buffers_active gauge\n");
    for (size_t i = 0; i < n; i++)
        buf_printf(b,
                   "strait_http_downstream_buffers_active{listener=\"%s\"} "
                   "%" PRIu64 "\n",
                   ls[i]->name,
                   sums[i].http.bufs_taken - sums[i].http.bufs_released);
    render_clusters(ops, b);
    if (st.geoip != NULL)
        geoip_prometheus(st.geoip, b);
    if (ops->metrics != NULL)
        admin_render_istio(ops->metrics(ops->arg), b);
    render_status(&st, b);
    admin_kube_prometheus(&st, b);
    buf_puts(b, "# HELP strait_overload_action_active 1 while the memory "
                "action is in effect.\n"
                "# TYPE strait_overload_action_active gauge\n");
    for (int a = 0; a < OVERLOAD_NACTIONS; a++)
        buf_printf(b, "strait_overload_action_active{action=\"%s\"} %d\n",
                   overload_action_name(a),
                   (st.overload & OVERLOAD_BIT(a)) != 0);
    buf_puts(b, "# HELP strait_overload_action_activations_total Times the "
                "memory action came into effect.\n"
                "# TYPE strait_overload_action_activations_total counter\n");
    for (int a = 0; a < OVERLOAD_NACTIONS; a++)
        buf_printf(b,
                   "strait_overload_action_activations_total{action=\"%s\"} "
                   "%" PRIu64 "\n",
                   overload_action_name(a), st.overload_activations[a]);
    if (ops->lua_errors != NULL) {
        buf_puts(b, "# HELP strait_lua_errors_total LuaPolicy runs that "
                    "failed, by phase and reason.\n"
                    "# TYPE strait_lua_errors_total counter\n");
        ops->lua_errors(ops->arg, prom_lua_error, b);
    }
    if (ops->links_prometheus != NULL)
        ops->links_prometheus(ops->arg, b);
    if (st.has_identity)
        buf_printf(b,
                   "# HELP strait_ca_identity_unstored 1 while this node's "
                   "certificate is in use from memory only (ca.dir/identity "
                   "could not be written).\n"
                   "# TYPE strait_ca_identity_unstored gauge\n"
                   "strait_ca_identity_unstored %d\n"
                   "# HELP strait_ca_identity_store_failures_total Failed "
                   "writes of this node's certificate to ca.dir/identity.\n"
                   "# TYPE strait_ca_identity_store_failures_total counter\n"
                   "strait_ca_identity_store_failures_total %" PRIu64 "\n"
                   "# HELP strait_ca_identity_renew_failures Renewals of "
                   "this node's certificate that failed since the last "
                   "success (0 once one succeeds).\n"
                   "# TYPE strait_ca_identity_renew_failures gauge\n"
                   "strait_ca_identity_renew_failures %" PRIu64 "\n"
                   "# HELP strait_ca_identity_expired 1 while this node's "
                   "certificate is past its notAfter.\n"
                   "# TYPE strait_ca_identity_expired gauge\n"
                   "strait_ca_identity_expired %d\n",
                   st.identity_unstored, st.identity_store_failures,
                   st.identity_renew_failures, st.identity_expired);
    free(sums);
}

static const char *lb_name(const struct cluster *c)
{
    switch (c->lb) {
    case CLUSTER_LB_RANDOM:
        return "random";
    case CLUSTER_LB_LEAST_REQUEST:
        return "least_request";
    case CLUSTER_LB_HASH:
        return c->hash->algo == LB_MAGLEV ? "maglev" : "ring_hash";
    default:
        return "round_robin";
    }
}

/*
 * One endpoint's lines: its weight, Envoy's health_flags (/failed_outlier_check
 * while ejected) and, under outlier detection, how many times it was ejected
 * and, while it is, until when (wall clock) and for how much longer.
 */
static void endpoint_lines(struct buf *b, const struct cluster *c, size_t k,
                           uint64_t mono, const struct timespec *real)
{
    char as[ADDR_STRLEN];
    struct outlier_host_state st;

    addr_format(&c->endpoints[k], as, sizeof(as));
    outlier_state(c->od, k, mono, &st);
    buf_printf(b, "%s::%s::weight::%" PRIu32 "\n", c->name, as,
               cluster_weight(c, k));
    buf_printf(b, "%s::%s::health_flags::%s\n", c->name, as,
               st.ejected ? "/failed_outlier_check" : "healthy");
    if (c->ep_meta != NULL) {
        /* East-west: where the endpoint is and how it is reached. */
        const struct cluster_endpoint_meta *m = &c->ep_meta[k];
        buf_printf(b, "%s::%s::network::%s\n", c->name, as, m->network);
        buf_printf(b, "%s::%s::locality::%s\n", c->name, as, m->locality);
        if (m->via != NULL)
            buf_printf(b, "%s::%s::reached::via gateway %s\n", c->name, as,
                       m->via);
        else
            buf_printf(b, "%s::%s::reached::direct\n", c->name, as);
    }
    /* Envoy's priority: the locality level (localityLbSetting), shown
     * for a cluster with more than one. */
    if (c->prio != NULL && c->prio->weight == NULL)
        buf_printf(b, "%s::%s::priority::%" PRIu32 "\n", c->name, as,
                   cluster_level_of(c->prio, k));
    if (c->od == NULL)
        return;
    buf_printf(b, "%s::%s::outlier_ejections::%" PRIu64 "\n", c->name, as,
               st.ejections);
    if (st.ejected) {
        uint64_t left = st.until - mono;
        time_t secs = real->tv_sec +
                      (time_t)((uint64_t)real->tv_nsec / 1000000 + left) / 1000;
        unsigned ms =
            (unsigned)(((uint64_t)real->tv_nsec / 1000000 + left) % 1000);
        struct tm tm;
        char when[40];

        gmtime_r(&secs, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        buf_printf(b, "%s::%s::outlier_ejected_until::%s.%03uZ\n", c->name, as,
                   when, ms);
        buf_printf(b, "%s::%s::outlier_ejection_remaining_ms::%" PRIu64 "\n",
                   c->name, as, left);
    }
}

/* A cluster's locality priority levels: how many, and the share of the
 * traffic each gets now (Envoy's priority load), with a level in panic
 * (balanced over all its endpoints) marked. */
static void prio_lines(struct buf *b, const struct cluster *c, uint64_t mono)
{
    uint32_t load[PRIO_MAX_LEVELS];
    unsigned char panic[PRIO_MAX_LEVELS];
    const struct cluster_prio *p = c->prio;

    cluster_prio_loads(c, mono, load, panic);
    if (p->weight != NULL) {
        /* distribute: localities of one priority, by weight; the share of
         * the traffic each takes now. */
        uint64_t sum = 0;
        for (size_t l = 0; l < p->nlevels; l++)
            sum += load[l];
        for (size_t l = 0; l < p->nlevels; l++) {
            size_t ep = p->order[p->off[l]];
            const char *loc = c->ep_meta != NULL ? c->ep_meta[ep].locality : "";
            buf_printf(b, "%s::locality_weight::%s::%" PRIu32 "\n", c->name,
                       loc, p->weight[l]);
            buf_printf(b, "%s::locality_load::%s::%" PRIu64 "\n", c->name, loc,
                       sum > 0 ? (uint64_t)load[l] * 100 / sum : 0);
        }
        return;
    }
    buf_printf(b, "%s::priority_levels::%zu\n", c->name, c->prio->nlevels);
    for (size_t l = 0; l < c->prio->nlevels; l++) {
        buf_printf(b, "%s::priority_load::%zu::%" PRIu32 "\n", c->name, l,
                   load[l]);
        if (panic[l])
            buf_printf(b, "%s::priority_panic::%zu::1\n", c->name, l);
    }
}

void admin_render_clusters(const struct admin_ops *ops, struct buf *b)
{
    struct cluster *const *cl;
    size_t nc = ops->clusters != NULL ? ops->clusters(ops->arg, &cl) : 0;
    uint64_t mono = clock_ms();
    struct timespec real;

    clock_gettime(CLOCK_REALTIME, &real);

    /* Envoy's /clusters shape: one line per cluster fact and endpoint. */
    for (size_t i = 0; i < nc; i++) {
        struct cluster_counters c;

        cluster_sum(cl[i], &c);
        buf_printf(b, "%s::protocol::%s\n", cl[i]->name,
                   cl[i]->protocol == CLUSTER_HTTP2 ? "http2" : "http1");
        buf_printf(b, "%s::tls::%s\n", cl[i]->name,
                   cl[i]->tls != NULL ? "on" : "off");
        if (cl[i]->sni != NULL)
            buf_printf(b, "%s::sni::%s\n", cl[i]->name, cl[i]->sni);
        /* Clusters outboundTrafficPolicy made, not a declared service. */
        if (cl[i]->origin == CLUSTER_PASSTHROUGH)
            buf_printf(b, "%s::outbound_traffic_policy::ALLOW_ANY\n",
                       cl[i]->name);
        else if (cl[i]->origin == CLUSTER_BLACKHOLE)
            buf_printf(b, "%s::outbound_traffic_policy::REGISTRY_ONLY\n",
                       cl[i]->name);
        buf_printf(b, "%s::rq_total::%" PRIu64 "\n", cl[i]->name, c.rq_total);
        buf_printf(b, "%s::max_requests::%" PRIu64 "\n", cl[i]->name,
                   cl[i]->max_requests ? cl[i]->max_requests : UINT32_MAX);
        if (cl[i]->max_requests > 0) /* counted only under a limit */
            buf_printf(b, "%s::rq_active::%" PRIu64 "\n", cl[i]->name,
                       __atomic_load_n(&cl[i]->rq_active, __ATOMIC_RELAXED));
        buf_printf(b, "%s::rq_overflow::%" PRIu64 "\n", cl[i]->name,
                   c.rq_overflow);
        buf_printf(b, "%s::max_retries::%" PRIu64 "\n", cl[i]->name,
                   cl[i]->max_retries ? cl[i]->max_retries : UINT32_MAX);
        buf_printf(b, "%s::rq_retry_overflow::%" PRIu64 "\n", cl[i]->name,
                   c.rq_retry_overflow);
        buf_printf(b, "%s::max_connections::%" PRIu64 "\n", cl[i]->name,
                   cl[i]->max_connections ? cl[i]->max_connections
                                          : UINT32_MAX);
        buf_printf(b, "%s::max_pending_requests::%" PRIu64 "\n", cl[i]->name,
                   cl[i]->max_pending ? cl[i]->max_pending : UINT32_MAX);
        if (cl[i]->max_connections > 0) { /* counted only under a limit */
            buf_printf(b, "%s::cx_active::%" PRIu64 "\n", cl[i]->name,
                       __atomic_load_n(&cl[i]->cx_active, __ATOMIC_RELAXED));
            buf_printf(b, "%s::rq_pending_active::%" PRIu64 "\n", cl[i]->name,
                       __atomic_load_n(&cl[i]->rq_waiting, __ATOMIC_RELAXED));
        }
        buf_printf(b, "%s::cx_overflow::%" PRIu64 "\n", cl[i]->name,
                   c.cx_overflow);
        buf_printf(b, "%s::lb::%s\n", cl[i]->name, lb_name(cl[i]));
        if (cl[i]->hash != NULL) /* ring points, or Maglev slots */
            buf_printf(b, "%s::lb_table_size::%zu\n", cl[i]->name,
                       cl[i]->hash->size);
        buf_printf(b, "%s::outlier_detection::%s\n", cl[i]->name,
                   cl[i]->od != NULL ? "on" : "off");
        /* Endpoints on other networks the split horizon left out. */
        if (cl[i]->remote_skipped_mtls > 0)
            buf_printf(b,
                       "%s::remote_endpoints_skipped::%" PRIu32
                       " (cross-network needs ISTIO_MUTUAL)\n",
                       cl[i]->name, cl[i]->remote_skipped_mtls);
        if (cl[i]->remote_skipped_family > 0)
            buf_printf(b,
                       "%s::remote_endpoints_skipped::%" PRIu32
                       " (no gateway of this node's IP family)\n",
                       cl[i]->name, cl[i]->remote_skipped_family);
        if (cl[i]->remote_skipped_view > 0)
            buf_printf(b,
                       "%s::remote_endpoints_skipped::%" PRIu32
                       " (east-west gateway: not on this network)\n",
                       cl[i]->name, cl[i]->remote_skipped_view);
        if (cl[i]->remote_skipped_no_gateway > 0)
            buf_printf(b,
                       "%s::remote_endpoints_skipped::%" PRIu32
                       " (no address and no gateway)\n",
                       cl[i]->name, cl[i]->remote_skipped_no_gateway);
        if (cl[i]->prio != NULL)
            prio_lines(b, cl[i], mono);
        if (cl[i]->nendpoints == 0)
            buf_printf(b, "%s::endpoints::none\n", cl[i]->name);
        for (size_t k = 0; k < cl[i]->nendpoints; k++)
            endpoint_lines(b, cl[i], k, mono, &real);
    }
}

static void reply(struct evhttp_request *req, int code, const char *reason,
                  const char *ctype, struct buf *body)
{
    struct evbuffer *out = evhttp_request_get_output_buffer(req);

    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      ctype);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control",
                      "no-store");
    /* evhttp does not drop the body of a HEAD answer itself; a body there
     * would be read as the start of the next response. */
    if (evhttp_request_get_command(req) != EVHTTP_REQ_HEAD)
        evbuffer_add(out, buf_ptr(body), buf_len(body));
    evhttp_send_reply(req, code, reason, NULL);
}

static int method_is(struct evhttp_request *req, enum evhttp_cmd_type want,
                     struct buf *body)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);

    if (m == want || (want == EVHTTP_REQ_GET && m == EVHTTP_REQ_HEAD))
        return 1;
    buf_puts(body, want == EVHTTP_REQ_GET ? "use GET\n" : "use POST\n");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                      want == EVHTTP_REQ_GET ? "GET, HEAD" : "POST");
    reply(req, 405, "Method Not Allowed", "text/plain", body);
    return 0;
}

/*
 * POST /reload runs the reload on this (the main) thread before it
 * answers, so the answer's first line says what happened: "reloaded",
 * "reload failed: REASON" (200 both: the request was carried out; `strait
 * reload` and ExecReload read the line), "reload queued" (it runs once
 * the workers have switched to the last configuration; its outcome shows
 * in server.reloads_ok / reloads_failed), or 503 "draining".
 */
static void reload_reply(struct admin *a, struct evhttp_request *req,
                         struct buf *body)
{
    enum admin_reload r =
        a->ops.reload != NULL ? a->ops.reload(a->ops.arg) : ADMIN_RELOADED;
    struct admin_status st;

    switch (r) {
    case ADMIN_RELOADED:
        buf_puts(body, "reloaded\n");
        break;
    case ADMIN_RELOAD_FAILED:
        a->ops.status(a->ops.arg, &st);
        buf_printf(body, "reload failed: %s\n",
                   st.last_reload_error ? st.last_reload_error
                                        : "unknown error");
        break;
    case ADMIN_RELOAD_QUEUED:
        buf_puts(body, "reload queued: it runs once the workers have "
                       "switched to the last configuration\n");
        break;
    case ADMIN_RELOAD_DRAINING:
        buf_puts(body, "draining: reload ignored\n");
        reply(req, 503, "Service Unavailable", "text/plain", body);
        return;
    }
    reply(req, 200, "OK", "text/plain; charset=utf-8", body);
}

/*
 * POST /upgrade starts a binary upgrade and answers at once: "upgrade
 * started: pid N" (200; `strait upgrade` then watches server.pid and
 * server.upgrades_failed in /stats), "upgrade refused: REASON" (409), or
 * 503 while draining.
 */
static void upgrade_reply(struct admin *a, struct evhttp_request *req,
                          struct buf *body)
{
    struct admin_status st;
    struct buf why;
    int pid = 0;

    buf_init(&why, 4096);
    if (a->ops.upgrade(a->ops.arg, &pid, &why) == 0) {
        buf_printf(body, "upgrade started: pid %d\n", pid);
        reply(req, 200, "OK", "text/plain; charset=utf-8", body);
    } else {
        a->ops.status(a->ops.arg, &st);
        buf_printf(body, "upgrade refused: %.*s\n", (int)buf_len(&why),
                   buf_ptr(&why));
        if (st.draining)
            reply(req, 503, "Service Unavailable", "text/plain", body);
        else
            reply(req, 409, "Conflict", "text/plain; charset=utf-8", body);
    }
    buf_dispose(&why);
}

/*
 * GET /server_info in Envoy's shape (admin's ServerInfo message), for the
 * tools that read it: the version (Envoy's "<revision>/<version>/<status>/
 * <build type>/<TLS library>", so the version is the second field), the
 * state, the uptimes as protobuf durations, and the command line options
 * strait has an equivalent of. Envoy's hot restart (shared memory) is not
 * strait's: a binary upgrade hands the sockets over instead, and
 * restart_epoch counts those.
 */
void admin_render_server_info(const struct admin_ops *ops, struct buf *b)
{
    struct admin_status st;

    ops->status(ops->arg, &st);
    buf_puts(b, "{\n \"version\": \"strait/" PACKAGE_VERSION
                "/Clean/RELEASE/BoringSSL\",\n \"state\": ");
    buf_puts(b, st.draining  ? "\"DRAINING\""
                : st.serving ? "\"LIVE\""
                             : "\"INITIALIZING\"");
    buf_puts(b, ",\n \"hot_restart_version\": \"disabled\",\n"
                " \"command_line_options\": {\n  \"concurrency\": ");
    buf_printf(b, "%d,\n  \"config_path\": ", st.workers);
    json_str(b, st.config_path != NULL ? st.config_path : "");
    buf_puts(b, ",\n  \"log_level\": ");
    json_str(b, st.log_level != NULL ? st.log_level : "info");
    buf_printf(b,
               ",\n  \"drain_time\": \"%" PRIu64 "s\",\n"
               "  \"restart_epoch\": %d,\n  \"mode\": \"Serve\"\n },\n"
               " \"uptime_current_epoch\": \"%" PRIu64 "s\",\n"
               " \"uptime_all_epochs\": \"%" PRIu64 "s\"\n}\n",
               st.drain_ms / 1000, st.restart_epoch, st.uptime_ms / 1000,
               st.uptime_all_ms / 1000);
}

static void handle(struct evhttp_request *req, void *arg)
{
    struct admin *a = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    struct buf body;

    buf_init(&body, ADMIN_BODY_MAX);
    if (path == NULL)
        path = "/";
    if (a->kind != ADMIN_PORT_ALL) {
        const char *only = a->kind == ADMIN_PORT_METRICS ? "/stats/prometheus"
                                                         : "/healthz/ready";
        if (strcmp(path, only) != 0) {
            buf_printf(&body, "not found; this port serves GET %s only\n",
                       only);
            reply(req, 404, "Not Found", "text/plain", &body);
            goto done;
        }
    } else {
        struct evkeyvalq *in = evhttp_request_get_input_headers(req);
        enum evhttp_cmd_type m = evhttp_request_get_command(req);
        struct admin_policy pol;
        const char *host = evhttp_find_header(in, "Host");
        const char *origin = evhttp_find_header(in, "Origin");
        admin_policy_of(a, &pol);
        if (!admin_host_allowed(&pol, &a->bound, host)) {
            LOG_LIMITED(10000, LOG_WARN,
                        "admin: refused a request for Host %s (not loopback, "
                        "the admin address or admin.allowedHosts)",
                        host ? host : "(none)");
            buf_puts(&body, "forbidden: this Host is not allowed (see "
                            "admin.allowedHosts)\n");
            reply(req, 403, "Forbidden", "text/plain", &body);
            goto done;
        }
        if ((m == EVHTTP_REQ_POST || m == EVHTTP_REQ_PUT ||
             m == EVHTTP_REQ_DELETE) &&
            !admin_origin_allowed(&pol, origin)) {
            LOG_LIMITED(10000, LOG_WARN,
                        "admin: refused a %s %s from Origin %s (not in "
                        "admin.allowedOrigins)",
                        m == EVHTTP_REQ_POST  ? "POST"
                        : m == EVHTTP_REQ_PUT ? "PUT"
                                              : "DELETE",
                        path, origin);
            buf_puts(&body, "forbidden: cross-origin requests may not "
                            "change state (see admin.allowedOrigins)\n");
            reply(req, 403, "Forbidden", "text/plain", &body);
            goto done;
        }
    }
    if (strcmp(path, "/healthz/ready") == 0 || strcmp(path, "/ready") == 0) {
        struct admin_status st;
        if (!method_is(req, EVHTTP_REQ_GET, &body))
            goto done;
        a->ops.status(a->ops.arg, &st);
        if (st.draining) {
            buf_puts(&body, "DRAINING\n");
        } else {
            buf_puts(&body, "LIVE\n");
        }
        /* Overloaded is still ready: the pod keeps serving what it
         * accepted, and pulling every overloaded replica out of its
         * Service at once would move the load nowhere. */
        if (st.overload != 0) {
            buf_puts(&body, "OVERLOADED:");
            for (int ac = 0; ac < OVERLOAD_NACTIONS; ac++)
                if (st.overload & OVERLOAD_BIT(ac))
                    buf_printf(&body, " %s", overload_action_name(ac));
            buf_printf(&body, " (memory %" PRIu64 " of %" PRIu64 " bytes)\n",
                       st.memory_used, st.memory_limit);
        }
        /* Still ready: the certificate is in use from memory and the node
         * serves with it; a restart before the write succeeds would start
         * from what ca.dir/identity holds, which is why it is shown. */
        if (st.identity_unstored)
            buf_printf(&body, "IDENTITY NOT STORED: %s (retrying)\n",
                       st.identity_store_error ? st.identity_store_error
                                               : "write failed");
        /* A failing renewal leaves the node ready while its certificate
         * is valid: it serves with it and retries. An expired one is
         * refused by every mesh peer: not ready. */
        if (st.identity_expired)
            buf_printf(&body, "IDENTITY EXPIRED: %s (retrying)\n",
                       st.identity_renew_error ? st.identity_renew_error
                                               : "not renewed");
        else if (st.identity_renew_error != NULL)
            buf_printf(&body, "IDENTITY RENEWAL FAILING: %s (retrying)\n",
                       st.identity_renew_error);
        if (st.last_reload_error != NULL)
            buf_printf(&body, "last reload failed: %s\n", st.last_reload_error);
        if (st.resource_error != NULL)
            buf_printf(&body, "last resource reload failed:\n%s\n",
                       st.resource_error);
        /* Until etcd's prefix has been read once the gateway runs without
         * the fleet's resources: not ready. Once read, a lost cluster
         * leaves the last good snapshot serving, and this says so. */
        if (st.has_etcd && !st.etcd_synced)
            buf_printf(&body, "etcd: not read yet (%s)\n",
                       st.etcd_error ? st.etcd_error : "connecting");
        else if (st.has_etcd && !st.etcd_built)
            buf_printf(&body, "etcd: read; building what it holds\n");
        else if (st.has_etcd && !st.etcd_watching && st.etcd_down_ms == 0)
            buf_printf(&body,
                       "etcd: read at revision %" PRId64
                       ", starting the watch (%s)\n",
                       st.etcd_revision, st.etcd_endpoint);
        else if (st.has_etcd && !st.etcd_watching)
            buf_printf(&body,
                       "etcd: no member answers for %" PRIu64
                       " ms; serving the last good snapshot (revision %" PRId64
                       "): %s\n",
                       st.etcd_down_ms, st.etcd_revision,
                       st.etcd_error ? st.etcd_error : "reconnecting");
        else if (st.has_etcd)
            buf_printf(&body, "etcd: watching at revision %" PRId64 " (%s)\n",
                       st.etcd_revision, st.etcd_endpoint);
        /* Skipped messages leave the gateway ready (what could be read
         * applies, later changes too) but are named here until restart. */
        if (st.has_etcd && st.etcd_last_skip != NULL)
            buf_printf(&body,
                       "etcd: %" PRIu64 " watch message(s) skipped, %zu "
                       "key(s) left out; last: %s\n",
                       st.etcd_skipped, st.etcd_keys_left_out,
                       st.etcd_last_skip);
        /* As Istio's gateway pod: not ready until every watched kind was
         * listed and the snapshot of them built; latched after that, so
         * an API server outage does not pull every gateway at once. */
        if (st.has_kube && !st.kube_ready) {
            buf_puts(&body, "kubernetes: not synced yet:");
            for (size_t i = 0; i < st.kube_nkinds; i++)
                if (!st.kube_kinds[i].synced)
                    buf_printf(&body, " %s", st.kube_kinds[i].kind);
            buf_printf(&body, " (%s)\n",
                       st.kube_error ? st.kube_error : "listing");
        } else if (st.has_kube && st.kube_error != NULL) {
            buf_printf(&body, "kubernetes: synced; last error: %s\n",
                       st.kube_error);
        }
        {
            int down = st.draining ||
                       (st.has_etcd && (!st.etcd_synced || !st.etcd_built)) ||
                       st.identity_expired || (st.has_kube && !st.kube_ready);
            reply(req, down ? 503 : 200, down ? "Service Unavailable" : "OK",
                  "text/plain", &body);
        }
    } else if (strcmp(path, "/stats") == 0) {
        if (!method_is(req, EVHTTP_REQ_GET, &body))
            goto done;
        admin_render_stats(&a->ops, &body);
        reply(req, 200, "OK", "text/plain; charset=utf-8", &body);
    } else if (strcmp(path, "/stats/prometheus") == 0) {
        if (!method_is(req, EVHTTP_REQ_GET, &body))
            goto done;
        admin_render_prometheus(&a->ops, &body);
        reply(req, 200, "OK", "text/plain; version=0.0.4; charset=utf-8",
              &body);
    } else if (strcmp(path, "/server_info") == 0) {
        if (!method_is(req, EVHTTP_REQ_GET, &body))
            goto done;
        admin_render_server_info(&a->ops, &body);
        reply(req, 200, "OK", "application/json", &body);
    } else if (strcmp(path, "/config_dump") == 0) {
        if (!method_is(req, EVHTTP_REQ_GET, &body))
            goto done;
        a->ops.config_json(a->ops.arg, &body);
        buf_puts(&body, "\n");
        reply(req, 200, "OK", "application/json", &body);
    } else if (strcmp(path, "/quitquitquit") == 0) {
        if (!method_is(req, EVHTTP_REQ_POST, &body))
            goto done;
        buf_puts(&body, "OK\n");
        reply(req, 200, "OK", "text/plain", &body);
        log_info("admin: /quitquitquit: draining");
        a->ops.quit(a->ops.arg);
    } else if (strcmp(path, "/clusters") == 0) {
        if (!method_is(req, EVHTTP_REQ_GET, &body))
            goto done;
        admin_render_clusters(&a->ops, &body);
        reply(req, 200, "OK", "text/plain; charset=utf-8", &body);
    } else if (strcmp(path, "/links") == 0 && a->ops.links_json != NULL) {
        if (!method_is(req, EVHTTP_REQ_GET, &body))
            goto done;
        a->ops.links_json(a->ops.arg, &body);
        reply(req, 200, "OK", "application/json", &body);
    } else if (strcmp(path, "/reload") == 0) {
        if (!method_is(req, EVHTTP_REQ_POST, &body))
            goto done;
        log_info("admin: /reload");
        reload_reply(a, req, &body);
    } else if (strcmp(path, "/upgrade") == 0 && a->ops.upgrade != NULL) {
        if (!method_is(req, EVHTTP_REQ_POST, &body))
            goto done;
        log_info("admin: /upgrade");
        upgrade_reply(a, req, &body);
    } else if (strcmp(path, "/") == 0) {
        buf_puts(&body,
                 "strait admin\n"
                 "  GET  /healthz/ready      200, or 503 while draining\n"
                 "  GET  /stats              counters as text\n"
                 "  GET  /stats/prometheus   Prometheus exposition\n"
                 "  GET  /server_info        version, state, uptime (Envoy's "
                 "JSON)\n"
                 "  GET  /config_dump        effective bootstrap (JSON)\n"
                 "  GET  /clusters           clusters and their endpoints\n"
                 "  GET  /links              site links (MeshLinks, catalog "
                 "API)\n"
                 "  POST /reload             re-read bootstrap and resources\n"
                 "  POST /upgrade            start the binary upgrade.binary\n"
                 "  POST /quitquitquit       drain and exit\n");
        reply(req, 200, "OK", "text/plain", &body);
    } else {
        buf_puts(&body, "not found; GET / lists the endpoints\n");
        reply(req, 404, "Not Found", "text/plain", &body);
    }
done:
    buf_dispose(&body);
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    evconnlistener_enable(arg);
}

/*
 * libevent's listener calls this when accept() fails for other than a
 * retriable reason. Out of descriptors the socket stays readable, and
 * without this the listener retried at once and logged every attempt
 * (a core at 100% and ~580k lines a second): pause ACCEPT_PAUSE_MS
 * instead, and warn at most once per ACCEPT_LOG_MS. libevent hands the
 * callback evhttp's pointer, not ours, so the pause and the rate limit
 * keep no state in struct admin (one admin API per process).
 */
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
    int e = EVUTIL_SOCKET_ERROR();
    struct timeval tv = ms_to_timeval(ACCEPT_PAUSE_MS);

    (void)arg;
    if (!accept_error_pauses(e)) {
        LOG_LIMITED(ACCEPT_LOG_MS, LOG_WARN, "admin: accept: %s", strerror(e));
        return;
    }
    LOG_LIMITED(ACCEPT_LOG_MS, LOG_WARN, "admin: accept: %s; pausing %d ms",
                strerror(e), ACCEPT_PAUSE_MS);
    evconnlistener_disable(lev);
    if (event_base_once(evconnlistener_get_base(lev), -1, EV_TIMEOUT,
                        on_accept_resume, lev, &tv) < 0)
        evconnlistener_enable(lev);
}

struct admin *admin_new(struct event_base *base, const struct addr *addr,
                        const struct admin_ops *ops, struct sock_pool *pool,
                        char **err)
{
    return admin_port_new(base, addr, ops, ADMIN_PORT_ALL, pool, err);
}

struct admin *admin_port_new(struct event_base *base, const struct addr *addr,
                             const struct admin_ops *ops, enum admin_port kind,
                             struct sock_pool *pool, char **err)
{
    struct evhttp_bound_socket *bound;
    struct admin *a = calloc(1, sizeof(*a));

    *err = NULL;
    if (a == NULL)
        return NULL;
    a->fd = -1;
    a->ops = *ops;
    a->kind = kind;
    a->http = evhttp_new(base);
    if (a->http == NULL) {
        err_set(err, "admin: cannot create the HTTP server");
        goto fail;
    }
    evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE);
    evhttp_set_max_headers_size(a->http, 16 * 1024);
    evhttp_set_max_body_size(a->http, 64 * 1024);
    evhttp_set_timeout(a->http, 30);
    evhttp_set_gencb(a->http, handle, a);
    a->fd =
        sock_pool_listen(pool, SOCK_POOL_ADMIN, addr, (int)kind, 128, 0, err);
    if (a->fd < 0)
        goto fail;
    if (sock_local_addr(a->fd, &a->bound) < 0)
        a->bound = *addr;
    bound = evhttp_accept_socket_with_handle(a->http, a->fd);
    if (bound == NULL) {
        err_set(err, "admin: cannot accept on the admin socket");
        goto fail;
    }
    evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(bound),
                                on_accept_error);
    a->bound_sock = bound;
    return a;
fail:
    admin_free(a);
    return NULL;
}

int admin_listen_fd(const struct admin *a)
{
    return a->bound_sock != NULL ? a->fd : -1;
}

void admin_stop_accepting(struct admin *a)
{
    if (a->bound_sock == NULL)
        return;
    /* evhttp closes the socket it accepted on. */
    evhttp_del_accept_socket(a->http, a->bound_sock);
    a->bound_sock = NULL;
    a->fd = -1;
}

void admin_free(struct admin *a)
{
    if (a == NULL)
        return;
    /* evhttp owns the bound socket once accepting and closes it. */
    if (a->http != NULL)
        evhttp_free(a->http);
    else if (a->fd >= 0)
        close(a->fd);
    strs_free(a->hosts, a->nhosts);
    strs_free(a->origins, a->norigins);
    free(a);
}
