#ifndef STRAIT_CORE_SLICE_H
#define STRAIT_CORE_SLICE_H

#include <stddef.h>
#include <string.h>
#include <strings.h>

/* Bytes travel as (ptr, len), never as a NUL-terminated guess. The owner
 * of the bytes is whoever the surrounding contract names. */
struct slice {
    const char *p;
    size_t n;
};

#define SLICE_LIT(s) ((struct slice){(s), sizeof(s) - 1})
#define SLICE_NULL ((struct slice){NULL, 0})

static inline struct slice slice_of(const char *s)
{
    struct slice out = {s, s ? strlen(s) : 0};
    return out;
}

static inline int slice_eq(struct slice a, struct slice b)
{
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

static inline int slice_eq_str(struct slice a, const char *s)
{
    size_t n = strlen(s);
    return a.n == n && (n == 0 || memcmp(a.p, s, n) == 0);
}

static inline int slice_case_eq_str(struct slice a, const char *s)
{
    size_t n = strlen(s);
    return a.n == n && (n == 0 || strncasecmp(a.p, s, n) == 0);
}

static inline int slice_has_prefix(struct slice a, struct slice prefix)
{
    return a.n >= prefix.n && memcmp(a.p, prefix.p, prefix.n) == 0;
}

#endif
