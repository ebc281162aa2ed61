/*
 * The mesh's roots from istiod's root file, read again when it changes
 * (see mesh_roots.h).
 */
#include "config.h"

#include <libgen.h>
#include <openssl/mem.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/ca/mesh_roots.h"
#include "control/ca/pki.h"
#include "control/dirwatch.h"
#include "core/err.h"
#include "core/log.h"

struct mesh_roots {
    char *path;
    struct dirwatch *watch;
    STACK_OF(X509) * roots;
    char pin[2 * SHA256_DIGEST_LENGTH + 1];
    void (*on_change)(void *);
    void *arg;
};

/* The hex SHA-256 of the roots' DER forms, in order: what identifies the
 * set, whatever comments or line ends the file has. */
static int roots_pin(const STACK_OF(X509) * roots, char *out)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t md[SHA256_DIGEST_LENGTH];
    SHA256_CTX sha;

    SHA256_Init(&sha);
    for (size_t i = 0; i < sk_X509_num(roots); i++) {
        uint8_t *der = NULL;
        int n = i2d_X509(sk_X509_value(roots, i), &der);
        if (n <= 0)
            return -1;
        SHA256_Update(&sha, der, (size_t)n);
        OPENSSL_free(der);
    }
    SHA256_Final(md, &sha);
    for (size_t i = 0; i < sizeof(md); i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[2 * sizeof(md)] = '\0';
    return 0;
}

/* read_roots() reads m->path: 1 when the roots in effect changed, 0 when
 * they are the same, -1 with *err when the file does not load (the roots
 * in effect stay). */
static int read_roots(struct mesh_roots *m, char **err)
{
    char pin[sizeof(m->pin)];
    STACK_OF(X509) * roots;
    size_t n = 0;
    char *data = pki_read_file(m->path, &n, err);

    if (data == NULL)
        return -1;
    roots = pki_certs_parse(data, n, m->path, err);
    free(data);
    if (roots == NULL)
        return -1;
    if (roots_pin(roots, pin) < 0) {
        sk_X509_pop_free(roots, X509_free);
        return err_set(err, "%s: cannot encode its certificates", m->path);
    }
    if (m->roots != NULL && strcmp(pin, m->pin) == 0) {
        sk_X509_pop_free(roots, X509_free);
        return 0;
    }
    sk_X509_pop_free(m->roots, X509_free);
    m->roots = roots;
    memcpy(m->pin, pin, sizeof(pin));
    return 1;
}

static void on_dir_change(void *arg)
{
    struct mesh_roots *m = arg;
    char *err = NULL;
    int rc = read_roots(m, &err);

    if (rc < 0) {
        log_error("CA: the mesh roots in %s do not load, keeping the %d "
                  "root(s) in effect: %s",
                  m->path, (int)sk_X509_num(m->roots),
                  err ? err : "unknown error");
        free(err);
        return;
    }
    if (rc == 0)
        return;
    log_info("CA: the mesh roots in %s changed (%d root(s), %.16s): "
             "ISTIO_MUTUAL servers and clusters now trust them",
             m->path, (int)sk_X509_num(m->roots), m->pin);
    m->on_change(m->arg);
}

struct mesh_roots *mesh_roots_new(struct event_base *base, const char *path,
                                  void (*on_change)(void *), void *arg,
                                  char **err)
{
    struct mesh_roots *m = calloc(1, sizeof(*m));
    char *dir = NULL;

    *err = NULL;
    if (m == NULL || (m->path = strdup(path)) == NULL ||
        (dir = strdup(path)) == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    m->on_change = on_change;
    m->arg = arg;
    if (read_roots(m, err) < 0)
        goto fail;
    /* The directory, not the file: a ConfigMap's file is a symlink
     * through "..data", which the kubelet swaps, and editors and
     * atomic writers replace the file by a rename. */
    m->watch = dirwatch_new(base, dirname(dir), 100, on_dir_change, m);
    if (m->watch == NULL) {
        err_set(err, "%s: cannot watch its directory", path);
        goto fail;
    }
    free(dir);
    return m;
fail:
    free(dir);
    mesh_roots_free(m);
    return NULL;
}

const STACK_OF(X509) *
    mesh_roots_get(const struct mesh_roots *m, const char **pin)
{
    *pin = m->pin;
    return m->roots;
}

void mesh_roots_free(struct mesh_roots *m)
{
    if (m == NULL)
        return;
    dirwatch_free(m->watch);
    sk_X509_pop_free(m->roots, X509_free);
    free(m->path);
    free(m);
}
