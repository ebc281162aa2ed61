/*
 * Unit tests for src/policy/authz.c, the run-time evaluator: Istio's order
 * (CUSTOM, DENY, then ALLOW; AUDIT marks) over rules built by hand in the
 * compiled form of authz-t.h, the lenient treatment of HTTP fields on TCP
 * connections, IP blocks, header conditions, the set's capacity, and the
 * path-template and claim-path parsers. Compiling policies from resources
 * is tested in tests/unit/compile/test_authz.c.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/arena.h"
#include "http/http.h"
#include "policy/authz.h"

/* A request from peer ip with method and path on port 80. */
static struct authz_decision check(const struct authz *a, const char *ip,
                                   const char *method, const char *path,
                                   const struct http_fields *headers, int tcp)
{
    struct sockaddr_in peer;
    struct authz_request r;
    struct authz_decision d;

    memset(&peer, 0, sizeof(peer));
    peer.sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, ip, &peer.sin_addr), 1);
    memset(&r, 0, sizeof(r));
    r.principal = slice_of("");
    r.peer = (const struct sockaddr *)&peer;
    r.host = slice_of("a.example.com");
    r.method = slice_of(method);
    r.path = slice_of(path);
    r.port = 80;
    r.headers = headers;
    r.tcp = tcp;
    authz_check(a, &r, &d);
    return d;
}

/* A rule whose only operation matches one value of kind k in the methods
 * (paths when paths) field. */
static struct authz_rule *op_rule(struct authz *a, enum authz_mkind k,
                                  const char *v, int paths)
{
    struct arena *mem = authz_arena(a);
    struct authz_matcher *m = arena_alloc(mem, sizeof(*m));
    struct authz_op *op = arena_alloc(mem, sizeof(*op));
    struct authz_rule *ru = arena_alloc(mem, sizeof(*ru));

    assert_non_null(m);
    assert_non_null(op);
    assert_non_null(ru);
    m->kind = k;
    m->s = arena_dup(mem, v, strlen(v));
    m->n = strlen(v);
    memset(op, 0, sizeof(*op));
    if (paths) {
        op->paths.v = m;
        op->paths.n = 1;
    } else {
        op->methods.v = m;
        op->methods.n = 1;
    }
    memset(ru, 0, sizeof(*ru));
    ru->to = op;
    ru->nto = 1;
    return ru;
}

static void test_no_set_allows(void **state)
{
    (void)state;
    struct authz_decision d = check(NULL, "10.0.0.1", "GET", "/", NULL, 0);

    assert_true(d.allowed);
    assert_false(d.audit);
    assert_null(d.policy);
    assert_int_equal(authz_count(NULL), 0);
}

/* DENY wins over ALLOW; with an ALLOW policy, what none matches is
 * denied without a policy name. */
static void test_deny_then_allow(void **state)
{
    (void)state;
    struct authz *a = authz_new(2);

    assert_non_null(a);
    assert_int_equal(authz_add(a, "ns/allow", AUTHZ_ALLOW,
                               op_rule(a, AUTHZ_M_EXACT, "GET", 0), 1),
                     0);
    assert_int_equal(authz_add(a, "ns/deny", AUTHZ_DENY,
                               op_rule(a, AUTHZ_M_PREFIX, "/admin", 1), 1),
                     0);
    assert_int_equal(authz_count(a), 2);

    struct authz_decision d = check(a, "10.0.0.1", "GET", "/admin/x", NULL, 0);
    assert_false(d.allowed);
    assert_string_equal(d.policy, "ns/deny");
    d = check(a, "10.0.0.1", "GET", "/x", NULL, 0);
    assert_true(d.allowed);
    assert_string_equal(d.policy, "ns/allow");
    d = check(a, "10.0.0.1", "POST", "/x", NULL, 0);
    assert_false(d.allowed);
    assert_null(d.policy);
    authz_unref(a);
}

