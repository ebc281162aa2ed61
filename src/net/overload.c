#include "config.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "net/overload.h"

/*
 * A worker's memory check (memacct's callback on the root): measure, and
 * turn on at once what the thresholds call for. It never turns an action
 * off: that stays with the control loop, which applies the hysteresis and
 * logs each change.
 */
static void memory_check(void *arg)
{
    struct cx_limit *root = arg;
    struct overload_conf c;
    unsigned cur, next;

    c.limit = __atomic_load_n(&root->mem_limit, __ATOMIC_RELAXED);
    if (c.limit == 0)
        return;
    for (int a = 0; a < OVERLOAD_NACTIONS; a++)
        c.pct[a] = __atomic_load_n(&root->mem_pct[a], __ATOMIC_RELAXED);
    c.hysteresis = __atomic_load_n(&root->mem_hysteresis, __ATOMIC_RELAXED);
    cur = cx_overload(root);
    next = overload_eval(&c, overload_rss_bytes(), cur);
    if ((next & ~cur) == 0)
        return;
    __atomic_or_fetch(&root->overload, next & ~cur, __ATOMIC_RELAXED);
    if (next & OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_REQUESTS))
        memacct_set_refuse(&root->mem, 1);
}

struct cx_limit *cx_limit_new(struct cx_limit *parent)
{
    struct cx_limit *l = calloc(1, sizeof(*l));

    if (l == NULL)
        return NULL;
    l->refs = 1;
    l->action = CX_PAUSE;
    l->parent = parent != NULL ? cx_limit_ref(parent) : NULL;
    if (parent == NULL) {
        l->mem.check = memory_check;
        l->mem.arg = l;
    }
    return l;
}

struct cx_limit *cx_limit_ref(struct cx_limit *l)
{
    __atomic_add_fetch(&l->refs, 1, __ATOMIC_RELAXED);
    return l;
}

void cx_limit_unref(struct cx_limit *l)
{
    if (l == NULL || __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    cx_limit_unref(l->parent);
    free(l);
}

void cx_limit_set(struct cx_limit *l, int64_t max, enum cx_action action)
{
    __atomic_store_n(&l->max, max, __ATOMIC_RELAXED);
    __atomic_store_n(&l->action, (int)action, __ATOMIC_RELAXED);
}

void cx_set_overload(struct cx_limit *root, unsigned actions)
{
    __atomic_store_n(&root->overload, actions, __ATOMIC_RELAXED);
    /* Buffers that would grow past the limit are refused while requests
     * are: see memacct and hpipe_write(). */
    memacct_set_refuse(
        &root->mem,
        (actions & OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_REQUESTS)) != 0);
}

void cx_set_memory_conf(struct cx_limit *root, const struct overload_conf *c)
{
    int64_t step = (int64_t)(c->limit / 64);

    for (int a = 0; a < OVERLOAD_NACTIONS; a++)
        __atomic_store_n(&root->mem_pct[a], c->pct[a], __ATOMIC_RELAXED);
    __atomic_store_n(&root->mem_hysteresis, c->hysteresis, __ATOMIC_RELAXED);
    __atomic_store_n(&root->mem_limit, c->limit, __ATOMIC_RELAXED);
    if (step < 64 * 1024)
        step = 64 * 1024;
    memacct_set_step(&root->mem, c->limit > 0 ? step : 0);
}

int cx_tunnel_take(struct cx_limit *root, int64_t bytes, int64_t max)
{
    int64_t now;

    if (cx_overload(root) != 0)
        return -1;
    now = __atomic_add_fetch(&root->tunnel_bytes, bytes, __ATOMIC_RELAXED);
    if (max > 0 && now > max) {
        __atomic_sub_fetch(&root->tunnel_bytes, bytes, __ATOMIC_RELAXED);
        return -1;
    }
    memacct_take(&root->mem, (size_t)bytes, 0);
    return 0;
}

