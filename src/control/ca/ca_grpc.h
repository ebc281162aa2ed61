#ifndef STRAIT_CONTROL_CA_CA_GRPC_H
#define STRAIT_CONTROL_CA_CA_GRPC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct buf;

/*
 * Istio's certificate API on the wire: gRPC over HTTP/2, service
 * istio.v1.auth.IstioCertificateService, method CreateCertificate
 * (istio/api security/v1alpha1/ca.proto):
 *
 *   message IstioCertificateRequest {
 *     string csr = 1;                      PEM
 *     int64 validity_duration = 3;         seconds
 *     google.protobuf.Struct metadata = 4; impersonation, istiod only
 *   }
 *   message IstioCertificateResponse {
 *     repeated string cert_chain = 1;      leaf first
 *     Roots root_cert = 2;                 message Roots {repeated string
 *   }                                        ca_cert = 1;}
 *
 * (Field 2 of the request, subject_id, was removed from Istio's proto.)
 * Each message travels in gRPC's length-prefixed frame: one flag byte
 * (compressed) and a 4-byte big-endian length. strait never compresses
 * and never advertises an encoding, so a compressed frame is refused.
 * Messages are at most CA_GRPC_MAX_MESSAGE bytes, the JSON API's bound.
 */
#define CA_GRPC_PATH "/istio.v1.auth.IstioCertificateService/CreateCertificate"
#define CA_GRPC_MAX_MESSAGE (64 * 1024)
/* Certificates a response may carry, cert_chain and root_cert together. */
#define CA_GRPC_MAX_CERTS 8

/* The gRPC status codes strait sends or names. */
enum ca_grpc_status {
    CA_GRPC_OK = 0,
    CA_GRPC_INVALID_ARGUMENT = 3,
    CA_GRPC_DEADLINE_EXCEEDED = 4,
    CA_GRPC_PERMISSION_DENIED = 7,
    CA_GRPC_RESOURCE_EXHAUSTED = 8,
    CA_GRPC_UNIMPLEMENTED = 12,
    CA_GRPC_INTERNAL = 13,
    CA_GRPC_UNAVAILABLE = 14,
    CA_GRPC_UNAUTHENTICATED = 16,
};

/* ca_grpc_status_name() is the code's name ("UNAUTHENTICATED"), static;
 * "code N" for codes without one here. buf holds that (16 bytes). */
const char *ca_grpc_status_name(int code, char buf[16]);

struct ca_grpc_request {
    char *csr;          /* NUL-terminated; NULL when absent */
    int64_t validity_s; /* 0 when absent */
    int has_metadata;   /* field 4 was sent and not empty */
};

struct ca_grpc_response {
    char *certs[CA_GRPC_MAX_CERTS]; /* cert_chain, then root_cert's */
    size_t n;
    size_t nchain; /* how many of certs came from cert_chain */
};

/*
 * Decoders of the protobuf messages. Unknown fields are skipped as
 * protobuf requires; a string field given twice keeps the last value. 0,
 * or -1 with a static reason in *why; the result is valid for *_dispose()
 * either way.
 */
int ca_grpc_request_decode(const uint8_t *p, size_t n,
                           struct ca_grpc_request *req, const char **why);
void ca_grpc_request_dispose(struct ca_grpc_request *req);
int ca_grpc_response_decode(const uint8_t *p, size_t n,
                            struct ca_grpc_response *resp, const char **why);
void ca_grpc_response_dispose(struct ca_grpc_response *resp);

/* Encoders; each appends one message in its gRPC frame to b. 0, or -1
 * when b is full or a message would pass CA_GRPC_MAX_MESSAGE. */
int ca_grpc_request_encode(struct buf *b, const char *csr, int64_t validity_s);
int ca_grpc_response_encode(struct buf *b, const char *const *pems, size_t n);

/*
 * ca_grpc_frame_parse() reads one gRPC frame from the bytes received so
 * far. Returns the bytes the frame takes (prefix included) with the
 * message at *msg (pointing into p) and its length in *msg_len, 0 when
 * more bytes are needed, or -1 with a static reason (a compressed
 * message, or one over max bytes).
 */
ssize_t ca_grpc_frame_parse(const uint8_t *p, size_t n, size_t max,
                            const uint8_t **msg, size_t *msg_len,
                            const char **why);

/* gRPC's percent-encoding of grpc-message (bytes outside 0x20-0x7e and
 * '%' as %XX): encode appends to b; decode writes at most cap-1 bytes and
 * a NUL into out. 0, or -1 when b is full. */
int ca_grpc_message_encode(struct buf *b, const char *msg);
void ca_grpc_message_decode(const char *p, size_t n, char *out, size_t cap);

/*
 * ca_grpc_token_claims() reads what a client can know of its own JWT
 * without its issuer's keys: the exp claim (seconds, 0 when absent) and
 * whether aud names audience (1), names others only (0), or is absent
 * (-1). The signature is not checked: this is for saying "your token has
 * expired" before sending it, never for trusting it. 0, or -1 with a
 * static reason when the token is not a JWT.
 */
int ca_grpc_token_claims(const char *tok, size_t n, const char *audience,
                         int64_t *exp, int *aud);

#endif
