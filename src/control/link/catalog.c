/*
 * The catalog stream's lines: written by the exporting site from its
 * registry, read by the linked site and turned into registry entries (see
 * catalog.h). Reading is strict because what is read becomes resources
 * the linked site loads: a name, label or identity that would not load,
 * or that speaks for another trust domain, refuses the whole line.
 */
#include "config.h"

#include <openssl/sha.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/resource.h"
#include "control/ca/pki.h"
#include "control/link/catalog.h"
#include "core/buf.h"
#include "core/json.h"

/* --- writing ---------------------------------------------------------- */

/*
 * What is written must read back (catalog_decode() refuses a whole line
 * for one bad field): a port name, label, locality or weight another site
 * would refuse is left out or replaced here, and only service accounts of
 * this site's own trust domain are announced.
 */

static int dns_name_ok(const char *s)
{
    size_t n = strlen(s), lab = 0;

    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i <= n; i++) {
        char c = s[i];
        if (c == '.' || c == '\0') {
            if (lab == 0 || lab > 63 || s[i - 1] == '-')
                return 0;
            lab = 0;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || (c == '-' && lab > 0)))
            return 0;
        lab++;
    }
    return 1;
}

/* Label keys and values, port names and localities: a conservative
 * alphabet, so nothing read can change the meaning of the document it is
 * written into (it is JSON-escaped there too). */
static int token_ok(const char *s, size_t max, int empty_ok)
{
    size_t n = strlen(s);

    if ((n == 0 && !empty_ok) || n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' ||
              s[i] == '.' || s[i] == '/'))
            return 0;
    return 1;
}

static const char *label_value(const struct conf_strmap *m, const char *key)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->v[i].key, key) == 0)
            return m->v[i].val;
    return NULL;
}

static int exported(const struct resource *r)
{
    const char *v = label_value(&r->meta.labels, CATALOG_EXPORT_LABEL);

    return res_is_service(r) && v != NULL && strcmp(v, "true") == 0;
}

static void put_labels(struct buf *b, const struct conf_strmap *m)
{
    int first = 1;

    buf_puts(b, "{");
    for (size_t i = 0, n = 0; i < m->n && n < CATALOG_MAX_LABELS; i++) {
        if (!token_ok(m->v[i].key, 253, 0) || !token_ok(m->v[i].val, 63, 1))
            continue;
        n++;
        buf_puts(b, first ? "" : ",");
        first = 0;
        json_str(b, m->v[i].key);
        buf_puts(b, ":");
        json_str(b, m->v[i].val);
    }
    buf_puts(b, "}");
}

static void put_endpoint(struct buf *b, int *first, size_t *n,
                         const struct res_workload_entry *we)
{
    if (*n >= CATALOG_MAX_ENDPOINTS)
        return;
    (*n)++;
    buf_puts(b, *first ? "{\"labels\":" : ",{\"labels\":");
    *first = 0;
    put_labels(b, &we->labels);
    buf_puts(b, ",\"locality\":");
    json_str(b, we->locality != NULL && token_ok(we->locality, 253, 1)
                    ? we->locality
                    : "");
    buf_printf(b, ",\"weight\":%lld}",
               (long long)(we->weight <= 0        ? 1
                           : we->weight > 1000000 ? 1000000
                                                  : we->weight));
}

/* A SPIFFE ID into the serviceAccounts array, once: seen holds the ones
 * written so far, each followed by a newline. */
static void put_id(struct buf *b, struct buf *seen, const char *td,
                   const char *id)
{
    const char *p = buf_cstr(seen);
    size_t n = strlen(id);
    char *t = NULL;
    int ours = pki_spiffe_split(id, &t, NULL, NULL) == 0 && strcmp(t, td) == 0;

    size_t count = 0;

    free(t);
    for (const char *q = p; *q != '\0'; q++)
        count += *q == '\n';
    if (!ours || count >= 64)
        return;

    for (const char *q = p; (q = strstr(q, id)) != NULL; q++)
        if ((q == p || q[-1] == '\n') && q[n] == '\n')
            return;
    buf_puts(b, buf_len(seen) > 0 ? "," : "");
    json_str(b, id);
    buf_printf(seen, "%s\n", id);
}

