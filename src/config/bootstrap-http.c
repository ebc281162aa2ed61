/*
 * The HTTP parts of the bootstrap file: TLS and HTTP settings of a
 * listener, static routes and upstream clusters. Kept apart from
 * bootstrap.c, as H2O keeps each feature's configuration in its own file.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "config/bootstrap.h"
#include "core/buf.h"
#include "http/conn_conf-t.h"

#define OFF(type, field) offsetof(type, field)
#define END                                                                    \
    {                                                                          \
        NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL                   \
    }

static const char *const tls_versions[] = {"TLS_AUTO", "TLSV1_0", "TLSV1_1",
                                           "TLSV1_2",  "TLSV1_3", NULL};
static const char *const underscores[] = {"ALLOW", "REJECT_REQUEST",
                                          "DROP_HEADER", NULL};
static const char *const up_protocols[] = {"http1", "http2", NULL};

static const struct conf_key cert_keys[] = {
    {"serverCertificate", CONF_STR, OFF(struct bootstrap_cert, cert), 0, 0,
     NULL, "PEM certificate chain, leaf first (required)", NULL, NULL, NULL,
     NULL},
    {"privateKey", CONF_STR, OFF(struct bootstrap_cert, key), 0, 0, NULL,
     "PEM private key, RSA or ECDSA (required)", NULL, NULL, NULL, NULL},
    END,
};
static const struct conf_section cert_section = {
    cert_keys, sizeof(struct bootstrap_cert), OFF(struct bootstrap_cert, mark)};

static const struct conf_key tls_keys[] = {
    {"certificates", CONF_LIST, OFF(struct bootstrap_tls, certificates), 0,
     1024, NULL,
     "certificate/key pairs; SNI picks by the names in each certificate, "
     "ECDSA before RSA when the client offers it, the first is the default",
     NULL, &cert_section, NULL, NULL},
    {"minProtocolVersion", CONF_ENUM, OFF(struct bootstrap_tls, min_version), 0,
     0, "TLSV1_2", "TLS_AUTO (TLSV1_2), TLSV1_2 or TLSV1_3", tls_versions, NULL,
     NULL, NULL},
    {"maxProtocolVersion", CONF_ENUM, OFF(struct bootstrap_tls, max_version), 0,
     0, "TLSV1_3", "TLS_AUTO (TLSV1_3), TLSV1_2 or TLSV1_3", tls_versions, NULL,
     NULL, NULL},
    {"cipherSuites", CONF_STR_LIST, OFF(struct bootstrap_tls, cipher_suites), 0,
     64, NULL,
     "TLS 1.2 cipher suites by OpenSSL name (default: ECDHE with AES-GCM "
     "and ChaCha20); TLS 1.3 suites are fixed",
     NULL, NULL, NULL, NULL},
    {"alpn", CONF_STR_LIST, OFF(struct bootstrap_tls, alpn), 0, 8, NULL,
     "protocols offered by ALPN, in order of preference (default: h2, "
     "http/1.1)",
     NULL, NULL, NULL, NULL},
    {"reloadInterval", CONF_DURATION,
     OFF(struct bootstrap_tls, reload_interval_ms), 100, 3600 * 1000, "5s",
     "how often certificate files are checked for changes", NULL, NULL, NULL,
     NULL},
    END,
};
const struct conf_section bootstrap_tls_section = {tls_keys, 0, SIZE_MAX};

/* upgradeTypes: a comma-separated list of tokens that fits the listener's
 * buffer. h2c is refused: an h2c upgrade is answered as HTTP/1.1, never
 * relayed, since strait speaks HTTP/2 itself. */
static int check_upgrade_types(const char *s, size_t n, void *dst,
                               const char **why)
{
    size_t i, start = 0;

    (void)dst;
    if (n >= HTTP_UPGRADE_TYPES_MAX) {
        *why = "list too long";
        return -1;
    }
    for (i = 0; i <= n; i++) {
        if (i < n && s[i] != ',') {
            if (!strchr("!#$%&'*+-.^_`|~", s[i]) &&
                !((s[i] >= '0' && s[i] <= '9') ||
                  (s[i] >= 'a' && s[i] <= 'z') ||
                  (s[i] >= 'A' && s[i] <= 'Z'))) {
                *why = "not a comma-separated list of tokens";
                return -1;
            }
            continue;
        }
        if (i == start && n > 0) {
            *why = "empty element";
            return -1;
        }
        if (i - start == 3 && strncasecmp(s + start, "h2c", 3) == 0) {
            *why = "h2c upgrades are never tunnelled";
            return -1;
        }
        start = i + 1;
    }
    return 0;
}

