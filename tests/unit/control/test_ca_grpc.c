#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "control/ca/ca_grpc.h"
#include "control/ca/csr.h"
#include "control/ca/pki.h"
#include "core/buf.h"

/* IstioCertificateRequest{csr: "AB", validity_duration: 300}, framed, as
 * Go's and Python's protobuf write it. */
static const uint8_t REQ[] = {0x00, 0x00, 0x00, 0x00, 0x07, 0x0a,
                              0x02, 0x41, 0x42, 0x18, 0xac, 0x02};

static void test_request_encode_bytes(void **state)
{
    struct buf b;

    (void)state;
    buf_init(&b, 1024);
    assert_int_equal(ca_grpc_request_encode(&b, "AB", 300), 0);
    assert_int_equal(buf_len(&b), sizeof(REQ));
    assert_memory_equal(buf_ptr(&b), REQ, sizeof(REQ));
    /* validity 0 is proto3's default: not written. */
    buf_truncate(&b, 0);
    assert_int_equal(ca_grpc_request_encode(&b, "AB", 0), 0);
    assert_int_equal(buf_len(&b), 9);
    assert_int_equal(((const uint8_t *)buf_ptr(&b))[4], 4);
    buf_dispose(&b);
}

static int dec_req(const uint8_t *p, size_t n, struct ca_grpc_request *r,
                   const char **why)
{
    return ca_grpc_request_decode(p, n, r, why);
}

static void test_request_decode(void **state)
{
    struct ca_grpc_request r;
    const char *why = NULL;
    /* Field 2 (the old subject_id), a fixed64 field 9 and a fixed32 field
     * 10 are skipped; an empty metadata Struct is no metadata. */
    static const uint8_t unk[] = {
        0x12, 0x01, 0x5a, 0x0a, 0x01, 0x43, 0x49, 1, 2,    3,    4,    5,
        6,    7,    8,    0x55, 1,    2,    3,    4, 0x18, 0x3c, 0x22, 0x00};
    static const uint8_t meta[] = {0x0a, 0x01, 0x43, 0x22, 0x02, 0x0a, 0x00};

    (void)state;
    assert_int_equal(dec_req(REQ + 5, sizeof(REQ) - 5, &r, &why), 0);
    assert_string_equal(r.csr, "AB");
    assert_int_equal(r.validity_s, 300);
    assert_int_equal(r.has_metadata, 0);
    ca_grpc_request_dispose(&r);
    assert_int_equal(dec_req(unk, sizeof(unk), &r, &why), 0);
    assert_string_equal(r.csr, "C");
    assert_int_equal(r.validity_s, 60);
    assert_int_equal(r.has_metadata, 0);
    ca_grpc_request_dispose(&r);
    assert_int_equal(dec_req(meta, sizeof(meta), &r, &why), 0);
    assert_int_equal(r.has_metadata, 1);
    ca_grpc_request_dispose(&r);
}

static void test_request_decode_refusals(void **state)
{
    struct ca_grpc_request r;
    const char *why = NULL;
    /* validity_duration -1: ten bytes of two's complement. */
    static const uint8_t neg[] = {0x0a, 0x01, 0x43, 0x18, 0xff, 0xff, 0xff,
                                  0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    static const uint8_t nocsr[] = {0x18, 0x3c};
    static const uint8_t cut[] = {0x0a, 0x05, 0x43};
    static const uint8_t group[] = {0x0a, 0x01, 0x43, 0x0b};
    static const uint8_t nul[] = {0x0a, 0x02, 0x43, 0x00};
    static const uint8_t longvar[] = {0x18, 0xff, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    static const uint8_t csr_varint[] = {0x08, 0x01};

    (void)state;
    assert_int_equal(dec_req(neg, sizeof(neg), &r, &why), -1);
    assert_string_equal(why, "validity_duration is negative");
    ca_grpc_request_dispose(&r);
    assert_int_equal(dec_req(nocsr, sizeof(nocsr), &r, &why), -1);
    assert_string_equal(why, "no csr in the request");
    ca_grpc_request_dispose(&r);
    assert_int_equal(dec_req(cut, sizeof(cut), &r, &why), -1);
    assert_string_equal(why, "protobuf length past the message");
    ca_grpc_request_dispose(&r);
    assert_int_equal(dec_req(group, sizeof(group), &r, &why), -1);
    assert_string_equal(why, "unsupported protobuf wire type");
    ca_grpc_request_dispose(&r);
    assert_int_equal(dec_req(nul, sizeof(nul), &r, &why), -1);
    ca_grpc_request_dispose(&r);
    assert_int_equal(dec_req(longvar, sizeof(longvar), &r, &why), -1);
    assert_string_equal(why, "bad protobuf varint");
    ca_grpc_request_dispose(&r);
    assert_int_equal(dec_req(csr_varint, sizeof(csr_varint), &r, &why), -1);
    ca_grpc_request_dispose(&r);
}

static void test_response_roundtrip_and_order(void **state)
{
    struct ca_grpc_response r;
    const char *why = NULL;
    const char *pems[] = {"L", "I", "R"};
    /* root_cert {ca_cert: "R"} first on the wire, then the chain. */
    static const uint8_t roots_first[] = {0x12, 0x03, 0x0a, 0x01, 0x52, 0x0a,
                                          0x01, 0x4c, 0x0a, 0x01, 0x49};
    struct buf b;

    (void)state;
    buf_init(&b, 1024);
    assert_int_equal(ca_grpc_response_encode(&b, pems, 3), 0);
    assert_int_equal(ca_grpc_response_decode((const uint8_t *)buf_ptr(&b) + 5,
                                             buf_len(&b) - 5, &r, &why),
                     0);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.nchain, 3);
    assert_string_equal(r.certs[0], "L");
    assert_string_equal(r.certs[2], "R");
    ca_grpc_response_dispose(&r);
    assert_int_equal(
        ca_grpc_response_decode(roots_first, sizeof(roots_first), &r, &why), 0);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.nchain, 2);
    assert_string_equal(r.certs[0], "L");
    assert_string_equal(r.certs[1], "I");
    assert_string_equal(r.certs[2], "R");
    ca_grpc_response_dispose(&r);
    /* Only roots: no chain. */
    assert_int_equal(ca_grpc_response_decode(roots_first, 5, &r, &why), -1);
    assert_string_equal(why, "no cert_chain in the response");
    ca_grpc_response_dispose(&r);
    buf_dispose(&b);
}

