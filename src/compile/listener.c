#include "config.h"

#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/http_listener.h"
#include "proxy/l4_listener.h"
#include "compile/l4.h"
#include "compile/compile.h"
#include "compile/istio.h"
#include "core/err.h"
#include "compile/lower.h"
#include "compile/authz.h"
#include "policy/authz.h"
#include "compile/jwt.h"
#include "policy/jwt.h"
#include "compile/lua.h"
#include "policy/lua_vm.h"
#include "compile/router.h"
#include "proxy/router.h"
#include "config/resource.h"
#include "tls/tls.h"
#include "upstream/cluster.h"

static const enum http_underscore underscore_map[] = {
    [BOOTSTRAP_US_ALLOW] = HTTP_US_ALLOW,
    [BOOTSTRAP_US_REJECT] = HTTP_US_REJECT,
    [BOOTSTRAP_US_DROP] = HTTP_US_DROP,
};

static uint16_t tls_version(int v, uint16_t auto_value)
{
    switch (v) {
    case BOOTSTRAP_TLSV1_2:
        return TLS1_2_VERSION;
    case BOOTSTRAP_TLSV1_3:
        return TLS1_3_VERSION;
    default:
        return auto_value;
    }
}

struct cluster **compile_clusters(const struct bootstrap *bs, int nworkers,
                                  char **err)
{
    struct cluster **out =
        calloc(bs->clusters.n ? bs->clusters.n : 1, sizeof(*out));

    if (out == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < bs->clusters.n; i++) {
        out[i] = lower_cluster(bootstrap_cluster_at(bs, i), nworkers, err);
        if (out[i] == NULL) {
            compile_clusters_free(out, i);
            return NULL;
        }
    }
    return out;
}

