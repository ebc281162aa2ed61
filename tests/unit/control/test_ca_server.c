/* The CA API server and client against each other on one loop. */
#include "config.h"

#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "control/ca/ca.h"
#include "control/ca/ca_client.h"
#include "control/ca/ca_server.h"
#include "control/ca/identity.h"
#include "control/ca/token.h"
#include "core/addr.h"
#include "event/reap.h"

struct fx {
    char dir[64], other[80];
    struct event_base *base;
    struct reaper reaper;
    struct ca *ca;
    struct ca_identity tls_id;
    struct ca_server *srv;
    char url[64];
    /* the last answer */
    struct ca_cred *got;
    char err[512];
    int done;
};

static struct ca_cred *cred_for(struct ca *ca, const char *id, int64_t ttl)
{
    EVP_PKEY *k = pki_key_new(PKI_KEY_ECDSA);
    char *err = NULL;
    X509 *x = ca_issue(ca, k, id, ttl, &err);
    struct ca_cred *c;

    assert_non_null(x);
    c = ca_cred_new(x, X509_chain_up_ref(ca->chain), k, &err);
    assert_non_null(c);
    return c;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct ca_conf c = {NULL,        NULL, "example.org", PKI_KEY_ECDSA,
                        86400 * 365, 3600, 86400};
    struct ca_cred *srv;
    struct addr a;
    const char *why;
    char *err = NULL, as[ADDR_STRLEN];

    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_ca_server.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->other, sizeof(f->other), "%s/other", f->dir);
    c.dir = f->dir;
    f->ca = ca_open(&c, 1, &err);
    assert_non_null(f->ca);
    f->base = event_base_new();
    reaper_init(&f->reaper, f->base);
    ca_identity_init(&f->tls_id);
    srv = cred_for(f->ca, "spiffe://example.org" CA_SERVER_ID_PATH, 3600);
    ca_identity_publish(&f->tls_id, srv);
    ca_cred_unref(srv);
    assert_int_equal(addr_parse(&a, "127.0.0.1:0", 11, 1, &why), 0);
    f->srv = ca_server_new(f->base, &f->reaper, &a, f->ca, &f->tls_id, NULL,
                           NULL, &err);
    assert_non_null(f->srv);
    snprintf(f->url, sizeof(f->url), "https://%s",
             addr_format(ca_server_addr(f->srv), as, sizeof(as)));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    char cmd[128];

    ca_cred_unref(f->got);
    ca_server_free(f->srv);
    ca_identity_dispose(&f->tls_id);
    ca_free(f->ca);
    reaper_dispose(&f->reaper);
    event_base_free(f->base);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

static void on_done(void *arg, struct ca_cred *cred, const char *err)
{
    struct fx *f = arg;

    ca_cred_unref(f->got);
    f->got = cred;
    snprintf(f->err, sizeof(f->err), "%s", err ? err : "");
    f->done = 1;
    event_base_loopbreak(f->base);
}

/* One request; the client's own timeout bounds the loop. */
static void request(struct fx *f, const char *tok, const struct ca_cred *cred,
                    const uint8_t *pin)
{
    struct ca_client_conf cc;
    EVP_PKEY *k = pki_key_new(PKI_KEY_ECDSA);
    char *err = NULL;

    memset(&cc, 0, sizeof(cc));
    cc.url = f->url;
    cc.pin = pin ? pin : f->ca->pin;
    cc.token = tok;
    cc.cred = cred;
    cc.key = k;
    cc.validity_s = 600;
    cc.timeout_s = 5;
    f->done = 0;
    assert_non_null(ca_client_request(f->base, &cc, on_done, f, &err));
    while (!f->done)
        assert_int_equal(event_base_dispatch(f->base), 0);
    EVP_PKEY_free(k);
}

