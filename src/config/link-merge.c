/*
 * Whose host it is, between this site and its linked sites (see
 * link-merge.h). Indexes by lower-cased host keep a 10,000-service
 * catalog against a 10,000-host registry linear, not quadratic.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <stdio.h>

#include "config/conf.h"
#include "config/link-merge.h"
#include "config/resource.h"
#include "core/ascii.h"
#include "core/host.h"
#include "core/strmap.h"

int link_merge_imports(const struct link_merge_link *link, const char *host,
                       const char *owner_ns)
{
    const struct conf_strs *h = link->import_hosts,
                           *ns = link->import_namespaces;

    for (size_t i = 0; h != NULL && i < h->n; i++)
        if (strcmp(h->v[i], "*") != 0 &&
            host_match(h->v[i], host, strlen(host)))
            return 1;
    for (size_t i = 0; ns != NULL && i < ns->n; i++)
        if (strcmp(ns->v[i], "*") == 0 || strcmp(ns->v[i], owner_ns) == 0)
            return 1;
    return 0;
}

/* Lower-cases host into out (cap bytes); NULL when it does not fit. */
static const char *key_of(const char *host, char *out, size_t cap)
{
    size_t n = strlen(host);

    if (n >= cap)
        return NULL;
    ascii_lower_copy(out, host, n + 1);
    return out;
}

/* An announcement: link li's host hi, chained to the next of its host. */
struct ann {
    size_t li, hi;
    size_t next; /* index + 1; 0 ends the chain */
};

/* True when announcement a came before b (since, then ns/name). */
static int earlier(const struct link_merge_link *links, const struct ann *a,
                   const struct ann *b)
{
    const struct link_merge_link *la = &links[a->li], *lb = &links[b->li];
    uint64_t sa = la->hosts[a->hi].since, sb = lb->hosts[b->hi].since;
    int c;

    if (sa != sb)
        return sa < sb;
    c = strcmp(la->ns, lb->ns);
    if (c == 0)
        c = strcmp(la->name, lb->name);
    return c < 0;
}

int link_merge_decide(const struct link_merge_local *loc, size_t nloc,
                      struct link_merge_link *links, size_t nlinks)
{
    struct strmap exact, anns;
    size_t *lnext = calloc(nloc + 1, sizeof(*lnext));
    size_t *wild = calloc(nloc + 1, sizeof(*wild));
    size_t nann = 0, k = 0, nwild = 0;
    struct ann *av;
    char key[512];
    int rc = 0;

    for (size_t i = 0; i < nlinks; i++)
        nann += links[i].nhosts;
    av = calloc(nann + 1, sizeof(*av));
    strmap_init(&exact);
    strmap_init(&anns);
    for (size_t i = 0; i < nlinks; i++)
        for (size_t j = 0; j < links[i].nhosts; j++) {
            links[i].hosts[j].admit = 0;
            links[i].hosts[j].conflict = NULL;
        }
    if (lnext == NULL || wild == NULL || av == NULL) {
        rc = -1;
        goto done;
    }
    /* This site's exact hosts, each a chain of the resources defining it
     * (values are index + 1). */
    for (size_t i = 0; i < nloc; i++) {
        const char *kk;
        if (host_pattern_kind(loc[i].host) != HOST_EXACT) {
            wild[nwild++] = i;
            continue;
        }
        kk = key_of(loc[i].host, key, sizeof(key));
        if (kk == NULL)
            continue; /* longer than any DNS name: announces nothing */
        lnext[i] = (size_t)(uintptr_t)strmap_get(&exact, kk);
        if (strmap_put(&exact, kk, (void *)(uintptr_t)(i + 1)) < 0) {
            rc = -1;
            goto done;
        }
    }
    /* Every link's announcements, chained by host. */
    for (size_t i = 0; i < nlinks; i++)
        for (size_t j = 0; j < links[i].nhosts; j++) {
            const char *kk = key_of(links[i].hosts[j].host, key, sizeof(key));
            if (kk == NULL)
                continue; /* left out: admit stays 0 */
            av[k].li = i;
            av[k].hi = j;
            av[k].next = (size_t)(uintptr_t)strmap_get(&anns, kk);
            if (strmap_put(&anns, kk, (void *)(uintptr_t)(k + 1)) < 0) {
                rc = -1;
                goto done;
            }
            k++;
        }
    for (size_t a = 0; a < k; a++) {
        const struct link_merge_link *l = &links[av[a].li];
        struct link_merge_host *h = &l->hosts[av[a].hi];
        const char *kk = key_of(h->host, key, sizeof(key));
        int ok = 1;

        /* This site's own definitions: exact ones by the index, wildcard
         * ones by covering the name. */
        for (size_t i = (size_t)(uintptr_t)strmap_get(&exact, kk); ok && i;
             i = lnext[i - 1])
            if (!link_merge_imports(l, h->host, loc[i - 1].ns)) {
                ok = 0;
                h->conflict = loc[i - 1].what;
            }
        for (size_t w = 0; ok && w < nwild; w++) {
            const struct link_merge_local *d = &loc[wild[w]];
            if (host_covers(d->host, h->host) &&
                !link_merge_imports(l, h->host, d->ns)) {
                ok = 0;
                h->conflict = d->what;
            }
        }
        /* Links that announced it before this one. */
        for (size_t b = (size_t)(uintptr_t)strmap_get(&anns, kk); ok && b;
             b = av[b - 1].next) {
            const struct ann *o = &av[b - 1];
            if (o->li == av[a].li || !earlier(links, o, &av[a]))
                continue;
            if (!link_merge_imports(l, h->host, links[o->li].ns)) {
                ok = 0;
                h->conflict = links[o->li].source;
            }
        }
        h->admit = ok;
    }
done:
    if (rc < 0)
        for (size_t i = 0; i < nlinks; i++)
            for (size_t j = 0; j < links[i].nhosts; j++)
                links[i].hosts[j].admit = 0;
    strmap_dispose(&exact);
    strmap_dispose(&anns);
    free(lnext);
    free(wild);
    free(av);
    return rc;
}

