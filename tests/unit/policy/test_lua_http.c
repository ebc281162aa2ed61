/*
 * Unit tests for src/policy/lua_http.c: strait.http.request against a
 * fake proxy (struct luahttp_ops). A hook yields until the answer is in
 * and gets status, headers (repeated fields joined) and body; the
 * errors (unknown host, too many calls, not yieldable); a call cancelled
 * with its request or with its state, whose answer then never comes;
 * a call from a timer callback.
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
#include "policy/lua_http.h"
#include "policy/lua_vm.h"

/* The fake proxy: what the last start() was asked, and its callback. */
struct fake {
    int starts, cancels;
    char host[64];
    uint32_t port;
    char method[16], path[64], body[64];
    char fields[256]; /* "name=value;" each */
    uint64_t timeout_ms;
    luahttp_done_fn done;
    void *arg;
};

static void *fake_start(void *env, const struct luahttp_req *q,
                        luahttp_done_fn done, void *arg, const char **why)
{
    struct fake *f = env;

    if (strcmp(q->host, "nope.example.com") == 0) {
        *why = "unknown host";
        return NULL;
    }
    f->starts++;
    snprintf(f->host, sizeof(f->host), "%s", q->host);
    f->port = q->port;
    snprintf(f->method, sizeof(f->method), "%.*s", (int)q->method.n,
             q->method.p);
    snprintf(f->path, sizeof(f->path), "%.*s", (int)q->path.n, q->path.p);
    snprintf(f->body, sizeof(f->body), "%.*s", (int)q->body.n,
             q->body.p ? q->body.p : "");
    f->fields[0] = '\0';
    for (size_t i = 0; i < q->nfields; i++) {
        size_t n = strlen(f->fields);
        snprintf(f->fields + n, sizeof(f->fields) - n, "%.*s=%.*s;",
                 (int)q->fields[i].name.n, q->fields[i].name.p,
                 (int)q->fields[i].value.n, q->fields[i].value.p);
    }
    f->timeout_ms = q->timeout_ms;
    f->done = done;
    f->arg = arg;
    return f;
}

static void fake_cancel(void *env, void *call)
{
    struct fake *f = env;

    assert_ptr_equal(call, f);
    f->cancels++;
    f->done = NULL;
}

static const struct luahttp_ops fake_ops = {fake_start, fake_cancel};

/* Answers the call in flight. */
static void answer(struct fake *f, const char *err, int status,
                   const char *body)
{
    struct http_field fields[2] = {
        {SLICE_LIT("x-k"), SLICE_LIT("a")},
        {SLICE_LIT("x-k"), SLICE_LIT("b")},
    };
    struct luahttp_res res = {err, status, fields,
                              2,   body,   body ? strlen(body) : 0};
    luahttp_done_fn done = f->done;

    assert_non_null(done);
    f->done = NULL;
    done(f->arg, &res);
}

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
    g->burst_ms = 100;
    g->request_ms = 400;
    g->http_calls = 2;
    g->http_timeout_ms = 500;
    g->any_ref = 1;
    return p;
}

struct fx {
    struct luaprogs *p;
    struct luavm *vm;
    struct fake fake;
    struct arena arena;
    struct http_request req;
    struct http_response resp;
    struct luareq rq;
    int woken;
};

static void wake(void *arg)
{
    ((struct fx *)arg)->woken++;
}

static struct fx *fx_new(const char *src, int with_ops)
{
    struct fx *f = calloc(1, sizeof(*f));
    char *err = NULL;

