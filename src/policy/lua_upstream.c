/*
 * The handle's methods that choose where a request goes:
 * h:set_upstream(host) in on_request re-targets it to another host of
 * strait's registry (never a name resolved on the spot), and
 * h:endpoints()/h:pick(ep) in on_upstream_select choose the endpoint of
 * the cluster routing picked, in place of the balancer.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "policy/lua_int.h"

int luavm_upstream(const struct luaprogs *p, const char *host, size_t n,
                   const char **why)
{
    char name[256];
    const char *colon = memchr(host, ':', n);
    size_t hn = colon != NULL ? (size_t)(colon - host) : n;
    uint32_t port = 0;
    int found = -1, several = 0;

    *why = "not a host of the registry (ServiceEntry or Service)";
    if (hn == 0 || hn >= sizeof(name))
        return -1;
    for (size_t i = 0; i < hn; i++) {
        char c = host[i];
        name[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    name[hn] = '\0';
    if (colon != NULL) {
        size_t k = hn + 1;
        if (k == n || n - k > 5)
            goto bad_port;
        for (; k < n; k++) {
            if (host[k] < '0' || host[k] > '9')
                goto bad_port;
            port = port * 10 + (uint32_t)(host[k] - '0');
        }
        if (port == 0 || port > 65535)
            goto bad_port;
    }
    for (size_t i = 0; i < p->nups; i++) {
        const struct luaupstream *u = &p->ups[i];
        if (strcmp(u->host, name) != 0 || (port != 0 && u->port != port))
            continue;
        if (found >= 0)
            several = 1;
        found = u->cluster;
    }
    if (found < 0 && port != 0) {
        /* The host is known but not with this port? Say which. */
        for (size_t i = 0; i < p->nups; i++)
            if (strcmp(p->ups[i].host, name) == 0)
                *why = "the host has no such port";
        return -1;
    }
    if (several) {
        *why = "the host has several ports: name one (host:port)";
        return -1;
    }
    return found;
bad_port:
    *why = "bad port";
    return -1;
}

/* h:set_upstream(host): the request goes to host's cluster (its
 * DestinationRule applies) instead of the route's destination; the
 * route's other settings (timeout, retries, rewrites) stay. */
static int h_set_upstream(lua_State *L)
{
    struct luareq *rq = luaapi_handle(L);
    size_t n;
    const char *host = luaL_checklstring(L, 2, &n);
    const char *why;
    int c;

    if (rq->phase != LUAVM_ON_REQUEST)
        return luaL_error(L, "set_upstream: only in on_request");
    c = luavm_upstream(rq->vm->progs, host, n, &why);
    if (c < 0)
        return luaL_error(L, "set_upstream: unknown host '%s': %s", host, why);
    rq->upstream = c;
    return 0;
}

/* h:endpoints(): the endpoints on offer, {address=, weight=} each, in
 * the cluster's order; outlier-ejected ones are left out. */
static int h_endpoints(lua_State *L)
{
    struct luareq *rq = luaapi_handle(L);

    if (rq->phase != LUAVM_ON_UPSTREAM_SELECT)
        return luaL_error(L, "endpoints: only in on_upstream_select");
    lua_createtable(L, (int)rq->neps, 0);
    for (size_t i = 0; i < rq->neps; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, rq->eps[i].address);
        lua_setfield(L, -2, "address");
        lua_pushinteger(L, (lua_Integer)rq->eps[i].weight);
        lua_setfield(L, -2, "weight");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

/* h:pick(ep): ep is one of h:endpoints()'s tables, or its address. The
 * address is what counts: a table made up by the script picks only an
 * endpoint that was offered. */
static int h_pick(lua_State *L)
{
    struct luareq *rq = luaapi_handle(L);
    const char *addr;

    if (rq->phase != LUAVM_ON_UPSTREAM_SELECT)
        return luaL_error(L, "pick: only in on_upstream_select");
    if (lua_istable(L, 2)) {
        lua_getfield(L, 2, "address");
        addr = lua_tostring(L, -1);
    } else {
        addr = lua_tostring(L, 2);
    }
    if (addr == NULL)
        return luaL_error(L, "pick: an endpoint of h:endpoints() expected");
    for (size_t i = 0; i < rq->neps; i++)
        if (strcmp(rq->eps[i].address, addr) == 0) {
            rq->picked = (int)i;
            return 0;
        }
    return luaL_error(L, "pick: '%s' is not an endpoint on offer", addr);
}

void luaapi_upstream_methods(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"set_upstream", h_set_upstream},
        {"endpoints", h_endpoints},
        {"pick", h_pick},
        {NULL, NULL},
    };

    luaL_setfuncs(L, methods, 0);
}
