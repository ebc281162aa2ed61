/*
 * The Kubernetes source's values in /stats and /stats/prometheus: one
 * sample per watched kind of each family, told apart by the kind label.
 */
#include "config.h"

#include <inttypes.h>

#include "admin/admin.h"
#include "core/buf.h"

void admin_kube_stats(const struct admin_status *st, struct buf *b)
{
    if (!st->has_kube)
        return;
    buf_printf(b, "kubernetes.ready: %d\n", st->kube_ready);
    for (size_t i = 0; i < st->kube_nkinds; i++) {
        const struct admin_kube_kind *k = &st->kube_kinds[i];
        buf_printf(b, "kubernetes.%s.synced: %d\n", k->kind, k->synced);
        buf_printf(b, "kubernetes.%s.missing: %d\n", k->kind, k->missing);
        buf_printf(b, "kubernetes.%s.objects: %zu\n", k->kind, k->objects);
        buf_printf(b, "kubernetes.%s.left_out: %zu\n", k->kind, k->bad);
        buf_printf(b, "kubernetes.%s.watches_opened: %" PRIu64 "\n", k->kind,
                   k->watches_opened);
        buf_printf(b, "kubernetes.%s.relists: %" PRIu64 "\n", k->kind,
                   k->relists);
        buf_printf(b, "kubernetes.%s.expired: %" PRIu64 "\n", k->kind,
                   k->expired);
        buf_printf(b, "kubernetes.%s.errors: %" PRIu64 "\n", k->kind,
                   k->errors);
        buf_printf(b, "kubernetes.%s.events: %" PRIu64 "\n", k->kind,
                   k->events);
    }
}

#define KF(name, type, help, expr)                                             \
    do {                                                                       \
        buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type); \
        for (size_t i = 0; i < st->kube_nkinds; i++) {                         \
            const struct admin_kube_kind *k = &st->kube_kinds[i];              \
            buf_printf(b, "%s{kind=\"%s\"} %" PRIu64 "\n", name, k->kind,      \
                       (uint64_t)(expr));                                      \
        }                                                                      \
    } while (0)

void admin_kube_prometheus(const struct admin_status *st, struct buf *b)
{
    if (!st->has_kube)
        return;
    buf_printf(b,
               "# HELP strait_kubernetes_ready 1 once every watched kind was "
               "listed and applied (latched).\n# TYPE strait_kubernetes_ready "
               "gauge\nstrait_kubernetes_ready %d\n",
               st->kube_ready);
    KF("strait_kubernetes_synced", "gauge",
       "1 once every watch of the kind has listed.", k->synced);
    KF("strait_kubernetes_missing", "gauge",
       "1 while the API answers 404 for the kind (CRD not installed).",
       k->missing);
    KF("strait_kubernetes_objects", "gauge", "Objects of the kind held.",
       k->objects);
    KF("strait_kubernetes_left_out", "gauge",
       "Objects of the kind held but left out: they do not load.", k->bad);
    KF("strait_kubernetes_watches_opened_total", "counter",
       "Watch requests made for the kind.", k->watches_opened);
    KF("strait_kubernetes_relists_total", "counter",
       "Lists of the kind after the first (410 Expired, a missing CRD).",
       k->relists);
    KF("strait_kubernetes_expired_total", "counter",
       "410 Expired received for the kind.", k->expired);
    KF("strait_kubernetes_errors_total", "counter",
       "Failed lists and watches, and objects that do not load.", k->errors);
    KF("strait_kubernetes_events_total", "counter",
       "Watch events applied for the kind.", k->events);
}
