#ifndef STRAIT_CONFIG_BOOTSTRAP_H
#define STRAIT_CONFIG_BOOTSTRAP_H

#include <stdint.h>

#include "config/conf.h"
#include "core/addr.h"

struct buf;

/*
 * The bootstrap file, strait.yaml: who this node is and how the process
 * runs. Istio resources (a later source) configure traffic; until Gateways
 * exist, plain TCP listeners live here.
 */
struct bootstrap_node {
    char *name; /* defaults to the host name */
    char *ns;
    char *service_account;
    struct conf_strmap labels;
    struct conf_strmap annotations;
    char *network;
    char *locality;
    /* The gateway's own Kubernetes Service ("NS/NAME" or "NAME" in ns);
     * "": the Services of ns whose selector the labels match. */
    char *service;
};

enum bootstrap_protocol { BOOTSTRAP_TCP, BOOTSTRAP_HTTP };

/* Istio's TLS version names. */
enum bootstrap_tls_version {
    BOOTSTRAP_TLS_AUTO,
    BOOTSTRAP_TLSV1_0,
    BOOTSTRAP_TLSV1_1,
    BOOTSTRAP_TLSV1_2,
    BOOTSTRAP_TLSV1_3,
};

struct bootstrap_cert {
    struct conf_mark mark;
    char *cert; /* PEM chain, leaf first */
    char *key;
};

/* Server TLS of a listener, with the names of Istio's ServerTLSSettings. */
struct bootstrap_tls {
    struct conf_list certificates; /* struct bootstrap_cert */
    int min_version;
    int max_version;
    struct conf_strs cipher_suites;
    struct conf_strs alpn;
    int64_t reload_interval_ms;
};

enum bootstrap_underscores {
    BOOTSTRAP_US_ALLOW,
    BOOTSTRAP_US_REJECT,
    BOOTSTRAP_US_DROP,
};

struct bootstrap_http {
    int64_t max_head_bytes;
    int64_t max_headers;
    int underscores;
    int64_t max_concurrent_streams;
    int64_t stream_window;
    int64_t connection_window;
    int64_t xff_trusted_hops;
    int64_t idle_timeout_ms;
    int64_t headers_timeout_ms;
    int64_t stream_idle_timeout_ms; /* 0: none */
    int64_t body_buffer;
    int h2c;             /* accept h2c prior knowledge on plaintext */
    char *upgrade_types; /* comma-separated Upgrade tokens tunnelled */
};

/* The top-level http section: the keys of a listener's http block that
 * every Gateway listener takes from the bootstrap. */
struct bootstrap_gateway_http {
    int64_t headers_timeout_ms;
    int64_t stream_idle_timeout_ms; /* 0: none */
};

/* Istio's ProxyConfig forwardClientCertDetails, in its enum's order
 * (UNDEFINED is the gateway default, SANITIZE_SET). */
enum bootstrap_xfcc {
    BOOTSTRAP_XFCC_UNDEFINED,
    BOOTSTRAP_XFCC_SANITIZE,
    BOOTSTRAP_XFCC_FORWARD_ONLY,
    BOOTSTRAP_XFCC_APPEND_FORWARD,
    BOOTSTRAP_XFCC_SANITIZE_SET,
    BOOTSTRAP_XFCC_ALWAYS_FORWARD_ONLY,
};

/* gatewayTopology.proxyProtocol: present (mark.line > 0) means every
 * Gateway listener requires a PROXY protocol header (Istio's empty
 * message); maxHeaderBytes bounds a v2 header. */
struct bootstrap_proxy_protocol {
    struct conf_mark mark;
    int64_t max_header_bytes;
};

/* Istio's ProxyConfig gatewayTopology: what is in front of the gateway. */
struct bootstrap_gateway_topology {
    int64_t num_trusted_proxies;
    struct bootstrap_proxy_protocol proxy_protocol;
    int forward_client_cert; /* enum bootstrap_xfcc */
};

/* A static route, until VirtualServices: first match wins. */
struct bootstrap_route {
    struct conf_mark mark;
    char *host; /* exact, *.suffix, or * */
    char *path_prefix;
    char *cluster;
    int64_t timeout_ms; /* 0: none */
};

