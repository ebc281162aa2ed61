/*
 * The DNS cache of the control thread (see dns.h). One entry per name,
 * with its addresses sorted (so equal answers compare equal whatever the
 * server's order) and one timer that both refreshes at the TTL and
 * retries after a failure.
 */
#include "config.h"

#include <arpa/inet.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/dns.h"
#include "core/err.h"
#include "core/list.h"
#include "core/log.h"
#include "event/timer.h"

/* More than this many addresses for one name are not used. */
#define DNS_MAX_ADDRS 64

struct dns_entry {
    struct list link;
    struct dns_cache *c;
    char *name;
    char (*ips)[INET6_ADDRSTRLEN];
    size_t n;
    unsigned mark;   /* the build that used it last */
    uint64_t min_ms; /* its users' minimum TTL (network gateways: 30 s) */
    int resolved;    /* an answer came at least once */
    int v6;          /* this query asks for AAAA */
    int dead;        /* swept while a query runs: freed by its callback */
    struct evdns_request *req;
    struct timer timer;
};

/* One dns_resolve(): in c->queries from start to free. */
struct dns_query {
    struct list link;
    struct dns_cache *c;
    char *name;
    int port;
    int v6;        /* this query asks for AAAA */
    int cancelled; /* by its owner: freed without a callback */
    int ok;
    const char *why;
    struct addr a;
    struct evdns_request *req;
    struct timer deliver; /* the callback, on the loop */
    dns_resolve_fn cb;
    void *arg;
};

struct dns_cache {
    struct event_base *base;
    struct evdns_base *dns;
    struct list entries;
    struct list dead;    /* swept entries whose cancelled query has not
                          * called back yet */
    struct list queries; /* dns_resolve() queries not freed yet */
    unsigned mark;
    uint64_t min_refresh_ms;
    dns_change_fn on_change;
    void *arg;
    struct timer notify; /* deferred: on_change once per loop turn */
    struct dns_stats st;
};

static void entry_free(struct dns_entry *e)
{
    timer_dispose(&e->timer);
    free(e->ips);
    free(e->name);
    free(e);
}

static void resolve(struct dns_entry *e);

static void arm(struct dns_entry *e, uint64_t ms)
{
    if (ms < e->c->min_refresh_ms)
        ms = e->c->min_refresh_ms;
    if (ms < e->min_ms)
        ms = e->min_ms;
    timer_arm(&e->timer, ms);
}

static void on_timer(void *arg)
{
    resolve(arg);
}

static int ip_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* Takes the answer if it differs from what e has; 1 when it did. */
static int take(struct dns_entry *e, char (*ips)[INET6_ADDRSTRLEN], size_t n)
{
    qsort(ips, n, sizeof(*ips), ip_cmp);
    if (e->resolved && n == e->n &&
        (n == 0 || memcmp(ips, e->ips, n * sizeof(*ips)) == 0)) {
        free(ips);
        return 0;
    }
    free(e->ips);
    e->ips = ips;
    e->n = n;
    e->resolved = 1;
    return 1;
}

static void on_answer(int result, char type, int count, int ttl,
                      void *addresses, void *arg)
{
    struct dns_entry *e = arg;
    struct dns_cache *c = e->c;
    char(*ips)[INET6_ADDRSTRLEN];
    size_t n = 0;

    e->req = NULL;
    if (e->dead) {
        list_del(&e->link);
        entry_free(e);
        return;
    }
    if (result == DNS_ERR_SHUTDOWN || result == DNS_ERR_CANCEL)
        return;
    if (result != DNS_ERR_NONE || count <= 0 ||
        (type != DNS_IPv4_A && type != DNS_IPv6_AAAA)) {
        /* No A record: ask for AAAA before calling it a failure (Envoy's
         * V4_PREFERRED). */
        if (!e->v6 && (result == DNS_ERR_NONE || result == DNS_ERR_NODATA ||
                       result == DNS_ERR_NOTEXIST)) {
            e->v6 = 1;
            resolve(e);
            return;
        }
        c->st.failures++;
        log_warn("dns: %s: %s; keeping %zu known address%s", e->name,
                 result != DNS_ERR_NONE ? evdns_err_to_string(result)
                                        : "no address",
                 e->n, e->n == 1 ? "" : "es");
        e->v6 = 0;
        arm(e, c->min_refresh_ms);
        return;
    }
    e->v6 = 0;
    if (count > DNS_MAX_ADDRS)
        count = DNS_MAX_ADDRS;
    ips = calloc((size_t)count, sizeof(*ips));
    if (ips == NULL) {
        arm(e, c->min_refresh_ms);
        return;
    }
    for (int i = 0; i < count; i++) {
        const void *a =
            type == DNS_IPv4_A
                ? (const void *)((const uint32_t *)addresses + i)
                : (const void *)((const uint8_t *)addresses + 16 * i);
        if (inet_ntop(type == DNS_IPv4_A ? AF_INET : AF_INET6, a, ips[n],
                      sizeof(ips[n])) != NULL)
            n++;
    }
    if (take(e, ips, n)) {
        c->st.changes++;
        log_info("dns: %s: %zu address%s, ttl %ds", e->name, n,
                 n == 1 ? "" : "es", ttl);
        timer_defer(&c->notify);
    }
    arm(e, ttl > 0 ? (uint64_t)ttl * 1000 : 0);
}

