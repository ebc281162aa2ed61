/*
 * strait apply, delete and get (see etcd_cli.h). Each command reads the
 * whole prefix once, checks the change against it with the analyzer that
 * `strait check` runs (the same messages), and writes with one
 * transaction whose compares are the mod_revisions it read: a change
 * made by someone else in between fails the transaction instead of being
 * overwritten unseen.
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/analyze.h"
#include "config/bootstrap.h"
#include "config/gwapi.h"
#include "config/resource-t.h"
#include "config/resource.h"
#include "control/dns.h"
#include "control/etcd_cli.h"
#include "control/etcd_http.h"
#include "control/etcd_proto.h"
#include "core/addr.h"
#include "core/arena.h"
#include "core/buf.h"
#include "core/err.h"
#include "tls/tls.h"

#define MAX_ANSWER (256u * 1024 * 1024)

struct cli {
    struct event_base *base;
    struct dns_cache *dns; /* names of endpoints */
    const struct bootstrap_etcd *conf;
    char **eps;
    size_t neps, cur;
    char *prefix; /* with '/' */
    struct ssl_ctx_st *ctx;
    char *token;
    int outbound_mode;
    /* apply's progress line: stderr is a terminal (tty), and a line is
     * drawn now (shown). A script gets none of it. */
    int tty;
    int shown;
};

