/*
 * LuaPolicy's say in where a request goes: h:set_upstream() re-targets
 * it once routing has decided (the route's cluster is replaced by the
 * registry host's), and on_upstream_select may pick the endpoint of that
 * cluster in place of the balancer. Nothing here runs for a request no
 * policy applies to (ps->lua NULL).
 */
#include "config.h"

#include <string.h>

#include "core/arena.h"
#include "core/clock.h"
#include "core/addr.h"
#include "http/stream.h"
#include "policy/lua_vm.h"
#include "proxy/pipeline-int.h"
#include "upstream/outlier.h"

void pstream_lua_retarget(struct pstream *ps)
{
    if (ps->lua->upstream >= 0 &&
        (size_t)ps->lua->upstream < ps->wr->r->nclusters)
        ps->cluster = ps->lua->upstream;
}

int pstream_lua_select(struct pstream *ps)
{
    struct luareq *rq = ps->lua;
    const struct cluster *cl = ps->pool->cl;
    struct luaep *eps;
    uint64_t now = 0;
    size_t n = 0;
    int k;

    if (rq->vm == NULL ||
        !luavm_has_hook(rq->vm, rq->mask, LUAVM_ON_UPSTREAM_SELECT))
        return 0;
    eps = arena_alloc(&ps->s->arena, cl->nendpoints * sizeof(*eps));
    if (eps == NULL)
        return 0; /* the balancer's pick stands */
    for (size_t i = 0; i < cl->nendpoints; i++) {
        char a[ADDR_STRLEN];
        /* Outlier detection's ejections stand: the script chooses among
         * the endpoints in service only. */
        if (cl->od != NULL && outlier_maybe_out(cl->od, i)) {
            if (now == 0)
                now = clock_ms();
            if (outlier_ejected(cl->od, i, now))
                continue;
        }
        addr_format(&cl->endpoints[i], a, sizeof(a));
        eps[n].address = arena_dup(&ps->s->arena, a, strlen(a));
        if (eps[n].address == NULL)
            return 0;
        eps[n].weight = cl->weights != NULL ? cl->weights[i] : 1;
        eps[n].index = i;
        n++;
    }
    rq->eps = eps;
    rq->neps = n;
    k = luavm_on_upstream_select(rq);
    rq->eps = NULL;
    rq->neps = 0;
    if (rq->failed) {
        ps->details = "lua_policy_failed";
        pstream_local_reply(ps, 500, 0, "lua policy failed\n");
        pstream_up_finished(ps);
        return 1;
    }
    if (k >= 0 && (size_t)k < n)
        ps->ep = eps[k].index;
    return 0;
}
