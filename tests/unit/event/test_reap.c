/*
 * Unit tests for src/event/reap.c: what is deferred inside a callback is
 * freed on a later turn of a real event_base, never during the callback;
 * cancel keeps a node from running; dispose frees what is left. The
 * objects are heap memory touched after reaper_defer(), so a free that
 * came too early is a use-after-free under ASan.
 */
#include "config.h"

#include <event2/event.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "event/reap.h"

struct log {
    int order[16];
    int n;
    int after_requeue; /* n right after a free queued another object */
};

struct obj {
    struct reap_node reap;
    struct log *log;
    int id;
    int touched;
    struct reaper *requeue_on; /* queue this other object when freed */
    struct obj *next;
};

static struct obj *obj_new(struct log *log, int id)
{
    struct obj *o = calloc(1, sizeof(*o));

    assert_non_null(o);
    o->log = log;
    o->id = id;
    return o;
}

static void obj_free(struct reap_node *n)
{
    struct obj *o = LIST_ELEM(n, struct obj, reap);

    if (o->log->n < 16)
        o->log->order[o->log->n++] = o->id;
    if (o->requeue_on != NULL && o->next != NULL) {
        reaper_defer(o->requeue_on, &o->next->reap, obj_free);
        o->log->after_requeue = o->log->n;
    }
    free(o);
}

struct fixture {
    struct event_base *base;
    struct reaper r;
    struct log log;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    f->base = event_base_new();
    if (f->base == NULL) {
        free(f);
        return -1;
    }
    reaper_init(&f->r, f->base);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    reaper_dispose(&f->r);
    event_base_free(f->base);
    free(f);
    return 0;
}

/* Runs the loop one turn at a time until n frees were logged; a loop with
 * nothing left to run fails instead of hanging. */
static void run_until(struct fixture *f, int n)
{
    while (f->log.n < n)
        assert_int_equal(event_base_loop(f->base, EVLOOP_ONCE), 0);
}

/* An object's own callback: it drops itself and goes on using itself. */
struct cb_ctx {
    struct fixture *f;
    struct obj *o;
    int freed_during;
};

static void on_own_event(evutil_socket_t fd, short what, void *arg)
{
    struct cb_ctx *c = arg;

    (void)fd;
    (void)what;
    reaper_defer(&c->f->r, &c->o->reap, obj_free);
    c->o->touched = 1; /* still ours until the callback returns */
    c->freed_during = c->f->log.n;
}

static void test_freed_on_next_turn(void **state)
{
    struct fixture *f = *state;
    struct cb_ctx c = {f, obj_new(&f->log, 1), -1};
    struct event *ev = event_new(f->base, -1, 0, on_own_event, &c);

    assert_non_null(ev);
    event_active(ev, EV_TIMEOUT, 0);
    run_until(f, 1);
    assert_int_equal(c.freed_during, 0); /* nothing freed inside it */
    assert_int_equal(f->log.order[0], 1);
    event_free(ev);
}

/* reaper_defer() itself never runs fn. */
static void test_defer_does_not_run_now(void **state)
{
    struct fixture *f = *state;
    struct obj *o = obj_new(&f->log, 1);

    reaper_defer(&f->r, &o->reap, obj_free);
    assert_int_equal(f->log.n, 0);
    assert_int_equal(reap_node_queued(&o->reap), 1);
    o->touched = 1;
    run_until(f, 1);
}

/* Deferring twice before the turn frees once; order is first come. */
static void test_twice_is_once_in_order(void **state)
{
    struct fixture *f = *state;
    struct obj *a = obj_new(&f->log, 'a');
    struct obj *b = obj_new(&f->log, 'b');
    struct obj *c = obj_new(&f->log, 'c');

    reaper_defer(&f->r, &a->reap, obj_free);
    reaper_defer(&f->r, &b->reap, obj_free);
    reaper_defer(&f->r, &a->reap, obj_free);
    reaper_defer(&f->r, &c->reap, obj_free);
    run_until(f, 3);
    assert_int_equal(f->log.order[0], 'a');
    assert_int_equal(f->log.order[1], 'b');
    assert_int_equal(f->log.order[2], 'c');
    assert_int_equal(event_base_loop(f->base, EVLOOP_NONBLOCK), 1);
    assert_int_equal(f->log.n, 3);
}

