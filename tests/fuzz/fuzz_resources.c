/*
 * libFuzzer target for the Istio resource loader: YAML or JSON bytes are
 * loaded as one file, checked against the schema and, when they load,
 * analysed, and their AuthorizationPolicies compiled and asked about a
 * request. Any input must load or be refused with a message, without
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
#include "compile/authz.h"
#include "policy/authz.h"

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
    {
        /* Under ALLOW_ANY an undeclared destination is a warning: never
         * more errors than under REGISTRY_ONLY. */
        int strict = analyze(set, RES_REGISTRY_ONLY, &an);
        if (strict < nerr)
            abort();
        analysis_dispose(&an);
        if (analyze(set, RES_ALLOW_ANY, &an) > strict)
            abort();
        analysis_dispose(&an);
    }
    {
        /* Whatever policies loaded compile and decide a request. */
        char *err = NULL;
        struct authz *a =
            compile_authz(set, "istio-system", NULL, "istio-system", &err);
        struct authz_request r = {0};
        struct authz_decision d;
        r.principal = slice_of("cluster.local/ns/a/sa/b");
        r.host = slice_of("a.example.com:8080");
        r.method = slice_of("GET");
        r.path = slice_of("/api/v1/x?q=1");
        r.port = 8080;
        authz_check(a, &r, &d);
        authz_unref(a);
        free(err);
    }
    resource_set_free(set);
    buf_dispose(&errs);
    return 0;
}
