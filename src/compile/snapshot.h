#ifndef STRAIT_COMPILE_SNAPSHOT_H
#define STRAIT_COMPILE_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "compile/compile.h"
#include "compile/identity.h"
#include "compile/istio.h"
#include "core/addr.h"

struct bootstrap;
struct cluster;
struct http_listener_conf;
struct listener_socks;
struct sock_pool;
struct stats_block;
struct cx_limit;
struct resource_set;

/*
 * A snapshot: everything the workers run, compiled from the inputs in
 * effect (the bootstrap, the resource set, DNS answers, JWKS key sets and
 * the node's mesh identity). Built on the main thread by snapshot_build(),
 * never changed afterwards (but for the routes of Gateway listeners, see
 * below, and the sockets at drain), and reference-counted: the last
 * snapshot_unref() frees it.
 *
 * Each part carries a structural identity: a 64-bit FNV-1a hash of the
 * canonical bytes of the inputs it was compiled from, with the bytes kept
 * for a full comparison. A part of a new snapshot whose identity equals
 * the previous snapshot's part of the same name is that part, kept: the
 * same conf object (so the workers' proxies and their sessions stay), the
 * same clusters (their pools, counters, breakers and outlier state).
 */

/* snapshot_id_equal() is ident_equal(): 1 when a and b were built from
 * equal inputs. */
int snapshot_id_equal(const struct ident_id *a, const struct ident_id *b);

struct snapshot_listener {
    char *name;
    struct addr address;
    struct compiled_listener cl;  /* one reference (cl.ops->conf_unref) */
    struct listener_socks *socks; /* one reference; NULL once drained */
    struct stats_block *stats;    /* one reference; follows the name */
    /* The connection limit; one reference, follows the name like stats
     * (connections of retired generations still count on it); NULL
     * without compile_inputs.cx_root. */
    struct cx_limit *cx;
    uint64_t tls_reload_ms; /* certificate checks; 0: no TLS */
    int gateway;            /* from Gateways (routes rebuilt) */
    /* What cl was compiled from; equal across snapshots: kept. */
    struct ident_id id;
    /* L4 listeners: the identity without what their rules are compiled
     * from (resources, DNS answers); equal: the HTTP part of a shared
     * port is kept while the rules are rebuilt. */
    struct ident_id base;
    /* L4 listeners: the DNS names their clusters looked up; Gateway
     * HTTP listeners: the names their routes' clusters looked up. */
    char **dns_names;
    size_t ndns_names;
    /* Gateway HTTP listeners: what their routes were compiled from (the
     * listener, the resources they read, the bootstrap bits, the DNS
     * answers, JWKS key sets and files used, the clusters they point
     * to); equal across snapshots: the routes object is kept, neither
     * compiled nor published again. With what a later build asks for
     * again before deciding: the jwksUris fetched and the files read. */
    struct ident_id routes_id;
    struct ident_id routes_clusters; /* the clusters' identities */
    char **jwks_uris;
    int64_t *jwks_timeouts;
    size_t njwks;
    char **paths;
    size_t npaths;
    /* Kept Gateway HTTP listeners whose routes changed: the new routes
     * (one reference), put into the running conf by snapshot_commit()
     * when the snapshot is published; NULL: none, or committed. */
    struct http_routes *staged;
};

struct series_labels;
struct series_table;

struct snapshot {
    int refs;
    /* The bootstrap it was built from: not owned, outlives the snapshot
     * (the control loop frees a bootstrap after the last snapshot built
     * from it). */
    const struct bootstrap *bs;
    struct gw_set gws; /* the Gateway listeners lowered */
    struct snapshot_listener *v;
    size_t n;
    /* Bootstrap clusters, in bootstrap order: one reference each. */
    struct cluster **clusters;
    struct ident_id *cluster_ids;
    size_t nclusters;
    /* Gateway clusters by identity (see istio_clusters), one
     * reference each. */
    struct ident_map gwclusters;
    /* For the admin: each listener's stats in order; the bootstrap
     * clusters, then the Gateway ones sorted by name. */
    struct stats_block **stats_view;
    struct cluster **cluster_view;
    size_t ncluster_view;
    /* The node's label run of Istio's metrics, shared by every listener
     * it builds (and the next snapshot's, while its text holds), so
     * their requests hit one series without comparing bytes. One
     * reference; NULL: metrics off. */
    struct series_labels *metrics_src;
};

/* What a snapshot is compiled from. Only read; bs and set must outlive
 * the call (bs outlives the snapshot). */
