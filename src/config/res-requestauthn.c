/*
 * security.istio.io RequestAuthentication: the jwtRules a gateway checks
 * tokens with (src/policy/jwt.c applies them). The checks are Istio's
 * (issuer required, jwks and jwksUri exclusive, header names that are
 * headers) plus one strait makes: an inline jwks, or a file:// jwksUri,
 * must hold at least one key strait can verify with, so a bad key set is
 * caught by `strait check` and never replaces a running configuration.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "config/res-kinds.h"
#include "config/resource.h"
#include "policy/jwt.h"

#define JR(f) RES_OFF(struct res_jwt_rule, f)

static const struct conf_key header_keys[] = {
    {.name = "name",
     .type = CONF_STR,
     .off = RES_OFF(struct res_jwt_header, name),
     .help = "the header that carries the token (required)"},
    {.name = "prefix",
     .type = CONF_STR,
     .off = RES_OFF(struct res_jwt_header, prefix),
     .help = "what precedes the token in the value, e.g. \"Bearer \""},
    {.name = NULL},
};
static const struct conf_section header_section = {
    header_keys, sizeof(struct res_jwt_header),
    RES_OFF(struct res_jwt_header, mark)};

static const struct conf_key claim_header_keys[] = {
    {.name = "header",
     .type = CONF_STR,
     .off = RES_OFF(struct res_jwt_claim_header, header),
     .help = "the request header to write (required)"},
    {.name = "claim",
     .type = CONF_STR,
     .off = RES_OFF(struct res_jwt_claim_header, claim),
     .help = "the claim copied into it: string, number or boolean; a.b "
             "for a nested claim (required)"},
    {.name = NULL},
};
static const struct conf_section claim_header_section = {
    claim_header_keys, sizeof(struct res_jwt_claim_header),
    RES_OFF(struct res_jwt_claim_header, mark)};

static const struct conf_key rule_keys[] = {
    {.name = "issuer",
     .type = CONF_STR,
     .off = JR(issuer),
     .help = "the iss a token must carry (required)"},
    {.name = "audiences",
     .type = CONF_STR_LIST,
     .off = JR(audiences),
     .max = 1000,
     .help = "allowed aud values; none: aud is not checked"},
    {.name = "jwksUri",
     .type = CONF_STR,
     .off = JR(jwks_uri),
     .help = "where the JWKS is: file:// is read at each load; http(s) is "
             "fetched by the control thread and refreshed"},
    {.name = "jwks",
     .type = CONF_STR,
     .off = JR(jwks),
     .help = "the JWKS document inline"},
    {.name = "fromHeaders",
     .type = CONF_LIST,
     .off = JR(from_headers),
     .max = 100,
     .help = "headers that carry the token",
     .sub = &header_section},
    {.name = "fromParams",
     .type = CONF_STR_LIST,
     .off = JR(from_params),
     .max = 100,
     .help = "query parameters that carry the token"},
    {.name = "fromCookies",
     .type = CONF_STR_LIST,
     .off = JR(from_cookies),
     .max = 100,
     .help = "cookies that carry the token"},
    {.name = "forwardOriginalToken",
     .type = CONF_BOOL,
     .off = JR(forward_original_token),
     .def = "false",
     .help = "keep the token header on the request sent upstream"},
    {.name = "outputPayloadToHeader",
     .type = CONF_STR,
     .off = JR(output_payload_to_header),
     .help = "header that gets the verified payload (base64url)"},
    {.name = "outputClaimToHeaders",
     .type = CONF_LIST,
     .off = JR(output_claim_to_headers),
     .max = 100,
     .help = "claims copied to request headers",
     .sub = &claim_header_section},
    {.name = "timeout",
     .type = CONF_DURATION,
     .off = JR(timeout_ms),
     .min = 0,
     .max = 3600 * 1000,
     .help = "how long one jwksUri fetch may take (default 5s)"},
    {.name = NULL},
};
#undef JR
static const struct conf_section rule_section = {
    rule_keys, sizeof(struct res_jwt_rule), RES_OFF(struct res_jwt_rule, mark)};

#define RA(f) RES_OFF(struct res_request_authentication, f)
static const struct conf_key selector_keys[] = {
    {.name = "matchLabels",
     .type = CONF_STR_MAP,
     .off = RA(selector.match_labels) - RA(selector),
     .help = "labels of the workloads (here: node.labels)"},
    {.name = NULL},
};
static const struct conf_section selector_section = {selector_keys, 0, 0};

static const struct conf_key ra_keys[] = {
    {.name = "selector",
     .type = CONF_SECTION,
     .off = RA(selector),
     .help = "the workloads it applies to; none: the namespace's (the root "
             "namespace's: the mesh's)",
     .sub = &selector_section},
    {.name = "targetRef",
     .type = CONF_IGNORE,
     .off = RA(target_ref),
     .help = "Kubernetes Gateway API targets: not used by strait"},
    {.name = "targetRefs",
     .type = CONF_IGNORE,
     .off = RA(target_refs),
     .help = "Kubernetes Gateway API targets: not used by strait"},
    {.name = "jwtRules",
     .type = CONF_LIST,
     .off = RA(jwt_rules),
     .max = 100,
     .help = "token issuers and how to verify their tokens",
     .sub = &rule_section},
    {.name = NULL},
};
#undef RA
static const struct conf_section ra_section = {ra_keys, 0, SIZE_MAX};

/* A header name: an RFC 9110 token. */
static int token_ok(const char *s)
{
    if (s == NULL || *s == '\0')
        return 0;
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || strchr("!#$%&'*+-.^_`|~", *s)))
            return 0;
    return 1;
}

