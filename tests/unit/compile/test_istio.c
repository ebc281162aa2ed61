/*
 * Unit tests of the outboundTrafficPolicy decision in
 * src/compile/cluster.c: which destinations istio_cluster_id() sends to
 * BlackHoleCluster (REGISTRY_ONLY), which become passthrough clusters
 * (ALLOW_ANY), on what port, with what DestinationRule TLS and SNI; and what
 * the host's ServiceEntry location changes.
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

#include "config/resource.h"
#include "core/addr.h"
#include "core/buf.h"
#include "compile/identity.h"
#include "compile/istio.h"
#include "upstream/cluster.h"

#define ROOT SRCDIR "/tests/data/istio-samples/certs/root-cert.pem"

#define HDR(kind, name)                                                        \
    "---\napiVersion: networking.istio.io/v1\nkind: " kind                     \
    "\nmetadata: {name: " name ", namespace: default}\n"

/* A declared external API, a declared internal service, and rules for
 * them and for hosts nobody declares. */
static const char RESOURCES[] = HDR(
    "ServiceEntry",
    "api") "spec: {hosts: [api.example.com], location: MESH_EXTERNAL, "
           "resolution: STATIC, ports: [{number: 443, name: https, protocol: "
           "TLS}], "
           "endpoints: [{address: 192.0.2.10}]}\n" HDR(
               "ServiceEntry",
               "inner") "spec: {hosts: [inner.example.com], location: "
                        "MESH_INTERNAL, "
                        "resolution: STATIC, ports: [{number: 443, name: "
                        "https, protocol: TLS}], "
                        "endpoints: [{address: 192.0.2.11}]}\n" HDR(
                            "ServiceEntry",
                            "wild") "spec: {hosts: [\"*.wild.example.com\"], "
                                    "resolution: NONE, "
                                    "ports: [{number: 443, name: https, "
                                    "protocol: TLS}]}\n" HDR(
                                        "DestinationRule",
                                        "api") "spec: {host: api.example.com, "
                                               "trafficPolicy: {tls: {mode: "
                                               "SIMPLE, "
                                               "caCertificates: " ROOT
                                               "}}}\n" HDR(
                                                   "DestinationRule",
                                                   "inner") "spec: {host: "
                                                            "inner.example.com,"
                                                            " trafficPolicy: "
                                                            "{tls: {mode: "
                                                            "SIMPLE, "
                                                            "caCertificates:"
                                                            " " ROOT
                                                            "}}}\n" HDR(
                                                                "DestinationRul"
                                                                "e",
                                                                "pay") "spec:"
                                                                       "\n  "
                                                                       "host: "
                                                                       "pay."
                                                                       "example"
                                                                       ".net\n"
                                                                       "  "
                                                                       "traffic"
                                                                       "Policy:"
                                                                       " {tls: "
                                                                       "{mode: "
                                                                       "SIMPLE,"
                                                                       " caCert"
                                                                       "ificate"
                                                                       "s:"
                                                                       " " ROOT
                                                                       "}}\n"
                                                                       "  "
                                                                       "subsets"
                                                                       ":\n  - "
                                                                       "{name: "
                                                                       "plain}"
                                                                       "\n" HDR(
                                                                           "Des"
                                                                           "tin"
                                                                           "ati"
                                                                           "onR"
                                                                           "ul"
                                                                           "e",
                                                                           "nam"
                                                                           "ed") "spec: {host: sni.example.net, trafficPolicy: {tls: {mode: SIMPLE, "
                                                                                 "sni: front.example.net, caCertificates: " ROOT
                                                                                 "}}}\n" HDR(
                                                                                     "DestinationRule",
                                                                                     "ip") "spec:\n  host: 192.0.2.99\n"
                                                                                           "  trafficPolicy: {tls: {mode: SIMPLE, caCertificates: " ROOT
                                                                                           "}}\n"
                                                                                           "  subsets:\n  - {name: plain}\n  - {name: labelled, labels: {v: '1'}}\n";

struct fx {
    struct resource_set *set;
    struct istio_clusters t;
};

