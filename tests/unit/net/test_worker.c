/*
 * Unit tests of src/net/worker.c.
 *
 * A real worker thread runs its own loop; the test's thread plays the main
 * thread: its event_base serves the queue the worker reports to. Because
 * the proxies run on the worker's thread, the test's thread can be the
 * client and the upstream with blocking I/O, each wait bounded by poll()
 * with a deadline. Loopback only.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include <event2/event.h>

#include "core/addr.h"
#include "core/clock.h"
#include "core/log.h"
#include "event/mq.h"
#include "proxy/stats.h"
#include "net/sock.h"
#include "net/plistener.h"
#include "compile/lower.h"
#include "config/bootstrap.h"
#include "proxy/l4_listener.h"
#include "net/worker.h"

#define DEADLINE_MS 5000
#define TICK_MS 10
#define MAX_FDS 32
#define MAX_EVENTS 16
#define WORKER_ID 2

struct fx {
    struct event_base *base; /* the "main" loop */
    struct event *tick;
    struct mq *mq;
    struct worker w;
    int inited;
    enum worker_event events[MAX_EVENTS];
    int nevents;
    int bad_worker_id;
    int lfd; /* the listener the worker serves (not owned by it) */
    struct addr laddr;
    int ulfd[2]; /* two upstreams, to tell confs apart */
    struct addr uaddr[2];
    struct stats_block *st[2];
    struct l4_listener_conf *conf[2]; /* the test's references */
    int fds[MAX_FDS];
};

/* ---- fds and sockets ----------------------------------------------------- */

static void fx_track(struct fx *f, int fd)
{
    for (int i = 0; i < MAX_FDS; i++) {
        if (f->fds[i] < 0) {
            f->fds[i] = fd;
            return;
        }
    }
    fail_msg("too many fds");
}

static void fx_close(struct fx *f, int fd)
{
    for (int i = 0; i < MAX_FDS; i++) {
        if (f->fds[i] == fd) {
            f->fds[i] = -1;
            close(fd);
            return;
        }
    }
    fail_msg("closing an untracked fd %d", fd);
}

static int listen_any(struct fx *f, struct addr *out)
{
    struct addr a;
    const char *why = NULL;
    char *err = NULL;
    int fd;

    assert_int_equal(addr_parse(&a, "127.0.0.1:0", 11, 1, &why), 0);
    fd = sock_listen(&a, 16, 0, &err);
    if (fd < 0)
        fail_msg("sock_listen: %s", err ? err : "?");
    fx_track(f, fd);
    assert_int_equal(sock_local_addr(fd, out), 0);
    return fd;
}

/* poll_for() waits for ev on fd, at most until the deadline; 1 if ready. */
static int poll_for(int fd, short ev, int ms)
{
    uint64_t deadline = clock_ms() + (uint64_t)ms;

    for (;;) {
        struct pollfd p = {fd, ev, 0};
        uint64_t now = clock_ms();
        int left = now >= deadline ? 0 : (int)(deadline - now);
        int n = poll(&p, 1, left);

        if (n > 0)
            return 1;
        if (n == 0)
            return 0;
        if (errno != EINTR)
            return 0;
    }
}

/* A blocking client connected to the worker's listener. */
static int client_connect(struct fx *f)
{
    struct timeval tv = {DEADLINE_MS / 1000, 0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    fx_track(f, fd);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)),
                     0);
    assert_int_equal(
        connect(fd, (const struct sockaddr *)&f->laddr.ss, f->laddr.len), 0);
    return fd;
}

/* The upstream end of a session the worker opens to upstream u. */
static int upstream_accept(struct fx *f, int u)
{
    int fd;

    if (!poll_for(f->ulfd[u], POLLIN, DEADLINE_MS))
        fail_msg("the worker did not connect to upstream %d", u);
    fd = accept4(f->ulfd[u], NULL, NULL, SOCK_CLOEXEC);
    assert_true(fd >= 0);
    fx_track(f, fd);
    return fd;
}

