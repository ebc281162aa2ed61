/*
 * strait.io/v1alpha1 LuaPolicy: a Lua script strait runs on the requests
 * of the Gateways, hosts and VirtualServices it targets (the runtime is
 * src/policy/lua_*.c, the selection src/compile/lua.c). The checks here
 * are what a table cannot say: a source is inline text or a file name
 * under the bootstrap's lua.path (never an absolute path or one that
 * climbs out with ".."), inline text must compile as Lua text (the
 * message names the YAML line of the Lua line at fault), targets name a
 * kind strait routes by, and fields strait does not honour yet are
 * refused rather than ignored.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/res-kinds.h"
#include "config/resource.h"
#include "core/buf.h"
#include "http/http.h"
#include "policy/lua_vm.h"

/* policy.config: values (strings, lists and maps) in all, at most. */
#define RES_LUA_CONFIG_MAX 1000

static const char *const ref_kinds[] = {"Gateway", "VirtualService", NULL};
static const char *const failure_policies[] = {"Fail", "Ignore", NULL};

#define TR(f) RES_OFF(struct res_lua_target_ref, f)
static const struct conf_key target_ref_keys[] = {
    {.name = "kind",
     .type = CONF_ENUM,
     .off = TR(kind),
     .def = "Gateway",
     .help = "Gateway or VirtualService",
     .enums = ref_kinds},
    {.name = "name",
     .type = CONF_STR,
     .off = TR(name),
     .help = "the resource's name (required)"},
    {.name = "namespace",
     .type = CONF_STR,
     .off = TR(ns),
     .help = "its namespace; default: the policy's; another one needs a "
             "ReferenceGrant there (else the policy is not loaded)"},
    {.name = NULL},
};
#undef TR
static const struct conf_section target_ref_section = {
    target_ref_keys, sizeof(struct res_lua_target_ref),
    RES_OFF(struct res_lua_target_ref, mark)};

static const struct conf_key route_keys[] = {
    {.name = "name",
     .type = CONF_STR,
     .off = RES_OFF(struct res_lua_route, name),
     .help = "a VirtualService http route's name (required)"},
    {.name = "disabled",
     .type = CONF_BOOL,
     .off = RES_OFF(struct res_lua_route, disabled),
     .def = "true",
     .help = "the route runs without this policy"},
    {.name = NULL},
};
static const struct conf_section route_section = {
    route_keys, sizeof(struct res_lua_route),
    RES_OFF(struct res_lua_route, mark)};

#define LM(f) RES_OFF(struct res_lua_limits, f)
static const struct conf_key limits_keys[] = {
    {.name = "memory",
     .type = CONF_SIZE,
     .off = LM(memory),
     .min = 256 * 1024,
     .max = (int64_t)4 << 30,
     .def = "64Mi",
     .help = "what one worker's Lua state may allocate (every policy of "
             "the snapshot in that state shares it: the largest wins)"},
    {.name = "instructionSlice",
     .type = CONF_INT,
     .off = LM(instruction_slice),
     .min = 100,
     .max = 100000000,
     .def = "10000",
     .help = "VM instructions between two budget checks"},
    {.name = "burst",
     .type = CONF_DURATION,
     .off = LM(burst_ms),
     .min = 1,
     .max = 60000,
     .def = "1s",
     .help = "how much CPU time one call of a hook may use"},
    {.name = "requestTime",
     .type = CONF_DURATION,
     .off = LM(request_ms),
     .min = 1,
     .max = 600000,
     .def = "4s",
     .help = "how much CPU time all hooks of one request may use in "
             "total"},
    {.name = "bodyBytes",
     .type = CONF_SIZE,
     .off = LM(body_bytes),
     .min = 0,
     .max = 64 * 1024 * 1024,
     .def = "1Mi",
     .help = "the longest request body h:body() reads (longer: nil, \"too "
             "large\")"},
    {.name = "httpCalls",
     .type = CONF_INT,
     .off = LM(http_calls),
     .min = 0,
     .max = 1000,
     .def = "4",
     .help = "strait.http.request calls per request (per timer callback "
             "run); the next one returns nil, \"too many calls\""},
    {.name = "httpCallTimeout",
     .type = CONF_DURATION,
     .off = LM(http_call_timeout_ms),
     .min = 1,
     .max = 600000,
     .def = "5s",
     .help = "the longest one strait.http.request call may take (its "
             "timeout_ms may only shorten it); then nil, \"timeout\""},
    {.name = NULL},
};
#undef LM
static const struct conf_section limits_section = {
    limits_keys, sizeof(struct res_lua_limits),
    RES_OFF(struct res_lua_limits, mark)};

