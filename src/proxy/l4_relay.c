/*
 * The L4 relay: bytes copied between a downstream connection and an
 * upstream one, with bounded buffers, connect attempts over a cluster's
 * endpoints, idle timeouts and upstream TLS origination. Every TCP and TLS
 * route runs on it (l4_listener.c), a bootstrap tcp listener's too.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "event/logsink.h"
#include "event/reap.h"
#include "event/timer.h"
#include "http/access_format.h"
#include "net/conn.h"
#include "net/overload.h"
#include "net/sock.h"
#include "proxy/istio_metrics.h"
#include "proxy/hbone_client.h"
#include "proxy/l4_relay.h"
#include "proxy/stats.h"
#include "tls/tls.h"
#include "upstream/cluster.h"
#include "upstream/outlier.h"

/* Free relay buffers a worker keeps per listener for the next sessions. */
#define POOL_KEEP 32

/*
 * A relayed TCP session. Two bounded buffers carry the two directions; a
 * side is read only while its buffer has room, so a slow reader stops the
 * fast writer through TCP flow control instead of growing memory. A FIN is
 * passed on (shutdown(SHUT_WR), or close_notify and FIN over TLS) once the
 * bytes before it are written. Both sides are conns: downstream plain or
 * TLS the listener terminated, upstream plain or TLS the session
 * originates (DestinationRule tls).
 *
 * TLS on either side can hold decrypted bytes the socket no longer
 * signals, so a side whose read stopped at a full buffer is read again by
 * hand as soon as the buffer has room (see session_pump), never left to a
 * socket event that may not come.
 */
struct tcp_session {
    struct list link;
    struct l4_relay *r;
    struct conn down;
    struct conn up; /* fd -1 while there is no upstream socket */
    struct timer timer;
    struct timer kick; /* deferred: session_pump on the next loop turn */
    unsigned connecting : 1, handshaking : 1, connected : 1;
    unsigned d_eof : 1, u_eof : 1;   /* FIN read from that side */
    unsigned u_shut : 1, d_shut : 1; /* FIN passed on to that side */
    unsigned closed : 1;
    unsigned tls : 1;
    unsigned hbone_up : 1; /* the upstream is an HBONE tunnel */
    int attempts;
    const struct addr *eps;
    size_t neps;
    size_t ep;                 /* index of the upstream tried last */
    struct ssl_ctx_st *up_ctx; /* TLS origination; borrowed */
    const char *up_sni;        /* borrowed */
    const uint8_t *up_alpn;    /* borrowed */
    size_t up_alpn_len;
    struct cluster_counters *cstats; /* NULL: no cluster */
    struct cluster *od;              /* meta->outlier; NULL: not told */
    const struct cluster *hb;        /* meta->hbone */
    /* Istio's TCP series of the session while it lives (bytes are added
     * as they move, so a scrape sees a long connection's traffic before
     * it ends), and the cluster's labels; NULL: metrics off. */
    struct series *ms;
    struct series_labels *mdst;
    struct buf d2u, u2d;
    uint64_t start_ms, last_ms;
    uint64_t bytes_in, bytes_out, up_in, up_out;
    struct sockaddr_storage peer;
    socklen_t peerlen;
    /* The socket's peer behind a PROXY header (malloc'd; NULL: peer). */
    struct sockaddr_storage *direct;
    socklen_t directlen;
    const char *reason;
    const char *route, *cluster;
    char *peer_uri; /* owned */
    char sni[256];
    char why[200]; /* the last attempt's TLS failure, "" if none */
};

static void session_update(struct tcp_session *s);
static void session_connect(struct tcp_session *s);
static void session_pump(struct tcp_session *s, int read_down, int read_up);

static struct proxy_counters *rshard(const struct l4_relay *r)
{
    return proxy_counters(r->p.stats, r->worker);
}

/* Envoy's response flags for how a session ended. */
static const char *end_flags(const char *reason)
{
    if (strcmp(reason, "upstream_connect_failed") == 0 ||
        strncmp(reason, "upstream_tls_", 13) == 0 ||
        strncmp(reason, "upstream_hbone_", 15) == 0)
        return "UF";
    if (strcmp(reason, "no_healthy_upstream") == 0)
        return "UH";
    if (strcmp(reason, "idle_timeout") == 0)
        return "SI";
    return "-";
}