/* The MeshLink label of a ServiceEntry a link made; NULL for others. */
static const char *link_label(const struct resource *r)
{
    if (r->kind != RES_SERVICE_ENTRY)
        return NULL;
    for (size_t i = 0; i < r->meta.labels.n; i++)
        if (strcmp(r->meta.labels.v[i].key, LINK_MERGE_LABEL) == 0)
            return r->meta.labels.v[i].val;
    return NULL;
}

void link_merge_analyze(const struct resource_set *set, struct res_msgs *msgs)
{
    size_t nhosts = 0;
    struct link_merge_local *loc;
    char(*lfq)[512];
    struct link_merge_link *lv = calloc(set->n + 1, sizeof(*lv));
    struct link_merge_host *hv = calloc(set->n + 1, sizeof(*hv));
    const struct resource **owner = calloc(set->n + 1, sizeof(*owner));
    char(*fq)[512] = calloc(set->n + 1, sizeof(*fq));
    char(*whats)[600] = calloc(set->n + 1, sizeof(*whats));
    size_t nloc = 0, nl = 0;

    for (size_t i = 0; i < set->n; i++)
        if (res_is_service(set->v[i]))
            nhosts += res_service_entry(set->v[i])->hosts.n;
    loc = calloc(nhosts + 1, sizeof(*loc));
    lfq = calloc(nhosts + 1, sizeof(*lfq));
    if (loc == NULL || lfq == NULL || lv == NULL || hv == NULL ||
        owner == NULL || fq == NULL || whats == NULL)
        goto done;
    /* A link-shaped entry (labelled by a MeshLink of its namespace) is
     * that link's, with its first host, in load order; every other
     * registry entry is this site's own. */
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i], *m;
        const struct res_service_entry *se;
        const char *lab = link_label(r);
        if (!res_is_service(r))
            continue;
        se = res_service_entry(r);
        snprintf(whats[i], sizeof(whats[i]), "%s %s/%s",
                 r->kind == RES_SERVICE ? "Service" : "ServiceEntry",
                 r->meta.ns, r->meta.name);
        m = lab != NULL ? resource_find(set, RES_MESH_LINK, r->meta.ns, lab)
                        : NULL;
        if (m != NULL && se->hosts.n == 1 &&
            res_host_fqdn(se->hosts.v[0], r->meta.ns, set->domain, fq[i],
                          sizeof(fq[i])) >= 0) {
            lv[nl].ns = r->meta.ns;
            lv[nl].name = lab;
            lv[nl].source = whats[i];
            lv[nl].import_hosts = &res_mesh_link(m)->import.hosts;
            lv[nl].import_namespaces = &res_mesh_link(m)->import.namespaces;
            hv[nl].host = fq[i];
            hv[nl].since = i + 1;
            lv[nl].hosts = &hv[nl];
            lv[nl].nhosts = 1;
            owner[nl++] = r;
            continue;
        }
        for (size_t k = 0; k < se->hosts.n && nloc < nhosts; k++) {
            if (res_host_fqdn(se->hosts.v[k], r->meta.ns, set->domain,
                              lfq[nloc], sizeof(lfq[nloc])) < 0)
                continue;
            loc[nloc].host = lfq[nloc];
            loc[nloc].ns = r->meta.ns;
            loc[nloc++].what = whats[i];
        }
    }
    if (nl == 0 || link_merge_decide(loc, nloc, lv, nl) < 0)
        goto done;
    for (size_t i = 0; i < nl; i++) {
        const struct resource *r = owner[i];
        if (hv[i].admit)
            continue;
        res_msgs_add(msgs, "STR0011", RES_WARNING, r->file, r->line, r->col,
                     lv[i].source, "spec.hosts[0]",
                     "MeshLink %s/%s's entry for %s is left out at run "
                     "time: %s owns it here; to merge the linked site's "
                     "endpoints into it, list it in spec.import.hosts (or "
                     "its owner's namespace in spec.import.namespaces)",
                     lv[i].ns, lv[i].name, hv[i].host,
                     hv[i].conflict != NULL ? hv[i].conflict : "?");
    }
done:
    free(loc);
    free(lfq);
    free(lv);
    free(hv);
    free(owner);
    free(fq);
    free(whats);
}
