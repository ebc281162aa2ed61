/*
 * strait.io/v1alpha1 MeshLink: a link to another site's control plane
 * (README "Site links"; the runtime is src/control/link/). What a table
 * cannot say is checked here: the trust bundle must parse as a SPIFFE
 * bundle with at least one X.509 authority, the credential must have the
 * shape `strait link create` prints, the catalog address must be
 * HOST:PORT and the gateway an IP or a DNS name.
 */
#include "config.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "config/res-kinds.h"
#include "config/resource.h"
#include "core/addr.h"
#include "tls/bundle.h"

#define ML(f) RES_OFF(struct res_mesh_link, f)
static const struct conf_key import_keys[] = {
    {.name = "hosts",
     .type = CONF_STR_LIST,
     .off = ML(import.hosts) - ML(import),
     .max = 1000,
     .help = "remote hosts (a name or *.suffix) whose endpoints may join a "
             "host this site defines or another MeshLink owns"},
    {.name = "namespaces",
     .type = CONF_STR_LIST,
     .off = ML(import.namespaces) - ML(import),
     .max = 1000,
     .help = "namespaces (or \"*\") whose hosts, defined here or owned by "
             "another MeshLink there, may take this link's endpoints"},
    {.name = NULL},
};
static const struct conf_section import_section = {
    import_keys, 0, ML(import.mark) - ML(import)};

static const struct conf_key gateway_keys[] = {
    {.name = "address",
     .type = CONF_STR,
     .off = ML(gateway.address) - ML(gateway),
     .help = "IP or DNS name of the remote site's east-west gateway "
             "(required)"},
    {.name = "port",
     .type = CONF_INT,
     .off = ML(gateway.port) - ML(gateway),
     .min = 1,
     .max = 65535,
     .def = "15443",
     .help = "its AUTO_PASSTHROUGH port"},
    {.name = NULL},
};
static const struct conf_section gateway_section = {
    gateway_keys, 0, ML(gateway.mark) - ML(gateway)};

static const struct conf_key catalog_keys[] = {
    {.name = "address",
     .type = CONF_STR,
     .off = ML(catalog.address) - ML(catalog),
     .help = "HOST:PORT (an IP or a DNS name) of the remote site's catalog "
             "API (its links.advertise or links.address) (required)"},
    {.name = NULL},
};
static const struct conf_section catalog_section = {
    catalog_keys, 0, ML(catalog.mark) - ML(catalog)};

static const struct conf_key credential_keys[] = {
    {.name = "token",
     .type = CONF_STR,
     .off = ML(credential.token) - ML(credential),
     .help = "the link credential the remote site issued for this one "
             "(slk1.SITE.SECRET; shown redacted)",
     .custom_json = conf_secret_json},
    {.name = NULL},
};
static const struct conf_section credential_section = {
    credential_keys, 0, ML(credential.mark) - ML(credential)};

static const struct conf_key ml_keys[] = {
    {.name = "network",
     .type = CONF_STR,
     .off = ML(network),
     .help = "the remote site's network (its node.network) (required)"},
    {.name = "trustDomain",
     .type = CONF_STR,
     .off = ML(trust_domain),
     .help = "the remote site's trust domain (required)"},
    {.name = "trustBundle",
     .type = CONF_STR,
     .off = ML(trust_bundle),
     .help = "the remote site's roots as a SPIFFE bundle (JWKS JSON text) "
             "(required)"},
    {.name = "gateway",
     .type = CONF_SECTION,
     .off = ML(gateway),
     .help = "the remote site's east-west gateway",
     .sub = &gateway_section},
    {.name = "catalog",
     .type = CONF_SECTION,
     .off = ML(catalog),
     .help = "the remote site's catalog API",
     .sub = &catalog_section},
    {.name = "credential",
     .type = CONF_SECTION,
     .off = ML(credential),
     .help = "how this site authenticates to the catalog API",
     .sub = &credential_section},
    {.name = "retainFor",
     .type = CONF_DURATION,
     .off = ML(retain_for_ms),
     .min = 0,
     .max = INT64_C(7) * 24 * 3600 * 1000,
     .def = "10m",
     .help = "how long the last catalog is kept while the link is down; "
             "then its services are removed"},
    {.name = "import",
     .type = CONF_SECTION,
     .off = ML(import),
     .help = "what of the remote catalog may merge with hosts this site "
             "defines or another MeshLink owns (default: nothing; such "
             "hosts are left out and reported as conflicts)",
     .sub = &import_section},
    {.name = NULL},
};
#undef ML
static const struct conf_section ml_section = {ml_keys, 0, SIZE_MAX};

static int label_ok(const char *s, size_t n)
{
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '-'))
            return 0;
    return 1;
}

