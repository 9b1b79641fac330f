/* The keys a rampart cluster keeps in etcd (docs/scaling.md), under /rampart/CLUSTER/:
 *
 *   servers/ID  {"address":"HOST:PORT","domain":"rack-a","capacity_pages":N,
 *                "version":"0.1.0"}                         the server, under its lease
 *   free/ID     {"free_pages":N,"pressure":false,"draining":false}   the same lease
 *
 * ID is the server's advertised HOST:PORT unless its operator names it. Values are
 * written with snprintf (no allocation in the announcing daemon) and read with json-c.
 *
 * Errors: rp_cluster_registry_init and rp_cluster_registry_read are convention 1 (-1
 * with a sentence in err, CONTRIBUTING.md); the key and value writers return 0 or
 * -1 when out does not hold the text,
 * rp_cluster_registry_take returns -1 for a key it does not take, and
 * rp_cluster_name_ok returns false.
 */
#ifndef RAMPART_ETCD_CLUSTER_KEYS_H
#define RAMPART_ETCD_CLUSTER_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "etcd_gateway.h"

#define RP_CLUSTER_ID_LEN 128
#define RP_CLUSTER_ADDRESS_LEN 96
#define RP_CLUSTER_DOMAIN_LEN 64
#define RP_CLUSTER_NAME_LEN 64

/* "/rampart/CLUSTER/" */
int rp_cluster_prefix(char *out, size_t len, const char *cluster);
/* "/rampart/CLUSTER/KIND/ID", kind "servers" or "free". */
int rp_cluster_key(char *out, size_t len, const char *cluster, const char *kind,
                   const char *id);
/* A cluster name: letters, digits, '-', '_', '.', 1 to 63 of them. */
bool rp_cluster_name_ok(const char *name);

int rp_cluster_server_value(char *out, size_t len, const char *address, const char *domain,
                            uint64_t capacity_pages, const char *version);
int rp_cluster_free_value(char *out, size_t len, uint64_t free_pages, bool pressure,
                          bool draining);

struct rp_cluster_server {
  char id[RP_CLUSTER_ID_LEN];
  char address[RP_CLUSTER_ADDRESS_LEN];
  char domain[RP_CLUSTER_DOMAIN_LEN];
  uint64_t capacity_pages;
  uint64_t free_pages;
  bool pressure, draining;
  bool registered;     /* servers/ID is there (its lease lives) */
  bool advertised;     /* free/ID is there */
  uint32_t generation; /* bumped when the entry is given to another ID */
  /* during a read: a flag set before it whose key the read has not seen yet */
  bool unread_server, unread_free;
};

/* What etcd holds for one cluster, as a table by ID. Entries are never moved; a key
 * deleted clears its flag, and an entry whose ID has neither key is given to the next
 * new ID (its generation changes then), so IDs that come and go never fill the table:
 * it holds cap IDs registered at once. */
struct rp_cluster_registry {
  char prefix[RP_CLUSTER_NAME_LEN + 16];
  struct rp_cluster_server *servers;
  unsigned n, cap;
};

/* -1 with a sentence in err when libcurl or json-c cannot be loaded, the cluster's name
 * is not one rampart takes, or memory runs out. */
int rp_cluster_registry_init(struct rp_cluster_registry *r, const char *cluster, unsigned cap,
                             char *err, size_t errlen);
void rp_cluster_registry_free(struct rp_cluster_registry *r);
/* Applies one key (from a range read or a watch event). The index of the server it
 * concerns, or -1 when the key is not one of ours, does not parse, is a deletion of an
 * ID not in the table, or the table is full of live IDs. */
int rp_cluster_registry_take(struct rp_cluster_registry *r, bool deleted, const char *key,
                             const char *value);
/* Reads the servers' keys (servers/ and free/ under the prefix, not the devices'
 * records); entries whose keys are gone lose their flags. *revision (may be NULL) is
 * where a watch of the prefix starts from. */
int rp_cluster_registry_read(struct rp_cluster_registry *r, struct rp_etcd *e,
                             int64_t *revision, char *err, size_t errlen);

#endif
