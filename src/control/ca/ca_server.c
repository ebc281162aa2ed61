/*
 * The CA API server: accept, TLS, one HTTP/1.1 request, one answer, close.
 * Traffic is a handful of requests per host per day, so simplicity wins
 * over keep-alive.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <openssl/err.h>
#include <openssl/mem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "control/ca/ca.h"
#include "control/ca/ca_api.h"
#include "control/ca/ca_grpc.h"
#include "control/ca/ca_server.h"
#include "control/ca/ca_server_grpc.h"
#include "control/ca/csr.h"
#include "control/ca/identity.h"
#include "control/ca/token.h"
#include "core/arena.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "event/reap.h"
#include "event/timer.h"
#include "http1/parser.h"
#include "net/acceptor.h"
#include "net/conn.h"
#include "net/sock.h"
#include "net/sock_pool.h"
#include "net/source_limit.h"
#include "policy/jwt.h"
#include "tls/tls.h"

/*
 * Limits (README, "Certificate authority", API limits). A client has
 * CA_HANDSHAKE_TIMEOUT_MS to finish its TLS handshake and send the first
 * byte of its request, and CA_CONN_TIMEOUT_MS from accept to send the
 * whole request and read the answer. One source address holds at most
 * CA_MAX_PER_SOURCE connections. Slots are kept apart by what a
 * connection is: CA_MAX_PENDING still in their handshake, then
 * CA_MAX_TOKEN without a client certificate (joins) and CA_MAX_RENEWAL
 * with one (renewals), so idle or token-bearing clients never take the
 * slots renewals need.
 */
#define CA_HANDSHAKE_TIMEOUT_MS 3000
#define CA_CONN_TIMEOUT_MS 10000
#define CA_MAX_PER_SOURCE 16
#define CA_MAX_PENDING 128
#define CA_MAX_TOKEN 128
#define CA_MAX_RENEWAL 128
#define CA_MAX_HEADERS 32

/* What a connection is, for its slot. */
enum sconn_kind {
    SCONN_PENDING, /* TLS handshake not finished */
    SCONN_TOKEN,   /* no client certificate: a join */
    SCONN_RENEWAL, /* a client certificate: a renewal */
};

struct sconn;

struct ca_server {
    struct event_base *base;
    struct reaper *reaper;
    const struct ca *ca;
    struct ca_identity *id;
    unsigned gen;
    SSL_CTX *ctx;
    int fd;
    struct addr addr;
    struct event *accept_ev;
    struct timer accept_resume; /* ends a pause at the descriptor limit */
    struct log_limit accept_log;
    struct sconn *conns;
    size_t nconns;
    size_t nkind[3]; /* by enum sconn_kind */
    struct ca_server_stats stats;
    /* Service-account tokens accepted (ca.serviceAccountTokens); NULL:
     * none. */
    struct jwt_authn *sa_jwt;
    /* Connections by source address, and refusals at the limits
     * (shared with the catalog API: net/source_limit.h). */
    struct source_limit srcs;
};

struct sconn {
    struct ca_server *s;
    struct sconn *prev, *next;
    struct conn c;
    struct timer timer;
    struct reap_node reap; /* freed through the reaper once closed */
    struct buf in, out;
    int writing;
    int kind;     /* enum sconn_kind */
    int got_byte; /* a byte of the request arrived */
    uint64_t accept_ms;
    struct addr src; /* the client's address, for its source's limit */
    char peer[ADDR_STRLEN];
    /* The gRPC API, when the client chose ALPN h2; NULL: HTTP/1.1. */
    struct ca_grpc_sess *grpc;
};

static enum ssl_verify_result_t accept_any(SSL *ssl, uint8_t *alert)
{
    /* The handler verifies the client certificate itself, so that a
     * stale one gets a clear JSON answer rather than a TLS alert. */
    (void)ssl;
    (void)alert;
    return ssl_verify_ok;
}

/* ALPN: h2 selects the gRPC API, http/1.1 (or no ALPN) the JSON API. */
static int select_alpn(SSL *ssl, const uint8_t **out, uint8_t *outlen,
                       const uint8_t *in, unsigned inlen, void *arg)
{
    const uint8_t *p = in, *end = in + inlen;

    (void)ssl;
    (void)arg;
    for (const char *want = "h2"; want != NULL;
         want = strcmp(want, "h2") == 0 ? "http/1.1" : NULL) {
        size_t wl = strlen(want);
        for (p = in; p < end && p + 1 + *p <= end; p += 1 + *p)
            if (*p == wl && memcmp(p + 1, want, wl) == 0) {
                *out = p + 1;
                *outlen = *p;
                return SSL_TLSEXT_ERR_OK;
            }
    }
    return SSL_TLSEXT_ERR_NOACK;
}

