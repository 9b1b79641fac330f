/* Which slots of one store are free: a server's reservation, the spill file, or the
 * standalone RAM store. One bit per slot, plus one summary bit per 64 slots saying
 * "this word has a free slot": 1/32 of what a stack of 32-bit slot numbers costs (a
 * 1 GiB device's reservations: 50 KiB rather than 1.6 MiB; a 1 TiB spill file: 32 MiB
 * rather than 1 GiB). Allocation is next fit from the word where the last one found
 * room, so it is O(1) while that area has room and scans the summary (one word per
 * 4096 slots) only when it fills. Nothing is allocated per slot; growing the capacity
 * (a larger server reservation) is the only call that allocates, off the per-page path.
 *
 * Errors: 0 or -1 (out of memory, no free slot, or a slot that was not in use), as
 * each call says (CONTRIBUTING.md).
 */
#ifndef RAMPART_SLOT_ALLOCATOR_H
#define RAMPART_SLOT_ALLOCATOR_H

#include <stdbool.h>
#include <stdint.h>

struct slot_allocator {
  uint64_t capacity; /* slots 0..capacity-1 may be handed out */
  uint64_t in_use;
  uint64_t *used;    /* bit set: slot in use (or past capacity) */
  uint64_t *nonfull; /* bit w set: used[w] has a clear bit */
  uint64_t words;    /* of used */
  uint64_t hint;     /* the summary word where the last allocation found room */
};

int slot_allocator_init(struct slot_allocator *a, uint64_t capacity);
void slot_allocator_destroy(struct slot_allocator *a);
/* Raises the capacity (never lowers it). 0 or -1 (ENOMEM). */
int slot_allocator_grow(struct slot_allocator *a, uint64_t capacity);
/* A free slot, or -1 when every slot is in use. */
int64_t slot_allocator_alloc(struct slot_allocator *a);
/* 0, or -1 when slot is past capacity or not in use: the caller's map and the allocator
 * disagree, and freeing anyway would let two pages share the slot later. */
int slot_allocator_release(struct slot_allocator *a, uint64_t slot);
/* Marks slot in use if it is not already (idempotent); -1 past capacity. */
int slot_allocator_claim(struct slot_allocator *a, uint64_t slot);
bool slot_allocator_is_used(const struct slot_allocator *a, uint64_t slot);
/* Makes the slots set in `used` (a bit per slot, capacity bits) the ones in use, the rest
 * free: how a restarted pager takes over the slots its predecessor handed out. */
void slot_allocator_rebuild(struct slot_allocator *a, const uint64_t *used);
/* Slots still available. */
uint64_t slot_allocator_available(const struct slot_allocator *a);
/* The allocator's own memory, for the client's memory figure. */
uint64_t slot_allocator_bytes(const struct slot_allocator *a);

#endif
