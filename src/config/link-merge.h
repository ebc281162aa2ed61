#ifndef STRAIT_CONFIG_LINK_MERGE_H
#define STRAIT_CONFIG_LINK_MERGE_H

#include <stddef.h>
#include <stdint.h>

struct conf_strs;

/*
 * Which hosts of the linked sites' catalogs may merge into this site's
 * registry (README "Site links", "Whose host it is").
 *
 * A host is owned by whoever defined it first: this site (a
 * ServiceEntry or Kubernetes Service of its own configuration; a
 * wildcard host owns every name it covers), else the MeshLink whose
 * catalog announced it first (then the MeshLink with the smaller
 * namespace/name). A link's entry for a host someone else owns merges
 * only when the link's MeshLink imports it, Istio-style: spec.import.
 * hosts names the host (a name or *.suffix), or spec.import.namespaces
 * names the owner's namespace (the defining resource's, or the owning
 * MeshLink's) or "*". Every other entry is left out and reported as a
 * conflict: a remote site can add hosts, never take one over.
 *
 * The decision is a pure function of its inputs, so the control loop,
 * `strait check` and the fuzz target (tests/fuzz/fuzz_catalog_merge.c)
 * apply the same rule.
 */

/* A host this site defines. */
struct link_merge_local {
    const char *host; /* a full name, or "*.suffix" / "*" */
    const char *ns;   /* the namespace of the resource that defines it */
    const char *what; /* "ServiceEntry ns/name", for the conflict */
};

/* One host of a link's catalog. */
struct link_merge_host {
    const char *host;     /* a full DNS name */
    uint64_t since;       /* when the link first announced it; smaller
                           * is earlier */
    int admit;            /* out: 1 merges, 0 left out */
    const char *conflict; /* out: with 0, whose it is (a local what or
                           * another link's source); owned by the input */
};

struct link_merge_link {
    const char *ns, *name;
    const char *source; /* "MeshLink ns/name" */
    /* spec.import; NULL: imports nothing. */
    const struct conf_strs *import_hosts;
    const struct conf_strs *import_namespaces;
    struct link_merge_host *hosts;
    size_t nhosts;
};

/*
 * link_merge_imports() is true when link's spec.import lets its entry
 * for host join a host owned in namespace owner_ns.
 */
int link_merge_imports(const struct link_merge_link *link, const char *host,
                       const char *owner_ns);

/*
 * link_merge_decide() sets admit and conflict of every host of every
 * link. Nothing is allocated that outlives the call; 0, or -1 when
 * memory ran out (then every host is left out: refusing is the safe
 * side).
 */
int link_merge_decide(const struct link_merge_local *loc, size_t nloc,
                      struct link_merge_link *links, size_t nlinks);

/* The label of the registry entries a MeshLink makes (its name). */
#define LINK_MERGE_LABEL "strait.io/meshlink"

/*
 * link_merge_analyze() is what `strait check` can know offline: a
 * ServiceEntry of the set shaped as a MeshLink's entry (labelled
 * LINK_MERGE_LABEL with a MeshLink of its namespace, one host; one kept
 * from /config_dump, say) for a host this site or an earlier such entry
 * owns, and not imported, gets a Warning STR0011: at run time it would be
 * left out.
 */
struct resource_set;
struct res_msgs;
void link_merge_analyze(const struct resource_set *set, struct res_msgs *msgs);

#endif
