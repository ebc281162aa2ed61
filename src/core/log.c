#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/json.h"
#include "core/log.h"

#define LOG_LINE_MAX 16384

/* See log.h: the only process-wide state below main.c. */
static int log_level_cur = LOG_INFO;
static int log_format_cur = LOG_TEXT;
static int log_fd = 2;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_configure(enum log_level level, enum log_format format, int fd)
{
    __atomic_store_n(&log_level_cur, (int)level, __ATOMIC_RELAXED);
    __atomic_store_n(&log_format_cur, (int)format, __ATOMIC_RELAXED);
    __atomic_store_n(&log_fd, fd, __ATOMIC_RELAXED);
}

enum log_level log_get_level(void)
{
    return (enum log_level)__atomic_load_n(&log_level_cur, __ATOMIC_RELAXED);
}

int log_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return LOG_WARN;
    return -1;
}

const char *log_level_name(enum log_level level)
{
    return level_names[level];
}

static void log_timestamp(char *out, size_t n)
{
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t len = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);

    snprintf(out + len, n - len, ".%03dZ", (int)(ts.tv_nsec / 1000000) % 1000);
}

static void log_write(struct buf *b)
{
    const char *p;
    size_t left;

    /* A line cut short by the cap still ends with a newline. */
    if (buf_append(b, "\n", 1) < 0)
        b->data[b->tail - 1] = '\n';
    p = buf_ptr(b);
    left = buf_len(b);
    while (left > 0) {
        ssize_t n = write(__atomic_load_n(&log_fd, __ATOMIC_RELAXED), p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        p += n;
        left -= (size_t)n;
    }
}

/* Text values that hold spaces, quotes or '=' are quoted so lines stay
 * machine-splittable. */
static void text_value(struct buf *b, const char *v)
{
    if (*v != '\0' && strpbrk(v, " \"=\t\n\r") == NULL)
        buf_puts(b, v);
    else
        json_str(b, v);
}

/* One record, without its newline, appended to b. */
static void log_render(struct buf *b, enum log_level level, const char *msg,
                       const struct log_field *fields, int nfields)
{
    char cut[LOG_LINE_MAX / 2];
    char ts[40];
    int json = __atomic_load_n(&log_format_cur, __ATOMIC_RELAXED) == LOG_JSON;

    /* A message longer than half a line is cut, so the record keeps its
     * head and fields instead of being refused by the buffer's cap. */
    if (strlen(msg) >= sizeof(cut)) {
        memcpy(cut, msg, sizeof(cut) - 1);
        cut[sizeof(cut) - 1] = '\0';
        msg = cut;
    }
    log_timestamp(ts, sizeof(ts));
    if (json) {
        buf_printf(b, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":", ts,
                   level_names[level]);
        json_str(b, msg);
        for (int i = 0; i < nfields; i++) {
            if (fields[i].val == NULL)
                continue;
            buf_puts(b, ",");
            json_str(b, fields[i].key);
            buf_puts(b, ":");
            if (fields[i].raw)
                buf_puts(b, fields[i].val);
            else
                json_str(b, fields[i].val);
        }
        buf_puts(b, "}");
    } else {
        /* A message with a line break is quoted, so a caller-supplied
         * string can never start a forged line of its own. */
        buf_printf(b, "%s %s ", ts, level_names[level]);
        if (strpbrk(msg, "\n\r") != NULL)
            json_str(b, msg);
        else
            buf_puts(b, msg);
        for (int i = 0; i < nfields; i++) {
            if (fields[i].val == NULL)
                continue;
            buf_printf(b, " %s=", fields[i].key);
            text_value(b, fields[i].val);
        }
    }
}

int log_event_render(struct buf *b, enum log_level level, const char *msg,
                     const struct log_field *fields, int nfields)
{
    log_render(b, level, msg, fields, nfields);
    return buf_append(b, "\n", 1);
}

static void log_emit(enum log_level level, const char *msg,
                     const struct log_field *fields, int nfields)
{
    char storage[LOG_LINE_MAX];
    struct buf b = {storage, 0, 0, sizeof(storage), sizeof(storage), 0};

    log_render(&b, level, msg, fields, nfields);
    /* The buffer points at stack storage: never call buf_dispose here. */
    log_write(&b);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    char msg[LOG_LINE_MAX / 2];
    va_list ap;

    if ((int)level < __atomic_load_n(&log_level_cur, __ATOMIC_RELAXED))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_emit(level, msg, NULL, 0);
}

void log_event(enum log_level level, const char *msg,
               const struct log_field *fields, int nfields)
{
    if ((int)level < __atomic_load_n(&log_level_cur, __ATOMIC_RELAXED))
        return;
    log_emit(level, msg, fields, nfields);
}

void log_limited(struct log_limit *lim, uint64_t interval_ms,
                 enum log_level level, const char *fmt, ...)
{
    char msg[LOG_LINE_MAX / 2];
    uint64_t now = clock_ms();
    va_list ap;
    int n;

    if ((int)level < __atomic_load_n(&log_level_cur, __ATOMIC_RELAXED))
        return;
    if (lim->last_ms != 0 && now - lim->last_ms < interval_ms) {
        lim->suppressed++;
        return;
    }
    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (lim->suppressed > 0 && n >= 0 && (size_t)n < sizeof(msg))
        snprintf(msg + n, sizeof(msg) - (size_t)n,
                 " (%llu more like this suppressed)",
                 (unsigned long long)lim->suppressed);
    lim->suppressed = 0;
    lim->last_ms = now ? now : 1;
    log_emit(level, msg, NULL, 0);
}
