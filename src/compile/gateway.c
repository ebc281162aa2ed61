/*
 * Lowering Istio Gateways into the listeners the proxy runs: servers
 * merged by port, their modes, TLS files and PeerAuthentication, as
 * Istio merges them. Route destinations become clusters in
 * istio-cluster.c; the router (src/proxy/router.c) turns VirtualServices
 * into route tables.
 */
#include "config.h"

#include <inttypes.h>
#include <limits.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/bootstrap.h"
#include "config/gwapi.h"
#include "config/res-k8s.h"
#include "config/resource.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/log.h"
#include "compile/compile.h"
#include "compile/identity.h"
#include "compile/peerauthn.h"
#include "compile/istio.h"
#include "tls/tls.h"
#include "upstream/cluster.h"

static char *xstrdup(const char *s)
{
    return strdup(s ? s : "");
}

static int push_str(char ***v, size_t *n, const char *s)
{
    char **nv = realloc(*v, (*n + 1) * sizeof(**v));

    if (nv == NULL)
        return -1;
    *v = nv;
    nv[*n] = xstrdup(s);
    if (nv[*n] == NULL)
        return -1;
    (*n)++;
    return 0;
}

static void strs_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void gw_tls_dispose(struct gw_tls *t)
{
    free(t->cert);
    free(t->key);
    free(t->ca);
    free(t->crl);
    X509_free(t->root);
    sk_X509_pop_free(t->extra, X509_free);
    strs_free(t->sans, t->nsans);
    strs_free(t->spki, t->nspki);
    strs_free(t->hashes, t->nhashes);
    strs_free(t->ciphers, t->nciphers);
    memset(t, 0, sizeof(*t));
}

static void gw_dispose(struct gw_listener *g)
{
    for (size_t i = 0; i < 2 * g->ncerts; i++)
        free(g->certs[i]);
    free(g->certs);
    free(g->cert_tls);
    free(g->cert_server);
    for (size_t i = 0; i < g->nservers; i++) {
        for (size_t k = 0; k < g->servers[i].nhosts; k++)
            free(g->servers[i].hosts[k]);
        free(g->servers[i].hosts);
        free(g->servers[i].gateway);
        gw_tls_dispose(&g->servers[i].tls);
    }
    free(g->servers);
    ident_id_dispose(&g->id);
}

void gw_set_dispose(struct gw_set *g)
{
    for (size_t i = 0; i < g->n; i++)
        gw_dispose(&g->v[i]);
    free(g->v);
    g->v = NULL;
    g->n = 0;
}

/* server_mode() is how strait serves a Gateway server, or -1 (with a
 * warning) for what it does not serve from Gateways. */
static int server_mode(const char *gname, const struct res_gw_server *sv)
{
    int64_t proto = sv->port.protocol;
    int tm = sv->tls.mode;
    const char *why = NULL;

    switch (proto) {
    case RES_PROTO_HTTP:
    case RES_PROTO_HTTP2:
    case RES_PROTO_GRPC:
        return GW_MODE_HTTP;
    case RES_PROTO_TCP:
    case RES_PROTO_MONGO:
    case RES_PROTO_MYSQL:
    case RES_PROTO_REDIS:
        return GW_MODE_TCP;
    case RES_PROTO_HBONE:
        /* The config layer allows ISTIO_MUTUAL only. */
        if (tm == RES_GW_TLS_ISTIO_MUTUAL)
            return GW_MODE_HBONE;
        why = "its tls mode";
        break;
    case RES_PROTO_HTTPS:
    case RES_PROTO_TLS:
        /* HTTPS with PASSTHROUGH is routed by SNI like TLS (Istio's own
         * SNI passthrough example is written that way). */
        if (tm == RES_GW_TLS_PASSTHROUGH)
            return GW_MODE_PASSTHROUGH;
        /* Istio builds AUTO_PASSTHROUGH chains for either protocol. */
        if (tm == RES_GW_TLS_AUTO_PASSTHROUGH)
            return GW_MODE_AUTO_PASSTHROUGH;
        if (tm == RES_GW_TLS_SIMPLE || tm == RES_GW_TLS_MUTUAL ||
            tm == RES_GW_TLS_OPTIONAL_MUTUAL || tm == RES_GW_TLS_ISTIO_MUTUAL)
            return proto == RES_PROTO_HTTPS ? GW_MODE_HTTPS : GW_MODE_TLS_TCP;
        why = "its tls mode";
        break;
    default:
        why = res_protocol_name(proto);
        break;
    }
    log_warn("Gateway %s: port %" PRId64 ": %s is not served from Gateways "
             "yet; skipped",
             gname, sv->port.number, why);
    return -1;
}

