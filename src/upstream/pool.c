#include "config.h"

#include <event2/event.h>
#include <string.h>

#include "http1/h1_client.h"
#include "http2/h2_client.h"
#include "core/stats.h"
#include "event/reap.h"
#include "event/timer.h"
#include "upstream/balancer.h"
#include "upstream/cluster.h"
#include "upstream/pool.h"

/* Idle connections a worker keeps per cluster beyond which the oldest
 * close. */
#define UPOOL_MAX_IDLE 512

/* A connection of this worker is gone: its max_connections slot is free,
 * and a waiting request may open one in its place. */
static void conn_gone(struct upool *p)
{
    p->nconns--;
    cluster_release_conn(p->cl);
    if (!LIST_EMPTY(&p->waiters))
        timer_defer(&p->wake);
}

static void reap(struct reap_node *n)
{
    struct upool *p = LIST_ELEM(n, struct upool, reap);

    while (!LIST_EMPTY(&p->dead)) {
        h1_client_free(LIST_ELEM(p->dead.next, struct h1_client, link));
        conn_gone(p);
    }
    while (!LIST_EMPTY(&p->h2dead)) {
        h2_client_free(LIST_ELEM(p->h2dead.next, struct h2_client, link));
        conn_gone(p);
    }
}

/* Wakes every waiting request; those that still find no connection queue
 * again behind the ones that did. */
static void wake(void *arg)
{
    struct upool *p = arg;
    struct list now;

    LIST_INIT(&now);
    while (!LIST_EMPTY(&p->waiters)) {
        struct list *it = p->waiters.next;
        list_del(it);
        list_append(&now, it);
    }
    while (!LIST_EMPTY(&now)) {
        struct upool_waiter *w = LIST_ELEM(now.next, struct upool_waiter, link);
        list_del(&w->link);
        LIST_INIT(&w->link);
        cluster_release_pending(p->cl);
        w->wake(w);
    }
}

/* A tunnel's conn_opener: the pool's hook for one endpoint. */
struct tun_open {
    struct upool *p;
    size_t ep;
};

static int tun_open(void *arg, struct conn *c,
                    void (*on_io)(struct conn *, void *), void *io_arg)
{
    struct tun_open *t = arg;

    if (t->p->tunnel == NULL)
        return -1;
    return t->p->tunnel(t->p->tunnel_arg, t->p->cl, t->ep, c, on_io, io_arg);
}

/* Whether endpoint ep is reached through a tunnel (HBONE). */
static int is_tunnel(const struct upool *p, size_t ep)
{
    return p->cl->hbone != NULL && p->cl->hbone[ep];
}

struct h1_client *upool_h1_connect(struct upool *p, size_t ep,
                                   const struct h1_client_hooks *hooks,
                                   void *ctx, int *wait)
{
    struct h1_client *c;

    *wait = 0;
    if (!cluster_admit_conn(p->cl)) {
        STAT_ADD(upool_stats(p), cx_overflow, 1);
        if (p->nconns > 0) {
            *wait = 1;
            return NULL;
        }
        /* Nothing of ours to wait for: one over the limit, as Envoy. */
        cluster_force_conn(p->cl);
    }
    if (is_tunnel(p, ep)) {
        struct tun_open t = {p, ep};
        struct conn_opener op = {tun_open, &t};
        c = h1_client_connect_via(p->base, &op, &p->cl->h1, hooks, ctx,
                                  p->scratch);
    } else {
        c = h1_client_connect(p->base, &p->cl->endpoints[ep], p->cl->tls,
                              p->cl->sni, &p->cl->h1, hooks, ctx, p->scratch);
    }
    if (c == NULL) {
        cluster_release_conn(p->cl);
        return NULL;
    }
    c->endpoint = ep;
    p->nconns++;
    STAT_ADD(upool_stats(p), cx_total, 1);
    return c;
}

int upool_wait(struct upool *p, struct upool_waiter *w)
{
    if (!cluster_admit_pending(p->cl))
        return -1;
    STAT_ADD(upool_stats(p), rq_pending, 1);
    list_append(&p->waiters, &w->link);
    return 0;
}

void upool_unwait(struct upool *p, struct upool_waiter *w)
{
    list_del(&w->link);
    LIST_INIT(&w->link);
    cluster_release_pending(p->cl);
}

static void h2_closed(void *owner, struct h2_client *c)
{
    struct upool *p = owner;

    list_del(&c->link);
    list_append(&p->h2dead, &c->link);
    reaper_defer(p->reaper, &p->reap, reap);
}

static const struct h2_client_hooks h2_pool_hooks = {h2_closed};

struct h2_client *upool_h2_get(struct upool *p, size_t ep)
{
    struct h2_client *c;

