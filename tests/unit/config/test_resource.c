/*
 * Unit tests for src/config/resource.c and the kind files res-*.c: loading
 * every kind with Istio's defaults, schema errors with their exact
 * file:line:col text, multi-document YAML and JSON, Istio's own samples,
 * and a corpus of bad files that must fail cleanly.
 */
#include "config.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/analyze.h"
#include "config/resource.h"
#include "core/buf.h"

#ifndef SRCDIR
#define SRCDIR "."
#endif
#define SAMPLES SRCDIR "/tests/data/istio-samples"
#define BAD SRCDIR "/tests/data/bad-resources"

/* A loaded set and its error text, freed by the teardown. */
struct fx {
    struct resource_set *set;
    struct buf errs;
    int nerr;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    buf_init(&f->errs, 4 * 1024 * 1024);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    resource_set_free(f->set);
    buf_dispose(&f->errs);
    free(f);
    return 0;
}

/* load() loads text as r.yaml; returns the error text. */
static const char *load(struct fx *f, const char *text)
{
    resource_set_free(f->set);
    buf_consume(&f->errs, buf_len(&f->errs));
    f->set =
        resource_load_mem(text, strlen(text), "r.yaml", &f->errs, &f->nerr);
    assert_non_null(f->set);
    return buf_cstr(&f->errs);
}

/* load_err() expects exactly the error lines want. */
static void load_err(struct fx *f, const char *text, const char *want)
{
    const char *got = load(f, text);

    if (strcmp(got, want) != 0)
        fail_msg("for:\n%s\ngot:  \"%s\"\nwant: \"%s\"", text, got, want);
}

static void load_ok(struct fx *f, const char *text)
{
    const char *got = load(f, text);

    if (f->nerr != 0)
        fail_msg("for:\n%s\nunexpected errors:\n%s", text, got);
}

static size_t count_level(const struct resource_set *set, const char *sub,
                          enum res_level level)
{
    size_t n = 0;

    for (size_t i = 0; i < set->msgs.n; i++)
        if (set->msgs.v[i].level == level &&
            strstr(set->msgs.v[i].message, sub) != NULL)
            n++;
    return n;
}

static size_t count_warnings(const struct resource_set *set, const char *sub)
{
    size_t n = 0;

    for (size_t i = 0; i < set->msgs.n; i++)
        if (set->msgs.v[i].level == RES_WARNING &&
            strstr(set->msgs.v[i].message, sub) != NULL)
            n++;
    return n;
}

#define HDR(kind, name)                                                        \
    "apiVersion: networking.istio.io/v1\nkind: " kind                          \
    "\nmetadata:\n  name: " name "\n"

/* ---- every kind, with defaults ------------------------------------------- */

static void test_gateway(void **state)
{
    struct fx *f = *state;
    const struct res_gateway *gw;
    const struct res_gw_server *s;

    load_ok(f,
            HDR("Gateway",
                "gw") "  namespace: edge\n"
                      "spec:\n"
                      "  selector: {istio: ingressgateway}\n"
                      "  servers:\n"
                      "  - port: {number: 443, name: https, protocol: https}\n"
                      "    hosts: [\"./a.example.com\", \"*/b.example.com\", "
                      "\"ns1/*.c.example.com\"]\n"
                      "    tls:\n"
                      "      mode: SIMPLE\n"
                      "      credentialName: a-cert\n"
                      "      minProtocolVersion: TLSV1_2\n"
                      "  - port: {number: 80, name: http, protocol: HTTP}\n"
                      "    hosts: [\"*\"]\n"
                      "    tls: {httpsRedirect: true}\n");
    assert_int_equal(f->set->n, 1);
    assert_int_equal(f->set->v[0]->kind, RES_GATEWAY);
    assert_string_equal(f->set->v[0]->meta.ns, "edge");
    gw = res_gateway(f->set->v[0]);
    assert_int_equal(gw->selector.n, 1);
    assert_int_equal(gw->servers.n, 2);
    s = (const struct res_gw_server *)gw->servers.v;
    assert_int_equal(s[0].port.number, 443);
    /* Protocols are read without regard to case, as Istio does. */
    assert_int_equal(s[0].port.protocol, RES_PROTO_HTTPS);
    assert_int_equal(s[0].tls.mode, RES_GW_TLS_SIMPLE);
    assert_int_equal(s[0].tls.min_protocol_version, RES_TLSV1_2);
    assert_int_equal(s[0].hosts.n, 3);
    assert_true(s[1].tls.https_redirect);
    /* The default TLS mode of an unset mode is Istio's PASSTHROUGH. */
    assert_int_equal(s[1].tls.mode, RES_GW_TLS_PASSTHROUGH);
}

static void test_virtual_service(void **state)
{
    struct fx *f = *state;
    const struct res_virtual_service *vs;
    const struct res_http_route *h;
    const struct res_http_match *m;
    const struct res_route_dest *rd;

    load_ok(
        f,
        HDR("VirtualService",
            "reviews") "spec:\n"
                       "  hosts: [reviews, \"*.example.com\"]\n"
                       "  gateways: [gw, edge/gw2, mesh]\n"
                       "  http:\n"
                       "  - name: jason\n"
                       "    match:\n"
                       "    - headers:\n"
                       "        end-user: {exact: jason}\n"
                       "        x-any: {}\n"
                       "        x-there: {present: true}\n"
                       "      queryParams:\n"
                       "        q: {regex: \"^a+$\"}\n"
                       "      uri: {prefix: /api}\n"
                       "      method: {exact: GET}\n"
                       "      ignoreUriCase: true\n"
                       "      port: 8080\n"
                       "    route:\n"
                       "    - destination: {host: reviews, subset: v2, port: "
                       "{number: 9080}}\n"
                       "      headers:\n"
                       "        request: {set: {x-a: b}, remove: [x-c]}\n"
                       "    timeout: 1.5s\n"
                       "    retries: {attempts: 3, perTryTimeout: 500ms, "
                       "retryOn: "
                       "\"5xx,reset,503\"}\n"
                       "    fault:\n"
                       "      delay: {fixedDelay: 7s, percentage: {value: "
                       "12.5}}\n"
                       "      abort: {httpStatus: 500, percentage: {value: "
                       "100}}\n"
                       "    mirror: {host: mirror.example.com}\n"
                       "    mirrorPercentage: {value: 0.5}\n"
                       "    corsPolicy:\n"
                       "      allowOrigins: [{exact: "
                       "\"https://a.example.com\"}, "
                       "{regex: \".*\\\\.example\\\\.com\"}]\n"
                       "      allowMethods: [GET, POST]\n"
                       "      maxAge: 24h\n"
                       "      allowCredentials: true\n"
                       "  - route:\n"
                       "    - destination: {host: reviews, subset: v1}\n"
                       "      weight: 90\n"
                       "    - destination: {host: reviews, subset: v3}\n"
                       "      weight: 10\n"
                       "    rewrite: {uriRegexRewrite: {match: "
                       "\"^/old/(.*)$\", "
                       "rewrite: \"/new/\\\\1\"}}\n"
                       "  - match: [{uri: {exact: /moved}}]\n"
                       "    redirect: {uri: /new, authority: b.example.com}\n"
                       "  - match: [{uri: {exact: /teapot}}]\n"
                       "    directResponse: {status: 418, body: {string: "
                       "short}}\n"
                       "  - match: [{uri: {prefix: /d}}]\n"
                       "    delegate: {name: other, namespace: team}\n"
                       "  tls:\n"
                       "  - match: [{sniHosts: [\"*.example.com\"], port: "
                       "443}]\n"
                       "    route: [{destination: {host: tls.example.com}}]\n"
                       "  tcp:\n"
                       "  - match: [{port: 5432}]\n"
                       "    route: [{destination: {host: db.example.com, port: "
                       "{number: 5432}}}]\n"
                       "  exportTo: [\".\"]\n");
    vs = res_virtual_service(f->set->v[0]);
    assert_int_equal(vs->http.n, 5);
    h = (const struct res_http_route *)vs->http.v;
    m = (const struct res_http_match *)h[0].match.v;
    assert_int_equal(m->headers.n, 3);
    assert_string_equal(m->headers.keys[0], "end-user");
    assert_int_equal(
        res_strmatch_kind((const struct res_strmatch *)m->headers.v),
        RES_MATCH_EXACT);
    /* {} asks only that the header be there. */
    assert_int_equal(
        res_strmatch_kind((const struct res_strmatch *)m->headers.v + 1),
        RES_MATCH_NONE);
    assert_int_equal(
        res_strmatch_kind((const struct res_strmatch *)m->headers.v + 2),
        RES_MATCH_PRESENT);
    assert_int_equal(res_strmatch_kind(&m->uri), RES_MATCH_PREFIX);
    assert_string_equal(m->uri.prefix, "/api");
    assert_true(m->ignore_uri_case);
    assert_int_equal(m->port, 8080);
    rd = (const struct res_route_dest *)h[0].route.v;
    /* A lone destination takes all traffic: weight 100. */
    assert_int_equal(rd->weight, 100);
    assert_int_equal(rd->destination.port.number, 9080);
    assert_int_equal(rd->headers.request.set.n, 1);
    assert_int_equal(h[0].timeout_ms, 1500);
    assert_int_equal(h[0].retries.attempts, 3);
    assert_int_equal(h[0].retries.per_try_timeout_ms, 500);
    assert_string_equal(h[0].retries.retry_on, "5xx,reset,503");
    assert_int_equal(h[0].fault.delay.fixed_delay_ms, 7000);
    assert_true(h[0].fault.delay.percentage.value == 12.5);
    assert_int_equal(h[0].fault.abort.http_status, 500);
    assert_true(h[0].mirror_percentage.value == 0.5);
    assert_int_equal(h[0].cors_policy.allow_origins.n, 2);
    assert_int_equal(h[0].cors_policy.max_age_ms, 24 * 3600 * 1000);
    /* Without a retries section Istio retries twice. */
    assert_int_equal(h[1].retries.mark.line, 0);
    assert_int_equal(h[1].retries.attempts, 2);
    assert_string_equal(h[1].retries.retry_on,
                        "connect-failure,refused-stream,unavailable,"
                        "cancelled,retriable-status-codes");
    rd = (const struct res_route_dest *)h[1].route.v;
    assert_int_equal(rd[0].weight, 90);
    assert_int_equal(rd[1].weight, 10);
    assert_string_equal(h[1].rewrite.uri_regex_rewrite.match, "^/old/(.*)$");
    assert_int_equal(h[2].redirect.redirect_code, 301);
    assert_string_equal(h[2].redirect.uri, "/new");
    assert_int_equal(h[3].direct_response.status, 418);
    assert_string_equal(h[3].direct_response.body.string, "short");
    assert_string_equal(h[4].delegate.ns, "team");
    assert_int_equal(vs->tls.n, 1);
    assert_int_equal(vs->tcp.n, 1);
    assert_int_equal(
        ((const struct res_route_dest *)((const struct res_l4_route *)vs->tls.v)
             ->route.v)
            ->weight,
        100);
}

