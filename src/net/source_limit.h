#ifndef STRAIT_NET_SOURCE_LIMIT_H
#define STRAIT_NET_SOURCE_LIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"

/*
 * Per-source connection accounting for the control plane's own TLS APIs
 * (the CA API, the site-link catalog API): one source address (an IP,
 * whatever its ports: addr_same_host()) holds at most max connections,
 * so that one client with many idle connections cannot take the slots
 * every other client needs. Refusals are counted and summed into one
 * warning per SOURCE_LIMIT_LOG_MS, so a flood does not flood the log; each
 * is logged at debug level.
 *
 * The table holds one row per source with a connection open, so it is
 * never larger than the server's own connection limit; rows go when
 * their last connection does (memory stays flat under churn).
 */
#define SOURCE_LIMIT_LOG_MS 10000

struct source_count {
    struct addr src;
    size_t n;
};

struct source_limit {
    const char *who; /* log prefix ("CA", "links"); static */
    size_t max;      /* per source */
    struct source_count *v;
    size_t n, cap;
    uint64_t refused_per_source; /* over max */
    uint64_t refused_busy;       /* over a server-wide slot limit */
    /* Refusals since the last summary warning, and when it was. */
    uint64_t unlogged;
    uint64_t log_ms;
};

/* source_limit_init() sets up l for max connections per source (>= 1);
 * who is a static string for the log. */
void source_limit_init(struct source_limit *l, const char *who, size_t max);
void source_limit_dispose(struct source_limit *l);

/*
 * source_limit_take() takes one of src's slots: 0, or -1 when src already
 * holds max connections (counted in refused_per_source and logged, with
 * peer as its printable form) or memory ran out. A taken slot is given
 * back with source_limit_give() exactly once.
 */
int source_limit_take(struct source_limit *l, const struct addr *src,
                      const char *peer);
void source_limit_give(struct source_limit *l, const struct addr *src);

/* source_limit_count() is how many connections src holds now. */
size_t source_limit_count(const struct source_limit *l, const struct addr *src);

/* source_limit_busy() counts and logs a connection refused for a
 * server-wide limit (why names it: "handshake slots full"). */
void source_limit_busy(struct source_limit *l, const char *peer,
                       const char *why);

#endif
