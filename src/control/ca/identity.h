#ifndef STRAIT_CONTROL_CA_IDENTITY_H
#define STRAIT_CONTROL_CA_IDENTITY_H

#include <openssl/base.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A workload credential and the holder that publishes its rotations.
 *
 * A ca_cred is immutable once built and reference counted: a TLS context
 * built from it may outlive the holder's interest in it. The holder keeps
 * the current one with a generation number, in the manner of tls_holder:
 * a listener or an upstream pool checks the generation (one atomic load)
 * before a new handshake and, when it moved, takes the new credential and
 * builds a new SSL_CTX for new handshakes; connections already up keep
 * the SSL_CTX they started with, so a rotation drops nothing.
 */
struct ca_cred {
    int refs;
    X509 *leaf;
    STACK_OF(X509) * chain; /* issuers, leaf's first, the root last */
    EVP_PKEY *key;
    char *spiffe_id;
    int64_t not_before;
    int64_t not_after;
};

/* ca_cred_new() takes ownership of leaf, chain and key (also on failure)
 * and checks that the key matches the leaf and that the leaf has a SPIFFE
 * ID. NULL with *err. */
struct ca_cred *ca_cred_new(X509 *leaf, STACK_OF(X509) * chain, EVP_PKEY *key,
                            char **err);

/* ca_cred_from_pem() parses a chain (leaf first, root last) and a key. */
struct ca_cred *ca_cred_from_pem(const char *chain, size_t chain_len,
                                 const char *key, size_t key_len, char **err);

struct ca_cred *ca_cred_ref(struct ca_cred *c);
void ca_cred_unref(struct ca_cred *c);

/* The root of the credential's chain (owned by it), or NULL. */
X509 *ca_cred_root(const struct ca_cred *c);

/*
 * ca_cred_store() writes DIR/key.pem, DIR/cert-chain.pem (leaf to root)
 * and DIR/root-cert.pem, each 0600 and atomically (the directory is made
 * 0700). The key is written first; ca_cred_load() refuses a pair that
 * does not match, so a crash between the files loses the credential, not
 * the key's secrecy. 0, or -1 with *err.
 */
int ca_cred_store(const struct ca_cred *c, const char *dir, char **err);

/* ca_cred_load() reads what ca_cred_store() wrote. NULL with *err. */
struct ca_cred *ca_cred_load(const char *dir, char **err);

/* ca_cred_use() makes ctx present c (certificate, chain, key). 0 or -1. */
int ca_cred_use(const struct ca_cred *c, SSL_CTX *ctx);

/* ca_cred_renew_at() picks when to renew: at half of the lifetime, less
 * a random part of up to a tenth of it, so a fleet issued together does
 * not renew together. Seconds since the epoch. */
int64_t ca_cred_renew_at(const struct ca_cred *c);

/* ca_cred_renew_in_ms() is the time from now_ms (the real clock, in
 * milliseconds since the epoch) until ca_cred_renew_at(c), 0 when that is
 * past. The certificate's times are whole seconds but the wait is not: a
 * delay counted in whole seconds from a truncated now can be up to a
 * second late, which for a certificate of a few seconds (a short forced
 * certTTL) is its expiry. */
int64_t ca_cred_renew_in_ms(const struct ca_cred *c, int64_t now_ms);

typedef void (*ca_identity_cb)(void *arg, struct ca_cred *cred);

#define CA_IDENTITY_MAX_WATCH 8

struct ca_identity {
    pthread_mutex_t lock;
    struct ca_cred *cur;
    unsigned gen; /* 0 until the first credential */
    struct {
        ca_identity_cb fn;
        void *arg;
    } watch[CA_IDENTITY_MAX_WATCH];
    size_t nwatch;
};

void ca_identity_init(struct ca_identity *h);
void ca_identity_dispose(struct ca_identity *h);

/* ca_identity_publish() makes cred current (taking a reference), bumps
 * the generation and calls every watcher with it. Main thread. */
void ca_identity_publish(struct ca_identity *h, struct ca_cred *cred);

/* ca_identity_get() returns a reference to the current credential if its
 * generation differs from *gen (updating *gen), else NULL. Any thread. */
struct ca_cred *ca_identity_get(struct ca_identity *h, unsigned *gen);

/* ca_identity_current() returns a reference to the current credential,
 * or NULL before the first. Any thread. */
struct ca_cred *ca_identity_current(struct ca_identity *h);

/* ca_identity_ssl() is a certificate callback (SSL_CTX_set_cert_cb, arg:
 * the holder): ssl presents the current credential, so each handshake
 * uses the newest certificate. 1, or 0 (fail the handshake) when there is
 * none yet. */
int ca_identity_ssl(SSL *ssl, void *arg);

/* ca_identity_watch() registers fn, called on each publish (main thread).
 * 0, or -1 when the table is full. */
int ca_identity_watch(struct ca_identity *h, ca_identity_cb fn, void *arg);

/* ca_identity_unwatch() removes what ca_identity_watch(fn, arg) added, if
 * it is there. Main thread. */
void ca_identity_unwatch(struct ca_identity *h, ca_identity_cb fn, void *arg);

#endif
