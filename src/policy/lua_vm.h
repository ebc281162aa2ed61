#ifndef STRAIT_POLICY_LUA_VM_H
#define STRAIT_POLICY_LUA_VM_H

#include <stddef.h>
#include <stdint.h>

#include "core/slice.h"

struct geo_result;
struct luaep;
struct luahello;

struct arena;
struct conn;
struct http_request;
struct http_response;

/*
 * LuaPolicy at run time (src/config/res-luapolicy.c is the resource,
 * src/compile/lua.c selects and builds the programs).
 *
 * struct luaprogs: the policies of one routes generation, in the order
 * they run (priority, higher first), with their text, budgets and
 * targets. Built by the control thread, then immutable and shared by
 * every worker; reference-counted with atomics.
 *
 * struct luavm: one worker's lua_State for one luaprogs: every policy
 * compiled once into it at creation (init_worker runs then), hooks run
 * in pooled coroutines. Worker-local; the worker frees it with the
 * routes view that owns it, once the view's last stream has ended, so a
 * state is never closed under a running hook.
 */

/* Budgets that are not per policy (lua_budget.c). */
#define LUAVM_STRING_REP_MAX ((size_t)1 << 20) /* string.rep result bytes */
/* Lua patterns backtrack: a match of a pattern with q quantifiers
 * against n bytes may take n^q steps (n^(q+1) unanchored), each '?'
 * doubles it, each %b or back-reference scans n bytes per try, and the
 * count hook never fires inside string.find. A call whose bound passes
 * this is refused with "pattern too complex". */
#define LUAVM_PATTERN_STEPS 100000000.0
#define LUAVM_PATTERN_SUBJECT_MAX ((size_t)1 << 20)
#define LUAVM_COROUTINE_POOL 64 /* idle coroutines kept per state */
/* table.move's range, and the length table.insert/remove shift. */
#define LUAVM_TABLE_SPAN_MAX ((size_t)1 << 22)
/* The longest table table.sort sorts (n log n comparisons in C). */
#define LUAVM_SORT_MAX ((size_t)1 << 20)
/* The longest text load() compiles (compiling is C: no hook). */
#define LUAVM_LOAD_MAX ((size_t)1 << 20)
/* Timer callbacks of one policy run at most this percent of a worker's
 * time (a bucket of one burst), each charged at least LUAVM_TIMER_MIN_US. */
#define LUAVM_TIMER_SHARE 10
#define LUAVM_TIMER_MIN_US 20

enum luavm_phase {
    LUAVM_ON_REQUEST,
    LUAVM_ON_RESPONSE,
    LUAVM_ON_LOG,
    LUAVM_INIT_WORKER,
    LUAVM_TIMER,
    LUAVM_ON_UPSTREAM_SELECT,  /* not yieldable: errors past one slice */
    LUAVM_ON_TLS_CLIENT_HELLO, /* not yieldable: errors past one slice */
    LUAVM_NPHASES
};

/* strait.timer.at/every: pending timers per worker state at most
 * (OpenResty's lua_max_pending_timers). */
#define LUAVM_MAX_TIMERS 1024

enum luavm_reason {
    LUAVM_ERR_ERROR,
    LUAVM_ERR_TIMEOUT,
    LUAVM_ERR_MEMORY,
    LUAVM_ERR_DEFERRED, /* a timer held back: its policy used its share */
    LUAVM_NREASONS
};

struct luaprog {
    char *name;   /* "ns/name" */
    char *chunk;  /* "=ns/name" or "@file": Lua's chunk name */
    char *source; /* the text */
    size_t source_len;
    int64_t priority;
    size_t group;    /* its namespace's state (luaprogs_sort) */
    int fail_closed; /* failurePolicy Fail */
    size_t memory;
    int instruction_slice;
    uint64_t burst_ms;
    uint64_t request_ms;
    size_t body_bytes;
    /* strait.http.request: calls per request, and one call at most. */
    unsigned http_calls;
    uint64_t http_timeout_ms;
    /* policy.config: a tree in pre-order (config[0] the top map; none
     * when nconfig is 0), each list or map followed by its n values. */
    struct luacfg *config;
    size_t nconfig;
    /* Targets: the request runs the policy when (any_ref, or one of
     * gw_hosts covers its host: it came through a server of a targeted
     * Gateway, or the route's VirtualService is in vss) and (no hosts, or one
     * covers the authority) and the route's name is not in disabled. */
    int any_ref;
    char **gw_hosts; /* the targeted Gateways' server hosts on the listener */
    size_t ngw_hosts;
    char **vss;
    size_t nvss;
    char **hosts;
    size_t nhosts;
    char **disabled;
    size_t ndisabled;
    /* Errors by phase and reason, every worker together. */
    uint64_t errors[LUAVM_NPHASES][LUAVM_NREASONS];
};

