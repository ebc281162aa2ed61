/*
 * Access-log lines from workers to a writer thread. See logsink.h.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/log.h"
#include "event/logsink.h"
#include "event/timer.h"

/* How long lsink_free() waits for the writer to finish. */
#define LSINK_EXIT_WAIT_S 5

struct lsink_chunk {
    struct lsink_chunk *next;
    size_t n;
    uint64_t lines;
    char data[LSINK_CHUNK];
};

struct lsink {
    char *path; /* NULL: fd 2 */
    int fd;
    int is_pipe; /* writes of at most PIPE_BUF bytes */
    size_t max_pending;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the writer: work, reopen or stop */
    pthread_cond_t idle; /* lsink_flush_wait(): the queue is written */
    /* Under lock. */
    struct lsink_chunk *head, *tail;
    size_t pending;
    int writing; /* the writer holds chunks taken off the queue */
    int reopen;
    int stop;
    /* Counters: written by whoever counts, read with relaxed loads. */
    uint64_t written, dropped, write_errors, reopens;
};

static void count(uint64_t *c, uint64_t n)
{
    __atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

static int open_path(const char *path, char **err)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);

    if (fd < 0)
        err_set(err, "access log %s: %s", path, strerror(errno));
    return fd;
}

static int fd_is_pipe(int fd)
{
    struct stat st;

    return fstat(fd, &st) == 0 &&
           (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

/* Writes n bytes of whole lines; on a pipe in pieces of at most PIPE_BUF
 * bytes cut at line ends (a longer line goes alone). */
static void write_all(struct lsink *s, const char *p, size_t n)
{
    while (n > 0) {
        size_t len = n;
        ssize_t w;

        if (s->is_pipe && len > PIPE_BUF) {
            const char *cut = NULL;
            for (size_t i = PIPE_BUF; i > 0; i--)
                if (p[i - 1] == '\n') {
                    cut = p + i;
                    break;
                }
            if (cut == NULL) {
                const char *nl = memchr(p, '\n', n);
                cut = nl ? nl + 1 : p + n;
            }
            len = (size_t)(cut - p);
        }
        w = write(s->fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            count(&s->write_errors, 1);
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void do_reopen(struct lsink *s)
{
    char *err = NULL;
    int fd;

    if (s->path == NULL)
        return;
    fd = open_path(s->path, &err);
    if (fd < 0) {
        log_warn("%s; still writing to the old file", err);
        free(err);
        return;
    }
    close(s->fd);
    s->fd = fd;
    s->is_pipe = fd_is_pipe(fd);
    count(&s->reopens, 1);
    log_info("access log %s reopened", s->path);
}

/* Frees a chain of chunks: what a cancelled writer held (its cleanup
 * handler) and what was still queued when the sink is freed. */
static void free_chain(struct lsink_chunk *c)
{
    while (c != NULL) {
        struct lsink_chunk *next = c->next;

        free(c);
        c = next;
    }
}

static void free_held(void *arg)
{
    free_chain(*(struct lsink_chunk **)arg);
}

static void *writer(void *arg)
{
    struct lsink *s = arg;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        struct lsink_chunk *c;
        int reopen;

        while (s->head == NULL && !s->reopen && !s->stop)
            pthread_cond_wait(&s->wake, &s->lock);
        c = s->head;
        s->head = s->tail = NULL;
        reopen = s->reopen;
        s->reopen = 0;
        if (c == NULL && !reopen && s->stop)
            break;
        s->writing = 1;
        pthread_mutex_unlock(&s->lock);
        if (reopen)
            do_reopen(s);
        /* Cancelled only inside write(2) (lsink_free() on a stuck
         * writer): the chain it holds is freed by free_held(). */
        pthread_cleanup_push(free_held, &c);
        while (c != NULL) {
            struct lsink_chunk *next = c->next;
            size_t n = c->n;

            write_all(s, c->data, c->n);
            count(&s->written, c->lines);
            free(c);
            c = next;
            pthread_mutex_lock(&s->lock);
            s->pending -= n;
            pthread_mutex_unlock(&s->lock);
        }
        pthread_cleanup_pop(0);
        pthread_mutex_lock(&s->lock);
        s->writing = 0;
        if (s->head == NULL)
            pthread_cond_broadcast(&s->idle);
    }
    pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

struct lsink *lsink_new(const char *path, size_t max_pending, char **err)
{
    struct lsink *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    s->fd = 2;
    s->max_pending = max_pending;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (path != NULL && path[0] != '\0') {
        s->path = strdup(path);
        if (s->path == NULL) {
            err_set(err, "out of memory");
            goto fail;
        }
        s->fd = open_path(path, err);
        if (s->fd < 0)
            goto fail;
    }
    s->is_pipe = fd_is_pipe(s->fd);
    if (pthread_create(&s->thread, NULL, writer, s) != 0) {
        err_set(err, "cannot start the access log writer");
        goto fail;
    }
    return s;
fail:
    if (s->fd > 2)
        close(s->fd);
    free(s->path);
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return NULL;
}

void lsink_free(struct lsink *s)
{
    struct timespec deadline;

    if (s == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    /* What is pending gets LSINK_EXIT_WAIT_S to be written: a writer
     * stuck on a full pipe nobody reads (or a hung disk) must not keep
     * the process from exiting. It never holds the lock while it
     * writes, so cancelling it there leaves the lock free. */
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += LSINK_EXIT_WAIT_S;
    if (pthread_timedjoin_np(s->thread, NULL, &deadline) != 0) {
        size_t left;

        pthread_mutex_lock(&s->lock);
        left = s->pending;
        pthread_mutex_unlock(&s->lock);
        log_warn("access log: the writer is stuck; %zu byte(s) not written",
                 left);
        pthread_cancel(s->thread);
        pthread_join(s->thread, NULL);
    }
    free_chain(s->head);
    if (s->fd > 2)
        close(s->fd);
    free(s->path);
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void lsink_reopen(struct lsink *s)
{
    pthread_mutex_lock(&s->lock);
    s->reopen = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
}

void lsink_stats(struct lsink *s, struct lsink_stats *out)
{
    out->written = __atomic_load_n(&s->written, __ATOMIC_RELAXED);
    out->dropped = __atomic_load_n(&s->dropped, __ATOMIC_RELAXED);
    out->write_errors = __atomic_load_n(&s->write_errors, __ATOMIC_RELAXED);
    out->reopens = __atomic_load_n(&s->reopens, __ATOMIC_RELAXED);
    pthread_mutex_lock(&s->lock);
    out->pending = s->pending;
    pthread_mutex_unlock(&s->lock);
}

void lsink_flush_wait(struct lsink *s)
{
    pthread_mutex_lock(&s->lock);
    while (s->head != NULL || s->writing)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

/* Hands c to the writer, or drops it (counted) when the queue is full. */
static void hand_over(struct lsink *s, struct lsink_chunk *c)
{
    int drop;

    c->next = NULL;
    pthread_mutex_lock(&s->lock);
    drop = s->pending + c->n > s->max_pending;
    if (!drop) {
        if (s->tail != NULL)
            s->tail->next = c;
        else
            s->head = c;
        s->tail = c;
        s->pending += c->n;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->lock);
    if (drop) {
        count(&s->dropped, c->lines);
        free(c);
    }
}

static void buf_hand_over(struct lsink_buf *b)
{
    struct lsink_chunk *c = b->cur;

    b->cur = NULL;
    if (c != NULL && c->n > 0)
        hand_over(b->sink, c);
    else
        free(c);
}

static void on_flush(void *arg)
{
    buf_hand_over(arg);
}

void lsink_buf_init(struct lsink_buf *b, struct lsink *s,
                    struct event_base *base)
{
    b->sink = s;
    b->cur = NULL;
    timer_init(&b->flush, base, on_flush, b);
}

void lsink_buf_dispose(struct lsink_buf *b)
{
    timer_dispose(&b->flush);
    if (b->sink != NULL)
        buf_hand_over(b);
    b->sink = NULL;
}

void lsink_buf_line(struct lsink_buf *b, const char *p, size_t n)
{
    int nl = n > 0 && p[n - 1] == '\n';
    size_t need;

    if (nl)
        n--;
    if (n > LSINK_CHUNK - 1)
        n = LSINK_CHUNK - 1;
    need = n + 1;
    if (b->cur != NULL && b->cur->n + need > LSINK_CHUNK)
        buf_hand_over(b);
    if (b->cur == NULL) {
        b->cur = malloc(sizeof(*b->cur));
        if (b->cur == NULL) {
            count(&b->sink->dropped, 1);
            return;
        }
        b->cur->n = 0;
        b->cur->lines = 0;
    }
    memcpy(b->cur->data + b->cur->n, p, n);
    b->cur->data[b->cur->n + n] = '\n';
    b->cur->n += need;
    b->cur->lines++;
    if (!timer_armed(&b->flush))
        timer_defer(&b->flush);
}
