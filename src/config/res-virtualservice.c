/*
 * VirtualService: the schema of networking.istio.io VirtualService (http,
 * tls and tcp rules) and the checks Istio's validation makes on it, with
 * Istio's defaults that depend on other fields: a lone destination's
 * weight is 100, and a rule without a retries section retries twice.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/res-kinds.h"
#include "config/resource.h"
#include "core/addr.h"
#include "core/host.h"
#include "core/units.h"
#include "http/http.h"

/* Istio's (and Envoy's) retry policy when a route does not name one. */
#define RES_DEFAULT_RETRY_ON                                                   \
    "connect-failure,refused-stream,unavailable,cancelled,"                    \
    "retriable-status-codes"
#define RES_DEFAULT_RETRY_ATTEMPTS 2

#define MAX_ITEMS 100000

/* ---- StringMatch --------------------------------------------------------- */

#define SM(f) RES_OFF(struct res_strmatch, f)
#define SM_EXACT                                                               \
    {                                                                          \
        .name = "exact", .type = CONF_STR, .off = SM(exact),                   \
        .help = "equal to"                                                     \
    }
#define SM_PREFIX                                                              \
    {                                                                          \
        .name = "prefix", .type = CONF_STR, .off = SM(prefix),                 \
        .help = "starting with"                                                \
    }
#define SM_REGEX                                                               \
    {                                                                          \
        .name = "regex", .type = CONF_STR, .off = SM(regex),                   \
        .help = "matching the whole value (RE2 syntax)"                        \
    }

static const char *const sm_choices[] = {"exact", "prefix", "regex", NULL};
static const char *const hm_choices[] = {"exact", "prefix", "regex", "present",
                                         NULL};
static const char *const qm_choices[] = {"exact", "regex", NULL};

static const struct conf_key strmatch_keys[] = {
    SM_EXACT,
    SM_PREFIX,
    SM_REGEX,
    {.name = "StringMatch", .type = CONF_ONEOF, .min = 1, .enums = sm_choices},
    {.name = NULL},
};
static const struct conf_section strmatch_section = {
    strmatch_keys, sizeof(struct res_strmatch), SM(mark)};

/* Header matches: an empty match ({}) or present: true asks only that the
 * header be there. */
static const struct conf_key headermatch_keys[] = {
    SM_EXACT,
    SM_PREFIX,
    SM_REGEX,
    {.name = "present",
     .type = CONF_BOOL,
     .off = SM(present),
     .def = "false",
     .help = "the header is present"},
    {.name = "StringMatch", .type = CONF_ONEOF, .enums = hm_choices},
    {.name = NULL},
};
static const struct conf_section headermatch_section = {
    headermatch_keys, sizeof(struct res_strmatch), SM(mark)};

/* Istio matches query parameters by exact value or regex only. */
static const struct conf_key querymatch_keys[] = {
    SM_EXACT,
    SM_REGEX,
    {.name = "StringMatch", .type = CONF_ONEOF, .enums = qm_choices},
    {.name = NULL},
};
static const struct conf_section querymatch_section = {
    querymatch_keys, sizeof(struct res_strmatch), SM(mark)};
#undef SM

/* ---- destinations -------------------------------------------------------- */

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
    port_keys, sizeof(struct res_port_selector),
    RES_OFF(struct res_port_selector, mark)};

#define D(f) RES_OFF(struct res_destination, f)
static const struct conf_key dest_keys[] = {
    {.name = "host",
     .type = CONF_STR,
     .off = D(host),
     .help = "service host (required)"},
    {.name = "subset",
     .type = CONF_STR,
     .off = D(subset),
     .help = "subset of the DestinationRule for host"},
    {.name = "port",
     .type = CONF_SECTION,
     .off = D(port),
     .help = "port of the service",
     .sub = &port_section},
    {.name = NULL},
};
#undef D
static const struct conf_section dest_section = {
    dest_keys, sizeof(struct res_destination),
    RES_OFF(struct res_destination, mark)};

#define HO(f) RES_OFF(struct res_header_ops, f)
static const struct conf_key header_ops_keys[] = {
    {.name = "set", .type = CONF_STR_MAP, .off = HO(set), .help = "replace"},
    {.name = "add", .type = CONF_STR_MAP, .off = HO(add), .help = "append"},
    {.name = "remove",
     .type = CONF_STR_LIST,
     .off = HO(remove),
     .max = 1000,
     .help = "remove"},
    {.name = NULL},
};
#undef HO
static const struct conf_section header_ops_section = {
    header_ops_keys, 0, RES_OFF(struct res_header_ops, mark)};

static const struct conf_key headers_keys[] = {
    {.name = "request",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_headers, request),
     .help = "request header operations",
     .sub = &header_ops_section},
    {.name = "response",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_headers, response),
     .help = "response header operations",
     .sub = &header_ops_section},
    {.name = NULL},
};
static const struct conf_section headers_section = {
    headers_keys, 0, RES_OFF(struct res_headers, mark)};

#define RD(f) RES_OFF(struct res_route_dest, f)
static const struct conf_key http_dest_keys[] = {
    {.name = "destination",
     .type = CONF_SECTION,
     .off = RD(destination),
     .help = "where to send (required)",
     .sub = &dest_section},
    {.name = "weight",
     .type = CONF_INT,
     .off = RD(weight),
     .min = 0,
     .max = INT32_MAX,
     .help = "relative share of the traffic"},
    {.name = "headers",
     .type = CONF_SECTION,
     .off = RD(headers),
     .help = "header operations for this destination",
     .sub = &headers_section},
    {.name = NULL},
};
static const struct conf_section http_dest_section = {
    http_dest_keys, sizeof(struct res_route_dest), RD(mark)};

