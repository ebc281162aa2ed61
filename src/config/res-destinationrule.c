/*
 * DestinationRule: the schema of networking.istio.io DestinationRule
 * (traffic policies, subsets, port-level settings) with Istio's defaults
 * for connection pools and outlier detection, and the checks Istio's
 * validation makes on it.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/res-kinds.h"
#include "config/resource.h"
#include "core/buf.h"
#include "core/units.h"

#define DAY_MS (INT64_C(24) * 3600 * 1000)
#define U32_MAX_STR "4294967295"

static const char *const lb_simple[] = {
    "UNSPECIFIED", "LEAST_CONN",    "RANDOM", "PASSTHROUGH",
    "ROUND_ROBIN", "LEAST_REQUEST", NULL};
static const char *const h2_policies[] = {"DEFAULT", "DO_NOT_UPGRADE",
                                          "UPGRADE", NULL};
static const char *const client_tls_modes[] = {"DISABLE", "SIMPLE", "MUTUAL",
                                               "ISTIO_MUTUAL", NULL};

/* ---- load balancer ---------------------------------------------------------
 */

/*
 * httpCookie.ttl: Istio tells a ttl that is absent (no cookie is
 * generated) from one of 0s (a session cookie is), so the field holds the
 * duration plus one, and 0 when the key was not given.
 */
static int parse_cookie_ttl(const char *s, size_t n, void *dst,
                            const char **why)
{
    int64_t ms;

    if (units_duration_ms(s, n, &ms, why) < 0)
        return -1;
    if (ms < 0 || ms > 365 * DAY_MS) {
        *why = "must be between 0s and 365 days";
        return -1;
    }
    ms += 1;
    memcpy(dst, &ms, sizeof(ms));
    return 0;
}

static void cookie_ttl_json(struct buf *b, const void *src)
{
    int64_t v;

    memcpy(&v, src, sizeof(v));
    if (v <= 0)
        buf_puts(b, "null");
    else
        buf_printf(b, "\"%lldms\"", (long long)(v - 1));
}

#define CK(f) RES_OFF(struct res_http_cookie, f)
static const struct conf_key cookie_keys[] = {
    {.name = "name", .type = CONF_STR, .off = CK(name), .help = "cookie"},
    {.name = "path", .type = CONF_STR, .off = CK(path), .help = "cookie path"},
    {.name = "ttl",
     .type = CONF_CUSTOM,
     .off = CK(ttl),
     .help = "lifetime of a generated cookie (absent: none generated; "
             "0s: a session cookie)",
     .custom = parse_cookie_ttl,
     .custom_json = cookie_ttl_json},
    {.name = NULL},
};
#undef CK
static const struct conf_section cookie_section = {
    cookie_keys, 0, RES_OFF(struct res_http_cookie, mark)};

static const struct conf_key ring_keys[] = {
    {.name = "minimumRingSize",
     .type = CONF_INT,
     .off = RES_OFF(struct res_consistent_hash, ring_hash.minimum_ring_size) -
            RES_OFF(struct res_consistent_hash, ring_hash),
     .min = 1,
     .max = 8388608,
     .def = "1024",
     .help = "ring entries"},
    {.name = NULL},
};
static const struct conf_section ring_section = {ring_keys, 0, 0};

static const struct conf_key maglev_keys[] = {
    {.name = "tableSize",
     .type = CONF_INT,
     .off = RES_OFF(struct res_consistent_hash, maglev.table_size) -
            RES_OFF(struct res_consistent_hash, maglev),
     .min = 1,
     .max = 5000010,
     .def = "65537",
     .help = "table size, a prime below 5000011"},
    {.name = NULL},
};
static const struct conf_section maglev_section = {maglev_keys, 0, 0};

#define CH(f) RES_OFF(struct res_consistent_hash, f)
static const struct conf_key hash_keys[] = {
    {.name = "httpHeaderName",
     .type = CONF_STR,
     .off = CH(http_header_name),
     .help = "hash on this header"},
    {.name = "httpCookie",
     .type = CONF_SECTION,
     .off = CH(http_cookie),
     .help = "hash on this cookie",
     .sub = &cookie_section},
    {.name = "useSourceIp",
     .type = CONF_BOOL,
     .off = CH(use_source_ip),
     .def = "false",
     .help = "hash on the client address"},
    {.name = "httpQueryParameterName",
     .type = CONF_STR,
     .off = CH(http_query_parameter_name),
     .help = "hash on this query parameter"},
    {.name = "ringHash",
     .type = CONF_SECTION,
     .off = CH(ring_hash),
     .help = "ring hash",
     .sub = &ring_section},
    {.name = "maglev",
     .type = CONF_SECTION,
     .off = CH(maglev),
     .help = "maglev",
     .sub = &maglev_section},
    {.name = "minimumRingSize",
     .type = CONF_INT,
     .off = CH(minimum_ring_size),
     .min = 0,
     .max = 8388608,
     .help = "deprecated: use ringHash"},
    {.name = "hashKey",
     .type = CONF_ONEOF,
     .min = 1,
     .enums =
         (const char *const[]){"httpHeaderName", "httpCookie", "useSourceIp",
                               "httpQueryParameterName", NULL}},
    {.name = "hashAlgorithm",
     .type = CONF_ONEOF,
     .enums =
         (const char *const[]){"ringHash", "maglev", "minimumRingSize", NULL}},
    {.name = NULL},
};
#undef CH
static const struct conf_section hash_section = {
    hash_keys, 0, RES_OFF(struct res_consistent_hash, mark)};

