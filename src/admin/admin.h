#ifndef STRAIT_ADMIN_ADMIN_H
#define STRAIT_ADMIN_ADMIN_H

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"
#include "net/overload.h"

struct buf;
struct event_base;
struct stats_block;
struct cluster;
struct series_table;
struct geoip;

/*
 * The admin API: health, stats, config dump and shutdown over HTTP on the
 * main thread's loop (libevent's evhttp; not on the request path). The
 * server above supplies what the admin shows through these callbacks, so
 * this layer never names the server.
 */
/* One watched Kubernetes kind, summed over its namespaces
 * (control/source_kube.h has the meaning of each count). */
struct admin_kube_kind {
    const char *kind;
    int synced;
    int missing;
    size_t objects;
    size_t bad;
    uint64_t watches_opened;
    uint64_t relists;
    uint64_t expired;
    uint64_t errors;
    uint64_t events;
};

/* admin_kube_stats() writes st's kubernetes.* lines of /stats;
 * admin_kube_prometheus() their strait_kubernetes_* families (with a
 * kind label). Nothing without config.kubernetes. */
struct admin_status;
void admin_kube_stats(const struct admin_status *st, struct buf *b);
void admin_kube_prometheus(const struct admin_status *st, struct buf *b);

struct admin_status {
    const struct geoip *geoip; /* NULL: no geoip databases */
    int draining;
    int workers;
    uint64_t reloads_ok;
    uint64_t reloads_failed;
    const char *last_reload_error; /* NULL when the last reload succeeded */
    /* Rebuilds from the inputs in effect (resources, DNS, JWKS). */
    uint64_t rebuilds_ok;
    uint64_t rebuilds_failed;
    const char *last_rebuild_error; /* NULL when the last one succeeded */
    uint64_t uptime_ms;
    /* /server_info: the restart epoch (binary upgrades since the first
     * process), the uptime of all epochs, and the command line's and
     * bootstrap's settings Envoy shows in command_line_options. */
    int restart_epoch;
    uint64_t uptime_all_ms;
    const char *config_path;
    const char *log_level;
    uint64_t drain_ms;
    int has_resources; /* a config.dir is in use */
    size_t resources;
    uint64_t resource_reloads_ok;
    uint64_t resource_reloads_failed;
    const char *resource_error; /* NULL when the last load succeeded */
    /* A load of etcd's, the Kubernetes API's or the links' resources is
     * running on the builder thread (1) or not (0). */
    size_t resource_loading;
    /* config.etcd */
    int has_etcd;
    int etcd_synced;
    int etcd_built; /* a load begun after the read has ended */
    int etcd_watching;
    int64_t etcd_revision;
    size_t etcd_keys;
    const char *etcd_endpoint;
    const char *etcd_error; /* NULL while watching */
    uint64_t etcd_down_ms;
    uint64_t etcd_watches_started;
    uint64_t etcd_reconnects;
    uint64_t etcd_ranges;
    uint64_t etcd_compactions;
    uint64_t etcd_events;
    uint64_t etcd_progress;
    uint64_t etcd_failures;
    uint64_t etcd_last_backoff_ms;
    int64_t etcd_watch_created_ms; /* wall clock of the last watch made */
    uint64_t etcd_range_pages;
    uint64_t etcd_skipped;      /* watch messages skipped */
    uint64_t etcd_keys_skipped; /* keys too large, found by range pages */
    size_t etcd_keys_left_out;  /* ... in the last whole read */
    const char *etcd_last_skip; /* NULL: nothing skipped */
    /* config.kubernetes: ready once every kind was listed and the
     * snapshot of them was built (latched); per kind below. */
    int has_kube;
    int kube_ready;
    const char *kube_error; /* the last failure of any watch; NULL: none */
    const struct admin_kube_kind *kube_kinds;
    size_t kube_nkinds;
    /* ServiceEntries resolved with DNS. */
    uint64_t dns_queries;
    uint64_t dns_failures;
    uint64_t dns_changes;
    uint64_t dns_names;
    /* RequestAuthentication http(s) jwksUris. */
    uint64_t jwks_fetches;
    uint64_t jwks_failures;
    uint64_t jwks_changes;
    uint64_t jwks_uris;
    /* The access log's writer (event/logsink.h). */
    uint64_t alog_written;
    uint64_t alog_dropped;
    uint64_t alog_write_errors;
    uint64_t alog_reopens;
    /* Overload protection (net/overload.h). */
    int64_t cx_active;       /* downstream connections open, all listeners */
    int64_t cx_max;          /* limits.maxConnections; 0: none */
    uint64_t memory_limit;   /* overload.memoryLimit; 0: no memory actions */
    uint64_t memory_used;    /* resident memory at the last check */
    uint64_t heap_allocated; /* bytes malloc() has handed out, in use */
    unsigned overload;       /* OVERLOAD_BIT()s in effect */
    uint64_t overload_activations[OVERLOAD_NACTIONS];
    /* The node's mesh certificate (ca.enabled or a join). */
    int has_identity;
    int identity_unstored; /* in use from memory: DIR/identity not written */
    uint64_t identity_store_failures; /* failed writes since start */
    const char *identity_store_error; /* why, while unstored; else NULL */
    /* Renewals of this node's certificate that failed since the last
     * success (from istiod, a joined CA), and the last one's reason
     * (NULL once one succeeds); identity_expired: the certificate in use
     * is past its notAfter. */
    uint64_t identity_renew_failures;
    const char *identity_renew_error;
    int identity_expired;
    /* Tracing (tracing.endpoint set). */
    int tracing;
    uint64_t spans_queued;
    uint64_t spans_dropped;
    uint64_t spans_pending;
    uint64_t spans_exported;
    uint64_t export_requests;
    uint64_t export_failures;
    uint64_t export_retries;
    /* Binary upgrades (POST /upgrade, SIGUSR2, strait upgrade). */
    int pid;              /* this process */
    int serving;          /* every worker ran the first configuration */
    int upgrade_pid;      /* the new process of the last upgrade; 0: none */
    int upgrade_running;  /* 1 while one runs */
    uint64_t upgrades_ok; /* handed over: the new process serves */
    uint64_t upgrades_failed;
    const char *last_upgrade_error; /* NULL when the last one succeeded */
};

