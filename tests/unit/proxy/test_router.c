/*
 * Unit tests of the router: src/proxy/router.c and router-match.c (the
 * run-time side) with src/compile/router-bind.c and compile/router.c (the
 * building side). VirtualServices are loaded from YAML with the real
 * loader, compiled with router_build() against a test cluster registry
 * (every host gets an index, except those starting with "unknown"), and
 * matched with hand-made requests.
 */
#include "config.h"

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "config/resource.h"
#include "core/arena.h"
#include "core/buf.h"
#include "http/http.h"
#include "compile/router.h"
#include "proxy/router.h"
#include "proxy/router-int.h"

/* The build passes the source tree as SRCDIR, as for test_resource. */
#ifndef SRCDIR
#define SRCDIR "."
#endif
#define SAMPLES SRCDIR "/tests/data/istio-samples/bookinfo/networking/"

/* ---- fixture ------------------------------------------------------------ */

#define MAX_CLUSTERS 40000

struct fx {
    struct resource_set *set;
    struct router *r;
    struct arena arena;
    char *names[MAX_CLUSTERS]; /* "host|subset|port" */
    int nnames;
    const char *node_ns; /* the gateway's namespace, for exportTo */
};

static int cluster_id(void *ctx, const char *host, const char *subset,
                      uint32_t port)
{
    struct fx *f = ctx;
    char key[600];

    if (strncmp(host, "unknown", 7) == 0)
        return -1;
    snprintf(key, sizeof(key), "%s|%s|%u", host, subset ? subset : "",
             (unsigned)port);
    /* The 10,000-service test registers hosts in order; look back a little
     * before scanning everything. */
    for (int i = f->nnames - 1; i >= 0 && i >= f->nnames - 8; i--)
        if (strcmp(f->names[i], key) == 0)
            return i;
    if (f->nnames < 64)
        for (int i = 0; i < f->nnames; i++)
            if (strcmp(f->names[i], key) == 0)
                return i;
    if (f->nnames == MAX_CLUSTERS)
        return -1;
    f->names[f->nnames] = strdup(key);
    return f->nnames++;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    arena_init(&f->arena, 4096);
    *state = f;
    return 0;
}

static void fx_reset(struct fx *f)
{
    router_unref(f->r);
    f->r = NULL;
    resource_set_free(f->set);
    f->set = NULL;
    for (int i = 0; i < f->nnames; i++)
        free(f->names[i]);
    f->nnames = 0;
    arena_dispose(&f->arena);
}

static int teardown(void **state)
{
    struct fx *f = *state;

    fx_reset(f);
    free(f);
    return 0;
}

static const struct router_server mesh_and_gw[] = {
    {"mesh", (const char *const[]){"*"}, 1},
    {"default/gw", (const char *const[]){"*"}, 1},
    {"default/bookinfo-gateway", (const char *const[]){"*"}, 1},
};
#define NSERVERS (sizeof(mesh_and_gw) / sizeof(*mesh_and_gw))

/* build() loads yaml (which must load without error) and builds a router
 * for the servers given (the default: mesh and default/gw, hosts "*"). */
static struct router *build_with(struct fx *f, const char *yaml,
                                 const struct router_server *srv, size_t n)
{
    struct buf errs;
    struct router_params p = {0};
    char *err = NULL;
    int nerr = 0;

    fx_reset(f);
    buf_init(&errs, 1 << 20);
    f->set = resource_load_mem(yaml, strlen(yaml), "t.yaml", &errs, &nerr);
    if (nerr != 0)
        fprintf(stderr, "%.*s", (int)buf_len(&errs), buf_ptr(&errs));
    buf_dispose(&errs);
    assert_non_null(f->set);
    assert_int_equal(nerr, 0);
    p.set = f->set;
    p.servers = srv;
    p.nservers = n;
    p.cluster_id = cluster_id;
    p.ctx = f;
    p.node_ns = f->node_ns;
    f->r = router_build(&p, &err);
    if (f->r == NULL)
        fprintf(stderr, "router_build: %s\n", err ? err : "?");
    assert_non_null(f->r);
    assert_null(err);
    return f->r;
}

static struct router *build(struct fx *f, const char *yaml)
{
    return build_with(f, yaml, mesh_and_gw, NSERVERS);
}

static struct router *build_file(struct fx *f, const char *path)
{
    struct buf errs;
    struct router_params p = {0};
    char *err = NULL;
    int nerr = 0;

    fx_reset(f);
    buf_init(&errs, 1 << 20);
    f->set = resource_load(path, &errs, &nerr);
    buf_dispose(&errs);
    assert_non_null(f->set);
    assert_int_equal(nerr, 0);
    p.set = f->set;
    p.servers = mesh_and_gw;
    p.nservers = NSERVERS;
    p.cluster_id = cluster_id;
    p.ctx = f;
    f->r = router_build(&p, &err);
    assert_non_null(f->r);
    return f->r;
}

/* req() makes a request; hdrs is "name: value" lines separated by '\n'. */
static struct http_request req_full(struct fx *f, const char *method,
                                    const char *scheme, const char *authority,
                                    const char *path, const char *hdrs)
{
    struct http_request q;

    memset(&q, 0, sizeof(q));
    q.method = slice_of(method);
    q.scheme = slice_of(scheme);
    q.authority = slice_of(authority);
    q.path = slice_of(path);
    while (hdrs != NULL && *hdrs != '\0') {
        const char *nl = strchr(hdrs, '\n');
        size_t len = nl ? (size_t)(nl - hdrs) : strlen(hdrs);
        const char *colon = memchr(hdrs, ':', len);
        const char *v;
        assert_non_null(colon);
        v = colon + 1;
        while (*v == ' ')
            v++;
        assert_int_equal(
            http_fields_add(&q.fields, &f->arena,
                            (struct slice){hdrs, (size_t)(colon - hdrs)},
                            (struct slice){v, (size_t)(hdrs + len - v)}, 100),
            0);
        hdrs += len + (nl != NULL);
    }
    return q;
}

static struct http_request req(struct fx *f, const char *authority,
                               const char *path, const char *hdrs)
{
    return req_full(f, "GET", "http", authority, path, hdrs);
}

/* where() routes a request and names the outcome: "404", "redirect",
 * "direct 503", "UH", or the picked cluster's key. */
static const char *where_r(struct fx *f, const struct http_request *q,
                           uint32_t port, uint64_t random,
                           struct route_result *res)
{
    const struct route_action *a =
        router_match(f->r, q, port, random, &f->arena, res);

    if (a == NULL)
        return "404";
    assert_ptr_equal(a, res->action);
    if (a->kind == ROUTE_REDIRECT)
        return "redirect";
    if (a->kind == ROUTE_DIRECT)
        return "direct";
    if (res->dest < 0 || a->dests[res->dest].cluster < 0)
        return "UH";
    return f->names[a->dests[res->dest].cluster];
}

static const char *where(struct fx *f, const char *authority, const char *path,
                         const char *hdrs)
{
    struct route_result res;
    struct http_request q = req(f, authority, path, hdrs);

    return where_r(f, &q, 80, 0, &res);
}

#define VS_HEAD(name, hosts)                                                   \
    "apiVersion: networking.istio.io/v1\n"                                     \
    "kind: VirtualService\n"                                                   \
    "metadata: {name: " name ", namespace: default}\n"                         \
    "spec:\n"                                                                  \
    "  hosts: " hosts "\n"                                                     \
    "  gateways: [gw]\n"                                                       \
    "  http:\n"

