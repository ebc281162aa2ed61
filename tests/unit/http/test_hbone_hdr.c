/*
 * Unit tests for src/http/hbone_hdr.c: the CONNECT authority, Forwarded
 * and baggage of an HBONE request, read as ztunnel reads them.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "http/hbone_hdr.h"

static int auth(const char *s, struct hbone_authority *a)
{
    const char *why;

    return hbone_authority_parse(s, strlen(s), a, &why);
}

static void assert_slice(struct slice s, const char *want)
{
    assert_int_equal(s.n, strlen(want));
    if (s.n > 0)
        assert_memory_equal(s.p, want, s.n);
}

static void test_authority(void **state)
{
    struct hbone_authority a;
    char buf[ADDR_STRLEN];

    (void)state;
    assert_int_equal(auth("10.1.2.3:8080", &a), 0);
    assert_true(a.is_addr);
    assert_int_equal(a.port, 8080);
    assert_string_equal(addr_format(&a.addr, buf, sizeof(buf)),
                        "10.1.2.3:8080");
    assert_int_equal(auth("[fd00::1]:15008", &a), 0);
    assert_true(a.is_addr);
    assert_string_equal(addr_format(&a.addr, buf, sizeof(buf)),
                        "[fd00::1]:15008");
    assert_int_equal(auth("reviews.default.svc.cluster.local:9080", &a), 0);
    assert_false(a.is_addr);
    assert_slice(a.host, "reviews.default.svc.cluster.local");
    assert_int_equal(a.port, 9080);
    /* One past each bound of the port, and other malformed forms. */
    assert_int_equal(auth("h:65535", &a), 0);
    assert_int_equal(auth("h:65536", &a), -1);
    assert_int_equal(auth("h:0", &a), -1);
    assert_int_equal(auth("h:080", &a), -1);
    assert_int_equal(auth("h:", &a), -1);
    assert_int_equal(auth("h", &a), -1);
    assert_int_equal(auth(":80", &a), -1);
    assert_int_equal(auth("fd00::1:80", &a), -1);
    assert_int_equal(auth("[10.0.0.1]:80", &a), -1);
    assert_int_equal(auth("[fd00::1:80", &a), -1);
    assert_int_equal(auth("a b:80", &a), -1);
    assert_int_equal(auth("a/b:80", &a), -1);
    assert_int_equal(auth("user@h:80", &a), -1);
}

static void test_authority_host_length(void **state)
{
    struct hbone_authority a;
    char s[300];

    (void)state;
    /* 253 bytes of name is the most; 254 is one past. */
    memset(s, 'a', 253);
    memcpy(s + 253, ":80", 4);
    assert_int_equal(auth(s, &a), 0);
    memset(s, 'a', 254);
    memcpy(s + 254, ":80", 4);
    assert_int_equal(auth(s, &a), -1);
}

static int fwd(const char *s, struct hbone_forwarded *f)
{
    const char *why;

    return hbone_forwarded_parse(s, strlen(s), f, &why);
}

static void test_forwarded(void **state)
{
    struct hbone_forwarded f;

    (void)state;
    /* As ztunnel's build_forwarded() writes it. */
    assert_int_equal(fwd("for=\"10.0.0.1:41234\"", &f), 0);
    assert_slice(f.for_, "10.0.0.1:41234");
    assert_slice(f.host, "");
    assert_int_equal(
        fwd("for=\"10.0.0.1:41234\";host=reviews.default.svc.cluster.local",
            &f),
        0);
    assert_slice(f.host, "reviews.default.svc.cluster.local");
    assert_int_equal(fwd("for=\"[::1]:80\"", &f), 0);
    assert_slice(f.for_, "[::1]:80");
    /* ztunnel's parse_forwarded_host() cases. */
    assert_int_equal(fwd("by=identifier;for=\"1.2.3.4:5\";host=example.com;"
                         "proto=https",
                         &f),
                     0);
    assert_slice(f.host, "example.com");
    assert_int_equal(fwd("by=x;host=\"example.com\";proto=https", &f), 0);
    assert_slice(f.host, "example.com");
    assert_int_equal(fwd("by=x;proto=https", &f), 0);
    assert_slice(f.host, "");
    assert_int_equal(fwd("by=x;host=;proto=https", &f), 0);
    assert_slice(f.host, "");
    /* Not ASCII: refused whole. */
    assert_int_equal(fwd("for=for;host=host;proto=\"pr\xc3\xb6to\"", &f), -1);
    assert_slice(f.host, "");
    /* for= must be an address and port. */
    assert_int_equal(fwd("for=unknown", &f), -1);
    assert_int_equal(fwd("for=\"10.0.0.1:41234", &f), -1);
    assert_int_equal(fwd("for", &f), -1);
    assert_int_equal(fwd("=x", &f), -1);
    assert_int_equal(fwd("for=\"1.2.3.4:5\"x", &f), -1);
    assert_int_equal(fwd("", &f), 0);
}

static int bag(const char *s, struct hbone_baggage *b)
{
    const char *why;

    return hbone_baggage_parse(s, strlen(s), b, &why);
}

static void test_baggage(void **state)
{
    struct hbone_baggage b;

    (void)state;
    assert_int_equal(
        bag("k8s.cluster.name=c1,k8s.namespace.name=ns,"
            "k8s.deployment.name=app,service.name=svc,service.version=v1,"
            "cloud.region=eu,cloud.availability_zone=eu-a",
            &b),
        0);
    assert_slice(b.cluster, "c1");
    assert_slice(b.ns, "ns");
    assert_slice(b.workload, "app");
    assert_slice(b.service, "svc");
    assert_slice(b.version, "v1");
    assert_slice(b.region, "eu");
    assert_slice(b.zone, "eu-a");
    /* Every workload kind ztunnel knows; the last one wins; unknown keys
     * and members without '=' are skipped; an empty value is none; the
     * value is what lies between the first and the second '='. */
    assert_int_equal(bag("k8s.pod.name=p,k8s.job.name=j,x=y,junk,"
                         "service.name=,service.version=a=b",
                         &b),
                     0);
    assert_slice(b.workload, "j");
    assert_slice(b.service, "");
    assert_slice(b.version, "a");
    assert_int_equal(bag("k8s.cronjob.name=cj", &b), 0);
    assert_slice(b.workload, "cj");
    /* A byte outside printable ASCII: none of it is used. */
    assert_int_equal(bag("service.name=a\x01", &b), -1);
    assert_slice(b.service, "");
    assert_int_equal(bag("", &b), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_authority),
        cmocka_unit_test(test_authority_host_length),
        cmocka_unit_test(test_forwarded),
        cmocka_unit_test(test_baggage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
