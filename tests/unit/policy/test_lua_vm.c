/*
 * Unit tests for src/policy/lua_vm.c and lua_api.c: the sandbox's every
 * escape (os.execute, io.open, require of a C module, bytecode, a
 * string.rep bomb, an infinite loop, a pathological pattern in
 * string.find, deep recursion, a table bomb, pcall around the limit),
 * each ending as a counted error within its budget and leaving the state
 * usable; hooks, the handle API, and a handle used after its hook.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/event.h>

#include "core/arena.h"
#include "core/clock.h"
#include "http/http.h"
#include "policy/lua_dict.h"
#include "policy/lua_vm.h"

static struct luaprogs *progs1(const char *src, int fail_closed)
{
    struct luaprogs *p = luaprogs_new(1);
    struct luaprog *g = &p->v[0];

    p->n = 1;
    g->name = strdup("t/p");
    g->chunk = strdup("=t/p");
    g->source = strdup(src);
    g->source_len = strlen(src);
    g->fail_closed = fail_closed;
    g->memory = (size_t)8 << 20;
    g->instruction_slice = 1000;
    g->burst_ms = 100;
    g->request_ms = 400;
    g->body_bytes = 1024;
    g->any_ref = 1;
    luaprog_config_add(g, LUACFG_MAP, NULL, NULL, 1);
    luaprog_config_add(g, LUACFG_STR, "greeting", "hi", 0);
    return p;
}

struct fx {
    struct luaprogs *p;
    struct luavm *vm;
    struct arena arena;
    struct http_request req;
    struct http_response resp;
    struct luareq rq;
};

static struct fx *fx_new(const char *src)
{
    struct fx *f = calloc(1, sizeof(*f));
    char *err = NULL;

    f->p = progs1(src, 1);
    f->vm = luavm_new(f->p, NULL, &err);
    if (f->vm == NULL)
        fail_msg("luavm_new: %s", err);
    arena_init(&f->arena, 4096);
    f->req.method = SLICE_LIT("GET");
    f->req.path = SLICE_LIT("/a/b?x=1");
    f->req.authority = SLICE_LIT("example.com");
    f->req.scheme = SLICE_LIT("http");
    http_fields_add(&f->req.fields, &f->arena, SLICE_LIT("x-in"),
                    SLICE_LIT("v1"), 100);
    f->rq.vm = f->vm;
    f->rq.arena = &f->arena;
    f->rq.req = &f->req;
    f->rq.ctx_ref = -2; /* LUA_NOREF */
    f->rq.co_ref = -2;
    f->rq.mask = 1;
    return f;
}

static void fx_free(struct fx *f)
{
    luavm_request_end(&f->rq);
    luavm_free(f->vm);
    luaprogs_unref(f->p);
    arena_dispose(&f->arena);
    free(f);
}

/* Runs on_request to the end, resuming after each yield. */
static enum luavm_result run(struct fx *f, int *yields)
{
    enum luavm_result r = luavm_on_request(&f->rq);

    while (r == LUAVM_YIELD) {
        (*yields)++;
        r = luavm_resume(&f->rq);
    }
    return r;
}

static uint64_t errs(struct fx *f, int reason)
{
    return luavm_errors(f->p, 0, LUAVM_ON_REQUEST, reason);
}

/* An escape: the hook fails (500 under Fail), counted as reason, within
 * the budget, and the next request on the same state runs fine. */
static void escape(const char *body, int reason)
{
    char src[2048];
    struct fx *f;
    int y = 0;
    uint64_t t0;

    snprintf(src, sizeof(src),
             "function on_request(h)\n"
             "  if h:path() == '/ok' then h:respond(204) return end\n"
             "  %s\n"
             "end\n",
             body);
    f = fx_new(src);
    t0 = clock_thread_cpu_us();
    assert_int_equal(run(f, &y), LUAVM_RESPONDED);
    /* Within requestTime plus a slice (10 ms here) and a margin for the
     * work around the hook: the budget is this thread's CPU time, so
     * what a loaded machine adds by not running us does not count. */
    if (clock_thread_cpu_us() - t0 >= (400 + 300) * 1000u)
        fail_msg("%s: %llu ms of CPU", body,
                 (unsigned long long)(clock_thread_cpu_us() - t0) / 1000u);
    assert_int_equal(f->rq.status, 500);
    if (errs(f, reason) != 1)
        fail_msg("%s: reason %d counted %llu (error %llu timeout %llu memory "
                 "%llu)",
                 body, reason, (unsigned long long)errs(f, reason),
                 (unsigned long long)errs(f, LUAVM_ERR_ERROR),
                 (unsigned long long)errs(f, LUAVM_ERR_TIMEOUT),
                 (unsigned long long)errs(f, LUAVM_ERR_MEMORY));
    luavm_request_end(&f->rq);
    /* The state lives on. */
    memset(&f->rq.status, 0, sizeof(f->rq.status));
    f->rq.failed = 0;
    f->rq.vm = f->vm;
    f->rq.used_ms = 0;
    f->req.path = SLICE_LIT("/ok");
    assert_int_equal(run(f, &y), LUAVM_RESPONDED);
    assert_int_equal(f->rq.status, 204);
    fx_free(f);
}

