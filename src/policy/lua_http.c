/*
 * strait.http.request{...}: an HTTP call from a yieldable hook
 * (on_request) or a timer callback, to a host of strait's registry.
 *
 * The call is parsed here and handed to the proxy (struct luahttp_ops);
 * the coroutine yields with a continuation and waits. The proxy's answer
 * is copied into the struct luacall (never pushed into Lua from the
 * proxy's callback: no Lua runs there), the owner is woken, and on its
 * next turn it resumes the coroutine, whose continuation pushes the
 * results. A request or a state that ends first cancels the call, so
 * no answer ever reaches a coroutine that is gone.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "core/ascii.h"
#include "http/http.h"
#include "policy/lua_http.h"
#include "policy/lua_int.h"

/* Fields a call may send, and the body of an answer when the policy sets
 * no bodyBytes. */
#define LUAHTTP_MAX_FIELDS 64
#define LUAHTTP_MAX_RESPONSE ((size_t)1 << 20)

struct luacall {
    struct luawait *wait;
    void *op; /* the proxy's; NULL once the answer is in */
    const char *err;
    int status;
    char **fields; /* name, value, name, value... (malloc) */
    size_t nfields;
    char *body;
    size_t body_len;
};

void luavm_set_http(struct luavm *vm, const struct luahttp_ops *ops, void *env)
{
    vm->http = ops;
    vm->http_env = env;
    /* Every namespace's state calls out the same way. */
    for (size_t g = 1; g < vm->nsub; g++)
        luavm_set_http(vm->sub[g], ops, env);
}

int luavm_waiting(const struct luareq *rq)
{
    return rq->wait.call != NULL;
}

int luahttp_pending(const struct luawait *w)
{
    return w->call != NULL && w->call->op != NULL;
}

static void call_free(struct luacall *c)
{
    for (size_t i = 0; i < c->nfields; i++)
        free(c->fields[i]);
    free(c->fields);
    free(c->body);
    free(c);
}

static char *dup_slice(struct slice s)
{
    char *p = malloc(s.n + 1);

    if (p != NULL) {
        memcpy(p, s.p, s.n);
        p[s.n] = '\0';
    }
    return p;
}

/* The proxy's answer: copied, then the owner is woken. */
static void call_done(void *arg, const struct luahttp_res *res)
{
    struct luacall *c = arg;

    c->op = NULL;
    c->err = res->err;
    c->status = res->status;
    if (res->err == NULL) {
        c->fields = calloc(2 * res->nfields + 1, sizeof(char *));
        c->body = malloc(res->body_len + 1);
        if (c->fields == NULL || c->body == NULL) {
            c->err = "out of memory";
        } else {
            memcpy(c->body, res->body, res->body_len);
            c->body_len = res->body_len;
            for (size_t i = 0; i < res->nfields; i++) {
                c->fields[c->nfields++] = dup_slice(res->fields[i].name);
                c->fields[c->nfields++] = dup_slice(res->fields[i].value);
                if (c->fields[c->nfields - 2] == NULL ||
                    c->fields[c->nfields - 1] == NULL)
                    c->err = "out of memory";
            }
        }
    }
    if (c->wait->wake != NULL)
        c->wait->wake(c->wait->wake_arg);
}

void luahttp_cancel(struct luavm *vm, struct luawait *w)
{
    struct luacall *c = w->call;

    if (c == NULL)
        return;
    if (c->op != NULL)
        vm->http->cancel(vm->http_env, c->op);
    w->call = NULL;
    call_free(c);
}

/* status, headers (repeated fields joined with ", "), body; or nil, err.
 * In protected mode: every push may raise. */
static int push_results(lua_State *L)
{
    const struct luacall *c = lua_touserdata(L, 1);

    if (c->err != NULL) {
        lua_pushnil(L);
        lua_pushstring(L, c->err);
        return 2;
    }
    lua_pushinteger(L, c->status);
    lua_createtable(L, 0, (int)(c->nfields / 2));
    for (size_t i = 0; i + 1 < c->nfields; i += 2) {
        if (lua_getfield(L, -1, c->fields[i]) == LUA_TSTRING) {
            lua_pushliteral(L, ", ");
            lua_pushstring(L, c->fields[i + 1]);
            lua_concat(L, 3);
        } else {
            lua_pop(L, 1);
            lua_pushstring(L, c->fields[i + 1]);
        }
        lua_setfield(L, -2, c->fields[i]);
    }
    lua_pushlstring(L, c->body, c->body_len);
    return 3;
}

