#ifndef STRAIT_CONTROL_LINK_LINKS_H
#define STRAIT_CONTROL_LINK_LINKS_H

#include <stddef.h>

struct buf;
struct ca_identity;
struct event_base;
struct res_input;
struct resource_set;

/*
 * The MeshLinks in effect: one link_client per MeshLink, kept across
 * every reload that leaves the MeshLink as it was (so a link holds one
 * stream for its whole life), replaced when its spec changes, and freed,
 * with every registry entry it added, when the MeshLink goes.
 */
struct links;

/* links_new(): on_change(arg) runs when the entries links_inputs() gives
 * change (a catalog arrived, was dropped, a link went). id: this node's
 * credential holder (NULL: none); dns: the resolver of catalog host names
 * (NULL: names are refused). NULL when out of memory. */
struct dns_cache;
struct links *links_new(struct event_base *base, struct ca_identity *id,
                        struct dns_cache *dns, void (*on_change)(void *),
                        void *arg);
void links_free(struct links *l);

/* links_sync() makes the clients match set's MeshLinks (set NULL: none). */
void links_sync(struct links *l, const struct resource_set *set);

/* links_inputs() appends every link's registry entries after the n in
 * *v (grown as needed, owned by the caller, freed with free()) and
 * returns the new count; the strings belong to l until its next change. */
size_t links_inputs(struct links *l, struct res_input **v, size_t n,
                    size_t *cap);

/*
 * links_filter() leaves out of set (just loaded with links_inputs()) the
 * links' entries for hosts this site defines or another link owns and
 * the link's MeshLink does not import (config/link-merge.h), and keeps
 * what it left out, per link, for links_json() and the metric
 * strait_link_conflicts. A conflict new since the last load is logged.
 */
void links_filter(struct links *l, struct resource_set *set);

/* links_gateways() appends each MeshLink's east-west gateway (its network,
 * gateway address and port, source "MeshLink ns/name") to *v (grown as
 * needed, owned by the caller, freed with free()) and returns how many;
 * the strings belong to l until its next links_sync(). */
struct net_gateway;
size_t links_gateways(const struct links *l, struct net_gateway **v,
                      size_t *cap);

/* links_roots() is every MeshLink's trust bundle roots (owned by l,
 * valid until its next links_sync(); NULL when there are none) and sets
 * *pin to a digest of them (owned by l). */
struct stack_st_X509;
const struct stack_st_X509 *links_roots(const struct links *l,
                                        const char **pin);

/* links_count() is the number of MeshLinks in effect. */
size_t links_count(const struct links *l);

/* links_json() appends a JSON array of the links' states. */
void links_json(const struct links *l, struct buf *b);

/* links_prometheus() appends the strait_link_* families. */
void links_prometheus(const struct links *l, struct buf *b);

#endif
