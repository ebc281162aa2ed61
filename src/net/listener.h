#ifndef STRAIT_NET_LISTENER_H
#define STRAIT_NET_LISTENER_H

#include <stdint.h>

#include "core/addr.h"
#include "core/stats.h"

/*
 * Per-worker counters of one listener. Each worker writes only its own
 * shard (a plain load and store, no lock prefix); readers on the main
 * thread sum the shards with relaxed loads. Shards are cache-line aligned
 * so workers never share a line.
 */
struct listener_counters {
    uint64_t accepted;
    uint64_t closed;
    uint64_t bytes_in;  /* from downstream */
    uint64_t bytes_out; /* to downstream */
    uint64_t upstream_bytes_in;
    uint64_t upstream_bytes_out;
    uint64_t connect_failures;
    uint64_t connect_timeouts;
    uint64_t idle_timeouts;
    /* TCP/TLS Gateway listeners */
    uint64_t no_route;            /* closed: no route matched (Envoy's NR) */
    uint64_t client_hello_errors; /* not TLS, malformed, too large, timeout */
    /* Gateway listeners: requests (HTTP, answered 502) and connections
     * (TCP/TLS, closed) routed to BlackHoleCluster, a destination host not
     * in the registry under outboundTrafficPolicy REGISTRY_ONLY */
    uint64_t registry_only;
    /* HTTP listeners */
    uint64_t rq_total;
    uint64_t rq_class[6];        /* [1]..[5]: 1xx..5xx */
    uint64_t rq_protocol_errors; /* malformed requests from clients */
    uint64_t rq_upstream_errors; /* upstream failed (502/503/reset) */
    uint64_t rq_rbac_denied;     /* refused by an AuthorizationPolicy */
    uint64_t rq_jwt_denied;      /* refused: a JWT that does not verify */
    uint64_t rq_mirror_sent;     /* mirrored copies started */
    uint64_t rq_mirror_failed;   /* started copies that did not complete */
    uint64_t rq_mirror_skipped;  /* selected copies not sent (body too big,
                                    no endpoint, circuit breaker) */
    uint64_t tls_handshakes;
    uint64_t tls_fail_version;
    uint64_t tls_fail_cipher;
    uint64_t tls_fail_certificate;
    uint64_t tls_fail_eof;
    uint64_t tls_fail_other;
    uint64_t h2_rapid_reset;
    uint64_t h2_flood;        /* SETTINGS/PING/empty-frame floods */
    uint64_t h2_continuation; /* CONTINUATION floods */
    uint64_t h2_stream_errors;
    /* I/O buffers HTTP/1 client connections took and gave back: the
     * difference is what they hold now (none while idle). */
    uint64_t h1_bufs_taken;
    uint64_t h1_bufs_released;
} __attribute__((aligned(64)));

/*
 * The counters of a listener, by name. A reload that changes a listener
 * hands the same stats to its successor, so counters stay monotonic.
 * Reference-counted with atomics: taken only when listeners are created or
 * retired, never per connection.
 */
struct listener_stats {
    int refs;
    int nworkers;
    char name[64];
    struct listener_counters w[];
};

struct listener_stats *listener_stats_new(const char *name, int nworkers);
struct listener_stats *listener_stats_ref(struct listener_stats *st);
void listener_stats_unref(struct listener_stats *st);

/* listener_stats_sum() adds up every worker's shard into *out. */
void listener_stats_sum(const struct listener_stats *st,
                        struct listener_counters *out);

/*
 * The listening sockets of one address: one SO_REUSEPORT socket per worker
 * for TCP, or one socket shared by all workers for a unix path (unix
 * sockets have no port reuse). Owned by the main thread; workers use
 * fds[worker % nfds] between being told to and acknowledging the next
 * change. Reference-counted by the main thread only.
 */
struct listener_socks {
    int refs;
    struct addr addr;
    int nfds;
    int fds[];
};

struct listener_socks *listener_socks_open(const struct addr *a, int nworkers,
                                           int backlog, char **err);
void listener_socks_unref(struct listener_socks *s);

static inline int listener_socks_fd(const struct listener_socks *s, int worker)
{
    return s->fds[worker % s->nfds];
}

#endif
