/*
 * Unit tests for src/config/analyze.c: each istioctl code fires on a
 * minimal bad set and stays quiet on the good variant; resource_check()
 * prints text and JSON and returns the exit status.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/ec.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include "config/analyze.h"
#include "config/resource.h"
#include "core/buf.h"

#define HDR(kind, name)                                                        \
    "---\napiVersion: networking.istio.io/v1\nkind: " kind                     \
    "\nmetadata:\n  name: " name "\n"

/* Services for the sets below: reviews backed by WorkloadEntries, and an
 * external API by a ServiceEntry. */
#define BACKENDS                                                               \
    HDR("WorkloadEntry", "reviews-v1")                                         \
    "spec: {address: 10.0.0.1, ports: {http: 9080}, labels: {app: reviews, "   \
    "version: v1}}\n" HDR(                                                     \
        "WorkloadEntry",                                                       \
        "reviews-v2") "spec: {address: 10.0.0.2, ports: {http: 9080}, "        \
                      "labels: {app: reviews, "                                \
                      "version: v2}}\n" HDR(                                   \
                          "ServiceEntry",                                      \
                          "api") "spec: {hosts: "                              \
                                 "[api.example.com], "                         \
                                 "ports: [{number: 443, "                      \
                                 "name: tls, protocol: TLS}], "                \
                                 "resolution: DNS}\n" HDR(                     \
                                     "DestinationRule",                        \
                                     "reviews") "spec: "                       \
                                                "{host: "                      \
                                                "reviews, "                    \
                                                "subsets: "                    \
                                                "[{name: "                     \
                                                "v1, "                         \
                                                "labels: "                     \
                                                "{version: "                   \
                                                "v1}}, "                       \
                                                "{name: "                      \
                                                "v2, "                         \
                                                "labels: "                     \
                                                "{version: "                   \
                                                "v2}}]}\n" HDR(                \
                                                    "Gateway",                 \
                                                    "edge") "spec: {servers: " \
                                                            "[{port: "         \
                                                            "{number: 8080, "  \
                                                            "name: http, "     \
                                                            "protocol: "       \
                                                            "HTTP}, "          \
                                                            "hosts: "          \
                                                            "['*']}]}\n"

#define GATEWAY                                                                \
    HDR("Gateway", "gw")                                                       \
    "spec:\n  selector: {istio: ingressgateway}\n  servers:\n"                 \
    "  - port: {number: 80, name: http, protocol: HTTP}\n"                     \
    "    hosts: [\"*.example.com\"]\n"

/* run() loads text, which must load cleanly, analyses it and returns how
 * many findings carry code; *text_out gets their lines if not NULL. */
static size_t run_mode(const char *text, const char *code, int mode);

static size_t run(const char *text, const char *code)
{
    return run_mode(text, code, RES_REGISTRY_ONLY);
}

static size_t run_mode(const char *text, const char *code, int mode)
{
    struct buf errs;
    int nerr = 0;
    struct resource_set *set;
    struct analysis an;
    size_t n = 0;

    buf_init(&errs, 1 << 20);
    set = resource_load_mem(text, strlen(text), "a.yaml", &errs, &nerr);
    assert_non_null(set);
    if (nerr != 0)
        fail_msg("load errors:\n%s", buf_cstr(&errs));
    analyze(set, mode, &an);
    for (size_t i = 0; i < an.msgs.n; i++) {
        if (strcmp(an.msgs.v[i].code, code) == 0)
            n++;
    }
    analysis_dispose(&an);
    resource_set_free(set);
    buf_dispose(&errs);
    return n;
}

static const char *msg_of(const char *text, const char *code,
                          const struct analysis_node *node, size_t *n,
                          char *out, size_t len);

/* first() returns the first finding with code as a check line, in
 * out (n bytes). */
static const char *first_mode(const char *text, const char *code, int mode,
                              char *out, size_t n);

static const char *first(const char *text, const char *code, char *out,
                         size_t n)
{
    return first_mode(text, code, RES_REGISTRY_ONLY, out, n);
}

static const char *first_mode(const char *text, const char *code, int mode,
                              char *out, size_t n)
{
    int nerr = 0;
    struct resource_set *set =
        resource_load_mem(text, strlen(text), "a.yaml", NULL, &nerr);
    struct analysis an;

    out[0] = '\0';
    analyze(set, mode, &an);
    for (size_t i = 0; i < an.msgs.n; i++) {
        const struct res_msg *m = &an.msgs.v[i];
        if (strcmp(m->code, code) == 0) {
            snprintf(out, n, "%s:%d:%d %s %s: %s (%s)", m->file, m->line,
                     m->col, m->resource, m->path, m->message,
                     m->level == RES_ERROR     ? "error"
                     : m->level == RES_WARNING ? "warning"
                                               : "info");
            break;
        }
    }
    analysis_dispose(&an);
    resource_set_free(set);
    return out;
}

static void test_good_set_is_clean(void **state)
{
    struct buf errs;
    int nerr = 0;
    struct resource_set *set;
    struct analysis an;
    static const char text[] = BACKENDS GATEWAY HDR(
        "VirtualService",
        "reviews") "spec:\n  hosts: [reviews.example.com]\n  gateways: [gw]\n"
                   "  http:\n"
                   "  - match: [{headers: {end-user: {exact: jason}}}]\n"
                   "    route: [{destination: {host: reviews, subset: v2}}]\n"
                   "  - route:\n"
                   "    - {destination: {host: reviews, subset: v1}, weight: "
                   "90}\n"
                   "    - {destination: {host: reviews, subset: v2}, weight: "
                   "10}\n";

    (void)state;
    buf_init(&errs, 1 << 20);
    set = resource_load_mem(text, sizeof(text) - 1, "a.yaml", &errs, &nerr);
    assert_int_equal(nerr, 0);
    assert_int_equal(analyze(set, RES_REGISTRY_ONLY, &an), 0);
    if (an.msgs.n != 0)
        fail_msg("unexpected: %s %s", an.msgs.v[0].code, an.msgs.v[0].message);
    analysis_dispose(&an);
    resource_set_free(set);
    buf_dispose(&errs);
}

static void test_ist0101_gateway(void **state)
{
    char line[512];
    static const char bad[] = BACKENDS HDR(
        "VirtualService",
        "v") "spec:\n  hosts: [a.example.com]\n  gateways: [gw]\n"
             "  http: [{route: [{destination: {host: reviews}}]}]\n";

    (void)state;
    assert_int_equal(run(bad, "IST0101"), 1);
    assert_string_equal(first(bad, "IST0101", line, sizeof(line)),
                        "a.yaml:32:1 VirtualService default/v "
                        "spec.gateways[0]: Referenced gateway not found: "
                        "\"gw\" (error)");
    assert_int_equal(
        run(BACKENDS GATEWAY HDR(
                "VirtualService",
                "v") "spec:\n  hosts: [a.example.com]\n"
                     "  gateways: [default/gw]\n"
                     "  http: [{route: [{destination: {host: reviews}}]}]\n",
            "IST0101"),
        0);
}

/* tls and tcp rules: their destinations and their match blocks'
 * gateways are checked like http's. */
static void test_ist0101_l4_rules(void **state)
{
    char line[512];
    static const char bad[] = BACKENDS GATEWAY HDR(
        "VirtualService",
        "t") "spec:\n  hosts: [api.example.com]\n  gateways: [gw]\n"
             "  tls:\n"
             "  - match: [{sniHosts: [api.example.com], gateways: [gw, "
             "nosuch]}]\n"
             "    route: [{destination: {host: api.example.com}}]\n"
             "  tcp:\n"
             "  - match: [{port: 5432, gateways: [default/gw]}]\n"
             "    route: [{destination: {host: db.example.com}}]\n";

    (void)state;
    assert_int_equal(run(bad, "IST0101"), 2);
    assert_string_equal(first(bad, "IST0101", line, sizeof(line)),
                        "a.yaml:50:13 VirtualService default/t "
                        "spec.tls[0].match[0].gateways[1]: Referenced gateway "
                        "not found: \"nosuch\" (error)");
}

static void test_ist0101_host_and_subset(void **state)
{
    char line[512];
    static const char bad[] =
        BACKENDS HDR("VirtualService",
                     "v") "spec:\n  hosts: [reviews]\n  gateways: [edge]\n"
                          "  http:\n"
                          "  - route:\n"
                          "    - destination: {host: ratings}\n"
                          "    - destination: {host: reviews, subset: v3}\n"
                          "      weight: 1\n";

    (void)state;
    assert_int_equal(run(bad, "IST0101"), 2);
    assert_string_equal(first(bad, "IST0101", line, sizeof(line)),
                        "a.yaml:41:20 VirtualService default/v "
                        "spec.http[0].route[0].destination.host: Referenced "
                        "host not found: \"ratings\" (outboundTrafficPolicy "
                        "is REGISTRY_ONLY: declare the host in a ServiceEntry, "
                        "or set outboundTrafficPolicy.mode ALLOW_ANY in the "
                        "bootstrap to pass it through) (error)");
    assert_int_equal(
        run(BACKENDS HDR("VirtualService",
                         "v") "spec:\n  hosts: [reviews]\n  gateways: [edge]\n"
                              "  http:\n  - route:\n"
                              "    - destination: {host: api.example.com}\n"
                              "    - destination: {host: "
                              "reviews.default.svc.cluster.local, subset: v2}\n"
                              "      weight: 1\n",
            "IST0101"),
        0);
}