/* A rule with one match block (cond) routing to host dest. */
#define RULE(cond, dest)                                                       \
    "  - match: [" cond "]\n"                                                  \
    "    route: [{destination: {host: " dest "}}]\n"

#define CATCH(dest) "  - route: [{destination: {host: " dest "}}]\n"

#define C(h) h ".default.svc.cluster.local||0"

/* ---- conditions --------------------------------------------------------- */

static void test_uri(void **state)
{
    struct fx *f = *state;

    build(f,
          VS_HEAD("v", "[a.com]") RULE("{uri: {exact: /exact}}",
                                       "e") RULE("{uri: {prefix: /pre}}", "p")
              RULE("{uri: {regex: '/re/[0-9]+'}}", "r")
                  RULE("{uri: {exact: /Case}, ignoreUriCase: true}", "ci")
                      RULE("{uri: {prefix: /CP}, ignoreUriCase: true}", "cp"));
    assert_string_equal(where(f, "a.com", "/exact", NULL), C("e"));
    assert_string_equal(where(f, "a.com", "/exact?x=1", NULL), C("e"));
    assert_string_equal(where(f, "a.com", "/exact/", NULL), "404");
    assert_string_equal(where(f, "a.com", "/Exact", NULL), "404");
    assert_string_equal(where(f, "a.com", "/prefix/x", NULL), C("p"));
    assert_string_equal(where(f, "a.com", "/pr", NULL), "404");
    assert_string_equal(where(f, "a.com", "/re/123", NULL), C("r"));
    assert_string_equal(where(f, "a.com", "/re/123?q", NULL), C("r"));
    /* Full match: a regex matching only part of the path does not do. */
    assert_string_equal(where(f, "a.com", "/re/123/x", NULL), "404");
    assert_string_equal(where(f, "a.com", "/x/re/1", NULL), "404");
    assert_string_equal(where(f, "a.com", "/cAsE", NULL), C("ci"));
    assert_string_equal(where(f, "a.com", "/case/x", NULL), "404");
    assert_string_equal(where(f, "a.com", "/cpx", NULL), C("cp"));
}

static void test_method_scheme_authority(void **state)
{
    struct fx *f = *state;
    struct route_result res;
    struct http_request q;

    build(f, VS_HEAD("v", "['*']") RULE("{method: {exact: POST}}", "post") RULE(
                 "{scheme: {exact: https}}",
                 "tls") RULE("{authority: {prefix: api.}}", "api")
                 RULE("{authority: {regex: 'w+\\.example\\.com(:80)?'}}", "w"));
    q = req_full(f, "POST", "http", "x.org", "/", NULL);
    assert_string_equal(where_r(f, &q, 80, 0, &res), C("post"));
    q = req_full(f, "post", "http", "x.org", "/", NULL);
    assert_string_equal(where_r(f, &q, 80, 0, &res), "404");
    q = req_full(f, "GET", "https", "x.org", "/", NULL);
    assert_string_equal(where_r(f, &q, 80, 0, &res), C("tls"));
    q = req_full(f, "GET", "http", "api.x.org", "/", NULL);
    assert_string_equal(where_r(f, &q, 80, 0, &res), C("api"));
    q = req_full(f, "GET", "http", "www.example.com:80", "/", NULL);
    assert_string_equal(where_r(f, &q, 80, 0, &res), C("w"));
    q = req_full(f, "GET", "http", "www.example.com:81", "/", NULL);
    assert_string_equal(where_r(f, &q, 80, 0, &res), "404");
}

static void test_headers(void **state)
{
    struct fx *f = *state;

    build(f, VS_HEAD("v", "[a.com]") RULE("{headers: {x-e: {exact: v}}}", "e")
                 RULE("{headers: {x-p: {prefix: pre}}}", "p")
                     RULE("{headers: {x-r: {regex: '[a-c]+'}}}", "r")
                         RULE("{headers: {x-any: {}}}", "any")
                             RULE("{headers: {x-pr: {present: true}}}", "pr")
                                 RULE("{headers: {X-Up: {exact: Up}}}", "up"));
    assert_string_equal(where(f, "a.com", "/", "x-e: v"), C("e"));
    assert_string_equal(where(f, "a.com", "/", "x-e: V"), "404");
    assert_string_equal(where(f, "a.com", "/", "x-e: vv"), "404");
    /* Two fields are matched joined with ",", as Envoy does. */
    assert_string_equal(where(f, "a.com", "/", "x-e: v\nx-e: v"), "404");
    assert_string_equal(where(f, "a.com", "/", "x-p: prefix"), C("p"));
    assert_string_equal(where(f, "a.com", "/", "x-p: pr"), "404");
    assert_string_equal(where(f, "a.com", "/", "x-r: abcab"), C("r"));
    assert_string_equal(where(f, "a.com", "/", "x-r: abcd"), "404");
    assert_string_equal(where(f, "a.com", "/", "x-r: ab\nx-r: c"), "404");
    assert_string_equal(where(f, "a.com", "/", "x-any: "), C("any"));
    assert_string_equal(where(f, "a.com", "/", "x-pr: 1"), C("pr"));
    assert_string_equal(where(f, "a.com", "/", "X-UP: Up"), C("up"));
    assert_string_equal(where(f, "a.com", "/", "x-other: v"), "404");
    assert_string_equal(where(f, "a.com", "/", NULL), "404");
}

static void test_without_headers(void **state)
{
    struct fx *f = *state;

    build(f, VS_HEAD("v", "[a.com]") RULE(
                 "{withoutHeaders: {x-e: {exact: bad}, x-gone: {}}}", "ok"));
    assert_string_equal(where(f, "a.com", "/", NULL), C("ok"));
    assert_string_equal(where(f, "a.com", "/", "x-e: good"), C("ok"));
    assert_string_equal(where(f, "a.com", "/", "x-e: bad"), "404");
    assert_string_equal(where(f, "a.com", "/", "x-gone: 1"), "404");
}

static void test_query_params(void **state)
{
    struct fx *f = *state;

    build(f, VS_HEAD("v", "[a.com]") RULE("{queryParams: {q: {exact: 1}}}", "e")
                 RULE("{queryParams: {r: {regex: '[0-9]+'}}}", "r")
                     RULE("{queryParams: {enc: {exact: 'a%20b'}}}", "enc"));
    assert_string_equal(where(f, "a.com", "/?q=1", NULL), C("e"));
    assert_string_equal(where(f, "a.com", "/x?a=2&q=1&b", NULL), C("e"));
    assert_string_equal(where(f, "a.com", "/?q=12", NULL), "404");
    assert_string_equal(where(f, "a.com", "/?qq=1", NULL), "404");
    /* The first occurrence counts. */
    assert_string_equal(where(f, "a.com", "/?q=2&q=1", NULL), "404");
    assert_string_equal(where(f, "a.com", "/?r=123", NULL), C("r"));
    assert_string_equal(where(f, "a.com", "/?r=12x", NULL), "404");
    assert_string_equal(where(f, "a.com", "/?r=", NULL), "404");
    /* Values are compared as written, not decoded. */
    assert_string_equal(where(f, "a.com", "/?enc=a%20b", NULL), C("enc"));
    assert_string_equal(where(f, "a.com", "/?enc=a b", NULL), "404");
    assert_string_equal(where(f, "a.com", "/q=1", NULL), "404");
}

