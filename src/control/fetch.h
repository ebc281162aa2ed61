#ifndef STRAIT_CONTROL_FETCH_H
#define STRAIT_CONTROL_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "http1/parser-t.h"

struct buf;
struct dns_cache;
struct event_base;
struct ssl_ctx_st;

/*
 * One HTTP/1.1 exchange of the control thread ("Connection: close"): the
 * CA client's certificate request and the JWKS cache's document fetch.
 * Resolves a host name through the control thread's asynchronous
 * resolver (control/dns.h: evdns with the bootstrap's dns settings, so a
 * slow or dead nameserver never holds the loop), connects over plain TCP
 * or TLS, writes the
 * request, reads the answer with the HTTP/1 parser (Content-Length,
 * chunked or close-delimited body) and calls back once.
 */
struct fetch;

struct fetch_conf {
    const char *host; /* connect to, and the Host header */
    int port;
    const char *method; /* "GET", "POST" */
    const char *path;
    /* Extra header lines, each ending in CRLF, or NULL. Host,
     * Content-Length (when body is not NULL) and Connection: close are
     * written by the fetch. */
    const char *headers;
    const char *body; /* NULL: none */
    size_t body_n;
    /* TLS when not NULL; the caller keeps the context alive until the
     * fetch is freed. verify_name: send host as SNI and check it against
     * the certificate's DNS names (an address literal: against its IP
     * names, no SNI); 0 leaves the check to ctx's own verify callback. */
    struct ssl_ctx_st *ctx;
    int verify_name;
    /* Resolves host when it is a name (an address literal needs none);
     * NULL: names are refused. Must outlive the fetch. */
    struct dns_cache *dns;
    /* Who the messages speak of ("the CA"); NULL: host. */
    const char *name;
    int64_t timeout_ms; /* connect to last byte; 0: 15 s */
    size_t max_body;    /* the largest body taken (after de-chunking) */
};

/* The answer; its bytes belong to the fetch (valid until fetch_free()). */
struct fetch_answer {
    int status;
    const struct h1_header *headers;
    size_t nheaders;
    const char *body;
    size_t n;
};

/* Called once: the answer (any status) and NULL, or NULL and a message
 * naming what failed (connect, TLS and its verify reason, timeout, size,
 * bad HTTP). The fetch is done and does nothing more after the call; the
 * callee frees it with fetch_free(), inside the callback or later. */
typedef void (*fetch_cb)(void *arg, const struct fetch_answer *a,
                         const char *err);

/*
 * fetch_new() starts the exchange on base. The conf strings are copied.
 * Returns the fetch, or NULL with an allocated message in *err when it
 * cannot even start (a name without a resolver, no socket, no memory); cb
 * is then never called. A name that does not resolve is reported through
 * cb, as is a timeout (conf->timeout_ms counts from here, resolving
 * included).
 */
struct fetch *fetch_new(struct event_base *base, const struct fetch_conf *conf,
                        fetch_cb cb, void *arg, char **err);

/* fetch_free() cancels a fetch in flight (cb is not called) or frees a
 * finished one; the request bytes are wiped (they may carry a token).
 * NULL: no-op. */
void fetch_free(struct fetch *f);

/* How many header lines an answer may have. */
#define FETCH_MAX_HEADERS 64

enum fetch_parse_result {
    FETCH_DONE = 1,
    FETCH_MORE = 0,
    FETCH_BAD_HTTP = -1,    /* *why: the parser's reason */
    FETCH_NO_ANSWER = -2,   /* closed before a whole head */
    FETCH_TOO_LARGE = -3,   /* the body is over max_body */
    FETCH_CUT_SHORT = -4,   /* closed before the whole body */
    FETCH_BAD_CHUNKED = -5, /* *why: the decoder's reason or "too large" */
};

/*
 * fetch_parse() reads an answer from the bytes received so far; the fetch
 * calls it each time more arrive (exposed for tests/fuzz/fuzz_fetch.c).
 *
 * p, len:   everything received; eof: the peer has closed, nothing more
 *           comes.
 * max_body: the largest body taken.
 * hdrs:     room for FETCH_MAX_HEADERS headers.
 * body:     where a chunked body is decoded (cap it at max_body); emptied
 *           first.
 * Returns FETCH_DONE with *a pointing into p, hdrs and body, FETCH_MORE,
 * or one of the errors above (with a static reason in *why where noted).
 * Interim 1xx answers are skipped.
 */
int fetch_parse(const char *p, size_t len, int eof, size_t max_body,
                struct h1_header *hdrs, struct buf *body,
                struct fetch_answer *a, const char **why);

#endif
