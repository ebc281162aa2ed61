/*
 * The Kubernetes API's JSON (see kube_proto.h). Objects are parsed with
 * the core JSON reader and written again, so what the resource loader
 * gets is one self-contained document per object whatever the answer
 * around it looked like.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "control/kube_proto.h"
#include "core/arena.h"
#include "core/buf.h"
#include "core/json.h"

static int write_value(struct buf *b, const struct json *v, int top,
                       int in_meta);

static int write_members(struct buf *b, const struct json *o, int top,
                         int in_meta, int first)
{
    for (const struct json *m = o->child; m != NULL; m = m->next) {
        /* What the server keeps for itself. */
        if (top && (slice_eq_str(m->key, "status") ||
                    slice_eq_str(m->key, "apiVersion") ||
                    slice_eq_str(m->key, "kind")))
            continue;
        /* managedFields is bookkeeping; resourceVersion changes with
         * every write, status ones included (a Node's heartbeat), and is
         * kept apart (kube_object.rv): without it an object whose spec,
         * labels and annotations did not change writes the same JSON,
         * and the cache finds nothing to rebuild. */
        if (in_meta && (slice_eq_str(m->key, "managedFields") ||
                        slice_eq_str(m->key, "resourceVersion")))
            continue;
        if (!first && buf_puts(b, ",") < 0)
            return -1;
        first = 0;
        if (json_escape(b, m->key.p, m->key.n) < 0 || buf_puts(b, ":") < 0 ||
            write_value(b, m, 0, top && slice_eq_str(m->key, "metadata")) < 0)
            return -1;
    }
    return 0;
}

static int write_value(struct buf *b, const struct json *v, int top,
                       int in_meta)
{
    switch (v->type) {
    case JSON_NULL:
        return buf_puts(b, "null");
    case JSON_FALSE:
        return buf_puts(b, "false");
    case JSON_TRUE:
        return buf_puts(b, "true");
    case JSON_NUMBER:
        return buf_append(b, v->str.p, v->str.n);
    case JSON_STRING:
        return json_escape(b, v->str.p, v->str.n);
    case JSON_ARRAY:
        if (buf_puts(b, "[") < 0)
            return -1;
        for (const struct json *e = v->child; e != NULL; e = e->next)
            if ((e != v->child && buf_puts(b, ",") < 0) ||
                write_value(b, e, 0, 0) < 0)
                return -1;
        return buf_puts(b, "]");
    case JSON_OBJECT:
        if (buf_puts(b, "{") < 0 || write_members(b, v, top, in_meta, 1) < 0)
            return -1;
        return buf_puts(b, "}");
    }
    return -1;
}

/*
 * A Pod is held as the few fields the gateway reads (res-k8s.c), not as
 * the API sends it: a Pod's containers, volumes, env and status run to
 * kilobytes, and a cluster has many more Pods than Services. What is
 * kept per Pod is listed in docs/pods.md; anything else is never held.
 */
static const char *const pod_meta_keys[] = {"name", "namespace", "labels",
                                            NULL};
static const char *const pod_spec_keys[] = {
    "nodeName", "serviceAccountName", "serviceAccount", "hostNetwork", NULL};
static const char *const pod_status_keys[] = {"phase", "podIP", "podIPs", NULL};

static int picked(struct slice key, const char *const *keys)
{
    for (size_t i = 0; keys[i] != NULL; i++)
        if (slice_eq_str(key, keys[i]))
            return 1;
    return 0;
}

/* write_picked() writes ,"name":{...} with the members of o whose key is
 * one of keys (nothing when o is absent or not an object). */
static int write_picked(struct buf *b, const char *name, const struct json *o,
                        const char *const *keys)
{
    int first = 1;

    if (o == NULL || o->type != JSON_OBJECT)
        return 0;
    if (buf_printf(b, ",\"%s\":{", name) < 0)
        return -1;
    for (const struct json *m = o->child; m != NULL; m = m->next) {
        if (!picked(m->key, keys))
            continue;
        if ((!first && buf_puts(b, ",") < 0) ||
            json_escape(b, m->key.p, m->key.n) < 0 || buf_puts(b, ":") < 0 ||
            write_value(b, m, 0, 0) < 0)
            return -1;
        first = 0;
    }
    return buf_puts(b, "}");
}