static void test_port(void **state)
{
    struct fx *f = *state;
    struct route_result res;
    struct http_request q;

    build(f,
          VS_HEAD("v", "[a.com]") RULE("{port: 8080}", "p8080") CATCH("other"));
    q = req(f, "a.com:8080", "/", NULL);
    assert_string_equal(where_r(f, &q, 8080, 0, &res), C("p8080"));
    assert_string_equal(where_r(f, &q, 80, 0, &res), C("other"));
}

/* ---- hosts, order, blocks ----------------------------------------------- */

static void test_host_precedence(void **state)
{
    struct fx *f = *state;

    build(f, VS_HEAD("all", "['*']")
                 CATCH("all") "---\n" VS_HEAD("wild", "['*.example.com']")
                     CATCH("wild") "---\n" VS_HEAD("exact", "[a.example.com]")
                         CATCH("exact") "---\n" VS_HEAD(
                             "deep", "['*.b.example.com']") CATCH("deep"));
    assert_string_equal(where(f, "a.example.com", "/", NULL), C("exact"));
    assert_string_equal(where(f, "A.Example.COM:8080", "/", NULL), C("exact"));
    assert_string_equal(where(f, "x.example.com", "/", NULL), C("wild"));
    assert_string_equal(where(f, "x.y.example.com", "/", NULL), C("wild"));
    assert_string_equal(where(f, "x.b.example.com", "/", NULL), C("deep"));
    assert_string_equal(where(f, "b.example.com", "/", NULL), C("wild"));
    assert_string_equal(where(f, "example.com", "/", NULL), C("all"));
    assert_string_equal(where(f, "other.org", "/", NULL), C("all"));
    assert_string_equal(where(f, "", "/", NULL), C("all"));
    assert_string_equal(where(f, "[::1]:80", "/", NULL), C("all"));
}

static void test_no_vhost(void **state)
{
    struct fx *f = *state;

    build(f, VS_HEAD("v", "[a.com]") CATCH("a"));
    assert_string_equal(where(f, "a.com", "/", NULL), C("a"));
    assert_string_equal(where(f, "b.com", "/", NULL), "404");
}

static void test_rule_order_and_merge(void **state)
{
    struct fx *f = *state;

    /* Two VirtualServices for one host: the first's rules come first, and
     * within one the first match wins. */
    build(f, VS_HEAD("one", "[a.com]") RULE("{uri: {prefix: /a}}", "one-a")
                 RULE("{uri: {prefix: /}}",
                      "one-root") "---\n" VS_HEAD("two", "[a.com, b.com]")
                     RULE("{uri: {prefix: /a}}", "two-a")
                         RULE("{uri: {prefix: /b}}", "two-b") CATCH("two-all"));
    assert_string_equal(where(f, "a.com", "/a", NULL), C("one-a"));
    assert_string_equal(where(f, "a.com", "/b", NULL), C("one-root"));
    assert_string_equal(where(f, "b.com", "/a", NULL), C("two-a"));
    assert_string_equal(where(f, "b.com", "/b", NULL), C("two-b"));
    assert_string_equal(where(f, "b.com", "/c", NULL), C("two-all"));
}

static void test_or_and(void **state)
{
    struct fx *f = *state;
    struct route_result res;
    struct http_request q;

    build(f, VS_HEAD("v", "[a.com]")
                 RULE("{uri: {prefix: /x}, headers: {h: {exact: '1'}}}, "
                      "{uri: {prefix: /y}, method: {exact: PUT}}",
                      "hit"));
    assert_string_equal(where(f, "a.com", "/x", "h: 1"), C("hit"));
    assert_string_equal(where(f, "a.com", "/x", "h: 2"), "404");
    assert_string_equal(where(f, "a.com", "/x", NULL), "404");
    assert_string_equal(where(f, "a.com", "/y", "h: 1"), "404");
    q = req_full(f, "PUT", "http", "a.com", "/y", NULL);
    assert_string_equal(where_r(f, &q, 80, 0, &res), C("hit"));
    assert_int_equal(res.match, 1);
    q = req_full(f, "PUT", "http", "a.com", "/x", "h: 1");
    assert_string_equal(where_r(f, &q, 80, 0, &res), C("hit"));
    assert_int_equal(res.match, 0);
}

/* ---- actions ------------------------------------------------------------ */

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* share() routes n requests with random values and returns the share of
 * each of two cluster keys. */
static void share(struct fx *f, const char *authority, const char *hdrs,
                  const char *k1, const char *k2, double *s1, double *s2)
{
    struct http_request q = req(f, authority, "/", hdrs);
    uint64_t seed = 0x853c49e6748fea9bull;
    int n1 = 0, n2 = 0, n = 100000;

    for (int i = 0; i < n; i++) {
        struct route_result res;
        const char *w = where_r(f, &q, 80, xorshift(&seed), &res);
        n1 += strcmp(w, k1) == 0;
        n2 += strcmp(w, k2) == 0;
    }
    *s1 = (double)n1 / n;
    *s2 = (double)n2 / n;
}

static void test_weights(void **state)
{
    struct fx *f = *state;
    double a, b;

    build(f, VS_HEAD("v",
                     "[a.com]") "  - route:\n"
                                "    - {destination: {host: a}, weight: 90}\n"
                                "    - {destination: {host: b}, weight: 10}\n");
    share(f, "a.com", NULL, C("a"), C("b"), &a, &b);
    printf("weights 90/10: %.4f / %.4f\n", a, b);
    assert_true(a > 0.89 && a < 0.91);
    assert_true(b > 0.09 && b < 0.11);
    assert_true(a + b > 0.9999);
    /* random % total: every value of a full cycle lands as weighted. */
    {
        struct route_result res;
        struct http_request q = req(f, "a.com", "/", NULL);
        int na = 0;
        for (uint64_t i = 0; i < 100; i++)
            na += strcmp(where_r(f, &q, 80, i, &res), C("a")) == 0;
        assert_int_equal(na, 90);
        assert_int_equal(router_pick_destination(res.action, 89), 0);
        assert_int_equal(router_pick_destination(res.action, 90), 1);
        assert_int_equal(router_pick_destination(res.action, 199), 1);
        assert_int_equal(router_pick_destination(NULL, 1), -1);
    }
}

static void test_unknown_host_is_uh(void **state)
{
    struct fx *f = *state;

    build(f, VS_HEAD("v", "[a.com]") CATCH("unknown-svc"));
    assert_string_equal(where(f, "a.com", "/", NULL), "UH");
}

static const char *rewrite(struct fx *f, const char *path, const char *hdrs)
{
    struct route_result res;
    struct http_request q = req(f, "a.com", path, hdrs);
    struct slice s;

    assert_non_null(router_match(f->r, &q, 80, 0, &f->arena, &res));
    s = router_rewrite_path(&res, &q, &f->arena);
    assert_non_null(s.p);
    return arena_dup(&f->arena, s.p, s.n);
}

#define RW_RULE(cond, uri)                                                     \
    "  - match: [" cond "]\n"                                                  \
    "    rewrite: {uri: '" uri "'}\n"                                          \
    "    route: [{destination: {host: d}}]\n"

