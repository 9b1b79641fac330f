/* Slot allocation for one store (see slot_allocator.h). */
#include "slot_allocator.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

int slot_allocator_init(struct slot_allocator *a, uint32_t capacity)
{
  *a = (struct slot_allocator){ 0 };
  return slot_allocator_grow(a, capacity);
}

void slot_allocator_destroy(struct slot_allocator *a)
{
  free(a->free_stack);
  *a = (struct slot_allocator){ 0 };
}

int slot_allocator_grow(struct slot_allocator *a, uint32_t capacity)
{
  if (capacity <= a->capacity)
    return 0;
  uint32_t *stack = realloc(a->free_stack, (size_t)capacity * sizeof *stack);
  if (!stack && capacity > 0) {
    errno = ENOMEM;
    return -1;
  }
  a->free_stack = stack;
  a->capacity = capacity;
  return 0;
}

int64_t slot_allocator_alloc(struct slot_allocator *a)
{
  uint32_t slot;
  if (a->free_count > 0)
    slot = a->free_stack[--a->free_count];
  else if (a->watermark < a->capacity)
    slot = a->watermark++;
  else
    return -1;
  a->in_use++;
  return slot;
}

void slot_allocator_release(struct slot_allocator *a, uint32_t slot)
{
  assert(slot < a->watermark && a->in_use > 0 && a->free_count < a->capacity);
  a->free_stack[a->free_count++] = slot;
  a->in_use--;
}

void slot_allocator_rebuild(struct slot_allocator *a, const uint64_t *used)
{
  uint32_t top = 0;
  a->in_use = 0;
  for (uint32_t slot = 0; slot < a->capacity; slot++)
    if (used[slot / 64] >> (slot % 64) & 1) {
      a->in_use++;
      top = slot + 1;
    }
  a->watermark = top;
  a->free_count = 0;
  /* Highest first on the stack, so the lowest free slot is handed out first. */
  for (uint32_t slot = top; slot-- > 0;)
    if (!(used[slot / 64] >> (slot % 64) & 1))
      a->free_stack[a->free_count++] = slot;
}

uint32_t slot_allocator_available(const struct slot_allocator *a)
{
  return a->capacity - a->in_use;
}
