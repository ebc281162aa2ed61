/*
 * libFuzzer target for CRL files (Gateway and DestinationRule caCrl, a
 * credential's ca.crl): the PEM blocks, the DER inside them, and the
 * checks made before a CRL is used. Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tls/crl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *err = NULL;
    STACK_OF(X509_CRL) *crls = crl_parse(data, size, &err);

    /* Either CRLs or a reason, never both or neither. */
    if ((crls == NULL) == (err == NULL))
        abort();
    free(err);
    err = NULL;
    if (crls != NULL) {
        if (sk_X509_CRL_num(crls) == 0)
            abort();
        /* 2030-01-01: a fixed "now", so a run is reproducible. */
        if (crl_check(crls, NULL, 1893456000, &err) < 0 && err == NULL)
            abort();
        free(err);
    }
    sk_X509_CRL_pop_free(crls, X509_CRL_free);
    return 0;
}