static void test_destination_rule(void **state)
{
    struct fx *f = *state;
    const struct res_destination_rule *dr;
    const struct res_subset *s;
    const struct res_port_policy *pp;

    load_ok(
        f,
        HDR("DestinationRule",
            "reviews") "spec:\n"
                       "  host: reviews\n"
                       "  trafficPolicy:\n"
                       "    loadBalancer:\n"
                       "      consistentHash:\n"
                       "        httpCookie: {name: user, ttl: 0s}\n"
                       "        maglev: {tableSize: 1021}\n"
                       "    connectionPool:\n"
                       "      tcp: {maxConnections: 100, connectTimeout: 30ms, "
                       "tcpKeepalive: {time: 7200s, interval: 75s}}\n"
                       "      http: {http1MaxPendingRequests: 1, "
                       "maxRequestsPerConnection: 1, h2UpgradePolicy: "
                       "UPGRADE}\n"
                       "    outlierDetection: {consecutive5xxErrors: 7, "
                       "interval: "
                       "5m, baseEjectionTime: 15m}\n"
                       "    tls: {mode: ISTIO_MUTUAL}\n"
                       "    portLevelSettings:\n"
                       "    - port: {number: 80}\n"
                       "      loadBalancer: {simple: LEAST_REQUEST}\n"
                       "  subsets:\n"
                       "  - name: v1\n"
                       "    labels: {version: v1}\n"
                       "  - name: v2\n"
                       "    labels: {version: v2}\n"
                       "    trafficPolicy:\n"
                       "      loadBalancer: {simple: ROUND_ROBIN}\n");
    dr = res_destination_rule(f->set->v[0]);
    assert_string_equal(dr->host, "reviews");
    assert_string_equal(
        dr->traffic_policy.load_balancer.consistent_hash.http_cookie.name,
        "user");
    assert_int_equal(
        dr->traffic_policy.load_balancer.consistent_hash.maglev.table_size,
        1021);
    assert_int_equal(dr->traffic_policy.connection_pool.tcp.max_connections,
                     100);
    assert_int_equal(dr->traffic_policy.connection_pool.tcp.connect_timeout_ms,
                     30);
    assert_int_equal(dr->traffic_policy.connection_pool.http.h2_upgrade_policy,
                     2);
    /* Istio's defaults for what was not written. */
    assert_int_equal(dr->traffic_policy.connection_pool.http.http2_max_requests,
                     UINT32_MAX);
    assert_int_equal(dr->traffic_policy.connection_pool.http.idle_timeout_ms,
                     3600 * 1000);
    assert_int_equal(
        dr->traffic_policy.outlier_detection.consecutive_5xx_errors, 7);
    assert_int_equal(dr->traffic_policy.outlier_detection.max_ejection_percent,
                     10);
    assert_int_equal(dr->traffic_policy.outlier_detection.base_ejection_time_ms,
                     15 * 60 * 1000);
    assert_int_equal(dr->traffic_policy.tls.mode, RES_TLS_ISTIO_MUTUAL);
    pp = (const struct res_port_policy *)
             dr->traffic_policy.port_level_settings.v;
    assert_int_equal(pp->port.number, 80);
    assert_int_equal(pp->load_balancer.simple, RES_LB_LEAST_REQUEST);
    s = (const struct res_subset *)dr->subsets.v;
    assert_int_equal(dr->subsets.n, 2);
    assert_string_equal(s[1].name, "v2");
    assert_int_equal(s[1].traffic_policy.load_balancer.simple,
                     RES_LB_ROUND_ROBIN);
    /* A subset without its own policy has its defaults, mark unset. */
    assert_int_equal(s[0].traffic_policy.mark.line, 0);
}

static void test_service_and_workload_entry(void **state)
{
    struct fx *f = *state;
    const struct res_service_entry *se;
    const struct res_workload_entry *we;

    load_ok(f, HDR("ServiceEntry",
                   "db") "spec:\n"
                         "  hosts: [db.example.com]\n"
                         "  addresses: [10.0.0.0/24]\n"
                         "  ports:\n"
                         "  - {number: 5432, name: pg, protocol: TCP, "
                         "targetPort: 6432}\n"
                         "  location: MESH_INTERNAL\n"
                         "  resolution: STATIC\n"
                         "  endpoints:\n"
                         "  - address: 10.0.0.1\n"
                         "    ports: {pg: 6433}\n"
                         "    labels: {version: v1}\n"
                         "    weight: 3\n"
                         "---\n" HDR(
                             "WorkloadEntry",
                             "vm1") "spec:\n"
                                    "  address: vm1.example.com\n"
                                    "  ports: {http: 8080}\n"
                                    "  labels: {app: reviews, version: v1}\n"
                                    "  network: net-a\n"
                                    "  locality: eu/west/a\n"
                                    "  weight: 2\n"
                                    "  serviceAccount: reviews\n");
    assert_int_equal(f->set->n, 2);
    se = res_service_entry(f->set->v[0]);
    assert_int_equal(se->location, RES_MESH_INTERNAL);
    assert_int_equal(se->resolution, RES_RESOLVE_STATIC);
    assert_int_equal(((const struct res_se_port *)se->ports.v)->target_port,
                     6432);
    we = (const struct res_workload_entry *)se->endpoints.v;
    assert_string_equal(we->address, "10.0.0.1");
    assert_int_equal(we->ports.v[0].val, 6433);
    we = res_workload_entry(f->set->v[1]);
    assert_string_equal(we->locality, "eu/west/a");
    assert_int_equal(we->ports.v[0].val, 8080);

    /* Istio's defaults: MESH_EXTERNAL, NONE, port protocol TCP. */
    load_ok(f,
            HDR("ServiceEntry", "ext") "spec:\n"
                                       "  hosts: [api.example.com]\n"
                                       "  ports: [{number: 443, name: tls}]\n");
    se = res_service_entry(f->set->v[0]);
    assert_int_equal(se->location, RES_MESH_EXTERNAL);
    assert_int_equal(se->resolution, RES_RESOLVE_NONE);
    assert_int_equal(((const struct res_se_port *)se->ports.v)->protocol,
                     RES_PROTO_TCP);
}

static void test_metadata(void **state)
{
    struct fx *f = *state;
    const struct resource *r;

    /* What a dump of a live cluster carries is accepted and ignored. */
    load_ok(f, "apiVersion: networking.istio.io/v1beta1\n"
               "kind: WorkloadEntry\n"
               "metadata:\n"
               "  name: vm\n"
               "  labels: {a: b}\n"
               "  annotations: {note: x}\n"
               "  resourceVersion: \"123\"\n"
               "  uid: 0b0a\n"
               "  generation: 4\n"
               "  creationTimestamp: \"2024-01-01T00:00:00Z\"\n"
               "  managedFields: [{manager: kubectl}]\n"
               "spec: {address: 10.1.1.1}\n"
               "status: {}\n");
    r = f->set->v[0];
    assert_string_equal(r->meta.ns, "default");
    assert_string_equal(r->api_version, "networking.istio.io/v1beta1");
    assert_int_equal(r->meta.labels.n, 1);
    assert_int_equal(r->meta.annotations.n, 1);
    assert_int_equal(r->line, 1);
    assert_ptr_equal(resource_find(f->set, RES_WORKLOAD_ENTRY, "default", "vm"),
                     r);
    assert_null(resource_find(f->set, RES_WORKLOAD_ENTRY, "other", "vm"));
    load_ok(f, "apiVersion: networking.istio.io/v1alpha3\n"
               "kind: WorkloadEntry\nmetadata: {name: vm, namespace: ns1}\n"
               "spec: {address: 10.1.1.1}\n");
    assert_string_equal(f->set->v[0]->meta.ns, "ns1");
}

/* ---- several documents, JSON, other kinds -------------------------------- */

