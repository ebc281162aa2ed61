/*
 * Unit tests for src/core/log.c. The sink is pointed at a pipe so each test
 * reads back exactly what one call wrote: one line, in text or JSON.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/log.h"

/* The sink's line cap (LOG_LINE_MAX in log.c). */
#define LINE_MAX_BYTES 16384
/* "2024-01-02T03:04:05.678Z" */
#define TS_LEN 24

struct sink {
    int rfd;
    int wfd;
    char out[4 * LINE_MAX_BYTES];
    size_t len;
};

static int setup(void **state)
{
    struct sink *s = calloc(1, sizeof(*s));
    int fds[2];

    if (s == NULL || pipe2(fds, O_CLOEXEC) < 0) {
        free(s);
        return -1;
    }
    /* Only the read end is non-blocking: the logger's write must complete. */
    if (fcntl(fds[0], F_SETFL, O_NONBLOCK) < 0) {
        close(fds[0]);
        close(fds[1]);
        free(s);
        return -1;
    }
    s->rfd = fds[0];
    s->wfd = fds[1];
    log_configure(LOG_INFO, LOG_TEXT, s->wfd);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    struct sink *s = *state;

    log_configure(LOG_INFO, LOG_TEXT, 2);
    close(s->rfd);
    close(s->wfd);
    free(s);
    return 0;
}

/* drain() reads everything the pipe holds into s->out (NUL-terminated) and
 * returns its length. */
static size_t drain(struct sink *s)
{
    s->len = 0;
    for (;;) {
        ssize_t n = read(s->rfd, s->out + s->len, sizeof(s->out) - 1 - s->len);
        if (n > 0) {
            s->len += (size_t)n;
            continue;
        }
        assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
        break;
    }
    s->out[s->len] = '\0';
    return s->len;
}

static size_t count_newlines(const char *p, size_t n)
{
    size_t c = 0;

    for (size_t i = 0; i < n; i++)
        c += p[i] == '\n';
    return c;
}

/* check_ts() asserts p starts with an RFC 3339 UTC timestamp with
 * milliseconds. */
static void check_ts(const char *p)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";

    for (size_t i = 0; i < TS_LEN; i++) {
        if (shape[i] == 'd')
            assert_true(p[i] >= '0' && p[i] <= '9');
        else
            assert_int_equal(p[i], shape[i]);
    }
}

/* one_line() drains the pipe, asserts it holds exactly one line and
 * returns it without its timestamp (text) for comparison. */
static const char *one_line(struct sink *s)
{
    size_t n = drain(s);

    assert_true(n > 0);
    assert_int_equal(count_newlines(s->out, n), 1);
    assert_int_equal(s->out[n - 1], '\n');
    return s->out;
}

static void expect_text(struct sink *s, const char *rest)
{
    const char *line = one_line(s);

    check_ts(line);
    assert_string_equal(line + TS_LEN, rest);
}

/* expect_json() compares a JSON line with want, where want holds "TS" in
 * place of the timestamp. */
static void expect_json(struct sink *s, const char *want)
{
    const char *line = one_line(s);
    const char *ts = strstr(want, "TS");
    size_t pre;

    assert_non_null(ts);
    pre = (size_t)(ts - want);
    assert_memory_equal(line, want, pre);
    check_ts(line + pre);
    assert_string_equal(line + pre + TS_LEN, ts + 2);
}

static void expect_nothing(struct sink *s)
{
    assert_int_equal(drain(s), 0);
}

static void test_text_line(void **state)
{
    struct sink *s = *state;

    log_info("hello %d", 42);
    expect_text(s, " info hello 42\n");
    log_warn("disk %s", "full");
    expect_text(s, " warn disk full\n");
    log_error("x");
    expect_text(s, " error x\n");
}

static void test_json_line(void **state)
{
    struct sink *s = *state;

    log_configure(LOG_INFO, LOG_JSON, s->wfd);
    log_info("hello %d", 42);
    expect_json(s, "{\"ts\":\"TS\",\"level\":\"info\",\"msg\":\"hello 42\"}\n");
    log_error("quote \" backslash \\ tab \t bell \a");
    expect_json(s, "{\"ts\":\"TS\",\"level\":\"error\",\"msg\":"
                   "\"quote \\\" backslash \\\\ tab \\t bell \\u0007\"}\n");
    /* A newline in the message is escaped: still one line. */
    log_warn("two\nlines\r\n");
    expect_json(s, "{\"ts\":\"TS\",\"level\":\"warn\",\"msg\":"
                   "\"two\\nlines\\r\\n\"}\n");
}

static void test_level_filter(void **state)
{
    struct sink *s = *state;
    const struct log_field f[] = {{"k", "v", 0}};

    log_configure(LOG_WARN, LOG_TEXT, s->wfd);
    assert_int_equal(log_get_level(), LOG_WARN);
    log_debug("debug %d", 1);
    log_info("info %d", 2);
    log_event(LOG_INFO, "event", f, 1);
    expect_nothing(s);
    log_warn("w");
    expect_text(s, " warn w\n");
    log_event(LOG_ERROR, "event", f, 1);
    expect_text(s, " error event k=v\n");

    log_configure(LOG_DEBUG, LOG_TEXT, s->wfd);
    log_debug("d%d", 3);
    expect_text(s, " debug d3\n");

    log_configure(LOG_ERROR, LOG_JSON, s->wfd);
    log_warn("w");
    expect_nothing(s);
    log_error("e");
    expect_json(s, "{\"ts\":\"TS\",\"level\":\"error\",\"msg\":\"e\"}\n");
}

