/*
 * The VirtualService router's lifecycle: an empty router for the compile
 * layer to fill (compile/router-bind.c, compile/router.c), its references
 * and its sizes. Matching is in router-match.c, the dump in router-dump.c.
 *
 * All the router's memory but the hash tables, the per-vhost rule arrays
 * and the PCRE2 codes comes from one arena, freed at once with the router.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "proxy/router-int.h"

#define ROUTER_ARENA_CHUNK (64u * 1024)

static void table_dispose(struct rt_table *t)
{
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

static void router_free(struct router *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->nregexes; i++)
        pcre2_code_free(r->regexes[i]->code);
    free(r->regexes);
    for (size_t i = 0; i < r->nvhosts; i++)
        free(r->vhosts[i].rules);
    free(r->vhosts);
    table_dispose(&r->exact);
    table_dispose(&r->wild);
    pcre2_match_context_free(r->mctx);
    arena_dispose(&r->mem);
    free(r);
}

struct router *router_new(void)
{
    struct router *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    atomic_init(&r->refs, 1);
    arena_init(&r->mem, ROUTER_ARENA_CHUNK);
    r->catch_all = -1;
    r->mctx = pcre2_match_context_create(NULL);
    if (r->mctx == NULL) {
        router_free(r);
        return NULL;
    }
    pcre2_set_match_limit(r->mctx, ROUTER_REGEX_MATCH_LIMIT);
    pcre2_set_depth_limit(r->mctx, ROUTER_REGEX_DEPTH_LIMIT);
    pcre2_set_heap_limit(r->mctx, ROUTER_REGEX_HEAP_LIMIT_KIB);
    return r;
}

struct router *router_ref(struct router *r)
{
    if (r != NULL)
        atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    return r;
}

void router_unref(struct router *r)
{
    /* acq_rel: the thread that frees sees every other thread's reads
     * finished (the classic shared_ptr ordering). */
    if (r != NULL &&
        atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1)
        router_free(r);
}

void router_get_stats(const struct router *r, struct router_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (r == NULL)
        return;
    st->vhosts = r->nvhosts;
    st->rules = r->nrules;
    st->actions = r->nactions;
    st->regexes = r->nregexes;
    st->bytes =
        r->mem.total + r->cap * sizeof(struct rt_vhost) +
        (r->exact.slots ? (r->exact.mask + 1) : 0) * sizeof(struct rt_slot) +
        (r->wild.slots ? (r->wild.mask + 1) : 0) * sizeof(struct rt_slot);
    for (size_t i = 0; i < r->nvhosts; i++)
        st->bytes += r->vhosts[i].cap * sizeof(struct rt_rule);
}
