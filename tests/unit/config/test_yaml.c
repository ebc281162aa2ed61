/*
 * Unit tests for src/config/yaml.c: the node tree, positions, documents,
 * and the refusals that keep any input bounded.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/yaml.h"

struct loaded {
    struct ydoc *docs;
    size_t ndocs;
};

static int teardown(void **state)
{
    struct loaded *l = *state;

    if (l != NULL) {
        yaml_docs_free(l->docs, l->ndocs);
        free(l);
    }
    *state = NULL;
    return 0;
}

/* load() parses text, which must succeed; the docs are freed at teardown. */
static struct loaded *load(void **state, const char *text)
{
    struct loaded *l = calloc(1, sizeof(*l));
    char *err = NULL;

    assert_non_null(l);
    *state = l;
    if (yaml_load(text, strlen(text), "t.yaml", &l->docs, &l->ndocs, &err) != 0)
        fail_msg("yaml_load: %s", err ? err : "?");
    assert_null(err);
    return l;
}

/* load_err() parses text, which must fail with exactly want. */
static void load_err(const char *text, size_t len, const char *want)
{
    struct ydoc *docs = (struct ydoc *)1;
    size_t ndocs = 99;
    char *err = NULL;

    assert_int_equal(yaml_load(text, len, "t.yaml", &docs, &ndocs, &err), -1);
    assert_null(docs);
    assert_int_equal(ndocs, 0);
    assert_non_null(err);
    assert_string_equal(err, want);
    free(err);
}

/* load_err_prefix() expects a failure whose message starts with want. */
static void load_err_prefix(const char *text, const char *want)
{
    struct ydoc *docs = NULL;
    size_t ndocs = 0;
    char *err = NULL;

    assert_int_equal(
        yaml_load(text, strlen(text), "t.yaml", &docs, &ndocs, &err), -1);
    assert_non_null(err);
    if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("message \"%s\" does not start with \"%s\"", err, want);
    free(err);
}

static void assert_pos(const struct ynode *n, int line, int col)
{
    assert_non_null(n);
    assert_int_equal(n->line, line);
    assert_int_equal(n->col, col);
}

static void assert_scalar(const struct ynode *n, const char *s)
{
    assert_non_null(n);
    assert_int_equal(n->type, YNODE_SCALAR);
    assert_string_equal(n->str, s);
    assert_int_equal(n->len, strlen(s));
}

static void test_map(void **state)
{
    struct loaded *l = load(state, "a: 1\nb: two\nc: \"3\"\n");
    const struct ynode *root;

    assert_int_equal(l->ndocs, 1);
    root = l->docs[0].root;
    assert_non_null(root);
    assert_int_equal(root->type, YNODE_MAP);
    assert_int_equal(root->n, 3);
    assert_null(root->str);
    /* Pairs keep their order. */
    assert_scalar(root->pairs[0].key, "a");
    assert_scalar(root->pairs[1].key, "b");
    assert_scalar(root->pairs[2].key, "c");
    assert_scalar(ymap_get(root, "a"), "1");
    assert_scalar(ymap_get(root, "b"), "two");
    assert_scalar(ymap_get(root, "c"), "3");
    assert_null(ymap_get(root, "d"));
    assert_null(ymap_get(root->pairs[0].val, "a")); /* not a map */
    assert_null(ymap_get(NULL, "a"));
    assert_string_equal(ynode_type_name(root), "a mapping");
    assert_string_equal(ynode_type_name(ymap_get(root, "a")), "a scalar");
}

static void test_sequence(void **state)
{
    struct loaded *l = load(state, "- x\n- [1, 2]\n- {k: v}\n");
    const struct ynode *root = l->docs[0].root;

    assert_non_null(root);
    assert_int_equal(root->type, YNODE_SEQ);
    assert_string_equal(ynode_type_name(root), "a list");
    assert_int_equal(root->n, 3);
    assert_scalar(root->items[0], "x");
    assert_int_equal(root->items[1]->type, YNODE_SEQ);
    assert_int_equal(root->items[1]->n, 2);
    assert_scalar(root->items[1]->items[0], "1");
    assert_scalar(root->items[1]->items[1], "2");
    assert_int_equal(root->items[2]->type, YNODE_MAP);
    assert_scalar(ymap_get(root->items[2], "k"), "v");
}

/* Collections grow by doubling: many items survive the reallocations. */
static void test_long_sequence(void **state)
{
    char *text = malloc(1000 * 16);
    size_t used = 0;
    struct loaded *l;
    const struct ynode *root;

    assert_non_null(text);
    for (int i = 0; i < 1000; i++)
        used += (size_t)snprintf(text + used, 16, "- %d\n", i);
    l = load(state, text);
    free(text);
    root = l->docs[0].root;
    assert_int_equal(root->n, 1000);
    for (int i = 0; i < 1000; i++) {
        char want[16];
        snprintf(want, sizeof(want), "%d", i);
        assert_scalar(root->items[i], want);
        assert_pos(root->items[i], i + 1, 3);
    }
}

