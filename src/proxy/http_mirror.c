/*
 * Mirroring (VirtualService mirror, Envoy's request_mirror_policies).
 *
 * A selected request is copied, head and body, into a stream of its own
 * (its Host gets the "-shadow" suffix) and sent to the mirror's cluster as
 * a pstream marked shadow. It is fire and forget: its answer is read and
 * thrown away, its failure or slowness never touches the original, and it
 * holds no reference to the client's connection or stream, so a client
 * that goes away leaves it to finish (or time out) on its own. Copies live
 * on the listener's list until they end; the reaper frees them.
 *
 * A body is copied whole once it has arrived, as Envoy's router buffers it
 * for shadowing: it is kept while it streams to the original's upstream
 * (hpipe_keep) and a body over BODY_KEEP_LIMIT is not mirrored (counted
 * skipped), without any effect on the original.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "event/timer.h"
#include "proxy/pipeline-int.h"

static void mirror_launch(struct pstream *ps);

static void shadow_drain(struct pstream *ps)
{
    struct hstream *m = ps->s;
    size_t n;

    for (;;) {
        hpipe_peek(&m->resp_body, &n);
        if (n == 0)
            break;
        hpipe_consume(&m->resp_body, n);
    }
    if (ps->down_done ||
        (!hpipe_drained(&m->resp_body) && !m->resp_body.aborted))
        return;
    /* The copy's answer is over: as on_down_done for a client. */
    ps->down_done = 1;
    m->down_done = 1;
    if ((ps->uc != NULL || ps->h2s != NULL) && !ps->up_done) {
        pstream_release_upstream(ps, 0);
        ps->up_done = 1;
    }
    pstream_maybe_end(ps);
}

static void shadow_wake(void *arg)
{
    struct pstream *ps = arg;

    timer_defer(&ps->aux);
}

static void shadow_head(struct hstream *m)
{
    shadow_wake(m->down_ctx);
}

static void shadow_continue(struct hstream *m)
{
    (void)m;
}

/* The "downstream" of a copy: a sink, with nothing to take back or
 * reset (a failed copy is only counted). */
static const struct hstream_down_ops shadow_down = {
    shadow_head, shadow_continue, NULL, NULL};

void pstream_on_aux(void *arg)
{
    struct pstream *ps = arg;

    if (ps->shadow) {
        shadow_drain(ps);
        return;
    }
    /* The request body is complete (body_end). */
    ps->s->req_body.on_end = NULL;
    if (ps->try_wait) {
        ps->try_wait = 0;
        if (ps->uc != NULL || ps->h2s != NULL)
            pstream_arm_try_timer(ps); /* else the next attempt arms it */
    }
    if (ps->mirror_wait) {
        ps->mirror_wait = 0;
        mirror_launch(ps);
    }
}

/* A copy of the request in a stream of its own: head (Host with the
 * "-shadow" suffix), body (body_len bytes: the kept ones, then the live
 * ones) and trailers. NULL when memory is short. */
static struct hstream *shadow_copy(struct pstream *ps, size_t body_len)
{
    const struct hstream *s = ps->s;
    struct http_listener *l = ps->l;
    struct hstream *m = hstream_new(&l->pool, l->conf->downstream.body_cap);
    struct http_request *q;
    const char *part;
    size_t n;

    if (m == NULL)
        return NULL;
    q = &m->req;
    *q = s->req;
    memset(&q->fields, 0, sizeof(q->fields));
    q->expect_continue = 0;
    q->method = arena_slice(&m->arena, s->req.method);
    q->scheme = arena_slice(&m->arena, s->req.scheme);
    q->path = arena_slice(&m->arena, s->req.path);
    q->authority = router_shadow_authority(s->req.authority, &m->arena);
    if (q->method.p == NULL || q->scheme.p == NULL || q->path.p == NULL ||
        q->authority.p == NULL)
        goto fail;
    for (size_t i = 0; i < s->req.fields.n; i++)
        if (http_fields_add(&q->fields, &m->arena, s->req.fields.v[i].name,
                            s->req.fields.v[i].value, SIZE_MAX) < 0)
            goto fail;
    /* The body pipe holds the whole copy, from no pool: it is written
     * once, here, and read by the copy's upstream. */
    hpipe_dispose(&m->req_body);
    hpipe_init(&m->req_body, NULL, body_len);
    if (s->req.has_body) {
        part = hpipe_kept(&s->req_body, &n);
        if (hpipe_write(&m->req_body, part, n) != n)
            goto fail;
        part = hpipe_live(&s->req_body, &n);
        if (hpipe_write(&m->req_body, part, n) != n)
            goto fail;
        for (size_t i = 0; i < s->req_body.trailers.n; i++)
            if (http_fields_add(&m->req_body.trailers, &m->arena,
                                s->req_body.trailers.v[i].name,
                                s->req_body.trailers.v[i].value, SIZE_MAX) < 0)
                goto fail;
    }
    hpipe_finish(&m->req_body);
    return m;
fail:
    hstream_unref(m);
    return NULL;
}

