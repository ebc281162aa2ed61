/*
 * HBONE request fields: the CONNECT authority, Forwarded and baggage, as
 * ztunnel reads them. See hbone_hdr.h.
 */
#include "config.h"

#include <string.h>

#include "http/hbone_hdr.h"

static int printable(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || (unsigned char)p[i] > 0x7e)
            return 0;
    return 1;
}

/* A decimal port 1-65535 without a sign or extra leading zeros. */
static int port_parse(const char *p, size_t n, uint32_t *out)
{
    uint32_t v = 0;

    if (n == 0 || n > 5 || (n > 1 && p[0] == '0'))
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (uint32_t)(p[i] - '0');
    }
    if (v == 0 || v > 65535)
        return -1;
    *out = v;
    return 0;
}

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

int hbone_authority_parse(const char *p, size_t n, struct hbone_authority *out,
                          const char **why)
{
    const char *colon = NULL;
    char host[64];
    size_t hn;

    memset(out, 0, sizeof(*out));
    for (size_t i = n; i > 0; i--)
        if (p[i - 1] == ':') {
            colon = p + i - 1;
            break;
        }
    if (colon == NULL) {
        *why = "authority without a port";
        return -1;
    }
    if (port_parse(colon + 1, (size_t)(p + n - colon - 1), &out->port) < 0) {
        *why = "authority port is not 1-65535";
        return -1;
    }
    hn = (size_t)(colon - p);
    if (hn == 0) {
        *why = "authority without a host";
        return -1;
    }
    if (p[0] == '[') {
        if (hn < 3 || p[hn - 1] != ']' || hn - 2 >= sizeof(host)) {
            *why = "malformed IPv6 authority";
            return -1;
        }
        memcpy(host, p + 1, hn - 2);
        host[hn - 2] = '\0';
        if (strchr(host, ':') == NULL ||
            addr_literal(&out->addr, host, (int)out->port) < 0) {
            *why = "malformed IPv6 authority";
            return -1;
        }
        out->is_addr = 1;
        return 0;
    }
    if (hn > 253) {
        *why = "authority host too long";
        return -1;
    }
    for (size_t i = 0; i < hn; i++)
        if (!name_char(p[i])) {
            *why = "authority host has a character not allowed in a name";
            return -1;
        }
    /* A dotted quad is an address; anything else a name. */
    if (hn < sizeof(host)) {
        memcpy(host, p, hn);
        host[hn] = '\0';
        if (strchr(host, ':') == NULL &&
            addr_literal(&out->addr, host, (int)out->port) == 0) {
            out->is_addr = 1;
            return 0;
        }
    }
    out->host.p = p;
    out->host.n = hn;
    return 0;
}

/* The value of a Forwarded parameter at p (up to end): a token, or a
 * quoted string (backslash escapes kept as they are). Sets *v to the
 * value without quotes and returns where it ends, or NULL when a quote
 * is not closed. */
static const char *param_value(const char *p, const char *end, struct slice *v)
{
    if (p < end && *p == '"') {
        const char *s = ++p;
        while (p < end && *p != '"') {
            if (*p == '\\' && p + 1 < end)
                p++;
            p++;
        }
        if (p >= end)
            return NULL;
        v->p = s;
        v->n = (size_t)(p - s);
        return p + 1;
    }
    v->p = p;
    while (p < end && *p != ';' && *p != ',')
        p++;
    v->n = (size_t)(p - v->p);
    /* Trailing blanks before a separator are not part of a token. */
    while (v->n > 0 && (v->p[v->n - 1] == ' ' || v->p[v->n - 1] == '\t'))
        v->n--;
    return p;
}

/* for= holds an address and port: "ip:port" or "[v6]:port", as ztunnel
 * writes its source. */
static int for_ok(struct slice v)
{
    struct hbone_authority a;
    const char *why;

    return hbone_authority_parse(v.p, v.n, &a, &why) == 0 && a.is_addr;
}

