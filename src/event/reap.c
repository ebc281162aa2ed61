#include "config.h"

#include <event2/event.h>
#include <string.h>

#include "event/reap.h"

int reap_node_queued(const struct reap_node *n)
{
    return n->link.next != NULL && n->link.next != &n->link;
}

void reaper_cancel(struct reap_node *n)
{
    if (reap_node_queued(n))
        list_del(&n->link);
}

/* Runs the nodes queued before this turn began. What their fns queue goes
 * into r->queue and waits for the next run. */
static void reaper_run(struct reaper *r)
{
    struct list now;

    if (LIST_EMPTY(&r->queue))
        return;
    /* Move the whole queue to a local head. */
    now.next = r->queue.next;
    now.prev = r->queue.prev;
    now.next->prev = &now;
    now.prev->next = &now;
    LIST_INIT(&r->queue);
    while (!LIST_EMPTY(&now)) {
        struct reap_node *n = LIST_ELEM(now.next, struct reap_node, link);
        list_del(&n->link); /* not queued any more: fn may queue it again */
        n->fn(n);
    }
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    reaper_run(arg);
}

void reaper_init(struct reaper *r, struct event_base *base)
{
    memset(r, 0, sizeof(*r));
    LIST_INIT(&r->queue);
    r->base = base;
    event_assign(&r->ev, base, -1, 0, on_reap, r);
}

void reaper_defer(struct reaper *r, struct reap_node *n, reap_fn fn)
{
    if (reap_node_queued(n))
        return;
    n->fn = fn;
    list_append(&r->queue, &n->link);
    /* Activating an active event changes nothing: one run per turn. */
    event_active(&r->ev, EV_TIMEOUT, 0);
}

void reaper_dispose(struct reaper *r)
{
    if (r->base == NULL)
        return;
    while (!LIST_EMPTY(&r->queue))
        reaper_run(r);
    event_del(&r->ev);
    r->base = NULL;
}
