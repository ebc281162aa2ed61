/*
 * Consistent hashing: the request keys Istio offers (header, cookie,
 * source address, query parameter) and the two tables Envoy builds from
 * endpoints (a ketama ring and a Maglev lookup table).
 */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ascii.h"
#include "core/err.h"
#include "http/http.h"
#include "upstream/hash.h"

/* Seeds of the two hashes that place an endpoint in a Maglev table. */
#define MAGLEV_SEED_OFFSET UINT64_C(0x2545f4914f6cdd1d)
#define MAGLEV_SEED_SKIP UINT64_C(0x9e3779b97f4a7c15)

uint64_t lb_hash_bytes(const void *p, size_t n, uint64_t seed)
{
    const uint64_t m = UINT64_C(0xc6a4a7935bd1e995);
    const int r = 47;
    const unsigned char *s = p;
    uint64_t h = seed ^ (n * m);
    size_t i;

    for (i = 0; i + 8 <= n; i += 8) {
        uint64_t k;
        memcpy(&k, s + i, 8);
        k *= m;
        k ^= k >> r;
        k *= m;
        h ^= k;
        h *= m;
    }
    if (i < n) {
        uint64_t t = 0;
        for (size_t j = 0; i + j < n; j++)
            t |= (uint64_t)s[i + j] << (8 * j);
        h ^= t;
        h *= m;
    }
    h ^= h >> r;
    h *= m;
    h ^= h >> r;
    return h;
}

int lb_is_prime(uint64_t x)
{
    if (x < 2)
        return 0;
    if (x < 4)
        return 1;
    if ((x & 1) == 0)
        return 0;
    for (uint64_t f = 3; f * f <= x; f += 2)
        if (x % f == 0)
            return 0;
    return 1;
}

void lb_hash_free(struct lb_hash *h)
{
    if (h == NULL)
        return;
    free(h->ring);
    free(h->table);
    free(h->name);
    free(h->cookie_path);
    free(h);
}

static int cmp_point(const void *a, const void *b)
{
    const struct lb_ring_point *x = a, *y = b;

    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    /* Equal hashes (never seen in practice) still sort the same way on
     * every build of the same endpoints. */
    return x->ep < y->ep ? -1 : x->ep > y->ep;
}

/*
 * Envoy's ring: every endpoint (equal weights) gets ceil(min / n) points,
 * each the hash of "<address>_<i>", so the ring holds at least min points
 * and at most LB_RING_MAX.
 */
static int build_ring(struct lb_hash *h, uint64_t min, const struct addr *eps,
                      size_t n)
{
    uint64_t per = n ? (min + n - 1) / n : 0;
    size_t k = 0;

    if (per == 0 && n > 0)
        per = 1;
    if (n > 0 && per * n > LB_RING_MAX)
        per = LB_RING_MAX / n ? LB_RING_MAX / n : 1;
    h->size = (size_t)(per * n);
    h->ring = calloc(h->size ? h->size : 1, sizeof(*h->ring));
    if (h->ring == NULL)
        return -1;
    for (size_t e = 0; e < n; e++) {
        char as[ADDR_STRLEN], key[ADDR_STRLEN + 24];
        addr_format(&eps[e], as, sizeof(as));
        for (uint64_t i = 0; i < per; i++) {
            int len = snprintf(key, sizeof(key), "%s_%llu", as,
                               (unsigned long long)i);
            h->ring[k].hash = lb_hash_bytes(key, (size_t)len, 0);
            h->ring[k].ep = (uint32_t)e;
            k++;
        }
    }
    qsort(h->ring, h->size, sizeof(*h->ring), cmp_point);
    return 0;
}

/*
 * Envoy's weighted ring: the lightest endpoint gets at least
 * ceil(min x its share of the total weight) points and the others points
 * in proportion to their weights (running totals, so the rounding never
 * adds up), the whole ring capped at LB_RING_MAX. Points are the same
 * "<address>_<i>" hashes as above, so an endpoint whose weight grows keeps
 * its old points and adds more.
 */
