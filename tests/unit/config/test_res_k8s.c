/*
 * Unit tests for src/config/res-k8s.c: Kubernetes Services, EndpointSlices,
 * Secrets and Namespaces as `kubectl get -o yaml` writes them, the
 * registry entry a Service becomes (Istio's port protocols, ready
 * endpoints, targetPort by name), schema errors with file:line:col, a
 * Secret's keys decoded and never shown, and other kinds ignored.
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
#include "config/res-k8s.h"
#include "config/resource.h"
#include "core/buf.h"

struct fx {
    struct resource_set *set;
    struct buf errs;
    int nerr;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    buf_init(&f->errs, 1024 * 1024);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    resource_set_free(f->set);
    buf_dispose(&f->errs);
    free(f);
    return 0;
}

static const char *load(struct fx *f, const char *text)
{
    resource_set_free(f->set);
    buf_consume(&f->errs, buf_len(&f->errs));
    f->set =
        resource_load_mem(text, strlen(text), "r.yaml", &f->errs, &f->nerr);
    assert_non_null(f->set);
    return buf_cstr(&f->errs);
}

static void load_ok(struct fx *f, const char *text)
{
    const char *e = load(f, text);

    if (f->nerr != 0)
        fail_msg("for:\n%s\nerrors: %s", text, e);
}

/* has_msg() is true when some message of level has text in it. */
static int has_msg(const struct fx *f, enum res_level level, const char *text)
{
    for (size_t i = 0; i < f->set->msgs.n; i++)
        if (f->set->msgs.v[i].level == level &&
            strstr(f->set->msgs.v[i].message, text) != NULL)
            return 1;
    return 0;
}

#define SVC_HEAD                                                               \
    "apiVersion: v1\n"                                                         \
    "kind: Service\n"                                                          \
    "metadata:\n"                                                              \
    "  name: reviews\n"                                                        \
    "  namespace: bookinfo\n"                                                  \
    "  resourceVersion: \"99\"\n"                                              \
    "  uid: 1234\n"                                                            \
    "spec:\n"                                                                  \
    "  clusterIP: 10.96.0.7\n"                                                 \
    "  clusterIPs: [10.96.0.7]\n"                                              \
    "  ipFamilies: [IPv4]\n"                                                   \
    "  ipFamilyPolicy: SingleStack\n"                                          \
    "  internalTrafficPolicy: Cluster\n"                                       \
    "  sessionAffinity: None\n"                                                \
    "  type: ClusterIP\n"                                                      \
    "  selector: {app: reviews}\n"

#define SLICE(name, svc, eps, ports)                                           \
    "---\n"                                                                    \
    "addressType: IPv4\n"                                                      \
    "apiVersion: discovery.k8s.io/v1\n"                                        \
    "endpoints:\n" eps "kind: EndpointSlice\n"                                 \
    "metadata:\n"                                                              \
    "  name: " name "\n"                                                       \
    "  namespace: bookinfo\n"                                                  \
    "  generateName: reviews-\n"                                               \
    "  labels: {kubernetes.io/service-name: " svc "}\n"                        \
    "ports:\n" ports

static const struct resource *find(const struct fx *f, enum res_kind k,
                                   const char *ns, const char *name)
{
    const struct resource *r = resource_find(f->set, k, ns, name);

    assert_non_null(r);
    return r;
}

static const struct res_se_port *se_port(const struct res_service_entry *se,
                                         size_t i)
{
    assert_true(i < se->ports.n);
    return (const struct res_se_port *)se->ports.v + i;
}

static const struct res_workload_entry *
se_ep(const struct res_service_entry *se, size_t i)
{
    assert_true(i < se->endpoints.n);
    return (const struct res_workload_entry *)se->endpoints.v + i;
}

static int64_t ep_port(const struct res_workload_entry *we, const char *name)
{
    for (size_t i = 0; i < we->ports.n; i++)
        if (strcmp(we->ports.v[i].key, name) == 0)
            return we->ports.v[i].val;
    return -1;
}

