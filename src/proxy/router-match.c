/*
 * The VirtualService router, request side: picks the virtual host and the
 * rule for a request, and the helpers the proxy calls once it has one
 * (path rewrite, redirect Location, header operations, CORS origins).
 *
 * Nothing here writes to the router or takes a lock. The only memory used
 * is the request's arena: PCRE2's match data and backtracking frames are
 * allocated from it through a general context, and so are the few strings
 * built (joined header values, rewritten paths, Location).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/ascii.h"
#include "http/http.h"
#include "proxy/router-int.h"

#define HOST_MAX 512

/* ---- regular expressions ----------------------------------------------- */

/* Per-call PCRE2 state, created on the first regular expression a request
 * meets: most requests meet none. */
struct rt_scratch {
    struct arena *arena;
    pcre2_general_context *gc;
    pcre2_match_data *md; /* one ovector pair: conditions only */
};

static void *scratch_malloc(PCRE2_SIZE n, void *data)
{
    return arena_alloc(data, n);
}

static void scratch_free(void *p, void *data)
{
    /* The arena frees everything with the request. */
    (void)p;
    (void)data;
}

static pcre2_general_context *scratch_gc(struct rt_scratch *s)
{
    if (s->gc == NULL && s->arena != NULL)
        s->gc = pcre2_general_context_create(scratch_malloc, scratch_free,
                                             s->arena);
    return s->gc;
}

/* regex_full() is true when re matches all of v (re is anchored at both
 * ends). A match that hits a limit, or runs out of memory, is no match. */
static int regex_full(const struct route_regex *re, struct slice v,
                      struct rt_scratch *s)
{
    static const char empty[] = "";
    int rc;

    if (s->md == NULL) {
        pcre2_general_context *gc = scratch_gc(s);
        if (gc == NULL)
            return 0;
        s->md = pcre2_match_data_create(1, gc);
        if (s->md == NULL)
            return 0;
    }
    rc = pcre2_match(re->code, (PCRE2_SPTR)(v.p != NULL ? v.p : empty), v.n, 0,
                     0, s->md, re->mctx);
    return rc >= 0;
}

static int strmatch_eval(const struct route_strmatch *m, struct slice v,
                         struct rt_scratch *s)
{
    switch (m->kind) {
    case ROUTE_MATCH_EXACT:
        if (v.n != m->text.n)
            return 0;
        if (v.n == 0)
            return 1;
        return m->nocase ? strncasecmp(v.p, m->text.p, v.n) == 0
                         : memcmp(v.p, m->text.p, v.n) == 0;
    case ROUTE_MATCH_PREFIX:
        if (v.n < m->text.n)
            return 0;
        if (m->text.n == 0)
            return 1;
        return m->nocase ? strncasecmp(v.p, m->text.p, m->text.n) == 0
                         : memcmp(v.p, m->text.p, m->text.n) == 0;
    case ROUTE_MATCH_REGEX:
        return regex_full(m->re, v, s);
    case ROUTE_MATCH_PRESENT:
        return 1;
    }
    return 0;
}

/* ---- request parts ------------------------------------------------------ */

/* The path without query or fragment. */
static struct slice path_only(struct slice path)
{
    size_t i;

    for (i = 0; i < path.n && path.p[i] != '?' && path.p[i] != '#'; i++)
        ;
    return (struct slice){path.p, i};
}

/*
 * header_value() finds a request header (name lowercase). Several fields
 * of one name are joined with "," as Envoy matches them (in the arena;
 * without one, the first is used). Pseudo-header names read the request
 * line. Returns 1 and the value, or 0 when the header is absent.
 */
static int header_value(const struct http_request *req, struct slice name,
                        struct arena *a, struct slice *out)
{
    size_t count = 0, len = 0, first = 0;
    char *buf;