void compile_clusters_free(struct cluster **cl, size_t n)
{
    if (cl == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        cluster_unref(cl[i]);
    free(cl);
}

/* The HTTP settings of a listener, from its http block. */
static int http_settings(struct http_listener_conf *c,
                         const struct bootstrap *bs,
                         const struct bootstrap_http *h, int tls,
                         const struct compile_env *env, char **err)
{
    c->downstream.lim.max_head = (size_t)h->max_head_bytes;
    c->downstream.lim.max_headers = (size_t)h->max_headers;
    c->downstream.lim.underscores = underscore_map[h->underscores];
    c->downstream.body_cap = (size_t)h->body_buffer;
    c->downstream.idle_timeout_ms = (uint64_t)h->idle_timeout_ms;
    c->downstream.headers_timeout_ms = (uint64_t)h->headers_timeout_ms;
    c->downstream.tls = tls;
    snprintf(c->downstream.upgrade_types, sizeof(c->downstream.upgrade_types),
             "%s", h->upgrade_types != NULL ? h->upgrade_types : "");
    c->h2.max_concurrent_streams = (uint32_t)h->max_concurrent_streams;
    c->h2.stream_window = (uint32_t)h->stream_window;
    c->h2.connection_window = (uint32_t)h->connection_window;
    c->h2c = h->h2c;
    c->access_log = bs->log.access_log;
    c->xff_trusted_hops = (uint32_t)h->xff_trusted_hops;
    c->stream_idle_timeout_ms = (uint64_t)h->stream_idle_timeout_ms;
    c->hbone_window = (uint32_t)bs->hbone.tunnel_buffer;
    c->hbone_idle_ms = (uint64_t)bs->hbone.idle_timeout_ms;
    if ((c->hbone_baggage = compile_hbone_baggage(bs)) == NULL)
        return err_set(err, "out of memory");
    c->alog_sink = env != NULL ? env->alog_sink : NULL;
    c->spans = env != NULL ? env->spans : NULL;
    c->geoip = env != NULL ? env->geoip : NULL;
    for (int i = 0; c->geoip != NULL && i < GEOIP_NFIELDS; i++)
        if (bs->geoip.headers[i] != NULL && bs->geoip.headers[i][0] != '\0') {
            c->geo_headers[i] = strdup(bs->geoip.headers[i]);
            if (c->geo_headers[i] == NULL)
                return err_set(err, "out of memory");
        }
    c->sample_ppm = (uint32_t)(bs->tracing.sampling * 10000.0 + 0.5);
    if (bs->log.access_log &&
        bs->log.access_log_encoding != BOOTSTRAP_ALOG_STRAIT) {
        /* Checked when the bootstrap was loaded: only memory can fail. */
        c->alog_fmt = bootstrap_alog_compile(&bs->log, err);
        if (c->alog_fmt == NULL)
            return -1;
    }
    return 0;
}

/* A tcp listener runs as an L4 listener: one tcp route to the cluster of
 * its upstreams, on the relay Gateway TCP routes use. */
int compile_l4_alog(struct l4_listener_conf *c, const struct bootstrap *bs,
                    const struct compile_env *env, char **err)
{
    c->relay.alog_sink = env != NULL ? env->alog_sink : NULL;
    if (!bs->log.access_log ||
        bs->log.access_log_encoding == BOOTSTRAP_ALOG_STRAIT)
        return 0;
    /* Checked when the bootstrap was loaded: only memory can fail. */
    c->relay.alog_fmt = bootstrap_alog_compile(&bs->log, err);
    return c->relay.alog_fmt != NULL ? 0 : -1;
}

static int compile_tcp(const struct bootstrap *bs,
                       const struct bootstrap_listener *bl,
                       struct stats_block *stats, const struct compile_env *env,
                       struct compiled_listener *out, char **err)
{
    struct l4_listener_conf *c = lower_tcp_listener(bs, bl, stats, err);

    if (c == NULL)
        return -1;
    if (compile_l4_alog(c, bs, env, err) < 0) {
        l4_listener_conf_unref(c);
        return -1;
    }
    out->ops = &l4_listener_ops;
    out->conf = c;
    return 0;
}

static int compile_tls(const struct bootstrap_listener *bl,
                       struct http_listener_conf *c, char **err);

/* A Gateway listener's TLS: its servers' certificates, Istio's defaults
 * for the rest (TLS 1.2 and 1.3, our suites, h2 and http/1.1). */
static int gateway_tls(const struct gw_listener *g,
                       struct http_listener_conf *c, char **err)
{
    struct tls_server_cert *certs = calloc(g->ncerts, sizeof(*certs));
    struct tls_server_conf tc;
    const char **hosts;
    char desc[128];

    c->tls = NULL;
    if (certs == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < g->ncerts; i++) {
        const struct gw_server *sv = g->cert_server ? g->cert_server[i] : NULL;
        certs[i].cert_path = g->certs[2 * i];
        certs[i].key_path = g->certs[2 * i + 1];
        gw_tls_to_cert(g->cert_tls ? g->cert_tls[i] : NULL, &certs[i]);
        if (sv == NULL || sv->nhosts == 0)
            continue;
        /* The server's hosts pick its certificate and bound what its
         * connections serve; "ns/" says who may bind to it, not a name. */
        hosts = calloc(sv->nhosts, sizeof(*hosts));
        if (hosts == NULL) {
            err_set(err, "out of memory");
            goto done;
        }
        for (size_t k = 0; k < sv->nhosts; k++) {
            const char *slash = strchr(sv->hosts[k], '/');
            hosts[k] = slash != NULL ? slash + 1 : sv->hosts[k];
        }
        certs[i].hosts = hosts;
        certs[i].nhosts = sv->nhosts;
    }
    memset(&tc, 0, sizeof(tc));
    tc.certs = certs;
    tc.ncerts = g->ncerts;
    tc.min_version = TLS1_2_VERSION;
    tc.max_version = TLS1_3_VERSION;
    snprintf(desc, sizeof(desc), "listener %s", g->name);
    c->tls = tls_holder_new(&tc, desc, err);
done:
    for (size_t i = 0; i < g->ncerts; i++)
        free((void *)certs[i].hosts);
    free(certs);
    return c->tls != NULL ? 0 : -1;
}

int compile_gateway_routes(const struct bootstrap *bs,
                           const struct resource_set *set,
                           const struct gw_listener *g,
                           const struct compile_env *env,
                           const struct ident_map *prev, struct ident_map *next,
                           struct http_routes **out, char **err)
{
    struct http_routes *r = http_routes_new();
    struct istio_clusters table;
    struct router_server *servers = NULL;
    struct router_params rp;
    size_t nservers = 0;

    *err = NULL;
    *out = NULL;
    istio_clusters_init(&table, set, env->nworkers, prev, next);
    table.node_ns = bs->node.ns;
    table.dns = env->dns;
    table.identity = env->identity;
    table.trust_domain = bs->trust_domain;
    table.node_locality = bs->node.locality;
    table.node_network = bs->node.network;
    table.node_labels = &bs->node.labels;
    table.credentials_dir = bs->credentials.dir;
    table.outbound_mode = bs->outbound.mode;
    table.listener_port = g->port;
    table.used = env->used;
    if (env->nets != NULL)
        table.nets = *env->nets;
    if (r == NULL)
        goto oom;
    servers = calloc(g->nservers ? g->nservers : 1, sizeof(*servers));
    if (servers == NULL)
        goto oom;
    /* The HTTP servers' hosts only: on a port shared with TLS servers,
     * http routes never bind through a PASSTHROUGH or TCP server. */
    for (size_t i = 0; i < g->nservers; i++) {
        if (g->servers[i].mode != GW_MODE_HTTP &&
            g->servers[i].mode != GW_MODE_HTTPS)
            continue;
        servers[nservers].gateway = g->servers[i].gateway;
        servers[nservers].hosts = (const char *const *)g->servers[i].hosts;
        servers[nservers].nhosts = g->servers[i].nhosts;
        nservers++;
    }
    memset(&rp, 0, sizeof(rp));
    rp.set = set;
    rp.servers = servers;
    rp.nservers = nservers;
    rp.cluster_id = istio_cluster_id;
    rp.ctx = &table;
    rp.node_ns = bs->node.ns;
    rp.node_labels = &bs->node.labels;
    r->router = router_build(&rp, err);
    free(servers);
    if (r->router == NULL)
        goto fail;
    /* AuthorizationPolicies that apply to this node, checked before
     * routing as Envoy's RBAC filter is. */
    r->authz = compile_authz(set, bs->node.ns, &bs->node.labels,
                             ISTIO_ROOT_NAMESPACE, err);
    if (r->authz == NULL && *err != NULL)
        goto fail;
    /* RequestAuthentications, checked before them as Envoy's jwt_authn
     * filter runs before RBAC. */
    r->jwt = jwt_authn_build_with(set, bs->node.ns, &bs->node.labels,
                                  ISTIO_ROOT_NAMESPACE,
                                  env->jwks ? env->jwks->get : NULL,
                                  env->jwks ? env->jwks->arg : NULL, err);
    if (r->jwt == NULL && *err != NULL)
        goto fail;
    /* LuaPolicies, run after routing. Each worker makes its own state on
     * first use; one is made here first, so a script that fails when it
     * loads (or in init_worker) fails the build and never replaces a
     * running configuration. */
    r->lua = compile_lua(bs, set, g, env->dicts, err);
    if (r->lua == NULL && *err != NULL)
        goto fail;
    if (r->lua != NULL &&
        compile_lua_upstreams(r->lua, set, &table, bs->node.ns, err) < 0)
        goto fail;
    if (r->lua != NULL) {
        struct luavm *vm = luavm_new_stop(r->lua, NULL, env->stop, err);
        if (vm == NULL)
            goto fail;
        luavm_free(vm);
        /* strait.http.request reaches the registry's hosts through
         * their clusters, as a VirtualService destination would. */
        if (compile_lua_targets(&table, r) < 0)
            goto oom;
    }
    /* The table's clusters become the routes' (references move). */
    r->clusters = table.v;
    r->nclusters = table.n;
    table.v = NULL;
    table.n = 0;
    istio_clusters_dispose(&table);
    *out = r;
    return 0;
oom:
    err_set(err, "out of memory");
fail:
    istio_clusters_dispose(&table);
    http_routes_unref(r);
    return -1;
}

int compile_gateway_http(const struct bootstrap *bs,
                         const struct resource_set *set,
                         const struct gw_listener *g, struct stats_block *stats,
                         const struct compile_env *env,
                         const struct ident_map *prev, struct ident_map *next,
                         struct http_listener_conf **out, char **err)
{
    struct http_listener_conf *c;
    struct bootstrap_http h;
    struct http_routes *r;

    *err = NULL;
    *out = NULL;
    c = http_listener_conf_new(g->name, stats);
    if (c == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    /* Gateway listeners take the defaults of an http block, and the
     * bootstrap's top-level http section for the keys it has. */
    conf_defaults(&bootstrap_http_section, &h);
    h.headers_timeout_ms = bs->http.headers_timeout_ms;
    h.stream_idle_timeout_ms = bs->http.stream_idle_timeout_ms;
    if (http_settings(c, bs, &h, g->tls, env, err) < 0) {
        conf_dispose(&bootstrap_http_section, &h);
        goto fail;
    }
    conf_dispose(&bootstrap_http_section, &h);
    /* Istio's gatewayTopology is every Gateway listener's. */
    c->xff_trusted_hops = (uint32_t)bs->topology.num_trusted_proxies;
    if (bs->topology.proxy_protocol.mark.line > 0)
        c->proxy_protocol =
            (uint32_t)bs->topology.proxy_protocol.max_header_bytes;
    c->xfcc = bs->topology.forward_client_cert;
    c->https_redirect = g->https_redirect && !g->tls;
    c->tls_permissive = g->permissive;
    c->port = g->port;
    if (compile_gateway_routes(bs, set, g, env, prev, next, &r, err) < 0)
        goto fail;
    http_listener_conf_set_routes(c, r);
    if (g->tls && gateway_tls(g, c, err) < 0)
        goto fail;
    *out = c;
    return 0;
fail:
    http_listener_conf_unref(c);
    return -1;
}

int compile_gateway(const struct bootstrap *bs, const struct resource_set *set,
                    const struct gw_listener *g, struct stats_block *stats,
                    const struct compile_env *env, const struct ident_map *prev,
                    struct ident_map *next, struct compiled_listener *out,
                    char **err)
{
    struct http_listener_conf *c;

    *err = NULL;
    if (g->l4)
        return compile_l4(bs, set, g, stats, env, prev, next, out, err);
    if (compile_gateway_http(bs, set, g, stats, env, prev, next, &c, err) < 0)
        return -1;
    out->ops = &http_listener_ops;
    out->conf = c;
    return 0;
}

static int compile_tls(const struct bootstrap_listener *bl,
                       struct http_listener_conf *c, char **err)
{
    const struct bootstrap_tls *t = &bl->tls;
    struct tls_server_cert *certs = calloc(t->certificates.n, sizeof(*certs));
    struct tls_server_conf tc;
    char desc[128];

    if (certs == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < t->certificates.n; i++) {
        const struct bootstrap_cert *bc =
            &((const struct bootstrap_cert *)t->certificates.v)[i];
        certs[i].cert_path = bc->cert;
        certs[i].key_path = bc->key;
    }
    memset(&tc, 0, sizeof(tc));
    tc.certs = certs;
    tc.ncerts = t->certificates.n;
    tc.min_version = tls_version(t->min_version, TLS1_2_VERSION);
    tc.max_version = tls_version(t->max_version, TLS1_3_VERSION);
    tc.ciphers = (const char *const *)t->cipher_suites.v;
    tc.nciphers = t->cipher_suites.n;
    tc.alpn = (const char *const *)t->alpn.v;
    tc.nalpn = t->alpn.n;
    snprintf(desc, sizeof(desc), "listener %s", bl->name);
    c->tls = tls_holder_new(&tc, desc, err);
    free(certs);
    return c->tls != NULL ? 0 : -1;
}

static int compile_http(const struct bootstrap *bs,
                        const struct bootstrap_listener *bl,
                        struct cluster **clusters, struct stats_block *stats,
                        const struct compile_env *env,
                        struct compiled_listener *out, char **err)
{
    struct http_listener_conf *c = http_listener_conf_new(bl->name, stats);
    struct http_routes *r;

    if (c == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    if (http_settings(c, bs, &bl->http, bl->tls.certificates.n > 0, env, err) <
        0)
        goto fail;
    /* gatewayTopology is the Gateway listeners'; a bootstrap listener
     * passes X-Forwarded-Client-Cert on as it always did. */
    c->xfcc = HTTP_XFCC_ALWAYS_FORWARD_ONLY;
    /* The routes, lowered into a router as a Gateway listener's are.
     * Nothing but a new listener changes them, so they are set before any
     * worker sees the conf. */
    r = lower_http_routes(bs, bl, clusters, err);
    if (r == NULL)
        goto fail;
    http_listener_conf_set_routes(c, r);
    if (bl->tls.certificates.n > 0 && compile_tls(bl, c, err) < 0)
        goto fail;
    out->ops = &http_listener_ops;
    out->conf = c;
    return 0;
fail:
    http_listener_conf_unref(c);
    return -1;
}

int compile_listener(const struct bootstrap *bs,
                     const struct bootstrap_listener *bl,
                     struct cluster **clusters, struct stats_block *stats,
                     const struct compile_env *env,
                     struct compiled_listener *out, char **err)
{
    *err = NULL;
    if (bl->protocol == BOOTSTRAP_HTTP)
        return compile_http(bs, bl, clusters, stats, env, out, err);
    return compile_tcp(bs, bl, stats, env, out, err);
}

int compile_tls_check(const struct compiled_listener *cl, char **err)
{
    const struct http_listener_conf *c;

    *err = NULL;
    switch (cl->ops->kind) {
    case PLISTENER_L4:
        return l4_listener_tls_check(cl->conf, err);
    case PLISTENER_HTTP:
        c = cl->conf;
        return c->tls != NULL ? tls_holder_check(c->tls, err) : 0;
    }
    return 0;
}
