/*
 * Unit tests for src/compile/authz.c, through authz_check(): which
 * policies apply to the node, Istio's evaluation order (CUSTOM, DENY,
 * ALLOW; AUDIT marks), every source, operation and condition field with
 * its not- form compiled from YAML, IP blocks and the allow-nothing policy.
 * The evaluator's own parsers (path templates, claim paths) are tested in
 * tests/unit/policy/test_authz.c.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "config/conf.h"
#include "config/resource.h"
#include "core/arena.h"
#include "core/buf.h"
#include "http/http.h"
#include "core/json.h"
#include "compile/authz.h"
#include "policy/authz.h"
#include "policy/jwt.h"

struct fx {
    struct resource_set *set;
    struct authz *a;
    struct conf_strmap labels;
    struct conf_strpair pair;
    struct sockaddr_in peer;
    struct sockaddr_in remote;
    int has_remote;
    struct arena arena;
    struct http_fields headers;
    const struct jwt_result *jwt;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    f->pair.key = "istio";
    f->pair.val = "ingressgateway";
    f->labels.v = &f->pair;
    f->labels.n = 1;
    arena_init(&f->arena, 4096);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    authz_unref(f->a);
    resource_set_free(f->set);
    arena_dispose(&f->arena);
    free(f);
    return 0;
}

static void build(struct fx *f, const char *yaml)
{
    struct buf errs;
    char *err = NULL;
    int nerr = 0;

    authz_unref(f->a);
    resource_set_free(f->set);
    buf_init(&errs, 1 << 16);
    f->set = resource_load_mem(yaml, strlen(yaml), "p.yaml", &errs, &nerr);
    if (nerr)
        fprintf(stderr, "%s", buf_cstr(&errs));
    buf_dispose(&errs);
    assert_int_equal(nerr, 0);
    f->a =
        compile_authz(f->set, "istio-system", &f->labels, "istio-system", &err);
    assert_null(err);
}

static void peer(struct fx *f, const char *ip)
{
    memset(&f->peer, 0, sizeof(f->peer));
    f->peer.sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, ip, &f->peer.sin_addr), 1);
}

static void header(struct fx *f, const char *name, const char *value)
{
    assert_int_equal(http_fields_add(&f->headers, &f->arena, slice_of(name),
                                     slice_of(value), 100),
                     0);
}

/* decide() checks one request; returns "allow", "deny ns/name", or
 * "deny" (no ALLOW policy matched). */
static const char *decide(struct fx *f, const char *principal,
                          const char *method, const char *host,
                          const char *path, uint32_t port)
{
    static char out[256];
    struct authz_request r;
    struct authz_decision d;

    memset(&r, 0, sizeof(r));
    r.principal = slice_of(principal);
    r.peer = (const struct sockaddr *)&f->peer;
    r.remote = f->has_remote ? (const struct sockaddr *)&f->remote : NULL;
    r.method = slice_of(method);
    r.host = slice_of(host);
    r.path = slice_of(path);
    r.port = port;
    r.sni = slice_of("sni.example.com");
    r.headers = &f->headers;
    r.jwt = f->jwt;
    authz_check(f->a, &r, &d);
    if (d.allowed)
        return "allow";
    snprintf(out, sizeof(out), "deny%s%s", d.policy ? " " : "",
             d.policy ? d.policy : "");
    return out;
}

#define AP(name, ns, body)                                                     \
    "apiVersion: security.istio.io/v1\n"                                       \
    "kind: AuthorizationPolicy\n"                                              \
    "metadata: {name: " name ", namespace: " ns "}\n"                          \
    "spec:\n" body "---\n"

static void test_no_policy_allows(void **state)
{
    struct fx *f = *state;

    build(f, "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\n"
             "metadata: {name: w}\nspec: {address: 10.0.0.1}\n");
    assert_null(f->a);
    peer(f, "10.0.0.1");
    assert_string_equal(decide(f, "", "GET", "a.com", "/", 80), "allow");
}

