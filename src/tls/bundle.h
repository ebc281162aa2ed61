#ifndef STRAIT_TLS_BUNDLE_H
#define STRAIT_TLS_BUNDLE_H

#include <openssl/x509.h>
#include <stddef.h>
#include <stdint.h>

struct buf;

/*
 * SPIFFE trust bundles (the SPIFFE Trust Domain and Bundle specification,
 * section 4): a JWK Set whose X.509 authorities are keys with
 * "use": "x509-svid" and exactly one certificate in "x5c" (standard
 * base64 of the DER, not base64url), with an optional top-level
 * "spiffe_sequence" and "spiffe_refresh_hint". It is how two sites with
 * different roots and trust domains trust each other (MeshLink): no
 * shared root is needed.
 *
 * Read strictly: an x509-svid key must hold a CA certificate whose public
 * key matches the key's kty (EC or RSA); a key of another use
 * ("jwt-svid") is counted and left out, since strait verifies only X.509
 * SVIDs with a bundle; a bundle without any X.509 authority is refused.
 */

/* The largest bundle read, and the most authorities it may hold. */
#define BUNDLE_MAX_BYTES (256 * 1024)
#define BUNDLE_MAX_KEYS 32

struct spiffe_bundle {
    STACK_OF(X509) * roots; /* the X.509 authorities, in document order */
    int64_t sequence;       /* spiffe_sequence; -1: not given */
    int64_t refresh_hint;   /* spiffe_refresh_hint (s); -1: not given */
    size_t jwt_keys;        /* keys of use jwt-svid, not kept */
};

/*
 * bundle_parse() reads the n bytes at p into b (zeroed first). 0, or -1
 * with a static reason in *why (b then holds nothing to free).
 */
int bundle_parse(const char *p, size_t n, struct spiffe_bundle *b,
                 const char **why);

/* bundle_dispose() frees what bundle_parse() filled in; safe twice. */
void bundle_dispose(struct spiffe_bundle *b);

/*
 * bundle_write() appends roots as a SPIFFE bundle (one x509-svid key per
 * certificate, kty from its key, x5c) with spiffe_sequence seq (omitted
 * when negative). 0, or -1 when b's cap is reached or a key is of a type
 * a JWK cannot name.
 */
int bundle_write(struct buf *b, const STACK_OF(X509) * roots, int64_t seq);

/*
 * bundle_same_roots() is 1 when a and b hold the same certificates
 * (DER-equal, in any order), else 0.
 */
int bundle_same_roots(const STACK_OF(X509) * a, const STACK_OF(X509) * b);

#endif