static void test_rewrite(void **state)
{
    struct fx *f = *state;

    build(
        f,
        VS_HEAD("v", "[a.com]") RW_RULE("{uri: {prefix: /foo}}", "/bar")
            RW_RULE("{uri: {prefix: /strip}}",
                    "/") RW_RULE("{uri: {prefix: /slash/}}",
                                 "/") RW_RULE("{uri: {exact: /ex}}", "/new")
                RW_RULE("{uri: {regex: '/re/.*'}}", "/fromre") RW_RULE(
                    "{headers: {h: {}}}",
                    "/h") "  - match: [{uri: {prefix: /rx}}]\n"
                          "    rewrite:\n"
                          "      uriRegexRewrite: {match: "
                          "'^/rx/([^/]+)/(.*)$', rewrite: "
                          "'/\\2/\\1'}\n"
                          "    route: [{destination: {host: d}}]\n"
                          "  - match: [{uri: {prefix: /all}}]\n"
                          "    rewrite:\n"
                          "      uriRegexRewrite: {match: 'a', rewrite: 'A'}\n"
                          "    route: [{destination: {host: d}}]\n"
                          "  - match: [{uri: {prefix: /none}}]\n"
                          "    route: [{destination: {host: d}}]\n");
    assert_string_equal(rewrite(f, "/foo/x", NULL), "/bar/x");
    assert_string_equal(rewrite(f, "/foo", NULL), "/bar");
    assert_string_equal(rewrite(f, "/foox?q=1", NULL), "/barx?q=1");
    assert_string_equal(rewrite(f, "/strip/x", NULL), "/x");
    assert_string_equal(rewrite(f, "/strip", NULL), "/");
    assert_string_equal(rewrite(f, "/strip//x?y", NULL), "/x?y");
    assert_string_equal(rewrite(f, "/slash/x", NULL), "/x");
    assert_string_equal(rewrite(f, "/ex?a=b", NULL), "/new?a=b");
    assert_string_equal(rewrite(f, "/re/1/2?z", NULL), "/fromre?z");
    /* No uri condition: Istio's route is prefix "/", so "/" is swapped. */
    assert_string_equal(rewrite(f, "/p/q", "h: 1"), "/hp/q");
    assert_string_equal(rewrite(f, "/rx/one/two/three?k=v", NULL),
                        "/two/three/one?k=v");
    assert_string_equal(rewrite(f, "/all/banana?a=a", NULL), "/All/bAnAnA?a=a");
    assert_string_equal(rewrite(f, "/none/x?y", NULL), "/none/x?y");
}

static const char *redirect(struct fx *f, const char *scheme,
                            const char *authority, const char *path,
                            uint32_t port, int *code)
{
    struct route_result res;
    struct http_request q = req_full(f, "GET", scheme, authority, path, NULL);
    const struct route_action *a;

    a = router_match(f->r, &q, port, 0, &f->arena, &res);
    assert_non_null(a);
    assert_int_equal(a->kind, ROUTE_REDIRECT);
    *code = a->redirect.code;
    return router_redirect_location(&res, &q, &f->arena);
}

#define RD_RULE(prefix, redir)                                                 \
    "  - match: [{uri: {prefix: " prefix "}}]\n"                               \
    "    redirect: " redir "\n"

static void test_redirect(void **state)
{
    struct fx *f = *state;
    int code;

    build(f, VS_HEAD("v", "['*']") RD_RULE("/uri", "{uri: /new}")
                 RD_RULE("/authport", "{authority: 'other.com:9000'}")
                     RD_RULE("/auth", "{authority: other.com}")
                         RD_RULE("/port", "{port: 8443, redirectCode: 308}")
                             RD_RULE("/tls443", "{scheme: https, port: 443}")
                                 RD_RULE("/tls", "{scheme: https}")
                                     RD_RULE("/derive",
                                             "{derivePort: FROM_REQUEST_PORT}")
                                         RD_RULE("/q", "{uri: '/n?x=1'}"));
    assert_string_equal(redirect(f, "http", "a.com", "/uri/x?k=v", 80, &code),
                        "http://a.com/new?k=v");
    assert_int_equal(code, 301);
    assert_string_equal(redirect(f, "http", "a.com:8080", "/auth", 8080, &code),
                        "http://other.com/auth");
    assert_string_equal(redirect(f, "http", "a.com", "/authport?z", 80, &code),
                        "http://other.com:9000/authport?z");
    assert_string_equal(redirect(f, "https", "a.com", "/port", 443, &code),
                        "https://a.com:8443/port");
    assert_int_equal(code, 308);
    assert_string_equal(redirect(f, "http", "a.com:8080", "/tls", 8080, &code),
                        "https://a.com/tls");
    assert_string_equal(redirect(f, "http", "a.com", "/tls443", 80, &code),
                        "https://a.com/tls443");
    assert_string_equal(redirect(f, "http", "a.com", "/derive", 8081, &code),
                        "http://a.com:8081/derive");
    assert_string_equal(redirect(f, "http", "a.com", "/derive", 80, &code),
                        "http://a.com/derive");
    assert_string_equal(redirect(f, "http", "a.com", "/q?y=2", 80, &code),
                        "http://a.com/n?x=1");
}

static void test_direct_response(void **state)
{
    struct fx *f = *state;
    struct route_result res;
    struct http_request q;
    const struct route_action *a;

    build(f, VS_HEAD("v", "[a.com]") "  - match: [{uri: {exact: /s}}]\n"
                                     "    directResponse: {status: 503, body: "
                                     "{string: 'down'}}\n"
                                     "  - match: [{uri: {exact: /b}}]\n"
                                     "    directResponse: {status: 200, body: "
                                     "{bytes: 'aGVsbG8='}}\n"
                                     "  - directResponse: {status: 204}\n");
    q = req(f, "a.com", "/s", NULL);
    a = router_match(f->r, &q, 80, 0, &f->arena, &res);
    assert_non_null(a);
    assert_int_equal(a->kind, ROUTE_DIRECT);
    assert_int_equal(a->direct.status, 503);
    assert_true(slice_eq_str(a->direct.body, "down"));
    q = req(f, "a.com", "/b", NULL);
    a = router_match(f->r, &q, 80, 0, &f->arena, &res);
    assert_int_equal(a->direct.status, 200);
    assert_true(slice_eq_str(a->direct.body, "hello"));
    q = req(f, "a.com", "/other", NULL);
    a = router_match(f->r, &q, 80, 0, &f->arena, &res);
    assert_int_equal(a->direct.status, 204);
    assert_int_equal(a->direct.body.n, 0);
}