static const struct conf_key dict_keys[] = {
    {.name = "name",
     .type = CONF_STR,
     .off = RES_OFF(struct res_lua_dict, name),
     .help = "strait.shared.<name> (required)"},
    {.name = "size",
     .type = CONF_SIZE,
     .off = RES_OFF(struct res_lua_dict, size),
     .min = 8192,
     .max = (int64_t)4 << 30,
     .def = "1Mi",
     .help = "bytes of keys and values it holds at most"},
    {.name = NULL},
};
static const struct conf_section dict_section = {
    dict_keys, sizeof(struct res_lua_dict), RES_OFF(struct res_lua_dict, mark)};

#define LP(f) RES_OFF(struct res_lua_policy, f)
static const struct conf_key selector_keys[] = {
    {.name = "matchLabels",
     .type = CONF_STR_MAP,
     .off = LP(selector.match_labels) - LP(selector),
     .help = "labels of the node (node.labels)"},
    {.name = NULL},
};
static const struct conf_section selector_section = {
    selector_keys, 0, LP(selector.mark) - LP(selector)};

static const struct conf_key source_keys[] = {
    {.name = "inline",
     .type = CONF_STR,
     .off = LP(source.inline_text) - LP(source),
     .help = "the script's text"},
    {.name = "file",
     .type = CONF_STR,
     .off = LP(source.file) - LP(source),
     .help = "a .lua file under lua.path (bootstrap), e.g. "
             "examples/header_rewrite.lua"},
    {.name = NULL},
};
static const struct conf_section source_section = {
    source_keys, 0, LP(source.mark) - LP(source)};

static const struct conf_key lp_keys[] = {
    {.name = "selector",
     .type = CONF_SECTION,
     .off = LP(selector),
     .help = "the nodes it applies to by their labels; none: every node",
     .sub = &selector_section},
    {.name = "targetRefs",
     .type = CONF_LIST,
     .off = LP(target_refs),
     .max = 100,
     .help = "Gateways and VirtualServices whose requests it runs on; "
             "none: the Gateways of its namespace (in the root namespace "
             "istio-system: every Gateway)",
     .sub = &target_ref_section},
    {.name = "hosts",
     .type = CONF_STR_LIST,
     .off = LP(hosts),
     .max = 100,
     .help = "request hosts it runs on (exact, *.suffix or *)"},
    {.name = "routes",
     .type = CONF_LIST,
     .off = LP(routes),
     .max = 1000,
     .help = "per-route overrides: {name, disabled}",
     .sub = &route_section},
    {.name = "priority",
     .type = CONF_INT,
     .off = LP(priority),
     .min = -1000000000,
     .max = 1000000000,
     .def = "0",
     .help = "higher runs first; equal: by namespace/name"},
    {.name = "source",
     .type = CONF_SECTION,
     .off = LP(source),
     .help = "inline or file (exactly one)",
     .sub = &source_section},
    {.name = "config",
     .type = CONF_TREE,
     .off = LP(config),
     .max = RES_LUA_CONFIG_MAX,
     .help = "what the script reads as the read-only table policy.config: "
             "a map of strings (every scalar is a string), lists and maps, "
             "nested at most 8 deep, 1000 values at most"},
    {.name = "failurePolicy",
     .type = CONF_ENUM,
     .off = LP(failure_policy),
     .def = "Fail",
     .help = "Fail: an error, timeout or memory limit answers 500; "
             "Ignore: the request goes on, the error is counted",
     .enums = failure_policies},
    {.name = "limits",
     .type = CONF_SECTION,
     .off = LP(limits),
     .help = "the budgets the sandbox enforces",
     .sub = &limits_section},
    {.name = "sharedDicts",
     .type = CONF_LIST,
     .off = LP(shared_dicts),
     .max = 100,
     .help = "strait.shared dictionaries: every worker reads and writes "
             "them; kept across reloads (a dict keeps the size it was made "
             "with)",
     .sub = &dict_section},
    {.name = NULL},
};
#undef LP
static const struct conf_section lp_section = {lp_keys, 0, SIZE_MAX};

