/*
 * Reading a TLS ClientHello from the first bytes of a connection (RFC 8446
 * section 4.1.2, RFC 5246 section 7.4.1.2). Only the record layer and the
 * message framing are checked strictly, plus the two extensions read
 * (server_name, RFC 6066 section 3; ALPN, RFC 7301): whatever else the
 * client sent is for the TLS server to judge.
 */
#include "config.h"

#include <string.h>

#include "tls/clienthello.h"

#define REC_HEADER 5
#define REC_HANDSHAKE 22
#define REC_MAX 16384 /* TLSPlaintext.length, 2^14 */
#define HS_HEADER 4
#define HS_CLIENT_HELLO 1
#define EXT_SERVER_NAME 0
#define EXT_ALPN 16

/* A bounds-checked reader over one byte range. */
struct rd {
    const uint8_t *p;
    size_t n;
};

static int rd_u8(struct rd *r, uint8_t *v)
{
    if (r->n < 1)
        return -1;
    *v = r->p[0];
    r->p++;
    r->n--;
    return 0;
}

static int rd_u16(struct rd *r, uint16_t *v)
{
    if (r->n < 2)
        return -1;
    *v = (uint16_t)(r->p[0] << 8 | r->p[1]);
    r->p += 2;
    r->n -= 2;
    return 0;
}

static int rd_bytes(struct rd *r, size_t len, struct rd *out)
{
    if (r->n < len)
        return -1;
    out->p = r->p;
    out->n = len;
    r->p += len;
    r->n -= len;
    return 0;
}

/* A vector with a one- or two-byte length prefix. */
static int rd_vec8(struct rd *r, struct rd *out)
{
    uint8_t l;

    return rd_u8(r, &l) < 0 ? -1 : rd_bytes(r, l, out);
}

static int rd_vec16(struct rd *r, struct rd *out)
{
    uint16_t l;

    return rd_u16(r, &l) < 0 ? -1 : rd_bytes(r, l, out);
}

static int fail(const char **why, const char *reason, int code)
{
    *why = reason;
    return code;
}

/* server_name: a ServerNameList; the first host_name entry is the SNI. */
static int read_sni(struct rd ext, struct clienthello *out, const char **why)
{
    struct rd list;

    if (rd_vec16(&ext, &list) < 0 || ext.n != 0 || list.n == 0)
        return fail(why, "malformed server_name extension", CH_MALFORMED);
    while (list.n > 0) {
        uint8_t type;
        struct rd name;
        if (rd_u8(&list, &type) < 0 || rd_vec16(&list, &name) < 0)
            return fail(why, "malformed server_name extension", CH_MALFORMED);
        if (type != 0 || out->sni_len > 0)
            continue;
        /* A DNS name: 1 to 255 bytes, no NUL (a NUL would cut the name
         * one way for us and another way for the upstream). */
        if (name.n == 0 || name.n > 255 || memchr(name.p, 0, name.n) != NULL)
            return fail(why, "invalid server name", CH_MALFORMED);
        out->sni = name.p;
        out->sni_len = name.n;
    }
    return CH_OK;
}

/* ALPN: a non-empty ProtocolNameList of non-empty names. */
static int read_alpn(struct rd ext, struct clienthello *out, const char **why)
{
    struct rd list, walk;

    if (rd_vec16(&ext, &list) < 0 || ext.n != 0 || list.n < 2)
        return fail(why, "malformed ALPN extension", CH_MALFORMED);
    walk = list;
    while (walk.n > 0) {
        struct rd name;
        if (rd_vec8(&walk, &name) < 0 || name.n == 0)
            return fail(why, "malformed ALPN extension", CH_MALFORMED);
    }
    out->alpn = list.p;
    out->alpn_len = list.n;
    return CH_OK;
}

