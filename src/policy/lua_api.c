/*
 * What a LuaPolicy script sees: the request handle, header objects and
 * the strait table (the library functions the count hook cannot stop
 * are capped in lua_budget.c).
 *
 * A handle is valid only during the hook call it was given to: it holds
 * the request and the serial of that call, and every method first checks
 * both against the call running now (vm->cur), without reading through
 * the pointer otherwise, so a handle kept in a global after its request
 * ended raises "stale handle" and never touches freed memory.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "core/arena.h"
#include "core/clock.h"
#include "core/geoip.h"
#include "core/log.h"
#include "event/timer.h"
#include "http/http.h"
#include "policy/lua_dict.h"
#include "policy/lua_int.h"
#include "tls/tls.h"

static void luaapi_open_shared(struct luavm *vm);

#define HANDLE_MT "strait.handle"
#define HEADERS_MT "strait.headers"

enum { WHICH_REQ, WHICH_RESP };

struct lhandle {
    struct luareq *rq;
    unsigned serial;
    int which; /* headers: WHICH_REQ or WHICH_RESP */
};

/* ---- the handle -----------------------------------------------------------
 */

static struct luareq *check_live(lua_State *L, int idx, const char *mt,
                                 struct lhandle **out)
{
    struct lhandle *h = luaL_checkudata(L, idx, mt);
    struct luavm *vm = luavm_of(L);

    if (vm->cur == NULL || h->rq != vm->cur || h->serial != vm->cur->serial)
        luaL_error(L, "stale handle");
    if (out != NULL)
        *out = h;
    return h->rq;
}

static struct luareq *handle_of(lua_State *L)
{
    return check_live(L, 1, HANDLE_MT, NULL);
}

struct luareq *luaapi_handle(lua_State *L)
{
    return handle_of(L);
}

static void writable(lua_State *L, const struct luareq *rq)
{
    if (rq->phase == LUAVM_ON_LOG)
        luaL_error(L, "read-only in on_log");
}

static void push_slice(lua_State *L, struct slice s)
{
    if (s.p == NULL)
        lua_pushliteral(L, "");
    else
        lua_pushlstring(L, s.p, s.n);
}

static int h_method(lua_State *L)
{
    push_slice(L, handle_of(L)->req->method);
    return 1;
}

static int h_authority(lua_State *L)
{
    push_slice(L, handle_of(L)->req->authority);
    return 1;
}

static int h_scheme(lua_State *L)
{
    push_slice(L, handle_of(L)->req->scheme);
    return 1;
}

static int h_route(lua_State *L)
{
    struct luareq *rq = handle_of(L);

    if (rq->route.n == 0)
        lua_pushnil(L);
    else
        push_slice(L, rq->route);
    return 1;
}

static int h_status(lua_State *L)
{
    struct luareq *rq = handle_of(L);

    if (rq->resp == NULL)
        lua_pushnil(L);
    else
        lua_pushinteger(L, rq->resp->status);
    return 1;
}

static int h_set_status(lua_State *L)
{
    struct luareq *rq = handle_of(L);
    lua_Integer st = luaL_checkinteger(L, 2);

    writable(L, rq);
    if (rq->phase != LUAVM_ON_RESPONSE || rq->resp == NULL)
        return luaL_error(L, "set_status: only in on_response");
    if (st < 200 || st > 599)
        return luaL_error(L, "set_status: status must be 200-599");
    rq->resp->status = (int)st;
    return 0;
}

/* h:peer() copies the certificate's names out before any goes to Lua:
 * pushing a string may raise, and the certificate is freed by then. A
 * certificate with more names than this shows the first ones. */
#define PEER_SANS_MAX 32
#define PEER_SANS_BYTES 4096

struct peer_sans {
    char buf[PEER_SANS_BYTES];
    size_t used;
    struct slice v[PEER_SANS_MAX];
    size_t n;
};

static void keep_san(void *arg, int kind, const char *name, size_t len)
{
    struct peer_sans *ps = arg;

    (void)kind;
    if (ps->n == PEER_SANS_MAX || len > sizeof(ps->buf) - ps->used)
        return;
    memcpy(ps->buf + ps->used, name, len);
    ps->v[ps->n].p = ps->buf + ps->used;
    ps->v[ps->n].n = len;
    ps->n++;
    ps->used += len;
}

/* h:peer(): {spiffe_id=, sans={...}, mtls=, address=}. mtls is true
 * when the client showed a certificate and it was verified; sans lists
 * its URI and DNS SANs in the certificate's order; spiffe_id is its
 * first URI SAN, the identity AuthorizationPolicy principals and the
 * access log use. Computed on each call, from the connection. */
