#ifndef STRAIT_COMPILE_JWT_H
#define STRAIT_COMPILE_JWT_H

#include <stddef.h>
#include <stdint.h>

struct conf_strmap;
struct jwt_authn;
struct resource_set;

/*
 * RequestAuthentications compiled for this node into the providers that
 * jwt_authn_request() (policy/jwt.h) applies: jwt_authn_build() selects
 * the RequestAuthentications that apply to the node in namespace node_ns
 * with labels node_labels (root_ns: Istio's root namespace) and compiles
 * each jwtRule. Returns a new set (one reference, the caller's:
 * jwt_authn_unref()), NULL when none applies, or NULL with *err
 * (allocated) set.
 */

/* Where the documents of http(s) jwksUris come from (the control
 * thread's cache): the document of uri and its length, or NULL when none
 * is known (yet). timeout_ms is the rule's fetch timeout (0: default). */
typedef const char *(*jwt_uri_fn)(void *arg, const char *uri,
                                  int64_t timeout_ms, size_t *n);

/* How a provider's keys are found when jwt_authn_build() runs: the inline
 * jwks, or the jwksUri: file:// documents are read, http(s) ones asked of
 * uri_fn. A provider without keys (no uri_fn, or no document yet) fails
 * its tokens with JWT_NO_JWKS. */
struct jwt_authn *jwt_authn_build(const struct resource_set *set,
                                  const char *node_ns,
                                  const struct conf_strmap *node_labels,
                                  const char *root_ns, char **err);
struct jwt_authn *jwt_authn_build_with(const struct resource_set *set,
                                       const char *node_ns,
                                       const struct conf_strmap *node_labels,
                                       const char *root_ns, jwt_uri_fn uri_fn,
                                       void *uri_arg, char **err);

#endif
