/*
 * The handle's methods for the request target: h:path(), h:query(),
 * h:query_arg(), h:query_args() read it; h:set_path(), h:set_query(),
 * h:set_query_arg() and headers:set(":path") rewrite it, in on_request
 * only, which runs before routing: the router, the rewrites of the route
 * and the upstream all see the new target. Every write goes through the
 * checks of http_path_check()/http_query_check() (printable ASCII, no
 * fragment, well-formed %XX), so a script can put nothing on the wire
 * that a client could not, and a refused write leaves the target as it
 * was.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "core/arena.h"
#include "http/http.h"
#include "policy/lua_int.h"

/* h:query_args() reads at most this many arguments (OpenResty's
 * ngx.req.get_uri_args default): past it, a second result "truncated". */
#define LUAPATH_MAX_ARGS 100

static struct slice path_of(const struct http_request *req)
{
    struct slice p = req->path;
    const char *q = p.n ? memchr(p.p, '?', p.n) : NULL;

    if (q != NULL)
        p.n = (size_t)(q - p.p);
    return p;
}

/* The query without '?'; p == NULL: the target has none. */
static struct slice query_of(const struct http_request *req)
{
    struct slice p = req->path;
    const char *q = p.n ? memchr(p.p, '?', p.n) : NULL;

    if (q == NULL)
        return (struct slice){NULL, 0};
    return (struct slice){q + 1, (size_t)(p.p + p.n - q - 1)};
}

/* The request target may change: on_request only (after it the request
 * has been routed and may be on its way). */
static struct luareq *target_writable(lua_State *L, const char *what)
{
    struct luareq *rq = luaapi_handle(L);

    if (rq->phase != LUAVM_ON_REQUEST)
        luaL_error(L,
                   "%s: only in on_request (the request is routed after "
                   "it)",
                   what);
    return rq;
}

/* Makes path + "?" + query the request's target (copied to its arena);
 * query.p == NULL or empty: no query. Checked by the caller. */
static void set_target(lua_State *L, struct luareq *rq, struct slice path,
                       struct slice query)
{
    size_t n = path.n + (query.n > 0 ? 1 + query.n : 0);
    char *t;

    if (n > HTTP_TARGET_MAX)
        luaL_error(L, "the request target would be longer than %d bytes",
                   HTTP_TARGET_MAX);
    t = arena_alloc(rq->arena, n + 1);
    if (t == NULL)
        luaL_error(L, "out of memory");
    memcpy(t, path.p, path.n);
    if (query.n > 0) {
        t[path.n] = '?';
        memcpy(t + path.n + 1, query.p, query.n);
    }
    t[n] = '\0';
    rq->req->path = (struct slice){t, n};
}

int luaapi_set_target(lua_State *L, struct luareq *rq, struct slice target,
                      const char *what)
{
    const char *why;
    const char *q = target.n ? memchr(target.p, '?', target.n) : NULL;
    struct slice path = target, query = {NULL, 0};

    if (http_target_check(target, &why) < 0)
        return luaL_error(L, "%s: bad path: %s", what, why);
    if (q != NULL) {
        path.n = (size_t)(q - target.p);
        query = (struct slice){q + 1, (size_t)(target.p + target.n - q - 1)};
    }
    set_target(L, rq, path, query);
    return 0;
}

static void push_slice(lua_State *L, struct slice s)
{
    if (s.p == NULL)
        lua_pushliteral(L, "");
    else
        lua_pushlstring(L, s.p, s.n);
}

static int h_path(lua_State *L)
{
    push_slice(L, path_of(luaapi_handle(L)->req));
    return 1;
}

static int h_query(lua_State *L)
{
    push_slice(L, query_of(luaapi_handle(L)->req));
    return 1;
}