    f->p = progs1(src);
    f->vm = luavm_new(f->p, NULL, &err);
    if (f->vm == NULL)
        fail_msg("luavm_new: %s", err);
    if (with_ops)
        luavm_set_http(f->vm, &fake_ops, &f->fake);
    arena_init(&f->arena, 4096);
    f->req.method = SLICE_LIT("GET");
    f->req.path = SLICE_LIT("/x");
    f->req.authority = SLICE_LIT("example.com");
    f->req.scheme = SLICE_LIT("http");
    f->rq.vm = f->vm;
    f->rq.arena = &f->arena;
    f->rq.req = &f->req;
    f->rq.resp = &f->resp;
    f->rq.ctx_ref = -2; /* LUA_NOREF */
    f->rq.co_ref = -2;
    f->rq.mask = 1;
    f->rq.wait.wake = wake;
    f->rq.wait.wake_arg = f;
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

static const char *rfield(const struct fx *f, const char *name)
{
    static char v[128];

    for (size_t i = 0; i < f->rq.nrfields; i++)
        if (slice_eq_str(f->rq.rfields[i].name, name)) {
            snprintf(v, sizeof(v), "%.*s", (int)f->rq.rfields[i].value.n,
                     f->rq.rfields[i].value.p);
            return v;
        }
    return NULL;
}

static void waits_for_the_answer(void **state)
{
    struct fx *f =
        fx_new("function on_request(h)\n"
               "  local s, hd, b = strait.http.request{upstream = "
               "'Auth.NS.svc:8080', method = 'POST', path = '/c', headers = "
               "{['x-a'] = {'1', '2'}}, body = 'hi', timeout_ms = 99999}\n"
               "  h:respond(s, {['x-r'] = hd['x-k']}, b)\n"
               "end\n",
               1);

    (void)state;
    assert_int_equal(luavm_on_request(&f->rq), LUAVM_YIELD);
    assert_true(luavm_waiting(&f->rq));
    assert_string_equal(f->fake.host, "auth.ns.svc");
    assert_int_equal(f->fake.port, 8080);
    assert_string_equal(f->fake.method, "POST");
    assert_string_equal(f->fake.path, "/c");
    assert_string_equal(f->fake.body, "hi");
    assert_string_equal(f->fake.fields, "x-a=1;x-a=2;");
    /* timeout_ms only shortens limits.httpCallTimeout. */
    assert_int_equal(f->fake.timeout_ms, 500);
    /* Resumed before its answer: it goes on waiting. */
    assert_int_equal(luavm_resume(&f->rq), LUAVM_YIELD);
    answer(&f->fake, NULL, 201, "ok");
    assert_int_equal(f->woken, 1);
    assert_int_equal(luavm_resume(&f->rq), LUAVM_RESPONDED);
    assert_false(luavm_waiting(&f->rq));
    assert_int_equal(f->rq.status, 201);
    assert_int_equal(f->rq.body.n, 2);
    assert_string_equal(rfield(f, "x-r"), "a, b");
    fx_free(f);
}

static void errors_and_limits(void **state)
{
    struct fx *f = fx_new(
        "local A = {host = 'a.b', port = 80}\n"
        "function on_request(h)\n"
        "  local r = {}\n"
        "  local s, e = strait.http.request{upstream = 'nope.example.com:1'}\n"
        "  r[#r + 1] = e\n"
        "  for i = 1, 3 do\n"
        "    s, e = strait.http.request(A)\n"
        "    r[#r + 1] = tostring(s or e)\n"
        "  end\n"
        "  local ok = pcall(strait.http.request, {upstream = 'a.b'})\n"
        "  r[#r + 1] = tostring(ok)\n"
        "  h:respond(200, {['x-r'] = table.concat(r, ',')}, '')\n"
        "end\n"
        "function on_response(h)\n"
        "  local s, e = strait.http.request{upstream = 'a.b:80'}\n"
        "  h:headers():set('x-e', tostring(s or e))\n"
        "end\n",
        1);
    enum luavm_result r;

    (void)state;
    r = luavm_on_request(&f->rq);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r, LUAVM_YIELD);
        answer(&f->fake, i == 0 ? NULL : "timeout", 204, "");
        r = luavm_resume(&f->rq);
    }
    assert_int_equal(r, LUAVM_RESPONDED);
    assert_int_equal(f->fake.starts, 2);
    assert_string_equal(rfield(f, "x-r"),
                        "unknown host,204,timeout,too many calls,false");
    /* on_response may call too, within the same per-request count:
     * on_request used both calls, so this one is refused at once. */
    f->rq.status = 0;
    f->rq.phase = 0;
    assert_int_equal(luavm_on_response(&f->rq), LUAVM_CONTINUE);
    {
        const struct http_field *e = http_fields_get(&f->resp.fields, "x-e");
        assert_non_null(e);
        assert_true(slice_eq_str(e->value, "too many calls"));
    }
    fx_free(f);
    /* A state the proxy lends nothing to knows no host. */
    f = fx_new("function on_request(h)\n"
               "  local s, e = strait.http.request{upstream = 'a.b:80'}\n"
               "  h:respond(200, {['x-e'] = e}, '')\n"
               "end\n",
               0);
    assert_int_equal(luavm_on_request(&f->rq), LUAVM_RESPONDED);
    assert_string_equal(rfield(f, "x-e"), "unknown host");
    fx_free(f);
}

