/*
 * Unit tests for src/config/bootstrap.c: the shipped strait.yaml, defaults,
 * and every error a bootstrap file can hold, each naming file:line:col and
 * the key.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/bootstrap.h"
#include "config/resource-t.h"
#include "core/addr.h"
#include "core/buf.h"

#define SHIPPED SRCDIR "/etc/strait/strait.yaml"

static struct bootstrap *parse_ok(const char *text)
{
    char *err = NULL;
    struct bootstrap *bs = bootstrap_parse(text, strlen(text), "b.yaml", &err);

    if (bs == NULL)
        fail_msg("bootstrap_parse: %s", err ? err : "?");
    assert_null(err);
    return bs;
}

/* parse_err() expects text to be refused with exactly want (the lines of
 * every error, without a trailing newline). */
static void parse_err(const char *text, const char *want)
{
    char *err = NULL;
    struct bootstrap *bs = bootstrap_parse(text, strlen(text), "b.yaml", &err);

    if (bs != NULL) {
        bootstrap_free(bs);
        fail_msg("accepted: %s", text);
    }
    assert_non_null(err);
    if (strcmp(err, want) != 0) {
        fail_msg("for:\n%s\ngot:  \"%s\"\nwant: \"%s\"", text, err, want);
    }
    free(err);
}

static void assert_addr(const struct addr *a, const char *want)
{
    char s[ADDR_STRLEN];

    assert_string_equal(addr_format(a, s, sizeof(s)), want);
}

static void assert_hostname(const char *name)
{
    char host[256];

    assert_int_equal(gethostname(host, sizeof(host)), 0);
    host[sizeof(host) - 1] = '\0';
    assert_non_null(name);
    assert_string_equal(name, host);
}

static void test_shipped_file_loads(void **state)
{
    char *err = NULL;
    struct bootstrap *bs = bootstrap_load(SHIPPED, &err);
    const struct bootstrap_listener *l;

    (void)state;
    if (bs == NULL)
        fail_msg("%s: %s", SHIPPED, err ? err : "?");
    assert_null(err);
    assert_hostname(bs->node.name);
    assert_string_equal(bs->node.ns, "istio-system");
    assert_string_equal(bs->node.service_account, "strait");
    assert_int_equal(bs->node.labels.n, 1);
    assert_string_equal(bs->node.labels.v[0].key, "istio");
    assert_string_equal(bs->node.labels.v[0].val, "ingressgateway");
    assert_string_equal(bs->node.network, "");
    assert_string_equal(bs->node.locality, "");
    assert_string_equal(bs->trust_domain, "cluster.local");
    assert_int_equal(bs->workers, 0);
    assert_addr(&bs->admin.address, "127.0.0.1:15000");
    assert_int_equal(bs->log.level, 1);
    assert_int_equal(bs->log.format, BOOTSTRAP_LOG_TEXT);
    assert_int_equal(bs->log.access_log, 1);
    assert_int_equal(bs->drain_timeout_ms, 30000);
    assert_int_equal(bs->listeners.n, 2);
    assert_int_equal(bs->clusters.n, 1);
    assert_int_equal(bootstrap_listener_at(bs, 1)->protocol, BOOTSTRAP_HTTP);
    l = bootstrap_listener_at(bs, 0);
    assert_string_equal(l->name, "echo");
    assert_int_equal(l->protocol, BOOTSTRAP_TCP);
    assert_addr(&l->address, "127.0.0.1:10000");
    assert_int_equal(l->upstreams.n, 1);
    assert_addr(&l->upstreams.v[0], "127.0.0.1:10001");
    assert_int_equal(l->connect_timeout_ms, 5000);
    assert_int_equal(l->connect_attempts, 3);
    assert_int_equal(l->idle_timeout_ms, 3600000);
    assert_int_equal(l->buffer_size, 65536);
    assert_int_equal(l->backlog, 1024);
    bootstrap_free(bs);
}

static void check_defaults(const struct bootstrap *bs)
{
    assert_hostname(bs->node.name);
    assert_string_equal(bs->node.ns, "istio-system");
    assert_string_equal(bs->node.service_account, "strait");
    assert_int_equal(bs->node.labels.n, 0);
    assert_string_equal(bs->node.network, "");
    assert_string_equal(bs->node.locality, "");
    assert_string_equal(bs->trust_domain, "cluster.local");
    assert_int_equal(bs->workers, 0); /* auto */
    assert_true(bootstrap_workers(bs) >= 1);
    assert_addr(&bs->admin.address, "127.0.0.1:15000");
    assert_int_equal(bs->log.level, 1); /* info */
    assert_int_equal(bs->log.format, BOOTSTRAP_LOG_TEXT);
    assert_int_equal(bs->log.access_log, 1);
    assert_int_equal(bs->drain_timeout_ms, 30000);
    assert_int_equal(bs->listeners.n, 0);
}

static void test_empty_file_defaults(void **state)
{
    static const char *const empties[] = {
        "", "\n", "# nothing but a comment\n", "---\n", "~\n", "---\n...\n",
    };
    char *err = NULL;
    struct bootstrap *bs;

    (void)state;
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
        bs = parse_ok(empties[i]);
        check_defaults(bs);
        bootstrap_free(bs);
    }
    /* An empty file on disk loads the same way. */
    {
        char path[] = "/tmp/strait-empty-XXXXXX";
        int fd = mkstemp(path);

        assert_true(fd >= 0);
        close(fd);
        bs = bootstrap_load(path, &err);
        unlink(path);
        if (bs == NULL)
            fail_msg("%s: %s", path, err ? err : "?");
        check_defaults(bs);
        bootstrap_free(bs);
    }
    /* Only regular files are read; the message names the path. */
    assert_null(bootstrap_load("/dev/null", &err));
    assert_string_equal(
        err, "/dev/null: not a regular file of at most 4194304 bytes");
    free(err);
}