static void send_str(int fd, const char *s)
{
    size_t n = strlen(s);

    assert_int_equal(send(fd, s, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void recv_str(int fd, const char *want)
{
    char got[256];
    size_t n = strlen(want), off = 0;

    assert_true(n < sizeof(got));
    while (off < n) {
        ssize_t r;

        if (!poll_for(fd, POLLIN, DEADLINE_MS))
            fail_msg("timed out waiting for \"%s\"", want);
        r = recv(fd, got + off, n - off, 0);
        if (r <= 0)
            fail_msg("connection ended waiting for \"%s\"", want);
        off += (size_t)r;
    }
    assert_memory_equal(got, want, n);
}

static void recv_eof(int fd)
{
    char c;

    if (!poll_for(fd, POLLIN, DEADLINE_MS))
        fail_msg("timed out waiting for EOF");
    assert_int_equal(recv(fd, &c, 1, 0), 0);
}

/* A message each way through an established session. */
static void exchange(int client, int up, const char *tag)
{
    char a[64], b[64];

    snprintf(a, sizeof(a), "%s: to upstream", tag);
    snprintf(b, sizeof(b), "%s: to client", tag);
    send_str(client, a);
    recv_str(up, a);
    send_str(up, b);
    recv_str(client, b);
}

/* A client goes away and the upstream follows: the session ends. */
static void end_session(struct fx *f, int client, int up)
{
    fx_close(f, client);
    recv_eof(up);
    fx_close(f, up);
}

/* ---- the main loop ------------------------------------------------------- */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

static void on_worker_event(void *arg, int worker, enum worker_event ev)
{
    struct fx *f = arg;

    if (worker != f->w.id)
        f->bad_worker_id = 1;
    if (f->nevents < MAX_EVENTS)
        f->events[f->nevents] = ev;
    f->nevents++;
}

/* wait_events() turns the main loop until n events in all have arrived. */
static void wait_events(struct fx *f, int n)
{
    uint64_t deadline = clock_ms() + DEADLINE_MS;

    while (f->nevents < n) {
        if (clock_ms() > deadline)
            fail_msg("%d worker events, expected %d", f->nevents, n);
        event_base_loop(f->base, EVLOOP_ONCE);
    }
    assert_int_equal(f->nevents, n);
    assert_false(f->bad_worker_id);
}

/* refs_become() waits until conf's reference count is n (the worker drops
 * its references on its own thread). */
static void refs_become(struct l4_listener_conf *c, int n)
{
    uint64_t deadline = clock_ms() + DEADLINE_MS;

    while (__atomic_load_n(&c->refs, __ATOMIC_ACQUIRE) != n) {
        if (clock_ms() > deadline)
            fail_msg("conf %s: %d references, expected %d", c->name,
                     __atomic_load_n(&c->refs, __ATOMIC_ACQUIRE), n);
        poll(NULL, 0, 1); /* a bounded poll of another thread's state */
    }
}

static struct proxy_counters counters(const struct fx *f, int i)
{
    struct proxy_counters c;

    stats_sum(f->st[i], &c);
    return c;
}

/* closed_becomes() waits for a counter the worker thread updates. */
static void closed_becomes(struct fx *f, int i, uint64_t n)
{
    uint64_t deadline = clock_ms() + DEADLINE_MS;

    while (counters(f, i).listener.closed != n) {
        if (clock_ms() > deadline)
            fail_msg("listener %d: %" PRIu64 " closed, expected %" PRIu64, i,
                     counters(f, i).listener.closed, n);
        poll(NULL, 0, 1);
    }
}

/* apply() hands the worker one slot (conf i on the listener) and waits
 * until it is in effect. */
static void apply(struct fx *f, int i)
{
    struct worker_set *set = malloc(sizeof(*set) + sizeof(set->v[0]));
    int before = f->nevents;

    assert_non_null(set);
    set->n = 1;
    set->v[0].ops = &l4_listener_ops;
    set->v[0].conf = f->conf[i];
    set->v[0].name = f->conf[i]->name;
    set->v[0].fd = f->lfd;
    set->v[0].replaces = NULL;
    assert_int_equal(worker_apply(&f->w, set), 0);
    wait_events(f, before + 1);
    assert_int_equal(f->events[before], WORKER_APPLIED);
}

/* ---- fixture ------------------------------------------------------------- */

/* A bootstrap tcp listener to up, as it runs: an L4 listener's conf. */
static struct l4_listener_conf *
tcp_conf(const char *name, const struct addr *up, struct stats_block *st)
{
    char text[512], as[ADDR_STRLEN];
    struct bootstrap *bs;
    struct l4_listener_conf *c;
    char *err = NULL;

    snprintf(text, sizeof(text),
             "listeners:\n"
             "  - name: %s\n"
             "    address: 127.0.0.1:1\n"
             "    upstreams: [\"%s\"]\n",
             name, addr_format(up, as, sizeof(as)));
    bs = bootstrap_parse(text, strlen(text), "b.yaml", &err);
    if (bs == NULL) {
        free(err);
        return NULL;
    }
    c = lower_tcp_listener(bs, bootstrap_listener_at(bs, 0), st, &err);
    free(err);
    bootstrap_free(bs);
    return c;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct timeval tv = {0, TICK_MS * 1000};
    struct worker_hooks hooks;
    const char *names[2] = {"a", "b"};

    if (f == NULL)
        return -1;
    *state = f;
    for (int i = 0; i < MAX_FDS; i++)
        f->fds[i] = -1;
    f->base = event_base_new();
    if (f->base == NULL)
        return -1;
    f->tick = event_new(f->base, -1, EV_PERSIST, on_tick, NULL);
    f->mq = mq_new(f->base);
    if (f->tick == NULL || f->mq == NULL || event_add(f->tick, &tv) < 0)
        return -1;
    f->lfd = listen_any(f, &f->laddr);
    for (int i = 0; i < 2; i++) {
        f->ulfd[i] = listen_any(f, &f->uaddr[i]);
        /* One shard per worker; this worker is number WORKER_ID. */
        f->st[i] = proxy_stats_new(names[i], WORKER_ID + 1);
        if (f->st[i] == NULL)
            return -1;
        f->conf[i] = tcp_conf(names[i], &f->uaddr[i], f->st[i]);
        if (f->conf[i] == NULL)
            return -1;
        f->conf[i]->relay.access_log = 0;
    }
    hooks.main = f->mq;
    hooks.event = on_worker_event;
    hooks.arg = f;
    if (worker_init(&f->w, WORKER_ID, &hooks) < 0)
        return -1;
    f->inited = 1;
    if (worker_start(&f->w) < 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    if (f->inited) {
        worker_stop(&f->w);
        worker_dispose(&f->w);
    }
    /* Reports the worker posted last are delivered, so none leak. */
    if (f->mq != NULL) {
        mq_drain(f->mq);
        mq_free(f->mq);
    }
    for (int i = 0; i < 2; i++) {
        l4_listener_conf_unref(f->conf[i]);
        stats_block_unref(f->st[i]);
    }
    for (int i = 0; i < MAX_FDS; i++)
        if (f->fds[i] >= 0)
            close(f->fds[i]);
    if (f->tick != NULL)
        event_free(f->tick);
    if (f->base != NULL)
        event_base_free(f->base);
    free(f);
    return 0;
}

/* ---- tests --------------------------------------------------------------- */

static void test_init_dispose_without_start(void **state)
{
    struct fx *f = *state;
    struct worker w;
    struct worker_hooks hooks = {f->mq, on_worker_event, f};

    assert_int_equal(worker_init(&w, 7, &hooks), 0);
    assert_int_equal(w.id, 7);
    assert_false(w.running);
    worker_stop(&w); /* not started: nothing to join */
    worker_dispose(&w);
    worker_dispose(&w); /* disposed twice is harmless */
}

static void test_apply_then_proxy(void **state)
{
    struct fx *f = *state;
    int c, u;

    assert_true(f->w.running);
    apply(f, 0);
    /* The worker's proxy took its own reference. */
    assert_int_equal(__atomic_load_n(&f->conf[0]->refs, __ATOMIC_ACQUIRE), 2);
    c = client_connect(f);
    u = upstream_accept(f, 0);
    exchange(c, u, "one");
    /* Counted in the worker's own shard only. */
    for (int i = 0; i <= WORKER_ID; i++)
        assert_int_equal(
            STAT_GET(&proxy_counters(f->st[0], i)->listener, accepted),
            i == WORKER_ID ? 1 : 0);
    end_session(f, c, u);
    closed_becomes(f, 0, 1);
    assert_int_equal(counters(f, 0).listener.accepted, 1);
    assert_int_equal(f->nevents, 1);
}

static void test_apply_same_set_keeps_proxy(void **state)
{
    struct fx *f = *state;
    int c, u;

    apply(f, 0);
    c = client_connect(f);
    u = upstream_accept(f, 0);
    exchange(c, u, "before");
    /* Same conf, same socket: the running proxy stays; a replacement
     * would hold a third reference while the old one drains. */
    apply(f, 0);
    assert_int_equal(__atomic_load_n(&f->conf[0]->refs, __ATOMIC_ACQUIRE), 2);
    exchange(c, u, "after");
    end_session(f, c, u);
    closed_becomes(f, 0, 1);
}

static void test_reload_retires_old_proxy(void **state)
{
    struct fx *f = *state;
    struct pollfd none;
    int c1, u1, c2, u2;

    apply(f, 0);
    c1 = client_connect(f);
    u1 = upstream_accept(f, 0);
    exchange(c1, u1, "old");

    /* A new conf for the same socket: new connections go to conf b. */
    apply(f, 1);
    assert_int_equal(__atomic_load_n(&f->conf[1]->refs, __ATOMIC_ACQUIRE), 2);
    c2 = client_connect(f);
    u2 = upstream_accept(f, 1);
    exchange(c2, u2, "new");
    none.fd = f->ulfd[0];
    none.events = POLLIN;
    none.revents = 0;
    assert_int_equal(poll(&none, 1, 0), 0); /* nothing went to upstream a */
    assert_int_equal(counters(f, 0).listener.accepted, 1);
    assert_int_equal(counters(f, 1).listener.accepted, 1);

    /* The retired proxy's session still works both ways. */
    assert_int_equal(__atomic_load_n(&f->conf[0]->refs, __ATOMIC_ACQUIRE), 2);
    exchange(c1, u1, "old again");

    /* Its end lets the retired proxy go, with its conf reference. */
    end_session(f, c1, u1);
    closed_becomes(f, 0, 1);
    refs_become(f->conf[0], 1);
    /* The new one is untouched. */
    exchange(c2, u2, "new again");
    assert_int_equal(__atomic_load_n(&f->conf[1]->refs, __ATOMIC_ACQUIRE), 2);
    end_session(f, c2, u2);
    closed_becomes(f, 1, 1);
    assert_int_equal(f->nevents, 2);
}

static void test_drain_reports_stop_then_idle(void **state)
{
    struct fx *f = *state;
    int c, u, late, taken;

    apply(f, 0);
    c = client_connect(f);
    u = upstream_accept(f, 0);
    exchange(c, u, "x");

    assert_int_equal(worker_drain(&f->w), 0);
    wait_events(f, 2);
    assert_int_equal(f->events[1], WORKER_STOPPED_ACCEPT);

    /* Not idle while the session is open, and it still relays. */
    exchange(c, u, "draining");
    for (int i = 0; i < 5; i++)
        event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_int_equal(f->nevents, 2);

    /* Nobody accepts any more: a new connection stays in the backlog,
     * where the test can take it itself. */
    late = client_connect(f);
    assert_true(poll_for(f->lfd, POLLIN, DEADLINE_MS));
    taken = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(taken >= 0);
    fx_track(f, taken);
    assert_int_equal(counters(f, 0).listener.accepted, 1);
    (void)late;

    /* A reload during the drain changes nothing but is acknowledged. */
    apply(f, 1);
    assert_int_equal(__atomic_load_n(&f->conf[1]->refs, __ATOMIC_ACQUIRE), 1);

    /* The last session ends: the worker is idle. */
    end_session(f, c, u);
    wait_events(f, 4);
    assert_int_equal(f->events[3], WORKER_IDLE);
    refs_become(f->conf[0], 1);
    assert_int_equal(counters(f, 0).listener.closed, 1);

    /* A second drain is a no-op. */
    assert_int_equal(worker_drain(&f->w), 0);
    worker_stop(&f->w);
    mq_drain(f->mq);
    assert_int_equal(f->nevents, 4);
}

static void test_drain_without_sessions(void **state)
{
    struct fx *f = *state;

    apply(f, 0);
    assert_int_equal(worker_drain(&f->w), 0);
    wait_events(f, 3);
    assert_int_equal(f->events[1], WORKER_STOPPED_ACCEPT);
    assert_int_equal(f->events[2], WORKER_IDLE);
    refs_become(f->conf[0], 1);
}

/* The watchdog's question: a ping is answered from the worker's own loop,
 * once per ping, during a drain too. */
static void test_ping_is_answered_alive(void **state)
{
    struct fx *f = *state;

    assert_int_equal(worker_ping(&f->w), 0);
    wait_events(f, 1);
    assert_int_equal(f->events[0], WORKER_ALIVE);
    assert_int_equal(worker_drain(&f->w), 0);
    assert_int_equal(worker_ping(&f->w), 0);
    wait_events(f, 4);
    assert_int_equal(f->events[1], WORKER_STOPPED_ACCEPT);
    assert_int_equal(f->events[2], WORKER_IDLE);
    assert_int_equal(f->events[3], WORKER_ALIVE);
}

static void test_drain_before_any_apply(void **state)
{
    struct fx *f = *state;

    assert_int_equal(worker_drain(&f->w), 0);
    wait_events(f, 2);
    assert_int_equal(f->events[0], WORKER_STOPPED_ACCEPT);
    assert_int_equal(f->events[1], WORKER_IDLE);
}

static struct plistener *start_fails(struct event_base *base,
                                     struct reaper *reaper, int worker, int fd,
                                     void *conf, plistener_idle_fn on_idle,
                                     void *arg)
{
    (void)base;
    (void)reaper;
    (void)worker;
    (void)fd;
    (void)conf;
    (void)on_idle;
    (void)arg;
    return NULL;
}

static void test_apply_skips_listener_that_cannot_start(void **state)
{
    static const struct plistener_ops broken = {
        .kind = PLISTENER_HTTP, .name = "broken", .start = start_fails};
    struct fx *f = *state;
    struct worker_set *set = malloc(sizeof(*set) + 2 * sizeof(set->v[0]));
    int c, u;

    assert_non_null(set);
    set->n = 2;
    set->v[0].ops = &broken;
    set->v[0].conf = f->conf[1];
    set->v[0].name = "broken";
    set->v[0].fd = f->ulfd[1];
    set->v[0].replaces = NULL;
    set->v[1].ops = &l4_listener_ops;
    set->v[1].conf = f->conf[0];
    set->v[1].name = f->conf[0]->name;
    set->v[1].fd = f->lfd;
    set->v[1].replaces = NULL;
    assert_int_equal(worker_apply(&f->w, set), 0);
    wait_events(f, 1);
    assert_int_equal(f->events[0], WORKER_APPLIED);
    /* The other listener runs. */
    c = client_connect(f);
    u = upstream_accept(f, 0);
    exchange(c, u, "despite the broken one");
    assert_int_equal(__atomic_load_n(&f->conf[1]->refs, __ATOMIC_ACQUIRE), 1);
}

static void test_stop_closes_sessions(void **state)
{
    struct fx *f = *state;
    int c1, u1, c2, u2;

    apply(f, 0);
    c1 = client_connect(f);
    u1 = upstream_accept(f, 0);
    exchange(c1, u1, "one");
    /* Also a retired proxy with a session open. */
    apply(f, 1);
    c2 = client_connect(f);
    u2 = upstream_accept(f, 1);
    exchange(c2, u2, "two");

    /* Stopping joins the thread and closes everything still open. */
    worker_stop(&f->w);
    assert_false(f->w.running);
    assert_int_equal(__atomic_load_n(&f->conf[0]->refs, __ATOMIC_ACQUIRE), 1);
    assert_int_equal(__atomic_load_n(&f->conf[1]->refs, __ATOMIC_ACQUIRE), 1);
    assert_int_equal(counters(f, 0).listener.closed, 1);
    assert_int_equal(counters(f, 1).listener.closed, 1);
    recv_eof(c1);
    recv_eof(u1);
    recv_eof(c2);
    recv_eof(u2);
    worker_stop(&f->w); /* twice is harmless */
    worker_dispose(&f->w);
    f->inited = 0;
    /* The listening socket was never the worker's. */
    assert_true(fcntl(f->lfd, F_GETFD) >= 0);
}

/* A proxy kind that records what the worker asks of it (on the worker's
 * thread; read by the test once the worker has reported WORKER_APPLIED,
 * which the queue orders after it). */
struct rec_proxy {
    struct plistener pl;
    plistener_idle_fn on_idle;
    void *arg;
};

static const struct plistener_ops rec_ops;

static struct {
    int inherits;
    void *conf, *prev_conf;
} rec;

static struct plistener *rec_start(struct event_base *base,
                                   struct reaper *reaper, int worker, int fd,
                                   void *conf, plistener_idle_fn on_idle,
                                   void *arg)
{
    struct rec_proxy *p = calloc(1, sizeof(*p));

    (void)base;
    (void)reaper;
    (void)worker;
    if (p == NULL)
        return NULL;
    p->pl.ops = &rec_ops;
    p->pl.conf = conf;
    p->pl.fd = fd;
    LIST_INIT(&p->pl.link);
    p->on_idle = on_idle;
    p->arg = arg;
    return &p->pl;
}

static void rec_stop(struct plistener *l)
{
    struct rec_proxy *p = (struct rec_proxy *)(void *)l;

    p->on_idle(l, p->arg); /* nothing in flight */
}

static void rec_free(struct plistener *l)
{
    list_del(&l->link);
    free(l);
}

static void rec_inherit(struct plistener *l, struct plistener *prev)
{
    rec.inherits++;
    rec.conf = l->conf;
    rec.prev_conf = prev->conf;
}

static const struct plistener_ops rec_ops = {
    .kind = PLISTENER_L4,
    .name = "rec",
    .start = rec_start,
    .stop_accepting = rec_stop,
    .free = rec_free,
    .inherit = rec_inherit,
};

static void apply_rec(struct fx *f, const struct plistener_ops *ops, void *conf,
                      int fd, const void *replaces)
{
    struct worker_set *set = malloc(sizeof(*set) + sizeof(set->v[0]));
    int before = f->nevents;

    assert_non_null(set);
    set->n = 1;
    set->v[0].ops = ops;
    set->v[0].conf = conf;
    set->v[0].name = "rec";
    set->v[0].fd = fd;
    set->v[0].replaces = replaces;
    assert_int_equal(worker_apply(&f->w, set), 0);
    wait_events(f, before + 1);
    assert_int_equal(f->events[before], WORKER_APPLIED);
}

/* A proxy started on the socket of the one its slot says it replaces, of
 * the same kind, is offered that one (inherit) before it is retired; not
 * otherwise. */
static void test_replacement_inherits_from_predecessor(void **state)
{
    struct fx *f = *state;
    static int a, b, c;

    memset(&rec, 0, sizeof(rec));
    apply_rec(f, &rec_ops, &a, f->lfd, NULL);
    assert_int_equal(rec.inherits, 0);
    apply_rec(f, &rec_ops, &b, f->lfd, &a);
    assert_int_equal(rec.inherits, 1);
    assert_ptr_equal(rec.conf, &b);
    assert_ptr_equal(rec.prev_conf, &a);
    /* Kept as it is: nothing to inherit. */
    apply_rec(f, &rec_ops, &b, f->lfd, NULL);
    assert_int_equal(rec.inherits, 1);
    /* Another socket: nothing either. */
    apply_rec(f, &rec_ops, &c, f->ulfd[0], &b);
    assert_int_equal(rec.inherits, 1);
    /* Replacing nothing (an added listener): nothing to take. */
    apply_rec(f, &rec_ops, &a, f->ulfd[0], NULL);
    assert_int_equal(rec.inherits, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_init_dispose_without_start, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_replacement_inherits_from_predecessor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_then_proxy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ping_is_answered_alive, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_apply_same_set_keeps_proxy, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reload_retires_old_proxy, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_drain_reports_stop_then_idle,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain_without_sessions, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_drain_before_any_apply, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_apply_skips_listener_that_cannot_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_closes_sessions, setup,
                                        teardown),
    };
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    int rc;

    signal(SIGPIPE, SIG_IGN);
    log_configure(LOG_DEBUG, LOG_TEXT, devnull >= 0 ? devnull : 2);
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    log_configure(LOG_INFO, LOG_TEXT, 2);
    if (devnull >= 0)
        close(devnull);
    return rc;
}