/* CA_GRPC_MAX_CERTS certificates are taken, one more is refused. */
static void test_response_cert_limit(void **state)
{
    struct ca_grpc_response r;
    const char *why = NULL;
    const char *pems[CA_GRPC_MAX_CERTS + 1];
    struct buf b;

    (void)state;
    for (size_t i = 0; i <= CA_GRPC_MAX_CERTS; i++)
        pems[i] = "C";
    buf_init(&b, 1024);
    assert_int_equal(ca_grpc_response_encode(&b, pems, CA_GRPC_MAX_CERTS), 0);
    assert_int_equal(ca_grpc_response_decode((const uint8_t *)buf_ptr(&b) + 5,
                                             buf_len(&b) - 5, &r, &why),
                     0);
    assert_int_equal(r.n, CA_GRPC_MAX_CERTS);
    ca_grpc_response_dispose(&r);
    buf_truncate(&b, 0);
    assert_int_equal(ca_grpc_response_encode(&b, pems, CA_GRPC_MAX_CERTS + 1),
                     0);
    assert_int_equal(ca_grpc_response_decode((const uint8_t *)buf_ptr(&b) + 5,
                                             buf_len(&b) - 5, &r, &why),
                     -1);
    assert_string_equal(why, "more certificates than strait takes (8)");
    ca_grpc_response_dispose(&r);
    buf_dispose(&b);
}

static void test_frame_parse(void **state)
{
    const uint8_t *msg = NULL;
    size_t len = 0;
    const char *why = NULL;
    uint8_t big[5] = {0, 0, 1, 0, 1}; /* 65537 bytes */
    uint8_t max[5] = {0, 0, 1, 0, 0}; /* 65536 bytes */
    uint8_t comp[6] = {1, 0, 0, 0, 1, 0x41};

    (void)state;
    for (size_t n = 0; n < sizeof(REQ); n++)
        assert_int_equal(ca_grpc_frame_parse(REQ, n, 100, &msg, &len, &why), 0);
    assert_int_equal(
        ca_grpc_frame_parse(REQ, sizeof(REQ), 100, &msg, &len, &why),
        (ssize_t)sizeof(REQ));
    assert_ptr_equal(msg, REQ + 5);
    assert_int_equal(len, 7);
    /* One past the limit is refused from its prefix alone. */
    assert_int_equal(
        ca_grpc_frame_parse(big, 5, CA_GRPC_MAX_MESSAGE, &msg, &len, &why), -1);
    assert_string_equal(why, "a gRPC message over the size limit");
    assert_int_equal(
        ca_grpc_frame_parse(max, 5, CA_GRPC_MAX_MESSAGE, &msg, &len, &why), 0);
    assert_int_equal(ca_grpc_frame_parse(comp, 6, 100, &msg, &len, &why), -1);
    assert_non_null(strstr(why, "compressed"));
    comp[0] = 2;
    assert_int_equal(ca_grpc_frame_parse(comp, 6, 100, &msg, &len, &why), -1);
}

