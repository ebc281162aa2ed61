#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/series.h"
#include "http/stream.h"
#include "proxy/istio_metrics.h"

#define LABELS(s, f) series_labels_new((s), strlen(s), (f))

static struct istio_http_sample sample(int code)
{
    struct istio_http_sample x;

    memset(&x, 0, sizeof(x));
    x.authority = (struct slice){"www.example.com:8080", 20};
    x.code = code;
    x.grpc_status = -1;
    return x;
}

/* A registry cluster's run: the dynamic run is protocol, code, gRPC
 * status (empty for HTTP) and flags ("-" for none). */
static void test_http_registry(void **state)
{
    struct series_table *t = series_table_new(1, 10);
    struct series_labels *src = LABELS("reporter=\"source\"", 0);
    struct series_labels *dst = LABELS("destination_service=\"r\"", 0);
    struct istio_http_sample x = sample(200);
    const struct series *s;

    (void)state;
    x.duration_ms = 3;
    x.req_bytes = 100;
    x.resp_bytes = 3000;
    istio_http_record(&t->shards[0], src, dst, &x);
    istio_http_record(&t->shards[0], src, dst, &x);
    assert_int_equal(series_count(&t->shards[0]), 1);
    s = series_at(&t->shards[0], 0);
    assert_string_equal(s->text, "reporter=\"source\",destination_service="
                                 "\"r\",request_protocol=\"http\","
                                 "response_code=\"200\",grpc_response_status="
                                 "\"\",response_flags=\"-\"");
    assert_int_equal(s->c[SERIES_REQUESTS], 2);
    assert_int_equal(s->h[SERIES_DURATION].bucket[2], 2); /* le 5 */
    assert_int_equal(s->h[SERIES_RESP_BYTES].sum, 6000);
    /* HTTP records no messages. */
    assert_int_equal(s->c[SERIES_REQ_MSGS], 0);

    x = sample(503);
    x.flags = HFLAG_UF | HFLAG_URX;
    istio_http_record(&t->shards[0], src, dst, &x);
    s = series_at(&t->shards[0], 1);
    assert_non_null(strstr(s->text, "response_code=\"503\",grpc_response_"
                                    "status=\"\",response_flags=\"UF,URX\""));
    series_table_free(t);
    series_labels_unref(src);
    series_labels_unref(dst);
}

/* Host fallback (and no cluster at all): destination_service is the
 * Host, its name the first DNS label; gRPC status and messages. */
static void test_http_host_fallback_and_grpc(void **state)
{
    struct series_table *t = series_table_new(1, 10);
    struct series_labels *fb =
        LABELS("destination_app=\"unknown\"", ISTIO_HOST_FALLBACK);
    struct istio_http_sample x = sample(200);
    const struct series *s;

    (void)state;
    x.grpc = 1;
    x.grpc_status = 14;
    x.req_msgs = 2;
    x.resp_msgs = 5;
    istio_http_record(&t->shards[0], NULL, fb, &x);
    s = series_at(&t->shards[0], 0);
    assert_string_equal(
        s->text, "destination_app=\"unknown\",destination_service="
                 "\"www.example.com:8080\",destination_service_name=\"www\","
                 "destination_service_namespace=\"unknown\","
                 "request_protocol=\"grpc\",response_code=\"200\","
                 "grpc_response_status=\"14\",response_flags=\"-\"");
    assert_int_equal(s->c[SERIES_REQ_MSGS], 2);
    assert_int_equal(s->c[SERIES_RESP_MSGS], 5);
    /* No cluster: the same fallback, without destination labels. */
    x = sample(404);
    x.authority = (struct slice){"", 0};
    x.flags = HFLAG_NR;
    istio_http_record(&t->shards[0], NULL, NULL, &x);
    s = series_at(&t->shards[0], 1);
    assert_string_equal(s->text, "destination_service=\"unknown\","
                                 "destination_service_name=\"unknown\","
                                 "destination_service_namespace=\"unknown\","
                                 "request_protocol=\"http\",response_code="
                                 "\"404\",grpc_response_status=\"\","
                                 "response_flags=\"NR\"");
    series_table_free(t);
    series_labels_unref(fb);
}

static void test_tcp_series(void **state)
{
    struct series_table *t = series_table_new(1, 2);
    struct series_labels *dst = LABELS("destination_service=\"db\"", 0);
    struct series *a, *b;

    (void)state;
    a = istio_tcp_series(&t->shards[0], NULL, dst, "-");
    assert_string_equal(a->text, "destination_service=\"db\","
                                 "request_protocol=\"tcp\",response_flags="
                                 "\"-\"");
    b = istio_tcp_series(&t->shards[0], NULL, dst, "UF");
    assert_ptr_not_equal(a, b);
    assert_ptr_equal(istio_tcp_series(&t->shards[0], NULL, dst, "-"), a);
    /* The bound holds here too. */
    assert_null(istio_tcp_series(&t->shards[0], NULL, dst, "SI"));
    series_table_free(t);
    series_labels_unref(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_registry),
        cmocka_unit_test(test_http_host_fallback_and_grpc),
        cmocka_unit_test(test_tcp_series),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
