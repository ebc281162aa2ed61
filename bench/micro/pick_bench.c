/*
 * pick_bench: the cost of one balancer_pick() (ns), unweighted and weighted,
 * for ROUND_ROBIN, RANDOM and LEAST_REQUEST over 8 endpoints, one worker,
 * no outlier detection. Best of 5 runs of 10M picks each.
 *
 *   make -C build bench/micro/pick_bench && build/bench/micro/pick_bench
 */
#include "config.h"

#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/addr.h"
#include "upstream/balancer.h"
#include "upstream/cluster.h"
#include "upstream/pool.h"

#define NEP 8
#define PICKS 10000000L
#define RUNS 5

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double bench(struct event_base *base, enum cluster_lb lb,
                    const uint32_t *w)
{
    struct addr eps[NEP];
    const char *why;
    struct cluster *cl;
    struct upool p;
    double best = 1e30;
    volatile size_t sink = 0;

    for (int i = 0; i < NEP; i++) {
        char s[32];
        snprintf(s, sizeof(s), "127.0.0.1:%d", 9000 + i);
        if (addr_parse(&eps[i], s, strlen(s), 0, &why) < 0)
            return -1;
    }
    cl = cluster_new("bench", eps, NEP, 1);
    if (cl == NULL)
        return -1;
    cl->lb = lb;
    if (w != NULL && cluster_set_weights(cl, w) < 0)
        return -1;
    if (upool_init(&p, cl, base, 0, NULL) < 0)
        return -1;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now_ns(), dt;
        for (long i = 0; i < PICKS; i++)
            sink += balancer_pick(&p.lb);
        dt = (now_ns() - t0) / PICKS;
        if (dt < best)
            best = dt;
    }
    (void)sink;
    upool_dispose(&p);
    cluster_unref(cl);
    return best;
}

int main(void)
{
    static const uint32_t w[NEP] = {1, 2, 7, 3, 1, 5, 2, 4};
    static const struct {
        const char *name;
        enum cluster_lb lb;
    } lbs[] = {{"ROUND_ROBIN", CLUSTER_LB_ROUND_ROBIN},
               {"RANDOM", CLUSTER_LB_RANDOM},
               {"LEAST_REQUEST", CLUSTER_LB_LEAST_REQUEST}};
    struct event_base *base = event_base_new();

    if (base == NULL)
        return 1;
    printf("%-14s %12s %12s\n", "balancer", "unweighted", "weighted");
    for (size_t k = 0; k < sizeof(lbs) / sizeof(lbs[0]); k++)
        printf("%-14s %9.2f ns %9.2f ns\n", lbs[k].name,
               bench(base, lbs[k].lb, NULL), bench(base, lbs[k].lb, w));
    event_base_free(base);
    return 0;
}
