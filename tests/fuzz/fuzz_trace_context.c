/*
 * libFuzzer target for trace context headers (src/http/trace_context.c):
 * the input is a traceparent, a tracestate and a b3 value in turn, and a
 * set of fields for tctx_from_fields(). A traceparent that parses must
 * format back to its first 55 bytes (version 00). Build and run with
 * tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/trace_context.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct http_field fv[6];
    struct http_fields fs = {fv, 0, 6};
    struct tctx t;
    int ok, one;

    if (tctx_parse_traceparent(s, size, &t) == 0) {
        char out[56];
        tctx_traceparent(t.trace_id, t.parent_id, t.sampled, out);
        if (size == 55 && s[0] == '0' && s[1] == '0' &&
            (memcmp(out, s, 53) != 0))
            abort();
    }
    (void)tctx_tracestate_valid(s, size);
    {
        static const char *const names[] = {"traceparent", "tracestate",
                                            "b3",          "x-b3-traceid",
                                            "x-b3-spanid", "x-b3-sampled"};
        /* Cut the input into up to six values at NUL bytes. */
        size_t at = 0;
        for (int i = 0; i < 6 && at <= size; i++) {
            const char *z = memchr(s + at, 0, size - at);
            size_t n = z ? (size_t)(z - (s + at)) : size - at;
            fv[i].name = (struct slice){names[i], strlen(names[i])};
            fv[i].value = (struct slice){s + at, n};
            fs.n = (size_t)i + 1;
            at += n + 1;
        }
        (void)tctx_from_fields(&fs, &t, &ok, &one);
    }
    return 0;
}
