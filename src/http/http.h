#ifndef STRAIT_HTTP_HTTP_H
#define STRAIT_HTTP_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/slice.h"

struct stats_desc;

/*
 * Protocol-neutral requests and responses. Codecs translate HTTP/1.x and
 * HTTP/2 into these and back, so the proxy never knows which protocol a
 * peer speaks. Field names are lowercase (as HTTP/2 requires), values are
 * as received; all bytes live in the stream's arena.
 */
struct http_field {
    struct slice name;
    struct slice value;
};

struct http_fields {
    struct http_field *v;
    size_t n;
    size_t cap;
};

enum http_version { HTTP_10 = 10, HTTP_11 = 11, HTTP_2 = 20 };

struct http_request {
    struct slice method;
    struct slice scheme;    /* "http" or "https" */
    struct slice authority; /* Host or :authority */
    struct slice path;      /* origin-form target, with query */
    struct http_fields fields;
    int64_t content_length; /* -1 when not known in advance */
    enum http_version version;
    unsigned has_body : 1;
    unsigned expect_continue : 1;
    unsigned upgrade : 1; /* HTTP/1.1 Upgrade (WebSocket) */
    unsigned te_trailers : 1;
    struct slice upgrade_proto;
};

struct http_response {
    int status;
    struct http_fields fields;
    int64_t content_length;
    unsigned has_body : 1;
};

/* http_fields_add() appends a field; name and value are copied into a and
 * the name is lowercased. 0, or -1 when memory is short or the field count
 * reaches max. */
int http_fields_add(struct http_fields *f, struct arena *a, struct slice name,
                    struct slice value, size_t max);

/* http_fields_add_ref() appends without copying: the bytes must live as
 * long as the arena (literals, or bytes already in it); name must already
 * be lowercase. */
int http_fields_add_ref(struct http_fields *f, struct arena *a,
                        struct slice name, struct slice value);

/* http_fields_get() returns the first field called name (lowercase). */
const struct http_field *http_fields_get(const struct http_fields *f,
                                         const char *name);

/* http_fields_remove() drops every field called name; returns how many. */
size_t http_fields_remove(struct http_fields *f, const char *name);

/* http_fields_set() replaces every field called name by one with value. */
int http_fields_set(struct http_fields *f, struct arena *a, const char *name,
                    struct slice value);

/*
 * http_fields_strip_hop() removes hop-by-hop fields (RFC 9110 7.6.1):
 * Connection and every field it names, Keep-Alive, Proxy-Connection,
 * Transfer-Encoding, Upgrade and TE (the caller re-adds "te: trailers"
 * where it forwards gRPC). Returns the number removed.
 */
size_t http_fields_strip_hop(struct http_fields *f);

/*
 * Checks for fields that come from somewhere other than a codec that
 * already validated them (Lua, GeoIP databases), before they join a
 * request or response: whatever passes is safe to write on HTTP/1.1 and
 * HTTP/2 alike.
 *
 * http_field_name_valid(): a token (RFC 9110 5.6.2), 1..max bytes.
 * http_field_value_valid(): no control character but HTAB (so no CR,
 * LF or NUL, which would split or cut the head), no DEL.
 * http_field_reserved(): the framing and hop-by-hop fields the codecs
 * own (content-length, transfer-encoding, connection, upgrade, te,
 * keep-alive, proxy-connection) and host, which is the authority;
 * compared case-insensitively. A writer that is not a codec must never
 * set these: a content-length on a request forwarded without a body
 * makes the upstream read the next request as its body (desync).
 */
int http_field_name_valid(struct slice name);
int http_field_value_valid(struct slice value);
int http_field_reserved(struct slice name);

/*
 * Checks for a request target that does not come from a codec (a Lua
 * h:set_path(), h:set_query()), with the rules the codecs apply to what
 * a client sends, so a script can write nothing a client could not:
 * printable ASCII only (0x21..0x7e: no space, CR, LF, NUL, DEL or
 * 8-bit byte), no fragment ('#', which RFC 9112 3.2 says is no part of
 * a target and which the codecs answer 400), and each '%' followed by
 * two hex digits (a broken escape is read differently by different
 * servers behind us). Nothing is decoded or merged: the bytes checked
 * are the bytes sent, as with a VirtualService rewrite.uri.
 *
 * http_path_check(): the path part: 1..HTTP_TARGET_MAX bytes, starting
 * with '/', and no '?' (the query is set apart).
 * http_query_check(): the query without its '?': 0..HTTP_TARGET_MAX
 * bytes (empty: no query).
 * http_target_check(): path and optional "?query" together, at most
 * HTTP_TARGET_MAX bytes.
 * Each returns 0, or -1 with *why set to a static reason.
 */
#define HTTP_TARGET_MAX 8192 /* the HTTP/1 request line limit's default */
int http_path_check(struct slice path, const char **why);
int http_query_check(struct slice query, const char **why);
int http_target_check(struct slice target, const char **why);

/* http_token_list_has() is true when a comma-separated list contains tok,
 * compared case-insensitively (Connection: keep-alive, Upgrade). */
int http_token_list_has(struct slice list, const char *tok);

/*
 * The HTTP counters of a listener, one shard per worker (core/stats.h),
 * written by the codecs (protocol errors, buffers) and the request path.
 */
struct http_counters {
    uint64_t rq_total;
    uint64_t rq_class[6];        /* [1]..[5]: 1xx..5xx */
    uint64_t rq_protocol_errors; /* malformed requests from clients */
    /* I/O buffers HTTP/1 server connections took and gave back: the
     * difference is what they hold now (none while idle). */
    uint64_t bufs_taken;
    uint64_t bufs_released;
    uint64_t rq_upstream_errors; /* upstream failed (502/503/reset) */
    uint64_t rq_rbac_denied;     /* refused by an AuthorizationPolicy */
    uint64_t rq_jwt_denied;      /* refused: a JWT that does not verify */
    uint64_t rq_mirror_sent;     /* mirrored copies started */
    uint64_t rq_mirror_failed;   /* started copies that did not complete */
    uint64_t rq_mirror_skipped;  /* selected copies not sent (body too big,
                                    no endpoint, circuit breaker) */
    uint64_t rq_idle_timeout;    /* ended by streamIdleTimeout (flag SI) */
    uint64_t rq_header_timeout;  /* a request head not whole in time
                                    (requestHeadersTimeout) */
    /* Memory overload (net/overload.h): requests answered 503 OM, and
     * connections told to close after their request. */
    uint64_t rq_overload;
    uint64_t cx_overload_keepalive;
};

/* Their names in the admin API's /stats ("http.rq_total", ...). */
extern const struct stats_desc http_counters_desc;

/* http_status_class() is 1..5 for 1xx..5xx, 0 for anything else. */
static inline int http_status_class(int status)
{
    return status >= 100 && status <= 599 ? status / 100 : 0;
}

/* http_is_tchar() says whether c may stand in a token: a field name, a
 * method (RFC 9110 5.6.2). A table: the parser asks it of every byte of
 * every field name. */
extern const unsigned char http_tchar_table[256];
static inline int http_is_tchar(unsigned char c)
{
    return http_tchar_table[c];
}

#endif
