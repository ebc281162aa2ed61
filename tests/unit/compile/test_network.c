/*
 * Unit tests of src/compile/network.c: the network of an endpoint, the
 * gateway table (meshNetworks, Services labelled topology.istio.io/network,
 * gateways added at run time, hostnames through DNS with the 30 s minimum
 * TTL) and istiod's split horizon (weights, scale factor, skip rules,
 * order); and of what src/compile/cluster.c makes of it: a cluster's
 * endpoints, their networks and gateways.
 */
#include "config.h"

#include <arpa/inet.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include "compile/compile.h"
#include "compile/istio.h"
#include "compile/network.h"
#include "config/bootstrap.h"
#include "config/resource.h"
#include "core/addr.h"
#include "core/buf.h"
#include "upstream/cluster.h"

static struct addr ip(const char *s, int port)
{
    struct addr a;

    assert_int_equal(addr_literal(&a, s, port), 0);
    return a;
}

static const char *fmt(const struct addr *a)
{
    static char b[4][ADDR_STRLEN];
    static int i;

    i = (i + 1) % 4;
    return addr_format(a, b[i], sizeof(b[i]));
}

/* A table of gateways given as run-time entries (the MeshLink API). */
static void table(struct net_table *t, const char *node,
                  const struct net_gateway *gw, size_t n, unsigned families)
{
    struct net_inputs in = {node, NULL, gw, n};

    assert_int_equal(net_table_build(t, &in, NULL, NULL, NULL, families), 0);
}

static struct net_ep ep(const char *a, uint32_t w, const char *net,
                        const char *loc)
{
    struct net_ep e;

    e.addr = ip(a, 8080);
    e.weight = w;
    e.network = net;
    e.locality = loc;
    return e;
}

static void test_no_gateway_keeps_endpoints(void **state)
{
    struct net_table t;
    struct net_ep in[3] = {ep("10.0.0.2", 1, "a", "r/z1"),
                           ep("10.9.0.1", 4, "b", "r/z2"),
                           ep("10.0.0.1", 1, "a", "r/z1")};
    struct net_split_result r;

    (void)state;
    table(&t, "a", NULL, 0, NET_V4 | NET_V6);
    assert_int_equal(net_split(&t, in, 3, 0, &r), 0);
    /* Not multi-network: unchanged, in order, not regrouped. */
    assert_int_equal(r.n, 3);
    assert_string_equal(fmt(&r.v[0].addr), "10.0.0.2:8080");
    assert_string_equal(fmt(&r.v[1].addr), "10.9.0.1:8080");
    assert_int_equal(r.v[1].weight, 4);
    assert_int_equal(r.v[1].gw, -1);
    assert_string_equal(fmt(&r.v[2].addr), "10.0.0.1:8080");
    assert_int_equal(r.skipped_mtls, 0);
    net_split_dispose(&r);
    net_table_dispose(&t);
}

static void test_remote_endpoints_become_their_gateway(void **state)
{
    static const struct net_gateway gw[] = {
        {"b", "192.0.2.1", 15443, "meshNetworks", NULL}};
    struct net_table t;
    struct net_ep in[4] = {ep("10.0.0.1", 1, "a", ""),
                           ep("10.9.0.1", 2, "b", ""),
                           ep("10.9.0.2", 3, "b", ""),
                           /* A network without gateways is reached directly. */
                           ep("10.7.0.1", 1, "c", "")};
    struct net_split_result r;

    (void)state;
    table(&t, "a", gw, 1, NET_V4);
    assert_int_equal(net_split(&t, in, 4, NET_SPLIT_MTLS, &r), 0);
    assert_int_equal(r.n, 3);
    assert_string_equal(fmt(&r.v[0].addr), "10.0.0.1:8080");
    assert_int_equal(r.v[0].gw, -1);
    assert_string_equal(fmt(&r.v[1].addr), "10.7.0.1:8080");
    assert_int_equal(r.v[1].gw, -1);
    /* One endpoint for the gateway, the weights summed (2 + 3). */
    assert_string_equal(fmt(&r.v[2].addr), "192.0.2.1:15443");
    assert_int_equal(r.v[2].weight, 5);
    assert_int_equal(r.v[2].gw, 0);
    assert_string_equal(r.v[2].network, "b");
    assert_string_equal(t.gw[0].source, "meshNetworks");
    net_split_dispose(&r);
    net_table_dispose(&t);
}

