#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "compile/istio.h"
#include "compile/locality.h"
#include "compile/network.h"
#include "config/resource.h"
#include "core/addr.h"
#include "core/buf.h"
#include "upstream/cluster.h"
#include "upstream/priority.h"

/* ---- localities as Istio reads them -------------------------------------- */

static void test_split_match_rank(void **state)
{
    struct locality_parts a, b;

    (void)state;
    locality_split("eu/west/a/b", &a);
    assert_string_equal(a.region, "eu");
    assert_string_equal(a.zone, "west");
    assert_string_equal(a.subzone, "a/b");
    locality_split("eu", &b);
    assert_string_equal(b.zone, "");
    assert_true(locality_match(&a, "eu"));
    assert_true(locality_match(&a, "eu/*"));
    assert_true(locality_match(&a, "*"));
    assert_true(locality_match(&a, "eu/west/a/b"));
    assert_false(locality_match(&a, "eu/east"));
    assert_false(locality_match(&a, "us/*"));
    locality_split("eu/west/a/b", &b);
    assert_int_equal(locality_rank(&a, &b), 0);
    locality_split("eu/west/c", &b);
    assert_int_equal(locality_rank(&a, &b), 1);
    locality_split("eu/east/a/b", &b);
    assert_int_equal(locality_rank(&a, &b), 2);
    locality_split("us/west/a/b", &b);
    assert_int_equal(locality_rank(&a, &b), 3);
}

/* A WorkloadEntry's own locality, else Kubernetes' topology labels. */
static void test_locality_from_labels(void **state)
{
    struct conf_strpair kv[3] = {
        {(char *)"topology.kubernetes.io/region", (char *)"eu"},
        {(char *)"topology.kubernetes.io/zone", (char *)"west"},
        {(char *)"topology.istio.io/subzone", (char *)"rack1"}};
    struct conf_strmap m = {kv, 3}, two = {kv, 2}, none = {NULL, 0};
    char buf[64];

    (void)state;
    assert_string_equal(locality_of("us/east", &m, buf, sizeof(buf)),
                        "us/east");
    assert_string_equal(locality_of(NULL, &m, buf, sizeof(buf)),
                        "eu/west/rack1");
    assert_string_equal(locality_of("", &two, buf, sizeof(buf)), "eu/west");
    assert_null(locality_of(NULL, &none, buf, sizeof(buf)));
}

/* ---- priorities -------------------------------------------------------- */

#define MAXEP 8

struct run {
    struct locality_who eps[MAXEP];
    size_t n;
    uint32_t level[MAXEP], w[MAXEP];
    unsigned char keep[MAXEP];
    int levels, weighted;
};

static void apply(struct run *r, const struct res_locality_lb *lb, int od,
                  const struct locality_who *node)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->w[i] == 0)
            r->w[i] = 1;
    r->levels = locality_apply(lb, od, node, r->eps, r->n, r->level, r->w,
                               r->keep, NULL, &r->weighted);
}

static void add(struct run *r, const char *loc, const char *net,
                const struct conf_strmap *labels)
{
    r->eps[r->n].locality = loc;
    r->eps[r->n].network = net;
    r->eps[r->n].labels = labels;
    r->w[r->n] = 1;
    r->n++;
}

static void want_levels(const struct run *r, const uint32_t *want, int nlevels)
{
    assert_int_equal(r->levels, nlevels);
    for (size_t i = 0; i < r->n; i++)
        if (r->level[i] != want[i])
            fail_msg("endpoint %zu (%s): level %u, want %u", i,
                     r->eps[i].locality ? r->eps[i].locality : "-", r->level[i],
                     want[i]);
}

static const struct locality_who node = {"eu/west/a", "net1", NULL};

/* The default with outlier detection (the mesh's enabled: true):
 * same subzone, same zone, same region, the rest; levels without gaps. */
