#ifndef STRAIT_POLICY_AUTHZ_T_H
#define STRAIT_POLICY_AUTHZ_T_H

/*
 * The compiled form of AuthorizationPolicy rules, as authz_check() reads
 * them. The compile layer (compile/authz.c) builds these from the resource
 * model into the arena of a struct authz (authz_new(), authz_arena(),
 * authz_add()); nothing here names a configuration type, so the run-time
 * evaluator never sees one. Every string and array lives in that arena.
 */

#include <stddef.h>
#include <stdint.h>

#include "core/slice.h"

/* Istio's actions, in the order of its enum. */
enum authz_action {
    AUTHZ_ALLOW,
    AUTHZ_DENY,
    AUTHZ_AUDIT,
    AUTHZ_CUSTOM,
};

/* A string value: "*" (any non-empty), "prefix*", "*suffix", exact, or a
 * path template with {*} and {**} (paths only). */
enum authz_mkind {
    AUTHZ_M_EXACT,
    AUTHZ_M_PREFIX,
    AUTHZ_M_SUFFIX,
    AUTHZ_M_ANY,
    AUTHZ_M_TEMPLATE,
};

struct authz_matcher {
    enum authz_mkind kind;
    const char *s; /* NUL-terminated; the pattern without its '*' */
    size_t n;
};

struct authz_mset {
    const struct authz_matcher *v;
    size_t n;
};

/* An IP block: family (AF_INET, AF_INET6), address bytes, prefix bits. */
struct authz_cidr {
    int family;
    uint8_t addr[16];
    int bits;
};

struct authz_cidrs {
    const struct authz_cidr *v;
    size_t n;
};

struct authz_ports {
    const uint32_t *v;
    size_t n;
};

/* A rule's from.source; an empty set does not constrain. */
struct authz_src {
    struct authz_mset principals, not_principals, namespaces, not_namespaces;
    struct authz_mset req_principals, not_req_principals; /* JWT "iss/sub" */
    struct authz_cidrs ip, not_ip, remote, not_remote;
};

/* A rule's to.operation. */
struct authz_op {
    struct authz_mset hosts, not_hosts, methods, not_methods, paths, not_paths;
    struct authz_ports ports, not_ports;
};

/* The attribute a condition (when.key) reads. */
enum authz_key {
    AUTHZ_K_HEADER,
    AUTHZ_K_SOURCE_IP,
    AUTHZ_K_REMOTE_IP,
    AUTHZ_K_SOURCE_NS,
    AUTHZ_K_SOURCE_PRINCIPAL,
    AUTHZ_K_DEST_PORT,
    AUTHZ_K_SNI,
    AUTHZ_K_AUTH_PRINCIPAL, /* request.auth.principal: "iss/sub" */
    AUTHZ_K_AUTH_AUDIENCES, /* request.auth.audiences: aud */
    AUTHZ_K_AUTH_PRESENTER, /* request.auth.presenter: azp */
    AUTHZ_K_AUTH_CLAIM,     /* request.auth.claims[a][b]... */
    AUTHZ_K_GEO,            /* strait's source.geo.<field> (geo_field) */
    AUTHZ_K_NEVER,          /* what strait cannot evaluate */
};

/* Claim paths are at most this deep (Istio has no limit; ten levels of
 * nested claims is more than tokens carry). */
#define AUTHZ_CLAIM_DEPTH 10

struct authz_cond {
    enum authz_key key;
    char header[128];                      /* AUTHZ_K_HEADER, lowercase */
    struct slice claim[AUTHZ_CLAIM_DEPTH]; /* AUTHZ_K_AUTH_CLAIM */
    size_t nclaim;
    int geo_field;                        /* AUTHZ_K_GEO: enum geoip_field */
    struct authz_mset values, not_values; /* string keys */
    struct authz_cidrs ips, not_ips;      /* the .ip keys */
    struct authz_ports ports, not_ports;  /* destination.port */
};

/* A rule matches when one from (if any), one to (if any) and every when
 * match. */
struct authz_rule {
    const struct authz_src *from;
    size_t nfrom;
    const struct authz_op *to;
    size_t nto;
    const struct authz_cond *when;
    size_t nwhen;
};

#endif
