#ifndef STRAIT_PROXY_L4_RELAY_H
#define STRAIT_PROXY_L4_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"
#include "core/bufpool.h"
#include "core/list.h"
#include "event/logsink.h"
#include "event/reap-t.h"
#include "net/conn.h"

struct cluster;
struct cluster_counters;
struct event;
struct event_base;
struct stats_block;
struct series_labels;
struct series_table;
struct sockaddr_storage;
struct ssl_ctx_st;
struct afmt;
struct hbone_pool;
struct lsink;

/*
 * The relay engine of every L4 listener (l4_listener.c: Gateway TCP and TLS
 * routes, and bootstrap tcp listeners): one per worker per listener, on
 * that worker's thread only. It owns the sessions it relays: each copies
 * bytes between a downstream connection (plain, or TLS it terminated) and
 * an upstream connection it opens to one of the session's endpoints
 * (plain, or TLS it originates for a DestinationRule).
 */
struct l4_relay_params {
    const char *name; /* the listener's, for logs; must outlive the relay */
    struct stats_block *stats; /* not referenced; must outlive it */
    uint64_t connect_timeout_ms;
    int connect_attempts;
    uint64_t idle_timeout_ms;
    size_t buffer_size;
    int access_log;
    /* The access log's Envoy format (owned by the listener's conf; NULL:
     * strait's own line) and its writer (NULL: straight to the log). */
    struct afmt *alog_fmt;
    struct lsink *alog_sink;
    /* Istio's TCP metrics: the table (NULL: off) and the node's labels,
     * both borrowed from the conf. */
    struct series_table *metrics;
    struct series_labels *metrics_src;
    /* HBONE endpoints (hbone_client.h): the bytes a tunnel holds per
     * direction, how long an unused connection is kept, and this node's
     * baggage (borrowed from the conf; NULL: none). */
    uint32_t hbone_window;
    uint64_t hbone_idle_ms;
    const char *hbone_baggage;
};

struct l4_relay {
    struct l4_relay_params p;
    struct event_base *base;
    int worker;
    size_t active;
    struct list sessions;
    struct bufpool pool;   /* relay buffers of p.buffer_size */
    struct list dead;      /* closed sessions freed on the next loop turn */
    struct reaper *reaper; /* the worker's */
    struct reap_node reap; /* frees dead */
    void (*on_reap)(void *arg); /* after each reaping turn */
    void *arg;
    struct lsink_buf alog;    /* access-log lines of this worker's turn */
    struct hbone_pool *hbone; /* HBONE connections; NULL until needed */
};

/* l4_relay_init() prepares r; closed sessions are freed through reaper
 * (the worker's, which outlives r), and on_reap(arg) runs on the loop
 * after they were (owners check there whether they are idle). 0 or -1. */
int l4_relay_init(struct l4_relay *r, struct event_base *base,
                  struct reaper *reaper, int worker,
                  const struct l4_relay_params *p, void (*on_reap)(void *arg),
                  void *arg);

/* l4_relay_dispose() closes every session at once and frees r's parts. */
void l4_relay_dispose(struct l4_relay *r);

/* l4_relay_kick() makes on_reap run on the next loop turn. */
void l4_relay_kick(struct l4_relay *r);

/* What the access log says of a session besides addresses and bytes. */
struct l4_relay_meta {
    const char *sni;          /* copied; NULL or "": none */
    const char *route;        /* must outlive the session (the conf's) */
    const char *cluster;      /* idem */
    const char *peer_uri_san; /* copied; the verified client's URI SAN */
    /* The socket's own peer when peer is the source a PROXY header named
     * (%DOWNSTREAM_DIRECT_REMOTE_ADDRESS%); copied; NULL: peer. */
    const struct sockaddr_storage *direct;
    socklen_t directlen;
    int tls_terminated;
    /* Upstream TLS origination (DestinationRule tls): the cluster's client
     * context, with its SAN checks, and SNI; both borrowed and must
     * outlive the session (the caller's conf holds the cluster). NULL:
     * plaintext. alpn: the protocols offered, in wire format (NULL: none,
     * whatever the context offers to HTTP). */
    struct ssl_ctx_st *up_tls;
    const char *up_sni;
    const uint8_t *up_alpn;
    size_t up_alpn_len;
    /* TLS was asked for and could not be set up: the session is refused
     * (flag UF) rather than relayed in the clear. */
    int up_tls_error;
    /* The destination cluster's counters of this worker (connections,
     * failures); NULL: none. Must outlive the session. */
    struct cluster_counters *cluster_stats;
    /* The cluster eps are the endpoints of, to tell its outlier
     * detection how each connect went (a failure counts as Envoy's
     * connect failure, a success resets the streak); NULL: not told.
     * Borrowed like cluster_stats. */
    struct cluster *outlier;
    /* The destination cluster's metric labels (borrowed like the
     * cluster's name); NULL: unknown. */
    struct series_labels *metrics_dst;
    /* The cluster whose endpoints eps are, when some of them are reached
     * through HBONE (cluster.hbone); borrowed like cluster_stats. Those
     * endpoints get an HBONE tunnel instead of a TCP connection (and no
     * up_tls: HBONE is the mesh's mTLS). */
    const struct cluster *hbone;
};

/*
 * l4_relay_start() relays down to one of eps (tried from first % neps
 * on, round robin over the connect attempts). down is moved into the
 * session (conn_move): its fd and TLS state are the session's from now on.
 * eps must outlive the session (the caller's conf, which the caller's
 * plistener holds while it has sessions). neps 0 closes the session with
 * "no_healthy_upstream" (flag UH). peer may be NULL. meta may be NULL.
 *
 * With meta->up_tls each upstream connection does a TLS client handshake
 * (within the connect timeout) before any byte is relayed; one that fails
 * counts as a failed connect attempt, and when none is left the session
 * ends "upstream_tls_refused:<why the certificate was refused>" or
 * "upstream_tls_handshake_<failure>" (flag UF).
 */
void l4_relay_start(struct l4_relay *r, struct conn *down,
                    const struct sockaddr_storage *peer, socklen_t peerlen,
                    const struct addr *eps, size_t neps, size_t first,
                    const struct l4_relay_meta *meta, uint64_t start_ms);

#endif
