/*
 * Istio's certificate API on the wire (see ca_grpc.h): a protobuf encoder
 * and decoder for the two messages, written by hand because they hold
 * three fields, and gRPC's message framing.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/ca/ca_grpc.h"
#include "control/ca/pki.h"
#include "core/arena.h"
#include "core/buf.h"
#include "core/json.h"

/* Protobuf wire types. */
enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

const char *ca_grpc_status_name(int code, char buf[16])
{
    switch (code) {
    case 0:
        return "OK";
    case 1:
        return "CANCELLED";
    case 2:
        return "UNKNOWN";
    case 3:
        return "INVALID_ARGUMENT";
    case 4:
        return "DEADLINE_EXCEEDED";
    case 5:
        return "NOT_FOUND";
    case 7:
        return "PERMISSION_DENIED";
    case 8:
        return "RESOURCE_EXHAUSTED";
    case 9:
        return "FAILED_PRECONDITION";
    case 12:
        return "UNIMPLEMENTED";
    case 13:
        return "INTERNAL";
    case 14:
        return "UNAVAILABLE";
    case 16:
        return "UNAUTHENTICATED";
    default:
        snprintf(buf, 16, "code %d", code);
        return buf;
    }
}

/* Reads a varint (at most 10 bytes); the bytes used, or -1. */
static int varint(const uint8_t *p, size_t n, uint64_t *v)
{
    uint64_t x = 0;

    for (size_t i = 0; i < n && i < 10; i++) {
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if ((p[i] & 0x80) == 0) {
            /* The tenth byte may carry one bit only. */
            if (i == 9 && p[i] > 1)
                return -1;
            *v = x;
            return (int)i + 1;
        }
    }
    return -1;
}

/* One field of a message. */
struct field {
    uint32_t num;
    int wt;
    uint64_t v;       /* WT_VARINT */
    const uint8_t *p; /* WT_LEN */
    size_t len;
};

/* Reads the field at *off; 1 with f filled, 0 at the end, -1 when bad. */
static int next_field(const uint8_t *p, size_t n, size_t *off, struct field *f,
                      const char **why)
{
    uint64_t key, len;
    int k;

    if (*off >= n)
        return 0;
    k = varint(p + *off, n - *off, &key);
    if (k < 0 || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
        *why = "bad protobuf field key";
        return -1;
    }
    *off += (size_t)k;
    f->num = (uint32_t)(key >> 3);
    f->wt = (int)(key & 7);
    switch (f->wt) {
    case WT_VARINT:
        k = varint(p + *off, n - *off, &f->v);
        if (k < 0) {
            *why = "bad protobuf varint";
            return -1;
        }
        *off += (size_t)k;
        return 1;
    case WT_I64:
    case WT_I32: {
        size_t w = f->wt == WT_I64 ? 8 : 4;
        if (n - *off < w) {
            *why = "protobuf message cut short";
            return -1;
        }
        *off += w;
        return 1;
    }
    case WT_LEN:
        k = varint(p + *off, n - *off, &len);
        if (k < 0 || len > n - *off - (size_t)k) {
            *why = "protobuf length past the message";
            return -1;
        }
        *off += (size_t)k;
        f->p = p + *off;
        f->len = (size_t)len;
        *off += (size_t)len;
        return 1;
    default:
        /* Groups (3, 4) are gone from proto3; 6 and 7 never existed. */
        *why = "unsupported protobuf wire type";
        return -1;
    }
}

/* A string field's copy, NUL-terminated; NULL with *why. A NUL inside is
 * refused: every string here is PEM text. */
static char *str_dup(const struct field *f, const char **why)
{
    char *s;

    if (f->wt != WT_LEN) {
        *why = "a string field with a wrong wire type";
        return NULL;
    }
    if (memchr(f->p, '\0', f->len) != NULL) {
        *why = "a string field holding a NUL byte";
        return NULL;
    }
    s = malloc(f->len + 1);
    if (s == NULL) {
        *why = "out of memory";
        return NULL;
    }
    memcpy(s, f->p, f->len);
    s[f->len] = '\0';
    return s;
}

int ca_grpc_request_decode(const uint8_t *p, size_t n,
                           struct ca_grpc_request *req, const char **why)
{
    struct field f;
    size_t off = 0;
    int rc;