static void test_level_names(void **state)
{
    (void)state;
    assert_int_equal(log_level_parse("debug"), LOG_DEBUG);
    assert_int_equal(log_level_parse("info"), LOG_INFO);
    assert_int_equal(log_level_parse("INFO"), LOG_INFO);
    assert_int_equal(log_level_parse("warn"), LOG_WARN);
    assert_int_equal(log_level_parse("warning"), LOG_WARN);
    assert_int_equal(log_level_parse("Error"), LOG_ERROR);
    assert_int_equal(log_level_parse("fatal"), -1);
    assert_int_equal(log_level_parse(""), -1);
    assert_string_equal(log_level_name(LOG_DEBUG), "debug");
    assert_string_equal(log_level_name(LOG_INFO), "info");
    assert_string_equal(log_level_name(LOG_WARN), "warn");
    assert_string_equal(log_level_name(LOG_ERROR), "error");
}

static const struct log_field access_fields[] = {
    {"peer", "10.0.0.1:5555", 0},
    {"skipped", NULL, 0},
    {"bytes", "123", 1},
    {"path", "/a b", 0},
    {"empty", "", 0},
    {"eq", "a=b", 0},
    {"quote", "say \"x\"", 0},
    {"tab", "a\tb", 0},
    {"nl", "a\nb", 0},
    {"ok", "true", 1},
};
#define NACCESS ((int)(sizeof(access_fields) / sizeof(access_fields[0])))

static void test_event_text(void **state)
{
    struct sink *s = *state;

    log_event(LOG_INFO, "access", access_fields, NACCESS);
    /* Values with spaces, quotes, '=' or control characters are quoted;
     * NULL values are skipped; raw only matters for JSON. */
    expect_text(s, " info access peer=10.0.0.1:5555 bytes=123 path=\"/a b\" "
                   "empty=\"\" eq=\"a=b\" quote=\"say \\\"x\\\"\" "
                   "tab=\"a\\tb\" nl=\"a\\nb\" ok=true\n");

    log_event(LOG_WARN, "no fields", NULL, 0);
    expect_text(s, " warn no fields\n");
}

static void test_event_json(void **state)
{
    struct sink *s = *state;

    log_configure(LOG_INFO, LOG_JSON, s->wfd);
    log_event(LOG_INFO, "access", access_fields, NACCESS);
    /* Raw values are unquoted numbers/booleans; the others are strings. */
    expect_json(s, "{\"ts\":\"TS\",\"level\":\"info\",\"msg\":\"access\","
                   "\"peer\":\"10.0.0.1:5555\",\"bytes\":123,"
                   "\"path\":\"/a b\",\"empty\":\"\",\"eq\":\"a=b\","
                   "\"quote\":\"say \\\"x\\\"\",\"tab\":\"a\\tb\","
                   "\"nl\":\"a\\nb\",\"ok\":true}\n");

    /* Keys are escaped too. */
    {
        const struct log_field f[] = {{"we\"ird", "v", 0}};
        log_event(LOG_INFO, "m", f, 1);
        expect_json(s, "{\"ts\":\"TS\",\"level\":\"info\",\"msg\":\"m\","
                       "\"we\\\"ird\":\"v\"}\n");
    }
}

/* log_msg() formats into a buffer of half the line cap: a longer message
 * is cut there, and the line still ends with exactly one newline. */
static void test_long_message_text(void **state)
{
    struct sink *s = *state;
    size_t n = 20000;
    char *big = malloc(n + 1);
    const char *line;

    assert_non_null(big);
    memset(big, 'x', n);
    big[n] = '\0';
    log_info("%s", big);
    line = one_line(s);
    check_ts(line);
    assert_memory_equal(line + TS_LEN, " info xxxx", 10);
    assert_true(s->len <= LINE_MAX_BYTES);
    assert_int_equal(s->len, TS_LEN + 6 + LINE_MAX_BYTES / 2 - 1 + 1);
    free(big);
}

/* Escaping can make a JSON line outgrow the cap: the line is cut at the
 * cap and its last byte becomes the newline. 8191 quotes (log_msg's limit)
 * escape to 16382 bytes, more than the room left after the header. */
static void test_long_message_json(void **state)
{
    struct sink *s = *state;
    size_t n = 20000;
    char *big = malloc(n + 1);
    const char *line;

    assert_non_null(big);
    memset(big, '"', n);
    big[n] = '\0';
    log_configure(LOG_INFO, LOG_JSON, s->wfd);
    log_error("%s", big);
    line = one_line(s);
    assert_memory_equal(line, "{\"ts\":\"", 7);
    assert_int_equal(s->len, LINE_MAX_BYTES);
    free(big);
}

