#ifndef STRAIT_TLS_ISTIO_SNI_H
#define STRAIT_TLS_ISTIO_SNI_H

#include <stddef.h>
#include <stdint.h>

#include "core/slice.h"

struct clienthello;

/*
 * Istio's east-west wire contract (AUTO_PASSTHROUGH on port 15443): a
 * sidecar reaching a service on another network through that network's
 * gateway sends TLS whose SNI names the destination cluster, as istiod's
 * BuildDNSSrvSubsetKey writes it:
 *
 *     outbound_.<port>_.<subset>_.<host>
 *     outbound_.9080_.v1_.reviews.default.svc.cluster.local
 *     outbound_.9080_._.reviews.default.svc.cluster.local   (no subset)
 *
 * and an ALPN from Istio's set (istio, istio-peer-exchange,
 * istio-http/1.0, istio-http/1.1, istio-h2), which the gateway's filter
 * chains require beside the server name.
 */

/* The parts of an Istio SNI; the slices point into the parsed name. */
struct istio_sni {
    uint32_t port;       /* 1..65535 */
    struct slice subset; /* n 0: none ("_._." in the name) */
    struct slice host;   /* never empty */
};

/*
 * istio_sni_parse() reads name (len bytes, not NUL-terminated; the caller
 * lowercases it if it wants case-insensitive names) as an outbound Istio
 * SNI. The port is decimal without a sign or leading zero, the subset a
 * DNS-1123 label as Istio validates subset names (letters, digits, '-',
 * at most 63; empty for none), the host the rest: a
 * DNS name of letters, digits, '-' and '.', not starting or ending with a
 * dot and without an empty label.
 * Returns 0 with *out filled (pointing into name), or -1 with *why, a
 * static reason, and *out zeroed.
 */
int istio_sni_parse(const char *name, size_t len, struct istio_sni *out,
                    const char **why);

/*
 * istio_sni_format() writes the SNI of (port, subset, host) into buf, NUL
 * terminated: subset NULL or "" gives "_._.". Returns the length, or -1
 * when it does not fit cap.
 */
int istio_sni_format(char *buf, size_t cap, uint32_t port, const char *subset,
                     const char *host);

/* istio_alpn_is_mesh() is true when the protocol name (n bytes) is one of
 * Istio's mesh ALPNs that an east-west gateway's filter chains accept. */
int istio_alpn_is_mesh(const uint8_t *name, size_t n);

/* istio_alpn_offered() is true when ch offers at least one of them. */
int istio_alpn_offered(const struct clienthello *ch);

#endif
