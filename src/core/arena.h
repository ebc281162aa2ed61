#ifndef STRAIT_CORE_ARENA_H
#define STRAIT_CORE_ARENA_H

#include <stddef.h>

#include "core/slice.h"

/*
 * A bump allocator for memory that lives exactly as long as one request:
 * header copies, route results, log fields. Nothing is freed alone; the
 * whole arena goes at once. The first chunk is allocated on first use, so
 * an arena that is never used costs nothing.
 */
struct arena_chunk;

struct arena {
    struct arena_chunk *chunks;
    size_t chunk_size;
    size_t used;  /* in the newest chunk */
    size_t total; /* bytes handed out, for limits and tests */
};

void arena_init(struct arena *a, size_t chunk_size);
void arena_dispose(struct arena *a);

/* arena_alloc() returns n bytes aligned for any type, or NULL when memory
 * is short. Large requests get a chunk of their own. */
void *arena_alloc(struct arena *a, size_t n);

/* arena_dup() copies n bytes (and a NUL after them, not counted). */
char *arena_dup(struct arena *a, const void *p, size_t n);

/* arena_slice() copies a slice into the arena; {NULL,0} on failure. */
struct slice arena_slice(struct arena *a, struct slice s);

#endif
