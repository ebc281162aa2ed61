/*
 * What a proxied request meets before it goes upstream, in Envoy's filter
 * order: authorization (the RBAC filter), the routes (the router: no
 * route, redirects, direct responses, faults, rewrites), CORS, and the
 * forwarding headers a proxy adds.
 */
#include "config.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"
#include "core/units.h"
#include "policy/authz.h"
#include "policy/jwt.h"
#include "proxy/pipeline-int.h"
#include "tls/tls.h"

static const char *trusted_client(struct pstream *ps, struct slice xff);
static int addr_from_ip(const char *ip, struct sockaddr_storage *ss);

/*
 * pstream_cors_headers() adds the corsPolicy's answer to an allowed
 * cross-origin request, as Envoy's CORS filter does: the origin echoed back,
 * the credentials flag, and either the exposed headers (actual requests) or the
 * allowed methods, headers and max age (preflights).
 */
int pstream_cors_headers(struct pstream *ps, int preflight)
{
    const struct route_cors *c = ps->action ? ps->action->cors : NULL;
    struct http_fields *f = &ps->s->resp.fields;
    struct arena *a = &ps->s->arena;
    char age[24];

    if (c == NULL || ps->cors_origin.n == 0)
        return 0;
    if (http_fields_set(f, a, "access-control-allow-origin", ps->cors_origin) <
        0)
        return -1;
    if (c->allow_credentials &&
        http_fields_set(f, a, "access-control-allow-credentials",
                        SLICE_LIT("true")) < 0)
        return -1;
    if (!preflight)
        return c->expose_headers.n == 0
                   ? 0
                   : http_fields_set(f, a, "access-control-expose-headers",
                                     c->expose_headers);
    if (c->allow_methods.n > 0 &&
        http_fields_set(f, a, "access-control-allow-methods",
                        c->allow_methods) < 0)
        return -1;
    if (c->allow_headers.n > 0 &&
        http_fields_set(f, a, "access-control-allow-headers",
                        c->allow_headers) < 0)
        return -1;
    if (c->max_age_ms >= 0) {
        snprintf(age, sizeof(age), "%" PRId64, c->max_age_ms / 1000);
        if (http_fields_set(f, a, "access-control-max-age", slice_of(age)) < 0)
            return -1;
    }
    return 0;
}

/*
 * cors_request() looks at the Origin of a request on a route with a
 * corsPolicy. An allowed origin is remembered for the response headers;
 * an allowed preflight (OPTIONS with Access-Control-Request-Method) is
 * answered here with 200 and returns 1. A disallowed origin gets no CORS
 * headers and the request goes on, as with Envoy: the browser enforces.
 */
static int cors_request(struct pstream *ps)
{
    struct hstream *s = ps->s;
    const struct http_field *o;

    /* Most routes (every bootstrap route) have no corsPolicy: no header
     * lookup for them. */
    if (ps->action->cors == NULL)
        return 0;
    o = http_fields_get(&s->req.fields, "origin");
    if (o == NULL || o->value.n == 0 ||
        !router_cors_origin_allowed(ps->action->cors, o->value, &s->arena))
        return 0;
    ps->cors_origin = o->value;
    if (!slice_eq(s->req.method, SLICE_LIT("OPTIONS")) ||
        http_fields_get(&s->req.fields, "access-control-request-method") ==
            NULL)
        return 0;
    if (hstream_reply_begin(s, 200, NULL) < 0)
        return 1;
    if (pstream_cors_headers(ps, 1) < 0)
        return hstream_respond(s, 503, "out of memory\n", NULL, NULL), 1;
    hstream_reply_end(s, NULL);
    return 1;
}

/*
 * The originating client behind xffNumTrustedHops proxies we trust: the
 * Nth address from the right of the X-Forwarded-For they built (Envoy's
 * rule). Without enough entries, the peer itself.
 */
