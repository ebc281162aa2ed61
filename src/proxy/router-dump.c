/*
 * The compiled routes as JSON, for /config_dump: what the router will do
 * with a request, virtual host by virtual host and rule by rule, with the
 * conditions in the order they are tested and each destination's cluster.
 */
#include "config.h"

#include <inttypes.h>

#include "core/buf.h"
#include "core/json.h"
#include "proxy/router-int.h"

static const char *const what_names[] = {
    [RT_PORT] = "port",           [RT_METHOD] = "method",
    [RT_SCHEME] = "scheme",       [RT_URI] = "uri",
    [RT_AUTHORITY] = "authority", [RT_HEADER] = "header",
    [RT_QUERY] = "queryParam",
};

static const char *const match_names[] = {
    [ROUTE_MATCH_EXACT] = "exact",
    [ROUTE_MATCH_PREFIX] = "prefix",
    [ROUTE_MATCH_REGEX] = "regex",
    [ROUTE_MATCH_PRESENT] = "present",
};

static void slice_json(struct buf *b, struct slice s)
{
    json_escape(b, s.p != NULL ? s.p : "", s.n);
}

static void cond_json(struct buf *b, const struct rt_cond *c)
{
    buf_printf(b, "{\"what\":\"%s\"", what_names[c->what]);
    if (c->what == RT_HEADER || c->what == RT_QUERY) {
        buf_puts(b, ",\"name\":");
        slice_json(b, c->name);
    }
    if (c->what == RT_PORT) {
        buf_printf(b, ",\"port\":%" PRIu32 "}", c->port);
        return;
    }
    buf_printf(b, ",\"%s\":", match_names[c->m.kind]);
    if (c->m.kind == ROUTE_MATCH_PRESENT)
        buf_puts(b, "true");
    else
        slice_json(b, c->m.text);
    if (c->m.nocase)
        buf_puts(b, ",\"ignoreCase\":true");
    if (c->negate)
        buf_puts(b, ",\"negate\":true");
    buf_puts(b, "}");
}

static void action_json(struct buf *b, const struct route_action *a,
                        router_cluster_name_fn name, void *ctx)
{
    static const char *const kinds[] = {"route", "redirect", "directResponse"};

    buf_puts(b, "{\"virtualService\":");
    json_str(b, a->vs);
    buf_printf(b, ",\"rule\":%zu,\"name\":", a->rule);
    if (a->name != NULL)
        json_str(b, a->name);
    else
        buf_puts(b, "null");
    buf_printf(b, ",\"kind\":\"%s\"", kinds[a->kind]);
    if (a->kind == ROUTE_FORWARD) {
        buf_puts(b, ",\"destinations\":[");
        for (size_t i = 0; i < a->ndests; i++) {
            const struct route_destination *d = &a->dests[i];
            const char *cn = d->cluster >= 0 ? name(ctx, d->cluster) : NULL;
            buf_puts(b, i ? ",{\"host\":" : "{\"host\":");
            json_str(b, d->host);
            buf_puts(b, ",\"subset\":");
            if (d->subset != NULL)
                json_str(b, d->subset);
            else
                buf_puts(b, "null");
            buf_printf(
                b, ",\"port\":%" PRIu32 ",\"weight\":%" PRIu32 ",\"cluster\":",
                d->port, d->weight);
            if (cn != NULL)
                json_str(b, cn);
            else
                buf_puts(b, "null");
            buf_puts(b, "}");
        }
        buf_puts(b, "]");
    } else if (a->kind == ROUTE_DIRECT) {
        buf_printf(b, ",\"status\":%d", a->direct.status);
    } else {
        buf_printf(b, ",\"code\":%d",
                   a->redirect.code ? a->redirect.code : 301);
    }
    if (a->timeout_ms > 0)
        buf_printf(b, ",\"timeoutMs\":%" PRIu64, a->timeout_ms);
    if (a->retry.attempts > 0)
        buf_printf(b, ",\"retryAttempts\":%" PRIu32, a->retry.attempts);
    if (a->fault.delay_ms > 0 || a->fault.abort_status > 0)
        buf_printf(b, ",\"fault\":{\"delayMs\":%" PRIu64 ",\"abortStatus\":%d}",
                   a->fault.delay_ms, a->fault.abort_status);
    if (a->mirror.enabled) {
        buf_puts(b, ",\"mirror\":");
        json_str(b, a->mirror.host);
    }
    buf_puts(b, "}");
}

void router_to_json(const struct router *r, struct buf *b,
                    router_cluster_name_fn name, void *ctx)
{
    buf_puts(b, "{\"virtualHosts\":[");
    for (size_t v = 0; v < r->nvhosts; v++) {
        const struct rt_vhost *vh = &r->vhosts[v];
        buf_puts(b, v ? ",{\"domain\":" : "{\"domain\":");
        json_str(b, vh->domain);
        buf_puts(b, ",\"rules\":[");
        for (size_t i = 0; i < vh->nrules; i++) {
            const struct rt_rule *ru = &vh->rules[i];
            buf_puts(b, i ? ",{\"match\":[" : "{\"match\":[");
            for (size_t k = 0; k < ru->nblocks; k++) {
                const struct rt_block *bl = &ru->blocks[k];
                buf_puts(b, k ? ",[" : "[");
                for (size_t c = 0; c < bl->nconds; c++) {
                    if (c > 0)
                        buf_puts(b, ",");
                    cond_json(b, &bl->conds[c]);
                }
                buf_puts(b, "]");
            }
            buf_puts(b, "],\"action\":");
            action_json(b, ru->action, name, ctx);
            buf_puts(b, "}");
        }
        buf_puts(b, "]}");
    }
    buf_puts(b, "]}");
}
