/* engine.c's calls that the other files of the engine share, on top of the engine's
 * state: struct rampart_engine and its ownership rules are engine_core.h's, which this
 * header includes. Only files of src/engine/ include this one; the folder's files are
 * listed in its README, the layers in src/README.md, and the design in docs/engine.md.
 *
 * Errors: set-up calls (server_set_open, ...) return -1 with a sentence in err
 * (CONTRIBUTING.md, convention 1); I/O calls (engine_run_sync) 0 or negative errno
 * (convention 2); allocators 0 or -1 (out of memory).
 */
#ifndef RAMPART_ENGINE_INTERNAL_H
#define RAMPART_ENGINE_INTERNAL_H

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "engine_core.h"
#include "page_op.h"
#include "page_rmw.h"
#include "rampart.h"
#include "server_set.h"
#include "stats_file.h"

/* engine.c */
/* Submits one request and sleeps until it completes (frontend threads only). */
int engine_run_sync(struct rampart_engine *e, enum rampart_op op, void *buf, uint32_t length,
                    uint64_t offset, uint32_t flags);
/* One page of a frontend request ended with result (0 or -errno): the request
 * completes with its last page. */
void engine_request_page_ended(struct rampart_engine *e, struct rampart_io *io, int result);
/* Starts the frontend requests waiting for a page op, as many as the pool has ops for. */
void engine_start_ios(struct rampart_engine *e);
/* Runs fn(e, arg) on the engine (holding it, on the I/O thread or inline) and waits for
 * it; from a thread that is not the engine's own. */
void engine_call(struct rampart_engine *e, void (*fn)(struct rampart_engine *e, void *arg),
                 void *arg);
/* Runs the calls waiting for the engine; the I/O thread's wake, holding the engine. */
void engine_run_calls(struct rampart_engine *e);
/* For a frontend thread holding the engine while the loop sleeps (an inline start,
 * rampart_reap), what a pass of the loop does around its callbacks: */
/* the completions deferred during the pass, handed to their frontends; */
void engine_deliver_completions(struct rampart_engine *e);
/* the work before the poll: the mover, ops parked on it, sending what is queued; */
void engine_before_poll(struct rampart_engine *e);
/* the watchers started: a count to compare before and after; a change means the
 * sleeping loop must be woken to see them. */
unsigned engine_loop_changes(const struct rampart_engine *e);

/* engine_reap.c: rampart_reap's side, the sockets a frontend thread reads itself. */
int engine_reap_init(struct rampart_engine *e);
void engine_reap_destroy(struct rampart_engine *e);
/* The I/O thread, before it sleeps: wakes a reaper asleep in its poll if frontend
 * requests completed since it went to sleep. */
void engine_reap_wake(struct rampart_engine *e);
/* Each tick: the sockets go back to the loop once no reaper came for two ticks. */
void engine_reap_tick(struct rampart_engine *e);
/* On the I/O thread's wake: starts the grace timer a reaper that left with replies due
 * asked for (engine_reap.c). */
void engine_reap_start_grace(struct rampart_engine *e);
/* Every lent socket back to the loop now (closing). */
void engine_reap_give_back(struct rampart_engine *e);
/* A read or write starts: one no reaper comes back for (RAMPART_IO_NO_REAPER), with the
 * sockets lent and no reaper inside to read them, takes them back to the loop. */
void engine_reap_request_starts(struct rampart_engine *e, const struct rampart_io *io);
/* The I/O thread, before its poll: replies due on lent sockets that no reaper will come
 * back for (the loop sent them: a request that waited for a page op, a FREE, a move)
 * bring the sockets back to the loop. */
void engine_reap_before_loop_sleeps(struct rampart_engine *e);

/* prefetch.c: the prefetcher (prefetch=), on the engine like everything here. */
/* The cache for config.prefetch_pages, or none when it is 0: 0, or -1 out of memory. */
int prefetch_init(struct rampart_engine *e);
void prefetch_destroy(struct rampart_engine *e);
enum prefetch_answer {
  PREFETCH_MISS,   /* not there: the caller reads the page */
  PREFETCH_COPIED, /* copied into buf: the caller ends the page now */
  PREFETCH_JOINED, /* in flight: its landing ends io's page (engine_request_page_ended) */
};
/* A frontend read of `page` into buf, a page of io. */
enum prefetch_answer prefetch_answer(struct rampart_engine *e, struct rampart_io *io,
                                     uint64_t page, uint8_t *buf);
/* A frontend read of npages from first has started: its place in the trend, and the
 * prefetches the trend asks for. */
void prefetch_after_read(struct rampart_engine *e, uint64_t first, uint32_t npages);
/* page is written, trimmed or zeroed: no copy read before now may answer a read. */
void prefetch_forget(struct rampart_engine *e, uint64_t page);
/* Its counters into st (prefetch_*). */
void prefetch_stats(const struct rampart_engine *e, struct rampart_stats *st);

/* cluster_follow.c: a server whose etcd registration went (listed false) takes no new
 * pages, and is not declared lost for it; listed true undoes that. True when that
 * changed the server. */
bool server_membership_set_listed(struct rampart_engine *e, const char *address, bool listed,
                                  const char *domain);

/* server_membership.c (on the loop) */
/* A pass of the mover ended: drains that finished end (and removes happen). */
void server_membership_pass_done(struct rampart_engine *e);

#endif