static void test_empty_sections_keep_defaults(void **state)
{
    struct bootstrap *bs = parse_ok("node:\nadmin:\nlog:\nlisteners:\n");

    (void)state;
    check_defaults(bs);
    bootstrap_free(bs);
}

static void test_node_name(void **state)
{
    struct bootstrap *bs = parse_ok("node:\n  name: gw-1\n");

    (void)state;
    assert_string_equal(bs->node.name, "gw-1");
    bootstrap_free(bs);
    bs = parse_ok("node:\n  namespace: edge\n");
    assert_hostname(bs->node.name);
    assert_string_equal(bs->node.ns, "edge");
    bootstrap_free(bs);
}

static void test_values(void **state)
{
    struct bootstrap *bs =
        parse_ok("workers: 3\n"
                 "trustDomain: example.org\n"
                 "admin: {address: '[::1]:15001'}\n"
                 "log: {level: debug, format: json, "
                 "accessLog: false}\n"
                 "drainTimeout: 0s\n"
                 "node:\n"
                 "  labels: {app: gw, zone: a}\n"
                 "listeners:\n"
                 "  - name: web_1.x\n"
                 "    address: unix:/run/web.sock\n"
                 "    upstreams: ['[::1]:8080', 10.0.0.2:80]\n"
                 "    connectTimeout: 250ms\n"
                 "    connectAttempts: 16\n"
                 "    idleTimeout: 168h\n"
                 "    bufferSize: 16MiB\n"
                 "    backlog: 1\n");
    const struct bootstrap_listener *l;

    (void)state;
    assert_int_equal(bs->workers, 3);
    assert_int_equal(bootstrap_workers(bs), 3);
    assert_string_equal(bs->trust_domain, "example.org");
    assert_addr(&bs->admin.address, "[::1]:15001");
    assert_int_equal(bs->log.level, 0);
    assert_int_equal(bs->log.format, BOOTSTRAP_LOG_JSON);
    assert_int_equal(bs->log.access_log, 0);
    assert_int_equal(bs->drain_timeout_ms, 0);
    assert_int_equal(bs->node.labels.n, 2);
    l = bootstrap_listener_at(bs, 0);
    assert_string_equal(l->name, "web_1.x");
    assert_addr(&l->address, "unix:/run/web.sock");
    assert_int_equal(l->upstreams.n, 2);
    assert_addr(&l->upstreams.v[0], "[::1]:8080");
    assert_addr(&l->upstreams.v[1], "10.0.0.2:80");
    assert_int_equal(l->connect_timeout_ms, 250);
    assert_int_equal(l->connect_attempts, 16);
    assert_int_equal(l->idle_timeout_ms, INT64_C(168) * 3600 * 1000);
    assert_int_equal(l->buffer_size, 16 * 1024 * 1024);
    assert_int_equal(l->backlog, 1);
    assert_int_equal(l->mark.line, 9);
    assert_int_equal(l->mark.col, 5);
    bootstrap_free(bs);
}

static void test_json_input(void **state)
{
    struct bootstrap *bs =
        parse_ok("{\"workers\": 2, \"listeners\": [{\"name\": \"j\", "
                 "\"address\": \"127.0.0.1:7000\", \"upstreams\": "
                 "[\"127.0.0.1:7001\"]}]}");

    (void)state;
    assert_int_equal(bs->workers, 2);
    assert_int_equal(bs->listeners.n, 1);
    assert_string_equal(bootstrap_listener_at(bs, 0)->name, "j");
    bootstrap_free(bs);
}

static void test_err_unknown_key(void **state)
{
    (void)state;
    parse_err("workers: 2\nbogus: 1\n", "b.yaml:2:1: bogus: unknown key");
    parse_err("node:\n  nmae: x\n", "b.yaml:2:3: node.nmae: unknown key");
    parse_err("admin:\n  port: 1\n", "b.yaml:2:3: admin.port: unknown key");
    parse_err("listeners:\n"
              "  - name: a\n"
              "    adress: 127.0.0.1:1\n"
              "    upstreams: [127.0.0.1:2]\n",
              "b.yaml:3:5: listeners[0].adress: unknown key");
}

static void test_err_wrong_type(void **state)
{
    (void)state;
    parse_err("trustDomain: {a: 1}\n",
              "b.yaml:1:14: trustDomain: expected a string, got a mapping");
    parse_err("workers: [1]\n",
              "b.yaml:1:10: workers: expected a value, got a list");
    parse_err("log:\n  accessLog: 1\n",
              "b.yaml:2:14: log.accessLog: expected true or false, got '1'");
    parse_err("log:\n  accessLogEncoding: TEXT\n  accessLogFormat: 'a %B%'\n",
              "b.yaml:2:3: log.accessLogFormat: column 3: unknown operator "
              "%B%");
    parse_err("log:\n  accessLogFormat: '%DURATION%'\n",
              "b.yaml:2:3: log.accessLogFormat: a format needs "
              "accessLogEncoding TEXT or JSON (STRAIT writes strait's own "
              "line)");
    parse_err("log:\n  accessLogBuffer: 16383\n",
              "b.yaml:2:20: log.accessLogBuffer: value '16383' out of range "
              "16384-1073741824");
    parse_err("node: [a]\n",
              "b.yaml:1:7: node: expected a mapping, got a list");
    parse_err("listeners: {a: 1}\n",
              "b.yaml:1:12: listeners: expected a list, got a mapping");
    parse_err("listeners: [x]\n",
              "b.yaml:1:13: listeners[0]: expected a mapping, got a scalar");
    parse_err("node:\n  labels: [a]\n",
              "b.yaml:2:11: node.labels: expected a mapping of strings, got a "
              "list");
    parse_err("- a\n",
              "b.yaml:1:1: (top level): expected a mapping, got a list");
    parse_err("log:\n  level: loud\n",
              "b.yaml:2:10: log.level: unknown value 'loud' (one of: debug, "
              "info, warn, error)");
    parse_err("log:\n  format: xml\n",
              "b.yaml:2:11: log.format: unknown value 'xml' (one of: text, "
              "json)");
}