static SSL_CTX *server_ctx(const struct ca_cred *cred)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_method());

    if (ctx == NULL)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (ca_cred_use(cred, ctx) < 0) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_custom_verify(ctx, SSL_VERIFY_PEER, accept_any);
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, NULL);
    return ctx;
}

/* Picks up a rotated server credential before a new handshake. */
static void refresh_ctx(struct ca_server *s)
{
    struct ca_cred *cred = ca_identity_get(s->id, &s->gen);
    SSL_CTX *ctx;

    if (cred == NULL)
        return;
    ctx = server_ctx(cred);
    if (ctx == NULL) {
        log_error("CA server: cannot use the new certificate; keeping the "
                  "old one");
    } else {
        SSL_CTX_free(s->ctx);
        s->ctx = ctx;
    }
    ca_cred_unref(cred);
}

/* A closed connection's memory; it needs nothing of its server, so it may
 * go after the server does. */
static void sconn_reap(struct reap_node *n)
{
    struct sconn *sc = LIST_ELEM(n, struct sconn, reap);

    ca_grpc_sess_free(sc->grpc);
    buf_dispose(&sc->in);
    buf_dispose(&sc->out);
    free(sc);
}

static void sconn_close(struct sconn *sc)
{
    struct ca_server *s = sc->s;

    if (sc->prev)
        sc->prev->next = sc->next;
    else
        s->conns = sc->next;
    if (sc->next)
        sc->next->prev = sc->prev;
    s->nconns--;
    s->nkind[sc->kind]--;
    source_limit_give(&s->srcs, &sc->src);
    conn_close(&sc->c);
    timer_dispose(&sc->timer);
    /* Freed on the loop's next turn, never inside its own callback. */
    reaper_defer(s->reaper, &sc->reap, sconn_reap);
}

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Internal Server Error";
    }
}

/* The refusal counters live in s->srcs; the stats show them. */
static void sync_refusals(struct ca_server *s)
{
    s->stats.refused_per_source = s->srcs.refused_per_source;
    s->stats.refused_busy = s->srcs.refused_busy;
}

static void respond(struct sconn *sc, int status, struct buf *body)
{
    buf_printf(&sc->out,
               "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
               "Content-Length: %zu\r\nConnection: close\r\n\r\n",
               status, reason(status), buf_len(body));
    buf_append(&sc->out, buf_ptr(body), buf_len(body));
    sc->writing = 1;
}

static void respond_error(struct sconn *sc, int status, const char *msg)
{
    struct buf b;

    buf_init(&b, 8192);
    ca_api_error_write(&b, msg);
    respond(sc, status, &b);
    buf_dispose(&b);
    sc->s->stats.refused++;
    log_warn("CA: refused a certificate request from %s: %s", sc->peer, msg);
}

/* The identity of a renewing client, from its certificate; NULL (with
 * *why) when it has none or one this CA does not accept. */
static char *client_identity(struct sconn *sc, const char **why)
{
    const struct ca *ca = sc->s->ca;
    SSL *ssl = sc->c.tls;
    X509 *leaf = SSL_get_peer_certificate(ssl);
    STACK_OF(X509) *chain = SSL_get_peer_full_cert_chain(ssl);
    X509_STORE *store = NULL;
    X509_STORE_CTX *vctx = NULL;
    char *id = NULL, *td = NULL;

    *why = NULL;
    if (leaf == NULL)
        return NULL;
    store = X509_STORE_new();
    vctx = X509_STORE_CTX_new();
    if (store == NULL || vctx == NULL)
        goto done;
    for (size_t i = 0; i < sk_X509_num(ca->roots); i++)
        X509_STORE_add_cert(store, sk_X509_value(ca->roots, i));
    if (!X509_STORE_CTX_init(vctx, store, leaf, chain))
        goto done;
    if (X509_verify_cert(vctx) != 1) {
        *why = X509_verify_cert_error_string(X509_STORE_CTX_get_error(vctx));
        goto done;
    }
    /* Only certificates this CA signed renew here, not any of its root. */
    if (X509_check_issued(ca->cert, leaf) != X509_V_OK) {
        *why = "client certificate was not issued by this CA";
        goto done;
    }
    id = pki_spiffe_id(leaf);
    if (id == NULL || pki_spiffe_split(id, &td, NULL, NULL) < 0 ||
        strcmp(td, ca->trust_domain) != 0) {
        *why = "client certificate has no workload SPIFFE ID of this "
               "trust domain";
        free(id);
        id = NULL;
    }
done:
    ERR_clear_error();
    free(td);
    X509_STORE_CTX_free(vctx);
    X509_STORE_free(store);
    X509_free(leaf);
    return id;
}

