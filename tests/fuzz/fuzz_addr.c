/*
 * libFuzzer target for the small value parsers of configuration files:
 * addresses (with a format/parse round trip), durations and sizes.
 * Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/addr.h"
#include "core/units.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    const char *why = NULL;
    struct addr a, b;
    int64_t v;

    for (int port0 = 0; port0 <= 1; port0++) {
        if (addr_parse(&a, s, size, port0, &why) == 0) {
            char out[ADDR_STRLEN];

            addr_format(&a, out, sizeof(out));
            /* The canonical form parses back to the same address. */
            if (addr_parse(&b, out, strlen(out), 1, &why) != 0 ||
                !addr_equal(&a, &b))
                abort();
        } else if (why == NULL) {
            abort();
        }
    }

    why = NULL;
    if (units_duration_ms(s, size, &v, &why) == 0) {
        if (v < 0)
            abort();
    } else if (why == NULL) {
        abort();
    }
    why = NULL;
    if (units_size(s, size, &v, &why) == 0) {
        if (v < 0)
            abort();
    } else if (why == NULL) {
        abort();
    }
    why = NULL;
    if (units_int(s, size, &v, &why) != 0 && why == NULL)
        abort();
    return 0;
}
