#include "config.h"

#include <errno.h>
#include <malloc.h>
#include <event2/event.h>
#include <inttypes.h>
#include <openssl/x509.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "admin/admin.h"
#include "compile/compile.h"
#include "compile/istio.h"
#include "compile/snapshot.h"
#include "config/analyze.h"
#include "config/bootstrap.h"
#include "config/resource-t.h"
#include "config/res-k8s.h"
#include "config/resource.h"
#include "control/ca/ca_node.h"
#include "control/ca/identity.h"
#include "control/ca/mesh_roots.h"
#include "control/dirwatch.h"
#include "control/dns.h"
#include "control/jwks.h"
#include "control/link/link_server.h"
#include "control/link/links.h"
#include "control/loop.h"
#include "control/notify.h"
#include "control/otlp.h"
#include "control/source_dir.h"
#include "control/upgrade.h"
#include "core/series.h"
#include "control/source_etcd.h"
#include "control/source_kube.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/geoip.h"
#include "core/json.h"
#include "core/log.h"
#include "event/logsink.h"
#include "event/spanq.h"
#include "event/mq.h"
#include "event/reap.h"
#include "event/timer.h"
#include "net/listener.h"
#include "net/overload.h"
#include "net/sock_pool.h"
#include "net/worker.h"
#include "policy/lua_dict.h"
#include "policy/lua_vm.h"
#include "proxy/http_listener.h"
#include "proxy/router.h"
#include "upstream/cluster.h"

/* What is waiting for the workers to acknowledge the last publish. */
enum {
    PENDING_REBUILD = 1,   /* rebuild from the inputs in effect */
    PENDING_BOOTSTRAP = 2, /* re-read the bootstrap, then rebuild */
};

struct loop {
    struct event_base *base;
    /* LuaPolicy shared dicts by name: they outlive snapshots, so their
     * contents survive a reload (policy/lua_dict.h). */
    struct luadict_set *dicts;
    struct mq *inbox;
    char *config_path;
    int nworkers;
    struct worker *workers;
    /* The bootstrap in effect, owned; rebuilds use it, only a bootstrap
     * reload replaces it. */
    struct bootstrap *bs;
    struct snapshot *cur;     /* what workers run (or are switching to) */
    struct snapshot *old;     /* the one before, released once workers ack */
    struct bootstrap *old_bs; /* old's bootstrap when bs replaced it */
    int acks_pending;
    int pending; /* PENDING_* requested while acks were pending */
    struct admin *admin;
    /* metrics.address and readiness.address (NULL: none). */
    struct admin *metrics_port;
    struct admin *ready_port;
    /* Istio's metrics, one table per worker; NULL: metrics.enabled is
     * false. Freed last, once no worker or snapshot uses it. */
    struct series_table *metrics;
    /* GeoIP databases (bootstrap geoip; NULL: none), freed last like
     * metrics, and the watches of their directories. */
    struct geoip *geoip;
    struct dirwatch *geoip_watch[GEOIP_NDB];
    uint64_t start_ms;
    int restart_epoch;      /* Envoy's /server_info restart_epoch */
    int64_t epoch0_start_s; /* wall clock: when epoch 0 started */
    uint64_t reloads_ok;    /* bootstrap reloads (SIGHUP, POST /reload) */
    uint64_t reloads_failed;
    char *last_reload_error;
    uint64_t rebuilds_ok; /* rebuilds for resource, DNS, JWKS changes */
    uint64_t rebuilds_failed;
    char *last_rebuild_error;
    int draining;
    int stopping; /* loop_free: acknowledgements are only freed */
    int stopped_accepting;
    int idle_workers;
    struct timer drain_timer;
    struct timer drain_window_timer; /* the end of drainWindow */
    struct timer cert_timer;
    struct source *source;    /* Istio resources; NULL without config.dir,
                               * config.etcd or config.kubernetes */
    struct source_etcd *etcd; /* config.etcd; its keys feed source */
    struct source_kube *kube; /* config.kubernetes; feeds source */
    int kube_ready;           /* every kind listed and built once: latched */
    struct admin_kube_kind kube_kinds[SOURCE_KUBE_MAX_KINDS];
    struct dns_cache *dns;        /* ServiceEntry names; with source only */
    struct jwks_cache *jwks;      /* jwksUri key sets; with source only */
    struct ca_node *ca_node;      /* this node's PKI; NULL: no CA */
    struct ca_identity *identity; /* the mesh certificate; NULL: no CA */
    /* ca.istiod.rootCert's roots, watched; NULL: not istiod's. */
    struct mesh_roots *mesh_roots;
    uint64_t cert_reloads;
    uint64_t cert_reload_failures;
    /* The caches above as compile/ reads them. */
    struct compile_dns dns_fn;
    struct compile_identity identity_fn;
    struct compile_jwks jwks_fn;
    /* The service manager (systemd Type=notify): see "Service manager
     * notifications" below. */
    struct notify notify;
    int ready_sent;
    struct lsink *alog;     /* the access log's writer thread */
    struct spanq *spans;    /* finished spans; NULL: no tracing */
    struct otlp *otlp;      /* their exporter */
    uint64_t watchdog_usec; /* 0: no watchdog */
    struct timer watchdog_timer;
    int watchdog_due; /* WORKER_ALIVE answers still due this round */
    /* The process's connection limit: every listener's counts under it,
     * and it carries the memory actions in effect to the workers. */
    struct cx_limit *cx_root;
    /* The memory actions: see "Overload" below. */
    struct timer overload_timer;
    uint64_t memory_used; /* resident bytes at the last check */
    unsigned overload;    /* OVERLOAD_BIT()s in effect */
    uint64_t overload_activations[OVERLOAD_NACTIONS];
    /* Binary upgrade (control/upgrade.h), see "Binary upgrade" below. */
    char *self_exe;              /* NULL: unknown */
    struct sock_pool *inherited; /* the first build only */
    int parent_fd;               /* the new process, until 'K'; -1 */
    const int *stop;             /* loop_start.stop */
    struct event *parent_ev;
    struct upgrade *up; /* the last one, until the next or loop_free */
    int upgrade_pid;
    uint64_t upgrades_ok;
    uint64_t upgrades_failed;
    char *last_upgrade_error;
    struct upgrade_fd extra[4]; /* loop_handoff_add() */
    size_t nextra;
    /* Site links (control/link/): this site's MeshLinks and its catalog
     * API; their registry entries join the source's inputs. */
    struct links *links;
    struct link_server *link_server; /* NULL without links.address */
    struct res_input *inputs;        /* etcd's then the links' */
    size_t inputs_cap;
    /* etcd, Kubernetes or a link changed: one reload for all the changes
     * gathered (config.debounce), at most config.maxRebuildsPerSecond. */
    struct timer links_timer;
    uint64_t reload_done_ms;   /* clock_ms() at the end of the last one */
    uint64_t reloads_gathered; /* change notices taken by a later reload */
    /* A load runs on the builder thread; a change came meanwhile; the
     * Kubernetes kinds were all listed when it started. */
    int loading, reload_again, load_synced;
    /* etcd's prefix was read when the load in progress began, and a load
     * begun so has ended (the fleet's resources are built, its listeners
     * bound): ready needs both, not the read alone, now that the load
     * runs on a builder thread while readiness is answered. */
    int load_etcd_synced, etcd_built;
    struct net_gateway *link_gws; /* the MeshLinks' gateways, per build */
    size_t link_gws_cap;
    struct reaper reaper; /* closed catalog API connections */
};

/* A change in a directory that holds a GeoIP database: the files whose
 * identity moved are opened and swapped in (core/geoip.h). */
static void on_geoip_change(void *arg)
{
    struct loop *s = arg;

    geoip_reload(s->geoip);
}

static int str_same(const char *a, const char *b)
{
    return strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0;
}

static int geoip_conf_equal(const struct bootstrap_geoip *a,
                            const struct bootstrap_geoip *b)
{
    for (int i = 0; i < GEOIP_NDB; i++)
        if (!str_same(a->db[i], b->db[i]))
            return 0;
    for (int i = 0; i < GEOIP_NFIELDS; i++)
        if (!str_same(a->headers[i], b->headers[i]))
            return 0;
    return 1;
}

/*
 * geoip_start() opens the bootstrap's GeoIP databases (a file that does
 * not open stops the start) and watches the directories that hold them:
 * a file renamed into place is opened and swapped in.
 */
static int geoip_start(struct loop *s, struct event_base *base,
                       const struct bootstrap *bs, char **err)
{
    const char *paths[GEOIP_NDB];
    char dirs[GEOIP_NDB][4096];
    int any = 0, nd = 0;

    for (int i = 0; i < GEOIP_NDB; i++) {
        paths[i] = bs->geoip.db[i];
        any |= paths[i] != NULL && paths[i][0] != '\0';
    }
    if (!any)
        return 0;
    s->geoip = geoip_new(paths, s->nworkers, err);
    if (s->geoip == NULL)
        return -1;
    for (int i = 0; i < GEOIP_NDB; i++) {
        const char *p = paths[i], *slash;
        int seen = 0;
        if (p == NULL || p[0] == '\0')
            continue;
        slash = strrchr(p, '/');
        if (slash == NULL)
            snprintf(dirs[nd], sizeof(dirs[nd]), ".");
        else if (slash == p)
            snprintf(dirs[nd], sizeof(dirs[nd]), "/");
        else
            snprintf(dirs[nd], sizeof(dirs[nd]), "%.*s", (int)(slash - p), p);
        for (int k = 0; k < nd; k++)
            seen |= strcmp(dirs[k], dirs[nd]) == 0;
        if (seen)
            continue;
        s->geoip_watch[nd] =
            dirwatch_new(base, dirs[nd], 100, on_geoip_change, s);
        if (s->geoip_watch[nd] == NULL)
            return err_set(err, "geoip: cannot watch %s: %s", dirs[nd],
                           strerror(errno));
        nd++;
    }
    return 0;
}

static size_t dns_lookup(void *arg, const char *name,
                         void (*each)(void *ctx, const char *ip), void *ctx)
{
    return dns_cache_lookup(arg, name, each, ctx);
}

