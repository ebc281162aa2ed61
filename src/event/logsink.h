#ifndef STRAIT_EVENT_LOGSINK_H
#define STRAIT_EVENT_LOGSINK_H

#include <stddef.h>
#include <stdint.h>

#include "event/timer-t.h"

struct event_base;

/*
 * Where access-log lines go without a worker ever waiting on a disk or a
 * pipe: each worker gathers the lines of one loop turn in a buffer of its
 * own (struct lsink_buf) and hands the whole buffer to the sink's writer
 * thread, which writes it to stderr or a file. The hand-off takes the
 * sink's lock once per buffer (not per line), only to link it to a list.
 *
 * What is waiting for the writer is bounded (max_pending bytes): a
 * buffer that would go past the bound is dropped and its lines counted
 * in dropped, so a slow or stuck disk costs log lines, never latency.
 *
 * A file is opened with O_APPEND (lines of other writers do not
 * interleave within a line) and reopened by path on lsink_reopen(), after
 * logrotate renamed it (SIGUSR1). The writer writes whole lines, at most
 * PIPE_BUF bytes a call when the target is a pipe, so lines on a shared
 * stderr pipe stay whole beside strait's other log lines.
 */
struct lsink;

struct lsink_stats {
    uint64_t written;      /* lines written */
    uint64_t dropped;      /* lines dropped: the bound was reached */
    uint64_t write_errors; /* failed write(2) calls (their lines lost) */
    uint64_t reopens;      /* successful reopens of the file */
    uint64_t pending;      /* bytes waiting for the writer now */
};

/* lsink_new() opens path for appending (created 0640; NULL or "": fd 2,
 * never reopened) and starts the writer thread. Returns the sink, or
 * NULL with an allocated message in *err. */
struct lsink *lsink_new(const char *path, size_t max_pending, char **err);

/* lsink_free() writes what is pending, stops the writer and closes the
 * file. Every lsink_buf must have been disposed. A writer still stuck
 * after 5 s (a pipe nobody reads) is cancelled and what it held is lost,
 * so the process can exit. NULL: no-op. */
void lsink_free(struct lsink *s);

/* lsink_reopen() makes the writer reopen its path before it writes next
 * (a failure keeps the old file and is logged). Any thread. */
void lsink_reopen(struct lsink *s);

/* lsink_stats() reads the counters. Any thread. */
void lsink_stats(struct lsink *s, struct lsink_stats *out);

/* lsink_flush_wait() waits until everything handed over so far is
 * written (tests, and exit). */
void lsink_flush_wait(struct lsink *s);

/*
 * A worker's buffer. lsink_buf_init() ties it to sink s and to the loop
 * base it is used from; the buffer is only touched from that loop's
 * thread. Lines added during one loop turn are handed over together at
 * the end of the turn (a deferred timer), or at once when the buffer
 * fills.
 */
struct lsink_chunk;

struct lsink_buf {
    struct lsink *sink;
    struct lsink_chunk *cur; /* being filled; NULL: none yet */
    struct timer flush;
};

void lsink_buf_init(struct lsink_buf *b, struct lsink *s,
                    struct event_base *base);
/* Hands over what is buffered and frees the buffer. */
void lsink_buf_dispose(struct lsink_buf *b);

/* lsink_buf_line() queues n bytes, one whole line ending in '\n' (the
 * caller's; one is added when missing). A line longer than the chunk
 * size (16 KiB) is cut, keeping its newline. */
void lsink_buf_line(struct lsink_buf *b, const char *p, size_t n);

/* The largest line, and the size of a worker's buffer. */
#define LSINK_CHUNK 16384

#endif
