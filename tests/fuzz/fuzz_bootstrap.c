/*
 * libFuzzer target for the bootstrap file: YAML loading, table decoding and
 * cross-key validation on arbitrary bytes. Any input must either load or
 * be refused with a message, without leaks or undefined behaviour.
 * Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "config/bootstrap.h"
#include "core/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *err = NULL;
    struct bootstrap *bs =
        bootstrap_parse((const char *)data, size, "fuzz", &err);

    if (bs != NULL) {
        /* A loaded bootstrap must also print: the admin API dumps it. */
        struct buf b;

        buf_init(&b, 1 << 20);
        bootstrap_to_json(bs, &b);
        buf_dispose(&b);
        if (bs->listeners.n > 0)
            (void)bootstrap_listener_equal(bootstrap_listener_at(bs, 0),
                                           bootstrap_listener_at(bs, 0));
        (void)bootstrap_workers(bs);
        /* Success never comes with a message. */
        if (err != NULL)
            abort();
    } else if (err == NULL) {
        /* Failure always explains itself. */
        abort();
    }
    bootstrap_free(bs);
    free(err);
    return 0;
}
