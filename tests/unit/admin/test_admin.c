/*
 * Unit tests of src/admin/admin.c.
 *
 * The renderers are checked against a fake admin_ops with fixed status and
 * two listeners whose per-worker shards hold known counts. The HTTP server
 * runs on the test's event loop; a helper thread plays the client with
 * plain blocking sockets (HTTP/1.0, so the server closes after answering)
 * and posts back through an mq when it is done. Loopback only.
 */
#include "config.h"

#include <errno.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include <event2/event.h>

#include "admin/admin.h"
#include "core/series.h"
#include "upstream/cluster.h"
#include "upstream/outlier.h"
#include "core/addr.h"
#include "core/buf.h"
#include "core/clock.h"
#include "event/mq.h"
#include "proxy/stats.h"
#include "net/sock.h"

#define DEADLINE_MS 5000
#define TICK_MS 20
#define CONFIG_JSON "{\"admin\":{\"address\":\"127.0.0.1:9901\"},\"x\":[1,2]}"

/* ---- the fake server ----------------------------------------------------- */

struct fake {
    struct admin_status st;
    struct stats_block *ls[2];
    size_t nls;
    int quits;
    int config_calls;
    int reloads;
    enum admin_reload reload_result;
    int upgrades;
    int upgrade_refused;
};

static void fake_status(void *arg, struct admin_status *out)
{
    const struct fake *k = arg;

    *out = k->st;
}

static size_t fake_listeners(void *arg, struct stats_block *const **out)
{
    struct fake *k = arg;

    *out = k->ls;
    return k->nls;
}

static int fake_upgrade(void *arg, int *pid, struct buf *why)
{
    struct fake *k = arg;

    k->upgrades++;
    if (k->upgrade_refused) {
        buf_puts(why, "an upgrade to pid 77 is running");
        return -1;
    }
    *pid = 4321;
    return 0;
}

static enum admin_reload fake_reload(void *arg)
{
    struct fake *k = arg;

    if (k == NULL)
        return ADMIN_RELOADED;
    k->reloads++;
    if (k->reload_result == ADMIN_RELOAD_FAILED)
        k->st.last_reload_error = "strait.yaml:3:5: workers: not a number";
    return k->reload_result;
}

static size_t fake_clusters(void *arg, struct cluster *const **out)
{
    (void)arg;
    *out = NULL;
    return 0;
}

static void fake_config_json(void *arg, struct buf *b)
{
    struct fake *k = arg;

    k->config_calls++;
    buf_puts(b, CONFIG_JSON);
}

static void fake_quit(void *arg)
{
    struct fake *k = arg;

    k->quits++;
}

static void shard_set(struct proxy_counters *c, uint64_t accepted,
                      uint64_t closed, uint64_t base)
{
    c->listener.accepted = accepted;
    c->listener.closed = closed;
    c->relay.bytes_in = base + 1;
    c->relay.bytes_out = base + 2;
    c->relay.upstream_bytes_in = base + 3;
    c->relay.upstream_bytes_out = base + 4;
    c->relay.connect_failures = base + 5;
    c->relay.connect_timeouts = base + 6;
    c->relay.idle_timeouts = base + 7;
}

/* "web" has two workers (5+3 accepted, 2+1 closed, so 5 active); "db" has
 * one (4 accepted, 4 closed). The other counters are base + 1..7. */
static void fake_init(struct fake *k)
{
    memset(k, 0, sizeof(*k));
    k->st.workers = 2;
    k->st.uptime_ms = 12345;
    k->st.reloads_ok = 3;
    k->st.reloads_failed = 1;
    k->ls[0] = proxy_stats_new("web", 2);
    k->ls[1] = proxy_stats_new("db", 1);
    assert_non_null(k->ls[0]);
    assert_non_null(k->ls[1]);
    shard_set(proxy_counters(k->ls[0], 0), 5, 2, 100);
    shard_set(proxy_counters(k->ls[0], 1), 3, 1, 200);
    shard_set(proxy_counters(k->ls[1], 0), 4, 4, 1000);
    k->nls = 2;
}

static void fake_dispose(struct fake *k)
{
    stats_block_unref(k->ls[0]);
    stats_block_unref(k->ls[1]);
}

static void fake_lua_errors(void *arg, admin_lua_error_fn *fn, void *ctx)
{
    (void)arg;
    fn(ctx, "web", "default/tag", "on_request", "timeout", 2);
}

static struct admin_ops fake_ops(struct fake *k)
{
    struct admin_ops ops = {
        k,         fake_status, fake_listeners, fake_clusters, fake_config_json,
        fake_quit, fake_reload, NULL,           fake_upgrade,  fake_lua_errors,
        NULL,      NULL};
    return ops;
}

/* ---- text helpers -------------------------------------------------------- */

/* has_line() is true when text holds line as a whole line. */
static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);

    for (const char *p = text; p != NULL && *p != '\0';) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);

        if (len == n && memcmp(p, line, n) == 0)
            return 1;
        p = nl ? nl + 1 : NULL;
    }
    return 0;
}

