/*
 * Workload credentials: build, store, load, and publish rotations.
 */
#include "config.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/mem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "control/ca/fileset.h"
#include "control/ca/identity.h"
#include "control/ca/pki.h"
#include "core/buf.h"
#include "core/err.h"

struct ca_cred *ca_cred_new(X509 *leaf, STACK_OF(X509) * chain, EVP_PKEY *key,
                            char **err)
{
    struct ca_cred *c = calloc(1, sizeof(*c));

    *err = NULL;
    if (c == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    c->refs = 1;
    c->leaf = leaf;
    c->chain = chain ? chain : sk_X509_new_null();
    c->key = key;
    leaf = NULL;
    chain = NULL;
    key = NULL;
    if (c->leaf == NULL || c->key == NULL || c->chain == NULL) {
        err_set(err, "incomplete credential");
        goto fail;
    }
    if (!X509_check_private_key(c->leaf, c->key)) {
        ERR_clear_error();
        err_set(err, "the private key does not match the certificate");
        goto fail;
    }
    c->spiffe_id = pki_spiffe_id(c->leaf);
    if (c->spiffe_id == NULL) {
        err_set(err, "the certificate has no spiffe:// URI SAN");
        goto fail;
    }
    c->not_before = pki_time(X509_get0_notBefore(c->leaf));
    c->not_after = pki_time(X509_get0_notAfter(c->leaf));
    return c;
fail:
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
    ca_cred_unref(c);
    return NULL;
}

struct ca_cred *ca_cred_from_pem(const char *chain, size_t chain_len,
                                 const char *key, size_t key_len, char **err)
{
    STACK_OF(X509) * sk;
    EVP_PKEY *k;
    X509 *leaf;

    *err = NULL;
    sk = pki_certs_parse(chain, chain_len, "certificate chain", err);
    if (sk == NULL)
        return NULL;
    k = pki_key_parse(key, key_len, "private key", err);
    if (k == NULL) {
        sk_X509_pop_free(sk, X509_free);
        return NULL;
    }
    leaf = sk_X509_shift(sk);
    return ca_cred_new(leaf, sk, k, err);
}

struct ca_cred *ca_cred_ref(struct ca_cred *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

void ca_cred_unref(struct ca_cred *c)
{
    if (c == NULL || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    X509_free(c->leaf);
    sk_X509_pop_free(c->chain, X509_free);
    EVP_PKEY_free(c->key);
    free(c->spiffe_id);
    free(c);
}

X509 *ca_cred_root(const struct ca_cred *c)
{
    size_t n = sk_X509_num(c->chain);

    return n ? sk_X509_value(c->chain, n - 1) : NULL;
}

int ca_cred_store(const struct ca_cred *c, const char *dir, char **err)
{
    struct buf key, chain, root;
    int rc = -1;

    *err = NULL;
    buf_init(&key, PKI_MAX_FILE);
    buf_init(&chain, PKI_MAX_FILE);
    buf_init(&root, PKI_MAX_FILE);
    if (pki_mkdirs(dir, err) < 0)
        goto done;
    if (pki_key_pem(c->key, &key) < 0 || pki_cert_pem(c->leaf, &chain) < 0)
        goto oom;
    for (size_t i = 0; i < sk_X509_num(c->chain); i++)
        if (pki_cert_pem(sk_X509_value(c->chain, i), &chain) < 0)
            goto oom;
    if (ca_cred_root(c) != NULL && pki_cert_pem(ca_cred_root(c), &root) < 0)
        goto oom;
    {
        /* One set: a crash never leaves a key beside another's chain. */
        const struct fileset_file files[] = {
            {"key.pem", buf_ptr(&key), buf_len(&key), 0600},
            {"cert-chain.pem", buf_ptr(&chain), buf_len(&chain), 0600},
            {"root-cert.pem", buf_ptr(&root), buf_len(&root), 0600},
        };
        if (fileset_write(dir, files, 3, err) < 0)
            goto done;
    }
    rc = 0;
    goto done;
oom:
    err_set(err, "out of memory");
done:
    if (buf_len(&key) > 0)
        OPENSSL_cleanse((void *)buf_ptr(&key), buf_len(&key));
    buf_dispose(&key);
    buf_dispose(&chain);
    buf_dispose(&root);
    return rc;
}

struct ca_cred *ca_cred_load(const char *dir, char **err)
{
    char *kp = NULL, *cp = NULL, *key = NULL, *chain = NULL;
    size_t kn = 0, cn = 0;
    struct ca_cred *c = NULL;

    *err = NULL;
    if (asprintf(&kp, "%s/key.pem", dir) < 0 ||
        asprintf(&cp, "%s/cert-chain.pem", dir) < 0) {
        err_set(err, "out of memory");
        goto done;
    }
    /* An interrupted store is finished or undone before anything is read. */
    if (fileset_recover(dir, err) < 0)
        goto done;
    chain = pki_read_file(cp, &cn, err);
    if (chain == NULL)
        goto done;
    key = pki_read_file(kp, &kn, err);
    if (key == NULL)
        goto done;
    c = ca_cred_from_pem(chain, cn, key, kn, err);
    if (c == NULL) {
        err_set(err, "bad credential");
        err_prefix(err, "%s: ", dir);
    }
done:
    if (key != NULL)
        OPENSSL_cleanse(key, kn);
    free(key);
    free(chain);
    free(kp);
    free(cp);
    return c;
}

int ca_cred_use(const struct ca_cred *c, SSL_CTX *ctx)
{
    if (!SSL_CTX_use_certificate(ctx, c->leaf) ||
        !SSL_CTX_use_PrivateKey(ctx, c->key))
        return -1;
    SSL_CTX_clear_chain_certs(ctx);
    for (size_t i = 0; i < sk_X509_num(c->chain); i++)
        if (!SSL_CTX_add1_chain_cert(ctx, sk_X509_value(c->chain, i)))
            return -1;
    return 0;
}

int64_t ca_cred_renew_at(const struct ca_cred *c)
{
    int64_t life = c->not_after - c->not_before;
    uint32_t r;

    if (life <= 0)
        return c->not_before;
    RAND_bytes((uint8_t *)&r, sizeof(r));
    /* Milliseconds would be finer, but a second is the certificate's own
     * resolution. */
    return c->not_before + life / 2 - (int64_t)(r % (uint32_t)(life / 10 + 1));
}

int64_t ca_cred_renew_in_ms(const struct ca_cred *c, int64_t now_ms)
{
    int64_t d = ca_cred_renew_at(c) * 1000 - now_ms;

    return d > 0 ? d : 0;
}

void ca_identity_init(struct ca_identity *h)
{
    memset(h, 0, sizeof(*h));
    pthread_mutex_init(&h->lock, NULL);
}

void ca_identity_dispose(struct ca_identity *h)
{
    ca_cred_unref(h->cur);
    h->cur = NULL;
    pthread_mutex_destroy(&h->lock);
}

void ca_identity_publish(struct ca_identity *h, struct ca_cred *cred)
{
    struct ca_cred *old;

    ca_cred_ref(cred);
    pthread_mutex_lock(&h->lock);
    old = h->cur;
    h->cur = cred;
    __atomic_store_n(&h->gen, h->gen + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&h->lock);
    ca_cred_unref(old);
    for (size_t i = 0; i < h->nwatch; i++)
        h->watch[i].fn(h->watch[i].arg, cred);
}

struct ca_cred *ca_identity_get(struct ca_identity *h, unsigned *gen)
{
    struct ca_cred *c = NULL;

    if (__atomic_load_n(&h->gen, __ATOMIC_ACQUIRE) == *gen)
        return NULL;
    pthread_mutex_lock(&h->lock);
    if (h->cur != NULL)
        c = ca_cred_ref(h->cur);
    *gen = h->gen;
    pthread_mutex_unlock(&h->lock);
    return c;
}

struct ca_cred *ca_identity_current(struct ca_identity *h)
{
    struct ca_cred *c = NULL;

    pthread_mutex_lock(&h->lock);
    if (h->cur != NULL)
        c = ca_cred_ref(h->cur);
    pthread_mutex_unlock(&h->lock);
    return c;
}

int ca_identity_ssl(SSL *ssl, void *arg)
{
    struct ca_cred *c = ca_identity_current(arg);
    int ok;

    if (c == NULL)
        return 0; /* no mesh certificate yet: the handshake fails */
    ok = SSL_use_certificate(ssl, c->leaf) && SSL_use_PrivateKey(ssl, c->key) &&
         SSL_set1_chain(ssl, c->chain);
    ca_cred_unref(c);
    return ok ? 1 : 0;
}

int ca_identity_watch(struct ca_identity *h, ca_identity_cb fn, void *arg)
{
    if (h->nwatch == CA_IDENTITY_MAX_WATCH)
        return -1;
    h->watch[h->nwatch].fn = fn;
    h->watch[h->nwatch].arg = arg;
    h->nwatch++;
    return 0;
}

void ca_identity_unwatch(struct ca_identity *h, ca_identity_cb fn, void *arg)
{
    for (size_t i = 0; i < h->nwatch; i++)
        if (h->watch[i].fn == fn && h->watch[i].arg == arg) {
            memmove(&h->watch[i], &h->watch[i + 1],
                    (h->nwatch - i - 1) * sizeof(h->watch[0]));
            h->nwatch--;
            return;
        }
}
