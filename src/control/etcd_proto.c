/*
 * etcd's JSON gateway, both directions (see etcd_proto.h). The readers
 * use core/json's bounded parser and then walk only the fields strait
 * needs, with proto3's rules for missing fields.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/etcd_proto.h"
#include "core/arena.h"
#include "core/buf.h"
#include "core/json.h"

static const char b64chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int etcd_b64(struct buf *b, struct slice s)
{
    const unsigned char *p = (const unsigned char *)s.p;
    size_t i = 0;
    char q[4];

    for (; i + 3 <= s.n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        q[0] = b64chars[v >> 18];
        q[1] = b64chars[(v >> 12) & 63];
        q[2] = b64chars[(v >> 6) & 63];
        q[3] = b64chars[v & 63];
        if (buf_append(b, q, 4) < 0)
            return -1;
    }
    if (i < s.n) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < s.n)
            v |= (uint32_t)p[i + 1] << 8;
        q[0] = b64chars[v >> 18];
        q[1] = b64chars[(v >> 12) & 63];
        q[2] = i + 1 < s.n ? b64chars[(v >> 6) & 63] : '=';
        q[3] = '=';
        if (buf_append(b, q, 4) < 0)
            return -1;
    }
    return 0;
}

static int b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    /* Go's encoding/json writes the standard alphabet; the URL-safe one
     * is taken too, as protobuf's JSON readers do. */
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* Decodes base64 (padding optional) into the arena, NUL after it. */
static int b64_decode(struct arena *a, struct slice in, struct slice *out,
                      const char **why)
{
    size_t n = in.n;
    char *o;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;

    while (n > 0 && in.p[n - 1] == '=')
        n--;
    if (in.n - n > 2 || n % 4 == 1) {
        *why = "bad base64";
        return -1;
    }
    o = arena_alloc(a, n * 3 / 4 + 1);
    if (o == NULL) {
        *why = "out of memory";
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        int v = b64val((unsigned char)in.p[i]);
        if (v < 0) {
            *why = "bad base64";
            return -1;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    o[k] = '\0';
    out->p = o;
    out->n = k;
    return 0;
}

/* proto3 int64: a string of digits (what etcd writes) or a number; a
 * missing field is 0. */
static int get_int(const struct json *o, const char *name, int64_t *out,
                   const char **why)
{
    const struct json *v = json_get(o, name);
    const char *p;
    size_t n;
    int neg = 0;
    uint64_t acc = 0;

    *out = 0;
    if (v == NULL || v->type == JSON_NULL)
        return 0;
    if (v->type != JSON_STRING && v->type != JSON_NUMBER) {
        *why = "an int64 field is neither a string nor a number";
        return -1;
    }
    p = v->str.p;
    n = v->str.n;
    if (n > 0 && p[0] == '-') {
        neg = 1;
        p++;
        n--;
    }
    if (n == 0 || n > 19) {
        *why = "bad int64";
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') {
            *why = "bad int64";
            return -1;
        }
        acc = acc * 10 + (uint64_t)(p[i] - '0');
    }
    if (acc > (uint64_t)INT64_MAX) {
        *why = "int64 out of range";
        return -1;
    }
    *out = neg ? -(int64_t)acc : (int64_t)acc;
    return 0;
}

/* uint64 ids (member_id, cluster_id): digits only. */
static int get_uint(const struct json *o, const char *name, uint64_t *out,
                    const char **why)
{
    const struct json *v = json_get(o, name);
    uint64_t acc = 0;

    *out = 0;
    if (v == NULL || v->type == JSON_NULL)
        return 0;
    if ((v->type != JSON_STRING && v->type != JSON_NUMBER) || v->str.n == 0 ||
        v->str.n > 20) {
        *why = "bad uint64";
        return -1;
    }
    for (size_t i = 0; i < v->str.n; i++) {
        unsigned d = (unsigned)(v->str.p[i] - '0');
        if (d > 9 || acc > (UINT64_MAX - d) / 10) {
            *why = "bad uint64";
            return -1;
        }
        acc = acc * 10 + d;
    }
    *out = acc;
    return 0;
}

static int get_bool(const struct json *o, const char *name, int *out,
                    const char **why)
{
    const struct json *v = json_get(o, name);

    *out = 0;
    if (v == NULL || v->type == JSON_NULL || v->type == JSON_FALSE)
        return 0;
    if (v->type != JSON_TRUE) {
        *why = "a bool field is not a bool";
        return -1;
    }
    *out = 1;
    return 0;
}

static int get_str(const struct json *o, const char *name, struct slice *out,
                   const char **why)
{
    const struct json *v = json_get(o, name);

    *out = SLICE_LIT("");
    if (v == NULL || v->type == JSON_NULL)
        return 0;
    if (v->type != JSON_STRING) {
        *why = "a string field is not a string";
        return -1;
    }
    *out = v->str;
    return 0;
}

static int get_bytes(struct arena *a, const struct json *o, const char *name,
                     struct slice *out, const char **why)
{
    struct slice s;

    if (get_str(o, name, &s, why) < 0)
        return -1;
    return b64_decode(a, s, out, why);
}

/* A message field: absent (NULL) or an object. */
static int get_obj(const struct json *o, const char *name,
                   const struct json **out, const char **why)
{
    const struct json *v = json_get(o, name);

    *out = NULL;
    if (v == NULL || v->type == JSON_NULL)
        return 0;
    if (v->type != JSON_OBJECT) {
        *why = "a message field is not an object";
        return -1;
    }
    *out = v;
    return 0;
}

static int get_arr(const struct json *o, const char *name,
                   const struct json **out, const char **why)
{
    const struct json *v = json_get(o, name);

    *out = NULL;
    if (v == NULL || v->type == JSON_NULL)
        return 0;
    if (v->type != JSON_ARRAY) {
        *why = "a repeated field is not an array";
        return -1;
    }
    *out = v;
    return 0;
}

static const struct json *parse_root(struct arena *a, const char *p, size_t n,
                                     const char **why)
{
    const struct json *root =
        json_parse_max(a, p, n, ETCD_MAX_JSON_DEPTH, 0, JSON_ANY_SIZE, why);

    if (root != NULL && root->type != JSON_OBJECT) {
        *why = "the answer is not a JSON object";
        return NULL;
    }
    return root;
}

static int header(const struct json *o, struct etcd_header *h, const char **why)
{
    const struct json *hd;

    memset(h, 0, sizeof(*h));
    if (get_obj(o, "header", &hd, why) < 0)
        return -1;
    if (hd == NULL)
        return 0;
    if (get_int(hd, "revision", &h->revision, why) < 0 ||
        get_uint(hd, "member_id", &h->member_id, why) < 0 ||
        get_uint(hd, "cluster_id", &h->cluster_id, why) < 0)
        return -1;
    return 0;
}

static int kv(struct arena *a, const struct json *o, struct etcd_kv *out,
              const char **why)
{
    memset(out, 0, sizeof(*out));
    if (o == NULL)
        return 0;
    if (o->type != JSON_OBJECT) {
        *why = "a key-value is not an object";
        return -1;
    }
    if (get_bytes(a, o, "key", &out->key, why) < 0 ||
        get_bytes(a, o, "value", &out->value, why) < 0 ||
        get_int(o, "create_revision", &out->create_revision, why) < 0 ||
        get_int(o, "mod_revision", &out->mod_revision, why) < 0 ||
        get_int(o, "version", &out->version, why) < 0)
        return -1;
    return 0;
}

int etcd_parse_range(struct arena *a, const char *p, size_t n,
                     struct etcd_range *out, const char **why)
{
    const struct json *root = parse_root(a, p, n, why), *kvs;
    size_t i = 0;

    memset(out, 0, sizeof(*out));
    if (root == NULL)
        return -1;
    if (header(root, &out->header, why) < 0 ||
        get_bool(root, "more", &out->more, why) < 0 ||
        get_int(root, "count", &out->count, why) < 0 ||
        get_arr(root, "kvs", &kvs, why) < 0)
        return -1;
    if (kvs == NULL || kvs->n == 0)
        return 0;
    out->kvs = arena_alloc(a, kvs->n * sizeof(*out->kvs));
    if (out->kvs == NULL) {
        *why = "out of memory";
        return -1;
    }
    for (const struct json *e = kvs->child; e != NULL; e = e->next, i++)
        if (kv(a, e, &out->kvs[i], why) < 0)
            return -1;
    out->n = i;
    return 0;
}

static int event(struct arena *a, const struct json *o, struct etcd_event *out,
                 const char **why)
{
    const struct json *t, *k;

    memset(out, 0, sizeof(*out));
    if (o->type != JSON_OBJECT) {
        *why = "an event is not an object";
        return -1;
    }
    /* proto3 JSON writes an enum by name; PUT (0) is the default and so
     * not written at all. A number is taken too. */
    t = json_get(o, "type");
    if (t == NULL || t->type == JSON_NULL) {
        out->type = ETCD_PUT;
    } else if (t->type == JSON_STRING && slice_eq_str(t->str, "PUT")) {
        out->type = ETCD_PUT;
    } else if (t->type == JSON_STRING && slice_eq_str(t->str, "DELETE")) {
        out->type = ETCD_DELETE;
    } else if (t->type == JSON_NUMBER && (t->num == 0 || t->num == 1)) {
        out->type = t->num == 0 ? ETCD_PUT : ETCD_DELETE;
    } else {
        *why = "unknown event type";
        return -1;
    }
    if (get_obj(o, "kv", &k, why) < 0)
        return -1;
    if (k == NULL) {
        *why = "an event without a key-value";
        return -1;
    }
    return kv(a, k, &out->kv, why);
}

int etcd_parse_watch(struct arena *a, const char *p, size_t n,
                     struct etcd_watch_msg *out, const char **why)
{
    const struct json *root = parse_root(a, p, n, why), *r, *evs, *e;
    size_t i = 0;

    memset(out, 0, sizeof(*out));
    if (root == NULL)
        return -1;
    e = json_get(root, "error");
    if (e != NULL) {
        out->is_error = 1;
        if (e->type == JSON_OBJECT) {
            if (get_str(e, "message", &out->error, why) < 0 ||
                get_int(e, "grpc_code", &out->error_code, why) < 0)
                return -1;
        } else if (e->type == JSON_STRING) {
            out->error = e->str;
            if (get_int(root, "code", &out->error_code, why) < 0)
                return -1;
        } else {
            *why = "bad error";
            return -1;
        }
        return 0;
    }
    if (get_obj(root, "result", &r, why) < 0)
        return -1;
    if (r == NULL) {
        *why = "a watch message with neither result nor error";
        return -1;
    }
    if (header(r, &out->header, why) < 0 ||
        get_int(r, "watch_id", &out->watch_id, why) < 0 ||
        get_bool(r, "created", &out->created, why) < 0 ||
        get_bool(r, "canceled", &out->canceled, why) < 0 ||
        get_int(r, "compact_revision", &out->compact_revision, why) < 0 ||
        get_str(r, "cancel_reason", &out->cancel_reason, why) < 0 ||
        get_arr(r, "events", &evs, why) < 0)
        return -1;
    if (evs == NULL || evs->n == 0)
        return 0;
    out->events = arena_alloc(a, evs->n * sizeof(*out->events));
    if (out->events == NULL) {
        *why = "out of memory";
        return -1;
    }
    for (const struct json *v = evs->child; v != NULL; v = v->next, i++)
        if (event(a, v, &out->events[i], why) < 0)
            return -1;
    out->n = i;
    return 0;
}

int etcd_parse_txn(struct arena *a, const char *p, size_t n,
                   struct etcd_txn *out, const char **why)
{
    const struct json *root = parse_root(a, p, n, why);

    memset(out, 0, sizeof(*out));
    if (root == NULL)
        return -1;
    if (header(root, &out->header, why) < 0 ||
        get_bool(root, "succeeded", &out->succeeded, why) < 0)
        return -1;
    return 0;
}

int etcd_parse_auth(struct arena *a, const char *p, size_t n,
                    struct slice *token, const char **why)
{
    const struct json *root = parse_root(a, p, n, why);

    *token = SLICE_NULL;
    if (root == NULL)
        return -1;
    if (get_str(root, "token", token, why) < 0)
        return -1;
    if (token->n == 0) {
        *why = "no token in the answer";
        return -1;
    }
    return 0;
}

int etcd_parse_error(struct arena *a, const char *p, size_t n,
                     struct etcd_error *out, const char **why)
{
    const struct json *root = parse_root(a, p, n, why);
    struct slice e;

    memset(out, 0, sizeof(*out));
    if (root == NULL)
        return -1;
    if (get_str(root, "message", &out->message, why) < 0 ||
        get_int(root, "code", &out->code, why) < 0)
        return -1;
    if (out->message.n == 0) {
        if (get_str(root, "error", &e, why) < 0)
            return -1;
        out->message = e;
    }
    return 0;
}

size_t etcd_prefix_end(const char *key, size_t key_n, char *out)
{
    size_t n = key_n;

    while (n > 0 && (unsigned char)key[n - 1] == 0xff)
        n--;
    if (n == 0)
        return 0;
    memcpy(out, key, n);
    out[n - 1] = (char)((unsigned char)out[n - 1] + 1);
    return n;
}

static int put_bytes(struct buf *b, const char *name, struct slice s)
{
    if (buf_printf(b, "\"%s\":\"", name) < 0 || etcd_b64(b, s) < 0 ||
        buf_puts(b, "\"") < 0)
        return -1;
    return 0;
}

/* A range_end of length 0 means "to the end": "\0" on the wire. */
static int put_end(struct buf *b, struct slice end)
{
    if (end.n == 0)
        return buf_puts(b, "\"range_end\":\"AA==\"");
    return put_bytes(b, "range_end", end);
}

int etcd_req_range(struct buf *b, struct slice key, struct slice end,
                   int64_t revision)
{
    return etcd_req_range_page(b, key, end, revision, 0, 0);
}

int etcd_req_range_page(struct buf *b, struct slice key, struct slice end,
                        int64_t revision, int64_t limit, int keys_only)
{
    if (buf_puts(b, "{") < 0 || put_bytes(b, "key", key) < 0 ||
        buf_puts(b, ",") < 0 || put_end(b, end) < 0)
        return -1;
    if (revision > 0 &&
        buf_printf(b, ",\"revision\":\"%lld\"", (long long)revision) < 0)
        return -1;
    if (limit > 0 && buf_printf(b, ",\"limit\":\"%lld\"", (long long)limit) < 0)
        return -1;
    if (keys_only && buf_puts(b, ",\"keys_only\":true") < 0)
        return -1;
    return buf_puts(b, "}");
}

int etcd_req_watch(struct buf *b, struct slice key, struct slice end,
                   int64_t start_revision, int progress_notify)
{
    if (buf_puts(b, "{\"create_request\":{") < 0 ||
        put_bytes(b, "key", key) < 0 || buf_puts(b, ",") < 0 ||
        put_end(b, end) < 0)
        return -1;
    if (start_revision > 0 && buf_printf(b, ",\"start_revision\":\"%lld\"",
                                         (long long)start_revision) < 0)
        return -1;
    if (progress_notify && buf_puts(b, ",\"progress_notify\":true") < 0)
        return -1;
    return buf_puts(b, "}}");
}

int etcd_req_auth(struct buf *b, const char *name, const char *password)
{
    if (buf_puts(b, "{\"name\":") < 0 || json_str(b, name) < 0 ||
        buf_puts(b, ",\"password\":") < 0 || json_str(b, password) < 0)
        return -1;
    return buf_puts(b, "}");
}

int etcd_req_txn(struct buf *b, const struct etcd_txn_op *ops, size_t n)
{
    if (buf_puts(b, "{\"compare\":[") < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (buf_puts(b, i ? ",{" : "{") < 0 ||
            put_bytes(b, "key", ops[i].key) < 0 ||
            buf_printf(b,
                       ",\"target\":\"MOD\",\"result\":\"EQUAL\","
                       "\"mod_revision\":\"%lld\"}",
                       (long long)ops[i].mod_revision) < 0)
            return -1;
    }
    if (buf_puts(b, "],\"success\":[") < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (buf_puts(b, i ? "," : "") < 0 ||
            buf_puts(b, ops[i].del ? "{\"request_delete_range\":{"
                                   : "{\"request_put\":{") < 0 ||
            put_bytes(b, "key", ops[i].key) < 0)
            return -1;
        if (!ops[i].del &&
            (buf_puts(b, ",") < 0 || put_bytes(b, "value", ops[i].value) < 0))
            return -1;
        if (buf_puts(b, "}}") < 0)
            return -1;
    }
    return buf_puts(b, "]}");
}
