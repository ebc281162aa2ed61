#ifndef STRAIT_CONFIG_RESOURCE_T_H
#define STRAIT_CONFIG_RESOURCE_T_H

#include <stddef.h>
#include <stdint.h>

#include "config/conf.h"

/*
 * The Istio resource model: plain structs as the table decoder fills them
 * (src/config/res-*.c hold the tables), with Istio's defaults applied and
 * checked by the loader. Field names follow Istio's API in snake case.
 * Every string, list and map is owned by the resource that holds it and
 * is freed by resource_set_free(); a compiler reads them and copies what
 * it keeps. A conf_mark records where a section or list element was
 * written (line 0: the section was not given), so later stages can point
 * their messages at the source.
 *
 * Host names are kept as written; res_host_fqdn() expands short names in
 * the resource's namespace when a stage needs the full name.
 */

enum res_kind {
    RES_GATEWAY,
    RES_VIRTUAL_SERVICE,
    RES_DESTINATION_RULE,
    RES_SERVICE_ENTRY,
    RES_WORKLOAD_ENTRY,
    RES_AUTHORIZATION_POLICY, /* security.istio.io from here */
    RES_PEER_AUTHENTICATION,
    RES_REQUEST_AUTHENTICATION,
    RES_SERVICE, /* Kubernetes kinds from here (res-k8s.c) */
    RES_ENDPOINT_SLICE,
    RES_SECRET,
    RES_NAMESPACE,
    RES_LUA_POLICY, /* strait.io from here (res-luapolicy.c) */
    RES_MESH_LINK,  /* res-meshlink.c */
    RES_NODE,       /* v1 Node (res-k8s.c): the locality of its endpoints */
    RES_REFERENCE_GRANT, /* gateway.networking.k8s.io (res-luapolicy.c) */
    RES_POD, /* v1 Pod (res-k8s.c): labels, locality, network of endpoints */
    RES_GATEWAY_CLASS, /* Gateway API from here (res-gwapi.c) */
    RES_K8S_GATEWAY,   /* gateway.networking.k8s.io Gateway */
    RES_HTTP_ROUTE,
    RES_KIND_COUNT,
};

/* Gateway and ServiceEntry port protocols (Istio reads them without
 * regard to case). */
enum res_protocol {
    RES_PROTO_HTTP,
    RES_PROTO_HTTPS,
    RES_PROTO_HTTP2,
    RES_PROTO_GRPC,
    RES_PROTO_GRPC_WEB,
    RES_PROTO_TCP,
    RES_PROTO_TLS,
    RES_PROTO_MONGO,
    RES_PROTO_MYSQL,
    RES_PROTO_REDIS,
    RES_PROTO_UDP,
    RES_PROTO_HBONE,
};

/* --- shared ------------------------------------------------------------ */

/* StringMatch: exactly one of exact, prefix, regex (or present, for
 * header matches). NULL means not given. */
struct res_strmatch {
    struct conf_mark mark;
    char *exact;
    char *prefix;
    char *regex;
    int present;
};

enum res_strmatch_kind {
    RES_MATCH_NONE,
    RES_MATCH_EXACT,
    RES_MATCH_PREFIX,
    RES_MATCH_REGEX,
    RES_MATCH_PRESENT,
};

struct res_port_selector {
    struct conf_mark mark;
    int64_t number; /* 0: not given */
};

struct res_percent {
    struct conf_mark mark;
    double value; /* 0-100 */
};

/* --- Gateway ----------------------------------------------------------- */

enum res_server_tls_mode {
    RES_GW_TLS_PASSTHROUGH,
    RES_GW_TLS_SIMPLE,
    RES_GW_TLS_MUTUAL,
    RES_GW_TLS_AUTO_PASSTHROUGH,
    RES_GW_TLS_ISTIO_MUTUAL,
    RES_GW_TLS_OPTIONAL_MUTUAL,
};

enum res_tls_version {
    RES_TLS_AUTO,
    RES_TLSV1_0,
    RES_TLSV1_1,
    RES_TLSV1_2,
    RES_TLSV1_3,
};

struct res_gw_port {
    struct conf_mark mark;
    int64_t number;
    char *name;
    int64_t protocol; /* enum res_protocol */
    int64_t target_port;
};

struct res_gw_tls {
    struct conf_mark mark;
    int https_redirect;
    int mode; /* enum res_server_tls_mode; default PASSTHROUGH as Istio */
    char *server_certificate;
    char *private_key;
    char *ca_certificates;
    char *ca_crl;
    char *credential_name;
    struct conf_strs credential_names;
    struct conf_strs subject_alt_names;
    struct conf_strs verify_certificate_spki;
    struct conf_strs verify_certificate_hash;
    int min_protocol_version; /* enum res_tls_version */
    int max_protocol_version;
    struct conf_strs cipher_suites;
};