void cx_tunnel_give(struct cx_limit *root, int64_t bytes)
{
    __atomic_sub_fetch(&root->tunnel_bytes, bytes, __ATOMIC_RELAXED);
    memacct_give(&root->mem, (size_t)bytes);
}

/* Takes a slot of one counter: 0, or -1 when it is at its limit. The
 * add comes first, so two workers racing for the last slot cannot both
 * win; the loser gives it back. */
static int take_one(struct cx_limit *l)
{
    int64_t max = __atomic_load_n(&l->max, __ATOMIC_RELAXED);
    int64_t now = __atomic_add_fetch(&l->active, 1, __ATOMIC_RELAXED);

    if (max > 0 && now > max) {
        __atomic_sub_fetch(&l->active, 1, __ATOMIC_RELAXED);
        return -1;
    }
    return 0;
}

enum cx_verdict cx_take(struct cx_limit *l)
{
    struct cx_limit *root = cx_root(l);

    if (cx_overload(l) & OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_CONNECTIONS))
        return CX_OVER_MEMORY;
    if (l != root && take_one(l) < 0)
        return CX_OVER_LISTENER;
    if (take_one(root) < 0) {
        if (l != root)
            __atomic_sub_fetch(&l->active, 1, __ATOMIC_RELAXED);
        return CX_OVER_GLOBAL;
    }
    return CX_OK;
}

void cx_release(struct cx_limit *l)
{
    struct cx_limit *root = cx_root(l);

    if (l != root)
        __atomic_sub_fetch(&l->active, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&root->active, 1, __ATOMIC_RELAXED);
}

static int full_one(const struct cx_limit *l)
{
    int64_t max = __atomic_load_n(&l->max, __ATOMIC_RELAXED);

    return max > 0 && cx_active(l) >= max;
}

enum cx_verdict cx_full(const struct cx_limit *l)
{
    const struct cx_limit *root = l->parent != NULL ? l->parent : l;

    if (cx_overload(l) & OVERLOAD_BIT(OVERLOAD_STOP_ACCEPTING_CONNECTIONS))
        return CX_OVER_MEMORY;
    if (l != root && full_one(l))
        return CX_OVER_LISTENER;
    if (full_one(root))
        return CX_OVER_GLOBAL;
    return CX_OK;
}

unsigned overload_eval(const struct overload_conf *c, uint64_t used,
                       unsigned active)
{
    unsigned next = 0;

    if (c->limit == 0)
        return 0;
    for (int a = 0; a < OVERLOAD_NACTIONS; a++) {
        unsigned pct = c->pct[a];
        /* Compared in percent of the limit, scaled to avoid overflow:
         * used * 100 >= limit * pct, for limits up to 2^57 bytes. */
        unsigned __int128 u = (unsigned __int128)used * 100;
        unsigned __int128 on = (unsigned __int128)c->limit * pct;
        unsigned __int128 off = (unsigned __int128)c->limit *
                                (pct > c->hysteresis ? pct - c->hysteresis : 0);

        if (u >= on || ((active & OVERLOAD_BIT(a)) && u >= off))
            next |= OVERLOAD_BIT(a);
    }
    return next;
}

const char *overload_action_name(enum overload_action a)
{
    static const char *const names[OVERLOAD_NACTIONS] = {
        "stop_accepting_connections",
        "disable_http_keepalive",
        "stop_accepting_requests",
    };

    return a >= 0 && a < OVERLOAD_NACTIONS ? names[a] : "?";
}

uint64_t overload_rss_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    ssize_t n;
    unsigned long long size = 0, rss = 0;
    long page = sysconf(_SC_PAGESIZE);
    char *p, *end;

    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* "size resident shared text lib data dt", in pages. */
    size = strtoull(buf, &end, 10);
    (void)size;
    p = end;
    rss = strtoull(p, &end, 10);
    if (end == p || page <= 0)
        return 0;
    return (uint64_t)rss * (uint64_t)page;
}
