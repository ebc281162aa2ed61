/*
 * Istio's standard metrics in the Prometheus text format, as Envoy's
 * /stats/prometheus writes them: every worker's series summed by label
 * set, histograms with cumulative buckets on Envoy's default bounds.
 * Main thread, not on the request path.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"
#include "core/buf.h"
#include "core/series.h"

/* One label set, summed over the workers. */
struct merged {
    const char *text;
    int tcp;
    uint64_t c[SERIES_NCOUNTERS];
    struct series_hist h[SERIES_NHISTS];
};

static int by_text(const void *a, const void *b)
{
    const struct series *const *x = a, *const *y = b;

    return strcmp((*x)->text, (*y)->text);
}

static void add_series(struct merged *m, const struct series *s)
{
    for (int k = 0; k < SERIES_NCOUNTERS; k++)
        m->c[k] += series_read(&s->c[k]);
    for (int k = 0; k < SERIES_NHISTS; k++) {
        for (int i = 0; i <= SERIES_NBOUNDS; i++)
            m->h[k].bucket[i] += series_read(&s->h[k].bucket[i]);
        m->h[k].sum += series_read(&s->h[k].sum);
    }
}

static void bound_text(char *out, size_t n, uint64_t x10)
{
    if (x10 % 10 == 0)
        snprintf(out, n, "%" PRIu64, x10 / 10);
    else
        snprintf(out, n, "%" PRIu64 ".%" PRIu64, x10 / 10, x10 % 10);
}

static void counter_family(struct buf *b, const struct merged *m, size_t n,
                           const char *name, const char *help, int tcp,
                           enum series_counter k, int grpc_only)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; i < n; i++) {
        if (m[i].tcp != tcp)
            continue;
        if (grpc_only && strstr(m[i].text, "request_protocol=\"grpc\"") == NULL)
            continue;
        buf_printf(b, "%s{%s} %" PRIu64 "\n", name, m[i].text, m[i].c[k]);
    }
}

static void hist_family(struct buf *b, const struct merged *m, size_t n,
                        const char *name, const char *help,
                        enum series_histogram k)
{
    char le[32];

    buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t i = 0; i < n; i++) {
        const struct series_hist *h = &m[i].h[k];
        uint64_t cum = 0;

        if (m[i].tcp)
            continue;
        for (int j = 0; j < SERIES_NBOUNDS; j++) {
            cum += h->bucket[j];
            bound_text(le, sizeof(le), series_bounds_x10[j]);
            buf_printf(b, "%s_bucket{%s,le=\"%s\"} %" PRIu64 "\n", name,
                       m[i].text, le, cum);
        }
        cum += h->bucket[SERIES_NBOUNDS];
        buf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", name,
                   m[i].text, cum);
        buf_printf(b, "%s_sum{%s} %" PRIu64 "\n", name, m[i].text, h->sum);
        buf_printf(b, "%s_count{%s} %" PRIu64 "\n", name, m[i].text, cum);
    }
}

void admin_render_istio(const struct series_table *t, struct buf *b)
{
    const struct series **all;
    struct merged *m;
    size_t total = 0, n = 0;
    uint64_t overflow = 0;

    if (t == NULL)
        return;
    for (int w = 0; w < t->nshards; w++)
        total += series_count(&t->shards[w]);
    all = calloc(total ? total : 1, sizeof(*all));
    m = calloc(total ? total : 1, sizeof(*m));
    if (all == NULL || m == NULL)
        goto done;
    total = 0;
    for (int w = 0; w < t->nshards; w++) {
        const struct series_shard *sh = &t->shards[w];
        size_t c = series_count(sh);
        for (size_t i = 0; i < c; i++)
            all[total++] = series_at(sh, i);
        overflow += series_read(&sh->overflow);
    }
    qsort(all, total, sizeof(*all), by_text);
    for (size_t i = 0; i < total; i++) {
        if (n == 0 || strcmp(m[n - 1].text, all[i]->text) != 0) {
            m[n].text = all[i]->text;
            m[n].tcp = strstr(all[i]->text, "request_protocol=\"tcp\"") != NULL;
            n++;
        }
        add_series(&m[n - 1], all[i]);
    }
    counter_family(b, m, n, "istio_requests_total",
                   "Requests, by Istio's standard labels.", 0, SERIES_REQUESTS,
                   0);
    hist_family(b, m, n, "istio_request_duration_milliseconds",
                "Request duration in milliseconds.", SERIES_DURATION);
    hist_family(b, m, n, "istio_request_bytes",
                "Request sizes (head and body) in bytes.", SERIES_REQ_BYTES);
    hist_family(b, m, n, "istio_response_bytes",
                "Response sizes (head and body) in bytes.", SERIES_RESP_BYTES);
    counter_family(b, m, n, "istio_request_messages_total",
                   "gRPC messages sent by clients.", 0, SERIES_REQ_MSGS, 1);
    counter_family(b, m, n, "istio_response_messages_total",
                   "gRPC messages sent by servers.", 0, SERIES_RESP_MSGS, 1);
    counter_family(b, m, n, "istio_tcp_connections_opened_total",
                   "TCP connections opened.", 1, SERIES_TCP_OPENED, 0);
    counter_family(b, m, n, "istio_tcp_connections_closed_total",
                   "TCP connections closed.", 1, SERIES_TCP_CLOSED, 0);
    counter_family(b, m, n, "istio_tcp_sent_bytes_total",
                   "Bytes sent to TCP clients, counted as they move.", 1,
                   SERIES_TCP_SENT, 0);
    counter_family(b, m, n, "istio_tcp_received_bytes_total",
                   "Bytes received from TCP clients, counted as they move.", 1,
                   SERIES_TCP_RECEIVED, 0);
done:
    buf_printf(b,
               "# HELP strait_istio_series_overflow_total Requests and "
               "connections not recorded in istio_* metrics: their label "
               "set was new and metrics.maxSeries were in use.\n"
               "# TYPE strait_istio_series_overflow_total counter\n"
               "strait_istio_series_overflow_total %" PRIu64 "\n",
               overflow);
    free(all);
    free(m);
}