static void os_execute(void **s)
{
    (void)s;
    escape("os.execute('touch /tmp/strait-lua-pwned')", LUAVM_ERR_ERROR);
}
static void io_open(void **s)
{
    (void)s;
    escape("io.open('/etc/passwd')", LUAVM_ERR_ERROR);
}
static void require_c_module(void **s)
{
    (void)s;
    escape("require('socket.core')", LUAVM_ERR_ERROR);
}
static void package_loadlib(void **s)
{
    (void)s;
    escape("package.loadlib('libc.so.6', 'system')", LUAVM_ERR_ERROR);
}
static void bytecode(void **s)
{
    (void)s;
    /* string.dump makes bytecode; load refuses it (text only). */
    escape("local f = assert(load(string.dump(function() end)))",
           LUAVM_ERR_ERROR);
}
static void rep_bomb(void **s)
{
    (void)s;
    escape("local x = string.rep('x', 1 << 40)", LUAVM_ERR_ERROR);
}
static void infinite_loop(void **s)
{
    (void)s;
    escape("while true do end", LUAVM_ERR_TIMEOUT);
}
static void pattern_bomb(void **s)
{
    (void)s;
    escape("string.find(string.rep('a', 5000), string.rep('a*', 20) .. 'b')",
           LUAVM_ERR_ERROR);
}
static void deep_recursion(void **s)
{
    (void)s;
    /* The Lua stack grows until the state's memory cap stops it (8 MiB
     * here, before Lua's own "stack overflow" at a million slots). */
    escape("local function f(n) return 1 + f(n + 1) end f(1)",
           LUAVM_ERR_MEMORY);
}
static void table_bomb(void **s)
{
    (void)s;
    escape("local t = {} for i = 1, 1e9 do t[i] = {i} end", LUAVM_ERR_MEMORY);
}
static void pcall_around_limit(void **s)
{
    (void)s;
    escape("for i = 1, 1000 do pcall(function() while true do end end) end "
           "while true do pcall(error) end",
           LUAVM_ERR_TIMEOUT);
}
static void gc_metamethod(void **s)
{
    (void)s;
    escape("setmetatable({}, {__gc = function() while true do end end})",
           LUAVM_ERR_ERROR);
}
static void debug_lib(void **s)
{
    (void)s;
    escape("debug.sethook()", LUAVM_ERR_ERROR);
}

/* The escapes an attack run found past the budget: C functions that loop
 * on a count the script chooses, backtracking patterns the old bound
 * missed, __close handlers run when a failed coroutine is reset, and
 * loops that make coroutines or catch their errors. */
