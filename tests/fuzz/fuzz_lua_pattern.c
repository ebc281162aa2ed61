/*
 * libFuzzer target for the pattern bound of LuaPolicy (lua_budget.c):
 * the input is a subject, a newline, then a pattern; a policy's top-level
 * code runs string.find, match, gmatch and gsub with them in a sandboxed
 * state, each under pcall. Property: every call the bound admits
 * finishes within the burst (a call in C runs where the count hook never
 * fires, so one that ran long trips the budget right after it returns
 * and the state fails to load); a refused call is only an error.
 * Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/lua_vm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char script[] =
    "local s, p = policy.config.s, policy.config.p\n"
    "pcall(string.find, s, p)\n"
    "pcall(string.match, s, p)\n"
    "pcall(string.gsub, s, p, '%0')\n"
    "local ok, it = pcall(string.gmatch, s, p)\n"
    "if ok then pcall(function() for _ in it do end end) end\n";

static char *dup_clean(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);

    if (s == NULL)
        return NULL;
    /* Config values are C strings: a NUL would end them early. */
    for (size_t i = 0; i < n; i++)
        s[i] = p[i] ? (char)p[i] : ' ';
    s[n] = '\0';
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    struct luaprogs *p;
    struct luaprog *g;
    struct luavm *vm;
    char *err = NULL;

    if (nl == NULL || size > 4096)
        return 0;
    p = luaprogs_new(1);
    if (p == NULL)
        return 0;
    p->n = 1;
    p->quiet = 1;
    g = &p->v[0];
    g->name = strdup("fuzz/pattern");
    g->chunk = strdup("=fuzz");
    g->source = strdup(script);
    g->source_len = strlen(script);
    g->memory = (size_t)64 << 20;
    g->instruction_slice = 1000;
    g->burst_ms = 5000;
    g->request_ms = 5000;
    g->any_ref = 1;
    {
        char *sv = dup_clean(data, (size_t)(nl - data));
        char *pv = dup_clean(nl + 1, size - (size_t)(nl - data) - 1);
        if (sv != NULL && pv != NULL)
            (void)(luaprog_config_add(g, LUACFG_MAP, NULL, NULL, 2) < 0 ||
                   luaprog_config_add(g, LUACFG_STR, "s", sv, 0) < 0 ||
                   luaprog_config_add(g, LUACFG_STR, "p", pv, 0) < 0);
        free(sv);
        free(pv);
    }
    vm = luavm_new(p, NULL, &err);
    if (vm == NULL && err != NULL && strstr(err, "timeout") != NULL) {
        fprintf(stderr, "an admitted pattern call ran past the burst: %s\n",
                err);
        abort();
    }
    free(err);
    luavm_free(vm);
    luaprogs_unref(p);
    return 0;
}
