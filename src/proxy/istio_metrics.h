#ifndef STRAIT_PROXY_ISTIO_METRICS_H
#define STRAIT_PROXY_ISTIO_METRICS_H

#include <stdint.h>

#include "core/series.h"
#include "core/slice.h"

/*
 * Recording Istio's standard metrics (istio_requests_total, the request
 * duration and size histograms, gRPC message counts, TCP connections and
 * bytes) into the calling worker's table (core/series.h). The static
 * label runs come compiled (compile/metrics.h): the node's source run
 * and the cluster's destination run; what is formatted here per request
 * is the short dynamic run: request_protocol, response_code,
 * grpc_response_status, response_flags, and destination_service* from
 * the request's Host when the cluster has no registry entry.
 */

/* Set in series_labels.flags of a destination run without
 * destination_service*: the request's Host stands in (Istio's host
 * header fallback), formatted per request. */
#define ISTIO_HOST_FALLBACK 1u

/* What a finished HTTP request reports. */
struct istio_http_sample {
    struct slice authority; /* the Host, for the host fallback */
    int grpc;               /* request_protocol "grpc" (else "http") */
    int code;               /* response_code; 0: none */
    int grpc_status;        /* grpc_response_status; -1: "" */
    unsigned flags;         /* HFLAG_* of the stream */
    uint64_t duration_ms;
    uint64_t req_bytes; /* head and body, as Envoy's */
    uint64_t resp_bytes;
    uint64_t req_msgs; /* gRPC messages each way */
    uint64_t resp_msgs;
};

/* istio_http_record() adds x to the series of (src, dst, x); dst NULL
 * or flagged METRICS_HOST_FALLBACK takes destination_service* from the
 * Host. Past the shard's bound nothing is recorded (counted there). */
void istio_http_record(struct series_shard *sh, struct series_labels *src,
                       struct series_labels *dst,
                       const struct istio_http_sample *x);

/* istio_tcp_series() is the TCP series of (src, dst) with Envoy's
 * response flags rflags ("-": none); NULL past the bound. */
struct series *istio_tcp_series(struct series_shard *sh,
                                struct series_labels *src,
                                struct series_labels *dst, const char *rflags);

#endif
