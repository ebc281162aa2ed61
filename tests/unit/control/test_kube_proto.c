/*
 * Unit tests for src/control/kube_proto.c: list answers (items without
 * apiVersion and kind, continue tokens), watch events of every type, the
 * 410 Expired Status inside a 200 stream, and what is refused.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "control/kube_proto.h"
#include "core/arena.h"
#include "core/buf.h"

#define S(lit) lit, sizeof(lit) - 1

static void test_list(void **state)
{
    struct arena a;
    struct kube_list l;
    const char *why = NULL;
    static const char body[] =
        "{\"kind\":\"ServiceList\",\"apiVersion\":\"v1\",\"metadata\":"
        "{\"resourceVersion\":\"8812\",\"continue\":\"eyJ2Ijo\"},\"items\":["
        "{\"metadata\":{\"name\":\"web\",\"namespace\":\"shop\","
        "\"resourceVersion\":\"17\",\"managedFields\":[{\"manager\":\"k\"}]},"
        "\"spec\":{\"ports\":[{\"port\":80}]},\"status\":{\"lb\":{}}}]}";

    (void)state;
    arena_init(&a, 4096);
    assert_int_equal(kube_parse_list(&a, S(body), "v1", "Service", 0, &l, &why),
                     0);
    assert_string_equal(l.rv, "8812");
    assert_string_equal(l.cont, "eyJ2Ijo");
    assert_int_equal(l.n, 1);
    assert_string_equal(l.items[0].ns, "shop");
    assert_string_equal(l.items[0].name, "web");
    assert_string_equal(l.items[0].rv, "17");
    /* apiVersion and kind first; no managedFields, no resourceVersion
     * (kept apart), no status. */
    assert_string_equal(
        l.items[0].json,
        "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":"
        "\"web\",\"namespace\":\"shop\"},\"spec\":"
        "{\"ports\":[{\"port\":80}]}}");
    assert_int_equal(l.items[0].json_n, strlen(l.items[0].json));
    arena_dispose(&a);

    /* The last page, and an empty one: no continue, items null. */
    arena_init(&a, 4096);
    assert_int_equal(kube_parse_list(&a,
                                     S("{\"metadata\":{\"resourceVersion\":"
                                       "\"9\"},\"items\":null}"),
                                     "v1", "Service", 0, &l, &why),
                     0);
    assert_int_equal(l.n, 0);
    assert_string_equal(l.cont, "");
    arena_dispose(&a);
}

/* A Pod is held as the fields the gateway reads: its names and labels,
 * nodeName, serviceAccountName, hostNetwork, phase and IPs; its
 * containers, volumes, annotations, conditions and the rest are never
 * kept, and a status-only change of anything else writes the same JSON. */
