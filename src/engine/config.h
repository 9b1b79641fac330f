/* The engine's configuration as parsed from key=value strings (rampart.h lists the
 * keys). Internal: frontends see only struct rampart_config as an opaque type. The
 * struct itself is engine_settings.h's, since the engine's state holds it.
 *
 * Errors: -1 with a sentence in err (CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_CONFIG_H
#define RAMPART_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "engine_settings.h"
#include "rampart.h"

/* The servers the device will have: those listed, or count= when etcd chooses them at
 * open. */
unsigned config_server_count(const struct rampart_config *c);

/* The policy and group size the engine will use, after applying defaults for the
 * number of servers. group is 1 for mirror. */
void rampart_config_effective(const struct rampart_config *c, enum rampart_redundancy *policy,
                              unsigned *group);

/* Reads a cluster file's servers into c->servers, replacing those there (reload). */
int config_read_cluster_file(struct rampart_config *c, const char *path, char *err,
                             size_t errlen);

const char *rampart_redundancy_name(enum rampart_redundancy r);

#endif
