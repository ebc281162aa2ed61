#include "config.h"

#include <string.h>
#include <strings.h>

#include "core/ascii.h"
#include "core/stats.h"
#include "http/http.h"

static int fields_grow(struct http_fields *f, struct arena *a)
{
    size_t cap = f->cap ? f->cap * 2 : 16;
    struct http_field *v;

    if (f->n < f->cap)
        return 0;
    v = arena_alloc(a, cap * sizeof(*v));
    if (v == NULL)
        return -1;
    if (f->n > 0)
        memcpy(v, f->v, f->n * sizeof(*v));
    /* The old array stays in the arena until the request ends: growth is
     * rare (16, then 32 fields) and bounded by the header limits. */
    f->v = v;
    f->cap = cap;
    return 0;
}

int http_fields_add_ref(struct http_fields *f, struct arena *a,
                        struct slice name, struct slice value)
{
    if (fields_grow(f, a) < 0)
        return -1;
    f->v[f->n].name = name;
    f->v[f->n].value = value;
    f->n++;
    return 0;
}

int http_fields_add(struct http_fields *f, struct arena *a, struct slice name,
                    struct slice value, size_t max)
{
    char *n, *v;

    if (f->n >= max)
        return -1;
    n = arena_dup(a, name.p, name.n);
    v = arena_dup(a, value.p, value.n);
    if (n == NULL || v == NULL)
        return -1;
    ascii_lower_n(n, name.n);
    return http_fields_add_ref(f, a, (struct slice){n, name.n},
                               (struct slice){v, value.n});
}

const struct http_field *http_fields_get(const struct http_fields *f,
                                         const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (slice_eq_str(f->v[i].name, name))
            return &f->v[i];
    return NULL;
}

size_t http_fields_remove(struct http_fields *f, const char *name)
{
    size_t out = 0, removed = 0;

    for (size_t i = 0; i < f->n; i++) {
        if (slice_eq_str(f->v[i].name, name)) {
            removed++;
            continue;
        }
        f->v[out++] = f->v[i];
    }
    f->n = out;
    return removed;
}

int http_fields_set(struct http_fields *f, struct arena *a, const char *name,
                    struct slice value)
{
    struct slice v = arena_slice(a, value);

    if (v.p == NULL)
        return -1;
    http_fields_remove(f, name);
    return http_fields_add_ref(f, a, slice_of(name), v);
}

int http_token_list_has(struct slice list, const char *tok)
{
    size_t tlen = strlen(tok);
    size_t i = 0;

    while (i < list.n) {
        size_t start, end;

        while (i < list.n &&
               (list.p[i] == ' ' || list.p[i] == '\t' || list.p[i] == ','))
            i++;
        start = i;
        while (i < list.n && list.p[i] != ',')
            i++;
        end = i;
        while (end > start &&
               (list.p[end - 1] == ' ' || list.p[end - 1] == '\t'))
            end--;
        if (end - start == tlen && strncasecmp(list.p + start, tok, tlen) == 0)
            return 1;
    }
    return 0;
}

/*
 * tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." /
 *         "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA   (RFC 9110 5.6.2)
 * Everything from 0x80 up is not a tchar, so the table's second half is 0.
 */
/* clang-format off */
const unsigned char http_tchar_table[256] = {
    /* 0x00 - 0x1f: controls */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /*  SP !  "  #  $  %  &  '  (  )  *  +  ,  -  .  / */
    0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 0,
    /*  0  1  2  3  4  5  6  7  8  9  :  ;  <  =  >  ? */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0,
    /*  @  A  B  C  D  E  F  G  H  I  J  K  L  M  N  O */
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /*  P  Q  R  S  T  U  V  W  X  Y  Z  [  \  ]  ^  _ */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1,
    /*  `  a  b  c  d  e  f  g  h  i  j  k  l  m  n  o */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /*  p  q  r  s  t  u  v  w  x  y  z  {  |  }  ~ DEL */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 0,
};
/* clang-format on */

int http_field_name_valid(struct slice name)
{
    if (name.n == 0)
        return 0;
    for (size_t i = 0; i < name.n; i++)
        if (!http_is_tchar((unsigned char)name.p[i]))
            return 0;
    return 1;
}

int http_field_value_valid(struct slice value)
{
    for (size_t i = 0; i < value.n; i++) {
        unsigned char c = (unsigned char)value.p[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 0;
    }
    return 1;
}

static int hexdigit(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
           (c >= 'A' && c <= 'F');
}

/* The bytes a target may hold, '?' aside (allowed: 1). */
static int target_bytes_check(struct slice s, int allow_q, const char **why)
{
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        if (c <= 0x20 || c >= 0x7f) {
            *why = "a space, control character (CR, LF, NUL) or non-ASCII "
                   "byte; percent-encode it";
            return -1;
        }
        if (c == '#') {
            *why = "a fragment ('#') is no part of a request target";
            return -1;
        }
        if (c == '?' && !allow_q) {
            *why = "'?' starts the query: set it with h:set_query()";
            return -1;
        }
        if (c == '%' &&
            (i + 2 >= s.n || !hexdigit(s.p[i + 1]) || !hexdigit(s.p[i + 2]))) {
            *why = "'%' not followed by two hex digits";
            return -1;
        }
    }
    return 0;
}

