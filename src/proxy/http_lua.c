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
#include "http/stream.h"
#include "policy/lua_vm.h"
#include "proxy/pipeline-int.h"

struct luavm *http_lua_vm(struct http_listener *l, struct wroutes *w)
{
    char *err = NULL;

    if (w->lua != NULL || w->lua_failed)
        return w->lua;
    w->lua = luavm_new(w->r->lua, l->base, &err);
    if (w->lua == NULL) {
        /* compile_lua() ran the same scripts already, so this is memory
         * or an init_worker that fails only sometimes. */
        w->lua_failed = 1;
        log_msg(LOG_ERROR, "listener %s: worker %d: %s", l->conf->name,
                l->worker, err ? err : "cannot make a Lua state");
        free(err);
    }
    return w->lua;
}

static struct luavm *vm_of(struct pstream *ps)
{
    return http_lua_vm(ps->l, ps->wr);
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

int pstream_lua_request(struct pstream *ps)
{
    struct hstream *s = ps->s;
    struct luavm *vm = vm_of(ps);
    struct luareq *rq;
    const struct route_action *a;
    struct slice route = {NULL, 0}, vs = {NULL, 0};
    uint32_t mask;

    if (vm == NULL) {
        if (!fail_closed(ps->wr->r->lua))
            return 0;
        ps->details = "lua_policy_failed";
        pstream_local_reply(ps, 500, 0, "lua policy failed\n");
        pstream_up_finished(ps);
        return 1;
    }
    /* Targets by VirtualService or route need the route the request
     * would take: the router is asked once more, without effect (the
     * request is routed for real after the hooks). */
    if (needs_route(ps->wr->r->lua)) {
        struct route_result rr;
        a = router_match(ps->wr->r->router, &s->req, ps->l->conf->port,
                         pstream_rng(ps->l), &s->arena, &rr);
        if (a != NULL && a->name != NULL)
            route = slice_of(a->name);
        if (a != NULL && a->vs != NULL)
            vs = slice_of(a->vs);
    }
    mask = luavm_match(vm, s->req.authority, route, vs);
    if (mask == 0)
        return 0;
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
    rq->geo = ps->geo;
    rq->conn = &ps->hc->conn;
    ps->lua = rq;
    switch (luavm_on_request(rq)) {
    case LUAVM_CONTINUE:
        return 0;
    case LUAVM_YIELD:
        /* A timer, not a deferral: the loop polls sockets before it runs,
         * so other streams get their turn between two slices. */
        timer_arm(&ps->lua_timer, 1);
        return 1;
    case LUAVM_RESPONDED:
        respond(ps);
        return 1;
    }
    return 1;
}

void pstream_lua_on_timer(void *arg)
{
    struct pstream *ps = arg;

    switch (luavm_resume(ps->lua)) {
    case LUAVM_CONTINUE:
        pstream_forward(ps);
        break;
    case LUAVM_YIELD:
        timer_arm(&ps->lua_timer, 1);
        break;
    case LUAVM_RESPONDED:
        respond(ps);
        break;
    }
}

int pstream_lua_response(struct pstream *ps)
{
    struct luareq *rq = ps->lua;

    rq->resp = &ps->s->resp;
    if (luavm_on_response(rq) != LUAVM_RESPONDED || !rq->failed)
        return 0;
    /* Fail: nothing of the upstream's answer has gone out yet; it is
     * dropped and the client gets a 500. */
    pstream_release_upstream(ps, 0);
    http_fields_remove(&ps->s->resp.fields, "content-length");
    ps->s->resp.fields.n = 0;
    ps->details = "lua_policy_failed";
    pstream_local_reply(ps, 500, 0, "lua policy failed\n");
    pstream_up_finished(ps);
    return 1;
}

void pstream_lua_end(struct pstream *ps)
{
    struct luareq *rq = ps->lua;

    if (rq->vm != NULL) {
        rq->resp = &ps->s->resp;
        luavm_on_log(rq);
    }
    luavm_request_end(rq);
    ps->lua = NULL;
}
