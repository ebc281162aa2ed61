/*
 * Join tokens and their records in the CA's directory (see token.h).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <openssl/mem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "control/ca/pki.h"
#include "control/ca/token.h"
#include "core/err.h"

#define RECORD_MAGIC "strait-join-token 1\n"

int token_parse(const char *s, size_t n, struct token *t, const char **why)
{
    uint8_t raw[64];
    ssize_t got;

    while (n > 0 &&
           (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r')) {
        s++;
        n--;
    }
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' ||
                     s[n - 1] == '\r'))
        n--;
    if (n < 4 || memcmp(s, "sjt", 3) != 0) {
        *why = "not a strait join token (it starts with 'sjt1.')";
        return -1;
    }
    if (n < 5 || memcmp(s, TOKEN_PREFIX, 5) != 0) {
        *why = "unsupported join token version (this strait reads sjt1)";
        return -1;
    }
    got = pki_b64url_decode(s + 5, n - 5, raw, sizeof(raw));
    if (got != (ssize_t)sizeof(raw) || n - 5 != 86) {
        *why = "damaged join token (bad base64url or length)";
        return -1;
    }
    memcpy(t->pin, raw, 32);
    memcpy(t->secret, raw + 32, 32);
    OPENSSL_cleanse(raw, sizeof(raw));
    return 0;
}

void token_format(const struct token *t, char out[TOKEN_STRLEN])
{
    uint8_t raw[64];

    memcpy(raw, t->pin, 32);
    memcpy(raw + 32, t->secret, 32);
    memcpy(out, TOKEN_PREFIX, 5);
    pki_b64url_encode(raw, sizeof(raw), out + 5, TOKEN_STRLEN - 5);
    OPENSSL_cleanse(raw, sizeof(raw));
}

void token_id(const struct token *t, char out[65])
{
    uint8_t h[32];

    SHA256(t->secret, sizeof(t->secret), h);
    pki_hex(h, sizeof(h), out);
}

static int mkdirs(const char *dir, char **err)
{
    char *a = NULL, *b = NULL;
    int rc = -1;

    if (asprintf(&a, "%s/tokens", dir) < 0 ||
        asprintf(&b, "%s/tokens/spent", dir) < 0)
        goto done;
    if (pki_mkdirs(dir, err) < 0)
        goto done;
    if ((mkdir(a, 0700) < 0 && errno != EEXIST) ||
        (mkdir(b, 0700) < 0 && errno != EEXIST)) {
        err_set(err, "%s: cannot create the token directory: %s", b,
                strerror(errno));
        goto done;
    }
    rc = 0;
done:
    free(a);
    free(b);
    return rc;
}

int token_create(const char *dir, const uint8_t pin[32], const char *ns,
                 const char *sa, int64_t ttl_s, int64_t now,
                 char out[TOKEN_STRLEN], char **err)
{
    struct token t;
    char id[65], *path = NULL, *rec = NULL;
    int n, rc = -1;

    *err = NULL;
    if (!pki_name_ok(ns) || !pki_name_ok(sa)) {
        err_set(err, "namespace and service account must be 1-253 "
                     "characters of a-z 0-9 - . (starting and ending "
                     "with a letter or digit)");
        return -1;
    }
    if (ttl_s <= 0) {
        err_set(err, "the token's time to live must be positive");
        return -1;
    }
    if (mkdirs(dir, err) < 0)
        return -1;
    token_prune(dir, now);
    memcpy(t.pin, pin, 32);
    RAND_bytes(t.secret, sizeof(t.secret));
    token_id(&t, id);
    n = asprintf(&rec,
                 RECORD_MAGIC "namespace %s\nserviceAccount %s\n"
                              "expires %lld\n",
                 ns, sa, (long long)(now + ttl_s));
    if (n < 0 || asprintf(&path, "%s/tokens/%s", dir, id) < 0) {
        err_set(err, "out of memory");
        goto done;
    }
    if (pki_write_private(path, rec, (size_t)n, err) < 0)
        goto done;
    token_format(&t, out);
    rc = 0;
done:
    OPENSSL_cleanse(&t, sizeof(t));
    free(path);
    if (n >= 0)
        free(rec);
    return rc;
}

/* Reads "KEY VALUE\n" at *p; the value is allocated. */
static int field(const char **p, const char *end, const char *key, char **val)
{
    size_t kl = strlen(key);
    const char *nl;

    if ((size_t)(end - *p) <= kl || memcmp(*p, key, kl) != 0 || (*p)[kl] != ' ')
        return -1;
    *p += kl + 1;
    nl = memchr(*p, '\n', (size_t)(end - *p));
    if (nl == NULL || nl == *p)
        return -1;
    *val = strndup(*p, (size_t)(nl - *p));
    *p = nl + 1;
    return *val ? 0 : -1;
}

