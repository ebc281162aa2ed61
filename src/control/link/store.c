/*
 * Link credential records (see store.h). The CLI writes them, the
 * running catalog API reads them; a write is a whole file renamed into
 * place (pki_write_private()), so a reader never sees half of one.
 */
#include "config.h"

#include <errno.h>
#include <openssl/mem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/resource.h"
#include "control/ca/pki.h"
#include "control/link/store.h"
#include "core/err.h"

/* A site name is a DNS-1123 label: the record's file name and a label
 * value on the other side. */
int link_store_site_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '-'))
            return 0;
    return 1;
}

static void secret_hash(const char *secret, size_t n, char hex[65])
{
    uint8_t h[32];

    SHA256((const uint8_t *)secret, n, h);
    pki_hex(h, sizeof(h), hex);
}

int link_store_create(const char *dir, const char *site, int64_t now, char *out,
                      size_t cap, char **err)
{
    uint8_t secret[32];
    char b64[64], hex[65], path[4096], rec[256];
    int n;

    if (!link_store_site_ok(site)) {
        err_set(err,
                "site name '%s' must be a DNS-1123 label (a-z, 0-9, -; at "
                "most 63)",
                site);
        return -1;
    }
    RAND_bytes(secret, sizeof(secret));
    pki_b64url_encode(secret, sizeof(secret), b64, sizeof(b64));
    OPENSSL_cleanse(secret, sizeof(secret));
    secret_hash(b64, strlen(b64), hex);
    if (snprintf(path, sizeof(path), "%s/links", dir) >= (int)sizeof(path) ||
        pki_mkdirs(path, err) < 0) {
        err_set(err, "%s/links: cannot create", dir);
        return -1;
    }
    snprintf(path, sizeof(path), "%s/links/%s", dir, site);
    n = snprintf(rec, sizeof(rec),
                 "strait-link 1\nsite %s\nsecret-sha256 %s\ncreated %lld\n",
                 site, hex, (long long)now);
    if (pki_write_private(path, rec, (size_t)n, err) < 0)
        return -1;
    if (snprintf(out, cap, LINK_TOKEN_PREFIX "%s.%s", site, b64) >= (int)cap) {
        err_set(err, "credential buffer too small");
        return -1;
    }
    OPENSSL_cleanse(b64, sizeof(b64));
    return 0;
}

int link_store_delete(const char *dir, const char *site, char **err)
{
    char path[4096];

    if (!link_store_site_ok(site)) {
        err_set(err, "site name '%s' must be a DNS-1123 label", site);
        return -1;
    }
    snprintf(path, sizeof(path), "%s/links/%s", dir, site);
    if (unlink(path) < 0) {
        err_set(err, "%s: %s", path,
                errno == ENOENT ? "no such link (nothing to delete)"
                                : strerror(errno));
        return -1;
    }
    return 0;
}

/* One "key value\n" line at *p; advances *p. */
static int line(const char **p, const char *end, const char *key,
                const char **v, size_t *vn)
{
    size_t kl = strlen(key);
    const char *eol = memchr(*p, '\n', (size_t)(end - *p));

    if (eol == NULL || (size_t)(eol - *p) <= kl + 1 ||
        memcmp(*p, key, kl) != 0 || (*p)[kl] != ' ')
        return -1;
    *v = *p + kl + 1;
    *vn = (size_t)(eol - *v);
    *p = eol + 1;
    return 0;
}

int link_store_record_parse(const char *data, size_t n, char site[64],
                            char hash[65], int64_t *created,
                            struct link_pin *pin, const char **why)
{
    const char *p = data, *end = data + n, *v;
    size_t vn;
    char num[24];
    char *e;

