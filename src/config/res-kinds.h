#ifndef STRAIT_CONFIG_RES_KINDS_H
#define STRAIT_CONFIG_RES_KINDS_H

/*
 * Private to src/config/resource.c and res-*.c: what the loader needs from
 * each kind family. A family file holds the kind's key tables (the schema,
 * with Istio's defaults) and a check that runs after decoding, for the
 * rules a table cannot say (required keys, cross-field rules, regexes,
 * host syntax) and to apply the defaults that depend on other fields.
 */
#include <stddef.h>

#include "config/resource-t.h"

struct buf;
struct conf_sink;

/* What a check reports to. */
struct res_check {
    struct res_msgs *msgs;
    const struct resource *r;
    const char *resource; /* "Kind ns/name" */
    int nerr;
    const int *stop; /* resource_set.stop */
};

struct res_kind_ext {
    /* The spec's keys are the document's own top-level keys (a Secret's
     * data, an EndpointSlice's endpoints). */
    int toplevel;
    /* The spec may be left out (a Namespace). */
    int optional_spec;
    /* Frees what check or link added beyond the table; NULL: nothing. */
    void (*dispose)(void *spec);
    /* Writes the spec as JSON instead of the table (a Secret's values
     * are never shown); NULL: conf_to_json(). */
    void (*json)(struct buf *b, const struct resource *r);
    /* Writes the spec's identity bytes instead of conf_identity() (a
     * Secret gives digests of its values, so no snapshot keeps a copy of
     * them); NULL: conf_identity(). */
    void (*identity)(const struct resource *r, const struct conf_sink *sink);
};

struct res_kind_ops {
    const char *kind;
    const struct conf_section *spec;
    size_t spec_size;
    void (*check)(struct res_check *ck, struct resource *r);
};

extern const struct res_kind_ops res_gateway_ops;
extern const struct res_kind_ops res_virtual_service_ops;
extern const struct res_kind_ops res_destination_rule_ops;
extern const struct res_kind_ops res_service_entry_ops;
extern const struct res_kind_ops res_workload_entry_ops;
extern const struct res_kind_ops res_authorization_policy_ops;
extern const struct res_kind_ops res_peer_authentication_ops;
extern const struct res_kind_ops res_request_authentication_ops;
extern const struct res_kind_ops res_k8s_service_ops;
extern const struct res_kind_ops res_k8s_endpoint_slice_ops;
extern const struct res_kind_ops res_k8s_secret_ops;
extern const struct res_kind_ops res_k8s_namespace_ops;
extern const struct res_kind_ops res_lua_policy_ops;
extern const struct res_kind_ops res_mesh_link_ops;
extern const struct res_kind_ops res_k8s_node_ops;
extern const struct res_kind_ops res_reference_grant_ops;
extern const struct res_kind_ops res_k8s_pod_ops;
extern const struct res_kind_ops res_gateway_class_ops;
extern const struct res_kind_ops res_k8s_gateway_ops;
extern const struct res_kind_ops res_http_route_ops;
/* What the Kubernetes kinds need beyond their ops. */
extern const struct res_kind_ext res_k8s_service_ext;
extern const struct res_kind_ext res_k8s_endpoint_slice_ext;
extern const struct res_kind_ext res_k8s_secret_ext;
extern const struct res_kind_ext res_k8s_namespace_ext;
extern const struct res_kind_ext res_k8s_node_ext;
extern const struct res_kind_ext res_k8s_pod_ext;

/* The key table of a WorkloadEntry spec, also the element of a
 * ServiceEntry's endpoints. */
extern const struct conf_section res_workload_entry_section;

/* Schema errors (code IST0106) and warnings at mark, or at the resource
 * when the mark is unset. */
void res_err(struct res_check *ck, const struct conf_mark *mark,
             const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void res_warn(struct res_check *ck, const struct conf_mark *mark,
              const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* res_warn_code() is res_warn() under Istio's code for it (IST0133,
 * SchemaWarning: a warning of Istio's own validation), not STR0002. */
void res_warn_code(struct res_check *ck, const char *code,
                   const struct conf_mark *mark, const char *path,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Shared checks; each reports its own errors. */
void res_check_strmatch(struct res_check *ck, const struct res_strmatch *m,
                        const char *path);
/* flags: RES_HOST_WILDCARD allows "*" and "*.suffix"; RES_HOST_IP allows
 * an IP address. */
#define RES_HOST_WILDCARD 1
#define RES_HOST_IP 2
void res_check_host(struct res_check *ck, const struct conf_mark *mark,
                    const char *path, const char *host, int flags);
void res_check_workload_entry(struct res_check *ck,
                              const struct res_workload_entry *we,
                              const char *path);

/* res_path() formats a field path into out (n bytes). A path cut short
 * still points the reader at the right place, so truncation is fine. */
void res_path(char *out, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* CONF_CUSTOM parser for port protocols (int64_t enum res_protocol). */
int res_parse_protocol(const char *s, size_t n, void *dst, const char **why);
void res_protocol_json(struct buf *b, const void *src);

/* CONF_STR validator: a DNS-1123 label. */
int res_valid_label(const char *s, size_t n, void *dst, const char **why);

#define RES_OFF(type, field) offsetof(type, field)

#endif
