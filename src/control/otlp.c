/*
 * OTLP/HTTP JSON span export. See otlp.h.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "control/fetch.h"
#include "control/otlp.h"
#include "core/buf.h"
#include "core/json.h"
#include "core/log.h"
#include "event/spanq.h"
#include "event/timer.h"

/* A batch body: max_batch spans of at most SPANQ_CHUNK bytes each would
 * be far more; 32 MiB bounds what one request may hold. */
#define OTLP_MAX_BODY ((size_t)32 << 20)

struct otlp {
    struct event_base *base;
    struct spanq *q;
    char *host, *path, *service, *host_name;
    int port;
    size_t max_batch;
    uint64_t flush_ms, timeout_ms;
    int max_retries;
    int gzip;
    struct buf gz; /* body, gzip-compressed (gzip only) */
    struct dns_cache *dns;
    struct timer timer;
    struct fetch *f; /* the request in flight; NULL: none */
    struct buf body; /* the batch being sent (kept for its retries) */
    size_t nspans;   /* spans in body; 0: no batch */
    int tries;       /* sends of the current batch */
    struct otlp_stats st;
};

int64_t otlp_retry_after_ms(const char *p, size_t n)
{
    int64_t v = 0;

    while (n > 0 && (*p == ' ' || *p == '\t')) {
        p++;
        n--;
    }
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        if (v < 3600)
            v = v * 10 + (p[i] - '0');
    }
    return (v > 3600 ? 3600 : v) * 1000;
}

static void send_batch(struct otlp *o);

static void give_up(struct otlp *o, const char *why)
{
    o->st.failures++;
    o->st.dropped_spans += o->nspans;
    spanq_drop(o->q, o->nspans);
    LOG_LIMITED(10000, LOG_WARN, "tracing: %zu span(s) dropped: %s", o->nspans,
                why);
    o->nspans = 0;
    o->tries = 0;
    buf_truncate(&o->body, 0);
}

static int retriable(int status)
{
    return status == 429 || status == 502 || status == 503 || status == 504;
}

static void on_answer(void *arg, const struct fetch_answer *a, const char *err)
{
    struct otlp *o = arg;
    int64_t delay = -1;
    char why[64];

    if (err != NULL) {
        give_up(o, err);
    } else if (a->status >= 200 && a->status < 300) {
        /* A partial_success in the body is the collector's business: what
         * it rejected is not sent again. */
        o->st.exported += o->nspans;
        o->nspans = 0;
        o->tries = 0;
        buf_truncate(&o->body, 0);
    } else if (retriable(a->status) && o->tries <= o->max_retries) {
        for (size_t i = 0; i < a->nheaders; i++)
            if (a->headers[i].name.n == 11 &&
                strncasecmp(a->headers[i].name.p, "retry-after", 11) == 0)
                delay = otlp_retry_after_ms(a->headers[i].value.p,
                                            a->headers[i].value.n);
        if (delay < 0)
            delay = (int64_t)1000 << (o->tries - 1 < 6 ? o->tries - 1 : 6);
        o->st.retries++;
        fetch_free(o->f);
        o->f = NULL;
        timer_arm(&o->timer, (uint64_t)delay);
        return;
    } else {
        snprintf(why, sizeof(why), "the collector answered %d", a->status);
        give_up(o, why);
    }
    fetch_free(o->f);
    o->f = NULL;
    /* More waiting than one batch: the next goes at once. */
    {
        struct spanq_stats qs;
        spanq_stats(o->q, &qs);
        timer_arm(&o->timer, qs.pending >= o->max_batch ? 0 : o->flush_ms);
    }
}

/* o->body into o->gz as one gzip member (RFC 1952), kept for retries. */
static int gzip_body(struct otlp *o)
{
    z_stream z;
    size_t room = compressBound((uLong)buf_len(&o->body)) + 32;
    char *out;
    int rc;

    buf_truncate(&o->gz, 0);
    out = buf_reserve(&o->gz, room);
    if (out == NULL)
        return -1;
    memset(&z, 0, sizeof(z));
    /* windowBits 15 + 16: a gzip header and trailer, not zlib's. */
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    z.next_in = (Bytef *)(uintptr_t)buf_ptr(&o->body);
    z.avail_in = (uInt)buf_len(&o->body);
    z.next_out = (Bytef *)out;
    z.avail_out = (uInt)room;
    rc = deflate(&z, Z_FINISH);
    deflateEnd(&z);
    if (rc != Z_STREAM_END)
        return -1;
    buf_commit(&o->gz, room - z.avail_out);
    return 0;
}

