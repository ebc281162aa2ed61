#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "control/notify.h"

int notify_init(struct notify *n, const char *path, const char **why)
{
    size_t len;

    memset(n, 0, sizeof(*n));
    n->fd = -1;
    if (path == NULL || path[0] == '\0')
        return 0;
    len = strlen(path);
    if (path[0] != '/' && path[0] != '@') {
        *why = "NOTIFY_SOCKET is neither an absolute path nor an abstract "
               "name ('@...'); notifications are off";
        return -1;
    }
    if (len >= sizeof(n->addr.sun_path) || (path[0] == '@' && len < 2)) {
        *why = "NOTIFY_SOCKET is too long or empty; notifications are off";
        return -1;
    }
    n->addr.sun_family = AF_UNIX;
    memcpy(n->addr.sun_path, path, len);
    /* An abstract name starts with a NUL and is not NUL-terminated: its
     * length is what the address length says. */
    if (path[0] == '@')
        n->addr.sun_path[0] = '\0';
    n->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
                         (path[0] == '/' ? 1 : 0));
    n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (n->fd < 0) {
        *why = "cannot create the notification socket; notifications are off";
        return -1;
    }
    return 1;
}

void notify_dispose(struct notify *n)
{
    if (n->fd >= 0)
        close(n->fd);
    n->fd = -1;
}

int notify_enabled(const struct notify *n)
{
    return n->fd >= 0;
}

int notify_send(const struct notify *n, const char *msg)
{
    ssize_t w;

    if (n->fd < 0)
        return 0;
    do {
        w = sendto(n->fd, msg, strlen(msg), MSG_NOSIGNAL,
                   (const struct sockaddr *)&n->addr, n->len);
    } while (w < 0 && errno == EINTR);
    return w < 0 ? -1 : 0;
}

int notify_sendf(const struct notify *n, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    if (n->fd < 0)
        return 0;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return notify_send(n, msg);
}

uint64_t notify_monotonic_usec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A decimal number, the whole string; 0 when it is not one. */
static unsigned long long parse_u64(const char *s)
{
    char *end;
    unsigned long long v;

    if (s == NULL || s[0] < '0' || s[0] > '9')
        return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return 0;
    return v;
}

uint64_t notify_watchdog_usec(const char *usec, const char *pid, pid_t self)
{
    unsigned long long v = parse_u64(usec);

    if (v == 0)
        return 0;
    if (pid != NULL && parse_u64(pid) != (unsigned long long)self)
        return 0;
    return (uint64_t)v;
}
