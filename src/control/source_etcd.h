#ifndef STRAIT_CONTROL_SOURCE_ETCD_H
#define STRAIT_CONTROL_SOURCE_ETCD_H

#include <stddef.h>
#include <stdint.h>

struct bootstrap_etcd;
struct buf;
struct event_base;
struct res_input;

/*
 * The Istio resources under an etcd prefix, kept in step with etcd by
 * exactly one watch for the life of the source (the lesson of Istio
 * 1.4.3's 20,000 watches: a watch belongs to the source, never to a
 * snapshot, a reload or a worker).
 *
 * - Start: read the prefix (/v3/kv/range) and watch from its revision + 1.
 * - A broken stream: the next member is asked to watch from the last
 *   revision seen + 1; what happened meanwhile arrives as events, nothing
 *   is read again.
 * - A compaction past that revision (the watch is canceled with
 *   compact_revision): read the prefix again at the newest revision, diff
 *   it against the keys held (deletes included) and watch from there.
 * - A watch message larger than maxResponseBytes, or not etcd's JSON: it
 *   is skipped (logged, counted, named on /healthz/ready) and the prefix
 *   is read again as after a compaction. Every read of the prefix goes by
 *   pages of pageSize keys at the revision of the first page; a page too
 *   large is asked again with half the keys, and at one key that key is
 *   named (keys only) and left out.
 * - No member answers: the keys held stay (so does the snapshot built from
 *   them), and the next attempt comes after a jittered, capped,
 *   exponential delay.
 *
 * on_change(arg) runs when the keys held changed (once per watch message
 * at most, a transaction's events together); the owner then loads the
 * inputs (source_etcd_inputs()) into a new snapshot.
 */
struct source_etcd;

/* source_etcd_new() starts; NULL with an allocated *err when conf cannot
 * be used (a TLS file that does not load). conf is copied. Member names
 * resolve through dns (dns_resolve(): the control loop's evdns with
 * dns.nameservers), which must outlive the source. */
struct dns_cache;
struct source_etcd *source_etcd_new(struct event_base *base,
                                    const struct bootstrap_etcd *conf,
                                    struct dns_cache *dns,
                                    void (*on_change)(void *), void *arg,
                                    char **err);
void source_etcd_free(struct source_etcd *e);

/* source_etcd_inputs() sets *v to one input per key held (the key, its
 * value and the resource the key names), in key order; owned by the
 * source, valid until it calls on_change again or is freed. */
size_t source_etcd_inputs(struct source_etcd *e, const struct res_input **v);

struct source_etcd_status {
    int synced;       /* the prefix has been read at least once */
    int watching;     /* a watch is established now */
    int64_t revision; /* the revision the keys held are at */
    size_t keys;
    const char *endpoint;     /* the member in use, or last tried */
    const char *last_error;   /* NULL while watching */
    uint64_t down_ms;         /* how long no member has answered; 0 */
    uint64_t watches_started; /* watch requests made (one at a time) */
    uint64_t reconnects;      /* watches resumed after a broken stream */
    uint64_t ranges;          /* whole prefix reads */
    uint64_t range_pages;     /* range requests answered (pages) */
    uint64_t skipped;         /* watch messages skipped (too large, bad) */
    uint64_t keys_skipped;    /* keys found too large by the pages */
    size_t keys_left_out;     /* ... in the last whole read */
    const char *last_skip;    /* what was skipped last; NULL: nothing */
    uint64_t compactions;     /* watches canceled by a compaction */
    uint64_t events;          /* watch events applied */
    uint64_t progress;        /* progress notifications */
    uint64_t failures;        /* requests that failed */
    uint64_t last_backoff_ms; /* the last reconnect delay drawn */
    int64_t watch_created_ms; /* wall clock (ms) the last watch began */
};

void source_etcd_status(const struct source_etcd *e,
                        struct source_etcd_status *out);

/* source_etcd_json() writes the status as a JSON object. */
void source_etcd_json(const struct source_etcd *e, struct buf *b);

#endif
