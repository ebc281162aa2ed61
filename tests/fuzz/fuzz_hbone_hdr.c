/*
 * libFuzzer target for the HBONE request fields (src/http/hbone_hdr.c):
 * the input is read as a CONNECT authority, a Forwarded value and a
 * baggage value. Every slice a parser returns must lie inside the input;
 * an authority that parses has a port 1-65535. Build and run with
 * tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/hbone_hdr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const char *base, size_t n, struct slice s)
{
    if (s.n == 0)
        return;
    if (s.p < base || s.p + s.n > base + n)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct hbone_authority a;
    struct hbone_forwarded f;
    struct hbone_baggage b;
    const char *why;

    if (hbone_authority_parse(s, size, &a, &why) == 0) {
        if (a.port == 0 || a.port > 65535)
            abort();
        if (!a.is_addr && a.host.n == 0)
            abort();
        inside(s, size, a.host);
    }
    if (hbone_forwarded_parse(s, size, &f, &why) == 0) {
        inside(s, size, f.for_);
        inside(s, size, f.host);
    } else if (f.for_.n != 0 || f.host.n != 0) {
        abort();
    }
    if (hbone_baggage_parse(s, size, &b, &why) == 0) {
        inside(s, size, b.cluster);
        inside(s, size, b.ns);
        inside(s, size, b.workload);
        inside(s, size, b.service);
        inside(s, size, b.version);
        inside(s, size, b.region);
        inside(s, size, b.zone);
    }
    return 0;
}