static void test_scope(void **state)
{
    struct fx *f = *state;

    build(f, AP("other-ns", "shop", "  action: DENY\n  rules: [{}]\n")
                 AP("other-labels", "istio-system",
                    "  selector: {matchLabels: {app: x}}\n"
                    "  action: DENY\n  rules: [{}]\n")
                     AP("mine", "istio-system",
                        "  selector: {matchLabels: {istio: ingressgateway}}\n"
                        "  action: AUDIT\n  rules: [{}]\n")
                         AP("mesh", "istio-system", "  action: AUDIT\n"));
    /* Only the last two apply: another namespace's and other labels' do
     * not. */
    assert_int_equal(authz_count(f->a), 2);
    peer(f, "10.0.0.1");
    assert_string_equal(decide(f, "", "GET", "a.com", "/", 80), "allow");
}

static void test_order_and_allow_nothing(void **state)
{
    struct fx *f = *state;

    build(f,
          AP("allow-get", "istio-system",
             "  rules: [{to: [{operation: {methods: [GET]}}]}]\n")
              AP("deny-admin", "istio-system",
                 "  action: DENY\n"
                 "  rules: [{to: [{operation: {paths: [\"/admin*\"]}}]}]\n"));
    peer(f, "10.0.0.1");
    assert_string_equal(decide(f, "", "GET", "a.com", "/x", 80), "allow");
    /* DENY wins over a matching ALLOW. */
    assert_string_equal(decide(f, "", "GET", "a.com", "/admin/x", 80),
                        "deny istio-system/deny-admin");
    /* With an ALLOW policy, what none allows is denied. */
    assert_string_equal(decide(f, "", "POST", "a.com", "/x", 80), "deny");

    /* spec: {} is allow-nothing; rules: [{}] allows everything. */
    build(f, AP("nothing", "istio-system", "  {}\n"));
    assert_string_equal(decide(f, "", "GET", "a.com", "/", 80), "deny");
    build(f, AP("nothing", "istio-system", "  {}\n")
                 AP("all", "istio-system", "  rules: [{}]\n"));
    assert_string_equal(decide(f, "", "GET", "a.com", "/", 80), "allow");
    /* CUSTOM has no provider here: what it matches is denied first. */
    build(f, AP("all", "istio-system", "  rules: [{}]\n")
                 AP("ext", "istio-system",
                    "  action: CUSTOM\n  provider: {name: opa}\n"
                    "  rules: [{to: [{operation: {paths: [/ext]}}]}]\n"));
    assert_string_equal(decide(f, "", "GET", "a.com", "/ext", 80),
                        "deny istio-system/ext");
    assert_string_equal(decide(f, "", "GET", "a.com", "/other", 80), "allow");
}

