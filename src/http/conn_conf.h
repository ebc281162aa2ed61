#ifndef STRAIT_HTTP_CONN_CONF_H
#define STRAIT_HTTP_CONN_CONF_H

#include "http/conn_conf-t.h"

/* http_limits_default(): 8 KiB request line, 60 KiB head, 100 headers,
 * underscores rejected. */
struct http_limits http_limits_default(void);

/*
 * http_name_framing_alias() is true for a field name (name, n bytes) with
 * '_' that reads as a framing or connection field once '_' is taken for '-'
 * (Transfer_Encoding, Content_Length, Host, Connection, Upgrade, TE,
 * Keep_Alive, Trailer). A back end that maps both spellings to one name
 * (CGI's HTTP_TRANSFER_ENCODING) would frame or route by a field no proxy
 * checked, so both codecs drop such a field even under HTTP_US_ALLOW.
 */
int http_name_framing_alias(const char *name, size_t n);

#endif
