/*
 * libFuzzer target for the etcd JSON gateway readers
 * (src/control/etcd_proto.c): the range, watch, txn, authenticate and
 * error answers a member (or something posing as one) sends. The first
 * byte picks the reader, the rest is the document.
 *
 * Beyond "no crash, no leak, no read out of bounds", it traps when a
 * reader accepts a document and then hands back something inconsistent:
 * a count of key-values or events without the array, a decoded key or
 * value without its NUL, an unknown event type.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control/etcd_proto.h"
#include "core/arena.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            __builtin_trap();                                                  \
    } while (0)

static void check_kv(const struct etcd_kv *kv)
{
    CHECK(kv->key.p != NULL && kv->key.p[kv->key.n] == '\0');
    CHECK(kv->value.p != NULL && kv->value.p[kv->value.n] == '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct arena a;
    const char *p = (const char *)data + 1, *why = NULL;
    size_t n;

    if (size < 1)
        return 0;
    n = size - 1;
    arena_init(&a, 4096);
    switch (data[0] % 5) {
    case 0: {
        struct etcd_range r;
        if (etcd_parse_range(&a, p, n, &r, &why) == 0) {
            CHECK(r.n == 0 || r.kvs != NULL);
            for (size_t i = 0; i < r.n; i++)
                check_kv(&r.kvs[i]);
        } else {
            CHECK(why != NULL);
        }
        break;
    }
    case 1: {
        struct etcd_watch_msg m;
        if (etcd_parse_watch(&a, p, n, &m, &why) == 0) {
            CHECK(m.n == 0 || m.events != NULL);
            for (size_t i = 0; i < m.n; i++) {
                CHECK(m.events[i].type == ETCD_PUT ||
                      m.events[i].type == ETCD_DELETE);
                check_kv(&m.events[i].kv);
            }
        } else {
            CHECK(why != NULL);
        }
        break;
    }
    case 2: {
        struct etcd_txn t;
        if (etcd_parse_txn(&a, p, n, &t, &why) == 0)
            CHECK(t.succeeded == 0 || t.succeeded == 1);
        break;
    }
    case 3: {
        struct slice tok;
        if (etcd_parse_auth(&a, p, n, &tok, &why) == 0)
            CHECK(tok.n > 0 && tok.p != NULL);
        break;
    }
    default: {
        struct etcd_error e;
        (void)etcd_parse_error(&a, p, n, &e, &why);
        break;
    }
    }
    arena_dispose(&a);
    return 0;
}
