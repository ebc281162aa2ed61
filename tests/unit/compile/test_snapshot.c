/*
 * Unit tests of src/compile/snapshot.c: snapshots built from small
 * bootstraps and resource sets, the parts kept by structural identity
 * across snapshots (the same conf, the same cluster with its counters),
 * and the difference between two snapshots (kept, changed, added,
 * removed). Listeners bind unix sockets in a temporary directory, and
 * Gateway listeners a loopback port nobody uses.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include "compile/snapshot.h"
#include "config/bootstrap.h"
#include "config/resource.h"
#include "core/buf.h"
#include "core/log.h"
#include "net/listener.h"
#include "net/plistener.h"
#include "proxy/http_listener.h"
#include "upstream/cluster.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/strait-snapXXXXXX");
    return mkdtemp(dir) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    char path[128];
    static const char *const names[] = {"t1", "t2", "t3", "h1"};

    (void)state;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    return rmdir(dir);
}

/* A bootstrap of tcp listeners t1..t3 (those named in tcp, each relaying
 * to 127.0.0.1:port) and, with http set, the HTTP listener h1 routing to
 * cluster c1; clusters c1 and c2 with the given endpoint ports. */
static struct bootstrap *boot(const char *tcp, int t1_port, int c1_port,
                              int c2_port, int http)
{
    char text[4096];
    size_t n = 0;
    char *err = NULL;
    struct bootstrap *bs;

    n += (size_t)snprintf(text + n, sizeof(text) - n, "listeners:\n");
    for (const char *p = tcp; *p != '\0'; p++)
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "  - {name: t%c, address: \"unix:%s/t%c\", "
                              "upstreams: [\"127.0.0.1:%d\"]}\n",
                              *p, dir, *p, *p == '1' ? t1_port : 9);
    if (http)
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "  - name: h1\n"
                              "    address: \"unix:%s/h1\"\n"
                              "    protocol: http\n"
                              "    routes: [{host: \"*\", pathPrefix: /, "
                              "cluster: c1}]\n",
                              dir);
    snprintf(text + n, sizeof(text) - n,
             "clusters:\n"
             "  - {name: c1, endpoints: [\"127.0.0.1:%d\"]}\n"
             "  - {name: c2, endpoints: [\"127.0.0.1:%d\"]}\n",
             c1_port, c2_port);
    bs = bootstrap_parse(text, strlen(text), "b.yaml", &err);
    if (bs == NULL)
        fail_msg("bootstrap: %s", err);
    return bs;
}

static struct snapshot *build(const struct bootstrap *bs,
                              const struct resource_set *set,
                              const struct compile_dns *dns,
                              const struct snapshot *prev)
{
    struct compile_inputs in;
    struct snapshot *s = NULL;
    char *err = NULL;

    memset(&in, 0, sizeof(in));
    in.bs = bs;
    in.set = set;
    in.nworkers = 1;
    in.dns = dns;
    if (snapshot_build(&in, prev, &s, &err) < 0)
        fail_msg("snapshot_build: %s", err ? err : "?");
    return s;
}

static const struct snapshot_change_entry *entry(const struct snapshot_diff *d,
                                                 const char *name)
{
    for (size_t i = 0; i < d->n; i++) {
        const struct snapshot_listener *l =
            d->v[i].next ? d->v[i].next : d->v[i].prev;
        if (strcmp(l->name, name) == 0)
            return &d->v[i];
    }
    fail_msg("no entry for %s", name);
    return NULL;
}

/* Kept: the same conf, sockets and stats. Changed: a new conf on the old
 * one's sockets, with its stats. Added and removed by name. */