static void service_is_a_static_registry_entry(void **state)
{
    struct fx *f = *state;
    const struct resource *r;
    const struct res_service_entry *se;

    load_ok(f, SVC_HEAD "  ports:\n"
                        "  - {name: http, port: 9080, protocol: TCP, "
                        "targetPort: 9080}\n"
                        "  - {name: grpc-api, port: 9090, targetPort: grpc}\n"
                        "  - {name: metrics, port: 15090, targetPort: 15090}\n"
                        "  - {name: web, port: 80, appProtocol: http2}\n"
                        "  - {name: dns, port: 53, protocol: UDP}\n"
                        "  - {name: h2c, port: 81, appProtocol: "
                        "kubernetes.io/h2c}\n"
                        "  - {name: grpc-web-x, port: 82}\n" SLICE(
                            "reviews-abc", "reviews",
                            "- addresses: [10.244.0.5]\n"
                            "  conditions: {ready: true}\n"
                            "- addresses: [10.244.0.6]\n"
                            "  conditions: {ready: false, serving: true, "
                            "terminating: true}\n"
                            "- addresses: [10.244.0.7, 10.244.0.8]\n",
                            "- {name: http, port: 9080, protocol: TCP}\n"
                            "- {name: grpc-api, port: 7070}\n"));
    r = find(f, RES_SERVICE, "bookinfo", "reviews");
    assert_true(res_is_service(r));
    se = res_service_entry(r);
    assert_int_equal(se->hosts.n, 1);
    assert_string_equal(se->hosts.v[0], "reviews.bookinfo.svc.cluster.local");
    assert_int_equal(se->resolution, RES_RESOLVE_STATIC);
    assert_int_equal(se->location, RES_MESH_INTERNAL);
    assert_int_equal(se->ports.n, 7);
    assert_int_equal(se_port(se, 0)->protocol, RES_PROTO_HTTP);
    assert_int_equal(se_port(se, 0)->target_port, 9080);
    assert_int_equal(se_port(se, 1)->protocol, RES_PROTO_GRPC);
    assert_int_equal(se_port(se, 1)->target_port, 0); /* by name */
    assert_int_equal(se_port(se, 2)->protocol, RES_PROTO_TCP);
    assert_int_equal(se_port(se, 3)->protocol, RES_PROTO_HTTP2);
    assert_int_equal(se_port(se, 4)->protocol, RES_PROTO_UDP);
    assert_int_equal(se_port(se, 5)->protocol, RES_PROTO_HTTP2);
    assert_int_equal(se_port(se, 6)->protocol, RES_PROTO_GRPC_WEB);
    /* Ready and unset endpoints, by their first address; the slice's port
     * for each Service port name, 0 (no endpoint) where it has none. */
    assert_int_equal(se->endpoints.n, 2);
    assert_string_equal(se_ep(se, 0)->address, "10.244.0.5");
    assert_string_equal(se_ep(se, 1)->address, "10.244.0.7");
    assert_int_equal(ep_port(se_ep(se, 0), "http"), 9080);
    assert_int_equal(ep_port(se_ep(se, 0), "grpc-api"), 7070);
    assert_int_equal(ep_port(se_ep(se, 0), "metrics"), 0);
    /* The selector picks WorkloadEntries too. */
    assert_int_equal(se->workload_selector.labels.n, 1);
    assert_true(se->workload_selector.mark.line > 0);
}

static void slices_of_other_services_and_namespaces_are_not_used(void **state)
{
    struct fx *f = *state;
    const struct res_service_entry *se;

    load_ok(
        f,
        SVC_HEAD "  ports: [{port: 9080}]\n" SLICE(
            "other", "ratings", "- addresses: [10.0.0.1]\n", "- {port: 9080}\n")
            SLICE("none", "\"\"", "- addresses: [10.0.0.2]\n",
                  "- {port: 9080}\n") "---\n"
                                      "addressType: IPv4\n"
                                      "apiVersion: discovery.k8s.io/v1\n"
                                      "endpoints: [{addresses: [10.0.0.3]}]\n"
                                      "kind: EndpointSlice\n"
                                      "metadata: {name: elsewhere, namespace: "
                                      "other, labels: "
                                      "{kubernetes.io/service-name: reviews}}\n"
                                      "ports: [{port: 9080}]\n" SLICE(
                                          "mine", "reviews",
                                          "- addresses: [10.0.0.4]\n",
                                          "- {port: 9081}\n"));
    se = res_service_entry(find(f, RES_SERVICE, "bookinfo", "reviews"));
    assert_int_equal(se->endpoints.n, 1);
    assert_string_equal(se_ep(se, 0)->address, "10.0.0.4");
    /* An unnamed port is matched to the slice's unnamed port. */
    assert_int_equal(ep_port(se_ep(se, 0), ""), 9081);
    assert_true(has_msg(f, RES_INFO, "belongs to no Service"));
}