/* The ClientHello body, once whole. */
static int read_body(struct rd body, struct clienthello *out, const char **why)
{
    struct rd random, sid, suites, comp, exts;
    int seen_sni = 0, seen_alpn = 0;

    if (rd_u16(&body, &out->version) < 0 || rd_bytes(&body, 32, &random) < 0 ||
        rd_vec8(&body, &sid) < 0 || rd_vec16(&body, &suites) < 0 ||
        rd_vec8(&body, &comp) < 0)
        return fail(why, "truncated ClientHello", CH_MALFORMED);
    if ((out->version >> 8) != 3)
        return fail(why, "unsupported ClientHello version", CH_MALFORMED);
    if (sid.n > 32)
        return fail(why, "session id too long", CH_MALFORMED);
    if (suites.n < 2 || suites.n % 2 != 0)
        return fail(why, "malformed cipher suites", CH_MALFORMED);
    if (comp.n < 1)
        return fail(why, "no compression methods", CH_MALFORMED);
    /* Extensions are optional (an SSLv3-style hello has none). */
    if (body.n == 0)
        return CH_OK;
    if (rd_vec16(&body, &exts) < 0 || body.n != 0)
        return fail(why, "malformed extensions", CH_MALFORMED);
    while (exts.n > 0) {
        uint16_t type;
        struct rd ext;
        int rc = CH_OK;
        if (rd_u16(&exts, &type) < 0 || rd_vec16(&exts, &ext) < 0)
            return fail(why, "malformed extensions", CH_MALFORMED);
        if (type == EXT_SERVER_NAME) {
            if (seen_sni++)
                return fail(why, "duplicate server_name", CH_MALFORMED);
            rc = read_sni(ext, out, why);
        } else if (type == EXT_ALPN) {
            if (seen_alpn++)
                return fail(why, "duplicate ALPN extension", CH_MALFORMED);
            rc = read_alpn(ext, out, why);
        }
        if (rc != CH_OK)
            return rc;
    }
    return CH_OK;
}

int clienthello_parse(const uint8_t *in, size_t len, uint8_t *scratch,
                      size_t cap, struct clienthello *out, const char **why)
{
    size_t off = 0, have = 0, need = 0;
    struct rd body;
    int rc;

    memset(out, 0, sizeof(*out));
    *why = NULL;
    if (len == 0)
        return CH_NEED_MORE;
    /* The first byte tells TLS from anything else (HTTP, SSLv2's 0x80). */
    if (in[0] != REC_HANDSHAKE)
        return fail(why, "not a TLS handshake record", CH_NOT_TLS);
    /* Records one after the other; their fragments make up the handshake
     * message, whose header gives its length. */
    for (;;) {
        size_t rlen, take, before;
        if (len - off < REC_HEADER) {
            /* A partial header may still show a wrong byte early. */
            if (len - off >= 1 && in[off] != REC_HANDSHAKE)
                return fail(why, "unexpected record type", CH_MALFORMED);
            if (len - off >= 2 && in[off + 1] != 3)
                return fail(why, "unsupported record version", CH_NOT_TLS);
            return CH_NEED_MORE;
        }
        if (in[off] != REC_HANDSHAKE)
            return fail(why, "unexpected record type", CH_MALFORMED);
        if (in[off + 1] != 3)
            return fail(why, "unsupported record version", CH_NOT_TLS);
        rlen = (size_t)in[off + 3] << 8 | in[off + 4];
        if (rlen == 0)
            return fail(why, "empty handshake record", CH_MALFORMED);
        if (rlen > REC_MAX)
            return fail(why, "record too long", CH_MALFORMED);
        off += REC_HEADER;
        take = len - off < rlen ? len - off : rlen;
        if (take > cap - have)
            take = cap - have;
        if (take > 0)
            memcpy(scratch + have, in + off, take);
        before = have;
        have += take;
        if (need == 0 && have >= HS_HEADER) {
            size_t mlen =
                (size_t)scratch[1] << 16 | (size_t)scratch[2] << 8 | scratch[3];
            if (scratch[0] != HS_CLIENT_HELLO)
                return fail(why, "first handshake message is not a ClientHello",
                            CH_MALFORMED);
            if (cap < HS_HEADER || mlen > cap - HS_HEADER)
                return fail(why, "ClientHello too large", CH_TOO_LARGE);
            need = HS_HEADER + mlen;
        }
        /* Only what belongs to the ClientHello is used; what follows it in
         * the same record is for the TLS server to judge. */
        if (need != 0 && have >= need) {
            out->consumed = off + (need - before);
            break;
        }
        if (have >= cap)
            return fail(why, "ClientHello too large", CH_TOO_LARGE);
        if (len - off < rlen)
            return CH_NEED_MORE;
        off += rlen;
    }
    body.p = scratch + HS_HEADER;
    body.n = need - HS_HEADER;
    rc = read_body(body, out, why);
    if (rc != CH_OK)
        memset(out, 0, sizeof(*out));
    return rc;
}

int clienthello_alpn_next(const struct clienthello *ch, size_t *off,
                          const uint8_t **name, size_t *n)
{
    size_t l;

    if (*off >= ch->alpn_len)
        return 0;
    l = ch->alpn[*off];
    if (l == 0 || *off + 1 + l > ch->alpn_len)
        return 0;
    *name = ch->alpn + *off + 1;
    *n = l;
    *off += 1 + l;
    return 1;
}
