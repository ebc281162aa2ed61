#ifndef STRAIT_TLS_TLS_H
#define STRAIT_TLS_TLS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

struct conn;
struct stats_desc;
struct ssl_ctx_st;
struct ssl_st;
struct x509_st;

/*
 * Server TLS on BoringSSL: certificates picked by SNI (exact names, then
 * wildcards, then the first certificate as default) and by key type
 * (ECDSA for clients that offer it, else RSA), ALPN, versions and cipher
 * suites. Session tickets use BoringSSL's own keys, which it rotates by
 * itself. One tls_server is immutable once built; a certificate change
 * builds a new one (tls_holder).
 */
enum tls_verify {
    TLS_VERIFY_NONE,     /* no client certificate asked for */
    TLS_VERIFY_OPTIONAL, /* asked for; verified when given (OPTIONAL_MUTUAL) */
    TLS_VERIFY_REQUIRED, /* refused at the handshake without one (MUTUAL) */
};

/*
 * A credential provider: sets the certificate, chain and key ssl presents,
 * for each handshake, so a rotated certificate is used from the next
 * handshake on without a new context. 1 on success, 0 to fail it.
 */
typedef int (*tls_cred_fn)(struct ssl_st *ssl, void *arg);

/*
 * A certificate and what clients of its names must show (a Gateway
 * server's tls settings): with verify set, client certificates are checked
 * against the CA bundle in ca_path (or the root ca_cert) and the CRLs in
 * crl_path (tls/crl.h), then, as Envoy does, against sans (one of the
 * certificate's SANs equals one of them) and against spki (base64 SHA-256 of
 * the SubjectPublicKeyInfo) or hashes (hex SHA-256 of the DER certificate,
 * colons allowed): one of either list must match when either is given.
 */
struct tls_server_cert {
    const char *cert_path;
    const char *key_path;
    /* Instead of the files: a provider that sets the certificate for each
     * handshake (an ISTIO_MUTUAL server's: the node's mesh certificate,
     * which rotates in memory, so the next handshake presents the new one
     * with no reload). cert_path and key_path are then not read. */
    tls_cred_fn cred;
    void *cred_arg; /* must outlive the server */
    int verify;     /* enum tls_verify */
    const char *ca_path;
    /* Instead of ca_path: trust exactly this root (the mesh root). The
     * server and the holder take their own references. */
    struct x509_st *ca_cert;
    /* With ca_cert: the mesh's other roots, trusted beside it (a root
     * rotation's bundle); NULL: none. The holder takes its own
     * references; the server adds them to its store. */
    const struct stack_st_X509 *ca_extra;
    const char *crl_path; /* NULL: no revocation checking */
    int crl_optional;     /* a missing crl_path is no CRL (a credential's
                           * ca.crl), not an error; it is picked up when
                           * it appears */
    const char *const *sans;
    size_t nsans;
    const char *const *spki;
    size_t nspki;
    const char *const *hashes;
    size_t nhashes;
    /* The Gateway server's hosts ("host", "*.suffix" or "*", no namespace
     * prefix): a client's SNI picks the server by them, not by the names
     * in its certificate, as Envoy's filter chains match server_names, so
     * servers that share a certificate keep their own client checks. A
     * connection then serves only these hosts (tls_conn_serves_host).
     * NULL: picked by the certificate's names (bootstrap listeners). */
    const char *const *hosts;
    size_t nhosts;
    /* This certificate's own TLS versions (TLS1_x_VERSION) and TLS 1.2
     * suites, applied to a connection once its ClientHello picked it (a
     * Gateway server's minProtocolVersion, maxProtocolVersion and
     * cipherSuites); 0 and NULL: the listener's (tls_server_conf). */
    uint16_t min_version;
    uint16_t max_version;
    const char *const *ciphers;
    size_t nciphers;
};

struct tls_server_conf {
    const struct tls_server_cert *certs;
    size_t ncerts;
    uint16_t min_version; /* TLS1_2_VERSION or TLS1_3_VERSION */
    uint16_t max_version;
    const char *const *ciphers; /* TLS 1.2 suites, OpenSSL names; NULL: ours */
    size_t nciphers;
    const char *const *alpn; /* "h2", "http/1.1"; NULL: both */
    size_t nalpn;
};

struct tls_server;

/* tls_cipher_list_check() checks that names (OpenSSL suite names) make a
 * list BoringSSL accepts; 0, or -1 with a static reason in *why. */
int tls_cipher_list_check(const char *const *names, size_t n, const char **why);

/* tls_server_new() loads every certificate and key; NULL with an allocated
 * message naming the file in *err. */
struct tls_server *tls_server_new(const struct tls_server_conf *conf,
                                  char **err);

/* The SSL_CTX new connections start with (owned by the server). */
struct ssl_ctx_st *tls_server_ctx(const struct tls_server *ts);

