#ifndef STRAIT_CONTROL_LOOP_H
#define STRAIT_CONTROL_LOOP_H

#include <stdint.h>

struct bootstrap;
struct event_base;
struct ca_node;

/*
 * The control loop: the main thread's inputs (the bootstrap, the resource
 * source, the DNS and JWKS caches, the mesh identity), the snapshot they
 * compile into, the workers it is published to, and the admin API. Only
 * the main thread touches it.
 */
struct loop;
struct addr;
struct sock_pool;

/* How this process came to be: started afresh, or by a binary upgrade
 * (control/upgrade.h). */
struct loop_start {
    /* The executable this process runs, as an absolute path, for
     * upgrade.binary "" (NULL: unknown; upgrades then need the key). */
    const char *self_exe;
    /* Sockets the upgraded process handed over; the first snapshot and
     * the admin API adopt them. NULL: none. */
    struct sock_pool *inherited;
    /* The upgrade socket to the old process: told 'R' once every worker
     * serves, instead of READY=1 to systemd. -1: not an upgrade. */
    int parent_fd;
    /* Envoy's restart epoch: 0 for a process started by hand or by
     * systemd, one more than the old process's for a binary upgrade; and
     * the wall-clock second epoch 0 started (uptime_all_epochs). */
    int restart_epoch;
    int64_t epoch0_start_s;
    /* Set (atomically, from the signal handler) at the first SIGTERM or
     * SIGINT; outlives the loop. Code that runs long on the control
     * thread, a LuaPolicy's top-level code in a build, checks it and
     * ends, so the loop gets to the drain. NULL: none. */
    const int *stop;
};

/*
 * loop_new() takes ownership of bs (the bootstrap in effect), loads the
 * resources of config.dir, binds every listener and the admin API, and
 * starts the workers. ca_node: this node's PKI (its mesh certificate and
 * whether that is stored, for the admin API), or NULL without a CA; it
 * must outlive the loop. NULL with an allocated message in *err (e.g. an
 * address already in use), and *config_error set when the cause is
 * invalid configuration; the process should exit non-zero.
 */
struct loop *loop_new(struct event_base *base, struct bootstrap *bs,
                      const char *config_path, struct ca_node *ca_node,
                      const struct loop_start *start, int *config_error,
                      char **err);

/*
 * loop_upgrade() starts a binary upgrade (POST /upgrade, SIGUSR2):
 * upgrade.binary (or the executable this process runs) is started and
 * handed every listening socket; once it serves, systemd is told its
 * MAINPID and this process drains. 0 with the new pid in *pid (the
 * outcome shows in the admin's upgrade counters), or -1 with an
 * allocated reason in *why (draining, one running, cannot start).
 */
int loop_upgrade(struct loop *s, int *pid, char **why);

/* loop_handoff_add() names one more listening socket a binary upgrade
 * hands over (the CA's API): kind from net/sock_pool.h, a as
 * configured, fd owned by the caller and open while s lives. 0 or -1. */
int loop_handoff_add(struct loop *s, int kind, const struct addr *a, int fd);

/*
 * loop_rebuild() compiles a new snapshot from the inputs in effect (the
 * bootstrap in effect, never re-read; the resources, DNS answers and
 * JWKS key sets now) and publishes it: for resource, DNS, JWKS and
 * certificate changes. A failure is logged, counted as a rebuild failure
 * and changes nothing.
 */
void loop_rebuild(struct loop *s);

/* What loop_reload_bootstrap() did. */
enum loop_reload_result {
    LOOP_RELOADED = 0,        /* the new bootstrap is in effect */
    LOOP_RELOAD_FAILED = -1,  /* refused; the reason is the last error */
    LOOP_RELOAD_QUEUED = 1,   /* runs once the workers have switched */
    LOOP_RELOAD_DRAINING = 2, /* ignored: strait is draining */
};

/*
 * loop_reload_bootstrap() re-reads the bootstrap file (SIGHUP, POST
 * /reload), then rebuilds under it; a bad file is logged, counted as a
 * reload failure (server.reloads_failed, last_reload_error) and changes
 * nothing. Returns a LOOP_RELOAD_* result.
 *
 * Either request, made while the workers are still switching to the last
 * snapshot, is remembered and runs once they all have (LOOP_RELOAD_QUEUED;
 * its outcome shows in the counters).
 */
int loop_reload_bootstrap(struct loop *s);

/* loop_reopen_logs() reopens the access log file (SIGUSR1, after
 * logrotate moved it). */
void loop_reopen_logs(struct loop *s);

/* loop_drain() stops accepting, lets sessions finish, and ends the main
 * loop when they have or at the drain deadline. */
void loop_drain(struct loop *s, const char *why);

/* loop_free() stops the workers, closes everything and frees s. */
void loop_free(struct loop *s);

#endif
