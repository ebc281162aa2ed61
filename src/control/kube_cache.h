#ifndef STRAIT_CONTROL_KUBE_CACHE_H
#define STRAIT_CONTROL_KUBE_CACHE_H

#include <stddef.h>

struct kube_object;

/*
 * The objects one Kubernetes watcher holds (source_kube.c), kept in
 * namespace/name order: what list answers and watch events are applied
 * to. A list is applied as a diff: kube_cache_unmark() before its first
 * page, kube_cache_put() per item (which marks it seen), then
 * kube_cache_sweep() drops what the list did not hold, so a delete whose
 * event was lost (410 Expired) is not missed and nothing is held twice.
 */
struct kube_cache_obj {
    char *key; /* "ns/name"; ns and name follow it in one allocation */
    char *ns;  /* "" for a cluster-scoped object */
    char *name;
    char *input; /* "kubernetes:Kind/ns/name" ("-" for no namespace) */
    char *json;  /* the object as kube_proto wrote it, NUL-terminated */
    size_t json_n;
    char *rv;    /* metadata.resourceVersion: opaque */
    char *error; /* NULL: it loads; else why it is left out (the owner's) */
    int seen;    /* put since the last kube_cache_unmark() */
};

struct kube_cache {
    struct kube_cache_obj *v;
    size_t n, cap;
};

enum {
    KUBE_CACHE_SAME = 0,    /* held already, same JSON (rv updated) */
    KUBE_CACHE_ADDED = 1,   /* not held before */
    KUBE_CACHE_CHANGED = 2, /* held, JSON replaced (error cleared) */
};

void kube_cache_init(struct kube_cache *c);
/* kube_cache_dispose() frees every object held. */
void kube_cache_dispose(struct kube_cache *c);

/* kube_cache_find() is the object ns/name, or NULL; valid until the
 * cache next changes. */
struct kube_cache_obj *kube_cache_find(const struct kube_cache *c,
                                       const char *ns, const char *name);

/* kube_cache_put() holds obj (copied; kind names the input) and marks it
 * seen: a KUBE_CACHE_* result and the object held in *out, or -1 when out
 * of memory (nothing changed). */
int kube_cache_put(struct kube_cache *c, const char *kind,
                   const struct kube_object *obj, struct kube_cache_obj **out);

/* kube_cache_del() drops ns/name: 1, or 0 when it was not held. */
int kube_cache_del(struct kube_cache *c, const char *ns, const char *name);

/* kube_cache_unmark() clears every seen mark; kube_cache_sweep() drops
 * every object not put since, and returns how many. */
void kube_cache_unmark(struct kube_cache *c);
size_t kube_cache_sweep(struct kube_cache *c);

#endif