/*
 * The two timeouts a listener's http block and the top-level http
 * section (every Gateway listener) share: one name, range, default and
 * help text for both, written once.
 */
#define HEADERS_TIMEOUT_KEY(type)                                              \
    {                                                                          \
        "requestHeadersTimeout", CONF_DURATION, OFF(type, headers_timeout_ms), \
            1, 3600 * 1000, "10s",                                             \
            "time allowed to receive a whole request head (slowloris): "       \
            "HTTP/1 "                                                          \
            "is answered 408 and closed, HTTP/2 closed with GOAWAY; counted "  \
            "in "                                                              \
            "http.rq_header_timeout",                                          \
            NULL, NULL, NULL, NULL                                             \
    }
#define STREAM_IDLE_TIMEOUT_KEY(type)                                          \
    {                                                                          \
        "streamIdleTimeout", CONF_DURATION, OFF(type, stream_idle_timeout_ms), \
            0, INT64_C(24) * 3600 * 1000, "5m",                                \
            "end a request on which no byte moved either way for this long "   \
            "(Envoy's stream_idle_timeout): 408 while its body is still "      \
            "arriving, else 504, flag SI; an answer already under way is cut " \
            "short; counted in http.rq_idle_timeout. 0s turns it off",         \
            NULL, NULL, NULL, NULL                                             \
    }

static const struct conf_key http_keys[] = {
    {"maxRequestHeadersSize", CONF_SIZE,
     OFF(struct bootstrap_http, max_head_bytes), 1024, 1024 * 1024, "60KiB",
     "largest request head (request line and headers); larger is a 431. "
     "Request trailers get the same bound: over it an HTTP/2 stream is "
     "reset, an HTTP/1 request is a 400 and its connection closed",
     NULL, NULL, NULL, NULL},
    {"maxRequestHeaders", CONF_INT, OFF(struct bootstrap_http, max_headers), 1,
     10000, "100",
     "most request headers; more is a 431. The same bound applies to "
     "request trailers (HTTP/2: stream reset; HTTP/1: 431, closed)",
     NULL, NULL, NULL, NULL},
    {"headersWithUnderscoresAction", CONF_ENUM,
     OFF(struct bootstrap_http, underscores), 0, 0, "ALLOW",
     "ALLOW, REJECT_REQUEST (400) or DROP_HEADER, as Istio names them",
     underscores, NULL, NULL, NULL},
    {"maxConcurrentStreams", CONF_INT,
     OFF(struct bootstrap_http, max_concurrent_streams), 1, 2147483647, "100",
     "HTTP/2 streams open at once per connection", NULL, NULL, NULL, NULL},
    {"initialStreamWindowSize", CONF_SIZE,
     OFF(struct bootstrap_http, stream_window), 65535, 2147483647, "64KiB",
     "HTTP/2 flow-control window per stream", NULL, NULL, NULL, NULL},
    {"initialConnectionWindowSize", CONF_SIZE,
     OFF(struct bootstrap_http, connection_window), 65535, 2147483647, "1MiB",
     "HTTP/2 flow-control window per connection", NULL, NULL, NULL, NULL},
    {"xffNumTrustedHops", CONF_INT,
     OFF(struct bootstrap_http, xff_trusted_hops), 0, 64, "0",
     "proxies in front of strait whose X-Forwarded-For entries are trusted",
     NULL, NULL, NULL, NULL},
    {"idleTimeout", CONF_DURATION, OFF(struct bootstrap_http, idle_timeout_ms),
     1, INT64_C(7) * 24 * 3600 * 1000, "1h",
     "close a client connection with no request in flight for this long", NULL,
     NULL, NULL, NULL},
    HEADERS_TIMEOUT_KEY(struct bootstrap_http),
    STREAM_IDLE_TIMEOUT_KEY(struct bootstrap_http),
    {"bodyBufferSize", CONF_SIZE, OFF(struct bootstrap_http, body_buffer),
     65536, 16 * 1024 * 1024, "64KiB",
     "body bytes buffered per stream and direction (backpressure bound)", NULL,
     NULL, NULL, NULL},
    {"h2c", CONF_BOOL, OFF(struct bootstrap_http, h2c), 0, 0, "true",
     "accept HTTP/2 with prior knowledge on plaintext listeners", NULL, NULL,
     NULL, NULL},
    {"upgradeTypes", CONF_STR, OFF(struct bootstrap_http, upgrade_types), 0, 0,
     "websocket",
     "Upgrade protocols relayed as a tunnel after the upstream's 101, "
     "comma-separated (Envoy's upgrade_configs); \"\" for none. Other "
     "Upgrades are forwarded as plain requests",
     NULL, NULL, check_upgrade_types, NULL},
    END,
};
const struct conf_section bootstrap_http_section = {http_keys, 0, SIZE_MAX};

