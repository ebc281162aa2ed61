#ifndef STRAIT_CONTROL_CA_CSR_H
#define STRAIT_CONTROL_CA_CSR_H

#include <openssl/base.h>
#include <stddef.h>

struct buf;

/* The largest CSR accepted, PEM: an RSA 4096 request is under 2 KiB. */
#define CSR_MAX_PEM (16 * 1024)

/*
 * csr_parse() reads exactly one PEM CERTIFICATE REQUEST (at most
 * CSR_MAX_PEM bytes), checks its self-signature (proof of possession) and
 * its key (ECDSA P-256 or P-384, or RSA 2048-4096 bits), and returns the
 * public key (the caller frees it). Everything else in the request -
 * subject, requested SANs, extensions - is ignored: the CA takes the
 * identity from authentication, never from the CSR. NULL with a static
 * reason in *why.
 */
EVP_PKEY *csr_parse(const char *pem, size_t n, const char **why);

/* csr_new() writes a CSR for key, signed with it, as PEM into b. The
 * request names no identity (the CA decides it). 0, or -1. */
int csr_new(EVP_PKEY *key, struct buf *b);

#endif