/* The coroutine is resumed: the answer is in. */
static int request_k(lua_State *L, int st, lua_KContext ctx)
{
    struct luacall *c = (struct luacall *)ctx;
    int top = lua_gettop(L), n;

    (void)st;
    c->wait->call = NULL;
    lua_pushcfunction(L, push_results);
    lua_pushlightuserdata(L, c);
    st = lua_pcall(L, 1, LUA_MULTRET, 0);
    call_free(c);
    if (st != LUA_OK)
        return lua_error(L);
    n = lua_gettop(L) - top;
    return n;
}

static int fail(lua_State *L, const char *why)
{
    lua_pushnil(L);
    lua_pushstring(L, why);
    return 2;
}

/* The field of the argument table at idx: a string or nil. */
static const char *opt_field(lua_State *L, const char *name, size_t *n)
{
    int t = lua_getfield(L, 1, name);
    const char *s;

    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        *n = 0;
        return NULL;
    }
    if (t != LUA_TSTRING)
        luaL_error(L, "strait.http.request: %s must be a string", name);
    s = lua_tolstring(L, -1, n);
    lua_pop(L, 1); /* still referenced by the argument table */
    return s;
}

static void add_field(lua_State *L, struct luahttp_req *q, struct http_field *f,
                      const char *name, size_t nn, int vi)
{
    size_t vn;
    const char *v;

    if (lua_type(L, vi) != LUA_TSTRING)
        luaL_error(L, "strait.http.request: header %s: not a string", name);
    v = lua_tolstring(L, vi, &vn);
    /* Checked here, where the script can be told, as the header API does:
     * the writer would only refuse the whole call later. */
    if (!http_field_name_valid((struct slice){name, nn}))
        luaL_error(L, "strait.http.request: bad header name");
    if (!http_field_value_valid((struct slice){v, vn}))
        luaL_error(L,
                   "strait.http.request: header %s: bad value (a control "
                   "character: CR, LF, NUL or another)",
                   name);
    if (q->nfields >= LUAHTTP_MAX_FIELDS)
        luaL_error(L, "strait.http.request: more than %d headers",
                   LUAHTTP_MAX_FIELDS);
    f[q->nfields].name = (struct slice){name, nn};
    f[q->nfields].value = (struct slice){v, vn};
    q->nfields++;
}

/* headers = {name = "v" | {"v1", "v2"}}; the values stay referenced by
 * the argument table while start() reads them. */