enum bootstrap_upstream_protocol { BOOTSTRAP_UP_HTTP1, BOOTSTRAP_UP_HTTP2 };

struct bootstrap_upstream_tls {
    int enabled;
    char *sni;
    char *ca_certificates; /* verify against these; empty: system roots */
    int insecure_skip_verify;
};

struct bootstrap_cluster {
    struct conf_mark mark;
    char *name;
    struct conf_addrs endpoints;
    int protocol;
    int64_t connect_timeout_ms;
    int64_t idle_timeout_ms;
    int64_t max_requests_per_connection;
    struct bootstrap_upstream_tls tls;
};

struct bootstrap_listener {
    struct conf_mark mark;
    char *name;
    struct addr address;
    int protocol;
    struct conf_addrs upstreams;
    struct bootstrap_tls tls;
    struct bootstrap_http http;
    struct conf_list routes; /* struct bootstrap_route */
    int64_t connect_timeout_ms;
    int64_t connect_attempts;
    int64_t idle_timeout_ms;
    int64_t buffer_size;
    int64_t backlog;
    int64_t max_connections; /* 0: limits.maxConnectionsPerListener */
};

enum bootstrap_log_format { BOOTSTRAP_LOG_TEXT, BOOTSTRAP_LOG_JSON };

struct bootstrap_admin {
    struct addr address;
    struct conf_strs allowed_hosts; /* Host values answered besides loopback */
    struct conf_strs allowed_origins; /* Origins allowed on POST/PUT/DELETE */
};

/* log.accessLogEncoding: strait's own line, or Envoy format strings. */
enum bootstrap_alog_encoding {
    BOOTSTRAP_ALOG_STRAIT,
    BOOTSTRAP_ALOG_TEXT,
    BOOTSTRAP_ALOG_JSON
};

/* Istio's standard metrics (istio_*) and the ports Kubernetes probes and
 * Prometheus scrape. */
struct bootstrap_metrics {
    int enabled;
    struct addr address; /* GET /stats/prometheus only; len 0: none */
    int64_t max_series;  /* label sets per worker */
    struct conf_strmap extra_labels;
};

struct bootstrap_readiness {
    struct addr address; /* GET /healthz/ready only; len 0: none */
};

struct bootstrap_log {
    int level;  /* enum log_level */
    int format; /* enum bootstrap_log_format */
    int access_log;
    int access_log_encoding;   /* enum bootstrap_alog_encoding */
    char *access_log_format;   /* "": Istio's default for the encoding */
    char *access_log_file;     /* "": stderr */
    int64_t access_log_buffer; /* bytes waiting for the writer, at most */
    struct conf_mark mark;
};

/* Istio resources in etcd v3 (its JSON gateway), one per key
 * <prefix>/<Kind>/<namespace>/<name>. Off without endpoints. */
struct bootstrap_etcd {
    struct conf_strs endpoints; /* http://HOST:PORT or https://HOST:PORT */
    char *prefix;               /* no trailing '/' */
    char *ca_file;              /* https: verify members with this CA */
    char *cert_file;            /* https: client certificate */
    char *key_file;
    char *username; /* "" for none */
    char *password;
    int64_t dial_timeout_ms;    /* connect to the head of an answer */
    int64_t request_timeout_ms; /* a whole range or txn answer */
    int64_t backoff_ms;         /* first reconnect delay (jittered) */
    int64_t backoff_max_ms;     /* the cap */
    int64_t max_response_bytes; /* a range answer or one watch message */
    int64_t page_size;          /* keys per range page, at most */
};

/* Tracing: spans exported over OTLP/HTTP (JSON). */
struct bootstrap_tracing {
    char *endpoint;     /* "http://HOST:PORT[/PATH]"; "": tracing off */
    double sampling;    /* percent of requests without a caller's decision */
    char *service_name; /* "": NODE.NAMESPACE */
    int64_t max_queue;  /* spans waiting for export, at most */
    int64_t max_batch;  /* spans per export request, at most */
    int64_t flush_interval_ms;
    int64_t export_timeout_ms;
    int64_t max_retries; /* of one batch on 429, 502, 503, 504 */
    int compression;     /* 0: none, 1: gzip */
    struct conf_mark mark;
};

/* Istio resources, Services, EndpointSlices, Secrets and Namespaces from
 * the Kubernetes API (bootstrap-kube.c). Off unless enabled. */
