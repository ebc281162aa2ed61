/*
 * Per-source connection accounting (see source_limit.h). A flat array:
 * the rows are the sources with a connection open, a few hundred at most
 * on the APIs that use it, and one accept looks at them once.
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>

#include "core/clock.h"
#include "core/log.h"
#include "net/source_limit.h"

void source_limit_init(struct source_limit *l, const char *who, size_t max)
{
    *l = (struct source_limit){.who = who, .max = max > 0 ? max : 1};
}

void source_limit_dispose(struct source_limit *l)
{
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

static struct source_count *row(const struct source_limit *l,
                                const struct addr *src)
{
    for (size_t i = 0; i < l->n; i++)
        if (addr_same_host(&l->v[i].src, src))
            return &l->v[i];
    return NULL;
}

size_t source_limit_count(const struct source_limit *l, const struct addr *src)
{
    const struct source_count *r = row(l, src);

    return r != NULL ? r->n : 0;
}

/* Counts a refusal; warns at most once per SOURCE_LIMIT_LOG_MS with the
 * number refused since the last warning. */
static void refused(struct source_limit *l, uint64_t *counter, const char *peer,
                    const char *why)
{
    uint64_t now = clock_ms();

    (*counter)++;
    l->unlogged++;
    log_debug("%s: refused a connection from %s: %s", l->who, peer, why);
    if (l->log_ms != 0 && now - l->log_ms < SOURCE_LIMIT_LOG_MS)
        return;
    log_warn("%s: refused %" PRIu64 " connection(s) at their limits (last: "
             "%s, %s); totals: %" PRIu64 " per source, %" PRIu64 " busy",
             l->who, l->unlogged, peer, why, l->refused_per_source,
             l->refused_busy);
    l->unlogged = 0;
    l->log_ms = now;
}

int source_limit_take(struct source_limit *l, const struct addr *src,
                      const char *peer)
{
    struct source_count *r = row(l, src);

    if (r != NULL && r->n >= l->max) {
        refused(l, &l->refused_per_source, peer, "per-source connection limit");
        return -1;
    }
    if (r == NULL) {
        if (l->n == l->cap) {
            size_t nc = l->cap ? l->cap * 2 : 16;
            struct source_count *nv = realloc(l->v, nc * sizeof(*nv));
            if (nv == NULL)
                return -1;
            l->v = nv;
            l->cap = nc;
        }
        r = &l->v[l->n++];
        r->src = *src;
        r->n = 0;
    }
    r->n++;
    return 0;
}

void source_limit_give(struct source_limit *l, const struct addr *src)
{
    struct source_count *r = row(l, src);

    if (r == NULL || r->n == 0)
        return;
    if (--r->n == 0)
        *r = l->v[--l->n]; /* the last row fills the hole */
    /* Give memory back once a flood is over. */
    if (l->n == 0 && l->cap > 64) {
        free(l->v);
        l->v = NULL;
        l->cap = 0;
    }
}

void source_limit_busy(struct source_limit *l, const char *peer,
                       const char *why)
{
    refused(l, &l->refused_busy, peer, why);
}