static void rule_check(struct res_check *ck, const struct res_jwt_rule *jr,
                       size_t i, const char **issuers)
{
    char p[160];

    res_path(p, sizeof(p), "spec.jwtRules[%zu]", i);
    if (jr->issuer == NULL || jr->issuer[0] == '\0') {
        res_err(ck, &jr->mark, p, "issuer is required");
    } else {
        for (size_t k = 0; k < i; k++)
            if (issuers[k] != NULL && strcmp(issuers[k], jr->issuer) == 0)
                res_err(ck, &jr->mark, p,
                        "issuer '%s' is already in jwtRules[%zu]", jr->issuer,
                        k);
        issuers[i] = jr->issuer;
    }
    if (jr->jwks != NULL && jr->jwks_uri != NULL)
        res_err(ck, &jr->mark, p, "jwks and jwksUri are exclusive");
    if (jr->jwks == NULL && jr->jwks_uri == NULL)
        res_err(ck, &jr->mark, p,
                "jwks or jwksUri is required (strait does not discover "
                "keys through OpenID Connect)");
    if (jr->jwks_uri != NULL && strncmp(jr->jwks_uri, "file://", 7) != 0) {
        if (strncmp(jr->jwks_uri, "https://", 8) != 0 &&
            strncmp(jr->jwks_uri, "http://", 7) != 0)
            res_err(ck, &jr->mark, p,
                    "jwksUri '%s': not an http, https or file URI",
                    jr->jwks_uri);
        else {
            const char *why;
            char *host = NULL, *path = NULL;
            int tls, port;
            if (jwt_parse_url(jr->jwks_uri, &tls, &host, &port, &path, &why) <
                0)
                res_err(ck, &jr->mark, p, "jwksUri '%s': %s", jr->jwks_uri,
                        why);
            else if (!tls)
                res_warn(ck, &jr->mark, p,
                         "jwksUri '%s' is plain http: anyone on the path "
                         "can substitute the keys; use https",
                         jr->jwks_uri);
            free(host);
            free(path);
        }
    } else if (jr->jwks != NULL || jr->jwks_uri != NULL) {
        char *err = NULL;
        struct jwt_keys *k = jwt_jwks_load(jr->jwks, jr->jwks_uri, &err);
        if (k == NULL)
            res_err(ck, &jr->mark, p, "%s", err ? err : "out of memory");
        jwt_keys_free(k);
        free(err);
    }
    for (size_t k = 0; k < jr->from_headers.n; k++) {
        const struct res_jwt_header *h =
            (const struct res_jwt_header *)jr->from_headers.v + k;
        char q[200];
        res_path(q, sizeof(q), "%s.fromHeaders[%zu]", p, k);
        if (!token_ok(h->name))
            res_err(ck, &h->mark, q, "name must be a header name");
    }
    for (size_t k = 0; k < jr->from_params.n; k++)
        if (jr->from_params.v[k][0] == '\0')
            res_err(ck, &jr->mark, p, "fromParams[%zu] is empty", k);
    for (size_t k = 0; k < jr->from_cookies.n; k++)
        if (jr->from_cookies.v[k][0] == '\0')
            res_err(ck, &jr->mark, p, "fromCookies[%zu] is empty", k);
    if (jr->output_payload_to_header != NULL &&
        !token_ok(jr->output_payload_to_header))
        res_err(ck, &jr->mark, p,
                "outputPayloadToHeader must be a header name");
    for (size_t k = 0; k < jr->output_claim_to_headers.n; k++) {
        const struct res_jwt_claim_header *c =
            (const struct res_jwt_claim_header *)jr->output_claim_to_headers.v +
            k;
        char q[200];
        res_path(q, sizeof(q), "%s.outputClaimToHeaders[%zu]", p, k);
        if (!token_ok(c->header))
            res_err(ck, &c->mark, q, "header must be a header name");
        if (c->claim == NULL || c->claim[0] == '\0')
            res_err(ck, &c->mark, q, "claim is required");
    }
}

static void ra_check(struct res_check *ck, struct resource *r)
{
    const struct res_request_authentication *ra = r->spec;
    const char **issuers;

    if (ra->target_ref.line > 0 || ra->target_refs.line > 0)
        res_warn(ck,
                 ra->target_ref.line > 0 ? &ra->target_ref : &ra->target_refs,
                 "spec.targetRef",
                 "targetRef is for Kubernetes Gateway API resources and is "
                 "ignored: the policy applies by its selector");
    issuers = calloc(ra->jwt_rules.n + 1, sizeof(*issuers));
    if (issuers == NULL) {
        res_err(ck, NULL, "spec.jwtRules", "out of memory");
        return;
    }
    for (size_t i = 0; i < ra->jwt_rules.n; i++)
        rule_check(ck, (const struct res_jwt_rule *)ra->jwt_rules.v + i, i,
                   issuers);
    free(issuers);
}

const struct res_kind_ops res_request_authentication_ops = {
    "RequestAuthentication", &ra_section,
    sizeof(struct res_request_authentication), ra_check};
