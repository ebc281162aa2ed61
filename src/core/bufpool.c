#include "config.h"

#include <stdlib.h>

#include "core/buf.h"
#include "core/bufpool.h"
#include "core/memacct.h"

void bufpool_init(struct bufpool *p, size_t size, size_t keep)
{
    p->size = size;
    p->keep = keep;
    p->n = 0;
    p->free = NULL;
    p->acct = NULL;
    p->refusable = 0;
}

void bufpool_trim(struct bufpool *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->free[i]);
    p->n = 0;
}

void bufpool_dispose(struct bufpool *p)
{
    bufpool_trim(p);
    free(p->free);
    p->free = NULL;
}

int bufpool_fill(struct bufpool *p, struct buf *b)
{
    void *mem;

    if (b->data != NULL)
        return 0;
    if (memacct_take(p->acct, p->size, p->refusable) < 0)
        return -1;
    if (p->n > 0) {
        mem = p->free[--p->n];
    } else {
        mem = malloc(p->size);
        if (mem == NULL) {
            memacct_give(p->acct, p->size);
            return -1;
        }
    }
    b->data = mem;
    b->pooled = 1;
    b->alloc = p->size < b->max ? p->size : b->max;
    b->head = b->tail = 0;
    return 0;
}

/* Keeps mem on the free list if there is room, else frees it. */
static void give_back(struct bufpool *p, void *mem)
{
    if (p->free == NULL && p->keep > 0)
        p->free = calloc(p->keep, sizeof(*p->free));
    if (p->free != NULL && p->n < p->keep)
        p->free[p->n++] = mem;
    else
        free(mem);
}

void bufpool_put(struct bufpool *p, struct buf *b)
{
    if (b->data == NULL || buf_len(b) != 0)
        return;
    if (b->pooled)
        memacct_give(p->acct, p->size);
    give_back(p, b->data);
    b->data = NULL;
    b->pooled = 0;
    b->head = b->tail = b->alloc = 0;
}

void bufpool_drain(struct bufpool *p, struct buf *b)
{
    if (b->data == NULL || buf_len(b) != 0)
        return;
    /* Only buffers of the pool's size may come back to it. */
    if (b->pooled)
        memacct_give(p->acct, p->size);
    if (b->pooled || b->alloc == p->size)
        give_back(p, b->data);
    else
        free(b->data);
    b->data = NULL;
    b->pooled = 0;
    b->head = b->tail = b->alloc = 0;
}
