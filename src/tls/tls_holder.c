/*
 * Certificate hot reload: the main thread stats the files every few
 * seconds and, when one changed, builds a new tls_server and publishes it.
 * Handshakes in flight finish on the context they started with; a bad new
 * file is reported and the old context stays. A certificate with a
 * provider (tls_server_cert.cred) has no files: it changes per handshake,
 * with no new tls_server.
 */
#include "config.h"

#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/err.h"
#include "tls/tls.h"

static void free_strs(const char *const *v, size_t n)
{
    for (size_t i = 0; v != NULL && i < n; i++)
        free((char *)v[i]);
    free((void *)v);
}

static void conf_free(struct tls_server_conf *c)
{
    for (size_t i = 0; i < c->ncerts; i++) {
        free((char *)c->certs[i].cert_path);
        free((char *)c->certs[i].key_path);
        free((char *)c->certs[i].ca_path);
        free((char *)c->certs[i].crl_path);
        X509_free(c->certs[i].ca_cert);
        sk_X509_pop_free((STACK_OF(X509) *)c->certs[i].ca_extra, X509_free);
        free_strs(c->certs[i].sans, c->certs[i].nsans);
        free_strs(c->certs[i].spki, c->certs[i].nspki);
        free_strs(c->certs[i].hashes, c->certs[i].nhashes);
        free_strs(c->certs[i].hosts, c->certs[i].nhosts);
    }
    free((void *)c->certs);
    for (size_t i = 0; i < c->nciphers; i++)
        free((char *)c->ciphers[i]);
    free((void *)c->ciphers);
    for (size_t i = 0; i < c->nalpn; i++)
        free((char *)c->alpn[i]);
    free((void *)c->alpn);
}

static char **dup_strs(const char *const *v, size_t n)
{
    char **out = calloc(n ? n : 1, sizeof(*out));

    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        out[i] = strdup(v[i]);
    return out;
}

static int conf_copy(struct tls_server_conf *dst,
                     const struct tls_server_conf *src)
{
    struct tls_server_cert *certs =
        calloc(src->ncerts ? src->ncerts : 1, sizeof(*certs));

    *dst = *src;
    dst->certs = certs;
    dst->ciphers = (const char *const *)dup_strs(src->ciphers, src->nciphers);
    dst->alpn = (const char *const *)dup_strs(src->alpn, src->nalpn);
    if (certs == NULL || dst->ciphers == NULL || dst->alpn == NULL)
        return -1;
    for (size_t i = 0; i < src->ncerts; i++) {
        const struct tls_server_cert *sc = &src->certs[i];
        certs[i] = *sc;
        certs[i].cert_path = sc->cert_path ? strdup(sc->cert_path) : NULL;
        certs[i].key_path = sc->key_path ? strdup(sc->key_path) : NULL;
        if (sc->ca_cert != NULL)
            X509_up_ref(sc->ca_cert);
        certs[i].ca_extra =
            sc->ca_extra != NULL
                ? X509_chain_up_ref((STACK_OF(X509) *)sc->ca_extra)
                : NULL;
        certs[i].ca_path = sc->ca_path ? strdup(sc->ca_path) : NULL;
        certs[i].crl_path = sc->crl_path ? strdup(sc->crl_path) : NULL;
        certs[i].sans = (const char *const *)dup_strs(sc->sans, sc->nsans);
        certs[i].spki = (const char *const *)dup_strs(sc->spki, sc->nspki);
        certs[i].hashes =
            (const char *const *)dup_strs(sc->hashes, sc->nhashes);
        certs[i].hosts = (const char *const *)dup_strs(sc->hosts, sc->nhosts);
        if (certs[i].sans == NULL || certs[i].spki == NULL ||
            certs[i].hashes == NULL || certs[i].hosts == NULL ||
            (sc->ca_extra != NULL && certs[i].ca_extra == NULL))
            return -1;
    }
    if (src->nciphers == 0) {
        free((void *)dst->ciphers);
        dst->ciphers = NULL;
    }
    if (src->nalpn == 0) {
        free((void *)dst->alpn);
        dst->alpn = NULL;
    }
    return 0;
}

