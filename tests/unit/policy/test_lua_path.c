/*
 * Unit tests for src/policy/lua_path.c: h:path(), h:query() and the
 * query helpers read the request target (decoded as OpenResty and Kong
 * decode it); h:set_path(), h:set_query(), h:set_query_arg() and
 * headers:set(":path") rewrite it in on_request with the checks of
 * http_target_check(), and a refused write leaves it as it was;
 * h:query_args() stops at 100 arguments.
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

static struct luaprogs *progs1(const char *src)
{
    struct luaprogs *p = luaprogs_new(1);
    struct luaprog *g = &p->v[0];

    p->n = 1;
    g->name = strdup("t/p");
    g->chunk = strdup("=t/p");
    g->source = strdup(src);
    g->source_len = strlen(src);
    g->fail_closed = 1;
    g->memory = (size_t)8 << 20;
    g->instruction_slice = 1000;
    g->burst_ms = 1000;
    g->request_ms = 4000;
    g->body_bytes = 1024;
    g->any_ref = 1;
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

    f->p = progs1(src);
    f->vm = luavm_new(f->p, NULL, &err);
    if (f->vm == NULL)
        fail_msg("luavm_new: %s", err);
    arena_init(&f->arena, 4096);
    f->req.method = SLICE_LIT("GET");
    f->req.path = SLICE_LIT("/orig/x?a=1&b=%41%2Bc+d&flag&a=2");
    f->req.authority = SLICE_LIT("example.com");
    f->req.scheme = SLICE_LIT("http");
    f->req.content_length = -1;
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

static enum luavm_result run(struct fx *f)
{
    enum luavm_result r = luavm_on_request(&f->rq);

    for (int i = 0; r == LUAVM_YIELD && i < 1000; i++)
        r = luavm_resume(&f->rq);
    return r;
}

/* The script's verdict comes back as h:respond's body: "ok", or what
 * failed. */
static void expect_ok(struct fx *f)
{
    assert_int_equal(run(f), LUAVM_RESPONDED);
    if (f->rq.status != 200)
        fail_msg("status %d", f->rq.status);
    if (!slice_eq_str(f->rq.body, "ok"))
        fail_msg("script: %.*s", (int)f->rq.body.n, f->rq.body.p);
}

#define PRELUDE                                                                \
    "local function eq(a, b, what)\n"                                          \
    "  if a ~= b then\n"                                                       \
    "    error(what .. ': got ' .. tostring(a) .. ', want ' .. tostring(b), "  \
    "0)\n"                                                                     \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "local function refused(f, want, ...)\n"                                   \
    "  local ok, err = pcall(f, ...)\n"                                        \
    "  if ok then error('not refused: ' .. want, 0) end\n"                     \
    "  if not tostring(err):find(want, 1, true) then\n"                        \
    "    error('message ' .. tostring(err) .. ' lacks ' .. want, 0)\n"         \
    "  end\n"                                                                  \
    "end\n"
#define VERDICT                                                                \
    "function on_request(h)\n"                                                 \
    "  local ok, err = pcall(t, h)\n"                                          \
    "  h:respond(200, nil, ok and 'ok' or err)\n"                              \
    "end\n"

static void reads_path_query_and_args(void **state)
{
    struct fx *f =
        fx_new(PRELUDE "function t(h)\n"
                       "  eq(h:path(), '/orig/x', 'path')\n"
                       "  eq(h:query(), 'a=1&b=%41%2Bc+d&flag&a=2', 'q')\n"
                       "  eq(h:query_arg('a'), '1', 'first a')\n"
                       "  eq(h:query_arg('b'), 'A+c d', 'decoded b')\n"
                       "  eq(h:query_arg('flag'), true, 'bare')\n"
                       "  eq(h:query_arg('nope'), nil, 'absent')\n"
                       "  local args = h:query_args()\n"
                       "  eq(type(args.a), 'table', 'repeated')\n"
                       "  eq(args.a[1] .. args.a[2], '12', 'order')\n"
                       "  eq(args.b, 'A+c d', 'args b')\n"
                       "  eq(args.flag, true, 'args flag')\n"
                       "  eq(h:headers():get(':path'), "
                       "'/orig/x?a=1&b=%41%2Bc+d&flag&a=2', ':path')\n"
                       "  eq(h:headers():get(':method'), 'GET', ':method')\n"
                       "end\n" VERDICT);

    (void)state;
    expect_ok(f);
    fx_free(f);
}

/* The target routing sees afterwards: set_path keeps the query. */
static void set_path_keeps_query(void **state)
{
    struct fx *f = fx_new("function on_request(h)\n"
                          "  h:set_path('/new/%7Euser')\n"
                          "end\n");

    (void)state;
    assert_int_equal(run(f), LUAVM_CONTINUE);
    assert_true(
        slice_eq_str(f->req.path, "/new/%7Euser?a=1&b=%41%2Bc+d&flag&a=2"));
    fx_free(f);
}