/* The registry is ServiceEntries and WorkloadEntries; what a destination
 * outside it is depends on outboundTrafficPolicy. */
static void test_ist0101_by_outbound_policy(void **state)
{
    char line[1024];
    static const char text[] =
        BACKENDS HDR("VirtualService",
                     "v") "spec:\n  hosts: [reviews]\n  gateways: [edge]\n"
                          "  http:\n"
                          "  - route:\n"
                          "    - destination: {host: pay.example.net}\n"
                          "  tcp:\n"
                          "  - route:\n"
                          "    - destination: {host: db.example.net, port: "
                          "{number: 5432}}\n";
    /* A DestinationRule names a host without declaring it. */
    static const char dr_only[] = BACKENDS HDR(
        "DestinationRule",
        "d") "spec: {host: pay.example.net, trafficPolicy: "
             "{tls: {mode: SIMPLE}}}\n" HDR(
                 "VirtualService",
                 "v") "spec:\n  hosts: [reviews]\n  gateways: [edge]\n"
                      "  http:\n  - route: [{destination: "
                      "{host: pay.example.net}}]\n";
    static const char wildcard[] = BACKENDS HDR(
        "VirtualService", "v") "spec:\n  hosts: [reviews]\n  gateways: [edge]\n"
                               "  http:\n  - route: "
                               "[{destination: {host: "
                               "\"*.example.net\"}}]\n";

    (void)state;
    /* REGISTRY_ONLY: errors that say why and what to do. */
    assert_int_equal(run_mode(text, "IST0101", RES_REGISTRY_ONLY), 2);
    assert_string_equal(
        first_mode(text, "IST0101", RES_REGISTRY_ONLY, line, sizeof(line)),
        "a.yaml:41:20 VirtualService default/v "
        "spec.http[0].route[0].destination.host: Referenced host not found: "
        "\"pay.example.net\" (outboundTrafficPolicy is REGISTRY_ONLY: "
        "declare the host in a ServiceEntry, or set "
        "outboundTrafficPolicy.mode ALLOW_ANY in the bootstrap to pass it "
        "through) (error)");
    assert_int_equal(run_mode(dr_only, "IST0101", RES_REGISTRY_ONLY), 1);
    /* ALLOW_ANY: strait's own warnings that say where it goes, never
     * IST0101, which Istio makes always an Error. */
    assert_int_equal(run_mode(text, "IST0101", RES_ALLOW_ANY), 0);
    assert_int_equal(run_mode(text, "STR0005", RES_ALLOW_ANY), 2);
    assert_string_equal(
        first_mode(text, "STR0005", RES_ALLOW_ANY, line, sizeof(line)),
        "a.yaml:41:20 VirtualService default/v "
        "spec.http[0].route[0].destination.host: Host \"pay.example.net\" "
        "is in no ServiceEntry, Service or WorkloadEntry: passed through to "
        "pay.example.net, resolved by DNS, on the port of the Gateway "
        "server it comes through (outboundTrafficPolicy ALLOW_ANY) "
        "(warning)");
    {
        int nerr = 0;
        struct resource_set *set =
            resource_load_mem(text, strlen(text), "a.yaml", NULL, &nerr);
        struct analysis an;
        assert_int_equal(nerr, 0);
        assert_int_equal(analyze(set, RES_ALLOW_ANY, &an), 0);
        assert_int_equal(an.msgs.n, 2);
        assert_string_equal(an.msgs.v[1].code, "STR0005");
        assert_int_equal(an.msgs.v[1].level, RES_WARNING);
        assert_non_null(strstr(an.msgs.v[1].message,
                               "on port 5432 (outboundTrafficPolicy"));
        analysis_dispose(&an);
        assert_int_equal(analyze(set, RES_REGISTRY_ONLY, &an), 2);
        analysis_dispose(&an);
        resource_set_free(set);
    }
    /* The DestinationRule applies to the passthrough: no IST0174 noise
     * without a hint, and the route is a warning. */
    assert_int_equal(run_mode(dr_only, "IST0101", RES_ALLOW_ANY), 0);
    assert_int_equal(run_mode(dr_only, "STR0005", RES_ALLOW_ANY), 1);
    assert_non_null(strstr(
        first_mode(dr_only, "IST0174", RES_ALLOW_ANY, line, sizeof(line)),
        "under outboundTrafficPolicy ALLOW_ANY it applies "
        "to routes passed through to that host"));
    /* A wildcard names no host to resolve: an error either way. */
    assert_non_null(strstr(
        first_mode(wildcard, "IST0101", RES_ALLOW_ANY, line, sizeof(line)),
        "a wildcard names none: declare it in a "
        "ServiceEntry) (error)"));
    assert_int_equal(run_mode(wildcard, "STR0005", RES_ALLOW_ANY), 0);
    /* Declared hosts are quiet in both modes. */
    assert_int_equal(
        run_mode(BACKENDS HDR("VirtualService",
                              "v") "spec:\n  hosts: "
                                   "[reviews]\n  gateways: [edge]\n  http:\n"
                                   "  - route: "
                                   "[{destination: {host: "
                                   "reviews}}]\n",
                 "IST0101", RES_ALLOW_ANY),
        0);
    assert_int_equal(
        run_mode(BACKENDS HDR("VirtualService",
                              "v") "spec:\n  hosts: "
                                   "[reviews]\n  gateways: [edge]\n  http:\n"
                                   "  - route: "
                                   "[{destination: {host: "
                                   "reviews}}]\n",
                 "STR0005", RES_ALLOW_ANY),
        0);
    /* Under REGISTRY_ONLY the passthrough warning never shows. */
    assert_int_equal(run_mode(text, "STR0005", RES_REGISTRY_ONLY), 0);
}

static void test_ist0145_conflicting_gateways(void **state)
{
    char line[1024];
#define GW2(hosts)                                                             \
    HDR("Gateway", "gw2")                                                      \
    "spec:\n  selector: {istio: ingressgateway}\n"                             \
    "  servers:\n"                                                             \
    "  - port: {number: 80, name: http2, protocol: "                           \
    "HTTP}\n    hosts: [" hosts "]\n"

    (void)state;
    /* The same host on the same port and selector: both Gateways. */
    assert_int_equal(run(GATEWAY GW2("\"*.example.com\""), "IST0145"), 2);
    first(GATEWAY GW2("\"*.example.com\""), "IST0145", line, sizeof(line));
    assert_string_equal(line, "a.yaml:9:5 Gateway default/gw spec.servers[0]: "
                              "Conflict with gateways default/gw2 (workload "
                              "selector istio=ingressgateway, port 80, hosts "
                              "*.example.com). (error)");
    /* Hosts are compared as written, as Istio does: a narrower host,
     * or the same one with a namespace, is not a conflict. */
    assert_int_equal(run(GATEWAY GW2("\"a.example.com\""), "IST0145"), 0);
    assert_int_equal(run(GATEWAY GW2("\"*/*.example.com\""), "IST0145"), 0);
    assert_int_equal(run(GATEWAY GW2("\"./*.example.com\""), "IST0145"), 0);
    assert_int_equal(
        run(GATEWAY HDR(
                "Gateway",
                "gw2") "spec:\n  selector: {istio: ingressgateway}\n"
                       "  servers:\n"
                       "  - port: {number: 8080, name: http2, protocol: "
                       "HTTP}\n    hosts: [\"*.example.com\"]\n",
            "IST0145"),
        0);
#undef GW2
}

/* Servers on one port: HTTPS and TLS share it by SNI (quiet); plaintext
 * HTTP and TCP cannot (STR0006, a warning on the later one); plaintext
 * HTTP beside HTTPS refuses the Gateways (STR0007, an error). Neither is
 * Istio's IST0145 ConflictingGateways, which is about one host. */
