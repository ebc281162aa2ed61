/*
 * Locality load balancing: priority levels and locality weights for one
 * cluster, as istiod computes them for the proxy asking (failover,
 * failoverPriority, distribute; see locality.h).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/locality.h"
#include "config/resource.h"
#include "core/strmap.h"

static void copy_part(char *dst, size_t cap, const char *s, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

void locality_split(const char *s, struct locality_parts *out)
{
    size_t n;

    memset(out, 0, sizeof(*out));
    if (s == NULL)
        return;
    n = strcspn(s, "/");
    copy_part(out->region, sizeof(out->region), s, n);
    if (s[n] == '\0')
        return;
    s += n + 1;
    n = strcspn(s, "/");
    copy_part(out->zone, sizeof(out->zone), s, n);
    if (s[n] == '\0')
        return;
    /* The rest, slashes and all, is the subzone. */
    copy_part(out->subzone, sizeof(out->subzone), s + n + 1, strlen(s + n + 1));
}

int locality_match(const struct locality_parts *l, const char *rule)
{
    struct locality_parts r;

    locality_split(rule, &r);
    return (strcmp(r.region, "*") == 0 || strcmp(r.region, l->region) == 0) &&
           (r.zone[0] == '\0' || strcmp(r.zone, "*") == 0 ||
            strcmp(r.zone, l->zone) == 0) &&
           (r.subzone[0] == '\0' || strcmp(r.subzone, "*") == 0 ||
            strcmp(r.subzone, l->subzone) == 0);
}

int locality_rank(const struct locality_parts *node,
                  const struct locality_parts *ep)
{
    if (strcmp(node->region, ep->region) != 0)
        return 3;
    if (strcmp(node->zone, ep->zone) != 0)
        return 2;
    return strcmp(node->subzone, ep->subzone) != 0 ? 1 : 0;
}

static const char *map_get(const struct conf_strmap *m, const char *key)
{
    for (size_t i = 0; m != NULL && i < m->n; i++)
        if (strcmp(m->v[i].key, key) == 0)
            return m->v[i].val;
    return NULL;
}

const char *locality_label(const struct locality_who *w, const char *key)
{
    if (strcmp(key, LOCALITY_LABEL_NETWORK) == 0 && w->network != NULL &&
        w->network[0] != '\0')
        return w->network;
    return map_get(w->labels, key);
}

/* The value of label key for w, written into buf when it comes from the
 * locality; "" when w has none (Istio compares missing labels as ""). */
static const char *label_value(const struct locality_who *w,
                               const struct locality_parts *parts,
                               const char *key)
{
    const char *v = NULL;

    if (strcmp(key, LOCALITY_LABEL_REGION) == 0 && parts->region[0] != '\0')
        v = parts->region;
    else if (strcmp(key, LOCALITY_LABEL_ZONE) == 0 && parts->zone[0] != '\0')
        v = parts->zone;
    else if (strcmp(key, LOCALITY_LABEL_SUBZONE) == 0 &&
             parts->subzone[0] != '\0')
        v = parts->subzone;
    else
        v = locality_label(w, key);
    return v != NULL ? v : "";
}

const char *locality_of(const char *own, const struct conf_strmap *labels,
                        char *buf, size_t n)
{
    const char *r, *z, *s;

    if (own != NULL && own[0] != '\0')
        return own;
    r = map_get(labels, LOCALITY_LABEL_REGION);
    z = map_get(labels, LOCALITY_LABEL_ZONE);
    s = map_get(labels, LOCALITY_LABEL_SUBZONE);
    if (r == NULL || r[0] == '\0')
        return NULL;
    if (z == NULL || z[0] == '\0')
        snprintf(buf, n, "%s", r);
    else if (s == NULL || s[0] == '\0')
        snprintf(buf, n, "%s/%s", r, z);
    else
        snprintf(buf, n, "%s/%s/%s", r, z, s);
    return buf;
}

/* Renumbers the priorities in p[0..n) to 0..levels-1 in their order, as
 * Envoy wants them without gaps. Returns the number of levels. */
