#include "config.h"

#define PCRE2_CODE_UNIT_WIDTH 8

#include <arpa/inet.h>
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "config/gwapi.h"
#include "config/res-k8s.h"
#include "config/res-kinds.h"
#include "config/resource.h"
#include "config/yaml.h"
#include "core/buf.h"

#define RES_MAX_FILES 100000
#define RES_MAX_REGEX 4096

/* ---- messages ----------------------------------------------------------- */

static char *xstrdup(const char *s)
{
    return strdup(s != NULL ? s : "");
}

void res_msgs_add(struct res_msgs *m, const char *code, enum res_level level,
                  const char *file, int line, int col, const char *resource,
                  const char *path, const char *fmt, ...)
{
    struct res_msg *msg;
    va_list ap;
    int rc;

    if (m->n == m->alloc) {
        size_t alloc = m->alloc ? m->alloc * 2 : 16;
        struct res_msg *v = realloc(m->v, alloc * sizeof(*v));
        if (v == NULL)
            return;
        m->v = v;
        m->alloc = alloc;
    }
    msg = &m->v[m->n];
    memset(msg, 0, sizeof(*msg));
    msg->code = code;
    msg->level = level;
    msg->line = line;
    msg->col = col;
    msg->file = xstrdup(file);
    msg->resource = xstrdup(resource);
    msg->path = xstrdup(path);
    va_start(ap, fmt);
    rc = vasprintf(&msg->message, fmt, ap);
    va_end(ap);
    if (rc < 0)
        msg->message = NULL;
    if (msg->file == NULL || msg->resource == NULL || msg->path == NULL ||
        msg->message == NULL) {
        free(msg->file);
        free(msg->resource);
        free(msg->path);
        free(msg->message);
        return;
    }
    m->n++;
    if (level == RES_ERROR)
        m->nerr++;
}

void res_msgs_dispose(struct res_msgs *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].file);
        free(m->v[i].resource);
        free(m->v[i].path);
        free(m->v[i].message);
    }
    free(m->v);
    memset(m, 0, sizeof(*m));
}

void res_msg_line(struct buf *b, const struct res_msg *m)
{
    buf_printf(b, "%s:%d:%d: ", m->file, m->line, m->col);
    if (m->resource[0] != '\0')
        buf_printf(b, "%s: ", m->resource);
    if (m->path[0] != '\0')
        buf_printf(b, "%s: ", m->path);
    buf_printf(b, "%s\n", m->message);
}

const char *res_level_code(enum res_level level)
{
    return level == RES_ERROR     ? "IST0106"
           : level == RES_WARNING ? "STR0002"
                                  : "STR0001";
}

static void vreport(struct res_check *ck, const char *code,
                    enum res_level level, const struct conf_mark *mark,
                    const char *path, const char *fmt, va_list ap)
{
    char text[1024];
    int line = ck->r->line, col = ck->r->col;

    if (mark != NULL && mark->line > 0) {
        line = mark->line;
        col = mark->col;
    }
    vsnprintf(text, sizeof(text), fmt, ap);
    res_msgs_add(ck->msgs, code != NULL ? code : res_level_code(level), level,
                 ck->r->file, line, col, ck->resource, path, "%s", text);
    if (level == RES_ERROR)
        ck->nerr++;
}

void res_err(struct res_check *ck, const struct conf_mark *mark,
             const char *path, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vreport(ck, NULL, RES_ERROR, mark, path, fmt, ap);
    va_end(ap);
}

void res_warn(struct res_check *ck, const struct conf_mark *mark,
              const char *path, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vreport(ck, NULL, RES_WARNING, mark, path, fmt, ap);
    va_end(ap);
}

void res_warn_code(struct res_check *ck, const char *code,
                   const struct conf_mark *mark, const char *path,
                   const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vreport(ck, code, RES_WARNING, mark, path, fmt, ap);
    va_end(ap);
}

void res_path(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(out, n, fmt, ap);
    va_end(ap);
}

/* ---- names, hosts, labels ---------------------------------------------- */

static const char *const kind_names[RES_KIND_COUNT] = {
    "Gateway",
    "VirtualService",
    "DestinationRule",
    "ServiceEntry",
    "WorkloadEntry",
    "AuthorizationPolicy",
    "PeerAuthentication",
    "RequestAuthentication",
    "Service",
    "EndpointSlice",
    "Secret",
    "Namespace",
    "LuaPolicy",
    "MeshLink",
    "Node",
    "ReferenceGrant",
    "Pod",
    "GatewayClass",
    "Gateway",
    "HTTPRoute",
};

static const struct res_kind_ops *const kind_ops[RES_KIND_COUNT] = {
    &res_gateway_ops,
    &res_virtual_service_ops,
    &res_destination_rule_ops,
    &res_service_entry_ops,
    &res_workload_entry_ops,
    &res_authorization_policy_ops,
    &res_peer_authentication_ops,
    &res_request_authentication_ops,
    &res_k8s_service_ops,
    &res_k8s_endpoint_slice_ops,
    &res_k8s_secret_ops,
    &res_k8s_namespace_ops,
    &res_lua_policy_ops,
    &res_mesh_link_ops,
    &res_k8s_node_ops,
    &res_reference_grant_ops,
    &res_k8s_pod_ops,
    &res_gateway_class_ops,
    &res_k8s_gateway_ops,
    &res_http_route_ops,
};

static const struct res_kind_ext no_ext;

static const struct res_kind_ext *const kind_ext[RES_KIND_COUNT] = {
    &no_ext,
    &no_ext,
    &no_ext,
    &no_ext,
    &no_ext,
    &no_ext,
    &no_ext,
    &no_ext,
    &res_k8s_service_ext,
    &res_k8s_endpoint_slice_ext,
    &res_k8s_secret_ext,
    &res_k8s_namespace_ext,
    &no_ext,
    &no_ext,
    &res_k8s_node_ext,
    &no_ext,
    &res_k8s_pod_ext,
    &no_ext,
    &no_ext,
    &no_ext,
};

/* The API group of each kind, and the versions strait reads. */
static const char *const kind_groups[RES_KIND_COUNT] = {
    "networking.istio.io",
    "networking.istio.io",
    "networking.istio.io",
    "networking.istio.io",
    "networking.istio.io",
    "security.istio.io",
    "security.istio.io",
    "security.istio.io",
    "",
    "discovery.k8s.io",
    "",
    "",
    "strait.io",
    "strait.io",
    "",
    "gateway.networking.k8s.io",
    "",
    "gateway.networking.k8s.io",
    "gateway.networking.k8s.io",
    "gateway.networking.k8s.io",
};

const char *res_kind_name(enum res_kind kind)
{
    return (unsigned)kind < RES_KIND_COUNT ? kind_names[kind] : "?";
}

void res_spec_json(struct buf *b, const struct resource *r)
{
    if (kind_ext[r->kind]->json != NULL)
        kind_ext[r->kind]->json(b, r);
    else
        conf_to_json(kind_ops[r->kind]->spec, r->spec, b);
}

void res_spec_identity(const struct resource *r, const struct conf_sink *sink)
{
    if (kind_ext[r->kind]->identity != NULL)
        kind_ext[r->kind]->identity(r, sink);
    else
        conf_identity(kind_ops[r->kind]->spec, r->spec, sink);
}

static const char *const protocol_names[] = {
    "HTTP", "HTTPS", "HTTP2", "GRPC",  "GRPC-WEB", "TCP",
    "TLS",  "MONGO", "MYSQL", "REDIS", "UDP",      "HBONE",
};

