/*
 * Unit tests for src/config/conf.c, driven by a small table of our own that
 * uses every conf_type, so the decoder is tested apart from bootstrap.c.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/conf.h"
#include "config/yaml.h"
#include "core/addr.h"
#include "core/buf.h"

struct t_inner {
    int64_t port;
    char *host;
};

struct t_item {
    struct conf_mark mark;
    char *name;
    int64_t weight;
};

struct t_conf {
    char *name;
    int64_t count;
    int debug;
    int64_t timeout_ms;
    int64_t size;
    int mode;
    struct addr listen;
    struct conf_addrs peers;
    struct conf_strmap labels;
    struct t_inner inner;
    struct conf_list items; /* struct t_item */
    int64_t level;
};

/* CUSTOM: "low" or "high", stored as 1 or 2. */
static int parse_level(const char *s, size_t n, void *dst, const char **why)
{
    int64_t v;

    if (n == 3 && memcmp(s, "low", 3) == 0)
        v = 1;
    else if (n == 4 && memcmp(s, "high", 4) == 0)
        v = 2;
    else {
        *why = "expected low or high";
        return -1;
    }
    memcpy(dst, &v, sizeof(v));
    return 0;
}

static void level_json(struct buf *b, const void *src)
{
    int64_t v;

    memcpy(&v, src, sizeof(v));
    buf_puts(b, v == 2 ? "\"high\"" : "\"low\"");
}

static const char *const modes[] = {"fast", "safe", "slow", NULL};

static const struct conf_key inner_keys[] = {
    {.name = "port",
     .type = CONF_INT,
     .off = offsetof(struct t_inner, port),
     .min = 1,
     .max = 65535,
     .def = "80",
     .help = "a port"},
    {.name = "host",
     .type = CONF_STR,
     .off = offsetof(struct t_inner, host),
     .help = "a host"},
    {.name = NULL},
};
static const struct conf_section inner_section = {inner_keys, 0, SIZE_MAX};

static const struct conf_key item_keys[] = {
    {.name = "name",
     .type = CONF_STR,
     .off = offsetof(struct t_item, name),
     .help = "item name"},
    {.name = "weight",
     .type = CONF_INT,
     .off = offsetof(struct t_item, weight),
     .min = 0,
     .max = 100,
     .def = "1",
     .help = "item weight"},
    {.name = NULL},
};
static const struct conf_section item_section = {
    item_keys, sizeof(struct t_item), offsetof(struct t_item, mark)};

static const struct conf_key t_keys[] = {
    {.name = "name",
     .type = CONF_STR,
     .off = offsetof(struct t_conf, name),
     .def = "anon",
     .help = "a string"},
    {.name = "count",
     .type = CONF_INT,
     .off = offsetof(struct t_conf, count),
     .min = 1,
     .max = 10,
     .def = "5",
     .help = "an integer"},
    {.name = "debug",
     .type = CONF_BOOL,
     .off = offsetof(struct t_conf, debug),
     .def = "false",
     .help = "a boolean"},
    {.name = "timeout",
     .type = CONF_DURATION,
     .off = offsetof(struct t_conf, timeout_ms),
     .min = 1,
     .max = 3600000,
     .def = "1.5s",
     .help = "a duration"},
    {.name = "size",
     .type = CONF_SIZE,
     .off = offsetof(struct t_conf, size),
     .min = 1024,
     .max = 1048576,
     .def = "64KiB",
     .help = "a size"},
    {.name = "mode",
     .type = CONF_ENUM,
     .off = offsetof(struct t_conf, mode),
     .def = "safe",
     .help = "an enum",
     .enums = modes},
    {.name = "listen",
     .type = CONF_ADDR,
     .off = offsetof(struct t_conf, listen),
     .def = "127.0.0.1:8080",
     .help = "an address"},
    {.name = "peers",
     .type = CONF_ADDR_LIST,
     .off = offsetof(struct t_conf, peers),
     .min = 0,
     .max = 4,
     .help = "addresses"},
    {.name = "labels",
     .type = CONF_STR_MAP,
     .off = offsetof(struct t_conf, labels),
     .help = "a map"},
    {.name = "inner",
     .type = CONF_SECTION,
     .off = offsetof(struct t_conf, inner),
     .help = "a section",
     .sub = &inner_section},
    {.name = "items",
     .type = CONF_LIST,
     .off = offsetof(struct t_conf, items),
     .min = 1,
     .max = 3,
     .help = "a list",
     .sub = &item_section},
    {.name = "level",
     .type = CONF_CUSTOM,
     .off = offsetof(struct t_conf, level),
     .def = "low",
     .help = "custom",
     .custom = parse_level,
     .custom_json = level_json},
    {.name = NULL},
};
static const struct conf_section t_section = {t_keys, 0, SIZE_MAX};

/* A decoded configuration and what it was decoded from. */
struct fx {
    struct t_conf c;
    struct ydoc *docs;
    size_t ndocs;
    struct buf errs;
    int nerr;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    conf_defaults(&t_section, &f->c);
    buf_init(&f->errs, 65536);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    conf_dispose(&t_section, &f->c);
    yaml_docs_free(f->docs, f->ndocs);
    buf_dispose(&f->errs);
    free(f);
    return 0;
}