static void test_pod_is_kept_as_what_is_read(void **state)
{
    struct arena a;
    struct kube_event ev;
    const char *why = NULL;
    static const char ev1[] =
        "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":"
        "\"v1\",\"metadata\":{\"name\":\"reviews-v1\",\"namespace\":\"bi\","
        "\"resourceVersion\":\"9\",\"uid\":\"u\",\"labels\":{\"app\":"
        "\"reviews\",\"version\":\"v1\"},\"annotations\":{\"big\":\"xxxx\"},"
        "\"ownerReferences\":[{\"kind\":\"ReplicaSet\"}],\"managedFields\":"
        "[{}]},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\","
        "\"env\":[{\"name\":\"A\",\"value\":\"B\"}]}],\"volumes\":[],"
        "\"nodeName\":\"n1\",\"serviceAccountName\":\"sa\"},\"status\":{"
        "\"phase\":\"Running\",\"podIP\":\"10.1.0.1\",\"podIPs\":[{\"ip\":"
        "\"10.1.0.1\"}],\"conditions\":[{\"type\":\"Ready\"}],"
        "\"containerStatuses\":[{\"restartCount\":%d}]}}}";
    char text[1024];
    char *first;

    (void)state;
    arena_init(&a, 4096);
    snprintf(text, sizeof(text), ev1, 0);
    assert_int_equal(
        kube_parse_event(&a, text, strlen(text), "v1", "Pod", 0, &ev, &why), 0);
    assert_string_equal(
        ev.obj.json,
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":"
        "\"reviews-v1\",\"namespace\":\"bi\",\"labels\":{\"app\":\"reviews\","
        "\"version\":\"v1\"}},\"spec\":{\"nodeName\":\"n1\","
        "\"serviceAccountName\":\"sa\"},\"status\":{\"phase\":\"Running\","
        "\"podIP\":\"10.1.0.1\",\"podIPs\":[{\"ip\":\"10.1.0.1\"}]}}");
    assert_string_equal(ev.obj.rv, "9");
    first = strdup(ev.obj.json);
    assert_non_null(first);
    /* A container restart (status only) is the same Pod to strait. */
    snprintf(text, sizeof(text), ev1, 3);
    assert_int_equal(
        kube_parse_event(&a, text, strlen(text), "v1", "Pod", 0, &ev, &why), 0);
    assert_string_equal(ev.obj.json, first);
    free(first);
    arena_dispose(&a);
}

static void test_list_refused(void **state)
{
    static const char *const bad[] = {
        "[]",
        "{\"items\":{}}",
        "{\"metadata\":{\"resourceVersion\":9}}",
        "{\"items\":[{\"metadata\":{\"namespace\":\"a\"}}]}",
        "{\"items\":[7]}",
        "{\"items\":[{\"metadata\":[]}]}",
        "{",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        struct arena a;
        struct kube_list l;
        const char *why = NULL;
        arena_init(&a, 4096);
        assert_int_equal(kube_parse_list(&a, bad[i], strlen(bad[i]), "v1",
                                         "Service", 0, &l, &why),
                         -1);
        assert_non_null(why);
        arena_dispose(&a);
    }
}

static void test_events(void **state)
{
    struct arena a;
    struct kube_event ev;
    const char *why = NULL;

    (void)state;
    arena_init(&a, 4096);
    assert_int_equal(
        kube_parse_event(
            &a,
            S("{\"type\":\"MODIFIED\",\"object\":{\"apiVersion\":"
              "\"networking.istio.io/v1\",\"kind\":\"Gateway\",\"metadata\":"
              "{\"name\":\"gw\",\"namespace\":\"n\",\"resourceVersion\":\"5"
              "\"},\"spec\":{\"selector\":{\"a\":\"b\\u00e9\"}}}}"),
            "networking.istio.io/v1", "Gateway", 0, &ev, &why),
        0);
    assert_int_equal(ev.type, KUBE_MODIFIED);
    assert_string_equal(ev.obj.name, "gw");
    assert_string_equal(ev.obj.rv, "5");
    /* apiVersion and kind once, first. */
    assert_string_equal(ev.obj.json,
                        "{\"apiVersion\":\"networking.istio.io/v1\",\"kind\":"
                        "\"Gateway\",\"metadata\":{\"name\":\"gw\","
                        "\"namespace\":\"n\"},"
                        "\"spec\":{\"selector\":{\"a\":\"b\xc3\xa9\"}}}");
    assert_int_equal(
        kube_parse_event(&a,
                         S("{\"type\":\"DELETED\",\"object\":{\"metadata\":{"
                           "\"name\":\"gw\",\"namespace\":\"n\","
                           "\"resourceVersion\":\"6\"}}}"),
                         "v1", "Service", 0, &ev, &why),
        0);
    assert_int_equal(ev.type, KUBE_DELETED);
    /* A bookmark: only the resourceVersion. */
    assert_int_equal(
        kube_parse_event(&a,
                         S("{\"type\":\"BOOKMARK\",\"object\":{\"kind\":"
                           "\"Service\",\"metadata\":{\"resourceVersion\":"
                           "\"12345\"}}}"),
                         "v1", "Service", 0, &ev, &why),
        0);
    assert_int_equal(ev.type, KUBE_BOOKMARK);
    assert_string_equal(ev.obj.rv, "12345");
    /* 410 Expired inside a 200 stream. */
    assert_int_equal(
        kube_parse_event(
            &a,
            S("{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
              "\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
              "\"message\":\"too old resource version: 1 (6)\",\"reason\":"
              "\"Expired\",\"code\":410}}"),
            "v1", "Service", 0, &ev, &why),
        0);
    assert_int_equal(ev.type, KUBE_ERROR);
    assert_int_equal(ev.status.code, 410);
    assert_true(slice_eq_str(ev.status.reason, "Expired"));
    arena_dispose(&a);
}

