/*
 * LuaPolicy -> struct luaprogs for one Gateway listener (see lua.h):
 * which policies apply, their text (inline, or a file found on
 * lua.path), budgets and targets, and strait's own modules that
 * require() may load.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/identity.h"
#include "compile/istio.h"
#include "compile/lua.h"
#include "config/bootstrap.h"
#include "config/resource.h"
#include "core/ascii.h"
#include "core/err.h"
#include "policy/lua_dict.h"
#include "policy/lua_vm.h"
#include "proxy/http_listener.h"

#ifndef STRAIT_LUA_DIR
#define STRAIT_LUA_DIR "/usr/share/strait/lua"
#endif

/* lua.path, or the installed directory when none is given. */
static size_t ndirs(const struct bootstrap *bs)
{
    return bs->lua.path.n > 0 ? bs->lua.path.n : 1;
}

static const char *dir_at(const struct bootstrap *bs, size_t i)
{
    return bs->lua.path.n > 0 ? bs->lua.path.v[i] : STRAIT_LUA_DIR;
}

/* Reads path whole (at most COMPILE_LUA_MAX_FILE); NULL when it cannot,
 * with errno set (EFBIG: too big). */
static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *b;
    size_t got;

    if (f == NULL)
        return NULL;
    b = malloc(COMPILE_LUA_MAX_FILE + 1);
    if (b == NULL) {
        fclose(f);
        return NULL;
    }
    got = fread(b, 1, COMPILE_LUA_MAX_FILE + 1, f);
    fclose(f);
    if (got > COMPILE_LUA_MAX_FILE) {
        free(b);
        errno = EFBIG;
        return NULL;
    }
    b[got] = '\0';
    *n = got;
    return b;
}

/* The first directory of lua.path holding file: its full path in out. */
static int find_file(const struct bootstrap *bs, const char *file, char *out,
                     size_t n)
{
    for (size_t i = 0; i < ndirs(bs); i++) {
        FILE *f;
        snprintf(out, n, "%s/%s", dir_at(bs, i), file);
        f = fopen(out, "rb");
        if (f != NULL) {
            fclose(f);
            return 0;
        }
    }
    return -1;
}

static int ref_ns_eq(const char *ref_ns, const char *policy_ns,
                     const char *name, const char *full)
{
    const char *ns = ref_ns != NULL ? ref_ns : policy_ns;
    size_t k = strlen(ns);

    return strncmp(full, ns, k) == 0 && full[k] == '/' &&
           strcmp(full + k + 1, name) == 0;
}

static char **strv_dup(char *const *v, size_t n)
{
    char **d = calloc(n ? n : 1, sizeof(*d));

    for (size_t i = 0; d != NULL && i < n; i++)
        if ((d[i] = strdup(v[i])) == NULL)
            return d; /* the caller checks the last */
    return d;
}

static int strv_ok(char **d, size_t n)
{
    if (d == NULL)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (d[i] == NULL)
            return 0;
    return 1;
}

/* Adds the hosts of server k of g (without their "ns/" part) to *v
 * (NULL: only counts them in *n). -1 when memory runs out. */
static int add_server_hosts(const struct gw_server *sv, char ***v, size_t *n)
{
    for (size_t h = 0; h < sv->nhosts; h++) {
        const char *host = sv->hosts[h], *slash = strchr(host, '/');
        char **nv;
        if (slash != NULL)
            host = slash + 1;
        if (v != NULL) {
            nv = realloc(*v, (*n + 1) * sizeof(*nv));
            if (nv == NULL)
                return -1;
            *v = nv;
            if ((nv[*n] = strdup(host)) == NULL)
                return -1;
        }
        (*n)++;
    }
    return 0;
}

