#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "control/dirwatch.h"
#include "core/log.h"
#include "event/timer.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 30000

struct dirwatch {
    struct event_base *base;
    char *path;
    int fd;
    int wd;
    uint64_t quiet_ms;
    uint64_t backoff_ms;
    struct event *io;
    struct timer quiet;
    struct timer retry;
    dirwatch_fn fn;
    void *arg;
    unsigned added;
    unsigned fired;
};

static void schedule_retry(struct dirwatch *w)
{
    uint32_t r = 0;
    uint64_t jitter;

    RAND_bytes((uint8_t *)&r, sizeof(r));
    /* Full jitter over [backoff/2, backoff]: many hosts whose shared
     * directory vanished do not come back in lockstep. */
    jitter = w->backoff_ms / 2 + r % (w->backoff_ms / 2 + 1);
    timer_arm(&w->retry, jitter);
    w->backoff_ms =
        w->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : w->backoff_ms * 2;
}

static int add_watch(struct dirwatch *w)
{
    w->wd = inotify_add_watch(w->fd, w->path,
                              IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM |
                                  IN_CREATE | IN_DELETE | IN_DELETE_SELF |
                                  IN_MOVE_SELF | IN_ONLYDIR);
    if (w->wd < 0)
        return -1;
    w->added++;
    w->backoff_ms = BACKOFF_MIN_MS;
    return 0;
}

static void on_retry(void *arg)
{
    struct dirwatch *w = arg;

    if (add_watch(w) < 0) {
        schedule_retry(w);
        return;
    }
    log_info("watching %s again", w->path);
    /* Whatever happened while nobody watched counts as a change. */
    timer_arm(&w->quiet, w->quiet_ms);
}

static void on_quiet(void *arg)
{
    struct dirwatch *w = arg;

    w->fired++;
    w->fn(w->arg);
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    struct dirwatch *w = arg;
    char buf[16 * 1024]
        __attribute__((aligned(__alignof__(struct inotify_event))));
    int lost = 0, changed = 0;

    (void)what;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *e = (const struct inotify_event *)p;
            if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED))
                lost = 1;
            else if (e->len == 0 || e->name[0] != '.')
                changed = 1; /* dotfiles are editors' temporaries */
            if (e->mask & IN_Q_OVERFLOW)
                changed = 1;
            p += sizeof(*e) + e->len;
        }
    }
    if (lost && w->wd >= 0) {
        /* The directory itself went away: the kernel dropped the watch. */
        inotify_rm_watch(w->fd, w->wd);
        w->wd = -1;
        log_warn("%s disappeared; waiting for it to come back", w->path);
        schedule_retry(w);
        changed = 1;
    }
    if (changed)
        timer_arm(&w->quiet, w->quiet_ms); /* restart the quiet period */
}

struct dirwatch *dirwatch_new(struct event_base *base, const char *path,
                              uint64_t quiet_ms, dirwatch_fn fn, void *arg)
{
    struct dirwatch *w = calloc(1, sizeof(*w));

    if (w == NULL)
        return NULL;
    w->base = base;
    w->fd = -1;
    w->wd = -1;
    w->quiet_ms = quiet_ms;
    w->backoff_ms = BACKOFF_MIN_MS;
    w->fn = fn;
    w->arg = arg;
    w->path = strdup(path);
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->path == NULL || w->fd < 0)
        goto fail;
    w->io = event_new(base, w->fd, EV_READ | EV_PERSIST, on_io, w);
    timer_init(&w->quiet, base, on_quiet, w);
    timer_init(&w->retry, base, on_retry, w);
    if (w->io == NULL || event_add(w->io, NULL) < 0)
        goto fail;
    if (add_watch(w) < 0) {
        log_warn("cannot watch %s: %s; retrying", path, strerror(errno));
        schedule_retry(w);
    }
    return w;
fail:
    dirwatch_free(w);
    return NULL;
}

void dirwatch_free(struct dirwatch *w)
{
    if (w == NULL)
        return;
    if (w->io != NULL)
        event_free(w->io);
    timer_dispose(&w->quiet);
    timer_dispose(&w->retry);
    if (w->fd >= 0)
        close(w->fd);
    free(w->path);
    free(w);
}

unsigned dirwatch_watches_added(const struct dirwatch *w)
{
    return w->added;
}

unsigned dirwatch_fired(const struct dirwatch *w)
{
    return w->fired;
}