/* decode() loads text as t.yaml and decodes it into f->c; returns the
 * error text ("" when none). */
static const char *decode(struct fx *f, const char *text)
{
    char *err = NULL;

    yaml_docs_free(f->docs, f->ndocs);
    f->docs = NULL;
    f->ndocs = 0;
    buf_consume(&f->errs, buf_len(&f->errs));
    if (yaml_load(text, strlen(text), "t.yaml", &f->docs, &f->ndocs, &err) < 0)
        fail_msg("yaml_load: %s", err ? err : "?");
    assert_int_equal(f->ndocs, 1);
    assert_non_null(f->docs[0].root);
    f->nerr =
        conf_decode(&t_section, f->docs[0].root, &f->c, "t.yaml", &f->errs);
    return buf_cstr(&f->errs);
}

/* decode_err() expects text to produce exactly one error line, want. */
static void decode_err(struct fx *f, const char *text, const char *want)
{
    const char *got = decode(f, text);
    char line[512];

    snprintf(line, sizeof(line), "%s\n", want);
    if (strcmp(got, line) != 0)
        fail_msg("for \"%s\": got \"%s\", want \"%s\"", text, got, want);
    assert_int_equal(f->nerr, 1);
}

static void test_defaults(void **state)
{
    struct fx *f = *state;
    struct addr want;
    const char *why = NULL;

    assert_string_equal(f->c.name, "anon");
    assert_int_equal(f->c.count, 5);
    assert_int_equal(f->c.debug, 0);
    assert_int_equal(f->c.timeout_ms, 1500);
    assert_int_equal(f->c.size, 65536);
    assert_int_equal(f->c.mode, 1);
    assert_int_equal(addr_parse(&want, "127.0.0.1:8080", 14, 0, &why), 0);
    assert_true(addr_equal(&f->c.listen, &want));
    assert_int_equal(f->c.peers.n, 0);
    assert_null(f->c.peers.v);
    assert_int_equal(f->c.labels.n, 0);
    /* Sections get their own defaults. */
    assert_int_equal(f->c.inner.port, 80);
    assert_null(f->c.inner.host);
    assert_int_equal(f->c.items.n, 0);
    assert_int_equal(f->c.level, 1);
}

/* conf_defaults() "zeroes dst and applies every default" (conf.h): keys
 * without a default must not keep what the memory held before, or
 * conf_dispose() would free garbage. */
static void test_defaults_zero_unset(void **state)
{
    struct t_conf c;
    int zeroed;

    (void)state;
    memset(&c, 0xa5, sizeof(c));
    conf_defaults(&t_section, &c);
    zeroed = c.inner.host == NULL && c.peers.v == NULL && c.peers.n == 0 &&
             c.labels.v == NULL && c.labels.n == 0 && c.items.v == NULL &&
             c.items.n == 0;
    if (zeroed) {
        conf_dispose(&t_section, &c);
    } else {
        /* Only the defaults are real allocations. */
        free(c.name);
    }
    assert_true(zeroed);
}

static void test_decode_all_types(void **state)
{
    struct fx *f = *state;
    const char *err;
    const struct t_item *it;
    char s[ADDR_STRLEN];

    err = decode(f, "name: gw-1\n"
                    "count: 7\n"
                    "debug: true\n"
                    "timeout: 2m\n"
                    "size: 1MiB\n"
                    "mode: slow\n"
                    "listen: '[::1]:9000'\n"
                    "peers: [10.0.0.1:80, 'unix:/run/p.sock']\n"
                    "labels:\n"
                    "  app: web\n"
                    "  tier: \"1\"\n"
                    "inner:\n"
                    "  port: 443\n"
                    "  host: example\n"
                    "items:\n"
                    "  - name: a\n"
                    "  - {name: b, weight: 50}\n"
                    "level: high\n");
    assert_string_equal(err, "");
    assert_int_equal(f->nerr, 0);
    assert_string_equal(f->c.name, "gw-1");
    assert_int_equal(f->c.count, 7);
    assert_int_equal(f->c.debug, 1);
    assert_int_equal(f->c.timeout_ms, 120000);
    assert_int_equal(f->c.size, 1048576);
    assert_int_equal(f->c.mode, 2);
    assert_string_equal(addr_format(&f->c.listen, s, sizeof(s)), "[::1]:9000");
    assert_int_equal(f->c.peers.n, 2);
    assert_string_equal(addr_format(&f->c.peers.v[0], s, sizeof(s)),
                        "10.0.0.1:80");
    assert_string_equal(addr_format(&f->c.peers.v[1], s, sizeof(s)),
                        "unix:/run/p.sock");
    assert_int_equal(f->c.labels.n, 2);
    assert_string_equal(f->c.labels.v[0].key, "app");
    assert_string_equal(f->c.labels.v[0].val, "web");
    assert_string_equal(f->c.labels.v[1].key, "tier");
    assert_string_equal(f->c.labels.v[1].val, "1");
    assert_int_equal(f->c.inner.port, 443);
    assert_string_equal(f->c.inner.host, "example");
    assert_int_equal(f->c.items.n, 2);
    it = f->c.items.v;
    assert_string_equal(it[0].name, "a");
    /* Each list element starts from the element defaults. */
    assert_int_equal(it[0].weight, 1);
    assert_string_equal(it[1].name, "b");
    assert_int_equal(it[1].weight, 50);
    /* mark_off records where each element was written. */
    assert_int_equal(it[0].mark.line, 16);
    assert_int_equal(it[0].mark.col, 5);
    assert_int_equal(it[1].mark.line, 17);
    assert_int_equal(it[1].mark.col, 5);
    assert_int_equal(f->c.level, 2);
}