/* A file name under the search path: relative, no "..", ending in .lua. */
static const char *file_why(const char *f)
{
    size_t n = strlen(f);

    if (n == 0)
        return "is empty";
    if (f[0] == '/')
        return "must be relative to lua.path (no leading /)";
    if (n < 5 || strcmp(f + n - 4, ".lua") != 0)
        return "must name a .lua file";
    for (const char *p = f; (p = strstr(p, "..")) != NULL; p += 2)
        if ((p == f || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
            return "must not climb out of lua.path with ..";
    return NULL;
}

static void lp_check(struct res_check *ck, struct resource *r)
{
    const struct res_lua_policy *lp = r->spec;
    char p[160], err[512];
    const char *why;
    int line;

    if (lp->source.inline_text == NULL && lp->source.file == NULL)
        res_err(ck, &lp->source.mark, "spec.source",
                "inline or file is required");
    if (lp->source.inline_text != NULL && lp->source.file != NULL)
        res_err(ck, &lp->source.mark, "spec.source",
                "inline and file are exclusive");
    if (lp->source.file != NULL && (why = file_why(lp->source.file)) != NULL)
        res_err(ck, &lp->source.mark, "spec.source.file", "'%s' %s",
                lp->source.file, why);
    if (lp->source.inline_text != NULL) {
        line = luavm_syntax(lp->source.inline_text,
                            strlen(lp->source.inline_text), err, sizeof(err));
        if (line != 0) {
            /* The text of a block scalar starts on the line after the key;
             * the mark is the section's, a line or two above it: close
             * enough to find the Lua line, which the message names too. */
            struct conf_mark m = lp->source.mark;
            if (line > 0)
                m.line += line;
            res_err(ck, &m, "spec.source.inline", "%s", err);
        } else if (luavm_check_budget(r->meta.name ? r->meta.name : "policy",
                                      lp->source.inline_text,
                                      strlen(lp->source.inline_text),
                                      (size_t)lp->limits.memory,
                                      (int)lp->limits.instruction_slice,
                                      (uint64_t)lp->limits.burst_ms,
                                      (uint64_t)lp->limits.request_ms, ck->stop,
                                      err, sizeof(err), &line) < 0) {
            /* Its top-level code (and init_worker) runs on the control
             * thread when a snapshot is built: one that cannot finish
             * within the budget would fail every build. */
            res_err(ck, &lp->source.mark, "spec.source.inline", "%s", err);
        } else if (line != 0) {
            /* An unknown hook, found in the same run. As for a syntax
             * error: the YAML line of the Lua line. */
            struct conf_mark m = lp->source.mark;
            if (line > 0)
                m.line += line;
            res_err(ck, &m, "spec.source.inline", "%s", err);
        }
    }
    for (size_t i = 0; i < lp->target_refs.n; i++) {
        const struct res_lua_target_ref *t =
            (const struct res_lua_target_ref *)lp->target_refs.v + i;
        res_path(p, sizeof(p), "spec.targetRefs[%zu]", i);
        if (t->name == NULL || t->name[0] == '\0')
            res_err(ck, &t->mark, p, "name is required");
    }
    for (size_t i = 0; i < lp->hosts.n; i++) {
        res_path(p, sizeof(p), "spec.hosts[%zu]", i);
        res_check_host(ck, NULL, p, lp->hosts.v[i], RES_HOST_WILDCARD);
    }
    for (size_t i = 0; i < lp->routes.n; i++) {
        const struct res_lua_route *rt =
            (const struct res_lua_route *)lp->routes.v + i;
        res_path(p, sizeof(p), "spec.routes[%zu]", i);
        if (rt->name == NULL || rt->name[0] == '\0')
            res_err(ck, &rt->mark, p, "name is required");
        else if (!rt->disabled)
            res_err(ck, &rt->mark, p,
                    "disabled: false is the default; an override only "
                    "disables");
    }
    for (size_t i = 0; i < lp->shared_dicts.n; i++) {
        const struct res_lua_dict *d =
            (const struct res_lua_dict *)lp->shared_dicts.v + i;
        int ok = d->name != NULL && d->name[0] != '\0';
        res_path(p, sizeof(p), "spec.sharedDicts[%zu]", i);
        for (const char *c = d->name; ok && *c != '\0'; c++)
            ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                 (*c >= '0' && *c <= '9') || *c == '_';
        if (!ok)
            res_err(ck, &d->mark, p,
                    "name is required: letters, digits and _ "
                    "(strait.shared.NAME)");
        for (size_t k = 0; ok && k < i; k++)
            if (strcmp(
                    ((const struct res_lua_dict *)lp->shared_dicts.v)[k].name,
                    d->name) == 0)
                res_err(ck, &d->mark, p, "dict '%s' is declared twice",
                        d->name);
    }
}

const struct res_kind_ops res_lua_policy_ops = {
    "LuaPolicy", &lp_section, sizeof(struct res_lua_policy), lp_check};

/* ---- ReferenceGrant ------------------------------------------------------
 * Gateway API's permission for a reference across namespaces, read here
 * for LuaPolicy targetRefs (the one reference strait checks with it). */

static const struct conf_key grant_from_keys[] = {
    {.name = "group",
     .type = CONF_STR,
     .off = RES_OFF(struct res_grant_from, group),
     .help = "the referring kind's API group: strait.io (required)"},
    {.name = "kind",
     .type = CONF_STR,
     .off = RES_OFF(struct res_grant_from, kind),
     .help = "the referring kind: LuaPolicy (required)"},
    {.name = "namespace",
     .type = CONF_STR,
     .off = RES_OFF(struct res_grant_from, ns),
     .help = "the namespace the references come from (required)"},
    {.name = NULL},
};
static const struct conf_section grant_from_section = {
    grant_from_keys, sizeof(struct res_grant_from),
    RES_OFF(struct res_grant_from, mark)};

static const struct conf_key grant_to_keys[] = {
    {.name = "group",
     .type = CONF_STR,
     .off = RES_OFF(struct res_grant_to, group),
     .help = "the referred kind's API group: networking.istio.io"},
    {.name = "kind",
     .type = CONF_STR,
     .off = RES_OFF(struct res_grant_to, kind),
     .help = "Gateway or VirtualService (required)"},
    {.name = "name",
     .type = CONF_STR,
     .off = RES_OFF(struct res_grant_to, name),
     .help = "one resource of this namespace; none: every one of the kind"},
    {.name = NULL},
};
static const struct conf_section grant_to_section = {
    grant_to_keys, sizeof(struct res_grant_to),
    RES_OFF(struct res_grant_to, mark)};

#define RG(f) RES_OFF(struct res_reference_grant, f)
static const struct conf_key grant_keys[] = {
    {.name = "from",
     .type = CONF_LIST,
     .off = RG(from),
     .max = 16,
     .help = "who may refer: {group, kind, namespace}",
     .sub = &grant_from_section},
    {.name = "to",
     .type = CONF_LIST,
     .off = RG(to),
     .max = 16,
     .help = "what they may refer to in this namespace: {group, kind, name}",
     .sub = &grant_to_section},
    {.name = NULL},
};
#undef RG
static const struct conf_section grant_section = {grant_keys, 0, SIZE_MAX};

static int str_is(const char *s, const char *v)
{
    return s != NULL && strcmp(s, v) == 0;
}

static void grant_check(struct res_check *ck, struct resource *r)
{
    const struct res_reference_grant *g = r->spec;
    char p[96];

    if (g->from.n == 0)
        res_err(ck, NULL, "spec.from", "at least one from is required");
    if (g->to.n == 0)
        res_err(ck, NULL, "spec.to", "at least one to is required");
    for (size_t i = 0; i < g->from.n; i++) {
        const struct res_grant_from *f =
            (const struct res_grant_from *)g->from.v + i;
        res_path(p, sizeof(p), "spec.from[%zu]", i);
        if (f->kind == NULL || f->ns == NULL || f->ns[0] == '\0')
            res_err(ck, &f->mark, p, "kind and namespace are required");
    }
    for (size_t i = 0; i < g->to.n; i++) {
        const struct res_grant_to *t = (const struct res_grant_to *)g->to.v + i;
        res_path(p, sizeof(p), "spec.to[%zu]", i);
        if (t->kind == NULL)
            res_err(ck, &t->mark, p, "kind is required");
    }
}

const struct res_kind_ops res_reference_grant_ops = {
    "ReferenceGrant", &grant_section, sizeof(struct res_reference_grant),
    grant_check};

int res_lua_target_granted(const struct resource_set *set, const char *from_ns,
                           const char *kind, const char *to_ns,
                           const char *name)
{
    if (strcmp(from_ns, to_ns) == 0)
        return 1;
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_reference_grant *g;
        int from = 0, to = 0;
        if (r->kind != RES_REFERENCE_GRANT || strcmp(r->meta.ns, to_ns) != 0)
            continue;
        g = res_reference_grant(r);
        for (size_t k = 0; k < g->from.n && !from; k++) {
            const struct res_grant_from *f =
                (const struct res_grant_from *)g->from.v + k;
            from = str_is(f->group, "strait.io") &&
                   str_is(f->kind, "LuaPolicy") && str_is(f->ns, from_ns);
        }
        for (size_t k = 0; k < g->to.n && !to; k++) {
            const struct res_grant_to *t =
                (const struct res_grant_to *)g->to.v + k;
            to = str_is(t->group, "networking.istio.io") &&
                 str_is(t->kind, kind) &&
                 (t->name == NULL || t->name[0] == '\0' ||
                  strcmp(t->name, name) == 0);
        }
        if (from && to)
            return 1;
    }
    return 0;
}

/* The largest source.file strait loads (COMPILE_LUA_MAX_FILE). */
#define LUA_FILE_MAX ((size_t)1 << 20)

/* Reads path whole, at most LUA_FILE_MAX bytes; NULL when it cannot
 * (too big: *big set). */
static char *slurp(const char *path, size_t *n, int *big)
{
    FILE *f = fopen(path, "rb");
    char *b;

    *big = 0;
    if (f == NULL)
        return NULL;
    b = malloc(LUA_FILE_MAX + 1);
    if (b != NULL) {
        *n = fread(b, 1, LUA_FILE_MAX + 1, f);
        if (*n > LUA_FILE_MAX) {
            *big = 1;
            free(b);
            b = NULL;
        }
    }
    fclose(f);
    return b;
}

/* One LuaPolicy's source.file against lua.path, as `strait run` loads
 * it: found, not too big, compiles, and names no unknown hook. */
static void check_file(const struct resource *r, char *const *dirs,
                       size_t ndirs, struct res_msgs *msgs)
{
    const struct res_lua_policy *lp = r->spec;
    const char *code = res_level_code(RES_ERROR);
    char who[300], full[4096], searched[1024] = "", err[512];
    int line = lp->source.mark.line > 0 ? lp->source.mark.line : r->line;
    int col = lp->source.mark.line > 0 ? lp->source.mark.col : r->col;
    char *text = NULL;
    size_t n = 0;
    int big = 0, at;

    snprintf(who, sizeof(who), "LuaPolicy %s/%s", r->meta.ns ? r->meta.ns : "",
             r->meta.name ? r->meta.name : "");
    for (size_t i = 0; i < ndirs && text == NULL && !big; i++) {
        size_t k = strlen(searched);
        snprintf(searched + k, sizeof(searched) - k, "%s%s", i ? ", " : "",
                 dirs[i]);
        snprintf(full, sizeof(full), "%s/%s", dirs[i], lp->source.file);
        text = slurp(full, &n, &big);
    }
    if (big) {
        res_msgs_add(msgs, code, RES_ERROR, r->file, line, col, who,
                     "spec.source.file", "'%s' is larger than %zu bytes", full,
                     LUA_FILE_MAX);
        return;
    }
    if (text == NULL) {
        res_msgs_add(msgs, code, RES_ERROR, r->file, line, col, who,
                     "spec.source.file",
                     "'%s' is not in lua.path (searched: %s); strait run "
                     "would refuse this policy",
                     lp->source.file, searched);
        return;
    }
    /* The Lua line at fault is a line of the file: the message names the
     * file, line and column 1 there. */
    at = luavm_syntax(text, n, err, sizeof(err));
    if (at == 0)
        at = luavm_check_hooks(r->meta.name ? r->meta.name : "policy", text, n,
                               err, sizeof(err));
    if (at > 0)
        res_msgs_add(msgs, code, RES_ERROR, full, at, 1, who,
                     "spec.source.file", "%s", err);
    else if (at < 0)
        res_msgs_add(msgs, code, RES_ERROR, r->file, line, col, who,
                     "spec.source.file", "%s: %s", full, err);
    free(text);
}

void res_lua_check_files(const struct resource_set *set, char *const *dirs,
                         size_t ndirs, struct res_msgs *msgs)
{
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const struct resource *r = set->v[i];
        const struct res_lua_policy *lp;
        if (r->kind != RES_LUA_POLICY)
            continue;
        lp = r->spec;
        /* A name file_why() refused was reported when it loaded. */
        if (lp->source.file != NULL && file_why(lp->source.file) == NULL)
            check_file(r, dirs, ndirs, msgs);
    }
}