struct compile_inputs {
    const struct bootstrap *bs;
    const struct resource_set *set; /* NULL: no config.dir */
    int nworkers;
    const struct compile_dns *dns;           /* NULL: none */
    const struct compile_identity *identity; /* NULL: no CA */
    const struct compile_jwks *jwks;         /* NULL: none */
    struct lsink *alog_sink; /* access-log writer; NULL: the log itself */
    /* Istio's metrics table (borrowed; outlives every snapshot); NULL:
     * metrics.enabled is false. */
    struct series_table *metrics;
    /* The process's connection limit, parent of every listener's (set
     * from bs->limits by snapshot_build); NULL: nothing counted. */
    struct cx_limit *cx_root;
    struct spanq *spans; /* the span exporter's queue; NULL: none */
    /* LuaPolicy shared dicts by name (outlive snapshots); NULL: each
     * build makes its own (strait check, tests). */
    struct luadict_set *dicts;
    /* Sockets handed over by the strait this one upgrades: addresses
     * found there are adopted, not bound. NULL: none. */
    struct sock_pool *inherited;
    /* GeoIP databases (borrowed; outlive every snapshot); NULL: none. */
    struct geoip *geoip;
    /* Gateways of networks added at run time (the gateways of linked
     * sites), merged with the bootstrap's meshNetworks and the Services
     * labelled topology.istio.io/network into every build: see
     * compile/network.h. Borrowed for the build; NULL when none. */
    const struct net_gateway *gateways;
    size_t ngateways;
    /* The process's stop flag (compile_env.stop); NULL: none. */
    const int *stop;
};

/*
 * snapshot_build() compiles in into a new snapshot, reusing the parts of
 * prev (NULL: none) whose identity is unchanged: a listener whose inputs
 * are equal is kept (a Gateway listener's new routes are staged in the
 * snapshot, see snapshot_commit()); a listener on an
 * address prev binds takes those sockets; stats follow the name; bootstrap
 * clusters are kept one by one. Only new addresses are bound.
 *
 * 0 with *out (one reference), or -1 with an allocated *err; prev is
 * unchanged either way.
 */
int snapshot_build(const struct compile_inputs *in, const struct snapshot *prev,
                   struct snapshot **out, char **err);

/*
 * snapshot_commit() puts the routes s staged for its kept Gateway
 * listeners into their running confs: from then on workers route new
 * requests by them (requests in flight keep the routes they pinned). The
 * one step of publishing s that is not a listener change, so it belongs to
 * the publisher: a snapshot built and dropped changes nothing in effect.
 * Idempotent.
 */
void snapshot_commit(struct snapshot *s);

struct snapshot *snapshot_ref(struct snapshot *s);
void snapshot_unref(struct snapshot *s); /* NULL: no-op */

/* snapshot_close_sockets() drops s's listening sockets (drain: the
 * kernel refuses new connections once no snapshot holds them). */
void snapshot_close_sockets(struct snapshot *s);

/* snapshot_keep_paths() marks s's unix-socket listeners as served by
 * another process (a binary upgrade handed them over): closing them
 * leaves their paths in place. */
void snapshot_keep_paths(struct snapshot *s);

/* snapshot_listener_find() is the listener named name, or NULL. */
const struct snapshot_listener *snapshot_listener_find(const struct snapshot *s,
                                                       const char *name);

/* snapshot_listener_http() is the HTTP proxy conf of l: its own for an
 * HTTP listener, the HTTPS servers' of a shared L4 port, else NULL. Owned
 * by l's conf. */
struct http_listener_conf *
snapshot_listener_http(const struct snapshot_listener *l);

/*
 * The difference between two snapshots, listener by listener: added (a
 * name prev does not have), removed (a name next does not have), kept
 * (same name, same identity: the same conf) or changed (same name, new
 * identity: the new listener takes the old one's place and sockets).
 */
enum snapshot_change {
    SNAPSHOT_ADDED,
    SNAPSHOT_CHANGED,
    SNAPSHOT_KEPT,
    SNAPSHOT_REMOVED,
};

struct snapshot_change_entry {
    enum snapshot_change change;
    const struct snapshot_listener *prev; /* NULL: added */
    const struct snapshot_listener *next; /* NULL: removed */
};

struct snapshot_diff {
    struct snapshot_change_entry *v; /* next's listeners in order, then
                                      * the removed ones in prev's order */
    size_t n;
};

/* snapshot_diff() fills out (prev NULL: everything is added); entries
 * point into prev and next. 0, or -1 when memory runs out. */
int snapshot_diff(const struct snapshot *prev, const struct snapshot *next,
                  struct snapshot_diff *out);
void snapshot_diff_dispose(struct snapshot_diff *d);

/* snapshot_change_name() is "added", "changed", "kept" or "removed". */
const char *snapshot_change_name(enum snapshot_change c);

#endif
