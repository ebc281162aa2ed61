#ifndef STRAIT_HTTP1_H1_CLIENT_H
#define STRAIT_HTTP1_H1_CLIENT_H

#include <stdint.h>

#include "core/list.h"
#include "event/timer-t.h"
#include "http/stream.h"
#include "http1/h1_server.h"
#include "net/conn.h"

struct addr;
struct bufpool;
struct event_base;
struct ssl_ctx_st;

/*
 * The client side of HTTP/1.1: one upstream connection carrying one
 * exchange at a time, kept alive between them by the pool that owns it.
 * It reads the request from an hstream (head and req_body) and writes the
 * response into it (resp and resp_body).
 */
struct h1_client;

struct h1_client_hooks {
    /* The connection could not be made (refused, timed out: timeout set). */
    void (*connect_failed)(void *ctx, struct h1_client *c, int timeout);
    /* s->resp holds the response head. */
    void (*head)(void *ctx, struct h1_client *c);
    /* The exchange ended. ok: response complete; reusable: the connection
     * can carry another request. On !ok, flags say why (HFLAG_UC, UPE). */
    void (*done)(void *ctx, struct h1_client *c, int ok, int reusable,
                 unsigned flags);
    /* A pooled idle connection closed (peer FIN or idle timeout). */
    void (*idle_closed)(void *ctx, struct h1_client *c);
};

struct h1_client_conf {
    struct http_limits lim;
    uint64_t connect_timeout_ms;
    uint64_t idle_timeout_ms;
};

struct h1_client {
    struct conn conn;
    struct event_base *base;
    struct timer timer;
    const struct h1_client_conf *conf;
    const struct h1_client_hooks *hooks;
    void *ctx;
    struct h1_scratch *scratch;
    struct buf in;
    struct buf out;
    struct hstream *s;
    int state; /* private */
    int wq;
    int rp;
    int rb;
    uint64_t left;
    struct h1_chunked chunked;
    unsigned keep_alive : 1;
    unsigned write_blocked : 1;
    unsigned eof : 1;
    unsigned closed : 1;
    unsigned write_failed : 1; /* the upstream stopped taking the request */
    uint64_t requests;
    size_t endpoint;  /* index in the owner's endpoint list */
    struct list link; /* the owner's lists */
};

/* h1_client_connect() starts connecting to a (with TLS over tls, sending
 * and verifying sni, when tls is set); the hooks and ctx receive the
 * outcome. NULL when no socket could be created (errno set). */
struct h1_client *h1_client_connect(struct event_base *base,
                                    const struct addr *a,
                                    struct ssl_ctx_st *tls, const char *sni,
                                    const struct h1_client_conf *conf,
                                    const struct h1_client_hooks *hooks,
                                    void *ctx, struct h1_scratch *scratch);

/* h1_client_connect_via() is h1_client_connect() over a connection op
 * makes (a tunnel), up once its handshake says so, within the connect
 * timeout. NULL when op could not start one. */
struct h1_client *h1_client_connect_via(struct event_base *base,
                                        const struct conn_opener *op,
                                        const struct h1_client_conf *conf,
                                        const struct h1_client_hooks *hooks,
                                        void *ctx, struct h1_scratch *scratch);

/* h1_client_start() sends s (a reference is taken) as soon as the
 * connection is up. The connection must be idle or connecting. */
void h1_client_start(struct h1_client *c, struct hstream *s);

/* h1_client_set_owner() changes who receives the hooks (pool vs proxy). */
void h1_client_set_owner(struct h1_client *c,
                         const struct h1_client_hooks *hooks, void *ctx);

/* h1_client_idle() parks a finished connection: it watches for the peer
 * closing and for the idle timeout. */
void h1_client_idle(struct h1_client *c);

/* h1_client_abandon() stops c at once: no hook runs any more, the stream
 * is let go; the memory is freed later with h1_client_free(). */
void h1_client_abandon(struct h1_client *c);

/* h1_client_free() closes the connection and drops the stream, if any. */
void h1_client_free(struct h1_client *c);

#endif