static void test_multi_document_and_json(void **state)
{
    struct fx *f = *state;

    load_ok(f, "---\n" HDR("WorkloadEntry",
                           "a") "spec: {address: 10.0.0.1}\n"
                                "---\n"
                                "---\n" HDR("WorkloadEntry",
                                            "b") "spec: {address: 10.0.0.2}\n"
                                                 "...\n");
    assert_int_equal(f->set->n, 2);
    assert_string_equal(f->set->v[1]->meta.name, "b");
    assert_int_equal(f->set->v[1]->line, 9);

    load_ok(f, "{\n"
               "  \"apiVersion\": \"networking.istio.io/v1\",\n"
               "  \"kind\": \"VirtualService\",\n"
               "  \"metadata\": {\"name\": \"j\", \"namespace\": \"n\"},\n"
               "  \"spec\": {\n"
               "    \"hosts\": [\"j.example.com\"],\n"
               "    \"http\": [{\"route\": [{\"destination\": {\"host\": "
               "\"j\", \"port\": {\"number\": 80}}, \"weight\": 100}],\n"
               "               \"fault\": {\"abort\": {\"httpStatus\": 503, "
               "\"percentage\": {\"value\": 0.1}}},\n"
               "               \"retries\": {\"attempts\": 0}}]\n"
               "  }\n"
               "}\n");
    {
        const struct res_http_route *h =
            (const struct res_http_route *)res_virtual_service(f->set->v[0])
                ->http.v;
        assert_true(h->fault.abort.percentage.value == 0.1);
        /* A retries section without attempts turns retries off. */
        assert_int_equal(h->retries.attempts, 0);
    }
    load_err(f,
             "{\"apiVersion\": \"networking.istio.io/v1\",\n"
             " \"kind\": \"Gateway\", \"metadata\": {\"name\": \"g\"},\n"
             " \"spec\": {\"servers\": [{\"port\": {\"number\": 0}, "
             "\"hosts\": [\"*\"]}]}}\n",
             "r.yaml:3:43: Gateway default/g: spec.servers[0].port.number: "
             "value '0' out of range 1-65535\n");
}

static void test_other_kinds_are_skipped(void **state)
{
    struct fx *f = *state;

    load_ok(f, "apiVersion: networking.istio.io/v1alpha3\n"
               "kind: EnvoyFilter\n"
               "metadata: {name: t}\n"
               "spec: {}\n"
               "---\n"
               "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\n"
               "---\n"
               "apiVersion: networking.istio.io/v1\nkind: Sidecar\n"
               "metadata: {name: s}\nspec: {}\n");
    assert_int_equal(f->set->n, 0);
    /* Ignored kinds are information (STR0001), not schema errors. */
    assert_int_equal(count_level(f->set, "not an Istio networking", RES_INFO),
                     1);
    assert_int_equal(count_level(f->set, "not used by strait", RES_INFO), 2);
    assert_int_equal(f->set->msgs.nerr, 0);
    assert_string_equal(f->set->msgs.v[0].code, "STR0001");
}

/* An unknown kind in an Istio group (a typo, or a kind newer than
 * strait) is no schema error: istioctl analyze skips a kind it has no
 * schema for without a word. strait skips it too, and says so as its own
 * Warning STR0008 so that a typo does not go unseen. */
static void test_unknown_istio_kind_is_a_warning(void **state)
{
    struct fx *f = *state;
    const struct res_msg *m;

    load_ok(f, "apiVersion: networking.istio.io/v1\nkind: VirtualSevice\n"
               "metadata: {name: v}\nspec: {hosts: [a.example.com]}\n"
               "---\n"
               "apiVersion: security.istio.io/v1\nkind: AuthorizationPolcy\n"
               "metadata: {name: p}\nspec: {}\n"
               "---\n"
               "apiVersion: networking.istio.io/v1\nkind: Gateway\n"
               "metadata: {name: g}\nspec: {servers: [{port: {number: 80, "
               "name: http, protocol: HTTP}, hosts: [\"*\"]}]}\n");
    /* Both documents are left out; the rest loads. */
    assert_int_equal(f->set->n, 1);
    assert_int_equal(f->set->msgs.nerr, 0);
    assert_int_equal(f->set->msgs.n, 2);
    m = &f->set->msgs.v[0];
    assert_string_equal(m->code, "STR0008");
    assert_int_equal(m->level, RES_WARNING);
    assert_int_equal(m->line, 2);
    assert_int_equal(m->col, 7);
    assert_string_equal(m->resource, "VirtualSevice default/v");
    assert_string_equal(m->path, "kind");
    assert_string_equal(m->message,
                        "unknown kind 'VirtualSevice' in networking.istio.io "
                        "(strait reads Gateway, VirtualService, "
                        "DestinationRule, ServiceEntry, WorkloadEntry); the "
                        "document is ignored, as istioctl analyze ignores a "
                        "kind it does not know");
    m = &f->set->msgs.v[1];
    assert_string_equal(m->code, "STR0008");
    assert_int_equal(m->level, RES_WARNING);
    assert_non_null(strstr(m->message, "'AuthorizationPolcy' in "
                                       "security.istio.io (strait reads "
                                       "AuthorizationPolicy, "));
}

/* A STATIC ServiceEntry without endpoints loads, as in Istio since 1.10:
 * the service exists and has none. A warning says what that means. */
static void test_static_without_endpoints_is_a_warning(void **state)
{
    struct fx *f = *state;

    load_ok(f, HDR("ServiceEntry", "s") "spec:\n"
                                        "  hosts: [a.example.com]\n"
                                        "  ports: [{number: 80, name: http, "
                                        "protocol: HTTP}]\n"
                                        "  resolution: STATIC\n");
    assert_int_equal(f->set->n, 1);
    assert_int_equal(f->set->msgs.nerr, 0);
    assert_int_equal(count_warnings(f->set, "resolution STATIC with no "
                                            "endpoints and no "
                                            "workloadSelector"),
                     1);
    /* With a workloadSelector it is no warning. */
    load_ok(f,
            HDR("ServiceEntry", "s") "spec:\n"
                                     "  hosts: [a.example.com]\n"
                                     "  ports: [{number: 80, name: http, "
                                     "protocol: HTTP}]\n"
                                     "  resolution: STATIC\n"
                                     "  workloadSelector: {labels: {a: b}}\n");
    assert_int_equal(count_warnings(f->set, "resolution STATIC"), 0);
}

/* security.istio.io: AuthorizationPolicy and PeerAuthentication load with
 * Istio's defaults; bad CIDRs, ports, path templates and condition keys
 * are errors at their line. */
static void test_security_kinds(void **state)
{
    struct fx *f = *state;
    const struct res_authorization_policy *ap;
    const struct res_peer_authentication *pa;
    const struct res_authz_rule *ru;

    load_ok(f, "apiVersion: security.istio.io/v1\n"
               "kind: AuthorizationPolicy\n"
               "metadata: {name: ap, namespace: istio-system}\n"
               "spec:\n"
               "  selector: {matchLabels: {istio: ingressgateway}}\n"
               "  rules:\n"
               "  - from: [{source: {principals: [cluster.local/ns/a/sa/b], "
               "ipBlocks: [10.0.0.0/8, \"::1\"]}}]\n"
               "    to: [{operation: {methods: [GET], paths: [\"/api/{*}/x\", "
               "\"/files/{**}\", \"/pre*\"], ports: [\"8080\"]}}]\n"
               "    when: [{key: \"request.headers[x-env]\", values: [prod]}]\n"
               "---\n"
               "apiVersion: security.istio.io/v1beta1\n"
               "kind: PeerAuthentication\n"
               "metadata: {name: pa, namespace: istio-system}\n"
               "spec:\n"
               "  selector: {matchLabels: {istio: ingressgateway}}\n"
               "  mtls: {mode: STRICT}\n"
               "  portLevelMtls: {\"8080\": {mode: PERMISSIVE}}\n");
    assert_int_equal(f->set->n, 2);
    ap = res_authorization_policy(f->set->v[0]);
    assert_int_equal(ap->action, RES_AUTHZ_ALLOW);
    assert_int_equal(ap->selector.match_labels.n, 1);
    ru = (const struct res_authz_rule *)ap->rules.v;
    assert_int_equal(ru->from.n, 1);
    assert_int_equal(((const struct res_authz_to *)ru->to.v)->operation.paths.n,
                     3);
    assert_string_equal(((const struct res_authz_condition *)ru->when.v)->key,
                        "request.headers[x-env]");
    pa = res_peer_authentication(f->set->v[1]);
    assert_int_equal(pa->mtls.mode, RES_MTLS_STRICT);
    assert_int_equal(pa->port_level_mtls.n, 1);
    assert_int_equal(((const struct res_mtls *)pa->port_level_mtls.v)->mode,
                     RES_MTLS_PERMISSIVE);

    load_err(f,
             "apiVersion: security.istio.io/v1\n"
             "kind: AuthorizationPolicy\n"
             "metadata: {name: ap}\n"
             "spec:\n"
             "  rules:\n"
             "  - from: [{source: {ipBlocks: [10.0.0.0/33]}}]\n",
             "r.yaml:6:21: AuthorizationPolicy default/ap: "
             "spec.rules[0].from[0].source.ipBlocks[0]: '10.0.0.0/33': not an "
             "IP address or CIDR\n");
    load_err(f,
             "apiVersion: security.istio.io/v1\n"
             "kind: AuthorizationPolicy\n"
             "metadata: {name: ap}\n"
             "spec:\n"
             "  rules:\n"
             "  - to: [{operation: {paths: [\"/a/{**}/b\"]}}]\n",
             "r.yaml:6:22: AuthorizationPolicy default/ap: "
             "spec.rules[0].to[0].operation.paths[0]: '/a/{**}/b': {**} must "
             "be the last segment\n");
    load_err(
        f,
        "apiVersion: security.istio.io/v1\n"
        "kind: AuthorizationPolicy\n"
        "metadata: {name: ap}\n"
        "spec:\n"
        "  rules:\n"
        "  - when: [{key: request.bogus, values: [x]}]\n",
        "r.yaml:6:12: AuthorizationPolicy default/ap: spec.rules[0].when[0]: "
        "unknown condition key 'request.bogus'\n");
    load_err(
        f,
        "apiVersion: security.istio.io/v1\n"
        "kind: AuthorizationPolicy\n"
        "metadata: {name: ap}\n"
        "spec: {action: CUSTOM}\n",
        "r.yaml:1:1: AuthorizationPolicy default/ap: spec.provider: action "
        "CUSTOM needs an extension provider\n");
    load_err(f,
             "apiVersion: security.istio.io/v1alpha3\n"
             "kind: PeerAuthentication\n"
             "metadata: {name: pa}\n"
             "spec: {mtls: {mode: STRICT}}\n",
             "r.yaml:1:13: PeerAuthentication default/pa: apiVersion: "
             "unsupported version 'v1alpha3' (v1 or v1beta1)\n");
    load_err(f,
             "apiVersion: security.istio.io/v1\n"
             "kind: PeerAuthentication\n"
             "metadata: {name: pa}\n"
             "spec: {mtls: {mode: STRICT}, portLevelMtls: {\"80\": {mode: "
             "DISABLE}}}\n",
             "r.yaml:1:1: PeerAuthentication default/pa: spec.portLevelMtls: "
             "portLevelMtls needs a selector (Istio's rule)\n");
}

