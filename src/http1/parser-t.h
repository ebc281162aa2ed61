#ifndef STRAIT_HTTP1_PARSER_T_H
#define STRAIT_HTTP1_PARSER_T_H

/*
 * Types of the HTTP/1.x parser (RFC 9110, RFC 9112). They live apart from
 * the API in parser.h so that connection and stream structs can embed them
 * without pulling in the functions.
 *
 * Every slice points into the caller's buffer: the parser copies nothing
 * from a head, so a parsed request or response is valid only while the
 * bytes it was parsed from stay where they are.
 */

#include <stddef.h>
#include <stdint.h>

#include "http/conn_conf-t.h"

/* A byte range in someone else's buffer; not NUL-terminated. */
struct h1_slice {
    const char *p;
    size_t n;
};

/* A field line; the value has leading and trailing OWS removed. */
struct h1_header {
    struct h1_slice name;
    struct h1_slice value;
};

/* How the body that follows a head is delimited (RFC 9112 section 6.3). */
enum h1_body {
    H1_BODY_NONE,    /* no body at all */
    H1_BODY_LENGTH,  /* content_length bytes (may be 0) */
    H1_BODY_CHUNKED, /* chunked coding: feed it to h1_chunked_decode() */
    H1_BODY_EOF,     /* responses only: the body ends when the peer closes */
};

struct h1_request {
    struct h1_slice method;
    struct h1_slice target;
    int minor; /* 0 or 1: HTTP/1.0 or HTTP/1.1 */
    /* Set by the caller before parsing: an array with room for
     * lim->max_headers entries. The parser fills nheaders of them. */
    struct h1_header *headers;
    size_t nheaders;
    enum h1_body body;
    uint64_t content_length;      /* meaningful when body == H1_BODY_LENGTH */
    unsigned keep_alive : 1;      /* the connection may carry another request */
    unsigned expect_continue : 1; /* HTTP/1.1 with "Expect: 100-continue" */
    unsigned upgrade : 1;     /* HTTP/1.1, "Connection: upgrade" + Upgrade */
    unsigned te_trailers : 1; /* "TE: trailers": the client takes trailers */
    struct h1_slice host;     /* the Host value; p is NULL when there is none */
};

struct h1_response {
    int status; /* 100..599 */
    struct h1_slice reason;
    int minor; /* 0 or 1 */
    /* Set by the caller: room for lim->max_headers entries. */
    struct h1_header *headers;
    size_t nheaders;
    enum h1_body body;
    uint64_t content_length; /* meaningful when body == H1_BODY_LENGTH */
    unsigned keep_alive : 1; /* the connection may carry another exchange */
    unsigned upgrade : 1;    /* 101 Switching Protocols */
};

/* States of the chunked decoder; internal, but the struct below embeds one. */
enum h1_chunked_state {
    H1_CH_SIZE = 0, /* hex digits of the chunk size */
    H1_CH_SIZE_WS,  /* whitespace after the size; only ';' may follow */
    H1_CH_EXT,      /* chunk extension, up to CR */
    H1_CH_SIZE_LF,  /* CR seen at the end of the size line */
    H1_CH_DATA,     /* chunk payload */
    H1_CH_DATA_CR,  /* CRLF after the payload */
    H1_CH_DATA_LF,
    H1_CH_TRAILER_START, /* start of a trailer line or of the final CRLF */
    H1_CH_TRAILER_LINE,  /* inside a trailer line */
    H1_CH_TRAILER_LF,    /* CR seen inside a trailer line */
    H1_CH_END_LF,        /* CR of the final empty line seen */
    H1_CH_DONE,
    H1_CH_ERROR,
};

/*
 * Decoder of the chunked transfer coding. A zeroed struct is ready to use
 * (h1_chunked_init() does that); h1_chunked_dispose() frees the trailer
 * copy, which is the only memory the decoder ever allocates.
 */
struct h1_chunked {
    enum h1_chunked_state state;
    unsigned ndigits; /* hex digits of the current size seen so far */
    uint64_t size;    /* size being parsed, then payload bytes left */
    size_t ext_len;   /* bytes of the current chunk extension */
    const char *why;  /* the reason, once in H1_CH_ERROR */
    char *trailers;   /* trailer field lines, each with its CRLF */
    size_t trailers_len;
    size_t trailers_alloc;
    /* Set by the caller after h1_chunked_init(): the most trailer bytes
     * to collect, below H1_TRAILERS_MAX (the header-size limit applies to
     * trailers too); 0 means H1_TRAILERS_MAX. */
    size_t trailers_max;
};

#endif