    if (name.n > 0 && name.p[0] == ':') {
        if (slice_eq_str(name, ":authority"))
            *out = req->authority;
        else if (slice_eq_str(name, ":method"))
            *out = req->method;
        else if (slice_eq_str(name, ":path"))
            *out = req->path;
        else if (slice_eq_str(name, ":scheme"))
            *out = req->scheme;
        else
            return 0;
        return out->p != NULL;
    }
    for (size_t i = 0; i < req->fields.n; i++) {
        if (!slice_eq(req->fields.v[i].name, name))
            continue;
        if (count++ == 0)
            first = i;
        len += req->fields.v[i].value.n + 1;
    }
    if (count == 0) {
        /* HTTP/1 Host travels as the authority. */
        if (slice_eq_str(name, "host") && req->authority.p != NULL) {
            *out = req->authority;
            return 1;
        }
        return 0;
    }
    *out = req->fields.v[first].value;
    if (count == 1 || a == NULL || (buf = arena_alloc(a, len)) == NULL)
        return 1;
    len = 0;
    for (size_t i = first; i < req->fields.n; i++) {
        const struct slice *v = &req->fields.v[i].value;
        if (!slice_eq(req->fields.v[i].name, name))
            continue;
        if (len > 0)
            buf[len++] = ',';
        if (v->n > 0)
            memcpy(buf + len, v->p, v->n);
        len += v->n;
    }
    out->p = buf;
    out->n = len;
    return 1;
}

/* query_value() finds the first query parameter called name, its value as
 * written (not decoded, as Envoy matches it). */
static int query_value(struct slice path, struct slice name, struct slice *out)
{
    size_t i = 0, end;

    while (i < path.n && path.p[i] != '?')
        i++;
    if (i == path.n)
        return 0;
    for (end = ++i; end < path.n && path.p[end] != '#'; end++)
        ;
    while (i < end) {
        size_t s = i, eq;
        while (i < end && path.p[i] != '&')
            i++;
        for (eq = s; eq < i && path.p[eq] != '='; eq++)
            ;
        if (eq - s == name.n &&
            (name.n == 0 || memcmp(path.p + s, name.p, name.n) == 0)) {
            out->p = path.p + (eq < i ? eq + 1 : i);
            out->n = eq < i ? i - eq - 1 : 0;
            return 1;
        }
        i++;
    }
    return 0;
}

/* ---- matching ----------------------------------------------------------- */

struct rt_req {
    const struct http_request *req;
    uint32_t port;
    struct slice path; /* without query */
    struct rt_scratch scratch;
};

static int cond_eval(const struct rt_cond *c, struct rt_req *q)
{
    struct slice v;
    int found;

    switch (c->what) {
    case RT_PORT:
        return q->port == c->port;
    case RT_METHOD:
        return strmatch_eval(&c->m, q->req->method, &q->scratch);
    case RT_SCHEME:
        return strmatch_eval(&c->m, q->req->scheme, &q->scratch);
    case RT_URI:
        return strmatch_eval(&c->m, q->path, &q->scratch);
    case RT_AUTHORITY:
        return strmatch_eval(&c->m, q->req->authority, &q->scratch);
    case RT_HEADER:
        found = header_value(q->req, c->name, q->scratch.arena, &v) &&
                strmatch_eval(&c->m, v, &q->scratch);
        return c->negate ? !found : found;
    case RT_QUERY:
        return query_value(q->req->path, c->name, &v) &&
               strmatch_eval(&c->m, v, &q->scratch);
    }
    return 0;
}

static int block_eval(const struct rt_block *b, struct rt_req *q)
{
    for (size_t i = 0; i < b->nconds; i++)
        if (!cond_eval(&b->conds[i], q))
            return 0;
    return 1;
}

/* find_vhost() picks the virtual host for an authority: exact domain,
 * then the longest wildcard suffix, then "*". */
static const struct rt_vhost *find_vhost(const struct router *r,
                                         struct slice authority)
{
    char host[HOST_MAX];
    size_t n = authority.n;
    int idx;

    /* Strip the port: after the last ':' when only digits follow, and
     * never inside an IPv6 literal's brackets. */
    for (size_t i = n; i > 0; i--) {
        char c = authority.p[i - 1];
        if (c == ':') {
            n = i - 1;
            break;
        }
        if (c < '0' || c > '9')
            break;
    }
    if (n > 0 && n < sizeof(host)) {
        ascii_lower_copy(host, authority.p, n);
        host[n] = '\0';
        if ((idx = rt_table_get(&r->exact, host, n)) >= 0)
            return &r->vhosts[idx];
        for (size_t i = 1; i < n; i++)
            if (host[i] == '.' &&
                (idx = rt_table_get(&r->wild, host + i, n - i)) >= 0)
                return &r->vhosts[idx];
    }
    return r->catch_all >= 0 ? &r->vhosts[r->catch_all] : NULL;
}

