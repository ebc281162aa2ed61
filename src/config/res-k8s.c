/*
 * Kubernetes kinds read as istiod reads them: a v1 Service is a registry
 * entry (a ServiceEntry of resolution STATIC whose endpoints are its
 * EndpointSlices' ready addresses and the WorkloadEntries its selector
 * picks), a discovery.k8s.io/v1 EndpointSlice feeds the Service named by
 * its kubernetes.io/service-name label, a v1 Secret of type
 * kubernetes.io/tls or Opaque is a Gateway credentialName in its
 * namespace, a v1 Namespace is kept with its labels, a v1 Node's
 * topology labels are the locality of the slice endpoints on it, and a v1
 * Pod gives the endpoints that are it their labels, service account,
 * locality and network. The tables
 * accept what `kubectl get -o yaml` writes; the keys that mean nothing
 * to a gateway that routes to endpoints by host (clusterIPs, ipFamilies,
 * nodePort, ...) are accepted and ignored, as README says.
 */
#include "config.h"

#include <arpa/inet.h>
#include <openssl/base64.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/res-k8s.h"
#include "config/res-kinds.h"
#include "config/resource.h"
#include "core/buf.h"
#include "core/json.h"

/* The label an EndpointSlice names its Service by. */
#define SLICE_SERVICE_LABEL "kubernetes.io/service-name"

/* ---- value parsers ------------------------------------------------------ */

/* targetPort: an int (1-65535) or an IANA port name (a container port). */
static int parse_target_port(const char *s, size_t n, void *dst,
                             const char **why)
{
    struct res_k8s_target_port *tp = dst;
    int64_t v = 0;
    size_t i;

    memset(tp, 0, sizeof(*tp));
    for (i = 0; i < n && s[i] >= '0' && s[i] <= '9'; i++)
        v = v * 10 + (s[i] - '0');
    if (n > 0 && i == n) {
        if (n > 5 || v < 1 || v > 65535) {
            *why = "a port number is 1-65535";
            return -1;
        }
        tp->number = v;
        return 0;
    }
    if (n == 0 || n > 15 || res_valid_label(s, n, NULL, why) < 0) {
        *why = "a port name is 1-15 lower-case letters, digits and '-'";
        return -1;
    }
    memcpy(tp->name, s, n);
    return 0;
}

static void target_port_json(struct buf *b, const void *src)
{
    const struct res_k8s_target_port *tp = src;

    if (tp->name[0] != '\0')
        json_str(b, tp->name);
    else
        buf_printf(b, "%lld", (long long)tp->number);
}

/* An EndpointSlice condition, where nil is a value of its own. */
static int parse_cond(const char *s, size_t n, void *dst, const char **why)
{
    int64_t v;

    if ((n == 4 && (strncmp(s, "true", 4) == 0 || strncmp(s, "True", 4) == 0)))
        v = RES_K8S_TRUE;
    else if (n == 5 &&
             (strncmp(s, "false", 5) == 0 || strncmp(s, "False", 5) == 0))
        v = RES_K8S_FALSE;
    else {
        *why = "expected true or false";
        return -1;
    }
    memcpy(dst, &v, sizeof(v));
    return 0;
}

static void cond_json(struct buf *b, const void *src)
{
    int64_t v;

    memcpy(&v, src, sizeof(v));
    buf_puts(b, v == RES_K8S_TRUE    ? "true"
                : v == RES_K8S_FALSE ? "false"
                                     : "null");
}

static const char *const l4_protocols[] = {"TCP", "UDP", "SCTP", NULL};

/* ---- Service ------------------------------------------------------------ */

#define PORT(f) RES_OFF(struct res_k8s_port, f)
static const struct conf_key svc_port_keys[] = {
    {.name = "name", .type = CONF_STR, .off = PORT(name), .help = "port name"},
    {.name = "port",
     .type = CONF_INT,
     .off = PORT(port),
     .min = 1,
     .max = 65535,
     .help = "service port (required)"},
    {.name = "targetPort",
     .type = CONF_CUSTOM,
     .off = PORT(target_port),
     .help = "endpoint port: a number, or a name the EndpointSlices map",
     .custom = parse_target_port,
     .custom_json = target_port_json},
    {.name = "protocol",
     .type = CONF_ENUM,
     .off = PORT(protocol),
     .def = "TCP",
     .help = "TCP or UDP (SCTP is refused)",
     .enums = l4_protocols},
    {.name = "appProtocol",
     .type = CONF_STR,
     .off = PORT(app_protocol),
     .help = "application protocol (Istio reads it before the name)"},
    {.name = "nodePort",
     .type = CONF_INT,
     .off = PORT(node_port),
     .min = 0,
     .max = 65535,
     .help = "accepted and ignored (a gateway reaches endpoints)"},
    {.name = NULL},
};
#undef PORT
static const struct conf_section svc_port_section = {
    svc_port_keys, sizeof(struct res_k8s_port),
    RES_OFF(struct res_k8s_port, mark)};

static const char *const svc_types[] = {"ClusterIP", "NodePort", "LoadBalancer",
                                        "ExternalName", NULL};
static const char *const affinities[] = {"None", "ClientIP", NULL};

#define SVC(f) RES_OFF(struct res_k8s_service, f)
#define IGN(key, i)                                                            \
    {                                                                          \
        .name = key, .type = CONF_IGNORE,                                      \
        .off = SVC(ignored) + (i) * sizeof(struct conf_mark),                  \
        .help = "accepted and ignored"                                         \
    }
static const struct conf_key svc_keys[] = {
    {.name = "ports",
     .type = CONF_LIST,
     .off = SVC(ports),
     .max = 65535,
     .help = "ports",
     .sub = &svc_port_section},
    {.name = "selector",
     .type = CONF_STR_MAP,
     .off = SVC(selector),
     .help = "labels of the WorkloadEntries that are endpoints too"},
    {.name = "clusterIP",
     .type = CONF_STR,
     .off = SVC(cluster_ip),
     .help = "virtual IP, \"None\" (headless) or empty; shown, not used"},
    {.name = "clusterIPs",
     .type = CONF_STR_LIST,
     .off = SVC(cluster_ips),
     .max = 2,
     .help = "virtual IPs; shown, not used"},
    {.name = "type",
     .type = CONF_ENUM,
     .off = SVC(type),
     .def = "ClusterIP",
     .help = "ClusterIP, NodePort, LoadBalancer (alike here) or ExternalName "
             "(DNS)",
     .enums = svc_types},
    {.name = "externalName",
     .type = CONF_STR,
     .off = SVC(external_name),
     .help = "type ExternalName: the DNS name the endpoints are"},
    {.name = "publishNotReadyAddresses",
     .type = CONF_BOOL,
     .off = SVC(publish_not_ready_addresses),
     .help = "every EndpointSlice address is an endpoint, ready or not"},
    {.name = "sessionAffinity",
     .type = CONF_ENUM,
     .off = SVC(session_affinity),
     .def = "None",
     .help = "None (ClientIP is refused: use a DestinationRule's "
             "consistentHash useSourceIp)",
     .enums = affinities},
    IGN("sessionAffinityConfig", 0),
    IGN("ipFamilies", 1),
    IGN("ipFamilyPolicy", 2),
    IGN("internalTrafficPolicy", 3),
    IGN("externalTrafficPolicy", 4),
    IGN("allocateLoadBalancerNodePorts", 5),
    IGN("loadBalancerIP", 6),
    IGN("loadBalancerSourceRanges", 7),
    IGN("loadBalancerClass", 8),
    {.name = "externalIPs",
     .type = CONF_STR_LIST,
     .off = SVC(external_ips),
     .max = 64,
     .help = "a Service labelled topology.istio.io/network: the network's "
             "gateway addresses (else unused)"},
    IGN("healthCheckNodePort", 10),
    IGN("trafficDistribution", 11),
    {.name = NULL},
};
#undef IGN
#undef SVC
static const struct conf_section svc_section = {svc_keys, 0, SIZE_MAX};

static int is_ip(const char *s)
{
    unsigned char tmp[16];

    return inet_pton(AF_INET, s, tmp) == 1 || inet_pton(AF_INET6, s, tmp) == 1;
}

