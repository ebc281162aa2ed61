/*
 * Unit tests for the header API of src/policy/lua_api.c: the framing and
 * hop-by-hop fields and host are refused on set and add (request and
 * response headers, h:respond) with an error that names them, while
 * remove and get still work; names that are not tokens and values with
 * CR, LF, NUL or another control character are refused; a refused write
 * changes nothing.
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
    f->req.path = SLICE_LIT("/");
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

/* Every reserved name, in any case, on set and add of request headers:
 * a Lua error that names it; the fields stay as they were. */
static void framing_refused_on_request(void **state)
{
    struct fx *f = fx_new(
        "local names = {'content-length', 'Transfer-Encoding', 'connection',\n"
        "  'upgrade', 'te', 'keep-alive', 'Proxy-Connection'}\n"
        "function on_request(h)\n"
        "  local hd = h:headers()\n"
        "  for _, n in ipairs(names) do\n"
        "    for _, op in ipairs({'set', 'add'}) do\n"
        "      local ok, err = pcall(hd[op], hd, n, '5')\n"
        "      if ok then return h:respond(200, nil, op .. ' ' .. n) end\n"
        "      if not err:find(n:lower(), 1, true) or\n"
        "         not err:find('framing or hop%-by%-hop') then\n"
        "        return h:respond(200, nil, 'message: ' .. err)\n"
        "      end\n"
        "    end\n"
        "    -- Reading and removing stay allowed.\n"
        "    assert(hd:get(n) == nil)\n"
        "    assert(hd:remove(n) == 0)\n"
        "    assert(pcall(hd.set, hd, n, nil))\n"
        "  end\n"
        "  local ok, err = pcall(hd.set, hd, 'Host', 'evil.test')\n"
        "  if ok or not err:find('routing') then\n"
        "    return h:respond(200, nil, 'host: ' .. tostring(err))\n"
        "  end\n"
        "  hd:set('x-fine', 'yes')\n"
        "  h:respond(200, nil, 'ok')\n"
        "end\n");

    (void)state;
    expect_ok(f);
    /* Only the allowed write landed. */
    assert_int_equal(f->req.fields.n, 2);
    assert_non_null(http_fields_get(&f->req.fields, "x-fine"));
    assert_null(http_fields_get(&f->req.fields, "content-length"));
    assert_null(http_fields_get(&f->req.fields, "host"));
    fx_free(f);
}

/* The same on response headers in on_response. */
static void framing_refused_on_response(void **state)
{
    struct fx *f = fx_new(
        "function on_response(h)\n"
        "  local hd = h:headers()\n"
        "  for _, n in ipairs({'content-length', 'transfer-encoding',\n"
        "                      'connection', 'keep-alive', 'upgrade'}) do\n"
        "    assert(not pcall(hd.set, hd, n, '0'), n)\n"
        "    assert(not pcall(hd.add, hd, n, '0'), n)\n"
        "  end\n"
        "  hd:set('x-out', 'ok')\n"
        "end\n");

    (void)state;
    assert_int_equal(run(f), LUAVM_CONTINUE);
    f->resp.status = 200;
    f->resp.content_length = 3;
    f->rq.resp = &f->resp;
    assert_int_equal(luavm_on_response(&f->rq), LUAVM_CONTINUE);
    assert_int_equal(luavm_errors(f->p, 0, LUAVM_ON_RESPONSE, LUAVM_ERR_ERROR),
                     0);
    assert_int_equal(f->resp.fields.n, 1);
    assert_true(
        slice_eq_str(http_fields_get(&f->resp.fields, "x-out")->value, "ok"));
    fx_free(f);
}

/* Names that are not tokens and values with control characters. */
static void bad_names_and_values_refused(void **state)
{
    struct fx *f = fx_new(
        "function on_request(h)\n"
        "  local hd = h:headers()\n"
        "  local names = {'', 'a b', 'a:b', 'a\\r\\nb', 'a\\0b', 'x(y)',\n"
        "    'a\"b', 'a/b', '\\xc3\\xa9', 'a\\tb', 'a@b', 'a,b'}\n"
        "  for _, n in ipairs(names) do\n"
        "    for _, op in ipairs({'set', 'add', 'get', 'remove'}) do\n"
        "      local ok, err = pcall(hd[op], hd, n, 'v')\n"
        "      if ok then return h:respond(200, nil, op .. ' name ' .. n) end\n"
        "      if not err:find('bad header name') then\n"
        "        return h:respond(200, nil, err)\n"
        "      end\n"
        "    end\n"
        "  end\n"
        "  local values = {'a\\rb', 'a\\nb', 'a\\0b', '\\r\\n', "
        "'x\\r\\n\\r\\n'\n"
        "    .. 'GET / HTTP/1.1', 'a\\1b', 'a\\127b'}\n"
        "  for _, v in ipairs(values) do\n"
        "    for _, op in ipairs({'set', 'add'}) do\n"
        "      local ok, err = pcall(hd[op], hd, 'x-v', v)\n"
        "      if ok then return h:respond(200, nil, op .. ' value') end\n"
        "      if not err:find('bad header value') then\n"
        "        return h:respond(200, nil, err)\n"
        "      end\n"
        "    end\n"
        "  end\n"
        "  -- HTAB, obs-text and every other visible byte are fine.\n"
        "  hd:set('x-v', 'a\\tb \\xc3\\xa9 !~')\n"
        "  hd:add(\"x-tok!#$%&'*+.^_`|~09AZ\", 'v')\n"
        "  h:respond(200, nil, 'ok')\n"
        "end\n");

    (void)state;
    expect_ok(f);
    assert_int_equal(f->req.fields.n, 3);
    assert_non_null(http_fields_get(&f->req.fields, "x-v"));
    assert_non_null(http_fields_get(&f->req.fields, "x-tok!#$%&'*+.^_`|~09az"));
    fx_free(f);
}

