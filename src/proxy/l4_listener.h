#ifndef STRAIT_PROXY_L4_LISTENER_H
#define STRAIT_PROXY_L4_LISTENER_H

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"
#include "core/host.h"
#include "core/list.h"
#include "event/reap-t.h"
#include "net/acceptor.h"
#include "net/plistener.h"
#include "proxy/hbone.h"
#include "proxy/l4_relay.h"

struct balancer;
struct cluster;
struct clienthello;
struct cx_limit;
struct istio_sni;
struct http_listener_conf;
struct l4_http;
struct stats_block;
struct tls_holder;
struct ssl_ctx_st;

/*
 * Gateway listeners of TCP and TLS servers (Istio's tcp and tls routes):
 * a port's connections are routed by the SNI of their ClientHello (TLS
 * PASSTHROUGH relays the TLS stream untouched; TLS SIMPLE, MUTUAL and
 * OPTIONAL_MUTUAL terminate it here first) or, for plaintext TCP, by port
 * and addresses alone, then relayed by the TCP relay (l4_relay.h).
 */

/* An address range of destinationSubnets or sourceSubnet. */
struct l4_subnet {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    unsigned prefix;
};

/* One match block of a rule, kept when its port and gateways fit the
 * listener; its subnets are checked per connection (empty: any). */
struct l4_block {
    struct l4_subnet *dst; /* destinationSubnets: the address connected to */
    size_t ndst;
    struct l4_subnet *src; /* sourceSubnet: the client's address */
    size_t nsrc;
};

struct l4_dest {
    size_t cluster; /* index into the conf's clusters */
    uint32_t weight;
};

/* A tls or tcp rule: its blocks (none: every connection) and weighted
 * destinations. */
struct l4_rule {
    char *route; /* "ns/name" of the VirtualService, for the access log */
    struct l4_block *blocks;
    size_t nblocks;
    struct l4_dest *dests;
    size_t ndests;
    uint64_t total; /* sum of the weights */
};

struct l4_rules {
    struct l4_rule *v;
    size_t n;
    int by_local; /* some block has destinationSubnets */
};

enum l4_target { L4_TO_PASSTHROUGH, L4_TO_TERMINATE, L4_TO_HTTP };

/* An SNI table entry: an exact name, "*.suffix", or "*" (any, and no
 * SNI), with what to do: relay a tls rule's stream, terminate TLS for a
 * server, or hand the connection to the HTTP proxy of the port's HTTPS
 * servers. */
struct l4_sni {
    char *name;   /* lowercase */
    int target;   /* enum l4_target */
    size_t index; /* into passthrough or servers; 0 for L4_TO_HTTP */
};

/*
 * AUTO_PASSTHROUGH (Istio's east-west gateway): a registry service's host,
 * port and DestinationRule subset that an SNI outbound_.<port>_.<subset>_.
 * <host> may name, and the cluster of its endpoints. The conf keeps them
 * sorted by host, port, subset, one entry per triple.
 */
struct l4_auto {
    char *host; /* lowercase FQDN */
    uint32_t port;
    char *subset;   /* "": none */
    size_t cluster; /* index into the conf's clusters */
};

/* What l4_auto_lookup() found of an SNI's destination. */
enum l4_auto_result {
    L4_AUTO_FOUND,
    L4_AUTO_NO_HOST,   /* no service of that host behind the servers */
    L4_AUTO_NO_PORT,   /* the host, not on that port */
    L4_AUTO_NO_SUBSET, /* the host and port, not that subset */
};

/* A TLS-terminating server: its certificate and client checks, and the
 * tcp rules that route what it decrypts. */
struct l4_server {
    struct tls_holder *tls;
    struct l4_rules rules;
};

struct authz;

struct l4_listener_conf {
    int refs;
    char *name;
    struct stats_block *stats; /* one reference held */
    uint32_t port;
    int inspect;                 /* peek a ClientHello before routing */
    struct l4_rules tcp;         /* plaintext TCP servers' rules */
    struct l4_rules passthrough; /* tls rules, in SNI table order */
    struct l4_sni *sni;
    size_t nsni;
    size_t asni; /* allocated entries */
    /* sni's names -> their index in sni (l4_sni_add keeps it): a
     * connection's SNI is looked up by hash, not by a scan of every
     * passthrough host. */
    struct host_index sni_index;
    struct l4_server *servers;
    size_t nservers;
    /* Some server is AUTO_PASSTHROUGH: SNIs in Istio's format (and any
     * the SNI table does not take) are routed by autos. */
    int auto_passthrough;
    struct l4_auto *autos;
    size_t nautos;
    struct cluster **clusters; /* one reference each */
    size_t nclusters;
    uint64_t inspect_timeout_ms; /* for the ClientHello (and PROXY header) */
    /* gatewayTopology.proxyProtocol: every connection starts with a PROXY
     * header of at most this many bytes; 0: none is read. */
    uint32_t proxy_protocol;
    uint64_t handshake_timeout_ms;
    size_t max_client_hello;
    struct l4_relay_params relay; /* name and stats point into the conf */
    struct authz *authz;          /* one reference; NULL: no policy */
    /* A port shared with HTTPS servers: their HTTP proxy (certificates,
     * routes, its own AuthorizationPolicy checks per request), which each
     * worker runs without a socket of its own. One reference; NULL: none. */
    struct http_listener_conf *http;
    struct series_labels *metrics_src; /* one reference; relay borrows it */
    /* The connection limit its connections count against (adopted ones
     * by the HTTP part too); one reference, NULL: uncounted. */
    struct cx_limit *cx;
    /* An HBONE server (alone on the port): every connection is
     * handshaken with servers[0] (no SNI, ALPN h2) and served as HTTP/2
     * CONNECT tunnels to the autos' services (no subsets) and their
     * endpoints; hbone holds the limits. */
    int is_hbone;
    struct hbone_limits hbone;
    /* This node's baggage for the HBONE tunnels the relay opens (owned;
     * NULL: none; relay.hbone_baggage points here). */
    char *hbone_baggage;
};

