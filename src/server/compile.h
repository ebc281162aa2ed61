#ifndef STRAIT_SERVER_COMPILE_H
#define STRAIT_SERVER_COMPILE_H

#include "config/bootstrap.h"

struct cluster;
struct listener_stats;
struct plistener_ops;

/*
 * Compiling the bootstrap into what workers run: a listener's conf (for
 * its plistener_ops) and the clusters HTTP routes send to. Runs on the
 * main thread; the results are immutable and reference-counted.
 */
struct compiled_listener {
    const struct plistener_ops *ops;
    void *conf;
    void (*unref)(void *conf);
};

/* compile_clusters() builds one cluster per bootstrap cluster, in order;
 * NULL with *err on failure. Free with compile_clusters_free(). */
struct cluster **compile_clusters(const struct bootstrap *bs, int nworkers,
                                  char **err);
void compile_clusters_free(struct cluster **cl, size_t n);

/* compile_listener() builds bl's conf; -1 with an allocated *err (e.g. a
 * certificate that does not load). */
int compile_listener(const struct bootstrap *bs,
                     const struct bootstrap_listener *bl,
                     struct cluster **clusters, struct listener_stats *stats,
                     struct compiled_listener *out, char **err);

struct gw_listener;
struct resource_set;

/* compile_gateway() builds the HTTP proxy of a Gateway listener: its
 * VirtualServices' routes and the clusters they send to. */
int compile_gateway(const struct bootstrap *bs, const struct resource_set *set,
                    const struct gw_listener *g, struct listener_stats *stats,
                    int nworkers, struct compiled_listener *out, char **err);

/* compile_tls_check() reloads changed certificate files of conf (an HTTP
 * listener's) ; see tls_holder_check(). 0 for other kinds. */
int compile_tls_check(const struct compiled_listener *cl, char **err);

#endif