static size_t dns_lookup_min(void *arg, const char *name, uint64_t min_ttl_ms,
                             void (*each)(void *ctx, const char *ip), void *ctx)
{
    return dns_cache_lookup_min(arg, name, min_ttl_ms, each, ctx);
}

static int identity_current(void *arg, X509 **root)
{
    struct ca_cred *cred = ca_identity_current(arg);

    *root = NULL;
    if (cred == NULL)
        return 0;
    *root = ca_cred_root(cred);
    if (*root != NULL)
        X509_up_ref(*root);
    ca_cred_unref(cred);
    return 1;
}

static const char *jwks_get(void *arg, const char *uri, int64_t timeout_ms,
                            size_t *n)
{
    return jwks_cache_get(arg, uri, timeout_ms, n);
}

static void arm_cert_timer(struct loop *s);

static const struct resource_set *source_current_or_null(const struct loop *s)
{
    return s->source != NULL ? source_current(s->source) : NULL;
}

/* Every worker serves cur: what only old held can go. */
static void release_old(struct loop *s)
{
    snapshot_unref(s->old);
    s->old = NULL;
    bootstrap_free(s->old_bs);
    s->old_bs = NULL;
}

/*
 * build() compiles the inputs in effect under bs (the bootstrap in
 * effect, or the one a reload just read) into *out, reusing what cur
 * runs. On failure nothing in effect changes.
 */
static int build(struct loop *s, const struct bootstrap *bs,
                 struct snapshot **out, char **err)
{
    const struct jwks_conf jc = {bs->jwt.jwks_refresh_ms, bs->jwt.jwks_ca_file};
    struct compile_inputs in;

    memset(&in, 0, sizeof(in));
    in.bs = bs;
    in.set = source_current_or_null(s);
    in.nworkers = s->nworkers;
    in.dns = s->dns != NULL ? &s->dns_fn : NULL;
    in.identity = s->identity != NULL ? &s->identity_fn : NULL;
    in.jwks = s->jwks != NULL ? &s->jwks_fn : NULL;
    in.alog_sink = s->alog;
    in.metrics = s->metrics;
    in.cx_root = s->cx_root;
    in.spans = s->spans;
    in.inherited = s->inherited;
    in.stop = s->stop;
    in.dicts = s->dicts;
    in.geoip = s->geoip;
    /* The gateways of linked sites' networks (MeshLink). */
    if (s->links != NULL) {
        in.ngateways = links_gateways(s->links, &s->link_gws, &s->link_gws_cap);
        in.gateways = s->link_gws;
        /* ISTIO_MUTUAL to their services trusts their bundles' roots. */
        s->identity_fn.link_roots =
            links_roots(s->links, &s->identity_fn.link_roots_pin);
    }
    /* ISTIO_MUTUAL trusts every root of istiod's root file. */
    if (s->mesh_roots != NULL)
        s->identity_fn.mesh_roots =
            mesh_roots_get(s->mesh_roots, &s->identity_fn.mesh_roots_pin);
    if (s->dns != NULL)
        dns_cache_mark(s->dns);
    if (s->jwks != NULL) {
        if (jwks_cache_configure(s->jwks, &jc) < 0) {
            err_set(err, "out of memory");
            return -1;
        }
        jwks_cache_mark(s->jwks);
    }
    if (snapshot_build(&in, s->cur, out, err) < 0)
        return -1;
    /* Names this snapshot no longer uses are dropped. */
    if (s->dns != NULL)
        dns_cache_sweep(s->dns);
    if (s->jwks != NULL)
        jwks_cache_sweep(s->jwks);
    return 0;
}

/*
 * loop_publish() makes next the snapshot in effect (it takes the
 * reference): the difference from cur is logged and handed to every
 * worker, which keeps the listeners kept, starts the added and changed
 * ones (a changed one on the sockets and with what it can inherit of the
 * one it replaces) and retires the rest; kept Gateway listeners take
 * the routes next staged for them (snapshot_commit()). cur becomes old
 * until every worker has acknowledged.
 */
static void loop_publish(struct loop *s, struct snapshot *next)
{
    struct snapshot_diff d;
    char as[ADDR_STRLEN];

    snapshot_commit(next);

    if (snapshot_diff(s->cur, next, &d) < 0) {
        d.v = NULL;
        d.n = 0;
        log_error("publish: out of memory computing the difference");
    }
    for (size_t i = 0; i < d.n; i++) {
        const struct snapshot_change_entry *e = &d.v[i];
        if (e->change == SNAPSHOT_ADDED || e->change == SNAPSHOT_CHANGED)
            log_info("listener %s: %s, %s on %s", e->next->name,
                     snapshot_change_name(e->change), e->next->cl.ops->name,
                     addr_format(&e->next->address, as, sizeof(as)));
        else if (e->change == SNAPSHOT_REMOVED)
            log_info("listener %s: removed", e->prev->name);
    }
    s->old = s->cur;
    s->cur = next;
    for (int w = 0; w < s->nworkers; w++) {
        struct worker_set *set =
            malloc(sizeof(*set) + next->n * sizeof(set->v[0]));
        if (set == NULL)
            goto oom;
        set->n = next->n;
        for (size_t i = 0; i < next->n; i++) {
            const struct snapshot_listener *l = &next->v[i];
            struct worker_slot *slot = &set->v[i];
            slot->ops = l->cl.ops;
            slot->conf = l->cl.conf;
            slot->name = l->name;
            slot->fd = listener_socks_fd(l->socks, w);
            slot->replaces = NULL;
        }
        /* Entries of next's listeners come first, in next's order. */
        for (size_t i = 0; i < d.n && i < next->n; i++)
            if (d.v[i].change == SNAPSHOT_CHANGED)
                set->v[i].replaces = d.v[i].prev->cl.conf;
        if (worker_apply(&s->workers[w], set) < 0) {
            free(set);
            goto oom;
        }
        s->acks_pending++;
    }
    snapshot_diff_dispose(&d);
    return;
oom:
    snapshot_diff_dispose(&d);
    log_error("publish: cannot reach every worker (out of memory)");
}

/*
 * Service manager notifications (sd_notify(3), systemd's Type=notify).
 * READY=1 once the first snapshot is in effect on every worker;
 * RELOADING=1 with MONOTONIC_USEC= when a bootstrap reload starts and
 * READY=1 with a STATUS= line when it ends, failed or not (systemd has no
 * "reload failed" message; systemd 252 ignores MONOTONIC_USEC, newer ones
 * pair the two with it); STOPPING=1 on drain; WATCHDOG=1 at half of
 * $WATCHDOG_USEC, only after every worker has answered a ping from its
 * own loop, so a stuck worker makes systemd restart strait.
 */
static void sd_start(struct loop *s)
{
    const char *why = NULL;

    if (notify_init(&s->notify, getenv("NOTIFY_SOCKET"), &why) < 0)
        log_warn("%s", why);
    if (!notify_enabled(&s->notify))
        return;
    s->watchdog_usec = notify_watchdog_usec(getenv("WATCHDOG_USEC"),
                                            getenv("WATCHDOG_PID"), getpid());
}

static void sd_send(struct loop *s, const char *msg)
{
    if (notify_send(&s->notify, msg) < 0)
        LOG_LIMITED(10000, LOG_WARN, "cannot notify the service manager: %s",
                    strerror(errno));
}

/* The length of msg's first line, at most 200 bytes: STATUS= is one. */
static int first_line(const char *msg)
{
    size_t n = strcspn(msg, "\n");

    return (int)(n > 200 ? 200 : n);
}

static void sd_status_ready(struct loop *s, const char *what)
{
    char msg[512];

    snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s: %zu listener(s) in effect",
             what, s->cur->n);
    sd_send(s, msg);
}

static void upgrade_child_serving(struct loop *s);

/* Every worker runs cur: the first time, strait is ready. A process an
 * upgrade started tells the old one instead, which tells systemd. */
static void sd_applied(struct loop *s)
{
    if (s->ready_sent || s->draining)
        return;
    s->ready_sent = 1;
    if (s->parent_fd >= 0) {
        upgrade_child_serving(s);
        return;
    }
    sd_status_ready(s, "serving");
}

static void sd_reloading(struct loop *s)
{
    char msg[256];

    snprintf(msg, sizeof(msg),
             "RELOADING=1\nSTATUS=reloading %s\nMONOTONIC_USEC=%llu",
             s->config_path, (unsigned long long)notify_monotonic_usec());
    sd_send(s, msg);
}

/* A bootstrap reload ended; err is NULL when it took effect. */
static void sd_reloaded(struct loop *s, const char *err)
{
    char msg[512];

    if (err == NULL) {
        sd_status_ready(s, "reloaded");
        return;
    }
    snprintf(msg, sizeof(msg),
             "READY=1\nSTATUS=reload failed, the running configuration "
             "stays: %.*s",
             first_line(err), err);
    sd_send(s, msg);
}

static void sd_stopping(struct loop *s, const char *why)
{
    char msg[256];

    snprintf(msg, sizeof(msg), "STOPPING=1\nSTATUS=draining (%s)", why);
    sd_send(s, msg);
}

/* Each round pings every worker; the answers send WATCHDOG=1. A round
 * still open at the next tick means a worker's loop is stuck: no
 * keep-alive then, and systemd acts at WATCHDOG_USEC. */
static void on_watchdog_timer(void *arg)
{
    struct loop *s = arg;

    if (s->watchdog_due > 0) {
        LOG_LIMITED(10000, LOG_ERROR,
                    "watchdog: %d worker(s) did not answer within %llu ms; "
                    "no keep-alive sent",
                    s->watchdog_due,
                    (unsigned long long)(s->watchdog_usec / 2000));
    } else {
        s->watchdog_due = s->nworkers;
        for (int w = 0; w < s->nworkers; w++)
            if (worker_ping(&s->workers[w]) < 0)
                log_error("watchdog: cannot ping worker %d (out of memory)", w);
    }
    timer_arm(&s->watchdog_timer, s->watchdog_usec / 2000);
}

static void sd_worker_alive(struct loop *s)
{
    if (s->watchdog_due > 0 && --s->watchdog_due == 0)
        sd_send(s, "WATCHDOG=1");
}

