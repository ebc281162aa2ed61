/*
 * Unit tests of src/compile/lower.c: the bootstrap's clusters, routes and
 * listeners lowered into the model Gateways, VirtualServices and
 * DestinationRules compile into.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include "compile/compile.h"
#include "compile/lower.h"
#include "config/bootstrap.h"
#include "core/addr.h"
#include "core/arena.h"
#include "http/http.h"
#include "proxy/stats.h"
#include "proxy/http_listener.h"
#include "proxy/l4_listener.h"
#include "proxy/router.h"
#include "upstream/cluster.h"

#define ROOT SRCDIR "/tests/data/istio-samples/certs/root-cert.pem"

static struct bootstrap *parse(const char *text)
{
    char *err = NULL;
    struct bootstrap *bs = bootstrap_parse(text, strlen(text), "b.yaml", &err);

    if (bs == NULL)
        fail_msg("bootstrap_parse: %s", err ? err : "?");
    free(err);
    return bs;
}

#define CLUSTERS_YAML                                                          \
    "clusters:\n"                                                              \
    "  - name: plain\n"                                                        \
    "    endpoints: [127.0.0.1:8080, 127.0.0.1:8081]\n"                        \
    "    connectTimeout: 2s\n"                                                 \
    "    idleTimeout: 90s\n"                                                   \
    "    maxRequestsPerConnection: 7\n"                                        \
    "  - name: secure\n"                                                       \
    "    endpoints: [127.0.0.1:8443]\n"                                        \
    "    protocol: http2\n"                                                    \
    "    tls: {enabled: true, sni: api.internal, caCertificates: " ROOT "}\n"

static const char CLUSTERS[] = CLUSTERS_YAML;

/* A bootstrap cluster is built by the one cluster builder with the
 * bootstrap's defaults: its protocol and timeouts, round robin, and none
 * of the limits or outlier detection a DestinationRule could add. */
static void test_cluster_defaults(void **state)
{
    struct bootstrap *bs = parse(CLUSTERS);
    char *err = NULL;
    struct cluster *c = lower_cluster(bootstrap_cluster_at(bs, 0), 2, &err);
    char as[ADDR_STRLEN];

    (void)state;
    assert_non_null(c);
    assert_null(err);
    assert_string_equal(c->name, "plain");
    assert_int_equal(c->nendpoints, 2);
    assert_string_equal(addr_format(&c->endpoints[1], as, sizeof(as)),
                        "127.0.0.1:8081");
    assert_int_equal(c->protocol, CLUSTER_HTTP1);
    assert_int_equal(c->origin, CLUSTER_REGISTRY);
    assert_int_equal(c->lb, CLUSTER_LB_ROUND_ROBIN);
    assert_int_equal(c->h1.connect_timeout_ms, 2000);
    assert_int_equal(c->h2.connect_timeout_ms, 2000);
    assert_int_equal(c->h1.idle_timeout_ms, 90000);
    assert_int_equal(c->h2.idle_timeout_ms, 90000);
    assert_int_equal(c->max_requests_per_conn, 7);
    assert_int_equal(c->max_requests, 0);
    assert_int_equal(c->max_retries, 0);
    assert_int_equal(c->max_connections, 0);
    assert_int_equal(c->max_pending, 0);
    assert_null(c->od);
    assert_null(c->hash);
    assert_null(c->tls);
    assert_false(c->tls_error);
    assert_false(c->implicit);
    cluster_unref(c);
    bootstrap_free(bs);
}

/* Its tls block is DestinationRule tls SIMPLE: a client context with the
 * cluster's SNI, offering h2 for protocol http2. */
static void test_cluster_tls(void **state)
{
    struct bootstrap *bs = parse(CLUSTERS);
    char *err = NULL;
    struct cluster *c = lower_cluster(bootstrap_cluster_at(bs, 1), 2, &err);

    (void)state;
    assert_non_null(c);
    assert_int_equal(c->protocol, CLUSTER_HTTP2);
    assert_non_null(c->tls);
    assert_false(c->tls_error);
    assert_false(c->tls_mesh);
    assert_string_equal(c->sni, "api.internal");
    cluster_unref(c);
    bootstrap_free(bs);
}

