#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#include "core/addr.h"

static int parse_port(const char *s, size_t n, int allow0, unsigned *port,
                      const char **why)
{
    unsigned v = 0;

    if (n == 0 || n > 5) {
        *why = "missing or bad port";
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            *why = "port is not a number";
            return -1;
        }
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v > 65535 || (v == 0 && !allow0)) {
        *why = "port out of range 1-65535";
        return -1;
    }
    *port = v;
    return 0;
}

int addr_parse(struct addr *a, const char *s, size_t n, int allow_port0,
               const char **why)
{
    char host[INET6_ADDRSTRLEN + 1];
    const char *colon;
    unsigned port;

    memset(a, 0, sizeof(*a));
    if (memchr(s, '\0', n) != NULL) {
        *why = "address contains a NUL byte";
        return -1;
    }
    if (n >= 5 && memcmp(s, "unix:", 5) == 0) {
        struct sockaddr_un *un = (struct sockaddr_un *)&a->ss;
        size_t plen = n - 5;

        if (plen == 0 || s[5] != '/') {
            *why = "unix socket path must be absolute (unix:/path)";
            return -1;
        }
        if (plen >= sizeof(un->sun_path)) {
            *why = "unix socket path too long";
            return -1;
        }
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, s + 5, plen);
        a->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + 1);
        return 0;
    }
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->ss;
        size_t hlen;

        if (close == NULL) {
            *why = "missing ']' after IPv6 address";
            return -1;
        }
        hlen = (size_t)(close - s - 1);
        if (hlen == 0 || hlen >= sizeof(host)) {
            *why = "bad IPv6 address";
            return -1;
        }
        memcpy(host, s + 1, hlen);
        host[hlen] = '\0';
        if ((size_t)(close - s) + 1 >= n || close[1] != ':') {
            *why = "missing port after ']' (expected [IPV6]:PORT)";
            return -1;
        }
        if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1) {
            *why = "bad IPv6 address";
            return -1;
        }
        if (parse_port(close + 2, n - (size_t)(close - s) - 2, allow_port0,
                       &port, why) < 0)
            return -1;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((unsigned short)port);
        a->len = sizeof(*in6);
        return 0;
    }
    colon = memchr(s, ':', n);
    if (colon == NULL) {
        *why = "expected HOST:PORT, [IPV6]:PORT or unix:/PATH";
        return -1;
    }
    if (memchr(colon + 1, ':', n - (size_t)(colon - s) - 1) != NULL) {
        *why = "IPv6 addresses need brackets: [IPV6]:PORT";
        return -1;
    }
    {
        struct sockaddr_in *in4 = (struct sockaddr_in *)&a->ss;
        size_t hlen = (size_t)(colon - s);

        if (hlen == 0 || hlen >= sizeof(host)) {
            *why = "missing or bad IPv4 address";
            return -1;
        }
        memcpy(host, s, hlen);
        host[hlen] = '\0';
        if (inet_pton(AF_INET, host, &in4->sin_addr) != 1) {
            *why = "bad IPv4 address (host names are not resolved here)";
            return -1;
        }
        if (parse_port(colon + 1, n - hlen - 1, allow_port0, &port, why) < 0)
            return -1;
        in4->sin_family = AF_INET;
        in4->sin_port = htons((unsigned short)port);
        a->len = sizeof(*in4);
    }
    return 0;
}

const char *addr_format_sa(const struct sockaddr *sa, socklen_t len, char *out,
                           size_t n)
{
    char host[INET6_ADDRSTRLEN];

    switch (sa->sa_family) {
    case AF_INET: {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in4->sin_addr, host, sizeof(host));
        snprintf(out, n, "%s:%u", host, ntohs(in4->sin_port));
        break;
    }
    case AF_INET6: {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(out, n, "[%s]:%u", host, ntohs(in6->sin6_port));
        break;
    }
    case AF_UNIX: {
        const struct sockaddr_un *un = (const struct sockaddr_un *)sa;
        size_t plen = len > offsetof(struct sockaddr_un, sun_path)
                          ? len - offsetof(struct sockaddr_un, sun_path)
                          : 0;
        plen = strnlen(un->sun_path, plen);
        snprintf(out, n, "unix:%.*s", (int)plen, un->sun_path);
        break;
    }
    default:
        snprintf(out, n, "unknown");
    }
    return out;
}

