#ifndef STRAIT_CORE_ASCII_H
#define STRAIT_CORE_ASCII_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
static inline void ascii_lower_copy(char *dst, const char *src, size_t n);

static inline void ascii_lower_n(char *s, size_t n)
{
    ascii_lower_copy(s, s, n);
}

/* ascii_lower_str() lowers the NUL-terminated s in place; NULL is
 * allowed and left alone. */
static inline void ascii_lower_str(char *s)
{
    for (; s != NULL && *s != '\0'; s++)
        *s = ascii_lower(*s);
}

/* ascii_lower_copy() writes the n bytes of src, lowered, to dst (n bytes;
 * no NUL is added). dst and src may be the same. Every header name the
 * data path stores goes through it, so it takes 8 bytes a step: in each
 * byte below 0x80, adding 0x80 - 'A' sets the high bit from 'A' up and
 * adding 0x7f - 'Z' sets it above 'Z'; where exactly the first is set,
 * the byte is upper case and gets 0x20. Bytes from 0x80 up are kept. */
static inline void ascii_lower_copy(char *dst, const char *src, size_t n)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = ones * 0x80;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint64_t x, low7, ge_a, gt_z, upper;

        memcpy(&x, src + i, 8);
        low7 = x & ~highs;
        ge_a = low7 + ones * (0x80 - 'A');
        gt_z = low7 + ones * (0x7f - 'Z');
        upper = (ge_a ^ gt_z) & ~x & highs;
        x |= upper >> 2;
        memcpy(dst + i, &x, 8);
    }
    for (; i < n; i++)
        dst[i] = ascii_lower(src[i]);
}

/*
 * ascii_text_ok() is 1 when none of the n bytes at p is a control
 * character other than HTAB, nor DEL: what a header value, a reason
 * phrase or a field value may hold (RFC 9110 section 5.5; bytes from 0x80
 * up are obs-text and allowed). Values are checked where they are parsed
 * and again where they are written, on every request, so this takes 8
 * bytes a step: for a word x, (x - 0x20..) & ~x & 0x80.. is non-zero
 * exactly when some byte is below 0x20, and the same test on x ^ 0x7f..
 * against 0x01.. finds a DEL. A flagged word (a tab, or a refusal) is
 * decided byte by byte.
 */
static inline int ascii_text_byte_ok(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static inline int ascii_text_ok(const char *p, size_t n)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = ones * 0x80;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint64_t x, d;

        memcpy(&x, p + i, 8);
        d = x ^ (ones * 0x7f);
        if ((((x - ones * 0x20) & ~x) | ((d - ones) & ~d)) & highs) {
            for (size_t j = i; j < i + 8; j++)
                if (!ascii_text_byte_ok((unsigned char)p[j]))
                    return 0;
        }
    }
    for (; i < n; i++)
        if (!ascii_text_byte_ok((unsigned char)p[i]))
            return 0;
    return 1;
}

#endif
