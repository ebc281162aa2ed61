#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/err.h"
#include "net/sock.h"

static int fail_msg(char **err, int fd, const char *what, const struct addr *a)
{
    char as[ADDR_STRLEN];
    int e = errno;

    if (fd >= 0)
        close(fd);
    err_set(err, "%s %s: %s", what, addr_format(a, as, sizeof(as)),
            strerror(e));
    errno = e;
    return -1;
}

int sock_listen(const struct addr *a, int backlog, int reuseport, char **err)
{
    int one = 1;
    int fam = addr_family(a);
    int fd;

    *err = NULL;
    fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fail_msg(err, -1, "cannot create socket for", a);
    if (fam == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)&a->ss;
        struct stat st;
        if (lstat(un->sun_path, &st) == 0 && S_ISSOCK(st.st_mode))
            unlink(un->sun_path);
    } else {
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
            return fail_msg(err, fd, "cannot set SO_REUSEADDR on", a);
        if (reuseport &&
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
            return fail_msg(err, fd, "cannot set SO_REUSEPORT on", a);
        if (fam == AF_INET6 &&
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)
            return fail_msg(err, fd, "cannot set IPV6_V6ONLY on", a);
    }
    if (bind(fd, (const struct sockaddr *)&a->ss, a->len) < 0)
        return fail_msg(err, fd, "cannot bind", a);
    if (listen(fd, backlog) < 0)
        return fail_msg(err, fd, "cannot listen on", a);
    return fd;
}

int sock_connect(const struct addr *a, int *in_progress)
{
    int fd =
        socket(addr_family(a), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;

    *in_progress = 0;
    if (fd < 0)
        return -1;
    if (addr_family(a) != AF_UNIX)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0)
        return fd;
    if (errno == EINPROGRESS) {
        *in_progress = 1;
        return fd;
    }
    {
        int e = errno;
        close(fd);
        errno = e;
    }
    return -1;
}

int sock_error(int fd)
{
    int e = 0;
    socklen_t len = sizeof(e);

    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
        return errno;
    return e;
}

int sock_local_addr(int fd, struct addr *a)
{
    memset(a, 0, sizeof(*a));
    a->len = sizeof(a->ss);
    return getsockname(fd, (struct sockaddr *)&a->ss, &a->len);
}