struct res_gw_server {
    struct conf_mark mark;
    struct res_gw_port port;
    struct conf_strs hosts; /* "[ns/]host", ns "*", "." or a name */
    char *bind;
    char *name;
    char *default_endpoint;
    struct res_gw_tls tls;
};

struct res_gateway {
    struct conf_strmap selector;
    struct conf_list servers; /* struct res_gw_server */
};

/* --- VirtualService ---------------------------------------------------- */

struct res_header_ops {
    struct conf_mark mark;
    struct conf_strmap set;
    struct conf_strmap add;
    struct conf_strs remove;
};

struct res_headers {
    struct conf_mark mark;
    struct res_header_ops request;
    struct res_header_ops response;
};

struct res_destination {
    struct conf_mark mark;
    char *host;
    char *subset;
    struct res_port_selector port;
};

/* A weighted destination of an http, tls or tcp rule. */
struct res_route_dest {
    struct conf_mark mark;
    struct res_destination destination;
    int64_t weight;             /* a lone destination gets 100, as in Istio */
    struct res_headers headers; /* http only */
};

struct res_http_match {
    struct conf_mark mark;
    char *name;
    struct res_strmatch uri;
    struct res_strmatch scheme;
    struct res_strmatch method;
    struct res_strmatch authority;
    struct conf_map headers;         /* name -> struct res_strmatch */
    struct conf_map query_params;    /* name -> struct res_strmatch */
    struct conf_map without_headers; /* name -> struct res_strmatch */
    int64_t port;                    /* 0: any */
    struct conf_strmap source_labels;
    struct conf_strs gateways;
    char *source_namespace;
    int ignore_uri_case;
    char *stat_prefix;
};

struct res_redirect {
    struct conf_mark mark;
    char *uri;
    char *authority;
    int64_t port;
    int derive_port; /* 0 FROM_PROTOCOL_DEFAULT, 1 FROM_REQUEST_PORT */
    char *scheme;
    int64_t redirect_code; /* default 301 */
};

struct res_body {
    struct conf_mark mark;
    char *string;
    char *bytes; /* base64 as written */
};

struct res_direct_response {
    struct conf_mark mark;
    int64_t status;
    struct res_body body;
};

struct res_delegate {
    struct conf_mark mark;
    char *name;
    char *ns;
};

struct res_regex_rewrite {
    struct conf_mark mark;
    char *match;
    char *rewrite;
};

struct res_rewrite {
    struct conf_mark mark;
    char *uri;
    char *authority;
    struct res_regex_rewrite uri_regex_rewrite;
};

/*
 * The retry conditions a VirtualService's retries.retryOn names: Envoy's
 * x-envoy-retry-on and x-envoy-retry-grpc-on policies, which Istio passes
 * on unchanged. The value is the bit index of the compiled condition set
 * (ROUTE_RETRY_* in proxy/router-t.h is 1u << each of these; compile/
 * checks it). res_retry_on_lookup() reads a name.
 */
enum res_retry_on {
    RES_RETRY_5XX,
    RES_RETRY_GATEWAY_ERROR,
    RES_RETRY_RESET,
    RES_RETRY_RESET_BEFORE_REQUEST,
    RES_RETRY_CONNECT_FAILURE,
    RES_RETRY_ENVOY_RATELIMITED,
    RES_RETRY_RETRIABLE_4XX,
    RES_RETRY_REFUSED_STREAM,
    RES_RETRY_RETRIABLE_STATUS_CODES,
    RES_RETRY_RETRIABLE_HEADERS,
    RES_RETRY_HTTP3_POST_CONNECT_FAILURE,
    RES_RETRY_CANCELLED, /* gRPC status names from here */
    RES_RETRY_DEADLINE_EXCEEDED,
    RES_RETRY_INTERNAL,
    RES_RETRY_RESOURCE_EXHAUSTED,
    RES_RETRY_UNAVAILABLE,
    RES_RETRY_NCONDS
};

/* Istio's defaults when no retries section is given: 2 attempts on
 * connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes.
 * A section given without attempts disables retries. */
struct res_retries {
    struct conf_mark mark;
    int64_t attempts;
    int64_t per_try_timeout_ms; /* 0: the route's timeout */
    char *retry_on;
    int retry_remote_localities;
};

struct res_fault_delay {
    struct conf_mark mark;
    int64_t fixed_delay_ms;
    struct res_percent percentage;
    int64_t percent; /* deprecated integer form */
};

struct res_fault_abort {
    struct conf_mark mark;
    int64_t http_status;
    char *grpc_status;
    char *http2_error;
    struct res_percent percentage;
};

struct res_fault {
    struct conf_mark mark;
    struct res_fault_delay delay;
    struct res_fault_abort abort;
};

struct res_cors {
    struct conf_mark mark;
    struct conf_list allow_origins; /* struct res_strmatch */
    struct conf_strs allow_origin;  /* deprecated */
    struct conf_strs allow_methods;
    struct conf_strs allow_headers;
    struct conf_strs expose_headers;
    int64_t max_age_ms;
    int allow_credentials;
};

