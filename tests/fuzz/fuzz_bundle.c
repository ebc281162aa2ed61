/*
 * libFuzzer target for SPIFFE trust bundles (MeshLink spec.trustBundle):
 * the JWK Set, the x5c base64 and DER, the key checks; what parses is
 * written back and must parse again to the same roots. Build and run
 * with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/buf.h"
#include "tls/bundle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct spiffe_bundle b, again;
    const char *why = NULL;
    struct buf out;

    if (bundle_parse((const char *)data, size, &b, &why) < 0) {
        if (why == NULL || b.roots != NULL)
            abort();
        return 0;
    }
    buf_init(&out, 4u << 20);
    if (bundle_write(&out, b.roots, b.sequence) == 0) {
        if (bundle_parse(buf_ptr(&out), buf_len(&out), &again, &why) < 0 ||
            !bundle_same_roots(b.roots, again.roots))
            abort();
        bundle_dispose(&again);
    }
    buf_dispose(&out);
    bundle_dispose(&b);
    return 0;
}
