/*
 * The set of MeshLink clients (see links.h).
 */
#include "config.h"

#include <inttypes.h>
#include <openssl/mem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/network.h"
#include "config/link-merge.h"
#include "config/resource.h"
#include "control/link/link_client.h"
#include "control/ca/pki.h"
#include "control/link/links.h"
#include "core/buf.h"
#include "core/json.h"
#include "core/log.h"
#include "core/strmap.h"
#include "tls/bundle.h"

struct link_entry {
    char *ns, *name;
    char *source; /* "MeshLink ns/name" */
    char *network, *gateway;
    int64_t port;
    char *ident; /* every field the client was made from */
    struct link_client *client;
    /* The hosts of its catalog left out at the last load, each
     * "host\0owner" (link-merge.h), for /links and the metric. */
    char **conflicts;
    size_t nconflicts;
};

struct links {
    STACK_OF(X509) * roots; /* every link's bundle roots (references) */
    char pin[65];           /* SHA-256 over their DER */
    struct event_base *base;
    struct ca_identity *id;
    struct dns_cache *dns;
    void (*on_change)(void *);
    void *arg;
    struct link_entry *v;
    size_t n;
    uint64_t seq; /* turns of announcements (link_client_conf.seq) */
};

struct links *links_new(struct event_base *base, struct ca_identity *id,
                        struct dns_cache *dns, void (*on_change)(void *),
                        void *arg)
{
    struct links *l = calloc(1, sizeof(*l));

    if (l == NULL)
        return NULL;
    l->base = base;
    l->id = id;
    l->dns = dns;
    l->on_change = on_change;
    l->arg = arg;
    return l;
}

static void conflicts_free(struct link_entry *e)
{
    for (size_t i = 0; i < e->nconflicts; i++)
        free(e->conflicts[i]);
    free(e->conflicts);
    e->conflicts = NULL;
    e->nconflicts = 0;
}

static void entry_dispose(struct link_entry *e)
{
    conflicts_free(e);
    link_client_free(e->client);
    free(e->source);
    free(e->network);
    free(e->gateway);
    free(e->ns);
    free(e->name);
    free(e->ident);
}

void links_free(struct links *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->n; i++)
        entry_dispose(&l->v[i]);
    free(l->v);
    sk_X509_pop_free(l->roots, X509_free);
    free(l);
}

/* The roots of every link's bundle, for ISTIO_MUTUAL to the linked
 * sites' services (bundles were checked when the resources loaded). */
static void roots_rebuild(struct links *l, const struct resource_set *set)
{
    SHA256_CTX sc;
    uint8_t h[32];

    sk_X509_pop_free(l->roots, X509_free);
    l->roots = sk_X509_new_null();
    SHA256_Init(&sc);
    for (size_t i = 0; set != NULL && l->roots != NULL && i < set->n; i++) {
        const struct res_mesh_link *ml;
        struct spiffe_bundle b;
        const char *why;
        if (set->v[i]->kind != RES_MESH_LINK)
            continue;
        ml = res_mesh_link(set->v[i]);
        if (bundle_parse(ml->trust_bundle, strlen(ml->trust_bundle), &b, &why) <
            0)
            continue;
        for (size_t k = 0; k < sk_X509_num(b.roots); k++) {
            X509 *x = sk_X509_value(b.roots, k);
            uint8_t *der = NULL;
            int len = i2d_X509(x, &der);
            if (len > 0)
                SHA256_Update(&sc, der, (size_t)len);
            OPENSSL_free(der);
            if (X509_up_ref(x) && !sk_X509_push(l->roots, x))
                X509_free(x);
        }
        bundle_dispose(&b);
    }
    SHA256_Final(h, &sc);
    pki_hex(h, 32, l->pin);
    if (l->roots != NULL && sk_X509_num(l->roots) == 0) {
        sk_X509_free(l->roots);
        l->roots = NULL;
    }
}

const struct stack_st_X509 *links_roots(const struct links *l, const char **pin)
{
    *pin = l->roots != NULL ? l->pin : "";
    return l->roots;
}

