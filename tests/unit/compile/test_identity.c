/*
 * Unit tests of src/compile/identity.c: identities built from inputs
 * (equal inputs, equal identities; framed so inputs cannot run into each
 * other), and the map keyed by them (insert, find, replace, iterate, and
 * keys whose hashes collide).
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include "compile/identity.h"

/* id_of() builds the identity of the strings in v (NULL-terminated). */
static void id_of(struct ident_id *out, const char *const *v)
{
    struct ident d;

    ident_init(&d);
    for (; *v != NULL; v++)
        ident_str(&d, 's', *v);
    assert_int_equal(ident_finish(&d, out), 0);
}

static void test_equal_inputs_equal_identities(void **state)
{
    static const char *const a[] = {"listener", "x", NULL};
    static const char *const b[] = {"listener", "y", NULL};
    struct ident_id ia, ia2, ib;

    (void)state;
    id_of(&ia, a);
    id_of(&ia2, a);
    id_of(&ib, b);
    assert_true(ident_equal(&ia, &ia2));
    assert_int_equal(ia.hash, ia2.hash);
    assert_false(ident_equal(&ia, &ib));
    ident_id_dispose(&ia);
    ident_id_dispose(&ia2);
    ident_id_dispose(&ib);
}

/* "ab" + "c" is not "a" + "bc"; NULL is not ""; a tag is part of it. */
static void test_framing(void **state)
{
    static const char *const x[] = {"ab", "c", NULL};
    static const char *const y[] = {"a", "bc", NULL};
    static const char *const e[] = {"", NULL};
    struct ident_id ix, iy, ie, in, t1, t2;
    struct ident d;

    (void)state;
    id_of(&ix, x);
    id_of(&iy, y);
    assert_false(ident_equal(&ix, &iy));
    id_of(&ie, e);
    ident_init(&d);
    ident_str(&d, 's', NULL);
    assert_int_equal(ident_finish(&d, &in), 0);
    assert_false(ident_equal(&ie, &in));
    ident_init(&d);
    ident_u64(&d, 'a', 1);
    assert_int_equal(ident_finish(&d, &t1), 0);
    ident_init(&d);
    ident_u64(&d, 'b', 1);
    assert_int_equal(ident_finish(&d, &t2), 0);
    assert_false(ident_equal(&t1, &t2));
    ident_id_dispose(&ix);
    ident_id_dispose(&iy);
    ident_id_dispose(&ie);
    ident_id_dispose(&in);
    ident_id_dispose(&t1);
    ident_id_dispose(&t2);
}

/* An identity fed into another counts as one framed input, and a copy of
 * a builder's bytes continues it. */
static void test_sub_and_copy(void **state)
{
    static const char *const a[] = {"a", NULL};
    struct ident_id ia, outer1, outer2, c1, c2;
    struct ident d, pre;

    (void)state;
    id_of(&ia, a);
    ident_init(&d);
    ident_sub(&d, &ia);
    assert_int_equal(ident_finish(&d, &outer1), 0);
    ident_init(&d);
    ident_bytes(&d, 'i', ia.bytes, ia.len);
    assert_int_equal(ident_finish(&d, &outer2), 0);
    assert_true(ident_equal(&outer1, &outer2));
    ident_init(&pre);
    ident_str(&pre, 's', "p");
    ident_init(&d);
    ident_copy(&d, &pre);
    ident_str(&d, 's', "q");
    assert_int_equal(ident_finish(&d, &c1), 0);
    ident_str(&pre, 's', "q");
    assert_int_equal(ident_finish(&pre, &c2), 0);
    assert_true(ident_equal(&c1, &c2));
    /* An identity without bytes equals nothing, itself included. */
    ident_id_dispose(&outer2);
    memset(&outer2, 0, sizeof(outer2));
    assert_false(ident_equal(&outer2, &outer2));
    ident_id_dispose(&ia);
    ident_id_dispose(&outer1);
    ident_id_dispose(&c1);
    ident_id_dispose(&c2);
}

static void test_map_put_get_replace_iterate(void **state)
{
    enum { N = 100 };
    struct ident_map m;
    struct ident_id ids[N];
    int vals[N], seen[N] = {0};
    size_t pos = 0, count = 0;
    const struct ident_id *k;
    void *v;

    (void)state;
    ident_map_init(&m);
    for (int i = 0; i < N; i++) {
        struct ident d;
        ident_init(&d);
        ident_u64(&d, 'n', (uint64_t)i);
        assert_int_equal(ident_finish(&d, &ids[i]), 0);
        vals[i] = i;
        assert_null(ident_map_get(&m, &ids[i]));
        assert_int_equal(ident_map_put(&m, &ids[i], &vals[i]), 0);
    }
    assert_int_equal(m.n, N);
    for (int i = 0; i < N; i++)
        assert_ptr_equal(ident_map_get(&m, &ids[i]), &vals[i]);
    /* Replacing keeps the count. */
    assert_int_equal(ident_map_put(&m, &ids[7], &vals[8]), 0);
    assert_int_equal(m.n, N);
    assert_ptr_equal(ident_map_get(&m, &ids[7]), &vals[8]);
    while (ident_map_next(&m, &pos, &k, &v)) {
        int i = *(const int *)v;
        /* v is vals[i], except ids[7]'s, replaced by vals[8]. */
        if (ident_equal(k, &ids[7]))
            i = 7;
        assert_true(ident_equal(k, &ids[i]));
        seen[i]++;
        count++;
    }
    assert_int_equal(count, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], 1);
    /* The map keeps its own copies of the keys. */
    for (int i = 0; i < N; i++)
        ident_id_dispose(&ids[i]);
    pos = 0;
    assert_int_equal(ident_map_next(&m, &pos, &k, &v), 1);
    assert_ptr_equal(ident_map_get(&m, k), v);
    assert_null(ident_map_get(NULL, k));
    ident_map_dispose(&m);
}

/* Keys whose hashes are equal but bytes differ are different keys. */
static void test_map_collisions(void **state)
{
    static unsigned char b[4][3] = {"k0", "k1", "k2", "k3"};
    struct ident_id ids[4];
    struct ident_id other = {
        .hash = 42, .bytes = (unsigned char *)"k9", .len = 2};
    struct ident_map m;
    int vals[4];

    (void)state;
    ident_map_init(&m);
    for (int i = 0; i < 4; i++) {
        ids[i].hash = 42; /* forced: all collide */
        ids[i].bytes = b[i];
        ids[i].len = 2;
        assert_int_equal(ident_map_put(&m, &ids[i], &vals[i]), 0);
    }
    assert_int_equal(m.n, 4);
    for (int i = 0; i < 4; i++)
        assert_ptr_equal(ident_map_get(&m, &ids[i]), &vals[i]);
    assert_null(ident_map_get(&m, &other));
    /* Same bytes, another hash: not the same identity. */
    other.bytes = b[0];
    other.hash = 43;
    assert_false(ident_equal(&other, &ids[0]));
    ident_map_dispose(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_inputs_equal_identities),
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_sub_and_copy),
        cmocka_unit_test(test_map_put_get_replace_iterate),
        cmocka_unit_test(test_map_collisions),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
