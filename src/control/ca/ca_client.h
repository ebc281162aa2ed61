#ifndef STRAIT_CONTROL_CA_CA_CLIENT_H
#define STRAIT_CONTROL_CA_CA_CLIENT_H

#include <openssl/base.h>
#include <stdint.h>

struct ca_cred;
struct dns_cache;
struct dns_conf;
struct event_base;

/*
 * The joining side of the CA API: one certificate request to a CA server,
 * on an event loop.
 *
 * The server is trusted only when its chain ends in a root whose
 * SubjectPublicKeyInfo hashes to pin (from the join token, or from the
 * stored root-cert.pem on renewal) and its certificate carries the CA
 * server's SPIFFE ID (CA_SERVER_ID_PATH). The request is authenticated by
 * token (first certificate) or by presenting cred (renewal over mTLS).
 */
struct ca_client_conf {
    const char *url;            /* https://HOST:PORT, or HOST:PORT */
    const uint8_t *pin;         /* 32 bytes */
    const char *token;          /* join token, or NULL */
    const struct ca_cred *cred; /* client certificate, or NULL */
    EVP_PKEY *key;              /* the key to certify (a reference is taken) */
    int64_t validity_s;         /* requested; 0: the CA's default */
    int timeout_s;              /* whole exchange; 0: 15 s */
    /* ca_client_request(): resolves a host name in url (control/dns.h),
     * on the request's loop; NULL: only an address literal works. */
    struct dns_cache *dns;
    /* ca_client_fetch(): the settings of the resolver it makes on its own
     * loop for a host name; NULL: the system's (/etc/resolv.conf). */
    const struct dns_conf *dns_conf;
};

/* Called once with a new credential (the callee owns the reference) or
 * NULL and a message saying what went wrong on which side. */
typedef void (*ca_client_cb)(void *arg, struct ca_cred *cred, const char *err);

struct ca_client_req;

/* ca_client_request() starts the exchange. NULL with *err when it cannot
 * even start (bad URL, unresolvable host); cb is then never called. */
struct ca_client_req *ca_client_request(struct event_base *base,
                                        const struct ca_client_conf *conf,
                                        ca_client_cb cb, void *arg, char **err);

/* ca_client_cancel() stops a request in flight; cb is not called. */
void ca_client_cancel(struct ca_client_req *r);

/* ca_client_fetch() runs one request to completion on a private loop
 * (startup and the command line). The credential, or NULL with *err. */
struct ca_cred *ca_client_fetch(const struct ca_client_conf *conf, char **err);

/* ca_client_parse_url() splits URL into host and port (allocated host).
 * 0, or -1 with a static reason. */
int ca_client_parse_url(const char *url, char **host, int *port,
                        const char **why);

#endif