static void test_booleans(void **state)
{
    struct fx *f = *state;

    assert_string_equal(decode(f, "debug: True\n"), "");
    assert_int_equal(f->c.debug, 1);
    assert_string_equal(decode(f, "debug: False\n"), "");
    assert_int_equal(f->c.debug, 0);
    decode_err(f, "debug: yes\n",
               "t.yaml:1:8: debug: expected true or false, got 'yes'");
    decode_err(f, "debug: 1\n",
               "t.yaml:1:8: debug: expected true or false, got '1'");
}

static void test_null_sections_and_lists(void **state)
{
    struct fx *f = *state;

    /* A null section keeps its defaults; a null list with min 0 is empty. */
    assert_string_equal(decode(f, "inner:\npeers: ~\nlabels:\n"), "");
    assert_int_equal(f->c.inner.port, 80);
    assert_int_equal(f->c.peers.n, 0);
    assert_int_equal(f->c.labels.n, 0);
}

static void test_err_unknown_key(void **state)
{
    struct fx *f = *state;

    decode_err(f, "name: x\nbogus: 1\n", "t.yaml:2:1: bogus: unknown key");
    decode_err(f, "inner:\n  port: 1\n  prot: 2\n",
               "t.yaml:3:3: inner.prot: unknown key");
    decode_err(f, "items:\n  - name: a\n  - nmae: b\n",
               "t.yaml:3:5: items[1].nmae: unknown key");
}

static void test_err_wrong_type(void **state)
{
    struct fx *f = *state;

    decode_err(f, "name: [a]\n",
               "t.yaml:1:7: name: expected a string, got a list");
    decode_err(f, "debug: {a: 1}\n",
               "t.yaml:1:8: debug: expected a boolean, got a mapping");
    decode_err(f, "timeout: [1s]\n",
               "t.yaml:1:10: timeout: expected a duration, got a list");
    decode_err(f, "name: ~\n",
               "t.yaml:1:7: name: expected a string, got nothing");
    decode_err(f, "size:\n", "t.yaml:1:6: size: expected a size, got nothing");
    decode_err(f, "inner: 5\n",
               "t.yaml:1:8: inner: expected a mapping, got a scalar");
    decode_err(f, "items: [5]\n",
               "t.yaml:1:9: items[0]: expected a mapping, got a scalar");
    decode_err(f, "peers: 1.2.3.4:80\n",
               "t.yaml:1:8: peers: expected a list, got a scalar");
    decode_err(f, "labels: [a]\n",
               "t.yaml:1:9: labels: expected a mapping of strings, got a list");
    decode_err(f, "labels:\n  a: b\n  c: [d]\n",
               "t.yaml:3:6: labels.c: expected a string, got a list");
}

/* YAML reads an unquoted [IPV6]:PORT as a flow list: the message says to
 * quote it. */
static void test_err_address_list_hint(void **state)
{
    struct fx *f = *state;
    const char *err = decode(f, "listen: [x]\n");

    assert_int_equal(f->nerr, 1);
    assert_memory_equal(err, "t.yaml:1:9: listen: expected a", 30);
    assert_non_null(
        strstr(err, "got a list (quote IPv6 addresses: \"[::1]:80\")\n"));
}

static void test_err_bad_values(void **state)
{
    struct fx *f = *state;

    decode_err(f, "count: abc\n",
               "t.yaml:1:8: count: bad integer 'abc': not an integer");
    decode_err(f, "timeout: 30\n",
               "t.yaml:1:10: timeout: bad duration '30': duration needs a unit "
               "(ms, s, m or h)");
    decode_err(f, "size: 1kb\n",
               "t.yaml:1:7: size: bad size '1kb': unknown size suffix (use "
               "KiB, MiB or GiB)");
    decode_err(f, "listen: localhost:80\n",
               "t.yaml:1:9: listen: bad address 'localhost:80': bad IPv4 "
               "address (host names are not resolved here)");
    decode_err(f, "listen: 127.0.0.1:0\n",
               "t.yaml:1:9: listen: bad address '127.0.0.1:0': port out of "
               "range 1-65535");
    decode_err(f, "peers: [1.2.3.4:80, nope]\n",
               "t.yaml:1:21: peers[1]: bad address 'nope': expected HOST:PORT, "
               "[IPV6]:PORT or unix:/PATH");
    decode_err(f, "level: medium\n",
               "t.yaml:1:8: level: bad value 'medium': expected low or high");
}

