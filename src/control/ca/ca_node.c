/*
 * The node's certificate life cycle: issue or join, store, publish, renew.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <openssl/mem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/bootstrap.h"
#include "control/ca/ca.h"
#include "control/ca/ca_client.h"
#include "control/ca/ca_node.h"
#include "control/ca/ca_server.h"
#include "control/ca/identity.h"
#include "control/ca/istiod_client.h"
#include "control/ca/token.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "event/timer.h"

/* Retries of a failed renewal: 1 s doubling to a minute, jittered. */
#define RETRY_MIN_S 1
#define RETRY_MAX_S 60

struct slot {
    struct ca_node *node;
    struct ca_identity holder;
    char *spiffe_id; /* local issue: the identity to issue */
    /* local issue: DNS names beside it (the CA server's), owned by the
     * node's conf copy */
    const char *const *dns;
    size_t ndns;
    int store; /* write to DIR/identity */
    struct timer timer;
    struct ca_client_req *req;
    struct istiod_req *ireq;
    int retry_s;
    /* Failed renewals since the last success, and the last reason. */
    uint64_t renew_failures;
    char *renew_error;
    int64_t due_s; /* the second a planned renewal is for; 0: a retry */
    /* A credential in use that could not be written to DIR/identity (a
     * full or failing disk): kept in memory and written again with
     * backoff; NULL once stored. */
    struct ca_cred *unstored;
    struct timer store_timer;
    int store_retry_s;
    uint64_t store_failures;
    char *store_error;
};

struct ca_node {
    struct event_base *base;
    struct reaper *reaper; /* the main thread's */
    char *identity_dir;
    char *join_url;
    enum pki_key_type key_type;
    int64_t cert_ttl_s;
    struct ca *ca;      /* when running the CA */
    uint8_t pin[32];    /* root pin when joined */
    struct slot self;   /* this node's workload identity */
    struct slot server; /* the CA API's certificate */
    struct ca_server *srv;
    /* Joining: the key the join token was (or is being) spent for, kept in
     * DIR/identity/join-key.pem until the certificate is stored, so an
     * interrupted join retries with it (token_redeem()). */
    char *join_key_path;
    /* Resolves the CA's host name for renewals, with the bootstrap's dns
     * settings (a joined node only). */
    struct dns_cache *dns;
    /* istiod mode: the call's settings (strings owned by the node). */
    int istiod;
    struct istiod_conf icf;
    /* Copies of the settings renewals use: the bootstrap the conf
     * pointed into is replaced by a reload. */
    char *icf_strs[5];
    char **server_names;
    size_t nserver_names;
};

/* The node's own copy of a setting (NULL stays NULL); -1 when memory is
 * short. */
static int keep(char **slot, const char *v)
{
    *slot = v != NULL ? strdup(v) : NULL;
    return v != NULL && *slot == NULL ? -1 : 0;
}

void ca_node_conf_init(struct ca_node_conf *c, const struct bootstrap *bs)
{
    memset(c, 0, sizeof(*c));
    c->enabled = bs->ca.enabled;
    c->dir = bs->ca.dir;
    c->cacerts = bs->ca.cacerts;
    c->trust_domain = bs->trust_domain;
    c->ns = bs->node.ns;
    c->sa = bs->node.service_account;
    c->key_type =
        bs->ca.key_type == BOOTSTRAP_KEY_RSA ? PKI_KEY_RSA : PKI_KEY_ECDSA;
    c->root_ttl_s = bs->ca.root_cert_ttl_ms / 1000;
    c->cert_ttl_s = bs->ca.cert_ttl_ms / 1000;
    c->max_ttl_s = bs->ca.max_cert_ttl_ms / 1000;
    c->address = bs->ca.address;
    c->join_url = bs->ca.join.address;
    c->join_token = bs->ca.join.token;
    c->dns.nameservers = bs->dns.nameservers.v;
    c->dns.nnameservers = bs->dns.nameservers.n;
    c->dns.min_refresh_ms = (uint64_t)bs->dns.min_refresh_ms;
    c->dns.timeout_ms = (uint64_t)bs->dns.timeout_ms;
    c->dns.resolv_conf = bs->dns.resolv_conf;
    c->istiod_address = bs->ca.istiod.address;
    c->istiod_root_cert = bs->ca.istiod.root_cert;
    c->istiod_token = bs->ca.istiod.token;
    c->istiod_cluster_id = bs->ca.istiod.cluster_id;
    c->istiod_server_name = bs->ca.istiod.server_name;
    c->istiod_start_timeout_ms = bs->ca.istiod.start_timeout_ms;
    c->sa_issuer = bs->ca.sa_tokens.issuer;
    c->sa_jwks_file = bs->ca.sa_tokens.jwks_file;
    c->sa_audience = bs->ca.sa_tokens.audience;
    c->server_names = (const char *const *)bs->ca.server_names.v;
    c->nserver_names = bs->ca.server_names.n;
}