static void test_err_out_of_range(void **state)
{
    (void)state;
    parse_err("drainTimeout: 2h\n",
              "b.yaml:1:15: drainTimeout: value '2h' out of range "
              "0ms-3600000ms");
    parse_err("workers: 0\n",
              "b.yaml:1:10: workers: bad value '0': out of range 1-256");
    parse_err("workers: 257\n",
              "b.yaml:1:10: workers: bad value '257': out of range 1-256");
    parse_err("workers: many\n",
              "b.yaml:1:10: workers: bad value 'many': expected 'auto' or a "
              "number of worker threads");
    parse_err("listeners:\n"
              "  - name: a\n"
              "    address: 127.0.0.1:1\n"
              "    upstreams: [127.0.0.1:2]\n"
              "    connectAttempts: 17\n"
              "    bufferSize: 512\n"
              "    backlog: 70000\n"
              "    connectTimeout: 0ms\n",
              "b.yaml:5:22: listeners[0].connectAttempts: value '17' out of "
              "range 1-16\n"
              "b.yaml:6:17: listeners[0].bufferSize: value '512' out of range "
              "1024-16777216\n"
              "b.yaml:7:14: listeners[0].backlog: value '70000' out of range "
              "1-65535\n"
              "b.yaml:8:21: listeners[0].connectTimeout: value '0ms' out of "
              "range 1ms-3600000ms");
}

static void test_err_bad_address(void **state)
{
    (void)state;
    parse_err("admin:\n  address: localhost:15000\n",
              "b.yaml:2:12: admin.address: bad address 'localhost:15000': bad "
              "IPv4 address (host names are not resolved here)");
    parse_err("listeners:\n"
              "  - name: a\n"
              "    address: 127.0.0.1:0\n"
              "    upstreams: [127.0.0.1:2, '::1:80']\n",
              "b.yaml:3:14: listeners[0].address: bad address '127.0.0.1:0': "
              "port out of range 1-65535\n"
              "b.yaml:4:30: listeners[0].upstreams[1]: bad address '::1:80': "
              "IPv6 addresses need brackets: [IPV6]:PORT");
}

static void test_err_missing_listener_keys(void **state)
{
    (void)state;
    parse_err("listeners:\n"
              "  - address: 127.0.0.1:1\n"
              "    upstreams: [127.0.0.1:2]\n",
              "b.yaml:2:5: listeners[0]: missing key 'name'");
    parse_err("listeners:\n"
              "  - name: a\n"
              "    upstreams: [127.0.0.1:2]\n",
              "b.yaml:2:5: listeners[0]: missing key 'address'");
    parse_err("listeners:\n"
              "  - name: a\n"
              "    address: 127.0.0.1:1\n",
              "b.yaml:2:5: listeners[0]: missing key 'upstreams' (at least one "
              "address)");
    parse_err("listeners:\n"
              "  - name: a\n"
              "    address: 127.0.0.1:1\n"
              "    upstreams: []\n",
              "b.yaml:2:5: listeners[0]: missing key 'upstreams' (at least one "
              "address)");
    /* All three at once, on an empty element. */
    parse_err("listeners:\n  - {}\n",
              "b.yaml:2:5: listeners[0]: missing key 'name'\n"
              "b.yaml:2:5: listeners[0]: missing key 'address'\n"
              "b.yaml:2:5: listeners[0]: missing key 'upstreams' (at least one "
              "address)");
}

static void test_err_bad_name(void **state)
{
    (void)state;
    parse_err("listeners:\n"
              "  - name: 'a b'\n"
              "    address: 127.0.0.1:1\n"
              "    upstreams: [127.0.0.1:2]\n",
              "b.yaml:2:5: listeners[0]: name 'a b' must be 1-63 characters of "
              "A-Z a-z 0-9 - _ .");
    parse_err("listeners:\n"
              "  - name: ''\n"
              "    address: 127.0.0.1:1\n"
              "    upstreams: [127.0.0.1:2]\n",
              "b.yaml:2:5: listeners[0]: name '' must be 1-63 characters of "
              "A-Z a-z 0-9 - _ .");
}

static void test_err_duplicates(void **state)
{
    (void)state;
    parse_err("listeners:\n"
              "  - name: a\n"
              "    address: 127.0.0.1:1\n"
              "    upstreams: [127.0.0.1:9]\n"
              "  - name: a\n"
              "    address: 127.0.0.1:2\n"
              "    upstreams: [127.0.0.1:9]\n",
              "b.yaml:5:5: listeners[1]: duplicate listener name 'a' (also "
              "listeners[0])");
    parse_err(
        "listeners:\n"
        "  - name: a\n"
        "    address: 127.0.0.1:1\n"
        "    upstreams: [127.0.0.1:9]\n"
        "  - name: b\n"
        "    address: 127.0.0.1:1\n"
        "    upstreams: [127.0.0.1:9]\n",
        "b.yaml:5:5: listeners[1]: address 127.0.0.1:1 is already used by "
        "listeners[0]");
    parse_err("listeners:\n"
              "  - {name: a, address: 'unix:/s', upstreams: [127.0.0.1:9]}\n"
              "  - {name: b, address: 127.0.0.1:1, upstreams: [127.0.0.1:9]}\n"
              "  - {name: a, address: 'unix:/s', upstreams: [127.0.0.1:9]}\n",
              "b.yaml:4:5: listeners[2]: duplicate listener name 'a' (also "
              "listeners[0])\n"
              "b.yaml:4:5: listeners[2]: address unix:/s is already used by "
              "listeners[0]");
}