static const struct conf_key l4_dest_keys[] = {
    {.name = "destination",
     .type = CONF_SECTION,
     .off = RD(destination),
     .help = "where to send (required)",
     .sub = &dest_section},
    {.name = "weight",
     .type = CONF_INT,
     .off = RD(weight),
     .min = 0,
     .max = INT32_MAX,
     .help = "relative share of the traffic"},
    {.name = NULL},
};
static const struct conf_section l4_dest_section = {
    l4_dest_keys, sizeof(struct res_route_dest), RD(mark)};
#undef RD

/* ---- http match ---------------------------------------------------------- */

#define HM(f) RES_OFF(struct res_http_match, f)
#define HM_SM(key, field)                                                      \
    {                                                                          \
        .name = key, .type = CONF_SECTION, .off = HM(field),                   \
        .help = "StringMatch", .sub = &strmatch_section                        \
    }
static const struct conf_key http_match_keys[] = {
    {.name = "name", .type = CONF_STR, .off = HM(name), .help = "name"},
    HM_SM("uri", uri),
    HM_SM("scheme", scheme),
    HM_SM("method", method),
    HM_SM("authority", authority),
    {.name = "headers",
     .type = CONF_MAP,
     .off = HM(headers),
     .help = "header name to StringMatch (lower-case names)",
     .sub = &headermatch_section},
    {.name = "queryParams",
     .type = CONF_MAP,
     .off = HM(query_params),
     .help = "query parameter to StringMatch",
     .sub = &querymatch_section},
    {.name = "withoutHeaders",
     .type = CONF_MAP,
     .off = HM(without_headers),
     .help = "headers that must not match",
     .sub = &headermatch_section},
    {.name = "port",
     .type = CONF_INT,
     .off = HM(port),
     .min = 1,
     .max = 65535,
     .help = "port the request came in on"},
    {.name = "sourceLabels",
     .type = CONF_STR_MAP,
     .off = HM(source_labels),
     .help = "labels of the calling workload"},
    {.name = "gateways",
     .type = CONF_STR_LIST,
     .off = HM(gateways),
     .max = 1000,
     .help = "gateways this match applies to"},
    {.name = "sourceNamespace",
     .type = CONF_STR,
     .off = HM(source_namespace),
     .help = "namespace of the calling workload"},
    {.name = "ignoreUriCase",
     .type = CONF_BOOL,
     .off = HM(ignore_uri_case),
     .def = "false",
     .help = "match uri without regard to case"},
    {.name = "statPrefix",
     .type = CONF_STR,
     .off = HM(stat_prefix),
     .help = "accepted"},
    {.name = NULL},
};
#undef HM_SM
#undef HM
static const struct conf_section http_match_section = {
    http_match_keys, sizeof(struct res_http_match),
    RES_OFF(struct res_http_match, mark)};

/* ---- http actions -------------------------------------------------------- */

static const char *const derive_ports[] = {"FROM_PROTOCOL_DEFAULT",
                                           "FROM_REQUEST_PORT", NULL};

#define RE(f) RES_OFF(struct res_redirect, f)
static const struct conf_key redirect_keys[] = {
    {.name = "uri", .type = CONF_STR, .off = RE(uri), .help = "new path"},
    {.name = "authority",
     .type = CONF_STR,
     .off = RE(authority),
     .help = "new authority"},
    {.name = "port",
     .type = CONF_INT,
     .off = RE(port),
     .min = 1,
     .max = 65535,
     .help = "new port"},
    {.name = "derivePort",
     .type = CONF_ENUM,
     .off = RE(derive_port),
     .def = "FROM_PROTOCOL_DEFAULT",
     .help = "port from the scheme or the request",
     .enums = derive_ports},
    {.name = "scheme", .type = CONF_STR, .off = RE(scheme), .help = "scheme"},
    {.name = "redirectCode",
     .type = CONF_INT,
     .off = RE(redirect_code),
     .min = 300,
     .max = 399,
     .def = "301",
     .help = "status of the redirect"},
    {.name = "(port)",
     .type = CONF_ONEOF,
     .enums = (const char *const[]){"port", "derivePort", NULL}},
    {.name = NULL},
};
#undef RE
static const struct conf_section redirect_section = {
    redirect_keys, 0, RES_OFF(struct res_redirect, mark)};

static const struct conf_key body_keys[] = {
    {.name = "string",
     .type = CONF_STR,
     .off = RES_OFF(struct res_body, string),
     .help = "body text"},
    {.name = "bytes",
     .type = CONF_STR,
     .off = RES_OFF(struct res_body, bytes),
     .help = "body bytes, base64"},
    {.name = "body",
     .type = CONF_ONEOF,
     .enums = (const char *const[]){"string", "bytes", NULL}},
    {.name = NULL},
};
static const struct conf_section body_section = {
    body_keys, 0, RES_OFF(struct res_body, mark)};