/* The CA server's DNS name when none is configured: istiod's, which
 * Istio's agents dial and check. */
static const char *const default_server_names[] = {"istiod.istio-system.svc"};

static int istiod_wanted(const struct ca_node_conf *c)
{
    return c->istiod_address != NULL && c->istiod_address[0] != '\0';
}

int ca_node_wanted(const struct ca_node_conf *c)
{
    return c->enabled || (c->join_url != NULL && c->join_url[0] != '\0') ||
           istiod_wanted(c);
}

static void renew(struct slot *s);

/* The node's resolver keeps no names, so nothing in it changes. */
static void no_change(void *arg)
{
    (void)arg;
}

static void on_timer(void *arg)
{
    renew(arg);
}

/* A renewal already overdue runs on the next turn. */
static void arm_ms(struct slot *s, int64_t delay_ms)
{
    timer_arm(&s->timer, delay_ms > 0 ? (uint64_t)delay_ms : 0);
}

/* Plans s's renewal for cred: at its ca_cred_renew_at() second, timed on
 * the real clock in milliseconds. Returns the delay. */
static int64_t plan(struct slot *s, const struct ca_cred *cred)
{
    int64_t now_ms = clock_real_ms(), in_ms = ca_cred_renew_in_ms(cred, now_ms);

    s->due_s = (now_ms + in_ms) / 1000;
    arm_ms(s, in_ms);
    return in_ms;
}

static void serial_hex(X509 *x, char *out, size_t n)
{
    const ASN1_INTEGER *sn = X509_get0_serialNumber(x);
    size_t len = (size_t)ASN1_STRING_length(sn);

    if (len * 2 + 1 > n)
        len = (n - 1) / 2;
    pki_hex(ASN1_STRING_get0_data(sn), len, out);
}

static void store_later(struct slot *s, struct ca_cred *cred, char *why);

/* The credential is on disk: whatever waited to be written is done. */
static void stored(struct slot *s)
{
    struct ca_node *n = s->node;

    if (s->unstored != NULL) {
        log_info("CA: the certificate for %s is stored in %s now",
                 s->unstored->spiffe_id, n->identity_dir);
        ca_cred_unref(s->unstored);
        s->unstored = NULL;
    }
    free(s->store_error);
    s->store_error = NULL;
    s->store_retry_s = 0;
    timer_cancel(&s->store_timer);
    if (s == &n->self && n->join_key_path != NULL) {
        /* The key is in key.pem beside its chain now. */
        unlink(n->join_key_path);
        free(n->join_key_path);
        n->join_key_path = NULL;
    }
}

static void on_store_timer(void *arg)
{
    struct slot *s = arg;
    struct ca_cred *cred = s->unstored;
    char *err = NULL;

    if (cred == NULL)
        return;
    if (ca_cred_store(cred, s->node->identity_dir, &err) < 0) {
        s->unstored = NULL;
        store_later(s, cred, err);
        ca_cred_unref(cred);
        return;
    }
    stored(s);
}

/*
 * store_later() keeps cred (a reference is taken) to be written again:
 * a certificate that cannot be written is still the one in use, so the
 * node rotates even on a full disk, and the write is retried with
 * backoff (1 s doubling to a minute). Takes why.
 */
static void store_later(struct slot *s, struct ca_cred *cred, char *why)
{
    int d;

    ca_cred_unref(s->unstored);
    s->unstored = ca_cred_ref(cred);
    s->store_failures++;
    free(s->store_error);
    s->store_error = why ? why : strdup("unknown error");
    s->store_retry_s = s->store_retry_s ? s->store_retry_s * 2 : RETRY_MIN_S;
    if (s->store_retry_s > RETRY_MAX_S)
        s->store_retry_s = RETRY_MAX_S;
    d = s->store_retry_s;
    log_error("CA: cannot store the certificate for %s in %s: %s; it is in "
              "use from memory, next attempt to store it in %d s",
              cred->spiffe_id, s->node->identity_dir,
              s->store_error ? s->store_error : "?", d);
    timer_arm(&s->store_timer, (uint64_t)d * 1000);
}