static char *ident_of(const struct res_mesh_link *ml)
{
    char *s = NULL;

    if (asprintf(&s, "%s\n%s\n%s\n%s\n%lld\n%s\n%s\n%lld\n%s", ml->network,
                 ml->trust_domain, ml->gateway.address, ml->catalog.address,
                 (long long)ml->gateway.port, ml->credential.token,
                 ml->trust_bundle, (long long)ml->retain_for_ms, "") < 0)
        return NULL;
    return s;
}

static struct link_entry *find(struct links *l, const char *ns,
                               const char *name)
{
    /* Entries links_sync() already moved to the new table are zeroed. */
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].ns != NULL && strcmp(l->v[i].ns, ns) == 0 &&
            strcmp(l->v[i].name, name) == 0)
            return &l->v[i];
    return NULL;
}

void links_sync(struct links *l, const struct resource_set *set)
{
    struct link_entry *next;
    size_t nn = 0, want = 0;
    int changed = 0;

    for (size_t i = 0; set != NULL && i < set->n; i++)
        want += set->v[i]->kind == RES_MESH_LINK;
    next = calloc(want + 1, sizeof(*next));
    if (next == NULL) {
        log_error("links: out of memory; the links stay as they were");
        return;
    }
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_mesh_link *ml;
        struct link_entry *old, *e = &next[nn];
        char *ident;

        if (r->kind != RES_MESH_LINK)
            continue;
        ml = res_mesh_link(r);
        ident = ident_of(ml);
        if (ident == NULL)
            continue;
        old = find(l, r->meta.ns, r->meta.name);
        if (old != NULL && old->client != NULL &&
            strcmp(old->ident, ident) == 0) {
            /* Unchanged: the same client, the same stream. */
            *e = *old;
            memset(old, 0, sizeof(*old));
            free(ident);
            nn++;
            continue;
        }
        {
            const struct link_client_conf conf = {r->meta.name,
                                                  r->meta.ns,
                                                  ml->catalog.address,
                                                  ml->credential.token,
                                                  ml->trust_domain,
                                                  ml->trust_bundle,
                                                  ml->network,
                                                  ml->gateway.address,
                                                  ml->gateway.port,
                                                  ml->retain_for_ms,
                                                  l->dns,
                                                  &l->seq};
            char *err = NULL;
            e->client = link_client_new(l->base, &conf, l->id, l->on_change,
                                        l->arg, &err);
            if (e->client == NULL) {
                log_error("MeshLink %s/%s: %s", r->meta.ns, r->meta.name,
                          err != NULL ? err : "cannot start");
                free(err);
                free(ident);
                continue;
            }
        }
        e->ns = strdup(r->meta.ns);
        e->name = strdup(r->meta.name);
        e->ident = ident;
        e->network = strdup(ml->network);
        e->gateway = strdup(ml->gateway.address);
        e->port = ml->gateway.port;
        if (asprintf(&e->source, "MeshLink %s/%s", r->meta.ns, r->meta.name) <
            0)
            e->source = NULL;
        if (e->ns == NULL || e->name == NULL || e->network == NULL ||
            e->gateway == NULL || e->source == NULL) {
            entry_dispose(e);
            memset(e, 0, sizeof(*e));
            continue;
        }
        log_info("MeshLink %s/%s: %s, to %s", r->meta.ns, r->meta.name,
                 old != NULL ? "changed; reconnecting" : "added",
                 ml->catalog.address);
        nn++;
    }
    /* What is left in the old table went away (or was replaced). */
    for (size_t i = 0; i < l->n; i++) {
        struct link_entry *e = &l->v[i];
        struct link_client_state st;
        if (e->client == NULL) {
            entry_dispose(e);
            continue;
        }
        link_client_state(e->client, &st);
        if (st.services > 0 || st.version >= 0)
            changed = 1;
        {
            int kept = 0;
            for (size_t k = 0; k < nn; k++)
                kept |= strcmp(next[k].ns, e->ns) == 0 &&
                        strcmp(next[k].name, e->name) == 0;
            if (!kept)
                log_info("MeshLink %s/%s: removed with its %zu service(s)",
                         e->ns, e->name, st.services);
        }
        entry_dispose(e);
    }
    free(l->v);
    l->v = next;
    l->n = nn;
    roots_rebuild(l, set);
    if (changed)
        l->on_change(l->arg);
}

