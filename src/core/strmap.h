#ifndef STRAIT_CORE_STRMAP_H
#define STRAIT_CORE_STRMAP_H

#include <stddef.h>

/*
 * A map from NUL-terminated strings to pointers: open addressing with
 * linear probing, grown at half load. The map owns copies of its keys and
 * never owns the values. Not thread-safe; for the control thread's
 * indexes (clusters by name, by fingerprint), where lists would make a
 * 10,000-resource snapshot quadratic.
 */
struct strmap_slot;

struct strmap {
    struct strmap_slot *v;
    size_t cap; /* a power of two, or 0 before the first put */
    size_t n;
};

void strmap_init(struct strmap *m);
/* strmap_dispose() frees the keys and the table, not the values. */
void strmap_dispose(struct strmap *m);

/* strmap_get() returns the value of key, or NULL when it is absent. */
void *strmap_get(const struct strmap *m, const char *key);

/* strmap_put() sets key's value (replacing an old one); -1 when memory
 * runs out, and then the map is unchanged. */
int strmap_put(struct strmap *m, const char *key, void *value);

/* strmap_next() walks the map: start with *pos = 0; returns 0 at the end.
 * The order is the table's, not insertion order. */
int strmap_next(const struct strmap *m, size_t *pos, const char **key,
                void **value);

#endif
