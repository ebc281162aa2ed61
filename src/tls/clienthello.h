#ifndef STRAIT_TLS_CLIENTHELLO_H
#define STRAIT_TLS_CLIENTHELLO_H

#include <stddef.h>
#include <stdint.h>

/*
 * A TLS ClientHello reader for listeners that route by SNI before (or
 * instead of) terminating TLS, as Envoy's tls_inspector does. It reads the
 * first bytes of a connection as they are so far (the caller peeks them,
 * so they stay in the socket for whoever comes next) and says what the
 * client asked for: the server name and the ALPN protocols.
 *
 * The reader keeps no state between calls and never allocates: each call
 * reads the bytes seen so far from the start. The ClientHello may be cut
 * into several handshake records (each at most 2^14 bytes, as RFC 8446
 * allows); its fragments are gathered in a caller's scratch buffer, which
 * also bounds how large a ClientHello is accepted.
 */

enum clienthello_result {
    CH_OK = 0,         /* a whole ClientHello was read */
    CH_NEED_MORE = 1,  /* well-formed so far; more bytes are needed */
    CH_NOT_TLS = -1,   /* the stream does not start with a TLS handshake */
    CH_MALFORMED = -2, /* a TLS handshake, but not a valid ClientHello */
    CH_TOO_LARGE = -3, /* the ClientHello does not fit the scratch buffer */
};

struct clienthello {
    uint16_t version; /* legacy_version, e.g. 0x0303 */
    /* The first host_name of server_name, as sent (not lowercased, no
     * NUL); sni_len 0 when the client sent none. Points into scratch. */
    const uint8_t *sni;
    size_t sni_len;
    /* The ALPN ProtocolNameList without its length: names each prefixed
     * by a length byte; alpn_len 0 when none. Points into scratch. */
    const uint8_t *alpn;
    size_t alpn_len;
    size_t consumed; /* stream bytes up to the end of the ClientHello */
};

/*
 * clienthello_parse() reads a ClientHello from the start of a stream.
 *
 * in, len:      the bytes of the stream so far; only read.
 * scratch, cap: where handshake fragments are gathered; a ClientHello
 *               whose 4-byte header and body exceed cap is CH_TOO_LARGE.
 *               The result's pointers point into it; the caller keeps it
 *               alive as long as it uses them.
 * out:          filled in on CH_OK (zeroed otherwise).
 * why:          on a negative result, a static reason.
 * Returns an enum clienthello_result.
 */
int clienthello_parse(const uint8_t *in, size_t len, uint8_t *scratch,
                      size_t cap, struct clienthello *out, const char **why);

/*
 * clienthello_alpn_next() walks the ALPN names: start with *off = 0; each
 * call sets name/n to the next name and returns 1, or returns 0 at the
 * end. The list was checked by clienthello_parse().
 */
int clienthello_alpn_next(const struct clienthello *ch, size_t *off,
                          const uint8_t **name, size_t *n);

#endif
