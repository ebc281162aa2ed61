/*
 * Envoy access-log format strings: compiled once into operations, run
 * per request. See access_format.h.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/ascii.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/json.h"
#include "http/access_format.h"

/* The longest operator argument (a header name, a time format) and the
 * most operations a format may hold: formats are written by operators,
 * and a bound keeps a mistaken one from costing much per request. */
#define AFMT_MAX_ARG 256
#define AFMT_MAX_OPS 512
#define AFMT_MAX_SRC 16384

enum afmt_kind {
    AF_LIT,
    AF_START_TIME,
    AF_REQ,
    AF_RESP,
    AF_TRAILER,
    AF_REQ_WITHOUT_QUERY,
    AF_RESPONSE_CODE,
    AF_RESPONSE_FLAGS,
    AF_RESPONSE_CODE_DETAILS,
    AF_CONNECTION_TERMINATION_DETAILS,
    AF_UPSTREAM_TRANSPORT_FAILURE_REASON,
    AF_BYTES_RECEIVED,
    AF_BYTES_SENT,
    AF_DURATION,
    AF_UPSTREAM_HOST,
    AF_UPSTREAM_CLUSTER,
    AF_UPSTREAM_LOCAL_ADDRESS,
    AF_DOWNSTREAM_LOCAL_ADDRESS,
    AF_DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT,
    AF_DOWNSTREAM_REMOTE_ADDRESS,
    AF_DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT,
    AF_DOWNSTREAM_DIRECT_REMOTE_ADDRESS,
    AF_DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT,
    AF_REQUESTED_SERVER_NAME,
    AF_ROUTE_NAME,
    AF_PROTOCOL,
    AF_DOWNSTREAM_PEER_URI_SAN,
    AF_HOSTNAME,
    AF_UPSTREAM_REQUEST_ATTEMPT_COUNT,
};

/* How an operator is written. */
enum afmt_arg { ARG_NONE, ARG_HEADER, ARG_TIME };

struct afmt_opdef {
    const char *name;
    enum afmt_kind kind;
    enum afmt_arg arg;
    int number; /* JSON: a number when alone in its member */
    unsigned needs;
};