/* localityLbSetting: the list limits are strait's (Istio has none); far
 * more than a mesh has regions and zones. */
#define LOCALITY_LIST_MAX 1000
#define FAILOVER_PRIORITY_MAX 100

static const struct conf_key distribute_keys[] = {
    {.name = "from",
     .type = CONF_STR,
     .off = RES_OFF(struct res_locality_distribute, from),
     .help = "the client locality (region/zone/subzone, '*' at the end)"},
    {.name = "to",
     .type = CONF_INT_MAP,
     .off = RES_OFF(struct res_locality_distribute, to),
     .min = 0,
     .max = UINT32_MAX,
     .help = "locality -> weight (1-100, summing to 100)"},
    {.name = NULL},
};
static const struct conf_section distribute_section = {
    distribute_keys, sizeof(struct res_locality_distribute),
    RES_OFF(struct res_locality_distribute, mark)};

static const struct conf_key failover_keys[] = {
    {.name = "from",
     .type = CONF_STR,
     .off = RES_OFF(struct res_locality_failover, from),
     .help = "the client's region"},
    {.name = "to",
     .type = CONF_STR,
     .off = RES_OFF(struct res_locality_failover, to),
     .help = "the region its traffic fails over to"},
    {.name = NULL},
};
static const struct conf_section failover_section = {
    failover_keys, sizeof(struct res_locality_failover),
    RES_OFF(struct res_locality_failover, mark)};

#define LL(f) RES_OFF(struct res_locality_lb, f)
static const struct conf_key locality_keys[] = {
    {.name = "enabled",
     .type = CONF_BOOL,
     .off = LL(enabled),
     .def = "true",
     .help = "locality load balancing for this policy"},
    {.name = "distribute",
     .type = CONF_LIST,
     .off = LL(distribute),
     .max = LOCALITY_LIST_MAX,
     .help = "traffic shares per locality, by the client's locality",
     .sub = &distribute_section},
    {.name = "failover",
     .type = CONF_LIST,
     .off = LL(failover),
     .max = LOCALITY_LIST_MAX,
     .help = "region to fail over to, by the client's region",
     .sub = &failover_section},
    {.name = "failoverPriority",
     .type = CONF_STR_LIST,
     .off = LL(failover_priority),
     .max = FAILOVER_PRIORITY_MAX,
     .help = "labels (or label=value) ordering endpoints into priorities"},
    {.name = NULL},
};
#undef LL
static const struct conf_section locality_section = {
    locality_keys, 0, RES_OFF(struct res_locality_lb, mark)};

#define LB(f) RES_OFF(struct res_load_balancer, f)
static const struct conf_key lb_keys[] = {
    {.name = "simple",
     .type = CONF_ENUM,
     .off = LB(simple),
     .def = "UNSPECIFIED",
     .help = "ROUND_ROBIN, LEAST_REQUEST, RANDOM, PASSTHROUGH",
     .enums = lb_simple},
    {.name = "consistentHash",
     .type = CONF_SECTION,
     .off = LB(consistent_hash),
     .help = "session affinity",
     .sub = &hash_section},
    {.name = "localityLbSetting",
     .type = CONF_SECTION,
     .off = LB(locality_lb_setting),
     .help = "priorities and weights by locality",
     .sub = &locality_section},
    {.name = "warmupDurationSecs",
     .type = CONF_DURATION,
     .off = LB(warmup_ms),
     .min = 0,
     .max = DAY_MS,
     .help = "slow start window"},
    {.name = "lbPolicy",
     .type = CONF_ONEOF,
     .enums = (const char *const[]){"simple", "consistentHash", NULL}},
    {.name = NULL},
};
#undef LB
static const struct conf_section lb_section = {
    lb_keys, 0, RES_OFF(struct res_load_balancer, mark)};

/* ---- connection pool -------------------------------------------------------
 */

