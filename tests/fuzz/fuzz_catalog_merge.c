/*
 * libFuzzer target for the catalog merge (config/link-merge.h): a random
 * set of hosts this site defines and random catalogs of several links,
 * each with random spec.import rules and announcement turns. The
 * property: no host this site defines (exactly, or under a wildcard)
 * and no host an earlier link announced gains a link's entry unless that
 * link imports it (by host, or by the owner's namespace); and, the other
 * way, an entry nobody else owns is never left out. The oracle below is
 * written apart from link-merge.c, by brute force, so the two must
 * agree. Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/conf.h"
#include "config/link-merge.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Names differ in case on purpose: DNS names compare without it. */
static const char *const names[] = {
    "api.internal", "API.internal", "db.internal", "a.b.internal",
    "x.example",    "y.x.example",  "internal",    "reviews.default.svc",
};
static const char *const patterns[] = {
    "*.internal",   "*.b.internal", "*.example", "*",
    "api.internal", "x.example",    "*.svc",     "db.INTERNAL",
};
static const char *const nss[] = {"default", "other", "shared", "*"};

#define MAX_LOC 8
#define MAX_LINKS 4
#define MAX_HOSTS 6
#define MAX_IMP 3

struct rd {
    const uint8_t *p;
    size_t n;
};

static unsigned next(struct rd *r, unsigned mod)
{
    unsigned v;

    if (r->n == 0)
        return 0;
    v = *r->p++;
    r->n--;
    return v % mod;
}

/* The Istio host rule, by hand: exact (case-insensitive), "*", or
 * "*.suffix" with at least one character before the suffix. */
static int oracle_match(const char *pat, const char *host)
{
    size_t pl = strlen(pat), hl = strlen(host);

    if (strcmp(pat, "*") == 0)
        return 1;
    if (pat[0] == '*' && pat[1] == '.')
        return hl > pl - 1 && strcasecmp(host + hl - (pl - 1), pat + 1) == 0;
    return strcasecmp(pat, host) == 0;
}

static int oracle_imports(const struct conf_strs *h, const struct conf_strs *n,
                          const char *host, const char *owner_ns)
{
    for (size_t i = 0; i < h->n; i++)
        if (strcmp(h->v[i], "*") != 0 && oracle_match(h->v[i], host))
            return 1;
    for (size_t i = 0; i < n->n; i++)
        if (strcmp(n->v[i], "*") == 0 || strcmp(n->v[i], owner_ns) == 0)
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rd r = {data, size};
    struct link_merge_local loc[MAX_LOC];
    struct link_merge_link links[MAX_LINKS];
    struct link_merge_host hosts[MAX_LINKS][MAX_HOSTS];
    char *ih[MAX_LINKS][MAX_IMP], *in[MAX_LINKS][MAX_IMP];
    struct conf_strs imph[MAX_LINKS], impn[MAX_LINKS];
    static const char *const lnames[] = {"l0", "l1", "l2", "l3"};
    static const char *const sources[] = {"MeshLink l0", "MeshLink l1",
                                          "MeshLink l2", "MeshLink l3"};
    size_t nloc = next(&r, MAX_LOC + 1);
    size_t nlinks = 1 + next(&r, MAX_LINKS);

    for (size_t i = 0; i < nloc; i++) {
        /* Locals: names and wildcard patterns alike. */
        unsigned k = next(&r, 16);
        loc[i].host = k < 8 ? names[k] : patterns[k - 8];
        loc[i].ns = nss[next(&r, 3)];
        loc[i].what = "local";
    }
    for (size_t i = 0; i < nlinks; i++) {
        size_t nh = next(&r, MAX_HOSTS + 1);
        links[i].ns = nss[next(&r, 3)];
        links[i].name = lnames[i];
        links[i].source = sources[i];
        imph[i].n = next(&r, MAX_IMP + 1);
        impn[i].n = next(&r, MAX_IMP + 1);
        for (size_t k = 0; k < imph[i].n; k++)
            ih[i][k] = (char *)patterns[next(&r, 8)];
        for (size_t k = 0; k < impn[i].n; k++)
            in[i][k] = (char *)nss[next(&r, 4)];
        imph[i].v = ih[i];
        impn[i].v = in[i];
        links[i].import_hosts = next(&r, 4) ? &imph[i] : NULL;
        links[i].import_namespaces = next(&r, 4) ? &impn[i] : NULL;
        links[i].hosts = hosts[i];
        links[i].nhosts = 0;
        /* A catalog never lists a host twice (catalog_decode()). */
        for (size_t k = 0; k < nh; k++) {
            const char *h = names[next(&r, 8)];
            int dup = 0;
            for (size_t j = 0; j < links[i].nhosts; j++)
                dup |= strcasecmp(hosts[i][j].host, h) == 0;
            if (dup)
                continue;
            hosts[i][links[i].nhosts].host = h;
            hosts[i][links[i].nhosts].since = 1 + next(&r, 4);
            links[i].nhosts++;
        }
    }
    if (link_merge_decide(loc, nloc, links, nlinks) < 0)
        return 0;
    for (size_t i = 0; i < nlinks; i++) {
        static const struct conf_strs none = {NULL, 0};
        const struct conf_strs *h = links[i].import_hosts ? &imph[i] : &none;
        const struct conf_strs *n =
            links[i].import_namespaces ? &impn[i] : &none;
        for (size_t k = 0; k < links[i].nhosts; k++) {
            const struct link_merge_host *x = &hosts[i][k];
            int ok = 1;
            for (size_t d = 0; d < nloc; d++)
                if (oracle_match(loc[d].host, x->host) &&
                    !oracle_imports(h, n, x->host, loc[d].ns))
                    ok = 0;
            for (size_t o = 0; o < nlinks; o++) {
                if (o == i)
                    continue;
                for (size_t j = 0; j < links[o].nhosts; j++) {
                    const struct link_merge_host *y = &hosts[o][j];
                    int c = strcmp(links[o].ns, links[i].ns);
                    int before;
                    if (strcasecmp(y->host, x->host) != 0)
                        continue;
                    if (c == 0)
                        c = strcmp(links[o].name, links[i].name);
                    before =
                        y->since < x->since || (y->since == x->since && c < 0);
                    if (before && !oracle_imports(h, n, x->host, links[o].ns))
                        ok = 0;
                }
            }
            /* Never merged where another owns it unimported; never left
             * out where nobody else does. */
            if (x->admit != ok)
                abort();
            if (!x->admit && x->conflict == NULL)
                abort();
        }
    }
    return 0;
}