static const struct conf_key direct_keys[] = {
    {.name = "status",
     .type = CONF_INT,
     .off = RES_OFF(struct res_direct_response, status),
     .min = 200,
     .max = 599,
     .help = "status (required)"},
    {.name = "body",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_direct_response, body),
     .help = "body",
     .sub = &body_section},
    {.name = NULL},
};
static const struct conf_section direct_section = {
    direct_keys, 0, RES_OFF(struct res_direct_response, mark)};

static const struct conf_key delegate_keys[] = {
    {.name = "name",
     .type = CONF_STR,
     .off = RES_OFF(struct res_delegate, name),
     .help = "VirtualService to delegate to (required)"},
    {.name = "namespace",
     .type = CONF_STR,
     .off = RES_OFF(struct res_delegate, ns),
     .help = "its namespace (default: this one)",
     .custom = res_valid_label},
    {.name = NULL},
};
static const struct conf_section delegate_section = {
    delegate_keys, 0, RES_OFF(struct res_delegate, mark)};

static const struct conf_key regex_rewrite_keys[] = {
    {.name = "match",
     .type = CONF_STR,
     .off = RES_OFF(struct res_regex_rewrite, match),
     .help = "regex"},
    {.name = "rewrite",
     .type = CONF_STR,
     .off = RES_OFF(struct res_regex_rewrite, rewrite),
     .help = "replacement (\\1 for groups)"},
    {.name = NULL},
};
static const struct conf_section regex_rewrite_section = {
    regex_rewrite_keys, 0, RES_OFF(struct res_regex_rewrite, mark)};

static const struct conf_key rewrite_keys[] = {
    {.name = "uri",
     .type = CONF_STR,
     .off = RES_OFF(struct res_rewrite, uri),
     .help = "replaces the matched path or prefix"},
    {.name = "authority",
     .type = CONF_STR,
     .off = RES_OFF(struct res_rewrite, authority),
     .help = "new authority"},
    {.name = "uriRegexRewrite",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_rewrite, uri_regex_rewrite),
     .help = "regex rewrite of the path",
     .sub = &regex_rewrite_section},
    {.name = "(uri)",
     .type = CONF_ONEOF,
     .enums = (const char *const[]){"uri", "uriRegexRewrite", NULL}},
    {.name = NULL},
};
static const struct conf_section rewrite_section = {
    rewrite_keys, 0, RES_OFF(struct res_rewrite, mark)};

#define RT(f) RES_OFF(struct res_retries, f)
static const struct conf_key retries_keys[] = {
    {.name = "attempts",
     .type = CONF_INT,
     .off = RT(attempts),
     .min = 0,
     .max = 1000,
     .help = "retries allowed (0: none)"},
    {.name = "perTryTimeout",
     .type = CONF_DURATION,
     .off = RT(per_try_timeout_ms),
     .min = 1,
     .max = INT64_C(365) * 24 * 3600 * 1000,
     .help = "timeout of each attempt"},
    {.name = "retryOn",
     .type = CONF_STR,
     .off = RT(retry_on),
     .help = "conditions, comma separated"},
    {.name = "retryRemoteLocalities",
     .type = CONF_BOOL,
     .off = RT(retry_remote_localities),
     .def = "false",
     .help = "retry in other localities"},
    {.name = NULL},
};
#undef RT
static const struct conf_section retries_section = {
    retries_keys, 0, RES_OFF(struct res_retries, mark)};

static const struct conf_key percent_keys[] = {
    {.name = "value",
     .type = CONF_DOUBLE,
     .off = RES_OFF(struct res_percent, value),
     .min = 0,
     .max = 100,
     .help = "percent, 0-100"},
    {.name = NULL},
};
static const struct conf_section percent_section = {
    percent_keys, 0, RES_OFF(struct res_percent, mark)};

#define FD(f) RES_OFF(struct res_fault_delay, f)
static const struct conf_key delay_keys[] = {
    {.name = "fixedDelay",
     .type = CONF_DURATION,
     .off = FD(fixed_delay_ms),
     .min = 1,
     .max = INT64_C(365) * 24 * 3600 * 1000,
     .help = "delay (required)"},
    {.name = "percentage",
     .type = CONF_SECTION,
     .off = FD(percentage),
     .help = "share of requests delayed",
     .sub = &percent_section},
    {.name = "percent",
     .type = CONF_INT,
     .off = FD(percent),
     .min = 0,
     .max = 100,
     .help = "deprecated: use percentage"},
    {.name = NULL},
};
#undef FD
static const struct conf_section delay_section = {
    delay_keys, 0, RES_OFF(struct res_fault_delay, mark)};

#define FA(f) RES_OFF(struct res_fault_abort, f)
static const struct conf_key abort_keys[] = {
    {.name = "httpStatus",
     .type = CONF_INT,
     .off = FA(http_status),
     .min = 200,
     .max = 599,
     .help = "status to answer with"},
    {.name = "grpcStatus",
     .type = CONF_STR,
     .off = FA(grpc_status),
     .help = "gRPC status to answer with"},
    {.name = "http2Error",
     .type = CONF_STR,
     .off = FA(http2_error),
     .help = "HTTP/2 error to reset with"},
    {.name = "percentage",
     .type = CONF_SECTION,
     .off = FA(percentage),
     .help = "share of requests aborted",
     .sub = &percent_section},
    {.name = "errorType",
     .type = CONF_ONEOF,
     .min = 1,
     .enums =
         (const char *const[]){"httpStatus", "grpcStatus", "http2Error", NULL}},
    {.name = NULL},
};
#undef FA
static const struct conf_section abort_section = {
    abort_keys, 0, RES_OFF(struct res_fault_abort, mark)};

