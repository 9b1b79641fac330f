/* The request buffers of all of rampart-nbd-server's connections (nbd_buffer_budget.h):
 * one counter that every connection's thread takes from, without a lock. */
#include "nbd_buffer_budget.h"

void nbd_buffer_budget_init(struct nbd_buffer_budget *b, uint64_t limit)
{
  atomic_init(&b->used, 0);
  b->limit = limit;
}

bool nbd_buffer_budget_take(struct nbd_buffer_budget *b, uint64_t bytes)
{
  uint64_t used = atomic_load_explicit(&b->used, memory_order_relaxed);
  do {
    if (bytes > b->limit - used)
      return false;
  } while (!atomic_compare_exchange_weak_explicit(
    &b->used, &used, used + bytes, memory_order_relaxed, memory_order_relaxed));
  return true;
}

void nbd_buffer_budget_give(struct nbd_buffer_budget *b, uint64_t bytes)
{
  atomic_fetch_sub_explicit(&b->used, bytes, memory_order_relaxed);
}
