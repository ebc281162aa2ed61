#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "control/ca/ca_api.h"
#include "control/ca/ca_client.h"
#include "core/buf.h"

static int parse_req(const char *s, struct ca_api_request *r, const char **why)
{
    return ca_api_request_parse(s, strlen(s), r, why);
}

static void test_request_fields(void **state)
{
    struct ca_api_request r;
    const char *why = NULL;

    (void)state;
    assert_int_equal(parse_req("{\"csr\":\"-----BEGIN\\nA\\u0042\\/\","
                               " \"validity_duration\": 3600,"
                               " \"metadata\": {\"fields\": [1, true, null,"
                               " {\"x\": -1.5e3}]}}",
                               &r, &why),
                     0);
    assert_string_equal(r.csr, "-----BEGIN\nAB/");
    assert_int_equal(r.validity_s, 3600);
    ca_api_request_dispose(&r);
    /* proto3 JSON writes int64 as a string; camelCase names too. */
    assert_int_equal(
        parse_req("{\"validityDuration\":\"60\",\"csr\":\"x\"}", &r, &why), 0);
    assert_int_equal(r.validity_s, 60);
    ca_api_request_dispose(&r);
    assert_int_equal(parse_req(" {\"csr\":\"x\"} \n", &r, &why), 0);
    assert_int_equal(r.validity_s, 0);
    ca_api_request_dispose(&r);
    /* Regression (fuzz_csr): an empty key or value has no storage. */
    assert_int_equal(parse_req("{\"\":\"\",\"csr\":\"\"}", &r, &why), 0);
    assert_string_equal(r.csr, "");
    ca_api_request_dispose(&r);
    /* A surrogate pair decodes to one UTF-8 character. */
    assert_int_equal(parse_req("{\"csr\":\"\\ud83d\\ude00\"}", &r, &why), 0);
    assert_string_equal(r.csr, "\xf0\x9f\x98\x80");
    ca_api_request_dispose(&r);
}

static void expect_bad_req(const char *s, const char *want)
{
    struct ca_api_request r;
    const char *why = NULL;

    if (parse_req(s, &r, &why) == 0)
        fail_msg("accepted: %s", s);
    ca_api_request_dispose(&r);
    if (why == NULL || strstr(why, want) == NULL)
        fail_msg("'%s' refused with '%s', expected '%s'", s,
                 why ? why : "(null)", want);
}

static void test_request_refuses_bad_json(void **state)
{
    char deep[200];

    (void)state;
    expect_bad_req("", "expected a JSON object");
    expect_bad_req("[]", "expected a JSON object");
    expect_bad_req("{}", "missing field 'csr'");
    expect_bad_req("{\"csr\":1}", "expected a string");
    expect_bad_req("{\"csr\":\"a\",\"csr\":\"b\"}", "duplicate");
    expect_bad_req("{\"csr\":\"a\"} x", "trailing");
    expect_bad_req("{\"csr\":\"a\"", "expected ',' or '}'");
    expect_bad_req("{\"csr\":\"a", "unterminated");
    expect_bad_req("{\"csr\":\"a\\q\"}", "bad escape");
    expect_bad_req("{\"csr\":\"\\u0000\"}", "bad escape");
    expect_bad_req("{\"csr\":\"\\udc00\"}", "bad escape");
    expect_bad_req("{\"csr\":\"a\nb\"}", "control character");
    expect_bad_req("{\"csr\":\"a\",\"validity_duration\":-5}", "whole number");
    expect_bad_req("{\"csr\":\"a\",\"validity_duration\":1.5}", "whole number");
    expect_bad_req("{\"csr\":\"a\",\"validity_duration\":\"1x\"}",
                   "whole number");
    expect_bad_req("{\"csr\":\"a\",\"x\":01}", "invalid number");
    expect_bad_req("{\"csr\":\"a\",\"x\":tru}", "invalid JSON value");
    /* Nesting is bounded. */
    memset(deep, 0, sizeof(deep));
    snprintf(deep, sizeof(deep), "{\"csr\":\"a\",\"x\":");
    for (int i = 0; i < 40; i++)
        deep[strlen(deep)] = '[';
    expect_bad_req(deep, "nested too deeply");
}

