#include "config.h"

#include <stdio.h>
#include <string.h>

#include "http/stream.h"
#include "proxy/istio_metrics.h"

/* A bounded appender for the dynamic run. */
struct run {
    char *p;
    size_t n, cap;
};

static void run_lit(struct run *r, const char *s, size_t n)
{
    if (r->n + n >= r->cap)
        n = r->cap - r->n - 1;
    memcpy(r->p + r->n, s, n);
    r->n += n;
}

#define RUN_LIT(r, s) run_lit((r), (s), sizeof(s) - 1)

static void run_uint(struct run *r, uint64_t v)
{
    char d[24];
    size_t i = sizeof(d);

    do {
        d[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    run_lit(r, d + i, sizeof(d) - i);
}

static void run_value(struct run *r, const char *v, size_t n)
{
    if (n == 0) {
        RUN_LIT(r, "unknown");
        return;
    }
    r->n += series_escape(r->p + r->n, r->cap - r->n, v, n);
}

/* destination_service* from the Host: the name itself, its first DNS
 * label, and no namespace (Istio's fallback when the cluster has no
 * service metadata). */
static void run_host(struct run *r, struct slice host)
{
    size_t label = 0;

    if (host.n > 255)
        host.n = 255;
    while (label < host.n && host.p[label] != '.')
        label++;
    RUN_LIT(r, "destination_service=\"");
    run_value(r, host.p, host.n);
    RUN_LIT(r, "\",destination_service_name=\"");
    run_value(r, host.p, label);
    RUN_LIT(r, "\",destination_service_namespace=\"unknown\",");
}

void istio_http_record(struct series_shard *sh, struct series_labels *src,
                       struct series_labels *dst,
                       const struct istio_http_sample *x)
{
    char buf[1024], flags[64];
    struct run r = {buf, 0, sizeof(buf)};
    struct series *s;

    if (dst == NULL || (dst->flags & ISTIO_HOST_FALLBACK))
        run_host(&r, x->authority);
    if (x->grpc)
        RUN_LIT(&r, "request_protocol=\"grpc\",response_code=\"");
    else
        RUN_LIT(&r, "request_protocol=\"http\",response_code=\"");
    run_uint(&r, x->code > 0 ? (uint64_t)x->code : 0);
    RUN_LIT(&r, "\",grpc_response_status=\"");
    if (x->grpc_status >= 0)
        run_uint(&r, (uint64_t)x->grpc_status);
    if (x->flags == 0) {
        RUN_LIT(&r, "\",response_flags=\"-\"");
    } else {
        RUN_LIT(&r, "\",response_flags=\"");
        hstream_flags_str(x->flags, flags, sizeof(flags));
        run_lit(&r, flags, strlen(flags));
        RUN_LIT(&r, "\"");
    }
    s = series_get(sh, src, dst, buf, r.n);
    if (s == NULL)
        return;
    series_add(s, SERIES_REQUESTS, 1);
    series_observe(s, SERIES_DURATION, x->duration_ms);
    series_observe(s, SERIES_REQ_BYTES, x->req_bytes);
    series_observe(s, SERIES_RESP_BYTES, x->resp_bytes);
    if (x->grpc) {
        series_add(s, SERIES_REQ_MSGS, x->req_msgs);
        series_add(s, SERIES_RESP_MSGS, x->resp_msgs);
    }
}

struct series *istio_tcp_series(struct series_shard *sh,
                                struct series_labels *src,
                                struct series_labels *dst, const char *rflags)
{
    char buf[256];
    struct run r = {buf, 0, sizeof(buf)};

    /* No Host on a TCP stream: a cluster without registry entry leaves
     * destination_service unknown. */
    if (dst == NULL || (dst->flags & ISTIO_HOST_FALLBACK))
        RUN_LIT(&r, "destination_service=\"unknown\","
                    "destination_service_name=\"unknown\","
                    "destination_service_namespace=\"unknown\",");
    RUN_LIT(&r, "request_protocol=\"tcp\",response_flags=\"");
    run_lit(&r, rflags, strlen(rflags));
    RUN_LIT(&r, "\"");
    return series_get(sh, src, dst, buf, r.n);
}
