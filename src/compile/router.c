/*
 * The VirtualService router, compiling side: one http rule at a time, its
 * match blocks into sorted condition arrays and its action (destinations,
 * redirect, direct response, rewrite, headers, retries, faults, mirror,
 * CORS) into a struct route_action, all in the router's arena.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/resource.h"
#include "core/err.h"
#include "compile/router-int.h"

#define HOST_MAX 512

/* build_err() reports a problem in the VirtualService being compiled,
 * at mark when it was written down. */

/* Field paths for messages are cut at the buffer's size; a cut path still
 * points at the right place. */
static void path_fmt(char *out, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void path_fmt(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(out, n, fmt, ap);
    va_end(ap);
}

static void build_err(struct rt_build *b, const struct conf_mark *mark,
                      const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void build_err(struct rt_build *b, const struct conf_mark *mark,
                      const char *path, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    int line = b->res->line, col = b->res->col;

    if (mark != NULL && mark->line > 0) {
        line = mark->line;
        col = mark->col;
    }
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    err_set(b->err, "%s:%d:%d: VirtualService %s: %s: %s", b->res->file, line,
            col, b->vs_id, path, text);
}

/* ---- regular expressions ------------------------------------------------ */

/*
 * rt_regex() compiles re once for the router's life, with JIT when the
 * platform has it. full anchors it at both ends (StringMatch regex must
 * match the whole value, as RE2's FullMatch in Envoy). Invalid UTF-8 in a
 * subject is matched, not refused.
 */
static const struct route_regex *rt_regex(struct rt_build *b, const char *re,
                                          int full,
                                          const struct conf_mark *mark,
                                          const char *path)
{
    struct router *r = b->r;
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    struct route_regex *rx;
    char why[300];
    int errcode = 0;
    PCRE2_SIZE off = 0;

    /* The loader has checked it already; this refuses the same things if
     * the router is ever fed a set that skipped the checks. */
    if (res_regex_check(re, why, sizeof(why)) < 0) {
        build_err(b, mark, path, "regex '%s': %s", re, why);
        return NULL;
    }
    if (full)
        opts |= PCRE2_ANCHORED | PCRE2_ENDANCHORED;
    if (r->nregexes == r->regex_cap) {
        size_t cap = r->regex_cap ? r->regex_cap * 2 : 16;
        struct route_regex **v = realloc(r->regexes, cap * sizeof(*v));
        if (v == NULL) {
            err_set(b->err, "router: out of memory");
            return NULL;
        }
        r->regexes = v;
        r->regex_cap = cap;
    }
    rx = rt_alloc(b, sizeof(*rx));
    if (rx == NULL)
        return NULL;
    rx->code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, opts,
                             &errcode, &off, NULL);
    if (rx->code == NULL) {
        PCRE2_UCHAR msg[256];
        if (pcre2_get_error_message(errcode, msg, sizeof(msg)) < 0)
            snprintf((char *)msg, sizeof(msg), "error %d", errcode);
        build_err(b, mark, path, "regex '%s': %s at offset %zu", re,
                  (const char *)msg, (size_t)off);
        return NULL;
    }
    rx->mctx = r->mctx;
    /* Without JIT the interpreter runs, under the same limits. */
    (void)pcre2_jit_compile(rx->code, PCRE2_JIT_COMPLETE);
    (void)pcre2_pattern_info(rx->code, PCRE2_INFO_CAPTURECOUNT, &rx->ngroups);
    r->regexes[r->nregexes++] = rx;
    return rx;
}

/* ---- conditions ------------------------------------------------------- */

/* compile_strmatch() compiles a StringMatch; an empty one (or present:
 * true) becomes ROUTE_MATCH_PRESENT. */
static int compile_strmatch(struct rt_build *b, const struct res_strmatch *sm,
                            int nocase, const char *path,
                            struct route_strmatch *out)
{
    memset(out, 0, sizeof(*out));
    switch (res_strmatch_kind(sm)) {
    case RES_MATCH_EXACT:
        out->kind = ROUTE_MATCH_EXACT;
        out->nocase = nocase;
        return rt_str(b, sm->exact, 0, &out->text);
    case RES_MATCH_PREFIX:
        out->kind = ROUTE_MATCH_PREFIX;
        out->nocase = nocase;
        return rt_str(b, sm->prefix, 0, &out->text);
    case RES_MATCH_REGEX:
        out->kind = ROUTE_MATCH_REGEX;
        if (rt_str(b, sm->regex, 0, &out->text) < 0)
            return -1;
        out->re = rt_regex(b, sm->regex, 1, &sm->mark, path);
        return out->re == NULL ? -1 : 0;
    case RES_MATCH_PRESENT:
    case RES_MATCH_NONE:
        out->kind = ROUTE_MATCH_PRESENT;
        return 0;
    }
    return -1;
}

static int cond_cost(const struct rt_cond *c)
{
    if (c->m.kind == ROUTE_MATCH_REGEX)
        return 10 + (int)c->what;
    return (int)c->what;
}

static int cond_cmp(const void *a, const void *b)
{
    const struct rt_cond *x = a, *y = b;

    return x->cost - y->cost;
}

/* A match block's conditions, before they are counted. */
struct condvec {
    struct rt_cond *v;
    size_t n;
    size_t cap;
};

static struct rt_cond *condvec_push(struct condvec *cv)
{
    if (cv->n == cv->cap) {
        size_t cap = cv->cap ? cv->cap * 2 : 8;
        struct rt_cond *v = realloc(cv->v, cap * sizeof(*v));
        if (v == NULL)
            return NULL;
        cv->v = v;
        cv->cap = cap;
    }
    memset(&cv->v[cv->n], 0, sizeof(cv->v[0]));
    return &cv->v[cv->n++];
}

static int add_strmatch_cond(struct rt_build *b, struct condvec *cv,
                             enum rt_what what, const char *name,
                             const struct res_strmatch *sm, int nocase,
                             int negate, const char *path)
{
    struct rt_cond *c = condvec_push(cv);

    if (c == NULL) {
        err_set(b->err, "router: out of memory");
        return -1;
    }
    c->what = what;
    c->negate = negate;
    if (name != NULL && rt_str(b, name, what == RT_HEADER, &c->name) < 0)
        return -1;
    return compile_strmatch(b, sm, nocase, path, &c->m);
}

static int add_map_conds(struct rt_build *b, struct condvec *cv,
                         enum rt_what what, const struct conf_map *m,
                         int negate, const char *path)
{
    char p[300];

    for (size_t i = 0; i < m->n; i++) {
        const struct res_strmatch *sm = (const struct res_strmatch *)m->v + i;
        path_fmt(p, sizeof(p), "%s.%s", path, m->keys[i]);
        if (add_strmatch_cond(b, cv, what, m->keys[i], sm, 0, negate, p) < 0)
            return -1;
    }
    return 0;
}

static int bound_through(const struct rt_build *b, const char *ref)
{
    for (size_t i = 0; i < b->ngws; i++)
        if (rt_gateway_ref_eq(ref, b->res->meta.ns, b->gws[i]))
            return 1;
    return 0;
}

/* block_applies() is false for a block Istio leaves out of this gateway's
 * routes: one naming other gateways, or a source the node is not. */
static int block_applies(const struct rt_build *b,
                         const struct res_http_match *m)
{
    if (m->gateways.n > 0) {
        size_t i;
        for (i = 0; i < m->gateways.n; i++)
            if (bound_through(b, m->gateways.v[i]))
                break;
        if (i == m->gateways.n)
            return 0;
    }
    if (m->source_labels.n > 0 &&
        (b->p->node_labels == NULL ||
         !res_labels_match(&m->source_labels, b->p->node_labels)))
        return 0;
    if (m->source_namespace != NULL &&
        (b->p->node_ns == NULL || strcmp(m->source_namespace, b->p->node_ns)))
        return 0;
    return 1;
}

static int compile_block(struct rt_build *b, const struct res_http_match *m,
                         int index, const char *path, struct rt_block *out)
{
    struct condvec cv = {0};
    struct rt_cond *c;
    char p[300];
    int rc = -1;

    out->index = index;
    out->uri_kind = -1;
    if (m->port > 0) {
        c = condvec_push(&cv);
        if (c == NULL)
            goto fail;
        c->what = RT_PORT;
        c->port = (uint32_t)m->port;
    }
#define SM_COND(field, what, nocase)                                           \
    if (res_strmatch_kind(&m->field) != RES_MATCH_NONE) {                      \
        path_fmt(p, sizeof(p), "%s.%s", path, #field);                         \
        if (add_strmatch_cond(b, &cv, what, NULL, &m->field, nocase, 0, p) <   \
            0)                                                                 \
            goto fail;                                                         \
    }
    SM_COND(uri, RT_URI, m->ignore_uri_case)
    SM_COND(scheme, RT_SCHEME, 0)
    SM_COND(method, RT_METHOD, 0)
    SM_COND(authority, RT_AUTHORITY, 0)
#undef SM_COND
    path_fmt(p, sizeof(p), "%s.headers", path);
    if (add_map_conds(b, &cv, RT_HEADER, &m->headers, 0, p) < 0)
        goto fail;
    path_fmt(p, sizeof(p), "%s.withoutHeaders", path);
    if (add_map_conds(b, &cv, RT_HEADER, &m->without_headers, 1, p) < 0)
        goto fail;
    path_fmt(p, sizeof(p), "%s.queryParams", path);
    if (add_map_conds(b, &cv, RT_QUERY, &m->query_params, 0, p) < 0)
        goto fail;
    for (size_t i = 0; i < cv.n; i++) {
        cv.v[i].cost = cond_cost(&cv.v[i]);
        if (cv.v[i].what == RT_URI) {
            out->uri_kind = (int)cv.v[i].m.kind;
            out->uri_prefix_len = cv.v[i].m.text.n;
        }
    }
    /* The sort is by cost only; ties keep no particular order, which is
     * fine since every condition must hold. */
    qsort(cv.v, cv.n, sizeof(*cv.v), cond_cmp);
    if (cv.n > 0) {
        struct rt_cond *v = rt_alloc(b, cv.n * sizeof(*v));
        if (v == NULL)
            goto fail;
        memcpy(v, cv.v, cv.n * sizeof(*v));
        out->conds = v;
        out->nconds = cv.n;
    }
    rc = 0;
fail:
    if (rc < 0)
        err_set(b->err, "router: out of memory");
    free(cv.v);
    return rc;
}

/* ---- actions ------------------------------------------------------------ */

static int compile_header_list(struct rt_build *b,
                               const struct res_header_ops *ops,
                               struct route_header_list *out)
{
    struct route_header *set = NULL, *add = NULL;
    struct slice *rm = NULL;

    if (ops->set.n > 0 &&
        (set = rt_alloc(b, ops->set.n * sizeof(*set))) == NULL)
        return -1;
    if (ops->add.n > 0 &&
        (add = rt_alloc(b, ops->add.n * sizeof(*add))) == NULL)
        return -1;
    if (ops->remove.n > 0 &&
        (rm = rt_alloc(b, ops->remove.n * sizeof(*rm))) == NULL)
        return -1;
    for (size_t i = 0; i < ops->set.n; i++)
        if (rt_str(b, ops->set.v[i].key, 1, &set[i].name) < 0 ||
            rt_str(b, ops->set.v[i].val, 0, &set[i].value) < 0)
            return -1;
    for (size_t i = 0; i < ops->add.n; i++)
        if (rt_str(b, ops->add.v[i].key, 1, &add[i].name) < 0 ||
            rt_str(b, ops->add.v[i].val, 0, &add[i].value) < 0)
            return -1;
    for (size_t i = 0; i < ops->remove.n; i++)
        if (rt_str(b, ops->remove.v[i], 1, &rm[i]) < 0)
            return -1;
    out->set = set;
    out->nset = ops->set.n;
    out->add = add;
    out->nadd = ops->add.n;
    out->remove = rm;
    out->nremove = ops->remove.n;
    return 0;
}

static int compile_headers(struct rt_build *b, const struct res_headers *h,
                           struct route_header_ops *out)
{
    if (compile_header_list(b, &h->request, &out->request) < 0)
        return -1;
    return compile_header_list(b, &h->response, &out->response);
}

static int dest_cluster(struct rt_build *b, const struct res_destination *d,
                        const char **host_out, const char **subset_out,
                        uint32_t *port_out, int *cluster_out)
{
    char fqdn[HOST_MAX];
    uint32_t port = d->port.number > 0 ? (uint32_t)d->port.number : 0;

    if (d->host == NULL ||
        res_host_fqdn(d->host, b->res->meta.ns, b->p->set->domain, fqdn,
                      sizeof(fqdn)) < 0) {
        err_set(b->err,
                "%s:%d:%d: VirtualService %s: destination host '%s' "
                "is too long",
                b->res->file, d->mark.line, d->mark.col, b->vs_id,
                d->host ? d->host : "");
        return -1;
    }
    *host_out = rt_cstr(b, fqdn);
    *subset_out = d->subset != NULL ? rt_cstr(b, d->subset) : NULL;
    if (*host_out == NULL || (d->subset != NULL && *subset_out == NULL))
        return -1;
    *port_out = port;
    *cluster_out = b->p->cluster_id != NULL
                       ? b->p->cluster_id(b->p->ctx, fqdn, d->subset, port)
                       : -1;
    if (*cluster_out < 0)
        *cluster_out = -1;
    return 0;
}

static uint32_t percent_ppm(double v)
{
    if (v <= 0)
        return 0;
    if (v >= 100)
        return ROUTE_PPM;
    return (uint32_t)(v * 10000.0 + 0.5);
}

/* A retryOn name's condition (config/, enum res_retry_on) is the bit of
 * the same index in route_retry.on. */
#define SAME_BIT(name)                                                         \
    _Static_assert(ROUTE_RETRY_##name == 1u << RES_RETRY_##name,               \
                   "ROUTE_RETRY_" #name " is not 1u << RES_RETRY_" #name)
SAME_BIT(5XX);
SAME_BIT(GATEWAY_ERROR);
SAME_BIT(RESET);
SAME_BIT(RESET_BEFORE_REQUEST);
SAME_BIT(CONNECT_FAILURE);
SAME_BIT(ENVOY_RATELIMITED);
SAME_BIT(RETRIABLE_4XX);
SAME_BIT(REFUSED_STREAM);
SAME_BIT(RETRIABLE_STATUS_CODES);
SAME_BIT(RETRIABLE_HEADERS);
SAME_BIT(HTTP3_POST_CONNECT_FAILURE);
SAME_BIT(CANCELLED);
SAME_BIT(DEADLINE_EXCEEDED);
SAME_BIT(INTERNAL);
SAME_BIT(RESOURCE_EXHAUSTED);
SAME_BIT(UNAVAILABLE);
#undef SAME_BIT

/* compile_retry() turns Istio's retries into Envoy's policy: retryOn names
 * become bits, status codes become retriable-status-codes; with none given
 * Istio retries 503. */
static void compile_retry(const struct res_retries *rt, struct route_retry *out)
{
    const char *p = rt->retry_on != NULL ? rt->retry_on : "";
    const char *tok;
    size_t tn;

    out->attempts = rt->attempts > 0 ? (uint32_t)rt->attempts : 0;
    out->per_try_timeout_ms = (uint64_t)rt->per_try_timeout_ms;
    while (res_retry_on_next(&p, &tok, &tn)) {
        int c = res_retry_on_lookup(tok, tn);

        if (c >= 0)
            out->on |= 1u << c;
        if (tn == 3 && tok[0] >= '1' && tok[0] <= '5' && tok[1] >= '0' &&
            tok[1] <= '9' && tok[2] >= '0' && tok[2] <= '9' &&
            out->nstatuses < ROUTE_MAX_RETRY_STATUSES) {
            out->statuses[out->nstatuses++] =
                (uint16_t)((tok[0] - '0') * 100 + (tok[1] - '0') * 10 +
                           (tok[2] - '0'));
            out->on |= ROUTE_RETRY_RETRIABLE_STATUS_CODES;
        }
    }
    if ((out->on & ROUTE_RETRY_RETRIABLE_STATUS_CODES) && out->nstatuses == 0)
        out->statuses[out->nstatuses++] = 503;
}

/* Istio's fault percentages: percentage when given, else the deprecated
 * integer percent (delay only); without either no request is affected,
 * as Envoy reads an unset FractionalPercent. */
static void compile_fault(const struct res_fault *f, struct route_fault *out)
{
    if (f->delay.mark.line > 0 && f->delay.fixed_delay_ms > 0) {
        out->delay_ms = (uint64_t)f->delay.fixed_delay_ms;
        out->delay_ppm = f->delay.percentage.mark.line > 0
                             ? percent_ppm(f->delay.percentage.value)
                             : percent_ppm((double)f->delay.percent);
    }
    if (f->abort.mark.line > 0 && f->abort.http_status > 0) {
        out->abort_status = (int)f->abort.http_status;
        out->abort_ppm = f->abort.percentage.mark.line > 0
                             ? percent_ppm(f->abort.percentage.value)
                             : 0;
    }
}

static int compile_cors(struct rt_build *b, const struct res_cors *c,
                        const char *path, const struct route_cors **out)
{
    struct route_cors *cors = rt_alloc(b, sizeof(*cors));
    size_t n = c->allow_origins.n + c->allow_origin.n;
    struct route_strmatch *o = NULL;
    const struct conf_strs *lists[3] = {&c->allow_methods, &c->allow_headers,
                                        &c->expose_headers};
    struct slice *dst[3];
    char p[300];

    if (cors == NULL)
        return -1;
    dst[0] = &cors->allow_methods;
    dst[1] = &cors->allow_headers;
    dst[2] = &cors->expose_headers;
    if (n > 0 && (o = rt_alloc(b, n * sizeof(*o))) == NULL)
        return -1;
    for (size_t i = 0; i < c->allow_origins.n; i++) {
        path_fmt(p, sizeof(p), "%s.allowOrigins[%zu]", path, i);
        if (compile_strmatch(
                b, (const struct res_strmatch *)c->allow_origins.v + i, 0, p,
                &o[i]) < 0)
            return -1;
    }
    for (size_t i = 0; i < c->allow_origin.n; i++) {
        struct route_strmatch *m = &o[c->allow_origins.n + i];
        /* The deprecated form: "*" is any origin, else an exact one. */
        m->kind = strcmp(c->allow_origin.v[i], "*") == 0 ? ROUTE_MATCH_PREFIX
                                                         : ROUTE_MATCH_EXACT;
        if (rt_str(b, m->kind == ROUTE_MATCH_PREFIX ? "" : c->allow_origin.v[i],
                   0, &m->text) < 0)
            return -1;
    }
    cors->origins = o;
    cors->norigins = n;
    for (int k = 0; k < 3; k++) {
        size_t len = 0;
        char *s;
        for (size_t i = 0; i < lists[k]->n; i++)
            len += strlen(lists[k]->v[i]) + 1;
        s = rt_alloc(b, len + 1);
        if (s == NULL)
            return -1;
        len = 0;
        for (size_t i = 0; i < lists[k]->n; i++) {
            size_t l = strlen(lists[k]->v[i]);
            if (i > 0)
                s[len++] = ',';
            memcpy(s + len, lists[k]->v[i], l);
            len += l;
        }
        dst[k]->p = s;
        dst[k]->n = len;
    }
    cors->max_age_ms = c->max_age_ms > 0 ? c->max_age_ms : -1;
    cors->allow_credentials = c->allow_credentials;
    *out = cors;
    return 0;
}

static int b64_value(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* b64_decode() decodes standard or URL-safe base64 (padding optional,
 * whitespace skipped) into the router. */
static int b64_decode(struct rt_build *b, const char *s, struct slice *out)
{
    size_t n = strlen(s), o = 0;
    char *d = rt_alloc(b, n / 4 * 3 + 4);
    uint32_t acc = 0;
    int bits = 0;

    if (d == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int v;
        if (s[i] == '=' || s[i] == ' ' || s[i] == '\n' || s[i] == '\r' ||
            s[i] == '\t')
            continue;
        v = b64_value((unsigned char)s[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            d[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    d[o] = '\0';
    out->p = d;
    out->n = o;
    return 0;
}

/*
 * compile_action() compiles what rule h does. Returns 0, 1 when the rule
 * is skipped (delegate), or -1 with *err set.
 */
static int compile_action(struct rt_build *b, const struct res_http_route *h,
                          size_t index, const char *path,
                          struct route_action *a)
{
    char p[300];

    a->vs = b->vs_name;
    a->name = h->name != NULL ? rt_cstr(b, h->name) : NULL;
    a->rule = index;
    if (h->route.n > 0) {
        struct route_destination *d = rt_alloc(b, h->route.n * sizeof(*d));
        if (d == NULL)
            return -1;
        a->kind = ROUTE_FORWARD;
        for (size_t i = 0; i < h->route.n; i++) {
            const struct res_route_dest *rd =
                (const struct res_route_dest *)h->route.v + i;
            if (dest_cluster(b, &rd->destination, &d[i].host, &d[i].subset,
                             &d[i].port, &d[i].cluster) < 0)
                return -1;
            d[i].weight = rd->weight > 0 ? (uint32_t)rd->weight : 0;
            a->total_weight += d[i].weight;
            if (compile_headers(b, &rd->headers, &d[i].headers) < 0)
                return -1;
        }
        a->dests = d;
        a->ndests = h->route.n;
    } else if (h->redirect.mark.line > 0) {
        const struct res_redirect *rd = &h->redirect;
        a->kind = ROUTE_REDIRECT;
        if (rt_str(b, rd->uri, 0, &a->redirect.uri) < 0 ||
            rt_str(b, rd->authority, 1, &a->redirect.authority) < 0 ||
            rt_str(b, rd->scheme, 1, &a->redirect.scheme) < 0)
            return -1;
        a->redirect.port = rd->port > 0 ? (uint32_t)rd->port : 0;
        a->redirect.from_request_port = rd->derive_port == 1;
        a->redirect.code = rd->redirect_code > 0 ? (int)rd->redirect_code : 301;
    } else if (h->direct_response.mark.line > 0) {
        const struct res_direct_response *dr = &h->direct_response;
        a->kind = ROUTE_DIRECT;
        a->direct.status = (int)dr->status;
        if (dr->body.bytes != NULL) {
            if (b64_decode(b, dr->body.bytes, &a->direct.body) < 0) {
                path_fmt(p, sizeof(p), "%s.directResponse.body.bytes", path);
                build_err(b, &dr->body.mark, p, "not base64");
                return -1;
            }
        } else if (rt_str(b, dr->body.string, 0, &a->direct.body) < 0) {
            return -1;
        }
    } else {
        /* delegate: not compiled yet (see router.h). */
        return 1;
    }
    if (h->rewrite.mark.line > 0) {
        const struct res_rewrite *rw = &h->rewrite;
        a->rewrite.has_uri = rw->uri != NULL;
        if (rt_str(b, rw->uri, 0, &a->rewrite.uri) < 0 ||
            rt_str(b, rw->authority, 0, &a->rewrite.authority) < 0)
            return -1;
        if (rw->uri_regex_rewrite.match != NULL &&
            rw->uri_regex_rewrite.rewrite != NULL) {
            path_fmt(p, sizeof(p), "%s.rewrite.uriRegexRewrite", path);
            a->rewrite.regex = rt_regex(b, rw->uri_regex_rewrite.match, 0,
                                        &rw->uri_regex_rewrite.mark, p);
            if (a->rewrite.regex == NULL ||
                rt_str(b, rw->uri_regex_rewrite.rewrite, 0,
                       &a->rewrite.regex_sub) < 0)
                return -1;
        }
    }
    if (compile_headers(b, &h->headers, &a->headers) < 0)
        return -1;
    a->timeout_ms = h->timeout_ms > 0 ? (uint64_t)h->timeout_ms : 0;
    compile_retry(&h->retries, &a->retry);
    compile_fault(&h->fault, &a->fault);
    if (h->mirror.mark.line > 0) {
        a->mirror.enabled = 1;
        if (dest_cluster(b, &h->mirror, &a->mirror.host, &a->mirror.subset,
                         &a->mirror.port, &a->mirror.cluster) < 0)
            return -1;
        /* Istio: mirrorPercentage, else the deprecated mirrorPercent, else
         * every request. */
        if (h->mirror_percentage.mark.line > 0)
            a->mirror.ppm = percent_ppm(h->mirror_percentage.value);
        else if (h->mirror_percent > 0)
            a->mirror.ppm = percent_ppm((double)h->mirror_percent);
        else
            a->mirror.ppm = ROUTE_PPM;
    }
    if (h->cors_policy.mark.line > 0) {
        path_fmt(p, sizeof(p), "%s.corsPolicy", path);
        if (compile_cors(b, &h->cors_policy, p, &a->cors) < 0)
            return -1;
    }
    b->r->nactions++;
    return 0;
}

/* compile_rule() fills *out; returns 0, 1 when the rule is left out of
 * these routes, -1 on error. */
int rt_compile_rule(struct rt_build *b, const struct res_http_route *h,
                    size_t index, struct rt_rule *out)
{
    char path[64], p[300];
    struct route_action *a;
    struct rt_block *blocks = NULL;
    size_t nblocks = 0;
    int rc;

    snprintf(path, sizeof(path), "spec.http[%zu]", index);
    if (h->match.n > 0) {
        blocks = rt_alloc(b, h->match.n * sizeof(*blocks));
        if (blocks == NULL)
            return -1;
        for (size_t j = 0; j < h->match.n; j++) {
            const struct res_http_match *m =
                (const struct res_http_match *)h->match.v + j;
            if (!block_applies(b, m))
                continue;
            path_fmt(p, sizeof(p), "%s.match[%zu]", path, j);
            if (compile_block(b, m, (int)j, p, &blocks[nblocks]) < 0)
                return -1;
            nblocks++;
        }
        /* Every block was for other gateways or sources: Istio drops the
         * rule rather than let it match everything. */
        if (nblocks == 0)
            return 1;
    }
    a = rt_alloc(b, sizeof(*a));
    if (a == NULL)
        return -1;
    rc = compile_action(b, h, index, path, a);
    if (rc != 0)
        return rc;
    out->blocks = blocks;
    out->nblocks = nblocks;
    out->action = a;
    return 0;
}

/* merge_blocks() ANDs a root block and a delegate block. Istio drops a
 * pair whose conditions conflict (a delegate uri outside the root's, two
 * values for one header); ANDed, such a pair never matches, which is the
 * same. The delegate's uri condition decides prefix rewriting, as the
 * delegate's match is the narrower one. */
static int merge_blocks(struct rt_build *b, const struct rt_block *root,
                        const struct rt_block *del, struct rt_block *out)
{
    size_t n = root->nconds + del->nconds;
    struct rt_cond *v = n ? rt_alloc(b, n * sizeof(*v)) : NULL;

    if (n > 0 && v == NULL)
        return -1;
    if (root->nconds > 0)
        memcpy(v, root->conds, root->nconds * sizeof(*v));
    if (del->nconds > 0)
        memcpy(v + root->nconds, del->conds, del->nconds * sizeof(*v));
    qsort(v, n, sizeof(*v), cond_cmp);
    out->conds = v;
    out->nconds = n;
    out->index = del->index;
    out->uri_kind = del->uri_kind >= 0 ? del->uri_kind : root->uri_kind;
    out->uri_prefix_len =
        del->uri_kind >= 0 ? del->uri_prefix_len : root->uri_prefix_len;
    return 0;
}

/* compile_blocks() compiles the blocks of h that apply here; *nblocks 0
 * with a non-empty match means none applies (the rule is left out). */
static int compile_blocks(struct rt_build *b, const struct res_http_route *h,
                          const char *path, struct rt_block **blocks,
                          size_t *nblocks)
{
    char p[300];

    *blocks = NULL;
    *nblocks = 0;
    if (h->match.n == 0)
        return 0;
    *blocks = rt_alloc(b, h->match.n * sizeof(**blocks));
    if (*blocks == NULL)
        return -1;
    for (size_t j = 0; j < h->match.n; j++) {
        const struct res_http_match *m =
            (const struct res_http_match *)h->match.v + j;
        if (!block_applies(b, m))
            continue;
        path_fmt(p, sizeof(p), "%s.match[%zu]", path, j);
        if (compile_block(b, m, (int)j, p, &(*blocks)[*nblocks]) < 0)
            return -1;
        (*nblocks)++;
    }
    return 0;
}

static int push_rule(struct rt_build *b, struct rt_rule **rules, size_t *n,
                     size_t *cap, const struct rt_rule *r)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 8;
        struct rt_rule *nv = realloc(*rules, nc * sizeof(*nv));
        if (nv == NULL) {
            err_set(b->err, "router: out of memory");
            return -1;
        }
        *rules = nv;
        *cap = nc;
    }
    (*rules)[(*n)++] = *r;
    return 0;
}

/*
 * Istio's delegation: the root rule holds only match and delegate; the
 * delegate VirtualService (no hosts of its own, visible to the root's
 * namespace) gives the rules, each matching only where the root rule's
 * match holds too. One level: a delegate's own delegate rules are left
 * out, as Istio does. Destinations of the delegate's rules resolve in its
 * namespace, and the access log names it.
 */
int rt_compile_delegate(struct rt_build *b, const struct res_http_route *h,
                        size_t index, struct rt_rule **rules, size_t *n,
                        size_t *cap)
{
    const struct resource *root_res = b->res, *dres;
    const struct res_virtual_service *root_vs = b->vs, *dvs;
    const char *root_name = b->vs_name;
    struct rt_block *rblocks, *dblocks;
    size_t nr, nd;
    char path[64], id[512];
    int rc = -1;

    snprintf(path, sizeof(path), "spec.http[%zu]", index);
    if (compile_blocks(b, h, path, &rblocks, &nr) < 0)
        return -1;
    if (h->match.n > 0 && nr == 0)
        return 0;
    dres = resource_find(b->p->set, RES_VIRTUAL_SERVICE,
                         h->delegate.ns ? h->delegate.ns : root_res->meta.ns,
                         h->delegate.name);
    /* A missing delegate is an analysis error (IST0101); one that is not
     * exported to the root's namespace routes nothing, as in Istio. */
    if (dres == NULL ||
        !res_visible(dres, &res_virtual_service(dres)->export_to,
                     root_res->meta.ns))
        return 0;
    dvs = res_virtual_service(dres);
    snprintf(id, sizeof(id), "%s/%s", dres->meta.ns, dres->meta.name);
    b->res = dres;
    b->vs = dvs;
    b->vs_name = rt_cstr(b, id);
    if (b->vs_name == NULL)
        goto out;
    for (size_t j = 0; j < dvs->http.n; j++) {
        const struct res_http_route *dh =
            (const struct res_http_route *)dvs->http.v + j;
        struct rt_rule rule = {NULL, 0, NULL};
        struct route_action *a;
        int r;

        if (dh->delegate.name != NULL)
            continue;
        snprintf(path, sizeof(path), "spec.http[%zu]", j);
        if (compile_blocks(b, dh, path, &dblocks, &nd) < 0)
            goto out;
        if (dh->match.n > 0 && nd == 0)
            continue;
        a = rt_alloc(b, sizeof(*a));
        if (a == NULL)
            goto out;
        r = compile_action(b, dh, j, path, a);
        if (r < 0)
            goto out;
        if (r > 0)
            continue;
        rule.action = a;
        if (nr == 0 || nd == 0) {
            rule.blocks = nr ? rblocks : dblocks;
            rule.nblocks = nr ? nr : nd;
        } else {
            struct rt_block *m = rt_alloc(b, nr * nd * sizeof(*m));
            if (m == NULL)
                goto out;
            for (size_t x = 0; x < nr; x++)
                for (size_t y = 0; y < nd; y++)
                    if (merge_blocks(b, &rblocks[x], &dblocks[y],
                                     &m[x * nd + y]) < 0)
                        goto out;
            rule.blocks = m;
            rule.nblocks = nr * nd;
        }
        if (push_rule(b, rules, n, cap, &rule) < 0)
            goto out;
    }
    rc = 0;
out:
    if (rc < 0 && b->err != NULL && *b->err == NULL)
        err_set(b->err, "router: out of memory");
    b->res = root_res;
    b->vs = root_vs;
    b->vs_name = root_name;
    return rc;
}