/* What a server on a port is, in messages. */
static const char *kind_name(int l4, int secure)
{
    if (l4)
        return secure ? "TLS" : "TCP";
    return secure ? "HTTPS" : "HTTP";
}

static void ident_strs(struct ident *d, char *const *v, size_t n)
{
    ident_u64(d, 'l', n);
    for (size_t i = 0; i < n; i++)
        ident_str(d, 's', v[i]);
}

/* ident_root() adds the mesh root an ISTIO_MUTUAL server trusts, by its
 * digest: the same on every rotation of the node's certificate (which the
 * handshakes take by themselves), so the listener is kept. */
static void ident_root(struct ident *d, const struct x509_st *root)
{
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned n = 0;

    if (root == NULL || !X509_digest(root, EVP_sha256(), md, &n))
        n = 0;
    ident_bytes(d, 'Y', md, n);
}

/* listener_identity() sets g->id from what the listener is: its address,
 * its kind and flags, the certificate files it loads, and each server on
 * the port with its hosts, mode and TLS settings (files by path: their
 * content is checked by the certificate reload; the mesh certificate by
 * its root only). -1 when memory runs out. */
static int listener_identity(struct gw_listener *g)
{
    char as[ADDR_STRLEN];
    struct ident d;

    ident_init(&d);
    ident_str(&d, 'a', addr_format(&g->address, as, sizeof(as)));
    ident_u64(&d, 'p', g->port);
    ident_u64(&d, 't', (uint64_t)g->tls);
    ident_u64(&d, '4', (uint64_t)g->l4);
    ident_u64(&d, 'h', (uint64_t)g->shared);
    ident_u64(&d, 'e', (uint64_t)g->secure);
    ident_u64(&d, 'P', (uint64_t)g->permissive);
    ident_u64(&d, 'r', (uint64_t)g->https_redirect);
    ident_u64(&d, 'B', (uint64_t)g->hbone);
    ident_strs(&d, g->certs, 2 * g->ncerts);
    ident_u64(&d, 'S', g->nservers);
    for (size_t i = 0; i < g->nservers; i++) {
        const struct gw_server *sv = &g->servers[i];
        const struct gw_tls *t = &sv->tls;

        ident_str(&d, 'g', sv->gateway);
        ident_strs(&d, sv->hosts, sv->nhosts);
        ident_u64(&d, 'M', (uint64_t)sv->mode);
        ident_u64(&d, 'T', (uint64_t)t->mode);
        ident_str(&d, 'c', t->cert);
        ident_str(&d, 'k', t->key);
        ident_str(&d, 'C', t->ca);
        ident_root(&d, t->root);
        for (size_t k = 0; t->extra != NULL && k < sk_X509_num(t->extra); k++)
            ident_root(&d, sk_X509_value(t->extra, k));
        ident_str(&d, 'R', t->crl);
        ident_u64(&d, 'o', (uint64_t)t->crl_optional);
        ident_strs(&d, t->sans, t->nsans);
        ident_strs(&d, t->spki, t->nspki);
        ident_strs(&d, t->hashes, t->nhashes);
        ident_u64(&d, 'v', t->min_version);
        ident_u64(&d, 'V', t->max_version);
        ident_strs(&d, t->ciphers, t->nciphers);
    }
    return ident_finish(&d, &g->id);
}

