#ifndef STRAIT_CORE_ASCII_H
#define STRAIT_CORE_ASCII_H

#include <stddef.h>

/*
 * ASCII case for protocol text: header names, host names, SNI, codes.
 * Only 'A'..'Z' change; every other byte (UTF-8 included) is kept, and the
 * C library's locale is never consulted (tolower() would). Inline: the
 * data path lowers a header name or an SNI per request.
 */

/* ascii_lower() is c with 'A'..'Z' mapped to 'a'..'z'. */
static inline char ascii_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c + ('a' - 'A')) : c;
}

/* ascii_lower_n() lowers the n bytes at s in place. */
static inline void ascii_lower_n(char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s[i] = ascii_lower(s[i]);
}

/* ascii_lower_str() lowers the NUL-terminated s in place; NULL is
 * allowed and left alone. */
static inline void ascii_lower_str(char *s)
{
    for (; s != NULL && *s != '\0'; s++)
        *s = ascii_lower(*s);
}

/* ascii_lower_copy() writes the n bytes of src, lowered, to dst (n bytes;
 * no NUL is added). dst and src may be the same. */
static inline void ascii_lower_copy(char *dst, const char *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = ascii_lower(src[i]);
}

#endif
