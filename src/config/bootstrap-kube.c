/*
 * config.kubernetes: the Kubernetes API as a source of resources. The key
 * table, its cross-key rules, and where the API server is and how strait
 * authenticates to it (in-cluster, or a kubeconfig's current-context).
 * Kept apart from bootstrap.c, as the HTTP settings are.
 */
#include "config.h"

#include <openssl/base64.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/bootstrap.h"
#include "config/yaml.h"
#include "core/buf.h"
#include "core/err.h"

#define OFF(type, field) offsetof(type, field)
#define END                                                                    \
    {                                                                          \
        NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL                   \
    }

/* Istio's kinds first: a VirtualService is read with its Gateway. */
const char *const bootstrap_kube_kinds[] = {
    "Gateway",
    "VirtualService",
    "DestinationRule",
    "ServiceEntry",
    "WorkloadEntry",
    "AuthorizationPolicy",
    "PeerAuthentication",
    "RequestAuthentication",
    "LuaPolicy",
    "MeshLink",
    "Service",
    "EndpointSlice",
    "Secret",
    "Namespace",
    "Node",
    "ReferenceGrant",
    "Pod",
    "GatewayClass",
    "Gateway.gateway.networking.k8s.io",
    "HTTPRoute",
    NULL,
};

static const struct conf_key kube_keys[] = {
    {"enabled", CONF_BOOL, OFF(struct bootstrap_kube, enabled), 0, 0, "false",
     "read resources from the Kubernetes API; restart to change", NULL, NULL,
     NULL, NULL},
    {"server", CONF_STR, OFF(struct bootstrap_kube, server), 0, 0, "",
     "the API server, https://HOST:PORT; \"\": the kubeconfig's, else "
     "in-cluster (https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)",
     NULL, NULL, NULL, NULL},
    {"kubeconfig", CONF_STR, OFF(struct bootstrap_kube, kubeconfig), 0, 0, "",
     "a kubeconfig file; its current-context gives the server, its CA "
     "(certificate-authority or -data) and the credential (token, "
     "tokenFile, or client-certificate and client-key files); \"\": "
     "in-cluster",
     NULL, NULL, NULL, NULL},
    {"tokenFile", CONF_STR, OFF(struct bootstrap_kube, token_file), 0, 0,
     "/var/run/secrets/kubernetes.io/serviceaccount/token",
     "in-cluster: the service-account token, read again before every "
     "request (the kubelet rotates it)",
     NULL, NULL, NULL, NULL},
    {"caFile", CONF_STR, OFF(struct bootstrap_kube, ca_file), 0, 0,
     "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
     "in-cluster (or with server): the CA the API server is verified with",
     NULL, NULL, NULL, NULL},
    {"namespaces", CONF_STR_LIST, OFF(struct bootstrap_kube, namespaces), 0, 64,
     NULL,
     "namespaces watched (one watch per kind and namespace); none: "
     "cluster-wide (one watch per kind)",
     NULL, NULL, NULL, NULL},
    {"kinds", CONF_STR_LIST, OFF(struct bootstrap_kube, kinds), 0, 32, NULL,
     "kinds watched (Gateway, VirtualService, DestinationRule, "
     "ServiceEntry, WorkloadEntry, AuthorizationPolicy, PeerAuthentication, "
     "RequestAuthentication, LuaPolicy, MeshLink, Service, EndpointSlice, "
     "Secret, Namespace, Node, ReferenceGrant, Pod, GatewayClass, "
     "Gateway.gateway.networking.k8s.io, HTTPRoute); none: all of them",
     NULL, NULL, NULL, NULL},
    {"labelSelectors", CONF_STR_MAP,
     OFF(struct bootstrap_kube, label_selectors), 0, 32, NULL,
     "KIND: labelSelector of that kind's list and watch", NULL, NULL, NULL,
     NULL},
    {"fieldSelectors", CONF_STR_MAP,
     OFF(struct bootstrap_kube, field_selectors), 0, 32, NULL,
     "KIND: fieldSelector of that kind's list and watch; a Secret's is "
     "added to Istio's type!=helm.sh/release.v1,type!=kubernetes.io/"
     "service-account-token, which is always there; a Pod's to "
     "status.phase=Running, which is always there",
     NULL, NULL, NULL, NULL},
    {"minWatchTimeout", CONF_DURATION,
     OFF(struct bootstrap_kube, min_watch_timeout_ms), 1000, 3600 * 1000, "5m",
     "each watch asks timeoutSeconds drawn in [min, 2*min) (client-go's "
     "5-10 minutes), so watches do not all end together",
     NULL, NULL, NULL, NULL},
    {"requestTimeout", CONF_DURATION,
     OFF(struct bootstrap_kube, request_timeout_ms), 100, 600000, "30s",
     "a list page, connect to last byte; a watch, connect to its answer's "
     "head",
     NULL, NULL, NULL, NULL},
    {"backoff", CONF_DURATION, OFF(struct bootstrap_kube, backoff_ms), 10,
     60000, "800ms",
     "first retry delay after a failed list or watch; doubled per failure, "
     "each delay drawn in [d, 2d) (jitter 1.0) and at most backoffMax",
     NULL, NULL, NULL, NULL},
    {"backoffMax", CONF_DURATION, OFF(struct bootstrap_kube, backoff_max_ms),
     10, 3600 * 1000, "30s", "the cap of the retry delay", NULL, NULL, NULL,
     NULL},
    {"backoffReset", CONF_DURATION,
     OFF(struct bootstrap_kube, backoff_reset_ms), 10, 3600 * 1000, "2m",
     "a watch healthy this long starts the next failure's delay at backoff "
     "again",
     NULL, NULL, NULL, NULL},
    {"pageSize", CONF_INT, OFF(struct bootstrap_kube, page_size), 1, 100000,
     "500", "objects per list page (?limit=; continue tokens for the rest)",
     NULL, NULL, NULL, NULL},
    {"maxResponseBytes", CONF_SIZE,
     OFF(struct bootstrap_kube, max_response_bytes), 4096, INT64_C(1) << 32,
     "64MiB",
     "the largest list page or watch event taken; a larger watch event "
     "is skipped and its object (named from its first 4 KiB) left out "
     "(logged, counted, /config_dump leftOut) while the watch goes on; a "
     "larger list page is an error (retried with backoff) and the objects "
     "held stay",
     NULL, NULL, NULL, NULL},
    {"maxObjects", CONF_INT, OFF(struct bootstrap_kube, max_objects), 1,
     10000000, "200000",
     "objects held, all kinds together; one more is left out and reported",
     NULL, NULL, NULL, NULL},
    END,
};
const struct conf_section bootstrap_kube_section = {
    kube_keys, 0, OFF(struct bootstrap_kube, mark)};