/* What went wrong with a certificate request, mapped to an HTTP status
 * (JSON API) or a gRPC status (gRPC API). */
enum issue_rc {
    ISSUE_OK,
    ISSUE_BAD_REQUEST,     /* 400, INVALID_ARGUMENT */
    ISSUE_UNAUTHENTICATED, /* 401, UNAUTHENTICATED */
    ISSUE_FORBIDDEN,       /* 403, PERMISSION_DENIED */
    ISSUE_INTERNAL,        /* 500, INTERNAL */
};

/* The outcome of issue(): the chain as PEM (leaf first) and how the
 * caller was authenticated. */
struct issued {
    struct buf pems[CA_API_MAX_CHAIN];
    const char *pv[CA_API_MAX_CHAIN];
    size_t np;
    char *id;
    const char *how;
    int64_t valid_s;
};

static void issued_dispose(struct issued *is)
{
    for (size_t i = 0; i < is->np; i++)
        buf_dispose(&is->pems[i]);
    is->np = 0;
    free(is->id);
    is->id = NULL;
}

/* A service-account token's identity: sub system:serviceaccount:NS:SA,
 * checked by the configured issuer's keys and audience. NULL with a
 * message in msg. */
static char *sa_token_identity(struct ca_server *s, const char *tok, char *msg,
                               size_t cap)
{
    struct arena a;
    struct jwt_result res;
    enum jwt_status st;
    const char *p, *colon;
    char *ns = NULL, *sa = NULL, *id = NULL;

    arena_init(&a, 4096);
    st = jwt_authn_verify(s->sa_jwt, (struct slice){tok, strlen(tok)}, &a,
                          (int64_t)time(NULL), &res);
    if (st != JWT_OK) {
        snprintf(msg, cap,
                 "request authenticate failure: the service-account token "
                 "is refused: %s%s",
                 jwt_status_text(st),
                 st == JWT_AUDIENCE ? " (it must name the audience of "
                                      "ca.serviceAccountTokens.audience)"
                                    : "");
        goto done;
    }
    p = res.subject.p;
    if (res.subject.n <= 23 || strncmp(p, "system:serviceaccount:", 22) != 0 ||
        (colon = memchr(p + 22, ':', res.subject.n - 22)) == NULL) {
        snprintf(msg, cap,
                 "request authenticate failure: the token's sub is not "
                 "system:serviceaccount:NAMESPACE:NAME");
        goto done;
    }
    ns = strndup(p + 22, (size_t)(colon - p - 22));
    sa = strndup(colon + 1, (size_t)(p + res.subject.n - colon - 1));
    if (ns == NULL || sa == NULL || !pki_name_ok(ns) || !pki_name_ok(sa)) {
        snprintf(msg, cap,
                 "request authenticate failure: the token's namespace or "
                 "service account is not a DNS-style name");
        goto done;
    }
    id = pki_spiffe_make(s->ca->trust_domain, ns, sa);
    if (id == NULL)
        snprintf(msg, cap, "out of memory");
done:
    free(ns);
    free(sa);
    arena_dispose(&a);
    return id;
}

/* A join token's record, read without spending it: "" when it is not
 * there (spent, unknown), else the SPIFFE ID it is for; NULL when memory
 * is short. */
static char *join_token_peek(const struct ca *ca, const struct token *t)
{
    char tid[65], *path = NULL, *data, *err = NULL, *ns = NULL, *sa = NULL;
    char *id = NULL;
    const char *why;
    int64_t exp;
    size_t n = 0;

    token_id(t, tid);
    if (asprintf(&path, "%s/tokens/%s", ca->dir, tid) < 0)
        return NULL;
    data = pki_read_file(path, &n, &err);
    free(path);
    free(err);
    if (data == NULL)
        return strdup("");
    if (token_record_parse(data, n, &ns, &sa, &exp, &why) == 0)
        id = pki_spiffe_make(ca->trust_domain, ns, sa);
    else
        id = strdup("");
    free(data);
    free(ns);
    free(sa);
    return id;
}

/* The SANs a CSR asks for, when it asks for any, must be the caller's
 * identity (gRPC API; Istio's CA authorizes every SAN of a CSR). */
static int san_mismatch(const char *csr, const char *id, char *msg, size_t cap)
{
    char *sans = csr_uri_sans(csr, strlen(csr));
    int bad = sans != NULL && strcmp(sans, id) != 0;

    if (bad)
        snprintf(msg, cap,
                 "the CSR asks for %s, but the caller is authenticated as %s",
                 sans, id);
    free(sans);
    return bad;
}