/* An encoder never writes a message over CA_GRPC_MAX_MESSAGE. */
static void test_encode_limit(void **state)
{
    char *csr = malloc(CA_GRPC_MAX_MESSAGE + 1);
    struct buf b;

    (void)state;
    memset(csr, 'A', CA_GRPC_MAX_MESSAGE);
    csr[CA_GRPC_MAX_MESSAGE] = '\0';
    buf_init(&b, 4 * CA_GRPC_MAX_MESSAGE);
    assert_int_equal(ca_grpc_request_encode(&b, csr, 0), -1);
    assert_int_equal(buf_len(&b), 0);
    /* A tag byte and three of length: MAX - 4 bytes of csr make a
     * message of exactly MAX bytes; one more is one past the limit. */
    csr[CA_GRPC_MAX_MESSAGE - 3] = '\0';
    assert_int_equal(ca_grpc_request_encode(&b, csr, 0), -1);
    assert_int_equal(buf_len(&b), 0);
    csr[CA_GRPC_MAX_MESSAGE - 4] = '\0';
    assert_int_equal(ca_grpc_request_encode(&b, csr, 0), 0);
    assert_int_equal(buf_len(&b), CA_GRPC_MAX_MESSAGE + 5);
    buf_dispose(&b);
    free(csr);
}

static void test_message_percent(void **state)
{
    struct buf b;
    char out[64];

    (void)state;
    buf_init(&b, 256);
    assert_int_equal(ca_grpc_message_encode(&b, "bad 100%\ntoken"), 0);
    assert_string_equal(buf_cstr(&b), "bad 100%25%0Atoken");
    ca_grpc_message_decode(buf_ptr(&b), buf_len(&b), out, sizeof(out));
    assert_string_equal(out, "bad 100%?token");
    ca_grpc_message_decode("a%2", 3, out, sizeof(out));
    assert_string_equal(out, "a%2");
    ca_grpc_message_decode("abcdef", 6, out, 4);
    assert_string_equal(out, "abc");
    buf_dispose(&b);
}

static char *jwt_of(const char *payload)
{
    char body[512], *t = malloc(1024);

    pki_b64url_encode((const uint8_t *)payload, strlen(payload), body,
                      sizeof(body));
    snprintf(t, 1024, "eyJhbGciOiJSUzI1NiJ9.%s.c2ln", body);
    return t;
}

static void test_token_claims(void **state)
{
    int64_t exp;
    int aud;
    char *t;

    (void)state;
    t = jwt_of("{\"aud\":[\"api\",\"istio-ca\"],\"exp\":1700000000}");
    assert_int_equal(ca_grpc_token_claims(t, strlen(t), "istio-ca", &exp, &aud),
                     0);
    assert_int_equal(exp, 1700000000);
    assert_int_equal(aud, 1);
    free(t);
    t = jwt_of("{\"aud\":\"kubernetes\"}");
    assert_int_equal(ca_grpc_token_claims(t, strlen(t), "istio-ca", &exp, &aud),
                     0);
    assert_int_equal(exp, 0);
    assert_int_equal(aud, 0);
    free(t);
    t = jwt_of("{\"sub\":\"x\"}");
    assert_int_equal(ca_grpc_token_claims(t, strlen(t), "istio-ca", &exp, &aud),
                     0);
    assert_int_equal(aud, -1);
    free(t);
    assert_int_equal(ca_grpc_token_claims("nodots", 6, "a", &exp, &aud), -1);
    assert_int_equal(ca_grpc_token_claims("a.!!.c", 6, "a", &exp, &aud), -1);
}

static void test_csr_san(void **state)
{
    EVP_PKEY *k = pki_key_new(PKI_KEY_ECDSA);
    const char *why = NULL;
    struct buf b;
    char *sans;
    EVP_PKEY *pub;

    (void)state;
    buf_init(&b, CSR_MAX_PEM);
    assert_int_equal(csr_new(k, "spiffe://td/ns/a/sa/b", &b), 0);
    pub = csr_parse(buf_ptr(&b), buf_len(&b), &why);
    assert_non_null(pub);
    sans = csr_uri_sans(buf_ptr(&b), buf_len(&b));
    assert_string_equal(sans, "spiffe://td/ns/a/sa/b");
    free(sans);
    buf_truncate(&b, 0);
    assert_int_equal(csr_new(k, NULL, &b), 0);
    assert_null(csr_uri_sans(buf_ptr(&b), buf_len(&b)));
    EVP_PKEY_free(pub);
    EVP_PKEY_free(k);
    buf_dispose(&b);
}

static void test_status_names(void **state)
{
    char nb[16];

    (void)state;
    assert_string_equal(ca_grpc_status_name(16, nb), "UNAUTHENTICATED");
    assert_string_equal(ca_grpc_status_name(7, nb), "PERMISSION_DENIED");
    assert_string_equal(ca_grpc_status_name(99, nb), "code 99");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_encode_bytes),
        cmocka_unit_test(test_request_decode),
        cmocka_unit_test(test_request_decode_refusals),
        cmocka_unit_test(test_response_roundtrip_and_order),
        cmocka_unit_test(test_response_cert_limit),
        cmocka_unit_test(test_frame_parse),
        cmocka_unit_test(test_encode_limit),
        cmocka_unit_test(test_message_percent),
        cmocka_unit_test(test_token_claims),
        cmocka_unit_test(test_csr_san),
        cmocka_unit_test(test_status_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
