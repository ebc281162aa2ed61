/*
 * ServiceEntry and WorkloadEntry: the services and endpoints strait knows
 * without Kubernetes. A ServiceEntry's endpoints are WorkloadEntry specs,
 * so both kinds share the endpoint table and check.
 */
#include "config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/res-kinds.h"
#include "config/resource.h"

static const char *const locations[] = {"MESH_EXTERNAL", "MESH_INTERNAL", NULL};
static const char *const resolutions[] = {"NONE", "STATIC", "DNS",
                                          "DNS_ROUND_ROBIN", NULL};

#define WE(f) RES_OFF(struct res_workload_entry, f)
/* A ServiceEntry port's protocol; "" is accepted as Istio accepts it
 * (its sidecars sniff the protocol) and means what an omitted protocol
 * means to strait: TCP, the upstream spoken to as routed (HTTP/1.1 for
 * http routes). */
static int se_parse_protocol(const char *s, size_t n, void *dst,
                             const char **why)
{
    if (n == 0) {
        int64_t v = RES_PROTO_TCP;
        memcpy(dst, &v, sizeof(v));
        return 0;
    }
    return res_parse_protocol(s, n, dst, why);
}

static const struct conf_key we_keys[] = {
    {.name = "address",
     .type = CONF_STR,
     .off = WE(address),
     .help = "IP, host name or unix:///path"},
    {.name = "ports",
     .type = CONF_INT_MAP,
     .off = WE(ports),
     .min = 1,
     .max = 65535,
     .help = "service port name to the workload's port"},
    {.name = "labels",
     .type = CONF_STR_MAP,
     .off = WE(labels),
     .help = "labels, matched by subsets and selectors"},
    {.name = "network",
     .type = CONF_STR,
     .off = WE(network),
     .help = "network the workload is on"},
    {.name = "locality",
     .type = CONF_STR,
     .off = WE(locality),
     .help = "region/zone/subzone"},
    {.name = "weight",
     .type = CONF_INT,
     .off = WE(weight),
     .min = 0,
     .max = UINT32_MAX,
     .help = "load balancing weight (0: 1)"},
    {.name = "serviceAccount",
     .type = CONF_STR,
     .off = WE(service_account),
     .help = "identity of the workload"},
    {.name = NULL},
};
#undef WE
const struct conf_section res_workload_entry_section = {
    we_keys, sizeof(struct res_workload_entry),
    RES_OFF(struct res_workload_entry, mark)};

#define SP(f) RES_OFF(struct res_se_port, f)
static const struct conf_key se_port_keys[] = {
    {.name = "number",
     .type = CONF_INT,
     .off = SP(number),
     .min = 1,
     .max = 65535,
     .help = "port (required)"},
    {.name = "protocol",
     .type = CONF_CUSTOM,
     .off = SP(protocol),
     .def = "TCP",
     .help = "HTTP, HTTPS, HTTP2, GRPC, TLS, TCP, ...",
     .custom = se_parse_protocol,
     .custom_json = res_protocol_json},
    {.name = "name", .type = CONF_STR, .off = SP(name), .help = "port name"},
    {.name = "targetPort",
     .type = CONF_INT,
     .off = SP(target_port),
     .min = 1,
     .max = 65535,
     .help = "port on the endpoints"},
    {.name = NULL},
};
#undef SP
static const struct conf_section se_port_section = {
    se_port_keys, sizeof(struct res_se_port),
    RES_OFF(struct res_se_port, mark)};

static const struct conf_key se_selector_keys[] = {
    {.name = "labels",
     .type = CONF_STR_MAP,
     .off = RES_OFF(struct res_service_entry, workload_selector.labels) -
            RES_OFF(struct res_service_entry, workload_selector),
     .help = "labels of the WorkloadEntries"},
    {.name = NULL},
};
static const struct conf_section se_selector_section = {se_selector_keys, 0, 0};

