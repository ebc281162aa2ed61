/*
 * Unit tests for src/control/etcd_proto.c: the answers of Debian's etcd
 * 3.4 JSON gateway as recorded (next-wave.md section 6.2), proto3's
 * missing fields, int64 strings, base64, errors, and the request bodies.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "control/etcd_proto.h"
#include "core/arena.h"
#include "core/buf.h"

#define S(lit) lit, sizeof(lit) - 1

static void test_range(void **state)
{
    struct arena a;
    struct etcd_range r;
    const char *why = NULL;
    static const char body[] =
        "{\"header\":{\"cluster_id\":\"15118495548433857066\",\"member_id\":"
        "\"13668033151171901709\",\"revision\":\"6\",\"raft_term\":\"2\"},"
        "\"kvs\":[{\"key\":\"L3N0cmFpdC9r\",\"create_revision\":\"2\","
        "\"mod_revision\":\"6\",\"version\":\"5\",\"value\":\"djU=\"},"
        "{\"key\":\"L3N0cmFpdC9rMg==\",\"create_revision\":\"8\","
        "\"mod_revision\":\"8\",\"version\":\"1\"}],\"count\":\"2\"}";

    (void)state;
    arena_init(&a, 4096);
    assert_int_equal(etcd_parse_range(&a, S(body), &r, &why), 0);
    assert_int_equal(r.header.revision, 6);
    assert_true(r.header.member_id == UINT64_C(13668033151171901709));
    assert_true(r.header.cluster_id == UINT64_C(15118495548433857066));
    assert_int_equal(r.n, 2);
    assert_int_equal(r.count, 2);
    assert_string_equal(r.kvs[0].key.p, "/strait/k");
    assert_int_equal(r.kvs[0].value.n, 2);
    assert_memory_equal(r.kvs[0].value.p, "v5", 2);
    assert_int_equal(r.kvs[0].mod_revision, 6);
    assert_int_equal(r.kvs[0].version, 5);
    /* No "value": the empty value. */
    assert_string_equal(r.kvs[1].key.p, "/strait/k2");
    assert_int_equal(r.kvs[1].value.n, 0);
    arena_dispose(&a);

    /* An empty prefix: no kvs, no count. */
    arena_init(&a, 4096);
    assert_int_equal(
        etcd_parse_range(&a, S("{\"header\":{\"revision\":\"9\"}}"), &r, &why),
        0);
    assert_int_equal(r.n, 0);
    assert_int_equal(r.header.revision, 9);
    arena_dispose(&a);
}

static void test_watch(void **state)
{
    struct arena a;
    struct etcd_watch_msg m;
    const char *why = NULL;

    (void)state;
    arena_init(&a, 4096);
    assert_int_equal(
        etcd_parse_watch(&a,
                         S("{\"result\":{\"header\":{\"revision\":\"6\"},"
                           "\"created\":true}}"),
                         &m, &why),
        0);
    assert_true(m.created);
    assert_false(m.canceled);
    assert_int_equal(m.n, 0);

    /* A compaction cancel has no header.revision. */
    assert_int_equal(
        etcd_parse_watch(&a,
                         S("{\"result\":{\"header\":{\"cluster_id\":\"1\","
                           "\"member_id\":\"2\",\"raft_term\":\"2\"},"
                           "\"canceled\":true,\"compact_revision\":\"4\"}}"),
                         &m, &why),
        0);
    assert_true(m.canceled);
    assert_int_equal(m.compact_revision, 4);
    assert_int_equal(m.header.revision, 0);

    /* A PUT has no type; a DELETE has no value. */
    assert_int_equal(
        etcd_parse_watch(
            &a,
            S("{\"result\":{\"header\":{\"revision\":\"7\"},\"events\":["
              "{\"kv\":{\"key\":\"L3N0cmFpdC9r\",\"mod_revision\":\"6\","
              "\"value\":\"djU=\"}},"
              "{\"type\":\"DELETE\",\"kv\":{\"key\":\"L3N0cmFpdC9r\","
              "\"mod_revision\":\"7\"},\"prev_kv\":{\"key\":\"L3N0cmFpdC9r\"}}"
              "]}}"),
            &m, &why),
        0);
    assert_int_equal(m.n, 2);
    assert_int_equal(m.events[0].type, ETCD_PUT);
    assert_int_equal(m.events[1].type, ETCD_DELETE);
    assert_int_equal(m.events[1].kv.mod_revision, 7);
    assert_int_equal(m.events[1].kv.value.n, 0);

    /* A progress notification: a header, nothing else. */
    assert_int_equal(
        etcd_parse_watch(
            &a, S("{\"result\":{\"header\":{\"revision\":\"12\"}}}"), &m, &why),
        0);
    assert_false(m.created);
    assert_int_equal(m.n, 0);
    assert_int_equal(m.header.revision, 12);

    /* The gateway's stream error. */
    assert_int_equal(
        etcd_parse_watch(&a,
                         S("{\"error\":{\"grpc_code\":16,\"http_code\":401,"
                           "\"message\":\"etcdserver: invalid auth token\"}}"),
                         &m, &why),
        0);
    assert_true(m.is_error);
    assert_int_equal(m.error_code, 16);
    assert_int_equal(m.error.n, strlen("etcdserver: invalid auth token"));
    arena_dispose(&a);
}