static const struct conf_key keepalive_keys[] = {
    {.name = "probes",
     .type = CONF_INT,
     .off = RES_OFF(struct res_tcp_keepalive, probes),
     .min = 0,
     .max = 1000,
     .help = "probes before the connection is dead (0: OS default)"},
    {.name = "time",
     .type = CONF_DURATION,
     .off = RES_OFF(struct res_tcp_keepalive, time_ms),
     .min = 0,
     .max = DAY_MS,
     .help = "idle time before probing (0: OS default)"},
    {.name = "interval",
     .type = CONF_DURATION,
     .off = RES_OFF(struct res_tcp_keepalive, interval_ms),
     .min = 0,
     .max = DAY_MS,
     .help = "time between probes (0: OS default)"},
    {.name = NULL},
};
static const struct conf_section keepalive_section = {
    keepalive_keys, 0, RES_OFF(struct res_tcp_keepalive, mark)};

#define PT(f) RES_OFF(struct res_pool_tcp, f)
static const struct conf_key pool_tcp_keys[] = {
    {.name = "maxConnections",
     .type = CONF_INT,
     .off = PT(max_connections),
     .min = 1,
     .max = UINT32_MAX,
     .def = U32_MAX_STR,
     .help = "connections to the service at most"},
    {.name = "connectTimeout",
     .type = CONF_DURATION,
     .off = PT(connect_timeout_ms),
     .min = 1,
     .max = DAY_MS,
     .def = "10s",
     .help = "TCP connect timeout"},
    {.name = "tcpKeepalive",
     .type = CONF_SECTION,
     .off = PT(tcp_keepalive),
     .help = "SO_KEEPALIVE",
     .sub = &keepalive_section},
    {.name = "maxConnectionDuration",
     .type = CONF_DURATION,
     .off = PT(max_connection_duration_ms),
     .min = 0,
     .max = 365 * DAY_MS,
     .help = "connection lifetime (0: unlimited)"},
    {.name = "idleTimeout",
     .type = CONF_DURATION,
     .off = PT(idle_timeout_ms),
     .min = 0,
     .max = 365 * DAY_MS,
     .def = "1h",
     .help = "close an idle TCP connection"},
    {.name = NULL},
};
#undef PT
static const struct conf_section pool_tcp_section = {
    pool_tcp_keys, 0, RES_OFF(struct res_pool_tcp, mark)};

#define PH(f) RES_OFF(struct res_pool_http, f)
static const struct conf_key pool_http_keys[] = {
    {.name = "http1MaxPendingRequests",
     .type = CONF_INT,
     .off = PH(http1_max_pending_requests),
     .min = 1,
     .max = UINT32_MAX,
     .def = U32_MAX_STR,
     .help = "requests waiting for a connection"},
    {.name = "http2MaxRequests",
     .type = CONF_INT,
     .off = PH(http2_max_requests),
     .min = 1,
     .max = UINT32_MAX,
     .def = U32_MAX_STR,
     .help = "active requests to the service"},
    {.name = "maxRequestsPerConnection",
     .type = CONF_INT,
     .off = PH(max_requests_per_connection),
     .min = 0,
     .max = UINT32_MAX,
     .def = "0",
     .help = "requests per connection (0: unlimited)"},
    {.name = "maxRetries",
     .type = CONF_INT,
     .off = PH(max_retries),
     .min = 0,
     .max = UINT32_MAX,
     .def = U32_MAX_STR,
     .help = "outstanding retries"},
    {.name = "idleTimeout",
     .type = CONF_DURATION,
     .off = PH(idle_timeout_ms),
     .min = 0,
     .max = 365 * DAY_MS,
     .def = "1h",
     .help = "close an idle upstream connection"},
    {.name = "h2UpgradePolicy",
     .type = CONF_ENUM,
     .off = PH(h2_upgrade_policy),
     .def = "DEFAULT",
     .help = "upgrade HTTP/1.1 to HTTP/2",
     .enums = h2_policies},
    {.name = "useClientProtocol",
     .type = CONF_BOOL,
     .off = PH(use_client_protocol),
     .def = "false",
     .help = "speak the client's HTTP version upstream"},
    {.name = "maxConcurrentStreams",
     .type = CONF_INT,
     .off = PH(max_concurrent_streams),
     .min = 1,
     .max = INT32_MAX,
     .def = "2147483647",
     .help = "HTTP/2 streams per connection"},
    {.name = NULL},
};
#undef PH
static const struct conf_section pool_http_section = {
    pool_http_keys, 0, RES_OFF(struct res_pool_http, mark)};

static const struct conf_key pool_keys[] = {
    {.name = "tcp",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_connection_pool, tcp),
     .help = "TCP limits",
     .sub = &pool_tcp_section},
    {.name = "http",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_connection_pool, http),
     .help = "HTTP limits",
     .sub = &pool_http_section},
    {.name = NULL},
};
static const struct conf_section pool_section = {
    pool_keys, 0, RES_OFF(struct res_connection_pool, mark)};