static void export_to_annotation_is_read(void **state)
{
    struct fx *f = *state;
    const struct resource *r;
    const struct res_service_entry *se;

    load_ok(f, "apiVersion: v1\nkind: Service\n"
               "metadata:\n  name: s\n  namespace: a\n"
               "  annotations: {networking.istio.io/exportTo: \". , b\"}\n"
               "spec: {ports: [{port: 80}]}\n");
    r = find(f, RES_SERVICE, "a", "s");
    se = res_service_entry(r);
    assert_int_equal(se->export_to.n, 2);
    assert_string_equal(se->export_to.v[0], ".");
    assert_string_equal(se->export_to.v[1], "b");
    assert_true(res_visible(r, &se->export_to, "a"));
    assert_true(res_visible(r, &se->export_to, "b"));
    assert_false(res_visible(r, &se->export_to, "istio-system"));
}

static void publish_not_ready_addresses_uses_every_endpoint(void **state)
{
    struct fx *f = *state;
    const struct res_service_entry *se;

    load_ok(f, SVC_HEAD "  publishNotReadyAddresses: true\n"
                        "  ports: [{name: http, port: 9080}]\n" SLICE(
                            "s", "reviews",
                            "- addresses: [10.0.0.1]\n"
                            "  conditions: {ready: false}\n",
                            "- {name: http, port: 9080}\n"));
    se = res_service_entry(find(f, RES_SERVICE, "bookinfo", "reviews"));
    assert_int_equal(se->endpoints.n, 1);
}

static void external_name_is_resolved_by_dns(void **state)
{
    struct fx *f = *state;
    const struct res_service_entry *se;

    load_ok(f, "apiVersion: v1\nkind: Service\n"
               "metadata: {name: ext, namespace: default}\n"
               "spec:\n  type: ExternalName\n"
               "  externalName: api.example.com\n"
               "  ports: [{name: https, port: 443}]\n");
    se = res_service_entry(find(f, RES_SERVICE, "default", "ext"));
    assert_int_equal(se->resolution, RES_RESOLVE_DNS);
    assert_int_equal(se->endpoints.n, 1);
    assert_string_equal(se_ep(se, 0)->address, "api.example.com");
    assert_int_equal(se_port(se, 0)->protocol, RES_PROTO_HTTPS);
}

static void service_errors_name_the_place(void **state)
{
    struct fx *f = *state;

    assert_string_equal(
        load(f, "apiVersion: v1\nkind: Service\n"
                "metadata: {name: s}\n"
                "spec:\n"
                "  ports:\n"
                "  - {port: 80, targetPort: Bad_Name}\n"
                "  - {port: 0}\n"),
        "r.yaml:6:28: Service default/s: spec.ports[0].targetPort: bad value "
        "'Bad_Name': a port name is 1-15 lower-case letters, digits and '-'\n"
        "r.yaml:7:12: Service default/s: spec.ports[1].port: value '0' out "
        "of range 1-65535\n");
    assert_string_equal(
        load(f, "apiVersion: v1\nkind: Service\n"
                "metadata: {name: s}\n"
                "spec:\n"
                "  ports: [{port: 80}, {port: 81}]\n"
                "  sessionAffinity: ClientIP\n"
                "  colour: blue\n"),
        "r.yaml:7:3: Service default/s: spec.colour: unknown key\n");
    load(f, "apiVersion: v1\nkind: Service\n"
            "metadata: {name: s}\n"
            "spec:\n"
            "  ports: [{port: 80}, {port: 81}]\n"
            "  sessionAffinity: ClientIP\n");
    assert_int_equal(f->nerr, 3);
    assert_true(has_msg(f, RES_ERROR, "several ports needs a name"));
    assert_true(has_msg(f, RES_ERROR, "ClientIP affinity is not supported"));
    load(f, "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"
            "spec: {type: ExternalName, ports: [{port: 80}]}\n");
    assert_true(has_msg(f, RES_ERROR, "type ExternalName needs externalName"));
}