static void sd_watchdog_start(struct loop *s)
{
    if (s->watchdog_usec == 0)
        return;
    log_info("watchdog: keep-alive every %llu ms while the workers answer",
             (unsigned long long)(s->watchdog_usec / 2000));
    on_watchdog_timer(s);
}

/*
 * Overload: every overload.checkInterval the process's resident memory
 * is measured (/proc/self/statm, one small read) and the memory actions
 * in effect follow overload_eval(); workers see them through the root
 * connection limit with one relaxed load per accept or request. While
 * any is in effect, freed heap memory is handed back to the kernel
 * (malloc_trim, Envoy's shrink_heap), so resident memory falls as the
 * connections that used it close and the actions can end.
 */
static void overload_apply(struct loop *s, unsigned next)
{
    for (int a = 0; a < OVERLOAD_NACTIONS; a++) {
        unsigned bit = OVERLOAD_BIT(a);
        if ((next & bit) && !(s->overload & bit)) {
            s->overload_activations[a]++;
            log_warn("overload: %s on (memory %" PRIu64 " of %" PRId64
                     " bytes)",
                     overload_action_name(a), s->memory_used,
                     s->bs->overload.memory_limit);
        } else if (!(next & bit) && (s->overload & bit)) {
            log_info("overload: %s off (memory %" PRIu64 " of %" PRId64
                     " bytes)",
                     overload_action_name(a), s->memory_used,
                     s->bs->overload.memory_limit);
        }
    }
    s->overload = next;
    cx_set_overload(s->cx_root, next);
}

static void on_overload_timer(void *arg)
{
    struct loop *s = arg;
    const struct bootstrap_overload *o = &s->bs->overload;
    struct overload_conf c = {(uint64_t)o->memory_limit,
                              {(unsigned)o->stop_accepting_connections,
                               (unsigned)o->disable_keepalive,
                               (unsigned)o->stop_accepting_requests},
                              (unsigned)o->hysteresis};

    unsigned active;

    if (o->memory_limit <= 0)
        return;
    /* Workers turn actions on between ticks, as their buffers grow
     * (cx_set_memory_conf()): those count as in effect here, so that
     * they end with the same hysteresis; they are logged and counted
     * below as this tick's. */
    active = s->overload | cx_overload(s->cx_root);
    if (active != 0)
        malloc_trim(0);
    s->memory_used = overload_rss_bytes();
    overload_apply(s, overload_eval(&c, s->memory_used, active));
    timer_arm(&s->overload_timer, (uint64_t)o->check_interval_ms);
}

/* The bootstrap in effect changed: measure under its settings now. */
static void overload_configure(struct loop *s)
{
    const struct bootstrap_overload *o = &s->bs->overload;
    struct overload_conf c = {
        o->memory_limit > 0 ? (uint64_t)o->memory_limit : 0,
        {(unsigned)o->stop_accepting_connections,
         (unsigned)o->disable_keepalive, (unsigned)o->stop_accepting_requests},
        (unsigned)o->hysteresis};

    timer_cancel(&s->overload_timer);
    cx_set_memory_conf(s->cx_root, &c);
    if (s->bs->overload.memory_limit <= 0) {
        s->memory_used = 0;
        overload_apply(s, 0);
        return;
    }
    on_overload_timer(s);
}

static void drain_done(struct loop *s)
{
    log_info("drained; exiting");
    event_base_loopbreak(s->base);
}

static int loop_reload_bootstrap_now(struct loop *s);

/* Requests that came while workers acknowledged run now, in order: a
 * bootstrap reload rebuilds too; when it fails, a rebuild asked for on
 * its own still happens. */
static void run_pending(struct loop *s)
{
    int p = s->pending;

    s->pending = 0;
    if (p & PENDING_BOOTSTRAP) {
        if (loop_reload_bootstrap_now(s) < 0 && (p & PENDING_REBUILD))
            loop_rebuild(s);
    } else if (p & PENDING_REBUILD) {
        loop_rebuild(s);
    }
}

static void on_worker_event(void *arg, int worker, enum worker_event ev)
{
    struct loop *s = arg;

    (void)worker;
    if (s->stopping)
        return;
    switch (ev) {
    case WORKER_APPLIED:
        if (--s->acks_pending > 0)
            return;
        release_old(s);
        sd_applied(s);
        if (s->pending != 0 && !s->draining)
            run_pending(s);
        return;
    case WORKER_STOPPED_ACCEPT:
        if (++s->stopped_accepting < s->nworkers)
            return;
        /* No worker accepts any more: close the sockets so new connections
         * are refused by the kernel instead of waiting in a backlog. */
        log_info("drain: listeners closed");
        if (s->acks_pending == 0)
            release_old(s);
        snapshot_close_sockets(s->cur);
        return;
    case WORKER_IDLE:
        if (++s->idle_workers == s->nworkers)
            drain_done(s);
        return;
    case WORKER_ALIVE:
        sd_worker_alive(s);
        return;
    }
}

static void on_drain_deadline(void *arg)
{
    struct loop *s = arg;

    log_warn("drain deadline reached; closing the connections still open");
    for (int w = 0; w < s->nworkers; w++)
        worker_abort(&s->workers[w]);
    event_base_loopbreak(s->base);
}

/* The listeners stop accepting: now, or at the end of drainWindow. */
static void stop_accepting(struct loop *s)
{
    for (int w = 0; w < s->nworkers; w++)
        worker_drain(&s->workers[w]);
}

static void on_drain_window(void *arg)
{
    struct loop *s = arg;

    log_info("drain: window over, closing the listeners");
    stop_accepting(s);
}

void loop_drain(struct loop *s, const char *why)
{
    int64_t ms = s->bs->drain_timeout_ms, win = s->bs->drain_window_ms;

    if (s->draining)
        return;
    s->draining = 1;
    /* A load running on the builder thread stops; nothing new is built
     * while draining. */
    source_cancel(s->source);
    log_info("%s: draining (deadline %lld ms)", why, (long long)ms);
    sd_stopping(s, why);
    timer_arm(&s->drain_timer, (uint64_t)ms);
    if (win <= 0) {
        stop_accepting(s);
        return;
    }
    /* Envoy's way: keep accepting for a while, so clients that learn of
     * the drain late (a Kubernetes Service still sending here) lose
     * nothing; every connection is told to go after its request. */
    log_info("drain: accepting for %lld ms more; connections close after "
             "their current request",
             (long long)win);
    for (int w = 0; w < s->nworkers; w++)
        worker_drain_connections(&s->workers[w]);
    timer_arm(&s->drain_window_timer, (uint64_t)win);
}

static void set_error(char **slot, const char *msg)
{
    free(*slot);
    *slot = msg ? strdup(msg) : NULL;
}

/*
 * Binary upgrade, the old process's side. The new process gets every
 * socket cur listens on (one per worker per listener), the admin API's
 * and the CA's; once it serves, systemd learns its pid (MAINPID=, sent
 * from this process while it is still the main one, so NotifyAccess=main
 * is enough) and this process goes quiet towards systemd, stops
 * accepting on the admin socket and drains as on SIGTERM. The sockets
 * stay open in the new process, so closing ours refuses nothing.
 */
static void on_upgrade_ready(void *arg, pid_t pid)
{
    struct loop *s = arg;
    char msg[128];

    s->upgrades_ok++;
    set_error(&s->last_upgrade_error, NULL);
    log_info("upgrade: pid %d serves; this process (pid %d) drains", (int)pid,
             (int)getpid());
    snprintf(msg, sizeof(msg), "MAINPID=%d\nSTATUS=upgraded: pid %d serves",
             (int)pid, (int)pid);
    sd_send(s, msg);
    notify_dispose(&s->notify);
    timer_cancel(&s->watchdog_timer);
    s->watchdog_usec = 0;
    snapshot_keep_paths(s->cur);
    if (s->old != NULL)
        snapshot_keep_paths(s->old);
    admin_stop_accepting(s->admin);
    if (s->metrics_port != NULL)
        admin_stop_accepting(s->metrics_port);
    if (s->ready_port != NULL)
        admin_stop_accepting(s->ready_port);
    loop_drain(s, "upgrade");
}

static void on_upgrade_failed(void *arg, const char *why)
{
    struct loop *s = arg;
    char msg[512];

    if (why == NULL)
        why = "unknown reason";
    s->upgrades_failed++;
    set_error(&s->last_upgrade_error, why);
    log_error("upgrade failed, this process (pid %d) keeps serving: %s",
              (int)getpid(), why);
    snprintf(msg, sizeof(msg),
             "STATUS=upgrade failed, pid %d keeps serving: "
             "%.*s",
             (int)getpid(), first_line(why), why);
    sd_send(s, msg);
}

/* What the new process gets: cur's listeners (each set of sockets once),
 * the admin API, and what loop_handoff_add() named. */
static struct upgrade_fd *handoff_fds(struct loop *s, size_t *n)
{
    struct admin *ports[3] = {s->admin, s->metrics_port, s->ready_port};
    const struct addr *paddr[3] = {&s->bs->admin.address,
                                   &s->bs->metrics.address,
                                   &s->bs->readiness.address};
    const int pkind[3] = {ADMIN_PORT_ALL, ADMIN_PORT_METRICS, ADMIN_PORT_READY};
    size_t cap = s->nextra + 4, k = 0;
    struct upgrade_fd *v;

