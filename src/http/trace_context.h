#ifndef STRAIT_HTTP_TRACE_CONTEXT_H
#define STRAIT_HTTP_TRACE_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "http/http.h"

/*
 * Trace context carried by requests: W3C Trace Context (traceparent,
 * tracestate) parsed as strictly as the recommendation asks, and B3
 * (Zipkin's x-b3-* headers, or the single b3 header) for meshes that
 * still speak it. Parsing only reads; nothing here allocates.
 */
struct tctx {
    uint8_t trace_id[16];
    uint8_t parent_id[8]; /* the caller's span */
    int sampled;          /* 1, 0, or -1: the caller did not say */
};

/*
 * tctx_parse_traceparent() reads one traceparent value (n bytes at p):
 * version 00 is exactly "00-<32 hex>-<16 hex>-<2 hex>" in lowercase;
 * a later version (not ff) is read by its first 55 bytes, which must be
 * followed by the end or '-'. An all-zero trace-id or parent-id makes it
 * invalid. The sampled flag is bit 0 of the flags. Returns 0 with *out,
 * or -1 (ignore the header, and tracestate with it).
 */
int tctx_parse_traceparent(const char *p, size_t n, struct tctx *out);

/*
 * tctx_tracestate_valid() checks a tracestate list (the values of all its
 * fields joined with ','): at most 32 list-members, each key=value with
 * the key [a-z][a-z0-9_-*\/]{0,255} or tenant@system
 * ([a-z0-9][a-z0-9_-*\/]{0,240}@[a-z][a-z0-9_-*\/]{0,13}), the value
 * 1-256 printable bytes other than ',' and '=' not ending in a space, no
 * key twice; empty members are allowed. 1 when valid (it is passed on),
 * else 0 (it is dropped).
 */
int tctx_tracestate_valid(const char *p, size_t n);

/*
 * tctx_from_fields() finds the request's context: a valid traceparent
 * (exactly one such field), else B3. Returns 1 with *out from
 * traceparent, 2 from B3, 0 when there is none (or it is invalid).
 * *b3_single is set when the B3 context came from the single b3 header.
 * tracestate is checked only with a valid traceparent: *state_ok.
 */
int tctx_from_fields(const struct http_fields *f, struct tctx *out,
                     int *state_ok, int *b3_single);

/* tctx_hex() writes n bytes as 2n lowercase hex digits and a NUL. */
void tctx_hex(const uint8_t *p, size_t n, char *out);

/* tctx_traceparent() writes "00-<trace>-<span>-0X" (55 bytes and a NUL)
 * into out. */
void tctx_traceparent(const uint8_t trace_id[16], const uint8_t span_id[8],
                      int sampled, char out[56]);

#endif