/* A CA file that does not load fails the bootstrap, naming the cluster,
 * instead of a cluster that refuses requests (a Gateway's way). */
static void test_cluster_tls_error(void **state)
{
    static const char text[] =
        "clusters:\n"
        "  - name: broken\n"
        "    endpoints: [127.0.0.1:8443]\n"
        "    tls: {enabled: true, caCertificates: /nonexistent/ca.pem}\n";
    struct bootstrap *bs = parse(text);
    char *err = NULL;
    struct cluster *c = lower_cluster(bootstrap_cluster_at(bs, 0), 2, &err);

    (void)state;
    assert_null(c);
    assert_non_null(err);
    assert_non_null(strstr(err, "cluster broken: "));
    assert_non_null(strstr(err, "/nonexistent/ca.pem"));
    free(err);
    bootstrap_free(bs);
}

/* An http listener whose routes name hosts in an order a virtual-host
 * table would not keep by itself: the first matching route wins. */
static const char HTTP_BS[] =
    "listeners:\n"
    "  - name: web\n"
    "    address: 127.0.0.1:18080\n"
    "    protocol: http\n"
    "    routes:\n"
    "      - {host: \"*\", pathPrefix: /a, cluster: secure}\n"
    "      - {host: Foo.Example.com, pathPrefix: /, cluster: plain, "
    "timeout: 3s}\n"
    "      - {host: \"*.example.com\", pathPrefix: /b, cluster: secure, "
    "timeout: 250ms}\n"
    "      - {host: \"*\", pathPrefix: /, cluster: plain}\n" CLUSTERS_YAML;

struct fx {
    struct bootstrap *bs;
    struct cluster **clusters;
    struct http_routes *r;
    struct arena arena;
};

static struct fx *fx_new(const char *text)
{
    struct fx *f = calloc(1, sizeof(*f));
    char *err = NULL;

    assert_non_null(f);
    f->bs = parse(text);
    f->clusters = compile_clusters(f->bs, 2, &err);
    assert_non_null(f->clusters);
    f->r = lower_http_routes(f->bs, bootstrap_listener_at(f->bs, 0),
                             f->clusters, &err);
    if (f->r == NULL)
        fail_msg("lower_http_routes: %s", err ? err : "?");
    arena_init(&f->arena, 4096);
    return f;
}

static void fx_free(struct fx *f)
{
    arena_dispose(&f->arena);
    http_routes_unref(f->r);
    compile_clusters_free(f->clusters, f->bs->clusters.n);
    bootstrap_free(f->bs);
    free(f);
}

/* route() returns the action a request takes, or NULL (404). */
static const struct route_action *route(struct fx *f, const char *authority,
                                        const char *path,
                                        struct route_result *res)
{
    struct http_request q;

    memset(&q, 0, sizeof(q));
    q.method = slice_of("GET");
    q.scheme = slice_of("http");
    q.authority = slice_of(authority);
    q.path = slice_of(path);
    return router_match(f->r->router, &q, 0, 12345, &f->arena, res);
}

/* The name of the cluster a request is sent to, or "404". */
static const char *where(struct fx *f, const char *authority, const char *path)
{
    struct route_result res;
    const struct route_action *a = route(f, authority, path, &res);

    if (a == NULL)
        return "404";
    assert_int_equal(a->kind, ROUTE_FORWARD);
    assert_int_equal(res.dest, 0);
    return f->r->clusters[a->dests[res.dest].cluster]->name;
}

/* The routes lower into the one router: every bootstrap cluster by index,
 * one rule per route with its prefix, cluster and timeout, and nothing a
 * VirtualService could add (no retries, faults, mirror, CORS, headers). */