static void svc_check(struct res_check *ck, struct resource *r)
{
    const struct res_k8s_service *s = r->spec;
    char p[128];

    for (size_t i = 0; i < s->ports.n; i++) {
        const struct res_k8s_port *sp =
            (const struct res_k8s_port *)s->ports.v + i;
        const char *why;
        res_path(p, sizeof(p), "spec.ports[%zu]", i);
        if (sp->port == 0)
            res_err(ck, &sp->mark, p, "missing key 'port'");
        /* Kubernetes: a Service of several ports names each. */
        if (s->ports.n > 1 && (sp->name == NULL || sp->name[0] == '\0'))
            res_err(ck, &sp->mark, p,
                    "a Service with several ports needs a name for each");
        else if (sp->name != NULL && sp->name[0] != '\0' &&
                 res_valid_label(sp->name, strlen(sp->name), NULL, &why) < 0)
            res_err(ck, &sp->mark, p, "name '%s': %s", sp->name, why);
        if (sp->protocol == RES_K8S_SCTP)
            res_err(ck, &sp->mark, p,
                    "protocol SCTP is not supported (TCP or UDP)");
        for (size_t j = 0; j < i; j++) {
            const struct res_k8s_port *o =
                (const struct res_k8s_port *)s->ports.v + j;
            if (o->port == sp->port && o->protocol == sp->protocol &&
                sp->port != 0)
                res_err(ck, &sp->mark, p, "port %lld is also ports[%zu]",
                        (long long)sp->port, j);
            else if (o->name != NULL && sp->name != NULL &&
                     strcmp(o->name, sp->name) == 0)
                res_err(ck, &sp->mark, p,
                        "port name '%s' is also used by ports[%zu]", sp->name,
                        j);
        }
    }
    if (s->type == RES_K8S_EXTERNAL_NAME) {
        if (s->external_name == NULL || s->external_name[0] == '\0')
            res_err(ck, NULL, "spec.externalName",
                    "type ExternalName needs externalName");
        else
            res_check_host(ck, NULL, "spec.externalName", s->external_name, 0);
    } else if (s->external_name != NULL && s->external_name[0] != '\0') {
        res_err(ck, NULL, "spec.externalName",
                "externalName is for type ExternalName only");
    }
    if (s->cluster_ip != NULL && s->cluster_ip[0] != '\0' &&
        strcmp(s->cluster_ip, "None") != 0 && !is_ip(s->cluster_ip))
        res_err(ck, NULL, "spec.clusterIP",
                "'%s' is not an IP address, \"None\" or empty", s->cluster_ip);
    if (s->session_affinity != 0)
        res_err(ck, NULL, "spec.sessionAffinity",
                "ClientIP affinity is not supported (a DestinationRule's "
                "loadBalancer.consistentHash.useSourceIp is)");
    for (size_t i = 0; i < s->selector.n; i++)
        if (s->selector.v[i].key[0] == '\0')
            res_err(ck, NULL, "spec.selector", "empty label name");
}

static void svc_dispose(void *spec)
{
    struct res_k8s_service *s = spec;

    if (s->entry != NULL) {
        conf_dispose(res_service_entry_ops.spec, s->entry);
        free(s->entry);
        s->entry = NULL;
    }
}

static void svc_json(struct buf *b, const struct resource *r)
{
    const struct res_k8s_service *s = r->spec;
    struct buf spec;

    /* The spec as written, and the registry entry strait made of it. */
    buf_init(&spec, 16 * 1024 * 1024);
    conf_to_json(&svc_section, s, &spec);
    if (buf_len(&spec) < 2 || s->entry == NULL) {
        buf_append(b, buf_ptr(&spec), buf_len(&spec));
        buf_dispose(&spec);
        return;
    }
    buf_append(b, buf_ptr(&spec), buf_len(&spec) - 1);
    buf_puts(b,
             buf_len(&spec) > 2 ? ",\"serviceEntry\":" : "\"serviceEntry\":");
    conf_to_json(res_service_entry_ops.spec, s->entry, b);
    buf_puts(b, "}");
    buf_dispose(&spec);
}

const struct res_kind_ops res_k8s_service_ops = {
    .kind = "Service",
    .spec = &svc_section,
    .spec_size = sizeof(struct res_k8s_service),
    .check = svc_check,
};

const struct res_kind_ext res_k8s_service_ext = {
    .dispose = svc_dispose,
    .json = svc_json,
};

/* ---- EndpointSlice ------------------------------------------------------ */

#define EPC(f)                                                                 \
    (RES_OFF(struct res_k8s_endpoint, conditions.f) -                          \
     RES_OFF(struct res_k8s_endpoint, conditions))
static const struct conf_key cond_keys[] = {
    {.name = "ready",
     .type = CONF_CUSTOM,
     .off = EPC(ready),
     .help = "ready (nil: ready); only ready endpoints are used",
     .custom = parse_cond,
     .custom_json = cond_json},
    {.name = "serving",
     .type = CONF_CUSTOM,
     .off = EPC(serving),
     .help = "shown; Istio sends traffic by ready",
     .custom = parse_cond,
     .custom_json = cond_json},
    {.name = "terminating",
     .type = CONF_CUSTOM,
     .off = EPC(terminating),
     .help = "shown; a terminating endpoint is never ready",
     .custom = parse_cond,
     .custom_json = cond_json},
    {.name = NULL},
};
#undef EPC
static const struct conf_section cond_section = {
    cond_keys, 0,
    RES_OFF(struct res_k8s_endpoint, conditions.mark) -
        RES_OFF(struct res_k8s_endpoint, conditions)};

#define TR(f)                                                                  \
    (RES_OFF(struct res_k8s_endpoint, target_ref.f) -                          \
     RES_OFF(struct res_k8s_endpoint, target_ref))
#define TR_IGN(key, i)                                                         \
    {                                                                          \
        .name = key, .type = CONF_IGNORE,                                      \
        .off = TR(ignored) + (i) * sizeof(struct conf_mark),                   \
        .help = "accepted and ignored"                                         \
    }
static const struct conf_key target_ref_keys[] = {
    {.name = "kind",
     .type = CONF_STR,
     .off = TR(kind),
     .help = "Pod: the endpoint is that Pod's (other kinds are not read)"},
    {.name = "name", .type = CONF_STR, .off = TR(name), .help = "its name"},
    {.name = "namespace",
     .type = CONF_STR,
     .off = TR(ns),
     .help = "its namespace (default: the EndpointSlice's)"},
    TR_IGN("apiVersion", 0),
    TR_IGN("uid", 1),
    TR_IGN("resourceVersion", 2),
    TR_IGN("fieldPath", 3),
    {.name = NULL},
};
#undef TR_IGN
static const struct conf_section target_ref_section = {
    target_ref_keys, 0,
    RES_OFF(struct res_k8s_endpoint, target_ref.mark) -
        RES_OFF(struct res_k8s_endpoint, target_ref)};
#undef TR

#define EP(f) RES_OFF(struct res_k8s_endpoint, f)
static const struct conf_key ep_keys[] = {
    {.name = "addresses",
     .type = CONF_STR_LIST,
     .off = EP(addresses),
     .min = 1,
     .max = 100,
     .help = "addresses (required); the first is used, as Istio does"},
    {.name = "conditions",
     .type = CONF_SECTION,
     .off = EP(conditions),
     .help = "ready, serving, terminating",
     .sub = &cond_section},
    {.name = "hostname",
     .type = CONF_STR,
     .off = EP(hostname),
     .help = "shown"},
    {.name = "nodeName",
     .type = CONF_STR,
     .off = EP(node_name),
     .help = "the Node whose topology labels (topology.kubernetes.io/region, "
             "/zone, topology.istio.io/subzone) are the endpoint's locality, "
             "as istiod takes it"},
    {.name = "zone",
     .type = CONF_STR,
     .off = EP(zone),
     .help = "the locality's zone (region unknown: \"/ZONE\") when no "
             "Node nodeName with topology labels is known"},
    {.name = "targetRef",
     .type = CONF_SECTION,
     .off = EP(target_ref),
     .help = "the object behind the endpoint: a Pod (kind Pod) gives it "
             "its labels, service account, locality and network",
     .sub = &target_ref_section},
    {.name = "hints",
     .type = CONF_IGNORE,
     .off = EP(ignored),
     .help = "accepted and ignored"},
    {.name = "deprecatedTopology",
     .type = CONF_IGNORE,
     .off = EP(ignored) + sizeof(struct conf_mark),
     .help = "accepted and ignored"},
    {.name = NULL},
};
#undef EP
static const struct conf_section ep_section = {
    ep_keys, sizeof(struct res_k8s_endpoint),
    RES_OFF(struct res_k8s_endpoint, mark)};