static const char *trusted_client(struct pstream *ps, struct slice xff)
{
    uint32_t hops = ps->l->conf->xff_trusted_hops;
    size_t end = xff.n;

    if (hops == 0)
        return NULL;
    for (uint32_t k = 1; k <= hops; k++) {
        size_t start = end;
        while (start > 0 && xff.p[start - 1] != ',')
            start--;
        if (k == hops) {
            size_t a = start, b = end;
            while (a < b && (xff.p[a] == ' ' || xff.p[a] == '\t'))
                a++;
            while (b > a && (xff.p[b - 1] == ' ' || xff.p[b - 1] == '\t'))
                b--;
            return b > a ? arena_dup(&ps->s->arena, xff.p + a, b - a) : NULL;
        }
        if (start == 0)
            return NULL;
        end = start - 1;
    }
    return NULL;
}

void pstream_find_client(struct pstream *ps)
{
    const struct http_field *xff =
        http_fields_get(&ps->s->req.fields, "x-forwarded-for");

    ps->client = xff != NULL ? trusted_client(ps, xff->value) : NULL;
}

/*
 * forward_client_cert() applies the listener's forwardClientCertDetails
 * to X-Forwarded-Client-Cert, as Envoy's forward_client_cert_details:
 * only ALWAYS_FORWARD_ONLY keeps a client's header on a connection
 * without a verified client certificate; SANITIZE always removes it;
 * FORWARD_ONLY passes it on from mTLS clients; APPEND_FORWARD appends
 * this hop's element to it; SANITIZE_SET replaces it with this hop's.
 */
static int forward_client_cert(struct pstream *ps)
{
    struct http_fields *f = &ps->s->req.fields;
    struct arena *a = &ps->s->arena;
    const struct http_field *old;
    int mode = ps->l->conf->xfcc;
    struct buf b;
    int rc = 0;

    if (mode == HTTP_XFCC_ALWAYS_FORWARD_ONLY)
        return 0;
    if (mode == HTTP_XFCC_SANITIZE || ps->hc->conn.tls == NULL ||
        !tls_conn_peer_verified(&ps->hc->conn)) {
        http_fields_remove(f, "x-forwarded-client-cert");
        return 0;
    }
    if (mode == HTTP_XFCC_FORWARD_ONLY)
        return 0;
    /* A certificate's PEM, URL-encoded, is about 3 times its size. */
    buf_init(&b, 64 * 1024);
    old = http_fields_get(f, "x-forwarded-client-cert");
    if (mode == HTTP_XFCC_APPEND_FORWARD && old != NULL && old->value.n > 0 &&
        (buf_append(&b, old->value.p, old->value.n) < 0 ||
         buf_puts(&b, ",") < 0))
        rc = -1;
    if (rc == 0 && tls_conn_xfcc(&ps->hc->conn, &b) < 0) {
        /* Too large to pass on: no header rather than a client's. */
        http_fields_remove(f, "x-forwarded-client-cert");
    } else if (rc == 0) {
        struct slice v =
            arena_slice(a, (struct slice){buf_ptr(&b), buf_len(&b)});
        if (v.p == NULL ||
            http_fields_set(f, a, "x-forwarded-client-cert", v) < 0)
            rc = -1;
    } else {
        http_fields_remove(f, "x-forwarded-client-cert");
        rc = 0;
    }
    buf_dispose(&b);
    return rc;
}