static void slice_errors_name_the_place(void **state)
{
    struct fx *f = *state;

    assert_string_equal(
        load(f, "addressType: IPv4\n"
                "apiVersion: discovery.k8s.io/v1\n"
                "kind: EndpointSlice\n"
                "metadata: {name: s, labels: {kubernetes.io/service-name: "
                "x}}\n"
                "endpoints:\n"
                "- addresses: [fd00::1]\n"
                "  conditions: {ready: maybe}\n"
                "ports: [{port: 80}]\n"
                "extra: 1\n"),
        "r.yaml:7:23: EndpointSlice default/s: "
        "endpoints[0].conditions.ready: bad value 'maybe': expected true or "
        "false\n"
        "r.yaml:9:1: EndpointSlice default/s: extra: unknown key\n");
    assert_string_equal(
        load(f, "addressType: IPv4\n"
                "apiVersion: discovery.k8s.io/v1\n"
                "kind: EndpointSlice\n"
                "metadata: {name: s, labels: {kubernetes.io/service-name: "
                "x}}\n"
                "endpoints:\n"
                "- addresses: [fd00::1]\n"),
        "r.yaml:6:3: EndpointSlice default/s: endpoints[0].addresses: "
        "'fd00::1' is not an IPv4 address\n");
    load_ok(f, "addressType: FQDN\n"
               "apiVersion: discovery.k8s.io/v1\n"
               "kind: EndpointSlice\n"
               "metadata: {name: s}\n"
               "endpoints: [{addresses: [db.example.com]}]\n");
    assert_true(has_msg(f, RES_INFO, "FQDN EndpointSlices are not used"));
}

/* "-----BEGIN..." base64 of a short PEM-like text. */
#define B64_CERT "Y2VydC1ieXRlcw==" /* cert-bytes */
#define B64_KEY "a2V5LWJ5dGVz"      /* key-bytes */
#define B64_CA "Y2EtYnl0ZXM="       /* ca-bytes */

static void secret_keys_are_decoded_and_never_shown(void **state)
{
    struct fx *f = *state;
    const struct resource *r;
    const struct res_k8s_secret *s;
    struct buf b;

    load_ok(f, "apiVersion: v1\n"
               "data:\n"
               "  tls.crt: " B64_CERT "\n"
               "  tls.key: " B64_KEY "\n"
               "kind: Secret\n"
               "metadata: {name: cred, namespace: istio-system, uid: x}\n"
               "stringData: {ca.crt: ca-text}\n"
               "type: kubernetes.io/tls\n");
    r = find(f, RES_SECRET, "istio-system", "cred");
    assert_ptr_equal(res_k8s_find_secret(f->set, "istio-system", "cred"), r);
    assert_null(res_k8s_find_secret(f->set, "default", "cred"));
    s = res_k8s_secret(r);
    assert_int_equal(s->len[RES_SECRET_CERT], 10);
    assert_memory_equal(s->val[RES_SECRET_CERT], "cert-bytes", 10);
    assert_memory_equal(s->val[RES_SECRET_KEY], "key-bytes", 9);
    assert_memory_equal(s->val[RES_SECRET_CA], "ca-text", 7);
    assert_null(s->val[RES_SECRET_CRL]);
    buf_init(&b, 65536);
    res_spec_json(&b, r);
    assert_string_equal(buf_cstr(&b),
                        "{\"type\":\"kubernetes.io/tls\",\"data\":{\"ca.crt\":"
                        "\"<redacted>\",\"tls.crt\":\"<redacted>\",\"tls.key\":"
                        "\"<redacted>\"},\"immutable\":false}");
    buf_dispose(&b);
    assert_int_equal(res_secret_set_path((struct resource *)r, RES_SECRET_KEY,
                                         "/proc/self/fd/9"),
                     0);
    assert_string_equal(s->path[RES_SECRET_KEY], "/proc/self/fd/9");
}

static void sink_write(void *arg, const void *p, size_t n)
{
    buf_append(arg, p, n);
}

/* identity_has() is true when r's identity bytes hold needle. */
static int identity_has(const struct resource *r, const char *needle,
                        struct buf *out)
{
    struct conf_sink sink = {sink_write, out};
    const char *p;
    size_t n = strlen(needle);

    buf_consume(out, buf_len(out));
    res_spec_identity(r, &sink);
    p = buf_ptr(out);
    for (size_t i = 0; i + n <= buf_len(out); i++)
        if (memcmp(p + i, needle, n) == 0)
            return 1;
    return 0;
}

/* A Secret's identity tells values apart by digest only: a snapshot never
 * keeps a copy of one. */
