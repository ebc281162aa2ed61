/*
 * JSON bodies of the CA API. The reader handles the JSON grammar in full
 * (skipping what it does not need, with a nesting limit) but keeps only
 * the few fields of the API.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "control/ca/ca_api.h"
#include "core/buf.h"
#include "core/json.h"

#define MAX_DEPTH 16

struct jr {
    const char *p, *end;
    const char *why;
};

static void ws(struct jr *r)
{
    while (r->p < r->end &&
           (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int hex4(struct jr *r, unsigned *v)
{
    *v = 0;
    if (r->end - r->p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        int h = hexval(r->p[i]);
        if (h < 0)
            return -1;
        *v = (*v << 4) | (unsigned)h;
    }
    r->p += 4;
    return 0;
}

static void put_utf8(struct buf *b, unsigned cp)
{
    char u[4];
    size_t n;

    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    buf_append(b, u, n);
}

/* A string at r->p; its decoded bytes go to out when out is not NULL. */
static int str(struct jr *r, struct buf *out)
{
    if (r->p >= r->end || *r->p != '"') {
        r->why = "expected a string";
        return -1;
    }
    r->p++;
    while (r->p < r->end) {
        unsigned char c = (unsigned char)*r->p++;
        if (c == '"')
            return 0;
        if (c < 0x20) {
            r->why = "control character in a string";
            return -1;
        }
        if (c != '\\') {
            if (out && buf_append(out, &c, 1) < 0)
                goto big;
            continue;
        }
        if (r->p >= r->end)
            break;
        c = (unsigned char)*r->p++;
        switch (c) {
        case '"':
        case '\\':
        case '/':
            break;
        case 'b':
            c = '\b';
            break;
        case 'f':
            c = '\f';
            break;
        case 'n':
            c = '\n';
            break;
        case 'r':
            c = '\r';
            break;
        case 't':
            c = '\t';
            break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(r, &cp) < 0)
                goto bad;
            if (cp >= 0xdc00 && cp <= 0xdfff)
                goto bad;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u')
                    goto bad;
                r->p += 2;
                if (hex4(r, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
                    goto bad;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0)
                goto bad;
            if (out)
                put_utf8(out, cp);
            continue;
        }
        default:
            goto bad;
        }
        if (out && buf_append(out, &c, 1) < 0)
            goto big;
    }
    r->why = "unterminated string";
    return -1;
bad:
    r->why = "bad escape in a string";
    return -1;
big:
    r->why = "string too long";
    return -1;
}

static int literal(struct jr *r, const char *lit)
{
    size_t n = strlen(lit);

    if ((size_t)(r->end - r->p) < n || memcmp(r->p, lit, n) != 0) {
        r->why = "invalid JSON value";
        return -1;
    }
    r->p += n;
    return 0;
}

/* A number; its integer value in *v when it is a non-negative integer
 * that fits (else *v = -1). */
static int number(struct jr *r, int64_t *v)
{
    const char *s = r->p;
    int integer = 1, digits = 0;
    int64_t acc = 0;

    if (r->p < r->end && *r->p == '-') {
        integer = 0;
        r->p++;
    }
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        if (acc > (INT64_MAX - 9) / 10)
            integer = 0;
        else
            acc = acc * 10 + (*r->p - '0');
        r->p++;
        digits++;
    }
    if (digits == 0 || (digits > 1 && s[s[0] == '-'] == '0')) {
        r->why = "invalid number";
        return -1;
    }
    if (r->p < r->end && *r->p == '.') {
        integer = 0;
        r->p++;
        if (r->p >= r->end || *r->p < '0' || *r->p > '9') {
            r->why = "invalid number";
            return -1;
        }
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            r->p++;
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        integer = 0;
        r->p++;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
            r->p++;
        if (r->p >= r->end || *r->p < '0' || *r->p > '9') {
            r->why = "invalid number";
            return -1;
        }
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            r->p++;
    }
    if (v)
        *v = integer ? acc : -1;
    return 0;
}

