#include "config.h"

#include <string.h>

#include "core/bufpool.h"
#include "core/clock.h"
#include "core/memacct.h"
#include "http/pipe.h"

/* A body this short (a local answer such as "overloaded\n") still gets a
 * buffer when the pool refuses one under memory pressure: failing it
 * would turn a 503 into a reset. */
#define HPIPE_SMALL 4096

void hpipe_init(struct hpipe *p, struct bufpool *pool, size_t cap)
{
    memset(p, 0, sizeof(*p));
    buf_init(&p->buf, cap);
    buf_init(&p->kept, 0);
    p->pool = pool;
}

void hpipe_dispose(struct hpipe *p)
{
    p->buf.head = p->buf.tail = 0;
    if (p->pool != NULL)
        bufpool_drain(p->pool, &p->buf);
    buf_dispose(&p->buf);
    buf_dispose(&p->kept);
}

size_t hpipe_room(const struct hpipe *p)
{
    if (p->eof || p->aborted)
        return 0;
    if (p->small)
        return buf_len(&p->buf) < HPIPE_SMALL ? HPIPE_SMALL - buf_len(&p->buf)
                                              : 0;
    return buf_room(&p->buf);
}

static void wake(void (*fn)(void *), void *arg)
{
    if (fn != NULL)
        fn(arg);
}

/* Follows the gRPC length prefixes through n written bytes. */
static void grpc_scan(struct hpipe *p, const unsigned char *d, size_t n)
{
    while (n > 0) {
        if (p->grpc_left > 0) {
            size_t k = p->grpc_left < n ? (size_t)p->grpc_left : n;
            p->grpc_left -= k;
            d += k;
            n -= k;
            continue;
        }
        /* Byte 0 is the compressed flag; 1-4 the length. */
        if (p->grpc_hdr > 0)
            p->grpc_len = (p->grpc_len << 8) | *d;
        d++;
        n--;
        if (++p->grpc_hdr == 5) {
            p->grpc_msgs++;
            p->grpc_left = p->grpc_len;
            p->grpc_hdr = 0;
            p->grpc_len = 0;
        }
    }
}

size_t hpipe_write(struct hpipe *p, const void *data, size_t n)
{
    size_t take = hpipe_room(p);

    if (take > n)
        take = n;
    if (take == 0) {
        p->was_full = n > 0;
        return 0;
    }
    if (p->buf.data == NULL && p->pool != NULL && p->pool->size == p->buf.max &&
        bufpool_fill(p->pool, &p->buf) < 0) {
        /* Refused under memory pressure (or no memory): a short body gets
         * a small buffer of its own; a longer one fails its stream (the
         * consumer resets it), as Envoy's overload manager resets the
         * streams that would grow. */
        if (take > HPIPE_SMALL || buf_reserve(&p->buf, take) == NULL) {
            hpipe_abort(p);
            return 0;
        }
        p->small = 1;
    }
    if (buf_append(&p->buf, data, take) < 0)
        return 0;
    if (p->grpc_on)
        grpc_scan(p, data, take);
    p->active_ms = clock_ms();
    /* Full now (even if everything fit): the producer will stop reading,
     * so the consumer must wake it once room returns. */
    if (take < n || buf_room(&p->buf) == 0)
        p->was_full = 1;
    wake(p->wake_reader, p->reader);
    return take;
}

int hpipe_would_refuse(const struct hpipe *p)
{
    return p->buf.data == NULL && p->pool != NULL &&
           p->pool->size == p->buf.max && p->pool->refusable &&
           memacct_refusing(p->pool->acct);
}

void hpipe_finish(struct hpipe *p)
{
    if (p->eof)
        return;
    p->eof = 1;
    wake(p->wake_reader, p->reader);
    wake(p->on_end, p->end_arg);
}

void hpipe_abort(struct hpipe *p)
{
    if (p->aborted)
        return;
    p->aborted = 1;
    wake(p->wake_reader, p->reader);
    wake(p->on_end, p->end_arg);
}

const char *hpipe_peek(const struct hpipe *p, size_t *n)
{
    if (p->replay < buf_len(&p->kept)) {
        *n = buf_len(&p->kept) - p->replay;
        return buf_ptr(&p->kept) + p->replay;
    }
    *n = buf_len(&p->buf);
    return buf_ptr(&p->buf);
}

/* Kept bytes past the limit: the body is passed on but not kept. */
static void keep_bytes(struct hpipe *p, const char *data, size_t n)
{
    if (!p->keeping || p->kept_over)
        return;
    if (buf_append(&p->kept, data, n) < 0) {
        p->kept_over = 1;
        buf_dispose(&p->kept);
    }
    p->replay = buf_len(&p->kept);
}

void hpipe_consume(struct hpipe *p, size_t n)
{
    if (n == 0)
        return;
    p->active_ms = clock_ms();
    if (p->replay < buf_len(&p->kept)) {
        /* A rewound reader reads kept bytes again: the producer has had
         * its room (and HTTP/2 credit) for them already. */
        size_t left = buf_len(&p->kept) - p->replay;
        p->replay += n < left ? n : left;
        return;
    }
    keep_bytes(p, buf_ptr(&p->buf), n);
    buf_consume(&p->buf, n);
    if (buf_len(&p->buf) == 0 && p->pool != NULL) {
        bufpool_drain(p->pool, &p->buf);
        p->small = 0;
    }
    /* Wake the producer only once it was stopped by a full pipe. */
    if (p->was_full || p->wake_on_consume) {
        p->was_full = 0;
        wake(p->wake_writer, p->writer);
    }
}

void hpipe_reset(struct hpipe *p)
{
    p->buf.head = p->buf.tail = 0;
    if (p->pool != NULL)
        bufpool_drain(p->pool, &p->buf);
    p->small = 0;
    p->eof = 0;
    p->aborted = 0;
    p->was_full = 0;
    p->trailers.n = 0;
    p->grpc_msgs = p->grpc_left = p->grpc_len = p->grpc_hdr = 0;
    buf_dispose(&p->kept);
    p->replay = 0;
    p->keeping = 0;
    p->kept_over = 0;
}

void hpipe_keep(struct hpipe *p, size_t limit)
{
    /* Keeping already (a LuaPolicy read the body first, and rewound it):
     * what is kept stays, and the limit only grows. */
    if (p->keeping && !p->kept_over) {
        if (p->kept.max < limit)
            p->kept.max = limit;
        return;
    }
    p->keeping = 1;
    p->kept_over = 0;
    buf_dispose(&p->kept);
    buf_init(&p->kept, limit);
    p->replay = 0;
}

void hpipe_keep_stop(struct hpipe *p)
{
    if (p->replay < buf_len(&p->kept))
        return;
    buf_dispose(&p->kept);
    p->keeping = 0;
    p->kept_over = 0;
    p->replay = 0;
}

int hpipe_rewind(struct hpipe *p)
{
    if (!hpipe_replayable(p))
        return -1;
    p->replay = 0;
    return 0;
}

const char *hpipe_kept(const struct hpipe *p, size_t *n)
{
    *n = buf_len(&p->kept);
    return buf_ptr(&p->kept);
}

const char *hpipe_live(const struct hpipe *p, size_t *n)
{
    *n = buf_len(&p->buf);
    return buf_ptr(&p->buf);
}
