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
    "spec: {address: 10.0.0.1, labels: {app: reviews, version: v1}}\n" HDR(    \
        "WorkloadEntry",                                                       \
        "reviews-v2") "spec: {address: 10.0.0.2, labels: {app: reviews, "      \
                      "version: v2}}\n" HDR("ServiceEntry",                    \
                                            "api") "spec: {hosts: "            \
                                                   "[api.example.com], "       \
                                                   "ports: [{number: 443, "    \
                                                   "name: tls}], "             \
                                                   "resolution: DNS}\n" HDR(   \
                                                       "DestinationRule",      \
                                                       "reviews") "spec: "     \
                                                                  "{host: "    \
                                                                  "reviews, "  \
                                                                  "subsets: "  \
                                                                  "[{name: "   \
                                                                  "v1, "       \
                                                                  "labels: "   \
                                                                  "{version: " \
                                                                  "v1}}, "     \
                                                                  "{name: "    \
                                                                  "v2, "       \
                                                                  "labels: "   \
                                                                  "{version: " \
                                                                  "v2}}]}\n"

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
                     m->level == RES_ERROR ? "error" : "warning");
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
                        "a.yaml:26:1 VirtualService default/v "
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
             "edge]}]\n"
             "    route: [{destination: {host: api.example.com}}]\n"
             "  tcp:\n"
             "  - match: [{port: 5432, gateways: [default/gw]}]\n"
             "    route: [{destination: {host: db.example.com}}]\n";

    (void)state;
    assert_int_equal(run(bad, "IST0101"), 2);
    assert_string_equal(first(bad, "IST0101", line, sizeof(line)),
                        "a.yaml:44:13 VirtualService default/t "
                        "spec.tls[0].match[0].gateways[1]: Referenced gateway "
                        "not found: \"edge\" (error)");
}

