/*
 * Structural identities of compiled parts, and a map keyed by them.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "compile/identity.h"
#include "config/conf.h"
#include "config/resource.h"

static uint64_t hash_of(const unsigned char *p, size_t n)
{
    uint64_t h = 0;

    for (size_t i = 0; i < 8 && i < n; i++)
        h |= (uint64_t)p[i] << (8 * i);
    return h;
}

int ident_equal(const struct ident_id *a, const struct ident_id *b)
{
    return a->bytes != NULL && b->bytes != NULL && a->hash == b->hash &&
           a->len == b->len &&
           (a->len == 0 || memcmp(a->bytes, b->bytes, a->len) == 0);
}

/* digest_so_far() is the digest of what d holds, d unchanged. */
static void digest_so_far(const struct ident *d,
                          unsigned char out[SHA256_DIGEST_LENGTH])
{
    SHA256_CTX c = d->ctx;

    SHA256_Final(out, &c);
}

int ident_has_prefix(const struct ident_id *id, const struct ident *pre)
{
    unsigned char dg[SHA256_DIGEST_LENGTH];

    if (id->bytes == NULL || pre->oom || !id->have_pre)
        return 0;
    digest_so_far(pre, dg);
    return memcmp(dg, id->pre, sizeof(dg)) == 0;
}

int ident_id_copy(struct ident_id *out, const struct ident_id *id)
{
    memset(out, 0, sizeof(*out));
    if (id->bytes == NULL)
        return -1;
    out->bytes = malloc(id->len ? id->len : 1);
    if (out->bytes == NULL)
        return -1;
    if (id->len > 0)
        memcpy(out->bytes, id->bytes, id->len);
    out->len = id->len;
    out->hash = id->hash;
    memcpy(out->pre, id->pre, sizeof(out->pre));
    out->have_pre = id->have_pre;
    return 0;
}

void ident_id_dispose(struct ident_id *id)
{
    free(id->bytes);
    memset(id, 0, sizeof(*id));
}

void ident_init(struct ident *d)
{
    memset(d, 0, sizeof(*d));
    SHA256_Init(&d->ctx);
}

static void raw(struct ident *d, const void *p, size_t n)
{
    SHA256_Update(&d->ctx, p, n);
    d->len += n;
}

void ident_u64(struct ident *d, char tag, uint64_t v)
{
    unsigned char x[9];

    x[0] = (unsigned char)tag;
    for (int i = 0; i < 8; i++)
        x[1 + i] = (unsigned char)(v >> (8 * i));
    raw(d, x, sizeof(x));
}

void ident_bytes(struct ident *d, char tag, const void *p, size_t n)
{
    ident_u64(d, tag, n);
    raw(d, p, n);
}

void ident_str(struct ident *d, char tag, const char *s)
{
    if (s == NULL)
        ident_u64(d, '\0', 0);
    else
        ident_bytes(d, tag, s, strlen(s));
}

void ident_sub(struct ident *d, const struct ident_id *id)
{
    if (id->bytes == NULL)
        d->oom = 1;
    else
        ident_bytes(d, 'i', id->bytes, id->len);
}

void ident_nest(struct ident *d, char tag, const struct ident *src)
{
    unsigned char dg[SHA256_DIGEST_LENGTH];

    /* What src holds, by its digest and length: equal exactly when the
     * inputs are (as far as SHA-256 tells, which is what identities
     * rest on). */
    digest_so_far(src, dg);
    ident_u64(d, tag, src->len);
    raw(d, dg, sizeof(dg));
    if (src->oom)
        d->oom = 1;
}

void ident_copy(struct ident *d, const struct ident *src)
{
    if (d->len == 0 && !d->have_pre) {
        d->ctx = src->ctx;
        d->len = src->len;
        digest_so_far(src, d->pre);
        d->have_pre = 1;
    } else {
        ident_nest(d, 'c', src);
    }
    if (src->oom)
        d->oom = 1;
}

