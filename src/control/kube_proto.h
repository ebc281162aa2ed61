#ifndef STRAIT_CONTROL_KUBE_PROTO_H
#define STRAIT_CONTROL_KUBE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "core/slice.h"

struct arena;
struct buf;

/*
 * The Kubernetes API's JSON as a list-then-watch client reads it: a list
 * answer ({"metadata":{"resourceVersion","continue"},"items":[...]}), one
 * line of a watch stream ({"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR",
 * "object":{...}}) and a Status (an error answer, or an ERROR event's
 * object: code 410, reason Expired, when the resourceVersion asked for is
 * older than the history the server keeps).
 *
 * resourceVersion is opaque: it is kept as the string given and only ever
 * sent back. Every decoder reads one whole JSON document into the
 * caller's arena (strings live as long as it does) and returns 0, or -1
 * with a static reason in *why; max_nodes bounds the work (0: the input
 * length alone bounds it).
 */

#define KUBE_MAX_JSON_DEPTH 64
#define KUBE_DEPTH_TEXT "64"

/* One object as strait keeps it: its names, and the object written again
 * as one JSON document with apiVersion and kind first (list items carry
 * neither), without metadata.managedFields and status (what the server
 * keeps for itself, often larger than the spec). A Pod is only its
 * name, namespace, labels, spec.nodeName, serviceAccountName,
 * hostNetwork and status.phase, podIP, podIPs (docs/pods.md). */
struct kube_object {
    const char *ns;   /* "" for a cluster-scoped object */
    const char *name; /* never "" (an object without one is an error);
                       * neither name nor ns has a '/' */
    const char *rv;   /* metadata.resourceVersion; "" when not given */
    const char *json; /* NUL-terminated; "" when bad */
    size_t json_n;
    /* Not NULL: why the object cannot be read (nested deeper than
     * KUBE_MAX_JSON_DEPTH); ns and name are set, json is "". The caller
     * leaves it out by name and goes on with the rest. */
    const char *bad;
};

struct kube_status {
    int64_t code;        /* 410 for Expired; 0 when not given */
    struct slice reason; /* "Expired", "Gone", "NotFound", ... */
    struct slice message;
};

enum kube_event_type {
    KUBE_ADDED,
    KUBE_MODIFIED,
    KUBE_DELETED,
    KUBE_BOOKMARK,
    KUBE_ERROR,
};

struct kube_event {
    enum kube_event_type type;
    struct kube_object obj;    /* ADDED, MODIFIED, DELETED; BOOKMARK: rv */
    struct kube_status status; /* ERROR */
};

struct kube_list {
    struct kube_object *items;
    size_t n;
    const char *rv;   /* the list's resourceVersion: watch from it */
    const char *cont; /* the continue token; "" on the last page */
};

/* api_version and kind are written into each object ("v1", "Service"). */
int kube_parse_list(struct arena *a, const char *p, size_t n,
                    const char *api_version, const char *kind, size_t max_nodes,
                    struct kube_list *out, const char **why);
int kube_parse_event(struct arena *a, const char *p, size_t n,
                     const char *api_version, const char *kind,
                     size_t max_nodes, struct kube_event *out,
                     const char **why);
/* kube_parse_status() reads an error answer's body (a Status). */
int kube_parse_status(struct arena *a, const char *p, size_t n,
                      struct kube_status *out, const char **why);

/* kube_url_escape() appends s percent-encoded for a query value (every
 * byte but unreserved ones). 0, or -1 when b's cap is reached. */
int kube_url_escape(struct buf *b, const char *s);

#endif