/* tls_server_free() drops the builder's reference; handshakes in flight
 * keep what they use alive (it is freed with the last SSL). */
void tls_server_free(struct tls_server *ts);

/*
 * A holder publishes the current tls_server of a listener to workers and
 * swaps in a new one when the certificate files change. Workers check a
 * generation number (one relaxed load per accept) and take the new
 * SSL_CTX under a lock only when it changed.
 */
struct tls_holder {
    int refs;
    pthread_mutex_t lock;
    struct tls_server *cur;
    unsigned gen;
    struct tls_server_conf conf; /* deep copy */
    struct stat *st;             /* 4 per certificate: cert, key, CA,
                                  * CRL */
    char *desc;                  /* for logs */
};

struct tls_holder *tls_holder_new(const struct tls_server_conf *conf,
                                  const char *desc, char **err);
struct tls_holder *tls_holder_ref(struct tls_holder *h);
void tls_holder_unref(struct tls_holder *h);

/* tls_holder_check() reloads when a file changed (main thread). Returns 1
 * when a new context was published, 0 when nothing changed, -1 when the
 * new files are bad (*err allocated; the old context stays). */
int tls_holder_check(struct tls_holder *h, char **err);

/* tls_holder_get() returns a reference to the current SSL_CTX if it is
 * newer than *gen (updating *gen), else NULL. Any thread. */
struct ssl_ctx_st *tls_holder_get(struct tls_holder *h, unsigned *gen);

/*
 * Connections: tls_conn_accept() puts TLS over c (server side) with ctx;
 * tls_conn_connect() does the client side with an optional SNI. The
 * handshake runs through c->ops->handshake. 0, or -1 (out of memory).
 */
int tls_conn_accept(struct conn *c, struct ssl_ctx_st *ctx);
int tls_conn_connect(struct conn *c, struct ssl_ctx_st *ctx, const char *sni);

/*
 * tls_conn_connect_over() puts the client side of TLS (no SNI) over lower,
 * a connection of its own transport (an HBONE tunnel, heap-allocated and
 * set up), instead of over c's socket: c (conn_init() on an eventfd) reads
 * and writes through lower, which wakes c whenever it can do more. c owns
 * lower from now on (conn_close(c) closes and frees it). c's handshake
 * waits for lower's, then does TLS's. The helpers below (ALPN, peer
 * names, verify errors) work on c as on any TLS connection. 0, or -1
 * (out of memory; lower untouched).
 */
int tls_conn_connect_over(struct conn *c, struct conn *lower,
                          struct ssl_ctx_st *ctx);

/*
 * The hello hook: a server connection's owner may look at the ClientHello
 * before the handshake goes on (LuaPolicy's on_tls_client_hello), without
 * this layer knowing what looks. fn gets the hook's arg and the
 * connection. sni is lowercased (sni_len 0: none); alpn is the client's
 * list in wire format (length-prefixed names; NULL: none); both are
 * valid during the call only. fn returns 0 to go on, or -1 to abort the
 * handshake with a handshake_failure alert.
 */
struct tls_hello {
    const char *sni;
    size_t sni_len;
    const uint8_t *alpn;
    size_t alpn_len;
};
typedef int tls_hello_fn(void *arg, struct conn *c, const struct tls_hello *h);
struct tls_hello_hook {
    tls_hello_fn *fn;
    void *arg;
};

/* tls_conn_on_hello() has hook->fn called on c's ClientHello; c is a
 * server connection after tls_conn_accept(). hook is the caller's (one
 * may serve many connections) and must outlive c's TLS, as must c. */
void tls_conn_on_hello(struct conn *c, const struct tls_hello_hook *hook);

/* tls_conn_alpn() is the negotiated protocol ("h2", "http/1.1") or "". */
const char *tls_conn_alpn(const struct conn *c, size_t *len);

/* tls_conn_sni() is the server name the client asked for, or "". */
const char *tls_conn_sni(const struct conn *c);

/*
 * tls_conn_serves_host() tells whether a request for host (a Host or
 * :authority, with or without its port) belongs on this connection: the
 * Gateway server its handshake picked lists that host (exactly, by a
 * "*.suffix" or by "*"). 1 for a connection without server hosts (plain,
 * or a bootstrap listener's).
 */
int tls_conn_serves_host(const struct conn *c, const char *host, size_t n);

/* tls_conn_peer_uri_san() copies the first URI SAN of the client's
 * certificate into out (NUL-terminated, cut to n) when the client showed
 * one and it was verified; returns its length, or 0 (out is ""). */
size_t tls_conn_peer_uri_san(const struct conn *c, char *out, size_t n);

/* tls_conn_peer_verified() is 1 when the peer showed a certificate and it
 * was verified (mutual TLS), else 0. */