static void test_long_field_json(void **state)
{
    struct sink *s = *state;
    size_t n = 3 * LINE_MAX_BYTES;
    char *big = malloc(n + 1);
    struct log_field f[2] = {{"a", NULL, 0}, {"b", "after", 0}};

    assert_non_null(big);
    memset(big, '\x01', n);
    big[n] = '\0';
    f[0].val = big;
    log_configure(LOG_INFO, LOG_JSON, s->wfd);
    log_event(LOG_INFO, "m", f, 2);
    one_line(s);
    assert_true(s->len <= LINE_MAX_BYTES);
    free(big);
}

/* log_event() takes msg as given (log_msg cuts it to half the cap first).
 * A record longer than the cap must still be a cut-short line that starts
 * with its timestamp, level and the start of the message, as log_write's
 * "a line cut short by the cap" promises, not an empty line. */
static void test_long_event_text_is_truncated_not_dropped(void **state)
{
    struct sink *s = *state;
    size_t n = 2 * LINE_MAX_BYTES;
    char *big = malloc(n + 1);
    const char *line;

    assert_non_null(big);
    memset(big, 'y', n);
    big[n] = '\0';
    log_event(LOG_INFO, big, NULL, 0);
    free(big);
    line = one_line(s);
    assert_true(s->len <= LINE_MAX_BYTES);
    assert_true(s->len > TS_LEN + 10);
    check_ts(line);
    assert_memory_equal(line + TS_LEN, " info yyyy", 10);
}

/* One line per event, in text as in JSON: a newline inside the message
 * must not start a second (forgeable) log line. */
static void test_text_message_newline_stays_one_line(void **state)
{
    struct sink *s = *state;

    log_info("user said: %s", "hi\n2024-01-01T00:00:00.000Z error forged");
    one_line(s);
}

/* Lines written by concurrent threads never interleave. */
#define LOG_THREADS 4
#define LOG_LINES 100

static void *log_thread(void *arg)
{
    int id = (int)(intptr_t)arg;

    for (int i = 0; i < LOG_LINES; i++)
        log_info("thread=%d seq=%03d padding=abcdefghijklmnopqrstuvwxyz", id,
                 i);
    return NULL;
}

static void test_threads_do_not_interleave(void **state)
{
    struct sink *s = *state;
    pthread_t th[LOG_THREADS];
    int next[LOG_THREADS] = {0};
    char *line, *save = NULL;
    size_t lines = 0;

    for (int i = 0; i < LOG_THREADS; i++)
        assert_int_equal(
            pthread_create(&th[i], NULL, log_thread, (void *)(intptr_t)i), 0);
    for (int i = 0; i < LOG_THREADS; i++)
        pthread_join(th[i], NULL);
    drain(s);
    for (line = strtok_r(s->out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        int id, seq, used = 0;
        check_ts(line);
        assert_int_equal(sscanf(line + TS_LEN,
                                " info thread=%d seq=%d "
                                "padding=abcdefghijklmnopqrstuvwxyz%n",
                                &id, &seq, &used),
                         2);
        assert_int_equal(line[TS_LEN + (size_t)used], '\0');
        assert_in_range(id, 0, LOG_THREADS - 1);
        /* Each thread's lines arrive in its own order. */
        assert_int_equal(seq, next[id]);
        next[id]++;
        lines++;
    }
    assert_int_equal(lines, LOG_THREADS * LOG_LINES);
}

/* A limited line is written once per interval, and the next one after the
 * interval says how many were held back. */
static void test_limited_lines(void **state)
{
    struct sink *s = *state;
    struct log_limit lim = {0, 0};

    log_limited(&lim, 3600 * 1000, LOG_WARN, "accept: %s", "EMFILE");
    drain(s);
    assert_non_null(strstr(s->out, " warn accept: EMFILE\n"));
    for (int i = 0; i < 1000; i++)
        log_limited(&lim, 3600 * 1000, LOG_WARN, "accept: %s", "EMFILE");
    assert_int_equal(drain(s), 0);
    assert_int_equal(lim.suppressed, 1000);
    /* The interval has passed: the limit's clock is reset, as time would
     * (the held-back count stays). */
    lim.last_ms = 0;
    log_limited(&lim, 3600 * 1000, LOG_WARN, "accept: %s", "EMFILE");
    drain(s);
    assert_non_null(
        strstr(s->out, "accept: EMFILE (1000 more like this suppressed)\n"));
    assert_int_equal(lim.suppressed, 0);
    /* Below the level: neither written nor counted. */
    lim.last_ms = 0;
    log_limited(&lim, 3600 * 1000, LOG_DEBUG, "quiet");
    assert_int_equal(drain(s), 0);
    assert_int_equal(lim.suppressed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_text_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_level_filter, setup, teardown),
        cmocka_unit_test(test_level_names),
        cmocka_unit_test_setup_teardown(test_event_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_event_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_message_text, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_long_message_json, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_long_field_json, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_long_event_text_is_truncated_not_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_text_message_newline_stays_one_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limited_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_do_not_interleave, setup,
                                        teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
