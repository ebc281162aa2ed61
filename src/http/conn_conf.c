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

/* twin_of() is true when name (n bytes) reads as f once '_' is taken for
 * '-', ASCII case ignored; with prefix, when it starts so. */
static int twin_of(const char *name, size_t n, const char *f, int prefix)
{
    size_t fn = strlen(f);

    if (prefix ? n < fn : n != fn)
        return 0;
    for (size_t i = 0; i < fn; i++) {
        char c = ascii_lower(name[i]);

        if (c != f[i] && !(c == '_' && f[i] == '-'))
            return 0;
    }
    return 1;
}

int http_name_underscore_twin(const char *name, size_t n)
{
    /* Framing and connection fields, then those strait sets or strips
     * itself: forwarding a twin of one would hand a back end that folds
     * '_' into '-' a value the gateway never vouched for. */
    static const char *const exact[] = {
        "content-length", "transfer-encoding", "host",
        "connection",     "upgrade",           "te",
        "keep-alive",     "trailer",           "proxy-connection",
        "x-request-id",   "x-real-ip"};
    static const char *const prefix[] = {"x-forwarded-", "x-envoy-", "x-b3-"};

    if (memchr(name, '_', n) == NULL)
        return 0;
    for (size_t k = 0; k < sizeof(exact) / sizeof(exact[0]); k++)
        if (twin_of(name, n, exact[k], 0))
            return 1;
    for (size_t k = 0; k < sizeof(prefix) / sizeof(prefix[0]); k++)
        if (twin_of(name, n, prefix[k], 1))
            return 1;
    return 0;
}
