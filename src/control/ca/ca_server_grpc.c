/*
 * The CA's gRPC API on one HTTP/2 connection (ca_server_grpc.h).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/mem.h>

#include "control/ca/ca_grpc.h"
#include "control/ca/ca_h2.h"
#include "control/ca/ca_server_grpc.h"
#include "core/buf.h"
#include "core/log.h"
#include "net/conn.h"

struct call {
    struct ca_grpc_sess *g;
    int32_t id;
    int bad_path;   /* not CreateCertificate */
    int bad_type;   /* content-type not application/grpc */
    int too_large;  /* a header or the body over its bound */
    char *auth;     /* authorization, NULL: none */
    struct buf in;  /* the request body */
    struct buf out; /* the framed answer */
    size_t out_off;
    int status; /* gRPC status of the answer */
    char msg[512];
    struct call *next;
};

struct ca_grpc_sess {
    struct conn *c;
    nghttp2_session *ng;
    struct buf out;
    ca_grpc_issue_fn issue;
    void *arg;
    const char *peer; /* for log lines; the owner's */
    struct call *calls;
    size_t ncalls, ok, refused;
    int32_t last_id; /* the last call taken (CA_GRPC_MAX_CALLS-th), or 0 */
};

static void call_free(struct call *k)
{
    if (k->auth != NULL) {
        OPENSSL_cleanse(k->auth, strlen(k->auth));
        free(k->auth);
    }
    buf_dispose(&k->in);
    buf_dispose(&k->out);
    free(k);
}

static void call_unlink(struct ca_grpc_sess *g, struct call *k)
{
    for (struct call **p = &g->calls; *p != NULL; p = &(*p)->next)
        if (*p == k) {
            *p = k->next;
            return;
        }
}

