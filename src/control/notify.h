#ifndef STRAIT_CONTROL_NOTIFY_H
#define STRAIT_CONTROL_NOTIFY_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

/*
 * The service manager's notification socket (systemd's sd_notify(3)
 * protocol, written here rather than linked from libsystemd): one
 * datagram of newline-separated KEY=VALUE lines to $NOTIFY_SOCKET, a
 * filesystem path ("/run/systemd/notify") or an abstract-namespace name
 * written with a leading '@'. Without the variable every send is a
 * no-op, so strait run in a terminal behaves as before.
 */
struct notify {
    int fd; /* -1: no socket (disabled) */
    struct sockaddr_un addr;
    socklen_t len;
};

/*
 * notify_init() prepares n for the socket named by path ($NOTIFY_SOCKET;
 * NULL or "" disables it). Returns 1 when enabled, 0 when disabled, -1
 * when path is not a usable AF_UNIX name (too long, relative, or a
 * vsock: address strait does not speak): n is then disabled too and
 * *why says why (static).
 */
int notify_init(struct notify *n, const char *path, const char **why);

/* notify_dispose() closes the socket; safe on a disabled n. */
void notify_dispose(struct notify *n);

/* notify_enabled() is true when sends go somewhere. */
int notify_enabled(const struct notify *n);

/*
 * notify_send() sends msg ("READY=1\nSTATUS=...") as one datagram. 0 when
 * sent or disabled, -1 with errno when the send failed (the caller logs
 * it; systemd then acts on its own timeouts).
 */
int notify_send(const struct notify *n, const char *msg);

/* notify_sendf() formats into a bounded buffer (1 KiB; longer STATUS=
 * text is cut) and sends. */
int notify_sendf(const struct notify *n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* notify_monotonic_usec() is CLOCK_MONOTONIC in microseconds, the clock
 * MONOTONIC_USEC= is read against. */
uint64_t notify_monotonic_usec(void);

/*
 * notify_watchdog_usec() is the keep-alive period systemd expects, from
 * $WATCHDOG_USEC (usec) and $WATCHDOG_PID (pid, may be NULL) for the
 * process self: the value when usec is a positive number and pid is NULL
 * or names self, else 0 (no watchdog; the variables were meant for
 * another process). The sender pings at half of it.
 */
uint64_t notify_watchdog_usec(const char *usec, const char *pid, pid_t self);

#endif
