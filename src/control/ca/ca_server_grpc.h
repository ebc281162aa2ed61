#ifndef STRAIT_CONTROL_CA_CA_SERVER_GRPC_H
#define STRAIT_CONTROL_CA_CA_SERVER_GRPC_H

#include <stddef.h>

struct buf;
struct conn;
struct ca_grpc_request;

/*
 * The CA's gRPC API on one connection that chose ALPN h2 (ca_server.c
 * owns the connection, its deadline and its slot): an nghttp2 server
 * session that takes CreateCertificate calls (ca_grpc.h) and answers
 * each through issue(). Bounds: CA_GRPC_MAX_STREAMS at once, each
 * request message at most CA_GRPC_MAX_MESSAGE bytes, CA_GRPC_MAX_CALLS
 * calls per connection (then GOAWAY).
 */
#define CA_GRPC_MAX_STREAMS 4
#define CA_GRPC_MAX_CALLS 32
/* The longest authorization header kept (a JWT's bound, JWT_MAX_TOKEN). */
#define CA_GRPC_MAX_AUTH 32768

/*
 * issue() answers one call. auth: the authorization header's value
 * (NUL-terminated) or NULL; req: the decoded request. It appends the
 * framed IstioCertificateResponse to out and returns 0 (OK), or returns a
 * gRPC status code with a message in msg (cap bytes).
 */
typedef int (*ca_grpc_issue_fn)(void *arg, const char *auth,
                                const struct ca_grpc_request *req,
                                struct buf *out, char *msg, size_t cap);

struct ca_grpc_sess;

/* ca_grpc_sess_new() starts the session (the server's SETTINGS are
 * queued). peer names the client in log lines (kept, not copied: it must
 * outlive the session). NULL when memory is short. */
struct ca_grpc_sess *ca_grpc_sess_new(struct conn *c, const char *peer,
                                      ca_grpc_issue_fn issue, void *arg);

/* ca_grpc_sess_io() moves bytes and answers calls that are whole. 1
 * while the session goes on, 0 when it is over (both sides done), -1 on
 * an error with a static reason in *why. */
int ca_grpc_sess_io(struct ca_grpc_sess *g, const char **why);

/* Calls answered with OK, and with an error status. */
size_t ca_grpc_sess_calls(const struct ca_grpc_sess *g, size_t *refused);

void ca_grpc_sess_free(struct ca_grpc_sess *g);

#endif
