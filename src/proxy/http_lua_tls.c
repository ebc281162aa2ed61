/*
 * LuaPolicy's on_tls_client_hello: on an HTTPS listener with policies,
 * every ClientHello is shown to the policies that apply to its SNI (as
 * hosts match the authority of a request; VirtualService targets never
 * match, no route is known yet) before the handshake goes on, and
 * c:reject() aborts it. The TLS layer knows nothing of this: it calls
 * the hook it was given (tls_conn_on_hello).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/geoip.h"
#include "core/slice.h"
#include "policy/lua_vm.h"
#include "proxy/pipeline-int.h"
#include "tls/tls.h"

/* The peer's GeoIP result, one lookup per connection (the request path
 * uses the same one, pstream_geoip); NULL without geoip. */
static const struct geo_result *peer_geo(struct http_conn *hc)
{
    struct geoip *g = hc->l->conf->geoip;

    if (g == NULL)
        return NULL;
    if (hc->geo == NULL) {
        hc->geo = malloc(sizeof(*hc->geo));
        if (hc->geo == NULL)
            return NULL;
        hc->geo_gen = geoip_gen(g) - 1;
    }
    if (hc->geo_gen != geoip_gen(g))
        hc->geo_gen = geoip_lookup(g, hc->l->worker, &hc->peer.sa, hc->geo);
    return hc->geo;
}

static int on_hello(void *arg, struct conn *c, const struct tls_hello *h)
{
    struct http_conn *hc = c->arg;
    struct http_listener *l = hc->l;
    struct wroutes *w = http_listener_pin(l);
    struct luavm *vm;
    struct luareq rq;
    struct luahello ch;
    struct slice sni;
    uint32_t mask;
    int refuse = 0;

    (void)arg;
    if (w->r->lua == NULL)
        goto out;
    /* No SNI: an empty name, which only policies without hosts match.
     * Matched on the compiled policies: no state unless one applies. */
    sni = (struct slice){h->sni != NULL ? h->sni : "", h->sni_len};
    mask = luaprogs_match(w->r->lua, sni, SLICE_NULL, SLICE_NULL);
    if (mask == 0 || (vm = http_lua_vm(l, w)) == NULL ||
        !luavm_has_hook(vm, mask, LUAVM_ON_TLS_CLIENT_HELLO))
        goto out;
    memset(&rq, 0, sizeof(rq));
    rq.vm = vm;
    rq.mask = mask;
    rq.ctx_ref = rq.co_ref = -2; /* LUA_NOREF */
    rq.upstream = -1;
    rq.peer_ip = hc->peer_ip;
    rq.geo = peer_geo(hc);
    ch.sni = sni;
    ch.alpn = h->alpn;
    ch.alpn_len = h->alpn_len;
    rq.hello = &ch;
    if (luavm_on_tls_client_hello(&rq) == LUAVM_RESPONDED) {
        hc->hello_rejected = 1;
        refuse = 1;
    }
    luavm_request_end(&rq);
out:
    http_listener_unpin(l, w);
    return refuse ? -1 : 0;
}

void http_lua_tls_start(struct http_conn *hc)
{
    static const struct tls_hello_hook hook = {on_hello, NULL};

    /* Whether a policy applies is asked at the ClientHello, of the routes
     * current then: a snapshot may bring the first policy at any time. */
    tls_conn_on_hello(&hc->conn, &hook);
}
