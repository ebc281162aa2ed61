#ifndef STRAIT_CONFIG_ANALYZE_H
#define STRAIT_CONFIG_ANALYZE_H

#include <stdio.h>

#include "config/resource-t.h"

struct bootstrap_mesh_networks;

/*
 * Cross-resource analysis of a loaded set, in the manner of istioctl
 * analyze, with its codes, names, levels and message texts
 * (pkg/config/analysis/msg/messages.yaml): IST0002, IST0101, IST0106,
 * IST0109, IST0112, IST0127 (node known), IST0128, IST0129, IST0130,
 * IST0131, IST0132, IST0134, IST0138, IST0140, IST0145, IST0149 (node known),
 * IST0161 (node known: a Secret of its namespace, or its credentials
 * directory), IST0162 (node known, with a Service selecting it),
 * IST0165, IST0171 (from the loader), IST0173, IST0174, IST0177; and strait's
 * own STR0001 (Info: ignored, e.g. a VirtualService or rule bound only to mesh,
 * whose destinations are not checked), STR0002 (Warning), STR0003 (Error:
 * no port to send a destination to), STR0004 (Error, from the loader:
 * a resource defined twice), STR0005 (Warning: an undeclared host passed
 * through under ALLOW_ANY), STR0006 (Warning: a Gateway server not served,
 * its port held by servers it cannot share it with), STR0007 (Error:
 * plaintext beside TLS on one port), STR0008 (Warning, from the
 * loader: an unknown kind in an Istio group, ignored) and STR0009
 * (Warning, node known: an endpoint on a network without a gateway). Each code
 * has one level, Istio's for its own codes. README's "strait check" section
 * says when each fires.
 *
 * Without Kubernetes, the services strait knows are the hosts of
 * ServiceEntries and the services WorkloadEntries stand for: a
 * WorkloadEntry labelled app=NAME in namespace NS backs
 * NAME.NS.svc.<domain>, as a Kubernetes Service selecting it by its app
 * label would; these are the registry (a DestinationRule alone does not
 * put a host in it). A destination host outside it is an error under
 * outboundTrafficPolicy REGISTRY_ONLY (IST0101) and a warning under
 * ALLOW_ANY (STR0005), which passes it through by DNS. Short names expand in
 * the namespace of the resource that wrote them.
 */

struct analysis {
    struct res_msgs msgs; /* the set's load messages first, then findings */
};

/*
 * analyze() checks set and fills out (which the caller disposes with
 * analysis_dispose, whatever the result). set is only read;
 * outbound_mode is the mesh's enum res_outbound_mode. Returns the number
 * of errors in out, load errors included.
 */
int analyze(const struct resource_set *set, int outbound_mode,
            struct analysis *out);

/* What `strait check -c` knows of the node the set is for (all owned by
 * the caller). */
struct analysis_node {
    const char *name;
    const char *ns;
    const struct conf_strmap *labels;
    const char *root_ns;         /* Istio's root namespace: istio-system */
    const char *credentials_dir; /* credentialName NAME is DIR/NAME/;
                                  * NULL or "": not checked */
    const char *default_ns;      /* config.defaultNamespace; NULL: default */
    /* node.network and meshNetworks (NULL: none): endpoints on a network
     * without a gateway are said (STR0009). */
    const char *network;
    const struct bootstrap_mesh_networks *mesh;
    const char *bootstrap_file; /* where mesh was read, for messages */
    /* node.service: the gateway's own Service; NULL or "": found by the
     * labels (res_k8s_own_service()). */
    const char *service;
    /* lua.path (the directories source.file is looked for in); NULL: not
     * known, LuaPolicy files are not checked. */
    char *const *lua_path;
    size_t nlua_path;
};

/* analyze_networks() adds STR0009 Warnings for endpoints on a network
 * other than node's that has no gateway, and for meshNetworks gateways
 * whose registryServiceName is no service of the set (analyze-net.c). */
void analyze_networks(const struct resource_set *set,
                      const struct analysis_node *node, struct res_msgs *msgs);

/* analyze_node() is analyze() for node (NULL: not known), which adds
 * IST0127 for policies that select nothing on it and IST0149. */
int analyze_node(const struct resource_set *set, int outbound_mode,
                 const struct analysis_node *node, struct analysis *out);

/* analyze_scope() is the part of analyze_node() about what selects
 * nothing on node (IST0127 Warnings; IST0101 for a Gateway whose
 * selector the node does not match, an inert Error): the running gateway
 * logs it and never refuses a load for it.
 * Returns the number of messages in out (analysis_dispose it). */
int analyze_scope(const struct resource_set *set,
                  const struct analysis_node *node, struct analysis *out);

/* analysis_applies() says whether r is used on node (NULL: not known,
 * then only what is known without it): 1, or 0 with the code and message
 * in reason ("IST0127 No matching workloads for this resource with the
 * following labels: app=x"; "STR0001 VirtualService bound only to mesh
 * ..."), for /config_dump. */
int analysis_applies(const struct resource *r, const struct analysis_node *node,
                     char *reason, size_t n);

void analysis_dispose(struct analysis *a);

/* res_code_name() returns istioctl's name for a code
 * ("ReferencedResourceNotFound"), or "" for one it does not know. */
const char *res_code_name(const char *code);

struct buf;
/* res_codes_reference() appends every analyzer code strait reports, one
 * "CODE<TAB>Name" line each, in the order of its table (`strait
 * reference codes`, and docs/reference/analyzer-codes.md from it). */
void res_codes_reference(struct buf *b);

/*
 * resource_check() is `strait check`: it loads path (a directory or a
 * file), analyses it when it loaded without errors, and prints every
 * message to out, one line each, as
 *   Error [IST0101] (VirtualService default/reviews f.yaml:12:9) path: text
 * or, when json is set, as a JSON array of objects with istioctl's fields
 * (code, level, message, origin, documentationUrl) and file, line, column,
 * path. outbound_mode is as for analyze(). Returns the exit status: 1
 * when there is any error, else 0.
 */
int resource_check(const char *path, int json, int outbound_mode, FILE *out);
int resource_check_node(const char *path, int json, int outbound_mode,
                        const struct analysis_node *node, FILE *out);
/* resource_check_progress() is resource_check_node() that tells progress
 * (NULL: nobody) after each file read, when the analysis starts and
 * before anything is printed to out (a terminal's progress line is
 * cleared then). */
struct res_progress;
int resource_check_progress(const char *path, int json, int outbound_mode,
                            const struct analysis_node *node,
                            const struct res_progress *progress, FILE *out);

struct buf;

/* analysis_msg_text() writes m as istioctl prints it:
 * "Error [IST0101] (Kind ns/name file:line:col) path: message". */
void analysis_msg_text(struct buf *b, const struct res_msg *m);

#endif
