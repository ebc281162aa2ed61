#ifndef STRAIT_HTTP2_H2_SERVER_H
#define STRAIT_HTTP2_H2_SERVER_H

#include <stdint.h>

#include "http/conn_conf-t.h"
#include "http/stream.h"

struct bufpool;
struct conn;
struct event_base;
struct http_counters;
struct stats_desc;

struct h2_settings {
    uint32_t max_concurrent_streams;
    uint32_t stream_window;
    uint32_t connection_window;
};

struct h2_server_hooks {
    const struct hstream_handler *handler;
    void *ctx;
    void (*closed)(void *owner);
    void *owner;
};

struct h2_server;

/* The HTTP/2 counters of a listener, one shard per worker (core/stats.h):
 * connections closed for an attack, and streams ended with an error. */
struct h2_counters {
    uint64_t rapid_reset;  /* CVE-2023-44487 */
    uint64_t flood;        /* SETTINGS/PING/empty-frame floods */
    uint64_t continuation; /* CONTINUATION floods */
    uint64_t stream_errors;
};

/* Their names in the admin API's /stats ("http2.rapid_reset", ...). */
extern const struct stats_desc h2_counters_desc;

/*
 * h2_server_new() serves HTTP/2 on c (after TLS with ALPN h2, or in
 * plaintext after the client preface was seen). Limits and timeouts come
 * from the listener's HTTP connection settings, the same conf its HTTP/1
 * connections use. The server counts in the worker's shards http (protocol
 * errors) and counters (floods, stream errors), which must outlive it.
 */
struct h2_server *
h2_server_new(struct event_base *base, struct conn *c,
              const struct http_conn_conf *conf, const struct h2_settings *h2,
              const struct h2_server_hooks *hooks, struct bufpool *pool,
              struct http_counters *http, struct h2_counters *counters);

/* h2_server_received() hands the session bytes of the connection the
 * caller has read already (the start of a client preface taken while
 * detecting h2c), before anything is read from c; call it right after
 * h2_server_new(). 0, or -1 when the session refuses them. */
int h2_server_received(struct h2_server *hs, const uint8_t *data, size_t n);

/* h2_server_drain() sends GOAWAY: streams open now finish, no new ones. */
void h2_server_drain(struct h2_server *hs);

/* h2_server_free() resets every stream and frees the server (not c). */
void h2_server_free(struct h2_server *hs);

#endif