size_t links_inputs(struct links *l, struct res_input **v, size_t n,
                    size_t *cap)
{
    for (size_t i = 0; i < l->n; i++) {
        size_t more = link_client_inputs(l->v[i].client, NULL, 0);
        if (n + more > *cap) {
            size_t nc = (n + more) * 2 + 8;
            struct res_input *nv = realloc(*v, nc * sizeof(**v));
            if (nv == NULL)
                return n;
            *v = nv;
            *cap = nc;
        }
        n += link_client_inputs(l->v[i].client, *v + n, more);
    }
    return n;
}

/* The "Kind ns/name" of r, allocated. */
static char *what_of(const struct resource *r)
{
    char *s = NULL;

    if (asprintf(&s, "%s %s/%s",
                 r->kind == RES_SERVICE ? "Service" : "ServiceEntry",
                 r->meta.ns, r->meta.name) < 0)
        return NULL;
    return s;
}

/* The MeshLink label of a registry entry a link made; NULL for others. */
static const char *link_label(const struct resource *r)
{
    if (r->kind != RES_SERVICE_ENTRY)
        return NULL;
    for (size_t i = 0; i < r->meta.labels.n; i++)
        if (strcmp(r->meta.labels.v[i].key, LINK_MERGE_LABEL) == 0)
            return r->meta.labels.v[i].val;
    return NULL;
}

/* Sets e's conflicts to those of m; logs the ones it did not have. */
static void conflicts_take(struct link_entry *e,
                           const struct link_merge_link *m)
{
    char **nv = NULL;
    size_t nn = 0;

    for (size_t j = 0; j < m->nhosts; j++)
        nn += !m->hosts[j].admit;
    if (nn > 0 && (nv = calloc(nn, sizeof(*nv))) == NULL)
        return;
    nn = 0;
    for (size_t j = 0; j < m->nhosts; j++) {
        const struct link_merge_host *h = &m->hosts[j];
        const char *owner = h->conflict != NULL ? h->conflict : "?";
        size_t hl = strlen(h->host), ol = strlen(owner);
        int known = 0;
        if (h->admit)
            continue;
        nv[nn] = malloc(hl + ol + 2);
        if (nv[nn] == NULL)
            continue;
        memcpy(nv[nn], h->host, hl + 1);
        memcpy(nv[nn] + hl + 1, owner, ol + 1);
        for (size_t k = 0; k < e->nconflicts && !known; k++)
            known = strcmp(e->conflicts[k], h->host) == 0;
        if (!known)
            log_warn("MeshLink %s/%s: the remote site announces %s, which "
                     "%s owns here; left out (to merge it, list it in "
                     "spec.import.hosts or its owner's namespace in "
                     "spec.import.namespaces)",
                     e->ns, e->name, h->host, owner);
        nn++;
    }
    conflicts_free(e);
    e->conflicts = nv;
    e->nconflicts = nn;
}