static void test_scale_factor_splits_evenly(void **state)
{
    /* Two gateways for b, three for c: the scale factor is lcm(2, 3). */
    static const struct net_gateway gw[] = {
        {"c", "192.0.2.33", 15443, "x", NULL},
        {"b", "192.0.2.22", 15443, "x", NULL},
        {"c", "192.0.2.31", 15443, "x", NULL},
        {"b", "192.0.2.21", 15443, "x", NULL},
        {"c", "192.0.2.32", 15443, "x", NULL}};
    struct net_table t;
    struct net_ep in[2] = {ep("10.9.0.1", 1, "b", ""),
                           ep("10.8.0.1", 2, "c", "")};
    struct net_split_result r;

    (void)state;
    table(&t, "a", gw, 5, NET_V4);
    assert_int_equal(net_scale_factor(&t), 6);
    assert_int_equal(net_split(&t, in, 2, NET_SPLIT_MTLS, &r), 0);
    assert_int_equal(r.n, 5);
    /* Sorted by network, then address, whatever the declared order. */
    assert_string_equal(fmt(&r.v[0].addr), "192.0.2.21:15443");
    assert_string_equal(fmt(&r.v[1].addr), "192.0.2.22:15443");
    assert_string_equal(fmt(&r.v[2].addr), "192.0.2.31:15443");
    assert_string_equal(fmt(&r.v[3].addr), "192.0.2.32:15443");
    assert_string_equal(fmt(&r.v[4].addr), "192.0.2.33:15443");
    /* b: 1 x 6 / 2 each; c: 2 x 6 / 3 each. */
    assert_int_equal(r.v[0].weight, 3);
    assert_int_equal(r.v[1].weight, 3);
    assert_int_equal(r.v[2].weight, 4);
    assert_int_equal(r.v[3].weight, 4);
    assert_int_equal(r.v[4].weight, 4);
    net_split_dispose(&r);
    net_table_dispose(&t);
}

static void test_skip_rules(void **state)
{
    static const struct net_gateway gw[] = {
        {"b", "192.0.2.1", 15443, "x", NULL},
        {"v6only", "2001:db8::1", 15443, "x", NULL},
        {"mixed", "2001:db8::2", 15443, "x", NULL},
        {"mixed", "192.0.2.2", 15443, "x", NULL}};
    struct net_table t;
    struct net_ep in[4] = {
        ep("10.9.0.1", 1, "b", ""), ep("10.6.0.1", 1, "v6only", ""),
        ep("10.5.0.1", 1, "mixed", ""), ep("10.0.0.1", 1, "a", "")};
    struct net_split_result r;

    (void)state;
    table(&t, "a", gw, 4, NET_V4);
    /* Without mTLS every remote endpoint is left out, the local one
     * stays. */
    assert_int_equal(net_split(&t, in, 4, 0, &r), 0);
    assert_int_equal(r.n, 1);
    assert_string_equal(fmt(&r.v[0].addr), "10.0.0.1:8080");
    assert_int_equal(r.skipped_mtls, 3);
    net_split_dispose(&r);
    /* With it: the network with only IPv6 gateways is left out on an
     * IPv4 node; the mixed one uses its IPv4 gateway only, with the
     * whole weight (1 x lcm(1, 1, 2) / 1 usable). */
    assert_int_equal(net_split(&t, in, 4, NET_SPLIT_MTLS, &r), 0);
    assert_int_equal(r.skipped_family, 1);
    assert_int_equal(r.skipped_mtls, 0);
    assert_int_equal(r.n, 3);
    assert_string_equal(fmt(&r.v[0].addr), "10.0.0.1:8080");
    assert_string_equal(fmt(&r.v[1].addr), "192.0.2.1:15443");
    assert_int_equal(r.v[1].weight, 2);
    assert_string_equal(fmt(&r.v[2].addr), "192.0.2.2:15443");
    assert_int_equal(r.v[2].weight, 2);
    net_split_dispose(&r);
    net_table_dispose(&t);
}

/* An HBONE gateway (double HBONE) carries remote endpoints of a cluster
 * without mTLS of its own (the tunnels are mTLS), alone; with mTLS the
 * weight splits over both kinds. net_split_lists() says which endpoints
 * stand for an HBONE gateway, with its identity. */
