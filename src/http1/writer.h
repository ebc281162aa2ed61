#ifndef STRAIT_HTTP1_WRITER_H
#define STRAIT_HTTP1_WRITER_H

/*
 * Writing HTTP/1.1 heads and chunks into a bounded buffer.
 *
 * Every writer checks what it is given before writing anything: a header
 * name must be a token, and no value, target or reason may hold a control
 * character other than HTAB (so never CR, LF or NUL). A value taken from
 * one peer can therefore never inject a header or a second message into
 * the other. Each writer appends all of its bytes or none: on -1 the
 * buffer is as it was.
 */

#include <stddef.h>

#include "core/buf.h"
#include "core/slice.h"
#include "http/http.h"

/* h1_reason() returns the standard reason phrase of status ("Not Found"),
 * or "" for a code without one. The string is static. */
const char *h1_reason(int status);

/*
 * h1_write_request_head() appends "METHOD SP target SP HTTP/1.1 CRLF",
 * the headers as "name: value CRLF", and the empty line.
 * method must be a token and target non-empty visible ASCII.
 * Returns 0, or -1 when an argument is refused or the cap of b is reached.
 */
int h1_write_request_head(struct buf *b, struct slice method,
                          struct slice target, const struct http_field *hdrs,
                          size_t n);

/*
 * h1_write_response_head() appends "HTTP/1.1 status reason CRLF", the
 * headers and the empty line. status must be 100..599; reason NULL means
 * h1_reason(status). Returns 0 or -1 like h1_write_request_head().
 */
int h1_write_response_head(struct buf *b, int status, const char *reason,
                           const struct http_field *hdrs, size_t n);

/*
 * h1_write_chunk() appends one chunk: the size in hex, CRLF, the data, CRLF.
 * n == 0 writes nothing and returns 0, because an empty chunk is the last
 * chunk and would end the body; use h1_write_last_chunk() for that.
 * Returns 0, or -1 when the cap is reached.
 */
int h1_write_chunk(struct buf *b, const void *data, size_t n);

/* h1_write_last_chunk() appends "0 CRLF", the trailer fields and the final
 * CRLF. Returns 0, or -1 when a trailer is refused or the cap is reached. */
int h1_write_last_chunk(struct buf *b, const struct http_field *trailers,
                        size_t n);

#endif