static int h_peer(lua_State *L)
{
    struct luareq *rq = handle_of(L);
    struct peer_sans sans;
    char uri[512];
    size_t n = 0;

    sans.used = sans.n = 0;
    if (rq->conn != NULL) {
        n = tls_conn_peer_uri_san(rq->conn, uri, sizeof(uri));
        tls_conn_peer_sans(rq->conn, keep_san, &sans);
    }
    lua_createtable(L, 0, 4);
    if (n > 0) {
        lua_pushlstring(L, uri, n);
        lua_setfield(L, -2, "spiffe_id");
    }
    lua_createtable(L, (int)sans.n, 0);
    for (size_t i = 0; i < sans.n; i++) {
        push_slice(L, sans.v[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "sans");
    lua_pushboolean(L, rq->conn != NULL && tls_conn_peer_verified(rq->conn));
    lua_setfield(L, -2, "mtls");
    lua_pushstring(L, rq->peer_ip != NULL ? rq->peer_ip : "");
    lua_setfield(L, -2, "address");
    return 1;
}

static int h_remote_addr(lua_State *L)
{
    struct luareq *rq = handle_of(L);

    lua_pushstring(L, rq->client_ip != NULL ? rq->client_ip
                      : rq->peer_ip != NULL ? rq->peer_ip
                                            : "");
    return 1;
}

/* h:geo(): the client's GeoIP result as a table of the fields known
 * (country, city, region, asn (a number), asnOrg, isp, anon, anonVpn,
 * anonHosting, anonTor, anonProxy (booleans)); nil without geoip. */
static int h_geo(lua_State *L)
{
    luaapi_push_geo(L, handle_of(L)->geo);
    return 1;
}

void luaapi_push_geo(lua_State *L, const struct geo_result *geo)
{
    if (geo == NULL) {
        lua_pushnil(L);
        return;
    }
    lua_createtable(L, 0, GEOIP_NFIELDS);
    for (int i = 0; i < GEOIP_NFIELDS; i++) {
        const char *v = geo->v[i];
        if (!(geo->found & (1u << i)))
            continue;
        if (i == GEOIP_F_ASN)
            lua_pushinteger(L, (lua_Integer)strtoll(v, NULL, 10));
        else if (i >= GEOIP_F_ANON)
            lua_pushboolean(L, strcmp(v, "true") == 0);
        else
            lua_pushstring(L, v);
        lua_setfield(L, -2, geoip_field_name((enum geoip_field)i));
    }
}

static int h_log(lua_State *L)
{
    struct luareq *rq = handle_of(L);
    static const char *const levels[] = {"debug", "info", "warn", "error",
                                         NULL};
    int lv = luaL_checkoption(L, 2, "info", levels);
    luaL_Buffer b;

    /* The top before the buffer: luaL_buffinit() pushes a slot of its
     * own, which is no argument to print. */
    int top = lua_gettop(L);

    luaL_buffinit(L, &b);
    for (int i = 3; i <= top; i++) {
        luaL_tolstring(L, i, NULL);
        luaL_addvalue(&b);
        if (i < top)
            luaL_addchar(&b, ' ');
    }
    luaL_pushresult(&b);
    log_msg((enum log_level)lv, "lua: %s: %s", rq->vm->progs->v[rq->next].name,
            lua_tostring(L, -1));
    return 0;
}

/* A field name as strait keeps it: lowercase. Anything but a token is
 * refused, so a name can never carry a separator, a space or a line
 * break into the head. */
static const char *lower_name(lua_State *L, int idx, char *buf, size_t n)
{
    size_t k;
    const char *s = luaL_checklstring(L, idx, &k);

    if (k == 0 || k >= n || !http_field_name_valid((struct slice){s, k}))
        luaL_error(L, "bad header name (a token of 1 to %d bytes)", (int)n - 1);
    for (size_t i = 0; i < k; i++)
        buf[i] = s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
    buf[k] = '\0';
    return buf;
}

/* A name a script may write: the framing and hop-by-hop fields are the
 * codecs' (a content-length copied onto a GET would make the upstream
 * take the next request on its connection as this one's body), and the
 * authority changes through routing only. */
static void writable_name(lua_State *L, const char *what, const char *name)
{
    if (!http_field_reserved(slice_of(name)))
        return;
    if (strcmp(name, "host") == 0)
        luaL_error(L,
                   "%s: host is the request's authority; change it through "
                   "routing (VirtualService rewrite.authority, "
                   "h:set_upstream), not as a header",
                   what);
    luaL_error(L,
               "%s: %s is a framing or hop-by-hop header that strait sets "
               "itself; a policy may not set it",
               what, name);
}

static struct slice check_value(lua_State *L, int idx)
{
    size_t n;
    const char *v = luaL_checklstring(L, idx, &n);

    if (!http_field_value_valid((struct slice){v, n}))
        luaL_error(L, "bad header value (a control character: CR, LF, NUL "
                      "or another)");
    return (struct slice){v, n};
}

static char *arena_str(lua_State *L, struct arena *a, int idx, size_t *n)
{
    const char *s = luaL_checklstring(L, idx, n);
    char *d = arena_dup(a, s, *n);

    if (d == NULL)
        luaL_error(L, "out of memory");
    return d;
}

/* h:respond() is all or nothing: the answer is built aside and becomes
 * the request's only once every part passed, so an error (caught by
 * pcall) leaves an earlier h:respond()'s answer as it was. */
static int h_respond(lua_State *L)
{
    struct luareq *rq = handle_of(L);
    lua_Integer st = luaL_checkinteger(L, 2);
    struct http_field *fields = NULL;
    struct slice body = {NULL, 0};
    size_t nf = 0, n = 0;

    if (rq->phase != LUAVM_ON_REQUEST)
        return luaL_error(L, "respond: only in on_request");
    if (st < 200 || st > 599)
        return luaL_error(L, "respond: status must be 200-599");
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        lua_pushnil(L);
        while (lua_next(L, 3) != 0) {
            nf++;
            lua_pop(L, 1);
        }
        fields = arena_alloc(rq->arena, (nf ? nf : 1) * sizeof(*fields));
        if (fields == NULL)
            return luaL_error(L, "out of memory");
        lua_pushnil(L);
        while (lua_next(L, 3) != 0) {
            struct http_field *f = &fields[n];
            char *k;
            if (n == nf)
                return luaL_error(L, "respond: headers changed while read");
            if (lua_type(L, -2) != LUA_TSTRING)
                return luaL_error(L, "respond: header names are strings");
            k = arena_str(L, rq->arena, -2, &f->name.n);
            if (!http_field_name_valid((struct slice){k, f->name.n}))
                return luaL_error(L, "respond: bad header name");
            for (size_t i = 0; i < f->name.n; i++)
                if (k[i] >= 'A' && k[i] <= 'Z')
                    k[i] = (char)(k[i] - 'A' + 'a');
            f->name.p = k;
            writable_name(L, "respond", k);
            f->value = check_value(L, -1);
            f->value.p = arena_str(L, rq->arena, -1, &f->value.n);
            n++;
            lua_pop(L, 1);
        }
    }
    if (!lua_isnoneornil(L, 4)) {
        size_t bn;
        body.p = arena_str(L, rq->arena, 4, &bn);
        body.n = bn;
    }
    rq->rfields = fields;
    rq->nrfields = n;
    rq->body = body;
    rq->status = (int)st;
    return 0;
}

/* h:body() goes on here once the caller read the body (or gave up). */
static int h_body_done(lua_State *L, int status, lua_KContext k)
{
    struct luareq *rq = luavm_of(L)->cur;

    (void)status;
    (void)k;
    if (rq == NULL)
        return luaL_error(L, "stale handle");
    rq->body_wait = 0;
    if (rq->body_why != NULL) {
        lua_pushnil(L);
        lua_pushstring(L, rq->body_why);
        return 2;
    }
    lua_pushlstring(L, rq->body_got.p != NULL ? rq->body_got.p : "",
                    rq->body_got.n);
    return 1;
}

/*
 * h:body({max=N}): the whole request body as a string, or nil, "too
 * large" when it is longer than max or the policy's limits.bodyBytes.
 * The hook waits (its coroutine yields) while the bytes arrive; the
 * caller keeps them in the request's pipe, which replays them to the
 * upstream, so nothing is lost and nothing is read when no hook asks.
 */
static int h_body(lua_State *L)
{
    struct luareq *rq = handle_of(L);
    struct luavm *vm = luavm_of(L);
    size_t max = vm->progs->v[vm->run->prog].body_bytes;

    if (rq->phase != LUAVM_ON_REQUEST)
        return luaL_error(L, "h:body: on_request only");
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        if (lua_getfield(L, 2, "max") != LUA_TNIL) {
            lua_Integer m = luaL_checkinteger(L, -1);
            if (m < 0)
                return luaL_error(L, "h:body: max must not be negative");
            if ((uint64_t)m < max)
                max = (size_t)m;
        }
        lua_pop(L, 1);
    }
    /* Only the hook's own coroutine waits: a yield from a script's
     * coroutine would go to the script, not to strait. */
    if (L != vm->run->co || !lua_isyieldable(L))
        return luaL_error(L, "h:body: cannot wait here");
    rq->body_max = max;
    rq->body_got = (struct slice){NULL, 0};
    rq->body_why = NULL;
    rq->body_wait = 1;
    return lua_yieldk(L, 0, 0, h_body_done);
}