/* h:respond's headers: checked as the header API checks. */
static void respond_headers_checked(void **state)
{
    static const char *const bad[] = {
        "{['content-length'] = '100'}", "{['Transfer-Encoding'] = 'chunked'}",
        "{connection = 'close'}",       "{host = 'a'}",
        "{['x-a'] = 'v\\r\\nx-b: c'}",  "{['x a'] = 'v'}",
        "{['x-a'] = 'v\\0'}",
    };
    char src[512];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct fx *f;
        snprintf(src, sizeof(src),
                 "function on_request(h)\n"
                 "  local ok, err = pcall(h.respond, h, 403, %s, 'no')\n"
                 "  if ok then return end\n"
                 "  h:respond(200, {['x-ok'] = '1'}, 'ok')\n"
                 "end\n",
                 bad[i]);
        f = fx_new(src);
        assert_int_equal(run(f), LUAVM_RESPONDED);
        if (f->rq.status != 200)
            fail_msg("%s: accepted (status %d)", bad[i], f->rq.status);
        assert_int_equal(f->rq.nrfields, 1);
        fx_free(f);
    }
}

/* A refused h:respond leaves the answer an earlier one made whole: no
 * half-read header of the refused one goes out (found by
 * fuzz_lua_headers). */
static void respond_error_keeps_earlier_answer(void **state)
{
    struct fx *f =
        fx_new("function on_request(h)\n"
               "  h:respond(403, {['x-first'] = '1'}, 'first')\n"
               "  assert(not pcall(h.respond, h, 200, {['x-a'] = 'v\\r\\n'}, "
               "'second'))\n"
               "  assert(not pcall(h.respond, h, 201, {['x-b'] = 'v'}, {}))\n"
               "end\n");

    (void)state;
    assert_int_equal(run(f), LUAVM_RESPONDED);
    assert_int_equal(luavm_errors(f->p, 0, LUAVM_ON_REQUEST, LUAVM_ERR_ERROR),
                     0);
    assert_int_equal(f->rq.status, 403);
    assert_true(slice_eq_str(f->rq.body, "first"));
    assert_int_equal(f->rq.nrfields, 1);
    assert_true(slice_eq_str(f->rq.rfields[0].name, "x-first"));
    fx_free(f);
}

/* The http layer's checks themselves. */
static void field_checks(void **state)
{
    (void)state;
    assert_true(http_field_reserved(SLICE_LIT("Content-Length")));
    assert_true(http_field_reserved(SLICE_LIT("PROXY-CONNECTION")));
    assert_true(http_field_reserved(SLICE_LIT("host")));
    assert_false(http_field_reserved(SLICE_LIT("content-lengthx")));
    assert_false(http_field_reserved(SLICE_LIT("t")));
    assert_false(http_field_reserved(SLICE_LIT("")));
    assert_true(http_field_name_valid(SLICE_LIT("x-a")));
    assert_false(http_field_name_valid(SLICE_LIT("")));
    assert_false(http_field_name_valid(SLICE_LIT(":authority")));
    assert_true(http_field_value_valid(SLICE_LIT("")));
    assert_true(http_field_value_valid(SLICE_LIT("a\tb")));
    assert_false(http_field_value_valid((struct slice){"a\0b", 3}));
    assert_false(http_field_value_valid(SLICE_LIT("a\rb")));
    assert_false(http_field_value_valid(SLICE_LIT("a\nb")));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(framing_refused_on_request),
        cmocka_unit_test(framing_refused_on_response),
        cmocka_unit_test(bad_names_and_values_refused),
        cmocka_unit_test(respond_headers_checked),
        cmocka_unit_test(respond_error_keeps_earlier_answer),
        cmocka_unit_test(field_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
