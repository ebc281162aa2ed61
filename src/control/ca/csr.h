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

/* csr_new() writes a CSR for key, signed with it, as PEM into b. With
 * san_uri (a SPIFFE ID) the request asks for it in a subjectAltName, as
 * istiod's clients do; NULL: it names no identity (a strait CA decides
 * it). 0, or -1. */
int csr_new(EVP_PKEY *key, const char *san_uri, struct buf *b);

/* csr_uri_sans() lists the URI subjectAltNames a CSR (as csr_parse()
 * accepted it) asks for, comma-separated and allocated, or NULL when it
 * asks for none. */
char *csr_uri_sans(const char *pem, size_t n);

#endif
