#include "config.h"

#include <arpa/inet.h>
#include <openssl/base64.h>
#include <openssl/bytestring.h>
#include <openssl/digest.h>
#include <openssl/sha.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/ascii.h"
#include "core/err.h"
#include "core/host.h"
#include "net/conn.h"
#include "tls/crl.h"
#include "tls/tls.h"

/* Our TLS 1.2 suites when none are configured: forward secrecy and AEAD
 * only (TLS 1.3's are fixed by BoringSSL). */
#define DEFAULT_CIPHERS                                                        \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"               \
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"               \
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

struct tls_cert {
    SSL_CTX *ctx;
    int ecdsa;
    char **names; /* lowercase; "*.example.com" for wildcards */
    size_t nnames;
    char **hosts; /* the Gateway server's hosts, lowercase; NULL: none */
    size_t nhosts;
    /* Client certificates (enum tls_verify); the CA bundle is in ctx. */
    int verify;
    char **sans;
    size_t nsans;
    uint8_t (*spki)[SHA256_DIGEST_LENGTH];
    size_t nspki;
    uint8_t (*hashes)[SHA256_DIGEST_LENGTH];
    size_t nhashes;
    uint8_t sid_ctx[SSL_MAX_SID_CTX_LENGTH];
    unsigned sid_len;
    /* The server's own versions and suites (0 and NULL: the base's). */
    uint16_t min_version;
    uint16_t max_version;
    char *cipher_list;
};

struct tls_server {
    SSL_CTX *base; /* connections start here; owns this struct (ex_data) */
    struct tls_cert *certs;
    size_t ncerts;
    int by_hosts; /* certificates are picked by their servers' hosts */
    /* by_hosts: every server host -> its certificate's index, so a
     * handshake's pick is a hash lookup, not a scan of every server's
     * hosts (a Gateway of 10,000 HTTPS tenants). */
    struct host_index hosts;
    unsigned char alpn[32]; /* wire format, in preference order */
    size_t alpn_len;
};

/* The ex_data index is registered once per process and never changes. */
static pthread_once_t ex_once = PTHREAD_ONCE_INIT;
static int ex_index = -1;
static int hello_index = -1;      /* SSL: its struct tls_hello_hook */
static int hello_conn_index = -1; /* SSL: its struct conn */
static int cert_index = -1;       /* a certificate's SSL_CTX -> its tls_cert */

static void server_free_parts(struct tls_server *ts)
{
    host_index_dispose(&ts->hosts);
    for (size_t i = 0; i < ts->ncerts; i++) {
        SSL_CTX_free(ts->certs[i].ctx);
        for (size_t j = 0; j < ts->certs[i].nnames; j++)
            free(ts->certs[i].names[j]);
        free(ts->certs[i].names);
        for (size_t j = 0; j < ts->certs[i].nhosts; j++)
            free(ts->certs[i].hosts[j]);
        free(ts->certs[i].hosts);
        for (size_t j = 0; j < ts->certs[i].nsans; j++)
            free(ts->certs[i].sans[j]);
        free(ts->certs[i].sans);
        free(ts->certs[i].spki);
        free(ts->certs[i].hashes);
        free(ts->certs[i].cipher_list);
    }
    free(ts->certs);
    free(ts);
}

/* Runs when the last reference to the base SSL_CTX goes: the last
 * handshake that started with this server has finished. */
static void ex_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int index,
                    long argl, void *argp)
{
    (void)parent;
    (void)ad;
    (void)index;
    (void)argl;
    (void)argp;
    if (ptr != NULL)
        server_free_parts(ptr);
}

static void ex_init(void)
{
    ex_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, ex_free);
    cert_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    hello_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    hello_conn_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

/* set_err() makes "subject: what: detail", detail from BoringSSL's error
 * queue. */
static int set_err(char **err, const char *subject, const char *what)
{
    unsigned long e = ERR_peek_last_error();
    char detail[256] = "";

    if (e != 0)
        ERR_error_string_n(e, detail, sizeof(detail));
    ERR_clear_error();
    err_set(err, "%s: %s: %s", subject, what, detail[0] ? detail : "invalid");
    return -1;
}

