/*
 * The static label runs of Istio's standard metrics: the node's (source)
 * and each cluster's (destination), with Istio's value rules at a
 * gateway (istio/proxy istio_stats: reporter "source"; canonical names
 * from Istio's canonical-name/-revision labels, then the Kubernetes
 * recommended ones, then app/version; "unknown" where nothing says;
 * connection_security_policy "unknown" on the client side).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "compile/compile.h"
#include "compile/metrics.h"
#include "config/bootstrap.h"
#include "core/series.h"
#include "proxy/http_listener.h"
#include "proxy/istio_metrics.h"
#include "proxy/l4_listener.h"

static const char *label_of(const struct conf_strmap *m, const char *key)
{
    for (size_t i = 0; m != NULL && i < m->n; i++)
        if (strcmp(m->v[i].key, key) == 0)
            return m->v[i].val;
    return NULL;
}

static void put(struct buf *b, const char *name, const char *value)
{
    char esc[1024];

    if (value == NULL || value[0] == '\0')
        value = "unknown";
    series_escape(esc, sizeof(esc), value, strlen(value));
    buf_printf(b, "%s%s=\"%s\"", buf_len(b) > 0 ? "," : "", name, esc);
}

/* Istio's canonical service and revision of a workload (pkg/model
 * labels.go: the canonical labels, then the Kubernetes recommended ones,
 * then app and version; the workload name, and "latest"). */
static const char *canonical_name(const struct conf_strmap *l,
                                  const char *workload)
{
    const char *v = label_of(l, "service.istio.io/canonical-name");

    if (v == NULL)
        v = label_of(l, "app.kubernetes.io/name");
    if (v == NULL)
        v = label_of(l, "app");
    return v != NULL ? v : workload;
}

static const char *canonical_revision(const struct conf_strmap *l)
{
    const char *v = label_of(l, "service.istio.io/canonical-revision");

    if (v == NULL)
        v = label_of(l, "app.kubernetes.io/version");
    if (v == NULL)
        v = label_of(l, "version");
    return v != NULL ? v : "latest";
}

struct series_labels *metrics_source_labels(const struct bootstrap *bs)
{
    const struct bootstrap_node *n = &bs->node;
    const struct conf_strmap *l = &n->labels;
    const char *workload = label_of(l, "service.istio.io/workload-name");
    char principal[600] = "";
    struct series_labels *out;
    struct buf b;

    if (workload == NULL)
        workload = n->name;
    if (bs->ca.enabled || bs->ca.join.address[0] != '\0')
        snprintf(principal, sizeof(principal), "spiffe://%s/ns/%s/sa/%s",
                 bs->trust_domain, n->ns, n->service_account);
    buf_init(&b, 64 * 1024);
    put(&b, "reporter", "source");
    put(&b, "source_workload", workload);
    put(&b, "source_canonical_service", canonical_name(l, workload));
    put(&b, "source_canonical_revision", canonical_revision(l));
    put(&b, "source_workload_namespace", n->ns);
    put(&b, "source_principal", principal);
    put(&b, "source_app", label_of(l, "app"));
    put(&b, "source_version", label_of(l, "version"));
    put(&b, "source_cluster", label_of(l, "topology.istio.io/cluster"));
    /* Set only by a server-side reporter: a gateway's is "unknown". */
    put(&b, "connection_security_policy", "unknown");
    for (size_t i = 0; i < bs->metrics.extra_labels.n; i++)
        put(&b, bs->metrics.extra_labels.v[i].key,
            bs->metrics.extra_labels.v[i].val);
    out = series_labels_new(buf_ptr(&b), buf_len(&b), 0);
    buf_dispose(&b);
    return out;
}

void metrics_dest_text(struct buf *b, const struct metrics_dest *d)
{
    const char *wl = d->workload;

    put(b, "destination_workload", wl);
    put(b, "destination_workload_namespace", d->workload_ns);
    put(b, "destination_principal", d->principal);
    put(b, "destination_app", label_of(d->labels, "app"));
    put(b, "destination_version", label_of(d->labels, "version"));
    put(b, "destination_canonical_service",
        d->labels != NULL || wl != NULL ? canonical_name(d->labels, wl) : NULL);
    put(b, "destination_canonical_revision",
        d->labels != NULL || wl != NULL ? canonical_revision(d->labels) : NULL);
    put(b, "destination_cluster", d->cluster);
    if (d->service != NULL) {
        put(b, "destination_service", d->service);
        put(b, "destination_service_name", d->service_name);
        put(b, "destination_service_namespace", d->service_ns);
    }
}

struct series_labels *metrics_dest_labels(const struct metrics_dest *d)
{
    struct series_labels *out;
    struct buf b;

    buf_init(&b, 64 * 1024);
    metrics_dest_text(&b, d);
    out = series_labels_new(buf_ptr(&b), buf_len(&b),
                            d->service == NULL ? ISTIO_HOST_FALLBACK : 0);
    buf_dispose(&b);
    return out;
}

static void attach_http(struct http_listener_conf *c, struct series_table *t,
                        struct series_labels *src, struct series_labels *nodst)
{
    c->metrics = t;
    series_labels_unref(c->metrics_src);
    series_labels_unref(c->metrics_nodst);
    c->metrics_src = series_labels_ref(src);
    c->metrics_nodst = series_labels_ref(nodst);
}

void metrics_attach(struct compiled_listener *cl, struct series_table *t,
                    struct series_labels *src)
{
    const struct metrics_dest none = {0};
    struct series_labels *nodst = t != NULL ? metrics_dest_labels(&none) : NULL;

    if (t == NULL || src == NULL || nodst == NULL) {
        t = NULL; /* off, or out of memory: nothing is recorded */
        src = NULL;
    }
    if (cl->ops->kind == PLISTENER_HTTP) {
        attach_http(cl->conf, t, src, nodst);
    } else {
        struct l4_listener_conf *c = cl->conf;
        series_labels_unref(c->metrics_src);
        c->metrics_src = series_labels_ref(src);
        c->relay.metrics = t;
        c->relay.metrics_src = c->metrics_src;
        if (c->http != NULL)
            attach_http(c->http, t, src, nodst);
    }
    series_labels_unref(nodst);
}
