#ifndef STRAIT_HTTP_CONN_CONF_H
#define STRAIT_HTTP_CONN_CONF_H

#include "http/conn_conf-t.h"

/* http_limits_default(): 8 KiB request line, 60 KiB head, 100 headers,
 * underscores rejected. */
struct http_limits http_limits_default(void);

/*
 * http_name_underscore_twin() is true for a field name (name, n bytes) with
 * '_' that reads, once '_' is taken for '-' (ASCII case ignored), as a
 * framing or connection field (Transfer_Encoding, Content_Length, Host,
 * Connection, Upgrade, TE, Keep_Alive, Trailer, Proxy_Connection) or as
 * one strait sets or strips itself (X_Forwarded_*, X_Request_Id,
 * X_Real_IP, X_Envoy_*, X_B3_*). A back end that maps both spellings to
 * one name (CGI's HTTP_X_FORWARDED_FOR) would act on a field no proxy
 * checked, so both codecs drop such a field even under HTTP_US_ALLOW.
 */
int http_name_underscore_twin(const char *name, size_t n);

#endif