    memset(req, 0, sizeof(*req));
    while ((rc = next_field(p, n, &off, &f, why)) > 0) {
        if (f.num == 1) {
            char *s = str_dup(&f, why);
            if (s == NULL)
                return -1;
            free(req->csr);
            req->csr = s;
        } else if (f.num == 3) {
            if (f.wt != WT_VARINT) {
                *why = "validity_duration with a wrong wire type";
                return -1;
            }
            /* int64: a negative value arrives as its two's complement. */
            if ((int64_t)f.v < 0) {
                *why = "validity_duration is negative";
                return -1;
            }
            req->validity_s = (int64_t)f.v;
        } else if (f.num == 4) {
            if (f.wt != WT_LEN) {
                *why = "metadata with a wrong wire type";
                return -1;
            }
            /* An empty Struct is the same as none. */
            req->has_metadata = f.len > 0;
        }
    }
    if (rc < 0)
        return -1;
    if (req->csr == NULL || req->csr[0] == '\0') {
        *why = "no csr in the request";
        return -1;
    }
    return 0;
}

void ca_grpc_request_dispose(struct ca_grpc_request *req)
{
    free(req->csr);
    req->csr = NULL;
}

/* Appends a copy of f's string to v (at most CA_GRPC_MAX_CERTS together
 * with *other). */
static int add_cert(char **v, size_t *n, size_t other, const struct field *f,
                    const char **why)
{
    char *s;

    if (*n + other >= CA_GRPC_MAX_CERTS) {
        *why = "more certificates than strait takes (8)";
        return -1;
    }
    s = str_dup(f, why);
    if (s == NULL)
        return -1;
    v[(*n)++] = s;
    return 0;
}

int ca_grpc_response_decode(const uint8_t *p, size_t n,
                            struct ca_grpc_response *resp, const char **why)
{
    char *roots[CA_GRPC_MAX_CERTS];
    size_t nroots = 0, off = 0, roff;
    struct field f, g;
    int rc, rr = 0;

    memset(resp, 0, sizeof(*resp));
    while ((rc = next_field(p, n, &off, &f, why)) > 0) {
        if (f.num == 1) {
            if (add_cert(resp->certs, &resp->nchain, nroots, &f, why) < 0)
                break;
        } else if (f.num == 2) {
            if (f.wt != WT_LEN) {
                *why = "root_cert with a wrong wire type";
                rc = -1;
                break;
            }
            roff = 0;
            while ((rr = next_field(f.p, f.len, &roff, &g, why)) > 0)
                if (g.num == 1 &&
                    add_cert(roots, &nroots, resp->nchain, &g, why) < 0)
                    break;
            if (rr != 0)
                break;
        }
    }
    /* cert_chain first, then root_cert's, whatever the order on the
     * wire. */
    resp->n = resp->nchain;
    for (size_t i = 0; i < nroots; i++)
        resp->certs[resp->n++] = roots[i];
    if (rc != 0 || rr != 0)
        return -1;
    if (resp->nchain == 0) {
        *why = "no cert_chain in the response";
        return -1;
    }
    return 0;
}

void ca_grpc_response_dispose(struct ca_grpc_response *resp)
{
    for (size_t i = 0; i < resp->n; i++)
        free(resp->certs[i]);
    resp->n = 0;
    resp->nchain = 0;
}