    for (size_t i = 0; i < s->cur->n; i++)
        if (s->cur->v[i].socks != NULL)
            cap += (size_t)s->cur->v[i].socks->nfds;
    v = calloc(cap, sizeof(*v));
    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < s->cur->n; i++) {
        const struct listener_socks *ls = s->cur->v[i].socks;
        int seen = 0;
        if (ls == NULL)
            continue;
        for (size_t j = 0; j < i && !seen; j++)
            seen = s->cur->v[j].socks == ls;
        for (int w = 0; !seen && w < ls->nfds; w++) {
            v[k].rec.kind = SOCK_POOL_LISTENER;
            v[k].rec.index = w;
            v[k].rec.addr = ls->addr;
            v[k++].fd = ls->fds[w];
        }
    }
    /* The admin API's ports: the index says which. */
    for (int i = 0; i < 3; i++) {
        int fd = ports[i] != NULL ? admin_listen_fd(ports[i]) : -1;
        if (fd < 0)
            continue;
        v[k].rec.kind = SOCK_POOL_ADMIN;
        v[k].rec.index = pkind[i];
        v[k].rec.addr = *paddr[i];
        v[k++].fd = fd;
    }
    for (size_t i = 0; i < s->nextra; i++)
        v[k++] = s->extra[i];
    /* The catalog API: the CA's kind, index 1 (link_server_new()). */
    if (s->link_server != NULL) {
        v[k].rec.kind = SOCK_POOL_CA;
        v[k].rec.index = 1;
        v[k].rec.addr = s->bs->links.address;
        v[k++].fd = link_server_listen_fd(s->link_server);
    }
    *n = k;
    return v;
}

int loop_upgrade(struct loop *s, int *pid, char **why)
{
    const char *binary = s->bs->upgrade.binary;
    struct upgrade_hooks hooks = {on_upgrade_ready, on_upgrade_failed, s};
    struct upgrade_conf uc;
    struct upgrade_fd *fds;
    size_t n = 0;

    *why = NULL;
    if (s->draining)
        return err_set(why, "strait is draining");
    if (s->up != NULL && !upgrade_finished(s->up))
        return err_set(why, "an upgrade to pid %d is running",
                       (int)upgrade_pid(s->up));
    if (binary[0] == '\0')
        binary = s->self_exe;
    if (binary == NULL)
        return err_set(why, "the path of the running executable is unknown; "
                            "set upgrade.binary");
    fds = handoff_fds(s, &n);
    if (fds == NULL)
        return err_set(why, "out of memory");
    memset(&uc, 0, sizeof(uc));
    uc.binary = binary;
    uc.config_path = s->config_path;
    uc.nworkers = s->nworkers;
    uc.timeout_ms = (uint64_t)s->bs->upgrade.timeout_ms;
    uc.fds = fds;
    uc.nfds = n;
    upgrade_free(s->up);
    s->up = upgrade_start(s->base, &uc, &hooks, why);
    free(fds);
    if (s->up == NULL) {
        err_prefix(why, "cannot start %s: ", binary);
        s->upgrades_failed++;
        set_error(&s->last_upgrade_error, *why);
        log_error("upgrade failed, this process keeps serving: %s", *why);
        return -1;
    }
    s->upgrade_pid = (int)upgrade_pid(s->up);
    *pid = s->upgrade_pid;
    log_info("upgrade: started %s (pid %d), handing over %zu socket(s)", binary,
             *pid, n);
    return 0;
}

int loop_handoff_add(struct loop *s, int kind, const struct addr *a, int fd)
{
    if (s->nextra == sizeof(s->extra) / sizeof(s->extra[0]) || fd < 0)
        return -1;
    s->extra[s->nextra].rec.kind = kind;
    s->extra[s->nextra].rec.index = 0;
    s->extra[s->nextra].rec.addr = *a;
    s->extra[s->nextra++].fd = fd;
    return 0;
}

/* The new process's side: the old one said 'K' (systemd knows this
 * process now) or went away; either way this one is on its own and
 * starts its watchdog keep-alives. */
static void on_parent(evutil_socket_t fd, short what, void *arg)
{
    struct loop *s = arg;
    int r = upgrade_child_done((int)fd);

    (void)what;
    if (r == 0)
        return;
    if (r < 0)
        log_warn("upgrade: the old process went away before confirming");
    else
        log_info("upgrade: the old process confirmed; serving");
    event_free(s->parent_ev);
    s->parent_ev = NULL;
    close(s->parent_fd);
    s->parent_fd = -1;
    sd_watchdog_start(s);
}

static void upgrade_child_serving(struct loop *s)
{
    if (upgrade_child_ready(s->parent_fd) < 0) {
        log_warn("upgrade: cannot tell the old process this one serves: %s",
                 strerror(errno));
        close(s->parent_fd);
        s->parent_fd = -1;
        sd_watchdog_start(s);
        return;
    }
    log_info("upgrade: every worker serves; telling the old process");
    s->parent_ev =
        event_new(s->base, s->parent_fd, EV_READ | EV_PERSIST, on_parent, s);
    if (s->parent_ev == NULL || event_add(s->parent_ev, NULL) < 0) {
        log_warn("upgrade: cannot wait for the old process (out of memory)");
        if (s->parent_ev != NULL)
            event_free(s->parent_ev);
        s->parent_ev = NULL;
        close(s->parent_fd);
        s->parent_fd = -1;
        sd_watchdog_start(s);
    }
}

static int admin_upgrade(void *arg, int *pid, struct buf *why)
{
    char *err = NULL;

    if (loop_upgrade(arg, pid, &err) == 0)
        return 0;
    buf_puts(why, err != NULL ? err : "out of memory");
    free(err);
    return -1;
}

/* admin.allowedHosts and admin.allowedOrigins take effect at start and
 * on every bootstrap reload. */
static void set_admin_policy(struct admin *a, const struct bootstrap *bs)
{
    const struct admin_policy p = {
        (const char *const *)bs->admin.allowed_hosts.v,
        bs->admin.allowed_hosts.n,
        (const char *const *)bs->admin.allowed_origins.v,
        bs->admin.allowed_origins.n};

    if (admin_set_policy(a, &p) < 0)
        log_error("admin: cannot apply admin.allowedHosts/allowedOrigins "
                  "(out of memory); the previous ones stay");
}

/* A request is held while the workers switch to the last snapshot; 1
 * when it must wait (or be dropped while draining). */
static int must_wait(struct loop *s, int kind)
{
    if (s->draining) {
        log_warn("reload ignored while draining");
        return 1;
    }
    if (s->acks_pending > 0) {
        s->pending |= kind;
        return 1;
    }
    return 0;
}

void loop_rebuild(struct loop *s)
{
    struct snapshot *next;
    char *err = NULL;

    if (must_wait(s, PENDING_REBUILD))
        return;
    if (build(s, s->bs, &next, &err) < 0) {
        log_error("rebuild failed, keeping the running configuration: %s",
                  err ? err : "unknown error");
        s->rebuilds_failed++;
        set_error(&s->last_rebuild_error, err);
        free(err);
        return;
    }
    loop_publish(s, next);
    if (s->acks_pending == 0)
        release_old(s);
    s->rebuilds_ok++;
    set_error(&s->last_rebuild_error, NULL);
    arm_cert_timer(s);
    log_info("rebuild: %zu listener(s) in effect", s->cur->n);
}

/* Two config.etcd sections ask for the same watch and connections. */
static int strs_equal(const struct conf_strs *a, const struct conf_strs *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i], b->v[i]) != 0)
            return 0;
    return 1;
}

static int etcd_conf_equal(const struct bootstrap_etcd *a,
                           const struct bootstrap_etcd *b)
{
    return strs_equal(&a->endpoints, &b->endpoints) &&
           strcmp(a->prefix, b->prefix) == 0 &&
           strcmp(a->ca_file, b->ca_file) == 0 &&
           strcmp(a->cert_file, b->cert_file) == 0 &&
           strcmp(a->key_file, b->key_file) == 0 &&
           strcmp(a->username, b->username) == 0 &&
           strcmp(a->password, b->password) == 0 &&
           a->dial_timeout_ms == b->dial_timeout_ms &&
           a->request_timeout_ms == b->request_timeout_ms &&
           a->backoff_ms == b->backoff_ms &&
           a->backoff_max_ms == b->backoff_max_ms &&
           a->max_response_bytes == b->max_response_bytes;
}

/* The node bs describes, for the resource source's analysis. */
static void set_source_node(struct loop *s, const struct bootstrap *bs)
{
    struct analysis_node node = {0};

    if (s->source == NULL || bs == NULL)
        return;
    node.name = bs->node.name;
    node.ns = bs->node.ns;
    node.labels = &bs->node.labels;
    node.service = bs->node.service;
    if (source_set_node(s->source, &node) < 0)
        log_error("out of memory: this node's labels are not known to the "
                  "resources' analysis");
}

/* A bootstrap reload failed: count it, say why, keep what runs. */
static int reload_failed(struct loop *s, const char *sep, const char *err)
{
    set_source_node(s, s->bs);
    log_error("reload failed, keeping the running configuration:%s%s", sep,
              err ? err : "unknown error");
    s->reloads_failed++;
    set_error(&s->last_reload_error, err);
    sd_reloaded(s, err != NULL ? err : "unknown error");
    return -1;
}

/* loop_reload_bootstrap_now() re-reads the bootstrap and rebuilds: a
 * LOOP_RELOAD_* result (-1 when the file, or what it builds, is
 * refused). */