static void test_err_out_of_range(void **state)
{
    struct fx *f = *state;

    decode_err(f, "count: 11\n",
               "t.yaml:1:8: count: value '11' out of range 1-10");
    decode_err(f, "count: 0\n",
               "t.yaml:1:8: count: value '0' out of range 1-10");
    decode_err(f, "count: -3\n",
               "t.yaml:1:8: count: value '-3' out of range 1-10");
    assert_string_equal(decode(f, "count: 10\n"), "");
    assert_int_equal(f->c.count, 10);
    decode_err(f, "timeout: 2h\n",
               "t.yaml:1:10: timeout: value '2h' out of range 1ms-3600000ms");
    decode_err(f, "timeout: 0s\n",
               "t.yaml:1:10: timeout: value '0s' out of range 1ms-3600000ms");
    decode_err(f, "size: 2MiB\n",
               "t.yaml:1:7: size: value '2MiB' out of range 1024-1048576");
    decode_err(f, "inner: {port: 70000}\n",
               "t.yaml:1:15: inner.port: value '70000' out of range 1-65535");
    decode_err(f, "items: [{name: a, weight: 101}]\n",
               "t.yaml:1:27: items[0].weight: value '101' out of range 0-100");
}

static void test_err_bad_enum(void **state)
{
    struct fx *f = *state;

    decode_err(f, "mode: turbo\n",
               "t.yaml:1:7: mode: unknown value 'turbo' (one of: fast, safe, "
               "slow)");
    decode_err(f, "mode: Safe\n",
               "t.yaml:1:7: mode: unknown value 'Safe' (one of: fast, safe, "
               "slow)");
    assert_string_equal(decode(f, "mode: fast\n"), "");
    assert_int_equal(f->c.mode, 0);
}

static void test_err_list_counts(void **state)
{
    struct fx *f = *state;

    decode_err(f,
               "peers: [1.1.1.1:1, 1.1.1.1:2, 1.1.1.1:3, 1.1.1.1:4, "
               "1.1.1.1:5]\n",
               "t.yaml:1:8: peers: needs 0 to 4 entries, has 5");
    decode_err(f, "items: []\n",
               "t.yaml:1:8: items: needs 1 to 3 entries, has 0");
    decode_err(f, "items:\n  - {}\n  - {}\n  - {}\n  - {}\n",
               "t.yaml:2:3: items: needs 1 to 3 entries, has 4");
    assert_string_equal(decode(f, "items: [{}, {}, {}]\n"), "");
    assert_int_equal(f->c.items.n, 3);
}

/* A list written with no value ("items:" or "items: ~") has a position
 * like any other node; the count error must name it, not line 0. */
static void test_err_null_list_count_has_position(void **state)
{
    struct fx *f = *state;

    decode_err(f, "name: x\nitems: ~\n",
               "t.yaml:2:8: items: needs 1 to 3 entries, has 0");
}

static void test_err_top_level(void **state)
{
    struct fx *f = *state;

    decode_err(f, "- a\n- b\n",
               "t.yaml:1:1: (top level): expected a mapping, got a list");
}

/* Every problem is reported, not only the first. */
static void test_several_errors(void **state)
{
    struct fx *f = *state;
    const char *err = decode(f, "count: 99\n"
                                "bogus: 1\n"
                                "debug: maybe\n"
                                "inner:\n"
                                "  port: x\n"
                                "items:\n"
                                "  - weight: -1\n"
                                "  - oops: 1\n"
                                "name: ok\n");

    assert_int_equal(f->nerr, 6);
    assert_string_equal(
        err, "t.yaml:1:8: count: value '99' out of range 1-10\n"
             "t.yaml:2:1: bogus: unknown key\n"
             "t.yaml:3:8: debug: expected true or false, got 'maybe'\n"
             "t.yaml:5:9: inner.port: bad integer 'x': not an integer\n"
             "t.yaml:7:13: items[0].weight: value '-1' out of range 0-100\n"
             "t.yaml:8:5: items[1].oops: unknown key\n");
    /* Good keys beside bad ones are still decoded. */
    assert_string_equal(f->c.name, "ok");
    /* A bad value leaves the default in place. */
    assert_int_equal(f->c.count, 5);
    assert_int_equal(f->c.debug, 0);
}

static void test_conf_error_format(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 1024);
    conf_error(&b, "f.yaml", 3, 14, "a.b[2].c", "bad %s (%d)", "thing", 7);
    conf_error(&b, "f.yaml", 0, 0, "(document)", "second");
    assert_string_equal(buf_cstr(&b), "f.yaml:3:14: a.b[2].c: bad thing (7)\n"
                                      "f.yaml:0:0: (document): second\n");
    buf_dispose(&b);
}

