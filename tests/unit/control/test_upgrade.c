/*
 * Unit tests for src/control/upgrade.c: the socket batch codec, and the
 * new process's side of the exchange against a scripted old process on a
 * socket pair (every message is queued before the call, which reads them
 * in order and answers on the other end).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/upgrade.h"
#include "core/addr.h"
#include "net/sock_pool.h"

static void parse(struct addr *a, const char *s)
{
    const char *why = NULL;

    if (addr_parse(a, s, strlen(s), 1, &why) < 0)
        fail_msg("addr_parse(%s): %s", s, why);
}

static void test_codec_round_trip(void **state)
{
    struct upgrade_rec in[3], out[3];
    uint8_t m[UPGRADE_MSG_MAX];
    const char *why = NULL;
    size_t n, k;

    (void)state;
    memset(in, 0, sizeof(in));
    parse(&in[0].addr, "127.0.0.1:8080");
    in[0].kind = SOCK_POOL_LISTENER;
    in[0].index = 7;
    parse(&in[1].addr, "[::1]:15000");
    in[1].kind = SOCK_POOL_ADMIN;
    parse(&in[2].addr, "unix:/run/strait/x.sock");
    in[2].kind = SOCK_POOL_LISTENER;
    n = upgrade_encode_fds(in, 3, m, sizeof(m));
    assert_true(n > 3);
    assert_int_equal(upgrade_parse_fds(m, n, out, 3, &k, &why), 0);
    assert_int_equal(k, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(out[i].kind, in[i].kind);
        assert_int_equal(out[i].index, in[i].index);
        assert_true(addr_equal(&out[i].addr, &in[i].addr));
    }
    /* Every shorter message is refused with a reason. */
    for (size_t cut = 0; cut < n; cut++) {
        why = NULL;
        assert_int_equal(upgrade_parse_fds(m, cut, out, 3, &k, &why), -1);
        assert_non_null(why);
    }
    /* More records than the caller has room for. */
    assert_int_equal(upgrade_parse_fds(m, n, out, 2, &k, &why), -1);
    /* A kind strait does not know. */
    m[3] = SOCK_POOL_NKINDS;
    assert_int_equal(upgrade_parse_fds(m, n, out, 3, &k, &why), -1);
    /* A batch is 1 to UPGRADE_BATCH_MAX sockets. */
    assert_int_equal(upgrade_encode_fds(in, 0, m, sizeof(m)), 0);
}

