#ifndef STRAIT_COMPILE_ISTIO_H
#define STRAIT_COMPILE_ISTIO_H

#include <stddef.h>
#include <stdint.h>

#include "compile/identity.h"
#include "compile/network.h"
#include "core/addr.h"
#include "core/strmap.h"

/* Istio's root namespace: mesh-wide policies live there. */
#define ISTIO_ROOT_NAMESPACE "istio-system"

struct bootstrap;
struct cluster;
struct compile_dns;
struct compile_identity;
struct resource_set;
struct ssl_st;
struct x509_st;

/*
 * Gateways become listeners: the servers of every Gateway whose selector
 * matches this node's labels, grouped by bind address and port. One
 * listener serves all the servers on its port (Istio merges them the same
 * way); HTTPS servers give it their certificates.
 */
/* How a server's connections are served. */
enum gw_mode {
    GW_MODE_HTTP,        /* HTTP, HTTP2, GRPC: plaintext HTTP */
    GW_MODE_HTTPS,       /* HTTPS terminated here, then HTTP */
    GW_MODE_TCP,         /* TCP (MONGO, MYSQL, REDIS): tcp routes */
    GW_MODE_PASSTHROUGH, /* TLS or HTTPS, mode PASSTHROUGH: tls routes */
    GW_MODE_TLS_TCP,     /* TLS terminated here, then tcp routes */
    /* TLS or HTTPS, mode AUTO_PASSTHROUGH: Istio's east-west gateway; the
     * SNI outbound_.<port>_.<subset>_.<host> names a registry service's
     * cluster, no VirtualService is used */
    GW_MODE_AUTO_PASSTHROUGH,
    /* HBONE, tls mode ISTIO_MUTUAL: HTTP/2 CONNECT tunnels (Istio's
     * ambient east-west port 15008); :authority names a registry
     * service's host and port or one of their endpoints */
    GW_MODE_HBONE,
};

/* A terminating server's TLS settings (files resolved; credentialName's
 * ca.crt or NAME-cacert/ca.crt for client certificates, and the ca.crl
 * beside it). */
struct gw_tls {
    int mode;         /* enum res_server_tls_mode */
    char *cert;       /* certificate chain file */
    char *key;        /* private key file */
    char *ca;         /* MUTUAL, OPTIONAL_MUTUAL: CA bundle file */
    char *crl;        /* caCrl, or the credential's ca.crl; NULL: none */
    int crl_optional; /* the credential's ca.crl: absent means no CRL */
    char **sans;      /* subjectAltNames */
    size_t nsans;
    char **spki; /* verifyCertificateSpki */
    size_t nspki;
    char **hashes; /* verifyCertificateHash */
    size_t nhashes;
    /* minProtocolVersion, maxProtocolVersion as TLS1_x_VERSION; 0: TLS 1.2
     * and TLS 1.3 (Istio's TLS_AUTO on a gateway). */
    uint16_t min_version;
    uint16_t max_version;
    char **ciphers; /* cipherSuites, OpenSSL names; NULL: ours */
    size_t nciphers;
    /* ISTIO_MUTUAL (cert, key and ca NULL): this node's mesh certificate,
     * set for each handshake by cred (compile_identity.ssl, arg cred_arg),
     * so a rotation in memory is presented at once, and the mesh root
     * clients must chain to (a reference the gw_tls drops). */
    int (*cred)(struct ssl_st *ssl, void *arg);
    void *cred_arg;
    struct x509_st *root;
    /* ISTIO_MUTUAL: with root, the mesh's roots clients may chain to
     * (compile_identity.mesh_roots, root among them; references the
     * gw_tls drops), NULL: root only. */
    struct stack_st_X509 *extra;
};

/* One Gateway server on the listener's port. */
struct gw_server {
    char *gateway; /* "ns/name" */
    char **hosts;  /* "[ns/]host" as written */
    size_t nhosts;
    int mode; /* enum gw_mode */
    struct gw_tls tls;
};

struct gw_listener {
    char name[64];
    struct addr address;
    uint32_t port;
    int tls;    /* HTTP listeners: TLS is terminated; L4: some server does */
    int l4;     /* TCP and TLS servers (l4_listener), not HTTP */
    int shared; /* l4 with HTTPS servers too: their SNI names hand a
                 * connection to an HTTP proxy (certs, cert_tls) */
    int secure; /* TLS on the wire (HTTPS, TLS), as opposed to plaintext */
    int permissive; /* PeerAuthentication PERMISSIVE: plaintext beside mTLS */
    char **certs;   /* HTTPS servers: cert, key pairs: 2 * ncerts paths */
    size_t ncerts;
    const struct gw_tls **cert_tls;       /* the server settings of each pair */
    const struct gw_server **cert_server; /* and the server itself */
    struct gw_server *servers;
    size_t nservers;
    int https_redirect;
    int hbone;          /* HBONE servers (alone on their port) */
    struct ident_id id; /* what the listener is, for change detection */
};

struct gw_set {
    struct gw_listener *v;
    size_t n;
};