/* The top-level http section: what every Gateway listener takes from the
 * bootstrap (its other HTTP settings are the defaults of a listener's
 * http block). Bootstrap listeners keep their own http block. */
static const struct conf_key gateway_http_keys[] = {
    HEADERS_TIMEOUT_KEY(struct bootstrap_gateway_http),
    STREAM_IDLE_TIMEOUT_KEY(struct bootstrap_gateway_http),
    END,
};
const struct conf_section bootstrap_gateway_http_section = {gateway_http_keys,
                                                            0, SIZE_MAX};

static const char *const xfcc_modes[] = {"UNDEFINED",
                                         "SANITIZE",
                                         "FORWARD_ONLY",
                                         "APPEND_FORWARD",
                                         "SANITIZE_SET",
                                         "ALWAYS_FORWARD_ONLY",
                                         NULL};

static const struct conf_key proxy_protocol_keys[] = {
    {"maxHeaderBytes", CONF_SIZE,
     OFF(struct bootstrap_proxy_protocol, max_header_bytes), 232, 65551, "1KiB",
     "most bytes of a PROXY protocol v2 header (16 bytes and its TLVs); a "
     "longer one closes the connection. A v1 line is at most 107 bytes, "
     "as its specification says",
     NULL, NULL, NULL, NULL},
    END,
};
static const struct conf_section proxy_protocol_section = {
    proxy_protocol_keys, 0, OFF(struct bootstrap_proxy_protocol, mark)};

/* Istio's ProxyConfig gatewayTopology (meshConfig.defaultConfig, or the
 * pod annotation proxy.istio.io/config), for every Gateway listener. */
static const struct conf_key topology_keys[] = {
    {"numTrustedProxies", CONF_INT,
     OFF(struct bootstrap_gateway_topology, num_trusted_proxies), 0, 64, "0",
     "proxies in front of the gateway: the client address is the Nth "
     "X-Forwarded-For entry from the right (the peer when there are fewer); "
     "0: the peer, and a client's X-Forwarded-Proto is replaced",
     NULL, NULL, NULL, NULL},
    {"proxyProtocol", CONF_SECTION,
     OFF(struct bootstrap_gateway_topology, proxy_protocol), 0, 0, NULL,
     "present ({}): every Gateway listener requires a PROXY protocol v1 or "
     "v2 header, whose source is the client address; a connection without "
     "one, or with a malformed one, is closed",
     NULL, &proxy_protocol_section, NULL, NULL},
    {"forwardClientCertDetails", CONF_ENUM,
     OFF(struct bootstrap_gateway_topology, forward_client_cert), 0, 0,
     "SANITIZE_SET",
     "X-Forwarded-Client-Cert: SANITIZE (remove), FORWARD_ONLY (pass on "
     "from mTLS clients), APPEND_FORWARD (append this hop's client "
     "certificate), SANITIZE_SET (replace with it; UNDEFINED is this, "
     "Istio's gateway default) or ALWAYS_FORWARD_ONLY (pass on always)",
     xfcc_modes, NULL, NULL, NULL},
    END,
};
const struct conf_section bootstrap_topology_section = {topology_keys, 0,
                                                        SIZE_MAX};