struct bootstrap_kube {
    int enabled;
    char *server;     /* https://HOST:PORT; "": kubeconfig or in-cluster */
    char *kubeconfig; /* "": none */
    char *token_file; /* in-cluster: the service-account token */
    char *ca_file;    /* in-cluster: the API server's CA */
    struct conf_strs namespaces;        /* none: cluster-wide */
    struct conf_strs kinds;             /* none: every kind strait reads */
    struct conf_strmap label_selectors; /* kind -> labelSelector */
    struct conf_strmap field_selectors; /* kind -> fieldSelector */
    int64_t min_watch_timeout_ms;       /* each watch: [min, 2 min), random */
    int64_t request_timeout_ms;         /* a list page; a watch's answer head */
    int64_t backoff_ms;                 /* first retry delay (jittered) */
    int64_t backoff_max_ms;             /* the cap */
    int64_t backoff_reset_ms;           /* healthy this long: back to backoff */
    int64_t page_size;                  /* list ?limit= */
    int64_t max_response_bytes;         /* a list page or one watch event */
    int64_t max_objects;                /* objects held, all kinds together */
    struct conf_mark mark;
};

/* Where Istio resources come from. */
struct bootstrap_source {
    char *dir; /* "" for none */
    int64_t debounce_ms;
    int64_t max_rebuilds_per_s; /* etcd/kube/link changes: rebuilds, at most */
    char *default_ns;           /* namespace of documents that give none */
    struct bootstrap_etcd etcd;
    struct bootstrap_kube kubernetes;
};

/*
 * The API server strait talks to, from config.kubernetes: server (or
 * in-cluster KUBERNETES_SERVICE_HOST/PORT, or the kubeconfig's
 * current-context), how it is verified and how strait authenticates.
 */
struct kube_target {
    char *server; /* https://HOST:PORT */
    char *host;   /* HOST (no brackets) */
    int port;
    int tls;
    char *ca_file;    /* "": see ca_pem */
    char *ca_pem;     /* certificate-authority-data, decoded; NULL: none */
    char *token;      /* a static token; NULL: token_file or none */
    char *token_file; /* re-read before each request; NULL: none */
    char *cert_file;  /* client certificate; NULL: none */
    char *key_file;
    char *origin; /* "in-cluster", "kubeconfig PATH context C" */
};

/* kube_target_resolve() fills t from conf (and the environment for the
 * in-cluster defaults). 0, or -1 with an allocated *err naming what is
 * missing or what strait does not implement (a kubeconfig's exec plugin,
 * client-certificate-data, ...), with the kubeconfig's file:line. */
int kube_target_resolve(const struct bootstrap_kube *conf,
                        struct kube_target *t, char **err);
void kube_target_dispose(struct kube_target *t);

struct bootstrap;
/* bootstrap_kube_validate() checks config.kubernetes' cross-key rules;
 * the count of errors appended to errs. */
int bootstrap_kube_validate(const struct bootstrap *bs, const char *file,
                            struct buf *errs);

/* The kinds config.kubernetes can watch, in watch order: Kubernetes kind
 * names ("Gateway", "Service", ...); NULL-terminated. */
extern const char *const bootstrap_kube_kinds[];

/* The field selector every Secret watch carries, as Istio's credential
 * controller: never the service-account tokens or Helm releases. */
#define KUBE_SECRET_FIELD_SELECTOR                                             \
    "type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token"

/* The field selector every Pod watch carries: only a Running Pod is
 * behind a ready endpoint, so the rest of a cluster's Pods are never
 * sent (docs/pods.md). */
#define KUBE_POD_FIELD_SELECTOR "status.phase=Running"

extern const struct conf_section bootstrap_kube_section;

/* bootstrap_kube_equal() is true when a and b ask for the same watches. */
int bootstrap_kube_equal(const struct bootstrap_kube *a,
                         const struct bootstrap_kube *b);

/*
 * bootstrap_etcd_endpoint() reads one config.etcd.endpoints entry,
 * http://HOST:PORT or https://HOST:PORT (HOST a name, an IPv4 address or
 * a bracketed IPv6 one; no path). Returns 0 with *tls, host (n bytes,
 * without brackets) and *port set, or -1 with a static reason in *why.
 */
