#ifndef STRAIT_HTTP1_H1_WIRE_H
#define STRAIT_HTTP1_H1_WIRE_H

#include <stddef.h>

#include "core/slice.h"
#include "http/http.h"

struct buf;

/*
 * HTTP/1.1 serialisation of protocol-neutral heads into a bounded buffer.
 * Every function returns 0, or -1 when the buffer's cap is reached or a
 * name or value holds CR, LF or NUL: a value that came from one peer must
 * never become a header line of the other.
 */
int h1_write_status(struct buf *b, int status);
int h1_write_request_line(struct buf *b, struct slice method,
                          struct slice target);
int h1_write_field(struct buf *b, struct slice name, struct slice value);
int h1_write_fields(struct buf *b, const struct http_fields *f);
int h1_write_chunk(struct buf *b, const void *data, size_t n);
/* The zero-size chunk, then trailers (may be empty), then the blank line. */
int h1_write_last_chunk(struct buf *b, const struct http_fields *trailers);

/* h1_reason() is the standard reason phrase of status, or "Unknown". */
const char *h1_reason(int status);

#endif