/* ---- outlier detection and tls ---------------------------------------------
 */

#define OD(f) RES_OFF(struct res_outlier, f)
static const struct conf_key outlier_keys[] = {
    {.name = "consecutive5xxErrors",
     .type = CONF_INT,
     .off = OD(consecutive_5xx_errors),
     .min = 0,
     .max = UINT32_MAX,
     .def = "5",
     .help = "5xx answers in a row that eject (0: off)"},
    {.name = "consecutiveGatewayErrors",
     .type = CONF_INT,
     .off = OD(consecutive_gateway_errors),
     .min = 0,
     .max = UINT32_MAX,
     .def = "0",
     .help = "502/503/504 in a row that eject (0: off)"},
    {.name = "consecutiveErrors",
     .type = CONF_INT,
     .off = OD(consecutive_errors),
     .min = 0,
     .max = INT32_MAX,
     .help = "deprecated: use consecutive5xxErrors"},
    {.name = "interval",
     .type = CONF_DURATION,
     .off = OD(interval_ms),
     .min = 1,
     .max = DAY_MS,
     .def = "10s",
     .help = "time between ejection sweeps"},
    {.name = "baseEjectionTime",
     .type = CONF_DURATION,
     .off = OD(base_ejection_time_ms),
     .min = 1,
     .max = DAY_MS,
     .def = "30s",
     .help = "first ejection; grows with each ejection"},
    {.name = "maxEjectionPercent",
     .type = CONF_INT,
     .off = OD(max_ejection_percent),
     .min = 0,
     .max = 100,
     .def = "10",
     .help = "share of endpoints that may be ejected"},
    {.name = "minHealthPercent",
     .type = CONF_INT,
     .off = OD(min_health_percent),
     .min = 0,
     .max = 100,
     .def = "0",
     .help = "below this share healthy, no ejection"},
    {.name = "splitExternalLocalOriginErrors",
     .type = CONF_BOOL,
     .off = OD(split_external_local_origin_errors),
     .def = "false",
     .help = "count connection errors apart"},
    {.name = "consecutiveLocalOriginFailures",
     .type = CONF_INT,
     .off = OD(consecutive_local_origin_failures),
     .min = 0,
     .max = UINT32_MAX,
     .def = "5",
     .help = "local failures in a row that eject"},
    {.name = NULL},
};
#undef OD
static const struct conf_section outlier_section = {
    outlier_keys, 0, RES_OFF(struct res_outlier, mark)};

#define CT(f) RES_OFF(struct res_client_tls, f)
static const struct conf_key client_tls_keys[] = {
    {.name = "mode",
     .type = CONF_ENUM,
     .off = CT(mode),
     .def = "DISABLE",
     .help = "DISABLE, SIMPLE, MUTUAL, ISTIO_MUTUAL",
     .enums = client_tls_modes},
    {.name = "clientCertificate",
     .type = CONF_STR,
     .off = CT(client_certificate),
     .help = "certificate file (MUTUAL)"},
    {.name = "privateKey",
     .type = CONF_STR,
     .off = CT(private_key),
     .help = "key file (MUTUAL)"},
    {.name = "caCertificates",
     .type = CONF_STR,
     .off = CT(ca_certificates),
     .help = "CA bundle to verify the server"},
    {.name = "caCrl", .type = CONF_STR, .off = CT(ca_crl), .help = "CRL"},
    {.name = "credentialName",
     .type = CONF_STR,
     .off = CT(credential_name),
     .help = "credential in the credentials directory"},
    {.name = "subjectAltNames",
     .type = CONF_STR_LIST,
     .off = CT(subject_alt_names),
     .max = 1000,
     .help = "server SANs accepted"},
    {.name = "sni", .type = CONF_STR, .off = CT(sni), .help = "SNI to send"},
    {.name = "insecureSkipVerify",
     .type = CONF_BOOL,
     .off = CT(insecure_skip_verify),
     .def = "false",
     .help = "do not verify the server"},
    {.name = NULL},
};
#undef CT
static const struct conf_section client_tls_section = {
    client_tls_keys, 0, RES_OFF(struct res_client_tls, mark)};

/* ---- traffic policy -------------------------------------------------------
 */

static const struct conf_key port_keys[] = {
    {.name = "number",
     .type = CONF_INT,
     .off = RES_OFF(struct res_port_selector, number),
     .min = 1,
     .max = 65535,
     .help = "port number"},
    {.name = NULL},
};
static const struct conf_section port_section = {
    port_keys, 0, RES_OFF(struct res_port_selector, mark)};

