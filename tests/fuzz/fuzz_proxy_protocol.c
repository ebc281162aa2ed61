/*
 * libFuzzer target for the PROXY protocol parser (src/net/proxy_proto.c):
 * the input is a connection's first bytes. A complete header never claims
 * more bytes than the input, a v1 line is at most 107 bytes and a v2
 * header at most the bound given; every prefix of a complete header is
 * "need more", never an error (bytes that arrive one at a time parse as
 * they do in one piece). Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/proxy_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pp_result r;
    const char *why = NULL;
    size_t max = 1024;
    uint8_t *copy;
    int v;

    /* An exact-size copy, so ASan sees a read past the end. */
    copy = malloc(size > 0 ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    v = pp_parse(copy, size, max, &r, &why);
    if (v < 0 && why == NULL)
        abort();
    if (v == 1) {
        if (r.len == 0 || r.len > size)
            abort();
        if (r.version == 1 && r.len > PP_V1_MAX)
            abort();
        if (r.version == 2 && r.len > max)
            abort();
        if (!r.local && r.src.ss_family != AF_INET &&
            r.src.ss_family != AF_INET6)
            abort();
        /* Every shorter prefix of the header needs more bytes. */
        for (size_t k = 0; k < r.len; k++) {
            struct pp_result p;
            const char *pw = NULL;
            if (pp_parse(copy, k, max, &p, &pw) != 0)
                abort();
        }
    }
    free(copy);
    return 0;
}