/* Reads the SNI host name from the ClientHello, lowercased. */
static int client_hello_sni(const SSL_CLIENT_HELLO *ch, char *out, size_t n)
{
    const uint8_t *data;
    size_t len;
    CBS ext, list, name;
    uint8_t type;

    if (!SSL_early_callback_ctx_extension_get(ch, TLSEXT_TYPE_server_name,
                                              &data, &len))
        return 0;
    CBS_init(&ext, data, len);
    if (!CBS_get_u16_length_prefixed(&ext, &list))
        return 0;
    while (CBS_len(&list) > 0) {
        if (!CBS_get_u8(&list, &type) ||
            !CBS_get_u16_length_prefixed(&list, &name))
            return 0;
        if (type != TLSEXT_NAMETYPE_host_name)
            continue;
        if (CBS_len(&name) == 0 || CBS_len(&name) >= n)
            return 0;
        ascii_lower_copy(out, (const char *)CBS_data(&name), CBS_len(&name));
        out[CBS_len(&name)] = '\0';
        return 1;
    }
    return 0;
}

/* True when the client can verify an ECDSA certificate: it offers an
 * ECDSA signature algorithm, and TLS 1.3 or an ECDHE-ECDSA suite. */
static int client_hello_ecdsa(const SSL_CLIENT_HELLO *ch)
{
    const uint8_t *data;
    size_t len;
    CBS ext, algs;
    int sig = 0, suite = 0;

    if (SSL_early_callback_ctx_extension_get(
            ch, TLSEXT_TYPE_signature_algorithms, &data, &len)) {
        CBS_init(&ext, data, len);
        if (CBS_get_u16_length_prefixed(&ext, &algs)) {
            uint16_t a;
            while (CBS_get_u16(&algs, &a))
                if (a == SSL_SIGN_ECDSA_SECP256R1_SHA256 ||
                    a == SSL_SIGN_ECDSA_SECP384R1_SHA384 ||
                    a == SSL_SIGN_ECDSA_SECP521R1_SHA512)
                    sig = 1;
        }
    }
    if (!sig)
        return 0;
    if (SSL_early_callback_ctx_extension_get(ch, TLSEXT_TYPE_supported_versions,
                                             &data, &len)) {
        CBS_init(&ext, data, len);
        CBS vers;
        uint16_t v;
        if (CBS_get_u8_length_prefixed(&ext, &vers))
            while (CBS_get_u16(&vers, &v))
                if (v == TLS1_3_VERSION)
                    return 1;
    }
    for (size_t i = 0; i + 1 < ch->cipher_suites_len; i += 2) {
        uint16_t cs =
            (uint16_t)(ch->cipher_suites[i] << 8 | ch->cipher_suites[i + 1]);
        /* ECDHE_ECDSA suites: 0xC009/0xC00A, 0xC02B/0xC02C, 0xCCA9. */
        if (cs == 0xC02B || cs == 0xC02C || cs == 0xCCA9 || cs == 0xC009 ||
            cs == 0xC00A)
            suite = 1;
    }
    return suite;
}

/* The best rank of a certificate's server hosts for host (n bytes): a
 * Gateway server's host pattern covers any deeper name by "*.suffix", the
 * longest suffix wins, as Envoy ranks server_names (host_match_rank). */
static size_t cert_rank(const struct tls_cert *c, const char *host, size_t n)
{
    size_t best = 0;

    for (size_t i = 0; i < c->nhosts; i++) {
        size_t r = host_match_rank(c->hosts[i], host, n);
        if (r > best)
            best = r;
    }
    return best;
}

/* A Gateway's certificate by its server's hosts: the best-ranked, the
 * first server among equals; without SNI, a "*" server. NULL when no
 * server lists the name. */
static const struct tls_cert *pick_by_hosts(const struct tls_server *ts,
                                            const char *host)
{
    /* The host index ranks as cert_rank() does, the first certificate
     * among equals (they were added in order). */
    long i = host_index_find(&ts->hosts, host != NULL ? host : "",
                             host != NULL ? strlen(host) : 0);

    return i >= 0 ? &ts->certs[i] : NULL;
}

