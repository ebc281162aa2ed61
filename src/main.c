/*
 * strait: command line, process setup, signals. This file owns the
 * process-global state (the main event loop and the server); everything
 * below it receives what it needs explicitly.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <lauxlib.h>
#include <lua.h>
#include <maxminddb.h>
#include <nghttp2/nghttp2.h>
#include <openssl/base.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

#include "config/bootstrap.h"
#include "config/conf.h"
#include "config/analyze.h"
#include "config/res-k8s.h"
#include "config/resource.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "control/ca/ca_cli.h"
#include "control/etcd_cli.h"
#include "control/link/link_cli.h"
#include "control/ca/ca_node.h"
#include "core/log.h"
#include "control/loop.h"
#include "control/reload_cli.h"
#include "control/upgrade.h"
#include "event/reap.h"
#include "http/access_format.h"
#include "net/sock_pool.h"

#define DEFAULT_CONFIG "/etc/strait/strait.yaml"

/* Exit codes, documented in --help and README.md. */
enum {
    EXIT_OK = 0,
    EXIT_CONFIG = 1,  /* the configuration is invalid */
    EXIT_USAGE = 2,   /* bad command line */
    EXIT_RUNTIME = 3, /* valid configuration, but strait could not start */
};

static struct event_base *main_base;
static struct loop *main_loop;
static int main_signals_seen;
/* The stop guard (see stop_guard()): libevent's own SIGTERM and SIGINT
 * handlers, chained from ours; the semaphore the first signal posts; the
 * drain deadline; set once the control loop has returned. */
static struct sigaction main_ev_term, main_ev_int;
static sem_t main_stop_sem;
static volatile sig_atomic_t main_stop_posted;
static int64_t main_stop_ms;
static atomic_int main_stopped;
static atomic_int main_drain_started;
/* Set at the first SIGTERM or SIGINT, read by the control thread's Lua
 * budget hook (loop_start.stop). */
static int main_stop_flag;
static const char *main_argv0;

static void usage_main(FILE *f)
{
    fprintf(
        f,
        "usage: strait <command> [options]\n"
        "\n"
        "commands:\n"
        "  run        run the gateway in the foreground\n"
        "  check      validate a configuration and exit\n"
        "  reload     make the running strait re-read its configuration\n"
        "             and wait for the outcome\n"
        "  upgrade    make the running strait hand its sockets to a new\n"
        "             binary and drain; wait for the outcome\n"
        "  version    print strait's version and its libraries'\n"
        "  reference  list every bootstrap key with type and default\n"
        "  ca         the embedded CA: init, show, token create, issue\n"
        "  link       site links: create --name SITE prints the MeshLink\n"
        "             that site applies; delete --name SITE revokes it\n"
        "  apply      write resources to etcd (config.etcd) after checking\n"
        "             them against what it holds: apply -f FILE|DIR\n"
        "  delete     delete a resource from etcd: delete KIND NAME [-n NS]\n"
        "  get        list resources in etcd: get KIND [NAME] [-n NS]\n"
        "\n"
        "'strait <command> --help' describes a command.\n"
        "exit codes: 0 ok, 1 invalid configuration, 2 usage error,\n"
        "            3 could not start (e.g. address in use)\n");
}

static void usage_run(FILE *f)
{
    fprintf(
        f,
        "usage: strait run [-c FILE] [--join URL [--token TOKEN]]\n"
        "\n"
        "Runs the gateway in the foreground until SIGTERM or SIGINT\n"
        "(drain, then exit 0) or POST /quitquitquit on the admin API.\n"
        "SIGHUP re-reads FILE; a bad file is logged and changes nothing.\n"
        "SIGUSR1 reopens log.accessLogFile (after logrotate moved it).\n"
        "SIGUSR2 starts a binary upgrade (see 'strait upgrade --help').\n"
        "\n"
        "  -c, --config FILE   bootstrap file (default %s)\n"
        "  -j, --join URL      get this node's certificate from the strait\n"
        "                      CA at URL (https://HOST:15012); overrides\n"
        "                      ca.join.address\n"
        "  -t, --token TOKEN   single-use join token ('strait ca token\n"
        "                      create'); only needed while no valid\n"
        "                      certificate is stored in ca.dir/identity\n"
        "  -h, --help          this text\n",
        DEFAULT_CONFIG);
}