int http_path_check(struct slice path, const char **why)
{
    if (path.n == 0 || path.p[0] != '/') {
        *why = "a path must start with '/'";
        return -1;
    }
    if (path.n > HTTP_TARGET_MAX) {
        *why = "longer than 8192 bytes";
        return -1;
    }
    return target_bytes_check(path, 0, why);
}

int http_query_check(struct slice query, const char **why)
{
    if (query.n > HTTP_TARGET_MAX) {
        *why = "longer than 8192 bytes";
        return -1;
    }
    return target_bytes_check(query, 1, why);
}

int http_target_check(struct slice target, const char **why)
{
    const char *q = target.n ? memchr(target.p, '?', target.n) : NULL;
    struct slice path = target, query = {NULL, 0};

    if (target.n > HTTP_TARGET_MAX) {
        *why = "longer than 8192 bytes";
        return -1;
    }
    if (q != NULL) {
        path.n = (size_t)(q - target.p);
        query = (struct slice){q + 1, (size_t)(target.p + target.n - q - 1)};
    }
    if (http_path_check(path, why) < 0)
        return -1;
    return http_query_check(query, why);
}

int http_field_reserved(struct slice name)
{
    static const char *const reserved[] = {
        "content-length", "transfer-encoding", "connection", "upgrade", "te",
        "keep-alive",     "proxy-connection",  "host"};

    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (name.n == strlen(reserved[i]) &&
            strncasecmp(name.p, reserved[i], name.n) == 0)
            return 1;
    return 0;
}

size_t http_fields_strip_hop(struct http_fields *f)
{
    static const char *const hop[] = {"connection",       "keep-alive",
                                      "proxy-connection", "transfer-encoding",
                                      "upgrade",          "te"};
    size_t removed = 0;
    const struct http_field *conn = http_fields_get(f, "connection");

    /* Fields named by Connection go first; they may be any name. */
    if (conn != NULL) {
        struct slice list = conn->value;
        size_t out = 0;

        for (size_t i = 0; i < f->n; i++) {
            char name[64];
            struct slice nm = f->v[i].name;
            if (nm.n < sizeof(name)) {
                memcpy(name, nm.p, nm.n);
                name[nm.n] = '\0';
                if (http_token_list_has(list, name) &&
                    !slice_eq_str(nm, "connection")) {
                    removed++;
                    continue;
                }
            }
            f->v[out++] = f->v[i];
        }
        f->n = out;
    }
    for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
        removed += http_fields_remove(f, hop[i]);
    return removed;
}

#define HTTP_FIELD(name, member)                                               \
    {                                                                          \
        name, offsetof(struct http_counters, member), STATS_NONE               \
    }

static const struct stats_field http_fields[] = {
    HTTP_FIELD("rq_total", rq_total),
    HTTP_FIELD("rq_1xx", rq_class[1]),
    HTTP_FIELD("rq_2xx", rq_class[2]),
    HTTP_FIELD("rq_3xx", rq_class[3]),
    HTTP_FIELD("rq_4xx", rq_class[4]),
    HTTP_FIELD("rq_5xx", rq_class[5]),
    HTTP_FIELD("protocol_errors", rq_protocol_errors),
    {"downstream_buffers_active", offsetof(struct http_counters, bufs_taken),
     offsetof(struct http_counters, bufs_released)},
    HTTP_FIELD("upstream_errors", rq_upstream_errors),
    HTTP_FIELD("rbac_denied", rq_rbac_denied),
    HTTP_FIELD("jwt_authn.denied", rq_jwt_denied),
    HTTP_FIELD("mirror_sent", rq_mirror_sent),
    HTTP_FIELD("mirror_failed", rq_mirror_failed),
    HTTP_FIELD("mirror_skipped", rq_mirror_skipped),
    /* Envoy's downstream_rq_idle_timeout and downstream_rq_header_timeout,
     * without the prefix this block leaves out everywhere. */
    HTTP_FIELD("rq_idle_timeout", rq_idle_timeout),
    HTTP_FIELD("rq_header_timeout", rq_header_timeout),
    HTTP_FIELD("downstream_rq_overload_close", rq_overload),
    HTTP_FIELD("downstream_cx_overload_disable_keepalive",
               cx_overload_keepalive),
};

const struct stats_desc http_counters_desc = {
    "http.", http_fields, sizeof(http_fields) / sizeof(http_fields[0])};
