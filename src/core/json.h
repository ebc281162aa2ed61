#ifndef STRAIT_CORE_JSON_H
#define STRAIT_CORE_JSON_H

#include <stddef.h>

#include "core/slice.h"

struct arena;
struct buf;

/* json_escape() appends s (n bytes) as a quoted JSON string. Control bytes
 * are escaped as \u00XX; bytes >= 0x80 pass through (callers hand in UTF-8
 * or accept that invalid UTF-8 is carried through). Returns 0 or -1 when
 * the buffer's cap is reached. */
int json_escape(struct buf *b, const char *s, size_t n);
int json_str(struct buf *b, const char *s);

/*
 * A small JSON reader (RFC 8259) for what strait reads from outside: JWT
 * headers and claims, JWKS documents. The tree lives in the caller's
 * arena and goes with it. The work is bounded: the caller gives the
 * input size (json_parse refuses more than JSON_MAX_BYTES), nesting
 * deeper than the given depth is refused, and every value consumes at
 * least one input byte, so nodes and decoded strings take at most a small
 * constant times the input in the arena. Duplicate object keys are kept
 * (json_get() returns the first) unless json_parse_max() is told to
 * refuse them.
 */
#define JSON_MAX_BYTES (1024 * 1024)

enum json_type {
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
};

struct json {
    enum json_type type;
    /* JSON_CUT_DEEP: 1 for a container nested past max_depth, skipped
     * unread and given as JSON_NULL. */
    unsigned char cut;
    struct slice str;   /* JSON_STRING: decoded UTF-8, NUL after it;
                         * JSON_NUMBER: the number as written */
    double num;         /* JSON_NUMBER */
    struct slice key;   /* a member of an object: its decoded name */
    struct json *child; /* JSON_ARRAY, JSON_OBJECT: first element */
    struct json *next;  /* the next element of the parent */
    size_t n;           /* JSON_ARRAY, JSON_OBJECT: element count */
};

/* json_parse() reads the n bytes at p as one JSON value (whitespace
 * around it allowed, nothing else). Returns the root, owned by a, or NULL
 * with *why set to a static reason. */
const struct json *json_parse(struct arena *a, const char *p, size_t n,
                              int max_depth, const char **why);

/* json_parse_max() is json_parse() with a budget and flags: a document
 * of more than max_nodes values, the root included (0: no limit beyond
 * the input length), is refused before more arena is used; for input from
 * untrusted peers read on the request path. With JSON_NO_DUPLICATES an
 * object with two members of one name is refused (RFC 7515 section 4 for
 * JOSE headers, RFC 7519 for claims). Numbers of any length are
 * converted (num), not only short ones. */
#define JSON_NO_DUPLICATES 1u
/* With JSON_ANY_SIZE the document may be longer than JSON_MAX_BYTES: the
 * caller has bounded n itself (etcd's range of a whole prefix). */
#define JSON_ANY_SIZE 2u

/* With JSON_CUT_DEEP a container nested past max_depth is not an error:
 * it is skipped (brackets and strings matched, nothing else read) and
 * stands in the tree as a JSON_NULL with cut set, so a list whose one
 * item is too deep can still be read item by item (json_has_cut()). */
#define JSON_CUT_DEEP 4u

const struct json *json_parse_max(struct arena *a, const char *p, size_t n,
                                  int max_depth, size_t max_nodes,
                                  unsigned flags, const char **why);

/* json_get() returns the first member of object o named key, or NULL
 * (also when o is NULL or not an object). */
const struct json *json_get(const struct json *o, const char *key);
const struct json *json_get_slice(const struct json *o, struct slice key);

/* json_has_cut() says whether a JSON_CUT_DEEP parse left out anything
 * under o (o included). */
int json_has_cut(const struct json *o);

/* json_string() returns o's string, or {NULL,0} when o is not a string. */
struct slice json_string(const struct json *o);

#endif