static void test_refused(void **state)
{
    struct arena a;
    struct etcd_watch_msg m;
    struct etcd_range r;
    const char *why = NULL;
    static const char *const bad[] = {
        "",
        "[]",
        "{}",
        "{\"result\":[]}",
        "{\"result\":{\"events\":{}}}",
        "{\"result\":{\"events\":[{\"type\":\"PUT\"}]}}",
        "{\"result\":{\"events\":[{\"type\":\"FOO\",\"kv\":{}}]}}",
        "{\"result\":{\"header\":{\"revision\":\"1x\"}}}",
        "{\"result\":{\"header\":{\"revision\":\"99999999999999999999\"}}}",
        "{\"result\":{\"header\":{\"revision\":true}}}",
        "{\"result\":{\"created\":\"yes\"}}",
        "{\"result\":{\"events\":[{\"kv\":{\"key\":\"a$==\"}}]}}",
        "{\"result\":{\"events\":[{\"kv\":{\"key\":\"a\"}}]}}",
        NULL,
    };

    (void)state;
    arena_init(&a, 4096);
    for (int i = 0; bad[i] != NULL; i++) {
        why = NULL;
        assert_int_equal(etcd_parse_watch(&a, bad[i], strlen(bad[i]), &m, &why),
                         -1);
        assert_non_null(why);
    }
    assert_int_equal(
        etcd_parse_range(&a, S("{\"kvs\":[{\"key\":1}]}"), &r, &why), -1);
    /* A bare number is a valid int64 too. */
    assert_int_equal(
        etcd_parse_range(&a, S("{\"header\":{\"revision\":42}}"), &r, &why), 0);
    assert_int_equal(r.header.revision, 42);
    arena_dispose(&a);
}

static void test_other_answers(void **state)
{
    struct arena a;
    struct etcd_txn t;
    struct etcd_error e;
    struct slice tok;
    const char *why = NULL;

    (void)state;
    arena_init(&a, 4096);
    assert_int_equal(
        etcd_parse_txn(&a,
                       S("{\"header\":{\"revision\":\"5\"},\"succeeded\":true,"
                         "\"responses\":[{\"response_put\":{}}]}"),
                       &t, &why),
        0);
    assert_true(t.succeeded);
    assert_int_equal(t.header.revision, 5);
    assert_int_equal(etcd_parse_txn(&a, S("{\"header\":{}}"), &t, &why), 0);
    assert_false(t.succeeded);
    assert_int_equal(etcd_parse_auth(&a,
                                     S("{\"header\":{},\"token\":\"abc.12\"}"),
                                     &tok, &why),
                     0);
    assert_int_equal(tok.n, 6);
    assert_int_equal(etcd_parse_auth(&a, S("{\"header\":{}}"), &tok, &why), -1);
    assert_int_equal(
        etcd_parse_error(&a,
                         S("{\"error\":\"etcdserver: mvcc: required revision "
                           "has been compacted\",\"message\":\"etcdserver: "
                           "mvcc: required revision has been compacted\","
                           "\"code\":11}"),
                         &e, &why),
        0);
    assert_int_equal(e.code, 11);
    assert_true(e.message.n > 10);
    arena_dispose(&a);
}

