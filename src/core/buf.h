#ifndef STRAIT_CORE_BUF_H
#define STRAIT_CORE_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <sys/types.h>

/*
 * A byte buffer with a hard cap, in the manner of curl's dynbuf: it grows
 * on demand and refuses to grow past the cap given at init. The same type
 * serves I/O (bytes are read in at the tail and written out from the head)
 * and text building (buf_printf, buf_append).
 *
 * Invariant: head <= tail <= alloc <= max. Bytes in [head, tail) are live.
 */
struct buf {
    char *data;
    size_t head;
    size_t tail;
    size_t alloc;
    size_t max;
    unsigned pooled : 1; /* the storage came from bufpool_fill() */
};

/* buf_init() prepares an empty buffer that never holds more than max bytes.
 * No memory is allocated until the first append or reserve. */
void buf_init(struct buf *b, size_t max);

/* buf_dispose() frees the storage; the buffer is empty and reusable. */
void buf_dispose(struct buf *b);

static inline size_t buf_len(const struct buf *b)
{
    return b->tail - b->head;
}

static inline const char *buf_ptr(const struct buf *b)
{
    return b->data + b->head;
}

/* Bytes that could still be added before the cap is reached. */
static inline size_t buf_room(const struct buf *b)
{
    return b->max - buf_len(b);
}

/*
 * buf_reserve() makes at least want contiguous writable bytes available at
 * the tail (moving live bytes to the front or growing as needed) and returns
 * a pointer to them, or NULL when want would exceed the cap or memory is
 * short. Commit what was written with buf_commit().
 */
char *buf_reserve(struct buf *b, size_t want);

/* buf_reserve_any() returns the largest contiguous writable region up to the
 * cap, its size in *room; NULL when the buffer is full. */
char *buf_reserve_any(struct buf *b, size_t *room);

void buf_commit(struct buf *b, size_t n);

/* buf_consume() drops n bytes from the head. When the buffer becomes empty
 * its offsets reset so the next read starts at the front. */
void buf_consume(struct buf *b, size_t n);

/* buf_truncate() keeps the first len bytes and drops the rest (the most
 * recently appended): how a writer takes back what it queued but has not
 * sent yet. No-op when the buffer holds len bytes or fewer. */
void buf_truncate(struct buf *b, size_t len);

/* buf_release() frees the storage if the buffer is empty, so idle
 * connections hold no I/O memory. */
void buf_release_if_empty(struct buf *b);

/* Appending: return 0, or -1 when the cap would be exceeded (nothing is
 * appended then). */
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* buf_cstr() returns the live bytes NUL-terminated (the NUL is not counted
 * in buf_len), or "" when the NUL does not fit. */
const char *buf_cstr(struct buf *b);

/* buf_read_fd() reads once from fd into the free space; returns what read()
 * returned (-1 with errno), or -2 when the buffer is full. */
ssize_t buf_read_fd(struct buf *b, int fd);

/* buf_write_fd() writes once from the head to fd and consumes what was
 * written; returns what write() returned. */
ssize_t buf_write_fd(struct buf *b, int fd);

#endif