static void test_positions(void **state)
{
    struct loaded *l = load(state, "# comment\n"
                                   "top:\n"
                                   "  inner: value\n"
                                   "  list:\n"
                                   "    - a\n"
                                   "    -   b\n"
                                   "flow: {x: 1, y: [2, 3]}\n");
    const struct ynode *root = l->docs[0].root, *top, *list, *flow, *y;

    assert_pos(root, 2, 1);
    assert_pos(root->pairs[0].key, 2, 1);
    top = ymap_get(root, "top");
    assert_pos(top, 3, 3);
    assert_pos(top->pairs[0].key, 3, 3);
    assert_pos(ymap_get(top, "inner"), 3, 10);
    list = ymap_get(top, "list");
    assert_int_equal(list->type, YNODE_SEQ);
    assert_pos(list, 5, 5);
    assert_pos(list->items[0], 5, 7);
    assert_pos(list->items[1], 6, 9);
    flow = ymap_get(root, "flow");
    assert_pos(flow, 7, 7);
    assert_pos(ymap_get(flow, "x"), 7, 11);
    y = ymap_get(flow, "y");
    assert_pos(y, 7, 17);
    assert_pos(y->items[1], 7, 21);
    assert_int_equal(l->docs[0].line, 2);
}

static void test_multi_document(void **state)
{
    struct loaded *l = load(state, "a: 1\n"
                                   "---\n"
                                   "b: 2\n"
                                   "...\n"
                                   "---\n"
                                   "- c\n");

    assert_int_equal(l->ndocs, 3);
    assert_scalar(ymap_get(l->docs[0].root, "a"), "1");
    assert_scalar(ymap_get(l->docs[1].root, "b"), "2");
    assert_int_equal(l->docs[2].root->type, YNODE_SEQ);
    assert_int_equal(l->docs[0].line, 1);
    assert_int_equal(l->docs[1].line, 2);
    assert_int_equal(l->docs[2].line, 5);
}

static void test_empty_documents(void **state)
{
    struct loaded *l = load(state, "---\n---\n~\n---\nnull\n---\n''\n");

    /* "---" alone, "~" and "null" are empty; a quoted '' is a value. */
    assert_int_equal(l->ndocs, 4);
    assert_null(l->docs[0].root);
    assert_null(l->docs[1].root);
    assert_null(l->docs[2].root);
    assert_non_null(l->docs[3].root);
    assert_scalar(l->docs[3].root, "");
    assert_true(l->docs[3].root->quoted);
}

static void test_empty_stream(void **state)
{
    struct loaded *l = load(state, "");

    assert_int_equal(l->ndocs, 0);
    assert_null(l->docs);
    teardown(state);
    l = load(state, "# only a comment\n\n");
    assert_int_equal(l->ndocs, 0);
}

static void test_duplicate_key(void **state)
{
    (void)state;
    load_err("a: 1\nb: 2\na: 3\n", 15, "t.yaml:3:1: duplicate key 'a'");
    load_err("m:\n  k: 1\n  k: 2\n", 17, "t.yaml:3:3: duplicate key 'k'");
    load_err("{x: 1, x: 2}", 12, "t.yaml:1:8: duplicate key 'x'");
    /* A quoted key is the same key. */
    load_err("a: 1\n\"a\": 2\n", 12, "t.yaml:2:1: duplicate key 'a'");
}

static void test_aliases_refused(void **state)
{
    const char *text = "base: &b {x: 1}\nother: *b\n";

    (void)state;
    load_err(text, strlen(text),
             "t.yaml:2:8: YAML aliases (*b) are not supported");
    text = "- &a 1\n- *a\n";
    load_err(text, strlen(text),
             "t.yaml:2:3: YAML aliases (*a) are not supported");
}

/* An anchor without an alias is harmless and accepted. */
static void test_anchor_without_alias(void **state)
{
    struct loaded *l = load(state, "a: &x 1\n");

    assert_scalar(ymap_get(l->docs[0].root, "a"), "1");
}

static void test_complex_key_refused(void **state)
{
    const char *text = "? [a, b]\n: 1\n";

    (void)state;
    load_err(text, strlen(text),
             "t.yaml:1:3: mapping keys must be plain scalars");
}

