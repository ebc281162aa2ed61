#ifndef STRAIT_CONFIG_RESOURCE_H
#define STRAIT_CONFIG_RESOURCE_H

#include <stddef.h>

#include "config/resource-t.h"

struct buf;

/*
 * Istio resources (networking.istio.io v1, v1beta1, v1alpha3): Gateway,
 * VirtualService, DestinationRule, ServiceEntry, WorkloadEntry, loaded from
 * YAML or JSON, checked against Istio's schema with Istio's defaults
 * applied. Cross-resource checks are in analyze.h.
 *
 * Other documents are skipped with a warning: security.istio.io kinds
 * (not handled by this loader yet), Istio kinds strait does not use
 * (Sidecar, EnvoyFilter, ...), and anything outside Istio's API groups.
 */

/* Files bigger than this are refused; a configuration is never this big. */
/* Istio's labels for east-west: the network an endpoint (or a Service's
 * endpoints) is on, the registry (cluster) it comes from, and the port of
 * a network's gateway Service (default 15443). */
#define RES_NETWORK_LABEL "topology.istio.io/network"
#define RES_CLUSTER_LABEL "topology.istio.io/cluster"
#define RES_GATEWAY_PORT_LABEL "networking.istio.io/gatewayPort"
#define RES_GATEWAY_PORT_DEFAULT 15443

#define RESOURCE_MAX_FILE_BYTES (64u * 1024 * 1024)
/* Error text kept in errs at most; the count in *nerr stays exact. */
#define RESOURCE_MAX_ERR_BYTES (1024u * 1024)

/*
 * resource_load() reads path: a directory (its *.yaml, *.yml and *.json
 * files in name order, and those of its namespace subdirectories, below)
 * or a single file of any name. Each
 * file may hold several YAML documents, or one JSON object.
 *
 * errs:  if not NULL, receives one line per error,
 *        "file:line:col: Kind ns/name: path: reason".
 * nerr:  if not NULL, receives the number of errors.
 * Returns the set of resources that loaded without error (a resource with
 * an error is left out of it), with every message, errors and warnings,
 * in set->msgs. Returns NULL only when memory runs out. The caller owns
 * the set and frees it with resource_set_free(); all pointers into it
 * stay valid until then. A set with errors must not replace a running one.
 */
struct resource_set *resource_load(const char *path, struct buf *errs,
                                   int *nerr);

/*
 * resource_load_ns() is resource_load() with default_ns (NULL or "":
 * "default") as the namespace of documents without metadata.namespace,
 * as `kubectl apply -n` gives. In a directory, each subdirectory named
 * like a namespace holds that namespace's files (dir/foo/x.yaml defaults
 * to foo, unless it names one); subdirectories are read one level deep.
 * A Kind ns/name defined twice, in any files, is an error at both places
 * (STR0004), and the first definition read is the one kept in the set.
 */
struct resource_set *resource_load_ns(const char *path, const char *default_ns,
                                      struct buf *errs, int *nerr);

/* resource_load_progress() is resource_load_ns() that tells progress
 * (NULL: nobody) after each file it reads; progress is used during the
 * call only. */
struct resource_set *resource_load_progress(const char *path,
                                            const char *default_ns,
                                            const struct res_progress *progress,
                                            struct buf *errs, int *nerr);

/* resource_load_mem() is resource_load() on one file's bytes; name is the
 * file name used in messages. data need not be NUL-terminated. */
struct resource_set *resource_load_mem(const char *data, size_t len,
                                       const char *name, struct buf *errs,
                                       int *nerr);

/*
 * One value of a key-value source (etcd): name is the key, used in
 * messages as a file name is; kind, ns and name the resource the key is
 * for (kind NULL: none is expected). The value must hold exactly that one
 * resource.
 */
struct res_input {
    const char *name;
    const char *data;
    size_t len;
    const char *kind; /* "VirtualService"; "": the key is not of that
                       * shape (an error naming it) */
    const char *ns;
    const char *rname;
};