struct res_http_route {
    struct conf_mark mark;
    char *name;
    struct conf_list match; /* struct res_http_match; empty: all */
    struct conf_list route; /* struct res_route_dest */
    struct res_redirect redirect;
    struct res_direct_response direct_response;
    struct res_delegate delegate;
    struct res_rewrite rewrite;
    int64_t timeout_ms; /* 0: none */
    struct res_retries retries;
    struct res_fault fault;
    struct res_destination mirror;
    struct res_percent mirror_percentage;
    int64_t mirror_percent; /* deprecated */
    struct res_cors cors_policy;
    struct res_headers headers;
};

struct res_l4_match {
    struct conf_mark mark;
    struct conf_strs sni_hosts; /* tls rules: required */
    struct conf_strs destination_subnets;
    int64_t port;
    struct conf_strmap source_labels;
    struct conf_strs gateways;
    char *source_namespace;
    char *source_subnet;
};

/* A tls or tcp rule. */
struct res_l4_route {
    struct conf_mark mark;
    struct conf_list match; /* struct res_l4_match */
    struct conf_list route; /* struct res_route_dest */
};

struct res_virtual_service {
    struct conf_strs hosts;
    struct conf_strs gateways; /* "name" or "ns/name"; empty: mesh */
    struct conf_list http;     /* struct res_http_route */
    struct conf_list tls;      /* struct res_l4_route */
    struct conf_list tcp;      /* struct res_l4_route */
    struct conf_strs export_to;
};

/* --- DestinationRule --------------------------------------------------- */

enum res_lb_simple {
    RES_LB_UNSPECIFIED,
    RES_LB_LEAST_CONN,
    RES_LB_RANDOM,
    RES_LB_PASSTHROUGH,
    RES_LB_ROUND_ROBIN,
    RES_LB_LEAST_REQUEST,
};

struct res_http_cookie {
    struct conf_mark mark;
    char *name;
    char *path;
    int64_t ttl; /* ttl in ms plus one; 0: not given (no cookie made) */
};

struct res_consistent_hash {
    struct conf_mark mark;
    char *http_header_name;
    struct res_http_cookie http_cookie;
    int use_source_ip;
    char *http_query_parameter_name;
    struct {
        struct conf_mark mark;
        int64_t minimum_ring_size;
    } ring_hash;
    struct {
        struct conf_mark mark;
        int64_t table_size;
    } maglev;
    int64_t minimum_ring_size; /* deprecated */
};

/* localityLbSetting.distribute[]: from a locality (pattern) to weights
 * per locality (pattern), Istio's locality weights. */
struct res_locality_distribute {
    struct conf_mark mark;
    char *from;
    struct conf_intmap to; /* locality pattern -> weight, in file order */
};

/* localityLbSetting.failover[]: from one region to another. */
struct res_locality_failover {
    struct conf_mark mark;
    char *from;
    char *to;
};

/* DestinationRule localityLbSetting (Istio's LocalityLoadBalancerSetting);
 * compiled into priority levels and weights by compile/locality.c. */
struct res_locality_lb {
    struct conf_mark mark;
    int enabled;                        /* absent: true, as Istio's BoolValue */
    struct conf_list distribute;        /* struct res_locality_distribute */
    struct conf_list failover;          /* struct res_locality_failover */
    struct conf_strs failover_priority; /* labels, "label" or "label=value" */
};

struct res_load_balancer {
    struct conf_mark mark;
    int simple; /* enum res_lb_simple */
    struct res_consistent_hash consistent_hash;
    struct res_locality_lb locality_lb_setting;
    int64_t warmup_ms; /* warmupDurationSecs */
};

struct res_tcp_keepalive {
    struct conf_mark mark;
    int64_t probes;
    int64_t time_ms;
    int64_t interval_ms;
};

struct res_pool_tcp {
    struct conf_mark mark;
    int64_t max_connections;
    int64_t connect_timeout_ms;
    struct res_tcp_keepalive tcp_keepalive;
    int64_t max_connection_duration_ms;
    int64_t idle_timeout_ms;
};

struct res_pool_http {
    struct conf_mark mark;
    int64_t http1_max_pending_requests;
    int64_t http2_max_requests;
    int64_t max_requests_per_connection; /* 0: unlimited */
    int64_t max_retries;
    int64_t idle_timeout_ms;
    int h2_upgrade_policy; /* DEFAULT, DO_NOT_UPGRADE, UPGRADE */
    int use_client_protocol;
    int64_t max_concurrent_streams;
};

struct res_connection_pool {
    struct conf_mark mark;
    struct res_pool_tcp tcp;
    struct res_pool_http http;
};

struct res_outlier {
    struct conf_mark mark;
    int64_t consecutive_5xx_errors;
    int64_t consecutive_gateway_errors;
    int64_t consecutive_errors; /* deprecated */
    int64_t interval_ms;
    int64_t base_ejection_time_ms;
    int64_t max_ejection_percent;
    int64_t min_health_percent;
    int split_external_local_origin_errors;
    int64_t consecutive_local_origin_failures;
};