/*
 * issue() authenticates a certificate request and issues the
 * certificate. auth: the Authorization value or NULL; check_san: refuse
 * a CSR whose URI SANs are not the caller's identity. ISSUE_OK with *out
 * filled (dispose it), else a class with a message in msg.
 */
static int issue(struct sconn *sc, const char *auth, size_t auth_n,
                 const char *csr, int64_t validity_s, int check_san,
                 struct issued *out, char *msg, size_t cap)
{
    struct ca_server *s = sc->s;
    const struct ca *ca = s->ca;
    EVP_PKEY *pub;
    X509 *leaf = NULL;
    char *ns = NULL, *sa = NULL, *err = NULL;
    const char *why = NULL;
    int rc = ISSUE_INTERNAL;

    memset(out, 0, sizeof(*out));
    pub = csr_parse(csr, strlen(csr), &why);
    if (pub == NULL) {
        snprintf(msg, cap, "%s", why);
        return ISSUE_BAD_REQUEST;
    }
    if (auth != NULL) {
        const char *tok;
        size_t tn;
        if (auth_n < 7 || strncasecmp(auth, "Bearer ", 7) != 0) {
            snprintf(msg, cap, "Authorization must be 'Bearer <token>'");
            rc = ISSUE_UNAUTHENTICATED;
            goto done;
        }
        tok = auth + 7;
        tn = auth_n - 7;
        if (tn >= 5 && memcmp(tok, TOKEN_PREFIX, 5) == 0) {
            struct token t;
            uint8_t kh[32];
            if (token_parse(tok, tn, &t, &why) < 0) {
                snprintf(msg, cap, "%s", why);
                rc = ISSUE_UNAUTHENTICATED;
                goto done;
            }
            /* A CSR for another identity must not cost the token. */
            if (check_san) {
                char *peek = join_token_peek(ca, &t);
                if (peek != NULL && peek[0] != '\0' &&
                    san_mismatch(csr, peek, msg, cap)) {
                    free(peek);
                    rc = ISSUE_FORBIDDEN;
                    goto done;
                }
                free(peek);
            }
            /* The key the CSR proved possession of: a join interrupted
             * after the spend may be retried with it (token_redeem()). */
            pki_key_spki_sha256(pub, kh);
            if (token_redeem(ca->dir, ca->pin, &t, kh, (int64_t)time(NULL), &ns,
                             &sa, &err) < 0) {
                snprintf(msg, cap, "%s", err ? err : "join token refused");
                rc = ISSUE_UNAUTHENTICATED;
                goto done;
            }
            out->id = pki_spiffe_make(ca->trust_domain, ns, sa);
            out->how = "join token";
        } else if (s->sa_jwt != NULL && tn < CA_GRPC_MAX_AUTH) {
            char *t = strndup(tok, tn);
            out->id = t ? sa_token_identity(s, t, msg, cap) : NULL;
            if (t != NULL)
                OPENSSL_cleanse(t, tn);
            free(t);
            if (out->id == NULL) {
                rc = ISSUE_UNAUTHENTICATED;
                goto done;
            }
            out->how = "service-account token";
        } else {
            snprintf(msg, cap,
                     "request authenticate failure: not a join token, and "
                     "this CA takes no service-account tokens "
                     "(ca.serviceAccountTokens)");
            rc = ISSUE_UNAUTHENTICATED;
            goto done;
        }
    } else {
        out->id = client_identity(sc, &why);
        if (out->id == NULL) {
            if (why == NULL) {
                snprintf(msg, cap,
                         "no credentials: send a token (Authorization: "
                         "Bearer) or renew with a client certificate");
                rc = ISSUE_UNAUTHENTICATED;
            } else {
                snprintf(msg, cap, "client certificate not accepted: %s", why);
                rc = ISSUE_FORBIDDEN;
            }
            goto done;
        }
        out->how = "client certificate";
    }
    if (out->id == NULL) {
        snprintf(msg, cap, "out of memory");
        goto done;
    }
    if (check_san && san_mismatch(csr, out->id, msg, cap)) {
        rc = ISSUE_FORBIDDEN;
        goto done;
    }
    leaf = ca_issue(ca, pub, out->id, validity_s, &err);
    if (leaf == NULL) {
        snprintf(msg, cap, "%s", err ? err : "cannot issue");
        goto done;
    }
    for (size_t i = 0;
         i <= sk_X509_num(ca->chain) && out->np < CA_API_MAX_CHAIN; i++) {
        struct buf *b = &out->pems[out->np];
        buf_init(b, 64 * 1024);
        pki_cert_pem(i == 0 ? leaf : sk_X509_value(ca->chain, i - 1), b);
        out->pv[out->np++] = buf_cstr(b);
    }
    out->valid_s = pki_time(X509_get0_notAfter(leaf)) -
                   pki_time(X509_get0_notBefore(leaf));
    rc = ISSUE_OK;
done:
    if (rc != ISSUE_OK)
        issued_dispose(out);
    X509_free(leaf);
    EVP_PKEY_free(pub);
    free(ns);
    free(sa);
    free(err);
    return rc;
}