/*
 * Does r apply to g, and how: any_ref (every request of g), the
 * VirtualServices (nvs), and the hosts of the servers of g that belong to
 * the Gateways it targets (*gw, NULL: only counted in *ngw), which say
 * per request whether the request came through one of them.
 *
 * Namespaces, as Gateway API policy attachment has them: a policy
 * targets resources of its own namespace; one in another namespace only
 * with a ReferenceGrant there (otherwise the policy is not loaded at
 * all, and `strait check` says why, STR0010). Without targetRefs it
 * applies to the Gateways of its own namespace, or, in the root
 * namespace, to every request, as a root-namespace Istio policy is
 * mesh-wide.
 */
static int applies(const struct resource *r, const struct resource_set *set,
                   const struct bootstrap *bs, const struct gw_listener *g,
                   int *any_ref, size_t *nvs, char ***gw, size_t *ngw)
{
    const struct res_lua_policy *lp = res_lua_policy(r);

    *any_ref = 0;
    *nvs = 0;
    *ngw = 0;
    if (lp->selector.match_labels.n > 0 &&
        !res_labels_match(&lp->selector.match_labels, &bs->node.labels))
        return 0;
    for (size_t i = 0; i < lp->target_refs.n; i++) {
        const struct res_lua_target_ref *t =
            (const struct res_lua_target_ref *)lp->target_refs.v + i;
        if (t->ns != NULL &&
            !res_lua_target_granted(
                set, r->meta.ns,
                t->kind == RES_LUA_REF_GATEWAY ? "Gateway" : "VirtualService",
                t->ns, t->name))
            return 0;
    }
    if (lp->target_refs.n == 0) {
        size_t k = strlen(r->meta.ns);
        if (strcmp(r->meta.ns, ISTIO_ROOT_NAMESPACE) == 0) {
            *any_ref = 1;
            return 1;
        }
        for (size_t i = 0; i < g->nservers; i++)
            if (strncmp(g->servers[i].gateway, r->meta.ns, k) == 0 &&
                g->servers[i].gateway[k] == '/' &&
                add_server_hosts(&g->servers[i], gw, ngw) < 0)
                return -1;
        return *ngw > 0;
    }
    for (size_t i = 0; i < lp->target_refs.n; i++) {
        const struct res_lua_target_ref *t =
            (const struct res_lua_target_ref *)lp->target_refs.v + i;
        if (t->kind == RES_LUA_REF_VIRTUAL_SERVICE) {
            (*nvs)++;
            continue;
        }
        for (size_t k = 0; k < g->nservers; k++)
            if (ref_ns_eq(t->ns, r->meta.ns, t->name, g->servers[k].gateway) &&
                add_server_hosts(&g->servers[k], gw, ngw) < 0)
                return -1;
    }
    return *ngw > 0 || *nvs > 0;
}

