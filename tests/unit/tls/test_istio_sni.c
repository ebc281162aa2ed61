/*
 * Unit tests of src/tls/istio_sni.c: Istio's outbound SNI as istiod's
 * BuildDNSSrvSubsetKey writes it, every way it can be malformed, the
 * round trip through istio_sni_format(), and the mesh ALPN set.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include "tls/clienthello.h"
#include "tls/istio_sni.h"

static int parse(const char *s, struct istio_sni *out, const char **why)
{
    *why = NULL;
    return istio_sni_parse(s, strlen(s), out, why);
}

static void parses_istio_names(void **state)
{
    struct istio_sni s;
    const char *why;

    (void)state;
    assert_int_equal(
        parse("outbound_.9080_.v1_.reviews.default.svc.cluster.local", &s,
              &why),
        0);
    assert_int_equal(s.port, 9080);
    assert_true(slice_eq_str(s.subset, "v1"));
    assert_true(slice_eq_str(s.host, "reviews.default.svc.cluster.local"));

    /* No subset: Istio writes the empty name between the separators. */
    assert_int_equal(parse("outbound_.80_._.svc.example.test", &s, &why), 0);
    assert_int_equal(s.port, 80);
    assert_int_equal(s.subset.n, 0);
    assert_true(slice_eq_str(s.host, "svc.example.test"));

    assert_int_equal(parse("outbound_.65535_.canary-2_.a", &s, &why), 0);
    assert_int_equal(s.port, 65535);
    assert_true(slice_eq_str(s.subset, "canary-2"));
    assert_true(slice_eq_str(s.host, "a"));
}

static void refuses_other_names(void **state)
{
    static const char *const bad[] = {
        "",
        "reviews.default.svc.cluster.local",
        "inbound_.9080_.v1_.reviews",      /* only outbound reaches a gateway */
        "outbound|9080|v1|reviews",        /* the cluster name, not the SNI */
        "outbound_.",                      /* nothing after the prefix */
        "outbound_.9080",                  /* no separator after the port */
        "outbound_._.v1_.reviews",         /* empty port */
        "outbound_.0_.v1_.reviews",        /* port 0 */
        "outbound_.080_.v1_.reviews",      /* leading zero */
        "outbound_.65536_.v1_.reviews",    /* too large */
        "outbound_.123456_.v1_.reviews",   /* too many digits */
        "outbound_.-80_.v1_.reviews",      /* sign */
        "outbound_.8a_.v1_.reviews",       /* not a number */
        "outbound_.80_.v1",                /* no host separator */
        "outbound_.80_.v.1_.reviews",      /* a subset is one label */
        "outbound_.80_.v_1_.reviews",      /* '_' in the subset */
        "outbound_.80_.v1_.",              /* empty host */
        "outbound_.80_._.",                /* empty host, no subset */
        "outbound_.80_.v1_..reviews",      /* empty label */
        "outbound_.80_.v1_.reviews.",      /* trailing dot */
        "outbound_.80_.v1_.a_.b",          /* '_' in the host */
        "outbound_.80_.v1_.*.example.com", /* wildcard */
        "OUTBOUND_.80_.v1_.reviews",       /* the prefix is lowercase */
    };
    struct istio_sni s;
    const char *why;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = parse(bad[i], &s, &why);
        if (rc != -1)
            fail_msg("'%s' parsed", bad[i]);
        assert_non_null(why);
        assert_int_equal(s.port, 0);
        assert_null(s.host.p);
    }
}

static void reads_only_len_bytes(void **state)
{
    const char buf[] = "outbound_.80_._.svc.example.testGARBAGE";
    struct istio_sni s;
    const char *why;

    (void)state;
    assert_int_equal(istio_sni_parse(buf, strlen(buf) - 7, &s, &why), 0);
    assert_true(slice_eq_str(s.host, "svc.example.test"));
    /* A NUL inside is a byte like any other, and not a host character. */
    assert_int_equal(istio_sni_parse("outbound_.80_._.a\0b", 19, &s, &why), -1);
    assert_int_equal(istio_sni_parse("outbound_.80_.v\0001_.a", 20, &s, &why),
                     -1);
    assert_string_equal(why, "bad subset");
    /* A subset name is at most 63 characters, as a DNS label. */
    {
        char name[128];
        snprintf(name, sizeof(name), "outbound_.80_.%063d_.a", 0);
        assert_int_equal(parse(name, &s, &why), 0);
        assert_int_equal(s.subset.n, 63);
        snprintf(name, sizeof(name), "outbound_.80_.%064d_.a", 0);
        assert_int_equal(parse(name, &s, &why), -1);
    }
}

static void formats_what_it_parses(void **state)
{
    char buf[300];
    struct istio_sni s;
    const char *why;

    (void)state;
    assert_int_equal(istio_sni_format(buf, sizeof(buf), 9080, "v1",
                                      "reviews.default.svc.cluster.local"),
                     (int)strlen("outbound_.9080_.v1_.reviews.default.svc."
                                 "cluster.local"));
    assert_string_equal(
        buf, "outbound_.9080_.v1_.reviews.default.svc.cluster.local");
    assert_int_equal(parse(buf, &s, &why), 0);
    assert_int_equal(istio_sni_format(buf, sizeof(buf), 80, NULL, "h.test"),
                     (int)strlen("outbound_.80_._.h.test"));
    assert_string_equal(buf, "outbound_.80_._.h.test");
    assert_int_equal(istio_sni_format(buf, sizeof(buf), 80, "", "h.test"),
                     (int)strlen("outbound_.80_._.h.test"));
    assert_int_equal(istio_sni_format(buf, 10, 80, NULL, "h.test"), -1);
}

static void knows_istio_alpn(void **state)
{
    /* Wire format: each name after a length byte. */
    static const uint8_t http11[] = "\x0eistio-http/1.1\x05istio\x08http/1.1";
    static const uint8_t plain[] = "\x02h2\x08http/1.1";
    static const uint8_t near[] = "\x06istio2\x04isti\x0aistio-h2c!";
    static const uint8_t tcp[] = "\x13istio-peer-exchange";
    struct clienthello ch;

    (void)state;
    assert_true(istio_alpn_is_mesh((const uint8_t *)"istio", 5));
    assert_true(istio_alpn_is_mesh((const uint8_t *)"istio-h2", 8));
    assert_true(istio_alpn_is_mesh((const uint8_t *)"istio-http/1.0", 14));
    assert_false(istio_alpn_is_mesh((const uint8_t *)"h2", 2));
    assert_false(istio_alpn_is_mesh((const uint8_t *)"ISTIO", 5));

    memset(&ch, 0, sizeof(ch));
    assert_false(istio_alpn_offered(&ch)); /* no ALPN at all */
    ch.alpn = http11;
    ch.alpn_len = sizeof(http11) - 1;
    assert_true(istio_alpn_offered(&ch));
    ch.alpn = tcp;
    ch.alpn_len = sizeof(tcp) - 1;
    assert_true(istio_alpn_offered(&ch));
    ch.alpn = plain;
    ch.alpn_len = sizeof(plain) - 1;
    assert_false(istio_alpn_offered(&ch));
    ch.alpn = near;
    ch.alpn_len = sizeof(near) - 1;
    assert_false(istio_alpn_offered(&ch));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_istio_names),
        cmocka_unit_test(refuses_other_names),
        cmocka_unit_test(reads_only_len_bytes),
        cmocka_unit_test(formats_what_it_parses),
        cmocka_unit_test(knows_istio_alpn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
