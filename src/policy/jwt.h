#ifndef STRAIT_POLICY_JWT_H
#define STRAIT_POLICY_JWT_H

#include <stddef.h>
#include <stdint.h>

#include "core/slice.h"

struct arena;
struct http_fields;
struct json;

/*
 * Istio's RequestAuthentication for this gateway, as Envoy's jwt_authn
 * filter applies it. jwt_authn_build() (compile/jwt.h) selects the
 * RequestAuthentications that apply to the node (scoped as AuthorizationPolicy
 * is: root namespace without a selector for the mesh, the node's namespace, or
 * a selector matching node labels) and compiles each jwtRule into a provider:
 * issuer, audiences, keys (the inline jwks, or a jwksUri's document), token
 * locations and what to forward. The result is immutable and read by every
 * worker without locks; reference-counted with atomics.
 *
 * jwt_authn_request() is Istio's rule: a request without a token passes
 * unauthenticated (authorization decides); every token a request carries
 * must verify against a provider of its issuer (several
 * RequestAuthentications may name the same issuer), or it is rejected
 * (the caller answers 401, or 403 for an audience not allowed).
 */
struct jwt_authn;
struct jwt_keys;

/* A verified token, for authorization and header output. Every slice
 * points into the request arena given to jwt_authn_request(). */
struct jwt_result {
    struct slice principal; /* "iss/sub" */
    struct slice issuer;
    struct slice subject;
    struct slice presenter;    /* azp; empty when absent */
    const struct json *aud;    /* the aud claim (string or array), or NULL */
    const struct json *claims; /* the payload object */
};

enum jwt_status {
    JWT_OK = 0,
    JWT_MISSING, /* no token in any location: not an error */
    JWT_BAD_FORMAT,
    JWT_BAD_HEADER,
    JWT_BAD_PAYLOAD,
    JWT_ALG_UNSUPPORTED,
    JWT_UNKNOWN_ISSUER,
    JWT_EXPIRED,
    JWT_NOT_YET_VALID,
    JWT_AUDIENCE,
    JWT_NO_KEY,
    JWT_NO_JWKS, /* the provider has no keys (jwksUri not fetched) */
    JWT_BAD_SIGNATURE,
    JWT_OOM,
};

/* Envoy's wording of a status ("Jwt is expired"), static. */
const char *jwt_status_text(enum jwt_status st);

/* The clock skew exp and nbf allow, as Envoy's default. */
#define JWT_CLOCK_SKEW_S 60

/* The longest token read. The decoded payload becomes a JSON tree in the
 * request arena, a few dozen bytes per value, so this bounds what one
 * request can make a worker allocate; real tokens, even with large group
 * claims, stay well under it. */
#define JWT_MAX_TOKEN 32768

/* The most values a token's header or claims may hold (each is a node of
 * a few dozen bytes in the request arena); a token is parsed once per
 * request whatever the number of providers. */
#define JWT_MAX_NODES 4096

/* The most distinct tokens one request may carry; more is a bad request. */
#define JWT_MAX_TOKENS 8

/* ---- keys --------------------------------------------------------------- */

/* jwt_keys_parse() reads a JWKS document ({"keys": [...]}; a single JWK
 * object is accepted too). RSA keys (n, e; at least 1024 bits) and EC keys
 * on P-256 and P-384 (crv, x, y) are kept; keys of other types (oct, OKP)
 * and keys for encryption only (use: enc) are left out, as Envoy does, and
 * so are keys strait cannot use (malformed, other curves, short RSA keys),
 * which jwt_keys_skipped() counts. Returns the keys (caller frees with
 * jwt_keys_free) or NULL with *why set (static) when the document is not
 * JSON or no usable key remains (*why then names the first unusable key's
 * problem, if any). */
struct jwt_keys *jwt_keys_parse(const char *p, size_t n, const char **why);
void jwt_keys_free(struct jwt_keys *k);
size_t jwt_keys_count(const struct jwt_keys *k);
/* The unusable keys left out, and the first one's reason (static; NULL
 * when none). */
size_t jwt_keys_skipped(const struct jwt_keys *k, const char **why);

/* ---- providers ---------------------------------------------------------- */

struct jwt_authn *jwt_authn_ref(struct jwt_authn *ja);
void jwt_authn_unref(struct jwt_authn *ja);
size_t jwt_authn_count(const struct jwt_authn *ja); /* providers */

/* jwt_authn_one() is a set of one provider (for jwt_authn_verify()): name
 * for messages, the issuer, the one audience a token must name, and keys
 * (taken, also on failure). NULL when memory is short. */
struct jwt_authn *jwt_authn_one(const char *name, const char *issuer,
                                const char *audience, struct jwt_keys *keys);

/* jwt_jwks_load() returns the keys of a jwksUri (file:// only) or an
 * inline jwks, for `strait check` and the compiler: NULL with *err
 * (allocated) naming the problem. */
struct jwt_keys *jwt_jwks_load(const char *jwks, const char *uri, char **err);

/*
 * jwt_authn_request() applies the providers to a request, as Envoy's
 * jwt_authn does with Istio's configuration. It collects every token in
 * every provider's locations (fromHeaders with their prefix, fromParams
 * in the query of *path, fromCookies; by default "Authorization: Bearer"
 * and the access_token parameter), each distinct token once, and
 * verifies each at time now (seconds) with the providers of its issuer
 * that look where it was found (one of them accepting it is enough).
 * Every token must verify: one that does not, or whose issuer no
 * provider there knows, fails the request. First, whatever the outcome,
 * the outputPayloadToHeader and outputClaimToHeaders headers of every
 * provider are removed from fields (the client never sets them). On
 * success *res is the first token's, each token's provider writes its
 * output headers, and the tokens of providers without
 * forwardOriginalToken leave the request: the header is removed, the
 * parameter is cut out of *path (rewritten in a). Returns JWT_OK,
 * JWT_MISSING (no token: the request goes on unauthenticated) or the
 * failure. *provider is set to the "ns/name" of the deciding
 * RequestAuthentication (owned by ja) when a token was found.
 */
enum jwt_status jwt_authn_request(const struct jwt_authn *ja,
                                  struct http_fields *fields,
                                  struct slice *path, struct arena *a,
                                  int64_t now, struct jwt_result *res,
                                  const char **provider);

/*
 * jwt_authn_verify() verifies one compact token (no location rules) with
 * the providers of its issuer (one accepting it is enough); what
 * jwt_authn_request() does with each token it finds, exported for tests
 * and fuzzing. The result's slices live in a.
 */
enum jwt_status jwt_authn_verify(const struct jwt_authn *ja, struct slice token,
                                 struct arena *a, int64_t now,
                                 struct jwt_result *res);

/* jwt_parse_url() splits an http(s) jwksUri: tls, allocated host
 * (brackets of an IPv6 literal removed), port, and the path with its
 * query (allocated; "/" when empty). No credentials, no bytes that would
 * break a request line. 0, or -1 with a static reason. */
int jwt_parse_url(const char *url, int *tls, char **host, int *port,
                  char **path, const char **why);

/* jwt_claim() follows a claim path (names, each one level deeper into
 * nested objects) from the claims object; NULL when absent. */
const struct json *jwt_claim(const struct jwt_result *res,
                             const struct slice *path, size_t depth);

#endif
