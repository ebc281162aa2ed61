#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "control/notify.h"

/* A datagram socket bound where the service manager's would be. */
static int bind_at(const char *name, int abstract)
{
    struct sockaddr_un a;
    socklen_t len;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    if (abstract) {
        memcpy(a.sun_path + 1, name, strlen(name));
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                          strlen(name));
    } else {
        memcpy(a.sun_path, name, strlen(name));
        len = (socklen_t)sizeof(a);
    }
    assert_int_equal(bind(fd, (struct sockaddr *)&a, len), 0);
    return fd;
}

static void expect_datagram(int fd, const char *want)
{
    char got[2048];
    ssize_t r = recv(fd, got, sizeof(got) - 1, MSG_DONTWAIT);

    assert_true(r >= 0);
    got[r] = '\0';
    assert_string_equal(got, want);
}

static void test_path_socket_gets_one_datagram(void **state)
{
    char dir[] = "/tmp/notify.XXXXXX";
    char path[64];
    struct notify n;
    const char *why = NULL;
    int fd;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/notify", dir);
    fd = bind_at(path, 0);
    assert_int_equal(notify_init(&n, path, &why), 1);
    assert_true(notify_enabled(&n));
    assert_int_equal(notify_send(&n, "READY=1\nSTATUS=serving"), 0);
    expect_datagram(fd, "READY=1\nSTATUS=serving");
    notify_dispose(&n);
    close(fd);
    unlink(path);
    rmdir(dir);
}

static void test_abstract_name_starts_with_at(void **state)
{
    char name[64];
    struct notify n;
    const char *why = NULL;
    int fd;

    (void)state;
    snprintf(name, sizeof(name), "strait-notify-test-%d", (int)getpid());
    fd = bind_at(name, 1);
    {
        char at[80];
        snprintf(at, sizeof(at), "@%s", name);
        assert_int_equal(notify_init(&n, at, &why), 1);
    }
    assert_int_equal(
        notify_sendf(&n, "RELOADING=1\nMONOTONIC_USEC=%llu", 12345ULL), 0);
    expect_datagram(fd, "RELOADING=1\nMONOTONIC_USEC=12345");
    notify_dispose(&n);
    close(fd);
}

static void test_unset_socket_disables_sends(void **state)
{
    struct notify n;
    const char *why = NULL;

    (void)state;
    assert_int_equal(notify_init(&n, NULL, &why), 0);
    assert_false(notify_enabled(&n));
    assert_int_equal(notify_send(&n, "READY=1"), 0);
    notify_dispose(&n);
    assert_int_equal(notify_init(&n, "", &why), 0);
    notify_dispose(&n);
}

static void test_bad_names_are_refused(void **state)
{
    struct notify n;
    const char *why = NULL;
    char longname[200];

    (void)state;
    assert_int_equal(notify_init(&n, "vsock:2:1234", &why), -1);
    assert_non_null(why);
    assert_false(notify_enabled(&n));
    assert_int_equal(notify_init(&n, "relative/path", &why), -1);
    assert_int_equal(notify_init(&n, "@", &why), -1);
    memset(longname, 'a', sizeof(longname) - 1);
    longname[0] = '/';
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(notify_init(&n, longname, &why), -1);
}

static void test_long_status_is_cut_not_overrun(void **state)
{
    char name[64], at[80], big[3000];
    struct notify n;
    const char *why = NULL;
    char got[4096];
    ssize_t r;
    int fd;

    (void)state;
    snprintf(name, sizeof(name), "strait-notify-long-%d", (int)getpid());
    snprintf(at, sizeof(at), "@%s", name);
    fd = bind_at(name, 1);
    assert_int_equal(notify_init(&n, at, &why), 1);
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(notify_sendf(&n, "STATUS=%s", big), 0);
    r = recv(fd, got, sizeof(got), MSG_DONTWAIT);
    assert_int_equal(r, 1023);
    assert_memory_equal(got, "STATUS=xxx", 10);
    notify_dispose(&n);
    close(fd);
}

static void test_watchdog_usec_only_for_this_pid(void **state)
{
    (void)state;
    assert_int_equal(notify_watchdog_usec("30000000", NULL, 42), 30000000);
    assert_int_equal(notify_watchdog_usec("30000000", "42", 42), 30000000);
    assert_int_equal(notify_watchdog_usec("30000000", "43", 42), 0);
    assert_int_equal(notify_watchdog_usec(NULL, NULL, 42), 0);
    assert_int_equal(notify_watchdog_usec("0", NULL, 42), 0);
    assert_int_equal(notify_watchdog_usec("30s", NULL, 42), 0);
    assert_int_equal(notify_watchdog_usec("-5", NULL, 42), 0);
}

static void test_monotonic_usec_moves_forward(void **state)
{
    uint64_t a = notify_monotonic_usec(), b;

    (void)state;
    assert_true(a > 0);
    b = notify_monotonic_usec();
    assert_true(b >= a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_socket_gets_one_datagram),
        cmocka_unit_test(test_abstract_name_starts_with_at),
        cmocka_unit_test(test_unset_socket_disables_sends),
        cmocka_unit_test(test_bad_names_are_refused),
        cmocka_unit_test(test_long_status_is_cut_not_overrun),
        cmocka_unit_test(test_watchdog_usec_only_for_this_pid),
        cmocka_unit_test(test_monotonic_usec_moves_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