static const struct conf_key route_keys[] = {
    {"host", CONF_STR, OFF(struct bootstrap_route, host), 0, 0, "*",
     "host to match: exact, *.suffix or *", NULL, NULL, NULL, NULL},
    {"pathPrefix", CONF_STR, OFF(struct bootstrap_route, path_prefix), 0, 0,
     "/", "path prefix to match", NULL, NULL, NULL, NULL},
    {"cluster", CONF_STR, OFF(struct bootstrap_route, cluster), 0, 0, NULL,
     "cluster to send matching requests to (required)", NULL, NULL, NULL, NULL},
    {"timeout", CONF_DURATION, OFF(struct bootstrap_route, timeout_ms), 0,
     INT64_C(24) * 3600 * 1000, "0s",
     "time allowed for the whole response; 0s for none (Istio's default)", NULL,
     NULL, NULL, NULL},
    END,
};
const struct conf_section bootstrap_route_section = {
    route_keys, sizeof(struct bootstrap_route),
    OFF(struct bootstrap_route, mark)};

static const struct conf_key up_tls_keys[] = {
    {"enabled", CONF_BOOL, OFF(struct bootstrap_upstream_tls, enabled), 0, 0,
     "false", "originate TLS to the endpoints", NULL, NULL, NULL, NULL},
    {"sni", CONF_STR, OFF(struct bootstrap_upstream_tls, sni), 0, 0, "",
     "server name sent and verified (default: none sent, not verified by "
     "name)",
     NULL, NULL, NULL, NULL},
    {"caCertificates", CONF_STR,
     OFF(struct bootstrap_upstream_tls, ca_certificates), 0, 0, "",
     "PEM file of CAs to verify the endpoints against (default: the "
     "system's)",
     NULL, NULL, NULL, NULL},
    {"insecureSkipVerify", CONF_BOOL,
     OFF(struct bootstrap_upstream_tls, insecure_skip_verify), 0, 0, "false",
     "do not verify the endpoints' certificates (testing only)", NULL, NULL,
     NULL, NULL},
    END,
};
static const struct conf_section up_tls_section = {up_tls_keys, 0, SIZE_MAX};

static const struct conf_key cluster_keys[] = {
    {"name", CONF_STR, OFF(struct bootstrap_cluster, name), 0, 0, NULL,
     "unique name that routes refer to (required)", NULL, NULL, NULL, NULL},
    {"endpoints", CONF_ADDR_LIST, OFF(struct bootstrap_cluster, endpoints), 0,
     100000, NULL, "endpoint addresses, used round robin (required)", NULL,
     NULL, NULL, NULL},
    {"protocol", CONF_ENUM, OFF(struct bootstrap_cluster, protocol), 0, 0,
     "http1", "http1 or http2 (h2 by ALPN over TLS, h2c in plaintext)",
     up_protocols, NULL, NULL, NULL},
    {"connectTimeout", CONF_DURATION,
     OFF(struct bootstrap_cluster, connect_timeout_ms), 1, 3600 * 1000, "5s",
     "time allowed for one connection attempt", NULL, NULL, NULL, NULL},
    {"idleTimeout", CONF_DURATION,
     OFF(struct bootstrap_cluster, idle_timeout_ms), 1,
     INT64_C(7) * 24 * 3600 * 1000, "1h",
     "close pooled connections idle for this long", NULL, NULL, NULL, NULL},
    {"maxRequestsPerConnection", CONF_INT,
     OFF(struct bootstrap_cluster, max_requests_per_connection), 0,
     INT64_C(1) << 40, "0",
     "requests per connection before a new one; 0: no limit", NULL, NULL, NULL,
     NULL},
    {"tls", CONF_SECTION, OFF(struct bootstrap_cluster, tls), 0, 0, NULL,
     "TLS to the endpoints", NULL, &up_tls_section, NULL, NULL},
    END,
};
const struct conf_section bootstrap_cluster_section = {
    cluster_keys, sizeof(struct bootstrap_cluster),
    OFF(struct bootstrap_cluster, mark)};

const struct bootstrap_cluster *
bootstrap_find_cluster(const struct bootstrap *bs, const char *name)
{
    for (size_t i = 0; i < bs->clusters.n; i++) {
        const struct bootstrap_cluster *c = bootstrap_cluster_at(bs, i);
        if (c->name != NULL && strcmp(c->name, name) == 0)
            return c;
    }
    return NULL;
}

