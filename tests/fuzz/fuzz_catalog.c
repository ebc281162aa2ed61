/*
 * libFuzzer target for the catalog stream's lines (control/link/
 * catalog.h) a linked site reads from another site, and for the
 * registry entries made of them, which must load as resources without
 * error, and for link credential records. Build and run with
 * tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/resource.h"
#include "control/link/catalog.h"
#include "control/link/store.h"
#include "core/arena.h"
#include "core/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct catalog_link link = {"site-b", "default", "net-b"};
    struct arena a;
    struct catalog c;
    char why[512], site[64], hash[65];
    const char *w;
    int64_t created;
    struct link_pin pin;

    (void)link_store_record_parse((const char *)data, size, site, hash,
                                  &created, &pin, &w);
    arena_init(&a, 4096);
    if (catalog_decode((const char *)data, size, "b.example", &a, &c, why,
                       sizeof(why)) == 0 &&
        c.type == CAT_CATALOG) {
        /* Whatever was accepted becomes entries that load cleanly. */
        for (size_t i = 0; i < c.nservices && i < 8; i++) {
            struct buf b, errs;
            struct res_input in;
            struct resource_set *set;
            int nerr = 0;
            buf_init(&b, 8u << 20);
            buf_init(&errs, 1u << 20);
            if (catalog_resource(&b, &link, &c.services[i]) < 0)
                abort();
            in.name = "fuzz";
            in.data = buf_ptr(&b);
            in.len = buf_len(&b);
            in.kind = NULL;
            in.ns = NULL;
            in.rname = NULL;
            set = resource_load_inputs(NULL, "default", &in, 1, &errs, &nerr);
            if (nerr != 0)
                abort();
            resource_set_free(set);
            buf_dispose(&errs);
            buf_dispose(&b);
        }
    }
    arena_dispose(&a);
    return 0;
}
