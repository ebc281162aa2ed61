#ifndef STRAIT_CONFIG_CONF_H
#define STRAIT_CONFIG_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"

struct buf;
struct ynode;

/*
 * Table-driven configuration, in the manner of tmux's options table: every
 * key has a type, a range, a default and help text, and one decoder turns a
 * YAML tree into a plain struct. Unknown keys, wrong types and values out of
 * range are errors that name file:line:col and the key's full path.
 *
 * Storage per type:
 *   CONF_STR       char *            (owned, freed by conf_dispose)
 *   CONF_INT       int64_t
 *   CONF_BOOL      int
 *   CONF_DURATION  int64_t           milliseconds
 *   CONF_SIZE      int64_t           bytes
 *   CONF_ENUM      int               index into enums[]
 *   CONF_ADDR      struct addr
 *   CONF_ADDR_LIST struct conf_addrs
 *   CONF_STR_LIST  struct conf_strs
 *   CONF_STR_MAP   struct conf_strmap
 *   CONF_SECTION   an embedded struct described by sub
 *   CONF_LIST      struct conf_list of elements described by sub
 *   CONF_CUSTOM    whatever custom() writes (int64_t for the ones we have)
 *   CONF_DOUBLE    double            (range min..max, whole numbers)
 *   CONF_MAP       struct conf_map   string keys to elements described by sub
 *   CONF_INT_MAP   struct conf_intmap string keys to int64_t in min..max
 *   CONF_ONEOF     nothing: a rule, not a key (see below)
 *   CONF_IGNORE    struct conf_mark  where the value was written (any shape)
 *   CONF_TREE      struct conf_tree  a map of strings, lists and maps, nested
 *                                    at most CONF_TREE_DEPTH deep, at most
 *                                    max values in all (scalars are kept
 *                                    as strings, as CONF_STR_MAP does)
 *
 * CONF_STR with custom set: custom(s, n, NULL, &why) validates the string.
 *
 * A CONF_ONEOF entry in a key table is never matched by name. enums lists
 * the keys of its section of which at most one may be set, or exactly one
 * when min is 1; name is used in the message ("StringMatch").
 *
 * A section decoded as CONF_SECTION (not only as a LIST element) records
 * where it was written in its mark when mark_off is not SIZE_MAX, so
 * callers can tell an absent section (line 0) from one given empty.
 */
enum conf_type {
    CONF_STR,
    CONF_INT,
    CONF_BOOL,
    CONF_DURATION,
    CONF_SIZE,
    CONF_ENUM,
    CONF_ADDR,
    CONF_ADDR_LIST,
    CONF_STR_LIST,
    CONF_STR_MAP,
    CONF_SECTION,
    CONF_LIST,
    CONF_CUSTOM,
    CONF_DOUBLE,
    CONF_MAP,
    CONF_INT_MAP,
    CONF_ONEOF,
    CONF_IGNORE,
    CONF_TREE,
};

/* CONF_TREE: values nest at most this deep (the top map is level 1). */
#define CONF_TREE_DEPTH 8

enum conf_tnode_type { CONF_TNODE_STR, CONF_TNODE_LIST, CONF_TNODE_MAP };

/* One value of a CONF_TREE, in pre-order: a list or map is followed by
 * its n values (each with its own values after it). */
struct conf_tnode {
    enum conf_tnode_type type;
    char *key; /* its key in the enclosing map; NULL in a list */
    char *str; /* CONF_TNODE_STR */
    size_t n;  /* LIST, MAP: the values directly in it */
};

/* v[0] is the top map; n 0: none given. */
struct conf_tree {
    struct conf_tnode *v;
    size_t n;
};

struct conf_addrs {
    struct addr *v;
    size_t n;
};

struct conf_strs {
    char **v;
    size_t n;
};

struct conf_strpair {
    char *key;
    char *val;
};

struct conf_strmap {
    struct conf_strpair *v;
    size_t n;
};

struct conf_list {
    void *v; /* n elements of the section's elem_size */
    size_t n;
};

/* CONF_MAP: keys[i] maps to element i of v (n elements of elem_size). */
struct conf_map {
    char **keys;
    void *v;
    size_t n;
};

struct conf_intpair {
    char *key;
    int64_t val;
};

struct conf_intmap {
    struct conf_intpair *v;
    size_t n;
};

/* Where an element was written, for cross-key checks after decoding. */
struct conf_mark {
    int line;
    int col;
};

struct conf_section;

struct conf_key {
    const char *name;
    enum conf_type type;
    size_t off;
    int64_t min; /* INT, DURATION (ms), SIZE, lists (element count) */
    int64_t max;
    const char *def; /* default in YAML syntax, NULL for empty */
    const char *help;
    const char *const *enums;       /* ENUM: NULL-terminated */
    const struct conf_section *sub; /* SECTION, LIST */
    /* CUSTOM: parse scalar s into dst; return 0 or -1 with *why. */
    int (*custom)(const char *s, size_t n, void *dst, const char **why);
    /* CUSTOM: write the value at src as JSON into b. STR: when set, it
     * writes the value instead of the plain string (conf_secret_json for a
     * secret). */
    void (*custom_json)(struct buf *b, const void *src);
};

struct conf_section {
    const struct conf_key *keys; /* terminated by a key with name NULL */
    size_t elem_size;            /* LIST: size of one element */
    size_t
        mark_off; /* LIST, MAP, SECTION: offset of a conf_mark, or SIZE_MAX */
};

/* conf_defaults() zeroes dst and applies every default of sec. */
void conf_defaults(const struct conf_section *sec, void *dst);

/*
 * conf_decode() reads map into dst (which holds defaults already). Each
 * error is appended to errs as one line "file:line:col: path: reason".
 * Returns the number of errors. dst stays valid for conf_dispose either
 * way.
 */
int conf_decode(const struct conf_section *sec, const struct ynode *map,
                void *dst, const char *file, struct buf *errs);

/* conf_dispose() frees everything conf_defaults/conf_decode allocated. */
void conf_dispose(const struct conf_section *sec, void *dst);

/* conf_to_json() writes the effective values of dst as a JSON object. */
void conf_to_json(const struct conf_section *sec, const void *dst,
                  struct buf *b);

/*
 * conf_identity() writes the effective values of dst as canonical binary
 * for structural identities (compile/identity.h): the keys conf_to_json
 * writes, in its order, each as a type tag, its name and its value, with
 * every string and list length-prefixed and sections nested in place, so
 * equal values give equal bytes (a default and the same value written out
 * alike) and any changed value changes them. A CONF_STR is its own bytes
 * (a secret too: the bytes are compared, never shown); a CONF_CUSTOM,
 * whose storage only its key knows, is its custom_json text. Bytes go to
 * sink->write(sink->arg, p, n), which keeps its own errors.
 */
struct conf_sink {
    void (*write)(void *arg, const void *p, size_t n);
    void *arg;
};

void conf_identity(const struct conf_section *sec, const void *dst,
                   const struct conf_sink *sink);

/* conf_secret_json() is the custom_json of a CONF_STR secret (a join
 * token): "<redacted>" when set, "" when not, never the value. */
void conf_secret_json(struct buf *b, const void *src);

/* conf_reference() writes one line per key: path, type, default, help. */
void conf_reference(const struct conf_section *sec, struct buf *b);

/* conf_error() appends one formatted error line to errs. */
void conf_error(struct buf *errs, const char *file, int line, int col,
                const char *path, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#endif
