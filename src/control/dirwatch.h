#ifndef STRAIT_CONTROL_DIRWATCH_H
#define STRAIT_CONTROL_DIRWATCH_H

#include <stddef.h>
#include <stdint.h>

struct event_base;

/*
 * Watches one directory with inotify and reports changes to its files,
 * coalesced: a burst of writes (an editor's save, a kubectl-style atomic
 * swap) becomes one call after the directory has been quiet for a moment.
 *
 * A call comes only once the directory holds still: no file of it is
 * still open for writing (created or written and not yet closed), and
 * every file's size and mtime are the same as one quiet period before;
 * a writer that keeps a file open is waited for up to 50 quiet periods.
 * Names starting with '.' are editors' temporaries and ignored, except
 * Kubernetes' "..data" symlink, which the kubelet swaps to publish a new
 * ConfigMap or Secret. Symlinked files and directories are followed: the
 * directories they point into are watched too (and a chmod, IN_ATTRIB,
 * is a change), as are subdirectories (one level: a namespace's files).
 *
 * A watcher owns exactly one inotify descriptor and one watch for its
 * whole life, however often it fires. When the directory is missing or
 * the watch fails, it retries with jittered exponential backoff (from
 * 100 ms up to 30 s) and fires once it succeeds, so a directory created
 * later is picked up.
 */
struct dirwatch;

typedef void (*dirwatch_fn)(void *arg);

/* dirwatch_new() starts watching path on base's loop (main thread). NULL
 * when no inotify descriptor can be had (errno set). */
struct dirwatch *dirwatch_new(struct event_base *base, const char *path,
                              uint64_t quiet_ms, dirwatch_fn fn, void *arg);

void dirwatch_free(struct dirwatch *w);

/* For tests and metrics: watches added over the watcher's life (1 unless
 * the directory went away and came back) and calls made. */
unsigned dirwatch_watches_added(const struct dirwatch *w);
unsigned dirwatch_fired(const struct dirwatch *w);

/* dirwatch_dirs_watched() is how many other directories are watched
 * (subdirectories, symlink targets; at most 64), *over how many more
 * were found beyond that limit. */
size_t dirwatch_dirs_watched(const struct dirwatch *w, size_t *over);

#endif
