/*
 * Unit tests for src/net/proxy_proto.c: v1 and v2 headers as balancers
 * send them, headers in pieces, malformed ones refused with a reason, the
 * length bounds (v1: 107 bytes; v2: the bound given) at the limit and one
 * byte past it, and pp_read() taking the header and not a byte more.
 */
#include "config.h"

#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "net/proxy_proto.h"

static const uint8_t sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

static int parse(const char *s, size_t max, struct pp_result *r,
                 const char **why)
{
    *why = NULL;
    return pp_parse((const uint8_t *)s, strlen(s), max, r, why);
}

static const char *src_ip(const struct pp_result *r, char *b, size_t n)
{
    if (r->src.ss_family == AF_INET)
        return inet_ntop(AF_INET,
                         &((const struct sockaddr_in *)&r->src)->sin_addr, b,
                         (socklen_t)n);
    return inet_ntop(AF_INET6,
                     &((const struct sockaddr_in6 *)&r->src)->sin6_addr, b,
                     (socklen_t)n);
}

/* A v2 header: PROXY over TCP4 from 192.0.2.1:56324 to 198.51.100.2:443,
 * with tlv extra bytes of TLVs. Returns its length. */
static size_t v2_tcp4(uint8_t *b, const uint8_t *tlv, size_t ntlv)
{
    static const uint8_t addrs[12] = {192, 0, 2,    1,    198,  51,
                                      100, 2, 0xdc, 0x04, 0x01, 0xbb};
    size_t len = sizeof(addrs) + ntlv;

    memcpy(b, sig, 12);
    b[12] = 0x21;
    b[13] = 0x11;
    b[14] = (uint8_t)(len >> 8);
    b[15] = (uint8_t)len;
    memcpy(b + 16, addrs, sizeof(addrs));
    if (ntlv > 0)
        memcpy(b + 28, tlv, ntlv);
    return 16 + len;
}

static void test_v1_tcp4_and_tcp6(void **state)
{
    struct pp_result r;
    const char *why;
    char ip[64];

    (void)state;
    assert_int_equal(
        parse("PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET /", 1024, &r,
              &why),
        1);
    assert_int_equal(r.version, 1);
    assert_int_equal(r.local, 0);
    assert_int_equal(r.len, strlen("PROXY TCP4 192.0.2.1 198.51.100.2 56324 "
                                   "443\r\n"));
    assert_string_equal(src_ip(&r, ip, sizeof(ip)), "192.0.2.1");
    assert_int_equal(ntohs(((struct sockaddr_in *)&r.src)->sin_port), 56324);
    assert_int_equal(ntohs(((struct sockaddr_in *)&r.dst)->sin_port), 443);
    assert_int_equal(
        parse("PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n", 1024, &r, &why),
        1);
    assert_string_equal(src_ip(&r, ip, sizeof(ip)), "2001:db8::1");
    assert_int_equal(r.addrlen, sizeof(struct sockaddr_in6));
    /* UNKNOWN: the connection's own addresses stand. */
    assert_int_equal(parse("PROXY UNKNOWN\r\n", 1024, &r, &why), 1);
    assert_int_equal(r.local, 1);
    assert_int_equal(
        parse("PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", 1024, &r, &why), 1);
    assert_int_equal(r.local, 1);
}

static void test_v1_in_pieces_needs_more(void **state)
{
    const char *h = "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n";
    struct pp_result r;
    const char *why = NULL;

    (void)state;
    for (size_t k = 0; k < strlen(h); k++)
        assert_int_equal(pp_parse((const uint8_t *)h, k, 1024, &r, &why), 0);
    assert_int_equal(pp_parse((const uint8_t *)h, strlen(h), 1024, &r, &why),
                     1);
}

static void test_v1_malformed_is_refused(void **state)
{
    static const char *const bad[] = {
        "GET / HTTP/1.1\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\n",
        "PROXY TCP4  192.0.2.1 198.51.100.2 56324 443\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 56324\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443 9\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 65536 443\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 5x 443\r\n",
        "PROXY TCP4 2001:db8::1 198.51.100.2 1 443\r\n",
        "PROXY TCP6 192.0.2.1 2001:db8::2 1 443\r\n",
        "PROXY UDP4 192.0.2.1 198.51.100.2 1 443\r\n",
        "PROXY TCP4 192.0.2.256 198.51.100.2 1 443\r\n",
        "proxy TCP4 192.0.2.1 198.51.100.2 1 443\r\n",
    };
    struct pp_result r;
    const char *why;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse(bad[i], 1024, &r, &why), -1);
        assert_non_null(why);
    }
}

