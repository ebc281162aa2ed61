#include "config.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/addr.h"
#include "event/reap.h"
#include "http1/h1_client.h"
#include "http2/h2_client.h"
#include "net/conn.h"
#include "upstream/cluster.h"
#include "upstream/pool.h"

/*
 * The pool's connections go to a listening socket on loopback that never
 * accepts: connects complete in its backlog, and nothing is ever read or
 * written. The loop is run only to let the pool's deferred work (closing
 * discarded connections, waking waiters) happen, after every connection
 * it could touch has been discarded.
 */
#define NEP 2

struct fx {
    struct event_base *base;
    struct reaper reaper; /* the worker's, in the real thing */
    int lfd;
    struct cluster *cl;
    struct upool pool;
};

static int setup(void **state)
{
    static struct fx f;
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    struct addr eps[NEP];
    const char *why;
    char s[32];

    memset(&f, 0, sizeof(f));
    f.lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f.lfd >= 0);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(f.lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(f.lfd, 64), 0);
    assert_int_equal(getsockname(f.lfd, (struct sockaddr *)&sin, &len), 0);
    snprintf(s, sizeof(s), "127.0.0.1:%u", (unsigned)ntohs(sin.sin_port));
    for (int i = 0; i < NEP; i++)
        assert_int_equal(addr_parse(&eps[i], s, strlen(s), 0, &why), 0);
    f.base = event_base_new();
    assert_non_null(f.base);
    f.cl = cluster_new("c", eps, NEP, 1);
    assert_non_null(f.cl);
    /* No timer of a connection fires while a test runs the loop. */
    f.cl->h1.connect_timeout_ms = 3600 * 1000;
    f.cl->h1.idle_timeout_ms = 3600 * 1000;
    reaper_init(&f.reaper, f.base);
    assert_int_equal(upool_init(&f.pool, f.cl, f.base, &f.reaper, 0, NULL), 0);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    upool_dispose(&f->pool);
    reaper_dispose(&f->reaper);
    cluster_unref(f->cl);
    event_base_free(f->base);
    close(f->lfd);
    return 0;
}

/* The proxy's hooks never run here: nothing is exchanged. */
static void t_connect_failed(void *ctx, struct h1_client *c, int timeout)
{
    (void)ctx;
    (void)c;
    (void)timeout;
    fail();
}

static void t_head(void *ctx, struct h1_client *c)
{
    (void)ctx;
    (void)c;
    fail();
}

static void t_done(void *ctx, struct h1_client *c, int ok, int reusable,
                   unsigned flags)
{
    (void)ctx;
    (void)c;
    (void)ok;
    (void)reusable;
    (void)flags;
    fail();
}

static void t_idle_closed(void *ctx, struct h1_client *c)
{
    (void)ctx;
    (void)c;
    fail();
}

static const struct h1_client_hooks hooks = {t_connect_failed, t_head, t_done,
                                             t_idle_closed};

static struct h1_client *connect_ep(struct fx *f, size_t ep)
{
    int wait = -1;
    struct h1_client *c = upool_h1_connect(&f->pool, ep, &hooks, f, &wait);

    assert_non_null(c);
    assert_int_equal(wait, 0);
    assert_int_equal(c->endpoint, ep);
    return c;
}

/* Runs the loop until *flag is set or the pool has nothing deferred. */
static void run_until(struct fx *f, const int *flag)
{
    for (int i = 0; i < 10 && !*flag; i++)
        event_base_loop(f->base, EVLOOP_NONBLOCK);
}

/* A connection put back is taken again for its endpoint only, counted as
 * reused; each connection counts as one of the worker's. */
static void test_put_then_take(void **state)
{
    struct fx *f = *state;
    struct h1_client *c;

    assert_null(upool_take(&f->pool, 0));
    c = connect_ep(f, 0);
    assert_int_equal(f->pool.nconns, 1);
    assert_int_equal(upool_stats(&f->pool)->cx_total, 1);
    upool_put(&f->pool, c);
    assert_int_equal(f->pool.nidle, 1);
    assert_null(upool_take(&f->pool, 1));
    assert_ptr_equal(upool_take(&f->pool, 0), c);
    assert_int_equal(f->pool.nidle, 0);
    assert_int_equal(upool_stats(&f->pool)->cx_reused, 1);
    assert_null(upool_take(&f->pool, 0));
    upool_discard(&f->pool, c);
}

/* The most recently used connection is taken first. */
static void test_take_most_recent_first(void **state)
{
    struct fx *f = *state;
    struct h1_client *a = connect_ep(f, 0), *b = connect_ep(f, 0);

    upool_put(&f->pool, a);
    upool_put(&f->pool, b);
    assert_ptr_equal(upool_take(&f->pool, 0), b);
    assert_ptr_equal(upool_take(&f->pool, 0), a);
    upool_discard(&f->pool, a);
    upool_discard(&f->pool, b);
}