static int loop_reload_bootstrap_now(struct loop *s)
{
    struct bootstrap *bs;
    struct snapshot *next;
    char *err = NULL;
    char as1[ADDR_STRLEN];
    int rc;

    if (must_wait(s, PENDING_BOOTSTRAP))
        return s->draining ? LOOP_RELOAD_DRAINING : LOOP_RELOAD_QUEUED;
    sd_reloading(s);
    bs = bootstrap_load(s->config_path, &err);
    /* The resources are analysed under the new bootstrap's
     * outboundTrafficPolicy (the running one when the file is bad). */
    set_source_node(s, bs);
    if (s->source != NULL)
        source_reload(s->source, bs != NULL ? bs->outbound.mode : -1, 0);
    if (bs == NULL) {
        rc = reload_failed(s, "\n", err);
        free(err);
        return rc;
    }
    if (s->source != NULL && source_mode(s->source) != bs->outbound.mode) {
        /* What the files hold now was refused: the resources in effect
         * must be valid under the new mode, or a restart with this
         * bootstrap would refuse them. */
        if (source_check_mode(s->source, bs->outbound.mode, &err) < 0) {
            err_prefix(&err,
                       "outboundTrafficPolicy %s: the resources in effect "
                       "have errors under it:\n",
                       bs->outbound.mode == RES_ALLOW_ANY ? "ALLOW_ANY"
                                                          : "REGISTRY_ONLY");
            rc = reload_failed(s, " ", err ? err : "out of memory");
            free(err);
            bootstrap_free(bs);
            return rc;
        }
        source_set_mode(s->source, bs->outbound.mode);
    }
    if (bootstrap_workers(bs) != s->nworkers)
        log_warn("reload: workers stays %d until restart", s->nworkers);
    if (!bootstrap_dns_equal(bs, s->bs))
        log_warn("reload: dns settings stay as they are until restart");
    if (strcmp(bs->config.dir, s->bs->config.dir) != 0)
        log_warn("reload: config.dir stays %s until restart",
                 s->bs->config.dir[0] ? s->bs->config.dir : "(none)");
    if (strcmp(bs->config.default_ns, s->bs->config.default_ns) != 0)
        log_warn("reload: config.defaultNamespace stays %s until restart",
                 s->bs->config.default_ns);
    if (bs->metrics.enabled != s->bs->metrics.enabled ||
        bs->metrics.max_series != s->bs->metrics.max_series ||
        !addr_equal(&bs->metrics.address, &s->bs->metrics.address) ||
        !addr_equal(&bs->readiness.address, &s->bs->readiness.address))
        log_warn("reload: metrics.enabled, metrics.maxSeries, "
                 "metrics.address and readiness.address stay as they are "
                 "until restart");
    if (!geoip_conf_equal(&bs->geoip, &s->bs->geoip))
        log_warn("reload: geoip stays as it is until restart (a database "
                 "file renamed into place is reloaded by itself)");
    if (!etcd_conf_equal(&bs->config.etcd, &s->bs->config.etcd))
        log_warn("reload: config.etcd stays as it is until restart (its one "
                 "watch is the process's)");
    if (!bootstrap_kube_equal(&bs->config.kubernetes,
                              &s->bs->config.kubernetes))
        log_warn("reload: config.kubernetes stays as it is until restart "
                 "(its watches are the process's)");
    if (!addr_equal(&bs->admin.address, &s->bs->admin.address))
        log_warn("reload: admin.address stays %s until restart",
                 addr_format(&s->bs->admin.address, as1, sizeof(as1)));
    if (build(s, bs, &next, &err) < 0) {
        rc = reload_failed(s, " ", err);
        free(err);
        bootstrap_free(bs);
        return rc;
    }
    log_configure((enum log_level)bs->log.level,
                  (enum log_format)bs->log.format, 2);
    set_admin_policy(s->admin, bs);
    /* old was released (no acks were pending): cur's bootstrap goes with
     * cur once the workers have switched. */
    s->old_bs = s->bs;
    s->bs = bs;
    loop_publish(s, next);
    if (s->acks_pending == 0)
        release_old(s);
    s->reloads_ok++;
    set_error(&s->last_reload_error, NULL);
    arm_cert_timer(s);
    overload_configure(s);
    log_info("reload: %zu listener(s) in effect", s->cur->n);
    sd_reloaded(s, NULL);
    return LOOP_RELOADED;
}

void loop_reopen_logs(struct loop *s)
{
    lsink_reopen(s->alog);
}

int loop_reload_bootstrap(struct loop *s)
{
    return loop_reload_bootstrap_now(s);
}

/* Admin callbacks. */

/* Bytes the allocator has handed out and not had back (glibc's
 * mallinfo2(): arena and mmap'd chunks in use), for /stats: unlike the
 * resident size, it does not lag behind frees the allocator keeps cached,
 * so a leak shows as growth here first. */
static uint64_t heap_allocated(void)
{
    struct mallinfo2 mi = mallinfo2();

    return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
}

static void admin_status(void *arg, struct admin_status *out)
{
    struct loop *s = arg;

    memset(out, 0, sizeof(*out));
    out->draining = s->draining;
    out->geoip = s->geoip;
    out->workers = s->nworkers;
    out->reloads_ok = s->reloads_ok;
    out->reloads_failed = s->reloads_failed;
    out->last_reload_error = s->last_reload_error;
    out->rebuilds_ok = s->rebuilds_ok;
    out->rebuilds_failed = s->rebuilds_failed;
    out->last_rebuild_error = s->last_rebuild_error;
    out->uptime_ms = clock_ms() - s->start_ms;
    out->restart_epoch = s->restart_epoch;
    {
        /* All epochs: from epoch 0's start by the wall clock, never
         * less than this epoch's own uptime (a clock stepped back). */
        int64_t all = (int64_t)time(NULL) - s->epoch0_start_s;
        out->uptime_all_ms = s->epoch0_start_s > 0 && all > 0
                                 ? (uint64_t)all * 1000
                                 : out->uptime_ms;
        if (out->uptime_all_ms < out->uptime_ms)
            out->uptime_all_ms = out->uptime_ms;
    }
    out->config_path = s->config_path;
    out->log_level = log_level_name((enum log_level)s->bs->log.level);
    out->drain_ms = (uint64_t)s->bs->drain_timeout_ms;
    out->cx_active = cx_active(s->cx_root);
    out->cx_max = s->bs->limits.max_connections;
    out->memory_limit = (uint64_t)s->bs->overload.memory_limit;
    out->memory_used = s->memory_used;
    out->heap_allocated = heap_allocated();
    out->overload = s->overload;
    memcpy(out->overload_activations, s->overload_activations,
           sizeof(out->overload_activations));
    out->pid = (int)getpid();
    out->serving = s->ready_sent;
    out->upgrade_pid = s->upgrade_pid;
    out->upgrade_running = s->up != NULL && !upgrade_finished(s->up);
    out->upgrades_ok = s->upgrades_ok;
    out->upgrades_failed = s->upgrades_failed;
    out->last_upgrade_error = s->last_upgrade_error;
    out->has_resources = s->source != NULL;
    out->resource_loading = (size_t)s->loading;
    if (s->source != NULL) {
        struct source_status ss;
        source_status(s->source, &ss);
        out->resources = ss.resources;
        out->resource_reloads_ok = ss.reloads_ok;
        out->resource_reloads_failed = ss.reloads_failed;
        out->resource_error = ss.last_error;
    }
    if (s->etcd != NULL) {
        struct source_etcd_status es;
        source_etcd_status(s->etcd, &es);
        out->has_etcd = 1;
        out->etcd_synced = es.synced;
        out->etcd_built = s->etcd_built;
        out->etcd_watching = es.watching;
        out->etcd_revision = es.revision;
        out->etcd_keys = es.keys;
        out->etcd_endpoint = es.endpoint;
        out->etcd_error = es.last_error;
        out->etcd_down_ms = es.down_ms;
        out->etcd_watches_started = es.watches_started;
        out->etcd_reconnects = es.reconnects;
        out->etcd_ranges = es.ranges;
        out->etcd_compactions = es.compactions;
        out->etcd_events = es.events;
        out->etcd_progress = es.progress;
        out->etcd_failures = es.failures;
        out->etcd_last_backoff_ms = es.last_backoff_ms;
        out->etcd_watch_created_ms = es.watch_created_ms;
        out->etcd_range_pages = es.range_pages;
        out->etcd_skipped = es.skipped;
        out->etcd_keys_skipped = es.keys_skipped;
        out->etcd_keys_left_out = es.keys_left_out;
        out->etcd_last_skip = es.last_skip;
    }
    if (s->kube != NULL) {
        const struct source_kube_kind *kk;
        size_t nk = source_kube_kinds(s->kube, &kk);
        out->has_kube = 1;
        out->kube_ready = s->kube_ready;
        out->kube_error = source_kube_error(s->kube);
        if (nk > sizeof(s->kube_kinds) / sizeof(*s->kube_kinds))
            nk = sizeof(s->kube_kinds) / sizeof(*s->kube_kinds);
        for (size_t i = 0; i < nk; i++) {
            struct admin_kube_kind *o = &s->kube_kinds[i];
            o->kind = kk[i].kind;
            o->synced = kk[i].synced;
            o->missing = kk[i].missing;
            o->objects = kk[i].objects;
            o->bad = kk[i].bad;
            o->watches_opened = kk[i].watches_opened;
            o->relists = kk[i].relists;
            o->expired = kk[i].expired;
            o->errors = kk[i].errors;
            o->events = kk[i].events;
        }
        out->kube_kinds = s->kube_kinds;
        out->kube_nkinds = nk;
    }
    if (s->dns != NULL) {
        struct dns_stats ds;
        dns_cache_stats(s->dns, &ds);
        out->dns_queries = ds.queries;
        out->dns_failures = ds.failures;
        out->dns_changes = ds.changes;
        out->dns_names = ds.names;
    }
    if (s->otlp != NULL) {
        struct otlp_stats os;
        struct spanq_stats qs;
        otlp_stats(s->otlp, &os);
        spanq_stats(s->spans, &qs);
        out->tracing = 1;
        out->spans_queued = qs.queued;
        out->spans_dropped = qs.dropped;
        out->spans_pending = qs.pending;
        out->spans_exported = os.exported;
        out->export_requests = os.requests;
        out->export_failures = os.failures;
        out->export_retries = os.retries;
    }
    if (s->alog != NULL) {
        struct lsink_stats ls;
        lsink_stats(s->alog, &ls);
        out->alog_written = ls.written;
        out->alog_dropped = ls.dropped;
        out->alog_write_errors = ls.write_errors;
        out->alog_reopens = ls.reopens;
    }
    if (s->jwks != NULL) {
        struct jwks_stats js;
        jwks_cache_stats(s->jwks, &js);
        out->jwks_fetches = js.fetches;
        out->jwks_failures = js.failures;
        out->jwks_changes = js.changes;
        out->jwks_uris = js.uris;
    }
    if (s->ca_node != NULL) {
        struct ca_node_store_status cs;
        ca_node_store_status(s->ca_node, &cs);
        out->has_identity = 1;
        out->identity_unstored = cs.unstored;
        out->identity_store_failures = cs.failures;
        out->identity_store_error = cs.error;
        out->identity_renew_failures = cs.renew_failures;
        out->identity_renew_error = cs.renew_error;
        out->identity_expired = cs.expired;
    }
}

static struct series_table *admin_metrics(void *arg)
{
    struct loop *s = arg;

    return s->metrics;
}