static int build_ring_weighted(struct lb_hash *h, uint64_t min,
                               const struct addr *eps, const uint32_t *w,
                               size_t n)
{
    uint64_t total = 0, *count = NULL;
    uint32_t lightest = UINT32_MAX;
    double scale, target = 0;
    size_t k = 0, done = 0;

    for (size_t e = 0; e < n; e++) {
        total += w[e];
        if (w[e] < lightest)
            lightest = w[e];
    }
    count = calloc(n, sizeof(*count));
    if (count == NULL)
        return -1;
    /* Ring points per unit of weight: enough for the lightest endpoint to
     * get its share of min, no more than the cap allows. */
    scale = (double)(((uint64_t)lightest * min + total - 1) / total) *
            (double)total / (double)lightest;
    if (scale > (double)LB_RING_MAX)
        scale = (double)LB_RING_MAX;
    for (size_t e = 0; e < n; e++) {
        target += scale * (double)w[e] / (double)total;
        while ((double)done < target && done < LB_RING_MAX) {
            count[e]++;
            done++;
        }
    }
    h->size = done;
    h->ring = calloc(h->size ? h->size : 1, sizeof(*h->ring));
    if (h->ring == NULL) {
        free(count);
        return -1;
    }
    for (size_t e = 0; e < n; e++) {
        char as[ADDR_STRLEN], key[ADDR_STRLEN + 24];
        addr_format(&eps[e], as, sizeof(as));
        for (uint64_t i = 0; i < count[e]; i++) {
            int len = snprintf(key, sizeof(key), "%s_%llu", as,
                               (unsigned long long)i);
            h->ring[k].hash = lb_hash_bytes(key, (size_t)len, 0);
            h->ring[k].ep = (uint32_t)e;
            k++;
        }
    }
    free(count);
    qsort(h->ring, h->size, sizeof(*h->ring), cmp_point);
    return 0;
}

/*
 * Maglev (Eisenbud et al., NSDI 2016): each endpoint walks its own
 * permutation of the m slots (offset + j * skip, m prime so every skip
 * visits all) and the endpoints take turns claiming their next free
 * slot until the table is full, which gives each one m / n slots (give or
 * take one) and moves few slots when an endpoint goes.
 *
 * With weights (w not NULL), Envoy's weighted fill: in round r an
 * endpoint takes a turn only while r x its weight has caught up with the
 * turns it had x the heaviest weight, so the heaviest takes every turn,
 * one of a third its weight every third, and slots end up in proportion
 * to weight.
 */
static int build_maglev(struct lb_hash *h, uint64_t m, const struct addr *eps,
                        const uint32_t *w, size_t n)
{
    uint64_t *offset = NULL, *skip = NULL, *next = NULL, *turns = NULL;
    uint64_t round = 1, heaviest = 0;
    size_t filled = 0;
    int rc = -1;

    h->size = n ? (size_t)m : 0;
    h->table = malloc((h->size ? h->size : 1) * sizeof(*h->table));
    offset = calloc(n ? n : 1, sizeof(*offset));
    skip = calloc(n ? n : 1, sizeof(*skip));
    next = calloc(n ? n : 1, sizeof(*next));
    turns = calloc(n ? n : 1, sizeof(*turns));
    if (h->table == NULL || offset == NULL || skip == NULL || next == NULL ||
        turns == NULL)
        goto fail;
    for (size_t e = 0; w != NULL && e < n; e++)
        if (w[e] > heaviest)
            heaviest = w[e];
    for (size_t i = 0; i < h->size; i++)
        h->table[i] = UINT32_MAX;
    for (size_t e = 0; e < n; e++) {
        char as[ADDR_STRLEN];
        size_t len = strlen(addr_format(&eps[e], as, sizeof(as)));
        offset[e] = lb_hash_bytes(as, len, MAGLEV_SEED_OFFSET) % m;
        skip[e] =
            m > 1 ? lb_hash_bytes(as, len, MAGLEV_SEED_SKIP) % (m - 1) + 1 : 1;
    }
    for (; n > 0 && filled < h->size; round++) {
        for (size_t e = 0; e < n && filled < h->size; e++) {
            uint64_t c;
            if (w != NULL) {
                if (round * w[e] < turns[e])
                    continue;
                turns[e] += heaviest;
            }
            c = (offset[e] + next[e] * skip[e]) % m;
            while (h->table[c] != UINT32_MAX) {
                next[e]++;
                c = (offset[e] + next[e] * skip[e]) % m;
            }
            h->table[c] = (uint32_t)e;
            next[e]++;
            filled++;
        }
    }
    rc = 0;
fail:
    free(offset);
    free(skip);
    free(next);
    free(turns);
    return rc;
}

