#ifndef STRAIT_PROXY_HTTP_PROXY_T_H
#define STRAIT_PROXY_HTTP_PROXY_T_H

/* Types shared by http_proxy.c (listener, connections) and http_stream.c
 * (routing and upstream exchanges); not an API. */

#include <sys/socket.h>

#include "net/acceptor.h"
#include "net/conn.h"
#include "proxy/http_proxy.h"

struct h2_server;

struct http_listener {
    struct plistener pl; /* first: workers see a plistener */
    struct http_proxy_conf *conf; /* one reference */
    struct event_base *base;
    int worker;
    int fd;
    struct acceptor acc;
    struct event *reap_ev;
    size_t active;
    struct list conns;
    struct list dead;
    plistener_idle_fn on_idle;
    void *arg;
    struct bufpool pool; /* body buffers */
    struct h1_scratch scratch;
    struct upool *pools; /* one per conf cluster */
    struct ssl_ctx_st *ssl_ctx;
    unsigned tls_gen;
    uint64_t rng;
};

enum http_conn_stage { HC_HANDSHAKE, HC_DETECT, HC_H1, HC_H2, HC_CLOSED };

struct http_conn {
    struct list link;
    struct http_listener *l;
    struct conn conn;
    struct event timer;
    enum http_conn_stage stage;
    int drain; /* the listener stopped while this one was still starting */
    struct h1_server *h1;
    struct h2_server *h2;
    struct sockaddr_storage peer;
    socklen_t peerlen;
    char peer_ip[48];
};

static inline struct listener_counters *http_shard(const struct http_listener *l)
{
    return &l->conf->stats->w[l->worker];
}

/* http_stream.c */
extern const struct hstream_handler http_stream_handler;

#endif
