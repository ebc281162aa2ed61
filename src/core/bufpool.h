#ifndef STRAIT_CORE_BUFPOOL_H
#define STRAIT_CORE_BUFPOOL_H

#include <stddef.h>

struct buf;
struct memacct;

/*
 * A free list of equal-sized I/O buffers, one per thread and size, in the
 * manner of HAProxy's pools: a relay returns its buffer the moment it runs
 * empty, so idle sessions hold no buffer memory, and the next read takes a
 * buffer back without a trip through malloc. At most `keep` free buffers
 * are retained; the rest are freed. Not thread-safe by design.
 */
struct bufpool {
    size_t size;
    size_t keep;
    size_t n;
    void **free;
    /* Where the buffers handed out are accounted (NULL: nowhere), and
     * whether a fill may be refused there (the memory actions' last
     * stage): set by the owner after bufpool_init(). Free buffers are
     * not counted: at most keep of them. */
    struct memacct *acct;
    int refusable;
};

void bufpool_init(struct bufpool *p, size_t size, size_t keep);
void bufpool_dispose(struct bufpool *p);

/* bufpool_trim() frees every buffer on the free list; the pool stays
 * usable. Under memory pressure this is what lets what a flood of
 * connections held go back to the allocator, and from there to the
 * kernel, once they close. */
void bufpool_trim(struct bufpool *p);

/* bufpool_fill() gives b (which must hold no storage) a buffer of the
 * pool's size; 0, or -1 when memory is short or the accounting refused
 * it. */
int bufpool_fill(struct bufpool *p, struct buf *b);

/* bufpool_drain() takes b's storage back if b is empty; a no-op if b
 * still holds bytes or no storage. */
void bufpool_drain(struct bufpool *p, struct buf *b);

/* bufpool_fits() is true when a buffer capped at max can live in the
 * pool's buffers: filled from the pool it never grows, so
 * bufpool_put() may take it back whatever its alloc says. */
static inline int bufpool_fits(const struct bufpool *p, size_t max)
{
    return max <= p->size;
}

/* bufpool_put() takes back the storage of an empty b that
 * bufpool_fill(p) gave and that fits (bufpool_fits(p, b->max)); a no-op
 * if b still holds bytes or no storage. */
void bufpool_put(struct bufpool *p, struct buf *b);

#endif