void links_filter(struct links *l, struct resource_set *set)
{
    struct link_merge_local *loc = NULL;
    struct link_merge_link *ml = NULL;
    struct link_client_host *hv = NULL;
    struct link_merge_host *mh = NULL;
    size_t *at = NULL; /* set index + 1 of each host's entry; 0: none */
    unsigned char *drop = NULL, *mine = NULL;
    char **whats = NULL;
    size_t nloc = 0, nh = 0, ndrop = 0, nset = set->n;
    int decided = 0;
    struct strmap byname; /* "ns/rname" -> host index + 1 */
    char key[512];

    strmap_init(&byname);
    for (size_t i = 0; i < l->n; i++)
        nh += link_client_hosts(l->v[i].client, NULL, 0);
    ml = calloc(l->n + 1, sizeof(*ml));
    hv = calloc(nh + 1, sizeof(*hv));
    mh = calloc(nh + 1, sizeof(*mh));
    at = calloc(nh + 1, sizeof(*at));
    drop = calloc(set->n + 1, 1);
    mine = calloc(set->n + 1, 1);
    if (ml == NULL || hv == NULL || mh == NULL || at == NULL || drop == NULL ||
        mine == NULL)
        goto done;
    /* Each link's hosts, and its spec.import from the set. */
    nh = 0;
    for (size_t i = 0; i < l->n; i++) {
        const struct link_entry *e = &l->v[i];
        const struct resource *r =
            resource_find(set, RES_MESH_LINK, e->ns, e->name);
        size_t n = link_client_hosts(e->client, hv + nh, SIZE_MAX);
        ml[i].ns = e->ns;
        ml[i].name = e->name;
        ml[i].source = e->source;
        if (r != NULL) {
            ml[i].import_hosts = &res_mesh_link(r)->import.hosts;
            ml[i].import_namespaces = &res_mesh_link(r)->import.namespaces;
        }
        ml[i].hosts = mh + nh;
        ml[i].nhosts = n;
        for (size_t j = 0; j < n; j++) {
            mh[nh + j].host = hv[nh + j].host;
            mh[nh + j].since = hv[nh + j].since;
            snprintf(key, sizeof(key), "%s/%s", e->ns, hv[nh + j].rname);
            if (strmap_put(&byname, key, (void *)(uintptr_t)(nh + j + 1)) < 0)
                goto done;
        }
        nh += n;
    }
    /* Which resources are the links' entries (a ServiceEntry a link made,
     * under the name it gave it), and this site's own hosts. */
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const char *lab = link_label(r);
        if (lab != NULL) {
            size_t hi;
            snprintf(key, sizeof(key), "%s/%s", r->meta.ns, r->meta.name);
            hi = (size_t)(uintptr_t)strmap_get(&byname, key);
            if (hi != 0) {
                at[hi - 1] = i + 1;
                mine[i] = 1;
                continue;
            }
        }
        if (res_is_service(r))
            nloc += res_service_entry(r)->hosts.n;
    }
    loc = calloc(nloc + 1, sizeof(*loc));
    whats = calloc(set->n + 1, sizeof(*whats));
    if (loc == NULL || whats == NULL)
        goto done;
    nloc = 0;
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_service_entry *se;
        if (mine[i] || !res_is_service(r))
            continue;
        se = res_service_entry(r);
        if ((whats[i] = what_of(r)) == NULL)
            goto done;
        for (size_t k = 0; k < se->hosts.n; k++) {
            char *fq = malloc(512);
            if (fq == NULL)
                goto done;
            if (res_host_fqdn(se->hosts.v[k], r->meta.ns, set->domain, fq,
                              512) < 0) {
                free(fq);
                continue;
            }
            loc[nloc].host = fq;
            loc[nloc].ns = r->meta.ns;
            loc[nloc].what = whats[i];
            nloc++;
        }
    }
    /* On failure every host is left out (admit 0). */
    if (link_merge_decide(loc, nloc, ml, l->n) < 0)
        log_error("links: out of memory deciding whose hosts the linked "
                  "sites' catalogs may join; leaving every linked host out");
    for (size_t j = 0; j < nh; j++)
        if (!mh[j].admit && at[j] != 0) {
            drop[at[j] - 1] = 1;
            ndrop++;
        }
    for (size_t i = 0; i < l->n; i++)
        conflicts_take(&l->v[i], &ml[i]);
    if (ndrop > 0)
        resource_set_remove(set, drop);
    decided = 1;
