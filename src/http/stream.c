#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "http/stream.h"

#define STREAM_ARENA_CHUNK 4096

struct hstream *hstream_new(struct bufpool *pool, size_t body_cap)
{
    struct hstream *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->refs = 1;
    arena_init(&s->arena, STREAM_ARENA_CHUNK);
    hpipe_init(&s->req_body, pool, body_cap);
    hpipe_init(&s->resp_body, pool, body_cap);
    s->req.content_length = -1;
    s->resp.content_length = -1;
    s->start_ms = clock_ms();
    return s;
}

struct hstream *hstream_ref(struct hstream *s)
{
    s->refs++;
    return s;
}

void hstream_unref(struct hstream *s)
{
    if (s == NULL || --s->refs > 0)
        return;
    hpipe_dispose(&s->req_body);
    hpipe_dispose(&s->resp_body);
    arena_dispose(&s->arena);
    free(s);
}

int hstream_reply_begin(struct hstream *s, int status, const char *body)
{
    size_t blen = body ? strlen(body) : 0;

    if (s->resp_started)
        return -1;
    memset(&s->resp, 0, sizeof(s->resp));
    s->resp.status = status;
    s->resp.content_length = (int64_t)blen;
    s->resp.has_body = blen > 0;
    /* content-length is the codecs' to write, from content_length. */
    if (blen > 0 && http_fields_add_ref(&s->resp.fields, &s->arena,
                                        SLICE_LIT("content-type"),
                                        SLICE_LIT("text/plain")) < 0)
        return -1;
    return 0;
}

void hstream_reply_end(struct hstream *s, const char *body)
{
    size_t blen = body ? strlen(body) : 0;

    s->resp_started = 1;
    s->down->response_head(s);
    if (blen > 0)
        hpipe_write(&s->resp_body, body, blen);
    hpipe_finish(&s->resp_body);
}

int hstream_respond(struct hstream *s, int status, const char *body,
                    const char *extra_name, const char *extra_value)
{
    if (hstream_reply_begin(s, status, body) < 0)
        return -1;
    if (extra_name != NULL &&
        http_fields_add(&s->resp.fields, &s->arena, slice_of(extra_name),
                        slice_of(extra_value), 256) < 0)
        return -1;
    hstream_reply_end(s, body);
    return 0;
}

const char *hstream_flags_str(unsigned flags, char *out, size_t n)
{
    static const char *const names[] = {"NR", "UH",  "UF",  "UC", "UT",
                                        "DC", "UPE", "DPE", "UO", "SI",
                                        "FI", "URX", "OM"};
    size_t used = 0;

    out[0] = '\0';
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (!(flags & (1u << i)))
            continue;
        int w =
            snprintf(out + used, n - used, "%s%s", used ? "," : "", names[i]);
        if (w < 0 || (size_t)w >= n - used)
            break;
        used += (size_t)w;
    }
    if (used == 0)
        snprintf(out, n, "-");
    return out;
}

int hstream_respond_grpc(struct hstream *s, const char *code, const char *msg)
{
    char clean[128];
    size_t n = 0;

    if (s->resp_started)
        return -1;
    /* grpc-message is percent-encoded text; ours is plain ASCII, so only
     * control characters need to go. */
    for (const char *p = msg ? msg : ""; *p && n + 1 < sizeof(clean); p++)
        if ((unsigned char)*p >= 0x20 && *p != '%')
            clean[n++] = *p;
    clean[n] = '\0';
    memset(&s->resp, 0, sizeof(s->resp));
    s->resp.status = 200;
    s->resp.content_length = -1; /* no content-length in gRPC answers */
    if (http_fields_add_ref(&s->resp.fields, &s->arena,
                            SLICE_LIT("content-type"),
                            SLICE_LIT("application/grpc")) < 0 ||
        http_fields_add(&s->resp.fields, &s->arena, SLICE_LIT("grpc-status"),
                        slice_of(code), 256) < 0 ||
        http_fields_add(&s->resp.fields, &s->arena, SLICE_LIT("grpc-message"),
                        slice_of(clean), 256) < 0)
        return -1;
    s->resp_started = 1;
    s->down->response_head(s);
    hpipe_finish(&s->resp_body);
    return 0;
}