static void test_hbone_gateways(void **state)
{
    static const char *const gid = "spiffe://b.example/ns/istio-system/sa/ew";
    static const struct net_gateway gw[] = {
        {"b", "192.0.2.1", 15443, "x", NULL},
        {"b", "192.0.2.9", 15008, "y", gid},
        {"c", "192.0.2.3", 15443, "x", NULL}};
    struct net_table t;
    struct net_ep in[3] = {ep("10.9.0.1", 1, "b", ""),
                           ep("10.8.0.1", 1, "c", ""),
                           ep("10.0.0.1", 1, "a", "")};
    struct net_split_result r;
    struct addr *v = malloc(3 * sizeof(*v));
    uint32_t *w = malloc(3 * sizeof(*w));
    const char **net = malloc(3 * sizeof(*net)),
               **loc = malloc(3 * sizeof(*loc));
    const char **hid = NULL;
    char **via = NULL;
    size_t n = 3;
    struct net_lists l = {&v, &w, &net, &loc, &n, &hid};

    (void)state;
    table(&t, "a", gw, 3, NET_V4);
    /* Without mTLS: net-b through its HBONE gateway only, with the whole
     * weight (1 x lcm(2, 1) / 1); net-c (AUTO_PASSTHROUGH only) skipped. */
    assert_int_equal(net_split(&t, in, 3, 0, &r), 0);
    assert_int_equal(r.skipped_mtls, 1);
    assert_int_equal(r.n, 2);
    assert_string_equal(fmt(&r.v[1].addr), "192.0.2.9:15008");
    assert_int_equal(r.v[1].weight, 2);
    net_split_dispose(&r);
    /* With mTLS: both of net-b's gateways, 1 each. */
    assert_int_equal(net_split(&t, in, 3, NET_SPLIT_MTLS, &r), 0);
    assert_int_equal(r.skipped_mtls, 0);
    assert_int_equal(r.n, 4);
    assert_string_equal(fmt(&r.v[1].addr), "192.0.2.1:15443");
    assert_int_equal(r.v[1].weight, 1);
    assert_string_equal(fmt(&r.v[2].addr), "192.0.2.9:15008");
    assert_int_equal(r.v[2].weight, 1);
    net_split_dispose(&r);
    for (size_t i = 0; i < 3; i++) {
        v[i] = in[i].addr;
        w[i] = in[i].weight;
        net[i] = in[i].network;
        loc[i] = in[i].locality;
    }
    assert_int_equal(net_split_lists(&t, &l, NET_SPLIT_MTLS, &via, &r), 0);
    assert_int_equal(n, 4);
    assert_null(via[0]);
    assert_null(hid[0]);
    assert_string_equal(via[1], "192.0.2.1:15443 (x)");
    assert_null(hid[1]);
    assert_string_equal(via[2], "192.0.2.9:15008 (y, double HBONE)");
    assert_string_equal(hid[2], gid);
    assert_null(hid[3]);
    net_via_free(via, n);
    net_split_dispose(&r);
    free(hid);
    free(v);
    free(w);
    free(net);
    free(loc);
    net_table_dispose(&t);
}

static void test_node_without_network_goes_through_gateways(void **state)
{
    static const struct net_gateway gw[] = {
        {"b", "192.0.2.1", 15443, "x", NULL}};
    struct net_table t;
    struct net_ep in[2] = {ep("10.9.0.1", 1, "b", ""),
                           ep("10.0.0.1", 1, "", "")};
    struct net_split_result r;

    (void)state;
    /* Istio's special case: the node's network unset, the endpoint's set
     * and gateways known: through the gateway. No network: direct. */
    table(&t, "", gw, 1, NET_V4);
    assert_int_equal(net_split(&t, in, 2, NET_SPLIT_MTLS, &r), 0);
    assert_int_equal(r.n, 2);
    assert_string_equal(fmt(&r.v[0].addr), "10.0.0.1:8080");
    assert_string_equal(fmt(&r.v[1].addr), "192.0.2.1:15443");
    net_split_dispose(&r);
    net_table_dispose(&t);
}

static void test_grouped_by_locality_deterministic(void **state)
{
    static const struct net_gateway gw[] = {
        {"b", "192.0.2.2", 15443, "x", NULL},
        {"b", "192.0.2.1", 15443, "x", NULL}};
    struct net_table t;
    struct net_ep in[5] = {
        ep("10.9.0.1", 1, "b", "eu/z2"), ep("10.0.0.1", 1, "a", "eu/z1"),
        ep("10.9.0.2", 3, "b", "eu/z1"), ep("10.0.0.2", 1, "a", "eu/z2"),
        ep("10.9.0.3", 1, "b", "eu/z2")};
    struct net_split_result r, r2;

    (void)state;
    table(&t, "a", gw, 2, NET_V4);
    assert_int_equal(net_split(&t, in, 5, NET_SPLIT_MTLS, &r), 0);
    /* eu/z2 first (it appears first): its direct endpoint, then both
     * gateways with (1 + 1) x 2 / 2; then eu/z1 likewise with 3 x 2 / 2. */
    assert_int_equal(r.n, 6);
    assert_string_equal(r.v[0].locality, "eu/z2");
    assert_string_equal(fmt(&r.v[0].addr), "10.0.0.2:8080");
    assert_string_equal(fmt(&r.v[1].addr), "192.0.2.1:15443");
    assert_int_equal(r.v[1].weight, 2);
    assert_string_equal(r.v[1].locality, "eu/z2");
    assert_string_equal(fmt(&r.v[2].addr), "192.0.2.2:15443");
    assert_int_equal(r.v[2].weight, 2);
    assert_string_equal(r.v[3].locality, "eu/z1");
    assert_string_equal(fmt(&r.v[3].addr), "10.0.0.1:8080");
    assert_string_equal(fmt(&r.v[4].addr), "192.0.2.1:15443");
    assert_int_equal(r.v[4].weight, 3);
    assert_string_equal(r.v[4].locality, "eu/z1");
    assert_string_equal(fmt(&r.v[5].addr), "192.0.2.2:15443");
    /* The same input, the same output. */
    assert_int_equal(net_split(&t, in, 5, NET_SPLIT_MTLS, &r2), 0);
    assert_int_equal(r2.n, r.n);
    for (size_t i = 0; i < r.n; i++) {
        assert_true(addr_equal(&r.v[i].addr, &r2.v[i].addr));
        assert_int_equal(r.v[i].weight, r2.v[i].weight);
    }
    net_split_dispose(&r);
    net_split_dispose(&r2);
    net_table_dispose(&t);
}

