#include "config.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"

struct arena_chunk {
    struct arena_chunk *next;
    size_t size;
    alignas(max_align_t) char data[];
};

#define ARENA_ALIGN (alignof(max_align_t))

void arena_init(struct arena *a, size_t chunk_size)
{
    a->chunks = NULL;
    a->chunk_size = chunk_size;
    a->used = 0;
    a->total = 0;
}

void arena_dispose(struct arena *a)
{
    struct arena_chunk *c = a->chunks;

    while (c != NULL) {
        struct arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    arena_init(a, a->chunk_size);
}

void *arena_alloc(struct arena *a, size_t n)
{
    size_t need = (n + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
    struct arena_chunk *c = a->chunks;

    if (need < n)
        return NULL;
    if (c == NULL || c->size - a->used < need) {
        size_t size = need > a->chunk_size ? need : a->chunk_size;
        struct arena_chunk *nc = malloc(sizeof(*nc) + size);
        if (nc == NULL)
            return NULL;
        nc->size = size;
        if (need > a->chunk_size && c != NULL) {
            /* An oversized block goes behind the current chunk, so the
             * current chunk's free space stays usable. */
            nc->next = c->next;
            c->next = nc;
            a->total += n;
            return nc->data;
        }
        nc->next = c;
        a->chunks = nc;
        a->used = 0;
        c = nc;
    }
    a->used += need;
    a->total += n;
    return c->data + a->used - need;
}

char *arena_dup(struct arena *a, const void *p, size_t n)
{
    char *d = arena_alloc(a, n + 1);

    if (d == NULL)
        return NULL;
    if (n > 0)
        memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

struct slice arena_slice(struct arena *a, struct slice s)
{
    struct slice out = {arena_dup(a, s.p, s.n), s.n};

    if (out.p == NULL)
        out.n = 0;
    return out;
}
