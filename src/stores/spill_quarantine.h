/* Freed spill slots wait here until no I/O that could still touch them is in flight.
 *
 * A server connection delivers a READ before a later WRITE to the same slot; io_uring
 * orders nothing between two requests to the same offset. So when a page leaves the
 * spill store (moved back to a server, rewritten, trimmed) while a read or a write of its
 * old slot is in flight, reusing the slot at once could let a new page's write land
 * first, and then the read return the wrong page's bytes or the old write overwrite the
 * new page. Two epochs fix that: every spill I/O counts in the epoch it started in, each
 * freed slot joins the current epoch's list, and when every I/O of the previous epoch
 * has finished, that epoch's slots go back to the store and the epochs turn over. The
 * lists are threaded through one array indexed by slot: no allocation after open.
 *
 * Owned by the engine's I/O thread.
 *
 * Errors: spill_quarantine_init returns 0 or -1 (out of memory; CONTRIBUTING.md);
 * the rest cannot fail.
 */
#ifndef RAMPART_SPILL_QUARANTINE_H
#define RAMPART_SPILL_QUARANTINE_H

#include <stdint.h>

#include "spill_store.h"

struct spill_quarantine {
  uint32_t *next; /* per slot: next slot in its epoch's list */
  uint32_t head[2];
  uint64_t in_flight[2]; /* spill I/Os in flight, by the epoch they started in */
  unsigned current;
};

int spill_quarantine_init(struct spill_quarantine *q, uint64_t capacity);
void spill_quarantine_destroy(struct spill_quarantine *q);
/* Every spill read and write, from its submission to its completion callback: returns
 * the epoch to hand back to spill_quarantine_io_done. */
unsigned spill_quarantine_io_started(struct spill_quarantine *q);
void spill_quarantine_io_done(struct spill_quarantine *q, unsigned epoch);
/* A slot no longer holds any current page; it returns to the store later. */
void spill_quarantine_free(struct spill_quarantine *q, uint32_t slot);
/* Returns the previous epoch's slots to the store once its I/O is done. */
void spill_quarantine_advance(struct spill_quarantine *q, struct spill_store *store);

#endif