static int fill(struct luaprog *p, const struct resource *r,
                const struct resource_set *set, const struct bootstrap *bs,
                const struct gw_listener *g, char **err)
{
    int any_ref;
    size_t nvs, ngw = 0;
    const struct res_lua_policy *lp = res_lua_policy(r);
    char path[4096];
    size_t k = 0;

    if (asprintf(&p->name, "%s/%s", r->meta.ns, r->meta.name) < 0) {
        p->name = NULL;
        goto oom;
    }
    if (lp->source.file != NULL) {
        if (find_file(bs, lp->source.file, path, sizeof(path)) < 0) {
            err_set(err,
                    "%s:%d:%d: LuaPolicy %s: source.file '%s' is not in "
                    "lua.path",
                    r->file, r->line, r->col, p->name, lp->source.file);
            return -1;
        }
        p->source = read_file(path, &p->source_len);
        if (p->source == NULL) {
            err_set(err, "%s:%d:%d: LuaPolicy %s: %s: %s", r->file, r->line,
                    r->col, p->name, path,
                    errno == EFBIG ? "bigger than 1 MiB" : strerror(errno));
            return -1;
        }
        if (asprintf(&p->chunk, "@%s", lp->source.file) < 0)
            p->chunk = NULL;
    } else {
        p->source_len = strlen(lp->source.inline_text);
        p->source = strdup(lp->source.inline_text);
        if (asprintf(&p->chunk, "=%s", p->name) < 0)
            p->chunk = NULL;
    }
    if (p->source == NULL || p->chunk == NULL)
        goto oom;
    p->priority = lp->priority;
    p->fail_closed = lp->failure_policy == RES_LUA_FAIL;
    p->memory = (size_t)lp->limits.memory;
    p->instruction_slice = (int)lp->limits.instruction_slice;
    p->burst_ms = (uint64_t)lp->limits.burst_ms;
    p->request_ms = (uint64_t)lp->limits.request_ms;
    p->body_bytes = (size_t)lp->limits.body_bytes;
    p->http_calls = (unsigned)lp->limits.http_calls;
    p->http_timeout_ms = (uint64_t)lp->limits.http_call_timeout_ms;
    if (applies(r, set, bs, g, &any_ref, &nvs, &p->gw_hosts, &ngw) < 0) {
        p->ngw_hosts = ngw;
        goto oom;
    }
    p->ngw_hosts = ngw;
    p->any_ref = any_ref;
    for (size_t i = 0; i < lp->config.n; i++) {
        const struct conf_tnode *c = &lp->config.v[i];
        /* The same pre-order tree, in the runtime's own type. */
        enum luacfg_type t = c->type == CONF_TNODE_STR    ? LUACFG_STR
                             : c->type == CONF_TNODE_LIST ? LUACFG_LIST
                                                          : LUACFG_MAP;
        if (luaprog_config_add(p, t, c->key, c->str, c->n) < 0)
            goto oom;
    }
    p->vss = calloc(nvs ? nvs : 1, sizeof(char *));
    if (p->vss == NULL)
        goto oom;
    for (size_t i = 0; i < lp->target_refs.n; i++) {
        const struct res_lua_target_ref *t =
            (const struct res_lua_target_ref *)lp->target_refs.v + i;
        if (t->kind != RES_LUA_REF_VIRTUAL_SERVICE)
            continue;
        if (asprintf(&p->vss[k], "%s/%s", t->ns ? t->ns : r->meta.ns, t->name) <
            0) {
            p->vss[k] = NULL;
            goto oom;
        }
        p->nvss = ++k;
    }
    p->hosts = strv_dup(lp->hosts.v, lp->hosts.n);
    p->nhosts = lp->hosts.n;
    if (!strv_ok(p->hosts, p->nhosts))
        goto oom;
    p->disabled = calloc(lp->routes.n + 1, sizeof(char *));
    if (p->disabled == NULL)
        goto oom;
    for (size_t i = 0; i < lp->routes.n; i++) {
        const struct res_lua_route *rt =
            (const struct res_lua_route *)lp->routes.v + i;
        if ((p->disabled[i] = strdup(rt->name)) == NULL)
            goto oom;
        p->ndisabled = i + 1;
    }
    return 0;
oom:
    err_set(err, "out of memory");
    return -1;
}

/* strait's own modules: <dir>/strait/NAME.lua of each lua.path
 * directory, the first of a name winning, as require("strait.NAME"). */
static int add_modules(struct luaprogs *ps, const struct bootstrap *bs,
                       char **err)
{
    for (size_t i = 0; i < ndirs(bs); i++) {
        char dir[4096], path[4096 + 256];
        DIR *d;
        struct dirent *e;

        snprintf(dir, sizeof(dir), "%s/strait", dir_at(bs, i));
        d = opendir(dir);
        if (d == NULL)
            continue;
        while ((e = readdir(d)) != NULL) {
            size_t n = strlen(e->d_name);
            char name[300];
            int seen = 0;
            if (n < 5 || strcmp(e->d_name + n - 4, ".lua") != 0 ||
                n - 4 >= sizeof(name) - 8)
                continue;
            snprintf(name, sizeof(name), "strait.%.*s", (int)(n - 4),
                     e->d_name);
            for (size_t k = 0; k < ps->nmods; k++)
                seen |= strcmp(ps->mods[k].name, name) == 0;
            if (seen || ps->nmods == LUAVM_MAX_MODULES)
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            ps->mods[ps->nmods].source =
                read_file(path, &ps->mods[ps->nmods].len);
            if (ps->mods[ps->nmods].source == NULL)
                continue;
            ps->mods[ps->nmods].name = strdup(name);
            if (ps->mods[ps->nmods].name == NULL) {
                free(ps->mods[ps->nmods].source);
                closedir(d);
                err_set(err, "out of memory");
                return -1;
            }
            ps->nmods++;
        }
        closedir(d);
    }
    return 0;
}

