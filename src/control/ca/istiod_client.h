#ifndef STRAIT_CONTROL_CA_ISTIOD_CLIENT_H
#define STRAIT_CONTROL_CA_ISTIOD_CLIENT_H

#include <openssl/base.h>
#include <stdint.h>

struct ca_cred;
struct dns_cache;
struct dns_conf;
struct event_base;

/*
 * A certificate from istiod, as Istio's agent gets one: the gRPC call
 * istio.v1.auth.IstioCertificateService/CreateCertificate (ca_grpc.h) over
 * HTTP/2 and TLS, on an event loop, never blocking it.
 *
 * Each call reads the token file again (the kubelet rotates the
 * projected service-account token) and the root file again (the
 * istio-ca-root-cert ConfigMap may be updated). A token whose exp has
 * passed is not sent: the call fails at once saying so. istiod is trusted
 * only when its certificate verifies against the roots of root_file for
 * server_name (istiod's own is for istiod.istio-system.svc). The
 * certificate issued must chain to those roots and carry spiffe_id.
 */
struct istiod_conf {
    const char *address;     /* HOST:PORT */
    const char *server_name; /* SNI and the name checked; NULL or "": host */
    const char *root_file;   /* PEM roots istiod's chain ends in */
    const char *token_file;  /* the projected token (audience istio-ca) */
    const char *audience;    /* the audience the token should name */
    const char *cluster_id;  /* the ClusterID header; NULL or "": none */
    const char *spiffe_id;   /* the identity asked for (CSR SAN) */
    int64_t validity_s;      /* validity_duration; 0: istiod's default */
    int64_t timeout_ms;      /* connect to answer; 0: 15 s */
    /* istiod_request(): resolves a host name; NULL: address literals. */
    struct dns_cache *dns;
    /* istiod_fetch(): the resolver settings for its private loop. */
    const struct dns_conf *dns_conf;
};

/* Called once with a new credential (the callee owns the reference) or
 * NULL and a message saying what failed, and where; unavailable is 1 when
 * the failure is istiod not being there (no connection, no answer in
 * time, gRPC UNAVAILABLE), which may pass, rather than a refusal. */
typedef void (*istiod_cb)(void *arg, struct ca_cred *cred, const char *err,
                          int unavailable);

struct istiod_req;

/* istiod_request() starts a call for key (a reference is taken). NULL
 * with an allocated message in *err when it cannot start (an unreadable
 * or expired token, unreadable roots, a bad address); cb is then never
 * called. */
struct istiod_req *istiod_request(struct event_base *base,
                                  const struct istiod_conf *conf, EVP_PKEY *key,
                                  istiod_cb cb, void *arg, char **err);

/* istiod_cancel() stops a call in flight; cb is not called. NULL: no-op. */
void istiod_cancel(struct istiod_req *r);

/* istiod_fetch() runs one call to completion on a private loop (start-up).
 * The credential, or NULL with *err and *unavailable as istiod_cb has it. */
struct ca_cred *istiod_fetch(const struct istiod_conf *conf, EVP_PKEY *key,
                             int *unavailable, char **err);

#endif
