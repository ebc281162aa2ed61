/*
 * Link credentials: created, checked, re-created (the old one stops
 * working) and deleted; records read strictly.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/link/store.h"

static char dir[] = "/tmp/strait-test-store-XXXXXX";

static void test_lifecycle(void **state)
{
    char tok[160], tok2[160], site[64], hash[65], hash2[65], saved;
    const char *why;
    char *err = NULL;

    (void)state;
    assert_non_null(mkdtemp(dir));
    assert_int_equal(
        link_store_create(dir, "site-a", 1000, tok, sizeof(tok), &err), 0);
    assert_int_equal(strncmp(tok, "slk1.site-a.", 12), 0);
    assert_int_equal(strlen(tok), 12 + 43);
    assert_int_equal(link_store_check(dir, tok, strlen(tok), site, hash, &why),
                     0);
    assert_string_equal(site, "site-a");
    assert_true(link_store_current(dir, "site-a", hash));
    /* The secret is not stored. */
    {
        char path[256], data[512];
        FILE *f;
        size_t n;
        struct stat st;
        snprintf(path, sizeof(path), "%s/links/site-a", dir);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 077, 0);
        f = fopen(path, "rb");
        n = fread(data, 1, sizeof(data) - 1, f);
        fclose(f);
        data[n] = '\0';
        assert_null(strstr(data, tok + 12));
    }
    /* A wrong secret, of the right shape. */
    saved = tok[20];
    tok[20] = tok[20] == 'A' ? 'B' : 'A';
    assert_int_equal(link_store_check(dir, tok, strlen(tok), site, hash2, &why),
                     -1);
    assert_non_null(strstr(why, "does not match"));
    tok[20] = saved;
    /* The peer's trust, pinned once, read back; not after a re-create. */
    {
        struct link_pin pin = {"a.example", ""}, got;
        memset(pin.roots, 'a', 64);
        pin.roots[64] = '\0';
        assert_int_equal(link_store_pin_get(dir, "site-a", hash, &got), 0);
        assert_string_equal(got.trust_domain, "");
        assert_int_equal(link_store_pin_set(dir, "site-a", hash, &pin, &err),
                         0);
        assert_int_equal(link_store_pin_get(dir, "site-a", hash, &got), 0);
        assert_string_equal(got.trust_domain, "a.example");
        assert_string_equal(got.roots, pin.roots);
        /* Still the same credential. */
        assert_true(link_store_current(dir, "site-a", hash));
        assert_int_equal(
            link_store_check(dir, tok, strlen(tok), site, hash2, &why), 0);
    }
    /* Re-created: the first credential stops working. */
    assert_int_equal(
        link_store_create(dir, "site-a", 1001, tok2, sizeof(tok2), &err), 0);
    assert_false(link_store_current(dir, "site-a", hash));
    assert_int_equal(link_store_check(dir, tok, strlen(tok), site, hash2, &why),
                     -1);
    assert_int_equal(
        link_store_check(dir, tok2, strlen(tok2), site, hash2, &why), 0);
    {
        struct link_pin got;
        assert_int_equal(link_store_pin_get(dir, "site-a", hash, &got), -1);
        assert_int_equal(link_store_pin_get(dir, "site-a", hash2, &got), 0);
        assert_string_equal(got.trust_domain, "");
    }
    /* Deleted: unknown. */
    assert_int_equal(link_store_delete(dir, "site-a", &err), 0);
    assert_int_equal(
        link_store_check(dir, tok2, strlen(tok2), site, hash2, &why), -1);
    assert_non_null(strstr(why, "no link for this site"));
    assert_false(link_store_current(dir, "site-a", hash2));
    assert_int_equal(link_store_delete(dir, "site-a", &err), -1);
    assert_non_null(strstr(err, "no such link"));
    free(err);
    err = NULL;
    /* Bad names and shapes. */
    assert_int_equal(link_store_create(dir, "../x", 1, tok, sizeof(tok), &err),
                     -1);
    free(err);
    assert_int_equal(
        link_store_check(dir, "slk1.a.short", 12, site, hash, &why), -1);
    assert_int_equal(link_store_check(dir, "Bearer", 6, site, hash, &why), -1);
    {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
}

static void test_record_parse(void **state)
{
    static const char good[] =
        "strait-link 1\nsite b\nsecret-sha256 "
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n"
        "created 5\n";
    char site[64], hash[65], buf[512];
    int64_t created;
    const char *why;
    struct link_pin pin;

    (void)state;
    assert_int_equal(link_store_record_parse(good, strlen(good), site, hash,
                                             &created, &pin, &why),
                     0);
    assert_string_equal(site, "b");
    assert_int_equal(created, 5);
    /* Every truncation is refused. */
    for (size_t n = 0; n < strlen(good); n++)
        assert_int_equal(
            link_store_record_parse(good, n, site, hash, &created, &pin, &why),
            -1);
    snprintf(buf, sizeof(buf), "%sextra\n", good);
    assert_int_equal(link_store_record_parse(buf, strlen(buf), site, hash,
                                             &created, &pin, &why),
                     -1);
    /* A pinned peer. */
    snprintf(buf, sizeof(buf),
             "%speer-trust-domain a.example\npeer-roots "
             "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
             "\n",
             good);
    assert_int_equal(link_store_record_parse(buf, strlen(buf), site, hash,
                                             &created, &pin, &why),
                     0);
    assert_string_equal(pin.trust_domain, "a.example");
    assert_int_equal(strlen(pin.roots), 64);
    assert_int_equal(link_store_record_parse(buf, strlen(buf) - 2, site, hash,
                                             &created, &pin, &why),
                     -1);
    memcpy(buf, good, sizeof(good));
    buf[strlen("strait-link 1\nsite b\nsecret-sha256 ")] = 'G';
    assert_int_equal(link_store_record_parse(buf, strlen(buf), site, hash,
                                             &created, &pin, &why),
                     -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lifecycle),
        cmocka_unit_test(test_record_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
