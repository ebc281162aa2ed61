#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/strmap.h"

struct strmap_slot {
    char *key; /* NULL: empty */
    uint64_t hash;
    void *value;
};

/* FNV-1a: keys are names we made ourselves, not attacker input. */
static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;

    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

void strmap_init(struct strmap *m)
{
    memset(m, 0, sizeof(*m));
}

void strmap_dispose(struct strmap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->v[i].key);
    free(m->v);
    memset(m, 0, sizeof(*m));
}

static struct strmap_slot *find(const struct strmap *m, const char *key,
                                uint64_t h)
{
    size_t mask = m->cap - 1;

    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        struct strmap_slot *s = &m->v[i];
        if (s->key == NULL || (s->hash == h && strcmp(s->key, key) == 0))
            return s;
    }
}

void *strmap_get(const struct strmap *m, const char *key)
{
    const struct strmap_slot *s;

    if (m->cap == 0)
        return NULL;
    s = find(m, key, hash_str(key));
    return s->key != NULL ? s->value : NULL;
}

static int grow(struct strmap *m)
{
    size_t cap = m->cap ? 2 * m->cap : 16;
    struct strmap nm = {calloc(cap, sizeof(struct strmap_slot)), cap, m->n};

    if (nm.v == NULL)
        return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->v[i].key != NULL)
            *find(&nm, m->v[i].key, m->v[i].hash) = m->v[i];
    free(m->v);
    *m = nm;
    return 0;
}

int strmap_put(struct strmap *m, const char *key, void *value)
{
    uint64_t h = hash_str(key);
    struct strmap_slot *s;

    if ((m->n + 1) * 2 > m->cap && grow(m) < 0)
        return -1;
    s = find(m, key, h);
    if (s->key == NULL) {
        s->key = strdup(key);
        if (s->key == NULL)
            return -1;
        s->hash = h;
        m->n++;
    }
    s->value = value;
    return 0;
}

int strmap_next(const struct strmap *m, size_t *pos, const char **key,
                void **value)
{
    for (; *pos < m->cap; (*pos)++)
        if (m->v[*pos].key != NULL) {
            *key = m->v[*pos].key;
            *value = m->v[*pos].value;
            (*pos)++;
            return 1;
        }
    return 0;
}
