/*
 * libFuzzer target for the YAML loader: arbitrary bytes must load in
 * bounded memory (aliases, depth and node count are limited) or fail with
 * a "name:line:col: reason" message. Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* walk() touches every node so ASan sees any bad pointer in the tree. */
static size_t walk(const struct ynode *n, int depth)
{
    size_t count = 1;

    if (depth > YAML_MAX_DEPTH + 1)
        abort();
    switch (n->type) {
    case YNODE_SCALAR:
        if (n->str == NULL || n->str[n->len] != '\0')
            abort();
        (void)yscalar_is_null(n);
        break;
    case YNODE_MAP:
        for (size_t i = 0; i < n->n; i++) {
            if (n->pairs[i].key->type != YNODE_SCALAR)
                abort();
            count += walk(n->pairs[i].key, depth + 1);
            count += walk(n->pairs[i].val, depth + 1);
            (void)ymap_get(n, n->pairs[i].key->str);
        }
        break;
    case YNODE_SEQ:
        for (size_t i = 0; i < n->n; i++)
            count += walk(n->items[i], depth + 1);
        break;
    }
    if (n->line < 1 || n->col < 1)
        abort();
    (void)ynode_type_name(n);
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ydoc *docs = NULL;
    size_t ndocs = 0;
    char *err = NULL;

    if (yaml_load((const char *)data, size, "fuzz", &docs, &ndocs, &err) == 0) {
        size_t nodes = 0;

        if (err != NULL)
            abort();
        for (size_t i = 0; i < ndocs; i++)
            if (docs[i].root != NULL)
                nodes += walk(docs[i].root, 0);
        if (nodes > YAML_MAX_NODES)
            abort();
    } else {
        /* Failures name the input: "fuzz:line:col: reason". */
        if (err == NULL || strncmp(err, "fuzz:", 5) != 0)
            abort();
        if (docs != NULL || ndocs != 0)
            abort();
    }
    yaml_docs_free(docs, ndocs);
    free(err);
    return 0;
}