/* A resource defined twice is an error at both places, never a choice
 * by position (it used to be: the later one replaced the first); the
 * first is kept so the rest can be analysed. */
static void test_duplicate_is_an_error_at_both_places(void **state)
{
    struct fx *f = *state;

    load_err(f,
             HDR("WorkloadEntry",
                 "a") "spec: {address: 10.0.0.1}\n"
                      "---\n" HDR("WorkloadEntry",
                                  "a") "spec: {address: 10.0.0.2}\n",
             "r.yaml:7:1: WorkloadEntry default/a: metadata: WorkloadEntry "
             "default/a is also defined at r.yaml:1:1: a resource is defined "
             "once (this definition is not used)\n"
             "r.yaml:1:1: WorkloadEntry default/a: metadata: WorkloadEntry "
             "default/a is also defined at r.yaml:7:1: a resource is defined "
             "once\n");
    assert_int_equal(f->nerr, 2);
    assert_int_equal(f->set->n, 1);
    assert_string_equal(res_workload_entry(f->set->v[0])->address, "10.0.0.1");
    assert_string_equal(f->set->msgs.v[0].code, "STR0004");
    /* Same name in another namespace or of another kind: no conflict. */
    load_ok(f, HDR("WorkloadEntry", "a") "spec: {address: 10.0.0.1}\n"
                                         "---\n" HDR("WorkloadEntry",
                                                     "a") "  namespace: b\n"
                                                          "spec: {address: "
                                                          "10.0.0.2}\n");
    assert_int_equal(f->set->n, 2);
}

/* write_file() writes text to dir/name. */
static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static const struct resource *find_we(const struct resource_set *set,
                                      const char *ns, const char *name)
{
    return resource_find(set, RES_WORKLOAD_ENTRY, ns, name);
}

/* kubectl apply -n: a subdirectory's name is the namespace of its files
 * that give none, config.defaultNamespace that of the top's; a namespace
 * written in the file wins; a subdirectory that cannot be a namespace is
 * not read (said as Info), nor are deeper ones. Two files defining one
 * resource are an error naming both. */
