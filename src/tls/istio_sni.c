/*
 * Istio's outbound SNI and mesh ALPN names (see istio_sni.h). Pure
 * functions on byte slices: no allocation, no state.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "tls/clienthello.h"
#include "tls/istio_sni.h"

#define PREFIX "outbound_."
#define SEP "_."

/* The first "_." in p[0..n), or NULL. */
static const char *find_sep(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '_' && p[i + 1] == '.')
            return p + i;
    return NULL;
}

/* A DNS name as a service host: labels of letters, digits and '-',
 * joined by single dots. Istio's hosts are lowercase FQDNs; the caller
 * decides about case. */
static int host_ok(const char *p, size_t n)
{
    size_t label = 0;

    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '.') {
            if (label == 0)
                return 0;
            label = 0;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-'))
            return 0;
        if (++label > 63)
            return 0;
    }
    return label > 0;
}

/* A subset name: Istio validates them as DNS-1123 labels (at most 63
 * letters, digits and '-'); empty is none. */
static int subset_ok(const char *p, size_t n)
{
    if (n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-'))
            return 0;
    }
    return 1;
}

int istio_sni_parse(const char *name, size_t len, struct istio_sni *out,
                    const char **why)
{
    const char *p = name, *end = name + len, *sep;
    uint32_t port = 0;
    size_t digits;

    memset(out, 0, sizeof(*out));
    if (len < sizeof(PREFIX) - 1 ||
        memcmp(name, PREFIX, sizeof(PREFIX) - 1) != 0) {
        *why = "not outbound_.<port>_.<subset>_.<host>";
        return -1;
    }
    p += sizeof(PREFIX) - 1;
    sep = find_sep(p, (size_t)(end - p));
    if (sep == NULL) {
        *why = "no port";
        return -1;
    }
    digits = (size_t)(sep - p);
    if (digits == 0 || digits > 5 || p[0] == '0') {
        *why = "bad port";
        return -1;
    }
    for (size_t i = 0; i < digits; i++) {
        if (p[i] < '0' || p[i] > '9') {
            *why = "bad port";
            return -1;
        }
        port = port * 10 + (uint32_t)(p[i] - '0');
    }
    if (port > 65535) {
        *why = "bad port";
        return -1;
    }
    p = sep + 2;
    /* The subset runs to the next "_."; "_." right away is none (Istio
     * writes an empty subset between the two separators). */
    sep = find_sep(p, (size_t)(end - p));
    if (sep == NULL) {
        *why = "no subset";
        return -1;
    }
    out->subset.p = p;
    out->subset.n = (size_t)(sep - p);
    if (!subset_ok(out->subset.p, out->subset.n)) {
        memset(out, 0, sizeof(*out));
        *why = "bad subset";
        return -1;
    }
    p = sep + 2;
    if (!host_ok(p, (size_t)(end - p))) {
        memset(out, 0, sizeof(*out));
        *why = "bad host";
        return -1;
    }
    out->port = port;
    out->host.p = p;
    out->host.n = (size_t)(end - p);
    if (out->subset.n == 0)
        out->subset.p = NULL;
    return 0;
}

int istio_sni_format(char *buf, size_t cap, uint32_t port, const char *subset,
                     const char *host)
{
    int n = snprintf(buf, cap, PREFIX "%u" SEP "%s" SEP "%s", (unsigned)port,
                     subset != NULL ? subset : "", host);

    return n < 0 || (size_t)n >= cap ? -1 : n;
}

int istio_alpn_is_mesh(const uint8_t *name, size_t n)
{
    /* Istio's gateway filter chain match (application_protocols). */
    static const char *const mesh[] = {
        "istio",    "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1",
        "istio-h2",
    };

    for (size_t i = 0; i < sizeof(mesh) / sizeof(mesh[0]); i++)
        if (strlen(mesh[i]) == n && memcmp(mesh[i], name, n) == 0)
            return 1;
    return 0;
}

int istio_alpn_offered(const struct clienthello *ch)
{
    const uint8_t *name;
    size_t off = 0, n;

    while (clienthello_alpn_next(ch, &off, &name, &n))
        if (istio_alpn_is_mesh(name, n))
            return 1;
    return 0;
}
