/*
 * libFuzzer target for the ClientHello reader (src/tls/clienthello.c).
 * Each input is read whole, then as every prefix a peek could return
 * (those must never fail where the whole succeeded), with a small and a
 * large scratch buffer. A result's names must lie inside the scratch
 * buffer. Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tls/clienthello.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t scratch[64 * 1024];
    static const size_t caps[] = {512, sizeof(scratch)};
    struct clienthello ch;
    const char *why;

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
