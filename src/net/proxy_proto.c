/*
 * The PROXY protocol, versions 1 and 2 (see proxy_proto.h). The parser is
 * a pure function of the bytes so far, so the fuzzer and the unit tests
 * drive it without a socket; pp_read() is the only part that reads.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "net/proxy_proto.h"

static const uint8_t v2_sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                   0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};
static const char v1_sig[] = "PROXY ";

/* A port of a v1 line: 1-5 decimal digits, at most 65535. */
static int v1_port(const char *s, size_t n, uint16_t *port)
{
    uint32_t v = 0;

    if (n == 0 || n > 5)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint32_t)(s[i] - '0');
    }
    if (v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

/* An address of a v1 line, of the family its protocol names. */
static int v1_addr(int family, const char *s, size_t n, uint16_t port,
                   struct sockaddr_storage *ss)
{
    char ip[INET6_ADDRSTRLEN];

    if (n == 0 || n >= sizeof(ip))
        return -1;
    memcpy(ip, s, n);
    ip[n] = '\0';
    memset(ss, 0, sizeof(*ss));
    if (family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        if (inet_pton(AF_INET, ip, &in->sin_addr) != 1)
            return -1;
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET6, ip, &in6->sin6_addr) != 1)
            return -1;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
    }
    return 0;
}

/* "PROXY TCP4|TCP6 src dst sport dport\r\n" or "PROXY UNKNOWN...\r\n". */
static int parse_v1(const uint8_t *p, size_t n, struct pp_result *r,
                    const char **why)
{
    const char *line = (const char *)p;
    const char *tok[6];
    size_t len[6], ntok = 0, end, i, start;
    uint16_t sport, dport;
    int family;

    for (end = 0; end < n && end < PP_V1_MAX; end++)
        if (p[end] == '\n')
            break;
    if (end == n && n < PP_V1_MAX)
        return 0;
    if (end >= PP_V1_MAX) {
        *why = "PROXY v1 header longer than 107 bytes";
        return -1;
    }
    if (end < 1 || p[end - 1] != '\r') {
        *why = "PROXY v1 header not ended by CRLF";
        return -1;
    }
    end--; /* the line without its CRLF */
    r->version = 1;
    r->len = end + 2;
    if (end >= 13 && memcmp(line, "PROXY UNKNOWN", 13) == 0 &&
        (end == 13 || line[13] == ' ')) {
        /* The sender does not know the client: the connection's own
         * addresses stand. */
        r->local = 1;
        return 1;
    }
    /* Exactly six tokens, one space apart. */
    for (i = 0, start = 0; i <= end; i++) {
        if (i < end && line[i] != ' ')
            continue;
        if (ntok == 6 || i == start) {
            *why = "PROXY v1 header malformed";
            return -1;
        }
        tok[ntok] = line + start;
        len[ntok++] = i - start;
        start = i + 1;
    }
    if (ntok != 6) {
        *why = "PROXY v1 header malformed";
        return -1;
    }
    if (len[1] == 4 && memcmp(tok[1], "TCP4", 4) == 0) {
        family = AF_INET;
        r->addrlen = sizeof(struct sockaddr_in);
    } else if (len[1] == 4 && memcmp(tok[1], "TCP6", 4) == 0) {
        family = AF_INET6;
        r->addrlen = sizeof(struct sockaddr_in6);
    } else {
        *why = "PROXY v1 protocol is not TCP4, TCP6 or UNKNOWN";
        return -1;
    }
    if (v1_port(tok[4], len[4], &sport) < 0 ||
        v1_port(tok[5], len[5], &dport) < 0) {
        *why = "PROXY v1 port malformed";
        return -1;
    }
    if (v1_addr(family, tok[2], len[2], sport, &r->src) < 0 ||
        v1_addr(family, tok[3], len[3], dport, &r->dst) < 0) {
        *why = "PROXY v1 address malformed";
        return -1;
    }
    return 1;
}

/* TLVs fill the rest of a v2 header exactly: type, 2 bytes of length,
 * value. None is needed: they are checked, not kept. */
static int v2_tlvs(const uint8_t *p, size_t n)
{
    size_t i = 0;

    while (i < n) {
        size_t l;
        if (n - i < 3)
            return -1;
        l = (size_t)p[i + 1] << 8 | p[i + 2];
        if (l > n - i - 3)
            return -1;
        i += 3 + l;
    }
    return 0;
}

static int parse_v2(const uint8_t *p, size_t n, size_t max_v2,
                    struct pp_result *r, const char **why)
{
    size_t len, total, alen;
    unsigned cmd, fam, proto;