static void test_http_routes_fields(void **state)
{
    struct fx *f = fx_new(HTTP_BS);
    struct route_result res;
    struct router_stats st;
    const struct route_action *a;

    (void)state;
    assert_int_equal(f->r->nclusters, 2);
    assert_string_equal(f->r->clusters[0]->name, "plain");
    assert_string_equal(f->r->clusters[1]->name, "secure");
    assert_ptr_equal(f->r->clusters[0], f->clusters[0]);
    assert_null(f->r->authz);
    assert_null(f->r->jwt);
    router_get_stats(f->r->router, &st);
    assert_int_equal(st.actions, 4);
    /* Three virtual hosts: "*", foo.example.com and *.example.com. */
    assert_int_equal(st.vhosts, 3);

    a = route(f, "foo.example.com", "/x", &res);
    assert_non_null(a);
    assert_int_equal(a->rule, 1);
    assert_int_equal(a->ndests, 1);
    assert_int_equal(a->dests[0].cluster, 0);
    assert_int_equal(a->timeout_ms, 3000);
    assert_int_equal(a->retry.attempts, 0);
    assert_int_equal(a->retry.on, 0);
    assert_int_equal(a->fault.delay_ppm, 0);
    assert_int_equal(a->fault.abort_ppm, 0);
    assert_false(a->mirror.enabled);
    assert_null(a->cors);
    assert_null(a->vs); /* the access log's route stays empty */
    assert_int_equal(res.uri_kind, ROUTE_MATCH_PREFIX);
    assert_int_equal(res.uri_prefix_len, 1);
    assert_false(res.mirror);
    assert_int_equal(res.delay_ms, 0);
    assert_int_equal(res.abort_status, 0);

    a = route(f, "a.example.com:8080", "/b/c", &res);
    assert_non_null(a);
    assert_int_equal(a->rule, 2);
    assert_int_equal(a->dests[0].cluster, 1);
    assert_int_equal(a->timeout_ms, 250);
    a = route(f, "other", "/", &res);
    assert_non_null(a);
    assert_int_equal(a->rule, 3);
    assert_int_equal(a->timeout_ms, 0);
    fx_free(f);
}

/* First match wins over the routes as listed, whatever hosts they name:
 * a "*" route before a host's own routes still takes its paths. */
static void test_http_routes_first_match(void **state)
{
    struct fx *f = fx_new(HTTP_BS);

    (void)state;
    assert_string_equal(where(f, "foo.example.com", "/a/1"), "secure");
    assert_string_equal(where(f, "FOO.example.com:80", "/x"), "plain");
    assert_string_equal(where(f, "foo.example.com", "/b"), "plain");
    assert_string_equal(where(f, "bar.example.com", "/b"), "secure");
    assert_string_equal(where(f, "bar.example.com", "/a"), "secure");
    assert_string_equal(where(f, "bar.example.com", "/c"), "plain");
    assert_string_equal(where(f, "a.b.example.com", "/bee"), "secure");
    /* "*.example.com" needs a label before the suffix. */
    assert_string_equal(where(f, "example.com", "/b"), "plain");
    assert_string_equal(where(f, "", "/b"), "plain");
    assert_string_equal(where(f, "[::1]:8080", "/a"), "secure");
    fx_free(f);
}

/* No route for a request: NULL, which the pipeline answers 404 NR. */
static void test_http_routes_no_match(void **state)
{
    static const char text[] =
        "listeners:\n"
        "  - name: web\n"
        "    address: 127.0.0.1:18080\n"
        "    protocol: http\n"
        "    routes:\n"
        "      - {host: api.example.com, pathPrefix: /v1/, cluster: plain}\n"
        "      - {host: \"*.example.org\", pathPrefix: /, cluster: "
        "plain}\n" CLUSTERS_YAML;
    struct fx *f = fx_new(text);

    (void)state;
    assert_string_equal(where(f, "api.example.com", "/v1/x"), "plain");
    assert_string_equal(where(f, "api.example.com", "/v1"), "404");
    assert_string_equal(where(f, "api.example.com", "/v2/x"), "404");
    assert_string_equal(where(f, "www.example.com", "/v1/x"), "404");
    assert_string_equal(where(f, "x.example.org", "/"), "plain");
    assert_string_equal(where(f, "example.org", "/"), "404");
    fx_free(f);
}