int token_record_parse(const char *data, size_t n, char **ns, char **sa,
                       int64_t *expires, const char **why)
{
    const char *p = data, *end = data + n;
    char *exp = NULL, *e = NULL;
    long long v;

    *ns = *sa = NULL;
    *why = "damaged token record";
    if (n < sizeof(RECORD_MAGIC) - 1 ||
        memcmp(p, RECORD_MAGIC, sizeof(RECORD_MAGIC) - 1) != 0)
        return -1;
    p += sizeof(RECORD_MAGIC) - 1;
    if (field(&p, end, "namespace", ns) < 0 ||
        field(&p, end, "serviceAccount", sa) < 0 ||
        field(&p, end, "expires", &exp) < 0 || p != end || !pki_name_ok(*ns) ||
        !pki_name_ok(*sa))
        goto fail;
    errno = 0;
    if (exp[0] < '0' || exp[0] > '9')
        goto fail;
    v = strtoll(exp, &e, 10);
    if (errno != 0 || *e != '\0')
        goto fail;
    *expires = v;
    free(exp);
    return 0;
fail:
    free(exp);
    free(*ns);
    free(*sa);
    *ns = *sa = NULL;
    return -1;
}

static void fmt_time(int64_t t, char *out, size_t n)
{
    time_t tt = (time_t)t;
    struct tm tm;

    if (gmtime_r(&tt, &tm) == NULL ||
        strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(out, n, "%lld", (long long)t);
}

/* The spent record's key file: "DIR/tokens/spent/ID.key". */
static char *key_path(const char *spent)
{
    char *p = NULL;

    if (asprintf(&p, "%s.key", spent) < 0)
        return NULL;
    return p;
}

/* 1 when the spent token's recorded key is key. */
static int spent_by(const char *spent, const uint8_t key[32])
{
    char *kp = key_path(spent), *data = NULL, *rerr = NULL, hex[65];
    size_t n = 0;
    int same = 0;

    if (kp != NULL && key != NULL)
        data = pki_read_file(kp, &n, &rerr);
    if (data != NULL) {
        pki_hex(key, 32, hex);
        same = n >= 64 && CRYPTO_memcmp(data, hex, 64) == 0;
    }
    free(data);
    free(rerr);
    free(kp);
    return same;
}

int token_redeem(const char *dir, const uint8_t pin[32], const struct token *t,
                 const uint8_t key[32], int64_t now, char **ns, char **sa,
                 char **err)
{
    char id[65], *path = NULL, *spent = NULL, *data = NULL, *rerr = NULL;
    const char *why;
    int64_t expires;
    size_t n;
    int rc = -1, again = 0;

    *err = NULL;
    *ns = *sa = NULL;
    if (CRYPTO_memcmp(pin, t->pin, 32) != 0) {
        err_set(err, "join token was created for a different CA (its "
                     "root pin does not match)");
        return -1;
    }
    token_id(t, id);
    if (asprintf(&path, "%s/tokens/%s", dir, id) < 0 ||
        asprintf(&spent, "%s/tokens/spent/%s", dir, id) < 0) {
        err_set(err, "out of memory");
        goto done;
    }
    data = pki_read_file(path, &n, &rerr);
    if (data == NULL) {
        struct stat st;
        if (errno == ENOENT || access(path, F_OK) < 0) {
            if (stat(spent, &st) != 0) {
                err_set(err, "unknown join token");
                goto done;
            }
            if (!spent_by(spent, key)) {
                err_set(err, "join token already used");
                goto done;
            }
            /* Spent for this very key: the same host asks again. */
            free(rerr);
            rerr = NULL;
            data = pki_read_file(spent, &n, &rerr);
            again = 1;
        }
        if (data == NULL) {
            err_set(err, "join token record unreadable");
            goto done;
        }
    }
    if (token_record_parse(data, n, ns, sa, &expires, &why) < 0) {
        err_set(err, "%s", why);
        goto done;
    }
    if (now >= expires) {
        char when[32];
        fmt_time(expires, when, sizeof(when));
        err_set(err, "join token expired at %s", when);
        goto done;
    }
    if (!again) {
        /* The rename is the spend: of two redeemers racing, exactly one
         * succeeds. */
        if (rename(path, spent) < 0) {
            err_set(err, "%s",
                    errno == ENOENT ? "join token already used"
                                    : "cannot mark the join token used");
            goto done;
        }
        if (key != NULL) {
            /* Without this record a retry is refused as already used,
             * which is how spends behaved before; not an error. */
            char *kp = key_path(spent), hex[66];
            pki_hex(key, 32, hex);
            hex[64] = '\n';
            hex[65] = '\0';
            if (kp != NULL)
                pki_write_private(kp, hex, 65, &rerr);
            free(kp);
        }
    }
    rc = 0;
done:
    if (rc < 0) {
        free(*ns);
        free(*sa);
        *ns = *sa = NULL;
    }
    free(rerr);
    free(data);
    free(path);
    free(spent);
    return rc;
}

int token_count(const char *dir, int64_t now)
{
    char *tdir = NULL;
    DIR *d;
    struct dirent *e;
    int count = 0;

    if (asprintf(&tdir, "%s/tokens", dir) < 0)
        return 0;
    d = opendir(tdir);
    while (d != NULL && (e = readdir(d)) != NULL) {
        char *p = NULL, *data, *ns, *sa, *err = NULL;
        const char *why;
        int64_t exp;
        size_t n;

        if (strlen(e->d_name) != 64 ||
            asprintf(&p, "%s/%s", tdir, e->d_name) < 0)
            continue;
        data = pki_read_file(p, &n, &err);
        if (data != NULL &&
            token_record_parse(data, n, &ns, &sa, &exp, &why) == 0) {
            if (exp > now)
                count++;
            free(ns);
            free(sa);
        }
        free(data);
        free(err);
        free(p);
    }
    if (d != NULL)
        closedir(d);
    free(tdir);
    return count;
}

/* Removes the expired records of one directory. */
static int prune_in(const char *tdir, int64_t before)
{
    DIR *d = opendir(tdir);
    struct dirent *e;
    int removed = 0;

    while (d != NULL && (e = readdir(d)) != NULL) {
        char *p = NULL, *data, *ns, *sa, *err = NULL;
        const char *why;
        int64_t exp;
        size_t n;

        if (strlen(e->d_name) != 64 ||
            asprintf(&p, "%s/%s", tdir, e->d_name) < 0)
            continue;
        data = pki_read_file(p, &n, &err);
        if (data != NULL &&
            token_record_parse(data, n, &ns, &sa, &exp, &why) == 0) {
            if (exp < before && unlink(p) == 0) {
                char *kp = key_path(p);
                if (kp != NULL)
                    unlink(kp); /* a spent record's key, if any */
                free(kp);
                removed++;
            }
            free(ns);
            free(sa);
        }
        free(data);
        free(err);
        free(p);
    }
    if (d != NULL)
        closedir(d);
    return removed;
}

int token_prune(const char *dir, int64_t now)
{
    char *a = NULL, *b = NULL;
    int removed = 0;

    if (asprintf(&a, "%s/tokens", dir) >= 0 &&
        asprintf(&b, "%s/tokens/spent", dir) >= 0)
        removed =
            prune_in(a, now - TOKEN_KEEP_S) + prune_in(b, now - TOKEN_KEEP_S);
    free(a);
    free(b);
    return removed;
}