static void usage_check(FILE *f)
{
    fprintf(f,
            "usage: strait check [-c FILE]\n"
            "       strait check [-c FILE] [-o text|json] PATH...\n"
            "\n"
            "The first form validates the bootstrap FILE without binding\n"
            "anything: exit 0 when valid, 1 with one 'file:line:col: key:\n"
            "reason' line per problem on stderr.\n"
            "\n"
            "The second validates Istio resources (Gateway, VirtualService,\n"
            "DestinationRule, ServiceEntry, WorkloadEntry) in each PATH, a\n"
            "file or a directory of .yaml/.yml/.json files, and analyses\n"
            "them as istioctl analyze does (IST codes): exit 1 when any\n"
            "error is found, 0 when only warnings or nothing. With -c, the\n"
            "bootstrap FILE is validated too and its outboundTrafficPolicy\n"
            "applies (without -c: REGISTRY_ONLY, the default), so a route to\n"
            "a host no ServiceEntry declares is an error or a warning as it\n"
            "would be when strait runs with FILE.\n"
            "\n"
            "  -c, --config FILE   bootstrap file (default %s)\n"
            "  -o, --output FMT    text (default) or json, for resources\n"
            "  -h, --help          this text\n",
            DEFAULT_CONFIG);
}

#ifndef STRAIT_LUA_DIR
#define STRAIT_LUA_DIR "/usr/share/strait/lua"
#endif

/* `strait check`'s progress line: on a terminal only (a script reading
 * stderr gets the messages alone), redrawn at most every 100 ms, and
 * erased before the results are printed. */
struct check_tty {
    uint64_t last_ms;
    int shown;
};

static void check_progress(void *arg, enum res_progress_phase phase,
                           const char *what, size_t files, size_t resources)
{
    struct check_tty *t = arg;
    uint64_t now = clock_ms();

    if (phase == RES_PROGRESS_DONE) {
        if (t->shown)
            fputs("\r\033[K", stderr);
        t->shown = 0;
    } else if (phase == RES_PROGRESS_ANALYSE) {
        fprintf(stderr,
                "\r\033[Kchecking %s: %zu file(s), %zu resource(s) read; "
                "analysing",
                what, files, resources);
        t->shown = 1;
    } else if (!t->shown || now - t->last_ms >= 100) {
        fprintf(stderr,
                "\r\033[Kchecking: %zu file(s), %zu resource(s) read: %s",
                files, resources,
                what + (strlen(what) > 60 ? strlen(what) - 60 : 0));
        t->shown = 1;
        t->last_ms = now;
    }
    fflush(stderr);
}