static void test_port_sharing_codes(void **state)
{
#define SRV(port, name, proto, hosts, tls)                                     \
    "  - port: {number: " port ", name: " name ", protocol: " proto "}\n"      \
    "    hosts: [" hosts "]\n" tls
#define GW_SERVERS(name)                                                       \
    HDR("Gateway", name)                                                       \
    "spec:\n  selector: {istio: ingressgateway}\n"                             \
    "  servers:\n"
    static const char shared[] =
        GW_SERVERS("gw") SRV("443", "https", "HTTPS", "app.example.com",
                             "    tls: {mode: SIMPLE, credentialName: app}\n")
            SRV("443", "tls", "TLS", "db.example.com",
                "    tls: {mode: PASSTHROUGH}\n")
                SRV("443", "term", "TLS", "tcp.example.com",
                    "    tls: {mode: SIMPLE, credentialName: t}\n");
    static const char plain[] =
        GW_SERVERS("gw") SRV("8080", "http", "HTTP", "\"*\"", "")
            GW_SERVERS("gw2") SRV("8080", "tcp", "TCP", "tcp.example.com", "");
    static const char beside_tls[] =
        GW_SERVERS("gw") SRV("8443", "https", "HTTPS", "\"*\"",
                             "    tls: {mode: SIMPLE, credentialName: app}\n")
            SRV("8443", "http", "HTTP", "\"*\"", "");
    char line[1024];

    (void)state;
    assert_int_equal(run(shared, "STR0006") + run(shared, "STR0007"), 0);
    assert_int_equal(run(plain, "STR0006"), 1);
    assert_int_equal(run(plain, "STR0007"), 0);
    first(plain, "STR0006", line, sizeof(line));
    assert_non_null(strstr(line, "Gateway default/gw2"));
    assert_non_null(strstr(line, "spec.servers[0]"));
    assert_non_null(strstr(line, "this plaintext TCP server cannot share the "
                                 "port with the plaintext HTTP servers"));
    assert_non_null(strstr(line, "no SNI"));
    assert_non_null(strstr(line, "(warning)"));
    assert_int_equal(run(beside_tls, "STR0007"), 1);
    assert_int_equal(run(beside_tls, "STR0006"), 0);
    first(beside_tls, "STR0007", line, sizeof(line));
    assert_non_null(strstr(line, "spec.servers[1]"));
    assert_non_null(strstr(line, "(error)"));
    /* Istio's IST0145 is one host on one port and selector: not this. */
    assert_int_equal(run(plain, "IST0145") + run(beside_tls, "IST0145"), 0);
    /* Another bind address is another port. */
    assert_int_equal(
        run(GW_SERVERS("gw")
                SRV("8080", "http", "HTTP", "\"*\"",
                    "") "  - port: {number: 8080, name: tcp, protocol: TCP}\n"
                        "    bind: 10.0.0.1\n    hosts: [\"*\"]\n",
            "STR0006"),
        0);
#undef SRV
#undef GW_SERVERS
}

static void test_ist0132_host_not_in_gateway(void **state)
{
    (void)state;
    assert_int_equal(
        run(BACKENDS GATEWAY HDR(
                "VirtualService",
                "v") "spec:\n  hosts: [a.example.org]\n"
                     "  gateways: [gw]\n"
                     "  http: [{route: [{destination: {host: reviews}}]}]\n",
            "IST0132"),
        1);
    assert_int_equal(
        run(BACKENDS GATEWAY HDR(
                "VirtualService",
                "v") "spec:\n  hosts: [a.example.com]\n"
                     "  gateways: [gw]\n"
                     "  http: [{route: [{destination: {host: reviews}}]}]\n",
            "IST0132"),
        0);
}

static void test_ist0130_unreachable_rule(void **state)
{
    (void)state;
    assert_int_equal(
        run(BACKENDS HDR(
                "VirtualService",
                "v") "spec:\n  hosts: [reviews]\n  gateways: [edge]\n  http:\n"
                     "  - route: [{destination: {host: reviews}}]\n"
                     "  - match: [{uri: {prefix: /a}}]\n"
                     "    route: [{destination: {host: reviews}}]\n",
            "IST0130"),
        1);
    assert_int_equal(
        run(BACKENDS HDR(
                "VirtualService",
                "v") "spec:\n  hosts: [reviews]\n  gateways: [edge]\n  http:\n"
                     "  - match: [{uri: {prefix: /a}}]\n"
                     "    route: [{destination: {host: reviews}}]\n"
                     "  - route: [{destination: {host: reviews}}]\n",
            "IST0130"),
        0);
}

static void test_ist0131_ineffective_match(void **state)
{
    static const char bad[] = BACKENDS HDR(
        "VirtualService",
        "v") "spec:\n  hosts: [reviews]\n  gateways: [edge]\n  http:\n"
             "  - match: [{uri: {prefix: /a}}, {uri: {prefix: /b}}]\n"
             "    route: [{destination: {host: reviews}}]\n"
             "  - match: [{uri: {prefix: /a}, name: again}, {uri: {prefix: "
             "/c}}]\n"
             "    route: [{destination: {host: reviews}}]\n";

    (void)state;
    assert_int_equal(run(bad, "IST0131"), 1);
    /* The rule still has a match of its own: it is reachable. */
    assert_int_equal(run(bad, "IST0130"), 0);
    assert_int_equal(
        run(BACKENDS HDR(
                "VirtualService",
                "v") "spec:\n  hosts: [reviews]\n  gateways: [edge]\n  http:\n"
                     "  - match: [{uri: {prefix: /a}}]\n"
                     "    route: [{destination: {host: reviews}}]\n"
                     "  - match: [{uri: {exact: /a}}]\n"
                     "    route: [{destination: {host: reviews}}]\n",
            "IST0131"),
        0);
}

static void test_ist0173_subset_selects_nothing(void **state)
{
    (void)state;
    assert_int_equal(
        run(HDR("WorkloadEntry",
                "r1") "spec: {address: 10.0.0.1, labels: {app: reviews, "
                      "version: v1}}\n" HDR(
                          "DestinationRule",
                          "reviews") "spec: {host: reviews, subsets: [{name: "
                                     "v1, labels: "
                                     "{version: v1}}, {name: v9, labels: "
                                     "{version: "
                                     "v9}}]}\n",
            "IST0173"),
        1);
    assert_int_equal(run(BACKENDS, "IST0173"), 0);
    {
        char m[512];
        size_t n;
        msg_of(HDR("WorkloadEntry",
                   "r1") "spec: {address: 10.0.0.1, labels: "
                         "{app: reviews}}\n" HDR(
                             "DestinationRule",
                             "reviews") "spec: {host: reviews, subsets: "
                                        "[{name: v9, "
                                        "labels: {version: v9}}]}\n",
               "IST0173", NULL, &n, m, sizeof(m));
        assert_int_equal(n, 1);
        assert_string_equal(m, "The Subset v9 defined in the DestinationRule "
                               "does not select any pods. Which may lead to "
                               "503 UH (NoHealthyUpstream).");
    }
}

static void test_ist0174_dr_host_unknown(void **state)
{
    (void)state;
    assert_int_equal(
        run(HDR("DestinationRule", "d") "spec: {host: nowhere}\n", "IST0174"),
        1);
    assert_int_equal(run(BACKENDS HDR("DestinationRule",
                                      "d") "spec: {host: api.example.com}\n",
                         "IST0174"),
                     0);
}

static void test_weights_sum_to_zero(void **state)
{
    (void)state;
    assert_int_equal(
        run(BACKENDS HDR(
                "VirtualService",
                "v") "spec:\n  hosts: [reviews]\n  gateways: [edge]\n  http:\n "
                     " - route:\n"
                     "    - {destination: {host: reviews, subset: v1}}\n"
                     "    - {destination: {host: reviews, subset: v2}}\n",
            "IST0106"),
        1);
    assert_int_equal(
        run(BACKENDS HDR(
                "VirtualService",
                "v") "spec:\n  hosts: [reviews]\n  gateways: [edge]\n  tcp:\n  "
                     "- route:\n"
                     "    - {destination: {host: reviews}, weight: 1}\n"
                     "    - {destination: {host: reviews}}\n",
            "IST0106"),
        0);
}

/* check() runs resource_check() on text written to a file. */
static int check(const char *text, int json, char **out)
{
    char path[] = "/tmp/strait-check-XXXXXX.yaml";
    int fd = mkstemps(path, 5);
    size_t n = 0;
    FILE *mem;
    int rc;

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    mem = open_memstream(out, &n);
    assert_non_null(mem);
    rc = resource_check(path, json, RES_REGISTRY_ONLY, mem);
    fclose(mem);
    unlink(path);
    return rc;
}

static void test_resource_check(void **state)
{
    char *out = NULL;

    (void)state;
    assert_int_equal(check(BACKENDS, 0, &out), 0);
    assert_non_null(strstr(out, "No validation issues found"));
    free(out);

    assert_int_equal(
        check(HDR("DestinationRule", "d") "spec: {host: x}\n", 0, &out), 0);
    assert_non_null(strstr(out, "Warning [IST0174] (DestinationRule "
                                "default/d /tmp/strait-check-"));
    free(out);

    assert_int_equal(
        check(BACKENDS HDR(
                  "VirtualService",
                  "v") "spec: {hosts: [a], gateways: [edge], http: [{route: "
                       "[{destination: {host: b}}]}]}\n",
              1, &out),
        1);
    assert_non_null(strstr(out, "\"code\":\"IST0101\""));
    assert_non_null(strstr(out, "\"level\":\"Error\""));
    assert_non_null(strstr(out, "\"origin\":\"VirtualService default/v\""));
    assert_non_null(strstr(out, "\"documentationUrl\":\"https://istio.io/"
                                "latest/docs/reference/config/analysis/"
                                "ist0101/\""));
    free(out);

    /* Schema errors come alone, and fail the check. */
    assert_int_equal(
        check(HDR("VirtualService", "v") "spec: {hostz: [a]}\n", 0, &out), 1);
    assert_non_null(strstr(out, "Error [IST0106] (VirtualService default/v "));
    assert_non_null(strstr(out, ") spec.hostz: unknown key\n"));
    free(out);
    assert_string_equal(res_code_name("IST0145"), "ConflictingGateways");
}

