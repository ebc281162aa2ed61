/*
 * Unit tests of src/compile/l4.c and the lookups of
 * src/proxy/l4_listener.c: Gateways and VirtualServices written as YAML are
 * lowered (istio_gateways) and compiled (compile_l4), then the SNI table
 * and the tcp rules are queried the way connections query them, and an
 * AUTO_PASSTHROUGH server's services the way an Istio SNI looks them up.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include <openssl/pem.h>
#include <openssl/ssl.h>

#include "config/bootstrap.h"
#include "config/resource.h"
#include "core/addr.h"
#include "core/buf.h"
#include "proxy/stats.h"
#include "proxy/http_listener.h"
#include "proxy/l4_listener.h"
#include "compile/identity.h"
#include "compile/l4.h"
#include "compile/istio.h"
#include "tls/istio_sni.h"
#include "upstream/cluster.h"

struct fx {
    struct bootstrap *bs;
    struct resource_set *set;
    struct gw_set gws;
    struct stats_block *st;
    struct compiled_listener cl;
};

static const char *gw_yaml(const char *servers)
{
    static char out[4096];

    snprintf(out, sizeof(out),
             "apiVersion: networking.istio.io/v1\n"
             "kind: Gateway\n"
             "metadata: {name: gw, namespace: default}\n"
             "spec:\n"
             "  selector: {istio: ingressgateway}\n"
             "  servers:\n%s",
             servers);
    return out;
}

/* build() compiles the first Gateway listener of text; returns 0, or -1
 * with the message in *err. */
static int build(struct fx *f, const char *text, char **err)
{
    static const char boot[] =
        "node: {name: n, namespace: default, labels: {istio: ingressgateway, "
        "role: edge}}\n";
    struct buf errs;
    int nerr = 0;

    memset(f, 0, sizeof(*f));
    *err = NULL;
    f->bs = bootstrap_parse(boot, strlen(boot), "b.yaml", err);
    assert_non_null(f->bs);
    /* The destinations the tests route to are declared (the default
     * outboundTrafficPolicy, REGISTRY_ONLY, sends others nowhere). */
    static const char declared[] =
        "\n---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"
        "metadata: {name: declared, namespace: default}\n"
        "spec: {hosts: [\"*.svc.test\", a.default.svc.cluster.local], "
        "resolution: NONE, ports: [{number: 1, name: tcp}]}\n";
    char *all = NULL;

    if (asprintf(&all, "%s%s", text, declared) < 0)
        fail_msg("out of memory");
    buf_init(&errs, 1 << 20);
    f->set = resource_load_mem(all, strlen(all), "r.yaml", &errs, &nerr);
    free(all);
    if (nerr != 0)
        fail_msg("resources: %s", buf_cstr(&errs));
    buf_dispose(&errs);
    assert_non_null(f->set);
    if (istio_gateways(f->bs, f->set, NULL, &f->gws, err) < 0)
        return -1;
    assert_true(f->gws.n >= 1);
    assert_true(f->gws.v[0].l4);
    f->st = proxy_stats_new("t", 1);
    {
        struct compile_env env = {.nworkers = 1};
        return compile_l4(f->bs, f->set, &f->gws.v[0], f->st, &env, NULL, NULL,
                          &f->cl, err);
    }
}

static void fx_free(struct fx *f)
{
    if (f->cl.conf != NULL)
        f->cl.ops->conf_unref(f->cl.conf);
    stats_block_unref(f->st);
    gw_set_dispose(&f->gws);
    resource_set_free(f->set);
    bootstrap_free(f->bs);
}

static struct l4_listener_conf *conf(struct fx *f)
{
    return f->cl.conf;
}

/* The VirtualService a name is relayed by, or NULL. */
static const char *sni_route(struct fx *f, const char *name)
{
    const struct l4_sni *e = l4_sni_lookup(conf(f), name);

    if (e == NULL)
        return NULL;
    assert_int_equal(e->target, L4_TO_PASSTHROUGH);
    return conf(f)->passthrough.v[e->index].route;
}

static const char *vs(const char *name, const char *ns, const char *hosts,
                      const char *gateways, const char *body)
{
    static char out[8][2048];
    static int next;
    char *o = out[next++ % 8];

    snprintf(o, 2048,
             "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\n"
             "metadata: {name: %s, namespace: %s}\n"
             "spec:\n  hosts: %s\n  gateways: %s\n%s",
             name, ns, hosts, gateways, body);
    return o;
}

#define PASSTHROUGH_SERVER                                                     \
    "  - port: {number: 443, name: tls, protocol: TLS}\n"                      \
    "    hosts: [\"*.example.com\", \"other/*.other.org\"]\n"                  \
    "    tls: {mode: PASSTHROUGH}\n"

