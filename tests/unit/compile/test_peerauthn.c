/*
 * Unit tests for src/compile/peerauthn.c: the default, mesh, namespace and
 * workload scopes overriding each other, UNSET inheriting, portLevelMtls,
 * and policies of other namespaces or labels left out.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "config/conf.h"
#include "config/resource.h"
#include "core/buf.h"
#include "compile/peerauthn.h"

static struct resource_set *set_;

static const char *mode(const char *yaml, const char *node_ns, uint32_t port)
{
    struct buf errs;
    int nerr = 0;
    struct conf_strpair pair = {"app", "gw"};
    struct conf_strmap labels = {&pair, 1};
    enum peer_authn_mode m;

    resource_set_free(set_);
    buf_init(&errs, 1 << 16);
    set_ = resource_load_mem(yaml, strlen(yaml), "p.yaml", &errs, &nerr);
    if (nerr)
        fprintf(stderr, "%s", buf_cstr(&errs));
    buf_dispose(&errs);
    assert_int_equal(nerr, 0);
    m = peer_authn_mode(set_, node_ns, &labels, "istio-system", port);
    return peer_authn_mode_name(m);
}

#define PA(name, ns, body)                                                     \
    "apiVersion: security.istio.io/v1\n"                                       \
    "kind: PeerAuthentication\n"                                               \
    "metadata: {name: " name ", namespace: " ns "}\n"                          \
    "spec:\n" body "---\n"

static void test_scopes(void **state)
{
    (void)state;
    assert_string_equal(
        mode(PA("x", "other", "  mtls: {mode: STRICT}\n"), "edge", 80),
        "UNSET");
    assert_string_equal(
        mode(PA("mesh", "istio-system", "  mtls: {mode: STRICT}\n"), "edge",
             80),
        "STRICT");
    assert_string_equal(
        mode(PA("mesh", "istio-system", "  mtls: {mode: STRICT}\n")
                 PA("ns", "edge", "  mtls: {mode: DISABLE}\n"),
             "edge", 80),
        "DISABLE");
    /* UNSET inherits from the less specific scope. */
    assert_string_equal(
        mode(PA("mesh", "istio-system", "  mtls: {mode: STRICT}\n")
                 PA("ns", "edge", "  mtls: {mode: UNSET}\n"),
             "edge", 80),
        "STRICT");
    /* A workload policy whose labels match, with a port exception. */
    {
        const char *y =
            PA("mesh", "istio-system", "  mtls: {mode: PERMISSIVE}\n")
                PA("wl", "edge",
                   "  selector: {matchLabels: {app: gw}}\n"
                   "  mtls: {mode: STRICT}\n"
                   "  portLevelMtls: {\"8080\": {mode: DISABLE}}\n")
                    PA("other-labels", "edge",
                       "  selector: {matchLabels: {app: db}}\n"
                       "  mtls: {mode: DISABLE}\n");
        assert_string_equal(mode(y, "edge", 80), "STRICT");
        assert_string_equal(mode(y, "edge", 8080), "DISABLE");
        /* In another namespace the workload policy does not apply. */
        assert_string_equal(mode(y, "elsewhere", 80), "PERMISSIVE");
        assert_string_equal(
            mode(PA("ns", "edge", "  mtls: {mode: UNSET}\n"), "edge", 80),
            "UNSET");
    }
    resource_set_free(set_);
    set_ = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scopes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
