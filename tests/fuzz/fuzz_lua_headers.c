/*
 * libFuzzer target for the LuaPolicy header API (src/policy/lua_api.c):
 * one Lua state (made once) runs a policy that reads operations from the
 * request's authority, which holds the input as is, and applies them to
 * the request headers in on_request and to the response headers in
 * on_response: set, add, remove, get, set to nil, h:respond with one
 * header, and copying every header under a prefix (the pattern that let
 * a client smuggle content-length), and the request target's setters
 * (h:set_path, h:set_query, h:set_query_arg, headers:set(":path")) and
 * readers (h:query_args, h:query_arg). Each operation is a byte (which
 * operation, which headers) and a name and a value, each a byte of
 * length then the bytes: any byte at all, CR, LF and NUL included.
 *
 * The invariant, checked after every input: nothing in the outgoing
 * header lists (request, response, h:respond's) has a name that is not
 * a lowercase token, a value with a control character (CR, LF, NUL...),
 * or the name of a framing or hop-by-hop field or host, and the request
 * target passes http_target_check() (what a client could send). Errors in the
 * script are fine (pcall'd); a crash, a leak or a broken invariant is
 * not. Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "http/http.h"
#include "policy/lua_vm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char script[] =
    "local function ops(h)\n"
    "  local s, pos, out = h:authority(), 1, {}\n"
    "  while pos <= #s and #out < 64 do\n"
    "    local ok, op, name, val, nx = pcall(string.unpack, 'Bs1s1', s, "
    "pos)\n"
    "    if not ok then break end\n"
    "    out[#out + 1] = {op, name, val}\n"
    "    pos = nx\n"
    "  end\n"
    "  return out\n"
    "end\n"
    "local function apply(h, hd, list, resp)\n"
    "  for _, o in ipairs(list) do\n"
    "    local op, name, val = o[1], o[2], o[3]\n"
    "    local k = op % 13\n"
    "    if k == 0 then pcall(hd.set, hd, name, val)\n"
    "    elseif k == 1 then pcall(hd.add, hd, name, val)\n"
    "    elseif k == 2 then pcall(hd.remove, hd, name)\n"
    "    elseif k == 3 then pcall(hd.set, hd, name, nil)\n"
    "    elseif k == 4 then pcall(hd.get, hd, name)\n"
    "    elseif k == 5 and not resp then\n"
    "      pcall(h.respond, h, 200, {[name] = val}, val)\n"
    "    elseif k == 6 then\n"
    "      for n, v in hd:iter() do pcall(hd.set, hd, name .. n, v) end\n"
    "    elseif k == 7 then\n"
    "      pcall(hd.add, hd, name, tonumber(val) or val)\n"
    "    elseif k == 8 then pcall(h.set_path, h, name .. val)\n"
    "    elseif k == 9 then pcall(h.set_query, h, val)\n"
    "    elseif k == 10 then pcall(h.set_query_arg, h, name, val)\n"
    "    elseif k == 11 then pcall(h.set_query_arg, h, name, nil)\n"
    "    elseif k == 12 then\n"
    "      pcall(hd.set, hd, ':path', name .. val)\n"
    "      pcall(h.query_args, h)\n"
    "      pcall(h.query_arg, h, name)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "function on_request(h)\n"
    "  local list = ops(h)\n"
    "  h.ctx.list = list\n"
    "  apply(h, h:headers(), list, false)\n"
    "end\n"
    "function on_response(h)\n"
    "  apply(h, h:headers(), h.ctx.list or {}, true)\n"
    "end\n";

static struct luaprogs *progs;
static struct luavm *vm;

static void setup(void)
{
    struct luaprog *g;
    char *err = NULL;

    progs = luaprogs_new(1);
    if (progs == NULL)
        abort();
    progs->n = 1;
    g = &progs->v[0];
    g->name = strdup("fuzz/headers");
    g->chunk = strdup("=fuzz/headers");
    g->source = strdup(script);
    g->source_len = strlen(script);
    g->fail_closed = 1;
    g->memory = (size_t)16 << 20;
    g->instruction_slice = 100000;
    g->burst_ms = 1000;
    g->request_ms = 5000;
    g->body_bytes = 1024;
    g->any_ref = 1;
    vm = luavm_new(progs, NULL, &err);
    if (vm == NULL) {
        fprintf(stderr, "luavm_new: %s\n", err ? err : "?");
        abort();
    }
}

static int is_lower_token(struct slice n)
{
    if (!http_field_name_valid(n))
        return 0;
    for (size_t i = 0; i < n.n; i++)
        if (n.p[i] >= 'A' && n.p[i] <= 'Z')
            return 0;
    return 1;
}

/* The invariant: every field may go out as is. */
static void check(const struct http_field *v, size_t n, const char *where)
{
    for (size_t i = 0; i < n; i++) {
        if (!is_lower_token(v[i].name) || http_field_reserved(v[i].name) ||
            !http_field_value_valid(v[i].value)) {
            fprintf(stderr, "%s: field %zu '%.*s' may not go out\n", where, i,
                    (int)v[i].name.n, v[i].name.p);
            abort();
        }
    }
}

/* The invariant of the path and query setters: whatever the script did,
 * the target is one a client could have sent. */
static void check_target(const struct http_request *req)
{
    const char *why;

    if (http_target_check(req->path, &why) < 0) {
        fprintf(stderr, "request target '%.*s' may not go out: %s\n",
                (int)req->path.n, req->path.p, why);
        abort();
    }
}

static enum luavm_result finish(struct luareq *rq, enum luavm_result r)
{
    for (int i = 0; r == LUAVM_YIELD && i < 10000; i++)
        r = luavm_resume(rq);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct arena arena;
    struct http_request req;
    struct http_response resp;
    struct luareq rq;
    enum luavm_result r;

    if (vm == NULL)
        setup();
    if (size > 4096)
        return 0;
    arena_init(&arena, 4096);
    memset(&req, 0, sizeof(req));
    memset(&resp, 0, sizeof(resp));
    memset(&rq, 0, sizeof(rq));
    req.method = SLICE_LIT("GET");
    req.path = SLICE_LIT("/");
    req.scheme = SLICE_LIT("http");
    req.authority = (struct slice){(const char *)data, size};
    req.content_length = -1;
    /* What a codec would have left: valid fields only. */
    http_fields_add(&req.fields, &arena, SLICE_LIT("accept"), SLICE_LIT("*/*"),
                    100);
    http_fields_add(&req.fields, &arena, SLICE_LIT("x-copy-me"), SLICE_LIT("1"),
                    100);
    rq.vm = vm;
    rq.arena = &arena;
    rq.req = &req;
    rq.ctx_ref = -2; /* LUA_NOREF */
    rq.co_ref = -2;
    rq.mask = 1;
    r = finish(&rq, luavm_on_request(&rq));
    check(req.fields.v, req.fields.n, "request");
    check_target(&req);
    if (rq.status > 0) {
        check(rq.rfields, rq.nrfields, "respond");
    } else if (r == LUAVM_CONTINUE) {
        resp.status = 200;
        resp.content_length = 0;
        http_fields_add(&resp.fields, &arena, SLICE_LIT("server"),
                        SLICE_LIT("up"), 100);
        rq.resp = &resp;
        finish(&rq, luavm_on_response(&rq));
        check(resp.fields.v, resp.fields.n, "response");
        if (rq.status > 0)
            check(rq.rfields, rq.nrfields, "respond");
    }
    luavm_request_end(&rq);
    arena_dispose(&arena);
    return 0;
}