static void secret_identity_holds_digests(void **state)
{
    struct fx *f = *state;
    struct buf a, b;

    buf_init(&a, 65536);
    buf_init(&b, 65536);
    load_ok(f, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"
               "data: {tls.key: " B64_KEY "}\n"
               "stringData: {tls.crt: secret-text-one}\n");
    assert_false(identity_has(find(f, RES_SECRET, "default", "s"),
                              "secret-text-one", &a));
    assert_false(
        identity_has(find(f, RES_SECRET, "default", "s"), B64_KEY, &a));
    load_ok(f, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"
               "data: {tls.key: " B64_KEY "}\n"
               "stringData: {tls.crt: secret-text-two}\n");
    identity_has(find(f, RES_SECRET, "default", "s"), "x", &b);
    assert_true(buf_len(&a) == buf_len(&b) &&
                memcmp(buf_ptr(&a), buf_ptr(&b), buf_len(&a)) != 0);
    buf_dispose(&a);
    buf_dispose(&b);
}

static void generic_secret_keys_as_istio_reads_them(void **state)
{
    struct fx *f = *state;
    const struct res_k8s_secret *s;

    load_ok(f, "apiVersion: v1\nkind: Secret\ntype: Opaque\n"
               "metadata: {name: g}\n"
               "data: {cert: " B64_CERT ", key: " B64_KEY ", cacert: " B64_CA
               ", tls.crt: " B64_KEY "}\n");
    s = res_k8s_secret(find(f, RES_SECRET, "default", "g"));
    assert_memory_equal(s->val[RES_SECRET_CERT], "cert-bytes", 10);
    assert_memory_equal(s->val[RES_SECRET_CA], "ca-bytes", 8);
    /* A Secret of another type is kept, and is no credential. */
    load_ok(f, "apiVersion: v1\nkind: Secret\n"
               "type: kubernetes.io/dockerconfigjson\n"
               "metadata: {name: pull}\n"
               "data: {.dockerconfigjson: e30=}\n");
    assert_null(res_k8s_find_secret(f->set, "default", "pull"));
    assert_true(has_msg(f, RES_INFO, "not a credential"));
    assert_string_equal(load(f, "apiVersion: v1\nkind: Secret\n"
                                "metadata: {name: bad}\n"
                                "data: {tls.crt: \"%%%\"}\n"),
                        "r.yaml:1:1: Secret default/bad: data.tls.crt: not "
                        "base64\n");
}

static void namespace_labels_are_kept(void **state)
{
    struct fx *f = *state;
    const struct resource *r;

    load_ok(f, "apiVersion: v1\nkind: Namespace\n"
               "metadata:\n  name: bookinfo\n"
               "  labels: {istio-injection: enabled, "
               "kubernetes.io/metadata.name: bookinfo}\n"
               "spec: {finalizers: [kubernetes]}\n"
               "status: {phase: Active}\n");
    r = find(f, RES_NAMESPACE, "default", "bookinfo");
    assert_int_equal(r->meta.labels.n, 2);
    assert_string_equal(res_kind_name(r->kind), "Namespace");
    load_ok(f, "apiVersion: v1\nkind: Namespace\nmetadata: {name: bare}\n");
    load(f, "apiVersion: v1\nkind: Namespace\nmetadata: {name: a.b}\n");
    assert_int_equal(f->nerr, 1);
}

static void node_is_read_for_its_labels(void **state)
{
    struct fx *f = *state;
    const struct resource *r;

    load_ok(f, "apiVersion: v1\nkind: Node\n"
               "metadata:\n  name: ip-10-0-0-1.ec2.internal\n"
               "  labels: {topology.kubernetes.io/zone: eu-west-1a, "
               "node-role.kubernetes.io/worker: \"\"}\n"
               "spec: {podCIDR: 10.0.0.0/24, podCIDRs: [10.0.0.0/24], "
               "providerID: aws:///i-1, unschedulable: false, taints: [], "
               "externalID: x}\n"
               "status: {capacity: {cpu: '2'}}\n");
    r = find(f, RES_NODE, "default", "ip-10-0-0-1.ec2.internal");
    assert_int_equal(r->meta.labels.n, 2);
    assert_string_equal(res_kind_name(r->kind), "Node");
    /* A key strait does not know is an error that names the place. */
    assert_string_equal(load(f, "apiVersion: v1\nkind: Node\n"
                                "metadata: {name: n2}\n"
                                "spec: {podCIDR: a, nodeZone: b}\n"),
                        "r.yaml:4:20: Node default/n2: spec.nodeZone: unknown "
                        "key\n");
}

