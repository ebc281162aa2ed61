/*
 * Unit tests for src/config/res-luapolicy.c: a LuaPolicy with every field
 * and its defaults, schema errors with file:line:col, inline text that
 * does not compile (the YAML line of the Lua line), file names outside
 * the search path, and the fields strait refuses until it honours them.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/resource.h"
#include "core/buf.h"

struct fx {
    struct resource_set *set;
    struct buf errs;
    int nerr;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    buf_init(&f->errs, 1024 * 1024);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    resource_set_free(f->set);
    buf_dispose(&f->errs);
    free(f);
    return 0;
}

static const char *load(struct fx *f, const char *text)
{
    resource_set_free(f->set);
    buf_consume(&f->errs, buf_len(&f->errs));
    f->set =
        resource_load_mem(text, strlen(text), "lp.yaml", &f->errs, &f->nerr);
    assert_non_null(f->set);
    return buf_cstr(&f->errs);
}

#define HEAD                                                                   \
    "apiVersion: strait.io/v1alpha1\n"                                         \
    "kind: LuaPolicy\n"                                                        \
    "metadata: {name: p, namespace: web}\n"                                    \
    "spec:\n"

static void full_policy_loads_with_defaults(void **state)
{
    struct fx *f = *state;
    const char *e = load(f, HEAD "  targetRefs:\n"
                                 "  - {kind: Gateway, name: gw}\n"
                                 "  - {kind: VirtualService, name: vs, "
                                 "namespace: other}\n"
                                 "  hosts: [\"*.example.com\"]\n"
                                 "  routes: [{name: health}]\n"
                                 "  priority: 50\n"
                                 "  failurePolicy: Ignore\n"
                                 "  config: {header: x-a}\n"
                                 "  limits: {memory: 8Mi, burst: 20ms}\n"
                                 "  source:\n"
                                 "    inline: |\n"
                                 "      function on_request(h) end\n");
    const struct res_lua_policy *lp;
    const struct resource *r;

    if (f->nerr != 0)
        fail_msg("errors: %s", e);
    r = resource_find(f->set, RES_LUA_POLICY, "web", "p");
    assert_non_null(r);
    lp = res_lua_policy(r);
    assert_int_equal(lp->target_refs.n, 2);
    assert_int_equal(
        ((const struct res_lua_target_ref *)lp->target_refs.v)[1].kind,
        RES_LUA_REF_VIRTUAL_SERVICE);
    assert_int_equal(lp->priority, 50);
    assert_int_equal(lp->failure_policy, RES_LUA_IGNORE);
    assert_int_equal(lp->limits.memory, 8 << 20);
    assert_int_equal(lp->limits.burst_ms, 20);
    /* Defaults of the limits not given. */
    assert_int_equal(lp->limits.instruction_slice, 10000);
    assert_int_equal(lp->limits.request_ms, 4000);
    assert_int_equal(lp->limits.body_bytes, 1 << 20); /* bodyBytes: 1Mi */
    assert_int_equal(((const struct res_lua_route *)lp->routes.v)[0].disabled,
                     1);
    /* The top map, then its one value. */
    assert_int_equal(lp->config.n, 2);
    assert_int_equal(lp->config.v[0].type, CONF_TNODE_MAP);
    assert_string_equal(lp->config.v[1].key, "header");
    assert_string_equal(lp->config.v[1].str, "x-a");
    assert_string_equal(res_kind_name(r->kind), "LuaPolicy");
}

static void syntax_error_names_yaml_line(void **state)
{
    struct fx *f = *state;
    const char *e = load(f, HEAD "  source:\n"
                                 "    inline: |\n"
                                 "      function on_request(h)\n"
                                 "        if then\n"
                                 "      end\n");

    assert_int_equal(f->nerr, 1);
    /* HEAD is 4 lines, source: line 5, inline: line 6, Lua line 2 = 8. */
    assert_non_null(strstr(e, "lp.yaml:8:"));
    assert_non_null(strstr(e, "policy:2:"));
    assert_null(resource_find(f->set, RES_LUA_POLICY, "web", "p"));
}

/* policy.config takes lists and maps, nested; every scalar stays a
 * string. */