static int push_headers(lua_State *L, struct luareq *rq, int which)
{
    struct lhandle *h = lua_newuserdatauv(L, sizeof(*h), 0);

    h->rq = rq;
    h->serial = rq->serial;
    h->which = which;
    luaL_setmetatable(L, HEADERS_MT);
    return 1;
}

static int h_headers(lua_State *L)
{
    struct luareq *rq = handle_of(L);

    return push_headers(L, rq,
                        rq->phase == LUAVM_ON_REQUEST || rq->resp == NULL
                            ? WHICH_REQ
                            : WHICH_RESP);
}

static int h_request_headers(lua_State *L)
{
    return push_headers(L, handle_of(L), WHICH_REQ);
}

static int h_ctx(lua_State *L)
{
    luavm_push_ctx(L, handle_of(L));
    return 1;
}

static const luaL_Reg handle_methods[] = {
    {"method", h_method},
    {"authority", h_authority},
    {"scheme", h_scheme},
    {"route", h_route},
    {"status", h_status},
    {"set_status", h_set_status},
    {"peer", h_peer},
    {"remote_addr", h_remote_addr},
    {"geo", h_geo},
    {"log", h_log},
    {"respond", h_respond},
    {"headers", h_headers},
    {"request_headers", h_request_headers},
    {NULL, NULL},
};

