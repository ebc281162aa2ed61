#ifndef STRAIT_CONTROL_ETCD_PROTO_H
#define STRAIT_CONTROL_ETCD_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "core/slice.h"

struct arena;
struct buf;

/*
 * etcd v3's JSON gateway (grpc-gateway over etcdserverpb), as Debian's
 * etcd-server 3.4 speaks it: request bodies written here, answers read
 * here. The rules are proto3 JSON's: a field at its default value is left
 * out (a PUT event has no "type", an empty value no "value", a compaction
 * cancel no header.revision), int64 values are JSON strings (a bare
 * number is taken too), keys and values are base64 (standard alphabet,
 * padded). A field of the wrong type is an error; unknown fields are
 * ignored, as proto3 readers do.
 *
 * Every decoder reads one whole JSON document (the watch stream carries
 * one per line) into the caller's arena: strings and arrays point into it
 * and live as long as it does. They return 0, or -1 with a static reason
 * in *why.
 */

/* The largest answer or watch message read; etcd's own default request
 * limit is 1.5 MiB, a range of a whole prefix can be far more. */
#define ETCD_MAX_JSON_DEPTH 16

struct etcd_header {
    int64_t revision; /* 0: not given (a compaction cancel) */
    uint64_t member_id;
    uint64_t cluster_id;
};

struct etcd_kv {
    struct slice key;   /* decoded bytes, NUL after them */
    struct slice value; /* decoded bytes ("" when not given) */
    int64_t create_revision;
    int64_t mod_revision;
    int64_t version;
};

struct etcd_range {
    struct etcd_header header;
    struct etcd_kv *kvs;
    size_t n;
    int more;
    int64_t count;
};

enum etcd_event_type { ETCD_PUT = 0, ETCD_DELETE = 1 };

struct etcd_event {
    enum etcd_event_type type;
    struct etcd_kv kv;
};

/* One message of a watch stream: {"result":{...}}, or {"error":{...}} when
 * the gateway ends the stream with a gRPC error. */
struct etcd_watch_msg {
    struct etcd_header header;
    int64_t watch_id;
    int created;
    int canceled;
    int64_t compact_revision; /* canceled: the oldest revision kept */
    struct slice cancel_reason;
    struct etcd_event *events;
    size_t n;
    int is_error;       /* {"error":...}: message/code below */
    struct slice error; /* the gateway's message */
    int64_t error_code; /* gRPC code */
};

struct etcd_txn {
    struct etcd_header header;
    int succeeded;
};

/* An error answer (HTTP status other than 200): {"error":"...",
 * "message":"...","code":N}. */
struct etcd_error {
    struct slice message;
    int64_t code; /* gRPC code: 11 OutOfRange for a compacted revision */
};

int etcd_parse_range(struct arena *a, const char *p, size_t n,
                     struct etcd_range *out, const char **why);
int etcd_parse_watch(struct arena *a, const char *p, size_t n,
                     struct etcd_watch_msg *out, const char **why);
int etcd_parse_txn(struct arena *a, const char *p, size_t n,
                   struct etcd_txn *out, const char **why);
/* etcd_parse_auth() reads /v3/auth/authenticate's answer: *token points
 * into a. */
int etcd_parse_auth(struct arena *a, const char *p, size_t n,
                    struct slice *token, const char **why);
int etcd_parse_error(struct arena *a, const char *p, size_t n,
                     struct etcd_error *out, const char **why);

/* Request bodies, appended to b (0, or -1 when b's cap is reached). */

/* etcd_prefix_end() writes into out (key_n bytes) the range_end of a
 * prefix: the prefix with its last byte that is not 0xff incremented and
 * the rest cut. Returns its length (0: every byte is 0xff, the range runs
 * to the end of the key space; etcd spells that "\0"). */
size_t etcd_prefix_end(const char *key, size_t key_n, char *out);

/* {"key":..,"range_end":..[,"revision":"N"]}: revision 0 is the newest. */
int etcd_req_range(struct buf *b, struct slice key, struct slice end,
                   int64_t revision);
/* {"create_request":{"key":..,"range_end":..,"start_revision":"N",
 * "progress_notify":true}} */
/* One page of a range: at most limit keys (0: all) from key, at revision
 * (0: the newest); keys_only leaves the values out (to name a key whose
 * value is too large to read). The answer's "more" says whether keys are
 * left after the page. */
int etcd_req_range_page(struct buf *b, struct slice key, struct slice end,
                        int64_t revision, int64_t limit, int keys_only);
int etcd_req_watch(struct buf *b, struct slice key, struct slice end,
                   int64_t start_revision, int progress_notify);
int etcd_req_auth(struct buf *b, const char *name, const char *password);

/* Transactions of strait apply/delete: every compare must hold (a key's
 * mod_revision as read, 0 for a key that did not exist) and then every
 * op runs, all in one revision. */
struct etcd_txn_op {
    struct slice key;
    struct slice value;   /* put */
    int del;              /* delete key instead of put */
    int64_t mod_revision; /* compare: what was read; 0: absent */
};

int etcd_req_txn(struct buf *b, const struct etcd_txn_op *ops, size_t n);

/* etcd_b64() appends s as padded standard base64 (no quotes). */
int etcd_b64(struct buf *b, struct slice s);

#endif
