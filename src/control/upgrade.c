#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "control/upgrade.h"
#include "core/err.h"
#include "core/log.h"
#include "event/timer.h"
#include "net/sock_pool.h"

extern char **environ;

/* How long a child that failed may take to exit by itself before it is
 * killed: it has said why, or closed the socket, and is on its way out. */
#define UPGRADE_GRACE_MS 1000

/* ---- the wire format ---------------------------------------------------- */

static void put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static unsigned get16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

size_t upgrade_encode_fds(const struct upgrade_rec *r, size_t n, uint8_t *out,
                          size_t cap)
{
    size_t at = 3;

    if (n == 0 || n > UPGRADE_BATCH_MAX || cap < 3)
        return 0;
    out[0] = 'F';
    put16(out + 1, (unsigned)n);
    for (size_t i = 0; i < n; i++) {
        size_t len = r[i].addr.len;
        if (len > sizeof(r[i].addr.ss) || len > 255 || r[i].index < 0 ||
            r[i].index > 0xffff || at + 4 + len > cap)
            return 0;
        out[at] = (uint8_t)r[i].kind;
        put16(out + at + 1, (unsigned)r[i].index);
        out[at + 3] = (uint8_t)len;
        memcpy(out + at + 4, &r[i].addr.ss, len);
        at += 4 + len;
    }
    return at;
}

/* An address length that fits its family. */
static int addr_len_ok(const struct sockaddr_storage *ss, size_t len)
{
    switch (ss->ss_family) {
    case AF_INET:
        return len == sizeof(struct sockaddr_in);
    case AF_INET6:
        return len == sizeof(struct sockaddr_in6);
    case AF_UNIX:
        return len > offsetof(struct sockaddr_un, sun_path) &&
               len <= sizeof(struct sockaddr_un);
    default:
        return 0;
    }
}

int upgrade_parse_fds(const uint8_t *p, size_t n, struct upgrade_rec *out,
                      size_t max, size_t *count, const char **why)
{
    size_t k, at = 3;

    *count = 0;
    if (n < 3 || p[0] != 'F') {
        *why = "not a socket batch";
        return -1;
    }
    k = get16(p + 1);
    if (k == 0 || k > UPGRADE_BATCH_MAX || k > max) {
        *why = "bad socket count in a batch";
        return -1;
    }
    for (size_t i = 0; i < k; i++) {
        size_t len;
        if (at + 4 > n) {
            *why = "truncated socket batch";
            return -1;
        }
        len = p[at + 3];
        if (p[at] >= SOCK_POOL_NKINDS || len > sizeof(out[i].addr.ss) ||
            len < sizeof(sa_family_t) || at + 4 + len > n) {
            *why = "bad socket record";
            return -1;
        }
        memset(&out[i], 0, sizeof(out[i]));
        out[i].kind = p[at];
        out[i].index = (int)get16(p + at + 1);
        memcpy(&out[i].addr.ss, p + at + 4, len);
        out[i].addr.len = (socklen_t)len;
        if (!addr_len_ok(&out[i].addr.ss, len)) {
            *why = "bad socket address";
            return -1;
        }
        at += 4 + len;
    }
    if (at != n) {
        *why = "trailing bytes after a socket batch";
        return -1;
    }
    *count = k;
    return 0;
}

