#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/conn.h"
#include "net/overload.h"

static ssize_t plain_read(struct conn *c, void *p, size_t n)
{
    ssize_t r;

    /* The last read left the socket empty and no read event has fired
     * since: a recv() now would only say EAGAIN. */
    if (!c->readable)
        return CONN_AGAIN;
    do {
        r = recv(c->fd, p, n, 0);
    } while (r < 0 && errno == EINTR);
    if (r > 0 && (size_t)r < n)
        c->readable = 0;
    if (r >= 0)
        return r;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        c->readable = 0;
        return CONN_AGAIN;
    }
    c->why = errno == ECONNRESET ? "connection reset" : "read error";
    return CONN_ERROR;
}

static ssize_t plain_write(struct conn *c, const void *p, size_t n)
{
    ssize_t r;

    do {
        r = send(c->fd, p, n, MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    if (r >= 0)
        return r;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return CONN_AGAIN;
    c->why = errno == EPIPE || errno == ECONNRESET ? "connection reset"
                                                   : "write error";
    return CONN_ERROR;
}

static int plain_handshake(struct conn *c)
{
    (void)c;
    return 1;
}

static void plain_shutdown(struct conn *c)
{
    shutdown(c->fd, SHUT_WR);
}

static void plain_dispose(struct conn *c)
{
    (void)c;
}

const struct conn_ops conn_plain_ops = {
    plain_read, plain_write, plain_handshake, plain_shutdown, plain_dispose};

static void on_event(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    (void)fd;
    c->woken = 0;
    if (what & EV_READ)
        c->readable = 1;
    c->on_io(c, c->arg);
}

void conn_init(struct conn *c, struct event_base *base, int fd,
               void (*on_io)(struct conn *, void *), void *arg)
{
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->ops = &conn_plain_ops;
    c->readable = 1;
    c->on_io = on_io;
    c->arg = arg;
    event_assign(&c->ev, base, fd, EV_PERSIST, on_event, c);
}

void conn_move(struct conn *dst, struct conn *src, struct event_base *base,
               void (*on_io)(struct conn *, void *), void *arg)
{
    event_del(&src->ev);
    src->rev_on = src->wev_on = 0;
    src->woken = 0;
    /* Events are registered by address, so dst gets its own. */
    *dst = *src;
    dst->on_io = on_io;
    dst->arg = arg;
    event_assign(&dst->ev, base, dst->fd, EV_PERSIST, on_event, dst);
    src->fd = -1;
    src->tls = NULL;
    src->ops = &conn_plain_ops;
    src->cx = NULL;
}

void conn_want(struct conn *c, int want_read, int want_write)
{
    unsigned r = (want_read && !c->read_needs_write) ||
                 (want_write && c->write_needs_read);
    unsigned w = (want_write && !c->write_needs_read) ||
                 (want_read && c->read_needs_write);
    struct event_base *base;

    if (r == c->rev_on && w == c->wev_on)
        return;
    /* One event for both directions: a change of interest is a delete
     * and an add with the new flags, which libevent's change list folds
     * into one epoll_ctl(MOD). Deleting also drops a pending wake, so it
     * is queued again. */
    base = event_get_base(&c->ev);
    event_del(&c->ev);
    event_assign(&c->ev, base, c->fd,
                 (short)((r ? EV_READ : 0) | (w ? EV_WRITE : 0) | EV_PERSIST),
                 on_event, c);
    if (r || w)
        event_add(&c->ev, NULL);
    if (c->woken)
        event_active(&c->ev, EV_TIMEOUT, 0);
    c->rev_on = r;
    c->wev_on = w;
}

void conn_wake(struct conn *c)
{
    if (c->woken || c->fd < 0)
        return;
    c->woken = 1;
    event_active(&c->ev, EV_TIMEOUT, 0);
}

void conn_close(struct conn *c)
{
    if (c->fd < 0)
        return;
    event_del(&c->ev);
    c->rev_on = c->wev_on = 0;
    c->woken = 0;
    c->ops->dispose(c);
    close(c->fd);
    c->fd = -1;
    if (c->cx != NULL)
        cx_release(c->cx);
    c->cx = NULL;
}
