#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/bootstrap.h"
#include "config/res-kinds.h"
#include "config/yaml.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/units.h"
#include "http/access_format.h"

/* A bootstrap file is a page of YAML; anything this big is a mistake. */
#define BOOTSTRAP_MAX_BYTES (4 * 1024 * 1024)
#define BOOTSTRAP_MAX_WORKERS 256

#define OFF(type, field) offsetof(type, field)

static const char *const log_levels[] = {"debug", "info", "warn", "error",
                                         NULL};
static const char *const log_formats[] = {"text", "json", NULL};
static const char *const alog_encodings[] = {"STRAIT", "TEXT", "JSON", NULL};
static const char *const listener_protocols[] = {"tcp", "http", NULL};

/* workers: "auto" or a count. */
static int parse_workers(const char *s, size_t n, void *dst, const char **why)
{
    int64_t v;

    if (n == 4 && memcmp(s, "auto", 4) == 0) {
        v = 0;
    } else {
        if (units_int(s, n, &v, why) < 0) {
            *why = "expected 'auto' or a number of worker threads";
            return -1;
        }
        if (v < 1 || v > BOOTSTRAP_MAX_WORKERS) {
            *why = "out of range 1-256";
            return -1;
        }
    }
    memcpy(dst, &v, sizeof(v));
    return 0;
}

static void workers_json(struct buf *b, const void *src)
{
    int64_t v;

    memcpy(&v, src, sizeof(v));
    if (v == 0)
        buf_puts(b, "\"auto\"");
    else
        buf_printf(b, "%" PRId64, v);
}

/* node.service: "", NAME or NS/NAME, each a DNS label. */
static int valid_service_ref(const char *s, size_t n, void *dst,
                             const char **why)
{
    size_t start = 0, parts = 0;

    (void)dst;
    if (n == 0)
        return 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '/')
            continue;
        size_t len = i - start;
        if (len == 0 || len > 63 || ++parts > 2 || s[start] == '-' ||
            s[i - 1] == '-')
            goto bad;
        for (size_t j = start; j < i; j++)
            if (!((s[j] >= 'a' && s[j] <= 'z') ||
                  (s[j] >= '0' && s[j] <= '9') || s[j] == '-'))
                goto bad;
        start = i + 1;
    }
    return 0;
bad:
    *why = "expected NAME or NAMESPACE/NAME (DNS labels: lower-case "
           "letters, digits and '-', at most 63)";
    return -1;
}

