#include "config.h"

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
