/* Standalone RAM pages (local_store.c): the device's own memory when it has no servers
 * (memory=), one anonymous mapping and a slot allocator over it.
 *
 * Errors: local_store_init returns 0 or -1 (out of memory).
 */
#ifndef RAMPART_LOCAL_STORE_H
#define RAMPART_LOCAL_STORE_H

#include <stdint.h>

#include "slot_allocator.h"
#include "wire.h"

struct local_store {
  uint8_t *pages; /* mmap of capacity pages */
  struct slot_allocator slots;
};

int local_store_init(struct local_store *s, uint64_t pages);
void local_store_destroy(struct local_store *s);
static inline uint8_t *local_store_page(struct local_store *s, uint64_t slot)
{
  return s->pages + slot * RP_PAGE_SIZE;
}

#endif