static void test_shadow_authority(void **state)
{
    struct fx *f = *state;
    static const char *const cases[][2] = {
        {"a.example", "a.example-shadow"},
        {"a.example:8080", "a.example-shadow:8080"},
        {"10.0.0.1:80", "10.0.0.1-shadow:80"},
        {"[::1]:443", "[::1]-shadow:443"},
        {"[::1]", "[::1]-shadow"},
        {"host:", "host-shadow:"},
        {"", "-shadow"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct slice out =
            router_shadow_authority(slice_of(cases[i][0]), &f->arena);
        assert_non_null(out.p);
        assert_int_equal(out.n, strlen(cases[i][1]));
        assert_memory_equal(out.p, cases[i][1], out.n);
    }
}

static void test_policies(void **state)
{
    struct fx *f = *state;
    struct route_result res;
    struct http_request q;
    const struct route_action *a;

    build(
        f,
        VS_HEAD(
            "v",
            "[a.com]") "  - name: main\n"
                       "    timeout: 1.5s\n"
                       "    retries: {attempts: 3, perTryTimeout: 200ms, "
                       "retryOn: "
                       "'5xx,connect-failure,429'}\n"
                       "    mirror: {host: shadow, port: {number: 81}}\n"
                       "    mirrorPercentage: {value: 25}\n"
                       "    corsPolicy:\n"
                       "      allowOrigins: [{exact: 'https://x.com'}, {regex: "
                       "'https://.*\\.y\\.com'}]\n"
                       "      allowMethods: [GET, POST]\n"
                       "      maxAge: 24h\n"
                       "      allowCredentials: true\n"
                       "    route: [{destination: {host: d, subset: v1, port: "
                       "{number: "
                       "9080}}}]\n");
    q = req(f, "a.com", "/", NULL);
    a = router_match(f->r, &q, 80, 0, &f->arena, &res);
    assert_non_null(a);
    assert_string_equal(a->name, "main");
    assert_string_equal(a->vs, "default/v");
    assert_string_equal(f->names[a->dests[0].cluster],
                        "d.default.svc.cluster.local|v1|9080");
    assert_int_equal(a->timeout_ms, 1500);
    assert_int_equal(a->retry.attempts, 3);
    assert_int_equal(a->retry.per_try_timeout_ms, 200);
    assert_int_equal(a->retry.on, ROUTE_RETRY_5XX |
                                      ROUTE_RETRY_CONNECT_FAILURE |
                                      ROUTE_RETRY_RETRIABLE_STATUS_CODES);
    assert_int_equal(a->retry.nstatuses, 1);
    assert_int_equal(a->retry.statuses[0], 429);
    assert_true(a->mirror.enabled);
    assert_string_equal(f->names[a->mirror.cluster],
                        "shadow.default.svc.cluster.local||81");
    assert_int_equal(a->mirror.ppm, 250000);
    assert_non_null(a->cors);
    assert_true(slice_eq_str(a->cors->allow_methods, "GET,POST"));
    assert_int_equal(a->cors->max_age_ms, 24 * 3600 * 1000);
    assert_true(a->cors->allow_credentials);
    assert_true(router_cors_origin_allowed(a->cors, slice_of("https://x.com"),
                                           &f->arena));
    assert_true(router_cors_origin_allowed(a->cors, slice_of("https://a.y.com"),
                                           &f->arena));
    assert_false(router_cors_origin_allowed(
        a->cors, slice_of("https://x.com.evil"), &f->arena));
    /* Mirroring is drawn at 25%. */
    {
        uint64_t seed = 42;
        int n = 0;
        for (int i = 0; i < 100000; i++) {
            router_match(f->r, &q, 80, xorshift(&seed), &f->arena, &res);
            n += res.mirror;
        }
        assert_true(n > 24000 && n < 26000);
    }
    /* The deprecated integer mirrorPercent, and 100% without either. */
    build(f, VS_HEAD("v", "[a.com]") "  - mirror: {host: shadow}\n"
                                     "    mirrorPercent: 60\n"
                                     "    route: [{destination: {host: d}}]\n");
    q = req(f, "a.com", "/", NULL);
    a = router_match(f->r, &q, 80, 0, &f->arena, &res);
    assert_int_equal(a->mirror.ppm, 600000);
    {
        /* Within 6 standard deviations of 60% over n draws. */
        uint64_t seed = 7;
        int n = 0, draws = 20000;
        double sd = 6 * 0.0034641; /* sqrt(0.6 * 0.4 / 20000) */
        for (int i = 0; i < draws; i++) {
            router_match(f->r, &q, 80, xorshift(&seed), &f->arena, &res);
            n += res.mirror;
        }
        assert_true(n > (int)((0.6 - sd) * draws) &&
                    n < (int)((0.6 + sd) * draws));
    }
    build(f, VS_HEAD("v", "[a.com]") "  - mirror: {host: shadow}\n"
                                     "    route: [{destination: {host: d}}]\n");
    q = req(f, "a.com", "/", NULL);
    a = router_match(f->r, &q, 80, 0, &f->arena, &res);
    assert_int_equal(a->mirror.ppm, ROUTE_PPM);
    {
        uint64_t seed = 9;
        for (int i = 0; i < 1000; i++) {
            router_match(f->r, &q, 80, xorshift(&seed), &f->arena, &res);
            assert_true(res.mirror);
        }
    }
    /* Istio's default retry policy when none is written. */
    build(f, VS_HEAD("v", "[a.com]") CATCH("d"));
    q = req(f, "a.com", "/", NULL);
    a = router_match(f->r, &q, 80, 0, &f->arena, &res);
    assert_int_equal(a->retry.attempts, 2);
    assert_true(a->retry.on & ROUTE_RETRY_CONNECT_FAILURE);
    assert_true(a->retry.on & ROUTE_RETRY_RETRIABLE_STATUS_CODES);
    assert_int_equal(a->retry.statuses[0], 503);
    assert_int_equal(a->timeout_ms, 0);
    assert_false(a->mirror.enabled);
    assert_null(a->cors);
}

static void test_header_ops(void **state)
{
    struct fx *f = *state;
    struct route_result res;
    struct http_request q;
    struct http_fields out = {0};
    const struct http_field *h;

    build(f, VS_HEAD("v", "[a.com]") "  - headers:\n"
                                     "      request: {set: {x-order: route, "
                                     "X-Route: r}, remove: "
                                     "[x-drop]}\n"
                                     "      response: {add: {x-resp: r}}\n"
                                     "    route:\n"
                                     "    - destination: {host: d}\n"
                                     "      headers:\n"
                                     "        request: {set: {x-order: dest}, "
                                     "add: {x-dest: d}}\n");
    q = req(f, "a.com", "/", "x-drop: 1\nx-keep: 1");
    assert_non_null(router_match(f->r, &q, 80, 0, &f->arena, &res));
    assert_int_equal(router_apply_headers(&res, 0, &q.fields, &f->arena), 0);
    assert_null(http_fields_get(&q.fields, "x-drop"));
    assert_non_null(http_fields_get(&q.fields, "x-keep"));
    /* Destination first, then route: the route's set wins. */
    h = http_fields_get(&q.fields, "x-order");
    assert_non_null(h);
    assert_true(slice_eq_str(h->value, "route"));
    assert_non_null(http_fields_get(&q.fields, "x-route"));
    assert_non_null(http_fields_get(&q.fields, "x-dest"));
    assert_int_equal(router_apply_headers(&res, 1, &out, &f->arena), 0);
    h = http_fields_get(&out, "x-resp");
    assert_non_null(h);
    assert_true(slice_eq_str(h->value, "r"));
}

static void test_fault(void **state)
{
    struct fx *f = *state;
    struct route_result res;
    struct http_request q;
    uint64_t seed = 7;
    int delays = 0, aborts = 0;

    build(f, VS_HEAD("v", "[a.com]") "  - fault:\n"
                                     "      delay: {fixedDelay: 2s, "
                                     "percentage: {value: 10}}\n"
                                     "      abort: {httpStatus: 503, "
                                     "percentage: {value: 50}}\n"
                                     "    route: [{destination: {host: d}}]\n");
    q = req(f, "a.com", "/", NULL);
    for (int i = 0; i < 100000; i++) {
        assert_non_null(
            router_match(f->r, &q, 80, xorshift(&seed), &f->arena, &res));
        if (res.delay_ms) {
            assert_int_equal(res.delay_ms, 2000);
            delays++;
        }
        if (res.abort_status) {
            assert_int_equal(res.abort_status, 503);
            aborts++;
        }
    }
    assert_true(delays > 9000 && delays < 11000);
    assert_true(aborts > 49000 && aborts < 51000);
}

/* ---- regular expressions ------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_regex_bounded(void **state)
{
    struct fx *f = *state;
    char *hdr = malloc(20000);
    double t0, t;

    /* (a+)+ backtracks exponentially on "aaa...!" when it fails. */
    build(f, VS_HEAD("v", "[a.com]") RULE("{headers: {x: {regex: '(a+)+'}}}",
                                          "re") CATCH("fallback"));
    strcpy(hdr, "x: ");
    memset(hdr + 3, 'a', 10000);
    strcpy(hdr + 10003, "!");
    t0 = now_s();
    assert_string_equal(where(f, "a.com", "/", hdr), C("fallback"));
    t = now_s() - t0;
    printf("catastrophic regex on 10,000 bytes: %.3f s (no match)\n", t);
    assert_true(t < 2.0);
    /* The same pattern matches what it should. */
    hdr[10003] = '\0';
    assert_string_equal(where(f, "a.com", "/", hdr), C("re"));
    free(hdr);
}

