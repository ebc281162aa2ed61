/*
 * The Lua runtime of LuaPolicy: a worker's state, the sandbox, the
 * budgets and the hooks' coroutines (the handle API is lua_api.c).
 *
 * Budgets, and why each is enforced where it is:
 * - memory: every allocation of a state goes through capped_alloc(),
 *   which refuses past the cap; Lua raises "not enough memory" and the
 *   state stays usable once the garbage is collected.
 * - time: a count hook fires every instructionSlice VM instructions. In
 *   a yieldable hook it yields once the slice's share of the burst is
 *   used, so other streams get the worker, and the proxy resumes it on a
 *   later turn; past burst (one call) or requestTime (the request's
 *   total) it raises, and re-arms itself with a count of 1 so a script's
 *   own pcall cannot swallow the limit: the next instruction raises
 *   again. The hook never fires inside C functions, so the library
 *   functions that can run long on one call are bounded by their
 *   arguments instead, and hooks are per thread, so the script's
 *   coroutines are armed when they run (lua_budget.c). Past the drain
 *   deadline (vm->stop) it raises "process exiting".
 * - escapes: only base (no dofile, loadfile; load text-only with the
 *   policy's environment; collectgarbage("count") only; setmetatable
 *   refuses __gc, whose finalizers run with hooks off), string, table,
 *   math, utf8, coroutine and os.time/clock/date are there. No io,
 *   package, require, debug or C modules.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "core/ascii.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/host.h"
#include "core/log.h"
#include "event/timer.h"
#include "policy/lua_dict.h"
#include "policy/lua_int.h"

static void trun_free(struct luatrun *tr);

/* A syntax check compiles text only; this bounds what a huge or hostile
 * script can make the checker allocate. */
#define SYNTAX_MEMORY ((size_t)64 << 20)

static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct capped *c = ud;
    void *p;

    /* lua_Alloc (5.4 manual 4.6): with ptr NULL, osize is the type tag
     * of the new object, not a size. */
    if (ptr == NULL)
        osize = 0;
    if (nsize == 0) {
        free(ptr);
        c->used -= osize;
        return NULL;
    }
    if (nsize > osize && nsize - osize > c->cap - c->used)
        return NULL;
    p = realloc(ptr, nsize);
    if (p == NULL)
        return NULL;
    c->used = c->used - osize + nsize;
    return p;
}

int luavm_syntax(const char *src, size_t n, char *err, size_t errn)
{
    struct capped c = {0, SYNTAX_MEMORY};
    lua_State *L = lua_newstate(capped_alloc, &c);
    int line = 0;

    if (L == NULL) {
        snprintf(err, errn, "out of memory");
        return -1;
    }
    if (luaL_loadbufferx(L, src, n, "=policy", "t") != LUA_OK) {
        const char *m = lua_tostring(L, -1);
        snprintf(err, errn, "%s", m != NULL ? m : "error");
        line = -1;
        /* "policy:LINE: message" */
        if (m != NULL && strncmp(m, "policy:", 7) == 0) {
            long v = strtol(m + 7, NULL, 10);
            if (v > 0 && v < 1000000000)
                line = (int)v;
        }
    }
    lua_close(L);
    return line;
}

/* The one policy a check runs, as a worker would load it. NULL: out of
 * memory. */
static struct luaprogs *check_progs(const char *name, const char *src, size_t n,
                                    size_t memory, int slice, uint64_t burst_ms,
                                    uint64_t request_ms)
{
    struct luaprogs *p = luaprogs_new(1);
    struct luaprog *g;

    if (p == NULL)
        return NULL;
    p->n = 1;
    p->quiet = 1;
    g = &p->v[0];
    g->name = strdup(name);
    g->chunk = strdup("=policy");
    g->source = malloc(n + 1);
    if (g->name == NULL || g->chunk == NULL || g->source == NULL) {
        luaprogs_unref(p);
        return NULL;
    }
    memcpy(g->source, src, n);
    g->source[n] = '\0';
    g->source_len = n;
    g->memory = memory;
    g->instruction_slice = slice;
    g->burst_ms = burst_ms;
    g->request_ms = request_ms;
    g->any_ref = 1;
    return p;
}

static int unknown_hook(struct luavm *vm, char *err, size_t errn);

int luavm_check_budget(const char *name, const char *src, size_t n,
                       size_t memory, int slice, uint64_t burst_ms,
                       uint64_t request_ms, const int *stop, char *err,
                       size_t errn, int *hook_line)
{
    struct luaprogs *p =
        check_progs(name, src, n, memory, slice, burst_ms, request_ms);
    struct luaprog *g;
    struct luavm *vm;
    char *e = NULL;
    int rc = 0;

    err[0] = '\0';
    if (p == NULL)
        return 0;
    g = &p->v[0];
    vm = luavm_new_stop(p, NULL, stop, &e);
    if (vm == NULL && (g->errors[LUAVM_INIT_WORKER][LUAVM_ERR_TIMEOUT] > 0 ||
                       g->errors[LUAVM_INIT_WORKER][LUAVM_ERR_MEMORY] > 0)) {
        snprintf(err, errn, "%s", e != NULL ? e : "over its budget");
        rc = -1;
    }
    if (hook_line != NULL)
        *hook_line = vm != NULL ? unknown_hook(vm, err, errn) : 0;
    free(e);
    luavm_free(vm);
    luaprogs_unref(p);
    return rc;
}

/* ---- programs ------------------------------------------------------------ */

struct luaprogs *luaprogs_new(size_t n)
{
    struct luaprogs *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    p->v = calloc(n ? n : 1, sizeof(*p->v));
    if (p->v == NULL) {
        free(p);
        return NULL;
    }
    p->refs = 1;
    return p;
}

struct luaprogs *luaprogs_ref(struct luaprogs *p)
{
    if (p != NULL)
        __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
    return p;
}

static void strv_free(char **v, size_t n)
{
    for (size_t i = 0; v != NULL && i < n; i++)
        free(v[i]);
    free(v);
}

