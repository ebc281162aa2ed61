/*
 * The `strait ca` command line. It works on the files of ca.dir directly,
 * so it needs no running strait: a token made here is seen by the running
 * CA through its record in DIR/tokens/.
 */
#include "config.h"

#include <getopt.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "config/bootstrap.h"
#include "control/ca/ca.h"
#include "control/ca/ca_cli.h"
#include "control/ca/identity.h"
#include "control/ca/token.h"
#include "core/units.h"

enum { OK = 0, CONFIG = 1, USAGE = 2, RUNTIME = 3 };

void ca_cli_usage(FILE *f)
{
    fprintf(
        f, "usage: strait ca <command> [options] [-c FILE]\n"
           "\n"
           "The embedded certificate authority, on the files of ca.dir\n"
           "(a running strait need not be stopped).\n"
           "\n"
           "commands:\n"
           "  init          create the CA (self-signed root) or check the\n"
           "                plugged-in one (ca.cacerts); print its root pin\n"
           "  show          the CA, its root pin, outstanding tokens, and\n"
           "                this node's certificate\n"
           "  token create --namespace NS --service-account SA [--ttl 1h]\n"
           "                print a single-use join token for that identity\n"
           "  issue --namespace NS --service-account SA --out DIR [--ttl D]\n"
           "                issue a certificate locally (for testing): DIR/\n"
           "                key.pem, cert-chain.pem, root-cert.pem\n"
           "\n"
           "  -c, --config FILE   bootstrap file (default /etc/strait/"
           "strait.yaml)\n"
           "  -h, --help          this text\n"
           "\n"
           "A host joins with: strait run --join https://CA:15012 --token T\n"
           "exit codes: 0 ok, 1 invalid configuration, 2 usage error,\n"
           "            3 CA error (unreadable or mismatched files, layout)\n");
}

struct opts {
    const char *config;
    const char *ns;
    const char *sa;
    const char *out;
    int64_t ttl_s;
};

static int parse(int argc, char **argv, struct opts *o, int want_identity,
                 int want_out)
{
    static const struct option lopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"namespace", required_argument, NULL, 'n'},
        {"service-account", required_argument, NULL, 's'},
        {"ttl", required_argument, NULL, 't'},
        {"out", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "c:n:s:t:o:h", lopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            o->config = optarg;
            break;
        case 'n':
            o->ns = optarg;
            break;
        case 's':
            o->sa = optarg;
            break;
        case 'o':
            o->out = optarg;
            break;
        case 't': {
            int64_t ms;
            const char *why;
            if (units_duration_ms(optarg, strlen(optarg), &ms, &why) < 0 ||
                ms < 1000) {
                fprintf(stderr, "strait ca: --ttl '%s': %s\n", optarg,
                        ms < 1000 ? "at least 1s" : why);
                return USAGE;
            }
            o->ttl_s = ms / 1000;
            break;
        }
        case 'h':
            ca_cli_usage(stdout);
            return -1;
        default:
            ca_cli_usage(stderr);
            return USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "strait ca: unexpected argument '%s'\n", argv[optind]);
        return USAGE;
    }
    if (want_identity && (o->ns == NULL || o->sa == NULL)) {
        fprintf(stderr,
                "strait ca: --namespace and --service-account are required\n");
        return USAGE;
    }
    if (!want_identity && (o->ns || o->sa)) {
        fprintf(stderr, "strait ca: this command takes no identity\n");
        return USAGE;
    }
    if (want_out && o->out == NULL) {
        fprintf(stderr, "strait ca: --out DIR is required\n");
        return USAGE;
    }
    if (!want_out && o->out != NULL) {
        fprintf(stderr, "strait ca: this command takes no --out\n");
        return USAGE;
    }
    return OK;
}

