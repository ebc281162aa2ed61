/*
 * The HBONE client: pooled HTTP/2 connections carrying CONNECT tunnels,
 * each tunnel a conn transport the TCP relay drives. See hbone_client.h.
 *
 * Ownership: the relay owns a tunnel's conn and frees the tunnel by
 * conn_close() (the dispose op). The pool owns its connections; a
 * connection that ends fails the tunnels on it (they stay until their
 * owners close them) and is freed on a later loop pass, never inside its
 * own callbacks.
 */
#include "config.h"

#include <inttypes.h>
#include <nghttp2/nghttp2.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/list.h"
#include "core/log.h"
#include "event/timer.h"
#include "http/trace_context.h"
#include "net/conn.h"
#include "net/sock.h"
#include "proxy/hbone_client.h"
#include "proxy/hbone_io.h"
#include "tls/tls.h"

#define HBONE_PORT 15008
#define READ_CHUNK (64 * 1024)
#define READS_PER_TURN 8
/* How long double HBONE's inner connection waits for the far end to
 * close after its tunnel ended, before it resets the outer tunnel. */
#define HBONE_LINGER_MS 5000
/* Tunnels per connection until the server's SETTINGS say otherwise. */
#define DEFAULT_STREAMS 100

enum hc_state { HC_CONNECTING, HC_HANDSHAKING, HC_READY, HC_DEAD };

struct hbone_pool {
    struct event_base *base;
    const char *name;
    uint32_t window;
    uint64_t idle_ms;
    struct list conns; /* struct hc, live */
    struct list inner; /* struct hc, live, of double HBONE: not pooled */
    struct list dead;  /* struct hc, freed by reap */
    struct timer reap;
};

struct hc {
    struct list link;
    struct hbone_pool *pool;
    struct conn c;
    nghttp2_session *ng;
    int state;
    struct addr dst; /* IP:15008 */
    char *id;        /* the identity asked for; NULL: any */
    struct ssl_ctx_st *ctx;
    struct list tunnels; /* struct ht on this connection */
    size_t nstreams;     /* of those, with a stream not yet closed */
    struct timer idle;
    struct hbone_out out; /* what the socket did not take */
    const char *why;      /* set when the connection failed */
    /* unpooled: double HBONE's inner connection, over a tunnel of a
     * pooled one, for one tunnel only */
    unsigned goaway : 1, eof : 1, unpooled : 1;
};

struct ht {
    struct list link; /* hc->tunnels */
    struct hc *hc;    /* NULL once the connection is gone */
    struct conn *c;   /* the relay's */
    int32_t id;       /* 0 until submitted */
    int status;       /* the answer; 0 before it */
    const char *why;  /* failed: the handshake's -1 says this */
    char whybuf[48];
    struct buf rx, tx;
    unsigned tx_eof : 1, deferred : 1, rx_eof : 1, reset : 1, closed : 1;
    char authority[ADDR_STRLEN];
    char forwarded[ADDR_STRLEN + 300];
    char traceparent[56];
    char *baggage;
    char network[64]; /* x-forwarded-network; "": none */
};

static void hc_process(struct hc *hc);

static void wake_tunnel(struct ht *t)
{
    if (t->c != NULL)
        conn_wake(t->c);
}

static void tunnel_fail(struct ht *t, const char *why)
{
    /* A copy: why may live in another tunnel (double HBONE's outer one,
     * "hbone_status_503") freed before this one's owner reads it. */
    if (t->why == NULL && t->status != 200) {
        snprintf(t->whybuf, sizeof(t->whybuf), "%s", why);
        t->why = t->whybuf;
    }
    if (t->status == 200)
        t->reset = 1;
    wake_tunnel(t);
}

/* ---- the pooled connection ----------------------------------------------- */

static void on_reap(void *arg)
{
    struct hbone_pool *p = arg;

    while (!LIST_EMPTY(&p->dead)) {
        struct hc *hc = LIST_ELEM(p->dead.next, struct hc, link);
        list_del(&hc->link);
        nghttp2_session_del(hc->ng);
        timer_dispose(&hc->idle);
        hbone_out_dispose(&hc->out);
        free(hc->id);
        free(hc);
    }
}

