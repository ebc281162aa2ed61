#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/bootstrap.h"
#include "control/fetch.h"
#include "control/reload_cli.h"
#include "core/buf.h"

enum {
    RC_OK = 0,
    RC_REFUSED = 1,
    RC_USAGE = 2,
    RC_UNREACHABLE = 3,
};

#define ANSWER_MAX (256 * 1024)
#define POLL_MS 100

void reload_cli_usage(FILE *f, const char *default_config)
{
    fprintf(f,
            "usage: strait reload [-c FILE] [--timeout SECONDS]\n"
            "\n"
            "Asks the strait running with FILE to re-read it (POST /reload\n"
            "on its admin.address) and waits until the reload has taken\n"
            "effect: exit 0 when it has, 1 with the reason when the new\n"
            "configuration was refused (the running one stays), 3 when\n"
            "strait cannot be reached, is draining or did not answer in\n"
            "time. systemd's ExecReload= runs it.\n"
            "\n"
            "  -c, --config FILE       bootstrap file (default %s)\n"
            "  -t, --timeout SECONDS   longest wait (default 90)\n"
            "  -h, --help              this text\n",
            default_config);
}

enum reload_outcome reload_outcome_of(const char *body, size_t n)
{
    static const struct {
        const char *prefix;
        enum reload_outcome o;
    } t[] = {
        {"reloaded\n", RELOAD_DONE},
        {"reload failed: ", RELOAD_REFUSED},
        {"reload queued", RELOAD_QUEUED},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        size_t k = strlen(t[i].prefix);
        if (n >= k && memcmp(body, t[i].prefix, k) == 0)
            return t[i].o;
    }
    return RELOAD_UNKNOWN;
}

int reload_stat(const char *stats, size_t n, const char *key, uint64_t *v)
{
    size_t k = strlen(key);
    const char *p = stats, *end = stats + n;

    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl != NULL ? nl : end;
        if ((size_t)(eol - p) > k + 2 && memcmp(p, key, k) == 0 &&
            p[k] == ':' && p[k + 1] == ' ') {
            uint64_t x = 0;
            const char *d = p + k + 2;
            if (d == eol)
                return -1;
            for (; d < eol; d++) {
                if (*d < '0' || *d > '9' || x > (UINT64_MAX - 9) / 10)
                    return -1;
                x = x * 10 + (uint64_t)(*d - '0');
            }
            *v = x;
            return 0;
        }
        p = eol + 1;
    }
    return -1;
}

/* One exchange with the admin API, run to its end on base. */
struct call {
    struct event_base *base;
    int status;
    struct buf body;
    char *err;
};

static void on_answer(void *arg, const struct fetch_answer *a, const char *err)
{
    struct call *c = arg;

    if (a != NULL) {
        c->status = a->status;
        if (buf_append(&c->body, a->body, a->n) < 0)
            c->err = strdup("the answer is too large");
    } else {
        c->err = strdup(err != NULL ? err : "no answer");
    }
    event_base_loopbreak(c->base);
}

static int call(struct call *c, const char *host, int port, const char *method,
                const char *path, int64_t timeout_ms)
{
    struct fetch_conf fc;
    struct fetch *f;

    memset(&fc, 0, sizeof(fc));
    fc.host = host;
    fc.port = port;
    fc.method = method;
    fc.path = path;
    fc.body = method[0] == 'P' ? "" : NULL;
    fc.name = "strait's admin API";
    fc.timeout_ms = timeout_ms;
    fc.max_body = ANSWER_MAX;
    c->status = 0;
    free(c->err);
    c->err = NULL;
    buf_dispose(&c->body);
    buf_init(&c->body, ANSWER_MAX);
    f = fetch_new(c->base, &fc, on_answer, c, &c->err);
    if (f == NULL)
        return -1;
    event_base_dispatch(c->base);
    fetch_free(f);
    return c->err != NULL ? -1 : 0;
}

/* The admin address as something to connect to: an unspecified address
 * (0.0.0.0, ::) is reached on loopback. 0, or -1 when it is not IP. */
