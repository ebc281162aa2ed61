#ifndef STRAIT_PROXY_PIPELINE_INT_H
#define STRAIT_PROXY_PIPELINE_INT_H

/*
 * One proxied request's private state, shared by the files that handle
 * it: pipeline.c (the exchange with the upstream, local answers, the
 * log), http_filters.c (authorization, routing, CORS, forwarding
 * headers), http_retry.c (retries and per-try deadlines) and
 * http_mirror.c (mirrored copies). Nothing else includes this.
 */
#include <stdint.h>

#include "event/timer-t.h"
#include "proxy/http_listener-t.h"
#include "proxy/router.h"
#include "upstream/balancer.h"
#include "upstream/cluster.h"
#include "upstream/pool.h"

/*
 * A request body is kept for a retry or a mirror up to this many bytes:
 * Envoy's default per_request_buffer_limit (its connection buffer limit,
 * 1 MiB). A longer body is passed on as usual, but the request is no
 * longer retried and is not mirrored (Envoy's retry_or_shadow_abandoned).
 */
#define BODY_KEEP_LIMIT ((size_t)1 << 20)

/* A mirrored copy on a route without a timeout still ends: it gets Envoy's
 * default route timeout, so a stalled mirror never holds memory for long. */
#define MIRROR_TIMEOUT_MS 15000

/* Lives in the request's arena; s->proxy points to it while the proxy
 * holds its reference to the stream. */
struct pstream {
    struct hstream *s;
    struct http_conn *hc;
    struct http_listener *l;
    struct wroutes *wr;     /* pinned: the routes this stream runs on */
    int cluster;            /* index in wr's clusters; -1: none */
    uint64_t timeout_ms;    /* the route's; 0: none */
    struct route_result rr; /* the router's pick */
    const struct route_action *action;
    struct slice cors_origin; /* an allowed CORS Origin; empty: none */
    struct timer delay;       /* fault injection delay */
    struct upool *pool;
    struct h1_client *uc;
    struct h2c_stream *h2s;
    size_t ep;
    int attempts;
    struct timer timer;
    unsigned up_done : 1;
    unsigned down_done : 1;
    unsigned counted : 1;
    unsigned replayed : 1;   /* sent again after a keep-alive race */
    unsigned retries;        /* retries done (VirtualService retries) */
    unsigned busy : 1;       /* counted in flight on busy_ep */
    unsigned admitted : 1;   /* holds a circuit breaker slot */
    unsigned retry_slot : 1; /* holds a retry circuit breaker slot */
    size_t busy_ep;
    unsigned reuse_blocked : 1; /* take no pooled connection any more */
    struct upool_waiter waiter; /* waiting for a connection (maxConnections) */
    unsigned waiting : 1;
    const char *details; /* why a local answer was given, for the log */
    const struct jwt_result *jwt; /* a verified JWT (arena); NULL: none */
    struct slice set_cookie;      /* consistent hash: a generated cookie */
    /* The endpoint, for the log (formatted only there); owned by the
     * cluster of the pinned routes. */
    const struct addr *upstream;
    const char *client; /* originating client, after trusted hops */
    /* The client's GeoIP result (the request's arena, or the
     * connection's cache when the client is the peer); NULL: no geoip. */
    const struct geo_result *geo;
    struct timer try_timer;     /* retries.perTryTimeout of this attempt */
    unsigned body_overflow : 1; /* counted as not retriable for its body */
    /* The primary: launches the mirror once the whole body is here. A
     * mirrored copy: drains the copy's response. */
    struct timer aux;           /* deferred (timer_defer), never armed */
    unsigned mirror_wait : 1;   /* a mirror waits for the request body */
    unsigned try_wait : 1;      /* the per-try deadline waits for it too */
    unsigned shadow : 1;        /* this is a mirrored copy (fire and forget) */
    unsigned mirrored : 1;      /* the mirror was dealt with */
    unsigned shadow_failed : 1; /* the copy ended with a local error */
    struct list link;           /* a copy: in l->mirrors or l->mirrors_dead */
    /* The stream idle timeout: it fires at the listener's interval and
     * looks at when bytes last moved (the pipes' active_ms, active_ms
     * here for the start and the response head), so nothing moves it
     * per byte. Never armed on a mirrored copy. */
    struct timer idle;
    uint64_t active_ms;
    /* The local address of the last attempt's upstream socket, for the
     * access log, when its format asks (arena); NULL: not known. */
    const char *up_local;
    /* The request's trace (http_trace.c, arena); NULL: not traced. */
    struct ptrace *trace;
    /* LuaPolicy: the request's state in the worker's Lua state (arena;
     * NULL: no policy applies), and the timer that resumes a hook that
     * yielded. */
    struct luareq *lua;
    struct timer lua_timer;
    /* A strait.http.request call's stream (also marked shadow: not a
     * request of the listener): its call (lua_http.c); NULL: none. */
    struct lcall *lcall;
};

