#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "net/listener.h"
#include "net/sock.h"
#include "proxy/tcp_proxy.h"

/* Free relay buffers a worker keeps per listener for the next sessions. */
#define POOL_KEEP 32

/*
 * A relayed TCP session. Two bounded buffers carry the two directions; a
 * side is read only while its buffer has room, so a slow reader stops the
 * fast writer through TCP flow control instead of growing memory. A FIN is
 * passed on (shutdown(SHUT_WR)) once the bytes before it are written.
 */
struct tcp_session {
    struct list link;
    struct tcp_proxy *p;
    int dfd;
    int ufd;
    struct event dr, dw, ur, uw, timer;
    unsigned dr_on : 1, dw_on : 1, ur_on : 1, uw_on : 1;
    unsigned connecting : 1, connected : 1;
    unsigned d_eof : 1, u_eof : 1; /* FIN read from that side */
    unsigned u_shut : 1, d_shut : 1; /* FIN passed on to that side */
    unsigned closed : 1;
    int attempts;
    size_t ep; /* index of the upstream tried last */
    struct buf d2u, u2d;
    uint64_t start_ms, last_ms;
    uint64_t bytes_in, bytes_out, up_in, up_out;
    struct sockaddr_storage peer;
    socklen_t peerlen;
    const char *reason;
};

static void session_update(struct tcp_session *s);
static void session_connect(struct tcp_session *s);

static struct listener_counters *shard(const struct tcp_proxy *p)
{
    return &p->conf->stats->w[p->worker];
}

struct tcp_proxy_conf *tcp_proxy_conf_new(const char *name,
                                          const struct addr *upstreams,
                                          size_t nupstreams,
                                          struct listener_stats *stats)
{
    struct tcp_proxy_conf *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->refs = 1;
    c->name = strdup(name);
    c->upstreams = calloc(nupstreams ? nupstreams : 1, sizeof(*c->upstreams));
    if (c->name == NULL || c->upstreams == NULL) {
        free(c->name);
        free(c->upstreams);
        free(c);
        return NULL;
    }
    memcpy(c->upstreams, upstreams, nupstreams * sizeof(*upstreams));
    c->nupstreams = nupstreams;
    c->connect_timeout_ms = 5000;
    c->connect_attempts = 3;
    c->idle_timeout_ms = 3600 * 1000;
    c->buffer_size = 64 * 1024;
    c->access_log = 1;
    c->stats = listener_stats_ref(stats);
    return c;
}