enum res_client_tls_mode {
    RES_TLS_DISABLE,
    RES_TLS_SIMPLE,
    RES_TLS_MUTUAL,
    RES_TLS_ISTIO_MUTUAL,
};

struct res_client_tls {
    struct conf_mark mark;
    int mode; /* enum res_client_tls_mode */
    char *client_certificate;
    char *private_key;
    char *ca_certificates;
    char *ca_crl;
    char *credential_name;
    struct conf_strs subject_alt_names;
    char *sni;
    int insecure_skip_verify;
};

/* The policies a port-level setting may override. */
struct res_port_policy {
    struct conf_mark mark;
    struct res_port_selector port;
    struct res_load_balancer load_balancer;
    struct res_connection_pool connection_pool;
    struct res_outlier outlier_detection;
    struct res_client_tls tls;
};

struct res_traffic_policy {
    struct conf_mark mark;
    struct res_load_balancer load_balancer;
    struct res_connection_pool connection_pool;
    struct res_outlier outlier_detection;
    struct res_client_tls tls;
    struct conf_list port_level_settings; /* struct res_port_policy */
    struct conf_mark tunnel;              /* accepted, ignored */
    struct conf_mark proxy_protocol;      /* accepted, ignored */
};

struct res_subset {
    struct conf_mark mark;
    char *name;
    struct conf_strmap labels;
    struct res_traffic_policy traffic_policy;
};

struct res_workload_selector {
    struct conf_mark mark;
    struct conf_strmap match_labels;
};

struct res_destination_rule {
    char *host;
    struct res_traffic_policy traffic_policy;
    struct conf_list subsets; /* struct res_subset */
    struct conf_strs export_to;
    struct res_workload_selector workload_selector;
};

/* --- ServiceEntry and WorkloadEntry ----------------------------------- */

struct res_workload_entry {
    struct conf_mark mark;
    char *address;
    struct conf_intmap ports; /* port name -> number */
    struct conf_strmap labels;
    char *network;
    char *locality;
    int64_t weight;
    char *service_account;
};

struct res_se_port {
    struct conf_mark mark;
    int64_t number;
    int64_t protocol; /* enum res_protocol; default TCP as Istio */
    char *name;
    int64_t target_port;
};

enum res_location { RES_MESH_EXTERNAL, RES_MESH_INTERNAL };

/*
 * Istio's MeshConfig outboundTrafficPolicy.mode (the bootstrap's
 * outboundTrafficPolicy): what a route destination whose host is not in
 * the registry (no ServiceEntry, no WorkloadEntry standing for it) means.
 * REGISTRY_ONLY: an error in analysis, BlackHoleCluster at run time;
 * ALLOW_ANY: a passthrough cluster to the host's DNS name.
 */
enum res_outbound_mode { RES_REGISTRY_ONLY, RES_ALLOW_ANY };
enum res_resolution {
    RES_RESOLVE_NONE,
    RES_RESOLVE_STATIC,
    RES_RESOLVE_DNS,
    RES_RESOLVE_DNS_ROUND_ROBIN,
};

struct res_service_entry {
    struct conf_strs hosts;
    struct conf_strs addresses;
    struct conf_list ports;     /* struct res_se_port */
    int location;               /* enum res_location */
    int resolution;             /* enum res_resolution */
    struct conf_list endpoints; /* struct res_workload_entry */
    struct {
        struct conf_mark mark;
        struct conf_strmap labels;
    } workload_selector;
    struct conf_strs export_to;
    struct conf_strs subject_alt_names;
};

/* --- security.istio.io ------------------------------------------------- */

/* A source of an AuthorizationPolicy rule: every field set must match;
 * within a field any value may. */
struct res_authz_source {
    struct conf_mark mark;
    struct conf_strs principals, not_principals;
    struct conf_strs request_principals, not_request_principals;
    struct conf_strs namespaces, not_namespaces;
    struct conf_strs ip_blocks, not_ip_blocks;
    struct conf_strs remote_ip_blocks, not_remote_ip_blocks;
};

struct res_authz_from {
    struct conf_mark mark;
    struct res_authz_source source;
};

struct res_authz_operation {
    struct conf_mark mark;
    struct conf_strs hosts, not_hosts;
    struct conf_strs ports, not_ports;
    struct conf_strs methods, not_methods;
    struct conf_strs paths, not_paths;
};

struct res_authz_to {
    struct conf_mark mark;
    struct res_authz_operation operation;
};

struct res_authz_condition {
    struct conf_mark mark;
    char *key;
    struct conf_strs values, not_values;
};

struct res_authz_rule {
    struct conf_mark mark;
    struct conf_list from; /* struct res_authz_from */
    struct conf_list to;   /* struct res_authz_to */
    struct conf_list when; /* struct res_authz_condition */
};

