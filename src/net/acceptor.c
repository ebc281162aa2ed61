#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "event/timer.h"
#include "net/acceptor.h"

#define ACCEPT_BATCH 64

int accept_error_pauses(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct acceptor *a = arg;

    (void)what;
    for (int i = 0; i < ACCEPT_BATCH && a->ev != NULL; i++) {
        struct sockaddr_storage peer;
        socklen_t len = sizeof(peer);
        int fd = accept4(lfd, (struct sockaddr *)&peer, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd >= 0) {
            a->fn(a->arg, fd, &peer, len);
            continue;
        }
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

    if (a->ev != NULL)
        event_add(a->ev, NULL);
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
