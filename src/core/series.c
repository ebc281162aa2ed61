#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/series.h"

const uint64_t series_bounds_x10[SERIES_NBOUNDS] = {
    5,      10,      50,      100,      250,     500,    1000,
    2500,   5000,    10000,   25000,    50000,   100000, 300000,
    600000, 3000000, 6000000, 18000000, 36000000};

/* A multiply-xorshift hash, eight bytes a step: the dynamic run is
 * hashed once per request, and a byte-at-a-time hash (FNV) cost more
 * than everything else the record does. Not for untrusted keys' sake:
 * the table is bounded whatever collides. */
static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 31);
}

static uint64_t fnv(uint64_t h, const char *p, size_t n)
{
    uint64_t v;

    h = mix(h, n);
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&v, p, 8);
        h = mix(h, v);
    }
    if (n > 0) {
        v = 0;
        memcpy(&v, p, n);
        h = mix(h, v);
    }
    return h;
}

#define FNV_BASIS 0xcbf29ce484222325ULL

struct series_labels *series_labels_new(const char *text, size_t len,
                                        unsigned flags)
{
    struct series_labels *l = malloc(sizeof(*l) + len + 1);

    if (l == NULL)
        return NULL;
    l->refs = 1;
    l->flags = flags;
    l->len = len;
    if (len > 0)
        memcpy(l->text, text, len);
    l->text[len] = '\0';
    l->hash = fnv(FNV_BASIS, l->text, len);
    return l;
}

struct series_labels *series_labels_ref(struct series_labels *l)
{
    if (l != NULL)
        __atomic_add_fetch(&l->refs, 1, __ATOMIC_RELAXED);
    return l;
}