static const struct tls_cert *pick(const struct tls_server *ts,
                                   const char *host, int ecdsa)
{
    const struct tls_cert *best = NULL;

    if (ts->by_hosts) {
        /* A name no server lists gets the first server's certificate,
         * and its requests 421 (tls_conn_serves_host). */
        best = pick_by_hosts(ts, host);
        return best != NULL ? best : &ts->certs[0];
    }

    /* Exact names first, then wildcards (one label, RFC 6125:
     * host_cert_match); within a match, the key type the client prefers. */
    for (int pass = 0; pass < 2 && host != NULL; pass++) {
        for (size_t i = 0; i < ts->ncerts; i++) {
            const struct tls_cert *c = &ts->certs[i];
            for (size_t j = 0; j < c->nnames; j++) {
                int wild = c->names[j][0] == '*';
                if (wild != pass ||
                    !host_cert_match(c->names[j], host, strlen(host)))
                    continue;
                if (best == NULL || (c->ecdsa == ecdsa && best->ecdsa != ecdsa))
                    best = c;
            }
        }
        if (best != NULL)
            return best;
    }
    /* The default: the first certificate, or its sibling of the other key
     * type when it shares the first name. */
    best = &ts->certs[0];
    for (size_t i = 1; i < ts->ncerts; i++)
        if (ts->certs[i].ecdsa == ecdsa && best->ecdsa != ecdsa &&
            ts->certs[i].nnames > 0 && best->nnames > 0 &&
            strcmp(ts->certs[i].names[0], best->names[0]) == 0)
            best = &ts->certs[i];
    return best;
}

static int san_listed(const struct tls_cert *c, const GENERAL_NAME *g)
{
    const ASN1_STRING *v = NULL;
    char ip[64];
    const char *text = NULL;
    size_t len = 0;

    switch (g->type) {
    case GEN_DNS:
        v = g->d.dNSName;
        break;
    case GEN_URI:
        v = g->d.uniformResourceIdentifier;
        break;
    case GEN_EMAIL:
        v = g->d.rfc822Name;
        break;
    case GEN_IPADD: {
        const ASN1_OCTET_STRING *o = g->d.iPAddress;
        int af = ASN1_STRING_length(o) == 4 ? AF_INET : AF_INET6;
        if ((ASN1_STRING_length(o) != 4 && ASN1_STRING_length(o) != 16) ||
            inet_ntop(af, ASN1_STRING_get0_data(o), ip, sizeof(ip)) == NULL)
            return 0;
        text = ip;
        len = strlen(ip);
        break;
    }
    default:
        return 0;
    }
    if (v != NULL) {
        text = (const char *)ASN1_STRING_get0_data(v);
        len = (size_t)ASN1_STRING_length(v);
    }
    for (size_t i = 0; i < c->nsans; i++)
        if (strlen(c->sans[i]) == len && memcmp(c->sans[i], text, len) == 0)
            return 1;
    return 0;
}

/* The end-entity checks beyond the chain: SANs, then SPKI or hash pins. */
static int leaf_allowed(const struct tls_cert *c, X509 *x)
{
    uint8_t d[SHA256_DIGEST_LENGTH];
    int ok;

    if (c->nsans > 0) {
        GENERAL_NAMES *sans =
            X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
        ok = 0;
        for (size_t i = 0; sans != NULL && !ok && i < sk_GENERAL_NAME_num(sans);
             i++)
            ok = san_listed(c, sk_GENERAL_NAME_value(sans, i));
        GENERAL_NAMES_free(sans);
        if (!ok)
            return 0;
    }
    if (c->nspki == 0 && c->nhashes == 0)
        return 1;
    if (c->nhashes > 0) {
        unsigned dl = 0;
        if (X509_digest(x, EVP_sha256(), d, &dl))
            for (size_t i = 0; i < c->nhashes; i++)
                if (memcmp(c->hashes[i], d, sizeof(d)) == 0)
                    return 1;
    }
    if (c->nspki > 0) {
        uint8_t *der = NULL;
        int n = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(x), &der);
        if (n > 0) {
            SHA256(der, (size_t)n, d);
            OPENSSL_free(der);
            for (size_t i = 0; i < c->nspki; i++)
                if (memcmp(c->spki[i], d, sizeof(d)) == 0)
                    return 1;
        }
    }
    return 0;
}