static void test_default_failover_levels(void **state)
{
    struct run r;
    const uint32_t want[] = {3, 2, 1, 0, 3, 0};
    const uint32_t gaps[] = {0, 1, 1};

    (void)state;
    memset(&r, 0, sizeof(r));
    add(&r, "us/east/a", NULL, NULL);
    add(&r, "eu/east/a", NULL, NULL);
    add(&r, "eu/west/b", NULL, NULL);
    add(&r, "eu/west/a", NULL, NULL);
    add(&r, NULL, NULL, NULL);
    add(&r, "eu/west/a", NULL, NULL);
    apply(&r, NULL, 1, &node);
    want_levels(&r, want, 4);
    /* Missing ranks leave no gap. */
    memset(&r, 0, sizeof(r));
    add(&r, "eu/west/a", NULL, NULL);
    add(&r, "ap/x/y", NULL, NULL);
    add(&r, "us/x", NULL, NULL);
    apply(&r, NULL, 1, &node);
    want_levels(&r, gaps, 2);
}

/* Without outlier detection nothing fails over; enabled: false turns
 * everything off. */
static void test_no_failover_without_outlier_detection(void **state)
{
    struct res_locality_lb off;
    struct run r;
    const uint32_t zero[] = {0, 0};

    (void)state;
    memset(&r, 0, sizeof(r));
    add(&r, "eu/west/a", NULL, NULL);
    add(&r, "us/east/a", NULL, NULL);
    apply(&r, NULL, 0, &node);
    want_levels(&r, zero, 1);
    memset(&off, 0, sizeof(off));
    off.mark.line = 1;
    off.enabled = 0;
    apply(&r, &off, 1, &node);
    want_levels(&r, zero, 1);
}

/* failover from eu to us: us comes before the other regions. */
static void test_failover_rule(void **state)
{
    struct res_locality_failover fo[1] = {{{1, 1}, (char *)"eu", (char *)"us"}};
    struct res_locality_lb lb;
    struct run r;
    const uint32_t want[] = {3, 2, 0, 1};

    (void)state;
    memset(&lb, 0, sizeof(lb));
    lb.mark.line = 1;
    lb.enabled = 1;
    lb.failover.v = fo;
    lb.failover.n = 1;
    memset(&r, 0, sizeof(r));
    add(&r, "ap/x/y", NULL, NULL);
    add(&r, "us/x/y", NULL, NULL);
    add(&r, "eu/west/a", NULL, NULL);
    add(&r, "eu/east", NULL, NULL);
    apply(&r, &lb, 1, &node);
    want_levels(&r, want, 4);
}

/*
 * failoverPriority: network, then region, then a label: the count of
 * leading labels that match the node's decides (all: 0; none: 3).
 * "version=v2" compares with v2 instead of the node's own label.
 */
static void test_failover_priority_labels(void **state)
{
    char *fp[] = {(char *)"topology.istio.io/network",
                  (char *)"topology.kubernetes.io/region", (char *)"version"};
    struct conf_strpair v1 = {(char *)"version", (char *)"v1"};
    struct conf_strpair v2 = {(char *)"version", (char *)"v2"};
    struct conf_strmap m1 = {&v1, 1}, m2 = {&v2, 1};
    struct locality_who me = {"eu/west/a", "net1", &m1};
    struct res_locality_lb lb;
    struct run r;
    const uint32_t want[] = {0, 1, 2, 3, 2};
    const uint32_t want2[] = {1, 0, 2, 3, 2};

    (void)state;
    memset(&lb, 0, sizeof(lb));
    lb.mark.line = 1;
    lb.enabled = 1;
    lb.failover_priority.v = fp;
    lb.failover_priority.n = 3;
    memset(&r, 0, sizeof(r));
    add(&r, "eu/east/b", "net1", &m1); /* all three match */
    add(&r, "eu/west/a", "net1", &m2); /* network, region */
    add(&r, "us/west/a", "net1", &m1); /* network */
    add(&r, "eu/west/a", "net2", &m1); /* none */
    add(&r, "us/west/a", "net1", NULL);
    apply(&r, &lb, 1, &me);
    want_levels(&r, want, 4);
    fp[2] = (char *)"version=v2";
    apply(&r, &lb, 1, &me);
    want_levels(&r, want2, 4);
    /* Without outlier detection: one level. */
    apply(&r, &lb, 0, &me);
    assert_int_equal(r.levels, 1);
}