    for (struct list *it = p->h2conns.next; it != &p->h2conns; it = it->next) {
        c = LIST_ELEM(it, struct h2_client, link);
        if (c->endpoint == ep && h2_client_has_room(c)) {
            STAT_ADD(upool_stats(p), cx_reused, 1);
            return c;
        }
    }
    /* HTTP/2 multiplexes: at max_connections a request shares a busy
     * connection to ep of this worker (nghttp2 queues streams past the
     * peer's limit) rather than wait; with none it opens one, as Envoy. */
    if (!cluster_admit_conn(p->cl)) {
        struct h2_client *any = NULL;
        STAT_ADD(upool_stats(p), cx_overflow, 1);
        for (struct list *it = p->h2conns.next; it != &p->h2conns;
             it = it->next) {
            c = LIST_ELEM(it, struct h2_client, link);
            if (c->endpoint == ep && !c->closed && !c->goaway)
                any = c;
        }
        if (any != NULL)
            return any;
        cluster_force_conn(p->cl);
    }
    if (is_tunnel(p, ep)) {
        struct tun_open t = {p, ep};
        struct conn_opener op = {tun_open, &t};
        c = h2_client_connect_via(p->base, &op, &p->cl->h2, &h2_pool_hooks, p);
    } else {
        c = h2_client_connect(p->base, &p->cl->endpoints[ep], p->cl->tls,
                              p->cl->sni, &p->cl->h2, &h2_pool_hooks, p);
    }
    if (c == NULL) {
        cluster_release_conn(p->cl);
        return NULL;
    }
    c->endpoint = ep;
    p->nconns++;
    c->max_requests = p->cl->max_requests_per_conn;
    STAT_ADD(upool_stats(p), cx_total, 1);
    list_append(&p->h2conns, &c->link);
    return c;
}

void upool_discard(struct upool *p, struct h1_client *c)
{
    /* Silence it now: a deferred event of its own must not call back
     * into an exchange that has moved on. */
    h1_client_abandon(c);
    list_del(&c->link);
    list_append(&p->dead, &c->link);
    reaper_defer(p->reaper, &p->reap, reap);
}

static void idle_closed(void *ctx, struct h1_client *c)
{
    struct upool *p = ctx;

    p->nidle--;
    upool_discard(p, c);
}

/* Idle connections run no exchange: only idle_closed can fire. */
static void no_connect(void *ctx, struct h1_client *c, int timeout)
{
    (void)timeout;
    idle_closed(ctx, c);
}

static void no_head(void *ctx, struct h1_client *c)
{
    (void)ctx;
    (void)c;
}

static void no_done(void *ctx, struct h1_client *c, int ok, int reusable,
                    unsigned flags)
{
    (void)ok;
    (void)reusable;
    (void)flags;
    idle_closed(ctx, c);
}

static const struct h1_client_hooks pool_hooks = {no_connect, no_head, no_done,
                                                  idle_closed};

int upool_init(struct upool *p, struct cluster *cl, struct event_base *base,
               struct reaper *reaper, int worker, struct h1_scratch *scratch)
{
    memset(p, 0, sizeof(*p));
    p->cl = cluster_ref(cl);
    p->base = base;
    p->reaper = reaper;
    p->worker = worker;
    p->scratch = scratch;
    LIST_INIT(&p->idle);
    LIST_INIT(&p->dead);
    LIST_INIT(&p->h2conns);
    LIST_INIT(&p->h2dead);
    LIST_INIT(&p->waiters);
    timer_init(&p->wake, base, wake, p);
    if (balancer_init(&p->lb, cl, worker) < 0)
        goto fail;
    return 0;
fail:
    upool_dispose(p); /* safe on a half-built pool: its lists are empty */
    return -1;
}

void upool_dispose(struct upool *p)
{
    if (p->cl == NULL)
        return;
    /* Waiters are requests, ended before their pool goes. */
    while (!LIST_EMPTY(&p->idle)) {
        h1_client_free(LIST_ELEM(p->idle.next, struct h1_client, link));
        conn_gone(p);
    }
    while (!LIST_EMPTY(&p->dead)) {
        h1_client_free(LIST_ELEM(p->dead.next, struct h1_client, link));
        conn_gone(p);
    }
    while (!LIST_EMPTY(&p->h2conns)) {
        h2_client_free(LIST_ELEM(p->h2conns.next, struct h2_client, link));
        conn_gone(p);
    }
    while (!LIST_EMPTY(&p->h2dead)) {
        h2_client_free(LIST_ELEM(p->h2dead.next, struct h2_client, link));
        conn_gone(p);
    }
    reaper_cancel(&p->reap);
    timer_dispose(&p->wake);
    balancer_dispose(&p->lb);
    cluster_unref(p->cl);
    memset(p, 0, sizeof(*p));
}

struct h1_client *upool_take(struct upool *p, size_t ep)
{
    /* Most recently used first: its TCP state is the warmest. */
    for (struct list *it = p->idle.prev; it != &p->idle; it = it->prev) {
        struct h1_client *c = LIST_ELEM(it, struct h1_client, link);
        if (c->endpoint == ep) {
            list_del(&c->link);
            p->nidle--;
            STAT_ADD(upool_stats(p), cx_reused, 1);
            return c;
        }
    }
    return NULL;
}

void upool_put(struct upool *p, struct h1_client *c)
{
    if (p->cl->max_requests_per_conn > 0 &&
        c->requests >= p->cl->max_requests_per_conn) {
        upool_discard(p, c);
        return;
    }
    if (p->nidle >= UPOOL_MAX_IDLE) {
        struct h1_client *old = LIST_ELEM(p->idle.next, struct h1_client, link);
        p->nidle--;
        upool_discard(p, old);
    }
    h1_client_set_owner(c, &pool_hooks, p);
    list_del(&c->link);
    list_append(&p->idle, &c->link);
    p->nidle++;
    h1_client_idle(c);
    /* A request waiting for a connection takes this one. */
    if (!LIST_EMPTY(&p->waiters))
        timer_defer(&p->wake);
}