static void test_to_json_defaults(void **state)
{
    struct fx *f = *state;
    struct buf b;

    buf_init(&b, 65536);
    conf_to_json(&t_section, &f->c, &b);
    assert_string_equal(
        buf_cstr(&b),
        "{\"name\":\"anon\",\"count\":5,\"debug\":false,\"timeout\":\"1500ms\","
        "\"size\":65536,\"mode\":\"safe\",\"listen\":\"127.0.0.1:8080\","
        "\"peers\":[],\"labels\":{},\"inner\":{\"port\":80,\"host\":\"\"},"
        "\"items\":[],\"level\":\"low\"}");
    buf_dispose(&b);
}

static void test_to_json_values(void **state)
{
    struct fx *f = *state;
    struct buf b;

    assert_string_equal(decode(f, "name: 'say \"hi\"'\n"
                                  "debug: true\n"
                                  "timeout: 1h\n"
                                  "listen: '[::1]:1'\n"
                                  "peers: [1.2.3.4:5, 'unix:/s']\n"
                                  "labels: {a: b, c: d}\n"
                                  "inner: {host: h}\n"
                                  "items: [{name: x}, {name: y, weight: 0}]\n"
                                  "level: high\n"),
                        "");
    buf_init(&b, 65536);
    conf_to_json(&t_section, &f->c, &b);
    assert_string_equal(
        buf_cstr(&b),
        "{\"name\":\"say \\\"hi\\\"\",\"count\":5,\"debug\":true,"
        "\"timeout\":\"1h\",\"size\":65536,\"mode\":\"safe\","
        "\"listen\":\"[::1]:1\",\"peers\":[\"1.2.3.4:5\",\"unix:/s\"],"
        "\"labels\":{\"a\":\"b\",\"c\":\"d\"},"
        "\"inner\":{\"port\":80,\"host\":\"h\"},"
        "\"items\":[{\"name\":\"x\",\"weight\":1},{\"name\":\"y\",\"weight\":0}"
        "],"
        "\"level\":\"high\"}");
    buf_dispose(&b);
}

/* ---- conf_identity --------------------------------------------------- */

static void sink_buf(void *arg, const void *p, size_t n)
{
    assert_int_equal(buf_append(arg, p, n), 0);
}

/* identity_of() decodes text into a fresh t_conf and leaves its
 * conf_identity() bytes in out. */
static void identity_of(const char *text, struct buf *out)
{
    struct t_conf c;
    struct ydoc *docs = NULL;
    size_t ndocs = 0;
    struct buf errs;
    char *err = NULL;
    struct conf_sink sink = {sink_buf, out};

    buf_init(out, 1 << 20);
    buf_init(&errs, 65536);
    conf_defaults(&t_section, &c);
    if (yaml_load(text, strlen(text), "t.yaml", &docs, &ndocs, &err) < 0)
        fail_msg("yaml_load: %s", err ? err : "?");
    if (conf_decode(&t_section, docs[0].root, &c, "t.yaml", &errs) != 0)
        fail_msg("decode %s: %s", text, buf_cstr(&errs));
    conf_identity(&t_section, &c, &sink);
    conf_dispose(&t_section, &c);
    yaml_docs_free(docs, ndocs);
    buf_dispose(&errs);
}

static int same_bytes(const struct buf *a, const struct buf *b)
{
    return buf_len(a) == buf_len(b) &&
           memcmp(buf_ptr(a), buf_ptr(b), buf_len(a)) == 0;
}

#define BASE                                                                   \
    "name: n\ncount: 3\ndebug: false\ntimeout: 2s\nsize: 4KiB\n"               \
    "mode: fast\nlisten: 127.0.0.1:1\npeers: [1.2.3.4:5]\n"                    \
    "labels: {a: b}\ninner: {port: 81, host: h}\n"                             \
    "items: [{name: x, weight: 2}]\nlevel: high\n"

/* Equal configurations give equal bytes, and a default gives the bytes
 * of the same value written out, as conf_to_json does. */
static void test_identity_equal_and_defaults(void **state)
{
    struct buf a, b, d, e;

    (void)state;
    identity_of(BASE, &a);
    identity_of(BASE, &b);
    assert_true(buf_len(&a) > 0);
    assert_true(same_bytes(&a, &b));
    identity_of("items: [{name: x}]\n", &d);
    identity_of("name: anon\ncount: 5\ndebug: false\ntimeout: 1500ms\n"
                "size: 65536\nmode: safe\nlisten: 127.0.0.1:8080\n"
                "inner: {port: 80}\nitems: [{name: x, weight: 1}]\n"
                "level: low\n",
                &e);
    assert_true(same_bytes(&d, &e));
    assert_false(same_bytes(&a, &d));
    buf_dispose(&a);
    buf_dispose(&b);
    buf_dispose(&d);
    buf_dispose(&e);
}

/* Changing any one field of BASE changes the bytes, each differently:
 * each variant replaces one line of BASE. */
