#ifndef STRAIT_CORE_HOST_H
#define STRAIT_CORE_HOST_H

#include <stddef.h>

#include "core/strmap.h"

/*
 * Host names and host patterns, with the rules of Istio and Envoy written
 * once. Every layer that matches a host against a pattern calls one of
 * the functions below and says by its choice which rule applies.
 *
 * A host pattern is one of three kinds (host_pattern_kind()):
 *
 *   "*"              HOST_ANY: every host, the empty one included.
 *   "*.example.com"  HOST_SUFFIX: "*." and then the suffix. Only a
 *                    left-most "*." makes a wildcard: "*example.com" or
 *                    "a.*.com" are exact names (config validation refuses
 *                    them: res_check_host()).
 *   anything else    HOST_EXACT: that one name.
 *
 * Names compare ASCII case-insensitively everywhere (DNS names are; no
 * locale is consulted). A trailing dot is not special here: callers that
 * accept "example.com." strip it first (tls_conn_serves_host does). An IP
 * address is an exact name.
 *
 * The rules:
 *
 * host_match(): a request's host against a VirtualService, Gateway server
 *   or bootstrap route host, as Istio's hosts and Envoy's virtual-host
 *   domains match: "*.example.com" matches every name that ends in
 *   ".example.com" with at least one character before it, so a.example.com
 *   and a.b.example.com, never example.com itself. host_match_rank() is
 *   the same rule with Envoy's precedence (exact, then the longest
 *   suffix, then "*") for picking among several patterns. The router's
 *   domain index (proxy/router-match.c, find_vhost) is a hashed form of
 *   this rule and precedence.
 *
 * host_cert_match(): a certificate's DNS name against a TLS SNI name, as
 *   RFC 6125 section 6.4.3 has it and BoringSSL and Envoy apply it when
 *   they pick a certificate by SNI: the wildcard stands for exactly one
 *   non-empty label, so "*.example.com" matches a.example.com but neither
 *   a.b.example.com nor example.com. "*" alone is no wildcard here (no
 *   certificate is valid for every name): it is an exact name.
 *
 * host_covers() and host_intersect(): a pattern against a pattern, for
 *   binding VirtualService hosts to Gateway server hosts and ServiceEntry
 *   hosts (Istio's "hosts intersect" and "subset of"). host_covers(a, b):
 *   every name b matches, a matches ("*" covers everything, "*" itself
 *   included; "*.example.com" covers a.example.com and *.b.example.com
 *   and itself, but not "*"; an exact name covers only itself).
 *   host_intersect(a, b): one covers the other, which for these three
 *   kinds is exactly "some name matches both".
 *
 * Patterns are NUL-terminated; a name to match is (host, n) bytes and may
 * be a slice of a longer buffer. Nothing here allocates or keeps a
 * pointer.
 */

enum host_pattern_kind { HOST_EXACT, HOST_SUFFIX, HOST_ANY };

/* host_pattern_kind() tells which of the three kinds pattern is. */
enum host_pattern_kind host_pattern_kind(const char *pattern);

/* host_eq() is true when (a, an) and (b, bn) are the same name, ASCII
 * case-insensitively. */
int host_eq(const char *a, size_t an, const char *b, size_t bn);

/* host_match() is true when the name (host, n) matches pattern by the
 * Istio/Envoy rule (a suffix wildcard spans one or more labels). */
int host_match(const char *pattern, const char *host, size_t n);

/*
 * host_match_rank() is how well pattern matches (host, n) by the
 * host_match() rule: 0 not at all, 1 for "*", 2 + the pattern's length
 * for "*.suffix" (so the longest suffix ranks highest), and SIZE_MAX for
 * the exact name. The best rank picks the pattern, as Envoy picks a
 * virtual host or a filter chain's server_names.
 */
size_t host_match_rank(const char *pattern, const char *host, size_t n);

/* host_cert_match() is true when the name (host, n) matches the
 * certificate name pattern by RFC 6125 (a wildcard spans one label). */
int host_cert_match(const char *pattern, const char *host, size_t n);

/* host_covers() is true when every name pattern b matches, pattern a
 * matches too. */
int host_covers(const char *a, const char *b);

/* host_intersect() is true when some name matches both patterns. */
int host_intersect(const char *a, const char *b);

/*
 * A host index: patterns, each with a value, looked up by a name with the
 * host_match_rank() rule and precedence (the exact name, then the longest
 * "*.suffix", then "*"), by hash: a lookup costs one probe per label of
 * the name, whatever the number of patterns. Where several entries give
 * the same pattern, the first added wins, as "the first among equals" of
 * a scan in the order of adding. For the TLS certificate pick by Gateway
 * server hosts, which scanned every server's hosts per handshake.
 * Not thread-safe to build; read-only lookups may run concurrently.
 */
struct host_index {
    struct strmap exact;  /* lowercase name -> value + 1 */
    struct strmap suffix; /* lowercase ".suffix" of "*.suffix" -> value + 1 */
    size_t any;           /* "*": value + 1, or 0 */
};

void host_index_init(struct host_index *x);
void host_index_dispose(struct host_index *x);

/* host_index_add() adds pattern with value: 0 when added, 1 when the
 * pattern is there already (its value is kept), -1 when memory runs out
 * (x is then unchanged). */
int host_index_add(struct host_index *x, const char *pattern, size_t value);

/* host_index_find() is the value of the best pattern for the name (host,
 * n), or -1 when none matches. A name of 1,024 bytes or more matches
 * "*" only (no DNS name is that long). */
long host_index_find(const struct host_index *x, const char *host, size_t n);

#endif
