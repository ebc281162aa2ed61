/*
 * The proxy's side of strait.http.request (policy/lua_http.h): a call is
 * sent as a stream of its own to the cluster of a registry host, as a
 * mirrored copy is (http_mirror.c: a pstream marked shadow, on the
 * listener's mirrors list, freed by the reaper), so the cluster's
 * DestinationRule TLS and mTLS, balancing, breakers and outlier state
 * apply to it as to any request. Its answer goes to a sink that keeps
 * the head and up to max_response body bytes, then hands them to the
 * Lua side.
 *
 * Nothing of the downstream request is touched: its body is never
 * buffered for a call. A call has its own deadline (timeout_ms) and a
 * cap per worker listener on calls in flight (LUA_HTTP_MAX_INFLIGHT),
 * apart from the cluster's connection pool limits.
 *
 * struct lcall lives until both its stream has ended and the Lua side
 * has let go (answered, or cancelled), in either order.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/ascii.h"
#include "core/log.h"
#include "event/timer.h"
#include "policy/lua_http.h"
#include "policy/lua_vm.h"
#include "proxy/pipeline-int.h"

/* Calls in flight per worker and listener; the next one gets nil,
 * "too many calls in flight". */
#define LUA_HTTP_MAX_INFLIGHT 256

struct lcall {
    struct http_listener *l;
    struct pstream *ps;   /* the call's stream; NULL once it ended */
    luahttp_done_fn done; /* NULL once answered or cancelled */
    void *arg;
    struct timer deadline; /* timeout_ms */
    struct timer drain;    /* reads the answer's body (deferred) */
    char *body;
    size_t len, max;
    int head; /* the answer's head is in */
};

int lua_target_cmp(const void *a, const void *b)
{
    const struct lua_target *x = a, *y = b;
    int c = strcmp(x->host, y->host);

    if (c != 0)
        return c;
    return x->port < y->port ? -1 : x->port > y->port;
}

/* The cluster of host:port in r's registry targets; -1: none. */
static int target_cluster(const struct http_routes *r, const char *host,
                          uint32_t port)
{
    struct lua_target key = {(char *)(uintptr_t)host, port, 0};
    const struct lua_target *t;

    if (r->nlua_targets == 0)
        return -1;
    t = bsearch(&key, r->lua_targets, r->nlua_targets, sizeof(key),
                lua_target_cmp);
    return t != NULL ? t->cluster : -1;
}

static void lcall_free(struct lcall *c)
{
    timer_dispose(&c->deadline);
    timer_dispose(&c->drain);
    c->l->lua_calls--;
    free(c->body);
    free(c);
}

/* Ends the call's stream now (as http_mirrors_free does): its upstream
 * let go, onto the dead list; pstream_lua_call_end() runs from it. */
static void stream_stop(struct pstream *ps)
{
    ps->shadow_failed = 1;
    pstream_release_upstream(ps, 0);
    ps->down_done = 1;
    ps->s->down_done = 1;
    pstream_up_finished(ps);
}

/* Hands the answer (or err) to the Lua side, once. */
static void answer(struct lcall *c, const char *err)
{
    struct luahttp_res res;
    luahttp_done_fn done = c->done;
    const struct hstream *m = c->ps != NULL ? c->ps->s : NULL;

    if (done == NULL)
        return;
    c->done = NULL;
    timer_cancel(&c->deadline);
    memset(&res, 0, sizeof(res));
    res.err = err;
    if (err == NULL && m != NULL) {
        res.status = m->resp.status;
        res.fields = m->resp.fields.v;
        res.nfields = m->resp.fields.n;
        res.body = c->body != NULL ? c->body : "";
        res.body_len = c->len;
    } else if (err == NULL) {
        res.err = "upstream unavailable";
    }
    done(c->arg, &res);
}

static void on_deadline(void *arg)
{
    struct lcall *c = arg;

    answer(c, "timeout");
    stream_stop(c->ps); /* frees c */
}

/* Takes what the answer's body pipe holds; answers once it is all in. */
static void on_drain(void *arg)
{
    struct lcall *c = arg;
    struct pstream *ps = c->ps;
    struct hstream *m = ps->s;
    const char *p;
    size_t n;

    for (;;) {
        p = hpipe_peek(&m->resp_body, &n);
        if (n == 0)
            break;
        if (c->done != NULL && c->len + n > c->max) {
            answer(c, "response too large");
            stream_stop(ps); /* frees c */
            return;
        }
        if (c->done != NULL) {
            char *b = realloc(c->body, c->len + n);
            if (b == NULL) {
                answer(c, "out of memory");
                stream_stop(ps);
                return;
            }
            memcpy(b + c->len, p, n);
            c->body = b;
            c->len += n;
        }
        hpipe_consume(&m->resp_body, n);
    }
    if (ps->down_done ||
        (!hpipe_drained(&m->resp_body) && !m->resp_body.aborted))
        return;
    /* A local answer (connect failure, no endpoint) is no answer of
     * the upstream's. */
    answer(c, m->resp_body.aborted || ps->shadow_failed ? "upstream unavailable"
                                                        : NULL);
    ps->down_done = 1;
    m->down_done = 1;
    if ((ps->uc != NULL || ps->h2s != NULL) && !ps->up_done) {
        pstream_release_upstream(ps, 0);
        ps->up_done = 1;
    }
    pstream_maybe_end(ps); /* may free c */
}

static void call_wake(void *arg)
{
    struct pstream *ps = arg;

    timer_defer(&ps->lcall->drain);
}

