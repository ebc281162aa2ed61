/*
 * The budget where the count hook cannot see: library functions that
 * loop in C, the script's own coroutines, and timer callbacks.
 *
 * - The count hook (lua_vm.c) fires only between VM instructions, never
 *   inside a C function, so each library function that can loop long on
 *   one call is capped by its arguments here: string.rep (also when its
 *   copies are empty: Lua's loop still runs n times), the pattern
 *   functions (a bound on the backtracking matcher's worst case), and
 *   the table functions whose loops follow a count the script chooses
 *   (table.move's range, the length __len gives table.insert/remove,
 *   table.sort's length).
 *   Lua code a C function calls (a metamethod, a comparator, a gsub
 *   replacement function) runs under the hook as any code does.
 * - Hooks are per thread in Lua 5.4: a coroutine keeps the hook and
 *   count of the thread that made it, whenever that was. coroutine.resume,
 *   coroutine.wrap's function and coroutine.close arm the budget on the
 *   coroutine they run, with the running hook's count (or 1 once a limit
 *   was passed), and once it gives control back they raise in the caller
 *   if a limit was passed meanwhile: a loop that makes and runs
 *   coroutines, or catches their errors, cannot go on past the budget.
 * - Timer callbacks of a policy get a share of the worker: a token
 *   bucket of run time, as large as one burst, refilled at
 *   LUAVM_TIMER_SHARE percent of wall time. A timer due while its
 *   policy's bucket is empty waits until it is paid back (counted as
 *   reason "deferred"), so a callback that loops, or one that re-arms
 *   itself at once forever, leaves the worker to its clients.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "core/clock.h"
#include "policy/lua_int.h"

/* ---- strings ------------------------------------------------------------ */

static int call_original(lua_State *L)
{
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static int cap_rep(lua_State *L)
{
    size_t n, sn = 0;
    lua_Integer k;

    luaL_checklstring(L, 1, &n);
    k = luaL_checkinteger(L, 2);
    luaL_optlstring(L, 3, "", &sn);
    if (k > 0 && (double)(n + sn) * (double)k > (double)LUAVM_STRING_REP_MAX)
        return luaL_error(L, "string.rep: result over %d bytes",
                          (int)LUAVM_STRING_REP_MAX);
    /* Lua's str_rep loops k times even when every copy is empty. */
    if (k > (lua_Integer)LUAVM_STRING_REP_MAX)
        return luaL_error(L, "string.rep: over %d copies",
                          (int)LUAVM_STRING_REP_MAX);
    return call_original(L);
}

/* What drives the cost of Lua's backtracking matcher (lstrlib.c). */
struct patcost {
    int q;     /* '*', '+', '-': each tries up to n lengths */
    int opt;   /* '?': each tries two ways */
    int heavy; /* %b and back-references: each try scans up to n bytes */
};

/* Counts a pattern's costs. '*', '+', '-' and '?' quantify the
 * single-character class before them (a character, '.', a %x class or a
 * [set]); elsewhere they are plain characters. */
static void pattern_cost(const char *p, size_t n, struct patcost *c)
{
    int cls = 0;

    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (cls && (ch == '*' || ch == '+' || ch == '-')) {
            c->q++;
            cls = 0;
        } else if (cls && ch == '?') {
            c->opt++;
            cls = 0;
        } else if (ch == '%') {
            i++;
            if (i < n && p[i] == 'b') {
                i += 2;
                c->heavy++;
                cls = 0;
            } else if (i < n && p[i] == 'f') {
                cls = 0;
            } else if (i < n && p[i] >= '0' && p[i] <= '9') {
                c->heavy++;
                cls = 0;
            } else {
                cls = 1;
            }
        } else if (ch == '[') {
            i++;
            if (i < n && p[i] == '^')
                i++;
            if (i < n && p[i] == ']')
                i++;
            for (; i < n && p[i] != ']'; i++)
                if (p[i] == '%')
                    i++;
            cls = 1;
        } else if (ch == '(' || ch == ')' || (ch == '^' && i == 0) ||
                   (ch == '$' && i == n - 1)) {
            cls = 0;
        } else {
            cls = 1;
        }
    }
}

/* Upvalue 2: PAT_FIND, PAT_GMATCH or PAT_OTHER (match, gsub). */
enum { PAT_OTHER, PAT_FIND, PAT_GMATCH };

