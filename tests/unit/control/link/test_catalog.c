/*
 * The catalog stream's lines: what a site exports (only the services
 * labelled strait.io/export, never an address), what a linked site
 * reads back and refuses (another trust domain, names and labels that
 * would not load), and the registry entry it makes of a service, which
 * must load as a resource.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/resource.h"
#include "control/link/catalog.h"
#include "core/arena.h"
#include "core/buf.h"

static const char registry[] =
    "apiVersion: networking.istio.io/v1\n"
    "kind: ServiceEntry\n"
    "metadata: {name: reviews, namespace: shop, labels: "
    "{strait.io/export: \"true\"}}\n"
    "spec:\n"
    "  hosts: [reviews]\n"
    "  location: MESH_INTERNAL\n"
    "  resolution: STATIC\n"
    "  ports: [{number: 9080, name: http, protocol: HTTP}, {number: 9443, "
    "name: grpc, protocol: GRPC}]\n"
    "  subjectAltNames: [spiffe://b.example/ns/shop/sa/reviews, not-spiffe]\n"
    "  endpoints:\n"
    "  - {address: 10.1.0.1, labels: {version: v1}, locality: eu/w/1, "
    "serviceAccount: reviews, weight: 3}\n"
    "  - {address: 10.1.0.2, labels: {version: v2}, serviceAccount: other}\n"
    "---\n"
    "apiVersion: networking.istio.io/v1\n"
    "kind: ServiceEntry\n"
    "metadata: {name: vms, namespace: shop, labels: "
    "{strait.io/export: \"true\"}}\n"
    "spec:\n"
    "  hosts: [vms.shop.svc.cluster.local]\n"
    "  location: MESH_INTERNAL\n"
    "  resolution: STATIC\n"
    "  ports: [{number: 80, name: http, protocol: HTTP}]\n"
    "  workloadSelector: {labels: {app: reviews}}\n"
    "---\n"
    "apiVersion: networking.istio.io/v1\n"
    "kind: WorkloadEntry\n"
    "metadata: {name: vm1, namespace: shop}\n"
    "spec: {address: 10.1.0.3, labels: {app: reviews, version: v3}}\n"
    "---\n"
    "apiVersion: networking.istio.io/v1\n"
    "kind: ServiceEntry\n"
    "metadata: {name: private, namespace: shop, labels: "
    "{strait.io/export: \"false\"}}\n"
    "spec: {hosts: [private.shop.svc.cluster.local], ports: [{number: 80, "
    "name: http, protocol: HTTP}], resolution: STATIC, endpoints: "
    "[{address: 10.1.0.9}]}\n";

static struct resource_set *load(const char *text)
{
    struct res_input in = {"test", text, strlen(text), NULL, NULL, NULL};
    struct buf errs;
    int nerr = 0;
    struct resource_set *set;

    buf_init(&errs, 1 << 20);
    set = resource_load_inputs(NULL, "default", &in, 1, &errs, &nerr);
    if (nerr != 0)
        fail_msg("%s", buf_cstr(&errs));
    buf_dispose(&errs);
    return set;
}

static const struct catalog_self self = {"site-b", "net-b", "b.example"};

static void test_encode_decode(void **state)
{
    struct resource_set *set = load(registry);
    struct buf b;
    struct arena a;
    struct catalog c;
    char why[512];
    const struct cat_service *s;

    (void)state;
    buf_init(&b, 1 << 20);
    assert_int_equal(catalog_encode(&b, set, &self, 7), 0);
    /* One line; no address leaves the site; nothing unexported. */
    assert_non_null(strchr(buf_cstr(&b), '\n'));
    assert_int_equal(strchr(buf_cstr(&b), '\n') - buf_cstr(&b) + 1,
                     (long)buf_len(&b));
    assert_null(strstr(buf_cstr(&b), "10.1.0."));
    assert_null(strstr(buf_cstr(&b), "private"));
    arena_init(&a, 4096);
    assert_int_equal(catalog_decode(buf_ptr(&b), buf_len(&b) - 1, "b.example",
                                    &a, &c, why, sizeof(why)),
                     0);
    assert_int_equal(c.type, CAT_CATALOG);
    assert_int_equal(c.version, 7);
    assert_string_equal(c.site, "site-b");
    assert_string_equal(c.network, "net-b");
    assert_int_equal(c.nservices, 2);
    s = &c.services[0];
    assert_string_equal(s->hostname, "reviews.shop.svc.cluster.local");
    assert_int_equal(s->nports, 2);
    assert_int_equal(s->ports[1].number, 9443);
    assert_string_equal(s->ports[1].protocol, "GRPC");
    /* subjectAltNames' SPIFFE IDs, then the endpoints' accounts, once. */
    assert_int_equal(s->nsans, 2);
    assert_string_equal(s->sans[0], "spiffe://b.example/ns/shop/sa/reviews");
    assert_string_equal(s->sans[1], "spiffe://b.example/ns/shop/sa/other");
    assert_int_equal(s->nendpoints, 2);
    assert_string_equal(s->endpoints[0].locality, "eu/w/1");
    assert_int_equal(s->endpoints[0].weight, 3);
    assert_int_equal(s->endpoints[1].weight, 1);
    assert_string_equal(s->endpoints[1].labels[0].value, "v2");
    /* The WorkloadEntry the second one selects. */
    s = &c.services[1];
    assert_string_equal(s->hostname, "vms.shop.svc.cluster.local");
    assert_int_equal(s->nendpoints, 1);
    assert_int_equal(s->endpoints[0].nlabels, 2);
    arena_dispose(&a);
    buf_dispose(&b);
    resource_set_free(set);
}

