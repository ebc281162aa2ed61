#include "config.h"

#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/series.h"
#include "core/stats.h"
#include "upstream/balancer.h"
#include "upstream/cluster.h"
#include "upstream/hash.h"
#include "upstream/outlier.h"
#include "upstream/priority.h"

struct cluster *cluster_new(const char *name, const struct addr *eps, size_t n,
                            int nworkers)
{
    struct cluster *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->refs = 1;
    c->name = strdup(name);
    c->endpoints = calloc(n ? n : 1, sizeof(*eps));
    c->nworkers = nworkers;
    if (posix_memalign((void **)&c->w, 64, (size_t)nworkers * sizeof(*c->w)) !=
        0)
        c->w = NULL;
    if (c->name == NULL || c->endpoints == NULL || c->w == NULL) {
        cluster_unref(c);
        return NULL;
    }
    memset(c->w, 0, (size_t)nworkers * sizeof(*c->w));
    if (n > 0) /* eps may be NULL for a cluster without endpoints */
        memcpy(c->endpoints, eps, n * sizeof(*eps));
    c->nendpoints = n;
    return c;
}

static void drop_weights(struct cluster *c)
{
    free(c->weights);
    free(c->inv_weights);
    free(c->alias);
    c->weights = NULL;
    c->inv_weights = NULL;
    c->alias = NULL;
}

int cluster_set_weights(struct cluster *c, const uint32_t *w)
{
    size_t n = c->nendpoints;
    size_t i;

    drop_weights(c);
    for (i = 1; i < n; i++)
        if ((w[i] ? w[i] : 1) != (w[0] ? w[0] : 1))
            break;
    if (i >= n) /* all equal (or fewer than two): the plain balancers */
        return 0;
    c->weights = malloc(n * sizeof(*c->weights));
    c->inv_weights = malloc(n * sizeof(*c->inv_weights));
    c->alias = malloc(n * sizeof(*c->alias));
    if (c->weights == NULL || c->inv_weights == NULL || c->alias == NULL)
        goto fail;
    for (i = 0; i < n; i++) {
        c->weights[i] = w[i] ? w[i] : 1;
        c->inv_weights[i] = 1.0 / (double)c->weights[i];
    }
    if (balancer_build_alias(c->alias, c->weights, n) < 0)
        goto fail;
    return 0;
fail:
    drop_weights(c);
    return -1;
}

/* A slot under max (0: no limit), or 0 and nothing taken. A refused
 * increment is undone at once; a racing admit may see it and be refused
 * too, which errs on the side of the limit. */
static int take_slot(uint64_t *active, uint64_t max)
{
    uint64_t n = __atomic_add_fetch(active, 1, __ATOMIC_RELAXED);

    if (max == 0 || n <= max)
        return 1;
    __atomic_sub_fetch(active, 1, __ATOMIC_RELAXED);
    return 0;
}

int cluster_admit(struct cluster *c)
{
    return take_slot(&c->rq_active, c->max_requests);
}

void cluster_release(struct cluster *c)
{
    __atomic_sub_fetch(&c->rq_active, 1, __ATOMIC_RELAXED);
}

int cluster_admit_retry(struct cluster *c)
{
    return take_slot(&c->retries_active, c->max_retries);
}

void cluster_release_retry(struct cluster *c)
{
    __atomic_sub_fetch(&c->retries_active, 1, __ATOMIC_RELAXED);
}

int cluster_admit_conn(struct cluster *c)
{
    if (c->max_connections == 0)
        return 1;
    return take_slot(&c->cx_active, c->max_connections);
}

void cluster_force_conn(struct cluster *c)
{
    __atomic_add_fetch(&c->cx_active, 1, __ATOMIC_RELAXED);
}

void cluster_release_conn(struct cluster *c)
{
    if (c->max_connections > 0)
        __atomic_sub_fetch(&c->cx_active, 1, __ATOMIC_RELAXED);
}

int cluster_admit_pending(struct cluster *c)
{
    return take_slot(&c->rq_waiting, c->max_pending);
}

void cluster_release_pending(struct cluster *c)
{
    __atomic_sub_fetch(&c->rq_waiting, 1, __ATOMIC_RELAXED);
}

