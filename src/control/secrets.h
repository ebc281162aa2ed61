#ifndef STRAIT_CONTROL_SECRETS_H
#define STRAIT_CONTROL_SECRETS_H

struct resource_set;

/*
 * The values of the Kubernetes Secrets in the configuration directory,
 * as files the TLS layer reads by path: each value is an anonymous
 * in-memory file (memfd), read as /proc/self/fd/N, so key material is
 * never written to disk. A value whose bytes did not change keeps its
 * file (and so its path) across reloads: the listener that uses it is
 * kept. A file is closed once neither the set in effect nor the one
 * before it uses it.
 */
struct secret_store;

struct secret_store *secret_store_new(void);
void secret_store_free(struct secret_store *st);

/* secret_store_apply() gives each credential value of set's Secrets its
 * file (res_secret_set_path()). 0, or -1 when a file cannot be made (the
 * value then has no path; the Gateway that needs it reports it). */
int secret_store_apply(struct secret_store *st, struct resource_set *set);

/* secret_store_commit() says set took effect: files neither it nor the
 * set before it use are closed. */
void secret_store_commit(struct secret_store *st,
                         const struct resource_set *set);

#endif
