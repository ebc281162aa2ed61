#ifndef STRAIT_POLICY_AUTHZ_H
#define STRAIT_POLICY_AUTHZ_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/geoip.h"
#include "core/slice.h"
#include "policy/authz-t.h"

struct arena;
struct http_fields;
struct jwt_result;

/*
 * Istio's AuthorizationPolicy for this gateway, compiled: the policies
 * that apply to the node with their rules in the form of authz-t.h
 * (compile/authz.c selects and compiles them from the resource model).
 * Once built the set is immutable and read by every worker without locks;
 * reference-counted with atomics.
 *
 * authz_check() decides as Istio does: CUSTOM policies first (strait has
 * no extension provider, so a request one matches is denied), then DENY,
 * then ALLOW (with no ALLOW policy, whatever is not denied passes; with
 * some, only what one of them matches); AUDIT policies only mark.
 */
struct authz;

/* What a decision looks at; slices need not be NUL-terminated. */
struct authz_request {
    struct slice principal; /* peer SPIFFE ID without spiffe://; empty: none */
    const struct sockaddr *peer;   /* source.ip */
    const struct sockaddr *remote; /* remote.ip (X-Forwarded-For); NULL: peer */
    struct slice host;             /* Host / :authority (a port is ignored) */
    struct slice method;
    struct slice path; /* with the query, which is not matched */
    uint32_t port;     /* destination.port */
    struct slice sni;  /* connection.sni */
    const struct http_fields *headers; /* NULL: none (TCP) */
    /* The request's verified JWT (requestPrincipals, request.auth.*);
     * NULL: none, so those fields match no value and every notValue. */
    const struct jwt_result *jwt;
    /* The client's GeoIP result (source.geo.*); NULL: no lookup, so
     * those keys match no value and every notValue. */
    const struct geo_result *geo;
    /* A TCP or TLS connection, not a request: as Istio, rules that need
     * HTTP fields (hosts, methods, paths, request.headers, and the JWT
     * fields requestPrincipals and request.auth.*) never match in
     * ALLOW policies, and those fields are left out of DENY, AUDIT and
     * CUSTOM ones, which so deny more rather than less. */
    int tcp;
};

struct authz_decision {
    int allowed;
    int audit;          /* an AUDIT policy matched */
    const char *policy; /* "ns/name" that denied, or of the ALLOW
                         * policies that all failed: NULL; owned by authz */
};

/* authz_new() returns an empty set with room for n policies and one
 * reference, or NULL when memory is short. The caller fills it with
 * authz_add() before anyone else sees it, then only reads it. */
struct authz *authz_new(size_t n);

/* authz_arena() is where the compiled rules of a's policies must live
 * (they go when a does); owned by a. */
struct arena *authz_arena(struct authz *a);

/* authz_add() appends a policy called name ("ns/name", copied) with its
 * action and rules (nrules of them, in authz_arena(a), kept by pointer).
 * 0, or -1 when memory is short or the n policies of authz_new() are
 * there already. */
int authz_add(struct authz *a, const char *name, enum authz_action action,
              const struct authz_rule *rules, size_t nrules);

struct authz *authz_ref(struct authz *a);
void authz_unref(struct authz *a);

/* authz_check() fills *d for r; a NULL a allows everything. */
void authz_check(const struct authz *a, const struct authz_request *r,
                 struct authz_decision *d);

/* authz_count() is how many policies a holds (0 for NULL). */
size_t authz_count(const struct authz *a);

/* authz_path_match() is Istio's path value match, exported for tests:
 * exact, "prefix*", "*suffix", "*", or a template with {*} (one segment)
 * and {**} (the rest). */
int authz_path_match(const char *pattern, struct slice path);

/* authz_claim_path() reads Istio's claim key "request.auth.claims[a][b]":
 * returns how many names it has (each non-empty, without '[' in it) and,
 * when names is not NULL, where each starts and how long it is (the first
 * 10 only); -1 when key is not of that form. */
int authz_claim_path(const char *key, const char **names, size_t *lens);

#endif