static int known_kind(const char *k)
{
    for (size_t i = 0; bootstrap_kube_kinds[i] != NULL; i++)
        if (strcmp(k, bootstrap_kube_kinds[i]) == 0)
            return 1;
    return 0;
}

int bootstrap_kube_validate(const struct bootstrap *bs, const char *file,
                            struct buf *errs)
{
    const struct bootstrap_kube *k = &bs->config.kubernetes;
    int nerr = 0;
    char path[128];

    if (!k->enabled)
        return 0;
    if (bs->config.etcd.endpoints.n > 0) {
        conf_error(errs, file, k->mark.line, k->mark.col, "config.kubernetes",
                   "config.etcd and config.kubernetes cannot both be "
                   "sources; choose one");
        nerr++;
    }
    if (k->server[0] != '\0' && strncmp(k->server, "https://", 8) != 0 &&
        strncmp(k->server, "http://", 7) != 0) {
        conf_error(errs, file, k->mark.line, k->mark.col,
                   "config.kubernetes.server",
                   "'%s': expected https://HOST:PORT", k->server);
        nerr++;
    }
    for (size_t i = 0; i < k->kinds.n; i++) {
        if (known_kind(k->kinds.v[i]))
            continue;
        snprintf(path, sizeof(path), "config.kubernetes.kinds[%zu]", i);
        conf_error(errs, file, k->mark.line, k->mark.col, path,
                   "'%s' is not a kind strait reads", k->kinds.v[i]);
        nerr++;
    }
    for (int f = 0; f < 2; f++) {
        const struct conf_strmap *m =
            f == 0 ? &k->label_selectors : &k->field_selectors;
        for (size_t i = 0; i < m->n; i++) {
            if (known_kind(m->v[i].key))
                continue;
            snprintf(path, sizeof(path), "config.kubernetes.%s.%s",
                     f == 0 ? "labelSelectors" : "fieldSelectors", m->v[i].key);
            conf_error(errs, file, k->mark.line, k->mark.col, path,
                       "'%s' is not a kind strait reads", m->v[i].key);
            nerr++;
        }
    }
    for (size_t i = 0; i < k->namespaces.n; i++) {
        const char *ns = k->namespaces.v[i];
        if (ns[0] != '\0' &&
            strspn(ns, "abcdefghijklmnopqrstuvwxyz0123456789-") == strlen(ns))
            continue;
        snprintf(path, sizeof(path), "config.kubernetes.namespaces[%zu]", i);
        conf_error(errs, file, k->mark.line, k->mark.col, path,
                   "'%s' is not a namespace name", ns);
        nerr++;
    }
    /* A kubeconfig is read now, so `strait check` says what it lacks;
     * in-cluster settings depend on the pod, and are read at start. */
    if (k->kubeconfig[0] != '\0') {
        struct kube_target t;
        char *err = NULL;
        if (kube_target_resolve(k, &t, &err) < 0) {
            conf_error(errs, file, k->mark.line, k->mark.col,
                       "config.kubernetes.kubeconfig", "%s",
                       err ? err : "out of memory");
            free(err);
            nerr++;
        } else {
            kube_target_dispose(&t);
        }
    }
    if (k->backoff_max_ms < k->backoff_ms) {
        conf_error(errs, file, k->mark.line, k->mark.col,
                   "config.kubernetes.backoffMax", "shorter than backoff");
        nerr++;
    }
    return nerr;
}