static int file_exists(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int copy_strs(char ***dst, size_t *n, const struct conf_strs *src)
{
    for (size_t i = 0; i < src->n; i++)
        if (push_str(dst, n, src->v[i]) < 0)
            return -1;
    return 0;
}

/* A Gateway's TLS version (enum res_tls_version) as BoringSSL's; 0 for
 * TLS_AUTO. */
static uint16_t tls_version_of(int v)
{
    switch (v) {
    case RES_TLSV1_2:
        return TLS1_2_VERSION;
    case RES_TLSV1_3:
        return TLS1_3_VERSION;
    default:
        return 0;
    }
}

/*
 * A terminating server's TLS: the certificate from files named in the
 * Gateway, or credentialName in the credentials directory (NAME/tls.crt
 * and NAME/tls.key); for MUTUAL and OPTIONAL_MUTUAL the CA bundle from
 * caCertificates, else the credential's ca.crt, else, as Istio's
 * NAME-cacert secrets, NAME-cacert/ca.crt. The CRLs: caCrl, else, when
 * the CA bundle is the credential's, the ca.crl beside that ca.crt (Istio
 * reads the key ca.crl from the secret that holds ca.crt), used when it
 * is there.
 */
/*
 * A credentialName that names a Secret of the gateway's namespace
 * (node.namespace: istiod looks in the gateway workload's namespace, not
 * the Gateway resource's; type kubernetes.io/tls or Opaque) is read from
 * it, as istiod reads one: the
 * certificate and key from it, for MUTUAL the CA bundle from it or else
 * from the Secret NAME-cacert, and the CRL from the Secret that holds the
 * CA. The credentials directory is not consulted for that name then: a
 * Secret in the configuration wins over files of the same name. The
 * control loop has made each value a file (res_secret_set_path()).
 * Returns 1 when a Secret was used, 0 when there is none, -1 with *err.
 */
/* secret_pem_ok() is true when key k of s is PEM of its kind (a
 * certificate, a private key, certificates for the CA), so a bad Secret
 * is named here rather than by the path of its in-memory file. */
static int secret_pem_ok(const struct res_k8s_secret *s, int k)
{
    BIO *b;
    int ok = 0;

    if (s->val[k] == NULL || s->len[k] > INT_MAX)
        return 0;
    if ((b = BIO_new_mem_buf(s->val[k], (int)s->len[k])) == NULL)
        return 0;
    if (k == RES_SECRET_KEY) {
        EVP_PKEY *key = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
        ok = key != NULL;
        EVP_PKEY_free(key);
    } else {
        X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
        ok = x != NULL;
        X509_free(x);
    }
    ERR_clear_error();
    BIO_free(b);
    return ok;
}

/* secret_pair_ok() is true when the Secret's key is its certificate's
 * (both already known to be PEM). */
static int secret_pair_ok(const struct res_k8s_secret *s)
{
    BIO *bc =
        BIO_new_mem_buf(s->val[RES_SECRET_CERT], (int)s->len[RES_SECRET_CERT]);
    BIO *bk =
        BIO_new_mem_buf(s->val[RES_SECRET_KEY], (int)s->len[RES_SECRET_KEY]);
    X509 *x = bc != NULL ? PEM_read_bio_X509(bc, NULL, NULL, NULL) : NULL;
    EVP_PKEY *k =
        bk != NULL ? PEM_read_bio_PrivateKey(bk, NULL, NULL, NULL) : NULL;
    int ok = x != NULL && k != NULL && X509_check_private_key(x, k) == 1;

    ERR_clear_error();
    X509_free(x);
    EVP_PKEY_free(k);
    BIO_free(bc);
    BIO_free(bk);
    return ok;
}

static int secret_tls(const struct resource_set *set, const char *gw_ns,
                      const char *gname, const struct res_gw_server *sv,
                      struct gw_tls *out, char **err)
{
    const struct res_gw_tls *t = &sv->tls;
    const struct resource *r, *car;
    const struct res_k8s_secret *s, *ca;
    char cacert[300];

    if (set == NULL || t->credential_name == NULL ||
        t->credential_name[0] == '\0' ||
        (r = res_k8s_find_secret(set, gw_ns, t->credential_name)) == NULL)
        return 0;
    s = res_k8s_secret(r);
    if (s->path[RES_SECRET_CERT] == NULL || s->path[RES_SECRET_KEY] == NULL)
        return err_set(err,
                       "Gateway %s: port %" PRId64 ": Secret %s/%s has no "
                       "tls.crt and tls.key (or cert and key)",
                       gname, sv->port.number, gw_ns, t->credential_name);
    for (int k = RES_SECRET_CERT; k <= RES_SECRET_KEY; k++)
        if (!secret_pem_ok(s, k))
            return err_set(err,
                           "Gateway %s: port %" PRId64 ": Secret %s/%s: %s "
                           "is not a PEM %s",
                           gname, sv->port.number, gw_ns, t->credential_name,
                           res_secret_key_name(k),
                           k == RES_SECRET_KEY ? "private key" : "certificate");
    if (!secret_pair_ok(s))
        return err_set(err,
                       "Gateway %s: port %" PRId64 ": Secret %s/%s: tls.key "
                       "is not the key of tls.crt",
                       gname, sv->port.number, gw_ns, t->credential_name);
    out->cert = xstrdup(s->path[RES_SECRET_CERT]);
    out->key = xstrdup(s->path[RES_SECRET_KEY]);
    if (out->cert == NULL || out->key == NULL)
        return err_set(err, "out of memory");
    if (t->mode != RES_GW_TLS_MUTUAL && t->mode != RES_GW_TLS_OPTIONAL_MUTUAL)
        return 1;
    if (t->ca_certificates != NULL && t->ca_certificates[0] != '\0')
        return 1; /* caCertificates, as for files: the caller's */
    ca = s;
    if (ca->path[RES_SECRET_CA] == NULL) {
        snprintf(cacert, sizeof(cacert), "%s-cacert", t->credential_name);
        car = res_k8s_find_secret(set, gw_ns, cacert);
        ca = car != NULL ? res_k8s_secret(car) : NULL;
        if (ca == NULL || ca->path[RES_SECRET_CA] == NULL)
            return err_set(err,
                           "Gateway %s: port %" PRId64 ": tls mode %s: "
                           "Secret %s/%s has no ca.crt (nor cacert), and "
                           "there is no Secret %s/%s with one",
                           gname, sv->port.number,
                           t->mode == RES_GW_TLS_MUTUAL ? "MUTUAL"
                                                        : "OPTIONAL_MUTUAL",
                           gw_ns, t->credential_name, gw_ns, cacert);
    }
    if ((out->ca = xstrdup(ca->path[RES_SECRET_CA])) == NULL)
        return err_set(err, "out of memory");
    if ((t->ca_crl == NULL || t->ca_crl[0] == '\0') &&
        ca->path[RES_SECRET_CRL] != NULL &&
        (out->crl = xstrdup(ca->path[RES_SECRET_CRL])) == NULL)
        return err_set(err, "out of memory");
    return 1;
}

/*
 * server_mesh_tls() sets an ISTIO_MUTUAL server's certificate: this node's
 * SPIFFE identity, from the CA it runs or joined, taken from memory for each
 * handshake (so a renewal that could not be written to ca.dir is served
 * all the same, and at once), and the mesh root for its clients. 0, or -1
 * with *err when there is no CA.
 */
static int server_mesh_tls(const struct compile_identity *identity,
                           const char *gname, const struct res_gw_server *sv,
                           struct gw_tls *out, char **err)
{
    if (identity == NULL || !identity->current(identity->arg, &out->root) ||
        out->root == NULL)
        return err_set(err,
                       "Gateway %s: port %" PRId64 ": tls mode "
                       "ISTIO_MUTUAL needs this node's mesh certificate "
                       "(ca.enabled, or join a CA)",
                       gname, sv->port.number);
    out->cred = identity->ssl;
    out->cred_arg = identity->arg;
    /* The mesh's bundle (ca.istiod.rootCert) instead of the root the
     * certificate was issued under: root is its first, extra a new list
     * of new references to all of them, which the listener keeps (the
     * TLS layer skips the copy of root). */
    if (identity->mesh_roots != NULL && sk_X509_num(identity->mesh_roots) > 0) {
        X509_free(out->root);
        out->root = sk_X509_value(identity->mesh_roots, 0);
        X509_up_ref(out->root);
        out->extra = X509_chain_up_ref((STACK_OF(X509) *)identity->mesh_roots);
        if (out->extra == NULL)
            return err_set(err, "out of memory");
    }
    if (copy_strs(&out->sans, &out->nsans, &sv->tls.subject_alt_names) < 0)
        return err_set(err, "out of memory");
    return 0;
}

static int server_tls(const struct bootstrap *bs,
                      const struct compile_identity *identity,
                      const struct resource_set *set, const char *gw_ns,
                      const char *gname, const struct res_gw_server *sv,
                      struct gw_tls *out, char **err)
{
    const struct res_gw_tls *t = &sv->tls;
    const char *dir = bs->credentials.dir;
    int has_cred = t->credential_name != NULL &&
                   t->credential_name[0] != '\0' && dir[0] != '\0';
    int rc;

    out->mode = t->mode;
    /* Versions and suites apply to every terminating mode (the config
     * layer refuses TLS 1.0 and 1.1, which strait never offers). */
    out->min_version = tls_version_of(t->min_protocol_version);
    out->max_version = tls_version_of(t->max_protocol_version);
    if (copy_strs(&out->ciphers, &out->nciphers, &t->cipher_suites) < 0)
        return err_set(err, "out of memory");
    if (t->mode == RES_GW_TLS_ISTIO_MUTUAL)
        return server_mesh_tls(identity, gname, sv, out, err);
    if (t->server_certificate != NULL && t->server_certificate[0] != '\0') {
        out->cert = xstrdup(t->server_certificate);
        out->key = xstrdup(t->private_key);
    } else if ((rc = secret_tls(set, gw_ns, gname, sv, out, err)) != 0) {
        if (rc < 0)
            return -1;
        /* The Secret gave all but, perhaps, caCertificates and caCrl. */
        has_cred = 0;
        if (t->mode != RES_GW_TLS_MUTUAL &&
            t->mode != RES_GW_TLS_OPTIONAL_MUTUAL)
            return 0;
        if (out->ca != NULL)
            goto verify;
    } else if (has_cred) {
        if (asprintf(&out->cert, "%s/%s/tls.crt", dir, t->credential_name) <
                0 ||
            asprintf(&out->key, "%s/%s/tls.key", dir, t->credential_name) < 0)
            return err_set(err, "out of memory");
    } else {
        return err_set(err,
                       "Gateway %s: port %" PRId64 ": a TLS-terminating "
                       "server needs serverCertificate and privateKey, or "
                       "credentialName with credentials.dir",
                       gname, sv->port.number);
    }
    if (out->cert == NULL || out->key == NULL)
        return err_set(err, "out of memory");
    if (t->mode != RES_GW_TLS_MUTUAL && t->mode != RES_GW_TLS_OPTIONAL_MUTUAL)
        return 0;
    if (t->ca_certificates != NULL && t->ca_certificates[0] != '\0') {
        out->ca = xstrdup(t->ca_certificates);
    } else if (has_cred) {
        if (asprintf(&out->ca, "%s/%s/ca.crt", dir, t->credential_name) < 0)
            return err_set(err, "out of memory");
        if (!file_exists(out->ca)) {
            free(out->ca);
            if (asprintf(&out->ca, "%s/%s-cacert/ca.crt", dir,
                         t->credential_name) < 0)
                return err_set(err, "out of memory");
        }
        if (!file_exists(out->ca))
            return err_set(
                err,
                "Gateway %s: port %" PRId64 ": tls mode %s: "
                "credential %s has no ca.crt (looked for "
                "%s/%s/ca.crt and %s)",
                gname, sv->port.number,
                t->mode == RES_GW_TLS_MUTUAL ? "MUTUAL" : "OPTIONAL_MUTUAL",
                t->credential_name, dir, t->credential_name, out->ca);
        if (t->ca_crl == NULL || t->ca_crl[0] == '\0') {
            size_t l = strlen(out->ca) - strlen("ca.crt");
            if (asprintf(&out->crl, "%.*sca.crl", (int)l, out->ca) < 0)
                return err_set(err, "out of memory");
            out->crl_optional = 1;
        }
    } else {
        return err_set(err,
                       "Gateway %s: port %" PRId64 ": tls mode %s needs "
                       "caCertificates, or credentialName with a ca.crt",
                       gname, sv->port.number,
                       t->mode == RES_GW_TLS_MUTUAL ? "MUTUAL"
                                                    : "OPTIONAL_MUTUAL");
    }
verify:
    if (t->ca_crl != NULL && t->ca_crl[0] != '\0' &&
        (out->crl = xstrdup(t->ca_crl)) == NULL)
        return err_set(err, "out of memory");
    if (out->ca == NULL ||
        copy_strs(&out->sans, &out->nsans, &t->subject_alt_names) < 0 ||
        copy_strs(&out->spki, &out->nspki, &t->verify_certificate_spki) < 0 ||
        copy_strs(&out->hashes, &out->nhashes, &t->verify_certificate_hash) < 0)
        return err_set(err, "out of memory");
    return 0;
}

int istio_gateways(const struct bootstrap *bs, const struct resource_set *set,
                   const struct compile_identity *identity, struct gw_set *out,
                   char **err)
{
    memset(out, 0, sizeof(*out));
    *err = NULL;
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_gateway *gw;
        char gname[512];

        if (r->kind != RES_GATEWAY)
            continue;
        gw = res_gateway(r);
        /* Istio's selector: every label must be on this node. */
        if (!res_labels_match(&gw->selector, &bs->node.labels))
            continue;
        /* A lowered Gateway API listener: a node labelled with a
         * gateway-name serves that Gateway of its namespace only. */
        if (!gwapi_node_serves(r, bs->node.ns, &bs->node.labels))
            continue;
        snprintf(gname, sizeof(gname), "%s/%s", r->meta.ns, r->meta.name);
        for (size_t k = 0; k < gw->servers.n; k++) {
            const struct res_gw_server *sv =
                &((const struct res_gw_server *)gw->servers.v)[k];
            int mode = server_mode(gname, sv);
            enum peer_authn_mode pa = PEER_AUTHN_UNSET;
            int l4,
                mesh_tls = mode >= 0 && sv->tls.mode == RES_GW_TLS_ISTIO_MUTUAL;

            /* A mesh-facing (ISTIO_MUTUAL) server follows the node's
             * PeerAuthentication: STRICT (and, with none, the server's
             * own meaning) takes mTLS only, PERMISSIVE plaintext too,
             * DISABLE plaintext only. */
            if (mesh_tls && mode != GW_MODE_HBONE) {
                pa = peer_authn_mode(set, bs->node.ns, &bs->node.labels,
                                     ISTIO_ROOT_NAMESPACE,
                                     (uint32_t)sv->port.number);
                if (pa == PEER_AUTHN_DISABLE) {
                    mode = mode == GW_MODE_HTTPS ? GW_MODE_HTTP : GW_MODE_TCP;
                    mesh_tls = 0;
                }
            }
            l4 = mode == GW_MODE_TCP || mode == GW_MODE_PASSTHROUGH ||
                 mode == GW_MODE_TLS_TCP || mode == GW_MODE_AUTO_PASSTHROUGH ||
                 mode == GW_MODE_HBONE;
            int secure = mode != GW_MODE_HTTP && mode != GW_MODE_TCP;
            struct addr a;
            const char *why;
            char astr[128];
            struct gw_listener *g = NULL;
            struct gw_server *srv;

            if (mode < 0)
                continue;
            /* As istiod: a server port that is a port of the gateway's
             * own Service listens on that port's targetPort (80 ->
             * 8080); routes still match the server port. */
            snprintf(astr, sizeof(astr), "%s:%" PRId64,
                     sv->bind && sv->bind[0] ? sv->bind : "0.0.0.0",
                     res_k8s_gateway_port(set, bs->node.ns, &bs->node.labels,
                                          bs->node.service, sv->port.number,
                                          NULL));
            if (addr_parse(&a, astr, strlen(astr), 0, &why) < 0) {
                err_set(err, "Gateway %s: bind '%s': %s", gname, astr, why);
                goto fail;
            }
            for (size_t j = 0; j < out->n; j++)
                if (addr_equal(&out->v[j].address, &a))
                    g = &out->v[j];
            if (g == NULL) {
                struct gw_listener *nv =
                    realloc(out->v, (out->n + 1) * sizeof(*nv));
                if (nv == NULL)
                    goto oom;
                out->v = nv;
                g = &out->v[out->n++];
                memset(g, 0, sizeof(*g));
                g->address = a;
                g->port = (uint32_t)sv->port.number;
                g->l4 = l4;
                g->secure = secure;
                g->hbone = mode == GW_MODE_HBONE;
                snprintf(g->name, sizeof(g->name), "gateway-%" PRId64,
                         sv->port.number);
                if (sv->bind && sv->bind[0]) {
                    char *p;
                    snprintf(g->name, sizeof(g->name), "gateway-%s-%" PRId64,
                             sv->bind, sv->port.number);
                    /* Keep to the listener-name alphabet. */
                    for (p = g->name; *p; p++)
                        if (*p == ':' || *p == '[' || *p == ']')
                            *p = '_';
                }
            } else if (g->hbone != (mode == GW_MODE_HBONE)) {
                /* An HBONE port speaks HTTP/2 CONNECT after a handshake
                 * without SNI: nothing would tell another server's
                 * connections apart. */
                err_set(err,
                        "Gateway %s: port %" PRId64 ": an HBONE server "
                        "cannot share its port with servers of another "
                        "protocol",
                        gname, sv->port.number);
                goto fail;
            } else if (g->l4 != l4 && !(g->secure && secure)) {
                /* HTTP and TCP servers share a port only over TLS, where
                 * the ClientHello's SNI picks the server; plaintext has
                 * nothing to tell them apart, and Istio skips the later
                 * server too. */
                log_warn("Gateway %s: port %" PRId64 ": a %s server cannot "
                         "share the port with %s servers (in plaintext no "
                         "SNI tells their connections apart; Istio skips "
                         "it too); skipped",
                         gname, sv->port.number, kind_name(l4, secure),
                         g->shared ? "HTTPS and TLS"
                                   : kind_name(g->l4, g->secure));
                continue;
            } else if (g->l4 != l4) {
                /* HTTPS beside TLS servers: one L4 listener whose SNI
                 * table hands the HTTPS servers' names to an HTTP proxy,
                 * as Envoy's filter chains do on one listener. */
                g->l4 = 1;
                g->shared = 1;
            } else if (g->secure != secure) {
                err_set(err,
                        "Gateway %s: port %" PRId64 " mixes TLS and "
                        "plaintext servers",
                        gname, sv->port.number);
                goto fail;
            }
            {
                struct gw_server *ns =
                    realloc(g->servers, (g->nservers + 1) * sizeof(*ns));
                if (ns == NULL)
                    goto oom;
                g->servers = ns;
                srv = &g->servers[g->nservers++];
                memset(srv, 0, sizeof(*srv));
                srv->mode = mode;
                srv->gateway = strdup(gname);
                if (srv->gateway == NULL)
                    goto oom;
                for (size_t h = 0; h < sv->hosts.n; h++)
                    if (push_str(&srv->hosts, &srv->nhosts, sv->hosts.v[h]) < 0)
                        goto oom;
            }
            if (sv->tls.https_redirect)
                g->https_redirect = 1;
            srv->tls.mode = sv->tls.mode;
            if (mode == GW_MODE_HTTPS || mode == GW_MODE_TLS_TCP ||
                mode == GW_MODE_HBONE) {
                g->tls = 1;
                /* As istiod, a credentialName's Secret is looked for
                 * in the namespace of the gateway workload (this
                 * node), not the Gateway's. */
                if (server_tls(bs, identity, set, bs->node.ns, gname, sv,
                               &srv->tls, err) < 0)
                    goto fail;
            }
            /* Plaintext beside mTLS needs a peek at the first byte, which
             * the HTTP listener does. */
            if (mesh_tls && pa == PEER_AUTHN_PERMISSIVE &&
                mode == GW_MODE_HTTPS)
                g->permissive = 1;
        }
    }
    /* An HTTP listener's certificates, in server order, each with its
     * server's client-certificate settings. */
    for (size_t i = 0; i < out->n; i++) {
        struct gw_listener *g = &out->v[i];
        if ((g->l4 && !g->shared) || !g->tls)
            continue;
        g->certs = calloc(2 * g->nservers, sizeof(*g->certs));
        g->cert_tls = calloc(g->nservers, sizeof(*g->cert_tls));
        g->cert_server = calloc(g->nservers, sizeof(*g->cert_server));
        if (g->certs == NULL || g->cert_tls == NULL || g->cert_server == NULL)
            goto oom;
        for (size_t k = 0; k < g->nservers; k++) {
            const struct gw_server *sv = &g->servers[k];
            if (sv->mode != GW_MODE_HTTPS)
                continue;
            g->certs[2 * g->ncerts] = xstrdup(sv->tls.cert);
            g->certs[2 * g->ncerts + 1] = xstrdup(sv->tls.key);
            g->cert_tls[g->ncerts] = &sv->tls;
            g->cert_server[g->ncerts] = sv;
            g->ncerts++;
            if (g->certs[2 * g->ncerts - 2] == NULL ||
                g->certs[2 * g->ncerts - 1] == NULL)
                goto oom;
        }
    }
    for (size_t i = 0; i < out->n; i++) {
        if (listener_identity(&out->v[i]) < 0)
            goto oom;
    }
    return 0;
oom:
    if (*err == NULL)
        err_set(err, "out of memory");
fail:
    gw_set_dispose(out);
    return -1;
}