static char *nested(int depth)
{
    char *s = malloc((size_t)depth * 2 + 2);

    assert_non_null(s);
    for (int i = 0; i < depth; i++)
        s[i] = '[';
    s[depth] = '1';
    for (int i = 0; i < depth; i++)
        s[depth + 1 + i] = ']';
    s[2 * depth + 1] = '\0';
    return s;
}

/* flow_seq() writes a document "---\n[a,a,...]\n" of items scalars (items
 * + 1 nodes) at out; returns its length. */
static size_t flow_seq(char *out, size_t items)
{
    size_t n = 0;

    memcpy(out, "---\n[", 5);
    n = 5;
    for (size_t i = 0; i < items; i++) {
        out[n++] = 'a';
        out[n++] = i + 1 < items ? ',' : ']';
    }
    out[n++] = '\n';
    return n;
}

/* YAML_MAX_NODES bounds each document, not the file: two documents that
 * together pass it load (one file of 10,000 tenants is about 1,000,000
 * nodes, issue 27), and one document past it is refused. */
static void test_node_limit_per_document(void **state)
{
    size_t half = YAML_MAX_NODES / 2; /* items: half + 1 nodes a document */
    char *text = malloc(4 * (size_t)YAML_MAX_NODES + 64);
    size_t len;
    struct loaded *l;
    char *err = NULL;
    struct ydoc *docs = NULL;
    size_t ndocs = 0;

    assert_non_null(text);
    len = flow_seq(text, half);
    len += flow_seq(text + len, half);
    text[len] = '\0';
    l = load(state, text);
    assert_int_equal(l->ndocs, 2);
    assert_int_equal(l->docs[0].root->n, half);
    assert_int_equal(l->docs[1].root->n, half);
    /* One document of YAML_MAX_NODES + 1 nodes: refused. */
    len = flow_seq(text, YAML_MAX_NODES);
    assert_int_equal(yaml_load(text, len, "t.yaml", &docs, &ndocs, &err), -1);
    assert_non_null(err);
    assert_non_null(strstr(err, "document too large"));
    free(err);
    free(text);
}

static void test_depth_limit(void **state)
{
    char *ok = nested(YAML_MAX_DEPTH);
    char *deep = nested(YAML_MAX_DEPTH + 1);
    char want[128];
    struct loaded *l;
    const struct ynode *n;

    /* YAML_MAX_DEPTH collections around a scalar load... */
    l = load(state, ok);
    n = l->docs[0].root;
    for (int i = 0; i < YAML_MAX_DEPTH; i++) {
        assert_int_equal(n->type, YNODE_SEQ);
        n = n->items[0];
    }
    assert_scalar(n, "1");
    /* ...one more level is refused, at the node that is too deep. */
    snprintf(want, sizeof(want), "t.yaml:1:%d: nesting deeper than %d levels",
             YAML_MAX_DEPTH + 2, YAML_MAX_DEPTH);
    load_err(deep, strlen(deep), want);
    free(ok);
    free(deep);

    /* Far deeper input fails the same way, in bounded time and memory. */
    deep = nested(100000);
    load_err_prefix(deep, "t.yaml:1:");
    free(deep);
}

static void test_syntax_errors(void **state)
{
    (void)state;
    load_err_prefix("a: [1, 2\n", "t.yaml:2:1: YAML syntax error: ");
    load_err_prefix("a: b: c\n", "t.yaml:1:5: YAML syntax error: ");
    load_err_prefix("a:\n  - 1\n b: 2\n", "t.yaml:3:");
    load_err_prefix("a: \"unterminated\n", "t.yaml:");
    load_err_prefix("\t- tab\n", "t.yaml:1:");
    load_err_prefix("a: 1\n---\n{\n", "t.yaml:4:1: YAML syntax error: ");
    /* The message carries libyaml's reason. */
    load_err("key: 'x\n", 8,
             "t.yaml:2:1: YAML syntax error: found unexpected end of stream "
             "while scanning a quoted scalar");
}

static void test_name_in_messages(void **state)
{
    struct ydoc *docs = NULL;
    size_t ndocs = 0;
    char *err = NULL;

    (void)state;
    assert_int_equal(
        yaml_load("a: *x", 5, "/etc/strait/strait.yaml", &docs, &ndocs, &err),
        -1);
    assert_string_equal(
        err,
        "/etc/strait/strait.yaml:1:4: YAML aliases (*x) are not supported");
    free(err);
}

