/*
 * The objects of one Kubernetes watcher (see kube_cache.h): a sorted
 * array, binary search, one allocation per string.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/kube_cache.h"
#include "control/kube_proto.h"

void kube_cache_init(struct kube_cache *c)
{
    memset(c, 0, sizeof(*c));
}

static void obj_dispose(struct kube_cache_obj *o)
{
    free(o->key);
    free(o->input);
    free(o->json);
    free(o->rv);
    free(o->error);
}

void kube_cache_dispose(struct kube_cache *c)
{
    for (size_t i = 0; i < c->n; i++)
        obj_dispose(&c->v[i]);
    free(c->v);
    memset(c, 0, sizeof(*c));
}

/* The index of key, or where it would go. */
static size_t find(const struct kube_cache *c, const char *ns, const char *name,
                   int *found)
{
    size_t lo = 0, hi = c->n, nl = strlen(ns);

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const char *k = c->v[mid].key;
        int r = strncmp(k, ns, nl);
        /* As strcmp(key, "ns/name") (neither has a '/': kube_proto.c). */
        if (r == 0)
            r = k[nl] == '/' ? strcmp(k + nl + 1, name)
                             : (int)(unsigned char)k[nl] - '/';
        if (r == 0) {
            *found = 1;
            return mid;
        }
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

struct kube_cache_obj *kube_cache_find(const struct kube_cache *c,
                                       const char *ns, const char *name)
{
    int found;
    size_t i = find(c, ns, name, &found);

    return found ? &c->v[i] : NULL;
}

int kube_cache_put(struct kube_cache *c, const char *kind,
                   const struct kube_object *obj, struct kube_cache_obj **out)
{
    int found;
    size_t i = find(c, obj->ns, obj->name, &found);
    struct kube_cache_obj o;

    *out = NULL;
    if (found) {
        struct kube_cache_obj *h = &c->v[i];
        char *rv = strdup(obj->rv), *j;
        if (rv == NULL)
            return -1;
        if (h->json_n == obj->json_n &&
            memcmp(h->json, obj->json, obj->json_n) == 0) {
            free(h->rv);
            h->rv = rv;
            h->seen = 1;
            *out = h;
            return KUBE_CACHE_SAME;
        }
        j = strdup(obj->json);
        if (j == NULL) {
            free(rv);
            return -1;
        }
        free(h->rv);
        free(h->json);
        free(h->error);
        h->rv = rv;
        h->json = j;
        h->json_n = obj->json_n;
        h->error = NULL;
        h->seen = 1;
        *out = h;
        return KUBE_CACHE_CHANGED;
    }
    memset(&o, 0, sizeof(o));
    if (asprintf(&o.key, "%s/%s%c%s%c%s", obj->ns, obj->name, '\0', obj->ns,
                 '\0', obj->name) < 0)
        return -1;
    o.ns = o.key + strlen(o.key) + 1;
    o.name = o.ns + strlen(o.ns) + 1;
    o.json = strdup(obj->json);
    o.json_n = obj->json_n;
    o.rv = strdup(obj->rv);
    o.seen = 1;
    if (asprintf(&o.input, "kubernetes:%s/%s/%s", kind,
                 obj->ns[0] ? obj->ns : "-", obj->name) < 0)
        o.input = NULL;
    if (o.json == NULL || o.rv == NULL || o.input == NULL)
        goto oom;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct kube_cache_obj *v = realloc(c->v, cap * sizeof(*v));
        if (v == NULL)
            goto oom;
        c->v = v;
        c->cap = cap;
    }
    memmove(&c->v[i + 1], &c->v[i], (c->n - i) * sizeof(*c->v));
    c->v[i] = o;
    c->n++;
    *out = &c->v[i];
    return KUBE_CACHE_ADDED;
oom:
    obj_dispose(&o);
    return -1;
}

static void drop_at(struct kube_cache *c, size_t i)
{
    obj_dispose(&c->v[i]);
    memmove(&c->v[i], &c->v[i + 1], (c->n - i - 1) * sizeof(*c->v));
    c->n--;
}

int kube_cache_del(struct kube_cache *c, const char *ns, const char *name)
{
    int found;
    size_t i = find(c, ns, name, &found);

    if (!found)
        return 0;
    drop_at(c, i);
    return 1;
}

void kube_cache_unmark(struct kube_cache *c)
{
    for (size_t i = 0; i < c->n; i++)
        c->v[i].seen = 0;
}

size_t kube_cache_sweep(struct kube_cache *c)
{
    size_t gone = 0, w = 0;

    /* One pass, order kept: a relist after a long outage may drop many. */
    for (size_t i = 0; i < c->n; i++) {
        if (!c->v[i].seen) {
            obj_dispose(&c->v[i]);
            gone++;
            continue;
        }
        if (w != i)
            c->v[w] = c->v[i];
        w++;
    }
    c->n = w;
    return gone;
}
