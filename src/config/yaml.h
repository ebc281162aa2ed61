#ifndef STRAIT_CONFIG_YAML_H
#define STRAIT_CONFIG_YAML_H

#include <stddef.h>

/*
 * A small document tree built from libyaml's event stream. It keeps the
 * line and column of every node so configuration errors can name
 * file:line:col, which libyaml's own document API does not make easy.
 *
 * Aliases are refused (they let a few bytes expand into millions of
 * nodes), nesting is limited to YAML_MAX_DEPTH and the number of nodes of
 * each document to YAML_MAX_NODES, so any input is loaded in bounded
 * memory and time (a whole file is bounded by its size: the callers read
 * at most RESOURCE_MAX_FILE_BYTES). The bound is per document, not per
 * file, so that a configuration written as one multi-document file (as
 * `kubectl get -A -o yaml` or a generator writes it) loads as it would
 * in many files: 10,000 tenants make about 1,000,000 nodes.
 */
enum ynode_type { YNODE_SCALAR, YNODE_MAP, YNODE_SEQ };

#define YAML_MAX_DEPTH 64
#define YAML_MAX_NODES 1000000

struct ynode;

struct ypair {
    struct ynode *key;
    struct ynode *val;
};

struct ynode {
    enum ynode_type type;
    int line;   /* 1-based */
    int col;    /* 1-based */
    int quoted; /* scalar written with quotes or as a block: always a string */
    char *str;  /* scalar bytes, NUL-terminated; NULL for collections */
    size_t len;
    size_t n;             /* items in a map or sequence */
    struct ypair *pairs;  /* map */
    struct ynode **items; /* sequence */
};

/* One document of a stream; docs[i].root is NULL for an empty document. */
struct ydoc {
    struct ynode *root;
    int line;
};

/*
 * yaml_load() parses every document of data (len bytes). name is used in
 * messages. On success returns 0 and an array of *ndocs documents in *docs
 * (free with yaml_docs_free). On failure returns -1 and an allocated
 * "name:line:col: reason" message in *err.
 */
int yaml_load(const char *data, size_t len, const char *name,
              struct ydoc **docs, size_t *ndocs, char **err);

void yaml_docs_free(struct ydoc *docs, size_t ndocs);
void ynode_free(struct ynode *n);

/* ymap_get() returns the value for key in a map node, or NULL. */
const struct ynode *ymap_get(const struct ynode *map, const char *key);

/* yscalar_is_null() is true for ~, null, Null, NULL and an empty plain
 * scalar, as YAML 1.1 reads them. */
int yscalar_is_null(const struct ynode *n);

const char *ynode_type_name(const struct ynode *n);

#endif
