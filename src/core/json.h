#ifndef STRAIT_CORE_JSON_H
#define STRAIT_CORE_JSON_H

#include <stddef.h>

struct buf;

/* json_escape() appends s (n bytes) as a quoted JSON string. Control bytes
 * are escaped as \u00XX; bytes >= 0x80 pass through (callers hand in UTF-8
 * or accept that invalid UTF-8 is carried through). Returns 0 or -1 when
 * the buffer's cap is reached. */
int json_escape(struct buf *b, const char *s, size_t n);
int json_str(struct buf *b, const char *s);

#endif