int bootstrap_etcd_endpoint(const char *url, int *tls, char *host, size_t n,
                            int *port, const char **why);

/* credentialName NAME -> NAME/tls.crt, NAME/tls.key, NAME/ca.crt here. */
struct bootstrap_credentials {
    char *dir;
};

/* Resolving ServiceEntries with resolution DNS. */
struct bootstrap_dns {
    struct conf_addrs nameservers; /* none: those of resolv_conf */
    char *resolv_conf;             /* the system resolver's file */
    int64_t min_refresh_ms;
    int64_t timeout_ms;
};

/* Istio's MeshConfig outboundTrafficPolicy: mode is an enum
 * res_outbound_mode (REGISTRY_ONLY or ALLOW_ANY). */
struct bootstrap_outbound {
    int mode;
};

/* Fetching the JWKS of RequestAuthentication http(s) jwksUris. */
/* LuaPolicy: where a policy's source.file is looked for, in order. */
struct bootstrap_lua {
    struct conf_strs path;
};

struct bootstrap_jwt {
    int64_t jwks_refresh_ms;
    char *jwks_ca_file; /* "": the system bundle */
};

enum bootstrap_key_type { BOOTSTRAP_KEY_ECDSA, BOOTSTRAP_KEY_RSA };

/* Where a joining host gets its certificate (src/control/ca). */
struct bootstrap_ca_join {
    char *address; /* https://HOST:PORT of a strait CA; "" for none */
    char *token;   /* single-use join token; "" after the first join */
};

/* Where a pod gets its certificate from istiod (src/control/ca). */
struct bootstrap_ca_istiod {
    char *address;            /* HOST:PORT of istiod's gRPC CA; "" for none */
    char *root_cert;          /* the mesh root (istio-ca-root-cert) */
    char *token;              /* the projected service-account token file */
    char *cluster_id;         /* ClusterID header */
    char *server_name;        /* name istiod's certificate is checked for */
    int64_t start_timeout_ms; /* how long start waits for istiod */
};

/* Kubernetes service-account tokens the CA's gRPC API accepts. */
struct bootstrap_ca_sa_tokens {
    char *issuer;    /* iss; "" when jwks_file is "" */
    char *jwks_file; /* the issuer's keys; "": not accepted */
    char *audience;  /* aud required */
};

/* The embedded CA and this node's own SPIFFE certificate. */
struct bootstrap_ca {
    int enabled;   /* run the CA (issue, serve the API) */
    char *dir;     /* CA state, and this node's identity/ */
    char *cacerts; /* Istio plug-in layout; "" for a self-signed root */
    int key_type;  /* enum bootstrap_key_type */
    struct addr address;
    int64_t root_cert_ttl_ms;
    int64_t cert_ttl_ms;
    int64_t max_cert_ttl_ms;
    struct bootstrap_ca_join join;
    struct conf_strs server_names; /* DNS SANs of the CA server */
    struct bootstrap_ca_istiod istiod;
    struct bootstrap_ca_sa_tokens sa_tokens;
};

/* Site links (README "Site links"): this site's catalog API and what
 * `strait link create` prints for the other site. */
struct bootstrap_links {
    struct addr address; /* the catalog API (TLS); len 0: none */
    char *advertise;     /* IP:port the other site dials; "": address */
    char *gateway;       /* HOST:PORT of this site's east-west gateway */
    int64_t handshake_timeout_ms; /* the catalog API's handshake deadline */
    int64_t max_per_source;       /* its connections per source address */
};

/* The connection limit of a Gateway port (limits.ports). */
struct bootstrap_port_limit {
    struct conf_mark mark;
    int64_t port;
    int64_t max_connections;
};

enum bootstrap_limit_action { BOOTSTRAP_LIMIT_PAUSE, BOOTSTRAP_LIMIT_CLOSE };

/* Connection limits (net/overload.h); 0: none. */
struct bootstrap_limits {
    int64_t max_connections;              /* the whole process */
    int64_t max_connections_per_listener; /* each listener by default */
    int action;                           /* enum bootstrap_limit_action */
    struct conf_list ports;               /* struct bootstrap_port_limit */
};

/* Memory actions (Envoy's overload manager); thresholds in percent of
 * memory_limit. */
