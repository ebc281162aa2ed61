#ifndef STRAIT_CONTROL_DNS_H
#define STRAIT_CONTROL_DNS_H

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"

struct event_base;

/*
 * Names of ServiceEntries with resolution DNS, resolved on the control
 * thread with libevent's evdns (never blocking the loop), kept with their
 * addresses and refreshed when their TTL runs out (never sooner than
 * min_refresh_ms). Snapshot builds read the cache; when a name's
 * addresses change, on_change runs (once per loop turn) so the owner
 * builds a new snapshot. A failed refresh keeps the last addresses, as
 * Envoy does, and retries after min_refresh_ms.
 *
 * Entries are kept by use: dns_cache_mark() starts a build, lookups mark
 * what the build uses, and dns_cache_sweep() after a build that was kept
 * drops every name it did not use, so a renamed host leaves nothing
 * behind.
 */
struct dns_cache;

struct dns_conf {
    const struct addr *nameservers; /* none: those of resolv_conf */
    size_t nnameservers;
    uint64_t min_refresh_ms;
    uint64_t timeout_ms;     /* per query attempt */
    const char *resolv_conf; /* NULL: DNS_RESOLV_CONF */
};

#define DNS_RESOLV_CONF "/etc/resolv.conf"

struct evdns_base;
/* dns_read_resolv_conf() loads path's nameservers and options into dns:
 * 0, also when path is missing or names no nameserver (127.0.0.1:53 then,
 * with a warning), or -1 with an allocated *err naming path. */
int dns_read_resolv_conf(struct evdns_base *dns, const char *path, char **err);

struct dns_stats {
    uint64_t queries;  /* sent */
    uint64_t failures; /* queries that gave no address */
    uint64_t changes;  /* times a name's addresses changed */
    uint64_t names;    /* names in the cache now */
};

typedef void (*dns_change_fn)(void *arg);

/* dns_cache_new() returns a cache on base, or NULL with an allocated
 * *err. */
struct dns_cache *dns_cache_new(struct event_base *base,
                                const struct dns_conf *conf,
                                dns_change_fn on_change, void *arg, char **err);
/* dns_cache_free() cancels what is in flight and frees; NULL is a no-op. */
void dns_cache_free(struct dns_cache *c);

void dns_cache_mark(struct dns_cache *c);
void dns_cache_sweep(struct dns_cache *c);

/*
 * dns_cache_lookup() calls each(arg, ip) for every address known for name
 * now (IPv4 if it has any, else IPv6; text form, sorted) and returns how
 * many. A name seen for the first time is resolved in the background:
 * none is known yet, and on_change runs once it is.
 */
size_t dns_cache_lookup(struct dns_cache *c, const char *name,
                        void (*each)(void *arg, const char *ip), void *arg);

/* dns_cache_lookup_min() is dns_cache_lookup() for a name whose answers
 * are kept min_ttl_ms at least, whatever their TTL (istiod resolves
 * hostname gateways with a 30 s minimum); the largest minimum any user
 * asked for holds until the name is swept. */
size_t dns_cache_lookup_min(struct dns_cache *c, const char *name,
                            uint64_t min_ttl_ms,
                            void (*each)(void *arg, const char *ip), void *arg);

void dns_cache_stats(const struct dns_cache *c, struct dns_stats *out);

/*
 * dns_resolve() looks name up once through c's resolver (the cache's own
 * nameservers, timeout and attempts), without keeping it in the cache:
 * the connections of the control thread itself (jwksUri fetches, the CA
 * client) resolve as ServiceEntry names do, never with a blocking
 * getaddrinfo(). Only the nameservers are asked (/etc/hosts is not
 * read, as for ServiceEntry names): IPv4 first, IPv6 when there is no A record
 * (Envoy's V4_PREFERRED); "localhost" and names under ".localhost" are
 * 127.0.0.1 without a query (RFC 6761). Counted in dns.queries and
 * dns.failures.
 *
 * cb(arg, a, NULL) gets the first address with port set, or
 * cb(arg, NULL, why) a static reason. cb runs from the loop, never inside
 * dns_resolve(), and exactly once unless the query is cancelled first.
 * Returns the query (owned by c until cb has run or it is cancelled), or
 * NULL when memory is short; cb is then never called.
 */
struct dns_query;
typedef void (*dns_resolve_fn)(void *arg, const struct addr *a,
                               const char *why);
struct dns_query *dns_resolve(struct dns_cache *c, const char *name, int port,
                              dns_resolve_fn cb, void *arg);

/* dns_query_cancel() stops q before its callback: cb is never called.
 * NULL is a no-op; q must not be used afterwards. */
void dns_query_cancel(struct dns_query *q);

#endif