/* failoverPriority with failover: each label level split by region
 * rank (Istio multiplies the label level by 5 and adds the rank). */
static void test_failover_priority_with_failover(void **state)
{
    char *fp[] = {(char *)"version"};
    struct conf_strpair v1 = {(char *)"version", (char *)"v1"};
    struct conf_strpair v2 = {(char *)"version", (char *)"v2"};
    struct conf_strmap m1 = {&v1, 1}, m2 = {&v2, 1};
    struct res_locality_failover fo[1] = {{{1, 1}, (char *)"eu", (char *)"us"}};
    struct locality_who me = {"eu/west/a", NULL, &m1};
    struct res_locality_lb lb;
    struct run r;
    const uint32_t want[] = {0, 1, 2, 3};

    (void)state;
    memset(&lb, 0, sizeof(lb));
    lb.mark.line = 1;
    lb.enabled = 1;
    lb.failover_priority.v = fp;
    lb.failover_priority.n = 1;
    lb.failover.v = fo;
    lb.failover.n = 1;
    memset(&r, 0, sizeof(r));
    add(&r, "eu/west/a", NULL, &m1);
    add(&r, "us/x", NULL, &m1);
    add(&r, "eu/west/a", NULL, &m2);
    add(&r, "ap/x", NULL, &m2);
    apply(&r, &lb, 1, &me);
    want_levels(&r, want, 4);
}

/*
 * distribute, Istio's documentation example: from us-west/zone1 80% to
 * zone1 and 20% to zone2. Two endpoints share zone1's weight; a
 * locality no `to` names gets nothing (left out).
 */
static void test_distribute_weights(void **state)
{
    struct conf_intpair to[2] = {{(char *)"us-west/zone1/*", 80},
                                 {(char *)"us-west/zone2/*", 20}};
    struct res_locality_distribute d[1] = {
        {{1, 1}, (char *)"us-west/zone1/*", {to, 2}}};
    struct conf_intpair star[1] = {{(char *)"us-west/*", 100}};
    struct res_locality_distribute d2[1] = {
        {{1, 1}, (char *)"us-west/*", {star, 1}}};
    struct locality_who me = {"us-west/zone1/a", NULL, NULL};
    struct locality_who other = {"ap/x/y", NULL, NULL};
    struct res_locality_lb lb;
    struct run r;

    (void)state;
    memset(&lb, 0, sizeof(lb));
    lb.mark.line = 1;
    lb.enabled = 1;
    lb.distribute.v = d;
    lb.distribute.n = 1;
    memset(&r, 0, sizeof(r));
    add(&r, "us-west/zone1/a", NULL, NULL);
    add(&r, "us-west/zone1/b", NULL, NULL);
    add(&r, "us-west/zone2/a", NULL, NULL);
    add(&r, "us-east/zone1/a", NULL, NULL);
    apply(&r, &lb, 1, &me);
    assert_int_equal(r.levels, 1);
    /* zone1/a and zone1/b are localities of their own (subzones):
     * 80% shared 1:1, 40% each; zone2 20%. */
    assert_int_equal(r.w[0], r.w[1]);
    assert_int_equal(r.w[0], 2 * r.w[2]);
    assert_true(r.keep[0] && r.keep[1] && r.keep[2]);
    assert_false(r.keep[3]);
    /* A node no rule is from: weights as they were. */
    memset(&r, 0, sizeof(r));
    add(&r, "us-west/zone1/a", NULL, NULL);
    add(&r, "us-east/zone1/a", NULL, NULL);
    r.w[1] = 3;
    apply(&r, &lb, 1, &other);
    assert_int_equal(r.w[0], 1);
    assert_int_equal(r.w[1], 3);
    assert_true(r.keep[0] && r.keep[1]);
    /* A wildcard `to` over several localities splits its weight by
     * their weights, rounded up (2 of 3: 67, 1 of 3: 34). */
    lb.distribute.v = d2;
    memset(&r, 0, sizeof(r));
    add(&r, "us-west/zone1", NULL, NULL);
    add(&r, "us-west/zone1", NULL, NULL);
    add(&r, "us-west/zone2", NULL, NULL);
    apply(&r, &lb, 1, &me);
    assert_int_equal(r.w[0], 67 * 10000 / 2);
    assert_int_equal(r.w[2], 34 * 10000);
}

