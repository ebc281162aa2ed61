#include "config.h"

#include <event2/event.h>
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

#include "control/dirwatch.h"
#include "core/clock.h"

struct fx {
    struct event_base *base;
    char dir[64];
    int calls;
};

static void on_change(void *arg)
{
    struct fx *f = arg;

    f->calls++;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    f->base = event_base_new();
    snprintf(f->dir, sizeof(f->dir), "/tmp/dirwatch.XXXXXX");
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
    event_base_free(f->base);
    free(f);
    return 0;
}

static void touch(const struct fx *f, const char *name)
{
    char path[128];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/%s", f->dir, name);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("x\n", fp);
    fclose(fp);
}

/* Runs the loop until calls reaches want or 5 s pass. */
static void wait_calls(struct fx *f, int want)
{
    uint64_t deadline = clock_ms() + 5000;

    while (f->calls < want && clock_ms() < deadline)
        event_base_loop(f->base, EVLOOP_ONCE);
    assert_int_equal(f->calls, want);
}

static void test_change_fires_once_per_burst(void **state)
{
    struct fx *f = *state;
    struct dirwatch *w = dirwatch_new(f->base, f->dir, 30, on_change, f);

    assert_non_null(w);
    touch(f, "a.yaml");
    wait_calls(f, 1);
    /* Ten writes in a row make one call after the quiet time. */
    for (int i = 0; i < 10; i++)
        touch(f, "b.yaml");
    wait_calls(f, 2);
    assert_int_equal(dirwatch_fired(w), 2);
    assert_int_equal(dirwatch_watches_added(w), 1);
    dirwatch_free(w);
}

static void test_dotfiles_are_ignored(void **state)
{
    struct fx *f = *state;
    struct dirwatch *w = dirwatch_new(f->base, f->dir, 20, on_change, f);
    struct timeval tv = {0, 200 * 1000};

    assert_non_null(w);
    touch(f, ".swap");
    /* Give a change the time it would need, then check none came. */
    event_base_loopexit(f->base, &tv);
    event_base_dispatch(f->base);
    assert_int_equal(f->calls, 0);
    dirwatch_free(w);
}

static void test_directory_recreated_is_watched_again(void **state)
{
    struct fx *f = *state;
    struct dirwatch *w = dirwatch_new(f->base, f->dir, 20, on_change, f);
    char cmd[128];

    assert_non_null(w);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    wait_calls(f, 1); /* the removal is a change */
    assert_int_equal(mkdir(f->dir, 0755), 0);
    /* The retry finds it again and reports it. */
    wait_calls(f, 2);
    assert_int_equal(dirwatch_watches_added(w), 2);
    touch(f, "c.yaml");
    wait_calls(f, 3);
    dirwatch_free(w);
}