static void count_issued(struct ca_server *s, const struct issued *is,
                         const char *peer, const char *api)
{
    if (strcmp(is->how, "join token") == 0)
        s->stats.issued_token++;
    else if (strcmp(is->how, "client certificate") == 0)
        s->stats.issued_renewal++;
    else
        s->stats.issued_sa_token++;
    log_info("CA: issued %s to %s (authenticated by %s, %s API), valid "
             "%lld s",
             is->id, peer, is->how, api, (long long)is->valid_s);
}

static void handle(struct sconn *sc, const struct h1_request *req,
                   const char *body, size_t blen)
{
    static const int http_of[] = {200, 400, 401, 403, 500};
    const struct h1_header *auth;
    struct ca_api_request areq;
    struct issued is;
    const char *why = NULL;
    char msg[768];
    struct buf b;
    int rc;

    memset(&areq, 0, sizeof(areq));
    if (!(req->target.n == strlen(CA_API_PATH) &&
          memcmp(req->target.p, CA_API_PATH, req->target.n) == 0)) {
        respond_error(sc, 404, "no such API (POST " CA_API_PATH ")");
        return;
    }
    if (!h1_slice_eq_ci(req->method, "POST")) {
        respond_error(sc, 405, "use POST");
        return;
    }
    /* The request must be sound before a token is spent on it. */
    if (ca_api_request_parse(body, blen, &areq, &why) < 0) {
        respond_error(sc, 400, why);
        goto done;
    }
    auth = h1_header_find(req->headers, req->nheaders, "authorization");
    rc = issue(sc, auth ? auth->value.p : NULL, auth ? auth->value.n : 0,
               areq.csr, areq.validity_s, 0, &is, msg, sizeof(msg));
    if (rc != ISSUE_OK) {
        respond_error(sc, http_of[rc], msg);
        goto done;
    }
    buf_init(&b, CA_API_MAX_BODY);
    ca_api_response_write(&b, is.pv, is.np);
    respond(sc, 200, &b);
    buf_dispose(&b);
    count_issued(sc->s, &is, sc->peer, "JSON");
    issued_dispose(&is);
done:
    ca_api_request_dispose(&areq);
}

/* One gRPC CreateCertificate call (ca_server_grpc.h). */
static int grpc_issue(void *arg, const char *auth,
                      const struct ca_grpc_request *req, struct buf *out,
                      char *msg, size_t cap)
{
    static const int grpc_of[] = {CA_GRPC_OK, CA_GRPC_INVALID_ARGUMENT,
                                  CA_GRPC_UNAUTHENTICATED,
                                  CA_GRPC_PERMISSION_DENIED, CA_GRPC_INTERNAL};
    struct sconn *sc = arg;
    struct issued is;
    int rc;

    if (req->has_metadata) {
        /* Istio's metadata carries ImpersonatedIdentity, for istiod
         * asking on a workload's behalf; strait's CA has no such trust. */
        snprintf(msg, cap,
                 "metadata (impersonation) is not supported by strait's CA");
        rc = CA_GRPC_INVALID_ARGUMENT;
        goto refused;
    }
    rc = issue(sc, auth, auth ? strlen(auth) : 0, req->csr, req->validity_s, 1,
               &is, msg, cap);
    if (rc != ISSUE_OK) {
        rc = grpc_of[rc];
        goto refused;
    }
    if (ca_grpc_response_encode(out, is.pv, is.np) < 0) {
        issued_dispose(&is);
        snprintf(msg, cap, "the chain does not fit in a response");
        rc = CA_GRPC_INTERNAL;
        goto refused;
    }
    count_issued(sc->s, &is, sc->peer, "gRPC");
    issued_dispose(&is);
    return CA_GRPC_OK;
refused:
    sc->s->stats.refused++;
    log_warn("CA: refused a gRPC certificate request from %s: %s", sc->peer,
             msg);
    return rc;
}