/* distribute for a balancer with localities (not a hash): each locality
 * given a share is a level of that weight, in the order of its first
 * endpoint; endpoint weights stay as they were. */
static void test_distribute_locality_levels(void **state)
{
    struct conf_intpair to[3] = {{(char *)"region1/zone1/*", 70},
                                 {(char *)"region1/zone2/*", 20},
                                 {(char *)"region3/zone4/*", 10}};
    struct res_locality_distribute d[1] = {
        {{1, 1}, (char *)"region1/zone1/*", {to, 3}}};
    struct locality_who me = {"region1/zone1", NULL, NULL};
    struct res_locality_lb lb;
    struct run r;
    uint32_t lw[MAXEP];
    const uint32_t want[] = {0, 1, 0, 0, 2};

    (void)state;
    memset(&lb, 0, sizeof(lb));
    lb.mark.line = 1;
    lb.enabled = 1;
    lb.distribute.v = d;
    lb.distribute.n = 1;
    memset(&r, 0, sizeof(r));
    add(&r, "region1/zone1", NULL, NULL);
    add(&r, "region1/zone2", NULL, NULL);
    add(&r, "region1/zone1", NULL, NULL);
    add(&r, "region2/zone3", NULL, NULL);
    add(&r, "region3/zone4", NULL, NULL);
    r.w[2] = 3;
    r.levels = locality_apply(&lb, 1, &me, r.eps, r.n, r.level, r.w, r.keep, lw,
                              &r.weighted);
    assert_int_equal(r.levels, 3);
    assert_true(r.weighted);
    assert_false(r.keep[3]);
    for (size_t i = 0; i < r.n; i++)
        if (r.keep[i] && r.level[i] != want[i])
            fail_msg("endpoint %zu: level %u, want %u", i, r.level[i], want[i]);
    assert_int_equal(lw[0], 70);
    assert_int_equal(lw[1], 20);
    assert_int_equal(lw[2], 10);
    assert_int_equal(r.w[0], 1);
    assert_int_equal(r.w[2], 3);
}

/* ---- clusters: after the split horizon ------------------------------------
 */

static const char CROSS[] =
    "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"
    "metadata: {name: svc, namespace: default}\n"
    "spec:\n  hosts: [svc.example.test]\n  location: MESH_INTERNAL\n"
    "  resolution: STATIC\n  ports: [{number: 9080, name: http, protocol: "
    "HTTP}]\n"
    "  endpoints:\n"
    "  - {address: 10.9.0.1, network: net-b, locality: us/east/a}\n"
    "  - {address: 10.0.0.2, locality: eu/east/a, labels: {version: v2}}\n"
    "  - {address: 10.0.0.1, locality: eu/west/a, labels: {version: v1}}\n"
    "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\n"
    "metadata: {name: svc, namespace: default}\n"
    "spec:\n  host: svc.example.test\n  trafficPolicy:\n"
    "    tls: {mode: ISTIO_MUTUAL}\n"
    "    outlierDetection: {consecutive5xxErrors: 1}\n"
    "  subsets:\n  - name: fp\n    trafficPolicy:\n"
    "      tls: {mode: ISTIO_MUTUAL}\n"
    "      outlierDetection: {consecutive5xxErrors: 1}\n"
    "      loadBalancer:\n        localityLbSetting:\n"
    "          failoverPriority: [topology.istio.io/network, version]\n";

