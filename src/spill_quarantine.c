/* Freed spill slots wait here until no read that could still see them is in flight.
 *
 * A server connection delivers a READ before a later WRITE to the same slot; io_uring
 * does not. So when a page leaves the spill store (moved back to a server, rewritten,
 * trimmed) while a read of its old slot is in flight, reusing the slot at once could
 * let a new page's write land first and the read return the wrong page's bytes. Two
 * epochs fix that: each read counts in the epoch it started in, each freed slot joins
 * the current epoch's list, and when every read of the previous epoch has finished,
 * that epoch's slots go back to the store and the epochs turn over. The lists are
 * threaded through one array indexed by slot: no allocation after open.
 */
#include <stdlib.h>

#include "engine_internal.h"

#define NO_SLOT UINT32_MAX

int spill_quarantine_init(struct spill_quarantine *q, uint64_t capacity)
{
  q->next = capacity ? malloc(capacity * sizeof *q->next) : NULL;
  if (capacity && !q->next)
    return -1;
  q->head[0] = q->head[1] = NO_SLOT;
  q->reads[0] = q->reads[1] = 0;
  q->current = 0;
  return 0;
}

void spill_quarantine_destroy(struct spill_quarantine *q)
{
  free(q->next);
  q->next = NULL;
}

unsigned spill_quarantine_read_started(struct spill_quarantine *q)
{
  q->reads[q->current]++;
  return q->current;
}

void spill_quarantine_read_done(struct spill_quarantine *q, unsigned epoch)
{
  q->reads[epoch]--;
}

void spill_quarantine_free(struct spill_quarantine *q, uint32_t slot)
{
  q->next[slot] = q->head[q->current];
  q->head[q->current] = slot;
}

void spill_quarantine_advance(struct spill_quarantine *q, struct spill_store *store)
{
  unsigned prev = q->current ^ 1u;
  if (q->reads[prev] != 0)
    return;
  for (uint32_t s = q->head[prev]; s != NO_SLOT;) {
    uint32_t next = q->next[s];
    spill_store_free_slot(store, s);
    s = next;
  }
  q->head[prev] = NO_SLOT;
  q->current = prev; /* the drained epoch becomes the current one */
}
