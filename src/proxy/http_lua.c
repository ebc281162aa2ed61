/*
 * LuaPolicy in the request pipeline: on_request before routing (targets
 * by VirtualService and per-route `disabled` ask the router where the
 * request would go; what the script changes then routes it), on_response before
 * the head goes downstream, on_log when the request ends. A request no policy
 * applies to allocates nothing here: the mask is computed on the stack and
 * ps->lua stays NULL.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/log.h"
#include "event/timer.h"
#include "http/pipe.h"
#include "http/stream.h"
#include "policy/lua_vm.h"
#include "proxy/pipeline-int.h"
#include "proxy/stats.h"

struct luavm *http_lua_vm(struct http_listener *l, struct wroutes *w)
{
    char *err = NULL;

    if (w->lua != NULL || w->lua_failed)
        return w->lua;
    w->lua = luavm_new_stop(w->r->lua, l->base, l->pl.stop, &err);
    if (w->lua != NULL) /* one state per namespace of the policies */
        STAT_ADD(&http_shard(l)->relay, lua_states,
                 w->r->lua->ngroups > 1 ? w->r->lua->ngroups : 1);
    if (w->lua == NULL) {
        /* compile_lua() ran the same scripts already, so this is memory
         * or an init_worker that fails only sometimes. */
        w->lua_failed = 1;
        log_msg(LOG_ERROR, "listener %s: worker %d: %s", l->conf->name,
                l->worker, err ? err : "cannot make a Lua state");
        free(err);
    } else {
        lua_http_attach(w->lua, l);
        luavm_set_stop(w->lua, l->pl.stop);
    }
    return w->lua;
}

static struct luavm *vm_of(struct pstream *ps)
{
    return http_lua_vm(ps->l, ps->wr);
}

/* A strait.http answer came in for the hook of the request: it is
 * resumed on this pass of the loop, outside the call's own callbacks. */
static void lua_wake(void *arg)
{
    struct pstream *ps = arg;

    timer_defer(&ps->lua_timer);
}

static int fail_closed(const struct luaprogs *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i].fail_closed)
            return 1;
    return 0;
}

static int needs_route(const struct luaprogs *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i].nvss > 0 || p->v[i].ndisabled > 0)
            return 1;
    return 0;
}

/* The answer h:respond() asked for, or 500 for a failed policy. */
static void respond(struct pstream *ps)
{
    struct hstream *s = ps->s;
    struct luareq *rq = ps->lua;
    char *body = NULL;

    if (rq->failed) {
        ps->details = "lua_policy_failed";
        pstream_local_reply(ps, 500, 0, "lua policy failed\n");
        pstream_up_finished(ps);
        return;
    }
    ps->details = "lua_response";
    if (rq->body.n > 0)
        body = arena_dup(&s->arena, rq->body.p, rq->body.n);
    if (hstream_reply_begin(s, rq->status, body) == 0) {
        for (size_t i = 0; i < rq->nrfields; i++)
            http_fields_set(&s->resp.fields, &s->arena,
                            arena_dup(&s->arena, rq->rfields[i].name.p,
                                      rq->rfields[i].name.n),
                            rq->rfields[i].value);
        hstream_reply_end(s, body);
    }
    if (!s->req_body.eof)
        hpipe_abort(&s->req_body);
    pstream_up_finished(ps);
}

/*
 * h:body(): the request body is read through the pipe's replay store
 * (hpipe_keep, what a retry keeps a body in), at most rq->body_max
 * bytes, and the pipe is rewound afterwards, so the upstream still gets
 * every byte from the first. Only a hook that asks reads; a body longer
 * than the max is left in the pipe, past what was read, and streams on.
 */
static void body_wake(void *arg)
{
    struct pstream *ps = arg;

    timer_arm(&ps->lua_timer, 0);
}

/* Reads what arrived; 1 when the wait is over (rq->body_got or
 * rq->body_why set, the pipe rewound), 0 while more must come. */
static int body_read(struct pstream *ps)
{
    struct hstream *s = ps->s;
    struct hpipe *p = &s->req_body;
    struct luareq *rq = ps->lua;
    const char *d;
    size_t kept, n;

    if (!s->req.has_body) {
        rq->body_got = (struct slice){"", 0};
        return 1;
    }
    if (s->req.content_length >= 0 &&
        (uint64_t)s->req.content_length > rq->body_max) {
        rq->body_why = "too large";
        return 1;
    }
    hpipe_keep(p, rq->body_max);
    /* Read on after what an earlier h:body() read (and rewound). */
    hpipe_kept(p, &kept);
    p->replay = kept;
    hpipe_live(p, &n);
    if (n > 0) {
        if (kept + n > rq->body_max) {
            rq->body_why = "too large";
            goto done;
        }
        hpipe_consume(p, n);
    }
    if (p->aborted) {
        rq->body_why = "aborted";
        goto done;
    }
    if (!p->eof) {
        p->wake_reader = body_wake;
        p->reader = ps;
        hpipe_rewind(p);
        return 0;
    }
    d = hpipe_kept(p, &kept);
    rq->body_got = (struct slice){d != NULL ? d : "", kept};
done:
    if (p->reader == ps) {
        p->wake_reader = NULL;
        p->reader = NULL;
    }
    hpipe_rewind(p);
    return 1;
}

/* The hook waits in h:body(): a client that waits for 100 Continue is
 * told to send, and the body is read as it comes. */
static void body_wait(struct pstream *ps)
{
    struct hstream *s = ps->s;

    if (s->req.expect_continue) {
        s->down->continue_100(s);
        s->req.expect_continue = 0;
    }
    if (body_read(ps))
        timer_arm(&ps->lua_timer, 0);
}