static int check_tls(const struct bootstrap_listener *l, const char *file,
                     const char *path, struct buf *errs)
{
    const struct bootstrap_tls *t = &l->tls;
    int nerr = 0;
    int lo = t->min_version == BOOTSTRAP_TLS_AUTO ? BOOTSTRAP_TLSV1_2
                                                  : t->min_version;
    int hi = t->max_version == BOOTSTRAP_TLS_AUTO ? BOOTSTRAP_TLSV1_3
                                                  : t->max_version;

    for (size_t i = 0; i < t->certificates.n; i++) {
        const struct bootstrap_cert *c =
            &((const struct bootstrap_cert *)t->certificates.v)[i];
        if (c->cert == NULL || c->key == NULL) {
            conf_error(errs, file, c->mark.line, c->mark.col, path,
                       "tls.certificates[%zu] needs serverCertificate and "
                       "privateKey",
                       i);
            nerr++;
        }
    }
    /* TLS 1.0 and 1.1 are refused: strait never offers them. */
    if (lo < BOOTSTRAP_TLSV1_2 || hi < BOOTSTRAP_TLSV1_2) {
        conf_error(errs, file, l->mark.line, l->mark.col, path,
                   "TLS versions below TLSV1_2 are not supported");
        nerr++;
    } else if (lo > hi) {
        conf_error(errs, file, l->mark.line, l->mark.col, path,
                   "tls.minProtocolVersion is above maxProtocolVersion");
        nerr++;
    }
    for (size_t i = 0; i < t->alpn.n; i++) {
        if (strcmp(t->alpn.v[i], "h2") != 0 &&
            strcmp(t->alpn.v[i], "http/1.1") != 0) {
            conf_error(errs, file, l->mark.line, l->mark.col, path,
                       "tls.alpn: unknown protocol '%s' (h2 or http/1.1)",
                       t->alpn.v[i]);
            nerr++;
        }
    }
    return nerr;
}

int bootstrap_http_validate(const struct bootstrap *bs, const char *file,
                            struct buf *errs)
{
    char path[64];
    int nerr = 0;

    for (size_t i = 0; i < bs->clusters.n; i++) {
        const struct bootstrap_cluster *c = bootstrap_cluster_at(bs, i);

        snprintf(path, sizeof(path), "clusters[%zu]", i);
        if (c->name == NULL || c->name[0] == '\0') {
            conf_error(errs, file, c->mark.line, c->mark.col, path,
                       "missing key 'name'");
            nerr++;
            continue;
        }
        if (c->endpoints.n == 0) {
            conf_error(errs, file, c->mark.line, c->mark.col, path,
                       "missing key 'endpoints' (at least one address)");
            nerr++;
        }
        for (size_t j = 0; j < i; j++) {
            const struct bootstrap_cluster *o = bootstrap_cluster_at(bs, j);
            if (o->name != NULL && strcmp(o->name, c->name) == 0) {
                conf_error(errs, file, c->mark.line, c->mark.col, path,
                           "duplicate cluster name '%s' (also clusters[%zu])",
                           c->name, j);
                nerr++;
            }
        }
    }
    for (size_t i = 0; i < bs->listeners.n; i++) {
        const struct bootstrap_listener *l = bootstrap_listener_at(bs, i);

        snprintf(path, sizeof(path), "listeners[%zu]", i);
        if (l->protocol == BOOTSTRAP_TCP) {
            if (l->routes.n > 0 || l->tls.certificates.n > 0) {
                conf_error(errs, file, l->mark.line, l->mark.col, path,
                           "routes and tls need protocol: http");
                nerr++;
            }
            continue;
        }
        if (l->upstreams.n > 0) {
            conf_error(errs, file, l->mark.line, l->mark.col, path,
                       "an http listener sends to clusters through routes, "
                       "not upstreams");
            nerr++;
        }
        nerr += check_tls(l, file, path, errs);
        for (size_t r = 0; r < l->routes.n; r++) {
            const struct bootstrap_route *rt =
                &((const struct bootstrap_route *)l->routes.v)[r];
            char rpath[96];

            snprintf(rpath, sizeof(rpath), "%s.routes[%zu]", path, r);
            if (rt->cluster == NULL) {
                conf_error(errs, file, rt->mark.line, rt->mark.col, rpath,
                           "missing key 'cluster'");
                nerr++;
            } else if (bootstrap_find_cluster(bs, rt->cluster) == NULL) {
                conf_error(errs, file, rt->mark.line, rt->mark.col, rpath,
                           "unknown cluster '%s'", rt->cluster);
                nerr++;
            }
            if (rt->path_prefix[0] != '/') {
                conf_error(errs, file, rt->mark.line, rt->mark.col, rpath,
                           "pathPrefix must start with '/'");
                nerr++;
            }
        }
    }
    return nerr;
}