#define SLP(f) RES_OFF(struct res_k8s_slice_port, f)
static const struct conf_key slice_port_keys[] = {
    {.name = "name",
     .type = CONF_STR,
     .off = SLP(name),
     .help = "the Service port's name"},
    {.name = "port",
     .type = CONF_INT,
     .off = SLP(port),
     .min = 1,
     .max = 65535,
     .help = "the endpoints' port for it"},
    {.name = "protocol",
     .type = CONF_ENUM,
     .off = SLP(protocol),
     .def = "TCP",
     .help = "TCP, UDP or SCTP",
     .enums = l4_protocols},
    {.name = "appProtocol",
     .type = CONF_STR,
     .off = SLP(app_protocol),
     .help = "shown (the Service's is used)"},
    {.name = NULL},
};
#undef SLP
static const struct conf_section slice_port_section = {
    slice_port_keys, sizeof(struct res_k8s_slice_port),
    RES_OFF(struct res_k8s_slice_port, mark)};

static const char *const addr_types[] = {"IPv4", "IPv6", "FQDN", NULL};

#define SL(f) RES_OFF(struct res_k8s_endpoint_slice, f)
static const struct conf_key slice_keys[] = {
    {.name = "addressType",
     .type = CONF_ENUM,
     .off = SL(address_type),
     .def = "IPv4",
     .help = "IPv4 or IPv6 (FQDN slices are not used, as in Istio)",
     .enums = addr_types},
    {.name = "endpoints",
     .type = CONF_LIST,
     .off = SL(endpoints),
     .max = 1000,
     .help = "endpoints",
     .sub = &ep_section},
    {.name = "ports",
     .type = CONF_LIST,
     .off = SL(ports),
     .max = 100,
     .help = "ports, by Service port name",
     .sub = &slice_port_section},
    {.name = NULL},
};
#undef SL
static const struct conf_section slice_section = {slice_keys, 0, SIZE_MAX};

static void slice_check(struct res_check *ck, struct resource *r)
{
    const struct res_k8s_endpoint_slice *s = r->spec;
    char p[128];
    int fam = s->address_type == RES_K8S_IPV6 ? AF_INET6 : AF_INET;

    if (s->address_type == RES_K8S_FQDN) {
        res_msgs_add(ck->msgs, res_level_code(RES_INFO), RES_INFO, r->file,
                     r->line, r->col, ck->resource, "addressType",
                     "FQDN EndpointSlices are not used (as in Istio); ignored");
        return;
    }
    for (size_t i = 0; i < s->endpoints.n; i++) {
        const struct res_k8s_endpoint *ep =
            (const struct res_k8s_endpoint *)s->endpoints.v + i;
        unsigned char tmp[16];
        res_path(p, sizeof(p), "endpoints[%zu].addresses", i);
        if (ep->addresses.n == 0)
            res_err(ck, &ep->mark, p, "an endpoint needs an address");
        for (size_t j = 0; j < ep->addresses.n; j++)
            if (inet_pton(fam, ep->addresses.v[j], tmp) != 1)
                res_err(ck, &ep->mark, p, "'%s' is not an %s address",
                        ep->addresses.v[j], addr_types[s->address_type]);
    }
    for (size_t i = 0; i < s->ports.n; i++) {
        const struct res_k8s_slice_port *sp =
            (const struct res_k8s_slice_port *)s->ports.v + i;
        res_path(p, sizeof(p), "ports[%zu]", i);
        for (size_t j = 0; j < i; j++) {
            const struct res_k8s_slice_port *o =
                (const struct res_k8s_slice_port *)s->ports.v + j;
            const char *a = o->name ? o->name : "",
                       *b = sp->name ? sp->name : "";
            if (strcmp(a, b) == 0 && o->protocol == sp->protocol)
                res_err(ck, &sp->mark, p,
                        "port name '%s' is also used by ports[%zu]", b, j);
        }
    }
    if (res_k8s_slice_service(r) == NULL)
        res_msgs_add(ck->msgs, res_level_code(RES_INFO), RES_INFO, r->file,
                     r->line, r->col, ck->resource, "metadata.labels",
                     "no label " SLICE_SERVICE_LABEL
                     ": belongs to no Service; not used");
}

const struct res_kind_ops res_k8s_endpoint_slice_ops = {
    .kind = "EndpointSlice",
    .spec = &slice_section,
    .spec_size = sizeof(struct res_k8s_endpoint_slice),
    .check = slice_check,
};

const struct res_kind_ext res_k8s_endpoint_slice_ext = {
    .toplevel = 1,
};

const char *res_k8s_slice_service(const struct resource *r)
{
    for (size_t i = 0; i < r->meta.labels.n; i++)
        if (strcmp(r->meta.labels.v[i].key, SLICE_SERVICE_LABEL) == 0 &&
            r->meta.labels.v[i].val[0] != '\0')
            return r->meta.labels.v[i].val;
    return NULL;
}

int res_k8s_endpoint_used(const struct res_k8s_service *svc,
                          const struct res_k8s_endpoint *ep)
{
    /* Istio sends traffic to an endpoint whose ready is nil or true;
     * publishNotReadyAddresses is Kubernetes' own switch to count every
     * address as ready. Kubernetes never sets ready on a terminating
     * endpoint, so terminating endpoints drop out by the same rule. */
    if (svc != NULL && svc->publish_not_ready_addresses)
        return 1;
    return ep->conditions.ready != RES_K8S_FALSE;
}

/* ---- Secret ------------------------------------------------------------- */

#define SEC(f) RES_OFF(struct res_k8s_secret, f)
static const struct conf_key secret_keys[] = {
    {.name = "type",
     .type = CONF_STR,
     .off = SEC(type),
     .def = "Opaque",
     .help = "kubernetes.io/tls or Opaque are credentials; others are kept, "
             "unused"},
    {.name = "data",
     .type = CONF_STR_MAP,
     .off = SEC(data),
     .help = "key -> base64 value (never shown)"},
    {.name = "stringData",
     .type = CONF_STR_MAP,
     .off = SEC(string_data),
     .help = "key -> text value, over data's (never shown)"},
    {.name = "immutable",
     .type = CONF_BOOL,
     .off = SEC(immutable),
     .help = "accepted and ignored"},
    {.name = NULL},
};
#undef SEC
static const struct conf_section secret_section = {secret_keys, 0, SIZE_MAX};

/* Istio's two spellings of each credential key: a TLS Secret's and a
 * generic Secret's. */
static const char *const tls_names[RES_SECRET_NKEYS] = {"tls.crt", "tls.key",
                                                        "ca.crt", "ca.crl"};
static const char *const generic_names[RES_SECRET_NKEYS] = {"cert", "key",
                                                            "cacert", "crl"};

const char *res_secret_key_name(int key)
{
    return key >= 0 && key < RES_SECRET_NKEYS ? tls_names[key] : "?";
}

static const char *strmap_get(const struct conf_strmap *m, const char *key)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->v[i].key, key) == 0)
            return m->v[i].val;
    return NULL;
}

/* base64_decode() decodes s (blanks and newlines allowed) into an
 * allocated buffer; -1 when it is not base64. */