static size_t admin_listeners(void *arg, struct stats_block *const **out)
{
    struct loop *s = arg;

    if (s->cur == NULL)
        return 0;
    *out = s->cur->stats_view;
    return s->cur->n;
}

static void admin_lua_errors(void *arg, admin_lua_error_fn *fn, void *ctx)
{
    struct loop *s = arg;

    for (size_t i = 0; s->cur != NULL && i < s->cur->n; i++) {
        struct http_listener_conf *c = snapshot_listener_http(&s->cur->v[i]);
        struct http_routes *r = c != NULL ? http_listener_conf_routes(c) : NULL;
        const struct luaprogs *p = r != NULL ? r->lua : NULL;

        for (size_t k = 0; p != NULL && k < p->n; k++)
            for (int ph = 0; ph < LUAVM_NPHASES; ph++)
                for (int re = 0; re < LUAVM_NREASONS; re++)
                    fn(ctx, s->cur->v[i].name, p->v[k].name,
                       luavm_phase_name(ph), luavm_reason_name(re),
                       luavm_errors(p, k, ph, re));
        http_routes_unref(r);
    }
}

static size_t admin_clusters(void *arg, struct cluster *const **out)
{
    struct loop *s = arg;

    if (s->cur == NULL)
        return 0;
    *out = s->cur->cluster_view;
    return s->cur->ncluster_view;
}

static const char *routes_cluster_name(void *ctx, int id)
{
    const struct http_routes *r = ctx;

    return id >= 0 && (size_t)id < r->nclusters ? r->clusters[id]->name : NULL;
}

/* The routes each Gateway listener runs now. */
static void gateway_routes_json(struct loop *s, struct buf *b)
{
    int first = 1;

    buf_puts(b, "[");
    for (size_t i = 0; i < s->cur->n; i++) {
        struct http_listener_conf *hc = snapshot_listener_http(&s->cur->v[i]);
        struct http_routes *r;
        /* A bootstrap listener's routes run on a router too, but what
         * they are is in "listeners" already: gatewayRoutes stays the
         * Gateways'. */
        if (hc == NULL || !s->cur->v[i].gateway)
            continue;
        r = http_listener_conf_routes(hc);
        if (r->router != NULL) {
            buf_puts(b, first ? "{\"listener\":" : ",{\"listener\":");
            json_str(b, s->cur->v[i].name);
            buf_puts(b, ",\"routes\":");
            router_to_json(r->router, b, routes_cluster_name, r);
            buf_puts(b, "}");
            first = 0;
        }
        http_routes_unref(r);
    }
    buf_puts(b, "]");
}

/* The clusters outboundTrafficPolicy made: ALLOW_ANY's passthroughs and
 * REGISTRY_ONLY's BlackHoleCluster, with what they send to. */
static void outbound_clusters_json(struct loop *s, struct buf *b)
{
    char as[ADDR_STRLEN];
    int first = 1;

    buf_puts(b, "[");
    for (size_t i = 0; i < s->cur->ncluster_view; i++) {
        const struct cluster *c = s->cur->cluster_view[i];
        if (c->origin == CLUSTER_REGISTRY)
            continue;
        buf_puts(b, first ? "{\"name\":" : ",{\"name\":");
        first = 0;
        json_str(b, c->name);
        buf_printf(b, ",\"outboundTrafficPolicy\":\"%s\",\"tls\":%s,\"sni\":",
                   c->origin == CLUSTER_PASSTHROUGH ? "ALLOW_ANY"
                                                    : "REGISTRY_ONLY",
                   c->tls != NULL ? "true" : "false");
        if (c->sni != NULL)
            json_str(b, c->sni);
        else
            buf_puts(b, "null");
        buf_puts(b, ",\"endpoints\":[");
        for (size_t k = 0; k < c->nendpoints; k++) {
            buf_puts(b, k ? "," : "");
            json_str(b, addr_format(&c->endpoints[k], as, sizeof(as)));
        }
        buf_puts(b, "]}");
    }
    buf_puts(b, "]");
}

/* The port each server of the Gateways that select this node listens
 * on, and the Service port that made it so (istiod's translation): one
 * entry per server. */
static void gateway_ports_json(struct loop *s, struct buf *b)
{
    const struct resource_set *set = source_current_or_null(s);
    int first = 1;

    buf_puts(b, "[");
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_gateway *gw;
        if (r->kind != RES_GATEWAY)
            continue;
        gw = res_gateway(r);
        if (!res_labels_match(&gw->selector, &s->bs->node.labels))
            continue;
        for (size_t k = 0; k < gw->servers.n; k++) {
            const struct res_gw_server *sv =
                (const struct res_gw_server *)gw->servers.v + k;
            const struct resource *by;
            int64_t lp =
                res_k8s_gateway_port(set, s->bs->node.ns, &s->bs->node.labels,
                                     s->bs->node.service, sv->port.number, &by);
            char name[512];
            buf_puts(b, first ? "{\"gateway\":" : ",{\"gateway\":");
            first = 0;
            snprintf(name, sizeof(name), "%s/%s", r->meta.ns, r->meta.name);
            json_str(b, name);
            buf_printf(b, ",\"server\":%zu,\"port\":%lld,\"listenPort\":%lld",
                       k, (long long)sv->port.number, (long long)lp);
            if (by != NULL) {
                snprintf(name, sizeof(name), "%s/%s", by->meta.ns,
                         by->meta.name);
                buf_puts(b, ",\"service\":");
                json_str(b, name);
            }
            buf_puts(b, "}");
        }
    }
    buf_puts(b, "]");
}

static void admin_config(void *arg, struct buf *b)
{
    struct loop *s = arg;

    /* The bootstrap's keys at the top, the resources and the routes
     * compiled from them beside them. */
    bootstrap_to_json(s->bs, b);
    if (s->source != NULL && buf_len(b) > 0) {
        b->tail--; /* the bootstrap object's closing brace */
        buf_puts(b, ",\"resources\":");
        source_json(s->source, b);
        if (s->etcd != NULL) {
            buf_puts(b, ",\"etcd\":");
            source_etcd_json(s->etcd, b);
        }
        if (s->kube != NULL) {
            buf_puts(b, ",\"kubernetes\":");
            source_kube_json(s->kube, b);
        }
        buf_puts(b, ",\"gatewayPorts\":");
        gateway_ports_json(s, b);
        buf_puts(b, ",\"gatewayRoutes\":");
        gateway_routes_json(s, b);
        buf_puts(b, ",\"outboundClusters\":");
        outbound_clusters_json(s, b);
        buf_puts(b, "}");
    }
}

static enum admin_reload admin_reload(void *arg)
{
    switch (loop_reload_bootstrap(arg)) {
    case LOOP_RELOADED:
        return ADMIN_RELOADED;
    case LOOP_RELOAD_QUEUED:
        return ADMIN_RELOAD_QUEUED;
    case LOOP_RELOAD_DRAINING:
        return ADMIN_RELOAD_DRAINING;
    default:
        return ADMIN_RELOAD_FAILED;
    }
}

/* The MeshLinks and the exported catalog follow the resources in
 * effect. */
static void links_follow(struct loop *s)
{
    const struct resource_set *set = source_current_or_null(s);

    if (s->links != NULL)
        links_sync(s->links, set);
    if (s->link_server != NULL)
        link_server_publish(s->link_server, set);
}

/* A new resource snapshot: rebuild the listeners it shapes (Gateways). */
static void on_resources(void *arg)
{
    struct loop *s = arg;

    links_follow(s);
    loop_rebuild(s);
}

/* The source's inputs besides the directory: the keys under the etcd
 * prefix, then the registry entries of the MeshLinks' catalogs; a
 * snapshot with any error keeps the running one. */
static size_t loop_inputs(void *arg, const struct res_input **v)
{
    struct loop *s = arg;
    const struct res_input *ev = NULL;
    size_t n = s->etcd != NULL   ? source_etcd_inputs(s->etcd, &ev)
               : s->kube != NULL ? source_kube_inputs(s->kube, &ev)
                                 : 0;

    if (n > s->inputs_cap) {
        struct res_input *nv = realloc(s->inputs, n * sizeof(*nv));
        if (nv == NULL) {
            *v = NULL;
            return 0;
        }
        s->inputs = nv;
        s->inputs_cap = n;
    }
    if (n > 0)
        memcpy(s->inputs, ev, n * sizeof(*ev));
    if (s->links != NULL)
        n = links_inputs(s->links, &s->inputs, n, &s->inputs_cap);
    *v = s->inputs;
    return n;
}

/* The MeshLinks' entries for hosts this site or another link owns stay
 * out of every snapshot, unless imported (config/link-merge.h). */
static void loop_filter(void *arg, struct resource_set *set)
{
    struct loop *s = arg;

    if (s->links != NULL)
        links_filter(s->links, set);
}

/*
 * on_links_timer() loads what etcd, the Kubernetes API and the links hold,
 * all changes since the last load at once. Once every Kubernetes kind was
 * listed and that snapshot built (its listeners bound), the gateway is
 * ready, for good (Istio's atleastOnceReady); one refused leaves it not
 * ready until a later change is taken.
 */
static void schedule_reload(struct loop *s);

/* A load ended (source_reload_async(), or on this thread). */
static void on_loaded(void *arg, int rc)
{
    struct loop *s = arg;

    s->loading = 0;
    if (s->load_etcd_synced && !s->etcd_built) {
        s->etcd_built = 1;
        log_info("etcd: the prefix read and built: ready");
    }
    if (s->load_synced && !s->kube_ready && rc == 1 &&
        s->last_rebuild_error == NULL) {
        s->kube_ready = 1;
        log_info("kubernetes: every kind listed and applied: ready");
    }
    /* The gap to the next one counts from the end of this one. */
    s->reload_done_ms = clock_ms();
    /* Changes that came while it ran: one more load, gathered. */
    if (s->reload_again && !s->draining) {
        s->reload_again = 0;
        schedule_reload(s);
    }
}

