#ifndef STRAIT_COMPILE_COMPILE_H
#define STRAIT_COMPILE_COMPILE_H

#include <stddef.h>
#include <stdint.h>

#include "config/bootstrap.h"

struct cluster;
struct net_inputs;
struct stats_block;
struct geoip;
struct plistener_ops;

/*
 * Compiling the bootstrap into what workers run: a listener's conf (for
 * its plistener_ops) and the clusters HTTP routes send to. Runs on the
 * main thread; the results are immutable and reference-counted.
 */
struct compiled_listener {
    const struct plistener_ops *ops;
    void *conf; /* one reference: ops->conf_ref, ops->conf_unref */
};

/* compile_clusters() builds one cluster per bootstrap cluster, in order;
 * NULL with *err on failure. Free with compile_clusters_free(). */
struct cluster **compile_clusters(const struct bootstrap *bs, int nworkers,
                                  char **err);
void compile_clusters_free(struct cluster **cl, size_t n);

/* compile_listener() builds bl's conf; -1 with an allocated *err (e.g. a
 * certificate that does not load). */
struct compile_env;
struct lsink;
struct spanq;

int compile_listener(const struct bootstrap *bs,
                     const struct bootstrap_listener *bl,
                     struct cluster **clusters, struct stats_block *stats,
                     const struct compile_env *env,
                     struct compiled_listener *out, char **err);

struct gw_listener;
struct http_routes;
struct resource_set;
struct ident_map;
struct istio_used;
struct ssl_st;
struct x509_st;

/*
 * What compiling reads from the control loop's caches. compile/ never
 * names control/: the loop hands these function tables in, and a NULL
 * table means the input is not there (no DNS cache, no CA, no JWKS).
 */

/* DNS: lookup() calls each(ctx, ip) for every address known for name now
 * and returns how many; a name seen for the first time is resolved in the
 * background (none known yet). */
struct compile_dns {
    size_t (*lookup)(void *arg, const char *name,
                     void (*each)(void *ctx, const char *ip), void *ctx);
    /* The same, the answers kept min_ttl_ms at least (hostname network
     * gateways); NULL: lookup() is used. */
    size_t (*lookup_min)(void *arg, const char *name, uint64_t min_ttl_ms,
                         void (*each)(void *ctx, const char *ip), void *ctx);
    void *arg;
};

/* This node's mesh identity: current() returns 0 before the first
 * credential, else 1 with *root the root certificate of the current one
 * (NULL when its chain has none) with a reference the caller drops
 * (X509_free); ssl() is a certificate callback that presents the current
 * credential (arg: arg, which outlives the contexts built). */
struct compile_identity {
    int (*current)(void *arg, struct x509_st **root);
    int (*ssl)(struct ssl_st *ssl, void *arg);
    void *arg;
    /* The roots of linked sites' trust bundles (MeshLink), trusted beside
     * the mesh root by ISTIO_MUTUAL clusters, and a digest of them that
     * is part of those clusters' identity; NULL: none. Borrowed for the
     * build. */
    const struct stack_st_X509 *link_roots;
    const char *link_roots_pin;
    /* The mesh's roots, when they are not just the one the node's
     * certificate chains to: every root of ca.istiod.rootCert, which
     * Istio's proxies trust as one bundle (the old and the new root
     * during a rotation, then the new one only). ISTIO_MUTUAL servers and
     * clusters trust exactly these instead of current()'s root; the
     * digest is part of their identity, so a change of the file rebuilds
     * them. NULL: current()'s root. Borrowed for the build. */
    const struct stack_st_X509 *mesh_roots;
    const char *mesh_roots_pin;
};

/* JWKS: get() returns the last good document of a jwksUri (owned by the
 * cache, valid until control returns to the loop) and its length, or
 * NULL when none has arrived yet. */
struct compile_jwks {
    const char *(*get)(void *arg, const char *uri, int64_t timeout_ms,
                       size_t *n);
    void *arg;
};

/* What compiling Gateway routes reads besides resources. */
struct compile_env {
    int nworkers;
    const struct compile_dns *dns;           /* NULL: names used as IPs */
    const struct compile_identity *identity; /* NULL: no CA */
    const struct compile_jwks *jwks; /* http(s) jwksUri documents; NULL */
    /* What the routes' clusters were built from (istio.h), recorded for
     * the routes' identity; NULL: not recorded. */
    struct istio_used *used;
    /* Where access-log lines go (the process's writer); NULL: straight
     * to the log. */
    struct lsink *alog_sink;
    /* The exporter's span queue; NULL: no tracing. */
    struct spanq *spans;
    /* LuaPolicy shared dicts (compile_inputs.dicts); NULL: new ones. */
    struct luadict_set *dicts;
    /* GeoIP databases (borrowed; outlive every snapshot); NULL: none. */
    struct geoip *geoip;
    /* The networks: node network, meshNetworks, gateways added at run
     * time (compile/network.h); NULL: one network. */
    const struct net_inputs *nets;
    /* Set (atomically, by a signal handler) once the process is told to
     * stop: LuaPolicy top-level code run for the build raises "process
     * exiting" then, so the build ends. NULL: none. */
    const int *stop;
};

struct l4_listener_conf;

/* compile_l4_alog() gives an L4 listener's relay the access log's writer
 * and its Envoy format (log.accessLogEncoding TEXT or JSON); -1 with an
 * allocated *err when memory is short. */
int compile_l4_alog(struct l4_listener_conf *c, const struct bootstrap *bs,
                    const struct compile_env *env, char **err);

/* compile_gateway() builds the HTTP proxy of a Gateway listener with its
 * first routes (compile_gateway_routes()). */
int compile_gateway(const struct bootstrap *bs, const struct resource_set *set,
                    const struct gw_listener *g, struct stats_block *stats,
                    const struct compile_env *env, const struct ident_map *prev,
                    struct ident_map *next, struct compiled_listener *out,
                    char **err);

/* compile_gateway_http() builds the HTTP proxy conf of a Gateway
 * listener's HTTP and HTTPS servers (their certificates, their first
 * routes); compile_l4() uses it for the HTTPS servers of a port shared
 * with TLS servers. *out gets one reference; -1 with an allocated *err. */
struct http_listener_conf;
int compile_gateway_http(const struct bootstrap *bs,
                         const struct resource_set *set,
                         const struct gw_listener *g, struct stats_block *stats,
                         const struct compile_env *env,
                         const struct ident_map *prev, struct ident_map *next,
                         struct http_listener_conf **out, char **err);

/* compile_gateway_routes() builds what a Gateway listener routes by: the
 * router of its VirtualServices and the clusters they send to, reusing the
 * clusters of prev and next whose identity is unchanged (see
 * istio_clusters) and adding the rest to next. *out gets one reference;
 * -1 with an allocated *err. */
int compile_gateway_routes(const struct bootstrap *bs,
                           const struct resource_set *set,
                           const struct gw_listener *g,
                           const struct compile_env *env,
                           const struct ident_map *prev, struct ident_map *next,
                           struct http_routes **out, char **err);

/* compile_tls_check() reloads changed certificate files of conf (an HTTP
 * listener's) ; see tls_holder_check(). 0 for other kinds. */
int compile_tls_check(const struct compiled_listener *cl, char **err);

#endif
