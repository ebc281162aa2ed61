#ifndef STRAIT_CONTROL_CA_CA_H2_H
#define STRAIT_CONTROL_CA_CA_H2_H

#include <nghttp2/nghttp2.h>

struct buf;
struct conn;

/*
 * The byte pump between a connection and an nghttp2 session, shared by
 * the gRPC client (istiod) and the CA's gRPC server: one exchange or a
 * few per connection on the control loop, so it favours being short over
 * being fast.
 */

/* ca_h2_pump() feeds what c has to ng, writes what ng has to send (what
 * the socket does not take now waits in out, whose max must be at least
 * 128 KiB more than one frame: 256 KiB) and
 * sets c's interest. Returns 1 while the session goes on, 0 when it has
 * nothing left to read or write, -1 on an error with a static reason in
 * *why ("closed", a protocol error). Callbacks of ng run inside. */
int ca_h2_pump(struct conn *c, nghttp2_session *ng, struct buf *out,
               const char **why);

/* ca_h2_nv() is a header for nghttp2_submit_*: name and value are not
 * copied (they must live until the submit returns). */
nghttp2_nv ca_h2_nv(const char *name, const char *value);

#endif