static void call_head(struct hstream *m)
{
    struct pstream *ps = m->down_ctx;

    ps->lcall->head = 1;
    call_wake(ps);
}

static void call_continue(struct hstream *m)
{
    (void)m;
}

static const struct hstream_down_ops call_down = {call_head, call_continue,
                                                  NULL, NULL};

void pstream_lua_call_end(struct pstream *ps)
{
    struct lcall *c = ps->lcall;

    ps->lcall = NULL;
    c->ps = NULL;
    answer(c, "upstream unavailable"); /* ended before its answer */
    lcall_free(c);
}

/* Fields a script may not set: Host is the authority, the framing and
 * hop-by-hop fields are the client codec's. */
static int field_dropped(struct slice name)
{
    static const char *const drop[] = {
        "host",       "content-length", "connection", "transfer-encoding",
        "keep-alive", "upgrade",        "te",         NULL};

    for (int i = 0; drop[i] != NULL; i++)
        if (slice_case_eq_str(name, drop[i]))
            return 1;
    return 0;
}

/* The call's request in a stream of its own; NULL when memory is
 * short. */
static struct hstream *call_stream(struct http_listener *l,
                                   const struct luahttp_req *q)
{
    struct hstream *m = hstream_new(&l->pool, l->conf->downstream.body_cap);
    struct http_request *r;

    if (m == NULL)
        return NULL;
    r = &m->req;
    r->version = HTTP_11;
    r->method = arena_slice(&m->arena, q->method);
    r->scheme = SLICE_LIT("http");
    r->path = arena_slice(&m->arena, q->path);
    r->authority = arena_slice(&m->arena, slice_of(q->host));
    if (r->method.p == NULL || r->path.p == NULL || r->authority.p == NULL)
        goto fail;
    for (size_t i = 0; i < q->nfields; i++) {
        if (slice_case_eq_str(q->fields[i].name, "host")) {
            r->authority = arena_slice(&m->arena, q->fields[i].value);
            if (r->authority.p == NULL)
                goto fail;
            continue;
        }
        if (field_dropped(q->fields[i].name))
            continue;
        if (http_fields_add(&r->fields, &m->arena, q->fields[i].name,
                            q->fields[i].value, SIZE_MAX) < 0)
            goto fail;
    }
    /* The body pipe holds the whole body, from no pool: written once,
     * here, and read by the upstream. */
    r->content_length = q->body.p != NULL ? (int64_t)q->body.n : -1;
    r->has_body = q->body.n > 0;
    hpipe_dispose(&m->req_body);
    hpipe_init(&m->req_body, NULL, q->body.n);
    if (q->body.n > 0 &&
        hpipe_write(&m->req_body, q->body.p, q->body.n) != q->body.n)
        goto fail;
    hpipe_finish(&m->req_body);
    return m;
fail:
    hstream_unref(m);
    return NULL;
}

static void *call_start(void *env, const struct luahttp_req *q,
                        luahttp_done_fn done, void *arg, const char **why)
{
    struct http_listener *l = env;
    struct wroutes *w;
    struct upool *pool;
    struct hstream *m = NULL;
    struct pstream *sp;
    struct lcall *c = NULL;
    int id, admitted = 0;

    if (l->lua_calls >= LUA_HTTP_MAX_INFLIGHT) {
        *why = "too many calls in flight";
        return NULL;
    }
    /* The listener's current routes: the registry as it is now. */
    w = http_listener_pin(l);
    id = target_cluster(w->r, q->host, q->port);
    if (id < 0) {
        *why = "unknown host";
        goto fail;
    }
    pool = http_pool(w, id);
    *why = "upstream unavailable";
    if (pool->cl->nendpoints == 0)
        goto fail;
    if (pool->cl->max_requests > 0) {
        if (!cluster_admit(pool->cl)) {
            STAT_ADD(upool_stats(pool), rq_overflow, 1);
            goto fail;
        }
        admitted = 1;
    }
    *why = "out of memory";
    c = calloc(1, sizeof(*c));
    m = c != NULL ? call_stream(l, q) : NULL;
    sp = m != NULL ? arena_alloc(&m->arena, sizeof(*sp)) : NULL;
    if (sp == NULL)
        goto fail;
    memset(sp, 0, sizeof(*sp));
    c->l = l;
    c->ps = sp;
    c->done = done;
    c->arg = arg;
    c->max = q->max_response;
    timer_init(&c->deadline, l->base, on_deadline, c);
    timer_init(&c->drain, l->base, on_drain, c);
    l->lua_calls++;
    /* The pin moves to the call's stream. */
    pstream_shadow_init(sp, l, w, m, id, pool, admitted, &call_down, call_wake);
    sp->lcall = c;
    timer_arm(&c->deadline, q->timeout_ms);
    /* A connect failure answers locally, inside: the answer then waits
     * for the drain timer, never reaching Lua from in here. */
    pstream_shadow_send(sp);
    return c;
fail:
    hstream_unref(m);
    free(c);
    if (admitted)
        cluster_release(http_pool(w, id)->cl);
    http_listener_unpin(l, w);
    return NULL;
}

static void call_cancel(void *env, void *call)
{
    struct lcall *c = call;

    /* Not answered yet, so its stream has not ended (an ending stream
     * answers): stopping it frees c. */
    (void)env;
    c->done = NULL;
    timer_cancel(&c->deadline);
    stream_stop(c->ps);
}

static const struct luahttp_ops lua_http_ops = {call_start, call_cancel};

void lua_http_attach(struct luavm *vm, struct http_listener *l)
{
    luavm_set_http(vm, &lua_http_ops, l);
}