static void other_kubernetes_kinds_are_ignored_with_info(void **state)
{
    struct fx *f = *state;

    load_ok(f, "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: p}\n"
               "spec: {replicas: 1}\n"
               "---\n"
               "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"
               "spec: {replicas: 1}\n"
               "---\n"
               "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
               "data: {a: b}\n"
               "---\n"
               "apiVersion: admissionregistration.k8s.io/v1\n"
               "kind: MutatingWebhookConfiguration\nmetadata: {name: w}\n"
               "webhooks: []\n"
               "---\n"
               "apiVersion: apiextensions.k8s.io/v1\n"
               "kind: CustomResourceDefinition\nmetadata: {name: c}\n"
               "spec: {}\n");
    assert_int_equal(f->set->n, 0);
    assert_int_equal(f->set->msgs.n, 5);
    for (size_t i = 0; i < f->set->msgs.n; i++)
        assert_int_equal(f->set->msgs.v[i].level, RES_INFO);
}

/* A Pod as `kubectl get pod -o yaml` writes it (bookinfo's reviews-v2):
 * every field loads; the ones the gateway reads are decoded. */
#define REVIEWS_V2_POD                                                         \
    "apiVersion: v1\nkind: Pod\n"                                              \
    "metadata:\n"                                                              \
    "  name: reviews-v2-5b667bcbf8-abcde\n"                                    \
    "  namespace: bookinfo\n"                                                  \
    "  labels: {app: reviews, version: v2, pod-template-hash: 5b667bcbf8, "    \
    "istio-locality: eu-west.eu-west-1b}\n"                                    \
    "  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: x, "    \
    "uid: u}]\n"                                                               \
    "spec:\n"                                                                  \
    "  containers:\n"                                                          \
    "  - name: reviews\n"                                                      \
    "    image: docker.io/istio/examples-bookinfo-reviews-v2:1.20.2\n"         \
    "    ports: [{containerPort: 9080}]\n"                                     \
    "    env: [{name: LOG_DIR, value: /tmp/logs}]\n"                           \
    "    volumeMounts: [{name: tmp, mountPath: /tmp}]\n"                       \
    "  volumes: [{name: tmp, emptyDir: {}}]\n"                                 \
    "  serviceAccountName: bookinfo-reviews\n"                                 \
    "  serviceAccount: bookinfo-reviews\n"                                     \
    "  nodeName: node-b\n"                                                     \
    "  dnsPolicy: ClusterFirst\n"                                              \
    "  restartPolicy: Always\n"                                                \
    "  schedulerName: default-scheduler\n"                                     \
    "  securityContext: {}\n"                                                  \
    "  terminationGracePeriodSeconds: 30\n"                                    \
    "  tolerations: [{key: node.kubernetes.io/not-ready, operator: Exists}]\n" \
    "status:\n"                                                                \
    "  phase: Running\n"                                                       \
    "  conditions: [{type: Ready, status: \"True\"}]\n"                        \
    "  hostIP: 10.0.0.2\n"                                                     \
    "  podIP: 10.1.0.12\n"                                                     \
    "  podIPs: [{ip: 10.1.0.12}]\n"                                            \
    "  qosClass: BestEffort\n"                                                 \
    "  startTime: \"2026-12-01T00:00:00Z\"\n"                                  \
    "  containerStatuses: [{name: reviews, ready: true}]\n"

static void pod_is_read_as_kubectl_writes_it(void **state)
{
    struct fx *f = *state;
    const struct resource *r;
    const struct res_k8s_pod *p;

    load_ok(f, REVIEWS_V2_POD);
    r = find(f, RES_POD, "bookinfo", "reviews-v2-5b667bcbf8-abcde");
    assert_string_equal(res_kind_name(r->kind), "Pod");
    p = r->spec;
    assert_string_equal(p->spec.node_name, "node-b");
    assert_string_equal(p->spec.service_account_name, "bookinfo-reviews");
    assert_string_equal(p->status.phase, "Running");
    assert_string_equal(p->status.pod_ip, "10.1.0.12");
    assert_int_equal(p->status.pod_ips.n, 1);
    assert_int_equal(r->meta.labels.n, 4);
    /* A bad address is an error at its place; a key Kubernetes does not
     * have is one too. */
    load(f, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
            "status: {podIP: 10.1.0.300}\n");
    assert_int_equal(f->nerr, 1);
    assert_true(strstr(buf_cstr(&f->errs), "status.podIP: '10.1.0.300' is "
                                           "not an IP address") != NULL);
    assert_string_equal(load(f, "apiVersion: v1\nkind: Pod\n"
                                "metadata: {name: p}\n"
                                "spec: {nodeName: a, podZone: b}\n"),
                        "r.yaml:4:21: Pod default/p: spec.podZone: unknown "
                        "key\n");
}