static void test_batch_limit(void **state)
{
    static struct upgrade_rec in[UPGRADE_BATCH_MAX + 1];
    static struct upgrade_rec out[UPGRADE_BATCH_MAX + 1];
    uint8_t m[UPGRADE_MSG_MAX + 200];
    const char *why = NULL;
    size_t n, k;

    (void)state;
    for (int i = 0; i <= UPGRADE_BATCH_MAX; i++) {
        parse(&in[i].addr, "[2001:db8::1]:443");
        in[i].index = i;
    }
    n = upgrade_encode_fds(in, UPGRADE_BATCH_MAX, m, sizeof(m));
    assert_true(n > 0 && n <= UPGRADE_MSG_MAX);
    assert_int_equal(
        upgrade_parse_fds(m, n, out, UPGRADE_BATCH_MAX + 1, &k, &why), 0);
    assert_int_equal(k, UPGRADE_BATCH_MAX);
    /* One over the batch limit is not encoded. */
    assert_int_equal(
        upgrade_encode_fds(in, UPGRADE_BATCH_MAX + 1, m, sizeof(m)), 0);
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void send_hello(int fd, int workers, int nfds)
{
    uint8_t h[14];

    h[0] = 'H';
    h[1] = UPGRADE_VERSION;
    put32(h + 2, 4242);
    put32(h + 6, (uint32_t)workers);
    put32(h + 10, (uint32_t)nfds);
    assert_int_equal(send(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
}

/* A batch of the descriptors fds under recs. */
static void send_batch(int fd, const struct upgrade_rec *recs, const int *fds,
                       size_t n)
{
    uint8_t m[UPGRADE_MSG_MAX];
    union {
        char buf[CMSG_SPACE(8 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    size_t len = upgrade_encode_fds(recs, n, m, sizeof(m));
    struct iovec iov = {m, len};
    struct msghdr h;
    struct cmsghdr *c;

    memset(&h, 0, sizeof(h));
    memset(&ctl, 0, sizeof(ctl));
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = ctl.buf;
    h.msg_controllen = CMSG_SPACE(n * sizeof(int));
    c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    assert_int_equal(sendmsg(fd, &h, 0), (ssize_t)len);
}

static void test_child_receives_in_batches(void **state)
{
    struct upgrade_rec recs[3];
    struct sock_pool pool;
    int sv[2], fds[3];
    uint8_t m[64];
    char *err = NULL;
    pid_t parent = 0;

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    memset(recs, 0, sizeof(recs));
    for (int i = 0; i < 3; i++) {
        parse(&recs[i].addr, "127.0.0.1:9000");
        recs[i].index = i;
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    }
    send_hello(sv[0], 2, 3);
    send_batch(sv[0], recs, fds, 2);
    send_batch(sv[0], recs + 2, fds + 2, 1);
    assert_int_equal(send(sv[0], "E", 1, 0), 1);
    sock_pool_init(&pool);
    assert_int_equal(
        upgrade_child_receive(sv[1], 2, 1000, &pool, &parent, &err), 0);
    assert_null(err);
    assert_int_equal(parent, 4242);
    assert_int_equal(pool.n, 3);
    /* The answers: go, then one acknowledgement per batch. */
    assert_int_equal(recv(sv[0], m, sizeof(m), MSG_DONTWAIT), 1);
    assert_int_equal(m[0], 'G');
    assert_int_equal(recv(sv[0], m, sizeof(m), MSG_DONTWAIT), 3);
    assert_int_equal(m[0], 'A');
    assert_int_equal(m[2], 2);
    assert_int_equal(recv(sv[0], m, sizeof(m), MSG_DONTWAIT), 3);
    assert_int_equal(m[2], 1);
    /* Ready, then the old process's confirmation. */
    assert_int_equal(upgrade_child_ready(sv[1]), 0);
    assert_int_equal(recv(sv[0], m, sizeof(m), MSG_DONTWAIT), 5);
    assert_int_equal(m[0], 'R');
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    assert_int_equal(upgrade_child_done(sv[1]), 0);
    assert_int_equal(send(sv[0], "K", 1, 0), 1);
    assert_int_equal(upgrade_child_done(sv[1]), 1);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    sock_pool_dispose(&pool);
    close(sv[0]);
    close(sv[1]);
}

/* A worker count that differs is refused before any socket moves. */
static void test_child_refuses_other_worker_count(void **state)
{
    struct sock_pool pool;
    int sv[2];
    uint8_t m[64];
    char *err = NULL;
    pid_t parent = 0;

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    send_hello(sv[0], 4, 8);
    sock_pool_init(&pool);
    assert_int_equal(
        upgrade_child_receive(sv[1], 2, 1000, &pool, &parent, &err), -1);
    assert_non_null(err);
    assert_non_null(strstr(err, "workers: the running strait has 4, this "
                                "configuration 2"));
    assert_int_equal(recv(sv[0], m, sizeof(m), MSG_DONTWAIT), -1);
    upgrade_child_fail(sv[1], err);
    assert_true(recv(sv[0], m, sizeof(m), MSG_DONTWAIT) > 1);
    assert_int_equal(m[0], 'X');
    free(err);
    sock_pool_dispose(&pool);
    close(sv[0]);
    close(sv[1]);
}

/* A batch whose descriptor count is not what its records say. */
static void test_child_refuses_bad_batch(void **state)
{
    struct upgrade_rec recs[2];
    struct sock_pool pool;
    int sv[2], fds[1];
    char *err = NULL;
    pid_t parent = 0;

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    memset(recs, 0, sizeof(recs));
    parse(&recs[0].addr, "127.0.0.1:9000");
    parse(&recs[1].addr, "127.0.0.1:9001");
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    send_hello(sv[0], 1, 2);
    {
        /* Two records, one descriptor. */
        uint8_t m[UPGRADE_MSG_MAX];
        size_t len = upgrade_encode_fds(recs, 2, m, sizeof(m));
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {m, len};
        struct msghdr h;
        struct cmsghdr *c;
        memset(&h, 0, sizeof(h));
        memset(&ctl, 0, sizeof(ctl));
        h.msg_iov = &iov;
        h.msg_iovlen = 1;
        h.msg_control = ctl.buf;
        h.msg_controllen = sizeof(ctl.buf);
        c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), fds, sizeof(int));
        assert_int_equal(sendmsg(sv[0], &h, 0), (ssize_t)len);
    }
    sock_pool_init(&pool);
    assert_int_equal(
        upgrade_child_receive(sv[1], 1, 1000, &pool, &parent, &err), -1);
    assert_non_null(strstr(err, "bad socket batch"));
    assert_int_equal(pool.n, 0);
    free(err);
    close(fds[0]);
    sock_pool_dispose(&pool);
    close(sv[0]);
    close(sv[1]);
}

/* The old process says nothing: the wait ends at the timeout. */
static void test_child_times_out(void **state)
{
    struct sock_pool pool;
    int sv[2];
    char *err = NULL;
    pid_t parent = 0;

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    sock_pool_init(&pool);
    assert_int_equal(upgrade_child_receive(sv[1], 1, 100, &pool, &parent, &err),
                     -1);
    assert_non_null(strstr(err, "did not answer in time"));
    free(err);
    sock_pool_dispose(&pool);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_batch_limit),
        cmocka_unit_test(test_child_receives_in_batches),
        cmocka_unit_test(test_child_refuses_other_worker_count),
        cmocka_unit_test(test_child_refuses_bad_batch),
        cmocka_unit_test(test_child_times_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