static void ca_conf_of(const struct bootstrap *bs, struct ca_conf *cc)
{
    cc->dir = bs->ca.dir;
    cc->cacerts = bs->ca.cacerts;
    cc->trust_domain = bs->trust_domain;
    cc->key_type =
        bs->ca.key_type == BOOTSTRAP_KEY_RSA ? PKI_KEY_RSA : PKI_KEY_ECDSA;
    cc->root_ttl_s = bs->ca.root_cert_ttl_ms / 1000;
    cc->default_ttl_s = bs->ca.cert_ttl_ms / 1000;
    cc->max_ttl_s = bs->ca.max_cert_ttl_ms / 1000;
}

/* Loads the bootstrap and opens the CA; the exit code on failure. */
static int open_ca(const struct opts *o, int create, struct bootstrap **bsp,
                   struct ca **cap)
{
    struct ca_conf cc;
    char *err = NULL;

    *bsp = bootstrap_load(o->config, &err);
    if (*bsp == NULL) {
        fprintf(stderr, "%s\n", err ? err : "invalid configuration");
        free(err);
        return CONFIG;
    }
    ca_conf_of(*bsp, &cc);
    *cap = ca_open(&cc, create, &err);
    if (*cap == NULL) {
        fprintf(stderr, "strait ca: %s\n", err ? err : "cannot open the CA");
        free(err);
        bootstrap_free(*bsp);
        *bsp = NULL;
        return RUNTIME;
    }
    return OK;
}