static int write_pod(struct buf *b, const struct json *v)
{
    if (write_picked(b, "metadata", json_get(v, "metadata"), pod_meta_keys) <
            0 ||
        write_picked(b, "spec", json_get(v, "spec"), pod_spec_keys) < 0 ||
        write_picked(b, "status", json_get(v, "status"), pod_status_keys) < 0)
        return -1;
    return 0;
}

static const char *str_or_empty(struct arena *a, const struct json *v, int *bad)
{
    struct slice s;

    if (v == NULL)
        return "";
    if (v->type != JSON_STRING) {
        *bad = 1;
        return "";
    }
    s = json_string(v);
    return arena_dup(a, s.p, s.n);
}

/* read_object() fills o from the JSON object v. */
static int read_object(struct arena *a, const struct json *v,
                       const char *api_version, const char *kind,
                       struct kube_object *o, int need_name, const char **why)
{
    const struct json *meta = json_get(v, "metadata");
    struct buf b;
    int bad = 0;

    memset(o, 0, sizeof(*o));
    if (v == NULL || v->type != JSON_OBJECT) {
        *why = "the object is not a JSON object";
        return -1;
    }
    if (meta != NULL && meta->type != JSON_OBJECT) {
        *why = "metadata is not an object";
        return -1;
    }
    o->ns = str_or_empty(a, json_get(meta, "namespace"), &bad);
    o->name = str_or_empty(a, json_get(meta, "name"), &bad);
    o->rv = str_or_empty(a, json_get(meta, "resourceVersion"), &bad);
    if (bad || o->ns == NULL || o->name == NULL || o->rv == NULL) {
        *why = bad ? "metadata.namespace, name or resourceVersion is not a "
                     "string"
                   : "out of memory";
        return -1;
    }
    if (need_name && o->name[0] == '\0') {
        *why = "an object without metadata.name";
        return -1;
    }
    if (strchr(o->name, '/') != NULL || strchr(o->ns, '/') != NULL) {
        *why = "a '/' in metadata.name or namespace";
        return -1;
    }
    if (!need_name)
        return 0;
    /* Nested past what is read (a CRD's free-form field): this object is
     * left out by name, and the list or watch it came in goes on. */
    if (json_has_cut(v)) {
        o->bad = "nested more than " KUBE_DEPTH_TEXT " levels deep";
        o->json = "";
        return 0;
    }
    buf_init(&b, SIZE_MAX);
    if (buf_puts(&b, "{\"apiVersion\":") < 0 ||
        json_escape(&b, api_version, strlen(api_version)) < 0 ||
        buf_puts(&b, ",\"kind\":") < 0 || json_escape(&b, kind, strlen(kind)) ||
        (strcmp(kind, "Pod") == 0 ? write_pod(&b, v)
                                  : write_members(&b, v, 1, 0, 0)) < 0 ||
        buf_puts(&b, "}") < 0) {
        buf_dispose(&b);
        *why = "out of memory";
        return -1;
    }
    o->json_n = buf_len(&b);
    o->json = arena_dup(a, buf_ptr(&b), buf_len(&b));
    buf_dispose(&b);
    if (o->json == NULL) {
        *why = "out of memory";
        return -1;
    }
    return 0;
}

static void read_status(const struct json *v, struct kube_status *st)
{
    const struct json *c = json_get(v, "code");

    memset(st, 0, sizeof(*st));
    if (c != NULL && c->type == JSON_NUMBER && c->num >= 0 && c->num < 1000)
        st->code = (int64_t)c->num;
    st->reason = json_string(json_get(v, "reason"));
    st->message = json_string(json_get(v, "message"));
}

