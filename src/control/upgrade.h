#ifndef STRAIT_CONTROL_UPGRADE_H
#define STRAIT_CONTROL_UPGRADE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/addr.h"

struct event_base;
struct sock_pool;

/*
 * Binary upgrade: the running strait (the old process) starts a new
 * executable as its child and hands it every listening socket over a unix
 * socket pair (SOCK_SEQPACKET, SCM_RIGHTS); once the new process serves,
 * the old one tells systemd the new MAINPID= and drains. Adopting the
 * very sockets, one per worker per listener (SO_REUSEPORT), keeps the
 * connections queued in their accept queues: nothing is refused or reset
 * (Envoy's hot restart passes them by worker index the same way, HAProxy's
 * _getsocks in batches with acknowledgements).
 *
 * The exchange, one message per datagram (u16/u32 big-endian):
 *
 *   old -> new  'H' u8 version, u32 pid, u32 workers, u32 sockets
 *   new -> old  'G' (go: the worker counts match) or 'X' text (refused)
 *   old -> new  'F' u16 n, n x (u8 kind, u16 index, u8 len, len bytes of
 *               sockaddr) with the n descriptors (at most
 *               UPGRADE_BATCH_MAX) in SCM_RIGHTS
 *   new -> old  'A' u16 n (received; the next batch may come)
 *   old -> new  'E' (that was all)
 *   new -> old  'R' u32 pid (every worker serves) or 'X' text (failed)
 *   old -> new  'K' (systemd told; the old process drains)
 *
 * and 'Z' u32 errno from the child when execve() itself failed. A worker
 * count that differs is refused: a process with fewer workers would leave
 * the surplus sockets' queued connections to be reset when the old
 * process closes them (Envoy's caveat), and one with more would be
 * uneven; a restart changes it.
 */
#define UPGRADE_VERSION 1
#define UPGRADE_BATCH_MAX 252 /* descriptors per message, as HAProxy sends */
#define UPGRADE_FD_ENV "STRAIT_UPGRADE_FD"
#define UPGRADE_FD 3 /* the descriptor the new process finds it on */
#define UPGRADE_MSG_MAX (3 + UPGRADE_BATCH_MAX * (4 + 128))
#define UPGRADE_TEXT_MAX 2048

/* One socket as the exchange names it: sock_pool.h's kind, the worker
 * index (0 but for a listener's), the address as configured. */
struct upgrade_rec {
    int kind;
    int index;
    struct addr addr;
};

/* upgrade_encode_fds() writes an 'F' message for n records (1 to
 * UPGRADE_BATCH_MAX) into out; its length, or 0 when it does not fit. */
size_t upgrade_encode_fds(const struct upgrade_rec *r, size_t n, uint8_t *out,
                          size_t cap);

/* upgrade_parse_fds() reads an 'F' message into out (max entries): 0
 * with *count, or -1 with a static reason in *why. */
int upgrade_parse_fds(const uint8_t *p, size_t n, struct upgrade_rec *out,
                      size_t max, size_t *count, const char **why);

/* ---- the old process ---------------------------------------------------- */

struct upgrade_fd {
    struct upgrade_rec rec;
    int fd; /* not owned: upgrade_start() works on a duplicate */
};

struct upgrade_conf {
    const char *binary;      /* absolute path */
    const char *config_path; /* passed as run -c */
    int nworkers;
    uint64_t timeout_ms;
    const struct upgrade_fd *fds;
    size_t nfds;
};

struct upgrade_hooks {
    /* The new process (pid) serves on every socket; MAINPID is for the
     * caller to send. */
    void (*ready)(void *arg, pid_t pid);
    /* It failed or did not serve in time, and is gone (reaped); why is
     * the reason. The old process keeps serving as before. */
    void (*failed)(void *arg, const char *why);
    void *arg;
};

struct upgrade;

/*
 * upgrade_start() forks and executes conf->binary ("run -c CONFIG", with
 * UPGRADE_FD_ENV set and WATCHDOG_PID set to the child when it was set)
 * and runs the exchange on base. Exactly one hook runs, later, from the
 * loop. NULL with an allocated message in *err when nothing could start.
 * Never free u from its hooks.
 */
struct upgrade *upgrade_start(struct event_base *base,
                              const struct upgrade_conf *conf,
                              const struct upgrade_hooks *hooks, char **err);

/* upgrade_pid() is the new process's pid. */
pid_t upgrade_pid(const struct upgrade *u);

/* upgrade_finished() is true once a hook ran. */
int upgrade_finished(const struct upgrade *u);

/* upgrade_free() stops an exchange still running (the child is killed
 * and reaped); a child that serves is left alone. NULL: no-op. */
void upgrade_free(struct upgrade *u);

/* ---- the new process ---------------------------------------------------- */

/* upgrade_child_fd() is the descriptor named by UPGRADE_FD_ENV (the
 * variable is removed, so a later upgrade does not inherit it), or -1
 * when this process was not started by an upgrade. */
int upgrade_child_fd(void);

/*
 * upgrade_child_receive() takes every socket the old process hands over
 * into pool (blocking, each message within timeout_ms). nworkers is this
 * process's count: a different one is refused, and the old one told why.
 * 0 with *parent set, or -1 with an allocated message in *err.
 */
int upgrade_child_receive(int fd, int nworkers, uint64_t timeout_ms,
                          struct sock_pool *pool, pid_t *parent, char **err);

/* upgrade_child_fail() tells the old process why this one gives up. */
void upgrade_child_fail(int fd, const char *why);

/* upgrade_child_ready() tells it this process serves; 0 or -1. */
int upgrade_child_ready(int fd);

/* upgrade_child_done() reads the old process's 'K' (fd non-blocking): 1
 * when it came, 0 when nothing is there yet, -1 at end of file or on
 * anything else (the old process is gone: this one goes on). */
int upgrade_child_done(int fd);

#endif