static void rep_of_empty_strings(void **s)
{
    (void)s;
    escape("local r = string.rep('', math.maxinteger, '')", LUAVM_ERR_ERROR);
}
static void table_move_range(void **s)
{
    (void)s;
    escape("table.move({}, 1, math.maxinteger, 1)", LUAVM_ERR_ERROR);
}
static void table_insert_len(void **s)
{
    (void)s;
    escape("local t = setmetatable({}, {__len = function() return 1 << 50 "
           "end}) table.insert(t, 1, 'x')",
           LUAVM_ERR_ERROR);
}
static void pattern_optionals(void **s)
{
    (void)s;
    escape("string.find(string.rep('a', 40), string.rep('a?', 40) .. "
           "string.rep('a', 40))",
           LUAVM_ERR_ERROR);
}
static void pattern_balance(void **s)
{
    (void)s;
    escape("string.find(string.rep('(', 200000), '%b()')", LUAVM_ERR_ERROR);
}
static void close_handler_loops(void **s)
{
    (void)s;
    escape("local x <close> = setmetatable({}, {__close = function() "
           "while true do end end}) while true do end",
           LUAVM_ERR_TIMEOUT);
}
static void close_handler_after_error(void **s)
{
    (void)s;
    escape("local x <close> = setmetatable({}, {__close = function() "
           "while true do end end}) error('x')",
           LUAVM_ERR_TIMEOUT);
}
static void coroutine_loop(void **s)
{
    (void)s;
    escape("while true do coroutine.resume(coroutine.create(function() "
           "while true do end end)) end",
           LUAVM_ERR_TIMEOUT);
}
static void coroutine_wrap_pcall_loop(void **s)
{
    (void)s;
    escape("while true do pcall(coroutine.wrap(function() "
           "local y <close> = setmetatable({}, {__close = function() "
           "while true do end end}) while true do end end)) end",
           LUAVM_ERR_TIMEOUT);
}
static void load_too_long(void **s)
{
    (void)s;
    escape("local s = string.rep('x = 1 ', 1 << 17) "
           "assert(load(s .. s))",
           LUAVM_ERR_ERROR);
}

/* Each cap allows its limit and refuses one more. */
static void caps_at_their_limits(void **state)
{
    struct fx *f =
        fx_new("function on_request(h)\n"
               "  local n = 1 << 22\n"
               "  assert(#table.move({}, 1, n, 1) == 0)\n"
               "  local ok, e = pcall(table.move, {}, 1, n + 1, 1)\n"
               "  assert(not ok and e:find('over 4194304 elements'), e)\n"
               "  assert(#string.rep('x', 1 << 20) == 1 << 20)\n"
               "  ok, e = pcall(string.rep, 'x', (1 << 20) + 1)\n"
               "  assert(not ok and e:find('over 1048576 bytes'), e)\n"
               "  assert(string.rep('', 1 << 20, '') == '')\n"
               "  ok, e = pcall(string.rep, '', (1 << 20) + 1, '')\n"
               "  assert(not ok and e:find('over 1048576 copies'), e)\n"
               "  local t = setmetatable({}, {__len = function() return n + 1 "
               "end})\n"
               "  ok, e = pcall(table.sort, setmetatable({}, {__len = "
               "function() return (1 << 20) + 1 end}))\n"
               "  assert(not ok and e:find('length over 1048576'), e)\n"
               "  ok, e = pcall(table.remove, t, 1)\n"
               "  assert(not ok and e:find('length over'), e)\n"
               "  assert(load(string.rep(' ', 1 << 20)))\n"
               "  ok, e = pcall(load, string.rep(' ', 1 << 20) .. ' ')\n"
               "  assert(not ok and e:find('chunk over'), e)\n"
               "  assert(string.find(string.rep('a', 20), '^' .. "
               "string.rep('a?', 20)))\n"
               "  ok, e = pcall(string.find, string.rep('a', 30), '^' .. "
               "string.rep('a?', 30))\n"
               "  assert(not ok and e:find('too complex'), e)\n"
               "  local co = coroutine.wrap(function(a) coroutine.yield(a + 1) "
               "return 7 end)\n"
               "  assert(co(1) == 2 and co() == 7)\n"
               "  local f\n"
               "  f = coroutine.wrap(function() return pcall(f) end)\n"
               "  ok, e = f()\n"
               "  assert(ok == false and e:find('resume'), e)\n"
               "  local closed\n"
               "  local g = coroutine.wrap(function()\n"
               "    local x <close> = setmetatable({}, {__close = function() "
               "closed = true end})\n"
               "    error('boom') end)\n"
               "  ok, e = pcall(g)\n"
               "  assert(not ok and e:find('boom') and closed, e)\n"
               "  h:respond(204)\n"
               "end\n");
    int y = 0;

    (void)state;
    assert_int_equal(run(f, &y), LUAVM_RESPONDED);
    assert_int_equal(f->rq.status, 204);
    fx_free(f);
}

static void long_loop_yields(void **state)
{
    struct fx *f = fx_new("function on_request(h)\n"
                          "  local t = os.clock()\n"
                          "  local n = 0\n"
                          "  while os.clock() - t < 0.05 do n = n + 1 end\n"
                          "  h:headers():set('x-n', 'done')\n"
                          "end\n");
    int y = 0;

    (void)state;
    assert_int_equal(run(f, &y), LUAVM_CONTINUE);
    assert_true(y >= 1);
    assert_true(
        slice_eq_str(http_fields_get(&f->req.fields, "x-n")->value, "done"));
    fx_free(f);
}

