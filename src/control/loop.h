#ifndef STRAIT_CONTROL_LOOP_H
#define STRAIT_CONTROL_LOOP_H

#include <stdint.h>

struct bootstrap;
struct event_base;

/*
 * The server: the main thread's control loop, the workers, the listeners
 * and the admin API. Only the main thread touches it.
 */
struct server;
struct ca_identity;

/*
 * server_new() takes ownership of bs, loads the resources of config.dir,
 * binds every listener and the admin API, and starts the workers. NULL
 * with an allocated message in *err (e.g. an address already in use), and
 * *config_error set when the cause is invalid configuration; the process
 * should exit non-zero.
 */
struct server *server_new(struct event_base *base, struct bootstrap *bs,
                          const char *config_path, struct ca_identity *identity,
                          int *config_error, char **err);

/* server_reload() re-reads the bootstrap file; a bad file is logged and
 * changes nothing. */
void server_reload(struct server *s);

/* server_drain() stops accepting, lets sessions finish, and ends the main
 * loop when they have or at the drain deadline. */
void server_drain(struct server *s, const char *why);

/* server_free() stops the workers, closes everything and frees s. */
void server_free(struct server *s);

#endif
