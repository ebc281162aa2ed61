/*
 * libFuzzer target for the access-log format compiler
 * (src/http/access_format.c): a format is compiled as text and as a JSON
 * object; whatever compiles is run against a request. Build and run with
 * tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "http/access_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct http_field fields[] = {
        {{"user-agent", 10}, {"fuzz", 4}},
        {{"x-request-id", 12}, {"a\nb", 3}},
    };
    struct http_request req;
    struct afmt_ctx c;

    memset(&req, 0, sizeof(req));
    req.method = (struct slice){"GET", 3};
    req.path = (struct slice){"/p?q", 4};
    req.fields.v = fields;
    req.fields.n = 2;
    memset(&c, 0, sizeof(c));
    c.req = &req;
    c.resp = &req.fields;
    c.start_us = INT64_C(1700000000123456);
    c.status = 200;
    c.downstream_remote = "[::1]:9";
    c.downstream_local = "127.0.0.1:80";
    for (int json = 0; json <= 1; json++) {
        char *err = NULL;
        struct afmt *f = afmt_compile((const char *)data, size, json, &err);
        struct buf b;

        if (f == NULL) {
            /* A refusal always says why. */
            if (err == NULL)
                abort();
            free(err);
            continue;
        }
        buf_init(&b, 1 << 20);
        if (afmt_write(f, &c, &b) == 0 &&
            (buf_len(&b) == 0 || buf_ptr(&b)[buf_len(&b) - 1] != '\n'))
            abort();
        buf_dispose(&b);
        afmt_free(f);
    }
    return 0;
}