static int verify_peer(int ok, X509_STORE_CTX *store)
{
    SSL *ssl =
        X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
    const struct tls_cert *c;

    ok = crl_verify_cb(ok, store);
    if (!ok || ssl == NULL || X509_STORE_CTX_get_error_depth(store) != 0)
        return ok;
    c = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), cert_index);
    if (c != NULL && !leaf_allowed(c, X509_STORE_CTX_get_current_cert(store))) {
        X509_STORE_CTX_set_error(store, X509_V_ERR_CERT_REJECTED);
        return 0;
    }
    return 1;
}

/* The connection owner's hello hook, if any, on this ClientHello: true
 * when it refuses the handshake. */
static int hello_refused(const SSL_CLIENT_HELLO *ch, const char *sni)
{
    const struct tls_hello_hook *hook =
        hello_index >= 0 ? SSL_get_ex_data(ch->ssl, hello_index) : NULL;
    struct tls_hello h = {sni, sni != NULL ? strlen(sni) : 0, NULL, 0};
    const uint8_t *data;
    size_t len;

    if (hook == NULL || hook->fn == NULL)
        return 0;
    if (SSL_early_callback_ctx_extension_get(
            ch, TLSEXT_TYPE_application_layer_protocol_negotiation, &data,
            &len)) {
        CBS ext, list;
        CBS_init(&ext, data, len);
        if (CBS_get_u16_length_prefixed(&ext, &list)) {
            h.alpn = CBS_data(&list);
            h.alpn_len = CBS_len(&list);
        }
    }
    return hook->fn(hook->arg, SSL_get_ex_data(ch->ssl, hello_conn_index), &h) <
           0;
}

void tls_conn_on_hello(struct conn *c, const struct tls_hello_hook *hook)
{
    pthread_once(&ex_once, ex_init);
    if (c->tls != NULL && SSL_set_ex_data(c->tls, hello_index, (void *)hook))
        SSL_set_ex_data(c->tls, hello_conn_index, c);
}

static enum ssl_select_cert_result_t select_cert(const SSL_CLIENT_HELLO *ch)
{
    SSL *ssl = ch->ssl;
    const struct tls_server *ts =
        SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ex_index);
    char host[256];
    int have = client_hello_sni(ch, host, sizeof(host));
    const struct tls_cert *c;

    if (ts == NULL || hello_refused(ch, have ? host : NULL))
        return ssl_select_cert_error;
    c = pick(ts, have ? host : NULL, client_hello_ecdsa(ch));
    SSL_set_SSL_CTX(ssl, c->ctx);
    /* The chosen server's versions and suites. BoringSSL fixes the
     * version range after this callback and picks the suite later, so
     * both apply to this very handshake. */
    if ((c->min_version != 0 &&
         !SSL_set_min_proto_version(ssl, c->min_version)) ||
        (c->max_version != 0 &&
         !SSL_set_max_proto_version(ssl, c->max_version)) ||
        (c->cipher_list != NULL &&
         !SSL_set_strict_cipher_list(ssl, c->cipher_list)))
        return ssl_select_cert_error;
    /* The verify mode stays the base context's through SSL_set_SSL_CTX;
     * the certificate's own is set here, before the server's flight. A
     * session is resumed only where it was made (its own session id
     * context), so no ticket skips another name's client check. */
    if (c->verify != TLS_VERIFY_NONE) {
        SSL_set_verify(ssl,
                       SSL_VERIFY_PEER | (c->verify == TLS_VERIFY_REQUIRED
                                              ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                                              : 0),
                       verify_peer);
        SSL_set_session_id_context(ssl, c->sid_ctx, c->sid_len);
    }
    return ssl_select_cert_success;
}