static void put_san(struct buf *b, struct buf *seen, const char *td,
                    const char *ns, const char *sa)
{
    char *id;

    if (sa == NULL || sa[0] == '\0')
        return;
    id = pki_spiffe_make(td, ns, sa);
    if (id == NULL)
        return;
    put_id(b, seen, td, id);
    free(id);
}

static void put_service(struct buf *b, const struct resource_set *set,
                        const struct resource *r, const char *host,
                        const struct catalog_self *self)
{
    const struct res_service_entry *se = res_service_entry(r);
    struct buf seen;
    size_t neps = 0;
    int first = 1;

    buf_puts(b, "{\"hostname\":");
    json_str(b, host);
    buf_puts(b, ",\"ports\":[");
    for (size_t i = 0; i < se->ports.n && i < CATALOG_MAX_PORTS; i++) {
        const struct res_se_port *p =
            (const struct res_se_port *)se->ports.v + i;
        char pn[32];
        buf_printf(b, "%s{\"number\":%lld,\"name\":", i ? "," : "",
                   (long long)p->number);
        /* An unnamed port (a Kubernetes Service's only one) is named. */
        snprintf(pn, sizeof(pn), "port-%lld", (long long)p->number);
        json_str(b, p->name != NULL && p->name[0] != '\0' &&
                            token_ok(p->name, 63, 0) &&
                            strchr(p->name, '/') == NULL
                        ? p->name
                        : pn);
        buf_puts(b, ",\"protocol\":");
        json_str(b, res_protocol_name(p->protocol));
        buf_puts(b, "}");
    }
    buf_puts(b, "],\"serviceAccounts\":[");
    buf_init(&seen, 64 * 1024);
    for (size_t i = 0; i < se->subject_alt_names.n; i++)
        if (strncmp(se->subject_alt_names.v[i], "spiffe://", 9) == 0)
            put_id(b, &seen, self->trust_domain, se->subject_alt_names.v[i]);
    for (size_t i = 0; i < se->endpoints.n; i++)
        put_san(b, &seen, self->trust_domain, r->meta.ns,
                ((const struct res_workload_entry *)se->endpoints.v)[i]
                    .service_account);
    buf_dispose(&seen);
    buf_puts(b, "],\"endpoints\":[");
    for (size_t i = 0; i < se->endpoints.n; i++)
        put_endpoint(b, &first, &neps,
                     (const struct res_workload_entry *)se->endpoints.v + i);
    /* WorkloadEntries of its namespace its workloadSelector selects. */
    if (se->workload_selector.labels.n > 0)
        for (size_t i = 0; i < set->n; i++) {
            const struct resource *w = set->v[i];
            const struct res_workload_entry *we;
            if (w->kind != RES_WORKLOAD_ENTRY ||
                strcmp(w->meta.ns, r->meta.ns) != 0)
                continue;
            we = res_workload_entry(w);
            if (res_labels_match(&se->workload_selector.labels, &we->labels))
                put_endpoint(b, &first, &neps, we);
        }
    buf_puts(b, "]}");
}

int catalog_encode(struct buf *b, const struct resource_set *set,
                   const struct catalog_self *self, int64_t version)
{
    size_t nsvc = 0;
    int first = 1;

    buf_printf(b, "{\"type\":\"catalog\",\"version\":%lld,\"site\":",
               (long long)version);
    json_str(b, self->site);
    buf_puts(b, ",\"network\":");
    json_str(b, self->network);
    buf_puts(b, ",\"trustDomain\":");
    json_str(b, self->trust_domain);
    buf_puts(b, ",\"services\":[");
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_service_entry *se;
        if (!exported(r))
            continue;
        se = res_service_entry(r);
        /* A service without ports carries nothing a site could call. */
        if (se == NULL || se->ports.n == 0)
            continue;
        for (size_t h = 0; h < se->hosts.n && nsvc < CATALOG_MAX_SERVICES;
             h++) {
            char fq[300];
            if (strchr(se->hosts.v[h], '*') != NULL ||
                res_host_fqdn(se->hosts.v[h], r->meta.ns, set->domain, fq,
                              sizeof(fq)) < 0)
                continue;
            buf_puts(b, first ? "" : ",");
            first = 0;
            nsvc++;
            put_service(b, set, r, fq, self);
        }
    }
    return buf_puts(b, "]}\n");
}

/* --- reading ---------------------------------------------------------- */