int hbone_forwarded_parse(const char *p, size_t n, struct hbone_forwarded *out,
                          const char **why)
{
    const char *end = p + n;
    int have_host = 0, have_for = 0;

    memset(out, 0, sizeof(*out));
    if (!printable(p, n)) {
        *why = "Forwarded has a byte outside printable ASCII";
        return -1;
    }
    while (p < end) {
        const char *name, *eq;
        struct slice v;
        size_t nl;

        while (p < end && (*p == ' ' || *p == '\t' || *p == ';' || *p == ','))
            p++;
        if (p >= end)
            break;
        name = p;
        while (p < end && *p != '=' && *p != ';' && *p != ',')
            p++;
        if (p >= end || *p != '=') {
            *why = "Forwarded parameter without a value";
            goto fail;
        }
        eq = p;
        nl = (size_t)(eq - name);
        while (nl > 0 && (name[nl - 1] == ' ' || name[nl - 1] == '\t'))
            nl--;
        if (nl == 0) {
            *why = "Forwarded parameter without a name";
            goto fail;
        }
        p = param_value(eq + 1, end, &v);
        if (p == NULL) {
            *why = "Forwarded quoted string not closed";
            goto fail;
        }
        if (nl == 3 && strncasecmp(name, "for", 3) == 0 && !have_for) {
            if (!for_ok(v)) {
                *why = "Forwarded for= is not an address and port";
                goto fail;
            }
            out->for_ = v;
            have_for = 1;
        } else if (nl == 4 && strncmp(name, "host", 4) == 0 && !have_host) {
            /* ztunnel takes the first host=, and none when it is empty. */
            out->host = v;
            have_host = 1;
        }
        while (p < end && *p != ';' && *p != ',') {
            if (*p != ' ' && *p != '\t') {
                *why = "Forwarded value followed by junk";
                goto fail;
            }
            p++;
        }
    }
    return 0;
fail:
    memset(out, 0, sizeof(*out));
    return -1;
}

static void baggage_set(struct hbone_baggage *b, struct slice k, struct slice v)
{
    static const struct {
        const char *key;
        size_t off;
    } keys[] = {
        {"k8s.cluster.name", offsetof(struct hbone_baggage, cluster)},
        {"k8s.namespace.name", offsetof(struct hbone_baggage, ns)},
        {"k8s.deployment.name", offsetof(struct hbone_baggage, workload)},
        {"k8s.cronjob.name", offsetof(struct hbone_baggage, workload)},
        {"k8s.pod.name", offsetof(struct hbone_baggage, workload)},
        {"k8s.job.name", offsetof(struct hbone_baggage, workload)},
        {"service.name", offsetof(struct hbone_baggage, service)},
        {"service.version", offsetof(struct hbone_baggage, version)},
        {"cloud.region", offsetof(struct hbone_baggage, region)},
        {"cloud.availability_zone", offsetof(struct hbone_baggage, zone)},
    };

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (slice_eq_str(k, keys[i].key)) {
            *(struct slice *)(void *)((char *)b + keys[i].off) = v;
            return;
        }
}

int hbone_baggage_parse(const char *p, size_t n, struct hbone_baggage *out,
                        const char **why)
{
    const char *end = p + n;

    memset(out, 0, sizeof(*out));
    if (!printable(p, n)) {
        *why = "baggage has a byte outside printable ASCII";
        return -1;
    }
    while (p <= end) {
        const char *m = p, *me, *eq, *v2;
        struct slice k, v;

        while (p < end && *p != ',')
            p++;
        me = p++;
        /* ztunnel: parts = member.split('='); key parts[0], value
         * parts[1] when there are two parts or more. */
        eq = memchr(m, '=', (size_t)(me - m));
        if (eq == NULL)
            continue;
        k.p = m;
        k.n = (size_t)(eq - m);
        v2 = memchr(eq + 1, '=', (size_t)(me - eq - 1));
        v.p = eq + 1;
        v.n = (size_t)((v2 != NULL ? v2 : me) - (eq + 1));
        if (v.n == 0)
            v.p = NULL;
        baggage_set(out, k, v);
    }
    return 0;
}
