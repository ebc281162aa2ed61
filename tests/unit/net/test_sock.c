/*
 * Unit tests for src/net/sock.c on loopback: listening, connecting,
 * accepting, the errors a listener can meet, and unix socket files.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/addr.h"
#include "net/sock.h"

#define POLL_MS 5000

static void parse(struct addr *a, const char *s)
{
    const char *why = NULL;

    if (addr_parse(a, s, strlen(s), 1, &why) < 0)
        fail_msg("addr_parse(%s): %s", s, why);
}

static int wait_for(int fd, short events)
{
    struct pollfd p = {fd, events, 0};
    int n;

    do {
        n = poll(&p, 1, POLL_MS);
    } while (n < 0 && errno == EINTR);
    return n == 1 ? p.revents : 0;
}

static uint16_t port_of(const struct addr *a)
{
    if (addr_family(a) == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
}

/* listen_any() listens on host:0 and returns the fd and the bound address. */
static int listen_any(const char *spec, int reuseport, struct addr *bound)
{
    struct addr a;
    char *err = NULL;
    int fd;

    parse(&a, spec);
    fd = sock_listen(&a, 16, reuseport, &err);
    if (fd < 0)
        fail_msg("sock_listen(%s): %s", spec, err ? err : "?");
    assert_null(err);
    assert_int_equal(sock_local_addr(fd, bound), 0);
    return fd;
}

/* connect_accept() connects to a, accepts on lfd and checks a byte goes
 * through; the two ends are returned. */
static void connect_accept(const struct addr *a, int lfd, int *cfd, int *sfd)
{
    int in_progress = -1;
    char c = 0;

    *cfd = sock_connect(a, &in_progress);
    assert_true(*cfd >= 0);
    assert_true(in_progress == 0 || in_progress == 1);
    assert_true(wait_for(lfd, POLLIN) & POLLIN);
    *sfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(*sfd >= 0);
    assert_true(wait_for(*cfd, POLLOUT) & POLLOUT);
    assert_int_equal(sock_error(*cfd), 0);
    assert_int_equal(write(*cfd, "x", 1), 1);
    assert_true(wait_for(*sfd, POLLIN) & POLLIN);
    assert_int_equal(read(*sfd, &c, 1), 1);
    assert_int_equal(c, 'x');
}

static void test_listen_connect_accept_ipv4(void **state)
{
    struct addr bound;
    char s[ADDR_STRLEN];
    int lfd, cfd, sfd, one = 0, fl;
    socklen_t len = sizeof(one);

    (void)state;
    lfd = listen_any("127.0.0.1:0", 0, &bound);
    assert_int_equal(addr_family(&bound), AF_INET);
    assert_int_not_equal(port_of(&bound), 0);
    addr_format(&bound, s, sizeof(s));
    assert_memory_equal(s, "127.0.0.1:", 10);

    /* The listener is non-blocking and close-on-exec. */
    fl = fcntl(lfd, F_GETFL);
    assert_true(fl & O_NONBLOCK);
    assert_true(fcntl(lfd, F_GETFD) & FD_CLOEXEC);

    connect_accept(&bound, lfd, &cfd, &sfd);
    /* Outgoing TCP connections have Nagle off. */
    assert_int_equal(getsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, &len), 0);
    assert_int_not_equal(one, 0);
    assert_true(fcntl(cfd, F_GETFL) & O_NONBLOCK);
    assert_true(fcntl(cfd, F_GETFD) & FD_CLOEXEC);
    close(cfd);
    close(sfd);
    close(lfd);
}

static void test_listen_ipv6(void **state)
{
    struct addr a, bound;
    char *err = NULL;
    int lfd, cfd, sfd, v6only = 0;
    socklen_t len = sizeof(v6only);

    (void)state;
    parse(&a, "[::1]:0");
    lfd = sock_listen(&a, 16, 0, &err);
    if (lfd < 0) {
        /* No IPv6 loopback in this environment. */
        free(err);
        skip();
    }
    assert_int_equal(sock_local_addr(lfd, &bound), 0);
    assert_int_equal(addr_family(&bound), AF_INET6);
    assert_int_not_equal(port_of(&bound), 0);
    assert_int_equal(getsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &len),
                     0);
    assert_int_equal(v6only, 1);
    connect_accept(&bound, lfd, &cfd, &sfd);
    close(cfd);
    close(sfd);
    close(lfd);
}

static void test_connect_refused(void **state)
{
    struct addr bound;
    int lfd, fd, in_progress = -1;

    (void)state;
    /* A port that was just free: listen, note it, close. */
    lfd = listen_any("127.0.0.1:0", 0, &bound);
    close(lfd);

    errno = 0;
    fd = sock_connect(&bound, &in_progress);
    if (fd < 0) {
        assert_int_equal(errno, ECONNREFUSED);
        return;
    }
    assert_int_equal(in_progress, 1);
    assert_true(wait_for(fd, POLLOUT) != 0);
    assert_int_equal(sock_error(fd), ECONNREFUSED);
    /* SO_ERROR is cleared once read. */
    assert_int_equal(sock_error(fd), 0);
    close(fd);
}

static void test_sock_error_bad_fd(void **state)
{
    (void)state;
    assert_int_equal(sock_error(-1), EBADF);
}

