/*
 * libFuzzer target for the socket batch a binary upgrade receives from
 * the running strait (control/upgrade.c): whatever the bytes, the parser
 * accepts at most UPGRADE_BATCH_MAX records with addresses that fit their
 * family, and what it accepts encodes back to the same bytes. Build and
 * run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control/upgrade.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct upgrade_rec recs[UPGRADE_BATCH_MAX];
    static uint8_t out[UPGRADE_MSG_MAX];
    const char *why = NULL;
    size_t k = 0, n;

    if (upgrade_parse_fds(data, size, recs, UPGRADE_BATCH_MAX, &k, &why) < 0) {
        if (why == NULL || k != 0)
            abort();
        return 0;
    }
    if (k == 0 || k > UPGRADE_BATCH_MAX)
        abort();
    n = upgrade_encode_fds(recs, k, out, sizeof(out));
    if (n != size || memcmp(out, data, size) != 0)
        abort();
    return 0;
}
