/*
 * h:set_upstream()'s targets: every host and port of the registry the
 * node sees (ServiceEntries and Services exported to it), each with the
 * cluster a VirtualService destination of it would get, so that its
 * DestinationRule applies and no name is ever resolved at run time.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "compile/istio.h"
#include "compile/lua.h"
#include "config/resource.h"
#include "core/err.h"
#include "policy/lua_vm.h"

/* The targets cost a cluster per service port, so they are made only
 * when a policy's text asks for them. */
static int wanted(const struct luaprogs *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i].source != NULL &&
            strstr(p->v[i].source, "set_upstream") != NULL)
            return 1;
    return 0;
}

static int known(const struct luaprogs *p, const char *host, uint32_t port)
{
    for (size_t i = 0; i < p->nups; i++)
        if (p->ups[i].port == port && strcmp(p->ups[i].host, host) == 0)
            return 1;
    return 0;
}

static int add(struct luaprogs *p, size_t *cap, const char *host, uint32_t port,
               int cluster)
{
    struct luaupstream *u;

    if (p->nups == *cap) {
        size_t ncap = *cap ? 2 * *cap : 16;
        u = realloc(p->ups, ncap * sizeof(*u));
        if (u == NULL)
            return -1;
        p->ups = u;
        *cap = ncap;
    }
    u = &p->ups[p->nups];
    u->host = strdup(host);
    if (u->host == NULL)
        return -1;
    for (char *c = u->host; *c; c++)
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c - 'A' + 'a');
    u->port = port;
    u->cluster = cluster;
    p->nups++;
    return 0;
}

int compile_lua_upstreams(struct luaprogs *p, const struct resource_set *set,
                          void *table, const char *node_ns, char **err)
{
    size_t cap = 0;

    if (!wanted(p))
        return 0;
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_service_entry *se;

        if (!res_is_service(r))
            continue;
        se = res_service_entry(r);
        if (node_ns != NULL && !res_visible(r, &se->export_to, node_ns))
            continue;
        for (size_t h = 0; h < se->hosts.n; h++) {
            char fq[256];
            /* A wildcard names no one host to send to. */
            if (strchr(se->hosts.v[h], '*') != NULL ||
                res_host_fqdn(se->hosts.v[h], r->meta.ns, set->domain, fq,
                              sizeof(fq)) < 0)
                continue;
            for (size_t k = 0; k < se->ports.n; k++) {
                const struct res_se_port *sp =
                    &((const struct res_se_port *)se->ports.v)[k];
                uint32_t port = (uint32_t)sp->number;
                int id;
                if (known(p, fq, port))
                    continue;
                id = istio_cluster_id(table, fq, NULL, port);
                if (id < 0 || add(p, &cap, fq, port, id) < 0) {
                    err_set(err, "out of memory");
                    return -1;
                }
            }
        }
    }
    return 0;
}