static int base64_decode(const char *s, unsigned char **out, size_t *outlen)
{
    size_t n = strlen(s), m = 0, max;
    char *clean = malloc(n + 1);
    unsigned char *buf;

    if (clean == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t')
            clean[m++] = s[i];
    if (!EVP_DecodedLength(&max, m) || (buf = malloc(max + 1)) == NULL) {
        free(clean);
        return -1;
    }
    if (!EVP_DecodeBase64(buf, outlen, max, (const uint8_t *)clean, m)) {
        free(clean);
        free(buf);
        return -1;
    }
    free(clean);
    buf[*outlen] = '\0';
    *out = buf;
    return 0;
}

/* The value of key k, by stringData over data; 1 when found. */
static int secret_has(const struct res_k8s_secret *s, const char *key)
{
    return strmap_get(&s->string_data, key) != NULL ||
           strmap_get(&s->data, key) != NULL;
}

static void secret_check(struct res_check *ck, struct resource *r)
{
    struct res_k8s_secret *s = r->spec;
    const char *const *names;
    char p[300];

    for (size_t i = 0; i < s->data.n; i++) {
        unsigned char *v;
        size_t n;
        res_path(p, sizeof(p), "data.%s", s->data.v[i].key);
        if (base64_decode(s->data.v[i].val, &v, &n) < 0) {
            res_err(ck, NULL, p, "not base64");
            continue;
        }
        free(v);
    }
    if (ck->nerr > 0)
        return;
    if (strcmp(s->type, "kubernetes.io/tls") != 0 &&
        strcmp(s->type, "Opaque") != 0) {
        res_msgs_add(ck->msgs, res_level_code(RES_INFO), RES_INFO, r->file,
                     r->line, r->col, ck->resource, "type",
                     "a Secret of type %s is not a credential; not used",
                     s->type);
        return;
    }
    /* Istio: cert and key make a generic Secret, else tls.crt and
     * tls.key; cacert, else ca.crt, is the CA, and crl, else ca.crl. */
    names = secret_has(s, "cert") && secret_has(s, "key") ? generic_names
                                                          : tls_names;
    for (int k = 0; k < RES_SECRET_NKEYS; k++) {
        const char *key = names[k];
        const char *text;
        if (k >= RES_SECRET_CA && !secret_has(s, key))
            key = names == tls_names ? generic_names[k] : tls_names[k];
        if ((text = strmap_get(&s->string_data, key)) != NULL) {
            s->val[k] = (unsigned char *)strdup(text);
            s->len[k] = strlen(text);
        } else if ((text = strmap_get(&s->data, key)) != NULL) {
            if (base64_decode(text, &s->val[k], &s->len[k]) < 0)
                s->val[k] = NULL;
        }
    }
}

static void secret_dispose(void *spec)
{
    struct res_k8s_secret *s = spec;

    for (int k = 0; k < RES_SECRET_NKEYS; k++) {
        if (s->val[k] != NULL) {
            /* Key material does not outlive the Secret in freed memory. */
            memset(s->val[k], 0, s->len[k]);
            free(s->val[k]);
        }
        free(s->path[k]);
        s->val[k] = NULL;
        s->path[k] = NULL;
    }
}

/* Only the key names and the type: a Secret's values are never shown. */
static void secret_json(struct buf *b, const struct resource *r)
{
    const struct res_k8s_secret *s = r->spec;
    int first = 1;

    buf_puts(b, "{\"type\":");
    json_str(b, s->type);
    buf_puts(b, ",\"data\":{");
    for (int pass = 0; pass < 2; pass++) {
        const struct conf_strmap *m = pass ? &s->data : &s->string_data;
        for (size_t i = 0; i < m->n; i++) {
            if (pass && strmap_get(&s->string_data, m->v[i].key) != NULL)
                continue;
            if (!first)
                buf_puts(b, ",");
            first = 0;
            json_str(b, m->v[i].key);
            buf_puts(b, ":\"<redacted>\"");
        }
    }
    buf_printf(b, "},\"immutable\":%s}", s->immutable ? "true" : "false");
}

const struct res_kind_ops res_k8s_secret_ops = {
    .kind = "Secret",
    .spec = &secret_section,
    .spec_size = sizeof(struct res_k8s_secret),
    .check = secret_check,
};

/* A Secret's identity: its type and, for each key in name order of
 * writing, the key and the SHA-256 of its value (stringData, then data
 * not overridden), length-prefixed so no two inputs give the same
 * bytes. */
static void secret_identity(const struct resource *r,
                            const struct conf_sink *sink)
{
    const struct res_k8s_secret *s = r->spec;
    uint64_t n;

    n = strlen(s->type);
    sink->write(sink->arg, "T", 1);
    sink->write(sink->arg, &n, sizeof(n));
    sink->write(sink->arg, s->type, n);
    for (int pass = 0; pass < 2; pass++) {
        const struct conf_strmap *m = pass ? &s->data : &s->string_data;
        for (size_t i = 0; i < m->n; i++) {
            unsigned char d[SHA256_DIGEST_LENGTH];
            if (pass && strmap_get(&s->string_data, m->v[i].key) != NULL)
                continue;
            n = strlen(m->v[i].key);
            sink->write(sink->arg, pass ? "D" : "S", 1);
            sink->write(sink->arg, &n, sizeof(n));
            sink->write(sink->arg, m->v[i].key, n);
            SHA256((const uint8_t *)m->v[i].val, strlen(m->v[i].val), d);
            sink->write(sink->arg, d, sizeof(d));
        }
    }
}

const struct res_kind_ext res_k8s_secret_ext = {
    .toplevel = 1,
    .dispose = secret_dispose,
    .json = secret_json,
    .identity = secret_identity,
};

const struct res_k8s_secret *res_k8s_secret(const struct resource *r)
{
    return r->kind == RES_SECRET ? r->spec : NULL;
}

int res_secret_set_path(struct resource *r, int key, const char *path)
{
    struct res_k8s_secret *s = r->kind == RES_SECRET ? r->spec : NULL;
    char *p;

    if (s == NULL || key < 0 || key >= RES_SECRET_NKEYS)
        return -1;
    if ((p = strdup(path)) == NULL)
        return -1;
    free(s->path[key]);
    s->path[key] = p;
    return 0;
}

const struct resource *res_k8s_find_secret(const struct resource_set *set,
                                           const char *ns, const char *name)
{
    const struct resource *r = resource_find(set, RES_SECRET, ns, name);
    const struct res_k8s_secret *s = r != NULL ? res_k8s_secret(r) : NULL;

    if (s == NULL || (strcmp(s->type, "kubernetes.io/tls") != 0 &&
                      strcmp(s->type, "Opaque") != 0))
        return NULL;
    return r;
}

/* ---- Namespace ---------------------------------------------------------- */

static const struct conf_key ns_keys[] = {
    {.name = "finalizers",
     .type = CONF_IGNORE,
     .off = RES_OFF(struct res_k8s_namespace, finalizers),
     .help = "accepted and ignored"},
    {.name = NULL},
};
static const struct conf_section ns_section = {ns_keys, 0, SIZE_MAX};

static void ns_check(struct res_check *ck, struct resource *r)
{
    const char *why;

    if (res_valid_label(r->meta.name, strlen(r->meta.name), NULL, &why) < 0)
        res_err(ck, NULL, "metadata.name", "a namespace name %s", why);
}

const struct res_kind_ops res_k8s_namespace_ops = {
    .kind = "Namespace",
    .spec = &ns_section,
    .spec_size = sizeof(struct res_k8s_namespace),
    .check = ns_check,
};

const struct res_kind_ext res_k8s_namespace_ext = {
    .optional_spec = 1,
};

/* ---- Node --------------------------------------------------------------- */

#define NODE_IGN(i)                                                            \
    (RES_OFF(struct res_k8s_node, ignored) + (i) * sizeof(struct conf_mark))
static const struct conf_key node_keys[] = {
    {.name = "podCIDR",
     .type = CONF_IGNORE,
     .off = NODE_IGN(0),
     .help = "accepted and ignored"},
    {.name = "podCIDRs",
     .type = CONF_IGNORE,
     .off = NODE_IGN(1),
     .help = "accepted and ignored"},
    {.name = "providerID",
     .type = CONF_IGNORE,
     .off = NODE_IGN(2),
     .help = "accepted and ignored"},
    {.name = "unschedulable",
     .type = CONF_IGNORE,
     .off = NODE_IGN(3),
     .help = "accepted and ignored"},
    {.name = "taints",
     .type = CONF_IGNORE,
     .off = NODE_IGN(4),
     .help = "accepted and ignored"},
    {.name = "configSource",
     .type = CONF_IGNORE,
     .off = NODE_IGN(5),
     .help = "accepted and ignored"},
    {.name = "externalID",
     .type = CONF_IGNORE,
     .off = NODE_IGN(6),
     .help = "accepted and ignored"},
    {.name = NULL},
};
#undef NODE_IGN
static const struct conf_section node_section = {node_keys, 0, SIZE_MAX};

/* A Node's name is a DNS subdomain, which the loader checks for every
 * kind; its labels are read where they are used (slice_locality()). */
static void node_check(struct res_check *ck, struct resource *r)
{
    (void)ck;
    (void)r;
}

const struct res_kind_ops res_k8s_node_ops = {
    .kind = "Node",
    .spec = &node_section,
    .spec_size = sizeof(struct res_k8s_node),
    .check = node_check,
};

const struct res_kind_ext res_k8s_node_ext = {
    .optional_spec = 1,
};

/* ---- Pod ---------------------------------------------------------------- */

#define PS(f)                                                                  \
    (RES_OFF(struct res_k8s_pod, spec.f) - RES_OFF(struct res_k8s_pod, spec))
#define PS_IGN(key, i)                                                         \
    {                                                                          \
        .name = key, .type = CONF_IGNORE,                                      \
        .off = PS(ignored) + (i) * sizeof(struct conf_mark),                   \
        .help = "accepted and ignored"                                         \
    }
/* Every PodSpec field of Kubernetes 1.33, so `kubectl get pod -o yaml`
 * loads as written; six are read. */
static const struct conf_key pod_spec_keys[] = {
    {.name = "nodeName",
     .type = CONF_STR,
     .off = PS(node_name),
     .help = "the Node whose topology labels are the locality of the Pod's "
             "endpoints (unless the Pod is labelled istio-locality)"},
    {.name = "serviceAccountName",
     .type = CONF_STR,
     .off = PS(service_account_name),
     .help = "the service account of the Pod's endpoints (their SPIFFE "
             "identity)"},
    {.name = "serviceAccount",
     .type = CONF_STR,
     .off = PS(service_account),
     .help = "deprecated alias of serviceAccountName"},
    {.name = "hostname",
     .type = CONF_STR,
     .off = PS(hostname),
     .help = "shown"},
    {.name = "subdomain",
     .type = CONF_STR,
     .off = PS(subdomain),
     .help = "shown"},
    PS_IGN("activeDeadlineSeconds", 0),
    PS_IGN("affinity", 1),
    PS_IGN("automountServiceAccountToken", 2),
    PS_IGN("containers", 3),
    PS_IGN("dnsConfig", 4),
    PS_IGN("dnsPolicy", 5),
    PS_IGN("enableServiceLinks", 6),
    PS_IGN("ephemeralContainers", 7),
    PS_IGN("hostAliases", 8),
    PS_IGN("hostIPC", 9),
    {.name = "hostNetwork",
     .type = CONF_BOOL,
     .off = PS(host_network),
     .help = "a Pod on its Node's network shares the Node's IP: found by "
             "targetRef only, never by IP"},
    PS_IGN("hostPID", 11),
    PS_IGN("hostUsers", 12),
    PS_IGN("imagePullSecrets", 13),
    PS_IGN("initContainers", 14),
    PS_IGN("nodeSelector", 15),
    PS_IGN("os", 16),
    PS_IGN("overhead", 17),
    PS_IGN("preemptionPolicy", 18),
    PS_IGN("priority", 19),
    PS_IGN("priorityClassName", 20),
    PS_IGN("readinessGates", 21),
    PS_IGN("resourceClaims", 22),
    PS_IGN("resources", 23),
    PS_IGN("restartPolicy", 24),
    PS_IGN("runtimeClassName", 25),
    PS_IGN("schedulerName", 26),
    PS_IGN("schedulingGates", 27),
    PS_IGN("securityContext", 28),
    PS_IGN("setHostnameAsFQDN", 29),
    PS_IGN("shareProcessNamespace", 30),
    PS_IGN("terminationGracePeriodSeconds", 31),
    PS_IGN("tolerations", 32),
    PS_IGN("topologySpreadConstraints", 33),
    PS_IGN("volumes", 34),
    {.name = NULL},
};
#undef PS_IGN
static const struct conf_section pod_spec_section = {pod_spec_keys, 0,
                                                     PS(mark)};
#undef PS

static const struct conf_key pod_ip_keys[] = {
    {.name = "ip",
     .type = CONF_STR,
     .off = RES_OFF(struct res_k8s_pod_ip, ip),
     .help = "an IP address of the Pod"},
    {.name = NULL},
};
static const struct conf_section pod_ip_section = {
    pod_ip_keys, sizeof(struct res_k8s_pod_ip),
    RES_OFF(struct res_k8s_pod_ip, mark)};

#define PT(f)                                                                  \
    (RES_OFF(struct res_k8s_pod, status.f) -                                   \
     RES_OFF(struct res_k8s_pod, status))
#define PT_IGN(key, i)                                                         \
    {                                                                          \
        .name = key, .type = CONF_IGNORE,                                      \
        .off = PT(ignored) + (i) * sizeof(struct conf_mark),                   \
        .help = "accepted and ignored"                                         \
    }
static const struct conf_key pod_status_keys[] = {
    {.name = "phase",
     .type = CONF_STR,
     .off = PT(phase),
     .help = "a Pod Succeeded or Failed is nobody's endpoint by IP (its "
             "address may be reused)"},
    {.name = "podIP",
     .type = CONF_STR,
     .off = PT(pod_ip),
     .help = "the address EndpointSlice endpoints without a targetRef find "
             "the Pod by"},
    {.name = "podIPs",
     .type = CONF_LIST,
     .off = PT(pod_ips),
     .max = 2,
     .help = "the Pod's addresses (dual stack): each finds it as podIP does",
     .sub = &pod_ip_section},
    PT_IGN("conditions", 0),
    PT_IGN("containerStatuses", 1),
    PT_IGN("ephemeralContainerStatuses", 2),
    PT_IGN("hostIP", 3),
    PT_IGN("hostIPs", 4),
    PT_IGN("initContainerStatuses", 5),
    PT_IGN("message", 6),
    PT_IGN("nominatedNodeName", 7),
    PT_IGN("observedGeneration", 8),
    PT_IGN("qosClass", 9),
    PT_IGN("reason", 10),
    PT_IGN("resize", 11),
    PT_IGN("resourceClaimStatuses", 12),
    PT_IGN("startTime", 13),
    {.name = NULL},
};
#undef PT_IGN
static const struct conf_section pod_status_section = {pod_status_keys, 0,
                                                       PT(mark)};
#undef PT

static const struct conf_key pod_keys[] = {
    {.name = "spec",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_k8s_pod, spec),
     .help = "nodeName and serviceAccountName are read",
     .sub = &pod_spec_section},
    {.name = "status",
     .type = CONF_SECTION,
     .off = RES_OFF(struct res_k8s_pod, status),
     .help = "phase, podIP and podIPs are read",
     .sub = &pod_status_section},
    {.name = NULL},
};
static const struct conf_section pod_section = {pod_keys, 0, SIZE_MAX};

