#ifndef STRAIT_COMPILE_LUA_H
#define STRAIT_COMPILE_LUA_H

struct bootstrap;
struct gw_listener;
struct ident;
struct luaprogs;
struct resource_set;

/* At most this many policies apply to one listener (a request's set of
 * policies is a 32-bit mask). */
#define COMPILE_LUA_MAX_POLICIES 32
/* A source.file bigger than this is refused. */
#define COMPILE_LUA_MAX_FILE ((size_t)1 << 20)

/*
 * compile_lua() selects the LuaPolicies of set that apply to Gateway
 * listener g on this node (selector against the node's labels; a
 * targetRef to a Gateway g serves, matched per request by the hosts of
 * its servers, or to a VirtualService, matched per request; another
 * namespace's only with a ReferenceGrant there, else the policy is left
 * out; no targetRefs: the Gateways of the policy's namespace, every
 * request in the root namespace) and builds them in
 * running order, reading each source.file from the first directory of
 * bs->lua.path that has it, along with strait's own modules
 * (<dir>/strait/NAME.lua, for require), and the sharedDicts they
 * declare, taken from dicts (NULL: made for this build only). NULL with
 * *err NULL: no policy
 * applies; NULL with an allocated *err: a file is missing or too many
 * policies apply. One reference otherwise.
 */
struct luadict_set;
struct luaprogs *compile_lua(const struct bootstrap *bs,
                             const struct resource_set *set,
                             const struct gw_listener *g,
                             struct luadict_set *dicts, char **err);

/* compile_lua_upstreams() fills p->ups, h:set_upstream()'s targets:
 * each host:port of the registry visible to node_ns, with the cluster
 * istio_cluster_id() finds or builds for it in table (struct
 * istio_clusters). Only when a policy's text names set_upstream.
 * Returns 0, or -1 with an allocated *err. */
int compile_lua_upstreams(struct luaprogs *p, const struct resource_set *set,
                          void *table, const char *node_ns, char **err);

/* compile_lua_files() adds to d the contents of the files compile_lua()
 * would read (a changed script is a changed input). */
void compile_lua_files(struct ident *d, const struct bootstrap *bs,
                       const struct resource_set *set);

/*
 * compile_lua_targets() fills r->lua_targets: every host and port of the
 * registry the node sees (ServiceEntries and Services exported to
 * table's node namespace; wildcard hosts name no host to call), each
 * with the cluster istio_cluster_id() finds or builds for it in table,
 * as a VirtualService destination would get (DestinationRule TLS,
 * balancing, breakers, outlier detection). 0, or -1 when memory runs
 * out.
 */
struct http_routes;
int compile_lua_targets(void *table, struct http_routes *r);

#endif