int kube_parse_status(struct arena *a, const char *p, size_t n,
                      struct kube_status *out, const char **why)
{
    const struct json *root =
        json_parse_max(a, p, n, KUBE_MAX_JSON_DEPTH, 0, JSON_ANY_SIZE, why);

    memset(out, 0, sizeof(*out));
    if (root == NULL)
        return -1;
    if (root->type != JSON_OBJECT) {
        *why = "a Status is a JSON object";
        return -1;
    }
    read_status(root, out);
    return 0;
}

int kube_parse_list(struct arena *a, const char *p, size_t n,
                    const char *api_version, const char *kind, size_t max_nodes,
                    struct kube_list *out, const char **why)
{
    const struct json *root =
        json_parse_max(a, p, n, KUBE_MAX_JSON_DEPTH, max_nodes,
                       JSON_ANY_SIZE | JSON_CUT_DEEP, why);
    const struct json *meta, *items;
    int bad = 0;
    size_t i = 0;

    memset(out, 0, sizeof(*out));
    if (root == NULL)
        return -1;
    meta = json_get(root, "metadata");
    items = json_get(root, "items");
    if (root->type != JSON_OBJECT || (meta && meta->type != JSON_OBJECT)) {
        *why = "a list is an object with metadata";
        return -1;
    }
    if (items != NULL && items->type != JSON_ARRAY &&
        items->type != JSON_NULL) {
        *why = "items is not an array";
        return -1;
    }
    out->rv = str_or_empty(a, json_get(meta, "resourceVersion"), &bad);
    out->cont = str_or_empty(a, json_get(meta, "continue"), &bad);
    if (bad || out->rv == NULL || out->cont == NULL) {
        *why = bad ? "metadata.resourceVersion or continue is not a string"
                   : "out of memory";
        return -1;
    }
    if (items == NULL || items->type == JSON_NULL || items->n == 0)
        return 0;
    out->items = arena_alloc(a, items->n * sizeof(*out->items));
    if (out->items == NULL) {
        *why = "out of memory";
        return -1;
    }
    for (const struct json *it = items->child; it != NULL; it = it->next)
        if (read_object(a, it, api_version, kind, &out->items[i++], 1, why) < 0)
            return -1;
    out->n = i;
    return 0;
}

int kube_parse_event(struct arena *a, const char *p, size_t n,
                     const char *api_version, const char *kind,
                     size_t max_nodes, struct kube_event *out, const char **why)
{
    const struct json *root =
        json_parse_max(a, p, n, KUBE_MAX_JSON_DEPTH, max_nodes,
                       JSON_ANY_SIZE | JSON_CUT_DEEP, why);
    static const char *const types[] = {"ADDED", "MODIFIED", "DELETED",
                                        "BOOKMARK", "ERROR"};
    const struct json *obj;
    struct slice t;
    int k;

    memset(out, 0, sizeof(*out));
    if (root == NULL)
        return -1;
    t = json_string(json_get(root, "type"));
    obj = json_get(root, "object");
    for (k = 0; k < 5; k++)
        if (slice_eq_str(t, types[k]))
            break;
    if (k == 5) {
        *why = "a watch event without a known type";
        return -1;
    }
    out->type = (enum kube_event_type)k;
    if (obj == NULL || obj->type != JSON_OBJECT) {
        *why = "a watch event without an object";
        return -1;
    }
    if (out->type == KUBE_ERROR) {
        read_status(obj, &out->status);
        return 0;
    }
    /* A bookmark carries only metadata.resourceVersion. */
    if (read_object(a, obj, api_version, kind, &out->obj,
                    out->type != KUBE_BOOKMARK, why) < 0)
        return -1;
    if (out->type == KUBE_BOOKMARK && out->obj.rv[0] == '\0') {
        *why = "a bookmark without metadata.resourceVersion";
        return -1;
    }
    return 0;
}

int kube_url_escape(struct buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";

    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
            c == '~') {
            if (buf_append(b, s, 1) < 0)
                return -1;
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            if (buf_append(b, e, 3) < 0)
                return -1;
        }
    }
    return 0;
}
