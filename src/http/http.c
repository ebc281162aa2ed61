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
    size_t need = name.n + value.n + 2;
    char *n, *v;

    if (f->n >= max || need < name.n)
        return -1;
    /* One block for both, each NUL-terminated, the name lowered. */
    if ((n = arena_alloc(a, need)) == NULL)
        return -1;
    ascii_lower_copy(n, name.p, name.n);
    n[name.n] = '\0';
    v = n + name.n + 1;
    if (value.n > 0)
        memcpy(v, value.p, value.n);
    v[value.n] = '\0';
    return http_fields_add_ref(f, a, (struct slice){n, name.n},
                               (struct slice){v, value.n});
}

/* Names are compared length first: the data path looks fields up by
 * name several times a request, and most names differ in length. */
static int name_is(struct slice nm, const char *name, size_t len)
{
    return nm.n == len && memcmp(nm.p, name, len) == 0;
}

const struct http_field *http_fields_get(const struct http_fields *f,
                                         const char *name)
{
    size_t len = strlen(name);

    for (size_t i = 0; i < f->n; i++)
        if (name_is(f->v[i].name, name, len))
            return &f->v[i];
    return NULL;
}

size_t http_fields_remove(struct http_fields *f, const char *name)
{
    size_t out = 0, removed = 0, len = strlen(name);

    for (size_t i = 0; i < f->n; i++) {
        if (name_is(f->v[i].name, name, len)) {
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

/* next_token() is the next element of a comma-separated list, from *i
 * on, with the spaces and tabs around it trimmed; 0 at the list's end.
 * Empty elements are skipped. */
static int next_token(struct slice list, size_t *i, struct slice *tok)
{
    size_t start, end;

    while (*i < list.n &&
           (list.p[*i] == ' ' || list.p[*i] == '\t' || list.p[*i] == ','))
        (*i)++;
    if (*i >= list.n)
        return 0;
    start = *i;
    while (*i < list.n && list.p[*i] != ',')
        (*i)++;
    end = *i;
    while (end > start && (list.p[end - 1] == ' ' || list.p[end - 1] == '\t'))
        end--;
    *tok = (struct slice){list.p + start, end - start};
    return 1;
}

/* token_list_has_slice() is http_token_list_has() for a name that is a
 * slice (a field name, compared without copying it). */
static int token_list_has_slice(struct slice list, struct slice want)
{
    struct slice t;
    size_t i = 0;

    while (next_token(list, &i, &t))
        if (t.n == want.n && strncasecmp(t.p, want.p, want.n) == 0)
            return 1;
    return 0;
}

int http_token_list_has(struct slice list, const char *tok)
{
    return token_list_has_slice(list, slice_of(tok));
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
    return ascii_text_ok(value.p, value.n);
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

/* The hop-by-hop fields of RFC 9110 section 7.6.1, and Proxy-Connection
 * (RFC 9113 section 8.2.2 lists it with them), by length: names here are
 * lower case. */
static int hop_name(struct slice nm)
{
    switch (nm.n) {
    case 2:
        return memcmp(nm.p, "te", 2) == 0;
    case 7:
        return memcmp(nm.p, "upgrade", 7) == 0;
    case 10:
        return memcmp(nm.p, "connection", 10) == 0 ||
               memcmp(nm.p, "keep-alive", 10) == 0;
    case 16:
        return memcmp(nm.p, "proxy-connection", 16) == 0;
    case 17:
        return memcmp(nm.p, "transfer-encoding", 17) == 0;
    default:
        return 0;
    }
}

/* One pass: a field goes when its name is hop-by-hop or is named by a
 * Connection field (any name may be; RFC 9110 section 7.6.1). The
 * Connection tokens are read once, not once per field: "keep-alive", the
 * usual one, names a hop-by-hop field anyway and is left out, and each
 * field is compared with the few others by length first. A list of more
 * tokens than tok holds is scanned per field instead. */
#define CONN_TOKENS 8

size_t http_fields_strip_hop(struct http_fields *f)
{
    const struct http_field *conn = http_fields_get(f, "connection");
    /* A copy: the pass below moves the fields, conn's included. */
    struct slice list = conn != NULL ? conn->value : (struct slice){NULL, 0};
    struct slice tok[CONN_TOKENS];
    size_t ntok = 0, out = 0, removed = 0;
    int scan = 0; /* more tokens than tok holds: compare with the list */

    if (list.n > 0) {
        size_t i = 0;
        struct slice t;

        while (next_token(list, &i, &t)) {
            if (t.n == 10 && strncasecmp(t.p, "keep-alive", 10) == 0)
                continue;
            if (ntok == CONN_TOKENS) {
                scan = 1;
                break;
            }
            tok[ntok++] = t;
        }
    }
    for (size_t i = 0; i < f->n; i++) {
        struct slice nm = f->v[i].name;
        int hop = hop_name(nm);

        if (!hop && scan)
            hop = token_list_has_slice(list, nm);
        for (size_t k = 0; !hop && !scan && k < ntok; k++)
            hop = tok[k].n == nm.n && strncasecmp(tok[k].p, nm.p, nm.n) == 0;
        if (hop) {
            removed++;
            continue;
        }
        f->v[out++] = f->v[i];
    }
    f->n = out;
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