static const char *utc(int64_t t, char *out, size_t n)
{
    time_t tt = (time_t)t;
    struct tm tm;

    if (gmtime_r(&tt, &tm) == NULL ||
        strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(out, n, "%lld", (long long)t);
    return out;
}

static void print_name(const char *label, X509_NAME *name)
{
    char buf[512];

    X509_NAME_oneline(name, buf, sizeof(buf));
    printf("%s%s\n", label, buf);
}

static void print_ca(const struct ca *ca)
{
    char pin[72], when[32];

    ca_pin_hex(ca, pin);
    printf("mode:       %s\n", ca->intermediate
                                   ? "intermediate (plugged-in cacerts)"
                                   : "self-signed root");
    print_name("ca cert:    ", X509_get_subject_name(ca->cert));
    print_name("root:       ", X509_get_subject_name(ca->root));
    printf("root pin:   %s\n", pin);
    printf("trust:      spiffe://%s\n", ca->trust_domain);
    printf("ca expires: %s\n",
           utc(pki_time(X509_get0_notAfter(ca->cert)), when, sizeof(when)));
}

static int cmd_init(int argc, char **argv, struct opts *o)
{
    struct bootstrap *bs;
    struct ca *ca;
    int rc = parse(argc, argv, o, 0, 0);

    if (rc != OK)
        return rc < 0 ? OK : rc;
    rc = open_ca(o, 1, &bs, &ca);
    if (rc != OK)
        return rc;
    print_ca(ca);
    ca_free(ca);
    bootstrap_free(bs);
    return OK;
}

static int cmd_show(int argc, char **argv, struct opts *o)
{
    struct bootstrap *bs;
    struct ca *ca;
    struct ca_cred *cred;
    char *dir = NULL, *err = NULL;
    int rc = parse(argc, argv, o, 0, 0);

    if (rc != OK)
        return rc < 0 ? OK : rc;
    rc = open_ca(o, 0, &bs, &ca);
    if (rc != OK)
        return rc;
    print_ca(ca);
    printf("tokens:     %d outstanding\n",
           token_count(bs->ca.dir, (int64_t)time(NULL)));
    if (asprintf(&dir, "%s/identity", bs->ca.dir) < 0)
        dir = NULL;
    cred = dir ? ca_cred_load(dir, &err) : NULL;
    if (cred != NULL) {
        char when[32];
        printf("identity:   %s (valid until %s)\n", cred->spiffe_id,
               utc(cred->not_after, when, sizeof(when)));
        ca_cred_unref(cred);
    } else {
        printf("identity:   none (%s)\n", err ? err : "?");
    }
    free(err);
    free(dir);
    ca_free(ca);
    bootstrap_free(bs);
    return OK;
}

static int cmd_token(int argc, char **argv, struct opts *o)
{
    struct bootstrap *bs;
    struct ca *ca;
    char tok[TOKEN_STRLEN], *err = NULL;
    int rc;

    if (argc < 2 || strcmp(argv[1], "create") != 0) {
        if (argc >= 2 &&
            (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            ca_cli_usage(stdout);
            return OK;
        }
        fprintf(stderr, "strait ca token: expected 'create'\n");
        return USAGE;
    }
    o->ttl_s = 3600;
    rc = parse(argc - 1, argv + 1, o, 1, 0);
    if (rc != OK)
        return rc < 0 ? OK : rc;
    rc = open_ca(o, 0, &bs, &ca);
    if (rc != OK)
        return rc;
    if (token_create(bs->ca.dir, ca->pin, o->ns, o->sa, o->ttl_s,
                     (int64_t)time(NULL), tok, &err) < 0) {
        fprintf(stderr, "strait ca token create: %s\n", err ? err : "failed");
        /* A bad name is the caller's mistake; anything else is the CA's. */
        rc = pki_name_ok(o->ns) && pki_name_ok(o->sa) ? RUNTIME : USAGE;
        free(err);
    } else {
        printf("%s\n", tok);
    }
    ca_free(ca);
    bootstrap_free(bs);
    return rc;
}

static int cmd_issue(int argc, char **argv, struct opts *o)
{
    struct bootstrap *bs;
    struct ca *ca;
    struct ca_cred *cred = NULL;
    EVP_PKEY *key;
    X509 *leaf = NULL;
    char *id, *err = NULL;
    int rc = parse(argc, argv, o, 1, 1);

    if (rc != OK)
        return rc < 0 ? OK : rc;
    if (!pki_name_ok(o->ns) || !pki_name_ok(o->sa)) {
        fprintf(stderr, "strait ca issue: namespace and service account "
                        "must be DNS-style names (a-z 0-9 - .)\n");
        return USAGE;
    }
    rc = open_ca(o, 0, &bs, &ca);
    if (rc != OK)
        return rc;
    id = pki_spiffe_make(ca->trust_domain, o->ns, o->sa);
    key = pki_key_new(bs->ca.key_type == BOOTSTRAP_KEY_RSA ? PKI_KEY_RSA
                                                           : PKI_KEY_ECDSA);
    if (id && key)
        leaf = ca_issue(ca, key, id, o->ttl_s, &err);
    if (leaf != NULL) {
        EVP_PKEY_up_ref(key);
        cred = ca_cred_new(leaf, X509_chain_up_ref(ca->chain), key, &err);
    }
    if (cred == NULL || ca_cred_store(cred, o->out, &err) < 0) {
        fprintf(stderr, "strait ca issue: %s\n", err ? err : "failed");
        rc = RUNTIME;
    } else {
        printf("%s: key.pem, cert-chain.pem, root-cert.pem for %s\n", o->out,
               id);
    }
    ca_cred_unref(cred);
    EVP_PKEY_free(key);
    free(err);
    free(id);
    ca_free(ca);
    bootstrap_free(bs);
    return rc;
}

int ca_cli_main(int argc, char **argv, const char *default_config)
{
    struct opts o;
    const char *sub;

    memset(&o, 0, sizeof(o));
    o.config = default_config;
    if (argc < 2) {
        ca_cli_usage(stderr);
        return USAGE;
    }
    sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 ||
        strcmp(sub, "help") == 0) {
        ca_cli_usage(stdout);
        return OK;
    }
    if (strcmp(sub, "init") == 0)
        return cmd_init(argc - 1, argv + 1, &o);
    if (strcmp(sub, "show") == 0)
        return cmd_show(argc - 1, argv + 1, &o);
    if (strcmp(sub, "token") == 0)
        return cmd_token(argc - 1, argv + 1, &o);
    if (strcmp(sub, "issue") == 0)
        return cmd_issue(argc - 1, argv + 1, &o);
    fprintf(stderr, "strait ca: unknown command '%s'\n", sub);
    ca_cli_usage(stderr);
    return USAGE;
}