/* A 64-bit mixer (splitmix64's finaliser), so one random value gives
 * independent draws for weights, faults and mirroring. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int draw_ppm(uint64_t random, uint64_t salt, uint32_t ppm)
{
    if (ppm == 0)
        return 0;
    if (ppm >= ROUTE_PPM)
        return 1;
    return mix64(random ^ salt) % ROUTE_PPM < ppm;
}

int router_pick_destination(const struct route_action *a, uint64_t random)
{
    uint64_t pick;

    if (a == NULL || a->ndests == 0 || a->total_weight == 0)
        return -1;
    pick = random % a->total_weight;
    for (size_t i = 0; i < a->ndests; i++) {
        if (pick < a->dests[i].weight)
            return (int)i;
        pick -= a->dests[i].weight;
    }
    return -1;
}

const struct route_action *router_match(const struct router *r,
                                        const struct http_request *req,
                                        uint32_t port, uint64_t random,
                                        struct arena *arena,
                                        struct route_result *out)
{
    const struct rt_vhost *vh;
    struct rt_req q = {req, port, path_only(req->path), {arena, NULL, NULL}};

    /* OPTIONS * (the asterisk form) asks about the server as a whole: it
     * is routed as "/" of its host, and forwarded as "*". */
    if (q.path.n == 1 && q.path.p[0] == '*')
        q.path = SLICE_LIT("/");
    memset(out, 0, sizeof(*out));
    out->dest = -1;
    out->match = -1;
    out->uri_kind = -1;
    if (r == NULL || (vh = find_vhost(r, req->authority)) == NULL)
        return NULL;
    for (size_t i = 0; i < vh->nrules; i++) {
        const struct rt_rule *rule = &vh->rules[i];
        const struct rt_block *hit = NULL;
        const struct route_action *a = rule->action;

        for (size_t j = 0; j < rule->nblocks && hit == NULL; j++)
            if (block_eval(&rule->blocks[j], &q))
                hit = &rule->blocks[j];
        if (rule->nblocks > 0 && hit == NULL)
            continue;
        out->action = a;
        out->vhost = vh->domain;
        out->port = port;
        if (hit != NULL) {
            out->match = hit->index;
            out->uri_kind = hit->uri_kind;
            out->uri_prefix_len = hit->uri_prefix_len;
        }
        if (a->kind == ROUTE_FORWARD)
            out->dest = router_pick_destination(a, random);
        if (draw_ppm(random, 1, a->fault.delay_ppm))
            out->delay_ms = a->fault.delay_ms;
        if (draw_ppm(random, 2, a->fault.abort_ppm))
            out->abort_status = a->fault.abort_status;
        out->mirror = a->mirror.enabled && a->mirror.cluster >= 0 &&
                      draw_ppm(random, 3, a->mirror.ppm);
        return a;
    }
    return NULL;
}

/* ---- request-time helpers ----------------------------------------------- */

/* A string built in the arena; grows by copying (the arena frees the old
 * copies with the request). */
struct sbuf {
    struct arena *a;
    char *p;
    size_t n;
    size_t cap;
    int oom;
};

static void sbuf_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        char *p;
        while (cap < b->n + n + 1)
            cap *= 2;
        p = arena_alloc(b->a, cap);
        if (p == NULL) {
            b->oom = 1;
            return;
        }
        if (b->n > 0)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sbuf_slice(struct sbuf *b, struct slice s)
{
    sbuf_put(b, s.p, s.n);
}

static struct slice sbuf_done(struct sbuf *b)
{
    if (b->p == NULL && !b->oom)
        b->p = arena_dup(b->a, "", 0);
    if (b->oom || b->p == NULL)
        return SLICE_NULL;
    return (struct slice){b->p, b->n};
}

/*
 * regex_rewrite() replaces every match of re in path (not its query) by
 * sub, where \0..\9 are groups and \\ a backslash, as Envoy's
 * regex_rewrite substitutes.
 */
static struct slice regex_rewrite(const struct route_rewrite *rw,
                                  struct slice full, struct arena *a)
{
    struct slice path = path_only(full);
    struct rt_scratch s = {a, NULL, NULL};
    struct sbuf out = {a, NULL, 0, 0, 0};
    pcre2_match_data *md;
    size_t off = 0;

