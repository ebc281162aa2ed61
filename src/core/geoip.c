/*
 * GeoIP lookups in MaxMind databases: see geoip.h for the contract.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <maxminddb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/geoip.h"
#include "core/json.h"
#include "core/log.h"

/* One opened database file: its copy in a memfd, mapped by
 * libmaxminddb. Shared by the sets that use it; closed with the last. */
struct geoip_file {
    int refs; /* atomic */
    MMDB_s mmdb;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

/* The databases new lookups use, one per slot (NULL: not configured). */
struct geoip_dbs {
    int refs; /* atomic */
    struct geoip_file *f[GEOIP_NDB];
};

enum { C_TOTAL, C_HIT, C_ERROR, C_N };

/* Worker w's own: only it writes here (counters with relaxed stores,
 * read by the control thread with relaxed loads). */
struct geoip_worker {
    struct geoip_dbs *dbs; /* one reference; NULL before the first lookup */
    unsigned gen;
    uint64_t rq_total;
    uint64_t c[GEOIP_NDB][C_N];
} __attribute__((aligned(64)));

struct geoip {
    char *path[GEOIP_NDB];
    pthread_mutex_t lock; /* guards cur */
    struct geoip_dbs *cur;
    unsigned gen; /* atomic: moves when cur is replaced */
    /* Control thread only. */
    uint64_t reload_ok[GEOIP_NDB], reload_err[GEOIP_NDB];
    char *last_error[GEOIP_NDB];
    int nworkers;
    struct geoip_worker *w;
};

static const char *const db_names[GEOIP_NDB] = {"city", "country", "asn", "isp",
                                                "anon"};
/* What metadata.database_type must contain for each slot (MaxMind's
 * GeoIP2-City, GeoLite2-Country, GeoLite2-ASN, GeoIP2-ISP,
 * GeoIP2-Anonymous-IP and the DBIP-* equivalents). */
static const char *const db_types[GEOIP_NDB] = {"City", "Country", "ASN", "ISP",
                                                "Anonymous"};
static const char *const field_names[GEOIP_NFIELDS] = {
    "country", "city",    "region",      "asn",     "asnOrg",    "isp",
    "anon",    "anonVpn", "anonHosting", "anonTor", "anonProxy",
};

const char *geoip_field_name(enum geoip_field f)
{
    return (unsigned)f < GEOIP_NFIELDS ? field_names[f] : "";
}

int geoip_field_by_name(const char *name, size_t n)
{
    for (int i = 0; i < GEOIP_NFIELDS; i++)
        if (strlen(field_names[i]) == n && memcmp(field_names[i], name, n) == 0)
            return i;
    return -1;
}

const char *geoip_db_name(enum geoip_db d)
{
    return (unsigned)d < GEOIP_NDB ? db_names[d] : "";
}

const char *geo_result_get(const struct geo_result *r, enum geoip_field f)
{
    if (r == NULL || (unsigned)f >= GEOIP_NFIELDS)
        return "";
    return r->v[f];
}

static void file_unref(struct geoip_file *f)
{
    if (f == NULL || __atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    MMDB_close(&f->mmdb);
    free(f);
}

static void dbs_unref(struct geoip_dbs *d)
{
    if (d == NULL || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (int i = 0; i < GEOIP_NDB; i++)
        file_unref(d->f[i]);
    free(d);
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
           a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/*
 * file_open() copies path into a memfd and opens that: what libmaxminddb
 * maps is then private to this process, so nothing done to the file
 * afterwards reaches a lookup. The copy is refused when the file changed
 * while it was read (its size or mtime moved), and the database when
 * its metadata is not of the slot's type. NULL with *err set.
 */
static struct geoip_file *file_open(enum geoip_db slot, const char *path,
                                    char **err)
{
    struct geoip_file *f = NULL;
    struct stat st, st2;
    char proc[64], chunk[65536];
    int fd = -1, mfd = -1, rc;
    off_t got = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        err_set(err, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        err_set(err, "%s: not a regular file", path);
        goto fail;
    }
    mfd = memfd_create("strait-geoip", MFD_CLOEXEC);
    if (mfd < 0) {
        err_set(err, "%s: memfd_create: %s", path, strerror(errno));
        goto fail;
    }
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            err_set(err, "%s: %s", path, strerror(errno));
            goto fail;
        }
        if (n == 0)
            break;
        for (ssize_t o = 0; o < n;) {
            ssize_t w = write(mfd, chunk + o, (size_t)(n - o));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                err_set(err, "%s: copying: %s", path, strerror(errno));
                goto fail;
            }
            o += w;
        }
        got += n;
    }
    if (fstat(fd, &st2) < 0 || !same_file(&st, &st2) || got != st.st_size) {
        err_set(err, "%s: the file changed while it was read", path);
        goto fail;
    }
    f = calloc(1, sizeof(*f));
    if (f == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", mfd);
    rc = MMDB_open(proc, MMDB_MODE_MMAP, &f->mmdb);
    if (rc != MMDB_SUCCESS) {
        err_set(err, "%s: %s", path, MMDB_strerror(rc));
        free(f);
        f = NULL;
        goto fail;
    }
    if (f->mmdb.metadata.database_type == NULL ||
        strstr(f->mmdb.metadata.database_type, db_types[slot]) == NULL) {
        err_set(err, "%s: database_type '%s' is not a %s database", path,
                f->mmdb.metadata.database_type ? f->mmdb.metadata.database_type
                                               : "",
                db_names[slot]);
        MMDB_close(&f->mmdb);
        free(f);
        f = NULL;
        goto fail;
    }
    f->refs = 1;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->size = st.st_size;
    f->mtime = st.st_mtim;
fail:
    /* libmaxminddb mapped its own descriptor; ours go. */
    if (mfd >= 0)
        close(mfd);
    if (fd >= 0)
        close(fd);
    return f;
}

struct geoip *geoip_new(const char *const paths[GEOIP_NDB], int nworkers,
                        char **err)
{
    struct geoip *g = calloc(1, sizeof(*g));

    if (g == NULL || nworkers < 1)
        goto oom;
    pthread_mutex_init(&g->lock, NULL);
    g->nworkers = nworkers;
    g->w = aligned_alloc(64, sizeof(*g->w) * (size_t)nworkers);
    g->cur = calloc(1, sizeof(*g->cur));
    if (g->w == NULL || g->cur == NULL)
        goto oom;
    memset(g->w, 0, sizeof(*g->w) * (size_t)nworkers);
    g->cur->refs = 1;
    for (int i = 0; i < GEOIP_NDB; i++) {
        if (paths[i] == NULL || paths[i][0] == '\0')
            continue;
        g->path[i] = strdup(paths[i]);
        if (g->path[i] == NULL)
            goto oom;
        g->cur->f[i] = file_open((enum geoip_db)i, paths[i], err);
        if (g->cur->f[i] == NULL) {
            err_prefix(err, "geoip.databases.%s: ", db_names[i]);
            geoip_free(g);
            return NULL;
        }
    }
    return g;
oom:
    err_set(err, "out of memory");
    geoip_free(g);
    return NULL;
}

void geoip_free(struct geoip *g)
{
    if (g == NULL)
        return;
    for (int w = 0; g->w != NULL && w < g->nworkers; w++)
        dbs_unref(g->w[w].dbs);
    free(g->w);
    dbs_unref(g->cur);
    for (int i = 0; i < GEOIP_NDB; i++) {
        free(g->path[i]);
        free(g->last_error[i]);
    }
    pthread_mutex_destroy(&g->lock);
    free(g);
}

const char *geoip_path(const struct geoip *g, enum geoip_db d)
{
    return g != NULL && (unsigned)d < GEOIP_NDB ? g->path[d] : NULL;
}

int geoip_reload(struct geoip *g)
{
    struct geoip_dbs *next = NULL, *old;
    int changed = 0;

    for (int i = 0; i < GEOIP_NDB; i++) {
        const struct geoip_file *f = g->cur->f[i];
        struct geoip_file *nf;
        struct stat st;
        char *err = NULL;

        if (g->path[i] == NULL)
            continue;
        if (stat(g->path[i], &st) == 0 && f != NULL && st.st_dev == f->dev &&
            st.st_ino == f->ino && st.st_size == f->size &&
            st.st_mtim.tv_sec == f->mtime.tv_sec &&
            st.st_mtim.tv_nsec == f->mtime.tv_nsec)
            continue;
        /* The new database is opened before anything is swapped: a file
         * that does not open leaves the one in use alone. */
        nf = file_open((enum geoip_db)i, g->path[i], &err);
        if (nf == NULL) {
            g->reload_err[i]++;
            free(g->last_error[i]);
            g->last_error[i] = err;
            log_msg(LOG_WARN,
                    "geoip: %s database not reloaded, the one in use stays: "
                    "%s",
                    db_names[i], err ? err : "out of memory");
            continue;
        }
        if (next == NULL) {
            next = calloc(1, sizeof(*next));
            if (next == NULL) {
                file_unref(nf);
                log_msg(LOG_ERROR, "geoip: reload: out of memory");
                break;
            }
            next->refs = 1;
            for (int k = 0; k < GEOIP_NDB; k++)
                if ((next->f[k] = g->cur->f[k]) != NULL)
                    __atomic_add_fetch(&next->f[k]->refs, 1, __ATOMIC_RELAXED);
        }
        file_unref(next->f[i]);
        next->f[i] = nf;
        g->reload_ok[i]++;
        free(g->last_error[i]);
        g->last_error[i] = NULL;
        changed++;
        log_msg(LOG_INFO,
                "geoip: %s database reloaded from %s (%s, built %" PRIu64 ")",
                db_names[i], g->path[i], nf->mmdb.metadata.database_type,
                (uint64_t)nf->mmdb.metadata.build_epoch);
    }
    if (next == NULL)
        return changed;
    pthread_mutex_lock(&g->lock);
    old = g->cur;
    g->cur = next;
    __atomic_add_fetch(&g->gen, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g->lock);
    /* Workers still holding old keep it alive until their next lookup. */
    dbs_unref(old);
    return changed;
}

unsigned geoip_gen(const struct geoip *g)
{
    return __atomic_load_n(&g->gen, __ATOMIC_ACQUIRE);
}

void geoip_count_request(struct geoip *g, int w)
{
    struct geoip_worker *me = &g->w[w];
    __atomic_store_n(&me->rq_total, me->rq_total + 1, __ATOMIC_RELAXED);
}

/* The worker's set, taking the newer one when a reload published it. */
static struct geoip_dbs *worker_dbs(struct geoip *g, struct geoip_worker *me,
                                    unsigned *gen)
{
    unsigned now = geoip_gen(g);

    if (me->dbs == NULL || me->gen != now) {
        struct geoip_dbs *old = me->dbs;
        pthread_mutex_lock(&g->lock);
        me->dbs = g->cur;
        __atomic_add_fetch(&me->dbs->refs, 1, __ATOMIC_RELAXED);
        me->gen = g->gen;
        pthread_mutex_unlock(&g->lock);
        dbs_unref(old);
    }
    *gen = me->gen;
    return me->dbs;
}

static void bump(struct geoip_worker *me, int db, int c)
{
    __atomic_store_n(&me->c[db][c], me->c[db][c] + 1, __ATOMIC_RELAXED);
}

/* Copies the string or number at path into out (GEOIP_VALUE_MAX bytes);
 * 1 when there was one. */
static int get_value(MMDB_entry_s *e, char *out, const char *const *path)
{
    MMDB_entry_data_s d;
    size_t n;

    if (MMDB_aget_value(e, &d, path) != MMDB_SUCCESS || !d.has_data)
        return 0;
    switch (d.type) {
    case MMDB_DATA_TYPE_UTF8_STRING:
        n = d.data_size < GEOIP_VALUE_MAX - 1 ? d.data_size
                                              : GEOIP_VALUE_MAX - 1;
        /* A NUL inside would cut the value where C reads it: the string
         * is not what the database says, so it counts as absent. */
        if (memchr(d.utf8_string, '\0', n) != NULL)
            return 0;
        memcpy(out, d.utf8_string, n);
        out[n] = '\0';
        return 1;
    case MMDB_DATA_TYPE_UINT16:
        snprintf(out, GEOIP_VALUE_MAX, "%u", (unsigned)d.uint16);
        return 1;
    case MMDB_DATA_TYPE_UINT32:
        snprintf(out, GEOIP_VALUE_MAX, "%" PRIu32, d.uint32);
        return 1;
    case MMDB_DATA_TYPE_INT32:
        snprintf(out, GEOIP_VALUE_MAX, "%" PRId32, d.int32);
        return 1;
    case MMDB_DATA_TYPE_UINT64:
        snprintf(out, GEOIP_VALUE_MAX, "%" PRIu64, d.uint64);
        return 1;
    case MMDB_DATA_TYPE_BOOLEAN:
        snprintf(out, GEOIP_VALUE_MAX, "%s", d.boolean ? "true" : "false");
        return 1;
    default:
        return 0;
    }
}

static void set_field(struct geo_result *out, enum geoip_field f,
                      MMDB_entry_s *e, const char *const *path)
{
    if (out->found & (1u << f))
        return;
    if (get_value(e, out->v[f], path))
        out->found |= 1u << f;
}

/* Which fields each database gives, and where. */
static void map_entry(enum geoip_db db, MMDB_entry_s *e, struct geo_result *out)
{
    static const char *const country[] = {"country", "iso_code", NULL};
    static const char *const city[] = {"city", "names", "en", NULL};
    static const char *const region[] = {"subdivisions", "0", "iso_code", NULL};
    static const char *const asn[] = {"autonomous_system_number", NULL};
    static const char *const asn_org[] = {"autonomous_system_organization",
                                          NULL};
    static const char *const isp[] = {"isp", NULL};
    static const char *const anon[] = {"is_anonymous", NULL};
    static const char *const vpn[] = {"is_anonymous_vpn", NULL};
    static const char *const hosting[] = {"is_hosting_provider", NULL};
    static const char *const tor[] = {"is_tor_exit_node", NULL};
    static const char *const proxy[] = {"is_public_proxy", NULL};

    switch (db) {
    case GEOIP_CITY:
        set_field(out, GEOIP_F_COUNTRY, e, country);
        set_field(out, GEOIP_F_CITY, e, city);
        set_field(out, GEOIP_F_REGION, e, region);
        break;
    case GEOIP_COUNTRY:
        set_field(out, GEOIP_F_COUNTRY, e, country);
        break;
    case GEOIP_ASN:
        set_field(out, GEOIP_F_ASN, e, asn);
        set_field(out, GEOIP_F_ASN_ORG, e, asn_org);
        break;
    case GEOIP_ISP:
        /* Envoy: with both configured, the ASN comes from the asn db
         * (looked up first, so already set). */
        set_field(out, GEOIP_F_ASN, e, asn);
        set_field(out, GEOIP_F_ASN_ORG, e, asn_org);
        set_field(out, GEOIP_F_ISP, e, isp);
        break;
    case GEOIP_ANON: {
        /* An anonymous-ip database lists only the anonymous networks:
         * an address it holds has every flag it does not set false. */
        static const enum geoip_field fl[] = {
            GEOIP_F_ANON, GEOIP_F_ANON_VPN, GEOIP_F_ANON_HOSTING,
            GEOIP_F_ANON_TOR, GEOIP_F_ANON_PROXY};
        static const char *const *const paths[] = {anon, vpn, hosting, tor,
                                                   proxy};
        for (size_t i = 0; i < sizeof(fl) / sizeof(fl[0]); i++) {
            set_field(out, fl[i], e, paths[i]);
            if (!(out->found & (1u << fl[i]))) {
                snprintf(out->v[fl[i]], GEOIP_VALUE_MAX, "false");
                out->found |= 1u << fl[i];
            }
        }
        break;
    }
    default:
        break;
    }
}

unsigned geoip_lookup(struct geoip *g, int w, const struct sockaddr *sa,
                      struct geo_result *out)
{
    struct geoip_worker *me = &g->w[w];
    unsigned gen;
    struct geoip_dbs *d = worker_dbs(g, me, &gen);
    /* The asn db before the isp db: Envoy takes the ASN from it. */
    static const enum geoip_db order[GEOIP_NDB] = {
        GEOIP_CITY, GEOIP_COUNTRY, GEOIP_ASN, GEOIP_ISP, GEOIP_ANON};

    memset(out, 0, sizeof(*out));
    if (sa == NULL || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
        return gen;
    for (int k = 0; k < GEOIP_NDB; k++) {
        enum geoip_db i = order[k];
        int rc = MMDB_SUCCESS;
        MMDB_lookup_result_s r;

        if (d->f[i] == NULL)
            continue;
        bump(me, i, C_TOTAL);
        r = MMDB_lookup_sockaddr(&d->f[i]->mmdb, sa, &rc);
        if (rc != MMDB_SUCCESS) {
            bump(me, i, C_ERROR);
            continue;
        }
        if (!r.found_entry)
            continue;
        bump(me, i, C_HIT);
        map_entry(i, &r.entry, out);
    }
    return gen;
}

void geoip_prometheus(const struct geoip *g, struct buf *b)
{
    static const char *const fam[C_N][2] = {
        {"strait_geoip_lookups_total", "Lookups per GeoIP database."},
        {"strait_geoip_hits_total", "Lookups that found the address."},
        {"strait_geoip_lookup_errors_total", "Lookups that failed."}};
    uint64_t rq = 0;

    for (int w = 0; w < g->nworkers; w++)
        rq += __atomic_load_n(&g->w[w].rq_total, __ATOMIC_RELAXED);
    buf_printf(b,
               "# HELP strait_geoip_requests_total Requests that asked for "
               "a GeoIP result.\n# TYPE strait_geoip_requests_total "
               "counter\nstrait_geoip_requests_total %" PRIu64 "\n",
               rq);
    for (int c = 0; c < C_N; c++) {
        buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", fam[c][0], fam[c][1],
                   fam[c][0]);
        for (int i = 0; i < GEOIP_NDB; i++) {
            uint64_t v = 0;
            if (g->path[i] == NULL)
                continue;
            for (int w = 0; w < g->nworkers; w++)
                v += __atomic_load_n(&g->w[w].c[i][c], __ATOMIC_RELAXED);
            buf_printf(b, "%s{db=\"%s\"} %" PRIu64 "\n", fam[c][0], db_names[i],
                       v);
        }
    }
    buf_puts(b, "# HELP strait_geoip_db_reloads_total Database reloads by "
                "result.\n# TYPE strait_geoip_db_reloads_total counter\n");
    for (int i = 0; i < GEOIP_NDB; i++)
        if (g->path[i] != NULL)
            buf_printf(b,
                       "strait_geoip_db_reloads_total{db=\"%s\",result="
                       "\"success\"} %" PRIu64 "\n"
                       "strait_geoip_db_reloads_total{db=\"%s\",result="
                       "\"error\"} %" PRIu64 "\n",
                       db_names[i], g->reload_ok[i], db_names[i],
                       g->reload_err[i]);
    buf_puts(b, "# HELP strait_geoip_db_build_epoch The database's build "
                "time (metadata build_epoch).\n# TYPE "
                "strait_geoip_db_build_epoch gauge\n");
    for (int i = 0; i < GEOIP_NDB; i++)
        if (g->path[i] != NULL)
            buf_printf(b,
                       "strait_geoip_db_build_epoch{db=\"%s\"} %" PRIu64 "\n",
                       db_names[i],
                       g->cur->f[i] != NULL
                           ? (uint64_t)g->cur->f[i]->mmdb.metadata.build_epoch
                           : (uint64_t)0);
}

void geoip_stats(const struct geoip *g, struct buf *b)
{
    static const char *const cn[C_N] = {"total", "hit", "lookup_error"};
    uint64_t rq = 0;

    for (int w = 0; w < g->nworkers; w++)
        rq += __atomic_load_n(&g->w[w].rq_total, __ATOMIC_RELAXED);
    buf_printf(b, "geoip.rq_total: %" PRIu64 "\n", rq);
    for (int i = 0; i < GEOIP_NDB; i++) {
        const struct geoip_file *f = g->cur->f[i];
        if (g->path[i] == NULL)
            continue;
        for (int c = 0; c < C_N; c++) {
            uint64_t v = 0;
            for (int w = 0; w < g->nworkers; w++)
                v += __atomic_load_n(&g->w[w].c[i][c], __ATOMIC_RELAXED);
            buf_printf(b, "geoip.maxmind.%s_db.%s: %" PRIu64 "\n", db_names[i],
                       cn[c], v);
        }
        buf_printf(b, "geoip.maxmind.%s_db.db_reload_success: %" PRIu64 "\n",
                   db_names[i], g->reload_ok[i]);
        buf_printf(b, "geoip.maxmind.%s_db.db_reload_error: %" PRIu64 "\n",
                   db_names[i], g->reload_err[i]);
        buf_printf(b, "geoip.maxmind.%s_db.db_build_epoch: %" PRIu64 "\n",
                   db_names[i],
                   f ? (uint64_t)f->mmdb.metadata.build_epoch : (uint64_t)0);
        if (g->last_error[i] != NULL) {
            buf_printf(b, "geoip.maxmind.%s_db.last_error: ", db_names[i]);
            json_str(b, g->last_error[i]);
            buf_puts(b, "\n");
        }
    }
}