/* The level of the endpoint at address a in c. */
static uint32_t level_at(const struct cluster *c, const char *a)
{
    char s[ADDR_STRLEN];

    for (size_t i = 0; i < c->nendpoints; i++)
        if (strcmp(addr_format(&c->endpoints[i], s, sizeof(s)), a) == 0)
            return cluster_level_of(c->prio, i);
    fail_msg("no endpoint %s", a);
    return 0;
}

/*
 * Across networks: a remote network's endpoints are reached through its
 * gateway, which stands in their locality group; the default failover
 * ranks it after the node's zone and region (traffic goes to the other
 * network last), and failoverPriority's network label puts it last while
 * the endpoints reached directly keep their own labels.
 */
static void test_levels_after_the_split_horizon(void **state)
{
    static const struct net_gateway gw[] = {
        {"net-b", "192.0.2.1", 15443, "meshNetworks", NULL}};
    struct conf_strpair v1 = {(char *)"version", (char *)"v1"};
    struct conf_strmap node_labels = {&v1, 1};
    struct buf errs;
    int nerr = 0, id;
    struct resource_set *set;
    struct istio_clusters t;
    const struct cluster *c;

    (void)state;
    buf_init(&errs, 1 << 20);
    set = resource_load_mem(CROSS, strlen(CROSS), "r.yaml", &errs, &nerr);
    if (nerr != 0)
        fail_msg("resources: %s", buf_cstr(&errs));
    buf_dispose(&errs);
    istio_clusters_init(&t, set, 1, NULL, NULL);
    t.nets.node_network = "net-a";
    t.nets.extra = gw;
    t.nets.nextra = 1;
    t.node_locality = "eu/west/a";
    t.node_network = "net-a";
    t.node_labels = &node_labels;
    id = istio_cluster_id(&t, "svc.example.test", NULL, 9080);
    assert_true(id >= 0);
    c = t.v[id];
    assert_int_equal(c->nendpoints, 3);
    assert_non_null(c->prio);
    assert_int_equal(c->prio->nlevels, 3);
    assert_int_equal(level_at(c, "10.0.0.1:9080"), 0);
    assert_int_equal(level_at(c, "10.0.0.2:9080"), 1);
    assert_int_equal(level_at(c, "192.0.2.1:15443"), 2);
    /* failoverPriority: [network, version]: v1 here, v2 here, the gateway
     * (another network) last. */
    id = istio_cluster_id(&t, "svc.example.test", "fp", 9080);
    assert_true(id >= 0);
    c = t.v[id];
    assert_int_equal(c->nendpoints, 3);
    assert_non_null(c->prio);
    assert_int_equal(level_at(c, "10.0.0.1:9080"), 0);
    assert_int_equal(level_at(c, "10.0.0.2:9080"), 1);
    assert_int_equal(level_at(c, "192.0.2.1:15443"), 2);
    istio_clusters_dispose(&t);
    resource_set_free(set);
}

/* ---- Kubernetes endpoints: the locality of their Node -------------------- */

static const char K8S[] =
    "apiVersion: v1\nkind: Service\n"
    "metadata: {name: web, namespace: default}\n"
    "spec:\n  ports: [{name: http, port: 80, targetPort: 8080}]\n"
    "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
    "metadata: {name: web-1, namespace: default,\n"
    "  labels: {kubernetes.io/service-name: web}}\n"
    "addressType: IPv4\nports: [{name: http, port: 8080}]\n"
    "endpoints:\n"
    "- {addresses: [10.0.0.4], nodeName: gone, zone: west}\n"
    "- {addresses: [10.0.0.3], nodeName: n3, zone: ignored}\n"
    "- {addresses: [10.0.0.2], nodeName: n2}\n"
    "- {addresses: [10.0.0.1], nodeName: n1}\n"
    "- {addresses: [10.0.0.5]}\n"
    "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n"
    "  labels: {topology.kubernetes.io/region: eu, "
    "topology.kubernetes.io/zone: west,\n"
    "           topology.istio.io/subzone: a, kubernetes.io/os: linux}\n"
    "spec: {podCIDR: 10.244.0.0/24, taints: []}\n"
    "status: {capacity: {cpu: '4'}}\n"
    "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: n2\n"
    "  labels: {topology.kubernetes.io/region: eu, "
    "topology.kubernetes.io/zone: west, topology.istio.io/subzone: b}\n"
    "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: n3\n"
    "  labels: {failure-domain.beta.kubernetes.io/region: eu, "
    "failure-domain.beta.kubernetes.io/zone: east}\n"
    "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\n"
    "metadata: {name: web, namespace: default}\n"
    "spec:\n  host: web.default.svc.cluster.local\n  trafficPolicy:\n"
    "    outlierDetection: {consecutive5xxErrors: 1}\n";