static void on_links_timer(void *arg)
{
    struct loop *s = arg;

    /* Draining: nothing new is built (a long load would only delay the
     * exit). */
    if (s->draining || s->source == NULL)
        return;
    if (s->loading) {
        s->reload_again = 1;
        return;
    }
    s->load_synced = s->kube != NULL && source_kube_synced(s->kube);
    if (s->etcd != NULL) {
        struct source_etcd_status es;

        source_etcd_status(s->etcd, &es);
        s->load_etcd_synced = es.synced;
    }
    /* The parse and the checks run on a builder thread: the loop goes
     * on serving the admin API, readiness and signals meanwhile. Only
     * the compile of the snapshot stays here. */
    s->loading = 1;
    if (source_reload_async(s->source, 1, on_loaded, s) < 0)
        on_loaded(s, source_reload(s->source, -1, 1));
}

/*
 * schedule_reload() takes a change notice. The first load goes at once
 * (the gateway is not ready or not serving the fleet's resources until
 * it ran); after that changes are gathered for config.debounce and the
 * load comes no sooner than 1/maxRebuildsPerSecond after the end of the
 * last. A notice while one is pending joins it: a flood of watch
 * messages costs a bounded number of loads, not one each.
 */
static void schedule_reload(struct loop *s)
{
    uint64_t now = clock_ms(), wait, gap;

    if (timer_armed(&s->links_timer)) {
        s->reloads_gathered++;
        return;
    }
    if (s->loading) {
        s->reloads_gathered++;
        s->reload_again = 1;
        return;
    }
    if (s->reload_done_ms == 0) {
        timer_arm(&s->links_timer, 0);
        return;
    }
    wait = (uint64_t)s->bs->config.debounce_ms;
    gap = 1000 / (uint64_t)(s->bs->config.max_rebuilds_per_s > 0
                                ? s->bs->config.max_rebuilds_per_s
                                : 1);
    if (s->reload_done_ms + gap > now && s->reload_done_ms + gap - now > wait)
        wait = s->reload_done_ms + gap - now;
    timer_arm(&s->links_timer, wait);
}

static void on_links_change(void *arg)
{
    schedule_reload(arg);
}

static void admin_links(void *arg, struct buf *b)
{
    struct loop *s = arg;

    buf_puts(b, "{\"links\":");
    if (s->links != NULL)
        links_json(s->links, b);
    else
        buf_puts(b, "[]");
    buf_puts(b, ",\"server\":");
    if (s->link_server != NULL)
        link_server_json(s->link_server, b);
    else
        buf_puts(b, "null");
    buf_puts(b, "}\n");
}

static void admin_links_prometheus(void *arg, struct buf *b)
{
    struct loop *s = arg;
    struct link_server_stats st;

    if (s->links != NULL)
        links_prometheus(s->links, b);
    if (s->link_server == NULL)
        return;
    link_server_stats(s->link_server, &st);
    buf_printf(b,
               "# HELP strait_link_server_streams_accepted_total catalog "
               "streams this site's catalog API opened\n"
               "# TYPE strait_link_server_streams_accepted_total counter\n"
               "strait_link_server_streams_accepted_total %" PRIu64 "\n"
               "# HELP strait_link_server_streams_active catalog streams "
               "open now\n"
               "# TYPE strait_link_server_streams_active gauge\n"
               "strait_link_server_streams_active %" PRIu64 "\n"
               "# HELP strait_link_server_refused_total catalog requests "
               "refused (credential, path, method)\n"
               "# TYPE strait_link_server_refused_total counter\n"
               "strait_link_server_refused_total %" PRIu64 "\n"
               "# HELP strait_link_server_services services this site "
               "exports\n"
               "# TYPE strait_link_server_services gauge\n"
               "strait_link_server_services %" PRIu64 "\n",
               st.accepted, st.active, st.refused, st.services);
    buf_printf(b,
               "# HELP strait_link_server_refused_connections_total "
               "connections to the catalog API closed at accept: over "
               "links.maxConnectionsPerSource (per_source) or the API's "
               "slots (busy)\n"
               "# TYPE strait_link_server_refused_connections_total counter\n"
               "strait_link_server_refused_connections_total{reason="
               "\"per_source\"} %" PRIu64 "\n"
               "strait_link_server_refused_connections_total{reason="
               "\"busy\"} %" PRIu64 "\n"
               "# HELP strait_link_server_timed_out_total connections to the "
               "catalog API closed at links.handshakeTimeout\n"
               "# TYPE strait_link_server_timed_out_total counter\n"
               "strait_link_server_timed_out_total %" PRIu64 "\n",
               st.refused_per_source, st.refused_busy, st.timed_out);
}

/* The keys under the etcd prefix or the objects held from the
 * Kubernetes API changed: a load, gathered with others. */
static void on_etcd_change(void *arg)
{
    schedule_reload(arg);
}

static void on_kube_change(void *arg)
{
    schedule_reload(arg);
}

/* A jwksUri's keys arrived or changed: the routes that verify with them
 * change. */
static void on_jwks_change(void *arg)
{
    on_resources(arg);
}

/* A DNS name's addresses changed: the clusters built from it change. */
static void on_dns_change(void *arg)
{
    on_resources(arg);
}

/* istiod's root file changed: the ISTIO_MUTUAL servers and clusters are
 * rebuilt to trust its roots (their identities hold the roots' digest),
 * as a reload would; the rest is kept. */
static void on_mesh_roots_change(void *arg)
{
    loop_rebuild(arg);
}

static void admin_quit(void *arg)
{
    loop_drain(arg, "admin /quitquitquit");
}

/* The shortest certificate check interval of the running listeners;
 * 0 when no listener terminates TLS. */
static uint64_t cert_interval(const struct loop *s)
{
    uint64_t ms = 0;

    for (size_t i = 0; i < s->cur->n; i++) {
        uint64_t t = s->cur->v[i].tls_reload_ms;
        if (t > 0 && (ms == 0 || t < ms))
            ms = t;
    }
    return ms;
}

static void arm_cert_timer(struct loop *s)
{
    uint64_t ms = cert_interval(s);

    timer_cancel(&s->cert_timer);
    if (ms > 0 && !s->draining)
        timer_arm(&s->cert_timer, ms);
}

/* Certificate files changed on disk are loaded without a restart; a bad
 * file is reported once and the running certificate stays. (The mesh
 * certificate has no files here: handshakes take it from memory.) */
static void check_certs(struct loop *s)
{
    for (size_t i = 0; i < s->cur->n; i++) {
        const struct snapshot_listener *l = &s->cur->v[i];
        char *err = NULL;
        int r = compile_tls_check(&l->cl, &err);

        if (r > 0) {
            s->cert_reloads++;
            log_info("listener %s: certificates reloaded", l->name);
        } else if (r < 0) {
            s->cert_reload_failures++;
            log_error("listener %s: certificate reload failed, keeping the "
                      "running certificates: %s",
                      l->name, err ? err : "unknown error");
        }
        free(err);
    }
}

static void on_cert_timer(void *arg)
{
    struct loop *s = arg;

    check_certs(s);
    arm_cert_timer(s);
}

/* The span queue and its exporter (tracing.endpoint, checked when the
 * bootstrap was loaded). */