/* A new credential for s: store it (or keep it to store later), publish
 * it, plan its renewal. Takes cred. */
static int take(struct slot *s, struct ca_cred *cred, const char *how)
{
    char *err = NULL, serial[64];
    int64_t in_ms;

    if (s->store) {
        if (ca_cred_store(cred, s->node->identity_dir, &err) < 0)
            store_later(s, cred, err);
        else
            stored(s);
    }
    ca_identity_publish(&s->holder, cred);
    s->retry_s = 0;
    s->renew_failures = 0;
    free(s->renew_error);
    s->renew_error = NULL;
    in_ms = plan(s, cred);
    serial_hex(cred->leaf, serial, sizeof(serial));
    log_info("CA: certificate for %s %s (serial %s, valid %lld s, renewal "
             "in %lld.%03lld s)",
             cred->spiffe_id, how, serial,
             (long long)(cred->not_after - cred->not_before),
             (long long)(in_ms / 1000), (long long)(in_ms % 1000));
    ca_cred_unref(cred);
    return 0;
}

static void retry(struct slot *s, const char *why)
{
    uint32_t r;
    int64_t d;

    s->retry_s = s->retry_s ? s->retry_s * 2 : RETRY_MIN_S;
    if (s->retry_s > RETRY_MAX_S)
        s->retry_s = RETRY_MAX_S;
    s->renew_failures++;
    free(s->renew_error);
    s->renew_error = strdup(why ? why : "unknown error");
    RAND_bytes((uint8_t *)&r, sizeof(r));
    /* 80% to 120% of the step. */
    d = s->retry_s * 8 / 10 +
        (int64_t)(r % (uint32_t)(s->retry_s * 4 / 10 + 1));
    log_warn("CA: renewal failed: %s; next attempt in %lld s", why,
             (long long)d);
    {
        unsigned gen = 0;
        struct ca_cred *cur = ca_identity_get(&s->holder, &gen);
        if (cur != NULL && cur->not_after <= (int64_t)time(NULL))
            log_error("CA: the certificate for %s has expired; peers will "
                      "refuse it until a renewal succeeds",
                      cur->spiffe_id);
        ca_cred_unref(cur);
    }
    s->due_s = 0;
    arm_ms(s, d * 1000);
}

static struct ca_cred *issue_local(struct ca_node *n, const struct slot *s,
                                   const char *id, char **err)
{
    EVP_PKEY *key = pki_key_new(n->key_type);
    STACK_OF(X509) * chain;
    X509 *leaf;

    if (key == NULL) {
        err_set(err, "cannot make a key");
        return NULL;
    }
    leaf = ca_issue_dns(n->ca, key, id, s->dns, s->ndns, n->cert_ttl_s, err);
    if (leaf == NULL) {
        EVP_PKEY_free(key);
        return NULL;
    }
    chain = X509_chain_up_ref(n->ca->chain);
    return ca_cred_new(leaf, chain, key, err);
}

static void on_fetched(void *arg, struct ca_cred *cred, const char *err)
{
    struct slot *s = arg;

    s->req = NULL;
    if (cred == NULL) {
        retry(s, err);
        return;
    }
    if (take(s, cred, "renewed over mTLS") < 0)
        retry(s, "cannot store the renewed certificate");
}

static void on_istiod(void *arg, struct ca_cred *cred, const char *err,
                      int unavailable)
{
    struct slot *s = arg;

    (void)unavailable; /* a renewal retries whatever the failure */
    s->ireq = NULL;
    if (cred == NULL) {
        retry(s, err);
        return;
    }
    take(s, cred, "renewed by istiod");
}