/* A cancelled node never runs; its owner frees it. */
static void test_cancel(void **state)
{
    struct fixture *f = *state;
    struct obj *a = obj_new(&f->log, 'a');
    struct obj *b = obj_new(&f->log, 'b');

    reaper_defer(&f->r, &a->reap, obj_free);
    reaper_defer(&f->r, &b->reap, obj_free);
    reaper_cancel(&a->reap);
    assert_int_equal(reap_node_queued(&a->reap), 0);
    reaper_cancel(&a->reap); /* twice is harmless */
    run_until(f, 1);
    assert_int_equal(f->log.order[0], 'b');
    assert_int_equal(event_base_loop(f->base, EVLOOP_NONBLOCK), 1);
    assert_int_equal(f->log.n, 1);
    free(a);
}

/* What a free queues runs after it, never inside it. */
static void test_queued_while_running_waits(void **state)
{
    struct fixture *f = *state;
    struct obj *a = obj_new(&f->log, 'a');
    struct obj *b = obj_new(&f->log, 'b');

    a->requeue_on = &f->r;
    a->next = b;
    reaper_defer(&f->r, &a->reap, obj_free);
    run_until(f, 2);
    assert_int_equal(f->log.after_requeue, 1); /* b not freed inside a's */
    assert_int_equal(f->log.order[0], 'a');
    assert_int_equal(f->log.order[1], 'b');
}

/* A zeroed node needs no initialisation; a zeroed reaper disposes as a
 * no-op. */
static void test_zeroed(void **state)
{
    struct fixture *f = *state;
    struct obj *o = obj_new(&f->log, 1);
    struct reaper z;

    assert_int_equal(reap_node_queued(&o->reap), 0);
    reaper_cancel(&o->reap);
    reaper_defer(&f->r, &o->reap, obj_free);
    run_until(f, 1);
    memset(&z, 0, sizeof(z));
    reaper_dispose(&z);
}

/* Dispose frees everything still queued, and what those frees queue. */
static void test_dispose_frees_the_rest(void **state)
{
    struct fixture *f = *state;
    struct obj *a = obj_new(&f->log, 'a');
    struct obj *b = obj_new(&f->log, 'b');
    struct obj *c = obj_new(&f->log, 'c');

    a->requeue_on = &f->r;
    a->next = c;
    reaper_defer(&f->r, &a->reap, obj_free);
    reaper_defer(&f->r, &b->reap, obj_free);
    reaper_dispose(&f->r);
    assert_int_equal(f->log.n, 3);
    assert_int_equal(f->log.order[0], 'a');
    assert_int_equal(f->log.order[1], 'b');
    assert_int_equal(f->log.order[2], 'c');
    /* Stopped: its event is off the loop; disposing again is a no-op. */
    assert_int_equal(event_base_loop(f->base, EVLOOP_NONBLOCK), 1);
    reaper_dispose(&f->r);
}

/* The owner style: an owner sweeps its own dead list, its node queued
 * once however many objects died in the turn. */
struct owner {
    struct reap_node reap;
    struct list dead;
    struct log *log;
    int sweeps;
};

struct item {
    struct list link;
    int id;
};

static void owner_sweep(struct reap_node *n)
{
    struct owner *w = LIST_ELEM(n, struct owner, reap);

    w->sweeps++;
    while (!LIST_EMPTY(&w->dead)) {
        struct item *it = LIST_ELEM(w->dead.next, struct item, link);
        list_del(&it->link);
        w->log->order[w->log->n++] = it->id;
        free(it);
    }
}

static void test_owner_sweeps_once(void **state)
{
    struct fixture *f = *state;
    struct owner w;

    memset(&w, 0, sizeof(w));
    LIST_INIT(&w.dead);
    w.log = &f->log;
    for (int i = 0; i < 3; i++) {
        struct item *it = calloc(1, sizeof(*it));
        assert_non_null(it);
        it->id = i;
        list_append(&w.dead, &it->link);
        reaper_defer(&f->r, &w.reap, owner_sweep);
    }
    assert_int_equal(f->log.n, 0);
    run_until(f, 3);
    assert_int_equal(w.sweeps, 1);
    assert_int_equal(f->log.order[2], 2);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_freed_on_next_turn),         T(test_defer_does_not_run_now),
        T(test_twice_is_once_in_order),     T(test_cancel),
        T(test_queued_while_running_waits), T(test_zeroed),
        T(test_dispose_frees_the_rest),     T(test_owner_sweeps_once),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
