#ifndef STRAIT_PROXY_HTTP_PROXY_H
#define STRAIT_PROXY_HTTP_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "core/bufpool.h"
#include "core/list.h"
#include "http1/h1_client.h"
#include "http1/h1_server.h"
#include "http2/h2_server.h"
#include "proxy/plistener.h"
#include "upstream/cluster.h"

struct event;
struct event_base;
struct listener_stats;
struct tls_holder;
struct router;
struct ssl_ctx_st;

/* A static route: host (exact, *.suffix or *) and path prefix. */
struct http_route {
    char *host;
    char *prefix;
    size_t prefix_len;
    size_t cluster; /* index into the conf's clusters */
    uint64_t timeout_ms; /* 0: none */
};

/*
 * What an HTTP listener does, compiled from configuration. Immutable once
 * built, shared by every worker, reference-counted with atomics.
 */
struct http_proxy_conf {
    int refs;
    char *name;
    struct h1_server_conf h1s;
    struct h1_client_conf h1c;
    struct h2_settings h2;
    int h2c;
    struct http_route *routes;
    size_t nroutes;
    struct cluster **clusters; /* one reference each */
    size_t nclusters;
    struct tls_holder *tls; /* NULL: plaintext */
    struct router *router;  /* Gateway listeners: VirtualService routes */
    uint32_t port;          /* the port requests come in on (routing) */
    int https_redirect;     /* every request is redirected to https */
    int access_log;
    uint32_t xff_trusted_hops;
    struct listener_stats *stats;
};

struct http_proxy_conf *http_proxy_conf_new(const char *name,
                                            struct listener_stats *stats);
struct http_proxy_conf *http_proxy_conf_ref(struct http_proxy_conf *c);
void http_proxy_conf_unref(struct http_proxy_conf *c);

/* http_proxy_route() returns the first route matching authority and path,
 * or NULL (404). */
const struct http_route *http_proxy_route(const struct http_proxy_conf *c,
                                          struct slice authority,
                                          struct slice path);

extern const struct plistener_ops http_proxy_ops;

#endif
