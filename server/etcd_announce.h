/* rampartd --etcd: the server announces itself in etcd (docs/scaling.md's keys, under a
 * lease), so devices find it with no file edited anywhere.
 *
 * A thread of its own talks to etcd; the event loop only copies its numbers (free
 * pages, pressure, draining) into a mutex-guarded slot once a second, so no page
 * request ever waits on etcd, and etcd being down changes nothing here but a log line.
 * The thread's memory is fixed at start: its stack, one curl handle, one reply buffer.
 *
 * Errors: NULL with a sentence in err (CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_SERVER_ETCD_ANNOUNCE_H
#define RAMPART_SERVER_ETCD_ANNOUNCE_H

#include "rps_server.h"

struct rps_announce;

/* Starts announcing srv (running on srv->loop) as `advertise` (HOST:PORT clients
 * reach). NULL with err when the options do not parse or the thread cannot start;
 * etcd being unreachable is not an error (the thread keeps trying). */
struct rps_announce *rps_announce_start(struct rps_server *srv, const char *advertise,
                                        char *err, size_t errlen);

/* A clean stop: the lease is revoked (its keys go at once), bounded by a few seconds,
 * and the thread joined. Call from the loop's thread, after the loop ended. */
void rps_announce_stop(struct rps_announce *a);

#endif
