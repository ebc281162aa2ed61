/*
 * Unit tests for src/core/addr.c: parsing of the three address forms, every
 * refusal with its reason, canonical formatting and equality.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <sys/un.h>

#include <cmocka.h>

#include "core/addr.h"

/* parse_ok() parses the NUL-terminated s and fails the test on error. */
static void parse_ok(struct addr *a, const char *s, int allow_port0)
{
    const char *why = NULL;
    int rc = addr_parse(a, s, strlen(s), allow_port0, &why);

    if (rc != 0)
        fail_msg("addr_parse(\"%s\") failed: %s", s, why ? why : "(null)");
}

/* parse_err() expects s (n bytes) to be refused with exactly reason. */
static void parse_err_n(const char *s, size_t n, const char *reason)
{
    struct addr a;
    const char *why = NULL;

    assert_int_equal(addr_parse(&a, s, n, 0, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
}

static void parse_err(const char *s, const char *reason)
{
    parse_err_n(s, strlen(s), reason);
}

static void test_ipv4(void **state)
{
    struct addr a;
    const struct sockaddr_in *in4 = (const struct sockaddr_in *)&a.ss;

    (void)state;
    parse_ok(&a, "127.0.0.1:8080", 0);
    assert_int_equal(addr_family(&a), AF_INET);
    assert_int_equal(a.len, sizeof(struct sockaddr_in));
    assert_int_equal(ntohs(in4->sin_port), 8080);
    assert_int_equal(ntohl(in4->sin_addr.s_addr), 0x7f000001);

    parse_ok(&a, "0.0.0.0:1", 0);
    assert_int_equal(ntohs(in4->sin_port), 1);
    assert_int_equal(in4->sin_addr.s_addr, htonl(INADDR_ANY));

    parse_ok(&a, "255.255.255.255:65535", 0);
    assert_int_equal(ntohs(in4->sin_port), 65535);
}

static void test_ipv6(void **state)
{
    struct addr a;
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&a.ss;
    struct in6_addr want;

    (void)state;
    parse_ok(&a, "[::1]:443", 0);
    assert_int_equal(addr_family(&a), AF_INET6);
    assert_int_equal(a.len, sizeof(struct sockaddr_in6));
    assert_int_equal(ntohs(in6->sin6_port), 443);
    assert_memory_equal(&in6->sin6_addr, &in6addr_loopback, sizeof(want));

    parse_ok(&a, "[2001:db8::1:2]:80", 0);
    assert_int_equal(inet_pton(AF_INET6, "2001:db8::1:2", &want), 1);
    assert_memory_equal(&in6->sin6_addr, &want, sizeof(want));
    assert_int_equal(ntohs(in6->sin6_port), 80);

    /* An IPv4-mapped address is still an IPv6 address. */
    parse_ok(&a, "[::ffff:10.0.0.1]:9", 0);
    assert_int_equal(addr_family(&a), AF_INET6);
}

static void test_unix(void **state)
{
    struct addr a;
    const struct sockaddr_un *un = (const struct sockaddr_un *)&a.ss;
    char path[sizeof(un->sun_path) + 8];

    (void)state;
    parse_ok(&a, "unix:/run/strait.sock", 0);
    assert_int_equal(addr_family(&a), AF_UNIX);
    assert_string_equal(un->sun_path, "/run/strait.sock");
    /* The length covers the path and its NUL, as bind(2) expects. */
    assert_int_equal(a.len, offsetof(struct sockaddr_un, sun_path) +
                                strlen("/run/strait.sock") + 1);

    /* The longest path that fits: sun_path minus its NUL. */
    memcpy(path, "unix:/", 6);
    memset(path + 6, 'p', sizeof(un->sun_path) - 2);
    path[6 + sizeof(un->sun_path) - 2] = '\0';
    parse_ok(&a, path, 0);
    assert_int_equal(strlen(un->sun_path), sizeof(un->sun_path) - 1);
}

static void test_port_zero(void **state)
{
    struct addr a;
    const char *why = NULL;

    (void)state;
    parse_err("127.0.0.1:0", "port out of range 1-65535");
    parse_err("[::1]:0", "port out of range 1-65535");
    assert_int_equal(addr_parse(&a, "127.0.0.1:0", 11, 1, &why), 0);
    assert_int_equal(ntohs(((struct sockaddr_in *)&a.ss)->sin_port), 0);
    assert_int_equal(addr_parse(&a, "[::1]:0", 7, 1, &why), 0);
    assert_int_equal(ntohs(((struct sockaddr_in6 *)&a.ss)->sin6_port), 0);
}

static void test_port_errors(void **state)
{
    (void)state;
    parse_err("127.0.0.1", "expected HOST:PORT, [IPV6]:PORT or unix:/PATH");
    parse_err("127.0.0.1:", "missing or bad port");
    parse_err("127.0.0.1:65536", "port out of range 1-65535");
    parse_err("127.0.0.1:99999", "port out of range 1-65535");
    parse_err("127.0.0.1:100000", "missing or bad port");
    parse_err("127.0.0.1:http", "port is not a number");
    parse_err("127.0.0.1:80a", "port is not a number");
    parse_err("127.0.0.1:-1", "port is not a number");
    parse_err("127.0.0.1:+80", "port is not a number");
    parse_err("127.0.0.1: 80", "port is not a number");
    parse_err("[::1]:", "missing or bad port");
    parse_err("[::1]:65536", "port out of range 1-65535");
    parse_err("[::1]:x", "port is not a number");
}

static void test_ipv6_errors(void **state)
{
    (void)state;
    parse_err("::1:80", "IPv6 addresses need brackets: [IPV6]:PORT");
    parse_err("2001:db8::1:80", "IPv6 addresses need brackets: [IPV6]:PORT");
    parse_err("[::1]", "missing port after ']' (expected [IPV6]:PORT)");
    parse_err("[::1]80", "missing port after ']' (expected [IPV6]:PORT)");
    parse_err("[::1:80", "missing ']' after IPv6 address");
    parse_err("[]:80", "bad IPv6 address");
    parse_err("[zz::1]:80", "bad IPv6 address");
    parse_err("[1.2.3.4]:80", "bad IPv6 address");
    parse_err("[::1::2]:80", "bad IPv6 address");
    /* Longer than any IPv6 text form: refused before inet_pton. */
    parse_err("[0000:0000:0000:0000:0000:0000:0000:0000:0000:0000:0000]:80",
              "bad IPv6 address");
}

static void test_ipv4_errors(void **state)
{
    (void)state;
    parse_err(":80", "missing or bad IPv4 address");
    parse_err("256.1.1.1:80",
              "bad IPv4 address (host names are not resolved here)");
    parse_err("1.2.3:80",
              "bad IPv4 address (host names are not resolved here)");
    parse_err("1.2.3.4.5:80",
              "bad IPv4 address (host names are not resolved here)");
    parse_err(" 1.2.3.4:80",
              "bad IPv4 address (host names are not resolved here)");
    parse_err("", "expected HOST:PORT, [IPV6]:PORT or unix:/PATH");
}

static void test_host_names_refused(void **state)
{
    (void)state;
    parse_err("localhost:80",
              "bad IPv4 address (host names are not resolved here)");
    parse_err("example.com:443",
              "bad IPv4 address (host names are not resolved here)");
    parse_err("[localhost]:80", "bad IPv6 address");
}

static void test_unix_errors(void **state)
{
    char path[200];
    size_t sun_len = sizeof(((struct sockaddr_un *)0)->sun_path);

    (void)state;
    parse_err("unix:", "unix socket path must be absolute (unix:/path)");
    parse_err("unix:run/s.sock",
              "unix socket path must be absolute (unix:/path)");
    parse_err("unix:./s.sock",
              "unix socket path must be absolute (unix:/path)");

    /* sun_path bytes of path leave no room for the NUL. */
    memcpy(path, "unix:/", 6);
    memset(path + 6, 'p', sun_len - 1);
    path[6 + sun_len - 1] = '\0';
    assert_int_equal(strlen(path) - 5, sun_len);
    parse_err(path, "unix socket path too long");
}

static void test_embedded_nul(void **state)
{
    (void)state;
    parse_err_n("127.0.0.1:80\0", 13, "address contains a NUL byte");
    parse_err_n("127.0.0.1\0:80", 13, "address contains a NUL byte");
    parse_err_n("unix:/tmp/a\0b", 13, "address contains a NUL byte");
    parse_err_n("[::1]:8\0", 8, "address contains a NUL byte");
}

/* The input is a (ptr, len) slice: bytes past len are never read. */
static void test_slice_length(void **state)
{
    struct addr a, b;
    const char *why = NULL;

    (void)state;
    assert_int_equal(addr_parse(&a, "127.0.0.1:80xyz", 12, 0, &why), 0);
    parse_ok(&b, "127.0.0.1:80", 0);
    assert_true(addr_equal(&a, &b));

    assert_int_equal(addr_parse(&a, "unix:/tmp/s.sockXX", 16, 0, &why), 0);
    assert_string_equal(((struct sockaddr_un *)&a.ss)->sun_path, "/tmp/s.sock");

    assert_int_equal(addr_parse(&a, "[::1]:443]", 9, 0, &why), 0);
    assert_int_equal(ntohs(((struct sockaddr_in6 *)&a.ss)->sin6_port), 443);
}

static void round_trip(const char *in, const char *want)
{
    struct addr a, b;
    char out[ADDR_STRLEN];
    const char *p;

    parse_ok(&a, in, 1);
    p = addr_format(&a, out, sizeof(out));
    assert_ptr_equal(p, out);
    assert_string_equal(out, want);
    /* The canonical form parses back to the same address. */
    parse_ok(&b, out, 1);
    assert_true(addr_equal(&a, &b));
}

static void test_format_round_trip(void **state)
{
    (void)state;
    round_trip("127.0.0.1:8080", "127.0.0.1:8080");
    round_trip("0.0.0.0:0", "0.0.0.0:0");
    round_trip("10.1.2.3:65535", "10.1.2.3:65535");
    round_trip("[::1]:443", "[::1]:443");
    round_trip("[::]:80", "[::]:80");
    round_trip("[2001:DB8:0:0:0:0:0:1]:80", "[2001:db8::1]:80");
    round_trip("[::ffff:10.0.0.1]:9", "[::ffff:10.0.0.1]:9");
    round_trip("127.0.0.1:00080", "127.0.0.1:80");
    round_trip("unix:/run/strait.sock", "unix:/run/strait.sock");
    round_trip("unix:/", "unix:/");
}

static void test_format_long_unix(void **state)
{
    struct addr a;
    char in[200], out[ADDR_STRLEN];
    size_t sun_len = sizeof(((struct sockaddr_un *)0)->sun_path);

    (void)state;
    memcpy(in, "unix:/", 6);
    memset(in + 6, 'q', sun_len - 2);
    in[6 + sun_len - 2] = '\0';
    parse_ok(&a, in, 0);
    addr_format(&a, out, sizeof(out));
    assert_string_equal(out, in);
}

static void test_format_sa(void **state)
{
    struct sockaddr_in in4;
    struct sockaddr_storage ss;
    char out[ADDR_STRLEN];

    (void)state;
    memset(&in4, 0, sizeof(in4));
    in4.sin_family = AF_INET;
    in4.sin_port = htons(1234);
    in4.sin_addr.s_addr = htonl(0x0a000001);
    addr_format_sa((struct sockaddr *)&in4, sizeof(in4), out, sizeof(out));
    assert_string_equal(out, "10.0.0.1:1234");

    memset(&ss, 0, sizeof(ss));
    ss.ss_family = AF_PACKET;
    addr_format_sa((struct sockaddr *)&ss, sizeof(ss), out, sizeof(out));
    assert_string_equal(out, "unknown");

    /* A short output buffer truncates, NUL-terminated. */
    addr_format_sa((struct sockaddr *)&in4, sizeof(in4), out, 6);
    assert_string_equal(out, "10.0.");
}

static void test_same_host(void **state)
{
    struct addr a, b;

    (void)state;
    parse_ok(&a, "127.0.0.1:80", 0);
    parse_ok(&b, "127.0.0.1:5555", 0);
    assert_true(addr_same_host(&a, &b));
    parse_ok(&b, "127.0.0.2:80", 0);
    assert_false(addr_same_host(&a, &b));
    parse_ok(&b, "[::ffff:127.0.0.1]:80", 0);
    assert_false(addr_same_host(&a, &b));
    parse_ok(&a, "[::1]:80", 0);
    parse_ok(&b, "[0:0::1]:9", 0);
    assert_true(addr_same_host(&a, &b));
    parse_ok(&b, "[::2]:80", 0);
    assert_false(addr_same_host(&a, &b));
}

static void test_equal(void **state)
{
    struct addr a, b;

    (void)state;
    parse_ok(&a, "127.0.0.1:80", 0);
    parse_ok(&b, "127.0.0.1:80", 0);
    assert_true(addr_equal(&a, &b));
    parse_ok(&b, "127.0.0.1:81", 0);
    assert_false(addr_equal(&a, &b));
    parse_ok(&b, "127.0.0.2:80", 0);
    assert_false(addr_equal(&a, &b));
    parse_ok(&b, "[::ffff:127.0.0.1]:80", 0);
    assert_false(addr_equal(&a, &b));

    parse_ok(&a, "[::1]:80", 0);
    parse_ok(&b, "[0:0::1]:80", 0);
    assert_true(addr_equal(&a, &b));

    parse_ok(&a, "unix:/tmp/a", 0);
    parse_ok(&b, "unix:/tmp/a", 0);
    assert_true(addr_equal(&a, &b));
    parse_ok(&b, "unix:/tmp/ab", 0);
    assert_false(addr_equal(&a, &b));
    assert_false(addr_equal(&b, &a));
    parse_ok(&b, "unix:/tmp/b", 0);
    assert_false(addr_equal(&a, &b));
}

/* A failed parse leaves a zeroed address (len 0), which callers use to mean
 * "not set". */
static void test_failed_parse_zeroes(void **state)
{
    struct addr a;
    const char *why = NULL;

    (void)state;
    parse_ok(&a, "127.0.0.1:80", 0);
    assert_int_equal(addr_parse(&a, "127.0.0.1:0", 11, 0, &why), -1);
    assert_int_equal(a.len, 0);
}

static void test_cidr_parse(void **state)
{
    uint8_t b[16];
    unsigned pl;
    int fam;
    const char *why = NULL;
    static const uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, 0x80};

    (void)state;
    assert_int_equal(addr_cidr_parse("10.1.2.3", &fam, b, &pl, &why), 0);
    assert_int_equal(fam, AF_INET);
    assert_int_equal(pl, 32);
    assert_memory_equal(b, "\x0a\x01\x02\x03", 4);
    /* Bits past the prefix are cleared. */
    assert_int_equal(addr_cidr_parse("192.168.7.200/25", &fam, b, &pl, &why),
                     0);
    assert_int_equal(pl, 25);
    assert_memory_equal(b, "\xc0\xa8\x07\x80", 4);
    assert_int_equal(addr_cidr_parse("2001:db8:80ff::1/33", &fam, b, &pl, &why),
                     0);
    assert_int_equal(fam, AF_INET6);
    assert_int_equal(pl, 33);
    assert_memory_equal(b, v6, 16);
    assert_int_equal(addr_cidr_parse("0.0.0.0/0", &fam, b, &pl, &why), 0);
    assert_int_equal(pl, 0);
    /* Refused, with a reason. */
    static const char *const bad[] = {
        "",
        "/8",
        "10.0.0.0/",
        "10.0.0.0/33",
        "::/129",
        "10.0.0.0/8x",
        "10.0.0/8",
        "example.com",
        "10.0.0.0/-1",
        "10.0.0.0/99999999999",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why = NULL;
        assert_int_equal(addr_cidr_parse(bad[i], &fam, b, &pl, &why), -1);
        assert_non_null(why);
    }
}

/* Address literals, with and without IPv6 brackets; names are not. */
static void test_literal(void **state)
{
    struct addr a;
    char out[ADDR_STRLEN];

    (void)state;
    assert_int_equal(addr_literal(&a, "127.0.0.9", 2379), 0);
    assert_string_equal(addr_format(&a, out, sizeof(out)), "127.0.0.9:2379");
    assert_int_equal(addr_literal(&a, "::1", 80), 0);
    assert_string_equal(addr_format(&a, out, sizeof(out)), "[::1]:80");
    assert_int_equal(addr_literal(&a, "[fe80::2]", 443), 0);
    assert_string_equal(addr_format(&a, out, sizeof(out)), "[fe80::2]:443");
    assert_int_equal(addr_literal(&a, "etcd.example", 2379), -1);
    assert_int_equal(addr_literal(&a, "127.0.0.1.example", 2379), -1);
    assert_int_equal(addr_literal(&a, "[127.0.0.1]", 1), -1);
    assert_int_equal(addr_literal(&a, "", 1), -1);
    assert_int_equal(addr_literal(&a, "[]", 1), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipv4),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_unix),
        cmocka_unit_test(test_port_zero),
        cmocka_unit_test(test_port_errors),
        cmocka_unit_test(test_ipv6_errors),
        cmocka_unit_test(test_ipv4_errors),
        cmocka_unit_test(test_host_names_refused),
        cmocka_unit_test(test_unix_errors),
        cmocka_unit_test(test_embedded_nul),
        cmocka_unit_test(test_slice_length),
        cmocka_unit_test(test_format_round_trip),
        cmocka_unit_test(test_format_long_unix),
        cmocka_unit_test(test_format_sa),
        cmocka_unit_test(test_equal),
        cmocka_unit_test(test_same_host),
        cmocka_unit_test(test_failed_parse_zeroes),
        cmocka_unit_test(test_cidr_parse),
        cmocka_unit_test(test_literal),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