static void test_local_view(void **state)
{
    static const struct net_gateway gw[] = {
        {"b", "192.0.2.1", 15443, "x", NULL}};
    struct net_table t;
    struct net_ep in[3] = {ep("10.9.0.1", 1, "b", ""),
                           ep("10.0.0.1", 1, "a", ""),
                           ep("10.0.0.2", 1, "", "")};
    struct net_split_result r;

    (void)state;
    /* An east-west gateway on network a: its own endpoints only, never
     * b's gateway, mTLS or not. */
    table(&t, "a", gw, 1, NET_V4);
    assert_int_equal(
        net_split(&t, in, 3, NET_SPLIT_MTLS | NET_SPLIT_LOCAL_VIEW, &r), 0);
    assert_int_equal(r.n, 2);
    assert_string_equal(fmt(&r.v[0].addr), "10.0.0.1:8080");
    assert_string_equal(fmt(&r.v[1].addr), "10.0.0.2:8080");
    assert_int_equal(r.skipped_view, 1);
    net_split_dispose(&r);
    net_table_dispose(&t);
    /* Without a network of its own it sees everything (no gateways
     * used). */
    table(&t, "", gw, 1, NET_V4);
    assert_int_equal(
        net_split(&t, in, 3, NET_SPLIT_MTLS | NET_SPLIT_LOCAL_VIEW, &r), 0);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.v[0].gw, -1);
    net_split_dispose(&r);
    net_table_dispose(&t);
}

static void test_weight_capped(void **state)
{
    static const struct net_gateway gw[] = {
        {"b", "192.0.2.1", 15443, "x", NULL}};
    struct net_table t;
    struct net_ep in[2] = {ep("10.9.0.1", UINT32_MAX, "b", ""),
                           ep("10.9.0.2", UINT32_MAX, "b", "")};
    struct net_split_result r;

    (void)state;
    table(&t, "a", gw, 1, NET_V4);
    assert_int_equal(net_split(&t, in, 2, NET_SPLIT_MTLS, &r), 0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.v[0].weight, UINT32_MAX);
    net_split_dispose(&r);
    net_table_dispose(&t);
}

static void test_addressless_workload(void **state)
{
    static const struct net_gateway gw[] = {
        {"b", "192.0.2.1", 15443, "x", NULL}};
    struct net_table t;
    struct net_ep in[2];
    struct net_split_result r;

    (void)state;
    memset(in, 0, sizeof(in));
    in[0].addr.ss.ss_family = AF_UNSPEC;
    in[0].weight = 1;
    in[0].network = "b";
    in[0].locality = "";
    in[1] = in[0];
    in[1].network = "c"; /* no gateway: unreachable */
    table(&t, "a", gw, 1, NET_V4);
    assert_int_equal(net_split(&t, in, 2, NET_SPLIT_MTLS, &r), 0);
    assert_int_equal(r.n, 1);
    assert_string_equal(fmt(&r.v[0].addr), "192.0.2.1:15443");
    assert_int_equal(r.skipped_no_gateway, 1);
    net_split_dispose(&r);
    net_table_dispose(&t);
}

/* ---- the network of an endpoint, meshNetworks ---------------------------- */

static struct bootstrap *parse_bs(const char *text)
{
    char *err = NULL;
    struct bootstrap *bs = bootstrap_parse(text, strlen(text), "b.yaml", &err);

    if (bs == NULL)
        fail_msg("bootstrap: %s", err);
    return bs;
}

