/* Servers in a fresh random order each sweep (placement_order.h). */
#include "placement_order.h"

static uint64_t next_random(struct placement_order *o)
{
  if (o->rng == 0)
    o->rng = 0x9e3779b97f4a7c15ull;
  o->rng ^= o->rng << 13;
  o->rng ^= o->rng >> 7;
  o->rng ^= o->rng << 17;
  return o->rng;
}

void placement_order_begin(struct placement_order *o, unsigned nservers)
{
  if (o->next < o->count && o->count == nservers)
    return;
  o->count = nservers;
  o->next = 0;
  for (unsigned i = 0; i < nservers; i++)
    o->order[i] = (server_index)i;
  for (unsigned i = nservers; i > 1; i--) { /* Fisher-Yates */
    unsigned j = (unsigned)(next_random(o) % i);
    server_index t = o->order[i - 1];
    o->order[i - 1] = o->order[j];
    o->order[j] = t;
  }
}

unsigned placement_order_candidate(const struct placement_order *o, unsigned k)
{
  return o->order[(o->next + k) % o->count];
}

void placement_order_taken(struct placement_order *o, unsigned k)
{
  o->next += k + 1;
}