static void test_diff_kept_changed_added_removed(void **state)
{
    struct bootstrap *a = boot("12", 7001, 81, 82, 1);
    struct bootstrap *b = boot("13", 7002, 81, 82, 1);
    struct snapshot *s1 = build(a, NULL, NULL, NULL);
    struct snapshot *s2 = build(b, NULL, NULL, s1);
    const struct snapshot_listener *o1, *n1, *oh, *nh;
    const struct snapshot_change_entry *e;
    struct snapshot_diff d;

    (void)state;
    assert_int_equal(snapshot_diff(s1, s2, &d), 0);
    assert_int_equal(d.n, 4);
    /* t1 relays elsewhere now: changed, on t1's sockets. */
    e = entry(&d, "t1");
    assert_int_equal(e->change, SNAPSHOT_CHANGED);
    o1 = snapshot_listener_find(s1, "t1");
    n1 = snapshot_listener_find(s2, "t1");
    assert_ptr_equal(e->prev, o1);
    assert_ptr_equal(e->next, n1);
    assert_ptr_not_equal(o1->cl.conf, n1->cl.conf);
    assert_ptr_equal(o1->socks, n1->socks);
    assert_ptr_equal(o1->stats, n1->stats);
    assert_false(snapshot_id_equal(&o1->id, &n1->id));
    assert_int_equal(n1->cl.ops->kind, PLISTENER_L4);
    /* h1 and its clusters did not change: kept, the same conf. */
    e = entry(&d, "h1");
    assert_int_equal(e->change, SNAPSHOT_KEPT);
    oh = snapshot_listener_find(s1, "h1");
    nh = snapshot_listener_find(s2, "h1");
    assert_ptr_equal(oh->cl.conf, nh->cl.conf);
    assert_ptr_equal(oh->socks, nh->socks);
    assert_true(snapshot_id_equal(&oh->id, &nh->id));
    assert_int_equal(nh->cl.ops->kind, PLISTENER_HTTP);
    assert_non_null(snapshot_listener_http(nh));
    assert_null(snapshot_listener_http(n1));
    assert_int_equal(entry(&d, "t3")->change, SNAPSHOT_ADDED);
    assert_null(entry(&d, "t3")->prev);
    assert_int_equal(entry(&d, "t2")->change, SNAPSHOT_REMOVED);
    assert_null(entry(&d, "t2")->next);
    snapshot_diff_dispose(&d);

    /* From nothing, everything is added. */
    assert_int_equal(snapshot_diff(NULL, s1, &d), 0);
    assert_int_equal(d.n, 3);
    for (size_t i = 0; i < d.n; i++)
        assert_int_equal(d.v[i].change, SNAPSHOT_ADDED);
    snapshot_diff_dispose(&d);
    snapshot_unref(s2);
    snapshot_unref(s1);
    bootstrap_free(b);
    bootstrap_free(a);
}

/* A cluster kept by identity is the same object across snapshots, its
 * counters going on; a cluster whose endpoint changed is new, and so is
 * the HTTP listener routing to the clusters (it indexes them). */
static void test_cluster_kept_with_counters(void **state)
{
    struct bootstrap *a = boot("1", 7001, 81, 82, 1);
    struct bootstrap *b = boot("1", 7001, 81, 83, 1);
    struct snapshot *s1 = build(a, NULL, NULL, NULL);
    struct snapshot *s2, *s3;
    struct cluster_counters sum;
    struct snapshot_diff d;

    (void)state;
    assert_int_equal(s1->nclusters, 2);
    s1->clusters[0]->w[0].rq_total = 7;
    s2 = build(b, NULL, NULL, s1);
    assert_ptr_equal(s2->clusters[0], s1->clusters[0]);
    cluster_sum(s2->clusters[0], &sum);
    assert_int_equal(sum.rq_total, 7);
    assert_true(snapshot_id_equal(&s1->cluster_ids[0], &s2->cluster_ids[0]));
    /* c2's endpoint changed: a new cluster, a new identity. */
    assert_ptr_not_equal(s2->clusters[1], s1->clusters[1]);
    assert_false(snapshot_id_equal(&s1->cluster_ids[1], &s2->cluster_ids[1]));
    cluster_sum(s2->clusters[1], &sum);
    assert_int_equal(sum.rq_total, 0);
    assert_int_equal(snapshot_diff(s1, s2, &d), 0);
    assert_int_equal(entry(&d, "h1")->change, SNAPSHOT_CHANGED);
    assert_int_equal(entry(&d, "t1")->change, SNAPSHOT_KEPT);
    snapshot_diff_dispose(&d);
    /* The admin's view lists the kept object. */
    assert_ptr_equal(s2->cluster_view[0], s1->clusters[0]);

    /* Nothing changed at all: every part is kept. */
    s3 = build(b, NULL, NULL, s2);
    assert_ptr_equal(s3->clusters[0], s1->clusters[0]);
    assert_ptr_equal(s3->clusters[1], s2->clusters[1]);
    assert_int_equal(snapshot_diff(s2, s3, &d), 0);
    for (size_t i = 0; i < d.n; i++)
        assert_int_equal(d.v[i].change, SNAPSHOT_KEPT);
    snapshot_diff_dispose(&d);
    snapshot_unref(s3);
    snapshot_unref(s2);
    snapshot_unref(s1);
    bootstrap_free(b);
    bootstrap_free(a);
}