static int admin_target(const struct addr *a, char *host, size_t n, int *port)
{
    if (a->ss.ss_family == AF_INET) {
        struct sockaddr_in sin;
        memcpy(&sin, &a->ss, sizeof(sin));
        if (sin.sin_addr.s_addr == htonl(INADDR_ANY))
            sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        inet_ntop(AF_INET, &sin.sin_addr, host, (socklen_t)n);
        *port = ntohs(sin.sin_port);
        return 0;
    }
    if (a->ss.ss_family == AF_INET6) {
        struct sockaddr_in6 sin6;
        memcpy(&sin6, &a->ss, sizeof(sin6));
        if (IN6_IS_ADDR_UNSPECIFIED(&sin6.sin6_addr))
            sin6.sin6_addr = in6addr_loopback;
        inet_ntop(AF_INET6, &sin6.sin6_addr, host, (socklen_t)n);
        *port = ntohs(sin6.sin6_port);
        return 0;
    }
    return -1;
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* server.reloads_ok and reloads_failed from /stats. */
static int read_counts(struct call *c, const char *host, int port,
                       int64_t timeout_ms, uint64_t *ok, uint64_t *failed)
{
    if (call(c, host, port, "GET", "/stats", timeout_ms) < 0 ||
        c->status != 200)
        return -1;
    if (reload_stat(buf_ptr(&c->body), buf_len(&c->body), "server.reloads_ok",
                    ok) < 0 ||
        reload_stat(buf_ptr(&c->body), buf_len(&c->body),
                    "server.reloads_failed", failed) < 0)
        return -1;
    return 0;
}

/* The line "server.last_reload_error: ..." of the last /stats answer. */
static void print_last_error(struct call *c)
{
    const char *key = "server.last_reload_error: ";
    const char *p =
        memmem(buf_ptr(&c->body), buf_len(&c->body), key, strlen(key));
    const char *end = buf_ptr(&c->body) + buf_len(&c->body);
    const char *nl;

    if (p == NULL) {
        fprintf(stderr, "strait: reload failed\n");
        return;
    }
    p += strlen(key);
    nl = memchr(p, '\n', (size_t)(end - p));
    fprintf(stderr, "strait: reload failed: %.*s\n",
            (int)((nl != NULL ? nl : end) - p), p);
}

/*
 * A queued reload runs once the workers have switched to the last
 * configuration: wait until one of the counters read before the POST
 * moves, and say which.
 */
static int wait_queued(struct call *c, const char *host, int port,
                       uint64_t deadline, uint64_t ok0, uint64_t failed0)
{
    while (now_ms() < deadline) {
        const struct timespec pause = {0, POLL_MS * 1000000L};
        uint64_t ok, failed;
        if (read_counts(c, host, port, (int64_t)(deadline - now_ms()) + 1, &ok,
                        &failed) < 0) {
            fprintf(stderr, "strait: reload: %s\n",
                    c->err ? c->err : "cannot read /stats");
            return RC_UNREACHABLE;
        }
        if (failed > failed0) {
            print_last_error(c);
            return RC_REFUSED;
        }
        if (ok > ok0) {
            printf("reloaded\n");
            return RC_OK;
        }
        nanosleep(&pause, NULL);
    }
    fprintf(stderr, "strait: reload: still queued at the timeout\n");
    return RC_UNREACHABLE;
}

static int ask(struct call *c, const char *host, int port, int64_t timeout_ms)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    uint64_t ok0, failed0;
    const char *body;
    size_t n;

    if (read_counts(c, host, port, timeout_ms, &ok0, &failed0) < 0) {
        fprintf(stderr, "strait: reload: cannot reach strait on %s:%d: %s\n",
                host, port, c->err ? c->err : "no reload counters in /stats");
        return RC_UNREACHABLE;
    }
    if (call(c, host, port, "POST", "/reload", timeout_ms) < 0) {
        fprintf(stderr, "strait: reload: %s\n", c->err);
        return RC_UNREACHABLE;
    }
    body = buf_ptr(&c->body);
    n = buf_len(&c->body);
    if (c->status != 200) {
        fprintf(stderr, "strait: reload: HTTP %d: %.*s", c->status, (int)n,
                body);
        return RC_UNREACHABLE;
    }
    switch (reload_outcome_of(body, n)) {
    case RELOAD_DONE:
        printf("reloaded\n");
        return RC_OK;
    case RELOAD_REFUSED:
        fprintf(stderr, "strait: %.*s", (int)n, body);
        if (n == 0 || body[n - 1] != '\n')
            fputc('\n', stderr);
        return RC_REFUSED;
    case RELOAD_QUEUED:
        return wait_queued(c, host, port, deadline, ok0, failed0);
    case RELOAD_UNKNOWN:
        break;
    }
    fprintf(stderr, "strait: reload: unexpected answer: %.*s\n", (int)n, body);
    return RC_UNREACHABLE;
}