/* What a site writes always reads back, whatever its registry holds:
 * unnamed ports are named, labels and localities another site would
 * refuse are left out, weights capped, other trust domains' identities
 * not announced, services without ports skipped. */
static void test_encode_only_what_decodes(void **state)
{
    static const char odd[] =
        "apiVersion: networking.istio.io/v1\n"
        "kind: ServiceEntry\n"
        "metadata: {name: odd, namespace: shop, labels: "
        "{strait.io/export: \"true\"}}\n"
        "spec:\n"
        "  hosts: [odd.shop.svc.cluster.local]\n"
        "  resolution: STATIC\n"
        "  ports: [{number: 81}, {number: 82, name: \"a b\"}]\n"
        "  subjectAltNames: [spiffe://other.example/ns/x/sa/y, "
        "spiffe://b.example/ns/x/sa/y]\n"
        "  endpoints:\n"
        "  - {address: 10.2.0.1, labels: {\"bad key\": v, good: \"a b\", "
        "ok: yes}, locality: \"eu west\", weight: 9000000}\n"
        "---\n"
        "apiVersion: networking.istio.io/v1\n"
        "kind: ServiceEntry\n"
        "metadata: {name: noports, namespace: shop, labels: "
        "{strait.io/export: \"true\"}}\n"
        "spec: {hosts: [noports.shop.svc.cluster.local], resolution: NONE, "
        "location: MESH_EXTERNAL}\n";
    struct resource_set *set = load(odd);
    struct buf b;
    struct arena a;
    struct catalog c;
    char why[512];
    const struct cat_service *s;

    (void)state;
    buf_init(&b, 1 << 20);
    assert_int_equal(catalog_encode(&b, set, &self, 1), 0);
    arena_init(&a, 4096);
    if (catalog_decode(buf_ptr(&b), buf_len(&b) - 1, "b.example", &a, &c, why,
                       sizeof(why)) < 0)
        fail_msg("%s: %s", why, buf_cstr(&b));
    assert_int_equal(c.nservices, 1);
    s = &c.services[0];
    assert_string_equal(s->ports[0].name, "port-81");
    assert_string_equal(s->ports[1].name, "port-82");
    assert_int_equal(s->nsans, 1);
    assert_string_equal(s->sans[0], "spiffe://b.example/ns/x/sa/y");
    assert_int_equal(s->endpoints[0].nlabels, 1);
    assert_string_equal(s->endpoints[0].labels[0].key, "ok");
    assert_string_equal(s->endpoints[0].locality, "");
    assert_int_equal(s->endpoints[0].weight, 1000000);
    arena_dispose(&a);
    buf_dispose(&b);
    resource_set_free(set);
}

