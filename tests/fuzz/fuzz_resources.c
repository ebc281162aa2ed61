/*
 * libFuzzer target for the Istio resource loader: YAML or JSON bytes are
 * loaded as one file, checked against the schema and, when they load,
 * analysed. Any input must load or be refused with a message, without
 * leaks or undefined behaviour. Build and run with tests/fuzz/run.sh
 * (which must link -lpcre2-8).
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "config/analyze.h"
#include "config/resource.h"
#include "core/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct buf errs;
    struct analysis an;
    int nerr = 0;
    struct resource_set *set;

    buf_init(&errs, 1 << 20);
    set =
        resource_load_mem((const char *)data, size, "fuzz.yaml", &errs, &nerr);
    if (set == NULL)
        abort();
    /* Errors always explain themselves, and only errors fill errs. */
    if ((nerr > 0) != (buf_len(&errs) > 0))
        abort();
    if (analyze(set, &an) < nerr)
        abort();
    analysis_dispose(&an);
    resource_set_free(set);
    buf_dispose(&errs);
    return 0;
}
