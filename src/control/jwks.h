#ifndef STRAIT_CONTROL_JWKS_H
#define STRAIT_CONTROL_JWKS_H

#include <stddef.h>
#include <stdint.h>

struct dns_cache;
struct event_base;

/*
 * The JWKS documents of RequestAuthentication jwksUris (http:// and
 * https://), fetched on the control thread and kept with the last good
 * copy, as Envoy's remote JWKS cache does. Snapshot builds read the cache;
 * a URI seen for the first time is fetched in the background (the build
 * has no keys for it yet, so its tokens fail until the document is in),
 * and on_change runs (once per loop turn) whenever a document arrives or
 * changes, so the owner builds a new snapshot. Every document is fetched
 * again each refresh interval; a failed fetch, or a document without a
 * usable key, keeps the last good one and is retried sooner (doubling
 * from one second up to the refresh interval).
 *
 * https is verified against ca_file (NULL: the system bundle) with the
 * URL's host as the name. Answers over 1 MiB, other than 200, or slower
 * than the timeout are failures (resolving the name included). Names
 * are resolved through the dns cache given (control/dns.h: evdns with the
 * bootstrap's dns.nameservers and dns.timeout), never with a blocking
 * getaddrinfo(): a slow or dead nameserver holds neither traffic nor the
 * control loop (reloads, the admin API).
 *
 * Entries are kept by use, as the DNS cache's: jwks_cache_mark() before a
 * build, lookups mark, jwks_cache_sweep() after a kept build drops what
 * it did not use.
 */
struct jwks_cache;

typedef void (*jwks_change_fn)(void *arg);

struct jwks_conf {
    int64_t refresh_ms;  /* how often a document is fetched again */
    const char *ca_file; /* https trust; NULL or "": the system bundle */
};

struct jwks_stats {
    uint64_t fetches;  /* started */
    uint64_t failures; /* fetches that brought no usable document */
    uint64_t changes;  /* documents that arrived or changed */
    uint64_t uris;     /* in the cache now */
};

/* jwks_cache_new() returns a cache on base that resolves names with dns
 * (which must outlive it; NULL: only address literals), or NULL when
 * memory is short. */
struct jwks_cache *jwks_cache_new(struct event_base *base,
                                  struct dns_cache *dns,
                                  jwks_change_fn on_change, void *arg);
/* jwks_cache_free() cancels what is in flight and frees; NULL: no-op. */
void jwks_cache_free(struct jwks_cache *c);

/* jwks_cache_configure() sets the refresh and trust used from
 * the next fetch on (the strings are copied). 0 or -1 (memory). */
int jwks_cache_configure(struct jwks_cache *c, const struct jwks_conf *conf);

void jwks_cache_mark(struct jwks_cache *c);
void jwks_cache_sweep(struct jwks_cache *c);

/* jwks_cache_get() returns the last good document of uri (owned by the
 * cache, valid until control returns to the loop) and its length, or
 * NULL when none has arrived yet; marks uri used, and starts its fetch
 * when it is new. timeout_ms bounds each fetch of uri (connect to last
 * byte; 0: 5 s). */
const char *jwks_cache_get(struct jwks_cache *c, const char *uri,
                           int64_t timeout_ms, size_t *n);

void jwks_cache_stats(const struct jwks_cache *c, struct jwks_stats *out);

#endif