/* The dicts the applying policies declare, each name once (the first
 * declaration's size; a dict already in dicts keeps its own). */
static int add_dicts(struct luaprogs *ps, const struct resource_set *set,
                     const struct bootstrap *bs, const struct gw_listener *g,
                     struct luadict_set *dicts, char **err)
{
    int any_ref;
    size_t nvs, ngw;

    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_lua_policy *lp;
        if (r->kind != RES_LUA_POLICY ||
            applies(r, set, bs, g, &any_ref, &nvs, NULL, &ngw) <= 0)
            continue;
        lp = res_lua_policy(r);
        for (size_t k = 0; k < lp->shared_dicts.n; k++) {
            const struct res_lua_dict *dd =
                (const struct res_lua_dict *)lp->shared_dicts.v + k;
            struct luadict *d;
            int seen = 0, resized = 0;
            char qname[512];
            /* A dict is its namespace's: the same name declared in
             * another namespace is another store, so no namespace reads
             * or fills another's (strait.shared.NAME in its state). */
            snprintf(qname, sizeof(qname), "%s/%s", r->meta.ns, dd->name);
            for (size_t j = 0; j < ps->ndicts; j++)
                seen |= strcmp(luadict_name(ps->dicts[j]), qname) == 0;
            if (seen)
                continue;
            if (ps->ndicts == LUAVM_MAX_DICTS) {
                err_set(err, "listener %s: more than %d shared dicts", g->name,
                        LUAVM_MAX_DICTS);
                return -1;
            }
            d = dicts != NULL
                    ? luadict_set_get(dicts, qname, (size_t)dd->size, &resized)
                    : luadict_new(qname, (size_t)dd->size);
            if (d == NULL) {
                err_set(err, "out of memory");
                return -1;
            }
            ps->dicts[ps->ndicts++] = d;
        }
    }
    return 0;
}

struct luaprogs *compile_lua(const struct bootstrap *bs,
                             const struct resource_set *set,
                             const struct gw_listener *g,
                             struct luadict_set *dicts, char **err)
{
    struct luaprogs *ps;
    size_t n = 0;
    int any_ref;
    size_t nvs, ngw;

    *err = NULL;
    if (set == NULL)
        return NULL;
    for (size_t i = 0; i < set->n; i++)
        if (set->v[i]->kind == RES_LUA_POLICY &&
            applies(set->v[i], set, bs, g, &any_ref, &nvs, NULL, &ngw) > 0)
            n++;
    if (n == 0)
        return NULL;
    if (n > COMPILE_LUA_MAX_POLICIES) {
        err_set(err,
                "listener %s: %zu LuaPolicies apply, more than %d; merge "
                "some or target them more narrowly",
                g->name, n, COMPILE_LUA_MAX_POLICIES);
        return NULL;
    }
    ps = luaprogs_new(n);
    if (ps == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        if (r->kind != RES_LUA_POLICY ||
            applies(r, set, bs, g, &any_ref, &nvs, NULL, &ngw) <= 0)
            continue;
        ps->n++;
        if (fill(&ps->v[ps->n - 1], r, set, bs, g, err) < 0)
            goto fail;
    }
    if (add_modules(ps, bs, err) < 0 ||
        add_dicts(ps, set, bs, g, dicts, err) < 0)
        goto fail;
    luaprogs_sort(ps);
    return ps;
fail:
    luaprogs_unref(ps);
    return NULL;
}

