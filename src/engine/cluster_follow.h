/* cluster=etcd://ENDPOINTS/NAME: a device's servers come from the cluster's registry in
 * etcd (rampartd --etcd, docs/scaling.md) and follow it while the device runs.
 *
 *   at open   cluster_follow_pick reads the registry and takes count= servers: the most
 *             free memory first, none under pressure or draining, one per failure
 *             domain before a second in any. The set is written down (cluster-cache=)
 *             so an open while etcd is down uses the last one.
 *   running   a thread of its own watches the registry, never the I/O thread: a server
 *             that announces a drain is drained off and removed (the machinery of
 *             rampartctl device ... remove); one whose key is gone is placed on no more
 *             but not declared lost (only the data path's health decides that); while
 *             the device has fewer than count= servers taking pages, the best
 *             candidate is added, so new servers and replacements after a loss come
 *             from etcd. A candidate that fails the handshake (a forged entry: no
 *             cluster key) is refused, named in the log, and not tried again for 60 s.
 *             The set is recorded in devices/HOST/pid-PID under a lease of its own, for
 *             rampartctl cluster.
 *
 * The data path never waits on etcd: an add connects in this thread, and etcd down only
 * stops the changes (rampart_pager_etcd_watch_live says so).
 *
 * Errors: NULL or -1 with a sentence in err (CONTRIBUTING.md, convention 1);
 * nothing else here fails.
 */
#ifndef RAMPART_CLUSTER_FOLLOW_H
#define RAMPART_CLUSTER_FOLLOW_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

struct rampart_engine;
struct rampart_stats;

/* A copy of c with servers filled from etcd, or from the cache when etcd cannot be
 * reached. NULL with err when neither gives a set. free() it. */
struct rampart_config *cluster_follow_pick(const struct rampart_config *c, char *err,
                                           size_t errlen);

/* The choice at attach, apart for tests: up to count entries of r (their indices in
 * out, in the order chosen) that can take pages (registered, advertised, not draining,
 * not under pressure, some memory free), one per failure domain before a second in any,
 * the most free memory first. Returns how many. */
struct rp_cluster_registry;
unsigned cluster_follow_choose(const struct rp_cluster_registry *r, unsigned count,
                               unsigned *out);

/* Starts the engine's follower into *followp; it drives e through rampart.h's entry
 * points and, for a server whose etcd registration went or came back,
 * server_membership_set_listed, and reads c (the engine's settings, which outlive it).
 * 0 or -1 with err. */
struct cluster_follow;
int cluster_follow_start(struct rampart_engine *e, const struct rampart_config *c,
                         struct cluster_follow **followp, char *err, size_t errlen);
/* Stops the follower in *followp, if any, and sets it NULL once its thread ended. */
void cluster_follow_stop(struct cluster_follow **followp);

/* The follower's part of the stats (whether the watch is live, events seen); f may be
 * NULL (no follower). */
void cluster_follow_stats(const struct cluster_follow *f, struct rampart_stats *st);

#endif