static int strs_eq(const struct conf_strs *a, const struct conf_strs *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i], b->v[i]) != 0)
            return 0;
    return 1;
}

static int map_eq(const struct conf_strmap *a, const struct conf_strmap *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i].key, b->v[i].key) != 0 ||
            strcmp(a->v[i].val, b->v[i].val) != 0)
            return 0;
    return 1;
}

int bootstrap_kube_equal(const struct bootstrap_kube *a,
                         const struct bootstrap_kube *b)
{
    return a->enabled == b->enabled && strcmp(a->server, b->server) == 0 &&
           strcmp(a->kubeconfig, b->kubeconfig) == 0 &&
           strcmp(a->token_file, b->token_file) == 0 &&
           strcmp(a->ca_file, b->ca_file) == 0 &&
           strs_eq(&a->namespaces, &b->namespaces) &&
           strs_eq(&a->kinds, &b->kinds) &&
           map_eq(&a->label_selectors, &b->label_selectors) &&
           map_eq(&a->field_selectors, &b->field_selectors) &&
           a->min_watch_timeout_ms == b->min_watch_timeout_ms &&
           a->request_timeout_ms == b->request_timeout_ms &&
           a->backoff_ms == b->backoff_ms &&
           a->backoff_max_ms == b->backoff_max_ms &&
           a->backoff_reset_ms == b->backoff_reset_ms &&
           a->page_size == b->page_size &&
           a->max_response_bytes == b->max_response_bytes &&
           a->max_objects == b->max_objects;
}

/* --- where the API server is ------------------------------------------ */

void kube_target_dispose(struct kube_target *t)
{
    free(t->server);
    free(t->host);
    free(t->ca_file);
    free(t->ca_pem);
    free(t->token);
    free(t->token_file);
    free(t->cert_file);
    free(t->key_file);
    free(t->origin);
    memset(t, 0, sizeof(*t));
}

/* split_server() reads https://HOST[:PORT] into t. */
static int split_server(struct kube_target *t, const char *url, char **err)
{
    const char *h, *colon, *end;
    size_t hn;
    long port;

    if (strncmp(url, "https://", 8) == 0) {
        t->tls = 1;
        h = url + 8;
    } else if (strncmp(url, "http://", 7) == 0) {
        t->tls = 0;
        h = url + 7;
    } else {
        return err_set(err, "server '%s': expected https://HOST:PORT", url);
    }
    end = h + strcspn(h, "/");
    if (*end == '/' && end[1] != '\0')
        return err_set(err,
                       "server '%s': a path after HOST:PORT is not "
                       "supported",
                       url);
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(end - h));
        if (rb == NULL)
            return err_set(err, "server '%s': bad IPv6 address", url);
        t->host = strndup(h + 1, (size_t)(rb - h - 1));
        colon = rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = memchr(h, ':', (size_t)(end - h));
        hn = colon ? (size_t)(colon - h) : (size_t)(end - h);
        t->host = strndup(h, hn);
    }
    if (t->host == NULL || t->host[0] == '\0')
        return err_set(err, "server '%s': bad host", url);
    port = t->tls ? 443 : 80;
    if (colon != NULL) {
        char *e = NULL;
        port = strtol(colon + 1, &e, 10);
        if (e != end || port < 1 || port > 65535)
            return err_set(err, "server '%s': bad port", url);
    }
    t->port = (int)port;
    t->server = strdup(url);
    return t->server == NULL ? err_set(err, "out of memory") : 0;
}