static const struct conf_key fault_keys[] = {
    {.name = "delay",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_fault, delay),
     .help = "delay requests",
     .sub = &delay_section},
    {.name = "abort",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_fault, abort),
     .help = "answer requests with an error",
     .sub = &abort_section},
    {.name = NULL},
};
static const struct conf_section fault_section = {
    fault_keys, 0, RES_OFF(struct res_fault, mark)};

#define CO(f) RES_OFF(struct res_cors, f)
static const struct conf_key cors_keys[] = {
    {.name = "allowOrigins",
     .type = CONF_LIST,
     .off = CO(allow_origins),
     .max = 1000,
     .help = "origins allowed (StringMatch)",
     .sub = &strmatch_section},
    {.name = "allowOrigin",
     .type = CONF_STR_LIST,
     .off = CO(allow_origin),
     .max = 1000,
     .help = "deprecated: use allowOrigins"},
    {.name = "allowMethods",
     .type = CONF_STR_LIST,
     .off = CO(allow_methods),
     .max = 100,
     .help = "Access-Control-Allow-Methods"},
    {.name = "allowHeaders",
     .type = CONF_STR_LIST,
     .off = CO(allow_headers),
     .max = 1000,
     .help = "Access-Control-Allow-Headers"},
    {.name = "exposeHeaders",
     .type = CONF_STR_LIST,
     .off = CO(expose_headers),
     .max = 1000,
     .help = "Access-Control-Expose-Headers"},
    {.name = "maxAge",
     .type = CONF_DURATION,
     .off = CO(max_age_ms),
     .min = 0,
     .max = INT64_C(365) * 24 * 3600 * 1000,
     .help = "Access-Control-Max-Age"},
    {.name = "allowCredentials",
     .type = CONF_BOOL,
     .off = CO(allow_credentials),
     .def = "false",
     .help = "Access-Control-Allow-Credentials"},
    {.name = NULL},
};
#undef CO
static const struct conf_section cors_section = {
    cors_keys, 0, RES_OFF(struct res_cors, mark)};

#define HR(f) RES_OFF(struct res_http_route, f)
static const struct conf_key http_route_keys[] = {
    {.name = "name", .type = CONF_STR, .off = HR(name), .help = "rule name"},
    {.name = "match",
     .type = CONF_LIST,
     .off = HR(match),
     .max = MAX_ITEMS,
     .help = "conditions, any of which selects the rule",
     .sub = &http_match_section},
    {.name = "route",
     .type = CONF_LIST,
     .off = HR(route),
     .max = 1000,
     .help = "weighted destinations",
     .sub = &http_dest_section},
    {.name = "redirect",
     .type = CONF_SECTION,
     .off = HR(redirect),
     .help = "answer with a redirect",
     .sub = &redirect_section},
    {.name = "directResponse",
     .type = CONF_SECTION,
     .off = HR(direct_response),
     .help = "answer directly",
     .sub = &direct_section},
    {.name = "delegate",
     .type = CONF_SECTION,
     .off = HR(delegate),
     .help = "continue in another VirtualService",
     .sub = &delegate_section},
    {.name = "rewrite",
     .type = CONF_SECTION,
     .off = HR(rewrite),
     .help = "rewrite before forwarding",
     .sub = &rewrite_section},
    {.name = "timeout",
     .type = CONF_DURATION,
     .off = HR(timeout_ms),
     .min = 0,
     .max = INT64_C(365) * 24 * 3600 * 1000,
     .help = "request timeout (0: none)"},
    {.name = "retries",
     .type = CONF_SECTION,
     .off = HR(retries),
     .help = "retry policy",
     .sub = &retries_section},
    {.name = "fault",
     .type = CONF_SECTION,
     .off = HR(fault),
     .help = "fault injection",
     .sub = &fault_section},
    {.name = "mirror",
     .type = CONF_SECTION,
     .off = HR(mirror),
     .help = "copy requests to",
     .sub = &dest_section},
    {.name = "mirrorPercentage",
     .type = CONF_SECTION,
     .off = HR(mirror_percentage),
     .help = "share of requests mirrored",
     .sub = &percent_section},
    {.name = "mirrorPercent",
     .type = CONF_INT,
     .off = HR(mirror_percent),
     .min = 0,
     .max = 100,
     .help = "deprecated: use mirrorPercentage"},
    {.name = "corsPolicy",
     .type = CONF_SECTION,
     .off = HR(cors_policy),
     .help = "CORS",
     .sub = &cors_section},
    {.name = "headers",
     .type = CONF_SECTION,
     .off = HR(headers),
     .help = "header operations",
     .sub = &headers_section},
    {.name = NULL},
};
#undef HR
static const struct conf_section http_route_section = {
    http_route_keys, sizeof(struct res_http_route),
    RES_OFF(struct res_http_route, mark)};

/* ---- tls and tcp rules -----------------------------------------------------
 */

