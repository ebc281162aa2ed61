#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control/dirwatch.h"
#include "core/log.h"
#include "event/timer.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 30000

/* Kubernetes ConfigMap and Secret volumes: the kubelet writes a new
 * timestamped directory and swaps this symlink to it. */
#define KUBE_DATA_LINK "..data"

/* What the main directory's watch asks for. IN_MODIFY and IN_ATTRIB too:
 * a file being written restarts the quiet time, and a chmod that fixes
 * a permission error is a change. */
#define DIR_MASK                                                               \
    (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE |    \
     IN_DELETE_SELF | IN_MOVE_SELF | IN_MODIFY | IN_ATTRIB | IN_ONLYDIR)
/* What the watch of a symlink's target directory asks for. */
#define LINK_MASK                                                              \
    (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE |    \
     IN_MODIFY | IN_ATTRIB)

/* The most files written at once that are tracked as open, and the most
 * subdirectories and symlink target directories watched. */
#define MAX_WRITING 256
#define MAX_LINK_WATCHES 64

/* How long to wait for files still being written before reading anyway,
 * in quiet periods (5 s with the default config.debounce of 100 ms). */
#define MAX_QUIET_ROUNDS 50

struct link_watch {
    int wd;
    char *path; /* the directory watched */
};

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
    /* Files of the directory opened for writing and not yet closed
     * (IN_CREATE or IN_MODIFY, then no IN_CLOSE_WRITE): a reload waits
     * for them. */
    char *writing[MAX_WRITING];
    size_t nwriting;
    /* The directory's fingerprint at the last quiet check: a reload
     * happens once it holds still for a whole quiet period. */
    uint64_t fp;
    unsigned rounds; /* quiet checks since the last change */
    struct link_watch links[MAX_LINK_WATCHES];
    size_t nlinks;
    size_t links_over; /* directories found beyond MAX_LINK_WATCHES */
};

static void writing_add(struct dirwatch *w, const char *name)
{
    for (size_t i = 0; i < w->nwriting; i++)
        if (strcmp(w->writing[i], name) == 0)
            return;
    if (w->nwriting < MAX_WRITING) {
        char *d = strdup(name);
        if (d != NULL)
            w->writing[w->nwriting++] = d;
    }
}

static void writing_del(struct dirwatch *w, const char *name)
{
    for (size_t i = 0; i < w->nwriting; i++)
        if (strcmp(w->writing[i], name) == 0) {
            free(w->writing[i]);
            w->writing[i] = w->writing[--w->nwriting];
            return;
        }
}

static void writing_clear(struct dirwatch *w)
{
    for (size_t i = 0; i < w->nwriting; i++)
        free(w->writing[i]);
    w->nwriting = 0;
}

/* FNV-1a over bytes, folded into h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;

    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/*
 * fingerprint() sums up what a reload would read: each entry's name and
 * what stat() (following symlinks) says of its target, in readdir order
 * folded order-independently. Equal fingerprints a quiet period apart
 * mean nothing moved in between.
 */
static uint64_t fingerprint_dir(const char *path, int depth)
{
    DIR *d = opendir(path);
    struct dirent *e;
    uint64_t sum = 0;

    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL) {
        char *p = NULL;
        struct stat st;
        uint64_t h = 0xcbf29ce484222325ull;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (asprintf(&p, "%s/%s", path, e->d_name) < 0)
            continue;
        h = fnv(h, e->d_name, strlen(e->d_name));
        if (stat(p, &st) == 0) {
            h = fnv(h, &st.st_ino, sizeof(st.st_ino));
            h = fnv(h, &st.st_size, sizeof(st.st_size));
            h = fnv(h, &st.st_mtim, sizeof(st.st_mtim));
            h = fnv(h, &st.st_mode, sizeof(st.st_mode));
            /* A namespace subdirectory's files are read too. */
            if (depth == 0 && S_ISDIR(st.st_mode) && e->d_name[0] != '.')
                h += fingerprint_dir(p, 1);
        }
        free(p);
        sum += h;
    }
    closedir(d);
    return sum;
}

static uint64_t fingerprint(const struct dirwatch *w)
{
    return fingerprint_dir(w->path, 0);
}

static void links_clear(struct dirwatch *w)
{
    for (size_t i = 0; i < w->nlinks; i++) {
        if (w->links[i].wd >= 0)
            inotify_rm_watch(w->fd, w->links[i].wd);
        free(w->links[i].path);
    }
    w->nlinks = 0;
}

/*
 * refresh_links() watches the directory's subdirectories (resource_load
 * reads a namespace's files there) and the directories that its symlinks
 * point into (a file linked from elsewhere, the kubelet's ..data), so an
 * edit there is a change too; watches of directories no longer there or
 * pointed into are dropped. The watched directory itself needs none. At
 * most MAX_LINK_WATCHES are watched; a change beyond them is read at the
 * next change elsewhere, or on SIGHUP, with a warning.
 */
