/*
 * dict_bench: shared-dict incr throughput (ops/s), 2 threads, on one hot
 * key and on cold keys (100,000 of them, each thread its own order),
 * with strait's sharded dict and with every call serialised by one
 * process-wide mutex in front of it, as OpenResty's one lock per dict
 * does. Best of 3 runs of 2M increments per thread.
 *
 *   make -C build bench/micro/dict_bench && build/bench/micro/dict_bench
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "policy/lua_dict.h"

#define OPS 2000000L
#define COLD 100000
#define RUNS 3
#define THREADS 2

struct job {
    struct luadict *d;
    pthread_mutex_t *one; /* NULL: the dict's own shard locks only */
    int hot;
    unsigned seed;
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *run(void *arg)
{
    struct job *j = arg;
    char key[32];
    double out;
    int forcible;
    unsigned x = j->seed;

    for (long i = 0; i < OPS; i++) {
        size_t n = 3;
        if (j->hot) {
            memcpy(key, "hot", 3);
        } else {
            x = x * 1103515245u + 12345u;
            n = (size_t)snprintf(key, sizeof(key), "k%u", (x >> 8) % COLD);
        }
        if (j->one != NULL)
            pthread_mutex_lock(j->one);
        luadict_incr(j->d, key, n, 1, 1, 0, 0, 0, &out, &forcible);
        if (j->one != NULL)
            pthread_mutex_unlock(j->one);
    }
    return NULL;
}

static double bench(int hot, int one_lock)
{
    double best = 0;
    pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER;

    for (int r = 0; r < RUNS; r++) {
        struct luadict *d = luadict_new("bench", (size_t)64 << 20);
        struct job jobs[THREADS];
        pthread_t t[THREADS];
        double t0, dt;

        for (int i = 0; i < THREADS; i++) {
            jobs[i] = (struct job){d, one_lock ? &one : NULL, hot,
                                   (unsigned)(i * 7919 + 1)};
        }
        t0 = now_s();
        for (int i = 0; i < THREADS; i++)
            pthread_create(&t[i], NULL, run, &jobs[i]);
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
        dt = now_s() - t0;
        if ((double)(OPS * THREADS) / dt > best)
            best = (double)(OPS * THREADS) / dt;
        luadict_unref(d);
    }
    return best;
}

int main(void)
{
    double hs = bench(1, 0), h1 = bench(1, 1);
    double cs = bench(0, 0), c1 = bench(0, 1);

    printf("shared dict incr, %d threads, ops/s (best of %d)\n", THREADS, RUNS);
    printf("  hot key   sharded %10.0f   one lock %10.0f   x%.2f\n", hs, h1,
           hs / h1);
    printf("  cold keys sharded %10.0f   one lock %10.0f   x%.2f\n", cs, c1,
           cs / c1);
    return 0;
}