static int cmd_check(int argc, char **argv)
{
    static char lua_dir[] = STRAIT_LUA_DIR;
    static char *const lua_dirs[] = {lua_dir};
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    int json = 0, c, code = EXIT_OK;
    int mode = RES_REGISTRY_ONLY;
    struct bootstrap *bs = NULL;
    char *err = NULL;

    optind = 1;
    while ((c = getopt_long(argc, argv, "c:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            path = optarg;
            break;
        case 'o':
            if (strcmp(optarg, "json") != 0 && strcmp(optarg, "text") != 0) {
                fprintf(stderr, "strait: -o takes text or json, not '%s'\n",
                        optarg);
                return EXIT_USAGE;
            }
            json = strcmp(optarg, "json") == 0;
            break;
        case 'h':
            usage_check(stdout);
            return EXIT_OK;
        default:
            usage_check(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind == argc && path == NULL)
        path = DEFAULT_CONFIG;
    /* The bootstrap first: resources are analysed under its
     * outboundTrafficPolicy. */
    if (path != NULL) {
        bs = bootstrap_load(path, &err);
        if (bs == NULL) {
            fprintf(stderr, "%s\n", err ? err : "invalid configuration");
            free(err);
            return EXIT_CONFIG;
        }
        mode = bs->outbound.mode;
    }
    /* Resource paths: each is checked and reported on its own. */
    /* With -c, the node's namespace and labels: what selects nothing on
     * this node is said (IST0127). */
    {
        struct analysis_node node = {0};
        if (bs != NULL) {
            node.name = bs->node.name;
            node.ns = bs->node.ns;
            node.labels = &bs->node.labels;
            node.service = bs->node.service;
            node.root_ns = "istio-system";
            node.credentials_dir = bs->credentials.dir;
            node.default_ns = bs->config.default_ns;
            node.network = bs->node.network;
            node.mesh = &bs->mesh_networks;
            node.bootstrap_file = path;
            /* What `strait run` searches for a source.file. */
            node.lua_path = bs->lua.path.n > 0 ? bs->lua.path.v : lua_dirs;
            node.nlua_path = bs->lua.path.n > 0 ? bs->lua.path.n : 1;
        }
        struct check_tty tty = {0, 0};
        struct res_progress progress = {check_progress, &tty};
        int on_tty = isatty(STDERR_FILENO);
        for (int i = optind; i < argc; i++)
            if (resource_check_progress(argv[i], json, mode,
                                        bs != NULL ? &node : NULL,
                                        on_tty ? &progress : NULL, stdout) != 0)
                code = EXIT_CONFIG;
    }
    if (bs == NULL)
        return code;
    /* With -o json, stdout holds JSON only. */
    if (!json || optind == argc)
        printf("%s: valid (%zu listener(s), %d worker(s))\n", path,
               bs->listeners.n, bootstrap_workers(bs));
    bootstrap_free(bs);
    return code;
}

static int cmd_version(int argc, char **argv)
{
    int lmaj, lmin, lpat;

    if (argc > 1 &&
        (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: strait version\n\nPrints strait's version and the "
               "versions of the libraries it runs with.\n");
        return EXIT_OK;
    }
    if (argc > 1) {
        fprintf(stderr, "strait: version takes no arguments\n");
        return EXIT_USAGE;
    }
    yaml_get_version(&lmaj, &lmin, &lpat);
    printf("strait %s\n", PACKAGE_VERSION);
    printf("  boringssl  %s (API %d)\n", OpenSSL_version(OPENSSL_VERSION),
           BORINGSSL_API_VERSION);
    printf("  libevent   %s\n", event_get_version());
    printf("  nghttp2    %s\n", nghttp2_version(0)->version_str);
    printf("  lua        %s (runtime %.0f)\n", LUA_RELEASE,
           (double)lua_version(NULL));
    printf("  maxminddb  %s\n", MMDB_lib_version());
    printf("  libyaml    %d.%d.%d\n", lmaj, lmin, lpat);
    return EXIT_OK;
}

static int cmd_reference(int argc, char **argv)
{
    struct buf b;

    if (argc > 1 && strcmp(argv[1], "lua") == 0 && argc == 2) {
        buf_init(&b, 1024 * 1024);
        res_lua_reference(&b);
        fwrite(buf_ptr(&b), 1, buf_len(&b), stdout);
        buf_dispose(&b);
        return EXIT_OK;
    }
    if (argc > 1 && strcmp(argv[1], "kubernetes") == 0 && argc == 2) {
        buf_init(&b, 1024 * 1024);
        res_k8s_reference(&b);
        fwrite(buf_ptr(&b), 1, buf_len(&b), stdout);
        buf_dispose(&b);
        return EXIT_OK;
    }
    if (argc == 2 &&
        (strcmp(argv[1], "codes") == 0 || strcmp(argv[1], "access-log") == 0)) {
        buf_init(&b, 1024 * 1024);
        if (argv[1][0] == 'c')
            res_codes_reference(&b);
        else
            afmt_reference(&b);
        fwrite(buf_ptr(&b), 1, buf_len(&b), stdout);
        buf_dispose(&b);
        return EXIT_OK;
    }
    if (argc > 1) {
        printf("usage: strait reference [kubernetes|lua|codes|access-log]"
               "\n\nLists every bootstrap key (or, with kubernetes, every "
               "key of the Kubernetes kinds strait reads; with lua, every "
               "LuaPolicy key and Lua budget): path, type, default and "
               "help, tab-separated. codes lists the analyzer codes of "
               "strait check (code, name); access-log the access log's "
               "%%OPERATORS%% (name, form, JSON type).\n");
        return strcmp(argv[1], "--help") == 0 ? EXIT_OK : EXIT_USAGE;
    }
    buf_init(&b, 1024 * 1024);
    conf_reference(&bootstrap_section, &b);
    fwrite(buf_ptr(&b), 1, buf_len(&b), stdout);
    buf_dispose(&b);
    return EXIT_OK;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    (void)arg;
    if (sig == SIGHUP) {
        log_info("SIGHUP: reloading");
        loop_reload_bootstrap(main_loop);
        return;
    }
    if (sig == SIGUSR1) {
        if (main_loop != NULL)
            loop_reopen_logs(main_loop);
        return;
    }
    if (sig == SIGUSR2) {
        char *why = NULL;
        int pid;
        log_info("SIGUSR2: binary upgrade");
        if (loop_upgrade(main_loop, &pid, &why) < 0)
            log_error("upgrade refused: %s", why ? why : "out of memory");
        free(why);
        return;
    }
    /* A second SIGTERM or SIGINT stops at once, for impatient operators. */
    if (main_signals_seen++ > 0) {
        log_warn("%s again: stopping now", strsignal((int)sig));
        event_base_loopbreak(main_base);
        return;
    }
    atomic_store(&main_drain_started, 1);
    loop_drain(main_loop, strsignal((int)sig));
}

/*
 * libevent hands a signal to the control loop, which only sees it between
 * two callbacks: a long callback (a rebuild of a very large snapshot)
 * would hold SIGTERM past drainTimeout. Our handler runs first, in
 * whatever the thread is doing: it wakes the stop guard (sem_post is
 * async-signal-safe) and then runs libevent's handler as before.
 */
static void on_stop_signal(int sig)
{
    int saved = errno;
    const struct sigaction *ev = sig == SIGTERM ? &main_ev_term : &main_ev_int;

    /* A lock-free atomic store is async-signal-safe. */
    __atomic_store_n(&main_stop_flag, 1, __ATOMIC_RELAXED);
    if (!main_stop_posted) {
        main_stop_posted = 1;
        sem_post(&main_stop_sem);
    }
    errno = saved;
    if (ev->sa_handler != SIG_DFL && ev->sa_handler != SIG_IGN)
        ev->sa_handler(sig);
}

/*
 * stop_guard() is a thread that sleeps until the first SIGTERM or SIGINT
 * and then for drainTimeout (as the bootstrap said at start; at least a
 * second, so that a drainTimeout of 0 still lets a free control loop exit
 * its own way). If the control loop has not even begun the drain by then
 * (it was busy the whole time), the process ends here: a stop is never
 * held past drainTimeout by anything the control thread does.
 */
static void *stop_guard(void *arg)
{
    static const char msg[] = "strait: drainTimeout passed while the control "
                              "thread was busy; exiting now\n";
    struct timespec ts;

    (void)arg;
    while (sem_wait(&main_stop_sem) != 0 && errno == EINTR)
        ;
    ts.tv_sec = (time_t)(main_stop_ms / 1000);
    ts.tv_nsec = (long)(main_stop_ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    /* A control loop that began its drain keeps its own deadline. */
    if (atomic_load(&main_stopped) || atomic_load(&main_drain_started))
        return NULL;
    if (write(2, msg, sizeof(msg) - 1) < 0)
        _exit(EXIT_OK);
    _exit(EXIT_OK);
}

/* stop_guard_start() chains our handler before libevent's (installed by
 * event_add) and starts the guard; the caller blocks every signal so the
 * thread never takes one. Returns 0 or -1. */
static int stop_guard_start(int64_t drain_ms)
{
    struct sigaction sa;
    pthread_t t;

    main_stop_ms = drain_ms > 1000 ? drain_ms : 1000;
    if (sem_init(&main_stop_sem, 0, 0) < 0 ||
        sigaction(SIGTERM, NULL, &main_ev_term) < 0 ||
        sigaction(SIGINT, NULL, &main_ev_int) < 0)
        return -1;
    if (pthread_create(&t, NULL, stop_guard, NULL) != 0)
        return -1;
    pthread_detach(t);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = main_ev_term.sa_flags & ~SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0)
        return -1;
    return 0;
}

/* Options of run: -c, --join, --token. NULL after help or a usage error
 * (*code set). */
static const char *parse_run_opts(int argc, char **argv, const char **join,
                                  const char **token, int *code)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"join", required_argument, NULL, 'j'},
        {"token", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = DEFAULT_CONFIG;
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "c:j:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            path = optarg;
            break;
        case 'j':
            *join = optarg;
            break;
        case 't':
            *token = optarg;
            break;
        case 'h':
            usage_run(stdout);
            *code = EXIT_OK;
            return NULL;
        default:
            usage_run(stderr);
            *code = EXIT_USAGE;
            return NULL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "strait: unexpected argument '%s'\n", argv[optind]);
        usage_run(stderr);
        *code = EXIT_USAGE;
        return NULL;
    }
    return path;
}

