/*
 * Unit tests for src/net/sock_pool.c: a handed-over socket is adopted by
 * (kind, address, index) with its accept queue intact, a missing one is
 * bound afresh, and what nobody took is closed.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/addr.h"
#include "net/sock.h"
#include "net/sock_pool.h"

static void parse(struct addr *a, const char *s)
{
    const char *why = NULL;

    if (addr_parse(a, s, strlen(s), 1, &why) < 0)
        fail_msg("addr_parse(%s): %s", s, why);
}

/* A listening socket on an ephemeral loopback port, and that address. */
static int listen_any(struct addr *bound)
{
    struct addr a;
    char *err = NULL;
    int fd;

    parse(&a, "127.0.0.1:0");
    fd = sock_listen(&a, 16, 1, &err);
    assert_true(fd >= 0);
    assert_int_equal(sock_local_addr(fd, bound), 0);
    return fd;
}

static int is_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

static void test_take_by_kind_address_and_index(void **state)
{
    struct sock_pool p;
    struct addr a, b;
    int fd0, fd1, other;

    (void)state;
    sock_pool_init(&p);
    fd0 = listen_any(&a);
    fd1 = dup(fd0);
    other = listen_any(&b);
    assert_int_equal(sock_pool_add(&p, SOCK_POOL_LISTENER, &a, 0, fd0), 0);
    assert_int_equal(sock_pool_add(&p, SOCK_POOL_LISTENER, &a, 1, fd1), 0);
    assert_int_equal(sock_pool_add(&p, SOCK_POOL_ADMIN, &b, 0, other), 0);
    /* The same name twice is refused, and the descriptor closed. */
    {
        int d = dup(fd0);
        assert_int_equal(sock_pool_add(&p, SOCK_POOL_LISTENER, &a, 1, d), -1);
        assert_false(is_open(d));
    }
    assert_true(sock_pool_has(&p, SOCK_POOL_LISTENER, &a, 1));
    assert_int_equal(sock_pool_take(&p, SOCK_POOL_ADMIN, &a, 0), -1);
    assert_int_equal(sock_pool_take(&p, SOCK_POOL_LISTENER, &b, 0), -1);
    assert_int_equal(sock_pool_take(&p, SOCK_POOL_LISTENER, &a, 2), -1);
    assert_int_equal(sock_pool_take(&p, SOCK_POOL_LISTENER, &a, 1), fd1);
    assert_int_equal(sock_pool_take(&p, SOCK_POOL_LISTENER, &a, 1), -1);
    assert_false(sock_pool_has(&p, SOCK_POOL_LISTENER, &a, 1));
    assert_int_equal(sock_pool_take(NULL, SOCK_POOL_LISTENER, &a, 0), -1);
    close(fd1);
    /* Untaken: closed by close_rest. */
    assert_int_equal(sock_pool_close_rest(&p), 2);
    assert_false(is_open(fd0));
    assert_false(is_open(other));
    sock_pool_dispose(&p);
}

/* An adopted socket is the same socket: a connection queued before the
 * hand-over is accepted from the adopted descriptor. */
static void test_listen_adopts_with_queue(void **state)
{
    struct sock_pool p;
    struct addr a;
    char *err = NULL;
    int lfd, c, got, s;
    struct pollfd pfd;

    (void)state;
    sock_pool_init(&p);
    lfd = listen_any(&a);
    c = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(c, (struct sockaddr *)&a.ss, a.len), 0);
    assert_int_equal(sock_pool_add(&p, SOCK_POOL_LISTENER, &a, 0, dup(lfd)), 0);
    close(lfd); /* the old process goes: the socket stays */
    got = sock_pool_listen(&p, SOCK_POOL_LISTENER, &a, 0, 32, 1, &err);
    assert_true(got >= 0);
    assert_int_equal(p.taken, 1);
    pfd.fd = got;
    pfd.events = POLLIN;
    assert_int_equal(poll(&pfd, 1, 5000), 1);
    s = accept(got, NULL, NULL);
    assert_true(s >= 0);
    close(s);
    close(c);
    /* Not in the pool: bound afresh (here: in use, so an error). */
    assert_int_equal(sock_pool_listen(&p, SOCK_POOL_ADMIN, &a, 0, 32, 0, &err),
                     -1);
    assert_non_null(err);
    free(err);
    close(got);
    sock_pool_dispose(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take_by_kind_address_and_index),
        cmocka_unit_test(test_listen_adopts_with_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