static void hc_close(struct hc *hc, const char *why)
{
    struct hbone_pool *p = hc->pool;

    if (hc->state == HC_DEAD)
        return;
    hc->state = HC_DEAD;
    hc->why = why;
    while (!LIST_EMPTY(&hc->tunnels)) {
        struct ht *t = LIST_ELEM(hc->tunnels.next, struct ht, link);
        list_del(&t->link);
        LIST_INIT(&t->link);
        t->hc = NULL;
        tunnel_fail(t, why);
    }
    timer_cancel(&hc->idle);
    conn_close(&hc->c);
    list_del(&hc->link);
    list_append(&p->dead, &hc->link);
    timer_defer(&p->reap);
}

static void hc_idle_check(struct hc *hc)
{
    if (hc->state == HC_READY && hc->nstreams == 0 && !hc->goaway &&
        !hc->unpooled)
        timer_arm(&hc->idle, hc->pool->idle_ms);
}

static void on_hc_idle(void *arg)
{
    struct hc *hc = arg;

    if (hc->nstreams == 0)
        hc_close(hc, "hbone_connection_idle");
}

static ssize_t read_up(nghttp2_session *ng, int32_t id, uint8_t *out,
                       size_t len, uint32_t *flags, nghttp2_data_source *src,
                       void *arg)
{
    struct ht *t = src->ptr;
    size_t n = buf_len(&t->tx);

    (void)ng;
    (void)id;
    (void)arg;
    if (n == 0) {
        if (t->tx_eof) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            return 0;
        }
        t->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n > len)
        n = len;
    memcpy(out, buf_ptr(&t->tx), n);
    buf_consume(&t->tx, n);
    if (buf_len(&t->tx) == 0 && t->tx_eof)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    /* Room for the relay again. */
    wake_tunnel(t);
    return (ssize_t)n;
}

#define NV(n, v)                                                               \
    {                                                                          \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v),              \
            NGHTTP2_NV_FLAG_NONE                                               \
    }

/* The CONNECT, with ztunnel's fields in its order: baggage, forwarded,
 * traceparent. */
static void tunnel_submit(struct hc *hc, struct ht *t)
{
    nghttp2_nv nv[6];
    nghttp2_data_provider dp;
    size_t n = 0;
    int32_t id;

    nv[n++] = (nghttp2_nv)NV(":method", "CONNECT");
    nv[n++] = (nghttp2_nv)NV(":authority", t->authority);
    if (t->baggage != NULL)
        nv[n++] = (nghttp2_nv)NV("baggage", t->baggage);
    if (t->forwarded[0] != '\0')
        nv[n++] = (nghttp2_nv)NV("forwarded", t->forwarded);
    nv[n++] = (nghttp2_nv)NV("traceparent", t->traceparent);
    if (t->network[0] != '\0')
        nv[n++] = (nghttp2_nv)NV("x-forwarded-network", t->network);
    dp.source.ptr = t;
    dp.read_callback = read_up;
    id = nghttp2_submit_request(hc->ng, NULL, nv, n, &dp, t);
    if (id < 0) {
        tunnel_fail(t, "hbone_submit_failed");
        return;
    }
    t->id = id;
    hc->nstreams++;
    timer_cancel(&hc->idle);
}

