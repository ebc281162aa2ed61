#ifndef STRAIT_POLICY_LUA_HTTP_H
#define STRAIT_POLICY_LUA_HTTP_H

/*
 * strait.http.request: the Lua side (src/policy/lua_http.c) parses the
 * call and suspends the coroutine; the proxy (src/proxy/lua_http.c),
 * which knows the registry's clusters and their pools, sends it. The
 * proxy lends its functions through struct luahttp_ops, so this layer
 * names nothing of upstream/ or proxy/.
 */

#include <stddef.h>
#include <stdint.h>

#include "core/slice.h"
#include "http/http.h"

struct luavm;

/* One call, as the script asked. Everything is only read, and only
 * during start(): the proxy copies what it keeps. */
struct luahttp_req {
    const char *host; /* a registry host, as a VirtualService names it */
    uint32_t port;
    struct slice method;
    struct slice path;
    const struct http_field *fields;
    size_t nfields;
    struct slice body;   /* p NULL: no body */
    uint64_t timeout_ms; /* > 0 */
    size_t max_response; /* the most body bytes taken of the answer */
};

/* The answer: err NULL and status, fields, body; or err (a static
 * reason: "timeout", "upstream unavailable", "response too large").
 * Valid only during the done callback. */
struct luahttp_res {
    const char *err;
    int status;
    const struct http_field *fields;
    size_t nfields;
    const char *body;
    size_t body_len;
};

/* Called once per started call that was not cancelled, never inside
 * start() or cancel(), and never while Lua runs. */
typedef void (*luahttp_done_fn)(void *arg, const struct luahttp_res *res);

struct luahttp_ops {
    /* Starts a call: the proxy's handle, or NULL with *why (static:
     * "unknown host", "too many calls in flight", "out of memory"). */
    void *(*start)(void *env, const struct luahttp_req *req,
                   luahttp_done_fn done, void *arg, const char **why);
    /* Stops a call whose done has not run yet: it never will. */
    void (*cancel)(void *env, void *call);
};

/* luavm_set_http() lends vm the proxy's calls (ops and env must outlive
 * vm). Without it, strait.http.request returns nil, "unknown host". */
void luavm_set_http(struct luavm *vm, const struct luahttp_ops *ops, void *env);

#endif
