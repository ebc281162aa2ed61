/*
 * Unit tests for src/policy/lua_freeze.c: strait's module tables and the
 * libraries are read-only to policies (an assignment raises an error
 * naming the field), and one policy of a state cannot change what
 * another policy of the same state sees: not through a module table,
 * rawset, pairs, _G, load, getmetatable or a require()d module.
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

#include "core/arena.h"
#include "http/http.h"
#include "policy/lua_vm.h"

static void prog_set(struct luaprog *g, const char *name, const char *src,
                     int64_t priority)
{
    char chunk[64];

    snprintf(chunk, sizeof(chunk), "=%s", name);
    g->name = strdup(name);
    g->chunk = strdup(chunk);
    g->source = strdup(src);
    g->source_len = strlen(src);
    g->priority = priority;
    g->fail_closed = 1;
    g->memory = (size_t)8 << 20;
    g->instruction_slice = 1000;
    g->burst_ms = 1000;
    g->request_ms = 4000;
    g->any_ref = 1;
}

/* Runs on_request of a state holding srcs[0..n) (in that order) with a
 * module strait.m; returns the request's status (0: none answered). */
static int run_policies(const char *const *srcs, size_t n)
{
    struct luaprogs *p = luaprogs_new(n);
    struct luavm *vm;
    struct arena arena;
    struct http_request req;
    struct luareq rq;
    enum luavm_result r;
    char *err = NULL;
    int status;

    p->n = n;
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "t/p%zu", i);
        prog_set(&p->v[i], name, srcs[i], (int64_t)(100 - i));
    }
    p->mods[0].name = strdup("strait.m");
    p->mods[0].source = strdup("return {f = function() return 1 end, "
                               "sub = {g = function() return 2 end}}");
    p->mods[0].len = strlen(p->mods[0].source);
    p->nmods = 1;
    luaprogs_sort(p);
    vm = luavm_new(p, NULL, &err);
    if (vm == NULL)
        fail_msg("luavm_new: %s", err);
    arena_init(&arena, 4096);
    memset(&req, 0, sizeof(req));
    req.method = SLICE_LIT("GET");
    req.path = SLICE_LIT("/");
    req.authority = SLICE_LIT("example.com");
    req.scheme = SLICE_LIT("http");
    memset(&rq, 0, sizeof(rq));
    rq.vm = vm;
    rq.arena = &arena;
    rq.req = &req;
    rq.ctx_ref = -2; /* LUA_NOREF */
    rq.co_ref = -2;
    rq.upstream = -1;
    rq.mask = (1u << n) - 1;
    r = luavm_on_request(&rq);
    while (r == LUAVM_YIELD)
        r = luavm_resume(&rq);
    status = rq.status;
    luavm_request_end(&rq);
    luavm_free(vm);
    luaprogs_unref(p);
    arena_dispose(&arena);
    return status;
}

/* Every assignment to a module table raises, and the message names the
 * field. */
static void module_tables_are_read_only(void **state)
{
    static const char *const src[] = {
        "local function refused(f, field)\n"
        "  local ok, e = pcall(f)\n"
        "  assert(not ok, field .. ' was assigned')\n"
        "  assert(e:find(field, 1, true), e)\n"
        "  assert(e:find('read-only', 1, true), e)\n"
        "end\n"
        "function on_request(h)\n"
        "  refused(function() strait.http.request = print end,"
        " 'strait.http.request')\n"
        "  refused(function() strait.log = print end, 'strait.log')\n"
        "  refused(function() strait.timer.at = print end,"
        " 'strait.timer.at')\n"
        "  refused(function() strait.shared.x = 1 end, 'strait.shared.x')\n"
        "  refused(function() string.find = print end, 'string.find')\n"
        "  refused(function() table.insert = print end, 'table.insert')\n"
        "  refused(function() math.random = print end, 'math.random')\n"
        "  refused(function() os.time = print end, 'os.time')\n"
        "  refused(function() coroutine.wrap = print end,"
        " 'coroutine.wrap')\n"
        "  refused(function() rawset(strait, 'http', {}) end,"
        " 'strait.http')\n"
        "  refused(function() table.insert(strait.http, print) end,"
        " 'strait.http')\n"
        "  refused(function() require('strait.m').f = print end,"
        " 'strait.m.f')\n"
        "  refused(function() require('strait.m').sub.g = print end,"
        " 'strait.m.sub.g')\n"
        "  -- reading works as before\n"
        "  assert(type(strait.http.request) == 'function')\n"
        "  assert(('abc'):find('b') == 2 and #string.rep('x', 3) == 3)\n"
        "  local n = 0 for k, v in pairs(strait) do n = n + 1 end\n"
        "  assert(n > 0)\n"
        "  h:respond(204)\n"
        "end\n",
    };

    (void)state;
    assert_int_equal(run_policies(src, 1), 204);
}

/* The first policy tries every way to change what the second one sees;
 * the second answers 204 only if strait, the libraries, strings'
 * methods and the module are all as they were. */
static void policy_cannot_change_another(void **state)
{
    static const char *const src[] = {
        "function on_request(h)\n"
        "  _G.strait = {http = {request = function() return 200 end}}\n"
        "  strait = _G.strait\n"
        "  string = {}\n"
        "  load('strait = nil string = nil require = nil')()\n"
        "  pcall(rawset, strait, 'http', {})\n"
        "  pcall(function() local _, t = pairs(strait.http)\n"
        "        t.request = print end)\n"
        "  pcall(function() local f, t = pairs(require('strait.m'))\n"
        "        local k, v = f(t) t.f = print end)\n"
        "  pcall(function() getmetatable('').__index.find = print end)\n"
        "  pcall(function() getmetatable(_ENV).__index.strait = nil end)\n"
        "  pcall(function() getmetatable(require('strait.m')).__index.f ="
        " print end)\n"
        "  pcall(setmetatable, _ENV, nil)\n"
        "end\n",
        "function on_request(h)\n"
        "  assert(type(strait.http.request) == 'function', 'strait.http')\n"
        "  assert(strait.http.request ~= print)\n"
        "  assert(string.find('abc', 'b') == 2, 'string.find')\n"
        "  assert(('abc'):find('b') == 2, 'string methods')\n"
        "  assert(require('strait.m').f() == 1, 'module')\n"
        "  assert(_G == _ENV, '_G is the policy own')\n"
        "  h:respond(204)\n"
        "end\n",
    };

    (void)state;
    assert_int_equal(run_policies(src, 2), 204);
}

/* A policy's own globals stay its own: load() without an environment
 * gets the caller's globals, not the shared sandbox. */
static void load_gets_own_globals(void **state)
{
    static const char *const src[] = {
        "function on_request(h)\n"
        "  load('leaked = 1')()\n"
        "  assert(leaked == 1)\n"
        "end\n",
        "function on_request(h)\n"
        "  if leaked == nil then h:respond(204) end\n"
        "end\n",
    };

    (void)state;
    assert_int_equal(run_policies(src, 2), 204);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(module_tables_are_read_only),
        cmocka_unit_test(policy_cannot_change_another),
        cmocka_unit_test(load_gets_own_globals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
