#include "config.h"

#include <string.h>

#include "core/buf.h"
#include "http1/h1_wire.h"

static int clean(struct slice s)
{
    for (size_t i = 0; i < s.n; i++)
        if (s.p[i] == '\r' || s.p[i] == '\n' || s.p[i] == '\0')
            return 0;
    return 1;
}

const char *h1_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 426: return "Upgrade Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

int h1_write_status(struct buf *b, int status)
{
    if (status < 100 || status > 999)
        return -1;
    return buf_printf(b, "HTTP/1.1 %d %s\r\n", status, h1_reason(status));
}

int h1_write_request_line(struct buf *b, struct slice method,
                          struct slice target)
{
    if (!clean(method) || !clean(target) || memchr(target.p, ' ', target.n) ||
        memchr(method.p, ' ', method.n))
        return -1;
    if (buf_append(b, method.p, method.n) < 0 || buf_puts(b, " ") < 0 ||
        buf_append(b, target.p, target.n) < 0)
        return -1;
    return buf_puts(b, " HTTP/1.1\r\n");
}

int h1_write_field(struct buf *b, struct slice name, struct slice value)
{
    if (name.n == 0 || !clean(name) || !clean(value) ||
        memchr(name.p, ':', name.n) != NULL)
        return -1;
    if (buf_append(b, name.p, name.n) < 0 || buf_puts(b, ": ") < 0 ||
        buf_append(b, value.p, value.n) < 0)
        return -1;
    return buf_puts(b, "\r\n");
}

int h1_write_fields(struct buf *b, const struct http_fields *f)
{
    for (size_t i = 0; i < f->n; i++)
        if (h1_write_field(b, f->v[i].name, f->v[i].value) < 0)
            return -1;
    return 0;
}

int h1_write_chunk(struct buf *b, const void *data, size_t n)
{
    if (n == 0)
        return 0;
    if (buf_printf(b, "%zx\r\n", n) < 0 || buf_append(b, data, n) < 0)
        return -1;
    return buf_puts(b, "\r\n");
}

int h1_write_last_chunk(struct buf *b, const struct http_fields *trailers)
{
    if (buf_puts(b, "0\r\n") < 0)
        return -1;
    if (trailers != NULL && h1_write_fields(b, trailers) < 0)
        return -1;
    return buf_puts(b, "\r\n");
}