/* The batch's envelope: one resource (this gateway), one scope. */
static int fill_batch(struct otlp *o)
{
    struct buf spans;
    size_t n;

    buf_init(&spans, OTLP_MAX_BODY);
    n = spanq_take(o->q, o->max_batch, &spans);
    if (n == 0) {
        buf_dispose(&spans);
        return 0;
    }
    buf_truncate(&o->body, 0);
    buf_puts(&o->body, "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
                       "{\"key\":\"service.name\",\"value\":{\"stringValue\":");
    json_str(&o->body, o->service);
    buf_puts(&o->body, "}},{\"key\":\"host.name\",\"value\":{\"stringValue\":");
    json_str(&o->body, o->host_name);
    buf_puts(&o->body, "}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"strait\","
                       "\"version\":\"" PACKAGE_VERSION "\"},\"spans\":[");
    buf_append(&o->body, buf_ptr(&spans), buf_len(&spans));
    if (buf_puts(&o->body, "]}]}]}") < 0) {
        buf_dispose(&spans);
        o->nspans = n;
        give_up(o, "batch too large");
        return 0;
    }
    buf_dispose(&spans);
    o->nspans = n;
    o->tries = 0;
    if (o->gzip && gzip_body(o) < 0) {
        give_up(o, "cannot compress the batch");
        return 0;
    }
    return 1;
}

static void send_batch(struct otlp *o)
{
    struct fetch_conf fc;
    char *err = NULL;

    memset(&fc, 0, sizeof(fc));
    fc.host = o->host;
    fc.port = o->port;
    fc.method = "POST";
    fc.path = o->path;
    fc.headers = o->gzip ? "Content-Type: application/json\r\n"
                           "Content-Encoding: gzip\r\nUser-Agent: strait\r\n"
                         : "Content-Type: application/json\r\nUser-Agent: "
                           "strait\r\n";
    fc.body = o->gzip ? buf_ptr(&o->gz) : buf_ptr(&o->body);
    fc.body_n = o->gzip ? buf_len(&o->gz) : buf_len(&o->body);
    fc.name = "the OTLP collector";
    fc.dns = o->dns;
    fc.timeout_ms = (int64_t)o->timeout_ms;
    fc.max_body = 65536;
    o->tries++;
    o->st.requests++;
    o->f = fetch_new(o->base, &fc, on_answer, o, &err);
    if (o->f == NULL) {
        give_up(o, err ? err : "out of memory");
        free(err);
        timer_arm(&o->timer, o->flush_ms);
    }
}

static void on_timer(void *arg)
{
    struct otlp *o = arg;

    if (o->f != NULL)
        return;
    if (o->nspans == 0 && !fill_batch(o)) {
        timer_arm(&o->timer, o->flush_ms);
        return;
    }
    send_batch(o);
}

struct otlp *otlp_new(struct event_base *base, struct spanq *q,
                      const struct otlp_conf *c)
{
    struct otlp *o = calloc(1, sizeof(*o));

    if (o == NULL)
        return NULL;
    o->base = base;
    o->q = q;
    o->host = strdup(c->host);
    o->path = strdup(c->path);
    o->service = strdup(c->service_name);
    o->host_name = strdup(c->host_name);
    o->port = c->port;
    o->max_batch = c->max_batch;
    o->flush_ms = c->flush_ms;
    o->timeout_ms = c->timeout_ms;
    o->max_retries = c->max_retries;
    o->gzip = c->gzip;
    buf_init(&o->gz, OTLP_MAX_BODY);
    o->dns = c->dns;
    buf_init(&o->body, OTLP_MAX_BODY);
    timer_init(&o->timer, base, on_timer, o);
    if (o->host == NULL || o->path == NULL || o->service == NULL ||
        o->host_name == NULL) {
        otlp_free(o);
        return NULL;
    }
    timer_arm(&o->timer, o->flush_ms);
    return o;
}

void otlp_free(struct otlp *o)
{
    if (o == NULL)
        return;
    timer_dispose(&o->timer);
    fetch_free(o->f);
    buf_dispose(&o->body);
    buf_dispose(&o->gz);
    free(o->host);
    free(o->path);
    free(o->service);
    free(o->host_name);
    free(o);
}

void otlp_stats(const struct otlp *o, struct otlp_stats *out)
{
    *out = o->st;
}