done:
    if (!decided) {
        /* Out of memory: refusing is the safe side, so every entry a link
         * made stays out of this load. */
        unsigned char *all = calloc(set->n + 1, 1);
        log_error("links: out of memory deciding whose hosts the linked "
                  "sites' catalogs may join; leaving every linked host out");
        for (size_t i = 0; all != NULL && i < set->n; i++)
            all[i] = link_label(set->v[i]) != NULL;
        if (all != NULL)
            resource_set_remove(set, all);
        free(all);
    }
    for (size_t i = 0; loc != NULL && i < nloc; i++)
        free((char *)loc[i].host);
    for (size_t i = 0; whats != NULL && i < nset; i++)
        free(whats[i]);
    strmap_dispose(&byname);
    free(whats);
    free(loc);
    free(mine);
    free(drop);
    free(at);
    free(mh);
    free(hv);
    free(ml);
}

size_t links_gateways(const struct links *l, struct net_gateway **v,
                      size_t *cap)
{
    if (l->n > *cap) {
        struct net_gateway *nv = realloc(*v, l->n * sizeof(*nv));
        if (nv == NULL)
            return 0;
        *v = nv;
        *cap = l->n;
    }
    for (size_t i = 0; i < l->n; i++) {
        (*v)[i].network = l->v[i].network;
        (*v)[i].address = l->v[i].gateway;
        (*v)[i].port = (uint32_t)l->v[i].port;
        (*v)[i].source = l->v[i].source;
        (*v)[i].identity = NULL; /* AUTO_PASSTHROUGH */
    }
    return l->n;
}

size_t links_count(const struct links *l)
{
    return l->n;
}

void links_json(const struct links *l, struct buf *b)
{
    buf_puts(b, "[");
    for (size_t i = 0; i < l->n; i++) {
        const struct link_entry *e = &l->v[i];
        buf_puts(b, i ? "," : "");
        link_client_json(e->client, b);
        /* The client's object, less its closing brace, then the hosts
         * the last load left out and whose they are. */
        b->tail--;
        buf_puts(b, ",\"conflicts\":[");
        for (size_t k = 0; k < e->nconflicts; k++) {
            const char *h = e->conflicts[k];
            buf_puts(b, k ? ",{\"host\":" : "{\"host\":");
            json_str(b, h);
            buf_puts(b, ",\"owner\":");
            json_str(b, h + strlen(h) + 1);
            buf_puts(b, "}");
        }
        buf_puts(b, "]}");
    }
    buf_puts(b, "]");
}

void links_prometheus(const struct links *l, struct buf *b)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"strait_link_connected", "gauge",
         "1 while the MeshLink's catalog stream is up"},
        {"strait_link_services", "gauge",
         "services of the MeshLink's catalog in effect"},
        {"strait_link_last_sync_seconds", "gauge",
         "when the MeshLink's last catalog arrived (Unix time; 0: never)"},
        {"strait_link_streams_total", "counter",
         "catalog streams the MeshLink opened"},
        {"strait_link_reconnects_total", "counter",
         "attempts after a lost or failed catalog stream"},
        {"strait_link_errors_total", "counter",
         "MeshLink failures: connect, TLS, refusals, bad catalogs"},
        {"strait_link_conflicts", "gauge",
         "hosts of the MeshLink's catalog left out: this site or another "
         "link owns them and spec.import does not take them"},
    };

    for (size_t f = 0; f < sizeof(fam) / sizeof(*fam); f++) {
        buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help,
                   fam[f].name, fam[f].type);
        for (size_t i = 0; i < l->n; i++) {
            struct link_client_state st;
            uint64_t v;
            link_client_state(l->v[i].client, &st);
            switch (f) {
            case 0:
                v = (uint64_t)st.connected;
                break;
            case 1:
                v = st.services;
                break;
            case 2:
                v = (uint64_t)(st.last_sync_ms / 1000);
                break;
            case 3:
                v = st.connects;
                break;
            case 4:
                v = st.reconnects;
                break;
            case 6:
                v = l->v[i].nconflicts;
                break;
            default:
                v = st.errors;
                break;
            }
            buf_printf(b, "%s{link=\"%s/%s\"} %" PRIu64 "\n", fam[f].name,
                       l->v[i].ns, l->v[i].name, v);
        }
    }
}
