/*
 * Shared dictionaries (see lua_dict.h): up to LUADICT_SHARDS shards, each a
 * chained hash table under a reader-writer lock, with a CLOCK ring of its
 * entries for eviction and its share of the capacity.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "policy/lua_dict.h"

enum { TYPE_BUCKET = 100 }; /* a token bucket: n tokens, b unused, at */

struct entry {
    struct entry *next;  /* hash chain */
    struct entry *cprev; /* CLOCK ring */
    struct entry *cnext;
    uint64_t hash;
    uint64_t expires_ms; /* 0: never */
    uint64_t at_ms;      /* token bucket: last refill */
    double n;
    uint32_t flags;
    unsigned char used; /* CLOCK's reference bit (atomic) */
    unsigned char type;
    unsigned char b;
    size_t klen, vlen;
    size_t cost;
    char *val;  /* STRING bytes */
    char key[]; /* klen bytes */
};

struct shard {
    pthread_rwlock_t lock;
    struct entry **buckets;
    size_t nbuckets; /* power of two */
    size_t count;
    struct entry *hand; /* CLOCK hand; NULL: empty */
    size_t used;        /* bytes charged: entries and the bucket array */
    size_t cap;
    char pad[64];
};

struct luadict {
    int refs;
    char *name;
    size_t capacity;
    size_t fixed;            /* what the dict costs empty, shards aside */
    size_t nshards;          /* a power of two, at most LUADICT_SHARDS */
    struct luadict_set *set; /* one reference; NULL: none */
    struct shard *shards;
};

/*
 * The most memory one allocation of n bytes can take, as glibc's malloc
 * lays it out: a size word, 16-byte alignment, 32 bytes at least, and
 * the 16 bytes it leaves inside a chunk it splits when the rest would
 * be too small to stand alone. The dict charges this, not n, so a dict
 * of capacity S holds at most S bytes of heap (keys, values, entries,
 * bucket arrays, itself).
 */
static size_t alloc_cost(size_t n)
{
    size_t c = (n + sizeof(size_t) + 15) & ~(size_t)15;

    return (c < 32 ? 32 : c) + 16;
}

/* A small dict has fewer shards, so that what each one costs empty
 * leaves room for entries: one shard per LUADICT_SHARD_MIN bytes. */
static size_t shards_for(size_t capacity)
{
    size_t n = 1;

    while (n < LUADICT_SHARDS && capacity / (n * 2) >= LUADICT_SHARD_MIN)
        n *= 2;
    return n;
}

#define INITIAL_BUCKETS 16

static void set_forget(struct luadict *d);

