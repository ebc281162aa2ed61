#ifndef STRAIT_CONTROL_LINK_LINK_SERVER_H
#define STRAIT_CONTROL_LINK_LINK_SERVER_H

#include <stdint.h>

#include "control/link/catalog.h"
#include "core/addr.h"

struct buf;
struct ca_identity;
struct event_base;
struct reaper;
struct resource_set;
struct sock_pool;

/*
 * The catalog API (bootstrap links.address) on the main thread's loop:
 * TLS 1.2+ with this node's SPIFFE certificate (the other site verifies
 * it with this site's trust bundle and trust domain), then one request,
 *
 *   GET /v1/catalog HTTP/1.1
 *   Authorization: Bearer slk1.SITE.SECRET
 *
 * answered with a chunked stream of catalog lines (catalog.h) for as long
 * as the link lives: the catalog at once, again on every change, a ping
 * every CATALOG_PING_MS. A credential that does not match a record of
 * ca.dir/links/ gets 401 with a JSON {"error": ...} saying what to do;
 * once a second every stream's record is read again, and a stream whose
 * link was deleted or re-created is closed. One site holds at most
 * LINK_SERVER_MAX_PER_SITE streams (a second one replaces the first).
 */
#define LINK_SERVER_MAX_CONNS 1024
#define LINK_SERVER_MAX_PER_SITE 1
/* Defaults of links.handshakeTimeout and links.maxConnectionsPerSource
 * (README "Site links", Limits): a connection has the timeout from accept
 * to finish its TLS handshake and send its whole request; one source
 * address holds at most that many connections (net/source_limit.h, as on
 * the CA API), and at most LINK_SERVER_MAX_PENDING connections, from all
 * sources, are before their request at once, so idle clients from many
 * sources still leave the streams' slots alone. */
#define LINK_SERVER_HANDSHAKE_MS 5000
#define LINK_SERVER_MAX_PER_SOURCE 16
#define LINK_SERVER_MAX_PENDING 128
/* A stream whose unsent bytes pass this is closed (a reader that stalls). */
#define LINK_SERVER_MAX_BACKLOG (32u << 20)

struct link_server;

/* The connection limits of the catalog API (bootstrap links.*). */
struct link_server_limits {
    uint64_t handshake_ms; /* 0: LINK_SERVER_HANDSHAKE_MS */
    size_t per_source;     /* 0: LINK_SERVER_MAX_PER_SOURCE */
};

/* link_server_new() listens on a (adopting pool's socket when there is
 * one; pool may be NULL). dir (ca.dir: the link records), id (the node's
 * credential) and reaper must outlive the server; self and lim (NULL:
 * the defaults) are copied. NULL with an allocated *err. */
struct link_server *link_server_new(struct event_base *base,
                                    struct reaper *reaper, const struct addr *a,
                                    const char *dir, struct ca_identity *id,
                                    const struct catalog_self *self,
                                    const struct link_server_limits *lim,
                                    struct sock_pool *pool, char **err);

/* link_server_publish() makes set's exported services the catalog (set
 * NULL: none); when it changed, its version goes up and every stream gets
 * it. */
void link_server_publish(struct link_server *s, const struct resource_set *set);

int link_server_listen_fd(const struct link_server *s);
const struct addr *link_server_addr(const struct link_server *s);

struct link_server_stats {
    uint64_t accepted;           /* streams that got a catalog */
    uint64_t refused;            /* requests answered with an error */
    uint64_t refused_per_source; /* connections over the per-source limit */
    uint64_t refused_busy;       /* over LINK_SERVER_MAX_CONNS or _PENDING */
    uint64_t timed_out;          /* closed at the handshake deadline */
    uint64_t closed_deleted; /* streams closed: link deleted or re-created */
    uint64_t active;
    int64_t version; /* of the catalog served */
    uint64_t services;
};
void link_server_stats(const struct link_server *s,
                       struct link_server_stats *out);

/* link_server_json() appends {"address":..,"accepted":..,..,"streams":
 * [{"site":..,"peer":..,"since":..}]}. */
void link_server_json(const struct link_server *s, struct buf *b);

void link_server_free(struct link_server *s);

#endif