static void assert_line(const char *text, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void assert_line(const char *text, const char *fmt, ...)
{
    char line[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (!has_line(text, line))
        fail_msg("missing line \"%s\" in:\n%s", line, text);
}

/* The renderers' fixture: the fake and the last rendered text. */
struct rfx {
    struct fake k;
    struct admin_ops ops;
    char *text;
};

static int setup_render(void **state)
{
    struct rfx *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return -1;
    *state = r;
    fake_init(&r->k);
    r->ops = fake_ops(&r->k);
    return 0;
}

static int teardown_render(void **state)
{
    struct rfx *r = *state;

    fake_dispose(&r->k);
    free(r->text);
    free(r);
    return 0;
}

/* render() runs fn and returns its text, owned by the fixture (valid until
 * the next render). */
static const char *render(struct rfx *r,
                          void (*fn)(const struct admin_ops *, struct buf *))
{
    struct buf b;

    buf_init(&b, 1024 * 1024);
    fn(&r->ops, &b);
    free(r->text);
    r->text = strndup(buf_ptr(&b), buf_len(&b));
    buf_dispose(&b);
    assert_non_null(r->text);
    return r->text;
}

/* ---- renderers ----------------------------------------------------------- */

static void test_render_stats(void **state)
{
    struct rfx *r = *state;
    const char *s = render(r, admin_render_stats);

    assert_line(s, "server.workers: 2");
    assert_line(s, "server.draining: 0");
    /* LuaPolicy errors, from the lua_errors op. */
    assert_line(s, "lua.web.default/tag.on_request.timeout: 2");
    assert_line(s, "server.uptime_ms: 12345");
    assert_line(s, "server.reloads_ok: 3");
    assert_line(s, "server.reloads_failed: 1");
    assert_null(strstr(s, "last_reload_error"));
    /* Sums over the shards; active is accepted - closed. */
    assert_line(s, "listener.web.downstream_cx_total: 8");
    assert_line(s, "listener.web.downstream_cx_active: 5");
    assert_line(s, "listener.web.downstream_cx_destroy: 3");
    assert_line(s, "listener.web.downstream_cx_rx_bytes_total: 302");
    assert_line(s, "listener.web.downstream_cx_tx_bytes_total: 304");
    assert_line(s, "listener.web.upstream_cx_rx_bytes_total: 306");
    assert_line(s, "listener.web.upstream_cx_tx_bytes_total: 308");
    assert_line(s, "listener.web.upstream_cx_connect_fail: 310");
    assert_line(s, "listener.web.upstream_cx_connect_timeout: 312");
    assert_line(s, "listener.web.idle_timeout: 314");
    assert_line(s, "listener.web.worker_0.downstream_cx_total: 5");
    assert_line(s, "listener.web.worker_1.downstream_cx_total: 3");
    assert_line(s, "listener.db.downstream_cx_total: 4");
    assert_line(s, "listener.db.downstream_cx_active: 0");
    assert_line(s, "listener.db.idle_timeout: 1007");
    assert_line(s, "listener.db.worker_0.downstream_cx_total: 4");
    assert_null(strstr(s, "listener.db.worker_1"));
    /* Every line is "key: value". */
    for (const char *p = s; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        const char *colon = strstr(p, ": ");
        assert_non_null(nl);
        assert_non_null(colon);
        assert_true(colon < nl);
        p = nl + 1;
    }

    /* The last reload error is shown, as a JSON string. */
    r->k.st.draining = 1;
    r->k.st.last_reload_error = "bad \"key\"\n";
    s = render(r, admin_render_stats);
    assert_line(s, "server.draining: 1");
    assert_line(s, "server.last_reload_error: \"bad \\\"key\\\"\\n\"");
    r->k.st.cx_active = 7;
    r->k.st.overload = OVERLOAD_BIT(OVERLOAD_DISABLE_KEEPALIVE);
    r->k.st.overload_activations[OVERLOAD_DISABLE_KEEPALIVE] = 2;
    s = render(r, admin_render_stats);
    assert_line(s, "server.downstream_cx_active: 7");
    assert_line(s, "overload.disable_http_keepalive.active: 1");
    assert_line(s, "overload.disable_http_keepalive.activations: 2");
    assert_line(s, "overload.stop_accepting_requests.active: 0");
    r->k.st.overload = 0;

    /* No mesh certificate: no ca. lines. With one in memory only: the
     * failed writes and why, the reason as a JSON string. */
    assert_null(strstr(s, "ca.identity"));
    r->k.st.has_identity = 1;
    s = render(r, admin_render_stats);
    assert_line(s, "ca.identity_unstored: 0");
    assert_line(s, "ca.identity_store_failures: 0");
    assert_null(strstr(s, "ca.identity_store_error"));
    r->k.st.identity_unstored = 1;
    r->k.st.identity_store_failures = 4;
    r->k.st.identity_store_error = "No space left on device";
    s = render(r, admin_render_stats);
    assert_line(s, "ca.identity_unstored: 1");
    assert_line(s, "ca.identity_store_failures: 4");
    assert_line(s, "ca.identity_store_error: \"No space left on device\"");
    r->k.st.has_identity = 0;
    r->k.st.identity_unstored = 0;
    r->k.st.identity_store_failures = 0;
    r->k.st.identity_store_error = NULL;

    /* No listeners at all. */
    r->k.nls = 0;
    s = render(r, admin_render_stats);
    assert_line(s, "server.workers: 2");
    assert_null(strstr(s, "listener."));
}

static int name_char(int c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           c == ':' || (!first && c >= '0' && c <= '9');
}

/*
 * check_sample() checks one sample line of the text exposition format:
 * name, optional {label="value",...}, a space and an integer value. The
 * family name goes to fam (the sample name: no histograms here).
 */
static void check_sample(const char *line, size_t len, char *fam, size_t famsz)
{
    size_t i = 0, n;

    while (i < len && name_char((unsigned char)line[i], i == 0))
        i++;
    if (i == 0 || i >= famsz)
        fail_msg("bad metric name: %.*s", (int)len, line);
    memcpy(fam, line, i);
    fam[i] = '\0';
    if (i < len && line[i] == '{') {
        i++;
        for (;;) {
            size_t start = i;
            while (i < len && name_char((unsigned char)line[i], i == start) &&
                   line[i] != ':')
                i++;
            if (i == start || i + 1 >= len || line[i] != '=' ||
                line[i + 1] != '"')
                fail_msg("bad label in: %.*s", (int)len, line);
            i += 2;
            while (i < len && line[i] != '"') {
                if (line[i] == '\\')
                    i++;
                i++;
            }
            if (i >= len)
                fail_msg("unterminated label value in: %.*s", (int)len, line);
            i++;
            if (i < len && line[i] == ',') {
                i++;
                continue;
            }
            if (i < len && line[i] == '}') {
                i++;
                break;
            }
            fail_msg("bad label list in: %.*s", (int)len, line);
        }
    }
    if (i >= len || line[i] != ' ')
        fail_msg("no space before the value in: %.*s", (int)len, line);
    i++;
    n = i;
    while (i < len && line[i] >= '0' && line[i] <= '9')
        i++;
    /* Seconds carry milliseconds as a fraction. */
    if (i > n && i < len && line[i] == '.') {
        n = ++i;
        while (i < len && line[i] >= '0' && line[i] <= '9')
            i++;
    }
    if (i == n || i != len)
        fail_msg("bad value in: %.*s", (int)len, line);
}

/*
 * check_exposition() walks a Prometheus text body: every sample follows the
 * "# TYPE" line of its own family (samples of a family are contiguous), no
 * family is declared twice, every TYPE has a HELP, and a family's name ends
 * in _total exactly when it is a counter. Returns the number of samples.
 */
static int check_exposition(const char *s)
{
    char cur[128] = "", declared[256][128];
    int ndeclared = 0, samples = 0;

    for (const char *p = s; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        size_t len;

        if (nl == NULL)
            fail_msg("last line has no newline");
        len = (size_t)(nl - p);
        if (len >= 7 && memcmp(p, "# TYPE ", 7) == 0) {
            char name[128], type[32], help[160];
            if (sscanf(p, "# TYPE %127s %31s", name, type) != 2)
                fail_msg("bad TYPE line: %.*s", (int)len, p);
            assert_true(strcmp(type, "counter") == 0 ||
                        strcmp(type, "gauge") == 0);
            {
                size_t nl2 = strlen(name);
                int total = nl2 > 6 && strcmp(name + nl2 - 6, "_total") == 0;
                if (total != (strcmp(type, "counter") == 0))
                    fail_msg("%s is a %s: only counters end in _total", name,
                             type);
            }
            for (int i = 0; i < ndeclared; i++)
                if (strcmp(declared[i], name) == 0)
                    fail_msg("family %s declared twice", name);
            snprintf(help, sizeof(help), "# HELP %s ", name);
            if (strstr(s, help) == NULL)
                fail_msg("family %s has no HELP", name);
            assert_true(ndeclared < 256);
            snprintf(declared[ndeclared++], sizeof(declared[0]), "%s", name);
            snprintf(cur, sizeof(cur), "%s", name);
        } else if (len >= 1 && p[0] == '#') {
            if (len < 7 || memcmp(p, "# HELP ", 7) != 0)
                fail_msg("unexpected comment: %.*s", (int)len, p);
        } else {
            char fam[128];
            check_sample(p, len, fam, sizeof(fam));
            if (strcmp(fam, cur) != 0)
                fail_msg("sample of %s not under its # TYPE line (under "
                         "'%s')",
                         fam, cur);
            samples++;
        }
        p = nl + 1;
    }
    return samples;
}

/*
 * The process's samples whatever is configured: workers, draining, uptime,
 * 2 reloads, 2 rebuilds, pid, serving, 2 upgrades, upgrade running and
 * pid, 4 access-log counters, 2 connection gauges, 3 memory gauges, DNS
 * names, 2 DNS queries, DNS changes.
 */
#define STATUS_ALWAYS 27

static void test_render_prometheus(void **state)
{
    struct rfx *r = *state;
    const char *s;
    int samples;

    r->k.st.draining = 1;
    r->k.st.heap_allocated = 4242;
    s = render(r, admin_render_prometheus);
    assert_line(s, "strait_memory_allocated_bytes 4242");
    samples = check_exposition(s);
    /* 39 listener families, 25 labelled rows (5 status classes, 7 TLS
     * failure reasons, 6 AUTO_PASSTHROUGH and 7 HBONE refusal reasons) and
     * the buffers
     * gauge, each x 2 listeners; 3 worker lines; 26 process lines
     * (STATUS_ALWAYS below), 2 x 3 overload action lines; 1 LuaPolicy line;
     * istio_build. */
    assert_int_equal(samples,
                     (39 + 25 + 1) * 2 + 3 + STATUS_ALWAYS + 6 + 1 + 1);
    assert_line(s, "istio_build{component=\"proxy\",tag=\"" PACKAGE_VERSION
                   "\"} 1");
    assert_line(s, "strait_overload_action_active{action="
                   "\"stop_accepting_requests\"} 0");
    assert_line(s, "# TYPE strait_listener_connections_overflow_total "
                   "counter");
    assert_line(s, "# TYPE strait_http_downstream_buffers_active gauge");
    assert_line(s, "# TYPE strait_config_rebuilds_total counter");
    assert_line(s, "# TYPE strait_http_jwt_denied_total counter");
    assert_line(s, "# TYPE strait_http_mirror_sent_total counter");
    assert_line(s, "# TYPE strait_http_mirror_skipped_total counter");
    assert_line(s, "# TYPE strait_http_stream_idle_timeouts_total counter");
    assert_line(s, "# TYPE strait_http_request_header_timeouts_total counter");
    assert_line(s, "# TYPE strait_listener_no_route_total counter");
    assert_line(s,
                "# TYPE strait_listener_registry_only_refused_total counter");
    assert_line(s, "# TYPE strait_listener_client_hello_errors_total counter");
    assert_line(s, "# TYPE strait_listener_auto_passthrough_refused_total "
                   "counter");
    assert_line(s, "strait_listener_auto_passthrough_refused_total{listener="
                   "\"db\",reason=\"unknown_subset\"} 0");
    assert_line(s, "# TYPE strait_listener_connections_accepted_total "
                   "counter");
    assert_line(s, "# TYPE strait_listener_connections_active gauge");
    assert_line(s, "strait_listener_connections_accepted_total"
                   "{listener=\"web\"} 8");
    assert_line(s, "strait_listener_connections_closed_total"
                   "{listener=\"web\"} 3");
    assert_line(s, "strait_listener_connections_active{listener=\"web\"} 5");
    assert_line(s, "strait_listener_connections_active{listener=\"db\"} 0");
    assert_line(s, "strait_listener_received_bytes_total{listener=\"web\"} "
                   "302");
    assert_line(s, "strait_listener_sent_bytes_total{listener=\"web\"} 304");
    assert_line(s, "strait_upstream_received_bytes_total{listener=\"web\"} "
                   "306");
    assert_line(s, "strait_upstream_sent_bytes_total{listener=\"web\"} 308");
    assert_line(s, "strait_upstream_connect_failures_total"
                   "{listener=\"web\"} 310");
    assert_line(s, "strait_upstream_connect_timeouts_total"
                   "{listener=\"web\"} 312");
    assert_line(s, "strait_listener_idle_timeouts_total{listener=\"db\"} "
                   "1007");
    assert_line(s, "strait_worker_connections_accepted_total"
                   "{listener=\"web\",worker=\"0\"} 5");
    assert_line(s, "strait_worker_connections_accepted_total"
                   "{listener=\"web\",worker=\"1\"} 3");
    assert_line(s, "strait_worker_connections_accepted_total"
                   "{listener=\"db\",worker=\"0\"} 4");
    assert_line(s, "strait_workers 2");
    assert_line(s, "strait_draining 1");
    assert_line(s, "strait_config_reloads_total{result=\"ok\"} 3");
    assert_line(s, "strait_config_reloads_total{result=\"error\"} 1");
    assert_line(s, "strait_uptime_seconds 12");
    assert_line(s, "strait_dns_queries_total{result=\"sent\"} 0");
    assert_line(s, "strait_dns_changes_total 0");
    assert_null(strstr(s, "strait_ca_identity"));

    /* A mesh certificate in use from memory only: four more samples (the
     * store and renewal families). */
    r->k.st.has_identity = 1;
    r->k.st.identity_unstored = 1;
    r->k.st.identity_store_failures = 3;
    r->k.st.identity_renew_failures = 2;
    s = render(r, admin_render_prometheus);
    assert_int_equal(check_exposition(s), samples + 4);
    assert_line(s, "strait_ca_identity_renew_failures 2");
    assert_line(s, "strait_ca_identity_expired 0");
    assert_line(s, "# TYPE strait_ca_identity_unstored gauge");
    assert_line(s, "strait_ca_identity_unstored 1");
    assert_line(s, "# TYPE strait_ca_identity_store_failures_total counter");
    assert_line(s, "strait_ca_identity_store_failures_total 3");
    r->k.st.has_identity = 0;

    /* Without listeners the families are still declared, and valid. */
    r->k.nls = 0;
    s = render(r, admin_render_prometheus);
    /* process, overload action and LuaPolicy lines, istio_build */
    assert_int_equal(check_exposition(s), STATUS_ALWAYS + 6 + 1 + 1);
    assert_line(s, "# TYPE strait_listener_connections_active gauge");
}

/* ---- the HTTP server ----------------------------------------------------- */

struct http_reply {
    int status;
    char *head; /* status line and headers, NUL-terminated */
    char *body; /* NUL-terminated; len bytes */
    size_t len;
};

struct fx {
    struct event_base *base;
    struct event *tick;
    struct mq *mq;
    struct fake k;
    struct admin *admin;
    int port;
    struct http_reply *last; /* freed by the next request or teardown */
};

struct job {
    struct fx *f;
    const char *req;
    struct buf resp;
    int err; /* errno of a failed connect/send/recv */
    int done;
};

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

static void job_done(void *arg)
{
    struct job *j = arg;

    j->done = 1;
}

/* The client thread: one request, read to EOF, then tell the loop. */
static void *client_main(void *arg)
{
    struct job *j = arg;
    struct sockaddr_in sin;
    struct timeval tv = {DEADLINE_MS / 1000, 0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    size_t off = 0, n = strlen(j->req);

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons((unsigned short)j->f->port);
    if (fd < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
        connect(fd, (const struct sockaddr *)&sin, sizeof(sin)) < 0) {
        j->err = errno;
        goto out;
    }
    while (off < n) {
        ssize_t w = send(fd, j->req + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            j->err = errno;
            goto out;
        }
        off += (size_t)w;
    }
    for (;;) {
        char tmp[4096];
        ssize_t r = recv(fd, tmp, sizeof(tmp), 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            j->err = errno;
            break;
        }
        if (r == 0)
            break;
        if (buf_append(&j->resp, tmp, (size_t)r) < 0) {
            j->err = ENOBUFS;
            break;
        }
    }
out:
    if (fd >= 0)
        close(fd);
    /* The flag is set on the loop's thread; only then is j read there. */
    while (mq_post(j->f->mq, job_done, j) < 0)
        ;
    return NULL;
}

static void reply_free(struct http_reply *r)
{
    if (r == NULL)
        return;
    free(r->head);
    free(r->body);
    free(r);
}

/*
 * http() sends req from a helper thread while the loop serves it, and
 * returns the parsed answer, owned by the fixture (valid until the next
 * request).
 */
static struct http_reply *http(struct fx *f, const char *req)
{
    struct http_reply *r;
    struct job j;
    pthread_t t;
    uint64_t deadline = clock_ms() + DEADLINE_MS;
    const char *sep, *data;
    int timed_out;

    reply_free(f->last);
    f->last = r = calloc(1, sizeof(*r));
    assert_non_null(r);
    memset(&j, 0, sizeof(j));
    j.f = f;
    j.req = req;
    buf_init(&j.resp, 1024 * 1024);
    assert_int_equal(pthread_create(&t, NULL, client_main, &j), 0);
    while (!j.done && clock_ms() < deadline)
        event_base_loop(f->base, EVLOOP_ONCE);
    timed_out = !j.done;
    /* The client's socket timeouts bound its life, so the join returns even
     * when the server never answered; draining the queue then delivers the
     * job_done still in it while j is alive. */
    pthread_join(t, NULL);
    mq_drain(f->mq);
    if (timed_out && j.err == 0)
        j.err = ETIMEDOUT;
    if (j.err != 0) {
        buf_dispose(&j.resp);
        fail_msg("request failed: %s", strerror(j.err));
    }
    data = buf_ptr(&j.resp);
    sep = memmem(data, buf_len(&j.resp), "\r\n\r\n", 4);
    if (sep == NULL || sscanf(data, "HTTP/1.%*d %d", &r->status) != 1) {
        buf_dispose(&j.resp);
        fail_msg("bad response");
    }
    r->head = strndup(data, (size_t)(sep - data) + 2);
    r->len = buf_len(&j.resp) - (size_t)(sep + 4 - data);
    r->body = malloc(r->len + 1);
    assert_non_null(r->head);
    assert_non_null(r->body);
    memcpy(r->body, sep + 4, r->len);
    r->body[r->len] = '\0';
    buf_dispose(&j.resp);
    return r;
}

/* header() returns the value of header name in r, or NULL (static). */
static const char *header(const struct http_reply *r, const char *name)
{
    static char val[256];
    size_t n = strlen(name);

    for (const char *p = strstr(r->head, "\r\n"); p != NULL;
         p = strstr(p, "\r\n")) {
        p += 2;
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1, *end = strstr(v, "\r\n");
            while (*v == ' ')
                v++;
            if (end == NULL)
                return NULL;
            snprintf(val, sizeof(val), "%.*s", (int)(end - v), v);
            return val;
        }
    }
    return NULL;
}

/* A loopback port nobody listens on right now. */
static int free_port(void)
{
    struct addr a;
    const char *why;
    int fd, port;

    assert_int_equal(addr_parse(&a, "127.0.0.1:0", 11, 1, &why), 0);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (const struct sockaddr *)&a.ss, a.len), 0);
    assert_int_equal(sock_local_addr(fd, &a), 0);
    port = ntohs(((const struct sockaddr_in *)&a.ss)->sin_port);
    close(fd);
    return port;
}