/* Returns 1 when a whole request was read and handled, 0 for more bytes,
 * -1 to close. */
static int try_request(struct sconn *sc)
{
    struct h1_header hdrs[CA_MAX_HEADERS];
    struct http_limits lim = http_limits_default();
    struct h1_request req;
    const char *why;
    int status, head;

    lim.max_headers = CA_MAX_HEADERS;
    lim.underscores = HTTP_US_ALLOW;
    req.headers = hdrs;
    head = h1_parse_request(buf_ptr(&sc->in), buf_len(&sc->in), &lim, &req,
                            &why, &status);
    if (head < 0) {
        respond_error(sc, status, why);
        return 1;
    }
    if (head == 0)
        return 0;
    if (req.body == H1_BODY_CHUNKED) {
        respond_error(sc, 411, "send the body with Content-Length");
        return 1;
    }
    if (req.body == H1_BODY_LENGTH && req.content_length > CA_API_MAX_BODY) {
        respond_error(sc, 413, "request body too large");
        return 1;
    }
    if (req.body == H1_BODY_LENGTH &&
        buf_len(&sc->in) - (size_t)head < req.content_length)
        return 0;
    handle(sc, &req, buf_ptr(&sc->in) + head,
           req.body == H1_BODY_LENGTH ? (size_t)req.content_length : 0);
    return 1;
}

static void sconn_set_kind(struct sconn *sc, int kind)
{
    sc->s->nkind[sc->kind]--;
    sc->kind = kind;
    sc->s->nkind[kind]++;
}

/*
 * classify() moves a connection whose handshake just finished to the
 * slots of its kind: with a client certificate this CA issued it is a
 * renewal, else a join. When those slots are full it is answered 503 and
 * closed; -1 then (sc is closed).
 */
static int classify(struct sconn *sc)
{
    struct ca_server *s = sc->s;
    const char *why;
    /* Only a certificate this CA issued makes a renewal: any other one
     * (self-signed by a flooder, say) competes with joins. */
    char *id = client_identity(sc, &why);
    int kind = id != NULL ? SCONN_RENEWAL : SCONN_TOKEN;
    size_t max = kind == SCONN_RENEWAL ? CA_MAX_RENEWAL : CA_MAX_TOKEN;

    free(id);
    sconn_set_kind(sc, kind);
    if (s->nkind[kind] <= max)
        return 0;
    source_limit_busy(&s->srcs, sc->peer,
                      kind == SCONN_RENEWAL ? "renewal slots full"
                                            : "join slots full");
    sync_refusals(s);
    {
        size_t alen;
        const char *alpn = tls_conn_alpn(&sc->c, &alen);
        if (alen == 2 && memcmp(alpn, "h2", 2) == 0) {
            /* HTTP/2 (gRPC): the server preface (empty SETTINGS) and a
             * GOAWAY ENHANCE_YOUR_CALM saying why, which clients report
             * as UNAVAILABLE and retry. */
            static const char busy[] = "CA busy: too many connections";
            uint8_t f[9 + 9 + 8];
            size_t dl = sizeof(busy) - 1;
            memset(f, 0, sizeof(f));
            f[3] = 0x4;                   /* SETTINGS */
            f[9 + 2] = (uint8_t)(8 + dl); /* GOAWAY length */
            f[9 + 3] = 0x7;               /* GOAWAY */
            f[9 + 9 + 7] = 0xb;           /* ENHANCE_YOUR_CALM */
            buf_append(&sc->out, f, sizeof(f));
            buf_append(&sc->out, busy, dl);
        } else {
            struct buf b;
            buf_init(&b, 1024);
            ca_api_error_write(&b, "CA busy: too many connections; retry "
                                   "later");
            respond(sc, 503, &b);
            buf_dispose(&b);
        }
    }
    /* One attempt to send the answer; a client that does not read it
     * loses nothing it could have had. */
    conn_write(&sc->c, buf_ptr(&sc->out), buf_len(&sc->out));
    sconn_close(sc);
    return -1;
}