static void handle_api(void **state)
{
    struct fx *f = fx_new(
        "function on_request(h)\n"
        "  local hd = h:headers()\n"
        "  assert(h:method() == 'GET' and h:path() == '/a/b')\n"
        "  assert(h:query() == 'x=1' and h:authority() == 'example.com')\n"
        "  assert(h:scheme() == 'http' and h:route() == nil)\n"
        "  assert(hd:get('X-In') == 'v1')\n"
        "  hd:add('x-multi', 'a') hd:add('x-multi', 'b')\n"
        "  assert(#hd:get_all('x-multi') == 2)\n"
        "  assert(hd:get('x-multi') == 'a,b')\n"
        "  hd:set('x-greeting', policy.config.greeting)\n"
        "  assert(not pcall(function() policy.config.greeting = 'x' end))\n"
        "  local n = 0 for k, v in hd:iter() do n = n + 1 end\n"
        "  assert(n == 4)\n"
        "  assert(hd:remove('x-in') == 1)\n"
        "  assert(h:peer().mtls == false)\n"
        "  h.ctx.seen = true\n"
        "  saved = h\n"
        "end\n"
        "function on_response(h)\n"
        "  assert(h.ctx.seen)\n"
        "  h:headers():set('x-out', tostring(h:status()))\n"
        "  assert(not pcall(function() saved:method() end))\n"
        "  local ok, err = pcall(function() saved:method() end)\n"
        "  assert(err:find('stale handle'), err)\n"
        "end\n"
        "function on_log(h)\n"
        "  local ok, err = pcall(function() h:headers():set('a', 'b') end)\n"
        "  assert(not ok and err:find('read%-only'), err)\n"
        "end\n");
    int y = 0;

    (void)state;
    assert_int_equal(run(f, &y), LUAVM_CONTINUE);
    assert_int_equal(f->rq.status, 0);
    assert_true(slice_eq_str(
        http_fields_get(&f->req.fields, "x-greeting")->value, "hi"));
    assert_null(http_fields_get(&f->req.fields, "x-in"));
    f->resp.status = 201;
    f->rq.resp = &f->resp;
    assert_int_equal(luavm_on_response(&f->rq), LUAVM_CONTINUE);
    assert_int_equal(errs(f, LUAVM_ERR_ERROR), 0);
    assert_int_equal(luavm_errors(f->p, 0, LUAVM_ON_RESPONSE, LUAVM_ERR_ERROR),
                     0);
    assert_true(
        slice_eq_str(http_fields_get(&f->resp.fields, "x-out")->value, "201"));
    luavm_on_log(&f->rq);
    assert_int_equal(luavm_errors(f->p, 0, LUAVM_ON_LOG, LUAVM_ERR_ERROR), 0);
    fx_free(f);
}

/* policy.config's lists and maps reach the script as tables, read-only
 * at every level (also through rawset and table.insert). The asserts run
 * when the chunk loads: a failed one fails luavm_new. */