static void pod_check(struct res_check *ck, struct resource *r)
{
    const struct res_k8s_pod *p = r->spec;
    char path[64];

    if (p->status.pod_ip != NULL && p->status.pod_ip[0] != '\0' &&
        !is_ip(p->status.pod_ip))
        res_err(ck, &p->status.mark, "status.podIP",
                "'%s' is not an IP address", p->status.pod_ip);
    for (size_t i = 0; i < p->status.pod_ips.n; i++) {
        const struct res_k8s_pod_ip *ip =
            (const struct res_k8s_pod_ip *)p->status.pod_ips.v + i;
        res_path(path, sizeof(path), "status.podIPs[%zu].ip", i);
        if (ip->ip == NULL || !is_ip(ip->ip))
            res_err(ck, &ip->mark, path, "'%s' is not an IP address",
                    ip->ip != NULL ? ip->ip : "");
    }
}

const struct res_kind_ops res_k8s_pod_ops = {
    .kind = "Pod",
    .spec = &pod_section,
    .spec_size = sizeof(struct res_k8s_pod),
    .check = pod_check,
};

const struct res_kind_ext res_k8s_pod_ext = {
    .toplevel = 1,
};

/* ---- kinds -------------------------------------------------------------- */

int res_k8s_kind(const char *api, const char *kind)
{
    if (strcmp(api, "v1") == 0) {
        if (strcmp(kind, "Service") == 0)
            return RES_SERVICE;
        if (strcmp(kind, "Secret") == 0)
            return RES_SECRET;
        if (strcmp(kind, "Namespace") == 0)
            return RES_NAMESPACE;
        if (strcmp(kind, "Node") == 0)
            return RES_NODE;
        if (strcmp(kind, "Pod") == 0)
            return RES_POD;
    } else if (strcmp(api, "discovery.k8s.io/v1") == 0 &&
               strcmp(kind, "EndpointSlice") == 0) {
        return RES_ENDPOINT_SLICE;
    }
    return -1;
}

/* ---- the gateway's own Service ------------------------------------------ */