static void on_io(struct conn *c, void *arg)
{
    struct sconn *sc = arg;

    if (c->handshaking) {
        int rc = c->ops->handshake(c);
        if (rc < 0) {
            log_debug("CA: TLS handshake from %s failed: %s", sc->peer,
                      tls_conn_failure(c));
            sconn_close(sc);
            return;
        }
        if (rc == 0) {
            conn_want(c, 1, 0);
            return;
        }
        c->handshaking = 0;
        if (classify(sc) < 0)
            return;
        {
            size_t alen;
            const char *alpn = tls_conn_alpn(c, &alen);
            if (alen == 2 && memcmp(alpn, "h2", 2) == 0) {
                sc->grpc = ca_grpc_sess_new(c, sc->peer, grpc_issue, sc);
                if (sc->grpc == NULL) {
                    sconn_close(sc);
                    return;
                }
                /* The rest of the connection's time is the client's: a
                 * gRPC channel may send calls one after another. */
                uint64_t spent = clock_ms() - sc->accept_ms;
                timer_arm(&sc->timer, spent < CA_CONN_TIMEOUT_MS
                                          ? CA_CONN_TIMEOUT_MS - spent
                                          : 0);
                sc->got_byte = 1;
            }
        }
    }
    if (sc->grpc != NULL) {
        const char *why = NULL;
        int rc = ca_grpc_sess_io(sc->grpc, &why);
        if (rc <= 0) {
            if (rc < 0)
                log_debug("CA: gRPC connection from %s ended: %s", sc->peer,
                          why);
            sconn_close(sc);
        }
        return;
    }
    while (!sc->writing) {
        size_t room;
        char *p = buf_reserve_any(&sc->in, &room);
        ssize_t r;

        if (p == NULL) {
            respond_error(sc, 413, "request too large");
            break;
        }
        r = conn_read(c, p, room);
        if (r == CONN_AGAIN) {
            conn_want(c, 1, 0);
            return;
        }
        if (r <= 0) {
            sconn_close(sc);
            return;
        }
        buf_commit(&sc->in, (size_t)r);
        if (!sc->got_byte) {
            /* The first byte is in: the rest of the whole exchange's time
             * is the client's. */
            uint64_t spent = clock_ms() - sc->accept_ms;
            sc->got_byte = 1;
            timer_arm(&sc->timer, spent < CA_CONN_TIMEOUT_MS
                                      ? CA_CONN_TIMEOUT_MS - spent
                                      : 0);
        }
        if (try_request(sc) != 0)
            break;
    }
    while (buf_len(&sc->out) > 0) {
        ssize_t w = conn_write(c, buf_ptr(&sc->out), buf_len(&sc->out));
        if (w == CONN_AGAIN) {
            conn_want(c, 0, 1);
            return;
        }
        if (w <= 0) {
            sconn_close(sc);
            return;
        }
        buf_consume(&sc->out, (size_t)w);
    }
    c->ops->shutdown(c);
    sconn_close(sc);
}

static void on_timeout(void *arg)
{
    struct sconn *sc = arg;

    sc->s->stats.timed_out++;
    log_debug("CA: connection from %s timed out (%s)", sc->peer,
              sc->got_byte ? "request" : "handshake or first byte");
    sconn_close(sc);
}

static void on_accept_resume(void *arg)
{
    struct ca_server *s = arg;

    event_add(s->accept_ev, NULL);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct ca_server *s = arg;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct sconn *sc;
    struct addr src;
    char peer[ADDR_STRLEN];
    int fd;

    (void)what;
    fd =
        accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        if (accept_error_pauses(errno)) {
            /* The socket stays readable: accepting again at once would
             * spin. Clients wait in the backlog meanwhile. */
            log_limited(&s->accept_log, ACCEPT_LOG_MS, LOG_WARN,
                        "CA: accept: %s; pausing %d ms", strerror(errno),
                        ACCEPT_PAUSE_MS);
            event_del(s->accept_ev);
            timer_arm(&s->accept_resume, ACCEPT_PAUSE_MS);
        }
        return;
    }
    memset(&src, 0, sizeof(src));
    memcpy(&src.ss, &ss, sl);
    src.len = sl;
    addr_format_sa((struct sockaddr *)&ss, sl, peer, sizeof(peer));
    if (s->nkind[SCONN_PENDING] >= CA_MAX_PENDING) {
        close(fd);
        source_limit_busy(&s->srcs, peer, "handshake slots full");
        sync_refusals(s);
        return;
    }
    if (source_limit_take(&s->srcs, &src, peer) < 0) {
        close(fd);
        sync_refusals(s);
        return;
    }
    refresh_ctx(s);
    sc = calloc(1, sizeof(*sc));
    if (sc == NULL || s->ctx == NULL) {
        free(sc);
        source_limit_give(&s->srcs, &src);
        close(fd);
        return;
    }
    sc->s = s;
    sc->src = src;
    sc->kind = SCONN_PENDING;
    sc->accept_ms = clock_ms();
    memcpy(sc->peer, peer, sizeof(peer));
    buf_init(&sc->in, CA_API_MAX_BODY + 16 * 1024);
    buf_init(&sc->out, CA_API_MAX_BODY + 4096);
    conn_init(&sc->c, s->base, fd, on_io, sc);
    timer_init(&sc->timer, s->base, on_timeout, sc);
    if (tls_conn_accept(&sc->c, s->ctx) < 0) {
        source_limit_give(&s->srcs, &src);
        timer_dispose(&sc->timer);
        conn_close(&sc->c);
        buf_dispose(&sc->in);
        buf_dispose(&sc->out);
        free(sc);
        return;
    }
    sc->c.handshaking = 1;
    sc->next = s->conns;
    if (s->conns)
        s->conns->prev = sc;
    s->conns = sc;
    s->nconns++;
    s->nkind[SCONN_PENDING]++;
    /* A short first deadline: a client that connects and says nothing
     * gives its slot back soon. */
    timer_arm(&sc->timer, CA_HANDSHAKE_TIMEOUT_MS);
    conn_want(&sc->c, 1, 0);
}