/* h.ctx is a field; everything else is a method. */
static int handle_index(lua_State *L)
{
    const char *k = luaL_checkstring(L, 2);

    if (strcmp(k, "ctx") == 0)
        return h_ctx(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_getfield(L, -1, k);
    return 1;
}

/* ---- headers --------------------------------------------------------------
 */

static struct http_fields *fields_of(lua_State *L, struct luareq **rqp,
                                     int write)
{
    struct lhandle *h;
    struct luareq *rq = check_live(L, 1, HEADERS_MT, &h);

    if (write) {
        writable(L, rq);
        if (h->which == WHICH_REQ && rq->phase != LUAVM_ON_REQUEST)
            luaL_error(L, "request headers are read-only after on_request");
    }
    *rqp = rq;
    return h->which == WHICH_RESP ? &rq->resp->fields : &rq->req->fields;
}

/*
 * Pseudo-header names (":path", ":method", ":authority", ":scheme") are
 * no fields: strait keeps them as the request's parts. A script that
 * uses them as Envoy's Lua filter does gets those parts: get reads them
 * on the request headers, and set(":path", v) is h:set_path() with the
 * same checks (v may carry "?query"); the other pseudo-headers change
 * through routing, and say so. Returns the results pushed, or -1 when
 * the name is not a pseudo-header.
 */
enum { PSEUDO_GET, PSEUDO_SET, PSEUDO_ADD, PSEUDO_REMOVE };

static int pseudo(lua_State *L, int op)
{
    static const char *const ops[] = {"get", "set", "add", "remove"};
    struct lhandle *h;
    struct luareq *rq;
    size_t n;
    const char *name = lua_tolstring(L, 2, &n);
    struct slice v;

    if (name == NULL || n == 0 || name[0] != ':')
        return -1;
    rq = check_live(L, 1, HEADERS_MT, &h);
    if (op == PSEUDO_GET) {
        const struct http_request *q = rq->req;
        if (h->which != WHICH_REQ)
            v = (struct slice){NULL, 0};
        else if (strcmp(name, ":path") == 0)
            v = q->path;
        else if (strcmp(name, ":method") == 0)
            v = q->method;
        else if (strcmp(name, ":authority") == 0)
            v = q->authority;
        else if (strcmp(name, ":scheme") == 0)
            v = q->scheme;
        else
            v = (struct slice){NULL, 0};
        if (v.p == NULL)
            lua_pushnil(L);
        else
            lua_pushlstring(L, v.p, v.n);
        return 1;
    }
    if (op == PSEUDO_SET && h->which == WHICH_REQ &&
        strcmp(name, ":path") == 0 && !lua_isnil(L, 3)) {
        fields_of(L, &rq, 1);
        v.p = luaL_checklstring(L, 3, &v.n);
        return luaapi_set_target(L, rq, v, "headers:set(\":path\")");
    }
    if (strcmp(name, ":path") == 0)
        return luaL_error(L,
                          "headers:%s: :path is the request target, not a "
                          "header: set it with headers:set(\":path\", v) or "
                          "h:set_path() in on_request",
                          ops[op]);
    return luaL_error(L,
                      "headers:%s: %s is a pseudo-header, not a header: "
                      ":path changes with h:set_path(), the authority "
                      "through routing (VirtualService rewrite.authority, "
                      "h:set_upstream)",
                      ops[op], name);
}

static int hd_get(lua_State *L)
{
    int k;
    struct luareq *rq;
    const struct http_fields *f = fields_of(L, &rq, 0);
    char name[256];
    luaL_Buffer b;
    int found = 0;

    if ((k = pseudo(L, PSEUDO_GET)) >= 0)
        return k;
    lower_name(L, 2, name, sizeof(name));
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < f->n; i++) {
        if (!slice_eq_str(f->v[i].name, name))
            continue;
        if (found++)
            luaL_addstring(&b, ",");
        luaL_addlstring(&b, f->v[i].value.p, f->v[i].value.n);
    }
    luaL_pushresult(&b);
    if (!found)
        lua_pushnil(L);
    return 1;
}

static int hd_get_all(lua_State *L)
{
    struct luareq *rq;
    const struct http_fields *f = fields_of(L, &rq, 0);
    char name[256];
    int k = 0;

    lower_name(L, 2, name, sizeof(name));
    lua_newtable(L);
    for (size_t i = 0; i < f->n; i++)
        if (slice_eq_str(f->v[i].name, name)) {
            push_slice(L, f->v[i].value);
            lua_rawseti(L, -2, ++k);
        }
    return 1;
}

static int hd_set(lua_State *L)
{
    int k;
    struct luareq *rq;
    struct http_fields *f = fields_of(L, &rq, 1);
    char name[256];
    struct slice v;
    char *c;

    if ((k = pseudo(L, PSEUDO_SET)) >= 0)
        return k;
    lower_name(L, 2, name, sizeof(name));
    if (lua_isnil(L, 3)) {
        http_fields_remove(f, name);
        return 0;
    }
    writable_name(L, "headers:set", name);
    v = check_value(L, 3);
    /* The field keeps the name by pointer: it goes into the arena. */
    c = arena_dup(rq->arena, name, strlen(name));
    if (c == NULL || http_fields_set(f, rq->arena, c, v) < 0)
        return luaL_error(L, "out of memory");
    return 0;
}