static int select_alpn(SSL *ssl, const uint8_t **out, uint8_t *outlen,
                       const uint8_t *in, unsigned inlen, void *arg)
{
    const struct tls_server *ts = arg;
    uint8_t *sel;

    (void)ssl;
    /* Our preference order wins over the client's. */
    if (SSL_select_next_proto(&sel, outlen, ts->alpn, (unsigned)ts->alpn_len,
                              in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

static int cert_names(struct tls_cert *c)
{
    X509 *x = SSL_CTX_get0_certificate(c->ctx);
    GENERAL_NAMES *sans;
    int n;

    if (x == NULL)
        return -1;
    sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    n = sans ? (int)sk_GENERAL_NAME_num(sans) : 0;
    c->names = calloc((size_t)n + 1, sizeof(*c->names));
    if (c->names == NULL) {
        GENERAL_NAMES_free(sans);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, (size_t)i);
        if (g->type != GEN_DNS)
            continue;
        c->names[c->nnames] =
            strndup((const char *)ASN1_STRING_get0_data(g->d.dNSName),
                    (size_t)ASN1_STRING_length(g->d.dNSName));
        if (c->names[c->nnames] != NULL)
            c->nnames++;
    }
    GENERAL_NAMES_free(sans);
    if (c->nnames == 0) {
        /* No DNS SANs: fall back to the subject's common name. */
        char cn[256];
        if (X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName,
                                      cn, sizeof(cn)) > 0)
            c->names[c->nnames++] = strdup(cn);
    }
    for (size_t i = 0; i < c->nnames; i++)
        ascii_lower_str(c->names[i]);
    return 0;
}

/* join_ciphers() writes names as one OpenSSL cipher string "a:b:c";
 * 0, or -1 when it does not fit in n bytes. */
static int join_ciphers(const char *const *names, size_t nn, char *out,
                        size_t n)
{
    size_t used = 0;

    out[0] = '\0';
    for (size_t i = 0; i < nn; i++) {
        int w = snprintf(out + used, n - used, "%s%s", i ? ":" : "", names[i]);
        if (w < 0 || (size_t)w >= n - used)
            return -1;
        used += (size_t)w;
    }
    return 0;
}

int tls_cipher_list_check(const char *const *names, size_t n, const char **why)
{
    char list[2048];
    SSL_CTX *ctx;
    int ok;

    if (join_ciphers(names, n, list, sizeof(list)) < 0) {
        *why = "the list is too long";
        return -1;
    }
    ctx = SSL_CTX_new(TLS_method());
    if (ctx == NULL) {
        *why = "out of memory";
        return -1;
    }
    ok = SSL_CTX_set_strict_cipher_list(ctx, list);
    ERR_clear_error();
    SSL_CTX_free(ctx);
    if (!ok) {
        *why = "a name is not a cipher suite BoringSSL knows (use OpenSSL "
               "names, e.g. ECDHE-ECDSA-AES128-GCM-SHA256)";
        return -1;
    }
    return 0;
}

static int ctx_settings(SSL_CTX *ctx, const struct tls_server_conf *conf,
                        struct tls_server *ts, char **err)
{
    char list[2048] = "";

    SSL_CTX_set_min_proto_version(ctx, conf->min_version);
    SSL_CTX_set_max_proto_version(ctx, conf->max_version);
    if (join_ciphers(conf->ciphers, conf->nciphers, list, sizeof(list)) < 0)
        return set_err(err, "cipherSuites", "list too long");
    if (!SSL_CTX_set_strict_cipher_list(ctx, list[0] ? list : DEFAULT_CIPHERS))
        return set_err(err, list[0] ? list : DEFAULT_CIPHERS,
                       "unknown cipher suite");
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, ts);
    /* Idle connections should not pin 16 KiB buffers. */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    return 0;
}