enum res_authz_action {
    RES_AUTHZ_ALLOW,
    RES_AUTHZ_DENY,
    RES_AUTHZ_AUDIT,
    RES_AUTHZ_CUSTOM,
};

struct res_authorization_policy {
    struct {
        struct conf_mark mark;
        struct conf_strmap match_labels;
    } selector;
    int action; /* enum res_authz_action */
    struct {
        struct conf_mark mark;
        char *name;
    } provider;
    struct conf_list rules; /* struct res_authz_rule */
    struct conf_mark target_ref;
    struct conf_mark target_refs;
};

enum res_mtls_mode {
    RES_MTLS_UNSET,
    RES_MTLS_DISABLE,
    RES_MTLS_PERMISSIVE,
    RES_MTLS_STRICT,
};

struct res_mtls {
    struct conf_mark mark;
    int mode; /* enum res_mtls_mode */
};

struct res_peer_authentication {
    struct {
        struct conf_mark mark;
        struct conf_strmap match_labels;
    } selector;
    struct res_mtls mtls;
    struct conf_map port_level_mtls; /* port number -> struct res_mtls */
};

/* RequestAuthentication's JWTRule and its parts. */
struct res_jwt_header {
    struct conf_mark mark;
    char *name;
    char *prefix;
};

struct res_jwt_claim_header {
    struct conf_mark mark;
    char *header;
    char *claim;
};

struct res_jwt_rule {
    struct conf_mark mark;
    char *issuer;
    struct conf_strs audiences;
    char *jwks_uri;
    char *jwks;
    struct conf_list from_headers; /* struct res_jwt_header */
    struct conf_strs from_params;
    struct conf_strs from_cookies;
    int forward_original_token;
    char *output_payload_to_header;
    struct conf_list output_claim_to_headers; /* struct res_jwt_claim_header */
    int64_t timeout_ms; /* jwksUri fetch; 0: the default */
};

struct res_request_authentication {
    struct {
        struct conf_mark mark;
        struct conf_strmap match_labels;
    } selector;
    struct conf_list jwt_rules; /* struct res_jwt_rule */
    struct conf_mark target_ref;
    struct conf_mark target_refs;
};

/* --- Kubernetes: v1 Service, Secret, Namespace; discovery.k8s.io/v1
 * EndpointSlice (res-k8s.c) ------------------------------------------- */

/* A Service port's targetPort: a number, or the name of a container port
 * (name[0] set), which only an EndpointSlice's ports resolve. */
struct res_k8s_target_port {
    int64_t number;
    char name[64];
};

enum res_k8s_l4 { RES_K8S_TCP, RES_K8S_UDP, RES_K8S_SCTP };

struct res_k8s_port {
    struct conf_mark mark;
    char *name;
    int64_t port;
    struct res_k8s_target_port target_port;
    int protocol; /* enum res_k8s_l4 */
    char *app_protocol;
    int64_t node_port;
};

enum res_k8s_svc_type {
    RES_K8S_CLUSTER_IP,
    RES_K8S_NODE_PORT,
    RES_K8S_LOAD_BALANCER,
    RES_K8S_EXTERNAL_NAME,
};

struct res_k8s_service {
    struct conf_list ports; /* struct res_k8s_port */
    struct conf_strmap selector;
    char *cluster_ip;
    struct conf_strs cluster_ips;
    int type; /* enum res_k8s_svc_type */
    char *external_name;
    int publish_not_ready_addresses;
    int session_affinity; /* 0 None, 1 ClientIP */
    /* A Service labelled topology.istio.io/network is that network's
     * gateway at these addresses, as istiod reads its external ones. */
    struct conf_strs external_ips;
    struct conf_mark ignored[12];
    /* Made by res_k8s_link() once every file is read: the registry entry
     * this Service is, as a ServiceEntry of resolution STATIC (DNS for
     * type ExternalName) with host NAME.NS.svc.DOMAIN, the ports with
     * Istio's protocol, the ready endpoints of its EndpointSlices and the
     * WorkloadEntries its selector picks. Owned by the Service. */
    struct res_service_entry *entry;
};

/* An EndpointSlice condition: unset (Kubernetes: nil), false or true. */
enum res_k8s_cond { RES_K8S_UNSET, RES_K8S_FALSE, RES_K8S_TRUE };

struct res_k8s_endpoint {
    struct conf_mark mark;
    struct conf_strs addresses;
    struct {
        struct conf_mark mark;
        int64_t ready; /* enum res_k8s_cond */
        int64_t serving;
        int64_t terminating;
    } conditions;
    char *hostname;
    char *node_name;
    char *zone;
    /* The object behind the endpoint: a Pod's labels, service account,
     * locality and network are the endpoint's (res_k8s_link()). */
    struct {
        struct conf_mark mark;
        char *kind;
        char *name;
        char *ns;
        struct conf_mark ignored[4]; /* apiVersion, uid, ... */
    } target_ref;
    struct conf_mark ignored[2]; /* hints, deprecatedTopology */
};