/* 107 bytes is the longest v1 line; one more is refused. */
static void test_v1_limit_and_one_more(void **state)
{
    char h[PP_V1_MAX + 2];
    struct pp_result r;
    const char *why;

    (void)state;
    /* "PROXY UNKNOWN " padded with 'x' to 105 bytes, then CRLF: 107. */
    memset(h, 'x', sizeof(h));
    memcpy(h, "PROXY UNKNOWN ", 14);
    memcpy(h + PP_V1_MAX - 2, "\r\n", 3);
    assert_int_equal(strlen(h), PP_V1_MAX);
    assert_int_equal(parse(h, 1024, &r, &why), 1);
    assert_int_equal(r.len, PP_V1_MAX);
    memset(h, 'x', sizeof(h));
    memcpy(h, "PROXY UNKNOWN ", 14);
    memcpy(h + PP_V1_MAX - 1, "\r\n", 3);
    assert_int_equal(strlen(h), PP_V1_MAX + 1);
    assert_int_equal(parse(h, 1024, &r, &why), -1);
    assert_string_equal(why, "PROXY v1 header longer than 107 bytes");
}

static void test_v2_tcp4_tcp6_local(void **state)
{
    uint8_t b[256];
    static const uint8_t tlv[] = {0x04, 0x00, 0x03, 'a', 'b', 'c'};
    struct pp_result r;
    const char *why = NULL;
    char ip[64];
    size_t n = v2_tcp4(b, tlv, sizeof(tlv));

    (void)state;
    assert_int_equal(pp_parse(b, n, 1024, &r, &why), 1);
    assert_int_equal(r.version, 2);
    assert_int_equal(r.len, n);
    assert_string_equal(src_ip(&r, ip, sizeof(ip)), "192.0.2.1");
    assert_int_equal(ntohs(((struct sockaddr_in *)&r.src)->sin_port), 56324);
    /* In pieces: need more until the last byte. */
    for (size_t k = 0; k < n; k++)
        assert_int_equal(pp_parse(b, k, 1024, &r, &why), 0);
    /* TCP6 from 2001:db8::1. */
    memcpy(b, sig, 12);
    b[12] = 0x21;
    b[13] = 0x21;
    b[14] = 0;
    b[15] = 36;
    memset(b + 16, 0, 36);
    b[16] = 0x20;
    b[17] = 0x01;
    b[18] = 0x0d;
    b[19] = 0xb8;
    b[31] = 1;
    assert_int_equal(pp_parse(b, 52, 1024, &r, &why), 1);
    assert_string_equal(src_ip(&r, ip, sizeof(ip)), "2001:db8::1");
    /* LOCAL: a health check; addresses ignored. */
    b[12] = 0x20;
    b[13] = 0x00;
    b[15] = 0;
    assert_int_equal(pp_parse(b, 16, 1024, &r, &why), 1);
    assert_int_equal(r.local, 1);
    assert_int_equal(r.len, 16);
}

static void test_v2_malformed_is_refused(void **state)
{
    uint8_t b[256];
    static const uint8_t bad_tlv[] = {0x04, 0x00, 0x09, 'a'};
    struct pp_result r;
    const char *why;
    size_t n;

    (void)state;
    n = v2_tcp4(b, NULL, 0);
    b[12] = 0x11; /* version 1 in a v2 header */
    why = NULL;
    assert_int_equal(pp_parse(b, n, 1024, &r, &why), -1);
    assert_non_null(why);
    n = v2_tcp4(b, NULL, 0);
    b[12] = 0x22; /* command 2 */
    assert_int_equal(pp_parse(b, n, 1024, &r, &why), -1);
    n = v2_tcp4(b, NULL, 0);
    b[13] = 0x41; /* family 4 */
    assert_int_equal(pp_parse(b, n, 1024, &r, &why), -1);
    n = v2_tcp4(b, NULL, 0);
    b[15] = 8; /* shorter than two IPv4 addresses and ports */
    assert_int_equal(pp_parse(b, 24, 1024, &r, &why), -1);
    assert_string_equal(why, "PROXY v2 addresses shorter than their family");
    n = v2_tcp4(b, bad_tlv, sizeof(bad_tlv));
    assert_int_equal(pp_parse(b, n, 1024, &r, &why), -1);
    assert_string_equal(why, "PROXY v2 TLV malformed");
    /* A signature gone wrong in its 12th byte. */
    n = v2_tcp4(b, NULL, 0);
    b[11] = 0;
    assert_int_equal(pp_parse(b, n, 1024, &r, &why), -1);
    assert_string_equal(why, "no PROXY protocol header");
}

