/*
 * Unit tests of src/tls/clienthello.c: real ClientHellos captured from
 * openssl s_client and curl (the fuzz seeds), and hellos built here to be
 * cut into records at every size, truncated at every byte, or broken in
 * one field at a time.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include "tls/clienthello.h"

#define SCRATCH (64 * 1024)

static uint8_t scratch[SCRATCH];

/* ---- building hellos ---------------------------------------------------- */

struct wb {
    uint8_t *p;
    size_t n;
};

static void put8(struct wb *w, unsigned v)
{
    w->p[w->n++] = (uint8_t)v;
}

static void put16(struct wb *w, unsigned v)
{
    put8(w, v >> 8);
    put8(w, v & 0xff);
}

static void putb(struct wb *w, const void *p, size_t n)
{
    memcpy(w->p + w->n, p, n);
    w->n += n;
}

/* What to put in a built hello; the *_bad fields break one thing. */
struct spec {
    const char *sni;     /* NULL: no server_name */
    size_t sni_len;      /* 0: strlen(sni) */
    const char *alpn[3]; /* NULL-terminated */
    size_t pad;          /* bytes of an extra padding extension */
    int dup_sni;         /* two server_name extensions */
    int odd_suites;      /* an odd cipher suites length */
    int long_sid;        /* a 33-byte session id */
    int ext_len_off;     /* added to the extensions length */
    int empty_alpn_name; /* a zero-length ALPN name */
    unsigned hs_type;    /* 0: ClientHello */
};

/* build_msg() writes a handshake message (header and body) into out. */
static size_t build_msg(const struct spec *s, uint8_t *out)
{
    struct wb w = {out, 0}, e;
    uint8_t ext[SCRATCH];
    uint8_t zero[32] = {0};
    size_t body_at;

    e.p = ext;
    e.n = 0;
    for (int k = 0; s->sni != NULL && k < (s->dup_sni ? 2 : 1); k++) {
        size_t l = s->sni_len ? s->sni_len : strlen(s->sni);
        put16(&e, 0);
        put16(&e, (unsigned)(l + 5));
        put16(&e, (unsigned)(l + 3));
        put8(&e, 0);
        put16(&e, (unsigned)l);
        putb(&e, s->sni, l);
    }
    if (s->alpn[0] != NULL || s->empty_alpn_name) {
        size_t total = 0;
        for (int i = 0; s->alpn[i] != NULL; i++)
            total += 1 + strlen(s->alpn[i]);
        if (s->empty_alpn_name)
            total += 1;
        put16(&e, 16);
        put16(&e, (unsigned)(total + 2));
        put16(&e, (unsigned)total);
        for (int i = 0; s->alpn[i] != NULL; i++) {
            put8(&e, (unsigned)strlen(s->alpn[i]));
            putb(&e, s->alpn[i], strlen(s->alpn[i]));
        }
        if (s->empty_alpn_name)
            put8(&e, 0);
    }
    if (s->pad > 0) {
        put16(&e, 21); /* padding */
        put16(&e, (unsigned)s->pad);
        memset(e.p + e.n, 0, s->pad);
        e.n += s->pad;
    }
    put8(&w, s->hs_type ? s->hs_type : 1);
    put8(&w, 0); /* length, filled in below */
    put16(&w, 0);
    body_at = w.n;
    put16(&w, 0x0303);
    putb(&w, zero, 32);
    if (s->long_sid) {
        put8(&w, 33);
        for (int i = 0; i < 33; i++)
            put8(&w, 1);
    } else {
        put8(&w, 0);
    }
    put16(&w, s->odd_suites ? 3 : 4);
    put16(&w, 0x1301);
    put16(&w, 0xc02f);
    if (s->odd_suites)
        put8(&w, 0);
    put8(&w, 1);
    put8(&w, 0);
    put16(&w, (unsigned)((int)e.n + s->ext_len_off));
    putb(&w, ext, e.n);
    out[1] = (uint8_t)((w.n - body_at) >> 16);
    out[2] = (uint8_t)((w.n - body_at) >> 8);
    out[3] = (uint8_t)(w.n - body_at);
    return w.n;
}

/* records() cuts msg into handshake records of at most frag bytes. */
static size_t records(const uint8_t *msg, size_t n, size_t frag, uint8_t *out)
{
    size_t o = 0;

    for (size_t i = 0; i < n; i += frag) {
        size_t l = n - i < frag ? n - i : frag;
        out[o++] = 22;
        out[o++] = 3;
        out[o++] = 1;
        out[o++] = (uint8_t)(l >> 8);
        out[o++] = (uint8_t)l;
        memcpy(out + o, msg + i, l);
        o += l;
    }
    return o;
}

static size_t build(const struct spec *s, size_t frag, uint8_t *out)
{
    static uint8_t msg[SCRATCH + 1024];
    size_t n = build_msg(s, msg);

    return records(msg, n, frag, out);
}

