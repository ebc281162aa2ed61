/*
 * The JSON reader (see json.h): a recursive descent over a bounded input
 * into arena nodes. Recursion depth is the nesting depth, which the
 * caller bounds.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/json.h"

struct jp {
    struct arena *a;
    const char *p, *end;
    int depth, max_depth;
    size_t nodes, max_nodes; /* max_nodes 0: unlimited */
    unsigned flags;
    const char *why;
};

static void ws(struct jp *j)
{
    while (j->p < j->end &&
           (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int fail(struct jp *j, const char *why)
{
    if (j->why == NULL)
        j->why = why;
    return -1;
}

static int hex4(const char *p, uint32_t *out)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t utf8_put(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at j->p (the opening quote); decoded into the arena. The
 * decoded form is never longer than the escaped one. */
static int string(struct jp *j, struct slice *out)
{
    const char *s = ++j->p;
    size_t len = 0;
    char *o;

    /* Find the closing quote first to size the copy. */
    while (j->p < j->end && *j->p != '"') {
        if ((unsigned char)*j->p < 0x20)
            return fail(j, "control character in a string");
        if (*j->p == '\\')
            j->p++;
        j->p++;
    }
    if (j->p >= j->end)
        return fail(j, "unterminated string");
    o = arena_alloc(j->a, (size_t)(j->p - s) + 1);
    if (o == NULL)
        return fail(j, "out of memory");
    for (const char *q = s; q < j->p;) {
        uint32_t cp, lo;
        if (*q != '\\') {
            o[len++] = *q++;
            continue;
        }
        q++;
        switch (*q) {
        case '"':
        case '\\':
        case '/':
            o[len++] = *q++;
            continue;
        case 'b':
            o[len++] = '\b';
            q++;
            continue;
        case 'f':
            o[len++] = '\f';
            q++;
            continue;
        case 'n':
            o[len++] = '\n';
            q++;
            continue;
        case 'r':
            o[len++] = '\r';
            q++;
            continue;
        case 't':
            o[len++] = '\t';
            q++;
            continue;
        case 'u':
            if (j->p - q < 5 || hex4(q + 1, &cp) < 0)
                return fail(j, "bad \\u escape");
            q += 5;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (j->p - q < 6 || q[0] != '\\' || q[1] != 'u' ||
                    hex4(q + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
                    return fail(j, "unpaired surrogate");
                q += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return fail(j, "unpaired surrogate");
            }
            /* \uXXXX is 6 bytes and yields at most 3; a pair is 12
             * and yields 4: the output stays within the input. */
            len += utf8_put(o + len, cp);
            continue;
        default:
            return fail(j, "bad escape");
        }
    }
    o[len] = '\0';
    j->p++;
    out->p = o;
    out->n = len;
    return 0;
}

static int number(struct jp *j, struct json *v)
{
    const char *s = j->p;
    char tmp[64];

    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return fail(j, "bad number");
    if (*j->p == '0')
        j->p++;
    else
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return fail(j, "bad number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return fail(j, "bad number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    v->type = JSON_NUMBER;
    v->str.p = s;
    v->str.n = (size_t)(j->p - s);
    if (v->str.n < sizeof(tmp)) {
        memcpy(tmp, s, v->str.n);
        tmp[v->str.n] = '\0';
        v->num = strtod(tmp, NULL);
        return 0;
    }
    /* A long number is converted all the same (never a silent 0). */
    {
        char *big = arena_dup(j->a, s, v->str.n);
        if (big == NULL)
            return fail(j, "out of memory");
        v->num = strtod(big, NULL);
    }
    return 0;
}

static int lit(struct jp *j, const char *w, enum json_type t, struct json *v)
{
    size_t n = strlen(w);

    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
        return fail(j, "unexpected character");
    j->p += n;
    v->type = t;
    return 0;
}

static int value(struct jp *j, struct json *v);

static uint32_t key_hash(struct slice k)
{
    uint32_t h = 2166136261u; /* FNV-1a */

    for (size_t i = 0; i < k.n; i++)
        h = (h ^ (unsigned char)k.p[i]) * 16777619u;
    return h;
}

/* 0 when the members of object o have distinct names, else -1. Small
 * objects are compared pairwise; larger ones through a hash table in the
 * arena (a few pointers per member), so the work stays linear. */
static int unique_keys(struct jp *j, const struct json *o)
{
    const struct json **tab;
    size_t size = 16;

    if (o->n <= 8) {
        for (const struct json *e = o->child; e != NULL; e = e->next)
            for (const struct json *f = e->next; f != NULL; f = f->next)
                if (slice_eq(e->key, f->key))
                    return fail(j, "duplicate member name");
        return 0;
    }
    while (size < 2 * o->n)
        size *= 2;
    tab = arena_alloc(j->a, size * sizeof(*tab));
    if (tab == NULL)
        return fail(j, "out of memory");
    memset(tab, 0, size * sizeof(*tab));
    for (const struct json *e = o->child; e != NULL; e = e->next) {
        size_t i = key_hash(e->key) & (size - 1);
        while (tab[i] != NULL) {
            if (slice_eq(tab[i]->key, e->key))
                return fail(j, "duplicate member name");
            i = (i + 1) & (size - 1);
        }
        tab[i] = e;
    }
    return 0;
}

/*
 * skip_deep() passes over the container at j->p without building it (a
 * JSON_CUT_DEEP document): a loop, not recursion, so any nesting costs
 * no stack. Only the brackets and strings are checked: what is inside is
 * never read, so a caller leaves the value that holds it out anyway.
 */
static int skip_deep(struct jp *j, struct json *v)
{
    size_t open = 0;

    do {
        if (j->p >= j->end)
            return fail(j, "unexpected end");
        switch (*j->p) {
        case '{':
        case '[':
            open++;
            break;
        case '}':
        case ']':
            open--;
            break;
        case '"':
            j->p++;
            while (j->p < j->end && *j->p != '"') {
                if (*j->p == '\\')
                    j->p++;
                j->p++;
            }
            if (j->p >= j->end)
                return fail(j, "unterminated string");
            break;
        default:
            break;
        }
        j->p++;
    } while (open > 0);
    v->type = JSON_NULL;
    v->cut = 1;
    return 0;
}

/* The elements of an array or object, after its opening bracket. */
static int container(struct jp *j, struct json *v, int obj)
{
    struct json **tail = &v->child;
    char close = obj ? '}' : ']';

    if (j->depth + 1 > j->max_depth && (j->flags & JSON_CUT_DEEP) != 0)
        return skip_deep(j, v);
    if (++j->depth > j->max_depth)
        return fail(j, "nested too deep");
    v->type = obj ? JSON_OBJECT : JSON_ARRAY;
    j->p++;
    ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        j->depth--;
        return 0;
    }
    for (;;) {
        struct json *e;
        if (j->max_nodes != 0 && ++j->nodes > j->max_nodes)
            return fail(j, "too many values");
        e = arena_alloc(j->a, sizeof(*e));
        if (e == NULL)
            return fail(j, "out of memory");
        memset(e, 0, sizeof(*e));
        ws(j);
        if (obj) {
            if (j->p >= j->end || *j->p != '"')
                return fail(j, "expected a member name");
            if (string(j, &e->key) < 0)
                return -1;
            ws(j);
            if (j->p >= j->end || *j->p != ':')
                return fail(j, "expected ':'");
            j->p++;
        }
        if (value(j, e) < 0)
            return -1;
        *tail = e;
        tail = &e->next;
        v->n++;
        ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == close) {
            j->p++;
            j->depth--;
            if (obj && (j->flags & JSON_NO_DUPLICATES) != 0)
                return unique_keys(j, v);
            return 0;
        }
        return fail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int value(struct jp *j, struct json *v)
{
    ws(j);
    if (j->p >= j->end)
        return fail(j, "unexpected end");
    switch (*j->p) {
    case '{':
        return container(j, v, 1);
    case '[':
        return container(j, v, 0);
    case '"':
        v->type = JSON_STRING;
        return string(j, &v->str);
    case 't':
        return lit(j, "true", JSON_TRUE, v);
    case 'f':
        return lit(j, "false", JSON_FALSE, v);
    case 'n':
        return lit(j, "null", JSON_NULL, v);
    default:
        return number(j, v);
    }
}

const struct json *json_parse(struct arena *a, const char *p, size_t n,
                              int max_depth, const char **why)
{
    return json_parse_max(a, p, n, max_depth, 0, 0, why);
}

const struct json *json_parse_max(struct arena *a, const char *p, size_t n,
                                  int max_depth, size_t max_nodes,
                                  unsigned flags, const char **why)
{
    struct jp j = {a, p, p + n, 0, max_depth, 1, max_nodes, flags, NULL};
    struct json *root;

    if (n > JSON_MAX_BYTES && !(flags & JSON_ANY_SIZE)) {
        *why = "JSON document too large";
        return NULL;
    }
    root = arena_alloc(a, sizeof(*root));
    if (root == NULL) {
        *why = "out of memory";
        return NULL;
    }
    memset(root, 0, sizeof(*root));
    if (value(&j, root) < 0) {
        *why = j.why;
        return NULL;
    }
    ws(&j);
    if (j.p != j.end) {
        *why = "trailing bytes after the JSON value";
        return NULL;
    }
    return root;
}

const struct json *json_get_slice(const struct json *o, struct slice key)
{
    if (o == NULL || o->type != JSON_OBJECT)
        return NULL;
    for (const struct json *e = o->child; e != NULL; e = e->next)
        if (slice_eq(e->key, key))
            return e;
    return NULL;
}

const struct json *json_get(const struct json *o, const char *key)
{
    return json_get_slice(o, slice_of(key));
}

struct slice json_string(const struct json *o)
{
    if (o == NULL || o->type != JSON_STRING)
        return SLICE_NULL;
    return o->str;
}

/* Recursion is bounded by the parse's max_depth, as the tree is. */
int json_has_cut(const struct json *o)
{
    if (o == NULL)
        return 0;
    if (o->cut)
        return 1;
    for (const struct json *c = o->child; c != NULL; c = c->next)
        if (json_has_cut(c))
            return 1;
    return 0;
}