/* pipeline.c: the exchange and its end. */

/* The worker's generator (core/rng.h: request ids, weights, backoff
 * jitter): uniqueness, not secrecy. */
uint64_t pstream_rng(struct http_listener *l);

/* Answers locally (no route, upstream failures, timeouts) if nothing was
 * sent yet, as a trailers-only answer for gRPC; otherwise the downstream
 * codec resets the stream. The request body is no longer read. */
void pstream_local_reply(struct pstream *ps, int status, unsigned flags,
                         const char *body);
/* The same with one extra response field (not on gRPC answers). */
void pstream_local_reply_with(struct pstream *ps, int status, unsigned flags,
                              const char *body, const char *extra_name,
                              const char *extra_value);

/* Lets the upstream exchange go: an HTTP/1 connection back to the pool
 * (reuse) or closed, an HTTP/2 stream cancelled. */
void pstream_release_upstream(struct pstream *ps, int reuse);

/* The upstream side is over (answered, failed or given up): its timers
 * stop, and the stream ends once the downstream side is over too. */
void pstream_up_finished(struct pstream *ps);

/* An attempt goes out on upstream socket fd: what the log and the
 * trace want of it is noted. */
void pstream_attempt_started(struct pstream *ps, int fd);

/* Both sides are finished: log the request and let the stream go. */
void pstream_maybe_end(struct pstream *ps);

/* Sends the request on a pooled or new connection to ps->ep, moving on
 * to the next endpoints when connecting fails; answers 503 when no
 * attempt is left. */
void pstream_connect_next(struct pstream *ps);

/* Timer callbacks set when a stream (or a mirrored copy) starts: the
 * route's deadline, and the fault delay or retry backoff. */
void pstream_on_timeout(void *arg);
void pstream_on_delay(void *arg);

/* http_filters.c: what a request meets before it goes upstream. */

/* A request for a host the connection's Gateway server does not serve
 * (its TLS handshake picked another server by SNI): answered 421
 * Misdirected Request and finished, returning 1, so a client cannot
 * reach one server's routes through another's handshake and client
 * checks. 0 when the request belongs here. */
int pstream_misdirected(struct pstream *ps);

/* pstream_geoip() looks the client up in the GeoIP databases (the
 * address remote.ip uses: the X-Forwarded-For entry xffNumTrustedHops
 * from the right, else the peer, whose result is cached on the
 * connection) into ps->geo, and writes the configured geoip.headers,
 * replacing any the client sent (a field not found removes the
 * client's). -1 when memory is short. */
int pstream_geoip(struct pstream *ps);

/* The AuthorizationPolicies of the stream's routes. Returns 0 when the
 * request may go on; -1 when it was answered 403 (and finished). */
int pstream_authorize(struct pstream *ps);

/* pstream_authenticate() applies the RequestAuthentications of the
 * stream's routes (Envoy's jwt_authn filter, before RBAC): a request
 * whose token does not verify is answered 401 with WWW-Authenticate and
 * returns -1; one with a good token keeps its claims in ps->jwt; one
 * without a token goes on unauthenticated. */
int pstream_authenticate(struct pstream *ps);

/* The listener's router (VirtualService routes, or a bootstrap
 * listener's routes lowered into it): returns 0 with the cluster
 * picked and the request rewritten, or -1 when the request was answered
 * here (no route, redirect, direct response, fault abort, CORS
 * preflight) and finished. */
int pstream_route(struct pstream *ps);

/* pstream_find_client() sets ps->client to the originating client
 * behind the listener's trusted hops (numTrustedProxies): the Nth
 * X-Forwarded-For entry from the right, as the request came; left NULL
 * (the peer) when there are fewer entries or none. */
void pstream_find_client(struct pstream *ps);

/* Adds X-Forwarded-For/-Proto and X-Request-Id. -1 when memory is
 * short. */
int pstream_add_forwarding(struct pstream *ps);

/* The corsPolicy's headers on a response to an allowed cross-origin
 * request (preflight: the allowed methods, headers and max age). */
int pstream_cors_headers(struct pstream *ps, int preflight);

/* The request's grpc-timeout in ms; 0 when absent or malformed. */
uint64_t pstream_grpc_timeout_ms(const struct http_fields *f);

/* http_retry.c: VirtualService retries and retries.perTryTimeout. */

/* The request can be sent again from its first byte. */
int pstream_replayable(const struct pstream *ps);

/* The route's retry policy covers this answer status / this failure
 * (HFLAG_* flags). */
int pstream_retriable_status(const struct pstream *ps, int status);
int pstream_retriable_failure(const struct pstream *ps, unsigned flags);