/* hex_sha256() reads 64 hex digits, colons between bytes allowed. */
static int hex_sha256(const char *s, uint8_t *out)
{
    size_t n = 0;

    for (const char *p = s; *p != '\0'; p++) {
        int v;
        if (*p == ':')
            continue;
        if (*p >= '0' && *p <= '9')
            v = *p - '0';
        else if ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'f')
            v = (*p | 0x20) - 'a' + 10;
        else
            return -1;
        if (n >= 2 * SHA256_DIGEST_LENGTH)
            return -1;
        if (n % 2 == 0)
            out[n / 2] = (uint8_t)(v << 4);
        else
            out[n / 2] |= (uint8_t)v;
        n++;
    }
    return n == 2 * SHA256_DIGEST_LENGTH ? 0 : -1;
}

static int b64_sha256(const char *s, uint8_t *out)
{
    uint8_t tmp[64];
    size_t n = 0;

    if (!EVP_DecodeBase64(tmp, &n, sizeof(tmp), (const uint8_t *)s,
                          strlen(s)) ||
        n != SHA256_DIGEST_LENGTH)
        return -1;
    memcpy(out, tmp, n);
    return 0;
}

static int verify_err(char **err, const char *what, const char *value)
{
    err_set(err, "%s '%s' is not a SHA-256 digest", what, value);
    return -1;
}

/* What messages call a certificate: its file, or its provider's. */
static const char *cert_name(const struct tls_server_cert *sc)
{
    return sc->cred != NULL ? "the mesh certificate" : sc->cert_path;
}

/* The client certificate checks of one certificate's names. */
static int load_verify(struct tls_cert *c, const struct tls_server_cert *sc,
                       size_t index, char **err)
{
    c->verify = sc->verify;
    if (sc->verify == TLS_VERIFY_NONE)
        return 0;
    if (sc->ca_cert != NULL) {
        /* The mesh root only: what rotates is the leaf, not the root. */
        if (!X509_STORE_add_cert(SSL_CTX_get_cert_store(c->ctx), sc->ca_cert))
            return set_err(err, cert_name(sc), "cannot trust the mesh root");
        /* The mesh's other roots; the bundle holds the root above too. */
        for (size_t i = 0;
             sc->ca_extra != NULL && i < sk_X509_num(sc->ca_extra); i++) {
            X509 *x = sk_X509_value(sc->ca_extra, i);
            if (X509_cmp(x, sc->ca_cert) != 0 &&
                !X509_STORE_add_cert(SSL_CTX_get_cert_store(c->ctx), x))
                return set_err(err, cert_name(sc),
                               "cannot trust the mesh's other roots");
        }
    } else if (sc->ca_path == NULL || sc->ca_path[0] == '\0') {
        err_set(err, "%s: client certificates need a CA bundle", cert_name(sc));
        return -1;
    } else if (!SSL_CTX_load_verify_locations(c->ctx, sc->ca_path, NULL)) {
        return set_err(err, sc->ca_path, "cannot load the CA certificates");
    }
    if (sc->crl_path != NULL && sc->crl_path[0] != '\0') {
        struct stat st;
        /* After the CAs: the CRLs are checked against them. */
        if ((!sc->crl_optional || stat(sc->crl_path, &st) == 0) &&
            crl_load(SSL_CTX_get_cert_store(c->ctx), sc->crl_path, err) < 0)
            return -1;
    }
    c->sans = calloc(sc->nsans + 1, sizeof(*c->sans));
    c->spki = calloc(sc->nspki + 1, sizeof(*c->spki));
    c->hashes = calloc(sc->nhashes + 1, sizeof(*c->hashes));
    if (c->sans == NULL || c->spki == NULL || c->hashes == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < sc->nsans; i++) {
        c->sans[i] = strdup(sc->sans[i]);
        if (c->sans[i] == NULL) {
            err_set(err, "out of memory");
            return -1;
        }
        c->nsans++;
    }
    for (; c->nspki < sc->nspki; c->nspki++)
        if (b64_sha256(sc->spki[c->nspki], c->spki[c->nspki]) < 0)
            return verify_err(err, "verifyCertificateSpki", sc->spki[c->nspki]);
    for (; c->nhashes < sc->nhashes; c->nhashes++)
        if (hex_sha256(sc->hashes[c->nhashes], c->hashes[c->nhashes]) < 0)
            return verify_err(err, "verifyCertificateHash",
                              sc->hashes[c->nhashes]);
    /* A session id context of its own: sessions (and tickets, whose keys
     * are the server's own) only resume on the certificate that made
     * them. */
    c->sid_len = (unsigned)snprintf((char *)c->sid_ctx, sizeof(c->sid_ctx),
                                    "strait-v%zu", index);
    SSL_CTX_set_verify(c->ctx,
                       SSL_VERIFY_PEER | (sc->verify == TLS_VERIFY_REQUIRED
                                              ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                                              : 0),
                       verify_peer);
    SSL_CTX_set_ex_data(c->ctx, cert_index, c);
    return 0;
}

