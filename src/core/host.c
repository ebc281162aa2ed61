#include "config.h"

#include <stdint.h>
#include <stdlib.h>
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

void host_index_init(struct host_index *x)
{
    strmap_init(&x->exact);
    strmap_init(&x->suffix);
    x->any = 0;
}

void host_index_dispose(struct host_index *x)
{
    strmap_dispose(&x->exact);
    strmap_dispose(&x->suffix);
    x->any = 0;
}

int host_index_add(struct host_index *x, const char *pattern, size_t value)
{
    struct strmap *m = &x->exact;
    char *key;
    int rc = 1;

    switch (host_pattern_kind(pattern)) {
    case HOST_ANY:
        if (x->any != 0)
            return 1;
        x->any = value + 1;
        return 0;
    case HOST_SUFFIX:
        m = &x->suffix;
        pattern++; /* the key is ".suffix" */
        break;
    case HOST_EXACT:
    default:
        break;
    }
    key = strdup(pattern);
    if (key == NULL)
        return -1;
    ascii_lower_str(key);
    if (strmap_get(m, key) == NULL)
        rc = strmap_put(m, key, (void *)(uintptr_t)(value + 1));
    free(key);
    return rc;
}

long host_index_find(const struct host_index *x, const char *host, size_t n)
{
    char name[1024];
    uintptr_t v;

    if (n > 0 && n < sizeof(name)) {
        ascii_lower_copy(name, host, n);
        name[n] = '\0';
        if ((v = (uintptr_t)strmap_get(&x->exact, name)) != 0)
            return (long)v - 1;
        /* The leftmost dot past the first byte gives the longest suffix
         * with a name before it. */
        for (size_t i = 1; i < n; i++)
            if (name[i] == '.' &&
                (v = (uintptr_t)strmap_get(&x->suffix, name + i)) != 0)
                return (long)v - 1;
    }
    return x->any != 0 ? (long)x->any - 1 : -1;
}
