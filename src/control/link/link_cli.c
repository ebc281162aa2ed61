/*
 * The `strait link` command line: it works on ca.dir's files, so it needs
 * no running strait (the running catalog API reads the records).
 */
#include "config.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/bootstrap.h"
#include "control/ca/ca.h"
#include "control/link/link_cli.h"
#include "control/link/store.h"
#include "core/addr.h"
#include "core/buf.h"
#include "tls/bundle.h"

enum { OK = 0, CONFIG = 1, USAGE = 2, RUNTIME = 3 };

void link_cli_usage(FILE *f)
{
    fprintf(f,
            "usage: strait link create --name SITE [-c FILE]\n"
            "       strait link delete --name SITE [-c FILE]\n"
            "\n"
            "Site links, on the files of ca.dir (no running strait needed).\n"
            "create prints the MeshLink the site SITE applies to link to\n"
            "this one: this site's catalog API (links.advertise or\n"
            "links.address), east-west gateway (links.gateway), network,\n"
            "trust domain, trust bundle and a new link credential, shown\n"
            "once (creating it again replaces the credential). delete\n"
            "revokes it: the running catalog API closes SITE's stream.\n"
            "\n"
            "  -n, --name SITE      the other site's name (a DNS-1123 label)\n"
            "  -c, --config FILE    bootstrap file (default "
            "/etc/strait/strait.yaml)\n"
            "exit codes: 0 ok, 1 invalid configuration, 2 usage error,\n"
            "            3 CA error (unreadable or mismatched files)\n");
}

/* HOST:PORT (IPv6 in brackets) into host and port; 0 or -1. */
static int split_host_port(const char *s, char *host, size_t cap, long *port)
{
    const char *colon = strrchr(s, ':');
    const char *h = s;
    size_t hn;
    char *end;

    if (colon == NULL)
        return -1;
    hn = (size_t)(colon - s);
    if (hn >= 2 && s[0] == '[' && s[hn - 1] == ']') {
        h++;
        hn -= 2;
    }
    if (hn == 0 || hn >= cap)
        return -1;
    memcpy(host, h, hn);
    host[hn] = '\0';
    *port = strtol(colon + 1, &end, 10);
    return *end == '\0' && *port > 0 && *port < 65536 ? 0 : -1;
}

static int is_unspecified(const struct addr *a)
{
    char s[ADDR_STRLEN];

    addr_format(a, s, sizeof(s));
    return strncmp(s, "0.0.0.0:", 8) == 0 || strncmp(s, "[::]:", 5) == 0;
}

