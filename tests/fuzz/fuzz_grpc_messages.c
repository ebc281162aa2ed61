/*
 * libFuzzer target for the gRPC message counter of body pipes
 * (hpipe_count_grpc: Istio's istio_request_messages_total) and the label
 * value escaping of Istio's metrics. The first byte picks how the input
 * is cut into writes; the count must not depend on the cuts (a reference
 * walks the whole input at once), and an escaped value never holds a
 * bare quote, newline or a dangling backslash. Build and run with
 * tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/series.h"
#include "http/pipe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Messages whose 5-byte prefix is whole in d. */
static uint64_t reference(const uint8_t *d, size_t n)
{
    uint64_t msgs = 0;
    size_t i = 0;

    while (i + 5 <= n) {
        uint64_t len = ((uint64_t)d[i + 1] << 24) | ((uint64_t)d[i + 2] << 16) |
                       ((uint64_t)d[i + 3] << 8) | d[i + 4];
        msgs++;
        i += 5;
        if (len > n - i)
            break;
        i += (size_t)len;
    }
    return msgs;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct hpipe p;
    size_t step, off = 0;
    char out[64];
    size_t w;

    if (size < 1)
        return 0;
    step = (size_t)data[0] % 7 + 1;
    data++;
    size--;
    hpipe_init(&p, NULL, size + 1);
    hpipe_count_grpc(&p);
    while (off < size) {
        size_t n = size - off < step ? size - off : step;
        if (hpipe_write(&p, data + off, n) != n)
            abort();
        off += n;
        step = step * 3 % 11 + 1;
    }
    if (p.grpc_msgs != reference(data, size))
        abort();
    hpipe_dispose(&p);

    w = series_escape(out, sizeof(out), (const char *)data, size);
    if (w >= sizeof(out) || out[w] != '\0' || strlen(out) != w)
        abort();
    for (size_t i = 0; i < w; i++) {
        if (out[i] == '\n' || (unsigned char)out[i] < 0x20)
            abort();
        if (out[i] == '\\') {
            if (i + 1 >= w ||
                (out[i + 1] != '\\' && out[i + 1] != '"' && out[i + 1] != 'n'))
                abort();
            i++;
        } else if (out[i] == '"') {
            abort();
        }
    }
    return 0;
}