/* CUSTOM denies (strait has no extension provider); AUDIT only marks. */
static void test_custom_and_audit(void **state)
{
    (void)state;
    struct authz *a = authz_new(2);

    assert_non_null(a);
    assert_int_equal(authz_add(a, "ns/audit", AUTHZ_AUDIT,
                               op_rule(a, AUTHZ_M_ANY, "", 0), 1),
                     0);
    assert_int_equal(authz_add(a, "ns/ext", AUTHZ_CUSTOM,
                               op_rule(a, AUTHZ_M_SUFFIX, ".php", 1), 1),
                     0);
    struct authz_decision d = check(a, "10.0.0.1", "GET", "/x", NULL, 0);
    assert_true(d.allowed);
    assert_true(d.audit);
    d = check(a, "10.0.0.1", "GET", "/x.php", NULL, 0);
    assert_false(d.allowed);
    assert_string_equal(d.policy, "ns/ext");
    authz_unref(a);
}

/* A policy without rules matches nothing: an ALLOW one allows nothing. */
static void test_allow_nothing(void **state)
{
    (void)state;
    struct authz *a = authz_new(1);

    assert_non_null(a);
    assert_int_equal(authz_add(a, "ns/none", AUTHZ_ALLOW, NULL, 0), 0);
    struct authz_decision d = check(a, "10.0.0.1", "GET", "/", NULL, 0);
    assert_false(d.allowed);
    assert_null(d.policy);
    authz_unref(a);
}

/* A set holds the n policies authz_new() made room for, no more. */
static void test_capacity(void **state)
{
    (void)state;
    struct authz *a = authz_new(1);

    assert_non_null(a);
    assert_int_equal(authz_add(a, "ns/one", AUTHZ_DENY, NULL, 0), 0);
    assert_int_equal(authz_add(a, "ns/two", AUTHZ_DENY, NULL, 0), -1);
    assert_int_equal(authz_count(a), 1);
    assert_ptr_equal(authz_ref(a), a);
    authz_unref(a);
    authz_unref(a);
}

/* On a TCP connection HTTP fields fail an ALLOW rule and are left out of
 * a DENY one, which so denies the connection. */
static void test_tcp_http_fields(void **state)
{
    (void)state;
    struct authz *allow = authz_new(1), *deny = authz_new(1);

    assert_non_null(allow);
    assert_non_null(deny);
    assert_int_equal(authz_add(allow, "ns/a", AUTHZ_ALLOW,
                               op_rule(allow, AUTHZ_M_EXACT, "GET", 0), 1),
                     0);
    assert_int_equal(authz_add(deny, "ns/d", AUTHZ_DENY,
                               op_rule(deny, AUTHZ_M_EXACT, "GET", 0), 1),
                     0);
    assert_false(check(allow, "10.0.0.1", "", "", NULL, 1).allowed);
    struct authz_decision d = check(deny, "10.0.0.1", "", "", NULL, 1);
    assert_false(d.allowed);
    assert_string_equal(d.policy, "ns/d");
    authz_unref(allow);
    authz_unref(deny);
}

/* source.ipBlocks: a prefix of bits; IPv4 only against IPv4. */
static void test_ip_blocks(void **state)
{
    (void)state;
    struct authz *a = authz_new(1);
    struct arena *mem;
    struct authz_cidr *c;
    struct authz_src *src;
    struct authz_rule *ru;

    assert_non_null(a);
    mem = authz_arena(a);
    c = arena_alloc(mem, sizeof(*c));
    src = arena_alloc(mem, sizeof(*src));
    ru = arena_alloc(mem, sizeof(*ru));
    assert_non_null(c);
    assert_non_null(src);
    assert_non_null(ru);
    memset(c, 0, sizeof(*c));
    c->family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, "10.1.0.0", c->addr), 1);
    c->bits = 12;
    memset(src, 0, sizeof(*src));
    src->ip.v = c;
    src->ip.n = 1;
    memset(ru, 0, sizeof(*ru));
    ru->from = src;
    ru->nfrom = 1;
    assert_int_equal(authz_add(a, "ns/ip", AUTHZ_ALLOW, ru, 1), 0);
    assert_true(check(a, "10.15.2.3", "GET", "/", NULL, 0).allowed);
    assert_false(check(a, "10.16.0.1", "GET", "/", NULL, 0).allowed);
    authz_unref(a);
}