static void config_nested_lists_and_maps(void **state)
{
    struct fx *f = *state;
    const struct res_lua_policy *lp;
    const struct resource *r;
    const char *e = load(f, HEAD "  source: {inline: 'x = 1'}\n"
                                 "  config:\n"
                                 "    keys: [k1, k2]\n"
                                 "    limits: {rate: 10, paths: [/a, /b]}\n"
                                 "    n: 5\n");

    assert_int_equal(f->nerr, 0);
    (void)e;
    r = resource_find(f->set, RES_LUA_POLICY, "web", "p");
    assert_non_null(r);
    lp = r->spec;
    /* map{keys: list[k1, k2], limits: map{rate, paths: list[/a, /b]}, n} */
    assert_int_equal(lp->config.n, 10);
    assert_int_equal(lp->config.v[0].n, 3);
    assert_int_equal(lp->config.v[1].type, CONF_TNODE_LIST);
    assert_string_equal(lp->config.v[1].key, "keys");
    assert_string_equal(lp->config.v[3].str, "k2");
    assert_null(lp->config.v[3].key);
    assert_int_equal(lp->config.v[4].type, CONF_TNODE_MAP);
    assert_string_equal(lp->config.v[5].str, "10");
    assert_string_equal(lp->config.v[9].key, "n");
    assert_string_equal(lp->config.v[9].str, "5");
}

/* A config that is no map is an error at its line and column. */
static void config_wrong_shape_has_position(void **state)
{
    struct fx *f = *state;
    const char *e;

    e = load(f, HEAD "  source: {inline: 'x = 1'}\n"
                     "  config: [a, b]\n");
    assert_int_equal(f->nerr, 1);
    assert_non_null(strstr(e, "lp.yaml:6:11:"));
    assert_non_null(strstr(e, "spec.config: expected a mapping"));
    e = load(f, HEAD "  source: {inline: 'x = 1'}\n"
                     "  config: just-a-string\n");
    assert_int_equal(f->nerr, 1);
    assert_non_null(strstr(e, "lp.yaml:6:11:"));
    assert_non_null(strstr(e, "spec.config: expected a mapping"));
}

/* Depth 8 loads; 9 is refused at the value too deep. */
static void config_depth_limit_one_more(void **state)
{
    struct fx *f = *state;
    struct buf b;
    const char *e;

    for (int depth = 8; depth <= 9; depth++) {
        buf_init(&b, 4096);
        buf_puts(&b, HEAD "  source: {inline: 'x = 1'}\n  config: ");
        /* The top map is level 1; each {a: } one more; the innermost
         * holds a string. */
        for (int i = 1; i < depth; i++)
            buf_puts(&b, "{a: ");
        buf_puts(&b, "{a: x}");
        for (int i = 1; i < depth; i++)
            buf_puts(&b, "}");
        buf_puts(&b, "\n");
        e = load(f, buf_cstr(&b));
        if (depth == 8) {
            assert_int_equal(f->nerr, 0);
        } else {
            assert_int_equal(f->nerr, 1);
            assert_non_null(strstr(e, "nested deeper than 8 levels"));
            assert_non_null(strstr(e, "spec.config.a.a.a.a.a.a.a.a"));
        }
        buf_dispose(&b);
    }
}

/* 1000 values load (the top map and 999 strings); 1001 are refused. */
static void config_size_limit_one_more(void **state)
{
    struct fx *f = *state;
    struct buf b;
    const char *e;

    for (int n = 999; n <= 1000; n++) {
        buf_init(&b, 64 * 1024);
        buf_puts(&b, HEAD "  source: {inline: 'x = 1'}\n  config:\n"
                          "    list:\n");
        /* The top map, the list and n - 1 items: n + 1 values. */
        for (int i = 0; i < n - 1; i++)
            buf_puts(&b, "    - v\n");
        e = load(f, buf_cstr(&b));
        if (n == 999) {
            assert_int_equal(f->nerr, 0);
        } else {
            assert_int_equal(f->nerr, 1);
            assert_non_null(strstr(e, "more than 1000 values in all"));
        }
        buf_dispose(&b);
    }
}

