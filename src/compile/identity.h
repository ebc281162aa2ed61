#ifndef STRAIT_COMPILE_IDENTITY_H
#define STRAIT_COMPILE_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/sha.h>

struct conf_section;
struct resource;

/*
 * Structural identities: what a compiled part (a listener, a cluster, a
 * route table) was compiled from, as the SHA-256 digest of canonical
 * bytes, with a 64-bit hash (the digest's first 8 bytes). Two parts are
 * the same when their digests are equal; the hash only makes unequal
 * ones cheap to tell apart and indexes the map below. Never a JSON dump:
 * every input goes in as a tag byte and, for bytes, a length first, so no
 * two different sequences of inputs give the same bytes ("ab" + "c" is
 * not "a" + "bc").
 *
 * The digest, not the bytes, is kept: a route table's inputs are every
 * resource it reads and every cluster's identity, so keeping the bytes
 * made each listener hold about 29 KB per tenant (290 MB at 10,000
 * tenants, past the old 256 MiB bound: strait could not start).
 */
struct ident_id {
    uint64_t hash;
    unsigned char *bytes; /* the digest (or, in tests, any bytes), owned;
                           * NULL: none (oom) */
    size_t len;
    /* ident_has_prefix(): the digest of the builder ident_copy() began
     * this one with; have_pre 0: it was not begun so. */
    unsigned char pre[SHA256_DIGEST_LENGTH];
    int have_pre;
};

/* ident_equal() is 1 when a and b were built from equal inputs; an
 * identity without bytes (memory ran out building it) equals nothing. */
int ident_equal(const struct ident_id *a, const struct ident_id *b);

/* ident_has_prefix() is 1 when id's builder was begun by ident_copy()
 * of a builder holding what pre holds so far: id was built from the same
 * first inputs. */
struct ident;
int ident_has_prefix(const struct ident_id *id, const struct ident *pre);

/* ident_id_copy() makes out an owned copy of id; -1 when memory runs out
 * (out is then empty). */
int ident_id_copy(struct ident_id *out, const struct ident_id *id);

/* ident_id_dispose() frees id's bytes; id is empty afterwards. */
void ident_id_dispose(struct ident_id *id);

/*
 * The builder: ident_init(), feed it with ident_u64/str/bytes/sub/conf,
 * then ident_finish() (or ident_abandon() to drop it). A builder that ran
 * out of memory remembers it and ident_finish() fails.
 */
struct ident {
    SHA256_CTX ctx;
    size_t len; /* bytes fed so far */
    int oom;
    unsigned char pre[SHA256_DIGEST_LENGTH];
    int have_pre;
};

void ident_init(struct ident *d);
void ident_u64(struct ident *d, char tag, uint64_t v);
void ident_bytes(struct ident *d, char tag, const void *p, size_t n);
/* A string; NULL and "" differ. */
void ident_str(struct ident *d, char tag, const char *s);
/* Another identity, as one input. */
void ident_sub(struct ident *d, const struct ident_id *id);
/* ident_nest() appends everything src holds so far as one framed input
 * (src is unchanged). */
void ident_nest(struct ident *d, char tag, const struct ident *src);
/* ident_copy() appends everything src holds so far (src is unchanged).
 * On a builder that holds nothing yet it continues src, and the identity
 * remembers src as its prefix (ident_has_prefix()); on one that holds
 * inputs already, src goes in as one framed input. */
void ident_copy(struct ident *d, const struct ident *src);
/* The effective values of a conf table (conf_identity()), or a resource's
 * kind-specific spec (res_spec_identity()). */
void ident_conf(struct ident *d, char tag, const struct conf_section *sec,
                const void *dst);
void ident_res_spec(struct ident *d, char tag, const struct resource *r);
/* ident_sink_write() is a struct conf_sink's write for a builder (arg: the
 * struct ident), for the config layer's other conf_identity() writers;
 * their bytes are framed by their own tags and counts. */
void ident_sink_write(void *arg, const void *p, size_t n);

/* ident_finish() gives out d's identity and disposes of d; -1 when
 * memory ran out on the way (out is then empty). */
int ident_finish(struct ident *d, struct ident_id *out);
void ident_abandon(struct ident *d);

/*
 * A map from identities to pointers: open addressing with linear probing
 * on the hash, keys compared in full, grown at half load. It owns copies
 * of its keys, never the values. For the control thread (clusters kept
 * across snapshots by identity).
 */
struct ident_slot;

struct ident_map {
    struct ident_slot *v;
    size_t cap; /* a power of two, or 0 before the first put */
    size_t n;
};

void ident_map_init(struct ident_map *m);
/* ident_map_dispose() frees the keys and the table, not the values. */
void ident_map_dispose(struct ident_map *m);

/* ident_map_get() is key's value, or NULL when absent (or m is NULL). */
void *ident_map_get(const struct ident_map *m, const struct ident_id *key);

/* ident_map_put() sets key's value (a copy of key is kept; an old value
 * is replaced); -1 when memory runs out, and then m is unchanged. */
int ident_map_put(struct ident_map *m, const struct ident_id *key, void *value);

/* ident_map_next() walks m: start with *pos = 0; 0 at the end. The order
 * is the table's. *key points into m. */
int ident_map_next(const struct ident_map *m, size_t *pos,
                   const struct ident_id **key, void **value);

#endif