static void setup_text(struct fx *f, const char *text, int mode,
                       uint32_t listener_port, const struct ident_map *prev,
                       struct ident_map *next)
{
    struct buf errs;
    int nerr = 0;

    memset(f, 0, sizeof(*f));
    buf_init(&errs, 1 << 20);
    f->set = resource_load_mem(text, strlen(text), "r.yaml", &errs, &nerr);
    if (nerr != 0)
        fail_msg("resources: %s", buf_cstr(&errs));
    buf_dispose(&errs);
    istio_clusters_init(&f->t, f->set, 1, prev, next);
    f->t.node_ns = "istio-system";
    f->t.outbound_mode = mode;
    f->t.listener_port = listener_port;
}

static void setup(struct fx *f, int mode, uint32_t listener_port,
                  const struct ident_map *prev, struct ident_map *next)
{
    setup_text(f, RESOURCES, mode, listener_port, prev, next);
}

static void teardown(struct fx *f)
{
    istio_clusters_dispose(&f->t);
    resource_set_free(f->set);
}

static const struct cluster *cl(struct fx *f, const char *host,
                                const char *subset, uint32_t port)
{
    int id = istio_cluster_id(&f->t, host, subset, port);

    assert_true(id >= 0);
    return f->t.v[id];
}

static const char *ep(const struct cluster *c, size_t i, char *out, size_t n)
{
    assert_true(i < c->nendpoints);
    return addr_format(&c->endpoints[i], out, n);
}

static void test_registry_only_sends_undeclared_hosts_to_blackhole(void **state)
{
    struct fx f;
    const struct cluster *c;
    char as[ADDR_STRLEN];
    int a, b;

    (void)state;
    setup(&f, RES_REGISTRY_ONLY, 8080, NULL, NULL);
    c = cl(&f, "api.example.com", NULL, 443);
    assert_int_equal(c->origin, CLUSTER_REGISTRY);
    assert_string_equal(ep(c, 0, as, sizeof(as)), "192.0.2.10:443");
    /* Undeclared: a DestinationRule does not declare a host, nor does an
     * IP address declare itself. One BlackHoleCluster for all. */
    a = istio_cluster_id(&f.t, "pay.example.net", NULL, 443);
    b = istio_cluster_id(&f.t, "192.0.2.99", NULL, 0);
    assert_true(a >= 0);
    assert_int_equal(a, b);
    c = f.t.v[a];
    assert_string_equal(c->name, "BlackHoleCluster");
    assert_int_equal(c->origin, CLUSTER_BLACKHOLE);
    assert_int_equal(c->nendpoints, 0);
    assert_null(c->tls);
    /* A wildcard ServiceEntry declares the names it covers. */
    assert_int_equal(cl(&f, "a.wild.example.com", NULL, 443)->origin,
                     CLUSTER_REGISTRY);
    teardown(&f);
}

static void test_allow_any_passes_through(void **state)
{
    struct fx f;
    const struct cluster *c;
    char as[ADDR_STRLEN];

    (void)state;
    setup(&f, RES_ALLOW_ANY, 8080, NULL, NULL);
    /* Declared hosts are as before. */
    assert_int_equal(cl(&f, "api.example.com", NULL, 443)->origin,
                     CLUSTER_REGISTRY);
    /* An IP literal needs no DNS: on the destination's port, else on the
     * listener's (Istio's destination cluster port). */
    c = cl(&f, "198.51.100.7", NULL, 9000);
    assert_int_equal(c->origin, CLUSTER_PASSTHROUGH);
    assert_string_equal(c->name, "198.51.100.7||9000");
    assert_int_equal(c->nendpoints, 1);
    assert_string_equal(ep(c, 0, as, sizeof(as)), "198.51.100.7:9000");
    assert_null(c->tls);
    c = cl(&f, "198.51.100.7", NULL, 0);
    assert_string_equal(c->name, "198.51.100.7||8080");
    assert_string_equal(ep(c, 0, as, sizeof(as)), "198.51.100.7:8080");
    /* The host's DestinationRule applies: TLS, SNI the host name. */
    c = cl(&f, "pay.example.net", NULL, 443);
    assert_int_equal(c->origin, CLUSTER_PASSTHROUGH);
    assert_non_null(c->tls);
    assert_false(c->tls_error);
    assert_string_equal(c->sni, "pay.example.net");
    /* Without a DNS cache a name has no address (strait always has one
     * with config.dir). */
    assert_int_equal(c->nendpoints, 0);
    /* An sni in the rule wins; an IP host sends none. */
    assert_string_equal(cl(&f, "sni.example.net", NULL, 443)->sni,
                        "front.example.net");
    c = cl(&f, "192.0.2.99", NULL, 443);
    assert_non_null(c->tls);
    assert_null(c->sni);
    assert_int_equal(c->nendpoints, 1);
    /* A subset's policy applies. */
    assert_int_equal(cl(&f, "pay.example.net", "plain", 443)->origin,
                     CLUSTER_PASSTHROUGH);
    assert_non_null(cl(&f, "pay.example.net", "plain", 443)->tls);
    /* A wildcard names nothing to resolve: BlackHoleCluster still. */
    c = cl(&f, "*.example.org", NULL, 443);
    assert_int_equal(c->origin, CLUSTER_BLACKHOLE);
    teardown(&f);
}