static void test_bad_regex_fails_build(void **state)
{
    struct fx *f = *state;
    struct router_params p = {0};
    struct res_http_route *h;
    struct res_http_match *m;
    char *err = NULL;

    /* The loader refuses a bad regex; the router refuses it too if handed
     * a set that skipped the checks. */
    build(f, VS_HEAD("v", "[a.com]") RULE("{uri: {regex: 'a+'}}", "x"));
    router_unref(f->r);
    f->r = NULL;
    h = (struct res_http_route *)res_virtual_service(f->set->v[0])->http.v;
    m = (struct res_http_match *)h->match.v;
    free(m->uri.regex);
    m->uri.regex = strdup("(a");
    p.set = f->set;
    p.servers = mesh_and_gw;
    p.nservers = NSERVERS;
    p.cluster_id = cluster_id;
    p.ctx = f;
    assert_null(router_build(&p, &err));
    assert_non_null(err);
    printf("expected error: %s\n", err);
    assert_non_null(strstr(err, "VirtualService default/v"));
    assert_non_null(strstr(err, "spec.http[0].match[0].uri"));
    free(err);
}

/* ---- binding ------------------------------------------------------------ */

#define GW_VS(name, ns, hosts, gws, dest)                                      \
    "apiVersion: networking.istio.io/v1\n"                                     \
    "kind: VirtualService\n"                                                   \
    "metadata: {name: " name ", namespace: " ns "}\n"                          \
    "spec:\n"                                                                  \
    "  hosts: " hosts "\n"                                                     \
    "  gateways: " gws "\n"                                                    \
    "  http: [{route: [{destination: {host: " dest "}}]}]\n"                   \
    "---\n"

static void test_binding(void **state)
{
    struct fx *f = *state;
    const struct router_server srv[] = {
        {"edge/gw",
         (const char *const[]){"*.example.com", "./own.org", "team/team.org",
                               "*/open.org"},
         4},
    };
    struct router_stats st;

    build_with(
        f,
        GW_VS("in", "default", "[a.example.com]", "[edge/gw]",
              "in") GW_VS("out", "default", "[a.other.com]", "[edge/gw]", "out")
            GW_VS("othergw", "default", "[b.example.com]", "[gw]", "og")
                GW_VS("short", "edge", "[c.example.com]", "[gw]", "short")
                    GW_VS("own", "edge", "[own.org]", "[gw]", "own") GW_VS(
                        "notown", "default", "[own.org]", "[edge/gw]", "notown")
                        GW_VS("team", "team", "[team.org]", "[edge/gw]", "team")
                            GW_VS("notteam", "default", "[team.org]",
                                  "[edge/gw]", "notteam")
                                GW_VS("open", "x", "[open.org]", "[edge/gw]",
                                      "open") GW_VS("star", "default", "['*']",
                                                    "[edge/gw]", "star")
                                    GW_VS("mesh", "default", "[d.example.com]",
                                          "[]", "mesh"),
        srv, 1);
    assert_string_equal(where(f, "a.example.com", "/", NULL),
                        "in.default.svc.cluster.local||0");
    assert_string_equal(where(f, "a.other.com", "/", NULL), "404");
    /* "gw" in namespace default is default/gw, not edge/gw. */
    assert_string_equal(where(f, "b.example.com", "/", NULL),
                        "star.default.svc.cluster.local||0");
    assert_string_equal(where(f, "c.example.com", "/", NULL),
                        "short.edge.svc.cluster.local||0");
    /* "./own.org": only the Gateway's namespace. */
    assert_string_equal(where(f, "own.org", "/", NULL),
                        "own.edge.svc.cluster.local||0");
    assert_string_equal(where(f, "team.org", "/", NULL),
                        "team.team.svc.cluster.local||0");
    assert_string_equal(where(f, "open.org", "/", NULL),
                        "open.x.svc.cluster.local||0");
    /* A VirtualService for "*" binds as the server's hosts, not as "*". */
    assert_string_equal(where(f, "z.example.com", "/", NULL),
                        "star.default.svc.cluster.local||0");
    assert_string_equal(where(f, "unrelated.net", "/", NULL), "404");
    /* Not bound to the mesh. */
    assert_string_equal(where(f, "d.example.com", "/", NULL),
                        "star.default.svc.cluster.local||0");
    router_get_stats(f->r, &st);
    assert_true(st.vhosts >= 5);
}

/* exportTo: a gateway in namespace ns binds only VirtualServices exported
 * to ns. */
static void test_export_to(void **state)
{
    struct fx *f = *state;
    const char *yaml = "apiVersion: networking.istio.io/v1\n"
                       "kind: VirtualService\n"
                       "metadata: {name: own, namespace: default}\n"
                       "spec:\n"
                       "  hosts: [own.com]\n"
                       "  gateways: [gw]\n"
                       "  exportTo: [.]\n"
                       "  http: [{route: [{destination: {host: own}}]}]\n"
                       "---\n"
                       "apiVersion: networking.istio.io/v1\n"
                       "kind: VirtualService\n"
                       "metadata: {name: listed, namespace: default}\n"
                       "spec:\n"
                       "  hosts: [listed.com]\n"
                       "  gateways: [gw]\n"
                       "  exportTo: [istio-system]\n"
                       "  http: [{route: [{destination: {host: listed}}]}]\n"
                       "---\n"
                       "apiVersion: networking.istio.io/v1\n"
                       "kind: VirtualService\n"
                       "metadata: {name: hidden, namespace: default}\n"
                       "spec:\n"
                       "  hosts: [hidden.com]\n"
                       "  gateways: [gw]\n"
                       "  exportTo: [\"~\"]\n"
                       "  http: [{route: [{destination: {host: hidden}}]}]\n"
                       "---\n"
                       "apiVersion: networking.istio.io/v1\n"
                       "kind: VirtualService\n"
                       "metadata: {name: all, namespace: default}\n"
                       "spec:\n"
                       "  hosts: [all.com]\n"
                       "  gateways: [gw]\n"
                       "  http: [{route: [{destination: {host: all}}]}]\n";

    f->node_ns = "istio-system";
    build(f, yaml);
    assert_string_equal(where(f, "own.com", "/", NULL), "404");
    assert_string_equal(where(f, "listed.com", "/", NULL), C("listed"));
    assert_string_equal(where(f, "hidden.com", "/", NULL), "404");
    assert_string_equal(where(f, "all.com", "/", NULL), C("all"));
    f->node_ns = "default";
    build(f, yaml);
    assert_string_equal(where(f, "own.com", "/", NULL), C("own"));
    assert_string_equal(where(f, "listed.com", "/", NULL), "404");
    assert_string_equal(where(f, "hidden.com", "/", NULL), "404");
    assert_string_equal(where(f, "all.com", "/", NULL), C("all"));
    f->node_ns = NULL;
}