    if (scratch_gc(&s) == NULL || (md = pcre2_match_data_create_from_pattern(
                                       rw->regex->code, s.gc)) == NULL)
        return SLICE_NULL;
    while (off <= path.n) {
        PCRE2_SIZE *ov;
        size_t ms, me;
        int rc = pcre2_match(rw->regex->code,
                             (PCRE2_SPTR)(path.p != NULL ? path.p : ""), path.n,
                             off, 0, md, rw->regex->mctx);
        if (rc < 0)
            break;
        ov = pcre2_get_ovector_pointer(md);
        ms = ov[0];
        me = ov[1];
        if (ms < off || me < ms)
            break;
        sbuf_put(&out, path.p + off, ms - off);
        for (size_t i = 0; i < rw->regex_sub.n; i++) {
            char c = rw->regex_sub.p[i];
            if (c == '\\' && i + 1 < rw->regex_sub.n) {
                char d = rw->regex_sub.p[i + 1];
                if (d >= '0' && d <= '9') {
                    uint32_t g = (uint32_t)(d - '0');
                    if (g < (uint32_t)rc && ov[2 * g] != PCRE2_UNSET)
                        sbuf_put(&out, path.p + ov[2 * g],
                                 ov[2 * g + 1] - ov[2 * g]);
                    i++;
                    continue;
                }
                if (d == '\\') {
                    sbuf_put(&out, "\\", 1);
                    i++;
                    continue;
                }
            }
            sbuf_put(&out, &c, 1);
        }
        if (me == ms) {
            /* An empty match: keep one character (a whole UTF-8 one) and
             * look again after it. */
            size_t next = ms + 1;
            if (ms >= path.n)
                break;
            while (next < path.n &&
                   ((unsigned char)path.p[next] & 0xc0) == 0x80)
                next++;
            sbuf_put(&out, path.p + ms, next - ms);
            off = next;
        } else {
            off = me;
        }
    }
    if (off < path.n)
        sbuf_put(&out, path.p + off, path.n - off);
    sbuf_put(&out, full.p + path.n, full.n - path.n);
    return sbuf_done(&out);
}

struct slice router_rewrite_path(const struct route_result *res,
                                 const struct http_request *req,
                                 struct arena *arena)
{
    const struct route_action *a = res->action;
    struct slice path = req->path;
    struct sbuf out = {arena, NULL, 0, 0, 0};
    size_t n;

    if (a == NULL)
        return path;
    if (a->rewrite.regex != NULL)
        return regex_rewrite(&a->rewrite, path, arena);
    if (!a->rewrite.has_uri)
        return path;
    if (res->uri_kind == ROUTE_MATCH_REGEX) {
        /* Envoy swaps the whole path of a regex-matched route. */
        n = path_only(path).n;
    } else if (res->uri_kind == ROUTE_MATCH_EXACT ||
               res->uri_kind == ROUTE_MATCH_PREFIX) {
        n = res->uri_prefix_len;
    } else {
        /* No uri condition: Istio's route is a prefix "/". */
        n = 1;
    }
    if (n > path.n)
        n = path.n;
    if (slice_eq_str(a->rewrite.uri, "/") && n > 0 && path.p[n - 1] != '/' &&
        res->uri_kind == ROUTE_MATCH_PREFIX) {
        /* Istio turns prefix "/foo" rewritten to "/" into a regex that
         * also eats the slashes after the prefix, so "/foo/x" becomes
         * "/x", not "//x". */
        while (n < path.n && path.p[n] == '/')
            n++;
    }
    sbuf_slice(&out, a->rewrite.uri);
    sbuf_put(&out, path.p + n, path.n - n);
    return sbuf_done(&out);
}

/* Host and port of an authority ("h", "h:p", "[v6]:p"); port 0: none. */
static void split_authority(struct slice a, struct slice *host, uint32_t *port)
{
    size_t n = a.n;
    uint32_t p = 0;

    *host = a;
    *port = 0;
    for (size_t i = n; i > 0; i--) {
        char c = a.p[i - 1];
        if (c == ':') {
            if (i == n)
                return;
            for (size_t j = i; j < n; j++)
                p = p * 10 + (uint32_t)(a.p[j] - '0');
            if (p > 65535)
                return;
            host->n = i - 1;
            *port = p;
            return;
        }
        if (c < '0' || c > '9')
            return;
    }
}

static uint32_t default_port(struct slice scheme)
{
    if (slice_case_eq_str(scheme, "https"))
        return 443;
    if (slice_case_eq_str(scheme, "http"))
        return 80;
    return 0;
}