static const struct ynode *named(const struct ynode *list, const char *name,
                                 const char *what, const char *file, char **err)
{
    if (list == NULL || list->type != YNODE_SEQ) {
        err_set(err, "%s: no %s list", file, what);
        return NULL;
    }
    for (size_t i = 0; i < list->n; i++) {
        const struct ynode *it = list->items[i];
        const struct ynode *n = ymap_get(it, "name");
        if (n != NULL && n->type == YNODE_SCALAR && strcmp(n->str, name) == 0)
            return it;
    }
    err_set(err, "%s:%d:%d: no %s named '%s'", file, list->line, list->col,
            what, name);
    return NULL;
}

static const char *scalar(const struct ynode *map, const char *key)
{
    const struct ynode *n = ymap_get(map, key);

    return n != NULL && n->type == YNODE_SCALAR && !yscalar_is_null(n) &&
                   n->str[0] != '\0'
               ? n->str
               : NULL;
}

/* A relative path in a kubeconfig is relative to the file's directory. */
static char *rel_path(const char *file, const char *p)
{
    const char *slash = strrchr(file, '/');
    char *out = NULL;

    if (p[0] == '/' || slash == NULL)
        return strdup(p);
    if (asprintf(&out, "%.*s/%s", (int)(slash - file), file, p) < 0)
        return NULL;
    return out;
}

static char *b64(const char *s, size_t *outn)
{
    size_t max = 0, n = strlen(s);
    uint8_t *out;

    if (!EVP_DecodedLength(&max, n) || (out = malloc(max + 1)) == NULL)
        return NULL;
    if (!EVP_DecodeBase64(out, outn, max, (const uint8_t *)s, n)) {
        free(out);
        return NULL;
    }
    out[*outn] = '\0';
    return (char *)out;
}