const char *addr_format(const struct addr *a, char *out, size_t n)
{
    return addr_format_sa((const struct sockaddr *)&a->ss, a->len, out, n);
}

int addr_literal(struct addr *a, const char *host, int port)
{
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
    char v6[INET6_ADDRSTRLEN + 2];
    size_t n = strlen(host);

    memset(a, 0, sizeof(*a));
    memset(&sin, 0, sizeof(sin));
    if (inet_pton(AF_INET, host, &sin.sin_addr) == 1) {
        sin.sin_family = AF_INET;
        sin.sin_port = htons((uint16_t)port);
        memcpy(&a->ss, &sin, sizeof(sin));
        a->len = sizeof(sin);
        return 0;
    }
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof(v6)) {
        memcpy(v6, host + 1, n - 2);
        v6[n - 2] = '\0';
        host = v6;
    }
    memset(&sin6, 0, sizeof(sin6));
    if (inet_pton(AF_INET6, host, &sin6.sin6_addr) == 1) {
        sin6.sin6_family = AF_INET6;
        sin6.sin6_port = htons((uint16_t)port);
        memcpy(&a->ss, &sin6, sizeof(sin6));
        a->len = sizeof(sin6);
        return 0;
    }
    return -1;
}

int addr_equal(const struct addr *a, const struct addr *b)
{
    return a->len == b->len && memcmp(&a->ss, &b->ss, a->len) == 0;
}

int addr_same_host(const struct addr *a, const struct addr *b)
{
    if (a->ss.ss_family != b->ss.ss_family)
        return 0;
    switch (a->ss.ss_family) {
    case AF_INET:
        return memcmp(&((const struct sockaddr_in *)&a->ss)->sin_addr,
                      &((const struct sockaddr_in *)&b->ss)->sin_addr,
                      sizeof(struct in_addr)) == 0;
    case AF_INET6:
        return memcmp(&((const struct sockaddr_in6 *)&a->ss)->sin6_addr,
                      &((const struct sockaddr_in6 *)&b->ss)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    default:
        return 1; /* unix sockets: one local host */
    }
}

int addr_cidr_parse(const char *s, int *family, uint8_t bytes[16],
                    unsigned *prefix, const char **why)
{
    char ip[64];
    const char *slash = strchr(s, '/');
    size_t n = slash != NULL ? (size_t)(slash - s) : strlen(s);
    unsigned max, pl = 0;

    memset(bytes, 0, 16);
    if (n == 0 || n >= sizeof(ip)) {
        *why = "not an IP address";
        return -1;
    }
    memcpy(ip, s, n);
    ip[n] = '\0';
    if (inet_pton(AF_INET, ip, bytes) == 1) {
        *family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, ip, bytes) == 1) {
        *family = AF_INET6;
        max = 128;
    } else {
        *why = "not an IP address";
        return -1;
    }
    if (slash == NULL) {
        *prefix = max;
        return 0;
    }
    if (slash[1] == '\0') {
        *why = "empty prefix length";
        return -1;
    }
    for (const char *p = slash + 1; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || pl > max) {
            *why = "invalid prefix length";
            return -1;
        }
        pl = pl * 10 + (unsigned)(*p - '0');
    }
    if (pl > max) {
        *why = "prefix length too long";
        return -1;
    }
    *prefix = pl;
    for (unsigned b = pl; b < max; b++)
        bytes[b / 8] &= (uint8_t) ~(0x80u >> (b % 8));
    return 0;
}