/* istio_gateways() lowers the selected Gateways; -1 with *err when two
 * servers on one port cannot share it (plaintext and TLS of the same
 * kind), or a terminating server's files are missing. HTTPS servers and
 * TLS servers (PASSTHROUGH or terminated) share a port by SNI, as Envoy's
 * filter chains do (the listener is l4 and shared). Plaintext HTTP and
 * TCP servers cannot (no SNI tells their connections apart): as in Istio,
 * the later one is skipped with a warning, as is a plaintext server of
 * the other kind beside TLS ones. ISTIO_MUTUAL servers take this node's
 * mesh certificate from identity (NULL: no CA, and such a server is an
 * error).
 */
int istio_gateways(const struct bootstrap *bs, const struct resource_set *set,
                   const struct compile_identity *identity, struct gw_set *out,
                   char **err);
void gw_set_dispose(struct gw_set *g);

/*
 * Destinations become clusters: (host, subset, port) resolved against
 * ServiceEntries, WorkloadEntries and DestinationRules. A table collects
 * them while a router is built and owns one reference to each.
 *
 * Clusters are also kept by identity (the key, the endpoints, the
 * protocol and the DestinationRule they come from): a table reuses the
 * cluster of an equal identity from prev (the running snapshot's) or
 * from next (this build's, shared with other listeners), so a cluster that
 * did not change keeps its object across snapshots: its workers' pools and
 * their idle connections, its counters, circuit breakers and outlier
 * state. next's values hold one reference each.
 */
/*
 * What a table's clusters were built from besides the resources and the
 * DNS answers (both recorded by the caller): the identity of each cluster
 * the table took, in order, and the files their TLS settings name with
 * what they were (inode, mtime) when read, in order, with their paths so
 * a later build can look at them again (istio_file_ident()). For the
 * identity of the routes that point to the clusters.
 */
struct istio_used {
    struct ident clusters; /* each cluster's identity, in table order */
    struct ident files;    /* istio_file_ident() of each file read */
    char **paths;          /* the files read, in order */
    size_t npaths;
    int oom;
};

void istio_used_init(struct istio_used *u);
void istio_used_dispose(struct istio_used *u);

/* istio_file_ident() feeds path and what it is now (inode and mtime, or
 * absent) into d. */
void istio_file_ident(struct ident *d, const char *path);

struct istio_clusters {
    const struct resource_set *set;
    int nworkers;
    struct cluster **v;
    size_t n;
    struct strmap ids;            /* "host|subset|port" -> index + 1 */
    const struct ident_map *prev; /* NULL: nothing to reuse */
    struct ident_map *next;       /* NULL: do not share */
    /* The gateway's namespace: only DestinationRules and ServiceEntries
     * exported to it apply. NULL: all do. */
    const char *node_ns;
    /* Names of ServiceEntries with resolution DNS; NULL: used as IPs. */
    const struct compile_dns *dns;
    /* DestinationRule ISTIO_MUTUAL: this node's mesh certificate, rotated
     * (NULL: no CA, such clusters refuse requests). */
    const struct compile_identity *identity;
    const char *trust_domain;
    const char *credentials_dir; /* credentialName NAME -> NAME/tls.crt... */
    /* outboundTrafficPolicy (enum res_outbound_mode; 0 is REGISTRY_ONLY)
     * and the port of the Gateway listener the routes are built for: an
     * undeclared destination host without a port is passed through on it,
     * as Istio's destination cluster takes the listener's port. */
    int outbound_mode;
    uint32_t listener_port;
    /* What the clusters were built from, recorded; NULL: not. */
    struct istio_used *used;
    /* The networks (node network, meshNetworks, gateways added at run
     * time) and, built from them at the first cluster, the table the
     * split horizon reads. */
    struct net_inputs nets;
    struct net_table nt;
    int nt_built;
    /* Set while an AUTO_PASSTHROUGH server's clusters are built: only
     * endpoints on the node's network (NET_SPLIT_LOCAL_VIEW). */
    int local_view;
    /* The node as locality load balancing sees it (bootstrap node.locality,
     * node.network, node.labels); NULL: none. */
    const char *node_locality;
    const char *node_network;
    const struct conf_strmap *node_labels;
    /* Which resources name a host, so a cluster looks up its
     * ServiceEntries, WorkloadEntries and DestinationRule by hash rather
     * than by a scan of the set (a scan per cluster made N tenants cost
     * N^2): lowercase full host -> struct istio_hostrefs (set indexes,
     * ascending), the services with a wildcard host apart. hosts_ok is 0
     * when memory ran out building them: then every lookup scans. */
    struct strmap hosts;
    size_t *wild;
    size_t nwild;
    int hosts_ok;
};

void istio_clusters_init(struct istio_clusters *t,
                         const struct resource_set *set, int nworkers,
                         const struct ident_map *prev, struct ident_map *next);
void istio_clusters_dispose(struct istio_clusters *t);

/* istio_cluster_map_dispose() drops the references an identity map
 * holds and frees it. */
void istio_cluster_map_dispose(struct ident_map *m);

