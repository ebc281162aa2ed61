#ifndef STRAIT_PROXY_HTTP_LISTENER_T_H
#define STRAIT_PROXY_HTTP_LISTENER_T_H

/* Types shared by http_listener.c (listener, connections) and pipeline.c
 * (routing and upstream exchanges); not an API. */

#include <netinet/in.h>
#include <sys/socket.h>

#include "net/acceptor.h"
#include "net/conn.h"
#include "event/logsink.h"
#include "event/reap-t.h"
#include "event/spanq.h"
#include "event/timer-t.h"
#include "proxy/http_listener.h"
#include "proxy/stats.h"
#include "upstream/pool-t.h"

struct h2_server;

/* A worker's upstream pool for one cluster, shared by the route views
 * whose routes hold that cluster, so idle connections outlive a routes
 * change that keeps the cluster. */
struct lpool {
    struct upool p;
    size_t refs;
};

/*
 * One worker's view of a generation of its listener's routes: the routes,
 * the pools of their clusters (pools[i] for r->clusters[i]) and the
 * streams routing by them. Worker-local, so a stream pins it without an
 * atomic. A replaced view lives on in l->old until its last stream ends.
 */
struct wroutes {
    struct http_routes *r; /* one reference */
    unsigned gen;
    size_t pins;
    struct lpool **pools;
    struct list link;
    /* The worker's Lua state for r->lua, made by the first request that
     * needs it (http_lua_vm); lua_failed: making it failed. */
    struct luavm *lua;
    int lua_failed;
};

struct http_listener {
    struct plistener pl;             /* first: workers see a plistener */
    struct http_listener_conf *conf; /* one reference */
    struct event_base *base;
    int worker;
    int fd;
    struct acceptor acc;
    struct reaper *reaper; /* the worker's */
    struct reap_node reap; /* frees dead, dead_routes, mirrors_dead */
    size_t active;
    struct list conns;
    struct list dead;
    plistener_idle_fn on_idle;
    void *arg;
    struct bufpool pool; /* body buffers */
    struct bufpool io;   /* HTTP/1 read buffers (scratch.io) */
    struct h1_scratch scratch;
    struct wroutes *routes;   /* the current view */
    struct list old;          /* replaced views still pinned */
    struct list dead_routes;  /* unpinned views, freed by the reaper */
    struct list mirrors;      /* mirrored requests in flight (pstream) */
    struct list mirrors_dead; /* finished ones, freed by the reaper */
    size_t lua_calls;         /* strait.http.request calls in flight */
    struct ssl_ctx_st *ssl_ctx;
    unsigned tls_gen;
    uint64_t rng;
    int adopting; /* no socket of its own: http_listener_adopt() feeds it */
    int stopped;  /* stop_accepting ran: adopted connections are drained */
    int draining; /* drain_connections ran: new connections are drained */
    struct lsink_buf alog;    /* access-log lines of this worker's turn */
    struct spanq_buf spans;   /* finished spans of this worker's turn */
    struct hbone_pool *hbone; /* tunnels to HBONE endpoints; NULL: none yet */
};

enum http_conn_stage {
    HC_PROXY, /* reading the PROXY protocol header */
    HC_PEEK,  /* PERMISSIVE: TLS or plaintext, by the first byte */
    HC_HANDSHAKE,
    HC_DETECT,
    HC_H1,
    HC_H2,
    HC_CLOSED
};

/* A downstream peer's address: IPv4 or IPv6 (a unix-socket peer keeps
 * its family only); a sockaddr_storage would be 100 bytes more on every
 * connection. */
union http_peer {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
};

/* One per downstream connection, kept while it is idle: keep it small. */
struct http_conn {
    struct list link;
    struct http_listener *l;
    struct conn conn;
    /* The handshake/detection timeout; lent to the HTTP/1 codec as its
     * timer once the codec owns the connection. */
    struct timer timer;
    enum http_conn_stage stage;
    int drain; /* the listener stopped while this one was still starting */
    int overload_drained; /* told to close by disable_http_keepalive */
    int hello_rejected;   /* on_tls_client_hello called c:reject() */
    /* HC_DETECT: bytes of the h2c preface already taken off the socket
     * (a preface that arrives in pieces). */
    unsigned preface_got;
    struct h1_server *h1;
    struct h2_server *h2;
    /* The client: the socket's peer, or the source a PROXY protocol
     * header named (then direct holds the socket's peer, malloc'd;
     * NULL: the same as peer). */
    union http_peer peer;
    union http_peer *direct;
    struct pp_reader *pp; /* HC_PROXY only (malloc'd with its buffer) */
    socklen_t peerlen;    /* bytes of peer in use */
    char peer_ip[48];
    /* The GeoIP result of peer (malloc'd at the first request that asks,
     * freed with the connection; NULL: none yet), valid while the
     * databases' generation is geo_gen. */
    struct geo_result *geo;
    unsigned geo_gen;
};

static inline struct proxy_counters *http_shard(const struct http_listener *l)
{
    return proxy_counters(l->conf->stats, l->worker);
}

/*
 * http_listener_pin() returns the view of the listener's current routes
 * (taking a newer generation first if one was published) and pins it:
 * what it points to stays valid until http_listener_unpin().
 * http_listener_repin() pins a view already pinned once more (a mirrored
 * copy runs on the routes of the request it copies).
 */
struct wroutes *http_listener_pin(struct http_listener *l);
/* http_lua_tls.c: on a TLS connection just accepted, has the listener's
 * LuaPolicies see its ClientHello (on_tls_client_hello). */
void http_lua_tls_start(struct http_conn *hc);
void http_listener_unpin(struct http_listener *l, struct wroutes *w);

static inline struct wroutes *http_listener_repin(struct wroutes *w)
{
    w->pins++;
    return w;
}

/*
 * http_pool() is the worker's pool of upstream connections for a cluster
 * of a pinned view, and http_cluster() that cluster. The request path
 * reaches pools and clusters only through these two, so where they live
 * can change in one place.
 */
static inline struct upool *http_pool(const struct wroutes *w, int cluster)
{
    return &w->pools[cluster]->p;
}

static inline const struct cluster *http_cluster(const struct wroutes *w,
                                                 int cluster)
{
    return w->r->clusters[cluster];
}

/* pipeline.c */
extern const struct hstream_handler pipeline_handler;

/* http_mirrors_reap() frees the listener's finished mirrored requests (on
 * the reaper's turn, never inside their own callbacks); http_mirrors_free()
 * also stops those still in flight, before the pools go. */
void http_mirrors_reap(struct http_listener *l);
void http_mirrors_free(struct http_listener *l);

/* http_listener_reap_later() has the worker's reaper free l's dead
 * connections, views and mirrored requests on a later loop turn, then
 * report idleness if l is stopped and empty. */
void http_listener_reap_later(struct http_listener *l);

#endif