/*
 * resource_load_inputs() is resource_load_ns() of dir (NULL or "": none)
 * followed by each input, in order. An input's resource replaces one of
 * the same kind, namespace and name from dir (a warning: inputs take
 * precedence over the directory); defined twice within dir or within the
 * inputs it is an error (STR0004) as ever. An input's value without
 * metadata.namespace is in its key's namespace.
 */
struct resource_set *resource_load_inputs(const char *dir,
                                          const char *default_ns,
                                          const struct res_input *in, size_t n,
                                          struct buf *errs, int *nerr);
/* resource_load_inputs_stop() is resource_load_inputs() under a stop
 * flag (set atomically by another thread or a signal handler; it must
 * outlive the set): the LuaPolicy checks that run top-level code end
 * with "process exiting" once it is set. NULL: none. */
struct resource_set *resource_load_inputs_stop(const char *dir,
                                               const char *default_ns,
                                               const struct res_input *in,
                                               size_t n, const int *stop,
                                               struct buf *errs, int *nerr);

/* resource_set_free() frees a set and everything in it; NULL is a no-op. */
void resource_set_free(struct resource_set *set);

/* resource_set_remove() frees the resources i of set with drop[i] set
 * (drop has set->n flags) and keeps the others in their order. */
void resource_set_remove(struct resource_set *set, const unsigned char *drop);

/* resource_find() returns the resource kind ns/name, or NULL. The pointer
 * is owned by the set. */
const struct resource *resource_find(const struct resource_set *set,
                                     enum res_kind kind, const char *ns,
                                     const char *name);

/* Spec accessors: the kind must match (checked with an assert). */
const struct res_gateway *res_gateway(const struct resource *r);
const struct res_virtual_service *res_virtual_service(const struct resource *r);
const struct res_destination_rule *
res_destination_rule(const struct resource *r);
/* res_service_entry() also takes a Kubernetes Service: the registry
 * entry made of it (see res-k8s.h). */
const struct res_service_entry *res_service_entry(const struct resource *r);
/* res_is_service() is true for a registry entry: a ServiceEntry or a
 * Kubernetes Service. */
int res_is_service(const struct resource *r);
const struct res_workload_entry *res_workload_entry(const struct resource *r);
const struct res_authorization_policy *
res_authorization_policy(const struct resource *r);
const struct res_peer_authentication *
res_peer_authentication(const struct resource *r);
const struct res_request_authentication *
res_request_authentication(const struct resource *r);
const struct res_lua_policy *res_lua_policy(const struct resource *r);
const struct res_reference_grant *res_reference_grant(const struct resource *r);
const struct res_gateway_class *res_gateway_class(const struct resource *r);
/* The Gateway API Gateway (RES_K8S_GATEWAY), not Istio's. */
const struct res_k8s_gateway *res_k8s_gateway(const struct resource *r);
const struct res_http_route_gw *res_http_route_gw(const struct resource *r);

/*
 * res_lua_target_granted() says whether a LuaPolicy of namespace from_ns
 * may target the resource kind ("Gateway" or "VirtualService") to_ns/name:
 * always in its own namespace; in another one only when a ReferenceGrant
 * of to_ns has a from {group strait.io, kind LuaPolicy, namespace
 * from_ns} and a to {group networking.istio.io, kind, name (or none)}.
 */
int res_lua_target_granted(const struct resource_set *set, const char *from_ns,
                           const char *kind, const char *to_ns,
                           const char *name);
const struct res_mesh_link *res_mesh_link(const struct resource *r);
/* LINK_TOKEN_PREFIX starts a MeshLink credential: "slk1.SITE.SECRET",
 * SITE the name the remote site gave this one (a DNS-1123 label), SECRET
 * 43 base64url characters (32 random bytes). */
