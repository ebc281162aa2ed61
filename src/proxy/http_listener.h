#ifndef STRAIT_PROXY_HTTP_LISTENER_H
#define STRAIT_PROXY_HTTP_LISTENER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/bufpool.h"
#include "core/geoip.h"
#include "core/list.h"
#include "http1/h1_client.h"
#include "http1/h1_server.h"
#include "http2/h2_server.h"
#include "net/plistener.h"
#include "upstream/cluster.h"

struct event;
struct event_base;
struct series_labels;
struct series_table;
struct stats_block;
struct cx_limit;
struct tls_holder;
struct router;
struct authz;
struct jwt_authn;
struct luaprogs;
struct ssl_ctx_st;
struct afmt;
struct lsink;
struct spanq;

/*
 * What a listener routes by: its router (a Gateway listener's
 * VirtualServices, or a bootstrap listener's routes lowered into router
 * rules) and the clusters routes name by index. Immutable once built, shared by
 * every worker, reference-counted with atomics: a worker takes one reference
 * per generation it serves, never one per request.
 */
/* A registry host and port strait.http.request may call, and the index
 * of its cluster in the routes' clusters. */
struct lua_target {
    char *host; /* full name, lowercase */
    uint32_t port;
    int cluster;
};

struct http_routes {
    int refs;
    struct router *router;     /* one reference; NULL: no route */
    struct cluster **clusters; /* one reference each */
    size_t nclusters;
    struct authz *authz;   /* one reference; NULL: no policy applies */
    struct jwt_authn *jwt; /* one reference; NULL: no
                            * RequestAuthentication applies */
    struct luaprogs *lua;  /* one reference; NULL: no LuaPolicy applies */
    /* What strait.http.request may call, sorted by host then port
     * (lua_target_cmp); built only when a LuaPolicy applies. */
    struct lua_target *lua_targets;
    size_t nlua_targets;
};

/* The order of http_routes.lua_targets (host, then port). */
int lua_target_cmp(const void *a, const void *b);

/* http_routes_new() returns empty routes with one reference, or NULL. */
struct http_routes *http_routes_new(void);
struct http_routes *http_routes_ref(struct http_routes *r);
void http_routes_unref(struct http_routes *r);

/* X-Forwarded-Client-Cert handling, in the order of Istio's
 * forwardClientCertDetails (UNDEFINED is SANITIZE_SET, the gateway
 * default). */
enum http_xfcc {
    HTTP_XFCC_UNDEFINED,
    HTTP_XFCC_SANITIZE,
    HTTP_XFCC_FORWARD_ONLY,
    HTTP_XFCC_APPEND_FORWARD,
    HTTP_XFCC_SANITIZE_SET,
    HTTP_XFCC_ALWAYS_FORWARD_ONLY,
};

/*
 * What an HTTP listener does, compiled from configuration. Shared by
 * every worker, reference-counted with atomics. Everything is immutable
 * once built but the routes: a new resource snapshot publishes new routes
 * into the running conf (http_listener_conf_set_routes), so the listener
 * keeps its connections, and each request finishes on the routes it
 * started with.
 */
struct http_listener_conf {
    int refs;
    char *name;
    /* Settings of every downstream connection, HTTP/1 and HTTP/2 alike. */
    struct http_conn_conf downstream;
    struct h1_client_conf h1c;
    struct h2_settings h2;
    int h2c;
    /* The current routes: written by the control thread under the lock,
     * read by workers when gen moves (one atomic load per request). */
    pthread_mutex_t lock;
    struct http_routes *cur; /* one reference */
    unsigned gen;
    struct tls_holder *tls; /* NULL: plaintext */
    uint32_t port;          /* the port requests come in on (routing) */
    int https_redirect;     /* every request is redirected to https */
    int tls_permissive;     /* with tls: plaintext is served too (a peek at
                             * the first byte tells a ClientHello) */
    int access_log;
    /* The access log's Envoy format (owned; NULL: strait's own line),
     * and where lines go (the process's writer; NULL: straight to the
     * log, as in unit tests). */
    struct afmt *alog_fmt;
    struct lsink *alog_sink;
    /* Where finished spans go (the exporter's queue; NULL: no tracing),
     * and the share of requests traced when the caller did not decide,
     * per million. */
    struct spanq *spans;
    uint32_t sample_ppm;
    uint32_t xff_trusted_hops;
    /* gatewayTopology.proxyProtocol: every connection starts with a PROXY
     * header of at most this many bytes (v2; v1 lines are shorter);
     * 0: none is read. */
    uint32_t proxy_protocol;
    int xfcc; /* enum http_xfcc: X-Forwarded-Client-Cert handling */
    /* GeoIP (borrowed, outlives every conf; NULL: none) and the request
     * headers its results go to (owned; NULL: none), by enum
     * geoip_field. */
    struct geoip *geoip;
    char *geo_headers[GEOIP_NFIELDS];
    /* A request with no byte moving either way for this long ends
     * (Envoy's stream_idle_timeout); 0: never. */
    uint64_t stream_idle_timeout_ms;
    struct stats_block *stats;
    /* Istio's metrics (proxy/istio_metrics.h): the table (borrowed, it
     * outlives every conf; NULL: off), the node's labels and those of a
     * request that reaches no cluster (one reference each). */
    struct series_table *metrics;
    struct series_labels *metrics_src;
    struct series_labels *metrics_nodst;
    /* HBONE endpoints of its clusters (hbone_client.h): the bytes a
     * tunnel holds per direction, how long an unused connection is kept,
     * and this node's baggage (owned; NULL: none). */
    uint32_t hbone_window;
    uint64_t hbone_idle_ms;
    char *hbone_baggage;
    /* The connection limit its connections count against; one
     * reference, NULL: uncounted. Set before the conf is published. */
    struct cx_limit *cx;
};

struct http_listener_conf *http_listener_conf_new(const char *name,
                                                  struct stats_block *stats);
struct http_listener_conf *http_listener_conf_ref(struct http_listener_conf *c);
void http_listener_conf_unref(struct http_listener_conf *c);

/* http_listener_conf_set_routes() publishes r (its reference moves to c) as
 * what new requests route by; requests in flight keep theirs. Any thread. */
void http_listener_conf_set_routes(struct http_listener_conf *c,
                                   struct http_routes *r);

/* http_listener_conf_routes() returns a reference to c's current routes
 * (for the admin API and the control thread). */
struct http_routes *http_listener_conf_routes(struct http_listener_conf *c);

/*
 * An HTTP listener started with fd -1 (http_listener_ops.start) accepts
 * nothing itself: another listener of the same worker (the L4 listener of
 * a port shared by HTTPS and TLS servers) hands it connections it has
 * only peeked at. http_listener_adopt() serves fd (owned from now on) as
 * if it had been accepted: TLS handshake, ALPN, routes; the adopter has
 * counted it as accepted, and cx (NULL: none) is the connection-limit
 * slot it took, which the connection gives back when it closes. peer is
 * the client (the source of a PROXY header the adopter read), direct the
 * socket's own peer when that differs (NULL: the same); both are copied.
 * An adopted connection never reads a PROXY header of its own.
 * http_listener_active() is the number of its connections still open, for the
 * adopter's idleness. Worker thread only.
 */
void http_listener_adopt(struct plistener *pl, int fd,
                         const struct sockaddr_storage *peer, socklen_t len,
                         const struct sockaddr_storage *direct,
                         struct cx_limit *cx);
size_t http_listener_active(const struct plistener *pl);

extern const struct plistener_ops http_listener_ops;

#endif