static int setup_http(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct timeval tv = {0, TICK_MS * 1000};
    struct admin_ops ops;

    if (f == NULL)
        return -1;
    *state = f;
    fake_init(&f->k);
    f->base = event_base_new();
    if (f->base == NULL)
        return -1;
    f->tick = event_new(f->base, -1, EV_PERSIST, on_tick, NULL);
    f->mq = mq_new(f->base);
    if (f->tick == NULL || f->mq == NULL || event_add(f->tick, &tv) < 0)
        return -1;
    ops = fake_ops(&f->k);
    /* Another process may take the port between the probe and the bind. */
    for (int i = 0; i < 5 && f->admin == NULL; i++) {
        char s[32], *err = NULL;
        const char *why;
        struct addr a;

        f->port = free_port();
        snprintf(s, sizeof(s), "127.0.0.1:%d", f->port);
        assert_int_equal(addr_parse(&a, s, strlen(s), 0, &why), 0);
        f->admin = admin_new(f->base, &a, &ops, NULL, &err);
        free(err);
    }
    return f->admin != NULL ? 0 : -1;
}

static int teardown_http(void **state)
{
    struct fx *f = *state;

    admin_free(f->admin);
    reply_free(f->last);
    if (f->mq != NULL) {
        mq_drain(f->mq);
        mq_free(f->mq);
    }
    if (f->tick != NULL)
        event_free(f->tick);
    if (f->base != NULL)
        event_base_free(f->base);
    fake_dispose(&f->k);
    free(f);
    return 0;
}

