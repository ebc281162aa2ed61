#ifndef STRAIT_EVENT_REAP_T_H
#define STRAIT_EVENT_REAP_T_H

#include <event2/event_struct.h>

#include "core/list.h"

/* The reaper types, for structs that embed them; the API is
 * event/reap.h. */
struct reap_node;

typedef void (*reap_fn)(struct reap_node *n);

struct reap_node {
    struct list link; /* in the reaper's queue; self or zero: not queued */
    reap_fn fn;
};

struct reaper {
    struct event ev;
    struct list queue;
    struct event_base *base; /* NULL: never initialised or disposed */
};

#endif