static int fail(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* The member's string, or NULL when absent or not a string. */
static const char *str_of(const struct json *o, const char *key)
{
    struct slice s = json_string(json_get(o, key));

    return s.p != NULL && memchr(s.p, '\0', s.n) == NULL ? s.p : NULL;
}

static int int_of(const struct json *o, const char *key, int64_t min,
                  int64_t max, int64_t *out)
{
    const struct json *m = json_get(o, key);

    if (m == NULL || m->type != JSON_NUMBER || m->num < (double)min ||
        m->num > (double)max || m->num != (double)(int64_t)m->num)
        return -1;
    *out = (int64_t)m->num;
    return 0;
}

/* One of Istio's port protocols, as res_protocol_name() spells them. */
static int protocol_ok(const char *p)
{
    for (int64_t i = 0; strcmp(res_protocol_name(i), "?") != 0; i++)
        if (strcmp(res_protocol_name(i), p) == 0)
            return 1;
    return 0;
}

static int decode_ports(const struct json *arr, struct arena *a,
                        struct cat_service *s, char *why, size_t cap)
{
    size_t i = 0;

    if (arr == NULL || arr->type != JSON_ARRAY || arr->n == 0 ||
        arr->n > CATALOG_MAX_PORTS)
        return fail(why, cap, "service %s: ports must be 1 to %d entries",
                    s->hostname, CATALOG_MAX_PORTS);
    s->ports = arena_alloc(a, arr->n * sizeof(*s->ports));
    if (s->ports == NULL)
        return fail(why, cap, "out of memory");
    for (const struct json *p = arr->child; p != NULL; p = p->next, i++) {
        struct cat_port *cp = &s->ports[i];
        cp->name = str_of(p, "name");
        cp->protocol = str_of(p, "protocol");
        if (int_of(p, "number", 1, 65535, &cp->number) < 0)
            return fail(why, cap,
                        "service %s: ports[%zu].number must be 1 "
                        "to 65535",
                        s->hostname, i);
        if (cp->name == NULL || !token_ok(cp->name, 63, 0) ||
            strchr(cp->name, '/') != NULL)
            return fail(why, cap,
                        "service %s: ports[%zu].name must be a "
                        "port name",
                        s->hostname, i);
        if (cp->protocol == NULL || !protocol_ok(cp->protocol))
            return fail(why, cap,
                        "service %s: ports[%zu].protocol is not "
                        "one of Istio's",
                        s->hostname, i);
        for (size_t k = 0; k < i; k++)
            if (strcmp(s->ports[k].name, cp->name) == 0 ||
                s->ports[k].number == cp->number)
                return fail(why, cap,
                            "service %s: ports[%zu] repeats a "
                            "name or number",
                            s->hostname, i);
    }
    s->nports = i;
    return 0;
}

static int decode_endpoints(const struct json *arr, struct arena *a,
                            struct cat_service *s, char *why, size_t cap)
{
    size_t i = 0;

    if (arr == NULL || arr->type != JSON_ARRAY ||
        arr->n > CATALOG_MAX_ENDPOINTS)
        return fail(why, cap,
                    "service %s: endpoints must be an array of at "
                    "most %d",
                    s->hostname, CATALOG_MAX_ENDPOINTS);
    s->endpoints = arena_alloc(a, (arr->n + 1) * sizeof(*s->endpoints));
    if (s->endpoints == NULL)
        return fail(why, cap, "out of memory");
    for (const struct json *e = arr->child; e != NULL; e = e->next, i++) {
        struct cat_endpoint *ce = &s->endpoints[i];
        const struct json *lab = json_get(e, "labels");
        size_t k = 0;
        if (e->type != JSON_OBJECT)
            return fail(why, cap,
                        "service %s: endpoints[%zu] must be an "
                        "object",
                        s->hostname, i);
        ce->locality = str_of(e, "locality");
        if (ce->locality == NULL)
            ce->locality = "";
        if (!token_ok(ce->locality, 253, 1))
            return fail(why, cap,
                        "service %s: endpoints[%zu].locality must "
                        "be region/zone/subzone",
                        s->hostname, i);
        ce->weight = 1;
        if (json_get(e, "weight") != NULL &&
            int_of(e, "weight", 1, 1000000, &ce->weight) < 0)
            return fail(why, cap,
                        "service %s: endpoints[%zu].weight must be "
                        "1 to 1000000",
                        s->hostname, i);
        if (lab != NULL &&
            (lab->type != JSON_OBJECT || lab->n > CATALOG_MAX_LABELS))
            return fail(why, cap,
                        "service %s: endpoints[%zu].labels must be "
                        "an object of at most %d",
                        s->hostname, i, CATALOG_MAX_LABELS);
        ce->labels =
            arena_alloc(a, (lab ? lab->n + 1 : 1) * sizeof(*ce->labels));
        if (ce->labels == NULL)
            return fail(why, cap, "out of memory");
        for (const struct json *l = lab ? lab->child : NULL; l != NULL;
             l = l->next, k++) {
            const char *v = json_string(l).p;
            if (v == NULL || l->key.p == NULL || !token_ok(l->key.p, 253, 0) ||
                !token_ok(v, 63, 1))
                return fail(why, cap,
                            "service %s: endpoints[%zu].labels: "
                            "keys and values must be label text",
                            s->hostname, i);
            ce->labels[k].key = l->key.p;
            ce->labels[k].value = v;
        }
        ce->nlabels = k;
    }
    s->nendpoints = i;
    return 0;
}

static int decode_sans(const struct json *arr, struct arena *a,
                       struct cat_service *s, const char *td, char *why,
                       size_t cap)
{
    size_t i = 0;

    if (arr == NULL)
        return 0;
    if (arr->type != JSON_ARRAY || arr->n > 64)
        return fail(why, cap,
                    "service %s: serviceAccounts must be an array "
                    "of at most 64",
                    s->hostname);
    s->sans = arena_alloc(a, (arr->n + 1) * sizeof(*s->sans));
    if (s->sans == NULL)
        return fail(why, cap, "out of memory");
    for (const struct json *j = arr->child; j != NULL; j = j->next, i++) {
        const char *id = json_string(j).p;
        char *t = NULL, *ns = NULL, *sa = NULL;
        int ok = id != NULL && pki_spiffe_split(id, &t, &ns, &sa) == 0 &&
                 strcmp(t, td) == 0;
        free(t);
        free(ns);
        free(sa);
        if (!ok)
            return fail(why, cap,
                        "service %s: serviceAccounts[%zu] '%s' is not a "
                        "SPIFFE ID of the link's trust domain %s (a site "
                        "speaks only for its own)",
                        s->hostname, i, id ? id : "?", td);
        s->sans[i] = id;
    }
    s->nsans = i;
    return 0;
}

int catalog_decode(const char *p, size_t n, const char *trust_domain,
                   struct arena *a, struct catalog *c, char *why, size_t cap)
{
    const struct json *root, *svcs;
    const char *type, *jwhy;
    size_t i = 0;

    memset(c, 0, sizeof(*c));
    if (n > CATALOG_MAX_LINE)
        return fail(why, cap, "catalog line longer than %u bytes",
                    CATALOG_MAX_LINE);
    root = json_parse_max(a, p, n, 10, 0, JSON_NO_DUPLICATES | JSON_ANY_SIZE,
                          &jwhy);
    if (root == NULL)
        return fail(why, cap, "catalog line is not JSON: %s", jwhy);
    type = str_of(root, "type");
    if (root->type != JSON_OBJECT || type == NULL)
        return fail(why, cap, "catalog line without a type");
    if (strcmp(type, "ping") == 0) {
        c->type = CAT_PING;
        return 0;
    }
    if (strcmp(type, "catalog") != 0)
        return fail(why, cap, "unknown catalog line type '%s'", type);
    c->type = CAT_CATALOG;
    c->site = str_of(root, "site");
    c->network = str_of(root, "network");
    c->trust_domain = str_of(root, "trustDomain");
    if (int_of(root, "version", 0, INT64_C(1) << 52, &c->version) < 0 ||
        c->site == NULL || c->network == NULL || c->trust_domain == NULL)
        return fail(why, cap,
                    "catalog without version, site, network or "
                    "trustDomain");
    if (strcmp(c->trust_domain, trust_domain) != 0)
        return fail(why, cap,
                    "the remote site's trust domain is '%s' but the "
                    "MeshLink says '%s': set spec.trustDomain to '%s' (or "
                    "apply a MeshLink made by `strait link create` there)",
                    c->trust_domain, trust_domain, c->trust_domain);
    svcs = json_get(root, "services");
    if (svcs == NULL || svcs->type != JSON_ARRAY ||
        svcs->n > CATALOG_MAX_SERVICES)
        return fail(why, cap,
                    "catalog services must be an array of at most "
                    "%d",
                    CATALOG_MAX_SERVICES);
    c->services = arena_alloc(a, (svcs->n + 1) * sizeof(*c->services));
    if (c->services == NULL)
        return fail(why, cap, "out of memory");
    for (const struct json *s = svcs->child; s != NULL; s = s->next, i++) {
        struct cat_service *cs = &c->services[i];
        memset(cs, 0, sizeof(*cs));
        cs->hostname = str_of(s, "hostname");
        if (cs->hostname == NULL || !dns_name_ok(cs->hostname))
            return fail(why, cap, "services[%zu].hostname must be a DNS name",
                        i);
        for (size_t k = 0; k < i; k++)
            if (strcasecmp(c->services[k].hostname, cs->hostname) == 0)
                return fail(why, cap, "service %s is listed twice",
                            cs->hostname);
        if (decode_ports(json_get(s, "ports"), a, cs, why, cap) < 0 ||
            decode_sans(json_get(s, "serviceAccounts"), a, cs, trust_domain,
                        why, cap) < 0 ||
            decode_endpoints(json_get(s, "endpoints"), a, cs, why, cap) < 0)
            return -1;
    }
    c->nservices = i;
    return 0;
}

/* --- the merge point --------------------------------------------------- */

void catalog_resource_name(const char *link, const char *host, char out[64])
{
    uint8_t h[32];
    char hex[65];
    size_t ln = strlen(link);

    SHA256((const uint8_t *)host, strlen(host), h);
    pki_hex(h, sizeof(h), hex);
    /* A Kubernetes name is at most 253; keep the link's part short. */
    if (ln > 40)
        ln = 40;
    snprintf(out, 64, "%.*s-%.10s", (int)ln, link, hex);
}

int catalog_resource(struct buf *b, const struct catalog_link *link,
                     const struct cat_service *svc)
{
    char name[64];

    catalog_resource_name(link->name, svc->hostname, name);
    buf_puts(b, "{\"apiVersion\":\"networking.istio.io/v1\",\"kind\":"
                "\"ServiceEntry\",\"metadata\":{\"name\":");
    json_str(b, name);
    buf_puts(b, ",\"namespace\":");
    json_str(b, link->ns);
    buf_puts(b, ",\"labels\":{\"strait.io/meshlink\":");
    json_str(b, link->name);
    buf_puts(b, "}},\"spec\":{\"hosts\":[");
    json_str(b, svc->hostname);
    buf_puts(b, "],\"location\":\"MESH_INTERNAL\",\"resolution\":\"STATIC\","
                "\"ports\":[");
    for (size_t i = 0; i < svc->nports; i++) {
        buf_printf(b, "%s{\"number\":%lld,\"name\":", i ? "," : "",
                   (long long)svc->ports[i].number);
        json_str(b, svc->ports[i].name);
        buf_puts(b, ",\"protocol\":");
        json_str(b, svc->ports[i].protocol);
        buf_puts(b, "}");
    }
    buf_puts(b, "],\"subjectAltNames\":[");
    for (size_t i = 0; i < svc->nsans; i++) {
        buf_puts(b, i ? "," : "");
        json_str(b, svc->sans[i]);
    }
    /* No address: an endpoint of the remote network is reached only
     * through that network's gateway, which the link declares
     * (links_gateways(), compile/network.h). */
    buf_puts(b, "],\"endpoints\":[");
    for (size_t i = 0; i < svc->nendpoints; i++) {
        const struct cat_endpoint *e = &svc->endpoints[i];
        buf_puts(b, i ? ",{\"network\":" : "{\"network\":");
        json_str(b, link->network);
        if (e->locality[0] != '\0') {
            buf_puts(b, ",\"locality\":");
            json_str(b, e->locality);
        }
        buf_printf(b, ",\"weight\":%lld,\"labels\":{", (long long)e->weight);
        for (size_t k = 0; k < e->nlabels; k++) {
            buf_puts(b, k ? "," : "");
            json_str(b, e->labels[k].key);
            buf_puts(b, ":");
            json_str(b, e->labels[k].value);
        }
        buf_puts(b, "}}");
    }
    return buf_puts(b, "]}}");
}