static int hd_add(lua_State *L)
{
    int k;
    struct luareq *rq;
    struct http_fields *f = fields_of(L, &rq, 1);
    char name[256];
    struct slice v;

    if ((k = pseudo(L, PSEUDO_ADD)) >= 0)
        return k;
    lower_name(L, 2, name, sizeof(name));
    writable_name(L, "headers:add", name);
    v = check_value(L, 3);
    if (http_fields_add(f, rq->arena, slice_of(name), v, 10000) < 0)
        return luaL_error(L, "out of memory");
    return 0;
}

static int hd_remove(lua_State *L)
{
    int k;
    struct luareq *rq;
    struct http_fields *f = fields_of(L, &rq, 1);
    char name[256];

    if ((k = pseudo(L, PSEUDO_REMOVE)) >= 0)
        return k;
    lower_name(L, 2, name, sizeof(name));
    lua_pushinteger(L, (lua_Integer)http_fields_remove(f, name));
    return 1;
}

/* Iteration runs on a copy taken now, so the loop may change the fields
 * and may break early. */
static int hd_next(lua_State *L)
{
    lua_Integer i = lua_tointeger(L, lua_upvalueindex(2)) + 1;

    lua_pushinteger(L, i);
    lua_replace(L, lua_upvalueindex(2));
    if (lua_rawgeti(L, lua_upvalueindex(1), 2 * i - 1) == LUA_TNIL)
        return 1;
    lua_rawgeti(L, lua_upvalueindex(1), 2 * i);
    return 2;
}

static int hd_iter(lua_State *L)
{
    struct luareq *rq;
    const struct http_fields *f = fields_of(L, &rq, 0);

    lua_createtable(L, (int)(2 * f->n), 0);
    for (size_t i = 0; i < f->n; i++) {
        push_slice(L, f->v[i].name);
        lua_rawseti(L, -2, (lua_Integer)(2 * i + 1));
        push_slice(L, f->v[i].value);
        lua_rawseti(L, -2, (lua_Integer)(2 * i + 2));
    }
    lua_pushinteger(L, 0);
    lua_pushcclosure(L, hd_next, 2);
    return 1;
}

static const luaL_Reg headers_methods[] = {
    {"get", hd_get}, {"get_all", hd_get_all}, {"set", hd_set},
    {"add", hd_add}, {"remove", hd_remove},   {"iter", hd_iter},
    {NULL, NULL},
};

/* ---- strait ---------------------------------------------------------------
 */

static int s_log(lua_State *L)
{
    static const char *const levels[] = {"debug", "info", "warn", "error",
                                         NULL};
    int lv = luaL_checkoption(L, 1, "info", levels);
    luaL_Buffer b;

    /* The top before the buffer: luaL_buffinit() pushes a slot of its
     * own, which is no argument to print. */
    int top = lua_gettop(L);

    luaL_buffinit(L, &b);
    for (int i = 2; i <= top; i++) {
        luaL_tolstring(L, i, NULL);
        luaL_addvalue(&b);
        if (i < top)
            luaL_addchar(&b, ' ');
    }
    luaL_pushresult(&b);
    log_msg((enum log_level)lv, "lua: %s", lua_tostring(L, -1));
    return 0;
}

void luaapi_open(struct luavm *vm)
{
    lua_State *L = vm->L;

    luabudget_wrap(L);
    luaL_newmetatable(L, HANDLE_MT);
    luaL_newlib(L, handle_methods);
    luaapi_upstream_methods(L);
    luaapi_path_methods(L);
    lua_pushcfunction(L, h_body);
    lua_setfield(L, -2, "body");
    lua_pushcclosure(L, handle_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
    luaL_newmetatable(L, HEADERS_MT);
    luaL_newlib(L, headers_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, hd_iter);
    lua_setfield(L, -2, "__pairs");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, s_log);
    lua_setfield(L, -2, "log");
    luaapi_open_shared(vm);
    luaapi_open_timer(vm);
    luaapi_open_hello(vm);
    luahttp_open(vm);
    lua_setfield(L, -2, "strait");
}

void luaapi_push_handle(struct luavm *vm, lua_State *co, struct luareq *rq)
{
    struct lhandle *h = lua_newuserdatauv(co, sizeof(*h), 0);

    rq->serial = ++vm->serial_gen;
    h->rq = rq;
    h->serial = rq->serial;
    h->which = WHICH_REQ;
    luaL_setmetatable(co, HANDLE_MT);
}

/* ---- strait.shared ---------------------------------------------------------
 * ngx.shared.DICT's methods and return conventions (lua_dict.h). */

#define DICT_MT "strait.shared_dict"

static struct luadict *dict_of(lua_State *L)
{
    return *(struct luadict **)luaL_checkudata(L, 1, DICT_MT);
}