static void test_identity_every_field_counts(void **state)
{
    static const char *const variants[][2] = {
        {"name: n\n", "name: m\n"},
        {"count: 3\n", "count: 4\n"},
        {"debug: false\n", "debug: true\n"},
        {"timeout: 2s\n", "timeout: 3s\n"},
        {"size: 4KiB\n", "size: 8KiB\n"},
        {"mode: fast\n", "mode: slow\n"},
        {"listen: 127.0.0.1:1\n", "listen: 127.0.0.1:2\n"},
        {"peers: [1.2.3.4:5]\n", "peers: [1.2.3.4:6]\n"},
        {"peers: [1.2.3.4:5]\n", "peers: [1.2.3.4:5, 1.2.3.4:5]\n"},
        {"labels: {a: b}\n", "labels: {a: c}\n"},
        {"labels: {a: b}\n", "labels: {b: b}\n"},
        {"labels: {a: b}\n", "labels: {}\n"},
        {"inner: {port: 81, host: h}\n", "inner: {port: 82, host: h}\n"},
        {"inner: {port: 81, host: h}\n", "inner: {port: 81, host: i}\n"},
        {"inner: {port: 81, host: h}\n", "inner: {port: 81}\n"},
        {"items: [{name: x, weight: 2}]\n", "items: [{name: y, weight: 2}]\n"},
        {"items: [{name: x, weight: 2}]\n", "items: [{name: x, weight: 3}]\n"},
        {"items: [{name: x, weight: 2}]\n",
         "items: [{name: x, weight: 2}, {name: x, weight: 2}]\n"},
        {"level: high\n", "level: low\n"},
    };
    enum { N = sizeof(variants) / sizeof(*variants) };
    struct buf base, v[N];

    (void)state;
    identity_of(BASE, &base);
    for (size_t i = 0; i < N; i++) {
        char text[1024];
        const char *at = strstr(BASE, variants[i][0]);
        assert_non_null(at);
        snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - BASE), BASE,
                 variants[i][1], at + strlen(variants[i][0]));
        identity_of(text, &v[i]);
        if (same_bytes(&base, &v[i]))
            fail_msg("variant %zu: %s gives the base's bytes", i, text);
        for (size_t k = 0; k < i; k++)
            if (same_bytes(&v[k], &v[i]))
                fail_msg("variants %zu and %zu give equal bytes", k, i);
    }
    buf_dispose(&base);
    for (size_t i = 0; i < N; i++)
        buf_dispose(&v[i]);
}

/* Strings are length-framed: moving a character from a map key to its
 * value, or from one item to the next, changes the bytes. */
static void test_identity_framing(void **state)
{
    struct buf a, b, c, d;

    (void)state;
    identity_of("labels: {ab: c}\nitems: [{name: x}]\n", &a);
    identity_of("labels: {a: bc}\nitems: [{name: x}]\n", &b);
    assert_false(same_bytes(&a, &b));
    identity_of("items: [{name: ab}, {name: c}]\n", &c);
    identity_of("items: [{name: a}, {name: bc}]\n", &d);
    assert_false(same_bytes(&c, &d));
    buf_dispose(&a);
    buf_dispose(&b);
    buf_dispose(&c);
    buf_dispose(&d);
}

/* Durations are shown in the largest unit that divides them. */
static void test_to_json_durations(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *in;
        const char *out;
    } cases[] = {{"1ms", "\"1ms\""}, {"1500ms", "\"1500ms\""},
                 {"2s", "\"2s\""},   {"90s", "\"90s\""},
                 {"120s", "\"2m\""}, {"60m", "\"1h\""}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[64];
        struct buf b;
        const char *json, *p;

        snprintf(text, sizeof(text), "timeout: %s\n", cases[i].in);
        assert_string_equal(decode(f, text), "");
        buf_init(&b, 65536);
        conf_to_json(&t_section, &f->c, &b);
        json = buf_cstr(&b);
        p = strstr(json, "\"timeout\":");
        assert_non_null(p);
        p += strlen("\"timeout\":");
        assert_memory_equal(p, cases[i].out, strlen(cases[i].out));
        assert_int_equal(p[strlen(cases[i].out)], ',');
        buf_dispose(&b);
    }
}

static void test_reference(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 65536);
    conf_reference(&t_section, &b);
    assert_string_equal(buf_cstr(&b),
                        "name\tstring\tanon\ta string\n"
                        "count\tinteger\t5\tan integer\n"
                        "debug\tboolean\tfalse\ta boolean\n"
                        "timeout\tduration\t1.5s\ta duration\n"
                        "size\tsize\t64KiB\ta size\n"
                        "mode\tenum\tsafe\tan enum\n"
                        "listen\taddress\t127.0.0.1:8080\tan address\n"
                        "peers\tlist of addresses\t\taddresses\n"
                        "labels\tmap of strings\t\ta map\n"
                        "inner.port\tinteger\t80\ta port\n"
                        "inner.host\tstring\t\ta host\n"
                        "items\tlist\t\ta list\n"
                        "items[].name\tstring\t\titem name\n"
                        "items[].weight\tinteger\t1\titem weight\n"
                        "level\tvalue\tlow\tcustom\n");
    buf_dispose(&b);
}

/* Decoding over earlier values, failing half-way, and disposing: every
 * allocation is released (the ASan build checks for leaks). */
