#ifndef STRAIT_CONTROL_LINK_LINK_CLI_H
#define STRAIT_CONTROL_LINK_LINK_CLI_H

#include <stdio.h>

/*
 * `strait link create --name SITE` prints, on this site, the MeshLink
 * the site called SITE applies to link to this one (a new credential
 * recorded in ca.dir/links/SITE, this site's trust bundle, network, trust
 * domain, catalog API and east-west gateway); `strait link delete --name
 * SITE` revokes it. argv[0] is "link". Exit codes: 0 ok, 1 invalid
 * configuration, 2 usage error, 3 the CA's files are unusable.
 */
int link_cli_main(int argc, char **argv, const char *default_config);

void link_cli_usage(FILE *f);

#endif
