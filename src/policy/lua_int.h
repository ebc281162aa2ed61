#ifndef STRAIT_POLICY_LUA_INT_H
#define STRAIT_POLICY_LUA_INT_H

/* Private to src/policy/lua_vm.c and lua_api.c. */

#include <lua.h>

#include "event/timer-t.h"

#include "policy/lua_vm.h"

struct capped {
    size_t used;
    size_t cap;
};

/* The budget of the hook call running now. */
struct luarun {
    lua_State *co;
    size_t prog;
    int yieldable;
    uint64_t start_ms;
    uint64_t burst_ms;
    uint64_t request_ms;
    uint64_t used_ms;
    uint64_t slice_ms;
    int count;           /* instructionSlice: the hook's count */
    const char *tripped; /* the limit passed; NULL: none yet */
    int reason;          /* enum luavm_reason of an error */
    int strict;          /* not yieldable, one slice: errors past it */
};

struct ltimer;
struct luahttp_ops;

/* A timer callback running in a coroutine of its own (lua_vm.c), kept
 * while it waits in strait.http.request. */
struct luatrun {
    struct luatrun *prev, *next;
    struct luavm *vm;
    lua_State *co;
    int ref; /* the coroutine, in the registry */
    size_t prog;
    struct luawait wait;
    struct timer wake; /* resumes it on the loop's next pass */
};

struct luavm {
    lua_State *L;
    /* The namespace (luaprog.group) whose policies this state holds.
     * The state luavm_new() returns is group 0's and leads: sub[g] is
     * group g's (sub[0] is itself; nsub 0: one group only). */
    size_t group;
    struct luavm **sub;
    size_t nsub;
    struct event_base *base; /* NULL: timers are not run */
    struct ltimer *timers;   /* pending, doubly linked */
    size_t ntimers;
    int closing;    /* luavm_free() runs premature callbacks */
    size_t loading; /* the policy whose chunk runs now */
    struct capped mem;
    struct luaprogs *progs;      /* one reference */
    int (*hooks)[LUAVM_NPHASES]; /* registry refs; LUA_NOREF: none */
    int *envs; /* each policy's globals (registry refs), for load() */
    int sandbox_ref;
    struct luarun *run; /* while a hook runs */
    struct luareq *cur; /* the request whose hook runs */
    int pool[LUAVM_COROUTINE_POOL];
    size_t npool;
    unsigned serial_gen;
    char last_error[512];
    /* strait.http.request: what the proxy lends (NULL: no calls), the
     * timer callbacks suspended in a call, and the one running now. */
    const struct luahttp_ops *http;
    void *http_env;
    struct luatrun *truns;
    struct luatrun *trun;
    struct tshare *tshare; /* timers' share per policy (lua_budget.c) */
    const int *stop;       /* set: past the drain deadline; NULL: none */
};

static inline struct luavm *luavm_of(lua_State *L)
{
    return *(struct luavm **)lua_getextraspace(L);
}

/* Runs the function under nargs arguments on the main thread's stack,
 * for loading (not yieldable); leaves one result. 0, or -1 with
 * vm->last_error (counted). */
int luavm_run_main(struct luavm *vm, size_t i, int phase, int nargs);

/* The name strait.shared gives dict ("ns/name") in vm's state: name
 * when ns is the state's namespace, NULL otherwise (a dict name without
 * a namespace is every state's). */
const char *luavm_dict_name(const struct luavm *vm, const char *dict);

/* h.ctx of rq in the state of L (lua_vm.c), pushed. */
void luavm_push_ctx(lua_State *L, struct luareq *rq);

/* lua_vm.c: counts and logs (rate-limited) one event of policy i. */
void luavm_count(struct luavm *vm, size_t i, int phase, int reason,
                 const char *msg);
/* lua_vm.c: the count hook of every thread that runs a policy's code. */
void luavm_budget_hook(lua_State *L, lua_Debug *ar);

/* lua_budget.c */
struct tshare;
/* Wraps the library functions the count hook cannot stop (the sandbox's
 * globals on top). */
void luabudget_wrap(lua_State *L);
/* A timer of policy prog is due: 1, run it (then charge its run time);
 * 0, its policy used its share: wait *wait_ms first. */
int luabudget_timer_admit(struct luavm *vm, size_t prog, uint64_t *wait_ms);
void luabudget_timer_charge(struct luavm *vm, size_t prog, uint64_t used_us);

/* lua_api.c */
void luaapi_open(struct luavm *vm); /* globals table on top */
void luaapi_push_handle(struct luavm *vm, lua_State *co, struct luareq *rq);
/* The handle's checks and h:geo(), for the methods of other files. */
struct luareq *luaapi_handle(lua_State *L);
void luaapi_push_geo(lua_State *L, const struct geo_result *geo);

/* lua_freeze.c: luafreeze() replaces the table on top with a read-only
 * view named name (its nested tables too); luafreeze_globals() makes the
 * libraries and strait's tables of the globals table on top views, wraps
 * rawset() to refuse them and hides strings' metatable. */
void luafreeze(lua_State *L, const char *name);
void luafreeze_globals(lua_State *L);

/* lua_upstream.c: h:endpoints(), h:pick(), h:set_upstream(), added to
 * the handle's methods (the table on top). */
void luaapi_upstream_methods(lua_State *L);

/* lua_path.c: h:path(), h:query(), h:set_path() and the query helpers,
 * added to the handle's methods (the table on top). */
void luaapi_path_methods(lua_State *L);
/* luaapi_set_target() makes target (path and optional "?query") rq's
 * request target once http_target_check() passes it; otherwise raises
 * "<what>: bad path: why" and changes nothing. */
int luaapi_set_target(lua_State *L, struct luareq *rq, struct slice target,
                      const char *what);

/* lua_hello.c: on_tls_client_hello's handle. */
void luaapi_open_hello(struct luavm *vm);
void luaapi_push_hello(struct luavm *vm, lua_State *co, struct luareq *rq);
void luaapi_open_timer(struct luavm *vm); /* the strait table on top */
void luaapi_timers_close(struct luavm *vm);

/* lua_vm.c: runs fn and nargs arguments on top of vm->L (popped) as a
 * timer callback of policy prog, in a coroutine of its own that may wait
 * in strait.http.request. */
void luavm_timer_run(struct luavm *vm, size_t prog, int nargs);

/* lua_http.c */
void luahttp_open(struct luavm *vm); /* the strait table on top */
/* The wait's call still has no answer. */
int luahttp_pending(const struct luawait *w);
/* luahttp_cancel() stops the wait's call in flight, if any: its answer
 * never comes. */
void luahttp_cancel(struct luavm *vm, struct luawait *w);

#endif