static void resolve(struct dns_entry *e)
{
    struct dns_cache *c = e->c;

    if (e->req != NULL)
        return;
    c->st.queries++;
    e->req = e->v6 ? evdns_base_resolve_ipv6(c->dns, e->name,
                                             DNS_QUERY_NO_SEARCH, on_answer, e)
                   : evdns_base_resolve_ipv4(c->dns, e->name,
                                             DNS_QUERY_NO_SEARCH, on_answer, e);
    /* evdns may answer at once (a failure) and have cleared e->req in the
     * callback already; a NULL return with no callback is a failure to
     * start, retried later. */
    if (e->req == NULL && !e->dead && !timer_armed(&e->timer))
        arm(e, c->min_refresh_ms);
}

static void query_free(struct dns_query *q)
{
    list_del(&q->link);
    timer_dispose(&q->deliver);
    free(q->name);
    free(q);
}

static void query_send(struct dns_query *q);

static void query_done(struct dns_query *q, const char *why)
{
    q->why = why;
    if (why != NULL)
        q->c->st.failures++;
    timer_defer(&q->deliver);
}

static void on_query_answer(int result, char type, int count, int ttl,
                            void *addresses, void *arg)
{
    struct dns_query *q = arg;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;

    (void)ttl;
    q->req = NULL;
    if (q->cancelled) {
        query_free(q);
        return;
    }
    if (result == DNS_ERR_SHUTDOWN || result == DNS_ERR_CANCEL) {
        query_done(q, "the resolver shut down");
        return;
    }
    if (result != DNS_ERR_NONE || count <= 0 ||
        (type != DNS_IPv4_A && type != DNS_IPv6_AAAA)) {
        /* No A record: ask for AAAA before calling it a failure (Envoy's
         * V4_PREFERRED). */
        if (!q->v6 && (result == DNS_ERR_NONE || result == DNS_ERR_NODATA ||
                       result == DNS_ERR_NOTEXIST)) {
            q->v6 = 1;
            query_send(q);
            return;
        }
        query_done(q, result != DNS_ERR_NONE ? evdns_err_to_string(result)
                                             : "no address");
        return;
    }
    memset(&q->a, 0, sizeof(q->a));
    if (type == DNS_IPv4_A) {
        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        sin.sin_port = htons((uint16_t)q->port);
        memcpy(&sin.sin_addr, addresses, 4);
        memcpy(&q->a.ss, &sin, sizeof(sin));
        q->a.len = sizeof(sin);
    } else {
        memset(&sin6, 0, sizeof(sin6));
        sin6.sin6_family = AF_INET6;
        sin6.sin6_port = htons((uint16_t)q->port);
        memcpy(&sin6.sin6_addr, addresses, 16);
        memcpy(&q->a.ss, &sin6, sizeof(sin6));
        q->a.len = sizeof(sin6);
    }
    q->ok = 1;
    query_done(q, NULL);
}

/*
 * The cache's own queries (evdns_base_resolve_*), not evdns's
 * getaddrinfo: a getaddrinfo request still in flight when the base is
 * freed is never given back (a leak at every exit with a name
 * unresolved), while these are freed with the base.
 */
