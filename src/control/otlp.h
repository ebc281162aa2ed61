#ifndef STRAIT_CONTROL_OTLP_H
#define STRAIT_CONTROL_OTLP_H

#include <stddef.h>
#include <stdint.h>

struct dns_cache;
struct event_base;
struct spanq;

/*
 * The span exporter: OTLP/HTTP with the JSON encoding (hex ids, integer
 * enums, 64-bit integers as strings), from the control thread. Every
 * flush interval it takes up to max_batch spans off the workers' queue
 * (event/spanq.h) and POSTs them as one ExportTraceServiceRequest; one
 * request is in flight at a time, and the queue's bound drops what a
 * slow or absent collector cannot take. An answer 429, 502, 503 or 504 is
 * retried (after its Retry-After, else 1 s, 2 s, 4 s...) up to
 * max_retries times; any other failure (a refused connection, a
 * timeout, 400) drops the batch, counted.
 */
struct otlp;

struct otlp_conf {
    const char *host;
    int port;
    const char *path;
    const char *service_name;
    const char *host_name; /* host.name of the resource */
    size_t max_batch;
    uint64_t flush_ms;
    uint64_t timeout_ms;
    int max_retries;
    int gzip; /* bodies sent with Content-Encoding: gzip */
    /* Resolves host when it is a name (it must outlive the exporter);
     * NULL: only an address literal works. */
    struct dns_cache *dns;
};

struct otlp_stats {
    uint64_t exported;      /* spans the collector accepted */
    uint64_t requests;      /* export requests sent */
    uint64_t failures;      /* batches given up (their spans dropped) */
    uint64_t retries;       /* requests sent again */
    uint64_t dropped_spans; /* spans of the batches given up */
};

/* otlp_new() starts exporting from q (not owned; it outlives the
 * exporter). conf strings are copied. NULL when memory is short. */
struct otlp *otlp_new(struct event_base *base, struct spanq *q,
                      const struct otlp_conf *conf);
void otlp_free(struct otlp *o);
void otlp_stats(const struct otlp *o, struct otlp_stats *out);

/* otlp_retry_after_ms() reads a Retry-After value: delta-seconds, capped
 * at an hour. -1 when it is not one (an HTTP-date is not honoured: the
 * exporter's own backoff applies). */
int64_t otlp_retry_after_ms(const char *p, size_t n);

#endif