static void test_ist0101_host_and_subset(void **state)
{
    char line[512];
    static const char bad[] =
        BACKENDS HDR("VirtualService",
                     "v") "spec:\n  hosts: [reviews]\n"
                          "  http:\n"
                          "  - route:\n"
                          "    - destination: {host: ratings}\n"
                          "    - destination: {host: reviews, subset: v3}\n"
                          "      weight: 1\n";

    (void)state;
    assert_int_equal(run(bad, "IST0101"), 2);
    assert_string_equal(first(bad, "IST0101", line, sizeof(line)),
                        "a.yaml:34:20 VirtualService default/v "
                        "spec.http[0].route[0].destination.host: Referenced "
                        "host not found: \"ratings\" (outboundTrafficPolicy "
                        "is REGISTRY_ONLY: declare the host in a ServiceEntry, "
                        "or set outboundTrafficPolicy.mode ALLOW_ANY in the "
                        "bootstrap to pass it through) (error)");
    assert_int_equal(
        run(BACKENDS HDR("VirtualService",
                         "v") "spec:\n  hosts: [reviews]\n"
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
                     "v") "spec:\n  hosts: [reviews]\n"
                          "  http:\n"
                          "  - route:\n"
                          "    - destination: {host: pay.example.net}\n"
                          "  tcp:\n"
                          "  - route:\n"
                          "    - destination: {host: db.example.net, port: "
                          "{number: 5432}}\n";
    /* A DestinationRule names a host without declaring it. */
    static const char dr_only[] = BACKENDS HDR(
        "DestinationRule", "d") "spec: {host: pay.example.net, trafficPolicy: "
                                "{tls: {mode: SIMPLE}}}\n" HDR(
                                    "VirtualService",
                                    "v") "spec:\n  hosts: [reviews]\n"
                                         "  http:\n  - route: [{destination: "
                                         "{host: pay.example.net}}]\n";
    static const char wildcard[] =
        BACKENDS HDR("VirtualService", "v") "spec:\n  hosts: [reviews]\n"
                                            "  http:\n  - route: "
                                            "[{destination: {host: "
                                            "\"*.example.net\"}}]\n";

    (void)state;
    /* REGISTRY_ONLY: errors that say why and what to do. */
    assert_int_equal(run_mode(text, "IST0101", RES_REGISTRY_ONLY), 2);
    assert_string_equal(
        first_mode(text, "IST0101", RES_REGISTRY_ONLY, line, sizeof(line)),
        "a.yaml:34:20 VirtualService default/v "
        "spec.http[0].route[0].destination.host: Referenced host not found: "
        "\"pay.example.net\" (outboundTrafficPolicy is REGISTRY_ONLY: "
        "declare the host in a ServiceEntry, or set "
        "outboundTrafficPolicy.mode ALLOW_ANY in the bootstrap to pass it "
        "through) (error)");
    assert_int_equal(run_mode(dr_only, "IST0101", RES_REGISTRY_ONLY), 1);
    /* ALLOW_ANY: warnings that say where it goes. */
    assert_int_equal(run_mode(text, "IST0101", RES_ALLOW_ANY), 2);
    assert_string_equal(
        first_mode(text, "IST0101", RES_ALLOW_ANY, line, sizeof(line)),
        "a.yaml:34:20 VirtualService default/v "
        "spec.http[0].route[0].destination.host: Referenced host not found: "
        "\"pay.example.net\" (outboundTrafficPolicy ALLOW_ANY: passed "
        "through to pay.example.net, resolved by DNS, on the port of the "
        "Gateway server it comes through) (warning)");
    {
        int nerr = 0;
        struct resource_set *set =
            resource_load_mem(text, strlen(text), "a.yaml", NULL, &nerr);
        struct analysis an;
        assert_int_equal(nerr, 0);
        assert_int_equal(analyze(set, RES_ALLOW_ANY, &an), 0);
        assert_int_equal(an.msgs.n, 2);
        assert_int_equal(an.msgs.v[1].level, RES_WARNING);
        assert_non_null(strstr(an.msgs.v[1].message, "on port 5432)"));
        analysis_dispose(&an);
        assert_int_equal(analyze(set, RES_REGISTRY_ONLY, &an), 2);
        analysis_dispose(&an);
        resource_set_free(set);
    }
    /* The DestinationRule applies to the passthrough: no IST0174 noise
     * without a hint, and the route is a warning. */
    assert_int_equal(run_mode(dr_only, "IST0101", RES_ALLOW_ANY), 1);
    assert_non_null(strstr(
        first_mode(dr_only, "IST0174", RES_ALLOW_ANY, line, sizeof(line)),
        "under outboundTrafficPolicy ALLOW_ANY it applies "
        "to routes passed through to that host"));
    /* A wildcard names no host to resolve: an error either way. */
    assert_non_null(strstr(
        first_mode(wildcard, "IST0101", RES_ALLOW_ANY, line, sizeof(line)),
        "a wildcard names none: declare it in a "
        "ServiceEntry) (error)"));
    /* Declared hosts are quiet in both modes. */
    assert_int_equal(
        run_mode(BACKENDS HDR("VirtualService", "v") "spec:\n  hosts: "
                                                     "[reviews]\n  http:\n"
                                                     "  - route: "
                                                     "[{destination: {host: "
                                                     "reviews}}]\n",
                 "IST0101", RES_ALLOW_ANY),
        0);
}

static void test_ist0145_conflicting_gateways(void **state)
{
    (void)state;
    assert_int_equal(
        run(GATEWAY HDR("Gateway",
                        "gw2") "spec:\n  selector: {istio: ingressgateway}\n"
                               "  servers:\n"
                               "  - port: {number: 80, name: http2, protocol: "
                               "HTTP}\n    hosts: [\"a.example.com\"]\n",
            "IST0145"),
        1);
    assert_int_equal(
        run(GATEWAY HDR(
                "Gateway",
                "gw2") "spec:\n  selector: {istio: ingressgateway}\n"
                       "  servers:\n"
                       "  - port: {number: 8080, name: http2, protocol: "
                       "HTTP}\n    hosts: [\"a.example.com\"]\n",
            "IST0145"),
        0);
}

/* Servers on one port: HTTPS and TLS share it by SNI (quiet); plaintext
 * HTTP and TCP cannot (a warning on the later one); plaintext HTTP beside
 * HTTPS refuses the Gateways (an error). */
static void test_ist0145_port_sharing(void **state)
{
#define SRV(port, name, proto, hosts, tls)                                     \
    "  - port: {number: " port ", name: " name ", protocol: " proto "}\n"      \
    "    hosts: [" hosts "]\n" tls
#define GW_SERVERS(name)                                                       \
    HDR("Gateway", name)                                                       \
    "spec:\n  selector: {istio: ingressgateway}\n"                             \
    "  servers:\n"
    char line[1024];

    (void)state;
    assert_int_equal(
        run(GW_SERVERS("gw")
                SRV("443", "https", "HTTPS", "app.example.com",
                    "    tls: {mode: SIMPLE, credentialName: app}\n")
                    SRV("443", "tls", "TLS", "db.example.com",
                        "    tls: {mode: PASSTHROUGH}\n")
                        SRV("443", "term", "TLS", "tcp.example.com",
                            "    tls: {mode: SIMPLE, credentialName: t}\n"),
            "IST0145"),
        0);
    first(GW_SERVERS("gw") SRV("8080", "http", "HTTP", "\"*\"", "")
              GW_SERVERS("gw2") SRV("8080", "tcp", "TCP", "\"*\"", ""),
          "IST0145", line, sizeof(line));
    assert_non_null(strstr(line, "Gateway default/gw2"));
    assert_non_null(strstr(line, "spec.servers[0]"));
    assert_non_null(strstr(line, "this plaintext TCP server cannot share the "
                                 "port with the plaintext HTTP servers"));
    assert_non_null(strstr(line, "no SNI"));
    assert_non_null(strstr(line, "(warning)"));
    first(GW_SERVERS("gw") SRV("8443", "https", "HTTPS", "\"*\"",
                               "    tls: {mode: SIMPLE, credentialName: app}\n")
              SRV("8443", "http", "HTTP", "\"*\"", ""),
          "IST0145", line, sizeof(line));
    assert_non_null(strstr(line, "spec.servers[1]"));
    assert_non_null(strstr(line, "(error)"));
    /* Another bind address is another port. */
    assert_int_equal(
        run(GW_SERVERS("gw")
                SRV("8080", "http", "HTTP", "\"*\"",
                    "") "  - port: {number: 8080, name: tcp, protocol: TCP}\n"
                        "    bind: 10.0.0.1\n    hosts: [\"*\"]\n",
            "IST0145"),
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
        run(BACKENDS HDR("VirtualService",
                         "v") "spec:\n  hosts: [reviews]\n  http:\n"
                              "  - route: [{destination: {host: reviews}}]\n"
                              "  - match: [{uri: {prefix: /a}}]\n"
                              "    route: [{destination: {host: reviews}}]\n",
            "IST0130"),
        1);
    assert_int_equal(
        run(BACKENDS HDR("VirtualService",
                         "v") "spec:\n  hosts: [reviews]\n  http:\n"
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
        "v") "spec:\n  hosts: [reviews]\n  http:\n"
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
        run(BACKENDS HDR("VirtualService",
                         "v") "spec:\n  hosts: [reviews]\n  http:\n"
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
                "v") "spec:\n  hosts: [reviews]\n  http:\n  - route:\n"
                     "    - {destination: {host: reviews, subset: v1}}\n"
                     "    - {destination: {host: reviews, subset: v2}}\n",
            "IST0106"),
        1);
    assert_int_equal(
        run(BACKENDS HDR(
                "VirtualService",
                "v") "spec:\n  hosts: [reviews]\n  tcp:\n  - route:\n"
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
        check(BACKENDS HDR("VirtualService",
                           "v") "spec: {hosts: [a], http: [{route: "
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_set_is_clean),
        cmocka_unit_test(test_ist0101_gateway),
        cmocka_unit_test(test_ist0101_l4_rules),
        cmocka_unit_test(test_ist0101_host_and_subset),
        cmocka_unit_test(test_ist0101_by_outbound_policy),
        cmocka_unit_test(test_ist0145_conflicting_gateways),
        cmocka_unit_test(test_ist0145_port_sharing),
        cmocka_unit_test(test_ist0132_host_not_in_gateway),
        cmocka_unit_test(test_ist0130_unreachable_rule),
        cmocka_unit_test(test_ist0131_ineffective_match),
        cmocka_unit_test(test_ist0173_subset_selects_nothing),
        cmocka_unit_test(test_ist0174_dr_host_unknown),
        cmocka_unit_test(test_weights_sum_to_zero),
        cmocka_unit_test(test_resource_check),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
