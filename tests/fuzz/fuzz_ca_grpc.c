/*
 * The CA's gRPC wire: frame parsing, both protobuf messages and the
 * grpc-message decoder, as the istiod client and the CA server read them
 * from the network.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "control/ca/ca_grpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ca_grpc_request req;
    struct ca_grpc_response resp;
    const uint8_t *msg;
    size_t len, off = 0;
    const char *why;
    char out[128];
    int64_t exp;
    int aud;

    while (off < size) {
        ssize_t used = ca_grpc_frame_parse(
            data + off, size - off, CA_GRPC_MAX_MESSAGE, &msg, &len, &why);
        if (used <= 0)
            break;
        ca_grpc_request_decode(msg, len, &req, &why);
        ca_grpc_request_dispose(&req);
        ca_grpc_response_decode(msg, len, &resp, &why);
        ca_grpc_response_dispose(&resp);
        off += (size_t)used;
    }
    ca_grpc_request_decode(data, size, &req, &why);
    ca_grpc_request_dispose(&req);
    ca_grpc_response_decode(data, size, &resp, &why);
    ca_grpc_response_dispose(&resp);
    ca_grpc_message_decode((const char *)data, size, out, sizeof(out));
    ca_grpc_token_claims((const char *)data, size, "istio-ca", &exp, &aud);
    return 0;
}
