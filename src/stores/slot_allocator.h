/* Which slots of one store are free: a server's reservation or the standalone RAM
 * store (the spill store keeps a bitmap of its own, spill_store.c). Slots never used come from a rising watermark; released ones
 * go on a stack and are reused first, so alloc and free are O(1) and allocate nothing.
 * The stack is sized to the capacity up front; growing the capacity (a larger server
 * reservation) is the only call that allocates, and it happens off the per-page path.
 *
 * Errors: 0 or -1 (out of memory, or no free slot), as each call says
 * (docs/CONTRIBUTING.md).
 */
#ifndef RAMPART_SLOT_ALLOCATOR_H
#define RAMPART_SLOT_ALLOCATOR_H

#include <stdbool.h>
#include <stdint.h>

struct slot_allocator {
  uint32_t capacity;    /* slots 0..capacity-1 may be handed out */
  uint32_t watermark;   /* slots >= watermark have never been handed out */
  uint32_t free_count;  /* entries on the stack */
  uint32_t *free_stack;
  uint32_t in_use;
};

int slot_allocator_init(struct slot_allocator *a, uint32_t capacity);
void slot_allocator_destroy(struct slot_allocator *a);
/* Raises the capacity (never lowers it). 0 or -1 (ENOMEM). */
int slot_allocator_grow(struct slot_allocator *a, uint32_t capacity);
/* A free slot, or -1 when every slot is in use. */
int64_t slot_allocator_alloc(struct slot_allocator *a);
void slot_allocator_release(struct slot_allocator *a, uint32_t slot);
/* Makes the slots set in `used` (a bit per slot, capacity bits) the ones in use, the rest
 * free: how a restarted pager takes over the slots its predecessor handed out. */
void slot_allocator_rebuild(struct slot_allocator *a, const uint64_t *used);
/* Slots still available. */
uint32_t slot_allocator_available(const struct slot_allocator *a);

#endif