static void config_tree_reaches_lua_as_tables(void **state)
{
    struct luaprogs *p = progs1(
        "local c = policy.config\n"
        "assert(#c.keys == 2 and c.keys[1] == 'k1' and c.keys[2] == 'k2')\n"
        "local n = 0\n"
        "for _, v in ipairs(c.keys) do n = n + 1 end\n"
        "assert(n == 2)\n"
        "assert(c.m.x == '1' and c.greeting == 'hi')\n"
        "local k = 0\n"
        "for _ in pairs(c) do k = k + 1 end\n"
        "assert(k == 3)\n"
        "local ok, err = pcall(function() c.m.x = 2 end)\n"
        "assert(not ok and err:find('read%-only'), err)\n"
        "ok, err = pcall(function() c.keys[1] = 'z' end)\n"
        "assert(not ok and err:find('read%-only'), err)\n"
        "assert(not pcall(rawset, c.keys, 1, 'z'))\n"
        "assert(not pcall(table.insert, c.keys, 'z'))\n"
        "assert(c.keys[1] == 'k1' and #c.keys == 2)\n",
        1);
    struct luaprog *g = &p->v[0];
    struct luavm *vm;
    char *err = NULL;

    (void)state;
    for (size_t i = 0; i < g->nconfig; i++) {
        free(g->config[i].key);
        free(g->config[i].str);
    }
    free(g->config);
    g->config = NULL;
    g->nconfig = 0;
    /* {keys: [k1, k2], m: {x: "1"}, greeting: hi}, in pre-order. */
    assert_int_equal(luaprog_config_add(g, LUACFG_MAP, NULL, NULL, 3), 0);
    assert_int_equal(luaprog_config_add(g, LUACFG_LIST, "keys", NULL, 2), 0);
    assert_int_equal(luaprog_config_add(g, LUACFG_STR, NULL, "k1", 0), 0);
    assert_int_equal(luaprog_config_add(g, LUACFG_STR, NULL, "k2", 0), 0);
    assert_int_equal(luaprog_config_add(g, LUACFG_MAP, "m", NULL, 1), 0);
    assert_int_equal(luaprog_config_add(g, LUACFG_STR, "x", "1", 0), 0);
    assert_int_equal(luaprog_config_add(g, LUACFG_STR, "greeting", "hi", 0), 0);
    vm = luavm_new(p, NULL, &err);
    if (vm == NULL)
        fail_msg("luavm_new: %s", err);
    luavm_free(vm);
    luaprogs_unref(p);
}

static void respond_and_ignore(void **state)
{
    struct fx *f = fx_new("function on_request(h)\n"
                          "  h:respond(403, {['X-Why'] = 'no'}, 'denied')\n"
                          "end\n");
    int y = 0;

    (void)state;
    assert_int_equal(run(f, &y), LUAVM_RESPONDED);
    assert_int_equal(f->rq.status, 403);
    assert_int_equal(f->rq.nrfields, 1);
    assert_true(slice_eq_str(f->rq.rfields[0].name, "x-why"));
    assert_true(slice_eq_str(f->rq.body, "denied"));
    fx_free(f);

    /* failurePolicy Ignore: an error is counted, the request goes on. */
    {
        struct luaprogs *p = progs1("function on_request(h) error('x') end", 0);
        char *err = NULL;
        struct luavm *vm = luavm_new(p, NULL, &err);
        struct luareq rq;
        struct http_request req;
        struct arena a;

        memset(&rq, 0, sizeof(rq));
        memset(&req, 0, sizeof(req));
        arena_init(&a, 1024);
        rq.vm = vm;
        rq.arena = &a;
        rq.req = &req;
        rq.ctx_ref = rq.co_ref = -2;
        rq.mask = 1;
        assert_int_equal(luavm_on_request(&rq), LUAVM_CONTINUE);
        assert_int_equal(luavm_errors(p, 0, LUAVM_ON_REQUEST, LUAVM_ERR_ERROR),
                         1);
        luavm_request_end(&rq);
        luavm_free(vm);
        luaprogs_unref(p);
        arena_dispose(&a);
    }
}

/* strait.shared: OpenResty's return conventions, from Lua. */
static void shared_dict_api(void **state)
{
    struct luaprogs *p = progs1(
        "local d = strait.shared.cache\n"
        "function on_request(h)\n"
        "  assert(d:set('a', 'x', 0, 3) == true)\n"
        "  local v, fl = d:get('a') assert(v == 'x' and fl == 3)\n"
        "  local ok, err, forcible = d:add('a', 1)\n"
        "  assert(ok == false and err == 'exists' and forcible == false)\n"
        "  ok, err = d:replace('zz', 1) assert(err == 'not found')\n"
        "  local n, e = d:incr('n', 1) assert(n == nil and e == 'not found')\n"
        "  n = d:incr('n', 2, 40, 10) assert(n == 42)\n"
        "  assert(d:ttl('n') > 9 and d:ttl('a') == 0)\n"
        "  n, e = d:incr('a', 1) assert(e == 'not a number')\n"
        "  assert(d:expire('a', 5) == true)\n"
        "  assert(#d:get_keys(0) == 2 and #d:get_keys(1) == 1)\n"
        "  d:delete('a') assert(d:get('a') == nil)\n"
        "  assert(d:capacity() == 1048576 and d:free_space() < 1048576)\n"
        "  local allowed, left = strait.ratelimit.token_bucket(d, 'c', 1, 2)\n"
        "  assert(allowed == true and left == 1)\n"
        "  strait.ratelimit.token_bucket(d, 'c', 1, 2)\n"
        "  local no, _, retry = strait.ratelimit.token_bucket(d, 'c', 1, 2)\n"
        "  assert(no == false and retry > 0)\n"
        "  h:respond(200)\n"
        "end\n",
        1);
    char *err = NULL;
    struct luavm *vm;
    struct luareq rq;
    struct http_request req;
    struct arena a;

    (void)state;
    p->dicts[0] = luadict_new("cache", 1 << 20);
    p->ndicts = 1;
    vm = luavm_new(p, NULL, &err);
    if (vm == NULL)
        fail_msg("%s", err);
    memset(&rq, 0, sizeof(rq));
    memset(&req, 0, sizeof(req));
    arena_init(&a, 1024);
    rq.vm = vm;
    rq.arena = &a;
    rq.req = &req;
    rq.ctx_ref = rq.co_ref = -2;
    rq.mask = 1;
    assert_int_equal(luavm_on_request(&rq), LUAVM_RESPONDED);
    assert_int_equal(rq.status, 200);
    assert_int_equal(luavm_errors(p, 0, LUAVM_ON_REQUEST, LUAVM_ERR_ERROR), 0);
    luavm_request_end(&rq);
    luavm_free(vm);
    luaprogs_unref(p);
    arena_dispose(&a);
}

