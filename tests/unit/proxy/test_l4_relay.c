/*
 * Unit tests of the L4 relay (src/proxy/l4_relay.c), driven through a
 * bootstrap tcp listener as it runs now: lowered (lower_tcp_listener())
 * onto the L4 listener (src/proxy/l4_listener.c) with one tcp route to the
 * cluster of its upstreams.
 *
 * Everything runs on the test's thread: the proxy, its event loop, and the
 * two peers (a client and an upstream server), which are plain non-blocking
 * sockets pumped between turns of the loop. A persistent tick timer keeps
 * event_base_loop(EVLOOP_ONCE) from blocking for long when the proxy has
 * nothing to do but a peer does; every wait is bounded by a deadline that
 * fails the test. Only loopback addresses are used (and, in one test, unix
 * sockets in a private directory).
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include <event2/event.h>
#include <openssl/ssl.h>

#include "core/addr.h"
#include "core/clock.h"
#include "core/log.h"
#include "event/reap.h"
#include "proxy/stats.h"
#include "net/sock.h"
#include "net/conn.h"
#include "compile/lower.h"
#include "config/bootstrap.h"
#include "proxy/l4_listener.h"
#include "proxy/l4_relay.h"
#include "tls/tls.h"
#include "upstream/cluster.h"

#define DEADLINE_MS 5000
#define TICK_MS 10
#define MAX_FDS 32
#define MIB (1024 * 1024)
#define MAX_MEM 8

struct fx {
    struct event_base *base;
    struct reaper reaper; /* the worker's, in the real thing */
    struct event *tick;
    struct stats_block *st;
    struct l4_listener_conf *conf;
    struct l4_listener *p;
    int lfd; /* the proxy's listening socket */
    struct addr laddr;
    int ulfd; /* the upstream's listening socket */
    struct addr uaddr;
    int idle_calls;
    int ticks;
    /* When set, the relay cap is checked after every loop turn. */
    size_t cap;
    int cap_violated;
    int fds[MAX_FDS];           /* closed by teardown if a test fails early */
    void *mem[MAX_MEM];         /* freed by teardown */
    struct rlimit saved_nofile; /* restored by teardown when changed */
    int nofile_changed;
    char dir[64]; /* a directory for unix sockets, removed by teardown */
    /* Relay-level TLS tests: the relay, the contexts, the upstream's SSL,
     * and the counters a cluster would give; freed by teardown. */
    struct l4_relay relay;
    int relay_ok;
    SSL_CTX *cctx, *sctx;
    SSL *ssl;
    struct cluster_counters cstats;
};

/* A test peer: sends out[], then optionally shuts down its write side, and
 * collects what it reads into in[] (or only counts it when in is NULL). */
