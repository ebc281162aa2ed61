#ifndef STRAIT_COMPILE_AUTHZ_H
#define STRAIT_COMPILE_AUTHZ_H

struct authz;
struct conf_strmap;
struct resource_set;

/*
 * compile_authz() selects the AuthorizationPolicies of set that apply to a
 * node in namespace node_ns with labels node_labels (root_ns: Istio's root
 * namespace) and compiles their rules for authz_check() (policy/authz.h).
 * A policy in the root namespace without a selector applies to the whole
 * mesh, one in the node's namespace without a selector to the namespace,
 * one with a selector where its labels match the node's, in its namespace
 * or in the root namespace. Values become exact/prefix/suffix/any matchers
 * or path templates, IP blocks become prefixes.
 *
 * Returns a new set (one reference, the caller's: authz_unref()), NULL
 * when no policy applies (every request passes), or NULL with *err
 * (allocated) set when memory runs out.
 */
struct authz *compile_authz(const struct resource_set *set, const char *node_ns,
                            const struct conf_strmap *node_labels,
                            const char *root_ns, char **err);

#endif