static int start_tracing(struct loop *s, const struct bootstrap *bs, char **err)
{
    const struct bootstrap_tracing *t = &bs->tracing;
    struct bootstrap_url u;
    struct otlp_conf oc;
    const char *why = NULL;
    char service[512];

    if (bootstrap_parse_url(t->endpoint, &u, &why) < 0) {
        err_set(err, "tracing.endpoint: %s", why);
        return -1;
    }
    if (t->service_name[0] != '\0')
        snprintf(service, sizeof(service), "%s", t->service_name);
    else
        snprintf(service, sizeof(service), "%s.%s", bs->node.name, bs->node.ns);
    memset(&oc, 0, sizeof(oc));
    oc.host = u.host;
    oc.port = u.port;
    oc.path = u.path;
    oc.service_name = service;
    oc.host_name = bs->node.name;
    oc.max_batch = (size_t)t->max_batch;
    oc.flush_ms = (uint64_t)t->flush_interval_ms;
    oc.timeout_ms = (uint64_t)t->export_timeout_ms;
    oc.max_retries = (int)t->max_retries;
    oc.gzip = t->compression == 1;
    oc.dns = s->dns;
    s->spans = spanq_new((size_t)t->max_queue);
    s->otlp = s->spans != NULL ? otlp_new(s->base, s->spans, &oc) : NULL;
    if (s->otlp == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    log_info("tracing: spans to http://%s:%d%s, sampling %g%%", u.host, u.port,
             u.path, t->sampling);
    return 0;
}

struct loop *loop_new(struct event_base *base, struct bootstrap *bs,
                      const char *config_path, struct ca_node *ca_node,
                      const struct loop_start *start, int *config_error,
                      char **err)
{
    struct loop *s = calloc(1, sizeof(*s));
    struct ca_identity *identity =
        ca_node != NULL ? ca_node_identity(ca_node) : NULL;
    struct snapshot *next = NULL;
    struct worker_hooks hooks;
    struct source_inputs ins = {NULL, NULL, NULL, NULL, NULL};
    struct admin_ops ops = {NULL,
                            admin_status,
                            admin_listeners,
                            admin_clusters,
                            admin_config,
                            admin_quit,
                            admin_reload,
                            admin_metrics,
                            admin_upgrade,
                            admin_lua_errors,
                            admin_links,
                            admin_links_prometheus};
    char as[ADDR_STRLEN];

    *err = NULL;
    *config_error = 0;
    if (s == NULL) {
        return NULL;
    }
    s->bs = bs; /* freed by loop_free() from here on */
    s->base = base;
    s->parent_fd = -1;
    if (start != NULL) {
        s->inherited = start->inherited;
        s->parent_fd = start->parent_fd;
        s->stop = start->stop;
        if (start->self_exe != NULL &&
            (s->self_exe = strdup(start->self_exe)) == NULL) {
            err_set(err, "out of memory");
            goto fail;
        }
    }
    timer_init(&s->drain_timer, base, on_drain_deadline, s);
    timer_init(&s->drain_window_timer, base, on_drain_window, s);
    timer_init(&s->cert_timer, base, on_cert_timer, s);
    timer_init(&s->watchdog_timer, base, on_watchdog_timer, s);
    timer_init(&s->overload_timer, base, on_overload_timer, s);
    timer_init(&s->links_timer, base, on_links_timer, s);
    reaper_init(&s->reaper, base);
    sd_start(s);
    s->ca_node = ca_node;
    s->identity = identity;
    s->identity_fn.current = identity_current;
    s->identity_fn.ssl = ca_identity_ssl;
    s->identity_fn.arg = identity;
    /* istiod's root file, as Istio's agent watches it: a root rotation
     * (the ConfigMap's new bundle) is trusted without a reload. */
    if (identity != NULL && !bs->ca.enabled &&
        bs->ca.istiod.address[0] != '\0' &&
        (s->mesh_roots = mesh_roots_new(base, bs->ca.istiod.root_cert,
                                        on_mesh_roots_change, s, err)) == NULL)
        goto fail;
    s->start_ms = clock_ms();
    s->restart_epoch = start != NULL ? start->restart_epoch : 0;
    s->epoch0_start_s = start != NULL ? start->epoch0_start_s : 0;
    s->config_path = strdup(config_path);
    s->nworkers = bootstrap_workers(bs);
    s->inbox = mq_new(base);
    s->workers = calloc((size_t)s->nworkers, sizeof(*s->workers));
    s->cx_root = cx_limit_new(NULL);
    if (s->config_path == NULL || s->inbox == NULL || s->workers == NULL ||
        s->cx_root == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    /* The admin address first: a second strait started by mistake with
     * the same file fails here, before SO_REUSEPORT lets it share (and
     * steal connections from) the running one's listeners. */
    ops.arg = s;
    s->admin = admin_new(base, &bs->admin.address, &ops, s->inherited, err);
    if (s->admin == NULL) {
        err_set(err, "cannot start");
        err_prefix(err, "admin API: ");
        goto fail;
    }
    set_admin_policy(s->admin, s->bs);
    s->alog = lsink_new(bs->log.access_log_file,
                        (size_t)bs->log.access_log_buffer, err);
    if (s->alog == NULL)
        goto fail;
    s->dicts = luadict_set_new();
    if (s->dicts == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    if (bs->metrics.address.len > 0) {
        s->metrics_port = admin_port_new(base, &bs->metrics.address, &ops,
                                         ADMIN_PORT_METRICS, s->inherited, err);
        if (s->metrics_port == NULL) {
            err_prefix(err, "metrics.address: ");
            goto fail;
        }
    }
    if (bs->readiness.address.len > 0) {
        s->ready_port = admin_port_new(base, &bs->readiness.address, &ops,
                                       ADMIN_PORT_READY, s->inherited, err);
        if (s->ready_port == NULL) {
            err_prefix(err, "readiness.address: ");
            goto fail;
        }
    }
    if (geoip_start(s, base, bs, err) < 0)
        goto fail;
    if (bs->metrics.enabled) {
        s->metrics =
            series_table_new(s->nworkers, (size_t)bs->metrics.max_series);
        if (s->metrics == NULL) {
            err_set(err, "out of memory");
            goto fail;
        }
    }
    if (bs->config.dir[0] != '\0' || bs->config.etcd.endpoints.n > 0 ||
        bs->config.kubernetes.enabled) {
        struct dns_conf dc = {bs->dns.nameservers.v, bs->dns.nameservers.n,
                              (uint64_t)bs->dns.min_refresh_ms,
                              (uint64_t)bs->dns.timeout_ms,
                              bs->dns.resolv_conf};
        s->dns = dns_cache_new(base, &dc, on_dns_change, s, err);
        s->dns_fn.lookup = dns_lookup;
        s->dns_fn.lookup_min = dns_lookup_min;
        s->dns_fn.arg = s->dns;
        if (s->dns == NULL) {
            goto fail;
        }
        /* jwksUri names go through the same resolver as ServiceEntry
         * names. */
        s->jwks = jwks_cache_new(base, s->dns, on_jwks_change, s);
        s->jwks_fn.get = jwks_get;
        s->jwks_fn.arg = s->jwks;
        if (s->jwks == NULL) {
            err_set(err, "out of memory");
            goto fail;
        }
        if (bs->config.etcd.endpoints.n > 0) {
            s->etcd = source_etcd_new(base, &bs->config.etcd, s->dns,
                                      on_etcd_change, s, err);
            if (s->etcd == NULL) {
                *config_error = 1;
                goto fail;
            }
        }
        if (bs->config.kubernetes.enabled) {
            s->kube = source_kube_new(base, &bs->config.kubernetes, s->dns,
                                      (uint64_t)bs->config.debounce_ms,
                                      on_kube_change, s, err);
            if (s->kube == NULL) {
                *config_error = 1;
                goto fail;
            }
        }
        s->links = links_new(base, identity, s->dns, on_links_change, s);
        if (s->links == NULL) {
            err_set(err, "out of memory");
            goto fail;
        }
        /* etcd's or the Kubernetes API's resources, then the MeshLinks'
         * registry entries (loop_inputs()). */
        ins.get = loop_inputs;
        ins.filter = loop_filter;
        ins.arg = s;
        ins.name = s->etcd != NULL   ? "etcd"
                   : s->kube != NULL ? "kubernetes"
                                     : "MeshLink catalogs";
        ins.stop = s->stop;
        struct analysis_node node = {0};
        node.name = bs->node.name;
        node.ns = bs->node.ns;
        node.labels = &bs->node.labels;
        node.service = bs->node.service;
        s->source = source_new(base, bs->config.dir, bs->config.default_ns,
                               &ins, (uint64_t)bs->config.debounce_ms,
                               bs->outbound.mode, &node, on_resources, s, err);
        if (s->source == NULL) {
            *config_error = 1;
            goto fail;
        }
    }
    if (bs->links.address.len > 0) {
        const struct catalog_self self = {bs->node.name, bs->node.network,
                                          bs->trust_domain};
        const struct link_server_limits lim = {
            (uint64_t)bs->links.handshake_timeout_ms,
            (size_t)bs->links.max_per_source};
        if (identity == NULL) {
            err_set(err, "links.address: the catalog API presents this "
                         "node's SPIFFE certificate: set ca.enabled (or "
                         "join a CA)");
            *config_error = 1;
            goto fail;
        }
        s->link_server =
            link_server_new(base, &s->reaper, &bs->links.address, bs->ca.dir,
                            identity, &self, &lim, s->inherited, err);
        if (s->link_server == NULL)
            goto fail;
    }
    links_follow(s);
    /* After the resolver: the endpoint may be a name. */
    if (bs->tracing.endpoint[0] != '\0' && start_tracing(s, bs, err) < 0)
        goto fail;
    if (build(s, bs, &next, err) < 0)
        goto fail;
    hooks.main = s->inbox;
    hooks.event = on_worker_event;
    hooks.arg = s;
    for (int w = 0; w < s->nworkers; w++) {
        if (worker_init(&s->workers[w], w, &hooks) < 0 ||
            worker_start(&s->workers[w]) < 0) {
            err_set(err, "cannot start worker threads");
            goto fail;
        }
    }
    loop_publish(s, next);
    next = NULL;
    if (s->acks_pending < s->nworkers) {
        err_set(err, "out of memory");
        goto fail;
    }
    arm_cert_timer(s);
    overload_configure(s);
    /* After an upgrade, once the old process made this one systemd's. */
    if (s->parent_fd < 0)
        sd_watchdog_start(s);
    s->inherited = NULL;
    log_info("strait %s started: %d worker(s), %zu listener(s), admin on %s",
             PACKAGE_VERSION, s->nworkers, s->cur->n,
             addr_format(&bs->admin.address, as, sizeof(as)));
    return s;
fail:
    snapshot_unref(next);
    s->parent_fd = -1; /* still the caller's, to say why */
    loop_free(s);
    return NULL;
}

void loop_free(struct loop *s)
{
    if (s == NULL)
        return;
    if (s->workers != NULL) {
        for (int w = 0; w < s->nworkers; w++)
            worker_stop(&s->workers[w]);
        for (int w = 0; w < s->nworkers; w++)
            worker_dispose(&s->workers[w]);
    }
    /* Run what workers posted last so their messages are freed. */
    s->stopping = 1;
    if (s->inbox != NULL)
        mq_drain(s->inbox);
    mq_free(s->inbox);
    admin_free(s->admin);
    admin_free(s->metrics_port);
    admin_free(s->ready_port);
    source_free(s->source);
    link_server_free(s->link_server);
    links_free(s->links);
    free(s->inputs);
    free(s->link_gws);
    timer_dispose(&s->links_timer);
    reaper_dispose(&s->reaper);
    for (int i = 0; i < GEOIP_NDB; i++)
        dirwatch_free(s->geoip_watch[i]);
    mesh_roots_free(s->mesh_roots);
    source_etcd_free(s->etcd);
    source_kube_free(s->kube);
    /* The JWKS fetches resolve through the dns cache: they go first. */
    jwks_cache_free(s->jwks);
    /* Before the resolver its request in flight may use. */
    otlp_free(s->otlp);
    dns_cache_free(s->dns);
    timer_dispose(&s->drain_timer);
    timer_dispose(&s->drain_window_timer);
    timer_dispose(&s->cert_timer);
    timer_dispose(&s->watchdog_timer);
    timer_dispose(&s->overload_timer);
    notify_dispose(&s->notify);
    upgrade_free(s->up);
    if (s->parent_ev != NULL)
        event_free(s->parent_ev);
    if (s->parent_fd >= 0)
        close(s->parent_fd);
    free(s->last_upgrade_error);
    free(s->self_exe);
    release_old(s);
    /* Drain may have closed cur's sockets already (NULL entries). */
    snapshot_unref(s->cur);
    /* After the workers: their buffers were handed over as they
     * stopped, and what is pending is written now. */
    lsink_free(s->alog);
    spanq_free(s->spans);
    /* After the last snapshot: each holds references to its dicts. */
    luadict_set_free(s->dicts);
    bootstrap_free(s->bs);
    cx_limit_unref(s->cx_root);
    free(s->last_reload_error);
    free(s->last_rebuild_error);
    free(s->workers);
    free(s->config_path);
    series_table_free(s->metrics);
    geoip_free(s->geoip);
    free(s);
}