static double dict_num(struct luadict *d, const char *k)
{
    struct luadict_value v;
    char *out = NULL;

    luadict_get(d, k, strlen(k), clock_ms(), &v, &out);
    free(out);
    return v.type == LUADICT_NUMBER ? v.n : -1;
}

/* strait.timer: at and every run on the loop with their arguments;
 * closing the state runs the pending ones with premature true and
 * refuses new ones; the pending cap. */
static void timers(void **state)
{
    struct luaprogs *p =
        progs1("local d = strait.shared.t\n"
               "function init_worker()\n"
               "  assert(strait.timer.at(0.005, function(premature, a, b)\n"
               "    d:set('once', a + b)\n"
               "  end, 40, 2))\n"
               "  assert(strait.timer.every(0.005, function(premature)\n"
               "    if premature then d:set('premature', 1)\n"
               "    else d:incr('ticks', 1, 0) end\n"
               "    local ok, err = strait.timer.at(1, function() end)\n"
               "    if premature and err == 'process exiting' then\n"
               "      d:set('refused', 1) end\n"
               "  end))\n"
               "  local n = 0\n"
               "  while true do\n"
               "    local ok, err = strait.timer.at(1000, function() end)\n"
               "    if not ok then assert(err == 'too many pending timers') "
               "break end\n"
               "    n = n + 1\n"
               "  end\n"
               "  assert(n == 1024 - 2, n)\n"
               "end\n",
               1);
    struct event_base *base = event_base_new();
    struct luadict *d = luadict_new("t", 1 << 20);
    char *err = NULL;
    struct luavm *vm;
    uint64_t t0 = clock_ms();

    (void)state;
    p->dicts[0] = luadict_ref(d);
    p->ndicts = 1;
    vm = luavm_new(p, base, &err);
    if (vm == NULL)
        fail_msg("%s", err);
    while ((dict_num(d, "once") < 0 || dict_num(d, "ticks") < 3) &&
           clock_ms() - t0 < 5000)
        event_base_loop(base, EVLOOP_ONCE);
    assert_true(dict_num(d, "once") == 42);
    assert_true(dict_num(d, "ticks") >= 3);
    assert_true(dict_num(d, "premature") < 0);
    luavm_free(vm);
    assert_true(dict_num(d, "premature") == 1);
    assert_true(dict_num(d, "refused") == 1);
    assert_int_equal(luavm_errors(p, 0, LUAVM_TIMER, LUAVM_ERR_ERROR), 0);
    luaprogs_unref(p);
    luadict_unref(d);
    event_base_free(base);
}

/* A timer callback that re-arms itself at once, and one that loops: their
 * policy's share of the worker runs out and its timers wait (counted as
 * deferred); at close the looping one's premature run is dropped. */