#define POLICY_KEYS(T_)                                                        \
    {.name = "loadBalancer",                                                   \
     .type = CONF_SECTION,                                                     \
     .off = RES_OFF(T_, load_balancer),                                        \
     .help = "load balancing",                                                 \
     .sub = &lb_section},                                                      \
        {.name = "connectionPool",                                             \
         .type = CONF_SECTION,                                                 \
         .off = RES_OFF(T_, connection_pool),                                  \
         .help = "circuit breaker limits",                                     \
         .sub = &pool_section},                                                \
        {.name = "outlierDetection",                                           \
         .type = CONF_SECTION,                                                 \
         .off = RES_OFF(T_, outlier_detection),                                \
         .help = "ejection of failing endpoints",                              \
         .sub = &outlier_section},                                             \
    {                                                                          \
        .name = "tls", .type = CONF_SECTION, .off = RES_OFF(T_, tls),          \
        .help = "TLS to the upstream", .sub = &client_tls_section              \
    }

static const struct conf_key port_policy_keys[] = {
    {.name = "port",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_port_policy, port),
     .help = "port (required)",
     .sub = &port_section},
    POLICY_KEYS(struct res_port_policy),
    {.name = NULL},
};
static const struct conf_section port_policy_section = {
    port_policy_keys, sizeof(struct res_port_policy),
    RES_OFF(struct res_port_policy, mark)};

static const struct conf_key policy_keys[] = {
    POLICY_KEYS(struct res_traffic_policy),
    {.name = "portLevelSettings",
     .type = CONF_LIST,
     .off = RES_OFF(struct res_traffic_policy, port_level_settings),
     .max = 65535,
     .help = "per-port overrides",
     .sub = &port_policy_section},
    {.name = "tunnel",
     .type = CONF_IGNORE,
     .off = RES_OFF(struct res_traffic_policy, tunnel),
     .help = "accepted and ignored"},
    {.name = "proxyProtocol",
     .type = CONF_IGNORE,
     .off = RES_OFF(struct res_traffic_policy, proxy_protocol),
     .help = "accepted and ignored"},
    {.name = NULL},
};
#undef POLICY_KEYS
static const struct conf_section policy_section = {
    policy_keys, 0, RES_OFF(struct res_traffic_policy, mark)};

static const struct conf_key subset_keys[] = {
    {.name = "name",
     .type = CONF_STR,
     .off = RES_OFF(struct res_subset, name),
     .help = "subset name (required)"},
    {.name = "labels",
     .type = CONF_STR_MAP,
     .off = RES_OFF(struct res_subset, labels),
     .help = "labels that select the endpoints"},
    {.name = "trafficPolicy",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_subset, traffic_policy),
     .help = "overrides for this subset",
     .sub = &policy_section},
    {.name = NULL},
};
static const struct conf_section subset_section = {
    subset_keys, sizeof(struct res_subset), RES_OFF(struct res_subset, mark)};

static const struct conf_key selector_keys[] = {
    {.name = "matchLabels",
     .type = CONF_STR_MAP,
     .off = RES_OFF(struct res_workload_selector, match_labels),
     .help = "labels"},
    {.name = NULL},
};
static const struct conf_section selector_section = {
    selector_keys, 0, RES_OFF(struct res_workload_selector, mark)};

#define DR(f) RES_OFF(struct res_destination_rule, f)
static const struct conf_key dr_keys[] = {
    {.name = "host",
     .type = CONF_STR,
     .off = DR(host),
     .help = "service host (required)"},
    {.name = "trafficPolicy",
     .type = CONF_SECTION,
     .off = DR(traffic_policy),
     .help = "policies",
     .sub = &policy_section},
    {.name = "subsets",
     .type = CONF_LIST,
     .off = DR(subsets),
     .max = 10000,
     .help = "named versions of the service",
     .sub = &subset_section},
    {.name = "exportTo",
     .type = CONF_STR_LIST,
     .off = DR(export_to),
     .max = 1000,
     .help = "namespaces this is visible to"},
    {.name = "workloadSelector",
     .type = CONF_SECTION,
     .off = DR(workload_selector),
     .help = "workloads this applies to",
     .sub = &selector_section},
    {.name = NULL},
};
#undef DR
static const struct conf_section dr_section = {dr_keys, 0, SIZE_MAX};

/* ---- checks -----------------------------------------------------------------
 */

/* Envoy's and Istio's test (Maglev tables must have a prime size). */
static int is_prime(int64_t x)
{
    if (x < 2)
        return 0;
    if (x < 4)
        return 1;
    if (x % 2 == 0)
        return 0;
    for (int64_t f = 3; f * f <= x; f += 2)
        if (x % f == 0)
            return 0;
    return 1;
}

/* The prime after x, for a helpful message. */
static int64_t next_prime(int64_t x)
{
    while (!is_prime(++x))
        ;
    return x;
}