static const char *dict_key(lua_State *L, size_t *n)
{
    const char *k = luaL_checklstring(L, 2, n);

    if (*n == 0)
        luaL_error(L, "empty key");
    if (*n > LUADICT_MAX_KEY)
        luaL_error(L, "key too long");
    return k;
}

/* Seconds (0.001 resolution) to ms; 0: never expires. */
static uint64_t opt_ttl(lua_State *L, int idx)
{
    lua_Number t = luaL_optnumber(L, idx, 0);

    if (t < 0)
        luaL_error(L, "bad exptime");
    return t == 0 ? 0 : (uint64_t)(t * 1000.0) > 0 ? (uint64_t)(t * 1000.0) : 1;
}

static const char *dict_err(int rc)
{
    switch (rc) {
    case LUADICT_EXISTS:
        return "exists";
    case LUADICT_NOT_FOUND:
        return "not found";
    case LUADICT_NO_MEMORY:
        return "no memory";
    case LUADICT_NOT_NUMBER:
        return "not a number";
    }
    return "error";
}

static void value_of(lua_State *L, int idx, struct luadict_value *v)
{
    memset(v, 0, sizeof(*v));
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
    case LUA_TNONE:
        v->type = LUADICT_NIL;
        break;
    case LUA_TBOOLEAN:
        v->type = LUADICT_BOOL;
        v->b = lua_toboolean(L, idx);
        break;
    case LUA_TNUMBER:
        v->type = LUADICT_NUMBER;
        v->n = lua_tonumber(L, idx);
        break;
    case LUA_TSTRING:
        v->type = LUADICT_STRING;
        v->s = lua_tolstring(L, idx, &v->len);
        break;
    default:
        luaL_error(L, "bad value type: %s", luaL_typename(L, idx));
    }
}

static int d_get(lua_State *L)
{
    struct luadict *d = dict_of(L);
    size_t n;
    const char *k = dict_key(L, &n);
    struct luadict_value v;
    char *out;

    if (luadict_get(d, k, n, clock_ms(), &v, &out) < 0)
        return luaL_error(L, "out of memory");
    switch (v.type) {
    case LUADICT_NIL:
        lua_pushnil(L);
        return 1;
    case LUADICT_BOOL:
        lua_pushboolean(L, v.b);
        break;
    case LUADICT_NUMBER:
        lua_pushnumber(L, v.n);
        break;
    case LUADICT_STRING:
        lua_pushlstring(L, v.s, v.len);
        free(out);
        break;
    }
    if (v.flags == 0)
        return 1;
    lua_pushinteger(L, v.flags);
    return 2;
}

static int store(lua_State *L, int mode, int evict)
{
    struct luadict *d = dict_of(L);
    size_t n;
    const char *k = dict_key(L, &n);
    struct luadict_value v;
    uint64_t ttl = opt_ttl(L, 4);
    lua_Integer flags = luaL_optinteger(L, 5, 0);
    int forcible = 0, rc;

    value_of(L, 3, &v);
    v.flags = (uint32_t)flags;
    rc = luadict_store(d, mode, k, n, &v, ttl, clock_ms(), evict, &forcible);
    lua_pushboolean(L, rc == 0);
    if (rc == 0)
        lua_pushnil(L);
    else
        lua_pushstring(L, dict_err(rc));
    lua_pushboolean(L, forcible);
    return 3;
}

static int d_set(lua_State *L)
{
    return store(L, LUADICT_SET, 1);
}
static int d_safe_set(lua_State *L)
{
    store(L, LUADICT_SET, 0);
    lua_pop(L, 1);
    return 2;
}
static int d_add(lua_State *L)
{
    return store(L, LUADICT_ADD, 1);
}
static int d_safe_add(lua_State *L)
{
    store(L, LUADICT_ADD, 0);
    lua_pop(L, 1);
    return 2;
}
static int d_replace(lua_State *L)
{
    return store(L, LUADICT_REPLACE, 1);
}

static int d_delete(lua_State *L)
{
    lua_settop(L, 2);
    lua_pushnil(L);
    return store(L, LUADICT_SET, 0);
}

static int d_incr(lua_State *L)
{
    struct luadict *d = dict_of(L);
    size_t n;
    const char *k = dict_key(L, &n);
    lua_Number delta = luaL_checknumber(L, 3);
    int has_init = !lua_isnoneornil(L, 4);
    lua_Number init = has_init ? luaL_checknumber(L, 4) : 0;
    uint64_t ttl = opt_ttl(L, 5);
    double out = 0;
    int forcible = 0;
    int rc = luadict_incr(d, k, n, delta, has_init, init, ttl, clock_ms(), &out,
                          &forcible);

    if (rc < 0) {
        lua_pushnil(L);
        lua_pushstring(L, dict_err(rc));
        return 2;
    }
    lua_pushnumber(L, out);
    lua_pushnil(L);
    lua_pushboolean(L, forcible);
    return 3;
}

static int d_ttl(lua_State *L)
{
    struct luadict *d = dict_of(L);
    size_t n;
    const char *k = dict_key(L, &n);
    uint64_t ms = 0;

    if (luadict_ttl(d, k, n, clock_ms(), &ms) < 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "not found");
        return 2;
    }
    lua_pushnumber(L, (lua_Number)ms / 1000.0);
    return 1;
}