/* A reference taken on a snapshot keeps it (and its parts) alive after
 * its builder drops its own. */
static void test_refcount(void **state)
{
    struct bootstrap *a = boot("1", 7001, 81, 82, 0);
    struct snapshot *s1 = build(a, NULL, NULL, NULL);

    (void)state;
    assert_ptr_equal(snapshot_ref(s1), s1);
    assert_int_equal(s1->refs, 2);
    snapshot_unref(s1);
    assert_int_equal(s1->refs, 1);
    assert_non_null(snapshot_listener_find(s1, "t1"));
    snapshot_unref(s1);
    snapshot_unref(NULL);
    bootstrap_free(a);
}

/* ---- L4 Gateway listeners: DNS answers and resources ------------------ */

/* What the fake DNS answers for db.example.test. */
static const char *answer = "127.0.0.5";
static int lookups;

static size_t fake_lookup(void *arg, const char *name,
                          void (*each)(void *ctx, const char *ip), void *ctx)
{
    (void)arg;
    lookups++;
    if (strcmp(name, "db.example.test") != 0)
        return 0;
    each(ctx, answer);
    return 1;
}

static int unused_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* A TCP Gateway server relaying to db.example.test (resolution DNS), and
 * extra documents. */
static struct resource_set *l4_set(int port, const char *extra)
{
    char text[4096];
    struct buf errs;
    int nerr = 0;
    struct resource_set *set;

    snprintf(text, sizeof(text),
             "apiVersion: networking.istio.io/v1\nkind: Gateway\n"
             "metadata: {name: gw, namespace: default}\n"
             "spec:\n  selector: {}\n  servers:\n"
             "  - port: {number: %d, name: tcp, protocol: TCP}\n"
             "    bind: 127.0.0.1\n    hosts: [\"*\"]\n"
             "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"
             "metadata: {name: db, namespace: default}\n"
             "spec: {hosts: [db.example.test], resolution: DNS, "
             "ports: [{number: 5432, name: tcp, protocol: TCP}]}\n"
             "---\napiVersion: networking.istio.io/v1\n"
             "kind: VirtualService\n"
             "metadata: {name: db, namespace: default}\n"
             "spec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  tcp:\n"
             "  - route: [{destination: {host: db.example.test, "
             "port: {number: 5432}}}]\n%s",
             port, extra);
    buf_init(&errs, 1 << 20);
    set = resource_load_mem(text, strlen(text), "r.yaml", &errs, &nerr);
    if (set == NULL || nerr != 0)
        fail_msg("resources: %s", buf_cstr(&errs));
    buf_dispose(&errs);
    return set;
}

static const char HTTP_VS[] =
    "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\n"
    "metadata: {name: web, namespace: default}\n"
    "spec:\n  hosts: [web.example.test]\n  gateways: [gw]\n  http:\n"
    "  - route: [{destination: {host: web.example.test}}]\n";

/*
 * An L4 listener's identity holds what its rules were compiled from: a
 * new DNS answer for the name its cluster uses changes it; a resource
 * change its rules do not read (an HTTP-only VirtualService) keeps it;
 * the same answers keep it without compiling anything new.
 */