/* The certificate, chain and key from their files, and the names in the
 * certificate that pick it. */
static int load_files(struct tls_cert *c, const struct tls_server_cert *sc,
                      char **err)
{
    EVP_PKEY *pkey;

    if (!SSL_CTX_use_certificate_chain_file(c->ctx, sc->cert_path))
        return set_err(err, sc->cert_path, "cannot load the certificate chain");
    if (!SSL_CTX_use_PrivateKey_file(c->ctx, sc->key_path, SSL_FILETYPE_PEM))
        return set_err(err, sc->key_path, "cannot load the private key");
    if (!SSL_CTX_check_private_key(c->ctx))
        return set_err(err, sc->key_path,
                       "the private key does not match the certificate");
    pkey = SSL_CTX_get0_privatekey(c->ctx);
    c->ecdsa = pkey != NULL && EVP_PKEY_id(pkey) == EVP_PKEY_EC;
    if (cert_names(c) < 0)
        return set_err(err, sc->cert_path,
                       "cannot read the certificate's names");
    return 0;
}

static int load_cert(struct tls_cert *c, const struct tls_server_cert *sc,
                     const struct tls_server_conf *conf, struct tls_server *ts,
                     char **err)
{
    const char *name = cert_name(sc);

    c->ctx = SSL_CTX_new(TLS_method());
    if (c->ctx == NULL)
        return set_err(err, name, "cannot create a TLS context");
    if (ctx_settings(c->ctx, conf, ts, err) < 0)
        return -1;
    if (sc->cred != NULL) {
        /* Set for each handshake once select_cert() chose this context
         * (SSL_set_SSL_CTX takes its certificate callback along). Its
         * names are not known here; a Gateway server is picked by its
         * hosts, not by them. */
        SSL_CTX_set_cert_cb(c->ctx, sc->cred, sc->cred_arg);
    } else if (load_files(c, sc, err) < 0) {
        return -1;
    }
    if (sc->nhosts > 0) {
        c->hosts = calloc(sc->nhosts, sizeof(*c->hosts));
        if (c->hosts == NULL)
            return set_err(err, name, "out of memory");
        for (size_t i = 0; i < sc->nhosts; i++) {
            c->hosts[i] = strdup(sc->hosts[i]);
            if (c->hosts[i] == NULL)
                return set_err(err, name, "out of memory");
            c->nhosts++;
            ascii_lower_str(c->hosts[i]);
        }
        ts->by_hosts = 1;
    }
    c->min_version = sc->min_version;
    c->max_version = sc->max_version;
    if (sc->nciphers > 0) {
        char list[2048];
        if (join_ciphers(sc->ciphers, sc->nciphers, list, sizeof(list)) < 0)
            return set_err(err, "cipherSuites", "list too long");
        /* Checked here, applied per connection in select_cert(). */
        if (!SSL_CTX_set_strict_cipher_list(c->ctx, list))
            return set_err(err, list, "unknown cipher suite");
        c->cipher_list = strdup(list);
        if (c->cipher_list == NULL)
            return set_err(err, name, "out of memory");
    }
    /* The certificate's settings, for the checks made once it is chosen
     * (verify_peer, tls_conn_serves_host). */
    SSL_CTX_set_ex_data(c->ctx, cert_index, c);
    return load_verify(c, sc, (size_t)(c - ts->certs), err);
}

