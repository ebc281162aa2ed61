/*
 * Gateway: the schema of networking.istio.io Gateway and the checks Istio's
 * validation makes on it (ports, server hosts with their namespace
 * prefix, TLS settings that fit the port's protocol).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/res-kinds.h"
#include "config/resource.h"
#include "tls/tls.h"

static const char *const server_tls_modes[] = {
    "PASSTHROUGH",  "SIMPLE",          "MUTUAL", "AUTO_PASSTHROUGH",
    "ISTIO_MUTUAL", "OPTIONAL_MUTUAL", NULL,
};

static const char *const tls_versions[] = {"TLS_AUTO", "TLSV1_0", "TLSV1_1",
                                           "TLSV1_2",  "TLSV1_3", NULL};

#define P(f) RES_OFF(struct res_gw_port, f)
static const struct conf_key port_keys[] = {
    {.name = "number",
     .type = CONF_INT,
     .off = P(number),
     .min = 1,
     .max = 65535,
     .help = "port number (required)"},
    {.name = "name", .type = CONF_STR, .off = P(name), .help = "port name"},
    {.name = "protocol",
     .type = CONF_CUSTOM,
     .off = P(protocol),
     .def = "TCP",
     .help = "HTTP, HTTPS, HTTP2, GRPC, TLS, TCP, ...",
     .custom = res_parse_protocol,
     .custom_json = res_protocol_json},
    {.name = "targetPort",
     .type = CONF_INT,
     .off = P(target_port),
     .min = 1,
     .max = 65535,
     .help = "port the workload listens on"},
    {.name = NULL},
};
#undef P
static const struct conf_section port_section = {
    port_keys, 0, RES_OFF(struct res_gw_port, mark)};

#define T(f) RES_OFF(struct res_gw_tls, f)
static const struct conf_key tls_keys[] = {
    {.name = "httpsRedirect",
     .type = CONF_BOOL,
     .off = T(https_redirect),
     .def = "false",
     .help = "answer plain HTTP with a 301 to https"},
    {.name = "mode",
     .type = CONF_ENUM,
     .off = T(mode),
     .def = "PASSTHROUGH",
     .help = "TLS mode",
     .enums = server_tls_modes},
    {.name = "serverCertificate",
     .type = CONF_STR,
     .off = T(server_certificate),
     .help = "certificate file"},
    {.name = "privateKey",
     .type = CONF_STR,
     .off = T(private_key),
     .help = "private key file"},
    {.name = "caCertificates",
     .type = CONF_STR,
     .off = T(ca_certificates),
     .help = "CA bundle for client certificates"},
    {.name = "caCrl", .type = CONF_STR, .off = T(ca_crl), .help = "CRL file"},
    {.name = "credentialName",
     .type = CONF_STR,
     .off = T(credential_name),
     .help = "credential in the credentials directory"},
    {.name = "credentialNames",
     .type = CONF_STR_LIST,
     .off = T(credential_names),
     .max = 2,
     .help = "up to two credentials (RSA and ECDSA)"},
    {.name = "subjectAltNames",
     .type = CONF_STR_LIST,
     .off = T(subject_alt_names),
     .max = 1000,
     .help = "client certificate SANs accepted"},
    {.name = "verifyCertificateSpki",
     .type = CONF_STR_LIST,
     .off = T(verify_certificate_spki),
     .max = 1000,
     .help = "accepted SPKI hashes"},
    {.name = "verifyCertificateHash",
     .type = CONF_STR_LIST,
     .off = T(verify_certificate_hash),
     .max = 1000,
     .help = "accepted certificate hashes"},
    {.name = "minProtocolVersion",
     .type = CONF_ENUM,
     .off = T(min_protocol_version),
     .def = "TLS_AUTO",
     .help = "lowest TLS version",
     .enums = tls_versions},
    {.name = "maxProtocolVersion",
     .type = CONF_ENUM,
     .off = T(max_protocol_version),
     .def = "TLS_AUTO",
     .help = "highest TLS version",
     .enums = tls_versions},
    {.name = "cipherSuites",
     .type = CONF_STR_LIST,
     .off = T(cipher_suites),
     .max = 1000,
     .help = "cipher suites, in order of preference"},
    {.name = "(credentials)",
     .type = CONF_ONEOF,
     .enums = (const char *const[]){"credentialName", "credentialNames",
                                    "serverCertificate", NULL}},
    {.name = NULL},
};
#undef T
static const struct conf_section tls_section = {
    tls_keys, 0, RES_OFF(struct res_gw_tls, mark)};

#define S(f) RES_OFF(struct res_gw_server, f)
static const struct conf_key server_keys[] = {
    {.name = "port",
     .type = CONF_SECTION,
     .off = S(port),
     .help = "port (required)",
     .sub = &port_section},
    {.name = "hosts",
     .type = CONF_STR_LIST,
     .off = S(hosts),
     .max = 10000,
     .help = "[namespace/]host exposed (required)"},
    {.name = "bind", .type = CONF_STR, .off = S(bind), .help = "bind address"},
    {.name = "name", .type = CONF_STR, .off = S(name), .help = "server name"},
    {.name = "defaultEndpoint",
     .type = CONF_STR,
     .off = S(default_endpoint),
     .help = "sidecar only; accepted"},
    {.name = "tls",
     .type = CONF_SECTION,
     .off = S(tls),
     .help = "TLS settings",
     .sub = &tls_section},
    {.name = NULL},
};
#undef S
static const struct conf_section server_section = {
    server_keys, sizeof(struct res_gw_server),
    RES_OFF(struct res_gw_server, mark)};

static const struct conf_key gateway_keys[] = {
    {.name = "selector",
     .type = CONF_STR_MAP,
     .off = RES_OFF(struct res_gateway, selector),
     .help = "labels of the gateways that serve this"},
    {.name = "servers",
     .type = CONF_LIST,
     .off = RES_OFF(struct res_gateway, servers),
     .max = 10000,
     .help = "servers (required)",
     .sub = &server_section},
    {.name = NULL},
};
static const struct conf_section gateway_section = {gateway_keys, 0, SIZE_MAX};

/* Gateway hosts are "host" or "ns/host"; ns is a name, "*", "." or "~". */
static void check_server_host(struct res_check *ck,
                              const struct res_gw_server *s, const char *path,
                              const char *h)
{
    const char *slash = strchr(h, '/');
    const char *why;

    if (slash != NULL) {
        size_t nl = (size_t)(slash - h);
        if (!(nl == 1 && (h[0] == '*' || h[0] == '.' || h[0] == '~')) &&
            res_valid_label(h, nl, NULL, &why) < 0) {
            res_err(ck, &s->mark, path,
                    "namespace '%.*s' of host '%s' %s (or use '*' or '.')",
                    (int)nl, h, h, why);
            return;
        }
        h = slash + 1;
    }
    res_check_host(ck, &s->mark, path, h, RES_HOST_WILDCARD);
}