static void test_source_fields(void **state)
{
    struct fx *f = *state;

    build(f,
          AP("src", "istio-system",
             "  action: DENY\n"
             "  rules:\n"
             "  - from: [{source: {principals: [cluster.local/ns/bad/sa/x]}}]\n"
             "  - from: [{source: {namespaces: [evil]}}]\n"
             "  - from: [{source: {ipBlocks: [192.168.0.0/16], notIpBlocks: "
             "[192.168.7.7]}}]\n"
             "  - from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]\n"
             "  - from: [{source: {notPrincipals: [\"*\"], ipBlocks: "
             "[10.9.0.0/16]}}]\n"));
    peer(f, "10.0.0.1");
    assert_string_equal(
        decide(f, "cluster.local/ns/bad/sa/x", "GET", "a", "/", 1),
        "deny istio-system/src");
    assert_string_equal(
        decide(f, "cluster.local/ns/good/sa/x", "GET", "a", "/", 1), "allow");
    assert_string_equal(
        decide(f, "cluster.local/ns/evil/sa/y", "GET", "a", "/", 1),
        "deny istio-system/src");
    peer(f, "192.168.1.2");
    assert_string_equal(decide(f, "", "GET", "a", "/", 1),
                        "deny istio-system/src");
    peer(f, "192.168.7.7");
    assert_string_equal(decide(f, "", "GET", "a", "/", 1), "allow");
    /* remote.ip: the client behind trusted proxies, else the peer. */
    peer(f, "10.0.0.1");
    f->has_remote = 1;
    f->remote.sin_family = AF_INET;
    inet_pton(AF_INET, "203.0.113.9", &f->remote.sin_addr);
    assert_string_equal(decide(f, "", "GET", "a", "/", 1),
                        "deny istio-system/src");
    f->has_remote = 0;
    /* notPrincipals "*": only peers without an identity. */
    peer(f, "10.9.1.1");
    assert_string_equal(decide(f, "", "GET", "a", "/", 1),
                        "deny istio-system/src");
    assert_string_equal(
        decide(f, "cluster.local/ns/a/sa/b", "GET", "a", "/", 1), "allow");
}

static void test_operation_fields(void **state)
{
    struct fx *f = *state;

    build(f, AP("op", "istio-system",
                "  rules:\n"
                "  - to: [{operation: {hosts: [\"*.example.com\"], notHosts: "
                "[bad.example.com], methods: [GET, HEAD], ports: [\"8080\"], "
                "paths: [\"/api/{*}/items\", \"/files/{**}\", /exact, "
                "\"*.png\"], notPaths: [\"/files/secret*\"]}}]\n"));
    peer(f, "10.0.0.1");
    assert_string_equal(
        decide(f, "", "GET", "a.example.com:8080", "/api/v1/items?x=1", 8080),
        "allow");
    assert_string_equal(decide(f, "", "GET", "A.Example.COM", "/exact", 8080),
                        "allow");
    assert_string_equal(decide(f, "", "GET", "bad.example.com", "/exact", 8080),
                        "deny");
    assert_string_equal(decide(f, "", "POST", "a.example.com", "/exact", 8080),
                        "deny");
    assert_string_equal(decide(f, "", "GET", "a.example.com", "/exact", 80),
                        "deny");
    /* {*} is one whole segment. */
    assert_string_equal(
        decide(f, "", "GET", "a.example.com", "/api/v1/v2/items", 8080),
        "deny");
    assert_string_equal(
        decide(f, "", "GET", "a.example.com", "/api//items", 8080), "deny");
    assert_string_equal(
        decide(f, "", "GET", "a.example.com", "/files/a/b/c", 8080), "allow");
    assert_string_equal(
        decide(f, "", "GET", "a.example.com", "/files/secret/1", 8080), "deny");
    assert_string_equal(
        decide(f, "", "GET", "a.example.com", "/img/x.png", 8080), "allow");
}

static void test_conditions(void **state)
{
    struct fx *f = *state;

    build(f, AP("when", "istio-system",
                "  rules:\n"
                "  - when:\n"
                "    - {key: \"request.headers[X-Env]\", values: [prod, "
                "\"stag*\"]}\n"
                "    - {key: destination.port, notValues: [\"9000\"]}\n"
                "    - {key: connection.sni, values: [\"*.example.com\"]}\n"
                "    - {key: source.ip, values: [10.0.0.0/8]}\n"));
    peer(f, "10.1.2.3");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "deny");
    header(f, "x-env", "staging");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "allow");
    assert_string_equal(decide(f, "", "GET", "a", "/", 9000), "deny");
    peer(f, "11.0.0.1");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "deny");
}

/* token() stands for a verified JWT with these claims (as jwt.c fills a
 * jwt_result). */
