#ifndef STRAIT_HTTP_CONN_CONF_H
#define STRAIT_HTTP_CONN_CONF_H

#include "http/conn_conf-t.h"

/* http_limits_default(): 8 KiB request line, 60 KiB head, 100 headers,
 * underscores rejected. */
struct http_limits http_limits_default(void);

#endif