static void test_addr_in_use(void **state)
{
    struct addr bound;
    char s[ADDR_STRLEN], want[ADDR_STRLEN + 64];
    char *err = NULL;
    int lfd, fd;

    (void)state;
    lfd = listen_any("127.0.0.1:0", 0, &bound);
    addr_format(&bound, s, sizeof(s));

    errno = 0;
    fd = sock_listen(&bound, 16, 0, &err);
    assert_int_equal(fd, -1);
    assert_int_equal(errno, EADDRINUSE);
    assert_non_null(err);
    snprintf(want, sizeof(want), "cannot bind %s: %s", s, strerror(EADDRINUSE));
    assert_string_equal(err, want);
    free(err);

    /* SO_REUSEPORT on the second socket does not help when the first did
     * not set it. */
    err = NULL;
    fd = sock_listen(&bound, 16, 1, &err);
    assert_int_equal(fd, -1);
    assert_non_null(err);
    assert_non_null(strstr(err, s));
    free(err);
    close(lfd);
}

static void test_reuseport_shares_port(void **state)
{
    struct addr bound, b2;
    char *err = NULL;
    int lfd, fd, on = 0;
    socklen_t len = sizeof(on);

    (void)state;
    lfd = listen_any("127.0.0.1:0", 1, &bound);
    fd = sock_listen(&bound, 16, 1, &err);
    assert_true(fd >= 0);
    assert_null(err);
    assert_int_equal(sock_local_addr(fd, &b2), 0);
    assert_true(addr_equal(&bound, &b2));
    assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, &len), 0);
    assert_int_not_equal(on, 0);
    close(fd);
    close(lfd);
}

/* A private directory for unix socket files, removed at teardown. */
struct tmpdir {
    char dir[64];
    char path[128];
};

static int unix_setup(void **state)
{
    struct tmpdir *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return -1;
    snprintf(t->dir, sizeof(t->dir), "/tmp/strait-sock-XXXXXX");
    if (mkdtemp(t->dir) == NULL) {
        free(t);
        return -1;
    }
    snprintf(t->path, sizeof(t->path), "%s/s.sock", t->dir);
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

static void unix_addr(struct addr *a, const char *path)
{
    char spec[256];

    snprintf(spec, sizeof(spec), "unix:%s", path);
    parse(a, spec);
}

static void test_unix_listen_connect(void **state)
{
    struct tmpdir *t = *state;
    struct addr a, bound;
    char *err = NULL, s[ADDR_STRLEN], want[256];
    struct stat st;
    int lfd, cfd, sfd;

    unix_addr(&a, t->path);
    lfd = sock_listen(&a, 16, 0, &err);
    assert_true(lfd >= 0);
    assert_null(err);
    assert_int_equal(lstat(t->path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));

    assert_int_equal(sock_local_addr(lfd, &bound), 0);
    assert_int_equal(addr_family(&bound), AF_UNIX);
    addr_format(&bound, s, sizeof(s));
    snprintf(want, sizeof(want), "unix:%s", t->path);
    assert_string_equal(s, want);

    connect_accept(&a, lfd, &cfd, &sfd);
    close(cfd);
    close(sfd);
    close(lfd);
}

static void test_unix_removes_stale_socket(void **state)
{
    struct tmpdir *t = *state;
    struct addr a;
    char *err = NULL;
    struct stat st;
    int stale, lfd, cfd, sfd;

    unix_addr(&a, t->path);
    /* A socket file left by an earlier run: bound, then closed. */
    stale = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(stale >= 0);
    assert_int_equal(bind(stale, (const struct sockaddr *)&a.ss, a.len), 0);
    close(stale);
    assert_int_equal(lstat(t->path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));

    lfd = sock_listen(&a, 16, 0, &err);
    if (lfd < 0)
        fail_msg("stale socket not removed: %s", err ? err : "?");
    assert_null(err);
    connect_accept(&a, lfd, &cfd, &sfd);
    close(cfd);
    close(sfd);
    close(lfd);
}

static void test_unix_keeps_regular_file(void **state)
{
    struct tmpdir *t = *state;
    struct addr a;
    char *err = NULL, want[256];
    struct stat st;
    int fd;

    unix_addr(&a, t->path);
    fd = open(t->path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "data", 4), 4);
    close(fd);

    errno = 0;
    fd = sock_listen(&a, 16, 0, &err);
    assert_int_equal(fd, -1);
    assert_int_equal(errno, EADDRINUSE);
    assert_non_null(err);
    snprintf(want, sizeof(want), "cannot bind unix:%s: %s", t->path,
             strerror(EADDRINUSE));
    assert_string_equal(err, want);
    free(err);
    /* The file is untouched. */
    assert_int_equal(lstat(t->path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_size, 4);
}

static void test_unix_missing_dir(void **state)
{
    struct tmpdir *t = *state;
    struct addr a;
    char *err = NULL, path[160];

    snprintf(path, sizeof(path), "%s/no/such/dir/s.sock", t->dir);
    unix_addr(&a, path);
    assert_int_equal(sock_listen(&a, 16, 0, &err), -1);
    assert_non_null(err);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, strerror(ENOENT)));
    free(err);
}

static void test_local_addr_bad_fd(void **state)
{
    struct addr a;

    (void)state;
    assert_int_equal(sock_local_addr(-1, &a), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listen_connect_accept_ipv4),
        cmocka_unit_test(test_listen_ipv6),
        cmocka_unit_test(test_connect_refused),
        cmocka_unit_test(test_sock_error_bad_fd),
        cmocka_unit_test(test_addr_in_use),
        cmocka_unit_test(test_reuseport_shares_port),
        cmocka_unit_test_setup_teardown(test_unix_listen_connect, unix_setup,
                                        unix_teardown),
        cmocka_unit_test_setup_teardown(test_unix_removes_stale_socket,
                                        unix_setup, unix_teardown),
        cmocka_unit_test_setup_teardown(test_unix_keeps_regular_file,
                                        unix_setup, unix_teardown),
        cmocka_unit_test_setup_teardown(test_unix_missing_dir, unix_setup,
                                        unix_teardown),
        cmocka_unit_test(test_local_addr_bad_fd),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