static void token(struct fx *f, struct jwt_result *res, const char *claims)
{
    const char *why;
    struct slice iss, sub;
    char *p;

    memset(res, 0, sizeof(*res));
    res->claims = json_parse(&f->arena, claims, strlen(claims), 16, &why);
    assert_non_null(res->claims);
    iss = json_string(json_get(res->claims, "iss"));
    sub = json_string(json_get(res->claims, "sub"));
    p = arena_alloc(&f->arena, iss.n + sub.n + 2);
    snprintf(p, iss.n + sub.n + 2, "%.*s/%.*s", (int)iss.n, iss.p, (int)sub.n,
             sub.p);
    res->principal = slice_of(p);
    res->aud = json_get(res->claims, "aud");
    res->presenter = json_string(json_get(res->claims, "azp"));
    if (res->presenter.p == NULL)
        res->presenter = slice_of("");
    f->jwt = res;
}

/* requestPrincipals and request.auth.*: Istio's JWT fields, read from
 * the verified token; without one they match no value and every
 * notValue. */
static void test_jwt_fields(void **state)
{
    struct fx *f = *state;
    struct jwt_result res;

    peer(f, "10.1.2.3");
    build(f, AP("need-jwt", "istio-system",
                "  rules:\n"
                "  - from: [{source: {requestPrincipals: [\"https://idp/*\"], "
                "notRequestPrincipals: [\"*/mallory\"]}}]\n"));
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "deny");
    token(f, &res, "{\"iss\":\"https://idp\",\"sub\":\"alice\"}");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "allow");
    token(f, &res, "{\"iss\":\"https://idp\",\"sub\":\"mallory\"}");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "deny");
    token(f, &res, "{\"iss\":\"https://other\",\"sub\":\"alice\"}");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "deny");

    /* Any token at all: requestPrincipals ["*"]; a DENY of requests
     * without one: notRequestPrincipals ["*"]. */
    build(f, AP("no-anon", "istio-system",
                "  action: DENY\n"
                "  rules: [{from: [{source: {notRequestPrincipals: "
                "[\"*\"]}}]}]\n"));
    f->jwt = NULL;
    assert_string_equal(decide(f, "", "GET", "a", "/", 80),
                        "deny istio-system/no-anon");
    token(f, &res, "{\"iss\":\"x\",\"sub\":\"y\"}");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "allow");

    build(f, AP("claims", "istio-system",
                "  rules:\n"
                "  - when:\n"
                "    - {key: request.auth.principal, values: [\"idp/*\"]}\n"
                "    - {key: request.auth.audiences, values: [api]}\n"
                "    - {key: request.auth.presenter, notValues: [evil]}\n"
                "    - {key: \"request.auth.claims[groups]\", values: "
                "[\"admin*\"]}\n"
                "    - {key: \"request.auth.claims[org][unit][name]\", "
                "values: [core]}\n"
                "    - {key: \"request.auth.claims[level]\", notValues: "
                "[low]}\n"));
    f->jwt = NULL;
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "deny");
    token(f, &res,
          "{\"iss\":\"idp\",\"sub\":\"a\",\"aud\":[\"web\",\"api\"],"
          "\"azp\":\"cli\",\"groups\":[\"dev\",\"admins\"],"
          "\"org\":{\"unit\":{\"name\":\"core\"}}}");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "allow");
    /* Each condition on its own fails the rule. */
    token(f, &res,
          "{\"iss\":\"idp\",\"sub\":\"a\",\"aud\":\"api\",\"azp\":\"evil\","
          "\"groups\":\"admin\",\"org\":{\"unit\":{\"name\":\"core\"}}}");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "deny");
    token(f, &res,
          "{\"iss\":\"idp\",\"sub\":\"a\",\"aud\":\"api\","
          "\"groups\":\"admin\",\"org\":{\"unit\":{\"name\":\"core\"}}}");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "allow");
    token(f, &res,
          "{\"iss\":\"idp\",\"sub\":\"a\",\"aud\":\"web\","
          "\"groups\":\"admin\",\"org\":{\"unit\":{\"name\":\"core\"}}}");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "deny");
    token(f, &res,
          "{\"iss\":\"idp\",\"sub\":\"a\",\"aud\":\"api\","
          "\"groups\":[\"dev\"],\"org\":{\"unit\":{\"name\":\"core\"}}}");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "deny");
    token(f, &res,
          "{\"iss\":\"idp\",\"sub\":\"a\",\"aud\":\"api\","
          "\"groups\":\"admin\",\"org\":{\"unit\":\"core\"}}");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "deny");
    token(f, &res,
          "{\"iss\":\"idp\",\"sub\":\"a\",\"aud\":\"api\",\"level\":\"low\","
          "\"groups\":\"admin\",\"org\":{\"unit\":{\"name\":\"core\"}}}");
    assert_string_equal(decide(f, "", "GET", "a", "/", 80), "deny");
    f->jwt = NULL;
}