/* A v2 header of exactly the bound parses; one byte longer is refused as
 * soon as its length is known (before its bytes are read). */
static void test_v2_limit_and_one_more(void **state)
{
    uint8_t b[300], tlv[300];
    struct pp_result r;
    const char *why = NULL;
    size_t max = 256, n, ntlv = max - 28 - 3;

    (void)state;
    tlv[0] = 0x04; /* PP2_TYPE_NOOP padding */
    tlv[1] = (uint8_t)((ntlv - 3) >> 8);
    tlv[2] = (uint8_t)(ntlv - 3);
    memset(tlv + 3, 0, ntlv - 3);
    n = v2_tcp4(b, tlv, ntlv - 3 + 3);
    assert_int_equal(n, max - 3);
    /* Pad to exactly max with a second, empty TLV. */
    b[15] = (uint8_t)(b[15] + 3);
    b[n] = 0x04;
    b[n + 1] = 0;
    b[n + 2] = 0;
    n += 3;
    assert_int_equal(n, max);
    assert_int_equal(pp_parse(b, n, max, &r, &why), 1);
    assert_int_equal(pp_parse(b, n, max - 1, &r, &why), -1);
    assert_string_equal(why, "PROXY v2 header longer than maxHeaderBytes");
    /* Refused from the fixed part alone. */
    assert_int_equal(pp_parse(b, 16, max - 1, &r, &why), -1);
}

/* pp_read() over a socket pair: the header in two writes, followed by the
 * request; the request's bytes stay on the socket. */
static void test_read_takes_the_header_only(void **state)
{
    int sv[2];
    uint8_t buf[1024], b[64], rest[64];
    struct pp_reader rd = {buf, 0, sizeof(buf)};
    struct pp_result r;
    const char *why = NULL;
    const char *v1 = "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET /";
    size_t n;

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv),
                     0);
    assert_int_equal(pp_read(&rd, sv[0], &r, &why), 0);
    assert_int_equal(write(sv[1], v1, 20), 20);
    assert_int_equal(pp_read(&rd, sv[0], &r, &why), 0);
    assert_int_equal(write(sv[1], v1 + 20, strlen(v1) - 20),
                     (ssize_t)(strlen(v1) - 20));
    assert_int_equal(pp_read(&rd, sv[0], &r, &why), 1);
    assert_int_equal(read(sv[0], rest, sizeof(rest)), 5);
    assert_memory_equal(rest, "GET /", 5);
    /* v2, then a TLS record's first byte. */
    rd.got = 0;
    n = v2_tcp4(b, NULL, 0);
    b[n] = 0x16;
    assert_int_equal(write(sv[1], b, n + 1), (ssize_t)(n + 1));
    assert_int_equal(pp_read(&rd, sv[0], &r, &why), 1);
    assert_int_equal(r.version, 2);
    assert_int_equal(read(sv[0], rest, sizeof(rest)), 1);
    assert_int_equal(rest[0], 0x16);
    /* Closed half way. */
    rd.got = 0;
    assert_int_equal(write(sv[1], b, 10), 10);
    close(sv[1]);
    assert_int_equal(pp_read(&rd, sv[0], &r, &why), -1);
    assert_string_equal(why, "closed before the PROXY header ended");
    close(sv[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_tcp4_and_tcp6),
        cmocka_unit_test(test_v1_in_pieces_needs_more),
        cmocka_unit_test(test_v1_malformed_is_refused),
        cmocka_unit_test(test_v1_limit_and_one_more),
        cmocka_unit_test(test_v2_tcp4_tcp6_local),
        cmocka_unit_test(test_v2_malformed_is_refused),
        cmocka_unit_test(test_v2_limit_and_one_more),
        cmocka_unit_test(test_read_takes_the_header_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