/*
 * raise_nofile() raises the soft limit on open files to the hard limit: a
 * gateway holds two descriptors per proxied connection, and the soft
 * default (1024 under systemd) is far below what the hard limit allows
 * (524288 under systemd). Logs what it set; a failure is a warning.
 */
static void raise_nofile(void)
{
    struct rlimit rl;
    rlim_t was;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        log_warn("cannot read the open-file limit: %s", strerror(errno));
        return;
    }
    if (rl.rlim_cur >= rl.rlim_max) {
        log_info("open-file limit (RLIMIT_NOFILE): %llu",
                 (unsigned long long)rl.rlim_cur);
        return;
    }
    was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        log_warn("cannot raise the open-file limit from %llu to %llu: %s",
                 (unsigned long long)was, (unsigned long long)rl.rlim_max,
                 strerror(errno));
        return;
    }
    log_info("open-file limit (RLIMIT_NOFILE) raised from %llu to %llu",
             (unsigned long long)was, (unsigned long long)rl.rlim_cur);
}

/*
 * self_exe() is the executable a binary upgrade starts by default, as
 * an absolute path to look up again at upgrade time (so a package that
 * replaced the file is what starts): argv[0] when it is absolute, made
 * absolute against the working directory when relative (Kong could not
 * upgrade with a relative one), and /proc/self/exe when it came from
 * PATH. NULL when unknown. Allocated.
 */