struct peer {
    int fd;
    const unsigned char *out;
    size_t outlen, sent;
    int shut_after;
    int shut;
    unsigned char *in;
    size_t incap, got;
    size_t want;  /* done once this many bytes arrived */
    int want_eof; /* ... and EOF was read */
    int eof;
    int err; /* errno of a failed read or write */
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

static void parse_addr(struct addr *a, const char *s)
{
    const char *why = NULL;

    assert_int_equal(addr_parse(a, s, strlen(s), 1, &why), 0);
}

/* A listening socket on 127.0.0.1 with a port the kernel chose. */
static int listen_any(struct fx *f, struct addr *out, int backlog)
{
    struct addr a;
    char *err = NULL;
    int fd;

    parse_addr(&a, "127.0.0.1:0");
    fd = sock_listen(&a, backlog, 0, &err);
    if (fd < 0)
        fail_msg("sock_listen: %s", err ? err : "?");
    fx_track(f, fd);
    assert_int_equal(sock_local_addr(fd, out), 0);
    return fd;
}

/* A loopback port that refuses connections: bound, never listening, and
 * kept open so that nobody else can take the port meanwhile. */
static void closed_port(struct fx *f, struct addr *out)
{
    struct addr a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    fx_track(f, fd);
    parse_addr(&a, "127.0.0.1:0");
    assert_int_equal(bind(fd, (const struct sockaddr *)&a.ss, a.len), 0);
    assert_int_equal(sock_local_addr(fd, out), 0);
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    assert_true(fl >= 0);
    assert_int_equal(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
}

/* A client connected to a (the kernel completes the handshake from the
 * listen queue), made non-blocking afterwards. rcvbuf > 0 shrinks the
 * receive buffer before connecting so that the window stays small. */
static int client_connect(struct fx *f, const struct addr *a, int rcvbuf)
{
    int fd = socket(addr_family(a), SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    fx_track(f, fd);
    if (rcvbuf > 0)
        assert_int_equal(
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
    assert_int_equal(connect(fd, (const struct sockaddr *)&a->ss, a->len), 0);
    set_nonblock(fd);
    return fd;
}

/* ---- the loop ------------------------------------------------------------ */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct fx *f = arg;

    (void)fd;
    (void)what;
    f->ticks++;
}

static void on_idle(struct plistener *l, void *arg)
{
    struct fx *f = arg;

    assert_ptr_equal(l, &f->p->pl);
    f->idle_calls++;
}

static struct proxy_counters counters(const struct fx *f)
{
    struct proxy_counters c;

    stats_sum(f->st, &c);
    return c;
}

static void check_cap(struct fx *f)
{
    struct proxy_counters c = counters(f);

    if (f->cap == 0)
        return;
    if (c.relay.upstream_bytes_in - c.relay.bytes_out > f->cap ||
        c.relay.bytes_in - c.relay.upstream_bytes_out > f->cap)
        f->cap_violated = 1;
}

typedef int (*cond_fn)(struct fx *f, void *arg);

/* Turns the loop until cond holds; 0 when the deadline passed first. */
static int run_until(struct fx *f, cond_fn cond, void *arg)
{
    uint64_t deadline = clock_ms() + DEADLINE_MS;

    for (;;) {
        if (cond(f, arg))
            return 1;
        if (clock_ms() > deadline)
            return 0;
        event_base_loop(f->base, EVLOOP_ONCE);
        check_cap(f);
    }
}

/* Turns the loop n times without waiting. EVLOOP_NONBLOCK alone would
 * keep looping while any event stays active; with EVLOOP_ONCE it returns. */
static void run_turns(struct fx *f, int n)
{
    for (int i = 0; i < n; i++) {
        event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        check_cap(f);
    }
}

struct acc {
    int lfd;
    int fd;
};

static int cond_accept(struct fx *f, void *arg)
{
    struct acc *a = arg;

    (void)f;
    a->fd = accept4(a->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    return a->fd >= 0;
}

/* The upstream side of the next session the proxy opens. */
static int upstream_accept(struct fx *f)
{
    struct acc a = {f->ulfd, -1};

    if (!run_until(f, cond_accept, &a))
        fail_msg("the proxy did not connect to the upstream");
    fx_track(f, a.fd);
    return a.fd;
}

static int cond_closed(struct fx *f, void *arg)
{
    return counters(f).listener.closed >= *(const uint64_t *)arg;
}

static void wait_closed(struct fx *f, uint64_t n)
{
    if (!run_until(f, cond_closed, &n))
        fail_msg("closed sessions: %" PRIu64 ", expected %" PRIu64,
                 counters(f).listener.closed, n);
}

static int cond_idle_called(struct fx *f, void *arg)
{
    (void)arg;
    return f->idle_calls > 0;
}

/* ---- peers --------------------------------------------------------------- */

static void peer_init(struct peer *pe, int fd)
{
    memset(pe, 0, sizeof(*pe));
    pe->fd = fd;
}

static int io_again(void)
{
    return errno == EAGAIN || errno == EWOULDBLOCK;
}

static void peer_pump(struct peer *pe)
{
    while (!pe->err && pe->sent < pe->outlen) {
        ssize_t n = send(pe->fd, pe->out + pe->sent, pe->outlen - pe->sent,
                         MSG_NOSIGNAL);
        if (n > 0)
            pe->sent += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else if (n < 0 && io_again())
            break;
        else
            pe->err = errno;
    }
    if (!pe->err && pe->shut_after && !pe->shut && pe->sent == pe->outlen) {
        if (shutdown(pe->fd, SHUT_WR) < 0)
            pe->err = errno;
        pe->shut = 1;
    }
    while (!pe->err && !pe->eof) {
        unsigned char scratch[16384];
        unsigned char *dst = scratch;
        size_t room = sizeof(scratch);
        ssize_t n;

        if (pe->in != NULL) {
            /* One byte past the capacity would be an overflow: reading
             * into scratch then still counts it. */
            if (pe->got < pe->incap) {
                dst = pe->in + pe->got;
                room = pe->incap - pe->got;
            }
        }
        n = read(pe->fd, dst, room);
        if (n > 0)
            pe->got += (size_t)n;
        else if (n == 0)
            pe->eof = 1;
        else if (errno == EINTR)
            continue;
        else if (io_again())
            break;
        else
            pe->err = errno;
    }
}

static int peer_done(const struct peer *pe)
{
    return pe->err != 0 ||
           (pe->sent == pe->outlen && (!pe->shut_after || pe->shut) &&
            pe->got >= pe->want && (!pe->want_eof || pe->eof));
}

struct peers {
    struct peer *v[4];
    int n;
};

static int cond_peers(struct fx *f, void *arg)
{
    struct peers *ps = arg;
    int done = 1;

    (void)f;
    for (int i = 0; i < ps->n; i++) {
        peer_pump(ps->v[i]);
        done &= peer_done(ps->v[i]);
    }
    return done;
}

static void pump(struct fx *f, struct peer *a, struct peer *b)
{
    struct peers ps = {{a, b}, b != NULL ? 2 : 1};

    if (!run_until(f, cond_peers, &ps))
        fail_msg("peers stuck: a sent %zu/%zu got %zu/%zu eof %d; "
                 "b sent %zu/%zu got %zu/%zu eof %d",
                 a->sent, a->outlen, a->got, a->want, a->eof, b ? b->sent : 0,
                 b ? b->outlen : 0, b ? b->got : 0, b ? b->want : 0,
                 b ? b->eof : 0);
    assert_int_equal(a->err, 0);
    if (b != NULL)
        assert_int_equal(b->err, 0);
}

/* Sends msg from one end and checks it arrives intact at the other. */
static void relay_msg(struct fx *f, int from, int to, const char *msg)
{
    struct peer a, b;
    char got[256];
    size_t n = strlen(msg);

    assert_true(n < sizeof(got));
    peer_init(&a, from);
    a.out = (const unsigned char *)msg;
    a.outlen = n;
    peer_init(&b, to);
    b.in = (unsigned char *)got;
    b.incap = sizeof(got);
    b.want = n;
    pump(f, &a, &b);
    assert_int_equal(b.got, n);
    assert_memory_equal(got, msg, n);
}

/* Both ends of a session must read EOF (optionally closing one first). */
static void expect_eof(struct fx *f, int fd1, int fd2)
{
    struct peer a, b;

    peer_init(&a, fd1);
    a.want_eof = 1;
    peer_init(&b, fd2);
    b.want_eof = 1;
    pump(f, &a, fd2 >= 0 ? &b : NULL);
    assert_int_equal(a.got, 0);
    assert_int_equal(b.got, 0);
}

/* A byte pattern that does not repeat with any short period, different
 * per direction. */
static unsigned char pat(size_t i, unsigned seed)
{
    uint32_t x = (uint32_t)i * 2654435761u + seed * 40503u;

    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return (unsigned char)x;
}

/* fx_alloc() returns n bytes that live until teardown. */
static void *fx_alloc(struct fx *f, size_t n)
{
    for (int i = 0; i < MAX_MEM; i++) {
        if (f->mem[i] == NULL) {
            f->mem[i] = malloc(n);
            assert_non_null(f->mem[i]);
            return f->mem[i];
        }
    }
    fail_msg("too many allocations");
    return NULL;
}

static unsigned char *pattern(struct fx *f, size_t n, unsigned seed)
{
    unsigned char *p = fx_alloc(f, n);

    for (size_t i = 0; i < n; i++)
        p[i] = pat(i, seed);
    return p;
}

/* ---- fixture ------------------------------------------------------------- */

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct timeval tv = {0, TICK_MS * 1000};

    if (f == NULL)
        return -1;
    for (int i = 0; i < MAX_FDS; i++)
        f->fds[i] = -1;
    f->base = event_base_new();
    if (f->base != NULL)
        reaper_init(&f->reaper, f->base);
    f->tick = event_new(f->base, -1, EV_PERSIST, on_tick, f);
    f->st = proxy_stats_new("t", 1);
    if (f->base == NULL || f->tick == NULL || f->st == NULL ||
        event_add(f->tick, &tv) < 0)
        return -1;
    *state = f;
    f->lfd = listen_any(f, &f->laddr, 16);
    f->ulfd = listen_any(f, &f->uaddr, 16);
    return 0;
}

/* The L4 listener's side of what the bootstrap TCP listener's API was. */
static struct l4_listener *l4_start(struct fx *f)
{
    struct plistener *pl = l4_listener_ops.start(f->base, &f->reaper, 0, f->lfd,
                                                 f->conf, on_idle, f);

    return (struct l4_listener *)(void *)pl;
}

static int l4_accepting(const struct l4_listener *p)
{
    return acceptor_running(&p->acc);
}

static void l4_stop_accepting(struct l4_listener *p)
{
    l4_listener_ops.stop_accepting(&p->pl);
}

static void l4_free(struct l4_listener *p)
{
    l4_listener_ops.free(p != NULL ? &p->pl : NULL);
}

static int teardown(void **state)
{
    struct fx *f = *state;

    if (f->nofile_changed)
        setrlimit(RLIMIT_NOFILE, &f->saved_nofile);
    l4_free(f->p);
    l4_listener_conf_unref(f->conf);
    if (f->relay_ok)
        l4_relay_dispose(&f->relay);
    SSL_free(f->ssl);
    SSL_CTX_free(f->sctx);
    SSL_CTX_free(f->cctx);
    stats_block_unref(f->st);
    for (int i = 0; i < MAX_FDS; i++)
        if (f->fds[i] >= 0)
            close(f->fds[i]);
    for (int i = 0; i < MAX_MEM; i++)
        free(f->mem[i]);
    if (f->dir[0] != '\0') {
        char path[128];
        snprintf(path, sizeof(path), "%s/l", f->dir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/u", f->dir);
        unlink(path);
        rmdir(f->dir);
    }
    if (f->tick != NULL)
        event_free(f->tick);
    reaper_dispose(&f->reaper);
    if (f->base != NULL)
        event_base_free(f->base);
    free(f);
    return 0;
}

/* The conf the next start_proxy() uses; tests adjust fields in between. */
static void make_conf(struct fx *f, const struct addr *ups, size_t n)
{
    char text[2048], as[ADDR_STRLEN];
    size_t len;
    struct bootstrap *bs;
    char *err = NULL;

    len = (size_t)snprintf(text, sizeof(text),
                           "listeners:\n"
                           "  - name: t\n"
                           "    address: 127.0.0.1:1\n"
                           "    upstreams: [");
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len, "%s\"%s\"",
                                i ? ", " : "",
                                addr_format(&ups[i], as, sizeof(as)));
    snprintf(text + len, sizeof(text) - len, "]\n");
    bs = bootstrap_parse(text, strlen(text), "b.yaml", &err);
    if (bs == NULL)
        fail_msg("bootstrap_parse: %s", err ? err : "?");
    f->conf = lower_tcp_listener(bs, bootstrap_listener_at(bs, 0), f->st, &err);
    if (f->conf == NULL)
        fail_msg("lower_tcp_listener: %s", err ? err : "?");
    /* What the relay runs is copied out of the bootstrap. */
    bootstrap_free(bs);
}

static void start_proxy(struct fx *f)
{
    f->p = l4_start(f);
    assert_non_null(f->p);
    assert_true(l4_accepting(f->p));
}

/* A client connected through the proxy and the upstream's end of it. */
static void open_session(struct fx *f, int *client, int *up)
{
    *client = client_connect(f, &f->laddr, 0);
    *up = upstream_accept(f);
}

/* ---- tests --------------------------------------------------------------- */

static void test_conf_defaults_and_refs(void **state)
{
    struct fx *f = *state;

    make_conf(f, &f->uaddr, 1);
    assert_string_equal(f->conf->name, "t");
    assert_int_equal(f->conf->nclusters, 1);
    assert_int_equal(f->conf->clusters[0]->nendpoints, 1);
    assert_true(addr_equal(&f->conf->clusters[0]->endpoints[0], &f->uaddr));
    assert_int_equal(f->conf->relay.connect_timeout_ms, 5000);
    assert_int_equal(f->conf->relay.connect_attempts, 3);
    assert_int_equal(f->conf->relay.buffer_size, 64 * 1024);
    /* The conf holds a stats reference of its own. */
    assert_int_equal(f->st->refs, 2);
    assert_ptr_equal(l4_listener_conf_ref(f->conf), f->conf);
    assert_int_equal(f->conf->refs, 2);
    l4_listener_conf_unref(f->conf);
    assert_int_equal(f->conf->refs, 1);
    /* A proxy takes its own reference and drops it when freed. */
    start_proxy(f);
    assert_int_equal(f->conf->refs, 2);
    l4_free(f->p);
    f->p = NULL;
    assert_int_equal(f->conf->refs, 1);
    l4_listener_conf_unref(NULL);
    l4_free(NULL);
}

static void test_relay_both_ways(void **state)
{
    struct fx *f = *state;
    unsigned char *a2b = pattern(f, MIB, 1), *b2a = pattern(f, MIB, 2);
    unsigned char *at_up = fx_alloc(f, MIB + 1);
    unsigned char *at_client = fx_alloc(f, MIB + 1);
    struct peer c, u;
    struct proxy_counters st;
    int cfd, ufd;

    make_conf(f, &f->uaddr, 1);
    start_proxy(f);
    open_session(f, &cfd, &ufd);

    /* 1 MiB each way at once, both peers reading as they write. */
    peer_init(&c, cfd);
    c.out = a2b;
    c.outlen = MIB;
    c.in = at_client;
    c.incap = MIB + 1;
    c.want = MIB;
    peer_init(&u, ufd);
    u.out = b2a;
    u.outlen = MIB;
    u.in = at_up;
    u.incap = MIB + 1;
    u.want = MIB;
    pump(f, &c, &u);
    assert_int_equal(u.got, MIB);
    assert_int_equal(c.got, MIB);
    assert_memory_equal(at_up, a2b, MIB);
    assert_memory_equal(at_client, b2a, MIB);

    /* The client ends, the upstream sees EOF and ends too. */
    assert_int_equal(shutdown(cfd, SHUT_WR), 0);
    expect_eof(f, ufd, -1);
    fx_close(f, ufd);
    expect_eof(f, cfd, -1);
    wait_closed(f, 1);

    st = counters(f);
    assert_int_equal(st.listener.accepted, 1);
    assert_int_equal(st.listener.closed, 1);
    assert_int_equal(st.relay.bytes_in, MIB);
    assert_int_equal(st.relay.bytes_out, MIB);
    assert_int_equal(st.relay.upstream_bytes_in, MIB);
    assert_int_equal(st.relay.upstream_bytes_out, MIB);
    assert_int_equal(st.relay.connect_failures, 0);
    assert_int_equal(f->p->relay.active, 0);
}

static int cond_open_turns(struct fx *f, void *arg)
{
    int *turns = arg;

    return f->p->relay.active == 1 && --*turns <= 0;
}

static void test_half_close(void **state)
{
    struct fx *f = *state;
    const size_t reply = 200 * 1024;
    unsigned char *data = pattern(f, reply, 3), *got = fx_alloc(f, reply + 1);
    struct peer c, u;
    char buf[16];
    int cfd, ufd, turns = 5;

    make_conf(f, &f->uaddr, 1);
    start_proxy(f);
    open_session(f, &cfd, &ufd);

    /* The client sends a request and half-closes. */
    peer_init(&c, cfd);
    c.out = (const unsigned char *)"ping";
    c.outlen = 4;
    c.shut_after = 1;
    peer_init(&u, ufd);
    u.in = (unsigned char *)buf;
    u.incap = sizeof(buf);
    u.want = 4;
    u.want_eof = 1;
    pump(f, &c, &u);
    /* The FIN reached the upstream after the bytes before it. */
    assert_int_equal(u.got, 4);
    assert_memory_equal(buf, "ping", 4);
    assert_true(u.eof);

    /* The session stays open for the other direction. */
    assert_true(run_until(f, cond_open_turns, &turns));
    assert_int_equal(counters(f).listener.closed, 0);

    /* The upstream answers after the FIN, then closes. */
    peer_init(&u, ufd);
    u.out = data;
    u.outlen = reply;
    u.shut_after = 1;
    peer_init(&c, cfd);
    c.in = got;
    c.incap = reply + 1;
    c.want = reply;
    c.want_eof = 1;
    pump(f, &u, &c);
    assert_int_equal(c.got, reply);
    assert_memory_equal(got, data, reply);
    assert_true(c.eof);

    /* Both directions are finished: the session closes by itself. */
    wait_closed(f, 1);
    assert_int_equal(f->p->relay.active, 0);
    assert_int_equal(counters(f).relay.bytes_in, 4);
    assert_int_equal(counters(f).relay.bytes_out, reply);
}

static void test_half_close_from_upstream(void **state)
{
    struct fx *f = *state;
    const size_t more = 100 * 1024;
    unsigned char *data = pattern(f, more, 5), *got = fx_alloc(f, more + 1);
    struct peer c, u;
    char buf[16];
    int cfd, ufd, turns = 5;

    make_conf(f, &f->uaddr, 1);
    start_proxy(f);
    open_session(f, &cfd, &ufd);

    /* The upstream says goodbye and half-closes first. */
    peer_init(&u, ufd);
    u.out = (const unsigned char *)"bye";
    u.outlen = 3;
    u.shut_after = 1;
    peer_init(&c, cfd);
    c.in = (unsigned char *)buf;
    c.incap = sizeof(buf);
    c.want = 3;
    c.want_eof = 1;
    pump(f, &u, &c);
    assert_int_equal(c.got, 3);
    assert_memory_equal(buf, "bye", 3);
    assert_true(run_until(f, cond_open_turns, &turns));

    /* The client still has things to say, then ends too. */
    peer_init(&c, cfd);
    c.out = data;
    c.outlen = more;
    c.shut_after = 1;
    peer_init(&u, ufd);
    u.in = got;
    u.incap = more + 1;
    u.want = more;
    u.want_eof = 1;
    pump(f, &c, &u);
    assert_int_equal(u.got, more);
    assert_memory_equal(got, data, more);
    wait_closed(f, 1);
    assert_int_equal(counters(f).relay.upstream_bytes_out, more);
}

static void test_backpressure(void **state)
{
    struct fx *f = *state;
    const size_t cap = 4096;
    unsigned char *got;
    struct proxy_counters st;
    struct peer c, u;
    size_t written = 0;
    uint64_t deadline;
    int cfd, ufd, quiet = 0, small = 4096;

    make_conf(f, &f->uaddr, 1);
    f->conf->relay.buffer_size = cap;
    start_proxy(f);
    f->cap = cap;
    cfd = client_connect(f, &f->laddr, small);
    ufd = upstream_accept(f);
    assert_int_equal(
        setsockopt(ufd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);

    /* The upstream writes as fast as it can while the client reads nothing,
     * until its writes block and the proxy makes no more progress. */
    deadline = clock_ms() + DEADLINE_MS;
    while (quiet < 50) {
        struct proxy_counters before = counters(f);
        size_t n = 0;

        for (;;) {
            unsigned char out[4096];
            ssize_t w;

            for (size_t i = 0; i < sizeof(out); i++)
                out[i] = pat(written + n + i, 4);
            w = send(ufd, out, sizeof(out), MSG_NOSIGNAL);
            if (w < 0 && io_again())
                break;
            assert_true(w > 0);
            n += (size_t)w;
        }
        written += n;
        run_turns(f, 1);
        st = counters(f);
        if (n == 0 &&
            st.relay.upstream_bytes_in == before.relay.upstream_bytes_in &&
            st.relay.bytes_out == before.relay.bytes_out)
            quiet++;
        else
            quiet = 0;
        if (clock_ms() > deadline)
            fail_msg("the upstream's writes never blocked (%zu written)",
                     written);
    }
    st = counters(f);
    /* The proxy holds at most one buffer of the stream... */
    assert_false(f->cap_violated);
    assert_true(st.relay.upstream_bytes_in - st.relay.bytes_out <= cap);
    /* ...and stopped reading the upstream: the rest waits in the kernel. */
    assert_true(written > st.relay.upstream_bytes_in);
    assert_true(st.relay.upstream_bytes_in > 0);
    /* Stopped polling it too: with nothing to do, only the tick wakes the
     * loop (a proxy that kept the full side armed would spin). */
    for (int i = 0; i < 3; i++) {
        int ticks = f->ticks;
        event_base_loop(f->base, EVLOOP_ONCE);
        assert_int_equal(f->ticks, ticks + 1);
    }
    assert_int_equal(counters(f).relay.upstream_bytes_in,
                     st.relay.upstream_bytes_in);

    /* Nothing was lost: once the client reads, all of it arrives. */
    got = fx_alloc(f, written + 1);
    peer_init(&u, ufd);
    u.shut_after = 1;
    peer_init(&c, cfd);
    c.shut_after = 1;
    c.in = got;
    c.incap = written + 1;
    c.want = written;
    c.want_eof = 1;
    pump(f, &u, &c);
    assert_int_equal(c.got, written);
    for (size_t i = 0; i < written; i++)
        if (got[i] != pat(i, 4))
            fail_msg("byte %zu differs", i);
    expect_eof(f, ufd, -1);
    wait_closed(f, 1);
    assert_false(f->cap_violated);
    assert_int_equal(counters(f).relay.bytes_out, written);
}

static void test_connect_retry(void **state)
{
    struct fx *f = *state;
    struct addr ups[2];
    struct proxy_counters st;
    int cfd, ufd;

    closed_port(f, &ups[0]);
    ups[1] = f->uaddr;
    make_conf(f, ups, 2);
    start_proxy(f);
    /* The first session starts with the first upstream (round robin from
     * 0), which refuses; the second one takes it. */
    open_session(f, &cfd, &ufd);
    relay_msg(f, cfd, ufd, "hello upstream");
    relay_msg(f, ufd, cfd, "hello client");
    st = counters(f);
    assert_int_equal(st.relay.connect_failures, 1);
    assert_int_equal(st.relay.connect_timeouts, 0);
    assert_int_equal(st.listener.accepted, 1);
    assert_int_equal(st.listener.closed, 0);
}

static void test_all_upstreams_refuse(void **state)
{
    struct fx *f = *state;
    struct addr ups[2];
    struct proxy_counters st;
    int cfd;

    closed_port(f, &ups[0]);
    closed_port(f, &ups[1]);
    make_conf(f, ups, 2);
    f->conf->relay.connect_attempts = 3;
    start_proxy(f);
    cfd = client_connect(f, &f->laddr, 0);
    expect_eof(f, cfd, -1);
    wait_closed(f, 1);
    st = counters(f);
    assert_int_equal(st.relay.connect_failures, 3);
    assert_int_equal(st.relay.connect_timeouts, 0);
    assert_int_equal(st.listener.accepted, 1);
    assert_int_equal(f->p->relay.active, 0);
}

/*
 * An upstream that never answers a SYN, on loopback: a listener with
 * backlog 0 whose one-connection accept queue is filled by a connection
 * nobody accepts. Linux then drops further SYNs, so connects hang. Returns
 * 0 when that could not be arranged.
 */
static int blackhole(struct fx *f, struct addr *out)
{
    int lfd = listen_any(f, out, 0);

    (void)lfd;
    for (int i = 0; i < 8; i++) {
        int in_progress;
        int fd = sock_connect(out, &in_progress);
        struct pollfd pfd;

        assert_true(fd >= 0);
        fx_track(f, fd);
        pfd.fd = fd;
        pfd.events = POLLOUT;
        pfd.revents = 0;
        /* On loopback the handshake is done before connect() returns,
         * so a connection that is not writable now is hanging. */
        if (in_progress && poll(&pfd, 1, 0) == 0)
            return 1;
    }
    return 0;
}

static void test_connect_timeout(void **state)
{
    struct fx *f = *state;
    struct addr ups[1];
    struct proxy_counters st;
    uint64_t t0;
    int cfd;

    if (!blackhole(f, &ups[0])) {
        print_message("cannot make a connect hang on loopback\n");
        skip();
    }
    make_conf(f, ups, 1);
    f->conf->relay.connect_timeout_ms = 100;
    f->conf->relay.connect_attempts = 2;
    start_proxy(f);
    t0 = clock_ms();
    cfd = client_connect(f, &f->laddr, 0);
    expect_eof(f, cfd, -1);
    wait_closed(f, 1);
    st = counters(f);
    assert_int_equal(st.relay.connect_timeouts, 2);
    assert_int_equal(st.relay.connect_failures, 0);
    /* Two attempts of 100 ms each (the coarse clock may lag by a tick). */
    assert_true(clock_ms() - t0 >= 180);
}

static void test_connect_timeout_then_next_upstream(void **state)
{
    struct fx *f = *state;
    struct addr ups[2];
    struct proxy_counters st;
    int cfd, ufd;

    if (!blackhole(f, &ups[0])) {
        print_message("cannot make a connect hang on loopback\n");
        skip();
    }
    ups[1] = f->uaddr;
    make_conf(f, ups, 2);
    f->conf->relay.connect_timeout_ms = 100;
    start_proxy(f);
    /* The bytes sent while connecting wait for the upstream that works. */
    open_session(f, &cfd, &ufd);
    relay_msg(f, cfd, ufd, "after a timeout");
    relay_msg(f, ufd, cfd, "reply");
    st = counters(f);
    assert_int_equal(st.relay.connect_timeouts, 1);
    assert_int_equal(st.relay.connect_failures, 0);
    assert_int_equal(st.listener.closed, 0);
}

static void test_accept_pauses_when_out_of_fds(void **state)
{
    struct fx *f = *state;
    struct rlimit lim;
    int cfd, ufd, next, by_tick = 0;

    make_conf(f, &f->uaddr, 1);
    start_proxy(f);
    cfd = client_connect(f, &f->laddr, 0);

    /* Every descriptor below the lowest free one is in use: with that as
     * the limit, the proxy's accept() fails with EMFILE. */
    next = fcntl(f->lfd, F_DUPFD_CLOEXEC, 0);
    assert_true(next >= 0);
    close(next);
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &f->saved_nofile), 0);
    lim = f->saved_nofile;
    lim.rlim_cur = (rlim_t)next;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    f->nofile_changed = 1;

    /* The proxy tries once, then pauses instead of spinning on a socket
     * that stays readable: further turns are woken by the tick only (the
     * 100 ms resume may account for one). */
    event_base_loop(f->base, EVLOOP_ONCE);
    for (int i = 0; i < 5; i++) {
        int ticks = f->ticks;
        event_base_loop(f->base, EVLOOP_ONCE);
        by_tick += f->ticks > ticks;
    }
    assert_true(by_tick >= 4);
    assert_int_equal(counters(f).listener.accepted, 0);
    assert_true(l4_accepting(f->p));

    /* Descriptors are back: the waiting client is served. */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &f->saved_nofile), 0);
    f->nofile_changed = 0;
    ufd = upstream_accept(f);
    relay_msg(f, cfd, ufd, "late but served");
    assert_int_equal(counters(f).listener.accepted, 1);
}

