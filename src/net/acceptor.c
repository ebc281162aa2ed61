#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/stats.h"
#include "event/timer.h"
#include "net/acceptor.h"
#include "net/listener.h"
#include "net/overload.h"

#define ACCEPT_BATCH 64

int accept_error_pauses(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

/* Whether verdict v holds accepting back (else a connection over a
 * limit is accepted and closed). */
static int holds_back(const struct acceptor *a, enum cx_verdict v)
{
    return v == CX_OVER_MEMORY ||
           (v != CX_OK &&
            __atomic_load_n(&a->cx->action, __ATOMIC_RELAXED) == CX_PAUSE);
}

static void pause_for_limit(struct acceptor *a, enum cx_verdict v)
{
    if (v == CX_OVER_MEMORY) {
        STAT_ADD(a->ctr, cx_overload_paused, 1);
        log_limited(&a->limit_log, ACCEPT_LOG_MS, LOG_WARN,
                    "listener %s: memory overload: not accepting new "
                    "connections",
                    a->name);
    } else {
        STAT_ADD(a->ctr, cx_limit_paused, 1);
        log_limited(&a->limit_log, ACCEPT_LOG_MS, LOG_WARN,
                    "listener %s: %s connection limit reached; not accepting "
                    "until a connection closes",
                    a->name, v == CX_OVER_GLOBAL ? "global" : "listener");
    }
    a->limited = 1;
    event_del(a->ev);
    timer_arm(&a->resume, ACCEPT_LIMIT_POLL_MS);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct acceptor *a = arg;

    (void)what;
    for (int i = 0; i < ACCEPT_BATCH && a->ev != NULL; i++) {
        struct sockaddr_storage peer;
        socklen_t len = sizeof(peer);
        enum cx_verdict v = CX_OK;
        int fd;

        if (a->cx != NULL) {
            v = cx_take(a->cx);
            if (holds_back(a, v)) {
                pause_for_limit(a, v);
                break;
            }
        }
        fd = accept4(lfd, (struct sockaddr *)&peer, &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0 && v != CX_OK) {
            /* The close action: over the limit, accepted and closed. */
            close(fd);
            if (v == CX_OVER_GLOBAL)
                STAT_ADD(a->ctr, global_cx_overflow, 1);
            else
                STAT_ADD(a->ctr, cx_overflow, 1);
            log_limited(&a->limit_log, ACCEPT_LOG_MS, LOG_WARN,
                        "listener %s: %s connection limit reached; closing "
                        "new connections",
                        a->name, v == CX_OVER_GLOBAL ? "global" : "listener");
            continue;
        }
        if (fd >= 0) {
            a->fn(a->arg, fd, &peer, len);
            continue;
        }
        if (v == CX_OK && a->cx != NULL)
            cx_release(a->cx);
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (accept_error_pauses(errno)) {
            /* Connections wait in the backlog while we pause. */
            log_limited(&a->pause_log, ACCEPT_LOG_MS, LOG_WARN,
                        "listener %s: accept: %s; pausing %d ms", a->name,
                        strerror(errno), ACCEPT_PAUSE_MS);
            event_del(a->ev);
            timer_arm(&a->resume, ACCEPT_PAUSE_MS);
        }
        break;
    }
}

static void on_resume(void *arg)
{
    struct acceptor *a = arg;

    if (a->ev == NULL)
        return;
    /* Held back by a limit: look again soon, without waking on the
     * listening socket meanwhile. */
    if (a->limited && holds_back(a, cx_full(a->cx))) {
        timer_arm(&a->resume, ACCEPT_LIMIT_POLL_MS);
        return;
    }
    a->limited = 0;
    event_add(a->ev, NULL);
}

void acceptor_limit(struct acceptor *a, struct cx_limit *cx,
                    struct listener_counters *ctr)
{
    a->cx = cx;
    a->ctr = ctr;
}

int acceptor_start(struct acceptor *a, struct event_base *base, int fd,
                   const char *name, acceptor_fn fn, void *arg)
{
    memset(a, 0, sizeof(*a));
    a->name = name;
    a->fn = fn;
    a->arg = arg;
    timer_init(&a->resume, base, on_resume, a);
    a->ev = event_new(base, fd, EV_READ | EV_PERSIST, on_accept, a);
    if (a->ev == NULL || event_add(a->ev, NULL) < 0) {
        acceptor_stop(a);
        return -1;
    }
    return 0;
}

void acceptor_stop(struct acceptor *a)
{
    if (a->ev != NULL)
        event_free(a->ev);
    a->ev = NULL;
    timer_dispose(&a->resume);
}