static void test_err_listener_on_admin_address(void **state)
{
    (void)state;
    parse_err("listeners:\n"
              "  - name: a\n"
              "    address: 127.0.0.1:15000\n"
              "    upstreams: [127.0.0.1:9]\n",
              "b.yaml:2:5: listeners[0]: address 127.0.0.1:15000 is the admin "
              "API's address");
    parse_err("admin: {address: 127.0.0.1:9901}\n"
              "listeners:\n"
              "  - name: a\n"
              "    address: 127.0.0.1:9901\n"
              "    upstreams: [127.0.0.1:9]\n",
              "b.yaml:3:5: listeners[0]: address 127.0.0.1:9901 is the admin "
              "API's address");
}

static void test_err_admin_unix(void **state)
{
    char *err = NULL;
    const char *text = "admin:\n  address: unix:/run/admin.sock\n";

    (void)state;
    assert_null(bootstrap_parse(text, strlen(text), "b.yaml", &err));
    assert_non_null(err);
    assert_memory_equal(err, "b.yaml:", 7);
    assert_non_null(
        strstr(err, "admin.address: the admin API listens on TCP only"));
    free(err);
}

static void test_err_two_documents(void **state)
{
    (void)state;
    parse_err("workers: 1\n---\nworkers: 2\n",
              "b.yaml:2:1: (document): the bootstrap file must hold one YAML "
              "document");
    parse_err("---\n---\n",
              "b.yaml:2:1: (document): the bootstrap file must hold one YAML "
              "document");
}

static void test_err_yaml(void **state)
{
    (void)state;
    parse_err("a: *x\n", "b.yaml:1:4: YAML aliases (*x) are not supported");
    parse_err("workers: 1\nworkers: 2\n",
              "b.yaml:2:1: duplicate key 'workers'");
}

static void test_err_load_missing_file(void **state)
{
    char *err = NULL;

    (void)state;
    assert_null(bootstrap_load(SRCDIR "/no/such/strait.yaml", &err));
    assert_non_null(err);
    assert_string_equal(err, SRCDIR
                        "/no/such/strait.yaml: cannot open: No such file or "
                        "directory");
    free(err);
}

/* Errors of different keys are all reported, in file order. */
static void test_several_errors(void **state)
{
    (void)state;
    parse_err("workers: x\n"
              "log:\n"
              "  level: loud\n"
              "  colour: red\n"
              "drainTimeout: 5\n",
              "b.yaml:1:10: workers: bad value 'x': expected 'auto' or a "
              "number of worker threads\n"
              "b.yaml:3:10: log.level: unknown value 'loud' (one of: debug, "
              "info, warn, error)\n"
              "b.yaml:4:3: log.colour: unknown key\n"
              "b.yaml:5:15: drainTimeout: bad duration '5': duration needs a "
              "unit (ms, s, m or h)");
}

/* Every key of the table is documented in the shipped file: `strait
 * reference` and the example must not drift apart. */
