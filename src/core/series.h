#ifndef STRAIT_CORE_SERIES_H
#define STRAIT_CORE_SERIES_H

#include <stddef.h>
#include <stdint.h>

/*
 * Labelled series: counters and histograms keyed by a set of Prometheus
 * labels (Istio's standard metrics), one bounded table per worker thread.
 *
 * A series' labels come in three runs: two static ones (struct
 * series_labels: immutable, reference-counted, built once at compile
 * time, e.g. the node's source_* labels and a cluster's destination_*
 * labels) and a short dynamic one the caller formats per request
 * (response code, flags). A lookup hashes only the dynamic run: the
 * static runs carry their hash. Each table belongs to one worker, which
 * alone inserts and writes its values (plain loads, relaxed stores, as
 * core/stats.h); the main thread reads them with relaxed loads, after an
 * acquire load of the count of series published. No lock, and nothing
 * one worker writes is written by another.
 *
 * A table holds at most max series: a lookup for a new label set past
 * that returns NULL and counts an overflow, so a client that sends a
 * new Host on every request cannot grow memory without bound.
 */

/* Envoy's default histogram buckets (upper bounds), which Istio uses for
 * every histogram, durations in ms and sizes in bytes alike. */
#define SERIES_NBOUNDS 19
extern const uint64_t series_bounds_x10[SERIES_NBOUNDS]; /* bound * 10 */

/* A histogram: per-bucket (not cumulative) counts, the last for values
 * above every bound, and the sum of values observed. */
struct series_hist {
    uint64_t bucket[SERIES_NBOUNDS + 1];
    uint64_t sum;
};

enum series_counter {
    SERIES_REQUESTS,
    SERIES_REQ_MSGS,
    SERIES_RESP_MSGS,
    SERIES_TCP_OPENED,
    SERIES_TCP_CLOSED,
    SERIES_TCP_SENT,
    SERIES_TCP_RECEIVED,
    SERIES_NCOUNTERS
};

enum series_histogram {
    SERIES_DURATION,
    SERIES_REQ_BYTES,
    SERIES_RESP_BYTES,
    SERIES_NHISTS
};

/*
 * A run of labels, already in exposition form (`a="x",b="y"`, values
 * escaped), immutable once built; flags are the builder's own (e.g.
 * "destination_service is left to the request"). Reference-counted with
 * atomics: taken when routes are built and when a series is created,
 * never per request.
 */
struct series_labels {
    int refs;
    unsigned flags;
    uint64_t hash;
    size_t len;
    char text[];
};

/* series_labels_new() copies text (len bytes) and hashes it. NULL when
 * memory is short. */
struct series_labels *series_labels_new(const char *text, size_t len,
                                        unsigned flags);
struct series_labels *series_labels_ref(struct series_labels *l);
/* series_labels_unref() drops a reference; NULL is a no-op. */
void series_labels_unref(struct series_labels *l);

/* One series: its labels (the three runs joined by commas) and values. */
struct series {
    uint64_t hash;
    /* References to the static runs it was created with: a lookup with
     * the same objects matches without comparing bytes (the references
     * keep their addresses from being reused); other objects with the
     * same bytes (compiled again by a later snapshot) match by bytes. */
    struct series_labels *a, *b;
    size_t alen, blen; /* the runs' lengths in text */
    char *text;        /* a,b,c; NUL-terminated */
    size_t len;
    uint64_t c[SERIES_NCOUNTERS];
    struct series_hist h[SERIES_NHISTS];
};

#define SERIES_CHUNK 64

/* One worker's table. */
struct series_shard {
    size_t max;
    size_t n; /* published: written with release, read with acquire */
    struct series **chunks; /* max / SERIES_CHUNK + 1 slots */
    uint32_t *index;        /* open addressing: series number + 1 */
    size_t mask;
    uint64_t overflow; /* label sets refused at max */
} __attribute__((aligned(64)));

/* Every worker's table. */
struct series_table {
    int nshards;
    size_t max;
    struct series_shard *shards;
};

/* series_table_new() makes nshards empty tables of at most max series
 * each (1 <= max <= 1000000). NULL when memory is short. */
struct series_table *series_table_new(int nshards, size_t max);
/* series_table_free() frees t and its series, once no worker writes any
 * more; NULL is a no-op. */
void series_table_free(struct series_table *t);

/*
 * series_get() is the series of shard sh (the calling worker's) with
 * labels a, b (either may be NULL: no run) and the dynamic run c (clen
 * bytes, may be 0), created on first use. NULL past sh->max (counted in
 * sh->overflow) or when memory is short. The series stays valid as long
 * as the table.
 */
struct series *series_get(struct series_shard *sh, struct series_labels *a,
                          struct series_labels *b, const char *c, size_t clen);

static inline void series_add(struct series *s, enum series_counter k,
                              uint64_t n)
{
    __atomic_store_n(&s->c[k], s->c[k] + n, __ATOMIC_RELAXED);
}

/* series_observe() adds value v (ms or bytes) to histogram k. */
void series_observe(struct series *s, enum series_histogram k, uint64_t v);

/* Readers (main thread): the number of series published in sh, and
 * series i of them. */
size_t series_count(const struct series_shard *sh);
const struct series *series_at(const struct series_shard *sh, size_t i);

static inline uint64_t series_read(const uint64_t *v)
{
    return __atomic_load_n(v, __ATOMIC_RELAXED);
}

/*
 * series_escape() writes value (n bytes) as the inside of a Prometheus
 * label value into out (cap bytes, NUL-terminated): backslash, double
 * quote and newline escaped, other control bytes replaced by '_'.
 * Returns the length written, truncated to fit.
 */
size_t series_escape(char *out, size_t cap, const char *value, size_t n);

#endif