struct lb_hash *lb_hash_new(const struct lb_hash_conf *conf,
                            const struct addr *eps, const uint32_t *weights,
                            size_t n, char **err)
{
    struct lb_hash *h = calloc(1, sizeof(*h));
    uint64_t size = conf->size;

    *err = NULL;
    if (h == NULL)
        goto oom;
    h->key = conf->key;
    h->algo = conf->algo;
    h->cookie_ttl_ms = conf->cookie_ttl_ms;
    h->name = strdup(conf->name ? conf->name : "");
    if (h->name == NULL)
        goto oom;
    if (conf->key == LB_KEY_HEADER)
        ascii_lower_str(h->name);
    if (conf->cookie_path != NULL && conf->cookie_path[0] != '\0') {
        h->cookie_path = strdup(conf->cookie_path);
        if (h->cookie_path == NULL)
            goto oom;
    }
    if (conf->algo == LB_MAGLEV) {
        if (size == 0)
            size = LB_MAGLEV_DEFAULT;
        if (size >= LB_MAGLEV_MAX || !lb_is_prime(size)) {
            err_set(err,
                    "maglev tableSize %llu must be a prime number below "
                    "%d (the default is %d)",
                    (unsigned long long)size, LB_MAGLEV_MAX, LB_MAGLEV_DEFAULT);
            goto fail;
        }
        if (build_maglev(h, size, eps, weights, n) < 0)
            goto oom;
    } else {
        if (size == 0)
            size = LB_RING_MIN_DEFAULT;
        if (size > LB_RING_MAX)
            size = LB_RING_MAX;
        if ((weights != NULL ? build_ring_weighted(h, size, eps, weights, n)
                             : build_ring(h, size, eps, n)) < 0)
            goto oom;
    }
    return h;
oom:
    err_set(err, "out of memory");
fail:
    lb_hash_free(h);
    return NULL;
}

size_t lb_hash_find(const struct lb_hash *h, uint64_t hash)
{
    size_t lo = 0, hi;

    if (h->algo == LB_MAGLEV)
        return (size_t)(hash % h->size);
    /* The first point at or after hash, wrapping past the end. */
    hi = h->size;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->ring[mid].hash < hash)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < h->size ? lo : 0;
}

static struct slice trim(struct slice s)
{
    while (s.n > 0 && (s.p[0] == ' ' || s.p[0] == '\t')) {
        s.p++;
        s.n--;
    }
    while (s.n > 0 && (s.p[s.n - 1] == ' ' || s.p[s.n - 1] == '\t'))
        s.n--;
    return s;
}

int lb_cookie_value(const struct http_request *req, struct slice name,
                    struct slice *out)
{
    const struct http_fields *f = &req->fields;

    for (size_t i = 0; i < f->n; i++) {
        struct slice v = f->v[i].value;
        size_t start = 0;

        if (!slice_eq_str(f->v[i].name, "cookie"))
            continue;
        while (start <= v.n) {
            size_t end = start, eq;
            struct slice pair, k, val;

            while (end < v.n && v.p[end] != ';')
                end++;
            pair = trim((struct slice){v.p + start, end - start});
            for (eq = 0; eq < pair.n && pair.p[eq] != '='; eq++)
                ;
            k = trim((struct slice){pair.p, eq});
            if (eq < pair.n && slice_eq(k, name)) {
                val = trim((struct slice){pair.p + eq + 1, pair.n - eq - 1});
                if (val.n >= 2 && val.p[0] == '"' && val.p[val.n - 1] == '"') {
                    val.p++;
                    val.n -= 2;
                }
                *out = val;
                return 1;
            }
            start = end + 1;
        }
    }
    return 0;
}