void series_labels_unref(struct series_labels *l)
{
    if (l != NULL && __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(l);
}

struct series_table *series_table_new(int nshards, size_t max)
{
    struct series_table *t;
    size_t cap = 16;

    if (nshards < 1 || max < 1 || max > 1000000)
        return NULL;
    while (cap < 2 * max)
        cap <<= 1;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->nshards = nshards;
    t->max = max;
    t->shards = aligned_alloc(64, (size_t)nshards * sizeof(*t->shards));
    if (t->shards == NULL) {
        free(t);
        return NULL;
    }
    memset(t->shards, 0, (size_t)nshards * sizeof(*t->shards));
    for (int i = 0; i < nshards; i++) {
        struct series_shard *sh = &t->shards[i];
        sh->max = max;
        sh->mask = cap - 1;
        sh->chunks = calloc(max / SERIES_CHUNK + 1, sizeof(*sh->chunks));
        sh->index = calloc(cap, sizeof(*sh->index));
        if (sh->chunks == NULL || sh->index == NULL) {
            t->nshards = i + 1;
            series_table_free(t);
            return NULL;
        }
    }
    return t;
}

void series_table_free(struct series_table *t)
{
    if (t == NULL)
        return;
    for (int i = 0; i < t->nshards; i++) {
        struct series_shard *sh = &t->shards[i];
        for (size_t k = 0; k < sh->n; k++) {
            struct series *s = &sh->chunks[k / SERIES_CHUNK][k % SERIES_CHUNK];
            series_labels_unref(s->a);
            series_labels_unref(s->b);
            free(s->text);
        }
        if (sh->chunks != NULL)
            for (size_t k = 0; k <= sh->max / SERIES_CHUNK; k++)
                free(sh->chunks[k]);
        free(sh->chunks);
        free(sh->index);
    }
    free(t->shards);
    free(t);
}

static struct series *slot(const struct series_shard *sh, size_t i)
{
    return &sh->chunks[i / SERIES_CHUNK][i % SERIES_CHUNK];
}

/* A static run matches a series' when it is the same object or has the
 * same bytes (the same labels compiled again by a later snapshot). */
static int run_eq(const struct series_labels *want, const char *have,
                  size_t hlen, const struct series_labels *obj)
{
    size_t wlen = want != NULL ? want->len : 0;

    if (want == obj)
        return 1;
    return wlen == hlen && (wlen == 0 || memcmp(want->text, have, wlen) == 0);
}

static int matches(const struct series *s, uint64_t h,
                   const struct series_labels *a, const struct series_labels *b,
                   const char *c, size_t clen)
{
    /* The layout create() writes: the runs present, joined by commas. */
    size_t pos_b = s->alen + (s->alen > 0 && s->blen > 0);
    size_t end_ab = s->blen > 0 ? pos_b + s->blen : s->alen;
    size_t pos_c = end_ab + (end_ab > 0 && clen > 0);

    if (s->hash != h || !run_eq(a, s->text, s->alen, s->a) ||
        !run_eq(b, s->text + pos_b, s->blen, s->b))
        return 0;
    return s->len == pos_c + clen &&
           (clen == 0 || memcmp(s->text + pos_c, c, clen) == 0);
}

static struct series *create(struct series_shard *sh, uint64_t h,
                             struct series_labels *a, struct series_labels *b,
                             const char *c, size_t clen)
{
    size_t i = sh->n, alen = a ? a->len : 0, blen = b ? b->len : 0, len = 0;
    struct series *s;
    char *text;

    if (sh->chunks[i / SERIES_CHUNK] == NULL) {
        sh->chunks[i / SERIES_CHUNK] =
            calloc(SERIES_CHUNK, sizeof(struct series));
        if (sh->chunks[i / SERIES_CHUNK] == NULL)
            return NULL;
    }
    text = malloc(alen + blen + clen + 3);
    if (text == NULL)
        return NULL;
    s = slot(sh, i);
    if (alen > 0) {
        memcpy(text, a->text, alen);
        len = alen;
    }
    if (blen > 0) {
        if (len > 0)
            text[len++] = ',';
        memcpy(text + len, b->text, blen);
        len += blen;
    }
    if (clen > 0) {
        if (len > 0)
            text[len++] = ',';
        memcpy(text + len, c, clen);
        len += clen;
    }
    text[len] = '\0';
    /* Runs kept for what they are in text: an empty run is no run. */
    s->alen = alen;
    s->blen = blen;
    s->hash = h;
    s->a = series_labels_ref(a);
    s->b = series_labels_ref(b);
    s->text = text;
    s->len = len;
    __atomic_store_n(&sh->n, i + 1, __ATOMIC_RELEASE);
    return s;
}

struct series *series_get(struct series_shard *sh, struct series_labels *a,
                          struct series_labels *b, const char *c, size_t clen)
{
    uint64_t h = fnv((a ? a->hash : 1) * 31 + (b ? b->hash : 2), c, clen);
    size_t pos = (size_t)(h ^ (h >> 29)) & sh->mask;
    uint32_t v;

    while ((v = sh->index[pos]) != 0) {
        struct series *s = slot(sh, v - 1);
        if (matches(s, h, a, b, c, clen))
            return s;
        pos = (pos + 1) & sh->mask;
    }
    if (sh->n >= sh->max) {
        __atomic_store_n(&sh->overflow, sh->overflow + 1, __ATOMIC_RELAXED);
        return NULL;
    }
    {
        struct series *s = create(sh, h, a, b, c, clen);
        if (s != NULL)
            sh->index[pos] = (uint32_t)sh->n;
        return s;
    }
}

void series_observe(struct series *s, enum series_histogram k, uint64_t v)
{
    struct series_hist *hi = &s->h[k];
    size_t i = 0;
    uint64_t x = v > UINT64_MAX / 10 ? UINT64_MAX : v * 10;

    while (i < SERIES_NBOUNDS && x > series_bounds_x10[i])
        i++;
    __atomic_store_n(&hi->bucket[i], hi->bucket[i] + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&hi->sum, hi->sum + v, __ATOMIC_RELAXED);
}

size_t series_count(const struct series_shard *sh)
{
    return __atomic_load_n(&sh->n, __ATOMIC_ACQUIRE);
}

const struct series *series_at(const struct series_shard *sh, size_t i)
{
    return slot(sh, i);
}

size_t series_escape(char *out, size_t cap, const char *value, size_t n)
{
    size_t w = 0;

    if (cap == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)value[i];
        char esc = 0;

        if (ch == '\\' || ch == '"')
            esc = (char)ch;
        else if (ch == '\n')
            esc = 'n';
        if (esc != 0) {
            if (w + 2 >= cap)
                break;
            out[w++] = '\\';
            out[w++] = esc;
            continue;
        }
        if (w + 1 >= cap)
            break;
        out[w++] = ch < 0x20 || ch == 0x7f ? '_' : (char)ch;
    }
    out[w] = '\0';
    return w;
}
