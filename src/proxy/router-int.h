#ifndef STRAIT_PROXY_ROUTER_INT_H
#define STRAIT_PROXY_ROUTER_INT_H

/*
 * The router's private layout, shared by router.c (lifecycle),
 * router-match.c (matching and the request-time helpers), router-dump.c,
 * and the compile layer that fills it (compile/router-int.h). Nothing else
 * includes this.
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <pcre2.h>
#include <stdatomic.h>
#include <string.h>

#include "core/arena.h"
#include "proxy/router.h"

/* Regular expressions run with these limits, so no input makes a match
 * run long: a pattern that would backtrack without bound fails to match
 * instead. The match limit counts backtracking points (JIT honours it);
 * the heap limit (KiB) bounds the interpreter's frames in the arena. */
#define ROUTER_REGEX_MATCH_LIMIT 1000000u
#define ROUTER_REGEX_DEPTH_LIMIT 10000u
#define ROUTER_REGEX_HEAP_LIMIT_KIB 1024u

struct route_regex {
    pcre2_code *code;
    pcre2_match_context *mctx; /* the router's limits */
    uint32_t ngroups;          /* capture groups, for rewrite substitutions */
};

/* What a condition looks at. Ordered by cost: conditions of a block are
 * sorted so the cheap ones reject a request first. */
enum rt_what {
    RT_PORT,
    RT_METHOD,
    RT_SCHEME,
    RT_URI,
    RT_AUTHORITY,
    RT_HEADER,
    RT_QUERY,
};

struct rt_cond {
    enum rt_what what;
    int negate;        /* withoutHeaders */
    int cost;          /* sort key */
    struct slice name; /* header (lowercase) or query parameter */
    uint32_t port;
    struct route_strmatch m;
};

/* One match block: its conditions, all of which must hold. */
struct rt_block {
    const struct rt_cond *conds;
    size_t nconds;
    int index;    /* position in the rule's match[] */
    int uri_kind; /* the block's uri condition, -1: none */
    size_t uri_prefix_len;
};

/* One rule: any block matches (no blocks: every request matches). */
struct rt_rule {
    const struct rt_block *blocks;
    size_t nblocks;
    const struct route_action *action;
};

struct rt_vhost {
    const char *domain; /* lowercase: "a.b", "*.b" or "*" */
    struct rt_rule *rules;
    size_t nrules;
    size_t cap;
};

/* Open addressing over domain keys (lowercase); slot value is a vhost
 * index + 1 (0: empty). */
struct rt_slot {
    const char *key;
    size_t len;
    uint64_t hash;
    uint32_t vhost;
};

struct rt_table {
    struct rt_slot *slots;
    size_t mask; /* size - 1; size is a power of two */
    size_t n;
};

struct router {
    atomic_uint refs;
    struct arena mem; /* strings, conditions, actions */
    struct rt_vhost *vhosts;
    size_t nvhosts;
    size_t cap;
    struct rt_table exact;     /* "a.b" */
    struct rt_table wild;      /* ".b" for "*.b" */
    int catch_all;             /* vhost of "*", -1: none */
    pcre2_match_context *mctx; /* limits; only read while matching */
    struct route_regex **regexes;
    size_t nregexes;
    size_t regex_cap;
    size_t nactions;
    size_t nrules;
};

/* ---- lifecycle (router.c) ---- */

/* router_new() returns an empty router (no virtual hosts, regex limits
 * set) with one reference, for the compile layer to fill before anyone
 * else sees it; NULL when memory is short. router_unref() frees it. */
struct router *router_new(void);

/* ---- matching ---- */

/* Hash of a lowercase key (FNV-1a). */
static inline uint64_t rt_hash(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* rt_table_get() returns the vhost index for key (lowercase), or -1. */
static inline int rt_table_get(const struct rt_table *t, const char *key,
                               size_t len)
{
    uint64_t h;
    size_t i;

    if (t->slots == NULL)
        return -1;
    h = rt_hash(key, len);
    for (i = h & t->mask;; i = (i + 1) & t->mask) {
        const struct rt_slot *s = &t->slots[i];
        if (s->key == NULL)
            return -1;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)
            return (int)s->vhost;
    }
}

#endif