struct res_k8s_slice_port {
    struct conf_mark mark;
    char *name;
    int64_t port;
    int protocol; /* enum res_k8s_l4 */
    char *app_protocol;
};

enum res_k8s_addr_type { RES_K8S_IPV4, RES_K8S_IPV6, RES_K8S_FQDN };

struct res_k8s_endpoint_slice {
    int address_type;           /* enum res_k8s_addr_type */
    struct conf_list endpoints; /* struct res_k8s_endpoint */
    struct conf_list ports;     /* struct res_k8s_slice_port */
};

/* The credential keys of a Secret, as Istio reads them: a TLS Secret's
 * tls.crt, tls.key, ca.crt, ca.crl, or a generic one's cert, key, cacert,
 * crl. */
enum res_secret_key {
    RES_SECRET_CERT,
    RES_SECRET_KEY,
    RES_SECRET_CA,
    RES_SECRET_CRL,
    RES_SECRET_NKEYS
};

struct res_k8s_secret {
    char *type;
    struct conf_strmap data;        /* key -> base64, as written */
    struct conf_strmap string_data; /* key -> text */
    int immutable;
    /* Filled by the check: each credential key's bytes (decoded), NULL
     * when absent; owned by the Secret, never logged or shown. */
    unsigned char *val[RES_SECRET_NKEYS];
    size_t len[RES_SECRET_NKEYS];
    /* Where the running gateway reads each key from (a file the control
     * loop made, see res_secret_set_path()); NULL: not made. */
    char *path[RES_SECRET_NKEYS];
};

struct res_k8s_namespace {
    struct conf_mark finalizers; /* spec.finalizers: accepted */
};

/* A v1 Node: only its labels are read (the topology labels give the
 * locality of the EndpointSlice endpoints on it); its spec is accepted
 * and ignored. */
struct res_k8s_node {
    struct conf_mark ignored[7]; /* podCIDR(s), providerID, ... */
};

/* A v1 Pod, read as istiod reads one for the endpoints that are it: its
 * labels (subsets, and istio-locality / topology.istio.io/network), its
 * Node and service account, and its IPs. Everything else of the spec and
 * status is accepted and ignored; the Kubernetes source keeps only these
 * fields (docs/pods.md). */
struct res_k8s_pod_ip {
    struct conf_mark mark;
    char *ip;
};

struct res_k8s_pod {
    struct {
        struct conf_mark mark;
        char *node_name;
        char *service_account_name;
        char *service_account; /* the deprecated alias */
        char *hostname;
        char *subdomain;
        int host_network;
        struct conf_mark ignored[40];
    } spec;
    struct {
        struct conf_mark mark;
        char *phase;
        char *pod_ip;
        struct conf_list pod_ips; /* struct res_k8s_pod_ip */
        struct conf_mark ignored[16];
    } status;
};

/* --- strait.io/v1alpha1 LuaPolicy (res-luapolicy.c) ------------------- */

enum res_lua_ref_kind { RES_LUA_REF_GATEWAY, RES_LUA_REF_VIRTUAL_SERVICE };

/* A target: a Gateway (every request its servers take) or a
 * VirtualService (every request one of its http routes takes). */
struct res_lua_target_ref {
    struct conf_mark mark;
    int kind; /* enum res_lua_ref_kind */
    char *name;
    char *ns; /* NULL: the policy's namespace */
};

/* A per-route override: the http route of that name (a VirtualService's
 * http[].name) runs without this policy (Envoy's LuaPerRoute.disabled). */
struct res_lua_route {
    struct conf_mark mark;
    char *name;
    int disabled;
};

enum res_lua_failure { RES_LUA_FAIL, RES_LUA_IGNORE };

struct res_lua_limits {
    struct conf_mark mark;
    int64_t memory;               /* bytes per lua_State */
    int64_t instruction_slice;    /* VM instructions between two checks */
    int64_t burst_ms;             /* one call of a hook, without yielding */
    int64_t request_ms;           /* every call of the request's hooks */
    int64_t body_bytes;           /* h:body() at most */
    int64_t http_calls;           /* strait.http.request calls per request */
    int64_t http_call_timeout_ms; /* one call at most */
};

struct res_lua_dict {
    struct conf_mark mark;
    char *name;
    int64_t size;
};

struct res_lua_policy {
    struct {
        struct conf_mark mark;
        struct conf_strmap match_labels;
    } selector;
    struct conf_list target_refs; /* struct res_lua_target_ref */
    struct conf_strs hosts;       /* request authorities ("*.x", "*") */
    struct conf_list routes;      /* struct res_lua_route */
    int64_t priority;             /* higher runs first */
    struct {
        struct conf_mark mark;
        char *inline_text;
        char *file; /* relative to the bootstrap's lua.path */
    } source;
    struct conf_tree config; /* the read-only policy.config */
    int failure_policy;      /* enum res_lua_failure */
    struct res_lua_limits limits;
    struct conf_list shared_dicts; /* struct res_lua_dict */
};