#define LM(f) RES_OFF(struct res_l4_match, f)
#define L4_COMMON                                                              \
    {.name = "destinationSubnets",                                             \
     .type = CONF_STR_LIST,                                                    \
     .off = LM(destination_subnets),                                           \
     .max = 1000,                                                              \
     .help = "destination IPs or CIDRs"},                                      \
        {.name = "port",                                                       \
         .type = CONF_INT,                                                     \
         .off = LM(port),                                                      \
         .min = 1,                                                             \
         .max = 65535,                                                         \
         .help = "port"},                                                      \
        {.name = "sourceLabels",                                               \
         .type = CONF_STR_MAP,                                                 \
         .off = LM(source_labels),                                             \
         .help = "labels of the caller"},                                      \
        {.name = "gateways",                                                   \
         .type = CONF_STR_LIST,                                                \
         .off = LM(gateways),                                                  \
         .max = 1000,                                                          \
         .help = "gateways"},                                                  \
    {                                                                          \
        .name = "sourceNamespace", .type = CONF_STR,                           \
        .off = LM(source_namespace), .help = "namespace of the caller"         \
    }

static const struct conf_key tls_match_keys[] = {
    {.name = "sniHosts",
     .type = CONF_STR_LIST,
     .off = LM(sni_hosts),
     .max = 10000,
     .help = "SNI names (required)"},
    L4_COMMON,
    {.name = NULL},
};
static const struct conf_section tls_match_section = {
    tls_match_keys, sizeof(struct res_l4_match), LM(mark)};

static const struct conf_key tcp_match_keys[] = {
    L4_COMMON,
    {.name = "sourceSubnet",
     .type = CONF_STR,
     .off = LM(source_subnet),
     .help = "caller's subnet"},
    {.name = NULL},
};
static const struct conf_section tcp_match_section = {
    tcp_match_keys, sizeof(struct res_l4_match), LM(mark)};
#undef L4_COMMON
#undef LM

static const struct conf_key tls_route_keys[] = {
    {.name = "match",
     .type = CONF_LIST,
     .off = RES_OFF(struct res_l4_route, match),
     .max = MAX_ITEMS,
     .help = "conditions (required)",
     .sub = &tls_match_section},
    {.name = "route",
     .type = CONF_LIST,
     .off = RES_OFF(struct res_l4_route, route),
     .max = 1000,
     .help = "weighted destinations",
     .sub = &l4_dest_section},
    {.name = NULL},
};
static const struct conf_section tls_route_section = {
    tls_route_keys, sizeof(struct res_l4_route),
    RES_OFF(struct res_l4_route, mark)};

static const struct conf_key tcp_route_keys[] = {
    {.name = "match",
     .type = CONF_LIST,
     .off = RES_OFF(struct res_l4_route, match),
     .max = MAX_ITEMS,
     .help = "conditions",
     .sub = &tcp_match_section},
    {.name = "route",
     .type = CONF_LIST,
     .off = RES_OFF(struct res_l4_route, route),
     .max = 1000,
     .help = "weighted destinations",
     .sub = &l4_dest_section},
    {.name = NULL},
};
static const struct conf_section tcp_route_section = {
    tcp_route_keys, sizeof(struct res_l4_route),
    RES_OFF(struct res_l4_route, mark)};

#define VS(f) RES_OFF(struct res_virtual_service, f)
static const struct conf_key vs_keys[] = {
    {.name = "hosts",
     .type = CONF_STR_LIST,
     .off = VS(hosts),
     .max = 10000,
     .help = "hosts this applies to"},
    {.name = "gateways",
     .type = CONF_STR_LIST,
     .off = VS(gateways),
     .max = 1000,
     .help = "gateways, as name or namespace/name (default: mesh)"},
    {.name = "http",
     .type = CONF_LIST,
     .off = VS(http),
     .max = MAX_ITEMS,
     .help = "HTTP rules, first match wins",
     .sub = &http_route_section},
    {.name = "tls",
     .type = CONF_LIST,
     .off = VS(tls),
     .max = MAX_ITEMS,
     .help = "TLS passthrough rules by SNI",
     .sub = &tls_route_section},
    {.name = "tcp",
     .type = CONF_LIST,
     .off = VS(tcp),
     .max = MAX_ITEMS,
     .help = "TCP rules",
     .sub = &tcp_route_section},
    {.name = "exportTo",
     .type = CONF_STR_LIST,
     .off = VS(export_to),
     .max = 1000,
     .help = "namespaces this is visible to"},
    {.name = NULL},
};
#undef VS
static const struct conf_section vs_section = {vs_keys, 0, SIZE_MAX};

/* ---- checks ----------------------------------------------------------------
 */

/* The names of enum res_retry_on, in its order: the one table of them
 * (validation here, compile/router.c's condition bits). */
static const char *const retry_on_names[RES_RETRY_NCONDS] = {
    [RES_RETRY_5XX] = "5xx",
    [RES_RETRY_GATEWAY_ERROR] = "gateway-error",
    [RES_RETRY_RESET] = "reset",
    [RES_RETRY_RESET_BEFORE_REQUEST] = "reset-before-request",
    [RES_RETRY_CONNECT_FAILURE] = "connect-failure",
    [RES_RETRY_ENVOY_RATELIMITED] = "envoy-ratelimited",
    [RES_RETRY_RETRIABLE_4XX] = "retriable-4xx",
    [RES_RETRY_REFUSED_STREAM] = "refused-stream",
    [RES_RETRY_RETRIABLE_STATUS_CODES] = "retriable-status-codes",
    [RES_RETRY_RETRIABLE_HEADERS] = "retriable-headers",
    [RES_RETRY_HTTP3_POST_CONNECT_FAILURE] = "http3-post-connect-failure",
    [RES_RETRY_CANCELLED] = "cancelled",
    [RES_RETRY_DEADLINE_EXCEEDED] = "deadline-exceeded",
    [RES_RETRY_INTERNAL] = "internal",
    [RES_RETRY_RESOURCE_EXHAUSTED] = "resource-exhausted",
    [RES_RETRY_UNAVAILABLE] = "unavailable",
};

