/* Test helper: a cluster of real rampartd processes and a pager engine over it.
 *
 * Each server watches its own pressure file, written calm at start, so the host's real
 * memory pressure cannot move pages around under a test and a test can raise one
 * server's pressure by rewriting its file. Servers may be started hostile
 * (`rampartd --test-fault MODE`) to test page verification.
 */
#ifndef RAMPART_TEST_ENGINE_CLUSTER_H
#define RAMPART_TEST_ENGINE_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "netns_host.h"
#include "rampart.h"
#include "server_process.h"

/* test_engine_scale runs the engine over 64. */
#define RP_TEST_MAX_SERVERS 64


struct rp_test_cluster {
  char dir[512]; /* temporary directory: key, pressure files, logs */
  char psi[RP_TEST_MAX_SERVERS][640];
  char key_path[600];
  char memory[16]; /* each server's --memory */
  struct rp_key key;
  unsigned n;
  struct rp_test_server servers[RP_TEST_MAX_SERVERS];
  /* With rp_test_cluster_start_netns: each server's own network namespace. */
  struct rp_test_netns netns[RP_TEST_MAX_SERVERS];
  /* Arguments every server gets after the usual ones (rp_test_cluster_start_args);
   * NULL for none. */
  const char *const *member_args;
};

/* Starts n servers lending `memory` each. faults (may be NULL) names, per server, a
 * --test-fault mode or NULL for an honest server. 0, or -1 with a message on stderr. */
int rp_test_cluster_start(struct rp_test_cluster *c, unsigned n, const char *memory,
                          const char *const *faults);
/* The same, each server in a network namespace of its own (netns_host.h) listening on
 * that namespace's address, so a test can partition or impair one server's link. The
 * caller checks rp_test_netns_supported first. */
int rp_test_cluster_start_netns(struct rp_test_cluster *c, unsigned n, const char *memory);
/* Like rp_test_cluster_start, every server also given member_args (NULL-terminated;
 * they must outlive the cluster, as restarts pass them again), such as --metrics. */
int rp_test_cluster_start_args(struct rp_test_cluster *c, unsigned n, const char *memory,
                               const char *const *member_args);
/* Starts server i again on the address it had (killing it first if it runs), as a
 * fresh process with no sessions, and with --test-fault fault unless that is NULL. 0 or
 * -1. */
int rp_test_cluster_restart(struct rp_test_cluster *c, unsigned i, const char *fault);
/* Stops every server still running, by PID, and removes the directory. Fails the
 * running cmocka test when a server the test did not kill had died on its own, or did
 * not exit 0 on SIGTERM (rp_test_server_stop_clean). */
void rp_test_cluster_stop(struct rp_test_cluster *c);

/* Opens an engine of `pages` pages over the cluster (c NULL: standalone), with extra
 * key, value pairs (NULL-terminated, may be NULL) applied last. For cmocka tests: a
 * refused setting or a failed open fails the running test with the engine's message. */
struct rampart_engine *rp_test_engine_open(const struct rp_test_cluster *c, uint64_t pages,
                                           const char *const *extra);
/* The same, with the engine told to reach server i at addrs[i] instead (a relay). */
struct rampart_engine *rp_test_engine_open_at(const struct rp_test_cluster *c,
                                              const char *const *addrs, uint64_t pages,
                                              const char *const *extra);

#endif
