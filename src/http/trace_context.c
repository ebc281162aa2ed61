/*
 * W3C Trace Context and B3 headers. See trace_context.h.
 */
#include "config.h"

#include <string.h>

#include "http/trace_context.h"

#define TRACESTATE_MAX_MEMBERS 32

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* n lowercase hex digits into n/2 bytes; -1 on anything else. */
static int unhex(const char *p, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i += 2) {
        int hi = hexval(p[i]), lo = hexval(p[i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

int tctx_parse_traceparent(const char *p, size_t n, struct tctx *out)
{
    uint8_t version, flags;
    struct tctx t;

    if (n < 55 || unhex(p, 2, &version) < 0 || version == 0xff)
        return -1;
    /* Version 00 has nothing after the flags; a later one may add fields
     * after a '-', which this version does not read. */
    if ((version == 0 && n != 55) || (n > 55 && p[55] != '-'))
        return -1;
    if (p[2] != '-' || p[35] != '-' || p[52] != '-')
        return -1;
    if (unhex(p + 3, 32, t.trace_id) < 0 ||
        unhex(p + 36, 16, t.parent_id) < 0 || unhex(p + 53, 2, &flags) < 0)
        return -1;
    if (all_zero(t.trace_id, 16) || all_zero(t.parent_id, 8))
        return -1;
    t.sampled = flags & 1;
    *out = t;
    return 0;
}

static int key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '*' || c == '/';
}

static int key_valid(const char *k, size_t n)
{
    const char *at = memchr(k, '@', n);

    if (n == 0)
        return 0;
    if (at == NULL) {
        if (n > 256 || !(k[0] >= 'a' && k[0] <= 'z'))
            return 0;
        for (size_t i = 1; i < n; i++)
            if (!key_char(k[i]))
                return 0;
        return 1;
    }
    {
        size_t tn = (size_t)(at - k), sn = n - tn - 1;
        const char *sys = at + 1;

        if (tn == 0 || tn > 241 || sn == 0 || sn > 14)
            return 0;
        if (!((k[0] >= 'a' && k[0] <= 'z') || (k[0] >= '0' && k[0] <= '9')))
            return 0;
        for (size_t i = 1; i < tn; i++)
            if (!key_char(k[i]))
                return 0;
        if (!(sys[0] >= 'a' && sys[0] <= 'z'))
            return 0;
        for (size_t i = 1; i < sn; i++)
            if (!key_char(sys[i]))
                return 0;
        return 1;
    }
}

static int value_valid(const char *v, size_t n)
{
    if (n == 0 || n > 256 || v[n - 1] == ' ')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] < 0x20 || v[i] > 0x7e || v[i] == ',' || v[i] == '=')
            return 0;
    return 1;
}

int tctx_tracestate_valid(const char *p, size_t n)
{
    struct {
        const char *k;
        size_t n;
    } keys[TRACESTATE_MAX_MEMBERS];
    size_t nkeys = 0, i = 0;

    while (i <= n) {
        const char *m = p + i, *comma = memchr(m, ',', n - i), *eq;
        size_t len = comma ? (size_t)(comma - m) : n - i;

        i += len + 1;
        /* Optional whitespace (space, tab) around a member. */
        while (len > 0 && (m[0] == ' ' || m[0] == '\t')) {
            m++;
            len--;
        }
        while (len > 0 && (m[len - 1] == ' ' || m[len - 1] == '\t'))
            len--;
        if (len == 0)
            continue;
        eq = memchr(m, '=', len);
        if (eq == NULL || nkeys == TRACESTATE_MAX_MEMBERS)
            return 0;
        if (!key_valid(m, (size_t)(eq - m)) ||
            !value_valid(eq + 1, len - (size_t)(eq - m) - 1))
            return 0;
        for (size_t k = 0; k < nkeys; k++)
            if (keys[k].n == (size_t)(eq - m) &&
                memcmp(keys[k].k, m, keys[k].n) == 0)
                return 0;
        keys[nkeys].k = m;
        keys[nkeys].n = (size_t)(eq - m);
        nkeys++;
    }
    return 1;
}

/* A B3 trace id is 16 or 32 hex digits (a 64-bit one is the low half). */
static int b3_trace_id(const char *p, size_t n, uint8_t out[16])
{
    memset(out, 0, 16);
    if (n == 32)
        return unhex(p, 32, out) == 0 && !all_zero(out, 16) ? 0 : -1;
    if (n == 16)
        return unhex(p, 16, out + 8) == 0 && !all_zero(out, 16) ? 0 : -1;
    return -1;
}

static int b3_span_id(const char *p, size_t n, uint8_t out[8])
{
    return n == 16 && unhex(p, 16, out) == 0 && !all_zero(out, 8) ? 0 : -1;
}