/*
 * istio_cluster_id() finds or builds the cluster for a destination and
 * returns its index, or -1 when memory runs out. A destination with no
 * endpoint still gets a cluster (its requests are answered 503 UH).
 *
 * A host not in the registry (no ServiceEntry visible to the node covers
 * it, no WorkloadEntry stands for it) goes by t->outbound_mode: under
 * REGISTRY_ONLY to the one BlackHoleCluster (no endpoints, origin
 * CLUSTER_BLACKHOLE); under ALLOW_ANY to a passthrough cluster (origin
 * CLUSTER_PASSTHROUGH) of the host itself, an IP as is or a name through
 * t->dns, on the destination's port or else t->listener_port, with the
 * host's DestinationRule applied. To an external host (a MESH_EXTERNAL
 * ServiceEntry, or a passthrough) TLS origination without an sni sends
 * the host name as SNI and checks the certificate against it.
 */
int istio_cluster_id(void *table, const char *host, const char *subset,
                     uint32_t port);

struct conf_strs;
struct res_load_balancer;
struct res_connection_pool;
struct res_outlier;
struct res_client_tls;

/*
 * What a cluster is built from once lowered, whichever config world it
 * comes from: a ServiceEntry host with its DestinationRule (Istio's
 * defaults), a bootstrap `clusters:` entry, or the `upstreams` of a
 * bootstrap tcp listener (the bootstrap's defaults). Every cluster is
 * built by compile_cluster(), so balancing, breakers, outlier detection
 * and TLS origination are the same objects in both worlds.
 */
struct cluster_spec {
    const char *name;
    const struct addr *endpoints;
    const uint32_t *weights; /* NULL: all equal */
    size_t nendpoints;
    /* The defaults of the world it comes from. */
    int http2;                      /* protocol http2 (else HTTP/1.1) */
    uint64_t connect_timeout_ms;    /* Istio: 10 s; bootstrap: its key */
    uint64_t idle_timeout_ms;       /* Istio: 1 h; bootstrap: its key */
    uint64_t max_requests_per_conn; /* 0: no limit */
    /* A bootstrap tcp listener's upstreams: a cluster without a name of
     * its own (see cluster.implicit). */
    int implicit;
    /* The traffic policy, each section NULL when not set: round robin, no
     * limits, no outlier detection, plaintext. */
    const struct res_load_balancer *lb;
    const struct res_connection_pool *pool;
    const struct res_outlier *od;
    const struct res_client_tls *tls;
    /* The destination TLS is originated for (ISTIO_MUTUAL's SNI and the
     * endpoints' service accounts); NULL/0 for the bootstrap. */
    const char *host;
    const char *subset;
    uint32_t port;
    const struct conf_strs *sans;
    /* Per endpoint (NULL: none): reached through HBONE, and its SPIFFE ID
     * (NULL entries: unknown). */
    const uint8_t *hbone;
    const char *const *hbone_ids;
    /* This node's network: double HBONE's x-forwarded-network. */
    const char *node_network;
    /* Locality: each endpoint's ("region/zone/subzone", NULL: none; the
     * array NULL: none has one) and priority level (NULL: all 0). */
    const char *const *localities;
    const uint32_t *levels;
    /* distribute: the levels are localities of these weights (NULL: the
     * levels are priorities). */
    const uint32_t *level_weights;
};

/*
 * compile_mesh_trust() sets tc's roots as ISTIO_MUTUAL verifies a peer of
 * the mesh: the mesh's bundle when there is one (its first root as
 * *root, replacing the one given, which is the node certificate's), else
 * *root, and the linked sites' roots as extra. *extra gets a list the
 * caller frees with sk_X509_free() after building (NULL: none). 0, or -1
 * when memory runs out.
 */
struct tls_client_conf;
int compile_mesh_trust(const struct compile_identity *identity,
                       struct tls_client_conf *tc, struct x509_st **root,
                       struct stack_st_X509 **extra);

/* compile_hbone_baggage() is the baggage this node sends on the HBONE
 * tunnels it opens (ztunnel's keys: k8s.namespace.name, service.name,
 * service.version from the node's namespace and app/version labels).
 * Malloc'd; NULL when memory runs out. */
char *compile_hbone_baggage(const struct bootstrap *bs);

/*
 * compile_cluster_hbone() gives c the HBONE endpoints of sp (sp->hbone
 * not NULL): their flags, SPIFFE IDs and the client context built with
 * identity's mesh certificate (NULL: none, and c->hbone_error is set so
 * sessions to them are refused). 0, or -1 when memory runs out.
 */
int compile_cluster_hbone(const struct compile_identity *identity,
                          struct cluster *c, const struct cluster_spec *sp);

/*
 * compile_cluster() builds the cluster of sp (nothing of sp is kept).
 * t gives what TLS origination may need (the mesh identity, the
 * credentials directory); NULL: neither. With err NULL a TLS context
 * that cannot be set up is logged and the cluster refuses requests
 * (Istio's way); with err, it fails the build with an allocated *err
 * (the bootstrap's way). Returns the cluster with one reference, or NULL.
 */
struct cluster *compile_cluster(const struct istio_clusters *t,
                                const struct cluster_spec *sp, int nworkers,
                                char **err);

#endif
