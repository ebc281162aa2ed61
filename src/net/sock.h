#ifndef STRAIT_NET_SOCK_H
#define STRAIT_NET_SOCK_H

#include "core/addr.h"

/*
 * sock_listen() opens a non-blocking listening socket on a. With reuseport
 * set, SO_REUSEPORT lets every worker bind its own socket to the same
 * address so the kernel spreads connections over them. A unix socket path
 * left by an earlier run is removed first, but only if it is a socket.
 * Returns the fd, or -1 with an allocated message in *err.
 */
int sock_listen(const struct addr *a, int backlog, int reuseport, char **err);

/*
 * sock_connect() starts a non-blocking connection to a. Returns the fd with
 * *in_progress set when the connection completes later (wait for
 * writability, then sock_error()), or -1 with errno set.
 */
int sock_connect(const struct addr *a, int *in_progress);

/* sock_error() returns the pending error of fd (SO_ERROR), 0 if none. */
int sock_error(int fd);

/* sock_local_addr() fills a with fd's bound address; 0 or -1. */
int sock_local_addr(int fd, struct addr *a);

#endif
