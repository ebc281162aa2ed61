#ifndef STRAIT_CONTROL_CA_CA_API_H
#define STRAIT_CONTROL_CA_CA_API_H

#include <stddef.h>
#include <stdint.h>

struct buf;

/*
 * The CA's HTTP API, shaped like Istio's
 * istio.v1.auth.IstioCertificateService/CreateCertificate in JSON:
 *
 *   POST /v1/certificate
 *   Authorization: Bearer <join token>   (first certificate only)
 *   {"csr": "<PEM>", "validity_duration": 86400}
 *
 *   200 {"cert_chain": ["<leaf PEM>", ..., "<root PEM>"]}
 *   4xx {"error": "<reason>"}
 *
 * validity_duration is in seconds and may be a JSON number or, as proto3
 * JSON writes int64, a string of digits. Unknown fields (e.g. Istio's
 * metadata) are ignored. Bodies are at most CA_API_MAX_BODY bytes.
 */
#define CA_API_PATH "/v1/certificate"
#define CA_API_MAX_BODY (64 * 1024)
#define CA_API_MAX_CHAIN 8

struct ca_api_request {
    char *csr;
    int64_t validity_s; /* 0 when not given */
};

struct ca_api_response {
    char *chain[CA_API_MAX_CHAIN];
    size_t n;
    char *error;
};

/* Parsers: 0, or -1 with a static reason in *why. The result is valid
 * for *_dispose() either way. */
int ca_api_request_parse(const char *body, size_t n, struct ca_api_request *req,
                         const char **why);
void ca_api_request_dispose(struct ca_api_request *req);

int ca_api_response_parse(const char *body, size_t n,
                          struct ca_api_response *resp, const char **why);
void ca_api_response_dispose(struct ca_api_response *resp);

/* Writers; 0, or -1 when b is full. */
int ca_api_request_write(struct buf *b, const char *csr, int64_t validity_s);
int ca_api_response_write(struct buf *b, const char *const *pems, size_t n);
int ca_api_error_write(struct buf *b, const char *msg);

#endif
