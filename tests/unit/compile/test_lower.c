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

#include "compile/lower.h"
#include "config/bootstrap.h"
#include "core/addr.h"
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

static const char CLUSTERS[] =
    "clusters:\n"
    "  - name: plain\n"
    "    endpoints: [127.0.0.1:8080, 127.0.0.1:8081]\n"
    "    connectTimeout: 2s\n"
    "    idleTimeout: 90s\n"
    "    maxRequestsPerConnection: 7\n"
    "  - name: secure\n"
    "    endpoints: [127.0.0.1:8443]\n"
    "    protocol: http2\n"
    "    tls: {enabled: true, sni: api.internal, caCertificates: " ROOT "}\n";

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_defaults),
        cmocka_unit_test(test_cluster_tls),
        cmocka_unit_test(test_cluster_tls_error),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