int res_link_token_split(const char *s, size_t n, const char **site,
                         size_t *nsite, const char **secret, size_t *nsecret,
                         const char **why)
{
    size_t pl = strlen(LINK_TOKEN_PREFIX);
    const char *dot;

    *why = "a link credential is slk1.SITE.SECRET, as `strait link create` "
           "prints it";
    if (n < pl || memcmp(s, LINK_TOKEN_PREFIX, pl) != 0)
        return -1;
    dot = memchr(s + pl, '.', n - pl);
    if (dot == NULL || !label_ok(s + pl, (size_t)(dot - s) - pl))
        return -1;
    *site = s + pl;
    *nsite = (size_t)(dot - s) - pl;
    *secret = dot + 1;
    *nsecret = n - (size_t)(dot + 1 - s);
    if (*nsecret != 43)
        return -1;
    for (size_t i = 0; i < *nsecret; i++) {
        char c = (*secret)[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return -1;
    }
    *why = NULL;
    return 0;
}

static void ml_check(struct res_check *ck, struct resource *r)
{
    const struct res_mesh_link *ml = r->spec;
    struct spiffe_bundle b;
    const char *why, *p1, *p2;
    size_t n1, n2;
    struct addr a;
    const char *aerr = NULL;

    if (ml->network == NULL || ml->network[0] == '\0')
        res_err(ck, NULL, "spec.network",
                "is required (the remote site's "
                "node.network)");
    if (ml->trust_domain == NULL || ml->trust_domain[0] == '\0')
        res_err(ck, NULL, "spec.trustDomain", "is required");
    else
        res_check_host(ck, NULL, "spec.trustDomain", ml->trust_domain, 0);
    if (ml->trust_bundle == NULL || ml->trust_bundle[0] == '\0') {
        res_err(ck, NULL, "spec.trustBundle",
                "is required: the remote site's SPIFFE bundle, as `strait "
                "link create` prints it");
    } else if (bundle_parse(ml->trust_bundle, strlen(ml->trust_bundle), &b,
                            &why) < 0) {
        res_err(ck, NULL, "spec.trustBundle", "not a SPIFFE bundle: %s", why);
    } else {
        bundle_dispose(&b);
    }
    if (ml->gateway.address == NULL || ml->gateway.address[0] == '\0')
        res_err(ck, &ml->gateway.mark, "spec.gateway.address", "is required");
    else
        res_check_host(ck, &ml->gateway.mark, "spec.gateway.address",
                       ml->gateway.address, RES_HOST_IP);
    if (ml->catalog.address == NULL || ml->catalog.address[0] == '\0')
        res_err(ck, &ml->catalog.mark, "spec.catalog.address", "is required");
    else if (addr_parse(&a, ml->catalog.address, strlen(ml->catalog.address), 0,
                        &aerr) == 0) {
        if (a.ss.ss_family == AF_UNIX)
            res_err(ck, &ml->catalog.mark, "spec.catalog.address",
                    "'%s' is a unix socket, not HOST:PORT",
                    ml->catalog.address);
    } else {
        /* NAME:PORT, resolved by the control loop before each attempt. */
        const char *colon = strrchr(ml->catalog.address, ':');
        char host[256], *end = NULL;
        long port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
        size_t hn = colon != NULL ? (size_t)(colon - ml->catalog.address) : 0;
        if (colon == NULL || hn == 0 || hn >= sizeof(host) || end == NULL ||
            *end != '\0' || port < 1 || port > 65535) {
            res_err(ck, &ml->catalog.mark, "spec.catalog.address",
                    "'%s' is not HOST:PORT (an IP or a DNS name)",
                    ml->catalog.address);
        } else {
            memcpy(host, ml->catalog.address, hn);
            host[hn] = '\0';
            res_check_host(ck, &ml->catalog.mark, "spec.catalog.address", host,
                           0);
        }
    }
    if (ml->credential.token == NULL || ml->credential.token[0] == '\0')
        res_err(ck, &ml->credential.mark, "spec.credential.token",
                "is required");
    else if (res_link_token_split(ml->credential.token,
                                  strlen(ml->credential.token), &p1, &n1, &p2,
                                  &n2, &why) < 0)
        res_err(ck, &ml->credential.mark, "spec.credential.token", "%s", why);
    for (size_t i = 0; i < ml->import.hosts.n; i++) {
        char path[64];
        res_path(path, sizeof(path), "spec.import.hosts[%zu]", i);
        /* "*" alone would import everything: say so by listing the
         * namespaces instead, where the owner is named. */
        if (strcmp(ml->import.hosts.v[i], "*") == 0)
            res_err(ck, &ml->import.mark, path,
                    "'*' would let the remote site take over every host; "
                    "name the hosts (or *.suffix), or use "
                    "spec.import.namespaces");
        else
            res_check_host(ck, &ml->import.mark, path, ml->import.hosts.v[i],
                           RES_HOST_WILDCARD);
    }
    for (size_t i = 0; i < ml->import.namespaces.n; i++) {
        const char *ns = ml->import.namespaces.v[i];
        char path[64];
        res_path(path, sizeof(path), "spec.import.namespaces[%zu]", i);
        if (strcmp(ns, "*") != 0 && !label_ok(ns, strlen(ns)))
            res_err(ck, &ml->import.mark, path,
                    "'%s' is not a namespace name (a DNS label) or \"*\"", ns);
    }
}

const struct res_kind_ops res_mesh_link_ops = {
    "MeshLink", &ml_section, sizeof(struct res_mesh_link), ml_check};