/* A connection that carried max_requests_per_conn requests is closed
 * rather than kept; the close frees its slot on a later loop turn. */
static void test_put_closes_a_used_up_connection(void **state)
{
    struct fx *f = *state;
    struct h1_client *c;
    int never = 0;

    f->cl->max_requests_per_conn = 2;
    c = connect_ep(f, 0);
    c->requests = 2;
    upool_put(&f->pool, c);
    assert_int_equal(f->pool.nidle, 0);
    assert_null(upool_take(&f->pool, 0));
    assert_int_equal(f->pool.nconns, 1);
    run_until(f, &never);
    assert_int_equal(f->pool.nconns, 0);
}

/* At max_connections a worker with a connection of its own waits for it
 * (*wait set, counted as overflow); one with none opens one past the
 * limit, which its close gives back. */
static void test_connect_at_max_connections(void **state)
{
    struct fx *f = *state;
    struct h1_client *c, *over;
    int wait = 0, never = 0;

    f->cl->max_connections = 1;
    c = connect_ep(f, 0);
    assert_int_equal(f->cl->cx_active, 1);
    assert_null(upool_h1_connect(&f->pool, 1, &hooks, f, &wait));
    assert_int_equal(wait, 1);
    assert_int_equal(upool_stats(&f->pool)->cx_overflow, 1);
    assert_int_equal(f->cl->cx_active, 1);
    upool_discard(&f->pool, c);
    run_until(f, &never);
    assert_int_equal(f->cl->cx_active, 0);

    f->cl->cx_active = 1; /* another worker holds the only slot */
    over = connect_ep(f, 1);
    assert_int_equal(f->cl->cx_active, 2);
    assert_int_equal(upool_stats(&f->pool)->cx_overflow, 2);
    upool_discard(&f->pool, over);
    run_until(f, &never);
    assert_int_equal(f->cl->cx_active, 1);
    f->cl->cx_active = 0;
}

/* Waiting requests are bounded by http1MaxPendingRequests and counted;
 * one that ends gives its place back. */
static void test_wait_is_bounded(void **state)
{
    struct fx *f = *state;
    struct upool_waiter a, b;

    f->cl->max_pending = 1;
    assert_int_equal(upool_wait(&f->pool, &a), 0);
    assert_int_equal(upool_wait(&f->pool, &b), -1);
    assert_int_equal(f->cl->rq_waiting, 1);
    assert_int_equal(upool_stats(&f->pool)->rq_pending, 1);
    upool_unwait(&f->pool, &a);
    assert_int_equal(f->cl->rq_waiting, 0);
    assert_int_equal(upool_wait(&f->pool, &b), 0);
    upool_unwait(&f->pool, &b);
    assert_true(LIST_EMPTY(&f->pool.waiters));
}

struct waiter {
    struct upool_waiter w;
    int woken;
};

static void on_wake(struct upool_waiter *w)
{
    ((struct waiter *)w)->woken++;
}

/* A waiting request is woken on a later loop turn, never at once, when a
 * connection of the worker closes or goes idle; it leaves the queue. */
static void test_waiter_woken_by_close_and_by_put(void **state)
{
    struct fx *f = *state;
    struct waiter w;
    struct h1_client *c;

    memset(&w, 0, sizeof(w));
    w.w.wake = on_wake;

    f->cl->max_connections = 1;
    c = connect_ep(f, 0);
    assert_int_equal(upool_wait(&f->pool, &w.w), 0);
    upool_discard(&f->pool, c);
    assert_int_equal(w.woken, 0);
    run_until(f, &w.woken);
    assert_int_equal(w.woken, 1);
    assert_true(LIST_EMPTY(&f->pool.waiters));
    assert_int_equal(f->cl->rq_waiting, 0);

    c = connect_ep(f, 0);
    assert_int_equal(upool_wait(&f->pool, &w.w), 0);
    upool_put(&f->pool, c);
    assert_int_equal(w.woken, 1);
    assert_ptr_equal(upool_take(&f->pool, 0), c);
    upool_discard(&f->pool, c);
    run_until(f, &(int){0});
    assert_int_equal(w.woken, 2);
}

/* Disposing closes idle and closing connections alike, gives their
 * slots back and drops the pool's cluster reference. */
