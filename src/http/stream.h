#ifndef STRAIT_HTTP_STREAM_H
#define STRAIT_HTTP_STREAM_H

#include <stdint.h>

#include "core/arena.h"
#include "http/http.h"
#include "http/pipe.h"

/*
 * One request/response exchange, shared by the downstream codec that
 * received the request and the proxy that answers it (directly or through
 * an upstream). Two references: the downstream side's and the proxy's;
 * the last hstream_unref() frees it.
 *
 * Bodies flow through the two pipes: the downstream codec writes req_body
 * and reads resp_body; the proxy's upstream side does the opposite.
 */
struct hstream;

/* What a downstream codec offers the proxy. */
struct hstream_down_ops {
    /* s->resp holds the response head; its body follows in resp_body. */
    void (*response_head)(struct hstream *s);
    /* An interim 100 Continue may be sent now (Expect: 100-continue). */
    void (*continue_100)(struct hstream *s);
    /* The proxy cannot finish the response it started (the upstream
     * failed after its head): takes the head back if no byte of the
     * response has left for the client yet, and returns 0 (the proxy
     * then answers afresh, an error in place of an empty reply); -1 when
     * something went out, and nothing changes. NULL: never possible. */
    int (*retract)(struct hstream *s);
    /* Ends the stream abruptly, whatever was sent: HTTP/1 closes the
     * connection, HTTP/2 sends RST_STREAM, so the client sees that the
     * message was cut short. The codec calls on_down_done afterwards, on
     * a later turn. NULL: the proxy only fails the response pipe. */
    void (*reset)(struct hstream *s);
};

/* What the proxy offers downstream codecs. */
struct hstream_handler {
    /* The request head is in s->req; its body follows in req_body. The
     * proxy takes its reference here. */
    void (*on_request)(void *ctx, struct hstream *s);
    /* The downstream side will not touch s again (response sent, or the
     * client went away): the proxy stops its upstream work. */
    void (*on_down_done)(void *ctx, struct hstream *s);
};

/* Envoy-style response flags for the access log. */
enum {
    HFLAG_NR = 1 << 0,   /* no route */
    HFLAG_UH = 1 << 1,   /* no healthy upstream */
    HFLAG_UF = 1 << 2,   /* upstream connection failure */
    HFLAG_UC = 1 << 3,   /* upstream connection terminated */
    HFLAG_UT = 1 << 4,   /* upstream request timeout */
    HFLAG_DC = 1 << 5,   /* downstream connection terminated */
    HFLAG_UPE = 1 << 6,  /* upstream protocol error */
    HFLAG_DPE = 1 << 7,  /* downstream protocol error */
    HFLAG_UO = 1 << 8,   /* upstream overflow (circuit breaker) */
    HFLAG_SI = 1 << 9,   /* stream idle timeout */
    HFLAG_FI = 1 << 10,  /* fault injected (abort) */
    HFLAG_URX = 1 << 11, /* upstream retry limit exceeded */
    HFLAG_OM = 1 << 12,  /* refused by the overload manager (memory) */
};

struct hstream {
    int refs;
    struct arena arena;
    struct http_request req;
    struct http_response resp;
    struct hpipe req_body;
    struct hpipe resp_body;
    const struct hstream_down_ops *down;
    void *down_ctx;
    void *proxy; /* the proxy's per-stream state */
    uint64_t start_ms;
    uint64_t bytes_in;  /* request body bytes from downstream */
    uint64_t bytes_out; /* response body bytes to downstream */
    unsigned flags;     /* HFLAG_* */
    unsigned resp_started : 1;
    unsigned down_done : 1;
    int32_t h2_stream_id; /* downstream HTTP/2 stream, 0 for HTTP/1 */
};

/* hstream_new() returns a stream with one reference (the downstream
 * codec's); pipes are bounded by body_cap and use pool. */
struct hstream *hstream_new(struct bufpool *pool, size_t body_cap);
struct hstream *hstream_ref(struct hstream *s);
void hstream_unref(struct hstream *s);

/* hstream_respond() answers s locally: status, a text body (may be NULL)
 * and an optional extra field. Used for errors and direct responses. */
int hstream_respond(struct hstream *s, int status, const char *body,
                    const char *extra_name, const char *extra_value);

/* The same in two steps, for callers that add fields to s->resp.fields in
 * between: hstream_reply_begin() fills the head (-1: a response has
 * started already), hstream_reply_end() sends it and the body. */
int hstream_reply_begin(struct hstream *s, int status, const char *body);
void hstream_reply_end(struct hstream *s, const char *body);

/* hstream_respond_grpc() answers a gRPC request locally with a
 * trailers-only response: HTTP 200, grpc-status code, grpc-message msg. */
int hstream_respond_grpc(struct hstream *s, const char *code, const char *msg);

/* hstream_flags_str() writes Envoy's "NR,UF" form (or "-") into out. */
const char *hstream_flags_str(unsigned flags, char *out, size_t n);

#endif
