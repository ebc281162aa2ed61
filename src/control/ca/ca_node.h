#ifndef STRAIT_CONTROL_CA_CA_NODE_H
#define STRAIT_CONTROL_CA_CA_NODE_H

#include <stdint.h>

#include "control/ca/pki.h"
#include "control/dns.h"
#include "core/addr.h"

struct reaper;

struct bootstrap;
struct ca;
struct ca_identity;
struct event_base;

/*
 * This node's place in the mesh's PKI, on the main thread's loop. Either
 *
 *  - it runs the CA (ca.enabled): it opens or creates the CA, issues its
 *    own SPIFFE certificate locally, serves the CA API and renews both its
 *    certificate and the API's at half life with jitter; or
 *  - it joins a CA (ca.join.address or --join): it uses the certificate
 *    stored in DIR/identity/ while it is valid, else redeems the join
 *    token for one, and renews over mTLS with its current certificate;
 *    or
 *  - it gets its certificate from istiod (ca.istiod.address), as Istio's
 *    agent does: a new key and a gRPC CreateCertificate call with the
 *    projected service-account token, at start and at each renewal. The
 *    credential is kept in memory only (never in DIR/identity).
 *
 * Either way the current credential is published in ca_node_identity()
 * (generation-numbered, see identity.h) for TLS contexts to pick up, and
 * stored in DIR/identity/ (key.pem, cert-chain.pem, root-cert.pem, 0600).
 */
struct sock_pool;

struct ca_node_conf {
    int enabled;
    const char *dir;
    const char *cacerts;
    const char *trust_domain;
    const char *ns;
    const char *sa;
    enum pki_key_type key_type;
    int64_t root_ttl_s;
    int64_t cert_ttl_s;
    int64_t max_ttl_s;
    struct addr address;
    const char *join_url;   /* "" or NULL: not joining */
    const char *join_token; /* "" or NULL: none */
    struct dns_conf dns;    /* resolving a join_url host name */
    /* istiod: the node's certificate from istiod's gRPC CA
     * (istiod_client.h); istiod_address "" or NULL: not used. */
    const char *istiod_address;
    const char *istiod_root_cert;
    const char *istiod_token;
    const char *istiod_cluster_id;
    const char *istiod_server_name;
    int64_t istiod_start_timeout_ms; /* how long start waits for istiod */
    /* Service-account tokens the CA's gRPC API accepts (ca_server.h);
     * sa_jwks_file "" or NULL: none. */
    const char *sa_issuer;
    const char *sa_jwks_file;
    const char *sa_audience;
    /* DNS names of the CA server's certificate; none: the default. */
    const char *const *server_names;
    size_t nserver_names;
    /* Sockets a binary upgrade handed over; NULL: none. */
    struct sock_pool *inherited;
};

/* ca_node_conf_init() fills conf from the bootstrap (pointers into bs). */
void ca_node_conf_init(struct ca_node_conf *conf, const struct bootstrap *bs);

/* ca_node_wanted() is true when conf asks for a CA or a join. */
int ca_node_wanted(const struct ca_node_conf *conf);

struct ca_node;

/* ca_node_new() sets everything up (a first join runs to completion
 * before it returns). reaper: the main thread's deferred-free list, which
 * must outlive the node. NULL with an allocated message in *err. */
struct ca_node *ca_node_new(struct event_base *base, struct reaper *reaper,
                            const struct ca_node_conf *conf, char **err);

/* The node's own credential holder; valid while the node lives. */
struct ca_identity *ca_node_identity(struct ca_node *n);

/*
 * Whether this node's certificate reached DIR/identity. A certificate
 * that cannot be written (a full or failing disk) is used from memory and
 * written again with backoff; /stats and /healthz/ready say so.
 */
struct ca_node_store_status {
    int unstored;      /* 1 while the certificate in use is in memory only */
    uint64_t failures; /* failed writes of DIR/identity since start */
    /* Why the last write failed while unstored, else NULL; owned by the
     * node, valid until its loop runs again. */
    const char *error;
    /* Renewals that failed since the last success, and the last one's
     * reason (owned by the node, valid until its loop runs again; NULL
     * when the last renewal succeeded). */
    uint64_t renew_failures;
    const char *renew_error;
    int expired; /* the certificate in use is past its notAfter */
};

/* ca_node_store_status() fills out for the node's own certificate. */
void ca_node_store_status(const struct ca_node *n,
                          struct ca_node_store_status *out);

/* The CA API's bound address, or NULL when this node runs no CA. */
const struct addr *ca_node_server_addr(const struct ca_node *n);

/* ca_node_listen_fd() is the CA API's listening socket (owned by n), or
 * -1 when this node runs no CA. */
int ca_node_listen_fd(const struct ca_node *n);

void ca_node_free(struct ca_node *n);

#endif
