#ifndef STRAIT_TLS_CRL_H
#define STRAIT_TLS_CRL_H

#include <openssl/x509.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/*
 * Certificate revocation lists (Istio's caCrl, a credential's ca.crl).
 *
 * A CRL file is PEM: one or more "X509 CRL" blocks, concatenated; text
 * between blocks is ignored, any other PEM block is an error. The CRLs are
 * added to the trust store of the context that verifies peers, and
 * checking is turned on for the whole chain (X509_V_FLAG_CRL_CHECK and
 * X509_V_FLAG_CRL_CHECK_ALL): a revoked leaf or a revoked intermediate is
 * refused. Only the issuers the file has a CRL for are checked; a
 * certificate whose issuer has none is not refused for that alone (see
 * crl_verify_cb()). An issuer's CRL past its nextUpdate refuses the
 * certificates it covers ("CRL has expired"), as BoringSSL, Envoy and
 * nginx do; a file whose CRL for some issuer is already past it is
 * refused when it is loaded.
 */

/* Files bigger than this are refused (large public CRLs are a few MiB). */
#define CRL_MAX_FILE (64u << 20)

/*
 * crl_parse() reads the CRLs out of PEM text (data, len; no NUL needed).
 * Returns a new stack (free with sk_X509_CRL_pop_free(s, X509_CRL_free))
 * holding at least one CRL, or NULL with *err an allocated message that
 * does not name the file (the caller adds it).
 */
STACK_OF(X509_CRL) * crl_parse(const uint8_t *data, size_t len, char **err);

/*
 * crl_check() is what a CRL file must pass before it is used, at now:
 * every issuer named in crls has at least one CRL whose nextUpdate (when
 * it has one) is not past; and a CRL whose issuer is a CA certificate in
 * store (by subject name) verifies with that CA's key, and that CA may
 * sign CRLs (no keyUsage, or one with cRLSign). CRLs of issuers not in
 * store (an intermediate the peer sends) are checked at the handshake.
 * 0, or -1 with *err allocated (no file name).
 */
int crl_check(STACK_OF(X509_CRL) * crls, X509_STORE *store, time_t now,
              char **err);

/*
 * crl_read_file() reads a whole CRL file of at most CRL_MAX_FILE bytes
 * into *out (malloc'd, the caller frees) without ever blocking: a FIFO
 * or device is refused. 0; -1 when the file cannot be opened; -2 when it
 * is not a regular file, too large or unreadable; *err (allocated)
 * names path on failure.
 */
int crl_read_file(const char *path, uint8_t **out, size_t *len, char **err);

/*
 * crl_load() reads path (at most CRL_MAX_FILE bytes), parses and checks
 * it (against the CA certificates already in store, at the current time),
 * then adds its CRLs to store and turns CRL checking on for it. 0, or -1
 * with *err allocated naming path; after an error the store may hold
 * some of the CRLs, so the caller discards the context it belongs to.
 */
int crl_load(X509_STORE *store, const char *path, char **err);

/*
 * crl_verify_cb() is for the start of a verify callback: it returns ok,
 * except that a failure only because an issuer has no CRL
 * (X509_V_ERR_UNABLE_TO_GET_CRL) is forgiven, and the error cleared, when
 * no CRL in the store has that issuer's name. An issuer that has a CRL
 * which cannot be used for the certificate stays refused.
 */
int crl_verify_cb(int ok, X509_STORE_CTX *xs);

#endif