/* An EndpointSlice endpoint is its Pod's: found by targetRef, else by
 * IP; it gets the Pod's labels (so DestinationRule subsets select it),
 * service account, istio-locality label (else its Node's topology) and
 * network label. A Pod Succeeded or Failed is never found by IP. */
#define REVIEWS_SVC_SLICE(extra_ep)                                            \
    "apiVersion: v1\nkind: Service\n"                                          \
    "metadata: {name: reviews, namespace: bookinfo}\n"                         \
    "spec: {ports: [{name: http, port: 9080}], selector: {app: reviews}}\n"    \
    "---\n"                                                                    \
    "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\naddressType: "      \
    "IPv4\n"                                                                   \
    "metadata: {name: reviews-x, namespace: bookinfo, labels: "                \
    "{kubernetes.io/service-name: reviews}}\n"                                 \
    "ports: [{name: http, port: 9080, protocol: TCP}]\n"                       \
    "endpoints:\n"                                                             \
    "- addresses: [10.1.0.11]\n"                                               \
    "  targetRef: {kind: Pod, name: reviews-v1, namespace: bookinfo, uid: "    \
    "u}\n"                                                                     \
    "- addresses: [10.1.0.12]\n" extra_ep "---\n"                              \
    "apiVersion: v1\nkind: Node\n"                                             \
    "metadata: {name: node-a, labels: {topology.kubernetes.io/region: r1, "    \
    "topology.kubernetes.io/zone: z1}}\n"                                      \
    "---\n"                                                                    \
    "apiVersion: v1\nkind: Pod\n"                                              \
    "metadata: {name: reviews-v1, namespace: bookinfo, labels: {app: "         \
    "reviews, version: v1, topology.istio.io/network: net-b}}\n"               \
    "spec: {nodeName: node-a, serviceAccountName: bookinfo-reviews}\n"         \
    "status: {phase: Running, podIP: 10.9.9.9}\n"                              \
    "---\n" REVIEWS_V2_POD

static const struct res_workload_entry *
ep_at(const struct res_service_entry *se, const char *addr)
{
    for (size_t i = 0; i < se->endpoints.n; i++) {
        const struct res_workload_entry *we =
            (const struct res_workload_entry *)se->endpoints.v + i;
        if (strcmp(we->address, addr) == 0)
            return we;
    }
    fail_msg("no endpoint %s", addr);
    return NULL;
}

static const char *we_label(const struct res_workload_entry *we,
                            const char *key)
{
    for (size_t i = 0; i < we->labels.n; i++)
        if (strcmp(we->labels.v[i].key, key) == 0)
            return we->labels.v[i].val;
    return NULL;
}

static void slice_endpoints_are_their_pods(void **state)
{
    struct fx *f = *state;
    const struct res_service_entry *se;
    const struct res_workload_entry *v1, *v2, *other;

    load_ok(
        f,
        REVIEWS_SVC_SLICE(
            "- addresses: [10.1.0.13]\n") "---\n"
                                          "apiVersion: v1\nkind: Pod\n"
                                          "metadata: {name: done, namespace: "
                                          "bookinfo, labels: {version: "
                                          "v9}}\n"
                                          "status: {phase: Succeeded, podIP: "
                                          "10.1.0.13}\n");
    se = res_service_entry(find(f, RES_SERVICE, "bookinfo", "reviews"));
    assert_int_equal(se->endpoints.n, 3);
    /* By targetRef, although its podIP says otherwise. */
    v1 = ep_at(se, "10.1.0.11");
    assert_string_equal(we_label(v1, "version"), "v1");
    assert_string_equal(v1->service_account, "bookinfo-reviews");
    assert_string_equal(v1->network, "net-b");
    assert_string_equal(v1->locality, "r1/z1");
    /* By IP; its istio-locality label, '.' for '/'. */
    v2 = ep_at(se, "10.1.0.12");
    assert_string_equal(we_label(v2, "version"), "v2");
    assert_string_equal(we_label(v2, "app"), "reviews");
    assert_string_equal(v2->locality, "eu-west/eu-west-1b");
    assert_null(v2->network);
    /* A Succeeded Pod's IP finds nobody. */
    other = ep_at(se, "10.1.0.13");
    assert_int_equal(other->labels.n, 0);
    assert_null(other->service_account);
}

