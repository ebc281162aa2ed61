#ifndef STRAIT_CONTROL_LINK_CATALOG_H
#define STRAIT_CONTROL_LINK_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"

struct buf;
struct resource_set;

/*
 * The catalog a site exports to the sites linked to it, and what a
 * linked site makes of it (README "Site links", "Catalog stream").
 *
 * On the wire it is NDJSON: one JSON object per line, each line either
 *
 *   {"type":"catalog","version":N,"site":S,"network":NET,
 *    "trustDomain":TD,"services":[SERVICE...]}
 *
 * (the whole catalog, sent first and again whenever it changes) or
 * {"type":"ping"} (every CATALOG_PING_MS, so a dead stream is noticed).
 * A SERVICE is {"hostname":H,"ports":[{"number":N,"name":S,
 * "protocol":P}],"serviceAccounts":[SPIFFE_ID...],"endpoints":[{"labels":
 * {K:V},"locality":L,"weight":W}]}: never an address, since the linked
 * site reaches every endpoint through the exporting site's gateway.
 *
 * A site exports the ServiceEntries (and Kubernetes Services) labelled
 * strait.io/export: "true"; nothing else ever leaves it.
 */
#define CATALOG_EXPORT_LABEL "strait.io/export"
#define CATALOG_PING_MS 10000
/* Limits of a received catalog (more is refused as a whole). */
#define CATALOG_MAX_LINE (4u << 20)
#define CATALOG_MAX_SERVICES 10000
#define CATALOG_MAX_PORTS 64
#define CATALOG_MAX_ENDPOINTS 1000
#define CATALOG_MAX_LABELS 64

struct cat_label {
    const char *key, *value;
};

struct cat_endpoint {
    struct cat_label *labels;
    size_t nlabels;
    const char *locality; /* "" when not given */
    int64_t weight;       /* 1.. */
};

struct cat_port {
    int64_t number;
    const char *name;
    const char *protocol; /* as Istio spells it: HTTP, TCP, ... */
};

struct cat_service {
    const char *hostname;
    struct cat_port *ports;
    size_t nports;
    const char **sans; /* SPIFFE IDs of the remote trust domain */
    size_t nsans;
    struct cat_endpoint *endpoints;
    size_t nendpoints;
};

enum cat_type { CAT_PING, CAT_CATALOG };

/* A decoded line; everything lives in a (the caller's arena). */
struct catalog {
    enum cat_type type;
    int64_t version;
    const char *site;
    const char *network;
    const char *trust_domain;
    struct cat_service *services;
    size_t nservices;
};

/* What the exporting site says about itself. */
struct catalog_self {
    const char *site;         /* node.name */
    const char *network;      /* node.network */
    const char *trust_domain; /* trustDomain */
};

/*
 * catalog_encode() appends the catalog line of set's exported services
 * (set may be NULL: an empty catalog) with version, ending in "\n".
 * 0, or -1 when b's cap is reached.
 */
int catalog_encode(struct buf *b, const struct resource_set *set,
                   const struct catalog_self *self, int64_t version);

/*
 * catalog_decode() reads one line (n bytes, no newline) into c, strings
 * and arrays in a. The remote site may only speak for its own trust
 * domain: trust_domain (the MeshLink's) must equal the line's, and so
 * must every service account's. 0, or -1 with a reason in why (cap
 * bytes) that names the service and field at fault.
 */
int catalog_decode(const char *p, size_t n, const char *trust_domain,
                   struct arena *a, struct catalog *c, char *why, size_t cap);

/* Where a link's catalog goes: the MeshLink and its gateway. */
struct catalog_link {
    const char *name; /* the MeshLink's */
    const char *ns;
    const char *network;
};

/*
 * catalog_resources() is the merge point: it turns one service of a
 * received catalog into the registry entry the linked site loads, a
 * ServiceEntry document (JSON) in link->ns named catalog_resource_name()
 * whose endpoints are on the remote network with no address of their
 * own, so the split horizon (compile/network.h) reaches them through the
 * remote gateway the link declares (links_gateways()), with the remote
 * locality, labels and weights, and the service accounts as
 * subjectAltNames. Appends to b; 0 or -1.
 */
int catalog_resource(struct buf *b, const struct catalog_link *link,
                     const struct cat_service *svc);

/* catalog_resource_name() writes the ServiceEntry's name for a host of
 * a link: "<link>-<first 10 hex of SHA-256(host)>" (64 bytes). */
void catalog_resource_name(const char *link, const char *host, char out[64]);

#endif