static void test_subset_labels_select_no_passthrough_address(void **state)
{
    struct fx f;
    const struct cluster *c;

    (void)state;
    setup(&f, RES_ALLOW_ANY, 8080, NULL, NULL);
    /* A subset without labels keeps the host's address; labels select
     * none of it (it has none), as for a DNS ServiceEntry without
     * endpoints. */
    c = cl(&f, "192.0.2.99", "plain", 443);
    assert_int_equal(c->origin, CLUSTER_PASSTHROUGH);
    assert_int_equal(c->nendpoints, 1);
    c = cl(&f, "192.0.2.99", "labelled", 443);
    assert_int_equal(c->origin, CLUSTER_PASSTHROUGH);
    assert_int_equal(c->nendpoints, 0);
    teardown(&f);
}

static void test_external_hosts_get_sni(void **state)
{
    struct fx f;
    const struct cluster *c;

    (void)state;
    setup(&f, RES_REGISTRY_ONLY, 8080, NULL, NULL);
    /* MESH_EXTERNAL: the host is the name TLS origination asks for. */
    c = cl(&f, "api.example.com", NULL, 443);
    assert_non_null(c->tls);
    assert_string_equal(c->sni, "api.example.com");
    /* MESH_INTERNAL: as before, only what the rule says. */
    c = cl(&f, "inner.example.com", NULL, 443);
    assert_non_null(c->tls);
    assert_null(c->sni);
    teardown(&f);
}

/* A mode switch builds what the new mode says; the same mode again keeps
 * the cluster objects (and their counters) by identity. */
static void test_clusters_follow_the_mode_across_snapshots(void **state)
{
    struct fx a, b, c;
    struct ident_map m1, m2, m3;
    const struct cluster *pass, *hole;

    (void)state;
    ident_map_init(&m1);
    ident_map_init(&m2);
    ident_map_init(&m3);
    setup(&a, RES_ALLOW_ANY, 8080, NULL, &m1);
    pass = cl(&a, "198.51.100.7", NULL, 0);
    setup(&b, RES_ALLOW_ANY, 8080, &m1, &m2);
    assert_ptr_equal(cl(&b, "198.51.100.7", NULL, 0), pass);
    setup(&c, RES_REGISTRY_ONLY, 8080, &m2, &m3);
    hole = cl(&c, "198.51.100.7", NULL, 0);
    assert_ptr_not_equal(hole, pass);
    assert_int_equal(hole->origin, CLUSTER_BLACKHOLE);
    teardown(&a);
    teardown(&b);
    teardown(&c);
    istio_cluster_map_dispose(&m1);
    istio_cluster_map_dispose(&m2);
    istio_cluster_map_dispose(&m3);
}

/* A service known only from WorkloadEntries, without a destination port:
 * its only port name, each endpoint on its own number for it (it used to
 * be port 80); with several names there is no port to pick. */