int res_k8s_own_service(const struct resource *r, const char *ns,
                        const struct conf_strmap *labels, const char *service)
{
    const struct res_k8s_service *svc = r->spec;
    const char *slash;

    if (service != NULL && service[0] != '\0') {
        slash = strchr(service, '/');
        if (slash == NULL)
            return strcmp(r->meta.ns, ns) == 0 &&
                   strcmp(r->meta.name, service) == 0;
        return strlen(r->meta.ns) == (size_t)(slash - service) &&
               strncmp(r->meta.ns, service, (size_t)(slash - service)) == 0 &&
               strcmp(r->meta.name, slash + 1) == 0;
    }
    return labels != NULL && svc->selector.n > 0 &&
           strcmp(r->meta.ns, ns) == 0 &&
           res_labels_match(&svc->selector, labels);
}

int64_t res_k8s_gateway_port(const struct resource_set *set, const char *ns,
                             const struct conf_strmap *labels,
                             const char *service, int64_t port,
                             const struct resource **by)
{
    int64_t best = 0;

    if (by != NULL)
        *by = NULL;
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_k8s_service *svc;
        if (r->kind != RES_SERVICE ||
            !res_k8s_own_service(r, ns != NULL ? ns : "", labels, service))
            continue;
        svc = r->spec;
        for (size_t k = 0; k < svc->ports.n; k++) {
            const struct res_k8s_port *sp =
                (const struct res_k8s_port *)svc->ports.v + k;
            /* A named targetPort is a container port only the Pod's
             * spec resolves; the port is then kept, as for no match. */
            if (sp->port != port || sp->protocol != RES_K8S_TCP ||
                sp->target_port.number <= 0)
                continue;
            /* istiod listens on every targetPort found; strait on the
             * lowest, so one Gateway server is one listener. */
            if (best == 0 || sp->target_port.number < best) {
                best = sp->target_port.number;
                if (by != NULL)
                    *by = r;
            }
        }
    }
    return best != 0 ? best : port;
}

/* ---- the registry entry of a Service ------------------------------------ */

int res_k8s_port_protocol(const struct res_k8s_port *p)
{
    const char *name = p->app_protocol != NULL && p->app_protocol[0] != '\0'
                           ? p->app_protocol
                           : (p->name != NULL ? p->name : "");
    const char *dash;
    size_t n;
    int64_t v;
    const char *why;

    /* Istio's kube.ConvertProtocol: UDP is UDP; then appProtocol, else
     * the port name, with Kubernetes' own appProtocol names; "grpc-web"
     * before the part ahead of the first '-'; anything else is sniffed by
     * Istio, which strait cannot do: TCP, relayed as routed. */
    if (p->protocol == RES_K8S_UDP)
        return RES_PROTO_UDP;
    if (strcmp(name, "kubernetes.io/h2c") == 0)
        return RES_PROTO_HTTP2;
    if (strcmp(name, "kubernetes.io/ws") == 0)
        return RES_PROTO_HTTP;
    if (strcmp(name, "kubernetes.io/wss") == 0)
        return RES_PROTO_HTTPS;
    if (strncasecmp(name, "grpc-web", 8) == 0)
        return RES_PROTO_GRPC_WEB;
    dash = strchr(name, '-');
    n = dash != NULL ? (size_t)(dash - name) : strlen(name);
    if (n == 10 && strncasecmp(name, "http_proxy", 10) == 0)
        return RES_PROTO_HTTP;
    if (n > 0 && res_parse_protocol(name, n, &v, &why) == 0 &&
        v != RES_PROTO_HBONE)
        return (int)v;
    return RES_PROTO_TCP;
}

static int strs_push(struct conf_strs *s, const char *v)
{
    char **nv = realloc(s->v, (s->n + 1) * sizeof(*nv));

    if (nv == NULL)
        return -1;
    s->v = nv;
    if ((s->v[s->n] = strdup(v)) == NULL)
        return -1;
    s->n++;
    return 0;
}

/* The port a slice gives for the Service port named name ("" unnamed):
 * 0 when the slice has none, which leaves its endpoints out of that port
 * (eps_add() skips port 0), as Istio builds no endpoint for it. */
static int64_t slice_port_for(const struct res_k8s_endpoint_slice *sl,
                              const struct res_k8s_port *sp)
{
    const char *name = sp->name != NULL ? sp->name : "";

    for (size_t i = 0; i < sl->ports.n; i++) {
        const struct res_k8s_slice_port *p =
            (const struct res_k8s_slice_port *)sl->ports.v + i;
        if (strcmp(p->name != NULL ? p->name : "", name) == 0 &&
            p->protocol == sp->protocol)
            return p->port;
    }
    return 0;
}

/* The network an EndpointSlice's endpoints are on: its own
 * topology.istio.io/network label, else its Service's; NULL: neither says
 * (compile then asks meshNetworks, else the node's network). */
static const char *k8s_network(const struct resource *svc_r,
                               const struct resource *sl_r)
{
    const struct conf_strmap *m[2] = {sl_r ? &sl_r->meta.labels : NULL,
                                      &svc_r->meta.labels};

    for (int k = 0; k < 2; k++)
        for (size_t i = 0; m[k] != NULL && i < m[k]->n; i++)
            if (strcmp(m[k]->v[i].key, RES_NETWORK_LABEL) == 0 &&
                m[k]->v[i].val[0] != '\0')
                return m[k]->v[i].val;
    return NULL;
}

/* The Nodes of a set by name (res_k8s_link() makes it once per load, so
 * an endpoint's Node is a binary search, not a scan of the set). */
struct node_index {
    const struct resource **v;
    size_t n;
};

static int node_cmp(const void *a, const void *b)
{
    const struct resource *const *x = a, *const *y = b;

    return strcmp((*x)->meta.name, (*y)->meta.name);
}

static const struct resource *node_find(const struct node_index *ix,
                                        const char *name)
{
    size_t lo = 0, hi = ix->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, ix->v[mid]->meta.name);
        if (c == 0)
            return ix->v[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* The Pods of a set by namespace/name (targetRef) and by IP (an endpoint
 * without one), both sorted once per load. */
struct pod_ref {
    const char *key; /* "ns/name" or an IP; owned by the index */
    const struct resource *pod;
};

struct pod_index {
    struct pod_ref *by_name, *by_ip;
    size_t nname, nip;
};

static int pod_ref_cmp(const void *a, const void *b)
{
    const struct pod_ref *x = a, *y = b;

    return strcmp(x->key, y->key);
}

static const struct resource *pod_find(const struct pod_ref *v, size_t n,
                                       const char *key)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(key, v[mid].key);
        if (c == 0)
            return v[mid].pod;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

static void pod_index_dispose(struct pod_index *ix)
{
    for (size_t i = 0; i < ix->nname; i++)
        free((char *)ix->by_name[i].key);
    free(ix->by_name);
    free(ix->by_ip);
    memset(ix, 0, sizeof(*ix));
}

/* A Pod in a terminal phase keeps its IP in its status, but Kubernetes
 * may have given that IP to another Pod: as istiod, such a Pod is found
 * by name only. A Pod on the host network shares its Node's IP. */
static int pod_by_ip_ok(const struct res_k8s_pod *p)
{
    return !p->spec.host_network &&
           (p->status.phase == NULL ||
            (strcmp(p->status.phase, "Succeeded") != 0 &&
             strcmp(p->status.phase, "Failed") != 0));
}

static int pod_index_build(const struct resource_set *set, struct pod_index *ix)
{
    size_t n = 0, nip = 0;

    memset(ix, 0, sizeof(*ix));
    for (size_t i = 0; i < set->n; i++) {
        const struct res_k8s_pod *p;
        if (set->v[i]->kind != RES_POD)
            continue;
        p = set->v[i]->spec;
        n++;
        nip += 1 + p->status.pod_ips.n;
    }
    if (n == 0)
        return 0;
    ix->by_name = calloc(n, sizeof(*ix->by_name));
    ix->by_ip = calloc(nip, sizeof(*ix->by_ip));
    if (ix->by_name == NULL || ix->by_ip == NULL)
        goto fail;
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_k8s_pod *p;
        char *key;
        if (r->kind != RES_POD)
            continue;
        p = r->spec;
        if (asprintf(&key, "%s/%s", r->meta.ns, r->meta.name) < 0)
            goto fail;
        ix->by_name[ix->nname].key = key;
        ix->by_name[ix->nname++].pod = r;
        if (!pod_by_ip_ok(p))
            continue;
        if (p->status.pod_ip != NULL && p->status.pod_ip[0] != '\0') {
            ix->by_ip[ix->nip].key = p->status.pod_ip;
            ix->by_ip[ix->nip++].pod = r;
        }
        for (size_t j = 0; j < p->status.pod_ips.n; j++) {
            const struct res_k8s_pod_ip *ip =
                (const struct res_k8s_pod_ip *)p->status.pod_ips.v + j;
            if (ip->ip == NULL || (p->status.pod_ip != NULL &&
                                   strcmp(ip->ip, p->status.pod_ip) == 0))
                continue;
            ix->by_ip[ix->nip].key = ip->ip;
            ix->by_ip[ix->nip++].pod = r;
        }
    }
    qsort(ix->by_name, ix->nname, sizeof(*ix->by_name), pod_ref_cmp);
    qsort(ix->by_ip, ix->nip, sizeof(*ix->by_ip), pod_ref_cmp);
    return 0;
fail:
    pod_index_dispose(ix);
    return -1;
}

