#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"

struct stats_block *stats_block_new(const struct stats_layout *layout,
                                    const char *name, int nshards)
{
    /* A zero-sized layout still gets a line per shard, so shards never
     * alias. */
    size_t stride = layout->size == 0 ? STATS_LINE
                                      : (layout->size + STATS_LINE - 1) /
                                            STATS_LINE * STATS_LINE;
    size_t size;
    struct stats_block *b;

    if (nshards < 0)
        return NULL;
    size = sizeof(struct stats_block) + (size_t)nshards * stride;
    if (posix_memalign((void **)&b, STATS_LINE, size) != 0)
        return NULL;
    memset(b, 0, size);
    b->refs = 1;
    b->nshards = nshards;
    b->stride = stride;
    b->layout = layout;
    snprintf(b->name, sizeof(b->name), "%s", name);
    return b;
}

struct stats_block *stats_block_ref(struct stats_block *b)
{
    __atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
    return b;
}

void stats_block_unref(struct stats_block *b)
{
    if (b != NULL && __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(b);
}

uint64_t stats_shard_value(const struct stats_block *b, int i, size_t off)
{
    const uint64_t *c =
        (const uint64_t *)(const void *)((const char *)stats_shard(b, i) + off);

    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

void stats_sum_shards(const void *shards, size_t stride, int nshards,
                      size_t size, void *out)
{
    uint64_t *o = out;
    size_t n = size / sizeof(uint64_t);

    memset(out, 0, size);
    for (int i = 0; i < nshards; i++) {
        const uint64_t *s =
            (const uint64_t *)(const void *)((const char *)shards +
                                             (size_t)i * stride);
        for (size_t k = 0; k < n; k++)
            o[k] += __atomic_load_n(&s[k], __ATOMIC_RELAXED);
    }
}

void stats_sum(const struct stats_block *b, void *out)
{
    stats_sum_shards(b->mem, b->stride, b->nshards, b->layout->size, out);
}

uint64_t stats_field_value(const void *sum, size_t base,
                           const struct stats_field *f)
{
    const char *p = (const char *)sum + base;
    uint64_t v, minus = 0;

    memcpy(&v, p + f->off, sizeof(v));
    if (f->minus != STATS_NONE)
        memcpy(&minus, p + f->minus, sizeof(minus));
    return v - minus;
}

int stats_each(const struct stats_block *b, stats_each_fn fn, void *arg)
{
    const struct stats_layout *lay = b->layout;
    void *sum = malloc(lay->size ? lay->size : 1);

    if (sum == NULL)
        return -1;
    stats_sum(b, sum);
    for (size_t p = 0; p < lay->nparts; p++) {
        const struct stats_part *part = &lay->parts[p];
        for (size_t f = 0; f < part->desc->nfields; f++)
            fn(arg, part->desc->prefix, part->desc->fields[f].name,
               stats_field_value(sum, part->off, &part->desc->fields[f]));
    }
    free(sum);
    return 0;
}