static void refresh_links(struct dirwatch *w)
{
    struct link_watch next[MAX_LINK_WATCHES];
    size_t n = 0, over = 0;
    char *self = realpath(w->path, NULL);
    DIR *d = self ? opendir(w->path) : NULL;
    struct dirent *e;

    while (d != NULL && (e = readdir(d)) != NULL) {
        char *p = NULL, *target, *dir;
        struct stat st;
        if (e->d_name[0] == '.' && strcmp(e->d_name, KUBE_DATA_LINK) != 0)
            continue;
        if (asprintf(&p, "%s/%s", w->path, e->d_name) < 0)
            continue;
        if (lstat(p, &st) < 0 ||
            !(S_ISLNK(st.st_mode) ||
              (S_ISDIR(st.st_mode) && e->d_name[0] != '.')) ||
            (target = realpath(p, NULL)) == NULL) {
            free(p);
            continue;
        }
        free(p);
        /* A subdirectory (its namespace's resources) is watched itself;
         * a symlink, the directory it points into. */
        if (stat(target, &st) == 0 && S_ISDIR(st.st_mode)) {
            dir = target;
        } else {
            char *slash = strrchr(target, '/');
            if (slash != NULL && slash != target)
                *slash = '\0';
            dir = target;
        }
        {
            int dup = strcmp(dir, self) == 0;
            for (size_t i = 0; i < n && !dup; i++)
                dup = strcmp(next[i].path, dir) == 0;
            if (dup) {
                free(dir);
                continue;
            }
        }
        if (n == MAX_LINK_WATCHES) {
            over++;
            free(dir);
            continue;
        }
        next[n].path = dir;
        next[n].wd = -1;
        n++;
    }
    if (d != NULL)
        closedir(d);
    free(self);
    if (over > 0 && over != w->links_over)
        log_warn("%s: %zu subdirectories or symlink targets beyond the %d "
                 "watched; changes there are read at the next other change "
                 "or SIGHUP",
                 w->path, over, MAX_LINK_WATCHES);
    w->links_over = over;
    /* inotify gives the same wd for a directory watched twice, so adding
     * the new set first and removing only what it no longer holds keeps
     * the watches of directories in both. */
    for (size_t i = 0; i < n; i++)
        next[i].wd = inotify_add_watch(w->fd, next[i].path, LINK_MASK);
    for (size_t i = 0; i < w->nlinks; i++) {
        int keep = 0;
        for (size_t k = 0; k < n && !keep; k++)
            keep = next[k].wd == w->links[i].wd;
        if (!keep && w->links[i].wd >= 0)
            inotify_rm_watch(w->fd, w->links[i].wd);
        free(w->links[i].path);
    }
    memcpy(w->links, next, n * sizeof(next[0]));
    w->nlinks = n;
}

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
    w->wd = inotify_add_watch(w->fd, w->path, DIR_MASK);
    if (w->wd < 0)
        return -1;
    w->added++;
    w->backoff_ms = BACKOFF_MIN_MS;
    refresh_links(w);
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

/*
 * The directory was quiet for a period. It is read only when nothing in
 * it is still open for writing and it held still since the last check
 * (size and mtime of every file), so a file written in steps with pauses
 * longer than the quiet time is read whole; after MAX_QUIET_ROUNDS checks
 * it is read anyway, with a warning.
 */
static void on_quiet(void *arg)
{
    struct dirwatch *w = arg;
    uint64_t fp = fingerprint(w);

    if ((w->nwriting > 0 || fp != w->fp) && ++w->rounds < MAX_QUIET_ROUNDS) {
        w->fp = fp;
        timer_arm(&w->quiet, w->quiet_ms);
        return;
    }
    if (w->rounds >= MAX_QUIET_ROUNDS)
        log_warn("%s: %zu file(s) still open for writing after %u quiet "
                 "periods; reading the directory as it is",
                 w->path, w->nwriting, w->rounds);
    w->fp = fp;
    w->rounds = 0;
    writing_clear(w);
    refresh_links(w);
    w->fired++;
    w->fn(w->arg);
}

/* What one event of the main directory says: 1 when it is a change. */
static int dir_event(struct dirwatch *w, const struct inotify_event *e)
{
    char *p = NULL;
    struct stat st;

    if (e->len == 0)
        return (e->mask & IN_ATTRIB) != 0; /* the directory's own mode */
    /* Dotfiles are editors' temporaries, except the kubelet's ..data. */
    if (e->name[0] == '.' && strcmp(e->name, KUBE_DATA_LINK) != 0)
        return 0;
    if (e->mask & (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE))
        writing_del(w, e->name);
    else if ((e->mask & (IN_CREATE | IN_MODIFY)) && !(e->mask & IN_ISDIR) &&
             asprintf(&p, "%s/%s", w->path, e->name) >= 0) {
        /* A regular file created or written is open until its close; a
         * symlink or a directory has no close to wait for. */
        if (lstat(p, &st) == 0 && S_ISREG(st.st_mode))
            writing_add(w, e->name);
        free(p);
    }
    return 1;
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
            if (e->wd != w->wd) {
                /* A symlink target's directory; one that went away is
                 * dropped at the next refresh. */
                if (!(e->mask & IN_IGNORED))
                    changed = 1;
            } else if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED))
                lost = 1;
            else if (dir_event(w, e))
                changed = 1;
            if (e->mask & IN_Q_OVERFLOW)
                changed = 1;
            p += sizeof(*e) + e->len;
        }
    }
    if (lost && w->wd >= 0) {
        /* The directory itself went away: the kernel dropped the watch. */
        inotify_rm_watch(w->fd, w->wd);
        w->wd = -1;
        links_clear(w);
        writing_clear(w);
        log_warn("%s disappeared; waiting for it to come back", w->path);
        schedule_retry(w);
        changed = 1;
    }
    if (changed) {
        w->rounds = 0;
        timer_arm(&w->quiet, w->quiet_ms); /* restart the quiet period */
    }
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
    if (w->path != NULL)
        w->fp = fingerprint(w);
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
    writing_clear(w);
    links_clear(w);
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

size_t dirwatch_dirs_watched(const struct dirwatch *w, size_t *over)
{
    if (over != NULL)
        *over = w->links_over;
    return w->nlinks;
}