static int d_expire(lua_State *L)
{
    struct luadict *d = dict_of(L);
    size_t n;
    const char *k = dict_key(L, &n);

    if (luadict_expire(d, k, n, opt_ttl(L, 3), clock_ms()) < 0) {
        lua_pushboolean(L, 0);
        lua_pushliteral(L, "not found");
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int d_flush_all(lua_State *L)
{
    luadict_flush_all(dict_of(L));
    return 0;
}

static int d_flush_expired(lua_State *L)
{
    struct luadict *d = dict_of(L);
    lua_Integer max = luaL_optinteger(L, 2, 0);

    lua_pushinteger(L, (lua_Integer)luadict_flush_expired(
                           d, max > 0 ? (size_t)max : 0, clock_ms()));
    return 1;
}

struct keys_ctx {
    lua_State *L;
    lua_Integer i;
};

static int push_key(void *arg, const char *key, size_t klen)
{
    struct keys_ctx *c = arg;

    /* The stack was checked before: one slot per key is all it takes. */
    lua_pushlstring(c->L, key, klen);
    lua_rawseti(c->L, -2, ++c->i);
    return 0;
}

static int d_get_keys(lua_State *L)
{
    struct luadict *d = dict_of(L);
    lua_Integer max = luaL_optinteger(L, 2, 1024);
    struct keys_ctx c = {L, 0};

    if (max < 0)
        return luaL_error(L, "bad max");
    lua_newtable(L);
    luadict_keys(d, (size_t)max, clock_ms(), push_key, &c);
    return 1;
}

static int d_capacity(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)luadict_capacity(dict_of(L)));
    return 1;
}

static int d_free_space(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)luadict_free_space(dict_of(L)));
    return 1;
}

static const luaL_Reg dict_methods[] = {
    {"get", d_get},
    {"set", d_set},
    {"safe_set", d_safe_set},
    {"add", d_add},
    {"safe_add", d_safe_add},
    {"replace", d_replace},
    {"delete", d_delete},
    {"incr", d_incr},
    {"ttl", d_ttl},
    {"expire", d_expire},
    {"flush_all", d_flush_all},
    {"flush_expired", d_flush_expired},
    {"get_keys", d_get_keys},
    {"capacity", d_capacity},
    {"free_space", d_free_space},
    {NULL, NULL},
};

/* strait.ratelimit.token_bucket(dict, key, rate, burst): allowed,
 * tokens left, seconds until the next token (when refused). */
static int rl_token_bucket(lua_State *L)
{
    struct luadict *d = dict_of(L);
    size_t n;
    const char *k = dict_key(L, &n);
    lua_Number rate = luaL_checknumber(L, 3);
    lua_Number burst = luaL_checknumber(L, 4);
    double left = 0;
    uint64_t retry = 0;
    int rc;

    if (!(rate > 0) || !(burst >= 1))
        return luaL_error(L, "token_bucket: rate > 0 and burst >= 1");
    rc = luadict_token_bucket(d, k, n, rate, burst, clock_ms(), &left, &retry);
    if (rc < 0) {
        lua_pushnil(L);
        lua_pushstring(L, dict_err(rc));
        return 2;
    }
    lua_pushboolean(L, rc == 1);
    lua_pushnumber(L, left);
    lua_pushnumber(L, (lua_Number)retry / 1000.0);
    return 3;
}

/* strait.shared.NAME for each dict of the programs, and
 * strait.ratelimit; the strait table is on top. */
static void luaapi_open_shared(struct luavm *vm)
{
    lua_State *L = vm->L;
    const struct luaprogs *p = vm->progs;

    luaL_newmetatable(L, DICT_MT);
    luaL_newlib(L, dict_methods);
    lua_setfield(L, -2, "__index");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
    lua_createtable(L, 0, (int)p->ndicts);
    for (size_t i = 0; i < p->ndicts; i++) {
        const char *name = luavm_dict_name(vm, luadict_name(p->dicts[i]));
        struct luadict **u;
        if (name == NULL)
            continue; /* another namespace's */
        u = lua_newuserdatauv(L, sizeof(*u), 0);
        *u = p->dicts[i]; /* the programs' reference outlives the state */
        luaL_setmetatable(L, DICT_MT);
        lua_setfield(L, -2, name);
    }
    lua_setfield(L, -2, "shared");
    lua_newtable(L);
    lua_pushcfunction(L, rl_token_bucket);
    lua_setfield(L, -2, "token_bucket");
    lua_setfield(L, -2, "ratelimit");
}

/* ---- strait.timer ---------------------------------------------------------
 * at(delay, fn, ...) and every(interval, fn, ...): fn(premature, ...) runs
 * on the worker's loop, outside any request (no handle), under the
 * budget of the policy that made it, in a coroutine that may wait in
 * strait.http.request (otherwise not yieldable: past burst it
 * raises). When the state closes (its routes were replaced and their
 * last request ended, or the worker stops) every pending timer runs
 * once more with premature true, as OpenResty's do at exit. */

struct ltimer {
    struct timer t;
    struct luavm *vm;
    struct ltimer *prev, *next;
    int ref; /* registry: {fn, args...} */
    int nargs;
    size_t prog;
    uint64_t every_ms; /* 0: once */
};