/* request.headers[x-a]: any value of the header may match; an absent
 * header matches no value. */
static void test_header_condition(void **state)
{
    (void)state;
    struct authz *a = authz_new(1);
    struct arena *mem, req;
    struct authz_matcher *m;
    struct authz_cond *cnd;
    struct authz_rule *ru;
    struct http_fields h = {0};

    assert_non_null(a);
    mem = authz_arena(a);
    m = arena_alloc(mem, sizeof(*m));
    cnd = arena_alloc(mem, sizeof(*cnd));
    ru = arena_alloc(mem, sizeof(*ru));
    assert_non_null(m);
    assert_non_null(cnd);
    assert_non_null(ru);
    m->kind = AUTHZ_M_EXACT;
    m->s = "yes";
    m->n = 3;
    memset(cnd, 0, sizeof(*cnd));
    cnd->key = AUTHZ_K_HEADER;
    memcpy(cnd->header, "x-a", 4);
    cnd->values.v = m;
    cnd->values.n = 1;
    memset(ru, 0, sizeof(*ru));
    ru->when = cnd;
    ru->nwhen = 1;
    assert_int_equal(authz_add(a, "ns/h", AUTHZ_ALLOW, ru, 1), 0);

    arena_init(&req, 1024);
    assert_false(check(a, "10.0.0.1", "GET", "/", &h, 0).allowed);
    assert_int_equal(
        http_fields_add(&h, &req, slice_of("X-A"), slice_of("no"), 10), 0);
    assert_int_equal(
        http_fields_add(&h, &req, slice_of("x-a"), slice_of("yes"), 10), 0);
    assert_true(check(a, "10.0.0.1", "GET", "/", &h, 0).allowed);
    arena_dispose(&req);
    authz_unref(a);
}

static void test_claim_path(void **state)
{
    const char *names[10];
    size_t lens[10];
    (void)state;

    assert_int_equal(authz_claim_path("request.auth.claims[a]", names, lens),
                     1);
    assert_int_equal(
        authz_claim_path("request.auth.claims[a][bb][c]", names, lens), 3);
    assert_int_equal(lens[1], 2);
    assert_memory_equal(names[1], "bb", 2);
    assert_int_equal(authz_claim_path("request.auth.claims", NULL, NULL), -1);
    assert_int_equal(authz_claim_path("request.auth.claims[]", NULL, NULL), -1);
    assert_int_equal(authz_claim_path("request.auth.claims[a]x", NULL, NULL),
                     -1);
    assert_int_equal(authz_claim_path("request.auth.claims[a", NULL, NULL), -1);
}

static void test_path_templates(void **state)
{
    (void)state;
    assert_true(authz_path_match("/a/{*}", slice_of("/a/b")));
    assert_false(authz_path_match("/a/{*}", slice_of("/a/")));
    assert_false(authz_path_match("/a/{*}", slice_of("/a/b/c")));
    assert_true(authz_path_match("/a/{*}/c", slice_of("/a/b/c")));
    assert_true(authz_path_match("/a/{**}", slice_of("/a/b/c/d")));
    assert_true(authz_path_match("/a/{**}", slice_of("/a/")));
    assert_false(authz_path_match("/a/{**}", slice_of("/b/c")));
    assert_true(authz_path_match("/{*}/{*}", slice_of("/x/y")));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_set_allows),
        cmocka_unit_test(test_deny_then_allow),
        cmocka_unit_test(test_custom_and_audit),
        cmocka_unit_test(test_allow_nothing),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_tcp_http_fields),
        cmocka_unit_test(test_ip_blocks),
        cmocka_unit_test(test_header_condition),
        cmocka_unit_test(test_claim_path),
        cmocka_unit_test(test_path_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
