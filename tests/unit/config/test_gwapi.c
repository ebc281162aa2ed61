/*
 * Unit tests for src/config/gwapi.c: the hostname intersection of a
 * listener and a route, the precedence order of matches across routes,
 * which Gateways a labelled node serves, and the lowering itself (the
 * VirtualService it writes is sorted by that order).
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

#include "config/gwapi.h"
#include "config/resource.h"
#include "core/buf.h"

static void test_host_intersection(void **state)
{
    (void)state;
    assert_string_equal(gwapi_host_intersect(NULL, NULL), "*");
    assert_string_equal(gwapi_host_intersect(NULL, "a.example.com"),
                        "a.example.com");
    assert_string_equal(gwapi_host_intersect("a.example.com", NULL),
                        "a.example.com");
    assert_string_equal(gwapi_host_intersect("a.example.com", "A.Example.com"),
                        "a.example.com");
    /* The more specific of the two, either way round. */
    assert_string_equal(gwapi_host_intersect("*.example.com", "a.example.com"),
                        "a.example.com");
    assert_string_equal(
        gwapi_host_intersect("a.b.example.com", "*.example.com"),
        "a.b.example.com");
    assert_string_equal(
        gwapi_host_intersect("*.example.com", "*.a.example.com"),
        "*.a.example.com");
    /* A wildcard is at least one label: not the bare domain. */
    assert_null(gwapi_host_intersect("*.example.com", "example.com"));
    assert_null(gwapi_host_intersect("a.example.com", "b.example.com"));
    assert_null(gwapi_host_intersect("*.example.com", "*.example.org"));
    assert_null(gwapi_host_intersect("a.example.com", "*.a.example.com"));
}

static struct gwapi_order order(int rank, size_t len, int method, size_t nh,
                                size_t nq, const char *created,
                                const char *name, size_t rule)
{
    struct gwapi_order o = {rank,    len,       method, nh,   nq,
                            created, "default", name,   rule, 0};
    return o;
}

static void test_precedence(void **state)
{
    struct gwapi_order exact = order(3, 2, 0, 0, 0, NULL, "z", 0);
    struct gwapi_order long_prefix = order(2, 10, 0, 0, 0, NULL, "z", 0);
    struct gwapi_order short_prefix = order(2, 3, 0, 0, 0, NULL, "a", 0);
    struct gwapi_order method = order(2, 3, 1, 0, 0, NULL, "z", 0);
    struct gwapi_order headers2 = order(2, 3, 0, 2, 0, NULL, "z", 0);
    struct gwapi_order headers1 = order(2, 3, 0, 1, 5, NULL, "a", 0);
    struct gwapi_order query = order(2, 3, 0, 1, 6, NULL, "z", 0);
    struct gwapi_order old =
        order(2, 3, 0, 0, 0, "2025-01-01T00:00:00Z", "z", 0);
    struct gwapi_order young =
        order(2, 3, 0, 0, 0, "2026-01-01T00:00:00Z", "a", 0);
    struct gwapi_order rule0 = order(2, 3, 0, 0, 0, NULL, "a", 0);
    struct gwapi_order rule1 = order(2, 3, 0, 0, 0, NULL, "a", 1);

    (void)state;
    assert_true(gwapi_order_cmp(&exact, &long_prefix) < 0);
    assert_true(gwapi_order_cmp(&long_prefix, &exact) > 0);
    assert_true(gwapi_order_cmp(&long_prefix, &short_prefix) < 0);
    assert_true(gwapi_order_cmp(&method, &headers2) < 0);
    assert_true(gwapi_order_cmp(&headers2, &headers1) < 0);
    assert_true(gwapi_order_cmp(&query, &headers1) < 0);
    /* Age before name: the older route wins though its name is later. */
    assert_true(gwapi_order_cmp(&old, &young) < 0);
    /* No age known: the name decides. */
    assert_true(gwapi_order_cmp(&short_prefix, &headers2) > 0);
    assert_true(gwapi_order_cmp(&rule0, &rule1) < 0);
    assert_int_equal(gwapi_order_cmp(&rule0, &rule0), 0);
}

