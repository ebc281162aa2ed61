/*
 * libFuzzer target for the ClientHello reader (src/tls/clienthello.c).
 * Each input is read whole, then as every prefix a peek could return
 * (those must never fail where the whole succeeded), with a small and a
 * large scratch buffer. A result's names must lie inside the scratch
 * buffer. The input, and every SNI read, also goes through the Istio SNI
 * parser (src/tls/istio_sni.c) as an AUTO_PASSTHROUGH listener reads it:
 * what it accepts must lie inside the name and format back to the same
 * bytes. Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tls/clienthello.h"
#include "tls/istio_sni.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_istio_sni(const uint8_t *name, size_t n)
{
    struct istio_sni s;
    const char *why = NULL;
    char host[300], subset[300], again[700];
    int len;

    if (istio_sni_parse((const char *)name, n, &s, &why) < 0) {
        if (why == NULL || s.port != 0 || s.host.p != NULL)
            abort();
        return;
    }
    if (s.port == 0 || s.port > 65535 || s.host.n == 0 ||
        s.host.p < (const char *)name ||
        s.host.p + s.host.n != (const char *)name + n ||
        (s.subset.n > 0 && (s.subset.p < (const char *)name ||
                            s.subset.p + s.subset.n > s.host.p)) ||
        s.host.n >= sizeof(host))
        abort();
    if (s.subset.n >= sizeof(subset))
        return; /* a raw input longer than any SNI */
    memcpy(host, s.host.p, s.host.n);
    host[s.host.n] = '\0';
    memcpy(subset, s.subset.p ? s.subset.p : "", s.subset.n);
    subset[s.subset.n] = '\0';
    len = istio_sni_format(again, sizeof(again), s.port, subset, host);
    if (len < 0 || (size_t)len != n || memcmp(again, name, n) != 0)
        abort();
}

static void check(const struct clienthello *ch, const uint8_t *scratch,
                  size_t cap)
{
    size_t off = 0, n;
    const uint8_t *name;

    if (ch->sni_len > 0 &&
        (ch->sni < scratch || ch->sni + ch->sni_len > scratch + cap ||
         ch->sni_len > 255 || memchr(ch->sni, 0, ch->sni_len) != NULL))
        abort();
    if (ch->alpn_len > 0 &&
        (ch->alpn < scratch || ch->alpn + ch->alpn_len > scratch + cap))
        abort();
    while (clienthello_alpn_next(ch, &off, &name, &n))
        if (n == 0 || name + n > ch->alpn + ch->alpn_len)
            abort();
    if (off != ch->alpn_len)
        abort();
    if (ch->sni_len > 0)
        check_istio_sni(ch->sni, ch->sni_len);
    (void)istio_alpn_offered(ch);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t scratch[64 * 1024];
    static const size_t caps[] = {512, sizeof(scratch)};
    struct clienthello ch;
    const char *why;

    check_istio_sni(data, size);
    for (size_t c = 0; c < 2; c++) {
        int rc = clienthello_parse(data, size, scratch, caps[c], &ch, &why);
        if (rc < 0 && why == NULL)
            abort();
        if (rc != CH_OK)
            continue;
        check(&ch, scratch, caps[c]);
        if (ch.consumed == 0 || ch.consumed > size)
            abort();
        /* Any shorter peek waits for more; it never decides otherwise. */
        for (size_t i = size < 64 ? 0 : ch.consumed - 1; i < ch.consumed; i++)
            if (clienthello_parse(data, i, scratch, caps[c], &ch, &why) !=
                CH_NEED_MORE)
                abort();
    }
    return 0;
}