/* Request headers a proxy adds (RFC 7239's de facto ancestors). */
int pstream_add_forwarding(struct pstream *ps)
{
    struct hstream *s = ps->s;
    struct http_request *q = &s->req;
    const struct http_field *xff =
        http_fields_get(&q->fields, "x-forwarded-for");
    char id[40];
    uint64_t a, b;

    if (xff != NULL) {
        /* Append the peer to the chain the client's proxies built. */
        size_t n = xff->value.n + 2 + strlen(ps->hc->peer_ip);
        char *v = arena_alloc(&s->arena, n + 1);
        if (v == NULL)
            return -1;
        snprintf(v, n + 1, "%.*s, %s", (int)xff->value.n, xff->value.p,
                 ps->hc->peer_ip);
        if (http_fields_set(&q->fields, &s->arena, "x-forwarded-for",
                            (struct slice){v, n}) < 0)
            return -1;
    } else if (http_fields_add_ref(
                   &q->fields, &s->arena, SLICE_LIT("x-forwarded-for"),
                   arena_slice(&s->arena, slice_of(ps->hc->peer_ip))) < 0) {
        return -1;
    }
    if (forward_client_cert(ps) < 0)
        return -1;
    /* X-Forwarded-Proto from a client is kept only behind trusted proxies. */
    if (ps->l->conf->xff_trusted_hops == 0 ||
        http_fields_get(&q->fields, "x-forwarded-proto") == NULL)
        if (http_fields_set(&q->fields, &s->arena, "x-forwarded-proto",
                            q->scheme) < 0)
            return -1;
    if (http_fields_get(&q->fields, "x-request-id") == NULL) {
        a = pstream_rng(ps->l);
        b = pstream_rng(ps->l);
        /* A version 4 UUID from the worker's generator, written by hand:
         * snprintf cost more than the rest of the request's headers. */
        char *p = id;
        p = units_fmt_hex(p, a >> 32, 8);
        *p++ = '-';
        p = units_fmt_hex(p, a >> 16, 4);
        *p++ = '-';
        *p++ = '4';
        p = units_fmt_hex(p, a, 3);
        *p++ = '-';
        p = units_fmt_hex(p, ((b >> 48) & 0x3fff) | 0x8000, 4);
        *p++ = '-';
        p = units_fmt_hex(p, b, 12);
        if (http_fields_add_ref(
                &q->fields, &s->arena, SLICE_LIT("x-request-id"),
                arena_slice(&s->arena, (struct slice){id, (size_t)(p - id)})) <
            0)
            return -1;
    }
    return 0;
}

/* grpc-timeout: up to 8 digits and a unit (H, M, S, m, u, n). 0 when
 * absent or malformed; at least 1 ms. */
uint64_t pstream_grpc_timeout_ms(const struct http_fields *f)
{
    const struct http_field *t = http_fields_get(f, "grpc-timeout");
    uint64_t v = 0;
    size_t i;

    if (t == NULL || t->value.n < 2 || t->value.n > 9)
        return 0;
    for (i = 0; i + 1 < t->value.n; i++) {
        char c = t->value.p[i];
        if (c < '0' || c > '9')
            return 0;
        v = v * 10 + (uint64_t)(c - '0');
    }
    switch (t->value.p[i]) {
    case 'H':
        v *= 3600000;
        break;
    case 'M':
        v *= 60000;
        break;
    case 'S':
        v *= 1000;
        break;
    case 'm':
        break;
    case 'u':
        v /= 1000;
        break;
    case 'n':
        v /= 1000000;
        break;
    default:
        return 0;
    }
    return v > 0 ? v : 1;
}

/* A route's own answer (redirect, direct response): hstream_respond()
 * plus the CORS headers an allowed cross-origin request gets, as Envoy's
 * CORS filter adds them to local replies too. */
static void route_reply(struct pstream *ps, int status, const char *body,
                        const char *extra_name, const char *extra_value)
{
    struct hstream *s = ps->s;

    if (ps->cors_origin.n == 0) {
        hstream_respond(s, status, body, extra_name, extra_value);
        return;
    }
    if (hstream_reply_begin(s, status, body) < 0)
        return;
    if ((extra_name != NULL &&
         http_fields_add(&s->resp.fields, &s->arena, slice_of(extra_name),
                         slice_of(extra_value), 256) < 0) ||
        pstream_cors_headers(ps, 0) < 0) {
        hstream_respond(s, 503, "out of memory\n", NULL, NULL);
        return;
    }
    hstream_reply_end(s, body);
}