static void query_send(struct dns_query *q)
{
    struct dns_cache *c = q->c;

    c->st.queries++;
    q->req = q->v6
                 ? evdns_base_resolve_ipv6(c->dns, q->name, DNS_QUERY_NO_SEARCH,
                                           on_query_answer, q)
                 : evdns_base_resolve_ipv4(c->dns, q->name, DNS_QUERY_NO_SEARCH,
                                           on_query_answer, q);
    /* evdns calls back on a later turn, never inside the call; NULL means
     * the query could not start and no callback comes. */
    if (q->req == NULL)
        query_done(q, "cannot start a DNS query");
}

static void on_deliver(void *arg)
{
    struct dns_query *q = arg;
    dns_resolve_fn cb = q->cb;
    void *cb_arg = q->arg;
    struct addr a = q->a;
    const char *why = q->why;
    int ok = q->ok;

    /* Freed before the call, which may start another query. */
    query_free(q);
    cb(cb_arg, ok ? &a : NULL, ok ? NULL : why);
}

/* RFC 6761 6.3: localhost and its subdomains are loopback, never asked. */
static int is_localhost(const char *name)
{
    size_t n = strlen(name);

    if (n > 0 && name[n - 1] == '.')
        n--;
    return (n == 9 && strncasecmp(name, "localhost", 9) == 0) ||
           (n > 10 && strncasecmp(name + n - 10, ".localhost", 10) == 0);
}

struct dns_query *dns_resolve(struct dns_cache *c, const char *name, int port,
                              dns_resolve_fn cb, void *arg)
{
    struct dns_query *q = calloc(1, sizeof(*q));

    if (q == NULL)
        return NULL;
    q->name = strdup(name);
    if (q->name == NULL) {
        free(q);
        return NULL;
    }
    q->c = c;
    q->port = port;
    q->cb = cb;
    q->arg = arg;
    timer_init(&q->deliver, c->base, on_deliver, q);
    list_append(&c->queries, &q->link);
    if (is_localhost(name)) {
        struct sockaddr_in sin;

        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        sin.sin_port = htons((uint16_t)port);
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        memcpy(&q->a.ss, &sin, sizeof(sin));
        q->a.len = sizeof(sin);
        q->ok = 1;
        timer_defer(&q->deliver);
        return q;
    }
    query_send(q);
    return q;
}

void dns_query_cancel(struct dns_query *q)
{
    if (q == NULL)
        return;
    if (q->req == NULL) {
        /* Answered (its callback is deferred) or never sent. */
        query_free(q);
        return;
    }
    /* Left to finish (within the resolver's timeout) and freed by its
     * callback, or by dns_cache_free() if the cache goes first: a query
     * evdns_cancel_request() cancelled would keep its handle until a
     * later loop turn, which at exit never comes. */
    q->cancelled = 1;
    timer_cancel(&q->deliver);
}

static void on_notify(void *arg)
{
    struct dns_cache *c = arg;

    c->on_change(c->arg);
}

/*
 * Reads the system resolver's configuration as glibc does: a missing
 * file, or one that names no nameserver, means the nameserver on this
 * host (127.0.0.1:53), which libevent sets when it finds none; strait
 * says so in a warning instead of refusing to start (a container image
 * often ships an empty resolv.conf). A file that cannot be read is an
 * error naming it.
 */
int dns_read_resolv_conf(struct evdns_base *dns, const char *path, char **err)
{
    int r = evdns_base_resolv_conf_parse(dns, DNS_OPTIONS_ALL, path);

    switch (r) {
    case 0:
        return 0;
    case 1:
        log_warn("dns: %s does not exist; using the nameserver at "
                 "127.0.0.1:53 (set dns.nameservers to choose)",
                 path);
        return 0;
    case 6:
        log_warn("dns: %s names no nameserver; using the nameserver at "
                 "127.0.0.1:53 (set dns.nameservers to choose)",
                 path);
        return 0;
    case 3:
        err_set(err, "dns: %s is too large to be a resolver configuration",
                path);
        return -1;
    case 4:
        err_set(err, "dns: out of memory reading %s", path);
        return -1;
    default:
        err_set(err, "dns: cannot read %s", path);
        return -1;
    }
}

