#ifndef STRAIT_CORE_STATS_H
#define STRAIT_CORE_STATS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Counters without locks, sharded per worker thread.
 *
 * A layer declares its counters as a plain struct of uint64_t fields
 * (struct listener_counters, struct tls_counters, ...) and, beside it, a
 * table of their names (struct stats_desc) so the admin API can print
 * any layer's counters without knowing its struct. The object that owns
 * the counters (a listener) lays the structs of the layers it runs out
 * in one shard type (struct stats_layout) and allocates a block of one
 * shard per worker (struct stats_block).
 *
 * Each worker writes only its own shard, with a plain load and a relaxed
 * store (STAT_ADD: no lock prefix, no shared cache line, as shards are
 * padded to STATS_LINE). Readers on the main thread sum the shards with
 * relaxed loads (STAT_GET, stats_sum): a sum is exact once the writers
 * stopped, and never torn while they run.
 */

#define STATS_LINE 64

#define STAT_ADD(shard, field, n)                                              \
    __atomic_store_n(&(shard)->field, (shard)->field + (n), __ATOMIC_RELAXED)
#define STAT_GET(shard, field)                                                 \
    __atomic_load_n(&(shard)->field, __ATOMIC_RELAXED)

/* stats_field.minus when the field is a plain counter. */
#define STATS_NONE ((size_t)-1)

/*
 * One counter of a layer's struct, as the admin API prints it: name
 * (e.g. "rq_total"), the offset of its uint64_t in the struct and, for a
 * gauge kept as two counters (open = opened - closed), the offset of the
 * counter to subtract, else STATS_NONE.
 */
struct stats_field {
    const char *name;
    size_t off;
    size_t minus;
};

/*
 * A layer's counter struct: prefix put before each field's name (e.g.
 * "http.", or "" for none) and its fields in output order. Static,
 * owned by the layer that declares it.
 */
struct stats_desc {
    const char *prefix;
    const struct stats_field *fields;
    size_t nfields;
};

/* One layer's struct inside a shard, at offset off. */
struct stats_part {
    const struct stats_desc *desc;
    size_t off;
};

/*
 * The shard type of an owner: size bytes (uint64_t counters only, no
 * padding that is not zero), made of parts in output order. Static,
 * owned by the layer that composes it.
 */
struct stats_layout {
    size_t size;
    const struct stats_part *parts;
    size_t nparts;
};

/*
 * The counters of one named object, one shard per worker. A reload that
 * replaces the object hands the same block to its successor, so counters
 * stay monotonic. Reference-counted with atomics: taken when objects are
 * built or retired, never per connection or request.
 */
struct stats_block {
    int refs;
    int nshards;
    size_t stride; /* bytes from one shard to the next: a multiple of
                      STATS_LINE */
    const struct stats_layout *layout;
    char name[64];
    unsigned char mem[] __attribute__((aligned(STATS_LINE)));
};

/*
 * stats_block_new() allocates the zeroed counters of `name` (truncated to
 * 63 bytes) for nshards workers. layout must outlive the block. Returns
 * the block with one reference held by the caller, or NULL when memory is
 * short.
 */
struct stats_block *stats_block_new(const struct stats_layout *layout,
                                    const char *name, int nshards);
struct stats_block *stats_block_ref(struct stats_block *b);
/* stats_block_unref() drops a reference, freeing on the last; NULL is a
 * no-op. */
void stats_block_unref(struct stats_block *b);

/* stats_shard() is shard i (0 <= i < nshards) of b: the worker i's to
 * write, valid while b is referenced. */
static inline void *stats_shard(const struct stats_block *b, int i)
{
    return (void *)(b->mem + (size_t)i * b->stride);
}

/* stats_shard_value() reads the counter at byte offset off of shard i. */
uint64_t stats_shard_value(const struct stats_block *b, int i, size_t off);

/*
 * stats_sum_shards() adds up nshards shards of size bytes (uint64_t
 * counters only), stride bytes apart from shards, into out (size bytes,
 * overwritten). For owners that keep their own shards (a cluster).
 */
void stats_sum_shards(const void *shards, size_t stride, int nshards,
                      size_t size, void *out);

/* stats_sum() adds up every shard of b into out, layout->size bytes
 * (overwritten). */
void stats_sum(const struct stats_block *b, void *out);

/* stats_field_value() is field f of the part at base in the summed shard
 * sum: the counter, or the difference for a gauge. */
uint64_t stats_field_value(const void *sum, size_t base,
                           const struct stats_field *f);

/*
 * stats_each() sums b and calls fn for every field of every part of its
 * layout, in order, with the part's prefix, the field's name and its
 * value. Returns 0, or -1 when memory is short (fn not called).
 */
typedef void (*stats_each_fn)(void *arg, const char *prefix, const char *name,
                              uint64_t value);
int stats_each(const struct stats_block *b, stats_each_fn fn, void *arg);

#endif
