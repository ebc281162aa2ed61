#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/ascii.h"
#include "http/http.h"
#include "http1/parser.h"

/* Character classes (RFC 9110 section 5.6.2 and 5.5); tchar is
 * http_is_tchar(), one table for the parser, the writer and the header
 * checks. */
static int is_tchar(unsigned char c)
{
    return http_is_tchar(c);
}

static int is_ows(unsigned char c)
{
    return c == ' ' || c == '\t';
}

/* field-content octets: VCHAR, obs-text, SP and HTAB; no other control. */
static int is_field_char(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* A request target is a URI reference: visible ASCII only. Raw octets
 * above 0x7e are an unencoded path that servers behind us would each
 * decode their own way, so they are refused rather than passed on. */
static int is_target_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f;
}

/* Host = uri-host [ ":" port ]: reg-name, IP-literal or IPv4 characters. */
static int is_host_char(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9'))
        return 1;
    return c != '\0' && strchr("-._~!$&'()*+,;=:[]%", c) != NULL;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (unsigned char)ascii_lower((char)c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* ---- slices and lists ---------------------------------------------- */

static struct h1_slice slice(const char *p, size_t n)
{
    struct h1_slice s = {p, n};
    return s;
}

static struct h1_slice trim_ows(const char *p, size_t n)
{
    while (n > 0 && is_ows((unsigned char)p[0])) {
        p++;
        n--;
    }
    while (n > 0 && is_ows((unsigned char)p[n - 1]))
        n--;
    return slice(p, n);
}

int h1_slice_eq_ci(struct h1_slice s, const char *lit)
{
    size_t i;

    for (i = 0; i < s.n; i++) {
        if (lit[i] == '\0' || ascii_lower(s.p[i]) != ascii_lower(lit[i]))
            return 0;
    }
    return lit[i] == '\0';
}

static int h1_lit_eq(struct h1_slice s, const char *lit)
{
    size_t n = strlen(lit);

    return s.n == n && memcmp(s.p, lit, n) == 0;
}

int h1_trailer_allowed(struct h1_slice name)
{
    static const char *const banned[] = {
        "content-length", "transfer-encoding", "host", "connection",
        "keep-alive",     "proxy-connection",  "te",   "trailer",
        "upgrade"};
    size_t k;

    for (k = 0; k < sizeof(banned) / sizeof(banned[0]); k++)
        if (h1_slice_eq_ci(name, banned[k]))
            return 0;
    return 1;
}

const struct h1_header *h1_header_find(const struct h1_header *hdrs, size_t n,
                                       const char *name)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (h1_slice_eq_ci(hdrs[i].name, name))
            return &hdrs[i];
    return NULL;
}

/*
 * list_next() takes the next element of a comma-separated list (RFC 9110
 * section 5.6.1) off *rest, with OWS trimmed. Empty elements are skipped,
 * as the list syntax requires of recipients. Returns 1, or 0 at the end.
 * Quoted strings are not understood: a comma inside one splits the element,
 * which for the lists read here (codings, connection options, lengths)
 * only ever turns a strange value into a refused one.
 */
static int list_next(struct h1_slice *rest, struct h1_slice *elem)
{
    while (rest->n > 0) {
        const char *comma = memchr(rest->p, ',', rest->n);
        size_t n = comma ? (size_t)(comma - rest->p) : rest->n;

        *elem = trim_ows(rest->p, n);
        if (comma) {
            rest->p += n + 1;
            rest->n -= n + 1;
        } else {
            rest->p += n;
            rest->n = 0;
        }
        if (elem->n > 0)
            return 1;
    }
    return 0;
}

static int is_token(struct h1_slice s)
{
    size_t i;

    if (s.n == 0)
        return 0;
    for (i = 0; i < s.n; i++)
        if (!is_tchar((unsigned char)s.p[i]))
            return 0;
    return 1;
}

/*
 * split_param() splits a list element "name *( OWS ";" ... )" into its
 * leading token and whether parameters follow. Returns -1 when the element
 * does not start with a token or something other than ';' follows it.
 */
static int split_param(struct h1_slice e, struct h1_slice *name, int *params)
{
    size_t i = 0;

    while (i < e.n && is_tchar((unsigned char)e.p[i]))
        i++;
    *name = slice(e.p, i);
    while (i < e.n && is_ows((unsigned char)e.p[i]))
        i++;
    *params = i < e.n;
    if (i == 0 || (i < e.n && e.p[i] != ';'))
        return -1;
    return 0;
}

/* ---- finding the head ---------------------------------------------- */

/* Where the parts of a complete head are, as offsets into the buffer. */
struct h1_head {
    size_t line;     /* start of the request or status line */
    size_t line_len; /* its length without CRLF */
    size_t fields;   /* first field line (or the final empty line) */
    size_t len;      /* the whole head including the final CRLF */
};

static int fail(const char **why, int *status, const char *reason, int code)
{
    *why = reason;
    *status = code;
    return -1;
}

/*
 * scan_head() looks for the empty line that ends a head, and enforces the
 * limits on what has arrived so far. It looks only at line feeds, so a call
 * on a partial head costs one memchr() pass over at most max_head bytes.
 *
 * skip_empty: skip empty lines before the start line: set for requests,
 *             which is all it changes.
 * Returns 1 with *h filled when the head is complete, 0 when more bytes are
 * needed, -1 with *why and *status (400, 414, 431).
 */
static int scan_head(const char *buf, size_t len, const struct http_limits *lim,
                     int skip_empty, struct h1_head *h, const char **why,
                     int *status)
{
    size_t max_head = lim->max_head < INT_MAX ? lim->max_head : INT_MAX;
    size_t win = len < max_head ? len : max_head;
    size_t start = 0; /* start of the current line */
    size_t nfields = 0;
    int have_line = 0;
    const char *too_long =
        skip_empty ? "request line too long" : "status line too long";

    h->line = 0;
    while (start < win) {
        const char *lf = memchr(buf + start, '\n', win - start);
        size_t i, n;

        if (lf == NULL)
            break;
        i = (size_t)(lf - buf);
        /* We require CRLF: a bare LF ends a line for some parsers and not
         * for others, which is how requests get smuggled. Refusing it here
         * also spares us waiting for a CRLFCRLF that will never come. */
        if (i == start || buf[i - 1] != '\r')
            return fail(why, status, "bare LF", 400);
        n = i - 1 - start;
        if (n == 0 && have_line) {
            h->len = i + 1;
            return 1;
        }
        if (n == 0 && !skip_empty)
            return fail(why, status, "empty start line", 400);
        if (n > 0 && !have_line) {
            if (n > lim->max_request_line)
                return fail(why, status, too_long, 414);
            have_line = 1;
            h->line = start;
            h->line_len = n;
            h->fields = i + 1;
        } else if (n > 0 && ++nfields > lim->max_headers) {
            return fail(why, status, "too many headers", 431);
        }
        start = i + 1;
    }
    if (!have_line) {
        /* A partial start line: a trailing CR may be the first half of its
         * CRLF, so it does not count towards the line's length. */
        size_t n = win - start;

        if (n > 0 && buf[win - 1] == '\r')
            n--;
        if (n > lim->max_request_line)
            return fail(why, status, too_long, 414);
    }
    /* The caller's buffer holds at most max_head bytes: reaching it
     * without the end of the head is already too much. */
    if (len >= max_head)
        return fail(why, status, "head too large", 431);
    return 0;
}

/*
 * check_octets() refuses NUL and any CR that is not followed by LF. Doing
 * it once over the whole head lets the line parsers treat CR as the end of
 * a line and nothing else.
 */
static int check_octets(const char *p, size_t n, const char **why)
{
    size_t off = 0;
    const char *cr;

    if (memchr(p, '\0', n) != NULL) {
        *why = "NUL byte in head";
        return -1;
    }
    while ((cr = memchr(p + off, '\r', n - off)) != NULL) {
        size_t i = (size_t)(cr - p);

        if (i + 1 >= n || p[i + 1] != '\n') {
            *why = "bare CR";
            return -1;
        }
        off = i + 2;
    }
    return 0;
}

/* ---- field lines ----------------------------------------------------- */

/* parse_field_line() checks one field line (without CRLF) and splits it. */
static int parse_field_line(const char *p, size_t n, struct h1_header *hdr,
                            const char **why)
{
    const char *colon;
    size_t i;
    struct h1_slice value;

    /* obs-fold continues the previous value on a new line; RFC 9112
     * section 5.2 lets a server refuse it, and we do: folding is read
     * differently by different implementations. */
    if (is_ows((unsigned char)p[0])) {
        *why = "obs-fold or whitespace before header name";
        return -1;
    }
    /* The name runs to the first byte that is not a tchar, which must be
     * the colon (':' is not a tchar): one pass finds and checks it. */
    for (i = 0; i < n && is_tchar((unsigned char)p[i]); i++)
        ;
    if (i == n || p[i] != ':') {
        if (memchr(p + i, ':', n - i) == NULL)
            *why = "header line without colon";
        /* "Name : value" must be refused (RFC 9112 section 5.1): some
         * implementations would read the name as "Name ". */
        else if (is_ows((unsigned char)p[i]))
            *why = "whitespace between header name and colon";
        else
            *why = "invalid character in header name";
        return -1;
    }
    if (i == 0) {
        *why = "empty header name";
        return -1;
    }
    colon = p + i;
    value = trim_ows(colon + 1, n - (size_t)(colon + 1 - p));
    if (!ascii_text_ok(value.p, value.n)) {
        *why = "control character in header value";
        return -1;
    }
    hdr->name = slice(p, (size_t)(colon - p));
    hdr->value = value;
    return 0;
}

/* parse_fields_lines() splits and checks the field lines. */
static int parse_fields_lines(const char *buf, size_t len,
                              const struct http_limits *lim,
                              struct h1_header *out, size_t cap, size_t *n,
                              const char **why, int *status)
{
    size_t limit = cap < lim->max_headers ? cap : lim->max_headers;
    size_t pos = 0, count = 0;

    *n = 0;
    while (pos < len) {
        const char *lf = memchr(buf + pos, '\n', len - pos);
        struct h1_header hdr;
        size_t e;

        if (lf == NULL)
            return fail(why, status, "field line without CRLF", 400);
        e = (size_t)(lf - buf);
        if (e == pos || buf[e - 1] != '\r')
            return fail(why, status, "bare LF", 400);
        if (e - 1 == pos) {
            if (e + 1 != len)
                return fail(why, status, "data after the field section", 400);
            return 0;
        }
        if (++count > limit)
            return fail(why, status, "too many headers", 431);
        if (parse_field_line(buf + pos, e - 1 - pos, &hdr, why) < 0) {
            *status = 400;
            return -1;
        }
        pos = e + 1;
        if (memchr(hdr.name.p, '_', hdr.name.n) != NULL) {
            if (lim->underscores == HTTP_US_REJECT)
                return fail(why, status, "underscore in header name", 400);
            if (lim->underscores == HTTP_US_DROP ||
                http_name_underscore_twin(hdr.name.p, hdr.name.n))
                continue;
        }
        out[(*n)++] = hdr;
    }
    return 0;
}

/*
 * parse_fields() is parse_fields_lines() with check_octets()'s verdict,
 * without a second pass over the bytes when they are good: every byte
 * of a field line that parses is a tchar, the colon, OWS or field text,
 * none of which is NUL or CR, and every line ends in CRLF. So only a
 * section that fails is run through check_octets(), which then names a
 * NUL or a bare CR anywhere in it first, as when it ran before parsing.
 */
static int parse_fields(const char *buf, size_t len,
                        const struct http_limits *lim, struct h1_header *out,
                        size_t cap, size_t *n, const char **why, int *status)
{
    if (parse_fields_lines(buf, len, lim, out, cap, n, why, status) == 0)
        return 0;
    if (check_octets(buf, len, why) < 0)
        *status = 400;
    return -1;
}

int h1_parse_fields(const char *buf, size_t len, const struct http_limits *lim,
                    struct h1_header *out, size_t cap, size_t *n,
                    const char **why, int *status)
{
    struct http_limits def;

    *n = 0;
    /* An empty section may come as (NULL, 0); memchr() must not see it. */
    if (len == 0)
        return 0;
    if (lim == NULL) {
        def = http_limits_default();
        lim = &def;
    }
    return parse_fields(buf, len, lim, out, cap, n, why, status);
}

/* ---- header semantics ------------------------------------------------ */

/* What the headers say about framing and the connection, gathered before
 * anything is decided, so the decision does not depend on header order. */
struct h1_meta {
    uint64_t cl;
    unsigned cl_seen : 1;
    unsigned te_seen : 1;
    unsigned te_unknown : 1;      /* a coding other than chunked */
    unsigned te_last_chunked : 1; /* chunked is the final coding */
    unsigned conn_close : 1;
    unsigned conn_keep_alive : 1;
    unsigned conn_upgrade : 1;
    unsigned upgrade_hdr : 1;
    unsigned expect_continue : 1;
    unsigned te_trailers : 1;
    unsigned te_chunked; /* how many times chunked was applied */
    size_t nhost;
    struct h1_slice host;
};

/* Content-Length = 1*DIGIT, but a list of equal values ("5, 5") or equal
 * repeated headers are accepted (RFC 9110 section 8.6). */
static int meta_content_length(struct h1_meta *m, struct h1_slice v,
                               const char **why)
{
    struct h1_slice e;
    int any = 0;

    while (list_next(&v, &e)) {
        uint64_t x = 0;
        size_t i;

        for (i = 0; i < e.n; i++) {
            unsigned d = (unsigned char)e.p[i] - '0';

            if (d > 9) {
                *why = "invalid Content-Length";
                return -1;
            }
            if (x > (H1_MAX_LENGTH - d) / 10) {
                *why = "Content-Length too large";
                return -1;
            }
            x = x * 10 + d;
        }
        if (m->cl_seen && x != m->cl) {
            *why = "conflicting Content-Length values";
            return -1;
        }
        m->cl = x;
        m->cl_seen = 1;
        any = 1;
    }
    if (!any) {
        *why = "empty Content-Length";
        return -1;
    }
    return 0;
}

/* Transfer codings we know and could pass on (RFC 9112 section 7). */
/* Transfer-Encoding: the codings of all such headers form one list, in
 * order; only the position and count of "chunked" decide framing. */
static int meta_transfer_encoding(struct h1_meta *m, struct h1_slice v,
                                  const char **why)
{
    struct h1_slice e, name;
    int params, any = 0;

    m->te_seen = 1;
    while (list_next(&v, &e)) {
        if (split_param(e, &name, &params) < 0) {
            *why = "invalid Transfer-Encoding";
            return -1;
        }
        any = 1;
        if (h1_slice_eq_ci(name, "chunked")) {
            if (params) {
                *why = "chunked with parameters";
                return -1;
            }
            m->te_chunked++;
            m->te_last_chunked = 1;
        } else {
            /* A gateway that re-frames bodies can only forward what it
             * decodes: any coding but chunked is refused (501 for a
             * request, 502 for a response) rather than silently lost. */
            m->te_last_chunked = 0;
            m->te_unknown = 1;
        }
    }
    if (!any) {
        *why = "empty Transfer-Encoding";
        return -1;
    }
    return 0;
}

/* Connection is a list of option tokens (RFC 9110 section 7.6.1). */
static int meta_connection(struct h1_meta *m, struct h1_slice v,
                           const char **why)
{
    struct h1_slice e;

    while (list_next(&v, &e)) {
        if (!is_token(e)) {
            *why = "invalid Connection header";
            return -1;
        }
        if (h1_slice_eq_ci(e, "close"))
            m->conn_close = 1;
        else if (h1_slice_eq_ci(e, "keep-alive"))
            m->conn_keep_alive = 1;
        else if (h1_slice_eq_ci(e, "upgrade"))
            m->conn_upgrade = 1;
    }
    return 0;
}

/* TE lists the codings the client accepts; only "trailers" matters here. */
static void meta_te(struct h1_meta *m, struct h1_slice v)
{
    struct h1_slice e, name;
    int params;

    while (list_next(&v, &e))
        if (split_param(e, &name, &params) == 0 &&
            h1_slice_eq_ci(name, "trailers"))
            m->te_trailers = 1;
}

/* collect_meta() reads the headers that framing and connection handling
 * depend on. Returns 0, or -1 with *why (a 400). */
static int collect_meta(const struct h1_header *hdrs, size_t n,
                        struct h1_meta *m, const char **why)
{
    size_t i;

    memset(m, 0, sizeof(*m));
    for (i = 0; i < n; i++) {
        struct h1_slice name = hdrs[i].name, v = hdrs[i].value;
        int rc = 0;

        /* Dispatch on length first: most headers match none of these. */
        switch (name.n) {
        case 2:
            if (h1_slice_eq_ci(name, "te"))
                meta_te(m, v);
            break;
        case 4:
            if (h1_slice_eq_ci(name, "host") && m->nhost++ == 0)
                m->host = v;
            break;
        case 6:
            if (h1_slice_eq_ci(name, "expect") &&
                h1_slice_eq_ci(v, "100-continue"))
                m->expect_continue = 1;
            break;
        case 7:
            if (h1_slice_eq_ci(name, "upgrade") && v.n > 0)
                m->upgrade_hdr = 1;
            break;
        case 10:
            if (h1_slice_eq_ci(name, "connection"))
                rc = meta_connection(m, v, why);
            break;
        case 14:
            if (h1_slice_eq_ci(name, "content-length"))
                rc = meta_content_length(m, v, why);
            break;
        case 17:
            if (h1_slice_eq_ci(name, "transfer-encoding"))
                rc = meta_transfer_encoding(m, v, why);
            break;
        default:
            break;
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 closes it
 * unless told to keep it (RFC 9112 section 9.3). */
static int keep_alive(const struct h1_meta *m, int minor)
{
    if (m->conn_close)
        return 0;
    return minor == 1 || m->conn_keep_alive;
}

/* ---- start lines ------------------------------------------------------ */

/* HTTP-version = "HTTP/" DIGIT "." DIGIT, case-sensitive. A well-formed
 * version of another major is a 505; anything else is a 400. A higher
 * minor version of HTTP/1 is handled as HTTP/1.1, the highest we speak
 * (RFC 9112 section 2.3): minor versions stay compatible by design. */
static int parse_version(const char *p, size_t n, int *minor, const char **why,
                         int *status)
{
    if (n != 8 || memcmp(p, "HTTP/", 5) != 0 || p[5] < '0' || p[5] > '9' ||
        p[6] != '.' || p[7] < '0' || p[7] > '9')
        return fail(why, status, "invalid HTTP version", 400);
    if (p[5] != '1')
        return fail(why, status, "unsupported HTTP version", 505);
    *minor = p[7] > '1' ? 1 : p[7] - '0';
    return 0;
}

/*
 * check_target() refuses two request targets that servers behind us read
 * differently from us. A fragment (#...) is not part of a request target
 * (RFC 9112 section 3.2); passed on, it would let a path slip past rules
 * that match its end (Envoy refuses it too). Userinfo in an absolute or
 * authority form ("http://a@b/") is deprecated (RFC 9110 section 4.2.4) and
 * makes the host ambiguous: nginx and HAProxy answer 400, and so do we.
 */
static int check_target(struct h1_slice t, const char **why, int *status)
{
    const char *auth = t.p, *end = t.p + t.n, *sep;
    size_t i;

    if (memchr(t.p, '#', t.n) != NULL)
        return fail(why, status, "fragment in request target", 400);
    if (t.p[0] == '/' || (t.n == 1 && t.p[0] == '*'))
        return 0;
    /* absolute-form: scheme "://" authority; else authority-form. */
    for (i = 0; i + 2 < t.n && t.p[i] != '/' && t.p[i] != '?'; i++) {
        if (t.p[i] == ':' && t.p[i + 1] == '/' && t.p[i + 2] == '/') {
            auth = t.p + i + 3;
            break;
        }
    }
    for (sep = auth; sep < end && *sep != '/' && *sep != '?'; sep++)
        if (*sep == '@')
            return fail(why, status, "userinfo in request target", 400);
    return 0;
}

/* request-line = method SP request-target SP HTTP-version, with exactly
 * one SP between the parts (RFC 9112 section 3). */
static int parse_request_line(const char *p, size_t n, struct h1_request *req,
                              const char **why, int *status)
{
    size_t i = 0, start;

    while (i < n && is_tchar((unsigned char)p[i]))
        i++;
    if (i == 0 || i == n || p[i] != ' ')
        return fail(why, status, "invalid method", 400);
    req->method = slice(p, i);
    start = ++i;
    while (i < n && is_target_char((unsigned char)p[i]))
        i++;
    if (i == start)
        return fail(why, status, "invalid request line", 400);
    if (i == n)
        return fail(why, status, "missing HTTP version", 400);
    if (p[i] != ' ')
        return fail(why, status, "invalid character in request target", 400);
    req->target = slice(p + start, i - start);
    if (check_target(req->target, why, status) < 0)
        return -1;
    i++;
    return parse_version(p + i, n - i, &req->minor, why, status);
}

/* status-line = HTTP-version SP status-code SP [ reason-phrase ]. A line
 * that stops after the code is accepted too: origin servers send it, and
 * nothing depends on the reason. */
static int parse_status_line(const char *p, size_t n, struct h1_response *r,
                             const char **why, int *status)
{
    size_t i;

    if (parse_version(p, n < 8 ? n : 8, &r->minor, why, status) < 0)
        return -1;
    if (n < 12 || p[8] != ' ' || p[9] < '1' || p[9] > '5' || p[10] < '0' ||
        p[10] > '9' || p[11] < '0' || p[11] > '9')
        return fail(why, status, "invalid status code", 400);
    r->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    if (n == 12)
        return 0;
    if (p[12] != ' ')
        return fail(why, status, "invalid status line", 400);
    for (i = 13; i < n; i++)
        if (!is_field_char((unsigned char)p[i]))
            return fail(why, status, "invalid reason phrase", 400);
    r->reason = slice(p + 13, n - 13);
    return 0;
}

/* ---- requests ---------------------------------------------------------- */

static int request_framing(const struct h1_meta *m, struct h1_request *req,
                           const char **why, int *status)
{
    size_t i;

    /* RFC 9112 section 3.2: exactly one Host in HTTP/1.1, never two. */
    if (m->nhost > 1)
        return fail(why, status, "more than one Host header", 400);
    if (req->minor == 1 && m->nhost == 0)
        return fail(why, status, "missing Host header", 400);
    for (i = 0; i < m->host.n; i++)
        if (!is_host_char((unsigned char)m->host.p[i]))
            return fail(why, status, "invalid Host header", 400);
    if (m->te_seen) {
        /* An HTTP/1.0 peer may not know chunked at all, so an HTTP/1.0
         * request with Transfer-Encoding has faulty framing (section
         * 6.1); one with Content-Length too is the classic smuggle. */
        if (req->minor == 0)
            return fail(why, status, "Transfer-Encoding in HTTP/1.0", 400);
        if (m->cl_seen)
            return fail(why, status,
                        "both Content-Length and Transfer-Encoding", 400);
        if (m->te_unknown)
            return fail(why, status, "transfer coding other than chunked", 501);
        if (m->te_chunked != 1 || !m->te_last_chunked)
            return fail(why, status, "chunked is not the final coding, once",
                        400);
        req->body = H1_BODY_CHUNKED;
    } else if (m->cl_seen) {
        req->body = H1_BODY_LENGTH;
        req->content_length = m->cl;
    }
    req->keep_alive = keep_alive(m, req->minor) ? 1 : 0;
    /* Expect and Upgrade mean nothing in HTTP/1.0 (RFC 9110 sections
     * 10.1.1 and 7.8): a server must ignore them. */
    req->expect_continue = req->minor == 1 && m->expect_continue;
    req->upgrade = req->minor == 1 && m->conn_upgrade && m->upgrade_hdr;
    req->te_trailers = m->te_trailers;
    if (m->nhost == 1)
        req->host = m->host;
    return 0;
}

int h1_parse_request(const char *buf, size_t len, const struct http_limits *lim,
                     struct h1_request *req, const char **why, int *status)
{
    struct http_limits def;
    struct h1_header *headers = req->headers;
    struct h1_head h;
    struct h1_meta m;
    int rc;

    if (lim == NULL) {
        def = http_limits_default();
        lim = &def;
    }
    memset(req, 0, sizeof(*req));
    req->headers = headers;
    rc = scan_head(buf, len, lim, 1, &h, why, status);
    if (rc <= 0)
        return rc;
    if (check_octets(buf + h.line, h.fields - h.line, why) < 0) {
        *status = 400;
        return -1;
    }
    if (parse_request_line(buf + h.line, h.line_len, req, why, status) < 0)
        return -1;
    if (parse_fields(buf + h.fields, h.len - h.fields, lim, req->headers,
                     lim->max_headers, &req->nheaders, why, status) < 0)
        return -1;
    if (collect_meta(req->headers, req->nheaders, &m, why) < 0) {
        *status = 400;
        return -1;
    }
    if (request_framing(&m, req, why, status) < 0)
        return -1;
    return (int)h.len;
}

/* ---- responses --------------------------------------------------------- */

static int response_framing(const struct h1_meta *m,
                            const struct h1_slice *method,
                            struct h1_response *r, const char **why)
{
    int head = method != NULL && h1_lit_eq(*method, "HEAD");
    int connect = method != NULL && h1_lit_eq(*method, "CONNECT");

    if (m->te_seen && r->minor == 0) {
        *why = "Transfer-Encoding in HTTP/1.0";
        return -1;
    }
    /* RFC 9112 lets Transfer-Encoding win, but a proxy that forwards such
     * a response lets the next hop choose differently; refuse it. */
    if (m->te_seen && m->cl_seen) {
        *why = "both Content-Length and Transfer-Encoding";
        return -1;
    }
    if (m->te_chunked > 1) {
        *why = "chunked applied more than once";
        return -1;
    }
    if (m->te_unknown) {
        *why = "transfer coding other than chunked";
        return -1;
    }
    r->keep_alive = keep_alive(m, r->minor) ? 1 : 0;
    r->upgrade = r->status == 101;
    if (m->cl_seen)
        r->content_length = m->cl;
    /* RFC 9112 section 6.3, in its order. */
    if (head || r->status < 200 || r->status == 204 || r->status == 304 ||
        (connect && r->status < 300))
        r->body = H1_BODY_NONE;
    else if (m->te_seen)
        r->body = m->te_last_chunked ? H1_BODY_CHUNKED : H1_BODY_EOF;
    else if (m->cl_seen)
        r->body = H1_BODY_LENGTH;
    else
        r->body = H1_BODY_EOF;
    if (r->body == H1_BODY_EOF)
        r->keep_alive = 0;
    return 0;
}

int h1_parse_response(const char *buf, size_t len,
                      const struct http_limits *lim,
                      const struct h1_slice *request_method,
                      struct h1_response *resp, const char **why, int *status)
{
    struct http_limits def;
    struct h1_header *headers = resp->headers;
    struct h1_head h;
    struct h1_meta m;
    int rc;

    if (lim == NULL) {
        def = http_limits_default();
        lim = &def;
    }
    memset(resp, 0, sizeof(*resp));
    resp->headers = headers;
    rc = scan_head(buf, len, lim, 0, &h, why, status);
    if (rc == 0)
        return 0;
    if (rc < 0 || check_octets(buf, h.fields, why) < 0 ||
        parse_status_line(buf, h.line_len, resp, why, status) < 0 ||
        parse_fields(buf + h.fields, h.len - h.fields, lim, resp->headers,
                     lim->max_headers, &resp->nheaders, why, status) < 0 ||
        collect_meta(resp->headers, resp->nheaders, &m, why) < 0 ||
        response_framing(&m, request_method, resp, why) < 0) {
        /* Whatever is wrong with an upstream's answer, ours is 502. */
        *status = 502;
        return -1;
    }
    return (int)h.len;
}

/* ---- chunked coding ---------------------------------------------------- */

void h1_chunked_init(struct h1_chunked *c)
{
    memset(c, 0, sizeof(*c));
}

void h1_chunked_dispose(struct h1_chunked *c)
{
    free(c->trailers);
    h1_chunked_init(c);
}

int h1_chunked_done(const struct h1_chunked *c)
{
    return c->state == H1_CH_DONE;
}

int h1_chunked_trailers(const struct h1_chunked *c, struct h1_slice *out)
{
    if (c->state != H1_CH_DONE)
        return -1;
    /* Never hand out a NULL pointer, even for an empty section. */
    *out = slice(c->trailers ? c->trailers : "", c->trailers_len);
    return 0;
}

static ssize_t chunked_fail(struct h1_chunked *c, const char *reason,
                            const char **why)
{
    c->state = H1_CH_ERROR;
    c->why = reason;
    *why = reason;
    return -1;
}

/* trailer_put() appends one byte to the trailer copy, which grows by
 * doubling up to the decoder's bound (trailers_max, at most
 * H1_TRAILERS_MAX). Returns 0, or -1 with *why. */
static int trailer_put(struct h1_chunked *c, char ch, const char **why)
{
    size_t max = c->trailers_max > 0 && c->trailers_max < H1_TRAILERS_MAX
                     ? c->trailers_max
                     : H1_TRAILERS_MAX;

    if (c->trailers_len >= max) {
        *why = "trailer section too large";
        return -1;
    }
    if (c->trailers_len == c->trailers_alloc) {
        size_t n = c->trailers_alloc ? c->trailers_alloc * 2 : 256;
        char *p;

        if (n > max)
            n = max;
        p = realloc(c->trailers, n);
        if (p == NULL) {
            *why = "out of memory for trailers";
            return -1;
        }
        c->trailers = p;
        c->trailers_alloc = n;
    }
    c->trailers[c->trailers_len++] = ch;
    return 0;
}

/*
 * The chunked grammar (RFC 9112 section 7.1):
 *   chunk      = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
 *   last-chunk = 1*"0" [ chunk-ext ] CRLF
 *   chunk-ext  = *( BWS ";" BWS name [ BWS "=" BWS value ] )
 *   trailer-section CRLF
 * Extensions are skipped, only bounded and checked for control characters;
 * whitespace after the size must lead to ';'. Each state consumes one byte
 * except DATA, which hands out as much payload as the input holds and then
 * returns, so a call yields at most one data slice.
 */
ssize_t h1_chunked_decode(struct h1_chunked *c, const char *in, size_t len,
                          struct h1_slice *data, const char **why)
{
    size_t i = 0;

    *data = slice(in, 0);
    if (c->state == H1_CH_ERROR) {
        *why = c->why;
        return -1;
    }
    while (i < len && c->state != H1_CH_DONE) {
        unsigned char ch = (unsigned char)in[i];
        int d;

        switch (c->state) {
        case H1_CH_SIZE:
            d = hex_value(ch);
            if (d >= 0) {
                /* Leading zeros are valid (RFC 9112 section 7.1): they
                 * add nothing to the size, only to the line, which the
                 * extension bound covers. The overflow check does the
                 * rest: 16 significant digits hold the 2^62 bound. */
                if (++c->ndigits > H1_CHUNK_EXT_MAX)
                    return chunked_fail(c, "chunk size too long", why);
                if (c->size > (H1_MAX_LENGTH - (uint64_t)d) / 16)
                    return chunked_fail(c, "chunk size too large", why);
                c->size = c->size * 16 + (uint64_t)d;
            } else if (c->ndigits == 0) {
                return chunked_fail(c, "invalid chunk size", why);
            } else if (is_ows(ch)) {
                c->state = H1_CH_SIZE_WS;
                c->ext_len = 1;
            } else if (ch == ';') {
                c->state = H1_CH_EXT;
                c->ext_len = 1;
            } else if (ch == '\r') {
                c->state = H1_CH_SIZE_LF;
            } else {
                return chunked_fail(c, "invalid chunk size", why);
            }
            break;
        case H1_CH_SIZE_WS:
            if (ch == ';')
                c->state = H1_CH_EXT;
            else if (!is_ows(ch))
                return chunked_fail(c, "invalid chunk size", why);
            if (++c->ext_len > H1_CHUNK_EXT_MAX)
                return chunked_fail(c, "chunk extension too long", why);
            break;
        case H1_CH_EXT:
            if (ch == '\r') {
                c->state = H1_CH_SIZE_LF;
                break;
            }
            if (!is_field_char(ch))
                return chunked_fail(c, "invalid chunk extension", why);
            if (++c->ext_len > H1_CHUNK_EXT_MAX)
                return chunked_fail(c, "chunk extension too long", why);
            break;
        case H1_CH_SIZE_LF:
            if (ch != '\n')
                return chunked_fail(c, "bare CR in chunk size line", why);
            c->state = c->size == 0 ? H1_CH_TRAILER_START : H1_CH_DATA;
            c->ndigits = 0;
            break;
        case H1_CH_DATA: {
            size_t n = len - i;

            if ((uint64_t)n > c->size)
                n = (size_t)c->size;
            *data = slice(in + i, n);
            c->size -= n;
            if (c->size == 0)
                c->state = H1_CH_DATA_CR;
            return (ssize_t)(i + n);
        }
        case H1_CH_DATA_CR:
            if (ch != '\r')
                return chunked_fail(c, "missing CRLF after chunk data", why);
            c->state = H1_CH_DATA_LF;
            break;
        case H1_CH_DATA_LF:
            if (ch != '\n')
                return chunked_fail(c, "missing CRLF after chunk data", why);
            c->state = H1_CH_SIZE;
            break;
        case H1_CH_TRAILER_START:
            if (ch == '\r') {
                c->state = H1_CH_END_LF;
                break;
            }
            /* The byte starts a trailer line: read it again as one. */
            c->state = H1_CH_TRAILER_LINE;
            continue;
        case H1_CH_TRAILER_LINE:
            if (ch == '\n')
                return chunked_fail(c, "bare LF in trailer", why);
            if (ch == '\r')
                c->state = H1_CH_TRAILER_LF;
            if (trailer_put(c, (char)ch, why) < 0)
                return chunked_fail(c, *why, why);
            break;
        case H1_CH_TRAILER_LF:
            if (ch != '\n')
                return chunked_fail(c, "bare CR in trailer", why);
            if (trailer_put(c, (char)ch, why) < 0)
                return chunked_fail(c, *why, why);
            c->state = H1_CH_TRAILER_START;
            break;
        case H1_CH_END_LF:
            if (ch != '\n')
                return chunked_fail(c, "bare CR after trailers", why);
            c->state = H1_CH_DONE;
            break;
        case H1_CH_DONE:
        case H1_CH_ERROR:
            break;
        }
        i++;
    }
    return (ssize_t)i;
}