/* `kubectl get svc,endpointslices -o yaml` writes a List. */
static void kubectl_list_of_kinds(void **state)
{
    struct fx *f = *state;
    const struct res_service_entry *se;

    load_ok(f, "apiVersion: v1\n"
               "items:\n"
               "- apiVersion: v1\n"
               "  kind: Service\n"
               "  metadata: {name: web, namespace: shop}\n"
               "  spec:\n"
               "    ports: [{name: http, port: 80, targetPort: 8080}]\n"
               "    selector: {app: web}\n"
               "  status: {loadBalancer: {}}\n"
               "- addressType: IPv4\n"
               "  apiVersion: discovery.k8s.io/v1\n"
               "  endpoints: [{addresses: [10.1.0.9], conditions: {ready: "
               "true}}]\n"
               "  kind: EndpointSlice\n"
               "  metadata: {name: web-x, namespace: shop, labels: "
               "{kubernetes.io/service-name: web}}\n"
               "  ports: [{name: http, port: 8080, protocol: TCP}]\n"
               "kind: List\n"
               "metadata: {resourceVersion: \"\"}\n");
    se = res_service_entry(find(f, RES_SERVICE, "shop", "web"));
    assert_int_equal(se->endpoints.n, 1);
    assert_int_equal(ep_port(se_ep(se, 0), "http"), 8080);
}

/* Kubernetes' own limits on a slice: 1000 endpoints, 100 ports, 100
 * addresses an endpoint; one more is an error. */
static void slice_limits(void **state)
{
    struct fx *f = *state;
    struct buf b;
    static const struct {
        size_t eps, addrs, ports;
        const char *want;
    } cases[] = {
        {1000, 100, 100, NULL},
        {1001, 1, 1, "endpoints: needs 0 to 1000 entries, has 1001"},
        {1, 101, 1, "addresses: needs 1 to 100 entries, has 101"},
        {1, 1, 101, "ports: needs 0 to 100 entries, has 101"},
    };

    for (size_t c = 0; c < sizeof(cases) / sizeof(*cases); c++) {
        buf_init(&b, 16 * 1024 * 1024);
        buf_puts(&b, "addressType: IPv4\napiVersion: discovery.k8s.io/v1\n"
                     "kind: EndpointSlice\nmetadata: {name: s, labels: "
                     "{kubernetes.io/service-name: x}}\nendpoints:\n");
        for (size_t i = 0; i < cases[c].eps; i++) {
            buf_puts(&b, "- addresses: [");
            for (size_t a = 0; a < cases[c].addrs; a++)
                buf_printf(&b, "%s10.0.%zu.%zu", a ? ", " : "", i % 250,
                           a % 250);
            buf_puts(&b, "]\n");
        }
        buf_puts(&b, "ports:\n");
        for (size_t p = 0; p < cases[c].ports; p++)
            buf_printf(&b, "- {name: p%zu, port: %zu}\n", p, p + 1);
        load(f, buf_cstr(&b));
        if (cases[c].want == NULL) {
            assert_int_equal(f->nerr, 0);
        } else {
            assert_int_equal(f->nerr, 1);
            if (strstr(buf_cstr(&f->errs), cases[c].want) == NULL)
                fail_msg("want '%s' in %s", cases[c].want, buf_cstr(&f->errs));
        }
        buf_dispose(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(service_is_a_static_registry_entry,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            slices_of_other_services_and_namespaces_are_not_used, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            publish_not_ready_addresses_uses_every_endpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(export_to_annotation_is_read, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(external_name_is_resolved_by_dns, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(service_errors_name_the_place, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(slice_errors_name_the_place, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(secret_keys_are_decoded_and_never_shown,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(secret_identity_holds_digests, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(generic_secret_keys_as_istio_reads_them,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(pod_is_read_as_kubectl_writes_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(slice_endpoints_are_their_pods, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(node_is_read_for_its_labels, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(namespace_labels_are_kept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            other_kubernetes_kinds_are_ignored_with_info, setup, teardown),
        cmocka_unit_test_setup_teardown(slice_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(kubectl_list_of_kinds, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