static const char MESH[] =
    "node: {network: net-a}\n"
    "meshNetworks:\n"
    "  networks:\n"
    "    net-b:\n"
    "      endpoints: [{fromCidr: 10.2.0.0/16}, {fromRegistry: site-b}]\n"
    "      gateways: [{address: 192.0.2.1}, {address: gw.b.example, port: "
    "16443}]\n"
    "    net-c:\n"
    "      endpoints: [{fromCidr: \"2001:db8:c::/48\"}]\n"
    "      gateways:\n"
    "      - {registryServiceName: eastwest.istio-system.svc.cluster.local, "
    "port: 15443}\n";

/* A DNS that knows gw.b.example and records the minimum TTL asked. */
static uint64_t last_min;
static size_t fake_lookup_min(void *arg, const char *name, uint64_t min_ms,
                              void (*each)(void *ctx, const char *ip),
                              void *ctx)
{
    (void)arg;
    last_min = min_ms;
    if (strcmp(name, "gw.b.example") != 0)
        return 0;
    each(ctx, "198.51.100.2");
    each(ctx, "198.51.100.1");
    return 2;
}

static size_t fake_lookup(void *arg, const char *name,
                          void (*each)(void *ctx, const char *ip), void *ctx)
{
    return fake_lookup_min(arg, name, 0, each, ctx);
}

static const char K8S[] =
    "apiVersion: v1\nkind: Service\n"
    "metadata: {name: eastwest, namespace: istio-system}\n"
    "spec: {ports: [{port: 15443, name: tls}], externalIPs: "
    "[\"2001:db8::15\"]}\n"
    "---\napiVersion: v1\nkind: Service\n"
    "metadata: {name: ew-d, namespace: istio-system,\n"
    "  labels: {topology.istio.io/network: net-d,\n"
    "           networking.istio.io/gatewayPort: \"15444\"}}\n"
    "spec: {ports: [{port: 15444, name: tls}], externalIPs: [192.0.2.40]}\n"
    "---\napiVersion: v1\nkind: Service\n"
    "metadata: {name: ew-e, namespace: istio-system,\n"
    "  labels: {topology.istio.io/network: net-e}}\n"
    "spec: {ports: [{port: 80, name: http}], externalIPs: [192.0.2.50]}\n";

static struct resource_set *load(const char *text)
{
    struct buf errs;
    int nerr = 0;
    struct resource_set *set;

    buf_init(&errs, 1 << 20);
    set = resource_load_mem(text, strlen(text), "r.yaml", &errs, &nerr);
    if (nerr != 0)
        fail_msg("resources: %s", buf_cstr(&errs));
    buf_dispose(&errs);
    return set;
}

static void test_table_from_mesh_networks(void **state)
{
    struct bootstrap *bs = parse_bs(MESH);
    struct resource_set *set = load(K8S);
    const struct compile_dns dns = {fake_lookup, fake_lookup_min, NULL};
    static const struct net_gateway extra[] = {
        {"net-f", "192.0.2.60", 15443, "MeshLink site-f", NULL}};
    struct net_inputs in = {bs->node.network, &bs->mesh_networks, extra, 1};
    struct net_table t;
    struct conf_strpair lp = {(char *)"topology.istio.io/network",
                              (char *)"net-x"};
    struct conf_strpair rp = {(char *)"topology.istio.io/cluster",
                              (char *)"site-b"};
    struct conf_strmap net_label = {&lp, 1}, reg_label = {&rp, 1};
    struct addr a;

    (void)state;
    last_min = 0;
    assert_int_equal(net_table_build(&t, &in, set, NULL, &dns, NET_V4 | NET_V6),
                     0);
    /* The hostname gateway was asked for with istiod's 30 s minimum. */
    assert_int_equal(last_min, NET_GATEWAY_MIN_TTL_MS);
    assert_int_equal(t.ngw, 6);
    /* Sorted: net-b (IP, then both addresses of the name), net-c (the
     * registry service's externalIP), net-d (the labelled Service on its
     * gatewayPort), net-f (run time). net-e's Service lacks port 15443. */
    assert_string_equal(t.gw[0].network, "net-b");
    assert_string_equal(fmt(&t.gw[0].addr), "192.0.2.1:15443");
    assert_string_equal(fmt(&t.gw[1].addr), "198.51.100.1:16443");
    assert_string_equal(fmt(&t.gw[2].addr), "198.51.100.2:16443");
    assert_string_equal(t.gw[3].network, "net-c");
    assert_string_equal(fmt(&t.gw[3].addr), "[2001:db8::15]:15443");
    assert_string_equal(t.gw[4].network, "net-d");
    assert_string_equal(fmt(&t.gw[4].addr), "192.0.2.40:15444");
    assert_string_equal(t.gw[4].source, "Service istio-system/ew-d");
    assert_string_equal(t.gw[5].network, "net-f");
    assert_string_equal(t.gw[5].source, "MeshLink site-f");
    assert_true(net_has_gateway(&t, "net-b"));
    assert_false(net_has_gateway(&t, "net-e"));

    /* An endpoint's network: explicit, label, fromCidr, fromRegistry,
     * the node's. */
    a = ip("10.2.3.4", 80);
    assert_string_equal(net_endpoint_network(&t, "net-z", &net_label, &a),
                        "net-z");
    assert_string_equal(net_endpoint_network(&t, NULL, &net_label, &a),
                        "net-x");
    assert_string_equal(net_endpoint_network(&t, "", NULL, &a), "net-b");
    a = ip("2001:db8:c::9", 80);
    assert_string_equal(net_endpoint_network(&t, NULL, NULL, &a), "net-c");
    a = ip("10.3.0.1", 80);
    assert_string_equal(net_endpoint_network(&t, NULL, &reg_label, &a),
                        "net-b");
    assert_string_equal(net_endpoint_network(&t, NULL, NULL, &a), "net-a");
    net_table_dispose(&t);

    /* A name not resolved yet gives no gateway (until it does). */
    {
        const struct compile_dns none = {fake_lookup, NULL, NULL};
        static const struct net_gateway unknown[] = {
            {"net-g", "gw.unknown.example", 15443, "x", NULL}};
        struct net_inputs in2 = {"net-a", NULL, unknown, 1};
        assert_int_equal(net_table_build(&t, &in2, NULL, NULL, &none, NET_V4),
                         0);
        assert_int_equal(t.ngw, 0);
        net_table_dispose(&t);
    }
    resource_set_free(set);
    bootstrap_free(bs);
}