static void test_quoted_flag(void **state)
{
    struct loaded *l = load(state, "plain: x\n"
                                   "single: 'x'\n"
                                   "double: \"x\"\n"
                                   "literal: |\n"
                                   "  text\n"
                                   "folded: >\n"
                                   "  more\n"
                                   "tagged: !!str 5\n");
    const struct ynode *root = l->docs[0].root;

    assert_false(ymap_get(root, "plain")->quoted);
    assert_true(ymap_get(root, "single")->quoted);
    assert_true(ymap_get(root, "double")->quoted);
    assert_true(ymap_get(root, "literal")->quoted);
    assert_scalar(ymap_get(root, "literal"), "text\n");
    assert_true(ymap_get(root, "folded")->quoted);
    assert_scalar(ymap_get(root, "folded"), "more\n");
    assert_false(ymap_get(root, "tagged")->quoted);
    assert_scalar(ymap_get(root, "tagged"), "5");
}

static void test_is_null(void **state)
{
    struct loaded *l = load(state, "a: ~\nb: null\nc: Null\nd: NULL\ne:\n"
                                   "f: 'null'\ng: \"\"\nh: nil\ni: none\n"
                                   "j: [x]\nk: 0\n");
    const struct ynode *root = l->docs[0].root;

    assert_true(yscalar_is_null(ymap_get(root, "a")));
    assert_true(yscalar_is_null(ymap_get(root, "b")));
    assert_true(yscalar_is_null(ymap_get(root, "c")));
    assert_true(yscalar_is_null(ymap_get(root, "d")));
    assert_true(yscalar_is_null(ymap_get(root, "e")));
    assert_scalar(ymap_get(root, "e"), "");
    /* Quoted scalars are strings, never null. */
    assert_false(yscalar_is_null(ymap_get(root, "f")));
    assert_false(yscalar_is_null(ymap_get(root, "g")));
    assert_false(yscalar_is_null(ymap_get(root, "h")));
    assert_false(yscalar_is_null(ymap_get(root, "i")));
    assert_false(yscalar_is_null(ymap_get(root, "j")));
    assert_false(yscalar_is_null(ymap_get(root, "k")));
}

static void test_json_input(void **state)
{
    struct loaded *l =
        load(state, "{\"node\": {\"name\": \"gw\"},\n"
                    " \"listeners\": [{\"name\": \"a\", \"port\": 80}],\n"
                    " \"empty\": {}, \"none\": [], \"t\": true}");
    const struct ynode *root = l->docs[0].root, *ls, *e;

    assert_int_equal(root->type, YNODE_MAP);
    assert_scalar(ymap_get(ymap_get(root, "node"), "name"), "gw");
    assert_true(ymap_get(ymap_get(root, "node"), "name")->quoted);
    ls = ymap_get(root, "listeners");
    assert_int_equal(ls->type, YNODE_SEQ);
    assert_int_equal(ls->n, 1);
    assert_scalar(ymap_get(ls->items[0], "port"), "80");
    assert_false(ymap_get(ls->items[0], "port")->quoted);
    assert_pos(ymap_get(ls->items[0], "port"), 2, 38);
    e = ymap_get(root, "empty");
    assert_int_equal(e->type, YNODE_MAP);
    assert_int_equal(e->n, 0);
    e = ymap_get(root, "none");
    assert_int_equal(e->type, YNODE_SEQ);
    assert_int_equal(e->n, 0);
}

/* Scalars are byte slices: a NUL written as an escape is kept in len. */
static void test_scalar_with_nul(void **state)
{
    struct loaded *l = load(state, "a: \"x\\0y\"\n");
    const struct ynode *a = ymap_get(l->docs[0].root, "a");

    assert_non_null(a);
    assert_int_equal(a->len, 3);
    assert_memory_equal(a->str, "x\0y", 4);
}

static void test_free_null(void **state)
{
    (void)state;
    ynode_free(NULL);
    yaml_docs_free(NULL, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_map, teardown),
        cmocka_unit_test_teardown(test_sequence, teardown),
        cmocka_unit_test_teardown(test_long_sequence, teardown),
        cmocka_unit_test_teardown(test_node_limit_per_document, teardown),
        cmocka_unit_test_teardown(test_positions, teardown),
        cmocka_unit_test_teardown(test_multi_document, teardown),
        cmocka_unit_test_teardown(test_empty_documents, teardown),
        cmocka_unit_test_teardown(test_empty_stream, teardown),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_aliases_refused),
        cmocka_unit_test_teardown(test_anchor_without_alias, teardown),
        cmocka_unit_test(test_complex_key_refused),
        cmocka_unit_test_teardown(test_depth_limit, teardown),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_name_in_messages),
        cmocka_unit_test_teardown(test_quoted_flag, teardown),
        cmocka_unit_test_teardown(test_is_null, teardown),
        cmocka_unit_test_teardown(test_json_input, teardown),
        cmocka_unit_test_teardown(test_scalar_with_nul, teardown),
        cmocka_unit_test(test_free_null),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