static int skip(struct jr *r, int depth)
{
    ws(r);
    if (depth > MAX_DEPTH) {
        r->why = "JSON nested too deeply";
        return -1;
    }
    if (r->p >= r->end) {
        r->why = "truncated JSON";
        return -1;
    }
    switch (*r->p) {
    case '"':
        return str(r, NULL);
    case 't':
        return literal(r, "true");
    case 'f':
        return literal(r, "false");
    case 'n':
        return literal(r, "null");
    case '[':
    case '{': {
        char close = *r->p == '[' ? ']' : '}';
        int obj = close == '}';
        r->p++;
        ws(r);
        if (r->p < r->end && *r->p == close) {
            r->p++;
            return 0;
        }
        for (;;) {
            if (obj) {
                ws(r);
                if (str(r, NULL) < 0)
                    return -1;
                ws(r);
                if (r->p >= r->end || *r->p != ':') {
                    r->why = "expected ':'";
                    return -1;
                }
                r->p++;
            }
            if (skip(r, depth + 1) < 0)
                return -1;
            ws(r);
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                continue;
            }
            if (r->p < r->end && *r->p == close) {
                r->p++;
                return 0;
            }
            r->why = "expected ',' or a closing bracket";
            return -1;
        }
    }
    default:
        return number(r, NULL);
    }
}

static char *take(struct buf *b)
{
    /* An empty buffer may have no storage at all. */
    char *s = buf_len(b) ? strndup(buf_ptr(b), buf_len(b)) : strdup("");

    buf_dispose(b);
    return s;
}

/*
 * Walks the top-level object, calling on_field for each key; on_field
 * either consumes the value (returns 0 or -1) or returns 1 to have it
 * skipped.
 */
static int object(struct jr *r,
                  int (*on_field)(struct jr *r, const char *key, void *arg),
                  void *arg)
{
    ws(r);
    if (r->p >= r->end || *r->p != '{') {
        r->why = "expected a JSON object";
        return -1;
    }
    r->p++;
    ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        goto end;
    }
    for (;;) {
        struct buf key;
        char *k;
        int rc;

        ws(r);
        buf_init(&key, 256);
        if (str(r, &key) < 0) {
            buf_dispose(&key);
            return -1;
        }
        k = take(&key);
        if (k == NULL)
            return -1;
        ws(r);
        if (r->p >= r->end || *r->p != ':') {
            free(k);
            r->why = "expected ':'";
            return -1;
        }
        r->p++;
        ws(r);
        rc = on_field(r, k, arg);
        free(k);
        if (rc < 0 || (rc == 1 && skip(r, 1) < 0))
            return -1;
        ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            break;
        }
        r->why = "expected ',' or '}'";
        return -1;
    }
end:
    ws(r);
    if (r->p != r->end) {
        r->why = "trailing bytes after the JSON object";
        return -1;
    }
    return 0;
}

static int string_field(struct jr *r, char **dst, size_t max)
{
    struct buf b;

    if (*dst != NULL) {
        r->why = "duplicate field";
        return -1;
    }
    buf_init(&b, max);
    if (str(r, &b) < 0) {
        buf_dispose(&b);
        return -1;
    }
    if (buf_len(&b) > 0 && memchr(buf_ptr(&b), '\0', buf_len(&b)) != NULL) {
        buf_dispose(&b);
        r->why = "NUL in a string";
        return -1;
    }
    *dst = take(&b);
    return *dst ? 0 : -1;
}

static int request_field(struct jr *r, const char *key, void *arg)
{
    struct ca_api_request *req = arg;

    if (strcmp(key, "csr") == 0)
        return string_field(r, &req->csr, CA_API_MAX_BODY);
    if (strcmp(key, "validity_duration") == 0 ||
        strcmp(key, "validityDuration") == 0) {
        int64_t v = -1;
        if (r->p < r->end && *r->p == '"') {
            char *s = NULL;
            struct jr sub;
            if (string_field(r, &s, 32) < 0)
                return -1;
            sub.p = s;
            sub.end = s + strlen(s);
            if (number(&sub, &v) < 0 || sub.p != sub.end)
                v = -1;
            free(s);
        } else if (number(r, &v) < 0) {
            return -1;
        }
        if (v < 0) {
            r->why = "validity_duration must be a whole number of seconds";
            return -1;
        }
        req->validity_s = v;
        return 0;
    }
    return 1;
}

