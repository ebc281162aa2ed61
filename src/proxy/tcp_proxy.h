#ifndef STRAIT_PROXY_TCP_PROXY_H
#define STRAIT_PROXY_TCP_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"
#include "core/bufpool.h"
#include "core/list.h"
#include "net/acceptor.h"
#include "proxy/plistener.h"

struct event;
struct event_base;
struct listener_stats;

/*
 * What a TCP listener does with a connection, compiled from configuration.
 * Immutable once built and shared by every worker; reference-counted with
 * atomics, taken when a worker starts or stops serving it.
 */
struct tcp_proxy_conf {
    int refs;
    char *name;
    struct addr *upstreams;
    size_t nupstreams;
    uint64_t connect_timeout_ms;
    int connect_attempts;
    uint64_t idle_timeout_ms;
    size_t buffer_size;
    int access_log;
    struct listener_stats *stats; /* one reference held */
};

struct tcp_proxy_conf *tcp_proxy_conf_new(const char *name,
                                          const struct addr *upstreams,
                                          size_t nupstreams,
                                          struct listener_stats *stats);
struct tcp_proxy_conf *tcp_proxy_conf_ref(struct tcp_proxy_conf *c);
void tcp_proxy_conf_unref(struct tcp_proxy_conf *c);

/*
 * One worker's side of a TCP listener: it accepts on the worker's own
 * socket and owns the sessions it accepted. Lives on one thread only.
 *
 * A proxy that stops accepting (reload, drain) lives on until its last
 * session ends; on_idle tells the owner when that happens.
 */
struct tcp_proxy {
    struct plistener pl; /* first: workers see a plistener */
    struct tcp_proxy_conf *conf; /* one reference held */
    struct event_base *base;
    int worker;
    int fd; /* listening socket, not owned */
    struct acceptor acc;
    struct event *reap_ev;
    size_t rr;
    size_t active;
    struct list sessions;
    struct bufpool pool; /* relay buffers of conf->buffer_size */
    struct list dead; /* closed sessions freed on the next loop turn */
    plistener_idle_fn on_idle;
    void *arg;
};

extern const struct plistener_ops tcp_proxy_ops;

/*
 * tcp_proxy_new() starts accepting on fd for conf (a reference is taken).
 * on_idle(p, arg) runs, on the loop, each time the proxy has stopped
 * accepting and its last session has ended. NULL on failure.
 */
struct tcp_proxy *tcp_proxy_new(struct event_base *base, int worker, int fd,
                                struct tcp_proxy_conf *conf,
                                plistener_idle_fn on_idle, void *arg);

/* tcp_proxy_stop_accepting() stops taking new connections; sessions go on. */
void tcp_proxy_stop_accepting(struct tcp_proxy *p);

/* tcp_proxy_free() closes every session at once and frees the proxy. */
void tcp_proxy_free(struct tcp_proxy *p);

static inline int tcp_proxy_accepting(const struct tcp_proxy *p)
{
    return acceptor_running(&p->acc);
}

#endif