/* One locality of a list being checked, split as Istio's
 * getLocalityParam() does: depth 0 region, 1 zone, 2 subzone. */
struct loc_seen {
    char r[128], z[128], s[128];
};

/* Istio's getLocalityParam(): region, zone and subzone of s (at most
 * three parts split at '/'), none of them empty. Returns the index of the
 * last part, or -1. */
static int loc_split(const char *s, struct loc_seen *out)
{
    char *dst[3] = {out->r, out->z, out->s};
    int depth = 0;

    memset(out, 0, sizeof(*out));
    for (;;) {
        size_t n = depth < 2 ? strcspn(s, "/") : strlen(s);
        if (n == 0 || n >= sizeof(out->r))
            return -1;
        memcpy(dst[depth], s, n);
        dst[depth][n] = '\0';
        if (s[n] == '\0')
            return depth;
        s += n + 1;
        depth++;
    }
}

/*
 * check_localities() is Istio's validateLocalities(): each locality has at
 * most one '*', at the end; no part is empty; and none overlaps one
 * before it (a region, or a region's '*', covers its zones; a zone its
 * subzones). Returns 0, or -1 after reporting the first problem.
 */
static int check_localities(struct res_check *ck, const struct conf_mark *mark,
                            const char *path, const char *const *locs, size_t n)
{
    struct loc_seen *seen = calloc(n ? n : 1, sizeof(*seen));
    size_t nseen = 0;
    int rc = -1;

    if (seen == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const char *l = locs[i] != NULL ? locs[i] : "";
        const char *star = strchr(l, '*');
        struct loc_seen cur;
        int depth, region = 0, zone = 0, any_zone = 0, exact = 0;

        if (star != NULL &&
            (strchr(star + 1, '*') != NULL || star[1] != '\0')) {
            res_err(ck, mark, path,
                    "locality %s wildcard '*' number can not exceed 1 and must "
                    "be in the end",
                    l);
            goto fail;
        }
        for (size_t k = 0; k < nseen; k++)
            if (strcmp(seen[k].r, "*") == 0)
                goto overlap;
        depth = loc_split(l, &cur);
        if (depth < 0) {
            res_err(ck, mark, path,
                    "locality %s must not contain empty region/zone/subzone "
                    "info",
                    l);
            goto fail;
        }
        for (size_t k = 0; k < nseen; k++) {
            if (strcmp(seen[k].r, cur.r) != 0)
                continue;
            region = 1;
            if (strcmp(seen[k].z, "*") == 0)
                any_zone = 1;
            if (strcmp(seen[k].z, cur.z) == 0) {
                zone = 1;
                if (strcmp(seen[k].s, "*") == 0 ||
                    strcmp(seen[k].s, cur.s) == 0)
                    exact = 1;
            }
        }
        if ((depth == 0 && region) || (depth == 1 && (any_zone || zone)) ||
            (depth == 2 && (any_zone || exact)))
            goto overlap;
        if (depth < 2)
            snprintf(cur.s, sizeof(cur.s), "*");
        if (depth < 1)
            snprintf(cur.z, sizeof(cur.z), "*");
        seen[nseen++] = cur;
        continue;
    overlap:
        res_err(ck, mark, path,
                "locality %s overlap with previous specified ones", l);
        goto fail;
    }
    rc = 0;
fail:
    free(seen);
    return rc;
}

/*
 * check_locality() is Istio's ValidateLocalityLbSetting(), with its
 * messages and levels: distribute and failover exclude each other;
 * failover excludes the topology labels in failoverPriority; each
 * distribute's weights are 1-100 and sum to 100; the localities are
 * well formed and do not overlap; failover needs outlier detection (a
 * warning: without it no endpoint is ever ejected, so traffic never moves);
 * a failover goes from one region to another.
 */