static void test_l4_identity_follows_dns_answers_and_resources(void **state)
{
    static const char boot_text[] = "node: {name: n, namespace: default}\n";
    const struct compile_dns dns = {fake_lookup, NULL, NULL};
    int port = unused_port();
    struct resource_set *r1 = l4_set(port, ""), *r2 = l4_set(port, HTTP_VS);
    char *err = NULL;
    struct bootstrap *bs =
        bootstrap_parse(boot_text, strlen(boot_text), "b.yaml", &err);
    struct snapshot *s1, *s2, *s3, *s4;
    const struct snapshot_listener *l1, *l2, *l3, *l4;
    struct snapshot_diff d;

    (void)state;
    assert_non_null(bs);
    answer = "127.0.0.5";
    s1 = build(bs, r1, &dns, NULL);
    assert_int_equal(s1->n, 1);
    l1 = &s1->v[0];
    assert_int_equal(l1->cl.ops->kind, PLISTENER_L4);
    assert_int_equal(l1->ndns_names, 1);
    assert_string_equal(l1->dns_names[0], "db.example.test");

    /* Same inputs: kept; the name was asked again, nothing compiled. */
    lookups = 0;
    s2 = build(bs, r1, &dns, s1);
    l2 = &s2->v[0];
    assert_ptr_equal(l2->cl.conf, l1->cl.conf);
    assert_int_equal(lookups, 1);
    /* Its cluster stays in the snapshot (the admin lists it). */
    assert_int_equal(s2->gwclusters.n, s1->gwclusters.n);
    assert_true(s2->ncluster_view >= 1);

    /* A resource its rules do not read: still kept. */
    s3 = build(bs, r2, &dns, s2);
    l3 = &s3->v[0];
    assert_ptr_equal(l3->cl.conf, l1->cl.conf);
    assert_true(snapshot_id_equal(&l3->id, &l1->id));

    /* A new DNS answer: changed, on the same sockets. */
    answer = "127.0.0.6";
    s4 = build(bs, r2, &dns, s3);
    l4 = &s4->v[0];
    assert_ptr_not_equal(l4->cl.conf, l3->cl.conf);
    assert_false(snapshot_id_equal(&l4->id, &l3->id));
    assert_true(snapshot_id_equal(&l4->base, &l3->base));
    assert_ptr_equal(l4->socks, l3->socks);
    assert_int_equal(snapshot_diff(s3, s4, &d), 0);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.v[0].change, SNAPSHOT_CHANGED);
    snapshot_diff_dispose(&d);

    snapshot_unref(s4);
    snapshot_unref(s3);
    snapshot_unref(s2);
    snapshot_unref(s1);
    resource_set_free(r2);
    resource_set_free(r1);
    bootstrap_free(bs);
}

/* ---- Gateway HTTP listeners: routes kept by identity ------------------ */

/* An HTTP Gateway gw on port (selected), a Gateway other (not selected),
 * the VirtualService web bound to gw routing to dest, and extra. */
static struct resource_set *http_set(int port, const char *dest,
                                     const char *extra)
{
    char text[4096];
    struct buf errs;
    int nerr = 0;
    struct resource_set *set;

    snprintf(text, sizeof(text),
             "apiVersion: networking.istio.io/v1\nkind: Gateway\n"
             "metadata: {name: gw, namespace: default}\n"
             "spec:\n  selector: {}\n  servers:\n"
             "  - port: {number: %d, name: http, protocol: HTTP}\n"
             "    bind: 127.0.0.1\n    hosts: [\"*\"]\n"
             "---\napiVersion: networking.istio.io/v1\nkind: Gateway\n"
             "metadata: {name: other, namespace: default}\n"
             "spec:\n  selector: {istio: elsewhere}\n  servers:\n"
             "  - port: {number: 80, name: http, protocol: HTTP}\n"
             "    hosts: [\"*\"]\n"
             "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\n"
             "metadata: {name: web, namespace: default}\n"
             "spec: {hosts: [web.example.test, api.example.test], "
             "resolution: STATIC, endpoints: [{address: 127.0.0.9}], "
             "ports: [{number: 80, name: http, protocol: HTTP}]}\n"
             "---\napiVersion: networking.istio.io/v1\n"
             "kind: VirtualService\n"
             "metadata: {name: web, namespace: default}\n"
             "spec:\n  hosts: [web.example.test]\n  gateways: [gw]\n  http:\n"
             "  - route: [{destination: {host: %s}}]\n%s",
             port, dest, extra);
    buf_init(&errs, 1 << 20);
    set = resource_load_mem(text, strlen(text), "r.yaml", &errs, &nerr);
    if (set == NULL || nerr != 0)
        fail_msg("resources: %s", buf_cstr(&errs));
    buf_dispose(&errs);
    return set;
}

static const char OTHER_VS[] =
    "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\n"
    "metadata: {name: elsewhere, namespace: default}\n"
    "spec:\n  hosts: [web.example.test]\n  gateways: [other]\n  http:\n"
    "  - route: [{destination: {host: api.example.test}}]\n";

/* routes() is the routes object l routes by now (not a reference). */
static const struct http_routes *routes(const struct snapshot_listener *l)
{
    struct http_routes *r =
        http_listener_conf_routes(snapshot_listener_http(l));

    assert_non_null(r);
    http_routes_unref(r); /* the conf holds it */
    return r;
}

/*
 * A Gateway HTTP listener's routes are kept when what they are compiled
 * from did not change: an unrelated resource (a VirtualService bound to
 * another Gateway) keeps the routes object; a change to a bound
 * VirtualService compiles new routes into the kept listener.
 */