static int file_documents_key(const char *text, const char *key)
{
    size_t klen = strlen(key);
    const char *line = text;

    while (*line != '\0') {
        const char *p = line;
        const char *nl = strchr(line, '\n');

        /* Keys may be set ("key:"), commented out ("# key:") or the first
         * key of a list element ("- key:"). */
        while (*p == ' ')
            p++;
        if (*p == '#') {
            p++;
            while (*p == ' ')
                p++;
        }
        if (p[0] == '-' && p[1] == ' ')
            p += 2;
        if (strncmp(p, key, klen) == 0 && p[klen] == ':')
            return 1;
        if (nl == NULL)
            break;
        line = nl + 1;
    }
    return 0;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *s;
    long n;

    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static void test_shipped_file_documents_every_key(void **state)
{
    struct buf ref, missing;
    char report[4096];
    char *text = read_text(SHIPPED);
    char *lines, *line, *save = NULL;
    int nkeys = 0;

    (void)state;
    buf_init(&ref, 1 << 20);
    buf_init(&missing, 1 << 20);
    conf_reference(&bootstrap_section, &ref);
    lines = strdup(buf_cstr(&ref));
    assert_non_null(lines);
    for (line = strtok_r(lines, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char *tab = strchr(line, '\t');
        const char *key;

        assert_non_null(tab);
        *tab = '\0';
        key = strrchr(line, '.');
        key = key ? key + 1 : line;
        if (!file_documents_key(text, key))
            buf_printf(&missing, " %s", line);
        nkeys++;
    }
    /* Free before failing, so a failure is not also reported as leaks. */
    snprintf(report, sizeof(report), "%s", buf_cstr(&missing));
    buf_dispose(&missing);
    free(lines);
    free(text);
    buf_dispose(&ref);
    if (report[0] != '\0')
        fail_msg("%s does not document:%s", SHIPPED, report);
    /* The table has more than a handful of keys: the walk really ran. */
    assert_true(nkeys >= 20);
}

static void test_limits_and_overload(void **state)
{
    struct bootstrap *bs;

    (void)state;
    bs = parse_ok("");
    assert_int_equal(bs->limits.max_connections, 0);
    assert_int_equal(bs->limits.action, BOOTSTRAP_LIMIT_PAUSE);
    assert_int_equal(bs->overload.memory_limit, 0);
    assert_int_equal(bs->overload.check_interval_ms, 250);
    assert_int_equal(bs->overload.stop_accepting_connections, 90);
    assert_int_equal(bs->overload.disable_keepalive, 95);
    assert_int_equal(bs->overload.stop_accepting_requests, 98);
    assert_int_equal(bs->overload.hysteresis, 5);
    assert_int_equal(bootstrap_listener_limit(bs, NULL, 80), 0);
    bootstrap_free(bs);
    /* A listener's own limit, else its port's (Gateway listeners), else
     * the per-listener default. */
    bs =
        parse_ok("limits:\n  maxConnections: 100\n"
                 "  maxConnectionsPerListener: 10\n  action: close\n"
                 "  ports: [{port: 443, maxConnections: 5}]\n"
                 "overload: {memoryLimit: 1GiB}\n"
                 "listeners:\n"
                 "  - {name: a, address: 127.0.0.1:1, upstreams: [127.0.0.1:2],"
                 " maxConnections: 3}\n"
                 "  - {name: b, address: 127.0.0.1:3, upstreams: "
                 "[127.0.0.1:2]}\n");
    assert_int_equal(bs->limits.action, BOOTSTRAP_LIMIT_CLOSE);
    assert_int_equal(bs->overload.memory_limit, INT64_C(1) << 30);
    assert_int_equal(
        bootstrap_listener_limit(bs, bootstrap_listener_at(bs, 0), 1), 3);
    assert_int_equal(
        bootstrap_listener_limit(bs, bootstrap_listener_at(bs, 1), 3), 10);
    assert_int_equal(bootstrap_listener_limit(bs, NULL, 443), 5);
    assert_int_equal(bootstrap_listener_limit(bs, NULL, 8443), 10);
    bootstrap_free(bs);
    parse_err("overload: {disableKeepalive: 99}\n",
              "b.yaml:0:0: overload: thresholds must not decrease: "
              "stopAcceptingConnections (90) <= disableKeepalive (99) <= "
              "stopAcceptingRequests (98)");
    parse_err("limits: {ports: [{maxConnections: 1}]}\n",
              "b.yaml:1:18: limits.ports[0]: missing key 'port'");
}

/* hbone: each limit's default, its bounds, and one past each. */
static void test_hbone_limits(void **state)
{
    struct bootstrap *bs;

    (void)state;
    bs = parse_ok("");
    assert_int_equal(bs->hbone.max_tunnels, 100);
    assert_int_equal(bs->hbone.tunnel_buffer, 256 * 1024);
    assert_int_equal(bs->hbone.connect_timeout_ms, 10000);
    assert_int_equal(bs->hbone.idle_timeout_ms, 3600 * 1000);
    bootstrap_free(bs);
    bs = parse_ok("hbone: {maxTunnelsPerConnection: 10000, tunnelBuffer: "
                  "16KiB, connectTimeout: 1ms, idleTimeout: 1ms}\n");
    assert_int_equal(bs->hbone.max_tunnels, 10000);
    assert_int_equal(bs->hbone.tunnel_buffer, 16384);
    bootstrap_free(bs);
    parse_err("hbone: {maxTunnelsPerConnection: 10001}\n",
              "b.yaml:1:34: hbone.maxTunnelsPerConnection: value '10001' out "
              "of range 1-10000");
    parse_err("hbone: {maxTunnelsPerConnection: 0}\n",
              "b.yaml:1:34: hbone.maxTunnelsPerConnection: value '0' out of "
              "range 1-10000");
    parse_err("hbone: {tunnelBuffer: 16383}\n",
              "b.yaml:1:23: hbone.tunnelBuffer: value '16383' out of range "
              "16384-16777216");
    parse_err("hbone: {tunnelBuffer: 16777217}\n",
              "b.yaml:1:23: hbone.tunnelBuffer: value '16777217' out of range "
              "16384-16777216");
    parse_err("hbone: {connectTimeout: 0ms}\n",
              "b.yaml:1:25: hbone.connectTimeout: value '0ms' out of range "
              "1ms-3600000ms");
    parse_err("hbone: {idleTimeout: 0ms}\n",
              "b.yaml:1:22: hbone.idleTimeout: value '0ms' out of range "
              "1ms-604800000ms");
    parse_err("hbone: {maxStreams: 1}\n",
              "b.yaml:1:9: hbone.maxStreams: unknown key");
}

static void test_ca_section(void **state)
{
    struct bootstrap *bs;

    (void)state;
    bs = parse_ok("");
    assert_false(bs->ca.enabled);
    assert_string_equal(bs->ca.dir, "/var/lib/strait/ca");
    assert_int_equal(bs->ca.key_type, BOOTSTRAP_KEY_ECDSA);
    assert_int_equal(bs->ca.cert_ttl_ms, 24 * 3600 * 1000);
    assert_int_equal(bs->ca.max_cert_ttl_ms, INT64_C(2160) * 3600 * 1000);
    assert_addr(&bs->ca.address, "0.0.0.0:15012");
    assert_string_equal(bs->ca.join.address, "");
    bootstrap_free(bs);
    bs = parse_ok("ca:\n  enabled: true\n  keyType: RSA\n  certTTL: 2s\n"
                  "  cacerts: /etc/cacerts\n  address: 127.0.0.1:1\n");
    assert_true(bs->ca.enabled);
    assert_int_equal(bs->ca.key_type, BOOTSTRAP_KEY_RSA);
    assert_int_equal(bs->ca.cert_ttl_ms, 2000);
    assert_string_equal(bs->ca.cacerts, "/etc/cacerts");
    bootstrap_free(bs);
    parse_err("ca: {enabled: true, join: {address: https://x:1}}\n",
              "b.yaml:0:0: ca.join.address: a node runs the CA (ca.enabled) "
              "or joins one, not both");
    parse_err("ca: {enabled: true, address: 127.0.0.1:15000}\n",
              "b.yaml:0:0: ca.address: address 127.0.0.1:15000 is the admin "
              "API's address");
    parse_err("ca: {certTTL: 500ms}\n",
              "b.yaml:1:15: ca.certTTL: value '500ms' out of range "
              "1000ms-31536000000ms");
}

/* ca.istiod and ca.serviceAccountTokens: Istio's defaults, and the
 * combinations that cannot work refused by name. */
static void test_ca_istiod_and_tokens(void **state)
{
    struct bootstrap *bs;

    (void)state;
    bs = parse_ok("");
    assert_string_equal(bs->ca.istiod.address, "");
    assert_string_equal(bs->ca.istiod.root_cert,
                        "/var/run/secrets/istio/root-cert.pem");
    assert_string_equal(bs->ca.istiod.token,
                        "/var/run/secrets/tokens/istio-token");
    assert_string_equal(bs->ca.istiod.cluster_id, "Kubernetes");
    assert_int_equal(bs->ca.istiod.start_timeout_ms, 30000);
    assert_string_equal(bs->ca.sa_tokens.audience, "istio-ca");
    assert_string_equal(bs->ca.sa_tokens.jwks_file, "");
    assert_int_equal(bs->ca.server_names.n, 0);
    bootstrap_free(bs);
    bs = parse_ok("ca: {istiod: {address: 'istiod:15012', clusterID: c1}, "
                  "serverNames: [a.b, c.d]}\n");
    assert_string_equal(bs->ca.istiod.address, "istiod:15012");
    assert_string_equal(bs->ca.istiod.cluster_id, "c1");
    assert_int_equal(bs->ca.server_names.n, 2);
    bootstrap_free(bs);
    parse_err("ca: {enabled: true, istiod: {address: 'i:1'}}\n",
              "b.yaml:0:0: ca.istiod.address: a node gets its certificate "
              "from one place: istiod, its own CA (ca.enabled) or a joined "
              "CA, not two");
    parse_err("ca: {join: {address: 'https://x:1'}, istiod: {address: "
              "'i:1'}}\n",
              "b.yaml:0:0: ca.istiod.address: a node gets its certificate "
              "from one place: istiod, its own CA (ca.enabled) or a joined "
              "CA, not two");
    parse_err("ca: {istiod: {address: 'i:1', token: ''}}\n",
              "b.yaml:0:0: ca.istiod: rootCert and token are needed to call "
              "istiod");
    parse_err("ca: {enabled: true, serviceAccountTokens: {issuer: x}}\n",
              "b.yaml:0:0: ca.serviceAccountTokens: issuer and jwksFile go "
              "together");
    parse_err("ca: {serviceAccountTokens: {issuer: x, jwksFile: /j}}\n",
              "b.yaml:0:0: ca.serviceAccountTokens: only a node that runs "
              "the CA (ca.enabled) checks service-account tokens");
    parse_err("ca: {enabled: true, serviceAccountTokens: {issuer: x, "
              "jwksFile: /j, audience: ''}}\n",
              "b.yaml:0:0: ca.serviceAccountTokens.audience: an audience is "
              "needed (Istio's is istio-ca)");
    parse_err("ca: {serverNames: [ok.example, 'bad name']}\n",
              "b.yaml:0:0: ca.serverNames: 'bad name' is not a DNS name "
              "(letters, digits, '-' in dot-separated labels, a leading "
              "'*.' allowed)");
    parse_err("ca: {serverNames: [a..b]}\n",
              "b.yaml:0:0: ca.serverNames: 'a..b' is not a DNS name "
              "(letters, digits, '-' in dot-separated labels, a leading "
              "'*.' allowed)");
    parse_err("ca: {istiod: {adress: 'i:1'}}\n",
              "b.yaml:1:15: ca.istiod.adress: unknown key");
}

/* outboundTrafficPolicy: REGISTRY_ONLY unless ALLOW_ANY is asked for;
 * anything else is refused by name. */
static void test_outbound_traffic_policy(void **state)
{
    struct bootstrap *bs;
    struct buf b;

    (void)state;
    bs = parse_ok("");
    assert_int_equal(bs->outbound.mode, RES_REGISTRY_ONLY);
    bootstrap_free(bs);
    bs = parse_ok("outboundTrafficPolicy: {mode: ALLOW_ANY}\n");
    assert_int_equal(bs->outbound.mode, RES_ALLOW_ANY);
    buf_init(&b, 1 << 20);
    bootstrap_to_json(bs, &b);
    assert_non_null(strstr(
        buf_cstr(&b), "\"outboundTrafficPolicy\":{\"mode\":\"ALLOW_ANY\"}"));
    buf_dispose(&b);
    bootstrap_free(bs);
    bs = parse_ok("outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n");
    assert_int_equal(bs->outbound.mode, RES_REGISTRY_ONLY);
    bootstrap_free(bs);
    parse_err("outboundTrafficPolicy: {mode: allow_any}\n",
              "b.yaml:1:31: outboundTrafficPolicy.mode: unknown value "
              "'allow_any' (one of: REGISTRY_ONLY, ALLOW_ANY)");
    parse_err("outboundTrafficPolicy: {mode: ALLOW_ANY, egressProxy: x}\n",
              "b.yaml:1:42: outboundTrafficPolicy.egressProxy: unknown key");
}

/* The top-level http section: the two timeouts of every Gateway
 * listener, with the defaults, ranges and names of a listener's http
 * block; nothing else of that block is accepted there. */
static void test_gateway_http(void **state)
{
    struct bootstrap *bs;
    struct buf b;

    (void)state;
    bs = parse_ok("");
    assert_int_equal(bs->http.stream_idle_timeout_ms, 5 * 60 * 1000);
    assert_int_equal(bs->http.headers_timeout_ms, 10 * 1000);
    bootstrap_free(bs);
    bs = parse_ok("http: {streamIdleTimeout: 0s, requestHeadersTimeout: 1s}\n");
    assert_int_equal(bs->http.stream_idle_timeout_ms, 0);
    assert_int_equal(bs->http.headers_timeout_ms, 1000);
    buf_init(&b, 1 << 20);
    bootstrap_to_json(bs, &b);
    assert_non_null(strstr(buf_cstr(&b), "\"http\":{\"requestHeadersTimeout\":"
                                         "\"1s\",\"streamIdleTimeout\":"
                                         "\"0s\"}"));
    buf_dispose(&b);
    bootstrap_free(bs);
    parse_err("http:\n  requestHeadersTimeout: 0s\n",
              "b.yaml:2:26: http.requestHeadersTimeout: value '0s' out of "
              "range 1ms-3600000ms");
    parse_err("http: {streamIdleTimeout: 25h}\n",
              "b.yaml:1:27: http.streamIdleTimeout: value '25h' out of "
              "range 0ms-86400000ms");
    parse_err("http: {streamIdleTimeout: soon}\n",
              "b.yaml:1:27: http.streamIdleTimeout: bad duration 'soon': "
              "duration must look like 250ms, 5s, 1m or 1h");
    parse_err("http: {idleTimeout: 1h}\n",
              "b.yaml:1:8: http.idleTimeout: unknown key");
}

static void test_listener_equal(void **state)
{
    const char *text = "listeners:\n"
                       "  - name: a\n"
                       "    address: 127.0.0.1:1\n"
                       "    upstreams: [127.0.0.1:2, 127.0.0.1:3]\n"
                       "  - name: a2\n"
                       "    address: 127.0.0.1:4\n"
                       "    upstreams: [127.0.0.1:3, 127.0.0.1:2]\n";
    struct bootstrap *x = parse_ok(text), *y = parse_ok(text);
    struct bootstrap_listener *a = bootstrap_listener_at(x, 0);
    struct bootstrap_listener *b = bootstrap_listener_at(y, 0);
    struct bootstrap_listener saved;

    (void)state;
    /* Equal across separately parsed files, and to itself. */
    assert_true(bootstrap_listener_equal(a, b));
    assert_true(bootstrap_listener_equal(a, a));
    /* Differences in name, address, upstream order all count. */
    assert_false(bootstrap_listener_equal(a, bootstrap_listener_at(y, 1)));

#define CHANGE(field, value)                                                   \
    do {                                                                       \
        saved = *b;                                                            \
        b->field = value;                                                      \
        assert_false(bootstrap_listener_equal(a, b));                          \
        assert_false(bootstrap_listener_equal(b, a));                          \
        *b = saved;                                                            \
        assert_true(bootstrap_listener_equal(a, b));                           \
    } while (0)
    CHANGE(connect_timeout_ms, 1);
    CHANGE(connect_attempts, 1);
    CHANGE(idle_timeout_ms, 1);
    CHANGE(buffer_size, 1024);
    CHANGE(backlog, 7);
    CHANGE(upstreams.n, 1);
    CHANGE(address, bootstrap_listener_at(y, 1)->address);
    CHANGE(upstreams.v, bootstrap_listener_at(y, 1)->upstreams.v);
    {
        char other[] = "b";
        CHANGE(name, other);
    }
#undef CHANGE
    /* Where a listener sits in the file does not matter. */
    saved = *b;
    b->mark.line = 99;
    assert_true(bootstrap_listener_equal(a, b));
    *b = saved;
    bootstrap_free(x);
    bootstrap_free(y);
}

static void test_to_json(void **state)
{
    char *err = NULL;
    struct bootstrap *bs = bootstrap_load(SHIPPED, &err);
    struct buf b;
    const char *json;

    (void)state;
    assert_non_null(bs);
    buf_init(&b, 1 << 20);
    bootstrap_to_json(bs, &b);
    json = buf_cstr(&b);
    assert_int_equal(json[0], '{');
    assert_int_equal(json[strlen(json) - 1], '}');
    assert_non_null(strstr(json, "\"namespace\":\"istio-system\""));
    assert_non_null(strstr(json, "\"labels\":{\"istio\":\"ingressgateway\"}"));
    assert_non_null(strstr(json, "\"trustDomain\":\"cluster.local\""));
    assert_non_null(strstr(json, "\"workers\":\"auto\""));
    assert_non_null(strstr(json, "\"admin\":{\"address\":\"127.0.0.1:15000\","
                                 "\"allowedHosts\":[],\"allowedOrigins\":[]}"));
    assert_non_null(strstr(
        json,
        "\"log\":{\"level\":\"info\",\"format\":\"text\",\"accessLog\":true,"
        "\"accessLogEncoding\":\"STRAIT\",\"accessLogFormat\":\"\","
        "\"accessLogFile\":\"\",\"accessLogBuffer\":1048576}"));
    assert_non_null(strstr(json, "\"drainTimeout\":\"30s\""));
    {
        /* The listener's own keys, whatever other keys sit between them. */
        static const char *const want[] = {
            "\"listeners\":[{\"name\":\"echo\",",
            "\"address\":\"127.0.0.1:10000\"",
            "\"upstreams\":[\"127.0.0.1:10001\"]",
            "\"connectTimeout\":\"5s\"",
            "\"connectAttempts\":3",
            "\"idleTimeout\":\"1h\"",
            "\"bufferSize\":65536",
            "\"backlog\":1024",
        };
        const char *listeners = strstr(json, want[0]);

        assert_non_null(listeners);
        for (size_t i = 1; i < sizeof(want) / sizeof(want[0]); i++)
            if (strstr(listeners, want[i]) == NULL)
                fail_msg("%s not in %s", want[i], listeners);
    }
    buf_dispose(&b);
    bootstrap_free(bs);

    /* A numeric worker count is a number. */
    bs = parse_ok("workers: 4\nnode: {name: 'n\"1'}\n");
    buf_init(&b, 1 << 20);
    bootstrap_to_json(bs, &b);
    json = buf_cstr(&b);
    assert_non_null(strstr(json, "\"workers\":4,"));
    assert_non_null(strstr(json, "\"node\":{\"name\":\"n\\\"1\","));
    assert_non_null(strstr(json, "\"listeners\":[]"));
    buf_dispose(&b);
    bootstrap_free(bs);
}

static void test_free_null(void **state)
{
    (void)state;
    bootstrap_free(NULL);
}

/* gatewayTopology: Istio's defaults, the keys, and the pod annotation
 * proxy.istio.io/config over them for the keys it names. */
#define PP_ERR                                                                 \
    "b.yaml:1:51: gatewayTopology.proxyProtocol.maxHeaderBytes: value "        \
    "'65552' out of range 232-65551"
#define ANNOT_ERR                                                              \
    "b.yaml: node.annotations[proxy.istio.io/config]:1:43: "                   \
    "numTrustedProxies: value '65' out of range 0-64"
static void test_gateway_topology(void **state)
{
    struct bootstrap *bs;

    (void)state;
    bs = parse_ok("");
    assert_int_equal(bs->topology.num_trusted_proxies, 0);
    assert_int_equal(bs->topology.proxy_protocol.mark.line, 0);
    assert_int_equal(bs->topology.forward_client_cert,
                     BOOTSTRAP_XFCC_SANITIZE_SET);
    bootstrap_free(bs);
    bs = parse_ok("gatewayTopology:\n"
                  "  numTrustedProxies: 2\n"
                  "  proxyProtocol: {}\n"
                  "  forwardClientCertDetails: APPEND_FORWARD\n");
    assert_int_equal(bs->topology.num_trusted_proxies, 2);
    assert_true(bs->topology.proxy_protocol.mark.line > 0);
    assert_int_equal(bs->topology.proxy_protocol.max_header_bytes, 1024);
    assert_int_equal(bs->topology.forward_client_cert,
                     BOOTSTRAP_XFCC_APPEND_FORWARD);
    bootstrap_free(bs);
    /* The annotation names numTrustedProxies and proxyProtocol; the
     * top-level forwardClientCertDetails stays. */
    bs = parse_ok("gatewayTopology: {numTrustedProxies: 1, "
                  "forwardClientCertDetails: SANITIZE}\n"
                  "node:\n  annotations:\n    proxy.istio.io/config: "
                  "'{\"gatewayTopology\": {\"numTrustedProxies\": 3, "
                  "\"proxyProtocol\": {}}, \"concurrency\": 2}'\n");
    assert_int_equal(bs->topology.num_trusted_proxies, 3);
    assert_true(bs->topology.proxy_protocol.mark.line > 0);
    assert_int_equal(bs->topology.forward_client_cert, BOOTSTRAP_XFCC_SANITIZE);
    bootstrap_free(bs);
    /* One more than the limit, in the file and in the annotation. */
    parse_err("gatewayTopology: {numTrustedProxies: 65}\n",
              "b.yaml:1:38: gatewayTopology.numTrustedProxies: value '65' "
              "out of range 0-64");
    parse_err("gatewayTopology: {proxyProtocol: {maxHeaderBytes: 65552}}\n",
              PP_ERR);
    parse_err("node:\n  annotations:\n    proxy.istio.io/config: "
              "'{\"gatewayTopology\": {\"numTrustedProxies\": 65}}'\n",
              ANNOT_ERR);
    parse_err("node:\n  annotations:\n    proxy.istio.io/config: '[1]'\n",
              "b.yaml: node.annotations[proxy.istio.io/config]: not a "
              "ProxyConfig (a YAML or JSON map)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_file_loads),
        cmocka_unit_test(test_empty_file_defaults),
        cmocka_unit_test(test_empty_sections_keep_defaults),
        cmocka_unit_test(test_node_name),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_json_input),
        cmocka_unit_test(test_err_unknown_key),
        cmocka_unit_test(test_err_wrong_type),
        cmocka_unit_test(test_err_out_of_range),
        cmocka_unit_test(test_err_bad_address),
        cmocka_unit_test(test_err_missing_listener_keys),
        cmocka_unit_test(test_err_bad_name),
        cmocka_unit_test(test_err_duplicates),
        cmocka_unit_test(test_err_listener_on_admin_address),
        cmocka_unit_test(test_err_admin_unix),
        cmocka_unit_test(test_err_two_documents),
        cmocka_unit_test(test_err_yaml),
        cmocka_unit_test(test_err_load_missing_file),
        cmocka_unit_test(test_several_errors),
        cmocka_unit_test(test_shipped_file_documents_every_key),
        cmocka_unit_test(test_limits_and_overload),
        cmocka_unit_test(test_hbone_limits),
        cmocka_unit_test(test_ca_section),
        cmocka_unit_test(test_ca_istiod_and_tokens),
        cmocka_unit_test(test_outbound_traffic_policy),
        cmocka_unit_test(test_gateway_http),
        cmocka_unit_test(test_listener_equal),
        cmocka_unit_test(test_to_json),
        cmocka_unit_test(test_free_null),
        cmocka_unit_test(test_gateway_topology),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