static void test_empty_catalog_and_ping(void **state)
{
    struct buf b;
    struct arena a;
    struct catalog c;
    char why[256];

    (void)state;
    buf_init(&b, 4096);
    assert_int_equal(catalog_encode(&b, NULL, &self, 1), 0);
    arena_init(&a, 4096);
    assert_int_equal(catalog_decode(buf_ptr(&b), buf_len(&b) - 1, "b.example",
                                    &a, &c, why, sizeof(why)),
                     0);
    assert_int_equal(c.nservices, 0);
    assert_int_equal(catalog_decode("{\"type\":\"ping\"}", 15, "b.example", &a,
                                    &c, why, sizeof(why)),
                     0);
    assert_int_equal(c.type, CAT_PING);
    arena_dispose(&a);
    buf_dispose(&b);
}

static void refused(const char *services, const char *want)
{
    char line[8192], why[512];
    struct arena a;
    struct catalog c;

    snprintf(line, sizeof(line),
             "{\"type\":\"catalog\",\"version\":1,\"site\":\"b\","
             "\"network\":\"n\",\"trustDomain\":\"b.example\","
             "\"services\":[%s]}",
             services);
    arena_init(&a, 4096);
    why[0] = '\0';
    assert_int_equal(catalog_decode(line, strlen(line), "b.example", &a, &c,
                                    why, sizeof(why)),
                     -1);
    if (strstr(why, want) == NULL)
        fail_msg("'%s': reason '%s' lacks '%s'", services, why, want);
    arena_dispose(&a);
}

#define PORTS                                                                  \
    "\"ports\":[{\"number\":80,\"name\":\"http\",\"protocol\":\"HTTP\"}]"

static void test_refusals(void **state)
{
    char why[512];
    struct arena a;
    struct catalog c;
    const char *td_line =
        "{\"type\":\"catalog\",\"version\":1,\"site\":\"b\",\"network\":"
        "\"n\",\"trustDomain\":\"other.example\",\"services\":[]}";

    (void)state;
    arena_init(&a, 4096);
    assert_int_equal(catalog_decode(td_line, strlen(td_line), "b.example", &a,
                                    &c, why, sizeof(why)),
                     -1);
    assert_non_null(strstr(why, "set spec.trustDomain to 'other.example'"));
    assert_int_equal(catalog_decode("{\"type\":\"x\"}", 12, "b.example", &a, &c,
                                    why, sizeof(why)),
                     -1);
    assert_int_equal(
        catalog_decode("nope", 4, "b.example", &a, &c, why, sizeof(why)), -1);
    arena_dispose(&a);
    refused("{\"hostname\":\"bad host\"," PORTS ",\"endpoints\":[]}",
            "hostname must be a DNS name");
    refused("{\"hostname\":\"a.b\",\"ports\":[{\"number\":0,\"name\":\"h\","
            "\"protocol\":\"HTTP\"}],\"endpoints\":[]}",
            "1 to 65535");
    refused("{\"hostname\":\"a.b\",\"ports\":[{\"number\":80,\"name\":\"h\","
            "\"protocol\":\"SMTP\"}],\"endpoints\":[]}",
            "not one of Istio's");
    refused("{\"hostname\":\"a.b\",\"ports\":[],\"endpoints\":[]}",
            "ports must be 1 to");
    refused("{\"hostname\":\"a.b\"," PORTS ",\"endpoints\":[]},{\"hostname\":"
            "\"A.b\"," PORTS ",\"endpoints\":[]}",
            "listed twice");
    refused("{\"hostname\":\"a.b\"," PORTS ",\"serviceAccounts\":["
            "\"spiffe://evil.example/ns/a/sa/b\"],\"endpoints\":[]}",
            "speaks only for its own");
    refused("{\"hostname\":\"a.b\"," PORTS ",\"endpoints\":[{\"labels\":"
            "{\"k\":\"v\\\"}\"}}]}",
            "label text");
    refused("{\"hostname\":\"a.b\"," PORTS ",\"endpoints\":[{\"weight\":0}]}",
            "weight must be");
    refused("{\"hostname\":\"a.b\"," PORTS ",\"endpoints\":[{\"locality\":"
            "\"a b\"}]}",
            "locality");
}