/* TCP connections: HTTP fields make an ALLOW rule fail and are left out
 * of a DENY rule (Istio's rule for TCP). */
static void test_tcp_connections(void **state)
{
    struct fx *f = *state;
    struct authz_request r;
    struct authz_decision d;

    build(f, AP("allow", "istio-system",
                "  rules:\n"
                "  - to: [{operation: {ports: [\"5432\"], methods: [GET]}}]\n"
                "  - to: [{operation: {ports: [\"6379\"]}}]\n")
                 AP("deny", "istio-system",
                    "  action: DENY\n"
                    "  rules:\n"
                    "  - to: [{operation: {ports: [\"6379\"], paths: [/x]}}]\n"
                    "    when: [{key: \"request.headers[x]\", values: [y]}]\n"
                    "    from: [{source: {ipBlocks: [10.9.0.0/16]}}]\n"));
    peer(f, "10.0.0.1");
    memset(&r, 0, sizeof(r));
    r.tcp = 1;
    r.peer = (const struct sockaddr *)&f->peer;
    r.port = 5432;
    authz_check(f->a, &r, &d);
    assert_false(d.allowed); /* the only rule for 5432 names a method */
    r.port = 6379;
    authz_check(f->a, &r, &d);
    assert_true(d.allowed);
    /* The DENY rule without its HTTP fields: ports and source decide. */
    peer(f, "10.9.1.1");
    authz_check(f->a, &r, &d);
    assert_false(d.allowed);
    assert_string_equal(d.policy, "istio-system/deny");

    /* JWT fields are HTTP fields too: they fail an ALLOW rule and are
     * left out of a DENY rule. */
    build(f, AP("allow", "istio-system",
                "  rules:\n"
                "  - from: [{source: {requestPrincipals: [\"*\"]}}]\n"
                "    to: [{operation: {ports: [\"5432\"]}}]\n"
                "  - to: [{operation: {ports: [\"6379\"]}}]\n"
                "    when: [{key: request.auth.principal, values: [\"*\"]}]\n"
                "  - to: [{operation: {ports: [\"7000\"]}}]\n")
                 AP("deny", "istio-system",
                    "  action: DENY\n"
                    "  rules:\n"
                    "  - from: [{source: {notRequestPrincipals: [\"*\"]}}]\n"
                    "    to: [{operation: {ports: [\"7000\"]}}]\n"
                    "    when: [{key: \"request.auth.claims[x]\", values: "
                    "[y]}]\n"));
    peer(f, "10.0.0.1");
    r.port = 5432;
    authz_check(f->a, &r, &d);
    assert_false(d.allowed);
    r.port = 6379;
    authz_check(f->a, &r, &d);
    assert_false(d.allowed);
    r.port = 7000;
    authz_check(f->a, &r, &d);
    assert_false(d.allowed);
    assert_string_equal(d.policy, "istio-system/deny");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_no_policy_allows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scope, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_and_allow_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_source_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_operation_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conditions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jwt_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tcp_connections, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
