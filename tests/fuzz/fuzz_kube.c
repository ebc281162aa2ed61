/*
 * libFuzzer target for the Kubernetes API readers
 * (src/control/kube_proto.c): list answers, watch events and Status
 * bodies an API server (or something posing as one) sends. The first
 * byte picks the reader (its low bits) and the kind (its high bit: a Pod,
 * which is kept as a projection of its fields, else a Service), the rest
 * is the document.
 *
 * Beyond "no crash, no leak, no read out of bounds", it traps when a
 * reader accepts a document and hands back something inconsistent: an
 * object without a name or NUL-terminated JSON, a count without items,
 * a bookmark without a resourceVersion.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control/kube_proto.h"
#include "core/arena.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            __builtin_trap();                                                  \
    } while (0)

static void check_obj(const struct kube_object *o)
{
    CHECK(o->name != NULL && o->name[0] != '\0' && o->ns != NULL &&
          o->rv != NULL);
    CHECK(o->json != NULL && o->json[o->json_n] == '\0' &&
          strlen(o->json) <= o->json_n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct arena a;
    const char *p = (const char *)data + 1, *why = NULL, *kind;
    size_t n;

    if (size < 1)
        return 0;
    n = size - 1;
    kind = data[0] & 0x80 ? "Pod" : "Service";
    arena_init(&a, 4096);
    switch ((data[0] & 0x7f) % 3) {
    case 0: {
        struct kube_list l;
        if (kube_parse_list(&a, p, n, "v1", kind, 0, &l, &why) == 0) {
            CHECK(l.n == 0 || l.items != NULL);
            CHECK(l.rv != NULL && l.cont != NULL);
            for (size_t i = 0; i < l.n; i++)
                check_obj(&l.items[i]);
        } else {
            CHECK(why != NULL);
        }
        break;
    }
    case 1: {
        struct kube_event ev;
        if (kube_parse_event(&a, p, n, "v1", kind, 0, &ev, &why) == 0) {
            CHECK(ev.type <= KUBE_ERROR);
            if (ev.type == KUBE_BOOKMARK)
                CHECK(ev.obj.rv != NULL && ev.obj.rv[0] != '\0');
            else if (ev.type != KUBE_ERROR)
                check_obj(&ev.obj);
        } else {
            CHECK(why != NULL);
        }
        break;
    }
    default: {
        struct kube_status st;
        if (kube_parse_status(&a, p, n, &st, &why) == 0)
            CHECK(st.code >= 0 && st.code < 1000);
        break;
    }
    }
    arena_dispose(&a);
    return 0;
}
