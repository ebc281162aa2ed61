/*
 * Read-only views of strait's module tables (strait, strait.http, ...,
 * string, table, math, utf8, coroutine, os and the strait.* modules
 * require() returns).
 *
 * Why: the policies of a namespace share one lua_State, so a table they
 * can all reach is a channel between them. Were strait.http writable, one
 * policy could replace strait.http.request (or string.find) and so decide
 * what another policy's authorization call answers. A view is an empty
 * table whose metatable reads through to the real table (__index), refuses
 * every assignment with an error naming the field (__newindex), iterates
 * the real table without handing it out (__pairs) and hides itself
 * (__metatable). The real table is reachable only through the view; the
 * nested tables it holds are replaced by their own views first, so no
 * path leads to a writable one. rawset() is the one way past __newindex:
 * it is wrapped to refuse a view (the views are kept in a weak registry
 * table, with their names for the message).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "policy/lua_int.h"

#define FROZEN_KEY "strait.frozen"
/* Module tables nest two or three deep; a cycle stops here. */
#define FREEZE_DEPTH 8

/* The name of the view at idx, or NULL when it is no view. */
static const char *frozen_name(lua_State *L, int idx)
{
    const char *name;

    idx = lua_absindex(L, idx);
    lua_getfield(L, LUA_REGISTRYINDEX, FROZEN_KEY);
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    /* The string stays alive: the set holds it as long as the view. */
    name = lua_tostring(L, -1);
    lua_pop(L, 2);
    return name;
}

static int fz_newindex(lua_State *L)
{
    const char *name = lua_tostring(L, lua_upvalueindex(1));
    const char *key = luaL_tolstring(L, 2, NULL);

    return luaL_error(L, "%s is read-only: cannot assign %s.%s", name, name,
                      key);
}

/* The iterator __pairs hands out: next() over the real table (upvalue),
 * which itself is never returned. */
static int fz_next(lua_State *L)
{
    lua_settop(L, 2);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushvalue(L, 2);
    if (lua_next(L, -2))
        return 2;
    lua_pushnil(L);
    return 1;
}

static int fz_pairs(lua_State *L)
{
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushcclosure(L, fz_next, 1);
    lua_pushvalue(L, 1);
    lua_pushnil(L);
    return 3;
}

static int fz_len(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)lua_rawlen(L, lua_upvalueindex(1)));
    return 1;
}

static void freeze_at(lua_State *L, const char *name, int depth)
{
    int t = lua_gettop(L);

    /* Nested tables first, each replaced in place by its view (assigning
     * an existing field during lua_next is allowed). */
    lua_pushnil(L);
    while (lua_next(L, t)) {
        /* String keys are a module's or a map's fields; integer keys a
         * list's items (policy.config's lists of maps). */
        int key = lua_type(L, -2);
        if (depth < FREEZE_DEPTH && lua_type(L, -1) == LUA_TTABLE &&
            (key == LUA_TSTRING ||
             (key == LUA_TNUMBER && lua_isinteger(L, -2))) &&
            frozen_name(L, -1) == NULL) {
            char child[256];
            if (key == LUA_TSTRING)
                snprintf(child, sizeof(child), "%s.%s", name,
                         lua_tostring(L, -2));
            else
                snprintf(child, sizeof(child), "%s[%lld]", name,
                         (long long)lua_tointeger(L, -2));
            freeze_at(L, child, depth + 1);
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_rawset(L, t);
        } else {
            lua_pop(L, 1);
        }
    }
    lua_newtable(L);          /* the view */
    lua_createtable(L, 0, 5); /* its metatable */
    lua_pushvalue(L, t);
    lua_setfield(L, -2, "__index");
    lua_pushstring(L, name);
    lua_pushcclosure(L, fz_newindex, 1);
    lua_setfield(L, -2, "__newindex");
    lua_pushvalue(L, t);
    lua_pushcclosure(L, fz_pairs, 1);
    lua_setfield(L, -2, "__pairs");
    lua_pushvalue(L, t);
    lua_pushcclosure(L, fz_len, 1);
    lua_setfield(L, -2, "__len");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_getfield(L, LUA_REGISTRYINDEX, FROZEN_KEY);
    lua_pushvalue(L, -2);
    lua_pushstring(L, name);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    lua_replace(L, t);
}

void luafreeze(lua_State *L, const char *name)
{
    if (lua_type(L, -1) != LUA_TTABLE || frozen_name(L, -1) != NULL)
        return;
    freeze_at(L, name, 0);
}

/* rawset() that refuses a view: the one call that would write past
 * __newindex. */
static int fz_rawset(lua_State *L)
{
    const char *name;

    luaL_checktype(L, 1, LUA_TTABLE);
    name = frozen_name(L, 1);
    if (name != NULL)
        return luaL_error(L, "%s is read-only: cannot assign %s.%s", name, name,
                          luaL_tolstring(L, 2, NULL));
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

void luafreeze_globals(lua_State *L)
{
    static const char *const libs[] = {"strait", "string",    "table", "math",
                                       "utf8",   "coroutine", "os",    NULL};
    int g = lua_gettop(L);

    lua_newtable(L); /* the views: weak keys, their names */
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, FROZEN_KEY);
    for (int i = 0; libs[i] != NULL; i++) {
        lua_getfield(L, g, libs[i]);
        luafreeze(L, libs[i]);
        lua_setfield(L, g, libs[i]);
    }
    lua_getfield(L, g, "rawset");
    lua_pushcclosure(L, fz_rawset, 1);
    lua_setfield(L, g, "rawset");
    /* Strings' metatable: its __index is the real string table, and a
     * policy that could reach it would change every string's methods. */
    lua_pushliteral(L, "");
    if (lua_getmetatable(L, -1)) {
        lua_pushboolean(L, 0);
        lua_setfield(L, -2, "__metatable");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}