/*
 * endpoint_pod() is the Pod behind ep, an endpoint of an EndpointSlice
 * in namespace ns, as istiod finds it: the Pod its targetRef names (kind
 * Pod), else the Pod whose IP is the endpoint's first address. NULL: no
 * such Pod is known (the endpoint then has no labels, as before Pods were
 * read).
 */
static const struct resource *endpoint_pod(const struct pod_index *ix,
                                           const char *ns,
                                           const struct res_k8s_endpoint *ep)
{
    const struct resource *pod = NULL;

    if (ix->nname == 0)
        return NULL;
    if (ep->target_ref.kind != NULL &&
        strcmp(ep->target_ref.kind, "Pod") == 0 &&
        ep->target_ref.name != NULL) {
        char key[512];
        const char *tns =
            ep->target_ref.ns != NULL && ep->target_ref.ns[0] != '\0'
                ? ep->target_ref.ns
                : ns;
        snprintf(key, sizeof(key), "%s/%s", tns, ep->target_ref.name);
        pod = pod_find(ix->by_name, ix->nname, key);
    }
    if (pod == NULL && ep->addresses.n > 0)
        pod = pod_find(ix->by_ip, ix->nip, ep->addresses.v[0]);
    return pod;
}

static const char *label_of(const struct conf_strmap *m, const char *key,
                            const char *legacy)
{
    for (int k = 0; k < 2; k++) {
        const char *want = k == 0 ? key : legacy;
        for (size_t i = 0; want != NULL && i < m->n; i++)
            if (strcmp(m->v[i].key, want) == 0 && m->v[i].val[0] != '\0')
                return m->v[i].val;
    }
    return "";
}

/*
 * slice_locality() writes the locality of ep into out ("" when nothing
 * says it), as istiod's getPodLocality() takes it from the pod's Node:
 * its labels topology.kubernetes.io/region and zone (the older
 * failure-domain.beta.kubernetes.io ones when those are missing) and
 * topology.istio.io/subzone. The Pod's istio-locality label comes first;
 * the Node is the Pod's spec.nodeName, else the endpoint's nodeName;
 * without such a Node (or one without those
 * labels) the endpoint's own zone, which the EndpointSlice controller
 * copies from the Node's zone label, is the zone of an unknown region:
 * "/ZONE". Trailing empty parts are left out ("r/z", not "r/z/").
 */
static void slice_locality(const struct node_index *nodes,
                           const struct res_k8s_endpoint *ep,
                           const struct resource *pod, char *out, size_t n)
{
    const struct res_k8s_pod *ps = pod != NULL ? pod->spec : NULL;
    const char *node_name =
        ps != NULL && ps->spec.node_name != NULL && ps->spec.node_name[0]
            ? ps->spec.node_name
            : ep->node_name;
    const struct resource *node = node_name != NULL && node_name[0] != '\0'
                                      ? node_find(nodes, node_name)
                                      : NULL;
    const char *r = "", *z = "", *s = "";

    out[0] = '\0';
    /* istiod's getPodLocality(): the Pod's istio-locality label first,
     * written with '.' for '/' (a label value cannot hold '/'). */
    if (pod != NULL) {
        const char *l = label_of(&pod->meta.labels, "istio-locality", NULL);
        if (l[0] != '\0') {
            snprintf(out, n, "%s", l);
            for (char *c = out; *c != '\0'; c++)
                if (*c == '.')
                    *c = '/';
            return;
        }
    }
    if (node != NULL) {
        r = label_of(&node->meta.labels, "topology.kubernetes.io/region",
                     "failure-domain.beta.kubernetes.io/region");
        z = label_of(&node->meta.labels, "topology.kubernetes.io/zone",
                     "failure-domain.beta.kubernetes.io/zone");
        s = label_of(&node->meta.labels, "topology.istio.io/subzone", NULL);
    }
    if (r[0] == '\0' && z[0] == '\0' && s[0] == '\0') {
        if (ep->zone != NULL && ep->zone[0] != '\0')
            snprintf(out, n, "/%s", ep->zone);
        return;
    }
    if (s[0] != '\0')
        snprintf(out, n, "%s/%s/%s", r, z, s);
    else if (z[0] != '\0')
        snprintf(out, n, "%s/%s", r, z);
    else
        snprintf(out, n, "%s", r);
}

/* pod_labels() gives we the labels of pod (copied), its service account
 * and, when the Pod is labelled topology.istio.io/network, its network,
 * which istiod takes before any other. */
static int pod_labels(struct res_workload_entry *we, const struct resource *pod)
{
    const struct res_k8s_pod *p = pod->spec;
    const struct conf_strmap *m = &pod->meta.labels;
    const char *sa = p->spec.service_account_name != NULL &&
                             p->spec.service_account_name[0] != '\0'
                         ? p->spec.service_account_name
                         : p->spec.service_account;
    const char *net = label_of(m, RES_NETWORK_LABEL, NULL);

    if (m->n > 0) {
        we->labels.v = calloc(m->n, sizeof(*we->labels.v));
        if (we->labels.v == NULL)
            return -1;
        for (size_t i = 0; i < m->n; i++) {
            struct conf_strpair *kv = &we->labels.v[we->labels.n];
            kv->key = strdup(m->v[i].key);
            kv->val = strdup(m->v[i].val);
            we->labels.n++;
            if (kv->key == NULL || kv->val == NULL)
                return -1;
        }
    }
    if (sa != NULL && sa[0] != '\0' &&
        (we->service_account = strdup(sa)) == NULL)
        return -1;
    if (net[0] != '\0') {
        free(we->network);
        if ((we->network = strdup(net)) == NULL)
            return -1;
    }
    return 0;
}

static int add_slice_endpoints(struct res_service_entry *se,
                               const struct res_k8s_service *svc,
                               const struct resource *sl_r, const char *network,
                               const struct node_index *nodes,
                               const struct pod_index *pods)
{
    const struct res_k8s_endpoint_slice *sl = sl_r->spec;

    for (size_t i = 0; i < sl->endpoints.n; i++) {
        const struct res_k8s_endpoint *ep =
            (const struct res_k8s_endpoint *)sl->endpoints.v + i;
        const struct resource *pod;
        struct res_workload_entry *we, *nv;
        char loc[3 * 64 + 4]; /* three label values and the slashes */

        if (ep->addresses.n == 0 || !res_k8s_endpoint_used(svc, ep))
            continue;
        pod = endpoint_pod(pods, sl_r->meta.ns, ep);
        nv = realloc(se->endpoints.v, (se->endpoints.n + 1) * sizeof(*nv));
        if (nv == NULL)
            return -1;
        se->endpoints.v = nv;
        we = &nv[se->endpoints.n++];
        memset(we, 0, sizeof(*we));
        we->mark = ep->mark;
        /* Istio uses an endpoint's first address. */
        if ((we->address = strdup(ep->addresses.v[0])) == NULL)
            return -1;
        if (network != NULL && (we->network = strdup(network)) == NULL)
            return -1;
        if (pod != NULL && pod_labels(we, pod) < 0)
            return -1;
        slice_locality(nodes, ep, pod, loc, sizeof(loc));
        if (loc[0] != '\0' && (we->locality = strdup(loc)) == NULL)
            return -1;
        if (svc->ports.n > 0) {
            we->ports.v = calloc(svc->ports.n, sizeof(*we->ports.v));
            if (we->ports.v == NULL)
                return -1;
        }
        for (size_t k = 0; k < svc->ports.n; k++) {
            const struct res_k8s_port *sp =
                (const struct res_k8s_port *)svc->ports.v + k;
            struct conf_intpair *pp = &we->ports.v[we->ports.n];
            if ((pp->key = strdup(sp->name ? sp->name : "")) == NULL)
                return -1;
            pp->val = slice_port_for(sl, sp);
            we->ports.n++;
        }
    }
    return 0;
}

