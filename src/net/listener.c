#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "net/listener.h"
#include "net/sock.h"

struct listener_stats *listener_stats_new(const char *name, int nworkers)
{
    struct listener_stats *st;

    if (posix_memalign((void **)&st, 64,
                       sizeof(*st) +
                           (size_t)nworkers * sizeof(struct listener_counters)))
        return NULL;
    memset(st, 0,
           sizeof(*st) + (size_t)nworkers * sizeof(struct listener_counters));
    st->refs = 1;
    st->nworkers = nworkers;
    snprintf(st->name, sizeof(st->name), "%s", name);
    return st;
}

struct listener_stats *listener_stats_ref(struct listener_stats *st)
{
    __atomic_add_fetch(&st->refs, 1, __ATOMIC_RELAXED);
    return st;
}

void listener_stats_unref(struct listener_stats *st)
{
    if (st != NULL && __atomic_sub_fetch(&st->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(st);
}

void listener_stats_sum(const struct listener_stats *st,
                        struct listener_counters *out)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < st->nworkers; i++) {
        const struct listener_counters *c = &st->w[i];
        out->accepted += STAT_GET(c, accepted);
        out->closed += STAT_GET(c, closed);
        out->bytes_in += STAT_GET(c, bytes_in);
        out->bytes_out += STAT_GET(c, bytes_out);
        out->upstream_bytes_in += STAT_GET(c, upstream_bytes_in);
        out->upstream_bytes_out += STAT_GET(c, upstream_bytes_out);
        out->connect_failures += STAT_GET(c, connect_failures);
        out->connect_timeouts += STAT_GET(c, connect_timeouts);
        out->idle_timeouts += STAT_GET(c, idle_timeouts);
        out->no_route += STAT_GET(c, no_route);
        out->client_hello_errors += STAT_GET(c, client_hello_errors);
        out->registry_only += STAT_GET(c, registry_only);
        out->rq_total += STAT_GET(c, rq_total);
        for (int k = 0; k < 6; k++)
            out->rq_class[k] += STAT_GET(c, rq_class[k]);
        out->rq_protocol_errors += STAT_GET(c, rq_protocol_errors);
        out->h1_bufs_taken += STAT_GET(c, h1_bufs_taken);
        out->h1_bufs_released += STAT_GET(c, h1_bufs_released);
        out->rq_upstream_errors += STAT_GET(c, rq_upstream_errors);
        out->rq_rbac_denied += STAT_GET(c, rq_rbac_denied);
        out->rq_jwt_denied += STAT_GET(c, rq_jwt_denied);
        out->rq_mirror_sent += STAT_GET(c, rq_mirror_sent);
        out->rq_mirror_failed += STAT_GET(c, rq_mirror_failed);
        out->rq_mirror_skipped += STAT_GET(c, rq_mirror_skipped);
        out->tls_handshakes += STAT_GET(c, tls_handshakes);
        out->tls_fail_version += STAT_GET(c, tls_fail_version);
        out->tls_fail_cipher += STAT_GET(c, tls_fail_cipher);
        out->tls_fail_certificate += STAT_GET(c, tls_fail_certificate);
        out->tls_fail_eof += STAT_GET(c, tls_fail_eof);
        out->tls_fail_other += STAT_GET(c, tls_fail_other);
        out->h2_rapid_reset += STAT_GET(c, h2_rapid_reset);
        out->h2_flood += STAT_GET(c, h2_flood);
        out->h2_continuation += STAT_GET(c, h2_continuation);
        out->h2_stream_errors += STAT_GET(c, h2_stream_errors);
    }
}

struct listener_socks *listener_socks_open(const struct addr *a, int nworkers,
                                           int backlog, char **err)
{
    int shared = addr_family(a) == AF_UNIX;
    int n = shared ? 1 : nworkers;
    struct listener_socks *s = calloc(1, sizeof(*s) + (size_t)n * sizeof(int));

    *err = NULL;
    if (s == NULL) {
        *err = strdup("out of memory");
        return NULL;
    }
    s->refs = 1;
    s->addr = *a;
    for (int i = 0; i < n; i++) {
        s->fds[i] = sock_listen(a, backlog, !shared, err);
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
    if (addr_family(&s->addr) == AF_UNIX && s->nfds > 0)
        unlink(((const struct sockaddr_un *)&s->addr.ss)->sun_path);
    free(s);
}