static void test_dispose_closes_everything(void **state)
{
    struct fx *f = *state;
    struct h1_client *a, *b;

    f->cl->max_connections = 10;
    assert_int_equal(f->cl->refs, 2);
    a = connect_ep(f, 0);
    b = connect_ep(f, 1);
    upool_put(&f->pool, a);
    upool_discard(&f->pool, b);
    assert_int_equal(f->cl->cx_active, 2);
    upool_dispose(&f->pool);
    assert_int_equal(f->cl->cx_active, 0);
    assert_int_equal(f->cl->refs, 1);
    upool_dispose(&f->pool); /* a disposed pool is zeroed: a no-op */
}

/* HTTP/2: one connection per endpoint carries many streams; at
 * max_connections a full one is shared rather than a new one opened. */
static void test_h2_shares_connections(void **state)
{
    struct fx *f = *state;
    struct h2_client *c, *d;

    f->cl->max_requests_per_conn = 7;
    c = upool_h2_get(&f->pool, 0);
    assert_non_null(c);
    assert_int_equal(c->max_requests, 7);
    assert_ptr_equal(upool_h2_get(&f->pool, 0), c);
    assert_int_equal(upool_stats(&f->pool)->cx_reused, 1);
    d = upool_h2_get(&f->pool, 1);
    assert_non_null(d);
    assert_ptr_not_equal(d, c);
    assert_int_equal(f->pool.nconns, 2);

    f->cl->max_connections = 2;
    f->cl->cx_active = 2;
    d->requests = d->max_requests; /* no room on d: it needs another */
    assert_ptr_equal(upool_h2_get(&f->pool, 1), d);
    assert_int_equal(upool_stats(&f->pool)->cx_overflow, 1);
    assert_int_equal(f->pool.nconns, 2);
    f->cl->max_connections = 0;
    f->cl->cx_active = 0;
}

/* A tunnel opener standing in for the HBONE client: records the
 * endpoint asked for and makes the conn over an eventfd (never ready). */
struct fake_tunnel {
    struct event_base *base;
    int calls;
    size_t ep;
    int fail;
};

static int fake_open(void *arg, const struct cluster *cl, size_t ep,
                     struct conn *c, void (*on_io)(struct conn *, void *),
                     void *io_arg)
{
    struct fake_tunnel *t = arg;
    int fd;

    (void)cl;
    t->calls++;
    t->ep = ep;
    if (t->fail)
        return -1;
    fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    assert_true(fd >= 0);
    conn_init(c, t->base, fd, on_io, io_arg);
    return 0;
}

/* An endpoint marked HBONE is connected only through the pool's tunnel
 * hook, HTTP/1 and HTTP/2 alike: without a hook, or when the hook fails,
 * there is no connection (never a direct one) and no slot is held; other
 * endpoints connect directly without asking the hook. */
static void test_tunnel_endpoints(void **state)
{
    struct fx *f = *state;
    struct fake_tunnel t = {f->base, 0, 0, 0};
    struct h1_client *c, *d;
    struct h2_client *h;
    int wait = -1;

    f->cl->hbone = calloc(NEP, 1);
    assert_non_null(f->cl->hbone);
    f->cl->hbone[1] = 1;
    assert_null(upool_h1_connect(&f->pool, 1, &hooks, f, &wait));
    assert_int_equal(wait, 0);
    assert_null(upool_h2_get(&f->pool, 1));
    assert_int_equal(f->pool.nconns, 0);
    assert_int_equal(f->cl->cx_active, 0);

    f->pool.tunnel = fake_open;
    f->pool.tunnel_arg = &t;
    t.fail = 1;
    assert_null(upool_h1_connect(&f->pool, 1, &hooks, f, &wait));
    assert_int_equal(t.calls, 1);
    assert_int_equal(f->cl->cx_active, 0);

    t.fail = 0;
    c = upool_h1_connect(&f->pool, 1, &hooks, f, &wait);
    assert_non_null(c);
    assert_int_equal(t.calls, 2);
    assert_int_equal(t.ep, 1);
    assert_int_equal(c->endpoint, 1);
    d = connect_ep(f, 0);
    assert_int_equal(t.calls, 2);
    h = upool_h2_get(&f->pool, 1);
    assert_non_null(h);
    assert_int_equal(t.calls, 3);
    assert_int_equal(f->pool.nconns, 3);
    /* The pool frees them (the loop is not run: the fake tunnel carries
     * nothing). */
    upool_discard(&f->pool, c);
    upool_discard(&f->pool, d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_then_take, setup, teardown),
        cmocka_unit_test_setup_teardown(test_take_most_recent_first, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_put_closes_a_used_up_connection,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_connect_at_max_connections, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_wait_is_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waiter_woken_by_close_and_by_put,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_dispose_closes_everything, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tunnel_endpoints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_h2_shares_connections, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