static void test_bad_mesh_networks_refused(void **state)
{
    static const struct {
        const char *yaml, *needle;
    } cases[] = {
        {"meshNetworks: {networks: {b: {endpoints: [{fromCidr: 10.0.0.0/33}]}}}"
         "\n",
         "fromCidr: '10.0.0.0/33'"},
        {"meshNetworks: {networks: {b: {endpoints: [{fromCidr: 10.0.0.0/8, "
         "fromRegistry: x}]}}}\n",
         "takes only one of"},
        {"meshNetworks: {networks: {b: {gateways: [{port: 15443}]}}}\n",
         "needs one of: address, registryServiceName"},
        {"meshNetworks: {networks: {b: {gateways: [{address: 'a b'}]}}}\n",
         "neither an IP address nor a DNS name"},
        {"meshNetworks: {networks: {b: {gateways: [{address: 1.2.3.4, port: "
         "65536}]}}}\n",
         "out of range"},
        {"meshNetworks: {networks: {b: {gateways: [{address: 1.2.3.4, "
         "locality: x}]}}}\n",
         "locality"},
        {"meshNetworks: {networks: {b: {gateways: [{address: 1.2.3.4, port: "
         "15008}]}}}\n",
         "port 15008 is an HBONE (ambient east-west) gateway, reached by "
         "double HBONE: give its SPIFFE ID as identity"},
        {"meshNetworks: {networks: {b: {gateways: [{address: 1.2.3.4, port: "
         "15008, identity: x}]}}}\n",
         "it must start with spiffe://"},
        {"meshNetworks: {networks: {b: {gateways: [{address: 1.2.3.4, "
         "identity: 'spiffe://a/ns/b/sa/c'}]}}}\n",
         "gateways[0].identity: only an HBONE gateway (port 15008) has one"},
        {"meshNetworks: {networks: {\"bad name\": {}}}\n",
         "not a network name"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *err = NULL;
        struct bootstrap *bs = bootstrap_parse(
            cases[i].yaml, strlen(cases[i].yaml), "b.yaml", &err);
        if (bs != NULL)
            fail_msg("accepted: %s", cases[i].yaml);
        if (strstr(err, cases[i].needle) == NULL ||
            strstr(err, "b.yaml:1:") == NULL)
            fail_msg("%s: %s", cases[i].yaml, err);
        free(err);
    }
}

/* head, then n entries "<pre><i><post>" separated by ", ", then tail. */
static char *many(const char *head, const char *pre, const char *post, size_t n,
                  const char *tail)
{
    struct buf b;
    char *out;

    buf_init(&b, 1 << 24);
    buf_puts(&b, head);
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            buf_puts(&b, ", ");
        buf_printf(&b, "%s%zu%s", pre, i, post);
    }
    buf_puts(&b, tail);
    out = strdup(buf_cstr(&b));
    buf_dispose(&b);
    return out;
}

static int loads(const char *text, const char *needle)
{
    char *err = NULL;
    struct bootstrap *bs = bootstrap_parse(text, strlen(text), "b.yaml", &err);
    int ok = bs != NULL;

    if (!ok && strstr(err, needle) == NULL)
        fail_msg("unexpected error: %s", err);
    bootstrap_free(bs);
    free(err);
    return ok;
}