static void test_passthrough_sni_table(void **state)
{
    struct fx f;
    char *err;
    char text[16384];

    (void)state;
    snprintf(
        text, sizeof(text), "%s%s%s%s%s%s%s%s", gw_yaml(PASSTHROUGH_SERVER),
        vs("first", "default", "[a.example.com]", "[gw]",
           "  tls:\n  - match: [{sniHosts: [a.example.com]}]\n"
           "    route: [{destination: {host: a.svc.test}}]\n"),
        /* a.example.com again: the first route keeps it. */
        vs("second", "default", "[a.example.com, b.example.com]",
           "[default/gw]",
           "  tls:\n  - match: [{sniHosts: [a.example.com, b.example.com]}]\n"
           "    route: [{destination: {host: b.svc.test}}]\n"),
        vs("wild", "default", "[\"*.w.example.com\"]", "[gw]",
           "  tls:\n  - match: [{sniHosts: [\"*.w.example.com\"]}]\n"
           "    route: [{destination: {host: w.svc.test}}]\n"),
        /* "*" is narrowed to the server's hosts it may bind to. */
        vs("star", "default", "[\"*\"]", "[gw]",
           "  tls:\n  - match: [{sniHosts: [\"*\"]}]\n"
           "    route: [{destination: {host: s.svc.test}}]\n"),
        /* Another Gateway, another port, a namespace the host refuses. */
        vs("othergw", "default", "[c.example.com]", "[nope]",
           "  tls:\n  - match: [{sniHosts: [c.example.com]}]\n"
           "    route: [{destination: {host: c.svc.test}}]\n"),
        vs("otherport", "default", "[d.example.com]", "[gw]",
           "  tls:\n  - match: [{port: 8443, sniHosts: [d.example.com]}]\n"
           "    route: [{destination: {host: d.svc.test}}]\n"),
        vs("wrongns", "default", "[x.other.org]", "[gw]",
           "  tls:\n  - match: [{sniHosts: [x.other.org]}]\n"
           "    route: [{destination: {host: x.svc.test}}]\n"));
    if (build(&f, text, &err) < 0)
        fail_msg("%s", err);
    assert_string_equal(sni_route(&f, "a.example.com"), "default/first");
    assert_string_equal(sni_route(&f, "b.example.com"), "default/second");
    /* Exact names before wildcards, the longest wildcard first. */
    assert_string_equal(sni_route(&f, "x.w.example.com"), "default/wild");
    assert_string_equal(sni_route(&f, "y.x.w.example.com"), "default/wild");
    assert_string_equal(sni_route(&f, "q.example.com"), "default/star");
    assert_string_equal(sni_route(&f, "d.example.com"), "default/star");
    /* "*.example.com" is not example.com itself. */
    assert_null(sni_route(&f, "example.com"));
    assert_null(sni_route(&f, "x.other.org"));
    assert_null(sni_route(&f, ""));
    assert_null(sni_route(&f, NULL));
    fx_free(&f);
}

/* "./host" on a Gateway server admits VirtualServices of the Gateway's
 * namespace only (Istio's Gateway.servers.hosts), through the one rule
 * of config/ (res_gw_host_admits) that the router binding uses too. */
static void test_passthrough_dot_namespace(void **state)
{
    struct fx f;
    char *err;
    char text[8192];

    (void)state;
    snprintf(text, sizeof(text), "%s%s%s",
             gw_yaml("  - port: {number: 443, name: tls, protocol: TLS}\n"
                     "    hosts: [\"./own.example.com\", "
                     "\"./team.example.com\"]\n"
                     "    tls: {mode: PASSTHROUGH}\n"),
             vs("own", "default", "[own.example.com]", "[gw]",
                "  tls:\n  - match: [{sniHosts: [own.example.com]}]\n"
                "    route: [{destination: {host: a.svc.test}}]\n"),
             vs("team", "team", "[team.example.com]", "[default/gw]",
                "  tls:\n  - match: [{sniHosts: [team.example.com]}]\n"
                "    route: [{destination: {host: a.svc.test}}]\n"));
    if (build(&f, text, &err) < 0)
        fail_msg("%s", err);
    assert_string_equal(sni_route(&f, "own.example.com"), "default/own");
    /* The VirtualService's own namespace is not the Gateway's. */
    assert_null(sni_route(&f, "team.example.com"));
    fx_free(&f);
}

static void test_weights_and_clusters(void **state)
{
    struct fx f;
    char *err;
    char text[8192];
    const struct l4_rule *r;

    (void)state;
    snprintf(text, sizeof(text), "%s%s",
             gw_yaml("  - port: {number: 443, name: tls, protocol: TLS}\n"
                     "    hosts: [\"*\"]\n    tls: {mode: PASSTHROUGH}\n"),
             vs("split", "default", "[a.example.com]", "[gw]",
                "  tls:\n  - match: [{sniHosts: [a.example.com]}]\n"
                "    route:\n"
                "    - {destination: {host: a, port: {number: 8443}}, "
                "weight: 70}\n"
                "    - {destination: {host: b.svc.test}, weight: 30}\n"
                "    - {destination: {host: c.svc.test}, weight: 0}\n"));
    if (build(&f, text, &err) < 0)
        fail_msg("%s", err);
    r = &conf(&f)
             ->passthrough.v[l4_sni_lookup(conf(&f), "a.example.com")->index];
    /* A zero weight never gets a connection; short names are expanded. */
    assert_int_equal(r->ndests, 2);
    assert_int_equal(r->total, 100);
    assert_int_equal(r->dests[0].weight, 70);
    assert_string_equal(conf(&f)->clusters[r->dests[0].cluster]->name,
                        "a.default.svc.cluster.local||8443");
    assert_string_equal(conf(&f)->clusters[r->dests[1].cluster]->name,
                        "b.svc.test||0");
    fx_free(&f);
}