static void session_log(struct tcp_session *s, uint64_t now)
{
    char peer[ADDR_STRLEN] = "-", up[ADDR_STRLEN] = "-";
    char in[24], out[24], uin[24], uout[24], dur[24];
    struct l4_relay *r = s->r;
    struct log_field f[] = {
        {"listener", r->p.name, 0},
        {"downstream", peer, 0},
        {"upstream", up, 0},
        {"sni", s->sni[0] ? s->sni : NULL, 0},
        {"route", s->route, 0},
        {"cluster", s->cluster, 0},
        {"tls", s->tls ? "terminated" : NULL, 0},
        {"upstream_tls",
         s->hbone_up         ? "hbone"
         : s->up_ctx != NULL ? "originated"
                             : NULL,
         0},
        {"peer_uri_san", s->peer_uri, 0},
        {"bytes_in", in, 1},
        {"bytes_out", out, 1},
        {"upstream_bytes_in", uin, 1},
        {"upstream_bytes_out", uout, 1},
        {"duration_ms", dur, 1},
        {"end", s->reason, 0},
        {"flags", end_flags(s->reason), 0},
    };

    if (s->peerlen > 0)
        addr_format_sa((const struct sockaddr *)&s->peer, s->peerlen, peer,
                       sizeof(peer));
    if (s->attempts > 0 && s->neps > 0)
        addr_format(&s->eps[s->ep % s->neps], up, sizeof(up));
    snprintf(in, sizeof(in), "%" PRIu64, s->bytes_in);
    snprintf(out, sizeof(out), "%" PRIu64, s->bytes_out);
    snprintf(uin, sizeof(uin), "%" PRIu64, s->up_in);
    snprintf(uout, sizeof(uout), "%" PRIu64, s->up_out);
    snprintf(dur, sizeof(dur), "%" PRIu64, now - s->start_ms);
    if (r->p.alog_sink == NULL) {
        log_event(LOG_INFO, "tcp_session", f, (int)(sizeof(f) / sizeof(f[0])));
        return;
    }
    if (log_get_level() > LOG_INFO)
        return;
    {
        char line[LSINK_CHUNK];
        struct buf b = {line, 0, 0, sizeof(line), sizeof(line), 0};

        log_event_render(&b, LOG_INFO, "tcp_session", f,
                         (int)(sizeof(f) / sizeof(f[0])));
        lsink_buf_line(&r->alog, buf_ptr(&b), buf_len(&b));
    }
}

