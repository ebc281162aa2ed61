/*
 * Compiling RequestAuthentications into providers (see compile/jwt.h and
 * policy/jwt.h): which apply
 * to the node, their keys (inline, file://, or the control thread's
 * cache for http(s)), token locations and outputs.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/jwt.h"
#include "config/resource.h"
#include "core/arena.h"
#include "core/ascii.h"
#include "core/err.h"
#include "core/json.h"
#include "policy/jwt-int.h"

/* Istio's scoping: which policies a workload (the node) is under. */
static int applies(const struct resource *r,
                   const struct res_request_authentication *ra,
                   const char *node_ns, const struct conf_strmap *labels,
                   const char *root_ns)
{
    return res_policy_scope(r, &ra->selector.match_labels, node_ns, labels,
                            root_ns) == RES_SCOPE_APPLIES;
}

static char *lower_dup(struct arena *a, const char *s)
{
    char *d = arena_dup(a, s, strlen(s));

    ascii_lower_str(d);
    return d;
}

static int compile_rule(struct arena *a, const char *name,
                        const struct res_jwt_rule *in, struct jwt_provider *pv,
                        jwt_uri_fn uri_fn, void *uri_arg, char **err)
{
    size_t nl = in->from_headers.n + in->from_params.n + in->from_cookies.n;
    struct jwt_loc *locs;
    const char **aud = NULL;
    struct jwt_claim_header *ch = NULL;

    memset(pv, 0, sizeof(*pv));
    pv->name = name;
    pv->issuer = arena_dup(a, in->issuer ? in->issuer : "",
                           in->issuer ? strlen(in->issuer) : 0);
    pv->forward = in->forward_original_token;
    if (in->jwks != NULL ||
        (in->jwks_uri != NULL && strncmp(in->jwks_uri, "file://", 7) == 0)) {
        pv->keys = jwt_jwks_load(in->jwks, in->jwks_uri, err);
        if (pv->keys == NULL)
            return -1; /* `strait check` reports it; a reload keeps the
                        * running snapshot */
    } else if (in->jwks_uri != NULL && uri_fn != NULL) {
        size_t n = 0;
        const char *doc = uri_fn(uri_arg, in->jwks_uri, in->timeout_ms, &n);
        const char *why;
        /* The cache only keeps documents that parse. */
        if (doc != NULL)
            pv->keys = jwt_keys_parse(doc, n, &why);
    }
    if (in->audiences.n > 0 &&
        (aud = arena_alloc(a, in->audiences.n * sizeof(*aud))) == NULL)
        return -1;
    for (size_t i = 0; i < in->audiences.n; i++)
        if ((aud[i] = arena_dup(a, in->audiences.v[i],
                                strlen(in->audiences.v[i]))) == NULL)
            return -1;
    pv->aud = aud;
    pv->naud = in->audiences.n;
    /* Istio's default locations: Authorization: Bearer, ?access_token. */
    locs = arena_alloc(a, (nl ? nl : 2) * sizeof(*locs));
    if (locs == NULL)
        return -1;
    if (nl == 0) {
        locs[0] = (struct jwt_loc){JWT_LOC_HEADER, "authorization", "Bearer "};
        locs[1] = (struct jwt_loc){JWT_LOC_PARAM, "access_token", ""};
        nl = 2;
    } else {
        size_t k = 0;
        for (size_t i = 0; i < in->from_headers.n; i++) {
            const struct res_jwt_header *h =
                (const struct res_jwt_header *)in->from_headers.v + i;
            locs[k].kind = JWT_LOC_HEADER;
            locs[k].name = lower_dup(a, h->name ? h->name : "");
            locs[k].prefix = arena_dup(a, h->prefix ? h->prefix : "",
                                       h->prefix ? strlen(h->prefix) : 0);
            if (locs[k].name == NULL || locs[k].prefix == NULL)
                return -1;
            k++;
        }
        for (size_t i = 0; i < in->from_params.n; i++, k++)
            locs[k] = (struct jwt_loc){JWT_LOC_PARAM,
                                       arena_dup(a, in->from_params.v[i],
                                                 strlen(in->from_params.v[i])),
                                       ""};
        for (size_t i = 0; i < in->from_cookies.n; i++, k++)
            locs[k] = (struct jwt_loc){JWT_LOC_COOKIE,
                                       arena_dup(a, in->from_cookies.v[i],
                                                 strlen(in->from_cookies.v[i])),
                                       ""};
    }
    pv->locs = locs;
    pv->nlocs = nl;
    if (in->output_payload_to_header != NULL &&
        (pv->payload_header = lower_dup(a, in->output_payload_to_header)) ==
            NULL)
        return -1;
    if (in->output_claim_to_headers.n > 0 &&
        (ch = arena_alloc(a, in->output_claim_to_headers.n * sizeof(*ch))) ==
            NULL)
        return -1;
    for (size_t i = 0; i < in->output_claim_to_headers.n; i++) {
        const struct res_jwt_claim_header *c =
            (const struct res_jwt_claim_header *)in->output_claim_to_headers.v +
            i;
        ch[i].header = lower_dup(a, c->header ? c->header : "");
        ch[i].claim = arena_dup(a, c->claim ? c->claim : "",
                                c->claim ? strlen(c->claim) : 0);
        if (ch[i].header == NULL || ch[i].claim == NULL)
            return -1;
    }
    pv->claim_headers = ch;
    pv->nclaim_headers = in->output_claim_to_headers.n;
    return 0;
}

