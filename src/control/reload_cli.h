#ifndef STRAIT_CONTROL_RELOAD_CLI_H
#define STRAIT_CONTROL_RELOAD_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * `strait reload [-c FILE] [--timeout SECONDS]`: asks the strait running
 * with FILE (its admin.address) to re-read its bootstrap (POST /reload)
 * and returns once the reload has taken effect or was refused, so that
 * systemd's ExecReload= fails when the new configuration does. argv[0] is
 * "reload". Returns the exit code: 0 reloaded, 1 refused (the reason on
 * stderr), 2 usage error, 3 strait could not be asked (not running,
 * draining, no answer in time).
 */
int reload_cli_main(int argc, char **argv, const char *default_config);

void reload_cli_usage(FILE *f, const char *default_config);

/*
 * `strait upgrade [-c FILE] [--timeout SECONDS]`: asks the strait running
 * with FILE to start a binary upgrade (POST /upgrade) and returns once the
 * new process serves (0, its pid on stdout) or the upgrade failed (1, the
 * reason on stderr; the running strait keeps serving). 2 usage error, 3
 * strait could not be asked or did not finish in time. argv[0] is
 * "upgrade".
 */
int upgrade_cli_main(int argc, char **argv, const char *default_config);

void upgrade_cli_usage(FILE *f, const char *default_config);

/* upgrade_started_pid() reads the pid of a POST /upgrade answer
 * ("upgrade started: pid N"); 0 when the body says something else. */
int upgrade_started_pid(const char *body, size_t n);

/* What the first line of a POST /reload answer says. */
enum reload_outcome {
    RELOAD_DONE,
    RELOAD_REFUSED,
    RELOAD_QUEUED,
    RELOAD_UNKNOWN,
};

/* reload_outcome_of() reads body (n bytes): "reloaded", "reload failed:
 * ...", "reload queued...", anything else is RELOAD_UNKNOWN. */
enum reload_outcome reload_outcome_of(const char *body, size_t n);

/*
 * reload_stat() finds the line "key: VALUE" of an admin /stats body (n
 * bytes) and stores VALUE, a decimal number, in *v. 0, or -1 when there
 * is no such line or VALUE is not a number.
 */
int reload_stat(const char *stats, size_t n, const char *key, uint64_t *v);

#endif