/* A failed attempt is tried again: the policy covers it (retriable),
 * attempts remain, nothing was passed on, the request is replayable and
 * the cluster's retry breaker admits it. */
int pstream_should_retry(struct pstream *ps, int retriable);

/* Starts the next try after the backoff, on the next endpoint. */
void pstream_retry_later(struct pstream *ps);

/* The per-try deadline: armed once an attempt is under way and the whole
 * request body has arrived; its event callback. */
void pstream_arm_try_timer(struct pstream *ps);
void pstream_on_try_timeout(void *arg);

/* The request body is all here (or will never be). */
int pstream_body_complete(const struct pstream *ps);

/* Calls pstream_on_aux (through ps->aux) once the request body ends. */
void pstream_wait_body(struct pstream *ps);

/* http_trace.c: spans of the request and of each upstream attempt. */

/* The request arrived: its context is read (traceparent, B3), sampled or
 * not, and its server span starts. Nothing when the listener does not
 * trace. */
void pstream_trace_begin(struct pstream *ps);

/* An attempt goes out (ps->upstream set): its client span starts and the
 * request's trace headers name it as the parent. */
void pstream_trace_attempt(struct pstream *ps);

/* The current attempt ended with status (0: no answer). */
void pstream_trace_attempt_end(struct pstream *ps, int status);

/* The request is over: its spans are queued for export when sampled. */
void pstream_trace_end(struct pstream *ps);

/* A mirrored copy continues the trace of the request it copies. */
void pstream_trace_copy(struct pstream *copy, const struct pstream *ps);
/* http_lua.c: LuaPolicy hooks. */

/* on_request of the policies that apply, before routing (as Envoy's Lua
 * filter runs before its router: what a script changes in the request
 * is what routes it): 0 when the request goes on now; 1 when it was
 * answered (h:respond, or an error under failurePolicy Fail) or a hook
 * yielded and pstream_forward() follows on a later turn. */
int pstream_lua_request(struct pstream *ps);
/* The lua_timer's callback: resumes a hook that yielded. */
void pstream_lua_on_timer(void *arg);
/* on_response, before the head goes downstream: 1 when a failed policy
 * under Fail replaced the answer with a 500 (the upstream let go), or a
 * hook yielded and pstream_pass_head() follows on a later turn. */
int pstream_lua_response(struct pstream *ps);
/* on_log, and what the request holds in the state let go. */
void pstream_lua_end(struct pstream *ps);
/* http_lua_upstream.c: pstream_lua_retarget() puts the cluster of
 * h:set_upstream() in place of the route's; pstream_lua_select() runs
 * on_upstream_select after the balancer picked ps->ep (it may change
 * it): 1 when the request was answered (a policy failed under Fail). */
void pstream_lua_retarget(struct pstream *ps);
/* http_lua.c: the worker's Lua state for view w of l, made on first use;
 * NULL when it cannot be made (logged). */
struct luavm *http_lua_vm(struct http_listener *l, struct wroutes *w);
int pstream_lua_select(struct pstream *ps);

/* pipeline.c: the upstream's response head goes downstream (after the
 * on_response hooks). */
void pstream_pass_head(struct pstream *ps);

struct luavm;

/* lua_http.c: a call's stream ended (pstream_maybe_end): the call
 * hears of it, and lets go of it. */
void pstream_lua_call_end(struct pstream *ps);
/* The proxy's side of strait.http.request, lent to each Lua state of
 * listener l (policy/lua_http.h). */
void lua_http_attach(struct luavm *vm, struct http_listener *l);

/* pipeline.c: after the Lua hooks, the request is routed and goes to
 * its cluster. */
void pstream_forward(struct pstream *ps);

/* http_mirror.c: mirrored copies. */

/* The router picked this request for mirroring: copy it now, or once its
 * body has arrived. */
void pstream_mirror_begin(struct pstream *ps);

/* ps->aux: the request body ended (a primary: mirror and per-try deadline
 * go on), or a mirrored copy's answer can be drained. */
void pstream_on_aux(void *arg);

/*
 * A stream of strait's own, beside the requests of clients (a mirrored
 * copy, a LuaPolicy's strait.http call): sp, zeroed and in m's arena,
 * becomes m's proxy on listener l, pinned to routes w (the caller's pin
 * moves to it), towards cluster (pool; admitted: it took a breaker slot),
 * with down as m's downstream side and wake as its response reader's
 * wake-up. pstream_shadow_send() then picks the endpoint and connects.
 */
void pstream_shadow_init(struct pstream *sp, struct http_listener *l,
                         struct wroutes *w, struct hstream *m, int cluster,
                         struct upool *pool, int admitted,
                         const struct hstream_down_ops *down,
                         void (*wake)(void *reader));
void pstream_shadow_send(struct pstream *sp);

#endif