static char *self_exe(void)
{
    char cwd[4096], buf[4096 + 1];
    ssize_t n;

    if (main_argv0 != NULL && main_argv0[0] == '/')
        return strdup(main_argv0);
    if (main_argv0 != NULL && strchr(main_argv0, '/') != NULL &&
        getcwd(cwd, sizeof(cwd)) != NULL) {
        size_t len = strlen(cwd) + 1 + strlen(main_argv0) + 1;
        char *p = malloc(len);
        if (p != NULL)
            snprintf(p, len, "%s/%s", cwd, main_argv0);
        return p;
    }
    n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    return strdup(buf);
}

/* A start-up failure: said on stderr and, when a binary upgrade started
 * this process, to the process that keeps serving. */
/*
 * restart_epoch() finds Envoy's restart epoch for /server_info: a process
 * a binary upgrade started is one more than the one it replaces, which
 * left its own in the environment, with the second epoch 0 started. The
 * values are put back in this process's environment (before any thread
 * runs) for the process that will replace this one.
 */
#define EPOCH_ENV "STRAIT_RESTART_EPOCH"
#define EPOCH0_ENV "STRAIT_EPOCH0_START"
static void restart_epoch(int upgraded, int *epoch, int64_t *epoch0)
{
    const char *e = getenv(EPOCH_ENV), *s = getenv(EPOCH0_ENV);
    char v[32];

    if (upgraded && e != NULL && s != NULL) {
        char *end;
        long n = strtol(e, &end, 10);
        long long t;
        if (*end == '\0' && n >= 0 && n < 1000000000) {
            t = strtoll(s, &end, 10);
            if (*end == '\0' && t > 0) {
                *epoch = (int)n + 1;
                *epoch0 = (int64_t)t;
            }
        }
    }
    snprintf(v, sizeof(v), "%d", *epoch);
    setenv(EPOCH_ENV, v, 1);
    snprintf(v, sizeof(v), "%lld", (long long)*epoch0);
    setenv(EPOCH0_ENV, v, 1);
}