static void check_locality(struct res_check *ck,
                           const struct res_locality_lb *l,
                           const struct res_outlier *od, const char *path)
{
    static const char *const topo[] = {"topology.kubernetes.io/region",
                                       "topology.kubernetes.io/zone",
                                       "topology.istio.io/subzone"};
    const struct res_locality_distribute *dv = l->distribute.v;
    const struct res_locality_failover *fv = l->failover.v;
    const char **srcs;
    char p[400];

    if (l->mark.line == 0)
        return;
    res_path(p, sizeof(p), "%s.localityLbSetting", path);
    if (l->distribute.n > 0 && l->failover.n > 0) {
        res_err(ck, &l->mark, p,
                "can not simultaneously specify 'distribute' and 'failover'");
        return;
    }
    for (size_t i = 0; l->failover.n > 0 && i < l->failover_priority.n; i++)
        for (size_t k = 0; k < 3; k++)
            if (strcmp(l->failover_priority.v[i], topo[k]) == 0) {
                res_err(ck, &l->mark, p,
                        "can not simultaneously set 'failover' and topology "
                        "label '%s' in 'failover_priority'",
                        topo[k]);
                return;
            }
    srcs = calloc(l->distribute.n ? l->distribute.n : 1, sizeof(*srcs));
    if (srcs == NULL)
        return;
    for (size_t i = 0; i < l->distribute.n; i++) {
        const struct res_locality_distribute *d = &dv[i];
        const char **dst = calloc(d->to.n ? d->to.n : 1, sizeof(*dst));
        uint64_t total = 0;
        char q[440];

        res_path(q, sizeof(q), "%s.distribute[%zu]", p, i);
        srcs[i] = d->from != NULL ? d->from : "";
        if (dst == NULL)
            goto done;
        for (size_t k = 0; k < d->to.n; k++) {
            dst[k] = d->to.v[k].key;
            if (d->to.v[k].val <= 0 || d->to.v[k].val > 100) {
                res_err(ck, &d->mark, q,
                        "locality weight must be in range [1, 100]");
                free(dst);
                goto done;
            }
            total += (uint64_t)d->to.v[k].val;
        }
        if (total != 100) {
            res_err(ck, &d->mark, q, "total locality weight %llu != 100",
                    (unsigned long long)total);
            free(dst);
            goto done;
        }
        check_localities(ck, &d->mark, q, dst, d->to.n);
        free(dst);
    }
    check_localities(ck, &l->mark, p, srcs, l->distribute.n);
    if ((l->failover.n > 0 || l->failover_priority.n > 0) &&
        (od == NULL || od->mark.line == 0))
        res_warn_code(ck, "IST0133", &l->mark, p,
                      "outlier detection policy must be provided for "
                      "failover");
    for (size_t i = 0; i < l->failover.n; i++) {
        const char *from = fv[i].from ? fv[i].from : "";
        const char *to = fv[i].to ? fv[i].to : "";
        char q[440];

        res_path(q, sizeof(q), "%s.failover[%zu]", p, i);
        if (strcmp(from, to) == 0)
            res_err(ck, &fv[i].mark, q,
                    "locality lb failover settings must specify different "
                    "regions");
        if (strchr(from, '/') != NULL || strchr(to, '/') != NULL)
            res_err(ck, &fv[i].mark, q,
                    "locality lb failover only specify region");
        if (strchr(from, '*') != NULL || strchr(to, '*') != NULL)
            res_err(ck, &fv[i].mark, q,
                    "locality lb failover region should not contain '*' "
                    "wildcard");
    }
done:
    free(srcs);
}

static void check_lb(struct res_check *ck, const struct res_load_balancer *lb,
                     const struct res_outlier *od, const char *path)
{
    const struct res_consistent_hash *h = &lb->consistent_hash;
    char p[340];

    check_locality(ck, &lb->locality_lb_setting, od, path);
    if (h->mark.line == 0)
        return;
    res_path(p, sizeof(p), "%s.consistentHash", path);
    if (h->http_cookie.mark.line > 0 &&
        (h->http_cookie.name == NULL || h->http_cookie.name[0] == '\0'))
        res_err(ck, &h->http_cookie.mark, p,
                "httpCookie needs a name (Istio: name required for "
                "HttpCookie)");
    if (h->http_header_name != NULL && h->http_header_name[0] == '\0')
        res_err(ck, &h->mark, p, "httpHeaderName must not be empty");
    if (h->http_query_parameter_name != NULL &&
        h->http_query_parameter_name[0] == '\0')
        res_err(ck, &h->mark, p, "httpQueryParameterName must not be empty");
    if (h->minimum_ring_size != 0)
        res_warn(ck, &h->mark, p,
                 "minimumRingSize is deprecated: use ringHash: "
                 "{minimumRingSize: N}");
    if (h->maglev.mark.line > 0 && !is_prime(h->maglev.table_size))
        res_err(ck, &h->maglev.mark, p,
                "maglev tableSize %lld is not a prime number; Envoy needs a "
                "prime (the next one is %lld; the default is 65537)",
                (long long)h->maglev.table_size,
                (long long)next_prime(h->maglev.table_size));
}

