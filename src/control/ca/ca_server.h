#ifndef STRAIT_CONTROL_CA_CA_SERVER_H
#define STRAIT_CONTROL_CA_CA_SERVER_H

#include <stdint.h>

#include "core/addr.h"

struct reaper;

struct ca;
struct ca_identity;
struct event_base;

/*
 * The CA's API server on the main thread's loop: TLS 1.2+ with the
 * credential published in tls_id. ALPN picks the API: http/1.1 (or none)
 * the JSON API (ca_api.h), one request per connection; h2 the gRPC API
 * istiod serves (ca_grpc.h, ca_server_grpc.h), calls one after another
 * until the connection's deadline.
 *
 * A request is authenticated either by a join token (Authorization:
 * Bearer), which is spent, or by a client certificate this CA issued
 * (renewal); the certificate's SAN is the token's ns/sa or the client
 * certificate's SPIFFE ID, never what the CSR asks for. A new credential
 * published in tls_id is used from the next handshake on.
 *
 * The server certificate is the CA server's own: spiffe://TD/strait/ca,
 * a path the CA never issues to a workload (workloads get /ns/NS/sa/SA),
 * so joining hosts can tell the CA from a workload of the same root.
 */
#define CA_SERVER_ID_PATH "/strait/ca"

struct ca_server;

/* Kubernetes service-account tokens the gRPC API accepts: JWTs of
 * issuer, signed by a key of jwks_file (read once), naming audience, whose
 * sub system:serviceaccount:NS:SA is the identity issued. */
struct ca_server_tokens {
    const char *issuer;
    const char *jwks_file; /* NULL or "": tokens are not accepted */
    const char *audience;
};

/* ca_server_new() listens on a (adopting pool's CA socket for a when
 * there is one; pool may be NULL). ca and tls_id must outlive the server;
 * reaper (the thread's deferred-free list, where closed connections go)
 * must outlive it too. NULL with an allocated message in *err. */
struct sock_pool;
struct ca_server *ca_server_new(struct event_base *base, struct reaper *reaper,
                                const struct addr *a, const struct ca *ca,
                                struct ca_identity *tls_id,
                                const struct ca_server_tokens *sat,
                                struct sock_pool *pool, char **err);

/* ca_server_listen_fd() is the listening socket (owned by s), for a
 * binary upgrade to hand over. */
int ca_server_listen_fd(const struct ca_server *s);

/* The bound address (port 0 resolved). */
const struct addr *ca_server_addr(const struct ca_server *s);

/* Counters, for logs and tests. */
struct ca_server_stats {
    uint64_t issued_token;
    uint64_t issued_renewal;
    uint64_t issued_sa_token;    /* gRPC, by a service-account token */
    uint64_t refused;            /* requests answered with an error */
    uint64_t refused_per_source; /* connections over CA_MAX_PER_SOURCE */
    uint64_t refused_busy;       /* connections over a kind's slots */
    uint64_t timed_out;          /* connections closed at a deadline */
};
const struct ca_server_stats *ca_server_stats(const struct ca_server *s);

void ca_server_free(struct ca_server *s);

#endif