static void run_failed(int *ufd, const char *msg)
{
    fprintf(stderr, "strait: %s\n", msg);
    if (*ufd >= 0) {
        upgrade_child_fail(*ufd, msg);
        close(*ufd);
        *ufd = -1;
    }
}

static int cmd_run(int argc, char **argv)
{
    int code = EXIT_OK;
    const char *join = NULL, *token = NULL;
    const char *path = parse_run_opts(argc, argv, &join, &token, &code);
    struct ca_node_conf cnc;
    struct ca_node *node = NULL;
    /* The main thread's deferred-free list (the workers have their own). */
    struct reaper reaper;
    struct event *sigs[5] = {NULL, NULL, NULL, NULL, NULL};
    const int signums[5] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};
    struct bootstrap *bs;
    struct sock_pool inherited;
    struct loop_start start;
    sigset_t block, old;
    char *err = NULL;
    int config_error = 0;
    /* Set when a binary upgrade started this process. */
    int ufd = upgrade_child_fd();
    pid_t parent = 0;
    int epoch = 0;
    int64_t epoch0 = (int64_t)time(NULL);

    sock_pool_init(&inherited);
    restart_epoch(ufd >= 0, &epoch, &epoch0);
    if (path == NULL) {
        run_failed(&ufd, "bad command line");
        return code;
    }
    bs = bootstrap_load(path, &err);
    if (bs == NULL) {
        fprintf(stderr, "%s\n", err ? err : "invalid configuration");
        upgrade_child_fail(ufd, err ? err : "invalid configuration");
        free(err);
        return EXIT_CONFIG;
    }
    log_configure((enum log_level)bs->log.level,
                  (enum log_format)bs->log.format, 2);
    raise_nofile();
    signal(SIGPIPE, SIG_IGN);
    /* Before anything binds: the sockets of the process being upgraded. */
    if (ufd >= 0 && upgrade_child_receive(ufd, bootstrap_workers(bs),
                                          (uint64_t)bs->upgrade.timeout_ms,
                                          &inherited, &parent, &err) < 0) {
        log_error("upgrade: %s", err ? err : "cannot take the sockets over");
        run_failed(&ufd, err ? err : "cannot take the sockets over");
        free(err);
        bootstrap_free(bs);
        return EXIT_RUNTIME;
    }
    main_base = event_base_new();
    if (main_base == NULL) {
        fprintf(stderr, "strait: cannot create the event loop\n");
        bootstrap_free(bs);
        return EXIT_RUNTIME;
    }
    reaper_init(&reaper, main_base);
    for (int i = 0; i < 5; i++) {
        sigs[i] = evsignal_new(main_base, signums[i], on_signal, NULL);
        if (sigs[i] == NULL || event_add(sigs[i], NULL) < 0) {
            fprintf(stderr, "strait: cannot install signal handlers\n");
            code = EXIT_RUNTIME;
            goto done;
        }
    }
    /* The node's certificate comes first: a joining node that cannot get
     * one should fail before it binds anything. Command-line values win
     * over ca.join in the file. */
    ca_node_conf_init(&cnc, bs);
    cnc.inherited = &inherited;
    if (join != NULL)
        cnc.join_url = join;
    if (token != NULL)
        cnc.join_token = token;
    if (token != NULL && (cnc.join_url == NULL || cnc.join_url[0] == '\0')) {
        fprintf(stderr, "strait: --token needs --join URL (or "
                        "ca.join.address)\n");
        bootstrap_free(bs);
        code = EXIT_USAGE;
        goto done;
    }
    if (join != NULL && cnc.istiod_address != NULL &&
        cnc.istiod_address[0] != '\0') {
        fprintf(stderr, "strait: --join: this node gets its certificate "
                        "from istiod (ca.istiod.address)\n");
        bootstrap_free(bs);
        code = EXIT_USAGE;
        goto done;
    }
    if (cnc.enabled && join != NULL) {
        fprintf(stderr, "strait: --join: this node runs the CA "
                        "(ca.enabled)\n");
        bootstrap_free(bs);
        code = EXIT_USAGE;
        goto done;
    }
    if (ca_node_wanted(&cnc)) {
        node = ca_node_new(main_base, &reaper, &cnc, &err);
        if (node == NULL) {
            err_prefix(&err, "CA: ");
            run_failed(&ufd, err ? err : "CA: cannot start");
            log_error("%s", err ? err : "CA: cannot start");
            free(err);
            bootstrap_free(bs);
            code = EXIT_RUNTIME;
            goto done;
        }
    }
    /* Workers inherit a mask that blocks these signals, so only the main
     * thread receives them. */
    sigemptyset(&block);
    for (int i = 0; i < 5; i++)
        sigaddset(&block, signums[i]);
    sigaddset(&block, SIGCHLD);
    start.self_exe = self_exe();
    start.inherited = &inherited;
    start.parent_fd = ufd;
    start.restart_epoch = epoch;
    start.epoch0_start_s = epoch0;
    start.stop = &main_stop_flag;
    pthread_sigmask(SIG_BLOCK, &block, &old);
    if (stop_guard_start(bs->drain_timeout_ms) < 0)
        log_warn("cannot start the stop guard: a busy control thread may "
                 "hold SIGTERM past drainTimeout");
    main_loop =
        loop_new(main_base, bs, path, node, &start, &config_error, &err);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    free((char *)start.self_exe);
    if (main_loop == NULL) {
        run_failed(&ufd, err ? err : "cannot start");
        log_error("cannot start: %s", err ? err : "unknown error");
        free(err);
        code = config_error ? EXIT_CONFIG : EXIT_RUNTIME;
        goto done;
    }
    ufd = -1; /* the loop's now */
    {
        size_t n = sock_pool_close_rest(&inherited);
        if (n > 0)
            log_info("upgrade: closed %zu handed-over socket(s) this "
                     "configuration does not listen on",
                     n);
    }
    if (node != NULL) {
        const struct ca_node_conf *c = &cnc;
        if (loop_handoff_add(main_loop, SOCK_POOL_CA, &c->address,
                             ca_node_listen_fd(node)) < 0 &&
            ca_node_listen_fd(node) >= 0)
            log_warn("upgrade: the CA's socket will not be handed over");
    }
    event_base_dispatch(main_base);
    atomic_store(&main_stopped, 1);
    loop_free(main_loop);
    main_loop = NULL;
    log_info("exit");
