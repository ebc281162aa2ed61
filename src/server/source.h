#ifndef STRAIT_SERVER_SOURCE_H
#define STRAIT_SERVER_SOURCE_H

#include <stdint.h>

struct buf;
struct event_base;
struct resource_set;

/*
 * The Istio resources of the configuration directory: loaded, validated
 * and analysed as one snapshot, reloaded when the directory changes
 * (inotify), on SIGHUP and on POST /reload. A snapshot with any error
 * never replaces the running one; the error is logged and kept for
 * /healthz/ready and /stats.
 */
struct source;

/* source_new() loads dir now and watches it; NULL with every problem in
 * the allocated *err when the first snapshot is invalid (start fails).
 * on_change(arg) runs after a new snapshot took effect. */
struct source *source_new(struct event_base *base, const char *dir,
                          uint64_t quiet_ms, void (*on_change)(void *),
                          void *arg, char **err);
void source_free(struct source *src);

/* source_reload() reloads now; 1 when a new snapshot took effect, -1 when
 * the new one was refused. on_change runs only when notify is set. */
int source_reload(struct source *src, int notify);

const struct resource_set *source_current(const struct source *src);

struct source_status {
    uint64_t reloads_ok;
    uint64_t reloads_failed;
    const char *last_error; /* NULL after a good reload */
    unsigned watches_added;
    size_t resources;
};

void source_status(const struct source *src, struct source_status *out);

/* source_json() writes the snapshot's resources (kind, namespace, name,
 * file) and the source's state as a JSON object. */
void source_json(const struct source *src, struct buf *b);

#endif