static int compress(uint32_t *p, size_t n)
{
    uint32_t next = 0;
    int have = 0;
    size_t done = 0;

    /* Repeatedly take the smallest value not yet renumbered; n is small
     * and this runs once per cluster build. Values already renumbered
     * are marked by the high bit. */
    while (done < n) {
        uint32_t min = UINT32_MAX;
        for (size_t i = 0; i < n; i++)
            if (!(p[i] & 0x80000000u) && p[i] < min)
                min = p[i];
        for (size_t i = 0; i < n; i++)
            if (!(p[i] & 0x80000000u) && p[i] == min) {
                p[i] = next | 0x80000000u;
                done++;
            }
        have = 1;
        next++;
    }
    for (size_t i = 0; i < n; i++)
        p[i] &= ~0x80000000u;
    return have ? (int)next : 1;
}

/*
 * failoverPriority (Istio's applyFailoverPriorityPerLocality): an
 * endpoint whose first j labels match the node's but not label j gets
 * priority (number of labels) - j; one matching all gets 0. "label=value"
 * compares the endpoint's label with value instead of the node's.
 */
static uint32_t priority_by_labels(const struct res_locality_lb *lb,
                                   const struct locality_who *node,
                                   const struct locality_parts *np,
                                   const struct locality_who *ep,
                                   const struct locality_parts *pp)
{
    size_t nl = lb->failover_priority.n;

    for (size_t j = 0; j < nl; j++) {
        const char *spec = lb->failover_priority.v[j];
        const char *eq = strchr(spec, '=');
        char key[256];
        const char *want;

        /* Istio splits at every '=': only "label=value" overrides. */
        if (eq != NULL && strchr(eq + 1, '=') == NULL) {
            copy_part(key, sizeof(key), spec, (size_t)(eq - spec));
            want = eq + 1;
        } else if (eq != NULL) {
            copy_part(key, sizeof(key), spec, (size_t)(eq - spec));
            want = label_value(node, np, key);
        } else {
            copy_part(key, sizeof(key), spec, strlen(spec));
            want = label_value(node, np, key);
        }
        if (strcmp(want, label_value(ep, pp, key)) != 0)
            return (uint32_t)(nl - j);
    }
    return 0;
}

/* The node has labels Istio would compare: its own or topology ones. */
static int node_has_labels(const struct locality_who *node)
{
    return (node->labels != NULL && node->labels->n > 0) ||
           (node->locality != NULL && node->locality[0] != '\0') ||
           (node->network != NULL && node->network[0] != '\0');
}

/* failover: Istio's applyLocalityFailover() on top of prio (the
 * failoverPriority levels, or zeros). */
static void apply_failover(const struct res_locality_lb *lb,
                           const struct locality_parts *np,
                           const struct locality_parts *parts, size_t n,
                           uint32_t *prio)
{
    const struct res_locality_failover *fv = lb ? lb->failover.v : NULL;
    size_t nf = lb ? lb->failover.n : 0;

    for (size_t i = 0; i < n; i++) {
        int r = locality_rank(np, &parts[i]);
        /* Another region: one the node's region fails over to comes
         * before the rest. */
        for (size_t k = 0; r == 3 && k < nf; k++) {
            if (fv[k].from == NULL || strcmp(fv[k].from, np->region) != 0)
                continue;
            if (fv[k].to == NULL || strcmp(parts[i].region, fv[k].to) != 0)
                r = 4;
            break;
        }
        prio[i] = prio[i] * 5 + (uint32_t)r;
    }
}

/*
 * distribute (Istio's applyLocalityWeights): the first rule whose `from`
 * matches the node; each `to` in order takes the localities it matches
 * that no earlier `to` took, and shares its weight among them in
 * proportion to their weights (rounded up, as Istio does); endpoints of a
 * locality no `to` takes are left out. The locality weights become
 * endpoint weights: an endpoint's share of its locality's weight is its
 * own weight over the locality's total, scaled so the ratios survive
 * integer weights.
 */