enum luacfg_type { LUACFG_STR, LUACFG_LIST, LUACFG_MAP };

/* One value of policy.config. */
struct luacfg {
    enum luacfg_type type;
    char *key; /* its key in the enclosing map; NULL in a list */
    char *str; /* LUACFG_STR */
    size_t n;  /* LIST, MAP: the values directly in it */
};

/* luaprog_config_add() appends one value (key and str copied) to g's
 * config, in pre-order. 0, or -1 out of memory (g unchanged). */
struct luaprog;
int luaprog_config_add(struct luaprog *g, enum luacfg_type type,
                       const char *key, const char *str, size_t n);

/* strait's own modules, loaded by require("strait.NAME"). */
#define LUAVM_MAX_MODULES 64
struct luamod {
    char *name; /* "strait.NAME" */
    char *source;
    size_t len;
};

/* Shared dicts the policies declare (strait.shared.NAME). */
#define LUAVM_MAX_DICTS 64
struct luadict;

/* h:set_upstream()'s registry: each ServiceEntry/Service host and port
 * the listener may be re-targeted to, and the cluster (an index of the
 * routes' clusters) a VirtualService destination of it would use. */
struct luaupstream {
    char *host; /* full host name, lowercase */
    uint32_t port;
    int cluster;
};

struct luaprogs {
    int refs;
    struct luaprog *v;
    size_t n;
    struct luamod mods[LUAVM_MAX_MODULES];
    size_t nmods;
    /* Namespaces: each policy's group (luaprog.group, set by
     * luaprogs_sort()) gets a lua_State of its own in each worker. */
    size_t ngroups;
    struct luadict *dicts[LUAVM_MAX_DICTS]; /* one reference each */
    size_t ndicts;
    struct luaupstream *ups; /* set_upstream targets; NULL: none */
    size_t nups;
    int quiet; /* a check's: errors are counted, not logged */
};

struct luaprogs *luaprogs_new(size_t n);
struct luaprogs *luaprogs_ref(struct luaprogs *p);
void luaprogs_unref(struct luaprogs *p);
/* luaprogs_sort() puts v in running order (priority, then name) and
 * groups them by namespace (the "ns/" of their names). */
void luaprogs_sort(struct luaprogs *p);

struct luavm;

/* luavm_new() makes a worker's states for progs (a reference is taken),
 * one lua_State per namespace of its policies, so that no policy shares
 * globals, module tables, memory or a GC with another namespace's, and
 * runs each policy's chunk and init_worker() in its namespace's state.
 * Policies still run in priority order whatever their namespace. Timers run on
 * base; NULL (a check on the control thread): strait.timer calls succeed but
 * their timers are dropped unrun when the state closes. NULL with *err
 * (an allocated message) when a script fails to load; the caller logs it
 * and serves without Lua. */
struct event_base;
struct luavm *luavm_new(struct luaprogs *progs, struct event_base *base,
                        char **err);
/* luavm_new_stop() is luavm_new() with the stop flag of luavm_set_stop()
 * in force while the chunks' top-level code and init_worker run: a
 * policy that loops when it loads ends with "process exiting" once the
 * flag is set, instead of holding its thread (the control thread when a
 * snapshot is built) past a SIGTERM. */
struct luavm *luavm_new_stop(struct luaprogs *progs, struct event_base *base,
                             const int *stop, char **err);
/* luavm_set_stop() gives vm a flag another thread sets (atomically) when
 * the process is past its drain deadline: from then on every hook and
 * timer callback raises "process exiting" at its next budget check.
 * flag outlives vm; NULL: none. */