/*
 * pstream_route() decides a request with its listener's router (the
 * same for a Gateway's VirtualServices and a bootstrap listener's routes):
 * answers it (no route, redirect, direct response,
 * fault abort) and returns -1, or picks the cluster, rewrites the request
 * and returns 0.
 */
int pstream_route(struct pstream *ps)
{
    struct hstream *s = ps->s;
    const struct http_listener_conf *c = ps->l->conf;
    const struct route_action *a;

    if (c->https_redirect) {
        /* An HTTP server with httpsRedirect answers everything with the
         * https address of the same resource. */
        size_t n = 8 + s->req.authority.n + s->req.path.n + 1;
        char *loc = arena_alloc(&s->arena, n);
        if (loc != NULL) {
            snprintf(loc, n, "https://%.*s%.*s", (int)s->req.authority.n,
                     s->req.authority.p, (int)s->req.path.n, s->req.path.p);
            hstream_respond(s, 301, NULL, "location", loc);
        }
        pstream_up_finished(ps);
        return -1;
    }
    a = router_match(ps->wr->r->router, &s->req, c->port, pstream_rng(ps->l),
                     &s->arena, &ps->rr);
    if (a == NULL) {
        pstream_local_reply(ps, 404, HFLAG_NR, "no route\n");
        pstream_up_finished(ps);
        return -1;
    }
    ps->action = a;
    if (cors_request(ps)) {
        pstream_up_finished(ps);
        return -1;
    }
    if (a->kind == ROUTE_REDIRECT) {
        const char *loc = router_redirect_location(&ps->rr, &s->req, &s->arena);
        route_reply(ps, a->redirect.code ? a->redirect.code : 301, NULL,
                    loc ? "location" : NULL, loc);
        pstream_up_finished(ps);
        return -1;
    }
    if (a->kind == ROUTE_DIRECT) {
        const char *body =
            a->direct.body.n > 0
                ? arena_dup(&s->arena, a->direct.body.p, a->direct.body.n)
                : NULL;
        route_reply(ps, a->direct.status, body, NULL, NULL);
        pstream_up_finished(ps);
        return -1;
    }
    if (ps->rr.abort_status > 0) {
        /* Envoy marks injected faults FI. */
        pstream_local_reply(ps, ps->rr.abort_status, HFLAG_FI,
                            "fault filter abort\n");
        pstream_up_finished(ps);
        return -1;
    }
    if (ps->rr.dest < 0 || a->dests[ps->rr.dest].cluster < 0) {
        pstream_local_reply(ps, 503, HFLAG_UH, "no healthy upstream\n");
        pstream_up_finished(ps);
        return -1;
    }
    ps->cluster = a->dests[ps->rr.dest].cluster;
    ps->timeout_ms = a->timeout_ms;
    s->req.path = router_rewrite_path(&ps->rr, &s->req, &s->arena);
    if (a->rewrite.authority.n > 0)
        s->req.authority = a->rewrite.authority;
    if (s->req.path.p == NULL ||
        router_apply_headers(&ps->rr, 0, &s->req.fields, &s->arena) < 0) {
        pstream_local_reply(ps, 503, 0, "out of memory\n");
        pstream_up_finished(ps);
        return -1;
    }
    return 0;
}

/* The address of an X-Forwarded-For entry (a bare IPv4 or IPv6 address);
 * -1 for anything else. */
static int addr_from_ip(const char *ip, struct sockaddr_storage *ss)
{
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof(*ss));
    if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        return 0;
    }
    return -1;
}