static void set_query_and_args(void **state)
{
    struct fx *f = fx_new(
        PRELUDE "function t(h)\n"
                "  h:set_query_arg('a', 'x y&z')\n"
                "  eq(h:query(), 'a=x%20y%26z&b=%41%2Bc+d&flag', 'replace')\n"
                "  h:set_query_arg('new', 'é')\n"
                "  eq(h:query_arg('new'), 'é', 'round trip')\n"
                "  h:set_query_arg('b', nil)\n"
                "  h:set_query_arg('flag', nil)\n"
                "  eq(h:query(), 'a=x%20y%26z&new=%C3%A9', 'removed')\n"
                "  h:set_query_arg('on', true)\n"
                "  eq(h:query_arg('on'), true, 'bare set')\n"
                "  h:set_query('?k=v')\n"
                "  eq(h:headers():get(':path'), '/orig/x?k=v', 'set_query')\n"
                "  h:set_query(nil)\n"
                "  eq(h:headers():get(':path'), '/orig/x', 'no query')\n"
                "  h:set_query_arg('z', '1')\n"
                "  eq(h:headers():get(':path'), '/orig/x?z=1', 'appended')\n"
                "  h:set_query_arg('z', nil)\n"
                "  eq(h:headers():get(':path'), '/orig/x', 'last removed')\n"
                "end\n" VERDICT);

    (void)state;
    expect_ok(f);
    fx_free(f);
}

/* Every bad write raises a message naming the rule, and leaves the
 * target as it was. */
static void bad_targets_refused_unchanged(void **state)
{
    struct fx *f = fx_new(
        PRELUDE
        "function t(h)\n"
        "  local before = h:headers():get(':path')\n"
        "  refused(h.set_path, 'start with', h, 'relative')\n"
        "  refused(h.set_path, 'start with', h, '')\n"
        "  refused(h.set_path, 'control character', h, '/a\\r\\nx: y')\n"
        "  refused(h.set_path, 'control character', h, '/a b')\n"
        "  refused(h.set_path, 'control character', h, '/a\\0b')\n"
        "  refused(h.set_path, 'fragment', h, '/a#b')\n"
        "  refused(h.set_path, 'set_query', h, '/a?b')\n"
        "  refused(h.set_path, 'hex', h, '/a%zz')\n"
        "  refused(h.set_path, 'longer than 8192', h, '/' .. ('a'):rep(8192))\n"
        "  refused(h.set_query, 'fragment', h, 'a#b')\n"
        "  refused(h.set_query, 'control character', h, 'a=\\n')\n"
        "  local hd = h:headers()\n"
        "  refused(hd.set, 'headers:set(\":path\"): bad path', hd, ':path',\n"
        "          'x y')\n"
        "  refused(hd.set, 'pseudo-header', hd, ':authority', 'evil')\n"
        "  refused(hd.set, 'pseudo-header', hd, ':method', 'POST')\n"
        "  refused(hd.add, 'request target', hd, ':path', '/x')\n"
        "  refused(hd.remove, 'request target', hd, ':path')\n"
        "  eq(hd:get(':path'), before, 'unchanged')\n"
        "  hd:set(':path', '/via/header?q=1')\n"
        "  eq(h:path(), '/via/header', 'set :path')\n"
        "  eq(h:query(), 'q=1', 'set :path query')\n"
        "end\n" VERDICT);

    (void)state;
    expect_ok(f);
    fx_free(f);
}

/* 100 arguments are read; the 101st makes a second result. */
static void query_args_limit_one_more(void **state)
{
    struct fx *f = fx_new(
        PRELUDE "function t(h)\n"
                "  local q = {}\n"
                "  for i = 1, 100 do q[#q + 1] = 'k' .. i .. '=' .. i end\n"
                "  h:set_query(table.concat(q, '&'))\n"
                "  local a, more = h:query_args()\n"
                "  eq(a.k100, '100', 'k100')\n"
                "  eq(more, nil, 'at the limit')\n"
                "  h:set_query(table.concat(q, '&') .. '&k101=101')\n"
                "  a, more = h:query_args()\n"
                "  eq(more, 'truncated', 'one more')\n"
                "  eq(a.k101, nil, 'not read')\n"
                "end\n" VERDICT);

    (void)state;
    expect_ok(f);
    fx_free(f);
}

/* After on_request the request is routed: set_path raises. */
static void set_path_only_in_on_request(void **state)
{
    struct fx *f =
        fx_new("function on_response(h)\n"
               "  local ok, err = pcall(h.set_path, h, '/late')\n"
               "  assert(not ok and err:find('only in on_request'))\n"
               "  ok, err = pcall(h.set_query_arg, h, 'a', 'b')\n"
               "  assert(not ok and err:find('only in on_request'))\n"
               "  h:headers():set('x-done', 'yes')\n"
               "end\n");

    (void)state;
    assert_int_equal(run(f), LUAVM_CONTINUE);
    f->resp.status = 200;
    f->rq.resp = &f->resp;
    assert_int_equal(luavm_on_response(&f->rq), LUAVM_CONTINUE);
    assert_int_equal(luavm_errors(f->p, 0, LUAVM_ON_RESPONSE, LUAVM_ERR_ERROR),
                     0);
    assert_non_null(http_fields_get(&f->resp.fields, "x-done"));
    assert_true(slice_eq_str(f->req.path, "/orig/x?a=1&b=%41%2Bc+d&flag&a=2"));
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_path_query_and_args),
        cmocka_unit_test(set_path_keeps_query),
        cmocka_unit_test(set_query_and_args),
        cmocka_unit_test(bad_targets_refused_unchanged),
        cmocka_unit_test(query_args_limit_one_more),
        cmocka_unit_test(set_path_only_in_on_request),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