void compile_lua_files(struct ident *d, const struct bootstrap *bs,
                       const struct resource_set *set)
{
    char path[4096 + 256];
    char *text;
    size_t n;
    int any = 0;

    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_lua_policy *lp;
        if (r->kind != RES_LUA_POLICY)
            continue;
        any = 1;
        lp = res_lua_policy(r);
        if (lp->source.file == NULL)
            continue;
        ident_str(d, 'L', lp->source.file);
        if (find_file(bs, lp->source.file, path, sizeof(path)) == 0 &&
            (text = read_file(path, &n)) != NULL) {
            ident_bytes(d, 'l', text, n);
            free(text);
        }
    }
    /* The modules, when any policy could require them. */
    for (size_t i = 0; any && i < ndirs(bs); i++) {
        char dir[4096];
        DIR *dd;
        struct dirent *e;
        snprintf(dir, sizeof(dir), "%s/strait", dir_at(bs, i));
        dd = opendir(dir);
        if (dd == NULL)
            continue;
        while ((e = readdir(dd)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            if ((text = read_file(path, &n)) != NULL) {
                ident_str(d, 'M', e->d_name);
                ident_bytes(d, 'm', text, n);
                free(text);
            }
        }
        closedir(dd);
    }
}

static int target_add(struct http_routes *r, size_t *cap, const char *host,
                      uint32_t port, int cluster)
{
    if (r->nlua_targets == *cap) {
        size_t n = *cap ? 2 * *cap : 16;
        struct lua_target *v = realloc(r->lua_targets, n * sizeof(*v));
        if (v == NULL)
            return -1;
        r->lua_targets = v;
        *cap = n;
    }
    r->lua_targets[r->nlua_targets].host = strdup(host);
    if (r->lua_targets[r->nlua_targets].host == NULL)
        return -1;
    r->lua_targets[r->nlua_targets].port = port;
    r->lua_targets[r->nlua_targets].cluster = cluster;
    r->nlua_targets++;
    return 0;
}

int compile_lua_targets(void *table, struct http_routes *r)
{
    struct istio_clusters *t = table;
    const struct resource_set *set = t->set;
    size_t cap = 0, k = 0;
    char fq[512];

    for (size_t i = 0; i < set->n; i++) {
        const struct resource *res = set->v[i];
        const struct res_service_entry *se;
        if (!res_is_service(res))
            continue;
        se = res_service_entry(res);
        if (t->node_ns != NULL && !res_visible(res, &se->export_to, t->node_ns))
            continue;
        for (size_t h = 0; h < se->hosts.n; h++) {
            if (strchr(se->hosts.v[h], '*') != NULL ||
                res_host_fqdn(se->hosts.v[h], res->meta.ns, set->domain, fq,
                              sizeof(fq)) < 0)
                continue;
            ascii_lower_str(fq);
            for (size_t p = 0; p < se->ports.n; p++) {
                const struct res_se_port *sp =
                    (const struct res_se_port *)se->ports.v + p;
                uint32_t port = (uint32_t)sp->number;
                int id = istio_cluster_id(table, fq, NULL, port);
                if (id < 0 || target_add(r, &cap, fq, port, id) < 0)
                    return -1;
            }
        }
    }
    if (r->nlua_targets > 0)
        qsort(r->lua_targets, r->nlua_targets, sizeof(*r->lua_targets),
              lua_target_cmp);
    /* The same host and port declared twice has one cluster: kept once. */
    for (size_t i = 0; i < r->nlua_targets; i++) {
        if (k > 0 &&
            lua_target_cmp(&r->lua_targets[k - 1], &r->lua_targets[i]) == 0) {
            free(r->lua_targets[i].host);
            continue;
        }
        r->lua_targets[k++] = r->lua_targets[i];
    }
    r->nlua_targets = k;
    return 0;
}