void luaprogs_unref(struct luaprogs *p)
{
    if (p == NULL || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (size_t i = 0; i < p->n; i++) {
        struct luaprog *g = &p->v[i];
        free(g->name);
        free(g->chunk);
        free(g->source);
        for (size_t k = 0; k < g->nconfig; k++) {
            free(g->config[k].key);
            free(g->config[k].str);
        }
        free(g->config);
        strv_free(g->vss, g->nvss);
        strv_free(g->gw_hosts, g->ngw_hosts);
        strv_free(g->hosts, g->nhosts);
        strv_free(g->disabled, g->ndisabled);
    }
    for (size_t i = 0; i < p->nmods; i++) {
        free(p->mods[i].name);
        free(p->mods[i].source);
    }
    for (size_t i = 0; i < p->ndicts; i++)
        luadict_unref(p->dicts[i]);
    for (size_t i = 0; i < p->nups; i++)
        free(p->ups[i].host);
    free(p->ups);
    free(p->v);
    free(p);
}

static int prog_cmp(const void *a, const void *b)
{
    const struct luaprog *x = a, *y = b;

    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    return strcmp(x->name, y->name);
}

void luaprogs_sort(struct luaprogs *p)
{
    qsort(p->v, p->n, sizeof(*p->v), prog_cmp);
    /* One group, and so one lua_State per worker, per namespace. */
    p->ngroups = 0;
    for (size_t i = 0; i < p->n; i++) {
        const char *slash = strchr(p->v[i].name, '/');
        size_t k = slash != NULL ? (size_t)(slash - p->v[i].name) : 0;
        p->v[i].group = p->ngroups;
        for (size_t j = 0; j < i; j++)
            if (strncmp(p->v[j].name, p->v[i].name, k + 1) == 0) {
                p->v[i].group = p->v[j].group;
                break;
            }
        if (p->v[i].group == p->ngroups)
            p->ngroups++;
    }
}

static const char *const phase_names[LUAVM_NPHASES] = {
    "on_request",         "on_response", "on_log",
    "init_worker",        "timer",       "on_upstream_select",
    "on_tls_client_hello"};
static const char *const reason_names[LUAVM_NREASONS] = {"error", "timeout",
                                                         "memory", "deferred"};

const char *luavm_phase_name(int phase)
{
    return phase >= 0 && phase < LUAVM_NPHASES ? phase_names[phase] : "?";
}

const char *luavm_reason_name(int reason)
{
    return reason >= 0 && reason < LUAVM_NREASONS ? reason_names[reason] : "?";
}

uint64_t luavm_errors(const struct luaprogs *p, size_t i, int phase, int reason)
{
    return __atomic_load_n(&p->v[i].errors[phase][reason], __ATOMIC_RELAXED);
}

/* ---- the budget hook ------------------------------------------------------
 */

void luavm_budget_hook(lua_State *L, lua_Debug *ar)
{
    struct luavm *vm = luavm_of(L);
    struct luarun *run = vm->run;
    uint64_t now, spent;

    (void)ar;
    if (run == NULL)
        return;
    if (run->tripped) {
        /* Past a limit already: every instruction raises again, so a
         * pcall in the script cannot go on running. This thread may not
         * be the one that tripped (a script's coroutine): it fires on
         * every instruction from now on too. */
        lua_sethook(L, luavm_budget_hook, LUA_MASKCOUNT, 1);
        luaL_error(L, "%s", run->tripped);
        return;
    }
    if (run->strict) {
        /* A hook on the connection's or the balancer's path: one slice
         * of instructions is all it gets. */
        run->tripped = "instruction budget exceeded";
        run->reason = LUAVM_ERR_TIMEOUT;
        lua_sethook(L, luavm_budget_hook, LUA_MASKCOUNT, 1);
        luaL_error(L, "%s", run->tripped);
        return;
    }
    now = clock_thread_cpu_us() / 1000u;
    spent = now - run->start_ms;
    if (vm->stop != NULL && __atomic_load_n(vm->stop, __ATOMIC_RELAXED)) {
        /* The process is past its drain deadline. */
        run->tripped = "process exiting";
        run->reason = LUAVM_ERR_TIMEOUT;
        lua_sethook(L, luavm_budget_hook, LUA_MASKCOUNT, 1);
        luaL_error(L, "%s", run->tripped);
        return;
    }
    if (spent > run->burst_ms || run->used_ms + spent > run->request_ms) {
        run->tripped =
            spent > run->burst_ms ? "burst timeout" : "execution timeout";
        run->reason = LUAVM_ERR_TIMEOUT;
        lua_sethook(L, luavm_budget_hook, LUA_MASKCOUNT, 1);
        luaL_error(L, "%s", run->tripped);
        return;
    }
    /* Our own coroutine, yieldable (not under a C call that cannot
     * yield, nor in a script's coroutine): give the worker back once a
     * slice of time went by. */
    if (run->yieldable && L == run->co && lua_isyieldable(L) &&
        spent >= run->slice_ms)
        lua_yield(L, 0);
}

/* ---- the state ------------------------------------------------------------
 */

static int b_load(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    const char *name = luaL_optstring(L, 2, "=(load)");

    /* Compiling is C, where the count hook never fires. */
    if (n > LUAVM_LOAD_MAX)
        return luaL_error(L, "load: chunk over %d bytes", (int)LUAVM_LOAD_MAX);
    /* Text only: crafted bytecode can crash the VM. The chunk gets the
     * caller's sandbox, never the real globals. */
    if (luaL_loadbufferx(L, s, n, name, "t") != LUA_OK) {
        lua_pushnil(L);
        lua_insert(L, -2);
        return 2;
    }
    if (!lua_isnoneornil(L, 4)) {
        lua_pushvalue(L, 4);
        if (lua_setupvalue(L, -2, 1) == NULL)
            lua_pop(L, 1);
    } else {
        /* The calling policy's own globals: the sandbox itself is shared
         * by the policies of the state, so a chunk that could assign to
         * it would change what the others see. */
        struct luavm *vm = luavm_of(L);
        size_t i = vm->run != NULL ? vm->run->prog : vm->loading;
        if (vm->envs == NULL || vm->envs[i] == LUA_NOREF)
            return luaL_error(L, "load: no environment here");
        lua_rawgeti(L, LUA_REGISTRYINDEX, vm->envs[i]);
        if (lua_setupvalue(L, -2, 1) == NULL)
            lua_pop(L, 1);
    }
    return 1;
}

static int b_collectgarbage(lua_State *L)
{
    const char *opt = luaL_optstring(L, 1, "count");

    if (strcmp(opt, "count") != 0)
        return luaL_error(L, "collectgarbage: only \"count\" is allowed");
    lua_pushnumber(L, (lua_Number)lua_gc(L, LUA_GCCOUNT, 0) +
                          (lua_Number)lua_gc(L, LUA_GCCOUNTB, 0) / 1024);
    return 1;
}

static int b_setmetatable(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    if (lua_istable(L, 2)) {
        lua_getfield(L, 2, "__gc");
        if (!lua_isnil(L, -1))
            return luaL_error(L, "setmetatable: __gc is not allowed");
        lua_pop(L, 1);
    }
    lua_settop(L, 2);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, 2, 1);
    return 1;
}