/* h:set_path(p): the path, without a query; the query stays. */
static int h_set_path(lua_State *L)
{
    struct luareq *rq = target_writable(L, "set_path");
    size_t n;
    const char *p = luaL_checklstring(L, 2, &n);
    const char *why;

    if (http_path_check((struct slice){p, n}, &why) < 0)
        return luaL_error(L, "set_path: bad path: %s", why);
    set_target(L, rq, (struct slice){p, n}, query_of(rq->req));
    return 0;
}

/* h:set_query(q): the raw query (a leading '?' is dropped); nil or "":
 * none. Nothing is encoded: q is what goes on the wire. */
static int h_set_query(lua_State *L)
{
    struct luareq *rq = target_writable(L, "set_query");
    struct slice q = {NULL, 0};
    const char *why;

    if (!lua_isnoneornil(L, 2)) {
        q.p = luaL_checklstring(L, 2, &q.n);
        if (q.n > 0 && q.p[0] == '?') {
            q.p++;
            q.n--;
        }
    }
    if (http_query_check(q, &why) < 0)
        return luaL_error(L, "set_query: bad query: %s", why);
    set_target(L, rq, path_of(rq->req), q);
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Pushes s decoded as a form component: %XX is the byte, '+' a space
 * (as OpenResty's and Kong's query readers do); a broken escape stays as
 * it is. */
static void push_decoded(lua_State *L, struct slice s)
{
    luaL_Buffer b;

    luaL_buffinit(L, &b);
    for (size_t i = 0; i < s.n; i++) {
        int hi, lo;
        if (s.p[i] == '+') {
            luaL_addchar(&b, ' ');
        } else if (s.p[i] == '%' && i + 2 < s.n &&
                   (hi = hexval(s.p[i + 1])) >= 0 &&
                   (lo = hexval(s.p[i + 2])) >= 0) {
            luaL_addchar(&b, (char)(hi * 16 + lo));
            i += 2;
        } else {
            luaL_addchar(&b, s.p[i]);
        }
    }
    luaL_pushresult(&b);
}

/* The next "name[=value]" of the query q from *off; 0 at the end.
 * Empty pieces ("a=1&&b=2") are skipped. */
static int next_arg(struct slice q, size_t *off, struct slice *name,
                    struct slice *value, int *has_value, size_t *start,
                    size_t *end)
{
    while (*off < q.n) {
        size_t s = *off, e = s, eq;
        while (e < q.n && q.p[e] != '&')
            e++;
        *off = e < q.n ? e + 1 : e;
        if (e == s)
            continue;
        for (eq = s; eq < e && q.p[eq] != '='; eq++)
            ;
        *name = (struct slice){q.p + s, eq - s};
        *has_value = eq < e;
        *value = *has_value ? (struct slice){q.p + eq + 1, e - eq - 1}
                            : (struct slice){q.p + e, 0};
        *start = s;
        *end = e;
        return 1;
    }
    return 0;
}

/* Whether the raw name equals want once decoded. */
static int name_is(lua_State *L, struct slice raw, const char *want, size_t wn)
{
    int eq;

    push_decoded(L, raw);
    eq = lua_rawlen(L, -1) == wn && memcmp(lua_tostring(L, -1), want, wn) == 0;
    lua_pop(L, 1);
    return eq;
}

static void push_value(lua_State *L, struct slice v, int has_value)
{
    if (has_value)
        push_decoded(L, v);
    else
        lua_pushboolean(L, 1);
}

/* h:query_arg(name): the first value of name (decoded), true for a name
 * without '=', nil when absent. */
static int h_query_arg(lua_State *L)
{
    struct luareq *rq = luaapi_handle(L);
    size_t wn, off = 0, s, e;
    const char *want = luaL_checklstring(L, 2, &wn);
    struct slice q = query_of(rq->req), name, value;
    int hv;

    while (next_arg(q, &off, &name, &value, &hv, &s, &e))
        if (name_is(L, name, want, wn)) {
            push_value(L, value, hv);
            return 1;
        }
    lua_pushnil(L);
    return 1;
}

/* h:query_args(): {name = value} (a list for a repeated name), decoded;
 * at most LUAPATH_MAX_ARGS arguments, then a second result
 * "truncated". */
static int h_query_args(lua_State *L)
{
    struct luareq *rq = luaapi_handle(L);
    struct slice q = query_of(rq->req), name, value;
    size_t off = 0, s, e;
    int hv, k = 0;

    lua_newtable(L);
    while (next_arg(q, &off, &name, &value, &hv, &s, &e)) {
        if (k++ == LUAPATH_MAX_ARGS) {
            lua_pushliteral(L, "truncated");
            return 2;
        }
        push_decoded(L, name);
        lua_pushvalue(L, -1);
        lua_rawget(L, -3); /* t, name, old */
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            push_value(L, value, hv);
        } else if (lua_istable(L, -1)) {
            push_value(L, value, hv);
            lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
        } else {
            lua_createtable(L, 2, 0); /* t, name, old, list */
            lua_insert(L, -2);
            lua_rawseti(L, -2, 1);
            push_value(L, value, hv);
            lua_rawseti(L, -2, 2);
        }
        lua_rawset(L, -3);
    }
    return 1;
}