/* A global function named almost like a hook is an error at the YAML
 * line of its definition; a real hook and a local helper are not. */
static void unknown_hook_names_line(void **state)
{
    struct fx *f = *state;
    const char *e;

    e = load(f, HEAD "  source:\n"
                     "    inline: |\n"
                     "      local function on_helper() end\n"
                     "      function on_request(h) end\n"
                     "      function on_reqeust(h)\n"
                     "      end\n");
    assert_int_equal(f->nerr, 1);
    /* inline: is line 6; Lua line 3 is YAML line 9. */
    assert_non_null(strstr(e, "lp.yaml:9:"));
    assert_non_null(strstr(e, "unknown hook 'on_reqeust'"));
    assert_non_null(strstr(e, "did you mean on_request?"));
    e = load(f, HEAD "  source:\n"
                     "    inline: |\n"
                     "      function onResponse(h) end\n");
    assert_int_equal(f->nerr, 1);
    assert_non_null(strstr(e, "did you mean on_response?"));
    e = load(f, HEAD "  source:\n"
                     "    inline: |\n"
                     "      function on_request(h) end\n"
                     "      function on_log(h) end\n"
                     "      function helper() end\n");
    assert_int_equal(f->nerr, 0);
}

static void source_rules(void **state)
{
    struct fx *f = *state;
    const char *e;

    e = load(f, HEAD "  priority: 1\n");
    assert_int_equal(f->nerr, 1);
    assert_non_null(strstr(e, "inline or file is required"));
    e = load(f, HEAD "  source: {inline: 'x=1', file: a.lua}\n");
    assert_int_equal(f->nerr, 1);
    assert_non_null(strstr(e, "exclusive"));
    e = load(f, HEAD "  source: {file: /etc/passwd.lua}\n");
    assert_non_null(strstr(e, "relative"));
    e = load(f, HEAD "  source: {file: ../../x.lua}\n");
    assert_non_null(strstr(e, "climb out"));
    e = load(f, HEAD "  source: {file: x.txt}\n");
    assert_non_null(strstr(e, "must name a .lua file"));
    /* A name with dots that is not a climb is fine. */
    e = load(f, HEAD "  source: {file: examples/a..b.lua}\n");
    assert_int_equal(f->nerr, 0);
}

static void schema_errors_have_positions(void **state)
{
    struct fx *f = *state;
    const char *e;

    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  failurePolicy: Maybe\n");
    assert_int_equal(f->nerr, 1);
    assert_non_null(strstr(e, "lp.yaml:6:"));
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  limits: {instructionSlice: 5}\n");
    assert_int_equal(f->nerr, 1);
    assert_non_null(strstr(e, "lp.yaml:6:"));
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  colour: blue\n");
    assert_int_equal(f->nerr, 1);
    assert_non_null(strstr(e, "colour"));
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  targetRefs: [{kind: HTTPRoute, name: r}]\n");
    assert_int_equal(f->nerr, 1);
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  targetRefs: [{kind: Gateway}]\n");
    assert_non_null(strstr(e, "name is required"));
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  hosts: ['a*b']\n");
    assert_int_equal(f->nerr, 1);
    e = load(f, "apiVersion: strait.io/v1\nkind: LuaPolicy\n"
                "metadata: {name: p}\nspec: {source: {inline: 'x=1'}}\n");
    assert_non_null(strstr(e, "v1alpha1"));
}

static void unimplemented_fields_are_refused(void **state)
{
    struct fx *f = *state;
    const char *e;

    /* strait.http's limits are honoured now; a zero timeout is not. */
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  limits: {httpCalls: 2, httpCallTimeout: 250ms}\n");
    assert_int_equal(f->nerr, 0);
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  limits: {httpCallTimeout: 0s}\n");
    assert_int_equal(f->nerr, 1);
    /* h:body() is there: bodyBytes is honoured, not refused. */
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  limits: {bodyBytes: 1Ki}\n");
    assert_int_equal(f->nerr, 0);
    (void)e;
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  sharedDicts: [{name: rl, size: 1Mi}, {name: rl}]\n");
    assert_int_equal(f->nerr, 1);
    assert_non_null(strstr(e, "declared twice"));
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  sharedDicts: [{name: a-b}]\n");
    assert_int_equal(f->nerr, 1);
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  sharedDicts: [{name: rl, size: 1Ki}]\n");
    assert_int_equal(f->nerr, 1); /* under the 8 KiB minimum */
    e = load(f, HEAD "  source: {inline: 'x=1'}\n"
                     "  routes: [{name: a, disabled: false}]\n");
    assert_int_equal(f->nerr, 1);
}

