/*
 * VirtualService retries (retryOn, attempts, the retry circuit breaker,
 * backoff with jitter) and retries.perTryTimeout, for the exchange in
 * pipeline.c.
 */
#include "config.h"

#include <string.h>

#include "event/timer.h"
#include "proxy/pipeline-int.h"
#include "upstream/outlier.h"

/*
 * The request can be sent again from its start: it has no body, or all of
 * its body that was passed on is still kept (BODY_KEEP_LIMIT). An upgrade
 * carries a tunnel, never replayed.
 */
int pstream_replayable(const struct pstream *ps)
{
    const struct hstream *s = ps->s;

    if (!s->req.has_body)
        return 1;
    return !s->req.upgrade && hpipe_replayable(&s->req_body);
}

/* The cluster's retry circuit breaker lets this request retry: its slot,
 * taken at the first retry, is held until the request ends. */
static int retry_admitted(struct pstream *ps)
{
    if (ps->retry_slot)
        return 1;
    if (!cluster_admit_retry(ps->pool->cl)) {
        STAT_ADD(upool_stats(ps->pool), rq_retry_overflow, 1);
        return 0;
    }
    ps->retry_slot = 1;
    return 1;
}

/*
 * gRPC retry conditions (Envoy's retry_grpc_on, which Istio's retryOn
 * names share): a trailers-only answer whose grpc-status is one the policy
 * lists. A status in real trailers comes after the response has started
 * and is never retried.
 */
static int retriable_grpc(const struct pstream *ps, const struct route_retry *r)
{
    static const struct {
        int code;
        uint32_t bit;
    } codes[] = {
        {1, ROUTE_RETRY_CANCELLED},          {4, ROUTE_RETRY_DEADLINE_EXCEEDED},
        {8, ROUTE_RETRY_RESOURCE_EXHAUSTED}, {13, ROUTE_RETRY_INTERNAL},
        {14, ROUTE_RETRY_UNAVAILABLE},
    };
    const struct http_field *g;
    int code = 0;

    if (!(r->on & (ROUTE_RETRY_CANCELLED | ROUTE_RETRY_DEADLINE_EXCEEDED |
                   ROUTE_RETRY_RESOURCE_EXHAUSTED | ROUTE_RETRY_INTERNAL |
                   ROUTE_RETRY_UNAVAILABLE)))
        return 0;
    g = http_fields_get(&ps->s->resp.fields, "grpc-status");
    if (g == NULL || g->value.n == 0 || g->value.n > 2)
        return 0;
    for (size_t i = 0; i < g->value.n; i++) {
        if (g->value.p[i] < '0' || g->value.p[i] > '9')
            return 0;
        code = code * 10 + (g->value.p[i] - '0');
    }
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (codes[i].code == code)
            return (r->on & codes[i].bit) != 0;
    return 0;
}

int pstream_retriable_status(const struct pstream *ps, int status)
{
    const struct route_retry *r;

    if (ps->action == NULL)
        return 0;
    r = &ps->action->retry;
    if (retriable_grpc(ps, r))
        return 1;
    if ((r->on & ROUTE_RETRY_5XX) && status >= 500 && status <= 599)
        return 1;
    if ((r->on & ROUTE_RETRY_GATEWAY_ERROR) &&
        (status == 502 || status == 503 || status == 504))
        return 1;
    if (r->on & ROUTE_RETRY_RETRIABLE_STATUS_CODES)
        for (size_t i = 0; i < r->nstatuses; i++)
            if (r->statuses[i] == status)
                return 1;
    return 0;
}

int pstream_retriable_failure(const struct pstream *ps, unsigned flags)
{
    const struct route_retry *r;

    if (ps->action == NULL)
        return 0;
    r = &ps->action->retry;
    if (r->on & ROUTE_RETRY_5XX)
        return 1; /* Envoy's 5xx covers connect failures and resets */
    if ((flags & HFLAG_UF) &&
        (r->on & (ROUTE_RETRY_CONNECT_FAILURE | ROUTE_RETRY_GATEWAY_ERROR)))
        return 1;
    return (r->on & (ROUTE_RETRY_RESET | ROUTE_RETRY_GATEWAY_ERROR)) != 0;
}

/* An attempt past retries.perTryTimeout: Envoy retries it under the
 * conditions that cover an upstream that does not answer (5xx,
 * gateway-error, reset). */
static int retriable_timeout(const struct pstream *ps)
{
    return ps->action != NULL && (ps->action->retry.on &
                                  (ROUTE_RETRY_5XX | ROUTE_RETRY_GATEWAY_ERROR |
                                   ROUTE_RETRY_RESET)) != 0;
}

