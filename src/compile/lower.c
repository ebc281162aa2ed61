/*
 * The bootstrap's listeners, routes and clusters lowered into the model
 * Gateways, VirtualServices and DestinationRules compile into (see
 * lower.h): router rules, clusters built by compile_cluster(), and L4
 * listeners with tcp routes.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "compile/istio.h"
#include "core/err.h"
#include "compile/lower.h"
#include "config/resource.h"
#include "core/stats.h"
#include "proxy/http_listener.h"
#include "proxy/l4_listener.h"
#include "compile/router.h"
#include "proxy/router.h"
#include "upstream/cluster.h"

struct cluster *lower_cluster(const struct bootstrap_cluster *bc, int nworkers,
                              char **err)
{
    struct cluster_spec sp;
    struct res_client_tls tls;

    memset(&sp, 0, sizeof(sp));
    sp.name = bc->name;
    sp.endpoints = bc->endpoints.v;
    sp.nendpoints = bc->endpoints.n;
    sp.http2 = bc->protocol == BOOTSTRAP_UP_HTTP2;
    sp.connect_timeout_ms = (uint64_t)bc->connect_timeout_ms;
    sp.idle_timeout_ms = (uint64_t)bc->idle_timeout_ms;
    sp.max_requests_per_conn = (uint64_t)bc->max_requests_per_connection;
    if (bc->tls.enabled) {
        /* caCertificates, insecureSkipVerify and sni are DestinationRule
         * tls SIMPLE's own keys; no subjectAltNames, so the certificate is
         * checked against the SNI as it always was. */
        memset(&tls, 0, sizeof(tls));
        tls.mode = RES_TLS_SIMPLE;
        tls.ca_certificates = bc->tls.ca_certificates;
        tls.insecure_skip_verify = bc->tls.insecure_skip_verify;
        tls.sni = bc->tls.sni;
        sp.tls = &tls;
    }
    return compile_cluster(NULL, &sp, nworkers, err);
}

struct http_routes *lower_http_routes(const struct bootstrap *bs,
                                      const struct bootstrap_listener *bl,
                                      struct cluster *const *clusters,
                                      char **err)
{
    struct http_routes *r = http_routes_new();
    struct router_rule *rules =
        calloc(bl->routes.n ? bl->routes.n : 1, sizeof(*rules));

    *err = NULL;
    if (r == NULL || rules == NULL)
        goto oom;
    /* Every cluster is reachable by index; routes name them. */
    r->clusters =
        calloc(bs->clusters.n ? bs->clusters.n : 1, sizeof(*r->clusters));
    if (r->clusters == NULL)
        goto oom;
    for (size_t i = 0; i < bs->clusters.n; i++)
        r->clusters[r->nclusters++] = cluster_ref(clusters[i]);
    for (size_t i = 0; i < bl->routes.n; i++) {
        const struct bootstrap_route *br =
            &((const struct bootstrap_route *)bl->routes.v)[i];

        rules[i].host = br->host;
        rules[i].prefix = br->path_prefix;
        rules[i].timeout_ms = (uint64_t)br->timeout_ms;
        /* Validation made sure the cluster exists. */
        for (size_t k = 0; k < bs->clusters.n; k++)
            if (strcmp(bootstrap_cluster_at(bs, k)->name, br->cluster) == 0)
                rules[i].cluster = (int)k;
    }
    r->router = router_build_rules(rules, bl->routes.n, err);
    if (r->router == NULL)
        goto fail;
    free(rules);
    return r;
oom:
    err_set(err, "out of memory");
fail:
    free(rules);
    http_routes_unref(r);
    return NULL;
}

struct l4_listener_conf *lower_tcp_listener(const struct bootstrap *bs,
                                            const struct bootstrap_listener *bl,
                                            struct stats_block *stats,
                                            char **err)
{
    struct l4_listener_conf *c = l4_listener_conf_new(bl->name, stats);
    struct cluster_spec sp;
    struct l4_rule *rule;

    *err = NULL;
    if (c == NULL)
        goto oom;
    c->relay.connect_timeout_ms = (uint64_t)bl->connect_timeout_ms;
    c->relay.connect_attempts = (int)bl->connect_attempts;
    c->relay.idle_timeout_ms = (uint64_t)bl->idle_timeout_ms;
    c->relay.buffer_size = (size_t)bl->buffer_size;
    c->relay.access_log = bs->log.access_log;
    /* The upstreams are the listener's implicit cluster. */
    memset(&sp, 0, sizeof(sp));
    sp.name = bl->name;
    sp.endpoints = bl->upstreams.v;
    sp.nendpoints = bl->upstreams.n;
    sp.connect_timeout_ms = (uint64_t)bl->connect_timeout_ms;
    sp.idle_timeout_ms = (uint64_t)bl->idle_timeout_ms;
    sp.implicit = 1;
    c->clusters = calloc(1, sizeof(*c->clusters));
    if (c->clusters == NULL)
        goto oom;
    c->clusters[0] = compile_cluster(NULL, &sp, stats->nshards, err);
    if (c->clusters[0] == NULL)
        goto fail;
    c->nclusters = 1;
    /* One tcp route, without match blocks: every connection takes it. */
    c->tcp.v = calloc(1, sizeof(*c->tcp.v));
    if (c->tcp.v == NULL)
        goto oom;
    c->tcp.n = 1;
    rule = &c->tcp.v[0];
    rule->dests = calloc(1, sizeof(*rule->dests));
    if (rule->dests == NULL)
        goto oom;
    rule->dests[0].cluster = 0;
    rule->dests[0].weight = 1;
    rule->ndests = 1;
    rule->total = 1;
    return c;
oom:
    err_set(err, "out of memory");
fail:
    l4_listener_conf_unref(c);
    return NULL;
}