struct bootstrap_overload {
    int64_t memory_limit; /* bytes; 0: none */
    int64_t check_interval_ms;
    int64_t stop_accepting_connections;
    int64_t disable_keepalive;
    int64_t stop_accepting_requests;
    int64_t hysteresis;
};

/* Binary upgrades (strait upgrade, POST /upgrade, SIGUSR2). */
struct bootstrap_upgrade {
    char *binary;       /* "": the executable strait was started from */
    int64_t timeout_ms; /* how long the new process may take to serve */
};

/* GeoIP (core/geoip.h): database paths ("" for none) and the request
 * headers results are written to ("" for none), in enum geoip_db and
 * enum geoip_field order. */
struct bootstrap_geoip {
    char *db[5];
    char *headers[11];
    struct conf_mark mark;
};

/* meshNetworks: Istio's MeshNetworks. A network's endpoints are those
 * whose IP is in a fromCidr, or whose registry (topology.istio.io/cluster
 * label) is a fromRegistry; its gateways an address (IP or DNS name) or a
 * registry service's addresses, each with its port. */
#define BOOTSTRAP_MAX_NETWORKS 1024
#define BOOTSTRAP_MAX_NET_ENTRIES 256

struct bootstrap_net_endpoint {
    struct conf_mark mark;
    char *from_cidr;     /* "": none */
    char *from_registry; /* "": none */
};

struct bootstrap_net_gateway {
    struct conf_mark mark;
    char *address;               /* "": none */
    char *registry_service_name; /* "": none */
    int64_t port;
    /* An HBONE (ambient east-west) gateway's SPIFFE ID, which the outer
     * tunnel of double HBONE verifies; "" for an AUTO_PASSTHROUGH one. */
    char *identity;
};

struct bootstrap_network {
    struct conf_mark mark;
    struct conf_list endpoints; /* struct bootstrap_net_endpoint */
    struct conf_list gateways;  /* struct bootstrap_net_gateway */
};

struct bootstrap_mesh_networks {
    struct conf_map networks; /* name -> struct bootstrap_network */
    struct conf_mark mark;
};

/* HBONE servers (Gateway servers of protocol HBONE): per-connection and
 * per-tunnel limits. */
struct bootstrap_hbone {
    int64_t max_tunnels;   /* per connection (MAX_CONCURRENT_STREAMS) */
    int64_t tunnel_buffer; /* bytes per tunnel and direction (window) */
    int64_t tunnel_memory; /* bytes all tunnels may reserve together */
    int64_t connect_timeout_ms;
    int64_t idle_timeout_ms;
};

struct bootstrap {
    struct bootstrap_node node;
    struct bootstrap_mesh_networks mesh_networks;
    char *trust_domain;
    int64_t workers; /* 0: auto, one per core */
    struct bootstrap_admin admin;
    struct bootstrap_metrics metrics;
    struct bootstrap_readiness readiness;
    struct bootstrap_log log;
    struct bootstrap_tracing tracing;
    int64_t drain_timeout_ms;
    int64_t drain_window_ms; /* keep accepting this long after SIGTERM */
    struct bootstrap_source config;
    struct bootstrap_credentials credentials;
    struct bootstrap_dns dns;
    struct bootstrap_outbound outbound; /* outboundTrafficPolicy */
    struct bootstrap_jwt jwt;
    struct bootstrap_lua lua;
    struct bootstrap_gateway_http http;         /* every Gateway listener */
    struct bootstrap_gateway_topology topology; /* every Gateway listener */
    struct bootstrap_ca ca;
    struct bootstrap_links links;
    struct bootstrap_limits limits;
    struct bootstrap_overload overload;
    struct bootstrap_upgrade upgrade;
    struct bootstrap_geoip geoip;
    struct bootstrap_hbone hbone;
    struct conf_list listeners; /* struct bootstrap_listener */
    struct conf_list clusters;  /* struct bootstrap_cluster */
};

/* Tables and checks of the HTTP parts, in bootstrap-http.c. */
extern const struct conf_section bootstrap_tls_section;
extern const struct conf_section bootstrap_http_section;
extern const struct conf_section bootstrap_gateway_http_section;
extern const struct conf_section bootstrap_topology_section;
extern const struct conf_section bootstrap_route_section;
extern const struct conf_section bootstrap_cluster_section;
int bootstrap_http_validate(const struct bootstrap *bs, const char *file,
                            struct buf *errs);

