#ifndef STRAIT_HTTP_HBONE_HDR_H
#define STRAIT_HTTP_HBONE_HDR_H

#include <stddef.h>
#include <stdint.h>

#include "core/addr.h"
#include "core/slice.h"

/*
 * The request fields of an HBONE tunnel (HTTP/2 CONNECT, Istio ambient),
 * read as ztunnel reads them (src/proxy.rs, src/baggage.rs). Parsing only
 * reads: slices point into the caller's bytes.
 */

/* A CONNECT :authority: an address (podIP:port, "[v6]:port") or a
 * service host name and port. */
struct hbone_authority {
    int is_addr;       /* 1: addr holds the address and port */
    struct addr addr;  /* is_addr */
    struct slice host; /* !is_addr: the name, as sent */
    uint32_t port;     /* 1-65535 */
};

/*
 * hbone_authority_parse() reads "host:port" (n bytes at p). The port is
 * 1-65535 in decimal without sign or leading zeros past one digit; an
 * IPv6 address is in brackets; a name is 1-253 bytes of letters, digits,
 * '-', '.' and '_'. Returns 0 with *out, or -1 with a static *why.
 */
int hbone_authority_parse(const char *p, size_t n, struct hbone_authority *out,
                          const char **why);

/*
 * The Forwarded field of an HBONE request (RFC 7239, as ztunnel writes
 * it: for="<ip:port>" and, to a service, ;host=<hostname>). for_ is the
 * value without quotes; empty: none. host is ztunnel's
 * parse_forwarded_host(): the first host= parameter (of any element),
 * its quotes taken off; empty: none.
 */
struct hbone_forwarded {
    struct slice for_;
    struct slice host;
};

/*
 * hbone_forwarded_parse() reads a Forwarded value (n bytes at p). A value
 * with a byte outside printable ASCII is refused as a whole (ztunnel:
 * is_ascii), as is a for= that is not an address and port, a quoted
 * string without its closing quote, or an empty parameter name. Returns
 * 0 with *out, or -1 with a static *why (*out is then empty).
 */
int hbone_forwarded_parse(const char *p, size_t n, struct hbone_forwarded *out,
                          const char **why);

/*
 * The keys ztunnel reads from a baggage field (src/baggage.rs): each an
 * empty slice when absent or empty. workload is the value of
 * k8s.deployment.name, k8s.cronjob.name, k8s.pod.name or k8s.job.name
 * (the last one given).
 */
struct hbone_baggage {
    struct slice cluster;  /* k8s.cluster.name */
    struct slice ns;       /* k8s.namespace.name */
    struct slice workload; /* k8s.<kind>.name */
    struct slice service;  /* service.name */
    struct slice version;  /* service.version */
    struct slice region;   /* cloud.region */
    struct slice zone;     /* cloud.availability_zone */
};

/*
 * hbone_baggage_parse() reads one baggage value (n bytes at p) into *out,
 * as ztunnel does: list members split at ',', each key=value split at
 * '=' with the second part taken as the value, unknown keys skipped, a
 * later key replacing an earlier one. A value with a byte outside
 * printable ASCII is refused whole (ztunnel: to_str() fails, the baggage
 * is empty): -1 with *why and *out empty; else 0.
 */
int hbone_baggage_parse(const char *p, size_t n, struct hbone_baggage *out,
                        const char **why);

#endif