static int b_print(lua_State *L)
{
    luaL_Buffer b;
    int n = lua_gettop(L);

    luaL_buffinit(L, &b);
    for (int i = 1; i <= n; i++) {
        size_t k;
        const char *s = luaL_tolstring(L, i, &k);
        if (i > 1)
            luaL_addchar(&b, '\t');
        luaL_addvalue(&b);
        (void)s;
    }
    luaL_pushresult(&b);
    log_msg(LOG_INFO, "lua: %s", lua_tostring(L, -1));
    return 0;
}

/* require() loads only strait's own modules, text read when the
 * snapshot was compiled (lua.path's strait/ directories): never a file
 * at run time, never a C module. Each runs once per state, in its own
 * environment over the sandbox. */
static int b_require(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    struct luavm *vm = luavm_of(L);
    const struct luamod *m = NULL;

    lua_getfield(L, LUA_REGISTRYINDEX, "strait.loaded");
    if (lua_getfield(L, -1, name) != LUA_TNIL)
        return 1;
    lua_pop(L, 1);
    for (size_t i = 0; i < vm->progs->nmods; i++)
        if (strcmp(vm->progs->mods[i].name, name) == 0)
            m = &vm->progs->mods[i];
    if (m == NULL)
        return luaL_error(L,
                          "module '%s' not found (only strait.* modules "
                          "of lua.path can be required)",
                          name);
    lua_pushfstring(L, "@%s.lua", name);
    if (luaL_loadbufferx(L, m->source, m->len, lua_tostring(L, -1), "t") !=
        LUA_OK)
        return lua_error(L);
    lua_newtable(L); /* its environment */
    lua_newtable(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->sandbox_ref);
    lua_setfield(L, -2, "__index");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable"); /* the sandbox stays out of reach */
    lua_setmetatable(L, -2);
    lua_setupvalue(L, -2, 1);
    lua_call(L, 0, 1);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushboolean(L, 1);
    }
    /* Every policy of the state gets this same table: read-only, so no
     * policy changes the module for the others. */
    luafreeze(L, name);
    lua_pushvalue(L, -1);
    lua_setfield(L, -4, name);
    return 1;
}

static void open_lib(lua_State *L, const char *name, lua_CFunction f)
{
    luaL_requiref(L, name, f, 1);
    lua_pop(L, 1);
}

/* The sandbox's globals: a table built from the libraries allowed. */
static void build_sandbox(struct luavm *vm)
{
    lua_State *L = vm->L;
    static const char *const drop[] = {"dofile", "loadfile", "module", NULL};

    open_lib(L, "_G", luaopen_base);
    open_lib(L, LUA_STRLIBNAME, luaopen_string);
    open_lib(L, LUA_TABLIBNAME, luaopen_table);
    open_lib(L, LUA_MATHLIBNAME, luaopen_math);
    open_lib(L, LUA_UTF8LIBNAME, luaopen_utf8);
    open_lib(L, LUA_COLIBNAME, luaopen_coroutine);
    luaL_requiref(L, LUA_OSLIBNAME, luaopen_os, 0); /* not global */

    lua_pushglobaltable(L);
    for (int i = 0; drop[i] != NULL; i++) {
        lua_pushnil(L);
        lua_setfield(L, -2, drop[i]);
    }
    lua_pushcfunction(L, b_load);
    lua_setfield(L, -2, "load");
    lua_pushcfunction(L, b_collectgarbage);
    lua_setfield(L, -2, "collectgarbage");
    lua_getfield(L, -1, "setmetatable");
    lua_pushcclosure(L, b_setmetatable, 1);
    lua_setfield(L, -2, "setmetatable");
    lua_pushcfunction(L, b_print);
    lua_setfield(L, -2, "print");
    lua_pushcfunction(L, b_require);
    lua_setfield(L, -2, "require");
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "strait.loaded");
    /* os: only the clock and the calendar. */
    lua_createtable(L, 0, 3);
    lua_getfield(L, -3, "time");
    lua_setfield(L, -2, "time");
    lua_getfield(L, -3, "clock");
    lua_setfield(L, -2, "clock");
    lua_getfield(L, -3, "date");
    lua_setfield(L, -2, "date");
    lua_setfield(L, -2, "os");
    luaapi_open(vm); /* string caps, strait.*, the handle */
    luafreeze_globals(L);
    lua_pop(L, 2); /* globals, the real os */
    lua_pushglobaltable(L);
    vm->sandbox_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

/* Pushes the value at v as Lua (a string, or a table of the values
 * after it); returns the node after them. The tree's depth is bounded
 * by its check (8), so the recursion is too. */
static const struct luacfg *push_config(lua_State *L, const struct luacfg *v)
{
    const struct luacfg *at = v + 1;

    if (v->type == LUACFG_STR) {
        lua_pushstring(L, v->str);
        return at;
    }
    lua_createtable(L, v->type == LUACFG_LIST ? (int)v->n : 0,
                    v->type == LUACFG_MAP ? (int)v->n : 0);
    for (size_t i = 0; i < v->n; i++) {
        const struct luacfg *item = at;
        at = push_config(L, at);
        if (v->type == LUACFG_MAP)
            lua_setfield(L, -2, item->key);
        else
            lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return at;
}

int luaprog_config_add(struct luaprog *g, enum luacfg_type type,
                       const char *key, const char *str, size_t n)
{
    struct luacfg *v = realloc(g->config, (g->nconfig + 1) * sizeof(*v));
    struct luacfg *c;

    if (v == NULL)
        return -1;
    g->config = v;
    c = &v[g->nconfig];
    memset(c, 0, sizeof(*c));
    c->type = type;
    c->n = n;
    if ((key != NULL && (c->key = strdup(key)) == NULL) ||
        (str != NULL && (c->str = strdup(str)) == NULL)) {
        free(c->key);
        return -1;
    }
    g->nconfig++;
    return 0;
}

/* A policy's environment: its own table, reading through to the
 * sandbox, with policy.name and the read-only policy.config. */
static void push_env(struct luavm *vm, const struct luaprog *g)
{
    lua_State *L = vm->L;

    lua_newtable(L);
    lua_newtable(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->sandbox_ref);
    lua_setfield(L, -2, "__index");
    /* Hidden, so getmetatable(_ENV).__index never hands out the sandbox
     * the state's policies share (nor can setmetatable change it). */
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, -2, "_G"); /* _G is the policy's own globals */
    lua_newtable(L);           /* policy */
    lua_pushstring(L, g->name);
    lua_setfield(L, -2, "name");
    if (g->nconfig > 0)
        push_config(L, g->config);
    else
        lua_newtable(L);
    /* A read-only view, nested tables too (a list or map in it): no
     * policy can change what another request of it will read. */
    luafreeze(L, "policy.config");
    lua_setfield(L, -2, "config");
    lua_setfield(L, -2, "policy");
}

