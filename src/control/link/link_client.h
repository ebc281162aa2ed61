#ifndef STRAIT_CONTROL_LINK_LINK_CLIENT_H
#define STRAIT_CONTROL_LINK_LINK_CLIENT_H

#include <stddef.h>
#include <stdint.h>

struct buf;
struct ca_identity;
struct dns_cache;
struct event_base;
struct res_input;

/*
 * One MeshLink's side of a site link: exactly one long-lived stream to
 * the remote site's catalog API (link_server.h) for the life of the
 * client, whatever else reloads. It verifies the server with the
 * MeshLink's trust bundle (no shared root needed) and its SPIFFE ID
 * against the MeshLink's trust domain, presents this node's certificate
 * when it has one, authenticates with the link credential, and turns each
 * catalog received into registry entries (catalog_resource()).
 *
 * A lost stream is retried after a delay drawn uniformly from
 * [0, min(LINK_BACKOFF_MAX_MS, LINK_BACKOFF_BASE_MS * 2^attempt)] (full
 * jitter), the attempt count reset by a catalog received. The last
 * catalog stays in effect for retain_ms after the stream is lost; then
 * its entries are dropped. A stream that says nothing (not even a ping)
 * for LINK_IDLE_MS is taken as lost.
 */
#define LINK_BACKOFF_BASE_MS 1000
#define LINK_BACKOFF_MAX_MS 60000
#define LINK_IDLE_MS 30000
#define LINK_CONNECT_TIMEOUT_MS 10000

struct link_client_conf {
    const char *name; /* the MeshLink's namespace and name */
    const char *ns;
    const char *catalog; /* IP:port or NAME:port */
    const char *token;
    const char *trust_domain;
    const char *trust_bundle; /* SPIFFE bundle JSON */
    const char *network;
    const char *gateway;
    int64_t gateway_port;
    int64_t retain_ms;
    /* Resolves a catalog host name before each attempt (the control
     * thread's asynchronous resolver); NULL: names are refused. Borrowed;
     * must outlive the client. */
    struct dns_cache *dns;
    /* The turn counter of every link (links.c), so that announcements of
     * different links compare: a host new to this catalog takes ++*seq.
     * Borrowed; NULL: every host takes 1. */
    uint64_t *seq;
};

struct link_client;

/*
 * link_client_new() starts connecting (conf is copied). id: this node's
 * credential holder, presented as the client certificate (NULL: none).
 * on_change(arg) runs, on a later turn of the loop, each time the
 * entries link_client_inputs() gives change. NULL with an allocated *err
 * (a bundle or address that does not parse).
 */
struct link_client *link_client_new(struct event_base *base,
                                    const struct link_client_conf *conf,
                                    struct ca_identity *id,
                                    void (*on_change)(void *), void *arg,
                                    char **err);
void link_client_free(struct link_client *c);

/* link_client_inputs() appends the registry entries of the catalog in
 * effect to in (room for cap) and returns how many it would append (more
 * than cap: call again with more room). The strings belong to c and live
 * until its next change. */
size_t link_client_inputs(const struct link_client *c, struct res_input *in,
                          size_t cap);

/* One host of the catalog in effect: its registry entry's name and the
 * turn it was first announced at. The strings belong to c. */
struct link_client_host {
    const char *host;
    const char *rname;
    uint64_t since;
};
/* link_client_hosts() fills out (room for cap) and returns how many hosts
 * the catalog in effect has, in link_client_inputs() order. */
size_t link_client_hosts(const struct link_client *c,
                         struct link_client_host *out, size_t cap);

struct link_client_state {
    int connected;        /* a stream is up and delivered a catalog */
    int retained;         /* down, last catalog kept */
    size_t services;      /* in effect */
    int64_t version;      /* of the catalog in effect; -1: none */
    int64_t last_sync_ms; /* wall clock of the last catalog; 0: never */
    int64_t connected_ms; /* wall clock the stream came up; 0: down */
    uint64_t connects;    /* streams opened (TLS + 200) */
    uint64_t attempts;    /* connection attempts */
    uint64_t reconnects;  /* attempts after a lost or failed stream */
    uint64_t errors;      /* failures: connect, TLS, refusals, decode */
    uint64_t last_backoff_ms;
    const char *last_error; /* NULL: none since the last catalog */
};
void link_client_state(const struct link_client *c,
                       struct link_client_state *out);

/* link_client_json() appends the client's state as a JSON object. */
void link_client_json(const struct link_client *c, struct buf *b);

#endif
