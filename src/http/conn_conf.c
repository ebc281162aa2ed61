#include "config.h"

#include <string.h>

#include "core/ascii.h"
#include "http/conn_conf.h"

struct http_limits http_limits_default(void)
{
    struct http_limits lim = {
        .max_request_line = 8 * 1024,
        .max_head = 60 * 1024,
        .max_headers = 100,
        .underscores = HTTP_US_REJECT,
    };
    return lim;
}

int http_name_framing_alias(const char *name, size_t n)
{
    static const char *const framing[] = {"content-length", "transfer-encoding",
                                          "host",           "connection",
                                          "upgrade",        "te",
                                          "keep-alive",     "trailer"};

    if (memchr(name, '_', n) == NULL)
        return 0;
    for (size_t k = 0; k < sizeof(framing) / sizeof(framing[0]); k++) {
        const char *f = framing[k];
        size_t i;

        if (strlen(f) != n)
            continue;
        for (i = 0; i < n; i++) {
            char c = ascii_lower(name[i]);

            if (c != f[i] && !(c == '_' && f[i] == '-'))
                break;
        }
        if (i == n)
            return 1;
    }
    return 0;
}