static void timer_unlink(struct luavm *vm, struct ltimer *t)
{
    if (t->prev != NULL)
        t->prev->next = t->next;
    else
        vm->timers = t->next;
    if (t->next != NULL)
        t->next->prev = t->prev;
    vm->ntimers--;
}

/* Runs t's function with premature (its errors are counted). */
static void timer_call(struct ltimer *t, int premature)
{
    struct luavm *vm = t->vm;
    lua_State *L = vm->L;

    lua_rawgeti(L, LUA_REGISTRYINDEX, t->ref);
    for (int i = 1; i <= t->nargs + 1; i++)
        lua_rawgeti(L, -i, i);
    lua_remove(L, -(t->nargs + 2)); /* the table */
    lua_pushboolean(L, premature);
    if (t->nargs > 0)
        lua_rotate(L, -(t->nargs + 1), 1); /* fn, premature, args */
    /* In a coroutine of its own: it may wait in strait.http. */
    luavm_timer_run(vm, t->prog, t->nargs + 1);
}

static void timer_fire(void *arg)
{
    struct ltimer *t = arg;
    struct luavm *vm = t->vm;
    uint64_t wait_ms;

    if (!luabudget_timer_admit(vm, t->prog, &wait_ms)) {
        /* Its policy's timers used their share of the worker: it runs
         * once that is paid back. */
        luavm_count(vm, t->prog, LUAVM_TIMER, LUAVM_ERR_DEFERRED,
                    "timer deferred: its policy used its share");
        timer_arm(&t->t, wait_ms);
        return;
    }
    if (t->every_ms > 0 && !vm->closing) {
        timer_arm(&t->t, t->every_ms);
        timer_call(t, 0);
        return;
    }
    timer_unlink(vm, t);
    timer_call(t, 0);
    luaL_unref(vm->L, LUA_REGISTRYINDEX, t->ref);
    timer_dispose(&t->t);
    free(t);
}

static int make_timer(lua_State *L, int every)
{
    struct luavm *vm = luavm_of(L);
    lua_Number delay = luaL_checknumber(L, 1);
    int n = lua_gettop(L);
    struct ltimer *t;

    luaL_checktype(L, 2, LUA_TFUNCTION);
    if (!(delay >= 0) || delay > 86400.0 * 365 || (every && delay < 0.001))
        return luaL_error(L, "strait.timer: bad delay");
    if (vm->closing) {
        lua_pushnil(L);
        lua_pushliteral(L, "process exiting");
        return 2;
    }
    if (vm->ntimers >= LUAVM_MAX_TIMERS) {
        lua_pushnil(L);
        lua_pushliteral(L, "too many pending timers");
        return 2;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return luaL_error(L, "out of memory");
    /* {fn, args...}: what the timer calls, kept in the registry. */
    lua_createtable(L, n - 1, 0);
    for (int i = 2; i <= n; i++) {
        lua_pushvalue(L, i);
        lua_rawseti(L, -2, i - 1);
    }
    t->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    t->nargs = n - 2;
    t->vm = vm;
    t->prog = vm->run != NULL ? vm->run->prog : vm->loading;
    t->every_ms = every ? (uint64_t)(delay * 1000.0) : 0;
    t->next = vm->timers;
    if (vm->timers != NULL)
        vm->timers->prev = t;
    vm->timers = t;
    vm->ntimers++;
    if (vm->base != NULL) {
        timer_init(&t->t, vm->base, timer_fire, t);
        timer_arm(&t->t, (uint64_t)(delay * 1000.0));
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int t_at(lua_State *L)
{
    return make_timer(L, 0);
}

static int t_every(lua_State *L)
{
    return make_timer(L, 1);
}

static int t_pending(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)luavm_of(L)->ntimers);
    return 1;
}

void luaapi_open_timer(struct luavm *vm)
{
    lua_State *L = vm->L;

    lua_newtable(L);
    lua_pushcfunction(L, t_at);
    lua_setfield(L, -2, "at");
    lua_pushcfunction(L, t_every);
    lua_setfield(L, -2, "every");
    lua_pushcfunction(L, t_pending);
    lua_setfield(L, -2, "pending");
    lua_setfield(L, -2, "timer");
}

void luaapi_timers_close(struct luavm *vm)
{
    vm->closing = 1;
    while (vm->timers != NULL) {
        struct ltimer *t = vm->timers;
        timer_unlink(vm, t);
        if (vm->base != NULL) {
            uint64_t wait_ms;
            timer_dispose(&t->t);
            /* Closing runs them all at once: past the policy's share,
             * the rest are dropped unrun rather than pinning the
             * worker for a burst each. */
            if (luabudget_timer_admit(vm, t->prog, &wait_ms))
                timer_call(t, 1);
            else
                luavm_count(vm, t->prog, LUAVM_TIMER, LUAVM_ERR_DEFERRED,
                            "premature timer dropped: its policy used its "
                            "share");
        }
        luaL_unref(vm->L, LUA_REGISTRYINDEX, t->ref);
        free(t);
    }
}