/* --- gateway.networking.k8s.io ReferenceGrant (res-luapolicy.c) ------ */

/*
 * A permission, written in the namespace of the resources it opens, for
 * resources of another namespace to refer to them (Gateway API
 * ReferenceGrant). strait reads it for LuaPolicy targetRefs: a from of
 * group strait.io, kind LuaPolicy and a to of group networking.istio.io,
 * kind Gateway or VirtualService (name empty: every one of that kind).
 */
struct res_grant_from {
    struct conf_mark mark;
    char *group;
    char *kind;
    char *ns;
};

struct res_grant_to {
    struct conf_mark mark;
    char *group;
    char *kind;
    char *name; /* NULL: every resource of the kind */
};

struct res_reference_grant {
    struct conf_list from; /* struct res_grant_from */
    struct conf_list to;   /* struct res_grant_to */
};

/* --- gateway.networking.k8s.io (res-gwapi.c) --------------------------- */

/*
 * The Kubernetes Gateway API kinds strait reads. They are lowered into
 * Istio Gateways and VirtualServices before analysis (config/gwapi.h), so
 * the compiler and data path know nothing of them. A field of the
 * standard channel that strait does not implement yet is decoded as a
 * CONF_IGNORE mark in refused[] and refused with an error naming it.
 */
#define RES_GWAPI_REFUSED 6

struct res_gwapi_ref { /* ParentReference, BackendObjectReference, ... */
    struct conf_mark mark;
    char *group;
    char *kind;
    char *ns;
    char *name;
    char *section_name;
    int64_t port; /* 0: not given */
    int64_t weight;
    struct conf_mark refused[RES_GWAPI_REFUSED];
};

struct res_gateway_class {
    char *controller_name;
    char *description;
    struct conf_mark refused[RES_GWAPI_REFUSED];
};

struct res_gwapi_listener {
    struct conf_mark mark;
    char *name;
    char *hostname;
    int64_t port;
    char *protocol;
    struct {
        struct conf_mark mark;
        char *mode;
        struct conf_list certificate_refs; /* struct res_gwapi_ref */
        struct conf_mark refused[RES_GWAPI_REFUSED];
    } tls;
    struct {
        struct conf_mark mark;
        struct {
            struct conf_mark mark;
            char *from; /* All, Same, Selector, None */
            struct {
                struct conf_mark mark;
                struct conf_strmap match_labels;
                struct conf_mark refused[RES_GWAPI_REFUSED];
            } selector;
        } namespaces;
        struct conf_list kinds; /* struct res_gwapi_ref (group, kind) */
    } allowed_routes;
};

struct res_gwapi_address {
    struct conf_mark mark;
    char *type;
    char *value;
};

struct res_k8s_gateway {
    char *gateway_class_name;
    struct conf_list listeners; /* struct res_gwapi_listener */
    struct conf_list addresses; /* struct res_gwapi_address */
    struct conf_mark refused[RES_GWAPI_REFUSED];
};

struct res_gwapi_header {
    struct conf_mark mark;
    char *type; /* Exact, RegularExpression */
    char *name;
    char *value;
};

struct res_gwapi_path_mod {
    struct conf_mark mark;
    char *type; /* ReplaceFullPath, ReplacePrefixMatch */
    char *replace_full_path;
    char *replace_prefix_match;
};

struct res_gwapi_header_mod {
    struct conf_mark mark;
    struct conf_list set; /* struct res_gwapi_header (name, value) */
    struct conf_list add;
    struct conf_strs remove;
};

struct res_gwapi_filter {
    struct conf_mark mark;
    char *type;
    struct res_gwapi_header_mod request_header_modifier;
    struct res_gwapi_header_mod response_header_modifier;
    struct {
        struct conf_mark mark;
        struct res_gwapi_ref backend_ref;
        struct conf_mark refused[RES_GWAPI_REFUSED];
    } request_mirror;
    struct {
        struct conf_mark mark;
        char *scheme;
        char *hostname;
        struct res_gwapi_path_mod path;
        int64_t port;
        int64_t status_code;
    } request_redirect;
    struct {
        struct conf_mark mark;
        char *hostname;
        struct res_gwapi_path_mod path;
    } url_rewrite;
    struct conf_mark refused[RES_GWAPI_REFUSED];
};

struct res_gwapi_match {
    struct conf_mark mark;
    struct {
        struct conf_mark mark;
        char *type; /* Exact, PathPrefix, RegularExpression */
        char *value;
    } path;
    struct conf_list headers;      /* struct res_gwapi_header */
    struct conf_list query_params; /* struct res_gwapi_header */
    char *method;
};

struct res_gwapi_rule {
    struct conf_mark mark;
    char *name;
    struct conf_list matches;      /* struct res_gwapi_match */
    struct conf_list filters;      /* struct res_gwapi_filter */
    struct conf_list backend_refs; /* struct res_gwapi_ref */
    struct {
        struct conf_mark mark;
        int64_t request_ms;         /* 0: none */
        int64_t backend_request_ms; /* 0: none */
    } timeouts;
    struct conf_mark refused[RES_GWAPI_REFUSED];
};

