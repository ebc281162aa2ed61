#ifndef STRAIT_HTTP_CONN_CONF_T_H
#define STRAIT_HTTP_CONN_CONF_T_H

/*
 * Settings of a downstream HTTP connection that do not depend on the
 * protocol it speaks. Both codecs (http1/ and http2/) read the same struct,
 * so a listener states its header limits and timeouts once, and neither
 * codec has to know the other. Types only: the defaults are in conn_conf.h.
 */

#include <stddef.h>
#include <stdint.h>

/* What to do with a header whose name contains '_'. Some back ends treat
 * "X_User" and "X-User" as the same field (CGI turns both into HTTP_X_USER),
 * so a client could smuggle a value past a rule that checks only one of
 * them; rejecting or dropping such names closes that gap. */
enum http_underscore {
    HTTP_US_REJECT, /* answer 400 */
    HTTP_US_DROP,   /* skip the header as if it had not been sent */
    HTTP_US_ALLOW,  /* keep it like any other header */
};

/* Bounds on what a peer can make us buffer and parse. */
struct http_limits {
    size_t max_request_line; /* HTTP/1 request or status line w/o CRLF -> 414 */
    size_t max_head;         /* whole head including the empty line -> 431 */
    size_t max_headers;      /* field lines in the head -> 431 */
    enum http_underscore underscores;
};

/* Room for the Upgrade protocols a listener tunnels, comma-separated. */
#define HTTP_UPGRADE_TYPES_MAX 128

/* Per-listener settings of the server side of an HTTP connection, whatever
 * its protocol; immutable, shared by every connection of the listener. */
struct http_conn_conf {
    struct http_limits lim;
    size_t body_cap;             /* per pipe */
    uint64_t idle_timeout_ms;    /* between requests */
    uint64_t headers_timeout_ms; /* to receive one request head */
    int tls;                     /* requests arrive over TLS: scheme https */
    /* The Upgrade protocols relayed as a tunnel after the upstream's 101,
     * as a comma-separated list of tokens ("websocket"); empty: none. */
    char upgrade_types[HTTP_UPGRADE_TYPES_MAX];
};

#endif