static void test_dispose_frees_all(void **state)
{
    struct fx *f = *state;
    const char *full = "name: a\n"
                       "peers: [1.1.1.1:1]\n"
                       "labels: {a: b}\n"
                       "inner: {host: h}\n"
                       "items: [{name: x}]\n";

    assert_string_equal(decode(f, full), "");
    /* A second decode replaces every owned value. */
    assert_string_equal(decode(f, full), "");
    assert_string_equal(f->c.name, "a");
    assert_int_equal(f->c.items.n, 1);
    /* Errors half-way through collections leave dst disposable. */
    decode(f, "labels: {a: b, c: [d], e: f}\n"
              "items: [{name: x}, 5, {name: y}]\n"
              "peers: [1.1.1.1:1, bad, 1.1.1.1:2]\n");
    assert_int_equal(f->nerr, 3);
    conf_dispose(&t_section, &f->c);
    assert_null(f->c.name);
    assert_null(f->c.inner.host);
    assert_int_equal(f->c.items.n, 0);
    assert_null(f->c.items.v);
    assert_int_equal(f->c.labels.n, 0);
    assert_int_equal(f->c.peers.n, 0);
    /* Disposing twice is harmless. */
    conf_dispose(&t_section, &f->c);
}

/* ---- the key types added for Istio resources: DOUBLE, MAP, INT_MAP,
 * ONEOF, IGNORE, validated strings and marked sections ---------------- */

struct t2_match {
    struct conf_mark mark;
    char *exact;
    char *prefix;
};

struct t2_conf {
    double pct;
    struct conf_map matches; /* struct t2_match */
    struct conf_intmap ports;
    struct conf_mark ignored;
    char *label;
    struct t2_match one;
};

static int t2_no_spaces(const char *s, size_t n, void *dst, const char **why)
{
    (void)dst;
    if (memchr(s, ' ', n) != NULL) {
        *why = "no spaces";
        return -1;
    }
    return 0;
}

static const struct conf_key t2_match_keys[] = {
    {.name = "exact",
     .type = CONF_STR,
     .off = offsetof(struct t2_match, exact),
     .help = "exact"},
    {.name = "prefix",
     .type = CONF_STR,
     .off = offsetof(struct t2_match, prefix),
     .help = "prefix"},
    {.name = "Match",
     .type = CONF_ONEOF,
     .min = 1,
     .enums = (const char *const[]){"exact", "prefix", NULL}},
    {.name = NULL},
};
static const struct conf_section t2_match_section = {
    t2_match_keys, sizeof(struct t2_match), offsetof(struct t2_match, mark)};

static const struct conf_key t2_keys[] = {
    {.name = "pct",
     .type = CONF_DOUBLE,
     .off = offsetof(struct t2_conf, pct),
     .min = 0,
     .max = 100,
     .def = "12.5",
     .help = "a number"},
    {.name = "matches",
     .type = CONF_MAP,
     .off = offsetof(struct t2_conf, matches),
     .help = "a map of sections",
     .sub = &t2_match_section},
    {.name = "ports",
     .type = CONF_INT_MAP,
     .off = offsetof(struct t2_conf, ports),
     .min = 1,
     .max = 65535,
     .help = "a map of integers"},
    {.name = "ignored",
     .type = CONF_IGNORE,
     .off = offsetof(struct t2_conf, ignored),
     .help = "anything"},
    {.name = "label",
     .type = CONF_STR,
     .off = offsetof(struct t2_conf, label),
     .help = "validated",
     .custom = t2_no_spaces},
    {.name = "one",
     .type = CONF_SECTION,
     .off = offsetof(struct t2_conf, one),
     .help = "marked section",
     .sub = &t2_match_section},
    {.name = NULL},
};
static const struct conf_section t2_section = {t2_keys, 0, SIZE_MAX};

/* t2_decode() decodes text into c (defaults first); returns the errors. */
static int t2_decode(const char *text, struct t2_conf *c, struct buf *errs)
{
    struct ydoc *docs = NULL;
    size_t ndocs = 0;
    char *err = NULL;
    int n;

    conf_defaults(&t2_section, c);
    buf_consume(errs, buf_len(errs));
    if (yaml_load(text, strlen(text), "t.yaml", &docs, &ndocs, &err) < 0)
        fail_msg("yaml_load: %s", err ? err : "?");
    n = conf_decode(&t2_section, docs[0].root, c, "t.yaml", errs);
    yaml_docs_free(docs, ndocs);
    return n;
}