static int cap_pattern(lua_State *L)
{
    size_t n, pn;
    int kind = (int)lua_tointeger(L, lua_upvalueindex(2));
    struct patcost c;
    int anchored, powers;
    double steps;

    luaL_checklstring(L, 1, &n);
    const char *pat = luaL_checklstring(L, 2, &pn);
    /* find with plain = true does no matching. */
    if (kind == PAT_FIND && lua_toboolean(L, 4))
        return call_original(L);
    if (n > LUAVM_PATTERN_SUBJECT_MAX)
        return luaL_error(L, "pattern subject over %d bytes",
                          (int)LUAVM_PATTERN_SUBJECT_MAX);
    pattern_cost(pat, pn, &c);
    /* gmatch takes '^' as a plain character: it never anchors. */
    anchored = kind != PAT_GMATCH && pn > 0 && pat[0] == '^';
    /* The worst case: every split of the subject among the repeating
     * quantifiers, both ways of every '?', at every start position
     * unanchored, a scan of the subject per %b or back-reference, and a
     * walk of the pattern for each. */
    powers = c.q + c.heavy + !anchored;
    steps = (double)pn + 1;
    for (int i = 0; i < powers && steps <= LUAVM_PATTERN_STEPS; i++)
        steps *= (double)n + 1;
    for (int i = 0; i < c.opt && steps <= LUAVM_PATTERN_STEPS; i++)
        steps *= 2;
    if (steps > LUAVM_PATTERN_STEPS)
        return luaL_error(L,
                          "pattern too complex: %d quantifiers, %d optional, "
                          "%d %%b or back-references on %d bytes",
                          c.q, c.opt, c.heavy, (int)n);
    return call_original(L);
}

/* ---- tables ------------------------------------------------------------- */

static int cap_move(lua_State *L)
{
    lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);

    /* The loop runs e - f + 1 times whatever the table holds. */
    if (e >= f && (lua_Unsigned)e - (lua_Unsigned)f >= LUAVM_TABLE_SPAN_MAX)
        return luaL_error(L, "table.move: over %d elements",
                          (int)LUAVM_TABLE_SPAN_MAX);
    return call_original(L);
}

static int cap_shift(lua_State *L)
{
    /* table.insert and table.remove shift up to #t elements, and __len
     * may say any length: the length is checked before they loop. */
    if (lua_type(L, 1) == LUA_TTABLE &&
        luaL_len(L, 1) > (lua_Integer)LUAVM_TABLE_SPAN_MAX)
        return luaL_error(L, "table length over %d", (int)LUAVM_TABLE_SPAN_MAX);
    return call_original(L);
}

static int cap_sort(lua_State *L)
{
    /* Without a comparator (or __lt) the n log n comparisons are all C. */
    if (lua_type(L, 1) == LUA_TTABLE &&
        luaL_len(L, 1) > (lua_Integer)LUAVM_SORT_MAX)
        return luaL_error(L, "table.sort: length over %d", (int)LUAVM_SORT_MAX);
    return call_original(L);
}

/* ---- coroutines --------------------------------------------------------- */

/* Arms the running budget on co before it runs. */
static void arm(lua_State *L, lua_State *co)
{
    struct luarun *run = luavm_of(L)->run;

    if (run != NULL && co != NULL)
        lua_sethook(co, luavm_budget_hook, LUA_MASKCOUNT,
                    run->tripped ? 1 : run->count);
}

/* After a coroutine gave control back: past a limit, the caller raises
 * too (and every instruction of it will). */
static void check_tripped(lua_State *L)
{
    struct luarun *run = luavm_of(L)->run;

    if (run != NULL && run->tripped != NULL) {
        lua_sethook(L, luavm_budget_hook, LUA_MASKCOUNT, 1);
        luaL_error(L, "%s", run->tripped);
    }
}

static int co_resume(lua_State *L)
{
    int n;

    arm(L, lua_tothread(L, 1));
    n = call_original(L);
    check_tripped(L);
    return n;
}

/* coroutine.close runs the coroutine's __close handlers. One that died
 * of an error may have died of the budget hook's, which leaves its hooks
 * off (Lua restores them only where a pcall catches the error): its
 * handlers would run unbounded, so they are not run. */
static int co_close(lua_State *L)
{
    lua_State *co = lua_tothread(L, 1);
    int st = co != NULL ? lua_status(co) : LUA_OK;

    if (st != LUA_OK && st != LUA_YIELD) {
        lua_pushboolean(L, 0);
        lua_pushvalue(co, -1);
        lua_xmove(co, L, 1);
        return 2;
    }
    return co_resume(L);
}

/* The function coroutine.wrap returns (Lua's auxwrap, but one that resets
 * a coroutine that failed only when the failure was not the budget's:
 * see co_close). Upvalue 1: the coroutine. */
