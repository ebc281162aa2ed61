#ifndef STRAIT_COMPILE_METRICS_H
#define STRAIT_COMPILE_METRICS_H

#include <stddef.h>

#include "core/buf.h"

struct bootstrap;
struct compiled_listener;
struct conf_strmap;
struct series_labels;
struct series_table;

/*
 * The static label runs of Istio's standard metrics (proxy/istio_metrics.h
 * records them), built once per snapshot and per cluster so a request
 * formats only its response code and flags. Values follow Istio's
 * istio_stats filter at a gateway: reporter="source", source_* from the
 * node, destination_* from the registry entry of the cluster, "unknown"
 * where nothing says.
 */

/*
 * metrics_source_labels() is the run of the node (bootstrap node and
 * metrics.extraLabels): reporter, source_*, connection_security_policy.
 * NULL when memory is short.
 */
struct series_labels *metrics_source_labels(const struct bootstrap *bs);

/* What the registry says of a cluster's destination; NULL fields are
 * "unknown". */
struct metrics_dest {
    const char *service; /* destination_service; NULL: host fallback */
    const char *service_name;
    const char *service_ns;
    const char *workload;
    const char *workload_ns;
    const char *principal;
    const struct conf_strmap *labels; /* the workloads' labels; NULL: none */
    const char *cluster;
};

/* metrics_dest_text() appends the destination run of d to b. */
void metrics_dest_text(struct buf *b, const struct metrics_dest *d);

/* metrics_dest_labels() builds that run (flags ISTIO_HOST_FALLBACK
 * when d->service is NULL). NULL when memory is short. */
struct series_labels *metrics_dest_labels(const struct metrics_dest *d);

/*
 * metrics_attach() gives the listener conf of cl (and the HTTP proxy of
 * a shared L4 port) the table t (NULL: metrics off; borrowed, must
 * outlive the conf), the source run (a reference taken) and the run of
 * requests that reach no cluster. Before the conf is published.
 */
void metrics_attach(struct compiled_listener *cl, struct series_table *t,
                    struct series_labels *src);

#endif