const char *res_protocol_name(int64_t protocol)
{
    if (protocol < 0 ||
        protocol >= (int64_t)(sizeof(protocol_names) / sizeof(*protocol_names)))
        return "?";
    return protocol_names[protocol];
}

int res_parse_protocol(const char *s, size_t n, void *dst, const char **why)
{
    for (size_t i = 0; i < sizeof(protocol_names) / sizeof(*protocol_names);
         i++) {
        if (strlen(protocol_names[i]) == n &&
            strncasecmp(s, protocol_names[i], n) == 0) {
            int64_t v = (int64_t)i;
            memcpy(dst, &v, sizeof(v));
            return 0;
        }
    }
    *why = "unknown protocol (HTTP, HTTPS, HTTP2, GRPC, GRPC-WEB, TCP, TLS, "
           "MONGO, MYSQL, REDIS, UDP)";
    return -1;
}

void res_protocol_json(struct buf *b, const void *src)
{
    int64_t v;

    memcpy(&v, src, sizeof(v));
    buf_printf(b, "\"%s\"", res_protocol_name(v));
}

int res_valid_label(const char *s, size_t n, void *dst, const char **why)
{
    (void)dst;
    if (n == 0 || n > 63) {
        *why = "must be 1-63 characters";
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              (c == '-' && i > 0 && i + 1 < n))) {
            *why = "must be lower-case letters, digits and '-' (a DNS label)";
            return -1;
        }
    }
    return 0;
}

/* A resource name is a DNS-1123 subdomain: labels joined by dots. */
static int valid_subdomain(const char *s)
{
    size_t n = strlen(s), start = 0;
    const char *why;

    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            if (res_valid_label(s + start, i - start, NULL, &why) < 0)
                return 0;
            start = i + 1;
        }
    }
    return 1;
}

static int is_ip(const char *s)
{
    unsigned char tmp[16];

    return inet_pton(AF_INET, s, tmp) == 1 || inet_pton(AF_INET6, s, tmp) == 1;
}

int res_host_fqdn(const char *host, const char *ns, const char *domain,
                  char *out, size_t n)
{
    int w;

    if (strcmp(host, "*") == 0 || is_ip(host) || strchr(host, '.') != NULL)
        w = snprintf(out, n, "%s", host);
    else
        w = snprintf(out, n, "%s.%s.svc.%s", host, ns, domain);
    return w < 0 || (size_t)w >= n ? -1 : w;
}

/* suffix_of() is true when s ends with suffix. */
static int suffix_of(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);

    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

int res_gw_host_admits(const char *server_host, const char *gw_ns,
                       size_t gw_ns_len, const char *vs_ns, const char **host)
{
    const char *slash = strchr(server_host, '/');
    size_t nl;

    *host = slash != NULL ? slash + 1 : server_host;
    if (slash == NULL)
        return 1;
    nl = (size_t)(slash - server_host);
    if (nl == 1 && server_host[0] == '*')
        return 1;
    if (nl == 1 && server_host[0] == '~')
        return 0;
    /* "./host": the namespace of the Gateway that lists the host. */
    if (nl == 1 && server_host[0] == '.')
        return strlen(vs_ns) == gw_ns_len &&
               strncmp(vs_ns, gw_ns, gw_ns_len) == 0;
    return strlen(vs_ns) == nl && strncmp(server_host, vs_ns, nl) == 0;
}

size_t res_ref_ns_len(const char *ref)
{
    const char *slash = strchr(ref, '/');

    return slash != NULL ? (size_t)(slash - ref) : 0;
}

int res_visible(const struct resource *r, const struct conf_strs *export_to,
                const char *ns)
{
    if (export_to->n == 0)
        return 1;
    for (size_t i = 0; i < export_to->n; i++) {
        const char *e = export_to->v[i];
        if (strcmp(e, "*") == 0 ||
            (strcmp(e, ".") == 0 && strcmp(r->meta.ns, ns) == 0) ||
            strcmp(e, ns) == 0)
            return 1;
    }
    return 0;
}

int res_labels_match(const struct conf_strmap *selector,
                     const struct conf_strmap *labels)
{
    for (size_t i = 0; i < selector->n; i++) {
        size_t j;
        for (j = 0; j < labels->n; j++)
            if (strcmp(selector->v[i].key, labels->v[j].key) == 0 &&
                strcmp(selector->v[i].val, labels->v[j].val) == 0)
                break;
        if (j == labels->n)
            return 0;
    }
    return 1;
}

int res_we_backs(const struct resource_set *set, const struct resource *w,
                 const char *host)
{
    char fq[512];
    const char *app = NULL;
    const struct res_workload_entry *we;

    if (w->kind != RES_WORKLOAD_ENTRY)
        return 0;
    we = res_workload_entry(w);
    for (size_t j = 0; j < we->labels.n; j++)
        if (strcmp(we->labels.v[j].key, "app") == 0)
            app = we->labels.v[j].val;
    return app != NULL &&
           res_host_fqdn(app, w->meta.ns, set->domain, fq, sizeof(fq)) >= 0 &&
           strcmp(fq, host) == 0;
}

int res_we_service_ports(const struct resource_set *set, const char *host,
                         const char **only, struct buf *names)
{
    const char *seen[RES_WE_MAX_PORT_NAMES];
    size_t nseen = 0;
    int backed = 0;

    *only = NULL;
    for (size_t i = 0; i < set->n; i++) {
        const struct res_workload_entry *we;
        if (!res_we_backs(set, set->v[i], host))
            continue;
        backed = 1;
        we = res_workload_entry(set->v[i]);
        for (size_t k = 0; k < we->ports.n; k++) {
            size_t j;
            for (j = 0; j < nseen; j++)
                if (strcmp(seen[j], we->ports.v[k].key) == 0)
                    break;
            if (j == nseen && nseen < RES_WE_MAX_PORT_NAMES)
                seen[nseen++] = we->ports.v[k].key;
        }
    }
    if (!backed)
        return -1;
    if (nseen == 1)
        *only = seen[0];
    if (names != NULL) {
        buf_puts(names, "[");
        for (size_t j = 0; j < nseen; j++)
            buf_printf(names, "%s%s", j ? " " : "", seen[j]);
        buf_puts(names, "]");
    }
    return (int)nseen;
}

enum res_policy_scope res_policy_scope(const struct resource *r,
                                       const struct conf_strmap *selector,
                                       const char *node_ns,
                                       const struct conf_strmap *labels,
                                       const char *root_ns)
{
    if (strcmp(r->meta.ns, root_ns) != 0 &&
        (node_ns == NULL || strcmp(r->meta.ns, node_ns) != 0))
        return RES_SCOPE_OTHER_NAMESPACE;
    if (selector->n > 0 &&
        (labels == NULL || !res_labels_match(selector, labels)))
        return RES_SCOPE_SELECTOR;
    return RES_SCOPE_APPLIES;
}