int res_retry_on_next(const char **p, const char **tok, size_t *n)
{
    const char *s = *p;
    size_t len, tn;

    if (*s == '\0')
        return 0;
    len = strcspn(s, ",");
    *tok = s;
    tn = len;
    while (tn > 0 && (**tok == ' ' || **tok == '\t')) {
        (*tok)++;
        tn--;
    }
    while (tn > 0 && ((*tok)[tn - 1] == ' ' || (*tok)[tn - 1] == '\t'))
        tn--;
    *n = tn;
    *p = s + len + (s[len] == ',');
    return 1;
}

int res_retry_on_lookup(const char *tok, size_t n)
{
    for (int i = 0; i < RES_RETRY_NCONDS; i++)
        if (strlen(retry_on_names[i]) == n &&
            memcmp(retry_on_names[i], tok, n) == 0)
            return i;
    return -1;
}

static void check_retry_on(struct res_check *ck, const struct res_retries *rt,
                           const char *path)
{
    const char *p = rt->retry_on;
    const char *tok;
    size_t tn;

    while (res_retry_on_next(&p, &tok, &tn)) {
        int64_t code;
        const char *why;
        int ok = res_retry_on_lookup(tok, tn) >= 0;

        if (!ok && tn > 0 && units_int(tok, tn, &code, &why) == 0 &&
            code >= 100 && code <= 599)
            ok = 1;
        if (!ok) {
            res_err(ck, &rt->mark, path,
                    "retryOn: '%.*s' is not a retry policy or an HTTP status",
                    (int)tn, tok);
            return;
        }
    }
}

