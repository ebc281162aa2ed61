#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

/* The message an allocation failure leaves when there was none before. */
static void set_oom(char **err)
{
    if (*err == NULL)
        *err = strdup("out of memory");
}

int err_give(char **err, char *msg)
{
    if (err == NULL || *err != NULL) {
        free(msg);
        return -1;
    }
    if (msg == NULL)
        set_oom(err);
    else
        *err = msg;
    return -1;
}

int err_vset(char **err, const char *fmt, va_list ap)
{
    char *m = NULL;

    if (err == NULL || *err != NULL)
        return -1;
    if (vasprintf(&m, fmt, ap) < 0) {
        set_oom(err);
        return -1;
    }
    *err = m;
    return -1;
}

int err_set(char **err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    err_vset(err, fmt, ap);
    va_end(ap);
    return -1;
}

int err_prefix(char **err, const char *fmt, ...)
{
    char *prefix = NULL, *m;
    const char *old;
    size_t np, no;
    va_list ap;
    int n;

    if (err == NULL)
        return -1;
    /* Formatted before *err is touched: the arguments may point into it. */
    va_start(ap, fmt);
    n = vasprintf(&prefix, fmt, ap);
    va_end(ap);
    if (n < 0) {
        set_oom(err);
        return -1;
    }
    old = *err != NULL ? *err : "unknown error";
    np = (size_t)n;
    no = strlen(old);
    m = malloc(np + no + 1);
    if (m == NULL) {
        free(prefix);
        set_oom(err);
        return -1;
    }
    memcpy(m, prefix, np);
    memcpy(m + np, old, no + 1);
    free(prefix);
    free(*err);
    *err = m;
    return -1;
}
