#ifndef STRAIT_CONTROL_SOURCE_KUBE_H
#define STRAIT_CONTROL_SOURCE_KUBE_H

#include <stddef.h>
#include <stdint.h>

struct bootstrap_kube;
struct buf;
struct dns_cache;
struct event_base;
struct res_input;

/*
 * Resources from the Kubernetes API: for each (kind, namespace scope,
 * selector) one watcher, made once when the source starts and kept for
 * the life of the process (Istio 1.4.3's lesson: a watch belongs to the
 * source, never to a snapshot, a reload or a worker). Each watcher, as
 * client-go's Reflector:
 *
 * - lists (first with resourceVersion=0, then pages of pageSize with
 *   continue tokens) and watches from the list's resourceVersion, with
 *   allowWatchBookmarks and a timeoutSeconds drawn in [min, 2*min);
 * - a watch that ends by its timeout is made again at once from the last
 *   resourceVersion seen (events and bookmarks advance it; it is opaque);
 * - 410 Expired, as an ERROR event inside the stream or as the answer to
 *   the watch, lists again with resourceVersion="" (a quorum read) and
 *   diffs the answer against the objects held, deletes included;
 * - a failure retries after a delay drawn in [d, 2d), d = backoff doubled
 *   per failure (at most backoffMax/2), back to backoff after
 *   backoffReset without a failure;
 * - a kind the API answers 404 for (a CRD not installed) is reported,
 *   held empty and counts as synced; it is listed again every backoffMax.
 *
 * An object that does not load on its own (a schema error) is reported
 * with its kind, namespace and name and left out; the rest applies.
 * on_change(arg) runs at most once per debounce_ms while objects change.
 */
struct source_kube;

/* source_kube_new() starts every watcher; NULL with an allocated *err
 * when conf cannot be used (no server, a CA that does not load, a
 * kubeconfig strait cannot use). dns resolves a server given by name
 * and must outlive the source. */
struct source_kube *source_kube_new(struct event_base *base,
                                    const struct bootstrap_kube *conf,
                                    struct dns_cache *dns, uint64_t debounce_ms,
                                    void (*on_change)(void *), void *arg,
                                    char **err);
void source_kube_free(struct source_kube *k);

/* source_kube_inputs() sets *v to one input per object held that loads,
 * kinds in watch order; owned by the source, valid until it calls
 * on_change again or is freed. */
size_t source_kube_inputs(struct source_kube *k, const struct res_input **v);

/* source_kube_synced() is 1 once every watcher has listed once (and
 * stays 1). */
int source_kube_synced(const struct source_kube *k);

/* The most kinds a source watches (its kinds table is checked against it
 * at build time), so a caller can hold one entry per kind. */
#define SOURCE_KUBE_MAX_KINDS 32

/* Per kind, summed over its namespaces. */
struct source_kube_kind {
    const char *kind;
    int synced;  /* every watcher of the kind has listed */
    int missing; /* the API answered 404 (a CRD not installed) */
    size_t objects;
    size_t bad; /* objects left out: they do not load */
    uint64_t watches_opened;
    uint64_t relists; /* lists after the first (410 Expired, 404 kinds) */
    uint64_t expired; /* 410 Expired received */
    uint64_t errors;  /* failed lists and watches */
    uint64_t events;  /* watch events applied */
};

/* source_kube_kinds() sets *v to one entry per watched kind (owned by the
 * source, refreshed by each call) and returns their count. */
size_t source_kube_kinds(struct source_kube *k,
                         const struct source_kube_kind **v);

/* source_kube_error() is the failure of the first watcher that has not
 * recovered from one (a good list or watch event clears it), or NULL. */
const char *source_kube_error(const struct source_kube *k);

/* source_kube_json() writes every watcher's state and the objects left
 * out as a JSON object. */
void source_kube_json(struct source_kube *k, struct buf *b);

#endif