static void test_unix_sockets(void **state)
{
    struct fx *f = *state;
    char path[128];
    struct proxy_counters st;
    char *err = NULL;
    int cfd, ufd;

    snprintf(f->dir, sizeof(f->dir), "/tmp/strait-tcp-proxy-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    /* Downstream and upstream on unix sockets instead of loopback TCP. */
    snprintf(path, sizeof(path), "unix:%s/l", f->dir);
    parse_addr(&f->laddr, path);
    f->lfd = sock_listen(&f->laddr, 16, 0, &err);
    if (f->lfd < 0)
        fail_msg("sock_listen: %s", err ? err : "?");
    fx_track(f, f->lfd);
    snprintf(path, sizeof(path), "unix:%s/u", f->dir);
    parse_addr(&f->uaddr, path);
    f->ulfd = sock_listen(&f->uaddr, 16, 0, &err);
    if (f->ulfd < 0)
        fail_msg("sock_listen: %s", err ? err : "?");
    fx_track(f, f->ulfd);

    make_conf(f, &f->uaddr, 1);
    start_proxy(f);
    open_session(f, &cfd, &ufd);
    relay_msg(f, cfd, ufd, "over unix");
    relay_msg(f, ufd, cfd, "sockets");
    assert_int_equal(shutdown(cfd, SHUT_WR), 0);
    expect_eof(f, ufd, -1);
    fx_close(f, ufd);
    expect_eof(f, cfd, -1);
    wait_closed(f, 1);
    st = counters(f);
    assert_int_equal(st.relay.bytes_in, 9);
    assert_int_equal(st.relay.bytes_out, 7);
    assert_int_equal(st.relay.connect_failures, 0);
}

static void test_idle_timeout(void **state)
{
    struct fx *f = *state;
    struct proxy_counters st;
    uint64_t t0;
    int cfd, ufd;

    make_conf(f, &f->uaddr, 1);
    f->conf->relay.idle_timeout_ms = 50;
    start_proxy(f);
    open_session(f, &cfd, &ufd);
    relay_msg(f, cfd, ufd, "x");
    t0 = clock_ms();
    /* Nobody says anything more: both ends are closed by the proxy. */
    expect_eof(f, cfd, ufd);
    assert_true(clock_ms() - t0 >= 40);
    wait_closed(f, 1);
    st = counters(f);
    assert_int_equal(st.relay.idle_timeouts, 1);
    assert_int_equal(st.listener.closed, 1);
    assert_int_equal(f->p->relay.active, 0);
}

static void test_activity_defers_idle_timeout(void **state)
{
    struct fx *f = *state;
    uint64_t t0 = clock_ms();
    int cfd, ufd, rounds = 0;

    make_conf(f, &f->uaddr, 1);
    /* Long enough that a busy machine never holds the test between two
     * messages for a whole idle period. */
    f->conf->relay.idle_timeout_ms = 1000;
    start_proxy(f);
    open_session(f, &cfd, &ufd);
    /* Traffic every few ticks for over two idle periods keeps it open. */
    while (clock_ms() - t0 < 2500) {
        relay_msg(f, cfd, ufd, "k");
        rounds++;
        run_turns(f, 1);
        event_base_loop(f->base, EVLOOP_ONCE); /* at most one tick */
    }
    assert_true(rounds > 3);
    assert_int_equal(counters(f).relay.idle_timeouts, 0);
    assert_int_equal(counters(f).listener.closed, 0);
    expect_eof(f, cfd, ufd);
    assert_int_equal(counters(f).relay.idle_timeouts, 1);
}

static void test_stats_accepted_closed(void **state)
{
    struct fx *f = *state;
    int cfd[3], ufd[3];
    struct proxy_counters st;

    make_conf(f, &f->uaddr, 1);
    f->conf->relay.access_log = 0;
    start_proxy(f);
    for (int i = 0; i < 3; i++)
        open_session(f, &cfd[i], &ufd[i]);
    st = counters(f);
    assert_int_equal(st.listener.accepted, 3);
    assert_int_equal(st.listener.closed, 0);
    assert_int_equal(f->p->relay.active, 3);
    for (int i = 0; i < 3; i++) {
        /* A client that goes away: the upstream sees EOF, then goes. */
        fx_close(f, cfd[i]);
        expect_eof(f, ufd[i], -1);
        fx_close(f, ufd[i]);
        wait_closed(f, (uint64_t)i + 1);
        assert_int_equal(f->p->relay.active, 2 - (size_t)i);
    }
    st = counters(f);
    assert_int_equal(st.listener.accepted, 3);
    assert_int_equal(st.listener.closed, 3);
    assert_int_equal(f->idle_calls, 0); /* still accepting */
}

static void test_stop_accepting_idle_after_last_session(void **state)
{
    struct fx *f = *state;
    int cfd, ufd, late;

    make_conf(f, &f->uaddr, 1);
    start_proxy(f);
    open_session(f, &cfd, &ufd);
    l4_stop_accepting(f->p);
    assert_false(l4_accepting(f->p));
    l4_stop_accepting(f->p); /* twice is harmless */
    run_turns(f, 5);
    assert_int_equal(f->idle_calls, 0);

    /* A new client waits in the backlog: nobody takes it. */
    late = client_connect(f, &f->laddr, 0);
    (void)late;
    run_turns(f, 5);
    assert_int_equal(counters(f).listener.accepted, 1);

    /* The open session still relays. */
    relay_msg(f, cfd, ufd, "still here");
    assert_int_equal(f->idle_calls, 0);

    /* Its end makes the proxy idle, once. */
    fx_close(f, cfd);
    expect_eof(f, ufd, -1);
    fx_close(f, ufd);
    assert_true(run_until(f, cond_idle_called, NULL));
    run_turns(f, 5);
    assert_int_equal(f->idle_calls, 1);
    assert_int_equal(counters(f).listener.closed, 1);
    assert_int_equal(counters(f).listener.accepted, 1);
}

static void test_stop_accepting_idle_when_empty(void **state)
{
    struct fx *f = *state;

    make_conf(f, &f->uaddr, 1);
    start_proxy(f);
    l4_stop_accepting(f->p);
    /* Reported on the loop, not from inside the call. */
    assert_int_equal(f->idle_calls, 0);
    assert_true(run_until(f, cond_idle_called, NULL));
    run_turns(f, 5);
    assert_int_equal(f->idle_calls, 1);
}

static void test_free_closes_sessions(void **state)
{
    struct fx *f = *state;
    int cfd[2], ufd[2];
    struct proxy_counters st;

    make_conf(f, &f->uaddr, 1);
    start_proxy(f);
    for (int i = 0; i < 2; i++) {
        open_session(f, &cfd[i], &ufd[i]);
        relay_msg(f, cfd[i], ufd[i], "a");
        relay_msg(f, ufd[i], cfd[i], "b");
    }
    assert_int_equal(f->conf->refs, 2);
    l4_free(f->p);
    f->p = NULL;
    /* Closed at once, counted, and the conf reference dropped. */
    st = counters(f);
    assert_int_equal(st.listener.accepted, 2);
    assert_int_equal(st.listener.closed, 2);
    assert_int_equal(f->conf->refs, 1);
    assert_int_equal(f->idle_calls, 0);
    for (int i = 0; i < 2; i++)
        expect_eof(f, cfd[i], ufd[i]);
    /* The listening socket is not the proxy's: it is still open. */
    assert_true(fcntl(f->lfd, F_GETFD) >= 0);
}

/* ---- TLS originated to the upstream ------------------------------------- */

#define CERTS SRCDIR "/tests/data/istio-samples/certs"
#define FOO_ID "spiffe://trust-domain-foo/ns/foo/sa/foo"

/* The upstream's side over TLS: a server handshake, then like a peer. */
struct tls_peer {
    SSL *ssl;
    int hs_done;
    const unsigned char *out;
    size_t outlen, sent;
    const unsigned char *greeting; /* written right after the handshake */
    size_t greetlen, greeted;
    int shut_after, shut;
    unsigned char *in;
    size_t incap, got, want;
    int want_eof, eof;
    int err; /* SSL_get_error of a failure */
};

static int tls_again(SSL *ssl, int rc)
{
    int e = SSL_get_error(ssl, rc);

    return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE;
}

static void tls_peer_write(struct tls_peer *pe, const unsigned char *p,
                           size_t len, size_t *done)
{
    while (!pe->err && *done < len) {
        size_t n = len - *done > 16384 ? 16384 : len - *done;
        int rc = SSL_write(pe->ssl, p + *done, (int)n);
        if (rc > 0)
            *done += (size_t)rc;
        else if (tls_again(pe->ssl, rc))
            break;
        else
            pe->err = SSL_get_error(pe->ssl, rc);
    }
}

static void tls_peer_pump(struct tls_peer *pe)
{
    if (!pe->hs_done) {
        int rc = SSL_do_handshake(pe->ssl);
        if (rc != 1) {
            if (!tls_again(pe->ssl, rc))
                pe->err = SSL_get_error(pe->ssl, rc);
            return;
        }
        pe->hs_done = 1;
    }
    tls_peer_write(pe, pe->greeting, pe->greetlen, &pe->greeted);
    tls_peer_write(pe, pe->out, pe->outlen, &pe->sent);
    if (!pe->err && pe->shut_after && !pe->shut && pe->sent == pe->outlen) {
        SSL_shutdown(pe->ssl); /* close_notify, then the FIN */
        shutdown(SSL_get_fd(pe->ssl), SHUT_WR);
        pe->shut = 1;
    }
    while (!pe->err && !pe->eof) {
        unsigned char scratch[16384];
        unsigned char *dst = scratch;
        size_t room = sizeof(scratch);
        int rc;

        if (pe->in != NULL && pe->got < pe->incap) {
            dst = pe->in + pe->got;
            room = pe->incap - pe->got;
        }
        rc = SSL_read(pe->ssl, dst, (int)(room > 16384 ? 16384 : room));
        if (rc > 0)
            pe->got += (size_t)rc;
        else if (SSL_get_error(pe->ssl, rc) == SSL_ERROR_ZERO_RETURN)
            pe->eof = 1;
        else if (tls_again(pe->ssl, rc))
            break;
        else
            pe->err = SSL_get_error(pe->ssl, rc);
    }
}

static int tls_peer_done(const struct tls_peer *pe)
{
    return pe->err != 0 ||
           (pe->hs_done && pe->greeted == pe->greetlen &&
            pe->sent == pe->outlen && (!pe->shut_after || pe->shut) &&
            pe->got >= pe->want && (!pe->want_eof || pe->eof));
}

struct mixed {
    struct peer *c;
    struct tls_peer *u;
};

static int cond_mixed(struct fx *f, void *arg)
{
    struct mixed *m = arg;

    (void)f;
    peer_pump(m->c);
    tls_peer_pump(m->u);
    return peer_done(m->c) && tls_peer_done(m->u);
}

static void pump_tls(struct fx *f, struct peer *c, struct tls_peer *u)
{
    struct mixed m = {c, u};

    if (!run_until(f, cond_mixed, &m))
        fail_msg("peers stuck: client sent %zu/%zu got %zu/%zu eof %d; "
                 "upstream handshake %d sent %zu/%zu got %zu/%zu eof %d",
                 c->sent, c->outlen, c->got, c->want, c->eof, u->hs_done,
                 u->sent, u->outlen, u->got, u->want, u->eof);
    assert_int_equal(c->err, 0);
    assert_int_equal(u->err, 0);
}

/* A relay of buffer_size bytes per direction on the fixture's loop. */
static void tls_relay_init(struct fx *f, size_t buffer_size)
{
    struct l4_relay_params rp;

    memset(&rp, 0, sizeof(rp));
    rp.name = "t";
    rp.stats = f->st;
    rp.connect_timeout_ms = 5000;
    rp.connect_attempts = 1;
    rp.idle_timeout_ms = 60000;
    rp.buffer_size = buffer_size;
    assert_int_equal(
        l4_relay_init(&f->relay, f->base, &f->reaper, 0, &rp, NULL, NULL), 0);
    f->relay_ok = 1;
}

/* The client context the cluster would have: the samples' root, and the
 * server identity it must show. */
static SSL_CTX *client_ctx(const char *san)
{
    const char *sans[] = {san};
    struct tls_client_conf tc;
    char *err = NULL;
    SSL_CTX *ctx;

    memset(&tc, 0, sizeof(tc));
    tc.ca_file = CERTS "/root-cert.pem";
    tc.sans = sans;
    tc.nsans = 1;
    ctx = tls_client_ctx_build(&tc, &err);
    if (ctx == NULL)
        fail_msg("client context: %s", err ? err : "?");
    return ctx;
}

/* A session from a fresh client, through the relay, to the upstream
 * listener, originating TLS with cctx; returns the client's fd and the
 * upstream's TLS peer (not handshaken yet). */
static int tls_session(struct fx *f, SSL_CTX *cctx, struct tls_peer *u)
{
    struct l4_relay_meta meta;
    struct conn down;
    int cfd = client_connect(f, &f->laddr, 0);
    int dfd = accept4(f->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    int ufd;

    assert_true(dfd >= 0);
    memset(&meta, 0, sizeof(meta));
    meta.up_tls = cctx;
    meta.up_sni = "foo.example.com";
    meta.cluster_stats = &f->cstats;
    conn_init(&down, f->base, dfd, NULL, NULL);
    l4_relay_start(&f->relay, &down, NULL, 0, &f->uaddr, 1, 0, &meta,
                   clock_ms());
    ufd = upstream_accept(f);
    memset(u, 0, sizeof(*u));
    f->ssl = u->ssl = SSL_new(f->sctx);
    assert_non_null(u->ssl);
    assert_int_equal(SSL_set_fd(u->ssl, ufd), 1);
    SSL_set_accept_state(u->ssl);
    return cfd;
}

static void server_ctx(struct fx *f)
{
    f->sctx = SSL_CTX_new(TLS_method());
    assert_non_null(f->sctx);
    assert_int_equal(SSL_CTX_use_certificate_chain_file(
                         f->sctx, CERTS "/workload-foo-cert.pem"),
                     1);
    assert_int_equal(SSL_CTX_use_PrivateKey_file(f->sctx,
                                                 CERTS "/workload-foo-key.pem",
                                                 SSL_FILETYPE_PEM),
                     1);
}

static int cond_relay_empty(struct fx *f, void *arg)
{
    (void)arg;
    return f->relay.active == 0;
}

/* 1 MiB each way at once through relay buffers of 4 KiB, a quarter of a
 * TLS record: the relay must read the bytes TLS decrypted past a full
 * buffer by itself, as no socket event announces them. Then the client's
 * FIN reaches the upstream as the end of its TLS stream, the upstream's
 * answer after it still arrives, and its close_notify ends the session. */
static void test_tls_upstream_both_ways_small_buffers(void **state)
{
    struct fx *f = *state;
    unsigned char *a2b = pattern(f, MIB, 6), *b2a = pattern(f, MIB, 7);
    unsigned char *at_up = fx_alloc(f, MIB + 1);
    unsigned char *at_client = fx_alloc(f, MIB + 1);
    char buf[16];
    struct peer c;
    struct tls_peer u;
    int cfd;

    tls_relay_init(f, 4096);
    server_ctx(f);
    f->cctx = client_ctx(FOO_ID);
    f->cap = 4096;
    cfd = tls_session(f, f->cctx, &u);

    peer_init(&c, cfd);
    c.out = a2b;
    c.outlen = MIB;
    c.in = at_client;
    c.incap = MIB + 1;
    c.want = MIB;
    u.out = b2a;
    u.outlen = MIB;
    u.in = at_up;
    u.incap = MIB + 1;
    u.want = MIB;
    pump_tls(f, &c, &u);
    assert_int_equal(u.got, MIB);
    assert_int_equal(c.got, MIB);
    assert_memory_equal(at_up, a2b, MIB);
    assert_memory_equal(at_client, b2a, MIB);
    assert_false(f->cap_violated);
    /* The SNI asked for; the handshake counted once on the cluster. */
    assert_string_equal(SSL_get_servername(u.ssl, TLSEXT_NAMETYPE_host_name),
                        "foo.example.com");
    assert_int_equal(f->cstats.cx_total, 1);
    assert_int_equal(f->cstats.cx_connect_fail, 0);

    /* The client half-closes: the upstream reads the end of its stream. */
    peer_init(&c, cfd);
    c.shut_after = 1;
    u.out = NULL;
    u.outlen = u.sent = 0;
    u.in = NULL;
    u.want = 0;
    u.want_eof = 1;
    pump_tls(f, &c, &u);
    assert_true(u.eof);
    assert_int_equal(f->relay.active, 1);

    /* The upstream answers after it, then ends too. */
    u.out = (const unsigned char *)"bye";
    u.outlen = 3;
    u.shut_after = 1;
    peer_init(&c, cfd);
    c.in = (unsigned char *)buf;
    c.incap = sizeof(buf);
    c.want = 3;
    c.want_eof = 1;
    pump_tls(f, &c, &u);
    assert_int_equal(c.got, 3);
    assert_memory_equal(buf, "bye", 3);
    assert_true(run_until(f, cond_relay_empty, NULL));
    assert_int_equal(counters(f).relay.bytes_in, MIB);
    assert_int_equal(counters(f).relay.bytes_out, MIB + 3);
    assert_false(f->cap_violated);
}

/* A server that speaks first: its greeting, written as soon as its
 * handshake is done, reaches a client that sends nothing. */
static void test_tls_upstream_speaks_first(void **state)
{
    struct fx *f = *state;
    char buf[32];
    struct peer c;
    struct tls_peer u;
    int cfd;

    tls_relay_init(f, 4096);
    server_ctx(f);
    f->cctx = client_ctx(FOO_ID);
    cfd = tls_session(f, f->cctx, &u);
    u.greeting = (const unsigned char *)"220 ready\r\n";
    u.greetlen = 11;
    peer_init(&c, cfd);
    c.in = (unsigned char *)buf;
    c.incap = sizeof(buf);
    c.want = 11;
    pump_tls(f, &c, &u);
    assert_memory_equal(buf, "220 ready\r\n", 11);
}

/* A server whose identity is not the one asked for: the handshake is
 * refused, the client's connection closed without a byte, and the
 * failure counted as a failed connect, on the listener and the cluster. */
static void test_tls_upstream_refused(void **state)
{
    struct fx *f = *state;
    struct peer c;
    struct tls_peer u;
    int cfd;

    tls_relay_init(f, 4096);
    server_ctx(f);
    f->cctx = client_ctx("spiffe://trust-domain-foo/ns/foo/sa/nobody");
    cfd = tls_session(f, f->cctx, &u);
    peer_init(&c, cfd);
    c.out = (const unsigned char *)"hello";
    c.outlen = 5;
    c.want_eof = 1;
    /* The upstream's handshake fails when the relay refuses it. */
    u.want_eof = 1;
    {
        struct mixed m = {&c, &u};
        assert_true(run_until(f, cond_mixed, &m) || u.err != 0);
    }
    assert_true(run_until(f, cond_relay_empty, NULL));
    assert_int_equal(c.got, 0);
    assert_int_equal(u.got, 0);
    assert_int_equal(counters(f).relay.connect_failures, 1);
    assert_int_equal(f->cstats.cx_total, 1);
    assert_int_equal(f->cstats.cx_connect_fail, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_conf_defaults_and_refs, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_relay_both_ways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_close_from_upstream, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_backpressure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connect_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_all_upstreams_refuse, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_connect_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connect_timeout_then_next_upstream,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_accept_pauses_when_out_of_fds,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_unix_sockets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_activity_defers_idle_timeout,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_accepted_closed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_stop_accepting_idle_after_last_session, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_accepting_idle_when_empty,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_closes_sessions, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_tls_upstream_both_ways_small_buffers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tls_upstream_speaks_first, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tls_upstream_refused, setup,
                                        teardown),
    };
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    int rc;

    /* The proxy writes to peers that may be gone. */
    signal(SIGPIPE, SIG_IGN);
    /* Access-log and debug lines are formatted (the code runs under the
     * sanitizers) but not shown. */
    log_configure(LOG_DEBUG, LOG_TEXT, devnull >= 0 ? devnull : 2);
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    log_configure(LOG_INFO, LOG_TEXT, 2);
    if (devnull >= 0)
        close(devnull);
    return rc;
}