static void test_directory_namespaces(void **state)
{
    struct fx *f = *state;
    char dir[] = "/tmp/strait-ns.XXXXXX", cmd[600];
    const char *we = HDR("WorkloadEntry", "vm") "spec: {address: 10.0.0.1}\n";
    const char *we_ns =
        HDR("WorkloadEntry", "pinned") "  namespace: other\n"
                                       "spec: {address: 10.0.0.2}\n";

    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "mkdir %s/foo %s/Not_A_Namespace %s/foo/deeper %s/.hidden", dir,
             dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    write_file(dir, "top.yaml", we);
    write_file(dir, "foo/x.yaml", we);
    write_file(dir, "foo/y.yaml", we_ns);
    write_file(dir, "foo/deeper/z.yaml", "not: [read");
    write_file(dir, "Not_A_Namespace/z.yaml", "not: [read");
    write_file(dir, ".hidden/z.yaml", "not: [read");

    resource_set_free(f->set);
    f->set = resource_load(dir, NULL, &f->nerr);
    assert_int_equal(f->nerr, 0);
    assert_int_equal(f->set->n, 3);
    assert_non_null(find_we(f->set, "default", "vm"));
    assert_non_null(find_we(f->set, "foo", "vm"));
    assert_non_null(find_we(f->set, "other", "pinned"));
    assert_int_equal(count_level(f->set,
                                 "'Not_A_Namespace' is not a "
                                 "namespace name",
                                 RES_INFO),
                     1);

    resource_set_free(f->set);
    f->set = resource_load_ns(dir, "edge", NULL, &f->nerr);
    assert_int_equal(f->nerr, 0);
    assert_non_null(find_we(f->set, "edge", "vm"));
    assert_non_null(find_we(f->set, "foo", "vm"));

    /* foo/x.yaml and top.yaml now both define foo/vm. */
    resource_set_free(f->set);
    f->set = resource_load_ns(dir, "foo", NULL, &f->nerr);
    assert_int_equal(f->nerr, 2);
    assert_int_equal(count_level(f->set, "/foo/x.yaml:1:1", RES_ERROR), 1);
    assert_int_equal(count_level(f->set, "/top.yaml:1:1", RES_ERROR), 1);

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- schema errors, exact text ---------------------------------------------
 */

static void test_err_yaml(void **state)
{
    struct fx *f = *state;

    load_err(f, "a: [1, 2\n",
             "r.yaml:2:1: YAML syntax error: did not find expected ',' or "
             "']' while parsing a flow sequence\n");
    load_err(f, "- a\n- b\n",
             "r.yaml:1:1: a resource is a mapping (apiVersion, kind, "
             "metadata, spec), got a list\n");
}

static void test_err_identity(void **state)
{
    struct fx *f = *state;

    load_err(f, "kind: Gateway\nmetadata: {name: g}\nspec: {}\n",
             "r.yaml:1:1: Gateway default/g: missing key 'apiVersion'\n");
    load_err(f,
             "apiVersion: networking.istio.io/v2\nkind: Gateway\n"
             "metadata: {name: g}\nspec: {servers: []}\n",
             "r.yaml:1:13: Gateway default/g: apiVersion: unsupported "
             "version 'v2' (v1, v1beta1 or v1alpha3)\n");
    load_err(f,
             "apiVersion: strait.io/v1alpha1\nkind: LuaPolcy\n"
             "metadata: {name: g}\nspec: {}\n",
             "r.yaml:2:7: LuaPolcy default/g: kind: unknown kind 'LuaPolcy' "
             "in strait.io (LuaPolicy, MeshLink)\n");
    load_err(f,
             "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\n"
             "metadata: {namespace: x}\nspec: {address: 1.2.3.4}\n",
             "r.yaml:3:11: WorkloadEntry x/(no name): metadata: missing key "
             "'name'\n");
    load_err(f,
             "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\n"
             "metadata: {name: Bad_Name, namespace: \"A b\"}\n"
             "spec: {address: 1.2.3.4}\n",
             "r.yaml:3:39: WorkloadEntry A b/Bad_Name: metadata.namespace: "
             "bad value 'A b': must be lower-case letters, digits and '-' "
             "(a DNS label)\n");
    load_err(f,
             "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\n"
             "metadata: {name: vm}\n",
             "r.yaml:1:1: WorkloadEntry default/vm: missing key 'spec'\n");
    load_err(f,
             "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\n"
             "metadata: {name: vm}\nspec: {address: 1.2.3.4}\nextra: 1\n",
             "r.yaml:5:1: WorkloadEntry default/vm: extra: unknown key\n");
}

static void test_err_types_and_unknown_keys(void **state)
{
    struct fx *f = *state;

    load_err(f,
             HDR("VirtualService", "v") "spec:\n"
                                        "  hosts: [a]\n"
                                        "  http:\n"
                                        "  - route:\n"
                                        "    - destination: {host: a}\n"
                                        "      wieght: 5\n",
             "r.yaml:10:7: VirtualService default/v: "
             "spec.http[0].route[0].wieght: unknown key\n");
    load_err(
        f,
        HDR("VirtualService", "v") "spec:\n"
                                   "  hosts: [a]\n"
                                   "  http:\n"
                                   "  - route: [{destination: {host: a}}]\n"
                                   "    timeout: 30\n",
        "r.yaml:9:14: VirtualService default/v: spec.http[0].timeout: "
        "bad duration '30': duration needs a unit (ms, s, m or h)\n");
    load_err(
        f,
        HDR("VirtualService",
            "v") "spec:\n"
                 "  hosts: [a]\n"
                 "  http:\n"
                 "  - route: [{destination: {host: a}}]\n"
                 "    fault: {abort: {httpStatus: 500, percentage: {value: "
                 "101}}}\n",
        "r.yaml:9:58: VirtualService default/v: "
        "spec.http[0].fault.abort.percentage.value: value '101' out of "
        "range 0-100\n");
    load_err(
        f,
        HDR("DestinationRule", "d") "spec:\n"
                                    "  host: a\n"
                                    "  trafficPolicy: {tls: {mode: STRICT}}\n",
        "r.yaml:7:31: DestinationRule default/d: "
        "spec.trafficPolicy.tls.mode: unknown value 'STRICT' (one of: "
        "DISABLE, SIMPLE, MUTUAL, ISTIO_MUTUAL)\n");
    load_err(f,
             HDR("Gateway", "g") "spec:\n"
                                 "  servers:\n"
                                 "  - port: {number: 80, protocol: HTTP3}\n"
                                 "    hosts: [\"*\"]\n",
             "r.yaml:7:34: Gateway default/g: spec.servers[0].port.protocol: "
             "bad value 'HTTP3': unknown protocol (HTTP, HTTPS, HTTP2, GRPC, "
             "GRPC-WEB, TCP, TLS, MONGO, MYSQL, REDIS, UDP)\n");
}

static void test_err_oneof(void **state)
{
    struct fx *f = *state;

    load_err(
        f,
        HDR("VirtualService",
            "v") "spec:\n"
                 "  hosts: [a]\n"
                 "  http:\n"
                 "  - match: [{uri: {exact: /a, prefix: /b}}]\n"
                 "    route: [{destination: {host: a}}]\n",
        "r.yaml:8:19: VirtualService default/v: spec.http[0].match[0].uri: "
        "StringMatch takes only one of exact, prefix, regex; both "
        "'exact' and 'prefix' are set\n");
    load_err(
        f,
        HDR("VirtualService", "v") "spec:\n"
                                   "  hosts: [a]\n"
                                   "  http:\n"
                                   "  - match: [{uri: {}}]\n"
                                   "    route: [{destination: {host: a}}]\n",
        "r.yaml:8:19: VirtualService default/v: spec.http[0].match[0].uri: "
        "StringMatch needs one of: exact, prefix, regex\n");
    load_err(f,
             HDR("DestinationRule",
                 "d") "spec:\n"
                      "  host: a\n"
                      "  trafficPolicy:\n"
                      "    loadBalancer: {simple: RANDOM, consistentHash: "
                      "{useSourceIp: true}}\n",
             "r.yaml:8:19: DestinationRule default/d: "
             "spec.trafficPolicy.loadBalancer: lbPolicy takes only one of "
             "simple, consistentHash; both 'simple' and 'consistentHash' are "
             "set\n");
}

static void test_err_semantics(void **state)
{
    struct fx *f = *state;

    /* Istio's validation: a tls rule's sniHosts lie within the hosts. */
    load_err(f,
             HDR("VirtualService", "t") "spec:\n  hosts: [a.example.com]\n"
                                        "  gateways: [gw]\n  tls:\n"
                                        "  - match: [{sniHosts: "
                                        "[b.example.com]}]\n"
                                        "    route: [{destination: {host: "
                                        "x}}]\n",
             "r.yaml:9:13: VirtualService default/t: "
             "spec.tls[0].match[0].sniHosts[0]: the SNI host b.example.com is "
             "not a subset of any of the virtual service hosts\n");
    load_ok(
        f, HDR("VirtualService", "t") "spec:\n  hosts: [\"*.example.com\"]\n"
                                      "  gateways: [gw]\n  tls:\n"
                                      "  - match: [{sniHosts: "
                                      "[b.example.com, \"*.x.example.com\"]}]\n"
                                      "    route: [{destination: {host: "
                                      "x}}]\n");
    /* Subnets are addresses. */
    load_err(f,
             HDR("VirtualService", "t") "spec:\n  hosts: [a.example.com]\n"
                                        "  gateways: [gw]\n  tcp:\n"
                                        "  - match: [{destinationSubnets: "
                                        "[10.0.0.0/40]}]\n"
                                        "    route: [{destination: {host: "
                                        "x}}]\n",
             "r.yaml:9:13: VirtualService default/t: "
             "spec.tcp[0].match[0].destinationSubnets[0]: '10.0.0.0/40': "
             "prefix length too long\n");

    load_err(
        f,
        HDR("VirtualService", "v") "spec:\n"
                                   "  hosts: [a]\n"
                                   "  http:\n"
                                   "  - match: [{uri: {regex: \"a(b\"}}]\n"
                                   "    route: [{destination: {host: a}}]\n",
        "r.yaml:8:19: VirtualService default/v: spec.http[0].match[0].uri: "
        "regex 'a(b': missing closing parenthesis at offset 3\n");
    load_err(f,
             HDR("VirtualService",
                 "v") "spec:\n"
                      "  hosts: [a]\n"
                      "  http:\n"
                      "  - match: [{headers: {x: {regex: \"(a)\\\\1\"}}}]\n"
                      "    route: [{destination: {host: a}}]\n",
             "r.yaml:8:27: VirtualService default/v: "
             "spec.http[0].match[0].headers.x: regex '(a)\\1': "
             "backreferences are not supported (Istio's regular expressions "
             "are RE2)\n");
    load_err(f,
             HDR("VirtualService", "v") "spec:\n"
                                        "  hosts: [a]\n"
                                        "  http:\n"
                                        "  - match: [{uri: {exact: /a}}]\n",
             "r.yaml:8:5: VirtualService default/v: spec.http[0]: a rule "
             "needs one of route, redirect, directResponse or delegate\n");
    load_err(
        f,
        HDR("VirtualService",
            "v") "spec:\n"
                 "  hosts: [a]\n"
                 "  http:\n"
                 "  - route: [{destination: {host: a}}]\n"
                 "    retries: {attempts: 2, retryOn: \"5xx,sometimes\"}\n",
        "r.yaml:9:14: VirtualService default/v: spec.http[0].retries: "
        "retryOn: 'sometimes' is not a retry policy or an HTTP status\n");
    load_err(f,
             HDR("VirtualService",
                 "v") "spec:\n"
                      "  hosts: [\"a/b\"]\n"
                      "  tcp: [{route: [{destination: {host: a}}]}]\n",
             "r.yaml:1:1: VirtualService default/v: spec.hosts[0]: host "
             "'a/b': a VirtualService host has no namespace/ prefix (that is "
             "for Gateway hosts)\n");
    load_err(f,
             HDR("Gateway",
                 "g") "spec:\n"
                      "  servers:\n"
                      "  - port: {number: 443, name: https, protocol: HTTPS}\n"
                      "    hosts: [\"Bad_NS/a.example.com\"]\n",
             "r.yaml:7:5: Gateway default/g: spec.servers[0].hosts[0]: "
             "namespace 'Bad_NS' of host 'Bad_NS/a.example.com' must be "
             "lower-case letters, digits and '-' (a DNS label) (or use '*' "
             "or '.')\n"
             "r.yaml:7:5: Gateway default/g: spec.servers[0]: a HTTPS "
             "server needs tls settings\n");
    load_err(f,
             HDR("Gateway",
                 "g") "spec:\n"
                      "  servers:\n"
                      "  - port: {number: 443, name: https, protocol: HTTPS}\n"
                      "    hosts: [\"a.*.com\"]\n"
                      "    tls: {mode: MUTUAL, credentialName: c}\n"
                      "    \n",
             "r.yaml:7:5: Gateway default/g: spec.servers[0].hosts[0]: host "
             "'a.*.com': character '*' is not allowed (a wildcard must be the "
             "first label)\n");
    load_err(
        f,
        HDR("DestinationRule", "d") "spec:\n"
                                    "  host: a\n"
                                    "  subsets: [{name: v1}, {name: v1}]\n",
        "r.yaml:7:25: DestinationRule default/d: spec.subsets[1]: subset "
        "name 'v1' is already used by subsets[0]\n");
}

/* consistentHash and outlierDetection: what Istio's validation refuses or
 * warns about, with strait's hints. */
/* rewrite.uri takes only what may go on a request line: the checks of
 * Lua's h:set_path() (http_query_check), so no CR/LF, space or '#'. */
static void test_err_rewrite_uri_bytes(void **state)
{
    struct fx *f = *state;
    static const char *const bad[][2] = {
        {"/a b", "a space, control character"},
        {"/a\\r\\nx-evil: 1", "a space, control character"},
        {"/a#frag", "fragment"},
        {"/a%zz", "two hex digits"},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[512];
        const char *e;
        snprintf(text, sizeof(text),
                 HDR("VirtualService", "t") "spec:\n  hosts: [a.example.com]\n"
                                            "  http:\n"
                                            "  - rewrite: {uri: \"%s\"}\n"
                                            "    route: [{destination: "
                                            "{host: x}}]\n",
                 bad[i][0]);
        e = load(f, text);
        assert_int_equal(f->nerr, 1);
        if (strstr(e, "spec.http[0].rewrite.uri: bad uri: ") == NULL ||
            strstr(e, bad[i][1]) == NULL)
            fail_msg("for %s: %s", bad[i][0], e);
    }
    load_ok(f,
            HDR("VirtualService", "t") "spec:\n  hosts: [a.example.com]\n"
                                       "  http:\n"
                                       "  - rewrite: {uri: \"/v2/%7E?x=1\"}\n"
                                       "    route: [{destination: "
                                       "{host: x}}]\n");
}

static void test_err_load_balancer(void **state)
{
    struct fx *f = *state;
    const struct res_destination_rule *dr;

    load_err(f,
             HDR("DestinationRule", "d") "spec:\n"
                                         "  host: a\n"
                                         "  trafficPolicy:\n"
                                         "    loadBalancer:\n"
                                         "      consistentHash:\n"
                                         "        useSourceIp: true\n"
                                         "        maglev: {tableSize: 65536}\n",
             "r.yaml:11:17: DestinationRule default/d: "
             "spec.trafficPolicy.loadBalancer.consistentHash: maglev "
             "tableSize 65536 is not a prime number; Envoy needs a prime (the "
             "next one is 65537; the default is 65537)\n");
    load_err(f,
             HDR("DestinationRule",
                 "d") "spec:\n"
                      "  host: a\n"
                      "  trafficPolicy:\n"
                      "    portLevelSettings:\n"
                      "    - port: {number: 80}\n"
                      "      loadBalancer:\n"
                      "        consistentHash: {httpCookie: {ttl: 10s}}\n",
             "r.yaml:11:38: DestinationRule default/d: "
             "spec.trafficPolicy.portLevelSettings[0].loadBalancer."
             "consistentHash: httpCookie needs a name (Istio: name required "
             "for HttpCookie)\n");
    load_err(f,
             HDR("DestinationRule",
                 "d") "spec:\n"
                      "  host: a\n"
                      "  trafficPolicy:\n"
                      "    loadBalancer:\n"
                      "      consistentHash:\n"
                      "        httpCookie: {name: c, ttl: 9000h}\n",
             "r.yaml:10:36: DestinationRule default/d: "
             "spec.trafficPolicy.loadBalancer.consistentHash.httpCookie.ttl: "
             "bad value '9000h': must be between 0s and 365 days\n");
    /* An absent ttl and 0s differ: no cookie made, or a session one. */
    load_ok(f, HDR("DestinationRule",
                   "d") "spec:\n"
                        "  host: a\n"
                        "  trafficPolicy:\n"
                        "    loadBalancer:\n"
                        "      consistentHash: {httpCookie: {name: c}}\n"
                        "  subsets:\n"
                        "  - name: v1\n"
                        "    trafficPolicy:\n"
                        "      loadBalancer:\n"
                        "        consistentHash: {httpCookie: {name: c, ttl: "
                        "0s}}\n"
                        "      outlierDetection: {consecutiveErrors: 3}\n");
    dr = res_destination_rule(f->set->v[0]);
    assert_int_equal(
        dr->traffic_policy.load_balancer.consistent_hash.http_cookie.ttl, 0);
    assert_int_equal(
        ((const struct res_subset *)dr->subsets.v)
            ->traffic_policy.load_balancer.consistent_hash.http_cookie.ttl,
        1);
    assert_int_equal(count_warnings(f->set, "consecutiveErrors is deprecated"),
                     1);
    load_ok(f, HDR("DestinationRule",
                   "d") "spec:\n"
                        "  host: a\n"
                        "  trafficPolicy:\n"
                        "    loadBalancer:\n"
                        "      consistentHash: {httpHeaderName: x, "
                        "minimumRingSize: 64}\n");
    assert_int_equal(count_warnings(f->set, "minimumRingSize is deprecated"),
                     1);
}

static void test_err_keeps_good_resources(void **state)
{
    struct fx *f = *state;

    load(f, HDR("WorkloadEntry",
                "good") "spec: {address: 10.0.0.1}\n"
                        "---\n" HDR("WorkloadEntry",
                                    "bad") "spec: {adress: 10.0.0.2}\n");
    assert_int_equal(f->nerr, 1);
    assert_int_equal(f->set->n, 1);
    assert_string_equal(f->set->v[0]->meta.name, "good");
}

/* localityLbSetting is read whole: Istio's documentation example of
 * distribute, one of failover, and failoverPriority. */
static void test_locality_lb_setting_parsed(void **state)
{
    struct fx *f = *state;
    const struct res_destination_rule *dr;
    const struct res_locality_lb *l;
    const struct res_locality_distribute *d;
    const struct res_locality_failover *fo;

    load_ok(f,
            HDR("DestinationRule", "d") "spec:\n"
                                        "  host: a\n"
                                        "  trafficPolicy:\n"
                                        "    outlierDetection: {}\n"
                                        "    loadBalancer:\n"
                                        "      localityLbSetting:\n"
                                        "        distribute:\n"
                                        "        - from: us-west/zone1/*\n"
                                        "          to:\n"
                                        "            \"us-west/zone1/*\": 80\n"
                                        "            \"us-west/zone2/*\": 20\n"
                                        "  subsets:\n"
                                        "  - name: v1\n"
                                        "    trafficPolicy:\n"
                                        "      outlierDetection: {}\n"
                                        "      loadBalancer:\n"
                                        "        localityLbSetting:\n"
                                        "          enabled: false\n"
                                        "          failover:\n"
                                        "          - {from: us-east, to: "
                                        "eu-west}\n"
                                        "          failoverPriority:\n"
                                        "          - topology.istio.io/"
                                        "network\n"
                                        "          - version=v1\n");
    assert_int_equal(count_warnings(f->set, "localityLbSetting"), 0);
    dr = res_destination_rule(f->set->v[0]);
    l = &dr->traffic_policy.load_balancer.locality_lb_setting;
    assert_true(l->enabled);
    assert_int_equal(l->distribute.n, 1);
    d = l->distribute.v;
    assert_string_equal(d->from, "us-west/zone1/*");
    assert_int_equal(d->to.n, 2);
    assert_string_equal(d->to.v[0].key, "us-west/zone1/*");
    assert_int_equal(d->to.v[0].val, 80);
    assert_int_equal(d->to.v[1].val, 20);
    l = &((const struct res_subset *)dr->subsets.v)[0]
             .traffic_policy.load_balancer.locality_lb_setting;
    assert_false(l->enabled);
    fo = l->failover.v;
    assert_int_equal(l->failover.n, 1);
    assert_string_equal(fo->from, "us-east");
    assert_string_equal(fo->to, "eu-west");
    assert_int_equal(l->failover_priority.n, 2);
    assert_string_equal(l->failover_priority.v[1], "version=v1");
}

/* A DestinationRule with localityLbSetting body lb (indented under
 * loadBalancer) and an outlierDetection when od. */
static const char *locality_dr(char *buf, size_t n, const char *lb, int od)
{
    snprintf(buf, n,
             HDR("DestinationRule", "d") "spec:\n"
                                         "  host: a\n"
                                         "  trafficPolicy:\n"
                                         "%s"
                                         "    loadBalancer:\n"
                                         "      localityLbSetting:\n%s",
             od ? "    outlierDetection: {consecutive5xxErrors: 1}\n" : "", lb);
    return buf;
}

/* Istio's ValidateLocalityLbSetting(): its messages, at its levels. */
static void test_locality_validation_messages(void **state)
{
    static const struct {
        const char *lb;
        int od;
        const char *msg;
        int errors, warnings;
    } cases[] = {
        {"        distribute: [{from: a, to: {b: 100}}]\n"
         "        failover: [{from: a, to: b}]\n",
         1, "can not simultaneously specify 'distribute' and 'failover'", 1, 0},
        {"        failover: [{from: a, to: b}]\n"
         "        failoverPriority: [topology.kubernetes.io/zone]\n",
         1,
         "can not simultaneously set 'failover' and topology label "
         "'topology.kubernetes.io/zone' in 'failover_priority'",
         1, 0},
        {"        distribute: [{from: a, to: {b: 0, c: 100}}]\n", 1,
         "locality weight must be in range [1, 100]", 1, 0},
        {"        distribute: [{from: a, to: {b: 101}}]\n", 1,
         "locality weight must be in range [1, 100]", 1, 0},
        {"        distribute: [{from: a, to: {b: 60, c: 30}}]\n", 1,
         "total locality weight 90 != 100", 1, 0},
        {"        distribute: [{from: a, to: {\"b/*/c\": 100}}]\n", 1,
         "locality b/*/c wildcard '*' number can not exceed 1 and must be in "
         "the end",
         1, 0},
        {"        distribute: [{from: a, to: {\"b//c\": 100}}]\n", 1,
         "locality b//c must not contain empty region/zone/subzone info", 1, 0},
        {"        distribute: [{from: a, to: {\"b/*\": 50, \"b/z\": 50}}]\n", 1,
         "overlap with previous specified ones", 1, 0},
        {"        distribute:\n"
         "        - {from: \"us/*\", to: {b: 100}}\n"
         "        - {from: us/z1, to: {b: 100}}\n",
         1, "locality us/z1 overlap with previous specified ones", 1, 0},
        {"        failover: [{from: a, to: b}]\n", 0,
         "outlier detection policy must be provided for failover", 0, 1},
        {"        failoverPriority: [version]\n", 0,
         "outlier detection policy must be provided for failover", 0, 1},
        {"        failover: [{from: a, to: a}]\n", 1,
         "locality lb failover settings must specify different regions", 1, 0},
        {"        failover: [{from: a/z, to: b}]\n", 1,
         "locality lb failover only specify region", 1, 0},
        {"        failover: [{from: a, to: \"b*\"}]\n", 1,
         "locality lb failover region should not contain '*' wildcard", 1, 0},
        /* What is right passes without a word. */
        {"        distribute:\n"
         "        - from: us-west/zone1/*\n"
         "          to: {\"us-west/zone1/*\": 80, \"us-west/zone2/*\": 20}\n"
         "        - from: us-west/zone2/*\n"
         "          to: {\"us-west/zone1/*\": 20, \"us-west/zone2/*\": 80}\n",
         1, NULL, 0, 0},
        {"        failover: [{from: us-east, to: eu-west}, {from: us-west, "
         "to: us-east}]\n",
         1, NULL, 0, 0},
        {"        enabled: true\n", 0, NULL, 0, 0},
    };
    struct fx *f = *state;
    char text[2048];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *got =
            load(f, locality_dr(text, sizeof(text), cases[i].lb, cases[i].od));
        size_t nwarn = cases[i].msg ? count_warnings(f->set, cases[i].msg) : 0;

        if (f->nerr != cases[i].errors ||
            (cases[i].errors > 0 && strstr(got, cases[i].msg) == NULL) ||
            (cases[i].errors > 0 &&
             strstr(got, "spec.trafficPolicy.loadBalancer."
                         "localityLbSetting") == NULL) ||
            nwarn != (size_t)cases[i].warnings)
            fail_msg("case %zu:\n%s\ngot %d errors (want %d), %zu warnings "
                     "(want %d):\n%s",
                     i, text, f->nerr, cases[i].errors, nwarn,
                     cases[i].warnings, got);
    }
    /* The warning is Istio's SchemaWarning, under its code. */
    load(f, locality_dr(text, sizeof(text),
                        "        failover: [{from: a, to: b}]\n", 0));
    assert_int_equal(f->set->msgs.n, 1);
    assert_string_equal(f->set->msgs.v[0].code, "IST0133");
    assert_string_equal(f->set->msgs.v[0].path,
                        "spec.trafficPolicy.loadBalancer.localityLbSetting");
}