static const char lowered[] =
    "apiVersion: gateway.networking.k8s.io/v1\n"
    "kind: Gateway\n"
    "metadata: {name: edge, namespace: default}\n"
    "spec:\n"
    "  gatewayClassName: istio\n"
    "  listeners: [{name: web, port: 8080, protocol: HTTP}]\n"
    "---\n"
    "apiVersion: gateway.networking.k8s.io/v1\n"
    "kind: HTTPRoute\n"
    "metadata: {name: r, namespace: default}\n"
    "spec:\n"
    "  parentRefs: [{name: edge}]\n"
    "  rules:\n"
    "  - matches: [{path: {type: PathPrefix, value: /a}}]\n"
    "    backendRefs: [{name: nosuch, port: 80}]\n"
    "  - matches: [{path: {type: Exact, value: /a/b}}]\n"
    "    backendRefs: [{name: nosuch, port: 80}]\n";

static void test_lowering_sorts_rules(void **state)
{
    struct buf errs;
    int nerr = -1;
    struct resource_set *set;
    const struct resource *gw, *vs;
    const struct res_virtual_service *v;
    const struct res_http_route *h;

    (void)state;
    buf_init(&errs, 1 << 20);
    set =
        resource_load_mem(lowered, sizeof(lowered) - 1, "t.yaml", &errs, &nerr);
    assert_non_null(set);
    assert_int_equal(nerr, 0);
    gw = resource_find(set, RES_GATEWAY, "default", "edge-gwapi-web");
    assert_non_null(gw);
    assert_int_equal(gwapi_node_serves(gw, "default", NULL), 1);
    vs = resource_find(set, RES_VIRTUAL_SERVICE, "default", "edge-gwapi-web-0");
    assert_non_null(vs);
    v = res_virtual_service(vs);
    /* The Exact match of the second rule first, then /a and /a/. */
    assert_int_equal(v->http.n, 3);
    h = (const struct res_http_route *)v->http.v;
    assert_string_equal(
        ((const struct res_http_match *)h[0].match.v)->uri.exact, "/a/b");
    assert_string_equal(
        ((const struct res_http_match *)h[1].match.v)->uri.exact, "/a");
    assert_string_equal(
        ((const struct res_http_match *)h[2].match.v)->uri.prefix, "/a/");
    /* No Service nosuch: 500. */
    assert_int_equal(h[0].direct_response.status, 500);
    assert_non_null(resource_find(set, RES_HTTP_ROUTE, "default", "r")->status);
    resource_set_free(set);
    buf_dispose(&errs);
}

static void test_node_label_selects_one_gateway(void **state)
{
    struct buf errs;
    int nerr = -1;
    struct resource_set *set;
    const struct resource *gw;
    struct conf_strpair pair = {(char *)GWAPI_NAME_LABEL, (char *)"edge"};
    struct conf_strpair other = {(char *)GWAPI_NAME_LABEL, (char *)"other"};
    struct conf_strmap mine = {&pair, 1}, theirs = {&other, 1};

    (void)state;
    buf_init(&errs, 1 << 20);
    set =
        resource_load_mem(lowered, sizeof(lowered) - 1, "t.yaml", &errs, &nerr);
    assert_non_null(set);
    gw = resource_find(set, RES_GATEWAY, "default", "edge-gwapi-web");
    assert_non_null(gw);
    assert_int_equal(gwapi_node_serves(gw, "default", &mine), 1);
    assert_int_equal(gwapi_node_serves(gw, "default", &theirs), 0);
    assert_int_equal(gwapi_node_serves(gw, "elsewhere", &mine), 0);
    resource_set_free(set);
    buf_dispose(&errs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_intersection),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_lowering_sorts_rules),
        cmocka_unit_test(test_node_label_selects_one_gateway),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