static const char *const hook_names[LUAVM_NPHASES] = {
    "on_request",         "on_response", "on_log",
    "init_worker",        "(timer)",     "on_upstream_select",
    "on_tls_client_hello"};

/* The state of one namespace's policies (group) of progs. */
static struct luavm *state_new(struct luaprogs *progs, size_t group,
                               struct event_base *base, const int *stop,
                               char **err)
{
    struct luavm *vm = calloc(1, sizeof(*vm));
    size_t cap = 0;

    *err = NULL;
    if (vm == NULL)
        goto oom;
    vm->base = base;
    /* Set before the chunks run: their top-level code and init_worker
     * are under the stop flag too, not only the hooks. */
    vm->stop = stop;
    vm->group = group;
    vm->progs = luaprogs_ref(progs);
    for (size_t i = 0; i < progs->n; i++)
        if (progs->v[i].group == group && progs->v[i].memory > cap)
            cap = progs->v[i].memory;
    vm->mem.cap = cap ? cap : (size_t)64 << 20;
    vm->hooks = calloc(progs->n ? progs->n : 1, sizeof(*vm->hooks));
    vm->envs = calloc(progs->n ? progs->n : 1, sizeof(*vm->envs));
    if (vm->hooks == NULL || vm->envs == NULL)
        goto oom;
    for (size_t i = 0; i < progs->n; i++)
        vm->envs[i] = LUA_NOREF;
    vm->L = lua_newstate(capped_alloc, &vm->mem);
    if (vm->L == NULL)
        goto oom;
    *(struct luavm **)lua_getextraspace(vm->L) = vm;
    build_sandbox(vm);
    for (size_t i = 0; i < progs->n; i++)
        for (int k = 0; k < LUAVM_NPHASES; k++)
            vm->hooks[i][k] = LUA_NOREF;
    for (size_t i = 0; i < progs->n; i++) {
        const struct luaprog *g = &progs->v[i];
        lua_State *L = vm->L;
        /* Another namespace's policy: never in this state. */
        if (g->group != group)
            continue;
        vm->loading = i;
        if (luaL_loadbufferx(L, g->source, g->source_len, g->chunk, "t") !=
            LUA_OK) {
            err_set(err, "LuaPolicy %s: %s", g->name, lua_tostring(L, -1));
            goto fail;
        }
        push_env(vm, g);
        lua_pushvalue(L, -1);
        vm->envs[i] = luaL_ref(L, LUA_REGISTRYINDEX);
        lua_pushvalue(L, -1);
        lua_setupvalue(L, -3, 1); /* the chunk's _ENV */
        lua_insert(L, -2);        /* env, chunk */
        if (luavm_run_main(vm, i, LUAVM_INIT_WORKER, 0) < 0) {
            err_set(err, "LuaPolicy %s: %s", g->name, vm->last_error);
            lua_pop(L, 1);
            goto fail;
        }
        lua_pop(L, 1); /* the chunk's result */
        for (int k = 0; k < LUAVM_NPHASES; k++) {
            lua_getfield(L, -1, hook_names[k]);
            if (lua_isfunction(L, -1))
                vm->hooks[i][k] = luaL_ref(L, LUA_REGISTRYINDEX);
            else
                lua_pop(L, 1);
        }
        lua_pop(L, 1); /* env */
        if (vm->hooks[i][LUAVM_INIT_WORKER] != LUA_NOREF) {
            lua_rawgeti(L, LUA_REGISTRYINDEX, vm->hooks[i][LUAVM_INIT_WORKER]);
            if (luavm_run_main(vm, i, LUAVM_INIT_WORKER, 0) < 0) {
                err_set(err, "LuaPolicy %s: init_worker: %s", g->name,
                        vm->last_error);
                goto fail;
            }
            lua_pop(L, 1);
        }
    }
    return vm;
oom:
    err_set(err, "LuaPolicy: out of memory making a Lua state");
fail:
    luavm_free(vm);
    return NULL;
}

struct luavm *luavm_new(struct luaprogs *progs, struct event_base *base,
                        char **err)
{
    return luavm_new_stop(progs, base, NULL, err);
}

struct luavm *luavm_new_stop(struct luaprogs *progs, struct event_base *base,
                             const int *stop, char **err)
{
    struct luavm *vm = state_new(progs, 0, base, stop, err);

    if (vm == NULL || progs->ngroups <= 1)
        return vm;
    vm->sub = calloc(progs->ngroups, sizeof(*vm->sub));
    if (vm->sub == NULL) {
        luavm_free(vm);
        err_set(err, "LuaPolicy: out of memory making a Lua state");
        return NULL;
    }
    vm->nsub = progs->ngroups;
    vm->sub[0] = vm;
    for (size_t g = 1; g < progs->ngroups; g++) {
        vm->sub[g] = state_new(progs, g, base, stop, err);
        if (vm->sub[g] == NULL) {
            luavm_free(vm);
            return NULL;
        }
    }
    return vm;
}

const char *luavm_dict_name(const struct luavm *vm, const char *dict)
{
    const char *slash = strchr(dict, '/');
    size_t k;

    if (slash == NULL)
        return dict;
    k = (size_t)(slash - dict);
    for (size_t i = 0; i < vm->progs->n; i++) {
        const char *pn = vm->progs->v[i].name;
        if (vm->progs->v[i].group == vm->group)
            return strncmp(pn, dict, k + 1) == 0 ? slash + 1 : NULL;
    }
    return NULL;
}

