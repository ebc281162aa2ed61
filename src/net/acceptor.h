#ifndef STRAIT_NET_ACCEPTOR_H
#define STRAIT_NET_ACCEPTOR_H

#include <sys/socket.h>

#include "core/log.h"
#include "event/timer-t.h"

struct event;
struct event_base;

/*
 * Accepting on one listening socket for one worker: up to a batch of
 * connections per wake-up, and a short pause (ACCEPT_PAUSE_MS) when
 * descriptors or memory run out (EMFILE, ENFILE, ENOBUFS, ENOMEM: the
 * socket stays readable, so accepting again at once would spin). The
 * warning is written at most once per ACCEPT_LOG_MS with a count of the
 * pauses in between.
 */
#define ACCEPT_PAUSE_MS 100
#define ACCEPT_LOG_MS 10000
/* While a connection limit or the memory action stop_accepting_connections
 * holds accepting back, how often the acceptor looks again. */
#define ACCEPT_LIMIT_POLL_MS 10

/* accept_error_pauses() is true for the accept(2) errors that mean "out
 * of descriptors or memory": pause instead of retrying at once. */
int accept_error_pauses(int err);
/* fn gets fd (owned from now on) and, with a limit set, one slot of it:
 * the connection holding fd carries it (conn.cx) or fn gives it back
 * (cx_release) when it closes fd itself. */
typedef void (*acceptor_fn)(void *arg, int fd,
                            const struct sockaddr_storage *peer, socklen_t len);

struct cx_limit;
struct listener_counters;

struct acceptor {
    struct event *ev;           /* NULL once stopped */
    struct timer resume;        /* ends a pause */
    struct log_limit pause_log; /* one warning per ACCEPT_LOG_MS */
    const char *name;           /* for logs; owned by the caller */
    acceptor_fn fn;
    void *arg;
    struct cx_limit *cx;           /* NULL: no limit, no slots */
    struct listener_counters *ctr; /* the worker's shard; with cx */
    struct log_limit limit_log;
    int limited; /* paused by a limit or by memory (not EMFILE) */
};

/* acceptor_start() starts accepting on fd (not owned); 0 or -1. */
int acceptor_start(struct acceptor *a, struct event_base *base, int fd,
                   const char *name, acceptor_fn fn, void *arg);

/*
 * acceptor_limit() makes each connection take a slot of cx (not owned;
 * it outlives the acceptor) before it is accepted. Over the limit, per
 * cx's action: stop accepting until a slot is free (the kernel's backlog
 * holds the clients; ctr->cx_limit_paused counts the pauses), or accept
 * and close at once (ctr->cx_overflow, ctr->global_cx_overflow). The
 * memory action stop_accepting_connections always pauses
 * (ctr->cx_overload_paused).
 */
void acceptor_limit(struct acceptor *a, struct cx_limit *cx,
                    struct listener_counters *ctr);

/* acceptor_stop() stops accepting and frees the events; idempotent. */
void acceptor_stop(struct acceptor *a);

static inline int acceptor_running(const struct acceptor *a)
{
    return a->ev != NULL;
}

#endif