/* A targetRef to another namespace needs a ReferenceGrant there naming
 * LuaPolicies of the policy's namespace and the kind (and name, if it
 * gives one); its own namespace needs none. */
static void reference_grant_rules(void **state)
{
    struct fx *f = *state;
    const char *e = load(
        f, "apiVersion: gateway.networking.k8s.io/v1beta1\n"
           "kind: ReferenceGrant\n"
           "metadata: {name: g, namespace: shop}\n"
           "spec:\n"
           "  from: [{group: strait.io, kind: LuaPolicy, namespace: tenant}]\n"
           "  to:\n"
           "  - {group: networking.istio.io, kind: Gateway, name: gw}\n"
           "  - {group: networking.istio.io, kind: VirtualService}\n"
           "---\n"
           "apiVersion: gateway.networking.k8s.io/v1\n"
           "kind: ReferenceGrant\n"
           "metadata: {name: other, namespace: bank}\n"
           "spec:\n"
           "  from: [{group: strait.io, kind: LuaPolicy, namespace: x}]\n"
           "  to: [{group: networking.istio.io, kind: Gateway}]\n"
           "---\n"
           "apiVersion: gateway.networking.k8s.io/v1\n"
           "kind: HTTPRoute\n"
           "metadata: {name: r, namespace: shop}\n"
           "spec: {}\n");

    assert_int_equal(f->nerr, 0);
    (void)e;
    /* Its own namespace: always. */
    assert_true(
        res_lua_target_granted(f->set, "tenant", "Gateway", "tenant", "gw"));
    /* The grant's Gateway by name, and every VirtualService. */
    assert_true(
        res_lua_target_granted(f->set, "tenant", "Gateway", "shop", "gw"));
    assert_false(
        res_lua_target_granted(f->set, "tenant", "Gateway", "shop", "gw2"));
    assert_true(res_lua_target_granted(f->set, "tenant", "VirtualService",
                                       "shop", "any"));
    /* Another namespace's policies, or a namespace without a grant. */
    assert_false(
        res_lua_target_granted(f->set, "evil", "Gateway", "shop", "gw"));
    assert_false(
        res_lua_target_granted(f->set, "tenant", "Gateway", "bank", "gw"));
    assert_true(res_lua_target_granted(f->set, "x", "Gateway", "bank", "gw"));
    /* A grant with the wrong group grants nothing; one without from is
     * an error. */
    e = load(f, "apiVersion: gateway.networking.k8s.io/v1beta1\n"
                "kind: ReferenceGrant\n"
                "metadata: {name: g, namespace: shop}\n"
                "spec:\n"
                "  from: [{group: other.io, kind: LuaPolicy, namespace: t}]\n"
                "  to: [{group: networking.istio.io, kind: Gateway}]\n");
    assert_int_equal(f->nerr, 0);
    assert_false(res_lua_target_granted(f->set, "t", "Gateway", "shop", "gw"));
    e = load(f, "apiVersion: gateway.networking.k8s.io/v1beta1\n"
                "kind: ReferenceGrant\n"
                "metadata: {name: g, namespace: shop}\n"
                "spec:\n"
                "  to: [{group: networking.istio.io, kind: Gateway}]\n");
    assert_true(f->nerr > 0);
    assert_non_null(strstr(e, "at least one from is required"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(full_policy_loads_with_defaults, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(syntax_error_names_yaml_line, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(source_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(config_nested_lists_and_maps, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(config_wrong_shape_has_position, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(config_depth_limit_one_more, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(config_size_limit_one_more, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(unknown_hook_names_line, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(schema_errors_have_positions, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(reference_grant_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(unimplemented_fields_are_refused, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
