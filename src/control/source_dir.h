#ifndef STRAIT_CONTROL_SOURCE_DIR_H
#define STRAIT_CONTROL_SOURCE_DIR_H

#include <stdint.h>

struct buf;
struct event_base;
struct resource_set;
struct analysis_node;

/*
 * The Istio resources of the configuration directory: loaded, validated
 * and analysed as one snapshot, reloaded when the directory changes
 * (inotify), on SIGHUP and on POST /reload. A snapshot with any error
 * never replaces the running one; the error is logged and kept for
 * /healthz/ready and /stats.
 */
struct source;

/* Resources of another source (etcd), loaded after dir's at every load
 * (so they take precedence): get() sets *v to the inputs in effect
 * (owned by the other source, valid until it runs again) and returns
 * their count. name is what messages call that source. */
struct res_input;
struct source_inputs {
    size_t (*get)(void *arg, const struct res_input **v);
    /* Runs on each loaded set before it is analysed: may leave resources
     * out of it (the MeshLinks' entries for hosts others own). NULL:
     * none. */
    void (*filter)(void *arg, struct resource_set *set);
    void *arg;
    const char *name;
    /* The process's stop flag (loop_start.stop); NULL: none. */
    const int *stop;
};

/* source_new() loads dir ("": none) and inputs (NULL: none) now and
 * watches dir (its namespace subdirectories
 * too), with default_ns for resources that name no namespace; NULL with every
 * problem in the allocated *err when the first snapshot is invalid (start
 * fails). Snapshots are analysed under outbound_mode (enum res_outbound_mode,
 * the bootstrap's outboundTrafficPolicy). on_change(arg) runs after a new
 * snapshot took effect. */
struct source *source_new(struct event_base *base, const char *dir,
                          const char *default_ns,
                          const struct source_inputs *inputs, uint64_t quiet_ms,
                          int outbound_mode, const struct analysis_node *node,
                          void (*on_change)(void *), void *arg, char **err);
void source_free(struct source *src);

/* source_set_node() makes node (copied; NULL: not known) the node the
 * snapshots are for (source_new takes the first): each snapshot that
 * takes effect logs, analyze style, what selects nothing on it (IST0127),
 * and source_json says for each resource whether it applies on it.
 * 0, or -1 when out of memory (then not known). */
int source_set_node(struct source *src, const struct analysis_node *node);

/* source_reload() reloads now, analysing under outbound_mode (-1: the
 * source's own), which is the source's from then on if the new snapshot
 * takes effect; 1 when it did, -1 when it was refused. on_change runs only
 * when notify is set. */
int source_reload(struct source *src, int outbound_mode, int notify);

/*
 * source_reload_async() is source_reload(src, -1, notify) with the
 * loading and checking on a builder thread, so the control thread serves
 * the admin API, readiness, signals and the sources' sockets while a
 * large set (100,000 etcd keys) loads: the inputs are copied now, the
 * filter and taking the result run on the control thread. done(arg, rc)
 * runs on the control thread when it ends: rc 1 when the set took effect
 * (on_change ran first), -1 when refused, 0 when it was stopped
 * (source_cancel()) or a load on the control thread (source_reload())
 * took effect meanwhile, so nothing changed. Returns 0, or -1 when a
 * load is running already or none can start (done never runs then).
 */
typedef void source_loaded_fn(void *arg, int rc);
int source_reload_async(struct source *src, int notify, source_loaded_fn *done,
                        void *arg);
/* source_cancel() stops the running load (if any) at its next input; its
 * done() runs with 0. */
void source_cancel(struct source *src);

/*
 * A new outboundTrafficPolicy, in two steps so that a reload that fails
 * later changes nothing: source_check_mode() analyses the snapshot in
 * effect under outbound_mode (0, or -1 with its errors in the allocated
 * *err: switching to REGISTRY_ONLY while routes go to undeclared hosts);
 * source_set_mode() makes it the mode later snapshots are analysed under.
 */
int source_check_mode(const struct source *src, int outbound_mode, char **err);
void source_set_mode(struct source *src, int outbound_mode);
int source_mode(const struct source *src);

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
 * file, whether it applies on the node and if not why) and the source's
 * state as a JSON object. */
void source_json(const struct source *src, struct buf *b);

#endif
