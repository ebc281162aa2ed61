/*
 * Unit tests for src/net/listener.c: sharded counters and the per-worker
 * listening sockets of one address.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/addr.h"
#include "net/listener.h"
#include "net/sock.h"

#define NWORKERS 4

static uint16_t port_of(const struct addr *a)
{
    return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
}

static void assert_closed(int fd)
{
    errno = 0;
    assert_int_equal(fcntl(fd, F_GETFD), -1);
    assert_int_equal(errno, EBADF);
}

/* free_port() holds a SO_REUSEPORT listener on a kernel-chosen loopback
 * port, so the port cannot be taken by anyone else while the test binds
 * its own sockets to it. */
static int free_port(struct addr *a)
{
    struct addr any;
    const char *why = NULL;
    char *err = NULL;
    int fd;

    assert_int_equal(addr_parse(&any, "127.0.0.1:0", 11, 1, &why), 0);
    fd = sock_listen(&any, 4, 1, &err);
    if (fd < 0)
        fail_msg("sock_listen: %s", err ? err : "?");
    assert_int_equal(sock_local_addr(fd, a), 0);
    assert_int_not_equal(port_of(a), 0);
    return fd;
}

static void test_socks_tcp_per_worker(void **state)
{
    struct addr a, b;
    struct listener_socks *s;
    char *err = NULL;
    int holder = free_port(&a);
    int fds[NWORKERS];

    (void)state;
    s = listener_socks_open(&a, NWORKERS, 16, NULL, &err);
    if (s == NULL)
        fail_msg("listener_socks_open: %s", err ? err : "?");
    assert_null(err);
    close(holder);

    assert_int_equal(s->refs, 1);
    assert_int_equal(s->nfds, NWORKERS);
    assert_true(addr_equal(&s->addr, &a));
    for (int i = 0; i < NWORKERS; i++) {
        int on = 0;
        socklen_t len = sizeof(on);

        fds[i] = s->fds[i];
        assert_true(fds[i] >= 0);
        for (int j = 0; j < i; j++)
            assert_int_not_equal(fds[i], fds[j]);
        /* Every socket is bound to the same address, with SO_REUSEPORT. */
        assert_int_equal(sock_local_addr(fds[i], &b), 0);
        assert_true(addr_equal(&a, &b));
        assert_int_equal(
            getsockopt(fds[i], SOL_SOCKET, SO_REUSEPORT, &on, &len), 0);
        assert_int_not_equal(on, 0);
        assert_true(fcntl(fds[i], F_GETFL) & O_NONBLOCK);
        /* Each worker gets its own socket. */
        assert_int_equal(listener_socks_fd(s, i), fds[i]);
        assert_int_equal(listener_socks_fd(s, i + NWORKERS), fds[i]);
    }

    /* A connection lands on one of them. */
    {
        int in_progress, cfd, got = -1;
        struct pollfd p[NWORKERS];

        cfd = sock_connect(&a, &in_progress);
        assert_true(cfd >= 0);
        for (int i = 0; i < NWORKERS; i++) {
            p[i].fd = fds[i];
            p[i].events = POLLIN;
            p[i].revents = 0;
        }
        assert_true(poll(p, NWORKERS, 5000) >= 1);
        for (int i = 0; i < NWORKERS; i++)
            if (p[i].revents & POLLIN)
                got = i;
        assert_true(got >= 0);
        {
            int sfd = accept4(fds[got], NULL, NULL, SOCK_CLOEXEC);
            assert_true(sfd >= 0);
            close(sfd);
        }
        close(cfd);
    }

    listener_socks_unref(s);
    for (int i = 0; i < NWORKERS; i++)
        assert_closed(fds[i]);
}

static void test_socks_refs(void **state)
{
    struct addr a;
    struct listener_socks *s;
    char *err = NULL;
    int holder = free_port(&a);
    int fd0;

    (void)state;
    s = listener_socks_open(&a, 2, 16, NULL, &err);
    assert_non_null(s);
    close(holder);
    fd0 = s->fds[0];
    /* The main thread takes references by hand (server.c does refs++). */
    s->refs++;
    listener_socks_unref(s);
    assert_int_not_equal(fcntl(fd0, F_GETFD), -1);
    listener_socks_unref(s);
    assert_closed(fd0);
    listener_socks_unref(NULL);
}

