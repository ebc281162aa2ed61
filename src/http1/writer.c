#include "config.h"

#include <stdio.h>
#include <string.h>

#include "core/ascii.h"
#include "http1/writer.h"

/*
 * Each writer first checks its arguments and adds up the exact size of
 * what it will write, then reserves that much at once and copies. This
 * makes every write all-or-nothing without having to undo half a head.
 *
 * The checks repeat a few lines of the parser's character classes on
 * purpose: the writer then links without the parser.
 */

/* One line per code reads like the registry it copies. */
const char *h1_reason(int status)
{
    /* clang-format off */
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 305: return "Use Proxy";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 407: return "Proxy Authentication Required";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 451: return "Unavailable For Legal Reasons";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    case 511: return "Network Authentication Required";
    default: return "";
    }
    /* clang-format on */
}

static int is_token(const char *p, size_t n)
{
    size_t i;

    if (n == 0)
        return 0;
    for (i = 0; i < n; i++)
        if (!http_is_tchar((unsigned char)p[i]))
            return 0;
    return 1;
}

/* Field values and reason phrases: no control character but HTAB. */
static int is_text(const char *p, size_t n)
{
    return ascii_text_ok(p, n);
}

/* add() adds n to *total; -1 if that would overflow. */
static int add(size_t *total, size_t n)
{
    if (n > (size_t)-1 - *total)
        return -1;
    *total += n;
    return 0;
}

/* fields_size() checks the fields and returns what "name: value\r\n" for
 * each takes, or -1 when one is refused. */
static int fields_size(const struct http_field *hdrs, size_t n, size_t *total)
{
    size_t i;

    for (i = 0; i < n; i++) {
        const struct http_field *h = &hdrs[i];

        if (!is_token(h->name.p, h->name.n) || !is_text(h->value.p, h->value.n))
            return -1;
        if (add(total, h->name.n) < 0 || add(total, h->value.n) < 0 ||
            add(total, 4) < 0)
            return -1;
    }
    return 0;
}

static char *put(char *dst, const void *p, size_t n)
{
    if (n > 0)
        memcpy(dst, p, n);
    return dst + n;
}

static char *put_fields(char *dst, const struct http_field *hdrs, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        dst = put(dst, hdrs[i].name.p, hdrs[i].name.n);
        dst = put(dst, ": ", 2);
        dst = put(dst, hdrs[i].value.p, hdrs[i].value.n);
        dst = put(dst, "\r\n", 2);
    }
    return dst;
}

int h1_write_request_head(struct buf *b, struct slice method,
                          struct slice target, const struct http_field *hdrs,
                          size_t n)
{
    static const char version[] = " HTTP/1.1\r\n";
    size_t total = 0, i;
    char *dst, *p;

    if (!is_token(method.p, method.n) || target.n == 0)
        return -1;
    for (i = 0; i < target.n; i++) {
        unsigned char c = (unsigned char)target.p[i];

        if (c <= 0x20 || c >= 0x7f)
            return -1;
    }
    if (add(&total, method.n) < 0 || add(&total, 1) < 0 ||
        add(&total, target.n) < 0 || add(&total, sizeof(version) - 1) < 0 ||
        fields_size(hdrs, n, &total) < 0 || add(&total, 2) < 0)
        return -1;
    if ((dst = buf_reserve(b, total)) == NULL)
        return -1;
    p = put(dst, method.p, method.n);
    p = put(p, " ", 1);
    p = put(p, target.p, target.n);
    p = put(p, version, sizeof(version) - 1);
    p = put_fields(p, hdrs, n);
    p = put(p, "\r\n", 2);
    buf_commit(b, (size_t)(p - dst));
    return 0;
}

int h1_write_response_head(struct buf *b, int status, const char *reason,
                           const struct http_field *hdrs, size_t n)
{
    char line[] = "HTTP/1.1 000 ";
    size_t total = 0, rlen;
    char *dst, *p;

    if (status < 100 || status > 599)
        return -1;
    if (reason == NULL)
        reason = h1_reason(status);
    rlen = strlen(reason);
    if (!is_text(reason, rlen))
        return -1;
    line[9] = (char)('0' + status / 100);
    line[10] = (char)('0' + status / 10 % 10);
    line[11] = (char)('0' + status % 10);
    if (add(&total, sizeof(line) - 1) < 0 || add(&total, rlen) < 0 ||
        add(&total, 2) < 0 || fields_size(hdrs, n, &total) < 0 ||
        add(&total, 2) < 0)
        return -1;
    if ((dst = buf_reserve(b, total)) == NULL)
        return -1;
    p = put(dst, line, sizeof(line) - 1);
    p = put(p, reason, rlen);
    p = put(p, "\r\n", 2);
    p = put_fields(p, hdrs, n);
    p = put(p, "\r\n", 2);
    buf_commit(b, (size_t)(p - dst));
    return 0;
}

int h1_write_chunk(struct buf *b, const void *data, size_t n)
{
    char line[24];
    int len;
    size_t total = 0;
    char *dst, *p;

    if (n == 0)
        return 0;
    len = snprintf(line, sizeof(line), "%zx\r\n", n);
    if (len < 0 || (size_t)len >= sizeof(line))
        return -1;
    if (add(&total, (size_t)len) < 0 || add(&total, n) < 0 ||
        add(&total, 2) < 0)
        return -1;
    if ((dst = buf_reserve(b, total)) == NULL)
        return -1;
    p = put(dst, line, (size_t)len);
    p = put(p, data, n);
    p = put(p, "\r\n", 2);
    buf_commit(b, (size_t)(p - dst));
    return 0;
}

int h1_write_last_chunk(struct buf *b, const struct http_field *trailers,
                        size_t n)
{
    size_t total = 5; /* "0\r\n" and the final "\r\n" */
    char *dst, *p;

    if (fields_size(trailers, n, &total) < 0)
        return -1;
    if ((dst = buf_reserve(b, total)) == NULL)
        return -1;
    p = put(dst, "0\r\n", 3);
    p = put_fields(p, trailers, n);
    p = put(p, "\r\n", 2);
    buf_commit(b, (size_t)(p - dst));
    return 0;
}