static void test_requests(void **state)
{
    struct buf b;
    char end[16];
    size_t n;
    struct etcd_txn_op ops[2] = {
        {SLICE_LIT("/s/a"), SLICE_LIT("xy"), 0, 0},
        {SLICE_LIT("/s/b"), SLICE_NULL, 1, 7},
    };

    (void)state;
    n = etcd_prefix_end("/strait/", 8, end);
    assert_int_equal(n, 8);
    assert_memory_equal(end, "/strait0", 8);
    assert_int_equal(etcd_prefix_end("a\xff\xff", 3, end), 1);
    assert_int_equal(end[0], 'b');
    assert_int_equal(etcd_prefix_end("\xff", 1, end), 0);

    buf_init(&b, 4096);
    assert_int_equal(
        etcd_req_range(&b, SLICE_LIT("/strait/"), (struct slice){end, 0}, 0),
        0);
    assert_string_equal(buf_cstr(&b),
                        "{\"key\":\"L3N0cmFpdC8=\",\"range_end\":\"AA==\"}");
    buf_dispose(&b);
    buf_init(&b, 4096);
    assert_int_equal(
        etcd_req_watch(&b, SLICE_LIT("/strait/"), SLICE_LIT("/strait0"), 7, 1),
        0);
    assert_string_equal(buf_cstr(&b),
                        "{\"create_request\":{\"key\":\"L3N0cmFpdC8=\","
                        "\"range_end\":\"L3N0cmFpdDA=\",\"start_revision\":"
                        "\"7\",\"progress_notify\":true}}");
    buf_dispose(&b);
    buf_init(&b, 4096);
    assert_int_equal(etcd_req_txn(&b, ops, 2), 0);
    assert_string_equal(
        buf_cstr(&b),
        "{\"compare\":[{\"key\":\"L3MvYQ==\",\"target\":\"MOD\",\"result\":"
        "\"EQUAL\",\"mod_revision\":\"0\"},{\"key\":\"L3MvYg==\",\"target\":"
        "\"MOD\",\"result\":\"EQUAL\",\"mod_revision\":\"7\"}],\"success\":["
        "{\"request_put\":{\"key\":\"L3MvYQ==\",\"value\":\"eHk=\"}},"
        "{\"request_delete_range\":{\"key\":\"L3MvYg==\"}}]}");
    buf_dispose(&b);
    buf_init(&b, 4096);
    assert_int_equal(etcd_req_auth(&b, "root", "p\"w"), 0);
    assert_string_equal(buf_cstr(&b),
                        "{\"name\":\"root\",\"password\":\"p\\\"w\"}");
    buf_dispose(&b);
}

static void test_base64_roundtrip(void **state)
{
    struct arena a;
    struct etcd_range r;
    const char *why = NULL;
    char all[256];
    struct buf b;

    (void)state;
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    for (size_t len = 0; len < 6; len++) {
        buf_init(&b, 4096);
        buf_puts(&b, "{\"kvs\":[{\"key\":\"L2s=\",\"value\":\"");
        etcd_b64(&b, (struct slice){all + 250, len});
        buf_puts(&b, "\"}]}");
        arena_init(&a, 4096);
        assert_int_equal(
            etcd_parse_range(&a, buf_ptr(&b), buf_len(&b), &r, &why), 0);
        assert_int_equal(r.kvs[0].value.n, len);
        if (len > 0)
            assert_memory_equal(r.kvs[0].value.p, all + 250, len);
        arena_dispose(&a);
        buf_dispose(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_watch),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_other_answers),
        cmocka_unit_test(test_requests),
        cmocka_unit_test(test_base64_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