static int cmd_create(const struct bootstrap *bs, const char *site)
{
    struct ca_conf cc;
    struct ca *ca;
    struct buf b;
    char *err = NULL, token[160], gwhost[256], catalog[ADDR_STRLEN];
    long gwport;
    int rc = RUNTIME;

    if (bs->node.network == NULL || bs->node.network[0] == '\0') {
        fprintf(stderr, "strait link: node.network is empty: a linked site "
                        "reaches this one's services through its network's "
                        "gateway, so name the network\n");
        return CONFIG;
    }
    if (bs->links.gateway[0] == '\0' ||
        split_host_port(bs->links.gateway, gwhost, sizeof(gwhost), &gwport) <
            0) {
        fprintf(stderr, "strait link: links.gateway must be HOST:PORT of this "
                        "site's east-west gateway as the other site reaches it "
                        "(e.g. 203.0.113.7:15443)\n");
        return CONFIG;
    }
    if (bs->links.advertise[0] != '\0') {
        struct addr a;
        const char *why;
        if (addr_parse(&a, bs->links.advertise, strlen(bs->links.advertise), 0,
                       &why) < 0) {
            fprintf(stderr, "strait link: links.advertise '%s': %s\n",
                    bs->links.advertise, why);
            return CONFIG;
        }
        addr_format(&a, catalog, sizeof(catalog));
    } else if (bs->links.address.len > 0 &&
               !is_unspecified(&bs->links.address)) {
        addr_format(&bs->links.address, catalog, sizeof(catalog));
    } else {
        fprintf(stderr,
                "strait link: set links.address (this site's catalog API) "
                "and, when it is a wildcard, links.advertise (the address "
                "the other site dials)\n");
        return CONFIG;
    }
    cc.dir = bs->ca.dir;
    cc.cacerts = bs->ca.cacerts;
    cc.trust_domain = bs->trust_domain;
    cc.key_type = PKI_KEY_ECDSA;
    cc.root_ttl_s = bs->ca.root_cert_ttl_ms / 1000;
    cc.default_ttl_s = bs->ca.cert_ttl_ms / 1000;
    cc.max_ttl_s = bs->ca.max_cert_ttl_ms / 1000;
    ca = ca_open(&cc, 0, &err);
    if (ca == NULL) {
        fprintf(stderr,
                "strait link: %s (a site link needs this site's CA: "
                "ca.enabled and `strait ca init`)\n",
                err ? err : "cannot open the CA");
        free(err);
        return RUNTIME;
    }
    buf_init(&b, 1 << 20);
    if (bundle_write(&b, ca->roots, (int64_t)time(NULL)) < 0) {
        fprintf(stderr, "strait link: cannot write the trust bundle\n");
        goto done;
    }
    if (link_store_create(bs->ca.dir, site, (int64_t)time(NULL), token,
                          sizeof(token), &err) < 0) {
        fprintf(stderr, "strait link: %s\n", err ? err : "cannot record");
        free(err);
        goto done;
    }
    printf("# A link to site %s (network %s, trust domain %s) for site %s.\n"
           "# Apply it on site %s; the credential is shown only now\n"
           "# (`strait link delete --name %s` here revokes it).\n"
           "apiVersion: strait.io/v1alpha1\n"
           "kind: MeshLink\n"
           "metadata:\n"
           "  name: %s\n"
           "spec:\n"
           "  network: \"%s\"\n"
           "  trustDomain: \"%s\"\n"
           "  gateway:\n"
           "    address: \"%s\"\n"
           "    port: %ld\n"
           "  catalog:\n"
           "    address: \"%s\"\n"
           "  credential:\n"
           "    token: \"%s\"\n"
           "  retainFor: 10m\n"
           "  trustBundle: |\n"
           "    %s\n",
           bs->node.name, bs->node.network, bs->trust_domain, site, site, site,
           bs->node.name, bs->node.network, bs->trust_domain, gwhost, gwport,
           catalog, token, buf_cstr(&b));
    rc = OK;
done:
    buf_dispose(&b);
    ca_free(ca);
    return rc;
}

int link_cli_main(int argc, char **argv, const char *default_config)
{
    static const struct option lopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"name", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *config = default_config, *name = NULL, *sub;
    struct bootstrap *bs;
    char *err = NULL;
    int c, rc;

    if (argc < 2) {
        link_cli_usage(stderr);
        return USAGE;
    }
    sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 ||
        strcmp(sub, "help") == 0) {
        link_cli_usage(stdout);
        return OK;
    }
    if (strcmp(sub, "create") != 0 && strcmp(sub, "delete") != 0) {
        fprintf(stderr, "strait link: unknown command '%s'\n", sub);
        link_cli_usage(stderr);
        return USAGE;
    }
    optind = 1;
    argc--;
    argv++;
    while ((c = getopt_long(argc, argv, "c:n:h", lopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        case 'h':
            link_cli_usage(stdout);
            return OK;
        default:
            link_cli_usage(stderr);
            return USAGE;
        }
    }
    if (optind < argc || name == NULL) {
        fprintf(stderr, "strait link: --name SITE is required (and nothing "
                        "else)\n");
        return USAGE;
    }
    if (!link_store_site_ok(name)) {
        fprintf(stderr,
                "strait link: --name '%s' must be a DNS-1123 label (a-z, "
                "0-9, -; at most 63)\n",
                name);
        return USAGE;
    }
    bs = bootstrap_load(config, &err);
    if (bs == NULL) {
        fprintf(stderr, "%s\n", err ? err : "invalid configuration");
        free(err);
        return CONFIG;
    }
    if (strcmp(sub, "create") == 0) {
        rc = cmd_create(bs, name);
    } else if (link_store_delete(bs->ca.dir, name, &err) < 0) {
        fprintf(stderr, "strait link: %s\n", err ? err : "cannot delete");
        free(err);
        rc = RUNTIME;
    } else {
        printf("link of site %s deleted; its catalog stream closes within a "
               "second\n",
               name);
        rc = OK;
    }
    bootstrap_free(bs);
    return rc;
}