static void l4_sock_local(int fd, char *out, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    out[0] = '\0';
    if (fd >= 0 && getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        addr_format_sa((const struct sockaddr *)&ss, len, out, n);
}

/* A session in an Envoy format (log.accessLogEncoding TEXT or JSON): the
 * HTTP operators are missing ("-"), %RESPONSE_CODE% is 0. */
static void session_envoy_log(struct tcp_session *s, uint64_t now)
{
    struct l4_relay *r = s->r;
    const struct afmt *fmt = r->p.alog_fmt;
    char peer[ADDR_STRLEN] = "", up[ADDR_STRLEN] = "", local[ADDR_STRLEN];
    char direct[ADDR_STRLEN];
    char uplocal[ADDR_STRLEN], line[LSINK_CHUNK];
    struct buf b = {line, 0, 0, sizeof(line), sizeof(line), 0};
    struct timespec ts;
    struct afmt_ctx c;

    clock_gettime(CLOCK_REALTIME, &ts);
    memset(&c, 0, sizeof(c));
    c.duration_ms = now - s->start_ms;
    c.start_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 -
                 (int64_t)c.duration_ms * 1000;
    c.flags = end_flags(s->reason);
    c.termination = s->reason;
    if (strncmp(s->reason, "upstream_tls_refused:", 21) == 0)
        c.upstream_failure = s->reason + 21;
    else if (strcmp(c.flags, "UF") == 0)
        c.upstream_failure = s->reason;
    c.bytes_received = s->bytes_in;
    c.bytes_sent = s->bytes_out;
    if (s->peerlen > 0) {
        addr_format_sa((const struct sockaddr *)&s->peer, s->peerlen, peer,
                       sizeof(peer));
        c.downstream_remote = peer;
        c.downstream_direct_remote = peer;
    }
    if (s->direct != NULL) {
        addr_format_sa((const struct sockaddr *)s->direct, s->directlen, direct,
                       sizeof(direct));
        c.downstream_direct_remote = direct;
    }
    if (s->attempts > 0 && s->neps > 0) {
        addr_format(&s->eps[s->ep % s->neps], up, sizeof(up));
        c.upstream_host = up;
    }
    c.upstream_cluster = s->cluster;
    c.route = s->route;
    c.sni = s->sni[0] ? s->sni : NULL;
    c.peer_uri_san = s->peer_uri;
    c.attempts = (unsigned)s->attempts;
    if (afmt_needs(fmt) & AFMT_NEED_DOWNSTREAM_LOCAL) {
        l4_sock_local(s->down.fd, local, sizeof(local));
        c.downstream_local = local[0] ? local : NULL;
    }
    if (afmt_needs(fmt) & AFMT_NEED_UPSTREAM_LOCAL) {
        l4_sock_local(s->up.fd, uplocal, sizeof(uplocal));
        c.upstream_local = uplocal[0] ? uplocal : NULL;
    }
    afmt_write(fmt, &c, &b);
    if (buf_len(&b) > 0)
        lsink_buf_line(&r->alog, buf_ptr(&b), buf_len(&b));
}

/* session_close() ends the session now; the memory is freed on the next
 * loop turn (see reap), never inside the callback that closed it. */
static void session_close(struct tcp_session *s, const char *reason)
{
    struct l4_relay *r = s->r;
    /* Under the memory actions the free list gives its buffers back as
     * sessions end (see the HTTP listener's reap). */
    int pressed = s->down.cx != NULL && cx_overload(s->down.cx) != 0;

    if (s->closed)
        return;
    s->closed = 1;
    s->reason = reason;
    timer_cancel(&s->timer);
    timer_cancel(&s->kick);
    /* Logged while the sockets are open: a format may ask their local
     * addresses. */
    if (r->p.access_log && r->p.alog_fmt != NULL && r->p.alog_sink != NULL)
        session_envoy_log(s, clock_ms());
    else if (r->p.access_log)
        session_log(s, clock_ms());
    conn_close(&s->up);
    conn_close(&s->down);
    bufpool_drain(&r->pool, &s->d2u);
    bufpool_drain(&r->pool, &s->u2d);
    if (pressed)
        bufpool_trim(&r->pool);
    buf_dispose(&s->d2u);
    buf_dispose(&s->u2d);
    if (s->ms != NULL) {
        /* Closed under the flags it ended with, as Istio's last report. */
        const char *fl = end_flags(reason);
        struct series *m =
            fl[0] == '-' ? s->ms
                         : istio_tcp_series(&r->p.metrics->shards[r->worker],
                                            r->p.metrics_src, s->mdst, fl);
        if (m != NULL)
            series_add(m, SERIES_TCP_CLOSED, 1);
        s->ms = NULL;
    }
    STAT_ADD(&rshard(r)->listener, closed, 1);
    r->active--;
    list_del(&s->link);
    list_append(&r->dead, &s->link);
    l4_relay_kick(r);
}

/* Writes what d2u holds to the upstream; passes the client's FIN on once
 * it is empty. */
static void flush_up(struct tcp_session *s)
{
    uint64_t before = s->up_out;

    while (buf_len(&s->d2u) > 0) {
        ssize_t n = conn_write(&s->up, buf_ptr(&s->d2u), buf_len(&s->d2u));
        if (n > 0) {
            buf_consume(&s->d2u, (size_t)n);
            s->up_out += (uint64_t)n;
            continue;
        }
        if (n == CONN_AGAIN)
            break;
        session_close(s, "upstream_reset");
        return;
    }
    bufpool_drain(&s->r->pool, &s->d2u);
    STAT_ADD(&rshard(s->r)->relay, upstream_bytes_out, s->up_out - before);
    if (s->d_eof && buf_len(&s->d2u) == 0 && !s->u_shut) {
        s->up.ops->shutdown(&s->up);
        s->u_shut = 1;
    }
}

static void flush_down(struct tcp_session *s)
{
    uint64_t before = s->bytes_out;

    while (buf_len(&s->u2d) > 0) {
        ssize_t n = conn_write(&s->down, buf_ptr(&s->u2d), buf_len(&s->u2d));
        if (n > 0) {
            buf_consume(&s->u2d, (size_t)n);
            s->bytes_out += (uint64_t)n;
            continue;
        }
        if (n == CONN_AGAIN)
            break;
        session_close(s, "downstream_reset");
        return;
    }
    bufpool_drain(&s->r->pool, &s->u2d);
    STAT_ADD(&rshard(s->r)->relay, bytes_out, s->bytes_out - before);
    if (s->ms != NULL)
        series_add(s->ms, SERIES_TCP_SENT, s->bytes_out - before);
    if (s->u_eof && buf_len(&s->u2d) == 0 && !s->d_shut) {
        s->down.ops->shutdown(&s->down);
        s->d_shut = 1;
    }
}

/* Reads from one side (up: the upstream) into its buffer while there is
 * room. TLS may hold decrypted bytes the socket no longer signals, so a
 * TLS side is read until it says it would block, not once per event; a
 * plain side stops at a short read too (its level-triggered event fires
 * again for anything left). Returns 1 when it stopped because the buffer
 * was full (more may be waiting in the transport), else 0. */
static int side_read(struct tcp_session *s, int up)
{
    struct conn *c = up ? &s->up : &s->down;
    struct buf *b = up ? &s->u2d : &s->d2u;
    int full = 0;

    while (!(up ? s->u_eof : s->d_eof)) {
        size_t room;
        char *p;
        ssize_t n;

        if (buf_room(b) == 0) {
            full = 1;
            break;
        }
        if (bufpool_fill(&s->r->pool, b) < 0 ||
            (p = buf_reserve_any(b, &room)) == NULL) {
            session_close(s, "out_of_memory");
            return 0;
        }
        n = conn_read(c, p, room);
        if (n > 0) {
            buf_commit(b, (size_t)n);
            s->last_ms = clock_ms();
            if (up) {
                s->up_in += (uint64_t)n;
                STAT_ADD(&rshard(s->r)->relay, upstream_bytes_in, (uint64_t)n);
            } else {
                s->bytes_in += (uint64_t)n;
                STAT_ADD(&rshard(s->r)->relay, bytes_in, (uint64_t)n);
                if (s->ms != NULL)
                    series_add(s->ms, SERIES_TCP_RECEIVED, (uint64_t)n);
            }
            if (c->tls == NULL && (size_t)n < room)
                break;
        } else if (n == 0) {
            if (up)
                s->u_eof = 1;
            else
                s->d_eof = 1;
        } else if (n == CONN_AGAIN) {
            break;
        } else {
            session_close(s, up ? "upstream_reset" : "downstream_reset");
            return 0;
        }
    }
    bufpool_drain(&s->r->pool, b);
    return full;
}

/* Rounds of read-then-flush per event, so one fast session cannot hold
 * the loop; past them the session goes on at the next loop turn. */
#define PUMP_ROUNDS 8

/*
 * session_pump() moves bytes both ways: it reads the sides asked for (the
 * one whose socket fired; both after a kick or once connected), then
 * writes each buffer to the other side. A side whose buffer was full and
 * has room again after the writes is read again at once: over TLS its
 * bytes may wait in the TLS layer, where no socket event will announce
 * them.
 */
static void session_pump(struct tcp_session *s, int read_down, int read_up)
{
    for (int round = 0;; round++) {
        int dfull = buf_room(&s->d2u) == 0, ufull = buf_room(&s->u2d) == 0;

        if (read_down) {
            dfull |= side_read(s, 0);
            if (s->closed)
                return;
        }
        if (read_up && s->connected) {
            ufull |= side_read(s, 1);
            if (s->closed)
                return;
        }
        if (s->connected) {
            flush_up(s);
            if (s->closed)
                return;
        }
        flush_down(s);
        if (s->closed)
            return;
        read_down = dfull && !s->d_eof && buf_room(&s->d2u) > 0;
        read_up = ufull && s->connected && !s->u_eof && buf_room(&s->u2d) > 0;
        if (!read_down && !read_up)
            break;
        if (round + 1 >= PUMP_ROUNDS) {
            /* Not a conn's own read event: libevent does not register an
             * event with epoll when it is added while active, so the conn
             * would think it is watching the socket when it is not. */
            timer_defer(&s->kick);
            break;
        }
    }
    session_update(s);
}

static void on_down_io(struct conn *c, void *arg)
{
    (void)c;
    session_pump(arg, 1, 0);
}

static void on_kick(void *arg)
{
    session_pump(arg, 1, 1);
}

static void session_connected(struct tcp_session *s)
{
    if (s->od != NULL)
        cluster_report(s->od, s->ep % s->neps, 200);
    s->connecting = 0;
    s->handshaking = 0;
    s->connected = 1;
    s->last_ms = clock_ms();
    timer_arm(&s->timer, s->r->p.idle_timeout_ms);
    /* Both sides: bytes a TLS handshake already decrypted (the client's
     * first bytes, or a server's greeting sent with its last handshake
     * flight) wait in the TLS layer, not in the socket. */
    session_pump(s, 1, 1);
}

#define REFUSED "upstream_tls_refused:"

/* A failed attempt moves on to the next endpoint, round robin. A TLS
 * handshake failure has put its reason in s->why (the reason the session
 * ends with if no attempt is left). */
static void attempt_failed(struct tcp_session *s, int timeout)
{
    char up[ADDR_STRLEN];
    const struct l4_relay *r = s->r;

    addr_format(&s->eps[s->ep % s->neps], up, sizeof(up));
    if (strncmp(s->why, REFUSED, strlen(REFUSED)) == 0) {
        /* In the HTTP path's words. */
        log_warn("cluster %s: upstream %s: certificate refused: %s",
                 s->cluster ? s->cluster : "-", up, s->why + strlen(REFUSED));
    } else if (strncmp(s->why, "upstream_hbone_", 15) == 0) {
        log_warn("cluster %s: upstream %s: HBONE tunnel failed (%s)",
                 s->cluster ? s->cluster : "-", up, s->why + 9);
    } else if (s->why[0] != '\0') {
        log_warn("cluster %s: upstream %s: TLS handshake failed (%s)",
                 s->cluster ? s->cluster : "-", up, s->why);
    } else {
        log_debug("listener %s: upstream %s: %s", r->p.name, up,
                  timeout ? "connect timeout" : "connect failed");
    }
    if (timeout)
        STAT_ADD(&rshard(r)->relay, connect_timeouts, 1);
    else
        STAT_ADD(&rshard(r)->relay, connect_failures, 1);
    if (s->od != NULL)
        cluster_report(s->od, s->ep % s->neps, OUTLIER_CONNECT_FAILED);
    if (s->cstats != NULL) {
        STAT_ADD(s->cstats, cx_connect_fail, 1);
        if (timeout)
            STAT_ADD(s->cstats, cx_connect_timeout, 1);
    }
    conn_close(&s->up);
    s->connecting = 0;
    s->handshaking = 0;
    /* The next attempt takes the next endpoint; after the last one, the
     * log names the endpoint that failed. */
    if (s->attempts < r->p.connect_attempts)
        s->ep++;
    session_connect(s);
}

/* The upstream's TLS handshake; the connect timer still runs, as Envoy's
 * connect timeout covers the transport's handshake too. */
static void up_handshake(struct tcp_session *s)
{
    int rc = s->up.ops->handshake(&s->up);
    const char *verr;

    if (rc == 0) {
        conn_want(&s->up, 1, 0);
        return;
    }
    if (rc > 0) {
        timer_cancel(&s->timer);
        session_connected(s);
        return;
    }
    if (s->hbone_up) {
        /* The tunnel says why: its connection, its TLS, or the answer. */
        snprintf(s->why, sizeof(s->why), "upstream_%s",
                 s->up.why != NULL ? s->up.why : "hbone_failed");
        attempt_failed(s, 0);
        return;
    }
    /* A refused certificate says why (wrong root, expired, not the
     * identity the DestinationRule asks for), in the HTTP path's words. */
    verr = tls_conn_verify_error(&s->up);
    if (verr != NULL)
        snprintf(s->why, sizeof(s->why), REFUSED "%s", verr);
    else
        snprintf(s->why, sizeof(s->why), "upstream_tls_handshake_%s",
                 tls_conn_failure(&s->up));
    attempt_failed(s, 0);
}

static void on_up_io(struct conn *c, void *arg)
{
    struct tcp_session *s = arg;

    if (s->connecting) {
        if (sock_error(c->fd) != 0) {
            attempt_failed(s, 0);
            return;
        }
        s->connecting = 0;
        if (s->up_ctx == NULL) {
            timer_cancel(&s->timer);
            session_connected(s);
            return;
        }
        s->handshaking = 1;
    }
    if (s->handshaking) {
        up_handshake(s);
        return;
    }
    session_pump(s, 0, 1);
}

static void on_timer(void *arg)
{
    struct tcp_session *s = arg;
    uint64_t now, idle;

    if (s->connecting || s->handshaking) {
        attempt_failed(s, 1);
        return;
    }
    /* The idle timer is not pushed back on every read; it fires at the
     * original deadline and re-arms for what is left. */
    now = clock_ms();
    idle = s->r->p.idle_timeout_ms;
    if (now - s->last_ms >= idle) {
        STAT_ADD(&rshard(s->r)->relay, idle_timeouts, 1);
        session_close(s, "idle_timeout");
        return;
    }
    timer_arm(&s->timer, idle - (now - s->last_ms));
}

/* Puts TLS over the fresh upstream socket: the cluster's context (its CA
 * and SAN checks, its client certificate), SNI, and the ALPN of a TCP
 * stream rather than the HTTP one the context offers. */
static int up_tls_start(struct tcp_session *s)
{
    if (tls_conn_connect(&s->up, s->up_ctx, s->up_sni) < 0)
        return -1;
    if (SSL_set_alpn_protos(s->up.tls, s->up_alpn,
                            s->up_alpn != NULL ? s->up_alpn_len : 0) != 0)
        return -1;
    return 0;
}

/*
 * An HBONE endpoint: a tunnel through the worker's pool instead of a TCP
 * connection; its CONNECT exchange is the upstream's handshake, within
 * the connect timeout. 1 started, 0 failed (try the next endpoint), -1
 * the session was closed.
 */
static int hbone_connect(struct tcp_session *s, const struct addr *a)
{
    struct l4_relay *r = s->r;
    size_t ep = s->ep % s->neps;
    struct hbone_target tg;
    char host[256] = "";

    if (s->hb->hbone_error || s->hb->hbone_tls == NULL) {
        session_close(s, "upstream_hbone_unavailable");
        return -1;
    }
    if (r->hbone == NULL &&
        (r->hbone = hbone_pool_new(r->base, r->p.name, r->p.hbone_window,
                                   r->p.hbone_idle_ms)) == NULL) {
        session_close(s, "out_of_memory");
        return -1;
    }
    /* The service's host (the cluster's name is host|subset|port), for
     * Forwarded's host=, as ztunnel sends when a service is the target. */
    if (s->cluster != NULL) {
        size_t n = strcspn(s->cluster, "|");
        if (n < sizeof(host)) {
            memcpy(host, s->cluster, n);
            host[n] = '\0';
        }
    }
    memset(&tg, 0, sizeof(tg));
    tg.ctx = s->hb->hbone_tls;
    tg.dst = a;
    tg.id = s->hb->hbone_ids[ep];
    tg.src = s->peerlen > 0 ? (const struct sockaddr *)&s->peer : NULL;
    tg.srclen = s->peerlen;
    tg.host = host[0] ? host : NULL;
    tg.baggage = r->p.hbone_baggage;
    if (s->hb->hbone[ep] == CLUSTER_HBONE_DOUBLE) {
        /* Through another network's ambient east-west gateway. */
        if (s->hb->hbone_inner_tls == NULL) {
            session_close(s, "upstream_hbone_unavailable");
            return -1;
        }
        tg.authority = s->hb->hbone_authority;
        tg.inner_ctx = s->hb->hbone_inner_tls;
        tg.network = s->hb->hbone_network;
    }
    if (hbone_conn_open(&s->up, r->hbone, &tg, on_up_io, s) < 0)
        return 0;
    s->hbone_up = 1;
    s->handshaking = 1;
    timer_arm(&s->timer, r->p.connect_timeout_ms);
    session_update(s);
    return 1;
}

static void session_connect(struct tcp_session *s)
{
    const struct l4_relay *r = s->r;

    while (s->attempts < r->p.connect_attempts) {
        const struct addr *a = &s->eps[s->ep % s->neps];
        int inprog, fd;

        s->attempts++;
        /* A session that fails ends with the last attempt's reason. */
        s->why[0] = '\0';
        if (s->cstats != NULL)
            STAT_ADD(s->cstats, cx_total, 1);
        s->hbone_up = 0;
        if (s->hb != NULL && s->hb->hbone[s->ep % s->neps]) {
            int rc = hbone_connect(s, a);
            if (rc != 0)
                return;
            STAT_ADD(&rshard(s->r)->relay, connect_failures, 1);
            if (s->attempts < r->p.connect_attempts)
                s->ep++;
            continue;
        }
        fd = sock_connect(a, &inprog);
        if (fd < 0) {
            log_debug("listener %s: connect: %s", r->p.name, strerror(errno));
            STAT_ADD(&rshard(s->r)->relay, connect_failures, 1);
            if (s->cstats != NULL)
                STAT_ADD(s->cstats, cx_connect_fail, 1);
            if (s->od != NULL)
                cluster_report(s->od, s->ep % s->neps, OUTLIER_CONNECT_FAILED);
            /* The log names the endpoint that failed last. */
            if (s->attempts < r->p.connect_attempts)
                s->ep++;
            continue;
        }
        conn_init(&s->up, r->base, fd, on_up_io, s);
        if (s->up_ctx != NULL && up_tls_start(s) < 0) {
            session_close(s, "out_of_memory");
            return;
        }
        s->connecting = 1;
        timer_arm(&s->timer, r->p.connect_timeout_ms);
        if (inprog) {
            session_update(s);
            return;
        }
        on_up_io(&s->up, s);
        return;
    }
    session_close(s, s->why[0] != '\0' ? s->why : "upstream_connect_failed");
}

static void session_update(struct tcp_session *s)
{
    if (s->connected && s->u_shut && s->d_shut) {
        session_close(s, "closed");
        return;
    }
    conn_want(&s->down, !s->d_eof && buf_room(&s->d2u) > 0,
              s->connected && buf_len(&s->u2d) > 0);
    if (s->up.fd < 0)
        return;
    if (s->connecting)
        conn_want(&s->up, 0, 1);
    else if (s->handshaking)
        conn_want(&s->up, 1, 0);
    else
        conn_want(&s->up, !s->u_eof && buf_room(&s->u2d) > 0,
                  buf_len(&s->d2u) > 0);
}

void l4_relay_start(struct l4_relay *r, struct conn *down,
                    const struct sockaddr_storage *peer, socklen_t peerlen,
                    const struct addr *eps, size_t neps, size_t first,
                    const struct l4_relay_meta *meta, uint64_t start_ms)
{
    struct tcp_session *s = calloc(1, sizeof(*s));
    int one = 1;

    if (s == NULL) {
        conn_close(down);
        log_error("listener %s: out of memory", r->p.name);
        return;
    }
    s->r = r;
    conn_move(&s->down, down, r->base, on_down_io, s);
    s->up.fd = -1;
    s->eps = eps;
    s->neps = neps;
    s->ep = first;
    s->start_ms = start_ms;
    s->last_ms = clock_ms();
    if (peer != NULL && peerlen <= sizeof(s->peer)) {
        memcpy(&s->peer, peer, peerlen);
        s->peerlen = peerlen;
    }
    if (meta != NULL && meta->direct != NULL &&
        meta->directlen <= sizeof(*s->direct) &&
        (s->direct = malloc(sizeof(*s->direct))) != NULL) {
        memcpy(s->direct, meta->direct, meta->directlen);
        s->directlen = meta->directlen;
    }
    if (meta != NULL) {
        if (meta->sni != NULL)
            snprintf(s->sni, sizeof(s->sni), "%s", meta->sni);
        s->route = meta->route;
        s->cluster = meta->cluster;
        if (meta->peer_uri_san != NULL && meta->peer_uri_san[0] != '\0')
            s->peer_uri = strdup(meta->peer_uri_san);
        s->tls = meta->tls_terminated ? 1u : 0u;
        s->up_ctx = meta->up_tls;
        s->up_sni = meta->up_sni;
        s->up_alpn = meta->up_alpn;
        s->up_alpn_len = meta->up_alpn_len;
        s->cstats = meta->cluster_stats;
        s->od = meta->outlier;
        s->hb = meta->hbone;
        s->mdst = meta->metrics_dst;
    }
    if (r->p.metrics != NULL) {
        s->ms = istio_tcp_series(&r->p.metrics->shards[r->worker],
                                 r->p.metrics_src, s->mdst, "-");
        if (s->ms != NULL)
            series_add(s->ms, SERIES_TCP_OPENED, 1);
    }
    if (peer == NULL || peer->ss_family != AF_UNIX)
        setsockopt(s->down.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    buf_init(&s->d2u, r->p.buffer_size);
    buf_init(&s->u2d, r->p.buffer_size);
    timer_init(&s->timer, r->base, on_timer, s);
    timer_init(&s->kick, r->base, on_kick, s);
    list_append(&r->sessions, &s->link);
    r->active++;
    if (meta != NULL && meta->up_tls_error) {
        /* The DestinationRule asks for TLS that could not be set up. */
        session_close(s, "upstream_tls_unavailable");
        return;
    }
    if (neps == 0) {
        session_close(s, "no_healthy_upstream");
        return;
    }
    session_connect(s);
}

static void session_free(struct tcp_session *s)
{
    free(s->peer_uri);
    free(s->direct);
    free(s);
}

static void relay_reap(struct reap_node *n)
{
    struct l4_relay *r = LIST_ELEM(n, struct l4_relay, reap);

    while (!LIST_EMPTY(&r->dead)) {
        struct tcp_session *s =
            LIST_ELEM(r->dead.next, struct tcp_session, link);
        list_del(&s->link);
        session_free(s);
    }
    if (r->on_reap != NULL)
        r->on_reap(r->arg);
}

int l4_relay_init(struct l4_relay *r, struct event_base *base,
                  struct reaper *reaper, int worker,
                  const struct l4_relay_params *p, void (*on_reap)(void *arg),
                  void *arg)
{
    memset(r, 0, sizeof(*r));
    r->p = *p;
    r->base = base;
    r->reaper = reaper;
    r->worker = worker;
    r->on_reap = on_reap;
    r->arg = arg;
    LIST_INIT(&r->sessions);
    LIST_INIT(&r->dead);
    bufpool_init(&r->pool, p->buffer_size, POOL_KEEP);
    if (p->alog_sink != NULL)
        lsink_buf_init(&r->alog, p->alog_sink, base);
    return 0;
}

void l4_relay_kick(struct l4_relay *r)
{
    reaper_defer(r->reaper, &r->reap, relay_reap);
}

void l4_relay_dispose(struct l4_relay *r)
{
    while (!LIST_EMPTY(&r->sessions)) {
        struct tcp_session *s =
            LIST_ELEM(r->sessions.next, struct tcp_session, link);
        session_close(s, "shutdown");
    }
    while (!LIST_EMPTY(&r->dead)) {
        struct tcp_session *s =
            LIST_ELEM(r->dead.next, struct tcp_session, link);
        list_del(&s->link);
        session_free(s);
    }
    reaper_cancel(&r->reap);
    /* After the sessions: their tunnels were on its connections. */
    hbone_pool_free(r->hbone);
    r->hbone = NULL;
    bufpool_dispose(&r->pool);
    lsink_buf_dispose(&r->alog);
}