/* The state policy i runs in: its namespace's. */
static struct luavm *state_of(struct luavm *vm, size_t i)
{
    size_t g = i < vm->progs->n ? vm->progs->v[i].group : 0;

    return g == 0 || g >= vm->nsub ? vm : vm->sub[g];
}

void luavm_free(struct luavm *vm)
{
    if (vm == NULL)
        return;
    for (size_t g = 1; g < vm->nsub; g++)
        luavm_free(vm->sub[g]);
    free(vm->sub);
    if (vm->L != NULL) {
        luaapi_timers_close(vm);
        while (vm->truns != NULL)
            trun_free(vm->truns);
        lua_close(vm->L);
    }
    free(vm->hooks);
    free(vm->envs);
    free(vm->tshare);
    luaprogs_unref(vm->progs);
    free(vm);
}

/* ---- running --------------------------------------------------------------
 */

static void count_error(struct luavm *vm, size_t i, int phase, int reason,
                        const char *msg)
{
    struct luaprog *g = &vm->progs->v[i];

    __atomic_add_fetch(&g->errors[phase][reason], 1, __ATOMIC_RELAXED);
    if (!vm->progs->quiet)
        LOG_LIMITED(1000, LOG_WARN, "lua: policy %s: %s: %s: %s", g->name,
                    phase_names[phase], reason_names[reason], msg);
}

void luavm_count(struct luavm *vm, size_t i, int phase, int reason,
                 const char *msg)
{
    count_error(vm, i, phase, reason, msg);
}

void luavm_set_stop(struct luavm *vm, const int *flag)
{
    /* Every namespace's state checks the flag: a policy of any of them
     * may be the one still running at the drain deadline. */
    vm->stop = flag;
    for (size_t g = 1; g < vm->nsub; g++)
        vm->sub[g]->stop = flag;
}

static void run_begin(struct luavm *vm, struct luarun *run, size_t i,
                      lua_State *co, int yieldable, uint64_t used_ms)
{
    const struct luaprog *g = &vm->progs->v[i];

    memset(run, 0, sizeof(*run));
    run->co = co;
    run->prog = i;
    run->yieldable = yieldable;
    /* Budgets count the worker thread's CPU time, not the wall clock: a
     * policy is charged for the work it does, never for the time a busy
     * machine kept the thread off a core (which made the same policy
     * pass on a quiet machine and fail on a loaded one). */
    run->start_ms = clock_thread_cpu_us() / 1000u;
    run->burst_ms = g->burst_ms;
    run->request_ms = g->request_ms;
    run->used_ms = used_ms;
    /* Yield about ten times per burst, never more often than each ms. */
    run->slice_ms = g->burst_ms / 10 ? g->burst_ms / 10 : 1;
    run->reason = LUAVM_ERR_ERROR;
    run->count = g->instruction_slice > 0 ? g->instruction_slice : 1;
    vm->run = run;
    lua_sethook(co, luavm_budget_hook, LUA_MASKCOUNT, run->count);
}

static int msg_handler(lua_State *L)
{
    const char *m = lua_tostring(L, 1);

    if (m == NULL)
        m = lua_pushfstring(L, "(error object is a %s value)",
                            luaL_typename(L, 1));
    luaL_traceback(L, L, m, 1);
    return 1;
}

int luavm_run_main(struct luavm *vm, size_t i, int phase, int nargs)
{
    lua_State *L = vm->L;
    struct luarun run;
    int base, st;

    run_begin(vm, &run, i, L, 0, 0);
    base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, msg_handler);
    lua_insert(L, base);
    st = lua_pcall(L, nargs, 1, base);
    lua_sethook(L, NULL, 0, 0);
    vm->run = NULL;
    lua_remove(L, base);
    if (st == LUA_OK)
        return 0;
    snprintf(vm->last_error, sizeof(vm->last_error), "%s",
             lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
    count_error(vm, i, phase, st == LUA_ERRMEM ? LUAVM_ERR_MEMORY : run.reason,
                vm->last_error);
    lua_pop(L, 1);
    return -1;
}

/* A coroutine for a hook: from the pool, or new. Left on the stack of
 * the main thread? No: referenced in the registry while it runs. */
static lua_State *co_take(struct luavm *vm, int *ref)
{
    lua_State *L = vm->L, *co;

    if (vm->npool > 0) {
        *ref = vm->pool[--vm->npool];
        lua_rawgeti(L, LUA_REGISTRYINDEX, *ref);
        co = lua_tothread(L, -1);
        lua_pop(L, 1);
        return co;
    }
    co = lua_newthread(L);
    if (co == NULL)
        return NULL;
    *ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return co;
}

/*
 * co_reset() closes co's pending to-be-closed variables (lua_resetthread
 * runs their __close handlers) under run's budget, never with the hook
 * off: a handler that loops is stopped like any code, and once a limit
 * was passed each handler raises at its first instruction. run NULL: a
 * new budget of policy prog (a coroutine let go while suspended).
 */
static void co_reset(struct luavm *vm, lua_State *co, struct luarun *run,
                     size_t prog)
{
    struct luarun *saved = vm->run, fresh;
    struct luareq *cur = vm->cur;

    if (run == NULL) {
        run = &fresh;
        run_begin(vm, run, prog < vm->progs->n ? prog : 0, co, 0, 0);
    }
    run->co = co;
    run->yieldable = 0;
    vm->run = run;
    vm->cur = NULL; /* handles raise "stale handle" */
    lua_sethook(co, luavm_budget_hook, LUA_MASKCOUNT,
                run->tripped ? 1 : run->count);
    lua_resetthread(co);
    lua_sethook(co, NULL, 0, 0);
    vm->run = saved;
    vm->cur = cur;
}

static void co_give(struct luavm *vm, lua_State *co, int ref, int reusable,
                    size_t prog)
{
    if (reusable && lua_status(co) == LUA_OK && lua_gettop(co) == 0 &&
        vm->npool < LUAVM_COROUTINE_POOL) {
        vm->pool[vm->npool++] = ref;
        return;
    }
    /* A suspended coroutine let go (its request ended): its __close
     * handlers run under a budget of their own. A dead one (it raised)
     * was reset by resume() when that was safe; either way it cannot be
     * reused, and the collector frees what it holds. */
    if (lua_status(co) == LUA_YIELD ||
        (lua_status(co) == LUA_OK && lua_gettop(co) != 0))
        co_reset(vm, co, NULL, prog);
    luaL_unref(vm->L, LUA_REGISTRYINDEX, ref);
}