void ident_sink_write(void *arg, const void *p, size_t n)
{
    raw(arg, p, n);
}

/* conf_identity()'s bytes are framed by their own tags and counts. */
void ident_conf(struct ident *d, char tag, const struct conf_section *sec,
                const void *dst)
{
    struct conf_sink sink = {ident_sink_write, d};

    ident_u64(d, tag, 0);
    conf_identity(sec, dst, &sink);
}

void ident_res_spec(struct ident *d, char tag, const struct resource *r)
{
    struct conf_sink sink = {ident_sink_write, d};

    ident_u64(d, tag, (uint64_t)r->kind);
    res_spec_identity(r, &sink);
}

int ident_finish(struct ident *d, struct ident_id *out)
{
    memset(out, 0, sizeof(*out));
    if (!d->oom) {
        out->bytes = malloc(SHA256_DIGEST_LENGTH);
        if (out->bytes != NULL) {
            SHA256_Final(out->bytes, &d->ctx);
            out->len = SHA256_DIGEST_LENGTH;
            out->hash = hash_of(out->bytes, out->len);
            memcpy(out->pre, d->pre, sizeof(out->pre));
            out->have_pre = d->have_pre;
        }
    }
    ident_abandon(d);
    return out->bytes != NULL ? 0 : -1;
}

void ident_abandon(struct ident *d)
{
    memset(d, 0, sizeof(*d));
}

/* ---- the map ------------------------------------------------------------ */

struct ident_slot {
    struct ident_id key; /* key.bytes NULL: empty */
    void *value;
};

void ident_map_init(struct ident_map *m)
{
    memset(m, 0, sizeof(*m));
}

void ident_map_dispose(struct ident_map *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->v[i].key.bytes);
    free(m->v);
    memset(m, 0, sizeof(*m));
}

static struct ident_slot *find(const struct ident_slot *v, size_t cap,
                               const struct ident_id *key)
{
    size_t mask = cap - 1;

    for (size_t i = (size_t)key->hash & mask;; i = (i + 1) & mask) {
        const struct ident_slot *s = &v[i];
        if (s->key.bytes == NULL || ident_equal(&s->key, key))
            return (struct ident_slot *)s;
    }
}

void *ident_map_get(const struct ident_map *m, const struct ident_id *key)
{
    const struct ident_slot *s;

    if (m == NULL || m->cap == 0 || key->bytes == NULL)
        return NULL;
    s = find(m->v, m->cap, key);
    return s->key.bytes != NULL ? s->value : NULL;
}

/* grow() doubles the table (from 16), moving the keys; -1 when memory
 * runs out, m unchanged. */
static int grow(struct ident_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 16;
    struct ident_slot *v = calloc(cap, sizeof(*v));

    if (v == NULL)
        return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->v[i].key.bytes != NULL)
            *find(v, cap, &m->v[i].key) = m->v[i];
    free(m->v);
    m->v = v;
    m->cap = cap;
    return 0;
}

int ident_map_put(struct ident_map *m, const struct ident_id *key, void *value)
{
    struct ident_slot *s;

    if (key->bytes == NULL)
        return -1;
    if (m->cap > 0) {
        s = find(m->v, m->cap, key);
        if (s->key.bytes != NULL) {
            s->value = value;
            return 0;
        }
    }
    if ((m->n + 1) * 2 > m->cap && grow(m) < 0)
        return -1;
    s = find(m->v, m->cap, key);
    if (ident_id_copy(&s->key, key) < 0)
        return -1;
    s->value = value;
    m->n++;
    return 0;
}

int ident_map_next(const struct ident_map *m, size_t *pos,
                   const struct ident_id **key, void **value)
{
    for (; *pos < m->cap; (*pos)++) {
        const struct ident_slot *s = &m->v[*pos];
        if (s->key.bytes == NULL)
            continue;
        *key = &s->key;
        *value = s->value;
        (*pos)++;
        return 1;
    }
    return 0;
}
