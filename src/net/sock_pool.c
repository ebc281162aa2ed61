#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/err.h"
#include "net/sock.h"
#include "net/sock_pool.h"

void sock_pool_init(struct sock_pool *p)
{
    memset(p, 0, sizeof(*p));
}

static struct sock_pool_entry *find(struct sock_pool *p, int kind,
                                    const struct addr *a, int index)
{
    for (size_t i = 0; p != NULL && i < p->n; i++) {
        struct sock_pool_entry *e = &p->v[i];
        if (e->fd >= 0 && e->kind == kind && e->index == index &&
            addr_equal(&e->addr, a))
            return e;
    }
    return NULL;
}

int sock_pool_add(struct sock_pool *p, int kind, const struct addr *a,
                  int index, int fd)
{
    struct sock_pool_entry *e;

    if (find(p, kind, a, index) != NULL)
        goto fail;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        struct sock_pool_entry *v = realloc(p->v, cap * sizeof(*v));
        if (v == NULL)
            goto fail;
        p->v = v;
        p->cap = cap;
    }
    e = &p->v[p->n++];
    e->kind = kind;
    e->index = index;
    e->addr = *a;
    e->fd = fd;
    return 0;
fail:
    close(fd);
    return -1;
}

int sock_pool_has(struct sock_pool *p, int kind, const struct addr *a,
                  int index)
{
    return find(p, kind, a, index) != NULL;
}

int sock_pool_take(struct sock_pool *p, int kind, const struct addr *a,
                   int index)
{
    struct sock_pool_entry *e = find(p, kind, a, index);
    int fd;

    if (e == NULL)
        return -1;
    fd = e->fd;
    e->fd = -1;
    p->taken++;
    return fd;
}

int sock_pool_listen(struct sock_pool *p, int kind, const struct addr *a,
                     int index, int backlog, int reuseport, char **err)
{
    int fd = sock_pool_take(p, kind, a, index);

    if (fd < 0)
        return sock_listen(a, backlog, reuseport, err);
    /* Listening again only changes the backlog; the queue is kept. */
    if (listen(fd, backlog) < 0) {
        char as[ADDR_STRLEN];
        int e = errno;
        close(fd);
        *err = NULL;
        err_set(err, "cannot listen on the inherited socket of %s: %s",
                addr_format(a, as, sizeof(as)), strerror(e));
        return -1;
    }
    return fd;
}

size_t sock_pool_close_rest(struct sock_pool *p)
{
    size_t n = 0;

    for (size_t i = 0; p != NULL && i < p->n; i++) {
        if (p->v[i].fd >= 0) {
            close(p->v[i].fd);
            p->v[i].fd = -1;
            n++;
        }
    }
    return n;
}

void sock_pool_dispose(struct sock_pool *p)
{
    if (p == NULL)
        return;
    sock_pool_close_rest(p);
    free(p->v);
    memset(p, 0, sizeof(*p));
}