/* A tcp listener lowers into an L4 listener: no ClientHello inspection,
 * one tcp route without match blocks to one implicit cluster of its
 * upstreams, and the relay with its own keys. */
static void test_tcp_listener(void **state)
{
    static const char text[] =
        "log: {accessLog: false}\n"
        "listeners:\n"
        "  - name: pg\n"
        "    address: 127.0.0.1:16432\n"
        "    upstreams: [127.0.0.1:5432, 127.0.0.1:5433]\n"
        "    connectTimeout: 750ms\n"
        "    connectAttempts: 5\n"
        "    idleTimeout: 2m\n"
        "    bufferSize: 16KiB\n";
    struct bootstrap *bs = parse(text);
    struct stats_block *st = proxy_stats_new("pg", 3);
    char *err = NULL;
    struct l4_listener_conf *c;
    const struct cluster *cl;
    char as[ADDR_STRLEN];

    (void)state;
    assert_non_null(st);
    c = lower_tcp_listener(bs, bootstrap_listener_at(bs, 0), st, &err);
    assert_non_null(c);
    assert_null(err);
    assert_string_equal(c->name, "pg");
    assert_ptr_equal(c->stats, st);
    assert_int_equal(st->refs, 2);
    assert_false(c->inspect);
    assert_int_equal(c->nsni, 0);
    assert_int_equal(c->nservers, 0);
    assert_int_equal(c->passthrough.n, 0);
    assert_null(c->authz);
    assert_null(c->http);
    /* The relay: the listener's keys. */
    assert_int_equal(c->relay.connect_timeout_ms, 750);
    assert_int_equal(c->relay.connect_attempts, 5);
    assert_int_equal(c->relay.idle_timeout_ms, 120000);
    assert_int_equal(c->relay.buffer_size, 16 * 1024);
    assert_false(c->relay.access_log);
    assert_ptr_equal(c->relay.stats, st);
    assert_string_equal(c->relay.name, "pg");
    /* One route, every connection, to the one cluster. */
    assert_int_equal(c->tcp.n, 1);
    assert_false(c->tcp.by_local);
    assert_int_equal(c->tcp.v[0].nblocks, 0);
    assert_null(c->tcp.v[0].route);
    assert_int_equal(c->tcp.v[0].ndests, 1);
    assert_int_equal(c->tcp.v[0].dests[0].cluster, 0);
    assert_true(c->tcp.v[0].total > 0);
    assert_ptr_equal(l4_rule_match(&c->tcp, NULL, NULL), &c->tcp.v[0]);
    /* The cluster of its upstreams, in order, balanced round robin. */
    assert_int_equal(c->nclusters, 1);
    cl = c->clusters[0];
    assert_string_equal(cl->name, "pg");
    assert_true(cl->implicit);
    assert_int_equal(cl->origin, CLUSTER_REGISTRY);
    assert_int_equal(cl->lb, CLUSTER_LB_ROUND_ROBIN);
    assert_int_equal(cl->nworkers, 3);
    assert_int_equal(cl->nendpoints, 2);
    assert_string_equal(addr_format(&cl->endpoints[0], as, sizeof(as)),
                        "127.0.0.1:5432");
    assert_string_equal(addr_format(&cl->endpoints[1], as, sizeof(as)),
                        "127.0.0.1:5433");
    assert_null(cl->tls);
    assert_false(cl->tls_error);
    l4_listener_conf_unref(c);
    assert_int_equal(st->refs, 1);
    stats_block_unref(st);
    bootstrap_free(bs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_defaults),
        cmocka_unit_test(test_cluster_tls),
        cmocka_unit_test(test_cluster_tls_error),
        cmocka_unit_test(test_http_routes_fields),
        cmocka_unit_test(test_http_routes_first_match),
        cmocka_unit_test(test_http_routes_no_match),
        cmocka_unit_test(test_tcp_listener),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
