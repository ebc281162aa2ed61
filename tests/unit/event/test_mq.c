/*
 * Unit tests for src/event/mq.c: messages posted from many threads run
 * exactly once, on the owner's loop, in each poster's order.
 */
#include "config.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "event/mq.h"

#define NTHREADS 4
#define NPOSTS 10000
/* Bounded wait for the loop to catch up: a hang becomes a failure. */
#define DEADLINE_SEC 30

struct fixture {
    struct event_base *base;
    struct mq *q;
    struct event *tick;
};

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    const struct timeval tv = {0, 50 * 1000};

    if (f == NULL)
        return -1;
    f->base = event_base_new();
    if (f->base == NULL)
        goto fail;
    f->q = mq_new(f->base);
    if (f->q == NULL)
        goto fail;
    /* A periodic timer bounds each EVLOOP_ONCE turn, so a lost wake-up
     * shows up as a deadline failure instead of a hang. */
    f->tick = event_new(f->base, -1, EV_PERSIST, on_tick, NULL);
    if (f->tick == NULL || event_add(f->tick, &tv) < 0)
        goto fail;
    *state = f;
    return 0;
fail:
    if (f->tick != NULL)
        event_free(f->tick);
    mq_free(f->q);
    if (f->base != NULL)
        event_base_free(f->base);
    free(f);
    return -1;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    event_free(f->tick);
    mq_free(f->q);
    event_base_free(f->base);
    free(f);
    return 0;
}

static time_t now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec;
}

/* run_until() turns the loop until *count reaches want or the deadline
 * passes. */
static void run_until(struct fixture *f, const int *count, int want)
{
    time_t end = now_sec() + DEADLINE_SEC;

    while (__atomic_load_n(count, __ATOMIC_ACQUIRE) < want) {
        if (now_sec() > end)
            fail_msg("deadline: %d of %d messages ran", *count, want);
        assert_true(event_base_loop(f->base, EVLOOP_ONCE) >= 0);
    }
}

/* Many posters. */
struct stress;

struct record {
    struct stress *st;
    int thread;
    int seq;
    int runs;
};

struct stress {
    pthread_t owner;
    struct mq *q;
    struct record *recs; /* NTHREADS * NPOSTS */
    int next[NTHREADS];
    int ran;
    int wrong_thread;
    int out_of_order;
};

struct poster {
    struct stress *st;
    int id;
};

static void stress_cb(void *arg)
{
    struct record *r = arg;
    struct stress *st = r->st;

    if (!pthread_equal(pthread_self(), st->owner))
        st->wrong_thread++;
    if (r->seq != st->next[r->thread])
        st->out_of_order++;
    st->next[r->thread] = r->seq + 1;
    r->runs++;
    __atomic_add_fetch(&st->ran, 1, __ATOMIC_RELEASE);
}

static void *poster_main(void *arg)
{
    struct poster *p = arg;

    for (int i = 0; i < NPOSTS; i++) {
        struct record *r = &p->st->recs[p->id * NPOSTS + i];
        if (mq_post(p->st->q, stress_cb, r) < 0)
            return (void *)1;
    }
    return NULL;
}

static void test_many_threads(void **state)
{
    struct fixture *f = *state;
    struct stress st;
    struct poster posters[NTHREADS];
    pthread_t th[NTHREADS];

    memset(&st, 0, sizeof(st));
    st.owner = pthread_self();
    st.q = f->q;
    st.recs = calloc(NTHREADS * NPOSTS, sizeof(*st.recs));
    assert_non_null(st.recs);
    for (int t = 0; t < NTHREADS; t++)
        for (int i = 0; i < NPOSTS; i++) {
            st.recs[t * NPOSTS + i].st = &st;
            st.recs[t * NPOSTS + i].thread = t;
            st.recs[t * NPOSTS + i].seq = i;
        }

    for (int t = 0; t < NTHREADS; t++) {
        posters[t].st = &st;
        posters[t].id = t;
        assert_int_equal(pthread_create(&th[t], NULL, poster_main, &posters[t]),
                         0);
    }
    /* The owner serves the queue while the others post. */
    run_until(f, &st.ran, NTHREADS * NPOSTS);
    for (int t = 0; t < NTHREADS; t++) {
        void *rc;
        pthread_join(th[t], &rc);
        assert_null(rc);
    }
    /* Nothing more arrives: every message ran exactly once. */
    mq_drain(f->q);
    assert_int_equal(st.ran, NTHREADS * NPOSTS);
    assert_int_equal(st.wrong_thread, 0);
    assert_int_equal(st.out_of_order, 0);
    for (int t = 0; t < NTHREADS; t++)
        assert_int_equal(st.next[t], NPOSTS);
    for (int i = 0; i < NTHREADS * NPOSTS; i++)
        assert_int_equal(st.recs[i].runs, 1);
    free(st.recs);
}