/* One message; 0 or -1 with errno. */
static int send_msg(int fd, const void *p, size_t n, const int *fds,
                    size_t nfds)
{
    union {
        char buf[CMSG_SPACE(UPGRADE_BATCH_MAX * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {(void *)p, n};
    struct msghdr m;
    ssize_t r;

    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (nfds > 0) {
        struct cmsghdr *c;
        memset(&ctl, 0, sizeof(ctl));
        m.msg_control = ctl.buf;
        m.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    do
        r = sendmsg(fd, &m, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -1;
    if ((size_t)r != n) {
        errno = EMSGSIZE;
        return -1;
    }
    return 0;
}

static int send_text(int fd, char type, const char *text)
{
    uint8_t m[1 + UPGRADE_TEXT_MAX];
    size_t n = text != NULL ? strlen(text) : 0;

    if (n > UPGRADE_TEXT_MAX)
        n = UPGRADE_TEXT_MAX;
    m[0] = (uint8_t)type;
    if (n > 0)
        memcpy(m + 1, text, n);
    return send_msg(fd, m, 1 + n, NULL, 0);
}

/* ---- the old process ---------------------------------------------------- */

enum state {
    S_HELLO,      /* sent H, waiting for G */
    S_BATCH,      /* sent a batch, waiting for A */
    S_WAIT_READY, /* sent E, waiting for R */
    S_DONE,       /* the new process serves */
    S_FAILING,    /* failed; waiting for the child to be reaped */
    S_FAILED,     /* failed hook ran */
};

struct upgrade {
    struct event_base *base;
    struct upgrade_hooks hooks;
    enum state state;
    pid_t pid;
    int reaped;
    int status; /* waitpid()'s, once reaped */
    int fd;     /* our end; -1 once closed */
    struct event *ev;
    struct event *sigchld;
    struct timer deadline; /* upgrade.timeout, then the grace */
    uint64_t timeout_ms;
    char *binary;
    char *why;              /* the reason of a failure, first one wins */
    struct upgrade_fd *fds; /* duplicates, owned */
    size_t nfds, sent;
    size_t batch; /* the size of the batch waiting for its A */
};

pid_t upgrade_pid(const struct upgrade *u)
{
    return u->pid;
}

int upgrade_finished(const struct upgrade *u)
{
    return u->state == S_DONE || u->state == S_FAILED;
}

static void close_channel(struct upgrade *u)
{
    if (u->ev != NULL)
        event_free(u->ev);
    u->ev = NULL;
    if (u->fd >= 0)
        close(u->fd);
    u->fd = -1;
}

static void close_dups(struct upgrade *u)
{
    for (size_t i = 0; i < u->nfds; i++)
        if (u->fds[i].fd >= 0)
            close(u->fds[i].fd);
    free(u->fds);
    u->fds = NULL;
    u->nfds = 0;
}

/* The child is gone: say why the upgrade failed. */
static void finish_failed(struct upgrade *u)
{
    char msg[UPGRADE_TEXT_MAX + 256];
    int status = u->status;

    if (u->why != NULL)
        snprintf(msg, sizeof(msg), "%s", u->why);
    else if (WIFEXITED(status))
        snprintf(msg, sizeof(msg),
                 "%s (pid %d) exited with status %d before it was serving",
                 u->binary, (int)u->pid, WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(msg, sizeof(msg),
                 "%s (pid %d) was killed by signal %d (%s) before it was "
                 "serving",
                 u->binary, (int)u->pid, WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(msg, sizeof(msg), "%s (pid %d) stopped before it was serving",
                 u->binary, (int)u->pid);
    u->state = S_FAILED;
    timer_cancel(&u->deadline);
    if (u->sigchld != NULL)
        event_free(u->sigchld);
    u->sigchld = NULL;
    u->hooks.failed(u->hooks.arg, msg);
}

/* A failure is over once the child is reaped. */
static void settle(struct upgrade *u)
{
    if (u->state == S_FAILING && u->reaped)
        finish_failed(u);
}

static int active(const struct upgrade *u)
{
    return u->state == S_HELLO || u->state == S_BATCH ||
           u->state == S_WAIT_READY;
}

static void on_message(struct upgrade *u, const uint8_t *m, size_t n);

/*
 * recv_msg() reads one message without waiting. A child that exits with
 * our message unread leaves ECONNRESET on the socket, which Linux returns
 * before the messages it sent first (its reason): read past it.
 */
static ssize_t recv_msg(int fd, uint8_t *m, size_t cap)
{
    ssize_t r;

    do
        r = recv(fd, m, cap, MSG_DONTWAIT);
    while (r < 0 && (errno == EINTR || errno == ECONNRESET));
    return r;
}

/* Reap the child if it is gone; 1 when it was. What it sent before it
 * went is read first: the reason is in it. */
static int try_reap(struct upgrade *u)
{
    int status = 0;
    pid_t r;

    if (u->reaped)
        return 1;
    do
        r = waitpid(u->pid, &status, WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return 0;
    u->reaped = 1;
    u->status = status;
    while (active(u) && u->fd >= 0) {
        uint8_t m[1 + UPGRADE_TEXT_MAX];
        ssize_t k = recv_msg(u->fd, m, sizeof(m));
        if (k <= 0)
            break;
        on_message(u, m, (size_t)k);
    }
    if (active(u)) {
        u->state = S_FAILING;
        close_channel(u);
        close_dups(u);
    }
    settle(u);
    return 1;
}

/*
 * fail() records why (the first reason wins; NULL: the exit status will
 * say), closes our end so the child sees end of file, and waits for the
 * child to be reaped: killed at once when kill_now is set (a timeout, a
 * protocol error), else after UPGRADE_GRACE_MS.
 */
static void fail(struct upgrade *u, int kill_now, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(struct upgrade *u, int kill_now, const char *fmt, ...)
{
    va_list ap;

    if (!active(u))
        return;
    if (fmt != NULL && u->why == NULL) {
        char msg[UPGRADE_TEXT_MAX + 256];
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        u->why = strdup(msg);
    }
    u->state = S_FAILING;
    close_channel(u);
    close_dups(u);
    if (u->reaped) {
        settle(u);
        return;
    }
    if (try_reap(u))
        return;
    if (kill_now)
        kill(u->pid, SIGKILL);
    timer_arm(&u->deadline, UPGRADE_GRACE_MS);
}

static void on_sigchld(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    try_reap(arg);
}

static void on_deadline(void *arg)
{
    struct upgrade *u = arg;

    if (u->state == S_FAILING) {
        /* The grace is over: it goes now; SIGCHLD reaps it. */
        if (!try_reap(u)) {
            kill(u->pid, SIGKILL);
            timer_arm(&u->deadline, UPGRADE_GRACE_MS);
        }
        return;
    }
    fail(u, 1,
         "%s (pid %d) was not serving within upgrade.timeout (%llu ms); "
         "killed",
         u->binary, (int)u->pid, (unsigned long long)u->timeout_ms);
}

/* The next batch, or E when every socket went. */
static void send_next(struct upgrade *u)
{
    uint8_t m[UPGRADE_MSG_MAX];
    struct upgrade_rec recs[UPGRADE_BATCH_MAX];
    int fds[UPGRADE_BATCH_MAX];
    size_t k = u->nfds - u->sent, len;

    if (k == 0) {
        if (send_msg(u->fd, "E", 1, NULL, 0) < 0) {
            fail(u, 1, "cannot talk to %s (pid %d): %s", u->binary, (int)u->pid,
                 strerror(errno));
            return;
        }
        log_info("upgrade: handed %zu socket(s) to pid %d", u->nfds,
                 (int)u->pid);
        u->state = S_WAIT_READY;
        return;
    }
    if (k > UPGRADE_BATCH_MAX)
        k = UPGRADE_BATCH_MAX;
    for (size_t i = 0; i < k; i++) {
        recs[i] = u->fds[u->sent + i].rec;
        fds[i] = u->fds[u->sent + i].fd;
    }
    len = upgrade_encode_fds(recs, k, m, sizeof(m));
    if (len == 0 || send_msg(u->fd, m, len, fds, k) < 0) {
        fail(u, 1, "cannot hand sockets to %s (pid %d): %s", u->binary,
             (int)u->pid, len == 0 ? "bad record" : strerror(errno));
        return;
    }
    u->batch = k;
    u->state = S_BATCH;
}

static void on_message(struct upgrade *u, const uint8_t *m, size_t n)
{
    if (n >= 1 && m[0] == 'X') {
        fail(u, 0, "%s (pid %d): %.*s", u->binary, (int)u->pid, (int)(n - 1),
             (const char *)m + 1);
        return;
    }
    if (n == 5 && m[0] == 'Z') {
        fail(u, 0, "cannot execute %s: %s", u->binary,
             strerror((int)get32(m + 1)));
        return;
    }
    switch (u->state) {
    case S_HELLO:
        if (n == 1 && m[0] == 'G') {
            send_next(u);
            return;
        }
        break;
    case S_BATCH:
        if (n == 3 && m[0] == 'A' && get16(m + 1) == u->batch) {
            u->sent += u->batch;
            u->batch = 0;
            send_next(u);
            return;
        }
        break;
    case S_WAIT_READY:
        if (n == 5 && m[0] == 'R') {
            u->state = S_DONE;
            timer_cancel(&u->deadline);
            if (send_msg(u->fd, "K", 1, NULL, 0) < 0)
                log_warn("upgrade: cannot tell pid %d it took over: %s",
                         (int)u->pid, strerror(errno));
            close_channel(u);
            close_dups(u);
            if (u->sigchld != NULL)
                event_free(u->sigchld);
            u->sigchld = NULL;
            u->hooks.ready(u->hooks.arg, u->pid);
            return;
        }
        break;
    default:
        return;
    }
    fail(u, 1,
         "%s (pid %d) broke the upgrade exchange (message '%c', %zu "
         "bytes)",
         u->binary, (int)u->pid,
         n > 0 && m[0] >= 0x20 && m[0] < 0x7f ? m[0] : '?', n);
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct upgrade *u = arg;
    uint8_t m[1 + UPGRADE_TEXT_MAX];
    ssize_t r;

    (void)what;
    r = recv_msg((int)fd, m, sizeof(m));
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (r <= 0) {
        /* Gone without a word: the exit status will say why. */
        fail(u, 0, NULL);
        return;
    }
    on_message(u, m, (size_t)r);
}

/* The environment of the child: ours without the variables it gets anew.
 * wd: where the child writes its pid after WATCHDOG_PID= (NULL: the
 * variable was not set). */
static char **child_env(char *fdvar, char *wdvar, int *has_wd)
{
    size_t n = 0, k = 0;
    char **env;

    *has_wd = 0;
    for (char **e = environ; *e != NULL; e++)
        n++;
    env = calloc(n + 3, sizeof(*env));
    if (env == NULL)
        return NULL;
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, UPGRADE_FD_ENV "=", strlen(UPGRADE_FD_ENV "=")) == 0)
            continue;
        if (strncmp(*e, "WATCHDOG_PID=", 13) == 0) {
            *has_wd = 1;
            continue;
        }
        env[k++] = *e;
    }
    env[k++] = fdvar;
    if (*has_wd)
        env[k++] = wdvar;
    env[k] = NULL;
    return env;
}

/* Async-signal-safe: the decimal digits of v after prefix in out. */
static void put_pid(char *out, size_t prefix, pid_t v)
{
    char d[16];
    size_t n = 0;
    unsigned long x = (unsigned long)v;

    do {
        d[n++] = (char)('0' + x % 10);
        x /= 10;
    } while (x > 0 && n < sizeof(d));
    for (size_t i = 0; i < n; i++)
        out[prefix + i] = d[n - 1 - i];
    out[prefix + n] = '\0';
}

/* In the child, between fork and exec: async-signal-safe calls only. */
static void child_exec(int cfd, char *const argv[], char *const envp[],
                       char *wdvar)
{
    sigset_t none;
    uint8_t m[5];
    int e;

    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (wdvar != NULL)
        put_pid(wdvar, 13, getpid());
    if (cfd == UPGRADE_FD)
        fcntl(cfd, F_SETFD, 0);
    else if (dup2(cfd, UPGRADE_FD) < 0)
        _exit(127);
    execve(argv[0], argv, envp);
    e = errno;
    m[0] = 'Z';
    put32(m + 1, (uint32_t)e);
    (void)!send(UPGRADE_FD, m, sizeof(m), MSG_NOSIGNAL);
    _exit(127);
}

struct upgrade *upgrade_start(struct event_base *base,
                              const struct upgrade_conf *conf,
                              const struct upgrade_hooks *hooks, char **err)
{
    struct upgrade *u = calloc(1, sizeof(*u));
    char fdvar[] = UPGRADE_FD_ENV "=3";
    char wdvar[13 + 24] = "WATCHDOG_PID=";
    char *argv[] = {NULL, "run", "-c", NULL, NULL};
    char **envp = NULL;
    uint8_t hello[14];
    int sv[2] = {-1, -1};
    int has_wd;

    *err = NULL;
    if (u == NULL)
        return NULL;
    u->base = base;
    u->hooks = *hooks;
    u->fd = -1;
    u->pid = -1;
    u->timeout_ms = conf->timeout_ms;
    timer_init(&u->deadline, base, on_deadline, u);
    u->binary = strdup(conf->binary);
    u->fds = calloc(conf->nfds ? conf->nfds : 1, sizeof(*u->fds));
    if (u->binary == NULL || u->fds == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    /* Duplicates: a reload during the exchange may close a listener. */
    for (size_t i = 0; i < conf->nfds; i++) {
        u->fds[i].rec = conf->fds[i].rec;
        u->fds[i].fd = fcntl(conf->fds[i].fd, F_DUPFD_CLOEXEC, 0);
        if (u->fds[i].fd < 0) {
            err_set(err, "cannot duplicate a listening socket: %s",
                    strerror(errno));
            goto fail;
        }
        u->nfds++;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        err_set(err, "socketpair: %s", strerror(errno));
        goto fail;
    }
    envp = child_env(fdvar, wdvar, &has_wd);
    if (envp == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    argv[0] = u->binary;
    argv[3] = (char *)conf->config_path;
    u->sigchld = evsignal_new(base, SIGCHLD, on_sigchld, u);
    if (u->sigchld == NULL || event_add(u->sigchld, NULL) < 0) {
        err_set(err, "cannot watch SIGCHLD");
        goto fail;
    }
    u->pid = fork();
    if (u->pid < 0) {
        err_set(err, "fork: %s", strerror(errno));
        goto fail;
    }
    if (u->pid == 0)
        child_exec(sv[1], argv, envp, has_wd ? wdvar : NULL);
    free(envp);
    envp = NULL;
    close(sv[1]);
    sv[1] = -1;
    u->fd = sv[0];
    sv[0] = -1;
    fcntl(u->fd, F_SETFL, fcntl(u->fd, F_GETFL) | O_NONBLOCK);
    u->ev = event_new(base, u->fd, EV_READ | EV_PERSIST, on_readable, u);
    if (u->ev == NULL || event_add(u->ev, NULL) < 0) {
        err_set(err, "cannot watch the upgrade socket");
        upgrade_free(u); /* kills and reaps the child */
        return NULL;
    }
    hello[0] = 'H';
    hello[1] = UPGRADE_VERSION;
    put32(hello + 2, (uint32_t)getpid());
    put32(hello + 6, (uint32_t)conf->nworkers);
    put32(hello + 10, (uint32_t)u->nfds);
    u->state = S_HELLO;
    timer_arm(&u->deadline, conf->timeout_ms);
    /* A child gone already leaves end of file to read: the next turn of
     * the loop says why, so the hooks never run inside this call. */
    if (send_msg(u->fd, hello, sizeof(hello), NULL, 0) < 0)
        log_warn("upgrade: cannot greet pid %d: %s", (int)u->pid,
                 strerror(errno));
    return u;
fail:
    free(envp);
    if (sv[0] >= 0)
        close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    u->pid = -1;
    u->reaped = 1;
    upgrade_free(u);
    return NULL;
}

void upgrade_free(struct upgrade *u)
{
    if (u == NULL)
        return;
    if (u->pid > 0 && !u->reaped && u->state != S_DONE) {
        int status;
        kill(u->pid, SIGKILL);
        while (waitpid(u->pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    close_channel(u);
    close_dups(u);
    if (u->sigchld != NULL)
        event_free(u->sigchld);
    timer_dispose(&u->deadline);
    free(u->binary);
    free(u->why);
    free(u);
}

/* ---- the new process ---------------------------------------------------- */

int upgrade_child_fd(void)
{
    const char *v = getenv(UPGRADE_FD_ENV);
    char *end;
    long fd;

    if (v == NULL)
        return -1;
    errno = 0;
    fd = strtol(v, &end, 10);
    unsetenv(UPGRADE_FD_ENV);
    if (errno != 0 || *end != '\0' || fd < 0 || fd > 65535 ||
        fcntl((int)fd, F_GETFD) < 0)
        return -1;
    /* Not for the processes this one starts. */
    fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    return (int)fd;
}

static int recv_timed(int fd, uint8_t *m, size_t cap, int *fds, size_t *nfds,
                      char **err)
{
    union {
        char buf[CMSG_SPACE(UPGRADE_BATCH_MAX * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {m, cap};
    struct msghdr h;
    ssize_t r;

    memset(&h, 0, sizeof(h));
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = ctl.buf;
    h.msg_controllen = sizeof(ctl.buf);
    *nfds = 0;
    do
        r = recvmsg(fd, &h, MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&h); r >= 0 && c != NULL;
         c = CMSG_NXTHDR(&h, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            if (*nfds + k > UPGRADE_BATCH_MAX)
                k = UPGRADE_BATCH_MAX - *nfds;
            memcpy(fds + *nfds, CMSG_DATA(c), k * sizeof(int));
            *nfds += k;
        }
    }
    if (r < 0) {
        err_set(err, "%s",
                errno == EAGAIN || errno == EWOULDBLOCK
                    ? "the running strait did not answer in time"
                    : strerror(errno));
        return -1;
    }
    if (r == 0) {
        err_set(err, "the running strait closed the upgrade socket");
        return -1;
    }
    if (h.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) {
        err_set(err, "an upgrade message was truncated");
        for (size_t i = 0; i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
        return -1;
    }
    return (int)r;
}

int upgrade_child_receive(int fd, int nworkers, uint64_t timeout_ms,
                          struct sock_pool *pool, pid_t *parent, char **err)
{
    uint8_t m[UPGRADE_MSG_MAX];
    struct upgrade_rec recs[UPGRADE_BATCH_MAX];
    int fds[UPGRADE_BATCH_MAX];
    struct timeval tv = ms_to_timeval(timeout_ms);
    size_t nfds, total, got = 0;
    int r, theirs;

    *err = NULL;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    r = recv_timed(fd, m, sizeof(m), fds, &nfds, err);
    if (r < 0)
        return -1;
    if (nfds > 0 || r != 14 || m[0] != 'H' || m[1] != UPGRADE_VERSION) {
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        return err_set(err, "the running strait speaks another upgrade "
                            "protocol (restart instead)");
    }
    *parent = (pid_t)get32(m + 2);
    theirs = (int)get32(m + 6);
    total = get32(m + 10);
    if (theirs != nworkers)
        return err_set(err,
                       "workers: the running strait has %d, this "
                       "configuration %d; a binary upgrade keeps the worker "
                       "count (each worker's socket keeps its queue), so "
                       "set workers back to %d or restart to change it",
                       theirs, nworkers, theirs);
    if (send_msg(fd, "G", 1, NULL, 0) < 0)
        return err_set(err, "cannot answer the running strait: %s",
                       strerror(errno));
    for (;;) {
        size_t k;
        const char *why = NULL;
        uint8_t ack[3];

        r = recv_timed(fd, m, sizeof(m), fds, &nfds, err);
        if (r < 0)
            return -1;
        if (r == 1 && m[0] == 'E' && nfds == 0)
            break;
        if (upgrade_parse_fds(m, (size_t)r, recs, UPGRADE_BATCH_MAX, &k, &why) <
                0 ||
            k != nfds) {
            for (size_t i = 0; i < nfds; i++)
                close(fds[i]);
            return err_set(err,
                           "bad socket batch from the running strait: "
                           "%s",
                           why != NULL ? why : "descriptor count differs");
        }
        for (size_t i = 0; i < k; i++) {
            if (sock_pool_add(pool, recs[i].kind, &recs[i].addr, recs[i].index,
                              fds[i]) < 0) {
                for (size_t j = i + 1; j < k; j++)
                    close(fds[j]);
                return err_set(err, "cannot keep a handed-over socket (out "
                                    "of memory or a duplicate)");
            }
        }
        got += k;
        ack[0] = 'A';
        put16(ack + 1, (unsigned)k);
        if (send_msg(fd, ack, sizeof(ack), NULL, 0) < 0)
            return err_set(err, "cannot answer the running strait: %s",
                           strerror(errno));
    }
    if (got != total)
        return err_set(err,
                       "the running strait announced %zu socket(s) and "
                       "sent %zu",
                       total, got);
    log_info("upgrade: took %zu socket(s) over from pid %d", got, (int)*parent);
    return 0;
}

void upgrade_child_fail(int fd, const char *why)
{
    if (fd >= 0 && send_text(fd, 'X', why) < 0)
        log_warn("upgrade: cannot tell the running strait why: %s",
                 strerror(errno));
}

int upgrade_child_ready(int fd)
{
    uint8_t m[5];

    m[0] = 'R';
    put32(m + 1, (uint32_t)getpid());
    return send_msg(fd, m, sizeof(m), NULL, 0);
}

int upgrade_child_done(int fd)
{
    uint8_t m[16];
    ssize_t r = recv(fd, m, sizeof(m), MSG_DONTWAIT);

    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    return r == 1 && m[0] == 'K' ? 1 : -1;
}