#define LINK_TOKEN_PREFIX "slk1."
/* res_link_token_split() checks a credential's shape: 0 with the site
 * name's span in *site, *nsite and the secret's in *secret, *nsecret, or
 * -1 with a static reason in *why. */
int res_link_token_split(const char *s, size_t n, const char **site,
                         size_t *nsite, const char **secret, size_t *nsecret,
                         const char **why);
/*
 * res_lua_check_files() is `strait check -c`'s look at each LuaPolicy
 * source.file of set, with the bootstrap's lua.path (dirs, in order), as
 * `strait run` will load it: a file in none of the directories, larger
 * than 1 MiB, that does not compile or that defines an unknown hook is
 * an Error in msgs, at the policy's source (file:line:col) or at the
 * Lua file's line.
 */
void res_lua_check_files(const struct resource_set *set, char *const *dirs,
                         size_t ndirs, struct res_msgs *msgs);

/* res_lua_reference() writes one line per LuaPolicy key and per fixed
 * Lua budget, as `strait reference lua` shows them. */
void res_lua_reference(struct buf *b);

/* res_kind_name() returns "Gateway", "VirtualService", ... */
const char *res_kind_name(enum res_kind kind);

/*
 * res_gw_host_admits() tells whether a Gateway server host
 * ("[namespace/]dnsName") lets VirtualServices of namespace vs_ns bind to
 * it, by Istio's Gateway.servers.hosts: no namespace part or "*" admits
 * every namespace, "." the Gateway's own namespace (gw_ns, gw_ns_len
 * bytes: the Gateway's, never the VirtualService's), "~" none, and any
 * other name that one namespace. *host gets the dnsName part, a pointer
 * into server_host.
 */
int res_gw_host_admits(const char *server_host, const char *gw_ns,
                       size_t gw_ns_len, const char *vs_ns, const char **host);

/* res_ref_ns_len() is the length of the namespace of an "ns/name"
 * reference such as a compiled Gateway's name; 0 without a slash. */
size_t res_ref_ns_len(const char *ref);

/* res_visible() is true when r, with exportTo list export_to, is visible
 * from namespace ns, by Istio's rules: no list or "*" everywhere, "." its
 * own namespace, "~" nowhere, otherwise the namespaces listed. */
struct conf_strs;
int res_visible(const struct resource *r, const struct conf_strs *export_to,
                const char *ns);

/* res_spec_json() writes r's spec as a JSON object with every default
 * applied: the resource as strait runs it (/config_dump). */
struct buf;
void res_spec_json(struct buf *b, const struct resource *r);

/* res_spec_identity() writes r's spec as conf_identity() bytes: what
 * res_spec_json() shows, for structural identities. */
struct conf_sink;
void res_spec_identity(const struct resource *r, const struct conf_sink *sink);

/* res_protocol_name() returns "HTTP", "HTTPS", ... */
const char *res_protocol_name(int64_t protocol);

/* res_strmatch_kind() says which alternative of a StringMatch is set. */
enum res_strmatch_kind res_strmatch_kind(const struct res_strmatch *m);

/*
 * res_host_fqdn() writes host as Istio resolves it for a resource in
 * namespace ns: a name without a dot becomes name.ns.svc.<domain>; "*",
 * IP addresses and names with a dot are kept. Returns the length written,
 * or -1 when it does not fit in n bytes.
 */
int res_host_fqdn(const char *host, const char *ns, const char *domain,
                  char *out, size_t n);

/* Host patterns ("*", "*.suffix", exact) are compared with core/host.h:
 * host_covers() and host_intersect(). */

/*
 * res_retry_on_next() reads the next comma-separated entry of a retryOn
 * string: *p walks the string, *tok and *n get the entry without the
 * blanks around it (n may be 0 for an empty entry). Returns 0 at the end
 * of the string, else 1.
 */
int res_retry_on_next(const char **p, const char **tok, size_t *n);

