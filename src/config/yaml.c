#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config/yaml.h"
#include "core/err.h"

struct yload {
    const char *name;
    size_t nodes;
    char **err;
};

static int yerr(struct yload *ld, size_t line, size_t col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int yerr(struct yload *ld, size_t line, size_t col, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return err_set(ld->err, "%s:%zu:%zu: %s", ld->name, line, col, msg);
}

void ynode_free(struct ynode *n)
{
    if (n == NULL)
        return;
    if (n->type == YNODE_MAP) {
        for (size_t i = 0; i < n->n; i++) {
            ynode_free(n->pairs[i].key);
            ynode_free(n->pairs[i].val);
        }
        free(n->pairs);
    } else if (n->type == YNODE_SEQ) {
        for (size_t i = 0; i < n->n; i++)
            ynode_free(n->items[i]);
        free(n->items);
    }
    free(n->str);
    free(n);
}

void yaml_docs_free(struct ydoc *docs, size_t ndocs)
{
    if (docs == NULL)
        return;
    for (size_t i = 0; i < ndocs; i++)
        ynode_free(docs[i].root);
    free(docs);
}

static struct ynode *ynode_new(struct yload *ld, enum ynode_type type,
                               const yaml_mark_t *mark)
{
    struct ynode *n;

    if (++ld->nodes > YAML_MAX_NODES) {
        yerr(ld, mark->line + 1, mark->column + 1,
             "document too large (more than %d nodes)", YAML_MAX_NODES);
        return NULL;
    }
    n = calloc(1, sizeof(*n));
    if (n == NULL) {
        yerr(ld, mark->line + 1, mark->column + 1, "out of memory");
        return NULL;
    }
    n->type = type;
    n->line = (int)mark->line + 1;
    n->col = (int)mark->column + 1;
    return n;
}

static int parser_next(yaml_parser_t *p, yaml_event_t *ev, struct yload *ld)
{
    if (yaml_parser_parse(p, ev))
        return 0;
    return yerr(ld, p->problem_mark.line + 1, p->problem_mark.column + 1,
                "YAML syntax error: %s%s%s",
                p->problem ? p->problem : "unknown problem",
                p->context ? " " : "", p->context ? p->context : "");
}

/* Collections grow by doubling; the count is bounded by YAML_MAX_NODES. */
static int grow(void **arr, size_t n, size_t elem)
{
    void *p;

    if (n & (n - 1))
        return 0;
    p = realloc(*arr, (n ? n * 2 : 4) * elem);
    if (p == NULL)
        return -1;
    *arr = p;
    return 0;
}

static struct ynode *parse_node(yaml_parser_t *p, yaml_event_t *ev,
                                struct yload *ld, int depth);

/* parse_children() reads events until the end of the collection started by
 * the caller; ev is consumed. */
static int parse_children(yaml_parser_t *p, struct ynode *n, struct yload *ld,
                          int depth)
{
    yaml_event_type_t end =
        n->type == YNODE_MAP ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT;

    for (;;) {
        yaml_event_t ev;
        struct ynode *child;

        if (parser_next(p, &ev, ld) < 0)
            return -1;
        if (ev.type == end) {
            yaml_event_delete(&ev);
            return 0;
        }
        child = parse_node(p, &ev, ld, depth + 1);
        if (child == NULL)
            return -1;
        if (n->type == YNODE_SEQ) {
            if (grow((void **)&n->items, n->n, sizeof(*n->items)) < 0) {
                ynode_free(child);
                return yerr(ld, 0, 0, "out of memory");
            }
            n->items[n->n++] = child;
            continue;
        }
        if (child->type != YNODE_SCALAR) {
            int line = child->line, col = child->col;
            ynode_free(child);
            return yerr(ld, (size_t)line, (size_t)col,
                        "mapping keys must be plain scalars");
        }
        if (ymap_get(n, child->str) != NULL) {
            int line = child->line, col = child->col;
            char key[128];
            snprintf(key, sizeof(key), "%s", child->str);
            ynode_free(child);
            return yerr(ld, (size_t)line, (size_t)col, "duplicate key '%s'",
                        key);
        }
        if (grow((void **)&n->pairs, n->n, sizeof(*n->pairs)) < 0) {
            ynode_free(child);
            return yerr(ld, 0, 0, "out of memory");
        }
        n->pairs[n->n].key = child;
        n->pairs[n->n].val = NULL;
        if (parser_next(p, &ev, ld) < 0) {
            n->n++;
            return -1;
        }
        n->pairs[n->n].val = parse_node(p, &ev, ld, depth + 1);
        n->n++;
        if (n->pairs[n->n - 1].val == NULL)
            return -1;
    }
}

/* parse_node() builds the node that starts with event ev and consumes ev. */
static struct ynode *parse_node(yaml_parser_t *p, yaml_event_t *ev,
                                struct yload *ld, int depth)
{
    struct ynode *n = NULL;

    if (depth > YAML_MAX_DEPTH) {
        yerr(ld, ev->start_mark.line + 1, ev->start_mark.column + 1,
             "nesting deeper than %d levels", YAML_MAX_DEPTH);
        yaml_event_delete(ev);
        return NULL;
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        n = ynode_new(ld, YNODE_SCALAR, &ev->start_mark);
        if (n == NULL)
            break;
        n->len = ev->data.scalar.length;
        n->str = malloc(n->len + 1);
        if (n->str == NULL) {
            ynode_free(n);
            n = NULL;
            yerr(ld, ev->start_mark.line + 1, 0, "out of memory");
            break;
        }
        memcpy(n->str, ev->data.scalar.value, n->len);
        n->str[n->len] = '\0';
        n->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        break;
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT:
        n = ynode_new(
            ld, ev->type == YAML_MAPPING_START_EVENT ? YNODE_MAP : YNODE_SEQ,
            &ev->start_mark);
        if (n == NULL)
            break;
        if (parse_children(p, n, ld, depth) < 0) {
            ynode_free(n);
            n = NULL;
        }
        break;
    case YAML_ALIAS_EVENT:
        yerr(ld, ev->start_mark.line + 1, ev->start_mark.column + 1,
             "YAML aliases (*%s) are not supported",
             (const char *)ev->data.alias.anchor);
        break;
    default:
        yerr(ld, ev->start_mark.line + 1, ev->start_mark.column + 1,
             "unexpected YAML event");
    }
    yaml_event_delete(ev);
    return n;
}

int yaml_load(const char *data, size_t len, const char *name,
              struct ydoc **docs, size_t *ndocs, char **err)
{
    yaml_parser_t p;
    struct yload ld = {name, 0, err};
    struct ydoc *out = NULL;
    size_t nout = 0;
    int rc = -1;

    *err = NULL;
    *docs = NULL;
    *ndocs = 0;
    if (!yaml_parser_initialize(&p)) {
        yerr(&ld, 0, 0, "cannot initialise the YAML parser");
        return -1;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)data, len);
    for (;;) {
        yaml_event_t ev;

        if (parser_next(&p, &ev, &ld) < 0)
            goto fail;
        if (ev.type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (ev.type == YAML_STREAM_START_EVENT ||
            ev.type == YAML_DOCUMENT_END_EVENT) {
            yaml_event_delete(&ev);
            continue;
        }
        if (ev.type != YAML_DOCUMENT_START_EVENT) {
            yerr(&ld, ev.start_mark.line + 1, ev.start_mark.column + 1,
                 "unexpected YAML event");
            yaml_event_delete(&ev);
            goto fail;
        }
        if (grow((void **)&out, nout, sizeof(*out)) < 0) {
            yaml_event_delete(&ev);
            yerr(&ld, 0, 0, "out of memory");
            goto fail;
        }
        out[nout].root = NULL;
        out[nout].line = (int)ev.start_mark.line + 1;
        nout++;
        ld.nodes = 0; /* YAML_MAX_NODES bounds each document */
        yaml_event_delete(&ev);
        if (parser_next(&p, &ev, &ld) < 0)
            goto fail;
        if (ev.type == YAML_DOCUMENT_END_EVENT) {
            yaml_event_delete(&ev);
            continue;
        }
        out[nout - 1].root = parse_node(&p, &ev, &ld, 0);
        if (out[nout - 1].root == NULL)
            goto fail;
        /* An empty plain scalar document ("---" alone) counts as empty. */
        if (out[nout - 1].root->type == YNODE_SCALAR &&
            yscalar_is_null(out[nout - 1].root)) {
            ynode_free(out[nout - 1].root);
            out[nout - 1].root = NULL;
        }
    }
    *docs = out;
    *ndocs = nout;
    rc = 0;
    out = NULL;
    nout = 0;
fail:
    yaml_docs_free(out, nout);
    yaml_parser_delete(&p);
    return rc;
}

const struct ynode *ymap_get(const struct ynode *map, const char *key)
{
    if (map == NULL || map->type != YNODE_MAP)
        return NULL;
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(map->pairs[i].key->str, key) == 0)
            return map->pairs[i].val;
    return NULL;
}

int yscalar_is_null(const struct ynode *n)
{
    if (n->type != YNODE_SCALAR || n->quoted)
        return 0;
    return n->len == 0 || strcmp(n->str, "~") == 0 ||
           strcmp(n->str, "null") == 0 || strcmp(n->str, "Null") == 0 ||
           strcmp(n->str, "NULL") == 0;
}

const char *ynode_type_name(const struct ynode *n)
{
    switch (n->type) {
    case YNODE_MAP:
        return "a mapping";
    case YNODE_SEQ:
        return "a list";
    default:
        return "a scalar";
    }
}
