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

#include "control/ca/fileset.h"

struct fx {
    char dir[64];
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_fileset.XXXXXX");
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

/* The content of dir/name, or "" when it does not exist. */
static const char *content(const char *dir, const char *name)
{
    static char buf[256];
    char path[128];
    FILE *fp;
    size_t n;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "r");
    if (fp == NULL)
        return "";
    n = fread(buf, 1, sizeof(buf) - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

static int exists(const char *dir, const char *name)
{
    char path[128];
    struct stat st;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return lstat(path, &st) == 0;
}

static const struct fileset_file set_a[3] = {
    {"key.pem", "key-A", 5, 0600},
    {"cert-chain.pem", "chain-A", 7, 0600},
    {"root-cert.pem", "root-A", 6, 0644},
};
static const struct fileset_file set_b[3] = {
    {"key.pem", "key-B", 5, 0600},
    {"cert-chain.pem", "chain-B", 7, 0600},
    {"root-cert.pem", "root-B", 6, 0644},
};

/* Every file of dir is from one set: 'A', 'B', or 0 when none exists;
 * a mix fails the test. */
static char which(const char *dir)
{
    char seen = 0;

    for (int i = 0; i < 3; i++) {
        const char *c = content(dir, set_a[i].name);
        size_t n = strlen(c);
        char v = n ? c[n - 1] : 0;
        if (i == 0)
            seen = v;
        else
            assert_int_equal(v, seen);
    }
    return seen;
}

static void test_write_replaces_all_and_cleans_up(void **state)
{
    struct fx *f = *state;
    char *err = NULL;
    struct stat st;
    char path[128];

    assert_int_equal(fileset_write(f->dir, set_a, 3, &err), 0);
    assert_null(err);
    assert_int_equal(which(f->dir), 'A');
    assert_int_equal(fileset_write(f->dir, set_b, 3, &err), 0);
    assert_int_equal(which(f->dir), 'B');
    assert_false(exists(f->dir, FILESET_PENDING));
    /* Modes are exact, whatever the umask. */
    snprintf(path, sizeof(path), "%s/key.pem", f->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    snprintf(path, sizeof(path), "%s/root-cert.pem", f->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    /* Nothing to recover after a finished write. */
    assert_int_equal(fileset_recover(f->dir, &err), 0);
}

/*
 * A crash after any number of steps, from a first write (nothing before)
 * and from a replacement (set A before), leaves after recovery either the
 * old set or the new one, never a mix; and once the set is decided
 * (the marker is written), recovery gives the new one.
 */
static void test_crash_at_every_step(void **state)
{
    struct fx *f = *state;
    char *err = NULL;
    char cmd[160];

    for (int first = 0; first < 2; first++) {
        size_t steps = 0;
        for (size_t k = 0;; k++) {
            int r;
            snprintf(cmd, sizeof(cmd), "rm -rf %s/* %s/.pending", f->dir,
                     f->dir);
            assert_int_equal(system(cmd), 0);
            if (!first)
                assert_int_equal(fileset_write(f->dir, set_a, 3, &err), 0);
            r = fileset_write_steps(f->dir, set_b, 3, k, &err);
            assert_true(r == 0 || r == 1);
            if (r == 0) {
                steps = k;
                assert_int_equal(which(f->dir), 'B');
                break;
            }
            /* The "process" died here; the next start recovers. */
            assert_true(fileset_recover(f->dir, &err) >= 0);
            assert_null(err);
            assert_false(exists(f->dir, FILESET_PENDING));
            {
                char w = which(f->dir);
                /* The marker is step 1 + 3 + 1: from then on, B. */
                if (k >= 5)
                    assert_int_equal(w, 'B');
                else
                    assert_int_equal(w, first ? 0 : 'A');
            }
            assert_true(k < 64);
        }
        /* mkdir, 3 writes, the marker, 3 renames, unlink, rmdir. */
        assert_int_equal(steps, 10);
    }
}

static void test_pending_not_a_directory_is_an_error(void **state)
{
    struct fx *f = *state;
    char *err = NULL;
    char path[128];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/" FILESET_PENDING, f->dir);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(fileset_write(f->dir, set_a, 3, &err), -1);
    assert_non_null(err);
    assert_non_null(strstr(err, "is not a directory"));
    free(err);
    err = NULL;
    assert_int_equal(which(f->dir), 0);
    /* Once it is removed, writes work again. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(fileset_write(f->dir, set_a, 3, &err), 0);
    assert_int_equal(which(f->dir), 'A');
}

static void test_bad_names_are_refused(void **state)
{
    struct fx *f = *state;
    const struct fileset_file bad[1] = {{"../x", "x", 1, 0600}};
    const struct fileset_file dot[1] = {{".complete", "x", 1, 0600}};
    char *err = NULL;

    assert_int_equal(fileset_write(f->dir, bad, 1, &err), -1);
    assert_non_null(err);
    free(err);
    err = NULL;
    assert_int_equal(fileset_write(f->dir, dot, 1, &err), -1);
    assert_non_null(err);
    free(err);
    err = NULL;
    assert_int_equal(fileset_write(f->dir, set_a, 0, &err), -1);
    free(err);
}

static void test_missing_dir_fails_without_leftovers(void **state)
{
    struct fx *f = *state;
    char dir[96];
    char *err = NULL;

    snprintf(dir, sizeof(dir), "%s/absent", f->dir);
    assert_int_equal(fileset_recover(dir, &err), 0);
    assert_int_equal(fileset_write(dir, set_a, 3, &err), -1);
    assert_non_null(err);
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_replaces_all_and_cleans_up,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_at_every_step, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_pending_not_a_directory_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_names_are_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_missing_dir_fails_without_leftovers, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