/* Istio's egress-gateway task: the rule bound to mesh routes to the
 * egress gateway's Service, which a gateway never uses: not checked
 * (no IST0101), an Info instead; the gateway's own rule is. */
static const char egress_task[] =
    "apiVersion: networking.istio.io/v1alpha3\nkind: ServiceEntry\n"
    "metadata:\n  name: cnn\nspec:\n  hosts:\n  - edition.cnn.com\n"
    "  ports:\n  - number: 80\n    name: http-port\n    protocol: HTTP\n"
    "  - number: 443\n    name: https\n    protocol: HTTPS\n"
    "  resolution: DNS\n"
    "---\napiVersion: networking.istio.io/v1alpha3\nkind: Gateway\n"
    "metadata:\n  name: istio-egressgateway\nspec:\n  selector:\n"
    "    istio: egressgateway\n  servers:\n  - port:\n      number: 80\n"
    "      name: http\n      protocol: HTTP\n    hosts:\n"
    "    - edition.cnn.com\n"
    "---\napiVersion: networking.istio.io/v1alpha3\nkind: VirtualService\n"
    "metadata:\n  name: direct-cnn-through-egress-gateway\nspec:\n"
    "  hosts:\n  - edition.cnn.com\n  gateways:\n  - istio-egressgateway\n"
    "  - mesh\n  http:\n  - match:\n    - gateways:\n      - mesh\n"
    "      port: 80\n    route:\n    - destination:\n"
    "        host: istio-egressgateway.istio-system.svc.cluster.local\n"
    "        subset: cnn\n        port:\n          number: 80\n"
    "      weight: 100\n  - match:\n    - gateways:\n"
    "      - istio-egressgateway\n      port: 80\n    route:\n"
    "    - destination:\n        host: edition.cnn.com\n        port:\n"
    "          number: 80\n      weight: 100\n";

static void test_mesh_rules_are_not_checked(void **state)
{
    char line[512];
    static const char mesh_vs[] =
        HDR("VirtualService", "m") "spec: {hosts: [a], http: [{route: "
                                   "[{destination: {host: nowhere}}]}]}\n";
    static const char gw_rule_bad[] = HDR(
        "Gateway",
        "g") "spec: {servers: [{port: {number: 80, name: h, "
             "protocol: HTTP}, hosts: ['*']}]}\n" HDR(
                 "VirtualService",
                 "m") "spec: {hosts: [a], gateways: [g, mesh], http: [{match: "
                      "[{gateways: [mesh]}], route: [{destination: {host: "
                      "x}}]}, "
                      "{route: [{destination: {host: nowhere}}]}]}\n";

    (void)state;
    assert_int_equal(run(egress_task, "IST0101"), 0);
    assert_int_equal(run(egress_task, "STR0001"), 1);
    assert_string_equal(first(egress_task, "STR0001", line, sizeof(line)),
                        "a.yaml:43:5 VirtualService "
                        "default/direct-cnn-through-egress-gateway "
                        "spec.http[0]: rule bound only to mesh: sidecars use "
                        "it, a gateway ignores it (its destinations are not "
                        "checked) (info)");
    /* No gateways at all: mesh; the whole VirtualService is ignored. */
    assert_int_equal(run(mesh_vs, "IST0101"), 0);
    assert_int_equal(run(mesh_vs, "STR0001"), 1);
    /* The rule the gateway uses is still checked. */
    assert_int_equal(run(gw_rule_bad, "IST0101"), 1);
}

/* A schema error leaves the bad resource out and the rest analysed; the
 * check still fails. A kind: List is read item by item. */
static void test_schema_error_does_not_stop_analysis(void **state)
{
    char *out = NULL;
    size_t len = 0;
    char path[] = "/tmp/strait-check-XXXXXX";
    int fd = mkstemp(path);
    FILE *f, *o;
    static const char text[] =
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: networking.istio.io/v1\n  kind: VirtualService\n"
        "  metadata: {name: bad}\n  spec: {hostz: [a]}\n"
        "- apiVersion: networking.istio.io/v1\n  kind: VirtualService\n"
        "  metadata: {name: v}\n"
        "  spec: {hosts: [a], gateways: [nogw], http: [{route: "
        "[{destination: {host: b}}]}]}\n";

    (void)state;
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    o = open_memstream(&out, &len);
    assert_int_equal(resource_check(path, 0, RES_REGISTRY_ONLY, o), 1);
    fclose(o);
    unlink(path);
    assert_non_null(
        strstr(out, "Error [IST0106] (VirtualService default/bad "));
    assert_non_null(strstr(out, "Error [IST0101] (VirtualService default/v "));
    assert_non_null(strstr(out, "Referenced gateway not found: \"nogw\""));
    free(out);
}

static void test_levels_and_names(void **state)
{
    (void)state;
    assert_string_equal(res_code_name("IST0174"), "UnknownDestinationRuleHost");
    assert_string_equal(res_code_name("IST0130"),
                        "VirtualServiceUnreachableRule");
    assert_string_equal(res_code_name("IST0131"),
                        "VirtualServiceIneffectiveMatch");
    assert_string_equal(res_code_name("STR0005"), "UndeclaredHostPassthrough");
    assert_string_equal(res_code_name("STR0006"), "GatewayPortNotShared");
    assert_string_equal(res_code_name("STR0007"), "GatewayPortConflict");
    assert_string_equal(res_code_name("STR0008"), "UnknownKind");
}

/* msg_of() returns the message text of the first finding with code
 * under node (NULL: none), or "" when there is none; count in *n. */
static const char *msg_of(const char *text, const char *code,
                          const struct analysis_node *node, size_t *n,
                          char *out, size_t len)
{
    int nerr = 0;
    struct resource_set *set =
        resource_load_mem(text, strlen(text), "a.yaml", NULL, &nerr);
    struct analysis an;

    assert_non_null(set);
    assert_int_equal(nerr, 0);
    out[0] = '\0';
    *n = 0;
    analyze_node(set, RES_REGISTRY_ONLY, node, &an);
    for (size_t i = 0; i < an.msgs.n; i++) {
        const struct res_msg *m = &an.msgs.v[i];
        if (strcmp(m->code, code) != 0)
            continue;
        if ((*n)++ == 0)
            snprintf(out, len, "%s", m->message);
    }
    analysis_dispose(&an);
    resource_set_free(set);
    return out;
}

#define SE(name, host, ports)                                                  \
    HDR("ServiceEntry", name)                                                  \
    "spec: {hosts: [" host "], resolution: DNS, ports: [" ports "]}\n"
#define P(n, proto) "{number: " #n ", name: p" #n ", protocol: " #proto "}"