#define SE(f) RES_OFF(struct res_service_entry, f)
static const struct conf_key se_keys[] = {
    {.name = "hosts",
     .type = CONF_STR_LIST,
     .off = SE(hosts),
     .max = 10000,
     .help = "host names (required)"},
    {.name = "addresses",
     .type = CONF_STR_LIST,
     .off = SE(addresses),
     .max = 10000,
     .help = "virtual IPs or CIDRs"},
    {.name = "ports",
     .type = CONF_LIST,
     .off = SE(ports),
     .max = 65535,
     .help = "ports",
     .sub = &se_port_section},
    {.name = "location",
     .type = CONF_ENUM,
     .off = SE(location),
     .def = "MESH_EXTERNAL",
     .help = "MESH_EXTERNAL or MESH_INTERNAL",
     .enums = locations},
    {.name = "resolution",
     .type = CONF_ENUM,
     .off = SE(resolution),
     .def = "NONE",
     .help = "NONE, STATIC, DNS or DNS_ROUND_ROBIN",
     .enums = resolutions},
    {.name = "endpoints",
     .type = CONF_LIST,
     .off = SE(endpoints),
     .max = 100000,
     .help = "endpoints (WorkloadEntry specs)",
     .sub = &res_workload_entry_section},
    {.name = "workloadSelector",
     .type = CONF_SECTION,
     .off = SE(workload_selector),
     .help = "WorkloadEntries that are the endpoints",
     .sub = &se_selector_section},
    {.name = "exportTo",
     .type = CONF_STR_LIST,
     .off = SE(export_to),
     .max = 1000,
     .help = "namespaces this is visible to"},
    {.name = "subjectAltNames",
     .type = CONF_STR_LIST,
     .off = SE(subject_alt_names),
     .max = 1000,
     .help = "SANs the endpoints present"},
    {.name = NULL},
};
#undef SE
static const struct conf_section se_section = {se_keys, 0, SIZE_MAX};

static int is_ip(const char *s)
{
    unsigned char tmp[16];

    return inet_pton(AF_INET, s, tmp) == 1 || inet_pton(AF_INET6, s, tmp) == 1;
}

void res_check_workload_entry(struct res_check *ck,
                              const struct res_workload_entry *we,
                              const char *path)
{
    char p[300];

    if (we->address == NULL || we->address[0] == '\0') {
        /* Istio allows an endpoint without an address only behind a
         * network's gateway. */
        if (we->network == NULL)
            res_err(ck, &we->mark, path,
                    "missing key 'address' (or a network to reach it by)");
    } else if (strncmp(we->address, "unix://", 7) == 0) {
        if (we->address[7] != '/')
            res_err(ck, &we->mark, path,
                    "address '%s': a unix address is unix:///absolute/path",
                    we->address);
        else if (we->ports.n > 0)
            res_err(ck, &we->mark, path, "a unix address takes no ports");
    } else if (!is_ip(we->address)) {
        res_path(p, sizeof(p), "%s.address", path);
        res_check_host(ck, &we->mark, p, we->address, 0);
    }
    for (size_t i = 0; i < we->labels.n; i++)
        if (we->labels.v[i].key[0] == '\0')
            res_err(ck, &we->mark, path, "empty label name");
}

