/*
 * Unit tests for src/control/secrets.c: each credential value of a
 * Secret becomes an in-memory file with the value's bytes, an unchanged
 * value keeps its file (and path) across sets, a changed one gets a new
 * file, and a file is closed once neither the set in effect nor the one
 * before it uses it.
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

#include "config/res-k8s.h"
#include "config/resource.h"
#include "control/secrets.h"

#define SECRET(crt)                                                            \
    "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\n"                  \
    "metadata: {name: cred, namespace: istio-system}\n"                        \
    "stringData: {tls.crt: " crt ", tls.key: the-key}\n"

static struct resource_set *load(const char *text)
{
    int nerr = 0;
    struct resource_set *set =
        resource_load_mem(text, strlen(text), "s.yaml", NULL, &nerr);

    assert_non_null(set);
    assert_int_equal(nerr, 0);
    return set;
}

static const struct res_k8s_secret *secret_of(const struct resource_set *set)
{
    const struct resource *r =
        resource_find(set, RES_SECRET, "istio-system", "cred");

    assert_non_null(r);
    return res_k8s_secret(r);
}

static void read_back(const char *path, const char *want)
{
    char buf[256];
    FILE *f = fopen(path, "r");
    size_t n;

    assert_non_null(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_string_equal(buf, want);
}

static void values_become_files_kept_while_unchanged(void **state)
{
    struct secret_store *st = secret_store_new();
    struct resource_set *a = load(SECRET("cert-one"));
    struct resource_set *b = load(SECRET("cert-one"));
    struct resource_set *c = load(SECRET("cert-two"));
    struct resource_set *d = load(SECRET("cert-three"));
    char a_crt[64], c_crt[64];
    struct stat sb;

    (void)state;
    assert_non_null(st);
    assert_int_equal(secret_store_apply(st, a), 0);
    secret_store_commit(st, a);
    assert_non_null(secret_of(a)->path[RES_SECRET_CERT]);
    assert_null(secret_of(a)->path[RES_SECRET_CA]);
    snprintf(a_crt, sizeof(a_crt), "%s", secret_of(a)->path[RES_SECRET_CERT]);
    assert_true(strncmp(a_crt, "/proc/self/fd/", 14) == 0);
    read_back(a_crt, "cert-one");
    read_back(secret_of(a)->path[RES_SECRET_KEY], "the-key");

    /* The same bytes: the same file. */
    assert_int_equal(secret_store_apply(st, b), 0);
    assert_string_equal(secret_of(b)->path[RES_SECRET_CERT], a_crt);
    secret_store_commit(st, b);

    /* New bytes: a new file; the old one stays for the set before. */
    assert_int_equal(secret_store_apply(st, c), 0);
    snprintf(c_crt, sizeof(c_crt), "%s", secret_of(c)->path[RES_SECRET_CERT]);
    assert_string_not_equal(c_crt, a_crt);
    read_back(c_crt, "cert-two");
    secret_store_commit(st, c);
    read_back(a_crt, "cert-one");
    /* The key did not change: its file is kept. */
    assert_string_equal(secret_of(c)->path[RES_SECRET_KEY],
                        secret_of(a)->path[RES_SECRET_KEY]);

    /* Two sets later, nothing uses cert-one: its file is closed. */
    assert_int_equal(secret_store_apply(st, d), 0);
    secret_store_commit(st, d);
    read_back(c_crt, "cert-two");
    read_back(secret_of(d)->path[RES_SECRET_CERT], "cert-three");
    assert_true(stat(a_crt, &sb) != 0 ||
                strcmp(a_crt, secret_of(d)->path[RES_SECRET_CERT]) == 0);

    resource_set_free(a);
    resource_set_free(b);
    resource_set_free(c);
    resource_set_free(d);
    secret_store_free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(values_become_files_kept_while_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