static void test_ist0109_mesh_hosts(void **state)
{
    char m[1024];
    size_t n;
    static const char two[] = HDR(
        "VirtualService", "a") "spec: {hosts: [reviews], http: [{route: "
                               "[{destination: {host: reviews}}]}]}\n" HDR(
                                   "VirtualService",
                                   "b") "spec: {hosts: [reviews], gateways: "
                                        "[mesh], http: [{route: "
                                        "[{destination: {host: reviews}}]}]}\n";
    static const char gw[] = HDR(
        "VirtualService", "a") "spec: {hosts: [reviews], http: [{route: "
                               "[{destination: {host: reviews}}]}]}\n" HDR(
                                   "VirtualService",
                                   "b") "spec: {hosts: [reviews], gateways: "
                                        "[edge], http: [{route: "
                                        "[{destination: {host: reviews}}]}]}\n";

    (void)state;
    msg_of(two, "IST0109", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 2);
    assert_string_equal(
        m, "The VirtualServices default/a,default/b associated with mesh "
           "gateway define the same host "
           "*/reviews.default.svc.cluster.local which can lead to undefined "
           "behavior. This can be fixed by merging the conflicting "
           "VirtualServices into a single resource.");
    msg_of(gw, "IST0109", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    /* About the sidecars only: inert, a load is not refused for it. */
    {
        int nerr = 0;
        struct resource_set *set =
            resource_load_mem(two, strlen(two), "a.yaml", NULL, &nerr);
        struct analysis an;
        analyze(set, RES_REGISTRY_ONLY, &an);
        for (size_t i = 0; i < an.msgs.n; i++)
            if (strcmp(an.msgs.v[i].code, "IST0109") == 0)
                assert_true(an.msgs.v[i].inert);
        analysis_dispose(&an);
        resource_set_free(set);
    }
}

static void test_ist0112_port_required(void **state)
{
    char m[1024];
    size_t n;
#define VS_TO(port)                                                            \
    HDR("VirtualService", "v")                                                 \
    "spec: {hosts: [x.example.com], gateways: [edge], http: [{route: "         \
    "[{destination: {host: api.example.org" port "}}]}]}\n"
#define EDGE                                                                   \
    HDR("Gateway", "edge")                                                     \
    "spec: {servers: [{port: {number: 8080, name: http, protocol: HTTP}, "     \
    "hosts: ['*']}]}\n"
    static const char two_ports[] =
        EDGE SE("api", "api.example.org", P(80, HTTP) ", " P(443, HTTPS))
            VS_TO("");
    static const char with_port[] =
        EDGE SE("api", "api.example.org", P(80, HTTP) ", " P(443, HTTPS))
            VS_TO(", port: {number: 80}");
    static const char bad_port[] =
        EDGE SE("api", "api.example.org", P(80, HTTP) ", " P(443, HTTPS))
            VS_TO(", port: {number: 81}");
    static const char one_port[] =
        EDGE SE("api", "api.example.org", P(80, HTTP)) VS_TO("");

    (void)state;
    msg_of(two_ports, "IST0112", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "This VirtualService routes to a service "
                           "\"api.example.org\" that exposes multiple ports "
                           "[80 443]. Specifying a port in the destination is "
                           "required to disambiguate.");
    msg_of(with_port, "IST0112", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(one_port, "IST0112", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(bad_port, "IST0101", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "Referenced host:port not found: "
                           "\"api.example.org:81\"");
#undef VS_TO
}

/* A service known only from WorkloadEntries has the port names they
 * list: one is used without a port, several are IST0112, none is
 * STR0003 (there is no port to send to; strait used to guess 80). */
static void test_ist0112_workload_entry_ports(void **state)
{
    char m[1024];
    size_t n;
#define WE(name, ports)                                                        \
    HDR("WorkloadEntry", name)                                                 \
    "spec: {address: 10.0.0.9, " ports "labels: {app: vm}}\n"
#define VS_VM(port)                                                            \
    HDR("VirtualService", "v")                                                 \
    "spec: {hosts: [x.example.com], gateways: [edge], http: [{route: "         \
    "[{destination: {host: vm" port "}}]}]}\n"
    static const char one[] = EDGE WE("a", "ports: {http: 8001}, ")
        WE("b", "ports: {http: 8002}, ") VS_VM("");
    static const char two[] = EDGE WE("a", "ports: {http: 8001, grpc: 9001}, ")
        WE("b", "ports: {http: 8002}, ") VS_VM("");
    static const char two_with_port[] =
        EDGE WE("a", "ports: {http: 8001, grpc: 9001}, ")
            VS_VM(", port: {number: 8001}");
    static const char none[] = EDGE WE("a", "") VS_VM("");
    static const char none_with_port[] =
        EDGE WE("a", "") VS_VM(", port: {number: 8001}");

    (void)state;
    msg_of(one, "IST0112", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(one, "STR0003", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(two, "IST0112", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "This VirtualService routes to a service \"vm\" "
                           "that exposes multiple ports [http grpc]. "
                           "Specifying a port in the destination is required "
                           "to disambiguate.");
    msg_of(two_with_port, "IST0112", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(none, "STR0003", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_non_null(strstr(m, "none of its WorkloadEntries lists one"));
    msg_of(none_with_port, "STR0003", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    assert_string_equal(res_code_name("STR0003"), "DestinationPortUnknown");
#undef WE
#undef VS_VM
}

static void test_ist0127_node_policies(void **state)
{
    char m[1024];
    size_t n;
    struct conf_strpair pairs[] = {{"app", "edge"}, {"istio", "ingress"}};
    struct conf_strmap labels = {pairs, 2};
    struct analysis_node node = {"n1", "default", &labels, "istio-system",
                                 NULL, NULL,      NULL,    NULL,
                                 NULL, NULL,      NULL,    0};
    static const char set[] =
        "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n"
        "metadata: {name: other, namespace: default}\n"
        "spec: {selector: {matchLabels: {app: other, tier: x}}, action: "
        "DENY, rules: [{}]}\n"
        "---\napiVersion: security.istio.io/v1\nkind: RequestAuthentication\n"
        "metadata: {name: elsewhere, namespace: shop}\nspec: {}\n"
        "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n"
        "metadata: {name: here, namespace: default}\n"
        "spec: {selector: {matchLabels: {app: edge}}, action: DENY, rules: "
        "[{}]}\n"
        "---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\n"
        "metadata: {name: mesh, namespace: istio-system}\n"
        "spec: {mtls: {mode: STRICT}}\n";

    (void)state;
    msg_of(set, "IST0127", &node, &n, m, sizeof(m));
    assert_int_equal(n, 2);
    assert_string_equal(m, "No matching workloads for this resource with the "
                           "following labels: app=other,tier=x");
    /* Without the node, nothing is known of what it selects. */
    msg_of(set, "IST0127", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
}

static void test_ist0128_ist0129_no_ca(void **state)
{
    char m[1024];
    size_t n;
    static const char dr[] = SE("api", "api.example.org", P(443, TLS))
        HDR("DestinationRule",
            "api") "spec: {host: api.example.org, trafficPolicy: {tls: "
                   "{mode: SIMPLE}, portLevelSettings: [{port: {number: "
                   "443}, tls: {mode: SIMPLE}}]}}\n";
    static const char with_ca[] = SE("api", "api.example.org", P(443, TLS))
        HDR("DestinationRule",
            "api") "spec: {host: api.example.org, trafficPolicy: {tls: "
                   "{mode: SIMPLE, caCertificates: /etc/ca.pem}}}\n";

    (void)state;
    msg_of(dr, "IST0128", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "DestinationRule default/api in namespace default "
                           "has TLS mode set to SIMPLE but no caCertificates "
                           "are set to validate server identity for host: "
                           "api.example.org");
    msg_of(dr, "IST0129", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "DestinationRule default/api in namespace default "
                           "has TLS mode set to SIMPLE but no caCertificates "
                           "are set to validate server identity for host: "
                           "api.example.org at port number:443");
    msg_of(with_ca, "IST0128", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
}

static void test_ist0138_duplicate_certificate(void **state)
{
    char m[1024];
    size_t n;
#define TLSGW(name, cred)                                                      \
    HDR("Gateway", name)                                                       \
    "spec: {selector: {istio: ingressgateway}, servers: [{port: {number: "     \
    "443, name: https, protocol: HTTPS}, hosts: [" name ".example.com], "      \
    "tls: {mode: SIMPLE, credentialName: " cred "}}]}\n"

    (void)state;
    msg_of(TLSGW("a", "shared") TLSGW("b", "shared"), "IST0138", NULL, &n, m,
           sizeof(m));
    assert_int_equal(n, 2);
    assert_string_equal(m, "Duplicate certificate in multiple gateways "
                           "[default/a default/b] may cause 404s if clients "
                           "re-use HTTP2 connections.");
    msg_of(TLSGW("a", "one") TLSGW("b", "two"), "IST0138", NULL, &n, m,
           sizeof(m));
    assert_int_equal(n, 0);
#undef TLSGW
}

static void test_ist0140_subset_not_at_ingress(void **state)
{
    char m[1024];
    size_t n;
    static const char text[] =
        BACKENDS HDR("VirtualService",
                     "ingress") "spec: {hosts: ['*'], gateways: [edge], "
                                "http: [{route: [{destination: {host: "
                                "reviews}}]}]}\n" HDR("VirtualService",
                                                      "reviews") "spec: "
                                                                 "{hosts: "
                                                                 "[reviews], "
                                                                 "http: "
                                                                 "[{route: "
                                                                 "[{destinati"
                                                                 "on: {host: "
                                                                 "reviews, "
                                                                 "subset: "
                                                                 "v1}}]}]}\n";
    static const char quiet[] = BACKENDS HDR(
        "VirtualService", "ingress") "spec: {hosts: ['*'], gateways: [edge], "
                                     "http: [{route: [{destination: {host: "
                                     "reviews, subset: v2}}]}]}\n";

    (void)state;
    msg_of(text, "IST0140", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "Subset in virtual service default/reviews has no "
                           "effect on ingress gateway default/ingress "
                           "requests");
    msg_of(quiet, "IST0140", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
}

static void test_ist0149_jwt_claim_route(void **state)
{
    char m[2048];
    size_t n;
    struct conf_strpair pairs[] = {{"istio", "ingressgateway"}};
    struct conf_strmap labels = {pairs, 1};
    struct analysis_node node = {"node-1", "default", &labels, "istio-system",
                                 NULL,     NULL,      NULL,    NULL,
                                 NULL,     NULL,      NULL,    0};
#define CLAIM_VS                                                               \
    GATEWAY HDR(                                                               \
        "VirtualService",                                                      \
        "v") "spec: {hosts: [a.example.com], gateways: [gw], http: [{match: "  \
             "[{headers: {'@request.auth.claims.groups': {exact: group1}}}], " \
             "route: [{destination: {host: api.example.com, port: {number: "   \
             "443}}}]}]}\n" HDR("ServiceEntry",                                \
                                "api") "spec: {hosts: [api.example.com], "     \
                                       "resolution: DNS, ports: [{number: "    \
                                       "443, name: tls}]}\n"
    static const char with_ra[] =
        CLAIM_VS "---\napiVersion: security.istio.io/v1\n"
                 "kind: RequestAuthentication\nmetadata: {name: jwt, "
                 "namespace: istio-system}\n"
                 "spec: {jwtRules: [{issuer: i, jwksUri: "
                 "'https://idp.example.com/jwks'}]}\n";

    (void)state;
    msg_of(CLAIM_VS, "IST0149", &node, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(
        m, "The virtual service uses the JWT claim based routing (key: "
           "@request.auth.claims.groups) but found no request authentication "
           "for the gateway (default/gw) pod (node-1). The request "
           "authentication must first be applied for the gateway pods to "
           "validate the JWT token and make the claims available for "
           "routing.");
    msg_of(with_ra, "IST0149", &node, &n, m, sizeof(m));
    assert_int_equal(n, 0);
#undef CLAIM_VS
}

static void test_ist0165_internal_gateway(void **state)
{
    char m[1024];
    size_t n;
    static const char text[] =
        HDR("VirtualService",
            "v") "spec: {hosts: [a.example.com], gateways: "
                 "[default/gw-istio-autogenerated-k8s-gateway~istio-"
                 "autogenerated-k8s-gateway~http], http: [{route: "
                 "[{destination: {host: a.example.com}}]}]}\n";

    (void)state;
    msg_of(text, "IST0165", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(
        m, "Gateway reference in VirtualService default/v is to an "
           "implementation-generated internal Gateway: "
           "default/gw-istio-autogenerated-k8s-gateway~istio-autogenerated-"
           "k8s-gateway~http.");
    msg_of(BACKENDS HDR("VirtualService",
                        "v") "spec: {hosts: [reviews], gateways: [edge], "
                             "http: [{route: [{destination: {host: "
                             "reviews}}]}]}\n",
           "IST0165", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
}

static void test_ist0177_conflicting_protocols(void **state)
{
    char m[1024];
    size_t n;

    (void)state;
    msg_of(SE("a", "db.example.org", P(5432, TCP))
               SE("b", "db.example.org", P(5432, HTTP)),
           "IST0177", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 2);
    assert_string_equal(m, "Multiple ServiceEntries (default/a, default/b) "
                           "define the same host \"db.example.org\" and port "
                           "5432 with conflicting protocols (HTTP, TCP).");
    msg_of(SE("a", "db.example.org", P(5432, TCP))
               SE("b", "db.example.org", P(5432, TCP)),
           "IST0177", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
}

/* IST0134, Istio's text and level: one per port whose protocol is TCP,
 * unset or "", on a ServiceEntry without addresses; whatever the
 * resolution. */
static void test_ist0134_addresses_required(void **state)
{
    char m[1024], line[1200];
    size_t n;
    static const char tcp[] =
        HDR("ServiceEntry", "db") "spec:\n  hosts: [db.example.org]\n"
                                  "  resolution: DNS\n  ports:\n"
                                  "  - {number: 5432, name: pg}\n"
                                  "  - {number: 5433, name: pg2, protocol: "
                                  "\"\"}\n"
                                  "  - {number: 80, name: web, protocol: "
                                  "HTTP}\n"
                                  "  - {number: 5434, name: pg3, protocol: "
                                  "TCP}\n";

    (void)state;
    msg_of(tcp, "IST0134", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 3);
    assert_string_equal(m, "ServiceEntry addresses are required for this "
                           "protocol.");
    first(tcp, "IST0134", line, sizeof(line));
    assert_string_equal(line, "a.yaml:10:5 ServiceEntry default/db "
                              "spec.ports[0]: ServiceEntry addresses are "
                              "required for this protocol. (warning)");
    assert_string_equal(res_code_name("IST0134"),
                        "ServiceEntryAddressesRequired");
    /* With addresses, or with no TCP port: nothing. */
    msg_of(HDR("ServiceEntry",
               "db") "spec: {hosts: [db.example.org], addresses: "
                     "[240.0.0.1], resolution: NONE, ports: [{number: 5432, "
                     "name: pg, protocol: TCP}]}\n",
           "IST0134", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(SE("a", "api.example.org", P(443, TLS)), "IST0134", NULL, &n, m,
           sizeof(m));
    assert_int_equal(n, 0);
    msg_of(HDR("ServiceEntry",
               "s") "spec: {hosts: [db.example.org], resolution: NONE, "
                    "ports: [{number: 5432, name: pg, protocol: TCP}]}\n",
           "IST0134", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
}

static void test_ist0002_deprecated(void **state)
{
    char m[1024];
    size_t n;

    (void)state;
    msg_of(BACKENDS HDR("VirtualService",
                        "v") "spec: {hosts: [reviews], gateways: [edge], "
                             "http: [{fault: {delay: {fixedDelay: 1s, "
                             "percent: 10}}, route: [{destination: {host: "
                             "reviews}}]}]}\n",
           "IST0002", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "Deprecated: HTTPRoute.fault.delay.percent is "
                           "deprecated; use HTTPRoute.fault.delay.percentage");
    msg_of(BACKENDS HDR("VirtualService",
                        "v") "spec: {hosts: [reviews], gateways: [edge], "
                             "http: [{fault: {delay: {fixedDelay: 1s, "
                             "percentage: {value: 10}}}, route: "
                             "[{destination: {host: reviews}}]}]}\n",
           "IST0002", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
}

/* IST0130/IST0131 on tcp and tls rules, and uri prefixes an earlier
 * prefix covers, with Istio's texts. */
static void test_ist0130_0131_l4_and_prefix(void **state)
{
    char m[1024];
    size_t n;
    static const char tcp[] =
        BACKENDS HDR("VirtualService",
                     "v") "spec: {hosts: [reviews], gateways: [edge], tcp: "
                          "[{match: [{port: 5432}], route: [{destination: "
                          "{host: reviews}}]}, {match: [{port: 5432}], route: "
                          "[{destination: {host: reviews}}]}]}\n";
    static const char prefix[] =
        BACKENDS HDR("VirtualService",
                     "v") "spec: {hosts: [reviews], gateways: [edge], http: "
                          "[{match: [{uri: {prefix: /debug}}], route: "
                          "[{destination: {host: reviews}}]}, {match: [{uri: "
                          "{prefix: /debugs}}], route: [{destination: {host: "
                          "reviews}}]}]}\n";
    static const char prefix_ok[] =
        BACKENDS HDR("VirtualService",
                     "v") "spec: {hosts: [reviews], gateways: [edge], http: "
                          "[{match: [{uri: {prefix: /debugs}}], route: "
                          "[{destination: {host: reviews}}]}, {match: [{uri: "
                          "{prefix: /debug}}], route: [{destination: {host: "
                          "reviews}}]}]}\n";

    (void)state;
    msg_of(tcp, "IST0131", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "VirtualService rule #1 match #0 is not used "
                           "(duplicate/overlapping match in rule #0).");
    msg_of(tcp, "IST0130", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "VirtualService rule #1 not used (all matches used "
                           "by prior rules).");
    msg_of(prefix, "IST0131", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "VirtualService rule #1 match #0 of prefix /debugs "
                           "is not used (duplicate/overlapping match in rule "
                           "#0 of prefix /debug on #0).");
    msg_of(prefix_ok, "IST0131", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
}

/* Istio's levels: IST0130 VirtualServiceUnreachableRule is a Warning,
 * IST0131 VirtualServiceIneffectiveMatch an Info, on http, tcp and tls
 * rules alike. */
static void test_ist0130_0131_levels(void **state)
{
    char line[1024];
    static const char http[] =
        BACKENDS HDR("VirtualService",
                     "v") "spec: {hosts: [reviews], gateways: [edge], http: "
                          "[{match: [{uri: {exact: /a}}], route: "
                          "[{destination: {host: reviews}}]}, {match: [{uri: "
                          "{exact: /a}}], route: [{destination: {host: "
                          "reviews}}]}]}\n";
    static const char tcp[] =
        BACKENDS HDR("VirtualService",
                     "v") "spec: {hosts: [reviews], gateways: [edge], tcp: "
                          "[{match: [{port: 5432}], route: [{destination: "
                          "{host: reviews}}]}, {match: [{port: 5432}], route: "
                          "[{destination: {host: reviews}}]}]}\n";

    (void)state;
    assert_non_null(strstr(first(http, "IST0130", line, sizeof(line)),
                           "not used (all matches used by prior rules). "
                           "(warning)"));
    assert_non_null(strstr(first(http, "IST0131", line, sizeof(line)),
                           "(duplicate/overlapping match in rule #0). "
                           "(info)"));
    assert_non_null(
        strstr(first(tcp, "IST0130", line, sizeof(line)), "(warning)"));
    assert_non_null(
        strstr(first(tcp, "IST0131", line, sizeof(line)), "(info)"));
}

/* A tls rule whose match repeats an earlier one (same port and SNI
 * hosts): IST0131 on the match, IST0130 on the rule, as Istio's
 * analyzeUnreachableTLSRules says it; other SNI hosts are another match. */
static void test_ist0130_0131_tls_duplicates(void **state)
{
    char m[1024], line[1024];
    size_t n;
#define TLS_RULE(sni)                                                          \
    "{match: [{port: 443, sniHosts: [" sni "]}], route: [{destination: "       \
    "{host: api.example.com, port: {number: 443}}}]}"
    static const char dup[] = BACKENDS HDR(
        "VirtualService",
        "v") "spec: {hosts: [api.example.com, db.example.com], "
             "gateways: [edge], tls: [" TLS_RULE(
                 "api.example.com") ", " TLS_RULE("api.example.com") "]}\n";
    static const char other[] = BACKENDS HDR(
        "VirtualService",
        "v") "spec: {hosts: [api.example.com, db.example.com], "
             "gateways: [edge], tls: [" TLS_RULE(
                 "api.example.com") ", " TLS_RULE("db.example.com") "]}\n";

    (void)state;
    msg_of(dup, "IST0131", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "VirtualService rule #1 match #0 is not used "
                           "(duplicate/overlapping match in rule #0).");
    assert_non_null(strstr(first(dup, "IST0131", line, sizeof(line)),
                           "VirtualService default/v spec.tls[1].match[0]: "));
    assert_non_null(strstr(line, "(info)"));
    msg_of(dup, "IST0130", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "VirtualService rule #1 not used (all matches used "
                           "by prior rules).");
    assert_non_null(strstr(first(dup, "IST0130", line, sizeof(line)),
                           "VirtualService default/v spec.tls[1]: "));
    assert_non_null(strstr(line, "(warning)"));
    msg_of(other, "IST0131", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(other, "IST0130", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
#undef TLS_RULE
}

/* IST0132 once per Gateway, with every host, as Istio words it. */
static void test_ist0132_per_gateway(void **state)
{
    char m[1024];
    size_t n;

    (void)state;
    msg_of(GATEWAY HDR("VirtualService",
                       "v") "spec: {hosts: [a.example.org, b.example.org], "
                            "gateways: [gw], http: [{route: [{destination: "
                            "{host: a.example.org}}]}]}\n",
           "IST0132", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "one or more host [a.example.org b.example.org] "
                           "defined in VirtualService default/v not found in "
                           "Gateway default/gw.");
}

/* Writes DIR/NAME/tls.crt and tls.key: a self-signed EC certificate
 * valid from now+from_s to now+to_s, with its key, or another key when
 * mismatch is set. */
static void write_credential(const char *dir, const char *name, long from_s,
                             long to_s, int mismatch)
{
    char path[512];
    EVP_PKEY *k = EVP_PKEY_new(), *other = EVP_PKEY_new();
    EC_KEY *ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
    EC_KEY *ec2 = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
    X509 *x = X509_new();
    X509_NAME *nm = X509_NAME_new();
    FILE *f;

    assert_true(EC_KEY_generate_key(ec) && EC_KEY_generate_key(ec2));
    EVP_PKEY_assign_EC_KEY(k, ec);
    EVP_PKEY_assign_EC_KEY(other, ec2);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC,
                               (const unsigned char *)name, -1, -1, 0);
    X509_set_subject_name(x, nm);
    X509_set_issuer_name(x, nm);
    X509_NAME_free(nm);
    X509_gmtime_adj(X509_getm_notBefore(x), from_s);
    X509_gmtime_adj(X509_getm_notAfter(x), to_s);
    X509_set_pubkey(x, k);
    assert_true(X509_sign(x, k, EVP_sha256()) > 0);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/%s/tls.crt", dir, name);
    assert_non_null(f = fopen(path, "w"));
    assert_true(PEM_write_X509(f, x));
    fclose(f);
    snprintf(path, sizeof(path), "%s/%s/tls.key", dir, name);
    assert_non_null(f = fopen(path, "w"));
    assert_true(PEM_write_PrivateKey(f, mismatch ? other : k, NULL, NULL, 0,
                                     NULL, NULL));
    fclose(f);
    X509_free(x);
    EVP_PKEY_free(k);
    EVP_PKEY_free(other);
}

static void test_ist0161_invalid_credential(void **state)
{
    char dir[] = "/tmp/strait-creds-XXXXXX", m[1024], cmd[600];
    size_t n;
    struct conf_strmap labels = {NULL, 0};
    struct analysis_node node = {"n1", "istio-system", &labels, "istio-system",
                                 dir,  NULL,           NULL,    NULL,
                                 NULL, NULL,           NULL,    0};
#define CRED_GW(cred)                                                          \
    HDR("Gateway", "gw")                                                       \
    "spec: {servers: [{port: {number: 443, name: https, protocol: HTTPS}, "    \
    "hosts: ['*'], tls: {mode: SIMPLE, credentialName: " cred "}}]}\n"

    (void)state;
    assert_non_null(mkdtemp(dir));
    write_credential(dir, "good", -3600, 3600, 0);
    write_credential(dir, "expired", -7200, -3600, 0);
    write_credential(dir, "mismatched", -3600, 3600, 1);
    msg_of(CRED_GW("good"), "IST0161", &node, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(CRED_GW("good"), "IST0101", &node, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(CRED_GW("expired"), "IST0161", &node, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "The credential referenced by the Gateway gw in "
                           "namespace istio-system is invalid, which can "
                           "cause the traffic not to work as expected.");
    msg_of(CRED_GW("mismatched"), "IST0161", &node, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    msg_of(CRED_GW("absent"), "IST0101", &node, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "Referenced credentialName not found: \"absent\"");
    /* Without the node's credentials directory, nothing is checked. */
    msg_of(CRED_GW("absent"), "IST0101", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
#undef CRED_GW
}

/* secret_yaml() appends to b a Secret NAME of istio-system (or ns)
 * holding DIR/FILE's tls.crt and tls.key as stringData. */
static void secret_yaml(struct buf *b, const char *dir, const char *file,
                        const char *name, const char *ns)
{
    static const char *const keys[2] = {"tls.crt", "tls.key"};

    buf_printf(b,
               "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\n"
               "metadata: {name: %s, namespace: %s}\nstringData:\n",
               name, ns);
    for (int k = 0; k < 2; k++) {
        char path[600], line[1024];
        FILE *f;
        snprintf(path, sizeof(path), "%s/%s/%s", dir, file, keys[k]);
        assert_non_null(f = fopen(path, "r"));
        buf_printf(b, "  %s: |\n", keys[k]);
        while (fgets(line, sizeof(line), f) != NULL)
            buf_printf(b, "    %s", line);
        fclose(f);
    }
    buf_puts(b, "---\n");
}

/* A Secret of the gateway's namespace (the node's) is the credential:
 * found before the directory, checked as a file would be; the same name
 * in another namespace is no credential here. */
static void test_ist0161_secret_credential(void **state)
{
    char dir[] = "/tmp/strait-creds-XXXXXX", m[1024], cmd[600];
    size_t n;
    struct conf_strmap labels = {NULL, 0};
    struct analysis_node node = {"n1", "istio-system", &labels, "istio-system",
                                 NULL, NULL,           NULL,    NULL,
                                 NULL, NULL,           NULL,    0};
    struct buf b;
#define GW(cred)                                                               \
    HDR("Gateway", "gw")                                                       \
    "spec: {servers: [{port: {number: 443, name: https, protocol: HTTPS}, "    \
    "hosts: ['*'], tls: {mode: SIMPLE, credentialName: " cred "}}]}\n"

    (void)state;
    assert_non_null(mkdtemp(dir));
    write_credential(dir, "good", -3600, 3600, 0);
    write_credential(dir, "expired", -7200, -3600, 0);
    buf_init(&b, 1024 * 1024);
    secret_yaml(&b, dir, "good", "good", "istio-system");
    secret_yaml(&b, dir, "expired", "expired", "istio-system");
    secret_yaml(&b, dir, "good", "elsewhere", "default");
    buf_puts(&b, GW("good") "---\n");
    msg_of(buf_cstr(&b), "IST0161", &node, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(buf_cstr(&b), "IST0101", &node, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    buf_dispose(&b);
    buf_init(&b, 1024 * 1024);
    secret_yaml(&b, dir, "expired", "expired", "istio-system");
    buf_puts(&b, GW("expired"));
    msg_of(buf_cstr(&b), "IST0161", &node, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "The credential referenced by the Gateway gw in "
                           "namespace istio-system is invalid, which can "
                           "cause the traffic not to work as expected.");
    /* The Secret of another namespace does not count; with a directory
     * known, the name is looked for there next. */
    buf_dispose(&b);
    buf_init(&b, 1024 * 1024);
    secret_yaml(&b, dir, "good", "elsewhere", "default");
    buf_puts(&b, GW("elsewhere"));
    node.credentials_dir = dir;
    msg_of(buf_cstr(&b), "IST0101", &node, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m,
                        "Referenced credentialName not found: \"elsewhere\"");
    /* Nor without a directory: nowhere to read it from. */
    node.credentials_dir = NULL;
    msg_of(buf_cstr(&b), "IST0101", &node, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    buf_dispose(&b);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
#undef GW
}

/* IST0162 with the node as the gateway's workload: a server port that no
 * Service selecting the node exposes (by targetPort, else port), TCP
 * ports only; nothing without such a Service. */
static void test_ist0162_gateway_port_not_on_service(void **state)
{
    char m[1024];
    size_t n;
    struct conf_strpair lp = {"istio", "ingressgateway"};
    struct conf_strmap labels = {&lp, 1};
    struct analysis_node node = {"n1", "istio-system", &labels, "istio-system",
                                 NULL, NULL,           NULL,    NULL,
                                 NULL, NULL,           NULL,    0};
#define GWS                                                                    \
    "apiVersion: networking.istio.io/v1\nkind: Gateway\n"                      \
    "metadata: {name: httpbin-gateway, namespace: default}\n"                  \
    "spec:\n  selector: {istio: ingressgateway}\n  servers:\n"                 \
    "  - port: {number: 8080, name: http, protocol: HTTP}\n"                   \
    "    hosts: ['*']\n"                                                       \
    "  - port: {number: 80, name: http2, protocol: HTTP}\n"                    \
    "    hosts: ['*']\n"                                                       \
    "  - port: {number: 9000, name: udp, protocol: HTTP}\n"                    \
    "    hosts: ['*']\n"
#define SVC(ns, sel, ports)                                                    \
    "apiVersion: v1\nkind: Service\n"                                          \
    "metadata: {name: istio-ingressgateway, namespace: " ns "}\n"              \
    "spec: {type: LoadBalancer, selector: " sel ", ports: " ports "}\n---\n"

    (void)state;
    msg_of(SVC("istio-system", "{istio: ingressgateway}",
               "[{name: http2, port: 80, targetPort: 8080}, "
               "{name: web, port: 9000, protocol: UDP}]") GWS,
           "IST0162", &node, &n, m, sizeof(m));
    /* 80 is the Service's port: translated to 8080, as istiod does, and
     * said as an Info; 9000 is UDP. */
    assert_int_equal(n, 1);
    assert_string_equal(
        m, "The gateway is listening on a target port (port 9000) that is not "
           "defined in the Service associated with its workload instances "
           "(Pod selector istio=ingressgateway). If you need to access the "
           "gateway port through the gateway Service, it will not be "
           "available.");
    msg_of(SVC("istio-system", "{istio: ingressgateway}",
               "[{name: http2, port: 80, targetPort: 8080}, "
               "{name: web, port: 9000, protocol: UDP}]") GWS,
           "STR0012", &node, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "Gateway server port 80 listens on 8080: the "
                           "targetPort of port 80 of the gateway's Service "
                           "istio-system/istio-ingressgateway (as istiod "
                           "translates it).");
    /* A named targetPort counts by the Service port. */
    msg_of(SVC("istio-system", "{istio: ingressgateway}",
               "[{name: a, port: 8080, targetPort: http}, {name: b, port: 80}, "
               "{name: c, port: 9000}]") GWS,
           "IST0162", &node, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    /* No Service of the node's namespace selecting it: nothing to say. */
    msg_of(SVC("default", "{istio: ingressgateway}", "[{port: 1}]") GWS,
           "IST0162", &node, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(SVC("istio-system", "{app: other}", "[{port: 1}]") GWS, "IST0162",
           &node, &n, m, sizeof(m));
    assert_int_equal(n, 0);
    msg_of(SVC("istio-system", "{istio: ingressgateway}", "[{port: 1}]") GWS,
           "IST0162", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
#undef SVC
#undef GWS
}

static void test_ist0171_negative_condition(void **state)
{
    char m[1024];
    size_t n;
    static const char bad[] =
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n"
        "metadata: {name: p, namespace: istio-system}\n"
        "spec: {action: DENY, rules: [{}]}\n"
        "status:\n  conditions:\n  - type: WaypointAccepted\n"
        "    status: \"False\"\n    reason: Invalid\n"
        "    message: not bound\n";
    static const char good[] =
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n"
        "metadata: {name: p, namespace: istio-system}\n"
        "spec: {action: DENY, rules: [{}]}\n"
        "status:\n  conditions:\n  - type: WaypointAccepted\n"
        "    status: \"True\"\n    reason: Accepted\n";

    (void)state;
    msg_of(bad, "IST0171", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 1);
    assert_string_equal(m, "A condition with a negative status is present: "
                           "type=WaypointAccepted, reason=Invalid, "
                           "message=not bound.");
    msg_of(good, "IST0171", NULL, &n, m, sizeof(m));
    assert_int_equal(n, 0);
}

/* The codes reference (docs/reference/analyzer-codes.md) is the code
 * table itself: each code with the name res_code_name() gives it. */
static void test_codes_reference_is_the_table(void **state)
{
    struct buf b;
    size_t n = 0;
    int ist0101 = 0, str0004 = 0;

    (void)state;
    buf_init(&b, 1 << 16);
    res_codes_reference(&b);
    for (char *line = (char *)buf_cstr(&b), *next; *line; line = next) {
        char *tab = strchr(line, '\t');
        next = strchr(line, '\n');
        *tab = '\0';
        *next++ = '\0';
        assert_string_equal(res_code_name(line), tab + 1);
        ist0101 += strcmp(line, "IST0101") == 0;
        str0004 += strcmp(line, "STR0004") == 0;
        n++;
    }
    assert_int_equal(ist0101, 1);
    assert_int_equal(str0004, 1);
    assert_true(n >= 30);
    buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codes_reference_is_the_table),
        cmocka_unit_test(test_good_set_is_clean),
        cmocka_unit_test(test_ist0101_gateway),
        cmocka_unit_test(test_ist0101_l4_rules),
        cmocka_unit_test(test_ist0101_host_and_subset),
        cmocka_unit_test(test_ist0101_by_outbound_policy),
        cmocka_unit_test(test_ist0145_conflicting_gateways),
        cmocka_unit_test(test_port_sharing_codes),
        cmocka_unit_test(test_ist0132_host_not_in_gateway),
        cmocka_unit_test(test_ist0130_unreachable_rule),
        cmocka_unit_test(test_ist0131_ineffective_match),
        cmocka_unit_test(test_ist0173_subset_selects_nothing),
        cmocka_unit_test(test_ist0174_dr_host_unknown),
        cmocka_unit_test(test_weights_sum_to_zero),
        cmocka_unit_test(test_resource_check),
        cmocka_unit_test(test_mesh_rules_are_not_checked),
        cmocka_unit_test(test_schema_error_does_not_stop_analysis),
        cmocka_unit_test(test_levels_and_names),
        cmocka_unit_test(test_ist0109_mesh_hosts),
        cmocka_unit_test(test_ist0112_port_required),
        cmocka_unit_test(test_ist0112_workload_entry_ports),
        cmocka_unit_test(test_ist0127_node_policies),
        cmocka_unit_test(test_ist0128_ist0129_no_ca),
        cmocka_unit_test(test_ist0138_duplicate_certificate),
        cmocka_unit_test(test_ist0140_subset_not_at_ingress),
        cmocka_unit_test(test_ist0149_jwt_claim_route),
        cmocka_unit_test(test_ist0165_internal_gateway),
        cmocka_unit_test(test_ist0177_conflicting_protocols),
        cmocka_unit_test(test_ist0134_addresses_required),
        cmocka_unit_test(test_ist0002_deprecated),
        cmocka_unit_test(test_ist0130_0131_l4_and_prefix),
        cmocka_unit_test(test_ist0130_0131_levels),
        cmocka_unit_test(test_ist0130_0131_tls_duplicates),
        cmocka_unit_test(test_ist0132_per_gateway),
        cmocka_unit_test(test_ist0161_invalid_credential),
        cmocka_unit_test(test_ist0161_secret_credential),
        cmocka_unit_test(test_ist0162_gateway_port_not_on_service),
        cmocka_unit_test(test_ist0171_negative_condition),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