static ssize_t read_answer(nghttp2_session *ng, int32_t id, uint8_t *buf,
                           size_t len, uint32_t *flags,
                           nghttp2_data_source *src, void *arg)
{
    struct call *k = src->ptr;
    size_t left = buf_len(&k->out) - k->out_off;

    (void)arg;
    if (len > left)
        len = left;
    memcpy(buf, buf_ptr(&k->out) + k->out_off, len);
    k->out_off += len;
    if (k->out_off == buf_len(&k->out)) {
        nghttp2_nv tr = ca_h2_nv("grpc-status", "0");
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(ng, id, &tr, 1) != 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return (ssize_t)len;
}

/* Answers a call whose request is whole. */
static void answer(struct ca_grpc_sess *g, struct call *k)
{
    struct ca_grpc_request req;
    const uint8_t *msg;
    size_t mlen;
    const char *why = NULL;
    ssize_t used;
    char st[8];
    struct buf em;
    int logged = 0;

    memset(&req, 0, sizeof(req));
    k->status = CA_GRPC_OK;
    if (k->bad_path) {
        k->status = CA_GRPC_UNIMPLEMENTED;
        snprintf(k->msg, sizeof(k->msg),
                 "unknown method: strait's CA serves " CA_GRPC_PATH);
    } else if (k->too_large) {
        k->status = CA_GRPC_RESOURCE_EXHAUSTED;
        snprintf(k->msg, sizeof(k->msg),
                 "request over the CA's limits (message %d bytes, "
                 "authorization %d bytes)",
                 CA_GRPC_MAX_MESSAGE, CA_GRPC_MAX_AUTH);
    } else {
        used = ca_grpc_frame_parse((const uint8_t *)buf_ptr(&k->in),
                                   buf_len(&k->in), CA_GRPC_MAX_MESSAGE, &msg,
                                   &mlen, &why);
        if (used <= 0 || (size_t)used != buf_len(&k->in)) {
            k->status = used < 0 && strstr(why, "compressed")
                            ? CA_GRPC_UNIMPLEMENTED
                            : CA_GRPC_INVALID_ARGUMENT;
            snprintf(k->msg, sizeof(k->msg), "%s",
                     used < 0 ? why : "the request is not one gRPC message");
        } else if (ca_grpc_request_decode(msg, mlen, &req, &why) < 0) {
            k->status = CA_GRPC_INVALID_ARGUMENT;
            snprintf(k->msg, sizeof(k->msg), "bad IstioCertificateRequest: %s",
                     why);
        } else {
            /* issue() logs its own refusals. */
            k->status = g->issue(g->arg, k->auth, &req, &k->out, k->msg,
                                 sizeof(k->msg));
            logged = 1;
        }
    }
    if (k->status != CA_GRPC_OK && !logged)
        log_warn("CA: refused a gRPC request from %s: %s", g->peer, k->msg);
    ca_grpc_request_dispose(&req);
    if (k->status == CA_GRPC_OK) {
        nghttp2_nv nv[2] = {ca_h2_nv(":status", "200"),
                            ca_h2_nv("content-type", "application/grpc")};
        nghttp2_data_provider prd = {.source.ptr = k,
                                     .read_callback = read_answer};
        g->ok++;
        if (nghttp2_submit_response(g->ng, k->id, nv, 2, &prd) != 0)
            nghttp2_submit_rst_stream(g->ng, NGHTTP2_FLAG_NONE, k->id,
                                      NGHTTP2_INTERNAL_ERROR);
        return;
    }
    /* Trailers-only: the status in the one HEADERS frame. */
    g->refused++;
    snprintf(st, sizeof(st), "%d", k->status);
    buf_init(&em, 4096);
    ca_grpc_message_encode(&em, k->msg);
    {
        nghttp2_nv nv[4] = {ca_h2_nv(":status", "200"),
                            ca_h2_nv("content-type", "application/grpc"),
                            ca_h2_nv("grpc-status", st),
                            ca_h2_nv("grpc-message", buf_cstr(&em))};
        if (nghttp2_submit_response(g->ng, k->id, nv, 4, NULL) != 0)
            nghttp2_submit_rst_stream(g->ng, NGHTTP2_FLAG_NONE, k->id,
                                      NGHTTP2_INTERNAL_ERROR);
    }
    buf_dispose(&em);
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f,
                            void *arg)
{
    struct ca_grpc_sess *g = arg;
    struct call *k;

    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (++g->ncalls > CA_GRPC_MAX_CALLS) {
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, f->hd.stream_id,
                                  NGHTTP2_REFUSED_STREAM);
        return 0;
    }
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    k->g = g;
    k->id = f->hd.stream_id;
    k->bad_type = 1;
    buf_init(&k->in, CA_GRPC_MAX_MESSAGE + 5);
    buf_init(&k->out, CA_GRPC_MAX_MESSAGE + 5);
    k->next = g->calls;
    g->calls = k;
    nghttp2_session_set_stream_user_data(ng, k->id, k);
    if (g->ncalls == CA_GRPC_MAX_CALLS)
        g->last_id = k->id;
    return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f,
                     const uint8_t *name, size_t nlen, const uint8_t *value,
                     size_t vlen, uint8_t flags, void *arg)
{
    struct call *k = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);

    (void)flags;
    (void)arg;
    if (k == NULL || f->hd.type != NGHTTP2_HEADERS)
        return 0;
    if (nlen == 5 && memcmp(name, ":path", 5) == 0) {
        k->bad_path = !(vlen == strlen(CA_GRPC_PATH) &&
                        memcmp(value, CA_GRPC_PATH, vlen) == 0);
    } else if (nlen == 7 && memcmp(name, ":method", 7) == 0) {
        if (!(vlen == 4 && memcmp(value, "POST", 4) == 0))
            k->bad_path = 1;
    } else if (nlen == 12 && memcmp(name, "content-type", 12) == 0) {
        k->bad_type =
            !(vlen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
              (vlen == 16 || value[16] == '+' || value[16] == ';'));
    } else if (nlen == 13 && memcmp(name, "authorization", 13) == 0) {
        if (vlen > CA_GRPC_MAX_AUTH) {
            k->too_large = 1;
        } else if (k->auth == NULL) {
            k->auth = strndup((const char *)value, vlen);
            if (k->auth == NULL)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
    }
    return 0;
}

