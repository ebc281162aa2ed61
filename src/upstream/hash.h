#ifndef STRAIT_UPSTREAM_HASH_H
#define STRAIT_UPSTREAM_HASH_H

/*
 * Consistent-hash load balancing (DestinationRule loadBalancer
 * consistentHash): what a request is hashed on, and the ring (Envoy's
 * RING_HASH, "ketama") or Maglev table that maps a hash to an endpoint.
 *
 * A table is built once per cluster when the configuration is compiled
 * (main thread), is immutable afterwards and is read by every worker
 * without locks. Points are derived from endpoint addresses, not from
 * their positions in the cluster, so the same address keeps its keys when
 * other endpoints come or go.
 */

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"
#include "core/arena.h"
#include "core/slice.h"

struct http_request;

/* lb_hash_bytes() is the 64-bit hash used for keys and ring points
 * (MurmurHash64A's construction: fast, well mixed, not cryptographic). */
uint64_t lb_hash_bytes(const void *p, size_t n, uint64_t seed);

/* What a request is hashed on (one of Istio's hashKey choices). */
enum lb_key_kind {
    LB_KEY_HEADER,
    LB_KEY_COOKIE,
    LB_KEY_SOURCE_IP,
    LB_KEY_QUERY,
};

enum lb_hash_algo { LB_RING_HASH, LB_MAGLEV };

/* Envoy's limits and defaults. */
#define LB_RING_MIN_DEFAULT 1024
#define LB_RING_MAX (8u * 1024 * 1024)
#define LB_MAGLEV_DEFAULT 65537
#define LB_MAGLEV_MAX 5000011 /* exclusive, as Istio checks */

struct lb_hash_conf {
    enum lb_key_kind key;
    const char *name;        /* header, cookie or query parameter name */
    const char *cookie_path; /* NULL or "": no Path attribute */
    int64_t cookie_ttl_ms;   /* < 0: never generate a cookie; 0: session */
    enum lb_hash_algo algo;
    uint64_t size; /* ring: minimum ring size; maglev: table size (prime) */
};

struct lb_ring_point {
    uint64_t hash;
    uint32_t ep;
};

struct lb_hash {
    enum lb_key_kind key;
    char *name; /* header names lowercased */
    char *cookie_path;
    int64_t cookie_ttl_ms;
    enum lb_hash_algo algo;
    struct lb_ring_point *ring; /* sorted by hash */
    uint32_t *table;            /* maglev: slot -> endpoint */
    size_t size;                /* points in ring, or slots in table */
};

/*
 * lb_hash_new() builds the ring or table for endpoints eps[0..n). n may
 * be 0 (the table is then empty and lb_hash_find() is never called).
 * weights: NULL when all endpoints weigh the same, else n weights of at
 * least 1; an endpoint gets ring points or table slots in proportion to
 * its weight (Envoy's weighted ring hash and Maglev).
 * Returns NULL with *err (allocated) when the configuration cannot be
 * built: a Maglev size that is not a prime, or memory.
 */
struct lb_hash *lb_hash_new(const struct lb_hash_conf *conf,
                            const struct addr *eps, const uint32_t *weights,
                            size_t n, char **err);
void lb_hash_free(struct lb_hash *h);

/* lb_is_prime() is true for a prime (Maglev table sizes must be). */
int lb_is_prime(uint64_t x);

/* lb_hash_find() returns the position in the ring or table for hash; the
 * endpoint there is lb_hash_ep(), the next position lb_hash_next() (to
 * walk past endpoints that are ejected). */
size_t lb_hash_find(const struct lb_hash *h, uint64_t hash);

static inline uint32_t lb_hash_ep(const struct lb_hash *h, size_t pos)
{
    return h->algo == LB_MAGLEV ? h->table[pos] : h->ring[pos].ep;
}

static inline size_t lb_hash_next(const struct lb_hash *h, size_t pos)
{
    return pos + 1 < h->size ? pos + 1 : 0;
}

/*
 * lb_hash_request() computes the hash of a request under h's policy.
 *
 * source: the downstream client address (useSourceIp).
 * conn:   bytes that are the same for every request of one downstream
 *         connection (its peer address): a generated cookie's value is
 *         derived from them, so concurrent requests of one client get the
 *         same cookie, as with Envoy.
 * a:      the request's arena, for a generated Set-Cookie value.
 * Returns 1 with *out set, or 0 when the request carries no key (the
 * balancer then picks at random). When the cookie policy has a ttl and
 * the request has no such cookie, one is generated: *set_cookie gets the
 * value of the Set-Cookie header to send back (in a), and the request is
 * hashed on the generated value. *set_cookie is {NULL,0} otherwise.
 */
int lb_hash_request(const struct lb_hash *h, const struct http_request *req,
                    struct slice source, struct slice conn, struct arena *a,
                    uint64_t *out, struct slice *set_cookie);

/* lb_cookie_value() finds cookie name in Cookie header values (several
 * fields as HTTP/2 sends them, or one "a=b; c=d" list). A quoted value is
 * unquoted. Returns 1 with *out, or 0. */
int lb_cookie_value(const struct http_request *req, struct slice name,
                    struct slice *out);

/* lb_query_value() finds the first query parameter name in path ("a=b"
 * or a bare "a", whose value is empty). Returns 1 with *out, or 0. */
int lb_query_value(struct slice path, struct slice name, struct slice *out);

#endif
