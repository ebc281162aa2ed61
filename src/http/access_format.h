#ifndef STRAIT_HTTP_ACCESS_FORMAT_H
#define STRAIT_HTTP_ACCESS_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "http/http.h"

struct buf;

/*
 * Envoy access-log format strings (the command operators of Envoy's
 * substitution formatter), compiled once when the configuration is
 * loaded into a list of operations, and run per finished request
 * without parsing anything.
 *
 * A text format is a string of literal text and operators: %RESPONSE_CODE%,
 * %REQ(USER-AGENT)%, %REQ(X-ENVOY-ORIGINAL-PATH?:PATH):64% (header X, or
 * Y when X is missing, cut to 64 bytes), %START_TIME(%s.%3f)%, and %% for
 * a percent sign. A missing value is written "-", as Envoy does.
 *
 * A JSON format is an object whose members each hold such a string
 * ({"code":"%RESPONSE_CODE%","ua":"%REQ(USER-AGENT)%"}); each record is
 * one JSON object with those keys in that order. A member that is one
 * operator alone keeps its type (numbers stay numbers) and a missing value
 * is null, as in Envoy's json_format.
 *
 * Operators that strait does not know are refused when the format is
 * compiled, with the operator and its column in the message.
 */
struct afmt;

/* What a format may read that costs a system call to find: the caller
 * looks these up only when afmt_needs() says so. */
enum {
    AFMT_NEED_DOWNSTREAM_LOCAL = 1 << 0,
    AFMT_NEED_UPSTREAM_LOCAL = 1 << 1,
    AFMT_NEED_PEER_URI_SAN = 1 << 2,
};

/*
 * The values of one finished request. Strings may be NULL (missing: "-"
 * in text, null in JSON); all are only read, and need live only for the
 * call to afmt_write().
 */
struct afmt_ctx {
    const struct http_request *req;     /* NULL: none (a TCP session) */
    const struct http_fields *resp;     /* response fields; NULL: none */
    const struct http_fields *trailers; /* response trailers; NULL: none */
    int64_t start_us;                   /* wall clock, µs since the epoch */
    uint64_t duration_ms;
    int status;              /* 0: no response */
    const char *flags;       /* Envoy's short response flags ("UF,URX"), "-" */
    const char *details;     /* %RESPONSE_CODE_DETAILS% */
    const char *termination; /* %CONNECTION_TERMINATION_DETAILS% */
    const char *upstream_failure; /* %UPSTREAM_TRANSPORT_FAILURE_REASON% */
    uint64_t bytes_received;
    uint64_t bytes_sent;
    const char *upstream_host; /* IP:PORT */
    const char *upstream_cluster;
    const char *upstream_local;           /* IP:PORT */
    const char *downstream_local;         /* IP:PORT */
    const char *downstream_remote;        /* originating client */
    const char *downstream_direct_remote; /* the socket's peer, IP:PORT */
    const char *sni;
    const char *route;
    const char *protocol; /* "HTTP/1.1", "HTTP/2"; NULL for TCP */
    const char *peer_uri_san;
    const char *hostname;
    unsigned attempts; /* upstream attempts; 0: none */
};

/* afmt_compile() compiles a text format (json 0) or a JSON format object
 * (json 1) of n bytes at s. Returns the format, owned by the caller
 * (afmt_free), or NULL with an allocated message in *err naming the
 * column (a 1-based byte offset) and what is wrong. */
struct afmt *afmt_compile(const char *s, size_t n, int json, char **err);
void afmt_free(struct afmt *f);

struct buf;
/* afmt_reference() appends every %OPERATOR% a format string may use, one
 * "NAME<TAB>form<TAB>json" line each: form is how it is written (an
 * argument in parentheses, :N to truncate), json "number" when a JSON
 * member holding only it is written as a number, else "string" (`strait
 * reference access-log`, and docs/reference/access-log.md from it). */
void afmt_reference(struct buf *b);

/* afmt_istio_text() and afmt_istio_json() compile Istio's default access
 * log formats (meshConfig.accessLogEncoding TEXT and JSON). */
struct afmt *afmt_istio_text(char **err);
struct afmt *afmt_istio_json(char **err);

/* The source of Istio's default formats, for `strait reference` and
 * tests. */
extern const char afmt_istio_text_src[];
extern const char afmt_istio_json_src[];

/* afmt_needs() is the AFMT_NEED_* set of what f reads. */
unsigned afmt_needs(const struct afmt *f);

/* afmt_write() appends one record for ctx to out, ending with a newline
 * (a text format's own trailing newline is kept, one is added when it
 * has none). Control bytes in values are escaped (\xNN in text), so a
 * header can never start a forged line. Returns 0, or -1 when out is
 * full (it then holds a cut record). */
int afmt_write(const struct afmt *f, const struct afmt_ctx *ctx,
               struct buf *out);

#endif
