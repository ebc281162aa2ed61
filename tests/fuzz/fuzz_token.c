/*
 * libFuzzer target for join tokens and what surrounds them: the token
 * string, the CA's token records, base64url (with a round trip), SPIFFE
 * IDs and the --join URL.
 * Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control/ca/ca_client.h"
#include "control/ca/pki.h"
#include "control/ca/token.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    const char *why = NULL;
    struct token t;
    char *ns, *sa, *td, *host, *z;
    int64_t exp;
    int port;
    uint8_t raw[512];
    ssize_t n;

    if (token_parse(s, size, &t, &why) == 0) {
        char out[TOKEN_STRLEN];
        struct token u;

        /* A parsed token formats back to one that parses the same. */
        token_format(&t, out);
        if (token_parse(out, strlen(out), &u, &why) != 0 ||
            memcmp(&t, &u, sizeof(t)) != 0)
            abort();
    } else if (why == NULL) {
        abort();
    }
    if (token_record_parse(s, size, &ns, &sa, &exp, &why) == 0) {
        if (!pki_name_ok(ns) || !pki_name_ok(sa))
            abort();
        free(ns);
        free(sa);
    }
    n = pki_b64url_decode(s, size, raw, sizeof(raw));
    if (n >= 0) {
        char enc[1024];
        /* Decoding accepts canonical encodings only: re-encoding gives
         * the input back. */
        pki_b64url_encode(raw, (size_t)n, enc, sizeof(enc));
        if (strlen(enc) != size || memcmp(enc, s, size) != 0)
            abort();
    }
    z = strndup(s, size);
    if (z == NULL)
        return 0;
    if (pki_spiffe_split(z, &td, &ns, &sa) == 0) {
        free(td);
        free(ns);
        free(sa);
    }
    if (ca_client_parse_url(z, &host, &port, &why) == 0) {
        if (port < 1 || port > 65535)
            abort();
        free(host);
    }
    free(z);
    return 0;
}