    *why = "not a strait-link 1 record";
    if (n < 14 || memcmp(p, "strait-link 1\n", 14) != 0)
        return -1;
    p += 14;
    if (line(&p, end, "site", &v, &vn) < 0 || vn > 63)
        return -1;
    memcpy(site, v, vn);
    site[vn] = '\0';
    if (!link_store_site_ok(site))
        return -1;
    if (line(&p, end, "secret-sha256", &v, &vn) < 0 || vn != 64)
        return -1;
    for (size_t i = 0; i < vn; i++)
        if (!((v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f')))
            return -1;
    memcpy(hash, v, 64);
    hash[64] = '\0';
    if (line(&p, end, "created", &v, &vn) < 0 || vn == 0 || vn >= sizeof(num))
        return -1;
    memcpy(num, v, vn);
    num[vn] = '\0';
    *created = strtoll(num, &e, 10);
    if (*e != '\0')
        return -1;
    memset(pin, 0, sizeof(*pin));
    if (p != end) {
        if (line(&p, end, "peer-trust-domain", &v, &vn) < 0 ||
            vn >= sizeof(pin->trust_domain) || memchr(v, ' ', vn) != NULL)
            return -1;
        memcpy(pin->trust_domain, v, vn);
        pin->trust_domain[vn] = '\0';
        if (line(&p, end, "peer-roots", &v, &vn) < 0 || vn != 64 || p != end)
            return -1;
        for (size_t i = 0; i < vn; i++)
            if (!((v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f')))
                return -1;
        memcpy(pin->roots, v, 64);
        pin->roots[64] = '\0';
    }
    *why = NULL;
    return 0;
}

/* Reads site's record; 0 or -1. */
static int read_record_pin(const char *dir, const char *site, char hash[65],
                           int64_t *created, struct link_pin *pin)
{
    char path[4096], data[1024], rsite[64];
    const char *why;
    size_t n;
    FILE *f;

    snprintf(path, sizeof(path), "%s/links/%s", dir, site);
    f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    n = fread(data, 1, sizeof(data), f);
    fclose(f);
    if (n == sizeof(data) ||
        link_store_record_parse(data, n, rsite, hash, created, pin, &why) < 0 ||
        strcmp(rsite, site) != 0)
        return -1;
    return 0;
}

static int read_record(const char *dir, const char *site, char hash[65])
{
    struct link_pin pin;
    int64_t created;

    return read_record_pin(dir, site, hash, &created, &pin);
}

int link_store_pin_get(const char *dir, const char *site, const char *hash,
                       struct link_pin *pin)
{
    char h[65];
    int64_t created;

    if (read_record_pin(dir, site, h, &created, pin) < 0 ||
        memcmp(h, hash, 64) != 0)
        return -1;
    return 0;
}

int link_store_pin_set(const char *dir, const char *site, const char *hash,
                       const struct link_pin *pin, char **err)
{
    char h[65], path[4096], rec[1024];
    struct link_pin old;
    int64_t created;
    int n;

    if (read_record_pin(dir, site, h, &created, &old) < 0 ||
        memcmp(h, hash, 64) != 0) {
        err_set(err, "the link of site %s changed meanwhile", site);
        return -1;
    }
    n = snprintf(rec, sizeof(rec),
                 "strait-link 1\nsite %s\nsecret-sha256 %s\ncreated %lld\n"
                 "peer-trust-domain %s\npeer-roots %s\n",
                 site, h, (long long)created, pin->trust_domain, pin->roots);
    if (n < 0 || n >= (int)sizeof(rec)) {
        err_set(err, "trust domain too long");
        return -1;
    }
    snprintf(path, sizeof(path), "%s/links/%s", dir, site);
    return pki_write_private(path, rec, (size_t)n, err);
}

int link_store_check(const char *dir, const char *token, size_t n,
                     char site[64], char hash[65], const char **why)
{
    const char *s, *secret;
    size_t ns, nsecret;
    char got[65];

    if (res_link_token_split(token, n, &s, &ns, &secret, &nsecret, why) < 0)
        return -1;
    memcpy(site, s, ns);
    site[ns] = '\0';
    if (read_record(dir, site, hash) < 0) {
        *why = "no link for this site (deleted, or never created here): ask "
               "the remote site for a new MeshLink (strait link create)";
        return -1;
    }
    secret_hash(secret, nsecret, got);
    if (CRYPTO_memcmp(got, hash, 64) != 0) {
        *why = "link credential does not match (the link was re-created): "
               "apply the new MeshLink";
        return -1;
    }
    return 0;
}

int link_store_current(const char *dir, const char *site, const char *hash)
{
    char h[65];

    return read_record(dir, site, h) == 0 && memcmp(h, hash, 64) == 0;
}