/* Ordered runs on one thread. */
struct order {
    int seen[8];
    int n;
};

struct order_msg {
    struct order *o;
    int v;
};

static void order_cb(void *arg)
{
    struct order_msg *m = arg;

    m->o->seen[m->o->n++] = m->v;
}

static void test_drain_runs_queued(void **state)
{
    struct fixture *f = *state;
    struct order o;
    struct order_msg m[3];

    memset(&o, 0, sizeof(o));
    for (int i = 0; i < 3; i++) {
        m[i].o = &o;
        m[i].v = 10 + i;
        assert_int_equal(mq_post(f->q, order_cb, &m[i]), 0);
    }
    /* Posting does not run anything. */
    assert_int_equal(o.n, 0);
    mq_drain(f->q);
    assert_int_equal(o.n, 3);
    assert_int_equal(o.seen[0], 10);
    assert_int_equal(o.seen[1], 11);
    assert_int_equal(o.seen[2], 12);
    /* A second drain finds nothing. */
    mq_drain(f->q);
    assert_int_equal(o.n, 3);
}

static void test_loop_runs_queued(void **state)
{
    struct fixture *f = *state;
    struct order o;
    struct order_msg m = {&o, 7};
    int ran = 0;

    memset(&o, 0, sizeof(o));
    assert_int_equal(mq_post(f->q, order_cb, &m), 0);
    while (o.n == 0 && ran++ < 100)
        assert_true(event_base_loop(f->base, EVLOOP_ONCE) >= 0);
    assert_int_equal(o.n, 1);
    assert_int_equal(o.seen[0], 7);
}

/* A message that posts to its own queue: the lock is not held while it
 * runs, and the new message runs on a later turn. */
struct repost {
    struct mq *q;
    int count;
    int limit;
};

static void repost_cb(void *arg)
{
    struct repost *r = arg;

    __atomic_add_fetch(&r->count, 1, __ATOMIC_RELEASE);
    if (r->count < r->limit)
        assert_int_equal(mq_post(r->q, repost_cb, r), 0);
}

static void test_post_from_callback(void **state)
{
    struct fixture *f = *state;
    struct repost r = {f->q, 0, 1000};

    assert_int_equal(mq_post(f->q, repost_cb, &r), 0);
    /* One drain runs only what was queued when it started. */
    mq_drain(f->q);
    assert_int_equal(r.count, 1);
    mq_drain(f->q);
    assert_int_equal(r.count, 2);
    /* The loop finishes the chain via the eventfd wake-ups. */
    run_until(f, &r.count, r.limit);
    mq_drain(f->q);
    assert_int_equal(r.count, r.limit);
}

static void never_cb(void *arg)
{
    int *ran = arg;

    (*ran)++;
}

/* mq_free() drops queued messages without running them and frees them
 * (the ASan build checks for leaks). */
static void test_free_with_queued(void **state)
{
    struct event_base *base = event_base_new();
    struct mq *q;
    int ran = 0;

    (void)state;
    assert_non_null(base);
    q = mq_new(base);
    assert_non_null(q);
    for (int i = 0; i < 100; i++)
        assert_int_equal(mq_post(q, never_cb, &ran), 0);
    mq_free(q);
    assert_int_equal(ran, 0);
    /* The loop no longer has the queue's event. */
    assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 1);
    assert_int_equal(ran, 0);
    event_base_free(base);
    mq_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_many_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain_runs_queued, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_loop_runs_queued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_post_from_callback, setup,
                                        teardown),
        cmocka_unit_test(test_free_with_queued),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
