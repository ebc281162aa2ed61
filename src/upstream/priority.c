/*
 * Priority levels of a cluster and Envoy's priority load over them (see
 * priority.h).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "upstream/balancer.h"
#include "upstream/cluster.h"
#include "upstream/hash.h"
#include "upstream/outlier.h"
#include "upstream/priority.h"

void prio_free(struct cluster_prio *p)
{
    if (p == NULL)
        return;
    for (size_t l = 0; p->hash != NULL && l < p->nlevels; l++)
        lb_hash_free(p->hash[l]);
    free(p->hash);
    free(p->weight);
    free(p->alias);
    free(p->off);
    free(p->order);
    free(p->level);
    free(p);
}

int cluster_set_levels(struct cluster *c, const uint32_t *level)
{
    size_t n = c->nendpoints, nlevels = 0, k = 0;
    struct cluster_prio *p;

    prio_free(c->prio);
    c->prio = NULL;
    for (size_t i = 0; i < n; i++)
        if (level[i] + 1 > nlevels)
            nlevels = level[i] + 1;
    if (nlevels <= 1)
        return 0;
    if (nlevels > PRIO_MAX_LEVELS)
        return -1;
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -1;
    p->nlevels = nlevels;
    p->level = malloc(n * sizeof(*p->level));
    p->order = malloc(n * sizeof(*p->order));
    p->off = calloc(nlevels + 1, sizeof(*p->off));
    if (p->level == NULL || p->order == NULL || p->off == NULL)
        goto fail;
    memcpy(p->level, level, n * sizeof(*level));
    for (size_t l = 0; l < nlevels; l++) {
        p->off[l] = k;
        for (size_t i = 0; i < n; i++)
            if (level[i] == l)
                p->order[k++] = (uint32_t)i;
        /* compile/locality.c makes levels without gaps; one that is
         * empty would have nothing to pick. */
        if (p->off[l] == k)
            goto fail;
    }
    p->off[nlevels] = k;
    if (c->weights != NULL) {
        uint32_t *w = malloc(n * sizeof(*w));
        p->alias = malloc(n * sizeof(*p->alias));
        if (w == NULL || p->alias == NULL) {
            free(w);
            goto fail;
        }
        for (size_t i = 0; i < n; i++)
            w[i] = c->weights[p->order[i]];
        for (size_t l = 0; l < nlevels; l++)
            if (balancer_build_alias(p->alias + p->off[l], w + p->off[l],
                                     p->off[l + 1] - p->off[l]) < 0) {
                free(w);
                goto fail;
            }
        free(w);
    }
    c->prio = p;
    return 0;
fail:
    prio_free(p);
    return -1;
}

int cluster_set_level_weights(struct cluster *c, const uint32_t *w)
{
    struct cluster_prio *p = c->prio;

    if (p == NULL)
        return 0;
    free(p->weight);
    p->wsum = 0;
    p->weight = malloc(p->nlevels * sizeof(*p->weight));
    if (p->weight == NULL)
        return -1;
    for (size_t l = 0; l < p->nlevels; l++) {
        p->weight[l] = w[l] > 0 ? w[l] : 1;
        p->wsum += p->weight[l];
    }
    return 0;
}

int prio_build_hash(struct cluster *c, const struct lb_hash_conf *conf,
                    char **err)
{
    struct cluster_prio *p = c->prio;
    struct addr *eps = NULL;
    uint32_t *w = NULL;
    size_t n = c->nendpoints;

    if (p == NULL)
        return 0;
    p->hash = calloc(p->nlevels, sizeof(*p->hash));
    eps = malloc(n * sizeof(*eps));
    w = c->weights != NULL ? malloc(n * sizeof(*w)) : NULL;
    if (p->hash == NULL || eps == NULL || (c->weights != NULL && w == NULL))
        goto oom;
    for (size_t i = 0; i < n; i++) {
        eps[i] = c->endpoints[p->order[i]];
        if (w != NULL)
            w[i] = c->weights[p->order[i]];
    }
    for (size_t l = 0; l < p->nlevels; l++) {
        p->hash[l] =
            lb_hash_new(conf, eps + p->off[l], w ? w + p->off[l] : NULL,
                        p->off[l + 1] - p->off[l], err);
        if (p->hash[l] == NULL)
            goto fail;
    }
    free(eps);
    free(w);
    return 0;
oom:
    if (err != NULL && *err == NULL)
        *err = strdup("out of memory");
fail:
    for (size_t l = 0; p->hash != NULL && l < p->nlevels; l++)
        lb_hash_free(p->hash[l]);
    free(p->hash);
    p->hash = NULL;
    free(eps);
    free(w);
    return -1;
}