static void cancelled_with_its_request(void **state)
{
    struct fx *f = fx_new("function on_request(h)\n"
                          "  strait.http.request{upstream = 'a.b:80'}\n"
                          "  error('never here')\n"
                          "end\n",
                          1);

    (void)state;
    assert_int_equal(luavm_on_request(&f->rq), LUAVM_YIELD);
    luavm_request_end(&f->rq);
    assert_int_equal(f->fake.cancels, 1);
    assert_null(f->fake.done);
    assert_int_equal(f->woken, 0);
    assert_int_equal(luavm_errors(f->p, 0, LUAVM_ON_REQUEST, LUAVM_ERR_ERROR),
                     0);
    fx_free(f);
}

static double dict_num(struct luadict *d, const char *k)
{
    struct luadict_value v;
    char *out = NULL;

    luadict_get(d, k, strlen(k), clock_ms(), &v, &out);
    free(out);
    return v.type == LUADICT_NUMBER ? v.n : -1;
}

static void from_a_timer_and_cancelled_with_the_state(void **state)
{
    struct luaprogs *p =
        progs1("local d = strait.shared.t\n"
               "function init_worker()\n"
               "  strait.timer.at(0, function(premature)\n"
               "    if premature then return end\n"
               "    local s = strait.http.request{upstream = 'a.b:80'}\n"
               "    d:set('status', s)\n"
               "    strait.http.request{upstream = 'a.b:80'}\n"
               "    d:set('never', 1)\n"
               "  end)\n"
               "end\n");
    struct event_base *base = event_base_new();
    struct luadict *d = luadict_new("t", 1 << 20);
    struct fake fake;
    char *err = NULL;
    struct luavm *vm;
    uint64_t t0 = clock_ms();

    (void)state;
    memset(&fake, 0, sizeof(fake));
    p->dicts[0] = luadict_ref(d);
    p->ndicts = 1;
    vm = luavm_new(p, base, &err);
    if (vm == NULL)
        fail_msg("%s", err);
    luavm_set_http(vm, &fake_ops, &fake);
    while (fake.starts == 0 && clock_ms() - t0 < 5000)
        event_base_loop(base, EVLOOP_ONCE);
    assert_int_equal(fake.starts, 1);
    answer(&fake, NULL, 200, "");
    while (fake.starts == 1 && clock_ms() - t0 < 5000)
        event_base_loop(base, EVLOOP_ONCE);
    assert_true(dict_num(d, "status") == 200);
    /* The second call is in flight when the state closes. */
    assert_int_equal(fake.starts, 2);
    luavm_free(vm);
    assert_int_equal(fake.cancels, 1);
    assert_true(dict_num(d, "never") < 0);
    assert_int_equal(luavm_errors(p, 0, LUAVM_TIMER, LUAVM_ERR_ERROR), 0);
    luaprogs_unref(p);
    luadict_unref(d);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(waits_for_the_answer),
        cmocka_unit_test(errors_and_limits),
        cmocka_unit_test(cancelled_with_its_request),
        cmocka_unit_test(from_a_timer_and_cancelled_with_the_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