static int is_http(int64_t p)
{
    return p == RES_PROTO_HTTP || p == RES_PROTO_HTTP2 || p == RES_PROTO_GRPC ||
           p == RES_PROTO_GRPC_WEB;
}

static void check_server_tls(struct res_check *ck,
                             const struct res_gw_server *s, const char *path)
{
    const struct res_gw_tls *t = &s->tls;
    int64_t proto = s->port.protocol;
    int has_tls = t->mark.line > 0;
    int has_cert = t->credential_name != NULL || t->credential_names.n > 0 ||
                   t->server_certificate != NULL;

    /* HBONE (HTTP/2 CONNECT, port 15008 by convention) is the mesh's
     * mTLS and nothing else: the node's SPIFFE certificate, clients
     * verified against the mesh root. */
    if (proto == RES_PROTO_HBONE) {
        if (!has_tls || t->mode != RES_GW_TLS_ISTIO_MUTUAL)
            res_err(ck, has_tls ? &t->mark : &s->mark, path,
                    "an HBONE server needs tls mode ISTIO_MUTUAL (HTTP/2 "
                    "CONNECT over the mesh's mTLS with this node's SPIFFE "
                    "certificate)");
        else if (has_cert || t->private_key != NULL ||
                 t->ca_certificates != NULL || t->ca_crl != NULL ||
                 t->subject_alt_names.n > 0 ||
                 t->verify_certificate_spki.n > 0 ||
                 t->verify_certificate_hash.n > 0 || t->cipher_suites.n > 0 ||
                 t->min_protocol_version != RES_TLS_AUTO ||
                 t->max_protocol_version != RES_TLS_AUTO || t->https_redirect)
            res_err(ck, &t->mark, path,
                    "an HBONE server takes no certificate, CA, CRL, "
                    "subjectAltNames, pins, versions, cipherSuites or "
                    "httpsRedirect: it always presents this "
                    "node's SPIFFE certificate and verifies clients against "
                    "the mesh root");
        return;
    }
    if (proto == RES_PROTO_HTTPS || proto == RES_PROTO_TLS) {
        if (!has_tls) {
            res_err(ck, &s->mark, path, "a %s server needs tls settings",
                    res_protocol_name(proto));
            return;
        }
    } else if (has_tls && !t->https_redirect && is_http(proto)) {
        res_err(ck, &t->mark, path,
                "a plain-text %s server takes tls settings only for "
                "httpsRedirect",
                res_protocol_name(proto));
        return;
    }
    if (!has_tls)
        return;
    switch (t->mode) {
    case RES_GW_TLS_SIMPLE:
    case RES_GW_TLS_MUTUAL:
    case RES_GW_TLS_OPTIONAL_MUTUAL:
        if (t->https_redirect && is_http(proto))
            break;
        if (!has_cert)
            res_err(ck, &t->mark, path,
                    "tls mode %s needs credentialName, or serverCertificate "
                    "and privateKey",
                    server_tls_modes[t->mode]);
        else if (t->server_certificate != NULL && t->private_key == NULL)
            res_err(ck, &t->mark, path, "serverCertificate needs privateKey");
        if (t->mode != RES_GW_TLS_SIMPLE && t->credential_name == NULL &&
            t->credential_names.n == 0 && t->ca_certificates == NULL)
            res_err(ck, &t->mark, path,
                    "tls mode %s needs caCertificates (or a credentialName "
                    "with ca.crt) to verify clients",
                    server_tls_modes[t->mode]);
        break;
    case RES_GW_TLS_AUTO_PASSTHROUGH:
        /* Istio: TLS (or HTTPS) ports only; certificates are accepted
         * with a warning, for backwards compatibility, and ignored. */
        if (proto != RES_PROTO_TLS && proto != RES_PROTO_HTTPS)
            res_err(ck, &t->mark, path,
                    "tls mode AUTO_PASSTHROUGH needs protocol TLS, not %s",
                    res_protocol_name(proto));
        else if (has_cert || t->private_key != NULL ||
                 t->ca_certificates != NULL)
            res_warn(ck, &t->mark, path,
                     "tls mode AUTO_PASSTHROUGH does not use certificates "
                     "(credentialName, serverCertificate, privateKey, "
                     "caCertificates); they are ignored: the workloads "
                     "behind the gateway terminate the mesh's mTLS");
        break;
    case RES_GW_TLS_PASSTHROUGH:
        if (proto == RES_PROTO_HTTPS && has_cert)
            res_warn(ck, &t->mark, path,
                     "tls mode PASSTHROUGH ignores the certificate settings "
                     "(set mode: SIMPLE to terminate TLS)");
        break;
    default:
        break;
    }
    if (t->ca_crl != NULL && t->mode != RES_GW_TLS_MUTUAL &&
        t->mode != RES_GW_TLS_OPTIONAL_MUTUAL)
        res_warn(ck, &t->mark, path,
                 "caCrl is ignored in tls mode %s: it only applies to client "
                 "certificates (MUTUAL, OPTIONAL_MUTUAL)",
                 server_tls_modes[t->mode]);
    if (t->max_protocol_version != RES_TLS_AUTO &&
        t->min_protocol_version > t->max_protocol_version)
        res_err(ck, &t->mark, path,
                "minProtocolVersion is above maxProtocolVersion");
    if ((t->mode == RES_GW_TLS_PASSTHROUGH ||
         t->mode == RES_GW_TLS_AUTO_PASSTHROUGH) &&
        (t->min_protocol_version != RES_TLS_AUTO ||
         t->max_protocol_version != RES_TLS_AUTO || t->cipher_suites.n > 0))
        res_warn(ck, &t->mark, path,
                 "minProtocolVersion, maxProtocolVersion and cipherSuites are "
                 "ignored in tls mode %s: the backend terminates TLS",
                 server_tls_modes[t->mode]);
    /* strait offers TLS 1.2 and 1.3 only (as bootstrap listeners do):
     * asking for an older version cannot be honoured, so it is refused. */
    if (t->min_protocol_version == RES_TLSV1_0 ||
        t->min_protocol_version == RES_TLSV1_1 ||
        t->max_protocol_version == RES_TLSV1_0 ||
        t->max_protocol_version == RES_TLSV1_1)
        res_err(ck, &t->mark, path,
                "TLS 1.0 and 1.1 are not offered: strait serves TLSV1_2 and "
                "TLSV1_3 only (use TLS_AUTO, TLSV1_2 or TLSV1_3)");
    if (t->cipher_suites.n > 0) {
        const char *why = NULL;
        if (tls_cipher_list_check((const char *const *)t->cipher_suites.v,
                                  t->cipher_suites.n, &why) < 0)
            res_err(ck, &t->mark, path, "cipherSuites: %s", why);
    }
}