    if (n < PP_V2_FIXED)
        return 0;
    if (p[12] >> 4 != 2) {
        *why = "PROXY v2 header of another version";
        return -1;
    }
    cmd = p[12] & 0x0f;
    fam = p[13] >> 4;
    proto = p[13] & 0x0f;
    if (cmd > 1) {
        *why = "PROXY v2 command is not LOCAL or PROXY";
        return -1;
    }
    if (fam > 3 || proto > 2) {
        *why = "PROXY v2 address family or protocol unknown";
        return -1;
    }
    len = (size_t)p[14] << 8 | p[15];
    total = PP_V2_FIXED + len;
    if (total > max_v2) {
        *why = "PROXY v2 header longer than maxHeaderBytes";
        return -1;
    }
    if (n < total)
        return 0;
    r->version = 2;
    r->len = total;
    /* LOCAL (the balancer's own connection, a health check), and the
     * families that name no IP client: the addresses are ignored, as the
     * specification asks. */
    if (cmd == 0 || fam == 0 || fam == 3) {
        r->local = 1;
        return 1;
    }
    alen = fam == 1 ? 12 : 36;
    if (len < alen) {
        *why = "PROXY v2 addresses shorter than their family";
        return -1;
    }
    memset(&r->src, 0, sizeof(r->src));
    memset(&r->dst, 0, sizeof(r->dst));
    if (fam == 1) {
        struct sockaddr_in *s = (struct sockaddr_in *)&r->src;
        struct sockaddr_in *d = (struct sockaddr_in *)&r->dst;
        s->sin_family = d->sin_family = AF_INET;
        memcpy(&s->sin_addr, p + 16, 4);
        memcpy(&d->sin_addr, p + 20, 4);
        memcpy(&s->sin_port, p + 24, 2);
        memcpy(&d->sin_port, p + 26, 2);
        r->addrlen = sizeof(*s);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&r->src;
        struct sockaddr_in6 *d = (struct sockaddr_in6 *)&r->dst;
        s->sin6_family = d->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, p + 16, 16);
        memcpy(&d->sin6_addr, p + 32, 16);
        memcpy(&s->sin6_port, p + 48, 2);
        memcpy(&d->sin6_port, p + 50, 2);
        r->addrlen = sizeof(*s);
    }
    if (v2_tlvs(p + PP_V2_FIXED + alen, len - alen) < 0) {
        *why = "PROXY v2 TLV malformed";
        return -1;
    }
    return 1;
}

int pp_parse(const uint8_t *p, size_t n, size_t max_v2, struct pp_result *r,
             const char **why)
{
    size_t k;

    memset(r, 0, sizeof(*r));
    if (n == 0)
        return 0;
    if (p[0] == v2_sig[0]) {
        k = n < sizeof(v2_sig) ? n : sizeof(v2_sig);
        if (memcmp(p, v2_sig, k) != 0) {
            *why = "no PROXY protocol header";
            return -1;
        }
        return parse_v2(p, n, max_v2, r, why);
    }
    k = n < sizeof(v1_sig) - 1 ? n : sizeof(v1_sig) - 1;
    if (memcmp(p, v1_sig, k) != 0) {
        *why = "no PROXY protocol header";
        return -1;
    }
    return parse_v1(p, n, r, why);
}

size_t pp_want(const uint8_t *p, size_t got)
{
    size_t total;

    if (got == 0 || p[0] != v2_sig[0])
        return 0;
    if (got < PP_V2_FIXED)
        return PP_V2_FIXED - got;
    total = PP_V2_FIXED + ((size_t)p[14] << 8 | p[15]);
    return total > got ? total - got : 0;
}

int pp_read(struct pp_reader *rd, int fd, struct pp_result *r, const char **why)
{
    /* Each round takes what is known to belong to the header; a v2 header
     * needs two (its fixed part, then the rest), a v1 line one per piece
     * that came. The bound keeps one slow sender from holding the loop:
     * readability wakes the caller again. */
    for (int round = 0; round < 8; round++) {
        uint8_t peek[PP_V1_MAX];
        size_t take = pp_want(rd->buf, rd->got);
        ssize_t n;
        int v;

        if (take == 0) {
            /* The version is not known yet, or it is v1: peek, and take
             * through the first LF (the v1 line's end), or the v2 fixed
             * part when that is what comes. */
            size_t room = PP_V1_MAX - rd->got;
            n = recv(fd, peek, room, MSG_PEEK);
            if (n > 0) {
                const uint8_t *lf = memchr(peek, '\n', (size_t)n);
                if (rd->got == 0 && peek[0] == v2_sig[0])
                    take = (size_t)n < PP_V2_FIXED ? (size_t)n : PP_V2_FIXED;
                else
                    take = lf != NULL ? (size_t)(lf - peek) + 1 : (size_t)n;
            }
        } else {
            if (take > rd->cap - rd->got)
                take = rd->cap - rd->got;
            n = 1;
        }
        if (n > 0)
            n = recv(fd, rd->buf + rd->got, take, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *why = n == 0 ? "closed before the PROXY header ended"
                          : "read failed before the PROXY header ended";
            return -1;
        }
        rd->got += (size_t)n;
        v = pp_parse(rd->buf, rd->got, rd->cap, r, why);
        if (v != 0)
            return v;
        if (rd->got >= rd->cap) {
            *why = "PROXY v2 header longer than maxHeaderBytes";
            return -1;
        }
    }
    return 0;
}
