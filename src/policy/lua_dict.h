#ifndef STRAIT_POLICY_LUA_DICT_H
#define STRAIT_POLICY_LUA_DICT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Shared dictionaries for LuaPolicy (strait.shared.NAME): key-value
 * stores every worker reads and writes, with OpenResty's
 * ngx.shared.DICT semantics (values nil, boolean, number or string with
 * uint32 flags and an optional expiry; set evicts, safe_set does not).
 *
 * Unlike OpenResty's, a dict is split into LUADICT_SHARDS shards by key
 * hash, each with its own reader-writer lock and its share of the
 * capacity, so workers on different keys do not meet, and reads of one
 * key do not exclude each other: get takes its shard's lock for reading
 * and marks the entry used with an atomic store. Eviction is CLOCK
 * (second chance): a hand walks the shard's entries, clearing used
 * marks and evicting the first entry found unmarked (an expired one
 * first), so a get never relinks anything.
 *
 * Dicts outlive snapshots: the control loop's luadict_set hands the same
 * dict to every snapshot that declares the name, so contents survive a
 * reload. Reference-counted with atomics; the set holds its dicts
 * weakly, so a dict no snapshot names any more is freed with the last
 * snapshot that did.
 *
 * Accounting: the capacity is the heap the dict may take, all of it:
 * each entry is charged what its allocations really cost (the entry
 * with its key, and a string value, each rounded as malloc rounds), the
 * bucket arrays are charged to their shards as they grow, and the
 * dict's own structures come off the capacity first.
 */

#define LUADICT_SHARDS 64
/* Evictions one write may make before it fails with "no memory"
 * (OpenResty's 30). */
#define LUADICT_MAX_EVICT 30
/* Keys are at most this long (OpenResty: 65535). */
#define LUADICT_MAX_KEY 65535
/* A dict has one shard per this many bytes of capacity (at least one,
 * at most LUADICT_SHARDS), so a small dict's fixed cost leaves room. */
#define LUADICT_SHARD_MIN (64 * 1024)

enum luadict_type {
    LUADICT_NIL,
    LUADICT_BOOL,
    LUADICT_NUMBER,
    LUADICT_STRING,
};

struct luadict_value {
    int type; /* enum luadict_type */
    int b;
    double n;
    const char *s; /* STRING: owned by whoever filled it */
    size_t len;
    uint32_t flags;
};

struct luadict;
struct luadict_set;

struct luadict *luadict_new(const char *name, size_t capacity);
struct luadict *luadict_ref(struct luadict *d);
void luadict_unref(struct luadict *d);
const char *luadict_name(const struct luadict *d);

/* The results of a write: 0 done; LUADICT_EXISTS (add), LUADICT_NOT_FOUND
 * (replace, incr, expire, ttl), LUADICT_NO_MEMORY, LUADICT_NOT_NUMBER. */
enum {
    LUADICT_OK = 0,
    LUADICT_EXISTS = -1,
    LUADICT_NOT_FOUND = -2,
    LUADICT_NO_MEMORY = -3,
    LUADICT_NOT_NUMBER = -4,
};

/* Write modes. */
enum { LUADICT_SET, LUADICT_ADD, LUADICT_REPLACE };

/*
 * luadict_get() copies key's value into v (a STRING into out, which the
 * caller frees; NULL when memory is short: -3); v->type NIL when absent
 * or expired. now_ms is the monotonic clock.
 */
int luadict_get(struct luadict *d, const char *key, size_t klen,
                uint64_t now_ms, struct luadict_value *v, char **out);

/* luadict_store() writes v (NIL: delete) under mode; ttl_ms 0: never
 * expires. evict: may evict others for room (set, add, replace; not
 * the safe_ forms); *forcible is 1 when it did. */
int luadict_store(struct luadict *d, int mode, const char *key, size_t klen,
                  const struct luadict_value *v, uint64_t ttl_ms,
                  uint64_t now_ms, int evict, int *forcible);

/* luadict_incr(): value += delta; a missing key is created at init + delta
 * when has_init (with init_ttl_ms), else LUADICT_NOT_FOUND. */
int luadict_incr(struct luadict *d, const char *key, size_t klen, double delta,
                 int has_init, double init, uint64_t init_ttl_ms,
                 uint64_t now_ms, double *out, int *forcible);

/* luadict_ttl(): remaining ms in *ms (0: never expires). */
int luadict_ttl(struct luadict *d, const char *key, size_t klen,
                uint64_t now_ms, uint64_t *ms);
int luadict_expire(struct luadict *d, const char *key, size_t klen,
                   uint64_t ttl_ms, uint64_t now_ms);

/* flush_all marks every entry expired; flush_expired frees up to max
 * expired entries (0: all) and returns how many. */
void luadict_flush_all(struct luadict *d);
size_t luadict_flush_expired(struct luadict *d, size_t max, uint64_t now_ms);

/* luadict_keys() calls fn for up to max live keys (0: all), one shard
 * locked at a time; fn returns non-zero to stop. */
void luadict_keys(struct luadict *d, size_t max, uint64_t now_ms,
                  int (*fn)(void *arg, const char *key, size_t klen),
                  void *arg);

size_t luadict_capacity(const struct luadict *d);
size_t luadict_free_space(const struct luadict *d);

/*
 * luadict_token_bucket() takes one token from the bucket under key
 * (rate tokens per second, at most burst), atomically under the shard's
 * lock: 1 allowed, 0 not (with *retry_ms until a token is there), or a
 * negative LUADICT_* code. *left gets the tokens left.
 */
int luadict_token_bucket(struct luadict *d, const char *key, size_t klen,
                         double rate, double burst, uint64_t now_ms,
                         double *left, uint64_t *retry_ms);

/* The process's dicts by name (the control loop's; luadict_set_free()
 * drops its reference: the set goes with the last dict made in it). */
struct luadict_set *luadict_set_new(void);
void luadict_set_free(struct luadict_set *s);
/* luadict_set_get() returns a reference to the dict called name, made
 * with capacity if there is none yet (a later, different capacity keeps
 * the first: *resized is 1). NULL when memory is short. Control thread. */
struct luadict *luadict_set_get(struct luadict_set *s, const char *name,
                                size_t capacity, int *resized);
/* The dicts in the set now (some snapshot holds each). */
size_t luadict_set_count(struct luadict_set *s);

#endif