/* Sends the copy of ps's request to the mirror's cluster, or counts it
 * skipped. */
static void mirror_launch(struct pstream *ps)
{
    const struct route_mirror *mr = &ps->action->mirror;
    struct http_listener *l = ps->l;
    struct proxy_counters *sh = http_shard(l);
    const struct hpipe *b = &ps->s->req_body;
    struct upool *pool = http_pool(ps->wr, mr->cluster);
    size_t kept = 0, live = 0;
    int admitted = 0;
    struct hstream *m;
    struct pstream *sp;
    uint64_t ms;

    if (ps->s->req.upgrade || pool->cl->nendpoints == 0)
        goto skip;
    if (ps->s->req.has_body) {
        if (b->aborted || !b->eof || !hpipe_replayable(b))
            goto skip;
        hpipe_kept(b, &kept);
        hpipe_live(b, &live);
        if (kept + live > BODY_KEEP_LIMIT)
            goto skip;
    }
    if (pool->cl->max_requests > 0) {
        if (!cluster_admit(pool->cl)) {
            STAT_ADD(upool_stats(pool), rq_overflow, 1);
            goto skip;
        }
        admitted = 1;
    }
    m = shadow_copy(ps, kept + live);
    sp = m != NULL ? arena_alloc(&m->arena, sizeof(*sp)) : NULL;
    if (sp == NULL) {
        hstream_unref(m);
        if (admitted)
            cluster_release(pool->cl);
        goto skip;
    }
    memset(sp, 0, sizeof(*sp));
    /* The pool lives in the view: the copy pins it too. */
    pstream_shadow_init(sp, l, http_listener_repin(ps->wr), m, mr->cluster,
                        pool, admitted, &shadow_down, shadow_wake);
    pstream_trace_copy(sp, ps);
    ms = ps->timeout_ms > 0 ? ps->timeout_ms : MIRROR_TIMEOUT_MS;
    timer_arm(&sp->timer, ms);
    STAT_ADD(&sh->http, rq_mirror_sent, 1);
    pstream_shadow_send(sp);
    return;
skip:
    STAT_ADD(&sh->http, rq_mirror_skipped, 1);
}

void pstream_shadow_init(struct pstream *sp, struct http_listener *l,
                         struct wroutes *w, struct hstream *m, int cluster,
                         struct upool *pool, int admitted,
                         const struct hstream_down_ops *down,
                         void (*wake)(void *reader))
{
    sp->s = hstream_ref(m); /* the proxy's; m's own is the sink's */
    sp->l = l;
    sp->wr = w;
    sp->shadow = 1;
    sp->cluster = cluster;
    sp->pool = pool;
    sp->admitted = (unsigned)admitted;
    m->proxy = sp;
    m->down = down;
    m->down_ctx = sp;
    m->resp_body.wake_reader = wake;
    m->resp_body.reader = sp;
    timer_init(&sp->timer, l->base, pstream_on_timeout, sp);
    timer_init(&sp->delay, l->base, pstream_on_delay, sp);
    timer_init(&sp->try_timer, l->base, pstream_on_try_timeout, sp);
    timer_init(&sp->aux, l->base, pstream_on_aux, sp);
    list_append(&l->mirrors, &sp->link);
}

void pstream_shadow_send(struct pstream *sp)
{
    struct upool *pool = sp->pool;

    sp->ep = balancer_pick(&pool->lb);
    sp->busy = 1;
    sp->busy_ep = sp->ep;
    balancer_busy(&pool->lb, sp->ep);
    STAT_ADD(upool_stats(pool), rq_total, 1);
    pstream_connect_next(sp);
}

/* The router picked this request for mirroring: copy it now, or once its
 * body has arrived. */
void pstream_mirror_begin(struct pstream *ps)
{
    if (pstream_body_complete(ps)) {
        mirror_launch(ps);
        return;
    }
    ps->mirror_wait = 1;
    pstream_wait_body(ps);
}

void http_mirrors_reap(struct http_listener *l)
{
    while (!LIST_EMPTY(&l->mirrors_dead)) {
        struct pstream *ps =
            LIST_ELEM(l->mirrors_dead.next, struct pstream, link);
        struct hstream *m = ps->s;

        list_del(&ps->link);
        hstream_unref(m); /* frees ps too: it lives in m's arena */
    }
}

void http_mirrors_free(struct http_listener *l)
{
    while (!LIST_EMPTY(&l->mirrors)) {
        struct pstream *ps = LIST_ELEM(l->mirrors.next, struct pstream, link);

        ps->shadow_failed = 1;
        pstream_release_upstream(ps, 0);
        ps->down_done = 1;
        pstream_up_finished(ps); /* onto mirrors_dead */
    }
    http_mirrors_reap(l);
}
