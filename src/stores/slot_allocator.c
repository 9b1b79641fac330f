/* Slot allocation for one store: a two-level bitmap (see slot_allocator.h). */
#include "slot_allocator.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint64_t summary_words(uint64_t words)
{
  return (words + 63) / 64;
}

static void set_nonfull(struct slot_allocator *a, uint64_t w, bool nonfull)
{
  uint64_t bit = UINT64_C(1) << (w % 64);
  if (nonfull)
    a->nonfull[w / 64] |= bit;
  else
    a->nonfull[w / 64] &= ~bit;
}

/* Bits past capacity stay set, so they are never handed out. */
static void mark_past_capacity(struct slot_allocator *a)
{
  unsigned tail = (unsigned)(a->capacity % 64);
  if (tail) {
    a->used[a->words - 1] |= ~UINT64_C(0) << tail;
    set_nonfull(a, a->words - 1, a->used[a->words - 1] != ~UINT64_C(0));
  }
}

int slot_allocator_init(struct slot_allocator *a, uint64_t capacity)
{
  *a = (struct slot_allocator){ 0 };
  return slot_allocator_grow(a, capacity);
}

void slot_allocator_destroy(struct slot_allocator *a)
{
  free(a->used);
  free(a->nonfull);
  *a = (struct slot_allocator){ 0 };
}

int slot_allocator_grow(struct slot_allocator *a, uint64_t capacity)
{
  if (capacity <= a->capacity)
    return 0;
  uint64_t words = (capacity + 63) / 64;
  uint64_t *used = realloc(a->used, words * sizeof *used);
  if (!used) {
    errno = ENOMEM;
    return -1;
  }
  a->used = used;
  uint64_t *nonfull = realloc(a->nonfull, summary_words(words) * sizeof *nonfull);
  if (!nonfull) {
    errno = ENOMEM;
    return -1;
  }
  a->nonfull = nonfull;
  memset(a->nonfull + summary_words(a->words), 0,
         (summary_words(words) - summary_words(a->words)) * sizeof *nonfull);
  /* The old last word's bits past the old capacity become free slots. */
  if (a->capacity % 64)
    a->used[a->words - 1] &= ~(~UINT64_C(0) << (a->capacity % 64));
  memset(a->used + a->words, 0, (words - a->words) * sizeof *used);
  uint64_t first_changed = a->capacity / 64;
  a->words = words;
  a->capacity = capacity;
  for (uint64_t w = first_changed; w < words; w++)
    set_nonfull(a, w, a->used[w] != ~UINT64_C(0));
  mark_past_capacity(a);
  return 0;
}

bool slot_allocator_is_used(const struct slot_allocator *a, uint64_t slot)
{
  return slot < a->capacity && (a->used[slot / 64] >> (slot % 64) & 1);
}

static void mark_used(struct slot_allocator *a, uint64_t slot)
{
  uint64_t w = slot / 64;
  a->used[w] |= UINT64_C(1) << (slot % 64);
  if (a->used[w] == ~UINT64_C(0))
    set_nonfull(a, w, false);
  a->in_use++;
}

int64_t slot_allocator_alloc(struct slot_allocator *a)
{
  if (a->in_use >= a->capacity)
    return -1;
  uint64_t n = summary_words(a->words);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t sw = (a->hint + i) % n;
    if (!a->nonfull[sw])
      continue;
    uint64_t w = sw * 64 + (uint64_t)__builtin_ctzll(a->nonfull[sw]);
    uint64_t slot = w * 64 + (uint64_t)__builtin_ctzll(~a->used[w]);
    mark_used(a, slot);
    a->hint = sw;
    return (int64_t)slot;
  }
  return -1; /* unreachable while in_use is right */
}

int slot_allocator_release(struct slot_allocator *a, uint64_t slot)
{
  if (!slot_allocator_is_used(a, slot))
    return -1;
  uint64_t w = slot / 64;
  a->used[w] &= ~(UINT64_C(1) << (slot % 64));
  set_nonfull(a, w, true);
  a->in_use--;
  return 0;
}

int slot_allocator_claim(struct slot_allocator *a, uint64_t slot)
{
  if (slot >= a->capacity)
    return -1;
  if (!slot_allocator_is_used(a, slot))
    mark_used(a, slot);
  return 0;
}

void slot_allocator_rebuild(struct slot_allocator *a, const uint64_t *used)
{
  a->in_use = 0;
  for (uint64_t w = 0; w < a->words; w++) {
    a->used[w] = used[w];
    a->in_use += (uint64_t)__builtin_popcountll(used[w]);
  }
  /* A predecessor's bits past capacity are not slots. */
  if (a->capacity % 64)
    a->in_use -= (uint64_t)__builtin_popcountll(a->used[a->words - 1] &
                                                (~UINT64_C(0) << (a->capacity % 64)));
  for (uint64_t w = 0; w < a->words; w++)
    set_nonfull(a, w, a->used[w] != ~UINT64_C(0));
  mark_past_capacity(a);
  a->hint = 0;
}

uint64_t slot_allocator_available(const struct slot_allocator *a)
{
  return a->capacity - a->in_use;
}

uint64_t slot_allocator_bytes(const struct slot_allocator *a)
{
  return (a->words + summary_words(a->words)) * sizeof(uint64_t);
}
