#ifndef STRAIT_NET_LISTENER_H
#define STRAIT_NET_LISTENER_H

#include <stdint.h>

#include "core/addr.h"
#include "core/stats.h"

/*
 * The counters of a listener itself, one shard per worker (the rules are
 * in core/stats.h). The layers a listener runs count in their own structs
 * (tls_counters, http_counters, ...); the listener's owner lays them out
 * side by side in one shard (proxy/stats.h).
 */
struct listener_counters {
    uint64_t accepted;
    uint64_t closed;
    /* Overload protection (net/overload.h), counted by the acceptor. */
    uint64_t cx_overflow;        /* closed at once: the listener's limit */
    uint64_t global_cx_overflow; /* closed at once: the process's limit */
    uint64_t cx_limit_paused;    /* accepting paused at a limit */
    uint64_t cx_overload_paused; /* paused: stop_accepting_connections */
    /* closed: no, or a malformed, PROXY protocol header where one is
     * required (Envoy's downstream_cx_proxy_proto_error) */
    uint64_t proxy_proto_error;
};

/* The names of listener_counters in the admin API's /stats
 * (downstream_cx_total, downstream_cx_active, downstream_cx_destroy,
 * downstream_cx_overflow, ...). */
extern const struct stats_desc listener_counters_desc;

/*
 * The listening sockets of one address: one SO_REUSEPORT socket per worker
 * for TCP, or one socket shared by all workers for a unix path (unix
 * sockets have no port reuse). Owned by the main thread; workers use
 * fds[worker % nfds] between being told to and acknowledging the next
 * change. Reference-counted by the main thread only.
 */
struct listener_socks {
    int refs;
    int keep_path; /* a unix path another process now serves: no unlink */
    struct addr addr;
    int nfds;
    int fds[];
};

struct sock_pool;

/*
 * listener_socks_open() opens the sockets of a for nworkers workers,
 * adopting the ones an upgraded strait handed over in pool (NULL: none)
 * and binding the rest. NULL with an allocated message in *err.
 */
struct listener_socks *listener_socks_open(const struct addr *a, int nworkers,
                                           int backlog, struct sock_pool *pool,
                                           char **err);
void listener_socks_unref(struct listener_socks *s);

static inline int listener_socks_fd(const struct listener_socks *s, int worker)
{
    return s->fds[worker % s->nfds];
}

#endif