static struct res_service_entry *build_entry(const struct resource_set *set,
                                             const struct resource *r,
                                             const struct node_index *nodes,
                                             const struct pod_index *pods)
{
    const struct res_k8s_service *svc = r->spec;
    struct res_service_entry *se = calloc(1, sizeof(*se));
    char host[600];

    if (se == NULL)
        return NULL;
    conf_defaults(res_service_entry_ops.spec, se);
    se->location = RES_MESH_INTERNAL;
    se->resolution = svc->type == RES_K8S_EXTERNAL_NAME ? RES_RESOLVE_DNS
                                                        : RES_RESOLVE_STATIC;
    snprintf(host, sizeof(host), "%s.%s.svc.%s", r->meta.name, r->meta.ns,
             set->domain);
    if (strs_push(&se->hosts, host) < 0)
        goto fail;
    /* Istio reads a Service's exportTo from this annotation: namespaces
     * (".", "*", "~" or names) separated by commas. */
    for (size_t i = 0; i < r->meta.annotations.n; i++) {
        const char *p = r->meta.annotations.v[i].val;
        if (strcmp(r->meta.annotations.v[i].key,
                   "networking.istio.io/exportTo") != 0)
            continue;
        while (*p != '\0') {
            char part[254];
            size_t n = strcspn(p, ","), b = 0, e = n;
            while (b < e && (p[b] == ' ' || p[b] == '\t'))
                b++;
            while (e > b && (p[e - 1] == ' ' || p[e - 1] == '\t'))
                e--;
            if (e > b && e - b < sizeof(part)) {
                memcpy(part, p + b, e - b);
                part[e - b] = '\0';
                if (strs_push(&se->export_to, part) < 0)
                    goto fail;
            }
            p += n + (p[n] == ',');
        }
    }
    if (svc->ports.n > 0 &&
        (se->ports.v = calloc(svc->ports.n, sizeof(struct res_se_port))) ==
            NULL)
        goto fail;
    for (size_t i = 0; i < svc->ports.n; i++) {
        const struct res_k8s_port *sp =
            (const struct res_k8s_port *)svc->ports.v + i;
        struct res_se_port *p = (struct res_se_port *)se->ports.v + i;
        p->mark = sp->mark;
        p->number = sp->port;
        p->protocol = res_k8s_port_protocol(sp);
        p->target_port = sp->target_port.number;
        if ((p->name = strdup(sp->name ? sp->name : "")) == NULL)
            goto fail;
        se->ports.n++;
    }
    if (svc->type == RES_K8S_EXTERNAL_NAME) {
        struct res_workload_entry *we = calloc(1, sizeof(*we));
        if (we == NULL || (we->address = strdup(svc->external_name)) == NULL) {
            free(we);
            goto fail;
        }
        se->endpoints.v = we;
        se->endpoints.n = 1;
        return se;
    }
    /* The selector also picks WorkloadEntries of the namespace, as
     * istiod adds them to a Kubernetes Service's endpoints. */
    for (size_t i = 0; i < svc->selector.n; i++) {
        struct conf_strpair *nv =
            realloc(se->workload_selector.labels.v,
                    (i + 1) * sizeof(*se->workload_selector.labels.v));
        if (nv == NULL)
            goto fail;
        se->workload_selector.labels.v = nv;
        nv[i].key = strdup(svc->selector.v[i].key);
        nv[i].val = strdup(svc->selector.v[i].val);
        se->workload_selector.labels.n++;
        if (nv[i].key == NULL || nv[i].val == NULL)
            goto fail;
        se->workload_selector.mark.line = r->line;
        se->workload_selector.mark.col = r->col;
    }
    for (size_t i = 0; i < set->n; i++) {
        const struct resource *o = set->v[i];
        const struct res_k8s_endpoint_slice *sl;
        const char *owner;
        if (o->kind != RES_ENDPOINT_SLICE || strcmp(o->meta.ns, r->meta.ns) ||
            (owner = res_k8s_slice_service(o)) == NULL ||
            strcmp(owner, r->meta.name) != 0)
            continue;
        sl = o->spec;
        if (sl->address_type == RES_K8S_FQDN)
            continue;
        if (add_slice_endpoints(se, svc, o, k8s_network(r, o), nodes, pods) < 0)
            goto fail;
    }
    return se;
fail:
    conf_dispose(res_service_entry_ops.spec, se);
    free(se);
    return NULL;
}

int res_k8s_link(struct resource_set *set)
{
    struct node_index nodes = {NULL, 0};
    struct pod_index pods;
    int rc = 0;

    if (pod_index_build(set, &pods) < 0)
        return -1;

    for (size_t i = 0; i < set->n; i++)
        nodes.n += set->v[i]->kind == RES_NODE;
    if (nodes.n > 0) {
        nodes.v = calloc(nodes.n, sizeof(*nodes.v));
        if (nodes.v == NULL) {
            pod_index_dispose(&pods);
            return -1;
        }
        nodes.n = 0;
        for (size_t i = 0; i < set->n; i++)
            if (set->v[i]->kind == RES_NODE)
                nodes.v[nodes.n++] = set->v[i];
        qsort(nodes.v, nodes.n, sizeof(*nodes.v), node_cmp);
    }
    for (size_t i = 0; i < set->n; i++) {
        struct resource *r = set->v[i];
        struct res_k8s_service *svc;
        if (r->kind != RES_SERVICE)
            continue;
        svc = r->spec;
        svc_dispose(svc);
        if ((svc->entry = build_entry(set, r, &nodes, &pods)) == NULL)
            rc = -1;
    }
    free(nodes.v);
    pod_index_dispose(&pods);
    return rc;
}

/* ---- reference ---------------------------------------------------------- */

/* prefixed() appends sec's reference lines to b, each path after
 * prefix. */
static void prefixed(struct buf *b, const char *prefix,
                     const struct conf_section *sec)
{
    struct buf tmp;
    const char *p;

    buf_init(&tmp, 1024 * 1024);
    conf_reference(sec, &tmp);
    p = buf_cstr(&tmp);
    while (*p != '\0') {
        const char *eol = strchr(p, '\n');
        size_t n = eol != NULL ? (size_t)(eol - p) : strlen(p);
        buf_printf(b, "%s%.*s\n", prefix, (int)n, p);
        p += n + (eol != NULL);
    }
    buf_dispose(&tmp);
}

void res_k8s_reference(struct buf *b)
{
    buf_puts(b, "Service\tkind\t\tv1: a registry entry NAME.NAMESPACE.svc."
                "cluster.local (resolution STATIC; ExternalName: DNS)\n");
    prefixed(b, "Service.spec.", &svc_section);
    buf_puts(b, "EndpointSlice\tkind\t\tdiscovery.k8s.io/v1: the endpoints of "
                "the Service its label kubernetes.io/service-name names\n");
    prefixed(b, "EndpointSlice.", &slice_section);
    buf_puts(b, "Secret\tkind\t\tv1: a Gateway credentialName in its "
                "namespace (types kubernetes.io/tls and Opaque; keys tls.crt, "
                "tls.key, ca.crt, ca.crl or cert, key, cacert, crl)\n");
    prefixed(b, "Secret.", &secret_section);
    buf_puts(b, "Namespace\tkind\t\tv1: kept with its labels (shown on "
                "/config_dump)\n");
    prefixed(b, "Namespace.spec.", &ns_section);
    buf_puts(b, "Node\tkind\t\tv1: its labels topology.kubernetes.io/region, "
                "/zone and topology.istio.io/subzone are the locality of the "
                "EndpointSlice endpoints whose nodeName it is\n");
    prefixed(b, "Node.spec.", &node_section);
    buf_puts(b, "Pod\tkind\t\tv1: the EndpointSlice endpoints that are it "
                "(targetRef, else podIP) get its labels (DestinationRule "
                "subsets), service account, istio-locality label or Node "
                "locality, and topology.istio.io/network label\n");
    prefixed(b, "Pod.", &pod_section);
    buf_puts(b, "*\tkind\t\tany other Kubernetes kind (Deployment, "
                "ConfigMap, webhooks, CRDs, ...): ignored with an Info\n");
}