struct tcp_proxy_conf *tcp_proxy_conf_ref(struct tcp_proxy_conf *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

void tcp_proxy_conf_unref(struct tcp_proxy_conf *c)
{
    if (c == NULL || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    listener_stats_unref(c->stats);
    free(c->upstreams);
    free(c->name);
    free(c);
}

static void ev_toggle(struct event *ev, unsigned *on, int want)
{
    /* Bitfields cannot be passed by address; callers copy in and out. */
    if (want && !*on)
        event_add(ev, NULL);
    else if (!want && *on)
        event_del(ev);
    *on = want ? 1u : 0u;
}

static void session_log(const struct tcp_session *s, uint64_t now)
{
    char peer[ADDR_STRLEN] = "-", up[ADDR_STRLEN] = "-";
    char in[24], out[24], uin[24], uout[24], dur[24];
    const struct tcp_proxy_conf *c = s->p->conf;
    struct log_field f[] = {
        {"listener", c->name, 0},  {"downstream", peer, 0},
        {"upstream", up, 0},       {"bytes_in", in, 1},
        {"bytes_out", out, 1},     {"upstream_bytes_in", uin, 1},
        {"upstream_bytes_out", uout, 1}, {"duration_ms", dur, 1},
        {"end", s->reason, 0},
    };

    if (s->peerlen > 0)
        addr_format_sa((const struct sockaddr *)&s->peer, s->peerlen, peer,
                       sizeof(peer));
    if (s->attempts > 0)
        addr_format(&c->upstreams[s->ep % c->nupstreams], up, sizeof(up));
    snprintf(in, sizeof(in), "%" PRIu64, s->bytes_in);
    snprintf(out, sizeof(out), "%" PRIu64, s->bytes_out);
    snprintf(uin, sizeof(uin), "%" PRIu64, s->up_in);
    snprintf(uout, sizeof(uout), "%" PRIu64, s->up_out);
    snprintf(dur, sizeof(dur), "%" PRIu64, now - s->start_ms);
    log_event(LOG_INFO, "tcp_session", f, (int)(sizeof(f) / sizeof(f[0])));
}

/* session_close() ends the session now; the memory is freed on the next
 * loop turn (see reap), never inside the callback that closed it. */
static void session_close(struct tcp_session *s, const char *reason)
{
    struct tcp_proxy *p = s->p;

    if (s->closed)
        return;
    s->closed = 1;
    s->reason = reason;
    event_del(&s->dr);
    event_del(&s->dw);
    event_del(&s->timer);
    if (s->ufd >= 0) {
        event_del(&s->ur);
        event_del(&s->uw);
        close(s->ufd);
        s->ufd = -1;
    }
    close(s->dfd);
    s->dfd = -1;
    bufpool_drain(&p->pool, &s->d2u);
    bufpool_drain(&p->pool, &s->u2d);
    buf_dispose(&s->d2u);
    buf_dispose(&s->u2d);
    if (p->conf->access_log)
        session_log(s, clock_ms());
    STAT_ADD(shard(p), closed, 1);
    p->active--;
    list_del(&s->link);
    list_append(&p->dead, &s->link);
    event_active(p->reap_ev, EV_TIMEOUT, 0);
}

static int io_again(void)
{
    return errno == EAGAIN || errno == EWOULDBLOCK;
}

/* Write what is buffered towards fd; on a write error the session ends. */
static int flush(struct tcp_session *s, struct buf *b, int fd, uint64_t *cnt,
                 const char *reason)
{
    while (buf_len(b) > 0) {
        ssize_t n = buf_write_fd(b, fd);
        if (n > 0) {
            *cnt += (uint64_t)n;
            continue;
        }
        if (n < 0 && io_again())
            break;
        session_close(s, reason);
        return -1;
    }
    bufpool_drain(&s->p->pool, b);
    return 0;
}

static void flush_up(struct tcp_session *s)
{
    uint64_t before = s->up_out;

    if (flush(s, &s->d2u, s->ufd, &s->up_out, "upstream_reset") < 0)
        return;
    STAT_ADD(shard(s->p), upstream_bytes_out, s->up_out - before);
    if (s->d_eof && buf_len(&s->d2u) == 0 && !s->u_shut) {
        shutdown(s->ufd, SHUT_WR);
        s->u_shut = 1;
    }
}

static void flush_down(struct tcp_session *s)
{
    uint64_t before = s->bytes_out;

    if (flush(s, &s->u2d, s->dfd, &s->bytes_out, "downstream_reset") < 0)
        return;
    STAT_ADD(shard(s->p), bytes_out, s->bytes_out - before);
    if (s->u_eof && buf_len(&s->u2d) == 0 && !s->d_shut) {
        shutdown(s->dfd, SHUT_WR);
        s->d_shut = 1;
    }
}

static void on_down_read(evutil_socket_t fd, short what, void *arg)
{
    struct tcp_session *s = arg;
    ssize_t n;

    (void)what;
    if (bufpool_fill(&s->p->pool, &s->d2u) < 0) {
        session_close(s, "out_of_memory");
        return;
    }
    n = buf_read_fd(&s->d2u, fd);
    if (n > 0) {
        s->bytes_in += (uint64_t)n;
        s->last_ms = clock_ms();
        STAT_ADD(shard(s->p), bytes_in, (uint64_t)n);
    } else if (n == 0) {
        s->d_eof = 1;
    } else if (n == -1 && !io_again()) {
        session_close(s, "downstream_reset");
        return;
    }
    if (s->connected)
        flush_up(s);
    if (!s->closed)
        session_update(s);
}

static void on_up_read(evutil_socket_t fd, short what, void *arg)
{
    struct tcp_session *s = arg;
    ssize_t n;

    (void)what;
    if (bufpool_fill(&s->p->pool, &s->u2d) < 0) {
        session_close(s, "out_of_memory");
        return;
    }
    n = buf_read_fd(&s->u2d, fd);
    if (n > 0) {
        s->up_in += (uint64_t)n;
        s->last_ms = clock_ms();
        STAT_ADD(shard(s->p), upstream_bytes_in, (uint64_t)n);
    } else if (n == 0) {
        s->u_eof = 1;
    } else if (n == -1 && !io_again()) {
        session_close(s, "upstream_reset");
        return;
    }
    flush_down(s);
    if (!s->closed)
        session_update(s);
}

static void on_down_write(evutil_socket_t fd, short what, void *arg)
{
    struct tcp_session *s = arg;

    (void)fd;
    (void)what;
    s->last_ms = clock_ms();
    flush_down(s);
    if (!s->closed)
        session_update(s);
}

static void arm_timer(struct tcp_session *s, uint64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    event_add(&s->timer, &tv);
}

static void session_connected(struct tcp_session *s)
{
    s->connecting = 0;
    s->connected = 1;
    s->last_ms = clock_ms();
    arm_timer(s, s->p->conf->idle_timeout_ms);
    flush_up(s);
    if (!s->closed)
        session_update(s);
}

/* A failed attempt moves on to the next endpoint, round robin. */
static void attempt_failed(struct tcp_session *s, int timeout)
{
    char up[ADDR_STRLEN];
    const struct tcp_proxy_conf *c = s->p->conf;

    log_debug("listener %s: upstream %s: %s", c->name,
              addr_format(&c->upstreams[s->ep % c->nupstreams], up,
                          sizeof(up)),
              timeout ? "connect timeout" : "connect failed");
    if (timeout)
        STAT_ADD(shard(s->p), connect_timeouts, 1);
    else
        STAT_ADD(shard(s->p), connect_failures, 1);
    if (s->ufd >= 0) {
        if (s->uw_on)
            event_del(&s->uw);
        if (s->ur_on)
            event_del(&s->ur);
        s->uw_on = s->ur_on = 0;
        close(s->ufd);
        s->ufd = -1;
    }
    s->connecting = 0;
    s->ep++;
    session_connect(s);
}

static void on_up_write(evutil_socket_t fd, short what, void *arg)
{
    struct tcp_session *s = arg;

    (void)what;
    if (s->connecting) {
        if (sock_error(fd) != 0) {
            attempt_failed(s, 0);
            return;
        }
        session_connected(s);
        return;
    }
    s->last_ms = clock_ms();
    flush_up(s);
    if (!s->closed)
        session_update(s);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct tcp_session *s = arg;
    uint64_t now, idle;

    (void)fd;
    (void)what;
    if (s->connecting) {
        attempt_failed(s, 1);
        return;
    }
    /* The idle timer is not pushed back on every read; it fires at the
     * original deadline and re-arms for what is left. */
    now = clock_ms();
    idle = s->p->conf->idle_timeout_ms;
    if (now - s->last_ms >= idle) {
        STAT_ADD(shard(s->p), idle_timeouts, 1);
        session_close(s, "idle_timeout");
        return;
    }
    arm_timer(s, idle - (now - s->last_ms));
}

static void session_connect(struct tcp_session *s)
{
    const struct tcp_proxy_conf *c = s->p->conf;

    while (s->attempts < c->connect_attempts) {
        const struct addr *a = &c->upstreams[s->ep % c->nupstreams];
        int inprog, fd;

        s->attempts++;
        fd = sock_connect(a, &inprog);
        if (fd < 0) {
            s->ufd = -1;
            if (s->attempts < c->connect_attempts) {
                log_debug("listener %s: connect: %s", c->name,
                          strerror(errno));
                STAT_ADD(shard(s->p), connect_failures, 1);
                s->ep++;
                continue;
            }
            STAT_ADD(shard(s->p), connect_failures, 1);
            break;
        }
        s->ufd = fd;
        event_assign(&s->ur, s->p->base, fd, EV_READ | EV_PERSIST, on_up_read,
                     s);
        event_assign(&s->uw, s->p->base, fd, EV_WRITE | EV_PERSIST,
                     on_up_write, s);
        if (inprog) {
            s->connecting = 1;
            arm_timer(s, c->connect_timeout_ms);
            session_update(s);
            return;
        }
        session_connected(s);
        return;
    }
    session_close(s, "upstream_connect_failed");
}

static void session_update(struct tcp_session *s)
{
    unsigned on;

    if (s->connected && s->u_shut && s->d_shut) {
        session_close(s, "closed");
        return;
    }
    on = s->dr_on;
    ev_toggle(&s->dr, &on, !s->d_eof && buf_room(&s->d2u) > 0);
    s->dr_on = on;
    on = s->dw_on;
    ev_toggle(&s->dw, &on, s->connected && buf_len(&s->u2d) > 0);
    s->dw_on = on;
    if (s->ufd < 0)
        return;
    on = s->ur_on;
    ev_toggle(&s->ur, &on,
              s->connected && !s->u_eof && buf_room(&s->u2d) > 0);
    s->ur_on = on;
    on = s->uw_on;
    ev_toggle(&s->uw, &on,
              s->connecting || (s->connected && buf_len(&s->d2u) > 0));
    s->uw_on = on;
}

static void session_start(struct tcp_proxy *p, int fd,
                          const struct sockaddr_storage *peer,
                          socklen_t peerlen)
{
    struct tcp_session *s = calloc(1, sizeof(*s));
    int one = 1;

    if (s == NULL) {
        close(fd);
        log_error("listener %s: out of memory", p->conf->name);
        return;
    }
    s->p = p;
    s->dfd = fd;
    s->ufd = -1;
    s->ep = p->rr++;
    s->start_ms = s->last_ms = clock_ms();
    if (peerlen <= sizeof(s->peer)) {
        memcpy(&s->peer, peer, peerlen);
        s->peerlen = peerlen;
    }
    if (peer->ss_family != AF_UNIX)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    buf_init(&s->d2u, p->conf->buffer_size);
    buf_init(&s->u2d, p->conf->buffer_size);
    event_assign(&s->dr, p->base, fd, EV_READ | EV_PERSIST, on_down_read, s);
    event_assign(&s->dw, p->base, fd, EV_WRITE | EV_PERSIST, on_down_write, s);
    event_assign(&s->timer, p->base, -1, 0, on_timer, s);
    list_append(&p->sessions, &s->link);
    p->active++;
    STAT_ADD(shard(p), accepted, 1);
    session_connect(s);
}

static void on_conn(void *arg, int fd, const struct sockaddr_storage *peer,
                    socklen_t len)
{
    session_start(arg, fd, peer, len);
}

static void reap(evutil_socket_t fd, short what, void *arg)
{
    struct tcp_proxy *p = arg;

    (void)fd;
    (void)what;
    while (!LIST_EMPTY(&p->dead)) {
        struct tcp_session *s = LIST_ELEM(p->dead.next, struct tcp_session,
                                          link);
        list_del(&s->link);
        free(s);
    }
    if (!acceptor_running(&p->acc) && p->active == 0 && p->on_idle != NULL)
        p->on_idle(&p->pl, p->arg);
}

struct tcp_proxy *tcp_proxy_new(struct event_base *base, int worker, int fd,
                                struct tcp_proxy_conf *conf,
                                plistener_idle_fn on_idle, void *arg)
{
    struct tcp_proxy *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    p->pl.ops = &tcp_proxy_ops;
    p->pl.conf = conf;
    p->pl.fd = fd;
    LIST_INIT(&p->pl.link);
    p->base = base;
    p->worker = worker;
    p->fd = fd;
    p->conf = tcp_proxy_conf_ref(conf);
    p->on_idle = on_idle;
    p->arg = arg;
    LIST_INIT(&p->sessions);
    LIST_INIT(&p->dead);
    bufpool_init(&p->pool, conf->buffer_size, POOL_KEEP);
    p->reap_ev = event_new(base, -1, 0, reap, p);
    if (p->reap_ev == NULL ||
        acceptor_start(&p->acc, base, fd, conf->name, on_conn, p) < 0) {
        tcp_proxy_free(p);
        return NULL;
    }
    return p;
}

void tcp_proxy_stop_accepting(struct tcp_proxy *p)
{
    if (!acceptor_running(&p->acc))
        return;
    acceptor_stop(&p->acc);
    /* Let the reaper report idleness on the next turn if nothing is open. */
    event_active(p->reap_ev, EV_TIMEOUT, 0);
}

void tcp_proxy_free(struct tcp_proxy *p)
{
    if (p == NULL)
        return;
    acceptor_stop(&p->acc);
    while (!LIST_EMPTY(&p->sessions)) {
        struct tcp_session *s = LIST_ELEM(p->sessions.next,
                                          struct tcp_session, link);
        session_close(s, "shutdown");
    }
    while (!LIST_EMPTY(&p->dead)) {
        struct tcp_session *s = LIST_ELEM(p->dead.next, struct tcp_session,
                                          link);
        list_del(&s->link);
        free(s);
    }
    if (p->reap_ev != NULL)
        event_free(p->reap_ev);
    list_del(&p->pl.link);
    bufpool_dispose(&p->pool);
    tcp_proxy_conf_unref(p->conf);
    free(p);
}

static struct plistener *ops_start(struct event_base *base, int worker, int fd,
                                   void *conf, plistener_idle_fn on_idle,
                                   void *arg)
{
    struct tcp_proxy *p = tcp_proxy_new(base, worker, fd, conf, on_idle, arg);

    return p != NULL ? &p->pl : NULL;
}

static void ops_stop(struct plistener *l)
{
    tcp_proxy_stop_accepting((struct tcp_proxy *)(void *)l);
}

static void ops_free(struct plistener *l)
{
    tcp_proxy_free((struct tcp_proxy *)(void *)l);
}

const struct plistener_ops tcp_proxy_ops = {"tcp", ops_start, ops_stop,
                                            ops_free};