int tls_conn_peer_verified(const struct conn *c);

/* tls_conn_peer_sans() calls fn for each URI and DNS SAN of the peer's
 * certificate, in the certificate's order, when it showed one and it was
 * verified (a name with a NUL in it is skipped). name points into the
 * certificate and is valid only during the call; it is not terminated.
 * fn may be NULL. Returns the number of names. */
enum { TLS_SAN_URI, TLS_SAN_DNS };
typedef void tls_san_fn(void *arg, int kind, const char *name, size_t len);
size_t tls_conn_peer_sans(const struct conn *c, tls_san_fn *fn, void *arg);

/*
 * tls_conn_xfcc() appends this connection's element of an
 * X-Forwarded-Client-Cert header, in Envoy's format and with the fields
 * Istio's gateways set: By (this side's URI SAN, when its certificate has
 * one), Hash (SHA-256 of the client certificate's DER, hex), Cert (its PEM,
 * URL-encoded), Subject (RFC 2253, quoted), then URI= and DNS= for each of
 * its URI and DNS SANs. Returns 0, or -1 when the client showed no
 * verified certificate or b is full.
 */
struct buf;
int tls_conn_xfcc(const struct conn *c, struct buf *b);

/* tls_conn_verify_error() says why the peer's certificate was refused
 * ("certificate has expired", "unable to get local issuer certificate",
 * "hostname mismatch" for a name or subjectAltNames miss, "no
 * certificate presented" when one was required), or NULL when it was not
 * (none was checked, or the handshake ended before the certificate came). */
const char *tls_conn_verify_error(const struct conn *c);

/* tls_conn_failure() names why the last handshake failed, from a fixed
 * set for metrics: "version", "cipher", "certificate", "eof", "other". */
const char *tls_conn_failure(const struct conn *c);

/* The TLS counters of a listener, one shard per worker (core/stats.h):
 * completed server handshakes and failed ones by tls_conn_failure(), and
 * those the listener gave up on at its handshake deadline (a client that
 * went quiet is no "eof"). */
struct tls_counters {
    uint64_t handshakes;
    uint64_t fail_version;
    uint64_t fail_cipher;
    uint64_t fail_certificate;
    uint64_t fail_eof;
    uint64_t fail_other;
    uint64_t fail_timeout;  /* the handshake did not finish in time */
    uint64_t fail_rejected; /* a LuaPolicy's on_tls_client_hello refused */
};

/* Their names in the admin API's /stats ("tls.handshakes", ...). */
extern const struct stats_desc tls_counters_desc;

/* tls_count_failure() counts the failed handshake of c in the worker's
 * shard sh, by the reason tls_conn_failure() gives. */
void tls_count_failure(struct tls_counters *sh, const struct conn *c);

/* The client context of an upstream cluster: verification against ca_file
 * (NULL: the system bundle) unless insecure; ALPN h2 when h2 is set. */
struct ssl_ctx_st *tls_client_ctx_new(const char *ca_file, int insecure, int h2,
                                      char **err);

/* What DestinationRule tls asks of an upstream connection. */
struct tls_client_conf {
    const char *ca_file;     /* NULL or "": the system bundle */
    const char *crl_file;    /* NULL or "": no revocation checking */
    struct x509_st *ca_cert; /* else trust exactly this root (mesh) */
    /* With ca_cert: the roots of linked sites' trust bundles (MeshLink)
     * and the mesh's other roots (a root rotation's bundle), trusted
     * beside it; NULL: none. Borrowed for the call. */
    const struct stack_st_X509 *ca_extra;
    int insecure;          /* insecureSkipVerify */
    int h2;                /* offer ALPN h2 */
    const char *cert_file; /* MUTUAL: client certificate chain */
    const char *key_file;
    tls_cred_fn cred; /* ISTIO_MUTUAL: the mesh certificate */
    void *cred_arg;   /* must outlive the context */
    /* subjectAltNames: the server's certificate must carry one of these
     * as a URI or DNS name; the SNI is then not checked as a host name. */
    const char *const *sans;
    size_t nsans;
    int no_host_check; /* the SNI is a routing key, not a name (mesh) */
    /* ISTIO_MUTUAL: offer Istio's ALPN for the protocol, as the istio.alpn
     * filter of a sidecar does, so an east-west gateway (AUTO_PASSTHROUGH)
     * matches: HTTP/2 istio-h2, istio, h2; HTTP/1.1 istio-http/1.1,
     * istio, http/1.1. Servers pick the plain name. */
    int mesh_alpn;
};

/* tls_client_ctx_build() makes the context; NULL with an allocated *err
 * naming the file that would not load. */
struct ssl_ctx_st *tls_client_ctx_build(const struct tls_client_conf *c,
                                        char **err);

#endif