static void renew(struct slot *s)
{
    struct ca_node *n = s->node;
    char *err = NULL;

    /* The timer can fire a clock tick before time(), which dates the new
     * certificate, reaches the second the renewal is for; a certificate
     * dated the second before would be due at once, and renewed twice. */
    if ((int64_t)time(NULL) < s->due_s) {
        arm_ms(s, 1);
        return;
    }
    if (n->istiod) {
        /* A new key each time, as Istio's agent makes. */
        EVP_PKEY *key = pki_key_new(n->key_type);
        s->ireq =
            key ? istiod_request(n->base, &n->icf, key, on_istiod, s, &err)
                : NULL;
        EVP_PKEY_free(key);
        if (s->ireq == NULL) {
            retry(s, err ? err : "cannot make a key");
            free(err);
        }
        return;
    }
    if (n->ca != NULL) {
        struct ca_cred *cred = issue_local(n, s, s->spiffe_id, &err);
        if (cred == NULL || take(s, cred, "rotated") < 0) {
            retry(s, err ? err : "cannot store");
            free(err);
        }
        return;
    }
    {
        struct ca_cred *cur;
        unsigned gen = 0;
        struct ca_client_conf cc;
        EVP_PKEY *key = pki_key_new(n->key_type);

        cur = ca_identity_get(&s->holder, &gen);
        memset(&cc, 0, sizeof(cc));
        cc.url = n->join_url;
        cc.pin = n->pin;
        cc.cred = cur;
        cc.key = key;
        cc.validity_s = n->cert_ttl_s;
        cc.dns = n->dns;
        s->req =
            key ? ca_client_request(n->base, &cc, on_fetched, s, &err) : NULL;
        EVP_PKEY_free(key);
        ca_cred_unref(cur);
        if (s->req == NULL) {
            retry(s, err ? err : "cannot make a key");
            free(err);
        }
    }
}

static int slot_init(struct ca_node *n, struct slot *s, const char *id,
                     int store)
{
    s->node = n;
    ca_identity_init(&s->holder);
    s->store = store;
    s->spiffe_id = id ? strdup(id) : NULL;
    timer_init(&s->timer, n->base, on_timer, s);
    timer_init(&s->store_timer, n->base, on_store_timer, s);
    return id == NULL || s->spiffe_id != NULL ? 0 : -1;
}

static void slot_dispose(struct slot *s)
{
    if (s->node == NULL)
        return;
    ca_client_cancel(s->req);
    istiod_cancel(s->ireq);
    free(s->renew_error);
    timer_dispose(&s->timer);
    timer_dispose(&s->store_timer);
    ca_cred_unref(s->unstored);
    free(s->store_error);
    free(s->spiffe_id);
    ca_identity_dispose(&s->holder);
}

static int start_ca(struct ca_node *n, const struct ca_node_conf *conf,
                    char **err)
{
    struct ca_conf cc = {conf->dir,      conf->cacerts,    conf->trust_domain,
                         conf->key_type, conf->root_ttl_s, conf->cert_ttl_s,
                         conf->max_ttl_s};
    char *self = pki_spiffe_make(conf->trust_domain, conf->ns, conf->sa);
    char *srv = NULL, pin[72], as[ADDR_STRLEN];
    struct ca_cred *cred;
    int rc = -1;

    if (asprintf(&srv, "spiffe://%s%s", conf->trust_domain, CA_SERVER_ID_PATH) <
        0)
        srv = NULL;
    if (self == NULL || srv == NULL) {
        err_set(err, "out of memory");
        goto done;
    }
    n->ca = ca_open(&cc, 1, err);
    if (n->ca == NULL)
        goto done;
    ca_pin_hex(n->ca, pin);
    log_info("CA: %s root %s, signing from %s",
             n->ca->intermediate ? "intermediate under" : "self-signed", pin,
             ca_layout_dir(&cc));
    if (slot_init(n, &n->self, self, 1) < 0 ||
        slot_init(n, &n->server, srv, 0) < 0) {
        err_set(err, "out of memory");
        goto done;
    }
    cred = issue_local(n, &n->self, self, err);
    if (cred == NULL || take(&n->self, cred, "issued") < 0) {
        err_set(err, "cannot store this node's certificate");
        goto done;
    }
    if (conf->nserver_names > 0) {
        n->server_names = calloc(conf->nserver_names, sizeof(char *));
        if (n->server_names == NULL) {
            err_set(err, "out of memory");
            goto done;
        }
        for (size_t i = 0; i < conf->nserver_names; i++, n->nserver_names++)
            if (keep(&n->server_names[i], conf->server_names[i]) < 0) {
                err_set(err, "out of memory");
                goto done;
            }
        n->server.dns = (const char *const *)n->server_names;
        n->server.ndns = n->nserver_names;
    } else {
        n->server.dns = default_server_names;
        n->server.ndns = 1;
    }
    cred = issue_local(n, &n->server, srv, err);
    if (cred == NULL || take(&n->server, cred, "issued") < 0)
        goto done;
    {
        struct ca_server_tokens sat = {conf->sa_issuer, conf->sa_jwks_file,
                                       conf->sa_audience};
        n->srv = ca_server_new(n->base, n->reaper, &conf->address, n->ca,
                               &n->server.holder, &sat, conf->inherited, err);
    }
    if (n->srv == NULL)
        goto done;
    log_info("CA: API on %s (POST /v1/certificate; gRPC "
             "IstioCertificateService with ALPN h2)",
             addr_format(ca_server_addr(n->srv), as, sizeof(as)));
    rc = 0;
done:
    free(self);
    free(srv);
    return rc;
}