static int b3_sampled(struct slice v)
{
    if (slice_eq_str(v, "1") || slice_eq_str(v, "d") || slice_eq_str(v, "true"))
        return 1;
    if (slice_eq_str(v, "0") || slice_eq_str(v, "false"))
        return 0;
    return -1;
}

/* The single header: {trace}-{span}[-{sampled}[-{parent}]]; a lone
 * sampling state ("0") carries no context. */
static int b3_single(struct slice v, struct tctx *out)
{
    const char *d1 = memchr(v.p, '-', v.n), *d2;
    struct tctx t;

    if (d1 == NULL)
        return -1;
    if (b3_trace_id(v.p, (size_t)(d1 - v.p), t.trace_id) < 0)
        return -1;
    d2 = memchr(d1 + 1, '-', v.n - (size_t)(d1 + 1 - v.p));
    if (b3_span_id(d1 + 1, (size_t)((d2 ? d2 : v.p + v.n) - d1 - 1),
                   t.parent_id) < 0)
        return -1;
    t.sampled = -1;
    if (d2 != NULL) {
        const char *d3 = memchr(d2 + 1, '-', v.n - (size_t)(d2 + 1 - v.p));
        struct slice s = {d2 + 1, (size_t)((d3 ? d3 : v.p + v.n) - d2 - 1)};
        t.sampled = b3_sampled(s);
        if (t.sampled < 0)
            return -1;
        if (d3 != NULL) {
            uint8_t parent[8];
            if (b3_span_id(d3 + 1, v.n - (size_t)(d3 + 1 - v.p), parent) < 0)
                return -1;
        }
    }
    *out = t;
    return 0;
}

int tctx_from_fields(const struct http_fields *f, struct tctx *out,
                     int *state_ok, int *b3_one)
{
    const struct http_field *tp = NULL, *b3 = NULL, *tid = NULL, *sid = NULL;
    const struct http_field *smp = NULL, *flg = NULL;
    int ntp = 0;

    *state_ok = 0;
    *b3_one = 0;
    for (size_t i = 0; i < f->n; i++) {
        const struct http_field *x = &f->v[i];
        if (slice_eq_str(x->name, "traceparent")) {
            tp = x;
            ntp++;
        } else if (slice_eq_str(x->name, "b3")) {
            b3 = x;
        } else if (slice_eq_str(x->name, "x-b3-traceid")) {
            tid = x;
        } else if (slice_eq_str(x->name, "x-b3-spanid")) {
            sid = x;
        } else if (slice_eq_str(x->name, "x-b3-sampled")) {
            smp = x;
        } else if (slice_eq_str(x->name, "x-b3-flags")) {
            flg = x;
        }
    }
    if (ntp == 1 &&
        tctx_parse_traceparent(tp->value.p, tp->value.n, out) == 0) {
        /* tracestate: every field of it, as one list (RFC 9110 5.3):
         * 32 members of at most 514 bytes each, and their commas. */
        char joined[TRACESTATE_MAX_MEMBERS * 515];
        size_t len = 0;
        int any = 0, fits = 1;
        for (size_t i = 0; i < f->n; i++) {
            const struct http_field *x = &f->v[i];
            if (!slice_eq_str(x->name, "tracestate"))
                continue;
            if (len + x->value.n + 1 > sizeof(joined)) {
                fits = 0;
                break;
            }
            if (any)
                joined[len++] = ',';
            memcpy(joined + len, x->value.p, x->value.n);
            len += x->value.n;
            any = 1;
        }
        *state_ok = any && fits && tctx_tracestate_valid(joined, len);
        return 1;
    }
    if (b3 != NULL && b3_single(b3->value, out) == 0) {
        *b3_one = 1;
        return 2;
    }
    if (tid != NULL && sid != NULL &&
        b3_trace_id(tid->value.p, tid->value.n, out->trace_id) == 0 &&
        b3_span_id(sid->value.p, sid->value.n, out->parent_id) == 0) {
        out->sampled = smp != NULL ? b3_sampled(smp->value) : -1;
        if (flg != NULL && slice_eq_str(flg->value, "1"))
            out->sampled = 1; /* debug */
        return 2;
    }
    return 0;
}

void tctx_hex(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

void tctx_traceparent(const uint8_t trace_id[16], const uint8_t span_id[8],
                      int sampled, char out[56])
{
    out[0] = '0';
    out[1] = '0';
    out[2] = '-';
    tctx_hex(trace_id, 16, out + 3);
    out[35] = '-';
    tctx_hex(span_id, 8, out + 36);
    out[52] = '-';
    out[53] = '0';
    out[54] = sampled > 0 ? '1' : '0';
    out[55] = '\0';
}
