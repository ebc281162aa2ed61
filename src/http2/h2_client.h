#ifndef STRAIT_HTTP2_H2_CLIENT_H
#define STRAIT_HTTP2_H2_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/list.h"
#include "event/timer-t.h"
#include "http/stream.h"
#include "net/conn.h"

struct addr;
struct event_base;
struct ssl_ctx_st;

/*
 * HTTP/2 towards an upstream (h2 over TLS by ALPN, or h2c with prior
 * knowledge): one connection multiplexes many exchanges. The pool that
 * owns connections hears of readiness and closure; each exchange reports
 * to its own hooks.
 */
struct h2_client;
struct h2c_stream;

struct h2c_stream_hooks {
    void (*head)(void *ctx);
    /* ok: the response is complete; otherwise flags (HFLAG_UC, UPE, UF). */
    void (*done)(void *ctx, int ok, unsigned flags);
};

struct h2_client_hooks {
    /* The connection closed; the owner frees it on a later turn. */
    void (*closed)(void *owner, struct h2_client *c);
};

struct h2_client_conf {
    uint64_t connect_timeout_ms;
    uint64_t idle_timeout_ms;
    uint32_t stream_window;
    uint32_t connection_window;
    /* Bounds on one response head or trailer block, decoded: octets
     * (name + value + 32 per field) and fields. Past them: UPE, closed. */
    size_t max_head;
    size_t max_headers;
};

struct h2_client {
    struct conn conn;
    struct event_base *base;
    struct timer timer;
    void *ng; /* nghttp2_session */
    const struct h2_client_conf *conf;
    const struct h2_client_hooks *hooks;
    void *owner;
    struct buf *out;
    struct list streams; /* struct h2c_stream, submitted or pending */
    size_t nstreams;
    int state; /* private */
    unsigned write_blocked : 1;
    unsigned closed : 1;
    unsigned goaway : 1;
    unsigned tunnel : 1; /* over a conn_opener's connection: no ALPN */
    size_t endpoint;
    uint64_t requests;
    uint64_t max_requests; /* 0: no limit; then no new streams (drain) */
    struct list link;      /* the owner's list */
};

/* h2_client_connect() starts a connection to a; with tls, TLS (ALPN h2) is
 * negotiated first with sni. NULL when no socket could be made. */
struct h2_client *h2_client_connect(struct event_base *base,
                                    const struct addr *a,
                                    struct ssl_ctx_st *tls, const char *sni,
                                    const struct h2_client_conf *conf,
                                    const struct h2_client_hooks *hooks,
                                    void *owner);

/* h2_client_connect_via() is h2_client_connect() over a connection op
 * makes (a tunnel): HTTP/2 with prior knowledge once its handshake says
 * it is up. NULL when op could not start one. */
struct h2_client *h2_client_connect_via(struct event_base *base,
                                        const struct conn_opener *op,
                                        const struct h2_client_conf *conf,
                                        const struct h2_client_hooks *hooks,
                                        void *owner);

/* h2_client_has_room() is true when another stream may start now or once
 * connected (peer's MAX_CONCURRENT_STREAMS, no GOAWAY). */
int h2_client_has_room(const struct h2_client *c);

/* h2_client_submit() sends s (a reference is taken) on c, now or when
 * connected. Returns the exchange, or NULL (out of memory). */
struct h2c_stream *h2_client_submit(struct h2_client *c, struct hstream *s,
                                    const struct h2c_stream_hooks *hooks,
                                    void *ctx);

/* h2_client_cancel() resets the exchange (RST_STREAM CANCEL); its hooks
 * are not called any more. */
void h2_client_cancel(struct h2c_stream *st);

/* h2_client_free() closes the connection; open exchanges end with
 * HFLAG_UC (their done hooks run). */
void h2_client_free(struct h2_client *c);

#endif
