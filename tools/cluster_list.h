/* rampartctl cluster ENDPOINTS NAME: what etcd holds for a cluster (cluster_list.c). */
#ifndef RAMPART_TOOLS_CLUSTER_LIST_H
#define RAMPART_TOOLS_CLUSTER_LIST_H

/* argv: the words after "cluster". Returns rampartctl's exit status. */
int cluster_list_main(int argc, char **argv);

#endif