static int apply_distribute(const struct res_locality_lb *lb,
                            const struct locality_parts *np,
                            const struct locality_who *eps,
                            const struct locality_parts *parts, size_t n,
                            uint32_t *w, unsigned char *keep, uint32_t *level,
                            uint32_t *lweight)
{
    const struct res_locality_distribute *dv = lb->distribute.v;
    const struct res_locality_distribute *d = NULL;
    struct strmap ids;
    size_t *gid = NULL, ng = 0;
    uint64_t *group = NULL, *lw = NULL; /* per group: weight, share */
    int *taken = NULL;                  /* per group: 0, 1, 2 this round */
    int rc = -1;

    for (size_t i = 0; i < lb->distribute.n && d == NULL; i++)
        if (dv[i].from != NULL && locality_match(np, dv[i].from))
            d = &dv[i];
    if (d == NULL)
        return 1;
    strmap_init(&ids);
    gid = calloc(n, sizeof(*gid));
    group = calloc(n, sizeof(*group));
    lw = calloc(n, sizeof(*lw));
    taken = calloc(n, sizeof(*taken));
    if (gid == NULL || group == NULL || lw == NULL || taken == NULL)
        goto fail;
    /* A locality group: the endpoints of one locality string. */
    for (size_t i = 0; i < n; i++) {
        const char *l = eps[i].locality ? eps[i].locality : "";
        uintptr_t id = (uintptr_t)strmap_get(&ids, l);
        if (id == 0) {
            id = ++ng;
            if (strmap_put(&ids, l, (void *)id) < 0)
                goto fail;
        }
        gid[i] = id - 1;
        group[gid[i]] += w[i];
    }
    for (size_t t = 0; t < d->to.n; t++) {
        uint64_t total = 0, weight = (uint64_t)d->to.v[t].val;
        for (size_t i = 0; i < n; i++)
            if (taken[gid[i]] == 0 &&
                locality_match(&parts[i], d->to.v[t].key)) {
                taken[gid[i]] = 2;
                total += group[gid[i]];
            }
        for (size_t g = 0; g < ng; g++)
            if (taken[g] == 2) {
                taken[g] = 1;
                lw[g] = total > 0 ? (group[g] * weight + total - 1) / total : 0;
            }
    }
    if (lweight != NULL) {
        /* Each locality that has a share is a level of that weight, in
         * the order of its first endpoint. */
        uint32_t next = 0;
        for (size_t g = 0; g < ng; g++)
            group[g] = UINT64_MAX; /* now: its level, once given one */
        for (size_t i = 0; i < n; i++) {
            size_t g = gid[i];
            if (!taken[g] || lw[g] == 0) {
                keep[i] = 0;
                continue;
            }
            if (group[g] == UINT64_MAX) {
                lweight[next] = (uint32_t)lw[g];
                group[g] = next++;
            }
            level[i] = (uint32_t)group[g];
        }
        rc = next > 0 ? (int)next : 1;
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        size_t g = gid[i];
        uint64_t v;
        if (!taken[g] || lw[g] == 0) {
            keep[i] = 0;
            continue;
        }
        v = (lw[g] * w[i] * 10000 + group[g] / 2) / group[g];
        w[i] = v > 0 ? (uint32_t)v : 1;
    }
    rc = 1;
fail:
    strmap_dispose(&ids);
    free(gid);
    free(group);
    free(lw);
    free(taken);
    return rc;
}

int locality_apply(const struct res_locality_lb *lb, int failover,
                   const struct locality_who *node,
                   const struct locality_who *eps, size_t n, uint32_t *level,
                   uint32_t *w, unsigned char *keep, uint32_t *lweight,
                   int *weighted)
{
    struct locality_parts np, *parts;
    int levels = 1;

    *weighted = 0;
    for (size_t i = 0; i < n; i++) {
        level[i] = 0;
        keep[i] = 1;
    }
    if (n == 0)
        return 1;
    if (lb != NULL && lb->mark.line > 0 && !lb->enabled)
        return 1;
    if (lb != NULL && lb->mark.line == 0)
        lb = NULL; /* the mesh default: enabled, no rules */
    parts = calloc(n, sizeof(*parts));
    if (parts == NULL)
        return -1;
    locality_split(node->locality, &np);
    for (size_t i = 0; i < n; i++)
        locality_split(eps[i].locality, &parts[i]);
    if (lb != NULL && lb->distribute.n > 0) {
        /* Distribute and failover do not mix (strait check refuses
         * both); the weights apply on one level. */
        levels =
            apply_distribute(lb, &np, eps, parts, n, w, keep, level, lweight);
        *weighted = lweight != NULL && levels > 1;
    } else if (failover) {
        if (lb != NULL && lb->failover_priority.n > 0) {
            struct locality_parts *pp = parts;
            if (node_has_labels(node))
                for (size_t i = 0; i < n; i++)
                    level[i] =
                        priority_by_labels(lb, node, &np, &eps[i], &pp[i]);
            if (lb->failover.n > 0)
                apply_failover(lb, &np, parts, n, level);
        } else {
            apply_failover(lb, &np, parts, n, level);
        }
        levels = compress(level, n);
    }
    free(parts);
    return levels;
}