/*
 * join_key() is the key a join spends its token for: the one kept in
 * DIR/identity/join-key.pem by an earlier attempt that did not finish,
 * or a new one, written there before the token is sent. NULL with *err
 * when it cannot be kept (the token is then not spent).
 */
static EVP_PKEY *join_key(struct ca_node *n, char **err)
{
    struct buf b;
    char *data, *rerr = NULL;
    size_t len = 0;
    EVP_PKEY *key;

    if (asprintf(&n->join_key_path, "%s/join-key.pem", n->identity_dir) < 0) {
        n->join_key_path = NULL;
        err_set(err, "out of memory");
        return NULL;
    }
    data = pki_read_file(n->join_key_path, &len, &rerr);
    free(rerr);
    rerr = NULL;
    if (data != NULL) {
        key = pki_key_parse(data, len, n->join_key_path, err);
        OPENSSL_cleanse(data, len);
        free(data);
        if (key == NULL)
            return NULL;
        log_info("CA: retrying an interrupted join with the key kept in %s",
                 n->join_key_path);
        return key;
    }
    key = pki_key_new(n->key_type);
    if (key == NULL) {
        err_set(err, "cannot make a key");
        return NULL;
    }
    buf_init(&b, PKI_MAX_FILE);
    if (pki_key_pem(key, &b) < 0 ||
        pki_write_private(n->join_key_path, buf_ptr(&b), buf_len(&b), err) <
            0) {
        err_set(err, "out of memory");
        EVP_PKEY_free(key);
        key = NULL;
    }
    if (buf_len(&b) > 0)
        OPENSSL_cleanse((void *)buf_ptr(&b), buf_len(&b));
    buf_dispose(&b);
    return key;
}

static int start_join(struct ca_node *n, const struct ca_node_conf *conf,
                      char **err)
{
    struct ca_cred *cred;
    char *why = NULL;
    int64_t now = (int64_t)time(NULL);

    if (slot_init(n, &n->self, NULL, 1) < 0) {
        err_set(err, "out of memory");
        return -1;
    }
    cred = ca_cred_load(n->identity_dir, &why);
    if (cred != NULL &&
        (cred->not_after <= now || ca_cred_root(cred) == NULL)) {
        free(why);
        why = strdup(cred->not_after <= now ? "the stored certificate has "
                                              "expired"
                                            : "no root in the stored chain");
        ca_cred_unref(cred);
        cred = NULL;
    }
    if (cred != NULL) {
        /* Renewals trust the root this node was issued under. */
        pki_spki_sha256(ca_cred_root(cred), n->pin);
        ca_identity_publish(&n->self.holder, cred);
        log_info("CA: using the stored certificate for %s (valid until "
                 "%lld); renewing over mTLS with %s",
                 cred->spiffe_id, (long long)cred->not_after, n->join_url);
        plan(&n->self, cred);
        ca_cred_unref(cred);
        free(why);
        return 0;
    }
    if (conf->join_token == NULL || conf->join_token[0] == '\0') {
        err_set(err,
                "%s holds no usable certificate (%s) and no join token "
                "was given (--token or ca.join.token)",
                n->identity_dir, why ? why : "none");
        free(why);
        return -1;
    }
    free(why);
    /* The directory must be writable, and the key kept, before a token
     * is spent. */
    if (pki_mkdirs(n->identity_dir, err) < 0)
        return -1;
    {
        struct token t;
        struct ca_client_conf cc;
        const char *tw;
        EVP_PKEY *key;
        char *ferr = NULL;

        if (token_parse(conf->join_token, strlen(conf->join_token), &t, &tw) <
            0) {
            err_set(err, "join token: %s", tw);
            return -1;
        }
        memcpy(n->pin, t.pin, 32);
        key = join_key(n, err);
        if (key == NULL)
            return -1;
        memset(&cc, 0, sizeof(cc));
        cc.url = n->join_url;
        cc.pin = n->pin;
        cc.token = conf->join_token;
        cc.key = key;
        cc.validity_s = n->cert_ttl_s;
        cc.dns_conf = &conf->dns;
        cred = ca_client_fetch(&cc, &ferr);
        EVP_PKEY_free(key);
        if (cred == NULL) {
            int used = ferr != NULL && strstr(ferr, "already used") != NULL;
            err_set(err, "cannot join the CA at %s: %s%s", n->join_url,
                    ferr ? ferr : "no answer",
                    used ? " (a join token is single use, and this one "
                           "was spent for another key: create a new "
                           "one with 'strait ca token create' on the "
                           "CA)"
                         : "");
            free(ferr);
            return -1;
        }
        /* A certificate that cannot be stored is used from memory and
         * written later (take()); join-key.pem stays until it is. */
        take(&n->self, cred, "issued by joining");
    }
    return 0;
}

