/*
 * libFuzzer target for what consistent hashing reads from a request: the
 * Cookie header (one or several fields, quoted values), the query string
 * and a generated Set-Cookie. The input is split at newlines into a
 * policy selector and name, a request path, and Cookie field values.
 * Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "http/http.h"
#include "upstream/hash.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A slice returned by a parser must lie inside what it was given. */
static void inside(struct slice v, const char *p, size_t n)
{
    if (v.n > 0 && (v.p < p || v.p + v.n > p + n))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct slice part[8];
    size_t np = 0, start = 0;
    struct arena a;
    struct http_request req;
    struct lb_hash_conf hc;
    struct lb_hash *h;
    struct addr ep;
    const char *why;
    char name[64];
    char *err = NULL;
    uint64_t key;
    struct slice v, sc;

    for (size_t i = 0; i <= size && np < 8; i++)
        if (i == size || s[i] == '\n') {
            part[np++] = (struct slice){s + start, i - start};
            start = i + 1;
        }
    if (np < 2 || part[0].n == 0)
        return 0;
    arena_init(&a, 4096);
    memset(&req, 0, sizeof(req));
    req.path = part[1];
    for (size_t i = 2; i < np; i++)
        if (http_fields_add(&req.fields, &a, SLICE_LIT("cookie"), part[i],
                            100) < 0)
            goto out;
    snprintf(name, sizeof(name), "%.*s", (int)(part[0].n - 1), part[0].p + 1);

    if (lb_cookie_value(&req, slice_of(name), &v))
        for (size_t i = 0; i < req.fields.n; i++)
            if (v.p >= req.fields.v[i].value.p &&
                v.p <= req.fields.v[i].value.p + req.fields.v[i].value.n) {
                inside(v, req.fields.v[i].value.p, req.fields.v[i].value.n);
                break;
            }
    if (lb_query_value(req.path, slice_of(name), &v))
        inside(v, req.path.p, req.path.n);

    memset(&hc, 0, sizeof(hc));
    hc.key = (enum lb_key_kind)((unsigned char)part[0].p[0] % 4);
    hc.name = name;
    hc.cookie_path = "/";
    hc.cookie_ttl_ms = (part[0].p[0] & 4) ? 60000 : -1;
    hc.algo = (part[0].p[0] & 8) ? LB_MAGLEV : LB_RING_HASH;
    hc.size = hc.algo == LB_MAGLEV ? 13 : 16;
    if (addr_parse(&ep, "127.0.0.1:80", 12, 0, &why) < 0)
        abort();
    h = lb_hash_new(&hc, &ep, NULL, 1, &err);
    if (h == NULL)
        abort();
    if (lb_hash_request(h, &req, part[1], part[0], &a, &key, &sc) &&
        lb_hash_ep(h, lb_hash_find(h, key)) != 0)
        abort();
    lb_hash_free(h);
out:
    arena_dispose(&a);
    return 0;
}
