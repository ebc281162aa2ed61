#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/conf.h"
#include "config/yaml.h"
#include "core/buf.h"
#include "core/json.h"
#include "core/units.h"

#define CONF_PATH_MAX 256

struct conf_ctx {
    const char *file;
    struct buf *errs;
    int nerr;
};

void conf_error(struct buf *errs, const char *file, int line, int col,
                const char *path, const char *fmt, ...)
{
    va_list ap;

    buf_printf(errs, "%s:%d:%d: %s: ", file, line, col, path);
    va_start(ap, fmt);
    buf_vprintf(errs, fmt, ap);
    va_end(ap);
    buf_puts(errs, "\n");
}

/* Key paths ("listeners[2].address") are cut at CONF_PATH_MAX; a cut
 * path still points the reader at the right place. */
static void path_fmt(char *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void path_fmt(char *out, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(out, CONF_PATH_MAX, fmt, ap);
    va_end(ap);
}

#define CTX_ERR(ctx, node, path, ...)                                          \
    do {                                                                       \
        conf_error((ctx)->errs, (ctx)->file, (node)->line, (node)->col, path,  \
                   __VA_ARGS__);                                               \
        (ctx)->nerr++;                                                         \
    } while (0)

static const char *type_name(enum conf_type t)
{
    switch (t) {
    case CONF_STR:
        return "a string";
    case CONF_INT:
        return "an integer";
    case CONF_BOOL:
        return "a boolean";
    case CONF_DURATION:
        return "a duration";
    case CONF_SIZE:
        return "a size";
    case CONF_ENUM:
        return "one of the listed values";
    case CONF_ADDR:
        return "an address";
    case CONF_ADDR_LIST:
        return "a list of addresses";
    case CONF_STR_LIST:
        return "a list of strings";
    case CONF_STR_MAP:
        return "a map of strings";
    case CONF_SECTION:
        return "a section";
    case CONF_LIST:
        return "a list";
    case CONF_CUSTOM:
        return "a value";
    case CONF_DOUBLE:
        return "a number";
    case CONF_MAP:
    case CONF_INT_MAP:
        return "a mapping";
    case CONF_ONEOF:
    case CONF_IGNORE:
        return "a value";
    case CONF_TREE:
        return "a map of strings, lists and maps";
    }
    return "a value";
}

static void format_range(char *out, size_t n, const struct conf_key *k,
                         int64_t v)
{
    switch (k->type) {
    case CONF_DURATION:
        snprintf(out, n, "%" PRId64 "ms", v);
        break;
    default:
        snprintf(out, n, "%" PRId64, v);
    }
}

static int check_range(struct conf_ctx *ctx, const struct conf_key *k,
                       const struct ynode *node, const char *path, int64_t v)
{
    char lo[32], hi[32];

    if (v >= k->min && v <= k->max)
        return 0;
    format_range(lo, sizeof(lo), k, k->min);
    format_range(hi, sizeof(hi), k, k->max);
    CTX_ERR(ctx, node, path, "value '%s' out of range %s-%s", node->str, lo,
            hi);
    return -1;
}

/* decode_scalar() handles every type stored from a single scalar. */
static int decode_scalar(struct conf_ctx *ctx, const struct conf_key *k,
                         const struct ynode *node, char *dst, const char *path)
{
    const char *why = NULL;
    int64_t v;

    if (node->type != YNODE_SCALAR) {
        /* YAML reads a bare [::1]:80 as a list: say so. */
        CTX_ERR(ctx, node, path, "expected %s, got %s%s", type_name(k->type),
                ynode_type_name(node),
                k->type == CONF_ADDR && node->type == YNODE_SEQ
                    ? " (quote IPv6 addresses: \"[::1]:80\")"
                    : "");
        return -1;
    }
    if (yscalar_is_null(node)) {
        CTX_ERR(ctx, node, path, "expected %s, got nothing",
                type_name(k->type));
        return -1;
    }
    switch (k->type) {
    case CONF_STR: {
        char **sp = (char **)(void *)dst;
        char *copy;
        if (k->custom != NULL &&
            k->custom(node->str, node->len, NULL, &why) < 0) {
            CTX_ERR(ctx, node, path, "bad value '%s': %s", node->str, why);
            return -1;
        }
        copy = strdup(node->str);
        if (copy == NULL) {
            CTX_ERR(ctx, node, path, "out of memory");
            return -1;
        }
        free(*sp);
        *sp = copy;
        return 0;
    }
    case CONF_INT:
    case CONF_DURATION:
    case CONF_SIZE:
        if ((k->type == CONF_INT &&
             units_int(node->str, node->len, &v, &why) < 0) ||
            (k->type == CONF_DURATION &&
             units_duration_ms(node->str, node->len, &v, &why) < 0) ||
            (k->type == CONF_SIZE &&
             units_size(node->str, node->len, &v, &why) < 0)) {
            CTX_ERR(ctx, node, path, "bad %s '%s': %s",
                    k->type == CONF_INT        ? "integer"
                    : k->type == CONF_DURATION ? "duration"
                                               : "size",
                    node->str, why);
            return -1;
        }
        if (check_range(ctx, k, node, path, v) < 0)
            return -1;
        memcpy(dst, &v, sizeof(v));
        return 0;
    case CONF_BOOL: {
        int b;
        if (strcmp(node->str, "true") == 0 || strcmp(node->str, "True") == 0)
            b = 1;
        else if (strcmp(node->str, "false") == 0 ||
                 strcmp(node->str, "False") == 0)
            b = 0;
        else {
            CTX_ERR(ctx, node, path, "expected true or false, got '%s'",
                    node->str);
            return -1;
        }
        memcpy(dst, &b, sizeof(b));
        return 0;
    }
    case CONF_ENUM:
        for (int i = 0; k->enums[i] != NULL; i++) {
            if (strcmp(node->str, k->enums[i]) == 0) {
                memcpy(dst, &i, sizeof(i));
                return 0;
            }
        }
        {
            char choices[256] = "";
            size_t used = 0;
            for (int i = 0; k->enums[i] != NULL && used < sizeof(choices); i++)
                used += (size_t)snprintf(choices + used, sizeof(choices) - used,
                                         "%s%s", i ? ", " : "", k->enums[i]);
            CTX_ERR(ctx, node, path, "unknown value '%s' (one of: %s)",
                    node->str, choices);
        }
        return -1;
    case CONF_ADDR: {
        struct addr a;
        if (addr_parse(&a, node->str, node->len, 0, &why) < 0) {
            CTX_ERR(ctx, node, path, "bad address '%s': %s", node->str, why);
            return -1;
        }
        memcpy(dst, &a, sizeof(a));
        return 0;
    }
    case CONF_DOUBLE: {
        double d;
        char *end = NULL;
        /* Digits, sign, point and exponent only: strtod() alone would also
         * take "nan", "inf" and hexadecimal floats. */
        if (node->len == 0 ||
            strspn(node->str, "0123456789+-.eE") != node->len) {
            CTX_ERR(ctx, node, path, "bad number '%s'", node->str);
            return -1;
        }
        d = strtod(node->str, &end);
        if (end != node->str + node->len || !isfinite(d)) {
            CTX_ERR(ctx, node, path, "bad number '%s'", node->str);
            return -1;
        }
        if (d < (double)k->min || d > (double)k->max) {
            CTX_ERR(ctx, node, path,
                    "value '%s' out of range %" PRId64 "-%" PRId64, node->str,
                    k->min, k->max);
            return -1;
        }
        memcpy(dst, &d, sizeof(d));
        return 0;
    }
    case CONF_CUSTOM:
        if (k->custom(node->str, node->len, dst, &why) < 0) {
            CTX_ERR(ctx, node, path, "bad value '%s': %s", node->str, why);
            return -1;
        }
        return 0;
    default:
        CTX_ERR(ctx, node, path, "expected %s", type_name(k->type));
        return -1;
    }
}

static int decode_section(struct conf_ctx *ctx, const struct conf_section *sec,
                          const struct ynode *map, char *dst,
                          const char *prefix);

static void free_value(const struct conf_key *k, char *p);

/* Counts the values under node (itself included) and checks the depth:
 * the whole tree is measured before anything is copied, so a refused
 * tree leaves nothing behind. 0, or -1 after an error. */
static int tree_measure(struct conf_ctx *ctx, const struct conf_key *k,
                        const struct ynode *node, int depth, size_t *count,
                        const char *path)
{
    char sub[CONF_PATH_MAX];

    if (++*count > (size_t)k->max) {
        CTX_ERR(ctx, node, path, "more than %" PRId64 " values in all", k->max);
        return -1;
    }
    if (node->type == YNODE_SCALAR)
        return 0;
    if (depth > CONF_TREE_DEPTH) {
        CTX_ERR(ctx, node, path, "nested deeper than %d levels",
                CONF_TREE_DEPTH);
        return -1;
    }
    for (size_t i = 0; i < node->n; i++) {
        const struct ynode *v;
        if (node->type == YNODE_MAP) {
            v = node->pairs[i].val;
            path_fmt(sub, "%s.%s", path, node->pairs[i].key->str);
        } else {
            v = node->items[i];
            path_fmt(sub, "%s[%zu]", path, i);
        }
        if (tree_measure(ctx, k, v, depth + 1, count, sub) < 0)
            return -1;
    }
    return 0;
}

static int tree_copy(struct conf_tree *t, const struct ynode *node,
                     const char *key)
{
    struct conf_tnode *d = &t->v[t->n++];

    d->type = node->type == YNODE_SCALAR ? CONF_TNODE_STR
              : node->type == YNODE_SEQ  ? CONF_TNODE_LIST
                                         : CONF_TNODE_MAP;
    if (key != NULL && (d->key = strdup(key)) == NULL)
        return -1;
    if (node->type == YNODE_SCALAR)
        return (d->str = strdup(node->str)) != NULL ? 0 : -1;
    d->n = node->n;
    for (size_t i = 0; i < node->n; i++) {
        int rc = node->type == YNODE_MAP
                     ? tree_copy(t, node->pairs[i].val, node->pairs[i].key->str)
                     : tree_copy(t, node->items[i], NULL);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int decode_tree(struct conf_ctx *ctx, const struct conf_key *k,
                       const struct ynode *node, char *dst, const char *path)
{
    struct conf_tree *t = (struct conf_tree *)(void *)dst;
    size_t count = 0;

    free_value(k, dst);
    if (node->type == YNODE_SCALAR && yscalar_is_null(node))
        return 0;
    if (node->type != YNODE_MAP) {
        CTX_ERR(ctx, node, path,
                "expected a mapping (of strings, lists and maps), got %s",
                ynode_type_name(node));
        return -1;
    }
    if (tree_measure(ctx, k, node, 1, &count, path) < 0)
        return -1;
    t->v = calloc(count, sizeof(*t->v));
    if (t->v == NULL || tree_copy(t, node, NULL) < 0) {
        CTX_ERR(ctx, node, path, "out of memory");
        return -1;
    }
    return 0;
}

/* check_oneof() enforces one CONF_ONEOF rule against the keys of map. */
static int check_oneof(struct conf_ctx *ctx, const struct conf_key *k,
                       const struct ynode *map, const char *prefix)
{
    const char *set[2] = {NULL, NULL};
    char names[256] = "";
    size_t used = 0;
    int seen = 0;

    for (int i = 0; k->enums[i] != NULL; i++) {
        const struct ynode *v = ymap_get(map, k->enums[i]);
        if (used < sizeof(names))
            used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
                                     i ? ", " : "", k->enums[i]);
        if (v == NULL || yscalar_is_null(v))
            continue;
        if (seen < 2)
            set[seen] = k->enums[i];
        seen++;
    }
    if (seen > 1) {
        CTX_ERR(ctx, map, prefix[0] ? prefix : "(top level)",
                "%s takes only one of %s; both '%s' and '%s' are set", k->name,
                names, set[0], set[1]);
        return -1;
    }
    if (seen == 0 && k->min > 0) {
        CTX_ERR(ctx, map, prefix[0] ? prefix : "(top level)",
                "%s needs one of: %s", k->name, names);
        return -1;
    }
    return 0;
}

/* decode_map() reads CONF_MAP (values are sections) and CONF_INT_MAP. */
static int decode_map(struct conf_ctx *ctx, const struct conf_key *k,
                      const struct ynode *node, char *dst, const char *path)
{
    char sub[CONF_PATH_MAX];
    size_t n;
    int bad = 0;

    free_value(k, dst);
    if (node->type == YNODE_SCALAR && yscalar_is_null(node))
        return 0;
    if (node->type != YNODE_MAP) {
        CTX_ERR(ctx, node, path, "expected a mapping, got %s",
                ynode_type_name(node));
        return -1;
    }
    n = node->n;
    if (n == 0)
        return 0;
    if (k->type == CONF_INT_MAP) {
        struct conf_intmap *m = (struct conf_intmap *)(void *)dst;
        static const struct conf_key int_key = {
            .type = CONF_INT, .min = INT64_MIN, .max = INT64_MAX};
        struct conf_key ik = int_key;

        ik.min = k->min;
        ik.max = k->max;
        m->v = calloc(n, sizeof(*m->v));
        if (m->v == NULL)
            return -1;
        for (size_t i = 0; i < n; i++) {
            path_fmt(sub, "%s.%s", path, node->pairs[i].key->str);
            m->v[m->n].key = strdup(node->pairs[i].key->str);
            if (m->v[m->n].key == NULL)
                return -1;
            m->n++;
            if (decode_scalar(ctx, &ik, node->pairs[i].val,
                              (char *)&m->v[m->n - 1].val, sub) < 0)
                bad = -1;
        }
        return bad;
    }
    {
        struct conf_map *m = (struct conf_map *)(void *)dst;
        size_t esz = k->sub->elem_size;

        m->keys = calloc(n, sizeof(*m->keys));
        m->v = calloc(n, esz);
        if (m->keys == NULL || m->v == NULL)
            return -1;
        for (size_t i = 0; i < n; i++) {
            const struct ynode *val = node->pairs[i].val;
            char *elem = (char *)m->v + i * esz;

            m->keys[i] = strdup(node->pairs[i].key->str);
            if (m->keys[i] == NULL)
                return -1;
            conf_defaults(k->sub, elem);
            m->n++;
            if (k->sub->mark_off != SIZE_MAX) {
                struct conf_mark mk = {val->line, val->col};
                memcpy(elem + k->sub->mark_off, &mk, sizeof(mk));
            }
            path_fmt(sub, "%s.%s", path, node->pairs[i].key->str);
            if (val->type == YNODE_SCALAR && yscalar_is_null(val)) {
                /* "name: {}" and "name:" both mean all defaults, but the
                 * section's own rules (oneof) still apply. */
                struct ynode empty = {
                    .type = YNODE_MAP, .line = val->line, .col = val->col};
                if (decode_section(ctx, k->sub, &empty, elem, sub) < 0)
                    bad = -1;
                continue;
            }
            if (decode_section(ctx, k->sub, val, elem, sub) < 0)
                bad = -1;
        }
        return bad;
    }
}

static int decode_key(struct conf_ctx *ctx, const struct conf_key *k,
                      const struct ynode *node, char *dst, const char *path)
{
    char sub[CONF_PATH_MAX];

    switch (k->type) {
    case CONF_SECTION:
        if (node->type == YNODE_SCALAR && yscalar_is_null(node))
            return 0;
        if (k->sub->mark_off != SIZE_MAX) {
            struct conf_mark m = {node->line, node->col};
            memcpy(dst + k->sub->mark_off, &m, sizeof(m));
        }
        return decode_section(ctx, k->sub, node, dst, path);
    case CONF_IGNORE: {
        struct conf_mark m = {node->line, node->col};
        memcpy(dst, &m, sizeof(m));
        return 0;
    }
    case CONF_MAP:
    case CONF_INT_MAP:
        return decode_map(ctx, k, node, dst, path);
    case CONF_TREE:
        return decode_tree(ctx, k, node, dst, path);
    case CONF_ADDR_LIST:
    case CONF_STR_LIST:
    case CONF_LIST:
    case CONF_STR_MAP:
        break;
    default:
        return decode_scalar(ctx, k, node, dst, path);
    }
    /* An empty value (key: or key: ~) is an empty collection; errors still
     * point at where it was written. */
    const struct ynode *where = node;
    if (node->type == YNODE_SCALAR && yscalar_is_null(node))
        node = NULL;
    if (k->type == CONF_STR_MAP) {
        struct conf_strmap *m = (struct conf_strmap *)(void *)dst;
        free_value(k, dst);
        if (node == NULL)
            return 0;
        if (node->type != YNODE_MAP) {
            CTX_ERR(ctx, node, path, "expected a mapping of strings, got %s",
                    ynode_type_name(node));
            return -1;
        }
        m->v = calloc(node->n ? node->n : 1, sizeof(*m->v));
        if (m->v == NULL)
            return -1;
        for (size_t i = 0; i < node->n; i++) {
            const struct ynode *val = node->pairs[i].val;
            path_fmt(sub, "%s.%s", path, node->pairs[i].key->str);
            if (val->type != YNODE_SCALAR) {
                CTX_ERR(ctx, val, sub, "expected a string, got %s",
                        ynode_type_name(val));
                return -1;
            }
            m->v[m->n].key = strdup(node->pairs[i].key->str);
            m->v[m->n].val = strdup(val->str);
            m->n++;
        }
        return 0;
    }
    /* Lists. */
    free_value(k, dst);
    if (node != NULL && node->type != YNODE_SEQ) {
        CTX_ERR(ctx, node, path, "expected a list, got %s",
                ynode_type_name(node));
        return -1;
    }
    {
        size_t n = node ? node->n : 0;
        size_t esz = k->type == CONF_LIST       ? k->sub->elem_size
                     : k->type == CONF_STR_LIST ? sizeof(char *)
                                                : sizeof(struct addr);
        char *arr;
        int bad = 0;

        if ((int64_t)n < k->min || (int64_t)n > k->max) {
            CTX_ERR(ctx, where, path,
                    "needs %" PRId64 " to %" PRId64 " entries, has %zu", k->min,
                    k->max, n);
            return -1;
        }
        if (n == 0)
            return 0;
        arr = calloc(n, esz);
        if (arr == NULL)
            return -1;
        if (k->type == CONF_STR_LIST) {
            struct conf_strs *sl = (struct conf_strs *)(void *)dst;
            static const struct conf_key str_key = {.type = CONF_STR};
            sl->v = (char **)(void *)arr;
            sl->n = n;
            for (size_t i = 0; i < n; i++) {
                path_fmt(sub, "%s[%zu]", path, i);
                if (decode_scalar(ctx, &str_key, node->items[i], arr + i * esz,
                                  sub) < 0)
                    bad = -1;
            }
            return bad;
        }
        if (k->type == CONF_ADDR_LIST) {
            struct conf_addrs *al = (struct conf_addrs *)(void *)dst;
            static const struct conf_key addr_key = {.type = CONF_ADDR};
            al->v = (struct addr *)(void *)arr;
            al->n = n;
            for (size_t i = 0; i < n; i++) {
                path_fmt(sub, "%s[%zu]", path, i);
                if (decode_scalar(ctx, &addr_key, node->items[i], arr + i * esz,
                                  sub) < 0)
                    bad = -1;
            }
            return bad;
        }
        {
            struct conf_list *l = (struct conf_list *)(void *)dst;
            l->v = arr;
            l->n = n;
            for (size_t i = 0; i < n; i++) {
                char *elem = arr + i * esz;
                conf_defaults(k->sub, elem);
                if (k->sub->mark_off != SIZE_MAX) {
                    struct conf_mark m = {node->items[i]->line,
                                          node->items[i]->col};
                    memcpy(elem + k->sub->mark_off, &m, sizeof(m));
                }
                path_fmt(sub, "%s[%zu]", path, i);
                if (decode_section(ctx, k->sub, node->items[i], elem, sub) < 0)
                    bad = -1;
            }
            return bad;
        }
    }
}

static int decode_section(struct conf_ctx *ctx, const struct conf_section *sec,
                          const struct ynode *map, char *dst,
                          const char *prefix)
{
    char path[CONF_PATH_MAX];
    int bad = 0;

    if (map->type != YNODE_MAP) {
        CTX_ERR(ctx, map, prefix[0] ? prefix : "(top level)",
                "expected a mapping, got %s", ynode_type_name(map));
        return -1;
    }
    for (size_t i = 0; i < map->n; i++) {
        const struct ynode *key = map->pairs[i].key;
        const struct conf_key *k;

        path_fmt(path, "%s%s%s", prefix, prefix[0] ? "." : "", key->str);
        for (k = sec->keys; k->name != NULL; k++)
            if (k->type != CONF_ONEOF && strcmp(k->name, key->str) == 0)
                break;
        if (k->name == NULL) {
            CTX_ERR(ctx, key, path, "unknown key");
            bad = -1;
            continue;
        }
        if (decode_key(ctx, k, map->pairs[i].val, dst + k->off, path) < 0)
            bad = -1;
    }
    for (const struct conf_key *k = sec->keys; k->name != NULL; k++)
        if (k->type == CONF_ONEOF && check_oneof(ctx, k, map, prefix) < 0)
            bad = -1;
    return bad;
}

int conf_decode(const struct conf_section *sec, const struct ynode *map,
                void *dst, const char *file, struct buf *errs)
{
    struct conf_ctx ctx = {file, errs, 0};

    decode_section(&ctx, sec, map, dst, "");
    return ctx.nerr;
}

/* The storage size of one key's value, so conf_defaults() can zero it. */
static size_t value_size(const struct conf_key *k)
{
    switch (k->type) {
    case CONF_STR:
        return sizeof(char *);
    case CONF_BOOL:
    case CONF_ENUM:
        return sizeof(int);
    case CONF_ADDR:
        return sizeof(struct addr);
    case CONF_ADDR_LIST:
        return sizeof(struct conf_addrs);
    case CONF_STR_LIST:
        return sizeof(struct conf_strs);
    case CONF_STR_MAP:
        return sizeof(struct conf_strmap);
    case CONF_TREE:
        return sizeof(struct conf_tree);
    case CONF_LIST:
        return sizeof(struct conf_list);
    case CONF_SECTION:
    case CONF_ONEOF:
        return 0;
    case CONF_DOUBLE:
        return sizeof(double);
    case CONF_MAP:
        return sizeof(struct conf_map);
    case CONF_INT_MAP:
        return sizeof(struct conf_intmap);
    case CONF_IGNORE:
        return sizeof(struct conf_mark);
    default:
        return sizeof(int64_t);
    }
}

void conf_defaults(const struct conf_section *sec, void *dst)
{
    char *base = dst;

    for (const struct conf_key *k = sec->keys; k->name != NULL; k++) {
        char *p = base + k->off;

        if (k->type == CONF_SECTION) {
            /* An absent section reads as line 0 in its mark. */
            if (k->sub->mark_off != SIZE_MAX)
                memset(p + k->sub->mark_off, 0, sizeof(struct conf_mark));
            conf_defaults(k->sub, p);
            continue;
        }
        memset(p, 0, value_size(k));
        if (k->def == NULL)
            continue;
        if (k->type == CONF_STR) {
            /* Strings take the default verbatim, "" included. */
            char **sp = (char **)(void *)p;
            *sp = strdup(k->def);
            if (*sp == NULL)
                abort();
            continue;
        }
        {
            struct ynode fake = {.type = YNODE_SCALAR,
                                 .str = (char *)k->def,
                                 .len = strlen(k->def)};
            struct buf errs;
            struct conf_ctx ctx = {"(default)", &errs, 0};

            buf_init(&errs, 4096);
            /* A default that does not parse is a bug in the table, caught by
             * the unit tests; fail loudly rather than run with zeroes. */
            if (decode_scalar(&ctx, k, &fake, p, k->name) < 0) {
                fprintf(stderr, "strait: bad default: %s", buf_cstr(&errs));
                abort();
            }
            buf_dispose(&errs);
        }
    }
}

static void free_value(const struct conf_key *k, char *p)
{
    switch (k->type) {
    case CONF_STR: {
        char **sp = (char **)(void *)p;
        free(*sp);
        *sp = NULL;
        break;
    }
    case CONF_ADDR_LIST: {
        struct conf_addrs *al = (struct conf_addrs *)(void *)p;
        free(al->v);
        al->v = NULL;
        al->n = 0;
        break;
    }
    case CONF_STR_LIST: {
        struct conf_strs *sl = (struct conf_strs *)(void *)p;
        for (size_t i = 0; i < sl->n; i++)
            free(sl->v[i]);
        free(sl->v);
        sl->v = NULL;
        sl->n = 0;
        break;
    }
    case CONF_STR_MAP: {
        struct conf_strmap *m = (struct conf_strmap *)(void *)p;
        for (size_t i = 0; i < m->n; i++) {
            free(m->v[i].key);
            free(m->v[i].val);
        }
        free(m->v);
        m->v = NULL;
        m->n = 0;
        break;
    }
    case CONF_TREE: {
        struct conf_tree *t = (struct conf_tree *)(void *)p;
        for (size_t i = 0; i < t->n; i++) {
            free(t->v[i].key);
            free(t->v[i].str);
        }
        free(t->v);
        t->v = NULL;
        t->n = 0;
        break;
    }
    case CONF_SECTION:
        conf_dispose(k->sub, p);
        break;
    case CONF_MAP: {
        struct conf_map *m = (struct conf_map *)(void *)p;
        for (size_t i = 0; i < m->n; i++) {
            free(m->keys[i]);
            conf_dispose(k->sub, (char *)m->v + i * k->sub->elem_size);
        }
        free(m->keys);
        free(m->v);
        m->keys = NULL;
        m->v = NULL;
        m->n = 0;
        break;
    }
    case CONF_INT_MAP: {
        struct conf_intmap *m = (struct conf_intmap *)(void *)p;
        for (size_t i = 0; i < m->n; i++)
            free(m->v[i].key);
        free(m->v);
        m->v = NULL;
        m->n = 0;
        break;
    }
    case CONF_LIST: {
        struct conf_list *l = (struct conf_list *)(void *)p;
        for (size_t i = 0; i < l->n; i++)
            conf_dispose(k->sub, (char *)l->v + i * k->sub->elem_size);
        free(l->v);
        l->v = NULL;
        l->n = 0;
        break;
    }
    default:
        break;
    }
}

void conf_dispose(const struct conf_section *sec, void *dst)
{
    for (const struct conf_key *k = sec->keys; k->name != NULL; k++)
        free_value(k, (char *)dst + k->off);
}

/* Writes the value at v (and the values under it) as JSON; returns the
 * node after them. */
static const struct conf_tnode *tree_json(struct buf *b,
                                          const struct conf_tnode *v)
{
    const struct conf_tnode *at = v + 1;

    if (v->type == CONF_TNODE_STR) {
        json_str(b, v->str);
        return at;
    }
    buf_puts(b, v->type == CONF_TNODE_MAP ? "{" : "[");
    for (size_t i = 0; i < v->n; i++) {
        buf_puts(b, i ? "," : "");
        if (v->type == CONF_TNODE_MAP) {
            json_str(b, at->key);
            buf_puts(b, ":");
        }
        at = tree_json(b, at);
    }
    buf_puts(b, v->type == CONF_TNODE_MAP ? "}" : "]");
    return at;
}

static void value_json(const struct conf_key *k, const char *p, struct buf *b)
{
    char tmp[ADDR_STRLEN];
    int64_t v;
    int i;

    switch (k->type) {
    case CONF_STR:
        if (k->custom_json != NULL)
            k->custom_json(b, p); /* e.g. a secret, redacted */
        else
            json_str(b, *(char *const *)(const void *)p);
        break;
    case CONF_INT:
    case CONF_SIZE:
        memcpy(&v, p, sizeof(v));
        buf_printf(b, "%" PRId64, v);
        break;
    case CONF_DURATION:
        memcpy(&v, p, sizeof(v));
        if (v != 0 && v % 3600000 == 0)
            buf_printf(b, "\"%" PRId64 "h\"", v / 3600000);
        else if (v != 0 && v % 60000 == 0)
            buf_printf(b, "\"%" PRId64 "m\"", v / 60000);
        else if (v % 1000 == 0)
            buf_printf(b, "\"%" PRId64 "s\"", v / 1000);
        else
            buf_printf(b, "\"%" PRId64 "ms\"", v);
        break;
    case CONF_BOOL:
        memcpy(&i, p, sizeof(i));
        buf_puts(b, i ? "true" : "false");
        break;
    case CONF_ENUM:
        memcpy(&i, p, sizeof(i));
        json_str(b, k->enums[i]);
        break;
    case CONF_ADDR:
        json_str(b, addr_format((const struct addr *)(const void *)p, tmp,
                                sizeof(tmp)));
        break;
    case CONF_ADDR_LIST: {
        const struct conf_addrs *al = (const void *)p;
        buf_puts(b, "[");
        for (size_t j = 0; j < al->n; j++) {
            buf_puts(b, j ? "," : "");
            json_str(b, addr_format(&al->v[j], tmp, sizeof(tmp)));
        }
        buf_puts(b, "]");
        break;
    }
    case CONF_STR_LIST: {
        const struct conf_strs *sl = (const void *)p;
        buf_puts(b, "[");
        for (size_t j = 0; j < sl->n; j++) {
            buf_puts(b, j ? "," : "");
            json_str(b, sl->v[j]);
        }
        buf_puts(b, "]");
        break;
    }
    case CONF_TREE: {
        const struct conf_tree *t = (const void *)p;
        if (t->n == 0)
            buf_puts(b, "{}");
        else
            tree_json(b, t->v);
        break;
    }
    case CONF_STR_MAP: {
        const struct conf_strmap *m = (const void *)p;
        buf_puts(b, "{");
        for (size_t j = 0; j < m->n; j++) {
            buf_puts(b, j ? "," : "");
            json_str(b, m->v[j].key);
            buf_puts(b, ":");
            json_str(b, m->v[j].val);
        }
        buf_puts(b, "}");
        break;
    }
    case CONF_SECTION:
        conf_to_json(k->sub, p, b);
        break;
    case CONF_LIST: {
        const struct conf_list *l = (const void *)p;
        buf_puts(b, "[");
        for (size_t j = 0; j < l->n; j++) {
            buf_puts(b, j ? "," : "");
            conf_to_json(k->sub, (const char *)l->v + j * k->sub->elem_size, b);
        }
        buf_puts(b, "]");
        break;
    }
    case CONF_CUSTOM:
        k->custom_json(b, p);
        break;
    case CONF_DOUBLE: {
        double d;
        memcpy(&d, p, sizeof(d));
        buf_printf(b, "%.17g", d);
        break;
    }
    case CONF_MAP: {
        const struct conf_map *m = (const void *)p;
        buf_puts(b, "{");
        for (size_t j = 0; j < m->n; j++) {
            buf_puts(b, j ? "," : "");
            json_str(b, m->keys[j]);
            buf_puts(b, ":");
            conf_to_json(k->sub, (const char *)m->v + j * k->sub->elem_size, b);
        }
        buf_puts(b, "}");
        break;
    }
    case CONF_INT_MAP: {
        const struct conf_intmap *m = (const void *)p;
        buf_puts(b, "{");
        for (size_t j = 0; j < m->n; j++) {
            buf_puts(b, j ? "," : "");
            json_str(b, m->v[j].key);
            buf_printf(b, ":%" PRId64, m->v[j].val);
        }
        buf_puts(b, "}");
        break;
    }
    case CONF_ONEOF:
    case CONF_IGNORE:
        buf_puts(b, "null");
        break;
    }
}

void conf_secret_json(struct buf *b, const void *src)
{
    const char *v = *(char *const *)src;

    json_str(b, v != NULL && v[0] != '\0' ? "<redacted>" : "");
}

void conf_to_json(const struct conf_section *sec, const void *dst,
                  struct buf *b)
{
    int first = 1;

    buf_puts(b, "{");
    for (const struct conf_key *k = sec->keys; k->name != NULL; k++) {
        /* Rules and ignored keys carry no value to show. */
        if (k->type == CONF_ONEOF || k->type == CONF_IGNORE)
            continue;
        buf_puts(b, first ? "" : ",");
        first = 0;
        json_str(b, k->name);
        buf_puts(b, ":");
        value_json(k, (const char *)dst + k->off, b);
    }
    buf_puts(b, "}");
}

/* ---- identity bytes ----------------------------------------------------- */

static void id_u64(const struct conf_sink *s, unsigned char tag, uint64_t v)
{
    unsigned char x[9];

    x[0] = tag;
    for (int i = 0; i < 8; i++)
        x[1 + i] = (unsigned char)(v >> (8 * i));
    s->write(s->arg, x, sizeof(x));
}

static void id_bytes(const struct conf_sink *s, unsigned char tag,
                     const void *p, size_t n)
{
    id_u64(s, tag, n);
    s->write(s->arg, p, n);
}

/* NULL and "" differ. */
static void id_str(const struct conf_sink *s, const char *v)
{
    if (v == NULL)
        id_u64(s, 'z', 0);
    else
        id_bytes(s, 's', v, strlen(v));
}

static void id_addr(const struct conf_sink *s, const struct addr *a)
{
    char tmp[ADDR_STRLEN];

    id_str(s, addr_format(a, tmp, sizeof(tmp)));
}

static void value_identity(const struct conf_key *k, const char *p,
                           const struct conf_sink *s)
{
    int64_t v;
    int i;

    switch (k->type) {
    case CONF_STR:
        id_str(s, *(char *const *)(const void *)p);
        break;
    case CONF_INT:
    case CONF_SIZE:
    case CONF_DURATION:
        memcpy(&v, p, sizeof(v));
        id_u64(s, 'n', (uint64_t)v);
        break;
    case CONF_BOOL:
    case CONF_ENUM:
        memcpy(&i, p, sizeof(i));
        id_u64(s, 'n', (uint64_t)(int64_t)i);
        break;
    case CONF_ADDR:
        id_addr(s, (const struct addr *)(const void *)p);
        break;
    case CONF_ADDR_LIST: {
        const struct conf_addrs *al = (const void *)p;
        id_u64(s, 'l', al->n);
        for (size_t j = 0; j < al->n; j++)
            id_addr(s, &al->v[j]);
        break;
    }
    case CONF_STR_LIST: {
        const struct conf_strs *sl = (const void *)p;
        id_u64(s, 'l', sl->n);
        for (size_t j = 0; j < sl->n; j++)
            id_str(s, sl->v[j]);
        break;
    }
    case CONF_TREE: {
        const struct conf_tree *t = (const void *)p;
        id_u64(s, 't', t->n);
        for (size_t j = 0; j < t->n; j++) {
            id_u64(s, 'k', (uint64_t)t->v[j].type);
            id_u64(s, 'n', t->v[j].n);
            id_str(s, t->v[j].key != NULL ? t->v[j].key : "");
            id_str(s, t->v[j].str != NULL ? t->v[j].str : "");
        }
        break;
    }
    case CONF_STR_MAP: {
        const struct conf_strmap *m = (const void *)p;
        id_u64(s, 'm', m->n);
        for (size_t j = 0; j < m->n; j++) {
            id_str(s, m->v[j].key);
            id_str(s, m->v[j].val);
        }
        break;
    }
    case CONF_SECTION:
        conf_identity(k->sub, p, s);
        break;
    case CONF_LIST: {
        const struct conf_list *l = (const void *)p;
        id_u64(s, 'l', l->n);
        for (size_t j = 0; j < l->n; j++)
            conf_identity(k->sub, (const char *)l->v + j * k->sub->elem_size,
                          s);
        break;
    }
    case CONF_CUSTOM: {
        /* Only the key knows its storage: its JSON, for this one value. */
        struct buf t;
        buf_init(&t, 1024 * 1024);
        k->custom_json(&t, p);
        id_bytes(s, 'j', buf_ptr(&t), buf_len(&t));
        buf_dispose(&t);
        break;
    }
    case CONF_DOUBLE: {
        double d;
        uint64_t bits;
        memcpy(&d, p, sizeof(d));
        if (d == 0)
            d = 0; /* -0 is 0 */
        memcpy(&bits, &d, sizeof(bits));
        id_u64(s, 'd', bits);
        break;
    }
    case CONF_MAP: {
        const struct conf_map *m = (const void *)p;
        id_u64(s, 'm', m->n);
        for (size_t j = 0; j < m->n; j++) {
            id_str(s, m->keys[j]);
            conf_identity(k->sub, (const char *)m->v + j * k->sub->elem_size,
                          s);
        }
        break;
    }
    case CONF_INT_MAP: {
        const struct conf_intmap *m = (const void *)p;
        id_u64(s, 'm', m->n);
        for (size_t j = 0; j < m->n; j++) {
            id_str(s, m->v[j].key);
            id_u64(s, 'n', (uint64_t)m->v[j].val);
        }
        break;
    }
    case CONF_ONEOF:
    case CONF_IGNORE:
        break;
    }
}

void conf_identity(const struct conf_section *sec, const void *dst,
                   const struct conf_sink *sink)
{
    size_t n = 0;

    for (const struct conf_key *k = sec->keys; k->name != NULL; k++)
        if (k->type != CONF_ONEOF && k->type != CONF_IGNORE)
            n++;
    /* The key count frames the section, so sections nest unambiguously. */
    id_u64(sink, '{', n);
    for (const struct conf_key *k = sec->keys; k->name != NULL; k++) {
        if (k->type == CONF_ONEOF || k->type == CONF_IGNORE)
            continue;
        id_bytes(sink, (unsigned char)('A' + k->type), k->name,
                 strlen(k->name));
        value_identity(k, (const char *)dst + k->off, sink);
    }
}

/* The reference names types without the article error messages use. */
static const char *ref_type(enum conf_type t)
{
    const char *n = type_name(t);

    if (t == CONF_ENUM)
        return "enum";
    if (t == CONF_CUSTOM)
        return "value";
    if (strncmp(n, "an ", 3) == 0)
        return n + 3;
    if (strncmp(n, "a ", 2) == 0)
        return n + 2;
    return n;
}

static void reference(const struct conf_section *sec, const char *prefix,
                      struct buf *b)
{
    char path[CONF_PATH_MAX];

    for (const struct conf_key *k = sec->keys; k->name != NULL; k++) {
        path_fmt(path, "%s%s%s", prefix, prefix[0] ? "." : "", k->name);
        if (k->type == CONF_SECTION) {
            reference(k->sub, path, b);
            continue;
        }
        if (k->type == CONF_ONEOF)
            continue;
        buf_printf(b, "%s\t%s\t%s\t%s\n", path, ref_type(k->type),
                   k->def ? k->def : "", k->help ? k->help : "");
        if (k->type == CONF_LIST) {
            path_fmt(path, "%s%s%s[]", prefix, prefix[0] ? "." : "", k->name);
            reference(k->sub, path, b);
        }
        if (k->type == CONF_MAP) {
            path_fmt(path, "%s%s%s.*", prefix, prefix[0] ? "." : "", k->name);
            reference(k->sub, path, b);
        }
    }
}

void conf_reference(const struct conf_section *sec, struct buf *b)
{
    reference(sec, "", b);
}