static void test_workload_entry_service_uses_its_only_port(void **state)
{
    static const char text[] = HDR(
        "WorkloadEntry",
        "a") "spec: {address: 192.0.2.1, ports: {http: "
             "8001}, labels: {app: one}}\n" HDR(
                 "WorkloadEntry",
                 "b") "spec: {address: 192.0.2.2, ports: {http: 8002}, labels: "
                      "{app: one}}\n" HDR(
                          "WorkloadEntry",
                          "c") "spec: {address: 192.0.2.3, ports: "
                               "{http: 8003, grpc: 9003}, labels: "
                               "{app: two}}\n";
    struct fx f;
    const struct cluster *c;
    char as[ADDR_STRLEN];

    (void)state;
    setup_text(&f, text, RES_REGISTRY_ONLY, 8080, NULL, NULL);
    c = cl(&f, "one.default.svc.cluster.local", NULL, 0);
    assert_int_equal(c->nendpoints, 2);
    assert_string_equal(ep(c, 0, as, sizeof(as)), "192.0.2.1:8001");
    assert_string_equal(ep(c, 1, as, sizeof(as)), "192.0.2.2:8002");
    /* A port given is the port. */
    c = cl(&f, "one.default.svc.cluster.local", NULL, 7000);
    assert_string_equal(ep(c, 0, as, sizeof(as)), "192.0.2.1:7000");
    /* Two names: no guess. */
    c = cl(&f, "two.default.svc.cluster.local", NULL, 0);
    assert_int_equal(c->nendpoints, 0);
    c = cl(&f, "two.default.svc.cluster.local", NULL, 9003);
    assert_string_equal(ep(c, 0, as, sizeof(as)), "192.0.2.3:9003");
    teardown(&f);
}

/* Endpoints labelled istio.io/dataplane-mode: ambient are HBONE
 * endpoints, with their SPIFFE IDs; others are not; without a mesh
 * certificate the cluster refuses sessions to them (hbone_error). */
static void test_ambient_endpoints_are_hbone(void **state)
{
    static const char text[] =
        HDR("ServiceEntry",
            "amb") "spec: {hosts: [amb.example.test], resolution: STATIC,\n"
                   "  ports: [{number: 80, name: tcp}],\n"
                   "  endpoints: [{address: 192.0.2.1, serviceAccount: web,\n"
                   "    labels: {istio.io/dataplane-mode: ambient}},\n"
                   "    {address: 192.0.2.2, labels: {istio.io/dataplane-mode: "
                   "none}}]}\n" HDR(
                       "ServiceEntry",
                       "plain") "spec: {hosts: [plain.example.test], "
                                "resolution: STATIC,\n"
                                "  ports: [{number: 80, name: tcp}],\n"
                                "  endpoints: [{address: 192.0.2.3}]}\n";
    struct fx f;
    const struct cluster *c;

    (void)state;
    setup_text(&f, text, RES_REGISTRY_ONLY, 8080, NULL, NULL);
    c = cl(&f, "amb.example.test", NULL, 80);
    assert_int_equal(c->nendpoints, 2);
    assert_non_null(c->hbone);
    assert_int_equal(c->hbone[0], 1);
    assert_int_equal(c->hbone[1], 0);
    assert_string_equal(c->hbone_ids[0],
                        "spiffe://cluster.local/ns/default/sa/web");
    assert_null(c->hbone_ids[1]);
    /* No mesh certificate here: refused, never in the clear. */
    assert_int_equal(c->hbone_error, 1);
    assert_null(c->hbone_tls);
    c = cl(&f, "plain.example.test", NULL, 80);
    assert_null(c->hbone);
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_registry_only_sends_undeclared_hosts_to_blackhole),
        cmocka_unit_test(test_allow_any_passes_through),
        cmocka_unit_test(test_subset_labels_select_no_passthrough_address),
        cmocka_unit_test(test_external_hosts_get_sni),
        cmocka_unit_test(test_clusters_follow_the_mode_across_snapshots),
        cmocka_unit_test(test_workload_entry_service_uses_its_only_port),
        cmocka_unit_test(test_ambient_endpoints_are_hbone),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