static void se_check(struct res_check *ck, struct resource *r)
{
    struct res_service_entry *se = r->spec;
    char p[128];

    if (se->hosts.n == 0)
        res_err(ck, NULL, "spec.hosts",
                "a ServiceEntry needs at least one "
                "host");
    for (size_t i = 0; i < se->hosts.n; i++) {
        res_path(p, sizeof(p), "spec.hosts[%zu]", i);
        if (strcmp(se->hosts.v[i], "*") == 0)
            res_err(ck, NULL, p, "host '*' is not allowed in a ServiceEntry");
        else
            res_check_host(ck, NULL, p, se->hosts.v[i], RES_HOST_WILDCARD);
        if (se->hosts.v[i][0] == '*' &&
            (se->resolution == RES_RESOLVE_DNS ||
             se->resolution == RES_RESOLVE_DNS_ROUND_ROBIN) &&
            se->endpoints.n == 0)
            res_err(ck, NULL, p,
                    "a wildcard host cannot be resolved by DNS without "
                    "endpoints");
    }
    for (size_t i = 0; i < se->ports.n; i++) {
        const struct res_se_port *sp =
            (const struct res_se_port *)se->ports.v + i;
        res_path(p, sizeof(p), "spec.ports[%zu]", i);
        if (sp->number == 0)
            res_err(ck, &sp->mark, p, "missing key 'number'");
        for (size_t j = 0; j < i; j++) {
            const struct res_se_port *o =
                (const struct res_se_port *)se->ports.v + j;
            if (o->number == sp->number && sp->number != 0)
                res_err(ck, &sp->mark, p, "port %lld is also ports[%zu]",
                        (long long)sp->number, j);
            else if (o->name != NULL && sp->name != NULL &&
                     strcmp(o->name, sp->name) == 0)
                res_err(ck, &sp->mark, p,
                        "port name '%s' is also used by ports[%zu]", sp->name,
                        j);
        }
    }
    if (se->endpoints.n > 0 && se->workload_selector.mark.line > 0)
        res_err(ck, NULL, "spec",
                "a ServiceEntry takes endpoints or workloadSelector, not both");
    if (se->resolution == RES_RESOLVE_NONE && se->endpoints.n > 0)
        res_err(ck, NULL, "spec.endpoints",
                "resolution NONE takes no endpoints (use STATIC or DNS)");
    /* Istio accepts it (since 1.10): the service exists with no
     * endpoints. A MeshLink's entry for a remote service scaled to zero
     * is one, and must not hold back the rest of the configuration. */
    if (se->resolution == RES_RESOLVE_STATIC && se->endpoints.n == 0 &&
        se->workload_selector.mark.line == 0)
        res_warn(ck, NULL, "spec",
                 "resolution STATIC with no endpoints and no "
                 "workloadSelector: the service has no endpoints, and "
                 "requests to it are answered 503");
    for (size_t i = 0; i < se->endpoints.n; i++) {
        const struct res_workload_entry *we =
            (const struct res_workload_entry *)se->endpoints.v + i;
        res_path(p, sizeof(p), "spec.endpoints[%zu]", i);
        res_check_workload_entry(ck, we, p);
        if (se->resolution == RES_RESOLVE_STATIC && we->address != NULL &&
            !is_ip(we->address) && strncmp(we->address, "unix://", 7) != 0)
            res_err(ck, &we->mark, p,
                    "resolution STATIC needs IP addresses, not '%s'",
                    we->address);
        for (size_t j = 0; j < we->ports.n; j++) {
            size_t k;
            for (k = 0; k < se->ports.n; k++) {
                const struct res_se_port *sp =
                    (const struct res_se_port *)se->ports.v + k;
                if (sp->name != NULL &&
                    strcmp(sp->name, we->ports.v[j].key) == 0)
                    break;
            }
            if (k == se->ports.n)
                res_err(ck, &we->mark, p,
                        "port name '%s' is not one of the service's ports",
                        we->ports.v[j].key);
        }
    }
}

static void we_check(struct res_check *ck, struct resource *r)
{
    res_check_workload_entry(ck, r->spec, "spec");
}

const struct res_kind_ops res_service_entry_ops = {
    "ServiceEntry", &se_section, sizeof(struct res_service_entry), se_check};

static const struct conf_section we_spec_section = {we_keys, 0, SIZE_MAX};

const struct res_kind_ops res_workload_entry_ops = {
    "WorkloadEntry", &we_spec_section, sizeof(struct res_workload_entry),
    we_check};