static void timers_share_the_budget(void **state)
{
    struct luaprogs *p =
        progs1("local d = strait.shared.t\n"
               "local function again()\n"
               "  d:incr('runs', 1, 0)\n"
               "  strait.timer.at(0, again)\n"
               "end\n"
               "function init_worker()\n"
               "  strait.timer.at(0, again)\n"
               "  strait.timer.every(0.001, function(premature)\n"
               "    if premature then d:set('premature', 1) end\n"
               "    while true do end\n"
               "  end)\n"
               "end\n",
               1);
    struct event_base *base = event_base_new();
    struct luadict *d = luadict_new("t", 1 << 20);
    char *err = NULL;
    struct luavm *vm;
    int i;

    (void)state;
    p->dicts[0] = luadict_ref(d);
    p->ndicts = 1;
    vm = luavm_new(p, base, &err);
    if (vm == NULL)
        fail_msg("%s", err);
    for (i = 0;
         i < 1000000 && luavm_errors(p, 0, LUAVM_TIMER, LUAVM_ERR_DEFERRED) < 2;
         i++)
        event_base_loop(base, EVLOOP_ONCE);
    assert_true(luavm_errors(p, 0, LUAVM_TIMER, LUAVM_ERR_DEFERRED) >= 2);
    assert_true(luavm_errors(p, 0, LUAVM_TIMER, LUAVM_ERR_TIMEOUT) >= 1);
    luavm_free(vm);
    assert_true(dict_num(d, "premature") < 0);
    luaprogs_unref(p);
    luadict_unref(d);
    event_base_free(base);
}

static void load_errors(void **state)
{
    struct luaprogs *p = progs1("error('boom at load')", 1);
    char *err = NULL;

    (void)state;
    assert_null(luavm_new(p, NULL, &err));
    assert_non_null(strstr(err, "boom at load"));
    assert_non_null(strstr(err, "t/p:1:"));
    free(err);
    luaprogs_unref(p);
}

/* h:set_upstream()'s lookup: full host, case-insensitive, with or
 * without a port; the reasons it gives for the rest. */
static void upstream_lookup(void **state)
{
    struct luaprogs *p = progs1("", 0);
    static const struct {
        const char *host;
        int cluster;
        const char *why;
    } cases[] = {
        {"one.example.com", 3, NULL},
        {"ONE.example.com:80", 3, NULL},
        {"two.example.com:8080", 5, NULL},
        {"two.example.com:9090", 6, NULL},
        {"two.example.com", -1, "several ports"},
        {"two.example.com:1", -1, "no such port"},
        {"one.example.com:", -1, "bad port"},
        {"one.example.com:99999", -1, "bad port"},
        {"one.example.com:8x", -1, "bad port"},
        {"localhost", -1, "not a host of the registry"},
        {"one.example", -1, "not a host of the registry"},
        {"", -1, "not a host of the registry"},
    };

    (void)state;
    p->ups = calloc(3, sizeof(*p->ups));
    p->ups[0] = (struct luaupstream){strdup("one.example.com"), 80, 3};
    p->ups[1] = (struct luaupstream){strdup("two.example.com"), 8080, 5};
    p->ups[2] = (struct luaupstream){strdup("two.example.com"), 9090, 6};
    p->nups = 3;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *why = NULL;
        int c = luavm_upstream(p, cases[i].host, strlen(cases[i].host), &why);
        assert_int_equal(c, cases[i].cluster);
        if (cases[i].why != NULL)
            assert_non_null(strstr(why, cases[i].why));
    }
    luaprogs_unref(p);
}

/* h:body(): the hook waits (LUAVM_BODY) with the smaller of max and
 * bodyBytes, then gets the body, or nil, "too large". */
static void body_waits_for_the_caller(void **state)
{
    struct fx *f = fx_new("function on_request(h)\n"
                          "  local b, err = h:body({max = 4096})\n"
                          "  h:headers():set('x-got', b or err)\n"
                          "  local c, err2 = h:body({max = 2})\n"
                          "  h:headers():set('x-small', c or err2)\n"
                          "end\n");

    (void)state;
    assert_int_equal(luavm_on_request(&f->rq), LUAVM_BODY);
    assert_int_equal(f->rq.body_max, 1024); /* bodyBytes under max */
    f->rq.body_got = SLICE_LIT("abc");
    assert_int_equal(luavm_resume(&f->rq), LUAVM_BODY);
    assert_int_equal(f->rq.body_max, 2);
    f->rq.body_why = "too large";
    assert_int_equal(luavm_resume(&f->rq), LUAVM_CONTINUE);
    assert_true(
        slice_eq_str(http_fields_get(&f->req.fields, "x-got")->value, "abc"));
    assert_true(slice_eq_str(http_fields_get(&f->req.fields, "x-small")->value,
                             "too large"));
    fx_free(f);
}

