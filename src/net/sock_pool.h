#ifndef STRAIT_NET_SOCK_POOL_H
#define STRAIT_NET_SOCK_POOL_H

#include <stddef.h>

#include "core/addr.h"

/*
 * Listening sockets a new strait took over from the one it upgrades
 * (control/upgrade.h moves them with SCM_RIGHTS). Each is named by what
 * it serves (a kind), the address it was bound to as configured, and an
 * index (the worker for a listener's SO_REUSEPORT sockets, 0 otherwise).
 * Whoever would bind an address asks the pool first: adopting the very
 * socket the old process listens on keeps the connections waiting in its
 * accept queue, where a newly bound socket would leave them to be reset
 * when the old one closes. Main thread only, during start-up.
 */
enum sock_pool_kind {
    SOCK_POOL_LISTENER = 0, /* a listener: one socket per worker index */
    SOCK_POOL_ADMIN = 1,    /* the admin API */
    SOCK_POOL_CA = 2,       /* the embedded CA's API */
    SOCK_POOL_NKINDS = 3,
};

struct sock_pool_entry {
    int kind;
    int index;
    struct addr addr;
    int fd; /* -1 once taken */
};

struct sock_pool {
    struct sock_pool_entry *v;
    size_t n, cap;
    size_t taken;
};

void sock_pool_init(struct sock_pool *p);

/* sock_pool_add() takes fd (closed on failure too). 0, or -1 when memory
 * runs out or the same (kind, addr, index) is there already. */
int sock_pool_add(struct sock_pool *p, int kind, const struct addr *a,
                  int index, int fd);

/* sock_pool_take() hands over the socket of (kind, a, index), which the
 * caller then owns, or -1 when there is none. p may be NULL. */
int sock_pool_take(struct sock_pool *p, int kind, const struct addr *a,
                   int index);

/* sock_pool_has() is true when (kind, a, index) is there to take. */
int sock_pool_has(struct sock_pool *p, int kind, const struct addr *a,
                  int index);

/*
 * sock_pool_listen() is sock_listen() that adopts the pool's socket of
 * (kind, a, index) when there is one (listen(2) again with backlog, so a
 * changed backlog applies), and binds a new one otherwise. p may be NULL.
 */
int sock_pool_listen(struct sock_pool *p, int kind, const struct addr *a,
                     int index, int backlog, int reuseport, char **err);

/* sock_pool_close_rest() closes what nobody took (listeners the new
 * configuration no longer has) and returns how many. */
size_t sock_pool_close_rest(struct sock_pool *p);

/* sock_pool_dispose() closes what is left and frees the table. */
void sock_pool_dispose(struct sock_pool *p);

#endif
