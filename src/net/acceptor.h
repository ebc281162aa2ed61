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

/* accept_error_pauses() is true for the accept(2) errors that mean "out
 * of descriptors or memory": pause instead of retrying at once. */
int accept_error_pauses(int err);
typedef void (*acceptor_fn)(void *arg, int fd,
                            const struct sockaddr_storage *peer, socklen_t len);

struct acceptor {
    struct event *ev;           /* NULL once stopped */
    struct timer resume;        /* ends a pause */
    struct log_limit pause_log; /* one warning per ACCEPT_LOG_MS */
    const char *name;           /* for logs; owned by the caller */
    acceptor_fn fn;
    void *arg;
};

/* acceptor_start() starts accepting on fd (not owned); 0 or -1. */
int acceptor_start(struct acceptor *a, struct event_base *base, int fd,
                   const char *name, acceptor_fn fn, void *arg);

/* acceptor_stop() stops accepting and frees the events; idempotent. */
void acceptor_stop(struct acceptor *a);

static inline int acceptor_running(const struct acceptor *a)
{
    return a->ev != NULL;
}

#endif
