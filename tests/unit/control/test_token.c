#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "control/ca/pki.h"
#include "control/ca/token.h"

static const uint8_t pin[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

struct fx {
    char dir[64];
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_token.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

static void test_format_parse_roundtrip(void **state)
{
    struct token t, u;
    char s[TOKEN_STRLEN], padded[TOKEN_STRLEN + 8];
    const char *why = NULL;

    (void)state;
    memcpy(t.pin, pin, 32);
    for (int i = 0; i < 32; i++)
        t.secret[i] = (uint8_t)(0xff - i);
    token_format(&t, s);
    assert_int_equal(strlen(s), TOKEN_STRLEN - 1);
    assert_memory_equal(s, "sjt1.", 5);
    /* base64url: no '+', '/' or '='. */
    assert_null(strpbrk(s, "+/="));
    assert_int_equal(token_parse(s, strlen(s), &u, &why), 0);
    assert_memory_equal(&t, &u, sizeof(t));
    snprintf(padded, sizeof(padded), "  %s\n", s);
    assert_int_equal(token_parse(padded, strlen(padded), &u, &why), 0);
    assert_memory_equal(&t, &u, sizeof(t));
}

static void expect_bad(const char *s, const char *want)
{
    struct token t;
    const char *why = NULL;

    assert_int_equal(token_parse(s, strlen(s), &t, &why), -1);
    if (why == NULL || strstr(why, want) == NULL)
        fail_msg("'%s' refused with '%s', expected '%s'", s,
                 why ? why : "(null)", want);
}

static void test_parse_refuses_bad_tokens(void **state)
{
    struct token t;
    char s[TOKEN_STRLEN];

    (void)state;
    memset(&t, 7, sizeof(t));
    token_format(&t, s);
    expect_bad("", "not a strait join token");
    expect_bad("eyJhbGciOi.x.y", "not a strait join token");
    expect_bad("sjt2.AAAA", "unsupported join token version");
    expect_bad("sjt1.AAAA", "damaged");
    s[20] = '*';
    expect_bad(s, "damaged");
    token_format(&t, s);
    s[TOKEN_STRLEN - 2] = '\0'; /* one character short */
    expect_bad(s, "damaged");
    token_format(&t, s);
    /* A non-canonical last character (unused bits set). */
    s[TOKEN_STRLEN - 2] = s[TOKEN_STRLEN - 2] == 'B' ? 'C' : 'B';
    expect_bad(s, "damaged");
}

static void test_b64url(void **state)
{
    uint8_t in[5] = {0xfb, 0xff, 0x00, 0x10, 0x7e}, out[8];
    char enc[16];

    (void)state;
    assert_int_equal(pki_b64url_encode(in, 5, enc, sizeof(enc)), 7);
    assert_string_equal(enc, "-_8AEH4");
    assert_int_equal(pki_b64url_decode(enc, 7, out, sizeof(out)), 5);
    assert_memory_equal(in, out, 5);
    assert_int_equal(pki_b64url_decode("-_8AEH5", 7, out, sizeof(out)), -1);
    assert_int_equal(pki_b64url_decode("A", 1, out, sizeof(out)), -1);
    assert_int_equal(pki_b64url_decode("AA==", 4, out, sizeof(out)), -1);
}

static char *record_path(const char *dir, const char *tok)
{
    struct token t;
    const char *why;
    char id[65], *p = NULL;

    assert_int_equal(token_parse(tok, strlen(tok), &t, &why), 0);
    token_id(&t, id);
    assert_true(asprintf(&p, "%s/tokens/%s", dir, id) > 0);
    return p;
}

static void test_create_redeem_once(void **state)
{
    struct fx *f = *state;
    char tok[TOKEN_STRLEN], *err = NULL, *ns, *sa, *rp, *data;
    struct token t;
    const char *why;
    struct stat st;
    size_t n;
    int64_t now = (int64_t)time(NULL);

    assert_int_equal(
        token_create(f->dir, pin, "foo", "bar", 3600, now, tok, &err), 0);
    rp = record_path(f->dir, tok);
    assert_int_equal(stat(rp, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* The record holds a hash, never the token or its secret. */
    data = pki_read_file(rp, &n, &err);
    assert_non_null(data);
    assert_null(strstr(data, tok + 5));
    assert_non_null(strstr(data, "namespace foo\n"));
    free(data);
    assert_int_equal(token_parse(tok, strlen(tok), &t, &why), 0);
    assert_memory_equal(t.pin, pin, 32);
    assert_int_equal(token_redeem(f->dir, pin, &t, NULL, now, &ns, &sa, &err),
                     0);
    assert_string_equal(ns, "foo");
    assert_string_equal(sa, "bar");
    free(ns);
    free(sa);
    /* Spent: a second use is refused and says why. */
    assert_int_equal(token_redeem(f->dir, pin, &t, NULL, now, &ns, &sa, &err),
                     -1);
    assert_string_equal(err, "join token already used");
    assert_null(ns);
    free(err);
    free(rp);
}

static void test_unknown_expired_and_foreign(void **state)
{
    struct fx *f = *state;
    char tok[TOKEN_STRLEN], *err = NULL, *ns, *sa;
    struct token t;
    const char *why;
    uint8_t other[32];
    int64_t now = (int64_t)time(NULL);

    memset(&t, 9, sizeof(t));
    memcpy(t.pin, pin, 32);
    assert_int_equal(token_redeem(f->dir, pin, &t, NULL, now, &ns, &sa, &err),
                     -1);
    assert_string_equal(err, "unknown join token");
    free(err);

    assert_int_equal(
        token_create(f->dir, pin, "foo", "bar", 60, now, tok, &err), 0);
    assert_int_equal(token_parse(tok, strlen(tok), &t, &why), 0);
    assert_int_equal(
        token_redeem(f->dir, pin, &t, NULL, now + 60, &ns, &sa, &err), -1);
    assert_non_null(strstr(err, "join token expired at "));
    free(err);
    /* Still expired (not "already used"): an expired token is not
     * spent. */
    assert_int_equal(
        token_redeem(f->dir, pin, &t, NULL, now + 61, &ns, &sa, &err), -1);
    assert_non_null(strstr(err, "expired"));
    free(err);

    memset(other, 0xee, sizeof(other));
    assert_int_equal(token_redeem(f->dir, other, &t, NULL, now, &ns, &sa, &err),
                     -1);
    assert_non_null(strstr(err, "different CA"));
    free(err);
    /* And it is still good for the right CA. */
    assert_int_equal(token_redeem(f->dir, pin, &t, NULL, now, &ns, &sa, &err),
                     0);
    free(ns);
    free(sa);
}

static void test_create_refuses_bad_names(void **state)
{
    struct fx *f = *state;
    char tok[TOKEN_STRLEN], *err = NULL;

    assert_int_equal(token_create(f->dir, pin, "Foo", "bar", 60, 0, tok, &err),
                     -1);
    assert_non_null(strstr(err, "namespace and service account"));
    free(err);
    assert_int_equal(token_create(f->dir, pin, "foo", "a/b", 60, 0, tok, &err),
                     -1);
    free(err);
    assert_int_equal(token_create(f->dir, pin, "foo", "bar", 0, 0, tok, &err),
                     -1);
    free(err);
}

static void test_record_parse(void **state)
{
    char *ns, *sa;
    int64_t exp;
    const char *why;
    const char *good = "strait-join-token 1\nnamespace a\nserviceAccount b\n"
                       "expires 42\n";
    const char *bad[] = {
        "",
        "strait-join-token 2\nnamespace a\nserviceAccount b\nexpires 42\n",
        "strait-join-token 1\nnamespace a\nserviceAccount b\nexpires x\n",
        "strait-join-token 1\nnamespace a\nserviceAccount b\nexpires 42",
        "strait-join-token 1\nnamespace a\nserviceAccount b\nexpires 42\nx",
        "strait-join-token 1\nnamespace \nserviceAccount b\nexpires 42\n",
        "strait-join-token 1\nnamespace A\nserviceAccount b\nexpires 42\n",
        "strait-join-token 1\nserviceAccount b\nnamespace a\nexpires 42\n",
        "strait-join-token 1\nnamespace a\nserviceAccount b\nexpires -1\n",
    };

    (void)state;
    assert_int_equal(
        token_record_parse(good, strlen(good), &ns, &sa, &exp, &why), 0);
    assert_string_equal(ns, "a");
    assert_string_equal(sa, "b");
    assert_int_equal(exp, 42);
    free(ns);
    free(sa);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (token_record_parse(bad[i], strlen(bad[i]), &ns, &sa, &exp, &why) ==
            0)
            fail_msg("record %zu accepted", i);
        assert_null(ns);
    }
}

static void test_count_outstanding(void **state)
{
    struct fx *f = *state;
    char tok[TOKEN_STRLEN], *err = NULL, *ns, *sa;
    struct token t;
    const char *why;
    int64_t now = (int64_t)time(NULL);

    assert_int_equal(token_count(f->dir, now), 0);
    assert_int_equal(token_create(f->dir, pin, "a", "b", 60, now, tok, &err),
                     0);
    assert_int_equal(token_create(f->dir, pin, "a", "c", 60, now, tok, &err),
                     0);
    assert_int_equal(token_count(f->dir, now), 2);
    assert_int_equal(token_parse(tok, strlen(tok), &t, &why), 0);
    assert_int_equal(token_redeem(f->dir, pin, &t, NULL, now, &ns, &sa, &err),
                     0);
    free(ns);
    free(sa);
    assert_int_equal(token_count(f->dir, now), 1);
    assert_int_equal(token_count(f->dir, now + 61), 0);
}

static void test_prune_old_records(void **state)
{
    struct fx *f = *state;
    char old1[TOKEN_STRLEN], old2[TOKEN_STRLEN], fresh[TOKEN_STRLEN];
    char *err = NULL, *ns, *sa, *p1, *p2, spent[200];
    struct token t;
    const char *why;
    int64_t now = (int64_t)time(NULL);
    int64_t long_ago = now - 3 * TOKEN_KEEP_S;
    struct stat st;

    assert_int_equal(
        token_create(f->dir, pin, "a", "b", 60, long_ago, old1, &err), 0);
    assert_int_equal(
        token_create(f->dir, pin, "a", "b", 60, long_ago, old2, &err), 0);
    /* old2 was spent while it was valid. */
    assert_int_equal(token_parse(old2, strlen(old2), &t, &why), 0);
    assert_int_equal(
        token_redeem(f->dir, pin, &t, NULL, long_ago + 1, &ns, &sa, &err), 0);
    free(ns);
    free(sa);
    p1 = record_path(f->dir, old1);
    p2 = record_path(f->dir, old2);
    snprintf(spent, sizeof(spent), "%s/tokens/spent/%s", f->dir,
             strrchr(p2, '/') + 1);
    assert_int_equal(stat(p1, &st), 0);
    assert_int_equal(stat(spent, &st), 0);
    /* Creating a token now prunes both; a fresh record stays. */
    assert_int_equal(token_create(f->dir, pin, "a", "b", 60, now, fresh, &err),
                     0);
    assert_int_equal(stat(p1, &st), -1);
    assert_int_equal(stat(spent, &st), -1);
    assert_int_equal(token_prune(f->dir, now), 0);
    assert_int_equal(token_count(f->dir, now), 1);
    free(p1);
    free(p2);
}

/*
 * A token spent for a key is redeemed again for that key only (a join
 * interrupted after the spend retries with the key it kept), while it is
 * unexpired; prune removes the key record with the spent one.
 */
static void test_spent_token_again_for_the_same_key(void **state)
{
    struct fx *f = *state;
    char tok[TOKEN_STRLEN], *err = NULL, *ns, *sa, kp[160];
    struct token t;
    const char *why;
    uint8_t k1[32], k2[32];
    int64_t now = (int64_t)time(NULL);
    struct stat st;
    char *rp;

    memset(k1, 0x11, sizeof(k1));
    memset(k2, 0x22, sizeof(k2));
    assert_int_equal(
        token_create(f->dir, pin, "foo", "bar", 60, now, tok, &err), 0);
    assert_int_equal(token_parse(tok, strlen(tok), &t, &why), 0);
    assert_int_equal(token_redeem(f->dir, pin, &t, k1, now, &ns, &sa, &err), 0);
    free(ns);
    free(sa);
    /* The same key again: the same identity. */
    assert_int_equal(token_redeem(f->dir, pin, &t, k1, now, &ns, &sa, &err), 0);
    assert_string_equal(ns, "foo");
    assert_string_equal(sa, "bar");
    free(ns);
    free(sa);
    /* Another key, or none: spent. */
    assert_int_equal(token_redeem(f->dir, pin, &t, k2, now, &ns, &sa, &err),
                     -1);
    assert_string_equal(err, "join token already used");
    free(err);
    assert_int_equal(token_redeem(f->dir, pin, &t, NULL, now, &ns, &sa, &err),
                     -1);
    assert_string_equal(err, "join token already used");
    free(err);
    /* Past its expiry not even the same key gets it. */
    assert_int_equal(
        token_redeem(f->dir, pin, &t, k1, now + 60, &ns, &sa, &err), -1);
    assert_non_null(strstr(err, "expired"));
    free(err);
    /* Pruning takes the key record too. */
    rp = record_path(f->dir, tok);
    snprintf(kp, sizeof(kp), "%s/tokens/spent/%s.key", f->dir,
             strrchr(rp, '/') + 1);
    assert_int_equal(stat(kp, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    token_prune(f->dir, now + 60 + TOKEN_KEEP_S + 1);
    assert_int_equal(stat(kp, &st), -1);
    free(rp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_parse_roundtrip),
        cmocka_unit_test(test_parse_refuses_bad_tokens),
        cmocka_unit_test(test_b64url),
        cmocka_unit_test_setup_teardown(test_create_redeem_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unknown_expired_and_foreign, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_create_refuses_bad_names, setup,
                                        teardown),
        cmocka_unit_test(test_record_parse),
        cmocka_unit_test_setup_teardown(test_count_outstanding, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_prune_old_records, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_spent_token_again_for_the_same_key,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