static void test_response_roundtrip(void **state)
{
    const char *pems[3] = {"-----BEGIN CERTIFICATE-----\nA\n", "B\"\\", "C"};
    struct ca_api_response r;
    const char *why = NULL;
    struct buf b;

    (void)state;
    buf_init(&b, 1 << 16);
    assert_int_equal(ca_api_response_write(&b, pems, 3), 0);
    assert_int_equal(ca_api_response_parse(buf_ptr(&b), buf_len(&b), &r, &why),
                     0);
    assert_int_equal(r.n, 3);
    for (int i = 0; i < 3; i++)
        assert_string_equal(r.chain[i], pems[i]);
    assert_null(r.error);
    ca_api_response_dispose(&r);
    buf_dispose(&b);

    buf_init(&b, 1 << 16);
    assert_int_equal(ca_api_error_write(&b, "join token already used"), 0);
    assert_int_equal(ca_api_response_parse(buf_ptr(&b), buf_len(&b), &r, &why),
                     0);
    assert_string_equal(r.error, "join token already used");
    ca_api_response_dispose(&r);
    buf_dispose(&b);

    assert_int_equal(ca_api_response_parse("{}", 2, &r, &why), -1);
    ca_api_response_dispose(&r);
    {
        const char *s = "{\"cert_chain\":[\"1\",\"2\",\"3\",\"4\",\"5\","
                        "\"6\",\"7\",\"8\",\"9\"]}";
        assert_int_equal(ca_api_response_parse(s, strlen(s), &r, &why), -1);
        assert_string_equal(why, "cert_chain too long");
        ca_api_response_dispose(&r);
    }
}

static void test_request_write_parses_back(void **state)
{
    struct ca_api_request r;
    const char *why;
    struct buf b;

    (void)state;
    buf_init(&b, 1 << 16);
    assert_int_equal(ca_api_request_write(&b, "PEM\nwith \"quotes\"", 42), 0);
    assert_int_equal(ca_api_request_parse(buf_ptr(&b), buf_len(&b), &r, &why),
                     0);
    assert_string_equal(r.csr, "PEM\nwith \"quotes\"");
    assert_int_equal(r.validity_s, 42);
    ca_api_request_dispose(&r);
    buf_dispose(&b);
}

static void test_client_url(void **state)
{
    char *host = NULL;
    int port = 0;
    const char *why;

    (void)state;
    assert_int_equal(
        ca_client_parse_url("https://ca.example:15012", &host, &port, &why), 0);
    assert_string_equal(host, "ca.example");
    assert_int_equal(port, 15012);
    free(host);
    assert_int_equal(
        ca_client_parse_url("https://[::1]:15012/", &host, &port, &why), 0);
    assert_string_equal(host, "::1");
    free(host);
    assert_int_equal(ca_client_parse_url("127.0.0.1:1", &host, &port, &why), 0);
    free(host);
    assert_int_equal(ca_client_parse_url("http://a:1", &host, &port, &why), -1);
    assert_int_equal(ca_client_parse_url("https://a", &host, &port, &why), -1);
    assert_int_equal(ca_client_parse_url("https://a:0", &host, &port, &why),
                     -1);
    assert_int_equal(ca_client_parse_url("https://a:65536", &host, &port, &why),
                     -1);
    assert_int_equal(ca_client_parse_url("https://a:1x", &host, &port, &why),
                     -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_fields),
        cmocka_unit_test(test_request_refuses_bad_json),
        cmocka_unit_test(test_response_roundtrip),
        cmocka_unit_test(test_request_write_parses_back),
        cmocka_unit_test(test_client_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
