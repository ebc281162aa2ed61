#ifndef STRAIT_PROXY_HBONE_CLIENT_H
#define STRAIT_PROXY_HBONE_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/addr.h"

struct conn;
struct event_base;
struct hbone_pool;
struct ssl_ctx_st;

/*
 * The HBONE client: TCP streams to workloads of Istio's ambient mesh go
 * as HTTP/2 CONNECT tunnels to their address's port 15008, over mTLS with
 * this node's SPIFFE certificate, as ztunnel's outbound sends them
 * (src/proxy/outbound.rs). A pool (one per worker and listener) keeps
 * one HTTP/2 connection per (destination address, identity, context) and
 * puts every tunnel to it on that connection, opening another only when
 * the server's MAX_CONCURRENT_STREAMS is reached or it sent GOAWAY.
 *
 * A tunnel is a struct conn with its own transport (conn_ops) over an
 * HTTP/2 stream, so the TCP relay uses it as any upstream connection:
 * its "handshake" is the CONNECT exchange (done at the 200), reads and
 * writes move DATA within the stream's flow control, shutdown sends
 * END_STREAM. The conn's fd is an eventfd that only carries its event;
 * the tunnel wakes the conn (conn_wake) whenever it can do more.
 */

/* hbone_pool_new() makes an empty pool on base (the worker's). window:
 * the bytes each tunnel holds per direction (the stream window). idle_ms:
 * how long a connection without tunnels is kept. name: for logs, must
 * outlive the pool. NULL when memory is short. */
struct hbone_pool *hbone_pool_new(struct event_base *base, const char *name,
                                  uint32_t window, uint64_t idle_ms);

/* hbone_pool_free() closes every connection and fails their tunnels. */
void hbone_pool_free(struct hbone_pool *p);

/*
 * What a tunnel is opened to and with. Everything is copied.
 *
 * Double HBONE (inner_ctx set: a workload on another network, reached
 * through that network's ambient east-west gateway, as ztunnel's
 * outbound does it): the outer tunnel goes to dst (the gateway's
 * address, port 15008) on a pooled connection whose server must present
 * id (the gateway's identity), with :authority authority and nothing
 * else but traceparent. Inside that stream, a TLS session of its own
 * (inner_ctx: ALPN h2, the final service's identities), not pooled,
 * carries one HTTP/2 connection with the real CONNECT: the same
 * authority, baggage, Forwarded, traceparent, and x-forwarded-network
 * (network, this node's) on it only.
 */
struct hbone_target {
    struct ssl_ctx_st *ctx;     /* the cluster's (must outlive the tunnel) */
    const struct addr *dst;     /* the workload: IP and port (:authority) */
    const char *id;             /* the SPIFFE ID it must present; NULL: any */
    const struct sockaddr *src; /* the client: Forwarded for=; NULL: none */
    socklen_t srclen;
    const char *host;    /* the service it was sent to: ;host=; NULL */
    const char *baggage; /* this node's baggage; NULL: none */
    /* :authority instead of dst's address ("host:port"); NULL: dst */
    const char *authority;
    struct ssl_ctx_st *inner_ctx; /* double HBONE: see above; NULL: single */
    const char *network;          /* double HBONE: x-forwarded-network */
};

/*
 * hbone_conn_open() makes c a tunnel to t->dst through pool, calling
 * on_io(c, arg) whenever it can make progress. The CONNECT goes as soon
 * as the pooled connection is up; c's handshake op says 0 until the
 * answer, 1 on 200, -1 otherwise with c->why ("hbone_status_503",
 * "hbone_connect_failed", "hbone_tls_failed", "hbone_wrong_identity",
 * "hbone_no_h2", ...). 0, or -1 (out of descriptors or memory; c is
 * untouched). conn_close(c) ends the tunnel (RST_STREAM CANCEL if open).
 */
int hbone_conn_open(struct conn *c, struct hbone_pool *pool,
                    const struct hbone_target *t,
                    void (*on_io)(struct conn *, void *), void *arg);

/* hbone_conn_is() is true when c is a tunnel (its why, not TLS's, says
 * why its handshake failed). */
int hbone_conn_is(const struct conn *c);

#endif