static const struct conf_key node_keys[] = {
    {"name", CONF_STR, OFF(struct bootstrap_node, name), 0, 0, NULL,
     "node name (default: the host name)", NULL, NULL, NULL, NULL},
    {"namespace", CONF_STR, OFF(struct bootstrap_node, ns), 0, 0,
     "istio-system", "namespace the gateway runs in", NULL, NULL, NULL, NULL},
    {"serviceAccount", CONF_STR, OFF(struct bootstrap_node, service_account), 0,
     0, "strait", "service account of the gateway's SPIFFE identity", NULL,
     NULL, NULL, NULL},
    {"labels", CONF_STR_MAP, OFF(struct bootstrap_node, labels), 0, 0, NULL,
     "labels matched by Gateway selectors", NULL, NULL, NULL, NULL},
    {"annotations", CONF_STR_MAP, OFF(struct bootstrap_node, annotations), 0, 0,
     NULL,
     "the gateway pod's annotations; proxy.istio.io/config (a ProxyConfig "
     "in YAML or JSON) sets gatewayTopology keys over the top-level "
     "gatewayTopology, as Istio's annotation overrides meshConfig; its "
     "other fields are not read",
     NULL, NULL, NULL, NULL},
    {"network", CONF_STR, OFF(struct bootstrap_node, network), 0, 0, "",
     "network name for east-west routing", NULL, NULL, NULL, NULL},
    {"locality", CONF_STR, OFF(struct bootstrap_node, locality), 0, 0, "",
     "region/zone/subzone; DestinationRule localityLbSetting ranks "
     "endpoints against it",
     NULL, NULL, NULL, NULL},
    {"service", CONF_STR, OFF(struct bootstrap_node, service), 0, 0, "",
     "the gateway's own Kubernetes Service, NAMESPACE/NAME (NAME: in "
     "node.namespace); a Gateway server port that is one of its ports "
     "listens on that port's targetPort, as istiod translates it (80 -> "
     "8080); \"\": the Services of node.namespace whose selector "
     "node.labels match",
     NULL, NULL, valid_service_ref, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};

static const struct conf_section node_section = {node_keys, 0, SIZE_MAX};

static const struct conf_key listener_keys[] = {
    {"name", CONF_STR, OFF(struct bootstrap_listener, name), 0, 0, NULL,
     "unique name, used in stats and logs (required)", NULL, NULL, NULL, NULL},
    {"address", CONF_ADDR, OFF(struct bootstrap_listener, address), 0, 0, NULL,
     "address to listen on: IP:PORT, [IPV6]:PORT or unix:/PATH (required)",
     NULL, NULL, NULL, NULL},
    {"protocol", CONF_ENUM, OFF(struct bootstrap_listener, protocol), 0, 0,
     "tcp", "tcp (relay bytes to upstreams) or http (route by routes)",
     listener_protocols, NULL, NULL, NULL},
    {"upstreams", CONF_ADDR_LIST, OFF(struct bootstrap_listener, upstreams), 0,
     1024, NULL, "tcp: upstream addresses, used round robin (required)", NULL,
     NULL, NULL, NULL},
    {"tls", CONF_SECTION, OFF(struct bootstrap_listener, tls), 0, 0, NULL,
     "http: terminate TLS (when certificates are given)", NULL,
     &bootstrap_tls_section, NULL, NULL},
    {"http", CONF_SECTION, OFF(struct bootstrap_listener, http), 0, 0, NULL,
     "http: protocol settings", NULL, &bootstrap_http_section, NULL, NULL},
    {"routes", CONF_LIST, OFF(struct bootstrap_listener, routes), 0, 100000,
     NULL, "http: host/path-prefix routes to clusters, first match wins", NULL,
     &bootstrap_route_section, NULL, NULL},
    {"connectTimeout", CONF_DURATION,
     OFF(struct bootstrap_listener, connect_timeout_ms), 1, 3600 * 1000, "5s",
     "time allowed for one upstream connection attempt", NULL, NULL, NULL,
     NULL},
    {"connectAttempts", CONF_INT,
     OFF(struct bootstrap_listener, connect_attempts), 1, 16, "3",
     "upstream connection attempts, each on the next endpoint", NULL, NULL,
     NULL, NULL},
    {"idleTimeout", CONF_DURATION,
     OFF(struct bootstrap_listener, idle_timeout_ms), 1,
     INT64_C(7) * 24 * 3600 * 1000, "1h",
     "close a session with no traffic in either direction for this long", NULL,
     NULL, NULL, NULL},
    {"bufferSize", CONF_SIZE, OFF(struct bootstrap_listener, buffer_size), 1024,
     16 * 1024 * 1024, "64KiB",
     "bytes buffered per direction before reading stops (backpressure)", NULL,
     NULL, NULL, NULL},
    {"backlog", CONF_INT, OFF(struct bootstrap_listener, backlog), 1, 65535,
     "1024", "listen(2) backlog of each worker's socket", NULL, NULL, NULL,
     NULL},
    {"maxConnections", CONF_INT,
     OFF(struct bootstrap_listener, max_connections), 0, 10000000, "0",
     "connections this listener holds open at most, all workers together "
     "(over it: limits.action); 0: limits.maxConnectionsPerListener",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};

static const struct conf_section listener_section = {
    listener_keys, sizeof(struct bootstrap_listener),
    OFF(struct bootstrap_listener, mark)};

static const struct conf_key admin_keys[] = {
    {"address", CONF_ADDR, OFF(struct bootstrap_admin, address), 0, 0,
     "127.0.0.1:15000", "admin API address (keep it on loopback)", NULL, NULL,
     NULL, NULL},
    {"allowedHosts", CONF_STR_LIST, OFF(struct bootstrap_admin, allowed_hosts),
     0, 64, NULL,
     "Host header values (name or IP, with or without :port) the admin API "
     "answers besides loopback ones and its own address; others are 403 "
     "(DNS rebinding)",
     NULL, NULL, NULL, NULL},
    {"allowedOrigins", CONF_STR_LIST,
     OFF(struct bootstrap_admin, allowed_origins), 0, 64, NULL,
     "Origin values (scheme://host[:port]) allowed on POST, PUT and DELETE; "
     "a state-changing request with any other Origin is 403 (cross-site "
     "requests from browsers)",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section admin_section = {admin_keys, 0, SIZE_MAX};

static const struct conf_key metrics_keys[] = {
    {"enabled", CONF_BOOL, OFF(struct bootstrap_metrics, enabled), 0, 0, "true",
     "record Istio's standard metrics (istio_requests_total, ...) on "
     "/stats/prometheus; read at start",
     NULL, NULL, NULL, NULL},
    {"address", CONF_ADDR, OFF(struct bootstrap_metrics, address), 0, 0, NULL,
     "a port that serves only GET /stats/prometheus, as Envoy's 15090 "
     "(e.g. 0.0.0.0:15090 in a pod; default none: scrape the admin API); "
     "no Host check, nothing else is served there; read at start",
     NULL, NULL, NULL, NULL},
    {"maxSeries", CONF_INT, OFF(struct bootstrap_metrics, max_series), 1,
     1000000, "2000",
     "label sets of istio_* metrics each worker keeps; a request or "
     "connection with a new label set past it is not recorded and counts "
     "in strait_istio_series_overflow_total; read at start",
     NULL, NULL, NULL, NULL},
    {"extraLabels", CONF_STR_MAP, OFF(struct bootstrap_metrics, extra_labels),
     0, 16, NULL,
     "labels added with these fixed values to every istio_* series (at "
     "most 16; names [a-zA-Z_][a-zA-Z0-9_]*, not one of Istio's)",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};

static const struct conf_section metrics_section = {metrics_keys, 0, SIZE_MAX};

static const struct conf_key readiness_keys[] = {
    {"address", CONF_ADDR, OFF(struct bootstrap_readiness, address), 0, 0, NULL,
     "a port that serves only GET /healthz/ready (200 LIVE, 503 DRAINING), "
     "as Istio's 15021 (e.g. 0.0.0.0:15021 in a pod; default none: probe "
     "the admin API); no Host check; read at start",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};

static const struct conf_section readiness_section = {readiness_keys, 0,
                                                      SIZE_MAX};

static const struct conf_key log_keys[] = {
    {"level", CONF_ENUM, OFF(struct bootstrap_log, level), 0, 0, "info",
     "debug, info, warn or error", log_levels, NULL, NULL, NULL},
    {"format", CONF_ENUM, OFF(struct bootstrap_log, format), 0, 0, "text",
     "text or json", log_formats, NULL, NULL, NULL},
    {"accessLog", CONF_BOOL, OFF(struct bootstrap_log, access_log), 0, 0,
     "true", "one line per finished session", NULL, NULL, NULL, NULL},
    {"accessLogEncoding", CONF_ENUM,
     OFF(struct bootstrap_log, access_log_encoding), 0, 0, "STRAIT",
     "STRAIT: strait's key=value line (text or JSON as log.format); TEXT or "
     "JSON: Envoy format strings, as Istio's meshConfig.accessLogEncoding",
     alog_encodings, NULL, NULL, NULL},
    {"accessLogFormat", CONF_STR, OFF(struct bootstrap_log, access_log_format),
     0, 0, "",
     "with TEXT, an Envoy format string (%REQ(X)%, %RESPONSE_CODE%, ...); "
     "with JSON, a JSON object of keys to format strings; \"\": Istio's "
     "default format for the encoding",
     NULL, NULL, NULL, NULL},
    {"accessLogFile", CONF_STR, OFF(struct bootstrap_log, access_log_file), 0,
     0, "",
     "file the access log is appended to, reopened on SIGUSR1 (logrotate); "
     "\"\": stderr; restart to change",
     NULL, NULL, NULL, NULL},
    {"accessLogBuffer", CONF_SIZE, OFF(struct bootstrap_log, access_log_buffer),
     16384, INT64_C(1) << 30, "1MiB",
     "access-log bytes waiting for the writer thread, at most; lines past it "
     "are dropped and counted (access_log.dropped), never waited for; "
     "restart to change",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section log_section = {
    log_keys, 0, OFF(struct bootstrap_log, mark)};

static const struct conf_key etcd_keys[] = {
    {"endpoints", CONF_STR_LIST, OFF(struct bootstrap_etcd, endpoints), 0, 64,
     NULL,
     "etcd members' client URLs, http://HOST:PORT or https://HOST:PORT; "
     "none: no etcd. On failure the next one is tried",
     NULL, NULL, NULL, NULL},
    {"prefix", CONF_STR, OFF(struct bootstrap_etcd, prefix), 0, 0, "/strait",
     "keys PREFIX/KIND/NAMESPACE/NAME hold one resource each (YAML or JSON); "
     "one watch on the prefix for the life of the process",
     NULL, NULL, NULL, NULL},
    {"caFile", CONF_STR, OFF(struct bootstrap_etcd, ca_file), 0, 0, "",
     "https endpoints: CA bundle the members are verified with; \"\": the "
     "system bundle",
     NULL, NULL, NULL, NULL},
    {"certFile", CONF_STR, OFF(struct bootstrap_etcd, cert_file), 0, 0, "",
     "https endpoints: client certificate (PEM chain) shown to etcd", NULL,
     NULL, NULL, NULL},
    {"keyFile", CONF_STR, OFF(struct bootstrap_etcd, key_file), 0, 0, "",
     "the client certificate's key", NULL, NULL, NULL, NULL},
    {"username", CONF_STR, OFF(struct bootstrap_etcd, username), 0, 0, "",
     "etcd user (auth enabled); \"\": none", NULL, NULL, NULL, NULL},
    {"password", CONF_STR, OFF(struct bootstrap_etcd, password), 0, 0, "",
     "the etcd user's password; never shown in /config_dump", NULL, NULL, NULL,
     conf_secret_json},
    {"dialTimeout", CONF_DURATION, OFF(struct bootstrap_etcd, dial_timeout_ms),
     100, 60000, "5s",
     "connecting to a member up to its answer's head (a watch has no "
     "deadline after that)",
     NULL, NULL, NULL, NULL},
    {"requestTimeout", CONF_DURATION,
     OFF(struct bootstrap_etcd, request_timeout_ms), 100, 600000, "30s",
     "a whole range, txn or authenticate answer", NULL, NULL, NULL, NULL},
    {"backoff", CONF_DURATION, OFF(struct bootstrap_etcd, backoff_ms), 10,
     60000, "500ms",
     "first reconnect delay when no member answers; each failure doubles "
     "it up to backoffMax; every delay is drawn at random in its upper half "
     "(the first in [0, backoff]) so a fleet does not reconnect at once",
     NULL, NULL, NULL, NULL},
    {"backoffMax", CONF_DURATION, OFF(struct bootstrap_etcd, backoff_max_ms),
     10, 3600 * 1000, "30s", "the cap of the reconnect delay", NULL, NULL, NULL,
     NULL},
    {"maxResponseBytes", CONF_SIZE,
     OFF(struct bootstrap_etcd, max_response_bytes), 4096, INT64_C(1) << 32,
     "64MiB",
     "the largest range page or watch message taken; a larger watch message "
     "is skipped (logged, counted, shown on /healthz/ready) and the prefix "
     "read again by pages at the newest revision; a page too large is asked "
     "again with half the keys, and a key whose value alone is larger is "
     "left out by name (the value held before stays)",
     NULL, NULL, NULL, NULL},
    {"pageSize", CONF_INT, OFF(struct bootstrap_etcd, page_size), 1, 100000,
     "1000",
     "keys per range request when the prefix is read (at start, after a "
     "compaction or a skipped watch message); every page is read at the "
     "revision of the first",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section etcd_section = {etcd_keys, 0, SIZE_MAX};

static const char *const tracing_compressions[] = {"none", "gzip", NULL};

static const struct conf_key tracing_keys[] = {
    {"endpoint", CONF_STR, OFF(struct bootstrap_tracing, endpoint), 0, 0, "",
     "OTLP/HTTP traces endpoint, http://HOST:PORT[/PATH] (path default "
     "/v1/traces); \"\": no tracing (traceparent passes untouched); "
     "restart to change",
     NULL, NULL, NULL, NULL},
    {"sampling", CONF_DOUBLE, OFF(struct bootstrap_tracing, sampling), 0, 100,
     "1",
     "percent of requests traced when the caller did not decide (a "
     "traceparent's or B3's sampled flag is honoured), as Istio's sampling",
     NULL, NULL, NULL, NULL},
    {"serviceName", CONF_STR, OFF(struct bootstrap_tracing, service_name), 0, 0,
     "", "service.name of the spans; \"\": NODE.NAMESPACE", NULL, NULL, NULL,
     NULL},
    {"maxQueueSize", CONF_INT, OFF(struct bootstrap_tracing, max_queue), 1,
     1000000, "2048",
     "spans waiting for export, at most; past it spans are dropped and "
     "counted (tracing.spans_dropped); restart to change",
     NULL, NULL, NULL, NULL},
    {"maxBatchSize", CONF_INT, OFF(struct bootstrap_tracing, max_batch), 1,
     100000, "512", "spans per export request, at most; restart to change",
     NULL, NULL, NULL, NULL},
    {"flushInterval", CONF_DURATION,
     OFF(struct bootstrap_tracing, flush_interval_ms), 10, 3600 * 1000, "5s",
     "how often waiting spans are exported; restart to change", NULL, NULL,
     NULL, NULL},
    {"exportTimeout", CONF_DURATION,
     OFF(struct bootstrap_tracing, export_timeout_ms), 100, 600 * 1000, "10s",
     "one export request, connect to answer; restart to change", NULL, NULL,
     NULL, NULL},
    {"maxRetries", CONF_INT, OFF(struct bootstrap_tracing, max_retries), 0, 10,
     "3",
     "retries of a batch the collector answered 429, 502, 503 or 504 "
     "(after its Retry-After, else 1s, 2s, 4s...), then its spans are "
     "dropped; restart to change",
     NULL, NULL, NULL, NULL},
    {"compression", CONF_ENUM, OFF(struct bootstrap_tracing, compression), 0, 0,
     "none",
     "none or gzip (Content-Encoding: gzip) for export bodies; restart to "
     "change",
     tracing_compressions, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section tracing_section = {
    tracing_keys, 0, OFF(struct bootstrap_tracing, mark)};

static const struct conf_key source_keys[] = {
    {"dir", CONF_STR, OFF(struct bootstrap_source, dir), 0, 0, "",
     "directory of Istio resources (YAML/JSON), watched for changes; \"\" "
     "for none",
     NULL, NULL, NULL, NULL},
    {"debounce", CONF_DURATION, OFF(struct bootstrap_source, debounce_ms), 1,
     60000, "100ms",
     "quiet time after a change in dir before it is reloaded; etcd, "
     "Kubernetes and MeshLink changes are gathered this long before one "
     "rebuild takes them all",
     NULL, NULL, NULL, NULL},
    {"maxRebuildsPerSecond", CONF_INT,
     OFF(struct bootstrap_source, max_rebuilds_per_s), 1, 1000, "4",
     "rebuilds from etcd, Kubernetes or MeshLink changes, at most, per "
     "second; changes that come meanwhile wait and go together into the "
     "next one, so a flood of writes costs a bounded number of rebuilds",
     NULL, NULL, NULL, NULL},
    {"defaultNamespace", CONF_STR, OFF(struct bootstrap_source, default_ns), 0,
     0, "default",
     "namespace of resources in dir without metadata.namespace (kubectl "
     "apply -n); a subdirectory's resources default to its name; restart "
     "to change",
     NULL, NULL, res_valid_label, NULL},
    {"etcd", CONF_SECTION, OFF(struct bootstrap_source, etcd), 0, 0, NULL,
     "Istio resources in etcd v3 (fleet configuration); a resource in etcd "
     "replaces one of the same kind, namespace and name in dir",
     NULL, &etcd_section, NULL, NULL},
    {"kubernetes", CONF_SECTION, OFF(struct bootstrap_source, kubernetes), 0, 0,
     NULL,
     "Istio resources, Services, EndpointSlices, Secrets and Namespaces "
     "from the Kubernetes API (list, then one watch per kind and namespace "
     "for the life of the process)",
     NULL, &bootstrap_kube_section, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section source_section = {source_keys, 0, SIZE_MAX};

static const struct conf_key cred_keys[] = {
    {"dir", CONF_STR, OFF(struct bootstrap_credentials, dir), 0, 0, "",
     "directory of credentials: a Gateway's credentialName NAME means "
     "NAME/tls.crt and NAME/tls.key here",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section cred_section = {cred_keys, 0, SIZE_MAX};

static const struct conf_key dns_keys[] = {
    {"nameservers", CONF_ADDR_LIST, OFF(struct bootstrap_dns, nameservers), 0,
     16, NULL,
     "DNS servers (IP:port) for every name strait resolves "
     "(ServiceEntries with resolution DNS, jwksUri hosts, the CA joined); "
     "none: those of dns.resolvConf",
     NULL, NULL, NULL, NULL},
    {"resolvConf", CONF_STR, OFF(struct bootstrap_dns, resolv_conf), 0, 0,
     "/etc/resolv.conf",
     "the resolver configuration read when dns.nameservers is empty; a "
     "missing file, or one naming no nameserver, means 127.0.0.1:53 (as "
     "glibc reads it) with a warning",
     NULL, NULL, NULL, NULL},
    {"minRefresh", CONF_DURATION, OFF(struct bootstrap_dns, min_refresh_ms), 10,
     3600 * 1000, "5s",
     "names are resolved again when their TTL runs out, but never sooner "
     "than this (Envoy's dns_min_refresh_rate); also the retry delay after "
     "a failure",
     NULL, NULL, NULL, NULL},
    {"timeout", CONF_DURATION, OFF(struct bootstrap_dns, timeout_ms), 100,
     60000, "5s", "how long one DNS query may take before it is tried again",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section dns_section = {dns_keys, 0, SIZE_MAX};

/* In the order of enum res_outbound_mode. */
static const char *const outbound_modes[] = {"REGISTRY_ONLY", "ALLOW_ANY",
                                             NULL};

/*
 * MeshConfig's outboundTrafficPolicy, at the top level as MeshConfig's
 * other fields that strait takes (trustDomain) are: the bootstrap has no
 * meshConfig section. The default is REGISTRY_ONLY, not Istio's
 * ALLOW_ANY: Istio's default is for sidecars, which pass through what
 * their own application calls; for a gateway the ServiceEntries are the
 * list of what it may reach, and one that sent to any name written in a
 * route (a typo included) would be an open door out of the network.
 */
static const struct conf_key outbound_keys[] = {
    {"mode", CONF_ENUM, OFF(struct bootstrap_outbound, mode), 0, 0,
     "REGISTRY_ONLY",
     "REGISTRY_ONLY: a route destination whose host no ServiceEntry or "
     "WorkloadEntry declares is an error (BlackHoleCluster: 502, or the "
     "connection closed); ALLOW_ANY: it is sent to that host name, resolved "
     "by DNS",
     outbound_modes, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section outbound_section = {outbound_keys, 0,
                                                     SIZE_MAX};

static const struct conf_key geoip_db_keys[] = {
    {"city", CONF_STR, 0 * sizeof(char *), 0, 0, "",
     "path of the MaxMind GeoIP2/GeoLite2 City database (country, city, "
     "region); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"country", CONF_STR, 1 * sizeof(char *), 0, 0, "",
     "path of the MaxMind Country database (country), used when no city "
     "database gives one; \"\" for none",
     NULL, NULL, NULL, NULL},
    {"asn", CONF_STR, 2 * sizeof(char *), 0, 0, "",
     "path of the MaxMind ASN database (asn, asnOrg); \"\" for none", NULL,
     NULL, NULL, NULL},
    {"isp", CONF_STR, 3 * sizeof(char *), 0, 0, "",
     "path of the MaxMind ISP database (isp; asn and asnOrg when no asn "
     "database is set); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"anon", CONF_STR, 4 * sizeof(char *), 0, 0, "",
     "path of the MaxMind Anonymous-IP database (anon, anonVpn, anonHosting, "
     "anonTor, anonProxy); \"\" for none",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section geoip_db_section = {geoip_db_keys, 0,
                                                     SIZE_MAX};

static const struct conf_key geoip_header_keys[] = {
    {"country", CONF_STR, 0 * sizeof(char *), 0, 0, "",
     "request header that gets the country of the client (one sent by the "
     "client is always replaced or removed); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"city", CONF_STR, 1 * sizeof(char *), 0, 0, "",
     "request header that gets the city of the client (one sent by the "
     "client is always replaced or removed); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"region", CONF_STR, 2 * sizeof(char *), 0, 0, "",
     "request header that gets the region of the client (one sent by the "
     "client is always replaced or removed); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"asn", CONF_STR, 3 * sizeof(char *), 0, 0, "",
     "request header that gets the asn of the client (one sent by the "
     "client is always replaced or removed); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"asnOrg", CONF_STR, 4 * sizeof(char *), 0, 0, "",
     "request header that gets the asnOrg of the client (one sent by the "
     "client is always replaced or removed); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"isp", CONF_STR, 5 * sizeof(char *), 0, 0, "",
     "request header that gets the isp of the client (one sent by the "
     "client is always replaced or removed); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"anon", CONF_STR, 6 * sizeof(char *), 0, 0, "",
     "request header that gets the anon of the client (one sent by the "
     "client is always replaced or removed); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"anonVpn", CONF_STR, 7 * sizeof(char *), 0, 0, "",
     "request header that gets the anonVpn of the client (one sent by the "
     "client is always replaced or removed); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"anonHosting", CONF_STR, 8 * sizeof(char *), 0, 0, "",
     "request header that gets the anonHosting of the client (one sent by the "
     "client is always replaced or removed); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"anonTor", CONF_STR, 9 * sizeof(char *), 0, 0, "",
     "request header that gets the anonTor of the client (one sent by the "
     "client is always replaced or removed); \"\" for none",
     NULL, NULL, NULL, NULL},
    {"anonProxy", CONF_STR, 10 * sizeof(char *), 0, 0, "",
     "request header that gets the anonProxy of the client (one sent by the "
     "client is always replaced or removed); \"\" for none",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section geoip_header_section = {geoip_header_keys, 0,
                                                         SIZE_MAX};

static const struct conf_key geoip_keys[] = {
    {"databases", CONF_SECTION, OFF(struct bootstrap_geoip, db), 0, 0, NULL,
     "MaxMind databases (.mmdb); a file renamed into place is opened and "
     "swapped in, a bad one keeps the database in use",
     NULL, &geoip_db_section, NULL, NULL},
    {"headers", CONF_SECTION, OFF(struct bootstrap_geoip, headers), 0, 0, NULL,
     "request headers set from the client's result on every HTTP listener, "
     "before AuthorizationPolicy and routing (VirtualService header "
     "matches, %REQ()% in access logs)",
     NULL, &geoip_header_section, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section geoip_section = {
    geoip_keys, 0, OFF(struct bootstrap_geoip, mark)};

static const struct conf_key jwt_keys[] = {
    {"jwksRefresh", CONF_DURATION, OFF(struct bootstrap_jwt, jwks_refresh_ms),
     1000, 24 * 3600 * 1000, "5m",
     "how often the JWKS of an http(s) jwksUri is fetched again (Envoy's "
     "cache_duration); a failed fetch keeps the last keys and is retried "
     "sooner",
     NULL, NULL, NULL, NULL},
    {"jwksCaFile", CONF_STR, OFF(struct bootstrap_jwt, jwks_ca_file), 0, 0,
     NULL,
     "CA bundle that https jwksUris are verified with; empty: the "
     "system bundle",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section jwt_section = {jwt_keys, 0, SIZE_MAX};

#ifndef STRAIT_LUA_DIR
#define STRAIT_LUA_DIR "/usr/share/strait/lua"
#endif
static const struct conf_key lua_keys[] = {
    {"path", CONF_STR_LIST, OFF(struct bootstrap_lua, path), 0, 32, NULL,
     "directories a LuaPolicy's source.file is looked for in, in order "
     "(none given: " STRAIT_LUA_DIR ", strait's own lua/ directory as "
     "installed)",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section lua_section = {lua_keys, 0, SIZE_MAX};
static const char *const ca_key_types[] = {"ECDSA", "RSA", NULL};

/* A DNS name for a certificate's SAN: labels of letters, digits and '-'
 * (not at either end), at most 63 bytes each and 253 in all, and a
 * leading "*." wildcard. */
static int dns_name_ok(const char *s)
{
    size_t n = strlen(s), label = 0;

    if (strncmp(s, "*.", 2) == 0) {
        s += 2;
        n -= 2;
    }
    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i <= n; i++) {
        char c = s[i];
        if (c == '.' || c == '\0') {
            if (label == 0 || label > 63 || s[i - 1] == '-')
                return 0;
            label = 0;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                   (c >= '0' && c <= '9') || (c == '-' && label > 0)) {
            label++;
        } else {
            return 0;
        }
    }
    return 1;
}

static const struct conf_key ca_join_keys[] = {
    {"address", CONF_STR, OFF(struct bootstrap_ca_join, address), 0, 0, "",
     "CA to join: https://HOST:PORT (\"\" for none; strait run --join)", NULL,
     NULL, NULL, NULL},
    {"token", CONF_STR, OFF(struct bootstrap_ca_join, token), 0, 0, "",
     "single-use join token from 'strait ca token create' (strait run "
     "--token); not needed once a certificate is stored; never shown in "
     "/config_dump",
     NULL, NULL, NULL, conf_secret_json},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section ca_join_section = {ca_join_keys, 0, SIZE_MAX};

static const struct conf_key ca_istiod_keys[] = {
    {"address", CONF_STR, OFF(struct bootstrap_ca_istiod, address), 0, 0, "",
     "istiod's CA to get this node's certificate from over gRPC: HOST:PORT, "
     "e.g. istiod.istio-system.svc.cluster.local:15012 (\"\" for none)",
     NULL, NULL, NULL, NULL},
    {"rootCert", CONF_STR, OFF(struct bootstrap_ca_istiod, root_cert), 0, 0,
     "/var/run/secrets/istio/root-cert.pem",
     "the mesh roots (the istio-ca-root-cert ConfigMap mounted): istiod's "
     "certificate and the issued chain are verified against them (read at "
     "each request), and ISTIO_MUTUAL servers and upstreams trust every "
     "root of it (watched: a changed file is trusted without a reload)",
     NULL, NULL, NULL, NULL},
    {"token", CONF_STR, OFF(struct bootstrap_ca_istiod, token), 0, 0,
     "/var/run/secrets/tokens/istio-token",
     "the projected service-account token (audience istio-ca) sent as "
     "Bearer; read at each request, as the kubelet rotates it",
     NULL, NULL, NULL, NULL},
    {"clusterID", CONF_STR, OFF(struct bootstrap_ca_istiod, cluster_id), 0, 0,
     "Kubernetes", "sent as the ClusterID header istiod reads (\"\": none)",
     NULL, NULL, NULL, NULL},
    {"serverName", CONF_STR, OFF(struct bootstrap_ca_istiod, server_name), 0, 0,
     "",
     "SNI and the name istiod's certificate is checked for; \"\": the "
     "host of address",
     NULL, NULL, NULL, NULL},
    {"startTimeout", CONF_DURATION,
     OFF(struct bootstrap_ca_istiod, start_timeout_ms), 0, INT64_C(3600) * 1000,
     "30s",
     "how long start waits for istiod while it does not answer (0s: not "
     "at all); a refusal stops the start at once",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section ca_istiod_section = {ca_istiod_keys, 0,
                                                      SIZE_MAX};

static const struct conf_key ca_sa_token_keys[] = {
    {"issuer", CONF_STR, OFF(struct bootstrap_ca_sa_tokens, issuer), 0, 0, "",
     "iss of the service-account tokens the CA's gRPC API accepts (e.g. "
     "https://kubernetes.default.svc.cluster.local)",
     NULL, NULL, NULL, NULL},
    {"jwksFile", CONF_STR, OFF(struct bootstrap_ca_sa_tokens, jwks_file), 0, 0,
     "",
     "the issuer's public keys (JWKS, e.g. the API server's "
     "/openid/v1/jwks); read at start; \"\": tokens are not accepted",
     NULL, NULL, NULL, NULL},
    {"audience", CONF_STR, OFF(struct bootstrap_ca_sa_tokens, audience), 0, 0,
     "istio-ca", "the audience a token must name", NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section ca_sa_token_section = {ca_sa_token_keys, 0,
                                                        SIZE_MAX};

static const struct conf_key ca_keys[] = {
    {"enabled", CONF_BOOL, OFF(struct bootstrap_ca, enabled), 0, 0, "false",
     "run the embedded CA: issue this node's certificate and serve joining "
     "hosts",
     NULL, NULL, NULL, NULL},
    {"dir", CONF_STR, OFF(struct bootstrap_ca, dir), 0, 0, "/var/lib/strait/ca",
     "CA state (root, key, join tokens) and this node's identity/", NULL, NULL,
     NULL, NULL},
    {"cacerts", CONF_STR, OFF(struct bootstrap_ca, cacerts), 0, 0, "",
     "Istio plug-in CA directory (ca-cert.pem, ca-key.pem, root-cert.pem, "
     "cert-chain.pem): run as an intermediate; \"\" for a self-signed root",
     NULL, NULL, NULL, NULL},
    {"keyType", CONF_ENUM, OFF(struct bootstrap_ca, key_type), 0, 0, "ECDSA",
     "keys made here: ECDSA (P-256) or RSA (2048 bits)", ca_key_types, NULL,
     NULL, NULL},
    {"address", CONF_ADDR, OFF(struct bootstrap_ca, address), 0, 0,
     "0.0.0.0:15012", "address of the CA API (TLS), like istiod's", NULL, NULL,
     NULL, NULL},
    {"rootCertTTL", CONF_DURATION, OFF(struct bootstrap_ca, root_cert_ttl_ms),
     3600 * 1000, INT64_C(876000) * 3600 * 1000, "87600h",
     "validity of a new self-signed root", NULL, NULL, NULL, NULL},
    {"certTTL", CONF_DURATION, OFF(struct bootstrap_ca, cert_ttl_ms), 1000,
     INT64_C(8760) * 3600 * 1000, "24h",
     "validity of this node's certificate (renewed at half life) and the "
     "CA's default",
     NULL, NULL, NULL, NULL},
    {"maxCertTTL", CONF_DURATION, OFF(struct bootstrap_ca, max_cert_ttl_ms),
     1000, INT64_C(8760) * 3600 * 1000, "2160h",
     "longest validity the CA grants; longer requests are capped", NULL, NULL,
     NULL, NULL},
    {"join", CONF_SECTION, OFF(struct bootstrap_ca, join), 0, 0, NULL,
     "get this node's certificate from another strait's CA", NULL,
     &ca_join_section, NULL, NULL},
    {"serverNames", CONF_STR_LIST, OFF(struct bootstrap_ca, server_names), 0,
     16, NULL,
     "DNS names in the CA server's certificate besides its SPIFFE ID, which "
     "gRPC clients (Istio's agents) check against the name they dial (none "
     "given: istiod.istio-system.svc)",
     NULL, NULL, NULL, NULL},
    {"istiod", CONF_SECTION, OFF(struct bootstrap_ca, istiod), 0, 0, NULL,
     "get this node's certificate from istiod (gRPC CreateCertificate)", NULL,
     &ca_istiod_section, NULL, NULL},
    {"serviceAccountTokens", CONF_SECTION, OFF(struct bootstrap_ca, sa_tokens),
     0, 0, NULL,
     "Kubernetes service-account tokens the CA's gRPC API takes as proof of "
     "identity",
     NULL, &ca_sa_token_section, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section ca_section = {ca_keys, 0, SIZE_MAX};

static const struct conf_key links_keys[] = {
    {"address", CONF_ADDR, OFF(struct bootstrap_links, address), 0, 0, NULL,
     "the catalog API other sites' MeshLinks stream this site's exported "
     "services from (TLS with this node's SPIFFE certificate; default "
     "none); read at start",
     NULL, NULL, NULL, NULL},
    {"advertise", CONF_STR, OFF(struct bootstrap_links, advertise), 0, 0, "",
     "IP:port `strait link create` prints as the catalog address (\"\": "
     "links.address)",
     NULL, NULL, NULL, NULL},
    {"gateway", CONF_STR, OFF(struct bootstrap_links, gateway), 0, 0, "",
     "HOST:PORT of this site's east-west (AUTO_PASSTHROUGH) gateway as other "
     "sites reach it, printed by `strait link create`",
     NULL, NULL, NULL, NULL},
    {"handshakeTimeout", CONF_DURATION,
     OFF(struct bootstrap_links, handshake_timeout_ms), 100, 60 * 1000, "5s",
     "time a client of the catalog API has from accept to finish its TLS "
     "handshake and send its whole request; then it is closed; read at "
     "start",
     NULL, NULL, NULL, NULL},
    {"maxConnectionsPerSource", CONF_INT,
     OFF(struct bootstrap_links, max_per_source), 1, 1024, "16",
     "connections one source address may hold to the catalog API (more are "
     "closed at accept), so that one client cannot take the slots the "
     "linked sites need; read at start",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section links_section = {links_keys, 0, SIZE_MAX};

static const char *const limit_actions[] = {"pause", "close", NULL};

static const struct conf_key port_limit_keys[] = {
    {"port", CONF_INT, OFF(struct bootstrap_port_limit, port), 1, 65535, NULL,
     "a Gateway server port (required)", NULL, NULL, NULL, NULL},
    {"maxConnections", CONF_INT,
     OFF(struct bootstrap_port_limit, max_connections), 0, 10000000, "0",
     "connections the Gateway listener on this port holds open at most; 0: "
     "none",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section port_limit_section = {
    port_limit_keys, sizeof(struct bootstrap_port_limit),
    OFF(struct bootstrap_port_limit, mark)};

static const struct conf_key limits_keys[] = {
    {"maxConnections", CONF_INT, OFF(struct bootstrap_limits, max_connections),
     0, 100000000, "0",
     "downstream connections the whole process holds open at most, every "
     "listener and worker together (HAProxy's global maxconn); 0: none",
     NULL, NULL, NULL, NULL},
    {"maxConnectionsPerListener", CONF_INT,
     OFF(struct bootstrap_limits, max_connections_per_listener), 0, 10000000,
     "0",
     "connections each listener (bootstrap or Gateway) holds open at most, "
     "unless its own maxConnections or limits.ports says otherwise; 0: none",
     NULL, NULL, NULL, NULL},
    {"action", CONF_ENUM, OFF(struct bootstrap_limits, action), 0, 0, "pause",
     "over a limit: pause (stop accepting until a connection closes; the "
     "listen backlog holds new clients) or close (accept and close at once, "
     "counted in downstream_cx_overflow)",
     limit_actions, NULL, NULL, NULL},
    {"ports", CONF_LIST, OFF(struct bootstrap_limits, ports), 0, 4096, NULL,
     "per-port limits of Gateway listeners", NULL, &port_limit_section, NULL,
     NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section limits_section = {limits_keys, 0, SIZE_MAX};

static const struct conf_key overload_keys[] = {
    {"memoryLimit", CONF_SIZE, OFF(struct bootstrap_overload, memory_limit), 0,
     INT64_C(1) << 50, "0",
     "resident memory (RSS) the actions below are measured against; 0: no "
     "memory actions",
     NULL, NULL, NULL, NULL},
    {"checkInterval", CONF_DURATION,
     OFF(struct bootstrap_overload, check_interval_ms), 10, 60000, "250ms",
     "how often resident memory is measured (/proc/self/statm)", NULL, NULL,
     NULL, NULL},
    {"stopAcceptingConnections", CONF_INT,
     OFF(struct bootstrap_overload, stop_accepting_connections), 1, 100, "90",
     "percent of memoryLimit at which listeners stop accepting connections",
     NULL, NULL, NULL, NULL},
    {"disableKeepalive", CONF_INT,
     OFF(struct bootstrap_overload, disable_keepalive), 1, 100, "95",
     "percent of memoryLimit at which connections close after their current "
     "request (HTTP/1 Connection: close, HTTP/2 GOAWAY)",
     NULL, NULL, NULL, NULL},
    {"stopAcceptingRequests", CONF_INT,
     OFF(struct bootstrap_overload, stop_accepting_requests), 1, 100, "98",
     "percent of memoryLimit at which new requests are answered 503 with "
     "response flag OM",
     NULL, NULL, NULL, NULL},
    {"hysteresis", CONF_INT, OFF(struct bootstrap_overload, hysteresis), 0, 50,
     "5",
     "percent points below its threshold memory must fall before an action "
     "ends",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section overload_section = {overload_keys, 0,
                                                     SIZE_MAX};
static const struct conf_key upgrade_keys[] = {
    {"binary", CONF_STR, OFF(struct bootstrap_upgrade, binary), 0, 0, "",
     "executable a binary upgrade starts (absolute path); \"\": the one "
     "strait was started from, as it is on disk now",
     NULL, NULL, NULL, NULL},
    {"timeout", CONF_DURATION, OFF(struct bootstrap_upgrade, timeout_ms), 100,
     3600 * 1000, "30s",
     "how long the new process may take to start, take the sockets and "
     "serve; past it, it is killed and this one keeps serving",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section upgrade_section = {upgrade_keys, 0, SIZE_MAX};

static const struct conf_key hbone_keys[] = {
    {"maxTunnelsPerConnection", CONF_INT,
     OFF(struct bootstrap_hbone, max_tunnels), 1, 10000, "100",
     "CONNECT tunnels one HBONE connection carries at once (HTTP/2 "
     "SETTINGS_MAX_CONCURRENT_STREAMS); past it a stream is refused with "
     "RST_STREAM REFUSED_STREAM",
     NULL, NULL, NULL, NULL},
    {"tunnelBuffer", CONF_SIZE, OFF(struct bootstrap_hbone, tunnel_buffer),
     16384, INT64_C(16) << 20, "256KiB",
     "bytes a tunnel holds per direction: the HTTP/2 stream window a client "
     "may fill before its bytes reach the upstream, and what is read from "
     "the upstream before the client takes it",
     NULL, NULL, NULL, NULL},
    {"tunnelMemory", CONF_SIZE, OFF(struct bootstrap_hbone, tunnel_memory),
     INT64_C(1) << 20, INT64_C(1) << 40, "256MiB",
     "buffer bytes the HBONE tunnels of the whole process may reserve "
     "together (each reserves two tunnelBuffers when it opens); past it, "
     "and while any overload memory action is on, a CONNECT is answered "
     "503",
     NULL, NULL, NULL, NULL},
    {"connectTimeout", CONF_DURATION,
     OFF(struct bootstrap_hbone, connect_timeout_ms), 1, 3600 * 1000, "10s",
     "how long the upstream TCP connect of a tunnel may take before the "
     "CONNECT is answered 503",
     NULL, NULL, NULL, NULL},
    {"idleTimeout", CONF_DURATION, OFF(struct bootstrap_hbone, idle_timeout_ms),
     1, INT64_C(7) * 24 * 3600 * 1000, "1h",
     "a tunnel with no byte either way this long is reset (RST_STREAM "
     "CANCEL); a connection with no tunnel this long is closed (GOAWAY)",
     NULL, NULL, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const struct conf_section hbone_section = {hbone_keys, 0, SIZE_MAX};

static const struct conf_key bootstrap_keys[] = {
    {"node", CONF_SECTION, OFF(struct bootstrap, node), 0, 0, NULL,
     "this gateway's identity", NULL, &node_section, NULL, NULL},
    {"meshNetworks", CONF_SECTION, OFF(struct bootstrap, mesh_networks), 0, 0,
     NULL,
     "Istio's MeshNetworks: the networks endpoints are on and the gateways "
     "that reach them (east-west)",
     NULL, &bootstrap_mesh_networks_section, NULL, NULL},
    {"trustDomain", CONF_STR, OFF(struct bootstrap, trust_domain), 0, 0,
     "cluster.local", "SPIFFE trust domain", NULL, NULL, NULL, NULL},
    {"workers", CONF_CUSTOM, OFF(struct bootstrap, workers), 0, 0, "auto",
     "worker threads: auto (one per core) or 1-256", NULL, NULL, parse_workers,
     workers_json},
    {"admin", CONF_SECTION, OFF(struct bootstrap, admin), 0, 0, NULL,
     "admin API", NULL, &admin_section, NULL, NULL},
    {"metrics", CONF_SECTION, OFF(struct bootstrap, metrics), 0, 0, NULL,
     "Istio's standard metrics and their scrape port", NULL, &metrics_section,
     NULL, NULL},
    {"readiness", CONF_SECTION, OFF(struct bootstrap, readiness), 0, 0, NULL,
     "the readiness probe port", NULL, &readiness_section, NULL, NULL},
    {"log", CONF_SECTION, OFF(struct bootstrap, log), 0, 0, NULL, "logging",
     NULL, &log_section, NULL, NULL},
    {"tracing", CONF_SECTION, OFF(struct bootstrap, tracing), 0, 0, NULL,
     "spans of requests, exported over OTLP/HTTP", NULL, &tracing_section, NULL,
     NULL},
    {"drainTimeout", CONF_DURATION, OFF(struct bootstrap, drain_timeout_ms), 0,
     3600 * 1000, "30s",
     "on SIGTERM, how long open connections may finish before exit", NULL, NULL,
     NULL, NULL},
    {"drainWindow", CONF_DURATION, OFF(struct bootstrap, drain_window_ms), 0,
     3600 * 1000, "0s",
     "on SIGTERM, keep accepting this long (readiness says DRAINING), "
     "answering with Connection: close and HTTP/2 GOAWAY, before the "
     "listeners close; 0: close them at once. Counts within drainTimeout",
     NULL, NULL, NULL, NULL},
    {"config", CONF_SECTION, OFF(struct bootstrap, config), 0, 0, NULL,
     "Istio resources", NULL, &source_section, NULL, NULL},
    {"credentials", CONF_SECTION, OFF(struct bootstrap, credentials), 0, 0,
     NULL, "certificates named by credentialName", NULL, &cred_section, NULL,
     NULL},
    {"dns", CONF_SECTION, OFF(struct bootstrap, dns), 0, 0, NULL,
     "resolving names: ServiceEntries with resolution DNS, jwksUri hosts, "
     "the CA joined",
     NULL, &dns_section, NULL, NULL},
    {"outboundTrafficPolicy", CONF_SECTION, OFF(struct bootstrap, outbound), 0,
     0, NULL,
     "Istio's MeshConfig outboundTrafficPolicy: routes to hosts not in the "
     "registry",
     NULL, &outbound_section, NULL, NULL},
    {"jwt", CONF_SECTION, OFF(struct bootstrap, jwt), 0, 0, NULL,
     "RequestAuthentication: fetching jwksUri key sets", NULL, &jwt_section,
     NULL, NULL},
    {"lua", CONF_SECTION, OFF(struct bootstrap, lua), 0, 0, NULL,
     "LuaPolicy: the search path of script files", NULL, &lua_section, NULL,
     NULL},
    {"http", CONF_SECTION, OFF(struct bootstrap, http), 0, 0, NULL,
     "HTTP settings of every Gateway listener (bootstrap listeners have "
     "their own http block)",
     NULL, &bootstrap_gateway_http_section, NULL, NULL},
    {"gatewayTopology", CONF_SECTION, OFF(struct bootstrap, topology), 0, 0,
     NULL,
     "Istio's gatewayTopology for every Gateway listener: trusted proxies "
     "(X-Forwarded-For), PROXY protocol, X-Forwarded-Client-Cert",
     NULL, &bootstrap_topology_section, NULL, NULL},
    {"ca", CONF_SECTION, OFF(struct bootstrap, ca), 0, 0, NULL,
     "embedded certificate authority and this node's SPIFFE certificate", NULL,
     &ca_section, NULL, NULL},
    {"links", CONF_SECTION, OFF(struct bootstrap, links), 0, 0, NULL,
     "site links: this site's catalog API for other sites' MeshLinks", NULL,
     &links_section, NULL, NULL},
    {"limits", CONF_SECTION, OFF(struct bootstrap, limits), 0, 0, NULL,
     "connection limits", NULL, &limits_section, NULL, NULL},
    {"overload", CONF_SECTION, OFF(struct bootstrap, overload), 0, 0, NULL,
     "memory limit and what happens as it nears", NULL, &overload_section, NULL,
     NULL},
    {"upgrade", CONF_SECTION, OFF(struct bootstrap, upgrade), 0, 0, NULL,
     "binary upgrade: a new executable takes the listening sockets over "
     "and this process drains",
     NULL, &upgrade_section, NULL, NULL},
    {"geoip", CONF_SECTION, OFF(struct bootstrap, geoip), 0, 0, NULL,
     "GeoIP from MaxMind databases: the client's country, city, ASN, ISP "
     "and anonymity for AuthorizationPolicy (source.geo.*), request "
     "headers and /stats",
     NULL, &geoip_section, NULL, NULL},
    {"hbone", CONF_SECTION, OFF(struct bootstrap, hbone), 0, 0, NULL,
     "HBONE servers (Gateway servers of protocol HBONE, Istio ambient's "
     "HTTP/2 CONNECT on 15008): limits of connections and tunnels",
     NULL, &hbone_section, NULL, NULL},
    {"listeners", CONF_LIST, OFF(struct bootstrap, listeners), 0, 4096, NULL,
     "TCP and HTTP listeners", NULL, &listener_section, NULL, NULL},
    {"clusters", CONF_LIST, OFF(struct bootstrap, clusters), 0, 100000, NULL,
     "upstream clusters that HTTP routes send to", NULL,
     &bootstrap_cluster_section, NULL, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL},
};

const struct conf_section bootstrap_section = {bootstrap_keys, 0, SIZE_MAX};

/* Listener names become Prometheus label values and log fields: keep them
 * to a safe alphabet. */
static int name_ok(const char *s)
{
    if (s == NULL || *s == '\0' || strlen(s) > 63)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
            return 0;
    return 1;
}

/* log.accessLogFormat compiles for its encoding (the same compiler the
 * listeners use, so `strait check` refuses what a reload would). */
static int alog_validate(const struct bootstrap_log *lg, const char *file,
                         struct buf *errs)
{
    struct afmt *f;
    char *err = NULL;

    if (lg->access_log_encoding == BOOTSTRAP_ALOG_STRAIT) {
        if (lg->access_log_format[0] == '\0')
            return 0;
        conf_error(errs, file, lg->mark.line, lg->mark.col,
                   "log.accessLogFormat",
                   "a format needs accessLogEncoding TEXT or JSON (STRAIT "
                   "writes strait's own line)");
        return 1;
    }
    f = bootstrap_alog_compile(lg, &err);
    if (f != NULL) {
        afmt_free(f);
        return 0;
    }
    conf_error(errs, file, lg->mark.line, lg->mark.col, "log.accessLogFormat",
               "%s", err ? err : "out of memory");
    free(err);
    return 1;
}

int bootstrap_parse_url(const char *s, struct bootstrap_url *u,
                        const char **why)
{
    const char *host, *end, *colon;
    size_t hn;
    long port = 0;

    memset(u, 0, sizeof(*u));
    if (strncmp(s, "https://", 8) == 0) {
        *why = "https:// is not supported: use http:// (a collector on "
               "loopback or a sidecar)";
        return -1;
    }
    if (strncmp(s, "http://", 7) != 0) {
        *why = "expected http://HOST:PORT[/PATH]";
        return -1;
    }
    host = s + 7;
    end = strchr(host, '/');
    if (end == NULL)
        end = host + strlen(host);
    colon = memrchr(host, ':', (size_t)(end - host));
    if (host[0] == '[') {
        const char *rb = memchr(host, ']', (size_t)(end - host));
        if (rb == NULL || (rb + 1 != end && rb[1] != ':')) {
            *why = "bad [IPv6] address";
            return -1;
        }
        colon = rb + 1 != end ? rb + 1 : NULL;
    }
    hn = (size_t)((colon ? colon : end) - host);
    if (hn == 0 || hn >= sizeof(u->host)) {
        *why = "expected http://HOST:PORT[/PATH]";
        return -1;
    }
    if (colon != NULL) {
        for (const char *p = colon + 1; p < end; p++) {
            if (*p < '0' || *p > '9' || port > 65535) {
                *why = "bad port";
                return -1;
            }
            port = port * 10 + (*p - '0');
        }
        if (port < 1 || port > 65535) {
            *why = "bad port";
            return -1;
        }
    } else {
        port = 80;
    }
    if (host[0] == '[') {
        memcpy(u->host, host + 1, hn - 2);
        u->host[hn - 2] = '\0';
    } else {
        memcpy(u->host, host, hn);
        u->host[hn] = '\0';
    }
    u->port = (int)port;
    snprintf(u->path, sizeof(u->path), "%s", *end ? end : "/v1/traces");
    if (strlen(*end ? end : "") >= sizeof(u->path)) {
        *why = "path too long";
        return -1;
    }
    return 0;
}

struct afmt *bootstrap_alog_compile(const struct bootstrap_log *lg, char **err)
{
    const char *s = lg->access_log_format;
    int json = lg->access_log_encoding == BOOTSTRAP_ALOG_JSON;

    if (lg->access_log_encoding == BOOTSTRAP_ALOG_STRAIT)
        return NULL;
    if (s[0] == '\0')
        return json ? afmt_istio_json(err) : afmt_istio_text(err);
    return afmt_compile(s, strlen(s), json, err);
}

#define METRICS_MAX_EXTRA_LABELS 16

/* Istio's own label names: an extra label may not shadow one. */
static const char *const istio_labels[] = {"reporter",
                                           "source_workload",
                                           "source_canonical_service",
                                           "source_canonical_revision",
                                           "source_workload_namespace",
                                           "source_principal",
                                           "source_app",
                                           "source_version",
                                           "source_cluster",
                                           "destination_workload",
                                           "destination_workload_namespace",
                                           "destination_principal",
                                           "destination_app",
                                           "destination_version",
                                           "destination_service",
                                           "destination_service_name",
                                           "destination_service_namespace",
                                           "destination_canonical_service",
                                           "destination_canonical_revision",
                                           "destination_cluster",
                                           "request_protocol",
                                           "response_code",
                                           "grpc_response_status",
                                           "response_flags",
                                           "connection_security_policy",
                                           "le",
                                           NULL};

static int label_name_ok(const char *s)
{
    if (s == NULL ||
        !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_'))
            return 0;
    return 1;
}

/* metrics.extraLabels names and the scrape and probe ports. */
static int metrics_validate(const struct bootstrap *bs, const char *file,
                            struct buf *errs)
{
    const struct addr *ports[2] = {&bs->metrics.address,
                                   &bs->readiness.address};
    const char *names[2] = {"metrics.address", "readiness.address"};
    char a1[ADDR_STRLEN];
    int nerr = 0;

    /* Each label is on every series: keep the exposition readable. */
    if (bs->metrics.extra_labels.n > METRICS_MAX_EXTRA_LABELS) {
        conf_error(errs, file, 0, 0, "metrics.extraLabels",
                   "%zu labels; at most %d", bs->metrics.extra_labels.n,
                   METRICS_MAX_EXTRA_LABELS);
        nerr++;
    }
    for (size_t i = 0; i < bs->metrics.extra_labels.n; i++) {
        const char *k = bs->metrics.extra_labels.v[i].key;
        int clash = 0;
        for (size_t j = 0; istio_labels[j] != NULL; j++)
            clash |= strcmp(k, istio_labels[j]) == 0;
        if (!label_name_ok(k) || clash || strncmp(k, "__", 2) == 0) {
            conf_error(errs, file, 0, 0, "metrics.extraLabels",
                       "label name '%s' must match [a-zA-Z_][a-zA-Z0-9_]*, "
                       "not start with __ and not be one of Istio's",
                       k);
            nerr++;
        }
    }
    for (int i = 0; i < 2; i++) {
        if (ports[i]->len == 0)
            continue;
        if (addr_family(ports[i]) == AF_UNIX) {
            conf_error(errs, file, 0, 0, names[i], "TCP addresses only");
            nerr++;
        }
        if (addr_equal(ports[i], &bs->admin.address) ||
            (i == 1 && addr_equal(ports[1], ports[0]))) {
            conf_error(errs, file, 0, 0, names[i],
                       "address %s is already in use (admin API or "
                       "metrics.address)",
                       addr_format(ports[i], a1, sizeof(a1)));
            nerr++;
        }
        for (size_t j = 0; j < bs->listeners.n; j++)
            if (addr_equal(ports[i], &bootstrap_listener_at(bs, j)->address)) {
                conf_error(errs, file, 0, 0, names[i],
                           "address %s is listeners[%zu]'s",
                           addr_format(ports[i], a1, sizeof(a1)), j);
                nerr++;
            }
    }
    return nerr;
}

/* Connection limits and memory thresholds: ports named once, thresholds
 * in the order their actions come into effect. */
static int limits_validate(const struct bootstrap *bs, const char *file,
                           struct buf *errs)
{
    const struct bootstrap_overload *o = &bs->overload;
    int nerr = 0;
    char path[64];

    for (size_t i = 0; i < bs->limits.ports.n; i++) {
        const struct bootstrap_port_limit *p =
            &((const struct bootstrap_port_limit *)bs->limits.ports.v)[i];

        snprintf(path, sizeof(path), "limits.ports[%zu]", i);
        if (p->port == 0) {
            conf_error(errs, file, p->mark.line, p->mark.col, path,
                       "missing key 'port'");
            nerr++;
        }
        for (size_t j = 0; j < i; j++)
            if (p->port != 0 &&
                ((const struct bootstrap_port_limit *)bs->limits.ports.v)[j]
                        .port == p->port) {
                conf_error(errs, file, p->mark.line, p->mark.col, path,
                           "port %lld is already limited by "
                           "limits.ports[%zu]",
                           (long long)p->port, j);
                nerr++;
            }
    }
    if (o->memory_limit > 0 && o->memory_limit < 1024 * 1024) {
        conf_error(errs, file, 0, 0, "overload.memoryLimit",
                   "%lld bytes is below 1MiB: strait alone is bigger "
                   "(0 turns the memory actions off)",
                   (long long)o->memory_limit);
        nerr++;
    }
    if (o->stop_accepting_connections > o->disable_keepalive ||
        o->disable_keepalive > o->stop_accepting_requests) {
        conf_error(errs, file, 0, 0, "overload",
                   "thresholds must not decrease: stopAcceptingConnections "
                   "(%lld) <= disableKeepalive (%lld) <= "
                   "stopAcceptingRequests (%lld)",
                   (long long)o->stop_accepting_connections,
                   (long long)o->disable_keepalive,
                   (long long)o->stop_accepting_requests);
        nerr++;
    }
    if (o->hysteresis >= o->stop_accepting_connections) {
        conf_error(errs, file, 0, 0, "overload.hysteresis",
                   "must be below stopAcceptingConnections (%lld): an action "
                   "would never end",
                   (long long)o->stop_accepting_connections);
        nerr++;
    }
    return nerr;
}

/* Checks that span keys: required keys, unique names and addresses. */
/* geoip.headers: lowercase header names, each fed by a database that is
 * configured. */
static int geoip_validate(const struct bootstrap *bs, const char *file,
                          struct buf *errs)
{
    static const char *const names[11] = {
        "country", "city",    "region",      "asn",     "asnOrg",   "isp",
        "anon",    "anonVpn", "anonHosting", "anonTor", "anonProxy"};
    /* enum geoip_db bits that can give each field. */
    static const unsigned from[11] = {3, 1, 1, 12, 12, 8, 16, 16, 16, 16, 16};
    const struct bootstrap_geoip *g = &bs->geoip;
    unsigned have = 0;
    int nerr = 0;

    for (int i = 0; i < 5; i++)
        if (g->db[i] != NULL && g->db[i][0] != '\0')
            have |= 1u << i;
    for (int i = 0; i < 11; i++) {
        const char *h = g->headers[i];
        char path[64];
        if (h == NULL || h[0] == '\0')
            continue;
        snprintf(path, sizeof(path), "geoip.headers.%s", names[i]);
        for (const char *c = h; *c != '\0'; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
                  *c == '-' || *c == '_')) {
                conf_error(errs, file, g->mark.line, g->mark.col, path,
                           "'%s' is not a lowercase header name", h);
                nerr++;
                break;
            }
        if ((have & from[i]) == 0) {
            conf_error(errs, file, g->mark.line, g->mark.col, path,
                       "no configured database gives %s (set "
                       "geoip.databases.%s)",
                       names[i],
                       from[i] == 3    ? "city or country"
                       : from[i] == 1  ? "city"
                       : from[i] == 12 ? "asn or isp"
                       : from[i] == 8  ? "isp"
                                       : "anon");
            nerr++;
        }
    }
    return nerr;
}

/* links.advertise is IP:port; links.gateway HOST:PORT (a name or an IP,
 * IPv6 in brackets). */
static int links_validate(const struct bootstrap *bs, const char *file,
                          struct buf *errs)
{
    const char *g = bs->links.gateway, *colon = strrchr(g, ':');
    struct addr a;
    const char *why;
    int nerr = 0;

    if (bs->links.advertise[0] != '\0' &&
        addr_parse(&a, bs->links.advertise, strlen(bs->links.advertise), 0,
                   &why) < 0) {
        conf_error(errs, file, 0, 0, "links.advertise",
                   "'%s' is not IP:port (%s)", bs->links.advertise, why);
        nerr++;
    }
    if (g[0] != '\0') {
        char *end = NULL;
        long port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
        if (colon == NULL || colon == g || end == NULL || *end != '\0' ||
            port < 1 || port > 65535 || strchr(g, ' ') != NULL) {
            conf_error(errs, file, 0, 0, "links.gateway",
                       "'%s' is not HOST:PORT (e.g. 203.0.113.7:15443)", g);
            nerr++;
        }
    }
    return nerr;
}

static int bootstrap_validate(const struct bootstrap *bs, const char *file,
                              struct buf *errs)
{
    int nerr = geoip_validate(bs, file, errs) + links_validate(bs, file, errs);
    char path[64], a1[ADDR_STRLEN];

    for (size_t i = 0; i < bs->listeners.n; i++) {
        const struct bootstrap_listener *l = bootstrap_listener_at(bs, i);
        int line = l->mark.line, col = l->mark.col;

        snprintf(path, sizeof(path), "listeners[%zu]", i);
        if (l->name == NULL) {
            conf_error(errs, file, line, col, path, "missing key 'name'");
            nerr++;
        } else if (!name_ok(l->name)) {
            conf_error(errs, file, line, col, path,
                       "name '%s' must be 1-63 characters of A-Z a-z 0-9 - _ .",
                       l->name);
            nerr++;
        }
        if (l->address.len == 0) {
            conf_error(errs, file, line, col, path, "missing key 'address'");
            nerr++;
        }
        if (l->protocol == BOOTSTRAP_TCP && l->upstreams.n == 0) {
            conf_error(errs, file, line, col, path,
                       "missing key 'upstreams' (at least one address)");
            nerr++;
        }
        for (size_t j = 0; j < i; j++) {
            const struct bootstrap_listener *o = bootstrap_listener_at(bs, j);
            if (l->name && o->name && strcmp(l->name, o->name) == 0) {
                conf_error(errs, file, line, col, path,
                           "duplicate listener name '%s' (also listeners[%zu])",
                           l->name, j);
                nerr++;
            }
            if (l->address.len && addr_equal(&l->address, &o->address)) {
                conf_error(errs, file, line, col, path,
                           "address %s is already used by listeners[%zu]",
                           addr_format(&l->address, a1, sizeof(a1)), j);
                nerr++;
            }
        }
        if (l->address.len && addr_equal(&l->address, &bs->admin.address)) {
            conf_error(errs, file, line, col, path,
                       "address %s is the admin API's address",
                       addr_format(&l->address, a1, sizeof(a1)));
            nerr++;
        }
    }
    nerr += bootstrap_http_validate(bs, file, errs);
    nerr += bootstrap_mesh_validate(bs, file, errs);
    if (bs->ca.enabled && bs->ca.join.address[0] != '\0') {
        conf_error(errs, file, 0, 0, "ca.join.address",
                   "a node runs the CA (ca.enabled) or joins one, not both");
        nerr++;
    }
    for (size_t i = 0; i < bs->ca.server_names.n; i++)
        if (!dns_name_ok(bs->ca.server_names.v[i])) {
            conf_error(errs, file, 0, 0, "ca.serverNames",
                       "'%s' is not a DNS name (letters, digits, '-' in "
                       "dot-separated labels, a leading '*.' allowed)",
                       bs->ca.server_names.v[i]);
            nerr++;
        }
    if (bs->ca.istiod.address[0] != '\0' &&
        (bs->ca.enabled || bs->ca.join.address[0] != '\0')) {
        conf_error(errs, file, 0, 0, "ca.istiod.address",
                   "a node gets its certificate from one place: istiod, "
                   "its own CA (ca.enabled) or a joined CA, not two");
        nerr++;
    }
    if (bs->ca.istiod.address[0] != '\0' &&
        (bs->ca.istiod.root_cert[0] == '\0' ||
         bs->ca.istiod.token[0] == '\0')) {
        conf_error(errs, file, 0, 0, "ca.istiod",
                   "rootCert and token are needed to call istiod");
        nerr++;
    }
    if ((bs->ca.sa_tokens.jwks_file[0] != '\0') !=
        (bs->ca.sa_tokens.issuer[0] != '\0')) {
        conf_error(errs, file, 0, 0, "ca.serviceAccountTokens",
                   "issuer and jwksFile go together");
        nerr++;
    }
    if (bs->ca.sa_tokens.jwks_file[0] != '\0' && !bs->ca.enabled) {
        conf_error(errs, file, 0, 0, "ca.serviceAccountTokens",
                   "only a node that runs the CA (ca.enabled) checks "
                   "service-account tokens");
        nerr++;
    }
    if (bs->ca.sa_tokens.jwks_file[0] != '\0' &&
        bs->ca.sa_tokens.audience[0] == '\0') {
        conf_error(errs, file, 0, 0, "ca.serviceAccountTokens.audience",
                   "an audience is needed (Istio's is istio-ca)");
        nerr++;
    }
    if (bs->ca.enabled && bs->ca.dir[0] == '\0') {
        conf_error(errs, file, 0, 0, "ca.dir", "the CA needs a directory");
        nerr++;
    }
    if (bs->ca.enabled && addr_family(&bs->ca.address) == AF_UNIX) {
        conf_error(errs, file, 0, 0, "ca.address",
                   "the CA API listens on TCP only");
        nerr++;
    }
    nerr += metrics_validate(bs, file, errs);
    if (bs->ca.enabled && addr_equal(&bs->ca.address, &bs->admin.address)) {
        conf_error(errs, file, 0, 0, "ca.address",
                   "address %s is the admin API's address",
                   addr_format(&bs->ca.address, a1, sizeof(a1)));
        nerr++;
    }
    if (addr_family(&bs->admin.address) == AF_UNIX) {
        conf_error(errs, file, 0, 0, "admin.address",
                   "the admin API listens on TCP only");
        nerr++;
    }
    nerr += alog_validate(&bs->log, file, errs);
    nerr += limits_validate(bs, file, errs);
    for (size_t i = 0; i < bs->config.etcd.endpoints.n; i++) {
        const char *why = NULL;
        char host[256];
        int tls, port;
        snprintf(path, sizeof(path), "config.etcd.endpoints[%zu]", i);
        if (bootstrap_etcd_endpoint(bs->config.etcd.endpoints.v[i], &tls, host,
                                    sizeof(host), &port, &why) < 0) {
            conf_error(errs, file, 0, 0, path, "%s", why);
            nerr++;
        }
    }
    if (bs->config.etcd.endpoints.n > 0) {
        const struct bootstrap_etcd *e = &bs->config.etcd;
        size_t pn = strlen(e->prefix);
        if (pn == 0 || e->prefix[0] != '/' || e->prefix[pn - 1] == '/') {
            conf_error(errs, file, 0, 0, "config.etcd.prefix",
                       "'%s': a prefix starts with '/' and does not end "
                       "with one",
                       e->prefix);
            nerr++;
        }
        if ((e->cert_file[0] != '\0') != (e->key_file[0] != '\0')) {
            conf_error(errs, file, 0, 0, "config.etcd.certFile",
                       "certFile and keyFile go together");
            nerr++;
        }
        if (e->password[0] != '\0' && e->username[0] == '\0') {
            conf_error(errs, file, 0, 0, "config.etcd.password",
                       "a password without a username");
            nerr++;
        }
        if (e->backoff_max_ms < e->backoff_ms) {
            conf_error(errs, file, 0, 0, "config.etcd.backoffMax",
                       "shorter than backoff");
            nerr++;
        }
    }
    nerr += bootstrap_kube_validate(bs, file, errs);
    if (bs->tracing.endpoint[0] != '\0') {
        struct bootstrap_url u;
        const char *why = NULL;
        if (bootstrap_parse_url(bs->tracing.endpoint, &u, &why) < 0) {
            conf_error(errs, file, bs->tracing.mark.line, bs->tracing.mark.col,
                       "tracing.endpoint", "%s", why);
            nerr++;
        }
    }
    if (bs->upgrade.binary[0] != '\0' && bs->upgrade.binary[0] != '/') {
        conf_error(errs, file, 0, 0, "upgrade.binary",
                   "must be an absolute path (the working directory of the "
                   "running process is not the operator's)");
        nerr++;
    }
    if (bs->drain_window_ms > 0 &&
        bs->drain_window_ms >= bs->drain_timeout_ms) {
        conf_error(errs, file, 0, 0, "drainWindow",
                   "must be shorter than drainTimeout (%lld ms): the window "
                   "counts within the drain deadline",
                   (long long)bs->drain_timeout_ms);
        nerr++;
    }
    return nerr;
}

int bootstrap_etcd_endpoint(const char *url, int *tls, char *host, size_t n,
                            int *port, const char **why)
{
    const char *h, *end, *colon;
    long v = 0;
    size_t hn;

    if (strncmp(url, "http://", 7) == 0) {
        *tls = 0;
        h = url + 7;
    } else if (strncmp(url, "https://", 8) == 0) {
        *tls = 1;
        h = url + 8;
    } else {
        *why = "expected http://HOST:PORT or https://HOST:PORT";
        return -1;
    }
    if (*h == '[') {
        end = strchr(h, ']');
        if (end == NULL || end[1] != ':') {
            *why = "expected [IPv6]:PORT after the scheme";
            return -1;
        }
        h++;
        hn = (size_t)(end - h);
        colon = end + 1;
    } else {
        colon = strrchr(h, ':');
        if (colon == NULL) {
            *why = "the port is missing (etcd's client port is usually 2379)";
            return -1;
        }
        hn = (size_t)(colon - h);
    }
    if (hn == 0 || hn >= n || memchr(h, '/', hn) != NULL) {
        *why = "bad host";
        return -1;
    }
    for (const char *p = colon + 1; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || v > 65535) {
            *why = *p == '/' ? "no path may follow the port" : "bad port";
            return -1;
        }
        v = v * 10 + (*p - '0');
    }
    if (colon[1] == '\0' || v < 1 || v > 65535) {
        *why = "bad port";
        return -1;
    }
    memcpy(host, h, hn);
    host[hn] = '\0';
    *port = (int)v;
    return 0;
}

static char *errs_take(struct buf *errs)
{
    char *out;
    size_t n = buf_len(errs);

    /* Drop the trailing newline; callers print one message. */
    if (n > 0 && buf_ptr(errs)[n - 1] == '\n')
        n--;
    out = strndup(buf_ptr(errs), n);
    buf_dispose(errs);
    return out;
}

/*
 * proxy_config_annotation() applies the node's proxy.istio.io/config
 * annotation: Istio merges it over meshConfig.defaultConfig, so the keys of
 * its gatewayTopology it names replace those of the top-level
 * gatewayTopology, and the others stay. Decoded with the same key table
 * (types, ranges, unknown keys refused). Returns the number of errors.
 */
#define PROXY_CONFIG_ANNOTATION "proxy.istio.io/config"
static int proxy_config_annotation(struct bootstrap *bs, const char *file,
                                   struct buf *errs)
{
    const char *v = NULL;
    struct ydoc *docs = NULL;
    size_t ndocs = 0;
    const struct ynode *gt;
    char where[512], *err = NULL;
    int nerr = 0;

    for (size_t i = 0; i < bs->node.annotations.n; i++)
        if (strcmp(bs->node.annotations.v[i].key, PROXY_CONFIG_ANNOTATION) == 0)
            v = bs->node.annotations.v[i].val;
    if (v == NULL)
        return 0;
    snprintf(where, sizeof(where), "%s: node.annotations[%s]", file,
             PROXY_CONFIG_ANNOTATION);
    if (yaml_load(v, strlen(v), where, &docs, &ndocs, &err) < 0) {
        buf_printf(errs, "%s\n", err);
        free(err);
        return 1;
    }
    if (ndocs != 1 || docs[0].root == NULL || docs[0].root->type != YNODE_MAP) {
        buf_printf(errs, "%s: not a ProxyConfig (a YAML or JSON map)\n", where);
        nerr = 1;
    } else if ((gt = ymap_get(docs[0].root, "gatewayTopology")) != NULL) {
        /* Decoded over the top-level values: what it names wins. */
        nerr = conf_decode(&bootstrap_topology_section, gt, &bs->topology,
                           where, errs);
    }
    yaml_docs_free(docs, ndocs);
    return nerr;
}

struct bootstrap *bootstrap_parse(const char *data, size_t len,
                                  const char *name, char **err)
{
    struct bootstrap *bs = NULL;
    struct ydoc *docs = NULL;
    size_t ndocs = 0;
    struct buf errs;
    int nerr = 0;

    *err = NULL;
    buf_init(&errs, 64 * 1024);
    if (yaml_load(data, len, name, &docs, &ndocs, err) < 0) {
        buf_dispose(&errs);
        return NULL;
    }
    if (ndocs > 1) {
        conf_error(&errs, name, docs[1].line, 1, "(document)",
                   "the bootstrap file must hold one YAML document");
        nerr++;
        goto fail;
    }
    bs = calloc(1, sizeof(*bs));
    if (bs == NULL) {
        buf_puts(&errs, "out of memory\n");
        nerr++;
        goto fail;
    }
    conf_defaults(&bootstrap_section, bs);
    /* An empty file is valid: every key has its default. */
    if (ndocs == 1 && docs[0].root != NULL)
        nerr += conf_decode(&bootstrap_section, docs[0].root, bs, name, &errs);
    if (nerr == 0)
        nerr += proxy_config_annotation(bs, name, &errs);
    if (nerr == 0)
        nerr += bootstrap_validate(bs, name, &errs);
    if (nerr == 0 && bs->node.name == NULL) {
        char host[256];
        if (gethostname(host, sizeof(host)) < 0)
            snprintf(host, sizeof(host), "strait");
        host[sizeof(host) - 1] = '\0';
        bs->node.name = strdup(host);
    }
fail:
    yaml_docs_free(docs, ndocs);
    if (nerr > 0) {
        bootstrap_free(bs);
        err_give(err, errs_take(&errs));
        return NULL;
    }
    buf_dispose(&errs);
    return bs;
}

struct bootstrap *bootstrap_load(const char *path, char **err)
{
    FILE *f = fopen(path, "rb");
    struct bootstrap *bs;
    struct stat st;
    char *data;
    size_t n;

    *err = NULL;
    if (f == NULL) {
        err_set(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode) ||
        st.st_size > BOOTSTRAP_MAX_BYTES) {
        fclose(f);
        err_set(err, "%s: not a regular file of at most %d bytes", path,
                BOOTSTRAP_MAX_BYTES);
        return NULL;
    }
    data = malloc((size_t)st.st_size + 1);
    if (data == NULL) {
        fclose(f);
        return NULL;
    }
    n = fread(data, 1, (size_t)st.st_size, f);
    fclose(f);
    bs = bootstrap_parse(data, n, path, err);
    free(data);
    return bs;
}

void bootstrap_free(struct bootstrap *bs)
{
    if (bs == NULL)
        return;
    conf_dispose(&bootstrap_section, bs);
    free(bs);
}

int64_t bootstrap_listener_limit(const struct bootstrap *bs,
                                 const struct bootstrap_listener *bl,
                                 uint32_t port)
{
    if (bl != NULL && bl->max_connections > 0)
        return bl->max_connections;
    if (bl == NULL)
        for (size_t i = 0; i < bs->limits.ports.n; i++) {
            const struct bootstrap_port_limit *p =
                &((const struct bootstrap_port_limit *)bs->limits.ports.v)[i];
            if ((uint32_t)p->port == port)
                return p->max_connections;
        }
    return bs->limits.max_connections_per_listener;
}

int bootstrap_workers(const struct bootstrap *bs)
{
    long n;

    if (bs->workers > 0)
        return (int)bs->workers;
    n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > BOOTSTRAP_MAX_WORKERS)
        n = BOOTSTRAP_MAX_WORKERS;
    return (int)n;
}

/* Two listeners are equal when their effective settings print the same:
 * comparing the JSON dump keeps this right as keys are added. */
static int section_equal(const struct conf_section *sec, const void *a,
                         const void *b)
{
    struct buf ja, jb;
    int eq;

    buf_init(&ja, 16 * 1024 * 1024);
    buf_init(&jb, 16 * 1024 * 1024);
    conf_to_json(sec, a, &ja);
    conf_to_json(sec, b, &jb);
    eq = buf_len(&ja) == buf_len(&jb) &&
         memcmp(buf_ptr(&ja), buf_ptr(&jb), buf_len(&ja)) == 0;
    buf_dispose(&ja);
    buf_dispose(&jb);
    return eq;
}

int bootstrap_listener_equal(const struct bootstrap_listener *a,
                             const struct bootstrap_listener *b)
{
    return section_equal(&listener_section, a, b);
}

int bootstrap_clusters_equal(const struct bootstrap *a,
                             const struct bootstrap *b)
{
    if (a->clusters.n != b->clusters.n)
        return 0;
    for (size_t i = 0; i < a->clusters.n; i++)
        if (!section_equal(&bootstrap_cluster_section,
                           bootstrap_cluster_at(a, i),
                           bootstrap_cluster_at(b, i)))
            return 0;
    return 1;
}

int bootstrap_dns_equal(const struct bootstrap *a, const struct bootstrap *b)
{
    return section_equal(&dns_section, &a->dns, &b->dns);
}

void bootstrap_listener_identity(const struct bootstrap_listener *bl,
                                 const struct conf_sink *sink)
{
    /* The connection limit is not compiled into the listener: each build
     * sets it on the listener's counter (snapshot.c), so a reload that
     * changes only the limit keeps the listener and its connections. */
    struct bootstrap_listener same = *bl;

    same.max_connections = 0;
    conf_identity(&listener_section, &same, sink);
}

void bootstrap_listener_to_json(const struct bootstrap_listener *bl,
                                struct buf *b)
{
    conf_to_json(&listener_section, bl, b);
}

void bootstrap_clusters_to_json(const struct bootstrap *bs, struct buf *b)
{
    buf_puts(b, "[");
    for (size_t i = 0; i < bs->clusters.n; i++) {
        buf_puts(b, i ? "," : "");
        conf_to_json(&bootstrap_cluster_section, bootstrap_cluster_at(bs, i),
                     b);
    }
    buf_puts(b, "]");
}

void bootstrap_to_json(const struct bootstrap *bs, struct buf *b)
{
    conf_to_json(&bootstrap_section, bs, b);
}
