#ifndef STRAIT_CONTROL_ETCD_CLI_H
#define STRAIT_CONTROL_ETCD_CLI_H

/*
 * The fleet commands on etcd, kubectl-like:
 *   strait apply -f FILE|DIR   validate against what the prefix holds,
 *                              then write every resource in one txn
 *   strait delete KIND NAME [-n NS]
 *   strait get KIND [NAME] [-n NS]
 * cmd is "apply", "delete" or "get"; argv[0] is the command name. The
 * etcd endpoints, prefix, TLS and auth come from the bootstrap file's
 * config.etcd (-c, default default_config), or --endpoints and --prefix.
 * Returns the exit status (0 ok, 1 refused or failed, 2 usage).
 */
int etcd_cli_main(const char *cmd, int argc, char **argv,
                  const char *default_config);

#endif