static int parse(const uint8_t *in, size_t n, struct clienthello *ch)
{
    const char *why;

    return clienthello_parse(in, n, scratch, sizeof(scratch), ch, &why);
}

static void assert_sni(const struct clienthello *ch, const char *want)
{
    assert_int_equal(ch->sni_len, strlen(want));
    assert_memory_equal(ch->sni, want, strlen(want));
}

static size_t load_seed(const char *name, uint8_t *out, size_t cap)
{
    char path[512];
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/fuzz_clienthello/%s",
             SRCDIR, name);
    f = fopen(path, "rb");
    assert_non_null(f);
    n = fread(out, 1, cap, f);
    fclose(f);
    assert_true(n > 0);
    return n;
}

/* ---- real clients -------------------------------------------------------- */

static void test_openssl_sni_and_alpn(void **state)
{
    static uint8_t in[4096];
    size_t n = load_seed("openssl-sni-alpn", in, sizeof(in));
    struct clienthello ch;
    size_t off = 0, l;
    const uint8_t *name;

    (void)state;
    assert_int_equal(parse(in, n, &ch), CH_OK);
    assert_sni(&ch, "foo.example.com");
    assert_int_equal(clienthello_alpn_next(&ch, &off, &name, &l), 1);
    assert_int_equal(l, 2);
    assert_memory_equal(name, "h2", 2);
    assert_int_equal(clienthello_alpn_next(&ch, &off, &name, &l), 1);
    assert_int_equal(l, 8);
    assert_memory_equal(name, "http/1.1", 8);
    assert_int_equal(clienthello_alpn_next(&ch, &off, &name, &l), 0);
    assert_int_equal(ch.consumed, n);
}

static void test_openssl_without_sni(void **state)
{
    static uint8_t in[4096];
    size_t n = load_seed("openssl-nosni", in, sizeof(in));
    struct clienthello ch;

    (void)state;
    assert_int_equal(parse(in, n, &ch), CH_OK);
    assert_int_equal(ch.sni_len, 0);
    assert_int_equal(ch.version, 0x0303);
}

static void test_curl_sni(void **state)
{
    static uint8_t in[4096];
    size_t n = load_seed("curl-sni", in, sizeof(in));
    struct clienthello ch;

    (void)state;
    assert_int_equal(parse(in, n, &ch), CH_OK);
    assert_sni(&ch, "bar.example.com");
    assert_true(ch.alpn_len > 0);
}

/* Every prefix of a real hello asks for more, never fails. */
static void test_every_truncation_needs_more(void **state)
{
    static uint8_t in[4096];
    size_t n = load_seed("curl-sni", in, sizeof(in));
    struct clienthello ch;

    (void)state;
    for (size_t i = 0; i < n; i++)
        assert_int_equal(parse(in, i, &ch), CH_NEED_MORE);
    assert_int_equal(parse(in, n, &ch), CH_OK);
}

/* ---- records ------------------------------------------------------------- */

static void test_split_records_every_size(void **state)
{
    static uint8_t in[8192];
    struct spec s = {.sni = "a.example.com", .alpn = {"h2", NULL}};
    struct clienthello ch;

    (void)state;
    for (size_t frag = 1; frag <= 300; frag++) {
        size_t n = build(&s, frag, in);
        assert_int_equal(parse(in, n, &ch), CH_OK);
        assert_sni(&ch, "a.example.com");
        assert_int_equal(ch.consumed, n);
        /* And cut short anywhere, it waits. */
        assert_int_equal(parse(in, n - 1, &ch), CH_NEED_MORE);
        assert_int_equal(parse(in, n / 2, &ch), CH_NEED_MORE);
    }
}

/* A ClientHello of more than one full record (large post-quantum key
 * shares make these real). */
static void test_hello_larger_than_a_record(void **state)
{
    static uint8_t in[SCRATCH + 4096];
    struct spec s = {.sni = "big.example.com", .pad = 20000};
    struct clienthello ch;
    const char *why;
    size_t n = build(&s, 16384, in);

    (void)state;
    assert_int_equal(parse(in, n, &ch), CH_OK);
    assert_sni(&ch, "big.example.com");
    assert_int_equal(ch.consumed, n);
    /* The scratch buffer bounds it. */
    assert_int_equal(clienthello_parse(in, n, scratch, 16384, &ch, &why),
                     CH_TOO_LARGE);
    assert_non_null(why);
    /* Known too large from the header alone, before the rest arrives. */
    assert_int_equal(clienthello_parse(in, 9, scratch, 16384, &ch, &why),
                     CH_TOO_LARGE);
}

static void test_trailing_records_not_consumed(void **state)
{
    static uint8_t in[4096];
    struct spec s = {.sni = "t.example.com"};
    struct clienthello ch;
    size_t n = build(&s, 16384, in);
    static const uint8_t ccs[] = {20, 3, 3, 0, 1, 1};

    (void)state;
    memcpy(in + n, ccs, sizeof(ccs));
    assert_int_equal(parse(in, n + sizeof(ccs), &ch), CH_OK);
    assert_int_equal(ch.consumed, n);
}