/* One error of policy i in phase: counted and logged; under Fail the
 * request is answered 500. */
static void hook_failed(struct luareq *rq, size_t i, int phase, int reason,
                        const char *msg)
{
    count_error(rq->vm, i, phase, reason, msg);
    if (rq->vm->progs->v[i].fail_closed && phase != LUAVM_ON_LOG) {
        rq->failed = 1;
        rq->status = 500;
    }
}

/* Resumes rq's coroutine (with nargs on its stack). LUAVM_YIELD: it is
 * suspended (kept in rq); else it finished (ok or failed). */
static enum luavm_result resume(struct luareq *rq, int nargs)
{
    struct luavm *vm = state_of(rq->vm, rq->next);
    lua_State *co = rq->co;
    struct luarun run;
    size_t i = rq->next;
    int nres, st;

    run_begin(vm, &run, i, co,
              rq->phase == LUAVM_ON_REQUEST || rq->phase == LUAVM_ON_RESPONSE,
              rq->used_ms);
    run.strict = rq->phase == LUAVM_ON_UPSTREAM_SELECT ||
                 rq->phase == LUAVM_ON_TLS_CLIENT_HELLO;
    vm->cur = rq;
    st = lua_resume(co, vm->L, nargs, &nres);
    vm->cur = NULL;
    vm->run = NULL;
    rq->used_ms += clock_thread_cpu_us() / 1000u - run.start_ms;
    if (st == LUA_YIELD && run.strict) {
        /* coroutine.yield() from the hook's own coroutine: nothing would
         * resume it on these paths. */
        lua_pop(co, nres);
        lua_pushliteral(co, "attempt to yield in a hook that cannot yield");
        st = LUA_ERRRUN;
    }
    if (st == LUA_YIELD) {
        lua_pop(co, nres);
        if (rq->status > 0)
            goto done; /* yielded by h:respond(): nothing more runs */
        return rq->body_wait ? LUAVM_BODY : LUAVM_YIELD;
    }
    if (st != LUA_OK) {
        /* The message is copied before anything else is allocated: after
         * a memory error the dead coroutine still holds what filled the
         * state, until lua_resetthread() lets it go (co_give). Runtime
         * errors carry their script:line already. */
        const char *m = lua_tostring(co, -1);
        char msg[512];
        snprintf(msg, sizeof(msg), "%s",
                 m != NULL ? m : "error (not a string)");
        /* An error the budget hook raised leaves the thread with hooks
         * off (Lua restores them only where a pcall catches it): its
         * __close handlers would run unbounded, so they do not run. */
        if (run.tripped == NULL)
            co_reset(vm, co, &run, i);
        hook_failed(rq, i, rq->phase,
                    st == LUA_ERRMEM ? LUAVM_ERR_MEMORY : run.reason, msg);
    } else {
        lua_pop(co, nres);
    }
done:
    lua_sethook(co, NULL, 0, 0);
    rq->serial = 0; /* the hook's handles go stale */
    co_give(vm, co, rq->co_ref, st == LUA_OK, i);
    rq->co = NULL;
    rq->co_ref = LUA_NOREF;
    return rq->status > 0 ? LUAVM_RESPONDED : LUAVM_CONTINUE;
}

/* What start() does in protected mode: every step may allocate, and
 * an allocation that fails outside it would panic. */
static int start_protected(lua_State *L)
{
    struct luareq *rq = lua_touserdata(L, 1);
    struct luavm *vm = state_of(rq->vm, rq->next);
    lua_State *co = co_take(vm, &rq->co_ref);

    if (co == NULL)
        return luaL_error(L, "no coroutine");
    rq->co = co;
    lua_rawgeti(co, LUA_REGISTRYINDEX, vm->hooks[rq->next][rq->phase]);
    if (rq->phase == LUAVM_ON_TLS_CLIENT_HELLO)
        luaapi_push_hello(vm, co, rq);
    else
        luaapi_push_handle(vm, co, rq);
    return 0;
}

/* Starts policy rq->next's hook for rq->phase. */
static enum luavm_result start(struct luareq *rq)
{
    struct luavm *vm = state_of(rq->vm, rq->next);
    lua_State *L = vm->L;

    rq->co = NULL;
    rq->co_ref = LUA_NOREF;
    lua_pushcfunction(L, start_protected);
    lua_pushlightuserdata(L, rq);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        lua_pop(L, 1);
        if (rq->co != NULL) {
            lua_settop(rq->co, 0);
            co_give(vm, rq->co, rq->co_ref, 0, rq->next);
        } else if (rq->co_ref != LUA_NOREF) {
            luaL_unref(L, LUA_REGISTRYINDEX, rq->co_ref);
        }
        rq->co = NULL;
        rq->co_ref = LUA_NOREF;
        hook_failed(rq, rq->next, rq->phase, LUAVM_ERR_MEMORY,
                    "no memory to start the hook");
        return rq->status > 0 ? LUAVM_RESPONDED : LUAVM_CONTINUE;
    }
    return resume(rq, 1);
}

static enum luavm_result run_phase(struct luareq *rq)
{
    const struct luaprogs *p = rq->vm->progs;

    for (; rq->next < p->n; rq->next++) {
        enum luavm_result r;
        if (!(rq->mask & (1u << rq->next)) ||
            state_of(rq->vm, rq->next)->hooks[rq->next][rq->phase] == LUA_NOREF)
            continue;
        r = start(rq);
        if (r == LUAVM_YIELD || r == LUAVM_BODY)
            return r;
        if (r == LUAVM_RESPONDED) {
            rq->next = p->n;
            return r;
        }
    }
    return LUAVM_CONTINUE;
}

enum luavm_result luavm_on_request(struct luareq *rq)
{
    rq->phase = LUAVM_ON_REQUEST;
    rq->next = 0;
    return run_phase(rq);
}

enum luavm_result luavm_resume(struct luareq *rq)
{
    enum luavm_result r;

    /* Woken early (a timer armed before the call): the call's answer
     * is what resumes it. */
    if (luahttp_pending(&rq->wait))
        return LUAVM_YIELD;
    r = resume(rq, 0);