void res_check_host(struct res_check *ck, const struct conf_mark *mark,
                    const char *path, const char *host, int flags)
{
    size_t n = strlen(host), start = 0;

    if (n == 0) {
        res_err(ck, mark, path, "empty host");
        return;
    }
    if ((flags & RES_HOST_IP) && is_ip(host))
        return;
    if (flags & RES_HOST_WILDCARD) {
        if (strcmp(host, "*") == 0)
            return;
        if (host[0] == '*') {
            if (host[1] != '.') {
                res_err(ck, mark, path,
                        "host '%s': a wildcard is '*' or '*.' followed by a "
                        "domain",
                        host);
                return;
            }
            start = 2;
        }
    }
    if (n > 255) {
        res_err(ck, mark, path, "host is longer than 255 characters");
        return;
    }
    for (size_t i = start; i <= n; i++) {
        if (i < n && host[i] != '.') {
            char c = host[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '-' || c == '_')) {
                res_err(ck, mark, path,
                        "host '%s': character '%c' is not allowed%s", host,
                        c >= 0x20 && c < 0x7f ? c : '?',
                        c == '*' ? " (a wildcard must be the first label)"
                                 : "");
                return;
            }
            continue;
        }
        /* The last label may be empty: "example.com." is fully qualified. */
        if ((i - start == 0 && i != n) || i - start > 63) {
            res_err(ck, mark, path,
                    "host '%s': each dot-separated part must be 1-63 "
                    "characters",
                    host);
            return;
        }
        start = i + 1;
    }
}

enum res_strmatch_kind res_strmatch_kind(const struct res_strmatch *m)
{
    if (m->exact != NULL)
        return RES_MATCH_EXACT;
    if (m->prefix != NULL)
        return RES_MATCH_PREFIX;
    if (m->regex != NULL)
        return RES_MATCH_REGEX;
    if (m->present)
        return RES_MATCH_PRESENT;
    return RES_MATCH_NONE;
}

int res_regex_check(const char *re, char *why, size_t n)
{
    pcre2_code *code;
    int err = 0;
    PCRE2_SIZE off = 0;
    uint32_t backrefs = 0;

    if (strlen(re) > RES_MAX_REGEX) {
        snprintf(why, n, "longer than %d bytes", RES_MAX_REGEX);
        return -1;
    }
    code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err,
                         &off, NULL);
    if (code == NULL) {
        PCRE2_UCHAR msg[256];
        if (pcre2_get_error_message(err, msg, sizeof(msg)) < 0)
            snprintf((char *)msg, sizeof(msg), "error %d", err);
        snprintf(why, n, "%s at offset %zu", (const char *)msg, (size_t)off);
        return -1;
    }
    /* Istio's dialect is RE2, which has no backreferences; they are also
     * what makes matching time unbounded. */
    if (pcre2_pattern_info(code, PCRE2_INFO_BACKREFMAX, &backrefs) == 0 &&
        backrefs > 0) {
        pcre2_code_free(code);
        snprintf(why, n,
                 "backreferences are not supported (Istio's regular "
                 "expressions are RE2)");
        return -1;
    }
    /* JIT is an optimisation: a platform without it still matches, with
     * the match limits the router sets. */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    pcre2_code_free(code);
    return 0;
}

void res_check_strmatch(struct res_check *ck, const struct res_strmatch *m,
                        const char *path)
{
    char why[300];

    if (m->regex != NULL && res_regex_check(m->regex, why, sizeof(why)) < 0)
        res_err(ck, &m->mark, path, "regex '%s': %s", m->regex, why);
}

/* ---- metadata ------------------------------------------------------------ */

#define M(f) RES_OFF(struct res_meta, f)
/* Keys the API server adds; a dump of a live cluster carries them. */
#define IGN(key, i)                                                            \
    {                                                                          \
        .name = key, .type = CONF_IGNORE,                                      \
        .off = M(ignored) + (i) * sizeof(struct conf_mark),                    \
        .help = "accepted and ignored"                                         \
    }

static const struct conf_key meta_keys[] = {
    {.name = "name", .type = CONF_STR, .off = M(name), .help = "name"},
    {.name = "namespace",
     .type = CONF_STR,
     .off = M(ns),
     .def = "default",
     .help = "namespace",
     .custom = res_valid_label},
    {.name = "labels",
     .type = CONF_STR_MAP,
     .off = M(labels),
     .help = "labels"},
    {.name = "annotations",
     .type = CONF_STR_MAP,
     .off = M(annotations),
     .help = "annotations"},
    IGN("resourceVersion", 0),
    IGN("uid", 1),
    /* Kept: the Gateway API orders routes by it. */
    {.name = "creationTimestamp",
     .type = CONF_STR,
     .off = M(created),
     .help = "creation time (RFC 3339)"},
    {.name = "generation",
     .type = CONF_INT,
     .off = M(generation),
     .min = 0,
     .max = INT64_MAX,
     .help = "generation: a status's observedGeneration"},
    IGN("managedFields", 4),
    IGN("generateName", 5),
    IGN("finalizers", 6),
    IGN("ownerReferences", 7),
    {.name = NULL},
};
#undef IGN
#undef M

static const struct conf_section meta_section = {meta_keys, 0, SIZE_MAX};

/* ---- loading ------------------------------------------------------------- */

struct loader {
    struct resource_set *set;
    const char *file;       /* owned by set->files */
    const char *default_ns; /* for documents without metadata.namespace */
    /* An etcd key: the one resource its value may hold (NULL: a file). */
    const struct res_input *expect;
    /* With expect: the resources before this index came from the
     * directory, and one of them with the same identity gives way. */
    size_t dir_n;
};

static void resource_free(struct resource *r)
{
    if (r == NULL)
        return;
    if (r->spec != NULL) {
        if (kind_ext[r->kind]->dispose != NULL)
            kind_ext[r->kind]->dispose(r->spec);
        conf_dispose(kind_ops[r->kind]->spec, r->spec);
        free(r->spec);
    }
    conf_dispose(&meta_section, &r->meta);
    free(r->status);
    free(r->api_version);
    free(r);
}