static void test_record_larger_than_hello(void **state)
{
    static uint8_t in[4096];
    struct spec s = {.sni = "r.example.com"};
    struct clienthello ch;
    size_t n = build(&s, 16384, in);

    (void)state;
    /* The record claims 10 bytes more than the message: the hello is
     * complete without them. */
    in[4] = (uint8_t)(in[4] + 10);
    assert_int_equal(parse(in, n, &ch), CH_OK);
    assert_sni(&ch, "r.example.com");
    assert_int_equal(ch.consumed, n);
}

/* ---- not TLS, and malformed ---------------------------------------------- */

static void test_not_tls(void **state)
{
    static const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    static const uint8_t sslv2[] = {0x80, 0x2e, 0x01, 0x00, 0x02};
    static const uint8_t badver[] = {22, 9, 1, 0, 10};
    struct clienthello ch;

    (void)state;
    assert_int_equal(parse((const uint8_t *)http, sizeof(http) - 1, &ch),
                     CH_NOT_TLS);
    assert_int_equal(parse(sslv2, sizeof(sslv2), &ch), CH_NOT_TLS);
    assert_int_equal(parse(badver, 2, &ch), CH_NOT_TLS);
    assert_int_equal(parse(badver, 0, &ch), CH_NEED_MORE);
}

static void expect_malformed(const struct spec *s)
{
    static uint8_t in[8192];
    struct clienthello ch;
    const char *why = NULL;
    size_t n = build(s, 16384, in);

    assert_int_equal(
        clienthello_parse(in, n, scratch, sizeof(scratch), &ch, &why),
        CH_MALFORMED);
    assert_non_null(why);
    assert_int_equal(ch.sni_len, 0);
}

static void test_malformed_fields(void **state)
{
    struct spec base = {.sni = "m.example.com", .alpn = {"h2", NULL}};
    struct spec s;

    (void)state;
    s = base;
    s.hs_type = 2; /* ServerHello */
    expect_malformed(&s);
    s = base;
    s.dup_sni = 1;
    expect_malformed(&s);
    s = base;
    s.odd_suites = 1;
    expect_malformed(&s);
    s = base;
    s.long_sid = 1;
    expect_malformed(&s);
    s = base;
    s.ext_len_off = 1;
    expect_malformed(&s);
    s = base;
    s.ext_len_off = -1;
    expect_malformed(&s);
    s = base;
    s.empty_alpn_name = 1;
    expect_malformed(&s);
    s = base;
    s.sni = "bad\0name";
    s.sni_len = 8;
    expect_malformed(&s);
    s = base;
    s.sni = "";
    s.sni_len = 0; /* strlen: an empty name */
    expect_malformed(&s);
}

static void test_malformed_records(void **state)
{
    static uint8_t in[8192];
    struct spec s = {.sni = "x.example.com"};
    struct clienthello ch;
    size_t n;

    (void)state;
    /* An application-data record in the middle of the hello. */
    n = build(&s, 20, in);
    in[25] = 23;
    assert_int_equal(parse(in, n, &ch), CH_MALFORMED);
    /* Even seen from its first byte only. */
    assert_int_equal(parse(in, 26, &ch), CH_MALFORMED);
    /* A zero-length handshake record. */
    n = build(&s, 16384, in);
    in[3] = 0;
    in[4] = 0;
    assert_int_equal(parse(in, n, &ch), CH_MALFORMED);
    /* A record longer than TLS allows. */
    in[3] = 0x40;
    in[4] = 0x01;
    assert_int_equal(parse(in, n, &ch), CH_MALFORMED);
}

/* A server name of exactly the largest size is fine; the result points
 * at the name, not past it. */
static void test_longest_name(void **state)
{
    static uint8_t in[8192];
    char name[257];
    struct spec s = {0};
    struct clienthello ch;
    size_t n;

    (void)state;
    memset(name, 'a', 255);
    name[255] = '\0';
    s.sni = name;
    n = build(&s, 16384, in);
    assert_int_equal(parse(in, n, &ch), CH_OK);
    assert_sni(&ch, name);
    name[255] = 'a';
    s.sni_len = 256;
    n = build(&s, 16384, in);
    assert_int_equal(parse(in, n, &ch), CH_MALFORMED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openssl_sni_and_alpn),
        cmocka_unit_test(test_openssl_without_sni),
        cmocka_unit_test(test_curl_sni),
        cmocka_unit_test(test_every_truncation_needs_more),
        cmocka_unit_test(test_split_records_every_size),
        cmocka_unit_test(test_hello_larger_than_a_record),
        cmocka_unit_test(test_trailing_records_not_consumed),
        cmocka_unit_test(test_record_larger_than_hello),
        cmocka_unit_test(test_not_tls),
        cmocka_unit_test(test_malformed_fields),
        cmocka_unit_test(test_malformed_records),
        cmocka_unit_test(test_longest_name),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