int reload_cli_main(int argc, char **argv, const char *default_config)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"timeout", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = default_config;
    long timeout_s = 90;
    struct bootstrap *bs;
    struct call c;
    char host[INET6_ADDRSTRLEN];
    char *err = NULL, *end;
    int opt, port, rc;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "c:t:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            path = optarg;
            break;
        case 't':
            errno = 0;
            timeout_s = strtol(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || timeout_s <= 0 ||
                timeout_s > 86400) {
                fprintf(stderr, "strait: --timeout takes 1-86400 seconds\n");
                return RC_USAGE;
            }
            break;
        case 'h':
            reload_cli_usage(stdout, default_config);
            return RC_OK;
        default:
            reload_cli_usage(stderr, default_config);
            return RC_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "strait: unexpected argument '%s'\n", argv[optind]);
        return RC_USAGE;
    }
    /* Only admin.address is needed; a file the running strait would
     * refuse is reported by strait itself, with its reason. */
    bs = bootstrap_load(path, &err);
    if (bs == NULL) {
        fprintf(stderr,
                "%s\nstrait: reload: refused, the running "
                "configuration stays\n",
                err ? err : "invalid configuration");
        free(err);
        return RC_REFUSED;
    }
    if (admin_target(&bs->admin.address, host, sizeof(host), &port) < 0) {
        fprintf(stderr, "strait: reload: admin.address is not an IP "
                        "address\n");
        bootstrap_free(bs);
        return RC_USAGE;
    }
    bootstrap_free(bs);
    memset(&c, 0, sizeof(c));
    buf_init(&c.body, ANSWER_MAX);
    c.base = event_base_new();
    if (c.base == NULL) {
        fprintf(stderr, "strait: cannot create the event loop\n");
        buf_dispose(&c.body);
        return RC_UNREACHABLE;
    }
    rc = ask(&c, host, port, (int64_t)timeout_s * 1000);
    event_base_free(c.base);
    buf_dispose(&c.body);
    free(c.err);
    return rc;
}

/* ---- strait upgrade ----------------------------------------------------- */

void upgrade_cli_usage(FILE *f, const char *default_config)
{
    fprintf(f,
            "usage: strait upgrade [-c FILE] [--timeout SECONDS]\n"
            "\n"
            "Asks the strait running with FILE (POST /upgrade on its\n"
            "admin.address) to start a new binary: upgrade.binary, by\n"
            "default the executable it was started from as it is on disk\n"
            "now. The new process takes over every listening socket, so no\n"
            "connection is refused; the old one then drains and exits, and\n"
            "systemd is told the new MAINPID. SIGUSR2 does the same without\n"
            "waiting. Waits for the outcome: exit 0 when the new process\n"
            "serves, 1 with the reason when it failed (the running strait\n"
            "keeps serving), 3 when strait cannot be reached, is draining or\n"
            "did not finish in time.\n"
            "\n"
            "  -c, --config FILE       bootstrap file (default %s)\n"
            "  -t, --timeout SECONDS   longest wait (default 90)\n"
            "  -h, --help              this text\n",
            default_config);
}

int upgrade_started_pid(const char *body, size_t n)
{
    const char *prefix = "upgrade started: pid ";
    size_t k = strlen(prefix);
    long v = 0;

    if (n <= k || memcmp(body, prefix, k) != 0)
        return 0;
    for (size_t i = k; i < n && body[i] >= '0' && body[i] <= '9'; i++) {
        v = v * 10 + (body[i] - '0');
        if (v > 0x7fffffff)
            return 0;
    }
    return (int)v;
}

/* The line "server.last_upgrade_error: ..." of the last /stats answer. */
static void print_upgrade_error(struct call *c)
{
    const char *key = "server.last_upgrade_error: ";
    const char *p =
        memmem(buf_ptr(&c->body), buf_len(&c->body), key, strlen(key));
    const char *end = buf_ptr(&c->body) + buf_len(&c->body);
    const char *nl;

    if (p == NULL) {
        fprintf(stderr, "strait: upgrade failed\n");
        return;
    }
    p += strlen(key);
    nl = memchr(p, '\n', (size_t)(end - p));
    fprintf(stderr,
            "strait: upgrade failed, the running strait keeps "
            "serving: %.*s\n",
            (int)((nl != NULL ? nl : end) - p), p);
}

static int stat_of(struct call *c, const char *key, uint64_t *v)
{
    return reload_stat(buf_ptr(&c->body), buf_len(&c->body), key, v);
}

/*
 * The outcome shows in /stats: server.pid is the new pid once the new
 * process answers (the old one stops accepting on the admin socket then),
 * or the old one counts a failure for that pid. A failed poll is retried:
 * the socket changes hands in between.
 */