/* count_fds() counts this process's open descriptors. */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* A port held by a socket without SO_REUSEPORT: opening fails with a
 * message naming the address, and nothing is left open. */
static void test_socks_tcp_in_use(void **state)
{
    struct addr any, a;
    const char *why = NULL;
    char *err = NULL, s[ADDR_STRLEN];
    int holder, before;

    (void)state;
    assert_int_equal(addr_parse(&any, "127.0.0.1:0", 11, 1, &why), 0);
    holder = sock_listen(&any, 4, 0, &err);
    before = count_fds();
    assert_true(holder >= 0);
    assert_int_equal(sock_local_addr(holder, &a), 0);
    addr_format(&a, s, sizeof(s));

    assert_null(listener_socks_open(&a, NWORKERS, 16, NULL, &err));
    assert_non_null(err);
    assert_non_null(strstr(err, s));
    assert_non_null(strstr(err, strerror(EADDRINUSE)));
    free(err);

    /* The sockets opened before the failure were closed. */
    assert_int_equal(count_fds(), before);
    close(holder);
}

struct tmpdir {
    char dir[64];
    char path[128];
};

static int unix_setup(void **state)
{
    struct tmpdir *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return -1;
    snprintf(t->dir, sizeof(t->dir), "/tmp/strait-lsn-XXXXXX");
    if (mkdtemp(t->dir) == NULL) {
        free(t);
        return -1;
    }
    snprintf(t->path, sizeof(t->path), "%s/l.sock", t->dir);
    *state = t;
    return 0;
}

static int unix_teardown(void **state)
{
    struct tmpdir *t = *state;

    unlink(t->path);
    rmdir(t->dir);
    free(t);
    return 0;
}

static void test_socks_unix_shared(void **state)
{
    struct tmpdir *t = *state;
    struct addr a;
    struct listener_socks *s;
    const char *why = NULL;
    char *err = NULL, spec[256];
    struct stat st;
    int fd;

    snprintf(spec, sizeof(spec), "unix:%s", t->path);
    assert_int_equal(addr_parse(&a, spec, strlen(spec), 0, &why), 0);
    s = listener_socks_open(&a, NWORKERS, 16, NULL, &err);
    if (s == NULL)
        fail_msg("listener_socks_open: %s", err ? err : "?");
    assert_null(err);
    /* Unix sockets have no port reuse: one socket serves every worker. */
    assert_int_equal(s->nfds, 1);
    fd = s->fds[0];
    for (int w = 0; w < 2 * NWORKERS; w++)
        assert_int_equal(listener_socks_fd(s, w), fd);
    assert_int_equal(lstat(t->path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));

    listener_socks_unref(s);
    assert_closed(fd);
    /* The socket file is removed with the last reference. */
    errno = 0;
    assert_int_equal(lstat(t->path, &st), -1);
    assert_int_equal(errno, ENOENT);
}

static void test_socks_unix_fail_keeps_file(void **state)
{
    struct tmpdir *t = *state;
    struct addr a;
    const char *why = NULL;
    char *err = NULL, spec[256];
    struct stat st;
    int fd;

    fd = open(t->path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    snprintf(spec, sizeof(spec), "unix:%s", t->path);
    assert_int_equal(addr_parse(&a, spec, strlen(spec), 0, &why), 0);
    assert_null(listener_socks_open(&a, NWORKERS, 16, NULL, &err));
    assert_non_null(err);
    assert_non_null(strstr(err, t->path));
    free(err);
    /* A failed open does not unlink a file it never bound. */
    assert_int_equal(lstat(t->path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_socks_tcp_per_worker),
        cmocka_unit_test(test_socks_refs),
        cmocka_unit_test(test_socks_tcp_in_use),
        cmocka_unit_test_setup_teardown(test_socks_unix_shared, unix_setup,
                                        unix_teardown),
        cmocka_unit_test_setup_teardown(test_socks_unix_fail_keeps_file,
                                        unix_setup, unix_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
