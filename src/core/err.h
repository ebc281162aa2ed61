#ifndef STRAIT_CORE_ERR_H
#define STRAIT_CORE_ERR_H

#include <stdarg.h>

/*
 * Allocated error messages: the config and setup paths report failures
 * through a `char **err` argument (HAProxy's memprintf, tmux's xasprintf).
 * These functions are the only ones that write such a message.
 *
 * The rule for an already-set message: THE FIRST MESSAGE WINS. err_set() on
 * an *err that already holds a message leaves it untouched. The first
 * failure is the root cause (a callee's "ca.pem: no such file"), and a
 * later, vaguer report ("router: out of memory" on the way out, a caller's
 * generic message) must not hide it. A caller that wants to add context to
 * the message a callee left says so with err_prefix(); a caller that wants
 * a default when the callee said nothing calls err_set() and then
 * err_prefix():
 *
 *     if (listener_compile(..., err) < 0) {
 *         err_set(err, "cannot compile");      // only if the callee was mute
 *         err_prefix(err, "listener %s: ", name);
 *         goto fail;
 *     }
 *
 * Ownership: *err is NULL or a string from malloc that the caller of the
 * failing function owns and frees with free(). An err of NULL means the
 * caller does not want a message; every function here is then a no-op.
 *
 * Out of memory: no function here leaks or leaves *err dangling. When the
 * formatted message cannot be allocated, *err keeps the message it had; if
 * it had none, it becomes "out of memory" (or stays NULL if even that
 * cannot be allocated, so callers still print a fallback for NULL).
 */

/*
 * err_set() stores the printf-formatted message in *err unless *err is
 * already set (first message wins). Returns -1 always, so a failing
 * function can end with `return err_set(err, "...");`.
 */
int err_set(char **err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * err_give() hands an allocated message over (msg from malloc, or NULL:
 * "out of memory" when *err is unset): it becomes *err unless *err is
 * already set, in which case msg is freed (first message wins). For a
 * message built elsewhere, e.g. a list of errors collected in a buffer.
 * Returns -1 always.
 */
int err_give(char **err, char *msg);

/* err_vset() is err_set() with a va_list. */
int err_vset(char **err, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/*
 * err_prefix() puts the printf-formatted prefix in front of the message in
 * *err, which it replaces (the old string is freed). The prefix carries its
 * own separator: err_prefix(err, "listener %s: ", name) turns "bind: in
 * use" into "listener a: bind: in use". When *err is NULL the prefix goes
 * before "unknown error". Out of memory leaves the old message as it was.
 * The arguments may point into *err. Returns -1 always.
 */
int err_prefix(char **err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
