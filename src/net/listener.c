#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/err.h"
#include "net/listener.h"
#include "net/sock.h"
#include "net/sock_pool.h"

static const struct stats_field listener_fields[] = {
    {"downstream_cx_total", offsetof(struct listener_counters, accepted),
     STATS_NONE},
    {"downstream_cx_active", offsetof(struct listener_counters, accepted),
     offsetof(struct listener_counters, closed)},
    {"downstream_cx_destroy", offsetof(struct listener_counters, closed),
     STATS_NONE},
    {"downstream_cx_overflow", offsetof(struct listener_counters, cx_overflow),
     STATS_NONE},
    {"downstream_global_cx_overflow",
     offsetof(struct listener_counters, global_cx_overflow), STATS_NONE},
    {"downstream_cx_limit_paused",
     offsetof(struct listener_counters, cx_limit_paused), STATS_NONE},
    {"downstream_cx_overload_paused",
     offsetof(struct listener_counters, cx_overload_paused), STATS_NONE},
    {"downstream_cx_proxy_proto_error",
     offsetof(struct listener_counters, proxy_proto_error), STATS_NONE},
};

const struct stats_desc listener_counters_desc = {
    "", listener_fields, sizeof(listener_fields) / sizeof(listener_fields[0])};

struct listener_socks *listener_socks_open(const struct addr *a, int nworkers,
                                           int backlog, struct sock_pool *pool,
                                           char **err)
{
    int shared = addr_family(a) == AF_UNIX;
    int n = shared ? 1 : nworkers;
    struct listener_socks *s = calloc(1, sizeof(*s) + (size_t)n * sizeof(int));

    *err = NULL;
    if (s == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    s->refs = 1;
    s->addr = *a;
    /* An adopted unix socket's path belongs to the process that bound
     * it, which keeps serving if this one fails to start: never unlink
     * it here (a later bind replaces a stale one anyway). */
    if (shared && pool != NULL && sock_pool_has(pool, SOCK_POOL_LISTENER, a, 0))
        s->keep_path = 1;
    for (int i = 0; i < n; i++) {
        s->fds[i] = sock_pool_listen(pool, SOCK_POOL_LISTENER, a, i, backlog,
                                     !shared, err);
        if (s->fds[i] < 0)
            goto fail;
        s->nfds++;
    }
    return s;
fail:
    listener_socks_unref(s);
    return NULL;
}

void listener_socks_unref(struct listener_socks *s)
{
    if (s == NULL || --s->refs > 0)
        return;
    for (int i = 0; i < s->nfds; i++)
        close(s->fds[i]);
    if (addr_family(&s->addr) == AF_UNIX && s->nfds > 0 && !s->keep_path)
        unlink(((const struct sockaddr_un *)&s->addr.ss)->sun_path);
    free(s);
}