/* The entry a linked site loads: on the remote network, without an
 * address (reached through the network's gateway). */
static void test_resource_loads(void **state)
{
    struct catalog_link link = {"site-b", "istio-system", "net-b"};
    struct cat_label labels[] = {{"version", "v1"}};
    struct cat_endpoint ep = {labels, 1, "eu/w/1", 2};
    struct cat_port ports[] = {{9080, "http", "HTTP"}, {9443, "grpc", "GRPC"}};
    const char *sans[] = {"spiffe://b.example/ns/shop/sa/reviews"};
    struct cat_service svc = {
        "reviews.shop.svc.cluster.local", ports, 2, sans, 1, &ep, 1};
    struct buf b;
    struct resource_set *set;
    const struct res_service_entry *se;
    const struct res_workload_entry *we;
    char name[64];

    (void)state;
    buf_init(&b, 1 << 20);
    assert_int_equal(catalog_resource(&b, &link, &svc), 0);
    set = load(buf_cstr(&b));
    assert_int_equal(set->n, 1);
    catalog_resource_name("site-b", svc.hostname, name);
    assert_string_equal(set->v[0]->meta.name, name);
    assert_string_equal(set->v[0]->meta.ns, "istio-system");
    se = res_service_entry(set->v[0]);
    assert_int_equal(se->resolution, RES_RESOLVE_STATIC);
    assert_int_equal(se->ports.n, 2);
    assert_int_equal(se->subject_alt_names.n, 1);
    assert_int_equal(se->endpoints.n, 1);
    we = (const struct res_workload_entry *)se->endpoints.v;
    assert_true(we->address == NULL || we->address[0] == '\0');
    assert_string_equal(we->network, "net-b");
    assert_string_equal(we->locality, "eu/w/1");
    assert_int_equal(we->weight, 2);
    assert_int_equal(we->labels.n, 1);
    resource_set_free(set);
    buf_dispose(&b);
}

/* A remote service scaled to zero is announced with no endpoints. Its
 * entry must load (an error would hold back every later snapshot of the
 * linked site) and give a service with no endpoints. Found by
 * fuzz_catalog. */
static void test_service_without_endpoints_loads(void **state)
{
    const char *line =
        "{\"type\":\"catalog\",\"version\":1,\"site\":\"b\",\"network\":"
        "\"n\",\"trustDomain\":\"b.example\",\"services\":[{\"hostname\":"
        "\"r.default.svc.cluster.local\"," PORTS ",\"serviceAccounts\":["
        "\"spiffe://b.example/ns/d/sa/r\"],\"endpoints\":[]}]}";
    struct catalog_link link = {"site-b", "default", "net-b"};
    struct resource_set *set;
    struct arena a;
    struct catalog c;
    struct buf b;
    char why[512];

    (void)state;
    arena_init(&a, 4096);
    assert_int_equal(catalog_decode(line, strlen(line), "b.example", &a, &c,
                                    why, sizeof(why)),
                     0);
    assert_int_equal(c.nservices, 1);
    assert_int_equal(c.services[0].nendpoints, 0);
    buf_init(&b, 1 << 20);
    assert_int_equal(catalog_resource(&b, &link, &c.services[0]), 0);
    set = load(buf_cstr(&b));
    assert_int_equal(set->n, 1);
    assert_int_equal(res_service_entry(set->v[0])->endpoints.n, 0);
    resource_set_free(set);
    buf_dispose(&b);
    arena_dispose(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_decode),
        cmocka_unit_test(test_encode_only_what_decodes),
        cmocka_unit_test(test_empty_catalog_and_ping),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_service_without_endpoints_loads),
        cmocka_unit_test(test_resource_loads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
