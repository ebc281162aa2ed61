/*
 * libFuzzer target for what the CA reads from the network: the JSON
 * request and response bodies of the CA API and the PEM CSR inside. The
 * first byte picks how the rest is used: as PEM text as is, as DER wrapped
 * into a PEM block (so mutations reach the ASN.1 parser), or as a JSON
 * body whose csr field is then parsed too.
 * Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <openssl/base64.h>
#include <openssl/evp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control/ca/ca_api.h"
#include "control/ca/csr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void csr(const char *p, size_t n)
{
    const char *why = NULL;
    EVP_PKEY *k = csr_parse(p, n, &why);

    if (k == NULL && why == NULL)
        abort();
    EVP_PKEY_free(k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ca_api_request req;
    struct ca_api_response resp;
    const char *why = NULL;
    uint8_t mode;

    if (size == 0)
        return 0;
    mode = data[0] % 3;
    data++;
    size--;
    if (mode == 0) {
        csr((const char *)data, size);
    } else if (mode == 1) {
        static const char head[] = "-----BEGIN CERTIFICATE REQUEST-----\n";
        static const char tail[] = "\n-----END CERTIFICATE REQUEST-----\n";
        size_t b64;
        char *pem;

        if (size > 8192 || !EVP_EncodedLength(&b64, size))
            return 0;
        pem = malloc(sizeof(head) + b64 + sizeof(tail));
        if (pem == NULL)
            return 0;
        memcpy(pem, head, sizeof(head) - 1);
        b64 = EVP_EncodeBlock((uint8_t *)pem + sizeof(head) - 1, data, size);
        memcpy(pem + sizeof(head) - 1 + b64, tail, sizeof(tail));
        csr(pem, strlen(pem));
        free(pem);
    } else {
        if (ca_api_request_parse((const char *)data, size, &req, &why) == 0) {
            if (req.csr == NULL)
                abort();
            csr(req.csr, strlen(req.csr));
        } else if (why == NULL) {
            abort();
        }
        ca_api_request_dispose(&req);
        if (ca_api_response_parse((const char *)data, size, &resp, &why) == 0) {
            if (resp.n == 0 && resp.error == NULL)
                abort();
        }
        ca_api_response_dispose(&resp);
    }
    return 0;
}
