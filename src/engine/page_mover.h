/* The mover: the engine's background page moves (rebuild, cleaning, migration,
 * evacuation, drain, rebalance, protection, move-back; page_mover.c says what each is).
 *
 * Its state (where each scan is, whether cleaning runs and how far, the rebalance
 * budget, the rebuild clock, its counters) is its own: struct page_mover is defined in
 * page_mover.c and nowhere else, so no other file can change it behind the mover's
 * back. Others ask through the functions below. Everything here runs on the engine
 * (the holder of its lock), like the rest of the engine.
 *
 * Errors: page_mover_init returns 0 or -1 (out of memory); a move that fails is retried
 * or counted, never returned (CONTRIBUTING.md).
 */
#ifndef RAMPART_PAGE_MOVER_H
#define RAMPART_PAGE_MOVER_H

#include <stdbool.h>
#include <stdint.h>

struct rampart_engine;
struct rampart_stats;
struct page_op;
struct state_segment_rebuild;

/* Made with the engine, after its group size is known: 0, or -1 (out of memory). */
int page_mover_init(struct rampart_engine *e);
void page_mover_free(struct rampart_engine *e);

/* Once a second: cleaning and rebalancing decide whether to run, then a pass goes on. */
void page_mover_tick(struct rampart_engine *e);
/* Before each loop iteration blocks: starts moves while there is work and room. */
void page_mover_run(struct rampart_engine *e);
/* Moves in flight (each holds a page op). */
unsigned page_mover_in_flight(const struct rampart_engine *e);
/* A move finished since the last call (and so writes held back by cleaning may go on):
 * true once, then false until another finishes. */
bool page_mover_take_wakeup(struct rampart_engine *e);
bool page_mover_wakeup_pending(const struct rampart_engine *e);
/* Cleaning is far behind: frontend writes should wait for moves to finish. */
bool page_mover_should_throttle(struct rampart_engine *e);

/* A server was just declared lost: starts the rebuild clock, unless one is running. */
void page_mover_rebuild_begin(struct rampart_engine *e);
/* The rebuild clock as the pager's state keeps it, and back after a restart. */
void page_mover_rebuild_record(const struct rampart_engine *e,
                               struct state_segment_rebuild *r);
void page_mover_rebuild_restore(struct rampart_engine *e,
                                const struct state_segment_rebuild *r);

/* Per server: live pages stored there, and live pages that depend on it (stored there,
 * or in groups whose parity is there). Derived in one scan of the group table, never
 * counted incrementally, so they cannot drift; callers are rare (stats once a second,
 * the end of a rebuild pass, the log line when a server is lost). */
void page_mover_live_by_server(const struct rampart_engine *e, uint64_t *live,
                               uint64_t *at_risk);
uint64_t page_mover_at_risk(const struct rampart_engine *e, unsigned i);

/* Groups holding live pages that can take one more loss, and none (st->groups_one_spare,
 * groups_no_spare), in one scan of the group table. */
void page_mover_groups_by_spare(const struct rampart_engine *e, uint32_t *one,
                                uint32_t *none);

/* The mover's part of rampart_get_stats: cleaning, moves, rebuild. */
void page_mover_stats(const struct rampart_engine *e, struct rampart_stats *st);

#endif