static void test_missing_directory_is_retried(void **state)
{
    struct fx *f = *state;
    char path[96];
    struct dirwatch *w;

    snprintf(path, sizeof(path), "%s/later", f->dir);
    w = dirwatch_new(f->base, path, 20, on_change, f);
    assert_non_null(w);
    assert_int_equal(dirwatch_watches_added(w), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    wait_calls(f, 1);
    assert_int_equal(dirwatch_watches_added(w), 1);
    dirwatch_free(w);
}

/* Runs the loop for ms and checks that no call came meanwhile. */
static void no_call_for(struct fx *f, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    int before = f->calls;

    event_base_loopexit(f->base, &tv);
    event_base_dispatch(f->base);
    assert_int_equal(f->calls, before);
}

/* Runs a shell command with $D set to the test's directory. */
static void sh(const struct fx *f, const char *cmd)
{
    assert_int_equal(setenv("D", f->dir, 1), 0);
    assert_int_equal(system(cmd), 0);
}

/* The kubelet's ConfigMap update: a new timestamped directory, the
 * ..data symlink renamed over to point at it, the old one removed. */
static void test_kubelet_data_swap_is_a_change(void **state)
{
    struct fx *f = *state;
    struct dirwatch *w;

    sh(f, "mkdir $D/..2026_a && echo a > $D/..2026_a/x.yaml && "
          "ln -s ..2026_a $D/..data && ln -s ..data/x.yaml $D/x.yaml");
    w = dirwatch_new(f->base, f->dir, 20, on_change, f);
    assert_non_null(w);
    sh(f, "mkdir $D/..2026_b && echo b > $D/..2026_b/x.yaml && "
          "ln -s ..2026_b $D/..data_tmp && mv -T $D/..data_tmp $D/..data && "
          "rm -rf $D/..2026_a");
    wait_calls(f, 1);
    dirwatch_free(w);
}

/* A file symlinked from another directory: an edit of the target is a
 * change, though nothing happens in the watched directory itself. */
static void test_symlink_target_edit_is_a_change(void **state)
{
    struct fx *f = *state;
    struct dirwatch *w;

    sh(f, "mkdir -p $D-other && echo a > $D-other/y.yaml && "
          "ln -s $D-other/y.yaml $D/y.yaml");
    w = dirwatch_new(f->base, f->dir, 20, on_change, f);
    assert_non_null(w);
    sh(f, "echo b >> $D-other/y.yaml");
    wait_calls(f, 1);
    dirwatch_free(w);
    sh(f, "rm -rf $D-other");
}

/* A namespace subdirectory's files are read (conf.d/foo/x.yaml): a file
 * written there is a change, one in a subdirectory made later too. */
static void test_subdirectory_edit_is_a_change(void **state)
{
    struct fx *f = *state;
    struct dirwatch *w;

    sh(f, "mkdir $D/foo && echo a > $D/foo/x.yaml");
    w = dirwatch_new(f->base, f->dir, 20, on_change, f);
    assert_non_null(w);
    assert_int_equal(dirwatch_dirs_watched(w, NULL), 1);
    sh(f, "echo b >> $D/foo/x.yaml");
    wait_calls(f, 1);
    sh(f, "mkdir $D/bar");
    wait_calls(f, 2);
    assert_int_equal(dirwatch_dirs_watched(w, NULL), 2);
    sh(f, "echo c > $D/bar/y.yaml");
    wait_calls(f, 3);
    dirwatch_free(w);
}

/* At most 64 other directories are watched; one more is counted, not
 * watched. */
static void test_subdirectory_watches_are_bounded(void **state)
{
    struct fx *f = *state;
    struct dirwatch *w;
    size_t over = 0;

    sh(f, "for i in $(seq 1 65); do mkdir $D/ns$i; done");
    w = dirwatch_new(f->base, f->dir, 20, on_change, f);
    assert_non_null(w);
    assert_int_equal(dirwatch_dirs_watched(w, &over), 64);
    assert_int_equal(over, 1);
    dirwatch_free(w);
}

static void test_chmod_is_a_change(void **state)
{
    struct fx *f = *state;
    char path[128];
    struct dirwatch *w;

    touch(f, "z.yaml");
    w = dirwatch_new(f->base, f->dir, 20, on_change, f);
    assert_non_null(w);
    snprintf(path, sizeof(path), "%s/z.yaml", f->dir);
    assert_int_equal(chmod(path, 0600), 0);
    wait_calls(f, 1);
    dirwatch_free(w);
}

/* A file written in two steps with a pause of many quiet periods between
 * them, kept open: no call until it is closed, then one. */
static void test_file_open_for_writing_is_waited_for(void **state)
{
    struct fx *f = *state;
    char path[128];
    struct dirwatch *w = dirwatch_new(f->base, f->dir, 20, on_change, f);
    FILE *fp;

    assert_non_null(w);
    snprintf(path, sizeof(path), "%s/two-steps.yaml", f->dir);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("kind: A\n---\n", fp);
    fflush(fp);
    no_call_for(f, 200); /* ten quiet periods */
    fputs("kind: B\n", fp);
    fclose(fp);
    wait_calls(f, 1);
    no_call_for(f, 100);
    dirwatch_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kubelet_data_swap_is_a_change,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_target_edit_is_a_change,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_subdirectory_edit_is_a_change,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_subdirectory_watches_are_bounded,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_chmod_is_a_change, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_file_open_for_writing_is_waited_for, setup, teardown),
        cmocka_unit_test_setup_teardown(test_change_fires_once_per_burst, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_dotfiles_are_ignored, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_directory_recreated_is_watched_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_directory_is_retried,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