static int ask_upgrade(struct call *c, const char *host, int port,
                       int64_t timeout_ms)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    uint64_t failed0, old_pid, v;
    const char *body;
    size_t n;
    int pid;

    if (call(c, host, port, "GET", "/stats", timeout_ms) < 0 ||
        c->status != 200 ||
        stat_of(c, "server.upgrades_failed", &failed0) < 0 ||
        stat_of(c, "server.pid", &old_pid) < 0) {
        fprintf(stderr, "strait: upgrade: cannot reach strait on %s:%d: %s\n",
                host, port, c->err ? c->err : "no upgrade counters in /stats");
        return RC_UNREACHABLE;
    }
    if (call(c, host, port, "POST", "/upgrade", timeout_ms) < 0) {
        fprintf(stderr, "strait: upgrade: %s\n", c->err);
        return RC_UNREACHABLE;
    }
    body = buf_ptr(&c->body);
    n = buf_len(&c->body);
    if (c->status != 200) {
        fprintf(stderr, "strait: %.*s", (int)n, body);
        if (n == 0 || body[n - 1] != '\n')
            fputc('\n', stderr);
        return c->status == 409 ? RC_REFUSED : RC_UNREACHABLE;
    }
    pid = upgrade_started_pid(body, n);
    if (pid <= 0) {
        fprintf(stderr, "strait: upgrade: unexpected answer: %.*s\n", (int)n,
                body);
        return RC_UNREACHABLE;
    }
    while (now_ms() < deadline) {
        const struct timespec pause = {0, POLL_MS * 1000000L};
        if (call(c, host, port, "GET", "/stats",
                 (int64_t)(deadline - now_ms()) + 1) == 0 &&
            c->status == 200 && stat_of(c, "server.pid", &v) == 0) {
            uint64_t failed, upid, serving = 0;
            /* The new process answers the admin port as soon as it runs;
             * it serves once its workers run its configuration (and it
             * has told the old one so). */
            if (v == (uint64_t)pid &&
                stat_of(c, "server.serving", &serving) == 0 && serving == 1) {
                printf("upgraded: pid %d serves (pid %llu drains)\n", pid,
                       (unsigned long long)old_pid);
                return RC_OK;
            }
            if (v == old_pid &&
                stat_of(c, "server.upgrades_failed", &failed) == 0 &&
                stat_of(c, "server.upgrade_pid", &upid) == 0 &&
                failed > failed0 && upid == (uint64_t)pid) {
                print_upgrade_error(c);
                return RC_REFUSED;
            }
        }
        nanosleep(&pause, NULL);
    }
    fprintf(stderr,
            "strait: upgrade: pid %d did not take over within the "
            "timeout\n",
            pid);
    return RC_UNREACHABLE;
}

int upgrade_cli_main(int argc, char **argv, const char *default_config)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"timeout", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = default_config;
    long timeout_s = 90;
    struct bootstrap *bs;
    struct call c;
    char host[INET6_ADDRSTRLEN];
    char *err = NULL, *end;
    int opt, port, rc;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "c:t:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            path = optarg;
            break;
        case 't':
            errno = 0;
            timeout_s = strtol(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || timeout_s <= 0 ||
                timeout_s > 86400) {
                fprintf(stderr, "strait: --timeout takes 1-86400 seconds\n");
                return RC_USAGE;
            }
            break;
        case 'h':
            upgrade_cli_usage(stdout, default_config);
            return RC_OK;
        default:
            upgrade_cli_usage(stderr, default_config);
            return RC_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "strait: unexpected argument '%s'\n", argv[optind]);
        return RC_USAGE;
    }
    bs = bootstrap_load(path, &err);
    if (bs == NULL) {
        fprintf(stderr, "%s\nstrait: upgrade: cannot read admin.address\n",
                err ? err : "invalid configuration");
        free(err);
        return RC_REFUSED;
    }
    if (admin_target(&bs->admin.address, host, sizeof(host), &port) < 0) {
        fprintf(stderr, "strait: upgrade: admin.address is not an IP "
                        "address\n");
        bootstrap_free(bs);
        return RC_USAGE;
    }
    bootstrap_free(bs);
    memset(&c, 0, sizeof(c));
    buf_init(&c.body, ANSWER_MAX);
    c.base = event_base_new();
    if (c.base == NULL) {
        fprintf(stderr, "strait: cannot create the event loop\n");
        buf_dispose(&c.body);
        return RC_UNREACHABLE;
    }
    rc = ask_upgrade(&c, host, port, (int64_t)timeout_s * 1000);
    event_base_free(c.base);
    buf_dispose(&c.body);
    free(c.err);
    return rc;
}