/* Every limit, at it and one past it. */
static void test_limits(void **state)
{
    char *t;

    (void)state;
    t = many("meshNetworks: {networks: {", "n", ": {}", BOOTSTRAP_MAX_NETWORKS,
             "}}\n");
    assert_true(loads(t, ""));
    free(t);
    t = many("meshNetworks: {networks: {", "n", ": {}",
             BOOTSTRAP_MAX_NETWORKS + 1, "}}\n");
    assert_false(loads(t, "1025 networks, more than 1024"));
    free(t);
    t = many("meshNetworks: {networks: {b: {gateways: [",
             "{address: 192.0.2.1, port: 1", "}", BOOTSTRAP_MAX_NET_ENTRIES,
             "]}}}\n");
    assert_true(loads(t, ""));
    free(t);
    t = many("meshNetworks: {networks: {b: {gateways: [",
             "{address: 192.0.2.1, port: 1", "}", BOOTSTRAP_MAX_NET_ENTRIES + 1,
             "]}}}\n");
    assert_false(loads(t, "needs 0 to 256 entries, has 257"));
    free(t);
    t = many("meshNetworks: {networks: {b: {endpoints: [", "{fromRegistry: r",
             "}", BOOTSTRAP_MAX_NET_ENTRIES + 1, "]}}}\n");
    assert_false(loads(t, "needs 0 to 256 entries, has 257"));
    free(t);
    /* A Service's externalIPs: 64. */
    {
        struct buf errs;
        int nerr = 0;
        struct resource_set *set;

        for (size_t n = 64; n <= 65; n++) {
            t = many("apiVersion: v1\nkind: Service\nmetadata: {name: s, "
                     "namespace: d}\nspec: {ports: [{port: 1}], "
                     "externalIPs: [",
                     "192.0.2.", "", n, "]}\n");
            buf_init(&errs, 1 << 20);
            set = resource_load_mem(t, strlen(t), "r.yaml", &errs, &nerr);
            if (n == 64)
                assert_int_equal(nerr, 0);
            else
                assert_non_null(
                    strstr(buf_cstr(&errs), "needs 0 to 64 entries, has 65"));
            resource_set_free(set);
            buf_dispose(&errs);
            free(t);
        }
    }
}

/* ---- clusters ------------------------------------------------------------ */

static const char CLUSTERS[] =
    "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"
    "metadata: {name: svc, namespace: default}\n"
    "spec:\n  hosts: [svc.example.test]\n  location: MESH_INTERNAL\n"
    "  resolution: STATIC\n  ports: [{number: 9080, name: http, protocol: "
    "HTTP}]\n"
    "  endpoints:\n"
    "  - {address: 10.0.0.1, locality: eu/z1}\n"
    "  - {address: 10.9.0.1, network: net-b, locality: us/z1, weight: 2}\n"
    "  - {network: net-b, locality: us/z1}\n"
    "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"
    "metadata: {name: plain, namespace: default}\n"
    "spec:\n  hosts: [plain.example.test]\n  location: MESH_INTERNAL\n"
    "  resolution: STATIC\n  ports: [{number: 9080, name: http, protocol: "
    "HTTP}]\n"
    "  endpoints: [{address: 10.0.0.1}, {address: 10.9.0.1, network: "
    "net-b}]\n"
    "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\n"
    "metadata: {name: svc, namespace: default}\n"
    "spec: {host: svc.example.test, trafficPolicy: {tls: {mode: "
    "ISTIO_MUTUAL}}}\n"
    "---\napiVersion: v1\nkind: Service\n"
    "metadata: {name: k, namespace: default, labels: "
    "{topology.istio.io/network: net-b}}\n"
    "spec: {ports: [{port: 9080, name: http}]}\n"
    "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
    "metadata: {name: k-1, namespace: default, labels: "
    "{kubernetes.io/service-name: k}}\n"
    "addressType: IPv4\nports: [{name: http, port: 8080}]\n"
    "endpoints: [{addresses: [10.9.0.7]}]\n"
    "---\napiVersion: v1\nkind: Service\n"
    "metadata: {name: k2, namespace: default}\n"
    "spec: {ports: [{port: 9080, name: http}]}\n"
    "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
    "metadata: {name: k2-1, namespace: default, labels: "
    "{kubernetes.io/service-name: k2, topology.istio.io/network: net-b}}\n"
    "addressType: IPv4\nports: [{name: http, port: 8080}]\n"
    "endpoints: [{addresses: [10.9.0.8]}]\n"
    "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
    "metadata: {name: k2-2, namespace: default, labels: "
    "{kubernetes.io/service-name: k2}}\n"
    "addressType: IPv4\nports: [{name: http, port: 8080}]\n"
    "endpoints: [{addresses: [10.0.0.8]}]\n"
    "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\n"
    "metadata: {name: k2, namespace: default}\n"
    "spec: {host: k2.default.svc.cluster.local, trafficPolicy: {tls: {mode: "
    "ISTIO_MUTUAL}}}\n"
    "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\n"
    "metadata: {name: k, namespace: default}\n"
    "spec: {host: k.default.svc.cluster.local, trafficPolicy: {tls: {mode: "
    "ISTIO_MUTUAL}}}\n";

