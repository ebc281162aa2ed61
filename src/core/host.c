#include "config.h"

#include <stdint.h>
#include <string.h>

#include "core/ascii.h"
#include "core/host.h"

int host_eq(const char *a, size_t an, const char *b, size_t bn)
{
    if (an != bn)
        return 0;
    for (size_t i = 0; i < an; i++)
        if (ascii_lower(a[i]) != ascii_lower(b[i]))
            return 0;
    return 1;
}

enum host_pattern_kind host_pattern_kind(const char *pattern)
{
    if (pattern[0] == '*' && pattern[1] == '\0')
        return HOST_ANY;
    if (pattern[0] == '*' && pattern[1] == '.')
        return HOST_SUFFIX;
    return HOST_EXACT;
}

/* The suffix rule: (host, n) ends with suffix (sn bytes, from the '.')
 * and has at least one byte before it. */
static int ends_with(const char *host, size_t n, const char *suffix, size_t sn)
{
    return n > sn && host_eq(host + n - sn, sn, suffix, sn);
}

int host_match(const char *pattern, const char *host, size_t n)
{
    return host_match_rank(pattern, host, n) > 0;
}

size_t host_match_rank(const char *pattern, const char *host, size_t n)
{
    size_t pl = strlen(pattern);

    switch (host_pattern_kind(pattern)) {
    case HOST_ANY:
        return 1;
    case HOST_SUFFIX:
        return ends_with(host, n, pattern + 1, pl - 1) ? 2 + pl : 0;
    case HOST_EXACT:
    default:
        return host_eq(pattern, pl, host, n) ? SIZE_MAX : 0;
    }
}

int host_cert_match(const char *pattern, const char *host, size_t n)
{
    size_t pl = strlen(pattern);
    const char *dot;

    if (host_pattern_kind(pattern) != HOST_SUFFIX)
        return host_eq(pattern, pl, host, n);
    /* The wildcard is the whole first label, and that label is not
     * empty: the rest, from the first dot, is the suffix. */
    dot = memchr(host, '.', n);
    return dot != NULL && dot != host &&
           host_eq(dot, n - (size_t)(dot - host), pattern + 1, pl - 1);
}

int host_covers(const char *a, const char *b)
{
    switch (host_pattern_kind(a)) {
    case HOST_ANY:
        return 1;
    case HOST_SUFFIX:
        /* "*.example.com" covers "x.example.com" and "*.x.example.com"
         * (and itself: "*" then ".example.com"), never "*". */
        return host_pattern_kind(b) != HOST_ANY && host_match(a, b, strlen(b));
    case HOST_EXACT:
    default:
        return host_pattern_kind(b) == HOST_EXACT &&
               host_eq(a, strlen(a), b, strlen(b));
    }
}

int host_intersect(const char *a, const char *b)
{
    return host_covers(a, b) || host_covers(b, a);
}