/* What a POST /reload did; the body of the answer says it. */
enum admin_reload {
    ADMIN_RELOADED,        /* in effect */
    ADMIN_RELOAD_FAILED,   /* refused: last_reload_error says why */
    ADMIN_RELOAD_QUEUED,   /* runs once the workers have switched */
    ADMIN_RELOAD_DRAINING, /* ignored while draining */
};

/* One LuaPolicy error count, for admin_ops.lua_errors. */
typedef void admin_lua_error_fn(void *ctx, const char *listener,
                                const char *policy, const char *phase,
                                const char *reason, uint64_t n);

struct admin_ops {
    void *arg;
    void (*status)(void *arg, struct admin_status *out);
    /* Current listeners' counters (blocks of proxy_stats_layout); the
     * array and entries stay valid until the main loop runs again. */
    size_t (*listeners)(void *arg, struct stats_block *const **out);
    /* Current upstream clusters; same lifetime rule. */
    size_t (*clusters)(void *arg, struct cluster *const **out);
    void (*config_json)(void *arg, struct buf *b);
    void (*quit)(void *arg);
    /* POST /reload: re-read the bootstrap and the resources (SIGHUP), on
     * the main thread, before the answer is written. */
    enum admin_reload (*reload)(void *arg);
    /* Istio's metrics tables (core/series.h); NULL (or a NULL answer):
     * none. Valid while the server runs. */
    struct series_table *(*metrics)(void *arg);
    /* POST /upgrade: start a binary upgrade. 0 with the new process's pid
     * in *pid (it runs on; its outcome shows in /stats), or -1 with the
     * reason in why (refused: draining, one already running, the binary
     * cannot be started). NULL: 404. */
    int (*upgrade)(void *arg, int *pid, struct buf *why);
    /* LuaPolicy errors (policy/lua_vm.h): calls fn(ctx, ...) once per
     * listener, policy, phase and reason with the count; NULL: none.
     * /stats shows each as "lua.<listener>.<ns/name>.<phase>.<reason>: N",
     * /stats/prometheus as strait_lua_errors_total. The strings are valid
     * during the call only. */
    void (*lua_errors)(void *arg, admin_lua_error_fn *fn, void *ctx);
    /* GET /links: site links as JSON (MeshLinks and this site's catalog
     * API); NULL: 404. */
    void (*links_json)(void *arg, struct buf *b);
    /* The strait_link_* families for /stats/prometheus; NULL: none. */
    void (*links_prometheus)(void *arg, struct buf *b);
};