struct res_http_route_gw {
    struct conf_list parent_refs; /* struct res_gwapi_ref */
    struct conf_strs hostnames;
    struct conf_list rules; /* struct res_gwapi_rule */
};

/* --- strait.io/v1alpha1 MeshLink (res-meshlink.c) --------------------- */

/*
 * A link to another site's control plane (README "Site links"), as
 * `strait link create` on that site prints it: where its catalog API and
 * east-west gateway are, which network and trust domain it is, the roots
 * it is trusted by (a SPIFFE bundle) and the credential it issued for
 * this site.
 */
struct res_mesh_link {
    char *network;      /* the remote site's network (required) */
    char *trust_domain; /* its trust domain (required) */
    char *trust_bundle; /* its SPIFFE bundle, JSON text (required) */
    struct {
        struct conf_mark mark;
        char *address; /* IP or DNS name of its east-west gateway */
        int64_t port;  /* its AUTO_PASSTHROUGH port (15443) */
    } gateway;
    struct {
        struct conf_mark mark;
        char *address; /* "IP:port" of its catalog API */
    } catalog;
    struct {
        struct conf_mark mark;
        char *token; /* the link credential (secret) */
    } credential;
    int64_t retain_for_ms; /* keep the last catalog this long when lost */
    /* Hosts of the remote catalog that may merge with a host this site
     * defines or another link owns (config/link-merge.h). */
    struct {
        struct conf_mark mark;
        struct conf_strs hosts;      /* "name" or "*.suffix" */
        struct conf_strs namespaces; /* the owner's namespace, or "*" */
    } import;
};

/* --- resources --------------------------------------------------------- */

struct res_meta {
    char *name;
    char *ns;
    struct conf_strmap labels;
    struct conf_strmap annotations;
    char *created; /* creationTimestamp (RFC 3339): Gateway API precedence */
    int64_t generation;          /* metadata.generation: observedGeneration */
    struct conf_mark ignored[8]; /* resourceVersion, uid, ...: accepted */
};

/*
 * One loaded resource. file points into the set's file list; line and col
 * are where the document's top-level mapping starts. spec points at the
 * kind's struct (struct res_gateway for RES_GATEWAY and so on).
 */
struct resource {
    enum res_kind kind;
    const char *file;
    int line;
    int col;
    char *api_version;
    struct res_meta meta;
    void *spec;
    /* The status the object would have in Kubernetes, as JSON (Gateway
     * API kinds, set by gwapi_lower()); NULL: none. Owned. */
    char *status;
};

enum res_level { RES_ERROR, RES_WARNING, RES_INFO };

/*
 * One message about the configuration: a load error, a warning, or an
 * analysis finding. code is a static string ("IST0101"; "IST0106" for
 * schema errors), resource is "Kind ns/name" (or "" before the document's
 * identity is known), path the field path ("spec.http[0].route[1]").
 */
struct res_msg {
    const char *code;
    enum res_level level;
    char *file;
    int line;
    int col;
    char *resource;
    char *path;
    char *message;
    int inert; /* an error about configuration this gateway never uses
                * (VirtualServices bound only to mesh): `strait check`
                * reports it as istioctl does, a load is not refused */
};

struct res_msgs {
    struct res_msg *v;
    size_t n;
    size_t alloc;
    size_t nerr;
};

struct resource_set {
    struct resource **v; /* in load order: files by name, then documents */
    size_t n;
    char **files; /* every file read, owned */
    size_t nfiles;
    struct res_msgs msgs; /* load errors and warnings */
    char *domain;         /* cluster domain for short names: cluster.local */
    /* (kind, namespace, name) -> index in v plus 1 (0: empty slot), open
     * addressing, at most half full; NULL: searched linearly. Keeps
     * loading and finding linear in the number of resources (a fleet of
     * 100,000 etcd keys). */
    size_t *idx;
    size_t idx_cap; /* a power of two */
    /* While loading: told after each file (NULL: nobody asks). */
    const struct res_progress *progress;
    /* The stop flag of resource_load_inputs_stop(), borrowed while it
     * loads (NULL after): a LuaPolicy's top-level code run by its check
     * ends once it is set, and so does the load. NULL: none. */
    const int *stop;
};

/* The phases a long load and check goes through, for a progress line on
 * a terminal (`strait check` of a large directory). */
enum res_progress_phase {
    RES_PROGRESS_FILE,    /* a file was read: what names it */
    RES_PROGRESS_ANALYSE, /* every file is read; the analysis starts */
    RES_PROGRESS_DONE,    /* the results are about to be printed */
};

struct res_progress {
    void (*fn)(void *arg, enum res_progress_phase phase, const char *what,
               size_t files, size_t resources);
    void *arg;
};

#endif
