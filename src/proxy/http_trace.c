/*
 * Tracing of proxied requests: one server span per request, one client
 * span per upstream attempt (each retry, and a mirrored copy's, on its
 * own), encoded as OTLP JSON spans and handed to the exporter's queue
 * (event/spanq.h) at the end of the request.
 *
 * The trace continues the caller's: a valid traceparent (or B3 context)
 * gives the trace id and the server span's parent, and its sampled flag
 * decides; without one, the listener's sampling percentage does. Every
 * attempt sends traceparent with its client span as the parent (flag 01
 * when sampled, else 00), tracestate only when it was valid, and B3
 * headers in the form they came in, so a mesh on either propagation
 * sees one tree. Unsampled requests are propagated the same way but
 * record nothing.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"
#include "core/json.h"
#include "event/spanq.h"
#include "http/trace_context.h"
#include "proxy/pipeline-int.h"

struct ptrace_attempt {
    struct ptrace_attempt *next;
    uint8_t span_id[8];
    uint64_t start_ns;
    uint64_t end_ns;
    int status;
    unsigned n; /* 0: the first try */
    char upstream[ADDR_STRLEN];
};

struct ptrace {
    uint8_t trace_id[16];
    uint8_t span_id[8];   /* the server span */
    uint8_t parent_id[8]; /* the caller's span */
    unsigned has_parent : 1;
    unsigned sampled : 1;
    unsigned state_ok : 1; /* tracestate is passed on */
    unsigned b3 : 2;       /* 0: none, 1: x-b3-* headers, 2: b3 */
    unsigned open : 1;     /* the last attempt has not ended */
    uint64_t start_ns;
    struct ptrace_attempt *attempts, *last;
    unsigned nattempts;
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void random_id(struct pstream *ps, uint8_t *out, size_t n)
{
    do {
        for (size_t i = 0; i < n; i += 8) {
            uint64_t r = pstream_rng(ps->l);
            memcpy(out + i, &r, n - i < 8 ? n - i : 8);
        }
    } while (out[0] == 0 && out[n - 1] == 0); /* never all zero */
}

void pstream_trace_begin(struct pstream *ps)
{
    const struct http_listener_conf *c = ps->l->conf;
    struct ptrace *t;
    struct tctx in;
    int state_ok = 0, single = 0, from;

    if (c->spans == NULL)
        return;
    t = arena_alloc(&ps->s->arena, sizeof(*t));
    if (t == NULL)
        return;
    memset(t, 0, sizeof(*t));
    t->start_ns = now_ns();
    from = tctx_from_fields(&ps->s->req.fields, &in, &state_ok, &single);
    if (from != 0) {
        memcpy(t->trace_id, in.trace_id, 16);
        memcpy(t->parent_id, in.parent_id, 8);
        t->has_parent = 1;
        t->state_ok = (unsigned)state_ok;
        t->b3 = from == 2 ? (single ? 2 : 1) : 0;
    } else {
        random_id(ps, t->trace_id, 16);
        in.sampled = -1;
    }
    if (in.sampled >= 0)
        t->sampled = (unsigned)in.sampled;
    else
        t->sampled = pstream_rng(ps->l) % 1000000 < c->sample_ppm;
    random_id(ps, t->span_id, 8);
    /* B3 headers that came with a traceparent are rewritten too. */
    if (from == 1 && (http_fields_get(&ps->s->req.fields, "x-b3-traceid") ||
                      http_fields_get(&ps->s->req.fields, "b3")))
        t->b3 = http_fields_get(&ps->s->req.fields, "b3") ? 2 : 1;
    ps->trace = t;
}

void pstream_trace_copy(struct pstream *copy, const struct pstream *ps)
{
    struct ptrace *t;

    if (ps->trace == NULL)
        return;
    t = arena_alloc(&copy->s->arena, sizeof(*t));
    if (t == NULL)
        return;
    *t = *ps->trace;
    t->attempts = t->last = NULL;
    t->nattempts = 0;
    t->open = 0;
    copy->trace = t;
}

static void set_field(struct pstream *ps, const char *name, const char *v)
{
    http_fields_set(&ps->s->req.fields, &ps->s->arena, name, slice_of(v));
}

/* The upstream request's context: this attempt's span is the parent. */
static void propagate(struct pstream *ps, const struct ptrace *t,
                      const uint8_t span[8])
{
    char tp[56], tid[33], sid[17], pid[17], b3[100];
    int high = 0;

    tctx_traceparent(t->trace_id, span, t->sampled, tp);
    set_field(ps, "traceparent", tp);
    if (!t->state_ok)
        http_fields_remove(&ps->s->req.fields, "tracestate");
    if (t->b3 == 0)
        return;
    for (int i = 0; i < 8; i++)
        high |= t->trace_id[i];
    /* A 64-bit B3 trace id stays 64-bit. */
    if (high)
        tctx_hex(t->trace_id, 16, tid);
    else
        tctx_hex(t->trace_id + 8, 8, tid);
    tctx_hex(span, 8, sid);
    tctx_hex(t->span_id, 8, pid);
    if (t->b3 == 2) {
        snprintf(b3, sizeof(b3), "%s-%s-%d-%s", tid, sid, t->sampled ? 1 : 0,
                 pid);
        set_field(ps, "b3", b3);
        return;
    }
    set_field(ps, "x-b3-traceid", tid);
    set_field(ps, "x-b3-spanid", sid);
    set_field(ps, "x-b3-parentspanid", pid);
    set_field(ps, "x-b3-sampled", t->sampled ? "1" : "0");
}

void pstream_trace_attempt_end(struct pstream *ps, int status)
{
    struct ptrace *t = ps->trace;

    if (t == NULL || !t->open)
        return;
    t->open = 0;
    t->last->end_ns = now_ns();
    t->last->status = status;
}

void pstream_trace_attempt(struct pstream *ps)
{
    struct ptrace *t = ps->trace;
    struct ptrace_attempt *a;

    if (t == NULL)
        return;
    /* A connection that failed before it answered: the next endpoint. */
    pstream_trace_attempt_end(ps, 0);
    a = arena_alloc(&ps->s->arena, sizeof(*a));
    if (a == NULL)
        return;
    memset(a, 0, sizeof(*a));
    random_id(ps, a->span_id, 8);
    a->start_ns = now_ns();
    a->n = t->nattempts++;
    if (ps->upstream != NULL)
        addr_format(ps->upstream, a->upstream, sizeof(a->upstream));
    if (t->last != NULL)
        t->last->next = a;
    else
        t->attempts = a;
    t->last = a;
    t->open = 1;
    propagate(ps, t, a->span_id);
}

/* OTLP JSON: "key":{"stringValue":...} and friends, as attribute
 * objects. */
static void attr_str(struct buf *b, int *first, const char *k, struct slice v)
{
    if (v.p == NULL)
        return;
    if (v.n > 512)
        v.n = 512; /* header values may be long: the span stays small */
    buf_puts(b, *first ? "{\"key\":" : ",{\"key\":");
    *first = 0;
    json_str(b, k);
    buf_puts(b, ",\"value\":{\"stringValue\":");
    json_escape(b, v.p, v.n);
    buf_puts(b, "}}");
}

static void attr_int(struct buf *b, int *first, const char *k, int64_t v)
{
    buf_puts(b, *first ? "{\"key\":" : ",{\"key\":");
    *first = 0;
    json_str(b, k);
    /* int64 values are strings in OTLP JSON. */
    buf_printf(b, ",\"value\":{\"intValue\":\"%" PRId64 "\"}}", v);
}

static void attr_bool(struct buf *b, int *first, const char *k)
{
    buf_puts(b, *first ? "{\"key\":" : ",{\"key\":");
    *first = 0;
    json_str(b, k);
    buf_puts(b, ",\"value\":{\"boolValue\":true}}");
}

/* The fields every span has, up to its attributes' opening bracket. */
static void span_head(struct buf *b, const struct ptrace *t,
                      const uint8_t span[8], const uint8_t *parent,
                      const char *name, int kind, uint64_t start, uint64_t end)
{
    char h[33];

    tctx_hex(t->trace_id, 16, h);
    buf_printf(b, "{\"traceId\":\"%s\"", h);
    tctx_hex(span, 8, h);
    buf_printf(b, ",\"spanId\":\"%s\"", h);
    if (parent != NULL) {
        tctx_hex(parent, 8, h);
        buf_printf(b, ",\"parentSpanId\":\"%s\"", h);
    }
    buf_puts(b, ",\"name\":");
    json_str(b, name);
    buf_printf(b,
               ",\"kind\":%d,\"startTimeUnixNano\":\"%" PRIu64
               "\",\"endTimeUnixNano\":\"%" PRIu64 "\",\"attributes\":[",
               kind, start, end > start ? end : start);
}

static void span_tail(struct buf *b, int error)
{
    /* Status code 2 is STATUS_CODE_ERROR; unset otherwise. */
    buf_puts(b, error ? "],\"status\":{\"code\":2}}" : "],\"status\":{}}");
}

static const char *cluster_name(const struct pstream *ps)
{
    return ps->cluster >= 0 ? http_cluster(ps->wr, ps->cluster)->name : NULL;
}

static void emit_attempts(struct pstream *ps, const struct ptrace *t,
                          struct buf *b, struct spanq_buf *q)
{
    const char *cl = cluster_name(ps);
    char name[300];

