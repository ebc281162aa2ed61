#ifndef STRAIT_COMPILE_PEERAUTHN_H
#define STRAIT_COMPILE_PEERAUTHN_H

#include <stdint.h>

struct conf_strmap;
struct resource_set;

/* The mTLS a mesh-facing listener of this node requires (Istio's
 * PeerAuthentication modes, resolved). */
enum peer_authn_mode {
    PEER_AUTHN_UNSET,      /* no PeerAuthentication says: the listener's own */
    PEER_AUTHN_PERMISSIVE, /* mTLS and plaintext both accepted */
    PEER_AUTHN_STRICT,     /* mTLS only */
    PEER_AUTHN_DISABLE,    /* plaintext only */
};

/*
 * peer_authn_mode() resolves the PeerAuthentications of set for a node in
 * namespace node_ns with labels, on port, as Istio does: the mesh-wide
 * policy (root namespace, no selector), overridden by the namespace's (no
 * selector), overridden by the first whose selector matches the node;
 * UNSET inherits; the workload policy's portLevelMtls entry for port
 * overrides its own mode. With nothing set: PEER_AUTHN_UNSET (Istio's
 * default is PERMISSIVE; a Gateway's ISTIO_MUTUAL server keeps its own
 * STRICT meaning then).
 */
enum peer_authn_mode peer_authn_mode(const struct resource_set *set,
                                     const char *node_ns,
                                     const struct conf_strmap *labels,
                                     const char *root_ns, uint32_t port);

const char *peer_authn_mode_name(enum peer_authn_mode m);

#endif