/*
 * An EndpointSlice endpoint's locality is its Node's topology labels
 * (istiod's getPodLocality(), through nodeName since strait reads no
 * Pods), else its own zone with no region; so the default failover puts
 * the node's subzone first, then its zone, its region, and last the
 * endpoints whose region is not known.
 */
static void test_endpointslice_locality_from_nodes(void **state)
{
    struct buf errs;
    int nerr = 0, id;
    struct resource_set *set;
    struct istio_clusters t;
    const struct cluster *c;
    const struct resource *svc;
    const struct res_service_entry *se;
    const char *want[5][2] = {{"10.0.0.4", "/west"},
                              {"10.0.0.3", "eu/east"},
                              {"10.0.0.2", "eu/west/b"},
                              {"10.0.0.1", "eu/west/a"},
                              {"10.0.0.5", NULL}};

    (void)state;
    buf_init(&errs, 1 << 20);
    set = resource_load_mem(K8S, strlen(K8S), "k.yaml", &errs, &nerr);
    if (nerr != 0)
        fail_msg("resources: %s", buf_cstr(&errs));
    buf_dispose(&errs);
    svc = resource_find(set, RES_SERVICE, "default", "web");
    assert_non_null(svc);
    se = res_service_entry(svc);
    assert_non_null(se);
    assert_int_equal(se->endpoints.n, 5);
    for (size_t i = 0; i < 5; i++) {
        const struct res_workload_entry *we =
            (const struct res_workload_entry *)se->endpoints.v + i;
        assert_string_equal(we->address, want[i][0]);
        if (want[i][1] == NULL)
            assert_null(we->locality);
        else
            assert_string_equal(we->locality, want[i][1]);
    }
    istio_clusters_init(&t, set, 1, NULL, NULL);
    t.node_locality = "eu/west/a";
    id = istio_cluster_id(&t, "web.default.svc.cluster.local", NULL, 80);
    assert_true(id >= 0);
    c = t.v[id];
    assert_int_equal(c->nendpoints, 5);
    assert_non_null(c->prio);
    assert_int_equal(c->prio->nlevels, 4);
    assert_int_equal(level_at(c, "10.0.0.1:8080"), 0);
    assert_int_equal(level_at(c, "10.0.0.2:8080"), 1);
    assert_int_equal(level_at(c, "10.0.0.3:8080"), 2);
    assert_int_equal(level_at(c, "10.0.0.4:8080"), 3);
    assert_int_equal(level_at(c, "10.0.0.5:8080"), 3);
    istio_clusters_dispose(&t);
    resource_set_free(set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_match_rank),
        cmocka_unit_test(test_locality_from_labels),
        cmocka_unit_test(test_default_failover_levels),
        cmocka_unit_test(test_no_failover_without_outlier_detection),
        cmocka_unit_test(test_failover_rule),
        cmocka_unit_test(test_failover_priority_labels),
        cmocka_unit_test(test_failover_priority_with_failover),
        cmocka_unit_test(test_distribute_weights),
        cmocka_unit_test(test_distribute_locality_levels),
        cmocka_unit_test(test_levels_after_the_split_horizon),
        cmocka_unit_test(test_endpointslice_locality_from_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
