#ifndef STRAIT_PROXY_ROUTER_H
#define STRAIT_PROXY_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/slice.h"
#include "proxy/router-t.h"

struct http_fields;
struct http_request;

/*
 * The VirtualService HTTP router. router_build() (compile/router.h)
 * compiles the http rules of the VirtualServices bound to a set of gateway
 * servers into an immutable table: virtual hosts indexed by exact domain and by
 * wildcard suffix, rules in order, conditions sorted cheapest first, regular
 * expressions compiled once (PCRE2 with JIT). router_match() reads the
 * table without locks and allocates only from the request's arena, so one
 * router is shared by every worker; it is reference-counted with atomics.
 */
struct router;

/* router_ref() takes a reference; router_unref() drops one and frees the
 * router with the last. Both are safe from any thread; unref(NULL) is a
 * no-op. */
struct router *router_ref(struct router *r);

/* router_to_json() writes the compiled routes (virtual hosts, rules with
 * their conditions in test order, actions) for /config_dump; name gives a
 * cluster's name by index. */
struct buf;
typedef const char *(*router_cluster_name_fn)(void *ctx, int cluster);
void router_to_json(const struct router *r, struct buf *b,
                    router_cluster_name_fn name, void *ctx);
void router_unref(struct router *r);

/* Sizes of a built router, for the admin API and tests. */
struct router_stats {
    size_t vhosts;
    size_t rules; /* rule references over all virtual hosts */
    size_t actions;
    size_t regexes;
    size_t bytes; /* memory held, roughly */
};
void router_get_stats(const struct router *r, struct router_stats *st);

/*
 * router_match() picks the rule for a request.
 *
 * req:    the request head; only read. Its authority (port stripped,
 *         without regard to case) selects the virtual host: the exact
 *         domain, else the longest wildcard suffix, else "*".
 * port:   the port the request came in on (match.port, derivePort).
 * random: a uniformly random value; weights, fault and mirror percentages
 *         are drawn from it (independently of each other).
 * arena:  the request's arena, for regular expression and header scratch.
 * out:    filled in when a rule matches.
 * Returns the matched action (owned by the router: valid while the caller
 * holds its reference), or NULL when no virtual host or no rule matches
 * (the caller answers 404, response flag NR).
 */
const struct route_action *router_match(const struct router *r,
                                        const struct http_request *req,
                                        uint32_t port, uint64_t random,
                                        struct arena *arena,
                                        struct route_result *out);

/* router_pick_destination() returns the index of the destination for
 * random (random % total weight), or -1 when the action has no
 * destinations or every weight is 0. */
int router_pick_destination(const struct route_action *a, uint64_t random);

/*
 * router_rewrite_path() returns the path (with its query) to forward:
 * req->path itself when the rule has no uri rewrite, else a new path in
 * arena. rewrite.uri replaces the prefix the rule matched (the whole path
 * with an exact match; the whole path but the query with a regex match);
 * "/" replacing a prefix that does not end in "/" also swallows the
 * slashes that follow ("/foo" -> "/" makes "/foo/x" "/x"), as Istio does.
 * uriRegexRewrite replaces every match in the path (not the query).
 * Returns {NULL, 0} when the arena is out of memory.
 */
struct slice router_rewrite_path(const struct route_result *res,
                                 const struct http_request *req,
                                 struct arena *arena);

/*
 * router_redirect_location() returns the Location header of a redirect
 * rule, in arena: scheme://host[:port]/path. The scheme, host and path are
 * the redirect's or else the request's; the request's query is kept when
 * the redirect's uri has none. The port is the redirect's, or the
 * request's with derivePort FROM_REQUEST_PORT, or the one written in the
 * authority used; a port that is the scheme's default is left out.
 * Returns NULL when the arena is out of memory or the rule is no redirect.
 */
const char *router_redirect_location(const struct route_result *res,
                                     const struct http_request *req,
                                     struct arena *arena);

/*
 * router_apply_headers() applies the header operations of the matched
 * action to fields: the destination's, then the route's (so a route-level
 * set wins), as Envoy orders them. response selects the direction. Values
 * are referenced, not copied: they live as long as the router. Returns 0,
 * or -1 when the arena is out of memory.
 */
int router_apply_headers(const struct route_result *res, int response,
                         struct http_fields *fields, struct arena *arena);

/*
 * router_shadow_authority() returns the Host (:authority) of a mirrored
 * copy of a request, in arena: Envoy's "-shadow" suffix at the end of the
 * host, before any port ("a.example:8080" becomes "a.example-shadow:8080").
 * {NULL, 0} when the arena is out of memory.
 */
struct slice router_shadow_authority(struct slice authority,
                                     struct arena *arena);

/* router_cors_origin_allowed() is true when origin matches one of the
 * policy's allowed origins. */
int router_cors_origin_allowed(const struct route_cors *c, struct slice origin,
                               struct arena *arena);

#endif