/* res_retry_on_lookup() is the retry condition named by (tok, n), exactly
 * as Envoy spells it ("5xx", "gateway-error", "connect-failure", ...), or
 * -1 for any other text (an HTTP status code is not a name). */
int res_retry_on_lookup(const char *tok, size_t n);

/* res_labels_match() is true when every selector label is in labels. */
int res_labels_match(const struct conf_strmap *selector,
                     const struct conf_strmap *labels);

/*
 * A service known only from WorkloadEntries: those labelled app=NAME in
 * namespace NS stand for NAME.NS.svc.<domain>, as a Kubernetes Service
 * selecting them by their app label would. res_we_backs() is true when
 * resource w is such a WorkloadEntry for host (a full name).
 */
int res_we_backs(const struct resource_set *set, const struct resource *w,
                 const char *host);

/* Port names res_we_service_ports() tells apart; more count as these. */
#define RES_WE_MAX_PORT_NAMES 64

/*
 * res_we_service_ports() gives the ports of such a service: the port
 * names its WorkloadEntries list (a WorkloadEntry's ports map a service
 * port name to the port it listens on). Returns how many distinct names
 * there are (0 when none lists a port), or -1 when no WorkloadEntry
 * stands for host. *only gets the name when there is exactly one (a
 * pointer into set), else NULL; names, if not NULL, gets "[a b]".
 */
int res_we_service_ports(const struct resource_set *set, const char *host,
                         const char **only, struct buf *names);

/*
 * Istio's scoping of a workload policy (AuthorizationPolicy,
 * RequestAuthentication, PeerAuthentication's selector part) to the node:
 * it applies when it lives in the node's namespace or the root namespace
 * and its selector (empty: every workload) matches the node's labels
 * (NULL: none). res_policy_scope() says which, or why not, so `strait
 * check` can name the field; the gateway and the analyzer share it.
 */
enum res_policy_scope {
    RES_SCOPE_APPLIES,
    RES_SCOPE_OTHER_NAMESPACE, /* neither the node's nor the root's */
    RES_SCOPE_SELECTOR,        /* the selector does not match the node */
};
enum res_policy_scope res_policy_scope(const struct resource *r,
                                       const struct conf_strmap *selector,
                                       const char *node_ns,
                                       const struct conf_strmap *labels,
                                       const char *root_ns);

/*
 * res_regex_check() compiles re as the router will (PCRE2, UTF, JIT when
 * available) and refuses what would not run in bounded time or is not
 * Istio's regex dialect (backreferences). Returns 0, or -1 with a reason
 * in why (n bytes).
 */
int res_regex_check(const char *re, char *why, size_t n);

/* Messages, shared with the analyzer. res_msgs_add() copies every string;
 * it never fails (out of memory drops the message). */
void res_msgs_add(struct res_msgs *m, const char *code, enum res_level level,
                  const char *file, int line, int col, const char *resource,
                  const char *path, const char *fmt, ...)
    __attribute__((format(printf, 9, 10)));
void res_msgs_dispose(struct res_msgs *m);

/* res_level_code() is the code of a load message of level: IST0106
 * SchemaValidationError for errors (Istio's schema errors are always
 * errors); strait's own STR0002 for warnings (a setting strait reads but
 * does not fully honour, or one that is risky) and STR0001 for
 * information (a document or rule strait does not use). */
const char *res_level_code(enum res_level level);

/* res_http_match_json() writes a match's conditions (not its name) as
 * JSON; two matches with the same text select the same requests. */
void res_http_match_json(struct buf *b, const struct res_http_match *m);

/* res_l4_match_json() is res_http_match_json() for a tls (tls set) or
 * tcp rule's match. */
void res_l4_match_json(struct buf *b, const struct res_l4_match *m, int tls);

/* res_msg_line() appends "file:line:col: Kind ns/name: path: reason\n". */
void res_msg_line(struct buf *b, const struct res_msg *m);

#endif