static int co_call(lua_State *L)
{
    lua_State *co = lua_tothread(L, lua_upvalueindex(1));
    struct luarun *run = luavm_of(L)->run;
    int n = lua_gettop(L), nres, st;

    if (lua_status(co) == LUA_OK && lua_gettop(co) == 0)
        return luaL_error(L, "cannot resume dead coroutine");
    if (!lua_checkstack(co, n))
        return luaL_error(L, "too many arguments to resume");
    lua_xmove(L, co, n);
    arm(L, co);
    st = lua_resume(co, L, n, &nres);
    if (st == LUA_OK || st == LUA_YIELD) {
        check_tripped(L);
        if (!lua_checkstack(L, nres + 1)) {
            lua_pop(co, nres);
            return luaL_error(L, "too many results to resume");
        }
        lua_xmove(co, L, nres);
        return nres;
    }
    lua_xmove(co, L, 1); /* the error */
    /* Dead of its error (not a coroutine that cannot be resumed now, such
     * as the one running): its __close handlers run, under its hook. */
    st = lua_status(co);
    if (st != LUA_OK && st != LUA_YIELD &&
        (run == NULL || run->tripped == NULL)) {
        lua_resetthread(co);
        lua_settop(co, 0);
    }
    check_tripped(L);
    if (st != LUA_ERRMEM && lua_type(L, -1) == LUA_TSTRING) {
        /* The position, as Lua's own wrapper adds it. */
        luaL_where(L, 1);
        lua_insert(L, -2);
        lua_concat(L, 2);
    }
    return lua_error(L);
}

static int co_wrap(lua_State *L)
{
    lua_State *co;

    luaL_checktype(L, 1, LUA_TFUNCTION);
    co = lua_newthread(L);
    lua_pushvalue(L, 1);
    lua_xmove(L, co, 1);
    lua_pushcclosure(L, co_call, 1);
    return 1;
}

static void wrap_field(lua_State *L, const char *name, lua_CFunction f,
                       int kind)
{
    lua_getfield(L, -1, name);
    if (kind >= 0) {
        lua_pushinteger(L, kind);
        lua_pushcclosure(L, f, 2);
    } else {
        lua_pushcclosure(L, f, 1);
    }
    lua_setfield(L, -2, name);
}

void luabudget_wrap(lua_State *L)
{
    lua_getfield(L, -1, "string");
    wrap_field(L, "rep", cap_rep, -1);
    wrap_field(L, "find", cap_pattern, PAT_FIND);
    wrap_field(L, "match", cap_pattern, PAT_OTHER);
    wrap_field(L, "gsub", cap_pattern, PAT_OTHER);
    wrap_field(L, "gmatch", cap_pattern, PAT_GMATCH);
    lua_pop(L, 1);
    lua_getfield(L, -1, "table");
    wrap_field(L, "move", cap_move, -1);
    wrap_field(L, "insert", cap_shift, -1);
    wrap_field(L, "remove", cap_shift, -1);
    wrap_field(L, "sort", cap_sort, -1);
    lua_pop(L, 1);
    lua_getfield(L, -1, "coroutine");
    wrap_field(L, "resume", co_resume, -1);
    wrap_field(L, "close", co_close, -1);
    lua_pushcfunction(L, co_wrap);
    lua_setfield(L, -2, "wrap");
    lua_pop(L, 1);
}

/* ---- timers' share ------------------------------------------------------ */

struct tshare {
    uint64_t at_us;    /* last refill */
    int64_t credit_us; /* may go below 0: a debt */
    int init;
};

static struct tshare *share_of(struct luavm *vm, size_t prog)
{
    struct tshare *s;
    uint64_t now = clock_us();
    int64_t cap;

    if (vm->tshare == NULL) {
        vm->tshare = calloc(vm->progs->n ? vm->progs->n : 1, sizeof(*s));
        if (vm->tshare == NULL)
            return NULL;
    }
    s = &vm->tshare[prog];
    cap = (int64_t)vm->progs->v[prog].burst_ms * 1000;
    if (!s->init) {
        s->init = 1;
        s->at_us = now;
        s->credit_us = cap;
    }
    s->credit_us += (int64_t)((now - s->at_us) * LUAVM_TIMER_SHARE / 100);
    if (s->credit_us > cap)
        s->credit_us = cap;
    s->at_us = now;
    return s;
}

int luabudget_timer_admit(struct luavm *vm, size_t prog, uint64_t *wait_ms)
{
    struct tshare *s = share_of(vm, prog);

    *wait_ms = 0;
    if (s == NULL || s->credit_us > 0)
        return 1;
    /* Paid back at LUAVM_TIMER_SHARE percent of the time that passes. */
    *wait_ms = (uint64_t)(-s->credit_us) * 100 / LUAVM_TIMER_SHARE / 1000 + 1;
    return 0;
}

void luabudget_timer_charge(struct luavm *vm, size_t prog, uint64_t used_us)
{
    struct tshare *s = share_of(vm, prog);

    /* At least what the loop spends to fire a timer and make its
     * coroutine, which the clock around the callback does not see. */
    if (s != NULL)
        s->credit_us -=
            (int64_t)(used_us > LUAVM_TIMER_MIN_US ? used_us
                                                   : LUAVM_TIMER_MIN_US);
}