static int on_data(nghttp2_session *ng, uint8_t flags, int32_t id,
                   const uint8_t *data, size_t len, void *arg)
{
    struct call *k = nghttp2_session_get_stream_user_data(ng, id);

    (void)flags;
    (void)arg;
    if (k != NULL && !k->too_large && buf_append(&k->in, data, len) < 0) {
        k->too_large = 1;
        buf_dispose(&k->in);
    }
    return 0;
}

static int on_frame(nghttp2_session *ng, const nghttp2_frame *f, void *arg)
{
    struct ca_grpc_sess *g = arg;
    struct call *k = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);

    if (k == NULL || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
        return 0;
    if (k->bad_type && !k->bad_path) {
        /* Not gRPC at all: an HTTP answer, as gRPC's spec says. */
        nghttp2_nv nv[1] = {ca_h2_nv(":status", "415")};
        g->refused++;
        log_warn("CA: refused an HTTP/2 request from %s: content-type is "
                 "not application/grpc (415)",
                 g->peer);
        nghttp2_submit_response(ng, k->id, nv, 1, NULL);
        return 0;
    }
    answer(g, k);
    return 0;
}

static int on_close(nghttp2_session *ng, int32_t id, uint32_t code, void *arg)
{
    struct ca_grpc_sess *g = arg;
    struct call *k = nghttp2_session_get_stream_user_data(ng, id);

    (void)code;
    if (k == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(ng, id, NULL);
    call_unlink(g, k);
    call_free(k);
    /* The last call this connection takes is answered: GOAWAY after it,
     * so the client sees the answer first and reconnects for more. */
    if (id == g->last_id)
        nghttp2_submit_goaway(ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR, NULL,
                              0);
    return 0;
}

struct ca_grpc_sess *ca_grpc_sess_new(struct conn *c, const char *peer,
                                      ca_grpc_issue_fn issue, void *arg)
{
    struct ca_grpc_sess *g = calloc(1, sizeof(*g));
    nghttp2_session_callbacks *cb = NULL;
    nghttp2_settings_entry iv[2] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, CA_GRPC_MAX_STREAMS},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, CA_GRPC_MAX_AUTH + 8192},
    };

    if (g == NULL || nghttp2_session_callbacks_new(&cb) != 0)
        goto fail;
    g->c = c;
    g->peer = peer;
    g->issue = issue;
    g->arg = arg;
    buf_init(&g->out, 256 * 1024);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb,
                                                            on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    if (nghttp2_session_server_new(&g->ng, cb, g) != 0)
        goto fail;
    nghttp2_session_callbacks_del(cb);
    if (nghttp2_submit_settings(g->ng, NGHTTP2_FLAG_NONE, iv, 2) != 0)
        goto fail2;
    return g;
fail:
    nghttp2_session_callbacks_del(cb);
fail2:
    ca_grpc_sess_free(g);
    return NULL;
}

int ca_grpc_sess_io(struct ca_grpc_sess *g, const char **why)
{
    return ca_h2_pump(g->c, g->ng, &g->out, why);
}

size_t ca_grpc_sess_calls(const struct ca_grpc_sess *g, size_t *refused)
{
    *refused = g->refused;
    return g->ok;
}

void ca_grpc_sess_free(struct ca_grpc_sess *g)
{
    if (g == NULL)
        return;
    while (g->calls != NULL) {
        struct call *k = g->calls;
        g->calls = k->next;
        call_free(k);
    }
    if (g->ng != NULL)
        nghttp2_session_del(g->ng);
    buf_dispose(&g->out);
    free(g);
}