static const struct afmt_opdef opdefs[] = {
    {"START_TIME", AF_START_TIME, ARG_TIME, 0, 0},
    {"REQ", AF_REQ, ARG_HEADER, 0, 0},
    {"RESP", AF_RESP, ARG_HEADER, 0, 0},
    {"TRAILER", AF_TRAILER, ARG_HEADER, 0, 0},
    {"REQ_WITHOUT_QUERY", AF_REQ_WITHOUT_QUERY, ARG_HEADER, 0, 0},
    {"RESPONSE_CODE", AF_RESPONSE_CODE, ARG_NONE, 1, 0},
    {"RESPONSE_FLAGS", AF_RESPONSE_FLAGS, ARG_NONE, 0, 0},
    {"RESPONSE_CODE_DETAILS", AF_RESPONSE_CODE_DETAILS, ARG_NONE, 0, 0},
    {"CONNECTION_TERMINATION_DETAILS", AF_CONNECTION_TERMINATION_DETAILS,
     ARG_NONE, 0, 0},
    {"UPSTREAM_TRANSPORT_FAILURE_REASON", AF_UPSTREAM_TRANSPORT_FAILURE_REASON,
     ARG_NONE, 0, 0},
    {"BYTES_RECEIVED", AF_BYTES_RECEIVED, ARG_NONE, 1, 0},
    {"BYTES_SENT", AF_BYTES_SENT, ARG_NONE, 1, 0},
    {"DURATION", AF_DURATION, ARG_NONE, 1, 0},
    {"UPSTREAM_HOST", AF_UPSTREAM_HOST, ARG_NONE, 0, 0},
    {"UPSTREAM_CLUSTER", AF_UPSTREAM_CLUSTER, ARG_NONE, 0, 0},
    /* Envoy's _RAW form skips the alt_stat_name rewrite strait never
     * does: the two are the same here. */
    {"UPSTREAM_CLUSTER_RAW", AF_UPSTREAM_CLUSTER, ARG_NONE, 0, 0},
    {"UPSTREAM_LOCAL_ADDRESS", AF_UPSTREAM_LOCAL_ADDRESS, ARG_NONE, 0,
     AFMT_NEED_UPSTREAM_LOCAL},
    {"DOWNSTREAM_LOCAL_ADDRESS", AF_DOWNSTREAM_LOCAL_ADDRESS, ARG_NONE, 0,
     AFMT_NEED_DOWNSTREAM_LOCAL},
    {"DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT",
     AF_DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT, ARG_NONE, 0,
     AFMT_NEED_DOWNSTREAM_LOCAL},
    {"DOWNSTREAM_REMOTE_ADDRESS", AF_DOWNSTREAM_REMOTE_ADDRESS, ARG_NONE, 0, 0},
    {"DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT",
     AF_DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT, ARG_NONE, 0, 0},
    {"DOWNSTREAM_DIRECT_REMOTE_ADDRESS", AF_DOWNSTREAM_DIRECT_REMOTE_ADDRESS,
     ARG_NONE, 0, 0},
    {"DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT",
     AF_DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT, ARG_NONE, 0, 0},
    {"REQUESTED_SERVER_NAME", AF_REQUESTED_SERVER_NAME, ARG_NONE, 0, 0},
    {"ROUTE_NAME", AF_ROUTE_NAME, ARG_NONE, 0, 0},
    {"PROTOCOL", AF_PROTOCOL, ARG_NONE, 0, 0},
    {"DOWNSTREAM_PEER_URI_SAN", AF_DOWNSTREAM_PEER_URI_SAN, ARG_NONE, 0,
     AFMT_NEED_PEER_URI_SAN},
    {"HOSTNAME", AF_HOSTNAME, ARG_NONE, 0, 0},
    {"UPSTREAM_REQUEST_ATTEMPT_COUNT", AF_UPSTREAM_REQUEST_ATTEMPT_COUNT,
     ARG_NONE, 1, 0},
};

struct afmt_op {
    enum afmt_kind kind;
    size_t maxlen; /* :N; 0: whole */
    char *a;       /* literal, header name (lowercase), time format */
    size_t an;
    char *b; /* the ?alternative header; NULL: none */
    size_t bn;
};

struct afmt_member {
    char *key;
    size_t first; /* its operations: ops[first .. first + n) */
    size_t n;
};

struct afmt {
    int json;
    struct afmt_op *ops;
    size_t nops;
    struct afmt_member *members; /* JSON */
    size_t nmembers;
    unsigned needs;
};

const char afmt_istio_text_src[] =
    "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% "
    "%PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% "
    "%CONNECTION_TERMINATION_DETAILS% \"%UPSTREAM_TRANSPORT_FAILURE_REASON%\" "
    "%BYTES_RECEIVED% %BYTES_SENT% %DURATION% "
    "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" "
    "\"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" "
    "\"%UPSTREAM_HOST%\" %UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% "
    "%DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% "
    "%REQUESTED_SERVER_NAME% %ROUTE_NAME%\n";

/* Istio's EnvoyJSONLogFormatIstio, keys in its order. */
const char afmt_istio_json_src[] =
    "{\"start_time\":\"%START_TIME%\","
    "\"route_name\":\"%ROUTE_NAME%\","
    "\"method\":\"%REQ(:METHOD)%\","
    "\"path\":\"%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%\","
    "\"protocol\":\"%PROTOCOL%\","
    "\"response_code\":\"%RESPONSE_CODE%\","
    "\"response_flags\":\"%RESPONSE_FLAGS%\","
    "\"response_code_details\":\"%RESPONSE_CODE_DETAILS%\","
    "\"connection_termination_details\":"
    "\"%CONNECTION_TERMINATION_DETAILS%\","
    "\"bytes_received\":\"%BYTES_RECEIVED%\","
    "\"bytes_sent\":\"%BYTES_SENT%\","
    "\"duration\":\"%DURATION%\","
    "\"upstream_service_time\":\"%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%\","
    "\"x_forwarded_for\":\"%REQ(X-FORWARDED-FOR)%\","
    "\"user_agent\":\"%REQ(USER-AGENT)%\","
    "\"request_id\":\"%REQ(X-REQUEST-ID)%\","
    "\"authority\":\"%REQ(:AUTHORITY)%\","
    "\"upstream_host\":\"%UPSTREAM_HOST%\","
    "\"upstream_cluster\":\"%UPSTREAM_CLUSTER_RAW%\","
    "\"upstream_local_address\":\"%UPSTREAM_LOCAL_ADDRESS%\","
    "\"downstream_local_address\":\"%DOWNSTREAM_LOCAL_ADDRESS%\","
    "\"downstream_remote_address\":\"%DOWNSTREAM_REMOTE_ADDRESS%\","
    "\"requested_server_name\":\"%REQUESTED_SERVER_NAME%\","
    "\"upstream_transport_failure_reason\":"
    "\"%UPSTREAM_TRANSPORT_FAILURE_REASON%\"}";

