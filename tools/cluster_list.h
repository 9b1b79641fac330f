/* rampartctl cluster ENDPOINTS NAME: what etcd holds for a cluster (cluster_list.c).
 *
 * Errors: rampartctl's exit status (0, 1 or 2), its sentence already written to stderr.
 */
#ifndef RAMPART_TOOLS_CLUSTER_LIST_H
#define RAMPART_TOOLS_CLUSTER_LIST_H

/* argv: the words after "cluster". Returns rampartctl's exit status. */
int cluster_list_main(int argc, char **argv);

#endif