struct cluster *cluster_ref(struct cluster *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

static void meta_free(struct cluster_endpoint_meta *m, size_t n)
{
    for (size_t i = 0; m != NULL && i < n; i++) {
        free(m[i].network);
        free(m[i].locality);
        free(m[i].via);
    }
    free(m);
}

int cluster_set_meta(struct cluster *c, const char *const *net,
                     const char *const *loc, const char *const *via)
{
    struct cluster_endpoint_meta *v;

    meta_free(c->ep_meta, c->nendpoints);
    c->ep_meta = NULL;
    if (c->nendpoints == 0)
        return 0;
    v = calloc(c->nendpoints, sizeof(*v));
    if (v == NULL)
        return -1;
    for (size_t i = 0; i < c->nendpoints; i++) {
        v[i].network = strdup(net[i] ? net[i] : "");
        v[i].locality = strdup(loc[i] ? loc[i] : "");
        v[i].via = via[i] ? strdup(via[i]) : NULL;
        if (v[i].network == NULL || v[i].locality == NULL ||
            (via[i] != NULL && v[i].via == NULL)) {
            meta_free(v, i + 1);
            return -1;
        }
    }
    c->ep_meta = v;
    return 0;
}

void cluster_unref(struct cluster *c)
{
    if (c == NULL || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    meta_free(c->ep_meta, c->nendpoints);
    free(c->w);
    lb_hash_free(c->hash);
    outlier_free(c->od);
    series_labels_unref(c->metrics);
    SSL_CTX_free(c->tls);
    SSL_CTX_free(c->hbone_tls);
    SSL_CTX_free(c->hbone_inner_tls);
    free(c->hbone_authority);
    free(c->hbone_network);
    for (size_t i = 0; c->hbone_ids != NULL && i < c->nendpoints; i++)
        free(c->hbone_ids[i]);
    free(c->hbone_ids);
    free(c->hbone);
    free(c->sni);
    drop_weights(c);
    prio_free(c->prio);
    free(c->endpoints);
    free(c->name);
    free(c);
}

void cluster_sum(const struct cluster *c, struct cluster_counters *out)
{
    /* The shards were zeroed whole at cluster_new(), padding included. */
    stats_sum_shards(c->w, sizeof(*c->w), c->nworkers, sizeof(*out), out);
}

#define CLUSTER_FIELD(name, member)                                            \
    {                                                                          \
        name, offsetof(struct cluster_counters, member), STATS_NONE            \
    }

static const struct stats_field cluster_fields[] = {
    CLUSTER_FIELD("upstream_rq_total", rq_total),
    CLUSTER_FIELD("upstream_cx_total", cx_total),
    CLUSTER_FIELD("upstream_cx_reused", cx_reused),
    CLUSTER_FIELD("upstream_cx_connect_fail", cx_connect_fail),
    CLUSTER_FIELD("upstream_cx_connect_timeout", cx_connect_timeout),
    CLUSTER_FIELD("upstream_rq_error", rq_error),
    CLUSTER_FIELD("upstream_rq_timeout", rq_timeout),
    CLUSTER_FIELD("upstream_rq_pending_overflow", rq_overflow),
    CLUSTER_FIELD("upstream_rq_retry_overflow", rq_retry_overflow),
    CLUSTER_FIELD("upstream_rq_retry", rq_retry),
    CLUSTER_FIELD("upstream_rq_per_try_timeout", rq_per_try_timeout),
    CLUSTER_FIELD("retry_or_shadow_abandoned", rq_retry_body_overflow),
    CLUSTER_FIELD("upstream_cx_overflow", cx_overflow),
    CLUSTER_FIELD("upstream_rq_pending_total", rq_pending),
    CLUSTER_FIELD("lb_priority_failover", rq_failover),
};

const struct stats_desc cluster_counters_desc = {
    "", cluster_fields, sizeof(cluster_fields) / sizeof(cluster_fields[0])};

void cluster_report_slow(struct cluster *c, size_t ep, int result)
{
    struct outlier *od = c->od;
    uint64_t before, now;
    struct outlier_host_state st;
    char as[ADDR_STRLEN];

    if (result >= 0 && result < 500) {
        outlier_success(od, ep); /* the common case: no clock */
        return;
    }
    if (ep >= c->nendpoints)
        return;
    now = clock_ms();
    before = __atomic_load_n(&od->h[ep].ejections, __ATOMIC_RELAXED);
    outlier_report(od, ep, result, now);
    /* An ejection is rare and worth a line: which endpoint, for how long
     * (Envoy's outlier event log, in short). */
    outlier_state(od, ep, now, &st);
    if (st.ejected && st.ejections > before)
        log_warn("cluster %s: endpoint %s ejected by outlier detection for "
                 "%llu ms (ejection %llu)",
                 c->name, addr_format(&c->endpoints[ep], as, sizeof(as)),
                 (unsigned long long)(st.until - now),
                 (unsigned long long)st.ejections);
}