static void read_fields(lua_State *L, struct luahttp_req *q,
                        struct http_field *f)
{
    if (lua_getfield(L, 1, "headers") == LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    luaL_argcheck(L, lua_istable(L, -1), 1, "headers must be a table");
    lua_pushnil(L);
    while (lua_next(L, -2) != 0) {
        size_t nn;
        const char *name;
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "strait.http.request: a header name is not a "
                          "string");
        name = lua_tolstring(L, -2, &nn);
        if (lua_istable(L, -1)) {
            for (lua_Integer i = 1; lua_rawgeti(L, -1, i) != LUA_TNIL; i++) {
                add_field(L, q, f, name, nn, lua_gettop(L));
                lua_pop(L, 1);
            }
            lua_pop(L, 1);
        } else {
            add_field(L, q, f, name, nn, lua_gettop(L));
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* Where the running coroutine waits: a request's on_request hook, or a
 * timer callback; NULL elsewhere. */
static struct luawait *wait_of(struct luavm *vm, lua_State *L)
{
    if (vm->run == NULL || L != vm->run->co || !lua_isyieldable(L))
        return NULL;
    /* The yieldable hooks: on_request, and on_response (whose head waits
     * for the hook). */
    if (vm->cur != NULL && (vm->cur->phase == LUAVM_ON_REQUEST ||
                            vm->cur->phase == LUAVM_ON_RESPONSE))
        return &vm->cur->wait;
    if (vm->cur == NULL && vm->trun != NULL)
        return &vm->trun->wait;
    return NULL;
}

/*
 * strait.http.request{upstream = "host:port" | host = ..., port = ...,
 * method = "GET", path = "/", headers = {...}, body = "...",
 * timeout_ms = ...}: status, headers, body; or nil, err.
 */
static int l_request(lua_State *L)
{
    struct luavm *vm = luavm_of(L);
    struct luawait *w = wait_of(vm, L);
    struct http_field f[LUAHTTP_MAX_FIELDS];
    struct luahttp_req q;
    const struct luaprog *g;
    struct luacall *c;
    char host[256];
    const char *s, *why = "unknown host";
    size_t n;

    luaL_checktype(L, 1, LUA_TTABLE);
    memset(&q, 0, sizeof(q));
    s = opt_field(L, "upstream", &n);
    if (s != NULL) {
        const char *colon = memchr(s, ':', n);
        char *end;
        unsigned long port;
        if (colon == NULL || (size_t)(colon - s) >= sizeof(host))
            return luaL_error(L, "strait.http.request: upstream must be "
                                 "\"host:port\"");
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
        port = strtoul(colon + 1, &end, 10);
        if (end != s + n || port == 0 || port > 65535)
            return luaL_error(L, "strait.http.request: bad port in upstream");
        q.port = (uint32_t)port;
    } else {
        lua_Integer port;
        s = opt_field(L, "host", &n);
        if (s == NULL || n == 0 || n >= sizeof(host))
            return luaL_error(L, "strait.http.request: upstream or host is "
                                 "required");
        memcpy(host, s, n);
        host[n] = '\0';
        lua_getfield(L, 1, "port");
        port = lua_tointeger(L, -1);
        lua_pop(L, 1);
        if (port <= 0 || port > 65535)
            return luaL_error(L, "strait.http.request: port is required "
                                 "(1-65535)");
        q.port = (uint32_t)port;
    }
    ascii_lower_str(host);
    q.host = host;
    s = opt_field(L, "method", &n);
    q.method = s != NULL ? (struct slice){s, n} : SLICE_LIT("GET");
    s = opt_field(L, "path", &n);
    q.path = s != NULL ? (struct slice){s, n} : SLICE_LIT("/");
    if (q.method.n == 0 || q.path.n == 0 || q.path.p[0] != '/')
        return luaL_error(L, "strait.http.request: bad method or path");
    s = opt_field(L, "body", &n);
    q.body = (struct slice){s, n};
    read_fields(L, &q, f);
    q.fields = f;
    if (w == NULL)
        return fail(L, "not yieldable here");
    if (vm->closing)
        return fail(L, "process exiting");
    g = &vm->progs->v[vm->run->prog];
    q.timeout_ms = g->http_timeout_ms ? g->http_timeout_ms : 5000;
    lua_getfield(L, 1, "timeout_ms");
    if (!lua_isnil(L, -1)) {
        lua_Integer t = lua_tointeger(L, -1);
        if (t <= 0)
            return luaL_error(L, "strait.http.request: timeout_ms must be a "
                                 "positive integer");
        if ((uint64_t)t < q.timeout_ms)
            q.timeout_ms = (uint64_t)t;
    }
    lua_pop(L, 1);
    q.max_response = g->body_bytes ? g->body_bytes : LUAHTTP_MAX_RESPONSE;
    if (w->prog != vm->run->prog) {
        w->prog = vm->run->prog;
        w->ncalls = 0;
    }
    if (w->ncalls >= g->http_calls)
        return fail(L, "too many calls");
    if (vm->http == NULL)
        return fail(L, why);
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return fail(L, "out of memory");
    c->wait = w;
    c->op = vm->http->start(vm->http_env, &q, call_done, c, &why);
    if (c->op == NULL) {
        free(c);
        return fail(L, why);
    }
    w->ncalls++;
    w->call = c;
    return lua_yieldk(L, 0, (lua_KContext)c, request_k);
}

void luahttp_open(struct luavm *vm)
{
    lua_State *L = vm->L;

    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, l_request);
    lua_setfield(L, -2, "request");
    lua_setfield(L, -2, "http");
}
