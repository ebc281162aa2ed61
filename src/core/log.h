#ifndef STRAIT_CORE_LOG_H
#define STRAIT_CORE_LOG_H

#include <stdarg.h>
#include <stdint.h>

/*
 * One line per event, as text or JSON, written with a single write(2) so
 * lines from different threads never interleave.
 *
 * The sink's settings are the one piece of process-wide state below main.c:
 * every thread logs, and threading a logger through every call would buy
 * nothing. main.c sets them (log_configure) before threads start and on
 * reload; the level and format are read with relaxed atomics.
 */
enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_TEXT, LOG_JSON };

/* A structured field for log_event(): key and string value; fields with a
 * NULL value are skipped. Numbers are formatted by the caller. */
struct log_field {
    const char *key;
    const char *val;
    int raw; /* 1: val is a JSON number/bool, written unquoted in JSON */
};

void log_configure(enum log_level level, enum log_format format, int fd);
enum log_level log_get_level(void);

/* log_level_parse() maps "debug".."error" to a level; -1 when unknown. */
int log_level_parse(const char *s);
const char *log_level_name(enum log_level level);

void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* log_event() writes one record named msg with fields, e.g. an access-log
 * line: text "msg k=v k=v", JSON {"ts":..,"level":..,"msg":..,"k":"v"}. */
void log_event(enum log_level level, const char *msg,
               const struct log_field *fields, int nfields);

struct buf;

/* log_event_render() appends the record log_event() would write (with
 * its newline) to b instead, for callers that write it elsewhere (the
 * access log's writer thread). 0, or -1 when b is full (a cut record). */
int log_event_render(struct buf *b, enum log_level level, const char *msg,
                     const struct log_field *fields, int nfields);

/*
 * A rate limit for one kind of repeated line (accept failures at the
 * descriptor limit, refused floods): log_limited() writes at most one line
 * per interval_ms through lim, and says how many it held back since the
 * last one ("(N more like this suppressed)"). The caller owns lim, zeroed
 * before first use; one thread uses a given lim.
 */
struct log_limit {
    uint64_t last_ms;    /* when the last line was written; 0: never */
    uint64_t suppressed; /* lines held back since */
};

void log_limited(struct log_limit *lim, uint64_t interval_ms,
                 enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * LOG_LIMITED() is log_limited() with a limit of its own per call site and
 * thread, for callbacks that have no object of theirs to keep one in
 * (like the line cap and level, part of the sink's state: see above).
 */
#define LOG_LIMITED(interval_ms, level, ...)                                   \
    do {                                                                       \
        static __thread struct log_limit log_limited_site_;                    \
        log_limited(&log_limited_site_, (interval_ms), (level), __VA_ARGS__);  \
    } while (0)

#define log_debug(...)                                                         \
    do {                                                                       \
        if (log_get_level() <= LOG_DEBUG)                                      \
            log_msg(LOG_DEBUG, __VA_ARGS__);                                   \
    } while (0)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
