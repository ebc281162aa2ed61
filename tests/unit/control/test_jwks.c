/*
 * Unit tests for src/control/jwks.c against an HTTP server in the test: a
 * TCP listener on loopback served from the same event loop, answering
 * each connection with the canned answer the test sets. A first lookup
 * starts a fetch and finds nothing; the document runs on_change; chunked
 * answers are read to their last chunk; a failed or unusable refresh
 * keeps the last good document; a sweep drops unused URIs.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "control/jwks.h"

/* A P-256 public key: a JWKS jwt_keys_parse() accepts. */
#define GOOD                                                                   \
    "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":\"e1\","             \
    "\"x\":\"zc6y28LWjko86H3VqhQXnBrakld3C--kYH9xIJpTDnk\","                   \
    "\"y\":\"f4DdKtZqaySr4XHeBhuuSTo9ukbjfLb3YZXK_1X5Sho\"}]}"

struct fx {
    struct event_base *base;
    int lfd;
    struct event *lev;
    int port;
    char answer[4096]; /* what each connection gets */
    int requests;
    int changes;
    struct jwks_cache *c;
    char uri[64];
};

static void on_change(void *arg)
{
    struct fx *f = arg;

    f->changes++;
    event_base_loopbreak(f->base);
}

/* One server connection: the request head is read as it comes (the
 * client writes from the same loop), then answered and closed. */
struct sconn {
    struct fx *f;
    int fd;
    struct event *ev;
    char buf[2048];
    size_t have;
};

static void on_conn_read(evutil_socket_t fd, short what, void *arg)
{
    struct sconn *c = arg;
    struct fx *f = c->f;
    ssize_t n = recv(fd, c->buf + c->have, sizeof(c->buf) - 1 - c->have, 0);
    (void)what;

    if (n > 0) {
        c->have += (size_t)n;
        c->buf[c->have] = '\0';
        if (strstr(c->buf, "\r\n\r\n") == NULL)
            return;
        f->requests++;
        assert_non_null(strstr(c->buf, "GET /jwks?x=1 HTTP/1.1\r\n"));
        assert_non_null(strstr(c->buf, "\r\nHost: 127.0.0.1\r\n"));
        assert_int_equal(send(fd, f->answer, strlen(f->answer), 0),
                         (ssize_t)strlen(f->answer));
    } else if (n < 0 && errno == EAGAIN) {
        return;
    }
    event_free(c->ev);
    close(c->fd);
    free(c);
}

static void on_accept(evutil_socket_t fd, short what, void *arg)
{
    struct fx *f = arg;
    struct sconn *c;
    int s = accept4(fd, NULL, NULL, SOCK_NONBLOCK);
    (void)what;

    if (s < 0)
        return;
    c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->f = f;
    c->fd = s;
    c->ev = event_new(f->base, s, EV_READ | EV_PERSIST, on_conn_read, c);
    event_add(c->ev, NULL);
}

static void answer(struct fx *f, const char *status, const char *body)
{
    snprintf(f->answer, sizeof(f->answer),
             "HTTP/1.1 %s\r\ncontent-length: %zu\r\n\r\n%s", status,
             strlen(body), body);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct sockaddr_in a = {0};
    socklen_t al = sizeof(a);
    struct jwks_conf conf = {50, NULL}; /* refresh every 50 ms */

    assert_non_null(f);
    f->base = event_base_new();
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(f->lfd, 16), 0);
    assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &al), 0);
    f->port = ntohs(a.sin_port);
    f->lev = event_new(f->base, f->lfd, EV_READ | EV_PERSIST, on_accept, f);
    event_add(f->lev, NULL);
    f->c = jwks_cache_new(f->base, NULL, on_change, f);
    assert_non_null(f->c);
    assert_int_equal(jwks_cache_configure(f->c, &conf), 0);
    snprintf(f->uri, sizeof(f->uri), "http://127.0.0.1:%d/jwks?x=1", f->port);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    jwks_cache_free(f->c);
    event_free(f->lev);
    close(f->lfd);
    event_base_free(f->base);
    free(f);
    return 0;
}

/* Runs the loop until cond holds, for at most 2000 turns of 10 ms. */
#define RUN_UNTIL(f, cond)                                                     \
    do {                                                                       \
        struct timeval tv_ = {0, 10000};                                       \
        for (int i_ = 0; i_ < 2000 && !(cond); i_++) {                         \
            event_base_loopexit((f)->base, &tv_);                              \
            event_base_dispatch((f)->base);                                    \
        }                                                                      \
        assert_true(cond);                                                     \
    } while (0)

static const char *get(struct fx *f)
{
    size_t n;

    return jwks_cache_get(f->c, f->uri, 2000, &n);
}

static void test_fetch_refresh_and_keep(void **state)
{
    struct fx *f = *state;
    struct jwks_stats st;
    int seen;

    answer(f, "200 OK", GOOD);
    assert_null(get(f)); /* nothing yet; the fetch starts */
    RUN_UNTIL(f, f->changes == 1);
    assert_string_equal(get(f), GOOD);
    /* The same document again is no change. */
    RUN_UNTIL(f, f->requests >= 3);
    assert_int_equal(f->changes, 1);
    /* A refused answer, then an unusable document: the last good stays. */
    answer(f, "503 Service Unavailable", "");
    seen = f->requests;
    RUN_UNTIL(f, f->requests >= seen + 2);
    answer(f, "200 OK", "{\"keys\":[]}");
    seen = f->requests;
    RUN_UNTIL(f, f->requests >= seen + 1);
    assert_string_equal(get(f), GOOD);
    assert_int_equal(f->changes, 1);
    jwks_cache_stats(f->c, &st);
    assert_int_equal(st.uris, 1);
    assert_int_equal(st.changes, 1);
    assert_true(st.failures >= 3);
    assert_true(st.fetches >= (uint64_t)f->requests);
}

static void test_chunked(void **state)
{
    struct fx *f = *state;
    const char *doc = GOOD;
    size_t n = strlen(doc), half = n / 2;

    snprintf(f->answer, sizeof(f->answer),
             "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
             "%zx\r\n%.*s\r\n%zx\r\n%s\r\n0\r\n\r\n",
             half, (int)half, doc, n - half, doc + half);
    assert_null(get(f));
    RUN_UNTIL(f, f->changes == 1);
    assert_string_equal(get(f), GOOD);
}

static void test_sweep_drops_unused(void **state)
{
    struct fx *f = *state;
    struct jwks_stats st;

    answer(f, "200 OK", GOOD);
    jwks_cache_mark(f->c);
    assert_null(get(f));
    jwks_cache_sweep(f->c);
    jwks_cache_stats(f->c, &st);
    assert_int_equal(st.uris, 1);
    RUN_UNTIL(f, f->changes == 1);
    /* A build that no longer names it drops it, fetch timer and all. */
    jwks_cache_mark(f->c);
    jwks_cache_sweep(f->c);
    jwks_cache_stats(f->c, &st);
    assert_int_equal(st.uris, 0);
    assert_null(get(f)); /* new again */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fetch_refresh_and_keep, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep_drops_unused, setup,
                                        teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