int pstream_geoip(struct pstream *ps)
{
    const struct http_listener_conf *c = ps->l->conf;
    struct hstream *s = ps->s;
    struct http_conn *hc = ps->hc;
    const char *client = ps->client;
    struct sockaddr_storage remote;
    struct geo_result *r;

    geoip_count_request(c->geoip, ps->l->worker);
    if (client != NULL && addr_from_ip(client, &remote) == 0) {
        r = arena_alloc(&s->arena, sizeof(*r));
        if (r == NULL)
            return -1;
        geoip_lookup(c->geoip, ps->l->worker, (struct sockaddr *)&remote, r);
    } else {
        /* The peer: one lookup per connection, again only after a
         * database was swapped. */
        if (hc->geo == NULL) {
            hc->geo = malloc(sizeof(*hc->geo));
            if (hc->geo == NULL)
                return -1;
            hc->geo_gen = geoip_gen(c->geoip) - 1;
        }
        if (hc->geo_gen != geoip_gen(c->geoip))
            hc->geo_gen =
                geoip_lookup(c->geoip, ps->l->worker, &hc->peer.sa, hc->geo);
        r = hc->geo;
    }
    ps->geo = r;
    for (int i = 0; i < GEOIP_NFIELDS; i++) {
        const char *h = c->geo_headers[i];
        if (h == NULL)
            continue;
        /* Envoy's rule: a configured header is the gateway's, whatever
         * the client sent. */
        /* A database is data from outside: a value that is no valid
         * field value (a CR or LF would split the head, and the upstream
         * codec refuse it: 502) is left out, as a value not found is. */
        if (!(r->found & (1u << i)) ||
            !http_field_value_valid(slice_of(r->v[i])))
            http_fields_remove(&s->req.fields, h);
        else if (http_fields_set(&s->req.fields, &s->arena, h,
                                 slice_of(r->v[i])) < 0)
            return -1;
    }
    return 0;
}

/* The connection's Gateway server, picked by SNI, serves the request's
 * host (see pipeline-int.h). */
int pstream_misdirected(struct pstream *ps)
{
    const struct slice a = ps->s->req.authority;

    /* No authority at all (HTTP/1.0): the router decides. */
    if (a.n == 0 || tls_conn_serves_host(&ps->hc->conn, a.p, a.n))
        return 0;
    ps->details = "misdirected_request";
    pstream_local_reply(ps, 421, 0, "misdirected request\n");
    pstream_up_finished(ps);
    return 1;
}

/*
 * pstream_authorize() applies the AuthorizationPolicies of the stream's routes
 * before routing, as Envoy's RBAC filter runs before the router: a denied
 * request is answered 403 and logged RBAC_ACCESS_DENIED with the policy
 * that decided. Returns 0 when the request may go on.
 */
int pstream_authorize(struct pstream *ps)
{
    struct hstream *s = ps->s;
    const char *client = ps->client;
    struct sockaddr_storage remote;
    struct authz_request r;
    struct authz_decision d;
    char principal[512];
    size_t n;
    char *why;

    memset(&r, 0, sizeof(r));
    /* source.principal: the verified client certificate's SPIFFE ID
     * without its scheme, as Istio writes principals. */
    if (tls_conn_peer_uri_san(&ps->hc->conn, principal, sizeof(principal)) >
            strlen("spiffe://") &&
        strncmp(principal, "spiffe://", 9) == 0)
        r.principal = slice_of(principal + 9);
    /* ipBlocks (Envoy's direct_remote_ip) is the socket's peer;
     * remoteIpBlocks (remote_ip) the client that X-Forwarded-For behind
     * trusted proxies, or a PROXY header, named. */
    r.peer = ps->hc->direct != NULL ? (const struct sockaddr *)ps->hc->direct
                                    : (const struct sockaddr *)&ps->hc->peer;
    if (client != NULL && addr_from_ip(client, &remote) == 0)
        r.remote = (const struct sockaddr *)&remote;
    else if (ps->hc->direct != NULL)
        r.remote = (const struct sockaddr *)&ps->hc->peer;
    r.host = s->req.authority;
    r.method = s->req.method;
    r.path = s->req.path;
    r.port = ps->l->conf->port;
    r.sni = slice_of(tls_conn_sni(&ps->hc->conn));
    r.headers = &s->req.fields;
    r.jwt = ps->jwt;
    r.geo = ps->geo;
    authz_check(ps->wr->r->authz, &r, &d);
    if (d.allowed)
        return 0;
    n = strlen("RBAC_ACCESS_DENIED[]") + (d.policy ? strlen(d.policy) : 4) + 1;
    why = arena_alloc(&s->arena, n);
    if (why != NULL)
        snprintf(why, n, "RBAC_ACCESS_DENIED[%s]",
                 d.policy ? d.policy : "none");
    ps->details = why;
    STAT_ADD(&http_shard(ps->l)->http, rq_rbac_denied, 1);
    pstream_local_reply(ps, 403, 0, "RBAC: access denied");
    pstream_up_finished(ps);
    return -1;
}