struct dns_cache *dns_cache_new(struct event_base *base,
                                const struct dns_conf *conf,
                                dns_change_fn on_change, void *arg, char **err)
{
    struct dns_cache *c = calloc(1, sizeof(*c));
    char buf[32];

    *err = NULL;
    if (c == NULL)
        goto oom;
    c->base = base;
    LIST_INIT(&c->entries);
    LIST_INIT(&c->dead);
    LIST_INIT(&c->queries);
    c->min_refresh_ms = conf->min_refresh_ms ? conf->min_refresh_ms : 1;
    c->on_change = on_change;
    c->arg = arg;
    timer_init(&c->notify, base, on_notify, c);
    c->dns = evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (c->dns == NULL)
        goto oom;
    if (conf->nnameservers == 0 &&
        dns_read_resolv_conf(
            c->dns, conf->resolv_conf ? conf->resolv_conf : DNS_RESOLV_CONF,
            err) != 0) {
        dns_cache_free(c);
        return NULL;
    }
    for (size_t i = 0; i < conf->nnameservers; i++)
        if (evdns_base_nameserver_sockaddr_add(
                c->dns, (const struct sockaddr *)&conf->nameservers[i].ss,
                conf->nameservers[i].len, 0) != 0) {
            err_set(err, "dns: cannot add a nameserver");
            dns_cache_free(c);
            return NULL;
        }
    /* The timeout is in seconds, fractions allowed. */
    snprintf(buf, sizeof(buf), "%.3f",
             (double)(conf->timeout_ms ? conf->timeout_ms : 5000) / 1000.0);
    evdns_base_set_option(c->dns, "timeout:", buf);
    evdns_base_set_option(c->dns, "attempts:", "2");
    return c;
oom:
    err_set(err, "dns: out of memory");
    dns_cache_free(c);
    return NULL;
}

void dns_cache_free(struct dns_cache *c)
{
    if (c == NULL)
        return;
    /* Requests in flight go without calling back; the loop is not run
     * again for this cache. */
    if (c->dns != NULL)
        evdns_base_free(c->dns, 0);
    while (!LIST_EMPTY(&c->entries)) {
        struct dns_entry *e =
            LIST_ELEM(c->entries.next, struct dns_entry, link);
        list_del(&e->link);
        entry_free(e);
    }
    while (!LIST_EMPTY(&c->dead)) {
        struct dns_entry *e = LIST_ELEM(c->dead.next, struct dns_entry, link);
        list_del(&e->link);
        entry_free(e);
    }
    while (!LIST_EMPTY(&c->queries))
        query_free(LIST_ELEM(c->queries.next, struct dns_query, link));
    timer_dispose(&c->notify);
    free(c);
}

void dns_cache_mark(struct dns_cache *c)
{
    c->mark++;
}

void dns_cache_sweep(struct dns_cache *c)
{
    for (struct list *it = c->entries.next; it != &c->entries;) {
        struct dns_entry *e = LIST_ELEM(it, struct dns_entry, link);
        it = it->next;
        if (e->mark == c->mark)
            continue;
        list_del(&e->link);
        c->st.names--;
        if (e->req != NULL) {
            /* Its callback frees it (with DNS_ERR_CANCEL). */
            e->dead = 1;
            list_append(&c->dead, &e->link);
            timer_cancel(&e->timer);
            evdns_cancel_request(c->dns, e->req);
        } else {
            entry_free(e);
        }
    }
}

size_t dns_cache_lookup(struct dns_cache *c, const char *name,
                        void (*each)(void *arg, const char *ip), void *arg)
{
    return dns_cache_lookup_min(c, name, 0, each, arg);
}

size_t dns_cache_lookup_min(struct dns_cache *c, const char *name,
                            uint64_t min_ttl_ms,
                            void (*each)(void *arg, const char *ip), void *arg)
{
    struct dns_entry *e = NULL;

    for (struct list *it = c->entries.next; it != &c->entries; it = it->next) {
        struct dns_entry *x = LIST_ELEM(it, struct dns_entry, link);
        if (strcmp(x->name, name) == 0) {
            e = x;
            break;
        }
    }
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        if (e == NULL)
            return 0;
        e->c = c;
        e->min_ms = min_ttl_ms;
        e->name = strdup(name);
        timer_init(&e->timer, c->base, on_timer, e);
        if (e->name == NULL) {
            entry_free(e);
            return 0;
        }
        list_append(&c->entries, &e->link);
        c->st.names++;
        e->mark = c->mark;
        resolve(e);
        return 0;
    }
    e->mark = c->mark;
    if (e->min_ms < min_ttl_ms)
        e->min_ms = min_ttl_ms;
    for (size_t i = 0; i < e->n; i++)
        each(arg, e->ips[i]);
    return e->n;
}

void dns_cache_stats(const struct dns_cache *c, struct dns_stats *out)
{
    *out = c->st;
}