void luavm_set_stop(struct luavm *vm, const int *flag);
/* luavm_free() runs every pending timer's callback with premature true
 * (with base), then closes the state. NULL: no-op. */
void luavm_free(struct luavm *vm);

/* A coroutine suspended in strait.http.request (lua_http.c): the call
 * in flight, and how many calls the running policy made. Embedded in
 * what runs the coroutine (a request, a timer callback). */
struct luacall;
struct luawait {
    struct luacall *call; /* in flight; NULL: none */
    size_t prog;          /* the policy ncalls counts for */
    unsigned ncalls;
    /* Called once the answer is in, never while Lua runs: the owner
     * resumes the coroutine on a later turn (luavm_resume). */
    void (*wake)(void *arg);
    void *wake_arg;
};

/* What a hook sees of the request. Slices point into the stream's
 * arena and live as long as it. */
struct luareq {
    struct luavm *vm;
    struct arena *arena;
    struct http_request *req;
    struct http_response *resp; /* on_response, on_log */
    struct slice route;         /* the http route's name; empty: none */
    struct slice vs;            /* "ns/name" of its VirtualService */
    /* The downstream connection, read by h:peer() when it is called
     * (a request that never asks parses no certificate); NULL: none.
     * Lives as long as the request. */
    const struct conn *conn;
    const char *peer_ip;
    /* h:remote_addr(): the client behind trusted proxies (Envoy's
     * downstream remote address); NULL: peer_ip. */
    const char *client_ip;
    /* The client's GeoIP result (h:geo()); NULL: no geoip configured.
     * Valid while the request lives. */
    const struct geo_result *geo;
    uint32_t mask;       /* policies that apply (bit i: progs->v[i]) */
    size_t next;         /* on_request: the next policy to run */
    int ctx_ref;         /* h.ctx of the first namespace (LUA_NOREF: none) */
    uint32_t ctx_groups; /* the other namespaces' states holding one */
    unsigned serial;     /* handles of other serials are stale */
    uint64_t used_ms;    /* run time so far (requestTime) */
    int co_ref;          /* a suspended coroutine; LUA_NOREF: none */
    void *co;            /* its lua_State */
    int phase;
    /* h:respond(): status > 0 once called. */
    int status;
    struct slice body;
    struct http_field *rfields;
    size_t nrfields;
    int failed; /* an error under failurePolicy Fail: answer 500 */
    /* h:set_upstream(): the cluster chosen; -1: the route's. */
    int upstream;
    /* on_upstream_select: the endpoints offered, and h:pick()'s choice
     * (an index of eps; -1: the balancer's). on_tls_client_hello: the
     * ClientHello. Set by the caller for that hook only. */
    const struct luaep *eps;
    size_t neps;
    int picked;
    const struct luahello *hello;
    /* h:body(): body_wait is set while the hook waits (LUAVM_BODY) for
     * the request body, at most body_max bytes. The caller reads it, then
     * sets body_got (the whole body; valid until the hook is resumed) or
     * body_why ("too large"), and calls luavm_resume(). */
    int body_wait;
    size_t body_max;
    struct slice body_got;
    const char *body_why;
    /* strait.http.request in on_request. */
    struct luawait wait;
};

/* An endpoint on_upstream_select may pick. */
struct luaep {
    const char *address; /* "ip:port" */
    uint32_t weight;
    size_t index; /* in the cluster's endpoints */
};

/* What on_tls_client_hello sees; slices live during the hook. */
struct luahello {
    struct slice sni;    /* lowercased; empty: none */
    const uint8_t *alpn; /* the client's ALPN list, wire format */
    size_t alpn_len;
};

/* luavm_waiting() is true while rq's hook waits for a strait.http
 * answer: it is resumed by rq->wait.wake, not by a timer. */
int luavm_waiting(const struct luareq *rq);

enum luavm_result {
    LUAVM_CONTINUE,  /* go on */
    LUAVM_YIELD,     /* suspended: call luavm_resume() on a later turn */
    LUAVM_RESPONDED, /* h:respond() or failurePolicy Fail (status) */
    LUAVM_BODY,      /* suspended in h:body(): see luareq.body_wait */
};