static uint64_t res_hash(enum res_kind kind, const char *ns, const char *name)
{
    uint64_t h = 1469598103934665603u ^ (uint64_t)kind;

    for (const char *p = ns; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211u;
    h = (h ^ '/') * 1099511628211u;
    for (const char *p = name; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211u;
    return h;
}

/* idx_slot() is the slot of (kind, ns, name) in set->idx: the one that
 * holds it, or the empty one where it goes. */
static size_t idx_slot(const struct resource_set *set, enum res_kind kind,
                       const char *ns, const char *name)
{
    size_t mask = set->idx_cap - 1;
    size_t s = (size_t)res_hash(kind, ns, name) & mask;

    for (;;) {
        size_t i = set->idx[s];
        const struct resource *o;
        if (i == 0)
            return s;
        o = set->v[i - 1];
        if (o->kind == kind && strcmp(o->meta.name, name) == 0 &&
            strcmp(o->meta.ns, ns) == 0)
            return s;
        s = (s + 1) & mask;
    }
}

/* idx_grow() doubles the index when it would pass half full; on no
 * memory the index goes and the set is searched linearly. */
static void idx_grow(struct resource_set *set, size_t want)
{
    size_t cap = set->idx_cap ? set->idx_cap : 64, *old = set->idx;

    if (old != NULL && want * 2 <= set->idx_cap)
        return;
    while (want * 2 > cap)
        cap *= 2;
    free(old);
    set->idx = calloc(cap, sizeof(*set->idx));
    set->idx_cap = set->idx ? cap : 0;
    for (size_t i = 0; set->idx != NULL && i < set->n; i++) {
        const struct resource *o = set->v[i];
        set->idx[idx_slot(set, o->kind, o->meta.ns, o->meta.name)] = i + 1;
    }
}

void resource_set_free(struct resource_set *set)
{
    if (set == NULL)
        return;
    for (size_t i = 0; i < set->n; i++)
        resource_free(set->v[i]);
    free(set->v);
    free(set->idx);
    for (size_t i = 0; i < set->nfiles; i++)
        free(set->files[i]);
    free(set->files);
    res_msgs_dispose(&set->msgs);
    free(set->domain);
    free(set);
}

void resource_set_remove(struct resource_set *set, const unsigned char *drop)
{
    size_t k = 0;

    for (size_t i = 0; i < set->n; i++) {
        if (drop[i]) {
            resource_free(set->v[i]);
            continue;
        }
        set->v[k++] = set->v[i];
    }
    set->n = k;
}

const struct resource *resource_find(const struct resource_set *set,
                                     enum res_kind kind, const char *ns,
                                     const char *name)
{
    if (set->idx != NULL) {
        size_t i = set->idx[idx_slot(set, kind, ns, name)];
        return i ? set->v[i - 1] : NULL;
    }
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        if (r->kind == kind && strcmp(r->meta.name, name) == 0 &&
            strcmp(r->meta.ns, ns) == 0)
            return r;
    }
    return NULL;
}

#define SPEC_OF(r, k, type)                                                    \
    do {                                                                       \
        assert((r)->kind == (k));                                              \
        return (const type *)(r)->spec;                                        \
    } while (0)

const struct res_gateway *res_gateway(const struct resource *r)
{
    SPEC_OF(r, RES_GATEWAY, struct res_gateway);
}

const struct res_virtual_service *res_virtual_service(const struct resource *r)
{
    SPEC_OF(r, RES_VIRTUAL_SERVICE, struct res_virtual_service);
}

const struct res_destination_rule *
res_destination_rule(const struct resource *r)
{
    SPEC_OF(r, RES_DESTINATION_RULE, struct res_destination_rule);
}

const struct res_service_entry *res_service_entry(const struct resource *r)
{
    static const struct res_service_entry none;

    /* A Kubernetes Service is the registry entry res_k8s_link() made. */
    if (r->kind == RES_SERVICE) {
        const struct res_k8s_service *svc = r->spec;
        return svc->entry != NULL ? svc->entry : &none;
    }
    SPEC_OF(r, RES_SERVICE_ENTRY, struct res_service_entry);
}

int res_is_service(const struct resource *r)
{
    return r->kind == RES_SERVICE_ENTRY || r->kind == RES_SERVICE;
}

const struct res_workload_entry *res_workload_entry(const struct resource *r)
{
    SPEC_OF(r, RES_WORKLOAD_ENTRY, struct res_workload_entry);
}

const struct res_authorization_policy *
res_authorization_policy(const struct resource *r)
{
    SPEC_OF(r, RES_AUTHORIZATION_POLICY, struct res_authorization_policy);
}

const struct res_peer_authentication *
res_peer_authentication(const struct resource *r)
{
    SPEC_OF(r, RES_PEER_AUTHENTICATION, struct res_peer_authentication);
}

const struct res_request_authentication *
res_request_authentication(const struct resource *r)
{
    SPEC_OF(r, RES_REQUEST_AUTHENTICATION, struct res_request_authentication);
}

const struct res_lua_policy *res_lua_policy(const struct resource *r)
{
    SPEC_OF(r, RES_LUA_POLICY, struct res_lua_policy);
}

const struct res_mesh_link *res_mesh_link(const struct resource *r)
{
    SPEC_OF(r, RES_MESH_LINK, struct res_mesh_link);
}

const struct res_reference_grant *res_reference_grant(const struct resource *r)
{
    SPEC_OF(r, RES_REFERENCE_GRANT, struct res_reference_grant);
}

const struct res_gateway_class *res_gateway_class(const struct resource *r)
{
    SPEC_OF(r, RES_GATEWAY_CLASS, struct res_gateway_class);
}

const struct res_k8s_gateway *res_k8s_gateway(const struct resource *r)
{
    SPEC_OF(r, RES_K8S_GATEWAY, struct res_k8s_gateway);
}

const struct res_http_route_gw *res_http_route_gw(const struct resource *r)
{
    SPEC_OF(r, RES_HTTP_ROUTE, struct res_http_route_gw);
}

static void load_msg(struct loader *ld, enum res_level level, int line, int col,
                     const char *resource, const char *path, const char *fmt,
                     ...) __attribute__((format(printf, 7, 8)));

static void load_msg(struct loader *ld, enum res_level level, int line, int col,
                     const char *resource, const char *path, const char *fmt,
                     ...)
{
    char text[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    res_msgs_add(&ld->set->msgs, res_level_code(level), level, ld->file, line,
                 col, resource, path, "%s", text);
}

/*
 * take_conf_errors() turns the decoder's lines ("file:line:col: path:
 * reason") into messages, with prefix in front of each path. The decoder
 * names the file we gave it, so the line is split after that name.
 */
static int take_conf_errors(struct loader *ld, struct buf *text,
                            const char *resource, const char *prefix)
{
    const char *p = buf_cstr(text);
    size_t flen = strlen(ld->file);
    int n = 0;

    while (*p != '\0') {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[2048];
        int l = 0, c = 0, used = 0;
        char *path, *reason;

        snprintf(line, sizeof(line), "%.*s", (int)len, p);
        p += len + (eol != NULL);
        n++;
        if (strncmp(line, ld->file, flen) != 0 ||
            sscanf(line + flen, ":%d:%d: %n", &l, &c, &used) < 2 || used == 0) {
            load_msg(ld, RES_ERROR, 0, 0, resource, "", "%s", line);
            continue;
        }
        path = line + flen + used;
        reason = strstr(path, ": ");
        if (reason == NULL) {
            load_msg(ld, RES_ERROR, l, c, resource, "", "%s", path);
            continue;
        }
        *reason = '\0';
        reason += 2;
        {
            char full[600];
            snprintf(full, sizeof(full), "%s%s%s", prefix,
                     path[0] && prefix[0] ? "." : "", path);
            load_msg(ld, RES_ERROR, l, c, resource, full, "%s", reason);
        }
    }
    buf_consume(text, buf_len(text));
    return n;
}

/* scalar_of() returns the string of a scalar node, or NULL. */
static const char *scalar_of(const struct ynode *n)
{
    if (n == NULL || n->type != YNODE_SCALAR || yscalar_is_null(n))
        return NULL;
    return n->str;
}

static const char *const other_istio_kinds[] = {
    "Sidecar",    "EnvoyFilter", "WorkloadGroup", "ProxyConfig", "Telemetry",
    "WasmPlugin", NULL,
};

/*
 * add_resource() puts r in the set. A Kind ns/name defined twice (in two
 * files, or twice in one) is an error at both places, never a silent
 * choice by file name: the set then has errors, so a running gateway
 * keeps the definition in effect and a start is refused. The first
 * definition read stays in the set, so the rest can be analysed.
 * Returns 0 when r was taken, 1 when it was refused, -1 without memory.
 */
static int add_resource(struct loader *ld, struct resource *r,
                        const char *resource)
{
    struct resource_set *set = ld->set;
    size_t from = 0, to = set->n, slot = 0;

    /* With the index, only the one resource of the same identity (if
     * any) is compared below. */
    idx_grow(set, set->n + 1);
    if (set->idx != NULL) {
        slot = idx_slot(set, r->kind, r->meta.ns, r->meta.name);
        from = set->idx[slot] ? set->idx[slot] - 1 : set->n;
        to = set->idx[slot] ? from + 1 : set->n;
    }
    for (size_t i = from; i < to; i++) {
        struct resource *o = set->v[i];
        if (o->kind == r->kind && strcmp(o->meta.name, r->meta.name) == 0 &&
            strcmp(o->meta.ns, r->meta.ns) == 0 && ld->expect != NULL &&
            i < ld->dir_n) {
            /* The documented precedence: etcd's definition (the fleet's)
             * replaces the directory's (the node's). */
            res_msgs_add(&set->msgs, "STR0002", RES_WARNING, r->file, r->line,
                         r->col, resource, "metadata",
                         "%s %s/%s replaces the one at %s:%d:%d (etcd "
                         "takes precedence over config.dir)",
                         res_kind_name(r->kind), r->meta.ns, r->meta.name,
                         o->file, o->line, o->col);
            resource_free(o);
            set->v[i] = r;
            return 0;
        }
        if (o->kind == r->kind && strcmp(o->meta.name, r->meta.name) == 0 &&
            strcmp(o->meta.ns, r->meta.ns) == 0) {
            res_msgs_add(&set->msgs, "STR0004", RES_ERROR, r->file, r->line,
                         r->col, resource, "metadata",
                         "%s %s/%s is also defined at %s:%d:%d: a resource "
                         "is defined once (this definition is not used)",
                         res_kind_name(r->kind), r->meta.ns, r->meta.name,
                         o->file, o->line, o->col);
            res_msgs_add(&set->msgs, "STR0004", RES_ERROR, o->file, o->line,
                         o->col, resource, "metadata",
                         "%s %s/%s is also defined at %s:%d:%d: a resource "
                         "is defined once",
                         res_kind_name(r->kind), r->meta.ns, r->meta.name,
                         r->file, r->line, r->col);
            return 1;
        }
    }
    if ((set->n & (set->n - 1)) == 0) {
        struct resource **v =
            realloc(set->v, (set->n ? set->n * 2 : 8) * sizeof(*v));
        if (v == NULL)
            return -1;
        set->v = v;
    }
    set->v[set->n++] = r;
    if (set->idx != NULL)
        set->idx[slot] = set->n;
    return 0;
}

static const char *const top_keys[] = {"apiVersion", "kind",   "metadata",
                                       "spec",       "status", NULL};

/*
 * negative_conditions() is Istio's ConditionAnalyzer (IST0171) for the
 * kinds strait reads: a status condition that says the resource is not
 * in effect (AuthorizationPolicy ZtunnelAccepted or WaypointAccepted
 * False, or WaypointAccepted PartiallyInvalid; ServiceEntry and
 * WorkloadEntry istio.io/WaypointBound False).
 */
static void negative_conditions(struct loader *ld, int kind,
                                const struct ynode *root, const char *resource)
{
    const struct ynode *conds =
        ymap_get(ymap_get(root, "status"), "conditions");

    if (conds == NULL || conds->type != YNODE_SEQ)
        return;
    for (size_t i = 0; i < conds->n; i++) {
        const struct ynode *c = conds->items[i];
        const char *type = scalar_of(ymap_get(c, "type"));
        const char *status = scalar_of(ymap_get(c, "status"));
        const char *reason = scalar_of(ymap_get(c, "reason"));
        const char *message = scalar_of(ymap_get(c, "message"));
        int is_false = status != NULL && strcmp(status, "False") == 0;
        int report = 0;

        if (type == NULL)
            continue;
        if (kind == RES_AUTHORIZATION_POLICY)
            report = (is_false && (strcmp(type, "ZtunnelAccepted") == 0 ||
                                   strcmp(type, "WaypointAccepted") == 0)) ||
                     (strcmp(type, "WaypointAccepted") == 0 && reason &&
                      strcmp(reason, "PartiallyInvalid") == 0);
        else if (kind == RES_SERVICE_ENTRY || kind == RES_WORKLOAD_ENTRY)
            report = is_false && strcmp(type, "istio.io/WaypointBound") == 0;
        if (report)
            res_msgs_add(&ld->set->msgs, "IST0171", RES_WARNING, ld->file,
                         c->line, c->col, resource, "status.conditions",
                         "A condition with a negative status is present: "
                         "type=%s, reason=%s, message=%s.",
                         type, reason ? reason : "", message ? message : "");
    }
}

/* load_doc() checks and decodes one document. */
static void load_doc(struct loader *ld, const struct ynode *root)
{
    const char *api, *kind, *name, *ns, *group_end, *group;
    const struct ynode *meta, *spec;
    char resource[600];
    struct resource *r = NULL;
    struct buf text;
    struct ynode body;
    int k, nerr = 0, bad_version = 0;

    memset(&body, 0, sizeof(body));

    buf_init(&text, 256 * 1024);
    if (root->type != YNODE_MAP) {
        load_msg(ld, RES_ERROR, root->line, root->col, "", "",
                 "a resource is a mapping (apiVersion, kind, metadata, "
                 "spec), got %s",
                 ynode_type_name(root));
        goto out;
    }
    api = scalar_of(ymap_get(root, "apiVersion"));
    kind = scalar_of(ymap_get(root, "kind"));
    meta = ymap_get(root, "metadata");
    name = scalar_of(ymap_get(meta, "name"));
    ns = scalar_of(ymap_get(meta, "namespace"));
    snprintf(resource, sizeof(resource), "%.64s %.253s/%.253s",
             kind ? kind : "(no kind)", ns ? ns : ld->default_ns,
             name ? name : "(no name)");
    if (api == NULL || kind == NULL) {
        load_msg(ld, RES_ERROR, root->line, root->col, resource, "",
                 "missing key '%s'", api == NULL ? "apiVersion" : "kind");
        goto out;
    }
    k = res_k8s_kind(api, kind);
    if (k >= 0)
        goto decode;
    group_end = strchr(api, '/');
    for (k = 0; k < RES_KIND_COUNT; k++)
        if (group_end != NULL &&
            (size_t)(group_end - api) == strlen(kind_groups[k]) &&
            strncmp(api, kind_groups[k], (size_t)(group_end - api)) == 0)
            break;
    if (k == RES_KIND_COUNT) {
        load_msg(ld, RES_INFO, root->line, root->col, resource, "apiVersion",
                 "%s %s: not an Istio networking or security resource, nor "
                 "a Kubernetes kind strait reads (v1 Service, Secret, "
                 "Namespace, Node, Pod; discovery.k8s.io/v1 EndpointSlice); "
                 "ignored",
                 api, kind);
        goto out;
    }
    group = kind_groups[k];
    if (strcmp(group, "strait.io") == 0) {
        /* strait's own kinds: one version so far. */
        bad_version = strcmp(group_end + 1, "v1alpha1") != 0;
    } else if (strcmp(group_end + 1, "v1") != 0 &&
               strcmp(group_end + 1, "v1beta1") != 0 &&
               (strcmp(group_end + 1, "v1alpha3") != 0 ||
                strcmp(group, "networking.istio.io") != 0))
        bad_version = 1;
    for (k = 0; k < RES_KIND_COUNT; k++)
        if (strcmp(kind, kind_names[k]) == 0 &&
            strcmp(kind_groups[k], group) == 0)
            break;
    if (k == RES_KIND_COUNT &&
        strcmp(group, "gateway.networking.k8s.io") == 0) {
        /* A Gateway API kind strait does not implement yet (GRPCRoute,
         * TLSRoute, TCPRoute, BackendTLSPolicy, ListenerSet, ...) is
         * refused: skipped without a word, its traffic would silently
         * go nowhere. */
        load_msg(ld, RES_ERROR, ymap_get(root, "kind")->line,
                 ymap_get(root, "kind")->col, resource, "kind",
                 "%s %s is not supported by strait yet (it reads "
                 "GatewayClass, Gateway, HTTPRoute and ReferenceGrant)",
                 api, kind);
        goto out;
    }
    if (k == RES_KIND_COUNT) {
        for (int i = 0; other_istio_kinds[i] != NULL; i++) {
            if (strcmp(kind, other_istio_kinds[i]) == 0) {
                load_msg(ld, RES_INFO, root->line, root->col, resource, "kind",
                         "%s is not used by strait; ignored", kind);
                goto out;
            }
        }
        char kinds[256];
        size_t off = 0;

        kinds[0] = '\0';
        for (int i = 0; i < RES_KIND_COUNT && off < sizeof(kinds); i++)
            if (strcmp(kind_groups[i], group) == 0)
                off += (size_t)snprintf(kinds + off, sizeof(kinds) - off,
                                        "%s%s", off ? ", " : "", kind_names[i]);
        /* istioctl analyze skips a document whose kind it has no schema
         * for without a word (its file source drops an unknown
         * group/version/kind), so this is no schema error. strait skips
         * it too but says so as a Warning of its own: in an Istio group
         * it is most often a typo (VirtualSevice) that would otherwise
         * leave a route out unseen. In strait's own group, or a
         * Kubernetes one strait reads, strait's schema is the reference
         * and an unknown kind stays an error. */
        if (strcmp(group, "networking.istio.io") == 0 ||
            strcmp(group, "security.istio.io") == 0)
            res_msgs_add(&ld->set->msgs, "STR0008", RES_WARNING, ld->file,
                         ymap_get(root, "kind")->line,
                         ymap_get(root, "kind")->col, resource, "kind",
                         "unknown kind '%s' in %s (strait reads %s); the "
                         "document is ignored, as istioctl analyze ignores "
                         "a kind it does not know",
                         kind, group, kinds);
        else
            load_msg(ld, RES_ERROR, ymap_get(root, "kind")->line,
                     ymap_get(root, "kind")->col, resource, "kind",
                     "unknown kind '%s' in %s (%s)", kind, group, kinds);
        goto out;
    }
    if (bad_version) {
        load_msg(ld, RES_ERROR, ymap_get(root, "apiVersion")->line,
                 ymap_get(root, "apiVersion")->col, resource, "apiVersion",
                 "unsupported version '%s' (%s)", group_end + 1,
                 strcmp(group, "security.istio.io") == 0 ? "v1 or v1beta1"
                 : strcmp(group, "strait.io") == 0       ? "v1alpha1"
                                                   : "v1, v1beta1 or v1alpha3");
        nerr++;
    }
decode:
    for (size_t i = 0; !kind_ext[k]->toplevel && i < root->n; i++) {
        const char *key = root->pairs[i].key->str;
        int j;
        for (j = 0; top_keys[j] != NULL; j++)
            if (strcmp(key, top_keys[j]) == 0)
                break;
        if (top_keys[j] == NULL) {
            load_msg(ld, RES_ERROR, root->pairs[i].key->line,
                     root->pairs[i].key->col, resource, key, "unknown key");
            nerr++;
        }
    }

    r = calloc(1, sizeof(*r));
    if (r == NULL)
        goto out;
    r->kind = (enum res_kind)k;
    r->file = ld->file;
    r->line = root->line;
    r->col = root->col;
    r->api_version = strdup(api);
    conf_defaults(&meta_section, &r->meta);
    r->spec = calloc(1, kind_ops[k]->spec_size);
    if (r->api_version == NULL || r->spec == NULL) {
        free(r->spec);
        r->spec = NULL;
        goto out;
    }
    conf_defaults(kind_ops[k]->spec, r->spec);

    if (meta == NULL || (meta->type == YNODE_SCALAR && yscalar_is_null(meta))) {
        load_msg(ld, RES_ERROR, root->line, root->col, resource, "",
                 "missing key 'metadata'");
        nerr++;
    } else if (conf_decode(&meta_section, meta, &r->meta, ld->file, &text) >
               0) {
        nerr += take_conf_errors(ld, &text, resource, "metadata");
    } else if (r->meta.name == NULL) {
        load_msg(ld, RES_ERROR, meta->line, meta->col, resource, "metadata",
                 "missing key 'name'");
        nerr++;
    } else if (!valid_subdomain(r->meta.name)) {
        const struct ynode *nn = ymap_get(meta, "name");
        load_msg(ld, RES_ERROR, nn->line, nn->col, resource, "metadata.name",
                 "'%s' is not a valid name (lower-case letters, digits, '-' "
                 "and '.', at most 253)",
                 r->meta.name);
        nerr++;
    }

    /* Without metadata.namespace: the namespace of the directory the
     * file is in, else config.defaultNamespace (kubectl apply -n). */
    if (ns == NULL && r->meta.ns != NULL &&
        strcmp(r->meta.ns, ld->default_ns) != 0) {
        char *d = strdup(ld->default_ns);
        if (d == NULL)
            goto out;
        free(r->meta.ns);
        r->meta.ns = d;
    }

    /* An etcd key names its resource: a value that is another one would
     * be found under the wrong key by strait get and delete. */
    if (ld->expect != NULL && nerr == 0 && r->meta.name != NULL &&
        r->meta.ns != NULL &&
        (strcmp(kind, ld->expect->kind) != 0 ||
         strcmp(r->meta.ns, ld->expect->ns) != 0 ||
         strcmp(r->meta.name, ld->expect->rname) != 0)) {
        load_msg(ld, RES_ERROR, meta != NULL ? meta->line : root->line,
                 meta != NULL ? meta->col : root->col, resource, "metadata",
                 "the key is for %s %s/%s, the value is %s %s/%s",
                 ld->expect->kind, ld->expect->ns, ld->expect->rname, kind,
                 r->meta.ns, r->meta.name);
        nerr++;
    }

    spec = ymap_get(root, "spec");
    if (kind_ext[k]->toplevel) {
        /* The document itself, less its identity, holds the keys. */
        body.type = YNODE_MAP;
        body.line = root->line;
        body.col = root->col;
        body.pairs = calloc(root->n ? root->n : 1, sizeof(*body.pairs));
        if (body.pairs == NULL)
            goto out;
        for (size_t i = 0; i < root->n; i++) {
            const char *key = root->pairs[i].key->str;
            if (strcmp(key, "apiVersion") != 0 && strcmp(key, "kind") != 0 &&
                strcmp(key, "metadata") != 0)
                body.pairs[body.n++] = root->pairs[i];
        }
        spec = &body;
    }
    /* An AuthorizationPolicy without spec is Istio's allow-nothing
     * (ALLOW, no rules): it is one, and denies every request. */
    if (spec == NULL && k != RES_AUTHORIZATION_POLICY &&
        !kind_ext[k]->optional_spec) {
        load_msg(ld, RES_ERROR, root->line, root->col, resource, "",
                 "missing key 'spec'");
        nerr++;
    } else if (spec != NULL &&
               !(spec->type == YNODE_SCALAR && yscalar_is_null(spec)) &&
               conf_decode(kind_ops[k]->spec, spec, r->spec, ld->file, &text) >
                   0) {
        nerr += take_conf_errors(ld, &text, resource,
                                 kind_ext[k]->toplevel ? "" : "spec");
    }
    if (nerr == 0) {
        struct res_check ck = {&ld->set->msgs, r, resource, 0, ld->set->stop};
        kind_ops[k]->check(&ck, r);
        nerr += ck.nerr;
    }
    if (nerr == 0) {
        negative_conditions(ld, k, root, resource);
        if (add_resource(ld, r, resource) == 0)
            r = NULL;
    }
out:
    free(body.pairs);
    resource_free(r);
    buf_dispose(&text);
}

/*
 * load_doc_or_list() loads a document, or each item of a `kind: List`
 * (apiVersion v1), as kubectl and istioctl read one: `kubectl get -o
 * yaml` writes several resources that way.
 */
static void load_doc_or_list(struct loader *ld, const struct ynode *root)
{
    const char *api, *kind;
    const struct ynode *items;

    if (root->type == YNODE_MAP) {
        api = scalar_of(ymap_get(root, "apiVersion"));
        kind = scalar_of(ymap_get(root, "kind"));
        if (api != NULL && kind != NULL && strcmp(api, "v1") == 0 &&
            strcmp(kind, "List") == 0) {
            items = ymap_get(root, "items");
            if (items == NULL || items->type != YNODE_SEQ) {
                if (items != NULL && !yscalar_is_null(items))
                    load_msg(ld, RES_ERROR, items->line, items->col, "List",
                             "items",
                             "a List's items are a list of resources, got %s",
                             ynode_type_name(items));
                return;
            }
            for (size_t i = 0; i < items->n; i++)
                load_doc(ld, items->items[i]);
            return;
        }
    }
    load_doc(ld, root);
}

/* add_file() records a file name in the set; messages point at it. */
static const char *add_file(struct resource_set *set, const char *name)
{
    char **v = realloc(set->files, (set->nfiles + 1) * sizeof(*v));

    if (v == NULL)
        return NULL;
    set->files = v;
    v[set->nfiles] = strdup(name);
    if (v[set->nfiles] == NULL)
        return NULL;
    return v[set->nfiles++];
}

static void load_bytes_as(struct resource_set *set, const char *data,
                          size_t len, const char *name, const char *default_ns,
                          const struct res_input *expect, size_t dir_n)
{
    struct loader ld = {set, add_file(set, name), default_ns, expect, dir_n};
    struct ydoc *docs = NULL;
    size_t ndocs = 0;
    char *err = NULL;

    if (ld.file == NULL)
        return;
    if (yaml_load(data, len, ld.file, &docs, &ndocs, &err) < 0) {
        struct buf text;
        buf_init(&text, 4096);
        buf_printf(&text, "%s\n", err ? err : "cannot parse");
        /* yaml_load's message has no key path: put one in so the split
         * after "file:line:col: " finds the reason. */
        {
            const char *p = buf_cstr(&text);
            int l = 0, c = 0, used = 0;
            size_t flen = strlen(ld.file);
            if (strncmp(p, ld.file, flen) == 0 &&
                sscanf(p + flen, ":%d:%d: %n", &l, &c, &used) >= 2 && used)
                load_msg(&ld, RES_ERROR, l, c, "", "", "%.*s",
                         (int)(strlen(p + flen + used) - 1), p + flen + used);
            else
                load_msg(&ld, RES_ERROR, 0, 0, "", "", "%s",
                         err ? err : "cannot parse");
        }
        buf_dispose(&text);
        free(err);
        return;
    }
    if (expect != NULL) {
        const struct ynode *second = NULL;
        size_t n = 0;
        for (size_t i = 0; i < ndocs; i++)
            if (docs[i].root != NULL && ++n == 2)
                second = docs[i].root;
        if (n != 1) {
            load_msg(&ld, RES_ERROR, second ? second->line : 1,
                     second ? second->col : 1, "", "",
                     "an etcd key holds one resource, this value has %zu", n);
            yaml_docs_free(docs, ndocs);
            return;
        }
        for (size_t i = 0; i < ndocs; i++)
            if (docs[i].root != NULL)
                load_doc(&ld, docs[i].root);
        yaml_docs_free(docs, ndocs);
        return;
    }
    for (size_t i = 0; i < ndocs; i++)
        if (docs[i].root != NULL)
            load_doc_or_list(&ld, docs[i].root);
    yaml_docs_free(docs, ndocs);
}

static void load_bytes(struct resource_set *set, const char *data, size_t len,
                       const char *name, const char *default_ns)
{
    load_bytes_as(set, data, len, name, default_ns, NULL, 0);
}

static void load_file(struct resource_set *set, const char *path,
                      const char *default_ns)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    char *data;
    size_t n;

    if (f == NULL || fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size > RESOURCE_MAX_FILE_BYTES) {
        const char *why = f == NULL ? strerror(errno)
                          : !S_ISREG(st.st_mode)
                              ? "not a regular file"
                              : "larger than the 64 MiB a resource file may be";
        res_msgs_add(&set->msgs, "IST0106", RES_ERROR, path, 0, 0, "", "",
                     "cannot read: %s", why);
        if (f != NULL)
            fclose(f);
        return;
    }
    data = malloc((size_t)st.st_size + 1);
    if (data == NULL) {
        fclose(f);
        res_msgs_add(&set->msgs, "IST0106", RES_ERROR, path, 0, 0, "", "",
                     "out of memory");
        return;
    }
    n = fread(data, 1, (size_t)st.st_size, f);
    fclose(f);
    load_bytes(set, data, n, path, default_ns);
    free(data);
    if (set->progress != NULL)
        set->progress->fn(set->progress->arg, RES_PROGRESS_FILE, path,
                          set->nfiles, set->n);
}

static int has_ext(const char *name)
{
    return suffix_of(name, ".yaml") || suffix_of(name, ".yml") ||
           suffix_of(name, ".json");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * load_dir() loads the resource files of directory path (d open on it) in
 * name order, with default_ns for documents without a namespace. At the
 * top (ns_dirs set), each subdirectory whose name is a namespace name is
 * loaded the same way with its name as the default namespace (conf.d/foo/
 * x.yaml is in foo unless it says otherwise); deeper ones, names starting
 * with '.' (editors' temporaries, the kubelet's ..data) and directories
 * named like files are not read.
 */
static void load_dir(struct resource_set *set, const char *path, DIR *d,
                     const char *default_ns, int ns_dirs)
{
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, plen = strlen(path);
    int slash = plen > 0 && path[plen - 1] == '/';

    while ((de = readdir(d)) != NULL) {
        char **v;
        if (de->d_name[0] == '.' || (!has_ext(de->d_name) && !ns_dirs))
            continue;
        if (n == RES_MAX_FILES) {
            res_msgs_add(&set->msgs, "IST0106", RES_ERROR, path, 0, 0, "", "",
                         "more than %d resource files", RES_MAX_FILES);
            break;
        }
        v = realloc(names, (n + 1) * sizeof(*v));
        if (v == NULL)
            break;
        names = v;
        if (asprintf(&names[n], "%s%s%s", path, slash ? "" : "/", de->d_name) <
            0)
            break;
        n++;
    }
    if (n > 1) /* names is NULL in an empty directory */
        qsort(names, n, sizeof(*names), cmp_str);
    for (size_t i = 0; i < n; i++) {
        const char *base = names[i] + plen + !slash;
        struct stat st;
        int is_dir = stat(names[i], &st) == 0 && S_ISDIR(st.st_mode);

        if (is_dir && !has_ext(base)) {
            const char *why = NULL;
            DIR *sub;
            if (res_valid_label(base, strlen(base), NULL, &why) < 0)
                res_msgs_add(&set->msgs, "STR0001", RES_INFO, names[i], 0, 0,
                             "", "",
                             "not read: a subdirectory holds the resources "
                             "of the namespace it is named after, and '%s' "
                             "is not a namespace name (%s)",
                             base, why);
            else if ((sub = opendir(names[i])) != NULL) {
                load_dir(set, names[i], sub, base, 0);
                closedir(sub);
            } else
                res_msgs_add(&set->msgs, "IST0106", RES_ERROR, names[i], 0, 0,
                             "", "", "cannot read: %s", strerror(errno));
        } else if (!is_dir && has_ext(base)) {
            load_file(set, names[i], default_ns);
        }
        free(names[i]);
    }
    free(names);
}

static struct resource_set *set_new(void)
{
    struct resource_set *set = calloc(1, sizeof(*set));

    if (set == NULL)
        return NULL;
    set->domain = strdup("cluster.local");
    if (set->domain == NULL) {
        free(set);
        return NULL;
    }
    return set;
}

/*
 * lower_gateway_api() adds the Istio Gateways and VirtualServices that
 * the set's Gateway API objects mean (gwapi.h), decoded by the same
 * loader as written ones, so they are checked, analysed and compiled
 * like them and the data path has nothing new to do.
 */
static void lower_gateway_api(struct resource_set *set)
{
    struct buf yaml;

    buf_init(&yaml, RESOURCE_MAX_FILE_BYTES);
    if (gwapi_lower(set, &yaml) < 0)
        res_msgs_add(&set->msgs, "IST0106", RES_ERROR, "", 0, 0, "", "",
                     "out of memory lowering the Gateway API objects");
    else if (buf_len(&yaml) > 0)
        load_bytes(set, buf_ptr(&yaml), buf_len(&yaml), GWAPI_FILE, "default");
    buf_dispose(&yaml);
}

/* finish() reports errors to the caller's buffer and count. */
static struct resource_set *finish(struct resource_set *set, struct buf *errs,
                                   int *nerr)
{
    lower_gateway_api(set);
    if (res_k8s_link(set) < 0)
        res_msgs_add(&set->msgs, "IST0106", RES_ERROR, "", 0, 0, "", "",
                     "out of memory building the Services' endpoints");
    if (errs != NULL) {
        for (size_t i = 0; i < set->msgs.n; i++) {
            if (set->msgs.v[i].level != RES_ERROR)
                continue;
            if (buf_len(errs) > RESOURCE_MAX_ERR_BYTES) {
                buf_printf(errs, "(%zu more errors not shown)\n",
                           set->msgs.nerr - i);
                break;
            }
            res_msg_line(errs, &set->msgs.v[i]);
        }
    }
    if (nerr != NULL)
        *nerr = (int)set->msgs.nerr;
    return set;
}

struct resource_set *resource_load(const char *path, struct buf *errs,
                                   int *nerr)
{
    return resource_load_ns(path, NULL, errs, nerr);
}

struct resource_set *resource_load_ns(const char *path, const char *default_ns,
                                      struct buf *errs, int *nerr)
{
    return resource_load_progress(path, default_ns, NULL, errs, nerr);
}

struct resource_set *resource_load_progress(const char *path,
                                            const char *default_ns,
                                            const struct res_progress *progress,
                                            struct buf *errs, int *nerr)
{
    struct resource_set *set = set_new();
    DIR *d;

    if (set == NULL) {
        if (nerr != NULL)
            *nerr = 1;
        return NULL;
    }
    set->progress = progress;
    if (default_ns == NULL || default_ns[0] == '\0')
        default_ns = "default";
    d = opendir(path);
    if (d != NULL) {
        load_dir(set, path, d, default_ns, 1);
        closedir(d);
    } else if (errno == ENOTDIR) {
        load_file(set, path, default_ns);
    } else {
        res_msgs_add(&set->msgs, "IST0106", RES_ERROR, path, 0, 0, "", "",
                     "cannot read: %s", strerror(errno));
    }
    set->progress = NULL; /* the caller's, valid during the load only */
    return finish(set, errs, nerr);
}

struct resource_set *resource_load_inputs(const char *dir,
                                          const char *default_ns,
                                          const struct res_input *in, size_t n,
                                          struct buf *errs, int *nerr)
{
    return resource_load_inputs_stop(dir, default_ns, in, n, NULL, errs, nerr);
}

struct resource_set *resource_load_inputs_stop(const char *dir,
                                               const char *default_ns,
                                               const struct res_input *in,
                                               size_t n, const int *stop,
                                               struct buf *errs, int *nerr)
{
    struct resource_set *set = set_new();
    size_t dir_n;

    if (set == NULL) {
        if (nerr != NULL)
            *nerr = 1;
        return NULL;
    }
    set->stop = stop;
    if (default_ns == NULL || default_ns[0] == '\0')
        default_ns = "default";
    if (dir != NULL && dir[0] != '\0') {
        DIR *d = opendir(dir);
        if (d != NULL) {
            load_dir(set, dir, d, default_ns, 1);
            closedir(d);
        } else if (errno == ENOTDIR) {
            load_file(set, dir, default_ns);
        } else {
            res_msgs_add(&set->msgs, "IST0106", RES_ERROR, dir, 0, 0, "", "",
                         "cannot read: %s", strerror(errno));
        }
    }
    dir_n = set->n;
    for (size_t i = 0; i < n; i++) {
        /* Stopped (the process exits, or a newer load replaces this one):
         * what is left is not read, and the set says so as an error, so
         * no part of it is ever taken for the whole. */
        if (stop != NULL && __atomic_load_n(stop, __ATOMIC_RELAXED)) {
            res_msgs_add(&set->msgs, "IST0106", RES_ERROR, "", 0, 0, "", "",
                         "the load was stopped before its end");
            break;
        }
        if (in[i].kind != NULL && in[i].kind[0] == '\0') {
            const char *f = add_file(set, in[i].name);
            res_msgs_add(&set->msgs, "IST0106", RES_ERROR, f ? f : "", 1, 1, "",
                         "",
                         "a key is PREFIX/KIND/NAMESPACE/NAME (KIND one of "
                         "Gateway, VirtualService, DestinationRule, "
                         "ServiceEntry, WorkloadEntry, AuthorizationPolicy, "
                         "PeerAuthentication, RequestAuthentication)");
            continue;
        }
        /* A value without metadata.namespace is in its key's namespace. */
        load_bytes_as(set, in[i].data, in[i].len, in[i].name,
                      in[i].kind != NULL ? in[i].ns : default_ns,
                      in[i].kind != NULL ? &in[i] : NULL, dir_n);
    }
    /* The flag is borrowed for the load only. */
    set->stop = NULL;
    return finish(set, errs, nerr);
}

struct resource_set *resource_load_mem(const char *data, size_t len,
                                       const char *name, struct buf *errs,
                                       int *nerr)
{
    struct resource_set *set = set_new();

    if (set == NULL) {
        if (nerr != NULL)
            *nerr = 1;
        return NULL;
    }
    load_bytes(set, data, len, name, "default");
    return finish(set, errs, nerr);
}
