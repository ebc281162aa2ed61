#ifndef STRAIT_CONTROL_CA_CA_H
#define STRAIT_CONTROL_CA_CA_H

#include <openssl/base.h>
#include <openssl/x509.h>
#include <stdint.h>

#include "control/ca/pki.h"

struct buf;

/*
 * The embedded certificate authority. Its signing material uses Istio's
 * "cacerts" layout, four PEM files in one directory:
 *
 *   ca-cert.pem     the certificate the CA signs with
 *   ca-key.pem      its private key (0600)
 *   root-cert.pem   the root(s) of trust
 *   cert-chain.pem  ca-cert.pem's chain up to the root
 *
 * With no plugged-in directory the CA keeps a self-signed root in its own
 * directory in the same layout (ca-cert.pem and root-cert.pem are then
 * the same certificate), created on first start. With one it runs as an
 * intermediate under the given root, exactly like istiod with cacerts.
 *
 * Workload certificates carry one URI SAN, spiffe://TD/ns/NS/sa/SA, set by
 * the caller from an authenticated identity: nothing is ever taken from a
 * CSR but its public key.
 */
struct ca_conf {
    const char *dir;     /* the CA's own directory (state) */
    const char *cacerts; /* plugged-in layout; NULL or "": none */
    const char *trust_domain;
    enum pki_key_type key_type; /* for a new self-signed root */
    int64_t root_ttl_s;         /* validity of a new self-signed root */
    int64_t default_ttl_s;      /* issued certificates, when none asked */
    int64_t max_ttl_s;          /* longest validity granted */
};

struct ca {
    char *dir;
    char *trust_domain;
    int intermediate; /* 1: plugged-in cacerts, 0: self-signed root */
    X509 *cert;       /* signs */
    EVP_PKEY *key;
    STACK_OF(X509) * chain; /* ca-cert first, the anchoring root last */
    X509 *root;             /* the root ca-cert chains to (in chain) */
    STACK_OF(X509) * roots; /* every root of root-cert.pem */
    uint8_t pin[32];        /* SHA-256 of root's SubjectPublicKeyInfo */
    int64_t default_ttl_s;
    int64_t max_ttl_s;
};

/*
 * ca_open() loads the CA from conf->cacerts, or from conf->dir; when
 * neither holds any of the four files and create is set, it makes a new
 * self-signed root in conf->dir (the directory is created 0700).
 * Checks: every file readable and well-formed, the key matches
 * ca-cert.pem, ca-cert.pem is a CA certificate within its validity and
 * chains to root-cert.pem through cert-chain.pem. NULL with an allocated
 * message in *err that names the file and the problem.
 */
struct ca *ca_open(const struct ca_conf *conf, int create, char **err);

void ca_free(struct ca *ca);

/*
 * ca_issue() signs a certificate for pub with spiffe_id as its only SAN
 * (critical), key usage digitalSignature and keyEncipherment, extended key
 * usage serverAuth and clientAuth, CA:FALSE and a random 128-bit serial.
 * ttl_s <= 0 means the default; more than the maximum is capped, and the
 * validity never outlasts ca-cert.pem. Returns the new certificate (the
 * caller frees it), or NULL with *err.
 */
X509 *ca_issue(const struct ca *ca, EVP_PKEY *pub, const char *spiffe_id,
               int64_t ttl_s, char **err);

/* ca_issue_dns() is ca_issue() with DNS names after the SPIFFE ID in the
 * SAN: the CA server's own certificate, which clients of Istio's CA API
 * check against the name they dialled (istiod.istio-system.svc). */
X509 *ca_issue_dns(const struct ca *ca, EVP_PKEY *pub, const char *spiffe_id,
                   const char *const *dns, size_t ndns, int64_t ttl_s,
                   char **err);

/* ca_chain_pem() appends leaf then the CA's chain, leaf to root. */
int ca_chain_pem(const struct ca *ca, X509 *leaf, struct buf *out);

/* ca_pin_hex() writes the root's pin as "sha256:" and 64 hex digits
 * (72 bytes with the NUL). */
void ca_pin_hex(const struct ca *ca, char out[72]);

/* ca_layout_dir() is the directory the signing files come from. */
const char *ca_layout_dir(const struct ca_conf *conf);

#endif