    if (r != LUAVM_CONTINUE)
        return r; /* suspended again, or answered */
    rq->next++;
    return run_phase(rq);
}

enum luavm_result luavm_on_response(struct luareq *rq)
{
    rq->phase = LUAVM_ON_RESPONSE;
    rq->next = 0;
    return run_phase(rq);
}

void luavm_on_log(struct luareq *rq)
{
    /* A hook still suspended (its request ended while it yielded or
     * waited for the body) is let go first: on_log takes a new one. */
    if (rq->co != NULL) {
        lua_sethook(rq->co, NULL, 0, 0);
        co_give(state_of(rq->vm, rq->next), rq->co, rq->co_ref, 0, rq->next);
        rq->co = NULL;
        rq->co_ref = LUA_NOREF;
    }
    rq->body_wait = 0;
    rq->phase = LUAVM_ON_LOG;
    rq->next = 0;
    rq->status = 0;
    (void)run_phase(rq);
}

int luavm_on_upstream_select(struct luareq *rq)
{
    rq->phase = LUAVM_ON_UPSTREAM_SELECT;
    rq->next = 0;
    rq->picked = -1;
    /* Only c:reject() or a failure answers in this phase: the status of
     * an earlier h:respond() would stop the run. */
    rq->status = 0;
    (void)run_phase(rq);
    return rq->failed ? -1 : rq->picked;
}

enum luavm_result luavm_on_tls_client_hello(struct luareq *rq)
{
    rq->phase = LUAVM_ON_TLS_CLIENT_HELLO;
    rq->next = 0;
    rq->status = 0;
    return run_phase(rq);
}

int luavm_has_hook(const struct luavm *vm, uint32_t mask, int phase)
{
    for (size_t i = 0; i < vm->progs->n && i < 32; i++)
        if ((mask & (1u << i)) &&
            state_of((struct luavm *)vm, i)->hooks[i][phase] != LUA_NOREF)
            return 1;
    return 0;
}

/* h.ctx: one table per request in each namespace's state, so policies of
 * a namespace share it and another namespace never sees it. The lead
 * state keeps it in rq->ctx_ref, the others in a registry table keyed by
 * the request (rq->ctx_groups says which have one, for the end). */
void luavm_push_ctx(lua_State *L, struct luareq *rq)
{
    struct luavm *vm = luavm_of(L);

    if (vm->group == 0) {
        if (rq->ctx_ref == LUA_NOREF) {
            lua_newtable(L);
            rq->ctx_ref = luaL_ref(L, LUA_REGISTRYINDEX);
        }
        lua_rawgeti(L, LUA_REGISTRYINDEX, rq->ctx_ref);
        return;
    }
    if (lua_getfield(L, LUA_REGISTRYINDEX, "strait.ctx") != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, "strait.ctx");
    }
    if (lua_rawgetp(L, -1, rq) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, -3, rq);
        rq->ctx_groups |= (uint32_t)1 << (vm->group & 31);
    }
    lua_remove(L, -2);
}

void luavm_request_end(struct luareq *rq)
{
    struct luavm *vm = rq->vm;

    if (vm == NULL)
        return;
    luahttp_cancel(vm, &rq->wait);
    if (rq->co != NULL) {
        lua_sethook(rq->co, NULL, 0, 0);
        co_give(state_of(vm, rq->next), rq->co, rq->co_ref, 0, rq->next);
        rq->co = NULL;
    }
    if (rq->ctx_ref != LUA_NOREF) {
        luaL_unref(vm->L, LUA_REGISTRYINDEX, rq->ctx_ref);
        rq->ctx_ref = LUA_NOREF;
    }
    for (size_t g = 1; g < vm->nsub && rq->ctx_groups != 0; g++) {
        lua_State *L = vm->sub[g]->L;
        if (!(rq->ctx_groups & ((uint32_t)1 << (g & 31))))
            continue;
        if (lua_getfield(L, LUA_REGISTRYINDEX, "strait.ctx") == LUA_TTABLE) {
            lua_pushnil(L);
            lua_rawsetp(L, -2, rq);
        }
        lua_pop(L, 1);
    }
    rq->ctx_groups = 0;
    rq->serial = 0;
    rq->vm = NULL;
}

/* ---- timer callbacks -----------------------------------------------------
 * Each runs in a coroutine of its own, so it may wait in
 * strait.http.request; it is kept on vm->truns while it waits. Not
 * yieldable otherwise: past burst it raises, as it did on the main
 * thread. */

static void trun_free(struct luatrun *tr)
{
    struct luavm *vm = tr->vm;

    luahttp_cancel(vm, &tr->wait);
    if (tr->prev != NULL)
        tr->prev->next = tr->next;
    else if (vm->truns == tr)
        vm->truns = tr->next;
    if (tr->next != NULL)
        tr->next->prev = tr->prev;
    if (vm->base != NULL)
        timer_dispose(&tr->wake);
    lua_sethook(tr->co, NULL, 0, 0);
    luaL_unref(vm->L, LUA_REGISTRYINDEX, tr->ref);
    free(tr);
}

/* Runs tr's coroutine with nargs on its stack, until it ends (then tr
 * is freed) or waits for a call (then tr is kept, linked). */
static void trun_resume(struct luatrun *tr, int nargs)
{
    struct luavm *vm = tr->vm;
    struct luarun run;
    int nres, st;

    uint64_t t0 = clock_thread_cpu_us();

    run_begin(vm, &run, tr->prog, tr->co, 0, 0);
    vm->trun = tr;
    st = lua_resume(tr->co, vm->L, nargs, &nres);
    vm->trun = NULL;
    vm->run = NULL;
    luabudget_timer_charge(vm, tr->prog, clock_thread_cpu_us() - t0);
    if (st == LUA_YIELD && tr->wait.call != NULL) {
        lua_pop(tr->co, nres);
        if (tr->prev == NULL && vm->truns != tr) {
            tr->next = vm->truns;
            if (vm->truns != NULL)
                vm->truns->prev = tr;
            vm->truns = tr;
        }
        return;
    }
    if (st == LUA_YIELD)
        count_error(vm, tr->prog, LUAVM_TIMER, LUAVM_ERR_ERROR,
                    "a timer callback yielded outside strait.http");
    else if (st != LUA_OK)
        count_error(vm, tr->prog, LUAVM_TIMER,
                    st == LUA_ERRMEM ? LUAVM_ERR_MEMORY : run.reason,
                    lua_tostring(tr->co, -1) ? lua_tostring(tr->co, -1)
                                             : "error (not a string)");
    trun_free(tr);
}