struct jwt_authn *jwt_authn_build(const struct resource_set *set,
                                  const char *node_ns,
                                  const struct conf_strmap *node_labels,
                                  const char *root_ns, char **err)
{
    return jwt_authn_build_with(set, node_ns, node_labels, root_ns, NULL, NULL,
                                err);
}

struct jwt_authn *jwt_authn_build_with(const struct resource_set *set,
                                       const char *node_ns,
                                       const struct conf_strmap *node_labels,
                                       const char *root_ns, jwt_uri_fn uri_fn,
                                       void *uri_arg, char **err)
{
    struct jwt_authn *ja = NULL;
    size_t n = 0;

    *err = NULL;
    for (size_t i = 0; set != NULL && i < set->n; i++)
        if (set->v[i]->kind == RES_REQUEST_AUTHENTICATION &&
            applies(set->v[i], res_request_authentication(set->v[i]), node_ns,
                    node_labels, root_ns))
            n += res_request_authentication(set->v[i])->jwt_rules.n;
    if (n == 0)
        return NULL;
    ja = calloc(1, sizeof(*ja));
    if (ja == NULL)
        goto oom;
    ja->refs = 1;
    arena_init(&ja->mem, 8 * 1024);
    ja->v = arena_alloc(&ja->mem, n * sizeof(*ja->v));
    if (ja->v == NULL)
        goto oom;
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_request_authentication *ra;
        char name[520];
        const char *nm;

        if (r->kind != RES_REQUEST_AUTHENTICATION)
            continue;
        ra = res_request_authentication(r);
        if (!applies(r, ra, node_ns, node_labels, root_ns))
            continue;
        snprintf(name, sizeof(name), "%s/%s", r->meta.ns, r->meta.name);
        nm = arena_dup(&ja->mem, name, strlen(name));
        if (nm == NULL)
            goto oom;
        for (size_t k = 0; k < ra->jwt_rules.n; k++) {
            char *why = NULL;
            if (compile_rule(&ja->mem, nm,
                             (const struct res_jwt_rule *)ra->jwt_rules.v + k,
                             &ja->v[ja->n], uri_fn, uri_arg, &why) < 0) {
                jwt_keys_free(ja->v[ja->n].keys);
                if (why == NULL)
                    goto oom;
                err_set(err, "RequestAuthentication %s: jwtRules[%zu]: %s",
                        name, k, why);
                free(why);
                goto fail;
            }
            ja->n++;
        }
    }
    return ja;
oom:
    err_set(err, "request authentication: out of memory");
fail:
    jwt_authn_unref(ja);
    return NULL;
}