/* luaprogs_match() returns the mask of the policies of p that apply to a
 * request (bit i: p->v[i]). 0: none, and nothing else need be done for
 * the request: it needs no state. */
uint32_t luaprogs_match(const struct luaprogs *p, struct slice authority,
                        struct slice route, struct slice vs);

/* luavm_on_request() runs on_request of each policy of rq->mask in
 * order; luavm_resume() goes on after LUAVM_YIELD. */
enum luavm_result luavm_on_request(struct luareq *rq);
enum luavm_result luavm_resume(struct luareq *rq);
/* on_response (may answer with h:respond; yields like on_request, and
 * luavm_resume() goes on) and on_log (read-only; not yieldable: the
 * burst limit raises). */
enum luavm_result luavm_on_response(struct luareq *rq);
void luavm_on_log(struct luareq *rq);
/* on_upstream_select with rq->eps set: returns the index of eps picked,
 * or -1 to leave the balancer's choice. rq->failed after an error under
 * failurePolicy Fail. */
int luavm_on_upstream_select(struct luareq *rq);
/* on_tls_client_hello with rq->hello set: LUAVM_RESPONDED when a policy
 * called c:reject() (or failed under failurePolicy Fail: rq->failed),
 * the handshake is then aborted; LUAVM_CONTINUE otherwise. rq needs
 * only vm, mask, peer_ip, geo and hello. */
enum luavm_result luavm_on_tls_client_hello(struct luareq *rq);
/* luavm_has_hook() is true when a policy of mask has the phase's hook. */
int luavm_has_hook(const struct luavm *vm, uint32_t mask, int phase);
/* luavm_upstream() finds host ("host" or "host:port") in progs' registry
 * of set_upstream targets: the cluster, or -1 with *why (static) set. */
int luavm_upstream(const struct luaprogs *p, const char *host, size_t n,
                   const char **why);
/* luavm_request_end() lets go of what rq holds in the state (its ctx
 * table, a suspended coroutine). */
void luavm_request_end(struct luareq *rq);

/* luavm_errors() sums a policy's errors (for /stats). */
uint64_t luavm_errors(const struct luaprogs *p, size_t i, int phase,
                      int reason);
const char *luavm_phase_name(int phase);
const char *luavm_reason_name(int reason);

/*
 * luavm_syntax() compiles src (n bytes of Lua text; bytecode is refused)
 * without running it, in a throw-away state with a capped allocator.
 * Returns 0 when it compiles; otherwise writes Lua's message into err
 * (errn bytes, always terminated) and returns the Lua line at fault, or
 * -1 when the message names none.
 */
int luavm_syntax(const char *src, size_t n, char *err, size_t errn);

/*
 * luavm_check_budget() runs a policy's top-level code and init_worker()
 * once, as a worker would (in a throw-away state, no timers run), under
 * the given budgets, so `strait check` finds a script that cannot load
 * within them. name is "ns/name". Returns 0 when it loads, or fails for
 * a reason other than a budget (a module or dict the check does not
 * have: the real build reports those); -1 with Lua's message in err
 * (errn bytes, always terminated) when it passed its time or memory.
 * stop: the flag of luavm_set_stop() (the run ends once it is set, -1
 * with "process exiting"); NULL: none.
 * hook_line (NULL: not asked) gets what luavm_check_hooks() returns,
 * from the same run, with its message in err, when 0 is returned.
 */
int luavm_check_budget(const char *name, const char *src, size_t n,
                       size_t memory, int slice, uint64_t burst_ms,
                       uint64_t request_ms, const int *stop, char *err,
                       size_t errn, int *hook_line);

/*
 * luavm_check_hooks() loads a policy as luavm_check_budget() does and
 * looks for a global function whose name is almost a hook's but is
 * none ("on_requests", "onRequest", "on_body"): strait would never call
 * it, which is a silent no-op the author did not mean. Returns 0 when
 * there is none (or the script does not load: that is reported
 * elsewhere); otherwise the Lua line where it is defined (-1: unknown)
 * with the message in err (errn bytes, always terminated).
 */
int luavm_check_hooks(const char *name, const char *src, size_t n, char *err,
                      size_t errn);

#endif