static void new_token(struct fx *f, char tok[TOKEN_STRLEN])
{
    char *err = NULL;

    assert_int_equal(token_create(f->dir, f->ca->pin, "foo", "bar", 60,
                                  (int64_t)time(NULL), tok, &err),
                     0);
}

static void test_token_then_renewal(void **state)
{
    struct fx *f = *state;
    char tok[TOKEN_STRLEN];
    struct ca_cred *first;

    new_token(f, tok);
    request(f, tok, NULL, NULL);
    assert_non_null(f->got);
    assert_string_equal(f->got->spiffe_id,
                        "spiffe://example.org/ns/foo/sa/bar");
    assert_int_equal(f->got->not_after - f->got->not_before, 600);
    assert_int_equal(ca_server_stats(f->srv)->issued_token, 1);
    first = ca_cred_ref(f->got);
    /* Renewal: no token, the certificate authenticates. */
    request(f, NULL, first, NULL);
    assert_non_null(f->got);
    assert_string_equal(f->got->spiffe_id,
                        "spiffe://example.org/ns/foo/sa/bar");
    assert_int_not_equal(X509_cmp(first->leaf, f->got->leaf), 0);
    assert_int_equal(ca_server_stats(f->srv)->issued_renewal, 1);
    /* The token is spent. */
    request(f, tok, NULL, NULL);
    assert_null(f->got);
    assert_string_equal(f->err, "CA refused the request (HTTP 401): join "
                                "token already used");
    ca_cred_unref(first);
}

static void test_no_credentials_refused(void **state)
{
    struct fx *f = *state;

    request(f, NULL, NULL, NULL);
    assert_null(f->got);
    assert_non_null(strstr(f->err, "(HTTP 401): no credentials"));
}

static void test_workload_posing_as_ca_is_not_trusted(void **state)
{
    struct fx *f = *state;
    struct ca_cred *w =
        cred_for(f->ca, "spiffe://example.org/ns/foo/sa/bar", 600);
    char tok[TOKEN_STRLEN], *err = NULL, *ns, *sa;
    struct token t;
    const char *why;

    /* A certificate of the right root, but a workload's: a joined host
     * could present it. */
    ca_identity_publish(&f->tls_id, w);
    ca_cred_unref(w);
    new_token(f, tok);
    request(f, tok, NULL, NULL);
    assert_null(f->got);
    assert_non_null(strstr(f->err, "the server is not a strait CA"));
    /* The client gave up in the handshake: the token was never sent. */
    assert_int_equal(token_parse(tok, strlen(tok), &t, &why), 0);
    assert_int_equal(token_redeem(f->dir, f->ca->pin, &t, NULL,
                                  (int64_t)time(NULL), &ns, &sa, &err),
                     0);
    free(ns);
    free(sa);
}

static void test_wrong_pin_refused(void **state)
{
    struct fx *f = *state;
    uint8_t pin[32];
    char tok[TOKEN_STRLEN];

    memset(pin, 0x5a, sizeof(pin));
    new_token(f, tok);
    request(f, tok, NULL, pin);
    assert_null(f->got);
    assert_non_null(strstr(f->err, "does not end in the pinned root"));
}

static void test_foreign_client_certificate_refused(void **state)
{
    struct fx *f = *state;
    struct ca_conf c = {f->other, NULL, "example.org", PKI_KEY_ECDSA,
                        86400,    3600, 86400};
    char *err = NULL;
    struct ca *other = ca_open(&c, 1, &err);
    struct ca_cred *foreign;

    assert_non_null(other);
    foreign =
        cred_for(other, "spiffe://example.org/ns/kube-system/sa/admin", 600);
    request(f, NULL, foreign, NULL);
    assert_null(f->got);
    assert_non_null(strstr(f->err, "(HTTP 403): client certificate not "
                                   "accepted"));
    ca_cred_unref(foreign);
    ca_free(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_token_then_renewal, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_no_credentials_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_workload_posing_as_ca_is_not_trusted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_pin_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_foreign_client_certificate_refused,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