static void trun_wake(void *arg)
{
    struct luatrun *tr = arg;

    timer_defer(&tr->wake);
}

static void trun_on_wake(void *arg)
{
    struct luatrun *tr = arg;

    if (!luahttp_pending(&tr->wait))
        trun_resume(tr, 0);
}

/* In protected mode: both may allocate. */
static int new_thread(lua_State *L)
{
    lua_State *co = lua_newthread(L);

    lua_pushinteger(L, luaL_ref(L, LUA_REGISTRYINDEX));
    lua_pushlightuserdata(L, co);
    return 2;
}

void luavm_timer_run(struct luavm *vm, size_t prog, int nargs)
{
    lua_State *L = vm->L;
    struct luatrun *tr = calloc(1, sizeof(*tr));

    lua_pushcfunction(L, new_thread);
    if (tr == NULL || lua_pcall(L, 0, 2, 0) != LUA_OK) {
        lua_pop(L, nargs + 2);
        free(tr);
        count_error(vm, prog, LUAVM_TIMER, LUAVM_ERR_MEMORY,
                    "no memory to start the timer");
        return;
    }
    tr->vm = vm;
    tr->co = lua_touserdata(L, -1);
    tr->ref = (int)lua_tointeger(L, -2);
    lua_pop(L, 2);
    tr->prog = prog;
    tr->wait.wake = trun_wake;
    tr->wait.wake_arg = tr;
    if (vm->base != NULL)
        timer_init(&tr->wake, vm->base, trun_on_wake, tr);
    lua_xmove(L, tr->co, nargs + 1);
    trun_resume(tr, nargs);
}

/* ---- selection ------------------------------------------------------------
 */

static int in_list(char *const *v, size_t n, struct slice s)
{
    for (size_t i = 0; i < n; i++)
        if (slice_eq_str(s, v[i]))
            return 1;
    return 0;
}

uint32_t luaprogs_match(const struct luaprogs *p, struct slice authority,
                        struct slice route, struct slice vs)
{
    char host[256];
    uint32_t mask = 0;
    size_t hn = authority.n;

    /* The host without its port, for the hosts patterns. */
    if (hn > 0 && authority.p[0] != '[') {
        const char *c = memchr(authority.p, ':', hn);
        if (c != NULL)
            hn = (size_t)(c - authority.p);
    }
    if (hn >= sizeof(host))
        hn = sizeof(host) - 1;
    memcpy(host, authority.p, hn);
    host[hn] = '\0';
    for (size_t i = 0; i < p->n && i < 32; i++) {
        const struct luaprog *g = &p->v[i];
        int ok = g->any_ref || in_list(g->vss, g->nvss, vs);
        /* Through a server of a Gateway it targets: on a port that
         * Gateways of several namespaces share, only the requests their
         * own hosts take. */
        for (size_t k = 0; !ok && k < g->ngw_hosts; k++)
            ok = host_covers(g->gw_hosts[k], host);
        if (ok && g->nhosts > 0) {
            ok = 0;
            for (size_t k = 0; k < g->nhosts && !ok; k++)
                ok = host_covers(g->hosts[k], host);
        }
        if (ok && route.n > 0 && in_list(g->disabled, g->ndisabled, route))
            ok = 0;
        if (ok)
            mask |= 1u << i;
    }
    return mask;
}

/* Levenshtein distance of a and b, ASCII case folded, capped at 3 (all
 * a caller asks is whether it is 2 or less). */
static int near(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    int row[40];

    if (na >= sizeof(row) / sizeof(row[0]) || nb + 3 < na || na + 3 < nb)
        return 3;
    for (size_t j = 0; j <= na; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= nb; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= na; j++) {
            int up = row[j];
            int cost = ascii_lower(a[j - 1]) != ascii_lower(b[i - 1]);
            int v = diag + cost;
            if (up + 1 < v)
                v = up + 1;
            if (row[j - 1] + 1 < v)
                v = row[j - 1] + 1;
            row[j] = v;
            diag = up;
        }
    }
    return row[na] < 3 ? row[na] : 3;
}

/* The first global function of vm's policy 0 named almost like a hook
 * but none: its Lua line (-1: unknown) and the message in err; 0: none. */
static int unknown_hook(struct luavm *vm, char *err, size_t errn)
{
    lua_State *L = vm->L;
    int line = 0;

    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->envs[0]);
    lua_pushnil(L);
    while (line == 0 && lua_next(L, -2) != 0) {
        const char *k =
            lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        const char *best = NULL;
        int known = 0, d = 3;
        if (k != NULL && lua_isfunction(L, -1)) {
            for (int i = 0; i < LUAVM_NPHASES; i++) {
                int di;
                if (i == LUAVM_TIMER)
                    continue;
                if (strcmp(k, hook_names[i]) == 0)
                    known = 1;
                di = near(k, hook_names[i]);
                if (di < d) {
                    d = di;
                    best = hook_names[i];
                }
            }
            if (!known && (strncmp(k, "on_", 3) == 0 || d <= 2)) {
                lua_Debug ar;
                lua_pushvalue(L, -1);
                lua_getinfo(L, ">S", &ar);
                line = ar.linedefined > 0 ? ar.linedefined : -1;
                snprintf(err, errn,
                         "unknown hook '%s'%s%s%s: strait calls only "
                         "on_request, on_response, on_log, init_worker, "
                         "on_upstream_select and on_tls_client_hello (make "
                         "a helper local, or name it otherwise)",
                         k, best != NULL && d <= 2 ? " (did you mean " : "",
                         best != NULL && d <= 2 ? best : "",
                         best != NULL && d <= 2 ? "?)" : "");
            }
        }
        lua_pop(L, 1);
    }
    /* The env, and the key lua_next left when the loop stopped early. */
    lua_pop(L, line != 0 ? 2 : 1);
    return line;
}

int luavm_check_hooks(const char *name, const char *src, size_t n, char *err,
                      size_t errn)
{
    int line = 0;

    if (luavm_check_budget(name, src, n, (size_t)64 << 20, 10000, 1000, 4000,
                           NULL, err, errn, &line) < 0)
        return 0; /* a budget overrun is reported for that */
    return line;
}