static void test_gateway_routes_kept_by_identity(void **state)
{
    static const char boot_text[] = "node: {name: n, namespace: default}\n";
    int port = unused_port();
    struct resource_set *r1 = http_set(port, "web.example.test", "");
    struct resource_set *r2 = http_set(port, "web.example.test", OTHER_VS);
    struct resource_set *r3 = http_set(port, "api.example.test", OTHER_VS);
    char *err = NULL;
    struct bootstrap *bs =
        bootstrap_parse(boot_text, strlen(boot_text), "b.yaml", &err);
    struct snapshot *s1, *s2, *s3, *s4;
    const struct http_routes *rt1;

    (void)state;
    assert_non_null(bs);
    s1 = build(bs, r1, NULL, NULL);
    assert_int_equal(s1->n, 1);
    assert_int_equal(s1->v[0].cl.ops->kind, PLISTENER_HTTP);
    rt1 = routes(&s1->v[0]);
    assert_non_null(s1->v[0].routes_id.bytes);

    /* A VirtualService bound to another Gateway: the same listener, the
     * same routes object, its cluster still listed. */
    s2 = build(bs, r2, NULL, s1);
    assert_ptr_equal(s2->v[0].cl.conf, s1->v[0].cl.conf);
    assert_ptr_equal(routes(&s2->v[0]), rt1);
    assert_true(snapshot_id_equal(&s2->v[0].routes_id, &s1->v[0].routes_id));
    assert_int_equal(s2->gwclusters.n, s1->gwclusters.n);
    assert_int_equal(s2->ncluster_view, s1->ncluster_view);

    /* The bound VirtualService changed: new routes staged for the same
     * listener. A snapshot built and dropped changes nothing in effect. */
    s3 = build(bs, r3, NULL, s2);
    assert_ptr_equal(s3->v[0].cl.conf, s1->v[0].cl.conf);
    assert_non_null(s3->v[0].staged);
    assert_ptr_equal(routes(&s3->v[0]), rt1);
    assert_false(snapshot_id_equal(&s3->v[0].routes_id, &s2->v[0].routes_id));
    snapshot_unref(s3);
    assert_ptr_equal(routes(&s2->v[0]), rt1);

    /* Built again and committed (published): the listener routes by
     * them; a second commit changes nothing. */
    s3 = build(bs, r3, NULL, s2);
    snapshot_commit(s3);
    assert_null(s3->v[0].staged);
    assert_ptr_not_equal(routes(&s3->v[0]), rt1);
    rt1 = routes(&s3->v[0]);
    snapshot_commit(s3);
    assert_ptr_equal(routes(&s3->v[0]), rt1);

    /* And nothing changed since: kept again, nothing staged. */
    s4 = build(bs, r3, NULL, s3);
    assert_null(s4->v[0].staged);
    assert_ptr_equal(routes(&s4->v[0]), routes(&s3->v[0]));

    snapshot_unref(s4);
    snapshot_unref(s3);
    snapshot_unref(s2);
    snapshot_unref(s1);
    resource_set_free(r3);
    resource_set_free(r2);
    resource_set_free(r1);
    bootstrap_free(bs);
}

/* A listener that cannot be built fails the whole build and leaves prev
 * as it was. */
static void test_failed_build_changes_nothing(void **state)
{
    struct bootstrap *a = boot("1", 7001, 81, 82, 0);
    struct snapshot *s1 = build(a, NULL, NULL, NULL);
    struct bootstrap *bad;
    struct compile_inputs in;
    struct snapshot *s2 = NULL;
    char *err = NULL;
    static const char text[] =
        "listeners:\n  - {name: x, address: \"unix:/nonexistent-dir/x\", "
        "upstreams: [\"127.0.0.1:9\"]}\n";

    (void)state;
    bad = bootstrap_parse(text, strlen(text), "b.yaml", &err);
    assert_non_null(bad);
    memset(&in, 0, sizeof(in));
    in.bs = bad;
    in.nworkers = 1;
    assert_int_equal(snapshot_build(&in, s1, &s2, &err), -1);
    assert_null(s2);
    assert_non_null(err);
    assert_non_null(strstr(err, "listener x: "));
    free(err);
    assert_int_equal(s1->refs, 1);
    assert_non_null(snapshot_listener_find(s1, "t1")->socks);
    snapshot_unref(s1);
    bootstrap_free(bad);
    bootstrap_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_diff_kept_changed_added_removed,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_kept_with_counters, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_refcount, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_l4_identity_follows_dns_answers_and_resources, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_gateway_routes_kept_by_identity,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_build_changes_nothing,
                                        setup, teardown),
    };

    log_configure(LOG_ERROR, LOG_TEXT, 2);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