static void test_events_refused(void **state)
{
    static const char *const bad[] = {
        "{\"type\":\"ADDED\"}",
        "{\"type\":\"SYNC\",\"object\":{}}",
        "{\"object\":{}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{}}}",
        "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{}}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":1}}}",
        "{\"type\":\"ERROR\",\"object\":7}",
        "",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        struct arena a;
        struct kube_event ev;
        const char *why = NULL;
        arena_init(&a, 4096);
        assert_int_equal(kube_parse_event(&a, bad[i], strlen(bad[i]), "v1",
                                          "Service", 0, &ev, &why),
                         -1);
        assert_non_null(why);
        arena_dispose(&a);
    }
}

static void test_status_and_escape(void **state)
{
    struct arena a;
    struct kube_status st;
    struct buf b;
    const char *why = NULL;

    (void)state;
    arena_init(&a, 4096);
    assert_int_equal(kube_parse_status(&a,
                                       S("{\"kind\":\"Status\",\"code\":404,"
                                         "\"reason\":\"NotFound\"}"),
                                       &st, &why),
                     0);
    assert_int_equal(st.code, 404);
    assert_true(slice_eq_str(st.reason, "NotFound"));
    arena_dispose(&a);

    buf_init(&b, 1024);
    assert_int_equal(kube_url_escape(&b, "type!=helm.sh/release.v1,a=b c"), 0);
    assert_string_equal(buf_cstr(&b),
                        "type%21%3Dhelm.sh%2Frelease.v1%2Ca%3Db%20c");
    buf_dispose(&b);
}

/* A Node's heartbeat (a new status and resourceVersion, nothing else)
 * writes the same JSON, so the cache holds it as unchanged and nothing is
 * rebuilt; a label change writes new JSON. */
static void test_status_only_change_writes_the_same_json(void **state)
{
    struct arena a;
    struct kube_event e1, e2, e3;
    const char *why = NULL;

    (void)state;
    arena_init(&a, 4096);
    assert_int_equal(
        kube_parse_event(&a,
                         S("{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{"
                           "\"name\":\"n1\",\"resourceVersion\":\"7\","
                           "\"labels\":{\"topology.kubernetes.io/zone\":\"a\"}"
                           "},\"status\":{\"conditions\":[{\"type\":\"Ready\","
                           "\"lastHeartbeatTime\":\"t1\"}]}}}"),
                         "v1", "Node", 0, &e1, &why),
        0);
    assert_int_equal(
        kube_parse_event(&a,
                         S("{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{"
                           "\"name\":\"n1\",\"resourceVersion\":\"8\","
                           "\"labels\":{\"topology.kubernetes.io/zone\":\"a\"}"
                           "},\"status\":{\"conditions\":[{\"type\":\"Ready\","
                           "\"lastHeartbeatTime\":\"t2\"}]}}}"),
                         "v1", "Node", 0, &e2, &why),
        0);
    assert_int_equal(
        kube_parse_event(&a,
                         S("{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{"
                           "\"name\":\"n1\",\"resourceVersion\":\"9\","
                           "\"labels\":{\"topology.kubernetes.io/zone\":\"b\"}"
                           "}}}"),
                         "v1", "Node", 0, &e3, &why),
        0);
    assert_string_equal(e1.obj.rv, "7");
    assert_string_equal(e2.obj.rv, "8");
    assert_string_equal(e1.obj.json, e2.obj.json);
    assert_string_equal(e1.obj.json,
                        "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":"
                        "{\"name\":\"n1\",\"labels\":{\"topology.kubernetes."
                        "io/zone\":\"a\"}}}");
    assert_string_not_equal(e1.obj.json, e3.obj.json);
    arena_dispose(&a);
}