/* The list limits (strait's: 1000 distribute and failover rules, 100
 * failoverPriority labels), one past each refused. */
static void test_locality_list_limits(void **state)
{
    struct fx *f = *state;
    struct buf b;
    const char *got;

    buf_init(&b, 1 << 20);
    for (int which = 0; which < 3; which++) {
        int max = which == 2 ? 100 : 1000;
        for (int n = max; n <= max + 1; n++) {
            buf_consume(&b, buf_len(&b));
            buf_puts(&b,
                     HDR("DestinationRule", "d") "spec:\n"
                                                 "  host: a\n"
                                                 "  trafficPolicy:\n"
                                                 "    outlierDetection: {}\n"
                                                 "    loadBalancer:\n"
                                                 "      localityLbSetting:\n");
            buf_puts(&b, which == 0   ? "        distribute:\n"
                         : which == 1 ? "        failover:\n"
                                      : "        failoverPriority:\n");
            for (int i = 0; i < n; i++) {
                if (which == 0)
                    buf_printf(&b, "        - {from: r%d, to: {r%d: 100}}\n", i,
                               i);
                else if (which == 1)
                    buf_printf(&b, "        - {from: r%d, to: s%d}\n", i, i);
                else
                    buf_printf(&b, "        - label%d\n", i);
            }
            got = load(f, buf_cstr(&b));
            if (n == max && f->nerr != 0)
                fail_msg("%d entries refused: %s", n, got);
            if (n > max &&
                (f->nerr != 1 || strstr(got, "entries, has") == NULL))
                fail_msg("%d entries: %s", n, got);
        }
    }
    buf_dispose(&b);
}

