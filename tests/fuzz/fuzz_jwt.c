/*
 * libFuzzer target for what strait reads of a JWT and a JWKS: the JSON
 * reader, JWKS documents, compact tokens verified by a provider (keys
 * fixed below; the corpus holds tokens they sign, so the fuzzer reaches
 * the signature and claims checks), the token locations of a request
 * (header, query parameter, cookie), Istio's claim key syntax and
 * jwksUri URLs.
 * Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/resource.h"
#include "core/arena.h"
#include "core/buf.h"
#include "core/json.h"
#include "http/http.h"
#include "policy/authz.h"
#include "compile/jwt.h"
#include "policy/jwt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An EC P-256 key "e1" and an RSA key "r1", public halves only. */
static const char jwks[] =
    "{\"keys\": [{\"kty\": \"EC\", \"kid\": \"e1\", \"crv\": \"P-256\", \"x\": "
    "\"z"
    "c6y28LWjko86H3VqhQXnBrakld3C--kYH9xIJpTDnk\", \"y\": \"f4DdKtZqa"
    "ySr4XHeBhuuSTo9ukbjfLb3YZXK_1X5Sho\"}, {\"kty\": \"RSA\", \"kid\": "
    "\"r1\", \"use\": \"sig\", \"n\": \"tRXamyaogrA-WsPHXklUXNwz_Hi9dwB0n6"
    "F-fYH68imS3QeE-SfWoWzNp4R4gzW_FocBpYcoUXhKrfbzJ04xoCm8IeBsEz"
    "KImfFmObZpPPMAJRVm0aRSxHrUWNJK3CTbQTkQcGc8tWTtKHX9HO9JUHOOEC"
    "FmpiC5dFCmJ0QripRkylRLPEKAVi0L2_MpHPpd-9me0-KQz_c6gPi-I0Np8W"
    "wcEpnDACzb1v3XKh-BuohwGd7zmUbu8i0AN6lYZyk4jucSfKchwtaieFPHFA"
    "VVviJi8nA9vxhsyWSdXTUvC3qiRY7Dr1PdbwP4vtqIW30jNidiH0RTJFia8n"
    "SeFcPbQw\", \"e\": \"AQAB\"}]}";

static struct jwt_authn *provider(void)
{
    static struct jwt_authn *ja;
    static struct resource_set *set;
    char yaml[4096];
    struct buf errs;
    char *err = NULL;
    int nerr = 0;

    if (ja != NULL)
        return ja;
    snprintf(yaml, sizeof(yaml),
             "apiVersion: security.istio.io/v1\n"
             "kind: RequestAuthentication\n"
             "metadata: {name: f, namespace: istio-system}\n"
             "spec:\n"
             "  jwtRules:\n"
             "  - issuer: fuzz\n"
             "    audiences: [a]\n"
             "    jwks: '%s'\n"
             "    fromHeaders: [{name: authorization, prefix: 'Bearer '}]\n"
             "    fromParams: [access_token]\n"
             "    fromCookies: [tok]\n"
             "    outputPayloadToHeader: x-payload\n"
             "    outputClaimToHeaders: [{header: x-sub, claim: sub}, "
             "{header: x-p, claim: o.p}]\n",
             jwks);
    buf_init(&errs, 1 << 16);
    set = resource_load_mem(yaml, strlen(yaml), "f.yaml", &errs, &nerr);
    buf_dispose(&errs);
    if (nerr != 0)
        abort();
    ja = jwt_authn_build(set, "istio-system", NULL, "istio-system", &err);
    if (ja == NULL)
        abort();
    return ja;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct jwt_authn *ja = provider();
    struct arena a;
    const char *why = NULL, *prov;
    const struct json *j;
    struct jwt_keys *k;
    struct jwt_result res;
    struct http_fields f;
    char *z, *path;
    struct slice ps;

    arena_init(&a, 4096);
    j = json_parse(&a, s, size, 32, &why);
    if (j == NULL && why == NULL)
        abort();
    if (j != NULL && j->type == JSON_OBJECT && j->n > 0 &&
        json_get_slice(j, j->child->key) != j->child)
        abort(); /* the first member is found by its own name */
    k = jwt_keys_parse(s, size, &why);
    if (k != NULL && jwt_keys_count(k) == 0)
        abort();
    jwt_keys_free(k);
    jwt_authn_verify(ja, (struct slice){s, size}, &a, 1700000000, &res);

    /* The same bytes in each location of a request. */
    memset(&f, 0, sizeof(f));
    z = arena_alloc(&a, size + 32);
    path = arena_alloc(&a, size + 32);
    if (z == NULL || path == NULL)
        abort();
    snprintf(z, size + 32, "Bearer %.*s", (int)size, s);
    http_fields_add(&f, &a, SLICE_LIT("authorization"), slice_of(z), 100);
    ps = SLICE_LIT("/");
    jwt_authn_request(ja, &f, &ps, &a, 1700000000, &res, &prov);
    memset(&f, 0, sizeof(f));
    snprintf(z, size + 32, "a=b; tok=%.*s", (int)size, s);
    http_fields_add(&f, &a, SLICE_LIT("cookie"), slice_of(z), 100);
    snprintf(path, size + 32, "/p?x&access_token=%.*s", (int)size, s);
    ps = slice_of(path);
    jwt_authn_request(ja, &f, &ps, &a, 1700000000, &res, &prov);
    arena_dispose(&a);

    z = strndup(s, size);
    if (z != NULL) {
        const char *names[10];
        size_t lens[10];
        char *host, *upath;
        int tls, port;
        int d = authz_claim_path(z, names, lens);
        for (int i = 0; i < d && i < 10; i++)
            if (lens[i] == 0 || names[i] < z || names[i] + lens[i] > z + size)
                abort();
        if (jwt_parse_url(z, &tls, &host, &port, &upath, &why) == 0) {
            /* What goes into a request line has no space or control. */
            if (port < 1 || port > 65535 || upath[0] != '/' ||
                strpbrk(upath, " \r\n") != NULL)
                abort();
            /* The host: LDH, dots, and (IPv6) hex digits and colons. */
            if (host[0] == '\0' ||
                strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"
                             "VWXYZ0123456789-.:") != strlen(host))
                abort();
            free(host);
            free(upath);
        }
        free(z);
    }
    return 0;
}
