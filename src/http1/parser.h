#ifndef STRAIT_HTTP1_PARSER_H
#define STRAIT_HTTP1_PARSER_H

/*
 * A strict, incremental, zero-copy HTTP/1.x head parser and chunked decoder
 * (RFC 9110, RFC 9112). It refuses every framing ambiguity that lets two
 * HTTP implementations disagree on where a message ends (request smuggling):
 * Content-Length with Transfer-Encoding, differing lengths, bare CR or LF,
 * obs-fold, whitespace before the colon, and so on.
 *
 * The parser keeps no state between calls for heads: call it on the whole
 * buffered head every time bytes arrive. Each call first looks for the end
 * of the head with memchr() and parses fields only once the head is there;
 * the limits are enforced on the partial bytes so a slow client cannot make
 * us buffer more than max_head.
 */

#include <sys/types.h>

#include "http/conn_conf.h"
#include "http1/parser-t.h"

/* Chunk sizes and Content-Length above this are refused as overflow. */
#define H1_MAX_LENGTH ((uint64_t)1 << 62)
/* Longest chunk extension (after the size, up to CR) we accept. */
#define H1_CHUNK_EXT_MAX 4096
/* Largest trailer section the chunked decoder collects. */
#define H1_TRAILERS_MAX 8192

/*
 * h1_parse_request() parses a request head at the start of buf.
 *
 * buf, len: the bytes received so far; nothing is copied out of them.
 * lim:      the limits; NULL means http_limits_default().
 * req:      the result. req->headers must point to an array with room for
 *           lim->max_headers headers; every other field is overwritten.
 * Returns the length of the head including its final CRLF (> 0) when it is
 * complete (the body or the next pipelined request starts there); 0 when
 * more bytes are needed and no limit is exceeded yet; -1 on error with a
 * static reason in *why and the status to answer in *status: 400, 414 (request
 * line too long), 431 (head or header count too large), 501 (unknown
 * transfer coding) or 505 (version other than HTTP/1.0 and HTTP/1.1).
 * Empty lines before the request line are skipped (RFC 9112 section 2.2) and
 * counted in the returned length. A head longer than INT_MAX is refused.
 */
int h1_parse_request(const char *buf, size_t len, const struct http_limits *lim,
                     struct h1_request *req, const char **why, int *status);

/*
 * h1_parse_response() parses a response head, like h1_parse_request().
 *
 * request_method: the method of the request this answers, which decides
 *                 framing: HEAD has no body, CONNECT with 2xx becomes a
 *                 tunnel (no body). NULL is taken as any other method.
 * Framing: H1_BODY_NONE for 1xx, 204, 304, HEAD and 2xx to CONNECT;
 * CHUNKED when chunked is the final transfer coding; EOF when another coding
 * is last or neither Transfer-Encoding nor Content-Length is given (then
 * keep_alive is 0); LENGTH otherwise. A 1xx other than 101 is an interim
 * response: parse the next head after it.
 * Errors set *status to 502, the answer a proxy gives for a bad upstream.
 */
int h1_parse_response(const char *buf, size_t len,
                      const struct http_limits *lim,
                      const struct h1_slice *request_method,
                      struct h1_response *resp, const char **why, int *status);

/*
 * h1_parse_fields() parses a field section: field lines, each ending in
 * CRLF, optionally followed by the empty line that ends the section (then
 * nothing may follow it). The head parser uses it for headers; use it for
 * the trailers the chunked decoder collects.
 *
 * out, cap: where to store the fields; *n is set to how many were stored.
 * Field lines are counted against min(cap, lim->max_headers), including
 * those the underscore policy drops.
 * Returns 0, or -1 with *why and *status (400, or 431 for too many fields).
 */
int h1_parse_fields(const char *buf, size_t len, const struct http_limits *lim,
                    struct h1_header *out, size_t cap, size_t *n,
                    const char **why, int *status);

/* h1_slice_eq_ci() compares a slice with a NUL-terminated ASCII literal,
 * ignoring case (field names and tokens are case-insensitive). */
int h1_slice_eq_ci(struct h1_slice s, const char *lit);

/* h1_trailer_allowed() is false for a field that must not come in a
 * trailer section (RFC 9110 section 6.5.1): framing (Content-Length,
 * Transfer-Encoding), routing (Host) and connection options: a next hop
 * that merged them into the head would frame or route by them. The caller
 * drops them. */
int h1_trailer_allowed(struct h1_slice name);

/* h1_header_find() returns the first header called name (any case), or
 * NULL. The result points into hdrs. */
const struct h1_header *h1_header_find(const struct h1_header *hdrs, size_t n,
                                       const char *name);

/* h1_chunked_init() readies a decoder; same as zeroing it. */
void h1_chunked_init(struct h1_chunked *c);

/* h1_chunked_dispose() frees the collected trailers; the decoder is then
 * zeroed and may decode another body. */
void h1_chunked_dispose(struct h1_chunked *c);

/*
 * h1_chunked_decode() decodes the chunked coding incrementally.
 *
 * in, len: the next bytes of the body; they may be split anywhere.
 * data:    set to the payload bytes found within the consumed region (a
 *          slice of in; n may be 0). At most one slice per call: loop.
 * Returns the number of bytes consumed (the caller drops them and calls
 * again with the rest), or -1 with *why on malformed input; the decoder then
 * stays failed. Once h1_chunked_done() is true it consumes nothing and
 * returns 0: the remaining bytes belong to the next message.
 */
ssize_t h1_chunked_decode(struct h1_chunked *c, const char *in, size_t len,
                          struct h1_slice *data, const char **why);

/* h1_chunked_done() is true after the last chunk and the trailer section. */
int h1_chunked_done(const struct h1_chunked *c);

/*
 * h1_chunked_trailers() gives the raw trailer field lines (each with its
 * CRLF, without the final empty line; n is 0 when there were none) for
 * h1_parse_fields(). The bytes are owned by the decoder and live until
 * h1_chunked_dispose(). Returns 0, or -1 when the body is not done yet.
 */
int h1_chunked_trailers(const struct h1_chunked *c, struct h1_slice *out);

#endif