/* delegate: the delegate's rules take the delegating rule's place, each
 * ANDed with its match; one level only. */
static void test_delegate(void **state)
{
    struct fx *f = *state;
    struct route_result res;
    struct http_request q;
    const struct route_action *a;

    build(
        f,
        VS_HEAD(
            "root",
            "[a.com]") "  - match: [{uri: {prefix: /shop}}, {uri: {prefix: "
                       "/store}}]\n"
                       "    delegate: {name: shop, namespace: team}\n"
                       "  - match: [{uri: {prefix: /gone}}]\n"
                       "    delegate: {name: missing}\n"
                       "  - match: [{uri: {prefix: /private}}]\n"
                       "    delegate: {name: private, namespace: team}\n" CATCH(
                           "fallback") "---\n"
                                       "apiVersion: networking.istio.io/v1\n"
                                       "kind: VirtualService\n"
                                       "metadata: {name: shop, namespace: "
                                       "team}\n"
                                       "spec:\n"
                                       "  http:\n"
                                       "  - match: [{uri: {prefix: "
                                       "/shop/cart}}]\n"
                                       "    route: [{destination: {host: "
                                       "cart}}]\n"
                                       "  - match: [{uri: {prefix: /other}}]\n"
                                       "    route: [{destination: {host: "
                                       "other}}]\n"
                                       "  - match: [{headers: {x-beta: {exact: "
                                       "\"1\"}}}]\n"
                                       "    route: [{destination: {host: "
                                       "beta}}]\n"
                                       "  - match: [{uri: {prefix: "
                                       "/shop/again}}]\n"
                                       "    delegate: {name: private}\n"
                                       "  - route: [{destination: {host: "
                                       "rest}}]\n"
                                       "---\n"
                                       "apiVersion: networking.istio.io/v1\n"
                                       "kind: VirtualService\n"
                                       "metadata: {name: private, namespace: "
                                       "team}\n"
                                       "spec:\n"
                                       "  exportTo: [.]\n"
                                       "  http: [{route: [{destination: {host: "
                                       "private}}]}]\n");
    assert_string_equal(where(f, "a.com", "/shop/cart/1", NULL),
                        "cart.team.svc.cluster.local||0");
    /* Either of the root's blocks admits the delegate's rules. */
    assert_string_equal(where(f, "a.com", "/store/x", NULL),
                        "rest.team.svc.cluster.local||0");
    /* The delegate cannot route outside the root rule's match. */
    assert_string_equal(where(f, "a.com", "/other", NULL), C("fallback"));
    assert_string_equal(where(f, "a.com", "/shop/x", "x-beta: 1"),
                        "beta.team.svc.cluster.local||0");
    assert_string_equal(where(f, "a.com", "/x", "x-beta: 1"), C("fallback"));
    assert_string_equal(where(f, "a.com", "/shop/x", NULL),
                        "rest.team.svc.cluster.local||0");
    /* One level only: the delegate's own delegate rule is left out. */
    assert_string_equal(where(f, "a.com", "/shop/again", NULL),
                        "rest.team.svc.cluster.local||0");
    /* A missing delegate, or one not exported to the root's namespace,
     * routes nothing: later rules answer. */
    assert_string_equal(where(f, "a.com", "/gone", NULL), C("fallback"));
    assert_string_equal(where(f, "a.com", "/private", NULL), C("fallback"));
    /* The delegate's rules carry its name, for the access log. */
    q = req(f, "a.com", "/shop/cart", NULL);
    a = router_match(f->r, &q, 80, 0, &f->arena, &res);
    assert_non_null(a);
    assert_string_equal(a->vs, "team/shop");
}

static void test_match_gateways(void **state)
{
    struct fx *f = *state;
    const struct router_server srv[] = {
        {"default/gw", (const char *const[]){"*"}, 1},
    };

    build_with(f,
               "apiVersion: networking.istio.io/v1\n"
               "kind: VirtualService\n"
               "metadata: {name: v, namespace: default}\n"
               "spec:\n"
               "  hosts: [a.com]\n"
               "  gateways: [gw, other]\n"
               "  http:\n"
               "  - match: [{uri: {prefix: /x}, gateways: [other]}]\n"
               "    route: [{destination: {host: other}}]\n"
               "  - match: [{uri: {prefix: /x}, gateways: [default/gw]}]\n"
               "    route: [{destination: {host: mine}}]\n"
               "  - match: [{uri: {prefix: /y}, sourceLabels: {app: z}}]\n"
               "    route: [{destination: {host: labelled}}]\n",
               srv, 1);
    assert_string_equal(where(f, "a.com", "/x", NULL), C("mine"));
    assert_string_equal(where(f, "a.com", "/y", NULL), "404");
}

/* ---- bookinfo ----------------------------------------------------------- */

static void test_bookinfo_gateway(void **state)
{
    struct fx *f = *state;
    struct route_result res;
    struct http_request q;

    build_file(f, SAMPLES "bookinfo-gateway.yaml");
    q = req(f, "bookinfo.example.com", "/productpage", NULL);
    assert_string_equal(where_r(f, &q, 8080, 0, &res),
                        "productpage.default.svc.cluster.local||9080");
    assert_string_equal(where(f, "1.2.3.4:8080", "/static/css/x.css", NULL),
                        "productpage.default.svc.cluster.local||9080");
    assert_string_equal(where(f, "x", "/api/v1/products/1", NULL),
                        "productpage.default.svc.cluster.local||9080");
    assert_string_equal(where(f, "x", "/login", NULL),
                        "productpage.default.svc.cluster.local||9080");
    assert_string_equal(where(f, "x", "/productpage/x", NULL), "404");
    assert_string_equal(where(f, "x", "/", NULL), "404");
}

#define REVIEWS "reviews.default.svc.cluster.local|"

