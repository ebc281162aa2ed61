#ifndef STRAIT_NET_CONN_H
#define STRAIT_NET_CONN_H

#include <event2/event_struct.h>
#include <stddef.h>
#include <sys/types.h>

/*
 * A byte stream over a socket: plain, or TLS through the ops a higher
 * layer installs (src/tls). Codecs read and write through it and tell it
 * what they want next; it maps that onto socket readiness, including
 * TLS's "this read needs the socket writable" cases.
 *
 * One event carries both directions and calls on_io(c, arg); a codec
 * tries both directions each time, so it never matters why it fired.
 * conn_wake() runs on_io on the loop's next turn, so a codec needs no
 * event of its own to defer work (an idle connection holds one event,
 * not three or four).
 */
struct conn;
struct cx_limit;

enum {
    CONN_AGAIN = -1, /* would block; wait for conn_want() to fire */
    CONN_ERROR = -2, /* failed; c->why says why */
};

struct conn_ops {
    /* >0 bytes, 0 end of stream, CONN_AGAIN or CONN_ERROR. */
    ssize_t (*read)(struct conn *c, void *p, size_t n);
    ssize_t (*write)(struct conn *c, const void *p, size_t n);
    /* 1 done, 0 in progress (CONN_AGAIN semantics), -1 failed. */
    int (*handshake)(struct conn *c);
    /* Ends our sending side (FIN or close_notify); best effort. */
    void (*shutdown)(struct conn *c);
    /* Frees transport state (not the fd). */
    void (*dispose)(struct conn *c);
};

struct conn {
    int fd;
    const struct conn_ops *ops;
    void *tls; /* owned by the TLS ops */
    struct event ev;
    unsigned rev_on : 1, wev_on : 1; /* the interest ev is added with */
    unsigned woken : 1;              /* a conn_wake() not yet delivered */
    unsigned read_needs_write : 1; /* the last read wants the socket writable */
    unsigned write_needs_read : 1;
    unsigned handshaking : 1;
    unsigned eof : 1;
    /* Plain transport: the socket may hold bytes. Cleared when a read
     * came back short (the kernel's buffer was empty after it) or would
     * block, set again when the read event fires; while clear, a read
     * answers CONN_AGAIN without a syscall. Epoll is level-triggered, so
     * bytes that arrive later always fire the event. */
    unsigned readable : 1;
    const char *why;
    void (*on_io)(struct conn *c, void *arg);
    void *arg;
    /* The connection-limit slot a downstream connection holds (set by
     * whoever accepted it; NULL: none), given back by conn_close() and
     * carried by conn_move(). */
    struct cx_limit *cx;
};

/* conn_init() wraps fd (owned from now on) as a plain connection. */
void conn_init(struct conn *c, struct event_base *base, int fd,
               void (*on_io)(struct conn *, void *), void *arg);

/* conn_move() hands src's connection (fd, transport state) to dst, which
 * gets fresh events on base calling on_io(dst, arg); src's events are
 * stopped and src no longer owns anything (closing it is a no-op). For a
 * connection that changes owner, e.g. from a TLS inspector to a relay. */
void conn_move(struct conn *dst, struct conn *src, struct event_base *base,
               void (*on_io)(struct conn *, void *), void *arg);

/* conn_close() stops the events, frees transport state, closes fd and
 * gives back the connection-limit slot. */
void conn_close(struct conn *c);

static inline ssize_t conn_read(struct conn *c, void *p, size_t n)
{
    return c->ops->read(c, p, n);
}

static inline ssize_t conn_write(struct conn *c, const void *p, size_t n)
{
    return c->ops->write(c, p, n);
}

/* conn_want() sets socket interest from what the codec wants to do. */
void conn_want(struct conn *c, int want_read, int want_write);

/* conn_wake() calls on_io once on a later turn of the loop, whatever the
 * socket's state; several wakes before then make one call. conn_close()
 * cancels it. */
void conn_wake(struct conn *c);

/*
 * A transport that makes its own connection (an HBONE tunnel): open(arg,
 * c, on_io, io_arg) sets c up (fd, ops) calling on_io(c, io_arg); c's
 * handshake op then says when it is up (1), still going (0) or failed
 * (-1, c->why). 0, or -1 when it could not start (c untouched).
 */
struct conn_opener {
    int (*open)(void *arg, struct conn *c, void (*on_io)(struct conn *, void *),
                void *io_arg);
    void *arg;
};

/* The plain transport, for codecs that set ops back after TLS. */
extern const struct conn_ops conn_plain_ops;

#endif