/* Appends s percent-encoded: RFC 3986's unreserved bytes stay, every
 * other byte is %XX, so whatever the script passes is one component. */
static void add_encoded(luaL_Buffer *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
            c == '~') {
            luaL_addchar(b, (char)c);
        } else {
            luaL_addchar(b, '%');
            luaL_addchar(b, hex[c >> 4]);
            luaL_addchar(b, hex[c & 15]);
        }
    }
}

/* h:set_query_arg(name, value): name=value (both encoded here) in place
 * of the first argument of that name, the others of that name removed;
 * appended when there is none. value nil: every argument of the name is
 * removed; true: the bare name. The other arguments keep their order
 * and bytes. */
static int h_set_query_arg(lua_State *L)
{
    struct luareq *rq = target_writable(L, "set_query_arg");
    size_t wn, vn = 0, off = 0, s, e;
    const char *want = luaL_checklstring(L, 2, &wn);
    const char *v = NULL;
    int bare = lua_isboolean(L, 3) && lua_toboolean(L, 3);
    struct slice q = query_of(rq->req), name, value, out;
    int hv, done = 0, first = 1;
    luaL_Buffer b;

    if (wn == 0)
        return luaL_error(L, "set_query_arg: the name is empty");
    if (!lua_isnoneornil(L, 3) && !bare)
        v = luaL_checklstring(L, 3, &vn);
    luaL_buffinit(L, &b);
    while (next_arg(q, &off, &name, &value, &hv, &s, &e)) {
        /* Lua lets the stack be used while a buffer is open as long as
         * the use is balanced: name_is() pops what it pushes. */
        int match = name_is(L, name, want, wn);
        if (match) {
            if (done)
                continue;
            done = 1;
            if (v == NULL && !bare)
                continue; /* removed */
            if (!first)
                luaL_addchar(&b, '&');
            add_encoded(&b, want, wn);
            if (!bare) {
                luaL_addchar(&b, '=');
                add_encoded(&b, v, vn);
            }
        } else {
            if (!first)
                luaL_addchar(&b, '&');
            luaL_addlstring(&b, q.p + s, e - s);
        }
        first = 0;
    }
    if (!done && (v != NULL || bare)) {
        if (!first)
            luaL_addchar(&b, '&');
        add_encoded(&b, want, wn);
        if (!bare) {
            luaL_addchar(&b, '=');
            add_encoded(&b, v, vn);
        }
    }
    luaL_pushresult(&b);
    out.p = lua_tolstring(L, -1, &out.n);
    set_target(L, rq, path_of(rq->req), out);
    return 0;
}

void luaapi_path_methods(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"path", h_path},
        {"query", h_query},
        {"set_path", h_set_path},
        {"set_query", h_set_query},
        {"query_arg", h_query_arg},
        {"query_args", h_query_args},
        {"set_query_arg", h_set_query_arg},
        {NULL, NULL},
    };

    luaL_setfuncs(L, methods, 0);
}
