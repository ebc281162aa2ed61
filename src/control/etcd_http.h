#ifndef STRAIT_CONTROL_ETCD_HTTP_H
#define STRAIT_CONTROL_ETCD_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"

struct event_base;
struct ssl_ctx_st;

/*
 * One POST to etcd's JSON gateway on a connection of its own
 * ("Connection: close"), on the control loop and never blocking it: the
 * address is already resolved (literal, or by the control thread's evdns
 * cache). Two shapes:
 *
 * - an exchange (/v3/kv/range, /v3/kv/txn, /v3/auth/authenticate): the
 *   whole answer, any status, is handed to done();
 * - a stream (/v3/watch): with status 200, each newline-terminated JSON
 *   message is handed to line() as it arrives, for as long as the
 *   connection lives; done() reports the end (the member went away, an
 *   error, or a non-200 answer with its body).
 */
struct etcd_http;

struct etcd_http_conf {
    struct addr addr;
    const char *host;       /* Host header; with TLS also SNI and the name
                             * checked (an address literal: its IP SAN) */
    struct ssl_ctx_st *ctx; /* TLS when not NULL; kept alive by the caller */
    const char *method;     /* NULL: POST with body (etcd); "GET": no body
                             * (the Kubernetes API) */
    const char *path;
    const char *token; /* Authorization header; NULL: none */
    const char *body;
    size_t body_n;
    /* Exchange: connect to last byte. Stream: connect to the answer's
     * head; after that the stream has no deadline. */
    int64_t timeout_ms;
    size_t max_body; /* the answer, or one stream message */
    int stream;
};

/*
 * line(): one message of a 200 stream (without its newline; not
 * NUL-terminated). Returning non-zero ends the stream at once: nothing of
 * it is touched after the call, so the callee may free it inside the
 * call, and done() is not called.
 * done(): called once at the end, with the status (0 when there was no
 * answer) and the body of a whole exchange, or err naming what failed
 * ("connection refused", a timeout, bad HTTP). Nothing of the exchange is
 * touched after the call; the callee frees it, inside the call or later.
 */
/* skipped(): a stream message larger than max_body, skipped whole (the
 * stream goes on): head is its first bytes (at most ETCD_HTTP_SKIP_HEAD,
 * enough to name what it was about), total its length. Its return is
 * line()'s. NULL: such a message ends the exchange with done() and an
 * err for which etcd_http_too_large() is true. */
#define ETCD_HTTP_SKIP_HEAD 4096
struct etcd_http_cb {
    int (*line)(void *arg, const char *p, size_t n);
    void (*done)(void *arg, int status, const char *body, size_t n,
                 const char *err);
    void *arg;
    int (*skipped)(void *arg, const char *head, size_t n, size_t total);
};

/* etcd_http_new() starts the request. Returns NULL with a static reason in
 * *why when it cannot even start (no socket, no memory); no callback runs
 * then. The conf strings are copied. */
struct etcd_http *etcd_http_new(struct event_base *base,
                                const struct etcd_http_conf *conf,
                                const struct etcd_http_cb *cb,
                                const char **why);

/* etcd_http_too_large() says whether done()'s err is the limit
 * (max_body) being passed, by an answer or one stream message: the caller
 * may then ask for less (a range by smaller pages) instead of retrying the
 * same request forever. */
int etcd_http_too_large(const char *err);

/* etcd_http_free() ends the request at once (no callback) and frees it;
 * the request bytes are wiped (they may carry a password or token). NULL:
 * no-op. */
void etcd_http_free(struct etcd_http *h);

/*
 * etcd_http_feed() runs the answer parser on bytes as they arrive (the
 * connection calls it; exposed for tests and tests/fuzz/fuzz_etcd.c): in
 * may be split anywhere; eof when nothing more comes. Returns 1 when the
 * exchange ended (a callback ran; nothing of h may be touched by the
 * caller if line() returned non-zero), 0 for more bytes.
 */
int etcd_http_feed(struct etcd_http *h, const char *in, size_t n, int eof);

/* etcd_http_new_parser() makes an exchange with no connection, for
 * etcd_http_feed() alone. */
struct etcd_http *etcd_http_new_parser(size_t max_body, int stream,
                                       const struct etcd_http_cb *cb);

#endif