void res_lua_reference(struct buf *b)
{
    struct buf tmp;
    const char *p;

    buf_puts(b, "LuaPolicy\tkind\t\tstrait.io/v1alpha1: a Lua script run on "
                "the requests of the Gateways, VirtualServices and hosts it "
                "targets\n");
    for (int k = 0; k < 2; k++) {
        buf_init(&tmp, 1024 * 1024);
        conf_reference(k == 0 ? &lp_section : &grant_section, &tmp);
        p = buf_cstr(&tmp);
        while (*p != '\0') {
            const char *eol = strchr(p, '\n');
            size_t n = eol != NULL ? (size_t)(eol - p) : strlen(p);
            buf_printf(b, "%s.spec.%.*s\n",
                       k == 0 ? "LuaPolicy" : "ReferenceGrant", (int)n, p);
            p += n + (eol != NULL);
        }
        buf_dispose(&tmp);
        if (k == 0)
            buf_puts(b, "ReferenceGrant\tkind\t\tgateway.networking.k8s.io/"
                        "v1beta1: lets LuaPolicies of another namespace "
                        "target this namespace's Gateways or "
                        "VirtualServices\n");
    }
    /* The budgets that are not fields. */
    buf_printf(b,
               "(limit) string.rep\tbytes\t%zu\tthe longest string.rep "
               "result (and at most as many copies)\n"
               "(limit) table span\tcount\t%zu\ttable.move's range, the "
               "length table.insert/remove shift\n"
               "(limit) table.sort\tcount\t%zu\tthe longest table "
               "table.sort sorts\n"
               "(limit) load text\tbytes\t%zu\tthe longest text load() "
               "compiles\n"
               "(limit) timers' share\tpercent\t%d\tof a worker's time "
               "for one policy's timer callbacks (a bucket of one burst); "
               "past it timers wait (reason deferred)\n"
               "(limit) pattern subject\tbytes\t%zu\tthe longest subject of "
               "string.find/match/gmatch/gsub\n"
               "(limit) pattern steps\tcount\t%.0f\ta pattern call whose "
               "worst case ((pattern length + 1) x (subject length + 1) "
               "to the power of its quantifiers, %%b and back-references, "
               "one more unanchored, x2 per '?') passes this is refused\n"
               "(limit) coroutine pool\tcount\t%d\tidle coroutines kept per "
               "worker state\n"
               "(limit) pending timers\tcount\t%d\tper worker state; "
               "strait.timer then returns nil, \"too many pending timers\"\n"
               "(limit) policies per listener\tcount\t32\tmore is a compile "
               "error\n"
               "(limit) source.file\tbytes\t1048576\ta bigger file is "
               "refused\n"
               "(limit) config depth\tlevels\t%d\tspec.config nests lists "
               "and maps at most this deep (the top map is 1)\n"
               "(limit) config values\tcount\t%d\tspec.config's strings, "
               "lists and maps in all\n"
               "(limit) request target\tbytes\t%d\twhat h:set_path(), "
               "h:set_query() and h:set_query_arg() may make the path, the "
               "query and both\n"
               "(limit) h:query_args\tcount\t100\targuments read; then a "
               "second result \"truncated\"\n",
               LUAVM_STRING_REP_MAX, LUAVM_TABLE_SPAN_MAX, LUAVM_SORT_MAX,
               LUAVM_LOAD_MAX, LUAVM_TIMER_SHARE, LUAVM_PATTERN_SUBJECT_MAX,
               LUAVM_PATTERN_STEPS, LUAVM_COROUTINE_POOL, LUAVM_MAX_TIMERS,
               CONF_TREE_DEPTH, RES_LUA_CONFIG_MAX, HTTP_TARGET_MAX);
}
