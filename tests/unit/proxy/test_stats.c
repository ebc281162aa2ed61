#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/stats.h"
#include "proxy/stats.h"

/* Every /stats name of a listener, in order: the admin API prints these
 * and the integration tests read them, so a rename breaks users. */
static const char *const names[] = {
    "downstream_cx_total",
    "downstream_cx_active",
    "downstream_cx_destroy",
    "downstream_cx_overflow",
    "downstream_global_cx_overflow",
    "downstream_cx_limit_paused",
    "downstream_cx_overload_paused",
    "downstream_cx_proxy_proto_error",
    "downstream_cx_rx_bytes_total",
    "downstream_cx_tx_bytes_total",
    "upstream_cx_rx_bytes_total",
    "upstream_cx_tx_bytes_total",
    "upstream_cx_connect_fail",
    "upstream_cx_connect_timeout",
    "idle_timeout",
    "no_filter_chain_match",
    "tls_inspector.client_hello_errors",
    "registry_only_refused",
    "auto_passthrough.relayed",
    "auto_passthrough.refused_bad_sni",
    "auto_passthrough.refused_alpn",
    "auto_passthrough.refused_unknown_host",
    "auto_passthrough.refused_unknown_port",
    "auto_passthrough.refused_unknown_subset",
    "auto_passthrough.refused_no_endpoint",
    "hbone.tunnels_opened",
    "hbone.tunnels_active",
    "hbone.refused_bad_request",
    "hbone.refused_unknown_destination",
    "hbone.refused_denied",
    "hbone.refused_no_endpoint",
    "hbone.refused_connect_failed",
    "hbone.refused_too_many_tunnels",
    "hbone.refused_overload",
    "lua.states_created",
    "http.rq_total",
    "http.rq_1xx",
    "http.rq_2xx",
    "http.rq_3xx",
    "http.rq_4xx",
    "http.rq_5xx",
    "http.protocol_errors",
    "http.downstream_buffers_active",
    "http.upstream_errors",
    "http.rbac_denied",
    "http.jwt_authn.denied",
    "http.mirror_sent",
    "http.mirror_failed",
    "http.mirror_skipped",
    "http.rq_idle_timeout",
    "http.rq_header_timeout",
    "http.downstream_rq_overload_close",
    "http.downstream_cx_overload_disable_keepalive",
    "tls.handshakes",
    "tls.fail_version",
    "tls.fail_cipher",
    "tls.fail_certificate",
    "tls.fail_eof",
    "tls.fail_other",
    "tls.fail_timeout",
    "tls.fail_rejected",
    "http2.rapid_reset",
    "http2.flood",
    "http2.continuation_flood",
    "http2.stream_errors",
};
#define NNAMES (sizeof(names) / sizeof(names[0]))

struct seen {
    size_t n;
    char name[NNAMES][64];
    uint64_t value[NNAMES];
};

static void collect(void *arg, const char *prefix, const char *name,
                    uint64_t value)
{
    struct seen *s = arg;

    assert_true(s->n < NNAMES);
    snprintf(s->name[s->n], sizeof(s->name[0]), "%s%s", prefix, name);
    s->value[s->n++] = value;
}

static size_t find(const struct seen *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->name[i], name) == 0)
            return i;
    fail_msg("no counter %s", name);
    return 0;
}

static void test_names_in_stats_order(void **state)
{
    struct stats_block *b = proxy_stats_new("web", 2);
    struct seen seen = {0};

    (void)state;
    assert_non_null(b);
    assert_string_equal(b->name, "web");
    assert_int_equal(b->nshards, 2);
    assert_int_equal(stats_each(b, collect, &seen), 0);
    assert_int_equal(seen.n, NNAMES);
    for (size_t i = 0; i < NNAMES; i++)
        assert_string_equal(seen.name[i], names[i]);
    stats_block_unref(b);
}

/* Each layer's struct lands where its table says: a value written through
 * the typed shard comes out under its own name, summed over workers. */
static void test_each_layer_counts_under_its_names(void **state)
{
    struct stats_block *b = proxy_stats_new("web", 3);
    struct seen seen = {0};

    (void)state;
    for (int w = 0; w < 3; w++) {
        struct proxy_counters *c = proxy_counters(b, w);
        STAT_ADD(&c->listener, accepted, 5);
        STAT_ADD(&c->listener, closed, 1);
        STAT_ADD(&c->relay, registry_only, 2);
        STAT_ADD(&c->http, rq_class[4], 3);
        STAT_ADD(&c->http, bufs_taken, 4);
        STAT_ADD(&c->http, bufs_released, 3);
        STAT_ADD(&c->tls, fail_eof, 7);
        STAT_ADD(&c->h2, continuation, 11);
        STAT_ADD(&c->http, rq_idle_timeout, 13);
        STAT_ADD(&c->http, rq_header_timeout, 17);
    }
    assert_int_equal(stats_each(b, collect, &seen), 0);
    assert_int_equal(seen.value[find(&seen, "downstream_cx_total")], 15);
    assert_int_equal(seen.value[find(&seen, "downstream_cx_active")], 12);
    assert_int_equal(seen.value[find(&seen, "downstream_cx_destroy")], 3);
    assert_int_equal(seen.value[find(&seen, "registry_only_refused")], 6);
    assert_int_equal(seen.value[find(&seen, "http.rq_4xx")], 9);
    assert_int_equal(seen.value[find(&seen, "http.rq_5xx")], 0);
    assert_int_equal(seen.value[find(&seen, "http.downstream_buffers_active")],
                     3);
    assert_int_equal(seen.value[find(&seen, "tls.fail_eof")], 21);
    assert_int_equal(seen.value[find(&seen, "http2.continuation_flood")], 33);
    assert_int_equal(seen.value[find(&seen, "http2.flood")], 0);
    assert_int_equal(seen.value[find(&seen, "http.rq_idle_timeout")], 39);
    assert_int_equal(seen.value[find(&seen, "http.rq_header_timeout")], 51);
    stats_block_unref(b);
}

/* Workers never share a cache line. */
static void test_shards_on_their_own_lines(void **state)
{
    struct stats_block *b = proxy_stats_new("a", 7);

    (void)state;
    for (int w = 0; w < 7; w++)
        assert_int_equal((uintptr_t)proxy_counters(b, w) % STATS_LINE, 0);
    assert_true((uintptr_t)proxy_counters(b, 1) -
                    (uintptr_t)proxy_counters(b, 0) >=
                sizeof(struct proxy_counters));
    stats_block_unref(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_in_stats_order),
        cmocka_unit_test(test_each_layer_counts_under_its_names),
        cmocka_unit_test(test_shards_on_their_own_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
