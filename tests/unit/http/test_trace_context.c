/*
 * Unit tests for src/http/trace_context.c: traceparent as strictly as W3C
 * Trace Context asks, tracestate lists, B3 headers.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "http/trace_context.h"

#define TP "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

static int tp(const char *s)
{
    struct tctx t;

    return tctx_parse_traceparent(s, strlen(s), &t);
}

static void test_traceparent(void **state)
{
    struct tctx t;
    char out[56];

    (void)state;
    assert_int_equal(tctx_parse_traceparent(TP, strlen(TP), &t), 0);
    assert_int_equal(t.trace_id[0], 0x0a);
    assert_int_equal(t.trace_id[15], 0x9c);
    assert_int_equal(t.parent_id[7], 0x31);
    assert_int_equal(t.sampled, 1);
    tctx_traceparent(t.trace_id, t.parent_id, 1, out);
    assert_string_equal(out, TP);
    /* The sampled flag is bit 0, masked. */
    assert_int_equal(
        tctx_parse_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03", 55, &t),
        0);
    assert_int_equal(t.sampled, 1);
    assert_int_equal(
        tctx_parse_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-02", 55, &t),
        0);
    assert_int_equal(t.sampled, 0);
    /* A later version: its first 55 bytes, then '-' or the end. */
    assert_int_equal(
        tp("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what"), 0);
    assert_int_equal(
        tp("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), 0);
}

static void test_traceparent_invalid(void **state)
{
    (void)state;
    assert_int_equal(tp(""), -1);
    assert_int_equal(tp(TP "-"), -1); /* version 00 has nothing more */
    assert_int_equal(
        tp("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0"), -1);
    assert_int_equal(
        tp("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), -1);
    assert_int_equal(
        tp("00-00000000000000000000000000000000-b7ad6b7169203331-01"), -1);
    assert_int_equal(
        tp("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"), -1);
    assert_int_equal(
        tp("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"),
        -1); /* uppercase */
    assert_int_equal(
        tp("00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), -1);
    assert_int_equal(
        tp("0x-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), -1);
    assert_int_equal(
        tp("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x"), -1);
    assert_int_equal(
        tp("00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333z-01"), -1);
}

static int ts(const char *s)
{
    return tctx_tracestate_valid(s, strlen(s));
}

static void test_tracestate(void **state)
{
    char many[64 * 40];
    size_t n = 0;

    (void)state;
    assert_int_equal(ts("rojo=00f067aa0ba902b7"), 1);
    assert_int_equal(ts("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"), 1);
    assert_int_equal(ts("a=1,,b=2"), 1); /* empty members */
    assert_int_equal(ts("tenant@sys=v"), 1);
    assert_int_equal(ts("1tenant@sys=v"), 1); /* tenants may start 0-9 */
    assert_int_equal(ts("1key=v"), 0);        /* simple keys may not */
    assert_int_equal(ts("Key=v"), 0);
    assert_int_equal(ts("k=v,k=w"), 0); /* a key twice */
    assert_int_equal(ts("k"), 0);
    assert_int_equal(ts("k="), 0);
    assert_int_equal(ts("k=a b "), 1); /* the space is whitespace around it */
    assert_int_equal(ts("k=a\x01b"), 0);
    assert_int_equal(ts("k=a=b"), 0);
    assert_int_equal(ts("t@Sys=v"), 0);
    for (int i = 0; i < 33; i++)
        n += (size_t)snprintf(many + n, sizeof(many) - n, "%sk%d=v",
                              i ? "," : "", i);
    assert_int_equal(tctx_tracestate_valid(many, n), 0); /* 33 members */
    n = 0;
    for (int i = 0; i < 32; i++)
        n += (size_t)snprintf(many + n, sizeof(many) - n, "%sk%d=v",
                              i ? "," : "", i);
    assert_int_equal(tctx_tracestate_valid(many, n), 1);
}

static struct http_field fv[8];
static struct http_fields fs;

static void set(int i, const char *k, const char *v)
{
    fv[i].name = (struct slice){k, strlen(k)};
    fv[i].value = (struct slice){v, strlen(v)};
    fs.v = fv;
    fs.n = (size_t)i + 1;
}

static void test_from_fields(void **state)
{
    struct tctx t;
    int ok, one;

    (void)state;
    set(0, "traceparent", TP);
    assert_int_equal(tctx_from_fields(&fs, &t, &ok, &one), 1);
    assert_int_equal(ok, 0); /* no tracestate */
    set(1, "tracestate", "a=1");
    set(2, "tracestate", "b=2");
    assert_int_equal(tctx_from_fields(&fs, &t, &ok, &one), 1);
    assert_int_equal(ok, 1);
    set(2, "tracestate", "a=2"); /* joined: a key twice */
    assert_int_equal(tctx_from_fields(&fs, &t, &ok, &one), 1);
    assert_int_equal(ok, 0);
    /* Two traceparents: neither is believed; B3 is next. */
    set(1, "traceparent", TP);
    set(2, "x-b3-traceid", "463ac35c9f6413ad");
    set(3, "x-b3-spanid", "a2fb4a1d1a96d312");
    set(4, "x-b3-sampled", "0");
    assert_int_equal(tctx_from_fields(&fs, &t, &ok, &one), 2);
    assert_int_equal(one, 0);
    assert_int_equal(t.trace_id[0], 0); /* 64-bit id: the low half */
    assert_int_equal(t.trace_id[8], 0x46);
    assert_int_equal(t.parent_id[0], 0xa2);
    assert_int_equal(t.sampled, 0);
    set(0, "b3",
        "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90");
    assert_int_equal(tctx_from_fields(&fs, &t, &ok, &one), 2);
    assert_int_equal(one, 1);
    assert_int_equal(t.sampled, 1);
    assert_int_equal(t.trace_id[0], 0x80);
    set(0, "b3", "0");
    assert_int_equal(tctx_from_fields(&fs, &t, &ok, &one), 0);
    set(0, "x-b3-traceid", "xyz");
    set(1, "x-b3-spanid", "a2fb4a1d1a96d312");
    assert_int_equal(tctx_from_fields(&fs, &t, &ok, &one), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traceparent),
        cmocka_unit_test(test_traceparent_invalid),
        cmocka_unit_test(test_tracestate),
        cmocka_unit_test(test_from_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