/* Envoy's response code details for a rejected token:
 * jwt_authn_access_denied{<status text with '_' for ' '>}. */
static const char *jwt_details(struct arena *a, const char *text)
{
    size_t n = strlen(text);
    char *d = arena_alloc(a, n + sizeof("jwt_authn_access_denied{}"));

    if (d == NULL)
        return NULL;
    snprintf(d, n + sizeof("jwt_authn_access_denied{}"),
             "jwt_authn_access_denied{%s}", text);
    for (char *p = d + strlen("jwt_authn_access_denied{"); *p != '}'; p++)
        if (*p == ' ')
            *p = '_';
    return d;
}

/* WWW-Authenticate as Envoy writes it: the realm is the request's URL
 * without its query; quotes and backslashes are left out so the value
 * stays one quoted string. */
static const char *www_authenticate(struct hstream *s)
{
    struct slice path = s->req.path;
    const char *q = memchr(path.p, '?', path.n);
    size_t n, k = 0;
    char *v;

    if (q != NULL)
        path.n = (size_t)(q - path.p);
    n = sizeof("Bearer realm=\"://\", error=\"invalid_token\"") +
        s->req.scheme.n + s->req.authority.n + path.n;
    v = arena_alloc(&s->arena, n);
    if (v == NULL)
        return NULL;
    snprintf(v, n, "Bearer realm=\"%.*s://%.*s%.*s", (int)s->req.scheme.n,
             s->req.scheme.p, (int)s->req.authority.n, s->req.authority.p,
             (int)path.n, path.p);
    for (size_t i = strlen("Bearer realm=\""); v[i] != '\0'; i++)
        if (v[i] != '"' && v[i] != '\\')
            v[strlen("Bearer realm=\"") + k++] = v[i];
    v[strlen("Bearer realm=\"") + k] = '\0';
    strncat(v, "\", error=\"invalid_token\"", n - strlen(v) - 1);
    return v;
}

int pstream_authenticate(struct pstream *ps)
{
    struct hstream *s = ps->s;
    struct jwt_result *res = arena_alloc(&s->arena, sizeof(*res));
    const char *provider = NULL, *text, *auth;
    enum jwt_status st;

    if (res == NULL) {
        pstream_local_reply(ps, 503, 0, "out of memory\n");
        pstream_up_finished(ps);
        return -1;
    }
    st = jwt_authn_request(ps->wr->r->jwt, &s->req.fields, &s->req.path,
                           &s->arena, (int64_t)time(NULL), res, &provider);
    if (st == JWT_OK) {
        ps->jwt = res;
        return 0;
    }
    if (st == JWT_MISSING)
        return 0; /* Istio: authorization decides */
    text = jwt_status_text(st);
    ps->details = jwt_details(&s->arena, text);
    STAT_ADD(&http_shard(ps->l)->http, rq_jwt_denied, 1);
    auth = www_authenticate(s);
    /* Envoy: an audience not allowed is 403 (JwtAudienceNotAllowed),
     * every other failure 401. */
    pstream_local_reply_with(ps, st == JWT_AUDIENCE ? 403 : 401, 0, text,
                             auth ? "www-authenticate" : NULL, auth);
    pstream_up_finished(ps);
    return -1;
}
