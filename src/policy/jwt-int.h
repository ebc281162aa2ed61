#ifndef STRAIT_POLICY_JWT_INT_H
#define STRAIT_POLICY_JWT_INT_H

/*
 * What src/policy/jwt*.c and the compiler (src/compile/jwt.c) share and
 * nothing else includes: the compiled providers (compile/jwt.c builds
 * them, jwt.c applies them), the keys and the algorithms (jwt-keys.c).
 */
#include <stddef.h>

#include <openssl/base.h>

#include "core/arena.h"
#include "core/slice.h"
#include "policy/jwt.h"

/* Nesting allowed in JWT headers, claims and JWKS documents. */
#define JWT_MAX_DEPTH 32

struct jwt_key {
    char *kid; /* NULL: none */
    char *alg; /* NULL: any of its type */
    int type;  /* EVP_PKEY_RSA or EVP_PKEY_EC */
    EVP_PKEY *pkey;
};

struct jwt_keys {
    struct jwt_key *v;
    size_t n;
    size_t skipped;       /* unusable keys left out */
    const char *skip_why; /* the first one's reason (static) */
};

enum jwt_loc_kind { JWT_LOC_HEADER, JWT_LOC_PARAM, JWT_LOC_COOKIE };

struct jwt_loc {
    enum jwt_loc_kind kind;
    const char *name;   /* headers: lowercase */
    const char *prefix; /* headers: "" for none */
};

struct jwt_claim_header {
    const char *header; /* lowercase */
    const char *claim;
};

struct jwt_provider {
    const char *name; /* "ns/name" */
    const char *issuer;
    const char *const *aud;
    size_t naud;
    struct jwt_keys *keys; /* NULL: none (an http(s) jwksUri) */
    const struct jwt_loc *locs;
    size_t nlocs;
    int forward;
    const char *payload_header; /* NULL: none */
    const struct jwt_claim_header *claim_headers;
    size_t nclaim_headers;
};

struct jwt_authn {
    int refs;
    struct arena mem;
    struct jwt_provider *v;
    size_t n;
};

/* A JWS algorithm strait verifies. */
struct jwt_alg {
    const char *name;
    int type; /* EVP_PKEY_RSA or EVP_PKEY_EC */
    int pss;
    int curve;    /* EC: the curve's NID */
    size_t coord; /* EC: bytes of r and of s */
    const EVP_MD *(*md)(void);
};

/* jwt_alg_find() is the algorithm called name, or NULL. */
const struct jwt_alg *jwt_alg_find(struct slice name);

/* jwt_b64url() decodes base64url into the arena; the output has a NUL
 * after it. {NULL,0} when malformed (a byte outside the alphabet, '='
 * padding, non-zero bits after the last byte) or out of memory. */
struct slice jwt_b64url(struct arena *a, struct slice in);

/* jwt_keys_verify() checks sig over data with the keys Envoy's rule
 * picks for kid and al (see jwt-keys.c): JWT_OK, JWT_BAD_SIGNATURE (keys
 * were tried), JWT_NO_KEY (none fit) or JWT_NO_JWKS (k is NULL). */
enum jwt_status jwt_keys_verify(const struct jwt_keys *k,
                                const struct jwt_alg *al, struct slice kid,
                                struct slice data, struct slice sig);

#endif
