/* The spill store's slot quarantine (spill_quarantine.h). */
#include <stdlib.h>

#include "spill_quarantine.h"

#define NO_SLOT UINT32_MAX

int spill_quarantine_init(struct spill_quarantine *q, uint64_t capacity)
{
  q->next = capacity ? malloc(capacity * sizeof *q->next) : NULL;
  if (capacity && !q->next)
    return -1;
  q->head[0] = q->head[1] = NO_SLOT;
  q->in_flight[0] = q->in_flight[1] = 0;
  q->current = 0;
  return 0;
}

void spill_quarantine_destroy(struct spill_quarantine *q)
{
  free(q->next);
  q->next = NULL;
}

unsigned spill_quarantine_io_started(struct spill_quarantine *q)
{
  q->in_flight[q->current]++;
  return q->current;
}

void spill_quarantine_io_done(struct spill_quarantine *q, unsigned epoch)
{
  q->in_flight[epoch]--;
}

void spill_quarantine_free(struct spill_quarantine *q, uint32_t slot)
{
  q->next[slot] = q->head[q->current];
  q->head[q->current] = slot;
}

void spill_quarantine_advance(struct spill_quarantine *q, struct spill_store *store)
{
  unsigned prev = q->current ^ 1u;
  if (q->in_flight[prev] != 0)
    return;
  for (uint32_t s = q->head[prev]; s != NO_SLOT;) {
    uint32_t next = q->next[s];
    spill_store_free_slot(store, s);
    s = next;
  }
  q->head[prev] = NO_SLOT;
  q->current = prev; /* the drained epoch becomes the current one */
}