/*
 * wait_or_stop() waits ms milliseconds before the next try at start-up,
 * before the loop runs. SIGTERM and SIGINT are blocked for the whole of
 * start_istiod() (the loop's handlers would defer them until it runs),
 * so one that came during a try is still pending here: it ends the wait
 * and the start. 0 after the wait, or the signal.
 */
static int wait_or_stop(const sigset_t *stop, uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    uint64_t end = clock_ms() + ms;
    int sig;

    while ((sig = sigtimedwait(stop, NULL, &ts)) < 0 && errno == EINTR) {
        uint64_t now = clock_ms();
        if (now >= end)
            break;
        ts.tv_sec = (time_t)((end - now) / 1000);
        ts.tv_nsec = (long)((end - now) % 1000) * 1000000L;
    }
    return sig > 0 ? sig : 0;
}

/*
 * start_istiod() gets the first certificate from istiod before strait
 * serves anything (a pod without its mesh certificate cannot do
 * ISTIO_MUTUAL), as a first join does; renewals then run on the loop.
 */
static int start_istiod(struct ca_node *n, const struct ca_node_conf *conf,
                        char **err)
{
    char *id = pki_spiffe_make(conf->trust_domain, conf->ns, conf->sa);
    struct ca_cred *cred;
    sigset_t stop, old_mask;
    EVP_PKEY *key;
    char *ferr = NULL;
    int rc = -1, blocked = 0;

    n->istiod = 1;
    if (id == NULL || slot_init(n, &n->self, id, 0) < 0) {
        free(id);
        err_set(err, "out of memory");
        return -1;
    }
    if (keep(&n->icf_strs[0], conf->istiod_address) < 0 ||
        keep(&n->icf_strs[1], conf->istiod_server_name) < 0 ||
        keep(&n->icf_strs[2], conf->istiod_root_cert) < 0 ||
        keep(&n->icf_strs[3], conf->istiod_token) < 0 ||
        keep(&n->icf_strs[4], conf->istiod_cluster_id) < 0) {
        free(id);
        err_set(err, "out of memory");
        return -1;
    }
    n->icf.address = n->icf_strs[0];
    n->icf.server_name = n->icf_strs[1];
    n->icf.root_file = n->icf_strs[2];
    n->icf.token_file = n->icf_strs[3];
    n->icf.audience = "istio-ca";
    n->icf.cluster_id = n->icf_strs[4];
    n->icf.spiffe_id = n->self.spiffe_id;
    n->icf.validity_s = conf->cert_ttl_s;
    n->icf.dns = n->dns;
    n->icf.dns_conf = &conf->dns; /* start-up only; cleared below */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    blocked = pthread_sigmask(SIG_BLOCK, &stop, &old_mask) == 0;
    /* istiod not there yet (a cluster starting, a rollout) is waited for
     * up to ca.istiod.startTimeout, 1 s doubling to 8 s between tries; a
     * refusal stops the start at once. */
    for (uint64_t start = clock_ms(), step = 1000;;
         step = step * 2 < 8000 ? step * 2 : 8000) {
        int unavailable = 0;
        uint64_t waited;
        key = pki_key_new(n->key_type);
        if (key == NULL) {
            err_set(err, "cannot make a key");
            goto done;
        }
        free(ferr);
        ferr = NULL;
        cred = istiod_fetch(&n->icf, key, &unavailable, &ferr);
        EVP_PKEY_free(key);
        if (cred != NULL)
            break;
        waited = clock_ms() - start;
        if (!unavailable ||
            waited + step > (uint64_t)conf->istiod_start_timeout_ms) {
            err_set(err,
                    "cannot get this node's certificate from istiod at %s: "
                    "%s%s",
                    conf->istiod_address, ferr ? ferr : "no answer",
                    unavailable ? " (waited for it up to "
                                  "ca.istiod.startTimeout)"
                                : "");
            goto done;
        }
        log_warn("CA: %s; trying again in %" PRIu64 " ms (waited %" PRIu64
                 " ms of ca.istiod.startTimeout)",
                 ferr ? ferr : "no answer", step, waited);
        if (wait_or_stop(&stop, step) != 0) {
            err_set(err, "stopped by a signal while waiting for istiod at %s",
                    conf->istiod_address);
            goto done;
        }
    }
    take(&n->self, cred, "issued by istiod");
    n->icf.dns_conf = NULL; /* renewals resolve with n->dns */
    rc = 0;
done:
    /* A signal still pending goes to the loop's handlers now. */
    if (blocked)
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    free(ferr);
    free(id);
    return rc;
}