static void gateway_check(struct res_check *ck, struct resource *r)
{
    struct res_gateway *gw = r->spec;
    char path[128];

    if (gw->servers.n == 0) {
        res_err(ck, NULL, "spec.servers",
                "a Gateway needs at least one server");
        return;
    }
    for (size_t i = 0; i < gw->servers.n; i++) {
        struct res_gw_server *s = (struct res_gw_server *)gw->servers.v + i;

        snprintf(path, sizeof(path), "spec.servers[%zu]", i);
        if (s->port.mark.line == 0 || s->port.number == 0) {
            res_err(ck, &s->mark, path, "missing key 'port' with a number");
            continue;
        }
        if (s->hosts.n == 0)
            res_err(ck, &s->mark, path, "a server needs at least one host");
        for (size_t j = 0; j < s->hosts.n; j++) {
            char hp[160];
            res_path(hp, sizeof(hp), "%s.hosts[%zu]", path, j);
            check_server_host(ck, s, hp, s->hosts.v[j]);
        }
        check_server_tls(ck, s, path);
        /* Istio: port names are unique within a gateway, since a name
         * stands for one port. */
        for (size_t j = 0; j < i; j++) {
            const struct res_gw_server *o =
                (const struct res_gw_server *)gw->servers.v + j;
            if (s->port.name != NULL && o->port.name != NULL &&
                strcmp(s->port.name, o->port.name) == 0 &&
                s->port.number != o->port.number)
                res_err(ck, &s->port.mark, path,
                        "port name '%s' is also used by servers[%zu] for "
                        "port %lld",
                        s->port.name, j, (long long)o->port.number);
            if (s->name != NULL && o->name != NULL &&
                strcmp(s->name, o->name) == 0)
                res_err(ck, &s->mark, path,
                        "server name '%s' is also used by servers[%zu]",
                        s->name, j);
        }
    }
}

const struct res_kind_ops res_gateway_ops = {
    "Gateway", &gateway_section, sizeof(struct res_gateway), gateway_check};
