/*
 * PeerAuthentication resolved for one node and port (see peerauthn.h).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "config/resource.h"
#include "compile/peerauthn.h"

static int set_mode(int mode, enum peer_authn_mode *out)
{
    switch (mode) {
    case RES_MTLS_STRICT:
        *out = PEER_AUTHN_STRICT;
        return 1;
    case RES_MTLS_PERMISSIVE:
        *out = PEER_AUTHN_PERMISSIVE;
        return 1;
    case RES_MTLS_DISABLE:
        *out = PEER_AUTHN_DISABLE;
        return 1;
    }
    return 0; /* UNSET: inherit */
}

enum peer_authn_mode peer_authn_mode(const struct resource_set *set,
                                     const char *node_ns,
                                     const struct conf_strmap *labels,
                                     const char *root_ns, uint32_t port)
{
    const struct res_peer_authentication *mesh = NULL, *ns = NULL, *wl = NULL;
    enum peer_authn_mode m = PEER_AUTHN_UNSET;
    char key[12];

    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_peer_authentication *pa;

        if (r->kind != RES_PEER_AUTHENTICATION)
            continue;
        pa = res_peer_authentication(r);
        if (pa->selector.match_labels.n == 0) {
            /* The first of each scope wins (Istio takes the oldest). */
            if (strcmp(r->meta.ns, root_ns) == 0 && mesh == NULL)
                mesh = pa;
            if (strcmp(r->meta.ns, node_ns) == 0 && ns == NULL)
                ns = pa;
        } else if (strcmp(r->meta.ns, node_ns) == 0 && wl == NULL &&
                   labels != NULL &&
                   res_labels_match(&pa->selector.match_labels, labels)) {
            wl = pa;
        }
    }
    /* In the root namespace, the namespace policy is the mesh's. */
    if (mesh != NULL)
        set_mode(mesh->mtls.mode, &m);
    if (ns != NULL && ns != mesh)
        set_mode(ns->mtls.mode, &m);
    if (wl != NULL) {
        set_mode(wl->mtls.mode, &m);
        snprintf(key, sizeof(key), "%u", (unsigned)port);
        for (size_t i = 0; i < wl->port_level_mtls.n; i++)
            if (strcmp(wl->port_level_mtls.keys[i], key) == 0)
                set_mode(
                    ((const struct res_mtls *)wl->port_level_mtls.v)[i].mode,
                    &m);
    }
    return m;
}

const char *peer_authn_mode_name(enum peer_authn_mode m)
{
    switch (m) {
    case PEER_AUTHN_STRICT:
        return "STRICT";
    case PEER_AUTHN_DISABLE:
        return "DISABLE";
    case PEER_AUTHN_PERMISSIVE:
        return "PERMISSIVE";
    case PEER_AUTHN_UNSET:
        break;
    }
    return "UNSET";
}