static void check_tls(struct res_check *ck, const struct res_client_tls *t,
                      const char *path)
{
    if (t->mark.line == 0)
        return;
    if (t->mode == RES_TLS_MUTUAL && t->credential_name == NULL &&
        (t->client_certificate == NULL || t->private_key == NULL))
        res_err(ck, &t->mark, path,
                "tls mode MUTUAL needs clientCertificate and privateKey, or "
                "credentialName");
    if ((t->client_certificate == NULL) != (t->private_key == NULL) &&
        t->mode != RES_TLS_ISTIO_MUTUAL)
        res_err(ck, &t->mark, path,
                "clientCertificate and privateKey go together");
    if (t->ca_crl != NULL &&
        (t->mode == RES_TLS_DISABLE || t->mode == RES_TLS_ISTIO_MUTUAL))
        res_warn(ck, &t->mark, path,
                 "caCrl is ignored in tls mode %s: it applies to SIMPLE and "
                 "MUTUAL, whose servers are checked against your CA",
                 t->mode == RES_TLS_DISABLE ? "DISABLE" : "ISTIO_MUTUAL");
    else if (t->ca_crl != NULL && t->insecure_skip_verify)
        res_warn(ck, &t->mark, path,
                 "caCrl is ignored: insecureSkipVerify turns the server "
                 "certificate check off");
}

static void check_outlier(struct res_check *ck, const struct res_outlier *o,
                          const char *path)
{
    /* The table's ranges say the rest of what Istio checks: percentages
     * 0-100 and durations of at least 1ms. */
    if (o->mark.line > 0 && o->consecutive_errors != 0)
        res_warn(ck, &o->mark, path,
                 "consecutiveErrors is deprecated and ignored (as by Istio): "
                 "use consecutive5xxErrors or consecutiveGatewayErrors");
}

static void check_policy(struct res_check *ck, struct res_traffic_policy *tp,
                         const char *path)
{
    char p[300];

    res_path(p, sizeof(p), "%s.loadBalancer", path);
    check_lb(ck, &tp->load_balancer, &tp->outlier_detection, p);
    res_path(p, sizeof(p), "%s.tls", path);
    check_tls(ck, &tp->tls, p);
    res_path(p, sizeof(p), "%s.outlierDetection", path);
    check_outlier(ck, &tp->outlier_detection, p);
    if (tp->tunnel.line > 0)
        res_warn(ck, &tp->tunnel, path,
                 "tunnel is not supported by strait; ignored");
    if (tp->proxy_protocol.line > 0)
        res_warn(ck, &tp->proxy_protocol, path,
                 "proxyProtocol is not supported by strait; ignored");
    for (size_t i = 0; i < tp->port_level_settings.n; i++) {
        struct res_port_policy *pp =
            (struct res_port_policy *)tp->port_level_settings.v + i;
        res_path(p, sizeof(p), "%s.portLevelSettings[%zu]", path, i);
        if (pp->port.number == 0)
            res_err(ck, &pp->mark, p, "missing key 'port' with a number");
        for (size_t j = 0; j < i; j++) {
            const struct res_port_policy *o =
                (const struct res_port_policy *)tp->port_level_settings.v + j;
            if (o->port.number == pp->port.number && pp->port.number != 0)
                res_err(ck, &pp->mark, p,
                        "port %lld already has settings in "
                        "portLevelSettings[%zu]",
                        (long long)pp->port.number, j);
        }
        {
            char q[320];
            res_path(q, sizeof(q), "%s.loadBalancer", p);
            check_lb(ck, &pp->load_balancer, &pp->outlier_detection, q);
            res_path(q, sizeof(q), "%s.tls", p);
            check_tls(ck, &pp->tls, q);
            res_path(q, sizeof(q), "%s.outlierDetection", p);
            check_outlier(ck, &pp->outlier_detection, q);
        }
    }
}

static void dr_check(struct res_check *ck, struct resource *r)
{
    struct res_destination_rule *dr = r->spec;
    char p[128];

    if (dr->host == NULL) {
        res_err(ck, NULL, "spec", "missing key 'host'");
        return;
    }
    res_check_host(ck, NULL, "spec.host", dr->host,
                   RES_HOST_WILDCARD | RES_HOST_IP);
    check_policy(ck, &dr->traffic_policy, "spec.trafficPolicy");
    for (size_t i = 0; i < dr->subsets.n; i++) {
        struct res_subset *s = (struct res_subset *)dr->subsets.v + i;
        res_path(p, sizeof(p), "spec.subsets[%zu]", i);
        if (s->name == NULL || s->name[0] == '\0') {
            res_err(ck, &s->mark, p, "missing key 'name'");
            continue;
        }
        for (size_t j = 0; j < i; j++) {
            const struct res_subset *o =
                (const struct res_subset *)dr->subsets.v + j;
            if (o->name != NULL && strcmp(o->name, s->name) == 0)
                res_err(ck, &s->mark, p,
                        "subset name '%s' is already used by subsets[%zu]",
                        s->name, j);
        }
        res_path(p, sizeof(p), "spec.subsets[%zu].trafficPolicy", i);
        check_policy(ck, &s->traffic_policy, p);
    }
}

const struct res_kind_ops res_destination_rule_ops = {
    "DestinationRule", &dr_section, sizeof(struct res_destination_rule),
    dr_check};