/* Every level in panic: the load by endpoint count, as Envoy's
 * recalculateLoadInTotalPanic(). */
static int total_panic(const uint32_t *total, size_t n, uint32_t *load,
                       unsigned char *panic)
{
    uint64_t all = 0, left = 100;

    for (size_t l = 0; l < n; l++)
        all += total[l];
    for (size_t l = 0; l < n; l++) {
        load[l] = all > 0 ? (uint32_t)(100 * (uint64_t)total[l] / all) : 0;
        left -= load[l];
        panic[l] = 1;
    }
    for (size_t l = 0; l < n && left > 0; l++)
        if (total[l] > 0 || l + 1 == n) {
            load[l] += (uint32_t)left;
            break;
        }
    return 1;
}

int prio_loads(const uint32_t *healthy, const uint32_t *total, size_t n,
               uint32_t panic_pct, uint32_t *load, unsigned char *panic)
{
    uint32_t health[PRIO_MAX_LEVELS];
    uint64_t sum = 0, avail, left = 100;
    int all_panic = 1;

    if (n == 0)
        return 0;
    if (n > PRIO_MAX_LEVELS)
        n = PRIO_MAX_LEVELS;
    for (size_t l = 0; l < n; l++) {
        uint64_t h = total[l] > 0
                         ? (uint64_t)PRIO_OVERPROVISION * healthy[l] / total[l]
                         : 0;
        health[l] = h > 100 ? 100 : (uint32_t)h;
        sum += health[l];
    }
    avail = sum > 100 ? 100 : sum;
    if (avail == 0)
        return total_panic(total, n, load, panic);
    for (size_t l = 0; l < n; l++) {
        panic[l] = avail < 100 && total[l] > 0 &&
                   (uint64_t)healthy[l] * 100 < (uint64_t)panic_pct * total[l];
        if (!panic[l])
            all_panic = 0;
    }
    if (all_panic)
        return total_panic(total, n, load, panic);
    for (size_t l = 0; l < n; l++) {
        uint64_t want = (uint64_t)health[l] * 100 / avail;
        load[l] = (uint32_t)(want < left ? want : left);
        left -= load[l];
    }
    for (size_t l = 0; l < n && left > 0; l++)
        if (load[l] > 0) {
            load[l] += (uint32_t)left;
            left = 0;
        }
    return 0;
}

int locality_loads(const uint32_t *weight, const uint32_t *healthy,
                   const uint32_t *total, size_t n, uint32_t *load,
                   unsigned char *panic)
{
    uint64_t sum = 0;

    for (size_t l = 0; l < n; l++) {
        uint64_t h = total[l] > 0
                         ? (uint64_t)PRIO_OVERPROVISION * healthy[l] / total[l]
                         : 0;
        load[l] = (uint32_t)((h > 100 ? 100 : h) * weight[l]);
        panic[l] = 0;
        sum += load[l];
    }
    if (sum == 0)
        return total_panic(total, n, load, panic);
    return 0;
}

int cluster_prio_loads(const struct cluster *c, uint64_t now, uint32_t *load,
                       unsigned char *panic)
{
    const struct cluster_prio *p = c->prio;
    uint32_t healthy[PRIO_MAX_LEVELS], total[PRIO_MAX_LEVELS];

    if (p == NULL)
        return 0;
    for (size_t l = 0; l < p->nlevels; l++) {
        total[l] = (uint32_t)(p->off[l + 1] - p->off[l]);
        healthy[l] = total[l];
        for (size_t k = p->off[l]; c->od != NULL && k < p->off[l + 1]; k++)
            if (outlier_maybe_out(c->od, p->order[k]) &&
                outlier_ejected(c->od, p->order[k], now))
                healthy[l]--;
    }
    if (p->weight != NULL)
        return locality_loads(p->weight, healthy, total, p->nlevels, load,
                              panic);
    return prio_loads(healthy, total, p->nlevels,
                      c->od != NULL ? c->od->conf.min_health_pct : 0, load,
                      panic);
}
