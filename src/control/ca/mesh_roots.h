#ifndef STRAIT_CONTROL_CA_MESH_ROOTS_H
#define STRAIT_CONTROL_CA_MESH_ROOTS_H

#include <openssl/x509.h>

struct event_base;

/*
 * The mesh's roots from istiod's root file (ca.istiod.rootCert, Istio's
 * istio-ca-root-cert ConfigMap), kept current: the file's directory is
 * watched (control/dirwatch.h: the kubelet's "..data" swap, an editor's
 * rename) and the file read again when it changes. Every certificate in
 * it is a root ISTIO_MUTUAL servers and clusters trust, as Istio's
 * proxies trust the whole bundle: during a root rotation the ConfigMap
 * holds the old root and the new one, and peers under either verify.
 *
 * A file that cannot be read or holds no certificate (a half-written
 * one, a mistake) is logged and the last good roots stay in effect.
 * on_change is called on the loop after the roots in effect changed (not
 * when only comments or white space did), so the owner can rebuild what
 * trusts them.
 */
struct mesh_roots;

/* mesh_roots_new() reads path now (its roots must load: NULL with an
 * allocated *err naming path otherwise) and watches it on base's loop.
 * on_change(arg) must outlive the watcher. */
struct mesh_roots *mesh_roots_new(struct event_base *base, const char *path,
                                  void (*on_change)(void *), void *arg,
                                  char **err);

/* mesh_roots_get() is the roots in effect (owned by m, valid until the
 * loop next runs: a change replaces them) and, in *pin, a hex SHA-256 of
 * their DER forms in order (owned by m, the same lifetime). */
const STACK_OF(X509) *
    mesh_roots_get(const struct mesh_roots *m, const char **pin);

void mesh_roots_free(struct mesh_roots *m);

#endif