struct admin;

/*
 * Who may talk to the admin API from a browser's point of view. A request
 * whose Host is not a loopback literal (127.0.0.0/8, [::1]), "localhost",
 * the admin's own bound address or one of hosts is refused with 403 (one
 * with no Host at all is not a browser's and is answered): a
 * page on another site that rebinds its name to 127.0.0.1 (DNS rebinding)
 * cannot read /config_dump. A POST, PUT or DELETE that carries an Origin
 * not listed in origins is refused with 403: a cross-site form or fetch
 * cannot /quitquitquit or /reload. Clients that send no Origin (curl,
 * Prometheus, kubelet probes) are not affected.
 */
struct admin_policy {
    const char *const *hosts; /* "name" or "name:port" */
    size_t nhosts;
    const char *const *origins; /* "scheme://host[:port]" */
    size_t norigins;
};

/* admin_set_policy() copies p; it applies to the next request on. 0, or
 * -1 when memory runs out (the policy in effect stays). */
int admin_set_policy(struct admin *a, const struct admin_policy *p);

/* admin_host_allowed() and admin_origin_allowed() are the checks, apart
 * from HTTP, for tests: bound is the admin's own address. */
int admin_host_allowed(const struct admin_policy *p, const struct addr *bound,
                       const char *host);
int admin_origin_allowed(const struct admin_policy *p, const char *origin);

struct sock_pool;

/* admin_new() listens on a, adopting pool's admin socket for a when
 * there is one (pool may be NULL); NULL with an allocated message in
 * *err. */
struct admin *admin_new(struct event_base *base, const struct addr *a,
                        const struct admin_ops *ops, struct sock_pool *pool,
                        char **err);

/* admin_listen_fd() is the listening socket (owned by a), for a binary
 * upgrade to hand over; -1 once admin_stop_accepting() ran. */
int admin_listen_fd(const struct admin *a);

/* admin_stop_accepting() stops accepting and closes a's copy of the
 * listening socket (the process an upgrade handed it to goes on
 * accepting on it); requests on open connections are still answered. */
void admin_stop_accepting(struct admin *a);
void admin_free(struct admin *a);

/*
 * A port that serves one thing of the admin API, for scrapers and probes
 * that reach a pod by its IP: ADMIN_PORT_METRICS answers GET
 * /stats/prometheus (Envoy's 15090), ADMIN_PORT_READY GET /healthz/ready
 * (Istio's 15021); every other path is 404. They change nothing and
 * show no configuration, so they take any Host (a kubelet or Prometheus
 * sends the pod IP). Freed with admin_free(). NULL with *err. pool: as
 * for admin_new(), the socket named (SOCK_POOL_ADMIN, a, kind).
 */
enum admin_port { ADMIN_PORT_ALL, ADMIN_PORT_METRICS, ADMIN_PORT_READY };
struct admin *admin_port_new(struct event_base *base, const struct addr *a,
                             const struct admin_ops *ops, enum admin_port kind,
                             struct sock_pool *pool, char **err);

/* The response bodies, apart from HTTP, for tests and the fuzzers. */
void admin_render_stats(const struct admin_ops *ops, struct buf *b);
void admin_render_prometheus(const struct admin_ops *ops, struct buf *b);
void admin_render_clusters(const struct admin_ops *ops, struct buf *b);

/* admin_render_server_info() writes GET /server_info: Envoy's
 * ServerInfo JSON (version, state, uptimes, command_line_options). */
void admin_render_server_info(const struct admin_ops *ops, struct buf *b);

/* admin_render_istio() appends Istio's standard metrics of t (every
 * worker's series summed by label set) and strait's overflow counter. */
void admin_render_istio(const struct series_table *t, struct buf *b);

#endif