static void test_new_types_decode(void **state)
{
    struct t2_conf c;
    struct buf errs, js;

    (void)state;
    buf_init(&errs, 65536);
    buf_init(&js, 65536);
    conf_defaults(&t2_section, &c);
    assert_true(c.pct == 12.5);
    assert_int_equal(c.one.mark.line, 0);
    conf_dispose(&t2_section, &c);
    assert_int_equal(t2_decode("pct: 99.5\n"
                               "matches:\n  a: {exact: x}\n  b: {prefix: y}\n"
                               "ports: {http: 80, grpc: 9090}\n"
                               "ignored: [any, {shape: 1}]\n"
                               "label: fine\n"
                               "one:\n  prefix: /p\n",
                               &c, &errs),
                     0);
    assert_true(c.pct == 99.5);
    assert_int_equal(c.matches.n, 2);
    assert_string_equal(c.matches.keys[1], "b");
    assert_string_equal(((struct t2_match *)c.matches.v)[1].prefix, "y");
    assert_int_equal(((struct t2_match *)c.matches.v)[1].mark.line, 4);
    assert_int_equal(c.ports.n, 2);
    assert_string_equal(c.ports.v[1].key, "grpc");
    assert_int_equal(c.ports.v[1].val, 9090);
    assert_int_equal(c.ignored.line, 6);
    assert_string_equal(c.label, "fine");
    /* A section decoded on its own records where it was written. */
    assert_int_equal(c.one.mark.line, 9);
    assert_int_equal(c.one.mark.col, 3);
    conf_to_json(&t2_section, &c, &js);
    assert_string_equal(buf_cstr(&js),
                        "{\"pct\":99.5,\"matches\":{\"a\":{\"exact\":\"x\","
                        "\"prefix\":\"\"},\"b\":{\"exact\":\"\",\"prefix\":"
                        "\"y\"}},\"ports\":{\"http\":80,\"grpc\":9090},"
                        "\"label\":\"fine\",\"one\":{\"exact\":\"\","
                        "\"prefix\":\"/p\"}}");
    conf_dispose(&t2_section, &c);
    buf_dispose(&js);
    buf_dispose(&errs);
}

static void test_new_types_errors(void **state)
{
    struct t2_conf c;
    struct buf errs;

    (void)state;
    buf_init(&errs, 65536);
    assert_int_equal(t2_decode("pct: 100.5\n", &c, &errs), 1);
    assert_string_equal(buf_cstr(&errs),
                        "t.yaml:1:6: pct: value '100.5' out of range 0-100\n");
    conf_dispose(&t2_section, &c);
    assert_int_equal(t2_decode("pct: nan\n", &c, &errs), 1);
    assert_string_equal(buf_cstr(&errs), "t.yaml:1:6: pct: bad number 'nan'\n");
    conf_dispose(&t2_section, &c);
    assert_int_equal(
        t2_decode("matches: {a: {exact: x, prefix: y}}\n", &c, &errs), 1);
    assert_string_equal(buf_cstr(&errs),
                        "t.yaml:1:14: matches.a: Match takes only one of "
                        "exact, prefix; both 'exact' and 'prefix' are set\n");
    conf_dispose(&t2_section, &c);
    assert_int_equal(t2_decode("matches: {a: {}}\n", &c, &errs), 1);
    assert_string_equal(buf_cstr(&errs),
                        "t.yaml:1:14: matches.a: Match needs one of: exact, "
                        "prefix\n");
    conf_dispose(&t2_section, &c);
    assert_int_equal(t2_decode("matches: [a]\n", &c, &errs), 1);
    assert_string_equal(buf_cstr(&errs),
                        "t.yaml:1:10: matches: expected a mapping, got a "
                        "list\n");
    conf_dispose(&t2_section, &c);
    assert_int_equal(t2_decode("ports: {http: 0}\n", &c, &errs), 1);
    assert_string_equal(buf_cstr(&errs),
                        "t.yaml:1:15: ports.http: value '0' out of range "
                        "1-65535\n");
    conf_dispose(&t2_section, &c);
    assert_int_equal(t2_decode("label: a b\n", &c, &errs), 1);
    assert_string_equal(buf_cstr(&errs),
                        "t.yaml:1:8: label: bad value 'a b': no spaces\n");
    conf_dispose(&t2_section, &c);
    /* A oneof rule is not a key. */
    assert_int_equal(t2_decode("one: {Match: 1}\n", &c, &errs), 2);
    conf_dispose(&t2_section, &c);
    buf_dispose(&errs);
}

static void test_new_types_reference(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 65536);
    conf_reference(&t2_section, &b);
    assert_non_null(strstr(buf_cstr(&b), "matches.*.exact\tstring"));
    assert_null(strstr(buf_cstr(&b), "Match"));
    buf_dispose(&b);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_defaults),
        cmocka_unit_test(test_defaults_zero_unset),
        T(test_decode_all_types),
        T(test_booleans),
        T(test_null_sections_and_lists),
        T(test_err_unknown_key),
        T(test_err_wrong_type),
        T(test_err_address_list_hint),
        T(test_err_bad_values),
        T(test_err_out_of_range),
        T(test_err_bad_enum),
        T(test_err_list_counts),
        T(test_err_null_list_count_has_position),
        T(test_err_top_level),
        T(test_several_errors),
        cmocka_unit_test(test_conf_error_format),
        T(test_to_json_defaults),
        T(test_to_json_values),
        T(test_to_json_durations),
        cmocka_unit_test(test_reference),
        T(test_dispose_frees_all),
        cmocka_unit_test(test_new_types_decode),
        cmocka_unit_test(test_new_types_errors),
        cmocka_unit_test(test_new_types_reference),
        cmocka_unit_test(test_identity_equal_and_defaults),
        cmocka_unit_test(test_identity_every_field_counts),
        cmocka_unit_test(test_identity_framing),
    };
#undef T

    return cmocka_run_group_tests(tests, NULL, NULL);
}
