#ifndef STRAIT_CORE_ADDR_H
#define STRAIT_CORE_ADDR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * A socket address as configured: IPv4 "1.2.3.4:80", IPv6 "[::1]:80" or a
 * unix socket "unix:/path". Host names are not resolved here: the bootstrap
 * names addresses, not hosts (DNS belongs to ServiceEntry resolution).
 */
struct addr {
    struct sockaddr_storage ss;
    socklen_t len;
};

/* Long enough for "[" + INET6_ADDRSTRLEN + "]:65535" and for "unix:" plus
 * sun_path. */
#define ADDR_STRLEN 128

/*
 * addr_parse() parses s (n bytes). Returns 0, or -1 with *why set to a
 * static reason. Port 0 is accepted only when allow_port0 is set (listeners
 * that let the kernel choose, used by tests).
 */
int addr_parse(struct addr *a, const char *s, size_t n, int allow_port0,
               const char **why);

/*
 * addr_literal() is host (an IPv4 address, or an IPv6 address with or
 * without brackets) with port as a; 0, or -1 when host is not an address
 * literal (a name, to resolve).
 */
int addr_literal(struct addr *a, const char *host, int port);

/* addr_format() writes the canonical form of a into out (ADDR_STRLEN). */
const char *addr_format(const struct addr *a, char *out, size_t n);

/* addr_format_sa() is the same for a raw sockaddr (accept, getsockname). */
const char *addr_format_sa(const struct sockaddr *sa, socklen_t len, char *out,
                           size_t n);

int addr_equal(const struct addr *a, const struct addr *b);

/* addr_same_host() is true when a and b have the same family and IP
 * address, whatever their ports (a client's source, for per-source
 * limits); unix socket addresses are all one host. */
int addr_same_host(const struct addr *a, const struct addr *b);

static inline int addr_family(const struct addr *a)
{
    return a->ss.ss_family;
}

/*
 * addr_cidr_parse() reads "ip" or "ip/prefix" (IPv4 or IPv6, as Istio's
 * subnets are written) into family (AF_INET, AF_INET6), the address bytes
 * (4 or 16 used) and the prefix length (32 or 128 without one). Bits past
 * the prefix are cleared. 0, or -1 with a static reason in *why.
 */
int addr_cidr_parse(const char *s, int *family, uint8_t bytes[16],
                    unsigned *prefix, const char **why);

#endif
