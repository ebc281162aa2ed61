/*
 * Unit tests for src/config/bootstrap-kube.c: where the API server is
 * (server, in-cluster environment, a kubeconfig's current-context with
 * paths relative to it), what is refused, and config.kubernetes' rules.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "config/bootstrap.h"

static struct bootstrap_kube conf(const char *server, const char *kubeconfig)
{
    struct bootstrap_kube k;

    memset(&k, 0, sizeof(k));
    k.enabled = 1;
    k.server = (char *)server;
    k.kubeconfig = (char *)kubeconfig;
    k.token_file =
        (char *)"/var/run/secrets/kubernetes.io/serviceaccount/token";
    k.ca_file = (char *)"/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
    return k;
}

static void test_server_and_in_cluster(void **state)
{
    struct bootstrap_kube k = conf("https://[fd00::1]:6443", "");
    struct kube_target t;
    char *err = NULL;

    (void)state;
    assert_int_equal(kube_target_resolve(&k, &t, &err), 0);
    assert_string_equal(t.host, "fd00::1");
    assert_int_equal(t.port, 6443);
    assert_true(t.tls);
    assert_string_equal(t.token_file, k.token_file);
    kube_target_dispose(&t);

    k = conf("https://api.example", "");
    assert_int_equal(kube_target_resolve(&k, &t, &err), 0);
    assert_int_equal(t.port, 443);
    kube_target_dispose(&t);

    k = conf("https://api.example:6443/prefix", "");
    assert_int_equal(kube_target_resolve(&k, &t, &err), -1);
    assert_non_null(strstr(err, "a path after HOST:PORT"));
    free(err);
    err = NULL;

    /* In-cluster: the pod's environment. */
    k = conf("", "");
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(kube_target_resolve(&k, &t, &err), -1);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST is not set"));
    free(err);
    err = NULL;
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    assert_int_equal(kube_target_resolve(&k, &t, &err), 0);
    assert_string_equal(t.server, "https://10.96.0.1:443");
    assert_string_equal(t.origin, "in-cluster");
    kube_target_dispose(&t);
    setenv("KUBERNETES_SERVICE_HOST", "fd00::10", 1);
    assert_int_equal(kube_target_resolve(&k, &t, &err), 0);
    assert_string_equal(t.host, "fd00::10");
    kube_target_dispose(&t);
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
}

static char *write_kubeconfig(const char *text)
{
    char *path = strdup("/tmp/strait-test-kubeconfig-XXXXXX");
    int fd = mkstemp(path);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void test_kubeconfig(void **state)
{
    static const char text[] =
        "current-context: b\n"
        "contexts:\n"
        "- {name: a, context: {cluster: none, user: none}}\n"
        "- {name: b, context: {cluster: k, user: u}}\n"
        "clusters:\n"
        "- {name: k, cluster: {server: 'https://k.example:8443', "
        "certificate-authority: certs/ca.crt}}\n"
        "users:\n"
        "- {name: u, user: {client-certificate: /abs/c.crt, client-key: "
        "c.key, tokenFile: tok}}\n";
    char *path = write_kubeconfig(text), dir[64];
    struct bootstrap_kube k = conf("", path);
    struct kube_target t;
    char *err = NULL, want[128];

    (void)state;
    snprintf(dir, sizeof(dir), "/tmp");
    assert_int_equal(kube_target_resolve(&k, &t, &err), 0);
    assert_string_equal(t.host, "k.example");
    assert_int_equal(t.port, 8443);
    snprintf(want, sizeof(want), "%s/certs/ca.crt", dir);
    assert_string_equal(t.ca_file, want);
    assert_string_equal(t.cert_file, "/abs/c.crt");
    snprintf(want, sizeof(want), "%s/c.key", dir);
    assert_string_equal(t.key_file, want);
    snprintf(want, sizeof(want), "%s/tok", dir);
    assert_string_equal(t.token_file, want);
    assert_null(t.token);
    kube_target_dispose(&t);
    /* server in config.kubernetes wins over the kubeconfig's. */
    k.server = (char *)"https://127.0.0.1:1";
    assert_int_equal(kube_target_resolve(&k, &t, &err), 0);
    assert_int_equal(t.port, 1);
    kube_target_dispose(&t);
    unlink(path);
    free(path);
}

static void test_kubeconfig_refused(void **state)
{
    static const struct {
        const char *text, *said;
    } bad[] = {
        {"contexts: []\n", "no current-context"},
        {"current-context: x\ncontexts: []\n", "no context named 'x'"},
        {"current-context: x\ncontexts: [{name: x, context: {user: u}}]\n",
         "names no cluster"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://a:1', "
         "insecure-skip-tls-verify: true}}]\n",
         "insecure-skip-tls-verify is not supported"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://a:1', "
         "certificate-authority-data: '!!'}}]\n",
         "not base64"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k, "
         "user: u}}]\nclusters: [{name: k, cluster: {server: "
         "'https://a:1'}}]\nusers: [{name: u, user: {auth-provider: "
         "{name: gcp}}}]\n",
         "auth-provider is not supported"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k, "
         "user: u}}]\nclusters: [{name: k, cluster: {server: "
         "'https://a:1'}}]\nusers: [{name: u, user: {client-certificate: "
         "c}}]\n",
         "client-certificate and client-key go together"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        char *path = write_kubeconfig(bad[i].text), *err = NULL;
        struct bootstrap_kube k = conf("", path);
        struct kube_target t;
        assert_int_equal(kube_target_resolve(&k, &t, &err), -1);
        if (strstr(err, bad[i].said) == NULL)
            fail_msg("%zu: %s", i, err);
        free(err);
        unlink(path);
        free(path);
    }
}

static void test_section_rules(void **state)
{
    char *err = NULL;
    struct bootstrap *bs;

    (void)state;
    bs = bootstrap_parse(
        "config:\n  kubernetes:\n    enabled: true\n"
        "    kinds: [Gateway, Secret]\n"
        "    fieldSelectors: {Secret: 'type=kubernetes.io/tls'}\n",
        strlen("config:\n  kubernetes:\n    enabled: true\n"
               "    kinds: [Gateway, Secret]\n"
               "    fieldSelectors: {Secret: "
               "'type=kubernetes.io/tls'}\n"),
        "t.yaml", &err);
    assert_non_null(bs);
    assert_int_equal(bs->config.kubernetes.kinds.n, 2);
    assert_int_equal(bs->config.kubernetes.backoff_ms, 800);
    assert_int_equal(bs->config.kubernetes.min_watch_timeout_ms, 300000);
    assert_true(
        bootstrap_kube_equal(&bs->config.kubernetes, &bs->config.kubernetes));
    bootstrap_free(bs);
    bs = bootstrap_parse(
        "config:\n  kubernetes: {enabled: true, kinds: [ConfigMap]}\n",
        strlen("config:\n  kubernetes: {enabled: true, kinds: "
               "[ConfigMap]}\n"),
        "t.yaml", &err);
    assert_null(bs);
    assert_non_null(strstr(err, "config.kubernetes.kinds[0]"));
    assert_non_null(strstr(err, "'ConfigMap' is not a kind strait reads"));
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_and_in_cluster),
        cmocka_unit_test(test_kubeconfig),
        cmocka_unit_test(test_kubeconfig_refused),
        cmocka_unit_test(test_section_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
