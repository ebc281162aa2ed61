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

int main(void)
{
    const struct CMUnitTest tests[] = {
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