static void test_http_ready(void **state)
{
    struct fx *f = *state;
    struct http_reply *r;

    r = http(f, "GET /healthz/ready HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "LIVE\n");
    assert_string_equal(header(r, "Cache-Control"), "no-store");

    /* The short alias. */
    r = http(f, "GET /ready HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "LIVE\n");

    f->k.st.draining = 1;
    r = http(f, "GET /healthz/ready HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 503);
    assert_string_equal(r->body, "DRAINING\n");

    /* A failed reload is reported but does not make the gateway unready. */
    f->k.st.draining = 0;
    f->k.st.last_reload_error = "listeners[0]: bad address";
    r = http(f, "GET /healthz/ready HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "LIVE\nlast reload failed: listeners[0]: "
                                 "bad address\n");

    /* Memory actions in effect: named, and still ready. */
    f->k.st.last_reload_error = NULL;
    f->k.st.overload = OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_CONNECTIONS) |
                       OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_REQUESTS);
    f->k.st.memory_used = 950;
    f->k.st.memory_limit = 1000;
    r = http(f, "GET /healthz/ready HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "LIVE\nOVERLOADED: stop_accepting_connections "
                                 "stop_accepting_requests (memory 950 of "
                                 "1000 bytes)\n");
    f->k.st.overload = 0;

    /* The certificate in use could not be written: said, still ready. */
    f->k.st.has_identity = 1;
    f->k.st.identity_unstored = 1;
    f->k.st.identity_store_error = "cannot write /x/.pending: No space left";
    r = http(f, "GET /healthz/ready HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "LIVE\nIDENTITY NOT STORED: cannot write "
                                 "/x/.pending: No space left (retrying)\n");
    f->k.st.identity_unstored = 0;
    f->k.st.identity_store_error = NULL;
    r = http(f, "GET /healthz/ready HTTP/1.0\r\n\r\n");
    assert_string_equal(r->body, "LIVE\n");

    /* A renewal failing while the certificate is valid: said, ready. */
    f->k.st.identity_renew_failures = 2;
    f->k.st.identity_renew_error = "istiod refused: UNAUTHENTICATED";
    r = http(f, "GET /healthz/ready HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "LIVE\nIDENTITY RENEWAL FAILING: istiod "
                                 "refused: UNAUTHENTICATED (retrying)\n");
    /* Expired: every mesh peer refuses it; not ready. */
    f->k.st.identity_expired = 1;
    r = http(f, "GET /healthz/ready HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 503);
    assert_string_equal(r->body, "LIVE\nIDENTITY EXPIRED: istiod refused: "
                                 "UNAUTHENTICATED (retrying)\n");
    f->k.st.identity_expired = 0;
    f->k.st.identity_renew_failures = 0;
    f->k.st.identity_renew_error = NULL;
    f->k.st.has_identity = 0;

    r = http(f, "POST /healthz/ready HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(r->status, 405);
    assert_string_equal(header(r, "Allow"), "GET, HEAD");
}

static void test_http_stats(void **state)
{
    struct fx *f = *state;
    struct http_reply *r;

    r = http(f, "GET /stats HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_string_equal(header(r, "Content-Type"), "text/plain; charset=utf-8");
    assert_line(r->body, "listener.web.downstream_cx_active: 5");
    assert_line(r->body, "listener.web.worker_1.downstream_cx_total: 3");
}

/*
 * HEAD is accepted wherever GET is; the answer has GET's status and headers
 * but must not carry a body (RFC 9110 9.3.2), or a keep-alive client reads
 * the body as the start of the next response.
 */
static void test_http_head_has_no_body(void **state)
{
    struct fx *f = *state;
    struct http_reply *r;

    r = http(f, "HEAD /healthz/ready HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_string_equal(header(r, "Content-Type"), "text/plain");
    assert_int_equal(r->len, 0);

    r = http(f, "HEAD /stats HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_int_equal(r->len, 0);
}

static void test_http_prometheus(void **state)
{
    struct fx *f = *state;
    struct http_reply *r;

    r = http(f, "GET /stats/prometheus HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_string_equal(header(r, "Content-Type"),
                        "text/plain; version=0.0.4; charset=utf-8");
    assert_int_equal(check_exposition(r->body),
                     (39 + 25 + 1) * 2 + 3 + STATUS_ALWAYS + 6 + 1 + 1);
    assert_line(r->body, "strait_listener_connections_active{listener=\"web\"} "
                         "5");
}

static void test_http_config_dump(void **state)
{
    struct fx *f = *state;
    struct http_reply *r;

    r = http(f, "GET /config_dump HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_string_equal(header(r, "Content-Type"), "application/json");
    assert_string_equal(r->body, CONFIG_JSON "\n");
    assert_int_equal(f->k.config_calls, 1);
}

static void test_http_quit(void **state)
{
    struct fx *f = *state;
    struct http_reply *r;

    /* Only POST quits. */
    r = http(f, "GET /quitquitquit HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 405);
    assert_string_equal(header(r, "Allow"), "POST");
    assert_int_equal(f->k.quits, 0);

    r = http(f, "POST /quitquitquit HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "OK\n");
    assert_int_equal(f->k.quits, 1);
}

static void test_http_reload(void **state)
{
    struct fx *f = *state;
    struct http_reply *r;

    /* Only POST reloads. */
    r = http(f, "GET /reload HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 405);
    assert_int_equal(f->k.reloads, 0);
    r = http(f, "POST /reload HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_int_equal(f->k.reloads, 1);
    assert_string_equal(r->body, "reloaded\n");
}

/* The answer says what the reload did: `strait reload` exits on it. */
static void test_http_reload_says_the_outcome(void **state)
{
    struct fx *f = *state;
    struct http_reply *r;
    const char *post = "POST /reload HTTP/1.0\r\nContent-Length: 0\r\n\r\n";

    f->k.reload_result = ADMIN_RELOAD_FAILED;
    r = http(f, post);
    assert_int_equal(r->status, 200);
    assert_string_equal(
        r->body, "reload failed: strait.yaml:3:5: workers: not a number\n");
    f->k.reload_result = ADMIN_RELOAD_QUEUED;
    r = http(f, post);
    assert_int_equal(r->status, 200);
    assert_true(strncmp(r->body, "reload queued", 13) == 0);
    f->k.reload_result = ADMIN_RELOAD_DRAINING;
    r = http(f, post);
    assert_int_equal(r->status, 503);
    assert_true(strncmp(r->body, "draining", 8) == 0);
    assert_int_equal(f->k.reloads, 3);
}

/* POST /upgrade answers at once with the new pid, or why not. */
static void test_http_upgrade(void **state)
{
    struct fx *f = *state;
    struct http_reply *r;
    const char *post = "POST /upgrade HTTP/1.0\r\nContent-Length: 0\r\n\r\n";

    r = http(f, "GET /upgrade HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 405);
    assert_int_equal(f->k.upgrades, 0);
    r = http(f, post);
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "upgrade started: pid 4321\n");
    f->k.upgrade_refused = 1;
    r = http(f, post);
    assert_int_equal(r->status, 409);
    assert_string_equal(r->body,
                        "upgrade refused: an upgrade to pid 77 is running\n");
    f->k.st.draining = 1;
    r = http(f, post);
    assert_int_equal(r->status, 503);
    assert_int_equal(f->k.upgrades, 3);
    /* The outcome is in /stats. */
    f->k.st.draining = 0;
    f->k.st.pid = 99;
    f->k.st.serving = 1;
    f->k.st.upgrade_pid = 4321;
    f->k.st.upgrades_failed = 1;
    f->k.st.last_upgrade_error = "exited with status 1";
    r = http(f, "GET /stats HTTP/1.0\r\n\r\n");
    assert_line(r->body, "server.pid: 99");
    assert_line(r->body, "server.serving: 1");
    assert_line(r->body, "server.upgrade_pid: 4321");
    assert_line(r->body, "server.upgrades_failed: 1");
    assert_line(r->body, "server.last_upgrade_error: \"exited with status 1\"");
}

static void test_http_not_found_and_index(void **state)
{
    struct fx *f = *state;
    struct http_reply *r;

    r = http(f, "GET /nope HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 404);
    assert_non_null(strstr(r->body, "not found"));

    /* A query string does not change the path that is matched. */
    r = http(f, "GET /stats?x=1 HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_line(r->body, "server.workers: 2");

    r = http(f, "GET / HTTP/1.0\r\n\r\n");
    assert_int_equal(r->status, 200);
    assert_non_null(strstr(r->body, "/quitquitquit"));
    assert_int_equal(f->k.quits, 0);
}

static void test_admin_new_port_in_use(void **state)
{
    struct fx *f = *state;
    struct admin_ops ops = fake_ops(&f->k);
    struct admin *a2;
    struct addr a;
    char s[32], *err = NULL;
    const char *why;

    /* The fixture's admin holds the port. */
    snprintf(s, sizeof(s), "127.0.0.1:%d", f->port);
    assert_int_equal(addr_parse(&a, s, strlen(s), 0, &why), 0);
    a2 = admin_new(f->base, &a, &ops, NULL, &err);
    assert_null(a2);
    assert_non_null(err);
    assert_non_null(strstr(err, s));
    free(err);
    admin_free(NULL);

    /* admin_free() releases the port: it can be bound again at once. */
    admin_free(f->admin);
    f->admin = admin_new(f->base, &a, &ops, NULL, &err);
    assert_non_null(f->admin);
    assert_null(err);
}

static struct cluster *one_cluster;

static size_t real_clusters(void *arg, struct cluster *const **out)
{
    (void)arg;
    *out = &one_cluster;
    return 1;
}

static size_t no_listeners(void *arg, struct stats_block *const **out)
{
    (void)arg;
    *out = NULL;
    return 0;
}

static void zero_status(void *arg, struct admin_status *out)
{
    (void)arg;
    memset(out, 0, sizeof(*out));
}

/* Istio's metrics: every worker's series of one label set summed into
 * one sample, histograms cumulative on Envoy's bounds with _sum and
 * _count, TCP series only in the TCP families, the overflow counted. */
static void test_render_istio(void **state)
{
    struct series_table *t = series_table_new(2, 1);
    struct series_labels *src = series_labels_new("reporter=\"source\"", 17, 0);
    const char *http = "request_protocol=\"http\",response_code=\"200\"";
    const char *tcp = "request_protocol=\"tcp\"";
    struct series *s0, *s1, *tc;
    struct buf b;
    const char *out;

    (void)state;
    s0 = series_get(&t->shards[0], src, NULL, http, strlen(http));
    s1 = series_get(&t->shards[1], src, NULL, http, strlen(http));
    series_add(s0, SERIES_REQUESTS, 2);
    series_add(s1, SERIES_REQUESTS, 3);
    series_observe(s0, SERIES_DURATION, 3);
    series_observe(s1, SERIES_DURATION, 700);
    /* Each worker's table has its own bound (1 here): both are full. */
    assert_null(series_get(&t->shards[1], src, NULL, tcp, strlen(tcp)));
    assert_null(series_get(&t->shards[0], src, NULL, tcp, strlen(tcp)));
    series_table_free(t);
    t = series_table_new(1, 4);
    s0 = series_get(&t->shards[0], src, NULL, http, strlen(http));
    series_add(s0, SERIES_REQUESTS, 5);
    series_observe(s0, SERIES_DURATION, 3);
    series_observe(s0, SERIES_DURATION, 700);
    tc = series_get(&t->shards[0], src, NULL, tcp, strlen(tcp));
    series_add(tc, SERIES_TCP_SENT, 42);
    t->shards[0].overflow = 3;
    buf_init(&b, 1 << 20);
    admin_render_istio(t, &b);
    out = buf_cstr(&b);
    assert_non_null(strstr(out, "# TYPE istio_requests_total counter\n"
                                "istio_requests_total{reporter=\"source\","
                                "request_protocol=\"http\",response_code="
                                "\"200\"} 5\n"));
    assert_non_null(strstr(out, "# TYPE istio_request_duration_milliseconds "
                                "histogram\n"));
    assert_non_null(strstr(out, "response_code=\"200\",le=\"0.5\"} 0\n"));
    assert_non_null(strstr(out, "response_code=\"200\",le=\"5\"} 1\n"));
    assert_non_null(strstr(out, "response_code=\"200\",le=\"1000\"} 2\n"));
    assert_non_null(strstr(out, "response_code=\"200\",le=\"+Inf\"} 2\n"));
    assert_non_null(strstr(out, "istio_request_duration_milliseconds_sum{"
                                "reporter=\"source\",request_protocol=\"http"
                                "\",response_code=\"200\"} 703\n"));
    assert_non_null(strstr(out, "istio_tcp_sent_bytes_total{reporter=\"source"
                                "\",request_protocol=\"tcp\"} 42\n"));
    assert_null(strstr(out, "istio_requests_total{reporter=\"source\","
                            "request_protocol=\"tcp\""));
    assert_non_null(strstr(out, "\nstrait_istio_series_overflow_total 3\n"));
    buf_dispose(&b);
    series_table_free(t);
    series_labels_unref(src);
}

/* Cluster counters are summed over workers in both renderings. */
static void test_render_clusters(void **state)
{
    struct admin_ops ops = {
        NULL,      zero_status, no_listeners, real_clusters, fake_config_json,
        fake_quit, fake_reload, NULL,         NULL,          NULL,
        NULL,      NULL};
    struct addr a;
    const char *why;
    struct buf b;

    (void)state;
    assert_int_equal(addr_parse(&a, "127.0.0.1:80", 12, 0, &why), 0);
    one_cluster = cluster_new("up", &a, 1, 2);
    assert_non_null(one_cluster);
    one_cluster->w[0].rq_total = 3;
    one_cluster->w[1].rq_total = 4;
    one_cluster->w[1].cx_connect_fail = 2;
    buf_init(&b, 1 << 20);
    admin_render_stats(&ops, &b);
    assert_non_null(strstr(buf_cstr(&b), "cluster.up.upstream_rq_total: 7\n"));
    assert_non_null(
        strstr(buf_cstr(&b), "cluster.up.upstream_cx_connect_fail: 2\n"));
    buf_dispose(&b);
    buf_init(&b, 1 << 20);
    admin_render_prometheus(&ops, &b);
    assert_non_null(strstr(
        buf_cstr(&b), "\nstrait_cluster_requests_total{cluster=\"up\"} 7\n"));
    assert_non_null(
        strstr(buf_cstr(&b),
               "# TYPE strait_cluster_connect_failures_total counter\n"
               "strait_cluster_connect_failures_total{cluster=\"up\"} 2\n"));
    /* No outlier detection: no outlier samples. */
    assert_null(
        strstr(buf_cstr(&b), "strait_cluster_outlier_ejections_total{"));
    buf_dispose(&b);
    cluster_unref(one_cluster);
}

/* Outlier detection in /stats, /stats/prometheus and /clusters: counters
 * per cluster, and per endpoint whether it is ejected, until when and how
 * many times it was. */
static void test_render_outlier_detection(void **state)
{
    struct admin_ops ops = {
        NULL,      zero_status, no_listeners, real_clusters, fake_config_json,
        fake_quit, fake_reload, NULL,         NULL,          NULL,
        NULL,      NULL};
    struct outlier_conf oc;
    struct addr a[2];
    const char *why;
    struct buf b;
    const char *s;

    (void)state;
    assert_int_equal(addr_parse(&a[0], "127.0.0.1:80", 12, 0, &why), 0);
    assert_int_equal(addr_parse(&a[1], "127.0.0.1:81", 12, 0, &why), 0);
    one_cluster = cluster_new("up", a, 2, 2);
    assert_non_null(one_cluster);
    {
        const uint32_t w[2] = {3, 0}; /* 0 counts as 1 */
        assert_int_equal(cluster_set_weights(one_cluster, w), 0);
    }
    memset(&oc, 0, sizeof(oc));
    oc.consecutive_5xx = 1;
    oc.base_ejection_ms = 3600 * 1000;
    oc.max_ejection_ms = oc.base_ejection_ms;
    oc.max_ejection_pct = 50;
    one_cluster->od = outlier_new(&oc, 2);
    assert_non_null(one_cluster->od);
    outlier_report(one_cluster->od, 1, 503, clock_ms());
    outlier_report(one_cluster->od, 0, 503, clock_ms()); /* over 50% */

    buf_init(&b, 1 << 20);
    admin_render_stats(&ops, &b);
    s = buf_cstr(&b);
    assert_non_null(strstr(
        s, "cluster.up.outlier_detection.ejections_enforced_total: 1\n"));
    assert_non_null(
        strstr(s, "cluster.up.outlier_detection.ejections_active: 1\n"));
    assert_non_null(
        strstr(s, "cluster.up.outlier_detection.ejections_overflow: 1\n"));
    assert_non_null(strstr(s, "cluster.up.outlier_detection.ejections_enforced_"
                              "consecutive_5xx: 1\n"));
    buf_dispose(&b);

    buf_init(&b, 1 << 20);
    admin_render_prometheus(&ops, &b);
    s = buf_cstr(&b);
    assert_non_null(strstr(s, "# TYPE strait_cluster_outlier_ejections_active "
                              "gauge\nstrait_cluster_outlier_ejections_active{"
                              "cluster=\"up\"} 1\n"));
    assert_non_null(strstr(
        s,
        "strait_cluster_outlier_ejections_overflow_total{cluster=\"up\"} 1\n"));
    buf_dispose(&b);

    buf_init(&b, 1 << 20);
    admin_render_clusters(&ops, &b);
    s = buf_cstr(&b);
    assert_non_null(strstr(s, "up::outlier_detection::on\n"));
    /* Each endpoint's weight, as Envoy's cluster::addr::weight::N. */
    assert_non_null(strstr(s, "up::127.0.0.1:80::weight::3\n"));
    assert_non_null(strstr(s, "up::127.0.0.1:81::weight::1\n"));
    assert_non_null(strstr(s, "up::127.0.0.1:80::health_flags::healthy\n"
                              "up::127.0.0.1:80::outlier_ejections::0\n"));
    assert_non_null(strstr(s, "up::127.0.0.1:81::health_flags::/failed_outlier_"
                              "check\nup::127.0.0.1:81::outlier_ejections::1\n"
                              "up::127.0.0.1:81::outlier_ejected_until::"));
    {
        /* Until at most an hour from now. */
        const char *r = strstr(s, "::outlier_ejection_remaining_ms::");
        assert_non_null(r);
        long left =
            strtol(r + strlen("::outlier_ejection_remaining_ms::"), NULL, 10);
        assert_true(left > 0 && left <= 3600 * 1000);
    }
    buf_dispose(&b);
    cluster_unref(one_cluster);
}

/* The fake's status with every optional part on: tracing, a config.dir,
 * config.etcd, and the text values (errors, the etcd endpoint). */
static const struct admin_kube_kind kube_kinds[] = {
    {"Gateway", 1, 0, 3, 1, 4, 5, 6, 7, 8},
    {"LuaPolicy", 1, 1, 0, 0, 1, 2, 0, 0, 0},
};

static void status_all_on(struct admin_status *st)
{
    st->has_kube = 1;
    st->kube_ready = 1;
    st->kube_error = "Service: watch: connection refused";
    st->kube_kinds = kube_kinds;
    st->kube_nkinds = 2;
    st->pid = 77;
    st->serving = 1;
    st->has_identity = 1;
    st->identity_unstored = 1;
    st->identity_store_failures = 4;
    st->identity_store_error = "ca.dir full";
    st->identity_renew_failures = 3;
    st->identity_renew_error = "istiod refused";
    st->identity_expired = 1;
    st->upgrades_ok = 1;
    st->upgrades_failed = 2;
    st->upgrade_running = 1;
    st->upgrade_pid = 78;
    st->last_upgrade_error = "exec failed";
    st->last_rebuild_error = "bad key";
    st->alog_written = 9;
    st->alog_dropped = 8;
    st->alog_write_errors = 7;
    st->alog_reopens = 6;
    st->tracing = 1;
    st->spans_queued = 11;
    st->spans_dropped = 12;
    st->spans_pending = 13;
    st->spans_exported = 14;
    st->export_requests = 15;
    st->export_failures = 16;
    st->export_retries = 17;
    st->has_resources = 1;
    st->resources = 5;
    st->resource_error = "x.yaml: bad";
    st->dns_names = 3;
    st->jwks_uris = 2;
    st->has_etcd = 1;
    st->etcd_synced = 1;
    st->etcd_watching = 1;
    st->etcd_revision = 42;
    st->etcd_keys = 4;
    st->etcd_endpoint = "http://127.0.0.1:2379";
    st->etcd_error = "connection refused";
    st->etcd_down_ms = 1500;
    st->etcd_watches_started = 21;
    st->etcd_reconnects = 22;
    st->etcd_ranges = 23;
    st->etcd_compactions = 24;
    st->etcd_events = 25;
    st->etcd_progress = 26;
    st->etcd_failures = 27;
    st->etcd_last_backoff_ms = 250;
    st->etcd_watch_created_ms = INT64_C(1700000000123);
}

/* The families of the process's values that /stats shows: access log,
 * tracing, binary upgrades, DNS names, jwksUris and etcd. */
static void test_render_prometheus_process_families(void **state)
{
    struct rfx *r = *state;
    const char *s;

    status_all_on(&r->k.st);
    s = render(r, admin_render_prometheus);
    check_exposition(s);
    assert_line(s, "# TYPE strait_pid gauge");
    assert_line(s, "strait_pid 77");
    assert_line(s, "strait_serving 1");
    assert_line(s, "# TYPE strait_upgrades_total counter");
    assert_line(s, "strait_upgrades_total{result=\"ok\"} 1");
    assert_line(s, "strait_upgrades_total{result=\"error\"} 2");
    assert_line(s, "strait_upgrade_running 1");
    assert_line(s, "strait_upgrade_pid 78");
    assert_line(s, "# TYPE strait_access_log_written_total counter");
    assert_line(s, "strait_access_log_written_total 9");
    assert_line(s, "strait_access_log_dropped_total 8");
    assert_line(s, "strait_access_log_write_errors_total 7");
    assert_line(s, "strait_access_log_reopens_total 6");
    assert_line(s, "strait_tracing_spans_queued_total 11");
    assert_line(s, "strait_tracing_spans_dropped_total 12");
    assert_line(s, "# TYPE strait_tracing_spans_pending gauge");
    assert_line(s, "strait_tracing_spans_pending 13");
    assert_line(s, "strait_tracing_spans_exported_total 14");
    assert_line(s, "strait_tracing_export_requests_total 15");
    assert_line(s, "strait_tracing_export_failures_total 16");
    assert_line(s, "strait_tracing_export_retries_total 17");
    assert_line(s, "# TYPE strait_dns_names gauge");
    assert_line(s, "strait_dns_names 3");
    assert_line(s, "# TYPE strait_jwks_uris gauge");
    assert_line(s, "strait_jwks_uris 2");
    assert_line(s, "strait_resources 5");
    assert_line(s, "# TYPE strait_etcd_synced gauge");
    assert_line(s, "strait_etcd_synced 1");
    assert_line(s, "strait_etcd_watching 1");
    assert_line(s, "strait_etcd_revision 42");
    assert_line(s, "strait_etcd_keys 4");
    assert_line(s, "strait_etcd_down_seconds 1.500");
    assert_line(s, "strait_etcd_watches_started_total 21");
    assert_line(s, "strait_etcd_reconnects_total 22");
    assert_line(s, "strait_etcd_ranges_total 23");
    assert_line(s, "strait_etcd_compactions_total 24");
    assert_line(s, "strait_etcd_events_total 25");
    assert_line(s, "strait_etcd_progress_notifications_total 26");
    assert_line(s, "strait_etcd_failures_total 27");
    assert_line(s, "strait_etcd_last_backoff_seconds 0.250");
    assert_line(s, "strait_etcd_watch_created_timestamp_seconds "
                   "1700000000.123");
    assert_line(s, "# TYPE strait_lua_errors_total counter");
    assert_line(s, "strait_lua_errors_total{listener=\"web\",policy=\"default/"
                   "tag\",phase=\"on_request\",reason=\"timeout\"} 2");
    assert_line(s, "# TYPE strait_http_overload_rejected_total counter");
    assert_line(s, "strait_http_overload_keepalive_disabled_total"
                   "{listener=\"web\"} 0");

    /* Off, they are not shown, as in /stats. */
    r->k.st.tracing = 0;
    r->k.st.has_etcd = 0;
    r->k.st.has_resources = 0;
    s = render(r, admin_render_prometheus);
    assert_null(strstr(s, "strait_tracing_"));
    assert_null(strstr(s, "strait_etcd_"));
    assert_null(strstr(s, "strait_jwks_"));
    assert_line(s, "strait_dns_names 3");
}

/*
 * Every /stats key a strait_* family stands for, so the README's "every
 * /stats counter has a strait_* name" stays true: a /stats value added
 * without a family (and a row here) fails
 * test_every_stats_value_has_a_family. Patterns are fnmatch(3)'s, the
 * first match wins. Text values (errors, the etcd endpoint) have none.
 */
static const struct {
    const char *key;
    const char *family;
} stats_to_family[] = {
    {"server.workers", "strait_workers"},
    {"server.draining", "strait_draining"},
    {"server.uptime_ms", "strait_uptime_seconds"},
    {"server.reloads_*", "strait_config_reloads_total"},
    {"server.rebuilds_*", "strait_config_rebuilds_total"},
    {"server.pid", "strait_pid"},
    {"ca.identity_unstored", "strait_ca_identity_unstored"},
    {"ca.identity_store_failures", "strait_ca_identity_store_failures_total"},
    {"ca.identity_renew_failures", "strait_ca_identity_renew_failures"},
    {"ca.identity_expired", "strait_ca_identity_expired"},
    {"server.serving", "strait_serving"},
    {"server.upgrades_*", "strait_upgrades_total"},
    {"server.upgrade_running", "strait_upgrade_running"},
    {"server.upgrade_pid", "strait_upgrade_pid"},
    {"server.restart_epoch", "strait_restart_epoch"},
    {"server.downstream_cx_active", "strait_downstream_connections_active"},
    {"server.max_connections", "strait_downstream_connections_limit"},
    {"server.memory_allocated_bytes", "strait_memory_allocated_bytes"},
    {"access_log.written", "strait_access_log_written_total"},
    {"access_log.dropped", "strait_access_log_dropped_total"},
    {"access_log.write_errors", "strait_access_log_write_errors_total"},
    {"access_log.reopens", "strait_access_log_reopens_total"},
    {"overload.memory_limit_bytes", "strait_overload_memory_limit_bytes"},
    {"overload.memory_used_bytes", "strait_overload_memory_used_bytes"},
    {"overload.*.active", "strait_overload_action_active"},
    {"overload.*.activations", "strait_overload_action_activations_total"},
    {"tracing.spans_queued", "strait_tracing_spans_queued_total"},
    {"tracing.spans_dropped", "strait_tracing_spans_dropped_total"},
    {"tracing.spans_pending", "strait_tracing_spans_pending"},
    {"tracing.spans_exported", "strait_tracing_spans_exported_total"},
    {"tracing.export_requests", "strait_tracing_export_requests_total"},
    {"tracing.export_failures", "strait_tracing_export_failures_total"},
    {"tracing.export_retries", "strait_tracing_export_retries_total"},
    {"resources.count", "strait_resources"},
    {"resources.loading", "strait_resources_loading"},
    {"resources.reloads_*", "strait_resource_reloads_total"},
    {"dns.names", "strait_dns_names"},
    {"dns.queries", "strait_dns_queries_total"},
    {"dns.failures", "strait_dns_queries_total"},
    {"dns.changes", "strait_dns_changes_total"},
    {"jwks.uris", "strait_jwks_uris"},
    {"jwks.fetches", "strait_jwks_fetches_total"},
    {"jwks.failures", "strait_jwks_fetches_total"},
    {"jwks.changes", "strait_jwks_changes_total"},
    {"etcd.synced", "strait_etcd_synced"},
    {"etcd.watching", "strait_etcd_watching"},
    {"etcd.revision", "strait_etcd_revision"},
    {"etcd.keys", "strait_etcd_keys"},
    {"etcd.down_ms", "strait_etcd_down_seconds"},
    {"etcd.watches_started", "strait_etcd_watches_started_total"},
    {"etcd.reconnects", "strait_etcd_reconnects_total"},
    {"etcd.ranges", "strait_etcd_ranges_total"},
    {"etcd.compactions", "strait_etcd_compactions_total"},
    {"etcd.events", "strait_etcd_events_total"},
    {"etcd.progress_notifications", "strait_etcd_progress_notifications_total"},
    {"etcd.failures", "strait_etcd_failures_total"},
    {"etcd.range_pages", "strait_etcd_range_pages_total"},
    {"etcd.skipped", "strait_etcd_skipped_total"},
    {"etcd.keys_left_out", "strait_etcd_keys_left_out"},
    {"etcd.last_backoff_ms", "strait_etcd_last_backoff_seconds"},
    {"etcd.watch_created_unix_ms",
     "strait_etcd_watch_created_timestamp_seconds"},
    {"kubernetes.ready", "strait_kubernetes_ready"},
    {"kubernetes.*.synced", "strait_kubernetes_synced"},
    {"kubernetes.*.missing", "strait_kubernetes_missing"},
    {"kubernetes.*.objects", "strait_kubernetes_objects"},
    {"kubernetes.*.left_out", "strait_kubernetes_left_out"},
    {"kubernetes.*.watches_opened", "strait_kubernetes_watches_opened_total"},
    {"kubernetes.*.relists", "strait_kubernetes_relists_total"},
    {"kubernetes.*.expired", "strait_kubernetes_expired_total"},
    {"kubernetes.*.errors", "strait_kubernetes_errors_total"},
    {"kubernetes.*.events", "strait_kubernetes_events_total"},
    {"geoip.rq_total", "strait_geoip_requests_total"},
    {"geoip.maxmind.*_db.total", "strait_geoip_lookups_total"},
    {"geoip.maxmind.*_db.hit", "strait_geoip_hits_total"},
    {"geoip.maxmind.*_db.lookup_error", "strait_geoip_lookup_errors_total"},
    {"geoip.maxmind.*_db.db_reload_*", "strait_geoip_db_reloads_total"},
    {"geoip.maxmind.*_db.db_build_epoch", "strait_geoip_db_build_epoch"},
    {"lua.*", "strait_lua_errors_total"},
    {"listener.*.worker_*.downstream_cx_total",
     "strait_worker_connections_accepted_total"},
    {"listener.*.downstream_cx_total",
     "strait_listener_connections_accepted_total"},
    {"listener.*.downstream_cx_active", "strait_listener_connections_active"},
    {"listener.*.downstream_cx_destroy",
     "strait_listener_connections_closed_total"},
    {"listener.*.downstream_cx_overflow",
     "strait_listener_connections_overflow_total"},
    {"listener.*.downstream_global_cx_overflow",
     "strait_listener_connections_global_overflow_total"},
    {"listener.*.downstream_cx_limit_paused",
     "strait_listener_accept_limit_pauses_total"},
    {"listener.*.downstream_cx_overload_paused",
     "strait_listener_accept_overload_pauses_total"},
    {"listener.*.downstream_cx_proxy_proto_error",
     "strait_listener_proxy_protocol_errors_total"},
    {"listener.*.downstream_cx_rx_bytes_total",
     "strait_listener_received_bytes_total"},
    {"listener.*.downstream_cx_tx_bytes_total",
     "strait_listener_sent_bytes_total"},
    {"listener.*.upstream_cx_rx_bytes_total",
     "strait_upstream_received_bytes_total"},
    {"listener.*.upstream_cx_tx_bytes_total",
     "strait_upstream_sent_bytes_total"},
    {"listener.*.upstream_cx_connect_fail",
     "strait_upstream_connect_failures_total"},
    {"listener.*.upstream_cx_connect_timeout",
     "strait_upstream_connect_timeouts_total"},
    {"listener.*.idle_timeout", "strait_listener_idle_timeouts_total"},
    {"listener.*.no_filter_chain_match", "strait_listener_no_route_total"},
    {"listener.*.tls_inspector.client_hello_errors",
     "strait_listener_client_hello_errors_total"},
    {"listener.*.registry_only_refused",
     "strait_listener_registry_only_refused_total"},
    {"listener.*.auto_passthrough.relayed",
     "strait_listener_auto_passthrough_relayed_total"},
    {"listener.*.lua.states_created",
     "strait_listener_lua_states_created_total"},
    {"listener.*.hbone.tunnels_opened", "strait_listener_hbone_tunnels_total"},
    {"listener.*.hbone.tunnels_active", "strait_listener_hbone_tunnels_active"},
    {"listener.*.hbone.refused_*", "strait_listener_hbone_refused_total"},
    {"listener.*.auto_passthrough.refused_*",
     "strait_listener_auto_passthrough_refused_total"},
    {"listener.*.http.rq_total", "strait_http_requests_total"},
    {"listener.*.http.rq_[1-5]xx", "strait_http_responses_total"},
    {"listener.*.http.protocol_errors", "strait_http_protocol_errors_total"},
    {"listener.*.http.downstream_buffers_active",
     "strait_http_downstream_buffers_active"},
    {"listener.*.http.upstream_errors", "strait_http_upstream_errors_total"},
    {"listener.*.http.rbac_denied", "strait_http_rbac_denied_total"},
    {"listener.*.http.jwt_authn.denied", "strait_http_jwt_denied_total"},
    {"listener.*.http.mirror_sent", "strait_http_mirror_sent_total"},
    {"listener.*.http.mirror_failed", "strait_http_mirror_failed_total"},
    {"listener.*.http.mirror_skipped", "strait_http_mirror_skipped_total"},
    {"listener.*.http.rq_idle_timeout",
     "strait_http_stream_idle_timeouts_total"},
    {"listener.*.http.rq_header_timeout",
     "strait_http_request_header_timeouts_total"},
    {"listener.*.http.downstream_rq_overload_close",
     "strait_http_overload_rejected_total"},
    {"listener.*.http.downstream_cx_overload_disable_keepalive",
     "strait_http_overload_keepalive_disabled_total"},
    {"listener.*.tls.handshakes", "strait_tls_handshakes_total"},
    {"listener.*.tls.fail_*", "strait_tls_handshake_failures_total"},
    {"listener.*.http2.rapid_reset", "strait_http2_rapid_reset_total"},
    {"listener.*.http2.flood", "strait_http2_flood_total"},
    {"listener.*.http2.continuation_flood",
     "strait_http2_continuation_flood_total"},
    {"listener.*.http2.stream_errors", "strait_http2_stream_errors_total"},
    {"cluster.*.outlier_detection.ejections_enforced_total",
     "strait_cluster_outlier_ejections_total"},
    {"cluster.*.outlier_detection.ejections_active",
     "strait_cluster_outlier_ejections_active"},
    {"cluster.*.outlier_detection.ejections_overflow",
     "strait_cluster_outlier_ejections_overflow_total"},
    {"cluster.*.outlier_detection.ejections_enforced_*",
     "strait_cluster_outlier_ejections_by_reason_total"},
    {"cluster.*.upstream_rq_total", "strait_cluster_requests_total"},
    {"cluster.*.upstream_cx_total", "strait_cluster_connections_total"},
    {"cluster.*.upstream_cx_reused", "strait_cluster_connections_reused_total"},
    {"cluster.*.upstream_cx_connect_fail",
     "strait_cluster_connect_failures_total"},
    {"cluster.*.upstream_cx_connect_timeout",
     "strait_cluster_connect_timeouts_total"},
    {"cluster.*.upstream_rq_error", "strait_cluster_request_errors_total"},
    {"cluster.*.upstream_rq_timeout", "strait_cluster_request_timeouts_total"},
    {"cluster.*.upstream_rq_pending_overflow",
     "strait_cluster_request_overflows_total"},
    {"cluster.*.upstream_rq_retry_overflow",
     "strait_cluster_retry_overflows_total"},
    {"cluster.*.upstream_rq_retry", "strait_cluster_retries_total"},
    {"cluster.*.upstream_rq_per_try_timeout",
     "strait_cluster_per_try_timeouts_total"},
    {"cluster.*.retry_or_shadow_abandoned",
     "strait_cluster_retry_body_overflows_total"},
    {"cluster.*.upstream_cx_overflow",
     "strait_cluster_connection_overflows_total"},
    {"cluster.*.upstream_rq_pending_total",
     "strait_cluster_requests_pending_total"},
    {"cluster.*.lb_priority_failover",
     "strait_cluster_priority_failovers_total"},
};

/*
 * Every numeric /stats value, with everything on (tracing, config.dir,
 * etcd, LuaPolicy errors, listeners, a cluster with outlier detection),
 * has a family in /stats/prometheus with at least one sample.
 */
static void test_every_stats_value_has_a_family(void **state)
{
    struct rfx *r = *state;
    struct outlier_conf oc;
    struct addr a;
    const char *why;
    char *stats;
    const char *prom;
    int keys = 0;

    status_all_on(&r->k.st);
    r->k.st.last_reload_error = "bad";
    assert_int_equal(addr_parse(&a, "127.0.0.1:80", 12, 0, &why), 0);
    one_cluster = cluster_new("up", &a, 1, 1);
    assert_non_null(one_cluster);
    memset(&oc, 0, sizeof(oc));
    oc.consecutive_5xx = 1;
    oc.base_ejection_ms = 1000;
    oc.max_ejection_ms = 1000;
    oc.max_ejection_pct = 100;
    one_cluster->od = outlier_new(&oc, 1);
    assert_non_null(one_cluster->od);
    r->ops.clusters = real_clusters;
    stats = strdup(render(r, admin_render_stats));
    assert_non_null(stats);
    prom = render(r, admin_render_prometheus);
    check_exposition(prom);
    for (const char *p = stats; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        const char *colon = strstr(p, ": ");
        char key[256], sample[300];
        const char *fam = NULL;

        assert_true(colon != NULL && colon < nl);
        snprintf(key, sizeof(key), "%.*s", (int)(colon - p), p);
        p = nl + 1;
        if (colon[2] == '"') /* text: an error, the etcd endpoint */
            continue;
        keys++;
        for (size_t i = 0; fam == NULL && i < sizeof(stats_to_family) /
                                                  sizeof(stats_to_family[0]);
             i++)
            if (fnmatch(stats_to_family[i].key, key, 0) == 0)
                fam = stats_to_family[i].family;
        if (fam == NULL)
            fail_msg("/stats %s has no strait_* family: add one to "
                     "/stats/prometheus and to stats_to_family[]",
                     key);
        snprintf(sample, sizeof(sample), "\n%s{", fam);
        if (strstr(prom, sample) == NULL) {
            snprintf(sample, sizeof(sample), "\n%s ", fam);
            if (strstr(prom, sample) == NULL)
                fail_msg("/stats %s: no %s sample in /stats/prometheus", key,
                         fam);
        }
    }
    /* All the parts were there to be checked. */
    assert_true(keys > 150);
    assert_non_null(strstr(stats, "\netcd.watch_created_unix_ms: "));
    assert_non_null(strstr(stats, "\ntracing.export_retries: "));
    assert_non_null(strstr(stats, "\njwks.uris: "));
    assert_non_null(strstr(stats, "\nkubernetes.Gateway.watches_opened: 4\n"));
    assert_non_null(strstr(prom, "\nstrait_kubernetes_relists_total{kind=\""
                                 "LuaPolicy\"} 2\n"));
    assert_non_null(strstr(stats, "\nlua."));
    assert_non_null(strstr(stats, "outlier_detection.ejections_enforced_"
                                  "consecutive_5xx: "));
    free(stats);
    cluster_unref(one_cluster);
}

static void test_host_and_origin_policy(void **state)
{
    const char *hosts[] = {"gw-1.example.com", "10.0.0.9:15000"};
    const char *origins[] = {"https://console.example.com"};
    const struct admin_policy none = {NULL, 0, NULL, 0};
    const struct admin_policy p = {hosts, 2, origins, 1};
    struct addr lo, any, bound;
    const char *why = NULL;

    (void)state;
    assert_int_equal(addr_parse(&lo, "127.0.0.1:15000", 15, 0, &why), 0);
    assert_int_equal(addr_parse(&any, "0.0.0.0:15000", 13, 0, &why), 0);
    assert_int_equal(addr_parse(&bound, "192.0.2.7:15000", 15, 0, &why), 0);
    /* Loopback literals, localhost, no Host at all: always. */
    assert_true(admin_host_allowed(&none, &lo, "127.0.0.1:15000"));
    assert_true(admin_host_allowed(&none, &lo, "127.9.9.9"));
    assert_true(admin_host_allowed(&none, &lo, "[::1]:15000"));
    assert_true(admin_host_allowed(&none, &lo, "LocalHost:15000"));
    assert_true(admin_host_allowed(&none, &lo, "localhost."));
    assert_true(admin_host_allowed(&none, &lo, NULL));
    /* DNS rebinding: a name that now resolves to loopback. */
    assert_false(admin_host_allowed(&none, &lo, "evil.example:15000"));
    assert_false(admin_host_allowed(&none, &lo, "127.0.0.1.evil.example"));
    assert_false(admin_host_allowed(&none, &lo, "[::2]:15000"));
    /* The admin's own address, but never a wildcard one. */
    assert_true(admin_host_allowed(&none, &bound, "192.0.2.7:15000"));
    assert_false(admin_host_allowed(&none, &any, "0.0.0.0:15000"));
    /* Configured: a name on any port; name:port on that port only. */
    assert_true(admin_host_allowed(&p, &lo, "gw-1.example.com:15000"));
    assert_true(admin_host_allowed(&p, &lo, "GW-1.example.com"));
    assert_true(admin_host_allowed(&p, &lo, "10.0.0.9:15000"));
    assert_false(admin_host_allowed(&p, &lo, "10.0.0.9:8080"));
    /* Origins: none sent passes; others must be listed exactly. */
    assert_true(admin_origin_allowed(&none, NULL));
    assert_false(admin_origin_allowed(&none, "http://127.0.0.1:15000"));
    assert_false(admin_origin_allowed(&none, "null"));
    assert_true(admin_origin_allowed(&p, "https://console.example.com"));
    assert_false(admin_origin_allowed(&p, "https://console.example.com.evil"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_and_origin_policy),
        cmocka_unit_test(test_render_clusters),
        cmocka_unit_test(test_render_istio),
        cmocka_unit_test(test_render_outlier_detection),
        cmocka_unit_test_setup_teardown(test_render_stats, setup_render,
                                        teardown_render),
        cmocka_unit_test_setup_teardown(test_render_prometheus, setup_render,
                                        teardown_render),
        cmocka_unit_test_setup_teardown(test_render_prometheus_process_families,
                                        setup_render, teardown_render),
        cmocka_unit_test_setup_teardown(test_every_stats_value_has_a_family,
                                        setup_render, teardown_render),
        cmocka_unit_test_setup_teardown(test_http_ready, setup_http,
                                        teardown_http),
        cmocka_unit_test_setup_teardown(test_http_stats, setup_http,
                                        teardown_http),
        cmocka_unit_test_setup_teardown(test_http_head_has_no_body, setup_http,
                                        teardown_http),
        cmocka_unit_test_setup_teardown(test_http_prometheus, setup_http,
                                        teardown_http),
        cmocka_unit_test_setup_teardown(test_http_config_dump, setup_http,
                                        teardown_http),
        cmocka_unit_test_setup_teardown(test_http_reload, setup_http,
                                        teardown_http),
        cmocka_unit_test_setup_teardown(test_http_upgrade, setup_http,
                                        teardown_http),
        cmocka_unit_test_setup_teardown(test_http_reload_says_the_outcome,
                                        setup_http, teardown_http),
        cmocka_unit_test_setup_teardown(test_http_quit, setup_http,
                                        teardown_http),
        cmocka_unit_test_setup_teardown(test_http_not_found_and_index,
                                        setup_http, teardown_http),
        cmocka_unit_test_setup_teardown(test_admin_new_port_in_use, setup_http,
                                        teardown_http),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
