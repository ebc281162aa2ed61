#ifndef STRAIT_NET_PROXY_PROTO_H
#define STRAIT_NET_PROXY_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * The PROXY protocol (HAProxy's proxy-protocol.txt), versions 1 and 2, as
 * a load balancer in front of a gateway sends it: one header before the
 * connection's first byte that names the client's address. Istio turns it
 * on with gatewayTopology.proxyProtocol; Envoy's listener filter then
 * requires it, and so does strait.
 */

/* A v1 line is at most 107 bytes, CRLF included (the specification's
 * bound, "PROXY UNKNOWN" with two IPv6 addresses and ports). */
#define PP_V1_MAX 107
/* A v2 header: 12 bytes of signature, version/command, family, length. */
#define PP_V2_FIXED 16

struct pp_result {
    int version; /* 1 or 2 */
    /* The connection's own addresses stand: v2 LOCAL (a balancer's health
     * check), v1 UNKNOWN, or a family that is no IP address. */
    int local;
    struct sockaddr_storage src; /* the client, when !local */
    struct sockaddr_storage dst; /* the address it connected to */
    socklen_t addrlen;           /* of src and dst */
    size_t len;                  /* bytes of the header */
};

/*
 * pp_parse() reads a PROXY header at the start of p[0..n).
 *
 * max_v2: the most bytes a v2 header may take (gatewayTopology's
 *         proxyProtocol.maxHeaderBytes); a v1 line is bounded by PP_V1_MAX.
 * Returns 1 with *r filled when the header is complete (r->len bytes),
 * 0 when the bytes so far are a valid beginning and more are needed, or
 * -1 with a static reason in *why when they are no PROXY header, a
 * malformed one, or one longer than allowed. Never reads past p + n.
 */
int pp_parse(const uint8_t *p, size_t n, size_t max_v2, struct pp_result *r,
             const char **why);

/*
 * pp_want() says how many more bytes may be taken off the socket without
 * reading past the header, given the got bytes already taken: for v2, what
 * the fixed part and its length say is left; for v1 (whose end is a CRLF
 * not yet seen), 0 (peek, and take through the first LF). The caller
 * calls pp_parse() first, so got bytes are a valid beginning.
 */
size_t pp_want(const uint8_t *p, size_t got);

/*
 * struct pp_reader takes a PROXY header off a non-blocking socket, never
 * a byte more, so what follows (a TLS ClientHello, an HTTP request) is
 * left for whoever reads next. buf holds cap bytes (cap >= PP_V1_MAX and
 * >= PP_V2_FIXED), owned by the caller.
 */
struct pp_reader {
    uint8_t *buf;
    size_t got;
    size_t cap;
};

/*
 * pp_read() reads what the socket has of the header.
 * Returns 1 when the header is complete (*r filled), 0 when more bytes
 * are needed (wait for readability), or -1 with *why: closed, failed,
 * not a PROXY header, malformed, or too long.
 */
int pp_read(struct pp_reader *rd, int fd, struct pp_result *r,
            const char **why);

#endif