/* An item nested past KUBE_MAX_JSON_DEPTH is named and marked bad; the
 * list and the event around it still read (it used to fail the whole
 * list, and so the kind's watch for the whole cluster). */
static void test_deep_object_is_named_not_fatal(void **state)
{
    struct arena a;
    struct kube_list l;
    struct kube_event ev;
    struct buf b;
    const char *why = NULL;

    (void)state;
    buf_init(&b, 1 << 20);
    buf_puts(&b, "{\"metadata\":{\"resourceVersion\":\"9\"},\"items\":["
                 "{\"metadata\":{\"name\":\"deep\",\"namespace\":\"ns\"},"
                 "\"spec\":");
    for (int i = 0; i < 70; i++)
        buf_puts(&b, "{\"a\":[\"]}\",");
    buf_puts(&b, "1");
    for (int i = 0; i < 70; i++)
        buf_puts(&b, "]}");
    buf_puts(&b, "},{\"metadata\":{\"name\":\"ok\",\"namespace\":\"ns\"}}]}");
    arena_init(&a, 4096);
    assert_int_equal(kube_parse_list(&a, buf_ptr(&b), buf_len(&b), "v1",
                                     "Service", 0, &l, &why),
                     0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.items[0].name, "deep");
    assert_string_equal(l.items[0].ns, "ns");
    assert_non_null(l.items[0].bad);
    assert_non_null(strstr(l.items[0].bad, "64"));
    assert_null(l.items[1].bad);
    assert_string_equal(l.rv, "9");
    arena_dispose(&a);

    /* The same object in a watch event. */
    buf_truncate(&b, 0);
    buf_puts(&b, "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":"
                 "\"deep\",\"namespace\":\"ns\",\"resourceVersion\":\"10\"},"
                 "\"spec\":");
    for (int i = 0; i < 100; i++)
        buf_puts(&b, "[");
    for (int i = 0; i < 100; i++)
        buf_puts(&b, "]");
    buf_puts(&b, "}}");
    arena_init(&a, 4096);
    assert_int_equal(kube_parse_event(&a, buf_ptr(&b), buf_len(&b), "v1",
                                      "Service", 0, &ev, &why),
                     0);
    assert_int_equal(ev.type, KUBE_ADDED);
    assert_string_equal(ev.obj.name, "deep");
    assert_string_equal(ev.obj.rv, "10");
    assert_non_null(ev.obj.bad);
    arena_dispose(&a);

    /* Unbalanced inside the part skipped: still refused. */
    buf_truncate(&b, 0);
    buf_puts(&b, "{\"type\":\"ADDED\",\"object\":{\"spec\":");
    for (int i = 0; i < 100; i++)
        buf_puts(&b, "[");
    buf_puts(&b, "\"]]]]\"}}");
    arena_init(&a, 4096);
    assert_int_equal(kube_parse_event(&a, buf_ptr(&b), buf_len(&b), "v1",
                                      "Service", 0, &ev, &why),
                     -1);
    arena_dispose(&a);
    buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_pod_is_kept_as_what_is_read),
        cmocka_unit_test(test_list_refused),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_events_refused),
        cmocka_unit_test(test_status_and_escape),
        cmocka_unit_test(test_status_only_change_writes_the_same_json),
        cmocka_unit_test(test_deep_object_is_named_not_fatal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