static struct ht *tunnel_of(struct hc *hc, int32_t id)
{
    return nghttp2_session_get_stream_user_data(hc->ng, id);
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f,
                     const uint8_t *name, size_t nl, const uint8_t *value,
                     size_t vl, uint8_t flags, void *arg)
{
    struct hc *hc = arg;
    struct ht *t;

    (void)ng;
    (void)flags;
    if (f->hd.type != NGHTTP2_HEADERS ||
        f->headers.cat != NGHTTP2_HCAT_RESPONSE ||
        (t = tunnel_of(hc, f->hd.stream_id)) == NULL)
        return 0;
    if (nl == 7 && memcmp(name, ":status", 7) == 0 && vl == 3 &&
        value[0] >= '1' && value[0] <= '9')
        t->status =
            (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
    return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *arg)
{
    struct hc *hc = arg;
    struct ht *t;

    (void)ng;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        hc->goaway = 1;
        return 0;
    }
    if (f->hd.stream_id == 0 || (t = tunnel_of(hc, f->hd.stream_id)) == NULL)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS &&
        f->headers.cat == NGHTTP2_HCAT_RESPONSE && t->status != 200) {
        snprintf(t->whybuf, sizeof(t->whybuf), "hbone_status_%d", t->status);
        t->why = t->whybuf;
    }
    if ((f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        t->rx_eof = 1;
    wake_tunnel(t);
    return 0;
}

static int on_data(nghttp2_session *ng, uint8_t flags, int32_t id,
                   const uint8_t *data, size_t len, void *arg)
{
    struct hc *hc = arg;
    struct ht *t = tunnel_of(hc, id);

    (void)flags;
    if (t == NULL || t->status != 200) {
        nghttp2_session_consume(ng, id, len);
        return 0;
    }
    /* The window is rx's size, given back as the relay reads. */
    if (buf_append(&t->rx, data, len) < 0) {
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id,
                                  NGHTTP2_FLOW_CONTROL_ERROR);
        t->reset = 1;
    }
    wake_tunnel(t);
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code,
                           void *arg)
{
    struct hc *hc = arg;
    struct ht *t = tunnel_of(hc, id);

    (void)ng;
    if (hc->nstreams > 0)
        hc->nstreams--;
    hc_idle_check(hc);
    if (t == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(hc->ng, id, NULL);
    t->closed = 1;
    /* A stream that ends without both END_STREAMs was reset. */
    if (code != NGHTTP2_NO_ERROR || !t->rx_eof)
        tunnel_fail(t, "hbone_stream_reset");
    wake_tunnel(t);
    return 0;
}

static int hc_read(struct hc *hc)
{
    uint8_t chunk[READ_CHUNK];

    for (int i = 0; i < READS_PER_TURN; i++) {
        ssize_t n = conn_read(&hc->c, chunk, sizeof(chunk));
        if (n == CONN_AGAIN)
            return 0;
        if (n <= 0) {
            hc->eof = 1;
            return -1;
        }
        if (nghttp2_session_mem_recv(hc->ng, chunk, (size_t)n) != n)
            return -1;
    }
    conn_wake(&hc->c);
    return 0;
}

/* The TLS session is up: HTTP/2 starts, and the tunnels waiting go. */
static int hc_ready(struct hc *hc)
{
    struct hbone_pool *p = hc->pool;
    nghttp2_session_callbacks *cb = NULL;
    nghttp2_settings_entry iv[3];
    size_t alen = 0;
    const char *alpn = tls_conn_alpn(&hc->c, &alen);
    char uri[512];
    int rc = -1;

    if (!(alen == 2 && memcmp(alpn, "h2", 2) == 0)) {
        hc_close(hc, "hbone_no_h2");
        return -1;
    }
    /* ztunnel checks the workload's own identity, not any of the
     * service's. */
    tls_conn_peer_uri_san(&hc->c, uri, sizeof(uri));
    if (hc->id != NULL && strcmp(uri, hc->id) != 0) {
        log_warn("listener %s: HBONE: %s presented '%s', not %s", p->name,
                 "the peer", uri, hc->id);
        hc_close(hc, "hbone_wrong_identity");
        return -1;
    }
    if (nghttp2_session_callbacks_new(&cb) != 0)
        goto fail;
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_data_source_read_length_callback(
        cb, hbone_data_len);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    {
        nghttp2_option *opt = NULL;
        if (nghttp2_option_new(&opt) != 0)
            goto fail;
        nghttp2_option_set_no_auto_window_update(opt, 1);
        rc = nghttp2_session_client_new2(&hc->ng, cb, hc, opt);
        nghttp2_option_del(opt);
        if (rc != 0)
            goto fail;
    }
    iv[0].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE;
    iv[0].value = p->window;
    iv[1].settings_id = NGHTTP2_SETTINGS_ENABLE_PUSH;
    iv[1].value = 0;
    iv[2].settings_id = NGHTTP2_SETTINGS_MAX_FRAME_SIZE;
    iv[2].value = HBONE_FRAME_MAX;
    if (nghttp2_submit_settings(hc->ng, NGHTTP2_FLAG_NONE, iv, 3) != 0 ||
        nghttp2_session_set_local_window_size(hc->ng, NGHTTP2_FLAG_NONE, 0,
                                              1 << 30) != 0)
        goto fail;
    nghttp2_session_callbacks_del(cb);
    hc->state = HC_READY;
    for (struct list *it = hc->tunnels.next; it != &hc->tunnels;
         it = it->next) {
        struct ht *t = LIST_ELEM(it, struct ht, link);
        if (t->id == 0)
            tunnel_submit(hc, t);
    }
    return 0;
fail:
    nghttp2_session_callbacks_del(cb);
    hc_close(hc, "out_of_memory");
    return -1;
}

static void hc_process(struct hc *hc)
{
    if (hc->state == HC_DEAD)
        return;
    if (hc->state == HC_CONNECTING) {
        if (sock_error(hc->c.fd) != 0) {
            hc_close(hc, "hbone_connect_failed");
            return;
        }
        hc->state = HC_HANDSHAKING;
    }
    if (hc->state == HC_HANDSHAKING) {
        int rc = hc->c.ops->handshake(&hc->c);
        if (rc == 0) {
            conn_want(&hc->c, 1, 0);
            return;
        }
        if (rc < 0 && hc->unpooled && hc->c.why != NULL &&
            strncmp(hc->c.why, "hbone_", 6) == 0) {
            /* The outer tunnel, to the east-west gateway, failed (and
             * said why where it failed). */
            hc_close(hc, hc->c.why);
            return;
        }
        if (rc < 0) {
            const char *v = tls_conn_verify_error(&hc->c);
            char as[ADDR_STRLEN];
            log_warn("listener %s: HBONE: TLS to %s%s failed: %s",
                     hc->pool->name, addr_format(&hc->dst, as, sizeof(as)),
                     hc->unpooled ? " (inner, to the service through the "
                                    "east-west gateway)"
                                  : "",
                     v != NULL ? v : tls_conn_failure(&hc->c));
            hc_close(hc, "hbone_tls_failed");
            return;
        }
        if (hc_ready(hc) < 0)
            return;
    }
    if (!hc->eof && nghttp2_session_want_read(hc->ng) && hc_read(hc) < 0) {
        hc_close(hc, "hbone_connection_closed");
        return;
    }
    if (hbone_out_flush(&hc->out, hc->ng, &hc->c) < 0) {
        hc_close(hc, "hbone_connection_closed");
        return;
    }
    if (hc->out.len == 0 && !nghttp2_session_want_read(hc->ng) &&
        !nghttp2_session_want_write(hc->ng)) {
        hc_close(hc, "hbone_connection_closed");
        return;
    }
    conn_want(&hc->c, nghttp2_session_want_read(hc->ng), hc->out.len > 0);
}

static void on_hc_io(struct conn *c, void *arg)
{
    (void)c;
    hc_process(arg);
}

/* A connection of the key with room for one more tunnel, or a new one. */
static struct hc *hc_get(struct hbone_pool *p, const struct hbone_target *t)
{
    struct addr dst = *t->dst;
    struct hc *hc;
    int fd, inprog;

    if (dst.ss.ss_family == AF_INET)
        ((struct sockaddr_in *)(void *)&dst.ss)->sin_port = htons(HBONE_PORT);
    else if (dst.ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)(void *)&dst.ss)->sin6_port = htons(HBONE_PORT);
    else
        return NULL;
    for (struct list *it = p->conns.next; it != &p->conns; it = it->next) {
        uint32_t max = DEFAULT_STREAMS;
        size_t busy;
        hc = LIST_ELEM(it, struct hc, link);
        if (hc->goaway || hc->ctx != t->ctx || !addr_equal(&hc->dst, &dst) ||
            (hc->id == NULL) != (t->id == NULL) ||
            (t->id != NULL && strcmp(hc->id, t->id) != 0))
            continue;
        if (hc->ng != NULL)
            max = nghttp2_session_get_remote_settings(
                hc->ng, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
        busy = 0;
        for (struct list *k = hc->tunnels.next; k != &hc->tunnels; k = k->next)
            busy++;
        if (busy < max)
            return hc;
    }
    hc = calloc(1, sizeof(*hc));
    if (hc == NULL)
        return NULL;
    if (t->id != NULL && (hc->id = strdup(t->id)) == NULL) {
        free(hc);
        return NULL;
    }
    fd = sock_connect(&dst, &inprog);
    if (fd < 0) {
        free(hc->id);
        free(hc);
        return NULL;
    }
    hc->pool = p;
    hc->dst = dst;
    hc->ctx = t->ctx;
    LIST_INIT(&hc->tunnels);
    timer_init(&hc->idle, p->base, on_hc_idle, hc);
    conn_init(&hc->c, p->base, fd, on_hc_io, hc);
    /* No SNI: the server picks its certificate without one. */
    if (tls_conn_connect(&hc->c, t->ctx, NULL) < 0 ||
        SSL_set_alpn_protos(hc->c.tls, (const uint8_t *)"\x02h2", 3) != 0) {
        conn_close(&hc->c);
        timer_dispose(&hc->idle);
        free(hc->id);
        free(hc);
        return NULL;
    }
    hc->state = HC_CONNECTING;
    list_append(&p->conns, &hc->link);
    conn_want(&hc->c, 0, 1);
    if (!inprog)
        conn_wake(&hc->c);
    return hc;
}

static void outer_io(struct conn *c, void *arg)
{
    (void)c;
    (void)arg;
}

static struct ht *tunnel_new(struct hbone_pool *pool,
                             const struct hbone_target *tg);
static void tunnel_free(struct ht *t);
static int tunnel_attach(struct ht *t, struct conn *c, struct hbone_pool *pool,
                         const struct hbone_target *tg,
                         void (*on_io)(struct conn *, void *), void *arg);

/* Double HBONE: a connection of its own, for one tunnel, over an outer
 * tunnel to the east-west gateway (pooled like any tunnel, to the
 * gateway's address and identity). Its TLS goes to the final service's
 * identities (t->inner_ctx). */
static struct hc *hc_get_inner(struct hbone_pool *p,
                               const struct hbone_target *t)
{
    struct hbone_target ot;
    struct conn *outer = calloc(1, sizeof(*outer));
    struct ht *oht;
    struct hc *hc;
    int efd;

    if (outer == NULL)
        return NULL;
    /* The outer CONNECT: the authority and a traceparent only. */
    memset(&ot, 0, sizeof(ot));
    ot.ctx = t->ctx;
    ot.dst = t->dst;
    ot.id = t->id;
    ot.authority = t->authority;
    if ((oht = tunnel_new(p, &ot)) == NULL) {
        free(outer);
        return NULL;
    }
    if (tunnel_attach(oht, outer, p, &ot, outer_io, NULL) < 0) {
        tunnel_free(oht);
        free(outer);
        return NULL;
    }
    hc = calloc(1, sizeof(*hc));
    efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (hc == NULL || efd < 0) {
        if (efd >= 0)
            close(efd);
        free(hc);
        conn_close(outer);
        free(outer);
        return NULL;
    }
    hc->pool = p;
    hc->dst = *t->dst;
    hc->ctx = t->inner_ctx;
    hc->unpooled = 1;
    LIST_INIT(&hc->tunnels);
    timer_init(&hc->idle, p->base, on_hc_idle, hc);
    conn_init(&hc->c, p->base, efd, on_hc_io, hc);
    if (tls_conn_connect_over(&hc->c, outer, t->inner_ctx) < 0 ||
        SSL_set_alpn_protos(hc->c.tls, (const uint8_t *)"\x02h2", 3) != 0) {
        /* Before the transport took outer, c's close leaves it. */
        int took = hc->c.tls != NULL;
        conn_close(&hc->c);
        if (!took) {
            conn_close(outer);
            free(outer);
        }
        timer_dispose(&hc->idle);
        free(hc);
        return NULL;
    }
    hc->state = HC_HANDSHAKING;
    list_append(&p->inner, &hc->link);
    conn_want(&hc->c, 1, 0);
    conn_wake(&hc->c);
    return hc;
}

/* ---- the tunnel's transport ---------------------------------------------- */

static ssize_t ht_read(struct conn *c, void *p, size_t n)
{
    struct ht *t = c->tls;
    size_t k = buf_len(&t->rx);

    if (k == 0) {
        if (t->reset) {
            c->why = "HBONE stream reset";
            return CONN_ERROR;
        }
        return t->rx_eof ? 0 : CONN_AGAIN;
    }
    if (k > n)
        k = n;
    memcpy(p, buf_ptr(&t->rx), k);
    buf_consume(&t->rx, k);
    if (t->hc != NULL && t->id > 0 && !t->closed) {
        nghttp2_session_consume(t->hc->ng, t->id, k);
        conn_wake(&t->hc->c);
    }
    return (ssize_t)k;
}

static ssize_t ht_write(struct conn *c, const void *p, size_t n)
{
    struct ht *t = c->tls;
    size_t room = buf_room(&t->tx);

    c->write_needs_read = 0;
    if (t->reset || t->hc == NULL || t->closed) {
        c->why = "HBONE stream reset";
        return CONN_ERROR;
    }
    if (room == 0) {
        /* Wait for the wake a sent frame gives, not for the eventfd. */
        c->write_needs_read = 1;
        return CONN_AGAIN;
    }
    if (n > room)
        n = room;
    if (buf_append(&t->tx, p, n) < 0)
        return CONN_ERROR;
    if (t->deferred) {
        t->deferred = 0;
        nghttp2_session_resume_data(t->hc->ng, t->id);
    }
    conn_wake(&t->hc->c);
    return (ssize_t)n;
}

static int ht_handshake(struct conn *c)
{
    struct ht *t = c->tls;

    if (t->status == 200)
        return 1;
    if (t->why != NULL) {
        c->why = t->why;
        return -1;
    }
    return 0;
}

static void ht_shutdown(struct conn *c)
{
    struct ht *t = c->tls;

    t->tx_eof = 1;
    if (t->hc != NULL && t->deferred) {
        t->deferred = 0;
        nghttp2_session_resume_data(t->hc->ng, t->id);
    }
    if (t->hc != NULL)
        conn_wake(&t->hc->c);
}

static void ht_dispose(struct conn *c)
{
    struct ht *t = c->tls;
    struct hc *hc = t->hc;

    c->tls = NULL;
    if (hc != NULL) {
        list_del(&t->link);
        if (t->id > 0 && !t->closed) {
            nghttp2_session_set_stream_user_data(hc->ng, t->id, NULL);
            nghttp2_submit_rst_stream(hc->ng, NGHTTP2_FLAG_NONE, t->id,
                                      NGHTTP2_CANCEL);
            conn_wake(&hc->c);
        }
        hc_idle_check(hc);
    }
    /* Double HBONE's inner connection served this tunnel only. Once its
     * stream ended both ways, the connection ends as cleanly: TLS
     * close_notify and END_STREAM on the outer tunnel, then it waits (at
     * most HBONE_LINGER_MS) for the far end to close, so that the
     * gateway sees the outer tunnel end rather than reset. */
    if (hc != NULL && hc->unpooled) {
        if (t->closed && t->rx_eof && !t->reset && hc->state == HC_READY &&
            !hc->eof) {
            hc->c.ops->shutdown(&hc->c);
            timer_arm(&hc->idle, HBONE_LINGER_MS);
            conn_wake(&hc->c);
        } else {
            hc_close(hc, "hbone_tunnel_closed");
        }
    }
    tunnel_free(t);
}

static const struct conn_ops ht_ops = {ht_read, ht_write, ht_handshake,
                                       ht_shutdown, ht_dispose};

int hbone_conn_is(const struct conn *c)
{
    return c->ops == &ht_ops;
}

static void tunnel_free(struct ht *t)
{
    buf_dispose(&t->rx);
    buf_dispose(&t->tx);
    free(t->baggage);
    free(t);
}

/* A tunnel's fields, as the CONNECT will carry them; NULL when memory is
 * short. */
static struct ht *tunnel_new(struct hbone_pool *pool,
                             const struct hbone_target *tg)
{
    struct ht *t = calloc(1, sizeof(*t));
    uint8_t rnd[24];

    if (t == NULL)
        return NULL;
    if (tg->authority != NULL)
        snprintf(t->authority, sizeof(t->authority), "%s", tg->authority);
    else
        addr_format(tg->dst, t->authority, sizeof(t->authority));
    if (tg->src != NULL && tg->srclen > 0) {
        char src[ADDR_STRLEN];
        addr_format_sa(tg->src, tg->srclen, src, sizeof(src));
        /* ztunnel's build_forwarded(). */
        if (tg->host != NULL && tg->host[0] != '\0')
            snprintf(t->forwarded, sizeof(t->forwarded), "for=\"%s\";host=%s",
                     src, tg->host);
        else
            snprintf(t->forwarded, sizeof(t->forwarded), "for=\"%s\"", src);
    }
    if (tg->network != NULL)
        snprintf(t->network, sizeof(t->network), "%s", tg->network);
    /* A new trace per tunnel, unsampled, as ztunnel's TraceParent::new(). */
    if (RAND_bytes(rnd, sizeof(rnd)) != 1)
        memset(rnd, 0x5a, sizeof(rnd));
    tctx_traceparent(rnd, rnd + 16, 0, t->traceparent);
    if (tg->baggage != NULL && tg->baggage[0] != '\0' &&
        (t->baggage = strdup(tg->baggage)) == NULL) {
        free(t);
        return NULL;
    }
    buf_init(&t->rx, pool->window);
    buf_init(&t->tx, pool->window);
    return t;
}

/* Makes c the tunnel t on a connection for tg (pooled, or double HBONE's
 * own). 0, or -1 (c and t untouched). */
static int tunnel_attach(struct ht *t, struct conn *c, struct hbone_pool *pool,
                         const struct hbone_target *tg,
                         void (*on_io)(struct conn *, void *), void *arg)
{
    struct hc *hc;
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

    if (efd < 0)
        return -1;
    hc = tg->inner_ctx != NULL ? hc_get_inner(pool, tg) : hc_get(pool, tg);
    if (hc == NULL) {
        close(efd);
        return -1;
    }
    conn_init(c, pool->base, efd, on_io, arg);
    c->ops = &ht_ops;
    c->tls = t;
    t->c = c;
    t->hc = hc;
    list_append(&hc->tunnels, &t->link);
    if (hc->state == HC_READY) {
        tunnel_submit(hc, t);
        conn_wake(&hc->c);
    }
    return 0;
}

int hbone_conn_open(struct conn *c, struct hbone_pool *pool,
                    const struct hbone_target *tg,
                    void (*on_io)(struct conn *, void *), void *arg)
{
    struct ht *t = tunnel_new(pool, tg);

    if (t == NULL)
        return -1;
    if (tunnel_attach(t, c, pool, tg, on_io, arg) < 0) {
        tunnel_free(t);
        return -1;
    }
    return 0;
}

/* ---- the pool ------------------------------------------------------------ */

struct hbone_pool *hbone_pool_new(struct event_base *base, const char *name,
                                  uint32_t window, uint64_t idle_ms)
{
    struct hbone_pool *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    p->base = base;
    p->name = name;
    p->window = window;
    p->idle_ms = idle_ms;
    LIST_INIT(&p->conns);
    LIST_INIT(&p->inner);
    LIST_INIT(&p->dead);
    timer_init(&p->reap, base, on_reap, p);
    return p;
}

void hbone_pool_free(struct hbone_pool *p)
{
    if (p == NULL)
        return;
    /* The inner connections first: each closes its outer tunnel, on a
     * pooled connection. */
    while (!LIST_EMPTY(&p->inner))
        hc_close(LIST_ELEM(p->inner.next, struct hc, link), "closing");
    while (!LIST_EMPTY(&p->conns))
        hc_close(LIST_ELEM(p->conns.next, struct hc, link), "closing");
    timer_cancel(&p->reap);
    on_reap(p);
    timer_dispose(&p->reap);
    free(p);
}
