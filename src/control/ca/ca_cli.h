#ifndef STRAIT_CONTROL_CA_CA_CLI_H
#define STRAIT_CONTROL_CA_CA_CLI_H

#include <stdio.h>

/*
 * `strait ca ...`: init, show, token create, issue. argv[0] is "ca".
 * default_config is the bootstrap file used without -c. Returns the exit
 * code: 0 ok, 1 invalid configuration, 2 usage error, 3 the CA failed
 * (unreadable or mismatched files, wrong layout).
 */
int ca_cli_main(int argc, char **argv, const char *default_config);

/* The help text of `strait ca`. */
void ca_cli_usage(FILE *f);

#endif
