/*
 * The HBONE part of a cluster (compile_cluster_hbone(), istio.h): which
 * endpoints are reached through HBONE, with which identity, and the TLS
 * context of the tunnels to them.
 */
#include "config.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"
#include "compile/istio.h"
#include "config/bootstrap.h"
#include "core/log.h"
#include "tls/tls.h"
#include "upstream/cluster.h"

/*
 * HBONE endpoints: their flags and identities, and the client context
 * they are reached with: this node's mesh certificate (the current one at
 * each handshake), the roots ISTIO_MUTUAL trusts (the mesh's, the linked
 * sites'), ALPN h2, and the endpoints' SPIFFE IDs as the names the server
 * must carry (the exact one is checked per connection). For double HBONE
 * endpoints (another network's ambient east-west gateway) also the inner
 * context, which verifies the service's identities, the CONNECT
 * authority and this node's network. Without a mesh certificate the
 * cluster refuses sessions to them rather than connect in the clear. -1
 * when memory runs out.
 */
int compile_cluster_hbone(const struct compile_identity *identity,
                          struct cluster *c, const struct cluster_spec *sp)
{
    struct tls_client_conf tc;
    const char **sans;
    size_t nsans = 0, ndouble = 0;
    X509 *root = NULL;
    STACK_OF(X509) *extra = NULL;
    char *err = NULL;

    c->hbone = malloc(sp->nendpoints + 1);
    c->hbone_ids = calloc(sp->nendpoints + 1, sizeof(*c->hbone_ids));
    sans = calloc(sp->nendpoints + 1, sizeof(*sans));
    if (c->hbone == NULL || c->hbone_ids == NULL || sans == NULL) {
        free(sans);
        return -1;
    }
    for (size_t i = 0; i < sp->nendpoints; i++) {
        c->hbone[i] = sp->hbone[i];
        if (sp->hbone_ids[i] != NULL &&
            (c->hbone_ids[i] = strdup(sp->hbone_ids[i])) == NULL) {
            free(sans);
            return -1;
        }
        if (sp->hbone[i] && sp->hbone_ids[i] != NULL)
            sans[nsans++] = sp->hbone_ids[i];
        if (sp->hbone[i] == CLUSTER_HBONE_DOUBLE) {
            ndouble++;
            /* The outer tunnel is verified against the gateway's
             * identity, always known. */
            if (sp->hbone_ids[i] == NULL)
                c->hbone_error = 1;
        }
    }
    /* x-forwarded-network: this node's network, none without one. */
    if (ndouble > 0 && sp->host != NULL && sp->port > 0) {
        if (asprintf(&c->hbone_authority, "%s:%u", sp->host,
                     (unsigned)sp->port) < 0) {
            c->hbone_authority = NULL;
            free(sans);
            return -1;
        }
        c->hbone_network = strdup(sp->node_network ? sp->node_network : "");
        if (c->hbone_network == NULL) {
            free(sans);
            return -1;
        }
    } else if (ndouble > 0) {
        c->hbone_error = 1;
    }
    if (identity == NULL || !identity->current(identity->arg, &root)) {
        log_error("cluster %s: HBONE endpoints need this node's mesh "
                  "certificate (ca.enabled or ca.join); their sessions are "
                  "refused",
                  c->name);
        c->hbone_error = 1;
        free(sans);
        return 0;
    }
    memset(&tc, 0, sizeof(tc));
    tc.cred = identity->ssl;
    tc.cred_arg = identity->arg;
    if (compile_mesh_trust(identity, &tc, &root, &extra) < 0) {
        X509_free(root);
        free(sans);
        return -1;
    }
    tc.h2 = 1;
    tc.no_host_check = 1;
    tc.sans = sans;
    tc.nsans = nsans;
    c->hbone_tls = tls_client_ctx_build(&tc, &err);
    if (c->hbone_tls != NULL && ndouble > 0) {
        /* The inner TLS goes to the service: any of its identities (the
         * mesh's roots only, when it names none). */
        tc.sans = sp->sans != NULL ? (const char *const *)sp->sans->v : NULL;
        tc.nsans = sp->sans != NULL ? sp->sans->n : 0;
        c->hbone_inner_tls = tls_client_ctx_build(&tc, &err);
    }
    X509_free(root);
    sk_X509_free(extra);
    free(sans);
    if (c->hbone_tls == NULL || (ndouble > 0 && c->hbone_inner_tls == NULL)) {
        log_error("cluster %s: HBONE: TLS cannot be set up, sessions to "
                  "its HBONE endpoints are refused: %s",
                  c->name, err ? err : "unknown error");
        c->hbone_error = 1;
    }
    free(err);
    return 0;
}

/* The baggage this node sends on the HBONE tunnels it opens, in
 * ztunnel's keys (baggage.rs): its namespace and, from its labels, the
 * service (app) and version. */
char *compile_hbone_baggage(const struct bootstrap *bs)
{
    const char *app = NULL, *version = NULL;
    char *out;

    for (size_t i = 0; i < bs->node.labels.n; i++) {
        if (strcmp(bs->node.labels.v[i].key, "app") == 0)
            app = bs->node.labels.v[i].val;
        else if (strcmp(bs->node.labels.v[i].key, "version") == 0)
            version = bs->node.labels.v[i].val;
    }
    if (asprintf(&out, "k8s.namespace.name=%s%s%s%s%s",
                 bs->node.ns != NULL ? bs->node.ns : "",
                 app != NULL ? ",service.name=" : "", app != NULL ? app : "",
                 version != NULL ? ",service.version=" : "",
                 version != NULL ? version : "") < 0)
        return NULL;
    return out;
}
