#ifndef STRAIT_CONTROL_CA_PKI_H
#define STRAIT_CONTROL_CA_PKI_H

#include <openssl/base.h>
#include <openssl/x509.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

struct buf;

/*
 * Small X.509 and file helpers shared by the CA, the CSR parser and the
 * join client: key generation, PEM in memory, SPIFFE IDs, SPKI pins and
 * umask-proof private files. Errors are allocated messages in *err (the
 * caller frees them); no function here ever logs key material.
 */

enum pki_key_type { PKI_KEY_ECDSA, PKI_KEY_RSA };

/* The longest PEM file we read: a chain of a few certificates. */
#define PKI_MAX_FILE (256 * 1024)

/* pki_key_new() makes an ECDSA P-256 or RSA 2048 key; NULL on failure. */
EVP_PKEY *pki_key_new(enum pki_key_type type);

/*
 * pki_write_private() writes n bytes to path so that no other user can
 * ever read them: a temporary file next to path is opened with
 * O_CREAT|O_EXCL and mode 0600 (fchmod too, so the umask cannot widen
 * it), written, fsynced and renamed over path. A reader sees the old
 * file or the new one, never a partial one. 0, or -1 with *err.
 */
int pki_write_private(const char *path, const void *data, size_t n, char **err);

/* pki_mkdirs() creates dir and its missing parents with mode 0700 (like
 * mkdir -p). 0, or -1 with *err. */
int pki_mkdirs(const char *dir, char **err);

/* pki_read_file() reads a whole file of at most PKI_MAX_FILE bytes,
 * NUL-terminated (*n excludes the NUL). NULL with *err naming path. */
char *pki_read_file(const char *path, size_t *n, char **err);

/* pki_certs_parse() reads every CERTIFICATE block of a PEM text, in
 * order. NULL (with *err) when there is none or one is damaged. */
STACK_OF(X509) *
    pki_certs_parse(const char *pem, size_t n, const char *what, char **err);

/* pki_key_parse() reads one PEM private key (PKCS#8, EC or RSA). */
EVP_PKEY *pki_key_parse(const char *pem, size_t n, const char *what,
                        char **err);

/* PEM writers; 0, or -1 when b is full. */
int pki_cert_pem(X509 *x, struct buf *b);
int pki_key_pem(EVP_PKEY *k, struct buf *b);

/* pki_spki_sha256() hashes the DER SubjectPublicKeyInfo of x. */
void pki_spki_sha256(const X509 *x, uint8_t out[32]);

/* pki_key_spki_sha256() hashes the DER SubjectPublicKeyInfo of k's public
 * part: the same value pki_spki_sha256() gives for a certificate of k. */
void pki_key_spki_sha256(const EVP_PKEY *k, uint8_t out[32]);

/* pki_spiffe_id() returns the first spiffe:// URI SAN of x, allocated,
 * or NULL when it has none. */
char *pki_spiffe_id(const X509 *x);

/* pki_spiffe_make() formats spiffe://td/ns/NS/sa/SA (allocated). */
char *pki_spiffe_make(const char *td, const char *ns, const char *sa);

/*
 * pki_spiffe_split() checks that id is spiffe://TD/ns/NS/sa/SA with
 * names pki_name_ok() accepts, and copies the parts out (allocated; any
 * of the out pointers may be NULL). 0, or -1.
 */
int pki_spiffe_split(const char *id, char **td, char **ns, char **sa);

/* pki_name_ok() accepts Kubernetes-style names: 1-253 bytes of a-z 0-9
 * - and ., starting and ending with a letter or digit. */
int pki_name_ok(const char *s);

/* pki_time() converts an ASN1_TIME to seconds since the epoch. */
int64_t pki_time(const ASN1_TIME *t);

/* pki_is_ca() is true when x has basicConstraints CA:TRUE. */
int pki_is_ca(X509 *x);

/* pki_ssl_error() drains BoringSSL's error queue into a short text. */
const char *pki_ssl_error(char *out, size_t n);

/* pki_hex() writes n bytes as 2n lowercase hex digits and a NUL. */
void pki_hex(const uint8_t *p, size_t n, char *out);

/* Base64url without padding (RFC 4648 section 5). pki_b64url_decode
 * returns the decoded length, or -1 on a bad character or length. */
size_t pki_b64url_encode(const uint8_t *p, size_t n, char *out, size_t cap);
ssize_t pki_b64url_decode(const char *s, size_t n, uint8_t *out, size_t cap);

#endif