static void test_clusters_split(void **state)
{
    struct resource_set *set = load(CLUSTERS);
    static const struct net_gateway gw[] = {
        {"net-b", "192.0.2.1", 15443, "meshNetworks", NULL}};
    struct istio_clusters t;
    const struct cluster *c;
    int id;

    (void)state;
    istio_clusters_init(&t, set, 1, NULL, NULL);
    t.nets.node_network = "net-a";
    t.nets.extra = gw;
    t.nets.nextra = 1;
    /* ISTIO_MUTUAL: the local endpoint, then the gateway for both remote
     * ones (the address-less one too), in its locality group. */
    id = istio_cluster_id(&t, "svc.example.test", NULL, 9080);
    assert_true(id >= 0);
    c = t.v[id];
    assert_int_equal(c->nendpoints, 2);
    assert_string_equal(fmt(&c->endpoints[0]), "10.0.0.1:9080");
    assert_string_equal(fmt(&c->endpoints[1]), "192.0.2.1:15443");
    assert_int_equal(cluster_weight(c, 1), 3);
    assert_non_null(c->ep_meta);
    assert_string_equal(c->ep_meta[0].network, "net-a");
    assert_string_equal(c->ep_meta[0].locality, "eu/z1");
    assert_null(c->ep_meta[0].via);
    assert_string_equal(c->ep_meta[1].network, "net-b");
    assert_string_equal(c->ep_meta[1].locality, "us/z1");
    assert_string_equal(c->ep_meta[1].via, "192.0.2.1:15443 (meshNetworks)");
    /* Without mTLS: the remote endpoint is left out and counted. */
    id = istio_cluster_id(&t, "plain.example.test", NULL, 9080);
    c = t.v[id];
    assert_int_equal(c->nendpoints, 1);
    assert_string_equal(fmt(&c->endpoints[0]), "10.0.0.1:9080");
    assert_int_equal(c->remote_skipped_mtls, 1);
    /* A Kubernetes Service labelled with a network: its endpoints are
     * there. */
    id = istio_cluster_id(&t, "k.default.svc.cluster.local", NULL, 9080);
    c = t.v[id];
    assert_int_equal(c->nendpoints, 1);
    assert_string_equal(fmt(&c->endpoints[0]), "192.0.2.1:15443");
    /* An EndpointSlice's own label: that slice's endpoints only. */
    id = istio_cluster_id(&t, "k2.default.svc.cluster.local", NULL, 9080);
    c = t.v[id];
    assert_int_equal(c->nendpoints, 2);
    assert_string_equal(fmt(&c->endpoints[0]), "10.0.0.8:8080");
    assert_string_equal(c->ep_meta[0].network, "net-a");
    assert_string_equal(fmt(&c->endpoints[1]), "192.0.2.1:15443");
    assert_string_equal(c->ep_meta[1].network, "net-b");
    istio_clusters_dispose(&t);

    /* On net-b itself everything is local and direct. */
    istio_clusters_init(&t, set, 1, NULL, NULL);
    t.nets.node_network = "net-b";
    t.nets.extra = gw;
    t.nets.nextra = 1;
    id = istio_cluster_id(&t, "plain.example.test", NULL, 9080);
    c = t.v[id];
    assert_int_equal(c->nendpoints, 2);
    assert_string_equal(fmt(&c->endpoints[1]), "10.9.0.1:9080");
    assert_null(c->ep_meta[1].via);
    assert_int_equal(c->remote_skipped_mtls, 0);
    istio_clusters_dispose(&t);
    resource_set_free(set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_gateway_keeps_endpoints),
        cmocka_unit_test(test_remote_endpoints_become_their_gateway),
        cmocka_unit_test(test_scale_factor_splits_evenly),
        cmocka_unit_test(test_skip_rules),
        cmocka_unit_test(test_hbone_gateways),
        cmocka_unit_test(test_node_without_network_goes_through_gateways),
        cmocka_unit_test(test_grouped_by_locality_deterministic),
        cmocka_unit_test(test_local_view),
        cmocka_unit_test(test_weight_capped),
        cmocka_unit_test(test_addressless_workload),
        cmocka_unit_test(test_table_from_mesh_networks),
        cmocka_unit_test(test_bad_mesh_networks_refused),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_clusters_split),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