/* caCrl where nothing verifies against it is said to be ignored. */
static void test_warning_ca_crl_ignored(void **state)
{
    struct fx *f = *state;

    load_ok(f, HDR("Gateway", "g") "spec:\n"
                                   "  servers:\n"
                                   "  - port: {number: 443, name: https, "
                                   "protocol: HTTPS}\n"
                                   "    hosts: [\"*\"]\n"
                                   "    tls: {mode: SIMPLE, credentialName: c, "
                                   "caCrl: /x.crl}\n");
    assert_int_equal(count_warnings(f->set, "caCrl is ignored in tls mode "
                                            "SIMPLE"),
                     1);
    load_ok(f, HDR("Gateway", "g") "spec:\n"
                                   "  servers:\n"
                                   "  - port: {number: 443, name: https, "
                                   "protocol: HTTPS}\n"
                                   "    hosts: [\"*\"]\n"
                                   "    tls: {mode: MUTUAL, credentialName: c, "
                                   "caCrl: /x.crl}\n");
    assert_int_equal(count_warnings(f->set, "caCrl"), 0);
    load_ok(f, HDR("DestinationRule", "d") "spec:\n"
                                           "  host: a\n"
                                           "  trafficPolicy:\n"
                                           "    tls: {mode: ISTIO_MUTUAL, "
                                           "caCrl: /x.crl}\n");
    assert_int_equal(count_warnings(f->set, "caCrl is ignored in tls mode "
                                            "ISTIO_MUTUAL"),
                     1);
    load_ok(f, HDR("DestinationRule", "d") "spec:\n"
                                           "  host: a\n"
                                           "  trafficPolicy:\n"
                                           "    tls: {mode: SIMPLE, "
                                           "insecureSkipVerify: true, "
                                           "caCrl: /x.crl}\n");
    assert_int_equal(count_warnings(f->set, "insecureSkipVerify turns"), 1);
    load_ok(f, HDR("DestinationRule", "d") "spec:\n"
                                           "  host: a\n"
                                           "  trafficPolicy:\n"
                                           "    tls: {mode: SIMPLE, "
                                           "caCrl: /x.crl}\n");
    assert_int_equal(count_warnings(f->set, "caCrl"), 0);
}

/* ---- hosts
 * ------------------------------------------------------------------- */

/* The one table of retryOn names: every Envoy name, exactly spelled. */
static void test_retry_on_names(void **state)
{
    static const char *const names[] = {
        "5xx",
        "gateway-error",
        "reset",
        "reset-before-request",
        "connect-failure",
        "envoy-ratelimited",
        "retriable-4xx",
        "refused-stream",
        "retriable-status-codes",
        "retriable-headers",
        "http3-post-connect-failure",
        "cancelled",
        "deadline-exceeded",
        "internal",
        "resource-exhausted",
        "unavailable",
    };

    (void)state;
    assert_int_equal(sizeof(names) / sizeof(*names), RES_RETRY_NCONDS);
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
        assert_int_equal(res_retry_on_lookup(names[i], strlen(names[i])),
                         (int)i);
    assert_int_equal(res_retry_on_lookup("gateway-error", 13),
                     RES_RETRY_GATEWAY_ERROR);
    assert_int_equal(res_retry_on_lookup("connect-failure", 15),
                     RES_RETRY_CONNECT_FAILURE);
    assert_int_equal(res_retry_on_lookup("5XX", 3), -1);
    assert_int_equal(res_retry_on_lookup("503", 3), -1);
    assert_int_equal(res_retry_on_lookup("5xx", 2), -1);
    assert_int_equal(res_retry_on_lookup("", 0), -1);
}

static void test_retry_on_next(void **state)
{
    const char *p = " 5xx ,\treset,,503,";
    const char *tok;
    size_t n;

    (void)state;
    assert_int_equal(res_retry_on_next(&p, &tok, &n), 1);
    assert_int_equal(n, 3);
    assert_memory_equal(tok, "5xx", 3);
    assert_int_equal(res_retry_on_next(&p, &tok, &n), 1);
    assert_int_equal(n, 5);
    assert_memory_equal(tok, "reset", 5);
    assert_int_equal(res_retry_on_next(&p, &tok, &n), 1);
    assert_int_equal(n, 0);
    assert_int_equal(res_retry_on_next(&p, &tok, &n), 1);
    assert_int_equal(n, 3);
    assert_memory_equal(tok, "503", 3);
    assert_int_equal(res_retry_on_next(&p, &tok, &n), 0);
}

/* Istio's Gateway.servers.hosts namespace part: none or "*" any
 * namespace, "." the Gateway's own, "~" none, else that namespace. */
static void test_policy_scope(void **state)
{
    struct conf_strpair sel_v[] = {{"app", "gw"}};
    struct conf_strpair lab_v[] = {{"app", "gw"}, {"zone", "a"}};
    struct conf_strpair other_v[] = {{"app", "web"}};
    const struct conf_strmap sel = {sel_v, 1}, none = {NULL, 0};
    const struct conf_strmap labels = {lab_v, 2}, other = {other_v, 1};
    struct resource r;

    (void)state;
    memset(&r, 0, sizeof(r));
    r.meta.ns = "edge";
    /* The node's namespace, empty selector or a matching one. */
    assert_int_equal(
        res_policy_scope(&r, &none, "edge", &labels, "istio-system"),
        RES_SCOPE_APPLIES);
    assert_int_equal(
        res_policy_scope(&r, &sel, "edge", &labels, "istio-system"),
        RES_SCOPE_APPLIES);
    assert_int_equal(res_policy_scope(&r, &sel, "edge", &other, "istio-system"),
                     RES_SCOPE_SELECTOR);
    assert_int_equal(res_policy_scope(&r, &sel, "edge", NULL, "istio-system"),
                     RES_SCOPE_SELECTOR);
    /* The root namespace applies mesh-wide; any other does not. */
    r.meta.ns = "istio-system";
    assert_int_equal(
        res_policy_scope(&r, &none, "edge", &labels, "istio-system"),
        RES_SCOPE_APPLIES);
    r.meta.ns = "web";
    assert_int_equal(
        res_policy_scope(&r, &none, "edge", &labels, "istio-system"),
        RES_SCOPE_OTHER_NAMESPACE);
    assert_int_equal(res_policy_scope(&r, &none, NULL, &labels, "istio-system"),
                     RES_SCOPE_OTHER_NAMESPACE);
}

static void test_gw_host_admits(void **state)
{
    const char *h = NULL;

    (void)state;
    assert_true(res_gw_host_admits("a.example.com", "gw", 2, "app", &h));
    assert_string_equal(h, "a.example.com");
    assert_true(res_gw_host_admits("*/a.example.com", "gw", 2, "app", &h));
    assert_string_equal(h, "a.example.com");
    assert_false(res_gw_host_admits("~/a.example.com", "gw", 2, "gw", &h));
    assert_true(res_gw_host_admits("app/*", "gw", 2, "app", &h));
    assert_string_equal(h, "*");
    assert_false(res_gw_host_admits("app/*", "gw", 2, "other", &h));
    assert_false(res_gw_host_admits("app/*", "gw", 2, "ap", &h));
    assert_false(res_gw_host_admits("app/*", "gw", 2, "apps", &h));
}

/* "./host" is the Gateway's namespace, never the VirtualService's own
 * (which would admit every namespace) nor the gateway node's. */
static void test_gw_host_dot_is_the_gateways_namespace(void **state)
{
    const char *h = NULL;
    const char *gw = "edge/public"; /* a compiled Gateway's "ns/name" */

    (void)state;
    assert_int_equal(res_ref_ns_len(gw), 4);
    assert_int_equal(res_ref_ns_len("mesh"), 0);
    assert_true(res_gw_host_admits("./a.example.com", gw, res_ref_ns_len(gw),
                                   "edge", &h));
    assert_string_equal(h, "a.example.com");
    assert_false(res_gw_host_admits("./a.example.com", gw, res_ref_ns_len(gw),
                                    "app", &h));
    assert_false(res_gw_host_admits("./a.example.com", gw, res_ref_ns_len(gw),
                                    "edg", &h));
    assert_false(res_gw_host_admits("./a.example.com", gw, res_ref_ns_len(gw),
                                    "edge2", &h));
    /* No Gateway namespace (the "mesh" pseudo-gateway): nothing binds. */
    assert_false(res_gw_host_admits("./a.example.com", "mesh", 0, "edge", &h));
}