/*
 * pstream_should_retry() decides whether a failed attempt is tried again, as a
 * VirtualService's retries ask. retriable: the policy covers what
 * happened. Only while attempts remain, nothing was passed on, the
 * request can be replayed and the cluster's retry breaker admits it.
 */
int pstream_should_retry(struct pstream *ps, int retriable)
{
    const struct hstream *s = ps->s;

    if (!retriable || ps->retries >= ps->action->retry.attempts ||
        s->resp_started || s->down_done)
        return 0;
    if (!pstream_replayable(ps)) {
        /* Envoy's retry_or_shadow_abandoned, once per request. */
        if (!ps->body_overflow) {
            ps->body_overflow = 1;
            STAT_ADD(upool_stats(ps->pool), rq_retry_body_overflow, 1);
        }
        return 0;
    }
    return retry_admitted(ps);
}

/* Starts the next try after the backoff; the previous exchange is gone.
 * The body, if any, is read again from its first byte. */
void pstream_retry_later(struct pstream *ps)
{
    struct hstream *s = ps->s;
    uint64_t base = UINT64_C(25) << (ps->retries < 6 ? ps->retries : 6);
    uint64_t ms = base / 2 + pstream_rng(ps->l) % (base / 2 + 1);

    timer_cancel(&ps->try_timer);
    if (s->req.has_body)
        hpipe_rewind(&s->req_body); /* pstream_replayable() held */
    STAT_ADD(upool_stats(ps->pool), rq_retry, 1);
    pstream_trace_attempt_end(ps, s->resp.status);
    ps->retries++;
    memset(&s->resp, 0, sizeof(s->resp));
    s->resp.content_length = -1;
    hpipe_reset(&s->resp_body);
    ps->attempts = 0;
    ps->ep = balancer_next(&ps->pool->lb, ps->ep);
    timer_arm(&ps->delay, ms);
}

/*
 * retries.perTryTimeout: the attempt ran past its own deadline. Its
 * exchange is abandoned (an HTTP/1 connection is closed, not pooled; an
 * HTTP/2 stream is reset) and, when the policy covers it and attempts
 * remain, the request is tried again; otherwise it is answered 504 with
 * Envoy's UT flag (and URX once retries were spent). The route's timeout
 * keeps running across attempts and still bounds them all. Once the
 * answer has started the deadline is ignored, as Envoy does: the
 * response goes on up to the route's timeout.
 */
void pstream_on_try_timeout(void *arg)
{
    struct pstream *ps = arg;

    if (ps->s->resp_started)
        return;
    STAT_ADD(upool_stats(ps->pool), rq_per_try_timeout, 1);
    if (ps->uc != NULL || ps->h2s != NULL)
        cluster_report(ps->pool->cl, ps->ep, OUTLIER_TIMEOUT);
    pstream_release_upstream(ps, 0);
    if (pstream_should_retry(ps, retriable_timeout(ps))) {
        pstream_retry_later(ps);
        return;
    }
    STAT_ADD(upool_stats(ps->pool), rq_timeout, 1);
    pstream_local_reply(ps, 504, HFLAG_UT | (ps->retries > 0 ? HFLAG_URX : 0),
                        "upstream request timeout\n");
    pstream_up_finished(ps);
}

/* The request body ended (or failed): what waited for it (a mirror, the
 * per-try deadline) goes on. Called from inside hpipe_finish/hpipe_abort,
 * so it only defers pstream_on_aux. */
static void body_end(void *arg)
{
    struct pstream *ps = arg;

    timer_defer(&ps->aux);
}

int pstream_body_complete(const struct pstream *ps)
{
    const struct hpipe *b = &ps->s->req_body;

    return !ps->s->req.has_body || b->eof || b->aborted;
}

void pstream_wait_body(struct pstream *ps)
{
    ps->s->req_body.on_end = body_end;
    ps->s->req_body.end_arg = ps;
}

/* Each attempt gets its own deadline when the route has perTryTimeout. As
 * Envoy's, it starts once the attempt is under way and the whole request
 * has arrived (a slow upload is not the upstream's fault), and runs until
 * the exchange ends. */
void pstream_arm_try_timer(struct pstream *ps)
{
    uint64_t ms = ps->action != NULL ? ps->action->retry.per_try_timeout_ms : 0;

    if (ms == 0 || timer_armed(&ps->try_timer))
        return;
    if (!pstream_body_complete(ps)) {
        ps->try_wait = 1;
        pstream_wait_body(ps);
        return;
    }
    timer_arm(&ps->try_timer, ms);
}
