#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"

void buf_init(struct buf *b, size_t max)
{
    b->data = NULL;
    b->head = b->tail = b->alloc = 0;
    b->max = max;
    b->pooled = 0;
}

void buf_dispose(struct buf *b)
{
    free(b->data);
    buf_init(b, b->max);
}

/* Grow geometrically but never past the cap; small text buffers start at
 * 256 bytes, I/O buffers usually ask for their cap at once. */
static int buf_grow(struct buf *b, size_t need)
{
    size_t n = b->alloc ? b->alloc : 256;
    char *p;

    if (need > b->max)
        return -1;
    while (n < need)
        n = n > b->max / 2 ? b->max : n * 2;
    if (n > b->max)
        n = b->max;
    p = realloc(b->data, n);
    if (p == NULL)
        return -1;
    b->data = p;
    b->alloc = n;
    return 0;
}

char *buf_reserve(struct buf *b, size_t want)
{
    size_t len = buf_len(b);

    if (want > b->max - len)
        return NULL;
    if (b->alloc - b->tail >= want)
        return b->data + b->tail;
    /* Move live bytes to the front before growing: a bounded buffer should
     * use the room it has. */
    if (b->head > 0) {
        memmove(b->data, b->data + b->head, len);
        b->head = 0;
        b->tail = len;
        if (b->alloc - b->tail >= want)
            return b->data + b->tail;
    }
    if (buf_grow(b, len + want) < 0)
        return NULL;
    return b->data + b->tail;
}

char *buf_reserve_any(struct buf *b, size_t *room)
{
    size_t want = buf_room(b);
    char *p;

    if (want == 0) {
        *room = 0;
        return NULL;
    }
    p = buf_reserve(b, want);
    if (p == NULL) {
        *room = 0;
        return NULL;
    }
    *room = b->alloc - b->tail;
    return p;
}

void buf_commit(struct buf *b, size_t n)
{
    b->tail += n;
}

void buf_consume(struct buf *b, size_t n)
{
    if (n >= buf_len(b)) {
        b->head = b->tail = 0;
        return;
    }
    b->head += n;
}

void buf_truncate(struct buf *b, size_t len)
{
    if (len >= buf_len(b))
        return;
    if (len == 0) {
        b->head = b->tail = 0;
        return;
    }
    b->tail = b->head + len;
}

void buf_release_if_empty(struct buf *b)
{
    if (buf_len(b) == 0 && b->data != NULL)
        buf_dispose(b);
}

int buf_append(struct buf *b, const void *p, size_t n)
{
    char *dst;

    if (n == 0)
        return 0;
    dst = buf_reserve(b, n);
    if (dst == NULL)
        return -1;
    memcpy(dst, p, n);
    b->tail += n;
    return 0;
}

int buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    char small[256];
    va_list aq;
    int n;
    char *dst;

    va_copy(aq, ap);
    n = vsnprintf(small, sizeof(small), fmt, aq);
    va_end(aq);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof(small))
        return buf_append(b, small, (size_t)n);
    /* Reserve one byte more for vsnprintf's NUL; it is not committed. */
    dst = buf_reserve(b, (size_t)n + 1);
    if (dst == NULL)
        return -1;
    vsnprintf(dst, (size_t)n + 1, fmt, ap);
    b->tail += (size_t)n;
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

const char *buf_cstr(struct buf *b)
{
    char *p = buf_reserve(b, 1);

    if (p == NULL)
        return "";
    *p = '\0';
    return b->data + b->head;
}

ssize_t buf_read_fd(struct buf *b, int fd)
{
    size_t room;
    char *p = buf_reserve_any(b, &room);
    ssize_t n;

    if (p == NULL)
        return -2;
    do {
        n = read(fd, p, room);
    } while (n < 0 && errno == EINTR);
    if (n > 0)
        b->tail += (size_t)n;
    return n;
}

ssize_t buf_write_fd(struct buf *b, int fd)
{
    ssize_t n;

    if (buf_len(b) == 0)
        return 0;
    do {
        n = write(fd, buf_ptr(b), buf_len(b));
    } while (n < 0 && errno == EINTR);
    if (n > 0)
        buf_consume(b, (size_t)n);
    return n;
}