/* What a hook's result asks for next, after on_request or a resume. */
static void on_request_result(struct pstream *ps, enum luavm_result r, int now)
{
    switch (r) {
    case LUAVM_CONTINUE:
        if (!now)
            pstream_forward(ps);
        break;
    case LUAVM_YIELD:
        /* A timer, not a deferral: the loop polls sockets before it runs,
         * so other streams get their turn between two slices. A hook
         * waiting in strait.http is woken by the answer instead. */
        if (!luavm_waiting(ps->lua))
            timer_arm(&ps->lua_timer, 1);
        break;
    case LUAVM_BODY:
        body_wait(ps);
        break;
    case LUAVM_RESPONDED:
        respond(ps);
        break;
    }
}

int pstream_lua_request(struct pstream *ps)
{
    struct hstream *s = ps->s;
    const struct luaprogs *progs = ps->wr->r->lua;
    struct luavm *vm;
    struct luareq *rq;
    const struct route_action *a;
    struct slice route = {NULL, 0}, vs = {NULL, 0};
    uint32_t mask;
    enum luavm_result r;

    /* Targets by VirtualService or route need the route the request
     * would take: the router is asked once more, without effect (the
     * request is routed for real after the hooks). */
    if (needs_route(progs)) {
        struct route_result rr;
        a = router_match(ps->wr->r->router, &s->req, ps->l->conf->port,
                         pstream_rng(ps->l), &s->arena, &rr);
        if (a != NULL && a->name != NULL)
            route = slice_of(a->name);
        if (a != NULL && a->vs != NULL)
            vs = slice_of(a->vs);
    }
    /* Whether a policy applies is known from the programs alone: a
     * request none applies to makes no state and touches none. */
    mask = luaprogs_match(progs, s->req.authority, route, vs);
    if (mask == 0)
        return 0;
    vm = vm_of(ps);
    if (vm == NULL) {
        if (!fail_closed(progs))
            return 0;
        ps->details = "lua_policy_failed";
        pstream_local_reply(ps, 500, 0, "lua policy failed\n");
        pstream_up_finished(ps);
        return 1;
    }
    rq = arena_alloc(&s->arena, sizeof(*rq));
    if (rq == NULL) {
        pstream_local_reply(ps, 503, 0, "out of memory\n");
        pstream_up_finished(ps);
        return 1;
    }
    memset(rq, 0, sizeof(*rq));
    rq->vm = vm;
    rq->arena = &s->arena;
    rq->req = &s->req;
    rq->route = route;
    rq->vs = vs;
    rq->mask = mask;
    rq->ctx_ref = rq->co_ref = -2; /* LUA_NOREF */
    rq->upstream = -1;
    rq->peer_ip = ps->hc->peer_ip;
    rq->client_ip = ps->client;
    rq->geo = ps->geo;
    rq->conn = &ps->hc->conn;
    rq->wait.wake = lua_wake;
    rq->wait.wake_arg = ps;
    ps->lua = rq;
    r = luavm_on_request(rq);
    on_request_result(ps, r, 1);
    return r != LUAVM_CONTINUE;
}

/* on_response asked for a 500 (failurePolicy Fail): nothing of the
 * upstream's answer has gone out yet; it is dropped. */
static void response_failed(struct pstream *ps)
{
    pstream_release_upstream(ps, 0);
    http_fields_remove(&ps->s->resp.fields, "content-length");
    ps->s->resp.fields.n = 0;
    /* An upstream that finished while the hook yielded left its body in
     * the pipe: the local answer must not follow it. */
    hpipe_reset(&ps->s->resp_body);
    ps->details = "lua_policy_failed";
    pstream_local_reply(ps, 500, 0, "lua policy failed\n");
    if (!ps->up_done)
        pstream_up_finished(ps);
}

/* What on_response's result asks for next; 1: the head waits. */
static int on_response_result(struct pstream *ps, enum luavm_result r)
{
    switch (r) {
    case LUAVM_YIELD:
    case LUAVM_BODY: /* (h:body() raises in on_response) */
        /* A timer, not a deferral: the loop polls sockets before it runs,
         * so other streams get their turn between two slices. A hook
         * waiting in strait.http is woken by the answer instead. */
        if (!luavm_waiting(ps->lua))
            timer_arm(&ps->lua_timer, 1);
        return 1;
    case LUAVM_RESPONDED:
        if (ps->lua->failed) {
            response_failed(ps);
            return 1;
        }
        return 0;
    case LUAVM_CONTINUE:
        break;
    }
    return 0;
}

void pstream_lua_on_timer(void *arg)
{
    struct pstream *ps = arg;
    struct luareq *rq = ps->lua;

    if (rq->phase == LUAVM_ON_RESPONSE) {
        /* The answer went another way meanwhile (a route timeout answered
         * 504, the client left): the hook stays suspended, and is let go
         * with the request. */
        if (ps->s->resp_started || ps->s->down_done)
            return;
        if (!on_response_result(ps, luavm_resume(rq)))
            pstream_pass_head(ps);
        return;
    }
    if (rq->body_wait) {
        if (!body_read(ps))
            return;
    }
    on_request_result(ps, luavm_resume(rq), 0);
}

int pstream_lua_response(struct pstream *ps)
{
    struct luareq *rq = ps->lua;

    rq->resp = &ps->s->resp;
    return on_response_result(ps, luavm_on_response(rq));
}

void pstream_lua_end(struct pstream *ps)
{
    struct luareq *rq = ps->lua;

    if (ps->s->req_body.reader == ps) {
        ps->s->req_body.wake_reader = NULL;
        ps->s->req_body.reader = NULL;
    }
    if (rq->vm != NULL) {
        rq->resp = &ps->s->resp;
        luavm_on_log(rq);
    }
    luavm_request_end(rq);
    ps->lua = NULL;
}