/* The files of each certificate, in this order; a missing one (or an
 * optional CRL that is absent) stats as zeros, so its appearing is a
 * change too. */
#define FILES_PER_CERT 4

static void snapshot(const struct tls_server_conf *c, struct stat *st)
{
    for (size_t i = 0; i < c->ncerts; i++) {
        const char *paths[FILES_PER_CERT] = {
            c->certs[i].cert_path, c->certs[i].key_path, c->certs[i].ca_path,
            c->certs[i].crl_path};
        for (size_t k = 0; k < FILES_PER_CERT; k++) {
            struct stat *s = &st[FILES_PER_CERT * i + k];
            if (paths[k] == NULL || stat(paths[k], s) < 0)
                memset(s, 0, sizeof(*s));
        }
    }
}

static int same(const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev &&
           a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

struct tls_holder *tls_holder_new(const struct tls_server_conf *conf,
                                  const char *desc, char **err)
{
    struct tls_holder *h = calloc(1, sizeof(*h));

    *err = NULL;
    if (h == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    h->refs = 1;
    pthread_mutex_init(&h->lock, NULL);
    h->desc = strdup(desc);
    h->st = calloc(FILES_PER_CERT * (conf->ncerts ? conf->ncerts : 1),
                   sizeof(*h->st));
    if (h->desc == NULL || h->st == NULL || conf_copy(&h->conf, conf) < 0) {
        err_set(err, "out of memory");
        tls_holder_unref(h);
        return NULL;
    }
    snapshot(&h->conf, h->st);
    h->cur = tls_server_new(&h->conf, err);
    if (h->cur == NULL) {
        tls_holder_unref(h);
        return NULL;
    }
    h->gen = 1;
    return h;
}

struct tls_holder *tls_holder_ref(struct tls_holder *h)
{
    __atomic_add_fetch(&h->refs, 1, __ATOMIC_RELAXED);
    return h;
}

void tls_holder_unref(struct tls_holder *h)
{
    if (h == NULL || __atomic_sub_fetch(&h->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    tls_server_free(h->cur);
    conf_free(&h->conf);
    free(h->st);
    free(h->desc);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

int tls_holder_check(struct tls_holder *h, char **err)
{
    size_t n = FILES_PER_CERT * h->conf.ncerts;
    struct stat *now = calloc(n ? n : 1, sizeof(*now));
    struct tls_server *ts, *old;
    int changed = 0;

    *err = NULL;
    if (now == NULL)
        return 0;
    snapshot(&h->conf, now);
    for (size_t i = 0; i < n; i++)
        if (!same(&now[i], &h->st[i]))
            changed = 1;
    if (!changed) {
        free(now);
        return 0;
    }
    /* Remember what we saw either way: a bad file is reported once, and a
     * later fix is picked up when it changes again. */
    memcpy(h->st, now, n * sizeof(*now));
    free(now);
    ts = tls_server_new(&h->conf, err);
    if (ts == NULL)
        return -1;
    pthread_mutex_lock(&h->lock);
    old = h->cur;
    h->cur = ts;
    __atomic_store_n(&h->gen, h->gen + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&h->lock);
    tls_server_free(old);
    return 1;
}

SSL_CTX *tls_holder_get(struct tls_holder *h, unsigned *gen)
{
    SSL_CTX *ctx;

    if (__atomic_load_n(&h->gen, __ATOMIC_ACQUIRE) == *gen)
        return NULL;
    pthread_mutex_lock(&h->lock);
    ctx = tls_server_ctx(h->cur);
    SSL_CTX_up_ref(ctx);
    *gen = h->gen;
    pthread_mutex_unlock(&h->lock);
    return ctx;
}