int lb_query_value(struct slice path, struct slice name, struct slice *out)
{
    size_t q = 0, start;

    while (q < path.n && path.p[q] != '?')
        q++;
    if (q >= path.n)
        return 0;
    start = q + 1;
    while (start <= path.n) {
        size_t end = start, eq;

        while (end < path.n && path.p[end] != '&' && path.p[end] != '#')
            end++;
        for (eq = start; eq < end && path.p[eq] != '='; eq++)
            ;
        if (slice_eq((struct slice){path.p + start, eq - start}, name) &&
            name.n > 0) {
            *out = eq < end ? (struct slice){path.p + eq + 1, end - eq - 1}
                            : (struct slice){path.p + end, 0};
            return 1;
        }
        if (end >= path.n || path.p[end] == '#')
            break;
        start = end + 1;
    }
    return 0;
}

/* The Set-Cookie value Envoy sends for a generated cookie. */
static struct slice make_set_cookie(const struct lb_hash *h, const char *value,
                                    struct arena *a)
{
    char buf[1024];
    int n = snprintf(buf, sizeof(buf), "%s=\"%s\"", h->name, value);
    int64_t age = h->cookie_ttl_ms / 1000;

    /* Under a second is a session cookie, as Envoy rounds it. */
    if (age > 0 && n > 0 && (size_t)n < sizeof(buf))
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "; Max-Age=%lld",
                      (long long)age);
    if (h->cookie_path != NULL && n > 0 && (size_t)n < sizeof(buf))
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "; Path=%s",
                      h->cookie_path);
    if (n > 0 && (size_t)n < sizeof(buf))
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "; HttpOnly");
    if (n <= 0 || (size_t)n >= sizeof(buf))
        return SLICE_NULL;
    return arena_slice(a, (struct slice){buf, (size_t)n});
}

int lb_hash_request(const struct lb_hash *h, const struct http_request *req,
                    struct slice source, struct slice conn, struct arena *a,
                    uint64_t *out, struct slice *set_cookie)
{
    struct slice v;

    *set_cookie = SLICE_NULL;
    switch (h->key) {
    case LB_KEY_HEADER: {
        /* Every field of that name, in order (a repeated header is one
         * key, not the first of several). */
        uint64_t acc = 0;
        int found = 0;
        for (size_t i = 0; i < req->fields.n; i++) {
            if (!slice_eq_str(req->fields.v[i].name, h->name))
                continue;
            v = req->fields.v[i].value;
            acc = lb_hash_bytes(v.p, v.n, acc);
            found = 1;
        }
        if (!found)
            return 0;
        *out = acc;
        return 1;
    }
    case LB_KEY_COOKIE: {
        char hex[17];
        if (lb_cookie_value(req, slice_of(h->name), &v)) {
            *out = lb_hash_bytes(v.p, v.n, 0);
            return 1;
        }
        if (h->cookie_ttl_ms < 0)
            return 0;
        snprintf(hex, sizeof(hex), "%016llx",
                 (unsigned long long)lb_hash_bytes(conn.p, conn.n, 0));
        *set_cookie = make_set_cookie(h, hex, a);
        if (set_cookie->p == NULL)
            return 0;
        *out = lb_hash_bytes(hex, 16, 0);
        return 1;
    }
    case LB_KEY_SOURCE_IP:
        if (source.n == 0)
            return 0;
        *out = lb_hash_bytes(source.p, source.n, 0);
        return 1;
    case LB_KEY_QUERY:
        if (!lb_query_value(req->path, slice_of(h->name), &v))
            return 0;
        *out = lb_hash_bytes(v.p, v.n, 0);
        return 1;
    }
    return 0;
}
