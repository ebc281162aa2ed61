/*
 * on_tls_client_hello's handle, c: what the ClientHello says (SNI, ALPN)
 * and who sent it, before the handshake goes on; c:reject() aborts it.
 * It is valid during its hook call only, with the same serial check as
 * the request handle (lua_api.c), so a c kept after the hook raises
 * "stale handle".
 */
#include "config.h"

#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "core/log.h"
#include "policy/lua_int.h"

#define HELLO_MT "strait.hello"

struct lhello {
    struct luareq *rq;
    unsigned serial;
};

static struct luareq *hello_of(lua_State *L)
{
    struct lhello *h = luaL_checkudata(L, 1, HELLO_MT);
    struct luavm *vm = luavm_of(L);

    if (vm->cur == NULL || h->rq != vm->cur || h->serial != vm->cur->serial ||
        h->rq->hello == NULL)
        luaL_error(L, "stale handle");
    return h->rq;
}

/* c:sni(): the server name asked for, lowercase; nil without one. */
static int c_sni(lua_State *L)
{
    const struct luahello *ch = hello_of(L)->hello;

    if (ch->sni.n == 0)
        lua_pushnil(L);
    else
        lua_pushlstring(L, ch->sni.p, ch->sni.n);
    return 1;
}

/* c:alpn(): the protocols the client offers, in its order ({} for
 * none). */
static int c_alpn(lua_State *L)
{
    const struct luahello *ch = hello_of(L)->hello;
    lua_Integer k = 0;

    lua_newtable(L);
    for (size_t i = 0; i < ch->alpn_len;) {
        size_t l = ch->alpn[i];
        if (l == 0 || i + 1 + l > ch->alpn_len)
            break;
        lua_pushlstring(L, (const char *)ch->alpn + i + 1, l);
        lua_rawseti(L, -2, ++k);
        i += 1 + l;
    }
    return 1;
}

static int c_remote_addr(lua_State *L)
{
    const struct luareq *rq = hello_of(L);

    lua_pushstring(L, rq->peer_ip != NULL ? rq->peer_ip : "");
    return 1;
}

/* c:geo(): as h:geo(), for the peer's address; nil without geoip. */
static int c_geo(lua_State *L)
{
    luaapi_push_geo(L, hello_of(L)->geo);
    return 1;
}

/* c:reject([reason]): the handshake is aborted (a handshake_failure
 * alert) once the hook returns; no later policy runs. */
static int c_reject(lua_State *L)
{
    struct luareq *rq = hello_of(L);
    const char *why = luaL_optstring(L, 2, "rejected");
    const struct luahello *ch = rq->hello;

    LOG_LIMITED(1000, LOG_INFO,
                "lua: policy %s: TLS handshake from %s (sni %.*s) rejected: %s",
                rq->vm->progs->v[rq->next].name,
                rq->peer_ip != NULL ? rq->peer_ip : "?", (int)ch->sni.n,
                ch->sni.n > 0 ? ch->sni.p : "", why);
    rq->status = 403;
    return 0;
}

void luaapi_open_hello(struct luavm *vm)
{
    static const luaL_Reg methods[] = {
        {"sni", c_sni}, {"alpn", c_alpn},     {"remote_addr", c_remote_addr},
        {"geo", c_geo}, {"reject", c_reject}, {NULL, NULL},
    };
    lua_State *L = vm->L;

    luaL_newmetatable(L, HELLO_MT);
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
}

void luaapi_push_hello(struct luavm *vm, lua_State *co, struct luareq *rq)
{
    struct lhello *h = lua_newuserdatauv(co, sizeof(*h), 0);

    rq->serial = ++vm->serial_gen;
    h->rq = rq;
    h->serial = rq->serial;
    luaL_setmetatable(co, HELLO_MT);
}
