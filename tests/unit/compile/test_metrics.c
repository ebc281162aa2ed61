#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compile/metrics.h"
#include "config/bootstrap.h"
#include "core/series.h"
#include "proxy/istio_metrics.h"

static struct bootstrap *parse(const char *y)
{
    char *err = NULL;
    struct bootstrap *bs = bootstrap_parse(y, strlen(y), "b.yaml", &err);

    if (bs == NULL)
        fail_msg("%s", err);
    return bs;
}

/* The node's run: Istio's source labels, canonical names by Istio's
 * order of labels, the SPIFFE ID only with a mesh identity, extra labels
 * last, escaped. */
static void test_source_labels(void **state)
{
    struct bootstrap *bs =
        parse("node: {name: gw-1, namespace: edge, serviceAccount: gw,\n"
              "  labels: {app: ingress, version: v2,\n"
              "    service.istio.io/canonical-name: front}}\n"
              "metrics: {extraLabels: {env: 'a\"b'}}\n");
    struct series_labels *l = metrics_source_labels(bs);

    (void)state;
    assert_string_equal(
        l->text,
        "reporter=\"source\",source_workload=\"gw-1\","
        "source_canonical_service=\"front\",source_canonical_revision=\"v2\","
        "source_workload_namespace=\"edge\",source_principal=\"unknown\","
        "source_app=\"ingress\",source_version=\"v2\","
        "source_cluster=\"unknown\",connection_security_policy=\"unknown\","
        "env=\"a\\\"b\"");
    series_labels_unref(l);
    bootstrap_free(bs);

    bs = parse("node: {name: n, serviceAccount: sa}\n"
               "trustDomain: example.org\nca: {enabled: true, dir: /tmp}\n");
    l = metrics_source_labels(bs);
    assert_non_null(strstr(l->text, "source_principal=\"spiffe://example.org/"
                                    "ns/istio-system/sa/sa\""));
    /* No labels: the workload name and "latest". */
    assert_non_null(strstr(l->text, "source_canonical_service=\"n\","
                                    "source_canonical_revision=\"latest\""));
    series_labels_unref(l);
    bootstrap_free(bs);
}

static void test_dest_labels(void **state)
{
    char app[] = "app", reviews[] = "reviews", version[] = "version",
         v1[] = "v1";
    struct conf_strpair kv[] = {{app, reviews}, {version, v1}};
    struct conf_strmap labels = {kv, 2};
    struct metrics_dest d = {0};
    struct series_labels *l;

    (void)state;
    d.service = "reviews.ns.svc.cluster.local";
    d.service_name = "reviews";
    d.service_ns = "ns";
    d.workload = "reviews-v1";
    d.workload_ns = "ns";
    d.labels = &labels;
    l = metrics_dest_labels(&d);
    assert_int_equal(l->flags, 0);
    assert_string_equal(
        l->text,
        "destination_workload=\"reviews-v1\",destination_workload_namespace="
        "\"ns\",destination_principal=\"unknown\",destination_app="
        "\"reviews\",destination_version=\"v1\","
        "destination_canonical_service=\"reviews\","
        "destination_canonical_revision=\"v1\",destination_cluster="
        "\"unknown\",destination_service=\"reviews.ns.svc.cluster.local\","
        "destination_service_name=\"reviews\","
        "destination_service_namespace=\"ns\"");
    series_labels_unref(l);
    /* Nothing known: all unknown, and the Host stands in. */
    memset(&d, 0, sizeof(d));
    l = metrics_dest_labels(&d);
    assert_int_equal(l->flags, ISTIO_HOST_FALLBACK);
    assert_null(strstr(l->text, "destination_service="));
    assert_non_null(strstr(l->text, "destination_canonical_service="
                                    "\"unknown\",destination_canonical_"
                                    "revision=\"unknown\""));
    series_labels_unref(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_source_labels),
        cmocka_unit_test(test_dest_labels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
