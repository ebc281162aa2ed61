#ifndef STRAIT_CONFIG_BOOTSTRAP_H
#define STRAIT_CONFIG_BOOTSTRAP_H

#include <stdint.h>

#include "config/conf.h"
#include "core/addr.h"

struct buf;

/*
 * The bootstrap file, strait.yaml: who this node is and how the process
 * runs. Istio resources (a later source) configure traffic; until Gateways
 * exist, plain TCP listeners live here.
 */
struct bootstrap_node {
    char *name; /* defaults to the host name */
    char *ns;
    char *service_account;
    struct conf_strmap labels;
    char *network;
    char *locality;
};

struct bootstrap_listener {
    struct conf_mark mark;
    char *name;
    struct addr address;
    struct conf_addrs upstreams;
    int64_t connect_timeout_ms;
    int64_t connect_attempts;
    int64_t idle_timeout_ms;
    int64_t buffer_size;
    int64_t backlog;
};

enum bootstrap_log_format { BOOTSTRAP_LOG_TEXT, BOOTSTRAP_LOG_JSON };

struct bootstrap_admin {
    struct addr address;
};

struct bootstrap_log {
    int level; /* enum log_level */
    int format; /* enum bootstrap_log_format */
    int access_log;
};

struct bootstrap {
    struct bootstrap_node node;
    char *trust_domain;
    int64_t workers; /* 0: auto, one per core */
    struct bootstrap_admin admin;
    struct bootstrap_log log;
    int64_t drain_timeout_ms;
    struct conf_list listeners; /* struct bootstrap_listener */
};

extern const struct conf_section bootstrap_section;

/*
 * bootstrap_load() reads and validates the file at path. Returns a new
 * bootstrap, or NULL with every problem found, one per line
 * "path:line:col: key: reason", in the allocated *err.
 */
struct bootstrap *bootstrap_load(const char *path, char **err);

/* bootstrap_parse() is bootstrap_load() on bytes already in memory; name is
 * used in messages. */
struct bootstrap *bootstrap_parse(const char *data, size_t len,
                                  const char *name, char **err);

void bootstrap_free(struct bootstrap *bs);

static inline struct bootstrap_listener *
bootstrap_listener_at(const struct bootstrap *bs, size_t i)
{
    return &((struct bootstrap_listener *)bs->listeners.v)[i];
}

/* bootstrap_workers() resolves "auto" to the number of online cores. */
int bootstrap_workers(const struct bootstrap *bs);

/* bootstrap_listener_equal() is true when two listeners would behave the
 * same, so a reload can leave the running one alone. */
int bootstrap_listener_equal(const struct bootstrap_listener *a,
                             const struct bootstrap_listener *b);

void bootstrap_to_json(const struct bootstrap *bs, struct buf *b);

#endif