const char *router_redirect_location(const struct route_result *res,
                                     const struct http_request *req,
                                     struct arena *arena)
{
    const struct route_action *a = res->action;
    const struct route_redirect *rd;
    struct sbuf out = {arena, NULL, 0, 0, 0};
    struct slice scheme, host, path;
    uint32_t port, req_port;
    char num[16];

    if (a == NULL || a->kind != ROUTE_REDIRECT)
        return NULL;
    rd = &a->redirect;
    scheme = rd->scheme.n > 0 ? rd->scheme : req->scheme;
    if (scheme.n == 0)
        scheme = SLICE_LIT("http");
    split_authority(req->authority, &host, &req_port);
    if (rd->authority.n > 0)
        split_authority(rd->authority, &host, &port);
    else if (rd->scheme.n > 0 && !slice_case_eq_str(req->scheme, rd->scheme.p))
        port = 0; /* a new scheme drops the old scheme's port */
    else
        port = req_port;
    if (rd->port > 0)
        port = rd->port;
    else if (rd->from_request_port)
        port = res->port;
    if (port == default_port(scheme))
        port = 0;
    sbuf_slice(&out, scheme);
    sbuf_put(&out, "://", 3);
    sbuf_slice(&out, host);
    if (port > 0) {
        int w = snprintf(num, sizeof(num), ":%u", (unsigned)port);
        sbuf_put(&out, num, (size_t)w);
    }
    if (rd->uri.n > 0) {
        /* Envoy's path_redirect keeps the request's query unless the new
         * path has its own. */
        struct slice p = path_only(req->path);
        sbuf_slice(&out, rd->uri);
        if (memchr(rd->uri.p, '?', rd->uri.n) == NULL && p.n < req->path.n &&
            req->path.p[p.n] == '?')
            sbuf_put(&out, req->path.p + p.n, req->path.n - p.n);
    } else {
        path = req->path.n > 0 ? req->path : SLICE_LIT("/");
        sbuf_slice(&out, path);
    }
    return sbuf_done(&out).p;
}

static int apply_list(const struct route_header_list *l, struct http_fields *f,
                      struct arena *a)
{
    for (size_t i = 0; i < l->nremove; i++)
        http_fields_remove(f, l->remove[i].p);
    for (size_t i = 0; i < l->nset; i++)
        if (http_fields_set(f, a, l->set[i].name.p, l->set[i].value) < 0)
            return -1;
    for (size_t i = 0; i < l->nadd; i++)
        if (http_fields_add_ref(f, a, l->add[i].name, l->add[i].value) < 0)
            return -1;
    return 0;
}

int router_apply_headers(const struct route_result *res, int response,
                         struct http_fields *fields, struct arena *arena)
{
    const struct route_action *a = res->action;

    if (a == NULL)
        return 0;
    if (a->kind == ROUTE_FORWARD && res->dest >= 0 &&
        (size_t)res->dest < a->ndests) {
        const struct route_header_ops *d = &a->dests[res->dest].headers;
        if (apply_list(response ? &d->response : &d->request, fields, arena) <
            0)
            return -1;
    }
    return apply_list(response ? &a->headers.response : &a->headers.request,
                      fields, arena);
}

int router_cors_origin_allowed(const struct route_cors *c, struct slice origin,
                               struct arena *arena)
{
    struct rt_scratch s = {arena, NULL, NULL};

    if (c == NULL)
        return 0;
    for (size_t i = 0; i < c->norigins; i++)
        if (strmatch_eval(&c->origins[i], origin, &s))
            return 1;
    return 0;
}

struct slice router_shadow_authority(struct slice authority,
                                     struct arena *arena)
{
    static const char suffix[] = "-shadow";
    size_t sn = sizeof(suffix) - 1;
    struct slice host;
    uint32_t port;
    char *out;

    split_authority(authority, &host, &port);
    if (host.n == authority.n && authority.n > 0 &&
        authority.p[authority.n - 1] == ':')
        host.n--; /* "host:" with an empty port: the suffix goes before it */
    out = arena_alloc(arena, authority.n + sn + 1);
    if (out == NULL)
        return (struct slice){NULL, 0};
    memcpy(out, authority.p, host.n);
    memcpy(out + host.n, suffix, sn);
    memcpy(out + host.n + sn, authority.p + host.n, authority.n - host.n);
    out[authority.n + sn] = '\0';
    return (struct slice){out, authority.n + sn};
}