/* VirtualService gateways: "mesh", "name" or "ns/name". */
static void check_gateway_ref(struct res_check *ck,
                              const struct conf_mark *mark, const char *path,
                              const char *g)
{
    const char *slash = strchr(g, '/');
    const char *name = slash ? slash + 1 : g;
    const char *why;

    if (slash != NULL &&
        res_valid_label(g, (size_t)(slash - g), NULL, &why) < 0) {
        res_err(ck, mark, path, "gateway '%s': namespace %s", g, why);
        return;
    }
    /* Istio's names for the Gateways it makes from Kubernetes Gateway API
     * ones hold "~"; analysis says they are internal (IST0165). */
    if (strstr(name, "~istio-autogenerated-k8s-gateway~") != NULL)
        return;
    if (*name == '\0' ||
        strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-.") != strlen(name))
        res_err(ck, mark, path, "gateway '%s' is not a name or namespace/name",
                g);
}

static void check_destination(struct res_check *ck,
                              const struct res_destination *d, const char *path)
{
    char p[300];

    res_path(p, sizeof(p), "%s.host", path);
    if (d->host == NULL) {
        res_err(ck, &d->mark, path, "missing key 'host'");
        return;
    }
    if (strcmp(d->host, "*") == 0) {
        res_err(ck, &d->mark, p, "a destination host cannot be '*'");
        return;
    }
    res_check_host(ck, &d->mark, p, d->host, RES_HOST_WILDCARD | RES_HOST_IP);
    if (d->subset != NULL && d->subset[0] == '\0')
        res_err(ck, &d->mark, path, "empty subset");
}

static void check_route_dests(struct res_check *ck, struct conf_list *route,
                              const char *path)
{
    char p[300];

    for (size_t i = 0; i < route->n; i++) {
        const struct res_route_dest *rd =
            (const struct res_route_dest *)route->v + i;
        res_path(p, sizeof(p), "%s[%zu].destination", path, i);
        if (rd->destination.mark.line == 0) {
            res_path(p, sizeof(p), "%s[%zu]", path, i);
            res_err(ck, &rd->mark, p, "missing key 'destination'");
            continue;
        }
        check_destination(ck, &rd->destination, p);
    }
    /* Istio: a lone destination takes all the traffic whatever its
     * weight says. */
    if (route->n == 1)
        ((struct res_route_dest *)route->v)->weight = 100;
}

static void check_strmap(struct res_check *ck, const struct conf_map *m,
                         const char *path)
{
    char p[300];

    for (size_t i = 0; i < m->n; i++) {
        const struct res_strmatch *sm = (const struct res_strmatch *)m->v + i;
        res_path(p, sizeof(p), "%s.%s", path, m->keys[i]);
        if (m->keys[i][0] == '\0')
            res_err(ck, &sm->mark, path, "empty name");
        res_check_strmatch(ck, sm, p);
    }
}

static void check_match(struct res_check *ck, const struct res_http_match *m,
                        const char *path)
{
    char p[300];
    const struct {
        const char *name;
        const struct res_strmatch *sm;
    } sms[] = {{"uri", &m->uri},
               {"scheme", &m->scheme},
               {"method", &m->method},
               {"authority", &m->authority}};

    for (size_t i = 0; i < sizeof(sms) / sizeof(*sms); i++) {
        res_path(p, sizeof(p), "%s.%s", path, sms[i].name);
        res_check_strmatch(ck, sms[i].sm, p);
    }
    res_path(p, sizeof(p), "%s.headers", path);
    check_strmap(ck, &m->headers, p);
    res_path(p, sizeof(p), "%s.queryParams", path);
    check_strmap(ck, &m->query_params, p);
    res_path(p, sizeof(p), "%s.withoutHeaders", path);
    check_strmap(ck, &m->without_headers, p);
    for (size_t i = 0; i < m->gateways.n; i++) {
        res_path(p, sizeof(p), "%s.gateways[%zu]", path, i);
        if (strcmp(m->gateways.v[i], "mesh") != 0)
            check_gateway_ref(ck, &m->mark, p, m->gateways.v[i]);
    }
}

static void check_http_route(struct res_check *ck, struct res_http_route *h,
                             const char *path)
{
    char p[300];
    int actions = (h->route.n > 0) + (h->redirect.mark.line > 0) +
                  (h->direct_response.mark.line > 0) +
                  (h->delegate.mark.line > 0);

    if (actions == 0)
        res_err(ck, &h->mark, path,
                "a rule needs one of route, redirect, directResponse or "
                "delegate");
    else if (actions > 1)
        res_err(ck, &h->mark, path,
                "a rule takes only one of route, redirect, directResponse "
                "and delegate");
    if (h->rewrite.mark.line > 0 && h->redirect.mark.line > 0)
        res_err(ck, &h->rewrite.mark, path,
                "rewrite cannot be used with redirect");
    for (size_t i = 0; i < h->match.n; i++) {
        res_path(p, sizeof(p), "%s.match[%zu]", path, i);
        check_match(ck, (const struct res_http_match *)h->match.v + i, p);
    }
    res_path(p, sizeof(p), "%s.route", path);
    check_route_dests(ck, &h->route, p);
    if (h->direct_response.mark.line > 0 && h->direct_response.status == 0) {
        res_path(p, sizeof(p), "%s.directResponse", path);
        res_err(ck, &h->direct_response.mark, p, "missing key 'status'");
    }
    if (h->delegate.mark.line > 0 && h->delegate.name == NULL) {
        res_path(p, sizeof(p), "%s.delegate", path);
        res_err(ck, &h->delegate.mark, p, "missing key 'name'");
    }
    if (h->rewrite.uri != NULL && h->rewrite.uri[0] != '\0') {
        /* The bytes a Lua h:set_path() may write, so a rewrite can put
         * nothing on the request line that a client could not (a space
         * or CR/LF would split it). A query is data here: Envoy's
         * prefix_rewrite keeps whatever follows. */
        const char *why;
        if (http_query_check(slice_of(h->rewrite.uri), &why) < 0) {
            res_path(p, sizeof(p), "%s.rewrite.uri", path);
            res_err(ck, &h->rewrite.mark, p, "bad uri: %s", why);
        }
    }
    if (h->rewrite.uri_regex_rewrite.mark.line > 0) {
        const struct res_regex_rewrite *rr = &h->rewrite.uri_regex_rewrite;
        char why[300];
        res_path(p, sizeof(p), "%s.rewrite.uriRegexRewrite", path);
        if (rr->match == NULL || rr->rewrite == NULL)
            res_err(ck, &rr->mark, p, "needs both match and rewrite");
        else if (res_regex_check(rr->match, why, sizeof(why)) < 0)
            res_err(ck, &rr->mark, p, "match '%s': %s", rr->match, why);
    }
    res_path(p, sizeof(p), "%s.retries", path);
    if (h->retries.mark.line == 0)
        h->retries.attempts = RES_DEFAULT_RETRY_ATTEMPTS;
    if (h->retries.retry_on == NULL) {
        h->retries.retry_on = strdup(RES_DEFAULT_RETRY_ON);
        if (h->retries.retry_on == NULL)
            res_err(ck, &h->mark, p, "out of memory");
    } else {
        check_retry_on(ck, &h->retries, p);
    }
    if (h->fault.mark.line > 0) {
        res_path(p, sizeof(p), "%s.fault", path);
        if (h->fault.delay.mark.line == 0 && h->fault.abort.mark.line == 0)
            res_err(ck, &h->fault.mark, p, "needs delay or abort");
        /* Istio accepts a delay without fixedDelay and injects none
         * (its translation drops it): so does strait, and says so. */
        if (h->fault.delay.mark.line > 0 && h->fault.delay.fixed_delay_ms == 0)
            res_warn(ck, &h->fault.delay.mark, p,
                     "delay without fixedDelay: no delay is injected (as in "
                     "Istio)");
    }
    if (h->mirror.mark.line > 0) {
        res_path(p, sizeof(p), "%s.mirror", path);
        check_destination(ck, &h->mirror, p);
    }
    for (size_t i = 0; i < h->cors_policy.allow_origins.n; i++) {
        res_path(p, sizeof(p), "%s.corsPolicy.allowOrigins[%zu]", path, i);
        res_check_strmatch(
            ck, (const struct res_strmatch *)h->cors_policy.allow_origins.v + i,
            p);
    }
}

/* Istio's validation: every sniHost is within one of the hosts, both
 * as written. */
static int sni_in_hosts(const char *sni, const struct conf_strs *hosts)
{
    for (size_t i = 0; i < hosts->n; i++)
        if (host_covers(hosts->v[i], sni))
            return 1;
    return 0;
}

static void check_l4_route(struct res_check *ck, struct res_l4_route *l,
                           int tls, const char *path,
                           const struct conf_strs *hosts)
{
    char p[300];

    if (tls && l->match.n == 0)
        res_err(ck, &l->mark, path, "a tls rule needs at least one match");
    for (size_t i = 0; i < l->match.n; i++) {
        const struct res_l4_match *m =
            (const struct res_l4_match *)l->match.v + i;
        res_path(p, sizeof(p), "%s.match[%zu]", path, i);
        if (tls && m->sni_hosts.n == 0)
            res_err(ck, &m->mark, p, "missing key 'sniHosts'");
        for (size_t j = 0; j < m->sni_hosts.n; j++) {
            res_path(p, sizeof(p), "%s.match[%zu].sniHosts[%zu]", path, i, j);
            res_check_host(ck, &m->mark, p, m->sni_hosts.v[j],
                           RES_HOST_WILDCARD);
            if (!sni_in_hosts(m->sni_hosts.v[j], hosts))
                res_err(ck, &m->mark, p,
                        "the SNI host %s is not a subset of any of the "
                        "virtual service hosts",
                        m->sni_hosts.v[j]);
        }
        for (size_t j = 0; j < m->gateways.n; j++) {
            res_path(p, sizeof(p), "%s.match[%zu].gateways[%zu]", path, i, j);
            if (strcmp(m->gateways.v[j], "mesh") != 0)
                check_gateway_ref(ck, &m->mark, p, m->gateways.v[j]);
        }
        for (size_t j = 0; j < m->destination_subnets.n; j++) {
            int fam;
            uint8_t b[16];
            unsigned pl;
            const char *why;
            res_path(p, sizeof(p), "%s.match[%zu].destinationSubnets[%zu]",
                     path, i, j);
            if (addr_cidr_parse(m->destination_subnets.v[j], &fam, b, &pl,
                                &why) < 0)
                res_err(ck, &m->mark, p, "'%s': %s",
                        m->destination_subnets.v[j], why);
        }
        if (m->source_subnet != NULL && m->source_subnet[0] != '\0') {
            int fam;
            uint8_t b[16];
            unsigned pl;
            const char *why;
            res_path(p, sizeof(p), "%s.match[%zu].sourceSubnet", path, i);
            if (addr_cidr_parse(m->source_subnet, &fam, b, &pl, &why) < 0)
                res_err(ck, &m->mark, p, "'%s': %s", m->source_subnet, why);
        }
    }
    res_path(p, sizeof(p), "%s.route", path);
    if (l->route.n == 0)
        res_err(ck, &l->mark, path, "missing key 'route'");
    check_route_dests(ck, &l->route, p);
}

static void vs_check(struct res_check *ck, struct resource *r)
{
    struct res_virtual_service *vs = r->spec;
    char p[128];
    int mesh = vs->gateways.n == 0;

    for (size_t i = 0; i < vs->gateways.n; i++) {
        res_path(p, sizeof(p), "spec.gateways[%zu]", i);
        if (strcmp(vs->gateways.v[i], "mesh") == 0)
            mesh = 1;
        else
            check_gateway_ref(ck, NULL, p, vs->gateways.v[i]);
    }
    for (size_t i = 0; i < vs->hosts.n; i++) {
        res_path(p, sizeof(p), "spec.hosts[%zu]", i);
        if (strchr(vs->hosts.v[i], '/') != NULL) {
            res_err(ck, NULL, p,
                    "host '%s': a VirtualService host has no namespace/ "
                    "prefix (that is for Gateway hosts)",
                    vs->hosts.v[i]);
            continue;
        }
        if (mesh && strcmp(vs->hosts.v[i], "*") == 0)
            res_err(ck, NULL, p,
                    "host '*' is not allowed for the mesh gateway; bind "
                    "the VirtualService to a Gateway");
        res_check_host(ck, NULL, p, vs->hosts.v[i],
                       RES_HOST_WILDCARD | RES_HOST_IP);
    }
    if (vs->http.n + vs->tls.n + vs->tcp.n == 0)
        res_err(ck, NULL, "spec",
                "a VirtualService needs http, tls or tcp "
                "rules");
    for (size_t i = 0; i < vs->http.n; i++) {
        res_path(p, sizeof(p), "spec.http[%zu]", i);
        check_http_route(ck, (struct res_http_route *)vs->http.v + i, p);
    }
    for (size_t i = 0; i < vs->tls.n; i++) {
        res_path(p, sizeof(p), "spec.tls[%zu]", i);
        check_l4_route(ck, (struct res_l4_route *)vs->tls.v + i, 1, p,
                       &vs->hosts);
    }
    for (size_t i = 0; i < vs->tcp.n; i++) {
        res_path(p, sizeof(p), "spec.tcp[%zu]", i);
        check_l4_route(ck, (struct res_l4_route *)vs->tcp.v + i, 0, p,
                       &vs->hosts);
    }
}

const struct res_kind_ops res_virtual_service_ops = {
    "VirtualService", &vs_section, sizeof(struct res_virtual_service),
    vs_check};

void res_http_match_json(struct buf *b, const struct res_http_match *m)
{
    struct res_http_match copy = *m;

    /* The name labels a match in logs and stats; it selects nothing. */
    copy.name = NULL;
    conf_to_json(&http_match_section, &copy, b);
}

void res_l4_match_json(struct buf *b, const struct res_l4_match *m, int tls)
{
    conf_to_json(tls ? &tls_match_section : &tcp_match_section, m, b);
}