done:
    if (code != EXIT_OK && ufd >= 0)
        run_failed(&ufd, "cannot start; its log says why");
    sock_pool_dispose(&inherited);
    ca_node_free(node);
    for (int i = 0; i < 5; i++)
        if (sigs[i] != NULL)
            event_free(sigs[i]);
    reaper_dispose(&reaper);
    event_base_free(main_base);
    main_base = NULL;
    return code;
}

int main(int argc, char **argv)
{
    const char *cmd;

    if (argc < 2) {
        usage_main(stderr);
        return EXIT_USAGE;
    }
    main_argv0 = argv[0];
    cmd = argv[1];
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "check") == 0)
        return cmd_check(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0)
        return cmd_version(argc - 1, argv + 1);
    if (strcmp(cmd, "reference") == 0)
        return cmd_reference(argc - 1, argv + 1);
    if (strcmp(cmd, "reload") == 0)
        return reload_cli_main(argc - 1, argv + 1, DEFAULT_CONFIG);
    if (strcmp(cmd, "upgrade") == 0)
        return upgrade_cli_main(argc - 1, argv + 1, DEFAULT_CONFIG);
    if (strcmp(cmd, "ca") == 0)
        return ca_cli_main(argc - 1, argv + 1, DEFAULT_CONFIG);
    if (strcmp(cmd, "link") == 0)
        return link_cli_main(argc - 1, argv + 1, DEFAULT_CONFIG);
    if (strcmp(cmd, "apply") == 0 || strcmp(cmd, "delete") == 0 ||
        strcmp(cmd, "get") == 0)
        return etcd_cli_main(cmd, argc - 1, argv + 1, DEFAULT_CONFIG);
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 ||
        strcmp(cmd, "-h") == 0) {
        usage_main(stdout);
        return EXIT_OK;
    }
    fprintf(stderr, "strait: unknown command '%s'\n", cmd);
    usage_main(stderr);
    return EXIT_USAGE;
}
