/*
 * libFuzzer target for the router's request side: one router (built once
 * from VirtualServices that use every condition type, regex rewrites and
 * redirects) matches requests made from the input. The input's lines are
 * the authority, the path, the method, then "name: value" header lines.
 * Every outcome is acceptable; crashes, leaks and runaway regexes are not.
 * Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/resource.h"
#include "core/arena.h"
#include "http/http.h"
#include "compile/router.h"
#include "proxy/router.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char routes_yaml[] =
    "apiVersion: networking.istio.io/v1\n"
    "kind: VirtualService\n"
    "metadata: {name: f, namespace: default}\n"
    "spec:\n"
    "  hosts: ['*', 'a.example.com', '*.example.com']\n"
    "  gateways: [gw]\n"
    "  http:\n"
    "  - match:\n"
    "    - {uri: {regex: '/(a+)+x'}, headers: {x-r: {regex: '(\\w+\\s?)+'}}}\n"
    "    - {queryParams: {q: {regex: '[0-9]+'}}, method: {exact: GET}}\n"
    "    rewrite: {uriRegexRewrite: {match: '(a*)', rewrite: '<\\1>'}}\n"
    "    route: [{destination: {host: a}, weight: 3}, {destination: {host: "
    "b}, weight: 1}]\n"
    "  - match: [{uri: {prefix: /p}, ignoreUriCase: true, withoutHeaders: "
    "{x-n: {}}}]\n"
    "    rewrite: {uri: /}\n"
    "    route: [{destination: {host: a}}]\n"
    "  - match: [{uri: {prefix: /r}}]\n"
    "    redirect: {scheme: https, derivePort: FROM_REQUEST_PORT}\n"
    "  - match: [{authority: {regex: '.*\\.example\\.com(:[0-9]+)?'}}]\n"
    "    redirect: {uri: /moved, authority: 'b.example.com:8443'}\n"
    "  - headers: {request: {set: {x-s: v}, remove: [x-r]}}\n"
    "    route: [{destination: {host: c}}]\n";

static int cluster(void *ctx, const char *host, const char *subset,
                   uint32_t port)
{
    (void)ctx;
    (void)subset;
    (void)port;
    return host[0] == 'c' ? -1 : (int)(unsigned char)host[0];
}

static struct router *the_router(void)
{
    static struct router *r;
    static const char *const hosts[] = {"*"};
    static const struct router_server srv = {"default/gw", hosts, 1};
    struct resource_set *set;
    struct router_params p = {0};
    char *err = NULL;
    int nerr = 0;

    if (r != NULL)
        return r;
    set = resource_load_mem(routes_yaml, sizeof(routes_yaml) - 1, "f.yaml",
                            NULL, &nerr);
    if (set == NULL || nerr != 0)
        abort();
    p.set = set;
    p.servers = &srv;
    p.nservers = 1;
    p.cluster_id = cluster;
    r = router_build(&p, &err);
    if (r == NULL)
        abort();
    /* The router copies what it keeps. */
    resource_set_free(set);
    return r;
}

/* next_line() returns the bytes up to the next '\n' and advances. */
static struct slice next_line(const char **p, const char *end)
{
    const char *s = *p, *nl = memchr(s, '\n', (size_t)(end - s));
    struct slice out = {s, (size_t)((nl ? nl : end) - s)};

    *p = nl ? nl + 1 : end;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    struct router *r = the_router();
    struct http_request req;
    struct route_result res;
    struct arena a;
    uint64_t random = size > 0 ? data[0] * 0x9e3779b97f4a7c15ull : 0;

    arena_init(&a, 4096);
    memset(&req, 0, sizeof(req));
    req.authority = next_line(&p, end);
    req.path = next_line(&p, end);
    req.method = next_line(&p, end);
    req.scheme = SLICE_LIT("http");
    while (p < end) {
        struct slice l = next_line(&p, end);
        const char *colon = memchr(l.p, ':', l.n);
        if (colon == NULL)
            continue;
        if (http_fields_add(
                &req.fields, &a, (struct slice){l.p, (size_t)(colon - l.p)},
                (struct slice){colon + 1, l.n - (size_t)(colon + 1 - l.p)},
                64) < 0)
            break;
    }
    if (router_match(r, &req, 8080, random, &a, &res) != NULL) {
        struct slice path = router_rewrite_path(&res, &req, &a);
        (void)path;
        (void)router_redirect_location(&res, &req, &a);
        (void)router_apply_headers(&res, 0, &req.fields, &a);
        (void)router_apply_headers(&res, 1, &req.fields, &a);
    }
    /* A mirrored copy's Host is built from whatever authority came in. */
    {
        struct slice sh = router_shadow_authority(req.authority, &a);
        if (sh.p != NULL && sh.n != req.authority.n + 7)
            __builtin_trap();
    }
    arena_dispose(&a);
    return 0;
}