/* Reads the service-account token issuer's keys (JWKS). */
static int load_sa_keys(struct ca_server *s, const struct ca_server_tokens *t,
                        char **err)
{
    size_t n = 0;
    char *data = pki_read_file(t->jwks_file, &n, err);
    struct jwt_keys *keys;
    const char *why;

    if (data == NULL)
        return err_prefix(err, "ca.serviceAccountTokens.jwksFile: ");
    keys = jwt_keys_parse(data, n, &why);
    free(data);
    if (keys == NULL)
        return err_set(err, "ca.serviceAccountTokens.jwksFile %s: %s",
                       t->jwks_file, why);
    s->sa_jwt =
        jwt_authn_one("ca.serviceAccountTokens", t->issuer, t->audience, keys);
    if (s->sa_jwt == NULL)
        return err_set(err, "out of memory");
    log_info("CA: gRPC API takes service-account tokens of %s (audience "
             "%s, %zu key(s) from %s)",
             t->issuer, t->audience, jwt_keys_count(keys), t->jwks_file);
    return 0;
}

struct ca_server *ca_server_new(struct event_base *base, struct reaper *reaper,
                                const struct addr *a, const struct ca *ca,
                                struct ca_identity *tls_id,
                                const struct ca_server_tokens *sat,
                                struct sock_pool *pool, char **err)
{
    struct ca_server *s = calloc(1, sizeof(*s));

    *err = NULL;
    if (s == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    s->base = base;
    s->reaper = reaper;
    s->ca = ca;
    s->id = tls_id;
    s->fd = -1;
    source_limit_init(&s->srcs, "CA", CA_MAX_PER_SOURCE);
    refresh_ctx(s);
    if (s->ctx == NULL) {
        err_set(err, "CA server: no usable server certificate");
        goto fail;
    }
    if (sat != NULL && sat->jwks_file != NULL && sat->jwks_file[0] != '\0' &&
        load_sa_keys(s, sat, err) < 0)
        goto fail;
    s->fd = sock_pool_listen(pool, SOCK_POOL_CA, a, 0, 128, 0, err);
    if (s->fd < 0)
        goto fail;
    if (sock_local_addr(s->fd, &s->addr) < 0)
        s->addr = *a;
    timer_init(&s->accept_resume, base, on_accept_resume, s);
    s->accept_ev = event_new(base, s->fd, EV_READ | EV_PERSIST, on_accept, s);
    if (s->accept_ev == NULL || event_add(s->accept_ev, NULL) < 0) {
        err_set(err, "CA server: cannot watch the listening socket");
        goto fail;
    }
    return s;
fail:
    ca_server_free(s);
    return NULL;
}

int ca_server_listen_fd(const struct ca_server *s)
{
    return s->fd;
}

const struct addr *ca_server_addr(const struct ca_server *s)
{
    return &s->addr;
}

const struct ca_server_stats *ca_server_stats(const struct ca_server *s)
{
    return &s->stats;
}

void ca_server_free(struct ca_server *s)
{
    if (s == NULL)
        return;
    while (s->conns != NULL) {
        struct sconn *sc = s->conns;
        s->conns = sc->next;
        conn_close(&sc->c);
        timer_dispose(&sc->timer);
        ca_grpc_sess_free(sc->grpc);
        buf_dispose(&sc->in);
        buf_dispose(&sc->out);
        free(sc);
    }
    jwt_authn_unref(s->sa_jwt);
    source_limit_dispose(&s->srcs);
    timer_dispose(&s->accept_resume);
    if (s->accept_ev)
        event_free(s->accept_ev);
    if (s->fd >= 0)
        close(s->fd);
    SSL_CTX_free(s->ctx);
    free(s);
}