int ca_api_request_parse(const char *body, size_t n, struct ca_api_request *req,
                         const char **why)
{
    struct jr r = {body, body + n, NULL};

    memset(req, 0, sizeof(*req));
    if (n > CA_API_MAX_BODY) {
        *why = "request body too large";
        return -1;
    }
    if (object(&r, request_field, req) < 0) {
        *why = r.why ? r.why : "invalid JSON";
        return -1;
    }
    if (req->csr == NULL) {
        *why = "missing field 'csr'";
        return -1;
    }
    return 0;
}

void ca_api_request_dispose(struct ca_api_request *req)
{
    free(req->csr);
    req->csr = NULL;
}

static int response_field(struct jr *r, const char *key, void *arg)
{
    struct ca_api_response *resp = arg;

    if (strcmp(key, "error") == 0)
        return string_field(r, &resp->error, 4096);
    if (strcmp(key, "cert_chain") == 0 || strcmp(key, "certChain") == 0) {
        if (resp->n > 0) {
            r->why = "duplicate field";
            return -1;
        }
        if (r->p >= r->end || *r->p != '[') {
            r->why = "cert_chain must be a list of strings";
            return -1;
        }
        r->p++;
        ws(r);
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            return 0;
        }
        for (;;) {
            ws(r);
            if (resp->n == CA_API_MAX_CHAIN) {
                r->why = "cert_chain too long";
                return -1;
            }
            if (string_field(r, &resp->chain[resp->n], CA_API_MAX_BODY) < 0)
                return -1;
            resp->n++;
            ws(r);
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                continue;
            }
            if (r->p < r->end && *r->p == ']') {
                r->p++;
                return 0;
            }
            r->why = "expected ',' or ']'";
            return -1;
        }
    }
    return 1;
}

int ca_api_response_parse(const char *body, size_t n,
                          struct ca_api_response *resp, const char **why)
{
    struct jr r = {body, body + n, NULL};

    memset(resp, 0, sizeof(*resp));
    if (n > CA_API_MAX_BODY) {
        *why = "response body too large";
        return -1;
    }
    if (object(&r, response_field, resp) < 0) {
        *why = r.why ? r.why : "invalid JSON";
        return -1;
    }
    if (resp->n == 0 && resp->error == NULL) {
        *why = "response has neither cert_chain nor error";
        return -1;
    }
    return 0;
}

void ca_api_response_dispose(struct ca_api_response *resp)
{
    for (size_t i = 0; i < resp->n; i++)
        free(resp->chain[i]);
    free(resp->error);
    memset(resp, 0, sizeof(*resp));
}

int ca_api_request_write(struct buf *b, const char *csr, int64_t validity_s)
{
    if (buf_puts(b, "{\"csr\":") < 0 || json_str(b, csr) < 0)
        return -1;
    return buf_printf(b, ",\"validity_duration\":%lld}",
                      (long long)validity_s) < 0
               ? -1
               : 0;
}

int ca_api_response_write(struct buf *b, const char *const *pems, size_t n)
{
    if (buf_puts(b, "{\"cert_chain\":[") < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((i > 0 && buf_puts(b, ",") < 0) || json_str(b, pems[i]) < 0)
            return -1;
    return buf_puts(b, "]}") < 0 ? -1 : 0;
}

int ca_api_error_write(struct buf *b, const char *msg)
{
    if (buf_puts(b, "{\"error\":") < 0 || json_str(b, msg) < 0)
        return -1;
    return buf_puts(b, "}") < 0 ? -1 : 0;
}