/* Draws the progress line (on a terminal only), replacing the last. */
static void __attribute__((format(printf, 2, 3)))
progress(struct cli *c, const char *fmt, ...)
{
    va_list ap;

    if (!c->tty)
        return;
    fputs("\r\033[K", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
    c->shown = 1;
}

/* Erases the progress line before anything else is printed. */
static void progress_end(struct cli *c)
{
    if (c->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    c->shown = 0;
}

/* One key of the prefix, as read. */
struct kv {
    char *key;
    char *value;
    size_t vlen;
    int64_t mod_revision;
    char *kind, *ns, *name; /* one allocation; kind "" for another shape */
};

struct kvs {
    struct kv *v;
    size_t n;
    int64_t revision;
};

/* --- one request, waited for ------------------------------------------ */

struct wait {
    int done;
    int status;
    char *body;
    size_t n;
    char *err;
};

static void on_done(void *arg, int status, const char *body, size_t n,
                    const char *err)
{
    struct wait *w = arg;

    w->done = 1;
    w->status = status;
    w->err = err ? strdup(err) : NULL;
    w->body = malloc(n + 1);
    if (w->body != NULL) {
        memcpy(w->body, body, n);
        w->body[n] = '\0';
        w->n = n;
    }
}

static void no_change(void *arg)
{
    (void)arg;
}

static int no_lines(void *arg, const char *p, size_t n)
{
    (void)arg;
    (void)p;
    (void)n;
    return 0;
}

struct resolved {
    int done;
    struct addr a;
    const char *why;
};

static void on_resolved(void *arg, const struct addr *a, const char *why)
{
    struct resolved *r = arg;

    r->done = 1;
    if (a != NULL)
        r->a = *a;
    r->why = why;
}

/* host's address: a literal as it is, a name through the resolver every
 * other name strait looks up goes through (dns.nameservers and
 * dns.timeout of the bootstrap given with -c; /etc/resolv.conf without
 * one), waited for on the command's loop. 0, or -1 with *why. */
static int resolve(struct cli *c, const char *host, int port, struct addr *a,
                   const char **why)
{
    struct resolved r;
    struct dns_query *q;

    if (addr_literal(a, host, port) == 0)
        return 0;
    memset(&r, 0, sizeof(r));
    q = dns_resolve(c->dns, host, port, on_resolved, &r);
    if (q == NULL) {
        *why = "out of memory";
        return -1;
    }
    while (!r.done && event_base_loop(c->base, EVLOOP_ONCE) == 0)
        ;
    if (!r.done) {
        dns_query_cancel(q);
        *why = "the event loop failed";
        return -1;
    }
    if (r.why != NULL) {
        *why = r.why;
        return -1;
    }
    *a = r.a;
    return 0;
}

/*
 * post() sends body to path on the members in turn, starting with the
 * last one that answered, until one answers (any status). Returns 0 with
 * *w filled (the caller frees w->body), or -1 with the last failure
 * printed.
 */
static int post_once(struct cli *c, const char *path, const struct buf *body,
                     struct wait *w, int with_token)
{
    char last[512] = "no endpoint";

    for (size_t k = 0; k < c->neps; k++) {
        size_t i = (c->cur + k) % c->neps;
        struct etcd_http_conf hc;
        struct etcd_http_cb cb = {no_lines, on_done, w, NULL};
        struct etcd_http *h;
        char host[256];
        int tls, port;
        const char *why = NULL;

        memset(w, 0, sizeof(*w));
        memset(&hc, 0, sizeof(hc));
        if (bootstrap_etcd_endpoint(c->eps[i], &tls, host, sizeof(host), &port,
                                    &why) < 0) {
            snprintf(last, sizeof(last), "%s: %s", c->eps[i], why);
            continue;
        }
        if (resolve(c, host, port, &hc.addr, &why) < 0) {
            snprintf(last, sizeof(last), "%s: cannot resolve %s: %s", c->eps[i],
                     host, why);
            continue;
        }
        if (tls && c->ctx == NULL) {
            snprintf(last, sizeof(last), "%s: no TLS context", c->eps[i]);
            continue;
        }
        hc.host = host;
        hc.ctx = tls ? c->ctx : NULL;
        hc.path = path;
        hc.token = with_token ? c->token : NULL;
        hc.body = buf_len(body) ? buf_ptr(body) : "";
        hc.body_n = buf_len(body);
        hc.timeout_ms = c->conf->request_timeout_ms;
        hc.max_body = MAX_ANSWER;
        h = etcd_http_new(c->base, &hc, &cb, &why);
        if (h == NULL) {
            snprintf(last, sizeof(last), "%s: %s", c->eps[i], why);
            continue;
        }
        while (!w->done)
            event_base_loop(c->base, EVLOOP_ONCE);
        etcd_http_free(h);
        if (w->err != NULL) {
            snprintf(last, sizeof(last), "%s: %s", c->eps[i], w->err);
            free(w->err);
            free(w->body);
            w->err = NULL;
            w->body = NULL;
            continue;
        }
        c->cur = i;
        return 0;
    }
    progress_end(c);
    fprintf(stderr, "Error: no etcd member answered (last: %s)\n", last);
    return -1;
}

static void print_error_answer(const char *what, const struct wait *w)
{
    struct arena a;
    struct etcd_error e;
    const char *why = NULL;

    arena_init(&a, 4096);
    if (etcd_parse_error(&a, w->body, w->n, &e, &why) == 0 && e.message.n > 0)
        fprintf(stderr, "Error: %s: HTTP %d: %.*s\n", what, w->status,
                (int)e.message.n, e.message.p);
    else
        fprintf(stderr, "Error: %s: HTTP %d\n", what, w->status);
    arena_dispose(&a);
}

static int authenticate(struct cli *c)
{
    struct buf body;
    struct wait w;
    struct arena a;
    struct slice tok;
    const char *why = NULL;
    int rc = -1;

    if (c->conf->username[0] == '\0')
        return 0;
    buf_init(&body, 64 * 1024);
    etcd_req_auth(&body, c->conf->username, c->conf->password);
    if (post_once(c, "/v3/auth/authenticate", &body, &w, 0) < 0) {
        buf_dispose(&body);
        return -1;
    }
    buf_dispose(&body);
    arena_init(&a, 4096);
    if (w.status != 200) {
        print_error_answer("authenticate", &w);
    } else if (etcd_parse_auth(&a, w.body, w.n, &tok, &why) < 0) {
        fprintf(stderr, "Error: authenticate: %s\n", why);
    } else {
        c->token = strndup(tok.p, tok.n);
        rc = c->token != NULL ? 0 : -1;
    }
    arena_dispose(&a);
    free(w.body);
    return rc;
}

/* --- the prefix as read ----------------------------------------------- */

static void kv_names(const char *prefix, struct kv *kv)
{
    char *s = strdup(kv->key + strlen(prefix)), *a, *b;
    int k;

    kv->kind = s;
    if (s == NULL)
        return;
    a = strchr(s, '/');
    b = a ? strchr(a + 1, '/') : NULL;
    if (a == NULL || b == NULL || strchr(b + 1, '/') != NULL || a == s ||
        b == a + 1 || b[1] == '\0')
        goto bad;
    *a = '\0';
    *b = '\0';
    for (k = 0; k < RES_KIND_COUNT; k++)
        if (strcmp(s, res_kind_name((enum res_kind)k)) == 0)
            break;
    if (k == RES_KIND_COUNT)
        goto bad;
    kv->ns = a + 1;
    kv->name = b + 1;
    return;
bad:
    s[0] = '\0';
    kv->ns = s;
    kv->name = s;
}

static void kvs_dispose(struct kvs *k)
{
    for (size_t i = 0; i < k->n; i++) {
        free(k->v[i].key);
        free(k->v[i].value);
        free(k->v[i].kind);
    }
    free(k->v);
    memset(k, 0, sizeof(*k));
}

static int read_prefix(struct cli *c, struct kvs *out)
{
    struct buf body;
    struct wait w;
    struct arena a;
    struct etcd_range r;
    const char *why = NULL;
    char end[512];
    size_t pn = strlen(c->prefix);
    struct slice key = {c->prefix, pn}, se = {end, 0};
    int rc = -1;

    memset(out, 0, sizeof(*out));
    se.n = etcd_prefix_end(c->prefix, pn, end);
    buf_init(&body, 64 * 1024);
    etcd_req_range(&body, key, se, 0);
    if (post_once(c, "/v3/kv/range", &body, &w, 1) < 0) {
        buf_dispose(&body);
        return -1;
    }
    buf_dispose(&body);
    if (w.status != 200) {
        progress_end(c);
        print_error_answer("range", &w);
        free(w.body);
        return -1;
    }
    arena_init(&a, 64 * 1024);
    if (etcd_parse_range(&a, w.body, w.n, &r, &why) < 0) {
        progress_end(c);
        fprintf(stderr, "Error: range: %s\n", why);
        goto out;
    }
    out->v = calloc(r.n + 1, sizeof(*out->v));
    if (out->v == NULL)
        goto out;
    out->revision = r.header.revision;
    for (size_t i = 0; i < r.n; i++) {
        struct kv *kv = &out->v[out->n];
        if (r.kvs[i].key.n <= pn || memchr(r.kvs[i].key.p, 0, r.kvs[i].key.n))
            continue;
        kv->key = strndup(r.kvs[i].key.p, r.kvs[i].key.n);
        kv->value = malloc(r.kvs[i].value.n + 1);
        if (kv->key == NULL || kv->value == NULL)
            goto out;
        memcpy(kv->value, r.kvs[i].value.p, r.kvs[i].value.n);
        kv->value[r.kvs[i].value.n] = '\0';
        kv->vlen = r.kvs[i].value.n;
        kv->mod_revision = r.kvs[i].mod_revision;
        kv_names(c->prefix, kv);
        out->n++;
        if (kv->kind == NULL)
            goto out;
    }
    rc = 0;
out:
    arena_dispose(&a);
    free(w.body);
    return rc;
}

static const struct kv *kvs_find(const struct kvs *k, const char *key)
{
    for (size_t i = 0; i < k->n; i++)
        if (strcmp(k->v[i].key, key) == 0)
            return &k->v[i];
    return NULL;
}

/* --- checking --------------------------------------------------------- */

/*
 * check() loads dir (NULL: none) and the keys of k not in skip (a list of
 * keys of n entries), analyses them and prints every message to f.
 * Returns the number of errors, or -1 when memory ran out.
 */
static int check(struct cli *c, const char *dir, const struct kvs *k,
                 char *const *skip, size_t nskip, FILE *f)
{
    struct res_input *in = calloc(k->n + 1, sizeof(*in));
    struct resource_set *set;
    struct analysis an;
    size_t n = 0;
    int nerr;

    if (in == NULL)
        return -1;
    for (size_t i = 0; i < k->n; i++) {
        int skipped = 0;
        for (size_t j = 0; j < nskip && !skipped; j++)
            skipped = strcmp(skip[j], k->v[i].key) == 0;
        if (skipped)
            continue;
        in[n].name = k->v[i].key;
        in[n].data = k->v[i].value;
        in[n].len = k->v[i].vlen;
        in[n].kind = k->v[i].kind;
        in[n].ns = k->v[i].ns;
        in[n].rname = k->v[i].name;
        n++;
    }
    set = resource_load_inputs(dir, NULL, in, n, NULL, NULL);
    free(in);
    if (set == NULL)
        return -1;
    memset(&an, 0, sizeof(an));
    nerr = analyze_node(set, c->outbound_mode, NULL, &an);
    if (f != NULL && an.msgs.n > 0)
        progress_end(c);
    for (size_t i = 0; f != NULL && i < an.msgs.n; i++) {
        struct buf b;
        buf_init(&b, 64 * 1024);
        analysis_msg_text(&b, &an.msgs.v[i]);
        fprintf(f, "%s\n", buf_cstr(&b));
        buf_dispose(&b);
    }
    analysis_dispose(&an);
    resource_set_free(set);
    return nerr;
}

static int txn(struct cli *c, const struct etcd_txn_op *ops, size_t n,
               int64_t *revision)
{
    struct buf body;
    struct wait w;
    struct arena a;
    struct etcd_txn t;
    const char *why = NULL;
    int rc = -1;

    buf_init(&body, MAX_ANSWER);
    if (etcd_req_txn(&body, ops, n) < 0) {
        progress_end(c);
        fprintf(stderr, "Error: the transaction is too large\n");
        buf_dispose(&body);
        return -1;
    }
    if (post_once(c, "/v3/kv/txn", &body, &w, 1) < 0) {
        buf_dispose(&body);
        return -1;
    }
    buf_dispose(&body);
    arena_init(&a, 4096);
    if (w.status != 200) {
        progress_end(c);
        print_error_answer("txn", &w);
    } else if (etcd_parse_txn(&a, w.body, w.n, &t, &why) < 0) {
        progress_end(c);
        fprintf(stderr, "Error: txn: %s\n", why);
    } else if (!t.succeeded) {
        progress_end(c);
        fprintf(stderr, "Error: the resources changed in etcd while this "
                        "command ran; nothing was written, run it again\n");
    } else {
        *revision = t.header.revision;
        rc = 0;
    }
    arena_dispose(&a);
    free(w.body);
    return rc;
}

/* --- apply ------------------------------------------------------------ */

/* One resource to write: its key and the text of its document. */
struct doc {
    char *key;
    char *text;
    size_t n;
    char *what; /* "VirtualService default/web" */
};

static int is_sep(const char *line, size_t n)
{
    return n >= 3 && memcmp(line, "---", 3) == 0 &&
           (n == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
}

static int is_end(const char *line, size_t n)
{
    return n >= 3 && memcmp(line, "...", 3) == 0 &&
           (n == 3 || line[3] == ' ' || line[3] == '\r');
}

/* Adds the resource of one document (text, n) of file, starting on its
 * line line, to docs. */
static int add_doc(struct cli *c, const char *file, int line, const char *text,
                   size_t n, struct doc **docs, size_t *ndocs)
{
    struct resource_set *set;
    int nerr = 0;
    const struct resource *r = NULL;
    struct doc *v, *d;
    size_t written = 0;

    set = resource_load_mem(text, n, file, NULL, &nerr);
    if (set == NULL)
        return -1;
    /* What the Gateway API lowers to is not the document's: etcd keeps
     * the document (the Gateway or HTTPRoute) and every strait lowers it
     * again. */
    for (size_t i = 0; i < set->n; i++)
        if (strcmp(set->v[i]->file, GWAPI_FILE) != 0 && written++ == 0)
            r = set->v[i];
    if (written == 0 || nerr > 0) {
        /* Not an Istio resource (ignored), or errors the check of the
         * whole set prints. */
        resource_set_free(set);
        return 0;
    }
    if (written > 1) {
        progress_end(c);
        fprintf(stderr,
                "Error: %s:%d:1: a List holds %zu resources (%s %s/%s "
                "first); etcd keeps one per key: write them as separate "
                "documents\n",
                file, line, written, res_kind_name(r->kind), r->meta.ns,
                r->meta.name);
        resource_set_free(set);
        return -1;
    }
    v = realloc(*docs, (*ndocs + 1) * sizeof(*v));
    if (v == NULL) {
        resource_set_free(set);
        return -1;
    }
    *docs = v;
    d = &v[*ndocs];
    memset(d, 0, sizeof(*d));
    if (asprintf(&d->key, "%s%s/%s/%s", c->prefix, res_kind_name(r->kind),
                 r->meta.ns, r->meta.name) < 0 ||
        asprintf(&d->what, "%s %s/%s", res_kind_name(r->kind), r->meta.ns,
                 r->meta.name) < 0 ||
        (d->text = strndup(text, n)) == NULL) {
        resource_set_free(set);
        return -1;
    }
    d->n = n;
    (*ndocs)++;
    /* A resource given twice: the later one is written, as the loader
     * keeps it. */
    for (size_t i = 0; i + 1 < *ndocs; i++) {
        if (strcmp(v[i].key, d->key) == 0) {
            free(v[i].key);
            free(v[i].text);
            free(v[i].what);
            memmove(&v[i], &v[i + 1], (*ndocs - i - 1) * sizeof(*v));
            (*ndocs)--;
            break;
        }
    }
    resource_set_free(set);
    return 0;
}

static int split_file(struct cli *c, const char *file, struct doc **docs,
                      size_t *ndocs)
{
    FILE *f = fopen(file, "rb");
    struct buf b;
    const char *p, *end, *start;
    char tmp[65536];
    size_t got;
    int rc = 0, lineno = 0, start_line = 1;

    /* The end of a long name says which file it is. */
    progress(c, "apply: reading %s (%zu resource(s) so far)",
             file + (strlen(file) > 60 ? strlen(file) - 60 : 0), *ndocs);
    if (f == NULL) {
        progress_end(c);
        fprintf(stderr, "Error: %s: %s\n", file, strerror(errno));
        return -1;
    }
    buf_init(&b, RESOURCE_MAX_FILE_BYTES);
    while ((got = fread(tmp, 1, sizeof(tmp), f)) > 0)
        if (buf_append(&b, tmp, got) < 0) {
            fclose(f);
            buf_dispose(&b);
            fprintf(stderr, "Error: %s: too large\n", file);
            return -1;
        }
    fclose(f);
    p = buf_len(&b) ? buf_ptr(&b) : "";
    end = p + buf_len(&b);
    start = p;
    while (p < end && rc == 0) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *next = eol ? eol + 1 : end;
        size_t ln = (size_t)((eol ? eol : end) - p);
        lineno++;
        if (is_sep(p, ln) || is_end(p, ln)) {
            if (p > start)
                rc = add_doc(c, file, start_line, start, (size_t)(p - start),
                             docs, ndocs);
            start = next;
            start_line = lineno + 1;
        }
        p = next;
    }
    if (rc == 0 && end > start)
        rc = add_doc(c, file, start_line, start, (size_t)(end - start), docs,
                     ndocs);
    buf_dispose(&b);
    return rc;
}

static int has_ext(const char *n)
{
    size_t l = strlen(n);

    return (l > 5 && strcmp(n + l - 5, ".yaml") == 0) ||
           (l > 4 && strcmp(n + l - 4, ".yml") == 0) ||
           (l > 5 && strcmp(n + l - 5, ".json") == 0);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The files of path as resource_load() reads them: a file, or a
 * directory's *.yaml, *.yml, *.json in name order. */
static int split_path(struct cli *c, const char *path, struct doc **docs,
                      size_t *ndocs)
{
    DIR *d = opendir(path);
    struct dirent *de;
    char **names = NULL;
    size_t n = 0;
    int rc = 0;

    if (d == NULL)
        return split_file(c, path, docs, ndocs);
    while ((de = readdir(d)) != NULL) {
        char **v;
        struct stat st;
        char *full;
        if (de->d_name[0] == '.' || !has_ext(de->d_name))
            continue;
        if (asprintf(&full, "%s/%s", path, de->d_name) < 0)
            break;
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(full);
            continue;
        }
        v = realloc(names, (n + 1) * sizeof(*v));
        if (v == NULL) {
            free(full);
            break;
        }
        names = v;
        names[n++] = full;
    }
    closedir(d);
    if (n > 1) /* names is NULL in an empty directory */
        qsort(names, n, sizeof(*names), cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0)
            rc = split_file(c, names[i], docs, ndocs);
        free(names[i]);
    }
    free(names);
    return rc;
}

static int cmd_apply(struct cli *c, const char *path)
{
    struct doc *docs = NULL;
    size_t ndocs = 0, nops = 0;
    struct kvs k;
    struct etcd_txn_op *ops = NULL;
    char **skip = NULL;
    int before, after, rc = 1;
    int64_t rev = 0;

    if (split_path(c, path, &docs, &ndocs) < 0)
        goto out;
    progress(c, "apply: %zu resource(s) read; reading %s from etcd", ndocs,
             c->prefix);
    if (read_prefix(c, &k) < 0)
        goto out_docs;
    skip = calloc(ndocs + 1, sizeof(*skip));
    ops = calloc(ndocs + 1, sizeof(*ops));
    if (skip == NULL || ops == NULL)
        goto out_kvs;
    for (size_t i = 0; i < ndocs; i++)
        skip[i] = docs[i].key;
    /* What the prefix holds now, and with the files in place of the
     * resources they define: refused when the change brings errors. */
    progress(c, "apply: checking %zu resource(s) with the %zu of %s", ndocs,
             k.n, c->prefix);
    before = check(c, NULL, &k, NULL, 0, NULL);
    after = check(c, path, &k, skip, ndocs, stderr);
    progress_end(c);
    if (after < 0 || before < 0) {
        fprintf(stderr, "Error: out of memory\n");
        goto out_kvs;
    }
    if (after > 0 && after >= before) {
        fprintf(stderr,
                "Error: %s: %d error(s) with what %s holds; nothing was "
                "written\n",
                path, after, c->prefix);
        goto out_kvs;
    }
    for (size_t i = 0; i < ndocs; i++) {
        const struct kv *o = kvs_find(&k, docs[i].key);
        if (o != NULL && o->vlen == docs[i].n &&
            memcmp(o->value, docs[i].text, o->vlen) == 0) {
            printf("%s unchanged\n", docs[i].what);
            continue;
        }
        ops[nops].key = slice_of(docs[i].key);
        ops[nops].value = (struct slice){docs[i].text, docs[i].n};
        ops[nops].mod_revision = o ? o->mod_revision : 0;
        nops++;
        printf("%s %s\n", docs[i].what, o ? "configured" : "created");
    }
    if (nops == 0) {
        printf("nothing to write (revision %lld)\n", (long long)k.revision);
        rc = 0;
        goto out_kvs;
    }
    progress(c, "apply: writing %zu resource(s) in one transaction", nops);
    rc = txn(c, ops, nops, &rev);
    progress_end(c);
    if (rc < 0) {
        rc = 1;
        goto out_kvs;
    }
    printf("applied %zu resource(s) at revision %lld\n", nops, (long long)rev);
    rc = 0;
out_kvs:
    kvs_dispose(&k);
out_docs:
    progress_end(c);
    for (size_t i = 0; i < ndocs; i++) {
        free(docs[i].key);
        free(docs[i].text);
        free(docs[i].what);
    }
out:
    free(docs);
    free(skip);
    free(ops);
    return rc;
}

/* --- delete, get ------------------------------------------------------ */

/* KIND as typed: the Kind in any case, or its plural ("virtualservices"). */
static const char *kind_of(const char *s)
{
    /* Istio's short names, as kubectl takes them. */
    static const char *const shorts[RES_KIND_COUNT] = {
        "gw", "vs", "dr", "se", "we", "ap", "pa", "ra",
    };
    size_t n = strlen(s);

    for (int k = 0; k < RES_KIND_COUNT; k++)
        if (shorts[k] != NULL && strcasecmp(s, shorts[k]) == 0)
            return res_kind_name((enum res_kind)k);
    for (int k = 0; k < RES_KIND_COUNT; k++) {
        const char *name = res_kind_name((enum res_kind)k);
        size_t kn = strlen(name);
        if (strcasecmp(s, name) == 0 ||
            (n == kn + 1 && strncasecmp(s, name, kn) == 0 &&
             (s[kn] == 's' || s[kn] == 'S')))
            return name;
    }
    return NULL;
}

static int cmd_delete(struct cli *c, const char *kind, const char *name,
                      const char *ns)
{
    struct kvs k;
    char *key = NULL;
    const struct kv *o;
    struct etcd_txn_op op;
    int before, after, rc = 1;
    int64_t rev = 0;

    if (read_prefix(c, &k) < 0)
        return 1;
    if (asprintf(&key, "%s%s/%s/%s", c->prefix, kind, ns, name) < 0) {
        key = NULL;
        goto out;
    }
    o = kvs_find(&k, key);
    if (o == NULL) {
        fprintf(stderr, "Error: %s %s/%s not found (no key %s)\n", kind, ns,
                name, key);
        goto out;
    }
    before = check(c, NULL, &k, NULL, 0, NULL);
    after = check(c, NULL, &k, &key, 1, stderr);
    if (after > 0 && after >= before) {
        fprintf(stderr,
                "Error: without %s %s/%s, %s has %d error(s); nothing was "
                "deleted\n",
                kind, ns, name, c->prefix, after);
        goto out;
    }
    memset(&op, 0, sizeof(op));
    op.key = slice_of(key);
    op.del = 1;
    op.mod_revision = o->mod_revision;
    if (txn(c, &op, 1, &rev) < 0)
        goto out;
    printf("%s %s/%s deleted at revision %lld\n", kind, ns, name,
           (long long)rev);
    rc = 0;
out:
    free(key);
    kvs_dispose(&k);
    return rc;
}

static int cmd_get(struct cli *c, const char *kind, const char *name,
                   const char *ns)
{
    struct kvs k;
    int found = 0;

    if (read_prefix(c, &k) < 0)
        return 1;
    if (name == NULL)
        printf("%-24s %-40s %s\n", "NAMESPACE", "NAME", "REVISION");
    for (size_t i = 0; i < k.n; i++) {
        const struct kv *kv = &k.v[i];
        if (strcmp(kv->kind, kind) != 0 ||
            (ns != NULL && strcmp(kv->ns, ns) != 0) ||
            (name != NULL && strcmp(kv->name, name) != 0))
            continue;
        found++;
        if (name == NULL) {
            printf("%-24s %-40s %lld\n", kv->ns, kv->name,
                   (long long)kv->mod_revision);
        } else {
            fwrite(kv->value, 1, kv->vlen, stdout);
            if (kv->vlen == 0 || kv->value[kv->vlen - 1] != '\n')
                fputc('\n', stdout);
        }
    }
    kvs_dispose(&k);
    if (name != NULL && found == 0) {
        fprintf(stderr, "Error: %s %s/%s not found\n", kind,
                ns ? ns : "default", name);
        return 1;
    }
    return 0;
}

/* --- command line ----------------------------------------------------- */

static void usage(FILE *f, const char *cmd)
{
    if (strcmp(cmd, "apply") == 0)
        fprintf(f, "usage: strait apply -f FILE|DIR [-c FILE] [--endpoints "
                   "URL,...] [--prefix P]\n\n"
                   "Checks the resources of FILE or DIR against what the etcd "
                   "prefix holds (the\nmessages of strait check) and writes "
                   "them in one transaction.\n");
    else if (strcmp(cmd, "delete") == 0)
        fprintf(f, "usage: strait delete KIND NAME [-n NAMESPACE] [-c FILE] "
                   "[--endpoints URL,...]\n\n"
                   "Deletes one resource from etcd, unless what remains "
                   "would have more errors.\n");
    else
        fprintf(f, "usage: strait get KIND [NAME] [-n NAMESPACE] [-c FILE] "
                   "[--endpoints URL,...]\n\n"
                   "Lists the resources of a kind in etcd, or prints one.\n");
    fprintf(f, "\n  -c, --config FILE   bootstrap whose config.etcd is used "
               "(default /etc/strait/strait.yaml)\n"
               "  --endpoints URLS    etcd members, comma-separated (instead "
               "of config.etcd)\n"
               "  --prefix P          the key prefix (instead of "
               "config.etcd.prefix)\n");
}

static int split_endpoints(const char *s, struct conf_strs *out)
{
    char *copy = strdup(s), *save = NULL, *tok;

    if (copy == NULL)
        return -1;
    for (tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        char **v = realloc(out->v, (out->n + 1) * sizeof(*v));
        if (v == NULL)
            break;
        out->v = v;
        out->v[out->n] = strdup(tok);
        if (out->v[out->n] != NULL)
            out->n++;
    }
    free(copy);
    return 0;
}

int etcd_cli_main(const char *cmd, int argc, char **argv,
                  const char *default_config)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"filename", required_argument, NULL, 'f'},
        {"namespace", required_argument, NULL, 'n'},
        {"endpoints", required_argument, NULL, 'e'},
        {"prefix", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *config = NULL, *file = NULL, *ns = NULL, *endpoints = NULL,
               *prefix = NULL;
    struct bootstrap *bs = NULL;
    struct bootstrap_etcd conf;
    struct conf_strs eps = {NULL, 0};
    struct cli c;
    char *err = NULL;
    int opt, rc = 2;

    memset(&c, 0, sizeof(c));
    optind = 1;
    while ((opt = getopt_long(argc, argv, "c:f:n:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            config = optarg;
            break;
        case 'f':
            file = optarg;
            break;
        case 'n':
            ns = optarg;
            break;
        case 'e':
            endpoints = optarg;
            break;
        case 'p':
            prefix = optarg;
            break;
        case 'h':
            usage(stdout, cmd);
            return 0;
        default:
            usage(stderr, cmd);
            return 2;
        }
    }
    if (strcmp(cmd, "apply") == 0    ? (file == NULL || optind != argc)
        : strcmp(cmd, "delete") == 0 ? optind + 2 != argc
                                     : (optind == argc || optind + 2 < argc)) {
        usage(stderr, cmd);
        return 2;
    }
    if (config != NULL || endpoints == NULL) {
        bs = bootstrap_load(config ? config : default_config, &err);
        if (bs == NULL) {
            fprintf(stderr, "%s\n", err ? err : "invalid configuration");
            free(err);
            return 1;
        }
        conf = bs->config.etcd;
        c.outbound_mode = bs->outbound.mode;
    } else {
        memset(&conf, 0, sizeof(conf));
        conf.prefix = (char *)"/strait";
        conf.ca_file = conf.cert_file = conf.key_file = (char *)"";
        conf.username = conf.password = (char *)"";
        conf.request_timeout_ms = 30000;
        c.outbound_mode = RES_REGISTRY_ONLY;
    }
    if (endpoints != NULL) {
        split_endpoints(endpoints, &eps);
        conf.endpoints = eps;
    }
    if (prefix != NULL)
        conf.prefix = (char *)prefix;
    if (conf.endpoints.n == 0) {
        fprintf(stderr, "Error: no etcd endpoints (config.etcd.endpoints or "
                        "--endpoints)\n");
        rc = 1;
        goto out;
    }
    c.conf = &conf;
    c.eps = conf.endpoints.v;
    c.neps = conf.endpoints.n;
    c.base = event_base_new();
    if (c.base == NULL || asprintf(&c.prefix, "%s/", conf.prefix) < 0) {
        c.prefix = NULL;
        rc = 1;
        goto out;
    }
    {
        const struct dns_conf sys = {NULL, 0, 5000, 5000, NULL};
        struct dns_conf dc = sys;

        if (bs != NULL) {
            dc.nameservers = bs->dns.nameservers.v;
            dc.nnameservers = bs->dns.nameservers.n;
            dc.timeout_ms = (uint64_t)bs->dns.timeout_ms;
            dc.resolv_conf = bs->dns.resolv_conf;
        }
        c.dns = dns_cache_new(c.base, &dc, no_change, NULL, &err);
        if (c.dns == NULL) {
            fprintf(stderr, "Error: dns: %s\n", err ? err : "out of memory");
            free(err);
            rc = 1;
            goto out;
        }
    }
    for (size_t i = 0; i < c.neps; i++) {
        if (strncmp(c.eps[i], "https://", 8) == 0 && c.ctx == NULL) {
            struct tls_client_conf tc;
            memset(&tc, 0, sizeof(tc));
            tc.ca_file = conf.ca_file;
            tc.cert_file = conf.cert_file[0] ? conf.cert_file : NULL;
            tc.key_file = conf.key_file[0] ? conf.key_file : NULL;
            c.ctx = tls_client_ctx_build(&tc, &err);
            if (c.ctx == NULL) {
                fprintf(stderr, "Error: config.etcd: %s\n", err ? err : "TLS");
                free(err);
                rc = 1;
                goto out;
            }
        }
    }
    rc = 1;
    if (authenticate(&c) < 0)
        goto out;
    if (strcmp(cmd, "apply") == 0) {
        c.tty = isatty(STDERR_FILENO);
        rc = cmd_apply(&c, file);
    } else {
        const char *kind = kind_of(argv[optind]);
        if (kind == NULL) {
            fprintf(stderr, "Error: unknown kind '%s'\n", argv[optind]);
            goto out;
        }
        if (strcmp(cmd, "delete") == 0)
            rc = cmd_delete(&c, kind, argv[optind + 1], ns ? ns : "default");
        else
            rc = cmd_get(&c, kind, optind + 1 < argc ? argv[optind + 1] : NULL,
                         ns != NULL || optind + 1 == argc ? ns : "default");
    }
out:
    for (size_t i = 0; i < eps.n; i++)
        free(eps.v[i]);
    free(eps.v);
    free(c.prefix);
    free(c.token);
    SSL_CTX_free(c.ctx);
    dns_cache_free(c.dns);
    if (c.base != NULL)
        event_base_free(c.base);
    bootstrap_free(bs);
    return rc;
}