static void test_host_fqdn(void **state)
{
    char out[128];

    (void)state;
    assert_int_equal(
        res_host_fqdn("reviews", "ns", "cluster.local", out, sizeof(out)), 28);
    assert_string_equal(out, "reviews.ns.svc.cluster.local");
    res_host_fqdn("reviews.other", "ns", "cluster.local", out, sizeof(out));
    assert_string_equal(out, "reviews.other");
    res_host_fqdn("*", "ns", "cluster.local", out, sizeof(out));
    assert_string_equal(out, "*");
    res_host_fqdn("::1", "ns", "cluster.local", out, sizeof(out));
    assert_string_equal(out, "::1");
    assert_int_equal(res_host_fqdn("reviews", "ns", "cluster.local", out, 8),
                     -1);
}

/* ---- Istio's samples ------------------------------------------------------
 */

static void load_path_clean(const char *path)
{
    struct buf errs;
    int nerr = -1;
    struct resource_set *set;

    buf_init(&errs, 1 << 20);
    set = resource_load(path, &errs, &nerr);
    assert_non_null(set);
    if (nerr != 0)
        fail_msg("%s: %s", path, buf_cstr(&errs));
    assert_true(set->n > 0);
    resource_set_free(set);
    buf_dispose(&errs);
}

static void test_istio_samples_load(void **state)
{
    static const char *const dirs[] = {"bookinfo/networking", "httpbin",
                                       "helloworld", "multicluster"};
    char path[512];

    (void)state;
    for (size_t i = 0; i < sizeof(dirs) / sizeof(*dirs); i++) {
        DIR *d;
        struct dirent *de;

        snprintf(path, sizeof(path), "%s/%s", SAMPLES, dirs[i]);
        /* bookinfo's files are alternatives (destination-rule-all.yaml
         * and destination-rule-all-mtls.yaml define the same rules): each
         * loads on its own, all together are duplicates. */
        if (i > 0)
            load_path_clean(path);
        d = opendir(path);
        assert_non_null(d);
        while ((de = readdir(d)) != NULL) {
            if (strstr(de->d_name, ".yaml") == NULL)
                continue;
            snprintf(path, sizeof(path), "%s/%s/%s", SAMPLES, dirs[i],
                     de->d_name);
            load_path_clean(path);
        }
        closedir(d);
    }
}

/* ---- bad configurations
 * ------------------------------------------------------ */

static void load_bad(const char *path)
{
    struct buf errs;
    struct analysis an;
    int nerr = 0;
    struct resource_set *set;

    buf_init(&errs, 1 << 20);
    set = resource_load(path, &errs, &nerr);
    assert_non_null(set);
    /* A file that loads must still fail analysis (dangling references). */
    if (nerr == 0)
        nerr = analyze(set, RES_REGISTRY_ONLY, &an);
    else
        memset(&an, 0, sizeof(an));
    if (nerr == 0)
        fail_msg("%s: no error", path);
    analysis_dispose(&an);
    resource_set_free(set);
    buf_dispose(&errs);
}

static void test_bad_corpus(void **state)
{
    DIR *d = opendir(BAD);
    struct dirent *de;
    char path[512];
    size_t n = 0;

    (void)state;
    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", BAD, de->d_name);
        load_bad(path);
        n++;
    }
    closedir(d);
    assert_true(n >= 15);
    /* The directory as a whole, too. */
    load_bad(BAD);
}

/* A 5 MB file of documents that each hold an error: every error is
 * counted, the text stays within its cap, and nothing takes long. */
static void test_huge_file(void **state)
{
    char path[] = "/tmp/strait-huge-XXXXXX.yaml";
    int fd = mkstemps(path, 5);
    FILE *fp;
    struct buf errs;
    int nerr = 0, docs = 0;
    struct resource_set *set;

    (void)state;
    assert_true(fd >= 0);
    fp = fdopen(fd, "w");
    assert_non_null(fp);
    while (ftell(fp) < 5 * 1024 * 1024) {
        fprintf(
            fp,
            "---\n" HDR("VirtualService",
                        "vs-%d") "spec:\n  hosts: [h%d.example.com]\n  http:\n"
                                 "  - route: [{destination: {host: h}}]\n"
                                 "    timeout: forever\n",
            docs, docs);
        docs++;
    }
    fclose(fp);
    buf_init(&errs, 8 * 1024 * 1024);
    set = resource_load(path, &errs, &nerr);
    unlink(path);
    assert_non_null(set);
    assert_int_equal(nerr, docs);
    assert_int_equal(set->n, 0);
    assert_true(buf_len(&errs) < RESOURCE_MAX_ERR_BYTES + 4096);
    assert_non_null(strstr(buf_cstr(&errs), "more errors not shown"));
    resource_set_free(set);
    buf_dispose(&errs);
}

static void test_missing_path(void **state)
{
    struct buf errs;
    int nerr = 0;
    struct resource_set *set;

    (void)state;
    buf_init(&errs, 4096);
    set = resource_load("/no/such/dir", &errs, &nerr);
    assert_non_null(set);
    assert_int_equal(nerr, 1);
    assert_string_equal(buf_cstr(&errs), "/no/such/dir:0:0: cannot read: "
                                         "No such file or directory\n");
    resource_set_free(set);
    buf_dispose(&errs);
    resource_set_free(NULL);
}

/* Three inputs Istio's validation accepts, and strait now too: a
 * ServiceEntry port with protocol "" (TCP, as omitted), an
 * AuthorizationPolicy without spec (allow-nothing), a fault delay without
 * fixedDelay (no delay, with a warning). */
static void test_accepted_as_istio_does(void **state)
{
    static const char text[] =
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"
        "metadata: {name: se}\n"
        "spec: {hosts: [a.example.com], resolution: DNS, ports: [{number: "
        "80, name: p, protocol: \"\"}]}\n"
        "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n"
        "metadata: {name: allow-nothing}\n"
        "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\n"
        "metadata: {name: v}\n"
        "spec: {hosts: [a.example.com], http: [{fault: {delay: "
        "{percentage: {value: 50}}}, route: [{destination: {host: "
        "a.example.com}}]}]}\n";
    int nerr = -1;
    struct resource_set *set;
    const struct resource *r;

    (void)state;
    set = resource_load_mem(text, strlen(text), "r.yaml", NULL, &nerr);
    assert_non_null(set);
    assert_int_equal(nerr, 0);
    assert_int_equal(set->n, 3);
    r = resource_find(set, RES_SERVICE_ENTRY, "default", "se");
    assert_non_null(r);
    assert_int_equal(
        ((const struct res_se_port *)res_service_entry(r)->ports.v)[0].protocol,
        RES_PROTO_TCP);
    r = resource_find(set, RES_AUTHORIZATION_POLICY, "default",
                      "allow-nothing");
    assert_non_null(r);
    assert_int_equal(res_authorization_policy(r)->action, RES_AUTHZ_ALLOW);
    assert_int_equal(res_authorization_policy(r)->rules.n, 0);
    assert_int_equal(count_warnings(set, "no delay is injected"), 1);
    resource_set_free(set);
}

/* A kind: List is read item by item. */
static void test_list_is_expanded(void **state)
{
    static const char text[] =
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: networking.istio.io/v1\n  kind: ServiceEntry\n"
        "  metadata: {name: a}\n"
        "  spec: {hosts: [a.example.com], resolution: DNS, ports: "
        "[{number: 80, name: p}]}\n"
        "- apiVersion: networking.istio.io/v1\n  kind: ServiceEntry\n"
        "  metadata: {name: b}\n"
        "  spec: {hosts: [b.example.com], resolution: DNS, ports: "
        "[{number: 80, name: p}]}\n";
    int nerr = -1;
    struct resource_set *set;

    (void)state;
    set = resource_load_mem(text, strlen(text), "r.yaml", NULL, &nerr);
    assert_non_null(set);
    assert_int_equal(nerr, 0);
    assert_int_equal(set->n, 2);
    assert_non_null(resource_find(set, RES_SERVICE_ENTRY, "default", "b"));
    resource_set_free(set);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_gateway),
        T(test_virtual_service),
        T(test_destination_rule),
        T(test_service_and_workload_entry),
        T(test_metadata),
        T(test_multi_document_and_json),
        T(test_other_kinds_are_skipped),
        T(test_unknown_istio_kind_is_a_warning),
        T(test_static_without_endpoints_is_a_warning),
        T(test_security_kinds),
        T(test_duplicate_is_an_error_at_both_places),
        T(test_directory_namespaces),
        T(test_err_yaml),
        T(test_err_identity),
        T(test_err_types_and_unknown_keys),
        T(test_err_oneof),
        T(test_err_semantics),
        T(test_err_rewrite_uri_bytes),
        T(test_err_load_balancer),
        T(test_err_keeps_good_resources),
        T(test_locality_lb_setting_parsed),
        T(test_locality_validation_messages),
        T(test_locality_list_limits),
        T(test_warning_ca_crl_ignored),
        cmocka_unit_test(test_accepted_as_istio_does),
        cmocka_unit_test(test_list_is_expanded),
        cmocka_unit_test(test_host_fqdn),
        cmocka_unit_test(test_gw_host_admits),
        cmocka_unit_test(test_policy_scope),
        cmocka_unit_test(test_gw_host_dot_is_the_gateways_namespace),
        cmocka_unit_test(test_retry_on_names),
        cmocka_unit_test(test_retry_on_next),
        cmocka_unit_test(test_istio_samples_load),
        cmocka_unit_test(test_bad_corpus),
        cmocka_unit_test(test_huge_file),
        cmocka_unit_test(test_missing_path),
    };
#undef T

    return cmocka_run_group_tests(tests, NULL, NULL);
}
