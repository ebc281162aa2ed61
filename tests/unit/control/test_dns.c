/*
 * Unit tests for src/control/dns.c against a DNS server in the test: a
 * UDP socket on loopback served from the same event loop. A first lookup
 * starts a query and finds nothing; the answer runs on_change once and
 * later lookups see the addresses, sorted; a failed refresh keeps them;
 * AAAA is asked when there is no A record; a sweep drops unused names.
 */
#include "config.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "control/dns.h"
#include "core/addr.h"

struct fx {
    struct event_base *base;
    int fd;
    struct event *ev;
    int changes;
    int queries;
    int aaaa_queries;
    int fail;         /* answer SERVFAIL */
    const char *a[4]; /* A answer for every name */
    size_t na;
    const char *aaaa; /* AAAA answer, or NULL */
    char got[8][64];
    size_t ngot;
};

static void on_change(void *arg)
{
    struct fx *f = arg;

    f->changes++;
    event_base_loopbreak(f->base);
}

/* Answers one query from the test's records. */
static void on_query(evutil_socket_t fd, short what, void *arg)
{
    struct fx *f = arg;
    uint8_t q[512], out[512];
    struct sockaddr_storage peer;
    socklen_t plen = sizeof(peer);
    ssize_t n = recvfrom(fd, q, sizeof(q), 0, (struct sockaddr *)&peer, &plen);
    size_t i = 12, o;
    uint16_t qtype, count = 0;

    (void)what;
    if (n < 12)
        return;
    while (i < (size_t)n && q[i] != 0)
        i += 1 + q[i];
    qtype = (uint16_t)(q[i + 1] << 8 | q[i + 2]);
    i += 5; /* root label, type, class */
    f->queries++;
    if (qtype == 28)
        f->aaaa_queries++;
    memcpy(out, q, i);
    out[2] = 0x81;
    out[3] = f->fail ? 0x82 : 0x80;
    if (!f->fail)
        count = qtype == 1 ? (uint16_t)f->na : (f->aaaa != NULL ? 1 : 0);
    out[6] = 0;
    out[7] = (uint8_t)count;
    out[8] = out[9] = out[10] = out[11] = 0;
    o = i;
    for (uint16_t k = 0; k < count; k++) {
        uint8_t rr[10] = {
            0xc0, 0x0c, 0, (uint8_t)(qtype == 1 ? 1 : 28), 0, 1, 0, 0, 0, 0};
        memcpy(out + o, rr, sizeof(rr));
        o += sizeof(rr);
        if (qtype == 1) {
            out[o++] = 0;
            out[o++] = 4;
            inet_pton(AF_INET, f->a[k], out + o);
            o += 4;
        } else {
            out[o++] = 0;
            out[o++] = 16;
            inet_pton(AF_INET6, f->aaaa, out + o);
            o += 16;
        }
    }
    sendto(fd, out, o, 0, (struct sockaddr *)&peer, plen);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct sockaddr_in sin = {.sin_family = AF_INET};

    assert_non_null(f);
    f->base = event_base_new();
    f->fd = socket(AF_INET, SOCK_DGRAM, 0);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(f->fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    f->ev = event_new(f->base, f->fd, EV_READ | EV_PERSIST, on_query, f);
    event_add(f->ev, NULL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    event_free(f->ev);
    close(f->fd);
    event_base_free(f->base);
    free(f);
    return 0;
}

static struct dns_cache *cache(struct fx *f)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    struct dns_conf conf = {0};
    struct addr ns;
    char *err = NULL;
    struct dns_cache *c;

    assert_int_equal(getsockname(f->fd, (struct sockaddr *)&sin, &len), 0);
    memset(&ns, 0, sizeof(ns));
    memcpy(&ns.ss, &sin, sizeof(sin));
    ns.len = sizeof(sin);
    conf.nameservers = &ns;
    conf.nnameservers = 1;
    conf.min_refresh_ms = 20;
    conf.timeout_ms = 500;
    c = dns_cache_new(f->base, &conf, on_change, f, &err);
    assert_null(err);
    assert_non_null(c);
    return c;
}

static void collect(void *arg, const char *ip)
{
    struct fx *f = arg;

    assert_true(f->ngot < 8);
    snprintf(f->got[f->ngot++], sizeof(f->got[0]), "%s", ip);
}

static size_t lookup(struct fx *f, struct dns_cache *c, const char *name)
{
    f->ngot = 0;
    return dns_cache_lookup(c, name, collect, f);
}

/* Runs the loop until on_change ran want times (bounded by a timer). */
static void run_until_changes(struct fx *f, int want)
{
    for (int i = 0; i < 200 && f->changes < want; i++) {
        struct timeval tv = {0, 50 * 1000};
        event_base_loopexit(f->base, &tv);
        event_base_dispatch(f->base);
    }
    assert_int_equal(f->changes, want);
}

static void run_until(struct fx *f, int *counter, int want)
{
    for (int i = 0; i < 200 && *counter < want; i++) {
        struct timeval tv = {0, 50 * 1000};
        event_base_loopexit(f->base, &tv);
        event_base_dispatch(f->base);
    }
    assert_true(*counter >= want);
}

static void test_resolve_and_refresh(void **state)
{
    struct fx *f = *state;
    struct dns_cache *c = cache(f);
    struct dns_stats st;

    f->a[0] = "127.0.0.9";
    f->a[1] = "127.0.0.3";
    f->na = 2;
    dns_cache_mark(c);
    assert_int_equal(lookup(f, c, "svc.test"), 0);
    run_until_changes(f, 1);
    assert_int_equal(lookup(f, c, "svc.test"), 2);
    /* Sorted, whatever the server's order. */
    assert_string_equal(f->got[0], "127.0.0.3");
    assert_string_equal(f->got[1], "127.0.0.9");
    /* TTL 0: refreshed after min_refresh; the same answer is no change. */
    run_until(f, &f->queries, 3);
    assert_int_equal(f->changes, 1);
    f->a[0] = "127.0.0.4";
    f->na = 1;
    run_until_changes(f, 2);
    assert_int_equal(lookup(f, c, "svc.test"), 1);
    assert_string_equal(f->got[0], "127.0.0.4");
    /* Failed refreshes keep the last answer. */
    f->fail = 1;
    dns_cache_stats(c, &st);
    {
        int want = f->queries + 3;
        run_until(f, &f->queries, want);
    }
    assert_int_equal(lookup(f, c, "svc.test"), 1);
    assert_string_equal(f->got[0], "127.0.0.4");
    {
        struct dns_stats st2;
        dns_cache_stats(c, &st2);
        assert_true(st2.failures > st.failures);
        assert_int_equal(st2.names, 1);
        assert_int_equal(st2.changes, 2);
    }
    dns_cache_free(c);
}

static void test_aaaa_when_no_a(void **state)
{
    struct fx *f = *state;
    struct dns_cache *c = cache(f);

    f->na = 0;
    f->aaaa = "::1";
    dns_cache_mark(c);
    assert_int_equal(lookup(f, c, "v6.test"), 0);
    run_until_changes(f, 1);
    assert_true(f->aaaa_queries >= 1);
    assert_int_equal(lookup(f, c, "v6.test"), 1);
    assert_string_equal(f->got[0], "::1");
    dns_cache_free(c);
}

static void test_sweep_drops_unused(void **state)
{
    struct fx *f = *state;
    struct dns_cache *c = cache(f);
    struct dns_stats st;

    f->a[0] = "127.0.0.5";
    f->na = 1;
    dns_cache_mark(c);
    lookup(f, c, "a.test");
    lookup(f, c, "b.test");
    dns_cache_sweep(c);
    run_until_changes(f, 1);
    for (int i = 0; i < 50 && f->queries < 2; i++)
        run_until(f, &f->queries, 2);
    /* The next build uses only a.test: b.test goes, even with a refresh
     * in flight. */
    dns_cache_mark(c);
    assert_int_equal(lookup(f, c, "a.test"), 1);
    dns_cache_sweep(c);
    dns_cache_stats(c, &st);
    assert_int_equal(st.names, 1);
    /* Queries in flight when the cache goes are dropped without a call. */
    dns_cache_mark(c);
    lookup(f, c, "c.test");
    dns_cache_free(c);
}

/* dns_resolve(): one answer, through the cache's nameserver, always on
 * a later loop turn. */
struct answer {
    int calls;
    char ip[64];
    int port;
    char why[128];
};

static void on_resolved(void *arg, const struct addr *a, const char *why)
{
    struct answer *r = arg;

    r->calls++;
    if (a != NULL) {
        addr_format(a, r->ip, sizeof(r->ip));
    } else {
        snprintf(r->why, sizeof(r->why), "%s", why);
    }
}

static void test_resolve_once(void **state)
{
    struct fx *f = *state;
    struct dns_cache *c = cache(f);
    struct answer r = {0}, r6 = {0}, lo = {0}, bad = {0}, gone = {0};
    struct dns_stats st;

    f->a[0] = "127.0.0.7";
    f->na = 1;
    assert_non_null(dns_resolve(c, "jwks.test", 8443, on_resolved, &r));
    assert_int_equal(r.calls, 0); /* never inside the call */
    run_until(f, &r.calls, 1);
    assert_string_equal(r.ip, "127.0.0.7:8443");
    assert_int_equal(f->queries, 1);
    /* Not kept: the cache holds no name. */
    dns_cache_stats(c, &st);
    assert_int_equal(st.names, 0);
    assert_int_equal(st.queries, 1);

    /* No A record: AAAA. */
    f->na = 0;
    f->aaaa = "::1";
    assert_non_null(dns_resolve(c, "v6.test", 80, on_resolved, &r6));
    run_until(f, &r6.calls, 1);
    if (r6.ip[0] == 0)
        fail_msg("v6.test: %s (queries %d, aaaa %d)", r6.why, f->queries,
                 f->aaaa_queries);
    assert_string_equal(r6.ip, "[::1]:80");

    /* localhost is never asked. */
    int before = f->queries;
    assert_non_null(dns_resolve(c, "LocalHost.", 9, on_resolved, &lo));
    assert_int_equal(lo.calls, 0);
    run_until(f, &lo.calls, 1);
    assert_string_equal(lo.ip, "127.0.0.1:9");
    assert_int_equal(f->queries, before);

    /* A failure says why. */
    f->fail = 1;
    assert_non_null(dns_resolve(c, "down.test", 80, on_resolved, &bad));
    run_until(f, &bad.calls, 1);
    assert_int_equal(bad.ip[0], '\0');
    assert_true(bad.why[0] != '\0');
    dns_cache_stats(c, &st);
    assert_true(st.failures >= 1);

    /* Cancelled, in flight and answered-but-not-delivered: no call. */
    f->fail = 0;
    f->na = 1;
    dns_query_cancel(dns_resolve(c, "gone.test", 80, on_resolved, &gone));
    dns_query_cancel(dns_resolve(c, "localhost", 80, on_resolved, &gone));
    before = f->queries;
    run_until(f, &f->queries, before + 1);
    {
        struct timeval tv = {0, 100 * 1000};
        event_base_loopexit(f->base, &tv);
        event_base_dispatch(f->base);
    }
    assert_int_equal(gone.calls, 0);
    /* In flight when the cache goes: dropped without a call. */
    assert_non_null(dns_resolve(c, "late.test", 80, on_resolved, &gone));
    dns_cache_free(c);
    assert_int_equal(gone.calls, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resolve_and_refresh, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_aaaa_when_no_a, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep_drops_unused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_resolve_once, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