/* h:body() outside on_request, or from a script's own coroutine (whose
 * yield would go to the script), raises. */
static void body_refused_where_it_cannot_wait(void **state)
{
    struct fx *f =
        fx_new("function on_request(h)\n"
               "  local co = coroutine.wrap(function() return h:body() end)\n"
               "  local ok, e = pcall(co)\n"
               "  h:headers():set('x-e', tostring(e))\n"
               "end\n");
    int y = 0;

    (void)state;
    assert_int_equal(run(f, &y), LUAVM_CONTINUE);
    assert_non_null(strstr(http_fields_get(&f->req.fields, "x-e")->value.p,
                           "cannot wait here"));
    fx_free(f);
}

/* on_response yields like on_request: a long script gives the worker
 * back between slices. */
static void on_response_yields(void **state)
{
    struct fx *f = fx_new("function on_response(h)\n"
                          "  local t = os.clock()\n"
                          "  while os.clock() - t < 0.05 do end\n"
                          "  h:headers():set('x-n', 'done')\n"
                          "end\n");
    enum luavm_result r;
    int y = 0;

    (void)state;
    f->resp.status = 200;
    f->rq.resp = &f->resp;
    r = luavm_on_response(&f->rq);
    while (r == LUAVM_YIELD) {
        y++;
        r = luavm_resume(&f->rq);
    }
    assert_int_equal(r, LUAVM_CONTINUE);
    assert_true(y >= 1);
    assert_true(
        slice_eq_str(http_fields_get(&f->resp.fields, "x-n")->value, "done"));
    fx_free(f);
}

/* Whether a policy applies is known without a state. */
static void match_needs_no_state(void **state)
{
    struct luaprogs *p = progs1("x = 1", 0);
    char *h = strdup("*.example.com");

    (void)state;
    assert_int_equal(luaprogs_match(p, SLICE_LIT("a.example.org"),
                                    SLICE_LIT(""), SLICE_LIT("")),
                     1);
    p->v[0].hosts = calloc(1, sizeof(char *));
    p->v[0].hosts[0] = h;
    p->v[0].nhosts = 1;
    assert_int_equal(luaprogs_match(p, SLICE_LIT("a.example.org:80"),
                                    SLICE_LIT(""), SLICE_LIT("")),
                     0);
    assert_int_equal(luaprogs_match(p, SLICE_LIT("a.example.com:80"),
                                    SLICE_LIT(""), SLICE_LIT("")),
                     1);
    luaprogs_unref(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(os_execute),
        cmocka_unit_test(io_open),
        cmocka_unit_test(require_c_module),
        cmocka_unit_test(package_loadlib),
        cmocka_unit_test(bytecode),
        cmocka_unit_test(rep_bomb),
        cmocka_unit_test(infinite_loop),
        cmocka_unit_test(pattern_bomb),
        cmocka_unit_test(deep_recursion),
        cmocka_unit_test(table_bomb),
        cmocka_unit_test(pcall_around_limit),
        cmocka_unit_test(gc_metamethod),
        cmocka_unit_test(debug_lib),
        cmocka_unit_test(rep_of_empty_strings),
        cmocka_unit_test(table_move_range),
        cmocka_unit_test(table_insert_len),
        cmocka_unit_test(pattern_optionals),
        cmocka_unit_test(pattern_balance),
        cmocka_unit_test(close_handler_loops),
        cmocka_unit_test(close_handler_after_error),
        cmocka_unit_test(coroutine_loop),
        cmocka_unit_test(coroutine_wrap_pcall_loop),
        cmocka_unit_test(load_too_long),
        cmocka_unit_test(caps_at_their_limits),
        cmocka_unit_test(long_loop_yields),
        cmocka_unit_test(handle_api),
        cmocka_unit_test(config_tree_reaches_lua_as_tables),
        cmocka_unit_test(respond_and_ignore),
        cmocka_unit_test(shared_dict_api),
        cmocka_unit_test(timers),
        cmocka_unit_test(timers_share_the_budget),
        cmocka_unit_test(load_errors),
        cmocka_unit_test(upstream_lookup),
        cmocka_unit_test(body_waits_for_the_caller),
        cmocka_unit_test(body_refused_where_it_cannot_wait),
        cmocka_unit_test(on_response_yields),
        cmocka_unit_test(match_needs_no_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