struct tls_server *tls_server_new(const struct tls_server_conf *conf,
                                  char **err)
{
    struct tls_server *ts;
    static const char *const def_alpn[] = {"h2", "http/1.1"};
    const char *const *alpn = conf->nalpn ? conf->alpn : def_alpn;
    size_t nalpn = conf->nalpn ? conf->nalpn : 2;

    *err = NULL;
    pthread_once(&ex_once, ex_init);
    if (conf->ncerts == 0) {
        err_set(err, "TLS needs at least one certificate");
        return NULL;
    }
    ts = calloc(1, sizeof(*ts));
    if (ts == NULL ||
        (ts->certs = calloc(conf->ncerts, sizeof(*ts->certs))) == NULL) {
        free(ts);
        err_set(err, "out of memory");
        return NULL;
    }
    host_index_init(&ts->hosts);
    for (size_t i = 0; i < nalpn; i++) {
        size_t l = strlen(alpn[i]);
        if (l == 0 || l > 255 || ts->alpn_len + 1 + l > sizeof(ts->alpn))
            continue;
        ts->alpn[ts->alpn_len++] = (unsigned char)l;
        memcpy(ts->alpn + ts->alpn_len, alpn[i], l);
        ts->alpn_len += l;
    }
    for (size_t i = 0; i < conf->ncerts; i++) {
        ts->ncerts++;
        if (load_cert(&ts->certs[i], &conf->certs[i], conf, ts, err) < 0)
            goto fail;
        for (size_t j = 0; j < ts->certs[i].nhosts; j++)
            if (host_index_add(&ts->hosts, ts->certs[i].hosts[j], i) < 0) {
                err_set(err, "out of memory");
                goto fail;
            }
    }
    ts->base = SSL_CTX_new(TLS_method());
    if (ts->base == NULL || ctx_settings(ts->base, conf, ts, err) < 0)
        goto fail;
    /* The base context holds the default certificate too, so it can answer
     * on its own if the selection callback were bypassed. */
    if (conf->certs[0].cred != NULL) {
        SSL_CTX_set_cert_cb(ts->base, conf->certs[0].cred,
                            conf->certs[0].cred_arg);
    } else if (!SSL_CTX_use_certificate_chain_file(ts->base,
                                                   conf->certs[0].cert_path) ||
               !SSL_CTX_use_PrivateKey_file(ts->base, conf->certs[0].key_path,
                                            SSL_FILETYPE_PEM)) {
        set_err(err, conf->certs[0].cert_path, "cannot load");
        goto fail;
    }
    SSL_CTX_set_session_id_context(ts->base, (const uint8_t *)"strait", 6);
    SSL_CTX_set_select_certificate_cb(ts->base, select_cert);
    SSL_CTX_set_ex_data(ts->base, ex_index, ts);
    return ts;
fail:
    if (ts->base != NULL) {
        SSL_CTX_free(ts->base);
        ts->base = NULL;
    }
    server_free_parts(ts);
    return NULL;
}

int tls_conn_serves_host(const struct conn *conn, const char *host, size_t n)
{
    const struct tls_cert *c;
    char lower[256];

    if (conn->tls == NULL)
        return 1;
    c = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(conn->tls), cert_index);
    if (c == NULL || c->nhosts == 0)
        return 1;
    /* The port, if any, is not part of the name: "host:443", "[::1]:443". */
    if (n > 0 && host[0] == '[') {
        const char *end = memchr(host, ']', n);
        n = end != NULL ? (size_t)(end - host) + 1 : n;
    } else {
        const char *colon = memchr(host, ':', n);
        if (colon != NULL)
            n = (size_t)(colon - host);
    }
    if (n >= sizeof(lower))
        return 0;
    ascii_lower_copy(lower, host, n);
    /* A trailing dot names the same host. */
    if (n > 0 && lower[n - 1] == '.')
        n--;
    return cert_rank(c, lower, n) > 0;
}

SSL_CTX *tls_server_ctx(const struct tls_server *ts)
{
    return ts->base;
}

void tls_server_free(struct tls_server *ts)
{
    /* The last reference to base frees ts through ex_free. */
    if (ts != NULL)
        SSL_CTX_free(ts->base);
}