static int from_kubeconfig(struct kube_target *t, const char *file, char **err)
{
    struct stat sb;
    FILE *f = stat(file, &sb) == 0 && S_ISREG(sb.st_mode) &&
                      sb.st_size <= 4 * 1024 * 1024
                  ? fopen(file, "rb")
                  : NULL;
    struct buf data;
    struct ydoc *docs = NULL;
    size_t ndocs = 0, n;
    char chunk[4096];
    const struct ynode *root, *ctx, *cl, *user;
    const char *cur, *cname, *uname, *v;
    static const char *const refused[] = {
        "exec",
        "auth-provider",
        "username",
        "password",
        "client-certificate-data",
        "client-key-data",
        "as",
        "impersonate",
        NULL,
    };
    int rc = -1;

    buf_init(&data, 4 * 1024 * 1024);
    if (f == NULL) {
        buf_dispose(&data);
        return err_set(err,
                       "kubeconfig %s: not a readable regular file of "
                       "at most 4 MiB",
                       file);
    }
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        if (buf_append(&data, chunk, n) < 0) {
            fclose(f);
            err_set(err, "kubeconfig %s: larger than 4 MiB", file);
            goto out;
        }
    fclose(f);
    if (yaml_load(buf_len(&data) ? buf_ptr(&data) : "", buf_len(&data), file,
                  &docs, &ndocs, err) < 0)
        goto out;
    root = ndocs > 0 ? docs[0].root : NULL;
    cur = scalar(root, "current-context");
    if (cur == NULL) {
        err_set(err, "kubeconfig %s: no current-context", file);
        goto out;
    }
    ctx = named(ymap_get(root, "contexts"), cur, "context", file, err);
    if (ctx == NULL)
        goto out;
    ctx = ymap_get(ctx, "context");
    cname = scalar(ctx, "cluster");
    uname = scalar(ctx, "user");
    if (cname == NULL) {
        err_set(err, "kubeconfig %s: context '%s' names no cluster", file, cur);
        goto out;
    }
    cl = named(ymap_get(root, "clusters"), cname, "cluster", file, err);
    if (cl == NULL)
        goto out;
    cl = ymap_get(cl, "cluster");
    v = scalar(cl, "insecure-skip-tls-verify");
    if (v != NULL && strcmp(v, "true") == 0) {
        err_set(err,
                "kubeconfig %s: cluster '%s': insecure-skip-tls-verify "
                "is not supported (give certificate-authority)",
                file, cname);
        goto out;
    }
    if (scalar(cl, "proxy-url") != NULL || scalar(cl, "tls-server-name")) {
        err_set(err,
                "kubeconfig %s: cluster '%s': proxy-url and "
                "tls-server-name are not supported",
                file, cname);
        goto out;
    }
    if (t->server == NULL) {
        v = scalar(cl, "server");
        if (v == NULL) {
            err_set(err, "kubeconfig %s: cluster '%s' has no server", file,
                    cname);
            goto out;
        }
        if (split_server(t, v, err) < 0) {
            err_prefix(err, "kubeconfig %s: cluster '%s': ", file, cname);
            goto out;
        }
    }
    if ((v = scalar(cl, "certificate-authority-data")) != NULL) {
        size_t pn = 0;
        t->ca_pem = b64(v, &pn);
        if (t->ca_pem == NULL) {
            err_set(err,
                    "kubeconfig %s: cluster '%s': "
                    "certificate-authority-data is not base64",
                    file, cname);
            goto out;
        }
    } else if ((v = scalar(cl, "certificate-authority")) != NULL) {
        free(t->ca_file);
        t->ca_file = rel_path(file, v);
    }
    if (uname != NULL) {
        user = named(ymap_get(root, "users"), uname, "user", file, err);
        if (user == NULL)
            goto out;
        user = ymap_get(user, "user");
        for (size_t i = 0; refused[i] != NULL; i++)
            if (ymap_get(user, refused[i]) != NULL) {
                const struct ynode *r = ymap_get(user, refused[i]);
                err_set(err,
                        "%s:%d:%d: user '%s': %s is not supported "
                        "(use token, tokenFile, or client-certificate "
                        "and client-key files)",
                        file, r->line, r->col, uname, refused[i]);
                goto out;
            }
        if ((v = scalar(user, "token")) != NULL)
            t->token = strdup(v);
        if ((v = scalar(user, "tokenFile")) != NULL) {
            free(t->token_file);
            t->token_file = rel_path(file, v);
        } else {
            free(t->token_file);
            t->token_file = NULL;
        }
        if ((v = scalar(user, "client-certificate")) != NULL)
            t->cert_file = rel_path(file, v);
        if ((v = scalar(user, "client-key")) != NULL)
            t->key_file = rel_path(file, v);
        if ((t->cert_file == NULL) != (t->key_file == NULL)) {
            err_set(err,
                    "kubeconfig %s: user '%s': client-certificate and "
                    "client-key go together",
                    file, uname);
            goto out;
        }
    } else {
        free(t->token_file);
        t->token_file = NULL;
    }
    if (asprintf(&t->origin, "kubeconfig %s context %s", file, cur) < 0)
        t->origin = NULL;
    rc = 0;
out:
    if (docs != NULL)
        yaml_docs_free(docs, ndocs);
    buf_dispose(&data);
    return rc;
}

int kube_target_resolve(const struct bootstrap_kube *conf,
                        struct kube_target *t, char **err)
{
    memset(t, 0, sizeof(*t));
    if ((t->ca_file = strdup(conf->ca_file)) == NULL ||
        (conf->token_file[0] != '\0' &&
         (t->token_file = strdup(conf->token_file)) == NULL)) {
        err_set(err, "out of memory");
        goto fail;
    }
    if (conf->server[0] != '\0' && split_server(t, conf->server, err) < 0)
        goto fail;
    if (conf->kubeconfig[0] != '\0') {
        if (from_kubeconfig(t, conf->kubeconfig, err) < 0)
            goto fail;
    } else if (t->server == NULL) {
        const char *h = getenv("KUBERNETES_SERVICE_HOST");
        const char *p = getenv("KUBERNETES_SERVICE_PORT");
        char url[300];
        if (h == NULL || h[0] == '\0') {
            err_set(err, "not in a cluster (KUBERNETES_SERVICE_HOST is not "
                         "set): give config.kubernetes.server or "
                         "kubeconfig");
            goto fail;
        }
        snprintf(url, sizeof(url),
                 strchr(h, ':') ? "https://[%s]:%s" : "https://%s:%s", h,
                 p != NULL && p[0] != '\0' ? p : "443");
        if (split_server(t, url, err) < 0)
            goto fail;
        t->origin = strdup("in-cluster");
    }
    if (t->origin == NULL)
        t->origin = strdup("config.kubernetes.server");
    return 0;
fail:
    err_prefix(err, "config.kubernetes: ");
    kube_target_dispose(t);
    return -1;
}