static size_t varint_put(uint8_t *out, uint64_t v)
{
    size_t i = 0;

    while (v >= 0x80) {
        out[i++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[i++] = (uint8_t)v;
    return i;
}

static int put_varint(struct buf *b, uint64_t v)
{
    uint8_t tmp[10];

    return buf_append(b, tmp, varint_put(tmp, v));
}

static int put_string(struct buf *b, uint32_t num, const char *s)
{
    size_t n = strlen(s);

    if (put_varint(b, (uint64_t)num << 3 | WT_LEN) < 0 ||
        put_varint(b, n) < 0 || buf_append(b, s, n) < 0)
        return -1;
    return 0;
}

/* Writes the 5-byte prefix of the message built in b from start on. */
static int frame_close(struct buf *b, size_t start)
{
    size_t len = buf_len(b) - start - 5;
    uint8_t *pre = (uint8_t *)buf_ptr(b) + start;

    if (len > CA_GRPC_MAX_MESSAGE) {
        buf_truncate(b, start);
        return -1;
    }
    pre[0] = 0;
    pre[1] = (uint8_t)(len >> 24);
    pre[2] = (uint8_t)(len >> 16);
    pre[3] = (uint8_t)(len >> 8);
    pre[4] = (uint8_t)len;
    return 0;
}

int ca_grpc_request_encode(struct buf *b, const char *csr, int64_t validity_s)
{
    size_t start = buf_len(b);
    static const uint8_t zero[5];

    if (buf_append(b, zero, 5) < 0 || put_string(b, 1, csr) < 0 ||
        (validity_s > 0 && (put_varint(b, 3 << 3 | WT_VARINT) < 0 ||
                            put_varint(b, (uint64_t)validity_s) < 0))) {
        buf_truncate(b, start);
        return -1;
    }
    return frame_close(b, start);
}

int ca_grpc_response_encode(struct buf *b, const char *const *pems, size_t n)
{
    size_t start = buf_len(b);
    static const uint8_t zero[5];

    if (buf_append(b, zero, 5) < 0) {
        buf_truncate(b, start);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (put_string(b, 1, pems[i]) < 0) {
            buf_truncate(b, start);
            return -1;
        }
    return frame_close(b, start);
}

ssize_t ca_grpc_frame_parse(const uint8_t *p, size_t n, size_t max,
                            const uint8_t **msg, size_t *msg_len,
                            const char **why)
{
    uint32_t len;

    if (n < 5)
        return 0;
    if (p[0] != 0) {
        *why = p[0] == 1 ? "a compressed gRPC message (no grpc-encoding was "
                           "agreed)"
                         : "a bad gRPC frame flag";
        return -1;
    }
    len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 |
          (uint32_t)p[4];
    if (len > max) {
        *why = "a gRPC message over the size limit";
        return -1;
    }
    if (n - 5 < len)
        return 0;
    *msg = p + 5;
    *msg_len = len;
    return (ssize_t)len + 5;
}

int ca_grpc_message_encode(struct buf *b, const char *msg)
{
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++) {
        if (*c < 0x20 || *c > 0x7e || *c == '%') {
            if (buf_printf(b, "%%%02X", *c) < 0)
                return -1;
        } else if (buf_append(b, c, 1) < 0) {
            return -1;
        }
    }
    return 0;
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

void ca_grpc_message_decode(const char *p, size_t n, char *out, size_t cap)
{
    size_t o = 0;

    if (cap == 0)
        return;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        int hi, lo;
        if (p[i] == '%' && i + 2 < n && (hi = hexval(p[i + 1])) >= 0 &&
            (lo = hexval(p[i + 2])) >= 0) {
            char c = (char)(hi << 4 | lo);
            /* A control byte is shown as '?': this ends in a log line. */
            out[o++] = (unsigned char)c < 0x20 ? '?' : c;
            i += 2;
        } else {
            out[o++] = (unsigned char)p[i] < 0x20 ? '?' : p[i];
        }
    }
    out[o] = '\0';
}

int ca_grpc_token_claims(const char *tok, size_t n, const char *audience,
                         int64_t *exp, int *aud)
{
    const char *d1 = memchr(tok, '.', n), *d2;
    const struct json *claims, *a, *e;
    struct arena mem;
    uint8_t *payload;
    ssize_t plen;
    const char *why;
    int rc = -1;

    *exp = 0;
    *aud = -1;
    if (d1 == NULL || n > 65536)
        return -1;
    d2 = memchr(d1 + 1, '.', (size_t)(tok + n - d1 - 1));
    if (d2 == NULL)
        return -1;
    payload = malloc((size_t)(d2 - d1));
    if (payload == NULL)
        return -1;
    plen = pki_b64url_decode(d1 + 1, (size_t)(d2 - d1 - 1), payload,
                             (size_t)(d2 - d1));
    arena_init(&mem, 4096);
    claims = plen > 0 ? json_parse_max(&mem, (const char *)payload,
                                       (size_t)plen, 16, 4096, 0, &why)
                      : NULL;
    if (claims == NULL || claims->type != JSON_OBJECT)
        goto done;
    e = json_get(claims, "exp");
    if (e != NULL && e->type == JSON_NUMBER && e->num > 0 && e->num < 1e15)
        *exp = (int64_t)e->num;
    a = json_get(claims, "aud");
    if (a != NULL && a->type == JSON_STRING) {
        *aud = slice_eq_str(a->str, audience);
    } else if (a != NULL && a->type == JSON_ARRAY) {
        *aud = 0;
        for (const struct json *x = a->child; x != NULL; x = x->next)
            if (x->type == JSON_STRING && slice_eq_str(x->str, audience))
                *aud = 1;
    }
    rc = 0;
done:
    arena_dispose(&mem);
    free(payload);
    return rc;
}
