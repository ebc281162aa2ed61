#include "config.h"

#include <errno.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/res-k8s.h"
#include "config/resource.h"
#include "core/log.h"
#include "control/secrets.h"

struct secret_file {
    char *ns;
    char *name;
    int key; /* enum res_secret_key */
    unsigned char hash[SHA256_DIGEST_LENGTH];
    int fd;
    char path[40];
    unsigned used; /* the last commit whose set uses it; 0: none yet */
};

struct secret_store {
    struct secret_file *v;
    size_t n;
    unsigned gen;
};

struct secret_store *secret_store_new(void)
{
    return calloc(1, sizeof(struct secret_store));
}

static void file_dispose(struct secret_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    free(f->ns);
    free(f->name);
}

void secret_store_free(struct secret_store *st)
{
    if (st == NULL)
        return;
    for (size_t i = 0; i < st->n; i++)
        file_dispose(&st->v[i]);
    free(st->v);
    free(st);
}

static struct secret_file *find(struct secret_store *st, const char *ns,
                                const char *name, int key,
                                const unsigned char *hash)
{
    for (size_t i = 0; i < st->n; i++) {
        struct secret_file *f = &st->v[i];
        if (f->key == key && strcmp(f->ns, ns) == 0 &&
            strcmp(f->name, name) == 0 &&
            memcmp(f->hash, hash, sizeof(f->hash)) == 0)
            return f;
    }
    return NULL;
}

/* make() writes one value into a new memfd. */
static struct secret_file *make(struct secret_store *st, const char *ns,
                                const char *name, int key,
                                const unsigned char *hash,
                                const unsigned char *val, size_t len)
{
    struct secret_file *v, *f;
    size_t off = 0;
    int fd;

    v = realloc(st->v, (st->n + 1) * sizeof(*v));
    if (v == NULL)
        return NULL;
    st->v = v;
    {
        /* Named for ls -l /proc/PID/fd: the Secret and key, never the
         * value. */
        char label[240];
        snprintf(label, sizeof(label), "strait-secret:%s/%s/%s", ns, name,
                 res_secret_key_name(key));
        fd = memfd_create(label, MFD_CLOEXEC);
    }
    if (fd < 0) {
        log_error("Secret %s/%s: cannot make an in-memory file: %s", ns, name,
                  strerror(errno));
        return NULL;
    }
    while (off < len) {
        ssize_t w = write(fd, val + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            log_error("Secret %s/%s: cannot write an in-memory file: %s", ns,
                      name, strerror(errno));
            close(fd);
            return NULL;
        }
        off += (size_t)w;
    }
    f = &st->v[st->n];
    memset(f, 0, sizeof(*f));
    f->fd = fd;
    f->key = key;
    memcpy(f->hash, hash, sizeof(f->hash));
    snprintf(f->path, sizeof(f->path), "/proc/self/fd/%d", fd);
    f->ns = strdup(ns);
    f->name = strdup(name);
    if (f->ns == NULL || f->name == NULL) {
        file_dispose(f);
        return NULL;
    }
    st->n++;
    return f;
}

int secret_store_apply(struct secret_store *st, struct resource_set *set)
{
    int rc = 0;

    for (size_t i = 0; i < set->n; i++) {
        struct resource *r = set->v[i];
        const struct res_k8s_secret *s = res_k8s_secret(r);
        if (s == NULL)
            continue;
        for (int k = 0; k < RES_SECRET_NKEYS; k++) {
            unsigned char hash[SHA256_DIGEST_LENGTH];
            struct secret_file *f;
            if (s->val[k] == NULL)
                continue;
            SHA256(s->val[k], s->len[k], hash);
            f = find(st, r->meta.ns, r->meta.name, k, hash);
            if (f == NULL)
                f = make(st, r->meta.ns, r->meta.name, k, hash, s->val[k],
                         s->len[k]);
            if (f == NULL || res_secret_set_path(r, k, f->path) < 0)
                rc = -1;
        }
    }
    return rc;
}

void secret_store_commit(struct secret_store *st,
                         const struct resource_set *set)
{
    size_t j = 0;

    st->gen++;
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct res_k8s_secret *s = res_k8s_secret(set->v[i]);
        for (int k = 0; s != NULL && k < RES_SECRET_NKEYS; k++)
            for (size_t n = 0; s->path[k] != NULL && n < st->n; n++)
                if (strcmp(st->v[n].path, s->path[k]) == 0)
                    st->v[n].used = st->gen;
    }
    /* Keep what this set and the one before it use. */
    for (size_t i = 0; i < st->n; i++) {
        if (st->v[i].used + 1 >= st->gen && st->v[i].used != 0)
            st->v[j++] = st->v[i];
        else
            file_dispose(&st->v[i]);
    }
    st->n = j;
}
