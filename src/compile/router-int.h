#ifndef STRAIT_COMPILE_ROUTER_INT_H
#define STRAIT_COMPILE_ROUTER_INT_H

/*
 * What the two halves of router_build() share: router-bind.c (binding
 * VirtualServices to servers, virtual hosts) and router.c (rules, matches,
 * actions). Nothing outside src/compile/router*.c includes this.
 */
#include <stddef.h>

#include "compile/router.h"
#include "core/slice.h"
#include "proxy/router-int.h"

struct conf_mark;
struct resource;
struct res_http_route;
struct res_virtual_service;

/* Everything one router_build() call needs on hand. */
struct rt_build {
    struct router *r;
    const struct router_params *p;
    char **err;
    /* The VirtualService being compiled. */
    const struct resource *res;
    const struct res_virtual_service *vs;
    char vs_id[512]; /* "ns/name" in r->mem */
    const char *vs_name;
    /* The gateways it is bound through (pointers into p->servers). */
    const char **gws;
    size_t ngws;
};

/* Memory of the router being built: zeroed; strings copied as
 * NUL-terminated slices (lowercased when lower is set). They set *b->err
 * when memory is short. */
void *rt_alloc(struct rt_build *b, size_t n);
int rt_str(struct rt_build *b, const char *s, int lower, struct slice *out);
const char *rt_cstr(struct rt_build *b, const char *s);

/* rt_gateway_ref_eq() is true when a VirtualService's gateway reference
 * ("name", "ns/name" or "mesh") from namespace vs_ns names gw. */
int rt_gateway_ref_eq(const char *ref, const char *vs_ns, const char *gw);

/* rt_compile_rule() compiles http rule index of b->vs into *out. Returns
 * 0, 1 when the rule is left out of these routes (its blocks are all for
 * other gateways or sources, or it delegates), -1 with *b->err set. */
int rt_compile_rule(struct rt_build *b, const struct res_http_route *h,
                    size_t index, struct rt_rule *out);

/* rt_compile_delegate() appends to *rules (n used, cap allocated; grown
 * with realloc) the rules rule index of b->vs delegates to. Returns 0, or
 * -1 with *b->err set. */
int rt_compile_delegate(struct rt_build *b, const struct res_http_route *h,
                        size_t index, struct rt_rule **rules, size_t *n,
                        size_t *cap);

#endif