struct l4_listener_conf *l4_listener_conf_new(const char *name,
                                              struct stats_block *stats);
struct l4_listener_conf *l4_listener_conf_ref(struct l4_listener_conf *c);
void l4_listener_conf_unref(struct l4_listener_conf *c);

/* l4_listener_tls_check() reloads changed certificate files of the conf's
 * terminating servers (main thread); see tls_holder_check(). */
int l4_listener_tls_check(struct l4_listener_conf *c, char **err);

/*
 * l4_sni_lookup() picks the SNI entry for name (lowercase; NULL or "":
 * none sent) as Envoy picks a filter chain by server name: an exact name,
 * else the longest "*.suffix" that ends it, else "*". Among equal names
 * the first entry wins. NULL when nothing matches.
 */
const struct l4_sni *l4_sni_lookup(const struct l4_listener_conf *c,
                                   const char *name);

/*
 * l4_sni_add() adds an SNI entry to c, for the compiler: name (lowercase,
 * heap; c takes it, and frees it when the name is taken) for target and
 * index. The first entry to claim a name keeps it. Returns 1 added, 0
 * taken, -1 out of memory.
 */
int l4_sni_add(struct l4_listener_conf *c, char *name, int target,
               size_t index);

/*
 * l4_auto_sort() puts c's autos in the order l4_auto_lookup() searches,
 * dropping repeated triples (the first one stays). For the compiler.
 */
void l4_auto_sort(struct l4_listener_conf *c);

/*
 * l4_auto_lookup() finds the AUTO_PASSTHROUGH entry of sni (parsed,
 * lowercase) in c's sorted autos. Returns an enum l4_auto_result; *out
 * is the entry when L4_AUTO_FOUND (owned by c), else NULL.
 */
int l4_auto_lookup(const struct l4_listener_conf *c,
                   const struct istio_sni *sni, const struct l4_auto **out);

/* l4_rule_match() returns the first rule of rules whose blocks admit a
 * connection from peer to local (either may be NULL: unknown, which only
 * rules without subnets admit), or NULL. */
const struct l4_rule *l4_rule_match(const struct l4_rules *rules,
                                    const struct sockaddr *local,
                                    const struct sockaddr *peer);

/* One worker's side of an L4 Gateway listener (one thread only). */
struct l4_listener {
    struct plistener pl;           /* first: workers see a plistener */
    struct l4_listener_conf *conf; /* one reference held */
    struct event_base *base;
    int worker;
    struct acceptor acc;
    struct l4_relay relay;
    int relay_ok;
    struct list pending; /* connections being inspected or handshaken */
    size_t npending;
    struct list dead;
    struct reaper *reaper; /* the worker's */
    struct reap_node reap; /* frees dead, then checks idleness */
    uint64_t rng;
    size_t *rr; /* per cluster: next endpoint */
    /* AUTO_PASSTHROUGH: per cluster, this worker's balancer (the
     * DestinationRule's loadBalancer, skipping ejected endpoints), set up
     * on first use (lb_ok). */
    struct balancer *lb;
    uint8_t *lb_ok;
    struct ssl_ctx_st **ctx; /* per server: the SSL_CTX in use */
    unsigned *gen;
    uint8_t *peek; /* max_client_hello + record headers */
    size_t peek_cap;
    uint8_t *scratch;      /* max_client_hello */
    struct l4_http *http;  /* conf->http's listener; NULL: none */
    struct list http_link; /* in http->holders */
    plistener_idle_fn on_idle;
    void *arg;
    struct hbone_worker hb; /* conf->is_hbone: the HBONE connections */
};

/* l4_listener_check_idle() tells the worker, when p stopped accepting and
 * holds no connection, that it may be freed (on a later turn). */
void l4_listener_check_idle(struct l4_listener *p);

extern const struct plistener_ops l4_listener_ops;

#endif