static void test_bookinfo_reviews_split(void **state)
{
    struct fx *f = *state;
    double a, b;

    build_file(f, SAMPLES "virtual-service-reviews-90-10.yaml");
    share(f, "reviews:9080", NULL, REVIEWS "v1|0", REVIEWS "v2|0", &a, &b);
    printf("reviews 90/10: %.4f / %.4f\n", a, b);
    assert_true(a > 0.89 && a < 0.91 && b > 0.09 && b < 0.11);
    /* The mesh answers to the short names and the full one. */
    share(f, "reviews.default.svc.cluster.local", NULL, REVIEWS "v1|0",
          REVIEWS "v2|0", &a, &b);
    assert_true(a > 0.89 && a < 0.91);
    share(f, "reviews.default", NULL, REVIEWS "v1|0", REVIEWS "v2|0", &a, &b);
    assert_true(a > 0.89 && a < 0.91);

    build_file(f, SAMPLES "virtual-service-reviews-80-20.yaml");
    share(f, "reviews", NULL, REVIEWS "v1|0", REVIEWS "v2|0", &a, &b);
    printf("reviews 80/20: %.4f / %.4f\n", a, b);
    assert_true(a > 0.79 && a < 0.81 && b > 0.19 && b < 0.21);

    build_file(f, SAMPLES "virtual-service-reviews-50-v3.yaml");
    share(f, "reviews", NULL, REVIEWS "v1|0", REVIEWS "v3|0", &a, &b);
    printf("reviews 50/50: %.4f / %.4f\n", a, b);
    assert_true(a > 0.49 && a < 0.51 && b > 0.49 && b < 0.51);
}

static void test_bookinfo_jason(void **state)
{
    struct fx *f = *state;

    build_file(f, SAMPLES "virtual-service-reviews-jason-v2-v3.yaml");
    assert_string_equal(
        where(f, "reviews:9080", "/reviews/0", "end-user: jason"),
        REVIEWS "v2|0");
    assert_string_equal(
        where(f, "reviews:9080", "/reviews/0", "end-user: Jason"),
        REVIEWS "v3|0");
    assert_string_equal(where(f, "reviews:9080", "/reviews/0", NULL),
                        REVIEWS "v3|0");
}

static void test_bookinfo_ratings_faults(void **state)
{
    struct fx *f = *state;
    struct route_result res;
    struct http_request q;
    uint64_t seed = 99;

    build_file(f, SAMPLES "virtual-service-ratings-test-abort.yaml");
    q = req(f, "ratings:9080", "/ratings/0", "end-user: jason");
    for (int i = 0; i < 1000; i++) {
        assert_string_equal(where_r(f, &q, 80, xorshift(&seed), &res),
                            "ratings.default.svc.cluster.local|v1|0");
        assert_int_equal(res.abort_status, 500);
        assert_int_equal(res.delay_ms, 0);
    }
    q = req(f, "ratings:9080", "/ratings/0", NULL);
    where_r(f, &q, 80, 5, &res);
    assert_int_equal(res.abort_status, 0);

    build_file(f, SAMPLES "virtual-service-ratings-test-delay.yaml");
    q = req(f, "ratings", "/ratings/0", "end-user: jason");
    for (int i = 0; i < 1000; i++) {
        where_r(f, &q, 80, xorshift(&seed), &res);
        assert_int_equal(res.delay_ms, 7000);
        assert_int_equal(res.abort_status, 0);
    }
    q = req(f, "ratings", "/ratings/0", "end-user: bob");
    where_r(f, &q, 80, 5, &res);
    assert_int_equal(res.delay_ms, 0);
}

static void test_bookinfo_details_v2(void **state)
{
    struct fx *f = *state;

    build_file(f, SAMPLES "virtual-service-details-v2.yaml");
    assert_string_equal(where(f, "details:9080", "/details/0", NULL),
                        "details.default.svc.cluster.local|v2|0");
    assert_string_equal(where(f, "ratings:9080", "/", NULL), "404");
}

/* ---- scale -------------------------------------------------------------- */

static void test_ten_thousand(void **state)
{
    struct fx *f = *state;
    struct buf y;
    struct router_params p = {0};
    struct router_stats st;
    char *err = NULL;
    int nerr = 0;
    double t0, t_load, t_build, t_match;
    const int n = 10000;

    fx_reset(f);
    buf_init(&y, 64u << 20);
    for (int i = 0; i < n; i++)
        buf_printf(&y,
                   "apiVersion: networking.istio.io/v1\n"
                   "kind: VirtualService\n"
                   "metadata: {name: vs%d, namespace: default}\n"
                   "spec:\n"
                   "  hosts: [h%d.example.com]\n"
                   "  gateways: [gw]\n"
                   "  http:\n"
                   "  - match: [{uri: {prefix: /api}, headers: {x-v: "
                   "{exact: '2'}}}]\n"
                   "    route: [{destination: {host: s%d, subset: v2}}]\n"
                   "  - route: [{destination: {host: s%d, subset: v1}}]\n"
                   "---\n",
                   i, i, i, i);
    t0 = now_s();
    f->set =
        resource_load_mem(buf_ptr(&y), buf_len(&y), "big.yaml", NULL, &nerr);
    t_load = now_s() - t0;
    buf_dispose(&y);
    assert_non_null(f->set);
    assert_int_equal(nerr, 0);
    assert_int_equal(f->set->n, n);
    p.set = f->set;
    p.servers = mesh_and_gw;
    p.nservers = NSERVERS;
    p.cluster_id = cluster_id;
    p.ctx = f;
    t0 = now_s();
    f->r = router_build(&p, &err);
    t_build = now_s() - t0;
    assert_non_null(f->r);
    router_get_stats(f->r, &st);
    assert_int_equal(st.vhosts, n);
    assert_int_equal(st.rules, 2 * n);
    t0 = now_s();
    for (int i = 0; i < n; i++) {
        char host[64], want[128];
        const char *w;
        snprintf(host, sizeof(host), "H%d.example.com:443", i);
        snprintf(want, sizeof(want), "s%d.default.svc.cluster.local|v%d|0", i,
                 1 + (i % 2));
        w = where(f, host, i % 2 ? "/api/x" : "/web", "x-v: 2");
        assert_string_equal(w, want);
        /* Keep the arena small across 10,000 requests. */
        arena_dispose(&f->arena);
    }
    t_match = now_s() - t0;
    printf("10,000 VirtualServices: load %.3f s, build %.3f s, %zu KiB; "
           "%.2f us per match (with asserts)\n",
           t_load, t_build, st.bytes / 1024, t_match / n * 1e6);
}

/* router_new() (proxy/router.c): an empty router has nothing to match,
 * holds no rules, and goes with its last reference. */
static void test_empty_router(void **state)
{
    struct fx *f = *state;
    struct router *r = router_new();
    struct router_stats st;
    struct route_result res;
    struct http_request q = req(f, "a.example.com", "/", NULL);

    assert_non_null(r);
    router_get_stats(r, &st);
    assert_int_equal(st.vhosts, 0);
    assert_int_equal(st.rules, 0);
    assert_int_equal(st.actions, 0);
    assert_int_equal(st.regexes, 0);
    assert_null(router_match(r, &q, 80, 0, &f->arena, &res));
    assert_ptr_equal(router_ref(r), r);
    router_unref(r);
    router_unref(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_empty_router, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uri, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_to, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delegate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_method_scheme_authority, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_headers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_without_headers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_port, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_vhost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rule_order_and_merge, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_or_and, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weights, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_host_is_uh, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rewrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redirect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_direct_response, setup, teardown),
        cmocka_unit_test_setup_teardown(test_policies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_ops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regex_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_regex_fails_build, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_binding, setup, teardown),
        cmocka_unit_test_setup_teardown(test_match_gateways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bookinfo_gateway, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bookinfo_reviews_split, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bookinfo_jason, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bookinfo_ratings_faults, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bookinfo_details_v2, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ten_thousand, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shadow_authority, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