static uint64_t hash_key(const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)k[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

struct luadict *luadict_new(const char *name, size_t capacity)
{
    struct luadict *d = calloc(1, sizeof(*d));
    size_t n = shards_for(capacity), share;

    if (d == NULL)
        return NULL;
    d->refs = 1;
    d->capacity = capacity;
    d->nshards = n;
    d->name = strdup(name);
    d->shards = calloc(n, sizeof(*d->shards));
    if (d->name == NULL || d->shards == NULL) {
        free(d->name);
        free(d->shards);
        free(d);
        return NULL;
    }
    d->fixed = alloc_cost(sizeof(*d)) + alloc_cost(strlen(name) + 1) +
               alloc_cost(n * sizeof(*d->shards));
    share = capacity > d->fixed ? (capacity - d->fixed) / n : 0;
    for (size_t i = 0; i < n; i++) {
        struct shard *s = &d->shards[i];
        pthread_rwlock_init(&s->lock, NULL);
        s->nbuckets = INITIAL_BUCKETS;
        s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
        s->cap = share;
        /* The bucket array is the shard's to pay for, as its growth is. */
        s->used = alloc_cost(s->nbuckets * sizeof(*s->buckets));
        if (s->buckets == NULL)
            d->name = (free(d->name), NULL);
    }
    if (d->name == NULL) {
        d->refs = 1;
        luadict_unref(d);
        return NULL;
    }
    return d;
}

struct luadict *luadict_ref(struct luadict *d)
{
    if (d != NULL)
        __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
    return d;
}

static void entry_free(struct entry *e)
{
    free(e->val);
    free(e);
}

void luadict_unref(struct luadict *d)
{
    if (d == NULL || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    /* Said only of a dict the control loop's set held: a dict made by
     * `strait check` or a failed build was never in use. */
    if (d->set != NULL)
        log_info("lua: shared dict %s freed: no policy in effect declares "
                 "it",
                 d->name);
    set_forget(d);
    for (size_t i = 0; i < d->nshards; i++) {
        struct shard *s = &d->shards[i];
        for (size_t b = 0; s->buckets != NULL && b < s->nbuckets; b++) {
            struct entry *e = s->buckets[b], *nx;
            for (; e != NULL; e = nx) {
                nx = e->next;
                entry_free(e);
            }
        }
        free(s->buckets);
        pthread_rwlock_destroy(&s->lock);
    }
    free(d->shards);
    free(d->name);
    free(d);
}

const char *luadict_name(const struct luadict *d)
{
    return d->name;
}

static struct shard *shard_of(struct luadict *d, uint64_t h)
{
    return &d->shards[h & (d->nshards - 1)];
}

static struct entry **find(struct shard *s, uint64_t h, const char *k, size_t n)
{
    struct entry **pp = &s->buckets[(h >> 6) & (s->nbuckets - 1)];

    for (; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->klen == n &&
            memcmp((*pp)->key, k, n) == 0)
            return pp;
    return pp;
}

static int expired(const struct entry *e, uint64_t now)
{
    return e->expires_ms != 0 && e->expires_ms <= now;
}

/* Unlinks e (found at *pp) and frees it. */
static void drop(struct shard *s, struct entry **pp)
{
    struct entry *e = *pp;

    *pp = e->next;
    if (e->cnext == e) {
        s->hand = NULL;
    } else {
        e->cprev->cnext = e->cnext;
        e->cnext->cprev = e->cprev;
        if (s->hand == e)
            s->hand = e->cnext;
    }
    s->used -= e->cost;
    s->count--;
    entry_free(e);
}

static void drop_entry(struct shard *s, struct entry *e)
{
    struct entry **pp = find(s, e->hash, e->key, e->klen);

    if (*pp == e)
        drop(s, pp);
}

/* CLOCK: frees one entry (an expired one when the hand meets it, else
 * the first without its used mark). 0, or -1 when the shard is empty. */
static int evict_one(struct shard *s, uint64_t now, const struct entry *keep)
{
    for (size_t i = 0; s->hand != NULL && i < 2 * s->count + 1; i++) {
        struct entry *e = s->hand;
        s->hand = e->cnext;
        if (e == keep)
            continue;
        if (!expired(e, now) &&
            __atomic_exchange_n(&e->used, 0, __ATOMIC_RELAXED))
            continue;
        drop_entry(s, e);
        return 0;
    }
    return -1;
}

/* Makes room for cost more bytes in s; *forcible counts evictions. */
static int room(struct shard *s, size_t cost, uint64_t now, int evict,
                const struct entry *keep, int *forcible)
{
    int n = 0;

    while (s->used + cost > s->cap) {
        if (!evict || n == LUADICT_MAX_EVICT || evict_one(s, now, keep) < 0)
            return LUADICT_NO_MEMORY;
        n++;
        if (forcible != NULL)
            *forcible = 1;
    }
    return 0;
}

/* Doubles the bucket array when its bytes fit in the shard's share
 * (charged there); else chains grow longer, still correct. */
static void grow(struct shard *s)
{
    size_t nb = s->nbuckets * 2;
    size_t more = alloc_cost(nb * sizeof(struct entry *)) -
                  alloc_cost(s->nbuckets * sizeof(struct entry *));
    struct entry **b;

    if (s->used + more > s->cap)
        return;
    b = calloc(nb, sizeof(*b));
    if (b == NULL)
        return;
    s->used += more;
    for (size_t i = 0; i < s->nbuckets; i++) {
        struct entry *e = s->buckets[i], *nx;
        for (; e != NULL; e = nx) {
            nx = e->next;
            e->next = b[(e->hash >> 6) & (nb - 1)];
            b[(e->hash >> 6) & (nb - 1)] = e;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

/* A new entry for key, linked in s (room already made). */
static struct entry *insert(struct shard *s, uint64_t h, const char *k,
                            size_t n, size_t cost)
{
    struct entry *e = calloc(1, sizeof(*e) + n);
    struct entry **pp;

    if (e == NULL)
        return NULL;
    memcpy(e->key, k, n);
    e->klen = n;
    e->hash = h;
    e->cost = cost;
    if (s->count + 1 > s->nbuckets)
        grow(s);
    pp = &s->buckets[(h >> 6) & (s->nbuckets - 1)];
    e->next = *pp;
    *pp = e;
    if (s->hand == NULL) {
        e->cprev = e->cnext = e;
        s->hand = e;
    } else {
        /* Just behind the hand: the last the hand visits. */
        e->cnext = s->hand;
        e->cprev = s->hand->cprev;
        e->cprev->cnext = e;
        s->hand->cprev = e;
    }
    s->count++;
    s->used += cost;
    return e;
}

int luadict_get(struct luadict *d, const char *key, size_t klen,
                uint64_t now_ms, struct luadict_value *v, char **out)
{
    uint64_t h = hash_key(key, klen);
    struct shard *s = shard_of(d, h);
    struct entry *e;
    int rc = 0;

    memset(v, 0, sizeof(*v));
    *out = NULL;
    pthread_rwlock_rdlock(&s->lock);
    e = *find(s, h, key, klen);
    if (e != NULL && !expired(e, now_ms)) {
        /* CLOCK's mark: a plain store, no relinking, no write lock. */
        if (!__atomic_load_n(&e->used, __ATOMIC_RELAXED))
            __atomic_store_n(&e->used, 1, __ATOMIC_RELAXED);
        v->type = e->type == TYPE_BUCKET ? LUADICT_NUMBER : e->type;
        v->b = e->b;
        v->n = e->n;
        v->flags = e->flags;
        if (e->type == LUADICT_STRING) {
            *out = malloc(e->vlen + 1);
            if (*out == NULL) {
                rc = LUADICT_NO_MEMORY;
            } else {
                memcpy(*out, e->val, e->vlen);
                v->s = *out;
                v->len = e->vlen;
            }
        }
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

/* What an entry for a klen-byte key holding v costs in the heap: the
 * entry with its key, and a string's own allocation. */
static size_t cost_of(size_t klen, const struct luadict_value *v)
{
    return alloc_cost(sizeof(struct entry) + klen) +
           (v->type == LUADICT_STRING ? alloc_cost(v->len ? v->len : 1) : 0);
}

int luadict_store(struct luadict *d, int mode, const char *key, size_t klen,
                  const struct luadict_value *v, uint64_t ttl_ms,
                  uint64_t now_ms, int evict, int *forcible)
{
    uint64_t h = hash_key(key, klen);
    struct shard *s = shard_of(d, h);
    struct entry **pp, *e;
    size_t cost = cost_of(klen, v);
    char *val = NULL;
    int rc = 0, fresh = 0;

    if (forcible != NULL)
        *forcible = 0;
    if (v->type == LUADICT_STRING) {
        val = malloc(v->len ? v->len : 1);
        if (val == NULL)
            return LUADICT_NO_MEMORY;
        memcpy(val, v->s, v->len);
    }
    pthread_rwlock_wrlock(&s->lock);
    pp = find(s, h, key, klen);
    e = *pp;
    if (e != NULL && expired(e, now_ms)) {
        drop(s, pp);
        e = NULL;
    }
    if ((mode == LUADICT_ADD && e != NULL) ||
        (mode == LUADICT_REPLACE && e == NULL)) {
        rc = e != NULL ? LUADICT_EXISTS : LUADICT_NOT_FOUND;
        goto out;
    }
    if (v->type == LUADICT_NIL) {
        if (e != NULL)
            drop(s, pp);
        goto out;
    }
    if (cost > s->cap) {
        rc = LUADICT_NO_MEMORY;
        goto out;
    }
    if (e != NULL) {
        /* In place: the old value's bytes are given back first. */
        s->used -= e->cost;
        if (room(s, cost, now_ms, evict, e, forcible) < 0) {
            s->used += e->cost;
            rc = LUADICT_NO_MEMORY;
            goto out;
        }
        s->used += cost;
        e->cost = cost;
    } else {
        if (room(s, cost, now_ms, evict, NULL, forcible) < 0) {
            rc = LUADICT_NO_MEMORY;
            goto out;
        }
        e = insert(s, h, key, klen, cost);
        if (e == NULL) {
            rc = LUADICT_NO_MEMORY;
            goto out;
        }
        fresh = 1;
    }
    free(e->val);
    e->val = val;
    val = NULL;
    e->vlen = v->type == LUADICT_STRING ? v->len : 0;
    e->type = (unsigned char)v->type;
    e->b = (unsigned char)v->b;
    e->n = v->n;
    e->flags = v->flags;
    e->expires_ms = ttl_ms ? now_ms + ttl_ms : 0;
    /* A new entry starts unmarked (it sits just behind the hand, the last
     * it reaches): only a read or a later write earns a second chance. */
    e->used = fresh ? 0 : 1;
out:
    pthread_rwlock_unlock(&s->lock);
    free(val);
    return rc;
}

int luadict_incr(struct luadict *d, const char *key, size_t klen, double delta,
                 int has_init, double init, uint64_t init_ttl_ms,
                 uint64_t now_ms, double *out, int *forcible)
{
    uint64_t h = hash_key(key, klen);
    struct shard *s = shard_of(d, h);
    struct entry **pp, *e;
    int rc = 0;

    if (forcible != NULL)
        *forcible = 0;
    pthread_rwlock_wrlock(&s->lock);
    pp = find(s, h, key, klen);
    e = *pp;
    if (e != NULL && expired(e, now_ms)) {
        drop(s, pp);
        e = NULL;
    }
    if (e == NULL) {
        size_t cost = alloc_cost(sizeof(struct entry) + klen);
        if (!has_init) {
            rc = LUADICT_NOT_FOUND;
            goto out;
        }
        if (cost > s->cap || room(s, cost, now_ms, 1, NULL, forcible) < 0 ||
            (e = insert(s, h, key, klen, cost)) == NULL) {
            rc = LUADICT_NO_MEMORY;
            goto out;
        }
        e->type = LUADICT_NUMBER;
        e->n = init;
        e->expires_ms = init_ttl_ms ? now_ms + init_ttl_ms : 0;
    } else if (e->type != LUADICT_NUMBER) {
        rc = LUADICT_NOT_NUMBER;
        goto out;
    }
    e->n += delta;
    e->used = 1;
    *out = e->n;
out:
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

int luadict_ttl(struct luadict *d, const char *key, size_t klen,
                uint64_t now_ms, uint64_t *ms)
{
    uint64_t h = hash_key(key, klen);
    struct shard *s = shard_of(d, h);
    struct entry *e;
    int rc = LUADICT_NOT_FOUND;

    pthread_rwlock_rdlock(&s->lock);
    e = *find(s, h, key, klen);
    if (e != NULL && !expired(e, now_ms)) {
        *ms = e->expires_ms ? e->expires_ms - now_ms : 0;
        rc = 0;
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

int luadict_expire(struct luadict *d, const char *key, size_t klen,
                   uint64_t ttl_ms, uint64_t now_ms)
{
    uint64_t h = hash_key(key, klen);
    struct shard *s = shard_of(d, h);
    struct entry *e;
    int rc = LUADICT_NOT_FOUND;

    pthread_rwlock_wrlock(&s->lock);
    e = *find(s, h, key, klen);
    if (e != NULL && !expired(e, now_ms)) {
        e->expires_ms = ttl_ms ? now_ms + ttl_ms : 0;
        rc = 0;
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

void luadict_flush_all(struct luadict *d)
{
    for (size_t i = 0; i < d->nshards; i++) {
        struct shard *s = &d->shards[i];
        pthread_rwlock_wrlock(&s->lock);
        for (size_t b = 0; b < s->nbuckets; b++)
            for (struct entry *e = s->buckets[b]; e != NULL; e = e->next)
                e->expires_ms = 1;
        pthread_rwlock_unlock(&s->lock);
    }
}

size_t luadict_flush_expired(struct luadict *d, size_t max, uint64_t now_ms)
{
    size_t n = 0;

    for (size_t i = 0; i < d->nshards && (max == 0 || n < max); i++) {
        struct shard *s = &d->shards[i];
        pthread_rwlock_wrlock(&s->lock);
        for (size_t b = 0; b < s->nbuckets && (max == 0 || n < max); b++) {
            struct entry **pp = &s->buckets[b];
            while (*pp != NULL && (max == 0 || n < max)) {
                if (expired(*pp, now_ms)) {
                    drop(s, pp);
                    n++;
                } else {
                    pp = &(*pp)->next;
                }
            }
        }
        pthread_rwlock_unlock(&s->lock);
    }
    return n;
}

void luadict_keys(struct luadict *d, size_t max, uint64_t now_ms,
                  int (*fn)(void *arg, const char *key, size_t klen), void *arg)
{
    size_t n = 0;
    int stop = 0;

    for (size_t i = 0; i < d->nshards && !stop; i++) {
        struct shard *s = &d->shards[i];
        pthread_rwlock_rdlock(&s->lock);
        for (size_t b = 0; b < s->nbuckets && !stop; b++)
            for (struct entry *e = s->buckets[b]; e != NULL && !stop;
                 e = e->next) {
                if (expired(e, now_ms))
                    continue;
                stop =
                    fn(arg, e->key, e->klen) != 0 || (max != 0 && ++n >= max);
            }
        pthread_rwlock_unlock(&s->lock);
    }
}

size_t luadict_capacity(const struct luadict *d)
{
    return d->capacity;
}

size_t luadict_free_space(const struct luadict *d)
{
    size_t used = d->fixed;

    for (size_t i = 0; i < d->nshards; i++)
        used += __atomic_load_n(&d->shards[i].used, __ATOMIC_RELAXED);
    return used >= d->capacity ? 0 : d->capacity - used;
}

int luadict_token_bucket(struct luadict *d, const char *key, size_t klen,
                         double rate, double burst, uint64_t now_ms,
                         double *left, uint64_t *retry_ms)
{
    uint64_t h = hash_key(key, klen);
    struct shard *s = shard_of(d, h);
    struct entry **pp, *e;
    int rc;

    *retry_ms = 0;
    pthread_rwlock_wrlock(&s->lock);
    pp = find(s, h, key, klen);
    e = *pp;
    if (e != NULL && expired(e, now_ms)) {
        drop(s, pp);
        e = NULL;
    }
    if (e == NULL) {
        size_t cost = alloc_cost(sizeof(struct entry) + klen);
        if (cost > s->cap || room(s, cost, now_ms, 1, NULL, NULL) < 0 ||
            (e = insert(s, h, key, klen, cost)) == NULL) {
            rc = LUADICT_NO_MEMORY;
            goto out;
        }
        e->type = TYPE_BUCKET;
        e->n = burst;
        e->at_ms = now_ms;
    } else if (e->type != TYPE_BUCKET) {
        rc = LUADICT_NOT_NUMBER;
        goto out;
    } else if (now_ms > e->at_ms) {
        e->n += (double)(now_ms - e->at_ms) * rate / 1000.0;
        if (e->n > burst)
            e->n = burst;
        e->at_ms = now_ms;
    }
    /* A full bucket is no more than an absent one: it may go when the
     * dict needs room, and expires once it would have refilled. */
    e->expires_ms = now_ms + (uint64_t)(burst / rate * 1000.0) + 1000;
    e->used = 1;
    if (e->n >= 1.0) {
        e->n -= 1.0;
        rc = 1;
    } else {
        *retry_ms = (uint64_t)((1.0 - e->n) * 1000.0 / rate) + 1;
        rc = 0;
    }
    *left = e->n;
out:
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

/* ---- the set ------------------------------------------------------------- */

/*
 * The set holds its dicts weakly: a dict is in it while some snapshot's
 * policies hold a reference, and leaves it (under the set's lock) when
 * the last one goes, so a renamed or removed dict is freed once no
 * snapshot that names it is in use, and never lingers for the process's
 * life. Each dict holds a reference to its set, so the set outlives the
 * dicts workers still hold when the control loop lets it go.
 */
struct luadict_set {
    pthread_mutex_t lock;
    int refs;
    struct luadict **v;
    size_t n;
    size_t cap;
};

struct luadict_set *luadict_set_new(void)
{
    struct luadict_set *s = calloc(1, sizeof(struct luadict_set));

    if (s == NULL)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->refs = 1;
    return s;
}

static void set_unref(struct luadict_set *s)
{
    if (s == NULL || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    pthread_mutex_destroy(&s->lock);
    free(s->v);
    free(s);
}

void luadict_set_free(struct luadict_set *s)
{
    set_unref(s);
}

/* The last reference to d went: it leaves its set before it is freed,
 * so luadict_set_get() never meets freed memory. */
static void set_forget(struct luadict *d)
{
    struct luadict_set *s = d->set;

    if (s == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] == d) {
            s->v[i] = s->v[--s->n];
            break;
        }
    pthread_mutex_unlock(&s->lock);
    set_unref(s);
}

/* A reference to d unless it is on its way out (no reference left). */
static int try_ref(struct luadict *d)
{
    int r = __atomic_load_n(&d->refs, __ATOMIC_ACQUIRE);

    while (r > 0)
        if (__atomic_compare_exchange_n(&d->refs, &r, r + 1, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return 1;
    return 0;
}

struct luadict *luadict_set_get(struct luadict_set *s, const char *name,
                                size_t capacity, int *resized)
{
    struct luadict *d = NULL;

    *resized = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i]->name, name) == 0 && try_ref(s->v[i])) {
            d = s->v[i];
            *resized = d->capacity != capacity;
            goto out;
        }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 8;
        struct luadict **v = realloc(s->v, nc * sizeof(*v));
        if (v == NULL)
            goto out;
        s->v = v;
        s->cap = nc;
    }
    d = luadict_new(name, capacity);
    if (d == NULL)
        goto out;
    d->set = s;
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
    s->v[s->n++] = d;
out:
    pthread_mutex_unlock(&s->lock);
    return d;
}

size_t luadict_set_count(struct luadict_set *s)
{
    size_t n;

    pthread_mutex_lock(&s->lock);
    n = s->n;
    pthread_mutex_unlock(&s->lock);
    return n;
}