void afmt_reference(struct buf *b)
{
    for (size_t i = 0; i < sizeof(opdefs) / sizeof(opdefs[0]); i++) {
        const struct afmt_opdef *d = &opdefs[i];
        /* How compile_op() reads each argument kind. */
        const char *form = d->arg == ARG_HEADER ? "(HEADER[?ALT])[:N]"
                           : d->arg == ARG_TIME ? "[(FORMAT)]"
                                                : "";

        buf_printf(b, "%s\t%%%s%s%%\t%s\n", d->name, d->name, form,
                   d->number ? "number" : "string");
    }
}

void afmt_free(struct afmt *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->nops; i++) {
        free(f->ops[i].a);
        free(f->ops[i].b);
    }
    for (size_t i = 0; i < f->nmembers; i++)
        free(f->members[i].key);
    free(f->ops);
    free(f->members);
    free(f);
}

unsigned afmt_needs(const struct afmt *f)
{
    return f->needs;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);

    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static struct afmt_op *op_new(struct afmt *f, char **err)
{
    struct afmt_op *v;

    if (f->nops >= AFMT_MAX_OPS) {
        err_set(err, "more than %d operators and literals", AFMT_MAX_OPS);
        return NULL;
    }
    v = realloc(f->ops, (f->nops + 1) * sizeof(*v));
    if (v == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    f->ops = v;
    memset(&v[f->nops], 0, sizeof(v[0]));
    return &v[f->nops++];
}

static int lit_add(struct afmt *f, const char *s, size_t n, char **err)
{
    struct afmt_op *op;

    if (n == 0)
        return 0;
    /* Adjacent literals ("%%" splits one) are joined. */
    if (f->nops > 0 && f->ops[f->nops - 1].kind == AF_LIT) {
        op = &f->ops[f->nops - 1];
        char *a = realloc(op->a, op->an + n + 1);
        if (a == NULL) {
            err_set(err, "out of memory");
            return -1;
        }
        memcpy(a + op->an, s, n);
        op->an += n;
        a[op->an] = '\0';
        op->a = a;
        return 0;
    }
    op = op_new(f, err);
    if (op == NULL)
        return -1;
    op->kind = AF_LIT;
    op->a = dup_n(s, n);
    op->an = n;
    if (op->a == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    return 0;
}

static int header_char(char c)
{
    return c > ' ' && c < 0x7f && c != '?' && c != '(' && c != ')';
}

/* "X" or "X?Y" of %REQ(...)%: header names, lowercased; ":name" is a
 * pseudo-header (:method, :path, :authority, :scheme). */
static int header_arg(struct afmt_op *op, const char *s, size_t n, size_t col,
                      char **err)
{
    const char *q = memchr(s, '?', n);
    size_t an = q ? (size_t)(q - s) : n;
    size_t bn = q ? n - an - 1 : 0;

    if (an == 0 || (q != NULL && bn == 0)) {
        err_set(err, "column %zu: empty header name", col);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (s + i != q &&
            (!header_char(s[i]) || (i > 0 && s[i] == ':' && s + i - 1 != q))) {
            err_set(err, "column %zu: bad character in header name", col + i);
            return -1;
        }
    op->a = dup_n(s, an);
    op->an = an;
    if (op->a == NULL)
        goto oom;
    ascii_lower_n(op->a, an);
    if (q != NULL) {
        op->b = dup_n(q + 1, bn);
        op->bn = bn;
        if (op->b == NULL)
            goto oom;
        ascii_lower_n(op->b, bn);
    }
    return 0;
oom:
    err_set(err, "out of memory");
    return -1;
}

/* One operator: s points after its opening '%', in a string of n bytes
 * that starts at column col. Returns the bytes taken up to and including
 * the closing '%', or -1. */
static long op_parse(struct afmt *f, const char *s, size_t n, size_t col,
                     char **err)
{
    size_t i = 0, name_n, arg_at = 0, arg_n = 0;
    const struct afmt_opdef *d = NULL;
    struct afmt_op *op;
    int has_arg = 0;

    while (i < n && ((s[i] >= 'A' && s[i] <= 'Z') || s[i] == '_' ||
                     (s[i] >= '0' && s[i] <= '9')))
        i++;
    name_n = i;
    if (name_n == 0) {
        err_set(err,
                "column %zu: '%%' starts no operator (write %%%% for a "
                "percent sign)",
                col - 1);
        return -1;
    }
    for (size_t k = 0; k < sizeof(opdefs) / sizeof(opdefs[0]); k++)
        if (strlen(opdefs[k].name) == name_n &&
            memcmp(opdefs[k].name, s, name_n) == 0)
            d = &opdefs[k];
    if (d == NULL) {
        err_set(err, "column %zu: unknown operator %%%.*s%%", col - 1,
                (int)(name_n > 64 ? 64 : name_n), s);
        return -1;
    }
    if (i < n && s[i] == '(') {
        /* The argument runs to the ')' that is followed by '%' or ':'
         * (a time format holds parentheses of its own rarely, but may). */
        size_t j = i + 1;
        while (j < n && !(s[j] == ')' &&
                          (j + 1 == n || s[j + 1] == '%' || s[j + 1] == ':')))
            j++;
        if (j >= n) {
            err_set(err, "column %zu: %%%s(: no closing ')'", col - 1, d->name);
            return -1;
        }
        has_arg = 1;
        arg_at = i + 1;
        arg_n = j - i - 1;
        i = j + 1;
    }
    op = op_new(f, err);
    if (op == NULL)
        return -1;
    op->kind = d->kind;
    f->needs |= d->needs;
    if (arg_n > AFMT_MAX_ARG) {
        err_set(err, "column %zu: %%%s%%: argument longer than %d bytes",
                col - 1, d->name, AFMT_MAX_ARG);
        return -1;
    }
    if (d->kind == AF_HOSTNAME) {
        /* The machine's name, read once here (Envoy's %HOSTNAME%). */
        char host[256];
        if (gethostname(host, sizeof(host)) < 0)
            host[0] = '\0';
        host[sizeof(host) - 1] = '\0';
        op->a = dup_n(host, strlen(host));
        op->an = strlen(host);
        if (op->a == NULL) {
            err_set(err, "out of memory");
            return -1;
        }
    }
    switch (d->arg) {
    case ARG_NONE:
        if (has_arg) {
            err_set(err, "column %zu: %%%s%% takes no argument", col - 1,
                    d->name);
            return -1;
        }
        break;
    case ARG_HEADER:
        if (!has_arg) {
            err_set(err, "column %zu: %%%s%% needs a header name: %%%s(X)%%",
                    col - 1, d->name, d->name);
            return -1;
        }
        if (header_arg(op, s + arg_at, arg_n, col + arg_at, err) < 0)
            return -1;
        break;
    case ARG_TIME:
        if (has_arg && arg_n > 0) {
            op->a = dup_n(s + arg_at, arg_n);
            op->an = arg_n;
            if (op->a == NULL) {
                err_set(err, "out of memory");
                return -1;
            }
        }
        break;
    }
    if (i < n && s[i] == ':') {
        size_t v = 0, k = i + 1;

        while (k < n && s[k] >= '0' && s[k] <= '9' && v <= 1000000)
            v = v * 10 + (size_t)(s[k++] - '0');
        if (k == i + 1 || v == 0 || v > 1000000) {
            err_set(err, "column %zu: %%%s%%: ':' wants a length 1-1000000",
                    col + i, d->name);
            return -1;
        }
        if (d->arg != ARG_HEADER) {
            err_set(err, "column %zu: %%%s%% takes no length", col + i,
                    d->name);
            return -1;
        }
        op->maxlen = v;
        i = k;
    }
    if (i >= n || s[i] != '%') {
        err_set(err, "column %zu: %%%s: no closing '%%'", col - 1, d->name);
        return -1;
    }
    return (long)(i + 1);
}

/* Literal text and operators of s (n bytes, starting at column col) as
 * operations appended to f. */
static int text_parse(struct afmt *f, const char *s, size_t n, size_t col,
                      char **err)
{
    size_t i = 0, lit = 0;

    while (i < n) {
        if (s[i] != '%') {
            i++;
            continue;
        }
        if (lit_add(f, s + lit, i - lit, err) < 0)
            return -1;
        if (i + 1 < n && s[i + 1] == '%') {
            if (lit_add(f, "%", 1, err) < 0)
                return -1;
            i += 2;
        } else {
            long t = op_parse(f, s + i + 1, n - i - 1, col + i + 1, err);
            if (t < 0)
                return -1;
            i += 1 + (size_t)t;
        }
        lit = i;
    }
    return lit_add(f, s + lit, n - lit, err);
}

static int json_parse_format(struct afmt *f, const char *s, size_t n,
                             char **err)
{
    struct arena a;
    const char *why = NULL;
    const struct json *root;
    int rc = -1;

    arena_init(&a, 4096);
    root = json_parse(&a, s, n, 4, &why);
    if (root == NULL) {
        err_set(err, "not a JSON object: %s", why ? why : "bad JSON");
        goto done;
    }
    if (root->type != JSON_OBJECT || root->n == 0) {
        err_set(err, "a JSON format is an object of at least one member");
        goto done;
    }
    f->members = calloc(root->n, sizeof(*f->members));
    if (f->members == NULL) {
        err_set(err, "out of memory");
        goto done;
    }
    for (const struct json *m = root->child; m != NULL; m = m->next) {
        struct afmt_member *mb = &f->members[f->nmembers];

        if (m->type != JSON_STRING) {
            err_set(err,
                    "member \"%.*s\": the value must be a string of "
                    "format operators",
                    (int)(m->key.n > 64 ? 64 : m->key.n), m->key.p);
            goto done;
        }
        mb->key = dup_n(m->key.p, m->key.n);
        if (mb->key == NULL) {
            err_set(err, "out of memory");
            goto done;
        }
        f->nmembers++;
        mb->first = f->nops;
        /* Columns inside a member count from the start of its value. */
        if (text_parse(f, m->str.p, m->str.n, 1, err) < 0) {
            err_prefix(err, "member \"%s\": ", mb->key);
            goto done;
        }
        mb->n = f->nops - mb->first;
    }
    rc = 0;
done:
    arena_dispose(&a);
    return rc;
}

struct afmt *afmt_compile(const char *s, size_t n, int json, char **err)
{
    struct afmt *f;

    if (n > AFMT_MAX_SRC) {
        err_set(err, "format longer than %d bytes", AFMT_MAX_SRC);
        return NULL;
    }
    f = calloc(1, sizeof(*f));
    if (f == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    f->json = json;
    if ((json ? json_parse_format(f, s, n, err) : text_parse(f, s, n, 1, err)) <
        0) {
        afmt_free(f);
        return NULL;
    }
    return f;
}

struct afmt *afmt_istio_text(char **err)
{
    return afmt_compile(afmt_istio_text_src, strlen(afmt_istio_text_src), 0,
                        err);
}

struct afmt *afmt_istio_json(char **err)
{
    return afmt_compile(afmt_istio_json_src, strlen(afmt_istio_json_src), 1,
                        err);
}

/* Running a format. */

/* A value found for an operation: text, or a number. */
struct afmt_val {
    const char *p; /* NULL: missing */
    size_t n;
    int number;
    char tmp[96];
};

static const struct http_field *field_get(const struct http_fields *fs,
                                          const char *name, size_t n)
{
    if (fs == NULL)
        return NULL;
    for (size_t i = 0; i < fs->n; i++)
        if (fs->v[i].name.n == n && memcmp(fs->v[i].name.p, name, n) == 0)
            return &fs->v[i];
    return NULL;
}

static struct slice req_header(const struct http_request *req, const char *name,
                               size_t n)
{
    struct slice none = {NULL, 0};
    const struct http_field *fd;

    if (req == NULL)
        return none;
    if (name[0] == ':') {
        struct slice v = none;
        if (n == 7 && memcmp(name, ":method", 7) == 0)
            v = req->method;
        else if (n == 5 && memcmp(name, ":path", 5) == 0)
            v = req->path;
        else if (n == 10 && memcmp(name, ":authority", 10) == 0)
            v = req->authority;
        else if (n == 7 && memcmp(name, ":scheme", 7) == 0)
            v = req->scheme;
        return v.n > 0 ? v : none;
    }
    fd = field_get(&req->fields, name, n);
    if (fd != NULL)
        return fd->value;
    /* HTTP/2 carries Host as :authority. */
    if (n == 4 && memcmp(name, "host", 4) == 0 && req->authority.n > 0)
        return req->authority;
    return none;
}

static struct slice header_val(const struct afmt_op *op,
                               const struct afmt_ctx *c)
{
    struct slice v = {NULL, 0};
    const struct http_fields *fs = op->kind == AF_RESP ? c->resp : c->trailers;

    for (int alt = 0; alt < 2 && v.p == NULL; alt++) {
        const char *name = alt ? op->b : op->a;
        size_t n = alt ? op->bn : op->an;
        const struct http_field *fd;

        if (name == NULL)
            break;
        if (op->kind == AF_REQ || op->kind == AF_REQ_WITHOUT_QUERY) {
            v = req_header(c->req, name, n);
        } else {
            fd = field_get(fs, name, n);
            if (fd != NULL)
                v = fd->value;
        }
    }
    if (v.p != NULL && op->kind == AF_REQ_WITHOUT_QUERY) {
        const char *q = memchr(v.p, '?', v.n);
        if (q != NULL)
            v.n = (size_t)(q - v.p);
    }
    if (v.p != NULL && op->maxlen > 0 && v.n > op->maxlen)
        v.n = op->maxlen;
    return v;
}

/* The time of c as op's strftime format, where %Ns / %Nf (N 1-9, or none
 * for 9) are the fraction of the second; default: Envoy's
 * 2024-01-02T03:04:05.678Z. */
static void start_time(const struct afmt_op *op, const struct afmt_ctx *c,
                       struct afmt_val *v)
{
    time_t sec = (time_t)(c->start_us / 1000000);
    long us = (long)(c->start_us % 1000000);
    struct tm tm;
    char fmt[2 * AFMT_MAX_ARG + 16];
    size_t o = 0;

    gmtime_r(&sec, &tm);
    if (op->a == NULL) {
        size_t len = strftime(v->tmp, sizeof(v->tmp), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(v->tmp + len, sizeof(v->tmp) - len, ".%03ldZ", us / 1000);
        v->p = v->tmp;
        v->n = strlen(v->tmp);
        return;
    }
    /* Rewrite the fraction specifiers into digits before strftime. */
    for (size_t i = 0; i < op->an && o + 12 < sizeof(fmt); i++) {
        char d = i + 1 < op->an ? op->a[i + 1] : '\0';
        if (op->a[i] == '%' && d == 'f') {
            o += (size_t)snprintf(fmt + o, sizeof(fmt) - o, "%06ld000", us);
            i++;
        } else if (op->a[i] == '%' && d >= '1' && d <= '9' && i + 2 < op->an &&
                   op->a[i + 2] == 'f') {
            char digits[16];
            snprintf(digits, sizeof(digits), "%06ld000", us);
            memcpy(fmt + o, digits, (size_t)(d - '0'));
            o += (size_t)(d - '0');
            i += 2;
        } else if (op->a[i] == '%' && d == 's') {
            o += (size_t)snprintf(fmt + o, sizeof(fmt) - o, "%lld",
                                  (long long)sec);
            i++;
        } else if (op->a[i] == '%' && d == '%') {
            fmt[o++] = '%';
            fmt[o++] = '%';
            i++;
        } else {
            fmt[o++] = op->a[i];
        }
    }
    fmt[o] = '\0';
    /* The format is the operator's own, checked when it was compiled
     * only for its length: strftime writes what it can into tmp. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    v->n = strftime(v->tmp, sizeof(v->tmp), fmt, &tm);
#pragma GCC diagnostic pop
    v->p = v->tmp;
}

static void str_val(struct afmt_val *v, const char *s)
{
    if (s != NULL && *s != '\0') {
        v->p = s;
        v->n = strlen(s);
    }
}

/* An IP:PORT without its port ("[::1]:80" gives "::1"). */
static void without_port(struct afmt_val *v, const char *s)
{
    const char *colon;
    size_t n;

    if (s == NULL || *s == '\0')
        return;
    n = strlen(s);
    colon = strrchr(s, ':');
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (end != NULL) {
            v->p = s + 1;
            v->n = (size_t)(end - s - 1);
            return;
        }
    }
    if (colon != NULL && strchr(s, ':') == colon)
        n = (size_t)(colon - s);
    v->p = s;
    v->n = n;
}

static void num_val(struct afmt_val *v, uint64_t x)
{
    snprintf(v->tmp, sizeof(v->tmp), "%" PRIu64, x);
    v->p = v->tmp;
    v->n = strlen(v->tmp);
    v->number = 1;
}

static void op_value(const struct afmt_op *op, const struct afmt_ctx *c,
                     struct afmt_val *v)
{
    v->p = NULL;
    v->n = 0;
    v->number = 0;
    switch (op->kind) {
    case AF_LIT:
        v->p = op->a;
        v->n = op->an;
        break;
    case AF_START_TIME:
        start_time(op, c, v);
        break;
    case AF_REQ:
    case AF_RESP:
    case AF_TRAILER:
    case AF_REQ_WITHOUT_QUERY: {
        struct slice s = header_val(op, c);
        v->p = s.p;
        v->n = s.n;
        break;
    }
    case AF_RESPONSE_CODE:
        /* Envoy writes 0 when no response was sent. */
        num_val(v, (uint64_t)(c->status > 0 ? c->status : 0));
        break;
    case AF_RESPONSE_FLAGS:
        str_val(v, c->flags);
        break;
    case AF_RESPONSE_CODE_DETAILS:
        str_val(v, c->details);
        break;
    case AF_CONNECTION_TERMINATION_DETAILS:
        str_val(v, c->termination);
        break;
    case AF_UPSTREAM_TRANSPORT_FAILURE_REASON:
        str_val(v, c->upstream_failure);
        break;
    case AF_BYTES_RECEIVED:
        num_val(v, c->bytes_received);
        break;
    case AF_BYTES_SENT:
        num_val(v, c->bytes_sent);
        break;
    case AF_DURATION:
        num_val(v, c->duration_ms);
        break;
    case AF_UPSTREAM_HOST:
        str_val(v, c->upstream_host);
        break;
    case AF_UPSTREAM_CLUSTER:
        str_val(v, c->upstream_cluster);
        break;
    case AF_UPSTREAM_LOCAL_ADDRESS:
        str_val(v, c->upstream_local);
        break;
    case AF_DOWNSTREAM_LOCAL_ADDRESS:
        str_val(v, c->downstream_local);
        break;
    case AF_DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT:
        without_port(v, c->downstream_local);
        break;
    case AF_DOWNSTREAM_REMOTE_ADDRESS:
        str_val(v, c->downstream_remote);
        break;
    case AF_DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT:
        without_port(v, c->downstream_remote);
        break;
    case AF_DOWNSTREAM_DIRECT_REMOTE_ADDRESS:
        str_val(v, c->downstream_direct_remote);
        break;
    case AF_DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT:
        without_port(v, c->downstream_direct_remote);
        break;
    case AF_REQUESTED_SERVER_NAME:
        str_val(v, c->sni);
        break;
    case AF_ROUTE_NAME:
        str_val(v, c->route);
        break;
    case AF_PROTOCOL:
        str_val(v, c->protocol);
        break;
    case AF_DOWNSTREAM_PEER_URI_SAN:
        str_val(v, c->peer_uri_san);
        break;
    case AF_HOSTNAME:
        str_val(v, c->hostname != NULL ? c->hostname : op->a);
        break;
    case AF_UPSTREAM_REQUEST_ATTEMPT_COUNT:
        num_val(v, c->attempts);
        break;
    }
}

/* Text: bytes as they are, but control bytes and DEL as \xNN (and the
 * backslash doubled), so a value never breaks the line. */
static int text_escape(struct buf *b, const char *p, size_t n)
{
    size_t run = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 0x20 && ch != 0x7f && ch != '\\')
            continue;
        if (buf_append(b, p + run, i - run) < 0)
            return -1;
        if (ch == '\\' ? buf_puts(b, "\\\\") < 0
                       : buf_printf(b, "\\x%02x", ch) < 0)
            return -1;
        run = i + 1;
    }
    return buf_append(b, p + run, n - run);
}

/* JSON string content, without the quotes json_escape() puts around. */
static int json_inner(struct buf *b, const char *p, size_t n)
{
    size_t at = buf_len(b), len;
    char *d;

    if (json_escape(b, p, n) < 0)
        return -1;
    len = buf_len(b);
    d = b->data + b->head + at;
    memmove(d, d + 1, len - at - 2);
    buf_truncate(b, len - 2);
    return 0;
}

static int write_text(const struct afmt *f, size_t first, size_t n,
                      const struct afmt_ctx *c, struct buf *out, int json)
{
    struct afmt_val v;

    for (size_t i = first; i < first + n; i++) {
        const struct afmt_op *op = &f->ops[i];
        int rc;

        if (op->kind == AF_LIT) {
            rc = json ? json_inner(out, op->a, op->an)
                      : buf_append(out, op->a, op->an);
        } else {
            op_value(op, c, &v);
            if (v.p == NULL)
                rc = buf_append(out, "-", 1);
            else
                rc = json ? json_inner(out, v.p, v.n)
                          : text_escape(out, v.p, v.n);
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int write_json(const struct afmt *f, const struct afmt_ctx *c,
                      struct buf *out)
{
    struct afmt_val v;

    if (buf_puts(out, "{") < 0)
        return -1;
    for (size_t m = 0; m < f->nmembers; m++) {
        const struct afmt_member *mb = &f->members[m];

        if ((m > 0 && buf_puts(out, ",") < 0) || json_str(out, mb->key) < 0 ||
            buf_puts(out, ":") < 0)
            return -1;
        if (mb->n == 1 && f->ops[mb->first].kind != AF_LIT) {
            /* One operator alone: typed, null when missing. */
            op_value(&f->ops[mb->first], c, &v);
            if (v.p == NULL) {
                if (buf_puts(out, "null") < 0)
                    return -1;
                continue;
            }
            if (v.number) {
                if (buf_append(out, v.p, v.n) < 0)
                    return -1;
                continue;
            }
            if (json_escape(out, v.p, v.n) < 0)
                return -1;
            continue;
        }
        if (buf_puts(out, "\"") < 0 ||
            write_text(f, mb->first, mb->n, c, out, 1) < 0 ||
            buf_puts(out, "\"") < 0)
            return -1;
    }
    return buf_puts(out, "}\n");
}

int afmt_write(const struct afmt *f, const struct afmt_ctx *ctx,
               struct buf *out)
{
    size_t at = buf_len(out);

    if (f->json)
        return write_json(f, ctx, out);
    if (write_text(f, 0, f->nops, ctx, out, 0) < 0)
        return -1;
    if (buf_len(out) == at || buf_ptr(out)[buf_len(out) - 1] != '\n')
        return buf_append(out, "\n", 1);
    return 0;
}
