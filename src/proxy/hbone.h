#ifndef STRAIT_PROXY_HBONE_H
#define STRAIT_PROXY_HBONE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/list.h"
#include "event/reap-t.h"

struct conn;
struct l4_listener;

/*
 * HBONE, Istio ambient's tunnel: HTTP/2 CONNECT over the mesh's mTLS
 * (port 15008). A Gateway server of protocol HBONE makes its L4 listener
 * hand each verified connection here after the TLS handshake; every
 * CONNECT stream is one tunnel to a registry endpoint, answered 200 only
 * once the upstream TCP connect succeeded, then relayed both ways with
 * HTTP/2 flow control bounding what a tunnel may hold.
 */

/* The limits of an HBONE listener (bootstrap hbone:). */
struct hbone_limits {
    uint32_t max_tunnels;        /* per connection: MAX_CONCURRENT_STREAMS */
    uint32_t tunnel_buffer;      /* per tunnel and direction: window, bytes */
    uint64_t tunnel_memory;      /* all tunnels of the process: bytes */
    uint64_t connect_timeout_ms; /* to the upstream, before the 200 */
    uint64_t idle_timeout_ms;    /* a tunnel without bytes; a connection
                                    without tunnels */
};

/* One worker's HBONE connections of one listener (that thread only). */
struct hbone_worker {
    struct l4_listener *p;
    struct list conns; /* struct hbone_conn, open */
    size_t active;     /* open connections */
    struct list dead;  /* connections and tunnels freed on the next turn */
    struct list dead_tunnels;
    struct reap_node reap;
};

void hbone_worker_init(struct hbone_worker *w, struct l4_listener *p);

/* hbone_worker_drain() sends every connection GOAWAY: open tunnels
 * finish, new ones are refused, and each connection closes once it has
 * none. */
void hbone_worker_drain(struct hbone_worker *w);

/* hbone_worker_dispose() closes every connection and tunnel at once. */
void hbone_worker_dispose(struct hbone_worker *w);

/*
 * hbone_accept() serves down, a TLS connection whose handshake finished
 * (moved in: its fd and TLS state are the HBONE connection's from now
 * on). peer_uri is the client's verified SPIFFE ID ("" when none; copied).
 * start_ms is when it was accepted.
 */
void hbone_accept(struct hbone_worker *w, struct conn *down,
                  const struct sockaddr_storage *peer, socklen_t peerlen,
                  const char *peer_uri, uint64_t start_ms);

#endif