static struct sockaddr_in v4(const char *ip)
{
    struct sockaddr_in a;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

static const char *tcp_route(struct fx *f, const char *local, const char *peer)
{
    struct sockaddr_in l = v4(local), p = v4(peer);
    const struct l4_rule *r = l4_rule_match(
        &conf(f)->tcp, (struct sockaddr *)&l, (struct sockaddr *)&p);

    return r != NULL ? r->route : NULL;
}

static void test_tcp_rules_in_order(void **state)
{
    struct fx f;
    char *err;
    char text[8192];

    (void)state;
    snprintf(
        text, sizeof(text), "%s%s%s",
        gw_yaml("  - port: {number: 5432, name: pg, protocol: TCP}\n"
                "    hosts: [\"*\"]\n"),
        vs("pg", "default", "[\"*\"]", "[gw]",
           "  tcp:\n"
           /* Not this gateway's labels: dropped. */
           "  - match: [{sourceLabels: {role: core}}]\n"
           "    route: [{destination: {host: no.svc.test}}]\n"
           "  - match: [{port: 5432, destinationSubnets: [10.1.0.0/16]}]\n"
           "    route: [{destination: {host: ten.svc.test}}]\n"
           "  - match: [{sourceSubnet: 192.168.7.0/25, sourceLabels: {role: "
           "edge}}]\n"
           "    route: [{destination: {host: lan.svc.test}}]\n"
           "  - match: [{port: 1}]\n"
           "    route: [{destination: {host: one.svc.test}}]\n"),
        vs("rest", "default", "[\"*\"]", "[gw]",
           "  tcp:\n  - route: [{destination: {host: rest.svc.test}}]\n"));
    if (build(&f, text, &err) < 0)
        fail_msg("%s", err);
    assert_int_equal(conf(&f)->tcp.n, 3);
    assert_false(conf(&f)->inspect);
    assert_string_equal(tcp_route(&f, "10.1.2.3", "1.1.1.1"), "default/pg");
    assert_string_equal(
        conf(&f)->clusters[conf(&f)->tcp.v[0].dests[0].cluster]->name,
        "ten.svc.test||0");
    assert_string_equal(tcp_route(&f, "10.2.2.3", "192.168.7.100"),
                        "default/pg");
    assert_ptr_equal(l4_rule_match(&conf(&f)->tcp, NULL, NULL),
                     &conf(&f)->tcp.v[2]);
    /* Past the /25: the last rule, of the next VirtualService. */
    assert_string_equal(tcp_route(&f, "10.2.2.3", "192.168.7.200"),
                        "default/rest");
    fx_free(&f);
}

static void test_terminating_server_bad_certificate(void **state)
{
    struct fx f;
    char *err = NULL;
    char text[4096];

    (void)state;
    snprintf(text, sizeof(text), "%s%s",
             gw_yaml("  - port: {number: 9443, name: tls, protocol: TLS}\n"
                     "    hosts: [\"db.example.com\"]\n"
                     "    tls: {mode: SIMPLE, serverCertificate: "
                     "/nonexistent/c.pem, privateKey: /nonexistent/k.pem}\n"),
             vs("db", "default", "[\"*\"]", "[gw]",
                "  tcp:\n  - route: [{destination: {host: db.svc.test}}]\n"));
    assert_int_equal(build(&f, text, &err), -1);
    assert_non_null(err);
    assert_non_null(strstr(err, "/nonexistent/c.pem"));
    free(err);
    fx_free(&f);
}

static void test_mutual_credential_without_ca(void **state)
{
    struct fx f;
    char *err = NULL;
    char text[4096];

    (void)state;
    snprintf(text, sizeof(text), "%s",
             gw_yaml("  - port: {number: 9443, name: tls, protocol: TLS}\n"
                     "    hosts: [\"db.example.com\"]\n"
                     "    tls: {mode: MUTUAL, credentialName: gwcred}\n"));
    memset(&f, 0, sizeof(f));
    {
        static const char boot[] =
            "node: {labels: {istio: ingressgateway}}\n"
            "credentials: {dir: /nonexistent-credentials}\n";
        struct buf errs;
        int nerr = 0;
        f.bs = bootstrap_parse(boot, strlen(boot), "b.yaml", &err);
        buf_init(&errs, 1 << 20);
        f.set = resource_load_mem(text, strlen(text), "r.yaml", &errs, &nerr);
        buf_dispose(&errs);
    }
    assert_int_equal(istio_gateways(f.bs, f.set, NULL, &f.gws, &err), -1);
    /* Neither gwcred/ca.crt nor gwcred-cacert/ca.crt: a clear error. */
    assert_non_null(err);
    assert_non_null(strstr(err, "credential gwcred has no ca.crt"));
    free(err);
    fx_free(&f);
}

/* Pins that are not SHA-256 digests are refused with the value named. */
static void test_bad_pins(void **state)
{
    static const char *const pins[][2] = {
        {"verifyCertificateHash", "AB:CD"},
        {"verifyCertificateHash", "zz"},
        {"verifyCertificateSpki", "bm90IGEgZGlnZXN0"},
    };
    const char *certs = "/work/shared/istio-samples/certs";

    (void)state;
    for (size_t i = 0; i < sizeof(pins) / sizeof(pins[0]); i++) {
        struct fx f;
        char *err = NULL;
        char servers[2048], text[4096], want[128];

        snprintf(servers, sizeof(servers),
                 "  - port: {number: 9443, name: tls, protocol: TLS}\n"
                 "    hosts: [\"*\"]\n"
                 "    tls: {mode: MUTUAL, serverCertificate: "
                 "%s/workload-foo-cert.pem, privateKey: "
                 "%s/workload-foo-key.pem, caCertificates: "
                 "%s/root-cert.pem, %s: [\"%s\"]}\n",
                 certs, certs, certs, pins[i][0], pins[i][1]);
        snprintf(text, sizeof(text), "%s%s", gw_yaml(servers),
                 vs("db", "default", "[\"*\"]", "[gw]",
                    "  tcp:\n  - route: [{destination: {host: "
                    "db.svc.test}}]\n"));
        assert_int_equal(build(&f, text, &err), -1);
        snprintf(want, sizeof(want), "%s '%s' is not a SHA-256 digest",
                 pins[i][0], pins[i][1]);
        if (err == NULL || strstr(err, want) == NULL)
            fail_msg("got %s, want %s", err ? err : "(none)", want);
        free(err);
        fx_free(&f);
    }
}

#define SAMPLE_CERT                                                            \
    "serverCertificate: /work/shared/istio-samples/certs/"                     \
    "workload-foo-cert.pem, privateKey: /work/shared/istio-samples/certs/"     \
    "workload-foo-key.pem"

/* What the SNI table does with name: 'H' HTTPS servers' proxy, 'T' TLS
 * terminated here, else the passthrough route's name; NULL: closed. */
static const char *shared_target(struct fx *f, const char *name)
{
    const struct l4_sni *e = l4_sni_lookup(conf(f), name);

    if (e == NULL)
        return NULL;
    if (e->target == L4_TO_HTTP)
        return "H";
    if (e->target == L4_TO_TERMINATE)
        return "T";
    return conf(f)->passthrough.v[e->index].route;
}

/* HTTPS and TLS servers on one port: one table, Envoy's precedence. */
static void test_shared_port_sni_table(void **state)
{
    struct fx f;
    char *err;
    char text[16384];

    (void)state;
    snprintf(
        text, sizeof(text), "%s%s%s",
        gw_yaml("  - port: {number: 443, name: https, protocol: HTTPS}\n"
                "    hosts: [App.example.com, \"*.web.example.com\"]\n"
                "    tls: {mode: SIMPLE, " SAMPLE_CERT "}\n"
                "  - port: {number: 443, name: pass, protocol: TLS}\n"
                "    hosts: [\"*.example.com\"]\n"
                "    tls: {mode: PASSTHROUGH}\n"
                "  - port: {number: 443, name: term, protocol: TLS}\n"
                "    hosts: [tcp.example.com]\n"
                "    tls: {mode: SIMPLE, " SAMPLE_CERT "}\n"
                /* Later than the passthrough route for db.example.com. */
                "  - port: {number: 443, name: https2, protocol: HTTPS}\n"
                "    hosts: [db.example.com]\n"
                "    tls: {mode: SIMPLE, " SAMPLE_CERT "}\n"),
        vs("db", "default", "[db.example.com, \"*.example.com\"]", "[gw]",
           "  tls:\n  - match: [{sniHosts: [db.example.com]}]\n"
           "    route: [{destination: {host: db.svc.test}}]\n"
           "  - match: [{sniHosts: [\"*.example.com\"]}]\n"
           "    route: [{destination: {host: wild.svc.test}}]\n"),
        vs("tcp", "default", "[tcp.example.com]", "[gw]",
           "  tcp:\n  - route: [{destination: {host: plain.svc.test}}]\n"));
    if (build(&f, text, &err) < 0)
        fail_msg("%s", err);
    assert_int_equal(f.gws.n, 1);
    assert_true(f.gws.v[0].shared);
    assert_int_equal(f.gws.v[0].ncerts, 2);
    assert_non_null(conf(&f)->http);
    assert_non_null(conf(&f)->http->tls);
    assert_int_equal(conf(&f)->nservers, 1);
    /* Exact names first, whatever server they belong to. */
    assert_string_equal(shared_target(&f, "app.example.com"), "H");
    assert_string_equal(shared_target(&f, "tcp.example.com"), "T");
    assert_string_equal(shared_target(&f, "db.example.com"), "default/db");
    /* The longest wildcard next: *.web.example.com over *.example.com. */
    assert_string_equal(shared_target(&f, "x.web.example.com"), "H");
    assert_string_equal(shared_target(&f, "a.b.web.example.com"), "H");
    assert_string_equal(shared_target(&f, "web.example.com"), "default/db");
    assert_string_equal(shared_target(&f, "other.example.com"), "default/db");
    assert_int_equal(l4_sni_lookup(conf(&f), "other.example.com")->index, 1);
    /* No "*": an unknown name and no SNI are closed. */
    assert_null(shared_target(&f, "example.org"));
    assert_null(shared_target(&f, ""));
    assert_null(shared_target(&f, NULL));
    fx_free(&f);
}

/* An HTTPS server of hosts "*" takes what no name or wildcard does, and
 * a ClientHello without SNI. */
static void test_shared_port_star_https(void **state)
{
    struct fx f;
    char *err;
    char text[8192];

    (void)state;
    snprintf(text, sizeof(text), "%s%s",
             gw_yaml("  - port: {number: 443, name: pass, protocol: TLS}\n"
                     "    hosts: [db.example.com]\n"
                     "    tls: {mode: PASSTHROUGH}\n"
                     "  - port: {number: 443, name: https, protocol: HTTPS}\n"
                     "    hosts: [\"*\"]\n"
                     "    tls: {mode: SIMPLE, " SAMPLE_CERT "}\n"),
             vs("db", "default", "[db.example.com]", "[gw]",
                "  tls:\n  - match: [{sniHosts: [db.example.com]}]\n"
                "    route: [{destination: {host: db.svc.test}}]\n"));
    if (build(&f, text, &err) < 0)
        fail_msg("%s", err);
    assert_true(f.gws.v[0].shared);
    assert_string_equal(shared_target(&f, "db.example.com"), "default/db");
    assert_string_equal(shared_target(&f, "x.db.example.com"), "H");
    assert_string_equal(shared_target(&f, "example.org"), "H");
    assert_string_equal(shared_target(&f, ""), "H");
    assert_string_equal(shared_target(&f, NULL), "H");
    fx_free(&f);
}

/* Plaintext HTTP and TCP servers on one port: the later is skipped. */
static void test_plaintext_http_and_tcp_do_not_share(void **state)
{
    static const char boot[] = "node: {labels: {istio: ingressgateway}}\n";
    const char *text =
        gw_yaml("  - port: {number: 8080, name: http, protocol: HTTP}\n"
                "    hosts: [\"*\"]\n"
                "  - port: {number: 8080, name: tcp, protocol: TCP}\n"
                "    hosts: [\"*\"]\n");
    struct fx f;
    char *err = NULL;
    struct buf errs;
    int nerr = 0;

    (void)state;
    memset(&f, 0, sizeof(f));
    f.bs = bootstrap_parse(boot, strlen(boot), "b.yaml", &err);
    assert_non_null(f.bs);
    buf_init(&errs, 1 << 20);
    f.set = resource_load_mem(text, strlen(text), "r.yaml", &errs, &nerr);
    buf_dispose(&errs);
    assert_int_equal(nerr, 0);
    assert_int_equal(istio_gateways(f.bs, f.set, NULL, &f.gws, &err), 0);
    assert_int_equal(f.gws.n, 1);
    assert_false(f.gws.v[0].l4);
    assert_false(f.gws.v[0].shared);
    assert_int_equal(f.gws.v[0].nservers, 1);
    assert_int_equal(f.gws.v[0].servers[0].mode, GW_MODE_HTTP);
    fx_free(&f);
}

/* A node identity as the control loop hands it down: arg is the mesh
 * root (NULL: no certificate yet); the handshake callback is never run. */
static int mesh_current(void *arg, X509 **root)
{
    *root = arg;
    if (arg == NULL)
        return 0;
    X509_up_ref(*root);
    return 1;
}

static int mesh_ssl(SSL *ssl, void *arg)
{
    (void)ssl;
    (void)arg;
    return 0;
}

static X509 *sample_cert(const char *name)
{
    char path[1024];
    FILE *fp;
    X509 *x;

    snprintf(path, sizeof(path), "%s/tests/data/istio-samples/certs/%s", SRCDIR,
             name);
    fp = fopen(path, "r");
    assert_non_null(fp);
    x = PEM_read_X509(fp, NULL, NULL, NULL);
    fclose(fp);
    assert_non_null(x);
    return x;
}

/* lower_mesh() lowers text under identity into f->gws; istio_gateways()'s
 * return value. */
static int lower_mesh(struct fx *f, const char *text,
                      const struct compile_identity *identity, char **err)
{
    static const char boot[] = "node: {labels: {istio: ingressgateway}}\n";
    struct buf errs;
    int nerr = 0;

    memset(f, 0, sizeof(*f));
    *err = NULL;
    f->bs = bootstrap_parse(boot, strlen(boot), "b.yaml", err);
    assert_non_null(f->bs);
    buf_init(&errs, 1 << 20);
    f->set = resource_load_mem(text, strlen(text), "r.yaml", &errs, &nerr);
    buf_dispose(&errs);
    assert_int_equal(nerr, 0);
    return istio_gateways(f->bs, f->set, identity, &f->gws, err);
}

/* Issue 12 item 9: an ISTIO_MUTUAL server takes the node's certificate
 * from the in-memory identity (a provider per handshake, the mesh root for
 * clients), not from ca.dir files; the listener's identity follows the
 * root, not the rotating leaf, so a rotation keeps the listener; with no
 * CA the server is refused as before. */
static void test_mesh_server_takes_the_node_identity(void **state)
{
    const char *text =
        gw_yaml("  - port: {number: 9443, name: tls, protocol: TLS}\n"
                "    hosts: [\"*\"]\n"
                "    tls: {mode: ISTIO_MUTUAL}\n");
    X509 *root = sample_cert("root-cert.pem");
    X509 *other = sample_cert("ca-cert.pem");
    struct compile_identity id = {mesh_current, mesh_ssl, root, NULL,
                                  NULL,         NULL,     NULL};
    struct compile_identity none = {mesh_current, mesh_ssl, NULL, NULL,
                                    NULL,         NULL,     NULL};
    struct compile_identity id2 = {mesh_current, mesh_ssl, other, NULL,
                                   NULL,         NULL,     NULL};
    struct fx f, g;
    const struct gw_tls *t;
    char *err = NULL;

    (void)state;
    assert_int_equal(lower_mesh(&f, text, NULL, &err), -1);
    assert_non_null(strstr(err, "tls mode ISTIO_MUTUAL needs this node's "
                                "mesh certificate"));
    free(err);
    fx_free(&f);
    assert_int_equal(lower_mesh(&f, text, &none, &err), -1);
    free(err);
    fx_free(&f);

    assert_int_equal(lower_mesh(&f, text, &id, &err), 0);
    t = &f.gws.v[0].servers[0].tls;
    assert_ptr_equal(t->cred, mesh_ssl);
    assert_ptr_equal(t->cred_arg, root);
    assert_ptr_equal(t->root, root);
    assert_null(t->cert);
    assert_null(t->key);
    assert_null(t->ca);
    /* The TLS server builds from the provider alone. */
    f.st = proxy_stats_new("t", 1);
    {
        struct compile_env env = {.nworkers = 1};
        if (compile_l4(f.bs, f.set, &f.gws.v[0], f.st, &env, NULL, NULL, &f.cl,
                       &err) < 0)
            fail_msg("%s", err);
    }
    /* Built again (the leaf may have rotated meanwhile): the same. */
    assert_int_equal(lower_mesh(&g, text, &id, &err), 0);
    assert_true(ident_equal(&f.gws.v[0].id, &g.gws.v[0].id));
    fx_free(&g);
    /* Another mesh root is another listener. */
    assert_int_equal(lower_mesh(&g, text, &id2, &err), 0);
    assert_false(ident_equal(&f.gws.v[0].id, &g.gws.v[0].id));
    fx_free(&g);
    fx_free(&f);
    X509_free(other);
    X509_free(root);
}

/* The cluster an Istio SNI reaches through AUTO_PASSTHROUGH, or the
 * lookup's miss as "no host", "no port", "no subset". */
static const char *auto_route(struct fx *f, const char *name)
{
    const struct l4_auto *a;
    struct istio_sni sni;
    const char *why;

    assert_int_equal(istio_sni_parse(name, strlen(name), &sni, &why), 0);
    switch (l4_auto_lookup(conf(f), &sni, &a)) {
    case L4_AUTO_FOUND:
        assert_non_null(a);
        return conf(f)->clusters[a->cluster]->name;
    case L4_AUTO_NO_HOST:
        return "no host";
    case L4_AUTO_NO_PORT:
        return "no port";
    default:
        return "no subset";
    }
}

/* istiod's east-west gateway chains: one per service the server's hosts
 * cover (namespace part included), per port, per DestinationRule subset
 * and none; wildcard service hosts name no cluster. */
static void test_auto_passthrough_services(void **state)
{
    struct fx f;
    char *err;
    char text[8192];

    (void)state;
    snprintf(
        text, sizeof(text), "%s%s",
        gw_yaml(
            "  - port: {number: 15443, name: tls, protocol: TLS}\n"
            "    hosts: [\"*.svc.cluster.local\", \"other/*.example.org\"]\n"
            "    tls: {mode: AUTO_PASSTHROUGH}\n"
            /* A second server exposing the same services. */
            "  - port: {number: 15443, name: tls2, protocol: TLS}\n"
            "    hosts: [\"*\"]\n"
            "    tls: {mode: AUTO_PASSTHROUGH}\n"),
        "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"
        "metadata: {name: r, namespace: default}\n"
        "spec: {hosts: [r.default.svc.cluster.local], resolution: STATIC,\n"
        "  ports: [{number: 9080, name: http}, {number: 9090, name: grpc}],\n"
        "  endpoints: [{address: 10.0.0.1, labels: {version: v1}},\n"
        "              {address: 10.0.0.2, labels: {version: v2}}]}\n"
        "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\n"
        "metadata: {name: r, namespace: default}\n"
        "spec: {host: r.default.svc.cluster.local, subsets: [\n"
        "  {name: v1, labels: {version: v1}},\n"
        "  {name: v2, labels: {version: v2}}]}\n"
        "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"
        "metadata: {name: h, namespace: other}\n"
        "spec: {hosts: [h.example.org], resolution: STATIC,\n"
        "  ports: [{number: 80, name: http}],\n"
        "  endpoints: [{address: 10.0.0.3}]}\n");
    if (build(&f, text, &err) < 0)
        fail_msg("%s", err);
    assert_true(conf(&f)->auto_passthrough);
    assert_string_equal(
        auto_route(&f, "outbound_.9080_.v1_.r.default.svc.cluster.local"),
        "r.default.svc.cluster.local|v1|9080");
    assert_string_equal(
        auto_route(&f, "outbound_.9090_.v2_.r.default.svc.cluster.local"),
        "r.default.svc.cluster.local|v2|9090");
    assert_string_equal(
        auto_route(&f, "outbound_.9080_._.r.default.svc.cluster.local"),
        "r.default.svc.cluster.local||9080");
    assert_string_equal(
        auto_route(&f, "outbound_.9080_.v3_.r.default.svc.cluster.local"),
        "no subset");
    assert_string_equal(
        auto_route(&f, "outbound_.9999_.v1_.r.default.svc.cluster.local"),
        "no port");
    assert_string_equal(
        auto_route(&f, "outbound_.9080_.v1_.x.default.svc.cluster.local"),
        "no host");
    /* The bootstrap's declared service (port 1), and another namespace's
     * service through the "*" server. */
    assert_string_equal(
        auto_route(&f, "outbound_.1_._.a.default.svc.cluster.local"),
        "a.default.svc.cluster.local||1");
    assert_string_equal(auto_route(&f, "outbound_.80_._.h.example.org"),
                        "h.example.org||80");
    /* r: two ports by three; a; h: each once though two servers expose
     * them; "*.svc.test" is a wildcard. */
    assert_int_equal(conf(&f)->nautos, 8);
    for (size_t i = 1; i < conf(&f)->nautos; i++)
        assert_true(
            strcmp(conf(&f)->autos[i - 1].host, conf(&f)->autos[i].host) <= 0);
    fx_free(&f);
}

static X509 *data_cert(const char *rel)
{
    char path[1024];
    FILE *fp;
    X509 *x;

    snprintf(path, sizeof(path), "%s/tests/data/%s", SRCDIR, rel);
    fp = fopen(path, "r");
    assert_non_null(fp);
    x = PEM_read_X509(fp, NULL, NULL, NULL);
    fclose(fp);
    assert_non_null(x);
    return x;
}

/* Whether ctx's trust store verifies leaf. */
static int ctx_verifies(SSL_CTX *ctx, X509 *leaf)
{
    X509_STORE_CTX *xs = X509_STORE_CTX_new();
    int ok;

    assert_non_null(xs);
    assert_int_equal(
        X509_STORE_CTX_init(xs, SSL_CTX_get_cert_store(ctx), leaf, NULL), 1);
    ok = X509_verify_cert(xs) == 1;
    X509_STORE_CTX_free(xs);
    return ok;
}

/* HBONE clients trust what ISTIO_MUTUAL trusts: besides the root of the
 * node's certificate, the linked sites' roots (MeshLink bundles), for
 * the single tunnel's context and double HBONE's inner one alike. */
static void test_hbone_client_trusts_link_roots(void **state)
{
    X509 *node_root = sample_cert("root-cert.pem");
    X509 *link_root = data_cert("crl/root.crt");
    X509 *remote = data_cert("crl/good.crt"); /* issued by link_root */
    STACK_OF(X509) *links = sk_X509_new_null();
    struct compile_identity with = {mesh_current, mesh_ssl, node_root, links,
                                    "pin",        NULL,     NULL};
    struct compile_identity without = {mesh_current, mesh_ssl, node_root, NULL,
                                       NULL,         NULL,     NULL};
    struct addr ep;
    const uint8_t hb[1] = {CLUSTER_HBONE_DOUBLE};
    const char *const ids[1] = {"spiffe://b.example/ns/istio-system/sa/ew"};
    struct cluster_spec sp;
    struct cluster *c;

    (void)state;
    assert_non_null(links);
    assert_true(sk_X509_push(links, link_root) > 0);
    assert_int_equal(addr_literal(&ep, "192.0.2.9", 15008), 0);
    memset(&sp, 0, sizeof(sp));
    sp.name = "svc.example.test||80";
    sp.endpoints = &ep;
    sp.nendpoints = 1;
    sp.host = "svc.example.test";
    sp.port = 80;
    sp.hbone = hb;
    sp.hbone_ids = ids;
    sp.node_network = "net-a";
    for (int k = 0; k < 2; k++) {
        c = cluster_new(sp.name, &ep, 1, 1);
        assert_non_null(c);
        assert_int_equal(
            compile_cluster_hbone(k == 0 ? &with : &without, c, &sp), 0);
        assert_false(c->hbone_error);
        assert_non_null(c->hbone_tls);
        assert_non_null(c->hbone_inner_tls);
        assert_string_equal(c->hbone_authority, "svc.example.test:80");
        assert_string_equal(c->hbone_network, "net-a");
        assert_int_equal(ctx_verifies(c->hbone_tls, remote), k == 0);
        assert_int_equal(ctx_verifies(c->hbone_inner_tls, remote), k == 0);
        cluster_unref(c);
    }
    sk_X509_pop_free(links, X509_free);
    X509_free(remote);
    X509_free(node_root);
}

/* An HBONE server: one terminating server with the node's identity, no
 * ClientHello peek, the services its hosts cover per port without
 * subsets, the limits from the bootstrap; another kind of server on its
 * port is refused. */
static void test_hbone_server(void **state)
{
    char text[8192];
    X509 *root = sample_cert("root-cert.pem");
    struct compile_identity id = {mesh_current, mesh_ssl, root, NULL,
                                  NULL,         NULL,     NULL};
    struct fx f;
    char *err = NULL;

    (void)state;
    snprintf(text, sizeof(text), "%s%s",
             gw_yaml("  - port: {number: 15008, name: hbone, protocol: "
                     "HBONE}\n"
                     "    hosts: [\"*/*.svc.cluster.local\"]\n"
                     "    tls: {mode: ISTIO_MUTUAL}\n"),
             "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"
             "metadata: {name: r, namespace: default}\n"
             "spec: {hosts: [r.default.svc.cluster.local], resolution: "
             "STATIC,\n"
             "  ports: [{number: 9080, name: tcp}],\n"
             "  endpoints: [{address: 10.0.0.1, labels: {version: v1}}]}\n"
             "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\n"
             "metadata: {name: r, namespace: default}\n"
             "spec: {host: r.default.svc.cluster.local, subsets: [\n"
             "  {name: v1, labels: {version: v1}}]}\n");
    assert_int_equal(lower_mesh(&f, text, &id, &err), 0);
    assert_true(f.gws.v[0].hbone);
    assert_true(f.gws.v[0].l4);
    f.st = proxy_stats_new("t", 1);
    {
        struct compile_env env = {.nworkers = 1};
        if (compile_l4(f.bs, f.set, &f.gws.v[0], f.st, &env, NULL, NULL, &f.cl,
                       &err) < 0)
            fail_msg("%s", err);
    }
    assert_true(conf(&f)->is_hbone);
    assert_false(conf(&f)->inspect);
    assert_false(conf(&f)->auto_passthrough);
    assert_int_equal(conf(&f)->nservers, 1);
    assert_int_equal(conf(&f)->nsni, 0);
    assert_int_equal(conf(&f)->nautos, 1);
    assert_string_equal(conf(&f)->autos[0].host, "r.default.svc.cluster.local");
    assert_int_equal(conf(&f)->autos[0].port, 9080);
    assert_string_equal(conf(&f)->autos[0].subset, "");
    assert_int_equal(conf(&f)->hbone.max_tunnels, 100);
    assert_int_equal(conf(&f)->hbone.tunnel_buffer, 256 * 1024);
    assert_int_equal(conf(&f)->hbone.connect_timeout_ms, 10000);
    assert_int_equal(conf(&f)->hbone.idle_timeout_ms, 3600 * 1000);
    fx_free(&f);
    /* Not beside a server of another protocol. */
    assert_int_equal(
        lower_mesh(&f,
                   gw_yaml("  - port: {number: 15008, name: hbone, protocol: "
                           "HBONE}\n"
                           "    hosts: [\"*\"]\n"
                           "    tls: {mode: ISTIO_MUTUAL}\n"
                           "  - port: {number: 15008, name: tls, protocol: "
                           "TLS}\n"
                           "    hosts: [\"*\"]\n"
                           "    tls: {mode: ISTIO_MUTUAL}\n"),
                   &id, &err),
        -1);
    assert_non_null(strstr(err, "an HBONE server cannot share its port"));
    free(err);
    fx_free(&f);
    X509_free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_passthrough_sni_table),
        cmocka_unit_test(test_passthrough_dot_namespace),
        cmocka_unit_test(test_weights_and_clusters),
        cmocka_unit_test(test_tcp_rules_in_order),
        cmocka_unit_test(test_terminating_server_bad_certificate),
        cmocka_unit_test(test_mutual_credential_without_ca),
        cmocka_unit_test(test_bad_pins),
        cmocka_unit_test(test_shared_port_sni_table),
        cmocka_unit_test(test_shared_port_star_https),
        cmocka_unit_test(test_plaintext_http_and_tcp_do_not_share),
        cmocka_unit_test(test_mesh_server_takes_the_node_identity),
        cmocka_unit_test(test_auto_passthrough_services),
        cmocka_unit_test(test_hbone_server),
        cmocka_unit_test(test_hbone_client_trusts_link_roots),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