    snprintf(name, sizeof(name), "router %s egress", cl ? cl : "-");
    for (const struct ptrace_attempt *a = t->attempts; a != NULL; a = a->next) {
        int first = 1;

        buf_truncate(b, 0);
        span_head(b, t, a->span_id, t->span_id, name, 3, a->start_ns,
                  a->end_ns);
        attr_str(b, &first, "component", slice_of("proxy"));
        if (cl != NULL)
            attr_str(b, &first, "upstream_cluster", slice_of(cl));
        if (a->upstream[0] != '\0')
            attr_str(b, &first, "upstream_address", slice_of(a->upstream));
        attr_int(b, &first, "http.status_code", a->status);
        attr_int(b, &first, "retry.attempt", a->n);
        if (ps->retries > 0 || a->n > 0)
            attr_int(b, &first, "retries", ps->retries);
        if (ps->shadow)
            attr_bool(b, &first, "shadow");
        span_tail(b, a->status == 0 || a->status >= 500);
        if (buf_len(b) > 0 && buf_ptr(b)[buf_len(b) - 1] == '}')
            spanq_buf_span(q, buf_ptr(b), buf_len(b));
    }
}

void pstream_trace_end(struct pstream *ps)
{
    struct ptrace *t = ps->trace;
    struct hstream *s = ps->s;
    char storage[8192], url[600], flags[64], name[300];
    struct buf b = {storage, 0, 0, sizeof(storage), sizeof(storage), 0};
    const struct http_field *f;
    const char *cl = cluster_name(ps);
    int first = 1;

    if (t == NULL)
        return;
    pstream_trace_attempt_end(ps, s->resp.status);
    ps->trace = NULL;
    if (!t->sampled)
        return;
    emit_attempts(ps, t, &b, &ps->l->spans);
    if (ps->shadow)
        return; /* a copy has no server span of its own */
    buf_truncate(&b, 0);
    snprintf(name, sizeof(name), "%.*s/*", (int)s->req.authority.n,
             s->req.authority.p);
    span_head(&b, t, t->span_id, t->has_parent ? t->parent_id : NULL, name, 2,
              t->start_ns, now_ns());
    attr_str(&b, &first, "component", slice_of("proxy"));
    attr_str(&b, &first, "http.method", s->req.method);
    snprintf(url, sizeof(url), "%.*s://%.*s%.*s", (int)s->req.scheme.n,
             s->req.scheme.p, (int)s->req.authority.n, s->req.authority.p,
             (int)s->req.path.n, s->req.path.p);
    attr_str(&b, &first, "http.url", slice_of(url));
    attr_str(&b, &first, "http.protocol",
             slice_of(s->req.version == HTTP_2    ? "HTTP/2"
                      : s->req.version == HTTP_10 ? "HTTP/1.0"
                                                  : "HTTP/1.1"));
    attr_int(&b, &first, "http.status_code", s->resp.status);
    attr_str(&b, &first, "response_flags",
             slice_of(hstream_flags_str(s->flags, flags, sizeof(flags))));
    if (cl != NULL)
        attr_str(&b, &first, "upstream_cluster", slice_of(cl));
    f = http_fields_get(&s->req.fields, "x-request-id");
    if (f != NULL)
        attr_str(&b, &first, "guid:x-request-id", f->value);
    f = http_fields_get(&s->req.fields, "user-agent");
    if (f != NULL)
        attr_str(&b, &first, "user_agent", f->value);
    attr_str(&b, &first, "peer.address", slice_of(ps->hc->peer_ip));
    attr_int(&b, &first, "request_size", (int64_t)s->bytes_in);
    attr_int(&b, &first, "response_size", (int64_t)s->bytes_out);
    attr_str(&b, &first, "listener", slice_of(ps->l->conf->name));
    span_tail(&b, s->resp.status == 0 || s->resp.status >= 500);
    if (buf_len(&b) > 0 && buf_ptr(&b)[buf_len(&b) - 1] == '}')
        spanq_buf_span(&ps->l->spans, buf_ptr(&b), buf_len(&b));
}