struct ca_node *ca_node_new(struct event_base *base, struct reaper *reaper,
                            const struct ca_node_conf *conf, char **err)
{
    struct ca_node *n = calloc(1, sizeof(*n));

    *err = NULL;
    if (n == NULL) {
        err_set(err, "out of memory");
        return NULL;
    }
    n->base = base;
    n->reaper = reaper;
    n->key_type = conf->key_type;
    n->cert_ttl_s = conf->cert_ttl_s;
    n->join_url = strdup(conf->join_url ? conf->join_url : "");
    if (asprintf(&n->identity_dir, "%s/identity", conf->dir) < 0)
        n->identity_dir = NULL;
    if (n->identity_dir == NULL || n->join_url == NULL) {
        err_set(err, "out of memory");
        goto fail;
    }
    if (!pki_name_ok(conf->ns) || !pki_name_ok(conf->sa)) {
        err_set(err, "node.namespace and node.serviceAccount must be "
                     "DNS-style names (a-z 0-9 - .) for a SPIFFE ID");
        goto fail;
    }
    if (!conf->enabled) {
        n->dns = dns_cache_new(base, &conf->dns, no_change, NULL, err);
        if (n->dns == NULL)
            goto fail;
    }
    if (conf->enabled         ? start_ca(n, conf, err) < 0
        : istiod_wanted(conf) ? start_istiod(n, conf, err) < 0
                              : start_join(n, conf, err) < 0)
        goto fail;
    return n;
fail:
    ca_node_free(n);
    return NULL;
}

struct ca_identity *ca_node_identity(struct ca_node *n)
{
    return &n->self.holder;
}

void ca_node_store_status(const struct ca_node *n,
                          struct ca_node_store_status *out)
{
    const struct slot *s = &n->self;

    out->unstored = s->unstored != NULL;
    out->failures = s->store_failures;
    out->error = s->unstored != NULL ? s->store_error : NULL;
    out->renew_failures = s->renew_failures;
    out->renew_error = s->renew_error;
    out->expired = 0;
    {
        struct ca_cred *cur =
            ca_identity_current((struct ca_identity *)&s->holder);
        out->expired = cur != NULL && cur->not_after <= (int64_t)time(NULL);
        ca_cred_unref(cur);
    }
}

const struct addr *ca_node_server_addr(const struct ca_node *n)
{
    return n->srv ? ca_server_addr(n->srv) : NULL;
}

int ca_node_listen_fd(const struct ca_node *n)
{
    return n->srv ? ca_server_listen_fd(n->srv) : -1;
}

void ca_node_free(struct ca_node *n)
{
    if (n == NULL)
        return;
    ca_server_free(n->srv);
    slot_dispose(&n->server);
    slot_dispose(&n->self);
    ca_free(n->ca);
    /* After the slots: a renewal in flight resolves through it. */
    dns_cache_free(n->dns);
    for (size_t i = 0; i < sizeof(n->icf_strs) / sizeof(n->icf_strs[0]); i++)
        free(n->icf_strs[i]);
    for (size_t i = 0; i < n->nserver_names; i++)
        free(n->server_names[i]);
    free(n->server_names);
    free(n->join_key_path);
    free(n->identity_dir);
    free(n->join_url);
    free(n);
}