/* The meshNetworks table and its checks, in bootstrap-mesh.c. */
extern const struct conf_section bootstrap_mesh_networks_section;
int bootstrap_mesh_validate(const struct bootstrap *bs, const char *file,
                            struct buf *errs);

static inline const struct bootstrap_network *
bootstrap_network_at(const struct bootstrap *bs, size_t i)
{
    return &((const struct bootstrap_network *)bs->mesh_networks.networks.v)[i];
}

static inline struct bootstrap_cluster *
bootstrap_cluster_at(const struct bootstrap *bs, size_t i)
{
    return &((struct bootstrap_cluster *)bs->clusters.v)[i];
}

/* bootstrap_find_cluster() returns the cluster called name, or NULL. */
const struct bootstrap_cluster *
bootstrap_find_cluster(const struct bootstrap *bs, const char *name);

extern const struct conf_section bootstrap_section;

/*
 * bootstrap_load() reads and validates the file at path. Returns a new
 * bootstrap, or NULL with every problem found, one per line
 * "path:line:col: key: reason", in the allocated *err.
 */
struct bootstrap *bootstrap_load(const char *path, char **err);

/* bootstrap_parse() is bootstrap_load() on bytes already in memory; name is
 * used in messages. */
struct bootstrap *bootstrap_parse(const char *data, size_t len,
                                  const char *name, char **err);

void bootstrap_free(struct bootstrap *bs);

struct afmt;

/* An http:// URL (tracing.endpoint), split. */
struct bootstrap_url {
    char host[256]; /* name or IP, without [] */
    int port;       /* 80 when not written */
    char path[512]; /* "/v1/traces" when not written */
};

/* bootstrap_parse_url() splits s; 0, or -1 with a static *why. */
int bootstrap_parse_url(const char *s, struct bootstrap_url *u,
                        const char **why);

/* bootstrap_alog_compile() compiles lg's access-log format for its
 * encoding: the format, owned by the caller (afmt_free), NULL for the
 * STRAIT encoding (*err untouched), or NULL with an allocated *err. */
struct afmt *bootstrap_alog_compile(const struct bootstrap_log *lg, char **err);

static inline struct bootstrap_listener *
bootstrap_listener_at(const struct bootstrap *bs, size_t i)
{
    return &((struct bootstrap_listener *)bs->listeners.v)[i];
}

/* bootstrap_listener_limit() is the connection limit of the listener
 * named name on port (bl: its bootstrap entry, NULL for a Gateway's):
 * its own maxConnections, else its port's in limits.ports (Gateway
 * listeners), else limits.maxConnectionsPerListener; 0: none. */
int64_t bootstrap_listener_limit(const struct bootstrap *bs,
                                 const struct bootstrap_listener *bl,
                                 uint32_t port);

/* bootstrap_workers() resolves "auto" to the number of online cores. */
int bootstrap_workers(const struct bootstrap *bs);

/* bootstrap_listener_equal() is true when two listeners would behave the
 * same, so a reload can leave the running one alone. */
int bootstrap_listener_equal(const struct bootstrap_listener *a,
                             const struct bootstrap_listener *b);

/* bootstrap_dns_equal() is true when both have the same dns settings. */
int bootstrap_dns_equal(const struct bootstrap *a, const struct bootstrap *b);

/* bootstrap_clusters_equal() is true when both define the same clusters. */
int bootstrap_clusters_equal(const struct bootstrap *a,
                             const struct bootstrap *b);

/* The JSON of one listener and of all clusters, as /config_dump shows
 * them (also what reloads compare). */
/* bootstrap_listener_identity() writes bl's effective keys as
 * conf_identity() bytes (structural identities), maxConnections left
 * out (applied at every build without recompiling). */
struct conf_sink;
void bootstrap_listener_identity(const struct bootstrap_listener *bl,
                                 const struct conf_sink *sink);

void bootstrap_listener_to_json(const struct bootstrap_listener *bl,
                                struct buf *b);
void bootstrap_clusters_to_json(const struct bootstrap *bs, struct buf *b);

void bootstrap_to_json(const struct bootstrap *bs, struct buf *b);

#endif
